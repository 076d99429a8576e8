## GCF tables as OpenCL images (gcf_read "image" | "image-linear"), read by
## the register kernels (core_spread_register.cl.mako and
## core_interp_register.cl.mako) through one sampler.  Layout
## (clgrid.core.table.gcf_texels): the table ordered by distance, texel
## m = j O + f the kernel at distance (m - (S O) // 2) / O cells; separable
## tables one 2-D image per axis, a row a w plane; full tables (S O) x (S O)
## a plane, the planes the layers of a 3-D image (image_planes) or one 2-D
## image.  With "image-linear" the positions have `steps` sub-steps per table
## step and the sampler's linear filter interpolates between the table's
## samples (Romein 2012, section 4.1).
## Parameters (validated in clgrid/core/table.py, gcf_image_params, and here):
##   gcf_read ("image" | "image-linear"), real ("float": images hold float
##   texels), separable (bool), table_real (bool: one-channel real texels),
##   support S, table_oversample O (the table's steps), steps (positions per
##   table step, a power of two; 1 for "image"), coord_shift (float literal:
##   the texel coordinate of cell 0, sub-pixel 0, its centre included),
##   image_planes (bool, full tables: a 3-D image of w planes).
<%
    if gcf_read not in ("image", "image-linear"):
        raise ValueError("gcf_image.cl.mako reads images: gcf_read 'image' or 'image-linear'")
    if real != "float":
        raise ValueError("GCF images hold float32 texels: real must be float")
    if steps < 1 or steps & (steps - 1) or (gcf_read == "image" and steps != 1):
        raise ValueError("steps: a power of two, 1 for gcf_read 'image'")
    if image_planes and separable:
        raise ValueError("image_planes applies to full tables")
    linear = gcf_read == "image-linear"
    image_weight = "float" if table_real else "float2"
    full_image = "image3d_t" if image_planes else "image2d_t"
%>
// Unnormalised coordinates at texel centres, zero outside the table.  The
// linear filter blends an edge texel with that zero border, so footprint
// cells outside [0, S) are zeroed explicitly, not by the border.
__constant sampler_t gcf_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP
                                   | ${"CLK_FILTER_LINEAR" if linear else "CLK_FILTER_NEAREST"};

// Texel coordinate along one axis of footprint cell d for sub-pixel f (of
// the positions' steps): exact in float (multiples of 1 / steps).
inline float gcf_coord(const int d, const int f)
{
    return (float)(d * ${table_oversample}) + (float)f * ${repr(1.0 / steps)}f + ${coord_shift};
}

% if separable:
// Weight of footprint cell d (0 outside the footprint) of sub-pixel f in
// w plane `plane` of one axis's table.
inline ${image_weight} gcf_image_weight(read_only image2d_t table, const int d, const int f,
                                       const int plane)
{
    const float4 t = read_imagef(table, gcf_sampler,
                                 (float2)(gcf_coord(d, f), (float)plane + 0.5f));
%   if table_real:
    return (d >= 0 && d < ${support}) ? t.x : 0.0f;
%   else:
    return (d >= 0 && d < ${support}) ? t.xy : (float2)(0.0f, 0.0f);
%   endif
}
% else:
// Complex weight of footprint cell (du, dv) (0 outside the footprint) of
// sub-pixels (fu, fv) in w plane `plane`.
inline float2 gcf_image_weight_full(read_only ${full_image} table, const int du, const int dv,
                                    const int fu, const int fv, const int plane)
{
%   if image_planes:
    const float4 t = read_imagef(table, gcf_sampler, (float4)(gcf_coord(du, fu), gcf_coord(dv, fv),
                                                              (float)plane + 0.5f, 0.0f));
%   else:
    const float4 t = read_imagef(table, gcf_sampler, (float2)(gcf_coord(du, fu), gcf_coord(dv, fv)));
%   endif
    return (du >= 0 && du < ${support} && dv >= 0 && dv < ${support}) ? t.xy
                                                                      : (float2)(0.0f, 0.0f);
}
% endif

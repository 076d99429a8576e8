## Gridding core, stage "interpolate" (degridding): padded uv grid planes ->
## visibilities, the adjoint of core_spread.  One work-item per visibility,
## taken in the order of the device sort so that neighbouring work-items read
## neighbouring cells; each work-item owns its output, so no atomics.  With
## w-stacking the planes of one pass [plane0, plane0 + n_pass) are summed with
## their w-kernel weights and added to out (passes run in a fixed order).
## Parameters: real ("float" | "double"): grid precision; vis_real: output
##             precision; support (int W), beta; do_w, shifted, weighted,
##             masked (bool); with_f64 (always True).  out starts zeroed (points
##             with no valid position are never visited);
##             kernel_source ("es" | "table" | "table_full"): "table*" adds
##             interpolate_table, the adjoint of core_spread's table sources
##             (clgrid.Degridder on the core), with oversample (int O);
##             table_real is accepted and unused.
<%
    csuffix = "f32" if real == "float" else "f64"
    vec = real + "2"
    vvec = vis_real + "2"
    if kernel_source not in ("es", "table", "table_full"):
        raise ValueError(f"kernel_source must be 'es', 'table' or 'table_full', "
                         f"got {kernel_source!r}")
%>
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="es_kernel.cl.mako"/>
<%include file="complex.cl.mako"/>
<%include file="footprint.cl.mako"/>


__kernel void interpolate(__global const unsigned int *sorted_index, const unsigned int n_points,
                          __global const double *uvw, __global const double *freq_scale,
                          const unsigned int nchan,
                          __global ${vvec} *out, const unsigned int npol, const unsigned int pol,
                          __global const ${vis_real} *wgt, __global const unsigned char *mask,
                          __global const ${vec} *planes, const int nu, const int nv,
                          const double u_scale, const double v_scale,
                          const double w_scale, const double w_offset,
                          const int plane0, const int n_pass,
                          const double shift_u, const double shift_v)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_points)
        return;
    const unsigned int k = sorted_index[i];
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double fu = footprint_start(u), fv = footprint_start(v);
    const int cu = wrap_cell(fu, nu), cv = wrap_cell(fv, nv);
    const ${real} xu = (${real})(fu - u), xv = (${real})(fv - v);
    ${real} ku[SUPPORT], kv[SUPPORT];
    int iv[SUPPORT];
    for (int a = 0; a < SUPPORT; ++a) {
        ku[a] = es_kernel(xu + (${real})a);
        kv[a] = es_kernel(xv + (${real})a);
        iv[a] = (cv + a) < nv ? cv + a : cv + a - nv;
    }
% if do_w:
    const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
    const int p_first = max((int)footprint_start(w), plane0);
    const int p_end = min((int)footprint_start(w) + SUPPORT, plane0 + n_pass);
% else:
    const int p_first = plane0, p_end = plane0 + 1;
% endif
    ${vec} sum = (${vec})(0, 0);
    for (int p = p_first; p < p_end; ++p) {
        __global const ${vec} *grid = planes + (size_t)(p - plane0) * nu * nv;
        ${vec} plane_sum = (${vec})(0, 0);
        int iu = cu;
        for (int a = 0; a < SUPPORT; ++a) {
            __global const ${vec} *grid_row = grid + (size_t)iu * nv;
            ${vec} row_sum = (${vec})(0, 0);
            for (int b = 0; b < SUPPORT; ++b)
                row_sum += grid_row[iv[b]] * kv[b];
            plane_sum += row_sum * ku[a];
            iu = (iu + 1 == nu) ? 0 : iu + 1;
        }
% if do_w:
        sum += plane_sum * es_kernel((${real})((double)p - w));
% else:
        sum += plane_sum;
% endif
    }
% if shifted:
    {
        double c;
        const double s = sincos(-f * (uvw[3 * row] * shift_u + uvw[3 * row + 1] * shift_v), &c);
        sum = cmul_${csuffix}(sum, (${vec})((${real})c, (${real})s));
    }
% endif
% if weighted:
    sum *= (${real})wgt[k];
% endif
% if masked:
    sum = mask[k] ? sum : (${vec})(0, 0);
% endif
    const size_t o = (size_t)k * npol + pol;
    out[o] += (${vvec})((${vis_real})sum.x, (${vis_real})sum.y);
}
% if kernel_source != "es":

#define OVERSAMPLE ${oversample}
#define TABLE_CONJUGATE (1 << 30)
#define TABLE_INDEX_MASK (TABLE_CONJUGATE - 1)

// clgrid.Degridder on the core: one work-item per kept point in the order of
// set points' table_records (cells: footprint start y0, x0, table index |
// TABLE_CONJUGATE, visibility index), every polarisation: the footprint of
// the (npol, ny, nx) grid times the conjugated table weights, summed in a
// fixed order, conjugated back where uvw was negated, times the weight, zero
// where that polarisation is flagged.  One writer per visibility.
// Separable: table_a = table_v (rows), table_b = table_u (columns); full:
// table_a = the (w_planes, O, O, S, S) table.
__kernel void interpolate_table(__global const int4 *cells, const unsigned int n_points,
                                __global const ${vec} *grid, const int nx, const int ny,
                                const unsigned int npol,
                                __global const ${vec} *table_a, __global const ${vec} *table_b,
                                __global const ${real} *wgt,
                                __global const unsigned char *flags, __global ${vec} *out)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_points)
        return;
    const int4 cell = cells[i];
    const int index = cell.z & TABLE_INDEX_MASK;
    const size_t k = (size_t)(unsigned int)cell.w;
%   if kernel_source == "table":
    const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
    const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
    __global const ${vec} *kernel_v = table_a + (size_t)(w_plane * OVERSAMPLE + fy) * SUPPORT;
    __global const ${vec} *kernel_u = table_b + (size_t)(w_plane * OVERSAMPLE + fx) * SUPPORT;
%   else:
    __global const ${vec} *slice = table_a + (size_t)index * SUPPORT * SUPPORT;
%   endif
    for (unsigned int pol = 0; pol < npol; ++pol) {
        __global const ${vec} *footprint = grid + ((size_t)pol * ny + cell.x) * nx + cell.y;
        ${vec} sum = (${vec})(0, 0);
        for (int a = 0; a < SUPPORT; ++a) {
%   if kernel_source == "table":
            ${vec} row = (${vec})(0, 0);
            for (int b = 0; b < SUPPORT; ++b)
                row += cmulconj_${csuffix}(footprint[(size_t)a * nx + b], kernel_u[b]);
            sum += cmulconj_${csuffix}(row, kernel_v[a]);
%   else:
            for (int b = 0; b < SUPPORT; ++b)
                sum += cmulconj_${csuffix}(footprint[(size_t)a * nx + b], slice[a * SUPPORT + b]);
%   endif
        }
        if (cell.z & TABLE_CONJUGATE)
            sum.y = -sum.y;
%   if weighted:
        sum *= wgt[k * npol + pol];
%   endif
%   if masked:
        sum = flags[k * npol + pol] ? (${vec})(0, 0) : sum;
%   endif
        out[k * npol + pol] = sum;
    }
}
% endif

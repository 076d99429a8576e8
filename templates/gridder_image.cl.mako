## Table gridding with the GCF in an OpenCL image, sampled with hardware
## linear interpolation (Romein 2012, section 4.1): the scatter strategy of
## gridder.cl.mako with the separable-table lookups replaced by image reads.
## Parameters: those of gridder.cl.mako (separable only) plus
##   image_oversample O_img (samples per cell stored in the image),
##   position_oversample O_pos (sub-pixel resolution of the record positions:
##   header.z = fu + O_pos * fv).
## Image: width S * O_img, height w_planes, RGBA float texels
##   (u real, u imaginary, v real, v imaginary); texel k holds the kernel at
##   distance (k - (S * O_img) // 2) / O_img cells.
<%
    vec = real + "2"
    suffix = "f32" if real == "float" else "f64"
    catomic = "atomic_add_c64" if real == "float" else "atomic_add_c128"
    blocks_u = bin_u // block_u
    blocks_v = bin_v // block_v
    n_blocks = blocks_u * blocks_v
%>
<%include file="atomics.cl.mako"/>
<%include file="complex.cl.mako"/>

#define SUPPORT ${support}
#define POSITION_OVERSAMPLE ${position_oversample}
#define IMAGE_OVERSAMPLE ${image_oversample}
#define HALF_SPAN_POS ${(support * position_oversample) // 2}
#define HALF_SPAN_IMG ${(support * image_oversample) // 2}

// Unnormalised coordinates, zero outside the table (the kernel's support
// ends there), linear interpolation between stored samples.
__constant sampler_t gcf_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP
                                   | CLK_FILTER_LINEAR;

// Image x coordinate of footprint cell j for sub-pixel index f: the cell's
// distance from the visibility times O_img, shifted to the texel centre.
inline float image_x(int j, int f)
{
    return (float)((j * POSITION_OVERSAMPLE + f - HALF_SPAN_POS) * IMAGE_OVERSAMPLE)
           / POSITION_OVERSAMPLE + HALF_SPAN_IMG + 0.5f;
}
#define NPOL ${npol}
#define BIN_U ${bin_u}
#define BIN_V ${bin_v}
#define N_BLOCKS ${n_blocks}
#define WG_SIZE ${wg_size}
#define N_SUB ${n_sub}
#define BATCH ${batch}
#define VIS_PER_GROUP ${vis_per_group}

// Position of a block with bin offset `offset` (a multiple of the block size)
// in the bounding box that starts at `box` (also a multiple): the box holds
// exactly one copy of every bin offset, so each block has one grid position
// per visibility, and that position only changes when the box slides past it.
inline int block_position(int box, int offset, int bin)
{
    const int shift = offset - box % bin;
    return box + (shift < 0 ? shift + bin : shift);
}

inline void flush_point(volatile __global ${real} *grid, int u, int v, int nx, int ny,
                        const ${vec} *acc, uint *flushes)
{
    // Blocks in the box padding past the grid edge only ever hold zeros.
    if (u < 0 || v < 0 || u >= nx || v >= ny)
        return;
% for p in range(npol):
    ${catomic}(grid + 2 * ((size_t)(${p} * ny + v) * nx + u), acc[${p}]);
% endfor
% if count_flushes:
    *flushes += 1;
% endif
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void grid_records(__global const int4 *header,          // u0, v0, fu + O fv, W plane
                  __global const ${vec} *vis,           // (n_records, npol), pre-weighted
                  const int n_records,
                  __read_only image2d_t gcf_image,      // (w_planes, S * O_img) RGBA
                  volatile __global ${real} *grid,
                  const int nx, const int ny,
                  volatile __global uint *flush_count)
{
    __local int4 l_header[BATCH];
    __local ${vec} l_vis[BATCH * NPOL];
    const int lid = get_local_id(0);
    // dimension 1 enumerates tiles: groups of WG_SIZE blocks of one bin
    const int block_index = get_group_id(1) * WG_SIZE + lid % (WG_SIZE / N_SUB);
    const int stream = lid / (WG_SIZE / N_SUB);
    const bool active = block_index < N_BLOCKS && stream < N_SUB;
    const int offset_u = (block_index % ${blocks_u}) * ${block_u};
    const int offset_v = (block_index / ${blocks_u}) * ${block_v};
    const int group_first = get_group_id(0) * VIS_PER_GROUP;
    const int group_end = min(group_first + VIS_PER_GROUP, n_records);
    uint flushes = 0;

    for (int batch_first = group_first; batch_first < group_end; batch_first += BATCH) {
        const int batch_n = min(BATCH, group_end - batch_first);
        barrier(CLK_LOCAL_MEM_FENCE);  // previous batch fully consumed
        for (int i = lid; i < batch_n; i += WG_SIZE) {
            l_header[i] = header[batch_first + i];
% for p in range(npol):
            l_vis[i * NPOL + ${p}] = vis[(size_t)(batch_first + i) * NPOL + ${p}];
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!active)
            continue;
        const int stream_len = (batch_n + N_SUB - 1) / N_SUB;
        const int first = min(stream * stream_len, batch_n);
        const int end = min(first + stream_len, batch_n);
        int cur_u = -1, cur_v = -1;
        ${vec} acc[${block_v}][${block_u}][NPOL];
% for b in range(block_v):
%   for a in range(block_u):
%     for p in range(npol):
        acc[${b}][${a}][${p}] = (${vec})(0, 0);
%     endfor
%   endfor
% endfor
        for (int i = first; i < end; ++i) {
            const int4 h = l_header[i];
            const int pos_u = block_position(h.x - h.x % ${block_u}, offset_u, BIN_U);
            const int pos_v = block_position(h.y - h.y % ${block_v}, offset_v, BIN_V);
            if (pos_u != cur_u || pos_v != cur_v) {
% for b in range(block_v):
%   for a in range(block_u):
                if (cur_u >= 0)
                    flush_point(grid, cur_u + ${a}, cur_v + ${b}, nx, ny, acc[${b}][${a}], &flushes);
%     for p in range(npol):
                acc[${b}][${a}][${p}] = (${vec})(0, 0);
%     endfor
%   endfor
% endfor
                cur_u = pos_u;
                cur_v = pos_v;
            }
            const int fu = h.z % POSITION_OVERSAMPLE;
            const int fv = h.z / POSITION_OVERSAMPLE;
            const float plane_y = h.w + 0.5f;
            const int du = pos_u - h.x;   // footprint column of the block's first point
            const int dv = pos_v - h.y;
            ${vec} value[NPOL];
% for p in range(npol):
            value[${p}] = l_vis[i * NPOL + ${p}];
% endfor
            ${vec} wu[${block_u}], wv[${block_v}];
% for a in range(block_u):
            {
                const float4 t = read_imagef(gcf_image, gcf_sampler,
                                             (float2)(image_x(du + ${a}, fu), plane_y));
                wu[${a}] = (du + ${a} >= 0 && du + ${a} < SUPPORT) ? (${vec})(t.x, t.y) : (${vec})(0, 0);
            }
% endfor
% for b in range(block_v):
            {
                const float4 t = read_imagef(gcf_image, gcf_sampler,
                                             (float2)(image_x(dv + ${b}, fv), plane_y));
                wv[${b}] = (dv + ${b} >= 0 && dv + ${b} < SUPPORT) ? (${vec})(t.z, t.w) : (${vec})(0, 0);
            }
% endfor
%   for b in range(block_v):
            {
                // Merry: G_u (G_v V) costs fewer multiplies than (G_u G_v) V
                ${vec} row_value[NPOL];
%     for p in range(npol):
                row_value[${p}] = cmul_${suffix}(wv[${b}], value[${p}]);
%     endfor
%     for a in range(block_u):
%       for p in range(npol):
                acc[${b}][${a}][${p}] = cmad_${suffix}(wu[${a}], row_value[${p}], acc[${b}][${a}][${p}]);
%       endfor
%     endfor
            }
%   endfor
        }
% for b in range(block_v):
%   for a in range(block_u):
        if (cur_u >= 0)
            flush_point(grid, cur_u + ${a}, cur_v + ${b}, nx, ny, acc[${b}][${a}], &flushes);
%   endfor
% endfor
    }
% if count_flushes:
    if (flushes)
        atomic_add(flush_count, flushes);
% endif
}

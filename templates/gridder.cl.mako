## Table-based gridding: Romein's work distribution with Merry's thread coarsening.
## Parameters (validated in clgrid/gridder.py):
##   real ("float" | "double"), with_f64 (bool), npol (1, 2, 4),
##   support S, oversample O, separable (bool: two 1-D tables, else one full table),
##   block_u, block_v (grid points per work-item along u / v: thread coarsening),
##   bin_u, bin_v (bounding box: multiple of the block, >= S + block - 1),
##   wg_size (work-items per group), n_sub (independent visibility streams per group
##   when a bin has fewer blocks than the group has work-items),
##   batch (visibilities staged per local-memory batch), vis_per_group,
##   count_flushes (bool: count atomic flushes of grid points for statistics).
## Grid layout: (npol, ny, nx) complex, real and imaginary interleaved.
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
#define OVERSAMPLE ${oversample}
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
% if separable:
                  __global const ${vec} *gcf_u,         // (w_planes, O, S)
                  __global const ${vec} *gcf_v,
% else:
                  __global const ${vec} *gcf,           // (w_planes, O, O, S, S)
% endif
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
            const int fu = h.z % OVERSAMPLE;
            const int fv = h.z / OVERSAMPLE;
            const int du = pos_u - h.x;   // footprint column of the block's first point
            const int dv = pos_v - h.y;
            ${vec} value[NPOL];
% for p in range(npol):
            value[${p}] = l_vis[i * NPOL + ${p}];
% endfor
% if separable:
            ${vec} wu[${block_u}], wv[${block_v}];
%   for a in range(block_u):
            wu[${a}] = (du + ${a} >= 0 && du + ${a} < SUPPORT)
                ? gcf_u[(h.w * OVERSAMPLE + fu) * SUPPORT + du + ${a}] : (${vec})(0, 0);
%   endfor
%   for b in range(block_v):
            wv[${b}] = (dv + ${b} >= 0 && dv + ${b} < SUPPORT)
                ? gcf_v[(h.w * OVERSAMPLE + fv) * SUPPORT + dv + ${b}] : (${vec})(0, 0);
%   endfor
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
% else:
            const size_t plane_base = ((size_t)(h.w * OVERSAMPLE + fv) * OVERSAMPLE + fu)
                                      * SUPPORT * SUPPORT;
%   for b in range(block_v):
%     for a in range(block_u):
            if (du + ${a} >= 0 && du + ${a} < SUPPORT && dv + ${b} >= 0 && dv + ${b} < SUPPORT) {
                const ${vec} weight = gcf[plane_base + (dv + ${b}) * SUPPORT + du + ${a}];
%       for p in range(npol):
                acc[${b}][${a}][${p}] = cmad_${suffix}(weight, value[${p}], acc[${b}][${a}][${p}]);
%       endfor
            }
%     endfor
%   endfor
% endif
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

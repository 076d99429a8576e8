## Tiled, atomic-free gridding (the NAG/Oxford KNL/GPU poster's design).
## Records are bucket-sorted into grid tiles on the device (counting sort:
## count_tiles, exclusive_scan, scatter_pairs); a record whose
## footprint spans several tiles is duplicated into each of them.  Then one
## work-group owns one tile (grid_tiles): it accumulates the tile in local
## memory and adds it to the grid once with plain loads and stores.
## Parameters (validated in clgrid/tiled.py):
##   real ("float" | "double"), with_f64 (bool), npol (1, 2, 4),
##   support S, oversample O, separable (bool),
##   tile_u, tile_v (tile size in grid cells), rows_per_pass R (work-items
##   per tile column: work-group size = tile_u * R), batch (records staged
##   in local memory at a time), scan_wg (work-items of the one-group scan),
##   binning (how records are grouped by tile): "atomic" (scatter_pairs with
##   an atomic cursor: the order inside a tile varies run to run), or
##   deterministic, record order inside every tile: "blocked" (a one-pass
##   counting sort: block_counts, exclusive_scan of the [tile][block] table,
##   block_scatter, one sequential work-item per block of records; for CPUs)
##   or "sorted" (tile_keys writes pair_stride = K slot keys per record,
##   clgrid's stable radix sort orders them, a pair holds the slot position
##   record * K + slot; for GPUs).  pair_stride is 1 unless "sorted".
<%
    vec = real + "2"
    suffix = "f32" if real == "float" else "f64"
    wg_size = tile_u * rows_per_pass
%>
<%include file="complex.cl.mako"/>

#define SUPPORT ${support}
#define OVERSAMPLE ${oversample}
#define NPOL ${npol}
#define TILE_U ${tile_u}
#define TILE_V ${tile_v}
#define ROWS_PER_PASS ${rows_per_pass}
#define WG_SIZE ${wg_size}
#define BATCH ${batch}
#define SCAN_WG ${scan_wg}
#define PAIR_STRIDE ${pair_stride}

// Tiles touched by the footprint [x0, x0 + SUPPORT) on one axis, clamped to
// the grid so that a malformed header can never index past the tile arrays.
inline int2 tile_range(int x0, int tile, int n_tiles)
{
    const int first = clamp(x0, 0, n_tiles * tile - 1) / tile;
    const int last = clamp(x0 + SUPPORT - 1, 0, n_tiles * tile - 1) / tile;
    return (int2)(first, last);
}

__kernel void count_tiles(__global const int4 *header, const int n_records,
                          const int n_tiles_u, const int n_tiles_v,
                          volatile __global uint *counts)
{
    const int i = get_global_id(0);
    if (i >= n_records)
        return;
    const int4 h = header[i];
    const int2 ru = tile_range(h.x, TILE_U, n_tiles_u);
    const int2 rv = tile_range(h.y, TILE_V, n_tiles_v);
    for (int tv = rv.x; tv <= rv.y; ++tv)
        for (int tu = ru.x; tu <= ru.y; ++tu)
            atomic_inc(&counts[tv * n_tiles_u + tu]);
}

// Exclusive prefix sum of the tile counts by one work-group: there are only
// thousands of tiles, so a single group (each work-item summing a contiguous
// chunk, then a Hillis-Steele scan of the chunk sums) is enough and has no
// inter-group synchronisation to get wrong.
__kernel __attribute__((reqd_work_group_size(SCAN_WG, 1, 1)))
void exclusive_scan(__global const uint *counts, __global uint *offsets, const int n)
{
    __local uint l_sum[SCAN_WG];
    const int lid = get_local_id(0);
    const int per_item = (n + SCAN_WG - 1) / SCAN_WG;
    const int first = min(lid * per_item, n);
    const int end = min(first + per_item, n);
    uint sum = 0;
    for (int i = first; i < end; ++i)
        sum += counts[i];
    l_sum[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = 1; step < SCAN_WG; step <<= 1) {
        const uint add = lid >= step ? l_sum[lid - step] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        l_sum[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint running = l_sum[lid] - sum;   // counts before this work-item's chunk
    for (int i = first; i < end; ++i) {
        offsets[i] = running;
        running += counts[i];
    }
}

__kernel void scatter_pairs(__global const int4 *header, const int n_records,
                            const int n_tiles_u, const int n_tiles_v,
                            __global const uint *offsets,
                            volatile __global uint *cursor,
                            __global uint *pairs)
{
    const int i = get_global_id(0);
    if (i >= n_records)
        return;
    const int4 h = header[i];
    const int2 ru = tile_range(h.x, TILE_U, n_tiles_u);
    const int2 rv = tile_range(h.y, TILE_V, n_tiles_v);
    for (int tv = rv.x; tv <= rv.y; ++tv)
        for (int tu = ru.x; tu <= ru.y; ++tu) {
            const int tile = tv * n_tiles_u + tu;
            pairs[offsets[tile] + atomic_inc(&cursor[tile])] = i;
        }
}

% if binning == "blocked":
// Deterministic binning for CPUs, pass 1: block b (one work-item) counts
// the pairs of its records [b * per_block, (b + 1) * per_block) per tile
// into counts[tile * n_blocks + b] (zeroed; one writer per column).
__kernel void block_counts(__global const int4 *header, const int n_records,
                           const int n_tiles_u, const int n_tiles_v,
                           const int per_block, const int n_blocks,
                           __global uint *counts)
{
    const int block = get_global_id(0);
    if (block >= n_blocks)
        return;
    const int end = min(n_records, (block + 1) * per_block);
    for (int i = block * per_block; i < end; ++i) {
        const int4 h = header[i];
        const int2 ru = tile_range(h.x, TILE_U, n_tiles_u);
        const int2 rv = tile_range(h.y, TILE_V, n_tiles_v);
        for (int tv = rv.x; tv <= rv.y; ++tv)
            for (int tu = ru.x; tu <= ru.y; ++tu)
                ++counts[(size_t)(tv * n_tiles_u + tu) * n_blocks + block];
    }
}

// Pass 2, after the exclusive scan of counts in [tile][block] order: every
// (tile, block) starts where the earlier blocks' pairs of that tile end, so
// block b writes its records in order and the tile's list is in record
// order -- the same on every run, whatever the schedule.
__kernel void block_scatter(__global const int4 *header, const int n_records,
                            const int n_tiles_u, const int n_tiles_v,
                            const int per_block, const int n_blocks,
                            __global uint *cursor, __global uint *pairs)
{
    const int block = get_global_id(0);
    if (block >= n_blocks)
        return;
    const int end = min(n_records, (block + 1) * per_block);
    for (int i = block * per_block; i < end; ++i) {
        const int4 h = header[i];
        const int2 ru = tile_range(h.x, TILE_U, n_tiles_u);
        const int2 rv = tile_range(h.y, TILE_V, n_tiles_v);
        for (int tv = rv.x; tv <= rv.y; ++tv)
            for (int tu = ru.x; tu <= ru.y; ++tu)
                pairs[cursor[(size_t)(tv * n_tiles_u + tu) * n_blocks + block]++] = i;
    }
}

% endif
% if binning == "sorted":
// Deterministic binning: record i owns the PAIR_STRIDE key slots
// [i * PAIR_STRIDE, (i + 1) * PAIR_STRIDE); each tile its footprint touches
// takes one, the rest hold the sentinel n_tiles (sorted last, never read).
// Sorted stably by key, the slot positions come out grouped by tile and in
// record order within a tile, the same order on every run and device.
__kernel void tile_keys(__global const int4 *header, const int n_records,
                        const int n_tiles_u, const int n_tiles_v,
                        __global uint *keys)
{
    const int i = get_global_id(0);
    if (i >= n_records)
        return;
    const int4 h = header[i];
    const int2 ru = tile_range(h.x, TILE_U, n_tiles_u);
    const int2 rv = tile_range(h.y, TILE_V, n_tiles_v);
    __global uint *slot = keys + (size_t)i * PAIR_STRIDE;
    int k = 0;
    for (int tv = rv.x; tv <= rv.y; ++tv)
        for (int tu = ru.x; tu <= ru.y; ++tu)
            slot[k++] = (uint)(tv * n_tiles_u + tu);
    for (; k < PAIR_STRIDE; ++k)
        slot[k] = (uint)(n_tiles_u * n_tiles_v);
}

% endif
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void grid_tiles(__global const int4 *header,          // u0, v0, fu + O fv, W plane
                __global const ${vec} *vis,           // (n_records, npol), pre-weighted
                __global const uint *pairs,           // record (slot) indices grouped by tile
                __global const uint *offsets,         // first pair of each tile
                __global const uint *counts,          // pairs per tile
                __global const uint *tile_order,      // tiles, heaviest first
% if separable:
                __global const ${vec} *gcf_u,         // (w_planes, O, S)
                __global const ${vec} *gcf_v,
% else:
                __global const ${vec} *gcf,           // (w_planes, O, O, S, S)
% endif
                __global ${real} *grid,
                const int nx, const int ny, const int n_tiles_u)
{
    // Each work-item owns one column of the tile and every ROWS_PER_PASS-th
    // row of it: no two work-items ever touch the same accumulator, so the
    // record loop needs neither atomics nor barriers.
    __local ${vec} l_acc[TILE_V * TILE_U * NPOL];
    __local int4 l_header[BATCH];
    __local ${vec} l_vis[BATCH * NPOL];
    const int lid = get_local_id(0);
    const int col = lid % TILE_U;
    const int row_phase = lid / TILE_U;
    const uint tile = tile_order[get_group_id(0)];
    const int tile_u0 = (tile % n_tiles_u) * TILE_U;
    const int tile_v0 = (tile / n_tiles_u) * TILE_V;
    const uint first_pair = offsets[tile];
    const uint n_pairs = counts[tile];

    for (int r = row_phase; r < TILE_V; r += ROWS_PER_PASS)
        for (int p = 0; p < NPOL; ++p)
            l_acc[(r * TILE_U + col) * NPOL + p] = (${vec})(0, 0);

    for (uint batch_first = 0; batch_first < n_pairs; batch_first += BATCH) {
        const int batch_n = min((uint)BATCH, n_pairs - batch_first);
        barrier(CLK_LOCAL_MEM_FENCE);  // previous batch fully consumed
        for (int i = lid; i < batch_n; i += WG_SIZE) {
            const uint record = pairs[first_pair + batch_first + i] / PAIR_STRIDE;
            l_header[i] = header[record];
            for (int p = 0; p < NPOL; ++p)
                l_vis[i * NPOL + p] = vis[(size_t)record * NPOL + p];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < batch_n; ++i) {
            const int4 h = l_header[i];
            const int ju = tile_u0 + col - h.x;       // footprint column of this work-item
            if (ju < 0 || ju >= SUPPORT)
                continue;
            const int jv_of_row0 = tile_v0 - h.y;     // footprint row of tile row 0
            const int r_begin = max(0, -jv_of_row0);
            const int r_end = min(TILE_V, SUPPORT - jv_of_row0);
            // first owned row at or after r_begin
            int r = r_begin + (row_phase - r_begin % ROWS_PER_PASS + ROWS_PER_PASS) % ROWS_PER_PASS;
            const int fu = h.z % OVERSAMPLE;
            const int fv = h.z / OVERSAMPLE;
% if separable:
            // Merry: G_v (G_u V), the column factor computed once per record
            const ${vec} wu = gcf_u[(h.w * OVERSAMPLE + fu) * SUPPORT + ju];
            ${vec} col_value[NPOL];
            for (int p = 0; p < NPOL; ++p)
                col_value[p] = cmul_${suffix}(wu, l_vis[i * NPOL + p]);
            __global const ${vec} *row_weights = gcf_v + (h.w * OVERSAMPLE + fv) * SUPPORT + jv_of_row0;
            for (; r < r_end; r += ROWS_PER_PASS) {
                const ${vec} wv = row_weights[r];
                __local ${vec} *acc = l_acc + (r * TILE_U + col) * NPOL;
                for (int p = 0; p < NPOL; ++p)
                    acc[p] = cmad_${suffix}(wv, col_value[p], acc[p]);
            }
% else:
            ${vec} value[NPOL];
            for (int p = 0; p < NPOL; ++p)
                value[p] = l_vis[i * NPOL + p];
            __global const ${vec} *weights = gcf
                + ((size_t)(h.w * OVERSAMPLE + fv) * OVERSAMPLE + fu) * SUPPORT * SUPPORT
                + jv_of_row0 * SUPPORT + ju;
            for (; r < r_end; r += ROWS_PER_PASS) {
                const ${vec} weight = weights[r * SUPPORT];
                __local ${vec} *acc = l_acc + (r * TILE_U + col) * NPOL;
                for (int p = 0; p < NPOL; ++p)
                    acc[p] = cmad_${suffix}(weight, value[p], acc[p]);
            }
% endif
        }
    }

    // One owner per tile in this launch: a plain read-modify-write is safe.
    const int u = tile_u0 + col;
    if (u >= nx)
        return;
    for (int r = row_phase; r < TILE_V; r += ROWS_PER_PASS) {
        const int v = tile_v0 + r;
        if (v >= ny)
            break;
        for (int p = 0; p < NPOL; ++p) {
            __global ${real} *point = grid + 2 * ((size_t)(p * ny + v) * nx + u);
            const ${vec} sum = l_acc[(r * TILE_U + col) * NPOL + p];
            point[0] += sum.x;
            point[1] += sum.y;
        }
    }
}

## Gridding core, tabulated kernels: register accumulation (Romein 2012's
## work distribution with Merry 2016's thread coarsening) over the records
## of the core's set points: points sorted by footprint start cell and
## table slice, each run of equal ones merged into one record
## (core_records.cl.mako).
## Parameters (validated in clgrid/core/register.py):
##   real ("float" | "double"), with_f64 (bool: real is double), npol (1..4),
##   support S, oversample O,
##   separable (bool: two 1-D tables (w_planes, O, S), else one full table
##   (w_planes, O, O, S, S)), table_real (bool, separable only: the tables
##   are real, as the ES and Kaiser-Bessel kernels are: a point costs two
##   multiply-adds a polarisation instead of four),
##   block_u, block_v (grid points per work-item along x / y: coarsening),
##   pol_block (polarisations per work-item, dividing npol: the work-items
##   of a box position split the polarisations, fewer sums in registers),
##   bin_u, bin_v (the box: multiples of the block, >= S + block - 1),
##   wg_size (work-items per group), n_sub (independent record streams per
##   group when the box has fewer blocks than the group has work-items),
##   batch (records staged in local memory per stream and pass),
##   staged_rows (int, separable buffer tables and one stream a group only;
##   0: off): Merry's row products G_v V of every record of a batch worked
##   out once for the group into local memory, for each of its staged_rows
##   row keys (a key: a block row of the box in one polarisation group,
##   item_index / blocks_u), instead of by every work-item of the row,
##   count_flushes (bool: count block flushes into flush_count, statistics),
##   fixed_point (bool: flushes add 64-bit fixed point with integer atomics
##   into a (npol, ny, nx, 2) long grid, so the grid's bits do not depend on
##   the order the flushes arrive in; float only: fixed_to_grid converts),
##   gcf_read ("buffer" | "image" | "image-linear": the tables as images
##   read through a sampler, gcf_image.cl.mako with its parameters
##   table_oversample, steps, coord_shift, image_planes; float only).
## Records: cells[r] = (footprint start y0, x0, table index | conjugated bit,
## first point), values[r * npol + p] their summed values (gather_records).
## Tables: full (w_planes, O, O, S, S) complex; separable ones phased
## (clgrid.core.register.phased_table): (w_planes O, block, bin) per axis,
## real where table_real, else complex.
## Grid: (npol, ny, nx) complex, parts interleaved.
<%
    vec = real + "2"
    if table_real and not separable:
        raise ValueError("table_real applies to separable tables")
    suffix = "f32" if real == "float" else "f64"
    catomic = "atomic_add_c64" if real == "float" else "atomic_add_c128"
    blocks_u = bin_u // block_u
    blocks_v = bin_v // block_v
    n_blocks = blocks_u * blocks_v
    if npol % pol_block:
        raise ValueError("pol_block must divide npol")
    n_pol_groups = npol // pol_block
    per_stream = wg_size // n_sub
    if fixed_point and real != "float":
        raise ValueError("fixed_point sums take float grids")
    grid_type = "long" if fixed_point else real
    if staged_rows and (not separable or gcf_read != "buffer" or n_sub != 1):
        raise ValueError("staged_rows: separable buffer tables, one stream a group")
    fixed_arg = ", fixed_scales" if fixed_point else ""
    fixed_params = (",\n                     __global const float *fixed_bound, const float table_bound"
                    if fixed_point else "")
%>
<%include file="atomics.cl.mako"/>
<%include file="complex.cl.mako"/>
## helpers and table reads, shared with core_interp_register.cl.mako (its adjoint)
<%namespace name="shared" file="register_gcf.cl.mako"/>

#define SUPPORT ${support}
#define OVERSAMPLE ${oversample}
#define NPOL ${npol}
#define BIN_U ${bin_u}
#define BIN_V ${bin_v}
#define N_BLOCKS ${n_blocks}
#define POL_BLOCK ${pol_block}
#define N_POL_GROUPS ${n_pol_groups}
#define WG_SIZE ${wg_size}
#define N_SUB ${n_sub}
#define PER_STREAM ${per_stream}
#define BATCH ${batch}
#define TABLE_INDEX_MASK ((1 << 30) - 1)

${shared.helpers()}\
% if fixed_point:
<%include file="fixed_point.cl.mako"/>
% endif

inline void flush_block(volatile __global ${grid_type} *grid, const int u, const int v,
                        const int nx, const int ny, const int pol0,
                        ${vec} acc[${block_v}][${block_u}][POL_BLOCK]${", const float2 fixed_scales" if fixed_point else ""})
{
% for b in range(block_v):
%   for a in range(block_u):
    // box positions past the grid edge only ever hold zeros
    if (u + ${a} < nx && v + ${b} < ny) {
%     for p in range(pol_block):
% if fixed_point:
        fixed_add_c64(grid + 2 * ((size_t)((pol0 + ${p}) * ny + v + ${b}) * nx + u + ${a}),
                      acc[${b}][${a}][${p}], fixed_scales);
% else:
        ${catomic}(grid + 2 * ((size_t)((pol0 + ${p}) * ny + v + ${b}) * nx + u + ${a}),
                   acc[${b}][${a}][${p}]);
% endif
%     endfor
    }
%     for p in range(pol_block):
    acc[${b}][${a}][${p}] = (${vec})(0, 0);
%     endfor
%   endfor
% endfor
}

## One record (staged at index i) into this work-item's block: where the
## record puts the block, its weights, a flush where the block moves, then
## the multiply-adds of every polarisation.
<%def name="add_record()">
            {
                // what staging worked out once for every work-item (stage_record)
                const int4 where = l_cell[stream][i], box = l_box[stream][i];
                const int2 position = block_position(box, offset_u, offset_v);
                const int pu = position.x, pv = position.y;
% if gcf_read != "buffer":
${shared.image_offsets()}\
%   if separable:
${shared.separable_image_weights()}\
%   else:
                ${vec} w[${block_v}][${block_u}];
%     for b in range(block_v):
%       for a in range(block_u):
                w[${b}][${a}] = gcf_image_weight_full(gcf, du + ${a}, dv + ${b}, fu, fv, where.w);
%       endfor
%     endfor
%   endif
% elif separable:
${shared.separable_buffer_weights(v_weights=not staged_rows)}\
% else:
                ${vec} w[${block_v}][${block_u}];
${shared.full_slice()}\
%   for b in range(block_v):
%     for a in range(block_u):
                w[${b}][${a}] = slice[${b} * ${shared.slice_cols()} + ${a}];
%     endfor
%   endfor
% endif
                if (pu != cur_u || pv != cur_v) {
                    if (cur_u >= 0) {
                        flush_block(grid, cur_u, cur_v, nx, ny, pol0, acc${fixed_arg});
% if count_flushes:
                        ++flushes;
% endif
                    }
                    cur_u = pu;
                    cur_v = pv;
                }
% if not staged_rows:
                ${vec} value[POL_BLOCK];
%   for p in range(pol_block):
                value[${p}] = l_vis[stream][i][pol0 + ${p}];
%   endfor
% endif
% if separable:
%   for b in range(block_v):
                {
                    // Merry: G_u (G_v V) costs fewer multiplies than (G_u G_v) V
                    ${vec} row_value[POL_BLOCK];
%     for p in range(pol_block):
%       if staged_rows:
                    row_value[${p}] = l_row[i][row_key][${b}][${p}];
%       elif table_real:
                    row_value[${p}] = wv[${b}] * value[${p}];
%       else:
                    row_value[${p}] = cmul_${suffix}(wv[${b}], value[${p}]);
%       endif
%     endfor
%     for a in range(block_u):
%       for p in range(pol_block):
%         if table_real:
                    acc[${b}][${a}][${p}] = fma((${vec})(wu[${a}]), row_value[${p}], acc[${b}][${a}][${p}]);
%         else:
                    acc[${b}][${a}][${p}] = cmad_${suffix}(wu[${a}], row_value[${p}], acc[${b}][${a}][${p}]);
%         endif
%       endfor
%     endfor
                }
%   endfor
% else:
%   for b in range(block_v):
%     for a in range(block_u):
%       for p in range(pol_block):
                acc[${b}][${a}][${p}] = cmad_${suffix}(w[${b}][${a}], value[${p}], acc[${b}][${a}][${p}]);
%       endfor
%     endfor
%   endfor
% endif
            }
</%def>

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void spread_register(__global const int4 *cells, const unsigned int n_records,
                     const unsigned int records_per_group, __global const ${vec} *values,
${shared.table_arguments(21)}\
                     volatile __global ${grid_type} *grid, const int nx, const int ny,
                     volatile __global unsigned int *flush_count${fixed_params})
{
    __local int4 l_cell[N_SUB][BATCH];   // (x0, y0, table offsets) of each record
    __local int4 l_box[N_SUB][BATCH];    // (box start, bin offset) along x, then y
    __local ${vec} l_vis[N_SUB][BATCH][NPOL];
% if staged_rows:
    // each record's row products for the group's row keys (staged_rows)
    __local ${vec} l_row[BATCH][${staged_rows}][${block_v}][POL_BLOCK];
% endif
    const int lid = get_local_id(0);
    // dimension 1 splits a box of more blocks than a group has work-items
    // and the polarisation groups of one block position are its neighbours'
    // work-items: one (block, polarisation group) pair a work-item
    const int item_index = get_group_id(1) * PER_STREAM + lid % PER_STREAM;
    const int stream = lid / PER_STREAM;
    const bool active = item_index < N_BLOCKS * N_POL_GROUPS && stream < N_SUB;
    const int block_index = item_index % N_BLOCKS;
    const int pol0 = (item_index / N_BLOCKS) * POL_BLOCK;
    const int offset_u = (block_index % ${blocks_u}) * ${block_u};
    const int offset_v = (block_index / ${blocks_u}) * ${block_v};
% if staged_rows:
    // a key a block row and polarisation group: the group's first is its first item's
    const int first_key = (get_group_id(1) * PER_STREAM) / ${blocks_u};
    const int row_key = item_index / ${blocks_u} - first_key;
% endif
    // each stream takes a contiguous share of the group's records, so that
    // its positions change as rarely as the sorted order allows
    const unsigned int group_first = get_group_id(0) * records_per_group;
    const unsigned int group_end = min(group_first + records_per_group, n_records);
    const unsigned int stream_len = (group_end - group_first + N_SUB - 1) / N_SUB;
    const unsigned int longest = min(stream_len, group_end - group_first);

% if fixed_point:
    const float2 fixed_scales = fixed_scale(fixed_exponent(*fixed_bound, table_bound));
% endif
    int cur_u = -1, cur_v = -1;
    unsigned int flushes = 0;   // block flushes (count_flushes: statistics)
    ${vec} acc[${block_v}][${block_u}][POL_BLOCK];
% for b in range(block_v):
%   for a in range(block_u):
%     for p in range(pol_block):
    acc[${b}][${a}][${p}] = (${vec})(0, 0);
%     endfor
%   endfor
% endfor

    for (unsigned int pass = 0; pass < longest; pass += BATCH) {
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous batch fully consumed
        for (int t = lid; t < N_SUB * BATCH; t += WG_SIZE) {
            const int s = t / BATCH, j = t - (t / BATCH) * BATCH;
            const unsigned int at = group_first + s * stream_len + pass + j;
            const bool here = pass + j < stream_len && at < group_end;
            stage_record(here ? cells[at] : (int4)(0, 0, 0, 0), &l_cell[s][j], &l_box[s][j]);
% for p in range(npol):
            l_vis[s][j][${p}] = here ? values[(size_t)at * NPOL + ${p}] : (${vec})(0, 0);
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
% if staged_rows:
        // the row products, once a group: record j, key k, polarisation p;
        // a key past the box's last (a group's spare items) is skipped
        for (int t = lid; t < BATCH * ${staged_rows} * POL_BLOCK; t += WG_SIZE) {
            const int j = t / (${staged_rows} * POL_BLOCK);
            const int k = (t / POL_BLOCK) % ${staged_rows}, p = t % POL_BLOCK;
            const int key = first_key + k;
            const int pol_group = key / ${blocks_v};
            if (pol_group >= N_POL_GROUPS)
                continue;
            const int key_v = (key - pol_group * ${blocks_v}) * ${block_v};
            const int4 where = l_cell[0][j], box = l_box[0][j];
            // the key's block row, read as separable_buffer_weights reads it
            const int pv = block_position(box, 0, key_v).y;
            ${shared.v_weight_vector("wv_vector", "pv")}
            const ${vec} value = l_vis[0][j][pol_group * POL_BLOCK + p];
%   for b in range(block_v):
%     if table_real:
            l_row[j][k][${b}][p] = ${shared.module.lane("wv_vector", block_v, b, table_real)} * value;
%     else:
            l_row[j][k][${b}][p] = cmul_${suffix}(${shared.module.lane("wv_vector", block_v, b, table_real)}, value);
%     endif
%   endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
% endif
        if (!active)
            continue;
        const unsigned int s_first = group_first + stream * stream_len + pass;
        const unsigned int s_end = min(group_first + (stream + 1) * stream_len, group_end);
        const int n_here = s_first < s_end ? (int)min((unsigned int)BATCH, s_end - s_first) : 0;
        for (int i = 0; i < n_here; ++i) {
${add_record()}
        }
    }
    if (active && cur_u >= 0)
        flush_block(grid, cur_u, cur_v, nx, ny, pol0, acc${fixed_arg});
% if count_flushes:
    if (active && cur_u >= 0)
        ++flushes;
    if (flushes)
        atomic_add(flush_count, flushes);
% endif
}

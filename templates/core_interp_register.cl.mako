## Gridding core, tabulated kernels: degridding by register blocks, the
## gather twin of core_spread_register.cl.mako.  The records of the core's
## set points (sorted by footprint start cell and table slice, runs of equal
## points merged: core_records.cl.mako) stream past a box of bin_u x bin_v
## grid points; each work-item holds its block_u x block_v points of
## pol_block polarisations in registers, read from the grid only when a
## record moves the block (Romein's insight, turned round), and adds the
## block's share of each record's footprint sum conj(GCF) * grid.  The
## work-items' shares of a record are added in a fixed order in local memory
## and each group writes one partial sum per record and polarisation
## (partials: (box chunks, records of the launch, npol)); sum_record_partials
## in core_interp.cl.mako adds the chunks in a fixed order and gives every
## point of the record its sum.  No atomics: the same bits every run.
## Parameters (validated in clgrid/core/register.py, RegisterInterpolator):
##   real ("float" | "double"), with_f64 (bool: real is double), npol,
##   support S, oversample O, separable (bool), table_real (bool, separable
##   only), block_u, block_v, pol_block (dividing npol), bin_u, bin_v (the
##   box, as the spread's), wg_size (work-items per group: one box chunk),
##   batch (records staged per pass), gcf_read ("buffer" | "image" |
##   "image-linear": the tables as images, gcf_image.cl.mako with its
##   parameters table_oversample, steps, coord_shift, image_planes).
## Tables as the spread reads them: separable ones phased
## (clgrid.core.register.phased_table), real where table_real; full ones
## (w_planes, O, O, S, S) complex.  Grid: (npol, ny, nx) complex.
<%
    vec = real + "2"
    if table_real and not separable:
        raise ValueError("table_real applies to separable tables")
    if npol % pol_block:
        raise ValueError("pol_block must divide npol")
    suffix = "f32" if real == "float" else "f64"
    blocks_u = bin_u // block_u
    blocks_v = bin_v // block_v
    def times_conj(value, w):
        # value * conj(w): a real weight scales, a complex one conjugates
        return ("%s * %s" % (value, w)) if table_real else "cmulconj_%s(%s, %s)" % (suffix, value, w)
%>
<%include file="complex.cl.mako"/>
## helpers and table reads, shared with core_spread_register.cl.mako (its adjoint)
<%namespace name="shared" file="register_gcf.cl.mako"/>

#define SUPPORT ${support}
#define OVERSAMPLE ${oversample}
#define NPOL ${npol}
#define POL_BLOCK ${pol_block}
#define BIN_U ${bin_u}
#define BIN_V ${bin_v}
#define N_BLOCKS ${blocks_u * blocks_v}
#define WG_SIZE ${wg_size}
#define BATCH ${batch}
#define TABLE_INDEX_MASK ((1 << 30) - 1)

${shared.helpers()}\

// The block's grid points at (u, v) of polarisations pol0.. into registers;
// points past the grid's edge read as zero (no footprint reaches them with
// a non-zero weight).
inline void load_block(__global const ${vec} *grid, const int u, const int v, const int nx,
                       const int ny, const int pol0,
                       ${vec} block[${block_v}][${block_u}][POL_BLOCK])
{
% for b in range(block_v):
%   for a in range(block_u):
%     for p in range(pol_block):
    block[${b}][${a}][${p}] = (u + ${a} < nx && v + ${b} < ny)
        ? grid[(size_t)((pol0 + ${p}) * ny + v + ${b}) * nx + u + ${a}] : (${vec})(0, 0);
%     endfor
%   endfor
% endfor
}

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1)))
void interpolate_register(__global const int4 *cells, const unsigned int first_record,
                          const unsigned int n_records, const unsigned int records_per_group,
                          __global const ${vec} *grid, const int nx, const int ny,
${shared.table_arguments(26)}\
                          __global ${vec} *partials)
{
    __local int4 l_cell[BATCH];
    __local int4 l_box[BATCH];
    // each work-item's share of each record of the batch; one spare column
    // so that the fixed-order sums (a row each) fall in different banks
    __local ${vec} l_share[BATCH][POL_BLOCK][WG_SIZE + 1];
    const int lid = get_local_id(0);
    // dimension 1: the box's chunks of WG_SIZE blocks; 2: polarisation groups
    const int block_index = get_group_id(1) * WG_SIZE + lid;
    const bool active = block_index < N_BLOCKS;
    const int pol0 = get_group_id(2) * POL_BLOCK;
    const int offset_u = (block_index % ${blocks_u}) * ${block_u};
    const int offset_v = (block_index / ${blocks_u}) * ${block_v};
    const unsigned int group_first = get_group_id(0) * records_per_group;
    const unsigned int group_end = min(group_first + records_per_group, n_records);

    int cur_u = -1, cur_v = -1;
    ${vec} block[${block_v}][${block_u}][POL_BLOCK];

    for (unsigned int pass = group_first; pass < group_end; pass += BATCH) {
        barrier(CLK_LOCAL_MEM_FENCE);  // the previous batch fully summed
        for (int t = lid; t < BATCH; t += WG_SIZE) {
            const unsigned int at = pass + t;
            stage_record(at < group_end ? cells[first_record + at] : (int4)(0, 0, 0, 0),
                         &l_cell[t], &l_box[t]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n_here = (int)min((unsigned int)BATCH, group_end - pass);
        for (int i = 0; i < n_here; ++i) {
            ${vec} share[POL_BLOCK];
% for p in range(pol_block):
            share[${p}] = (${vec})(0, 0);
% endfor
            if (active) {
                const int4 where = l_cell[i], box = l_box[i];
                const int2 position = block_position(box, offset_u, offset_v);
                const int pu = position.x, pv = position.y;
                if (pu != cur_u || pv != cur_v) {
                    load_block(grid, pu, pv, nx, ny, pol0, block);
                    cur_u = pu;
                    cur_v = pv;
                }
% if separable:
%   if gcf_read != "buffer":
${shared.image_offsets()}\
${shared.separable_image_weights()}\
%   else:
${shared.separable_buffer_weights()}\
%   endif
%   for b in range(block_v):
                {
                    // Merry's order, adjoint: a row's sum over u, then its v weight
                    ${vec} row[POL_BLOCK];
%     for p in range(pol_block):
                    row[${p}] = ${times_conj("block[%d][0][%d]" % (b, p), "wu[0]")};
%       for a in range(1, block_u):
                    row[${p}] += ${times_conj("block[%d][%d][%d]" % (b, a, p), "wu[%d]" % a)};
%       endfor
                    share[${p}] += ${times_conj("row[%d]" % p, "wv[%d]" % b)};
%     endfor
                }
%   endfor
% elif gcf_read != "buffer":
${shared.image_offsets()}\
%   for b in range(block_v):
%     for a in range(block_u):
                {
                    // zero outside the footprint: the adds cost less than a branch
                    const ${vec} w = gcf_image_weight_full(gcf, du + ${a}, dv + ${b}, fu, fv,
                                                           where.w);
%       for p in range(pol_block):
                    share[${p}] += cmulconj_${suffix}(block[${b}][${a}][${p}], w);
%       endfor
                }
%     endfor
%   endfor
% else:
${shared.full_slice()}\
%   for b in range(block_v):
%     for a in range(block_u):
                {
                    const ${vec} w = slice[${b} * ${shared.slice_cols()} + ${a}];
%       for p in range(pol_block):
                    share[${p}] += cmulconj_${suffix}(block[${b}][${a}][${p}], w);
%       endfor
                }
%     endfor
%   endfor
% endif
            }
% for p in range(pol_block):
            l_share[i][${p}][lid] = share[${p}];
% endfor
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // one work-item per (record, polarisation) of the batch adds the
        // group's shares in the order of the work-items
        for (int t = lid; t < n_here * POL_BLOCK; t += WG_SIZE) {
            const int i = t / POL_BLOCK, p = t - (t / POL_BLOCK) * POL_BLOCK;
            ${vec} total = (${vec})(0, 0);
            for (int l = 0; l < WG_SIZE; ++l)
                total += l_share[i][p][l];
            partials[((size_t)get_group_id(1) * n_records + pass + i) * NPOL + pol0 + p] = total;
        }
    }
}

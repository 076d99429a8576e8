## Gridding core, stage "spread": visibilities -> padded uv grid planes.
##
## Output-owned tiles (no atomics, so the result is bit-reproducible): one
## work-group owns one tile of TILE_U x TILE_V grid cells of one w plane;
## lane j owns column j of the tile and keeps its TILE_U cells in private
## registers.  The work-group reads the points of the bins whose footprints
## can reach the tile (the tile's own and its lower neighbours in u and v:
## four bins, or (reach + 1)^2 where a table's kernel is wider than the
## tile, REACH below), in the fixed order of the device sort, stages BATCH (= LANES) of
## them at a time in local memory (footprint start, kernel values in u, and
## kernel values in v times the visibility), then every lane adds what falls
## into its column.  A launch with accumulate == 0 writes every cell of every
## plane exactly once, zeros included (the table gridder's padded planes).
## Visibilities arrive in row blocks (so their upload overlaps the
## spreading): on GPUs the imaging engine zeroes the planes (a fill) and
## every block's launch (accumulate != 0) adds only the tiles its points reach,
## in block order, so the sum is still the same run after run
## (Spreader.adds_to_zeros).  Without w a tile reads of its neighbours'
## bins only the sub-bins whose points reach it (split_bins below).
##
## Load balance: the uv plane is far denser near its centre, so one
## work-group per tile would leave the centre tiles working long after the
## rest.  The work list (built at plan time from the bin sizes) cuts the
## points of one (tile, plane) into chunks of at most chunk_points; a
## single-chunk item writes the grid, the chunks of a split item write partial
## tiles to scratch slots, and fold_chunks adds those in slot order.
## Sums: each lane adds up to about FOLD_POINTS points (fold_points) in the
## grid precision, then folds them into a double-precision total (without
## fp64: a Kahan-compensated float pair, float_float below), so float32 grids
## keep float64-like accuracy however many points fall on one cell (long
## float32 sums limited cuFINUFFT to 1e-4 at 1e8 points) at one double add
## per cell per fold.
## Parameters: real ("float" | "double"): grid precision; vis_real: precision
##             of the visibilities; support (int W), beta; tile_u, lanes (=
##             tile_v); groups (int): GPU kernel: groups of LANES lanes, each
##             taking every groups-th point; reach (int): lower neighbour
##             tiles per axis a GPU-kernel tile reads (TileShape.reach; 1 for
##             the ES path, more for wide tables); batch (int): points the
##             GPU kernel stages at a time (TileShape.staged); compact
##             (bool, GPUs: spread.compacts_points): it stages only the
##             points that touch its tile, their taps at their places in the
##             tile (below, the ES source), else all, parked; fold_points
##             (int, Spreader.fold_points), fold_rows (int, fold_chunks' rows
##             a work-group), fold_parts (int, Spreader.fold_parts: work-items
##             a cell of fold_chunks_wide; 1: no such kernel); local_state
##             (bool, Spreader.local_state): the lanes' totals and the group's source-bin ranges in local
##             memory, not registers; split_bins (bool,
##             spread.splits_bins): set points split each bin by the next
##             tiles its points reach (split_start), and a tile reads of a
##             lower neighbour's bin only those that reach it (source_ranks);
##             do_w (bool); shifted (bool): facet centre away
##             from the phase centre; weighted, masked (bool): wgt / mask
##             arrays given;
##             vector (bool): CPUs: kernels spread_vector and add_halos
##             instead (not output-owned: each point is gridded once, by its
##             own tile, into a private tile with a halo; the halos go to
##             slots that add_halos adds to the neighbouring tiles in a fixed
##             order, so still bit-reproducible); the points come as records
##             (core_setpoints.cl.mako, point_records), a point's W taps are
##             one vector per axis and a footprint row two vector FMAs;
##             plane_block (int): w planes one spread_vector item grids; the
##             GPU kernel (do_w, es source) with plane_block > 1: a work
##             item is a tile and a block of plane_block planes, groups
##             groups of LANES lanes for each plane of it, so a point is read
##             and its u and v taps evaluated once per block, not per plane;
##             row_taps (int): spread_vector's taps a row (clgrid.core.plan.row_taps);
##             kernel_eval ("exp" | "horner"): how spread_vector and the GPU
##             kernel (es source) evaluate a point's taps; horner: (degree + 1,
##             W) polynomial coefficients (eskernel.horner_coefficients, the GPU
##             kernel's through es_horner.cl.mako; unused with "exp");
##             with_f64 (bool, for complex.cl.mako: True but with float_float);
##             float_float (bool, default False): a device without fp64: the
##             GPU kernels of a float grid only, no double anywhere, the
##             tiles' totals float sums with Kahan's compensation (sum, lost),
##             and gather_values' facet phases from float-float uvw and
##             freq / c (shift_u, shift_v then float-float turns per metre
##             wavelength, not radians);
##             kept_phases (bool, default False): the facet phases read from
##             the per-plan phasors (facet_phase.cl.mako), not computed.
<%
    csuffix = "f32" if real == "float" else "f64"
    # facet phases from a per-plan array (facet_phasors) instead of a sincos
    kept_phases = context.get("kept_phases", False)
    vec = real + "2"
    vvec = vis_real + "2"
    float_float = context.get("float_float", False)
    split_bins = context.get("split_bins", False)
    if float_float and (vector or real != "float"):
        raise ValueError("float_float: the GPU kernels of a float grid only")
    # uvw, freq / c and the facet shifts: doubles, or (hi, lo) float pairs
    pos_t = "float2" if float_float else "double"
    # a lane's running total of a tile cell: double, or a compensated float pair
    total_t = "float4" if float_float else "double2"
%>
% if not float_float:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
<%include file="es_kernel.cl.mako"/>
<%include file="complex.cl.mako"/>
% if float_float:
<%include file="floatfloat.cl.mako"/>
// Kahan-compensated float sums: (sum, lost), the value is sum - lost.
inline float4 kahan_add(const float4 total, const float2 value)
{
    const float2 y = value - total.zw;
    const float2 sum = total.xy + y;
    return (float4)(sum, (sum - total.xy) - y);
}
inline float2 kahan_value(const float4 total) { return total.xy - total.zw; }
% endif
<%include file="facet_phase.cl.mako"/>
% if context.get("kernel_eval", "exp") == "horner" and not vector:
<%include file="es_horner.cl.mako"/>
% endif
<%def name="add_total(total, value)">${total} = ${"kahan_add(" + total + ", " + value + ")" if float_float else total + " + convert_double2(" + value + ")"}</%def>
<%def name="total_value(total)">${("kahan_value(" + total + ")") if float_float else ("convert_" + vec + "(" + total + ")")}</%def>
#define TILE_U ${tile_u}
#define LANES ${lanes}
// Lower neighbour tiles per axis whose points can reach a tile (table lane
// tiles narrower than the kernel: more than one), and the bins a tile reads.
#define REACH ${reach}
#define SOURCE_BINS ((REACH + 1) * (REACH + 1))
#define GROUPS ${groups}
// points staged at a time: one a work-item, or fewer (a wide table's staging)
#define BATCH ${batch}
// points a lane adds in the grid precision (float32 sums of at most
// FOLD_POINTS + BATCH / GROUPS values) before it folds them into its totals
#define FOLD_POINTS ${fold_points}
## Kernel sources of the GPU kernel `spread` (kernel_source: "es" | "table" |
## "table_full"): where it takes its weights: the ES kernel on the fly (above),
## or the tabulated kernels of clgrid.Gridder (clgrid/core/table.py; the table
## index of each point from set points' table_records): "table": separable
## tables table_u, table_v (w_planes, O, S) staged like the ES values (the v
## table's row in s_ku, the value times the u table's row in s_kv);
## "table_full": a full W-projection table (w_planes, O, O, S, S) read in the
## inner loop from the point's 2-D slice.  oversample (int O) and table_real
## (bool: separable tables with zero imaginary parts, staged as reals so the
## inner loop is the ES one) apply to the table sources only, which need
## do_w and shifted False; they add gather_table_values and crop_planes.
## spread_vector (CPUs) takes "table" with table_real: a point's taps are the
## rows of the tables padded to TAPS reals (taps_u, taps_v: (w_planes * O,
## TAPS), clgrid/core/table.py), its value from gather_table_values; and
## "table_full": the point's slice as S rows of TAPS complex weights
## (taps_full: (w_planes * O * O, S, TAPS) complex), each row times the value
## by a complex multiply on interleaved vectors.
<%
    if kernel_source not in ("es", "table", "table_full"):
        raise ValueError(f"kernel_source must be 'es', 'table' or 'table_full', "
                         f"got {kernel_source!r}")
    tabulated = kernel_source != "es"
    if tabulated and (do_w or shifted):
        raise ValueError("the table kernel sources run without w-stacking or facet shifts")
    if tabulated and vector and not (kernel_source == "table_full" or table_real):
        raise ValueError("spread_vector takes separable real tables or full ones "
                         "(kernel_source 'table' with table_real, or 'table_full')")
    table_args = {"es": "", "table": f", __global const {vec} *table_u, __global const {vec} *table_v",
                  "table_full": f", __global const {vec} *table"}[kernel_source]
    ku_type = real if (kernel_source == "es" or table_real) else vec
%>\
% if tabulated:
#define OVERSAMPLE ${oversample}
#define TABLE_CONJUGATE (1 << 30)
#define TABLE_INDEX_MASK (TABLE_CONJUGATE - 1)
% endif


// Offset (cells) of cell c from tile start t0 on a periodic axis of n cells,
// taken in (tile - n, tile): a footprint starting there can reach the tile only
// if the offset is in (-W, tile).  The ES path's grids are at least tile + W
// cells long, so no footprint reaches one tile from both ends; the tables'
// grids are not periodic (a kept footprint lies inside), so none does either.
inline int tile_offset(const int c, const int t0, const int n, const int tile)
{
    int d = c - t0;
    d += d < 0 ? n : 0;
    return d >= tile ? d - n : d;
}

// Visibility k (row k / nchan) times its weight, mask and facet phase, in
// the grid precision: everything the spreaders add but the kernel.
inline ${vec} point_value(const unsigned int k, __global const ${pos_t} *uvw,
                          __global const ${pos_t} *freq_scale, const unsigned int nchan,
                          __global const ${vvec} *vis, const unsigned int npol,
                          const unsigned int pol, __global const ${vis_real} *wgt,
                          __global const unsigned char *mask,
                          const ${pos_t} shift_u, const ${pos_t} shift_v,
                          __global const ${vec} *phasors)
{
    const ${vvec} raw = vis[(size_t)k * npol + pol];
    ${vec} val = (${vec})((${real})raw.x, (${real})raw.y);
% if weighted:
    val *= (${real})wgt[k];
% endif
% if masked:
    val = mask[k] ? val : (${vec})(0, 0);
% endif
% if shifted and kept_phases:
    val = cmul_${csuffix}(val, phasors[k]);
% elif shifted:
    val = cmul_${csuffix}(val, facet_phasor(k, uvw, freq_scale, nchan, shift_u, shift_v));
% endif
    return val;
}

// The part of the chunk [chunk_lo, chunk_hi) (counted over the source bins
// in order; *seen counts the points of the bins before) that lies in
// bin `bin`, w bins wlo..whi: positions [range.x, range.y) of the sort.
inline uint2 chunk_range(__global const unsigned int *bin_start, const unsigned int bin,
                         const int wlo, const int whi, const unsigned int chunk_lo,
                         const unsigned int chunk_hi, unsigned int *seen)
{
    const unsigned int bin_first = (wlo <= whi) ? bin_start[bin + wlo] : 0u;
    const unsigned int bin_end = (wlo <= whi) ? bin_start[bin + whi + 1] : 0u;
    const unsigned int size = bin_end - bin_first;
    // signed: a saturating unsigned subtract is an intrinsic Oclgrind lacks
    const long skip = (long)chunk_lo - (long)*seen, stop = (long)chunk_hi - (long)*seen;
    *seen += size;
    return (uint2)(bin_first + (unsigned int)(skip <= 0 ? 0 : (skip < size ? skip : size)),
                   bin_first + (unsigned int)(stop <= 0 ? 0 : (stop < size ? stop : size)));
}

% if split_bins:
<%
    if reach != 1 or do_w or vector:
        raise ValueError("split_bins: the tile kernel without w, one neighbour a side")
%>\
// The sub-bins (ranks of core_setpoints.cl.mako's split_bins) of source bin
// sb whose points reach this tile: all of its own, ranks 1-2 of the lower
// neighbour in u, 2-3 of the one in v, 2 of the diagonal one.
inline uint2 source_ranks(const int sb)
{
    const int du_bin = sb / (REACH + 1) - REACH, dv_bin = sb % (REACH + 1) - REACH;
    return du_bin == 0 ? (dv_bin == 0 ? (uint2)(0, 4) : (uint2)(2, 4))
                       : (dv_bin == 0 ? (uint2)(1, 3) : (uint2)(2, 3));
}

% endif
// Source bin sb (0 .. SOURCE_BINS - 1) of tile (tu, tv): the tile's own or a
// lower neighbour up to REACH tiles away per axis, as the index of its first
// w bin; -1 where an axis of fewer tiles would repeat one.
inline int source_bin(const int sb, const int tu, const int tv, const int ntiles_u,
                      const int ntiles_v, const int n_wbins)
{
    const int du_bin = sb / (REACH + 1) - REACH, dv_bin = sb % (REACH + 1) - REACH;
    if (-du_bin >= ntiles_u || -dv_bin >= ntiles_v)
        return -1;
    const int bu = (tu + du_bin + ntiles_u) % ntiles_u;
    const int bv = (tv + dv_bin + ntiles_v) % ntiles_v;
    return (bu * ntiles_v + bv) * n_wbins;
}

% if tabulated:
// clgrid.Gridder on the core, once per call and polarisation: the values
// `spread` adds, in the order of the sort: visibility times its weight (per
// polarisation), zero where that polarisation is flagged, conjugated where
// set points negated uvw.  Non-finite visibilities or weights are counted
// (n_bad) so that the caller can refuse them before spreading.
__kernel void gather_table_values(__global const int4 *cells, const unsigned int n_valid,
                                  __global const ${vvec} *vis, const unsigned int npol,
                                  const unsigned int pol, __global const ${real} *wgt,
                                  __global const unsigned char *flags,
                                  __global ${vec} *values, volatile __global unsigned int *n_bad)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    const int4 cell = cells[i];
    const size_t at = (size_t)(unsigned int)cell.w * npol + pol;
    const ${vvec} raw = vis[at];
    ${vec} value = (${vec})((${real})raw.x, (${real})raw.y);
    bool finite = isfinite(raw.x) && isfinite(raw.y);
%   if weighted:
    const ${real} weight = wgt[at];
    finite = finite && isfinite(weight);
    value *= weight;
%   endif
%   if masked:
    value = flags[at] ? (${vec})(0, 0) : value;
%   endif
    if (cell.z & TABLE_CONJUGATE)
        value.y = -value.y;
    if (!finite)
        atomic_inc(n_bad);
    values[i] = value;
}

// The grid of clgrid.Gridder from the core's planes, whose sides are padded
// to whole tiles: the (rows, cols) corner of each of the planes written to
// (or, with accumulate, added to) the (planes, rows, cols) grid.
__kernel void crop_planes(__global const ${vec} *padded, const int rows_padded,
                          const int cols_padded, __global ${vec} *grid, const int rows,
                          const int cols, const int accumulate)
{
    const int x = get_global_id(0), y = get_global_id(1), p = get_global_id(2);
    if (x >= cols || y >= rows)
        return;
    const ${vec} value = padded[((size_t)p * rows_padded + y) * cols_padded + x];
    const size_t at = ((size_t)p * rows + y) * cols + x;
    grid[at] = accumulate ? grid[at] + value : value;
}

% endif

% if not vector:
// GPUs, once per call and polarisation: the values `spread` adds, in the
// order of the sort (point_value of each valid point), so that the
// work-groups, which read every point up to SOURCE_BINS times, read them in
// sequence rather than gathering them from the visibilities' order.  The
// visibility index comes from the sort's 4 bytes a point, not the cells' 16.
// It also counts into *nonfinite the points whose visibility (or weight) is
// NaN or Inf, so that the imager need not read every visibility once more
// to refuse them (Spreader.counts_nonfinite).
__kernel void gather_values(__global const unsigned int *sorted_index,
                            const unsigned int n_valid,
                            __global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                            const unsigned int nchan,
                            __global const ${vvec} *vis, const unsigned int npol,
                            const unsigned int pol,
                            __global const ${vis_real} *wgt, __global const unsigned char *mask,
                            const ${pos_t} shift_u, const ${pos_t} shift_v,
                            __global const ${vec} *phasors, __global ${vec} *values,
                            __global unsigned int *nonfinite)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    const unsigned int k = sorted_index[i];
    values[i] = point_value(k, uvw, freq_scale, nchan, vis, npol, pol,
                            wgt, mask, shift_u, shift_v, phasors);
    const ${vvec} raw = vis[(size_t)k * npol + pol];
    bool finite = isfinite(raw.x) && isfinite(raw.y);
% if weighted:
    finite = finite && isfinite(wgt[k]);
% endif
    if (!finite)
        atomic_inc(nonfinite);
}
% endif
<%def name="prefetch()">\
// (the batch after next_base's in bin next_sb, or the next bin's first)
    while (next_sb < SOURCE_BINS && next_base >= ranges[next_sb].y) {
        ++next_sb;
        next_base = next_sb < SOURCE_BINS ? ranges[next_sb].x : 0u;
    }
    if (next_sb < SOURCE_BINS && next_base + tid < ranges[next_sb].y
            && tid < BATCH) {
        const unsigned int at = next_base + tid;
        next_cell = cells[at];
        next_value = values[at];
% if kernel_source == "es":
        next_t = fracs[at];
% endif
    }
</%def>
% if not vector:

// GPUs: a work-group of GROUPS x LANES work-items per work item (tile,
// plane, chunk); the points come from point_records (set points) and
// gather_values, in order.  Each group of LANES lanes keeps the whole tile
// (lane = column) and takes every GROUPS-th point of a batch, so narrow
// tiles keep most lanes busy; at the end group 0 adds the others' tiles in
// group order (a fixed order: the same bits every run).  With w-stacking and
// PLANE_BLOCK > 1 a work item is (tile, block of planes, chunk): GROUPS
// groups for each plane of the block, so a point's u and v taps are staged
// once for the block, with its w weight in each plane (s_kw), instead of
// once per plane.
#define PLANE_BLOCK ${plane_block}
#define LANE_GROUPS (GROUPS * PLANE_BLOCK)
% if kernel_source == "es":
%   if compact:
// GPUs stage each touching point's taps at their places in this tile, zeros
// elsewhere: row r of the tile reads its u tap s_ku[p][r] (four rows a
// load), lane l its v tap times the value s_kv[p][l]; no offsets, no test
// (an H100: the w spread 57.2 -> 42.4 ms, without w 17.1 -> 16.3 ms, against
// taps between zero pads read at the point's offset).  Row strides of
// KU_STRIDE reals and LANES + 1 complex keep the staging work-items' stores
// off each other's banks (strides of TILE_U and LANES put 8 and 16 of them
// on one bank: 2.5 ms more with w).
#define KU_STRIDE (${-(-tile_u // 4) * 4} + 4)
#define KV_STRIDE (LANES + 1)
%   else:
// CPUs (all points staged, those that miss the tile parked) stage a point's
// u taps between zero pads of TILE_U - 1, so a lane's rows read them
// without a test: row r of a point at offset du is s_ku[p][KU_PAD - du + r],
// zero outside the footprint; a lane tests its v tap's offset.
#define KU_PAD (TILE_U - 1)
#define KU_ROW (2 * KU_PAD + SUPPORT)
%   endif
% endif
## A touching point's taps staged at index `at` of the batch (the ES source).
<%def name="stage_es(at)">\
                const ${real} xu = t.x - HALF_SUPPORT, xv = t.y - HALF_SUPPORT;
                ${vec} value = point_value;
% if do_w and plane_block > 1:
                // tap j = plane - w bin of each plane of the block, 0 past the
                // footprint; the taps as the interpolation's kernel_taps has them
                const int first_tap = first_plane - cell.z;
%   if context.get("kernel_eval", "exp") == "horner":
                ${real} taps_w[SUPPORT];
                kernel_taps(t.z, taps_w);
%   endif
                for (int g = 0; g < PLANE_BLOCK; ++g) {
                    const int j = first_tap + g;
%   if context.get("kernel_eval", "exp") == "horner":
                    ${real} weight = (${real})0;
                    #pragma unroll
                    for (int a = 0; a < SUPPORT; ++a)
                        weight = j == a ? taps_w[a] : weight;
                    s_kw[${at}][g] = weight;
%   else:
                    s_kw[${at}][g] = (j >= 0 && j < SUPPORT)
                        ? es_kernel((${real})j - HALF_SUPPORT + t.z) : (${real})0;
%   endif
                }
% elif do_w and context.get("kernel_eval", "exp") == "horner":
                // the w weight as the interpolation's kernel_taps has it (adjoint)
                value *= kernel_tap(t.z, plane - cell.z);
% elif do_w:
                value *= es_kernel((${real})(plane - cell.z) - HALF_SUPPORT + t.z);
% endif
                ${real} taps_u[SUPPORT], taps_v[SUPPORT];
% if context.get("kernel_eval", "exp") == "horner":
                kernel_taps(t.x, taps_u);
                kernel_taps(t.y, taps_v);
% else:
                for (int a = 0; a < SUPPORT; ++a) {
                    taps_u[a] = es_kernel(xu + (${real})a);
                    taps_v[a] = es_kernel(xv + (${real})a);
                }
% endif
% if compact:
                // each tap at its row (u) or lane (v) of this tile, zeros elsewhere
                for (int r4 = 0; r4 < (TILE_U + 3) / 4; ++r4)
                    ((__local ${real}4 *)s_ku[${at}])[r4] = (${real}4)0;
                for (int l = 0; l < LANES; ++l)
                    s_kv[${at}][l] = (${vec})(0, 0);
                for (int a = 0; a < SUPPORT; ++a) {
                    if (du + a >= 0 && du + a < TILE_U)
                        s_ku[${at}][du + a] = taps_u[a];
                    if (dv + a >= 0 && dv + a < LANES)
                        s_kv[${at}][dv + a] = value * taps_v[a];
                }
% else:
                for (int a = 0; a < SUPPORT; ++a) {
                    s_ku[${at}][KU_PAD + a] = taps_u[a];
                    s_kv[${at}][a] = value * taps_v[a];
                }
% endif
</%def>
## acc (the grid precision) added into the lane's totals and cleared.
<%def name="fold_acc()">\
            for (int r = 0; r < TILE_U; ++r) {
                ${add_total("s_total[group][r][lane]" if local_state else "total[r]", "acc[r]")};
                acc[r] = (${vec})(0, 0);
            }
</%def>
## The zero pads either side of every staged point's taps in `array`, once
## per kernel (a pad of zero length takes no loop: its divisor would be 0).
<%def name="zero_pads(array, pad, row, zero)">\
    for (int i = tid; i < BATCH * (${row} - SUPPORT); i += LANES * LANE_GROUPS) {
        const int p = i / (${row} - SUPPORT), j = i - (i / (${row} - SUPPORT)) * (${row} - SUPPORT);
        ${array}[p][j < ${pad} ? j : j + SUPPORT] = ${zero};
    }
</%def>
__kernel __attribute__((reqd_work_group_size(LANES * LANE_GROUPS, 1, 1)))
void spread(__global const int4 *cells, __global const ${real}4 *fracs,
            __global const ${vec} *values, __global const unsigned int *bin_start,
            __global const unsigned int *split_start,
            __global ${vec} *planes, const int nu, const int nv,
            const int ntiles_u, const int ntiles_v,
            const int plane0, const int n_wbins,
            __global const int4 *work, const unsigned int chunk_points,
            __global ${total_t} *scratch, const int accumulate, const int n_pass${table_args})
{
    const int4 item = work[get_group_id(0)];   // (tile, plane in pass, chunk, slot or -1)
    const int tile = item.x;
    const int tid = get_local_id(0);
% if plane_block > 1:
    // GROUPS groups of lanes for each plane of the block
    const int lane = tid % LANES, group = (tid / LANES) % GROUPS;
    const int plane_offset = tid / (LANES * GROUPS);
    const int first_plane = plane0 + item.y;
    const int plane = first_plane + plane_offset;
    // the last block of a pass may hold fewer planes: the rest stage, never write
    const bool plane_written = item.y + plane_offset < n_pass;
% else:
    const int lane = tid % LANES, group = tid / LANES;
    const int plane = plane0 + item.y;
% endif
    // this chunk's share of the points of the source bins, counted in bin order
    const unsigned int chunk_lo = (unsigned int)item.z * chunk_points;
    const unsigned int chunk_hi = chunk_lo + chunk_points;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int u0 = tu * TILE_U, v0 = tv * LANES;

% if not compact:
    __local int s_du[BATCH], s_dv[BATCH];
% endif
% if kernel_source == "table_full":
    __local ${vec} s_value[BATCH];    // the point's value
    __local int s_slice[BATCH];       // start of its S x S slice of the table
% elif kernel_source == "es":
%   if compact:
    // a staged point's u taps on the tile's rows (zeroed and read 4 at a
    // time), its v taps times the value on its lanes
    __local ${real} s_ku[BATCH][KU_STRIDE] __attribute__((aligned(4 * sizeof(${real}))));
    __local ${vec} s_kv[BATCH][KV_STRIDE];
%   else:
    __local ${ku_type} s_ku[BATCH][KU_ROW];
    __local ${vec} s_kv[BATCH][SUPPORT];
    // the pads stay zero: only the taps between them are staged
${zero_pads("s_ku", "KU_PAD", "KU_ROW", "(" + real + ")0")}\
%   endif
% else:
    __local ${ku_type} s_ku[BATCH][SUPPORT];
    __local ${vec} s_kv[BATCH][SUPPORT];
% endif
% if plane_block > 1:
    __local ${real} s_kw[BATCH][PLANE_BLOCK];   // a point's w weight in each plane
% endif
% if compact and not split_bins:
#define TOUCH_WORDS ((BATCH + 31) / 32)
    __local unsigned int s_touch[TOUCH_WORDS];   // a bit a point of the batch that touches
    if (tid < TOUCH_WORDS)
        s_touch[tid] = 0u;
% endif

    ${vec} acc[TILE_U];      // this lane's column of the tile, in registers
    unsigned int lane_points = 0;
% if local_state:
    // the lanes' totals in local memory: registers bound the warps a
    // compute unit holds (an H100: 104 -> 86 registers, spread 7% faster,
    // benchmarks/RESULTS.md)
    __local ${total_t} s_total[GROUPS][TILE_U][LANES];
    for (int r = 0; r < TILE_U; ++r) {
        acc[r] = (${vec})(0, 0);
        s_total[group][r][lane] = (${total_t})(0);
    }
% else:
    ${total_t} total[TILE_U];
    for (int r = 0; r < TILE_U; ++r) {
        acc[r] = (${vec})(0, 0);
        total[r] = (${total_t})(0);
    }
% endif

% if do_w and plane_block > 1:
    // the w bins whose points reach any plane of the block
    const int wlo = max(first_plane - SUPPORT + 1, 0);
    const int whi = min(first_plane + PLANE_BLOCK - 1, n_wbins - 1);
% elif do_w:
    const int wlo = max(plane - SUPPORT + 1, 0), whi = min(plane, n_wbins - 1);
% else:
    const int wlo = 0, whi = 0;
% endif
    // this chunk's part of every source bin: [x, y) of the sort (empty for a
    // bin an axis of fewer tiles would repeat)
% if local_state:
    // (the group's, in local memory: 5% off the spread on an H100)
    __local uint2 ranges[SOURCE_BINS];
    if (tid == 0) {
% else:
    uint2 ranges[SOURCE_BINS];
    {
% endif
        unsigned int seen = 0;
        for (int sb = 0; sb < SOURCE_BINS; ++sb) {
            const int bin = source_bin(sb, tu, tv, ntiles_u, ntiles_v, n_wbins);
            ranges[sb] = bin < 0 ? (uint2)(0, 0)
                                 : chunk_range(bin_start, (unsigned int)bin, wlo, whi,
                                               chunk_lo, chunk_hi, &seen);
% if split_bins:
            // the chunk counts whole bins (as the host's work list does);
            // it reads their part that reaches the tile
            if (bin >= 0) {
                const uint2 ranks = source_ranks(sb);
                const uint2 reaching = (uint2)(split_start[4 * bin + ranks.x],
                                               split_start[4 * bin + ranks.y]);
                ranges[sb] = (uint2)(clamp(ranges[sb].x, reaching.x, reaching.y),
                                     clamp(ranges[sb].y, reaching.x, reaching.y));
            }
% endif
        }
    }
% if local_state:
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    // A work-item's point of the next batch is read into registers before
    // the current one is staged and added, so that its loads wait meanwhile
    // (3% off the spread on an H100, benchmarks/RESULTS.md).
    int4 next_cell = (int4)(0);
    ${vec} next_value = (${vec})(0, 0);
% if kernel_source == "es":
    ${real}4 next_t = (${real}4)(0);
% endif
    int next_sb = 0;
    unsigned int next_base = ranges[0].x;
    ${prefetch()}
    for (int sb = 0; sb < SOURCE_BINS; ++sb) {
        const uint2 range = ranges[sb];
        for (unsigned int base = range.x; base < range.y; base += BATCH) {
            const int n_here = (int)min((unsigned int)BATCH, range.y - base);
            const int4 cell = next_cell;
            const ${vec} point_value = next_value;
% if kernel_source == "es":
            const ${real}4 t = next_t;
% endif
            next_sb = sb;
            next_base = base + BATCH;
            ${prefetch()}
            barrier(CLK_LOCAL_MEM_FENCE);
% if compact and split_bins:
            // split bins: every point of the ranges reaches this tile, so the
            // batch is staged as read, a point a work-item: no touch bits, no
            // bit counts, a barrier fewer (an H100 without w: spread 11.7-11.9
            // -> 10.0-10.2 ms, benchmarks/RESULTS.md)
            const int n_points = n_here, at = tid;
            if (tid < n_here) {
                const int du = tile_offset(cell.x, u0, nu, TILE_U);
                const int dv = tile_offset(cell.y, v0, nv, LANES);
${stage_es("at")}\
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int p = group; p < n_points; p += GROUPS) {
% elif compact:
            // GPUs (spread.compacts_points): the batch's points that touch
            // this tile, staged side by side in batch order with their taps at
            // their places in the tile, so that the loop below has no test and
            // adds them in the same order every run: a bit a point, set by
            // atomics (the bits do not depend on their order); a point's
            // place is the count of set bits before its own.
            int du = 0, dv = 0;
            bool touches = false;
            if (tid < n_here) {
                du = tile_offset(cell.x, u0, nu, TILE_U);
                dv = tile_offset(cell.y, v0, nv, LANES);
                touches = du > -SUPPORT && du < TILE_U && dv > -SUPPORT && dv < LANES;
                if (touches)
                    atomic_or(&s_touch[tid / 32], 1u << (tid % 32));
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            int n_points = 0, at = 0;
            for (int k = 0; k < TOUCH_WORDS; ++k) {
                const unsigned int bits = s_touch[k];
                n_points += popcount(bits);
                at += k < tid / 32 ? popcount(bits)
                    : k == tid / 32 ? popcount(bits & ((1u << (tid % 32)) - 1u)) : 0;
            }
            if (touches) {
${stage_es("at")}\
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (tid < TOUCH_WORDS)
                s_touch[tid] = 0u;   // every work-item has read them (barrier above)
            for (int p = group; p < n_points; p += GROUPS) {
                // (every lane and row reads its own tap: no offsets, no test)
% else:
            if (tid < n_here) {
                const int du = tile_offset(cell.x, u0, nu, TILE_U);
                const int dv = tile_offset(cell.y, v0, nv, LANES);
                const bool touches = du > -SUPPORT && du < TILE_U && dv > -SUPPORT && dv < LANES;
                // a point that misses this tile is parked far away
                s_du[tid] = touches ? du : -4 * SUPPORT;
                s_dv[tid] = touches ? dv : -4 * SUPPORT;
% if kernel_source == "table":
                if (touches) {
                    // the point's rows of the tables: v (rows) and u (lanes)
                    const int index = cell.z & TABLE_INDEX_MASK;
                    const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
                    const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
                    __global const ${vec} *kernel_v = table_v
                        + (size_t)(w_plane * OVERSAMPLE + fy) * SUPPORT;
                    __global const ${vec} *kernel_u = table_u
                        + (size_t)(w_plane * OVERSAMPLE + fx) * SUPPORT;
                    const ${vec} value = point_value;
                    for (int a = 0; a < SUPPORT; ++a) {
%   if table_real:
                        s_ku[tid][a] = kernel_v[a].x;
                        s_kv[tid][a] = value * kernel_u[a].x;
%   else:
                        s_ku[tid][a] = kernel_v[a];
                        s_kv[tid][a] = cmul_${csuffix}(value, kernel_u[a]);
%   endif
                    }
                }
% elif kernel_source == "table_full":
                if (touches) {
                    s_value[tid] = point_value;
                    s_slice[tid] = (cell.z & TABLE_INDEX_MASK) * SUPPORT * SUPPORT;
                }
% else:
                if (touches) {
${stage_es("tid")}\
                }
% endif
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int p = group; p < n_here; p += GROUPS) {
                const int b = lane - s_dv[p];
                if (b < 0 || b >= SUPPORT)
                    continue;
% endif
% if kernel_source == "table_full":
                const ${vec} value = s_value[p];
                // this lane's column of the point's slice, row a at a * SUPPORT
                __global const ${vec} *column = table + s_slice[p] + b;
                const int du = s_du[p];
                #pragma unroll
                for (int r = 0; r < TILE_U; ++r) {
                    const int a = r - du;
                    if (a >= 0 && a < SUPPORT)
                        acc[r] += cmul_${csuffix}(column[a * SUPPORT], value);
                }
% elif kernel_source == "es":
%   if compact:
%     if plane_block > 1:
                // a plane the footprint misses has weight 0 (no test: the
                // other planes of the warp take the same time)
                const ${vec} kv = s_kv[p][lane] * s_kw[p][plane_offset];
%     else:
                const ${vec} kv = s_kv[p][lane];
%     endif
%     if tile_u % 4 == 0:
                // the u taps 4 rows a load
                #pragma unroll
                for (int r4 = 0; r4 < TILE_U / 4; ++r4) {
                    const ${real}4 ku = ((const __local ${real}4 *)s_ku[p])[r4];
                    acc[4 * r4] += ku.x * kv;
                    acc[4 * r4 + 1] += ku.y * kv;
                    acc[4 * r4 + 2] += ku.z * kv;
                    acc[4 * r4 + 3] += ku.w * kv;
                }
%     else:
                #pragma unroll
                for (int r = 0; r < TILE_U; ++r)
                    acc[r] += s_ku[p][r] * kv;
%     endif
%   else:
%     if plane_block > 1:
                // a plane the footprint misses has weight 0 (no test: the
                // other planes of the warp take the same time)
                const ${vec} kv = s_kv[p][b] * s_kw[p][plane_offset];
%     else:
                const ${vec} kv = s_kv[p][b];
%     endif
                const int row0 = KU_PAD - s_du[p];   // padded taps: no row test
                // a fixed, unrolled row loop keeps acc in registers
                #pragma unroll
                for (int r = 0; r < TILE_U; ++r)
                    acc[r] += s_ku[p][row0 + r] * kv;
%   endif
% else:
                const ${vec} kv = s_kv[p][b];
                const int du = s_du[p];
                // a fixed, unrolled row loop keeps acc in registers
                #pragma unroll
                for (int r = 0; r < TILE_U; ++r) {
                    const int a = r - du;
                    if (a >= 0 && a < SUPPORT)
%   if ku_type == real:
                        acc[r] += s_ku[p][a] * kv;
%   else:
                        acc[r] += cmul_${csuffix}(s_ku[p][a], kv);
%   endif
                }
% endif
            }
            // a lane has added at most this many points since its last fold
            lane_points += (${"n_points" if compact else "n_here"} + GROUPS - 1) / GROUPS;
            if (lane_points >= FOLD_POINTS) {
${fold_acc()}\
                lane_points = 0;
            }
        }
    }
${fold_acc()}\
% if local_state:
    // the groups' copies of the tile added in group order
    ${total_t} total[TILE_U];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group > 0)
        return;
    for (int r = 0; r < TILE_U; ++r)
        total[r] = s_total[0][r][lane];
    for (int g = 1; g < GROUPS; ++g)
        for (int r = 0; r < TILE_U; ++r)
%   if float_float:
            total[r] = kahan_add(total[r], kahan_value(s_total[g][r][lane]));
%   else:
            total[r] += s_total[g][r][lane];
%   endif
% elif groups > 1:
<% po = "[plane_offset]" if plane_block > 1 else "" %>\
    __local ${total_t} s_total[GROUPS - 1]${"[PLANE_BLOCK]" if plane_block > 1 else ""}[TILE_U][LANES];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group > 0)
        for (int r = 0; r < TILE_U; ++r)
            s_total[group - 1]${po}[r][lane] = total[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group > 0)
        return;
    for (int g = 0; g < GROUPS - 1; ++g)
        for (int r = 0; r < TILE_U; ++r)
% if float_float:
            total[r] = kahan_add(total[r], kahan_value(s_total[g]${po}[r][lane]));
% else:
            total[r] += s_total[g]${po}[r][lane];
% endif
% endif
% if plane_block > 1:
    if (!plane_written)
        return;
    // a split item's chunk: PLANE_BLOCK slots from item.w, one a plane
    const int plane_in_pass = item.y + plane_offset;
    const int slot = item.w < 0 ? -1 : item.w + plane_offset;
% else:
    const int plane_in_pass = item.y, slot = item.w;
% endif
    if (slot < 0) {
        __global ${vec} *out = planes + (size_t)plane_in_pass * nu * nv + (size_t)u0 * nv + v0 + lane;
        for (int r = 0; r < TILE_U; ++r) {
            if (accumulate)
                ${add_total("total[r]", "out[(size_t)r * nv]")};
            out[(size_t)r * nv] = ${total_value("total[r]")};
        }
    } else {
        __global ${total_t} *out = scratch + (size_t)slot * TILE_U * LANES + lane;
        for (int r = 0; r < TILE_U; ++r)
            out[r * LANES] = total[r];
    }
}

% endif
% if vector:
<%
    rn = real + "4"
    # full slices (kernel_source "table_full") take rows of up to 64 taps,
    # in pieces of 16 reals; tap vectors (ES, real separable rows) 16
    taps_n = row_taps
    if taps_n > 16 and kernel_source != "table_full":
        raise ValueError(f"spread_vector takes support <= 16 but for full slices (64), "
                         f"got {support} with kernel_source {kernel_source!r}")
    tn = real + str(taps_n)
    columns = ", ".join(str(c) for c in range(taps_n))
    suffix = "f" if real == "float" else ""
    digits = 9 if real == "float" else 17
    def vector_literal(values):
        padded = list(values) + [0.0] * (taps_n - len(values))
        return "(" + tn + ")(" + ", ".join(("%." + str(digits) + "e") % v + suffix
                                          for v in padded) + ")"
    index_type = "uint" if real == "float" else "ulong"
    mask_type = ("int" if real == "float" else "long") + str(taps_n)
    def edge_mask(lane):
        return "(" + mask_type + ")(" + ", ".join("-1" if c == lane else "0"
                                                  for c in range(taps_n)) + ")"
    # rows hold complex cells, real and imaginary parts interleaved as in the
    # grid; a point's row update is TAPS complex cells, in pieces of at most
    # 16 reals (one OpenCL vector)
    piece = min(2 * taps_n, 16)
    pieces = 2 * taps_n // piece
    pn = real + str(piece)
    swap_pattern = ", ".join("%d, %d" % (2 * c + 1, 2 * c) for c in range(piece // 2))
    def complex_im_pattern(name):   # (-im, im, -im, im, ...) of a complex value
        return "(" + pn + ")(" + ", ".join(["-%s.y, %s.y" % (name, name)] * (piece // 2)) + ")"
    def pair_lanes(h):   # taps of piece h, each twice (real, imaginary part)
        return ", ".join("%d, %d" % (c, c) for c in range(h * piece // 2, (h + 1) * piece // 2))
    value_pattern = ", ".join(["value.x, value.y"] * (piece // 2))
    row_cells = -(-max(lanes + support - 1, lanes + taps_n) // 8) * 8
    acc_chunks = 2 * row_cells // 16
%>
#define FOLD_EVERY 32
#define PLANE_BLOCK ${plane_block}
// A point's W taps: lanes 0 .. W - 1 of a vector of TAPS (4, 8 or 16) lanes.
#define TAPS ${taps_n}
// Private tile of spread_vector: the tile's TILE_U x LANES cells plus a halo
// of SUPPORT - 1 rows below and columns right (where the footprints of the
// tile's own points run over into its upper neighbours), rows of ROW complex
// cells, real and imaginary parts interleaved (room for TAPS cells at any
// column offset of the tile), so that a point's footprint is added without
// clipping: one vector of 2 TAPS reals per row (PIECES of PIECE reals).
#define ACC_ROWS (TILE_U + SUPPORT - 1)
#define ACC_COLS (LANES + SUPPORT - 1)
#define ROW ${row_cells}
#define PIECE ${piece}
#define PIECES ${pieces}
// Rows are folded 16 reals (8 cells) at a time: ACC_CHUNKS per row.
#define ACC_CHUNKS ${acc_chunks}
// One halo slot (a tile's halo in one plane), complex cells: the right strip
// (ACC_ROWS x (W - 1): columns LANES .. of every row, the corner included),
// then the bottom strip ((W - 1) x LANES: rows TILE_U .., the tile's columns).
#define HALO_W (SUPPORT - 1)
#define BOTTOM_AT (ACC_ROWS * HALO_W)
#define HALO_CELLS (BOTTOM_AT + HALO_W * LANES)

// The W taps phi(t + a - W/2), a = 0 .. W - 1, of a point at offset t as
// lanes 0 .. W - 1 of one vector of TAPS lanes (the other lanes 0).
% if taps_n <= 16:
inline ${tn} es_taps(const ${real} t)
{
% if kernel_eval == "horner":
    // ducc0's form: per tap a polynomial in its variable x in [-1, 1]
    // (eskernel.horner_coefficients, horner_variables): 2t - 1 inside, and
    // 2 sqrt(t) - 1, 2 sqrt(1 - t) - 1 for the edge taps (square-root edge)
    const ${real}2 roots = sqrt(fmax((${real}2)(t, (${real})1 - t), (${real})0));
    ${tn} x = select((${tn})t, (${tn})roots.x, ${edge_mask(0)});
    x = select(x, (${tn})roots.y, ${edge_mask(support - 1)});
    x = fma(x, (${tn})2, (${tn})-1);
    ${tn} taps = ${vector_literal(horner[0])};
%   for row in horner[1:]:
    taps = fma(taps, x, ${vector_literal(row)});
%   endfor
    return taps;
% else:
    const ${tn} z = (t - HALF_SUPPORT + (${tn})(${columns})) * INV_HALF_SUPPORT;
    const ${tn} z2 = z * z;
    const ${tn} inside = exp(ES_BETA * (sqrt(fmax((${real})1 - z2, (${real})0)) - (${real})1));
    return select((${tn})0, inside, z2 < (${real})1);
% endif
}
% endif

// Adds rows [r_lo, r_hi) x chunks [q_lo, q_hi) (16 reals each) of one
// plane's private tile into its float64 totals and clears them.
inline void fold_rows(${real} *acc, double16 *total, const int r_lo, const int r_hi,
                      const int q_lo, const int q_hi)
{
    for (int r = r_lo; r < r_hi; ++r)
        for (int q = q_lo; q < q_hi; ++q) {
            const int at = 2 * r * ROW + 16 * q;
            total[r * ACC_CHUNKS + q] += convert_double16(vload16(0, acc + at));
            vstore16((${real}16)0, 0, acc + at);
        }
}

// Row r of one plane's finished private tile (parts: its cells, real and
// imaginary parts as doubles): the tile's own cells to the grid (out: the
// tile's first cell in that plane) or, past its rows, to the bottom strip of
// its halo slot; the columns right of the tile to the right strip.
inline void store_tile_row(const double *parts, const int r, __global ${vec} *out,
                           const int nv, __global ${vec} *halo)
{
    if (r < TILE_U) {
        __global ${vec} *grid_row = out + (size_t)r * nv;
        for (int c = 0; c < LANES; ++c)
            grid_row[c] = (${vec})((${real})parts[2 * c], (${real})parts[2 * c + 1]);
    } else {
        for (int c = 0; c < LANES; ++c)
            halo[BOTTOM_AT + (r - TILE_U) * LANES + c] =
                (${vec})((${real})parts[2 * c], (${real})parts[2 * c + 1]);
    }
    for (int c = 0; c < HALO_W; ++c)
        halo[r * HALO_W + c] = (${vec})((${real})parts[2 * (LANES + c)],
                                        (${real})parts[2 * (LANES + c) + 1]);
}

// CPUs, stage 1 of 3: one work-item per work item, alone in its work-group
// (its private tiles are tens of KiB: PoCL, which keeps the private data of a
// whole work-group at once, overflowed its stack with large groups).  An item
// is a tile and a block of up to PLANE_BLOCK w planes (tile, first plane in
// pass, planes, halo slot or -1 when no point is in its bins, chunk, chunk
// slot or -1, -, -).  It grids only the points of its own bins (read from
// point_records, in the order of the sort; of a dense tile, chunk_points of
// them a chunk, whose totals go to chunk slots that fold_vector_chunks adds),
// each once: a tap vector in u, in v and in w, then per plane W row
// updates of the private tile with halo, one vector FMA of 2 TAPS reals each
// (complex cells interleaved, as in the grid).  The float64 fold comes after
// every FOLD_EVERY points and adds only the rows and columns touched since the
// last.  The tile goes to the grid; its halo, which belongs to the tiles above
// it in u and v, to its slot, which add_halos adds there.
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void spread_vector(
% if kernel_source == "table_full":
            __global const int4 *cells, __global const ${vec} *values,
            __global const unsigned int *bin_start, __global const ${real} *taps_full,
% elif tabulated:
            __global const int4 *cells, __global const ${vec} *values,
            __global const unsigned int *bin_start,
            __global const ${real} *taps_u, __global const ${real} *taps_v,
% else:
            __global const int4 *cells, __global const ${rn} *fracs,
            __global const unsigned int *bin_start,
            __global const double *uvw, __global const double *freq_scale,
            const unsigned int nchan,
            __global const ${vvec} *vis, const unsigned int npol, const unsigned int pol,
            __global const ${vis_real} *wgt, __global const unsigned char *mask,
% endif
            __global ${vec} *planes, const int nu, const int nv,
            const int ntiles_u, const int ntiles_v,
            const int plane0, const int n_wbins,
            const double shift_u, const double shift_v, __global const ${vec} *phasors,
            __global const int8 *work, __global ${vec} *halos,
            const unsigned int chunk_points, __global double16 *chunk_totals)
{
    const int8 item = work[get_global_id(0)];
    const int tile = item.s0;
    const int first_plane = plane0 + item.s1, n_planes = item.s2;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int u0 = tu * TILE_U, v0 = tv * LANES;
    __global ${vec} *out = planes + (size_t)item.s1 * nu * nv + (size_t)u0 * nv + v0;
    if (item.s3 < 0) {   // no point in the tile's bins: zeros, no halo
        for (int j = 0; j < n_planes; ++j)
            for (int r = 0; r < TILE_U; ++r) {
                __global ${vec} *row = out + (size_t)j * nu * nv + (size_t)r * nv;
                for (int c = 0; c < LANES; ++c)
                    row[c] = (${vec})(0, 0);
            }
        return;
    }
% if do_w:
    const int wlo = max(first_plane - SUPPORT + 1, 0);
    const int whi = min(first_plane + n_planes - 1, n_wbins - 1);
% else:
    const int wlo = 0, whi = 0;
% endif
    const unsigned int bin = (unsigned int)tile * n_wbins;
    // a chunk of a dense tile's points (item.s4: which; the work list splits
    // only the tiles of more than chunk_points)
    const unsigned int first = bin_start[bin + wlo] + (unsigned int)item.s4 * chunk_points;
    const unsigned int end = min(bin_start[bin + whi + 1], first + chunk_points);

    ${real} acc[PLANE_BLOCK][2 * ACC_ROWS * ROW];
    double16 total[PLANE_BLOCK][ACC_ROWS * ACC_CHUNKS];
    for (int j = 0; j < n_planes; ++j) {
        for (int c = 0; c < 2 * ACC_ROWS * ROW; ++c)
            acc[j][c] = (${real})0;
        for (int r = 0; r < ACC_ROWS * ACC_CHUNKS; ++r)
            total[j][r] = (double16)0;
    }
    ${real} ku[TAPS];
% if do_w:
    ${real} kw[TAPS];
% endif
    // rows and columns touched since the last fold (points of one bin are
    // close together: a fold usually adds a few rows, not the whole tile)
    int since_fold = 0, r_lo = ACC_ROWS, r_hi = 0, c_lo = ACC_COLS, c_hi = 0;
    for (unsigned int position = first; position < end; ++position) {
        const int4 cell = cells[position];
        const int du = cell.x - u0, dv = cell.y - v0;   // in [0, TILE_U) x [0, LANES)
% if kernel_source == "table_full":
        // the point's slice: S rows (v) of TAPS complex weights (u), padded
        const ${vec} value = values[position];
        __global const ${real} *slice = taps_full
            + (size_t)(cell.z & TABLE_INDEX_MASK) * SUPPORT * 2 * TAPS;
        const ${pn} value_re = (${pn})(value.x), value_im = ${complex_im_pattern("value")};
        ${real} *row = acc[0] + 2 * (du * ROW + dv);
        r_lo = min(r_lo, du);
        r_hi = max(r_hi, du + SUPPORT);
        c_lo = min(c_lo, dv);
        c_hi = max(c_hi, dv + SUPPORT);
        for (int a = 0; a < SUPPORT; ++a)
            for (int h = 0; h < PIECES; ++h) {
                // (wr + i wi)(vr + i vi) on interleaved lanes: w vr + swap(w) (-vi, vi)
                const ${pn} w = vload${piece}(h, slice + a * 2 * TAPS);
                const ${pn} swapped = shuffle(w, (${index_type}${piece})(${swap_pattern}));
                ${real} *cells_at = row + 2 * a * ROW + h * PIECE;
                vstore${piece}(fma(swapped, value_im, fma(w, value_re, vload${piece}(0, cells_at))),
                               0, cells_at);
            }
% else:
% if tabulated:
        // the point's rows of the tables: v along the tile's rows, u along its
        // columns (as the GPU kernel's table source)
        const int index = cell.z & TABLE_INDEX_MASK;
        const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
        const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
        const ${vec} value = values[position];
        vstore${taps_n}(vload${taps_n}(w_plane * OVERSAMPLE + fy, taps_v), 0, ku);
% else:
        const ${rn} frac = fracs[position];
        const ${vec} value = point_value((unsigned int)cell.w, uvw, freq_scale, nchan, vis,
                                         npol, pol, wgt, mask, shift_u, shift_v, phasors);
        vstore${taps_n}(es_taps(frac.x), 0, ku);
% endif
        // the v taps times the value, as interleaved complex cells
        ${real} kv_value[2 * TAPS];
        {
% if tabulated:
            const ${tn} kv = vload${taps_n}(w_plane * OVERSAMPLE + fx, taps_u);
% else:
            const ${tn} kv = es_taps(frac.y);
% endif
% for h in range(pieces):
            vstore${piece}(shuffle(kv, (${index_type}${piece})(${pair_lanes(h)}))
                           * (${pn})(${value_pattern}), ${h}, kv_value);
% endfor
        }
% if do_w:
        vstore${taps_n}(es_taps(frac.z), 0, kw);
% endif
        const int at = 2 * (du * ROW + dv);
        r_lo = min(r_lo, du);
        r_hi = max(r_hi, du + SUPPORT);
        c_lo = min(c_lo, dv);
        c_hi = max(c_hi, dv + SUPPORT);
        for (int j = 0; j < n_planes; ++j) {
% if do_w:
            const int tap = first_plane + j - cell.z;
            if (tap < 0 || tap >= SUPPORT)
                continue;
            const ${real} weight_w = kw[tap];
% endif
            ${real} *row = acc[j] + at;
            for (int h = 0; h < PIECES; ++h) {
% if do_w:
                const ${pn} kvw = vload${piece}(h, kv_value) * weight_w;
% else:
                const ${pn} kvw = vload${piece}(h, kv_value);
% endif
                #pragma unroll
                for (int a = 0; a < SUPPORT; ++a)
                    vstore${piece}(fma((${pn})ku[a], kvw,
                                       vload${piece}(0, row + 2 * a * ROW + h * PIECE)), 0,
                                   row + 2 * a * ROW + h * PIECE);
            }
        }
% endif
        if (++since_fold == FOLD_EVERY) {
            const int q_lo = (2 * c_lo) / 16, q_hi = (2 * c_hi + 15) / 16;
            for (int j = 0; j < n_planes; ++j)
                fold_rows(acc[j], total[j], r_lo, r_hi, q_lo, min(q_hi, ACC_CHUNKS));
            since_fold = 0;
            r_lo = ACC_ROWS;
            r_hi = 0;
            c_lo = ACC_COLS;
            c_hi = 0;
        }
    }
    for (int j = 0; j < n_planes; ++j) {
        fold_rows(acc[j], total[j], 0, ACC_ROWS, 0, ACC_CHUNKS);
        if (item.s5 >= 0) {   // a chunk: its totals to its slot, for fold_vector_chunks
            __global double16 *slot = chunk_totals
                                      + (size_t)(item.s5 + j) * ACC_ROWS * ACC_CHUNKS;
            for (int r = 0; r < ACC_ROWS * ACC_CHUNKS; ++r)
                slot[r] = total[j][r];
            continue;
        }
        __global ${vec} *halo = halos + (size_t)(item.s3 + j) * HALO_CELLS;
        for (int r = 0; r < ACC_ROWS; ++r) {
            double parts[16 * ACC_CHUNKS];
            for (int q = 0; q < ACC_CHUNKS; ++q)
                vstore16(total[j][r * ACC_CHUNKS + q], q, parts);
            store_tile_row(parts, r, out + (size_t)j * nu * nv, nv, halo);
        }
    }
}

// CPUs, stage 2 of 3, where the work list split dense tiles into
// chunks (load balance: at the uv centre one tile can hold a quarter of all
// points): one work-item a row of one plane of a split (tile, plane block)
// adds the chunks' float64 totals in chunk order (so the sum does not depend
// on which chunk ran first) and stores the row as spread_vector would have.
// folds: (tile, first plane in pass, planes, halo slot, first chunk slot,
// chunks, -, -).
__kernel void fold_vector_chunks(__global const int8 *folds,
                                 __global const double16 *chunk_totals,
                                 __global ${vec} *planes, __global ${vec} *halos,
                                 const int nu, const int nv, const int ntiles_v)
{
    const int8 fold = folds[get_global_id(0)];
    const int j = get_global_id(1), r = get_global_id(2);
    if (j >= fold.s2 || r >= ACC_ROWS)
        return;
    const int tu = fold.s0 / ntiles_v, tv = fold.s0 - (fold.s0 / ntiles_v) * ntiles_v;
    double16 row[ACC_CHUNKS];
    for (int q = 0; q < ACC_CHUNKS; ++q)
        row[q] = (double16)0;
    for (int c = 0; c < fold.s5; ++c) {
        __global const double16 *slot = chunk_totals
            + ((size_t)(fold.s4 + c * fold.s2 + j) * ACC_ROWS + r) * ACC_CHUNKS;
        for (int q = 0; q < ACC_CHUNKS; ++q)
            row[q] += slot[q];
    }
    double parts[16 * ACC_CHUNKS];
    for (int q = 0; q < ACC_CHUNKS; ++q)
        vstore16(row[q], q, parts);
    store_tile_row(parts, r, planes + (size_t)(fold.s1 + j) * nu * nv
                             + (size_t)(tu * TILE_U) * nv + tv * LANES, nv,
                   halos + (size_t)(fold.s3 + j) * HALO_CELLS);
}

// CPUs, stage 3 of 3: one work-item per tile and plane of the pass adds the
// halos of its lower neighbours in u, in v and in both (periodic), in that
// order, to its cells: the bottom strip of the tile above it in u, the right
// strip of the one before it in v, that one's corner of the one before both.
// halo_slots: (tiles, blocks of PLANE_BLOCK planes) first slot, or -1.
__kernel void add_halos(__global const int *halo_slots, const int n_blocks,
                        __global const ${vec} *halos, __global ${vec} *planes,
                        const int nu, const int nv, const int ntiles_u, const int ntiles_v)
{
    const int tile = get_global_id(0), p = get_global_id(1);
    if (tile >= ntiles_u * ntiles_v)
        return;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int up = ((tu + ntiles_u - 1) % ntiles_u) * ntiles_v + tv;
    const int left = tu * ntiles_v + (tv + ntiles_v - 1) % ntiles_v;
    const int diagonal = ((tu + ntiles_u - 1) % ntiles_u) * ntiles_v
                         + (tv + ntiles_v - 1) % ntiles_v;
    const int block = p / PLANE_BLOCK, j = p - block * PLANE_BLOCK;
    const int slot_up = halo_slots[up * n_blocks + block];
    const int slot_left = halo_slots[left * n_blocks + block];
    const int slot_diagonal = halo_slots[diagonal * n_blocks + block];
    __global ${vec} *out = planes + (size_t)p * nu * nv + (size_t)(tu * TILE_U) * nv
                           + tv * LANES;
    if (slot_up >= 0) {
        __global const ${vec} *bottom = halos + (size_t)(slot_up + j) * HALO_CELLS + BOTTOM_AT;
        for (int r = 0; r < HALO_W; ++r)
            for (int c = 0; c < LANES; ++c)
                out[(size_t)r * nv + c] += bottom[r * LANES + c];
    }
    if (slot_left >= 0) {
        __global const ${vec} *right = halos + (size_t)(slot_left + j) * HALO_CELLS;
        for (int r = 0; r < TILE_U; ++r)
            for (int c = 0; c < HALO_W; ++c)
                out[(size_t)r * nv + c] += right[r * HALO_W + c];
    }
    if (slot_diagonal >= 0) {
        __global const ${vec} *corner = halos + (size_t)(slot_diagonal + j) * HALO_CELLS
                                        + TILE_U * HALO_W;
        for (int r = 0; r < HALO_W; ++r)
            for (int c = 0; c < HALO_W; ++c)
                out[(size_t)r * nv + c] += corner[r * HALO_W + c];
    }
}
% endif

// The chunks of split (tile, plane) items, added in a fixed order (so the
// same bits every run) and written to the grid: fold_chunks for items of up
// to WIDE_FOLD_SLOTS slots, one work-group an item, FOLD_ROWS rows of LANES
// work-items (a dense tile's many slots read by one row of lanes, row after
// row, took 0.35 ms a row block on an H100), each cell's slots in slot
// order; fold_chunks_wide for the rest, FOLD_PARTS work-items a cell, part p
// adding slots p, p + FOLD_PARTS, ... in order, then the parts in order (the
// uv centre's tile of 5230 slots, one work-item a cell, held one launch for
// 0.6 ms on an H200).
#define FOLD_ROWS ${fold_rows}
<%def name="fold_kernel(name, parts)">\
__kernel __attribute__((reqd_work_group_size(LANES * FOLD_ROWS * ${parts}, 1, 1)))
void ${name}(__global const int4 *folds, const int first_fold,
             __global const ${total_t} *scratch, __global ${vec} *planes, const int nu,
             const int nv, const int ntiles_v, const int accumulate)
{
    // (tile, plane in pass, first slot, slots); a plane block's chunks keep
    // their planes' slots side by side: one plane's every plane_block-th
    const int4 item = folds[first_fold + get_group_id(0)];
    const int lane = get_local_id(0) % LANES;
    const int row = (get_local_id(0) / LANES) % FOLD_ROWS;
% if parts > 1:
    const int part = get_local_id(0) / (LANES * FOLD_ROWS);
    __local ${total_t} s_parts[${parts}][FOLD_ROWS][LANES];
% else:
    const int part = 0;
% endif
    const int tu = item.x / ntiles_v, tv = item.x - (item.x / ntiles_v) * ntiles_v;
    __global ${vec} *out = planes + (size_t)item.y * nu * nv + (size_t)(tu * TILE_U) * nv
                           + tv * LANES + lane;
    // (every work-item takes TILE_U / FOLD_ROWS rows: the barriers are uniform)
    for (int r = row; r < TILE_U; r += FOLD_ROWS) {
        ${total_t} sum = (${total_t})(0);
        for (int s = part; s < item.w; s += ${parts}) {
            const ${total_t} part_sum =
                scratch[((size_t)(item.z + s * ${1 if vector else plane_block}) * TILE_U + r) * LANES + lane];
% if float_float:
            sum = kahan_add(sum, kahan_value(part_sum));
% else:
            sum += part_sum;
% endif
        }
% if parts > 1:
        s_parts[part][row][lane] = sum;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int p = 1; p < ${parts}; ++p)
%   if float_float:
            sum = kahan_add(sum, kahan_value(s_parts[p][row][lane]));
%   else:
            sum += s_parts[p][row][lane];
%   endif
        barrier(CLK_LOCAL_MEM_FENCE);   // read before the next row overwrites them
        if (part > 0)
            continue;
% endif
        if (accumulate)
            ${add_total("sum", "out[(size_t)r * nv]")};
        out[(size_t)r * nv] = ${total_value("sum")};
    }
}
</%def>
${fold_kernel("fold_chunks", 1)}
% if fold_parts > 1:
${fold_kernel("fold_chunks_wide", fold_parts)}
% endif

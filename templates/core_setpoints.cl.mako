## Gridding core, stage "set points": where every visibility (row, channel)
## lands on the padded grid, as a bin key for the device sort.  A bin is one
## tile of TILE_U x TILE_V cells (by the first cell of the point's kernel
## footprint) and, with w-stacking, the first w plane the point touches:
##     key = (tile_u * ntiles_v + tile_v) * n_wbins + first_plane
## Points whose uvw is not finite get key INVALID_KEY (sorted to the end and
## counted).  The sort (clgrid.device.radixsort) carries the visibility index.
## point_records then writes, in sorted order, where each valid point lies,
## so the spreader reads positions in sequence instead of recomputing them
## from uvw (scattered reads, double precision) for every tile that reads it.
## Parameters: support (int W), tile_u, tile_v (int), do_w (bool),
##             real ("float" | "double"): precision of the sub-cell offsets;
##             positions ("es" | "table"): "table" adds table_keys and
##             table_records, the positions of the tabulated-kernel Gridder
##             (clgrid.gridders.gcf's conventions), with oversample (int O),
##             conjugate (bool: negate uvw with w < 0), w_planes (int),
##             key_order ("tile" | "cell"): table keys by tile (the tile
##             spread's bins, 32 bits) or by footprint start cell and table
##             slice, (y0 nx + x0) slices + slice (the register spread's
##             streams, equal points adjacent); wide_keys (bool, default
##             False): 64-bit keys (key_order "cell" where the (cell, slice)
##             pairs do not fit 32 bits).
##             split_bins (bool, default False; positions "es" without w):
##             each tile's bin split by where its points' footprints start,
##             so that a tile reads of a neighbour bin only the points that
##             reach it (bin_keys below);
##             float_float (bool, default False): no double anywhere, for
##             devices without fp64: uvw, freq / c and the geometry come as
##             float-float pairs (floatfloat.cl.mako) and the positions are
##             computed to about 44 bits (real "float" only).
<%
    if positions not in ("es", "table"):
        raise ValueError(f"positions must be 'es' or 'table', got {positions!r}")
    if key_order not in ("tile", "cell"):
        raise ValueError(f"key_order must be 'tile' or 'cell', got {key_order!r}")
    float_float = context.get("float_float", False)
    if float_float and real != "float":
        raise ValueError("float_float positions go with float offsets (real 'float')")
    # uvw and freq / c: doubles, or (hi, lo) float pairs
    pos_t = "float2" if float_float else "double"
    # the table geometry: nx, ny, cell, w_step, or nx, ny and as pairs nx cell,
    # ny cell and 1 / w_step
    geometry = ("const int nx, const int ny, const float2 scale_u, const float2 scale_v, "
                "const float2 inv_w_step" if float_float else
                "const int nx, const int ny, const double cell, const double w_step")
    geometry_names = ("nx, ny, scale_u, scale_v, inv_w_step" if float_float
                      else "nx, ny, cell, w_step")
%>\
% if not float_float:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
#define SUPPORT ${support}
#define TILE_U ${tile_u}
#define TILE_V ${tile_v}
#define INVALID_KEY 0xffffffffu
<% split_bins = context.get("split_bins", False) %>\
% if split_bins:
<%
    if do_w or positions != "es" or support > min(tile_u, tile_v):
        raise ValueError("split_bins: ES positions without w, a kernel no wider than the tile")
%>\
// A point reaches the next tile along u (v) when its footprint starts at
// least CUT_U (CUT_V) cells into its own.  A bin's points sort by where
// they start (rank: 0 reaches neither next tile, 1 the next in u only, 2
// both, 3 the next in v only), so that the next tile in u reads ranks 1-2
// of the bin, the next in v 2-3 and the diagonal one 2, each contiguous
// (SPLIT_RANKS sub-bins a bin, bin_starts with shift 0 finds them).
#define SPLIT_RANKS 4
#define CUT_U (TILE_U - SUPPORT + 1)
#define CUT_V (TILE_V - SUPPORT + 1)
% endif

% if float_float:
<%include file="floatfloat.cl.mako"/>
% endif
<%include file="footprint.cl.mako"/>

__kernel void bin_keys(__global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                       const unsigned int nchan, const unsigned int n_vis,
                       const int nu, const int nv, const int ntiles_v,
                       const ${pos_t} u_scale, const ${pos_t} v_scale,
                       const ${pos_t} w_scale, const ${pos_t} w_offset, const int n_wbins,
                       __global unsigned int *keys, volatile __global unsigned int *n_invalid)
{
    const unsigned int k = get_global_id(0);
    if (k >= n_vis)
        return;
    int4 cell;
    ${real}4 t;
    if (point_place(k, uvw, freq_scale, nchan, nu, nv, u_scale, v_scale, w_scale, w_offset,
                    &cell, &t)) {
        keys[k] = INVALID_KEY;
        atomic_inc(n_invalid);
        return;
    }
    const unsigned int tile = (unsigned int)(cell.x / TILE_U) * ntiles_v
                              + (unsigned int)(cell.y / TILE_V);
% if do_w:
    const int first_plane = clamp(cell.z, 0, n_wbins - 1);
% else:
    const int first_plane = 0;
% endif
% if split_bins:
    const int reach_u = cell.x % TILE_U >= CUT_U, reach_v = cell.y % TILE_V >= CUT_V;
    const unsigned int rank = reach_u ? (reach_v ? 2u : 1u) : (reach_v ? 3u : 0u);
    keys[k] = tile * SPLIT_RANKS + rank;
% else:
    keys[k] = tile * (unsigned int)n_wbins + (unsigned int)first_plane;
% endif
}

// Start of every bin in the sorted keys: bin_start[b] = first position whose
// key >> shift is >= b, for b in [0, n_bins] (shift 2 of split bins' keys:
// the bins; shift 0: their sub-bins); every entry is written exactly once.
__kernel void bin_starts(__global const unsigned int *sorted_keys, const unsigned int n,
                         const unsigned int n_bins, const unsigned int shift,
                         __global unsigned int *bin_start)
{
    const unsigned int k = get_global_id(0);
    if (k > n)
        return;
    const unsigned int lo = (k == 0) ? 0u : min(sorted_keys[k - 1] >> shift, n_bins) + 1u;
    const unsigned int hi = (k == n) ? n_bins : min(sorted_keys[k] >> shift, n_bins);
    for (unsigned int b = lo; b <= hi; ++b)
        bin_start[b] = k;
}

// The same starts, a work-item a bin (b = 0 .. n_bins): the first k whose
// key (>> shift, at most n_bins) is at least b, by binary search.  GPUs:
// bin_starts writes an empty run of bins in one work-item, and most of a
// large grid's bins are empty (H200, 1 M tiles in 4 M sub-bins: 28-32 ms a
// row block against 2.5-4.6 ms for its sort).
__kernel void bin_starts_search(__global const unsigned int *sorted_keys, const unsigned int n,
                                const unsigned int n_bins, const unsigned int shift,
                                __global unsigned int *bin_start)
{
    const unsigned int b = get_global_id(0);
    if (b > n_bins)
        return;
    unsigned int lo = 0u, hi = n;   // the answer lies in [lo, hi]
    while (lo < hi) {
        const unsigned int mid = lo + (hi - lo) / 2u;
        if (min(sorted_keys[mid] >> shift, n_bins) < b)
            lo = mid + 1u;
        else
            hi = mid;
    }
    bin_start[b] = lo;
}

// Where the valid points lie, in the order of the sort (positions 0 ..
// n_valid - 1): cells[i] = (first footprint cell in u, in v (wrapped), first
// w plane, visibility index); fracs[i] = offsets t in [0, 1] of the point
// past its footprint's first cell in u, v and w (cell = pos - W/2 + t).
__kernel void point_records(__global const unsigned int *sorted_index,
                            const unsigned int n_valid,
                            __global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                            const unsigned int nchan, const int nu, const int nv,
                            const ${pos_t} u_scale, const ${pos_t} v_scale,
                            const ${pos_t} w_scale, const ${pos_t} w_offset,
                            __global int4 *cells, __global ${real}4 *fracs)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    int4 cell;
    ${real}4 t;
    point_place(sorted_index[i], uvw, freq_scale, nchan, nu, nv, u_scale, v_scale, w_scale,
                w_offset, &cell, &t);
    cells[i] = cell;
    fracs[i] = t;
}
% if positions == "table":
// ---------------------------------------------------------------- tables
// Positions of the tabulated-kernel Gridder in double, operations in a
// fixed order with no contraction into fma (the roundings of plain float64
// code, as tests/gridder_reference.py's): grid centre at (ny/2, nx/2),
// u along x (the last axis, the core's lanes), v along y (the core's rows);
// k = rint((u * nx * cell + nx/2) * O), footprint start x0 = ceil(k/O - S/2)
// in integer arithmetic, sub-pixel index f = x0 * O - k + (S O)/2, W plane
// rint(w / w_step).  A footprint leaving the grid, or a W plane beyond the
// table, is off the grid.
#pragma OPENCL FP_CONTRACT OFF
#define OVERSAMPLE ${oversample}
#define W_PLANES ${w_planes}
#define TABLE_CONJUGATE (1 << 30)
#define TABLE_INDEX_MASK (TABLE_CONJUGATE - 1)
#define TABLE_SLICES ${w_planes * oversample * oversample}
% if context.get("wide_keys", False):
typedef ulong key_t;
#define INVALID_TABLE_KEY 0xffffffffffffffffuL
% else:
typedef unsigned int key_t;
#define INVALID_TABLE_KEY INVALID_KEY
% endif

// floor(a / b) for b > 0 (C division truncates toward zero)
// Visibility k: footprint start (x0, y0), table index ((plane O + fy) O + fx)
// with TABLE_CONJUGATE set where uvw was negated; 0 on the grid, 1 off it,
// 2 where u, v or w is not finite.
% if float_float:
inline int floor_div(const int a, const int b)   // b > 0
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

inline int table_position(const unsigned int k, __global const float2 *uvw,
                          __global const float2 *freq_scale, const unsigned int nchan,
                          ${geometry}, int4 *where)
{
    const size_t row = k / nchan;
    const ff_t f = freq_scale[k - row * nchan];
    const ff_t u = ff_mul(uvw[3 * row], f), v = ff_mul(uvw[3 * row + 1], f);
    const ff_t w = ff_mul(uvw[3 * row + 2], f);
    if (!(isfinite(u.x) && isfinite(v.x) && isfinite(w.x)))
        return 2;
% if conjugate:
    const int flip = w.x < 0.0f;
% else:
    const int flip = 0;
% endif
    const float sign = flip ? -1.0f : 1.0f;
    // kx, ky: the point in 1/O cells, integers held exactly in float below 2^24
    const float kx = ff_rint(ff_mul_f(ff_add_f(ff_mul(u * sign, scale_u), (float)(nx / 2)),
                                      (float)OVERSAMPLE));
    const float ky = ff_rint(ff_mul_f(ff_add_f(ff_mul(v * sign, scale_v), (float)(ny / 2)),
                                      (float)OVERSAMPLE));
    if (!(fabs(kx) < 0x1p24f && fabs(ky) < 0x1p24f))
        return 1;
    const int span = SUPPORT * OVERSAMPLE;
    const int x0 = -floor_div(span - 2 * (int)kx, 2 * OVERSAMPLE);
    const int y0 = -floor_div(span - 2 * (int)ky, 2 * OVERSAMPLE);
% if w_planes > 1:
    const float plane_pos = ff_rint(ff_mul(w * sign, inv_w_step));
    const int plane = (plane_pos >= 0.0f && plane_pos < (float)W_PLANES) ? (int)plane_pos : -1;
% else:
    const int plane = 0;
% endif
    if (x0 < 0 || x0 + SUPPORT > nx || y0 < 0 || y0 + SUPPORT > ny || plane < 0)
        return 1;
    const int fx = x0 * OVERSAMPLE - (int)kx + span / 2;
    const int fy = y0 * OVERSAMPLE - (int)ky + span / 2;
    *where = (int4)(y0, x0,
                    ((plane * OVERSAMPLE + fy) * OVERSAMPLE + fx) | (flip ? TABLE_CONJUGATE : 0),
                    (int)k);
    return 0;
}
% else:
inline int table_position(const unsigned int k, __global const double *uvw,
                          __global const double *freq_scale, const unsigned int nchan,
                          const int nx, const int ny, const double cell, const double w_step,
                          int4 *where)
{
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f, v = uvw[3 * row + 1] * f, w = uvw[3 * row + 2] * f;
    if (!(isfinite(u) && isfinite(v) && isfinite(w)))
        return 2;
% if conjugate:
    const int flip = w < 0.0;
% else:
    const int flip = 0;
% endif
    const double sign = flip ? -1.0 : 1.0;
    // kx, ky: the point in 1/O cells (integers held exactly in double)
    const double kx = rint((u * sign * (double)nx * cell + (double)(nx / 2)) * OVERSAMPLE);
    const double ky = rint((v * sign * (double)ny * cell + (double)(ny / 2)) * OVERSAMPLE);
    // far off the grid: below 2^50 the floored quotients below are exact
    if (!(fabs(kx) < 0x1p50 && fabs(ky) < 0x1p50))
        return 1;
    // x0 = -floor((S O - 2 kx) / (2 O)) in double, not 64-bit integers: the
    // same value (|numerator| < 2^52, so a quotient's rounding cannot cross
    // an integer) at a third of the cost on CPUs
    const double span = (double)(SUPPORT * OVERSAMPLE);
    const double x0 = -floor((span - 2.0 * kx) / (2.0 * OVERSAMPLE));
    const double y0 = -floor((span - 2.0 * ky) / (2.0 * OVERSAMPLE));
% if w_planes > 1:
    const double plane_pos = rint(w * sign / w_step);
    const int plane = (plane_pos >= 0.0 && plane_pos < (double)W_PLANES) ? (int)plane_pos : -1;
% else:
    const int plane = 0;
% endif
    if (x0 < 0.0 || x0 + SUPPORT > nx || y0 < 0.0 || y0 + SUPPORT > ny || plane < 0)
        return 1;
    const int half_span = (SUPPORT * OVERSAMPLE) / 2;
    const int fx = (int)(x0 * OVERSAMPLE - kx) + half_span;
    const int fy = (int)(y0 * OVERSAMPLE - ky) + half_span;
    *where = (int4)((int)y0, (int)x0,
                    ((plane * OVERSAMPLE + fy) * OVERSAMPLE + fx) | (flip ? TABLE_CONJUGATE : 0),
                    (int)k);
    return 0;
}
% endif

// Bin key of every visibility (tile of its footprint start, or the start
// cell and table slice with key_order "cell"; one w bin), or
// INVALID_KEY where it is left out: fully flagged (all npol flags set),
// off the grid, or not finite; each counted (counts[0..2]: flagged,
// off-grid, non-finite), as the Gridder reports them.
__kernel void table_keys(__global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                         const unsigned int nchan, const unsigned int n_vis,
                         ${geometry},
                         const int ntiles_x,
                         __global const unsigned char *flags, const unsigned int npol,
                         const int flagged,
                         __global key_t *keys, volatile __global unsigned int *counts)
{
    const unsigned int k = get_global_id(0);
    if (k >= n_vis)
        return;
    if (flagged) {
        int all = 1;
        for (unsigned int p = 0; p < npol; ++p)
            all &= flags[(size_t)k * npol + p] != 0;
        if (all) {
            keys[k] = INVALID_TABLE_KEY;
            atomic_inc(&counts[0]);
            return;
        }
    }
    int4 where;
    const int status = table_position(k, uvw, freq_scale, nchan, ${geometry_names}, &where);
    if (status) {
        keys[k] = INVALID_TABLE_KEY;
        atomic_inc(&counts[status]);
        return;
    }
% if key_order == "cell":
    keys[k] = (key_t)(((ulong)where.x * (ulong)nx + (ulong)where.y) * TABLE_SLICES
                      + (ulong)(where.z & TABLE_INDEX_MASK));
% else:
    keys[k] = (unsigned int)(where.x / TILE_U) * (unsigned int)ntiles_x
              + (unsigned int)(where.y / TILE_V);
% endif
}

// The kept points in sorted order: cells[i] = (footprint start y0 (core
// row), x0 (core lane), table index | TABLE_CONJUGATE, visibility index).
__kernel void table_records(__global const unsigned int *sorted_index,
                            const unsigned int n_valid,
                            __global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                            const unsigned int nchan, ${geometry}, __global int4 *cells)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    int4 where = (int4)(0, 0, 0, 0);
    table_position(sorted_index[i], uvw, freq_scale, nchan, ${geometry_names}, &where);
    cells[i] = where;
}
% endif

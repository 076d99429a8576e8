## Gridding core, stage "spread": visibilities -> padded uv grid planes.
##
## Output-owned tiles (no atomics, so the result is bit-reproducible): one
## work-group owns one tile of TILE_U x TILE_V grid cells of one w plane;
## lane j owns column j of the tile and keeps its TILE_U cells in private
## registers.  The work-group reads the points of the (up to) four bins whose
## footprints can reach the tile (the tile's own and its lower neighbours in u
## and v), in the fixed order of the device sort, stages BATCH (= LANES) of
## them at a time in local memory (footprint start, kernel values in u, and
## kernel values in v times the visibility), then every lane adds what falls
## into its column.  Every cell of every plane is written exactly once, zeros
## included, so the grid needs no clearing.
##
## Load balance: the uv plane is far denser near its centre, so one
## work-group per tile would leave the centre tiles working long after the
## rest.  The work list (built at plan time from the bin sizes) cuts the
## points of one (tile, plane) into chunks of at most chunk_points; a
## single-chunk item writes the grid, the chunks of a split item write partial
## tiles to scratch slots, and fold_chunks adds those in slot order.
## Sums: each lane adds a batch (at most LANES points) in the grid precision,
## then folds the batch into a double-precision total, so float32 grids keep
## float64-like accuracy however many points fall on one cell (long float32
## sums limited cuFINUFFT to 1e-4 at 1e8 points) at one double add per cell
## per batch.
## Parameters: real ("float" | "double"): grid precision; vis_real: precision
##             of the visibilities; support (int W), beta; tile_u, lanes (=
##             tile_v); do_w (bool); shifted (bool): facet centre away from the
##             phase centre; weighted, masked (bool): wgt / mask arrays given;
##             unrolled (bool): fixed row loop (GPUs keep acc in registers)
##             rather than a loop clipped to the footprint (CPUs);
##             fast_math (bool).
<%
    vec = real + "2"
    vvec = vis_real + "2"
%>
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="es_kernel.cl.mako"/>
#define TILE_U ${tile_u}
#define LANES ${lanes}
#define BATCH ${lanes}
% if unrolled:
#define ACC(r) acc[r]
#define TOTAL(r) total[r]
% else:
#define ACC(r) acc_tile[r][lane]
#define TOTAL(r) total_tile[r][lane]
% endif

inline ${vec} cmul(const ${vec} a, const ${vec} b)
{
    return (${vec})(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// Offset (cells) of cell c from tile start t0 on a periodic axis of n cells,
// taken in (tile - n, tile): a footprint starting there can reach the tile only
// if the offset is in (-W, tile).  Grids are at least tile + W cells long, so
// no footprint reaches one tile from both ends.
inline int tile_offset(const int c, const int t0, const int n, const int tile)
{
    int d = c - t0;
    d += d < 0 ? n : 0;
    return d >= tile ? d - n : d;
}

__kernel __attribute__((reqd_work_group_size(LANES, 1, 1)))
void spread(__global const unsigned int *sorted_index, __global const unsigned int *bin_start,
            __global const double *uvw, __global const double *freq_scale,
            const unsigned int nchan,
            __global const ${vvec} *vis, const unsigned int npol, const unsigned int pol,
            __global const ${vis_real} *wgt, __global const unsigned char *mask,
            __global ${vec} *planes, const int nu, const int nv,
            const int ntiles_u, const int ntiles_v,
            const double u_scale, const double v_scale,
            const double w_scale, const double w_offset,
            const int plane0, const int n_wbins,
            const double shift_u, const double shift_v,
            __global const int4 *work, const unsigned int chunk_points,
            __global double2 *scratch)
{
    const int4 item = work[get_group_id(0)];   // (tile, plane in pass, chunk, slot or -1)
    const int tile = item.x;
    const int lane = get_local_id(0);
    const int plane = plane0 + item.y;
    // this chunk's share of the points of the four bins, counted in bin order
    const unsigned int chunk_lo = (unsigned int)item.z * chunk_points;
    const unsigned int chunk_hi = chunk_lo + chunk_points;
    unsigned int seen = 0;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int u0 = tu * TILE_U, v0 = tv * LANES;

    __local int s_du[BATCH], s_dv[BATCH];
    __local ${real} s_ku[BATCH][SUPPORT];
    __local ${vec} s_kv[BATCH][SUPPORT];

% if unrolled:
    ${vec} acc[TILE_U];
    double2 total[TILE_U];
% else:
    // CPUs: the tile in local memory, [row][lane], so that a row of all lanes
    // is one SIMD vector (a private array indexed per point would be gathered).
    __local ${vec} acc_tile[TILE_U][LANES];
    __local double2 total_tile[TILE_U][LANES];
% endif
    for (int r = 0; r < TILE_U; ++r) {
        ACC(r) = (${vec})(0, 0);
        TOTAL(r) = (double2)(0, 0);
    }

% if do_w:
    const int wlo = max(plane - SUPPORT + 1, 0), whi = min(plane, n_wbins - 1);
% else:
    const int wlo = 0, whi = 0;
% endif
    for (int sb = 0; sb < 4; ++sb) {
        const int du_bin = (sb >> 1) - 1, dv_bin = (sb & 1) - 1;   // -1 or 0
        if ((ntiles_u == 1 && du_bin) || (ntiles_v == 1 && dv_bin))
            continue;   // one tile on that axis: the neighbour is the tile itself
        const int bu = (tu + du_bin + ntiles_u) % ntiles_u;
        const int bv = (tv + dv_bin + ntiles_v) % ntiles_v;
        const unsigned int bin = (unsigned int)(bu * ntiles_v + bv) * (unsigned int)n_wbins;
        const unsigned int bin_first = (wlo <= whi) ? bin_start[bin + wlo] : 0u;
        const unsigned int bin_end = (wlo <= whi) ? bin_start[bin + whi + 1] : 0u;
        const unsigned int size = bin_end - bin_first;
        // the chunk's window [chunk_lo, chunk_hi) in this bin's coordinates
        // (signed: a saturating unsigned subtract is an intrinsic Oclgrind lacks)
        const long skip = (long)chunk_lo - (long)seen, stop = (long)chunk_hi - (long)seen;
        const unsigned int first = bin_first + (unsigned int)(skip <= 0 ? 0 : (skip < size ? skip : size));
        const unsigned int end = bin_first + (unsigned int)(stop <= 0 ? 0 : (stop < size ? stop : size));
        seen += size;
        for (unsigned int base = first; base < end; base += BATCH) {
            const int n_here = (int)min((unsigned int)BATCH, end - base);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lane < n_here) {
                const unsigned int k = sorted_index[base + lane];
                const size_t row = k / nchan;
                const double f = freq_scale[k - row * nchan];
                const double u = uvw[3 * row] * f * u_scale;
                const double v = uvw[3 * row + 1] * f * v_scale;
                const double fu = ceil(u - 0.5 * SUPPORT), fv = ceil(v - 0.5 * SUPPORT);
                int cu = (int)fu % nu, cv = (int)fv % nv;
                cu += cu < 0 ? nu : 0;
                cv += cv < 0 ? nv : 0;
                const int du = tile_offset(cu, u0, nu, TILE_U), dv = tile_offset(cv, v0, nv, LANES);
                // A point of a neighbour bin may miss this tile: park it far away.
                const bool touches = du > -SUPPORT && du < TILE_U && dv > -SUPPORT && dv < LANES;
                s_du[lane] = touches ? du : -4 * SUPPORT;
                s_dv[lane] = touches ? dv : -4 * SUPPORT;
                if (touches) {
                    ${vec} value;
                    {
                        const ${vvec} raw = vis[(size_t)k * npol + pol];
                        value = (${vec})((${real})raw.x, (${real})raw.y);
                    }
% if weighted:
                    value *= (${real})wgt[k];
% endif
% if masked:
                    value = mask[k] ? value : (${vec})(0, 0);
% endif
% if shifted:
                    {
                        double c;
                        const double s = sincos(f * (uvw[3 * row] * shift_u
                                                     + uvw[3 * row + 1] * shift_v), &c);
                        value = cmul(value, (${vec})((${real})c, (${real})s));
                    }
% endif
% if do_w:
                    {
                        const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
                        value *= es_kernel((${real})((double)plane - w));
                    }
% endif
                    const ${real} xu = (${real})(fu - u), xv = (${real})(fv - v);
                    for (int a = 0; a < SUPPORT; ++a) {
                        s_ku[lane][a] = es_kernel(xu + (${real})a);
                        s_kv[lane][a] = value * es_kernel(xv + (${real})a);
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int p = 0; p < n_here; ++p) {
                const int b = lane - s_dv[p];
                if (b < 0 || b >= SUPPORT)
                    continue;
                const ${vec} kv = s_kv[p][b];
                const int du = s_du[p];
% if unrolled:
                #pragma unroll
                for (int r = 0; r < TILE_U; ++r) {
                    const int a = r - du;
                    if (a >= 0 && a < SUPPORT)
                        acc[r] += s_ku[p][a] * kv;
                }
% else:
                #pragma unroll
                for (int a = 0; a < SUPPORT; ++a) {
                    const int r = du + a;
                    if (r >= 0 && r < TILE_U)
                        ACC(r) += s_ku[p][a] * kv;
                }
% endif
            }
            for (int r = 0; r < TILE_U; ++r) {
                TOTAL(r) += convert_double2(ACC(r));
                ACC(r) = (${vec})(0, 0);
            }
        }
    }
    if (item.w < 0) {
        __global ${vec} *out = planes + (size_t)item.y * nu * nv + (size_t)u0 * nv + v0 + lane;
        for (int r = 0; r < TILE_U; ++r)
            out[(size_t)r * nv] = convert_${vec}(TOTAL(r));
    } else {
        __global double2 *out = scratch + (size_t)item.w * TILE_U * LANES + lane;
        for (int r = 0; r < TILE_U; ++r)
            out[r * LANES] = TOTAL(r);
    }
}

// The chunks of split (tile, plane) items, added in slot order (so the same
// bits every run) and written to the grid.  One work-group per split item.
__kernel __attribute__((reqd_work_group_size(LANES, 1, 1)))
void fold_chunks(__global const int4 *folds, __global const double2 *scratch,
                 __global ${vec} *planes, const int nu, const int nv, const int ntiles_v)
{
    const int4 item = folds[get_group_id(0)];   // (tile, plane in pass, first slot, slots)
    const int lane = get_local_id(0);
    const int tu = item.x / ntiles_v, tv = item.x - (item.x / ntiles_v) * ntiles_v;
    __global ${vec} *out = planes + (size_t)item.y * nu * nv + (size_t)(tu * TILE_U) * nv
                           + tv * LANES + lane;
    for (int r = 0; r < TILE_U; ++r) {
        double2 sum = (double2)(0, 0);
        for (int s = 0; s < item.w; ++s)
            sum += scratch[((size_t)(item.z + s) * TILE_U + r) * LANES + lane];
        out[(size_t)r * nv] = convert_${vec}(sum);
    }
}

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
## included, so the grid needs no clearing.  Visibilities arrive in row blocks
## (so their upload overlaps the spreading): the first block's launch writes
## every tile; later ones (accumulate != 0) add their tiles to the grid, in
## block order, so the sum is still the same run after run.
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
##             tile_v); groups (int): GPU kernel: groups of LANES lanes, each
##             taking every groups-th point; do_w (bool); shifted (bool): facet centre away from the
##             phase centre; weighted, masked (bool): wgt / mask arrays given;
##             vector (bool): CPUs: kernel spread_vector instead, one work-item
##             per work item and the tile's columns as one OpenCL vector of
##             LANES (= 16) values, so each point costs one vector exp for
##             its v kernel and two vector FMAs per footprint row;
##             plane_block (int): w planes one spread_vector item grids;
##             with_f64 (bool, for complex.cl.mako: always True).
<%
    csuffix = "f32" if real == "float" else "f64"
    vec = real + "2"
    vvec = vis_real + "2"
%>
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="es_kernel.cl.mako"/>
<%include file="complex.cl.mako"/>
<%include file="footprint.cl.mako"/>
#define TILE_U ${tile_u}
#define LANES ${lanes}
#define GROUPS ${groups}
#define BATCH (LANES * GROUPS)
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
## vector, do_w and shifted False; they add gather_table_values and
## crop_planes.
<%
    if kernel_source not in ("es", "table", "table_full"):
        raise ValueError(f"kernel_source must be 'es', 'table' or 'table_full', "
                         f"got {kernel_source!r}")
    tabulated = kernel_source != "es"
    if tabulated and (vector or do_w or shifted):
        raise ValueError("the table kernel sources run in the GPU kernel `spread` only, "
                         "without w-stacking or facet shifts")
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
// if the offset is in (-W, tile).  Grids are at least tile + W cells long, so
// no footprint reaches one tile from both ends.
inline int tile_offset(const int c, const int t0, const int n, const int tile)
{
    int d = c - t0;
    d += d < 0 ? n : 0;
    return d >= tile ? d - n : d;
}

// Visibility k (row k / nchan) times its weight, mask and facet phase, in
// the grid precision: everything the spreader adds but the kernel.
inline ${vec} point_value(const unsigned int k, const size_t row, const double f,
                          __global const double *uvw, __global const ${vvec} *vis,
                          const unsigned int npol, const unsigned int pol,
                          __global const ${vis_real} *wgt, __global const unsigned char *mask,
                          const double shift_u, const double shift_v)
{
    const ${vvec} raw = vis[(size_t)k * npol + pol];
    ${vec} val = (${vec})((${real})raw.x, (${real})raw.y);
% if weighted:
    val *= (${real})wgt[k];
% endif
% if masked:
    val = mask[k] ? val : (${vec})(0, 0);
% endif
% if shifted:
    {
        double c;
        const double s = sincos(f * (uvw[3 * row] * shift_u + uvw[3 * row + 1] * shift_v), &c);
        val = cmul_${csuffix}(val, (${vec})((${real})c, (${real})s));
    }
% endif
    return val;
}

// Where visibility k lands relative to the tile starting at cell (u0, v0):
// footprint start offsets (du, dv), sub-cell offsets of the first footprint
// cell (xu, xv), its w in plane units, and its value times every factor but
// the u and v kernels (and the w kernel at `plane`, unless plane < 0).
// False when its footprint misses the tile (a neighbour bin's point).
inline bool locate(const unsigned int k, __global const double *uvw,
                   __global const double *freq_scale, const unsigned int nchan,
                   __global const ${vvec} *vis, const unsigned int npol, const unsigned int pol,
                   __global const ${vis_real} *wgt, __global const unsigned char *mask,
                   const int nu, const int nv, const int u0, const int v0,
                   const double u_scale, const double v_scale,
                   const double w_scale, const double w_offset, const int plane,
                   const double shift_u, const double shift_v,
                   int *du, int *dv, ${real} *xu, ${real} *xv, double *w_pos,
                   ${vec} *value)
{
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double fu = footprint_start(u), fv = footprint_start(v);
    const int cu = wrap_cell(fu, nu), cv = wrap_cell(fv, nv);
    *du = tile_offset(cu, u0, nu, TILE_U);
    *dv = tile_offset(cv, v0, nv, LANES);
    if (!(*du > -SUPPORT && *du < TILE_U && *dv > -SUPPORT && *dv < LANES))
        return false;
    *xu = (${real})(fu - u);
    *xv = (${real})(fv - v);
    ${vec} val = point_value(k, row, f, uvw, vis, npol, pol, wgt, mask, shift_u, shift_v);
% if do_w:
    *w_pos = uvw[3 * row + 2] * f * w_scale - w_offset;
    if (plane >= 0)
        val *= es_kernel((${real})((double)plane - *w_pos));
% endif
    *value = val;
    return true;
}

// The part of the chunk [chunk_lo, chunk_hi) (counted over the four source
// bins in order; *seen counts the points of the bins before) that lies in
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

// Source bin sb (0..3) of tile (tu, tv): the tile's own or a lower neighbour,
// as the index of its first w bin; -1 where a one-tile axis would repeat it.
inline int source_bin(const int sb, const int tu, const int tv, const int ntiles_u,
                      const int ntiles_v, const int n_wbins)
{
    const int du_bin = (sb >> 1) - 1, dv_bin = (sb & 1) - 1;   // -1 or 0
    if ((ntiles_u == 1 && du_bin) || (ntiles_v == 1 && dv_bin))
        return -1;
    const int bu = (tu + du_bin + ntiles_u) % ntiles_u;
    const int bv = (tv + dv_bin + ntiles_v) % ntiles_v;
    return (bu * ntiles_v + bv) * n_wbins;
}

% if not vector:
// GPUs, once per call and polarisation: the values `spread` adds, in the
// order of the sort (point_value of each valid point), so that the
// work-groups, which read every point up to four times, read them in
// sequence rather than gathering them from the visibilities' order.
__kernel void gather_values(__global const int4 *cells, const unsigned int n_valid,
                            __global const double *uvw, __global const double *freq_scale,
                            const unsigned int nchan,
                            __global const ${vvec} *vis, const unsigned int npol,
                            const unsigned int pol,
                            __global const ${vis_real} *wgt, __global const unsigned char *mask,
                            const double shift_u, const double shift_v,
                            __global ${vec} *values)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    const unsigned int k = (unsigned int)cells[i].w;
    const size_t row = k / nchan;
    values[i] = point_value(k, row, freq_scale[k - row * nchan], uvw, vis, npol, pol, wgt, mask,
                            shift_u, shift_v);
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
// GPUs: a work-group of GROUPS x LANES work-items per work item (tile,
// plane, chunk); the points come from point_records (set points) and
// gather_values, in order.  Each group of LANES lanes keeps the whole tile
// (lane = column) and takes every GROUPS-th point of a batch, so narrow
// tiles keep most lanes busy; at the end group 0 adds the others' tiles in
// group order (a fixed order: the same bits every run).
__kernel __attribute__((reqd_work_group_size(LANES * GROUPS, 1, 1)))
void spread(__global const int4 *cells, __global const ${real}4 *fracs,
            __global const ${vec} *values, __global const unsigned int *bin_start,
            __global ${vec} *planes, const int nu, const int nv,
            const int ntiles_u, const int ntiles_v,
            const int plane0, const int n_wbins,
            __global const int4 *work, const unsigned int chunk_points,
            __global double2 *scratch, const int accumulate${table_args})
{
    const int4 item = work[get_group_id(0)];   // (tile, plane in pass, chunk, slot or -1)
    const int tile = item.x;
    const int tid = get_local_id(0);
    const int lane = tid % LANES, group = tid / LANES;
    const int plane = plane0 + item.y;
    // this chunk's share of the points of the four bins, counted in bin order
    const unsigned int chunk_lo = (unsigned int)item.z * chunk_points;
    const unsigned int chunk_hi = chunk_lo + chunk_points;
    unsigned int seen = 0;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int u0 = tu * TILE_U, v0 = tv * LANES;

    __local int s_du[BATCH], s_dv[BATCH];
% if kernel_source == "table_full":
    __local ${vec} s_value[BATCH];    // the point's value
    __local int s_slice[BATCH];       // start of its S x S slice of the table
% else:
    __local ${ku_type} s_ku[BATCH][SUPPORT];
    __local ${vec} s_kv[BATCH][SUPPORT];
% endif

    ${vec} acc[TILE_U];      // this lane's column of the tile, in registers
    double2 total[TILE_U];
    for (int r = 0; r < TILE_U; ++r) {
        acc[r] = (${vec})(0, 0);
        total[r] = (double2)(0, 0);
    }

% if do_w:
    const int wlo = max(plane - SUPPORT + 1, 0), whi = min(plane, n_wbins - 1);
% else:
    const int wlo = 0, whi = 0;
% endif
    for (int sb = 0; sb < 4; ++sb) {
        const int bin = source_bin(sb, tu, tv, ntiles_u, ntiles_v, n_wbins);
        if (bin < 0)
            continue;
        const uint2 range = chunk_range(bin_start, (unsigned int)bin, wlo, whi, chunk_lo,
                                        chunk_hi, &seen);
        for (unsigned int base = range.x; base < range.y; base += BATCH) {
            const int n_here = (int)min((unsigned int)BATCH, range.y - base);
            barrier(CLK_LOCAL_MEM_FENCE);
            if (tid < n_here) {
                const int4 cell = cells[base + tid];
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
                    const ${vec} value = values[base + tid];
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
                    s_value[tid] = values[base + tid];
                    s_slice[tid] = (cell.z & TABLE_INDEX_MASK) * SUPPORT * SUPPORT;
                }
% else:
                if (touches) {
                    const ${real}4 t = fracs[base + tid];
                    const ${real} xu = t.x - HALF_SUPPORT, xv = t.y - HALF_SUPPORT;
                    ${vec} value = values[base + tid];
% if do_w:
                    value *= es_kernel((${real})(plane - cell.z) - HALF_SUPPORT + t.z);
% endif
                    for (int a = 0; a < SUPPORT; ++a) {
                        s_ku[tid][a] = es_kernel(xu + (${real})a);
                        s_kv[tid][a] = value * es_kernel(xv + (${real})a);
                    }
                }
% endif
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int p = group; p < n_here; p += GROUPS) {
                const int b = lane - s_dv[p];
                if (b < 0 || b >= SUPPORT)
                    continue;
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
            for (int r = 0; r < TILE_U; ++r) {
                total[r] += convert_double2(acc[r]);
                acc[r] = (${vec})(0, 0);
            }
        }
    }
% if groups > 1:
    __local double2 s_total[GROUPS - 1][TILE_U][LANES];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group > 0)
        for (int r = 0; r < TILE_U; ++r)
            s_total[group - 1][r][lane] = total[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (group > 0)
        return;
    for (int g = 0; g < GROUPS - 1; ++g)
        for (int r = 0; r < TILE_U; ++r)
            total[r] += s_total[g][r][lane];
% endif
    if (item.w < 0) {
        __global ${vec} *out = planes + (size_t)item.y * nu * nv + (size_t)u0 * nv + v0 + lane;
        for (int r = 0; r < TILE_U; ++r)
            out[(size_t)r * nv] = convert_${vec}(
                accumulate ? total[r] + convert_double2(out[(size_t)r * nv]) : total[r]);
    } else {
        __global double2 *out = scratch + (size_t)item.w * TILE_U * LANES + lane;
        for (int r = 0; r < TILE_U; ++r)
            out[r * LANES] = total[r];
    }
}

% endif
% if vector:
<%
    vn = real + str(lanes)
    dn = "double" + str(lanes)
    columns = ", ".join(str(c) for c in range(lanes))
%>
#define FOLD_EVERY 32
#define PLANE_BLOCK ${plane_block}

// The ES kernel at LANES offsets at once (zero outside the support).
inline ${vn} es_kernel_v(const ${vn} s)
{
    const ${vn} z = s * INV_HALF_SUPPORT;
    const ${vn} z2 = z * z;
    const ${vn} inside = exp(ES_BETA * (sqrt(fmax((${real})1 - z2, (${real})0)) - (${real})1));
    return select((${vn})0, inside, z2 < (${real})1);
}

// CPUs: one work-item per work item, alone in its work-group (its private
// tiles are tens of KiB: PoCL, which keeps the private data of a whole
// work-group at once, overflowed its stack with large groups).  An item is a
// tile and a block of up to PLANE_BLOCK w planes (tile, first plane in pass,
// planes, -1): each point's u and v kernels are evaluated once for all the
// planes of the block it touches.  The tile's LANES columns are one vector,
// its TILE_U rows an array of them.  Points in the order of the sort; the
// float64 fold comes after every FOLD_EVERY points that touch the tile (so the
// bits differ from `spread`'s, run after run alike).
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void spread_vector(
            __global const unsigned int *sorted_index, __global const unsigned int *bin_start,
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
    const int4 item = work[get_global_id(0)];
    const int tile = item.x;
    const int first_plane = plane0 + item.y, n_planes = item.z;
    const int tu = tile / ntiles_v, tv = tile - (tile / ntiles_v) * ntiles_v;
    const int u0 = tu * TILE_U, v0 = tv * LANES;
    unsigned int seen = 0;
    const ${vn} column = (${vn})(${columns});

    ${vn} acc_re[PLANE_BLOCK][TILE_U], acc_im[PLANE_BLOCK][TILE_U];
    ${dn} total_re[PLANE_BLOCK][TILE_U], total_im[PLANE_BLOCK][TILE_U];
    for (int j = 0; j < PLANE_BLOCK; ++j)
        for (int r = 0; r < TILE_U; ++r) {
            acc_re[j][r] = acc_im[j][r] = (${vn})0;
            total_re[j][r] = total_im[j][r] = (${dn})0;
        }
% if do_w:
    const int wlo = max(first_plane - SUPPORT + 1, 0);
    const int whi = min(first_plane + n_planes - 1, n_wbins - 1);
% else:
    const int wlo = 0, whi = 0;
% endif
    int since_fold = 0;
    for (int sb = 0; sb < 4; ++sb) {
        const int bin = source_bin(sb, tu, tv, ntiles_u, ntiles_v, n_wbins);
        if (bin < 0)
            continue;
        const uint2 range = chunk_range(bin_start, (unsigned int)bin, wlo, whi, 0u,
                                        chunk_points, &seen);
        for (unsigned int position = range.x; position < range.y; ++position) {
            int du, dv;
            ${real} xu, xv;
            double w_pos = 0.0;
            ${vec} value;
            if (!locate(sorted_index[position], uvw, freq_scale, nchan, vis, npol, pol, wgt,
                        mask, nu, nv, u0, v0, u_scale, v_scale, w_scale, w_offset, -1,
                        shift_u, shift_v, &du, &dv, &xu, &xv, &w_pos, &value))
                continue;
            const ${vn} kv = es_kernel_v(xv - (${real})dv + column);
            const ${vn} kv_re = kv * value.x, kv_im = kv * value.y;
            ${real} ku[LANES];
            vstore${lanes}(es_kernel_v(xu + column), 0, ku);
            const int a_first = max(0, -du), a_end = min(SUPPORT, TILE_U - du);
            for (int j = 0; j < n_planes; ++j) {
% if do_w:
                const ${real} kw = es_kernel((${real})((double)(first_plane + j) - w_pos));
                if (kw == (${real})0)
                    continue;
                const ${vn} kvw_re = kv_re * kw, kvw_im = kv_im * kw;
% else:
                const ${vn} kvw_re = kv_re, kvw_im = kv_im;
% endif
                for (int a = a_first; a < a_end; ++a) {
                    acc_re[j][du + a] += ku[a] * kvw_re;
                    acc_im[j][du + a] += ku[a] * kvw_im;
                }
            }
            if (++since_fold == FOLD_EVERY) {
                since_fold = 0;
                for (int j = 0; j < n_planes; ++j)
                    for (int r = 0; r < TILE_U; ++r) {
                        total_re[j][r] += convert_${dn}(acc_re[j][r]);
                        total_im[j][r] += convert_${dn}(acc_im[j][r]);
                        acc_re[j][r] = acc_im[j][r] = (${vn})0;
                    }
            }
        }
    }
    for (int j = 0; j < n_planes; ++j)
        for (int r = 0; r < TILE_U; ++r) {
            double re[LANES], im[LANES];
            vstore${lanes}(total_re[j][r] + convert_${dn}(acc_re[j][r]), 0, re);
            vstore${lanes}(total_im[j][r] + convert_${dn}(acc_im[j][r]), 0, im);
            __global ${vec} *out = planes + (size_t)(item.y + j) * nu * nv
                                   + (size_t)(u0 + r) * nv + v0;
            for (int c = 0; c < LANES; ++c)
                out[c] = (${vec})((${real})re[c], (${real})im[c]);
        }
}
% endif

// The chunks of split (tile, plane) items, added in slot order (so the same
// bits every run) and written to the grid.  One work-group per split item.
__kernel __attribute__((reqd_work_group_size(LANES, 1, 1)))
void fold_chunks(__global const int4 *folds, __global const double2 *scratch,
                 __global ${vec} *planes, const int nu, const int nv, const int ntiles_v,
                 const int accumulate)
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
        out[(size_t)r * nv] = convert_${vec}(
            accumulate ? sum + convert_double2(out[(size_t)r * nv]) : sum);
    }
}

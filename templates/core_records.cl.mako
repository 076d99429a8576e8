## Gridding core, tabulated kernels: the register spread's records.  Set
## points (order "cell") sorts the kept points by footprint start cell and
## table slice, and a scan (clgrid/core/register.py) cuts the sorted points
## into runs of one cell and one slice: record r holds the points
## record_start[r] .. record_start[r + 1] - 1.  gather_records sums each
## run's values once per call (Muscat and Merry's compression, made on the
## device), so the spread adds every run once.
## Parameters: real ("float" | "double"): grid precision; vis_real: precision
##             of the visibilities; npol (int); weighted, masked (bool);
##             group (int): work-items a tile of points is cut by (1, CPUs:
##             each work-item scans its tile alone, in order, with no
##             barriers); max_run (int): longest record;
##             float_float (bool, default False: a device without fp64, where
##             the runs' sums are float pairs compensated as they go).
<%
    vec = real + "2"
    vvec = vis_real + "2"
    float_float = context.get("float_float", False)
    if float_float and real != "float":
        raise ValueError("float_float sums are for float grids")
%>\
% if not float_float:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
#define NPOL ${npol}
#define TABLE_CONJUGATE (1 << 30)
#define TABLE_INDEX_MASK (TABLE_CONJUGATE - 1)
#define GROUP ${group}
#define MAX_RUN ${max_run}

// 1 where sorted point i (cell `a`, after `b`) starts a record: another
// cell or table slice, or every MAX_RUN-th point (so that no work-item of
// gather_records sums a dense cell's thousands of points alone)
inline unsigned int run_starts(const unsigned int i, const int4 a, const int4 b)
{
    return i % MAX_RUN == 0 || a.x != b.x || a.y != b.y
           || (a.z & TABLE_INDEX_MASK) != (b.z & TABLE_INDEX_MASK);
}

inline unsigned int starts_run(__global const int4 *cells, const unsigned int i)
{
    // tested first so that point 0 never reads cells[-1]
    return i % MAX_RUN == 0 || run_starts(i, cells[i], cells[i - 1]);
}

// In-place inclusive sum over the group's `values` (Hillis-Steele); returns
// this item's inclusive sum.
inline unsigned int group_inclusive_sum(__local unsigned int *values, const unsigned int mine)
{
    const unsigned int lid = get_local_id(0);
    values[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int stride = 1; stride < GROUP; stride *= 2) {
        const unsigned int add = lid >= stride ? values[lid - stride] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        values[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return values[lid];
}

// Runs starting in each tile of tile_size points (one group a tile).
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void count_runs(__global const int4 *cells, const unsigned int n, const unsigned int tile_size,
                __global unsigned int *tile_counts)
{
    __local unsigned int scratch[GROUP];
    const unsigned int begin = get_group_id(0) * tile_size;
    const unsigned int end = min(n, begin + tile_size);
    unsigned int count = 0;
% if group == 1:
    // alone on the tile: the previous cell kept, not read again
    int4 previous = begin > 0 ? cells[begin - 1] : (int4)(0);
    for (unsigned int i = begin; i < end; ++i) {
        const int4 cell = cells[i];
        count += run_starts(i, cell, previous);
        previous = cell;
    }
    tile_counts[get_group_id(0)] = count;
% else:
    for (unsigned int i = begin + get_local_id(0); i < end; i += GROUP)
        count += starts_run(cells, i);
    const unsigned int total = group_inclusive_sum(scratch, count);
    if (get_local_id(0) == GROUP - 1)
        tile_counts[get_group_id(0)] = total;
% endif
}

// One group: each tile's first record (exclusive sum of the tile counts),
// the number of records, and the end of the last record.
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void scan_tiles(__global const unsigned int *tile_counts, const unsigned int n_tiles,
                __global unsigned int *tile_first, const unsigned int n,
                __global unsigned int *record_start, __global unsigned int *n_records)
{
    __local unsigned int scratch[GROUP];
    const unsigned int lid = get_local_id(0);
    const unsigned int segment = (n_tiles + GROUP - 1) / GROUP;
    const unsigned int begin = min(n_tiles, lid * segment);
    const unsigned int end = min(n_tiles, begin + segment);
    unsigned int total = 0;
    for (unsigned int t = begin; t < end; ++t)
        total += tile_counts[t];
    unsigned int running = group_inclusive_sum(scratch, total) - total;
    for (unsigned int t = begin; t < end; ++t) {
        tile_first[t] = running;
        running += tile_counts[t];
    }
    if (lid == GROUP - 1) {
        n_records[0] = running;
        record_start[running] = n;
    }
}

// Each tile numbers its runs in order: record_start and the first point's
// cell of every record.
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void write_records(__global const int4 *cells, const unsigned int n,
                   const unsigned int tile_size, __global const unsigned int *tile_first,
                   __global unsigned int *record_start, __global int4 *record_cells)
{
    __local unsigned int scratch[GROUP];
    const unsigned int begin = get_group_id(0) * tile_size;
    const unsigned int end = min(n, begin + tile_size);
    unsigned int running = tile_first[get_group_id(0)];
% if group == 1:
    int4 previous = begin > 0 ? cells[begin - 1] : (int4)(0);
    for (unsigned int i = begin; i < end; ++i) {
        const int4 cell = cells[i];
        if (run_starts(i, cell, previous)) {
            record_start[running] = i;
            record_cells[running] = cell;
            ++running;
        }
        previous = cell;
    }
% else:
    for (unsigned int block = begin; block < end; block += GROUP) {  // uniform over the group
        const unsigned int i = block + get_local_id(0);
        const unsigned int head = i < end ? starts_run(cells, i) : 0;
        const unsigned int upto = group_inclusive_sum(scratch, head);
        if (head) {
            record_start[running + upto - 1] = i;
            record_cells[running + upto - 1] = cells[i];
        }
        running += scratch[GROUP - 1];
        barrier(CLK_LOCAL_MEM_FENCE);   // scratch is reused by the next block
    }
% endif
}

// values[r * NPOL + p]: the sum over record r's points of visibility times
// weight (per polarisation), zero where that polarisation is flagged,
// conjugated where set points negated uvw; summed in double (or, without
// fp64, in float with Kahan's compensation) so that a dense cell keeps
// float64-like accuracy.  Non-finite visibilities or weights are
// counted (n_bad) so that the caller can refuse them before spreading.
<%
    acc = "float2" if float_float else "double2"
    acc_real = "float" if float_float else "double"
%>
__kernel void gather_records(__global const int4 *cells, __global const unsigned int *record_start,
                             const unsigned int n_records, __global const ${vvec} *vis,
                             __global const ${real} *wgt, __global const unsigned char *flags,
                             __global ${vec} *values, volatile __global unsigned int *n_bad)
{
    const unsigned int r = get_global_id(0);
    if (r >= n_records)
        return;
    ${acc} sum[NPOL];
% if float_float:
    float2 lost[NPOL];   // Kahan: what the sums' roundings dropped
% endif
    for (int p = 0; p < NPOL; ++p) {
        sum[p] = (${acc})(0, 0);
% if float_float:
        lost[p] = (float2)(0, 0);
% endif
    }
    unsigned int bad = 0;
    const unsigned int end = record_start[r + 1];
    for (unsigned int i = record_start[r]; i < end; ++i) {
        const int4 cell = cells[i];
        const ${acc_real} sign = (cell.z & TABLE_CONJUGATE) ? -1 : 1;
        for (int p = 0; p < NPOL; ++p) {
            const size_t at = (size_t)(unsigned int)cell.w * NPOL + p;
            const ${vvec} raw = vis[at];
            bool finite = isfinite(raw.x) && isfinite(raw.y);
            ${acc} value = (${acc})((${real})raw.x, (${real})raw.y);
% if weighted:
            const ${real} weight = wgt[at];
            finite = finite && isfinite(weight);
            value *= (${acc_real})weight;
% endif
% if masked:
            value = flags[at] ? (${acc})(0, 0) : value;
% endif
            bad += !finite;
% if float_float:
            const float2 y = (float2)(value.x, sign * value.y) - lost[p];
            const float2 t = sum[p] + y;
            lost[p] = (t - sum[p]) - y;
            sum[p] = t;
% else:
            sum[p] += (double2)(value.x, sign * value.y);
% endif
        }
    }
    for (int p = 0; p < NPOL; ++p)
        values[(size_t)r * NPOL + p] = convert_${vec}(sum[p]);
    if (bad)
        atomic_add(n_bad, bad);
}

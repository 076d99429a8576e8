## Gridding core, stage "interpolate" (degridding): padded uv grid planes ->
## visibilities, the adjoint of core_spread.  One work-item per visibility,
## taken in the order of the device sort so that neighbouring work-items read
## neighbouring cells (its place from set points' records, cells and fracs);
## each work-item owns its output, so no atomics.  With
## w-stacking the planes of one pass [plane0, plane0 + n_pass) are summed with
## their w-kernel weights and added to out (passes run in a fixed order).
## Parameters: real ("float" | "double"): grid precision; vis_real: output
##             precision; support (int W), beta; do_w, shifted, weighted,
##             masked (bool); with_f64 (True but with float_float);
##             float_float (bool, default False): a device without fp64: a
##             float grid's GPU kernels, no double anywhere (facet phases
##             from float-float uvw and freq / c, shift_u, shift_v in
##             float-float turns); vector (bool): CPUs:
##             also the kernel interpolate_vector (points_per_item points per
##             work-item, from the point records); win_planes (int, default 0),
##             with tile_u and lanes (w-stacking, win_planes >= W): also
##             interpolate_tiles, a tile's points from a private window of
##             win_planes planes of its cells (tiles of fewer than
##             window_min_points points, default 1, read the planes directly);
##             kernel_eval ("exp" |
##             "horner"): the kernel's taps by the formula or by the spreader's
##             per-tap polynomials (horner: their coefficients, as
##             eskernel.horner_coefficients), the same as spread_vector's so
##             that the two stay adjoint.  accumulate (kernel argument): 0 in a
##             job's first pass, which writes out; later passes add (points
##             with no valid position are never visited: out starts zeroed
##             where there are any);
##             kernel_source ("es" | "table" | "table_full"): "table*" adds
##             interpolate_table (per point) and interpolate_table_records
##             (per record of equal points), the adjoint of core_spread's
##             table sources (clgrid.Degridder on the core), with oversample
##             (int O);
##             table_real: separable tables are real; record_group (int, 0:
##             none; a power of two): also interpolate_table_records_group,
##             a work-group of that many work-items per record;
##             record_vector (bool, CPUs, W <= 64; kernel_source "table"
##             with real tables up to W 16, or "table_full", which the other
##             tables take as full slices, clgrid.core.table.vector_taps):
##             also interpolate_table_records_vector, rows as vector pieces,
##             records_per_item (int) records a work-item; row_taps (int): the
##             vector kernels' taps a row (clgrid.core.plan.row_taps);
##             kept_phases (bool, default False): the facet phases read from
##             the per-plan phasors (facet_phase.cl.mako), not computed.
##             Table sources also give sum_record_partials (the register
##             blocks' degridding, core_interp_register.cl.mako).
<%
    csuffix = "f32" if real == "float" else "f64"
    vec = real + "2"
    vvec = vis_real + "2"
    if kernel_source not in ("es", "table", "table_full"):
        raise ValueError(f"kernel_source must be 'es', 'table' or 'table_full', "
                         f"got {kernel_source!r}")
    # a device without fp64: the GPU kernels of a float grid, no double anywhere
    float_float = context.get("float_float", False)
    if float_float and (with_f64 or vector or real != "float"):
        raise ValueError("float_float: the GPU kernels of a float grid only")
    # uvw, freq / c and the facet shifts: doubles, or float pairs
    pos_t = "float2" if float_float else "double"
    # facet phases from a per-plan array (facet_phasors) instead of a sincos
    kept_phases = context.get("kept_phases", False)
%>
% if not float_float:
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
% endif
<%include file="es_kernel.cl.mako"/>
<%include file="complex.cl.mako"/>
% if float_float:
<%include file="floatfloat.cl.mako"/>
% endif
<%include file="facet_phase.cl.mako"/>
% if kernel_eval == "horner":
<%include file="es_horner.cl.mako"/>
% endif


// Writes (or, with accumulate, adds) visibility k's interpolated sum into
// out, after the adjoints of the spreader's factors: the conjugate facet
// phase, the weight and the mask.
inline void store_point(${vec} sum, const unsigned int k, __global const ${pos_t} *uvw,
                        __global const ${pos_t} *freq_scale, const unsigned int nchan,
                        __global ${vvec} *out, const unsigned int npol, const unsigned int pol,
                        __global const ${vis_real} *wgt, __global const unsigned char *mask,
                        const ${pos_t} shift_u, const ${pos_t} shift_v,
                        __global const ${vec} *phasors, const int accumulate)
{
% if shifted and kept_phases:
    sum = cmulconj_${csuffix}(sum, phasors[k]);
% elif shifted:
    sum = cmulconj_${csuffix}(sum, facet_phasor(k, uvw, freq_scale, nchan, shift_u, shift_v));
% endif
% if weighted:
    sum *= (${real})wgt[k];
% endif
% if masked:
    sum = mask[k] ? sum : (${vec})(0, 0);
% endif
    const size_t o = (size_t)k * npol + pol;
    // the first pass writes (out need not be zeroed), later ones add
    out[o] = (accumulate ? out[o] : (${vvec})(0, 0))
             + (${vvec})((${vis_real})sum.x, (${vis_real})sum.y);
}

## The scalar footprint sum over the planes [p_first, p_end) of the pass,
## written once for interpolate and point_sum_planes's edge path so that the
## two add in the same order (the same bits): each plane's rows (ku) of
## cells iv (kv) wrapping at nu, added into sum times the plane's w weight
## w_weight (a C expression in p; None: no w weight).
<%def name="planes_footprint_sum(w_weight)">\
    for (int p = p_first; p < p_end; ++p) {
        __global const ${vec} *grid = planes + (size_t)(p - plane0) * nu * nv;
        ${vec} plane_sum = (${vec})(0, 0);
        int iu = cell.x;
        for (int a = 0; a < SUPPORT; ++a) {
            __global const ${vec} *grid_row = grid + (size_t)iu * nv;
            ${vec} row_sum = (${vec})(0, 0);
            for (int b = 0; b < SUPPORT; ++b)
                row_sum += grid_row[iv[b]] * kv[b];
            plane_sum += row_sum * ku[a];
            iu = (iu + 1 == nu) ? 0 : iu + 1;
        }
% if w_weight:
        sum += plane_sum * ${w_weight};
% else:
        sum += plane_sum;
% endif
    }
</%def>

__kernel void interpolate(__global const int4 *cells, __global const ${real}4 *fracs,
                          const unsigned int n_points,
                          __global const ${pos_t} *uvw, __global const ${pos_t} *freq_scale,
                          const unsigned int nchan,
                          __global ${vvec} *out, const unsigned int npol, const unsigned int pol,
                          __global const ${vis_real} *wgt, __global const unsigned char *mask,
                          __global const ${vec} *planes, const int nu, const int nv,
                          const int plane0, const int n_pass,
                          const ${pos_t} shift_u, const ${pos_t} shift_v,
                          __global const ${vec} *phasors, const int accumulate)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_points)
        return;
    // set points' records (point_records: point_place in sorted order), read
    // in order, not each visibility's uvw again (uvw only for facet phases)
    const int4 cell = cells[i];
    const ${real}4 t = fracs[i];
    const unsigned int k = (unsigned int)cell.w;
    ${real} ku[SUPPORT], kv[SUPPORT];
    int iv[SUPPORT];
% if kernel_eval == "horner":
    kernel_taps(t.x, ku);
    kernel_taps(t.y, kv);
    for (int a = 0; a < SUPPORT; ++a)
        iv[a] = (cell.y + a) < nv ? cell.y + a : cell.y + a - nv;
% else:
    const ${real} xu = t.x - HALF_SUPPORT, xv = t.y - HALF_SUPPORT;
    for (int a = 0; a < SUPPORT; ++a) {
        ku[a] = es_kernel(xu + (${real})a);
        kv[a] = es_kernel(xv + (${real})a);
        iv[a] = (cell.y + a) < nv ? cell.y + a : cell.y + a - nv;
    }
% endif
% if do_w:
    const int p_first = max(cell.z, plane0);
    const int p_end = min(cell.z + SUPPORT, plane0 + n_pass);
%   if kernel_eval == "horner":
    ${real} kw[SUPPORT];
    kernel_taps(t.z, kw);
%   endif
% else:
    const int p_first = plane0, p_end = plane0 + 1;
% endif
    ${vec} sum = (${vec})(0, 0);
${planes_footprint_sum(None if not do_w else "kw[p - cell.z]" if kernel_eval == "horner"
                        else "es_kernel((%s)(p - cell.z) - HALF_SUPPORT + t.z)" % real)}\
    store_point(sum, k, uvw, freq_scale, nchan, out, npol, pol, wgt, mask, shift_u, shift_v,
                phasors, accumulate);
}
% if kernel_source != "es":

#define OVERSAMPLE ${oversample}
#define TABLE_CONJUGATE (1 << 30)
#define TABLE_INDEX_MASK (TABLE_CONJUGATE - 1)

// The footprint of polarisation pol of the (npol, ny, nx) grid at cell
// (start y0, x0, table index) times the conjugated table weights, summed in
// a fixed order.  Separable: table_a = table_v (rows), table_b = table_u
// (columns); full: table_a = the (w_planes, O, O, S, S) table.
inline ${vec} table_footprint_sum(const int4 cell, const unsigned int pol,
                                  __global const ${vec} *grid, const int nx, const int ny,
                                  __global const ${vec} *table_a,
                                  __global const ${vec} *table_b)
{
    const int index = cell.z & TABLE_INDEX_MASK;
%   if kernel_source == "table":
    const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
    const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
    __global const ${vec} *kernel_v = table_a + (size_t)(w_plane * OVERSAMPLE + fy) * SUPPORT;
    __global const ${vec} *kernel_u = table_b + (size_t)(w_plane * OVERSAMPLE + fx) * SUPPORT;
%   else:
    __global const ${vec} *slice = table_a + (size_t)index * SUPPORT * SUPPORT;
%   endif
    __global const ${vec} *footprint = grid + ((size_t)pol * ny + cell.x) * nx + cell.y;
    ${vec} sum = (${vec})(0, 0);
    for (int a = 0; a < SUPPORT; ++a) {
%   if kernel_source == "table":
        ${vec} row = (${vec})(0, 0);
        for (int b = 0; b < SUPPORT; ++b)
            row += cmulconj_${csuffix}(footprint[(size_t)a * nx + b], kernel_u[b]);
        sum += cmulconj_${csuffix}(row, kernel_v[a]);
%   else:
        for (int b = 0; b < SUPPORT; ++b)
            sum += cmulconj_${csuffix}(footprint[(size_t)a * nx + b], slice[a * SUPPORT + b]);
%   endif
    }
    return sum;
}

// Point `cell`'s visibility of polarisation pol from its footprint sum:
// conjugated back where uvw was negated, times the weight, zero where that
// polarisation is flagged.
inline void store_table_point(${vec} sum, const int4 cell, const unsigned int pol,
                              const unsigned int npol, __global const ${real} *wgt,
                              __global const unsigned char *flags, __global ${vec} *out)
{
    const size_t k = (size_t)(unsigned int)cell.w;
    if (cell.z & TABLE_CONJUGATE)
        sum.y = -sum.y;
%   if weighted:
    sum *= wgt[k * npol + pol];
%   endif
%   if masked:
    sum = flags[k * npol + pol] ? (${vec})(0, 0) : sum;
%   endif
    out[k * npol + pol] = sum;
}

// clgrid.Degridder on the core: one work-item per kept point in the order of
// set points' table_records (cells: footprint start y0, x0, table index |
// TABLE_CONJUGATE, visibility index), every polarisation.  One writer per
// visibility.
__kernel void interpolate_table(__global const int4 *cells, const unsigned int n_points,
                                __global const ${vec} *grid, const int nx, const int ny,
                                const unsigned int npol,
                                __global const ${vec} *table_a, __global const ${vec} *table_b,
                                __global const ${real} *wgt,
                                __global const unsigned char *flags, __global ${vec} *out)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_points)
        return;
    const int4 cell = cells[i];
    for (unsigned int pol = 0; pol < npol; ++pol)
        store_table_point(table_footprint_sum(cell, pol, grid, nx, ny, table_a, table_b),
                          cell, pol, npol, wgt, flags, out);
}

// The same on records (clgrid.core.register: runs of sorted points with one
// footprint start and table slice): one work-item per record sums its
// footprint once per polarisation and gives it to each of its points, so a
// record of m points costs one footprint instead of m.
__kernel void interpolate_table_records(__global const int4 *cells,
                                        __global const int4 *record_cells,
                                        __global const unsigned int *record_start,
                                        const unsigned int n_records,
                                        __global const ${vec} *grid, const int nx,
                                        const int ny, const unsigned int npol,
                                        __global const ${vec} *table_a,
                                        __global const ${vec} *table_b,
                                        __global const ${real} *wgt,
                                        __global const unsigned char *flags,
                                        __global ${vec} *out)
{
    const unsigned int r = get_global_id(0);
    if (r >= n_records)
        return;
    const int4 cell = record_cells[r];
    const unsigned int end = record_start[r + 1];
    for (unsigned int pol = 0; pol < npol; ++pol) {
        const ${vec} sum = table_footprint_sum(cell, pol, grid, nx, ny, table_a, table_b);
        for (unsigned int i = record_start[r]; i < end; ++i)
            store_table_point(sum, cells[i], pol, npol, wgt, flags, out);
    }
}

// Degridding by register blocks (core_interp_register.cl.mako): each record
// of a launch (records first_record ..) has one partial sum per box chunk
// and polarisation, partials (n_chunks, n_records, npol); added here in
// chunk order and given to every point of the record.
__kernel void sum_record_partials(__global const int4 *cells,
                                  __global const unsigned int *record_start,
                                  const unsigned int first_record,
                                  const unsigned int n_records, const unsigned int n_chunks,
                                  __global const ${vec} *partials, const unsigned int npol,
                                  __global const ${real} *wgt,
                                  __global const unsigned char *flags,
                                  __global ${vec} *out)
{
    const unsigned int r = get_global_id(0);
    if (r >= n_records)
        return;
    const unsigned int end = record_start[first_record + r + 1];
    for (unsigned int pol = 0; pol < npol; ++pol) {
        ${vec} sum = (${vec})(0, 0);
        for (unsigned int c = 0; c < n_chunks; ++c)
            sum += partials[((size_t)c * n_records + r) * npol + pol];
        for (unsigned int i = record_start[first_record + r]; i < end; ++i)
            store_table_point(sum, cells[i], pol, npol, wgt, flags, out);
    }
}
%   if record_vector:
<%
    # a footprint row: vtaps complex cells (the taps of vector_taps), in
    # pieces of at most 16 reals (one OpenCL vector), parts interleaved
    vtaps = row_taps
    vpiece = min(2 * vtaps, 16)
    vpieces = 2 * vtaps // vpiece
    half = vpiece // 2                      # taps of a piece
    vpn = real + str(vpiece)
    vindex = ("uint" if real == "float" else "ulong") + str(vpiece)
    dup_even = ", ".join("%d, %d" % (2 * c, 2 * c) for c in range(half))
    dup_odd = ", ".join("%d, %d" % (2 * c + 1, 2 * c + 1) for c in range(half))
    swap = ", ".join("%d, %d" % (2 * c + 1, 2 * c) for c in range(half))
    signs = ", ".join(["1, -1"] * half)
    twice = ", ".join("%d, %d" % (c, c) for c in range(half))
    if support > 64:
        raise ValueError("interpolate_table_records_vector takes support <= 64")
    if kernel_source == "table" and not (table_real and support <= 16):
        raise ValueError("interpolate_table_records_vector takes real separable tables "
                         "up to W 16 or full slices")
%>

#define RECORDS_PER_ITEM ${records_per_item}
#define RTAPS ${vtaps}
#define VPIECES ${vpieces}

// CPUs: one work-item (alone in its group) takes RECORDS_PER_ITEM records;
// a footprint row is VPIECES vectors of ${half} complex cells times the
// matching weights (the taps of clgrid.core.table.vector_taps: real
// separable rows, or a full table's slice rows of complex weights), summed
// as interleaved parts and reduced once a record.  Rows that would run past
// the grid's edge take the scalar table_footprint_sum.
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void interpolate_table_records_vector(__global const int4 *cells,
                                      __global const int4 *record_cells,
                                      __global const unsigned int *record_start,
                                      const unsigned int n_records,
                                      __global const ${vec} *grid, const int nx,
                                      const int ny, const unsigned int npol,
                                      __global const ${vec} *table_a,
                                      __global const ${vec} *table_b,
%     if kernel_source == "table":
                                      __global const ${real} *taps_u,
                                      __global const ${real} *taps_v,
%     else:
                                      __global const ${real} *taps_full,
%     endif
                                      __global const ${real} *wgt,
                                      __global const unsigned char *flags,
                                      __global ${vec} *out)
{
    const unsigned int first = get_global_id(0) * RECORDS_PER_ITEM;
    const unsigned int stop = min(first + RECORDS_PER_ITEM, n_records);
    for (unsigned int r = first; r < stop; ++r) {
        const int4 cell = record_cells[r];
        const int index = cell.z & TABLE_INDEX_MASK;
        const bool fits = cell.y + RTAPS <= nx;
%     if kernel_source == "table":
        const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
        const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
        // u taps along a row, each twice (both parts of a cell); v taps per row
        __global const ${real} *ku = taps_u + (size_t)(w_plane * OVERSAMPLE + fx) * RTAPS;
        ${vpn} ku2[VPIECES];
        for (int h = 0; h < VPIECES; ++h)
            ku2[h] = shuffle(vload${half}(h, ku), (${vindex})(${twice}));
        __global const ${real} *kv = taps_v + (size_t)(w_plane * OVERSAMPLE + fy) * RTAPS;
%     else:
        __global const ${real} *slice = taps_full + (size_t)index * SUPPORT * 2 * RTAPS;
%     endif
        const unsigned int end = record_start[r + 1];
        for (unsigned int pol = 0; pol < npol; ++pol) {
            ${vec} sum;
            if (fits) {
                __global const ${real} *row = (__global const ${real} *)(
                    grid + ((size_t)pol * ny + cell.x) * nx + cell.y);
                ${vpn} total = (${vpn})0;
                for (int a = 0; a < SUPPORT; ++a)
                    for (int h = 0; h < VPIECES; ++h) {
                        const ${vpn} f = vload${vpiece}(h, row + 2 * (size_t)a * nx);
%     if kernel_source == "table":
                        total = fma(f, ku2[h] * kv[a], total);
%     else:
                        // f conj(w) on interleaved lanes: f wr + swap(f) (wi, -wi)
                        const ${vpn} w = vload${vpiece}(a * VPIECES + h, slice);
                        const ${vpn} wr = shuffle(w, (${vindex})(${dup_even}));
                        const ${vpn} wi = shuffle(w, (${vindex})(${dup_odd}))
                                          * (${vpn})(${signs});
                        total = fma(shuffle(f, (${vindex})(${swap})), wi, fma(f, wr, total));
%     endif
                    }
                ${real} parts[${vpiece}];
                vstore${vpiece}(total, 0, parts);
                sum = (${vec})(0, 0);
                for (int c = 0; c < ${half}; ++c)
                    sum += (${vec})(parts[2 * c], parts[2 * c + 1]);
            } else {
                sum = table_footprint_sum(cell, pol, grid, nx, ny, table_a, table_b);
            }
            for (unsigned int i = record_start[r]; i < end; ++i)
                store_table_point(sum, cells[i], pol, npol, wgt, flags, out);
        }
    }
}
%   endif
%   if record_group:

#define RECORD_GROUP ${record_group}

// The same with one work-group per record (GPUs, wide footprints): the
// group's work-items take the footprint's cells in turn (neighbours read
// neighbouring cells of a row), and a tree in local memory adds their sums
// in a fixed order, so the result does not vary run to run.
__kernel __attribute__((reqd_work_group_size(RECORD_GROUP, 1, 1)))
void interpolate_table_records_group(__global const int4 *cells,
                                     __global const int4 *record_cells,
                                     __global const unsigned int *record_start,
                                     const unsigned int n_records,
                                     __global const ${vec} *grid, const int nx,
                                     const int ny, const unsigned int npol,
                                     __global const ${vec} *table_a,
                                     __global const ${vec} *table_b,
                                     __global const ${real} *wgt,
                                     __global const unsigned char *flags,
                                     __global ${vec} *out)
{
    __local ${vec} partial[RECORD_GROUP];
    const unsigned int r = get_group_id(0);
    const int lid = get_local_id(0);
    if (r >= n_records)
        return;   // uniform over the group
    const int4 cell = record_cells[r];
    const int index = cell.z & TABLE_INDEX_MASK;
%     if kernel_source == "table":
    const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
    const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
    __global const ${vec} *kernel_v = table_a + (size_t)(w_plane * OVERSAMPLE + fy) * SUPPORT;
    __global const ${vec} *kernel_u = table_b + (size_t)(w_plane * OVERSAMPLE + fx) * SUPPORT;
%     else:
    __global const ${vec} *slice = table_a + (size_t)index * SUPPORT * SUPPORT;
%     endif
    const unsigned int end = record_start[r + 1];
    for (unsigned int pol = 0; pol < npol; ++pol) {
        __global const ${vec} *footprint = grid + ((size_t)pol * ny + cell.x) * nx + cell.y;
        ${vec} sum = (${vec})(0, 0);
        for (int c = lid; c < SUPPORT * SUPPORT; c += RECORD_GROUP) {
            const int a = c / SUPPORT, b = c - (c / SUPPORT) * SUPPORT;
%     if kernel_source == "table":
            const ${vec} weight = cmul_${csuffix}(kernel_u[b], kernel_v[a]);
%     else:
            const ${vec} weight = slice[c];
%     endif
            sum += cmulconj_${csuffix}(footprint[(size_t)a * nx + b], weight);
        }
        partial[lid] = sum;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int stride = RECORD_GROUP / 2; stride > 0; stride /= 2) {
            if (lid < stride)
                partial[lid] += partial[lid + stride];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        const ${vec} total = partial[0];
        for (unsigned int i = record_start[r] + lid; i < end; i += RECORD_GROUP)
            store_table_point(total, cells[i], pol, npol, wgt, flags, out);
        barrier(CLK_LOCAL_MEM_FENCE);   // partial[0] read before the next pol
    }
}
%   endif
% endif
% if vector:
<%
    taps_n = row_taps
    if taps_n == 0 or taps_n > 16:
        raise ValueError(f"interpolate_vector takes support <= 16, got {support}")
    pair_n = 2 * taps_n
    pn = real + str(min(pair_n, 16))
    tn = real + str(taps_n)
    duplicate = ", ".join("%d, %d" % (c, c) for c in range(taps_n))
    index_type = "uint" if real == "float" else "ulong"
    mask_type = ("int" if real == "float" else "long") + str(taps_n)
    def edge_mask(lane):
        return "(" + mask_type + ")(" + ", ".join("-1" if c == lane else "0"
                                                  for c in range(taps_n)) + ")"
%>
#define POINTS_PER_ITEM ${points_per_item}
#define VTAPS ${taps_n}

<%
    suffix_v = "f" if real == "float" else ""
    digits_v = 9 if real == "float" else 17
    columns_v = ", ".join(str(c) for c in range(taps_n))
    def vector_literal(values):
        padded = list(values) + [0.0] * (taps_n - len(values))
        return "(" + tn + ")(" + ", ".join(("%." + str(digits_v) + "e") % v + suffix_v
                                          for v in padded) + ")"
%>
// The W taps of a point at offset t as lanes 0 .. W - 1 of one vector (the
// other lanes 0), by the formula or by Horner (as spread_vector's es_taps).
inline ${tn} point_taps(const ${real} t)
{
% if kernel_eval == "horner":
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
    const ${tn} z = (t - HALF_SUPPORT + (${tn})(${columns_v})) * INV_HALF_SUPPORT;
    const ${tn} z2 = z * z;
    const ${tn} inside = exp(ES_BETA * (sqrt(fmax((${real})1 - z2, (${real})0)) - (${real})1));
    return select((${tn})0, inside, z2 < (${real})1);
% endif
}

<%def name="point_tap_arrays()">
## A point's taps as arrays ku, kv (and kw with w) of VTAPS reals, and the v
## taps as the vector kv_taps (point_sum_planes, interpolate_tiles).
${real} ku[VTAPS], kv[VTAPS];
    const ${tn} kv_taps = point_taps(frac.y);
    vstore${taps_n}(point_taps(frac.x), 0, ku);
    vstore${taps_n}(kv_taps, 0, kv);
% if do_w:
    ${real} kw[VTAPS];
    vstore${taps_n}(point_taps(frac.z), 0, kw);
% endif
</%def>
<%def name="add_pairs(total, sum)">
## Adds the VTAPS complex cells of a row vector ``total`` (interleaved parts) to ``sum``.
{
        ${real} parts[${pair_n}];
        vstore${pair_n}(${total}, 0, parts);
        for (int c = 0; c < VTAPS; ++c)
            ${sum} += (${vec})(parts[2 * c], parts[2 * c + 1]);
    }
</%def>
// The sum of one point's footprint over the planes of the pass, read straight
// from the planes: a footprint row of W <= VTAPS cells is one contiguous load
// of VTAPS complex cells (real and imaginary parts interleaved), multiplied by
// the v taps duplicated the same way: two vector FMAs per row, one reduction
// per point (ducc0's degridder).  Points whose row would run past the grid's
// edge (wrapping, or over-reading into the next row) take the scalar path.
inline ${vec} point_sum_planes(const int4 cell, const ${real}4 frac,
                               __global const ${vec} *planes, const int nu, const int nv,
                               const int plane0, const int n_pass)
{
    ${point_tap_arrays()}
% if do_w:
    const int p_first = max(cell.z, plane0), p_end = min(cell.z + SUPPORT, plane0 + n_pass);
% else:
    const int p_first = plane0, p_end = plane0 + 1;
% endif
    ${vec} sum = (${vec})(0, 0);
% if taps_n <= 8:
    if (cell.y + VTAPS <= nv) {
        const ${pn} kv2 = shuffle(kv_taps, (${index_type}${pair_n})(${duplicate}));
        ${pn} total = (${pn})0;
%   if do_w:
        // row by row, the planes' rows summed with their w weights first: one
        // vector FMA a row and plane (not two), then the u and v taps once a row
        int iu = cell.x;
        for (int a = 0; a < SUPPORT; ++a) {
            ${pn} row = (${pn})0;
            for (int p = p_first; p < p_end; ++p) {
                __global const ${real} *grid = (__global const ${real} *)(
                    planes + (size_t)(p - plane0) * nu * nv + cell.y);
                row = fma(vload${pair_n}(0, grid + 2 * (size_t)iu * nv),
                          (${pn})kw[p - cell.z], row);
            }
            total = fma(row * kv2, (${pn})ku[a], total);
            iu = (iu + 1 == nu) ? 0 : iu + 1;
        }
%   else:
        for (int p = p_first; p < p_end; ++p) {
            __global const ${real} *grid = (__global const ${real} *)(
                planes + (size_t)(p - plane0) * nu * nv + cell.y);
            ${pn} plane_sum = (${pn})0;
            int iu = cell.x;
            for (int a = 0; a < SUPPORT; ++a) {
                plane_sum = fma(vload${pair_n}(0, grid + 2 * (size_t)iu * nv) * kv2,
                                (${pn})ku[a], plane_sum);
                iu = (iu + 1 == nu) ? 0 : iu + 1;
            }
            total += plane_sum;
        }
%   endif
        ${add_pairs("total", "sum")}
        return sum;
    }
% endif
    int iv[SUPPORT];
    for (int b = 0; b < SUPPORT; ++b)
        iv[b] = (cell.y + b) < nv ? cell.y + b : cell.y + b - nv;
${planes_footprint_sum("kw[p - cell.z]" if do_w else None)}\
    return sum;
}

// CPUs: one work-item (alone in its group) takes POINTS_PER_ITEM points in
// sort order from their records (core_setpoints.cl.mako), each read straight
// from the planes (point_sum_planes).
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void interpolate_vector(__global const int4 *cells, __global const ${real}4 *fracs,
                        const unsigned int n_points,
                        __global const double *uvw, __global const double *freq_scale,
                        const unsigned int nchan, __global ${vvec} *out,
                        const unsigned int npol, const unsigned int pol,
                        __global const ${vis_real} *wgt, __global const unsigned char *mask,
                        __global const ${vec} *planes, const int nu, const int nv,
                        const int plane0, const int n_pass,
                        const double shift_u, const double shift_v,
                        __global const ${vec} *phasors, const int accumulate)
{
    const unsigned int first = get_global_id(0) * POINTS_PER_ITEM;
    const unsigned int end = min(first + POINTS_PER_ITEM, n_points);
    for (unsigned int i = first; i < end; ++i) {
        const int4 cell = cells[i];
        const ${vec} sum = point_sum_planes(cell, fracs[i], planes, nu, nv, plane0, n_pass);
        store_point(sum, (unsigned int)cell.w, uvw, freq_scale, nchan, out, npol, pol, wgt,
                    mask, shift_u, shift_v, phasors, accumulate);
    }
}
<%
    window_planes = context.get("win_planes", 0)
    if window_planes and (not do_w or window_planes < support):
        raise ValueError("interpolate_tiles: w-stacking only, a window of >= W planes")
%>
% if window_planes:

#define TILE_ROWS ${context.get("tile_u")}
#define TILE_COLS ${context.get("lanes")}
#define WIN_ROWS (TILE_ROWS + SUPPORT - 1)
#define WIN_COLS (TILE_COLS + VTAPS - 1)
#define WIN_PLANES ${window_planes}
#define WIN_PLANE_CELLS (WIN_ROWS * WIN_COLS)
#define WINDOW_MIN_POINTS ${context.get("window_min_points", 1)}

// Planes [win0, win0 + n) of the grid cells of one tile's footprints (rows
// row0 .., columns col0 .., wrapping at the grid's edges) into a compact
// window: WIN_ROWS x WIN_COLS cells a plane.
inline void load_window(${vec} *window, __global const ${vec} *planes, const int plane0,
                        const int win0, const int n, const int row0, const int col0,
                        const int nu, const int nv)
{
    for (int w = 0; w < n; ++w) {
        __global const ${vec} *grid = planes + (size_t)(win0 + w - plane0) * nu * nv;
        for (int a = 0; a < WIN_ROWS; ++a) {
            __global const ${vec} *src = grid + (size_t)((row0 + a) % nu) * nv;
            ${vec} *dst = window + w * WIN_PLANE_CELLS + a * WIN_COLS;
            if (col0 + WIN_COLS <= nv) {
                for (int b = 0; b < WIN_COLS; ++b)
                    dst[b] = src[col0 + b];
            } else {
                for (int b = 0; b < WIN_COLS; ++b)
                    dst[b] = src[(col0 + b) % nv];
            }
        }
    }
}

// CPUs, w-stacking: one work-item (alone in its group) a tile of the sort
// (its bins of every first w plane, in order; a dense tile's points in chunks
// over several work-items, Interpolator.tile_items).  The grid cells its points
// read, WIN_PLANES planes at a time, are first copied into a compact private
// window: read straight from the planes, each point's W x W x W cells lie on
// W x W pages (rows are whole grid rows apart, planes whole planes), and the
// page walks, not the arithmetic, set the speed (a probe that kept every read
// within a few KiB ran 3.3x faster; with one plane the copy costs more than
// it saves, so without w points go to interpolate_vector).  The points come
// in order of their first plane, so the window slides forward.  Per point
// as interpolate_vector: a row of W <= VTAPS cells is one vector load, one
// vector FMA a row and plane.  Tiles of fewer than WINDOW_MIN_POINTS points
// read the planes directly (point_sum_planes): for a few points the window's
// copy costs more than it saves (sparse uv).
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void interpolate_tiles(__global const int4 *cells, __global const ${real}4 *fracs,
                       __global const int4 *items, const int ntiles_v,
                       __global const double *uvw, __global const double *freq_scale,
                       const unsigned int nchan, __global ${vvec} *out,
                       const unsigned int npol, const unsigned int pol,
                       __global const ${vis_real} *wgt, __global const unsigned char *mask,
                       __global const ${vec} *planes, const int nu, const int nv,
                       const int plane0, const int n_pass,
                       const double shift_u, const double shift_v,
                       __global const ${vec} *phasors, const int accumulate)
{
    // (tile, first point, end): a tile's points, a dense tile's in chunks
    const int4 item = items[get_global_id(0)];
    const int tile = item.x;
    const unsigned int first = (unsigned int)item.y, end = (unsigned int)item.z;
    if (end - first < WINDOW_MIN_POINTS) {
        for (unsigned int i = first; i < end; ++i) {
            const int4 cell = cells[i];
            const ${vec} sum = point_sum_planes(cell, fracs[i], planes, nu, nv, plane0, n_pass);
            store_point(sum, (unsigned int)cell.w, uvw, freq_scale, nchan, out, npol, pol, wgt,
                        mask, shift_u, shift_v, phasors, accumulate);
        }
        return;
    }
    const int row0 = (tile / ntiles_v) * TILE_ROWS;
    const int col0 = (tile - (tile / ntiles_v) * ntiles_v) * TILE_COLS;
    // points come by first plane (clamped to the bins): the last one's planes
    // end the tile's, which the window need not pass (for a few sparse tiles
    // it would copy up to WIN_PLANES planes for W)
    const int tile_end = min(cells[end - 1].z + SUPPORT, plane0 + n_pass);
    ${vec} window[WIN_PLANES * WIN_PLANE_CELLS];
    int win0 = 0, win_end = 0;   // planes in the window: [win0, win_end)
    for (unsigned int i = first; i < end; ++i) {
        const int4 cell = cells[i];
        const ${real}4 frac = fracs[i];
        const unsigned int k = (unsigned int)cell.w;
        const int p_first = max(cell.z, plane0), p_end = min(cell.z + SUPPORT, plane0 + n_pass);
        ${vec} sum = (${vec})(0, 0);
        if (p_first < p_end) {
            if (p_first < win0 || p_end > win_end) {
                win0 = p_first;
                win_end = min(min(p_first + WIN_PLANES, plane0 + n_pass), max(tile_end, p_end));
                load_window(window, planes, plane0, win0, win_end - win0, row0, col0, nu, nv);
            }
            ${point_tap_arrays()}
            const ${vec} *corner = window + (p_first - win0) * WIN_PLANE_CELLS
                                   + (cell.x - row0) * WIN_COLS + (cell.y - col0);
% if taps_n <= 8:
            const ${pn} kv2 = shuffle(kv_taps, (${index_type}${pair_n})(${duplicate}));
            ${pn} total = (${pn})0;
            for (int a = 0; a < SUPPORT; ++a) {
                const ${real} *row_at = (const ${real} *)(corner + a * WIN_COLS);
                // the planes' rows summed with their w weights first: one
                // vector FMA a row and plane, then the u and v taps once a row
                ${pn} row = (${pn})0;
                for (int p = p_first; p < p_end; ++p)
                    row = fma(vload${pair_n}(0, row_at + 2 * (p - p_first) * WIN_PLANE_CELLS),
                              (${pn})kw[p - cell.z], row);
                total = fma(row * kv2, (${pn})ku[a], total);
            }
            ${add_pairs("total", "sum")}
% else:
            for (int p = p_first; p < p_end; ++p) {
                ${vec} plane_sum = (${vec})(0, 0);
                for (int a = 0; a < SUPPORT; ++a) {
                    const ${vec} *row_at = corner + (p - p_first) * WIN_PLANE_CELLS
                                           + a * WIN_COLS;
                    ${vec} row_sum = (${vec})(0, 0);
                    for (int b = 0; b < SUPPORT; ++b)
                        row_sum += row_at[b] * kv[b];
                    plane_sum += row_sum * ku[a];
                }
                sum += plane_sum * kw[p - cell.z];
            }
% endif
        }
        store_point(sum, k, uvw, freq_scale, nchan, out, npol, pol, wgt, mask, shift_u,
                    shift_v, phasors, accumulate);
    }
}
% endif
% endif

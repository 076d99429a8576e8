## Gridding core, stage "set points": where every visibility (row, channel)
## lands on the padded grid, as a bin key for the device sort.  A bin is one
## tile of TILE_U x TILE_V cells (by the first cell of the point's kernel
## footprint) and, with w-stacking, the first w plane the point touches:
##     key = (tile_u * ntiles_v + tile_v) * n_wbins + first_plane
## Points whose uvw is not finite get key INVALID_KEY (sorted to the end and
## counted).  The sort (clgrid.device.radixsort) carries the visibility index.
## point_records: the sorted points' cells and offsets, for the CPU kernels.
## Parameters: support (int W), tile_u, tile_v (int), do_w (bool), real
##             ("float" | "double": precision of the offsets).
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define SUPPORT ${support}
#define TILE_U ${tile_u}
#define TILE_V ${tile_v}
#define INVALID_KEY 0xffffffffu

<%include file="footprint.cl.mako"/>

__kernel void bin_keys(__global const double *uvw, __global const double *freq_scale,
                       const unsigned int nchan, const unsigned int n_vis,
                       const int nu, const int nv, const int ntiles_v,
                       const double u_scale, const double v_scale,
                       const double w_scale, const double w_offset, const int n_wbins,
                       __global unsigned int *keys, volatile __global unsigned int *n_invalid)
{
    const unsigned int k = get_global_id(0);
    if (k >= n_vis)
        return;
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
    if (!(isfinite(u) && isfinite(v) && isfinite(w))) {
        keys[k] = INVALID_KEY;
        atomic_inc(n_invalid);
        return;
    }
    const unsigned int tile = (unsigned int)(wrap_cell(footprint_start(u), nu) / TILE_U) * ntiles_v
                              + (unsigned int)(wrap_cell(footprint_start(v), nv) / TILE_V);
% if do_w:
    int first_plane = (int)footprint_start(w);
    first_plane = clamp(first_plane, 0, n_wbins - 1);
% else:
    const int first_plane = 0;
% endif
    keys[k] = tile * (unsigned int)n_wbins + (unsigned int)first_plane;
}

// Start of every bin in the sorted keys: bin_start[b] = first position whose
// key is >= b, for b in [0, n_bins]; every entry is written exactly once.
__kernel void bin_starts(__global const unsigned int *sorted_keys, const unsigned int n,
                         const unsigned int n_bins, __global unsigned int *bin_start)
{
    const unsigned int k = get_global_id(0);
    if (k > n)
        return;
    const unsigned int lo = (k == 0) ? 0u : min(sorted_keys[k - 1], n_bins) + 1u;
    const unsigned int hi = (k == n) ? n_bins : min(sorted_keys[k], n_bins);
    for (unsigned int b = lo; b <= hi; ++b)
        bin_start[b] = k;
}

// Where the points of one pass lie, in the order of the sort (positions
// 0 .. n_valid - 1), computed once per geometry so that the CPU kernels read
// them in sequence: cells[i] = (first footprint cell in u, in v, first w
// plane, visibility index); fracs[i] = offsets t in [0, 1) of the point
// past its footprint's first cell in u, v and w (cell = pos - W/2 + t).
__kernel void point_records(__global const unsigned int *sorted_index,
                            const unsigned int n_valid,
                            __global const double *uvw, __global const double *freq_scale,
                            const unsigned int nchan, const int nu, const int nv,
                            const double u_scale, const double v_scale,
                            const double w_scale, const double w_offset,
                            __global int4 *cells, __global ${real}4 *fracs)
{
    const unsigned int i = get_global_id(0);
    if (i >= n_valid)
        return;
    const unsigned int k = sorted_index[i];
    const size_t row = k / nchan;
    const double f = freq_scale[k - row * nchan];
    const double u = uvw[3 * row] * f * u_scale;
    const double v = uvw[3 * row + 1] * f * v_scale;
    const double fu = footprint_start(u), fv = footprint_start(v);
% if do_w:
    const double w = uvw[3 * row + 2] * f * w_scale - w_offset;
    const double fw = footprint_start(w);
% else:
    const double w = 0.0, fw = 0.5 * SUPPORT;
% endif
    cells[i] = (int4)(wrap_cell(fu, nu), wrap_cell(fv, nv), (int)fw, (int)k);
    // in [0, 1] also after rounding (the taps take square roots of t, 1 - t)
    fracs[i] = (${real}4)((${real})clamp(fu - u + 0.5 * SUPPORT, 0.0, 1.0),
                          (${real})clamp(fv - v + 0.5 * SUPPORT, 0.0, 1.0),
                          (${real})clamp(fw - w + 0.5 * SUPPORT, 0.0, 1.0), (${real})0);
}

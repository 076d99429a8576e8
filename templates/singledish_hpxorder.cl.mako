## HEALPix pre-ordering of single-dish samples on the device (HyGrid's
## HpxPreOrdering, Luo et al. 2018): `classify` checks every sample and
## gives it its RING pixel, the samples are sorted by pixel (device_radixsort.cl.mako),
## `permute` writes them in that order as unit vectors with their data, and
## `ring_table` finds the first sample of every ring.  The gather
## (singledish.cl.mako) reads what `permute` and `ring_table` wrote.
## Parameters: pix_type ("uint" | "ulong"), data_in ("float" | "double"),
##   data_out ("float" | "double"), has_weights (input weights given),
##   write_weights (write a weight per value: given, or made to zero bad values),
##   pixel_rule ("clgrid" | "cygrid": cygrid 2.0.4's own pixel arithmetic, for
##   compat="cygrid", healpix.cl.mako's cygrid_ang2pix).
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="healpix.cl.mako"/>

typedef ${pix_type} pix_t;
typedef ${data_in} in_t;
typedef ${data_out} out_t;

// Counters of `classify`, in this order.
#define BAD_POSITION 0   // NaN/Inf longitude or latitude: the sample is dropped
#define BAD_VALUE 1      // NaN/Inf data or weight of a kept sample: zero weight
#define LAT_RANGE 2      // |latitude| > 90 degrees: an error
#define LON_RANGE 3      // |longitude| > 360 degrees: an error
#define N_COUNTERS 4

// Longitude in degrees to radians in [0, 2 pi] (as numpy's radians(mod(lon, 360))).
inline double wrapped_lon_rad(const double lon_deg)
{
    double lon = fmod(lon_deg, 360.0);
    if (lon < 0.0)
        lon += 360.0;
    return lon * (M_PI / 180.0);
}

// Each work-group counts in local memory and adds once to the global
// counters, so an input full of NaNs does not serialise on one atomic.
__kernel void classify(__global const double *lon_deg, __global const double *lat_deg,
                       __global const in_t *data, __global const in_t *weights,
                       const uint n, const uint n_chan, const uint nside,
                       const pix_t sentinel,          // pixel given to dropped samples
                       __global pix_t *pix, __global uint *counters)
{
    __local uint local_counters[N_COUNTERS];
    const uint lid = get_local_id(0);
    if (lid < N_COUNTERS)
        local_counters[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint i = get_global_id(0);
    if (i < n) {
        const double lon = lon_deg[i];
        const double lat = lat_deg[i];
        if (!isfinite(lon) || !isfinite(lat)) {
            pix[i] = sentinel;
            atomic_inc(&local_counters[BAD_POSITION]);
        } else {
            if (fabs(lat) > 90.0)
                atomic_inc(&local_counters[LAT_RANGE]);
            if (fabs(lon) > 360.0)
                atomic_inc(&local_counters[LON_RANGE]);
% if pixel_rule == "cygrid":
            pix[i] = (pix_t)cygrid_ang2pix(nside, lon, clamp(lat, -90.0, 90.0));
% else:
            const double lat_rad = clamp(lat, -90.0, 90.0) * (M_PI / 180.0);
            pix[i] = (pix_t)hpx_ang2pix_ring(nside, wrapped_lon_rad(lon), lat_rad);
% endif
            uint bad = 0;
            for (uint c = 0; c < n_chan; ++c) {
                const size_t at = (size_t)i * n_chan + c;
% if has_weights:
                bad += !isfinite(data[at]) || !isfinite(weights[at]);
% else:
                bad += !isfinite(data[at]);
% endif
            }
            if (bad)
                atomic_add(&local_counters[BAD_VALUE], bad);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < N_COUNTERS && local_counters[lid])
        atomic_add(&counters[lid], local_counters[lid]);
}

// Sample i of the sorted order: its unit vector (x, y, z, 0), data and
// weights; NaN/Inf values get zero weight.
// With pixel_rule "cygrid" the fourth component is (phi - pi) / 2 pi of the sample's
// pixel centre, from which the gather finds cygrid's disc shifts.
__kernel void permute(__global const uint *order, const uint n_kept,
                      __global const double *lon_deg, __global const double *lat_deg,
                      __global const in_t *data, __global const in_t *weights,
                      const uint n_chan,
                      __global double4 *xyz,
                      __global out_t *data_out, __global out_t *weights_out,
                      __global const pix_t *sorted_pix, const uint nside)
{
    const uint i = get_global_id(0);
    if (i >= n_kept)
        return;
    const uint source = order[i];
    const double lon = wrapped_lon_rad(lon_deg[source]);
    const double lat = lat_deg[source] * (M_PI / 180.0);
    const double cos_lat = cos(lat);
% if pixel_rule == "cygrid":
    const double turn = (cygrid_phi_of_pixel(nside, (ulong)sorted_pix[i]) - CYGRID_PI)
                        / (2.0 * CYGRID_PI);
% else:
    const double turn = 0.0;
% endif
    xyz[i] = (double4)(cos_lat * cos(lon), cos_lat * sin(lon), sin(lat), turn);
    for (uint c = 0; c < n_chan; ++c) {
        const size_t from = (size_t)source * n_chan + c;
        const size_t to = (size_t)i * n_chan + c;
        const in_t value = data[from];
% if has_weights:
        const in_t weight = weights[from];
% else:
        const in_t weight = 1;
% endif
        const bool good = isfinite(value) && isfinite(weight);
        data_out[to] = good ? (out_t)value : (out_t)0;
% if write_weights:
        weights_out[to] = good ? (out_t)weight : (out_t)0;
% endif
    }
}

// First sorted sample of each ring (1-based ring r at r - 1) by binary
// search; entry 4 nside - 1 is the end, n_kept.
__kernel void ring_table(__global const pix_t *sorted_pix, const uint n_kept, const uint nside,
                         __global uint *ring_start)
{
    const uint r = get_global_id(0) + 1;
    if (r > 4 * nside)
        return;
    if (r == 4 * nside) {
        ring_start[r - 1] = n_kept;
        return;
    }
    const pix_t first = (pix_t)hpx_ring_info(nside, r).first_pixel;
    uint lo = 0, hi = n_kept;
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        if (sorted_pix[mid] < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    ring_start[r - 1] = lo;
}

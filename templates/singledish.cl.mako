## Single-dish gather gridding on the sphere (HyGrid: Luo et al. 2018, Algorithm 2).
## Samples arrive sorted by their HEALPix RING pixel, with a per-ring table of
## the first sample index; one work-item owns `gamma` output cells and a block
## of `chan_block` channels, with `lanes` work-items splitting its samples
## and summing in a fixed tree, so every output value has one writer: no atomics.
## Geometry and private sums are double precision (distances of arcseconds on
## coordinates of hundreds of degrees lose too many digits in float).
## Parameters: kernel_type ("gauss1d" | "gauss2d" | "tapered_sinc"),
##   gamma (int >= 1: cells per work-item, thread coarsening),
##   chan_block (int >= 1: channels per work-item),
##   pix_type ("uint" | "ulong"), data_real, out_real ("float" | "double"),
##   has_weights (bool: per-value input weights given),
##   lanes (power of two: work-items sharing a cell group, each taking every
##   lanes-th sample), local_size (work-group size, a multiple of lanes),
##   compat (bool: compat="cygrid", keep a sample within the radius only where
##   cygrid 2.0.4 pairs it with the cell: the cell's pixel in the sample pixel's
##   disc, cygrid's HpxHashTable; see clgrid/singledish/compat.py).
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
<%include file="healpix.cl.mako"/>

typedef ${pix_type} pix_t;
typedef ${data_real} data_t;
typedef ${out_real} out_t;

#define GAMMA ${gamma}
#define CHAN_BLOCK ${chan_block}
#define LANES ${lanes}
#define LOCAL_SIZE ${local_size}

// Kernel value at great-circle distance `dist` (rad) and bearing (rad, east of north)
// of the sample seen from the cell; parameters as cygrid's kernels.pyx.
inline double kernel_value(const double dist, const double bearing,
                           const double p0, const double p1, const double p2)
{
% if kernel_type == "gauss1d":
    // p0 = 1 / (2 sigma^2)
    return exp(-dist * dist * p0);
% elif kernel_type == "gauss2d":
    // p0 = sigma_maj, p1 = sigma_min, p2 = position angle
    const double s = sin(bearing - p2);
    const double c = cos(bearing - p2);
    const double ellipse = p0 * p0 * s * s + p1 * p1 * c * c;
    const double scaled = dist / (p0 * p1);
    return exp(-0.5 * scaled * scaled * ellipse);
% elif kernel_type == "tapered_sinc":
    // p0 = sigma, p1 = a (Gaussian taper), p2 = b (sinc width)
    const double arg = M_PI * dist / p0;
    const double x = arg / p2;
    const double sinc = (fabs(x) < 1e-10) ? 1.0 : sin(x) / x;
    const double taper = arg / p1;
    return sinc * exp(-taper * taper);
% else:
<% raise ValueError("unknown kernel_type " + repr(kernel_type)) %>
% endif
}

% if compat:
// Whether cygrid keeps a sample of pixel sample_k of `sample_ring` for a cell whose
// pixel is index cell_k of ring cell_ring (cell_count pixels): the sample ring's
// disc (its row of `disc`: a (first, last) index range per ring offset, from
// first_offset) shifted by cygrid's shift holds the cell's pixel.
inline bool cygrid_keeps(__global const int2 *disc, const long row, const uint rows,
                         const int first_offset, const uint width, const ulong nside,
                         const long sample_ring, const ulong sample_k, const double sample_turn,
                         const long cell_ring, const long cell_k, const uint cell_count)
{
    if (row < 0 || row >= (long)rows)
        return false;
    const long column = cell_ring - sample_ring - first_offset;
    if (column < 0 || column >= (long)width)
        return false;
    const int2 span = disc[row * width + column];
    if (span.y < span.x)
        return false;
    const long count = (long)cell_count;
    const long shift = cygrid_pixel_shift_from_turn(cell_count, sample_turn, nside,
                                                    (ulong)sample_ring, sample_k);
    long offset = cell_k - shift - span.x;   // in (-2.5 count, 1.5 count): no division
    while (offset < 0)
        offset += count;
    while (offset >= count)
        offset -= count;
    return offset <= (long)(span.y - span.x);
}

% endif
// First index in [lo, hi) whose pixel is >= key (hi when none).
inline uint lower_bound(__global const pix_t *pix, uint lo, uint hi, const pix_t key)
{
    while (lo < hi) {
        const uint mid = lo + (hi - lo) / 2;
        if (pix[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__kernel void gather(__global const double2 *cell_lonlat,    // (lon, lat) rad per target cell
                     const uint n_cells,
                     __global const double4 *sample_xyz,     // unit vectors, sorted by pixel
                                                             // (w: compat's (phi - pi) / 2 pi)
                     __global const pix_t *sample_pix,       // RING pixel, non-decreasing
                     __global const data_t *data,            // [sample][channel]
                     __global const data_t *weights,         // [sample][channel] if has_weights
                     __global const uint *ring_start,        // [4 nside]: first sample of ring r at r - 1
                     const uint nside,
                     const double radius,                    // kernel support (rad)
                     const double search_radius,             // radius + pixel radius bound (rad)
                     const double hav_limit,                 // a little above sin^2(radius / 2)
                     const double p0, const double p1, const double p2,
                     const uint n_chan,
                     __global out_t *data_sum,               // [channel][cell], accumulated
                     __global out_t *weight_sum              // [channel][cell], accumulated
% if compat:
                     , __global const uint2 *cell_ring_index // cygrid: (ring, index) of each cell's pixel
                     , __global const int2 *disc             // cygrid: discs of the chunk's sample rings
                     , const uint disc_first_ring, const uint disc_rows
                     , const int disc_first_offset, const uint disc_width
% endif
                     )
{
    // LANES consecutive work-items share `gamma` cells and take every
    // LANES-th sample of each run (coalesced reads, and small maps still
    // fill a GPU); their partial sums meet in a fixed tree at the end.
    const uint lane = (uint)get_global_id(0) % LANES;
    const uint first_cell = (uint)(get_global_id(0) / LANES) * GAMMA;
    const uint first_chan = (uint)get_global_id(1) * CHAN_BLOCK;
    const bool active = first_cell < n_cells && first_chan < n_chan;
    const uint n_mine = active ? min((uint)GAMMA, n_cells - first_cell) : 0;
    const uint n_chan_mine = active ? min((uint)CHAN_BLOCK, n_chan - first_chan) : 0;

    double cell_lon[GAMMA], cell_lat[GAMMA], cell_cos_lat[GAMMA];
% if compat:
    long cell_ring[GAMMA], cell_k[GAMMA];
    uint cell_count[GAMMA];
% endif
    double3 cell_xyz[GAMMA], cell_east[GAMMA], cell_north[GAMMA];
    double theta_min = M_PI, theta_max = 0.0;
    for (uint j = 0; j < GAMMA; ++j) {
        const double2 lonlat = active ? cell_lonlat[first_cell + min(j, n_mine - 1)]
                                      : (double2)(0.0, 0.0);
        cell_lon[j] = lonlat.x;
        cell_lat[j] = lonlat.y;
        const double cos_lat = cos(lonlat.y), sin_lat = sin(lonlat.y);
        const double cos_lon = cos(lonlat.x), sin_lon = sin(lonlat.x);
        cell_cos_lat[j] = cos_lat;
        cell_xyz[j] = (double3)(cos_lat * cos_lon, cos_lat * sin_lon, sin_lat);
        // Local east and north: a sample's bearing is atan2(s . east, s . north).
        cell_east[j] = (double3)(-sin_lon, cos_lon, 0.0);
        cell_north[j] = (double3)(-sin_lat * cos_lon, -sin_lat * sin_lon, cos_lat);
% if compat:
        const uint2 ring_index = active ? cell_ring_index[first_cell + min(j, n_mine - 1)]
                                        : (uint2)(1, 0);
        cell_ring[j] = (long)ring_index.x;
        cell_k[j] = (long)ring_index.y;
        cell_count[j] = hpx_ring_info(nside, ring_index.x).n_pixels;
% endif
        theta_min = fmin(theta_min, M_PI_2 - lonlat.y);
        theta_max = fmax(theta_max, M_PI_2 - lonlat.y);
    }

    double sum_data[GAMMA][CHAN_BLOCK], sum_weight[GAMMA][CHAN_BLOCK];
    for (uint j = 0; j < GAMMA; ++j)
        for (uint c = 0; c < CHAN_BLOCK; ++c)
            sum_data[j][c] = sum_weight[j][c] = 0.0;

    // Rings whose centre latitude lies within the search radius, one extra
    // ring each side so rounding in the inverse ring formula cannot lose one.
    const ulong n_ring = 4 * (ulong)nside - 1;
    const double theta_lo = theta_min - search_radius;
    const double theta_hi = theta_max + search_radius;
    const long ring_lo = !active ? 1 : (theta_lo <= 0.0) ? 1
        : max(1L, (long)floor(hpx_ring_coordinate(nside, cos(theta_lo))) - 1);
    const long ring_hi = !active ? 0 : (theta_hi >= M_PI) ? (long)n_ring
        : min((long)n_ring, (long)ceil(hpx_ring_coordinate(nside, cos(theta_hi))) + 1);
    const double cos_search = cos(search_radius);

    for (long ring = ring_lo; ring <= ring_hi; ++ring) {
        const uint ring_begin = ring_start[ring - 1];
        const uint ring_end = ring_start[ring];
        if (ring_begin == ring_end)
            continue;  // no sample on this ring
        const hpx_ring info = hpx_ring_info(nside, (ulong)ring);
        const double sin_theta_ring = sqrt(fmax(0.0, 1.0 - info.z * info.z));
        const double pixel_phi = 2.0 * M_PI / (double)info.n_pixels;

        // Union over my cells of the pixel-index range (unwrapped) whose
        // centres are within the search radius: cos d >= cos(search_radius).
        bool whole_ring = false;
        long k_min = LONG_MAX, k_max = LONG_MIN;
        for (uint j = 0; j < n_mine; ++j) {
            const double denominator = cell_cos_lat[j] * sin_theta_ring;
            const double numerator = cos_search - sin(cell_lat[j]) * info.z;
            if (numerator > denominator)
                continue;  // the whole ring is farther than the search radius
            if (numerator <= -denominator) {
                whole_ring = true;
                break;
            }
            const double half_width = acos(numerator / denominator);
            // Keep every cell's longitude within pi of the first cell's, so
            // that the union of ranges does not span the wrap at 0/360.
            const double lon = cell_lon[0] + remainder(cell_lon[j] - cell_lon[0], 2.0 * M_PI);
            k_min = min(k_min, (long)ceil((lon - half_width) / pixel_phi - info.phi_shift));
            k_max = max(k_max, (long)floor((lon + half_width) / pixel_phi - info.phi_shift));
        }
        if (!whole_ring && k_min > k_max)
            continue;
        if (k_max - k_min + 1 >= (long)info.n_pixels)
            whole_ring = true;

        // One or two runs of consecutive pixels (two when the range wraps).
        pix_t run_first[2], run_last[2];
        uint n_runs = 1;
        if (whole_ring) {
            run_first[0] = (pix_t)info.first_pixel;
            run_last[0] = (pix_t)(info.first_pixel + info.n_pixels - 1);
        } else {
            const long n = (long)info.n_pixels;
            const long k0 = ((k_min % n) + n) % n;
            const long count = k_max - k_min + 1;
            run_first[0] = (pix_t)(info.first_pixel + k0);
            if (k0 + count <= n) {
                run_last[0] = (pix_t)(info.first_pixel + k0 + count - 1);
            } else {
                run_last[0] = (pix_t)(info.first_pixel + n - 1);
                run_first[1] = (pix_t)info.first_pixel;
                run_last[1] = (pix_t)(info.first_pixel + k0 + count - n - 1);
                n_runs = 2;
            }
        }

        for (uint run = 0; run < n_runs; ++run) {
            uint i = lower_bound(sample_pix, ring_begin, ring_end, run_first[run]) + lane;
            for (; i < ring_end && sample_pix[i] <= run_last[run]; i += LANES) {
% if compat:
                const double4 sample_and_turn = sample_xyz[i];
                const double3 sample = sample_and_turn.xyz;
% else:
                const double3 sample = sample_xyz[i].xyz;
% endif
% if compat:
                const ulong sample_k = (ulong)sample_pix[i] - info.first_pixel;
                const long disc_row = ring - (long)disc_first_ring;
% endif
                for (uint j = 0; j < n_mine; ++j) {
                    // Haversine from the chord: hav = |s - c|^2 / 4, exact to
                    // rounding at small separations, and no trigonometry for
                    // the samples a cheap test rejects.
                    const double3 chord = sample - cell_xyz[j];
                    const double hav = 0.25 * dot(chord, chord);
                    if (!(hav < hav_limit))
                        continue;
                    const double dist = 2.0 * asin(sqrt(fmin(1.0, hav)));
                    if (!(dist < radius))
                        continue;
% if compat:
                    if (!cygrid_keeps(disc, disc_row, disc_rows, disc_first_offset, disc_width,
                                      nside, ring, sample_k, sample_and_turn.w, cell_ring[j],
                                      cell_k[j], cell_count[j]))
                        continue;
% endif
% if kernel_type == "gauss2d":
                    const double bearing = atan2(dot(sample, cell_east[j]),
                                                 dot(sample, cell_north[j]));
% else:
                    const double bearing = 0.0;
% endif
                    const double k = kernel_value(dist, bearing, p0, p1, p2);
                    const size_t row = (size_t)i * n_chan + first_chan;
                    for (uint c = 0; c < CHAN_BLOCK; ++c) {
                        if (c < n_chan_mine) {
% if has_weights:
                            const double w = k * (double)weights[row + c];
% else:
                            const double w = k;
% endif
                            sum_data[j][c] += w * (double)data[row + c];
                            sum_weight[j][c] += w;
                        }
                    }
                }
            }
        }
    }

% if lanes > 1:
    // Fixed-order tree over the lanes of each cell group (deterministic).
    __local double partial_data[LOCAL_SIZE], partial_weight[LOCAL_SIZE];
    const uint lid = get_local_id(0);
    for (uint j = 0; j < GAMMA; ++j) {
        for (uint c = 0; c < CHAN_BLOCK; ++c) {
            partial_data[lid] = sum_data[j][c];
            partial_weight[lid] = sum_weight[j][c];
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint stride = LANES / 2; stride > 0; stride /= 2) {
                if (lane < stride) {
                    partial_data[lid] += partial_data[lid + stride];
                    partial_weight[lid] += partial_weight[lid + stride];
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
            sum_data[j][c] = partial_data[lid];
            sum_weight[j][c] = partial_weight[lid];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    if (lane != 0)
        return;
% endif

    // Sole writer of these cells and channels: a plain read-add-write.
    for (uint j = 0; j < n_mine; ++j) {
        for (uint c = 0; c < n_chan_mine; ++c) {
            const size_t out = (size_t)(first_chan + c) * n_cells + first_cell + j;
            data_sum[out] += (out_t)sum_data[j][c];
            weight_sum[out] += (out_t)sum_weight[j][c];
        }
    }
}

// RING pixel of each sample (singledish_hpxorder.cl.mako's classify does the same while checking).
__kernel void pixelise(__global const double2 *lonlat, const uint n, const uint nside,
                       __global pix_t *pix)
{
    const size_t i = get_global_id(0);
    if (i < n)
        pix[i] = (pix_t)hpx_ang2pix_ring(nside, lonlat[i].x, lonlat[i].y);
}
% if compat:

// cygrid's arithmetic on the device, for the tests against its host twin
// (clgrid/singledish/compat.py): item i divides divide[i].x by divide[i].y as x87
// does, gives the pixel of lonlat_deg[i], and the longitude of pixel ring_k[i].y
// of ring ring_k[i].x with the shift of its disc onto a ring of shift_count[i]
// pixels (the gather's own functions).
__kernel void cygrid_arithmetic(__global const double2 *divide,
                                __global const double2 *lonlat_deg,
                                __global const ulong2 *ring_k,
                                __global const uint *shift_count,
                                const uint n, const uint nside,
                                __global double *quotient, __global ulong *pix,
                                __global double *phi, __global long *shift)
{
    const size_t i = get_global_id(0);
    if (i >= n)
        return;
    quotient[i] = cygrid_x87_div(divide[i].x, divide[i].y);
    pix[i] = cygrid_ang2pix(nside, lonlat_deg[i].x, lonlat_deg[i].y);
    phi[i] = cygrid_pixel_phi(nside, ring_k[i].x, ring_k[i].y, true);
    shift[i] = cygrid_pixel_shift(shift_count[i], nside, ring_k[i].x, ring_k[i].y);
}
% endif

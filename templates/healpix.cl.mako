## HEALPix RING-scheme geometry for device code (Gorski et al. 2005), double precision.
## No template parameters; needs cl_khr_fp64 enabled by the including file.
## Rings are numbered 1 .. 4 nside - 1 from the north pole, as in HEALPix.
#ifndef CLGRID_HEALPIX_CL
#define CLGRID_HEALPIX_CL

typedef struct {
    ulong first_pixel;  // RING index of the ring's first pixel
    uint n_pixels;      // pixels on the ring
    double z;           // cos(colatitude) of the ring's pixel centres
    double phi_shift;   // pixel k has its centre at (k + phi_shift) * 2 pi / n_pixels
} hpx_ring;

inline hpx_ring hpx_ring_info(const ulong nside, const ulong ring)
{
    hpx_ring info;
    const double inv_3nside2 = 1.0 / (3.0 * (double)nside * (double)nside);
    if (ring < nside) {                       // north polar cap
        info.first_pixel = 2 * ring * (ring - 1);
        info.n_pixels = (uint)(4 * ring);
        info.z = 1.0 - (double)(ring * ring) * inv_3nside2;
        info.phi_shift = 0.5;
    } else if (ring <= 3 * nside) {           // equatorial belt
        info.first_pixel = 2 * nside * (nside - 1) + (ring - nside) * 4 * nside;
        info.n_pixels = (uint)(4 * nside);
        info.z = (double)(2 * (long)nside - (long)ring) * 2.0 / (3.0 * (double)nside);
        // Every other ring of the belt starts half a pixel east.
        info.phi_shift = ((ring - nside) & 1) ? 0.0 : 0.5;
    } else {                                  // south polar cap, mirror of the north
        const ulong from_south = 4 * nside - ring;
        info.first_pixel = 12 * nside * nside - 2 * from_south * (from_south + 1);
        info.n_pixels = (uint)(4 * from_south);
        info.z = -(1.0 - (double)(from_south * from_south) * inv_3nside2);
        info.phi_shift = 0.5;
    }
    return info;
}

// Fractional ring number of the iso-latitude circle at z = cos(colatitude):
// the inverse of the ring z formulas above, monotonic from 0 (north pole)
// to 4 nside (south pole).
inline double hpx_ring_coordinate(const ulong nside, const double z)
{
    if (z > 2.0 / 3.0)
        return (double)nside * sqrt(3.0 * (1.0 - z));
    if (z >= -2.0 / 3.0)
        return (double)nside * (2.0 - 1.5 * z);
    return 4.0 * (double)nside - (double)nside * sqrt(3.0 * (1.0 + z));
}

// RING pixel index of (lon, lat) in radians (Healpix_cxx loc2pix).
inline ulong hpx_ang2pix_ring(const ulong nside, const double lon, const double lat)
{
    const double z = sin(lat);
    const double za = fabs(z);
    double tt = fmod(lon * M_2_PI, 4.0);
    if (tt < 0.0)
        tt += 4.0;
    if (za <= 2.0 / 3.0) {
        const long nl4 = 4 * (long)nside;
        const double temp1 = (double)nside * (0.5 + tt);
        const double temp2 = (double)nside * z * 0.75;
        const long jp = (long)floor(temp1 - temp2);  // ascending edge line
        const long jm = (long)floor(temp1 + temp2);  // descending edge line
        const long ring_from_cap = (long)nside + 1 + jp - jm;
        const long kshift = 1 - (ring_from_cap & 1);
        const long t1 = jp + jm - (long)nside + kshift + 1 + 2 * nl4;
        return (ulong)(2 * (long)nside * ((long)nside - 1) + (ring_from_cap - 1) * nl4
                       + (t1 >> 1) % nl4);
    }
    const double tp = tt - floor(tt);
    // Near the pole 1 - za loses digits; cos(lat) keeps them.
    const double tmp = (za < 0.99) ? (double)nside * sqrt(3.0 * (1.0 - za))
                                   : (double)nside * cos(lat) / sqrt((1.0 + za) / 3.0);
    const long jp = (long)floor(tp * tmp);
    const long jm = (long)floor((1.0 - tp) * tmp);
    const long ring = jp + jm + 1;
    const long in_ring = ((long)floor(tt * ring)) % (4 * ring);
    return (z > 0.0) ? (ulong)(2 * ring * (ring - 1) + in_ring)
                     : (ulong)(12 * (long)nside * (long)nside - 2 * ring * (ring + 1) + in_ring);
}

#endif

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

// ---- cygrid 2.0.4's HEALPix arithmetic, operation for operation (compat="cygrid";
// the host twin is clgrid/singledish/compat.py, which says why).  Contraction into
// fused multiply-adds would change last bits cygrid's rounding depends on: off.
#define CYGRID_PI 0x1.921fb54442d18p+1          // cygrid's PI, a double literal
#define CYGRID_HALFPI 0x1.921fb54442d18p+0      // PI / 2.
#define CYGRID_INV_HALFPI 0x1.45f306dc9c883p-1  // 1. / HALFPI
#define CYGRID_DEG2RAD 0x1.1df46a2529d39p-6     // PI / 180.
#define CYGRID_TWOTHIRD 0x1.5555555555555p-1    // 2.0 / 3.0

// (double)((long double)a / (long double)b) with x87's 80-bit long double (Cython
// promotes cygrid's divisions by pi and by ring numbers): the quotient rounded to 64
// bits and then to 53 differs from a / b where the exact quotient lies within half a
// 64-bit step of the midpoint between two doubles; it is then the even one.
inline double cygrid_x87_div(const double a, const double b)
{
#pragma OPENCL FP_CONTRACT OFF
    const double q = a / b;
    if (q == 0.0 || !isfinite(q))
        return q;
    const double remainder = fma(-q, b, a);   // a - q b, exact
    if (remainder == 0.0)
        return q;
    // the neighbour of q towards the exact quotient, from its bits (q finite, not 0)
    const bool up = (remainder > 0.0) == (b > 0.0);
    const double next = as_double(as_long(q) + ((up == (q > 0.0)) ? 1L : -1L));
    const double half_gap = 0.5 * (next - q);
    const double excess = remainder / b - half_gap;
    if (fabs(excess) < fabs(half_gap) * 0x1p-11 && (as_ulong(q) & 1UL))
        return next;
    return q;
}

// cygrid's RING pixel of a position in degrees (its _ang2pix(HALFPI - DEG2RAD lat,
// DEG2RAD lon), Healpix_cxx's loc2pix as cygrid writes it).
inline ulong cygrid_ang2pix(const ulong nside, const double lon_deg, const double lat_deg)
{
#pragma OPENCL FP_CONTRACT OFF
    const double theta = CYGRID_HALFPI - CYGRID_DEG2RAD * lat_deg;
    const double phi = CYGRID_DEG2RAD * lon_deg;
    const bool have_sin_theta = theta < 0.01 || theta > CYGRID_PI - 0.01;
    const double z = cos(theta);
    const double sin_theta = have_sin_theta ? sin(theta) : 0.0;
    const double za = fabs(z);
    const double turns = phi * CYGRID_INV_HALFPI;   // fmodulo(turns, 4.0)
    double tt;
    if (turns >= 0.0) {
        tt = (turns < 4.0) ? turns : fmod(turns, 4.0);
    } else {
        tt = fmod(turns, 4.0) + 4.0;
        if (tt == 4.0)
            tt = 0.0;
    }
    const long n = (long)nside;
    if (za <= CYGRID_TWOTHIRD) {
        const long nl4 = 4 * n;
        const double temp1 = (double)nside * (0.5 + tt);
        const double temp2 = ((double)nside * z) * 0.75;
        const long jp = (long)(temp1 - temp2);
        const long jm = (long)(temp1 + temp2);
        const long ir = n + 1 + jp - jm;
        const long kshift = 1 - (ir & 1);
        const long t1 = jp + jm + kshift + 1 + nl4 + nl4 - n;
        const long ip = (nside > 1) ? ((t1 >> 1) & (nl4 - 1)) : ((t1 >> 1) % nl4);
        return (ulong)(2 * n * (n - 1) + (ir - 1) * nl4 + ip);
    }
    const double tp = tt - (double)(ulong)tt;
    const double tmp = (za < 0.99 || !have_sin_theta)
        ? (double)nside * sqrt(3.0 * (1.0 - za))
        : ((double)nside * sin_theta) / sqrt((1.0 + za) / 3.0);
    const long jp = (long)(tp * tmp);
    const long jm = (long)((1.0 - tp) * tmp);
    const long ir = jp + jm + 1;
    const long ip = (long)(tt * (double)ir);
    return (z > 0.0) ? (ulong)(2 * ir * (ir - 1) + ip)
                     : (ulong)(12 * n * n - 2 * ir * (ir + 1) + ip);
}

// Longitude (rad) of the centre of pixel k (0-based) of `ring`, as cygrid's _pix2loc
// (x87: its divisions as x87 does them; else plain, at most an ulp off).
inline double cygrid_pixel_phi(const ulong nside, const ulong ring, const ulong k,
                               const bool x87)
{
#pragma OPENCL FP_CONTRACT OFF
    const double iphi = (double)(k + 1);
    if (ring <= 3 * nside && ring >= nside) {
        const double fact1 = (double)(nside << 1) * (4.0 / (double)(12 * nside * nside));
        const double fodd = ((ring + nside) & 1) ? 1.0 : 0.5;
        return (((iphi - fodd) * CYGRID_PI) * 0.75) * fact1;
    }
    const double numerator = (iphi - 0.5) * CYGRID_HALFPI;
    const double from_pole = (double)((ring < nside) ? ring : 4 * nside - ring);
    return x87 ? cygrid_x87_div(numerator, from_pole) : numerator / from_pole;
}

// The same from the pixel index (cygrid's _pix2loc, its isqrt in double), x87 divisions.
inline double cygrid_phi_of_pixel(const ulong nside, const ulong pix)
{
    const ulong ncap = 2 * nside * (nside - 1);
    const ulong npix = 12 * nside * nside;
    ulong ring;
    if (pix < ncap)
        ring = (1 + (ulong)sqrt((double)(1 + 2 * pix) + 0.5)) >> 1;
    else if (pix < npix - ncap)
        ring = (pix - ncap) / (4 * nside) + nside;
    else
        ring = 4 * nside - ((1 + (ulong)sqrt((double)(2 * (npix - pix) - 1) + 0.5)) >> 1);
    return cygrid_pixel_phi(nside, ring, pix - hpx_ring_info(nside, ring).first_pixel, true);
}

// cygrid's shift of a phi = 180 deg disc to the longitude of pixel k of `ring`, on a
// ring of `count` pixels: round(count (phi - pi) / 2 / pi), halves away from zero.
// The x87 quotients move the result by an ulp or two, which matters only within a
// few ulps of a half: elsewhere the plain arithmetic decides, and is cheaper.
__attribute__((noinline)) long cygrid_pixel_shift(const uint count, const ulong nside, const ulong ring,
                               const ulong k)
{
#pragma OPENCL FP_CONTRACT OFF
    double numerator = ((double)count * (cygrid_pixel_phi(nside, ring, k, false)
                                         - CYGRID_PI)) / 2.0;
    double dshift = numerator / CYGRID_PI;
    if (fabs(dshift - (floor(dshift) + 0.5)) < 1e-9 * (1.0 + fabs(dshift)) + 1e-15 * count) {
        numerator = ((double)count * (cygrid_pixel_phi(nside, ring, k, true)
                                      - CYGRID_PI)) / 2.0;
        dshift = cygrid_x87_div(numerator, CYGRID_PI);
    }
    return (dshift >= 0.0) ? (long)(dshift + 0.5) : (long)(dshift - 0.5);
}

// The same, given turn = (phi - pi) / 2 pi of the pixel (permute stores it with the
// sample): one multiplication decides unless it lands within a few ulps of a half.
inline long cygrid_pixel_shift_from_turn(const uint count, const double turn, const ulong nside,
                                         const ulong ring, const ulong k)
{
#pragma OPENCL FP_CONTRACT OFF
    const double dshift = (double)count * turn;
    if (fabs(dshift - (floor(dshift) + 0.5)) < 1e-9 * (1.0 + fabs(dshift)) + 1e-15 * count)
        return cygrid_pixel_shift(count, nside, ring, k);
    return (dshift >= 0.0) ? (long)(dshift + 0.5) : (long)(dshift - 0.5);
}

#endif

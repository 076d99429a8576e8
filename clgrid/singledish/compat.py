"""cygrid 2.0.4's HEALPix arithmetic, operation for operation: its ``Healpix``
class (the API of ``cygrid.healpix.Healpix``) and the sample selection of
``compat="cygrid"``.

Why operation for operation.  cygrid does not keep every sample within the
support radius of a cell (clgrid's default, exact): it keeps a sample only if
the cell's HEALPix pixel lies in a *disc* around the sample's pixel, and that
disc is cygrid's own construction (``HpxHashTable``): for each ring a disc of
radius ``sphere_radius + resolution`` is built once around the ring's pixel
nearest phi = 180 deg (``query_disc_phi180``: per ring, the pixels whose
centres are within that radius, plus one more pixel on each side), and is
shifted along every ring by ``round(n_ring (phi - pi) / 2 pi)`` pixels to the
sample pixel's longitude.  A sample near the support radius is kept or not
depending on where the shifted disc ends; the shift is often exactly half
a pixel (every ring shifted onto itself in the polar caps), so which way it
rounds depends on the last bit of cygrid's floating-point arithmetic.  This
module does that arithmetic as cygrid's compiled code does, including its
divisions in x87 80-bit ``long double`` (Cython promotes them: cygrid declares
pi as ``long double``), so that the same samples are kept.  The device side
(``templates/singledish.cl.mako``, ``templates/healpix.cl.mako``) does the
per-sample part the same way; :func:`x87_div` is the emulation both use.

This reproduces cygrid's builds with 80-bit ``long double`` (x86-64 Linux and
macOS wheels); builds where ``long double`` is ``double`` (MSVC) can round
the half-pixel shifts the other way.

Only the RING scheme, as cygrid.
"""

from __future__ import annotations

import math
import struct
import threading
from collections import OrderedDict

import numpy as np

# cygrid's constants.h: double literals, folded in double precision.
PI = 3.1415926535897932384626433832
TWOPI = 2 * PI
HALFPI = PI / 2.0
INV_HALFPI = 1.0 / HALFPI
TWOTHIRD = 2.0 / 3.0
DEG2RAD = PI / 180.0
RAD2DEG = 180.0 / PI
NESTED, RING = 1, 2

_SPLITTER = 134217729.0  # 2**27 + 1 (Veltkamp's split of a double into two halves)


# --- the x87 division -------------------------------------------------------------------

def x87_div(a, b):
    """``(double)((long double)a / (long double)b)`` with an 80-bit ``long double``.

    The quotient is rounded twice, to 64 bits and then to 53: that differs
    from the correctly rounded ``a / b`` exactly when the exact quotient lies
    within half a 64-bit step of the midpoint between two doubles; then it is
    the even one of the two.  Found here from the exact remainder ``a - q b``
    (Dekker's exact product), so the result does not depend on the host's
    ``long double``.  Numpy arrays or scalars; returns float64.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    with np.errstate(all="ignore"):
        q = a / b
        product, error = _two_product(q, b)
        remainder = (a - product) - error          # a - q b, exact
        toward = np.where((remainder > 0) == (b > 0), np.inf, -np.inf)
        neighbour = np.nextafter(q, toward)
        half = 0.5 * (neighbour - q)
        excess = remainder / b - half              # how far past the midpoint
        lands_on_midpoint = np.abs(excess) < np.abs(half) * 2.0**-11
        odd = (q.view(np.uint64) & np.uint64(1)).astype(bool)
        twice_rounded = np.where(lands_on_midpoint & odd, neighbour, q)
        ok = (remainder != 0) & np.isfinite(q) & (q != 0)
    result = np.where(ok, twice_rounded, q)
    return result if result.ndim else float(result)


def _x87_div_scalar(a: float, b: float) -> float:
    """:func:`x87_div` for two Python floats (no numpy: the disc loops call it often)."""
    q = a / b
    if q == 0.0 or not math.isfinite(q):
        return q
    a_hi, a_lo = _split(q)
    b_hi, b_lo = _split(b)
    product = q * b
    error = ((a_hi * b_hi - product) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    remainder = (a - product) - error
    if remainder == 0.0:
        return q
    neighbour = math.nextafter(q, math.inf if (remainder > 0) == (b > 0) else -math.inf)
    half = 0.5 * (neighbour - q)
    if abs(remainder / b - half) < abs(half) * 2.0**-11 \
            and struct.unpack("<Q", struct.pack("<d", q))[0] & 1:
        return neighbour
    return q


def _split(x):
    c = _SPLITTER * x
    high = c - (c - x)
    return high, x - high


def _two_product(a, b):
    """``a * b`` as a float and its exact rounding error (Dekker)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    error = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, error


# --- cygrid's Healpix -------------------------------------------------------------------

class Healpix:
    """cygrid's ``Healpix`` helper (RING scheme), with cygrid's API and results.

    Parameters
    ----------
    nside
        A power of two.
    scheme
        :data:`RING` (2); :data:`NESTED` (1) raises ``NotImplementedError``
        as in cygrid.

    Attributes
    ----------
    nside, scheme, npix, nrings, order, npface, ncap, omega, resolution
        As cygrid's (``omega`` the pixel solid angle, ``resolution`` its square
        root, in radians).
    """

    def __init__(self, nside: int = 1, scheme: int = RING):
        if scheme not in (RING, NESTED):
            raise AssertionError("Scheme must be RING or NESTED.")
        if scheme == NESTED:
            raise NotImplementedError("Currently, only RING scheme is supported.")
        self._scheme = scheme
        self._nside = None
        self.nside = nside

    # properties, as cygrid's
    @property
    def nside(self) -> int:
        return self._nside

    @nside.setter
    def nside(self, value: int) -> None:
        value = int(value)
        if value <= 0 or value & (value - 1):
            raise ValueError(f"nside must be a positive power of 2, got {value}")
        self._nside = value
        self._order = value.bit_length() - 1
        self._nrings = 4 * value - 1
        self._npface = value * value
        self._ncap = (self._npface - value) << 1
        self._npix = 12 * self._npface
        self._fact2 = 4.0 / self._npix
        self._fact1 = (value << 1) * self._fact2
        self._omega = float(x87_div(4.0 * PI, float(self._npix)))
        self._resolution = math.sqrt(self._omega)

    @property
    def scheme(self) -> int:
        return self._scheme

    @property
    def npix(self) -> int:
        return self._npix

    @property
    def nrings(self) -> int:
        return self._nrings

    @property
    def order(self) -> int:
        return self._order

    @property
    def npface(self) -> int:
        return self._npface

    @property
    def ncap(self) -> int:
        return self._ncap

    @property
    def omega(self) -> float:
        return self._omega

    @property
    def resolution(self) -> float:
        return self._resolution

    # rings
    def get_ring_info_small(self, ring: int) -> tuple[int, int, bool]:
        """(first pixel, pixels in the ring, whether its pixels are shifted
        from phi = 0 by half a pixel) of ``ring`` (1 .. 4 nside - 1)."""
        ring = int(ring)
        if not 0 < ring <= 4 * self._nside - 1:
            raise ValueError("Ring index not in valid range.")
        start, count, shifted = self._ring_info(np.int64(ring))
        return int(start), int(count), bool(shifted)

    def _ring_info(self, ring):
        ring = np.asarray(ring, np.int64)
        nside = self._nside
        south = 4 * nside - ring
        start = np.where(ring < nside, 2 * ring * (ring - 1),
                         np.where(ring < 3 * nside, self._ncap + (ring - nside) * 4 * nside,
                                  self._npix - 2 * south * (south + 1)))
        count = np.where(ring < nside, 4 * ring, np.where(ring < 3 * nside, 4 * nside, 4 * south))
        shifted = np.where((ring < nside) | (ring >= 3 * nside), True, ((ring - nside) & 1) == 0)
        return start, count, shifted

    def pix2ring(self, pix: int) -> int:
        """The ring holding pixel ``pix``."""
        pix = int(pix)
        if not 0 <= pix < self._npix:
            raise ValueError("Pixel index not in valid range.")
        return int(self._pix2ring(np.int64(pix)))

    def pix2ring_many(self, pix) -> np.ndarray:
        """Rings of the pixels ``pix`` (int64)."""
        return np.asarray(self._pix2ring(np.asarray(pix, np.int64)), np.int64)

    def _pix2ring(self, pix):
        pix = np.asarray(pix, np.int64)
        nside, ncap, npix = self._nside, self._ncap, self._npix
        north = (1 + _isqrt(1 + 2 * pix)) >> 1
        belt = (pix - ncap) // (4 * nside) + nside
        south = 4 * nside - ((1 + _isqrt(np.maximum(2 * (npix - pix) - 1, 0))) >> 1)
        return np.where(pix < ncap, north, np.where(pix < npix - ncap, belt, south))

    # angles to pixels
    def ang2pix(self, theta: float, phi: float) -> int:
        """RING pixel of colatitude ``theta`` and longitude ``phi`` (radians)."""
        return int(self._ang2pix(np.float64(theta), np.float64(phi)))

    def ang2pix_many(self, theta, phi) -> np.ndarray:
        """RING pixels of arrays of ``theta``, ``phi`` (int64)."""
        return np.asarray(self._ang2pix(np.asarray(theta, np.float64),
                                        np.asarray(phi, np.float64)), np.int64)

    def _ang2pix(self, theta, phi):
        theta, phi = np.broadcast_arrays(np.asarray(theta, np.float64),
                                         np.asarray(phi, np.float64))
        near_pole = (theta < 0.01) | (theta > PI - 0.01)
        return self._loc2pix(np.cos(theta), phi, np.sin(theta), near_pole)

    def _loc2pix(self, z, phi, sin_theta, have_sin_theta):
        nside = self._nside
        za = np.abs(z)
        tt = _fmodulo(phi * INV_HALFPI, 4.0)
        pix = np.empty(np.shape(z), np.int64)
        belt = za <= TWOTHIRD
        if np.any(belt):
            nl4 = 4 * nside
            t = tt[belt]
            temp1 = nside * (0.5 + t)
            temp2 = (nside * z[belt]) * 0.75
            jp = np.trunc(temp1 - temp2).astype(np.int64)
            jm = np.trunc(temp1 + temp2).astype(np.int64)
            ir = nside + 1 + jp - jm
            kshift = 1 - (ir & 1)
            t1 = jp + jm + kshift + 1 + nl4 + nl4 - nside
            ip = (t1 >> 1) & (nl4 - 1) if self._order > 0 else (t1 >> 1) % nl4
            pix[belt] = self._ncap + (ir - 1) * nl4 + ip
        cap = ~belt
        if np.any(cap):
            t, zc, zac = tt[cap], z[cap], za[cap]
            tp = t - np.trunc(t)
            with np.errstate(invalid="ignore", divide="ignore"):
                tmp = np.where((zac < 0.99) | ~have_sin_theta[cap],
                               nside * np.sqrt(3.0 * (1.0 - zac)),
                               (nside * sin_theta[cap]) / np.sqrt((1.0 + zac) / 3.0))
            jp = np.trunc(tp * tmp).astype(np.int64)
            jm = np.trunc((1.0 - tp) * tmp).astype(np.int64)
            ir = jp + jm + 1
            ip = np.trunc(t * ir).astype(np.int64)
            pix[cap] = np.where(zc > 0, 2 * ir * (ir - 1) + ip,
                                self._npix - 2 * ir * (ir + 1) + ip)
        return pix

    # pixels to angles
    def pix2ang(self, pix: int) -> tuple[float, float]:
        """(theta, phi) in radians of the centre of pixel ``pix``."""
        pix = int(pix)
        if not 0 <= pix < self._npix:
            raise ValueError("pix not in valid range.")
        theta, phi = self._pix2ang(np.int64(pix))
        return float(theta), float(phi)

    def pix2ang_many(self, pix) -> tuple[np.ndarray, np.ndarray]:
        """(theta, phi) arrays in radians of the centres of the pixels ``pix``."""
        theta, phi = self._pix2ang(np.asarray(pix, np.int64))
        return np.asarray(theta, np.float64), np.asarray(phi, np.float64)

    def _pix2ang(self, pix):
        z, phi, sin_theta, have_sin_theta = self._pix2loc(pix)
        with np.errstate(invalid="ignore"):
            theta = np.where(have_sin_theta, np.arctan2(sin_theta, z), np.arccos(z))
        return theta, phi

    def _pix2loc(self, pix):
        pix = np.asarray(pix, np.int64)
        nside, ncap, npix = self._nside, self._ncap, self._npix
        north, south = pix < ncap, pix >= npix - ncap
        belt = ~north & ~south
        # the caps (north from the north pole, south from the south pole)
        ip_south = npix - pix
        iring = np.where(north, (1 + _isqrt(1 + 2 * pix)) >> 1,
                         (1 + _isqrt(np.maximum(2 * ip_south - 1, 0))) >> 1)
        iphi = np.where(north, (pix + 1) - 2 * iring * (iring - 1),
                        4 * iring + 1 - (ip_south - 2 * iring * (iring - 1)))
        tmp = (iring * iring) * self._fact2
        cap_z = np.where(north, 1.0 - tmp, tmp - 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            cap_phi = x87_div((iphi - 0.5) * HALFPI, iring.astype(np.float64))
            cap_sin = np.sqrt(tmp * (2.0 - tmp))
        have_sin_theta = np.where(north, cap_z > 0.99, cap_z < -0.99) & ~belt
        # the belt
        nl4 = 4 * nside
        ip = pix - ncap
        itmp = ip // nl4
        belt_ring = itmp + nside
        belt_iphi = ip - nl4 * itmp + 1
        fodd = np.where(((belt_ring + nside) & 1) > 0, 1.0, 0.5)
        belt_z = ((2.0 * nside) - belt_ring) * self._fact1
        belt_phi = (((belt_iphi - fodd) * PI) * 0.75) * self._fact1
        z = np.where(belt, belt_z, cap_z)
        phi = np.where(belt, belt_phi, cap_phi)
        sin_theta = np.where(have_sin_theta, cap_sin, 0.0)
        return z, phi, sin_theta, have_sin_theta

    # discs
    def query_disc_phi180(self, disc_size_rad: float, disc_ring: int) -> np.ndarray:
        """cygrid's disc of radius ``disc_size_rad`` around the pixel of
        ``disc_ring`` nearest phi = 180 deg (uint64 pixel indices)."""
        pieces = self._disc_phi180(float(disc_size_rad), int(disc_ring))
        if not pieces:
            return np.zeros(0, np.uint64)
        return np.concatenate([np.arange(first, stop, dtype=np.uint64)
                               for first, stop in pieces])

    def query_disc(self, theta: float, phi: float, disc_size_rad: float) -> np.ndarray:
        """cygrid's disc around (theta, phi): the phi = 180 deg disc of the
        pixel's ring shifted along every ring (uint64 pixel indices)."""
        theta, phi = float(theta), float(phi)
        ring = int(self._pix2ring(self._ang2pix(np.float64(theta), np.float64(phi))))
        disc = self.query_disc_phi180(disc_size_rad, ring).astype(np.int64)
        rings = self._pix2ring(disc)
        start, count, _ = self._ring_info(rings)
        countf = count.astype(np.float64)
        ishift = shift_pixels(countf, phi)
        return (np.mod(disc - start + ishift, count) + start).astype(np.uint64)

    # scalar twins (Python ints and floats, math) of the above, for the disc loops
    def _info1(self, ring: int) -> tuple[int, int, bool]:
        nside = self._nside
        if ring < nside:
            return 2 * ring * (ring - 1), 4 * ring, True
        if ring < 3 * nside:
            return self._ncap + (ring - nside) * 4 * nside, 4 * nside, ((ring - nside) & 1) == 0
        south = 4 * nside - ring
        return self._npix - 2 * south * (south + 1), 4 * south, True

    def _ring1(self, pix: int) -> int:
        """cygrid's ``_pix2ring`` of one pixel."""
        nside, ncap, npix = self._nside, self._ncap, self._npix
        if pix < ncap:
            return (1 + int(math.sqrt(1 + 2 * pix + 0.5))) >> 1
        if pix < npix - ncap:
            return (pix - ncap) // (4 * nside) + nside
        return 4 * nside - ((1 + int(math.sqrt(2 * (npix - pix) - 1 + 0.5))) >> 1)

    def _centre1(self, pix: int) -> tuple[float, float]:
        """cygrid's ``_pix2ang`` of one pixel."""
        nside, ncap, npix = self._nside, self._ncap, self._npix
        have_sin_theta, sin_theta = False, 0.0
        if pix < ncap or pix >= npix - ncap:
            if pix < ncap:
                iring = (1 + int(math.sqrt(1 + 2 * pix + 0.5))) >> 1
                iphi = (pix + 1) - 2 * iring * (iring - 1)
                tmp = (iring * iring) * self._fact2
                z = 1.0 - tmp
                have_sin_theta = z > 0.99
            else:
                ip = npix - pix
                iring = (1 + int(math.sqrt(2 * ip - 1 + 0.5))) >> 1
                iphi = 4 * iring + 1 - (ip - 2 * iring * (iring - 1))
                tmp = (iring * iring) * self._fact2
                z = tmp - 1.0
                have_sin_theta = z < -0.99
            if have_sin_theta:
                sin_theta = math.sqrt(tmp * (2.0 - tmp))
            phi = _x87_div_scalar((iphi - 0.5) * HALFPI, float(iring))
        else:
            nl4 = 4 * nside
            ip = pix - ncap
            itmp = ip // nl4
            iring = itmp + nside
            iphi = ip - nl4 * itmp + 1
            fodd = 1.0 if (iring + nside) & 1 else 0.5
            z = ((2.0 * nside) - iring) * self._fact1
            phi = (((iphi - fodd) * PI) * 0.75) * self._fact1
        return (math.atan2(sin_theta, z) if have_sin_theta else math.acos(z)), phi

    def _discs_phi180(self, disc_size: float, disc_rings) -> tuple[np.ndarray, ...]:
        """:meth:`_disc_phi180` of many rings at once (numpy, over the rings):
        arrays (which of ``disc_rings``, first pixel, stop pixel) of every
        piece, one piece per ring of each disc.  The same steps; numpy's
        transcendental functions may differ from libm's in a last bit, which
        moves a disc edge only for a pixel centre at the disc radius to 1e-16."""
        rings = np.asarray(disc_rings, np.int64).ravel()
        start, count, _ = self._ring_info(rings)
        disc_theta, _ = self._pix2ang(start + count // 2)
        disc_lat = HALFPI - disc_theta
        utheta = np.maximum(disc_theta - disc_size, 1.0e-30)
        dring = self._pix2ring(self._ang2pix(utheta, np.full(rings.shape, PI))) - rings + 2
        # north: from the ring of utheta up to the first ring outside (or ring 1)
        going = rings + dring > 1
        while np.any(going):
            at = np.flatnonzero(going)
            dring[at] -= 1
            ring = rings[at] + dring[at]
            first, n, _ = self._ring_info(ring)
            theta, phi = self._pix2ang(first + n // 2)
            outside = _distances(phi, HALFPI - theta, PI, disc_lat[at]) > disc_size
            going[at] = ~outside & (ring > 1)
        z0 = np.cos(disc_theta)
        cosrbig = math.cos(disc_size)
        xa = 1.0 / np.sqrt((1.0 - z0) * (1.0 + z0))
        pieces = []
        dring -= 1
        going = np.ones(rings.shape, bool)
        while np.any(going):
            at = np.flatnonzero(going)
            dring[at] += 1
            ring = rings[at] + dring[at]
            past = ring > self._nrings
            going[at[past]] = False
            at, ring = at[~past], ring[~past]
            first, n, shifted = self._ring_info(ring)
            mid = first + n // 2
            theta, phi = self._pix2ang(mid)
            stop = (_distances(phi, HALFPI - theta, PI, disc_lat[at]) > disc_size) \
                & (dring[at] >= 0)
            going[at[stop]] = False
            keep = ~stop
            at, first, n, shifted, mid, theta = (v[keep] for v in (at, first, n, shifted, mid,
                                                                    theta))
            z = np.cos(theta)
            x = (cosrbig - z * z0[at]) * xa[at]
            ysq = (1.0 - z * z) - x * x
            with np.errstate(invalid="ignore"):
                dphi = np.where(ysq <= 0, 0.0, np.arctan2(np.sqrt(ysq), x))
            ip = _x87_trunc_divs(n * dphi, TWOPI)
            ip = np.where((ip < 0) | (ip > mid), 0, ip)
            walking = mid - ip >= first
            while np.any(walking):
                w = np.flatnonzero(walking)
                theta_w, phi_w = self._pix2ang(mid[w] - ip[w])
                ip[w] += 1
                done = (ip[w] > mid[w]) | (
                    _distances(phi_w, HALFPI - theta_w, PI, disc_lat[at[w]]) > disc_size)
                walking[w] = ~done & (mid[w] - ip[w] >= first[w])
            ip -= 1
            pieces.append((at, mid - ip, mid + ip + 1 - shifted.astype(np.int64)))
        if not pieces:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return tuple(np.concatenate(parts) for parts in zip(*pieces))

    def _disc_phi180(self, disc_size: float, disc_ring: int) -> list[tuple[int, int]]:
        """cygrid's ``_query_disc_phi180`` as (first, stop) pixel ranges, one
        per ring, from north to south (scalar arithmetic as cygrid's)."""
        info, centre = self._info1, self._centre1
        start, count, _ = info(disc_ring)
        disc_theta, _ = centre(start + count // 2)
        disc_phi = PI
        disc_lat = HALFPI - disc_theta
        utheta = max(disc_theta - disc_size, 1.0e-30)
        dring = int(self._pix2ring(self._ang2pix(np.float64(utheta), np.float64(PI)))) \
            - disc_ring + 2
        while disc_ring + dring > 1:
            dring -= 1
            start, count, _ = info(disc_ring + dring)
            theta, phi = centre(start + count // 2)
            if _distance(phi, HALFPI - theta, disc_phi, disc_lat) > disc_size:
                break
        z0 = math.cos(disc_theta)
        cosrbig = math.cos(disc_size)
        xa = 1.0 / math.sqrt((1.0 - z0) * (1.0 + z0))
        pieces = []
        dring -= 1
        while True:
            dring += 1
            ring = disc_ring + dring
            if ring > self._nrings:
                break
            start, count, shifted = info(ring)
            mid = start + count // 2
            theta, phi = centre(mid)
            if _distance(phi, HALFPI - theta, disc_phi, disc_lat) > disc_size and dring >= 0:
                break
            z = math.cos(theta)
            x = (cosrbig - z * z0) * xa
            ysq = (1.0 - z * z) - x * x
            dphi = 0.0 if ysq <= 0 else math.atan2(math.sqrt(ysq), x)
            ip = _x87_trunc_div(count * dphi, TWOPI)
            if ip < 0 or ip > mid:
                ip = 0
            while mid - ip >= start:
                theta, phi = centre(mid - ip)
                ip += 1
                if ip > mid:
                    break
                if _distance(phi, HALFPI - theta, disc_phi, disc_lat) > disc_size:
                    break
            ip -= 1
            pieces.append((mid - ip, mid + ip + 1 - int(shifted)))
        return pieces


def shift_pixels(count, phi):
    """cygrid's shift of a phi = 180 deg disc to longitude ``phi``: on a ring of
    ``count`` pixels, ``round(count (phi - pi) / 2 / pi)`` (halves away from
    zero), the division by pi in x87 ``long double`` as cygrid's."""
    dshift = x87_div((np.asarray(count, np.float64) * (np.asarray(phi, np.float64) - PI)) / 2.0,
                     PI)
    dshift = np.asarray(dshift)
    return np.where(dshift >= 0, np.trunc(dshift + 0.5), np.trunc(dshift - 0.5)).astype(np.int64)


def _x87_trunc_div(a: float, b: float) -> int:
    """``(int64)((long double)a / b)`` for ``a >= 0 < b``: the 64-bit quotient
    truncated.  Differs from ``trunc(a / b)`` only where the double quotient
    rounds up onto an integer that the 64-bit one stays below."""
    q = a / b
    t = math.trunc(q)
    if q != t or t == 0:
        return t
    product, error = _two_product(np.float64(t), np.float64(b))
    below = -float((np.float64(a) - product) - error) / b    # t - a / b, from the exact remainder
    step = t - math.nextafter(t, 0.0)                          # the doubles' spacing below t
    return t - 1 if below >= step * 2.0**-12 else t


def _x87_trunc_divs(a, b: float) -> np.ndarray:
    """:func:`_x87_trunc_div` of an array ``a >= 0`` by ``b > 0`` (int64)."""
    a = np.asarray(a, np.float64)
    q = a / b
    t = np.trunc(q)
    suspect = (q == t) & (t != 0)
    if np.any(suspect):
        product, error = _two_product(t[suspect], np.float64(b))
        below = -((a[suspect] - product) - error) / b
        step = t[suspect] - np.nextafter(t[suspect], 0.0)
        t[suspect] -= below >= step * 2.0**-12
    return t.astype(np.int64)


def _distances(l1, b1, l2, b2):
    """:func:`_distance` of arrays."""
    return 2 * np.arcsin(np.sqrt(np.sin((b1 - b2) / 2.0) ** 2
                                 + np.cos(b1) * np.cos(b2) * np.sin((l1 - l2) / 2.0) ** 2))


def _distance(l1: float, b1: float, l2: float, b2: float) -> float:
    """cygrid's ``true_angular_distance`` (haversine), radians."""
    return 2 * math.asin(math.sqrt(math.sin((b1 - b2) / 2.0) ** 2
                                   + math.cos(b1) * math.cos(b2)
                                   * math.sin((l1 - l2) / 2.0) ** 2))


def _isqrt(x):
    """Healpix_cxx's ``isqrt``: ``(uint64) sqrt(x + 0.5)`` in double."""
    return np.trunc(np.sqrt(np.asarray(x, np.float64) + 0.5)).astype(np.int64)


def _fmodulo(v1, v2):
    """Healpix_cxx's ``fmodulo``: ``v1`` mod ``v2`` in [0, v2)."""
    v1 = np.asarray(v1, np.float64)
    with np.errstate(invalid="ignore"):
        positive = np.where(v1 < v2, v1, np.fmod(v1, v2))
        negative = np.fmod(v1, v2) + v2
    negative = np.where(negative == v2, 0.0, negative)
    return np.where(v1 >= 0, positive, negative)


# --- cygrid's sample selection (compat="cygrid") ------------------------------------------

#: Discs built so far, per (nside, disc radius): {ring: (ring offsets, (first, last)
#: per offset)}, shared by every selection of those parameters (cygrid's own disc
#: cache lives as long as its gridder; this one as long as the process, for the
#: last few parameter sets).
_DISC_CACHES: "OrderedDict[tuple[int, float], dict]" = OrderedDict()
_DISC_CACHE_KEYS = 4
_DISC_LOCK = threading.Lock()


def _disc_cache(nside: int, disc_size: float) -> dict:
    with _DISC_LOCK:
        key = (nside, disc_size)
        cache = _DISC_CACHES.pop(key, None)
        _DISC_CACHES[key] = cache = {} if cache is None else cache
        while len(_DISC_CACHES) > _DISC_CACHE_KEYS:
            _DISC_CACHES.popitem(last=False)
        return cache


def cygrid_nside(hpx_max_resolution_deg: float) -> int:
    """cygrid's ``set_optimal_nside(DEG2RAD * hpx_max_resolution)``: the power
    of two above ``round(sqrt(pi / 3) / resolution)`` (the next one up when
    that is itself a power of two)."""
    target_res = DEG2RAD * float(hpx_max_resolution_deg)
    extended = np.longdouble
    target = int(np.sqrt(extended(PI) / extended(3.0)) / extended(target_res) + extended(0.5))
    return 1 << (max(target, 1).bit_length() - 1 + 1)


class CygridSelection:
    """What ``compat="cygrid"`` needs on the device, built on the host.

    Parameters
    ----------
    nside
        cygrid's nside (:func:`cygrid_nside`), also the pre-ordering's.
    sphere_radius_deg
        The support radius; cygrid's disc has radius ``sphere_radius`` plus
        the pixel resolution.
    cell_lon_deg, cell_lat_deg
        The cells' coordinates as given (cygrid computes their pixels
        unwrapped, in degrees times ``pi / 180``).
    """

    def __init__(self, nside: int, sphere_radius_deg: float, cell_lon_deg, cell_lat_deg):
        self.hpx = Healpix(nside)
        self.nside = nside
        self.disc_size = DEG2RAD * float(sphere_radius_deg) + self.hpx.resolution
        lon = np.asarray(cell_lon_deg, np.float64).ravel()
        lat = np.asarray(cell_lat_deg, np.float64).ravel()
        valid = np.isfinite(lon) & np.isfinite(lat)
        pix = np.zeros(lon.shape, np.int64)
        pix[valid] = self.sample_pixels(lon[valid], lat[valid])
        ring = self.hpx._pix2ring(pix)
        start, _, _ = self.hpx._ring_info(ring)
        #: (ring, index in the ring) of each cell's pixel, as the gather reads them
        self.cell_ring_index = np.stack([ring, pix - start], axis=-1).astype(np.uint32)
        self._discs = _disc_cache(nside, self.disc_size)

    def disc_row(self, ring: int) -> dict[int, tuple[int, int]]:
        """{ring offset: (first, last) index in that ring} of the disc of
        ``ring``'s samples (rings it does not reach are left out)."""
        self._build(np.array([ring]))
        offsets, spans = self._discs[ring]
        return {int(o): (int(a), int(b)) for o, (a, b) in zip(offsets, spans)}

    def _build(self, rings: np.ndarray) -> None:
        """The discs of those of ``rings`` not built yet, in one vectorised pass."""
        with _DISC_LOCK:
            missing = np.array([r for r in rings.tolist() if r not in self._discs], np.int64)
        if missing.size == 0:
            return
        which, first, stop = self.hpx._discs_phi180(self.disc_size, missing)
        nonempty = stop > first
        which, first, last = which[nonempty], first[nonempty], stop[nonempty] - 1
        ring = self.hpx._pix2ring(first)
        if np.any(self.hpx._pix2ring(last) != ring):
            raise NotImplementedError(
                "compat='cygrid': a disc reaching all the way round a ring (a disc radius "
                f"of {math.degrees(self.disc_size):g} deg) is not supported")
        ring_first, _, _ = self.hpx._ring_info(ring)
        offset = ring - missing[which]
        order = np.lexsort((offset, which))
        which, offset = which[order], offset[order]
        spans = np.stack([first - ring_first, last - ring_first], axis=-1)[order]
        bounds = np.searchsorted(which, np.arange(missing.size + 1))
        with _DISC_LOCK:
            for k, disc_ring in enumerate(missing.tolist()):
                part = slice(bounds[k], bounds[k + 1])
                self._discs[disc_ring] = (offset[part], spans[part].astype(np.int32))

    def disc_table(self, first_ring: int, last_ring: int) -> tuple[np.ndarray, int, int]:
        """The discs of rings ``first_ring .. last_ring`` as an int32 table
        ``[ring - first_ring][offset - first_offset] = (first, last)`` (last <
        first: no pixel of that ring), with ``first_offset`` and the number of
        offsets."""
        rings = np.arange(first_ring, last_ring + 1, dtype=np.int64)
        self._build(rings)
        with _DISC_LOCK:
            rows = [self._discs[ring] for ring in rings.tolist()]
        lengths = np.array([len(offsets) for offsets, _ in rows])
        offsets = np.concatenate([offsets for offsets, _ in rows] + [np.zeros(0, np.int64)])
        spans = np.concatenate([spans for _, spans in rows] + [np.zeros((0, 2), np.int32)])
        first_offset = int(offsets.min()) if offsets.size else 0
        width = int(offsets.max()) - first_offset + 1 if offsets.size else 1
        table = np.zeros((rings.size, width, 2), np.int32)
        table[..., 1] = -1
        table[np.repeat(np.arange(rings.size), lengths), offsets - first_offset] = spans
        return table, first_offset, width

    def sample_pixels(self, lon_deg, lat_deg) -> np.ndarray:
        """cygrid's pixels of samples at ``lon_deg``, ``lat_deg`` (int64)."""
        return self.hpx._ang2pix(HALFPI - DEG2RAD * np.asarray(lat_deg, np.float64),
                                 DEG2RAD * np.asarray(lon_deg, np.float64))

    def keeps(self, sample_pix, cell_index) -> np.ndarray:
        """Whether cygrid pairs each sample pixel with each cell (the host
        twin of the device's test; the arguments broadcast)."""
        sample_pix, cell_index = np.broadcast_arrays(np.asarray(sample_pix, np.int64),
                                                     np.asarray(cell_index, np.int64))
        if sample_pix.size == 0:
            return np.zeros(sample_pix.shape, bool)
        cell_ring = self.cell_ring_index[cell_index, 0].astype(np.int64)
        cell_k = self.cell_ring_index[cell_index, 1].astype(np.int64)
        ring = self.hpx._pix2ring(sample_pix)
        _, phi = self.hpx._pix2ang(sample_pix)
        _, count, _ = self.hpx._ring_info(cell_ring)
        ishift = shift_pixels(count.astype(np.float64), phi)
        first_ring = int(ring.min())
        table, first_offset, width = self.disc_table(first_ring, int(ring.max()))
        column = cell_ring - ring - first_offset
        inside = (column >= 0) & (column < width)
        span = table[ring - first_ring, np.clip(column, 0, width - 1)].astype(np.int64)
        first, last = span[..., 0], span[..., 1]
        return inside & (last >= first) & (np.mod(cell_k - ishift - first, count) <= last - first)


__all__ = ["CygridSelection", "DEG2RAD", "Healpix", "NESTED", "PI", "RING", "cygrid_nside",
           "shift_pixels", "x87_div"]

"""Host-side HEALPix RING-scheme helpers for the single-dish gather.

Vectorised numpy versions of the few HEALPix formulas the pre-ordering
needs (Gorski et al. 2005; the same arithmetic as Healpix_cxx ``loc2pix``),
so that clgrid does not depend on healpy at run time; :func:`ang2pix_ring`
is the plain numpy reference the tests hold the device against.  The
device side of the same geometry, which the gridder uses, lives in
``templates/healpix.cl.mako``.

:class:`Healpix` is cygrid's ``cygrid.healpix.Healpix`` (its API and, to the
last bit, its results: :mod:`.compat`), for code written against cygrid.
"""

from __future__ import annotations

import math

import numpy as np

from .compat import NESTED, RING, Healpix

#: Largest supported nside (2**29 is HEALPix's own limit for 64-bit indices).
MAX_NSIDE = 2**29

#: Upper bound of ``nside * max_pixrad(nside)`` over all nside (the supremum
#: is about 1.0690); the margin covers rounding in pixel assignment.
PIXRAD_TIMES_NSIDE = 1.2

_TWO_THIRDS = 2.0 / 3.0


def resolution_rad(nside: int) -> float:
    """Mean pixel size ``sqrt(pi / 3) / nside`` in radians (healpy's nside2resol)."""
    return math.sqrt(math.pi / 3.0) / nside


def nside_for_resolution(max_resolution_deg: float) -> int:
    """Smallest power-of-two nside whose pixels are at most ``max_resolution_deg``.

    This is how cygrid interprets ``hpx_max_resolution``.
    """
    if not (max_resolution_deg > 0 and math.isfinite(max_resolution_deg)):
        raise ValueError(f"hpx_max_resolution must be a positive number of degrees, "
                         f"got {max_resolution_deg!r}")
    nside = 1
    while resolution_rad(nside) > math.radians(max_resolution_deg) and nside < MAX_NSIDE:
        nside *= 2
    return nside


#: Finest useful pixels: ``sphere_radius / FINEST_PIXELS_PER_RADIUS``.  The
#: gather scans a disc of ``sphere_radius`` plus a pixel radius; pixels this
#: fine widen it by about 0.1% already, while the ring table (4 nside
#: entries) and each cell's walk over its rings grow with nside.
FINEST_PIXELS_PER_RADIUS = 1024


def useful_resolution(max_resolution_deg: float, sphere_radius_deg: float) -> float:
    """``hpx_max_resolution`` clamped to the finest pixels that still speed up
    a gather of radius ``sphere_radius_deg`` (:data:`FINEST_PIXELS_PER_RADIUS`);
    nside sets only the pre-ordering, so the clamp leaves the map as it was."""
    return max(float(max_resolution_deg), sphere_radius_deg / FINEST_PIXELS_PER_RADIUS)


def ring_table_bytes(nside: int) -> int:
    """Device bytes of a chunk's ring table: 4 nside uint32 entries."""
    return 16 * int(nside)


def max_pixel_radius_rad(nside: int) -> float:
    """A safe upper bound of the distance from any pixel centre to its edge."""
    return PIXRAD_TIMES_NSIDE / nside


def n_rings(nside: int) -> int:
    """Number of iso-latitude rings, ``4 nside - 1``."""
    return 4 * nside - 1


def ring_first_pixel(nside: int, ring: np.ndarray) -> np.ndarray:
    """RING-scheme index of the first pixel on each ring (1-based rings)."""
    ring = np.asarray(ring, dtype=np.int64)
    npix = 12 * nside * nside
    ncap = 2 * nside * (nside - 1)
    south = 4 * nside - ring
    return np.where(ring < nside, 2 * ring * (ring - 1),
                    np.where(ring <= 3 * nside, ncap + (ring - nside) * 4 * nside,
                             npix - 2 * south * (south + 1)))


def ang2pix_ring(nside: int, lon_rad: np.ndarray, lat_rad: np.ndarray) -> np.ndarray:
    """RING-scheme pixel of each (lon, lat) in radians, as int64.

    Matches ``healpy.ang2pix(nside, pi/2 - lat, lon)``.
    """
    lon_rad = np.asarray(lon_rad, dtype=np.float64)
    lat_rad = np.asarray(lat_rad, dtype=np.float64)
    z = np.sin(lat_rad)
    za = np.abs(z)
    sin_theta = np.cos(lat_rad)
    tt = np.mod(lon_rad * (2.0 / math.pi), 4.0)
    tt = np.where(tt >= 4.0, 0.0, tt)  # mod can round up to exactly 4
    pix = np.empty(z.shape, dtype=np.int64)

    equator = za <= _TWO_THIRDS
    if np.any(equator):
        pix[equator] = _equatorial_pixels(nside, z[equator], tt[equator])
    cap = ~equator
    if np.any(cap):
        pix[cap] = _cap_pixels(nside, z[cap], za[cap], sin_theta[cap], tt[cap])
    return pix


def _equatorial_pixels(nside: int, z: np.ndarray, tt: np.ndarray) -> np.ndarray:
    nl4 = 4 * nside
    ncap = 2 * nside * (nside - 1)
    temp1 = nside * (0.5 + tt)
    temp2 = nside * z * 0.75
    jp = np.floor(temp1 - temp2).astype(np.int64)  # ascending edge line
    jm = np.floor(temp1 + temp2).astype(np.int64)  # descending edge line
    ring_from_cap = nside + 1 + jp - jm  # in 1 .. 2 nside + 1
    kshift = 1 - (ring_from_cap & 1)
    t1 = jp + jm - nside + kshift + 1 + 2 * nl4
    in_ring = (t1 >> 1) % nl4
    return ncap + (ring_from_cap - 1) * nl4 + in_ring


def _cap_pixels(nside: int, z: np.ndarray, za: np.ndarray, sin_theta: np.ndarray,
                tt: np.ndarray) -> np.ndarray:
    npix = 12 * nside * nside
    tp = tt - np.floor(tt)
    # Near the pole 1 - za loses digits; sin(theta) keeps them (Healpix_cxx).
    tmp = np.where(za < 0.99, nside * np.sqrt(3.0 * (1.0 - za)),
                   nside * sin_theta / np.sqrt((1.0 + za) / 3.0))
    jp = np.floor(tp * tmp).astype(np.int64)
    jm = np.floor((1.0 - tp) * tmp).astype(np.int64)
    ring = jp + jm + 1  # counted from the closest pole
    in_ring = np.floor(tt * ring).astype(np.int64) % (4 * ring)
    return np.where(z > 0, 2 * ring * (ring - 1) + in_ring, npix - 2 * ring * (ring + 1) + in_ring)


__all__ = ["FINEST_PIXELS_PER_RADIUS", "Healpix", "MAX_NSIDE", "NESTED", "RING", "ang2pix_ring", "max_pixel_radius_rad",
           "n_rings", "nside_for_resolution", "resolution_rad", "ring_first_pixel",
           "ring_table_bytes", "useful_resolution"]

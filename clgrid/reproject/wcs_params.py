"""Host-side parameters of celestial WCSs for the device kernels.

A :class:`CelestialPlane` holds what the reprojection kernel needs of one
celestial projection (wcslib conventions, Calabretta & Greisen 2002): the
linear pixel-to-intermediate transform, the projection code and the
native-to-celestial rotation.  It can be built from an
:class:`astropy.wcs.WCS` or written by hand (the benchmark does that where
astropy is not installed).

The spherical rotation of wcslib's ``sphx2s``/``sphs2x`` is applied as a 3x3
matrix to unit vectors; a change of celestial frame that is a pure rotation
(ICRS, FK5, Galactic, ...) joins the same matrix.  For SIN, TAN, ZEA and STG
the native vector follows from the intermediate coordinates with square
roots only, so the kernel evaluates no ``atan2``/``asin`` there (same mapping,
fewer rounding steps).
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Projections the kernel computes on the device (no PV parameters except
#: CEA's lambda).
ZENITHAL = ("SIN", "TAN", "ARC", "ZEA", "STG")
CYLINDRICAL = ("CAR", "CEA", "MER")
DEVICE_PROJECTIONS = ZENITHAL + CYLINDRICAL


@dataclasses.dataclass(frozen=True)
class CelestialPlane:
    """One celestial projection.

    Attributes
    ----------
    projection
        One of :data:`DEVICE_PROJECTIONS`.
    crval_deg
        (longitude, latitude) of the reference point, degrees.
    crpix
        FITS (1-based) reference pixel, (x, y).
    cd_deg
        2x2 matrix from pixel offsets (x, y) to intermediate world
        coordinates in degrees (``CDELT * PC``).
    lonpole_deg
        Native longitude of the celestial pole (wcslib ``LONPOLE``); 180 for
        zenithal projections unless set.
    frame
        Celestial frame key (e.g. ``'RA/DEC ICRS'``); planes of different
        frames need the frame rotation passed to :func:`pixel_map_params`.
    native_pole_deg
        Celestial (longitude, latitude) of the native pole, wcslib's Euler
        angles (alpha_p, 90 - euler[1]); None: ``crval_deg`` (zenithal
        projections, where the reference point is the native pole).
    pv_lambda
        CEA's PV2_1 (lambda); 1 otherwise.
    """

    projection: str
    crval_deg: tuple[float, float]
    crpix: tuple[float, float]
    cd_deg: tuple[tuple[float, float], tuple[float, float]]
    lonpole_deg: float = 180.0
    frame: str = "RA/DEC"
    native_pole_deg: tuple[float, float] | None = None
    pv_lambda: float = 1.0

    def __post_init__(self):
        if self.projection not in DEVICE_PROJECTIONS:
            raise ValueError(f"projection {self.projection!r} not in {DEVICE_PROJECTIONS}")
        if self.projection not in ZENITHAL and self.native_pole_deg is None:
            raise ValueError(f"{self.projection} needs native_pole_deg (the reference point "
                             "is not the native pole)")
        if abs(np.linalg.det(np.asarray(self.cd_deg, float))) == 0:
            raise ValueError("singular CD matrix")

    @property
    def pole_deg(self) -> tuple[float, float]:
        """Celestial coordinates of the native pole."""
        return tuple(self.native_pole_deg) if self.native_pole_deg is not None \
            else tuple(self.crval_deg)

    @property
    def cd_rad(self) -> np.ndarray:
        """Pixel-to-intermediate matrix in radians."""
        return np.deg2rad(np.asarray(self.cd_deg, float))

    def native_to_celestial(self) -> np.ndarray:
        """Rotation matrix taking native unit vectors to celestial ones.

        Its columns are the images of the native x, y, z axes under wcslib's
        ``sphx2s`` formulas, evaluated in float64.
        """
        columns = [_sphx2s_vector(phi, theta, self) for phi, theta in
                   ((0.0, 0.0), (90.0, 0.0), (0.0, 90.0))]
        return np.stack(columns, axis=1)


def _sphx2s_vector(phi_deg: float, theta_deg: float, plane: CelestialPlane) -> np.ndarray:
    """Celestial unit vector of native (phi, theta), wcslib ``sphx2s``."""
    alpha, delta = sphx2s(np.deg2rad(phi_deg), np.deg2rad(theta_deg), plane)
    return np.array([np.cos(delta) * np.cos(alpha), np.cos(delta) * np.sin(alpha),
                     np.sin(delta)])


def _rotate(lon, lat, lon_from, lon_to, delta_p):
    """The spherical rotation shared by wcslib's sphx2s and sphs2x: longitude
    ``lon`` measured from ``lon_from`` becomes one measured from ``lon_to``
    about a pole at latitude ``delta_p`` (radians throughout)."""
    dlon = lon - lon_from
    x = np.sin(lat) * np.cos(delta_p) - np.cos(lat) * np.sin(delta_p) * np.cos(dlon)
    y = -np.cos(lat) * np.sin(dlon)
    out_lat = np.arcsin(np.clip(np.sin(lat) * np.sin(delta_p)
                                + np.cos(lat) * np.cos(delta_p) * np.cos(dlon), -1, 1))
    return lon_to + np.arctan2(y, x), out_lat


def sphx2s(phi_rad, theta_rad, plane: CelestialPlane):
    """Native spherical to celestial (radians), wcslib ``sphx2s``."""
    alpha_p, delta_p = np.deg2rad(plane.pole_deg)
    return _rotate(phi_rad, theta_rad, np.deg2rad(plane.lonpole_deg), alpha_p, delta_p)


def sphs2x(alpha_rad, delta_rad, plane: CelestialPlane):
    """Celestial to native spherical (radians), wcslib ``sphs2x``."""
    alpha_p, delta_p = np.deg2rad(plane.pole_deg)
    return _rotate(alpha_rad, delta_rad, alpha_p, np.deg2rad(plane.lonpole_deg), delta_p)


def from_astropy(wcs) -> CelestialPlane | None:
    """The :class:`CelestialPlane` of a 2-D celestial astropy WCS, or None
    when the device cannot compute it (other projection, projection
    parameters, distortions, non-degree units)."""
    if wcs.naxis != 2 or not wcs.has_celestial or wcs.celestial.naxis != 2:
        return None
    if wcs.sip is not None or wcs.cpdis1 is not None or wcs.cpdis2 is not None \
            or wcs.det2im1 is not None or wcs.det2im2 is not None:
        return None
    core = wcs.wcs
    core.set()
    if (core.lng, core.lat) != (0, 1):
        return None
    codes = {ctype[5:8] for ctype in core.ctype}
    if len(codes) != 1 or next(iter(codes)) not in DEVICE_PROJECTIONS:
        return None
    code = next(iter(codes))
    pv_lambda = 1.0
    for axis, index, value in core.get_pv():
        if code == "CEA" and (axis, index) == (2, 1):
            pv_lambda = float(value)
        elif value != 0:
            return None  # SIN with xi/eta (slant orthographic), offsets, other PV terms
    if any(str(unit) != "deg" for unit in core.cunit) or core.cel.offset:
        return None
    euler = core.cel.euler
    frame = f"{core.ctype[0][:4]}/{core.ctype[1][:4]} {core.radesys} {core.equinox}"
    return CelestialPlane(projection=code,
                          crval_deg=(float(core.crval[0]), float(core.crval[1])),
                          crpix=(float(core.crpix[0]), float(core.crpix[1])),
                          cd_deg=tuple(map(tuple, wcs.pixel_scale_matrix.tolist())),
                          lonpole_deg=float(euler[2]), frame=frame,
                          native_pole_deg=(float(euler[0]), 90.0 - float(euler[1])),
                          pv_lambda=pv_lambda)


#: Numbers in one direction's block of :func:`pixel_map_params`.
BLOCK = 23


def _block(plane_a: CelestialPlane, plane_b: CelestialPlane, rotation: np.ndarray):
    return np.concatenate([
        plane_a.cd_rad.ravel(), np.asarray(plane_a.crpix, float) - 1.0, rotation.ravel(),
        np.linalg.inv(plane_b.cd_rad).ravel(), np.asarray(plane_b.crpix, float) - 1.0,
        [plane_a.pv_lambda, plane_b.pv_lambda]])


def pixel_map_params(plane_out: CelestialPlane, plane_in: CelestialPlane,
                     frame_rotation: np.ndarray | None = None) -> np.ndarray:
    """The 46 float64 numbers the kernel's ``map_pixel`` reads.

    Two blocks of 23, output -> input then input -> output (the round-trip
    check).  Each: [0:4] pixel -> intermediate (radians) matrix, row-major;
    [4:6] reference pixel, 0-based; [6:15] rotation from this side's native
    vectors to the other side's, row-major; [15:19] other side's
    intermediate (radians) -> pixel matrix; [19:21] its reference pixel,
    0-based; [21:23] the two sides' CEA lambda.  ``frame_rotation`` takes
    celestial vectors of the output's frame to the input's (None: same frame).
    """
    frame = np.eye(3) if frame_rotation is None else np.asarray(frame_rotation, float)
    rotation = plane_in.native_to_celestial().T @ frame @ plane_out.native_to_celestial()
    return np.concatenate([_block(plane_out, plane_in, rotation),
                           _block(plane_in, plane_out, rotation.T)])


def map_pixels_numpy(params: np.ndarray, projections: tuple[str, str], x, y,
                     roundtrip: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The device kernel's pixel map in float64 numpy (same formulas):
    input pixel (x, y) of output pixel (x, y); NaN where invalid."""
    x_in, y_in = _map_block(params[:BLOCK], projections, np.asarray(x, float),
                            np.asarray(y, float))
    if roundtrip:
        x_back, y_back = _map_block(params[BLOCK:], projections[::-1], x_in, y_in)
        with np.errstate(invalid="ignore"):
            bad = ~((np.abs(x_back - x) <= 1) & (np.abs(y_back - y) <= 1))
        x_in, y_in = np.where(bad, np.nan, x_in), np.where(bad, np.nan, y_in)
    return x_in, y_in


def _map_block(p, projections, x, y):
    dx, dy = x - p[4], y - p[5]
    vector = deproject_vector(projections[0], p[0] * dx + p[1] * dy, p[2] * dx + p[3] * dy,
                              p[21])
    rotated = np.tensordot(p[6:15].reshape(3, 3), vector, axes=1)
    X, Y = project_vector(projections[1], rotated, p[22])
    return p[15] * X + p[16] * Y + p[19], p[17] * X + p[18] * Y + p[20]


def deproject_vector(code: str, X, Y, lam: float = 1.0) -> np.ndarray:
    """Native unit vector of intermediate (X, Y) in radians; NaN outside
    the projection (wcslib ``x2s`` bounds)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if code in ZENITHAL:
            r2 = X * X + Y * Y
            r = np.sqrt(r2)
            if code == "SIN":
                scale, z = np.ones_like(r), np.where(r2 <= 1, np.sqrt(1 - r2), np.nan)
            elif code == "TAN":
                scale = 1 / np.sqrt(1 + r2)
                z = scale
            elif code == "ARC":
                scale = np.where(r > 0, np.sin(r) / np.where(r > 0, r, 1), 1.0)
                z = np.where(r <= np.pi, np.cos(r), np.nan)
            elif code == "ZEA":
                scale = np.sqrt(1 - r2 / 4)
                z = np.where(r2 <= 4, 1 - r2 / 2, np.nan)
            else:  # STG
                scale = 1 / (1 + r2 / 4)
                z = (1 - r2 / 4) * scale
            return np.stack([-Y * scale, X * scale, z + 0 * X])
        if code == "CAR":
            sin_t, cos_t = np.sin(Y), np.cos(Y)
            cos_t = np.where(np.abs(Y) <= np.pi / 2, cos_t, np.nan)
        elif code == "CEA":
            sin_t = np.where(np.abs(Y * lam) <= 1, Y * lam, np.nan)
            cos_t = np.sqrt(1 - sin_t * sin_t)
        else:  # MER
            sin_t, cos_t = np.tanh(Y), 1 / np.cosh(Y)
        cos_t = np.where(np.abs(X) <= np.pi, cos_t, np.nan)
        return np.stack([cos_t * np.cos(X), cos_t * np.sin(X), sin_t + 0 * cos_t])


def project_vector(code: str, v: np.ndarray, lam: float = 1.0):
    """Intermediate (X, Y) in radians of native unit vectors ``v``; NaN
    where wcslib's ``s2x`` rejects the point."""
    vx, vy, vz = v
    with np.errstate(invalid="ignore", divide="ignore"):
        if code in ZENITHAL:
            rho = np.hypot(vx, vy)
            if code == "SIN":
                scale = np.where(vz >= 0, 1.0, np.nan)
            elif code == "TAN":
                scale = np.where(vz > 0, 1 / vz, np.nan)
            elif code == "ARC":
                r = np.arctan2(rho, vz)
                scale = np.where(rho > 0, r / np.where(rho > 0, rho, 1), 1.0)
            elif code == "ZEA":
                scale = np.where(vz > -1, np.sqrt(2 / (1 + vz)), np.nan)
            else:  # STG
                scale = np.where(vz > -1, 2 / (1 + vz), np.nan)
            return vy * scale, -vx * scale
        X = np.arctan2(vy, vx)
        if code == "CAR":
            Y = np.arctan2(vz, np.hypot(vx, vy))
        elif code == "CEA":
            Y = vz / lam
        else:  # MER
            Y = np.where(np.abs(vz) < 1, np.arctanh(vz), np.nan)
        return X, Y


def pixel_map_reference(plane_out: CelestialPlane, plane_in: CelestialPlane,
                        shape_out: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Input pixel coordinates (x, y) of every output pixel, float64, written
    plainly from wcslib's trigonometric formulas (``sinx2s``/``tanx2s``,
    ``sphx2s``, ``sphs2x``, ``sins2x``/``tans2x``); NaN where a step is
    invalid.  The reference the device kernel is tested against."""
    y_pix, x_pix = np.indices(shape_out, dtype=float)
    offsets = np.stack([x_pix + 1 - plane_out.crpix[0], y_pix + 1 - plane_out.crpix[1]])
    x_int, y_int = np.tensordot(np.asarray(plane_out.cd_deg, float), offsets, axes=1)
    phi, theta = _deproject(plane_out.projection, np.deg2rad(x_int), np.deg2rad(y_int))
    alpha, delta = sphx2s(phi, theta, plane_out)
    phi_in, theta_in = sphs2x(alpha, delta, plane_in)
    x_in, y_in = _project(plane_in.projection, phi_in, theta_in)
    pixel = np.tensordot(np.linalg.inv(np.asarray(plane_in.cd_deg, float)),
                         np.rad2deg(np.stack([x_in, y_in])), axes=1)
    return pixel[0] + plane_in.crpix[0] - 1, pixel[1] + plane_in.crpix[1] - 1


def _deproject(code: str, x_rad, y_rad):
    radius = np.hypot(x_rad, y_rad)
    phi = np.arctan2(x_rad, -y_rad)
    with np.errstate(invalid="ignore", divide="ignore"):
        if code == "SIN":
            theta = np.where(radius <= 1, np.arccos(np.minimum(radius, 1)), np.nan)
        else:
            theta = np.arctan2(1.0, radius)
    return phi, theta


def _project(code: str, phi, theta):
    with np.errstate(invalid="ignore", divide="ignore"):
        if code == "SIN":
            radius = np.where(theta >= 0, np.cos(theta), np.nan)
        else:
            radius = np.where(theta > 0, 1.0 / np.tan(theta), np.nan)
    return radius * np.sin(phi), -radius * np.cos(phi)


__all__ = ["CelestialPlane", "DEVICE_PROJECTIONS", "from_astropy", "map_pixels_numpy",
           "pixel_map_params", "pixel_map_reference", "sphs2x", "sphx2s"]

"""Host-side parameters of celestial tangent-plane WCSs for the device kernels.

A :class:`CelestialPlane` holds what the reprojection kernel needs of one
zenithal projection (SIN or TAN, wcslib conventions, Calabretta & Greisen
2002): the linear pixel-to-intermediate transform, the projection code and
the native-to-celestial rotation.  It can be built from an
:class:`astropy.wcs.WCS` or written by hand (the benchmark does that where
astropy is not installed).

The spherical rotation of wcslib's ``sphx2s``/``sphs2x`` is applied as a 3x3
matrix to unit vectors: for zenithal projections the native vector follows
from the intermediate coordinates with one square root and no trigonometry,
so the kernel never evaluates ``atan2``/``asin`` (same mapping, fewer
rounding steps).
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: Zenithal projections the kernel computes on the device.
DEVICE_PROJECTIONS = ("SIN", "TAN")


@dataclasses.dataclass(frozen=True)
class CelestialPlane:
    """One zenithal celestial projection.

    Attributes
    ----------
    projection
        ``'SIN'`` or ``'TAN'``.
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
        Celestial frame key (e.g. ``'RA/DEC ICRS'``); both planes of a
        device reprojection must share it.
    """

    projection: str
    crval_deg: tuple[float, float]
    crpix: tuple[float, float]
    cd_deg: tuple[tuple[float, float], tuple[float, float]]
    lonpole_deg: float = 180.0
    frame: str = "RA/DEC"

    def __post_init__(self):
        if self.projection not in DEVICE_PROJECTIONS:
            raise ValueError(f"projection {self.projection!r} not in {DEVICE_PROJECTIONS}")
        if abs(np.linalg.det(np.asarray(self.cd_deg, float))) == 0:
            raise ValueError("singular CD matrix")

    @property
    def cd_rad(self) -> np.ndarray:
        """Pixel-to-intermediate matrix in radians."""
        return np.deg2rad(np.asarray(self.cd_deg, float))

    def native_to_celestial(self) -> np.ndarray:
        """Rotation matrix taking native unit vectors to celestial ones.

        Its columns are the images of the native x, y, z axes under wcslib's
        ``sphx2s`` formulas with theta_0 = 90 deg (zenithal), evaluated in
        float64.
        """
        columns = [_sphx2s_vector(phi, theta, self) for phi, theta in
                   ((0.0, 0.0), (90.0, 0.0), (0.0, 90.0))]
        return np.stack(columns, axis=1)


def _sphx2s_vector(phi_deg: float, theta_deg: float, plane: CelestialPlane) -> np.ndarray:
    """Celestial unit vector of native (phi, theta), wcslib ``sphx2s``."""
    alpha, delta = sphx2s(np.deg2rad(phi_deg), np.deg2rad(theta_deg), plane)
    return np.array([np.cos(delta) * np.cos(alpha), np.cos(delta) * np.sin(alpha),
                     np.sin(delta)])


def sphx2s(phi_rad, theta_rad, plane: CelestialPlane):
    """Native spherical to celestial (radians), wcslib ``sphx2s`` for a
    zenithal projection (native pole at the reference point)."""
    alpha_p, delta_p = np.deg2rad(plane.crval_deg)
    phi_p = np.deg2rad(plane.lonpole_deg)
    dphi = phi_rad - phi_p
    x = np.sin(theta_rad) * np.cos(delta_p) - np.cos(theta_rad) * np.sin(delta_p) * np.cos(dphi)
    y = -np.cos(theta_rad) * np.sin(dphi)
    alpha = alpha_p + np.arctan2(y, x)
    delta = np.arcsin(np.clip(np.sin(theta_rad) * np.sin(delta_p)
                              + np.cos(theta_rad) * np.cos(delta_p) * np.cos(dphi), -1, 1))
    return alpha, delta


def sphs2x(alpha_rad, delta_rad, plane: CelestialPlane):
    """Celestial to native spherical (radians), wcslib ``sphs2x``."""
    alpha_p, delta_p = np.deg2rad(plane.crval_deg)
    phi_p = np.deg2rad(plane.lonpole_deg)
    dalpha = alpha_rad - alpha_p
    x = np.sin(delta_rad) * np.cos(delta_p) - np.cos(delta_rad) * np.sin(delta_p) * np.cos(dalpha)
    y = -np.cos(delta_rad) * np.sin(dalpha)
    phi = phi_p + np.arctan2(y, x)
    theta = np.arcsin(np.clip(np.sin(delta_rad) * np.sin(delta_p)
                              + np.cos(delta_rad) * np.cos(delta_p) * np.cos(dalpha), -1, 1))
    return phi, theta


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
    if any(pv[0] == 2 and pv[2] != 0 for pv in core.get_pv()):
        return None  # SIN with xi/eta (slant orthographic) or other PV terms
    if any(str(unit) != "deg" for unit in core.cunit):
        return None
    frame = f"{core.ctype[0][:4]}/{core.ctype[1][:4]} {core.radesys} {core.equinox}"
    return CelestialPlane(projection=next(iter(codes)),
                          crval_deg=(float(core.crval[0]), float(core.crval[1])),
                          crpix=(float(core.crpix[0]), float(core.crpix[1])),
                          cd_deg=tuple(map(tuple, wcs.pixel_scale_matrix.tolist())),
                          lonpole_deg=float(core.lonpole), frame=frame)


def pixel_map_params(plane_out: CelestialPlane, plane_in: CelestialPlane) -> np.ndarray:
    """The 21 float64 numbers the kernel's ``map_pixel`` reads.

    [0:4] output pixel -> intermediate (radians) matrix, row-major;
    [4:6] output reference pixel, 0-based; [6:15] rotation from output
    native to input native vectors, row-major; [15:19] input intermediate
    (radians) -> pixel matrix; [19:21] input reference pixel, 0-based.
    """
    rotation = plane_in.native_to_celestial().T @ plane_out.native_to_celestial()
    return np.concatenate([
        plane_out.cd_rad.ravel(), np.asarray(plane_out.crpix, float) - 1.0,
        rotation.ravel(), np.linalg.inv(plane_in.cd_rad).ravel(),
        np.asarray(plane_in.crpix, float) - 1.0])


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


__all__ = ["CelestialPlane", "DEVICE_PROJECTIONS", "from_astropy", "pixel_map_params",
           "pixel_map_reference", "sphs2x", "sphx2s"]

"""Reprojection test cases shared by the reprojection tests: celestial WCS,
random images, the rotated/rescaled input-output case, the error measure."""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndimage
from astropy.wcs import WCS


def make_wcs(code: str, crval, crpix, cdelt_deg: float, rotation_deg: float = 0.0,
             aspect: float = 1.0) -> WCS:
    """Celestial WCS with a rotated CD matrix (RA increasing to the left)."""
    wcs = WCS(naxis=2)
    wcs.wcs.ctype = [f"RA---{code}", f"DEC--{code}"]
    wcs.wcs.crval = crval
    wcs.wcs.crpix = crpix
    c, s = np.cos(np.deg2rad(rotation_deg)), np.sin(np.deg2rad(rotation_deg))
    wcs.wcs.cd = np.array([[-cdelt_deg * c, -cdelt_deg * aspect * s],
                           [-cdelt_deg * s, cdelt_deg * aspect * c]])
    wcs.wcs.set()
    return wcs


def random_image(shape, dtype=np.float32, seed=0, smooth=False):
    rng = np.random.default_rng(seed)
    image = rng.random(shape)
    if smooth:
        image = ndimage.gaussian_filter(image, 3.0) + 1.0
    if np.dtype(dtype).kind == "c":
        image = image + 1j * rng.random(shape)
    return image.astype(dtype)


def sizes(cl_env, full):
    return tuple(max(8, n // 6) for n in full) if cl_env.tiny else full


def case(cl_env, code_in="SIN", code_out="SIN"):
    """Input/output WCS with rotation, different scales and reference points."""
    shape_in = sizes(cl_env, (96, 84))
    shape_out = sizes(cl_env, (90, 102))
    scale = 1.0 if not cl_env.tiny else 5.0
    wcs_in = make_wcs(code_in, [150.0, -35.0], [shape_in[1] / 2 + 3.3, shape_in[0] / 2 - 2.1],
                      0.01 * scale)
    wcs_out = make_wcs(code_out, [150.08, -35.05], [shape_out[1] / 2 - 1.7,
                                                   shape_out[0] / 2 + 4.2],
                       0.0123 * scale, rotation_deg=23.0, aspect=1.1)
    return shape_in, wcs_in, wcs_out, shape_out


def relative_error(ours, theirs):
    """Largest deviation where both are finite, over the largest reference value."""
    both = np.isfinite(ours) & np.isfinite(theirs)
    assert both.sum() > 0.3 * ours.size
    return float(np.abs(ours[both] - theirs[both]).max() / np.abs(theirs[both]).max())

"""The peer for reprojection tests: reproject itself where installed, else
its algorithm for 2-D celestial WCSs (reproject 0.21's ``_reproject_full``:
astropy's ``pixel_to_pixel`` with the round-trip check, the half-pixel edge
rule, ``scipy.ndimage.map_coordinates`` with ``cval=nan``), so the tests keep
an independent reference on machines without reproject (the GPU host)."""

from __future__ import annotations

import os

import numpy as np

try:
    import reproject as _reproject
except ImportError:
    _reproject = None
if _reproject is not None and getattr(_reproject, "__file__", None) is None:
    # no reproject installed: ``import reproject`` found tests/reproject/, the
    # folder of clgrid's reprojection tests, as a namespace package
    _reproject = None
if os.environ.get("CLGRID_TEST_NO_REPROJECT"):
    _reproject = None  # check the stand-in itself

#: True when the real reproject package answers.
INSTALLED = _reproject is not None
_SPLINE = {"nearest-neighbor": 0, "bilinear": 1, "biquadratic": 2, "bicubic": 3}


def reproject_interp(input_data, output_projection, shape_out=None, order="bilinear",
                     return_footprint=True, roundtrip_coords=True):
    if INSTALLED:
        return _reproject.reproject_interp(input_data, output_projection, shape_out,
                                           order=order, return_footprint=return_footprint,
                                           roundtrip_coords=roundtrip_coords)
    return _algorithm(input_data, output_projection, shape_out, order, return_footprint,
                      roundtrip_coords)


def _algorithm(input_data, output_projection, shape_out, order, return_footprint,
               roundtrip_coords):
    from astropy.wcs import WCS
    from astropy.wcs.utils import pixel_to_pixel
    from scipy.ndimage import map_coordinates
    if isinstance(input_data, tuple):
        data, wcs_in = input_data
    else:
        data, wcs_in = input_data.data, input_data.header
    wcs_in = wcs_in if isinstance(wcs_in, WCS) else WCS(wcs_in)
    wcs_out = output_projection if isinstance(output_projection, WCS) else WCS(output_projection)
    if shape_out is None:
        shape_out = (output_projection["NAXIS2"], output_projection["NAXIS1"])
    if wcs_in.naxis != 2:
        raise NotImplementedError("the reproject stand-in does 2-D celestial WCSs only")
    data = np.asarray(data)
    planes = data.reshape((-1,) + data.shape[-2:])
    shape_2d = tuple(shape_out[-2:])
    y, x = np.indices(shape_2d, dtype=float)
    x_in, y_in = pixel_to_pixel(wcs_out, wcs_in, x, y)
    if roundtrip_coords:
        x_back, y_back = pixel_to_pixel(wcs_in, wcs_out, x_in, y_in)
        with np.errstate(invalid="ignore"):
            reset = (np.abs(x_back - x) > 1) | (np.abs(y_back - y) > 1)
        x_in, y_in = np.where(reset, np.nan, x_in), np.where(reset, np.nan, y_in)
    coords = np.array([np.ravel(y_in), np.ravel(x_in)])
    for axis, n in enumerate(data.shape[-2:]):
        c = coords[axis]
        c[(c < 0) & (c >= -0.5)] = 0
        c[(c < n - 0.5) & (c >= n - 1)] = n - 1
    outside = np.zeros(coords.shape[1], bool)
    for axis, n in enumerate(data.shape[-2:]):
        with np.errstate(invalid="ignore"):
            outside |= (coords[axis] < -0.5) | (coords[axis] > n - 0.5)
    result = np.empty((planes.shape[0], coords.shape[1]))
    for index, plane in enumerate(planes):
        result[index] = map_coordinates(plane.astype(np.float64), coords,
                                        order=_SPLINE[order], cval=np.nan, mode="constant")
        result[index][outside] = np.nan
    result = result.reshape(tuple(data.shape[:-2]) + shape_2d)
    if not return_footprint:
        return result
    return result, (~np.isnan(result)).astype(float)

"""Reprojection (issue 7, SKA SDP memo 089) against reproject, scipy and a
float64 numpy implementation of the wcslib and B-spline formulas."""

from __future__ import annotations

import warnings

import numpy as np
import pyopencl.array as cla
import pytest
import scipy.ndimage as ndimage

pytest.importorskip("astropy")
import reproject_peer as reproject  # noqa: E402  (reproject, or its algorithm)
from astropy.wcs import WCS  # noqa: E402

from clgrid.reproject import BSplinePrefilter, Reprojector, reproject_interp  # noqa: E402
from clgrid.reproject.wcs_params import (  # noqa: E402
    CelestialPlane, from_astropy, pixel_map_params, pixel_map_reference)
from reproject_cases import case, make_wcs, random_image, relative_error  # noqa: E402

ORDERS = ("nearest-neighbor", "bilinear", "bicubic")


def edge_only_mismatch(ours: np.ndarray, theirs: np.ndarray) -> int:
    """Pixels whose blank/non-blank state differs; asserts they lie on the
    edge of the blank region (a neighbour is blank in reproject's answer)."""
    differ = np.isnan(ours) != np.isnan(theirs)
    blank_near = ndimage.binary_dilation(np.isnan(theirs)) & ndimage.binary_dilation(
        ~np.isnan(theirs))
    assert not np.any(differ & ~blank_near), "footprints differ away from the edge"
    return int(differ.sum())


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("sampling", ["buffer", "image", "image-linear"])
def test_sin_to_sin_matches_reproject(cl_env, order, sampling):
    if sampling != "buffer" and not cl_env.profile.image_support:
        pytest.skip("device has no images")
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in)
    ours, footprint = reproject_interp((data, wcs_in), wcs_out, shape_out, order=order,
                                       sampling=sampling, context=cl_env.queue)
    theirs, their_footprint = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out,
                                                         order=order)
    assert ours.shape == shape_out and ours.dtype == np.float64  # as reproject
    # GPU texture filtering keeps 8-bit weights (memo 089, table 1): on the H200,
    # uniform random data, 8.2e-3 here and 2.0e-2 at 1024^2 (benchmarks/RESULTS.md).
    tolerance = 2e-2 if (sampling == "image-linear" and order != "nearest-neighbor"
                         and cl_env.profile.device_type == "gpu") else 1e-5
    assert relative_error(ours, theirs) <= tolerance
    assert edge_only_mismatch(ours, theirs) <= 2 * sum(shape_out) // 10
    np.testing.assert_array_equal(footprint, np.isfinite(ours).astype(float))
    assert 0.3 < their_footprint.mean() < 1.0  # the case really has blank pixels


@pytest.mark.parametrize("codes", [("TAN", "SIN"), ("SIN", "TAN"), ("TAN", "TAN")])
def test_tan_planes_match_reproject(cl_env, codes):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env, *codes)
    data = random_image(shape_in, seed=2)
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic")
    assert relative_error(ours, theirs) <= 1e-5
    edge_only_mismatch(ours, theirs)


def test_other_projection_falls_back_to_host_map(cl_env):
    shape_in, wcs_in, _, shape_out = case(cl_env)
    wcs_out = make_wcs("AIT", [150.05, -35.02], [shape_out[1] / 2, shape_out[0] / 2], 0.011)
    assert from_astropy(wcs_out) is None
    data = random_image(shape_in, seed=3)
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic")
    assert relative_error(ours, theirs) <= 1e-5
    assert edge_only_mismatch(ours, theirs) == 0  # same astropy map, same round trip


@pytest.mark.tiny
def test_pixel_map_matches_wcslib_formulas(cl_env):
    """Device map (rotation matrix) against a float64 numpy map written with
    wcslib's trigonometric formulas, itself checked against astropy."""
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    plane_in, plane_out = from_astropy(wcs_in), from_astropy(wcs_out)
    x_ref, y_ref = pixel_map_reference(plane_out, plane_in, shape_out)
    y_out, x_out = np.indices(shape_out)
    from astropy.wcs.utils import pixel_to_pixel
    x_astropy, y_astropy = pixel_to_pixel(wcs_out, wcs_in, x_out, y_out)
    np.testing.assert_allclose(x_ref, x_astropy, atol=1e-7)
    np.testing.assert_allclose(y_ref, y_astropy, atol=1e-7)
    # wcslib's asin near the native pole limits the float64 reference to ~1e-9 px.
    for precision, tolerance in (("float64", 1e-8), ("float32", 2e-2)):
        if precision == "float64" and not cl_env.profile.fp64:
            continue
        operation = Reprojector(cl_env.queue, np.float32, order="bilinear",
                                coord_precision=precision)
        params = operation.params_on_device(plane_out, plane_in)
        x_dev, y_dev = (a.get() for a in operation.map_pixels(params, shape_out))
        np.testing.assert_array_equal(np.isnan(x_dev), np.isnan(x_ref))
        assert np.nanmax(np.abs(x_dev - x_ref)) <= tolerance
        assert np.nanmax(np.abs(y_dev - y_ref)) <= tolerance


def bspline_reference(coefficients: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Memo 089 equations (1)-(5) in float64 with mirrored taps, at positions
    already snapped by reproject's half-pixel edge rule."""
    n_rows, n_cols = coefficients.shape

    def weights(a):
        return np.stack([(-a**3 + 3 * a**2 - 3 * a + 1) / 6, (3 * a**3 - 6 * a**2 + 4) / 6,
                         (-3 * a**3 + 3 * a**2 + 3 * a + 1) / 6, a**3 / 6])

    def mirror(i, n):
        i = np.abs(i)
        return np.where(i <= n - 1, i, 2 * (n - 1) - i)

    inside = (x >= -0.5) & (x <= n_cols - 0.5) & (y >= -0.5) & (y <= n_rows - 0.5)
    xs = np.clip(np.where(inside, x, 0), 0, n_cols - 1)
    ys = np.clip(np.where(inside, y, 0), 0, n_rows - 1)
    ix, iy = np.floor(xs).astype(int), np.floor(ys).astype(int)
    wx, wy = weights(xs - ix), weights(ys - iy)
    total = np.zeros(x.shape, coefficients.dtype)
    for j in range(4):
        for k in range(4):
            total += wy[j] * wx[k] * coefficients[mirror(iy - 1 + j, n_rows),
                                                  mirror(ix - 1 + k, n_cols)]
    return np.where(inside, total, np.nan)


@pytest.mark.parametrize("order", ["bicubic", "bicubic-unfiltered"])
def test_bicubic_matches_float64_memo_formulas(cl_env, order):
    if not cl_env.profile.fp64:
        pytest.skip("no fp64")
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, np.complex128, seed=4)
    plane_in, plane_out = from_astropy(wcs_in), from_astropy(wcs_out)
    x_ref, y_ref = pixel_map_reference(plane_out, plane_in, shape_out)
    coefficients = (ndimage.spline_filter(data.real, 3, mode="mirror")
                    + 1j * ndimage.spline_filter(data.imag, 3, mode="mirror")
                    if order == "bicubic" else data)
    expected = bspline_reference(coefficients, x_ref, y_ref)
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order=order,
                               context=cl_env.queue)
    assert ours.dtype == np.complex128
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    finite = np.isfinite(expected)
    # The two pixel maps agree to ~1e-10 pixel; random data turns that into ~1e-9.
    assert np.abs(ours[finite] - expected[finite]).max() <= 1e-8


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("shape", [(1, 7), (2, 5), (3, 3), (37, 70), (64, 33)])
def test_prefilter_matches_scipy(cl_env, dtype, shape):
    if np.dtype(dtype) == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    data = random_image(shape, dtype, seed=5)
    device = cla.to_device(cl_env.queue, data)
    BSplinePrefilter(cl_env.queue, dtype)(device)
    if np.dtype(dtype).kind == "c":
        expected = (ndimage.spline_filter(data.real.astype(float), 3, mode="constant")
                    + 1j * ndimage.spline_filter(data.imag.astype(float), 3, mode="constant"))
    else:
        expected = ndimage.spline_filter(data.astype(float), 3, mode="constant")
    tolerance = 1e-12 if np.dtype(dtype) == np.float64 else 2e-6
    assert np.abs(device.get() - expected).max() <= tolerance * np.abs(expected).max()


@pytest.mark.parametrize("order", ORDERS)
def test_identity_returns_input(cl_env, order):
    shape_in, wcs_in, _, _ = case(cl_env)
    data = random_image(shape_in, seed=6)
    ours, footprint = reproject_interp((data, wcs_in), wcs_in, shape_in, order=order,
                                       context=cl_env.queue)
    np.testing.assert_allclose(ours, data, rtol=0, atol=2e-6)
    assert footprint.all()


def test_complex_equals_real_and_imaginary_parts(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, np.complex64, seed=7)
    whole, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                                context=cl_env.queue)
    real, _ = reproject_interp((data.real, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    imag, _ = reproject_interp((data.imag, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    assert whole.dtype == np.complex64
    np.testing.assert_allclose(whole.real, real, rtol=0, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(whole.imag, imag, rtol=0, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("order", ["bilinear", "bicubic"])
def test_cube_planes_match_reproject(cl_env, order):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    cube = random_image((3,) + shape_in, seed=8)
    ours, _ = reproject_interp((cube, wcs_in), wcs_out, (3,) + shape_out, order=order,
                               context=cl_env.queue, progress=False)
    theirs, _ = reproject.reproject_interp((cube, wcs_in), wcs_out, (3,) + shape_out,
                                           order=order)
    for plane in range(3):
        assert relative_error(ours[plane], theirs[plane]) <= 1e-5
        single, _ = reproject_interp((cube[plane], wcs_in), wcs_out, shape_out, order=order,
                                     context=cl_env.queue)
        np.testing.assert_allclose(ours[plane], single, rtol=0, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("coord_precision, fast_math, bound", [
    ("float64", True, 1e-5), ("float32", False, 2e-3), ("float32", True, 2e-3)])
def test_speed_modes_stay_within_stated_error(cl_env, coord_precision, fast_math, bound):
    """Smooth image: the documented error of each mode against reproject."""
    if coord_precision == "float64" and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, seed=9, smooth=True)
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue, coord_precision=coord_precision,
                               fast_math=fast_math)
    theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic")
    assert relative_error(ours, theirs) <= bound
    edge_only_mismatch(ours, theirs)


def test_header_and_hdu_inputs(cl_env):
    from astropy.io import fits
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, seed=10)
    header_out = wcs_out.to_header()
    header_out["NAXIS"], header_out["NAXIS1"], header_out["NAXIS2"] = 2, shape_out[1], \
        shape_out[0]
    hdu = fits.PrimaryHDU(data, wcs_in.to_header())
    ours, _ = reproject_interp(hdu, header_out, order="bicubic", context=cl_env.queue)
    theirs, _ = reproject.reproject_interp(hdu, header_out, order="bicubic")
    assert ours.shape == shape_out
    assert relative_error(ours, theirs) <= 1e-5


def test_device_plane_without_astropy_objects(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, seed=11)
    plane_in, plane_out = from_astropy(wcs_in), from_astropy(wcs_out)
    by_plane, _ = reproject_interp((data, plane_in), plane_out, shape_out,
                                   context=cl_env.queue)
    by_wcs, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, context=cl_env.queue)
    np.testing.assert_array_equal(by_plane, by_wcs)


@pytest.mark.parametrize("order", ["nearest-neighbor", "bilinear", "biquadratic", "bicubic"])
def test_blanks_blank_only_their_stencil(cl_env, order):
    """A 2x2 block of NaN blanks exactly the output pixels whose stencil
    touches it (reproject blanks the whole image for bicubic); 10 pixels
    away the result equals reproject's on the unblanked image."""
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in, seed=12)
    blanked = data.copy()
    cy, cx = shape_in[0] // 2, shape_in[1] // 2
    blanked[cy:cy + 2, cx:cx + 2] = np.nan
    ours, footprint = reproject_interp((blanked, wcs_in), wcs_out, shape_out, order=order,
                                       context=cl_env.queue)
    clean, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order=order)
    # Which output pixels have a stencil touching the block: scipy's own
    # interpolation of the blank indicator with the same taps (order 0/1: reproject itself).
    from astropy.wcs.utils import pixel_to_pixel
    y_out, x_out = np.indices(shape_out, dtype=float)
    x_in, y_in = pixel_to_pixel(wcs_out, wcs_in, x_out, y_out)
    touched = stencil_touches(np.isnan(blanked), x_in, y_in, order)
    expected_blank = np.isnan(clean) | touched
    np.testing.assert_array_equal(np.isnan(ours), expected_blank)
    np.testing.assert_array_equal(footprint, (~expected_blank).astype(float))
    assert 0 < touched.sum() < 40
    distance = ndimage.distance_transform_edt(~touched)
    far = (distance >= 10) & np.isfinite(clean)
    assert far.sum() > 0.3 * ours.size
    tolerance = 1e-3 if order in ("biquadratic", "bicubic") else 1e-6
    assert np.abs(ours[far] - clean[far]).max() <= tolerance
    if order in ("nearest-neighbor", "bilinear"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = reproject.reproject_interp((blanked, wcs_in), wcs_out, shape_out,
                                                order=order, return_footprint=False)
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))


def stencil_touches(blank: np.ndarray, x: np.ndarray, y: np.ndarray, order: str) -> np.ndarray:
    """Output pixels whose interpolation taps (reproject's edge rule, mirrored
    at the edges) include a blank input pixel; float64 numpy."""
    n_rows, n_cols = blank.shape
    spline = {"nearest-neighbor": 0, "bilinear": 1, "biquadratic": 2, "bicubic": 3}[order]
    inside = (x >= -0.5) & (x < n_cols - 0.5) & (y >= -0.5) & (y < n_rows - 0.5)
    xs = np.clip(np.where(inside, x, 0), 0, n_cols - 1)
    ys = np.clip(np.where(inside, y, 0), 0, n_rows - 1)

    def first_and_count(c):
        if spline == 0:
            return np.floor(c + 0.5).astype(int), 1
        if spline == 2:
            return np.floor(c + 0.5).astype(int) - 1, 3
        if spline == 1:
            return np.floor(c).astype(int), 2
        return np.floor(c).astype(int) - 1, 4

    def mirror(i, n):
        if n == 1:
            return np.zeros_like(i)
        i = np.abs(i) % (2 * (n - 1))
        return np.where(i <= n - 1, i, 2 * (n - 1) - i)

    (x0, taps), (y0, _) = first_and_count(xs), first_and_count(ys)
    touched = np.zeros(x.shape, bool)
    for j in range(taps):
        for k in range(taps):
            touched |= blank[mirror(y0 + j, n_rows), mirror(x0 + k, n_cols)]
    return touched & inside


def test_bad_input_raises(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = random_image(shape_in)
    spectral = WCS(naxis=2)
    spectral.wcs.ctype = ["FREQ", "STOKES"]
    with pytest.raises(ValueError, match="celestial"):
        reproject_interp((data, spectral), wcs_out, shape_out, context=cl_env.queue)
    with pytest.raises(ValueError, match="celestial"):
        reproject_interp((data, wcs_in), spectral, shape_out, context=cl_env.queue)
    with pytest.raises(ValueError, match="Dimensions to be looped over must match exactly"):
        reproject_interp((np.stack([data, data]), wcs_in), wcs_out, (3,) + shape_out,
                         context=cl_env.queue)
    with pytest.raises(ValueError, match="Number of dimensions in input and output data"):
        reproject_interp((data, wcs_in), wcs_out, (2,) + shape_out, context=cl_env.queue)
    with pytest.raises(ValueError, match="order"):
        reproject_interp((data, wcs_in), wcs_out, shape_out, order="biquintic",
                         context=cl_env.queue)
    with pytest.raises(ValueError, match="shape_out"):
        reproject_interp((data, wcs_in), wcs_out, context=cl_env.queue)
    if cl_env.profile.image_support:
        with pytest.raises(ValueError, match="float32"):
            reproject_interp((data.astype(np.float64), wcs_in), wcs_out, shape_out,
                             sampling="image", context=cl_env.queue)
    with pytest.raises(TypeError, match="input_data should either be an HDU object"):
        reproject_interp(data, wcs_out, shape_out, context=cl_env.queue)
    with pytest.raises(ValueError, match="projection"):
        CelestialPlane("AIT", (0, 0), (1, 1), ((1, 0), (0, 1)))


def test_pixel_map_params_layout():
    """The 21 numbers: identity planes give the identity map."""
    plane = CelestialPlane("SIN", (10.0, 20.0), (5.0, 6.0), ((-0.1, 0.0), (0.0, 0.1)))
    params = pixel_map_params(plane, plane)
    np.testing.assert_allclose(params[6:15].reshape(3, 3), np.eye(3), atol=1e-15)
    np.testing.assert_allclose(params[4:6], [4.0, 5.0])
    np.testing.assert_allclose(params[0:4].reshape(2, 2) @ params[15:19].reshape(2, 2),
                               np.eye(2), atol=1e-12)

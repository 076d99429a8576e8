"""reproject_interp as a reproject user calls it (issue 15): projections and
frames mapped on the device, input dtypes converted on the device, output
written in place, device arrays, row bands, cubes with spectral axes; each
against reproject 0.21 or against clgrid's own unblocked/host results."""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla
import pytest

pytest.importorskip("astropy")
import reproject_peer as reproject  # noqa: E402  (reproject, or its algorithm)
from astropy.io import fits  # noqa: E402
from astropy.wcs import WCS  # noqa: E402
from astropy.wcs.utils import pixel_to_pixel  # noqa: E402

from clgrid.reproject import Reprojector, reproject_interp  # noqa: E402
from clgrid.reproject.plan import frame_rotation, plan  # noqa: E402
from clgrid.reproject.wcs_params import DEVICE_PROJECTIONS, from_astropy  # noqa: E402
from reproject_cases import case, make_wcs, random_image, relative_error  # noqa: E402

needs_reproject = pytest.mark.skipif(not reproject.INSTALLED,
                                     reason="3-D WCSs need the real reproject as peer")


def smooth(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    y, x = np.indices(shape) / max(shape)
    image = np.sin(6 * x + rng.random()) * np.cos(4 * y) + 2 + 0.05 * rng.random(shape)
    return image.astype(dtype)


def galactic(wcs: WCS, lon: float, lat: float) -> WCS:
    wcs = wcs.deepcopy()
    code = wcs.wcs.ctype[0][5:]
    wcs.wcs.ctype = [f"GLON-{code}", f"GLAT-{code}"]
    wcs.wcs.crval = [lon, lat]
    wcs.wcs.set()
    return wcs


@pytest.mark.parametrize("code_out", DEVICE_PROJECTIONS)
@pytest.mark.parametrize("code_in", ["TAN", "ZEA", "CAR"])
@pytest.mark.sweep
def test_device_projections_match_reproject(cl_env, code_in, code_out):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env, code_in, code_out)
    data = smooth(shape_in, 1)
    job = plan(data, wcs_in, wcs_out, shape_out, True, 3)
    assert job.projections == (code_out, code_in)  # mapped on the device
    ours, footprint = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                                       context=cl_env.queue)
    theirs, their_footprint = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out,
                                                         order="bicubic")
    assert relative_error(ours, theirs) <= 2e-6
    assert np.abs(footprint - their_footprint).sum() <= 2 * sum(shape_out) // 10


def test_device_map_equals_astropy_for_every_pair(cl_env):
    """Device pixel map (float64) against astropy's pixel_to_pixel."""
    if not cl_env.profile.fp64:
        pytest.skip("no fp64")
    shape_out = (40, 50)
    y, x = np.indices(shape_out, dtype=float)
    for code_in in DEVICE_PROJECTIONS:
        for code_out in DEVICE_PROJECTIONS:
            wcs_in = make_wcs(code_in, [150.0, -35.0], [30, 20], 0.5)
            wcs_out = make_wcs(code_out, [152.0, -33.0], [35, 25], 0.6, rotation_deg=20)
            job = plan(np.zeros((60, 70), np.float32), wcs_in, wcs_out, shape_out, False, 1)
            operation = Reprojector(cl_env.queue, np.float32, order="bilinear",
                                    projections=job.projections)
            params = operation.params_on_device(*job.device_map)
            ours = [a.get() for a in operation.map_pixels(params, shape_out)]
            theirs = pixel_to_pixel(wcs_out, wcs_in, x, y)
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
                assert np.nanmax(np.abs(a - b)) <= 1e-8, (code_in, code_out)


def test_frame_change_on_device_matches_reproject(cl_env):
    """ICRS -> Galactic: one rotation matrix, checked by astropy, on the device."""
    from astropy.coordinates import SkyCoord
    shape_in, wcs_in, _, shape_out = case(cl_env, "TAN")
    centre = SkyCoord(150.05, -35.02, unit="deg", frame="icrs").galactic
    wcs_out = galactic(make_wcs("SIN", [0, 0], [shape_out[1] / 2, shape_out[0] / 2], 0.012,
                                rotation_deg=10), centre.l.deg, centre.b.deg)
    rotation = frame_rotation(wcs_out, wcs_in)
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    data = smooth(shape_in, 2)
    job = plan(data, wcs_in, wcs_out, shape_out, True, 3)
    assert job.device_map is not None and job.device_map[2] is not None
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    theirs, their_footprint = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out,
                                                         order="bicubic")
    assert 0.2 < their_footprint.mean() < 1
    assert relative_error(ours, theirs) <= 2e-6


def test_fk4_frame_falls_back_to_astropy_map(cl_env):
    """FK4's E-terms are not a rotation: astropy maps every pixel."""
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    wcs_out = wcs_out.deepcopy()
    wcs_out.wcs.radesys, wcs_out.wcs.equinox = "FK4", 1950.0
    wcs_out.wcs.crval = [149.6, -34.8]
    wcs_out.wcs.set()
    assert frame_rotation(wcs_out, wcs_in) is None
    data = smooth(shape_in, 3)
    job = plan(data, wcs_in, wcs_out, shape_out, True, 3)
    assert job.device_map is None
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bilinear",
                               context=cl_env.queue)
    theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order="bilinear")
    assert relative_error(ours, theirs) <= 2e-6


@pytest.mark.parametrize("dtype", ["<i2", ">i2", "u1", ">f4", "<f8", ">f8", "bool"])
def test_input_dtypes_converted_on_device(cl_env, dtype):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    values = smooth(shape_in, 4) * 50
    data = (values > 100) if dtype == "bool" else values.astype(dtype)
    ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order="bicubic",
                               context=cl_env.queue)
    reference = data.astype(np.float64)
    theirs, _ = reproject.reproject_interp((reference, wcs_in), wcs_out, shape_out,
                                           order="bicubic")
    assert ours.dtype == np.float64  # as reproject, whatever the real input dtype
    bound = 1e-12 if dtype.endswith("f8") else 2e-6
    assert relative_error(ours, theirs) <= bound


def test_output_array_written_in_place(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = smooth(shape_in, 5)
    expected = reproject_interp((data, wcs_in), wcs_out, shape_out, return_footprint=False,
                                context=cl_env.queue)
    for dtype in (np.float32, np.float64):
        out = np.full(shape_out, 7, dtype)
        footprint = np.full(shape_out, 7, np.float64)
        returned, returned_footprint = reproject_interp(
            (data, wcs_in), wcs_out, output_array=out, output_footprint=footprint,
            context=cl_env.queue)
        assert returned is out and returned_footprint is footprint
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6, equal_nan=True)
        np.testing.assert_array_equal(footprint, np.isfinite(expected))
    with pytest.raises(ValueError, match="output_array has shape"):
        reproject_interp((data, wcs_in), wcs_out, shape_out,
                         output_array=np.empty((3, 3), np.float32), context=cl_env.queue)


def test_calls_give_the_pinned_staging_back_to_the_device(cl_env):
    """reproject_interp leases the device's pinned staging (the imaging
    calls' too, hostio.PinnedPool) for the call only: after it, the pool
    holds the blocks free and the next call maps none; the results are the
    same."""
    from clgrid.device import hostio
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = smooth(shape_in, 5)
    queue = cl_env.queue
    pool = hostio.PinnedPool.for_device(queue.context, queue.device)
    first = reproject_interp((data, wcs_in), wcs_out, shape_out, return_footprint=False,
                             context=queue)
    assert pool.free_bytes >= data.astype(np.float32).nbytes
    from clgrid.reproject import driver
    idle = [op for ops in driver._reprojectors.values() for op in ops if op.queue == queue]
    assert idle and all(op.staging._up.block is None and op.staging._down.block is None
                        for op in idle)
    mapped = pool.mapped
    again = reproject_interp((data, wcs_in), wcs_out, shape_out, return_footprint=False,
                             context=queue)
    np.testing.assert_array_equal(again, first)
    assert pool.mapped == mapped


def test_device_arrays_in_and_out(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    cube = np.stack([smooth(shape_in, 6), smooth(shape_in, 7)])
    expected, expected_footprint = reproject_interp(
        (cube, wcs_in), wcs_out, (2,) + shape_out, order="bicubic", context=cl_env.queue,
        output_array=np.empty((2,) + shape_out, np.float32))  # the device arrays' precision
    device_in = cla.to_device(cl_env.queue, cube)
    device_out = cla.empty(cl_env.queue, (2,) + shape_out, np.float32)
    device_footprint = cla.empty(cl_env.queue, (2,) + shape_out, np.float32)
    returned, footprint = reproject_interp(
        (device_in, wcs_in), wcs_out, order="bicubic", output_array=device_out,
        output_footprint=device_footprint, context=cl_env.queue)
    assert returned is device_out and footprint is device_footprint
    np.testing.assert_array_equal(device_out.get(), expected)
    np.testing.assert_array_equal(device_footprint.get(), expected_footprint)
    np.testing.assert_array_equal(device_in.get(), cube)  # input untouched
    banded = reproject_interp((device_in, wcs_in), wcs_out, order="bicubic", block_size=7,
                              output_array=cla.empty(cl_env.queue, (2,) + shape_out,
                                                     np.float32), context=cl_env.queue)
    np.testing.assert_array_equal(banded[0].get(), expected)  # footprint made on the device
    with pytest.raises(ValueError, match="both be host arrays or both device"):
        reproject_interp((device_in, wcs_in), wcs_out, output_array=device_out,
                         output_footprint=np.empty((2,) + shape_out, np.float32),
                         context=cl_env.queue)


@pytest.mark.parametrize("order", ["bilinear", "bicubic"])
@pytest.mark.parametrize("host_map", [False, True])
def test_row_bands_equal_one_block(cl_env, order, host_map):
    """Bands read only the input window they need (plus the prefilter's
    reach) and give the same result as one block, blanks included."""
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    if host_map:
        wcs_out = make_wcs("AIT", [150.05, -35.02], [shape_out[1] / 2, shape_out[0] / 2], 0.011)
    data = smooth(shape_in, 8)
    data[40:42, 30:33] = np.nan
    whole = reproject_interp((data, wcs_in), wcs_out, shape_out, order=order,
                             return_footprint=False, context=cl_env.queue)
    for rows in (7, 32):
        banded = reproject_interp((data, wcs_in), wcs_out, shape_out, order=order,
                                  return_footprint=False, block_size=(rows, 500),
                                  context=cl_env.queue)
        np.testing.assert_array_equal(banded, whole)


def test_roundtrip_on_device_matches_astropy_roundtrip(cl_env):
    """A SIN output seeing the far side of a SIN input's sphere: reproject's
    round-trip check blanks what maps back elsewhere."""
    wcs_in = make_wcs("CAR", [0.0, 0.0], [90.5, 45.5], 2.0)
    wcs_out = make_wcs("TAN", [120.0, 70.0], [40.5, 40.5], 2.5)
    data = smooth((90, 180), 9)
    for roundtrip in (False, True):
        ours, _ = reproject_interp((data, wcs_in), wcs_out, (80, 80), order="bilinear",
                                   roundtrip_coords=roundtrip, context=cl_env.queue)
        theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, (80, 80),
                                               order="bilinear", roundtrip_coords=roundtrip)
        assert (np.isnan(ours) != np.isnan(theirs)).sum() <= 8
        assert relative_error(ours, theirs) <= 2e-6


def spectral_cube_wcs(code: str, crval, crpix3: float = 1.0) -> WCS:
    wcs = WCS(naxis=3)
    wcs.wcs.ctype = [f"RA---{code}", f"DEC--{code}", "FREQ"]
    wcs.wcs.crval = [crval[0], crval[1], 1.4e9]
    wcs.wcs.crpix = [20, 18, crpix3]
    wcs.wcs.cdelt = [-0.01, 0.01, 1e6]
    wcs.wcs.cunit = ["deg", "deg", "Hz"]
    wcs.wcs.set()
    return wcs


@needs_reproject
@pytest.mark.parametrize("crpix3_out", [1.0, 1.5])
def test_spectral_cube_matches_reproject(cl_env, crpix3_out):
    """Cube with a FREQ axis: same spectral axis -> plane by plane; shifted
    by half a channel -> linear interpolation between planes, as reproject."""
    cube = np.stack([smooth((36, 40), k) for k in range(4)])
    wcs_in = spectral_cube_wcs("SIN", (150.0, -35.0))
    wcs_out = spectral_cube_wcs("TAN", (150.02, -35.01), crpix3_out)
    shape_out = (3 if crpix3_out != 1 else 4, 30, 34)
    ours, _ = reproject_interp((cube, wcs_in), wcs_out, shape_out, order="bilinear",
                               context=cl_env.queue)
    theirs, _ = reproject.reproject_interp((cube, wcs_in), wcs_out, shape_out,
                                           order="bilinear")
    assert relative_error(ours, theirs) <= 2e-6
    assert (np.isnan(ours) != np.isnan(theirs)).sum() <= shape_out[0] * 12


@needs_reproject
def test_cube_axes_in_other_order(cl_env):
    """Celestial axes not last (FREQ first in the WCS): transposed as reproject."""
    cube = np.stack([smooth((36, 40), k) for k in range(3)])
    wcs_in = spectral_cube_wcs("SIN", (150.0, -35.0))
    wcs_out = spectral_cube_wcs("TAN", (150.02, -35.01))
    reordered = wcs_in.sub([3, 1, 2])  # FREQ, RA, DEC: numpy (dec, ra, freq)
    data = np.ascontiguousarray(cube.transpose(1, 2, 0))
    ours, _ = reproject_interp((data, reordered), wcs_out, (3, 30, 34), order="bilinear",
                               context=cl_env.queue)
    theirs, _ = reproject.reproject_interp((cube, wcs_in), wcs_out, (3, 30, 34),
                                           order="bilinear")
    assert relative_error(ours, theirs) <= 2e-6


def test_hdu_header_and_wcs_inputs_agree(cl_env):
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env)
    data = smooth(shape_in, 10)
    header_out = wcs_out.to_header()
    header_out["NAXIS"], header_out["NAXIS1"], header_out["NAXIS2"] = 2, shape_out[1], \
        shape_out[0]
    by_wcs = reproject_interp((data, wcs_in), wcs_out, shape_out, context=cl_env.queue)[0]
    by_header = reproject_interp((data, wcs_in.to_header()), header_out,
                                 context=cl_env.queue)[0]
    hdu = fits.PrimaryHDU(data.astype(">f4"), wcs_in.to_header())
    by_hdu = reproject_interp(fits.HDUList([hdu]), header_out, context=cl_env.queue)[0]
    # float64 results: a header holds the WCS to ~1e-16, which shows at 1e-13
    np.testing.assert_allclose(by_header, by_wcs, rtol=1e-12, atol=0)
    np.testing.assert_allclose(by_hdu, by_wcs, rtol=1e-12, atol=0)


def test_from_astropy_reads_euler_angles_and_lambda():
    wcs = make_wcs("CEA", [30.0, 10.0], [5, 5], 0.1)
    wcs.wcs.set_pv([(2, 1, 0.7)])
    wcs.wcs.set()
    plane = from_astropy(wcs)
    assert plane.projection == "CEA" and plane.pv_lambda == 0.7
    np.testing.assert_allclose(plane.pole_deg, (wcs.wcs.cel.euler[0],
                                                90 - wcs.wcs.cel.euler[1]))
    slanted = make_wcs("SIN", [30.0, 10.0], [5, 5], 0.1)
    slanted.wcs.set_pv([(2, 1, 0.1)])
    slanted.wcs.set()
    assert from_astropy(slanted) is None  # slant orthographic: astropy maps it


def test_random_data_large_rotation_all_orders(cl_env):
    """Uniform random data (the memo's worst case), every order."""
    shape_in, wcs_in, wcs_out, shape_out = case(cl_env, "ARC", "STG")
    data = random_image(shape_in, seed=11)
    for order in ("nearest-neighbor", "bilinear", "biquadratic", "bicubic"):
        ours, _ = reproject_interp((data, wcs_in), wcs_out, shape_out, order=order,
                                   context=cl_env.queue)
        theirs, _ = reproject.reproject_interp((data, wcs_in), wcs_out, shape_out, order=order)
        assert relative_error(ours, theirs) <= 1e-5

"""Single-dish gather gridding (HyGrid) against a float64 brute-force gather.

The reference, :func:`clgrid.singledish.gather_reference`, compares every
sample with every cell (haversine distance, cygrid's kernel formulas), so
it shares nothing with the HEALPix search it checks.
"""

import textwrap

import numpy as np
import pytest

from clgrid.singledish import healpix
from oclgrind_check import run_clean
from clgrid.singledish import HealpixGather, ShapeError, SlGrid, WcsGrid, gather_reference
from clgrid.singledish.preorder import MIN_CHUNK_SAMPLES

SIGMA_DEG = 0.1
RADIUS_DEG = 3 * SIGMA_DEG


def _header(crval1, crval2, naxis1, naxis2, cdelt, proj="SIN", nchan=None):
    header = {"NAXIS": 2, "NAXIS1": naxis1, "NAXIS2": naxis2,
              "CTYPE1": f"RA---{proj}", "CTYPE2": f"DEC--{proj}",
              "CRPIX1": naxis1 / 2 + 0.5, "CRPIX2": naxis2 / 2 + 0.5,
              "CRVAL1": crval1, "CRVAL2": crval2, "CDELT1": -cdelt, "CDELT2": cdelt,
              "CUNIT1": "deg", "CUNIT2": "deg"}
    if nchan:
        header.update({"NAXIS": 3, "NAXIS3": nchan, "CTYPE3": "VRAD", "CRPIX3": 1,
                       "CRVAL3": 0.0, "CDELT3": 1000.0, "CUNIT3": "m/s"})
    return header


def _random_samples(rng, centre, size_deg, n, nchan=None):
    """Uniform on the sphere inside a cap of ``size_deg`` around ``centre``."""
    lon0, lat0 = np.radians(centre)
    radius = np.radians(size_deg)
    cos_d = rng.uniform(np.cos(radius), 1.0, n)
    bearing = rng.uniform(0, 2 * np.pi, n)
    d = np.arccos(cos_d)
    lat = np.arcsin(np.sin(lat0) * cos_d + np.cos(lat0) * np.sin(d) * np.cos(bearing))
    lon = lon0 + np.arctan2(np.sin(bearing) * np.sin(d) * np.cos(lat0),
                            cos_d - np.sin(lat0) * np.sin(lat))
    lons = np.mod(np.degrees(lon), 360.0)
    shape = (n,) if nchan is None else (n, nchan)
    data = (1.0 + 0.5 * rng.standard_normal(shape)).astype(np.float32)
    return lons, np.degrees(lat), data


def _otf_scan(centre, size_deg, n_rows, per_row):
    """On-the-fly raster: rows of constant latitude, scanned back and forth."""
    lon0, lat0 = centre
    lats = np.repeat(np.linspace(lat0 - size_deg / 2, lat0 + size_deg / 2, n_rows), per_row)
    along = np.linspace(-size_deg / 2, size_deg / 2, per_row)
    lons = np.concatenate([(along if r % 2 == 0 else along[::-1]) for r in range(n_rows)])
    lons = lon0 + lons / np.cos(np.radians(lats))
    signal = (2.0 + np.sin(np.radians(lons) * 40) * np.cos(np.radians(lats) * 30)).astype(
        np.float32)
    return np.mod(lons, 360.0), lats, signal


def _assert_matches(gridder, cube_ref, weights_ref, rtol=1e-5):
    cube, weights = gridder.get_datacube(), gridder.get_weights()
    assert cube.shape == cube_ref.shape
    np.testing.assert_array_equal(np.isnan(cube), np.isnan(cube_ref))
    assert np.count_nonzero(~np.isnan(cube_ref)) > 0.5 * cube_ref.size  # not a vacuous test
    np.testing.assert_array_equal(weights == 0, weights_ref == 0)
    good = weights_ref > 0
    np.testing.assert_allclose(weights[good], weights_ref[good], rtol=rtol)
    np.testing.assert_allclose(cube[good], cube_ref[good], rtol=rtol)


def _grid_wcs(cl_env, header, lons, lats, data, weights=None, kernel=("gauss1d", (SIGMA_DEG,)),
              **kwargs):
    gridder = WcsGrid(header, context=cl_env.queue, **kwargs)
    gridder.set_kernel(kernel[0], kernel[1], RADIUS_DEG, SIGMA_DEG / 2)
    gridder.grid(lons, lats, data, weights)
    lon, lat = gridder.get_world_coords()
    reference = gather_reference(lon, lat, lons, lats, data, weights, kernel_type=kernel[0],
                                 kernel_params=kernel[1], sphere_radius=RADIUS_DEG)
    return gridder, reference


# --- host HEALPix helpers ---------------------------------------------------------------
@pytest.mark.parametrize("nside", [1, 4, 64, 2048, 2**18])
def test_ang2pix_ring_matches_healpy(nside):
    hp = pytest.importorskip("healpy")
    rng = np.random.default_rng(nside)
    lon = rng.uniform(0, 2 * np.pi, 20000)
    lat = np.arcsin(rng.uniform(-1, 1, 20000))
    lat[:500] = np.radians(rng.uniform(89.9, 90, 500))  # the polar branch
    lat[500:1000] = -lat[:500]
    expected = hp.ang2pix(nside, np.pi / 2 - lat, lon)
    np.testing.assert_array_equal(healpix.ang2pix_ring(nside, lon, lat), expected)
    rings = np.arange(1, 4 * nside)[:: max(1, nside // 16)]
    np.testing.assert_array_equal(hp.pix2ring(nside, healpix.ring_first_pixel(nside, rings)),
                                  rings)
    assert hp.max_pixrad(nside) < healpix.max_pixel_radius_rad(nside)


def test_nside_for_resolution_is_smallest_fine_enough():
    for degrees in (5.0, 0.3, 0.05, 1 / 120):
        nside = healpix.nside_for_resolution(degrees)
        assert np.degrees(healpix.resolution_rad(nside)) <= degrees
        assert np.degrees(healpix.resolution_rad(nside // 2)) > degrees or nside == 1


# --- device ring formulas ---------------------------------------------------------------
@pytest.mark.tiny
def test_device_ang2pix_matches_healpy(cl_env):
    hp = pytest.importorskip("healpy")
    rng = np.random.default_rng(3)
    n = 64 if cl_env.tiny else 20000
    lon = rng.uniform(0, 2 * np.pi, n)
    lat = np.arcsin(rng.uniform(-1, 1, n))
    lat[: n // 8] = np.radians(rng.uniform(89.5, 90, n // 8))
    for nside in (1, 8, 1024):
        gather = HealpixGather(cl_env.queue, nside=nside)
        np.testing.assert_array_equal(gather.pixelise(lon, lat, nside),
                                      hp.ang2pix(nside, np.pi / 2 - lat, lon))


# --- against the brute-force reference --------------------------------------------------
@pytest.mark.tiny
def test_random_samples_match_reference(cl_env):
    rng = np.random.default_rng(1)
    n, npix = (150, 6) if cl_env.tiny else (6000, 24)
    header = _header(60.0, 30.0, npix, npix, 0.05)
    lons, lats, data = _random_samples(rng, (60.0, 30.0), 1.0, n, nchan=3)
    weights = rng.uniform(0.5, 2.0, data.shape).astype(np.float32)
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data, weights)
    assert gridder.get_datacube().shape == (3, npix, npix)
    _assert_matches(gridder, cube_ref, weights_ref)
    unweighted = gridder.get_unweighted_datacube()
    np.testing.assert_allclose(unweighted, np.nan_to_num(cube_ref) * weights_ref, rtol=2e-5,
                               atol=1e-6)


def test_otf_scan_matches_reference(cl_env):
    lons, lats, data = _otf_scan((150.0, 2.0), 2.0, 60, 240)
    header = _header(150.0, 2.0, 40, 40, 0.05, proj="CAR")
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data)
    assert gridder.get_datacube().shape == (40, 40)
    _assert_matches(gridder, cube_ref, weights_ref)


@pytest.mark.parametrize("kernel", [("gauss2d", (0.12, 0.06, 0.7)),
                                    ("tapered_sinc", (SIGMA_DEG, 2.52, 1.55))])
def test_other_kernels_match_reference(cl_env, kernel):
    rng = np.random.default_rng(2)
    header = _header(200.0, -40.0, 20, 20, 0.05)
    lons, lats, data = _random_samples(rng, (200.0, -40.0), 0.8, 4000)
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data, kernel=kernel)
    if kernel[0] == "gauss2d":
        _assert_matches(gridder, cube_ref, weights_ref)
    else:  # negative sinc lobes: compare sums, the quotient can be ill-conditioned
        good = weights_ref > 0.1 * weights_ref.max()
        np.testing.assert_allclose(gridder.get_weights()[good], weights_ref[good], rtol=1e-5)
        np.testing.assert_allclose(gridder.get_datacube()[good], cube_ref[good], rtol=1e-5)


@pytest.mark.parametrize("where", ["north_pole", "south_pole", "ra_zero", "face_boundary"])
def test_geometry_edge_cases(cl_env, where):
    centre, proj = {"north_pole": ((30.0, 89.7), "SIN"), "south_pole": ((300.0, -89.8), "SIN"),
                    "ra_zero": ((0.0, 10.0), "CAR"),
                    # lon 90, lat asin(2/3): corner of four HEALPix base faces
                    "face_boundary": ((90.0, 41.8103149), "SIN")}[where]
    rng = np.random.default_rng(4)
    lons, lats, data = _random_samples(rng, centre, 1.0, 5000)
    header = _header(centre[0], centre[1], 24, 24, 0.06, proj=proj)
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data)
    _assert_matches(gridder, cube_ref, weights_ref)
    if where == "ra_zero":  # samples on both sides of RA 0 reached the map
        assert lons.min() < 1.0 and lons.max() > 359.0


@pytest.mark.parametrize("kernel", [("gauss1d", (SIGMA_DEG,)),
                                    ("gauss2d", (0.12, 0.06, 0.7)),
                                    ("tapered_sinc", (SIGMA_DEG, 2.52, 1.55))])
@pytest.mark.parametrize("where", ["ra_zero", "north_pole"])
def test_weighted_kernels_are_exact(cl_env, kernel, where):
    """Every kernel with per-value weights against the exact float64 sum, on
    maps across RA = 0 and around the pole: clgrid finds every sample within
    the support (cygrid misses some near the support edge, see
    docs/singledish.md), so the sums agree to float32 rounding."""
    centre = {"ra_zero": (0.0, -20.0), "north_pole": (120.0, 89.6)}[where]
    rng = np.random.default_rng(13)
    lons, lats, data = _random_samples(rng, centre, 1.0, 6000, nchan=2)
    weights = rng.uniform(0.2, 3.0, data.shape).astype(np.float32)
    header = _header(centre[0], centre[1], 22, 22, 0.06)
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data, weights,
                                                 kernel=kernel)
    if where == "ra_zero":
        assert lons.min() < 1.0 and lons.max() > 359.0
    covered = weights_ref != 0
    assert covered.mean() > 0.5
    # Peak-normalised: sinc lobes make some weight sums tiny and quotients ill-conditioned.
    peak = np.abs(weights_ref).max()
    np.testing.assert_allclose(gridder.get_weights(), weights_ref, rtol=0, atol=2e-7 * peak)
    unweighted = gridder.get_unweighted_datacube()
    reference = np.nan_to_num(cube_ref) * weights_ref
    np.testing.assert_allclose(unweighted, reference, rtol=0,
                               atol=2e-7 * np.abs(reference).max())
    if kernel[0] != "tapered_sinc":
        np.testing.assert_allclose(gridder.get_datacube()[covered], cube_ref[covered],
                                   rtol=1e-6)


def test_fine_healpix_with_64_bit_pixels_across_ra_zero(cl_env):
    """nside 2**20 (pixel indices beyond 32 bits: uint64 keys in the sort)."""
    rng = np.random.default_rng(14)
    lons = np.mod(rng.uniform(-0.1, 0.1, 4000), 360.0)
    lats = rng.uniform(-0.1, 0.1, 4000)
    data = rng.uniform(1, 2, 4000).astype(np.float32)
    cell_lon, cell_lat = np.meshgrid(np.mod(np.linspace(-0.05, 0.05, 6), 360.0),
                                     np.linspace(-0.05, 0.05, 6))
    gridder = SlGrid(cell_lon.ravel(), cell_lat.ravel(), context=cl_env.queue)
    gridder.set_kernel("gauss1d", (0.01,), 0.03, 0.0001)
    assert gridder.nside == 2**20
    gridder.grid(lons, lats, data)
    _assert_matches(gridder, *gather_reference(cell_lon.ravel(), cell_lat.ravel(), lons, lats,
                                               data, kernel_params=(0.01,), sphere_radius=0.03))


def test_pole_with_healpix_targets(cl_env):
    """SlGrid onto HEALPix pixel centres around the north pole (the cap rings)."""
    hp = pytest.importorskip("healpy")
    nside = 1024
    pixels = np.arange(12 * nside * nside)[:600]  # the first rings: around the pole
    theta, phi = hp.pix2ang(nside, pixels)
    rng = np.random.default_rng(5)
    lons, lats, data = _random_samples(rng, (0.0, 89.9), 1.5, 5000)
    gridder = SlGrid(np.degrees(phi), 90 - np.degrees(theta), context=cl_env.queue)
    gridder.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    gridder.grid(lons, lats, data)
    assert gridder.get_datacube().shape == (600,)
    reference = gather_reference(np.degrees(phi), 90 - np.degrees(theta), lons, lats, data,
                                 kernel_params=(SIGMA_DEG,), sphere_radius=RADIUS_DEG)
    _assert_matches(gridder, *reference)


def test_coarsening_gives_identical_results(cl_env):
    rng = np.random.default_rng(6)
    header = _header(10.0, 50.0, 23, 17, 0.04)  # sizes not multiples of gamma
    lons, lats, data = _random_samples(rng, (10.0, 50.0), 0.8, 4000, nchan=2)
    cubes = []
    for gamma in (1, 2, 3, 4):
        gridder = WcsGrid(header, context=cl_env.queue, gamma=gamma)
        gridder.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
        gridder.grid(lons, lats, data)
        cubes.append((gridder.get_datacube(), gridder.get_weights()))
    for cube, weights in cubes[1:]:
        np.testing.assert_array_equal(np.isnan(cube), np.isnan(cubes[0][0]))
        np.testing.assert_allclose(weights, cubes[0][1], rtol=1e-6)
        np.testing.assert_allclose(cube, cubes[0][0], rtol=1e-6)


def test_repeated_calls_and_chunks_accumulate(cl_env):
    rng = np.random.default_rng(7)
    header = _header(120.0, 0.0, 16, 16, 0.05)
    lons, lats, data = _random_samples(rng, (120.0, 0.0), 0.6, 3000)
    whole = WcsGrid(header, context=cl_env.queue)
    whole.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    whole.grid(lons, lats, data)
    parts = WcsGrid(header, context=cl_env.queue, chunk_samples=700, progress=False)
    parts.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    parts.grid(lons[:1000], lats[:1000], data[:1000])
    parts.grid(lons[1000:], lats[1000:], data[1000:])
    np.testing.assert_allclose(parts.get_weights(), whole.get_weights(), rtol=1e-5)
    np.testing.assert_allclose(parts.get_datacube(), whole.get_datacube(), rtol=1e-5)
    assert parts.stats.n_samples == 3000
    parts.clear_data_and_weights()
    assert np.all(parts.get_weights() == 0) and np.all(np.isnan(parts.get_datacube()))


def _grid_with(cl_env, header, lons, lats, data, **kwargs):
    gridder = WcsGrid(header, context=cl_env.queue, progress=False, **kwargs)
    gridder.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    gridder.grid(lons, lats, data)
    return gridder


def test_threads_lanes_and_chunks_do_not_change_results(cl_env):
    rng = np.random.default_rng(9)
    header = _header(250.0, 60.0, 18, 14, 0.05)
    lons, lats, data = _random_samples(rng, (250.0, 60.0), 0.7, 5000, nchan=2)
    whole = _grid_with(cl_env, header, lons, lats, data, host_threads=1, lanes=1)
    for threads, lanes in ((1, 1), (3, 4), (2, 32)):
        parts = _grid_with(cl_env, header, lons, lats, data, host_threads=threads,
                           lanes=lanes, chunk_samples=600)  # 9 chunks
        assert parts.host_threads == threads and parts.lanes == lanes
        cube, reference = parts.get_datacube(), whole.get_datacube()
        np.testing.assert_array_equal(np.isnan(cube), np.isnan(reference))
        assert np.count_nonzero(np.isnan(reference)) < 0.5 * reference.size
        np.testing.assert_allclose(parts.get_weights(), whole.get_weights(), rtol=1e-6)
        np.testing.assert_allclose(cube, reference, rtol=1e-6)
        assert parts.stats.n_samples == 5000 and parts.stats.n_chunks == 9
        timings = parts.timings
        assert 0 < timings["staging_s"] <= timings["total_s"]
    # The device sort is stable and the lane sums meet in a fixed tree:
    # the same call gives the same bits.
    again = _grid_with(cl_env, header, lons, lats, data, host_threads=2, lanes=32,
                       chunk_samples=600)
    np.testing.assert_array_equal(again.get_weights(), parts.get_weights())
    np.testing.assert_array_equal(again.get_unweighted_datacube(),
                                  parts.get_unweighted_datacube())


def test_chunk_lengths(cl_env):
    header = _header(10.0, 10.0, 4, 4, 0.05)
    gridder = WcsGrid(header, context=cl_env.queue, chunk_samples=1 << 24)
    gridder.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)

    def chunk_len(n_samples: int) -> int:  # one float32 channel, no weights
        return gridder._chunk_len(1, 4, False, n_samples)

    assert chunk_len(1000) == 1000  # one chunk, one gather pass
    assert chunk_len(MIN_CHUNK_SAMPLES) == MIN_CHUNK_SAMPLES
    assert chunk_len(3 * MIN_CHUNK_SAMPLES) == MIN_CHUNK_SAMPLES  # pipelined, not smaller
    assert chunk_len(40 * MIN_CHUNK_SAMPLES) <= 10 * MIN_CHUNK_SAMPLES  # PIPELINE_CHUNKS = 4
    assert chunk_len(10**10) <= 1 << 24  # chunk_samples stays the maximum
    assert WcsGrid(header, context=cl_env.queue).host_threads >= 1  # the usable cores


def test_error_in_a_later_chunk_leaves_the_sums_unchanged(cl_env):
    rng = np.random.default_rng(10)
    header = _header(30.0, 20.0, 10, 10, 0.05)
    lons, lats, data = _random_samples(rng, (30.0, 20.0), 0.4, 2000)
    gridder = _grid_with(cl_env, header, lons, lats, data, chunk_samples=500)
    before = gridder.get_weights(), gridder.get_unweighted_datacube()
    bad_lats = lats.copy()
    bad_lats[1700] = 91.0  # in the 4th of 4 chunks: the first three were gathered
    with pytest.raises(ValueError, match="latitudes"):
        gridder.grid(lons, bad_lats, data)
    np.testing.assert_array_equal(gridder.get_weights(), before[0])
    np.testing.assert_array_equal(gridder.get_unweighted_datacube(), before[1])
    assert gridder.stats.n_samples == 2000


def test_inputs_of_any_dtype_order_and_byte_order(cl_env):
    rng = np.random.default_rng(11)
    header = _header(80.0, -10.0, 10, 10, 0.05)
    lons, lats, data = _random_samples(rng, (80.0, -10.0), 0.4, 1500, nchan=3)
    plain = _grid_with(cl_env, header, lons, lats, data)
    with pytest.warns(UserWarning, match="byteorder not native"):   # cygrid's warning
        odd = _grid_with(cl_env, header, lons.astype(">f8"), np.repeat(lats, 2)[::2],  # strided
                         np.asfortranarray(data).astype(">f4"))
    np.testing.assert_array_equal(odd.get_weights(), plain.get_weights())
    np.testing.assert_array_equal(odd.get_unweighted_datacube(), plain.get_unweighted_datacube())
    integers = _grid_with(cl_env, header, lons, lats, np.round(data * 10).astype(np.int16))
    reference = _grid_with(cl_env, header, lons, lats, np.round(data * 10).astype(np.float32))
    np.testing.assert_array_equal(integers.get_unweighted_datacube(),
                                  reference.get_unweighted_datacube())


@pytest.mark.tiny
@pytest.mark.parametrize("key_dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("group_size", [None, 1, 16], ids=["default", "serial", "ranked"])
def test_radix_sort_is_stable(cl_env, key_dtype, group_size):
    """Against numpy's stable argsort, with keys above base + span sorted last;
    both kernels (serial tiles, the CPU default; tiles ranked in local memory)."""
    from clgrid.device.radixsort import RadixSort
    import pyopencl as cl
    rng = np.random.default_rng(12)
    sort = RadixSort(cl_env.queue, key_dtype=key_dtype, group_size=group_size)
    sizes = [(1, 3), (70, 5), (300, 2**12)] if cl_env.tiny else \
        [(1, 3), (1000, 7), (50000, 3000), (77777, 2**20), (20000, 2**33)]
    for n, span in sizes:
        if span >= 2**32 and key_dtype == np.uint32:
            continue
        base = 1000
        keys = (base + rng.integers(0, span, n)).astype(key_dtype)
        keys[::7] = base + span + 5  # "sentinels": clamp to span, so last
        flags = cl.mem_flags.READ_WRITE
        keys_d = cl.Buffer(cl_env.context, flags | cl.mem_flags.COPY_HOST_PTR, hostbuf=keys)
        scratch = (cl.Buffer(cl_env.context, flags, keys.nbytes),
                   cl.Buffer(cl_env.context, flags, 4 * n), cl.Buffer(cl_env.context, flags, 4 * n))
        sorted_d, order_d, _ = sort(keys_d, n, base, span, scratch)
        order = np.empty(n, np.uint32)
        sorted_keys = np.empty(n, key_dtype)
        cl.enqueue_copy(cl_env.queue, order, order_d)
        cl.enqueue_copy(cl_env.queue, sorted_keys, sorted_d)
        expected = np.argsort(np.minimum(keys - base, span), kind="stable")
        np.testing.assert_array_equal(order, expected)
        np.testing.assert_array_equal(sorted_keys, keys[expected])


def test_spectral_header_and_cube(cl_env):
    rng = np.random.default_rng(8)
    header = _header(45.0, 45.0, 12, 10, 0.05, nchan=5)
    lons, lats, data = _random_samples(rng, (45.0, 45.0), 0.5, 2000, nchan=5)
    gridder, (cube_ref, weights_ref) = _grid_wcs(cl_env, header, lons, lats, data)
    assert gridder.get_datacube().shape == (5, 10, 12)
    _assert_matches(gridder, cube_ref, weights_ref)


def test_empty_cells_are_nan_with_zero_weight(cl_env):
    header = _header(10.0, 10.0, 20, 20, 0.05)
    gridder = WcsGrid(header, context=cl_env.queue)
    gridder.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    gridder.grid(np.array([10.0]), np.array([10.0]), np.array([5.0]))  # one sample
    cube, weights = gridder.get_datacube(), gridder.get_weights()
    near = weights > 0
    assert 0 < near.sum() < near.size
    assert np.all(np.isnan(cube[~near])) and np.all(cube[near] == pytest.approx(5.0))


# --- bad input ----------------------------------------------------------------------------
@pytest.fixture
def gridder(cl_env):
    g = WcsGrid(_header(10.0, 10.0, 8, 8, 0.05), context=cl_env.queue)
    g.set_kernel("gauss1d", (SIGMA_DEG,), RADIUS_DEG, SIGMA_DEG / 2)
    return g


def test_bad_coordinates_raise(gridder):
    ones = np.ones(3)
    with pytest.raises(ValueError, match="latitudes"):
        gridder.grid(np.array([10.0, 10, 10]), np.array([10.0, 95, 10]), ones)
    with pytest.raises(ValueError, match="longitudes"):
        gridder.grid(np.array([10.0, 400, 10]), np.array([10.0, 10, 10]), ones)
    with pytest.raises(ShapeError, match="length"):
        gridder.grid(np.array([10.0, 10]), np.array([10.0, 10, 10]), ones)
    with pytest.raises(ShapeError, match="samples"):
        gridder.grid(np.array([10.0, 10, 10]), np.array([10.0, 10, 10]), np.ones(4))
    with pytest.raises(ShapeError, match="weights"):
        gridder.grid(np.array([10.0, 10, 10]), np.array([10.0, 10, 10]), ones, np.ones(2))


def test_data_shape_must_stay_the_same(gridder):
    coords = np.array([10.0, 10.0])
    gridder.grid(coords, coords, np.ones((2, 3)))
    with pytest.raises(ShapeError, match="mismatch"):
        gridder.grid(coords, coords, np.ones((2, 4)))


def test_nan_samples_are_dropped_and_counted(gridder):
    lons = np.array([10.0, np.nan, 10.01, 10.0])
    lats = np.array([10.0, 10.0, 10.0, 10.0])
    data = np.array([1.0, 100.0, 1.0, np.nan])
    with pytest.warns(UserWarning) as caught:
        gridder.grid(lons, lats, data)
    messages = " ".join(str(w.message) for w in caught)
    assert "1 samples with NaN/Inf coordinates dropped" in messages
    assert "1 NaN/Inf data" in messages
    assert gridder.stats.n_dropped == 1 and gridder.stats.n_flagged_values == 1
    cube = gridder.get_datacube()
    assert np.nanmax(cube) == pytest.approx(1.0) and np.nanmin(cube) == pytest.approx(1.0)


@pytest.mark.parametrize("option", [{"host_threads": 0}, {"host_threads": -2}, {"lanes": 3},
                                    {"lanes": 512}])
def test_bad_options_raise(cl_env, option):
    with pytest.raises(ValueError, match=list(option)[0]):
        WcsGrid(_header(10.0, 10.0, 8, 8, 0.05), context=cl_env.queue, **option)


def test_bad_kernel_and_header(cl_env, gridder):
    with pytest.raises(ValueError, match="not understood"):
        gridder.set_kernel("box", (1.0,), 1.0, 0.5)
    with pytest.raises(ValueError, match="needs 3"):
        gridder.set_kernel("gauss2d", (1.0,), 1.0, 0.5)
    with pytest.raises(ValueError, match="positive"):
        gridder.set_kernel("gauss1d", (-1.0,), 1.0, 0.5)
    with pytest.raises(ValueError, match="hpx_max_resolution"):
        gridder.set_kernel("gauss1d", (1.0,), 1.0, 0.0)
    spectral_only = {"NAXIS": 1, "NAXIS1": 10, "CTYPE1": "FREQ", "CRPIX1": 1, "CRVAL1": 1e9,
                     "CDELT1": 1e6}
    with pytest.raises(ValueError, match="not celestial"):
        WcsGrid(spectral_only, context=cl_env.queue)
    fresh = WcsGrid(_header(10.0, 10.0, 8, 8, 0.05), context=cl_env.queue)
    with pytest.raises(RuntimeError, match="set_kernel"):
        fresh.grid(np.array([10.0]), np.array([10.0]), np.array([1.0]))


# --- Oclgrind: races and out-of-bounds accesses --------------------------------------------
ORACLE = textwrap.dedent("""
    import numpy as np, pyopencl as cl, clgrid
    from clgrid.singledish import SlGrid, gather_reference
    queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
    rng = np.random.default_rng(0)
    lons = rng.uniform(9.8, 10.2, 60); lats = rng.uniform(9.8, 10.2, 60)
    data = rng.uniform(1, 2, (60, 2)).astype(np.float32)
    tl, tb = np.meshgrid(np.linspace(9.85, 10.15, 3), np.linspace(9.85, 10.15, 3))
    for gamma, lanes, compat in ((1, 1, "exact"), (2, 1, "exact"), (1, 4, "exact"),
                                 (2, 2, "cygrid")):
        g = SlGrid(tl.ravel(), tb.ravel(), context=queue, gamma=gamma, lanes=lanes,
                   compat=compat)
        g.set_kernel("gauss1d", (0.05,), 0.15, 0.025)
        g.grid(lons, lats, data)
        ref, wref = gather_reference(tl.ravel(), tb.ravel(), lons, lats, data,
                                     kernel_params=(0.05,), sphere_radius=0.15,
                                     compat=compat, hpx_max_resolution=0.025)
        assert np.allclose(g.get_weights(), wref, rtol=1e-5), (g.get_weights(), wref)
    print("done")
""")


@pytest.mark.tiny
def test_gather_has_no_race_under_oclgrind(request):
    result = run_clean(request.config, ORACLE)
    assert "done" in result.stdout

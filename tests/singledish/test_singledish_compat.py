"""What clgrid takes over from cygrid 2.0.4 where a cygrid user needs it:
``compat="cygrid"`` (cygrid's own sample selection), ``datacube=`` /
``weightcube=`` and the ``Healpix`` helper.

cygrid itself is not needed here: the selection is held against its host
twin, ``gather_reference(compat="cygrid")`` (``clgrid.singledish.compat``,
which test_singledish_cygrid.py holds against cygrid, bit for bit), and the
device's share of cygrid's arithmetic against the host's.  cygrid's own
tests: tests/peers/cygrid.
"""

import numpy as np
import pytest

from clgrid.singledish import ShapeError, SlGrid, WcsGrid, gather_reference
from clgrid.singledish.compat import (DEG2RAD, PI, CygridSelection, Healpix, cygrid_nside,
                                      shift_pixels, x87_div)
from clgrid.singledish.gather import HealpixGather

HALFPI = PI / 2.0
EXTENDED = np.finfo(np.longdouble).nmant == 63   # x87 80-bit long double (x86-64)


def _header(crval1, crval2, naxis1, naxis2, cdelt):
    return {"NAXIS": 2, "NAXIS1": naxis1, "NAXIS2": naxis2,
            "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN", "CUNIT1": "deg", "CUNIT2": "deg",
            "CRPIX1": naxis1 / 2 + 0.5, "CRPIX2": naxis2 / 2 + 0.5,
            "CRVAL1": crval1, "CRVAL2": crval2, "CDELT1": -cdelt, "CDELT2": cdelt}


def _cap(rng, centre, size_deg, n):
    """Uniform in a cap of ``size_deg`` around ``centre`` (degrees)."""
    lon0, lat0 = np.radians(centre)
    cos_d = rng.uniform(np.cos(np.radians(size_deg)), 1.0, n)
    bearing = rng.uniform(0, 2 * np.pi, n)
    d = np.arccos(cos_d)
    lat = np.arcsin(np.sin(lat0) * cos_d + np.cos(lat0) * np.sin(d) * np.cos(bearing))
    lon = lon0 + np.arctan2(np.sin(bearing) * np.sin(d) * np.cos(lat0),
                            cos_d - np.sin(lat0) * np.sin(lat))
    return np.mod(np.degrees(lon), 360.0), np.degrees(lat)


def _structured_quotients(rng, n):
    """Divisions as cygrid does them (pixel longitudes over ring numbers, shifts
    over pi: many land next to a double midpoint) and random ones."""
    ring = rng.integers(1, 2**20, n).astype(np.float64)
    k = np.floor(rng.uniform(0, 4, n) * ring)
    a = np.concatenate([(k + 1 - 0.5) * HALFPI, rng.uniform(-1e3, 1e3, n),
                        (4 * ring * ((k + 0.5) * HALFPI / ring - PI)) / 2.0])
    b = np.concatenate([ring, rng.uniform(0.01, 1e3, n), np.full(n, PI)])
    return a, b


# --- cygrid's arithmetic ------------------------------------------------------------------
@pytest.mark.skipif(not EXTENDED, reason="needs numpy's longdouble to be x87's 80 bits")
def test_x87_division_matches_long_double():
    a, b = _structured_quotients(np.random.default_rng(1), 100000)
    truth = (a.astype(np.longdouble) / b.astype(np.longdouble)).astype(np.float64)
    np.testing.assert_array_equal(x87_div(a, b), truth)
    assert np.count_nonzero(a / b != truth) > 10   # the case it exists for


@pytest.mark.tiny
@pytest.mark.parametrize("nside", [1, 64, 16384])
def test_device_arithmetic_matches_host(cl_env, nside):
    """The device's share of cygrid's arithmetic (x87 quotients, pixels of
    positions, pixel longitudes, shifts) gives the host's bits."""
    rng = np.random.default_rng(nside)
    n = 210 if cl_env.tiny else 30000   # divisible by 3: _structured_quotients
    a, b = _structured_quotients(rng, n // 3)
    hpx = Healpix(nside)
    lon = np.concatenate([rng.uniform(-360, 360, n - 8), [0, 90, 180, 45, 0, 359.5, -0.0, 10]])
    lat = np.concatenate([np.degrees(np.arcsin(rng.uniform(-1, 1, n - 8))),
                          [0, 0, 90, -90, 41.8103148957786, 0, 89.99, -89.99]])
    pix = hpx.ang2pix_many(HALFPI - DEG2RAD * lat, DEG2RAD * lon)
    ring = hpx.pix2ring_many(pix)
    first, _, _ = hpx._ring_info(ring)
    counts = hpx._ring_info(rng.integers(1, 4 * nside, n))[1]
    gather = HealpixGather(cl_env.queue, nside=nside, compat="cygrid")
    quotient, device_pix, phi, shift = gather.cygrid_arithmetic(
        a, b, lon, lat, ring, pix - first, counts)
    np.testing.assert_array_equal(quotient, x87_div(a, b))
    np.testing.assert_array_equal(device_pix, pix)
    np.testing.assert_array_equal(phi, hpx.pix2ang_many(pix)[1])
    np.testing.assert_array_equal(shift, shift_pixels(counts, phi))


# --- compat="cygrid": the selection -------------------------------------------------------
SIGMA = 0.1
RADIUS = 3 * SIGMA
HPX_RES = SIGMA

#: map centre, cap of the samples, hpx_max_resolution and the cells at which
#: cygrid leaves out samples there (measured with gather_reference)
CASES = {
    "polar_cap": ((131.0, 50.0), 0.7, SIGMA / 2, 8),   # shifts of exactly half a pixel
    "belt": ((20.0, 10.0), 0.7, SIGMA, 0),              # (none there)
    "ra_zero": ((0.0, -30.0), 0.7, 1.5 * SIGMA, 31),
    "north_pole": ((0.0, 89.6), 0.7, SIGMA, 68),
}


def _compat_case(rng, where, n):
    centre, size = CASES[where][:2]
    lons, lats = _cap(rng, centre, size, n)
    data = (1.0 + 0.3 * rng.standard_normal(n)).astype(np.float32)
    return centre, lons, lats, data


@pytest.mark.parametrize("where", sorted(CASES))
def test_compat_keeps_the_samples_cygrid_keeps(cl_env, where):
    rng = np.random.default_rng(len(where))
    centre, lons, lats, data = _compat_case(rng, where, 30000)
    resolution, cells_short = CASES[where][2:]
    header = _header(*centre, 18, 18, 0.05)
    options = {"gamma": 3, "lanes": 4} if where == "belt" else {}
    gridder = WcsGrid(header, context=cl_env.queue, compat="cygrid", **options)
    gridder.set_kernel("gauss1d", (SIGMA,), RADIUS, resolution)
    gridder.grid(lons, lats, data)
    lon, lat = gridder.get_world_coords()
    args = dict(kernel_params=(SIGMA,), sphere_radius=RADIUS, hpx_max_resolution=resolution)
    cube, weights = gather_reference(lon, lat, lons, lats, data, compat="cygrid", **args)
    _, exact_weights = gather_reference(lon, lat, lons, lats, data, **args)
    # not vacuous: cygrid leaves out samples here that the exact sum has
    assert np.count_nonzero(exact_weights - weights > 1e-9) == cells_short
    assert np.all(weights <= exact_weights * (1 + 1e-12))
    np.testing.assert_allclose(gridder.get_weights(), weights, rtol=2e-6)
    np.testing.assert_allclose(gridder.get_datacube(), cube, rtol=2e-6)


def test_compat_on_sight_lines_and_spectra(cl_env):
    rng = np.random.default_rng(5)
    centre, lons, lats, _ = _compat_case(rng, "polar_cap", 20000)
    targets = _cap(rng, centre, 0.5, 300)
    data = rng.standard_normal((lons.size, 3)).astype(np.float64)
    weights = rng.uniform(0.5, 2.0, (lons.size, 3))
    gridder = SlGrid(*targets, context=cl_env.queue, compat="cygrid", dtype=np.float64)
    gridder.set_kernel("gauss2d", (SIGMA, SIGMA / 2, 0.4), RADIUS, SIGMA / 2)
    gridder.grid(lons[:7000], lats[:7000], data[:7000], weights[:7000])
    gridder.grid(lons[7000:], lats[7000:], data[7000:], weights[7000:])
    cube, sums = gather_reference(*targets, lons, lats, data, weights, kernel_type="gauss2d",
                                  kernel_params=(SIGMA, SIGMA / 2, 0.4), sphere_radius=RADIUS,
                                  compat="cygrid", hpx_max_resolution=SIGMA / 2)
    np.testing.assert_allclose(gridder.get_weights(), sums, rtol=1e-12)
    np.testing.assert_allclose(gridder.get_datacube(), cube, rtol=1e-10, atol=1e-12)


def test_compat_uses_cygrids_nside(cl_env):
    # sqrt(pi / 3) / resolution rounds to 1024: cygrid doubles past it, to 2048
    resolution = np.degrees(np.sqrt(np.pi / 3) / 1024)
    assert cygrid_nside(resolution) == 2048 and cygrid_nside(resolution * 1.01) == 1024
    for compat, nside in (("exact", 1024), ("cygrid", 2048)):
        gridder = SlGrid([10.0], [20.0], context=cl_env.queue, compat=compat)
        gridder.set_kernel("gauss1d", (0.1,), 0.3, resolution)
        assert gridder.nside == nside
    with pytest.raises(ValueError, match="compat"):
        SlGrid([10.0], [20.0], context=cl_env.queue, compat="nearly")


def test_reference_reproduces_cygrids_stored_maps():
    """cygrid's own test set-up and stored results (tests/peers/cygrid): the
    host twin of the selection reproduces them to float32 rounding; the exact
    sum differs at the 2 map cells and 1 sight-line where cygrid leaves out a
    sample (tests/peers/cygrid/xfails.py)."""
    from pathlib import Path
    from astropy.wcs import WCS
    from cygrid_cases import (HPX_RES as RES, KERNEL_SIGMA, SUPPORT, cygrid_header,
                              cygrid_samples)
    stored = Path(__file__).parents[1] / "peers" / "cygrid" / "cygrid" / "tests" / "data"
    if not (stored / "cygrid_test_maps.npy").exists():
        pytest.skip("cygrid's stored maps are GPL-3.0, not in this repository: "
                    "`python tests/peers/fetch_upstream.py cygrid` (tox -e peers-cygrid) "
                    "puts them in place")
    x, y, (signal, _, _), targets = cygrid_samples(with_targets=True)
    header = cygrid_header()
    yy, xx = np.indices((header["NAXIS2"], header["NAXIS1"]), dtype=np.float64)
    lon, lat = WCS(header).wcs_pix2world(xx, yy, 0)
    for cells, sigma, expected, n_off in (
            ((lon, lat), KERNEL_SIGMA, np.load(stored / "cygrid_test_maps.npy")[0, 0], 2),
            (targets, 0.5 / KERNEL_SIGMA**2, np.load(stored / "cygrid_test_sightlines.npy")[0, 0],
             1)):
        results = {compat: gather_reference(*cells, x, y, signal, kernel_params=(sigma,),
                                             sphere_radius=SUPPORT, compat=compat,
                                             hpx_max_resolution=RES)[0]
                   for compat in ("exact", "cygrid")}
        np.testing.assert_allclose(results["cygrid"], expected, atol=1e-8)
        assert np.count_nonzero(np.abs(results["exact"] - expected) > 1e-6) == n_off


# --- datacube= / weightcube= ----------------------------------------------------------------
def _samples(seed=3, n=3000):
    rng = np.random.default_rng(seed)
    lons, lats = _cap(rng, (80.0, 20.0), 0.5, n)
    return lons, lats, (1.0 + 0.3 * rng.standard_normal((n, 2))).astype(np.float32)


def _gridder(cl_env, **kwargs):
    gridder = WcsGrid(_header(80.0, 20.0, 12, 10, 0.06), context=cl_env.queue, **kwargs)
    gridder.set_kernel("gauss1d", (SIGMA,), RADIUS, SIGMA / 2)
    return gridder


def test_datacube_and_weightcube_hold_the_sums(cl_env):
    lons, lats, data = _samples()
    plain = _gridder(cl_env)
    plain.grid(lons, lats, data)
    datacube = np.full((2, 10, 12), 0.25, np.float32)
    weightcube = np.full((2, 10, 12), 2.0, np.float32)
    gridder = _gridder(cl_env, datacube=datacube, weightcube=weightcube)
    gridder.grid(lons, lats, data)
    # cygrid adds to what the cubes hold, and leaves the sums in that memory
    np.testing.assert_allclose(datacube, 0.25 + plain.get_unweighted_datacube(), rtol=1e-6)
    np.testing.assert_allclose(weightcube, 2.0 + plain.get_weights(), rtol=1e-6)
    assert np.shares_memory(gridder.get_unweighted_datacube(), datacube)
    assert np.shares_memory(gridder.get_weights(), weightcube)
    np.testing.assert_allclose(gridder.get_datacube(), datacube / weightcube, rtol=1e-6)
    # changed between calls: the next call adds to the changed values
    datacube[...] = 0
    weightcube[...] = 0
    gridder.grid(lons, lats, data)
    np.testing.assert_array_equal(datacube, plain.get_unweighted_datacube())
    np.testing.assert_array_equal(weightcube, plain.get_weights())
    gridder.clear_data_and_weights()
    assert not datacube.any() and not weightcube.any()


def test_a_datacube_alone_and_its_dtype(cl_env):
    lons, lats, data = _samples()
    datacube = np.zeros((10, 12))   # float64, while dtype says float32
    gridder = _gridder(cl_env, datacube=datacube)
    with pytest.warns(UserWarning, match="Will use datacube dtype"):
        gridder.grid(lons, lats, data[:, 0])
    reference = _gridder(cl_env, dtype=np.float64)
    reference.grid(lons, lats, data[:, 0])
    np.testing.assert_array_equal(datacube, reference.get_unweighted_datacube())
    assert gridder.get_weights().dtype == np.float64
    np.testing.assert_array_equal(gridder.get_datacube(), reference.get_datacube())


@pytest.mark.parametrize("cubes, error, match", [
    ({"datacube": [[0.0]]}, TypeError, "numpy array"),
    ({"datacube": np.zeros((12, 10), np.float32).T}, TypeError, "C-contiguous"),
    ({"datacube": np.zeros((1, 10, 12), np.float32)}, ShapeError, "shape"),
    ({"datacube": np.zeros((10, 12), np.int32)}, TypeError, "floating point"),
    ({"weightcube": np.zeros((10, 12), np.float64)}, TypeError, "dtype"),
    ({"weightcube": np.zeros((10, 13), np.float32)}, ShapeError, "shape"),
    ({"weightcube": np.zeros((12, 10), np.float32).T}, TypeError, "C-contiguous"),
])
def test_given_cubes_are_checked_as_cygrid_checks_them(cl_env, cubes, error, match):
    lons, lats, data = _samples()
    gridder = _gridder(cl_env, **cubes)   # checked at the first grid call, as cygrid
    with pytest.raises(error, match=match):
        gridder.grid(lons, lats, data[:, 0])


def test_non_native_byte_order_warns_as_cygrid(cl_env):
    lons, lats, data = _samples()
    gridder = _gridder(cl_env)
    with pytest.warns(UserWarning, match="byteorder not native"):
        gridder.grid(lons, lats, data.astype(">f4"))


# --- Healpix --------------------------------------------------------------------------------
def test_healpix_helper_has_cygrids_api():
    hp = pytest.importorskip("healpy")
    rng = np.random.default_rng(7)
    hpx = Healpix(1024)
    assert (hpx.nside, hpx.npix, hpx.nrings, hpx.order, hpx.npface) == \
        (1024, 12 * 1024**2, 4095, 10, 1024**2)
    assert hpx.resolution == pytest.approx(hp.nside2resol(1024), rel=1e-12)
    assert hpx.get_ring_info_small(1) == (0, 4, True)
    assert hpx.get_ring_info_small(1024) == (2 * 1024 * 1023, 4096, True)
    with pytest.raises(ValueError, match="Ring index not in valid range"):
        hpx.get_ring_info_small(4096)
    pix = rng.integers(0, hpx.npix, 5000)
    np.testing.assert_array_equal(hpx.pix2ring_many(pix), hp.pix2ring(1024, pix))
    np.testing.assert_allclose(hpx.pix2ang_many(pix), hp.pix2ang(1024, pix), rtol=1e-13)
    theta, phi = np.arccos(rng.uniform(-1, 1, 5000)), rng.uniform(0, 2 * np.pi, 5000)
    np.testing.assert_array_equal(hpx.ang2pix_many(theta, phi), hp.ang2pix(1024, theta, phi))
    # cygrid's disc is wider than healpy's: its pixels within the radius, and one more each side
    disc = hpx.query_disc(1.0, 2.0, np.radians(0.5))
    inner = hp.query_disc(1024, hp.ang2vec(1.0, 2.0), np.radians(0.5))
    assert set(inner) <= set(disc.tolist())
    with pytest.raises(NotImplementedError, match="only RING scheme is supported"):
        Healpix(16, scheme=1)

"""The same input gives the same bits, call after call (issue 19).

Each operation runs twice on identical inputs and the results must be
bitwise equal (``np.array_equal``), not merely close.  The gridding core
adds in a fixed order (stable device sort, output-owned tiles, chunks folded
in slot order, planes summed in order): no float atomics anywhere.
"""

from __future__ import annotations

import numpy as np
import pytest

import clgrid

# Enough visibilities on a small grid that many work-items add to the same
# cells at once: an unordered sum shows up in the last bits.
N_ROWS, N_CHAN, NPIX, PIXSIZE = 3000, 4, 64, 2e-3


def _observation(seed: int = 0):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-2000.0, 2000.0, (N_ROWS, 3))
    uvw[:, 2] *= 0.3
    freq = np.linspace(1.0e9, 1.2e9, N_CHAN)
    vis = (rng.normal(size=(N_ROWS, N_CHAN))
           + 1j * rng.normal(size=(N_ROWS, N_CHAN))).astype(np.complex64)
    return uvw, freq, vis


def _imaging_args(cl_env, do_w: bool) -> dict:
    uvw, freq, _ = _observation()
    return dict(uvw=uvw, freq=freq, pixsize_x=PIXSIZE, pixsize_y=PIXSIZE, epsilon=1e-4,
                do_wgridding=do_w, queue=cl_env.queue)


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_vis2dirty_repeats_bitwise(cl_env, do_w):
    _, _, vis = _observation()
    arguments = dict(vis=vis, npix_x=NPIX, npix_y=NPIX, **_imaging_args(cl_env, do_w))
    first = clgrid.vis2dirty(**arguments)
    second = clgrid.vis2dirty(**arguments)
    assert first.dtype == np.float32 and np.any(first != 0)
    assert np.array_equal(first, second)
    # a fresh plan (new device sort and work list) gives the same bits too
    geometry = {k: v for k, v in arguments.items() if k not in ("vis", "queue", "uvw", "freq")}
    geometry["precision"] = "single"
    fresh = clgrid.Imager(cl_env.queue, uvw=arguments["uvw"], freq=arguments["freq"],
                          **geometry).vis2dirty(vis)
    assert np.array_equal(first, fresh)


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_dirty2vis_repeats_bitwise(cl_env, do_w):
    image = np.random.default_rng(1).normal(size=(NPIX, NPIX)).astype(np.float32)
    arguments = dict(dirty=image, **_imaging_args(cl_env, do_w))
    first = clgrid.dirty2vis(**arguments)
    second = clgrid.dirty2vis(**arguments)
    assert first.dtype == np.complex64 and np.any(first != 0)
    assert np.array_equal(first, second)


def _wcs_header(naxis: int = 24, cdelt: float = 0.05) -> dict:
    return {"NAXIS": 2, "NAXIS1": naxis, "NAXIS2": naxis,
            "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN",
            "CRPIX1": naxis / 2 + 0.5, "CRPIX2": naxis / 2 + 0.5,
            "CRVAL1": 60.0, "CRVAL2": 30.0, "CDELT1": -cdelt, "CDELT2": cdelt,
            "CUNIT1": "deg", "CUNIT2": "deg"}


def _wcs_grid(cl_env, lons, lats, data) -> tuple[np.ndarray, np.ndarray]:
    gridder = clgrid.WcsGrid(_wcs_header(), context=cl_env.queue, progress=False)
    gridder.set_kernel("gauss1d", (0.05,), 0.15, 0.025)
    gridder.grid(lons, lats, data)
    return gridder.get_datacube(), gridder.get_weights()


def test_wcs_grid_repeats_bitwise(cl_env):
    pytest.importorskip("astropy")
    rng = np.random.default_rng(2)
    lats = 30.0 + rng.uniform(-0.6, 0.6, 20000)
    lons = 60.0 + rng.uniform(-0.6, 0.6, 20000) / np.cos(np.radians(lats))
    data = rng.normal(1.0, 0.3, (20000, 3)).astype(np.float32)
    first_cube, first_weights = _wcs_grid(cl_env, lons, lats, data)
    second_cube, second_weights = _wcs_grid(cl_env, lons, lats, data)
    assert np.isfinite(first_cube).sum() > 0.5 * first_cube.size
    assert np.array_equal(first_weights, second_weights)
    assert np.array_equal(first_cube, second_cube, equal_nan=True)


def test_reproject_interp_repeats_bitwise(cl_env):
    pytest.importorskip("astropy")
    from astropy.wcs import WCS

    wcs_in = WCS(_wcs_header(64, 0.01))
    header_out = {**_wcs_header(56, 0.012), "CRVAL1": 60.05, "CRVAL2": 29.97, "CROTA2": 17.0}
    wcs_out = WCS(header_out)
    image = np.random.default_rng(3).random((64, 64)).astype(np.float32)
    arguments = dict(input_data=(image, wcs_in), output_projection=wcs_out,
                     shape_out=(56, 56), order="bicubic", context=cl_env.queue)
    first, first_footprint = clgrid.reproject_interp(**arguments)
    second, second_footprint = clgrid.reproject_interp(**arguments)
    assert np.isfinite(first).sum() > 0.5 * first.size
    assert np.array_equal(first_footprint, second_footprint)
    assert np.array_equal(first, second, equal_nan=True)


# --- table Gridder, Degridder, StreamingGridder ------------------------------------------
# Many records into few cells: an atomic cursor (or float atomics) would
# reorder the additions between runs.

def _table_observation(seed: int = 4, nrow: int = 1500, w_max_m: float = 0.0):
    from test_gridder_reference import C, random_uvw, random_vis
    rng = np.random.default_rng(seed)
    freq = np.array([1.0e9, 1.05e9, 1.1e9])
    nx, cell = 96, 1.0 / (96 * 40.0)
    uv_max_m = 0.8 * (nx / 2 - 8) * 40.0 * C / freq.max()
    uvw = random_uvw(rng, nrow, uv_max_m, w_max_m)
    uvw[: nrow // 2, :2] *= 0.05          # half of them crowd a few central cells
    vis = random_vis(rng, (nrow, freq.size, 2)).astype(np.complex64)
    weights = rng.uniform(0.5, 2.0, vis.shape)
    return uvw, freq, vis, weights, nx, cell


def _repeat_bitwise(make, call):
    """Two calls of one object and one call of a fresh one give the same bits."""
    gridder = make()
    first, second = call(gridder), call(gridder)
    fresh = call(make())
    assert np.any(first != 0)
    assert np.array_equal(first, second) and np.array_equal(first, fresh)
    return gridder, first


TILED_GEOMETRIES = {  # the dispatcher's CPU tile, and a GPU-style one (rows per pass > 1)
    "dispatcher": None,
    "gpu-style": dict(tile_u=16, tile_v=16, rows_per_pass=4, batch=16),
    "footprint-over-4-tiles": dict(tile_u=8, tile_v=8, rows_per_pass=2, batch=7),
}


@pytest.fixture(params=["blocked", "sorted"])
def binning(request, monkeypatch, cl_env):
    """Run the deterministic Gridder with each binning on this device."""
    from clgrid.gridders import tiled
    monkeypatch.setitem(tiled.DETERMINISTIC_BINNING, cl_env.profile.device_type,
                        request.param)
    return request.param


@pytest.mark.parametrize("geometry", list(TILED_GEOMETRIES), ids=list(TILED_GEOMETRIES))
def test_gridder_deterministic_repeats_bitwise_and_matches_reference(cl_env, geometry,
                                                                     binning):
    from clgrid.gcf import separable_gcf
    from test_gridder_reference import grid_reference
    uvw, freq, vis, weights, nx, cell = _table_observation()
    gcf = separable_gcf(8, 8)

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True,
                              strategy="tiled", tiled_params=TILED_GEOMETRIES[geometry])

    gridder, grid = _repeat_bitwise(make, lambda g: g(uvw, freq, vis, weights))
    assert gridder.strategy == "tiled" and gridder.deterministic
    assert gridder._engine.binning == binning
    assert (gridder._engine.pair_stride > 1) == (binning == "sorted")
    reference = grid_reference(uvw, freq, vis, gcf, nx, nx, cell, weights)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))
    # the same grid as the non-deterministic paths, to float rounding
    for strategy in ("tiled", "scatter"):
        other = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, strategy=strategy,
                               deterministic=False)(uvw, freq, vis, weights)
        assert np.max(np.abs(grid - other)) < 1e-5 * np.max(np.abs(reference))


def test_gridder_deterministic_full_w_table(cl_env, binning):
    from clgrid.gcf import w_projection_gcf
    from test_gridder_reference import C, grid_reference
    uvw, freq, vis, _, nx, cell = _table_observation(seed=6, nrow=400, w_max_m=300.0)
    gcf = w_projection_gcf(8, 4, 5, 300.0 * freq.max() / C, nx * cell)

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True,
                              strategy="tiled")   # its binnings (the GPU default is core)

    _, grid = _repeat_bitwise(make, lambda g: g(uvw, freq, vis))
    reference = grid_reference(uvw, freq, vis, gcf, nx, nx, cell)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))


def test_gridder_deterministic_default_and_conflicts(cl_env):
    from clgrid.gcf import separable_gcf
    gcf = separable_gcf(6, 4)
    default = clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3)
    # the documented default: on for the tiled strategy and the core's tile
    # spread (what CPUs get), off elsewhere
    cpu_ways = default.strategy == "tiled" or default.choice.core_method == "tiles"
    assert default.deterministic == (cpu_ways and cl_env.profile.device_type == "cpu")
    assert not clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, strategy="scatter").deterministic
    for conflict in (dict(strategy="scatter"), dict(atomics="cas"), dict(count_flushes=True),
                     dict(params={"wg_size": 64})):
        with pytest.raises(ValueError, match="deterministic"):
            clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True, **conflict)
    with pytest.raises(TypeError, match="deterministic"):
        clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic="yes")


def test_dispatcher_picks_core_for_determinism_on_a_gpu_profile():
    from test_dispatch import fake
    from clgrid.gridders.dispatch import choose
    gpu = fake()
    assert choose(gpu, 8, 4).strategy == "scatter"            # native atomics: scatter
    choice = choose(gpu, 8, 4, deterministic=True)
    assert choice.strategy == "core" and "deterministic" in choice.reasons[-1]
    assert choose(gpu, 8, 4, deterministic=True,
                  tuned={"strategy": "scatter", "seconds": {}}).strategy == "core"
    # without fp64 too (float-float positions, compensated sums)
    assert choose(fake(fp64=False), 8, 4, deterministic=True).strategy == "core"
    with pytest.raises(ValueError, match="deterministic"):
        choose(gpu, 8, 4, strategy="image", deterministic=True)
    with pytest.raises(ValueError, match="deterministic"):
        choose(fake(local_mem_bytes=2048), 8, 4, deterministic=True)


@pytest.mark.parametrize("mode", ["queues", "mapped"])
def test_streaming_gridder_deterministic_repeats_bitwise(cl_env, mode, binning):
    from clgrid.gcf import separable_gcf
    uvw, freq, vis, weights, nx, cell = _table_observation(seed=8)
    gcf = separable_gcf(7, 8)

    def make():
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True,
                                 strategy="tiled")   # its binnings (the GPU default is core)
        return clgrid.StreamingGridder(gridder, chunk_records=700, mode=mode)

    streaming, grid = _repeat_bitwise(make, lambda s: s(uvw, freq, vis, weights))
    assert streaming.last_stats["n_chunks"] > 2
    whole = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2,
                           deterministic=True)(uvw, freq, vis, weights)
    assert np.max(np.abs(grid - whole)) < 1e-5 * np.max(np.abs(whole))


def test_degridder_repeats_bitwise(cl_env):
    from clgrid.gcf import separable_gcf
    from test_gridder_reference import degrid_reference
    uvw, freq, _, weights, nx, cell = _table_observation(seed=9, nrow=600)
    gcf = separable_gcf(8, 8)
    rng = np.random.default_rng(10)
    grid = (rng.normal(size=(2, nx, nx)) + 1j * rng.normal(size=(2, nx, nx))).astype(np.complex64)

    def make():
        return clgrid.Degridder(cl_env.queue, gcf, nx, nx, cell, npol=2)

    _, vis = _repeat_bitwise(make, lambda d: d(grid, uvw, freq, weights))
    reference = degrid_reference(grid.astype(np.complex128), uvw, freq, gcf, nx, nx, cell,
                                 weights)
    assert np.max(np.abs(vis - reference)) < 1e-5 * np.max(np.abs(reference))


# --- weighting and the imaging chain -------------------------------------------------------

@pytest.mark.parametrize("method", ["fixed", "sorted"])
@pytest.mark.parametrize("scheme", ["uniform", "briggs"])
def test_weighting_repeats_bitwise_and_matches_reference(cl_env, method, scheme):
    from clgrid.imaging.weighting import ImageWeighting
    from test_weighting import weights_reference
    uvw, freq, _ = _observation()
    uvw = uvw * 0.1          # crowd the samples: thousands per cell at the centre
    weight = np.random.default_rng(11).uniform(0.1, 3.0, (N_ROWS, N_CHAN)).astype(np.float32)
    weight[::7] = 0
    arguments = dict(npix_x=NPIX, npix_y=NPIX, pixsize_x=PIXSIZE, pixsize_y=PIXSIZE,
                     scheme=scheme, robust=0.5, method=method)

    def make():
        return ImageWeighting(cl_env.queue, **arguments)

    operation, result = _repeat_bitwise(make, lambda op: op(uvw, freq, weight))
    assert operation.deterministic and operation.histogram_method == method
    reference, n_outside = weights_reference(uvw, freq, weight, NPIX, NPIX, PIXSIZE, PIXSIZE,
                                             scheme, 0.5)
    assert operation.n_outside == n_outside
    assert np.max(np.abs(result - reference)) < 2e-6 * np.max(reference)
    atomic = ImageWeighting(cl_env.queue, deterministic=False,
                            **{**arguments, "method": None})
    assert atomic.histogram_method == "atomic"
    assert np.max(np.abs(atomic(uvw, freq, weight) - result)) < 2e-6 * np.max(reference)


def test_weighting_streamed_chunks_repeat_bitwise(cl_env):
    from clgrid.imaging.weighting import ImageWeighting
    uvw, freq, _ = _observation()
    weight = np.ones((N_ROWS, N_CHAN), np.float32)

    def streamed():
        operation = ImageWeighting(cl_env.queue, npix_x=NPIX, npix_y=NPIX, pixsize_x=PIXSIZE,
                                   pixsize_y=PIXSIZE, scheme="uniform")
        for part in np.array_split(np.arange(N_ROWS), 3):
            operation.add(uvw[part], freq, weight[part])
        return operation.histogram.get(), operation.apply(uvw, freq, weight)

    first, second = streamed(), streamed()
    assert np.array_equal(first[0], second[0]) and np.array_equal(first[1], second[1])
    with pytest.raises(ValueError, match="deterministic=False"):
        ImageWeighting(cl_env.queue, npix_x=8, npix_y=8, pixsize_x=1e-3, pixsize_y=1e-3,
                       scheme="uniform", method="atomic")


def test_vis2dirty_with_briggs_weights_repeats_bitwise(cl_env):
    uvw, freq, vis = _observation()

    def image(deterministic):
        weighting = clgrid.ImageWeighting(cl_env.queue, npix_x=NPIX, npix_y=NPIX,
                                          pixsize_x=PIXSIZE, pixsize_y=PIXSIZE,
                                          scheme="briggs", robust=0.0)
        weights = weighting(uvw, freq, np.ones(vis.shape, np.float32))
        return clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=weights, npix_x=NPIX,
                                npix_y=NPIX, pixsize_x=PIXSIZE, pixsize_y=PIXSIZE,
                                epsilon=1e-4, do_wgridding=True, queue=cl_env.queue,
                                deterministic=deterministic)

    first = image(True)
    assert np.any(first != 0)
    assert np.array_equal(first, image(True)) and np.array_equal(first, image(False))
    with pytest.raises(TypeError, match="deterministic"):
        image("always")
    imager = clgrid.Imager(cl_env.queue, uvw=uvw, freq=freq, npix_x=NPIX, npix_y=NPIX,
                           pixsize_x=PIXSIZE, pixsize_y=PIXSIZE, epsilon=1e-4,
                           do_wgridding=True, deterministic=True)
    assert imager.deterministic


def test_singledish_and_reproject_accept_deterministic(cl_env):
    pytest.importorskip("astropy")
    grid = clgrid.WcsGrid(_wcs_header(), context=cl_env.queue, progress=False,
                          deterministic=True)
    assert grid.deterministic
    with pytest.raises(TypeError, match="deterministic"):
        clgrid.WcsGrid(_wcs_header(), context=cl_env.queue, deterministic=None)
    from astropy.wcs import WCS
    image = np.ones((16, 16), np.float32)
    with pytest.raises(TypeError, match="deterministic"):
        clgrid.reproject_interp((image, WCS(_wcs_header(16, 0.01))), WCS(_wcs_header(16, 0.01)),
                                shape_out=(16, 16), context=cl_env.queue, deterministic=1.5)


# --- Oclgrind: the new kernels, race- and bounds-checked -----------------------------------

_OCLGRIND_SCRIPT = """
import numpy as np, pyopencl as cl, clgrid
from clgrid.gcf import separable_gcf
from clgrid.imaging.weighting import ImageWeighting
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(0)
uvw = rng.uniform(-300, 300, (12, 3))
vis = (rng.standard_normal((12, 1, 1)) + 1j).astype(np.complex64)
from clgrid.gridders import tiled
grids = []
for binning in ("blocked", "sorted"):
    profile = clgrid.DeviceProfile.from_device(queue.device)
    tiled.DETERMINISTIC_BINNING[profile.device_type] = binning
    gridder = clgrid.Gridder(queue, separable_gcf(5, 2), 16, 16, 1.0 / (16 * 20.0),
                             deterministic=True, strategy="tiled",
                             tiled_params=dict(tile_u=8, tile_v=8, rows_per_pass=2, batch=4))
    assert gridder._engine.binning == binning
    grids.append(gridder(uvw, [1e8], vis))
    assert np.array_equal(grids[-1], gridder(uvw, [1e8], vis))
assert np.abs(grids[0]).max() > 0 and np.allclose(grids[0], grids[1], rtol=1e-5, atol=1e-5)
w = np.ones((12, 2), np.float32); w[3, 1] = 0
uvw_w = rng.uniform(-2, 2, (12, 3)); uvw_w[0] *= 50
for method in ("fixed", "sorted"):
    weighting = ImageWeighting(queue, npix_x=8, npix_y=8, pixsize_x=0.05, pixsize_y=0.05,
                               scheme="briggs", method=method)
    result = weighting(uvw_w, np.array([1e9, 1.2e9]), w)
    assert np.all(np.isfinite(result)) and result[3, 1] == 0 and weighting.n_outside == 2
print("done")
"""


@pytest.mark.tiny
def test_oclgrind_deterministic_kernels_clean(request):
    from oclgrind_check import run_clean
    result = run_clean(request.config, _OCLGRIND_SCRIPT, timeout=600)
    assert "done" in result.stdout


def test_blocked_and_sorted_binnings_give_the_same_bits(cl_env, monkeypatch):
    """Both binnings hand every tile its records in record order, so the
    additions happen in the same sequence: identical grids, also with a
    [tile][block] table capped to few blocks."""
    from clgrid.gcf import separable_gcf
    from clgrid.gridders import tiled
    uvw, freq, vis, weights, nx, cell = _table_observation(seed=12)
    grids = {}
    for binning, table_cap in (("sorted", None), ("blocked", None), ("blocked", 64)):
        monkeypatch.setitem(tiled.DETERMINISTIC_BINNING, cl_env.profile.device_type, binning)
        if table_cap:
            monkeypatch.setattr(tiled, "MAX_BLOCK_TABLE", table_cap)
        gridder = clgrid.Gridder(cl_env.queue, separable_gcf(8, 8), nx, nx, cell, npol=2,
                                 deterministic=True, strategy="tiled",
                                 tiled_params=TILED_GEOMETRIES["gpu-style"])
        assert gridder._engine.binning == binning
        grids[binning, table_cap] = gridder(uvw, freq, vis, weights)
    first = grids["sorted", None]
    assert np.any(first != 0)
    assert all(np.array_equal(first, grid) for grid in grids.values())

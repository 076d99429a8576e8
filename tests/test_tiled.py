"""Tiled atomic-free strategy against the float64 reference (Romein's
Algorithm 1 in tests/test_gridder_reference.py) and against the scatter
strategy; tile geometry forced small so that footprints span many tiles."""


import numpy as np
import pytest

from clgrid.gcf import separable_gcf, user_gcf, w_projection_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders.tiled import TiledParams

from oclgrind_check import run_clean
from test_gridder_reference import C, grid_reference, random_uvw, random_vis

FREQ_HZ = np.array([1.0e9, 1.05e9, 1.1e9])


def _uvw(rng, n, support, nrow=200, w_max_m=0.0):
    cell = 1.0 / (n * 50.0)
    uv_max_m = 0.8 * (n / 2 - support) * 50.0 * C / FREQ_HZ.max()
    return random_uvw(rng, nrow, uv_max_m, w_max_m), cell


def _rel(result, reference):
    return np.max(np.abs(result - reference)) / np.max(np.abs(reference))


CASES = [  # support, oversample, npol, precision, nx, ny, tiled params
    (7, 8, 1, np.float32, 96, 80, TiledParams(16, 16, 1, 64)),
    (8, 8, 4, np.float32, 100, 64, TiledParams(8, 16, 2, 16)),     # tiles not dividing nx
    (3, 4, 2, np.float64, 64, 64, TiledParams(16, 8, 4, 7)),
    (21, 4, 4, np.float32, 96, 96, TiledParams(8, 8, 8, 32)),      # support > 2 tiles
    (1, 1, 1, np.float32, 32, 48, TiledParams(16, 16, 16, 5)),
]


@pytest.mark.parametrize("support, oversample, npol, precision, nx, ny, params", CASES)
def test_tiled_matches_reference(cl_env, support, oversample, npol, precision, nx, ny, params):
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(support * 10 + npol)
    uvw, cell = _uvw(rng, min(nx, ny), support)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape[:2] + (1,)) < 0.1
    gcf = separable_gcf(support, oversample)
    gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=npol, precision=precision,
                      strategy="tiled", tiled_params=params)
    assert gridder.strategy == "tiled" and gridder.atomic_path == "none"
    result = gridder(uvw, FREQ_HZ, vis.astype(gridder.complex_dtype), weights, flags)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights, flags)
    assert gridder.last_stats["n_kept"] > 0.3 * vis.shape[0] * vis.shape[1]
    counts = gridder._engine.last_tile_counts
    assert counts.sum() >= gridder.last_stats["n_records"]   # duplicates across tiles
    assert _rel(result, reference) < (1e-5 if precision == np.float32 else 1e-12)


@pytest.mark.parametrize("precision", [np.float32, np.float64])
def test_tiled_full_w_table_matches_reference(cl_env, precision):
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(5)
    nx = 72
    uvw, cell = _uvw(rng, nx, 8, w_max_m=300.0)
    gcf = w_projection_gcf(8, 4, 5, 300.0 * FREQ_HZ.max() / C, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    gridder = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, precision=precision,
                      strategy="tiled", tiled_params=TiledParams(16, 16, 4, 32))
    result = gridder(uvw, FREQ_HZ, vis)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, nx, cell)
    assert _rel(result, reference) < (1e-5 if precision == np.float32 else 1e-12)


def test_random_user_table_tiled(cl_env):
    """Different random u and v tables over W planes catch index mix-ups."""
    rng = np.random.default_rng(12)
    support, oversample, planes, nx, ny = 5, 3, 3, 58, 46
    uvw, cell = _uvw(rng, 46, support, w_max_m=200.0)
    w_step = 200.0 * FREQ_HZ.max() / C / (planes - 1)
    tables = [random_vis(rng, (planes, oversample, support)) for _ in range(2)]
    gcf = user_gcf(support, oversample, table_u=tables[0], table_v=tables[1],
                   w_step_lambda=w_step)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 4))
    result = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=4, strategy="tiled",
                     tiled_params=TiledParams(16, 16, 2, 16))(uvw, FREQ_HZ, vis)
    assert _rel(result, grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)) < 1e-5


def test_strategies_agree_and_accumulate(cl_env):
    rng = np.random.default_rng(9)
    nx = 128
    uvw, cell = _uvw(rng, nx, 16, nrow=400)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 4), np.complex64)
    gcf = separable_gcf(16, 8)
    tiled = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=4, strategy="tiled")
    scatter = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=4, strategy="scatter")
    grid = tiled(uvw, FREQ_HZ, vis, return_device=True)
    tiled(uvw, FREQ_HZ, vis, out=grid, return_device=True)    # accumulates
    reference = scatter(uvw, FREQ_HZ, vis)
    assert _rel(grid.get(), 2 * reference) < 1e-5


def test_tiled_refuses_flush_counting(cl_env):
    with pytest.raises(ValueError, match="count_flushes"):
        Gridder(cl_env.queue, separable_gcf(4, 4), 32, 32, 1e-3, strategy="tiled",
                count_flushes=True)


_OCLGRIND_SCRIPT = """
import numpy as np, pyopencl as cl, clgrid
from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders.tiled import TiledParams
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(0)
uvw = rng.uniform(-300, 300, (10, 3))
vis = (rng.standard_normal((10, 1, 2)) + 1j).astype(np.complex64)
gcf = separable_gcf(5, 2)
gridder = Gridder(queue, gcf, 16, 16, 1.0 / (16 * 20.0), npol=2, strategy="tiled",
                  tiled_params=TiledParams(8, 8, 2, 4))
grid = gridder(uvw, [1e8], vis)
assert gridder.last_stats["n_kept"] > 0 and np.abs(grid).max() > 0
print("done")
"""


@pytest.mark.tiny
def test_oclgrind_tiled_no_race_or_out_of_bounds(request):
    result = run_clean(request.config, _OCLGRIND_SCRIPT)
    assert "done" in result.stdout

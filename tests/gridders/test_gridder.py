"""Gridder against a plain float64 numpy implementation of Romein's Algorithm 1
(the register spread with Merry's coarsening variants, and the default spread)."""

import numpy as np
import pytest

from clgrid.gcf import separable_gcf, w_projection_gcf
from clgrid.core.register import RegisterParams
from clgrid.gridders.gridder import Gridder

from gridder_reference import (C, FREQ_HZ, grid_reference, random_user_tables_case, random_vis,
                              relative_error, setup_case)


CASES = [  # support, oversample, npol, precision, nx, ny, tracks, params
    (7, 8, 1, np.float32, 96, 80, False, RegisterParams(1, 1, 64, 64, 64)),
    (8, 8, 4, np.float32, 100, 64, True, RegisterParams(2, 2, 32, 16, 128)),
    (3, 4, 2, np.float64, 64, 64, False, RegisterParams(1, 2, 16, 64, 32)),
    (16, 4, 4, np.float64, 96, 96, True, RegisterParams(4, 2, 64, 8, 256)),
    (1, 1, 1, np.float32, 32, 48, False, RegisterParams(1, 1, 8, 64, 16)),
    (5, 2, 2, np.float32, 50, 62, True, RegisterParams(8, 2, 128, 64, 1024)),
    # polarisations split over work-items (pol_block)
    (8, 8, 4, np.float32, 100, 64, True, RegisterParams(4, 4, 64, 16, 128, 2)),
    (6, 4, 4, np.float64, 64, 80, False, RegisterParams(2, 1, 32, 64, 64, 1)),
    (5, 2, 2, np.float32, 50, 62, True, RegisterParams(8, 2, 16, 64, 1024, 1)),
]


@pytest.mark.parametrize("support, oversample, npol, precision, nx, ny, tracks, params", CASES)
def test_separable_matches_reference(cl_env, support, oversample, npol, precision, nx, ny,
                                     tracks, params):
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(support * 100 + npol)
    uvw, cell = setup_case(rng, nx, ny, 240, support, tracks=tracks)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape[:2] + (1,)) < 0.1
    gcf = separable_gcf(support, oversample)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights, flags)
    tolerance = 1e-5 if precision == np.float32 else 1e-12
    for kwargs in (dict(method="register", register_params=params), {}):
        gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=npol, precision=precision,
                          **kwargs)
        result = gridder(uvw, FREQ_HZ, vis.astype(gridder.complex_dtype), weights, flags)
        assert result.shape == (npol, ny, nx)
        assert gridder.last_stats["n_kept"] > 0.8 * vis.shape[0] * vis.shape[1] * 0.9 * 0.5
        assert relative_error(result, reference) < tolerance, gridder.method


@pytest.mark.parametrize("npol, precision", [(1, np.float32), (4, np.float32), (2, np.float64)])
def test_w_projection_matches_reference(cl_env, npol, precision):
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(7)
    nx = ny = 72
    uvw, cell = setup_case(rng, nx, ny, 200, 8, w_max_m=300.0)
    w_max_lambda = 300.0 * FREQ_HZ.max() / C
    gcf = w_projection_gcf(8, 4, 5, w_max_lambda, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=npol, precision=precision,
                      method="register", register_params=RegisterParams(2, 1, 32, 64, 64))
    result = gridder(uvw, FREQ_HZ, vis)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    tolerance = 1e-5 if precision == np.float32 else 1e-12
    assert relative_error(result, reference) < tolerance


def test_coarsening_variants_agree(cl_env):
    rng = np.random.default_rng(3)
    nx = ny = 64
    uvw, cell = setup_case(rng, nx, ny, 300, 6, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2), np.complex64)
    gcf = separable_gcf(6, 8)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    for params in (RegisterParams(1, 1, 64, 64, 1024), RegisterParams(2, 4, 16, 64, 100),
                   RegisterParams(8, 1, 8, 64, 512), RegisterParams(4, 4, 128, 64, 37)):
        result = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2, method="register",
                         register_params=params)(
            uvw, FREQ_HZ, vis)
        assert relative_error(result, reference) < 1e-5, params


def test_cas_and_native_atomics_agree(cl_env):
    paths = cl_env.profile.supported_atomic_paths(32)
    if len(paths) < 2:
        pytest.skip(f"{cl_env.key} has only {paths}")
    rng = np.random.default_rng(4)
    uvw, cell = setup_case(rng, 64, 64, 200, 8, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1), np.complex64)
    gcf = separable_gcf(8, 8)
    grids = [Gridder(cl_env.queue, gcf, 64, 64, cell, method="register", atomics=path)(
        uvw, FREQ_HZ, vis)
             for path in paths]
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, 64, 64, cell)
    for grid in grids:
        assert relative_error(grid, reference) < 1e-5
    assert relative_error(grids[0], grids[1]) < 1e-5


def test_device_output_and_accumulation(cl_env):
    rng = np.random.default_rng(5)
    uvw, cell = setup_case(rng, 48, 48, 100, 4)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1), np.complex64)
    gridder = Gridder(cl_env.context, separable_gcf(4, 4), 48, 48, cell)
    grid = gridder(uvw, FREQ_HZ, vis, return_device=True)
    gridder(uvw, FREQ_HZ, vis, out=grid, return_device=True)
    reference = grid_reference(uvw, FREQ_HZ, vis, gridder.gcf, 48, 48, cell)
    assert relative_error(grid.get(), 2 * reference) < 1e-5


@pytest.mark.parametrize("separable", [True, False])
def test_random_user_tables(cl_env, separable):
    """Random complex tables, different on u and v, catch any index mix-up."""
    rng, uvw, cell, gcf, nx, ny = random_user_tables_case(separable)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 4))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    for method in ("register", "tiles"):
        result = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=4, method=method)(
            uvw, FREQ_HZ, vis.astype(np.complex64))
        assert relative_error(result, reference) < 1e-5, method


@pytest.mark.parametrize("params, spanned", [(RegisterParams(2, 2, 16, 8, 64, 2), 6),
                                             (RegisterParams(4, 1, 32, 16, 64, 1), 17),
                                             (RegisterParams(1, 4, 8, 64, 64), 2)],
                         ids=["2x2-pol2-two-groups", "4x1-pol1", "1x4-all-pols"])
@pytest.mark.parametrize("complex_tables", [True, False], ids=["complex", "real"])
def test_row_products_staged_for_the_group(cl_env, monkeypatch, params, spanned,
                                           complex_tables):
    """Separable buffer tables: each work-group works out its records' row
    products G_v V once in local memory (``staged_rows``: the keys its
    work-items span, block rows in polarisation groups, keys past the box
    skipped) instead of every work-item; the grid against the float64
    reference, and within float32 rounding of the spread that does not
    stage them.  Real tables stage them by default only where a group spans
    at most REAL_STAGED_ROWS keys (forced here for every span)."""
    from clgrid.core.register import RegisterSpreader
    default = Gridder(cl_env.queue, separable_gcf(5, 3), 58, 46, 1e-3, npol=4,
                      method="register", register_params=params).engine.spreader
    assert default.staged_rows == (spanned if spanned <= RegisterSpreader.REAL_STAGED_ROWS
                                   else 0)
    monkeypatch.setattr(RegisterSpreader, "REAL_STAGED_ROWS", 64)
    if complex_tables:
        rng, uvw, cell, gcf, nx, ny = random_user_tables_case(True)
    else:
        rng = np.random.default_rng(5)
        nx, ny = 58, 46
        uvw, cell = setup_case(rng, nx, ny, 150, 5)
        gcf = separable_gcf(5, 3)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 4))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    grids = {}
    for stage in (True, False):
        monkeypatch.setattr(RegisterSpreader, "stage_rows", stage)
        gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=4, method="register",
                          register_params=params)
        grids[stage] = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
        assert gridder.engine.spreader.staged_rows == (spanned if stage else 0)
        assert relative_error(grids[stage], reference) < 1e-5
    assert relative_error(grids[True], grids[False]) < 1e-6
    if cl_env.profile.fp64:   # double grids stage double row products
        monkeypatch.setattr(RegisterSpreader, "stage_rows", True)
        double = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=4, method="register",
                         register_params=params, precision=np.float64)
        assert double.engine.spreader.staged_rows == spanned
        assert relative_error(double(uvw, FREQ_HZ, vis), reference) < 1e-12
    # deterministic=True: the fixed-point flushes over the staged rows, the same bits twice
    from clgrid.core.register import fixed_point_possible
    possible, why = fixed_point_possible(cl_env.profile, np.float32)
    if not possible:
        pytest.skip(f"fixed-point flushes: {why}")
    monkeypatch.setattr(RegisterSpreader, "stage_rows", True)
    fixed = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=4, method="register",
                    deterministic=True, register_params=params)
    assert fixed.engine.spreader.staged_rows == spanned and fixed.engine.spreader.fixed_point
    first = fixed(uvw, FREQ_HZ, vis.astype(np.complex64))
    assert relative_error(first, reference) < 1e-5
    assert np.array_equal(first, fixed(uvw, FREQ_HZ, vis.astype(np.complex64)))


_OCLGRIND_SCRIPT = """
import numpy as np, pyopencl as cl, clgrid
from clgrid.gcf import separable_gcf
from clgrid.gridders.degridder import Degridder
from clgrid.core.register import RegisterParams
from clgrid.gridders.gridder import Gridder
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(0)
uvw = rng.uniform(-300, 300, (12, 3))
vis = (rng.standard_normal((12, 1, 2)) + 1j).astype(np.complex64)
gcf = separable_gcf(3, 2)
cell = 1.0 / (16 * 20.0)
gridder = Gridder(queue, gcf, 16, 16, cell, npol=2, method="register",
                  register_params=RegisterParams(2, 1, 8, 4, 8), atomics="cas",
                  count_flushes=True)
grid = gridder(uvw, [1e8], vis)
assert gridder.engine.spreader.staged_rows > 0   # the group's staged row products
assert gridder.last_stats["n_kept"] == 12, gridder.last_stats
assert gridder.last_stats["flushes"] > 0, gridder.last_stats
degridded = Degridder(queue, gcf, 16, 16, cell, npol=2)(grid, uvw, [1e8])
assert np.abs(grid).max() > 0 and np.abs(degridded).max() > 0
split = Gridder(queue, gcf, 16, 16, cell, npol=2, method="register",
                register_params=RegisterParams(2, 1, 8, 4, 8, 1), atomics="cas")
assert np.allclose(split(uvw, [1e8], vis), grid, atol=1e-5)
by_blocks = Degridder(queue, gcf, 16, 16, cell, npol=2,
                      register_params=RegisterParams(2, 1, 8, 4, 8, 1))(grid, uvw, [1e8])
assert np.allclose(by_blocks, degridded, atol=1e-5)
# fixed-point flushes (deterministic=True): the bound, the integer atomics, the conversion
fixed = Gridder(queue, gcf, 16, 16, cell, npol=2, method="register", deterministic=True,
                register_params=RegisterParams(2, 1, 8, 4, 8))
first = fixed(uvw, [1e8], vis)
assert np.allclose(first, grid, atol=1e-5) and np.array_equal(first, fixed(uvw, [1e8], vis))
print("done")
"""


@pytest.mark.tiny
def test_oclgrind_no_race_or_out_of_bounds(request):
    from oclgrind_check import run_clean
    result = run_clean(request.config, _OCLGRIND_SCRIPT)
    assert "done" in result.stdout

"""Gridder and Degridder on the gridding core (device set points; output-owned
tiles with table weights, and register accumulation), against the plain
float64 implementation of Romein's Algorithm 1 in gridder_reference.py."""

import warnings

import numpy as np
import pytest

import clgrid
from clgrid.core.plan import TileShape
from clgrid.core.register import MAX_REGISTER_SUMS, RegisterParams
from clgrid.gcf import separable_gcf, w_projection_gcf
from clgrid.gridders.gridder import Gridder

from conftest import double_free
from gridder_reference import (C, FREQ_HZ, footprints, grid_reference, random_user_tables_case,
                              random_vis, relative_error, setup_case)

#: Tile shapes forced on every device: the device's own, and the GPU kernel's
#: shapes with chunks small enough that dense tiles split and fold.
TILES = {
    "device": None,
    "gpu-8x8-groups": TileShape(8, 8, 48, groups=4),
    "gpu-16x32": TileShape(16, 32, 96),
    # fewer points staged at a time than work-items (a wide table's staging)
    "gpu-batch-5": TileShape(8, 8, 48, groups=2, batch=5),
}
#: Every table also runs the CPUs' vector tile (spread_vector), forced here on
#: every device whose compiler builds it.
SEPARABLE_TILES = {**TILES, "vector-8x8": TileShape(8, 8, vector=True),
                   # dense tiles split into chunks of 48 points, folded
                   "vector-8x8-chunks": TileShape(8, 8, 48, vector=True)}
FULL_TILES = {**TILES, "vector-16x16": TileShape(16, 16, vector=True),
              "vector-16x16-chunks": TileShape(16, 16, 48, vector=True)}
#: (nx, ny): sides that are whole tiles, and sides that are not (padded planes)
SIZES = [(64, 64), (58, 46)]


def _tolerance(precision) -> float:
    return 1e-5 if precision == np.float32 else 1e-12


def _skip_without_fp64(cl_env):
    if not cl_env.profile.fp64:
        pytest.skip("this test's tiles need fp64 (test_core_without_fp64 covers float-float)")


def _core(cl_env, gcf, nx, ny, cell, tiles=None, **kwargs) -> Gridder:
    _skip_without_fp64(cl_env)
    kwargs.setdefault("method", "tiles")
    gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, tiles=tiles, **kwargs)
    assert gridder.deterministic
    return gridder


@pytest.mark.parametrize("tiles", list(SEPARABLE_TILES), ids=list(SEPARABLE_TILES))
@pytest.mark.parametrize("size", SIZES, ids=["whole-tiles", "padded"])
@pytest.mark.parametrize("npol, precision", [(1, np.float32), (4, np.float32),
                                             (4, np.float64)])
@pytest.mark.sweep
def test_separable_matches_reference(cl_env, tiles, size, npol, precision):
    if SEPARABLE_TILES[tiles] and SEPARABLE_TILES[tiles].vector:
        cl_env.require_vector_tiles()
    nx, ny = size
    rng = np.random.default_rng(npol * 7 + nx)
    uvw, cell = setup_case(rng, nx, ny, 300, 8, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1          # per polarisation
    flags[::7] = True                            # and whole (row, channel)s
    gcf = separable_gcf(8, 8)
    gridder = _core(cl_env, gcf, nx, ny, cell, SEPARABLE_TILES[tiles], npol=npol,
                    precision=precision)
    plan = gridder.plan(uvw, FREQ_HZ, flags)
    result = gridder.grid_plan(plan, vis.astype(gridder.complex_dtype), weights)
    if tiles.endswith("chunks"):   # dense tiles were split and folded
        assert gridder.engine.spreader.work(plan.points.points, 0, 1).chunk_folds is not None
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights, flags)
    assert result.shape == (npol, ny, nx) and result.dtype == gridder.complex_dtype
    assert relative_error(result, reference) < _tolerance(precision)
    all_flagged = int(flags.all(axis=2).sum())
    assert gridder.last_stats["n_flagged"] == all_flagged
    kept = sum(1 for row, chan, *_ in footprints(uvw, FREQ_HZ, gcf, nx, ny, cell)
               if not flags[row, chan].all())
    assert gridder.last_stats["n_kept"] == kept > 0


@pytest.mark.parametrize("tiles", list(FULL_TILES), ids=list(FULL_TILES))
@pytest.mark.parametrize("npol, precision", [(1, np.float32), (4, np.float32),
                                             (1, np.float64)])
@pytest.mark.sweep
def test_w_projection_matches_reference(cl_env, tiles, npol, precision):
    if FULL_TILES[tiles] and FULL_TILES[tiles].vector:
        cl_env.require_vector_tiles()
    rng = np.random.default_rng(17 + npol)
    nx, ny = 72, 66
    uvw, cell = setup_case(rng, nx, ny, 250, 8, w_max_m=300.0)
    gcf = w_projection_gcf(8, 4, 5, 300.0 * FREQ_HZ.max() / C, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape[:2] + (1,))
    gridder = _core(cl_env, gcf, nx, ny, cell, FULL_TILES[tiles], npol=npol,
                    precision=precision)
    result = gridder(uvw, FREQ_HZ, vis.astype(gridder.complex_dtype), weights)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights)
    assert relative_error(result, reference) < _tolerance(precision)


@pytest.mark.parametrize("separable", [True, False], ids=["separable", "full"])
def test_random_complex_user_tables(cl_env, separable):
    """Random complex tables, different on u and v (and in every slice of a
    full table), catch any index mix-up of the table reads."""
    rng, uvw, cell, gcf, nx, ny = random_user_tables_case(separable)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    shapes = list(TILES.values())
    if cl_env.profile.vector_kernels:   # complex separable tables as full slices
        shapes += [TileShape(8, 8, vector=True), TileShape(16, 16, vector=True)]
    for tiles in shapes:
        gridder = _core(cl_env, gcf, nx, ny, cell, tiles, npol=2)
        result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
        assert relative_error(result, reference) < 1e-5, tiles
    # the register spread, the polarisations in one work-item or split
    for params in (RegisterParams(4, 2, 32, 16, 64, 0), RegisterParams(4, 2, 32, 16, 64, 1),
                   RegisterParams(2, 4, 16, 64, 128, 1)):
        gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2, method="register",
                          register_params=params)
        result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
        assert relative_error(result, reference) < 1e-5, params


def _table(kind: str, support: int, oversample: int, fov_rad: float):
    """A GCF of ``kind``: 'separable' (the ES rows), 'complex-separable'
    (those rows times phase ramps, different on u and v) or 'full'
    (W-projection, w up to 300 m)."""
    if kind == "full":
        return w_projection_gcf(support, oversample, 5, 300.0 * FREQ_HZ.max() / C, fov_rad)
    gcf = separable_gcf(support, oversample)
    if kind == "complex-separable":
        ramp = np.exp(0.4j * np.arange(support))
        gcf = clgrid.gcf.user_gcf(support, oversample, table_u=gcf.table_u * ramp,
                                  table_v=gcf.table_v * ramp.conj())
    return gcf


def test_float_float_positions_match_double(cl_env):
    """Set points in float-float (devices without fp64) give the same cells,
    table indices and drops as in double, on a 65536-cell grid oversampled
    128 times (positions up to 2^23 steps: float alone would miss 1 in 6)."""
    from clgrid.core.table import TableGrid, TablePositions
    from clgrid.core.setpoints import SetPoints, float_float, freq_scale
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(81)
    nx = ny = 65536
    cell = 1.0 / (2 * 1.05 * 3.2e5 * 1.5e9 / C)        # the longest baseline near the edge
    grid = TableGrid(nx, ny, cell, 7, 128, 4, 250.0, True, True, True, np.dtype(np.float32))
    uvw = rng.uniform(-3.2e5, 3.2e5, (20000, 3))
    uvw[:, 2] = rng.uniform(-200, 200, 20000)
    uvw[:5] = [[np.nan, 0, 0], [np.inf, 1, 1], [1e300, 0, 0], [0, 0, 1e300], [3e6, 0, 0]]
    scale = freq_scale(np.array([1.0e9, 1.5e9]))
    cells = {}
    for ff in (False, True):
        set_points = SetPoints(cl_env.queue, TablePositions(grid, "cell"), TileShape(8, 8),
                               float_float=ff)
        points = set_points(*set_points.upload(uvw, scale))
        cells[ff] = (points.points.cells.get()[:points.n_kept],
                     (points.n_kept, points.n_offgrid, points.n_nonfinite))
    assert cells[True][1] == cells[False][1] and cells[False][1][2] == 4
    assert cells[False][1][0] > 30000
    assert np.array_equal(cells[True][0], cells[False][0])
    pairs = float_float([np.pi * 1e5, -1e300, np.inf])
    assert pairs.dtype == np.float32 and abs(pairs[0].astype(np.float64).sum()
                                             - np.pi * 1e5) < 1e-7
    assert pairs[1, 0] == -1e30 and np.isinf(pairs[2, 0]) and pairs[2, 1] == 0


@pytest.mark.parametrize("table", ["separable", "complex-separable", "full"])
def test_core_without_fp64(cl_env, without_fp64, table):
    """Devices without fp64: both spreads and the core Degridder with
    positions in float-float and compensated float sums, against the float64
    references (the tile spread on the GPU kernel's shapes, split tiles and
    groups included, the same bits twice); no kernel built uses double."""
    from gridder_reference import degrid_reference
    rng = np.random.default_rng(71)
    nx, ny, support = 72, 66, 8
    uvw, cell = setup_case(rng, nx, ny, 200, support, w_max_m=300.0)
    gcf = _table(table, support, 8, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2,
                      method="register")
    assert not gridder.profile.fp64
    result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64), weights, flags)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights, flags)
    assert gridder.last_stats["n_kept"] > 500
    assert relative_error(result, reference) < 1e-5
    grid = random_vis(rng, (2, ny, nx))
    for options in (dict(tiles=None), dict(tiles=TileShape(8, 8)),
                    dict(register_params=RegisterParams(2, 2, 32, 16, 64, 1))):
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2, **options)
        predicted = degridder(grid.astype(np.complex64), uvw, FREQ_HZ, weights)
        assert relative_error(predicted, degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny,
                                                           cell, weights)) < 1e-5, options
    # deterministic: the tiles (compensated float totals), and the dispatcher's
    # pick (on GPUs with int64 atomics the register spread's fixed-point flushes)
    for method in ("tiles", None):
        deterministic = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2,
                                deterministic=True, method=method)
        assert deterministic.deterministic
        if method == "tiles":
            assert not deterministic.choice.tiles.vector         # its totals are double
        once = deterministic(uvw, FREQ_HZ, vis.astype(np.complex64), weights, flags)
        assert relative_error(once, reference) < 1e-5
        assert np.array_equal(once, deterministic(uvw, FREQ_HZ, vis.astype(np.complex64),
                                                  weights, flags))
    for tiles in TILES.values():
        if tiles is not None:
            forced = Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2,
                             method="tiles", tiles=tiles)
            assert relative_error(forced(uvw, FREQ_HZ, vis.astype(np.complex64), weights,
                                          flags), reference) < 1e-5, tiles
    assert double_free(without_fp64)


@pytest.mark.parametrize("table", ["separable", "complex-separable", "full"])
def test_vector_tile_wide_tables(cl_env, table):
    """Tables wider than 8 on the CPU vector tile (32 x 32 and 64 x 64
    tiles, rows of full slices in pieces of 16 reals), on whole and padded
    grids, and degridded back by records with rows as vector pieces."""
    from clgrid.core.table import max_table_support
    from gridder_reference import degrid_reference
    cl_env.require_vector_tiles()
    rng = np.random.default_rng(61)
    cases = [(96, 64, 24), (70, 76, 19), (64, 70, 12)]
    if max_table_support(cl_env.profile) >= 40:   # CPUs: 64 x 64 tiles up to W 64
        cases.append((136, 128, 40))
    for nx, ny, support in cases:
        uvw, cell = setup_case(rng, nx, ny, 120, support, w_max_m=300.0)
        gcf = _table(table, support, 4, nx * cell)
        vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
        edge = 32 if support <= 32 else 64
        gridder = _core(cl_env, gcf, nx, ny, cell, TileShape(edge, edge, vector=True), npol=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)     # off-grid points
            result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
        reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
        assert gridder.last_stats["n_kept"] > 100
        assert relative_error(result, reference) < 1e-5, (table, support)
        # the adjoint: records degridded with rows as vector pieces on CPUs
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2)
        assert degridder.engine.interpolator.record_vector == (
            cl_env.profile.device_type == "cpu")
        grid = random_vis(rng, (2, ny, nx))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            predicted = degridder(grid.astype(np.complex64), uvw, FREQ_HZ)
        assert relative_error(predicted, degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny,
                                                           cell)) < 1e-5, (table, support)


@pytest.mark.parametrize("separable", [True, False], ids=["separable", "full"])
def test_degrid_random_complex_user_tables(cl_env, separable):
    """The core Degridder with random complex tables, different on u and v:
    every interpolation kernel (per point, per record, a work-group per
    record, rows as vectors) against the float64 reference."""
    from clgrid.core.spread import Interpolator
    from gridder_reference import degrid_reference
    _skip_without_fp64(cl_env)
    rng, uvw, cell, gcf, nx, ny = random_user_tables_case(separable)
    grid = random_vis(rng, (2, ny, nx))
    weights = rng.uniform(0.5, 2.0, (uvw.shape[0], FREQ_HZ.size, 1))
    reference = degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny, cell, weights)
    variants = [(0, False), (4, False)] + [(0, True)] * cl_env.profile.vector_kernels
    for tiles in (None, TileShape(8, 8)):
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2,
                                     tiles=tiles)
        result = degridder(grid.astype(np.complex64), uvw, FREQ_HZ, weights)
        assert relative_error(result, reference) < 1e-5, tiles
    for group, as_vectors in variants:
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2)
        core = degridder.engine
        core.primary.interpolator = Interpolator(
            cl_env.queue, core.interpolator.source, record_group=group,
            record_vector=as_vectors, records=core.interpolator.records)
        result = degridder(grid.astype(np.complex64), uvw, FREQ_HZ, weights)
        assert relative_error(result, reference) < 1e-5, (group, as_vectors)
    with pytest.raises(ValueError, match="give one of them"):
        clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2, tiles=TileShape(8, 8),
                         register_params=RegisterParams())
    # records by register blocks, all polarisations a work-item or one
    for params in (RegisterParams(4, 2, 16, 8, 50), RegisterParams(2, 4, 8, 5, 97, 1)):
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2,
                                     register_params=params)
        assert degridder.engine.interpolator.register is not None
        result = degridder(grid.astype(np.complex64), uvw, FREQ_HZ, weights)
        assert relative_error(result, reference) < 1e-5, params


def test_wide_separable_degridder_takes_register_blocks(cl_env):
    """Separable tables wider than every per-record kernel's rows (W 72):
    the default Degridder degrids by register blocks on GPUs and CPUs alike,
    against the float64 reference, the same bits twice."""
    from gridder_reference import degrid_reference
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(72)
    nx, ny, support = 176, 168, 72
    uvw, cell = setup_case(rng, nx, ny, 40, support)
    gcf = separable_gcf(support, 2)
    grid = random_vis(rng, (2, ny, nx))
    degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=2)
    assert degridder.engine.interpolator.register is not None
    vis = degridder(grid.astype(np.complex64), uvw, FREQ_HZ)
    assert degridder.last_stats["n_kept"] > 100
    assert relative_error(vis, degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny, cell)) < 1e-5
    assert np.array_equal(vis, degridder(grid.astype(np.complex64), uvw, FREQ_HZ))


@pytest.mark.parametrize("conjugate", [True, False])
def test_off_grid_drops_counted_and_conjugation(cl_env, conjugate):
    """Points beyond the grid edge and W beyond the last plane are dropped and
    counted as the reference counts them; without conjugation a negative w is off
    the grid (its W plane index is negative)."""
    rng = np.random.default_rng(5)
    nx = ny = 48
    uvw, cell = setup_case(rng, nx, ny, 300, 6, fill=1.3, w_max_m=400.0)
    w_max = 300.0 * FREQ_HZ.max() / C       # some points beyond the last plane
    gcf = w_projection_gcf(6, 4, 4, w_max, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1))
    gridder = _core(cl_env, gcf, nx, ny, cell, conjugate_negative_w=conjugate)
    with pytest.warns(UserWarning, match="off the grid"):
        result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, conjugate=conjugate)
    assert relative_error(result, reference) < 1e-5
    kept = len(list(footprints(uvw, FREQ_HZ, gcf, nx, ny, cell, conjugate)))
    stats = gridder.last_stats
    assert stats["n_kept"] == kept
    assert stats["n_offgrid"] == uvw.shape[0] * FREQ_HZ.size - kept > 0


@pytest.mark.parametrize("size", SIZES, ids=["whole-tiles", "padded"])
def test_repeats_bitwise_and_accumulates(cl_env, size):
    rng = np.random.default_rng(3)
    nx, ny = size
    uvw, cell = setup_case(rng, nx, ny, 2000, 8, tracks=True)   # many points per cell
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2), np.complex64)
    weights = rng.uniform(0.5, 2.0, vis.shape)
    gcf = separable_gcf(8, 8)
    for tiles in TILES.values():
        def make():
            return _core(cl_env, gcf, nx, ny, cell, tiles, npol=2)
        gridder = make()
        first = gridder(uvw, FREQ_HZ, vis, weights)
        second = gridder(uvw, FREQ_HZ, vis, weights)
        fresh = make()(uvw, FREQ_HZ, vis, weights)
        assert np.any(first != 0)
        assert np.array_equal(first, second) and np.array_equal(first, fresh), tiles
        # a reused plan, and accumulation into a device grid
        plan = gridder.plan(uvw, FREQ_HZ)
        grid = gridder.grid_plan(plan, vis, weights, return_device=True)
        assert np.array_equal(grid.get(), first)
        gridder.grid_plan(plan, vis, weights, out=grid, return_device=True)
        reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights)
        assert relative_error(grid.get(), 2 * reference) < 1e-5


def test_spreads_agree(cl_env):
    """The tile spread and the register spread (two coarsenings) give the same grid."""
    rng = np.random.default_rng(8)
    uvw, cell = setup_case(rng, 64, 64, 400, 7, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2), np.complex64)
    gcf = separable_gcf(7, 8)
    tiles = _core(cl_env, gcf, 64, 64, cell, npol=2)(uvw, FREQ_HZ, vis)
    peak = np.max(np.abs(tiles))
    for params in (None, {"block_u": 4, "block_v": 2, "wg_size": 32}):
        other = Gridder(cl_env.queue, gcf, 64, 64, cell, npol=2, method="register",
                        register_params=params)(uvw, FREQ_HZ, vis)
        assert np.max(np.abs(tiles - other)) < 1e-5 * peak, params


def test_device_arrays_in_and_out(cl_env):
    import pyopencl.array as cla
    rng = np.random.default_rng(9)
    uvw, cell = setup_case(rng, 64, 64, 200, 6)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1), np.complex64)
    weights = rng.uniform(0.5, 2.0, vis.shape).astype(np.float32)
    gcf = separable_gcf(6, 4)
    gridder = _core(cl_env, gcf, 64, 64, cell)
    grid = gridder(uvw, FREQ_HZ, cla.to_device(cl_env.queue, vis),
                   cla.to_device(cl_env.queue, weights), return_device=True)
    assert isinstance(grid, cla.Array)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, 64, 64, cell, weights)
    assert relative_error(grid.get(), reference) < 1e-5


def test_bad_input_errors(cl_env):
    rng = np.random.default_rng(10)
    uvw, cell = setup_case(rng, 64, 64, 50, 6)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1), np.complex64)
    gridder = _core(cl_env, separable_gcf(6, 4), 64, 64, cell)
    bad_uvw = uvw.copy()
    bad_uvw[3, 1] = np.nan
    with pytest.raises(ValueError, match="uvw_m contains NaN/Inf: 3 "):
        gridder(bad_uvw, FREQ_HZ, vis)
    bad_vis = vis.copy()
    bad_vis[0, 1, 0] = np.inf
    with pytest.raises(ValueError, match="NaN/Inf"):
        gridder(uvw, FREQ_HZ, bad_vis)
    with pytest.raises(ValueError, match="shape"):
        gridder(uvw, FREQ_HZ, vis[:, :2])
    from clgrid.core.table import max_table_support
    too_wide = max_table_support(cl_env.profile) + 1
    with pytest.raises(ValueError, match="too small for kernel support|at most 64 kernel taps"):
        Gridder(cl_env.queue, separable_gcf(65, 2), 160, 160, cell, method="tiles",
                tiles=TileShape(64, 64, vector=True))     # a vector tile's halo: one tile
    wide = Gridder(cl_env.queue, separable_gcf(too_wide, 2), 160, 160, cell)
    assert wide.choice.method == "register" and not wide.deterministic
    with pytest.raises(ValueError, match="fixed-point sums: .*resolves a float32 grid"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell, precision=np.float64,
                method="register", deterministic=True)
    with pytest.raises(ValueError, match="tiles= shapes the tile spread"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell,
                method="register", tiles=TileShape(8, 8))
    with pytest.raises(ValueError, match="method must be one of"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell, method="atomic")
    with pytest.raises(ValueError, match="shape the register spread"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell, method="tiles",
                atomics="cas")
    assert Gridder(cl_env.queue, separable_gcf(too_wide, 2), 160, 160, cell, method="tiles",
                   deterministic=True).method == "tiles"          # more neighbours' bins
    assert Gridder(cl_env.queue, separable_gcf(too_wide, 2), 160, 160, cell,
                   deterministic=True).deterministic    # tiles, or fixed-point register sums
    with pytest.raises(ValueError, match="block_u and block_v must be in"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell,
                method="register", register_params={"block_u": 3})
    with pytest.raises(TypeError, match="register_params must be a clgrid.core.register"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell,
                method="register", register_params=(2, 2))
    with pytest.raises(ValueError, match="complex sums a work-item"):
        Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell, npol=4,
                method="register", register_params={"block_u": 8, "block_v": 4})
    with pytest.raises(ValueError, match="too small for kernel support"):
        _core(cl_env, separable_gcf(12, 2), 64, 64, cell, TileShape(8, 8, vector=True))
    assert _core(cl_env, separable_gcf(12, 2), 64, 64, cell,      # lane tiles: 2 neighbours
                 TileShape(8, 8)).engine.tiles.reach(12) == 2
    # a plan binned for other tiles would be read out of bounds: refused
    other = _core(cl_env, separable_gcf(6, 4), 64, 64, cell, TileShape(16, 16))
    with pytest.raises(ValueError, match="another grid, table or tile shape"):
        other.grid_plan(gridder.plan(uvw, FREQ_HZ), vis)
    with pytest.raises(TypeError, match="Plan of its own plan"):
        gridder.grid_plan(object(), vis)


def test_deterministic_runs_the_tiles_or_fixed_point_register_sums(cl_env):
    """deterministic=True: the tile spread where it is the faster (CPUs) or no
    fixed-point sums can run, else the register spread's fixed-point flushes."""
    from clgrid.core.register import fixed_point_possible
    from clgrid.gridders.dispatch import method_for
    for npol, gcf in ((1, separable_gcf(6, 4)), (4, separable_gcf(6, 4)),
                      (4, w_projection_gcf(8, 4, 3, 100.0, 0.05))):
        gridder = Gridder(cl_env.queue, gcf, 64, 64, 1e-3, npol=npol, deterministic=True)
        assert gridder.deterministic
        fixed = (method_for(cl_env.profile, gcf.support, npol=npol) == "register"
                 and fixed_point_possible(cl_env.profile, np.float32)[0])
        assert gridder.method == ("register" if fixed else "tiles")
        assert gridder.atomic_path == ("fixed64" if fixed else "none")


def test_dispatcher_on_fake_profiles():
    from fake_profiles import fake
    from clgrid.gridders.dispatch import choose, method_for
    # deterministic=True on a GPU without 64-bit integer atomics: the tiles
    # (with them: the register spread's fixed-point flushes, test_dispatch.py)
    gpu = fake(extensions=frozenset())
    choice = choose(gpu, 8, 4, deterministic=True)
    assert choice.method == "tiles" and "deterministic" in choice.reasons[-1]
    assert choice.tiles == TileShape(8, 8, 4096, groups=4)
    assert choose(gpu, 16, 1, deterministic=True).tiles == TileShape(16, 32, 2048)
    # too wide a kernel for the local memory: refused, with the reason
    small = fake(local_mem_bytes=2048, extensions=frozenset())
    for profile, support, why in ((small, 128, "local memory"), (small, 8, "local memory")):
        with pytest.raises(ValueError, match=f"deterministic=True needs the tile spread, "
                           f"impossible.*{why}"):
            choose(profile, support, 1, deterministic=True)
        assert choose(profile, support, 1).method == "register"
    assert "tiles impossible" in choose(fake(local_mem_bytes=2048, atomic_f32="cas"), 8,
                                        1).reasons[-1]
    cpu = fake(device_type="cpu", atomic_f32="native-cl")
    for npol in (1, 4):
        for support in (8, 16, 48, 64):
            assert choose(cpu, support, npol, deterministic=True).method == "tiles"
            assert choose(cpu, support, npol).method == "tiles"   # no atomics
    assert choose(cpu, 65, 1, deterministic=True, method="tiles").tiles == TileShape(32, 32)
    assert choose(cpu, 65, 1, deterministic=True).fixed_point
    assert choose(cpu, 65, 1).method == "register"
    assert "wider than the tiles take" in choose(cpu, 65, 1).reasons[-1]
    # register accumulation where float atomics are native, tiles where determinism
    # is asked for
    assert gpu.atomic_f32 in ("native-ptx", "native-cl")
    assert choose(gpu, 8, 1).method == "register" and choose(gpu, 8, 1).tiles is None
    assert choose(gpu, 48, 4).method == "register"
    cas = fake(atomic_f32="cas")
    assert method_for(cas, 8) == "tiles" and method_for(cas, 48) == "register"
    with pytest.raises(ValueError, match="method 'register' needs fixed-point sums"):
        choose(gpu, 8, 1, deterministic=True, method="register")
    from clgrid.core.table import table_tiles
    assert table_tiles(cpu, 16) == TileShape(16, 16, vector=True)
    assert table_tiles(cpu, 17) == TileShape(32, 32, vector=True)
    assert table_tiles(cpu, 33) == TileShape(64, 64, vector=True)
    # CPUs spread any table with the vector tile where it builds
    vector = TileShape(16, 16, vector=True)
    for separable in (True, False):
        assert choose(cpu, 8, 1, method="tiles", separable=separable).tiles == vector
    old_pocl = fake(device_type="cpu", atomic_f32="native-cl",
                    platform_name="Portable Computing Language", driver_version="3.0-rc2")
    assert not old_pocl.vector_kernels
    assert choose(old_pocl, 8, 4).tiles == TileShape(8, 8)      # lane tiles
    assert "lane tiles" in choose(old_pocl, 8, 4).reasons[-1]
    assert choose(old_pocl, 34, 1, method="tiles").tiles == TileShape(32, 32)
    # no fp64: the core all the same (positions in float-float, compensated sums)
    assert choose(fake(fp64=False), 8, 1).method == "register"
    assert choose(fake(fp64=False, extensions=frozenset()), 8, 1,
                  deterministic=True).method == "tiles"
    assert choose(fake(fp64=False), 8, 1, deterministic=True).fixed_point
    with pytest.raises(ValueError, match="no double precision"):
        choose(fake(fp64=False), 8, 1, np.float64)


def test_register_default_geometry_on_fake_profiles():
    from fake_profiles import fake
    from clgrid.core.register import RegisterParams, default_register_params
    gpu = fake()
    assert default_register_params(gpu, 8, 4) == RegisterParams(2, 2, 256, 64, 2048)
    assert default_register_params(gpu, 64, 4) == RegisterParams(2, 2, 128, 64, 2048)
    # four polarisations of separable tables: two a work-item
    assert default_register_params(gpu, 128, 4, True) == RegisterParams(4, 4, 64, 64, 2048, 2)
    assert default_register_params(gpu, 128, 4, True, True) == RegisterParams(4, 4, 64, 64,
                                                                               2048, 2)
    assert default_register_params(gpu, 128, 2, True) == RegisterParams(4, 4, 64, 64, 2048)
    # degridding by register blocks: GPUs from support 32, separable tables in groups of 128
    from clgrid.core.register import default_degrid_params, degrid_by_register
    assert degrid_by_register(gpu, 32) and not degrid_by_register(gpu, 31)
    cpu = fake(device_type="cpu")                      # separable tables beyond W 64
    assert degrid_by_register(cpu, 72) and not degrid_by_register(cpu, 64)
    assert not degrid_by_register(cpu, 128, separable=False)
    assert default_degrid_params(gpu, 128, 4, True) == RegisterParams(4, 4, 128, 64, 2048, 2)
    assert default_degrid_params(gpu, 64, 4) == default_register_params(gpu, 64, 4)
    assert default_register_params(gpu, 128, 1, True, True) == RegisterParams(8, 8, 32, 64,
                                                                               2048)
    assert default_register_params(gpu, 2, 1) == RegisterParams(1, 1, 256, 64, 2048)
    cpu = fake(device_type="cpu")
    assert default_register_params(cpu, 16, 4, True) == RegisterParams(2, 2, 64, 64, 4096)
    assert default_register_params(cpu, 24, 4, True) == RegisterParams(4, 4, 64, 64, 4096)
    assert default_register_params(cpu, 8, 1, True) == RegisterParams(4, 4, 64, 64, 4096)
    assert default_register_params(cpu, 16, 1, False) == RegisterParams(2, 2, 64, 64, 4096)
    assert default_register_params(cpu, 16, 4, False) == RegisterParams(1, 1, 64, 64, 4096)
    assert default_register_params(cpu, 128, 4, True, True) == RegisterParams(4, 4, 64, 64,
                                                                               4096)
    assert default_register_params(cpu, 72, 1, True) == RegisterParams(8, 8, 64, 64, 4096)
    assert default_register_params(cpu, 72, 1, False) == RegisterParams(2, 2, 64, 64, 4096)
    assert default_register_params(cpu, 72, 4, False) == RegisterParams(1, 1, 64, 64, 4096)
    for profile in (gpu, cpu):
        for support, npol in ((8, 4), (64, 4), (128, 4), (128, 2), (128, 1)):
            for separable in (True, False):
                default_register_params(profile, support, npol, separable, True).validate(npol)


_OCLGRIND_SCRIPT = """
import numpy as np, pyopencl as cl, clgrid
from clgrid.core.plan import TileShape
from clgrid.gcf import separable_gcf, w_projection_gcf
from clgrid.gridders.gridder import Gridder
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(0)
uvw = rng.uniform(-150, 150, (16, 3))
vis = (rng.standard_normal((16, 1, 2)) + 1j).astype(np.complex64)
weights = rng.uniform(0.5, 2.0, vis.shape)
flags = rng.random(vis.shape) < 0.2
cell = 1.0 / (20 * 20.0)
ramp = np.exp(0.7j * np.arange(3))
complex_rows = clgrid.gcf.user_gcf(3, 2, table_u=separable_gcf(3, 2).table_u * ramp,
                                   table_v=separable_gcf(3, 2).table_v * ramp.conj())
for gcf in (separable_gcf(3, 2), w_projection_gcf(3, 2, 2, 60.0, 20 * cell), complex_rows):
    gridder = Gridder(queue, gcf, 20, 18, cell, npol=2,
                      tiles=TileShape(4, 4, 3, groups=2))
    grid = gridder(uvw, [1e8], vis, weights, flags)
    assert gridder.last_stats["n_kept"] > 8, gridder.last_stats
    assert np.abs(grid).max() > 0
    gridder(uvw, [1e8], vis, weights, flags, out=gridder.zeros())
    # the CPU vector tile: real separable, full and complex separable tables
    # fewer points staged at a time than work-items (a wide table's staging)
    small_batch = Gridder(queue, gcf, 20, 18, cell, npol=2,
                          tiles=TileShape(4, 4, 3, groups=2, batch=3))
    assert np.allclose(small_batch(uvw, [1e8], vis, weights, flags), grid, atol=1e-5)
    vector = Gridder(queue, gcf, 20, 18, cell, npol=2,
                     tiles=TileShape(4, 4, vector=True))
    assert np.allclose(vector(uvw, [1e8], vis, weights, flags), grid, atol=1e-5)
    chunks = Gridder(queue, gcf, 20, 18, cell, npol=2,   # dense tiles in chunks of 2
                     tiles=TileShape(4, 4, 2, vector=True))
    assert np.allclose(chunks(uvw, [1e8], vis, weights, flags), grid, atol=1e-5)
    once = vector(uvw, [1e8], vis, weights, flags, return_device=True)
    twice = vector(uvw, [1e8], vis, weights, flags, out=once)
    assert np.allclose(twice, 2 * grid, atol=1e-5)
    degridder = clgrid.Degridder(queue, gcf, 20, 18, cell, npol=2,
                                 tiles=TileShape(4, 4))
    assert np.abs(degridder(grid, uvw, [1e8], weights, flags)).max() > 0
    by_record = clgrid.Degridder(queue, gcf, 20, 18, cell, npol=2)
    assert np.allclose(by_record(grid, uvw, [1e8], weights, flags),
                       degridder(grid, uvw, [1e8], weights, flags), atol=1e-5)
    from clgrid.core.spread import Interpolator
    for group, as_vectors in ((4, False), (0, True)):   # the GPUs' and the CPUs' kernels
        forced = clgrid.Degridder(queue, gcf, 20, 18, cell, npol=2)
        forced.engine.primary.interpolator = Interpolator(
            queue, forced.engine.interpolator.source, record_group=group,
            record_vector=as_vectors, records=forced.engine.interpolator.records)
        assert np.allclose(forced(grid, uvw, [1e8], weights, flags),
                           degridder(grid, uvw, [1e8], weights, flags), atol=1e-5)
    for params in ({"block_u": 1, "block_v": 1, "wg_size": 8, "batch": 3,
                    "points_per_group": 5},
                   {"block_u": 2, "block_v": 2, "wg_size": 3, "batch": 4,
                    "points_per_group": 7},
                   {"block_u": 4, "block_v": 4, "wg_size": 4, "batch": 2,
                    "points_per_group": 6}):
        register = Gridder(queue, gcf, 20, 18, cell, npol=2,
                           method="register", register_params=params)
        assert np.allclose(register(uvw, [1e8], vis, weights, flags), grid, atol=1e-5)
from clgrid.core.register import RecordScan
from clgrid.core.table import TableGrid
import pyopencl.array as cla
cells = np.zeros((150, 4), np.int32)
cells[:, 1] = np.sort(rng.integers(0, 9, 150))
cells[:, 2] = rng.integers(0, 2, 150)
for group in (None, 1):   # the GPUs' cut and the CPUs' (one work-item a tile)
    cut = RecordScan(queue, TableGrid(8, 8, 1.0, 3, 2, 1, 0.0, True, False, True,
                                      np.dtype(np.float32)), group)._cut(
        cla.to_device(queue, cells.view(cl.cltypes.int4).ravel()), 150)
    assert cut.n_records == int((np.r_[True, np.any(cells[1:, :3] != cells[:-1, :3], axis=1)]
                                | (np.arange(150) % 64 == 0)).sum())
# a table wider than 16 on the vector tile (32 x 32, full-slice rows in pieces)
wide = w_projection_gcf(18, 2, 2, 60.0, 64 * cell)
args = (uvw[:6] * 0.2, [1e8], vis[:6])
lanes = Gridder(queue, wide, 64, 64, cell, npol=2,
                tiles=TileShape(32, 32))(*args)
vector = Gridder(queue, wide, 64, 64, cell, npol=2,
                 tiles=TileShape(32, 32, vector=True))(*args)
assert np.abs(lanes).max() > 0 and np.allclose(vector, lanes, atol=1e-5)
by_rows = clgrid.Degridder(queue, wide, 64, 64, cell, npol=2)
by_rows.engine.primary.interpolator = Interpolator(
    queue, by_rows.engine.interpolator.source, record_group=0, record_vector=True,
    records=by_rows.engine.interpolator.records)
assert by_rows.engine.interpolator.record_vector
scalar = clgrid.Degridder(queue, wide, 64, 64, cell, npol=2, tiles=TileShape(32, 32))
assert np.allclose(by_rows(lanes, *args[:2]), scalar(lanes, *args[:2]), atol=1e-5)
# a device without fp64: float-float set points, compensated record sums
import dataclasses
from clgrid.device.profiles import DeviceProfile
with_fp64 = DeviceProfile.from_device
DeviceProfile.from_device = classmethod(
    lambda cls, device: dataclasses.replace(with_fp64(device), fp64=False))
gcf = w_projection_gcf(3, 2, 2, 60.0, 20 * cell)
exact = Gridder(queue, gcf, 20, 18, cell, npol=2,
                method="register")(uvw, [1e8], vis, weights)
assert np.allclose(Gridder(queue, gcf, 20, 18, cell, npol=2)(uvw, [1e8], vis, weights),
                   exact, atol=1e-5)
predicted = clgrid.Degridder(queue, gcf, 20, 18, cell, npol=2)(exact, uvw, [1e8], weights)
assert np.abs(predicted).max() > 0
tiles = Gridder(queue, gcf, 20, 18, cell, npol=2, method="tiles",
                tiles=TileShape(4, 4, 3, groups=2))    # split, two groups: Kahan sums
assert np.allclose(tiles(uvw, [1e8], vis, weights), exact, atol=1e-5)
DeviceProfile.from_device = with_fp64
print("done")
"""


@pytest.mark.tiny
def test_oclgrind_core_table_kernels_clean(request):
    from oclgrind_check import run_clean
    result = run_clean(request.config, _OCLGRIND_SCRIPT)
    assert "done" in result.stdout


@pytest.mark.parametrize("method", ["tiles", "register"])
def test_streaming_gridder_grids_core_in_row_blocks(cl_env, method):
    rng = np.random.default_rng(12)
    uvw, cell = setup_case(rng, 64, 64, 500, 7, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2), np.complex64)
    weights = rng.uniform(0.5, 2.0, vis.shape[:2] + (1,))
    flags = rng.random(vis.shape[:2] + (1,)) < 0.1
    gcf = separable_gcf(7, 8)

    def make():
        gridder = (_core(cl_env, gcf, 64, 64, cell, npol=2) if method == "tiles" else
                   _register(cl_env, gcf, 64, 64, cell, npol=2))
        return clgrid.StreamingGridder(gridder, chunk_records=400)

    streaming = make()
    first = streaming(uvw, FREQ_HZ, vis, weights, flags)
    assert streaming.last_stats["n_chunks"] > 2
    if method == "tiles":     # the register spread's float atomics vary the last bits
        assert np.array_equal(first, streaming(uvw, FREQ_HZ, vis, weights, flags))
        assert np.array_equal(first, make()(uvw, FREQ_HZ, vis, weights, flags))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, 64, 64, cell, weights, flags)
    assert relative_error(first, reference) < 1e-5
    assert streaming.last_stats["n_flagged"] == int(flags.sum()) * 1


@pytest.mark.parametrize("record_group", [None, 16, "vector", "register"],
                         ids=["device", "group16", "vector", "register"])
@pytest.mark.parametrize("kind", ["separable", "full"])
@pytest.mark.parametrize("npol, precision", [(1, np.float32), (4, np.float32),
                                             (2, np.float64)])
@pytest.mark.sweep
def test_degridder_core_matches_reference_and_is_adjoint(cl_env, kind, npol, precision,
                                                         record_group, monkeypatch):
    """Against the float64 reference, adjoint to the gridder, repeatable;
    degridding by records with the device's choice, with a work-group of 16
    per record forced (the GPUs' wide-footprint kernel), with rows as
    vectors forced (the CPUs' kernel) and by register blocks (the GPUs'
    kernel from support 32: a box split over groups, two record slices, the
    polarisations split), on any device."""
    from gridder_reference import degrid_reference
    from clgrid.core import register
    from clgrid.core.spread import Interpolator
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(21 + npol)
    nx, ny = 58, 46
    uvw, cell = setup_case(rng, nx, ny, 200, 6, fill=1.8, w_max_m=300.0)
    gcf = (separable_gcf(6, 8) if kind == "separable" else
           w_projection_gcf(6, 4, 4, 250.0 * FREQ_HZ.max() / C, nx * cell))
    grid = random_vis(rng, (npol, ny, nx))
    weights = rng.uniform(0.5, 2.0, (uvw.shape[0], FREQ_HZ.size, npol))
    flags = rng.random(weights.shape) < 0.1
    params = (RegisterParams(4, 2, 8, 7, 61, 2 if npol == 4 else 0)
              if record_group == "register" else None)
    degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, npol=npol,
                                 precision=precision, register_params=params)
    if record_group == "register":
        interpolator = degridder.engine.interpolator.register
        assert interpolator.n_chunks > 1 and interpolator.batch == 7
        # partial sums of a few records a launch: several slices
        bytes_per_record = interpolator.n_chunks * npol * degridder.complex_dtype.itemsize
        monkeypatch.setattr(register, "PARTIALS_BYTES", 300 * bytes_per_record)
    elif record_group == "vector":      # the CPUs' kernel, forced on every device
        cl_env.require_vector_tiles()
        core = degridder.engine
        core.primary.interpolator = Interpolator(
            cl_env.queue, core.interpolator.source, record_group=0, record_vector=True,
            records=core.interpolator.records)
        assert core.interpolator.record_vector
    elif record_group is not None:
        core = degridder.engine
        core.primary.interpolator = Interpolator(
            cl_env.queue, core.interpolator.source, record_group=record_group,
            records=core.interpolator.records)
        assert core.interpolator.record_group == record_group
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)     # some points off the grid
        vis = degridder(grid.astype(degridder.complex_dtype), uvw, FREQ_HZ, weights, flags)
    reference = degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny, cell, weights) * ~flags
    assert vis.shape == reference.shape and vis.dtype == degridder.complex_dtype
    assert relative_error(vis, reference) < _tolerance(precision)
    assert degridder.last_stats["n_offgrid"] > 0
    # adjoint of the Gridder in the real inner product (conjugating
    # the w < 0 visibilities is antilinear): Re <g, G v> = Re <D g, v>
    values = random_vis(rng, weights.shape)
    gridder = _core(cl_env, gcf, nx, ny, cell, npol=npol, precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        gridded = gridder(uvw, FREQ_HZ, values.astype(gridder.complex_dtype), weights, flags)
    left = np.vdot(grid, gridded).real
    right = np.vdot(vis, values).real
    assert abs(left - right) < 10 * _tolerance(precision) * abs(left)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        again = degridder(grid.astype(degridder.complex_dtype), uvw, FREQ_HZ, weights, flags)
    assert np.array_equal(vis, again)
    if record_group == "register":
        assert len(interpolator.slices(degridder.engine.n_records(degridder.plan(
            uvw, FREQ_HZ, flags)))) > 1


def test_no_rows_and_far_points(cl_env):
    """Zero rows give a zero grid; points far beyond the grid (beyond what an
    integer position holds) are counted off the grid, not wrapped onto it."""
    gcf = separable_gcf(6, 4)
    gridder = _core(cl_env, gcf, 48, 48, 1e-3, npol=2)
    empty = gridder(np.zeros((0, 3)), FREQ_HZ, np.zeros((0, FREQ_HZ.size, 2), np.complex64))
    assert empty.shape == (2, 48, 48) and not np.any(empty)
    degridder = clgrid.Degridder(cl_env.queue, gcf, 48, 48, 1e-3, npol=2)
    assert degridder(empty, np.zeros((0, 3)), FREQ_HZ).shape == (0, FREQ_HZ.size, 2)
    uvw = np.array([[1e25, 0.0, 0.0], [-3e20, 5e19, 1.0], [10.0, -20.0, 3.0]])
    vis = np.ones((3, FREQ_HZ.size, 2), np.complex64)
    with pytest.warns(UserWarning, match="off the grid"):
        grid = gridder(uvw, FREQ_HZ, vis)
    assert gridder.last_stats["n_offgrid"] == 2 * FREQ_HZ.size
    reference = grid_reference(uvw[2:], FREQ_HZ, vis[2:].astype(np.complex128), gcf, 48, 48,
                               1e-3)
    assert relative_error(grid, reference) < 1e-5


@pytest.mark.parametrize("support", [1, 2, 3, 17, 33])
def test_supports_from_1_to_33(cl_env, support):
    """Odd and even supports up to the core's limit, both table kinds, the
    device's tile and a 32 x 32 GPU tile with split chunks."""
    rng = np.random.default_rng(support)
    nx = 96
    uvw, cell = setup_case(rng, nx, nx, 60, support, w_max_m=200.0)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    for gcf in (separable_gcf(support, 4),
                w_projection_gcf(support, 2, 3, 200.0 * FREQ_HZ.max() / C, nx * cell)):
        reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, nx, cell)
        for tiles in (None, TileShape(32, 32, 64)):
            result = _core(cl_env, gcf, nx, nx, cell, tiles, npol=2)(
                uvw, FREQ_HZ, vis.astype(np.complex64))
            assert relative_error(result, reference) < 1e-5, (gcf.separable, tiles)


# ------------------------------------------------ the register spread (Romein/Merry)
#: Register geometries forced on every device: one point a work-item with
#: several streams a group; coarsened blocks; a box split over groups; tiny
#: batches and groups so that passes, streams and group ends all occur.
REGISTER = {
    "device": None,
    "1x1-streams": {"block_u": 1, "block_v": 1, "wg_size": 64, "batch": 5,
                    "points_per_group": 97},
    "2x1": {"block_u": 2, "block_v": 1, "wg_size": 64, "batch": 6, "points_per_group": 50},
    "2x2": {"block_u": 2, "block_v": 2, "wg_size": 32, "batch": 16,
            "points_per_group": 300},
    "4x2-split-box": {"block_u": 4, "block_v": 2, "wg_size": 8, "batch": 7,
                      "points_per_group": 1000},
    "4x4": {"block_u": 4, "block_v": 4, "wg_size": 16, "batch": 8, "points_per_group": 400},
    # one polarisation a work-item: a box position's items split them
    "4x2-pol1-split-box": {"block_u": 4, "block_v": 2, "wg_size": 8, "batch": 7,
                           "points_per_group": 1000, "pol_block": 1},
}


def _register(cl_env, gcf, nx, ny, cell, params=None, **kwargs) -> Gridder:
    _skip_without_fp64(cl_env)
    gridder = Gridder(cl_env.queue, gcf, nx, ny, cell, method="register",
                      register_params=params, **kwargs)
    assert gridder.choice.method == "register" and not gridder.deterministic
    return gridder


@pytest.mark.parametrize("geometry", list(REGISTER), ids=list(REGISTER))
@pytest.mark.parametrize("npol, precision", [(1, np.float32), (4, np.float32),
                                             (2, np.float64)])
@pytest.mark.sweep
def test_register_separable_matches_reference(cl_env, geometry, npol, precision):
    nx, ny = 58, 46
    rng = np.random.default_rng(31 + npol)
    uvw, cell = setup_case(rng, nx, ny, 300, 8, tracks=True)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    flags[::7] = True
    gcf = separable_gcf(8, 8)
    params = REGISTER[geometry]
    if params and params["block_u"] * params["block_v"] * (params.get("pol_block") or npol) \
            > MAX_REGISTER_SUMS:
        params = dict(params, block_v=1)
    gridder = _register(cl_env, gcf, nx, ny, cell, params, npol=npol, precision=precision)
    result = gridder(uvw, FREQ_HZ, vis.astype(gridder.complex_dtype), weights, flags)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights, flags)
    assert result.shape == (npol, ny, nx) and result.dtype == gridder.complex_dtype
    assert relative_error(result, reference) < _tolerance(precision)
    assert gridder.last_stats["n_flagged"] == int(flags.all(axis=2).sum())


@pytest.mark.parametrize("geometry", list(REGISTER), ids=list(REGISTER))
@pytest.mark.parametrize("support", [7, 40])
@pytest.mark.sweep
def test_register_w_projection_matches_reference(cl_env, geometry, support):
    """Full W-projection tables, a support beyond the tile spread's 33 too."""
    rng = np.random.default_rng(support)
    nx, ny = (72, 66) if support < 33 else (112, 104)
    uvw, cell = setup_case(rng, nx, ny, 120, support, w_max_m=300.0)
    gcf = w_projection_gcf(support, 4, 5, 300.0 * FREQ_HZ.max() / C, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    weights = rng.uniform(0.5, 2.0, vis.shape[:2] + (1,))
    gridder = _register(cl_env, gcf, nx, ny, cell, REGISTER[geometry], npol=2)
    result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64), weights)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell, weights)
    assert gridder.last_stats["n_kept"] > 100
    assert relative_error(result, reference) < 1e-5


@pytest.mark.parametrize("w_planes, key_dtype", [(5, np.uint32), (300, np.uint64)])
def test_register_sort_keys_of_both_widths(cl_env, w_planes, key_dtype):
    """The cell order's sort keys are 32-bit where the (cell, table slice)
    pairs fit and 64-bit beyond (256^2 cells x 300 planes x 16^2 slices)."""
    rng = np.random.default_rng(w_planes)
    nx = ny = 256
    uvw, cell = setup_case(rng, nx, ny, 60, 4, w_max_m=300.0)
    gcf = w_projection_gcf(4, 16, w_planes, 300.0 * FREQ_HZ.max() / C, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1))
    gridder = _register(cl_env, gcf, nx, ny, cell)
    assert gridder.engine.set_points.key_dtype == key_dtype
    result = gridder(uvw, FREQ_HZ, vis.astype(np.complex64))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    assert gridder.last_stats["n_kept"] > 100
    assert relative_error(result, reference) < 1e-5


def test_cell_order_keys_forced_wide_sort_alike(cl_env):
    """64-bit cell keys forced where 32 bits would do sort the points as the
    32-bit ones do (the same stable order)."""
    from clgrid.core.setpoints import SetPoints, freq_scale
    from clgrid.core.table import TableGrid, TablePositions
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(5)
    uvw, cell = setup_case(rng, 64, 64, 200, 6, tracks=True)
    grid = TableGrid(64, 64, cell, 6, 4, 1, 0.0, True, True, True, np.dtype(np.float32))
    cells = []
    for wide_keys in (None, True):
        set_points = SetPoints(cl_env.queue, TablePositions(grid, "cell", wide_keys),
                               TileShape(8, 8))
        assert set_points.key_dtype == (np.uint64 if wide_keys else np.uint32)
        points = set_points(*set_points.upload(uvw, freq_scale(FREQ_HZ)))
        assert points.n_kept > 100
        cells.append(points.points.cells.get()[:points.n_kept])
    np.testing.assert_array_equal(cells[0], cells[1])


@pytest.mark.parametrize("separable", [True, False], ids=["separable", "full"])
def test_register_random_complex_user_tables(cl_env, separable):
    rng, uvw, cell, gcf, nx, ny = random_user_tables_case(separable)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2))
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    for params in REGISTER.values():
        result = _register(cl_env, gcf, nx, ny, cell, params, npol=2)(
            uvw, FREQ_HZ, vis.astype(np.complex64))
        assert relative_error(result, reference) < 1e-5, params


def test_register_accumulates_drops_and_cas_atomics(cl_env):
    """out= adds; off-grid points are counted as the reference counts them;
    the compare-and-swap path gives the same grid as the device's best."""
    rng = np.random.default_rng(41)
    nx = ny = 48
    uvw, cell = setup_case(rng, nx, ny, 300, 6, fill=1.3, w_max_m=400.0)
    gcf = w_projection_gcf(6, 4, 4, 300.0 * FREQ_HZ.max() / C, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1), np.complex64)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, ny, cell)
    offgrid = uvw.shape[0] * FREQ_HZ.size - len(list(footprints(uvw, FREQ_HZ, gcf, nx, ny,
                                                                cell)))
    for atomics in (None, "cas"):
        gridder = _register(cl_env, gcf, nx, ny, cell, atomics=atomics)
        with pytest.warns(UserWarning, match="off the grid"):
            grid = gridder(uvw, FREQ_HZ, vis, return_device=True)
        assert gridder.last_stats["n_offgrid"] == offgrid > 0
        assert relative_error(grid.get(), reference) < 1e-5
        with pytest.warns(UserWarning, match="off the grid"):
            gridder(uvw, FREQ_HZ, vis, out=grid)
        assert relative_error(grid.get(), 2 * reference) < 1e-5
    assert gridder.atomic_path == "cas"


@pytest.mark.parametrize("group", [None, 1, 16])
@pytest.mark.parametrize("n", [0, 1, 37, 5000])
def test_record_cut_matches_numpy(cl_env, n, group):
    """Runs of equal (cell, table slice) among sorted points (the conjugated
    bit ignored; cut every MAX_RUN points too), cut on the device across
    many tiles."""
    import pyopencl as cl
    import pyopencl.array as cla
    from clgrid.core.register import RecordScan
    from clgrid.core.table import TableGrid
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(n)
    cells = np.zeros((n, 4), np.int32)
    order = np.lexsort((rng.integers(0, 3, n), rng.integers(0, 4, n), rng.integers(0, 5, n)))
    cells[:, 0] = np.sort(rng.integers(0, 5, n))
    cells[:, 1] = rng.integers(0, 4, n)[order]
    cells[:, 2] = rng.integers(0, 3, n) | (rng.integers(0, 2, n) << 30)
    cells[:, 3] = np.arange(n)
    grid = TableGrid(8, 8, 1.0, 3, 2, 1, 0.0, True, False, True, np.dtype(np.float32))
    scan = RecordScan(cl_env.queue, grid, group)
    scan._max_tiles = 7                              # several tiles, some partial
    device = cla.to_device(cl_env.queue, cells.view(cl.cltypes.int4).ravel()) if n else \
        cla.empty(cl_env.queue, 1, cl.cltypes.int4)
    records = scan._cut(device, n)
    key = cells[:, :3].copy()
    key[:, 2] &= (1 << 30) - 1
    from clgrid.core.register import MAX_RUN
    cut_here = np.r_[True, np.any(key[1:] != key[:-1], axis=1)] | (np.arange(n) % MAX_RUN == 0)
    heads = np.flatnonzero(cut_here) if n else []
    assert records.n_records == len(heads)
    np.testing.assert_array_equal(records.start.get()[:len(heads) + 1], np.r_[heads, n])
    if n:
        got = records.cells.get()[:len(heads)].view(np.int32).reshape(-1, 4)
        np.testing.assert_array_equal(got, cells[heads])


def test_register_degridder_is_adjoint_beyond_the_tile_limit(cl_env):
    """Support 40: the Degridder sorts by cell; Re <g, G v> = Re <D g, v>."""
    _skip_without_fp64(cl_env)
    rng = np.random.default_rng(43)
    nx = ny = 112
    uvw, cell = setup_case(rng, nx, ny, 80, 40, w_max_m=300.0)
    gcf = w_projection_gcf(40, 4, 3, 300.0 * FREQ_HZ.max() / C, nx * cell)
    grid = random_vis(rng, (1, ny, nx))
    values = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1))
    degridder = clgrid.Degridder(cl_env.queue, gcf, nx, ny, cell, precision=np.float64)
    gridder = _register(cl_env, gcf, nx, ny, cell, precision=np.float64)
    degridded = degridder(grid, uvw, FREQ_HZ)
    gridded = gridder(uvw, FREQ_HZ, values)
    lhs = np.vdot(grid, gridded).real
    rhs = np.vdot(degridded, values).real
    assert abs(lhs - rhs) < 1e-10 * abs(lhs) and gridder.last_stats["n_kept"] > 100


def test_register_flush_count(cl_env):
    """count_flushes: one record flushes each of its S x S one-point blocks
    once (at the end); points that move the footprint flush more."""
    from clgrid.core.register import RegisterParams, RegisterSpreader
    _skip_without_fp64(cl_env)
    gcf = separable_gcf(6, 4)
    uvw = np.array([[10.0, -5.0, 0.0], [10.0, -5.0, 0.0], [400.0, 300.0, 0.0]])
    gridder = _register(cl_env, gcf, 64, 64, 1.0 / (64 * 30.0), {"block_u": 1, "block_v": 1})
    counting = RegisterSpreader(cl_env.queue, gridder.table_grid, gridder._tables, 1,
                                RegisterParams(1, 1, 64), count_flushes=True)
    vis = np.ones((3, 1, 1), np.complex64)
    for rows, flushes in ((2, 36), (3, None)):
        plan = gridder.plan(uvw[:rows], [1e8])
        counting(plan.points, gridder.upload_vis(vis[:rows], plan), None, None,
                 gridder.zeros(), False)
        assert counting.records(plan.points).n_records == rows - 1
        if flushes is not None:
            assert counting.last_flushes == flushes
        else:
            assert 36 < counting.last_flushes <= 2 * 36


def test_phased_table_puts_each_block_of_weights_in_one_aligned_vector():
    """phased_table against the plain rule: phase f, block k holds the
    weights of footprint columns block k - f .. + block - 1 (zero off it)."""
    from clgrid.core.register import phased_table
    rng = np.random.default_rng(3)
    support, block = 7, 4
    table = rng.standard_normal((1, 3, support))          # (w_planes, O, S)
    bin_ = -(-(support + block - 1) // block) * block
    phased = phased_table(table, block, bin_, np.float64)
    assert phased.shape == (3, block, bin_)
    for row in range(3):
        for phase in range(block):
            for k in range(bin_ // block):
                for c in range(block):
                    column = block * k - phase + c
                    expected = table[0, row, column] if 0 <= column < support else 0.0
                    assert phased[row, phase, block * k + c] == expected


def test_row_taps_ladder():
    """The CPU vector kernels' row widths, one source for Python and the
    templates: the narrowest of 4, 8, 16, 32, 64 that holds the support."""
    from clgrid.core.plan import row_taps
    assert [row_taps(w) for w in (1, 4, 5, 8, 9, 16, 17, 32, 33, 64)] == \
        [4, 4, 8, 8, 16, 16, 32, 32, 64, 64]
    assert row_taps(65) == 0      # no vector kernel takes it


def test_one_engine_drives_both_paths(cl_env):
    """The imaging and the table paths run on one engine class, their stages
    strategies (the imaging path's with an image stage); a spread given in
    the stages is called once per row block with a typed job, and grids the
    same bits as the stage it wraps."""
    import dataclasses
    from clgrid.core.engine import Engine, SpreadJob
    rng = np.random.default_rng(38)
    gcf = separable_gcf(6, 4)
    uvw = np.column_stack([rng.uniform(-400, 400, (50, 2)), np.zeros(50)])
    vis = random_vis(rng, (50, 1, 1)).astype(np.complex64)
    cell = 1.0 / (64 * 30.0)
    gridder = Gridder(cl_env.queue, gcf, 64, 64, cell, method="tiles")
    degridder = clgrid.Degridder(cl_env.queue, gcf, 64, 64, cell)
    imager = clgrid.Imager(cl_env.queue, uvw=uvw, freq=[1e8], npix_x=32, npix_y=32,
                           pixsize_x=1e-3, pixsize_y=1e-3, epsilon=1e-4)
    assert all(type(user.engine) is Engine for user in (gridder, degridder, imager))
    assert imager.engine.stages.image is not None and gridder.engine.stages.image is None
    expected = gridder(uvw, [1e8], vis)
    jobs = []

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        launch_geometry = property(lambda self: self.inner.launch_geometry)
        adds_to_zeros = property(lambda self: self.inner.adds_to_zeros)
        counts_nonfinite = property(lambda self: self.inner.counts_nonfinite)

        def prepare(self, passes):
            self.inner.prepare(passes)

        def spread(self, job):
            jobs.append(job)
            self.inner.spread(job)

    stages = gridder.engine.stages
    gridder.engine = Engine(cl_env.queue, dataclasses.replace(
        stages, spread=lambda queue: Recording(stages.spread(queue))))
    assert np.array_equal(gridder(uvw, [1e8], vis), expected)
    assert len(jobs) == 1 and isinstance(jobs[0], SpreadJob) and jobs[0].pol is None

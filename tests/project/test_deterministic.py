"""The same input gives the same bits, call after call (issue 19).

Each operation runs twice on identical inputs and the results must be
bitwise equal (``np.array_equal``), not merely close.  The gridding core
adds in a fixed order (stable device sort, output-owned tiles, chunks folded
in slot order, planes summed in order): no float atomics anywhere.
"""

from __future__ import annotations

import dataclasses

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
    from gridder_reference import C, random_uvw, random_vis
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


TILE_GEOMETRIES = {  # the dispatcher's tile, lane tiles, GPU-style groups, split chunks
    "dispatcher": None,
    "lanes-8": dict(tile_u=8, lanes=8),
    "lanes-16x32": dict(tile_u=16, lanes=32),
    "gpu-groups": dict(tile_u=8, lanes=8, chunk_points=4096, groups=4),
    "split-chunks": dict(tile_u=16, lanes=16, chunk_points=64),
    "vector": dict(tile_u=16, lanes=16, vector=True),
}


@pytest.mark.parametrize("geometry", list(TILE_GEOMETRIES), ids=list(TILE_GEOMETRIES))
def test_gridder_deterministic_repeats_bitwise_and_matches_reference(cl_env, geometry):
    from clgrid.gcf import separable_gcf
    from gridder_reference import grid_reference
    tiles = TILE_GEOMETRIES[geometry]
    if tiles is not None and tiles.get("vector"):
        cl_env.require_vector_tiles()
    uvw, freq, vis, weights, nx, cell = _table_observation()
    gcf = separable_gcf(8, 8)

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True,
                              tiles=tiles)

    gridder, grid = _repeat_bitwise(make, lambda g: g(uvw, freq, vis, weights))
    # the dispatcher's pick: tiles, or register accumulation with fixed-point flushes
    assert gridder.deterministic and gridder.choice.deterministic
    assert gridder.method == ("tiles" if tiles is not None or not gridder.choice.fixed_point
                              else "register")
    assert gridder.atomic_path == ("fixed64" if gridder.choice.fixed_point else "none")
    if tiles is not None:
        assert gridder.engine.tiles == clgrid.TileShape(**tiles)
    reference = grid_reference(uvw, freq, vis, gcf, nx, nx, cell, weights)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))
    # the same grid as the register spread (float atomics), to float rounding
    other = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, method="register",
                           deterministic=False)
    assert not other.deterministic
    assert np.max(np.abs(grid - other(uvw, freq, vis, weights))) < \
        1e-5 * np.max(np.abs(reference))


def test_gridder_deterministic_full_w_table(cl_env):
    from clgrid.gcf import w_projection_gcf
    from gridder_reference import C, grid_reference
    uvw, freq, vis, _, nx, cell = _table_observation(seed=6, nrow=400, w_max_m=300.0)
    gcf = w_projection_gcf(8, 4, 5, 300.0 * freq.max() / C, nx * cell)

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True)

    gridder, grid = _repeat_bitwise(make, lambda g: g(uvw, freq, vis))
    assert gridder.deterministic
    reference = grid_reference(uvw, freq, vis, gcf, nx, nx, cell)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))


FIXED_POINT_CASES = {   # table, support, npol
    "separable-4pol": ("separable", 8, 4),
    "complex-separable": ("complex-separable", 12, 2),
    "full-w": ("full", 8, 1),
    "wide": ("separable", 40, 1),
}


def _require_fixed_point(cl_env) -> None:
    from clgrid.core.register import fixed_point_possible
    possible, why = fixed_point_possible(cl_env.profile, np.float32)
    if not possible:
        pytest.skip(f"no fixed-point register sums here: {why}")


def _fixed_case(table: str, support: int, npol: int, seed: int = 5):
    from clgrid.gcf import separable_gcf, w_projection_gcf
    from gridder_reference import C, random_vis
    uvw, freq, _, weights, nx, cell = _table_observation(seed=seed, nrow=600,
                                                         w_max_m=300.0)
    if table == "full":
        gcf = w_projection_gcf(support, 4, 5, 300.0 * freq.max() / C, nx * cell)
    else:
        gcf = separable_gcf(support, 4)
        if table == "complex-separable":
            ramp = np.exp(0.3j * np.arange(support))
            gcf = dataclasses.replace(gcf, table_u=gcf.table_u * ramp, table_v=gcf.table_v)
    vis = random_vis(np.random.default_rng(seed), (uvw.shape[0], freq.size, npol))
    return uvw, freq, vis.astype(np.complex64), weights[..., :1], nx, cell, gcf


@pytest.mark.filterwarnings("ignore:.*visibilities off the grid")   # W 40 on 96^2
@pytest.mark.parametrize("case", list(FIXED_POINT_CASES))
def test_fixed_point_register_sums_repeat_bitwise_and_match_the_reference(cl_env, case):
    """The register spread with 64-bit fixed-point flushes (deterministic=True,
    method='register'): the same bits call after call and from a fresh
    object, the float64 reference to float32 rounding, and the float atomics'
    grid to the same."""
    from gridder_reference import grid_reference, relative_error
    _require_fixed_point(cl_env)
    uvw, freq, vis, weights, nx, cell, gcf = _fixed_case(*FIXED_POINT_CASES[case])
    npol = vis.shape[-1]

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=npol, method="register",
                              deterministic=True)

    gridder, grid = _repeat_bitwise(make, lambda g: g(uvw, freq, vis, weights))
    assert gridder.deterministic and gridder.atomic_path == "fixed64"
    assert "fixed64" in gridder.engine.launch_geometry
    reference = grid_reference(uvw, freq, vis, gcf, nx, nx, cell, weights)
    assert relative_error(grid, reference) < 1e-5
    floats = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=npol, method="register")
    assert relative_error(floats(uvw, freq, vis, weights), grid) < 1e-5


@pytest.mark.parametrize("scale", [1e-26, 1.0, 1e25])
def test_fixed_point_sums_hold_their_accuracy_at_any_scale(cl_env, scale):
    """The fixed-point scale follows the data (a power of two from the
    values' bound): visibilities in SI units (1e-26) or huge ones grid as
    accurately as unit ones; zeros and fully flagged data give zeros."""
    from gridder_reference import grid_reference, relative_error
    _require_fixed_point(cl_env)
    uvw, freq, vis, _, nx, cell, gcf = _fixed_case("separable", 8, 2, seed=9)
    gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, method="register",
                             deterministic=True)
    scaled = (vis * np.float32(scale)).astype(np.complex64)
    reference = grid_reference(uvw, freq, scaled.astype(np.complex128), gcf, nx, nx, cell)
    assert relative_error(gridder(uvw, freq, scaled), reference) < 1e-5
    assert not np.any(gridder(uvw, freq, np.zeros_like(scaled)))
    flags = np.ones(scaled.shape, bool)
    assert not np.any(gridder(uvw, freq, scaled, flags=flags))
    # and the next call after those still starts from a zeroed fixed-point grid
    assert relative_error(gridder(uvw, freq, scaled), reference) < 1e-5
    # a total beyond float32's range has no scale: refused, never saturated
    with pytest.raises(ValueError, match="exceeds float32's range"):
        gridder(uvw, freq, (vis * np.float32(1e36)).astype(np.complex64))


@pytest.mark.parametrize("method", [None, "register"])
def test_gridder_deterministic_plan_reuse_repeats_bitwise(cl_env, method):
    """grid_plan with one plan (major cycles) and accumulation into out=
    repeat bitwise too (the dispatcher's pick, and the register spread's
    fixed-point flushes, whose conversion adds into out=)."""
    from clgrid.gcf import separable_gcf
    if method == "register":
        _require_fixed_point(cl_env)
    uvw, freq, vis, weights, nx, cell = _table_observation(seed=13)
    gridder = clgrid.Gridder(cl_env.queue, separable_gcf(6, 8), nx, nx, cell, npol=2,
                             deterministic=True, method=method)
    plan = gridder.plan(uvw, freq)
    first = gridder.grid_plan(plan, vis, weights)
    assert np.array_equal(first, gridder(uvw, freq, vis, weights))
    assert np.array_equal(first, gridder.grid_plan(plan, vis, weights))
    twice = []
    for _ in range(2):
        out = gridder.zeros()
        gridder.grid_plan(plan, vis, weights, out=out, return_device=True)
        twice.append(gridder.grid_plan(plan, vis, weights, out=out))
    assert np.array_equal(twice[0], twice[1])
    assert np.max(np.abs(twice[0] - 2 * first)) < 1e-6 * np.max(np.abs(first))


def test_gridder_deterministic_default_and_conflicts(cl_env):
    from clgrid.core.register import fixed_point_possible
    from clgrid.gcf import separable_gcf
    from clgrid.gridders.dispatch import choose
    gcf = separable_gcf(6, 4)
    default = clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3)
    # the documented default: reproducible exactly where the tile spread runs
    assert default.method == choose(cl_env.profile, 6, 1).method
    assert default.deterministic == (default.method == "tiles")
    assert default.deterministic == (cl_env.profile.device_type == "cpu"
                                     or cl_env.profile.atomic_f32 == "cas")
    assert not clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, method="register").deterministic
    fixed_ok, why = fixed_point_possible(cl_env.profile, np.float32)
    if fixed_ok:   # register accumulation asked for: its fixed-point flushes
        forced = clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True,
                                method="register", count_flushes=True,
                                register_params={"wg_size": 64})
        assert forced.deterministic and forced.atomic_path == "fixed64"
        with pytest.raises(ValueError, match="atomics= picks the float atomics"):
            clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True,
                           method="register", atomics="cas")
    else:
        with pytest.raises(ValueError, match="deterministic=True with method 'register' needs "
                                             "fixed-point sums"):
            clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True,
                           method="register")
    picked = clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True)
    conflicts = (dict(atomics="cas"), dict(count_flushes=True),
                 dict(register_params={"wg_size": 64}))
    for conflict in conflicts if picked.method == "tiles" else conflicts[:1]:
        with pytest.raises(ValueError, match="shape the register spread|picks the float"):
            clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True, **conflict)
    # the tuning cache's register geometry: the register spread's (ignored by the tiles)
    assert clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic=True,
                          register_params="auto").deterministic
    with pytest.raises(TypeError, match="deterministic"):
        clgrid.Gridder(cl_env.queue, gcf, 64, 64, 1e-3, deterministic="yes")


@pytest.mark.parametrize("table", ["separable", "complex-separable", "full"])
def test_gridder_deterministic_beyond_the_nearest_neighbours(cl_env, table):
    """Wider than a tile reaching only its nearest neighbours' bins
    (max_table_support + 1; forced GPU-shaped tiles on CPUs, which reach
    three neighbours): the tile spread still runs, matches the float64
    reference and repeats bitwise."""
    from clgrid.core.table import max_table_support
    from clgrid.gcf import separable_gcf, w_projection_gcf
    from gridder_reference import grid_reference, random_vis, relative_error, setup_case
    limit = max_table_support(cl_env.profile)
    assert limit == (64 if cl_env.profile.device_type == "cpu" and cl_env.profile.fp64
                     and cl_env.profile.vector_kernels else 33)
    support = limit + 1 if cl_env.profile.device_type != "cpu" else 48
    rng = np.random.default_rng(support)
    nx = ny = 2 * support + 32
    freq = np.array([1.0e9, 1.05e9])
    uvw, cell = setup_case(rng, nx, ny, 40 if cl_env.tiny else 150, support, w_max_m=200.0)
    if table == "full":
        gcf = w_projection_gcf(support, 2, 3, 200.0 * freq.max() / 299_792_458.0, nx * cell)
    else:
        gcf = separable_gcf(support, 2)
        if table == "complex-separable":
            ramp = np.exp(0.3j * np.arange(support))
            gcf = dataclasses.replace(gcf, table_u=gcf.table_u * ramp, table_v=gcf.table_v)
    vis = random_vis(rng, (uvw.shape[0], freq.size, 2))
    reference = grid_reference(uvw, freq, vis, gcf, nx, ny, cell)
    shapes = [None] if cl_env.profile.device_type != "cpu" else [
        clgrid.TileShape(16, 32, 96), clgrid.TileShape(8, 8, 64, groups=4)]
    for tiles in shapes:
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2, deterministic=True,
                                 method="tiles", tiles=tiles)
        assert gridder.method == "tiles" and gridder.deterministic
        assert gridder.engine.tiles.reach(support) > 1
        first = gridder(uvw, freq, vis.astype(np.complex64))
        assert relative_error(first, reference) < 1e-5, tiles
        assert np.array_equal(first, gridder(uvw, freq, vis.astype(np.complex64)))
    # without the guarantee: register accumulation, the faster
    if support > limit:
        wide = clgrid.Gridder(cl_env.queue, gcf, nx, ny, cell, npol=2)
        assert wide.method == "register" and not wide.deterministic
    if cl_env.profile.device_type == "cpu" and limit == 64 and table == "full":
        support = limit + 1            # the CPUs' default above the vector tile: 32 x 32
        nx = ny = 2 * support + 32
        gcf = separable_gcf(support, 2)
        reference = grid_reference(uvw, freq, vis, gcf, nx, ny, cell * 0.5)
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, ny, cell * 0.5, npol=2,
                                 deterministic=True, method="tiles")
        assert gridder.engine.tiles == clgrid.TileShape(32, 32)
        assert relative_error(gridder(uvw, freq, vis.astype(np.complex64)), reference) < 1e-5


def test_gridder_deterministic_stages_fewer_points_where_local_memory_is_short(cl_env):
    """Real separable W 128: 32 x 32 lane tiles staging 1544 B a point, 32
    of them 49408 B, more than the H200's 48 KiB of local memory: the batch
    shrinks to fit (where it must), and the grid matches the reference,
    bitwise-repeatably."""
    from clgrid.core.table import staging_bytes
    from clgrid.gcf import separable_gcf
    from gridder_reference import grid_reference, random_vis, relative_error, setup_case
    support = 128
    rng = np.random.default_rng(support)
    nx = ny = 2 * support + 32
    freq = np.array([1.0e9, 1.05e9])
    uvw, cell = setup_case(rng, nx, ny, 40, support)
    gcf = separable_gcf(support, 2)
    vis = random_vis(rng, (uvw.shape[0], freq.size, 1))
    gridder = clgrid.Gridder(cl_env.queue, gcf, nx, ny, cell, deterministic=True,
                             tiles=clgrid.TileShape(32, 32))
    tiles, grid = gridder.engine.tiles, gridder.table_grid
    assert staging_bytes(grid, tiles) <= cl_env.profile.local_mem_bytes
    assert (tiles.batch == 0) == (staging_bytes(grid, clgrid.TileShape(32, 32))
                                  <= cl_env.profile.local_mem_bytes)
    first = gridder(uvw, freq, vis.astype(np.complex64))
    assert relative_error(first, grid_reference(uvw, freq, vis, gcf, nx, ny, cell)) < 1e-5
    assert np.array_equal(first, gridder(uvw, freq, vis.astype(np.complex64)))


def test_dispatcher_picks_fixed_point_register_sums_for_determinism_on_fake_profiles():
    """GPUs with native float atomics and 64-bit integer atomics (an H100):
    the register spread with fixed-point flushes, at every support; CPUs
    above the vector tile too; float64 grids keep the tiles."""
    from fake_profiles import fake
    from clgrid.gridders.dispatch import choose
    gpu = fake()
    for support in (8, 33, 34, 128):
        choice = choose(gpu, support, 4, deterministic=True)
        assert choice.method == "register" and choice.fixed_point and choice.tiles is None
    assert choose(gpu, 8, 4, separable=False, deterministic=True).fixed_point
    # no local memory for tiles: the register spread, reproducible all the same
    assert choose(fake(local_mem_bytes=2048), 128, 4, deterministic=True).fixed_point
    assert choose(gpu, 8, 4, np.float64, deterministic=True).method == "tiles"
    cpu = fake(device_type="cpu", atomic_f32="cas")
    assert choose(cpu, 64, 1, deterministic=True).tiles == clgrid.TileShape(64, 64,
                                                                            vector=True)
    assert choose(cpu, 65, 1, deterministic=True).fixed_point


def test_dispatcher_picks_tiles_for_determinism_without_int64_atomics():
    from fake_profiles import POCL, fake
    from clgrid.gridders.dispatch import choose
    gpu = fake(extensions=frozenset({"cl_khr_fp64"}))
    assert choose(gpu, 8, 4).method == "register"            # native atomics: register
    choice = choose(gpu, 8, 4, deterministic=True)
    assert choice.method == "tiles" and "deterministic" in choice.reasons[-1]
    assert "no 64-bit integer atomics" in choice.reasons[0]
    assert choose(gpu, 33, 4, deterministic=True).tiles == clgrid.TileShape(32, 32, 2048)
    # without fp64 too (float-float positions, compensated sums)
    assert choose(fake(fp64=False, extensions=frozenset()), 8, 4,
                  deterministic=True).method == "tiles"
    # wider: 32 x 32 tiles reading more neighbours' bins, while the staging fits
    wide = choose(gpu, 34, 4, deterministic=True)
    assert wide.tiles == clgrid.TileShape(32, 32, 2048) and wide.tiles.reach(34) == 2
    assert "2 neighbours' per axis" in wide.reasons[-1]
    assert choose(gpu, 128, 4, separable=False, deterministic=True).tiles.reach(128) == 4
    # separable W 128: 2056 B a point staged, 16 at a time in 48 KiB, none in 2 KiB
    assert choose(gpu, 128, 4, deterministic=True).method == "tiles"
    small = dataclasses.replace(gpu, local_mem_bytes=2048)
    with pytest.raises(ValueError, match="deterministic=True needs the tile spread, impossible "
                                         "on 'fake': its 32x32 tile needs 2056 B of local "
                                         "memory staging 1 points"):
        choose(small, 128, 4, deterministic=True)
    cpu = fake(device_type="cpu", atomic_f32="cas", extensions=frozenset())
    assert choose(cpu, 65, 1, deterministic=True).tiles == clgrid.TileShape(32, 32)
    old_pocl = fake(device_type="cpu", platform_name=POCL, driver_version="3.0-rc2",
                    extensions=frozenset())
    assert choose(old_pocl, 34, 1, deterministic=True).tiles == clgrid.TileShape(32, 32)
    with pytest.raises(ValueError, match="deterministic=True needs the tile spread"):
        choose(small, 8, 4, deterministic=True)
    with pytest.raises(ValueError, match="deterministic=True with method 'register' needs "
                                         "fixed-point sums"):
        choose(gpu, 8, 4, method="register", deterministic=True)


def test_streaming_gridder_deterministic_repeats_bitwise(cl_env):
    from clgrid.gcf import separable_gcf
    uvw, freq, vis, weights, nx, cell = _table_observation(seed=8)
    gcf = separable_gcf(7, 8)

    def make():
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True)
        return clgrid.StreamingGridder(gridder, chunk_records=700)

    streaming, grid = _repeat_bitwise(make, lambda s: s(uvw, freq, vis, weights))
    assert streaming.last_stats["n_chunks"] > 2
    whole = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2,
                           deterministic=True)(uvw, freq, vis, weights)
    assert np.max(np.abs(grid - whole)) < 1e-5 * np.max(np.abs(whole))


@pytest.mark.parametrize("tiles", [None, dict(tile_u=16, lanes=16)], ids=["records", "tiles"])
def test_degridder_repeats_bitwise(cl_env, tiles):
    from clgrid.gcf import separable_gcf
    from gridder_reference import degrid_reference
    uvw, freq, _, weights, nx, cell = _table_observation(seed=9, nrow=600)
    gcf = separable_gcf(8, 8)
    rng = np.random.default_rng(10)
    grid = (rng.normal(size=(2, nx, nx)) + 1j * rng.normal(size=(2, nx, nx))).astype(np.complex64)

    def make():
        return clgrid.Degridder(cl_env.queue, gcf, nx, nx, cell, npol=2, tiles=tiles)

    degridder, vis = _repeat_bitwise(make, lambda d: d(grid, uvw, freq, weights))
    ratio = degridder.last_stats["compression_ratio"]
    assert ratio > 1.0 if tiles is None else ratio == 1.0
    reference = degrid_reference(grid.astype(np.complex128), uvw, freq, gcf, nx, nx, cell,
                                 weights)
    assert np.max(np.abs(vis - reference)) < 1e-5 * np.max(np.abs(reference))


# --- weighting and the imaging chain -------------------------------------------------------

@pytest.mark.parametrize("method", ["fixed", "sorted"])
@pytest.mark.parametrize("scheme", ["uniform", "briggs"])
def test_weighting_repeats_bitwise_and_matches_reference(cl_env, method, scheme):
    from clgrid.imaging.weighting import ImageWeighting
    from weighting_reference import weights_reference
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
grids = []
for tiles in (dict(tile_u=8, lanes=8), dict(tile_u=8, lanes=8, chunk_points=4, groups=2)):
    gridder = clgrid.Gridder(queue, separable_gcf(5, 2), 16, 16, 1.0 / (16 * 20.0),
                             deterministic=True, tiles=tiles)
    assert gridder.method == "tiles" and gridder.deterministic
    grids.append(gridder(uvw, [1e8], vis))
    assert np.array_equal(grids[-1], gridder(uvw, [1e8], vis))
assert np.abs(grids[0]).max() > 0 and np.allclose(grids[0], grids[1], rtol=1e-5, atol=1e-5)
# a kernel wider than the tile: each tile reads two neighbours' bins per axis
wide = clgrid.Gridder(queue, separable_gcf(11, 2), 24, 24, 1.0 / (24 * 20.0),
                      deterministic=True, tiles=dict(tile_u=8, lanes=8, chunk_points=4))
assert wide.engine.tiles.reach(11) == 2
wide_grid = wide(uvw, [1e8], vis)
assert np.abs(wide_grid).max() > 0 and np.array_equal(wide_grid, wide(uvw, [1e8], vis))
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

"""Dispatcher: the spread (tiles or register) and its geometry from fake device
profiles, ``clgrid devices --explain``, the tuning cache read by
Gridder(register_params='auto'), and Gridder's default on the real devices."""

import dataclasses

import numpy as np
import pytest

from clgrid.cli import main as cli_main
from clgrid.core.plan import TileShape
from clgrid.core.register import RegisterParams, default_register_params
from clgrid.core.table import TableGrid, fit_staging, staging_bytes
from clgrid.gridders.dispatch import (METHODS, Choice, choose, cpu_vector_tile, explain,
                                      method_for, tiles_possible)
from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.core.tuning import register as register_tuning

from fake_profiles import BASE, POCL, fake


def _local_bytes(support, tiles, precision=np.float32, separable=True):
    """Local memory of the tile spread's work-group for a complex table."""
    grid = TableGrid(2, 2, 1.0, support, 1, 1, 0.0, separable, False, True, np.dtype(precision))
    return staging_bytes(grid, tiles)


def _check_geometry(choice, profile, support, npol=4, precision=np.float32):
    """The chosen spread fits the device: a tile's work-group and local
    memory, the register spread's default work-group."""
    limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
    assert choice.method in METHODS
    if choice.method == "tiles":
        tiles = choice.tiles
        assert isinstance(tiles, TileShape)
        assert support <= min(tiles.tile_u, tiles.lanes) + 1      # halo of one tile
        if tiles.vector:
            assert profile.device_type == "cpu" and profile.vector_kernels
        else:
            assert tiles.lanes * tiles.groups <= limit
            assert _local_bytes(support, tiles, precision) <= profile.local_mem_bytes
    else:
        assert choice.tiles is None
        params = default_register_params(profile, support, npol, True)
        params.validate(npol)
        assert params.wg_size <= limit


def test_gpu_with_native_atomics_accumulates_in_registers():
    for path in ("native-ptx", "native-cl"):
        profile = fake(atomic_f32=path)
        for support in (8, 32, 64, 128):
            choice = choose(profile, support, 4)
            assert choice.method == "register" and choice.tiles is None, choice.reasons
            assert ("native float atomics" in choice.reasons[-1] if support <= 33
                    else "wider than the tiles take (33)" in choice.reasons[-1])
            _check_geometry(choice, profile, support)
            assert method_for(profile, support) == "register"


def test_gpu_without_native_atomics_tiles():
    profile = fake(atomic_f32="cas", atomic_f64="cas")
    for support, tiles in ((8, TileShape(8, 8, 4096, groups=4)), (9, TileShape(8, 8, 4096,
                                                                                groups=4)),
                           (16, TileShape(16, 32, 2048)), (17, TileShape(16, 32, 2048)),
                           (32, TileShape(32, 32, 2048)), (33, TileShape(32, 32, 2048))):
        choice = choose(profile, support, 4)
        assert choice.method == "tiles" and choice.tiles == tiles, (support, choice)
        assert "without native float atomics (cas)" in choice.reasons[-1]
        _check_geometry(choice, profile, support)
    # wider than the GPU tiles take: register accumulation with CAS atomics
    choice = choose(profile, 34, 4)
    assert choice.method == "register" and "wider than the tiles take (33)" in choice.reasons[-1]
    assert method_for(profile, 34) == "register"


@pytest.mark.parametrize("max_wg", [4096, 8192])
def test_cpu_vector_tile_and_huge_work_group_limits(max_wg):
    profile = fake(device_type="cpu", atomic_f32="native-cl", max_work_group_size=max_wg,
                   max_work_item_sizes=(max_wg, max_wg, max_wg), local_mem_bytes=256 << 10,
                   compute_units=16, warp_size=1, platform_name="Intel(R) OpenCL")
    for support, edge in ((8, 16), (16, 16), (17, 32), (32, 32), (33, 64), (64, 64)):
        assert cpu_vector_tile(profile, support)
        choice = choose(profile, support, 4)
        assert choice.method == "tiles" and choice.tiles == TileShape(edge, edge, vector=True)
        assert "cpu" in choice.reasons[-1] and "the vector tile" in choice.reasons[-1]
        _check_geometry(choice, profile, support)
    # wider than the vector tile: register accumulation, CPU defaults (not the 8192 limit)
    assert not cpu_vector_tile(profile, 65)
    choice = choose(profile, 65, 4)
    assert choice.method == "register" and "wider than the tiles take (64)" in choice.reasons[-1]
    assert default_register_params(profile, 65, 4, True) == RegisterParams(4, 4, 64, 64, 4096)
    # native float atomics do not move a CPU off the tiles
    assert method_for(profile, 16) == "tiles"
    _check_geometry(choice, profile, 65)


def test_cpu_without_the_vector_tile_takes_lane_tiles():
    """PyPI's PoCL 3.0 cannot build the vector tile, and a CPU without fp64
    does not take it (its totals are double): lane tiles up to support 33."""
    for profile in (fake(device_type="cpu", platform_name=POCL, driver_version="3.0-rc2",
                         atomic_f32="cas", local_mem_bytes=256 << 10),
                    fake(device_type="cpu", fp64=False, atomic_f32="cas",
                         local_mem_bytes=256 << 10)):
        for support, tiles in ((8, TileShape(8, 8)), (16, TileShape(16, 16)),
                               (33, TileShape(32, 32))):
            assert not cpu_vector_tile(profile, support)
            choice = choose(profile, support, 4)
            assert choice.method == "tiles" and choice.tiles == tiles
            assert "lane tiles" in choice.reasons[-1]
            _check_geometry(choice, profile, support)
        assert choose(profile, 34, 4).method == "register"     # the faster there
        assert tiles_possible(profile, 34) == (True, "")         # 32 x 32, two neighbours
        assert choose(profile, 34, 4, deterministic=True, method="tiles").tiles == \
            TileShape(32, 32)
        assert choose(profile, 34, 4, deterministic=True).fixed_point   # the faster there


def test_tiny_local_memory_falls_back_to_register():
    # lane tiles of 8 x 8 for support 8: 8 points of 8 + 8 * 16 bytes = 1088 B;
    # 1 KiB takes them 4 at a time
    lanes = dict(device_type="cpu", platform_name=POCL, driver_version="3.0-rc2",
                 atomic_f32="cas")
    assert _local_bytes(8, TileShape(8, 8)) == 1088
    grid = TableGrid(2, 2, 1.0, 8, 1, 1, 0.0, True, False, True, np.dtype(np.float32))
    assert fit_staging(grid, TileShape(8, 8), fake(local_mem_bytes=1024, **lanes)) == \
        TileShape(8, 8, batch=4)
    assert choose(fake(local_mem_bytes=1024, **lanes), 8, 4).method == "tiles"
    # one point at a time does not fit 128 B: 136 B
    profile = fake(local_mem_bytes=128, **lanes)
    possible, why = tiles_possible(profile, 8)
    assert not possible and why == ("its 8x8 tile needs 136 B of local memory staging 1 "
                                    "points at a time, the device has 128")
    choice = choose(profile, 8, 4)
    assert choice.method == "register" and choice.tiles is None
    assert any("tiles impossible" in reason and "local memory" in reason
               for reason in choice.reasons)
    with pytest.raises(ValueError, match="method 'tiles' needs the tile spread, impossible"):
        choose(profile, 8, 4, method="tiles")
    # deterministic: the register spread's fixed-point flushes, or nothing
    assert choose(profile, 8, 4, deterministic=True).fixed_point
    with pytest.raises(ValueError, match="deterministic=True needs the tile spread"):
        choose(dataclasses.replace(profile, extensions=frozenset()), 8, 4, deterministic=True)
    # a narrower table needs less: 8 + 4 * 16 = 72 B a point fits
    assert tiles_possible(profile, 4) == (True, "")
    assert choose(profile, 4, 4).method == "tiles"
    # float64 tables need twice the weights' bytes: 8 + 4 * 32 = 136 B a point
    assert not tiles_possible(profile, 4, np.float64)[0]
    assert tiles_possible(fake(local_mem_bytes=136, **lanes), 4, np.float64) == (True, "")


def test_small_local_memory_on_a_gpu():
    # GPU tiles of support 8: 32 staged points (8 lanes x 4 groups) of 136 B
    # and three extra tile copies of 8 x 8 x 16 B: 7424 B
    profile = fake(atomic_f32="cas", local_mem_bytes=8 << 10)
    assert _local_bytes(8, TileShape(8, 8, 4096, groups=4)) == 7424
    assert choose(profile, 8, 4).method == "tiles"
    # W 16: 32 x (8 + 16 * 16) = 8448 B, so 16 points at a time (4224 B)
    assert _local_bytes(16, TileShape(16, 32, 2048)) == 8448
    choice = choose(profile, 16, 4)
    assert choice.method == "tiles" and tiles_possible(profile, 16) == (True, "")
    grid = TableGrid(2, 2, 1.0, 16, 1, 1, 0.0, True, False, True, np.dtype(np.float32))
    assert fit_staging(grid, choice.tiles, profile).batch == 16
    _check_geometry(choose(profile, 8, 4), profile, 8)
    # a full (non-separable) table stages less a point
    assert tiles_possible(profile, 16, separable=False) == (True, "")


def test_intel_gpu_without_warp_query():
    profile = fake(vendor="Intel", warp_size=1, atomic_f32="cas", max_work_group_size=512,
                   max_work_item_sizes=(512, 512, 512), local_mem_bytes=64 << 10)
    choice = choose(profile, 32, 4)
    assert choice.method == "tiles" and choice.tiles == TileShape(32, 32, 2048)
    _check_geometry(choice, profile, 32)
    register = choose(profile, 32, 4, method="register")
    assert register.reasons == ("forced by method=",)
    _check_geometry(register, profile, 32)


def test_forced_method_and_describe():
    choice = choose(BASE, 8, 1, method="tiles")
    assert choice == Choice("tiles", TileShape(8, 8, 4096, groups=4), ("forced by method=",))
    assert choice.describe() == f"tiles {choice.tiles}: forced by method="
    register = choose(BASE, 8, 1)
    assert register.describe() == ("register: gpu with native float atomics (native-ptx): "
                                   "register accumulation")
    assert choose(BASE, 34, 1, method="tiles").tiles == TileShape(32, 32, 2048)
    # W 128 stages 2056 B a point: 16 at a time in 48 KiB, not one in 2 KiB
    assert choose(BASE, 128, 1, method="tiles").tiles == TileShape(32, 32, 2048)
    with pytest.raises(ValueError, match="method 'tiles' needs the tile spread, impossible on "
                                         "'fake': its 32x32 tile needs 2056 B of local memory "
                                         "staging 1 points"):
        choose(fake(local_mem_bytes=2048), 128, 1, method="tiles")
    assert choose(BASE, 34, 1, method="register").method == "register"


def test_deterministic_choice():
    """deterministic=True: the register spread with fixed-point flushes where
    it is the faster spread and the device has 64-bit integer atomics, the
    tile spread elsewhere (float64 grids, no int64 atomics, CPUs' vector
    tile)."""
    assert choose(BASE, 8, 4).method == "register"
    choice = choose(BASE, 8, 4, deterministic=True)
    assert choice.method == "register" and choice.fixed_point and choice.deterministic
    assert "64-bit fixed-point flushes" in choice.reasons[-1]
    assert choice.describe().startswith("register fixed-point: deterministic=True")
    assert not choose(BASE, 8, 4).fixed_point and not choose(BASE, 8, 4).deterministic
    assert choose(BASE, 8, 4, deterministic=True, method="register").fixed_point
    assert method_for(BASE, 8, deterministic=True) == "tiles"
    forced = choose(BASE, 8, 4, deterministic=True, method="tiles")
    assert forced.method == "tiles" and not forced.fixed_point and forced.deterministic
    # float64 grids and devices without 64-bit integer atomics: the tiles
    for profile, precision, why in (
            (BASE, np.float64, "resolves a float32 grid, not a float64 one"),
            (fake(extensions=frozenset()), np.float32, "has no 64-bit integer atomics")):
        choice = choose(profile, 8, 4, precision, deterministic=True)
        assert choice.method == "tiles" and not choice.fixed_point
        assert why in choice.reasons[0] and "deterministic=True" in choice.reasons[-1]
        with pytest.raises(ValueError, match="deterministic=True with method 'register' needs "
                                             "fixed-point sums: .*" + why):
            choose(profile, 8, 4, precision, deterministic=True, method="register")
    # CPUs: the vector tile (the faster there) up to W 64, fixed point above
    cpu = fake(device_type="cpu", atomic_f32="native-cl")
    assert choose(cpu, 48, 1, deterministic=True).method == "tiles"
    assert choose(cpu, 72, 1, deterministic=True).fixed_point


def test_no_fp64_gives_a_clear_error():
    profile = fake(fp64=False, atomic_f64="none")
    with pytest.raises(ValueError, match="no double precision"):
        choose(profile, 8, 1, np.float64)
    assert choose(profile, 8, 1, np.float32).method == "register"


def test_unknown_method():
    with pytest.raises(ValueError, match="method must be one of"):
        choose(BASE, 8, 1, method="fastest")
    for gone in ("scatter", "tiled", "image", "core"):
        with pytest.raises(ValueError, match="method must be one of"):
            choose(BASE, 8, 1, method=gone)


def test_explain_rows():
    cpu = fake(device_type="cpu", atomic_f32="cas", platform_index=1, device_index=0)
    row = explain(cpu, 32, 4)                          # the vector tile
    assert row["id"] == "1:0" and row["device"] == "fake: fake"
    assert row["method"] == "tiles" and "cpu" in row["why"] and "vector tile" in row["why"]
    assert row["geometry"] == ("tile_u=32 lanes=32 chunk_points=2147483648 vector=True "
                               "plane_block=1 groups=1 kernel_eval=exp batch=0")
    row = explain(cpu, 72, 4)                          # wider: register, CPU defaults
    assert row["method"] == "register" and "wider than the tiles take" in row["why"]
    assert row["geometry"] == ("block_u=4 block_v=4 wg_size=64 batch=64 points_per_group=4096 "
                               "pol_block=0")
    # wider than the vector rows take: separable tables by register blocks
    assert row["degrid"] == "register blocks 4x4, 4 pol, groups of 64, gcf buffer"
    assert row["gcf_read"].startswith("buffer (cpu: no texture units")
    assert explain(cpu, 32, 4)["degrid"] == "a work-item a record, rows as vectors"
    row = explain(fake(), 64, 4)                       # a GPU: register blocks from W 32
    assert row["degrid"] == "register blocks 4x4, 2 pol, groups of 128, gcf buffer"
    assert row["gcf_read"].startswith("buffer (gpu: the buffer's reads measured faster")
    assert explain(fake(), 16, 4)["degrid"] == "a work-group of 128 a record"
    assert explain(fake(), 16, 4)["deterministic"] == "register, 64-bit fixed-point flushes"
    assert explain(fake(extensions=frozenset()), 8, 4)["deterministic"] == "tiles, tile 8x8 g4"
    row = explain(fake(fp64=False), 32, 4, np.float64)
    assert row["method"] == "-" and "double precision" in row["why"]
    row = explain(fake(build_problem="unknown target CPU"), 32, 4)
    assert row["method"] == "-" and "unusable" in row["why"]
    row = explain(fake(), 64, 4)                       # a GPU with fp64 and native atomics
    assert row["method"] == "register" and "wider than the tiles take" in row["why"]
    assert row["geometry"].startswith("block_u=4 block_v=4 wg_size=64")
    row = explain(fake(atomic_f32="cas"), 16, 4)
    assert row["method"] == "tiles" and "without native float atomics" in row["why"]
    assert set(row) == {"id", "device", "method", "geometry", "why", "gcf_read", "degrid",
                        "deterministic"}
    assert set(explain(fake(build_problem="unknown target CPU"), 32, 4)) == set(row)


def test_explain_imaging_rows():
    """What vis2dirty / dirty2vis run per device: the tile, and float-float
    positions in single precision only where there is no fp64."""
    from clgrid.core.plan import explain_imaging
    row = explain_imaging(fake())
    assert row["tile"] == ("8x8 lanes, 8 group(s) (with w: 1 a plane, 8 w planes a block), "
                           "Horner taps") and row["positions"] == "double"
    assert row["precisions"] == "single, double"
    row = explain_imaging(fake(fp64=False))
    assert row["positions"].startswith("float-float") and row["precisions"] == "single"
    cpu = fake(device_type="cpu")                       # not PoCL 3.0: vector kernels
    assert explain_imaging(cpu)["tile"] == "16x16 vector, 7 w planes a block, Horner taps"
    assert explain_imaging(cpu, 12)["tile"] == "16x16 vector, 4 w planes a block, Horner taps"
    assert explain_imaging(dataclasses.replace(cpu, fp64=False))["tile"] == \
        "8x8 lanes, 1 group(s)"                          # the vector tile totals in double
    assert explain_imaging(fake(build_problem="unknown target CPU"))["tile"] == "-"
    from clgrid.core.spread import Interpolator, explain_interpolation
    assert explain_interpolation(fake()) == "a work-item a visibility"
    assert explain_interpolation(cpu) == (
        f"64 points a work-item; with w a tile a work-item from a window of its cells "
        f"(tiles of >= {Interpolator.WINDOW_MIN_POINTS} points; dense ones in chunks)")


def test_cli_devices_explain(capsys):
    assert cli_main(["devices", "--explain", "--support", "16"]) == 0
    out = capsys.readouterr().out
    assert "Gridder's spread (and Degridder's records) for support 16, npol 4" in out
    header = out.split("Gridder's spread")[1].splitlines()[1]
    assert header.split() == ["id", "device", "method", "geometry", "why", "gcf_read",
                              "degrid", "deterministic"]
    assert "tiles" in out or "register" in out
    imaging = out.split("vis2dirty / dirty2vis (the imaging core)")[1].splitlines()[1]
    assert imaging.split() == ["id", "device", "tile", "positions", "precisions", "dirty2vis"]


def test_default_on_real_device_follows_choose(cl_env):
    """Gridder's default spread is what choose() decides for the device, and
    the deterministic flag says whether it is the tile spread."""
    for support in (8, 72):
        gcf = separable_gcf(support, 4)
        gridder = Gridder(cl_env.queue, gcf, 128, 128, 1e-3, npol=2)
        expected = choose(cl_env.profile, support, 2, np.float32)
        assert gridder.choice == expected and gridder.method == expected.method
        assert gridder.choice.reasons
        assert gridder.deterministic == (gridder.method == "tiles")
        assert gridder.atomic_path == ("none" if gridder.method == "tiles"
                                       else gridder.engine.spreader.atomic_path)
        # deterministic=False never changes the choice, only asks for no guarantee
        assert Gridder(cl_env.queue, gcf, 128, 128, 1e-3, npol=2,
                       deterministic=False).method == gridder.method
    # register parameters with the tile spread, a tile with the register spread: errors
    gcf = separable_gcf(8, 4)
    if choose(cl_env.profile, 8, 1).method == "tiles":
        with pytest.raises(ValueError, match="register_params= shape the register spread"):
            Gridder(cl_env.queue, gcf, 64, 64, 1e-3, register_params={"wg_size": 32})
    with pytest.raises(ValueError, match="tiles= shapes the tile spread"):
        Gridder(cl_env.queue, gcf, 64, 64, 1e-3, method="register", tiles=TileShape(8, 8))


def test_register_params_auto_reads_the_tuning_cache(cl_env, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    profile = cl_env.profile
    gcf = separable_gcf(12, 4)

    def auto(npol=2, support_gcf=gcf, precision=np.float32):
        return Gridder(cl_env.queue, support_gcf, 64, 64, 1e-3, npol=npol, precision=precision,
                       method="register", register_params="auto")

    # untuned: the spread's defaults
    untuned = auto().engine.spreader.params
    assert untuned == default_register_params(profile, 12, 2, True, gcf.real_tables)
    tuned = RegisterParams(1, 2, 32, 16, 512)
    assert tuned != untuned
    register_tuning.store_register_params(profile, 12, 2, np.float32, True, tuned, 0.5)
    assert register_tuning.cached_register_params(profile, 12, 2, np.float32, True) == tuned
    assert register_tuning.parameter_key(2, np.float32, True, 12) == \
        "register|npol=2|float32|separable|support<=16"
    assert auto().engine.spreader.params == tuned
    # the same support bucket (9..16) shares the entry
    assert auto(support_gcf=separable_gcf(16, 4)).engine.spreader.params == tuned
    # another npol, bucket or precision is not affected
    assert auto(npol=1).engine.spreader.params == default_register_params(
        profile, 12, 1, True, gcf.real_tables)
    assert auto(support_gcf=separable_gcf(8, 4)).engine.spreader.params == \
        default_register_params(profile, 8, 2, True, gcf.real_tables)
    if profile.fp64:
        assert auto(precision=np.float64).engine.spreader.params == untuned
    with pytest.raises(ValueError, match="register_params must be RegisterParams, a dict, "
                                         "'auto' or None"):
        Gridder(cl_env.queue, gcf, 64, 64, 1e-3, method="register", register_params="fast")


def test_vector_tiles_only_where_the_compiler_builds_them():
    """PyPI's PoCL 3.0 (LLVM 14) hangs or aborts on the vector kernels: its
    CPUs get the lane tiles by default, and a forced vector tile a clear error."""
    from clgrid.core.table import table_tiles
    from clgrid.core.tuning.tiles import tile_candidates
    old = fake(device_type="cpu", platform_name=POCL, driver_version="3.0-rc2")
    for profile in (fake(device_type="cpu", platform_name=POCL, driver_version="3.1+debian"),
                    fake(device_type="cpu", platform_name="Intel(R) OpenCL",
                         driver_version="2026.22")):
        assert profile.vector_kernels
        assert TileShape.for_device(profile, 8).vector and table_tiles(profile, 8).vector
        assert choose(profile, 8, 4).tiles.vector
    assert not old.vector_kernels
    assert TileShape.for_device(old, 8) == TileShape(8, 8)
    assert TileShape.for_device(old, 14) == TileShape(16, 16)
    assert not table_tiles(old, 8).vector and not choose(old, 8, 4).tiles.vector
    assert not any(shape.vector for shape in tile_candidates(old, 8, do_w=True))
    with pytest.raises(ValueError, match="cannot build the vector"):
        TileShape(16, 16, vector=True).check_device(old)

"""Dispatcher: strategy and launch geometry from fake device profiles, the
tuning-cache override, and Gridder(strategy='auto') on the real devices."""

import dataclasses

import numpy as np
import pytest

from clgrid.cli import main as cli_main
from clgrid.device.profiles import DeviceProfile
from clgrid.gridders.dispatch import choose, explain, image_possible
from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders import tuning

BASE = DeviceProfile(
    platform_name="Fake", device_name="fake", vendor="fake", driver_version="1",
    device_type="gpu", compute_units=132, max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64), warp_size=32, local_mem_bytes=48 * 1024,
    global_mem_bytes=80 << 30, max_alloc_bytes=20 << 30, image_support=True,
    image2d_max=(32768, 32768), image3d_max=(16384, 16384, 2048), fp64=True,
    atomic_f32="native-ptx", atomic_f64="native-ptx", opencl_c_version=(1, 2))


def fake(**changes) -> DeviceProfile:
    return dataclasses.replace(BASE, **changes)


def _check_geometry(choice, profile):
    limit = min(profile.max_work_group_size, profile.max_work_item_sizes[0])
    if choice.tiled is not None:
        assert choice.tiled.wg_size <= limit
        assert choice.tiled.local_bytes(4, 8) <= profile.local_mem_bytes - 1024
    if choice.scatter is not None:
        assert choice.scatter.wg_size <= limit


def test_gpu_with_native_atomics_scatters():
    for path in ("native-ptx", "native-cl"):
        profile = fake(atomic_f32=path)
        choice = choose(profile, 32, 4)
        assert choice.strategy == "scatter", choice.reasons
        assert "native float atomics" in choice.reasons[-1]
        _check_geometry(choice, profile)


def test_gpu_without_native_atomics_tiles():
    profile = fake(atomic_f32="cas", atomic_f64="cas", device_type="gpu")
    choice = choose(profile, 64, 4)
    assert choice.strategy == "tiled"
    assert (choice.tiled.tile_u, choice.tiled.rows_per_pass) == (32, 8)  # 256 work-items
    _check_geometry(choice, profile)


@pytest.mark.parametrize("max_wg", [4096, 8192])
def test_cpu_tiles_and_respects_huge_work_group_limits(max_wg):
    profile = fake(device_type="cpu", atomic_f32="native-cl", max_work_group_size=max_wg,
                   max_work_item_sizes=(max_wg, max_wg, max_wg), local_mem_bytes=256 << 10,
                   compute_units=16, warp_size=1)
    choice = choose(profile, 16, 4)
    assert choice.strategy == "tiled" and "cpu" in choice.reasons[-1]
    assert choice.tiled.rows_per_pass == 1 and choice.tiled.tile_u == 32
    scatter = choose(profile, 16, 4, strategy="scatter")
    assert scatter.scatter.wg_size <= 64          # CPU defaults, not the 8192 limit
    _check_geometry(choice, profile)


def test_tiny_local_memory_falls_back_to_scatter():
    profile = fake(device_type="cpu", atomic_f32="cas", local_mem_bytes=4096)
    choice = choose(profile, 16, 4)
    assert choice.strategy == "scatter"
    assert any("local memory" in reason for reason in choice.reasons)
    with pytest.raises(ValueError, match="tiled strategy impossible"):
        choose(profile, 16, 4, strategy="tiled")
    # one polarisation needs less: a 16 x 16 tile of float32 fits 4 KiB
    assert choose(profile, 16, 1).strategy == "tiled"


def test_small_local_memory_shrinks_tiles():
    profile = fake(atomic_f32="cas", local_mem_bytes=16 << 10)
    choice = choose(profile, 16, 4)
    assert choice.strategy == "tiled" and choice.tiled.tile_u == 16
    assert any("does not fit" in reason for reason in choice.reasons)
    _check_geometry(choice, profile)


def test_small_work_group_limit():
    profile = fake(atomic_f32="cas", max_work_group_size=16, max_work_item_sizes=(16, 16, 16))
    choice = choose(profile, 8, 2)
    assert choice.tiled.wg_size <= 16
    _check_geometry(choice, profile)


def test_intel_gpu_without_warp_query():
    profile = fake(vendor="Intel", warp_size=1, atomic_f32="cas", max_work_group_size=512,
                   max_work_item_sizes=(512, 512, 512), local_mem_bytes=64 << 10)
    choice = choose(profile, 32, 4)
    assert choice.strategy == "tiled" and choice.tiled.wg_size == 256
    _check_geometry(choice, profile)


def test_images():
    no_images = fake(image_support=False, image2d_max=(0, 0), image3d_max=(0, 0, 0))
    assert image_possible(no_images, 16, True) == (False, "the device has no image support")
    with pytest.raises(ValueError, match="no image support"):
        choose(no_images, 16, 1, strategy="image")
    with pytest.raises(ValueError, match="separable"):
        choose(BASE, 16, 1, separable=False, strategy="image")
    assert choose(BASE, 16, 1, strategy="image").image.position_oversample == 256
    # auto never picks images without a measurement, and ignores a cache
    # entry the device cannot honour
    assert choose(BASE, 16, 1).strategy == "scatter"
    tuned = {"strategy": "image", "seconds": {"image": 1.0, "scatter": 2.0}}
    assert choose(BASE, 16, 1, tuned=tuned).strategy == "image"
    assert choose(no_images, 16, 1, tuned=tuned).strategy == "scatter"


def test_tuning_cache_overrides_the_rule():
    cpu = fake(device_type="cpu", atomic_f32="cas", local_mem_bytes=256 << 10)
    tuned = {"strategy": "scatter", "seconds": {"scatter": 1.0, "tiled": 1.5}}
    choice = choose(cpu, 16, 4, tuned=tuned)
    assert choice.strategy == "scatter" and "tuning cache" in choice.reasons[-1]


def test_no_fp64_gives_a_clear_error():
    profile = fake(fp64=False, atomic_f64="none")
    with pytest.raises(ValueError, match="no double precision"):
        choose(profile, 8, 1, np.float64)
    assert choose(profile, 8, 1, np.float32).strategy == "scatter"


def test_unknown_strategy():
    with pytest.raises(ValueError, match="unknown strategy"):
        choose(BASE, 8, 1, strategy="fastest")


def test_explain_rows():
    row = explain(fake(device_type="cpu", atomic_f32="cas"), 32, 4)   # the vector tile
    assert row["strategy"] == "core" and "deterministic=None" in row["why"]
    assert "vector=True" in row["geometry"]
    row = explain(fake(device_type="cpu", atomic_f32="cas"), 72, 4)   # wider: tiled
    assert row["strategy"] == "tiled" and "cpu" in row["why"]
    row = explain(fake(fp64=False), 32, 4, np.float64)
    assert row["strategy"] == "-" and "double precision" in row["why"]
    row = explain(fake(build_problem="unknown target CPU"), 32, 4)
    assert row["strategy"] == "-" and "unusable" in row["why"]
    row = explain(fake(), 64, 4)                     # a GPU with fp64 and native atomics
    assert row["strategy"] == "core register" and "deterministic=None" in row["why"]
    assert "block_u=4 block_v=4 wg_size=64" in row["geometry"]


def test_cli_devices_explain(capsys):
    assert cli_main(["devices", "--explain", "--support", "16"]) == 0
    out = capsys.readouterr().out
    assert "strategy" in out and "why" in out


def test_auto_on_real_device_follows_choose(cl_env, tmp_path, monkeypatch):
    from clgrid.gridders.dispatch import core_by_default
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    # support 72: beyond the CPUs' core tiles, so there the dispatcher and its
    # tuning cache choose; where the core runs by default it comes first
    # (deterministic None or False; test_gridder_core.py)
    support = 72
    gcf = separable_gcf(support, 4)
    gridder = Gridder(cl_env.queue, gcf, 128, 128, 1e-3, npol=2, deterministic=False)
    # explicit scatter parameters imply the scatter strategy
    assert Gridder(cl_env.queue, gcf, 128, 128, 1e-3,
                   params={"wg_size": 32}).strategy == "scatter"
    if core_by_default(cl_env.profile, support, npol=2):
        assert gridder.strategy == "core" and not gridder.deterministic
        return
    assert gridder.strategy == choose(cl_env.profile, support, 2).strategy
    assert gridder.choice.reasons
    # a measured winner in the tuning cache is honoured
    other = "scatter" if gridder.strategy == "tiled" else "tiled"
    winner = tuning.store_strategy(cl_env.profile, support, 2, np.float32, True,
                                   {other: 1.0, gridder.strategy: 2.0})
    assert winner == other
    assert Gridder(cl_env.queue, gcf, 128, 128, 1e-3, npol=2,
                   deterministic=False).strategy == other


def test_vector_tiles_only_where_the_compiler_builds_them():
    """PyPI's PoCL 3.0 (LLVM 14) hangs or aborts on the vector kernels: its
    CPUs get the lane tiles by default, and a forced vector tile a clear error."""
    from clgrid.core.plan import TileShape
    from clgrid.core.table import table_tiles
    from clgrid.core.tuning import tile_candidates
    pocl = "Portable Computing Language"
    old = fake(device_type="cpu", platform_name=pocl, driver_version="3.0-rc2")
    for profile in (fake(device_type="cpu", platform_name=pocl, driver_version="3.1+debian"),
                    fake(device_type="cpu", platform_name="Intel(R) OpenCL",
                         driver_version="2026.22")):
        assert profile.vector_kernels
        assert TileShape.for_device(profile, 8).vector and table_tiles(profile, 8).vector
    assert not old.vector_kernels
    assert TileShape.for_device(old, 8) == TileShape(8, 8)
    assert TileShape.for_device(old, 14) == TileShape(16, 16)
    assert not table_tiles(old, 8).vector
    assert not any(shape.vector for shape in tile_candidates(old, 8, do_w=True))
    with pytest.raises(ValueError, match="cannot build the vector"):
        TileShape(16, 16, vector=True).check_device(old)

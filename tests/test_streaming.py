"""Streamed gridding equals the unchunked gridder (itself tested against the
float64 reference) for several chunk sizes, both transfer modes and every
strategy; oversized chunks are split, never a crash."""

import dataclasses

import numpy as np
import pytest

from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders.streaming import StreamingGridder, chunk_records
from clgrid.io.simulate import simulate_observation

from test_gridder_reference import C, grid_reference, random_vis

FREQ_HZ = np.array([1.0e9, 1.05e9, 1.1e9, 1.15e9])


def _observation(rng, nx, support, npol, tiny=False):
    uvw = simulate_observation(duration_h=1.0, integration_s=60.0,
                               n_baselines=3 if tiny else 30, seed=2)
    cell = 1.0 / (nx * 50.0)
    uv_max_m = 0.8 * (nx / 2 - support) * 50.0 * C / FREQ_HZ.max()
    uvw = uvw / np.abs(uvw[:, :2]).max() * uv_max_m
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape) < 0.05        # partial polarisation flags too
    return uvw, cell, vis, weights, flags


def _rel(result, reference):
    return np.max(np.abs(result - reference)) / np.max(np.abs(reference))


def test_chunk_records_equal_plan_records(cl_env):
    rng = np.random.default_rng(1)
    uvw, cell, vis, weights, flags = _observation(rng, 64, 6, 2)
    gridder = Gridder(cl_env.queue, separable_gcf(6, 4), 64, 64, cell, npol=2,
                      strategy="tiled")   # host records (the core has none)
    plan = gridder.plan(uvw, FREQ_HZ, flags)
    assert plan.compression_ratio > 1.0       # merged records exercise reduceat
    whole = plan.records(vis, weights, dtype=np.complex128)
    pieces = [chunk_records(plan, vis, weights, start, min(start + 37, plan.n_records),
                            np.complex128) for start in range(0, plan.n_records, 37)]
    assert np.array_equal(np.concatenate(pieces), whole)


@pytest.mark.parametrize("strategy", ["scatter", "tiled"])
@pytest.mark.parametrize("mode", ["queues", "mapped"])
def test_streamed_equals_unchunked(cl_env, strategy, mode):
    rng = np.random.default_rng(2)
    nx = 96
    uvw, cell, vis, weights, flags = _observation(rng, nx, 8, 4)
    gcf = separable_gcf(8, 8)
    gridder = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=4, strategy=strategy)
    vis32 = vis.astype(np.complex64)
    whole = gridder(uvw, FREQ_HZ, vis32, weights, flags)
    reference = grid_reference(uvw, FREQ_HZ, vis32, gcf, nx, nx, cell, weights, flags)
    assert _rel(whole, reference) < 1e-5
    n_records = gridder.last_stats["n_records"]
    for chunk in (1 + n_records // 7, 1000, n_records + 5):
        streamer = StreamingGridder(gridder, chunk_records=chunk, mode=mode)
        result = streamer(uvw, FREQ_HZ, vis32, weights, flags)
        assert streamer.last_stats["n_chunks"] == -(-n_records // min(chunk, n_records))
        assert _rel(result, whole) < 1e-6, chunk


def test_streamed_accumulates_and_auto_mode(cl_env):
    rng = np.random.default_rng(3)
    uvw, cell, vis, _, _ = _observation(rng, 64, 4, 1)
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 64, 64, cell)
    streamer = StreamingGridder(gridder, chunk_records=50)
    assert streamer.mode == ("mapped" if cl_env.profile.device_type == "cpu" else "queues")
    grid = streamer(uvw, FREQ_HZ, vis, return_device=True)
    streamer(uvw, FREQ_HZ, vis, out=grid, return_device=True, progress=False)
    assert _rel(grid.get(), 2 * gridder(uvw, FREQ_HZ, vis)) < 1e-6


def test_oversized_chunk_is_split(cl_env):
    rng = np.random.default_rng(4)
    uvw, cell, vis, _, _ = _observation(rng, 64, 4, 2)
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 64, 64, cell, npol=2)
    expected = gridder(uvw, FREQ_HZ, vis)
    # pretend the device allows 4 KiB allocations: 16-byte records -> 128 per chunk
    gridder.profile = dataclasses.replace(gridder.profile, max_alloc_bytes=4096)
    with pytest.warns(UserWarning, match="split"):
        streamer = StreamingGridder(gridder, chunk_records=10**9)
    assert streamer.chunk_records == 128
    result = streamer(uvw, FREQ_HZ, vis)
    assert streamer.last_stats["split"] and streamer.last_stats["n_chunks"] > 1
    assert _rel(result, expected) < 1e-6


def test_bad_arguments(cl_env):
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 32, 32, 1e-3)
    with pytest.raises(ValueError, match="mode"):
        StreamingGridder(gridder, mode="dma")
    with pytest.raises(ValueError, match="chunk_records"):
        StreamingGridder(gridder, chunk_records=0)
    with pytest.raises(TypeError):
        StreamingGridder("not a gridder")
    streamer = StreamingGridder(gridder)
    with pytest.raises(ValueError, match="NaN"):
        streamer(np.full((2, 3), np.nan), [1e9], np.zeros((2, 1, 1), np.complex64))


@pytest.mark.tiny
def test_tiny_streaming_both_modes(cl_env):
    """Small enough for Oclgrind: events across two queues and mapped buffers."""
    rng = np.random.default_rng(5)
    uvw, cell, vis, _, _ = _observation(rng, 16, 3, 1, tiny=True)
    uvw, vis = uvw[:12], vis[:12, :1]
    gridder = Gridder(cl_env.queue, separable_gcf(3, 2), 16, 16, cell, strategy="tiled")
    expected = grid_reference(uvw, FREQ_HZ[:1], vis, gridder.gcf, 16, 16, cell)
    for mode in ("queues", "mapped"):
        result = StreamingGridder(gridder, chunk_records=5, mode=mode)(uvw, FREQ_HZ[:1], vis)
        assert _rel(result, expected) < 1e-5

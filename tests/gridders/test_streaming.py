"""Streamed gridding (blocks of rows, one gridder call each, adding into one
grid) equals the unblocked gridder (itself tested against the float64
reference) for several block sizes and both spreads; a deterministic gridder
streams the same bits every run; oversized blocks are split, never a crash."""

import dataclasses

import numpy as np
import pytest

from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders.streaming import DEFAULT_CHUNK_RECORDS, StreamingGridder
from clgrid.io.simulate import simulate_observation

from gridder_reference import C, grid_reference, random_vis

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


@pytest.mark.parametrize("method", ["tiles", "register"])
def test_streamed_equals_unblocked(cl_env, method):
    rng = np.random.default_rng(2)
    nx = 96
    uvw, cell, vis, weights, flags = _observation(rng, nx, 8, 4)
    gcf = separable_gcf(8, 8)
    gridder = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=4, method=method)
    vis32 = vis.astype(np.complex64)
    whole = gridder(uvw, FREQ_HZ, vis32, weights, flags)
    stats = dict(gridder.last_stats)
    reference = grid_reference(uvw, FREQ_HZ, vis32, gcf, nx, nx, cell, weights, flags)
    assert _rel(whole, reference) < 1e-5
    n_rows, n_vis = uvw.shape[0], stats["n_visibilities"]
    assert n_vis == n_rows * FREQ_HZ.size
    for chunk in (1 + n_vis // 7, 1000, n_vis + 5):
        streamer = StreamingGridder(gridder, chunk_records=chunk)
        result = streamer(uvw, FREQ_HZ, vis32, weights, flags, progress=False)
        rows = max(1, chunk // FREQ_HZ.size)      # whole rows a block, at least one
        assert streamer.last_stats["n_chunks"] == -(-n_rows // rows), chunk
        assert streamer.last_stats["chunk_records"] == rows * FREQ_HZ.size
        assert not streamer.last_stats["split"]
        for key in ("n_kept", "n_offgrid", "n_flagged"):
            assert streamer.last_stats[key] == stats[key], (key, chunk)
        assert _rel(result, whole) < 1e-6, chunk
        assert _rel(result, reference) < 1e-5, chunk


def test_streamed_broadcast_weights_and_flags(cl_env):
    """Weights and flags broadcastable to (nrow, nchan, npol) are cut per block."""
    rng = np.random.default_rng(6)
    nx = 64
    uvw, cell, vis, _, _ = _observation(rng, nx, 6, 2)
    vis = vis.astype(np.complex64)
    gridder = Gridder(cl_env.queue, separable_gcf(6, 4), nx, nx, cell, npol=2)
    row_weights = rng.uniform(0.5, 2.0, (uvw.shape[0], 1, 1))
    chan_flags = np.array([False, True, False, False])[:, None]     # (nchan, 1)
    streamer = StreamingGridder(gridder, chunk_records=90)
    result = streamer(uvw, FREQ_HZ, vis, row_weights, chan_flags)
    assert streamer.last_stats["n_chunks"] > 2
    assert streamer.last_stats["n_flagged"] == uvw.shape[0]        # channel 1, every row
    whole = gridder(uvw, FREQ_HZ, vis, row_weights, chan_flags)
    reference = grid_reference(uvw, FREQ_HZ, vis, gridder.gcf, nx, nx, cell, row_weights,
                               chan_flags)
    assert _rel(whole, reference) < 1e-5
    assert _rel(result, whole) < 1e-6
    # a scalar weight
    assert _rel(streamer(uvw, FREQ_HZ, vis, 2.0), 2 * gridder(uvw, FREQ_HZ, vis)) < 1e-6


def test_deterministic_gridder_streams_identical_bits(cl_env):
    rng = np.random.default_rng(7)
    nx = 64
    uvw, cell, vis, weights, flags = _observation(rng, nx, 7, 2)
    vis = vis.astype(np.complex64)
    gcf = separable_gcf(7, 8)

    def streamed():
        gridder = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, deterministic=True)
        assert gridder.deterministic
        streamer = StreamingGridder(gridder, chunk_records=333)
        return streamer, streamer(uvw, FREQ_HZ, vis, weights, flags)

    streamer, first = streamed()
    assert streamer.last_stats["n_chunks"] > 2 and np.any(first != 0)
    assert np.array_equal(first, streamer(uvw, FREQ_HZ, vis, weights, flags))
    assert np.array_equal(first, streamed()[1])
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, nx, cell, weights, flags)
    assert _rel(first, reference) < 1e-5


def test_streamed_accumulates(cl_env):
    rng = np.random.default_rng(3)
    uvw, cell, vis, _, _ = _observation(rng, 64, 4, 1)
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 64, 64, cell)
    streamer = StreamingGridder(gridder, chunk_records=50)
    assert streamer.chunk_records == 50 and streamer.gridder is gridder
    grid = streamer(uvw, FREQ_HZ, vis, return_device=True)
    assert grid.shape == (1, 64, 64) and grid.dtype == np.complex64
    again = streamer(uvw, FREQ_HZ, vis, out=grid, return_device=True, progress=False)
    assert again is grid
    assert _rel(grid.get(), 2 * gridder(uvw, FREQ_HZ, vis)) < 1e-6
    # the default block: the whole (small) observation in one call
    default = StreamingGridder(gridder)
    assert default.chunk_records == DEFAULT_CHUNK_RECORDS
    assert _rel(default(uvw, FREQ_HZ, vis), gridder(uvw, FREQ_HZ, vis)) < 1e-6
    assert default.last_stats["n_chunks"] == 1
    # a block smaller than a row still takes one whole row
    small = StreamingGridder(gridder, chunk_records=3)
    assert _rel(small(uvw[:9], FREQ_HZ, vis[:9]), gridder(uvw[:9], FREQ_HZ, vis[:9])) < 1e-6
    assert small.last_stats["n_chunks"] == 9 and small.last_stats["chunk_records"] == 4


def test_oversized_chunk_is_split(cl_env):
    rng = np.random.default_rng(4)
    uvw, cell, vis, _, _ = _observation(rng, 64, 4, 2)
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 64, 64, cell, npol=2)
    expected = gridder(uvw, FREQ_HZ, vis)
    # pretend the device allows 4 KiB allocations: half of it in 16-byte
    # visibilities (2 complex64 polarisations) -> 128 per block
    gridder.profile = dataclasses.replace(gridder.profile, max_alloc_bytes=4096)
    with pytest.warns(UserWarning, match="exceeds half the device's largest allocation"):
        streamer = StreamingGridder(gridder, chunk_records=10**9)
    assert streamer.chunk_records == 128 and streamer.split
    result = streamer(uvw, FREQ_HZ, vis)
    assert streamer.last_stats["split"] and streamer.last_stats["n_chunks"] > 1
    assert streamer.last_stats["chunk_records"] == 128          # 32 rows of 4 channels
    assert streamer.last_stats["n_chunks"] == -(-uvw.shape[0] // 32)
    assert _rel(result, expected) < 1e-6


def test_bad_arguments(cl_env):
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 32, 32, 1e-3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'mode'"):
        StreamingGridder(gridder, mode="queues")       # modes are gone
    with pytest.raises(ValueError, match="chunk_records"):
        StreamingGridder(gridder, chunk_records=0)
    with pytest.raises(TypeError, match="clgrid.Gridder"):
        StreamingGridder("not a gridder")
    streamer = StreamingGridder(gridder)
    with pytest.raises(ValueError, match="NaN"):
        streamer(np.full((2, 3), np.nan), [1e9], np.zeros((2, 1, 1), np.complex64))


@pytest.mark.tiny
def test_tiny_streaming(cl_env):
    """Small enough for Oclgrind: blocks of rows adding into one device grid."""
    rng = np.random.default_rng(5)
    uvw, cell, vis, _, _ = _observation(rng, 16, 3, 1, tiny=True)
    uvw, vis = uvw[:12], vis[:12, :1]
    gridder = Gridder(cl_env.queue, separable_gcf(3, 2), 16, 16, cell, method="tiles")
    expected = grid_reference(uvw, FREQ_HZ[:1], vis, gridder.gcf, 16, 16, cell)
    streamer = StreamingGridder(gridder, chunk_records=5)
    result = streamer(uvw, FREQ_HZ[:1], vis)
    assert streamer.last_stats["n_chunks"] == 3
    assert _rel(result, expected) < 1e-5

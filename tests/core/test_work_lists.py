"""The GPU spreader's work lists, planned on the host (clgrid.core.spread):
``chunk_counts`` against a loop over every tile, neighbour and w bin, and
``work_items`` against the definition of its items and folds.  No device:
both are numpy over the bins' starts."""

import types

import numpy as np
import pytest

from clgrid.core.spread import WIDE_FOLD_SLOTS, chunk_counts, work_items


def _points(n_tiles_u: int, n_tiles_v: int, n_wbins: int, rng) -> types.SimpleNamespace:
    """Bins of a set of points: most empty, a few dense (the uv centre)."""
    n_bins = n_tiles_u * n_tiles_v * n_wbins
    counts = rng.poisson(4, n_bins) * (rng.random(n_bins) < 0.4)
    counts[rng.integers(0, n_bins)] += 300
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
    return types.SimpleNamespace(ntiles_u=n_tiles_u, ntiles_v=n_tiles_v,
                                 bin_start_host=starts)


def _layout(n_wbins: int, support: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(n_wbins=n_wbins, choice=types.SimpleNamespace(support=support))


def _looped_counts(points, n_wbins, support, plane0, n_pass, chunk_points, accumulate,
                   reach, plane_block) -> np.ndarray:
    """Points each (plane block, tile) reads, one tile, neighbour and bin at a time."""
    nu, nv = points.ntiles_u, points.ntiles_v
    starts = points.bin_start_host.astype(np.int64)
    n_blocks = -(-n_pass // plane_block)
    counts = np.zeros((n_blocks, nu * nv), np.int64)
    for p in range(n_blocks):
        planes = range(plane0 + p * plane_block, plane0 + min((p + 1) * plane_block, n_pass))
        # bins whose points reach a plane of the block (a point of bin b
        # covers planes b .. b + W - 1); one bin without w
        bins = ([0] if n_wbins == 1 else
                [b for b in range(n_wbins) if any(b <= q <= b + support - 1 for q in planes)])
        for u in range(nu):
            for v in range(nv):
                for du in range(-reach, 1):
                    for dv in range(-reach, 1):
                        if -du >= nu or -dv >= nv:
                            continue
                        tile = ((u + du) % nu) * nv + (v + dv) % nv
                        for b in bins:
                            first = tile * n_wbins + b
                            counts[p, u * nv + v] += starts[first + 1] - starts[first]
    chunks = -(-counts // chunk_points)
    return chunks if accumulate else np.maximum(chunks, 1)


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 3), (7, 4)])
@pytest.mark.parametrize("n_wbins", [1, 3, 8])
def test_chunk_counts_match_a_loop_over_tiles_neighbours_and_bins(shape, n_wbins):
    rng = np.random.default_rng(shape[0] * 31 + shape[1] * 7 + n_wbins)
    points = _points(*shape, n_wbins, rng)
    checked = 0
    for support in (4, 7):
        for plane0, n_pass in ((0, n_wbins), (1, max(1, n_wbins - 1))):
            for plane_block in (1, 2, 8):
                for chunk_points in (1, 5):
                    for accumulate in (False, True):
                        for reach in (1, 2):
                            got = chunk_counts(points, _layout(n_wbins, support), plane0,
                                               n_pass, chunk_points, accumulate, reach,
                                               plane_block)
                            want = _looped_counts(points, n_wbins, support, plane0, n_pass,
                                                  chunk_points, accumulate, reach,
                                                  plane_block)
                            np.testing.assert_array_equal(got, want)
                            checked += 1
    assert checked == 2 * 2 * 3 * 2 * 2 * 2


@pytest.mark.parametrize("on_cpu", [False, True], ids=["gpu", "cpu"])
@pytest.mark.parametrize("plane_block,n_pass", [(1, 1), (1, 5), (4, 6), (8, 8)])
def test_work_items_give_every_chunk_once_and_fold_every_split_item(on_cpu, plane_block,
                                                                    n_pass):
    rng = np.random.default_rng(plane_block * 10 + n_pass + on_cpu)
    n_tiles, chunk_points = 60, 16
    n_blocks = -(-n_pass // plane_block)
    read = rng.poisson(6, n_blocks * n_tiles) * (rng.random(n_blocks * n_tiles) < 0.5)
    read[rng.integers(0, read.size, 3)] = [40 * chunk_points, 17, 3 * chunk_points]
    work = work_items(read, n_tiles, chunk_points, plane_block, n_pass, on_cpu)

    # every chunk of every (block, tile) with points, once
    want = sorted((pair % n_tiles, (pair // n_tiles) * plane_block, c)
                  for pair in range(read.size) for c in range(-(-int(read[pair]) // chunk_points)))
    assert sorted(map(tuple, work.items[:, :3].tolist())) == want
    split = work.items[:, 3] >= 0
    chunks_of = {(t, p): -(-int(read[(p // plane_block) * n_tiles + t]) // chunk_points)
                 for t, p, _ in want}
    assert all((chunks_of[(t, p)] > 1) == s for (t, p, _), s in zip(work.items[:, :3].tolist(),
                                                                      split))
    if not on_cpu:   # GPUs: split items first
        assert not np.any(split[:-1] < split[1:])
    # split chunks' slots: plane_block side by side, none shared, all used
    slots = np.concatenate([s + np.arange(plane_block) for s in work.items[split, 3]])
    assert sorted(slots.tolist()) == list(range(work.n_slots))

    # a fold a live plane of each split item, over its chunks' slots in order
    want_folds = []
    for (t, p, c), slot in zip(work.items[:, :3].tolist(), work.items[:, 3].tolist()):
        if slot >= 0 and c == 0:
            for offset in range(plane_block):
                if p + offset < n_pass:
                    want_folds.append((t, p + offset, slot + offset, chunks_of[(t, p)]))
    assert sorted(map(tuple, work.folds.tolist())) == sorted(want_folds)
    wide = work.folds[:, 3] > WIDE_FOLD_SLOTS
    assert work.n_wide_folds == int(wide.sum()) > 0
    assert not np.any(wide[:-1] < wide[1:])   # the wide folds first

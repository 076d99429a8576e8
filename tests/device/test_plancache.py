"""The plan cache's bounds (clgrid/device/plancache.py), without a device:
bytes per device and, since plans hold host memory their device bytes leave
out, a count per device (issue 37: ducc0's test file, a new geometry every
case, grew one process past 11 GB on a CPU device)."""

from __future__ import annotations

import pytest

from clgrid.device import plancache

GIB = 2 ** 30


def _fill(cache: plancache.PlanCache, count: int, device: int = 1, nbytes: int = 1000,
          memory: int = 64 * GIB) -> list[int]:
    closed: list[int] = []
    for key in range(count):
        cache.get_or_build(("plan", device, key), build=lambda key=key: key,
                           bytes_of=lambda value, device=device: {device: nbytes},
                           needs=lambda: {device: (nbytes, memory)},
                           close=closed.append)
    return closed


def test_at_most_max_plans_per_device(monkeypatch):
    """Small plans on a large device: the count bounds them, the least
    recently used go first, each closed once."""
    monkeypatch.delenv("CLGRID_PLAN_CACHE_PLANS", raising=False)
    monkeypatch.delenv("CLGRID_PLAN_CACHE_MB", raising=False)
    cache = plancache.PlanCache()
    closed = _fill(cache, plancache.DEFAULT_MAX_PLANS + 10)
    assert len(cache) == plancache.DEFAULT_MAX_PLANS
    assert closed == list(range(10))
    assert cache.builds == plancache.DEFAULT_MAX_PLANS + 10
    # the most recently used survive: keys 10 .. 73
    assert cache.get(("plan", 1, 10)) == 10 and cache.get(("plan", 1, 9)) is None


def test_count_is_per_device_and_overridable(monkeypatch):
    monkeypatch.setenv("CLGRID_PLAN_CACHE_PLANS", "3")
    cache = plancache.PlanCache()
    _fill(cache, 5, device=1)
    _fill(cache, 2, device=2)
    assert cache.plans_on(1) == 3 and cache.plans_on(2) == 2 and len(cache) == 5
    monkeypatch.setenv("CLGRID_PLAN_CACHE_PLANS", "0")
    with pytest.raises(ValueError, match="CLGRID_PLAN_CACHE_PLANS must be an integer >= 1"):
        plancache.max_plans()


def test_bytes_still_bound(monkeypatch):
    """A few large plans: the byte budget (60% of the device) drops them first."""
    monkeypatch.delenv("CLGRID_PLAN_CACHE_PLANS", raising=False)
    monkeypatch.delenv("CLGRID_PLAN_CACHE_MB", raising=False)
    cache = plancache.PlanCache()
    _fill(cache, 5, nbytes=2 * GIB, memory=10 * GIB)   # budget 6 GiB: 3 plans of 2 GiB
    assert len(cache) == 3 and cache.bytes_on(1) == 6 * GIB


@pytest.mark.tiny
def test_built_programs_are_bounded(cl_env, monkeypatch):
    """clgrid.device.kernels keeps the CLGRID_PROGRAM_CACHE most recently used
    programs (every kernel choice is a source of its own); a program in use
    stays usable after it left the cache."""
    from clgrid.device import kernels
    monkeypatch.setenv("CLGRID_PROGRAM_CACHE", "2")
    monkeypatch.setattr(kernels, "_programs", type(kernels._programs)())
    sources = [f"__kernel void k(__global int *a) {{ a[0] = {value}; }}" for value in range(3)]
    built = [kernels.build_program(cl_env.context, cl_env.device, source) for source in sources]
    assert [key[2] for key in kernels._programs] == sources[1:]
    assert kernels.build_program(cl_env.context, cl_env.device, sources[2]) is built[2]
    import numpy as np
    import pyopencl as cl
    out = cl.Buffer(cl_env.context, cl.mem_flags.READ_WRITE, 4)
    built[0].k(cl_env.queue, (1,), None, out)      # evicted, still alive and usable
    result = np.empty(1, np.int32)
    cl.enqueue_copy(cl_env.queue, result, out)
    assert result[0] == 0
    monkeypatch.setenv("CLGRID_PROGRAM_CACHE", "none")
    with pytest.raises(ValueError, match="CLGRID_PROGRAM_CACHE must be an integer >= 1"):
        kernels.max_programs()


def test_dropped_plans_are_collected_in_batches(monkeypatch):
    """Dropped plans sit in reference cycles: a full collection once
    COLLECT_PLANS small ones were dropped (not one per plan, not never), and
    at once where a device's plans are dropped for want of memory."""
    monkeypatch.setenv("CLGRID_PLAN_CACHE_PLANS", "1")
    collections_run: list[int] = []
    monkeypatch.setattr(plancache.gc, "collect", lambda: collections_run.append(1))
    monkeypatch.setattr(plancache, "_dropped", {"plans": 0, "bytes": 0})
    cache = plancache.PlanCache()
    _fill(cache, plancache.COLLECT_PLANS)            # drops COLLECT_PLANS - 1
    assert collections_run == []
    _fill(cache, 2)                                  # the COLLECT_PLANS-th drop and one more
    assert collections_run == [1]
    cache.drop_device(1)
    assert collections_run == [1, 1]


def test_same_bits_compares_every_chunk():
    """A cached plan's exact check: shape, dtype and bytes, NaN rows matching
    themselves, a change in any chunk of rows found (the comparison runs in
    chunks on the copy threads)."""
    import numpy as np
    from clgrid.device.hostio import same_bits
    uvw = np.random.default_rng(0).normal(size=(700_000, 3))
    uvw[5] = np.nan
    assert same_bits(uvw, uvw.copy())
    for row in (0, 349_999, 699_999):
        changed = uvw.copy()
        changed[row, 1] = np.nextafter(changed[row, 1], np.inf)
        assert not same_bits(uvw, changed)
    assert not same_bits(uvw, uvw[:-1].copy())
    assert not same_bits(uvw, uvw.astype(np.float32))
    assert same_bits(np.empty((0, 3)), np.empty((0, 3)))


@pytest.mark.parametrize("where", [0, 250_000, 599_999])
def test_any_nonfinite_finds_one_value_in_any_chunk(where):
    """The host pass CPU devices' vis2dirty makes instead of the device's
    count: a NaN in a real part or an Inf in an imaginary part, in the first,
    a middle or the last chunk of rows, is found; finite arrays, empty ones
    and integers are not flagged."""
    import numpy as np
    from clgrid.device.hostio import any_nonfinite
    vis = (np.ones((600_000, 4)) + 1j).astype(np.complex64)
    assert not any_nonfinite(vis)
    bad = vis.copy()
    bad[where, 3] = complex(np.nan, 1.0)
    assert any_nonfinite(bad)
    bad = vis.copy()
    bad[where, 0] = complex(1.0, np.inf)
    assert any_nonfinite(bad)
    weights = np.ones(600_000, np.float32)
    weights[where] = -np.inf
    assert any_nonfinite(weights) and not any_nonfinite(np.ones(600_000, np.float32))
    assert not any_nonfinite(np.empty((0, 4), np.complex64))
    assert not any_nonfinite(np.arange(10))


def test_own_copy_never_keeps_the_callers_memory():
    import numpy as np
    from clgrid.device.hostio import own_copy
    given = np.zeros((10, 3))
    assert not np.may_share_memory(own_copy(given, given), given)
    view = given[2:5]
    assert not np.may_share_memory(own_copy(np.asarray(view), view), given)
    made = np.ascontiguousarray(given.T).T   # a new array: kept as it is
    assert own_copy(made, given) is made


def test_a_failed_allocation_gives_back_what_was_kept_for_speed():
    """retry_after_freeing drops the device's cached plans and calls the
    release methods registered for it (held weakly, each once) before the
    second try; the other device's are kept; a second failure names the
    bytes only where the caller knows them."""
    import pyopencl as cl

    class Keeper:
        def __init__(self):
            self.released = 0

        def release(self):
            self.released += 1

    kept, other, gone = Keeper(), Keeper(), Keeper()
    plancache.on_memory_pressure(101, kept.release)
    plancache.on_memory_pressure(101, gone.release)
    plancache.on_memory_pressure(202, other.release)
    del gone   # its object is gone: nothing to call
    tries = []

    def call():
        tries.append(kept.released)
        if len(tries) == 1:
            raise cl.MemoryError("clEnqueueNDRangeKernel", cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                                 "out of resources")
        return "done"

    assert plancache.retry_after_freeing(call, plancache.PlanCache(), [101]) == "done"
    assert tries == [0, 1] and kept.released == 1 and other.released == 0
    assert plancache.release_memory(101) == 0   # forgotten once called
    assert plancache.release_memory(202) == 1 and other.released == 1

    def failing():
        raise RuntimeError("VkFFT error 4039: VKFFT_ERROR_FAILED_TO_ALLOCATE out of memory")

    with pytest.raises(MemoryError, match="cannot hold this call, and it failed again") as raised:
        plancache.retry_after_freeing(failing, plancache.PlanCache(), [101], what="this call")
    assert "GiB" not in str(raised.value)
    with pytest.raises(MemoryError, match=r"about 2\.00 GiB needed, 8\.00 GiB device memory"):
        plancache.retry_after_freeing(failing, plancache.PlanCache(), [101],
                                      {101: (2 * GIB, 8 * GIB)})

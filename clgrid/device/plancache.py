"""Plans kept between calls, bounded in device bytes, and allocation failures.

The functional APIs (``clgrid.vis2dirty``/``dirty2vis``, with one device or
several) keep their plans -- sorted points, kernels, FFT plans and the
workspaces leased from them -- in one :class:`PlanCache` per process, keyed
by context, device, geometry and a fingerprint of the data, never by a queue
object.  Each entry states the device bytes it holds on every device; before
a new plan is made, the least recently used entries of its devices are
dropped until the new one fits the device's budget (default
:data:`DEFAULT_BUDGET_FRACTION` of its memory, ``CLGRID_PLAN_CACHE_MB``
overrides, the same for every device) and the device keeps fewer than
:data:`DEFAULT_MAX_PLANS` plans (``CLGRID_PLAN_CACHE_PLANS`` overrides).

The count bounds what the bytes do not: a plan also holds host memory its
device bytes leave out (kernel objects, host arrays, Python objects: about
1-2 MB a small plan on the Intel CPU runtime), and a CPU device's "memory" is
the host's, so 60% of it held 1.6 MB plans by the thousand: ducc0's own test
file, every case a new geometry, grew one process past 11 GB before.

A device allocation that fails anyway (``MEM_OBJECT_ALLOCATION_FAILURE``,
``OUT_OF_RESOURCES``, an FFT library that cannot launch for want of memory)
is retried once after the device's cached plans are dropped
(:func:`retry_after_freeing`), then raised as a :class:`MemoryError` that
names the bytes needed and the device's memory.
"""

from __future__ import annotations

import collections
import gc
import os
import threading
import weakref
from typing import Any, Callable, TypeVar

import pyopencl as cl

#: Share of a device's memory the cached plans may hold, all together.
DEFAULT_BUDGET_FRACTION = 0.6
#: Most plans kept per device (the least recently used go first).
DEFAULT_MAX_PLANS = 64
#: Dropped plans sit in reference cycles, so their buffers (host memory on a
#: CPU device) go only when Python's cyclic collector runs, which counts
#: objects, not bytes: churning 128 x 250 plans with w on the Intel CPU runtime
#: swung one process between 1.1 and 2.1 GB (800 MB collected every 10), and
#: ducc0's test file grew to 2.7 GB in 1,307 cases.  So a full collection runs
#: once the plans dropped since the last one held :data:`COLLECT_BYTES` device
#: bytes or numbered :data:`COLLECT_PLANS` (a collection per small plan cost
#: more than the plan), and at once where a device's plans are dropped for
#: want of memory.
COLLECT_BYTES = 64 * 2 ** 20
COLLECT_PLANS = 16

_ALLOCATION_CODES = {"MEM_OBJECT_ALLOCATION_FAILURE", "OUT_OF_RESOURCES",
                     "OUT_OF_HOST_MEMORY"}
# FFT libraries report a want of memory in their own words
_ALLOCATION_WORDS = ("VkFFT error 4039", "FAILED_TO_LAUNCH", "ALLOCATION_FAILURE",
                     "OUT_OF_RESOURCES", "out of memory")

T = TypeVar("T")


def is_allocation_failure(error: BaseException) -> bool:
    """Whether ``error`` says a device (or pinned host) allocation failed.
    Python's own :class:`MemoryError` is not one: clgrid raises it for
    sizes it refuses before allocating, with the bytes in its message."""
    if isinstance(error, cl.MemoryError):
        return True
    if isinstance(error, cl.Error):
        code = getattr(error, "code", None)
        names = {name for name in _ALLOCATION_CODES
                 if getattr(cl.status_code, name, None) == code}
        if names:
            return True
    return isinstance(error, (RuntimeError, cl.Error)) and any(
        word in str(error) for word in _ALLOCATION_WORDS)


def device_budget(global_mem_bytes: int) -> int:
    """Bytes cached plans may hold on a device of ``global_mem_bytes``."""
    override = os.environ.get("CLGRID_PLAN_CACHE_MB")
    if override:
        return int(float(override) * 2 ** 20)
    return int(global_mem_bytes * DEFAULT_BUDGET_FRACTION)


def max_plans() -> int:
    """Most plans the cache keeps per device: ``CLGRID_PLAN_CACHE_PLANS`` or
    :data:`DEFAULT_MAX_PLANS`."""
    override = os.environ.get("CLGRID_PLAN_CACHE_PLANS")
    if not override:
        return DEFAULT_MAX_PLANS
    try:
        count = int(override)
    except ValueError:
        raise ValueError(f"CLGRID_PLAN_CACHE_PLANS must be an integer >= 1, got "
                         f"{override!r}") from None
    if count < 1:
        raise ValueError(f"CLGRID_PLAN_CACHE_PLANS must be an integer >= 1, got {override!r}")
    return count


class _Entry:
    """A plan, how to count its device bytes (live: its workspaces grow with
    concurrent calls) and how to close it."""

    __slots__ = ("value", "bytes_of", "close")

    def __init__(self, value, bytes_of, close):
        self.value, self.bytes_of, self.close = value, bytes_of, close

    @property
    def bytes_by_device(self) -> dict[int, int]:
        return self.bytes_of(self.value)


class PlanCache:
    """Least-recently-used plans, bounded in bytes per device (see the module
    notes).  Thread-safe; ``builds`` counts the plans made (tests use it)."""

    def __init__(self):
        self._entries: collections.OrderedDict[Any, _Entry] = collections.OrderedDict()
        self._lock = threading.RLock()
        self._building: dict[Any, threading.Lock] = {}
        self.builds = 0

    def __len__(self) -> int:
        return len(self._entries)

    def bytes_on(self, device_ptr: int) -> int:
        """Device bytes the cached plans hold on a device."""
        with self._lock:
            return sum(e.bytes_by_device.get(device_ptr, 0) for e in self._entries.values())

    def get(self, key, valid: Callable[[Any], bool] = lambda value: True):
        """The plan of ``key`` (now the most recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not valid(entry.value):
                return None
            self._entries.move_to_end(key)
            return entry.value

    def peek(self, key):
        """The plan of ``key`` (now the most recently used) without a validity
        check, or None: the caller checks it beside its work
        (:func:`clgrid.imaging.imager.cached_call`), and drops it with :meth:`discard`
        where the check fails."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.value

    def discard(self, key, value) -> None:
        """Drop the plan of ``key`` if it is still ``value`` (a stale plan a
        check found; another thread may have replaced it already)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.value is not value:
                return
            del self._entries[key]
        _close([entry])

    def get_or_build(self, key, build: Callable[[], T], bytes_of: Callable[[T], dict[int, int]],
                     needs: Callable[[], dict[int, tuple[int, int]]],
                     close: Callable[[T], None] | None = None,
                     valid: Callable[[T], bool] = lambda value: True) -> T:
        """The cached plan of ``key``, else ``build()`` once (threads asking
        for the same key meanwhile wait for it) after :meth:`make_room` for
        ``needs()`` (device pointer -> (bytes wanted, device memory); only
        called to build); a failed allocation is retried once with the
        device's plans dropped."""
        value = self.get(key, valid)
        if value is not None:
            return value
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            value = self.get(key, valid)
            if value is not None:
                return value
            try:
                needs = needs()
                for device_ptr, (wanted, memory) in needs.items():
                    self.make_room(device_ptr, wanted, device_budget(memory))
                value = retry_after_freeing(build, self, list(needs), needs)
            finally:
                with self._lock:
                    self._building.pop(key, None)
            with self._lock:
                self.builds += 1
                old = self._entries.pop(key, None)
                self._entries[key] = _Entry(value, bytes_of, close)
            if old is not None and old.close is not None:
                old.close(old.value)
            return value

    def plans_on(self, device_ptr: int) -> int:
        """Cached plans holding memory on a device."""
        with self._lock:
            return sum(device_ptr in e.bytes_by_device for e in self._entries.values())

    def make_room(self, device_ptr: int, wanted: int, budget: int,
                  most: int | None = None) -> None:
        """Drop the least recently used plans on a device until its cached
        bytes plus ``wanted`` fit ``budget`` and it holds fewer than ``most``
        plans (default :func:`max_plans`), or none is left there."""
        most = max_plans() if most is None else most
        dropped = []
        with self._lock:
            for key in list(self._entries):
                if (self.bytes_on(device_ptr) + wanted <= budget
                        and self.plans_on(device_ptr) < most):
                    break
                if device_ptr in self._entries[key].bytes_by_device:
                    dropped.append(self._entries.pop(key))
        _close(dropped)

    def drop_device(self, device_ptr: int | None = None) -> None:
        """Drop every plan on a device (all plans for None)."""
        with self._lock:
            keys = [k for k, e in self._entries.items()
                    if device_ptr is None or device_ptr in e.bytes_by_device]
            dropped = [self._entries.pop(k) for k in keys]
        _close(dropped, collect=True)

    def clear(self) -> None:
        self.drop_device(None)


_dropped = {"plans": 0, "bytes": 0}
_dropped_lock = threading.Lock()


def _close(entries: list[_Entry], collect: bool = False) -> None:
    """Close dropped plans; collect the cycles they sit in once those dropped
    since the last collection add up (:data:`COLLECT_BYTES`,
    :data:`COLLECT_PLANS`), or at once with ``collect``."""
    if not entries:
        return
    held = 0
    for entry in entries:
        held += sum(entry.bytes_by_device.values())
        if entry.close is not None:
            entry.close(entry.value)
    with _dropped_lock:
        _dropped["plans"] += len(entries)
        _dropped["bytes"] += held
        due = (collect or _dropped["plans"] >= COLLECT_PLANS
               or _dropped["bytes"] >= COLLECT_BYTES)
        if due:
            _dropped["plans"] = _dropped["bytes"] = 0
    if due:
        gc.collect()   # device buffers go with their Python objects


#: device pointer -> weak references to the release methods of what keeps
#: device memory that can be given back (:func:`on_memory_pressure`)
_releasers: dict[int, list[weakref.WeakMethod]] = {}
_releasers_lock = threading.Lock()


def on_memory_pressure(device_ptr: int, release: Callable[[], None]) -> None:
    """Call the bound method ``release`` (held weakly: its object may go)
    when an allocation on the device fails (:func:`retry_after_freeing`):
    memory kept for speed alone, such as an engine's second plan
    (:meth:`clgrid.core.engine.Engine.plan_for`), is given back before the
    call is tried again."""
    with _releasers_lock:
        # the dead (engines gone) dropped here, so the list stays as long as
        # the live ones: a pipeline makes an engine an observation
        live = [ref for ref in _releasers.get(device_ptr, []) if ref() is not None]
        _releasers[device_ptr] = live + [weakref.WeakMethod(release)]


def release_memory(device_ptr: int) -> int:
    """Call every live release method registered for the device (once:
    they are forgotten) and collect; returns how many ran."""
    with _releasers_lock:
        methods = [ref() for ref in _releasers.pop(device_ptr, [])]
    released = 0
    for method in methods:
        if method is not None:
            method()
            released += 1
    if released:
        gc.collect()
    return released


def retry_after_freeing(call: Callable[[], T], cache: PlanCache, device_ptrs: list[int],
                        needs: dict[int, tuple[int, int]] | None = None,
                        what: str = "this plan") -> T:
    """``call()``; if a device allocation fails, drop the cached plans of
    ``device_ptrs`` and try once more; a second failure is a
    :class:`MemoryError` naming the bytes (``needs``: device pointer ->
    (bytes wanted, device memory))."""
    try:
        return call()
    except Exception as error:   # noqa: BLE001 - only allocation failures are retried
        if not is_allocation_failure(error):
            raise
    for device_ptr in device_ptrs:
        cache.drop_device(device_ptr)
        release_memory(device_ptr)
    try:
        return call()
    except Exception as error:   # noqa: BLE001
        if not is_allocation_failure(error):
            raise
        wanted = sum(w for w, _ in (needs or {}).values())
        memory = sum(m for _, m in (needs or {}).values())
        # (the bytes where the caller knows them)
        sizes = (f": about {_gib(wanted)} needed, {_gib(memory)} device memory," if needs
                 else ",")
        raise MemoryError(
            f"the device cannot hold {what}{sizes} and it failed again with clgrid's cached "
            f"plans dropped ({type(error).__name__}: {str(error).splitlines()[0][:120]}); "
            "use a smaller image, fewer w planes (a larger epsilon) or fewer rows a call"
        ) from None


def _gib(count: int) -> str:
    return f"{count / 2 ** 30:.2f} GiB"


#: The process's plan cache, shared by every functional API.
plans = PlanCache()


__all__ = ["COLLECT_BYTES", "COLLECT_PLANS", "DEFAULT_BUDGET_FRACTION", "DEFAULT_MAX_PLANS",
           "PlanCache", "device_budget", "is_allocation_failure", "max_plans",
           "on_memory_pressure", "plans", "release_memory", "retry_after_freeing"]

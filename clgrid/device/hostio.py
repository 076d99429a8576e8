"""Host <-> device copies through pinned staging memory, overlapped.

Copies from pageable numpy memory run at a fraction of the bus speed (6 GB/s
on the H200 machine against 55 GB/s from pinned memory).  A
:class:`PinnedStaging` keeps mapped ``ALLOC_HOST_PTR`` buffers (pinned by the
driver) and moves an array in chunks: host threads copy chunk k into pinned
memory while the device copies chunk k-1, and the other way round for
downloads.  Any strides on the host side (a window of a larger image, a
big-endian FITS array viewed as bytes) are handled by the host copy.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import pyopencl as cl

from .profiles import is_process_context

#: Bytes per chunk at most: small enough to overlap, large enough for full
#: DMA speed.
CHUNK_BYTES = 8 << 20
#: Bytes per chunk at least, where a copy is cut into one chunk a copy
#: thread: below this a chunk's fixed costs (a task, a DMA command) show.
MIN_CHUNK_BYTES = 1 << 20

_pool: ThreadPoolExecutor | None = None


def copy_pool() -> ThreadPoolExecutor:
    """Threads for host copies (numpy releases the GIL while copying): up to
    16 (``CLGRID_COPY_THREADS`` to choose), so that several devices' copies
    in flight at once each get threads."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=copy_threads(), thread_name_prefix="clgrid-copy")
    return _pool


def copy_threads() -> int:
    """``CLGRID_COPY_THREADS``, else the cores up to 16 (at least 2)."""
    setting = os.environ.get("CLGRID_COPY_THREADS", "").strip()
    if setting:
        try:
            threads = int(setting)
        except ValueError:
            raise ValueError(f"CLGRID_COPY_THREADS must be a whole number, got {setting!r}") \
                from None
        if threads < 1:
            raise ValueError(f"CLGRID_COPY_THREADS must be at least 1, got {threads}")
        return threads
    return max(2, min(16, os.cpu_count() or 2))


class PinnedBlock:
    """Mapped ``ALLOC_HOST_PTR`` memory of a :class:`PinnedPool`, with the
    events of the copies still reading or writing it."""

    __slots__ = ("buffer", "host", "pending")

    def __init__(self, buffer: cl.Buffer, host: np.ndarray):
        self.buffer, self.host = buffer, host
        self.pending: list[cl.Event] = []

    @property
    def size(self) -> int:
        return self.host.size

    def wait(self) -> None:
        if self.pending:
            cl.wait_for_events(self.pending)
            self.pending = []


class _PerDevice:
    """One object per (context, device), made on first use: alive while
    something uses it, and for the life of the process on
    :func:`clgrid.create_context`'s contexts (a pool there outlives the plan
    cache dropping the last plan before it makes the next).  The pinned pools'
    registry; thread-safe."""

    def __init__(self):
        self._live: "weakref.WeakValueDictionary[tuple[int, int], object]" = \
            weakref.WeakValueDictionary()
        self._kept: dict[tuple[int, int], object] = {}
        self._lock = threading.Lock()

    def get(self, context: cl.Context, device: cl.Device, make: Callable[[], object]):
        key = (context.int_ptr, device.int_ptr)
        with self._lock:
            made = self._live.get(key)
            if made is None:
                made = self._live[key] = make()
                if is_process_context(context):
                    self._kept[key] = made
            return made

    def values(self) -> list:
        with self._lock:
            return list(self._live.values())


class PinnedPool:
    """Pinned staging memory of one device, leased per call by every plan.

    Mapping pinned memory is slow (the H200 machine: 0.42-0.63 s for the
    0.93 GB of one observation's visibilities), so blocks stay mapped and go
    from call to call: a new observation's first call finds the last one's
    memory instead of mapping its own.  A lease takes the smallest free
    block that fits (once its copies are done), else maps a new one; blocks
    given back stay mapped while the free ones fit
    :func:`pinned_staging_budget`, and are unmapped beyond it.  One pool a
    (context, device) (:class:`_PerDevice`); thread-safe."""

    _pools = _PerDevice()

    def __init__(self, context: cl.Context, device: cl.Device):
        self.context = context
        # maps on a queue of its own: never behind a caller's kernels
        self._queue = cl.CommandQueue(context, device)
        self._free: list[PinnedBlock] = []
        self._lock = threading.Lock()
        #: Blocks mapped so far (tests count them).
        self.mapped = 0

    @classmethod
    def for_device(cls, context: cl.Context, device: cl.Device) -> "PinnedPool":
        """The pool of ``device`` in ``context`` (made on first use)."""
        return cls._pools.get(context, device, lambda: cls(context, device))

    @property
    def free_bytes(self) -> int:
        with self._lock:
            return sum(block.size for block in self._free)

    def take(self, nbytes: int) -> PinnedBlock:
        """A block of at least ``nbytes``, its earlier copies done."""
        nbytes = max(int(nbytes), 1)
        with self._lock:
            fitting = [block for block in self._free if block.size >= nbytes]
            block = min(fitting, key=lambda b: b.size) if fitting else None
            if block is not None:
                self._free.remove(block)
                dropped = []
            else:   # room for the new one: the smallest free blocks go first
                self._free.sort(key=lambda b: b.size)
                dropped = []
                while self._free and (sum(b.size for b in self._free) + nbytes
                                      > pinned_staging_budget()):
                    dropped.append(self._free.pop(0))
        for old in dropped:
            self._unmap(old)
        if block is None:
            return self._map(nbytes)
        block.wait()
        return block

    def give(self, block: PinnedBlock, pending: list | None = None) -> None:
        """Return ``block`` (``pending``: copies still using it)."""
        block.pending += list(pending or [])
        with self._lock:
            if sum(b.size for b in self._free) + block.size <= pinned_staging_budget():
                self._free.append(block)
                return
        self._unmap(block)

    def _map(self, nbytes: int) -> PinnedBlock:
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        buffer = cl.Buffer(self.context, flags, nbytes)
        host, _ = cl.enqueue_map_buffer(self._queue, buffer,
                                        cl.map_flags.READ | cl.map_flags.WRITE, 0, (nbytes,),
                                        np.uint8, is_blocking=True)
        with self._lock:
            self.mapped += 1
        return PinnedBlock(buffer, host)

    @staticmethod
    def _unmap(block: PinnedBlock) -> None:
        block.wait()
        block.host = np.empty(0, np.uint8)   # the mapping goes with its last view
        block.buffer.release()


def pinned_staging_budget() -> int:
    """Bytes of free pinned staging memory one device's :class:`PinnedPool`
    keeps mapped: as :func:`pinned_results_budget` (an eighth of the host's
    memory, at most 8 GiB); ``CLGRID_PINNED_STAGING_MB`` overrides."""
    setting = os.environ.get("CLGRID_PINNED_STAGING_MB")
    if setting is not None:
        return int(float(setting) * 2 ** 20)
    return _host_share()


_NO_HOST = np.empty(0, np.uint8)


class _Pinned:
    """One staging direction's pinned memory, leased from its device's
    :class:`PinnedPool` on first use and kept (grown where a copy needs
    more) until :meth:`release`."""

    def __init__(self, context: cl.Context, queue: cl.CommandQueue):
        self.context, self.queue = context, queue
        self._pool = PinnedPool.for_device(context, queue.device)
        self.block: PinnedBlock | None = None
        self.pending: list[cl.Event] = []

    @property
    def host(self) -> np.ndarray:
        return self.block.host if self.block is not None else _NO_HOST

    def view(self, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` of pinned memory, once earlier copies from
        or into it are done."""
        cl.wait_for_events(self.pending) if self.pending else None
        self.pending = []
        if self.block is None or nbytes > self.block.size:
            if self.block is not None:
                self._pool.give(self.block)
            self.block = None
            self.block = self._pool.take(nbytes)
        return self.block.host[:nbytes]

    def release(self) -> None:
        """Give the memory back to the pool, with the copies still using it."""
        if self.block is not None:
            block, self.block = self.block, None
            self._pool.give(block, self.pending)
            self.pending = []


def _row_chunks(first: int, stop: int, row_bytes: int) -> list[tuple[int, int]]:
    """Rows ``first .. stop - 1`` in chunks of at most :data:`CHUNK_BYTES`
    (not below :data:`MIN_CHUNK_BYTES`), as many as a whole number of rounds
    of the copy threads: a 64 MiB row block in 8 MiB chunks kept 8 of 16
    threads busy, and 128 MiB in 8 MiB chunks made 17 of them, the last
    copied alone in a second round."""
    row_bytes = max(row_bytes, 1)
    total, threads = (stop - first) * row_bytes, copy_threads()
    rounds = max(1, -(-total // (threads * CHUNK_BYTES)))
    chunk = min(CHUNK_BYTES, max(-(-total // (rounds * threads)), MIN_CHUNK_BYTES))
    rows = max(1, chunk // row_bytes)
    return [(start, min(start + rows, stop)) for start in range(first, stop, rows)]


def _as_rows(array: np.ndarray) -> np.ndarray:
    """2-D (rows, items) view of an array whose last axis is its row."""
    return array.reshape((-1, array.shape[-1])) if array.ndim != 2 else array


class PinnedStaging:
    """Chunked, overlapped host <-> device copies for one queue."""

    def __init__(self, context: cl.Context, queue: cl.CommandQueue):
        self.queue = queue
        self._up = _Pinned(context, queue)
        self._down = _Pinned(context, queue)

    def release(self) -> None:
        """Give the pinned memory back to the device's pool (the end of a
        call: the next call, of any plan on the device, leases it again)."""
        self._up.release()
        self._down.release()

    def upload(self, array: np.ndarray, target: cl.Buffer, offset: int = 0) -> None:
        """Copy ``array`` (any strides; its last axis a row) into ``target``
        at byte ``offset``, C order.  Returns once the host side is copied;
        the device copies are enqueued (in order) on the queue."""
        rows = _as_rows(array) if array.ndim >= 2 else array.reshape(1, -1)
        self.upload_rows(rows, target, 0, rows.shape[0], offset=offset)

    def upload_rows(self, array: np.ndarray, target: cl.Buffer, first: int, stop: int,
                    dtype=None, offset: int = 0) -> cl.Event | None:
        """Copy rows ``first .. stop - 1`` (first axis; any strides) of
        ``array`` into the same rows of ``target`` past byte ``offset`` (C
        order, as ``dtype``, default ``array``'s; converted by the host copy,
        same kind only).

        One array goes in consecutive calls, in row order, the first with
        ``first == 0`` (it waits until the staging memory's earlier copies are
        done).  Returns once the rows are in pinned memory, with the event of
        their last device copy (enqueued, flushed), or None for no rows."""
        dtype = np.dtype(dtype or array.dtype)
        row_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * dtype.itemsize
        if first == 0:
            self._up.view(array.shape[0] * row_bytes)
        staging = self._up.host
        chunks = _row_chunks(first, stop, row_bytes)

        def copy(chunk):
            a, b = chunk
            part = staging[a * row_bytes:b * row_bytes].view(dtype)
            np.copyto(part.reshape((b - a,) + array.shape[1:]), array[a:b],
                      casting="same_kind")

        events = []
        for (a, b), _ in zip(chunks, copy_pool().map(copy, chunks)):
            events.append(cl.enqueue_copy(self.queue, target,
                                          staging[a * row_bytes:b * row_bytes],
                                          dst_offset=offset + a * row_bytes, is_blocking=False))
            # each chunk's DMA starts while the threads copy the next ones
            # (NVIDIA submits only on a flush: unflushed, a 64 MiB image's
            # DMAs began after its last chunk was copied)
            self.queue.flush()
        self._up.pending += events
        return events[-1] if events else None

    def download(self, source: cl.Buffer, out: np.ndarray, offset: int = 0,
                 wait_for=None, accumulate: bool = False) -> None:
        """Copy ``out.nbytes`` from ``source`` at byte ``offset`` into ``out``
        (any strides; its last axis a row), or add them to it
        (``accumulate``: each chunk straight from the staging memory, no
        second pass); returns when ``out`` is filled."""
        rows = _as_rows(out) if out.ndim >= 2 else out.reshape(1, -1)
        if accumulate and not np.shares_memory(rows, out):
            raise ValueError("download(accumulate=True) needs an output whose rows are a view")
        n_rows, row_items = rows.shape
        row_bytes = row_items * out.dtype.itemsize
        staging = self._down.view(n_rows * row_bytes)
        chunks = _row_chunks(0, n_rows, row_bytes)
        events = [cl.enqueue_copy(self.queue, staging[start * row_bytes:stop * row_bytes],
                                  source, src_offset=offset + start * row_bytes,
                                  is_blocking=False, wait_for=wait_for)
                  for start, stop in chunks]
        self.queue.flush()

        def copy(index):
            start, stop = chunks[index]
            events[index].wait()
            part = staging[start * row_bytes:stop * row_bytes].view(out.dtype)
            part = part.reshape(stop - start, row_items)
            if accumulate:
                np.add(rows[start:stop], part, out=rows[start:stop])
            else:
                np.copyto(rows[start:stop], part)

        list(copy_pool().map(copy, range(len(chunks))))
        if not np.shares_memory(rows, out):
            out[...] = rows.reshape(out.shape)  # the row view had to be a copy


#: Slots of a device's shared :class:`PinnedResults`: a major cycle's four
#: (two predictions, two images) for two observations or threads at once.
DEVICE_SLOTS = 8


class PinnedResults:
    """Result arrays handed to the caller in pinned memory, filled by one DMA.

    A download through :class:`PinnedStaging` goes to pinned memory and is
    then copied by the host into the caller's array (and a fresh array's
    pages fault in on that first touch).  Here the caller's array *is* the
    pinned memory: H200, 930 MB of visibilities, 2026-11-26: one DMA 16.8 ms
    (55 GB/s); allocating and mapping that much pinned memory costs 400 ms
    and unmapping and mapping it again 34 ms, so a slot stays mapped and is
    reused once the caller has dropped the array and every view of it.

    A request takes the smallest free slot that fits; a new slot is added up
    to ``max_slots``, after which a free slot too small is grown.  A major
    cycle (docs/imaging.md) holds at most two predictions and two dirty
    images at once, so after the first two cycles no slot is grown again
    (tests/imaging/test_imaging.py).  All pools of the process together hold
    at most :func:`pinned_results_budget` bytes; beyond it :meth:`take`
    returns None and the caller downloads the usual way.  Every plan's calls
    on a device share one pool (:meth:`for_device`, :data:`DEVICE_SLOTS`
    slots), so that a new observation's results reuse the last one's slots;
    thread-safe.
    """

    _total_bytes = 0    # of every pool's slots: page-locked memory is scarce
    _budget_lock = threading.Lock()
    _pools: "weakref.WeakSet[PinnedResults]" = weakref.WeakSet()
    _shared = _PerDevice()

    def __init__(self, context: cl.Context, queue: cl.CommandQueue, max_slots: int = 4):
        self.context, self.queue = context, queue
        self.max_slots = int(max_slots)
        self._slots: list[dict] = []    # buffer, host (mapped uint8 array), busy
        self._lock = threading.Lock()
        PinnedResults._pools.add(self)

    @classmethod
    def for_device(cls, context: cl.Context, device: cl.Device) -> "PinnedResults":
        """The pool every plan's calls on ``device`` in ``context`` share
        (made on first use, with a queue of its own for the mappings; kept
        as :meth:`PinnedPool.for_device` keeps its pools)."""
        return cls._shared.get(context, device, lambda: cls(
            context, cl.CommandQueue(context, device), DEVICE_SLOTS))

    @classmethod
    def holds(cls, array: np.ndarray, context: cl.Context) -> bool:
        """Whether ``array`` is C-contiguous and lies in a slot of a pool on
        ``context``'s platform, so that a copy between it and that context's
        device is one DMA.  A result handed out earlier and passed back in
        (``np.subtract(observed, predicted, out=predicted)``, then
        ``vis2dirty(predicted)``) is.  The platform, not the context: on
        NVIDIA one context's pinned memory is pinned for every device (2 x
        H200, 2026-11-26: 930 MB from the other context's device in 16.8 ms,
        into pageable memory 52 ms)."""
        if not array.flags.c_contiguous or array.size == 0:
            return False
        start = array.ctypes.data
        stop = start + array.nbytes
        platform = context.devices[0].platform.int_ptr
        for pool in list(cls._pools):
            if pool.context.devices[0].platform.int_ptr != platform:
                continue
            for slot in pool._slots:
                base = slot["host"].ctypes.data
                if base <= start and stop <= base + slot["host"].size:
                    return True
        return False

    def take(self, shape: tuple, dtype) -> np.ndarray | None:
        """A C-contiguous array of ``shape`` and ``dtype`` in a free slot
        (grown or added as needed), or None when every slot is held or the
        budget is spent."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = max(count * dtype.itemsize, 1)
        with self._lock:
            free = [slot for slot in self._slots if not slot["busy"]]
            fitting = [slot for slot in free if slot["host"].size >= nbytes]
            if fitting:
                slot = min(fitting, key=lambda s: s["host"].size)
            elif len(self._slots) < self.max_slots:
                slot = {"buffer": None, "host": np.empty(0, np.uint8), "busy": False}
                if not self._grow(slot, nbytes):
                    return None
                self._slots.append(slot)
            elif free and self._grow(free[0], nbytes):
                slot = free[0]
            else:
                return None
            slot["busy"] = True
        # A memoryview (not an ndarray) as the base: numpy then makes every
        # view of the array refer to it, so it lives until the last view goes.
        flat = np.frombuffer(memoryview(slot["host"])[:nbytes], dtype, count)
        weakref.finalize(flat, slot.__setitem__, "busy", False)
        return flat.reshape(shape)

    def _grow(self, slot: dict, nbytes: int) -> bool:
        """Give ``slot`` ``nbytes`` of mapped pinned memory; False where that
        would exceed the budget (slot unchanged) or the driver refuses the
        memory (slot left empty): the caller then downloads the usual way."""
        old = slot["host"].size
        with PinnedResults._budget_lock:   # the new bytes reserved before mapping
            if PinnedResults._total_bytes - old + nbytes > pinned_results_budget():
                return False
            PinnedResults._total_bytes += nbytes - old
        slot["host"] = np.empty(0, np.uint8)
        if slot["buffer"] is not None:
            slot["buffer"].release()
            slot["buffer"] = None
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        try:
            buffer = cl.Buffer(self.context, flags, nbytes)
            host, _ = cl.enqueue_map_buffer(
                self.queue, buffer, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                (nbytes,), np.uint8, is_blocking=True)
        except cl.Error:   # out of page-locked memory: not the caller's error
            with PinnedResults._budget_lock:
                PinnedResults._total_bytes -= nbytes
            return False
        slot["buffer"], slot["host"] = buffer, host
        return True

    def __del__(self):
        # held slots stay mapped until the caller's arrays go; they no
        # longer count against the budget from here
        with PinnedResults._budget_lock:
            PinnedResults._total_bytes -= sum(slot["host"].size for slot in self._slots)

    @property
    def held(self) -> int:
        """Slots whose arrays the caller still holds."""
        return sum(slot["busy"] for slot in self._slots)


def pinned_results_budget() -> int:
    """Bytes of pinned result memory all pools may hold together: an eighth
    of the host's memory, at most 8 GiB (page-locked memory is taken from
    everything else on the host; the major cycle of 116 M visibilities needs
    about 2 GiB), ``CLGRID_PINNED_RESULTS_MB`` overrides; 0 turns pinned
    results off."""
    setting = os.environ.get("CLGRID_PINNED_RESULTS_MB")
    if setting is not None:
        return int(float(setting) * 2 ** 20)
    return _host_share()


def _host_share() -> int:
    """An eighth of the host's memory, at most 8 GiB."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 16 << 30
    return min(physical // 8, 8 << 30)


#: glibc's tunable that makes memcpy (numpy's copies) of 1 MiB or more write
#: with streaming stores instead of through the cache: the staging copies
#: of 8 MiB chunks stay below glibc's default threshold (a share of the last
#: level cache, 192 MiB on a 32 MiB-L3 EPYC), so each pinned line is read
#: before it is written.  Measured on the H100 machine (16 cores, glibc
#: 2.39, 2026-11-27): 47 -> 63 GB/s on 16 threads, ``vis2dirty`` from numpy
#: 44-46 -> 34-37 ms (docs/imaging.md, "Streaming stores for the host copies").
STREAMING_TUNABLE = "glibc.cpu.x86_non_temporal_threshold=0x100000"


def streaming_copies_env(environ: "os._Environ | dict | None" = None) -> dict | None:
    """The environment ``environ`` (default ``os.environ``) with
    :data:`STREAMING_TUNABLE` added to ``GLIBC_TUNABLES``, where it would
    change this process's copies: Linux on x86-64 with glibc, the threshold
    not set already, and ``CLGRID_STREAMING_COPIES`` not ``0``.  None where
    nothing would change.  glibc reads its tunables once, when a process
    starts, so only a new process (``clgrid``'s commands re-execute
    themselves with it; a pipeline exports it) gets them."""
    import platform
    environ = os.environ if environ is None else environ
    if environ.get("CLGRID_STREAMING_COPIES", "").strip() == "0":
        return None
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return None
    if platform.libc_ver()[0] != "glibc":
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "x86_non_temporal_threshold" in tunables:
        return None
    return dict(environ, GLIBC_TUNABLES=":".join(t for t in (tunables, STREAMING_TUNABLE) if t))


def streaming_copies_note() -> str | None:
    """One line for ``clgrid devices``: how to turn glibc's streaming stores
    on for Python callers, where this process runs without them."""
    if streaming_copies_env() is None:
        return None
    return (f"note: host copies write through the cache; export GLIBC_TUNABLES={STREAMING_TUNABLE} "
            "before Python starts for 1.3x faster staging to GPUs (docs/imaging.md)")


def copy_rows(target: np.ndarray, source: np.ndarray) -> None:
    """``target[...] = source`` (same shape, any strides and dtypes, cast as
    ``astype`` does), in chunks of rows (first axis) on the copy threads."""
    if target.ndim == 0 or target.size == 0:
        target[...] = source
        return
    row_bytes = target[:1].nbytes
    chunks = _row_chunks(0, target.shape[0], row_bytes)

    def copy(chunk):
        a, b = chunk
        np.copyto(target[a:b], source[a:b], casting="unsafe")

    list(copy_pool().map(copy, chunks))


def any_nonfinite(array: np.ndarray) -> bool:
    """Whether ``array`` holds a NaN or Inf (either part of a complex value),
    checked in chunks of rows on the copy threads.  On a CPU device the host
    array is what the kernels read, and this pass over it took 0.1-0.3 ms
    where the device's count took 1-2 ms with its wait (179 K visibilities,
    2 cores)."""
    array = np.asarray(array)
    if array.size == 0 or array.dtype.kind not in "fc":
        return False
    rows = array.reshape(array.shape[0], -1) if array.ndim > 1 else array.reshape(-1, 1)
    chunks = _row_chunks(0, rows.shape[0], rows[:1].nbytes)
    return any(copy_pool().map(lambda c: not np.isfinite(rows[c[0]:c[1]]).all(), chunks))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` have the same shape, dtype and bytes (a NaN
    equals a NaN of the same bits, so uvw with NaN rows still matches
    itself), compared in chunks of rows on the copy threads: a cached plan's
    check of a 116 M-visibility observation's uvw (43 MB) took 4-9 ms on one
    thread, every call."""
    return same_bits_later(a, b, copy_pool())()


def same_bits_later(a: np.ndarray, b: np.ndarray,
                    pool: ThreadPoolExecutor | None = None) -> Callable[[], bool]:
    """:func:`same_bits` started on ``pool``'s threads (default the
    :func:`check_pool`, apart from the copy threads so that a call's own
    copies do not queue behind it); the returned function waits for the
    answer.  A cached plan's call runs while its uvw is compared."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return lambda: False
    if a.size == 0 or a is b:
        return lambda: True
    words = np.dtype(f"u{a.itemsize}") if a.itemsize in (1, 2, 4, 8) else np.dtype(np.uint8)

    def rows_of(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x)
        return x.reshape(x.shape[0] if x.ndim else 1, -1).view(words)

    a_rows, b_rows = rows_of(a), rows_of(b)
    chunks = _row_chunks(0, a_rows.shape[0], a_rows[:1].nbytes)
    pool = check_pool() if pool is None else pool
    parts = [pool.submit(lambda c: np.array_equal(a_rows[c[0]:c[1]], b_rows[c[0]:c[1]]), chunk)
             for chunk in chunks]
    return lambda: all([part.result() for part in parts])


_check_pool: ThreadPoolExecutor | None = None


def check_pool() -> ThreadPoolExecutor:
    """Threads for the plan cache's exact uvw checks beside a call: a quarter
    of the copy threads (at least one)."""
    global _check_pool
    if _check_pool is None:
        _check_pool = ThreadPoolExecutor(max_workers=max(1, copy_threads() // 4),
                                         thread_name_prefix="clgrid-check")
    return _check_pool


def own_copy(array: np.ndarray, given) -> np.ndarray:
    """``array`` (made from the caller's ``given``), copied where it shares
    memory with ``given``: what a cached plan keeps to compare later calls
    with must not change when the caller edits its array in place."""
    return array.copy() if np.may_share_memory(array, np.asarray(given)) else array


def gather_rows(source: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``source[rows]`` (rows on the first axis), gathered in chunks on the
    copy threads."""
    out = np.empty((rows.size,) + source.shape[1:], source.dtype)
    if out.size == 0:
        return out
    chunks = _row_chunks(0, rows.size, out[:1].nbytes)

    def gather(chunk):
        a, b = chunk
        np.take(source, rows[a:b], axis=0, out=out[a:b])

    list(copy_pool().map(gather, chunks))
    return out


class LentHostMemory:
    """Host arrays lent to a CPU device in place (``USE_HOST_PTR``).

    A CPU runtime reads a host array in place when it is aligned to its
    base address alignment (the Intel runtime: 128 bytes; otherwise it
    copies, at about 2 GB/s).  :meth:`lend` gives a buffer over the caller's
    array where it can, else over an aligned copy made by the copy threads
    in memory kept for the next call.  The arrays must not change until the
    kernels reading them are done (:meth:`release` after waiting for them)."""

    def __init__(self, context: cl.Context, align_bytes: int):
        self.context = context
        self.align = max(1, int(align_bytes))
        self._spare: list[np.ndarray] = []
        self._used = 0

    def aligned(self, array: np.ndarray) -> bool:
        return (array.flags.c_contiguous and array.flags.writeable
                and array.ctypes.data % self.align == 0)

    def lend(self, array: np.ndarray, dtype) -> cl.Buffer:
        """A read-only buffer over ``array`` as ``dtype``, C order."""
        dtype = np.dtype(dtype)
        if array.dtype == dtype and self.aligned(array):
            source = array
        else:
            source = self._next(array.shape, dtype)
            copy_rows(source, array)
        return cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR,
                         hostbuf=source)

    def _next(self, shape: tuple, dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if self._used == len(self._spare):
            self._spare.append(np.empty(0, np.uint8))
        raw = self._spare[self._used]
        if raw.size < nbytes + self.align:
            raw = self._spare[self._used] = np.empty(nbytes + self.align, np.uint8)
        self._used += 1
        start = (-raw.ctypes.data) % self.align
        return raw[start:start + nbytes].view(dtype).reshape(shape)

    def release(self) -> None:
        """The kernels that read the lent arrays are done: reuse the copies."""
        self._used = 0


__all__ = ["CHUNK_BYTES", "LentHostMemory", "MIN_CHUNK_BYTES", "PinnedResults", "PinnedStaging", "copy_pool",
           "copy_rows", "gather_rows", "pinned_results_budget"]

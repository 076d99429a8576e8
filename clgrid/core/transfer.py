"""Gridding core: host <-> device copies of visibilities and images.

Device-resident inputs (``pyopencl.array.Array`` on the right context, of the
right dtype) are used as they are.  Host arrays go to GPUs through pinned
staging buffers (``ALLOC_HOST_PTR``, mapped once): chunks are copied into them
by several host threads and sent with non-blocking DMA while the next chunk
is being staged.  Pageable copies from numpy reach 6 GB/s on the H200 host,
pinned ones 55 GB/s (``../shared/PLATFORMS.md``).  On CPU devices the device
memory is host memory and one plain copy is cheapest.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

#: Bytes per staging chunk and the number of staging buffers.
CHUNK_BYTES = 64 * 2 ** 20
N_STAGING = 3
_MIN_PINNED_BYTES = 8 * 2 ** 20

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _threads() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = max(1, min(16, len(os.sched_getaffinity(0))))
            _pool = concurrent.futures.ThreadPoolExecutor(workers, "clgrid-copy")
    return _pool


class Uploader:
    """Host -> device copies for one queue, with pinned staging on GPUs."""

    def __init__(self, queue: cl.CommandQueue, pinned: bool | None = None):
        self.queue = queue
        if pinned is None:
            pinned = queue.device.type & cl.device_type.GPU != 0
        self.pinned = pinned
        self._staging: list[tuple[cl.Buffer, np.ndarray]] = []
        self._events: list[cl.Event | None] = []

    def _stage_buffers(self) -> list[tuple[cl.Buffer, np.ndarray]]:
        if not self._staging:
            flags = cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR
            for _ in range(N_STAGING):
                buffer = cl.Buffer(self.queue.context, flags, CHUNK_BYTES)
                host, _ = cl.enqueue_map_buffer(self.queue, buffer, cl.map_flags.WRITE, 0,
                                                (CHUNK_BYTES,), np.uint8)
                self._staging.append((buffer, host))
                self._events.append(None)
        return self._staging

    def to_device(self, host: np.ndarray, dtype) -> cla.Array:
        """A device copy of ``host`` converted to ``dtype`` (C order)."""
        dtype = np.dtype(dtype)
        host = np.asarray(host)
        out = cla.empty(self.queue, host.shape, dtype)
        if host.size == 0:
            return out
        if not self.pinned or host.nbytes < _MIN_PINNED_BYTES:
            out.set(np.ascontiguousarray(host, dtype))
            return out
        self._pinned_copy(host, out)
        return out

    def _pinned_copy(self, host: np.ndarray, out: cla.Array) -> None:
        flat_out_bytes = out.nbytes
        source = host.reshape(-1) if host.flags.c_contiguous else host.ravel()
        items = CHUNK_BYTES // out.dtype.itemsize
        staging = self._stage_buffers()
        pool = _threads()
        n_threads = pool._max_workers
        for chunk, start in enumerate(range(0, source.size, items)):
            stop = min(start + items, source.size)
            slot = chunk % N_STAGING
            if self._events[slot] is not None:
                self._events[slot].wait()
            view = staging[slot][1][:(stop - start) * out.dtype.itemsize].view(out.dtype)
            _parallel_copy(pool, n_threads, view, source[start:stop])
            self._events[slot] = cl.enqueue_copy(
                self.queue, out.data, view, dst_offset=start * out.dtype.itemsize,
                is_blocking=False)
        for event in self._events:
            if event is not None:
                event.wait()
        assert flat_out_bytes == source.size * out.dtype.itemsize


def _parallel_copy(pool, n_threads: int, dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` (with dtype conversion) in slices on several threads."""
    edges = np.linspace(0, src.size, n_threads + 1).astype(np.int64)
    futures = [pool.submit(np.copyto, dst[a:b], src[a:b], casting="same_kind")
               for a, b in zip(edges[:-1], edges[1:]) if b > a]
    for future in futures:
        future.result()


def device_array(queue: cl.CommandQueue, array: cla.Array, shape: tuple, dtype,
                 name: str) -> cla.Array:
    """``array`` itself when it is on ``queue``'s context with ``shape`` and
    ``dtype``; a clear error otherwise (no silent copies of device data)."""
    if array.context.int_ptr != queue.context.int_ptr:
        raise ValueError(f"{name} is a device array of another OpenCL context")
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ValueError(f"device {name} must be {tuple(shape)} {np.dtype(dtype)}, got "
                         f"{array.shape} {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"device {name} must be C-contiguous")
    return array


__all__ = ["CHUNK_BYTES", "N_STAGING", "Uploader", "device_array"]

"""Streamed gridding: visibilities in chunks, uploads overlapped with compute.

:class:`StreamingGridder` wraps a :class:`clgrid.Gridder` (any strategy) for
observations larger than device memory, or than a chunk size the user sets.
The uv plan is made once on the host; then, chunk by chunk of records:

1. the host prepares the chunk's pre-weighted records (conjugation, weights,
   flags, compression) into a staging buffer while the device grids the
   previous chunk (two buffer sets, used in turn);
2. the chunk moves to the device in one of two ways (``mode``):

   ``'queues'``
       staging buffers in pinned (``ALLOC_HOST_PTR``, mapped once) host
       memory, copied with non-blocking ``enqueue_copy`` on a second command
       queue; the gridding kernels wait on the copy's event.  What discrete
       GPUs want: the copy engine works while the compute queue grids.
   ``'mapped'``
       Romein's fallback for runtimes that did not overlap copies: the
       kernels read the staging buffers (``ALLOC_HOST_PTR``) in place, with
       no copy at all.  What CPU devices want: their "device memory" is host
       memory.
   ``'auto'``
       ``'mapped'`` on CPUs, ``'queues'`` elsewhere (the benchmark
       ``benchmarks/strategies.py --streaming`` times both per device).

The result equals the unchunked :meth:`Gridder.__call__` to rounding (the
float additions happen in a different order).

A Gridder with ``strategy='core'`` (device set points, no host records) is
streamed by blocks of rows of about ``chunk_records`` visibilities instead:
each block is one call of the gridder adding into the grid, in row order (so
the bits are the same run after run).  A chunk whose buffers would
exceed the device's largest allocation is split (:attr:`last_stats` says so).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from tqdm.auto import tqdm

from .gridder import Gridder
from .uvprep import UVPlan

MODES = ("auto", "queues", "mapped")
_HEADER_BYTES = 16
#: Default chunk: 1 Mi records (quad-pol complex64: 48 MiB per buffer set).
DEFAULT_CHUNK_RECORDS = 1 << 20
#: A buffer set is two of these; keep one buffer well inside max_alloc.
_ALLOC_FRACTION = 0.5


@dataclasses.dataclass
class _Slot:
    """One buffer set: header and records, host staging and device side."""

    header_buffer: cl.Buffer
    records_buffer: cl.Buffer
    host_header: np.ndarray
    host_records: np.ndarray
    device_header: cl.Buffer | None = None
    device_records: cl.Buffer | None = None
    done: cl.Event | None = None


class StreamingGridder:
    """Grid an observation chunk by chunk with a :class:`~clgrid.Gridder`.

    Parameters
    ----------
    gridder
        A compiled :class:`~clgrid.Gridder` (its queue is the compute queue).
    chunk_records
        Records per chunk (default :data:`DEFAULT_CHUNK_RECORDS`); larger
        values than the device's allocation limit allows are split.
    mode
        ``'auto'``, ``'queues'`` or ``'mapped'`` (see the module docstring).
    """

    def __init__(self, gridder: Gridder, chunk_records: int | None = None, mode: str = "auto"):
        if not isinstance(gridder, Gridder):
            raise TypeError(f"gridder must be a clgrid.Gridder, got {type(gridder).__name__}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if chunk_records is not None and int(chunk_records) < 1:
            raise ValueError(f"chunk_records must be >= 1, got {chunk_records}")
        self.gridder = gridder
        self.queue = gridder.queue
        self.context = gridder.context
        profile = gridder.profile
        if mode == "auto":
            mode = "mapped" if profile.device_type == "cpu" else "queues"
        self.mode = mode
        self.record_bytes = gridder.npol * gridder.complex_dtype.itemsize
        requested = int(chunk_records or DEFAULT_CHUNK_RECORDS)
        limit = int(profile.max_alloc_bytes * _ALLOC_FRACTION) // self.record_bytes
        self.split = requested > limit
        if self.split:
            warnings.warn(f"chunk of {requested} records ({requested * self.record_bytes} B) "
                          f"exceeds half the device's largest allocation "
                          f"({profile.max_alloc_bytes} B): split into chunks of {limit}",
                          stacklevel=2)
        self.chunk_records = max(1, min(requested, limit))
        # Uploads (queues) and maps (mapped) go through a second queue so that
        # they never wait behind the compute queue's kernels.
        self.copy_queue = cl.CommandQueue(self.context, self.queue.device)
        self._slots: list[_Slot] | None = None
        self._slot_capacity = 0
        self.last_stats: dict = {}

    # -- buffers -----------------------------------------------------------
    def _make_slots(self, capacity: int) -> list[_Slot]:
        """Two buffer sets of ``capacity`` records in host-visible memory."""
        slots = []
        flags = cl.mem_flags.ALLOC_HOST_PTR | cl.mem_flags.READ_ONLY
        for _ in range(2):
            header_buffer = cl.Buffer(self.context, flags, capacity * _HEADER_BYTES)
            records_buffer = cl.Buffer(self.context, flags, capacity * self.record_bytes)
            host_header = host_records = None
            slot = _Slot(header_buffer, records_buffer, host_header, host_records)
            if self.mode == "queues":   # pinned staging mapped once, device copies apart
                slot.host_header = self._map(header_buffer, (capacity, 4), np.int32)
                slot.host_records = self._map(records_buffer, (capacity, self.gridder.npol),
                                              self.gridder.complex_dtype)
                slot.device_header = cl.Buffer(self.context, cl.mem_flags.READ_ONLY,
                                               capacity * _HEADER_BYTES)
                slot.device_records = cl.Buffer(self.context, cl.mem_flags.READ_ONLY,
                                                capacity * self.record_bytes)
            slots.append(slot)
        return slots

    def _map(self, buffer: cl.Buffer, shape, dtype) -> np.ndarray:
        array, _ = cl.enqueue_map_buffer(self.queue, buffer, cl.map_flags.WRITE, 0, shape,
                                         dtype, is_blocking=True)
        return array

    def _slots_for(self, capacity: int) -> list[_Slot]:
        if self._slots is None or capacity > self._slot_capacity:
            self._release()
            self._slots, self._slot_capacity = self._make_slots(capacity), capacity
        return self._slots

    def _release(self) -> None:
        for slot in self._slots or ():
            for array in (slot.host_header, slot.host_records):
                if array is not None:
                    array.base.release(self.queue)
        self._slots = None

    def __del__(self):
        try:
            self._release()
        except Exception:   # interpreter shutdown: the context may be gone
            pass

    # -- gridding ----------------------------------------------------------
    def __call__(self, uvw_m, freq_hz, vis, weights=None, flags=None, *, out=None,
                 return_device: bool = False, progress: bool | None = None):
        """Grid like :meth:`Gridder.__call__`, in chunks."""
        if self.gridder.strategy == "core":
            return self._grid_core_rows(uvw_m, freq_hz, vis, weights, flags, out,
                                        return_device)
        plan = self.gridder.plan(uvw_m, freq_hz, flags)
        return self.grid_plan(plan, vis, weights, out=out, return_device=return_device,
                              progress=progress)

    def _grid_core_rows(self, uvw_m, freq_hz, vis, weights, flags, out,
                        return_device: bool):
        """Strategy 'core': one gridder call per block of rows, in order."""
        gridder = self.gridder
        uvw_m, vis = np.asarray(uvw_m), np.asarray(vis)
        n_chan = np.atleast_1d(np.asarray(freq_hz)).size
        full = (uvw_m.shape[0], n_chan, gridder.npol)

        def rows_of(array, first, stop):
            return None if array is None else np.broadcast_to(np.asarray(array),
                                                              full)[first:stop]

        grid = gridder.zeros() if out is None else out
        rows = max(1, self.chunk_records // max(n_chan, 1))
        starts = range(0, max(uvw_m.shape[0], 1), rows)
        stats = {"n_kept": 0, "n_offgrid": 0, "n_flagged": 0}
        for first in starts:
            stop = min(first + rows, uvw_m.shape[0])
            gridder(uvw_m[first:stop], freq_hz, vis[first:stop], rows_of(weights, first, stop),
                    rows_of(flags, first, stop), out=grid, return_device=True)
            for key in stats:
                stats[key] += gridder.last_stats[key]
        self.last_stats = dict(stats, n_records=stats["n_kept"], n_chunks=len(starts),
                               chunk_records=rows * n_chan, mode="rows", split=self.split)
        return grid if return_device else grid.get()

    def grid_plan(self, plan: UVPlan, vis, weights=None, *, out=None,
                  return_device: bool = False, progress: bool | None = None):
        """Grid with a plan from :meth:`Gridder.plan`, in chunks (a core
        gridder's plan is gridded in one go)."""
        gridder = self.gridder
        if gridder.strategy == "core":
            return gridder.grid_plan(plan, vis, weights, out=out, return_device=return_device)
        vis = gridder._check_vis(vis, plan)
        weights = gridder._check_weights(weights, plan)
        grid = gridder.zeros() if out is None else out
        if grid.dtype != gridder.complex_dtype or grid.shape != (gridder.npol, gridder.ny,
                                                                 gridder.nx):
            raise ValueError(f"out must be a {gridder.complex_dtype} device array of shape "
                             f"{(gridder.npol, gridder.ny, gridder.nx)}")
        n_records = plan.n_records
        chunk = self.chunk_records
        starts = range(0, n_records, chunk)
        n_chunks = len(starts)
        slots = self._slots_for(min(chunk, max(1, n_records)))
        show = progress if progress is not None else n_chunks > 4
        for index, start in enumerate(tqdm(starts, disable=not show, unit="chunk",
                                           desc="StreamingGridder")):
            stop = min(start + chunk, n_records)
            self._grid_chunk(slots[index % 2], plan, vis, weights, start, stop, grid)
        self.queue.finish()
        gridder._report_drops(plan)
        self.last_stats = {"n_records": n_records, "n_chunks": n_chunks,
                           "chunk_records": chunk, "mode": self.mode, "split": self.split,
                           "n_kept": plan.n_kept, "n_offgrid": plan.n_offgrid,
                           "n_flagged": plan.n_flagged}
        return grid if return_device else grid.get()

    def _grid_chunk(self, slot: _Slot, plan: UVPlan, vis, weights, start: int, stop: int,
                    grid: cla.Array) -> None:
        gridder = self.gridder
        n = stop - start
        if slot.done is not None:
            slot.done.wait()     # the device has finished with this buffer set
        header = plan.header[start:stop]
        records = chunk_records(plan, vis, weights, start, stop, gridder.complex_dtype)
        if self.mode == "queues":
            slot.host_header[:n] = header
            slot.host_records[:n] = records
            uploads = [
                cl.enqueue_copy(self.copy_queue, slot.device_header, slot.host_header[:n],
                                is_blocking=False),
                cl.enqueue_copy(self.copy_queue, slot.device_records, slot.host_records[:n],
                                is_blocking=False)]
            self.copy_queue.flush()
            header_buffer, records_buffer = slot.device_header, slot.device_records
        else:
            for buffer, values in ((slot.header_buffer, header),
                                   (slot.records_buffer, records)):
                mapped, _ = cl.enqueue_map_buffer(
                    self.copy_queue, buffer, cl.map_flags.WRITE_INVALIDATE_REGION, 0, values.shape,
                    values.dtype, is_blocking=True)
                mapped[...] = values
                mapped.base.release(self.copy_queue)
            self.copy_queue.flush()
            uploads = [cl.enqueue_marker(self.copy_queue)]   # unmaps done before the kernels
            header_buffer, records_buffer = slot.header_buffer, slot.records_buffer
        header_d = cla.Array(self.queue, (n, 4), np.int32, data=header_buffer)
        records_d = cla.Array(self.queue, (n, gridder.npol), gridder.complex_dtype,
                              data=records_buffer)
        slot.done = gridder.enqueue_records(header_d, records_d, grid, wait_for=uploads)
        self.queue.flush()


def chunk_records(plan: UVPlan, vis: np.ndarray, weights, start: int, stop: int,
                  dtype) -> np.ndarray:
    """Records ``start:stop`` of :meth:`UVPlan.records` without building the rest
    (the same arithmetic in the same order, so the values are identical)."""
    nrow, nchan = plan.shape
    npol = vis.shape[-1]
    first = int(plan.record_start[start])
    last = int(plan.record_start[stop]) if stop < plan.n_records else plan.n_kept
    kept = plan.kept[first:last]
    flat = vis.reshape(nrow * nchan, npol)[kept].astype(dtype)
    np.conjugate(flat, out=flat, where=plan.conjugated[first:last, None])
    factor = None
    if weights is not None:
        full = np.broadcast_to(np.asarray(weights, dtype=np.float64), (nrow, nchan, npol))
        factor = full[kept // nchan, kept % nchan]
    if plan.pol_mask is not None:
        mask = plan.pol_mask[first:last]
        factor = mask if factor is None else factor * mask
    if factor is not None:
        flat *= factor
    if stop - start == last - first:
        return flat
    return np.add.reduceat(flat, plan.record_start[start:stop] - first, axis=0)


__all__ = ["DEFAULT_CHUNK_RECORDS", "MODES", "StreamingGridder", "chunk_records"]

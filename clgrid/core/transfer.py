"""Gridding core: host -> device copies of visibilities, weights and images.

Device-resident inputs (``pyopencl.array.Array`` on the right context, of the
right dtype) are used as they are (:func:`device_array`).  Host arrays go to
GPUs through the device layer's pinned staging
(:class:`clgrid.device.hostio.PinnedStaging`: mapped ``ALLOC_HOST_PTR``
memory, host threads copying one chunk while the DMA sends the last), leased
per call from the device's :class:`clgrid.device.hostio.PinnedPool`.
Pageable copies from numpy reach 6 GB/s on the H200 host, pinned ones 55 GB/s
(``../shared/PLATFORMS.md``).  Large results come back in pinned memory of
their own (:class:`clgrid.device.hostio.PinnedResults`: one DMA, no host
copy), and such an array passed back in goes up in one DMA too.  On CPU
devices the device memory is host memory: host arrays are lent to the device
(:class:`clgrid.device.hostio.LentHostMemory`, ``USE_HOST_PTR``): in place
where aligned, else as a copy made by the copy threads (the Intel runtime's
own copy into a buffer runs at about 2 GB/s);
:meth:`Uploader.settle` waits for the kernels that read them before the caller
may change them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.hostio import LentHostMemory, PinnedResults, PinnedStaging

# Below this, staging costs more than it saves.
_MIN_PINNED_BYTES = 8 * 2 ** 20
# Below this, lending saves less than a buffer object costs.
_MIN_LENT_BYTES = 64 * 2 ** 10


def row_view(array_d: cla.Array, first: int, stop: int) -> cla.Array:
    """Rows ``first .. stop - 1`` (first axis) of a C-contiguous device array,
    as an array on a sub-buffer (kernels take buffers without offsets).
    Write the parent once before a kernel writes such a view: NVIDIA's runtime
    sends a never-written buffer through the host on a sub-buffer's first
    write (0.6 s for 930 MB on the H200)."""
    if first == 0 and stop == array_d.shape[0]:
        return array_d
    row_bytes = array_d.nbytes // max(array_d.shape[0], 1)
    base = array_d.base_data
    if not isinstance(base, cl.Buffer):   # a memory pool's buffer: the same cl_mem, retained
        base = cl.Buffer.from_int_ptr(base.int_ptr, retain=True)
    region = base.get_sub_region(array_d.offset + first * row_bytes,
                                 max((stop - first) * row_bytes, 1))
    return cla.Array(array_d.queue, (stop - first,) + array_d.shape[1:], array_d.dtype,
                     data=region)


class Uploader:
    """Host <-> device copies for one queue, pinned and chunked on GPUs.

    Row-block uploads (:meth:`rows_to_device`) go through a second queue of
    the same device, so they run beside the kernels of the first.  The
    pinned memory is the device's, shared by every plan: staging leased
    from :class:`~clgrid.device.hostio.PinnedPool` until :meth:`release`
    (a call's end), and the device's :class:`PinnedResults` unless
    ``results`` is given."""

    def __init__(self, queue: cl.CommandQueue, pinned: bool | None = None, allocator=None,
                 results: PinnedResults | None = None):
        self.queue = queue
        #: Where the row uploads' device arrays come from (a workspace's
        #: pool keeps them for the next call: a fresh 0.93 GB buffer cost
        #: its first use milliseconds of page mapping on an H100); None: new.
        self.allocator = allocator
        if pinned is None:
            pinned = queue.device.type & cl.device_type.GPU != 0
        self.pinned = bool(pinned)
        self._staging = PinnedStaging(queue.context, queue) if pinned else None
        self._results = ((results or PinnedResults.for_device(queue.context, queue.device))
                         if pinned else None)
        self._copy_queue: cl.CommandQueue | None = None
        self._row_stagings: dict[str, PinnedStaging] = {}
        on_cpu = not pinned and queue.device.type & cl.device_type.CPU != 0
        self._lender = (LentHostMemory(queue.context, queue.device.mem_base_addr_align // 8)
                        if on_cpu else None)
        self._lent = False

    def release(self) -> None:
        """Give the staging memory back to the device's pool (a call's end:
        the next call of any plan on the device leases it again)."""
        for staging in (self._staging, *self._row_stagings.values()):
            if staging is not None:
                staging.release()

    def rows_to_device(self, arrays: dict[str, tuple[np.ndarray | None, np.dtype]],
                       blocks: list[tuple[int, int]]) -> tuple[dict, Callable | None]:
        """Device arrays for host arrays whose first axis is the row, filled
        block by block.

        ``arrays``: name -> (host array or None, device dtype).  Returns the
        device arrays (None for None) and ``ready(block index) -> events``:
        the first call for a block copies its rows of every array (host
        threads into pinned memory, then the copy queue) and returns the
        events its kernels must wait for.  Without pinned staging, or with
        one block, everything is copied here and ``ready`` is None.
        """
        if not self.pinned or len(blocks) < 2:
            return {name: None if host is None else self.to_device(host, dtype)
                    for name, (host, dtype) in arrays.items()}, None
        if self._copy_queue is None:
            self._copy_queue = cl.CommandQueue(self.queue.context, self.queue.device)
        devices, sources = {}, []
        for name, (host, dtype) in arrays.items():
            if host is None:
                devices[name] = None
                continue
            devices[name] = cla.empty(self.queue, host.shape, dtype, allocator=self.allocator)
            if name not in self._row_stagings:
                self._row_stagings[name] = PinnedStaging(self.queue.context, self._copy_queue)
            sources.append((self._row_stagings[name], host, devices[name], np.dtype(dtype)))

        def ready(index: int) -> list:
            first, stop = blocks[index]
            events = [self._rows_direct(host, device, first, stop)
                      if self._direct(host, dtype)
                      else staging.upload_rows(host, device.data, first, stop, dtype)
                      for staging, host, device, dtype in sources]
            return [event for event in events if event is not None]

        return devices, ready

    def _direct(self, host: np.ndarray, dtype) -> bool:
        """Whether ``host`` goes to the device in one DMA, with no staging
        copy: the device's dtype, in pinned memory of a result handed out
        earlier (:meth:`clgrid.device.hostio.PinnedResults.holds`)."""
        return (self.pinned and host.dtype == np.dtype(dtype)
                and PinnedResults.holds(host, self.queue.context))

    def _rows_direct(self, host: np.ndarray, device: cla.Array, first: int,
                     stop: int) -> cl.Event | None:
        if stop <= first:
            return None
        return self._copy_rows(device.base_data, host, first, stop, device.offset, upload=True)

    def rows_to_pinned(self, array_d: cla.Array, out: np.ndarray, first: int, stop: int,
                       wait_for: list) -> cl.Event:
        """Enqueue the download of rows ``first .. stop - 1`` (first axis) of
        ``array_d`` into the same rows of ``out``, pinned memory
        (:meth:`empty_host`) of the same shape and dtype, on the copy queue
        once ``wait_for`` are done: the download of finished rows overlaps
        the device work on the rest.  Returns the copy's event (wait for it
        before reading ``out``)."""
        self.queue.flush()
        return self._copy_rows(array_d.base_data, out, first, stop, array_d.offset,
                               upload=False, wait_for=wait_for)

    def _copy_rows(self, buffer: cl.Buffer, host: np.ndarray, first: int, stop: int,
                   offset: int, upload: bool, wait_for=None) -> cl.Event:
        """Rows ``first .. stop - 1`` between ``host`` and ``buffer`` (its rows
        from byte ``offset``) on the copy queue, not waiting."""
        if self._copy_queue is None:
            self._copy_queue = cl.CommandQueue(self.queue.context, self.queue.device)
        at = offset + first * host[:1].nbytes
        event = (cl.enqueue_copy(self._copy_queue, buffer, host[first:stop], dst_offset=at,
                                 wait_for=wait_for, is_blocking=False) if upload else
                 cl.enqueue_copy(self._copy_queue, host[first:stop], buffer, src_offset=at,
                                 wait_for=wait_for, is_blocking=False))
        self._copy_queue.flush()
        return event

    def pinned_target(self, out: np.ndarray | None, shape: tuple, dtype) -> np.ndarray | None:
        """Where a result of ``shape`` and ``dtype`` can come down in rows by
        DMA: ``out`` when it is pinned memory of that dtype and C-contiguous,
        a new pinned array when ``out`` is None (GPUs, large results), else
        None (the caller downloads the usual way)."""
        dtype = np.dtype(dtype)
        if out is None:
            return self._new_pinned(shape, dtype)
        fits = out.dtype == dtype and out.size == int(np.prod(shape, dtype=np.int64))
        return out.reshape(shape) if fits and self._direct(out, dtype) else None

    def settle(self) -> None:
        """Wait for the kernels reading host arrays lent since the last call
        (a caller returning device results must, before the host arrays
        may change or go away)."""
        if self._lent:
            self.queue.finish()
            self._lent = False
            self._lender.release()

    def to_host(self, array_d: cla.Array, out: np.ndarray | None = None,
                accumulate: bool = False) -> np.ndarray:
        """``array_d`` in host memory (``out``, or a new array; added to
        ``out`` with ``accumulate``): through pinned staging on GPUs, after
        the queue's earlier work.  A new array of a large result lives in
        pinned memory on GPUs (:meth:`empty_host`), and a download into
        pinned memory (such an array, passed back as ``out``) is one DMA
        with no host copy."""
        if out is None:
            if accumulate:
                raise ValueError("to_host(accumulate=True) needs out")
            out = self.empty_host(array_d.shape, array_d.dtype)
        if out.size == 0:
            return out
        if not accumulate and out.nbytes == array_d.nbytes and self._direct(out, array_d.dtype):
            cl.enqueue_copy(self.queue, out, array_d.base_data, src_offset=array_d.offset,
                            is_blocking=True)
            return out
        if self._staging is None or array_d.nbytes < _MIN_PINNED_BYTES:
            if accumulate:
                out += array_d.get().reshape(out.shape)
            elif out.flags.c_contiguous and out.dtype == array_d.dtype:
                array_d.get(ary=out)
            else:
                out[...] = array_d.get()
        else:
            self._staging.download(array_d.base_data, out, array_d.offset,
                                   accumulate=accumulate)
        return out

    def empty_host(self, shape: tuple, dtype) -> np.ndarray:
        """A new host array for a result: on GPUs, from 8 MB up, in pinned
        memory (:class:`clgrid.device.hostio.PinnedResults`) where a slot is
        free, so that downloads into it are one DMA."""
        pinned = self._new_pinned(shape, np.dtype(dtype))
        return pinned if pinned is not None else np.empty(shape, dtype)

    def _new_pinned(self, shape: tuple, dtype: np.dtype) -> np.ndarray | None:
        """A result array in a free pinned slot (GPUs, 8 MB and up), or None."""
        if (self._results is None
                or int(np.prod(shape, dtype=np.int64)) * dtype.itemsize < _MIN_PINNED_BYTES):
            return None
        return self._results.take(shape, dtype)

    def to_device(self, host: np.ndarray, dtype) -> cla.Array:
        """``host`` on the device as ``dtype`` (C order): a copy, or on CPU
        devices a buffer lent over it or over an aligned copy (valid until
        the next :meth:`settle`).  Data of another precision is converted on
        the host first (the caller's choice)."""
        dtype = np.dtype(dtype)
        host = np.asarray(host)
        if self._lender is not None and host.size * dtype.itemsize >= _MIN_LENT_BYTES:
            self._lent = True
            return cla.Array(self.queue, host.shape, dtype, data=self._lender.lend(host, dtype))
        out = cla.empty(self.queue, host.shape, dtype)
        if host.size == 0:
            return out
        if host.dtype != dtype:
            host = host.astype(dtype)
        if self._direct(host, dtype):
            cl.enqueue_copy(self.queue, out.data, host, is_blocking=True)
        elif self._staging is None or host.nbytes < _MIN_PINNED_BYTES:
            out.set(np.ascontiguousarray(host))
        else:
            self._staging.upload(host, out.data)
        return out


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


__all__ = ["Uploader", "device_array", "row_view"]

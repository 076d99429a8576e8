"""HEALPix pre-ordering of sample chunks on the device, and the host staging that feeds it.

:class:`DevicePreorder` checks the samples, computes their RING pixels,
sorts them (:class:`clgrid.device.radixsort.RadixSort`, stable) and builds the
ring table (``templates/singledish_hpxorder.cl.mako``); :class:`Staging`
copies the caller's arrays into pinned blocks with host threads.
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl
import pyopencl.array as cl_array
from pyopencl.reduction import ReductionKernel

from ..device.kernels import KernelTemplate, Operation, real_dtype_name
from ..device.radixsort import RadixSort
from .gather import pixel_dtype


#: Largest chunk of samples sorted and gathered at once (device memory may
#: lower it).  Inputs of more than MIN_CHUNK_SAMPLES are cut into at least
#: PIPELINE_CHUNKS chunks so that sending one overlaps the work on another.
DEFAULT_CHUNK_SAMPLES = 1 << 25
MIN_CHUNK_SAMPLES = 1 << 22
PIPELINE_CHUNKS = 4
#: Rows per pinned staging block (two blocks alternate).
STAGING_ROWS = 1 << 21
#: Longitudes are accepted in [-360, 360] degrees and wrapped.
_LON_LIMIT_DEG = 360.0
#: Counter slots of templates/singledish_hpxorder.cl.mako's classify kernel.
_BAD_POSITION, _BAD_VALUE, _LAT_RANGE, _LON_RANGE = range(4)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask under taskset, a
    batch scheduler or a container), else ``os.cpu_count()``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass
class RawChunk:
    """Device copies of one chunk of the caller's arrays, as given."""

    lon: cl.Buffer
    lat: cl.Buffer
    data: cl.Buffer
    weights: cl.Buffer | None
    events: list = field(default_factory=list)   # uploads of the current contents
    readers: list = field(default_factory=list)  # kernels that read them


@dataclass
class SortedChunk:
    """Samples of one chunk sorted by RING pixel, as the gather reads them."""

    xyz: cl.Buffer
    pix: cl.Buffer
    data: cl.Buffer
    weights: cl.Buffer | None
    ring_start: cl.Buffer
    nside: int


class DevicePreorder(Operation):
    """Compile-once HEALPix pre-ordering of chunks on the device.

    ``classify`` (checks, counts, pixel per sample), a stable radix sort by
    pixel, ``permute`` (unit vectors, data and weights in pixel order) and
    ``ring_table`` (first sample of each ring): HyGrid's HpxPreOrdering
    without the host.

    Parameters
    ----------
    context
        A :class:`pyopencl.Context`, a :class:`pyopencl.CommandQueue` or None.
    nside
        HEALPix resolution.
    data_dtype
        float32 or float64: the dtype of data and weights on the device.
    pixel_rule
        ``"clgrid"`` or ``"cygrid"`` (cygrid 2.0.4's own pixel arithmetic, for
        ``compat="cygrid"``: the same pixels to the last bit of ``cos``).
    """

    def __init__(self, context=None, *, nside: int, data_dtype=np.float32,
                 pixel_rule: str = "clgrid"):
        super().__init__(context)
        if pixel_rule not in ("clgrid", "cygrid"):
            raise ValueError(f"pixel_rule must be 'clgrid' or 'cygrid', got {pixel_rule!r}")
        self.pixel_rule = pixel_rule
        self.nside = int(nside)
        self.pix_dtype = pixel_dtype(self.nside)
        self.data_dtype = np.dtype(data_dtype)
        self.sentinel = 12 * self.nside * self.nside  # above every pixel: sorts last
        self.sort = RadixSort(self.queue, key_dtype=self.pix_dtype)
        c_type = "unsigned int" if self.pix_dtype == np.uint32 else "unsigned long"
        with warnings.catch_warnings():  # drivers chat on success (Intel prints build logs)
            warnings.simplefilter("ignore", cl.CompilerWarning)
            self._min = ReductionKernel(self.context, self.pix_dtype, neutral=str(self.sentinel),
                                        reduce_expr="min(a, b)", map_expr="pix[i]",
                                        arguments=f"__global const {c_type} *pix")
            self._max = ReductionKernel(self.context, self.pix_dtype, neutral="0",
                                        reduce_expr="max(a, b)",
                                        map_expr=f"pix[i] == {self.sentinel}ul ? 0 : pix[i]",
                                        arguments=f"__global const {c_type} *pix")
        self._templates: dict[tuple, KernelTemplate] = {}

    def _kernels(self, has_weights: bool, write_weights: bool) -> KernelTemplate:
        key = (has_weights, write_weights)
        if key not in self._templates:
            self._templates[key] = KernelTemplate(self.queue, "singledish_hpxorder.cl.mako", {
                "pix_type": "uint" if self.pix_dtype == np.uint32 else "ulong",
                "data_in": real_dtype_name(self.data_dtype),
                "data_out": real_dtype_name(self.data_dtype),
                "has_weights": has_weights, "write_weights": write_weights,
                "pixel_rule": self.pixel_rule})
        return self._templates[key]

    def classify(self, raw: RawChunk, n: int, n_chan: int, pix: cl.Buffer,
                 counters: cl.Buffer) -> tuple[cl.Event, cl_array.Array, cl_array.Array]:
        """Pixel of each sample (dropped ones get the sentinel), the counters
        of bad input, and the smallest and largest kept pixel (device scalars)."""
        kernel = self._kernels(raw.weights is not None, False).kernel("classify")
        event = kernel(self.queue, (_round_up(n, 64),), (64,), raw.lon, raw.lat, raw.data,
                       raw.weights if raw.weights is not None else raw.data,
                       np.uint32(n), np.uint32(n_chan), np.uint32(self.nside),
                       self.pix_dtype.type(self.sentinel), pix, counters,
                       wait_for=raw.events)
        pix_array = cl_array.Array(self.queue, (n,), self.pix_dtype, data=pix)
        return event, self._min(pix_array, queue=self.queue), self._max(pix_array,
                                                                          queue=self.queue)

    def order(self, raw: RawChunk, n: int, n_kept: int, n_chan: int, pix_min: int, pix_max: int,
              work: "WorkBuffers", write_weights: bool) -> tuple[SortedChunk, list[cl.Event]]:
        """Sort the classified chunk and write it in pixel order; returns the
        chunk the gather reads and the events (the last is the ring table's)."""
        # Dropped samples have the sentinel: span + 1 maps them past every kept one.
        span = pix_max - pix_min + (1 if n_kept < n else 0)
        sorted_pix, order, events = self.sort(work.pix, n, pix_min, span,
                                              (work.pix_scratch, work.order_a, work.order_b))
        kernels = self._kernels(raw.weights is not None, write_weights)
        data_in = raw.data
        events.append(kernels.kernel("permute")(
            self.queue, (_round_up(n_kept, 64),), (64,), order, np.uint32(n_kept), raw.lon,
            raw.lat, data_in, raw.weights if raw.weights is not None else data_in,
            np.uint32(n_chan), work.xyz, work.data,
            work.weights if write_weights else work.data, sorted_pix, np.uint32(self.nside)))
        raw.readers.append(events[-1])
        events.append(kernels.kernel("ring_table")(
            self.queue, (_round_up(4 * self.nside, 64),), (64,), sorted_pix, np.uint32(n_kept),
            np.uint32(self.nside), work.ring_start))
        return SortedChunk(work.xyz, sorted_pix, work.data,
                           work.weights if write_weights else None, work.ring_start,
                           self.nside), events


@dataclass
class WorkBuffers:
    """Device buffers for sorting one chunk, reused by every chunk of a call."""

    pix: cl.Buffer
    pix_scratch: cl.Buffer
    order_a: cl.Buffer
    order_b: cl.Buffer
    xyz: cl.Buffer
    data: cl.Buffer
    weights: cl.Buffer
    ring_start: cl.Buffer
    counters: cl.Buffer

    @classmethod
    def allocate(cls, context: cl.Context, rows: int, n_chan: int, pix_dtype: np.dtype,
                 data_dtype: np.dtype, nside: int) -> "WorkBuffers":
        def buffer(nbytes):
            return cl.Buffer(context, cl.mem_flags.READ_WRITE, max(int(nbytes), 1))
        values = rows * n_chan * data_dtype.itemsize
        return cls(buffer(rows * pix_dtype.itemsize), buffer(rows * pix_dtype.itemsize),
                   buffer(rows * 4), buffer(rows * 4), buffer(rows * 32), buffer(values),
                   buffer(values), buffer(4 * nside * 4), buffer(16))


class Staging:
    """Pinned host blocks the inputs pass through on their way to the device.

    Copying into page-locked memory on several threads and sending from
    there is an order of magnitude faster than sending pageable memory
    (on the H200 machine: 55 GB/s against 6 GB/s).  Two blocks alternate:
    the threads fill one while the other is being sent.
    """

    def __init__(self, queue: cl.CommandQueue, n_chan: int, data_dtype: np.dtype,
                 has_weights: bool, rows: int):
        self.queue, self.rows = queue, int(rows)
        self.key = (n_chan, data_dtype.str, has_weights, self.rows)
        columns = [("lon", np.float64, ()), ("lat", np.float64, ()),
                   ("data", data_dtype, (n_chan,))]
        if has_weights:
            columns.append(("weights", data_dtype, (n_chan,)))
        self.blocks = []
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.ALLOC_HOST_PTR
        for _ in range(2):
            views = {}
            for name, dtype, tail in columns:
                shape = (self.rows,) + tail
                nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
                pinned = cl.Buffer(queue.context, flags, max(nbytes, 1))
                view, _ = cl.enqueue_map_buffer(queue, pinned, cl.map_flags.WRITE, 0, shape,
                                                dtype)
                views[name] = (pinned, view)
            self.blocks.append({"views": views, "events": []})

    def send(self, pool: ThreadPoolExecutor, n_threads: int, sources: dict, first: int,
             last: int, raw: RawChunk, wait_for: list) -> float:
        """Copy rows [first, last) of ``sources`` to ``raw`` (from row 0);
        returns the host seconds spent copying into pinned memory."""
        copying = 0.0
        for k, start in enumerate(range(first, last, self.rows)):
            stop = min(last, start + self.rows)
            block = self.blocks[k % 2]
            if block["events"]:  # the block's last contents are on their way still
                cl.wait_for_events(block["events"])
            tick = time.perf_counter()
            parts = np.linspace(start, stop, n_threads + 1).astype(np.int64)
            jobs = [(name, a, b) for name in sources for a, b in zip(parts[:-1], parts[1:])
                    if b > a]
            list(pool.map(lambda job: np.copyto(
                block["views"][job[0]][1][job[1] - start:job[2] - start],
                sources[job[0]][job[1]:job[2]], casting="unsafe"), jobs))
            copying += time.perf_counter() - tick
            events = []
            for name, source in sources.items():
                view = block["views"][name][1]
                row_bytes = view.nbytes // self.rows
                events.append(cl.enqueue_copy(
                    self.queue, getattr(raw, name), view[:stop - start],
                    dst_offset=(start - first) * row_bytes, is_blocking=False,
                    wait_for=wait_for))
            block["events"] = events
            raw.events.extend(events)
        return copying


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-int(n) // multiple) * multiple)


__all__ = ["DEFAULT_CHUNK_SAMPLES", "DevicePreorder", "MIN_CHUNK_SAMPLES", "PIPELINE_CHUNKS", "RawChunk", "STAGING_ROWS", "SortedChunk", "Staging", "WorkBuffers", "usable_cores"]

"""Dirty images on several OpenCL devices of one process.

:class:`MultiDeviceImager` splits the work of :class:`clgrid.imaging.imager.Imager`
over devices (several GPUs, sub-devices of a CPU, or devices of different
platforms side by side).  Every device gets its own context, queue and host
thread, and an :class:`clgrid.imaging.imager.Imager` over its share of the
rows that keeps the kernel, grid size and w planes of the *whole*
observation, so that the pieces add up to the single-device result.

How the work is split
---------------------
* Without w-gridding there is one uv grid: the rows are partitioned
  (``partition='time'``: contiguous row blocks, MS rows being time ordered;
  ``'baseline'``: whole baselines, balanced by row count), every device grids
  its rows.  ``reduce='images'`` (default): every device runs its own FFT
  and grid correction (both linear) and the dirty images are summed on the
  host; an image is 1 / (2 sigma^2) of a grid's bytes, and the FFT costs a
  GPU about 1 ms at 8192^2.  ``reduce='device'`` keeps the first device's
  grid where it is and adds the others into it there, ``reduce='host'``
  adds the downloaded grids with numpy; with both the first device runs the
  one FFT and the grid correction.  OpenCL has no copies between contexts,
  so whatever is summed crosses the host; benchmarks/scaling.py times all
  three.
* With w-gridding (W-stacking) every w plane needs its own FFT, and the
  split depends on what costs more.  ``partition='w-planes'``: the planes
  are partitioned into contiguous blocks of equal cost (gridding taps plus
  one FFT each), each device grids, transforms and corrects only its planes
  (the rows whose w touches them: every row, as a view of the caller's
  array, where they are at least half of them, since with W ~ 7 kernel
  planes a row touches most planes and a gathered copy costs more than
  the bus), and the partial images are summed; each plane is transformed
  once in total, as on one device.  Where every block takes every row and
  every device's spreader adds row blocks to planes (GPUs), the cut falls
  in equal cost even inside a plane: two neighbouring devices share that
  plane by rows (:func:`clgrid.scaleout.partition.plane_pieces`; 7 planes
  that carry points go 3.5 : 3.5 over two devices, not 4 : 3), and both
  transform it.  Rows (``'time'`` or ``'baseline'``):
  every device grids its rows into all planes and the images are summed;
  the FFTs and each plane's fixed costs are repeated on every device, but
  no row is sent to two devices.

``dirty2vis`` is split the same way; with plane blocks every device predicts
the rows its planes reach and the parts are summed on the host (as they come
down, in shard order, where every block takes every row).  Which partition
an imager takes unless told (:func:`clgrid.scaleout.partition.default_partition`):
rows without w and on GPUs (plane blocks grid at best a little faster there,
0.83 against 0.78 of ideal on two GPUs, and slower on four, where every
device's staging copies every row; they predict 1.7x slower, and an imager
serves both in a major cycle); plane blocks with w on CPUs.

The cutting (device lists, layouts, partitions) is in
:mod:`clgrid.scaleout.partition`; this module runs the pieces and adds them.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import gc
import math
import threading
import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.guard import one_thread_at_a_time
from ..device.hostio import copy_pool, gather_rows, own_copy, same_bits
from ..core.trace import stage
from ..core.plan import (FFT_COST_PER_CELL, GRID_COST_PER_TAP, GridLayout, ImageGeometry,
                         check_freq, check_uvw)
from ..device import plancache
from ..core.strategies import imaging_tiles
from ..core.tuning.timing import timed_calls
from ..device.profiles import DeviceProfile, context_of
from ..imaging.imager import Imager, fingerprint, plan_needs
from .partition import (REDUCTIONS, ReduceCosts, balance, choose_reduction, default_partition,
                        partition_planes, partition_rows, plane_costs, plane_pieces,
                        plane_span_of_rows, reduction_seconds, resolve_queues)


# ------------------------------------------------------------------ imager
class MultiDeviceImager:
    """:class:`clgrid.imaging.imager.Imager` spread over several devices.

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

    Parameters
    ----------
    devices
        Queues, contexts, devices or spec strings (one per device), or
        ``'all'``.  See :func:`resolve_queues`.
    uvw, freq
        As for :class:`Imager` (metres, Hz).
    partition
        ``'time'`` (contiguous row blocks), ``'baseline'`` (whole baselines,
        needs ``baseline_ids``) or, with w-gridding, ``'w-planes'``.
        Default: ``'time'``, but ``'w-planes'`` with w-gridding on CPUs
        (:func:`clgrid.scaleout.partition.default_partition`).
    baseline_ids
        One id per row, for ``partition='baseline'``.
    reduce
        What is summed without w-gridding: ``'images'`` (each device's dirty
        image), or each device's grid on the first device (``'device'``) or
        on the host (``'host'``).  Default (None or ``'auto'``): images or
        grids on the host, whichever :func:`clgrid.scaleout.partition.reduction_seconds`
        finds faster from each device's FFT and grid download as measured
        here once per device and grid (:func:`reduce_costs`); chosen when
        the imager is made, so every call sums the same way.
    npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, precision
        As for :class:`Imager`.
    flip_u, flip_v, flip_w, divide_by_n, sigma_min, sigma_max, center_x, center_y
        As for :class:`Imager`.
    double_precision_accumulation
        As for :class:`Imager`.
    geometry
        A :class:`clgrid.core.plan.ImageGeometry` in their place, as for
        :class:`Imager`.
    fft_backend
        As for :class:`Imager`.

    Attributes
    ----------
    layout
        The shared kernel, grid and w planes.
    shard_rows
        Row indices of each device.
    load_balance
        Mean over maximum of the estimated work per device (1.0 = perfect).
    overlap_downloads
        dirty2vis over contiguous row shares: each shard's own
        :meth:`Imager.dirty2vis` into its rows of the output, its row blocks
        coming down as each is final (default True), instead of one download
        a shard after its work.
    last_timings
        Wall seconds of the phases of the last :meth:`vis2dirty`: ``grid_s``
        (parallel gridding, or gridding + FFT per plane block with w; the
        images are summed as they are downloaded, inside it),
        ``reduce_s`` (summing grids: ``reduce='grids'`` or ``'device'``) and
        ``fft_s`` (the one FFT and grid correction without w).
    """

    def __init__(self, devices, *, uvw, freq, partition: str | None = None, baseline_ids=None,
                 reduce: str | None = None, npix_x: int | None = None, npix_y: int | None = None,
                 pixsize_x: float | None = None, pixsize_y: float | None = None,
                 epsilon: float | None = None, do_wgridding: bool = False,
                 precision: str = "single", flip_u: bool = False, flip_v: bool = False,
                 flip_w: bool = False, divide_by_n: bool = True,
                 sigma_min: float = ImageGeometry.sigma_min,
                 sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                 center_y: float = 0.0, double_precision_accumulation: bool = False,
                 geometry: ImageGeometry | None = None, fft_backend: str | None = None):
        if reduce not in REDUCTIONS + ("auto", None):
            raise ValueError(f"reduce must be one of {REDUCTIONS} or 'auto', got {reduce!r}")
        self.reduce = reduce
        #: The measured model's seconds of each reduction (reduce='auto', no w).
        self.reduction_seconds: dict[str, float] = {}
        self.last_timings: dict[str, float] = {}
        self.queues = resolve_queues(devices)
        self.uvw_m = own_copy(check_uvw(uvw), uvw)
        self.freq_hz = check_freq(freq)
        self.geometry = geometry = ImageGeometry.given(
            geometry,
            npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
            epsilon=epsilon, do_wgridding=do_wgridding, precision=precision,
            flip_u=flip_u, flip_v=flip_v, flip_w=flip_w, divide_by_n=divide_by_n,
            sigma_min=sigma_min, sigma_max=sigma_max, center_x=center_x,
            center_y=center_y, double_precision_accumulation=double_precision_accumulation)
        self.layout = GridLayout.of_rows(geometry, self.uvw_m, self.freq_hz)
        self.do_w = geometry.do_w
        self.partition = partition or self._default_partition()
        if self.partition == "w-planes" and not self.do_w:
            raise ValueError("partition='w-planes' needs do_wgridding=True")
        n_dev = len(self.queues)
        #: Per shard, the rows of an end plane it shares with the next ({} none).
        self.plane_rows: list[dict] = [{}] * n_dev
        if self.partition == "w-planes":
            self.plane_blocks, self.shard_rows = self._plane_partition(n_dev)
        else:
            self.plane_blocks = [None] * n_dev
            self.shard_rows = partition_rows(self.uvw_m.shape[0], n_dev, self.partition,
                                             baseline_ids)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=n_dev)
        self._sum_lock = threading.Lock()
        #: Held by the functional API's calls, which share a cached imager.
        self.call_lock = threading.Lock()
        self.shards = self._map(lambda d: self._make_shard(d, fft_backend))
        #: dirty2vis over contiguous row shares: each shard's own call, whose
        #: row blocks come down as each is final, instead of one DMA a shard
        #: after its work (2 x H100, 2026-11-27: w 39.4-42.2 -> 33.1-35.4 ms,
        #: no w 20.8-21.8 -> 17.0-19.5 ms; benchmarks/RESULTS.md).
        self.overlap_downloads = True
        if self.reduce in ("auto", None):
            self.reduce = self._measured_reduction()

    # ---------------------------------------------------------- construction
    def _default_partition(self) -> str:
        """Rows, but w planes for w-gridding on CPUs (see the module notes
        and :func:`clgrid.scaleout.partition.default_partition`)."""
        return default_partition(self.do_w, _on_cpus(self.queues))

    def _plane_partition(self, n_dev):
        first, last = plane_span_of_rows(self.geometry, self.layout, self.uvw_m, self.freq_hz)
        touches = np.zeros(self.layout.n_planes + 1, np.int64)
        np.add.at(touches, first, 1)
        np.add.at(touches, last + 1, -1)
        rows_per_plane = np.cumsum(touches)[:-1]
        support = self.layout.choice.support
        nu, nv = self.layout.nu, self.layout.nv
        cost = plane_costs(rows_per_plane, GRID_COST_PER_TAP * len(self.freq_hz) * support ** 3,
                           FFT_COST_PER_CELL * nu * nv * math.log2(nu * nv))
        blocks = partition_planes(cost, n_dev)
        shard_rows = [_touching_or_all(first, last, start, stop) for start, stop in blocks]
        n_rows = self.uvw_m.shape[0]
        if all(rows.size == n_rows for rows in shard_rows) and self._adds_row_blocks():
            # every block takes every row: cut a plane between two devices by
            # rows where whole planes do not split evenly (7 planes: 4 : 3)
            align = max(DeviceProfile.from_device(q.device).base_align_bytes
                        for q in self.queues)
            pieces = plane_pieces(cost, n_dev, n_rows, max(align, 1))
            self.plane_rows = [rows for _, _, rows in pieces]
            return ([(start, stop) for start, stop, _ in pieces],
                    [np.arange(n_rows) if stop > start else np.arange(0)
                     for start, stop, _ in pieces])
        return blocks, shard_rows

    def _adds_row_blocks(self) -> bool:
        """Whether every device's spreader adds a row block to planes (the
        CPU vector tile does not), so that two devices can share a plane by
        rows."""
        return not any(imaging_tiles(q, self.geometry, self.layout).vector
                       for q in self.queues)

    def _measured_reduction(self) -> str:
        """Images with w (each plane has its own FFT) or on one device; else
        the faster of images and grids summed on the host, from each
        device's measured costs (:func:`reduce_costs`)."""
        active = [d for d, shard in enumerate(self.shards) if shard is not None]
        if self.do_w or len(active) < 2:
            return "images"
        costs = self._map(lambda d: reduce_costs(self.shards[d]) if d in active else None)
        costs = [c for c in costs if c is not None]
        self.reduction_seconds = reduction_seconds(costs)
        return choose_reduction(costs)

    def _make_shard(self, index: int, fft_backend):
        rows = self.shard_rows[index]
        if rows.size == 0:
            return None
        return Imager(self.queues[index], uvw=self.uvw_m[rows], freq=self.freq_hz,
                      geometry=self.geometry, layout=self.layout,
                      planes=self.plane_blocks[index], fft_backend=fft_backend,
                      plane_rows=self.plane_rows[index])

    def _map(self, function) -> list:
        futures = [self._pool.submit(function, d) for d in range(len(self.queues))]
        return [future.result() for future in futures]

    @property
    def load_balance(self) -> float:
        return balance([rows.size for rows in self.shard_rows])

    @property
    def n_rows(self) -> int:
        return self.uvw_m.shape[0]

    def close(self) -> None:
        """Stop the host threads."""
        self._pool.shutdown(wait=True)

    # ---------------------------------------------------------- vis2dirty
    @one_thread_at_a_time
    def vis2dirty(self, vis, wgt=None, mask=None, dirty=None) -> np.ndarray:
        """Dirty image(s) of ``vis``, as :meth:`Imager.vis2dirty` on one device
        (``dirty``: an output array, summed into in place where it is of the
        result's dtype and C-contiguous)."""
        vis = np.asarray(vis)
        if vis.ndim not in (2, 3) or vis.shape[:2] != (self.n_rows, len(self.freq_hz)):
            raise ValueError(f"vis must be (nrow, nchan[, npol]) = ({self.n_rows}, "
                             f"{len(self.freq_hz)}[, npol]), got {vis.shape}")
        def piece(d):   # in the device's thread: the copies run in parallel
            rows = self.shard_rows[d]
            return _take(vis, rows), _take(wgt, rows), _take(mask, rows)

        started = time.perf_counter()
        if self.do_w or self.reduce == "images":
            image = self._images_summed(piece, dirty)
            self.last_timings = {"grid_s": time.perf_counter() - started, "reduce_s": 0.0,
                                 "fft_s": 0.0}
            image = image[0] if vis.ndim == 2 and image.ndim == 3 else image
            return _into(dirty, image)
        first = self.shards.index(self._first_shard())
        grids = self._map(lambda d: None if self.shards[d] is None else self.shards[d].grid_only(
            *piece(d), on_device=self.reduce == "device" and d == first))
        gridded = time.perf_counter()
        others = [g for d, g in enumerate(grids) if g is not None and d != first]
        if self.reduce == "device":
            grid = grids[first]
            for other in others:
                grid += cla.to_device(grid.queue, other)
            grid.queue.finish()
        else:
            grid = _sum([grids[first]] + others)
        reduced = time.perf_counter()
        image = self.shards[first].grids_to_dirty(grid)
        self.last_timings = {"grid_s": gridded - started, "reduce_s": reduced - gridded,
                             "fft_s": time.perf_counter() - reduced}
        return _into(dirty, image[0] if vis.ndim == 2 else image)

    def _images_summed(self, piece, dirty=None) -> np.ndarray:
        """The shards' dirty images, summed as they come down
        (:meth:`_summed_in_turns`).  A ``dirty`` of the image's dtype and
        C-contiguous is the result; else one in pinned memory on GPUs, so
        that the first image comes down in one DMA (2 x H100: a fresh
        array's first touch made that download 7.7 ms, benchmarks/RESULTS.md)."""
        def target(dirty_d):
            caller = (dirty is not None and dirty.dtype == dirty_d.dtype
                      and dirty.flags.c_contiguous and dirty.size == dirty_d.size)
            return (dirty.reshape(dirty_d.shape) if caller else
                    self._first_shard().uploader.empty_host(dirty_d.shape, dirty_d.dtype))

        image = self._summed_in_turns(lambda d: self.shards[d].vis2dirty_device(*piece(d)),
                                      target)
        return image.astype(self._first_shard().vis_real, copy=False)

    def _summed_in_turns(self, compute, target, after=None) -> np.ndarray:
        """``compute(d)`` (a device array) on every shard's thread, summed
        into ``target(first device array)`` as they come down: the first
        download writes it, each later one adds to it straight from its
        pinned staging (no pass of its own over the result).  Downloads take
        turns; with more than two shards in shard order (each waits for the
        one before), so the bits never depend on which device finishes first
        (two addends commute exactly).  ``after(d)``: on the device's thread
        once its part is down."""
        active = [d for d, shard in enumerate(self.shards) if shard is not None]
        in_order = len(active) > 2
        done = {d: threading.Event() for d in active}
        result: dict = {"sum": None, "written": False}

        def add(d):
            try:
                shard = self.shards[d]
                part_d = compute(d)
                position = active.index(d)
                if in_order and position:
                    done[active[position - 1]].wait()
                with self._sum_lock:
                    if result["sum"] is None:
                        result["sum"] = target(part_d)
                    with stage(shard.trace, "to_host"):
                        shard.uploader.to_host(part_d, out=result["sum"],
                                               accumulate=result["written"])
                    result["written"] = True
                if after is not None:
                    after(d)
            finally:
                done[d].set()

        self._map(lambda d: add(d) if d in done else None)
        return result["sum"]

    def _whole_shard(self) -> Imager | None:
        """The one shard, where a single device holds every row and plane."""
        active = [d for d, shard in enumerate(self.shards) if shard is not None]
        if len(active) != 1:
            return None
        d = active[0]
        planes = self.plane_blocks[d]
        whole_planes = planes is None or tuple(planes) == (0, self.layout.n_planes)
        return (self.shards[d] if whole_planes and not self.plane_rows[d]
                and self.shard_rows[d].size == self.n_rows else None)

    def _first_shard(self) -> Imager:
        return next(shard for shard in self.shards if shard is not None)

    # ---------------------------------------------------------- dirty2vis
    @one_thread_at_a_time
    def dirty2vis(self, dirty, wgt=None, mask=None, vis=None) -> np.ndarray:
        """Visibilities of ``dirty``, as :meth:`Imager.dirty2vis` on one
        device (``vis``: an output array, filled in place where it is of the
        result's dtype and C-contiguous)."""
        dirty = np.asarray(dirty)
        shape = (self.n_rows, len(self.freq_hz))
        for name, array in (("wgt", wgt), ("mask", mask)):
            if array is not None and np.shape(array) != shape:
                raise ValueError(f"{name} must have shape {shape}, got {np.shape(array)}")
        whole = self._whole_shard()
        if whole is not None:
            # one device with every row and plane: its own call, which sends
            # each row block down as soon as it is final (2026-11-27, one
            # H100, w: 49 ms against 61 ms through the shards' path)
            return whole.dirty2vis(dirty, wgt, mask, vis=vis)
        shard = self._first_shard()
        npol = 1 if dirty.ndim == 2 else dirty.shape[0]
        result_shape = shape if dirty.ndim == 2 else shape + (npol,)
        if vis is not None and tuple(vis.shape) != result_shape:
            raise ValueError(f"vis must have shape {result_shape}, got {vis.shape}")
        planes = self.partition == "w-planes"   # shards share rows: their parts add up
        caller = vis is not None and vis.dtype == shard.vis_complex and vis.flags.c_contiguous
        if planes and all(shard is None or rows.size == self.n_rows
                          for shard, rows in zip(self.shards, self.shard_rows)):
            # every shard predicts every row from its planes: the parts are
            # summed as they come down, as vis2dirty's images are
            def part(d):
                return self.shards[d].dirty2vis_device(dirty, wgt, mask)

            def target(vis_d):
                return (vis.reshape(vis_d.shape) if caller
                        else shard.uploader.empty_host(vis_d.shape, vis_d.dtype))

            out = self._summed_in_turns(part, target,
                                        lambda d: self.shards[d].release_planes())
            return _into(vis, out[:, :, 0] if dirty.ndim == 2 else out, "vis")
        if caller:
            out = vis.reshape(shape + (npol,))
            if planes:
                out[...] = 0
        elif planes:
            out = np.zeros(shape + (npol,), shard.vis_complex)
        else:   # pinned on GPUs: every device's rows come down in one DMA of its own
            out = shard.uploader.empty_host(shape + (npol,), shard.vis_complex)

        def predict(d):
            """Each device applies the weights and flags of its rows; in a
            row partition every row is in one shard, so a contiguous share
            goes straight into ``out``."""
            rows = self.shard_rows[d]
            if self.shards[d] is None:
                return
            if self.overlap_downloads and not planes and _is_block(rows):
                # the shard's own call: its row blocks come down as each is final
                block = out[rows[0]:rows[-1] + 1]
                self.shards[d].dirty2vis(dirty, _take(wgt, rows), _take(mask, rows),
                                         vis=block if dirty.ndim == 3 else block[:, :, 0])
                return
            vis_d = self.shards[d].dirty2vis_device(dirty, _take(wgt, rows), _take(mask, rows))
            if planes:
                part = self.shards[d].uploader.to_host(vis_d)
                with self._sum_lock:   # rows are unique within a shard, not across
                    out[rows] += part
            elif _is_block(rows):
                # one blocking DMA a device into the pinned output (overlap_downloads off)
                self.shards[d].uploader.to_host(vis_d, out=out[rows[0]:rows[-1] + 1])
            else:
                out[rows] = self.shards[d].uploader.to_host(vis_d)
            self.shards[d].release_planes()

        self._map(predict)
        return _into(vis, out[:, :, 0] if dirty.ndim == 2 else out, "vis")


_measured: dict[tuple, ReduceCosts] = {}
_measured_lock = threading.Lock()


def reduce_costs(shard: Imager) -> ReduceCosts:
    """What the reductions' costs depend on for ``shard``'s device, measured
    once per device, grid and image shape in this process: one FFT of its
    grid (the second of two, on zeros) and one download of the grid to the
    host (the second of two), and numpy adding a grid-sized array."""
    image = shard.engine.image
    key = (shard.queue.device.int_ptr, shard.nu, shard.nv, image.grid_complex.str,
           shard.npix_x, shard.npix_y)
    with _measured_lock:
        if key in _measured:
            return _measured[key]
    with shard.engine.lease() as ws:
        grid_d = ws.planes_d[:1]
        grid_d.fill(0)
        fft_s = _second_of_two(lambda: ws.fft.forward(grid_d), ws.queue)
        host = ws.uploader.to_host(grid_d)
        grid_down_s = _second_of_two(lambda: ws.uploader.to_host(grid_d, out=host), None)
    started = time.perf_counter()
    np.add(host, host, out=host)
    add_s = max(time.perf_counter() - started, 1e-9)
    costs = ReduceCosts(fft_s=fft_s, grid_down_s=grid_down_s, grid_bytes=host.nbytes,
                        image_bytes=shard.npix_x * shard.npix_y * image.grid_complex.itemsize // 2,
                        host_add_bytes_s=host.nbytes / add_s)
    with _measured_lock:
        _measured[key] = costs
    return costs


def _second_of_two(step, queue: cl.CommandQueue | None) -> float:
    """Seconds of ``step`` (its work on ``queue`` included) the second time."""
    return timed_calls(step, queue, repeats=1, warmup=1, warmup_s=0.0)[0]


def _into(out: np.ndarray | None, result: np.ndarray, name: str = "dirty") -> np.ndarray:
    """``result`` in the caller's ``out`` (copied unless it already is)."""
    if out is None:
        return result
    if tuple(out.shape) != tuple(result.shape):
        raise ValueError(f"{name} must have shape {result.shape}, got {out.shape}")
    if not np.shares_memory(out, result):
        out[...] = result
    return out


#: A plane block whose rows are at least this share of all rows takes every
#: row, as a view: the host gather of the touching rows (a copy of most of
#: the visibilities in every call) costs more than sending the few others,
#: whose points no pass of the block reads.
ALL_ROWS_SHARE = 0.5


def _touching_or_all(first: np.ndarray, last: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows whose planes ``first .. last`` meet the block ``start .. stop - 1``,
    or every row where they are at least :data:`ALL_ROWS_SHARE` of them."""
    touching = np.flatnonzero((first < stop) & (last >= start))
    if touching.size and touching.size >= ALL_ROWS_SHARE * first.size:
        return np.arange(first.size)
    return touching


def _is_block(rows: np.ndarray) -> bool:
    """Whether sorted, unique ``rows`` are one contiguous block."""
    return bool(rows.size) and rows[-1] - rows[0] == rows.size - 1


def _take(array, rows: np.ndarray):
    """``array[rows]``; a view, not a copy, when the rows are one contiguous
    block, else gathered in slabs of rows on the copy threads."""
    if array is None:
        return None
    array = np.asarray(array)
    if _is_block(rows):
        return array[rows[0]:rows[-1] + 1]
    return gather_rows(array, rows)


def _sum(arrays: list[np.ndarray]) -> np.ndarray:
    """The sum of equal-shaped arrays, added into the first (the shards' own
    fresh results), in slabs on the copy threads; every element adds its
    terms in list order, so the bits do not depend on the threads."""
    total = arrays[0] if arrays[0].flags.c_contiguous else arrays[0].copy()
    if len(arrays) == 1:
        return total
    flat = [total.reshape(-1)] + [array.reshape(-1) for array in arrays[1:]]
    step = max(1, (1 << 20) // total.itemsize)

    def add(start: int) -> None:
        for other in flat[1:]:
            flat[0][start:start + step] += other[start:start + step]

    list(copy_pool().map(add, range(0, flat[0].size, step)))
    return total


# ------------------------------------------------------------------ functional
@atexit.register
def clear_cache() -> None:
    """Drop the cached imagers, one device's and several devices' (their
    threads and device buffers)."""
    plancache.plans.clear()
    gc.collect()  # free device objects while pyopencl is still whole


def _on_cpus(queues: list[cl.CommandQueue]) -> bool:
    return all(queue.device.type & cl.device_type.CPU for queue in queues)


def _device_key(queues: list[cl.CommandQueue]) -> tuple:
    return tuple((context_of(q).int_ptr, q.device.int_ptr) for q in queues)


def _bytes_by_device(imager: MultiDeviceImager) -> dict[int, int]:
    held: dict[int, int] = {}
    for shard in imager.shards:
        if shard is not None and shard.engine is not None:
            ptr = shard.queue.device.int_ptr
            held[ptr] = held.get(ptr, 0) + shard.engine.device_bytes
    return held


def cached_multi_imager(devices, uvw, freq, geometry: ImageGeometry) -> MultiDeviceImager:
    """One :class:`MultiDeviceImager` per (devices, uvw, freq, geometry), in
    the process's plan cache (:mod:`clgrid.device.plancache`) beside the
    one-device imagers: making one drops the least recently used plans of
    its devices until it fits, so a one-GPU call's w planes do not stay
    beside the shards' on the same card."""
    uvw, freq = check_uvw(uvw), check_freq(freq)
    queues = resolve_queues(devices)
    partition = default_partition(geometry.do_w, _on_cpus(queues))
    # a strided sample, then an exact comparison (valid=): hashing the whole
    # uvw cost 30-45 ms a call on an H100 host (116 M visibilities)
    key = ("multi", _device_key(queues), fingerprint(uvw), freq.tobytes(), geometry)

    def needs() -> dict[int, tuple[int, int]]:
        layout = GridLayout.of_rows(geometry, uvw, freq)
        wanted: dict[int, tuple[int, int]] = {}
        shares = 1 if partition == "w-planes" else len(queues)   # plane blocks: every row
        for queue in queues:
            wanted.update(plan_needs(queue, layout, uvw.shape[0] * freq.shape[0] // shares,
                                     geometry.vis_real.itemsize))
        return wanted

    imager = plancache.plans.get_or_build(
        key, lambda: MultiDeviceImager(queues, uvw=uvw, freq=freq, geometry=geometry,
                                       partition=partition),
        _bytes_by_device, needs, close=MultiDeviceImager.close,
        valid=lambda imager: same_bits(imager.uvw_m, uvw))
    return imager


def vis2dirty(devices, geometry: ImageGeometry, *, uvw, freq, vis, wgt=None, mask=None,
              dirty=None) -> np.ndarray:
    """:func:`clgrid.imaging.imager.vis2dirty_with` on several devices: the
    cached :class:`MultiDeviceImager`'s :meth:`~MultiDeviceImager.vis2dirty`."""
    imager = cached_multi_imager(devices, uvw, freq, geometry)
    with imager.call_lock:   # shared by every thread: they take turns
        return imager.vis2dirty(vis, wgt, mask, dirty)


def dirty2vis(devices, geometry: ImageGeometry, *, uvw, freq, dirty, wgt=None, mask=None,
              vis=None) -> np.ndarray:
    """:func:`clgrid.imaging.imager.dirty2vis_with` on several devices."""
    imager = cached_multi_imager(devices, uvw, freq, geometry)
    with imager.call_lock:
        return imager.dirty2vis(dirty, wgt, mask, vis)


__all__ = ["MultiDeviceImager", "cached_multi_imager", "reduce_costs", "clear_cache", "dirty2vis", "vis2dirty"]

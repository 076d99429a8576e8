"""Dirty images on several OpenCL devices of one process.

:class:`MultiDeviceImager` splits the work of :class:`clgrid.imaging.Imager`
over devices (several GPUs, sub-devices of a CPU, or devices of different
platforms side by side).  Every device gets its own context, queue and host
thread, and a :class:`_ShardImager`: an ``Imager`` over its share of the
rows that keeps the kernel, grid size and w planes of the *whole*
observation, so that the pieces add up to the single-device result.

How the work is split
---------------------
* Without w-gridding there is one uv grid: the rows are partitioned
  (``partition='time'``: contiguous row blocks, MS rows being time ordered;
  ``'baseline'``: whole baselines, balanced by row count), every device grids
  its rows into a private grid, the grids are summed once and the first
  device runs the one FFT and the grid correction.  ``reduce='device'``
  (default) keeps the first device's grid where it is and adds the others
  into it there; ``reduce='host'`` downloads every grid and adds them with
  numpy.  OpenCL has no copies between contexts, so either way the other
  grids cross the host; benchmarks/scaling.py times both.
* With w-gridding (W-stacking) every w plane needs its own FFT: the planes
  are partitioned into contiguous blocks of equal cost (gridding taps plus
  one FFT each), each device grids, transforms and corrects only its planes
  (the rows whose w touches them), and the partial images are summed.  Each
  plane is transformed once in total, as on one device.

``dirty2vis`` is split the same way; the partial visibilities of rows that
two plane blocks share are added.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import gc
import math
import time
from typing import Sequence

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .device import DeviceProfile, all_devices, create_context, resolve_queue, select_device
from .eskernel import KernelChoice, good_fft_size
from .imaging import (_FFT_COST_PER_CELL, _GRID_COST_PER_TAP, Imager, _check_epsilon,
                      _check_freq, _check_npix, _check_positive, _check_uvw, _choose_kernel,
                      _precision_dtype, _precision_of)

PARTITIONS = ("time", "baseline")
REDUCTIONS = ("host", "device")

# Keyword arguments of Imager that fix the geometry (everything but the data).
_GEOMETRY_KEYS = ("npix_x", "npix_y", "pixsize_x", "pixsize_y", "epsilon", "do_wgridding",
                  "precision", "flip_u", "flip_v", "flip_w", "divide_by_n", "sigma_min",
                  "sigma_max", "center_x", "center_y", "double_precision_accumulation")


# ------------------------------------------------------------------ devices
def cpu_sub_devices(count: int, device: "str | cl.Device | None" = None) -> list[cl.Device]:
    """Split a CPU device into ``count`` equal sub-devices (real OpenCL devices).

    Useful to run several devices in one process on one CPU (tests, NUMA).
    ``device``: a spec of :func:`clgrid.select_device`; default the best
    usable CPU device that is not a simulator.
    """
    parent = select_device(device) if device is not None else best_cpu()
    units = int(parent.max_compute_units)
    if count < 1 or units < count:
        raise ValueError(f"cannot split {parent.name.strip()!r} ({units} compute units) "
                         f"into {count} sub-devices")
    try:
        subs = parent.create_sub_devices(
            [cl.device_partition_property.EQUALLY, units // count])
    except cl.Error as error:
        raise ValueError(f"{parent.name.strip()!r} cannot be partitioned: {error}") from None
    return list(subs[:count])


def best_cpu() -> cl.Device:
    """The usable, non-simulated CPU device with the most compute units."""
    cpus = [d for d in all_devices() if DeviceProfile.from_device(d).device_type == "cpu"
            and DeviceProfile.from_device(d).usable
            and not DeviceProfile.from_device(d).is_simulator]
    if not cpus:
        raise LookupError("no usable OpenCL CPU device")
    return max(cpus, key=lambda d: d.max_compute_units)


def all_gpus_or_best() -> list[cl.Device]:
    """``devices='all'``: every usable device of the best device's platform and type."""
    best = select_device()
    best_profile = DeviceProfile.from_device(best)
    same = [d for d in all_devices() if d.platform == best.platform
            and DeviceProfile.from_device(d).device_type == best_profile.device_type
            and DeviceProfile.from_device(d).usable]
    return same or [best]


def resolve_queues(devices) -> list[cl.CommandQueue]:
    """One command queue per entry of ``devices``, each on its own context.

    Entries may be :class:`pyopencl.CommandQueue` (used as is),
    :class:`pyopencl.Context`, :class:`pyopencl.Device` or a spec string of
    :func:`clgrid.select_device`; ``'all'`` is :func:`all_gpus_or_best`.
    """
    if isinstance(devices, str) and devices == "all":
        devices = all_gpus_or_best()
    elif isinstance(devices, (str, cl.Device, cl.Context, cl.CommandQueue)):
        devices = [devices]
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    queues = []
    for entry in devices:
        if isinstance(entry, (cl.CommandQueue, cl.Context)):
            queues.append(resolve_queue(entry))
        else:
            queues.append(resolve_queue(create_context(entry)))
    seen = [q.device.int_ptr for q in queues]
    if len(set(seen)) != len(seen):
        raise ValueError("the same device is listed twice; split a CPU with "
                         "clgrid.multidevice.cpu_sub_devices instead")
    return queues


# ------------------------------------------------------------------ layout
def geometry_of(**kwargs) -> dict:
    """The geometry keywords of :class:`Imager`, with its defaults filled in."""
    unknown = set(kwargs) - set(_GEOMETRY_KEYS)
    if unknown:
        raise TypeError(f"unknown imaging arguments {sorted(unknown)}")
    geometry = dict(do_wgridding=False, precision="single", flip_u=False, flip_v=False,
                    flip_w=False, divide_by_n=True, sigma_min=1.1, sigma_max=2.6,
                    center_x=0.0, center_y=0.0, double_precision_accumulation=False)
    geometry.update(kwargs)
    missing = [k for k in ("npix_x", "npix_y", "pixsize_x", "pixsize_y", "epsilon")
               if k not in geometry]
    if missing:
        raise TypeError(f"missing imaging arguments {missing}")
    _check_npix(geometry["npix_x"], geometry["npix_y"])
    _check_positive(geometry["pixsize_x"], "pixsize_x")
    _check_positive(geometry["pixsize_y"], "pixsize_y")
    _check_epsilon(geometry["epsilon"], _precision_dtype(geometry["precision"]))
    return geometry


@dataclasses.dataclass(frozen=True)
class Layout:
    """What every piece of one observation must share: kernel, grid, w planes.

    Built on the host from the w range and the visibility count only, so
    that a Dask client can make it without the data or a device.
    """

    choice: KernelChoice
    nu: int
    nv: int
    w_range: tuple[float, float]
    n_planes: int
    dw: float
    w0: float

    @classmethod
    def build(cls, geometry: dict, freq_hz, w_min_m: float, w_max_m: float,
              n_vis: int) -> "Layout":
        """Layout of an observation whose (sign-flipped) w spans [w_min_m, w_max_m]."""
        probe = _probe(geometry, freq_hz)
        ends = np.outer([w_min_m, w_max_m], probe.freq_hz[[0, -1]]) / 299792458.0
        probe._w_range = (float(ends.min()), float(ends.max()))
        choice = _choose_kernel(probe.epsilon, probe.npix_x, probe.npix_y, int(n_vis),
                                probe._n_planes_for, probe.do_w, geometry["sigma_min"],
                                geometry["sigma_max"], probe.grid_real)
        nu = good_fft_size(math.ceil(choice.sigma * probe.npix_x))
        nv = good_fft_size(math.ceil(choice.sigma * probe.npix_y))
        if not probe.do_w:
            return cls(choice, nu, nv, probe._w_range, 1, 1.0, 0.0)
        dw = probe._plane_spacing(choice)
        n_planes = probe._n_planes_for(choice)
        w0 = probe._w_range[0] - 0.5 * choice.support * dw
        return cls(choice, nu, nv, probe._w_range, n_planes, dw, w0)

    @classmethod
    def of_rows(cls, geometry: dict, uvw_m: np.ndarray, freq_hz) -> "Layout":
        """Layout of the rows ``uvw_m`` (all of the observation)."""
        flip = -1.0 if geometry["flip_w"] else 1.0
        w_m = uvw_m[:, 2] * flip
        return cls.build(geometry, freq_hz, float(w_m.min()), float(w_m.max()),
                         uvw_m.shape[0] * np.size(freq_hz))


def _probe(geometry: dict, freq_hz) -> Imager:
    """An Imager shell (no device) holding the geometry, for its helper methods."""
    probe = Imager.__new__(Imager)
    probe.freq_hz = _check_freq(freq_hz)
    probe.npix_x, probe.npix_y = int(geometry["npix_x"]), int(geometry["npix_y"])
    probe.pixsize_x, probe.pixsize_y = float(geometry["pixsize_x"]), float(geometry["pixsize_y"])
    probe.center_x, probe.center_y = float(geometry["center_x"]), float(geometry["center_y"])
    probe.do_w = bool(geometry["do_wgridding"])
    probe.signs = tuple(-1.0 if geometry[k] else 1.0 for k in ("flip_u", "flip_v", "flip_w"))
    probe.vis_real = _precision_dtype(geometry["precision"])
    probe.grid_real = (np.dtype(np.float64) if geometry["double_precision_accumulation"]
                       else probe.vis_real)
    probe.epsilon = float(geometry["epsilon"])
    probe._max_eta = probe._max_abs_n_minus_1()
    return probe


class _ShardImager(Imager):
    """An Imager over some rows that uses the layout of the whole observation
    and, with w-gridding, only the planes ``planes = (first, stop)``."""

    def __init__(self, queue, *, layout: Layout, planes: tuple[int, int] | None = None,
                 **kwargs):
        self._layout = layout
        self._owned_planes = planes
        super().__init__(queue, **kwargs)

    def _w_range_wavelengths(self) -> tuple[float, float]:
        return self._layout.w_range

    def _setup_planes(self) -> None:
        # Imager chose a kernel from this shard's rows; the shared one wins.
        self.kernel_choice = self._layout.choice
        self.nu, self.nv = self._layout.nu, self._layout.nv
        super()._setup_planes()
        if self.do_w:
            assert (self.n_planes, self.dw, self.w0) == (
                self._layout.n_planes, self._layout.dw, self._layout.w0)
        if self._owned_planes is not None:
            first, stop = self._owned_planes
            self._plane_rows = [rows if first <= plane < stop else (0, 0)
                                for plane, rows in enumerate(self._plane_rows)]


# ------------------------------------------------------------------ partitions
def partition_rows(n_rows: int, n_parts: int, partition: str = "time",
                   baseline_ids=None) -> list[np.ndarray]:
    """Row indices of each part.

    ``'time'``: contiguous blocks of equal size.  ``'baseline'``: whole
    baselines (``baseline_ids`` per row, e.g. ``ant1 * n_ant + ant2``)
    assigned largest first to the least loaded part.
    """
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
    if partition == "time":
        edges = np.linspace(0, n_rows, n_parts + 1).round().astype(np.int64)
        return [np.arange(edges[i], edges[i + 1]) for i in range(n_parts)]
    if baseline_ids is None:
        raise ValueError("partition='baseline' needs baseline_ids (one id per row)")
    baseline_ids = np.asarray(baseline_ids)
    if baseline_ids.shape != (n_rows,):
        raise ValueError(f"baseline_ids must be ({n_rows},), got {baseline_ids.shape}")
    ids, inverse, counts = np.unique(baseline_ids, return_inverse=True, return_counts=True)
    load = np.zeros(n_parts, np.int64)
    owner = np.empty(ids.size, np.int64)
    for group in np.argsort(-counts, kind="stable"):
        part = int(np.argmin(load))
        owner[group] = part
        load[part] += counts[group]
    row_owner = owner[inverse]
    return [np.flatnonzero(row_owner == part) for part in range(n_parts)]


def partition_planes(rows_per_plane: Sequence[int], n_parts: int, taps_per_vis: float,
                     fft_cost: float) -> list[tuple[int, int]]:
    """Contiguous blocks of w planes of about equal cost (gridding + FFT)."""
    cost = np.asarray(rows_per_plane, np.float64) * taps_per_vis + fft_cost
    cost[np.asarray(rows_per_plane) == 0] = 0.0
    edges_cost = np.cumsum(cost)
    total = edges_cost[-1] if edges_cost.size else 0.0
    bounds = [0]
    for part in range(1, n_parts):
        bounds.append(int(np.searchsorted(edges_cost, total * part / n_parts, side="left")) + 1)
    bounds.append(len(cost))
    bounds = np.maximum.accumulate(np.minimum(bounds, len(cost)))
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(n_parts)]


def balance(loads: Sequence[float]) -> float:
    """Mean load over the largest: 1.0 is perfect, 1/n all on one device."""
    loads = np.asarray(loads, np.float64)
    return float(loads.mean() / loads.max()) if loads.size and loads.max() > 0 else 1.0


# ------------------------------------------------------------------ imager
class MultiDeviceImager:
    """:class:`clgrid.imaging.Imager` spread over several devices.

    Parameters
    ----------
    devices
        Queues, contexts, devices or spec strings (one per device), or
        ``'all'``.  See :func:`resolve_queues`.
    uvw, freq
        As for :class:`Imager` (metres, Hz).
    partition
        ``'time'`` (default) or ``'baseline'`` (needs ``baseline_ids``); used
        without w-gridding.  With w-gridding the w planes are partitioned.
    baseline_ids
        One id per row, for ``partition='baseline'``.
    reduce
        Where the private grids are summed without w-gridding: ``'device'``
        (on the first device, default) or ``'host'``.
    **geometry
        The other keywords of :class:`Imager` (``npix_x``, ``epsilon``...).

    Attributes
    ----------
    layout
        The shared kernel, grid and w planes.
    shard_rows
        Row indices of each device.
    load_balance
        Mean over maximum of the estimated work per device (1.0 = perfect).
    last_timings
        Wall seconds of the phases of the last :meth:`vis2dirty`: ``grid_s``
        (parallel gridding, or gridding + FFT per plane block with w),
        ``reduce_s`` (summing grids or images) and ``fft_s`` (the one FFT and
        grid correction without w).
    """

    def __init__(self, devices, *, uvw, freq, partition: str = "time", baseline_ids=None,
                 reduce: str = "device", fft_backend: str | None = None, **geometry):
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
        self.reduce = reduce
        self.last_timings: dict[str, float] = {}
        self.queues = resolve_queues(devices)
        self.uvw_m = _check_uvw(uvw)
        self.freq_hz = _check_freq(freq)
        self.geometry = geometry_of(**geometry)
        self.layout = Layout.of_rows(self.geometry, self.uvw_m, self.freq_hz)
        self.do_w = bool(self.geometry["do_wgridding"])
        self.partition = "w-planes" if self.do_w else partition
        n_dev = len(self.queues)
        if self.do_w:
            self.plane_blocks, self.shard_rows = self._plane_partition(n_dev)
        else:
            self.plane_blocks = [None] * n_dev
            self.shard_rows = partition_rows(self.uvw_m.shape[0], n_dev, partition,
                                             baseline_ids)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=n_dev)
        self.shards = self._map(lambda d: self._make_shard(d, fft_backend))

    # ---------------------------------------------------------- construction
    def _plane_partition(self, n_dev):
        full = _probe(self.geometry, self.freq_hz)
        full.uvw_m, full.kernel_choice = self.uvw_m, self.layout.choice
        full._w_range = self.layout.w_range
        full._setup_planes()
        rows_per_plane = [last - first for first, last in full._plane_rows]
        support = self.layout.choice.support
        nu, nv = self.layout.nu, self.layout.nv
        blocks = partition_planes(rows_per_plane, n_dev,
                                  _GRID_COST_PER_TAP * len(self.freq_hz) * support ** 3,
                                  _FFT_COST_PER_CELL * nu * nv * math.log2(nu * nv))
        shard_rows = []
        for first, stop in blocks:
            spans = [full._plane_rows[p] for p in range(first, stop)
                     if full._plane_rows[p][1] > full._plane_rows[p][0]]
            if not spans:
                shard_rows.append(np.zeros(0, np.int64))
                continue
            lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
            shard_rows.append(np.sort(full._row_order[lo:hi].astype(np.int64)))
        return blocks, shard_rows

    def _make_shard(self, index: int, fft_backend):
        rows = self.shard_rows[index]
        if rows.size == 0:
            return None
        return _ShardImager(self.queues[index], layout=self.layout,
                            planes=self.plane_blocks[index], uvw=self.uvw_m[rows],
                            freq=self.freq_hz, fft_backend=fft_backend, **self.geometry)

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
    def vis2dirty(self, vis, wgt=None, mask=None) -> np.ndarray:
        """Dirty image(s) of ``vis``, as :meth:`Imager.vis2dirty` on one device."""
        vis = np.asarray(vis)
        if vis.ndim not in (2, 3) or vis.shape[:2] != (self.n_rows, len(self.freq_hz)):
            raise ValueError(f"vis must be (nrow, nchan[, npol]) = ({self.n_rows}, "
                             f"{len(self.freq_hz)}[, npol]), got {vis.shape}")
        def piece(d):   # in the device's thread: the copies run in parallel
            rows = self.shard_rows[d]
            return _take(vis, rows), _take(wgt, rows), _take(mask, rows)

        started = time.perf_counter()
        if self.do_w:
            images = self._map(lambda d: None if self.shards[d] is None
                               else self.shards[d].vis2dirty(*piece(d)))
            gridded = time.perf_counter()
            image = _sum([image for image in images if image is not None])
            self.last_timings = {"grid_s": gridded - started,
                                 "reduce_s": time.perf_counter() - gridded, "fft_s": 0.0}
            return image
        first = self.shards.index(self._first_shard())
        grids = self._map(lambda d: None if self.shards[d] is None else _grid_only(
            self.shards[d], *piece(d), on_device=self.reduce == "device" and d == first))
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
        image = grid_to_dirty(self.shards[first], grid)
        self.last_timings = {"grid_s": gridded - started, "reduce_s": reduced - gridded,
                             "fft_s": time.perf_counter() - reduced}
        return image[0] if vis.ndim == 2 else image

    def _first_shard(self) -> Imager:
        return next(shard for shard in self.shards if shard is not None)

    # ---------------------------------------------------------- dirty2vis
    def dirty2vis(self, dirty, wgt=None, mask=None) -> np.ndarray:
        """Visibilities of ``dirty``, as :meth:`Imager.dirty2vis` on one device."""
        dirty = np.asarray(dirty)
        parts = self._map(lambda d: None if self.shards[d] is None
                          else self.shards[d].dirty2vis(dirty))
        first = next(p for p in parts if p is not None)
        out = np.zeros((self.n_rows,) + first.shape[1:], first.dtype)
        for rows, part in zip(self.shard_rows, parts):
            if part is not None:
                out[rows] += part  # rows are unique within a shard
        factor = _row_factor(wgt, mask, (self.n_rows, len(self.freq_hz)))
        if factor is not None:
            out *= (factor if out.ndim == 2 else factor[:, :, None]).astype(out.real.dtype)
        return out


def _row_factor(wgt, mask, shape) -> np.ndarray | None:
    """Weights times the mask (validated as :class:`Imager` does), or None."""
    shell = Imager.__new__(Imager)
    shell.uvw_m, shell.freq_hz = np.empty((shape[0], 3)), np.empty(shape[1])
    return shell._row_factor(wgt, mask)


def _take(array, rows: np.ndarray):
    """``array[rows]``; a view, not a copy, when the rows are one contiguous block."""
    if array is None:
        return None
    array = np.asarray(array)
    if rows.size and rows[-1] - rows[0] == rows.size - 1:   # sorted and unique
        return array[rows[0]:rows[-1] + 1]
    return array[rows]


def _sum(arrays: list[np.ndarray]) -> np.ndarray:
    total = arrays[0].copy()
    for array in arrays[1:]:
        total += array
    return total


def _grid_only(shard: Imager, vis, wgt, mask, on_device: bool = False):
    """The (npol, nu, nv) uv grid of one shard (no FFT): numpy, or a device
    array on the shard's queue with ``on_device``."""
    vis_d, npol, _ = shard._vis_to_device(vis, wgt, mask)
    shape = (npol, shard.nu, shard.nv)
    grids = (cla.empty(shard.queue, shape, shard.grid_complex) if on_device
             else np.empty(shape, shard.grid_complex))
    plane_bytes = shard.nu * shard.nv * np.dtype(shard.grid_complex).itemsize
    for pol in range(npol):
        shard.grid_d.fill(0)
        shard._launch_vis_kernel(shard._grid_kernel, vis_d, npol, pol, shard.grid_d, 0)
        if on_device:
            cl.enqueue_copy(shard.queue, grids.data, shard.grid_d.data, byte_count=plane_bytes,
                            dst_offset=pol * plane_bytes)
        else:
            grids[pol] = shard.grid_d.get()
    shard.queue.finish()
    return grids


def grid_to_dirty(imager: Imager, grids) -> np.ndarray:
    """FFT and grid correction of summed uv grids (no w-gridding): (npol, nx, ny).

    ``grids``: (npol, nu, nv) numpy or device array on ``imager``'s queue."""
    scale = imager.grid_real.type(imager.fft.backward_scale)
    images = np.empty((grids.shape[0], imager.npix_x, imager.npix_y), imager.vis_real)
    plane_bytes = imager.nu * imager.nv * np.dtype(imager.grid_complex).itemsize
    for pol in range(grids.shape[0]):
        if isinstance(grids, cla.Array):
            cl.enqueue_copy(imager.queue, imager.grid_d.data, grids.data,
                            byte_count=plane_bytes, src_offset=pol * plane_bytes)
        else:
            imager.grid_d.set(np.ascontiguousarray(grids[pol], imager.grid_complex))
        image = cla.zeros(imager.queue, (imager.npix_x, imager.npix_y), imager.grid_real)
        imager.fft.backward(imager.grid_d)
        imager._to_dirty_kernel(
            imager.queue, (imager.npix_x, imager.npix_y), None, imager.grid_d.data,
            np.int32(imager.nu), np.int32(imager.nv), image.data, imager.corr_d.data,
            np.int32(imager.npix_x), np.int32(imager.npix_y), *imager._image_args(),
            np.float64(imager._w_plane(0)), scale)
        images[pol] = image.get()
    return images


# ------------------------------------------------------------------ functional
_multi_imagers: dict[tuple, MultiDeviceImager] = {}
_MAX_CACHED = 2


@atexit.register
def clear_cache() -> None:
    """Drop the cached imagers (their threads and device buffers)."""
    while _multi_imagers:
        _multi_imagers.popitem()[1].close()
    gc.collect()  # free device objects while pyopencl is still whole


def _device_key(devices) -> tuple:
    if isinstance(devices, str):
        return (devices,)
    if isinstance(devices, (cl.Device, cl.Context, cl.CommandQueue)):
        devices = [devices]
    return tuple(getattr(d, "int_ptr", d) for d in devices)


def cached_multi_imager(devices, uvw, freq, **geometry) -> MultiDeviceImager:
    """One :class:`MultiDeviceImager` per (devices, uvw, freq, geometry)."""
    uvw, freq = _check_uvw(uvw), _check_freq(freq)
    key = (_device_key(devices), uvw.shape, hash(uvw.tobytes()), hash(freq.tobytes()),
           tuple(sorted(geometry.items())))
    imager = _multi_imagers.get(key)
    if imager is None:
        if len(_multi_imagers) >= _MAX_CACHED:
            _multi_imagers.pop(next(iter(_multi_imagers))).close()
        imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, **geometry)
        _multi_imagers[key] = imager
    return imager


def vis2dirty(devices, *, uvw, freq, vis, wgt=None, mask=None, **geometry) -> np.ndarray:
    """:func:`clgrid.imaging.vis2dirty` on several devices (same arguments)."""
    precision = _precision_of(np.asarray(vis).dtype, "vis")
    imager = cached_multi_imager(devices, uvw, freq, precision=precision, **geometry)
    return imager.vis2dirty(vis, wgt=wgt, mask=mask)


def dirty2vis(devices, *, uvw, freq, dirty, wgt=None, mask=None, **geometry) -> np.ndarray:
    """:func:`clgrid.imaging.dirty2vis` on several devices (same arguments)."""
    dirty = np.asarray(dirty)
    precision = _precision_of(dirty.dtype, "dirty")
    imager = cached_multi_imager(devices, uvw, freq, precision=precision,
                                 npix_x=dirty.shape[-2], npix_y=dirty.shape[-1], **geometry)
    return imager.dirty2vis(dirty, wgt=wgt, mask=mask)


_IGNORED_DUCC_ARGUMENTS = ("nthreads", "verbosity", "allow_nshift")


def call_from_imaging(name: str, devices, arguments: dict):
    """``clgrid.imaging.vis2dirty/dirty2vis(..., devices=...)`` lands here."""
    arguments = dict(arguments)
    for key in _IGNORED_DUCC_ARGUMENTS + ("devices", "call_from_imaging"):
        arguments.pop(key, None)
    if arguments.pop("context", None) is not None or arguments.pop("queue", None) is not None:
        raise ValueError("give either devices= or context=/queue=, not both")
    if name == "vis2dirty":
        out = arguments.pop("dirty")
        if out is not None:
            arguments["npix_x"] = arguments["npix_x"] or out.shape[-2]
            arguments["npix_y"] = arguments["npix_y"] or out.shape[-1]
        result = vis2dirty(devices, **arguments)
    else:
        out = arguments.pop("vis")
        result = dirty2vis(devices, **arguments)
    if out is not None:
        out[...] = result
        return out
    return result


__all__ = ["Layout", "MultiDeviceImager", "PARTITIONS", "REDUCTIONS", "all_gpus_or_best", "balance", "best_cpu", "call_from_imaging", "clear_cache",
           "cpu_sub_devices", "dirty2vis", "partition_planes", "partition_rows",
           "resolve_queues", "vis2dirty"]

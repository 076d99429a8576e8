"""Single-dish gridding on the sphere: HEALPix pre-ordering and a device gather.

The algorithm is HyGrid (Luo et al. 2018): samples are binned into HEALPix
pixels in RING order, sorted by pixel, and a table gives the first sample of
every ring; then one work-item per output cell (or per ``gamma`` cells:
thread coarsening) walks the rings within the kernel radius, binary-searches
the first pixel in range on each ring and scans the contiguous run of
samples.  Every output value has exactly one writer, so no atomics.

The user API copies cygrid (Winkel et al. 2016): :class:`WcsGrid` and
:class:`SlGrid` with ``set_kernel``, ``grid`` (callable repeatedly),
``get_datacube``, ``get_weights`` and ``get_unweighted_datacube``; angles
are in degrees except the ``gauss2d`` position angle, which is in radians as
in cygrid.

Pre-ordering runs on the host in a pool of threads (numpy and healpy release
the GIL), a bounded number of chunks ahead of the device gather, which is
asynchronous: the host sorts while the device gathers.
"""

from __future__ import annotations

import collections
import math
import os
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from . import healpix
from .kernels import KernelTemplate, Operation, real_dtype_name

KERNEL_TYPES = {"gauss1d": 1, "gauss2d": 3, "tapered_sinc": 3}
#: Channels one work-item keeps in registers; more channels add work-items.
MAX_CHAN_BLOCK = 8
MAX_GAMMA = 8
#: Samples per chunk streamed through the device (before memory limits).
DEFAULT_CHUNK_SAMPLES = 1 << 22
#: Smallest chunk made only to give every pre-ordering thread work.  Each
#: chunk costs one gather pass over all output cells (ring walk and binary
#: searches per cell), so tiny chunks would make the device slower than the
#: host parallelism gains; 2**18 samples pre-order in a few milliseconds.
MIN_CHUNK_SAMPLES = 1 << 18
#: Longitudes are accepted in [-360, 360] degrees and wrapped.
_LON_LIMIT_DEG = 360.0


class ShapeError(ValueError):
    """Input or output shapes do not match (cygrid's exception name)."""


@dataclass
class GridStats:
    """Book-keeping of what :meth:`Gridder.grid` did.

    Attributes
    ----------
    n_samples
        Samples gridded (after dropping bad ones).
    n_dropped
        Samples dropped because their longitude or latitude was NaN/Inf.
    n_flagged_values
        Data or weight values that were NaN/Inf: given zero weight.
    preorder_s
        Host time spent binning, sorting and building ring tables, summed
        over the pre-ordering threads (thread-seconds).
    preorder_wall_s
        Wall time from the first pre-order start to the last pre-order end
        of each ``grid`` call, summed over calls: ``preorder_s /
        preorder_wall_s`` is the parallelism the threads reached.
    gather_s
        Device time of the gather kernels (only when the queue has
        profiling enabled, else NaN).
    total_s
        Wall time of the ``grid`` calls.
    """

    n_samples: int = 0
    n_dropped: int = 0
    n_flagged_values: int = 0
    preorder_s: float = 0.0
    preorder_wall_s: float = 0.0
    gather_s: float = 0.0
    total_s: float = 0.0
    _events: list = field(default_factory=list, repr=False)


class HealpixGather(Operation):
    """Compile-once gather kernel for one parameter set on one device.

    Parameters
    ----------
    context
        A :class:`pyopencl.Context`, a :class:`pyopencl.CommandQueue` or None.
    kernel_type
        ``'gauss1d'``, ``'gauss2d'`` or ``'tapered_sinc'``.
    gamma
        Output cells per work-item (thread coarsening), 1 .. 8.
    chan_block
        Channels per work-item, 1 .. 8.
    nside
        HEALPix resolution of the pre-ordering (decides the pixel index type).
    data_dtype, out_dtype
        float32 or float64 input data/weights and accumulators.
    has_weights
        Whether per-value input weights are passed.
    """

    def __init__(self, context=None, *, kernel_type: str = "gauss1d", gamma: int = 1,
                 chan_block: int = 1, nside: int = 1024, data_dtype=np.float32,
                 out_dtype=np.float32, has_weights: bool = False):
        super().__init__(context)
        if kernel_type not in KERNEL_TYPES:
            raise ValueError(f"kernel_type must be one of {sorted(KERNEL_TYPES)}, "
                             f"got {kernel_type!r}")
        if not 1 <= int(gamma) <= MAX_GAMMA:
            raise ValueError(f"gamma must be in 1..{MAX_GAMMA}, got {gamma}")
        if not 1 <= int(chan_block) <= MAX_CHAN_BLOCK:
            raise ValueError(f"chan_block must be in 1..{MAX_CHAN_BLOCK}, got {chan_block}")
        if not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no double precision (fp64), "
                             "which the single-dish gather needs for its geometry")
        self.gamma, self.chan_block = int(gamma), int(chan_block)
        self.pix_dtype = pixel_dtype(nside)
        self.template = KernelTemplate(self.queue, "singledish.cl.mako", {
            "kernel_type": kernel_type, "gamma": self.gamma, "chan_block": self.chan_block,
            "pix_type": "uint" if self.pix_dtype == np.uint32 else "ulong",
            "data_real": real_dtype_name(data_dtype), "out_real": real_dtype_name(out_dtype),
            "has_weights": bool(has_weights)})
        self._kernel = self.template.kernel("gather")
        self._pixelise = self.template.kernel("pixelise")
        self._local = self._local_size()

    def pixelise(self, lon_rad: np.ndarray, lat_rad: np.ndarray, nside: int) -> np.ndarray:
        """RING pixels of (lon, lat) in radians computed on the device."""
        lonlat = np.ascontiguousarray(np.stack([lon_rad, lat_rad], axis=-1), np.float64)
        n = lonlat.shape[0]
        flags = cl.mem_flags
        lonlat_d = cl.Buffer(self.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=lonlat)
        pix = np.empty(n, self.pix_dtype)
        pix_d = cl.Buffer(self.context, flags.WRITE_ONLY, max(pix.nbytes, 1))
        self._pixelise(self.queue, (max(n, 1),), None, lonlat_d, np.uint32(n), np.uint32(nside),
                       pix_d)
        cl.enqueue_copy(self.queue, pix, pix_d)
        return pix

    def _local_size(self) -> int | None:
        if self.profile.device_type != "gpu":
            return None  # CPU runtimes pick well themselves
        return min(128, self.template.max_work_group_size(self._kernel))

    def __call__(self, cells_d: cl.Buffer, n_cells: int, chunk: "DeviceChunk", n_chan: int,
                 radius_rad: float, search_radius_rad: float, params: tuple,
                 data_sum: cl.Buffer, weight_sum: cl.Buffer,
                 wait_for=None) -> cl.Event:
        """Enqueue the gather of one pre-ordered chunk; returns its event."""
        n_groups = -(-n_cells // self.gamma)
        n_chan_groups = -(-n_chan // self.chan_block)
        local = self._local
        if local:
            n_groups = -(-n_groups // local) * local
        weights = chunk.weights if chunk.weights is not None else chunk.data
        return self._kernel(
            self.queue, (n_groups, n_chan_groups), (local, 1) if local else None,
            cells_d, np.uint32(n_cells), chunk.lonlat, chunk.pix, chunk.data, weights,
            chunk.ring_start, np.uint32(chunk.nside), np.float64(radius_rad),
            np.float64(search_radius_rad), *(np.float64(p) for p in params),
            np.uint32(n_chan), data_sum, weight_sum, wait_for=wait_for)


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask under taskset, a
    batch scheduler or a container), else ``os.cpu_count()``."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pixel_dtype(nside: int) -> np.dtype:
    """uint32 while every RING index fits, else uint64."""
    return np.dtype(np.uint32 if 12 * nside * nside < 2**32 else np.uint64)


@dataclass
class HostChunk:
    """One pre-ordered chunk on the host (sorted by RING pixel)."""

    lonlat: np.ndarray      # (n, 2) float64 radians
    pix: np.ndarray
    data: np.ndarray        # (n, n_chan)
    weights: np.ndarray | None
    ring_start: np.ndarray  # (4 nside,) uint32
    nside: int


@dataclass
class DeviceChunk:
    """Device buffers of one chunk, kept alive until its gather has run."""

    lonlat: cl.Buffer
    pix: cl.Buffer
    data: cl.Buffer
    weights: cl.Buffer | None
    ring_start: cl.Buffer
    nside: int
    host: HostChunk
    events: list


def preorder(lon_rad: np.ndarray, lat_rad: np.ndarray, data: np.ndarray,
             weights: np.ndarray | None, nside: int) -> HostChunk:
    """HyGrid's HpxPreOrdering: bin into RING pixels, sort, build ring table.

    Thread-safe (touches no shared state), and the numpy/healpy calls it
    makes release the GIL, so :meth:`Gridder.grid` runs it in a thread pool.

    Parameters
    ----------
    lon_rad, lat_rad
        Sample coordinates in radians (finite).
    data, weights
        (n, n_chan) arrays; weights may be None.
    nside
        HEALPix resolution.

    Returns
    -------
    HostChunk
        The samples sorted by RING pixel and the first sample of each ring.
    """
    pix = healpix.ang2pix_ring_fast(nside, lon_rad, lat_rad).astype(pixel_dtype(nside))
    # numpy's default sort (SIMD quicksort) is 3-5x faster than the stable
    # one.  Its order among samples of one pixel is arbitrary but a fixed
    # function of the input, so results stay reproducible; only the float
    # summation order in the gather depends on it.
    order = np.argsort(pix)
    pix_sorted = pix[order]
    lonlat = np.empty((pix.size, 2), np.float64)
    lonlat[:, 0] = lon_rad[order]
    lonlat[:, 1] = lat_rad[order]
    rings = np.arange(1, 4 * nside + 1)  # the last entry, ring 4 nside, is the end sentinel
    first_pixels = healpix.ring_first_pixel(nside, rings[:-1])
    ring_start = np.empty(4 * nside, np.uint32)
    ring_start[:-1] = np.searchsorted(pix_sorted, first_pixels.astype(pix_sorted.dtype))
    ring_start[-1] = pix.size
    return HostChunk(lonlat, pix_sorted, np.ascontiguousarray(data[order]),
                     None if weights is None else np.ascontiguousarray(weights[order]),
                     ring_start, nside)


def _scan_slice(lons, lats, data, weights) -> tuple[int, int, bool, bool]:
    """One slice of :meth:`Gridder._scan_samples`: (dropped samples, bad values of
    kept samples, any latitude out of range, any longitude out of range)."""
    good = np.isfinite(lons) & np.isfinite(lats)
    all_good = bool(good.all())
    kept_lons, kept_lats = (lons, lats) if all_good else (lons[good], lats[good])
    bad = ~np.isfinite(data if all_good else data[good])
    if weights is not None:
        bad |= ~np.isfinite(weights if all_good else weights[good])
    return (int(good.size - np.count_nonzero(good)), int(np.count_nonzero(bad)),
            bool(np.any(np.abs(kept_lats) > 90.0)),
            bool(np.any(np.abs(kept_lons) > _LON_LIMIT_DEG)))


def _prepare_samples(lons_deg, lats_deg, data, weights, data_dtype, has_weights: bool):
    """One chunk made ready for :func:`preorder`: samples with NaN/Inf
    coordinates dropped, radians with longitudes in [0, 2 pi), data in
    ``data_dtype`` and NaN/Inf values given zero weight (the counts and
    warnings come from :meth:`Gridder._scan_samples`).  With ``has_weights``
    weights are always returned (ones where none were given)."""
    good = np.isfinite(lons_deg) & np.isfinite(lats_deg)
    if not good.all():
        lons_deg, lats_deg, data = lons_deg[good], lats_deg[good], data[good]
        weights = None if weights is None else weights[good]
    data = np.ascontiguousarray(data, data_dtype)
    if weights is not None:
        weights = np.ascontiguousarray(weights, data_dtype)
    bad = ~np.isfinite(data)
    if weights is not None:
        bad |= ~np.isfinite(weights)
    if bad.any() or (has_weights and weights is None):
        data = np.where(bad, 0, data).astype(data_dtype)
        weights = np.where(bad, 0, 1 if weights is None else weights).astype(data_dtype)
    return np.radians(np.mod(lons_deg, 360.0)), np.radians(lats_deg), data, weights


class Gridder:
    """Common part of :class:`WcsGrid` and :class:`SlGrid` (cygrid's Cygrid).

    Parameters
    ----------
    cell_lon_deg, cell_lat_deg
        Target coordinates (degrees), any shape ``yx_shape``; NaN marks
        cells outside the projection (they stay NaN / zero weight).
    dtype
        float32 (default, as cygrid) or float64 output cubes.
    context
        :class:`pyopencl.Context`, :class:`pyopencl.CommandQueue` or None.
    gamma
        Output cells per work-item (thread coarsening, 1..8).  Results do not
        depend on it.
    chunk_samples
        Largest number of samples per chunk streamed through the device
        (device memory may lower it; with few samples per pre-ordering
        thread chunks are smaller, see :meth:`grid`).
    progress
        Show a tqdm progress bar when a ``grid`` call has several chunks.
    preorder_threads
        Host threads pre-ordering chunks in parallel (default
        :func:`usable_cores`).  Results depend on it only through float
        rounding (it can change the chunking).
    """

    def __init__(self, cell_lon_deg, cell_lat_deg, *, dtype=np.float32, context=None,
                 gamma: int = 1, chunk_samples: int = DEFAULT_CHUNK_SAMPLES,
                 progress: bool = True, preorder_threads: int | None = None):
        self.queue = Operation(context).queue
        self.dtype = np.dtype(dtype)
        real_dtype_name(self.dtype)  # validates float32/float64
        if not 1 <= int(gamma) <= MAX_GAMMA:
            raise ValueError(f"gamma must be in 1..{MAX_GAMMA}, got {gamma}")
        self.gamma = int(gamma)
        self.chunk_samples = int(chunk_samples)
        if self.chunk_samples < 1:
            raise ValueError("chunk_samples must be >= 1")
        if preorder_threads is None:
            preorder_threads = usable_cores()
        self.preorder_threads = int(preorder_threads)
        if self.preorder_threads < 1:
            raise ValueError(f"preorder_threads must be >= 1, got {preorder_threads}")
        self.progress = progress
        cell_lon_deg = np.asarray(cell_lon_deg, np.float64)
        cell_lat_deg = np.asarray(cell_lat_deg, np.float64)
        if cell_lon_deg.shape != cell_lat_deg.shape:
            raise ShapeError("target longitudes and latitudes differ in shape: "
                             f"{cell_lon_deg.shape} and {cell_lat_deg.shape}")
        self.yx_shape = cell_lon_deg.shape
        valid = np.isfinite(cell_lon_deg) & np.isfinite(cell_lat_deg)
        self._valid_index = np.flatnonzero(valid.ravel())
        if np.any(np.abs(cell_lat_deg[valid]) > 90.0):
            raise ValueError("target latitudes outside [-90, 90] degrees")
        cells = np.empty((self._valid_index.size, 2), np.float64)
        cells[:, 0] = np.radians(np.mod(cell_lon_deg.ravel()[self._valid_index], 360.0))
        cells[:, 1] = np.radians(cell_lat_deg.ravel()[self._valid_index])
        self._cells = cells
        self._cells_d = cl.Buffer(self.queue.context, cl.mem_flags.READ_ONLY
                                  | cl.mem_flags.COPY_HOST_PTR, hostbuf=cells) if cells.size else None
        self._gathers: dict[tuple, HealpixGather] = {}
        self.kernel_set = False
        self.cube_shape = None
        self._sums = None
        self.stats = GridStats()

    # --- cygrid API -------------------------------------------------------------------
    def set_kernel(self, kernel_type: str, kernel_params, sphere_radius: float,
                   hpx_max_resolution: float) -> None:
        """Choose the gridding kernel (cygrid's meanings and units).

        Parameters
        ----------
        kernel_type
            ``'gauss1d'`` with ``(sigma,)``; ``'gauss2d'`` with
            ``(sigma_maj, sigma_min, position_angle)``; ``'tapered_sinc'``
            with ``(sigma, a, b)`` (a = 2.52, b = 1.55 recommended).  Sigmas in
            degrees, the position angle in radians (as cygrid).
        kernel_params
            Tuple of parameters as above.
        sphere_radius
            Kernel support radius (degrees): samples closer than this count.
        hpx_max_resolution
            Largest acceptable HEALPix pixel size (degrees), about sigma / 2;
            it sets nside of the pre-ordering (speed only, not results).
        """
        if kernel_type not in KERNEL_TYPES:
            raise ValueError(f"kernel type not understood: {kernel_type!r}; choose from "
                             f"{sorted(KERNEL_TYPES)}")
        params = np.atleast_1d(np.asarray(kernel_params, np.float64))
        if params.shape != (KERNEL_TYPES[kernel_type],):
            raise ValueError(f"kernel_params needs {KERNEL_TYPES[kernel_type]} entries for "
                             f"{kernel_type}, got {params.size}")
        if not np.all(np.isfinite(params)):
            raise ValueError("kernel_params must be finite")
        sigmas = params[:1] if kernel_type != "gauss2d" else params[:2]
        if np.any(sigmas <= 0) or (kernel_type == "tapered_sinc" and np.any(params[1:] <= 0)):
            raise ValueError(f"kernel sizes must be positive, got {tuple(params)}")
        if not (0 < sphere_radius <= 180 and math.isfinite(sphere_radius)):
            raise ValueError(f"sphere_radius must be in (0, 180] degrees, got {sphere_radius}")
        self.kernel_type = kernel_type
        self.kernel_params = tuple(float(p) for p in params)
        self.sphere_radius = float(sphere_radius)
        self.nside = healpix.nside_for_resolution(float(hpx_max_resolution))
        self._device_params = self._kernel_constants(kernel_type, params)
        self.kernel_set = True

    @staticmethod
    def _kernel_constants(kernel_type: str, params: np.ndarray) -> tuple:
        if kernel_type == "gauss1d":
            sigma = math.radians(params[0])
            return (0.5 / sigma**2, 0.0, 0.0)
        if kernel_type == "gauss2d":
            return (math.radians(params[0]), math.radians(params[1]), float(params[2]))
        return (math.radians(params[0]), float(params[1]), float(params[2]))

    def grid(self, lons, lats, data, weights=None) -> None:
        """Grid samples into the accumulated cube; call repeatedly to add more.

        Parameters
        ----------
        lons, lats
            1-D sample coordinates in degrees (lon in [-360, 360], lat in
            [-90, 90]); NaN/Inf positions are dropped and counted.
        data
            (n,) or (n, ...) sample values; the trailing shape becomes the
            leading shape of the cube.  NaN/Inf values get zero weight.
        weights
            Same shape as ``data`` or None (all ones).

        Notes
        -----
        The samples are cut into chunks of at most ``chunk_samples`` (and
        what device memory allows), but no longer than needed to give each
        of the ``preorder_threads`` threads one chunk, and no shorter than
        :data:`MIN_CHUNK_SAMPLES`.  The threads pre-order up to
        ``preorder_threads`` chunks ahead of the one being uploaded, so host
        memory holds at most ``preorder_threads + 2`` sorted chunk copies
        (those, the one uploaded and the one still gathering); this thread
        uploads and enqueues the gathers in chunk order.
        """
        started = time.perf_counter()
        if not self.kernel_set:
            raise RuntimeError("no kernel has been set, use set_kernel first")
        lons, lats, data, weights = self._check_shapes(lons, lats, data, weights)
        if self._cells_d is None or lons.size == 0:
            self.stats.total_s += time.perf_counter() - started
            return
        n_chan = data.shape[1]
        data_dtype = np.dtype(np.float64 if data.dtype == np.float64 else np.float32)
        radius = math.radians(self.sphere_radius)
        search = radius + healpix.max_pixel_radius_rad(self.nside)
        # Bad values become zero weights: then every chunk carries weights.
        chunk_len = self._chunk_len(n_chan, data_dtype.itemsize, True, lons.size)
        # Chunk k holds samples k, k + n_chunks, ...: every chunk covers the
        # whole map, so each gather pass keeps all output cells busy even for
        # on-the-fly scans (contiguous chunks would each cover one strip).
        n_chunks = -(-lons.size // chunk_len)
        chunks = [slice(k, None, n_chunks) for k in range(n_chunks)]
        healpix.have_healpy()  # import healpy here once, not racing in the workers

        def preorder_chunk(rows: slice) -> tuple[HostChunk, float, float]:
            tick = time.perf_counter()
            lon_rad, lat_rad, values, value_weights = _prepare_samples(
                lons[rows], lats[rows], data[rows],
                None if weights is None else weights[rows], data_dtype, has_weights)
            host = preorder(lon_rad, lat_rad, values, value_weights, self.nside)
            return host, tick, time.perf_counter()

        n_threads = min(self.preorder_threads, n_chunks)
        pool = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="clgrid-preorder")
        pending: collections.deque[Future] = collections.deque()
        next_chunk = 0
        first_tick, last_tock = math.inf, -math.inf
        previous: DeviceChunk | None = None  # gathering; freed when its event is done
        current: DeviceChunk | None = None   # uploaded, gather not yet enqueued
        try:
            # Scan everything first (in parallel) so that bad coordinates raise
            # before anything is added to the sums.
            n_dropped, n_bad_values = self._scan_samples(pool, lons, lats, data, weights,
                                                         n_threads)
            has_weights = weights is not None or n_bad_values > 0
            gather = self._gather(n_chan, data_dtype, has_weights)
            for _ in self._progress(chunks, n_chunks):
                # Keep n_threads chunks pre-ordering beyond the one needed now, so no
                # thread idles while this one uploads and waits, yet memory is bounded.
                while next_chunk < n_chunks and len(pending) <= n_threads:
                    pending.append(pool.submit(preorder_chunk, chunks[next_chunk]))
                    next_chunk += 1
                host, tick, tock = pending.popleft().result()
                self.stats.preorder_s += tock - tick
                first_tick, last_tock = min(first_tick, tick), max(last_tock, tock)
                if host.pix.size == 0:   # every sample of the chunk was dropped
                    continue
                current = self._upload(host)
                event = gather(self._cells_d, self._cells.shape[0], current, n_chan, radius,
                               search, self._device_params, self._sums[0], self._sums[1],
                               wait_for=current.events)
                self.stats._events.append(event)
                if previous is not None:  # the chunk before may be freed once done
                    previous.events[-1].wait()
                current.events.append(event)
                previous, current = current, None
        finally:
            # On an error too: drop chunks not started, let running ones finish,
            # and keep buffers and host arrays alive until the device is done
            # with them.
            pool.shutdown(wait=True, cancel_futures=True)
            for chunk in (previous, current):
                if chunk is not None and chunk.events:
                    cl.wait_for_events(chunk.events)
        if last_tock > first_tick:
            self.stats.preorder_wall_s += last_tock - first_tick
        self.stats.n_samples += lons.size - n_dropped
        self.stats.n_dropped += n_dropped
        self.stats.n_flagged_values += n_bad_values
        self.stats.total_s += time.perf_counter() - started

    def get_datacube(self) -> np.ndarray:
        """Weighted mean ``sum(w k V) / sum(w k)``; NaN where no sample contributed."""
        data_sum, weight_sum = self._host_sums()
        with np.errstate(invalid="ignore", divide="ignore"):
            cube = data_sum / weight_sum
        cube[weight_sum == 0] = np.nan
        return cube

    def get_weights(self) -> np.ndarray:
        """Sum of kernel times input weights per cell (zero where no contributor)."""
        return self._host_sums()[1]

    def get_unweighted_datacube(self) -> np.ndarray:
        """Sum of kernel times weight times data per cell (the numerator)."""
        return self._host_sums()[0]

    def clear_data_and_weights(self) -> None:
        """Reset the accumulated sums (the kernel stays set)."""
        if self._sums is not None:
            for buffer in self._sums:
                cl.enqueue_fill_buffer(self.queue, buffer, self.dtype.type(0), 0,
                                       buffer.size).wait()

    @property
    def timings(self) -> dict:
        """Seconds so far: pre-ordering, gather and total.

        Keys: ``preorder_s`` (thread-seconds summed over the pre-ordering
        threads), ``preorder_wall_s`` (wall time the pre-ordering spanned),
        ``gather_s`` (device time of the gathers; NaN unless the queue has
        profiling enabled) and ``total_s`` (wall time of the ``grid`` calls).
        """
        gather = math.nan
        if self.queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
            gather = sum((e.profile.end - e.profile.start) * 1e-9 for e in self.stats._events)
        return {"preorder_s": self.stats.preorder_s,
                "preorder_wall_s": self.stats.preorder_wall_s, "gather_s": gather,
                "total_s": self.stats.total_s}

    # --- internals --------------------------------------------------------------------
    def _check_shapes(self, lons, lats, data, weights):
        """Shapes and dtypes (no pass over the samples); data as (n, n_chan)."""
        lons = np.asarray(lons, np.float64)
        lats = np.asarray(lats, np.float64)
        if lons.ndim != 1 or lats.ndim != 1:
            raise ShapeError("input coordinates must be 1-D")
        if lons.size != lats.size:
            raise ShapeError(f"lons and lats differ in length: {lons.size} and {lats.size}")
        data = np.asarray(data)
        if data.dtype.kind not in "fiu" or data.ndim < 1:
            raise TypeError(f"data must be a real numeric array, got {data.dtype}")
        if data.shape[0] != lons.size:
            raise ShapeError(f"data has {data.shape[0]} samples, coordinates {lons.size}")
        if weights is not None:
            weights = np.asarray(weights)
            if weights.shape != data.shape:
                raise ShapeError(f"data and weights differ in shape: {data.shape} and "
                                 f"{weights.shape}")
            weights = weights.reshape(lons.size, -1)
        self._prepare_cube(data.shape[1:])
        return lons, lats, data.reshape(lons.size, -1), weights

    @staticmethod
    def _scan_samples(pool, lons, lats, data, weights, n_parts: int) -> tuple[int, int]:
        """Range checks and counts of bad samples, in parallel slices.

        Returns (samples with NaN/Inf coordinates, NaN/Inf data or weight
        values of the kept samples); warns about both, raises on
        coordinates out of range.
        """
        edges = np.linspace(0, lons.size, n_parts + 1).astype(np.int64)
        parts = list(pool.map(lambda k: _scan_slice(
            lons[edges[k]:edges[k + 1]], lats[edges[k]:edges[k + 1]],
            data[edges[k]:edges[k + 1]],
            None if weights is None else weights[edges[k]:edges[k + 1]]), range(n_parts)))
        n_dropped, n_bad_values, lat_bad, lon_bad = (sum(column) for column in zip(*parts))
        if lat_bad:
            raise ValueError("latitudes outside [-90, 90] degrees")
        if lon_bad:
            raise ValueError(f"longitudes outside [-{_LON_LIMIT_DEG:g}, {_LON_LIMIT_DEG:g}] "
                             "degrees")
        if n_dropped:
            warnings.warn(f"{n_dropped} samples with NaN/Inf coordinates dropped", stacklevel=3)
        if n_bad_values:
            warnings.warn(f"{n_bad_values} NaN/Inf data or weight values given zero weight",
                          stacklevel=3)
        return int(n_dropped), int(n_bad_values)

    def _prepare_cube(self, spectral_shape: tuple) -> None:
        cube_shape = tuple(spectral_shape) + tuple(self.yx_shape)
        if self.cube_shape is None:
            self.cube_shape = cube_shape
            n_values = int(np.prod(spectral_shape, dtype=np.int64)) * max(1, self._cells.shape[0])
            flags = cl.mem_flags.READ_WRITE
            self._sums = [cl.Buffer(self.queue.context, flags, n_values * self.dtype.itemsize)
                          for _ in range(2)]
            self.clear_data_and_weights()
        elif cube_shape != self.cube_shape:
            raise ShapeError(f"data shape mismatch: expected (n,) + {self.cube_shape[:-len(self.yx_shape)]}"
                             f" per sample, got {tuple(spectral_shape)}")

    def _gather(self, n_chan: int, data_dtype: np.dtype, has_weights: bool) -> HealpixGather:
        chan_block = min(n_chan, MAX_CHAN_BLOCK)
        key = (self.kernel_type, chan_block, self.nside > 16384, data_dtype.str, has_weights)
        if key not in self._gathers:
            self._gathers[key] = HealpixGather(
                self.queue, kernel_type=self.kernel_type, gamma=self.gamma,
                chan_block=chan_block, nside=self.nside, data_dtype=data_dtype,
                out_dtype=self.dtype, has_weights=has_weights)
        return self._gathers[key]

    def _chunk_len(self, n_chan: int, itemsize: int, has_weights: bool, n_samples: int) -> int:
        """Samples per chunk: memory limits, then enough chunks for every thread."""
        per_sample = 16 + 8 + n_chan * itemsize * (2 if has_weights else 1)
        device = self.queue.device
        # Two chunks in flight; keep each within a quarter of the largest allocation.
        by_memory = max(1, int(min(device.max_mem_alloc_size, device.global_mem_size // 4)
                               // (2 * per_sample)))
        largest = max(1, min(self.chunk_samples, by_memory, 2**32 - 1))
        # Split small inputs so each thread pre-orders a chunk, but not below
        # MIN_CHUNK_SAMPLES: every chunk costs a gather pass over all cells.
        per_thread = max(MIN_CHUNK_SAMPLES, -(-n_samples // self.preorder_threads))
        return min(largest, per_thread)

    def _upload(self, host: HostChunk) -> DeviceChunk:
        context, flags = self.queue.context, cl.mem_flags.READ_ONLY

        def buffer(array):
            device = cl.Buffer(context, flags, max(array.nbytes, 1))
            events.append(cl.enqueue_copy(self.queue, device, array, is_blocking=False))
            return device

        events: list = []
        return DeviceChunk(buffer(host.lonlat), buffer(host.pix), buffer(host.data),
                           None if host.weights is None else buffer(host.weights),
                           buffer(host.ring_start), host.nside, host, events)

    def _progress(self, iterable, total: int):
        if not self.progress or total < 2:
            return iterable
        from tqdm.auto import tqdm
        return tqdm(iterable, total=total, desc="gridding", unit="chunk")

    def _host_sums(self) -> tuple[np.ndarray, np.ndarray]:
        if self.cube_shape is None:
            raise RuntimeError("nothing gridded yet: call grid first")
        n_chan = int(np.prod(self.cube_shape[:-len(self.yx_shape)], dtype=np.int64))
        n_cells = self._cells.shape[0]
        sums = []
        for buffer in self._sums:
            valid = np.empty((n_chan, max(1, n_cells)), self.dtype)
            cl.enqueue_copy(self.queue, valid, buffer)
            full = np.zeros((n_chan, int(np.prod(self.yx_shape))), self.dtype)
            full[:, self._valid_index] = valid[:, :n_cells]
            sums.append(full.reshape(self.cube_shape))
        return sums[0], sums[1]


class WcsGrid(Gridder):
    """Grid onto the pixels of a celestial FITS/WCS map or cube (cygrid's WcsGrid).

    Parameters
    ----------
    header_or_wcs
        A FITS header (dict or :class:`astropy.io.fits.Header`) with NAXIS1,
        NAXIS2 and celestial axes 1 and 2, or an :class:`astropy.wcs.WCS`
        (then ``naxis`` or its ``pixel_shape`` gives the map size).
    naxis
        ``(naxis1, naxis2)`` when the WCS does not say.
    **kwargs
        ``dtype``, ``context``, ``gamma``, ``chunk_samples``, ``progress``,
        ``preorder_threads`` as :class:`Gridder`.
    """

    def __init__(self, header_or_wcs, naxis: tuple[int, int] | None = None, **kwargs):
        from astropy.wcs import WCS
        if isinstance(header_or_wcs, WCS):
            wcs = header_or_wcs
            self.header = wcs.to_header()
            shape = naxis or wcs.pixel_shape
        else:
            self.header = header_or_wcs
            wcs = WCS(header_or_wcs)
            shape = naxis or (header_or_wcs.get("NAXIS1"), header_or_wcs.get("NAXIS2"))
        if not wcs.has_celestial or wcs.wcs.lng != 0 or wcs.wcs.lat != 1:
            raise ValueError("the header is not celestial: WcsGrid needs longitude and "
                             "latitude on axes 1 and 2 (e.g. RA---SIN, DEC--SIN)")
        if shape is None or len(shape) < 2 or any(s is None or int(s) < 1 for s in shape[:2]):
            raise ValueError("map size unknown: give NAXIS1/NAXIS2 in the header or naxis")
        naxis1, naxis2 = int(shape[0]), int(shape[1])
        self.wcs = wcs.celestial
        ypix, xpix = np.indices((naxis2, naxis1), dtype=np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # astropy warns about pixels outside the projection
            lon, lat = self.wcs.wcs_pix2world(xpix, ypix, 0)
        self.xwcs, self.ywcs = lon, lat
        super().__init__(lon, lat, **kwargs)

    def get_wcs(self):
        """The celestial :class:`astropy.wcs.WCS` of the map."""
        return self.wcs

    def get_header(self):
        """The header given to the constructor."""
        return self.header

    def get_world_coords(self) -> tuple[np.ndarray, np.ndarray]:
        """Longitudes and latitudes (degrees) of the map pixels."""
        return self.xwcs, self.ywcs


class SlGrid(Gridder):
    """Grid onto arbitrary sight-lines (cygrid's SlGrid), e.g. HEALPix pixel centres.

    Parameters
    ----------
    sl_lons, sl_lats
        1-D target coordinates in degrees.
    **kwargs
        ``dtype``, ``context``, ``gamma``, ``chunk_samples``, ``progress``,
        ``preorder_threads`` as :class:`Gridder`.
    """

    def __init__(self, sl_lons, sl_lats, **kwargs):
        sl_lons = np.asarray(sl_lons, np.float64)
        sl_lats = np.asarray(sl_lats, np.float64)
        if sl_lons.ndim != 1 or sl_lats.ndim != 1:
            raise ShapeError("sight-line coordinates must be 1-D")
        super().__init__(sl_lons, sl_lats, **kwargs)


def gather_reference(cell_lon_deg, cell_lat_deg, lons, lats, data, weights=None, *,
                     kernel_type: str = "gauss1d", kernel_params=(1.0,),
                     sphere_radius: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Float64 brute-force gather: every sample against every cell.

    Written plainly from cygrid's definitions (haversine distance, kernels of
    cygrid's kernels.pyx) as the independent test reference.

    Returns
    -------
    (datacube, weights)
        Shapes ``data.shape[1:] + cell shape``; datacube NaN where weights are 0.
    """
    cell_lon = np.radians(np.asarray(cell_lon_deg, np.float64)).ravel()
    cell_lat = np.radians(np.asarray(cell_lat_deg, np.float64)).ravel()
    lon = np.radians(np.asarray(lons, np.float64))
    lat = np.radians(np.asarray(lats, np.float64))
    data = np.asarray(data, np.float64)
    values = data.reshape(lon.size, -1)
    w_in = np.ones_like(values) if weights is None else np.asarray(weights, np.float64).reshape(
        lon.size, -1)
    num = np.zeros((values.shape[1], cell_lon.size))
    den = np.zeros_like(num)
    params = np.asarray(kernel_params, np.float64)
    for c in range(cell_lon.size):
        if not (np.isfinite(cell_lon[c]) and np.isfinite(cell_lat[c])):
            continue
        hav = (np.sin((cell_lat[c] - lat) / 2) ** 2
               + np.cos(cell_lat[c]) * np.cos(lat) * np.sin((cell_lon[c] - lon) / 2) ** 2)
        dist_deg = np.degrees(2 * np.arcsin(np.sqrt(np.minimum(hav, 1.0))))
        near = dist_deg < sphere_radius
        d = dist_deg[near]
        if kernel_type == "gauss1d":
            k = np.exp(-d**2 / (2 * params[0] ** 2))
        elif kernel_type == "gauss2d":
            dl = lon[near] - cell_lon[c]
            bearing = np.arctan2(np.cos(lat[near]) * np.sin(dl),
                                 np.cos(cell_lat[c]) * np.sin(lat[near])
                                 - np.sin(cell_lat[c]) * np.cos(lat[near]) * np.cos(dl))
            a, b, pa = params
            ell = a**2 * np.sin(bearing - pa) ** 2 + b**2 * np.cos(bearing - pa) ** 2
            k = np.exp(-((d / a / b) ** 2) / 2 * ell)
        else:
            sigma, a, b = params
            arg = np.pi * d / sigma
            k = np.sinc(arg / b / np.pi) * np.exp(-(arg / a) ** 2)
        kw = w_in[near] * k[:, None]
        num[:, c] = (kw * values[near]).sum(axis=0)
        den[:, c] = kw.sum(axis=0)
    shape = data.shape[1:] + np.shape(cell_lon_deg)
    with np.errstate(invalid="ignore", divide="ignore"):
        cube = num / den
    cube[den == 0] = np.nan
    return cube.reshape(shape), den.reshape(shape)


__all__ = ["DEFAULT_CHUNK_SAMPLES", "GridStats", "HealpixGather", "MIN_CHUNK_SAMPLES", "SlGrid",
           "ShapeError", "WcsGrid", "gather_reference", "preorder"]

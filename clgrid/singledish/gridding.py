"""Single-dish gridding on the sphere: HEALPix pre-ordering and a gather, all on the device.

The algorithm is HyGrid (Luo et al. 2018): samples are binned into HEALPix
pixels in RING order, sorted by pixel, and a table gives the first sample of
every ring; then a group of ``lanes`` work-items per output cell (or per
``gamma`` cells: thread coarsening) walks the rings within the kernel
radius, binary-searches the first pixel in range on each ring and scans the
contiguous run of samples, each lane every ``lanes``-th sample.  Every output
value has exactly one writer, so no atomics.

The user API copies cygrid (Winkel et al. 2016): :class:`WcsGrid` and
:class:`SlGrid` with ``set_kernel``, ``grid`` (callable repeatedly: sums
accumulate), ``get_datacube``, ``get_weights`` and
``get_unweighted_datacube``; angles are in degrees except the ``gauss2d``
position angle, which is in radians as in cygrid.

The host only hands the arrays over: they are copied (by ``host_threads``
threads) into pinned staging buffers and sent to the device in chunks, and
the device checks the samples, computes their pixels, sorts them
(:class:`clgrid.device.radixsort.RadixSort`, stable), builds the ring table and
gathers, one chunk while the next is being sent.

This module holds the user API: :class:`Gridder` (cygrid's Cygrid) and its
two faces :class:`WcsGrid` and :class:`SlGrid`; the gather kernel is in
:mod:`.gather`, the pre-ordering and staging in :mod:`.preorder`, the
brute-force reference in :mod:`.reference`.  It is above 400 lines because
:class:`Gridder` is one object with cygrid's whole surface (kernel set-up,
chunking, a two-stage pipeline, the result accessors); cutting it would
split one state machine across files.
"""

from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyopencl as cl

from . import healpix
from ..device.guard import one_thread_at_a_time
from ..device.kernels import Operation, real_dtype_name
from .compat import CygridSelection, cygrid_nside
from .gather import (GridStats, HealpixGather, KERNEL_TYPES, MAX_CHAN_BLOCK, MAX_GAMMA,
                     ShapeError, check_compat, check_lanes, default_lanes, pixel_dtype)
from .preorder import (DEFAULT_CHUNK_SAMPLES, DevicePreorder, MIN_CHUNK_SAMPLES, PIPELINE_CHUNKS,
                       RawChunk, STAGING_ROWS, Staging, WorkBuffers, _BAD_POSITION, _BAD_VALUE,
                       _LAT_RANGE, _LON_LIMIT_DEG, _LON_RANGE, usable_cores)


class Gridder:
    """Common part of :class:`WcsGrid` and :class:`SlGrid` (cygrid's Cygrid).

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

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
        Output cells per work-item group (thread coarsening, 1..8).  Results
        do not depend on it.
    lanes
        Work-items splitting the samples of one cell group (power of two
        up to 256; default 32 on GPUs, 1 elsewhere).  Results depend on it
        only through float rounding.
    chunk_samples
        Largest number of samples sorted and gathered at once (device
        memory may lower it).  Results depend on the chunking only through
        float rounding.
    progress
        Show a tqdm progress bar when a ``grid`` call has several chunks.
    host_threads
        Host threads copying the inputs into pinned staging memory (default
        :func:`usable_cores`).
    deterministic
        Accepted for symmetry with the other gridders; always holds: the
        samples are ordered by a stable device radix sort and every output
        cell has one writer summing them in that order (no atomics), so
        repeated ``grid`` calls with the same inputs and parameters give
        bitwise-identical cubes on the same device and driver.  False
        changes nothing.
    compat
        ``"exact"`` (default): every sample closer than ``sphere_radius``
        counts.  ``"cygrid"``: only the samples cygrid 2.0.4 itself keeps
        (its HEALPix disc lookup, padded by one pixel resolution, misses a
        few just inside the radius; see ``docs/singledish.md``), with
        cygrid's nside for ``hpx_max_resolution``: to reproduce old cygrid
        results, e.g. cygrid's stored test maps.
    datacube, weightcube
        cygrid's: float32/float64 C-contiguous arrays of the cube's shape
        (``data.shape[1:]`` of the first ``grid`` call plus the map's),
        checked as cygrid checks them at the first ``grid`` call (a datacube
        of another dtype than ``dtype`` wins, with cygrid's warning).  The
        sums are added to what they hold, and each ``grid`` call leaves
        ``sum(w k V)`` and ``sum(w k)`` in them (the same memory: the device
        reads them before and writes them back after every call);
        ``get_unweighted_datacube`` and ``get_weights`` return views of them.
    """

    def __init__(self, cell_lon_deg, cell_lat_deg, *, dtype=np.float32, context=None,
                 gamma: int = 1, lanes: int | None = None,
                 chunk_samples: int = DEFAULT_CHUNK_SAMPLES, progress: bool = True,
                 host_threads: int | None = None, deterministic: bool = True,
                 compat: str = "exact", datacube=None, weightcube=None):
        if deterministic not in (True, False):
            raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
        self.compat = check_compat(compat)
        self._user_cubes = [datacube, weightcube]
        self.deterministic = True   # see the docstring: no faster non-deterministic path
        operation = Operation(context)
        self.queue = operation.queue
        self.profile = operation.profile
        # Uploads go through their own queue so they overlap the work on the device.
        self.transfer_queue = cl.CommandQueue(self.queue.context, self.queue.device,
                                              properties=self.queue.properties)
        self.dtype = np.dtype(dtype)
        real_dtype_name(self.dtype)  # validates float32/float64
        if not 1 <= int(gamma) <= MAX_GAMMA:
            raise ValueError(f"gamma must be in 1..{MAX_GAMMA}, got {gamma}")
        self.gamma = int(gamma)
        self.lanes = check_lanes(default_lanes(self.profile) if lanes is None else lanes)
        self.chunk_samples = int(chunk_samples)
        if self.chunk_samples < 1:
            raise ValueError("chunk_samples must be >= 1")
        if host_threads is None:
            host_threads = usable_cores()
        self.host_threads = int(host_threads)
        if self.host_threads < 1:
            raise ValueError(f"host_threads must be >= 1, got {host_threads}")
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
        # as given (cygrid's pixels of the cells are of the unwrapped degrees)
        self._cells_deg = (cell_lon_deg.ravel()[self._valid_index],
                           cell_lat_deg.ravel()[self._valid_index])
        self._selection = None        # compat="cygrid": CygridSelection
        self._selection_cells = None  # and its (ring, index) per cell on the device
        self._cells_d = cl.Buffer(self.queue.context, cl.mem_flags.READ_ONLY
                                  | cl.mem_flags.COPY_HOST_PTR, hostbuf=cells) if cells.size else None
        self._gathers: dict[tuple, HealpixGather] = {}
        self._preorders: dict[tuple, DevicePreorder] = {}
        self._buffers: dict[str, tuple] = {}
        self.kernel_set = False
        self.cube_shape = None
        self._sums = None
        self.stats = GridStats()


    # --- cygrid API -------------------------------------------------------------------
    @one_thread_at_a_time
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
            Values below ``sphere_radius / 1024`` are raised to it with a
            warning (finer pixels cost memory and time and gain nothing).
            With ``compat="cygrid"`` nside is cygrid's for this value (part
            of cygrid's selection), never raised.
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
        if self.compat == "cygrid":
            healpix.nside_for_resolution(float(hpx_max_resolution))   # validates it
            nside = self._check_ring_table(cygrid_nside(float(hpx_max_resolution)))
            selection = CygridSelection(nside, float(sphere_radius), *self._cells_deg)
            cells = None
            if self._cells.size:
                cells = cl.Buffer(self.queue.context, cl.mem_flags.READ_ONLY
                                  | cl.mem_flags.COPY_HOST_PTR,
                                  hostbuf=np.ascontiguousarray(selection.cell_ring_index))
        else:
            nside = self._nside_for(float(hpx_max_resolution), float(sphere_radius))
        self.kernel_type = kernel_type
        self.kernel_params = tuple(float(p) for p in params)
        self.sphere_radius = float(sphere_radius)
        self.nside = nside
        if self.compat == "cygrid":
            self._selection, self._selection_cells = selection, cells
        self._device_params = self._kernel_constants(kernel_type, params)
        self.kernel_set = True

    def _nside_for(self, resolution_deg: float, sphere_radius_deg: float) -> int:
        """nside of the pre-ordering: ``resolution_deg`` clamped to what the
        kernel can use (one warning), its ring table checked against the
        device before anything is allocated."""
        nside = healpix.nside_for_resolution(resolution_deg)   # validates it too
        useful = healpix.useful_resolution(resolution_deg, sphere_radius_deg)
        if healpix.nside_for_resolution(useful) < nside:
            clamped = healpix.nside_for_resolution(useful)
            warnings.warn(f"hpx_max_resolution {resolution_deg:g} deg is far finer than a "
                          f"kernel of sphere_radius {sphere_radius_deg:g} deg can use; using "
                          f"{useful:g} deg (nside {clamped}, not {nside}); nside only orders the "
                          "samples: the same map, less memory and time", stacklevel=3)
            nside = clamped
        return self._check_ring_table(nside)

    def _check_ring_table(self, nside: int) -> int:
        """``nside``, or a MemoryError where the device cannot hold its ring table."""
        table = healpix.ring_table_bytes(nside)
        if table > self.queue.device.max_mem_alloc_size:
            raise MemoryError(f"nside {nside} needs a ring table of {table} bytes; the device "
                              f"allows {self.queue.device.max_mem_alloc_size} bytes per "
                              "allocation: raise hpx_max_resolution")
        return nside

    @staticmethod
    def _kernel_constants(kernel_type: str, params: np.ndarray) -> tuple:
        if kernel_type == "gauss1d":
            sigma = math.radians(params[0])
            return (0.5 / sigma**2, 0.0, 0.0)
        if kernel_type == "gauss2d":
            return (math.radians(params[0]), math.radians(params[1]), float(params[2]))
        return (math.radians(params[0]), float(params[1]), float(params[2]))

    @one_thread_at_a_time
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
        The arrays are read as given (any dtype, order or byte order; no
        host pass besides the copy into pinned staging memory).  The samples
        are cut into chunks of at most ``chunk_samples`` (and what device
        memory allows), at least :data:`PIPELINE_CHUNKS` of them above
        :data:`MIN_CHUNK_SAMPLES` samples, so that sending a chunk overlaps
        the device's work on the one before.  Per chunk the device checks
        the samples, sorts them by HEALPix pixel and gathers.  A coordinate
        out of range raises ``ValueError`` and leaves the sums as they were
        before the call.
        """
        started = time.perf_counter()
        if not self.kernel_set:
            raise RuntimeError("no kernel has been set, use set_kernel first")
        lons, lats, data, weights = self._check_shapes(lons, lats, data, weights)
        if self._cells_d is None or lons.size == 0:
            self.stats.total_s += time.perf_counter() - started
            return
        self._push_user_cubes()
        n_chan = data.shape[1]
        # float64 in any byte order stays float64; everything else becomes float32.
        data_dtype = np.dtype(np.float64 if data.dtype.kind == "f" and data.dtype.itemsize == 8
                              else np.float32)
        chunk_len = self._chunk_len(n_chan, data_dtype.itemsize, weights is not None, lons.size)
        # Equal chunks: the last one is not a sliver.
        n_chunks = -(-lons.size // chunk_len)
        chunk_len = -(-lons.size // n_chunks)
        backup = self._copy_sums() if n_chunks > 1 else None
        try:
            n_dropped, n_bad_values = self._grid_chunks(lons, lats, data, weights, data_dtype,
                                                        chunk_len, n_chunks)
        except BaseException:
            if backup is not None:  # undo the chunks gathered before the error
                for source, target in zip(backup, self._sums):
                    cl.enqueue_copy(self.queue, target, source).wait()
            raise
        self._pull_user_cubes()
        if n_dropped:
            warnings.warn(f"{n_dropped} samples with NaN/Inf coordinates dropped", stacklevel=3)
        if n_bad_values:
            warnings.warn(f"{n_bad_values} NaN/Inf data or weight values given zero weight",
                          stacklevel=3)
        self.stats.n_samples += lons.size - n_dropped
        self.stats.n_dropped += n_dropped
        self.stats.n_flagged_values += n_bad_values
        self.stats.n_chunks += n_chunks
        self.stats.total_s += time.perf_counter() - started

    def _grid_chunks(self, lons, lats, data, weights, data_dtype: np.dtype, chunk_len: int,
                     n_chunks: int) -> tuple[int, int]:
        """Send, check, sort and gather chunk by chunk; returns the counts of
        dropped samples and of zero-weighted values."""
        n, n_chan = lons.size, data.shape[1]
        preorder = self._preorder(data_dtype)
        raws = [self._raw_chunk(slot, chunk_len, n_chan, data_dtype, weights is not None)
                for slot in range(min(2, n_chunks))]
        work = self._work_buffers(chunk_len, n_chan, data_dtype)
        staging = self._staging(n_chan, data_dtype, weights is not None, chunk_len)
        sources = {"lon": lons, "lat": lats, "data": data}
        if weights is not None:
            sources["weights"] = weights
        radius = math.radians(self.sphere_radius)
        search = radius + healpix.max_pixel_radius_rad(self.nside)
        n_threads = max(1, min(self.host_threads, -(-min(n, staging.rows) // 4096)))
        totals = np.zeros(4, np.int64)
        events = self.stats._events
        with ThreadPoolExecutor(max_workers=n_threads,
                                thread_name_prefix="clgrid-staging") as pool:
            def send(k: int) -> None:
                raw = raws[k % 2]
                first, last = k * chunk_len, min(n, (k + 1) * chunk_len)
                readers, raw.events, raw.readers = raw.readers, [], []
                self.stats.staging_s += staging.send(pool, n_threads, sources, first, last,
                                                     raw, readers)
                events["upload"].extend(raw.events)

            send(0)
            for k in self._progress(range(n_chunks), n_chunks):
                raw = raws[k % 2]
                first, last = k * chunk_len, min(n, (k + 1) * chunk_len)
                rows = last - first
                cl.enqueue_fill_buffer(self.queue, work.counters, np.uint32(0), 0, 16)
                classified, pix_min, pix_max = preorder.classify(raw, rows, n_chan, work.pix,
                                                                 work.counters)
                raw.readers.append(classified)
                counters = np.empty(4, np.uint32)
                cl.enqueue_copy(self.queue, counters, work.counters)
                pix_min, pix_max = int(pix_min.get()), int(pix_max.get())
                if counters[_LAT_RANGE]:
                    raise ValueError("latitudes outside [-90, 90] degrees")
                if counters[_LON_RANGE]:
                    raise ValueError(f"longitudes outside [-{_LON_LIMIT_DEG:g}, "
                                     f"{_LON_LIMIT_DEG:g}] degrees")
                totals += counters
                n_kept = rows - int(counters[_BAD_POSITION])
                if n_kept:
                    write_weights = weights is not None or bool(counters[_BAD_VALUE])
                    chunk, sort_events = preorder.order(raw, rows, n_kept, n_chan, pix_min,
                                                        pix_max, work, write_weights)
                    events["sort"].append((classified, sort_events[-1]))
                    gather = self._gather(n_chan, data_dtype, write_weights)
                    events["gather"].append(gather(
                        self._cells_d, self._cells.shape[0], chunk, n_chan, radius, search,
                        self._device_params, self._sums[0], self._sums[1],
                        selection=self._chunk_selection(pix_min, pix_max)))
                if k + 1 < n_chunks:  # sent while the device sorts and gathers chunk k
                    send(k + 1)
            self.queue.finish()
        return int(totals[_BAD_POSITION]), int(totals[_BAD_VALUE])

    def _chunk_selection(self, pix_min: int, pix_max: int) -> tuple:
        """compat="cygrid": the gather's selection arguments for a chunk whose
        kept samples lie in pixels ``pix_min .. pix_max`` (the discs of their
        rings, built on the host once per ring and uploaded); () otherwise."""
        if self._selection is None:
            return ()
        first_ring, last_ring = (int(r) for r in self._selection.hpx._pix2ring(
            np.array([pix_min, pix_max], np.int64)))
        table, first_offset, width = self._selection.disc_table(first_ring, last_ring)
        disc = cl.Buffer(self.queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                         hostbuf=np.ascontiguousarray(table))
        return (self._selection_cells, disc, first_ring, table.shape[0], first_offset, width)

    @one_thread_at_a_time
    def get_datacube(self) -> np.ndarray:
        """Weighted mean ``sum(w k V) / sum(w k)``; NaN where no sample contributed."""
        data_sum, weight_sum = self._host_sums()
        with np.errstate(invalid="ignore", divide="ignore"):
            cube = data_sum / weight_sum
        cube[weight_sum == 0] = np.nan
        return cube

    @one_thread_at_a_time
    def get_weights(self) -> np.ndarray:
        """Sum of kernel times input weights per cell (zero where no contributor)."""
        return self._host_sums()[1]

    @one_thread_at_a_time
    def get_unweighted_datacube(self) -> np.ndarray:
        """Sum of kernel times weight times data per cell (the numerator)."""
        return self._host_sums()[0]

    @one_thread_at_a_time
    def clear_data_and_weights(self) -> None:
        """Reset the accumulated sums (the kernel stays set), in a given
        ``datacube``/``weightcube`` too, as cygrid."""
        for cube in self._user_cubes:
            if isinstance(cube, np.ndarray):
                cube[...] = 0
        self._zero_sums()

    def _zero_sums(self) -> None:
        if self._sums is not None:
            for buffer in self._sums:
                cl.enqueue_fill_buffer(self.queue, buffer, self.dtype.type(0), 0,
                                       buffer.size).wait()

    @property
    def timings(self) -> dict:
        """Seconds so far, summed over the ``grid`` calls.

        Keys: ``upload_s`` (device time of the host-to-device copies),
        ``sort_s`` (device time from the first pre-ordering kernel of a
        chunk, ``classify``, to its last, ``ring_table``: checks, pixels,
        radix sort, permutation and ring table), ``gather_s`` (device time
        of the gathers), ``staging_s`` (host time copying into pinned
        memory) and ``total_s`` (wall time).  The device times are NaN
        unless the queue has profiling enabled.
        """
        upload = sort = gather = math.nan
        if self.queue.properties & cl.command_queue_properties.PROFILING_ENABLE:
            events = self.stats._events
            upload = sum((e.profile.end - e.profile.start) * 1e-9 for e in events["upload"])
            sort = sum((last.profile.end - first.profile.start) * 1e-9
                       for first, last in events["sort"])
            gather = sum((e.profile.end - e.profile.start) * 1e-9 for e in events["gather"])
        return {"upload_s": upload, "sort_s": sort, "gather_s": gather,
                "staging_s": self.stats.staging_s, "total_s": self.stats.total_s}

    # --- internals --------------------------------------------------------------------
    def _check_shapes(self, lons, lats, data, weights):
        """Shapes and dtypes (no pass over the samples); data as (n, n_chan)."""
        lons, lats = np.asarray(lons), np.asarray(lats)
        for name, values in (("lons", lons), ("lats", lats)):
            if values.dtype.kind not in "fiu":
                raise TypeError(f"{name} must be real numbers, got {values.dtype}")
        if lons.ndim != 1 or lats.ndim != 1:
            raise ShapeError("input coordinates must be 1-D")
        if lons.size != lats.size:
            raise ShapeError(f"lons and lats differ in length: {lons.size} and {lats.size}")
        data = np.asarray(data)
        if data.dtype.kind not in "fiu" or data.ndim < 1:
            raise TypeError(f"data must be a real numeric array, got {data.dtype}")
        if not data.dtype.isnative:   # read as it is; cygrid's warning
            warnings.warn("Input data byteorder not native, will fix", UserWarning, stacklevel=4)
        if data.shape[0] != lons.size:
            raise ShapeError(f"data has {data.shape[0]} samples, coordinates {lons.size}")
        if weights is not None:
            weights = np.asarray(weights)
            if weights.dtype.kind not in "fiu":
                raise TypeError(f"weights must be real numbers, got {weights.dtype}")
            if not weights.dtype.isnative:
                warnings.warn("Input data byteorder not native, will fix", UserWarning,
                              stacklevel=4)
            if weights.shape != data.shape:
                raise ShapeError(f"data and weights differ in shape: {data.shape} and "
                                 f"{weights.shape}")
            weights = weights.reshape(lons.size, -1)
        self._prepare_cube(data.shape[1:])
        return lons, lats, data.reshape(lons.size, -1), weights

    def _prepare_cube(self, spectral_shape: tuple) -> None:
        cube_shape = tuple(spectral_shape) + tuple(self.yx_shape)
        if self.cube_shape is None:
            self._check_user_cubes(cube_shape)
            self.cube_shape = cube_shape
            n_values = int(np.prod(spectral_shape, dtype=np.int64)) * max(1, self._cells.shape[0])
            flags = cl.mem_flags.READ_WRITE
            self._sums = [cl.Buffer(self.queue.context, flags, n_values * self.dtype.itemsize)
                          for _ in range(2)]
            self._zero_sums()   # a given datacube/weightcube keeps its values (cygrid)
        elif cube_shape != self.cube_shape:
            raise ShapeError(f"data shape mismatch: expected (n,) + {self.cube_shape[:-len(self.yx_shape)]}"
                             f" per sample, got {tuple(spectral_shape)}")


    def _check_user_cubes(self, cube_shape: tuple) -> None:
        """cygrid's checks of ``datacube``/``weightcube`` at the first ``grid``
        call, with its messages; a datacube's dtype wins over ``dtype``."""
        datacube, weightcube = self._user_cubes
        if datacube is not None:
            if not isinstance(datacube, np.ndarray):
                raise TypeError("Input datacube must be numpy array.")
            if not datacube.flags.c_contiguous:
                raise TypeError("Input datacube must be C-contiguous.")
            if datacube.shape != cube_shape:
                raise ShapeError(
                    "Datacube shape doesn't match expectation. (The data cube, which was "
                    f"provided to the constructor has shape {datacube.shape}, while based on "
                    f"the grid-method call, cygrid would expect {cube_shape}")
            if datacube.dtype not in (np.float32, np.float64):
                raise TypeError("Input datacube must have floating point type.")
            if datacube.dtype != self.dtype:
                warnings.warn(
                    f"The datacube that was provided in the constructor ({datacube.dtype}) has "
                    f"a different dtype than what was provided with the 'dtype' option "
                    f"({self.dtype}). Will use datacube dtype ({datacube.dtype})...",
                    UserWarning, stacklevel=6)
                self.dtype = np.dtype(datacube.dtype)
        if weightcube is not None:
            if not isinstance(weightcube, np.ndarray):
                raise TypeError("Input weightcube must be numpy array.")
            if not weightcube.flags.c_contiguous:
                raise TypeError("Input weightcube must be C-contiguous.")
            if weightcube.shape != cube_shape:
                raise ShapeError("Weightcube shape doesn't match datacube shape.")
            if weightcube.dtype != self.dtype:
                raise TypeError("Weightcube dtype doesn't match datacube dtype.")

    def _push_user_cubes(self) -> None:
        """A given datacube/weightcube's values into the device sums (the
        sums add to them; the user may have changed them between calls)."""
        for cube, buffer in zip(self._user_cubes, self._sums):
            if cube is not None and self._cells.size:
                valid = cube.reshape(-1, int(np.prod(self.yx_shape)))[:, self._valid_index]
                cl.enqueue_copy(self.queue, buffer, np.ascontiguousarray(valid, self.dtype))

    def _pull_user_cubes(self) -> None:
        """The device sums back into a given datacube/weightcube, in place."""
        for cube, buffer in zip(self._user_cubes, self._sums):
            if cube is not None and self._cells.size:
                valid = np.empty((cube.size // int(np.prod(self.yx_shape)),
                                  self._cells.shape[0]), self.dtype)
                cl.enqueue_copy(self.queue, valid, buffer)
                cube.reshape(valid.shape[0], -1)[:, self._valid_index] = valid

    def _gather(self, n_chan: int, data_dtype: np.dtype, has_weights: bool) -> HealpixGather:
        chan_block = min(n_chan, MAX_CHAN_BLOCK)
        key = (self.kernel_type, chan_block, self.nside, data_dtype.str, has_weights,
               self.dtype.str, self.compat)
        if key not in self._gathers:
            self._gathers[key] = HealpixGather(
                self.queue, kernel_type=self.kernel_type, gamma=self.gamma,
                chan_block=chan_block, nside=self.nside, data_dtype=data_dtype,
                out_dtype=self.dtype, has_weights=has_weights, lanes=self.lanes,
                compat=self.compat)
        return self._gathers[key]

    def _preorder(self, data_dtype: np.dtype) -> DevicePreorder:
        pixel_rule = "cygrid" if self.compat == "cygrid" else "clgrid"
        key = (self.nside, data_dtype.str, pixel_rule)
        if key not in self._preorders:
            self._preorders[key] = DevicePreorder(self.queue, nside=self.nside,
                                                  data_dtype=data_dtype, pixel_rule=pixel_rule)
        return self._preorders[key]

    def _chunk_len(self, n_chan: int, itemsize: int, has_weights: bool, n_samples: int) -> int:
        """Samples per chunk: device memory, ``chunk_samples``, then enough
        chunks for the pipeline."""
        values = n_chan * itemsize
        pix = pixel_dtype(self.nside).itemsize
        # Two raw chunks (lon, lat, data, weights), keys and indices twice,
        # unit vectors, sorted data and weights.
        per_sample = 2 * (16 + values * (2 if has_weights else 1)) + 2 * pix + 8 + 32 + 2 * values
        device = self.queue.device
        sums = 2 * self.dtype.itemsize * n_chan * self._cells.shape[0] * 2  # sums and backup
        free = max(device.global_mem_size // 2 - sums, device.global_mem_size // 8)
        by_memory = free // per_sample
        by_allocation = device.max_mem_alloc_size // max(32, values)
        largest = max(1, min(self.chunk_samples, by_memory, by_allocation, 2**32 - 1))
        if n_samples > MIN_CHUNK_SAMPLES:
            largest = min(largest, max(MIN_CHUNK_SAMPLES, -(-n_samples // PIPELINE_CHUNKS)))
        return int(min(largest, n_samples))

    def _cached(self, name: str, key: tuple, make):
        """The buffer set ``name`` made by ``make()``, remade when ``key`` grows or changes."""
        held = self._buffers.get(name)
        if held is None or held[0] != key:
            self._buffers[name] = (key, make())
        return self._buffers[name][1]

    def _raw_chunk(self, slot: int, rows: int, n_chan: int, data_dtype: np.dtype,
                   has_weights: bool) -> RawChunk:
        def make():
            context, flags = self.queue.context, cl.mem_flags.READ_ONLY
            values = max(1, rows * n_chan * data_dtype.itemsize)
            coordinates = max(1, rows * 8)
            return RawChunk(cl.Buffer(context, flags, coordinates),
                            cl.Buffer(context, flags, coordinates),
                            cl.Buffer(context, flags, values),
                            cl.Buffer(context, flags, values) if has_weights else None)
        return self._cached(f"raw{slot}", (rows, n_chan, data_dtype.str, has_weights), make)

    def _work_buffers(self, rows: int, n_chan: int, data_dtype: np.dtype) -> WorkBuffers:
        pix = pixel_dtype(self.nside)
        return self._cached("work", (rows, n_chan, data_dtype.str, self.nside),
                            lambda: WorkBuffers.allocate(self.queue.context, rows, n_chan, pix,
                                                         data_dtype, self.nside))

    def _staging(self, n_chan: int, data_dtype: np.dtype, has_weights: bool,
                 rows: int) -> Staging:
        rows = min(rows, STAGING_ROWS)
        held = self._buffers.get("staging")
        # Keep a larger staging area of the same layout: it is slow to pin.
        if held is not None and held[0][:3] == (n_chan, data_dtype.str, has_weights) \
                and held[0][3] >= rows:
            return held[1]
        staging = Staging(self.transfer_queue, n_chan, data_dtype, has_weights, rows)
        self._buffers["staging"] = ((n_chan, data_dtype.str, has_weights, rows), staging)
        return staging

    def _copy_sums(self) -> list[cl.Buffer]:
        """Device copies of the sums (restored if a later chunk raises)."""
        copies = []
        for buffer in self._sums:
            copy = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, buffer.size)
            cl.enqueue_copy(self.queue, copy, buffer)
            copies.append(copy)
        return copies

    def _progress(self, iterable, total: int):
        if not self.progress or total < 2:
            return iterable
        from tqdm.auto import tqdm
        return tqdm(iterable, total=total, desc="gridding", unit="chunk")

    def _host_sums(self) -> tuple[np.ndarray, np.ndarray]:
        if self.cube_shape is None:
            raise RuntimeError("nothing gridded yet: call grid first")
        if all(cube is not None for cube in self._user_cubes):
            return tuple(cube.reshape(self.cube_shape) for cube in self._user_cubes)
        n_chan = int(np.prod(self.cube_shape[:-len(self.yx_shape)], dtype=np.int64))
        n_cells = self._cells.shape[0]
        sums = []
        for buffer in self._sums:
            valid = np.empty((n_chan, max(1, n_cells)), self.dtype)
            cl.enqueue_copy(self.queue, valid, buffer)
            full = np.zeros((n_chan, int(np.prod(self.yx_shape))), self.dtype)
            full[:, self._valid_index] = valid[:, :n_cells]
            sums.append(full.reshape(self.cube_shape))
        for k, cube in enumerate(self._user_cubes):   # the given memory itself
            if cube is not None:
                sums[k] = cube.reshape(self.cube_shape)
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
        ``dtype``, ``context``, ``gamma``, ``lanes``, ``chunk_samples``,
        ``progress``, ``host_threads``, ``deterministic``, ``compat``,
        ``datacube``, ``weightcube`` as :class:`Gridder`.
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
        ``dtype``, ``context``, ``gamma``, ``lanes``, ``chunk_samples``,
        ``progress``, ``host_threads``, ``deterministic``, ``compat``,
        ``datacube``, ``weightcube`` as :class:`Gridder`.
    """

    def __init__(self, sl_lons, sl_lats, **kwargs):
        sl_lons = np.asarray(sl_lons, np.float64)
        sl_lats = np.asarray(sl_lats, np.float64)
        if sl_lons.ndim != 1 or sl_lats.ndim != 1:
            raise ShapeError("sight-line coordinates must be 1-D")
        super().__init__(sl_lons, sl_lats, **kwargs)


__all__ = ["Gridder", "SlGrid", "WcsGrid"]

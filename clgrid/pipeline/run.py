"""Measurement Set to image: weighting, chunked gridding, normalisation.

The set is read in chunks of rows; the usable rows of consecutive chunks are
gathered on the host into batches up to a byte budget
(:func:`batch_budget_bytes`) and each batch is gridded with one ``vis2dirty``
call (one plan, one FFT, one correction), so time and memory do not depend on
the chunk size.  The dirty image is linear in the visibilities: the batches'
images are summed and a set larger than memory streams through.  With
uniform or Briggs weighting the set is read twice: once for the weight
density, once to grid.

Normalisation: the image is divided by the sum of the imaging weights, so
the PSF peaks at exactly 1 and a point source of S Jy at a pixel centre
(``do_wgridding=False`` or at the phase centre) has a peak of S Jy/beam.

Sign and axis convention: those of ``ducc0.wgridder.vis2dirty``: image axis 0
is l (east, increasing right ascension), axis 1 is m (north), pixel
``(npix_x/2, npix_y/2)`` is the phase centre, and
``image[i, j] = sum_k w_k V_k exp(+2 pi i (u l + v m - w (n - 1))) / sum_k w_k``.

Above 400 lines on purpose: the one path from a set to an image (cell size,
weighting, counts, batches, beam fit), whose parts share the run's state.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import threading
import warnings
from typing import Callable, Iterable

import numpy as np

from ..io.ms import DEFAULT_CHUNK_ROWS, MeasurementSet, MSError, VisChunk, parse_channels
from ..core.plan import SPEED_OF_LIGHT, ImageGeometry
from ..imaging.weighting import ImageWeighting
from ..scaleout.entry import vis2dirty_with

#: ``grid(uvw, freq, vis, wgt)``: the dirty image of one batch of rows.
Grid = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclasses.dataclass
class ImageResult:
    """A normalised dirty image and what went into it.

    ``image`` and ``psf`` are (npix_x, npix_y) float64 in ducc0's layout;
    both are zero when no visibility was usable (``sum_weights == 0``).
    ``history`` holds lines saying what was done to the data (calibration).
    Samples: ``n_samples`` read, of which ``n_flagged`` unusable (flags,
    weights, non-finite values), ``n_bad_uvw`` in the ``n_bad_uvw_rows``
    rows whose uvw is not finite (left out), ``n_outside`` beyond the grid.
    ``n_uv_outliers``: rows left out of the automatic cell size.
    """

    image: np.ndarray
    psf: np.ndarray | None
    sum_weights: float
    n_samples: int
    n_flagged: int
    n_outside: int
    pixsize_x: float
    pixsize_y: float
    phase_centre_rad: tuple[float, float]
    freq_hz: np.ndarray
    field_name: str
    telescope: str
    time_range_s: tuple[float, float]
    weighting: str
    robust: float
    epsilon: float
    do_wgridding: bool
    backend: str
    column: str = "DATA"
    n_rows: int = 0
    history: list[str] = dataclasses.field(default_factory=list)
    n_bad_uvw: int = 0
    n_bad_uvw_rows: int = 0
    n_uv_outliers: int = 0

    @property
    def n_used(self) -> int:
        """Samples neither flagged nor in a row with non-finite uvw."""
        return self.n_samples - self.n_flagged - self.n_bad_uvw


#: Rows whose |uv| exceeds this many times the 99th percentile of the rest
#: lie far beyond any array's bulk: a bad uvw, not a baseline to resolve.
OUTLIER_FACTOR = 10.0
_OUTLIER_PERCENTILE = 0.99
#: Log-spaced bins of |uv| in metres, 1e-2 m to 1e10 m, 0.5% wide: the
#: percentile streams through any number of rows in fixed memory.
_BINS_PER_DECADE, _LOWEST_DECADE, _DECADES = 200, -2, 12


@dataclasses.dataclass(frozen=True)
class UvExtent:
    """What the automatic cell size sees of the baselines (metres).

    ``max_m`` is the largest |u| or |v| of the usable rows that are not
    outliers; ``n_outliers`` rows beyond ``limit_m`` (``OUTLIER_FACTOR``
    times the 99th percentile) reach up to ``max_outlier_m``.
    """

    max_m: float
    n_outliers: int = 0
    max_outlier_m: float = 0.0
    limit_m: float = float("inf")


def uv_extent(blocks: Iterable[np.ndarray]) -> UvExtent:
    """:class:`UvExtent` of per-row |uv| arrays (metres), read once.

    Counts and exact maxima per log-spaced bin; the 99th percentile is the
    largest value of its bin (at most 0.5% high), and bins whose lower edge
    lies beyond ``OUTLIER_FACTOR`` times it hold the outliers.
    """
    n_bins = _BINS_PER_DECADE * _DECADES
    counts, maxima = np.zeros(n_bins, np.int64), np.zeros(n_bins)
    for values in blocks:
        logs = np.log10(np.maximum(values, 1e-300))
        index = np.clip(((logs - _LOWEST_DECADE) * _BINS_PER_DECADE).astype(np.int64),
                        0, n_bins - 1)
        counts += np.bincount(index, minlength=n_bins)
        np.maximum.at(maxima, index, values)
    total = int(counts.sum())
    if total == 0:
        return UvExtent(0.0)
    percentile = maxima[np.searchsorted(np.cumsum(counts), _OUTLIER_PERCENTILE * total)]
    if percentile == 0:  # nearly all rows without a length: nothing to compare with
        return UvExtent(float(maxima.max()))
    lower_edges = 10.0 ** (np.arange(n_bins) / _BINS_PER_DECADE + _LOWEST_DECADE)
    outlying = lower_edges > OUTLIER_FACTOR * percentile
    return UvExtent(float(maxima[~outlying].max()), int(counts[outlying].sum()),
                    float(maxima[outlying].max(initial=0.0)),
                    float(OUTLIER_FACTOR * percentile))


def auto_cell_rad(ms: MeasurementSet, spw=None, channels=None, pixels_per_beam: float = 4.0
                  ) -> float:
    """Pixel size that samples the synthesised beam with ``pixels_per_beam``
    pixels: ``1 / (pixels_per_beam * max |uv| in wavelengths)``.

    Only rows that can be gridded count (:meth:`MeasurementSet.usable_uv_m`:
    no flagged, autocorrelation or non-finite rows), and rows far beyond the
    bulk (:func:`uv_extent`) are left out with one ``RuntimeWarning``.
    """
    return _auto_cell(ms, spw, pixels_per_beam)[0]


def _auto_cell(ms: MeasurementSet, spw, pixels_per_beam: float = 4.0
               ) -> tuple[float, UvExtent]:
    extent = uv_extent(ms.usable_uv_m(spw))
    if extent.n_outliers:
        rows = "1 row lies" if extent.n_outliers == 1 else f"{extent.n_outliers} rows lie"
        warnings.warn(f"{rows} far beyond the other baselines (|u| or |v| up to "
                      f"{extent.max_outlier_m:.3g} m; {OUTLIER_FACTOR:g}x the 99th percentile "
                      f"is {extent.limit_m:.3g} m): left out of the automatic cell size, so "
                      f"off the grid; give --cell (pixsize_x) to choose the cell yourself",
                      RuntimeWarning, stacklevel=3)
    max_uv_m = extent.max_m
    max_freq = max(float(np.max(ms.spectral_windows[s].freq_hz)) for s in ms.select_spws(spw))
    if max_uv_m == 0:  # no usable rows: the longest baseline of the array bounds |uv|
        max_uv_m = ms.longest_baseline_m()
    if max_uv_m == 0:
        raise MSError(f"{ms.path}: no baseline has a length; give the pixel size (--cell)")
    return 1.0 / (pixels_per_beam * max_uv_m * max_freq / SPEED_OF_LIGHT), extent


def _off_grid(uvw_m, freq_hz, geometry: ImageGeometry) -> np.ndarray:
    """Samples whose |u| or |v| exceed the uv range the image pixels sample."""
    scale = freq_hz[None, :] / SPEED_OF_LIGHT
    u = np.abs(uvw_m[:, 0:1] * scale) * (geometry.npix_x * geometry.pixsize_x)
    v = np.abs(uvw_m[:, 1:2] * scale) * (geometry.npix_y * geometry.pixsize_y)
    return (u + 0.5 >= geometry.npix_x / 2) | (v + 0.5 >= geometry.npix_y / 2)


def image_measurement_set(ms_path, *, npix_x: int, npix_y: int | None = None,
                          pixsize_x: float | None = None, pixsize_y: float | None = None,
                          weighting: str = "natural", robust: float = 0.0,
                          epsilon: float = 1e-4, do_wgridding: bool = True,
                          column: str | None = "auto", channels=None, spw=None,
                          field: int = 0, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                          make_psf: bool = False, context=None, progress: bool = False,
                          devices=None, dask_scheduler: str | None = None,
                          calibrate: str | None = None,
                          deterministic: bool = True,
                          batch_mb: float | None = None) -> ImageResult:
    """Image a Measurement Set's Stokes I.

    Parameters
    ----------
    ms_path
        The ``.ms`` folder.
    npix_x, npix_y
        Image size (even); ``npix_y`` defaults to ``npix_x``.
    pixsize_x, pixsize_y
        Pixel size in radians; default :func:`auto_cell_rad`.
    weighting, robust
        ``'natural'``, ``'uniform'`` or ``'briggs'`` and Briggs' R.
    epsilon, do_wgridding
        Accuracy and w-term treatment, as in ``ducc0.wgridder.vis2dirty``.
    column, channels, spw, field
        Data selection, see :class:`clgrid.io.ms.MeasurementSet`; ``column``
        ``'auto'`` reads CORRECTED_DATA where present, else DATA.
    chunk_rows
        Rows read at a time (the progress bar's step); the gridding is
        batched independently of it (``batch_mb``).
    make_psf
        Also grid the PSF (unit visibilities, same weights).
    context
        ``pyopencl`` Context or CommandQueue for the device work.
    progress
        Show a tqdm progress bar over chunks.
    devices, dask_scheduler
        Grid each chunk on several devices (:mod:`clgrid.scaleout.multidevice`) or on
        the Dask cluster at this scheduler address (:mod:`clgrid.scaleout.dask`).
    calibrate
        ``'point'``: solve and apply gains against a point source at the
        phase centre first (:mod:`clgrid.pipeline.calibrate`); ``None``: none.
    deterministic
        True (default): the same bits run after run.  The gridding always
        is (the core has no float atomics; chunks, devices and Dask results
        are summed in a fixed order); this switch chooses the uniform/Briggs
        weight histogram: exact fixed point (True) or float atomics (False,
        see :class:`clgrid.imaging.weighting.ImageWeighting`).
    batch_mb
        Host memory (MiB) of the usable rows gathered for one ``vis2dirty``
        call; default the ``CLGRID_IMAGE_BATCH_MB`` environment variable,
        else :func:`batch_budget_bytes`.

    A selection whose rows are all flagged (or that has no rows) gives a
    zero image and the counts, without gridding.  Rows whose uvw is not
    finite are left out and counted, with one ``RuntimeWarning`` (as
    :func:`clgrid.vis2dirty` does).
    """
    npix_y = npix_x if npix_y is None else npix_y
    cluster, backend = None, "clgrid"
    if dask_scheduler:  # scale-out (clgrid.scaleout.dask); the MS is read here, gridded there
        from ..scaleout.dask import cluster_vis2dirty
        cluster = cluster_vis2dirty(dask_scheduler)
        backend = f"clgrid.scaleout.dask@{dask_scheduler}"
    with MeasurementSet(ms_path, column=column, field=field) as ms:
        extent = UvExtent(0.0)
        if pixsize_x is None:
            pixsize_x, extent = _auto_cell(ms, spw)
        pixsize_y = pixsize_x if pixsize_y is None else pixsize_y
        geometry = ImageGeometry.from_arguments(
            npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
            epsilon=epsilon, do_wgridding=do_wgridding, precision="single")
        weigher = ImageWeighting(context, npix_x=geometry.npix_x, npix_y=geometry.npix_y,
                                 pixsize_x=geometry.pixsize_x, pixsize_y=geometry.pixsize_y,
                                 scheme=weighting, robust=robust, deterministic=deterministic)
        for window in ms.select_spws(spw):  # bad selections fail before any work
            parse_channels(channels, ms.spectral_windows[window].freq_hz.size)
            ms.parallel_hands(window)
        n_rows = ms.count_rows(spw)
        if n_rows == 0 and ms.nrows > 0:
            raise MSError(f"{ms.path}: empty selection: field {field}, spectral window(s) "
                          f"{ms.select_spws(spw)} have no rows (the set has {ms.nrows})")
        calibration = _calibration(ms, spw, calibrate, n_rows)
        selection = _Selection(spw, channels, chunk_rows, calibration, n_rows)
        budget = batch_budget_bytes(batch_mb)
        passes = 1 if weigher.scheme == "natural" else 2
        grid = _gridder(geometry, weigher.queue, devices, cluster)
        with _progress_bar(progress, n_rows * passes) as bar:
            sums = _grid_chunks(ms, weigher, grid, geometry, bar, passes, selection, make_psf,
                                budget)
        if cluster is not None:
            cluster[1].close()
        dirty, psf, sum_weights, counts, freqs = sums
        n_outside = counts["outside"] + weigher.n_outside
        _warn_bad_uvw(counts, n_rows)
        scale = 1.0 / sum_weights if sum_weights > 0 else 0.0  # nothing usable: zero image
        if not freqs:
            freqs = [ms.spectral_windows[w].freq_hz[parse_channels(
                channels, ms.spectral_windows[w].freq_hz.size)] for w in ms.select_spws(spw)]
        return ImageResult(
            image=dirty * scale, psf=None if psf is None else psf * scale,
            sum_weights=sum_weights, n_samples=counts["samples"], n_flagged=counts["flagged"],
            n_bad_uvw=counts["bad_uvw"], n_bad_uvw_rows=counts["bad_uvw_rows"],
            n_uv_outliers=extent.n_outliers, n_outside=n_outside,
            pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
            phase_centre_rad=ms.phase_centre_rad, freq_hz=np.unique(np.concatenate(freqs)),
            field_name=ms.field_name, telescope=ms.telescope, time_range_s=ms.time_range_s,
            weighting=weigher.scheme, robust=float(robust), epsilon=float(epsilon),
            do_wgridding=bool(do_wgridding), backend=backend, column=ms.column,
            n_rows=n_rows, history=[] if calibration is None else calibration.history())


def _calibration(ms, spw, calibrate, n_rows):
    """Gains solved for ``calibrate`` (None or 'point'), or None."""
    if calibrate is None or calibrate == "none":
        return None
    if calibrate != "point":
        raise ValueError(f"unknown calibration {calibrate!r}: use 'point' or None")
    if n_rows == 0:
        return None
    from .calibrate import solve_point
    return solve_point(ms, spw)


@dataclasses.dataclass(frozen=True)
class Beam:
    """Gaussian fitted to the PSF's main lobe: FWHM major and minor axes
    (radians) and position angle of the major axis (radians, north through
    east)."""

    major: float
    minor: float
    position_angle: float


def fit_beam(psf: np.ndarray, pixsize_x: float, pixsize_y: float,
             level: float = 0.35) -> Beam | None:
    """Fit ``exp(-(a l^2 + b l m + c m^2))`` to the PSF's main lobe.

    Least squares on ``log psf`` over the pixels above ``level`` that lie in
    the box around the centre pixel where the PSF first falls below it (the
    main lobe).  ``psf`` is (npix_x, npix_y) in ducc0's layout with its peak
    1 at the centre.  Returns None when no lobe can be fitted (zero PSF).
    """
    npix_x, npix_y = psf.shape
    cx, cy = npix_x // 2, npix_y // 2
    if not psf[cx, cy] > level:
        return None
    half = 1
    while half < min(cx, cy) - 1:
        box = psf[cx - half:cx + half + 1, cy - half:cy + half + 1]
        edge = np.concatenate([box[0], box[-1], box[:, 0], box[:, -1]])
        if np.all(edge < level):
            break
        half += 1
    box = psf[cx - half:cx + half + 1, cy - half:cy + half + 1]
    i, j = np.meshgrid(np.arange(-half, half + 1), np.arange(-half, half + 1), indexing="ij")
    inside = box > level
    l, m = i[inside] * pixsize_x, j[inside] * pixsize_y
    design = np.stack([l * l, l * m, m * m], axis=1)
    (a, b, c), *_ = np.linalg.lstsq(design, -np.log(box[inside]), rcond=None)
    eigenvalues, eigenvectors = np.linalg.eigh(np.array([[a, b / 2], [b / 2, c]]))
    if not np.all(eigenvalues > 0):
        return None
    fwhm = 2 * np.sqrt(np.log(2) / eigenvalues)  # eigenvalues ascending: major first
    east, north = eigenvectors[:, 0]
    angle = np.arctan2(east, north)
    angle = (angle + np.pi / 2) % np.pi - np.pi / 2  # an axis: angle modulo pi
    return Beam(float(fwhm[0]), float(fwhm[1]), float(angle))


@dataclasses.dataclass(frozen=True)
class _Selection:
    """What is read of the set, and how: window(s), channels, chunk size,
    gains to apply, and the number of rows that selects."""

    spw: object
    channels: object
    chunk_rows: int
    calibration: object
    n_rows: int

    def chunks(self, ms: MeasurementSet) -> Iterable[VisChunk]:
        """The selected Stokes I chunks of ``ms``, calibrated."""
        return ms.chunks(self.spw, self.channels, self.chunk_rows, self.calibration)


def _grid_chunks(ms, weigher, grid: Grid, geometry: ImageGeometry, bar, passes: int,
                 selection: _Selection, make_psf: bool, budget_bytes: int) -> tuple:
    """Weight-density pass (when needed), then the gridding pass.

    Chunks are read, counted and weighted one at a time; their rows with a
    positive weight go into :class:`_Batches`, gridded one batch at a time.
    Chunks with no usable weight are counted and never gridded.  Returns
    ``(dirty, psf, sum_weights, counts, freqs)``.
    """
    if passes == 2:
        for chunk in selection.chunks(ms):
            if chunk.n_usable:
                weigher.add(chunk.uvw_m, chunk.freq_hz, chunk.weight)
            bar.update(chunk.uvw_m.shape[0])
    batches = _Batches(grid, geometry, budget_bytes, selection.n_rows, make_psf)
    sum_weights, freqs = 0.0, []
    counts = dict.fromkeys(("samples", "flagged", "bad_uvw", "bad_uvw_rows", "outside"), 0)
    for chunk in selection.chunks(ms):
        bar.update(chunk.uvw_m.shape[0])
        batches.read(chunk.uvw_m.shape[0])
        _count(counts, chunk)
        freqs.append(chunk.freq_hz)
        if chunk.n_usable == 0:  # all flagged: nothing to weight or grid
            continue
        weight = weigher.apply(chunk.uvw_m, chunk.freq_hz, chunk.weight)
        outside = _off_grid(chunk.uvw_m, chunk.freq_hz, geometry) & (weight > 0)
        counts["outside"] += int(np.count_nonzero(outside))
        weight = np.where(outside, 0, weight).astype(np.float32)
        sum_weights += float(np.sum(weight, dtype=np.float64))
        batches.add(chunk.uvw_m, chunk.freq_hz, chunk.vis, weight)
    batches.flush()
    return batches.dirty, batches.psf, sum_weights, counts, freqs


def _count(counts: dict, chunk: VisChunk) -> None:
    """Add a chunk's samples, flagged samples and non-finite uvw rows to ``counts``."""
    bad_uvw = chunk.n_bad_uvw_rows * chunk.freq_hz.size
    counts["samples"] += chunk.mask.size
    counts["flagged"] += chunk.mask.size - chunk.n_usable - bad_uvw
    counts["bad_uvw"] += bad_uvw
    counts["bad_uvw_rows"] += chunk.n_bad_uvw_rows


#: Environment variable overriding the host memory of one gridding batch (MiB).
BATCH_ENV = "CLGRID_IMAGE_BATCH_MB"
#: Default batch budget: this fraction of the machine's memory, at most BATCH_CAP_BYTES.
BATCH_FRACTION = 1 / 8
BATCH_CAP_BYTES = 2 << 30


def batch_budget_bytes(batch_mb: float | None = None) -> int:
    """Host bytes of the usable rows gathered for one ``vis2dirty`` call.

    Parameters
    ----------
    batch_mb
        MiB; None: the ``CLGRID_IMAGE_BATCH_MB`` environment variable, else
        ``BATCH_FRACTION`` of the physical memory, at most ``BATCH_CAP_BYTES``.

    Returns
    -------
    int
        The budget in bytes (at least 1; a batch always holds one row).

    Raises
    ------
    ValueError
        When the value given or in the environment is not a positive number.
    """
    source = "batch_mb"
    if batch_mb is None and os.environ.get(BATCH_ENV, "").strip():
        batch_mb, source = os.environ[BATCH_ENV].strip(), BATCH_ENV
    if batch_mb is None:
        total = _physical_memory_bytes()
        return int(min(BATCH_CAP_BYTES, total * BATCH_FRACTION)) if total else BATCH_CAP_BYTES
    try:
        value = float(batch_mb)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{source} must be a positive number of MiB, got {batch_mb!r}")
    return max(1, int(value * 2**20))


def _physical_memory_bytes() -> int:
    """Physical memory of this machine in bytes (0 where unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # not POSIX, or the name is unknown
        return 0


class _Batches:
    """Rows of consecutive chunks gathered on the host, gridded with one
    ``vis2dirty`` call per batch (and one for the PSF).

    Gridding per chunk would build a plan and run an FFT and a correction
    for every chunk; gathered, the cost follows the data, not the chunking.
    The buffers are allocated for the rows that can still come (at most the
    budget), so a small set never reserves the whole budget, and reused
    batch after batch.  Rows keep their reading order: one batch grids the
    same samples in the same order as one chunk would.
    """

    def __init__(self, grid: Grid, geometry: ImageGeometry, budget_bytes: int, n_rows: int,
                 make_psf: bool) -> None:
        self._grid, self._budget = grid, budget_bytes
        self._unread = n_rows  # bounds the rows a buffer can ever need
        self._make_psf = make_psf
        self.dirty = np.zeros((geometry.npix_x, geometry.npix_y))
        self.psf = np.zeros_like(self.dirty) if make_psf else None
        self.n_calls = 0
        self._freq: np.ndarray | None = None
        self._buffers: dict[str, np.ndarray] = {}
        self._filled = 0

    def read(self, n_rows: int) -> None:
        """Note ``n_rows`` rows read from the set (for the buffers' size)."""
        self._unread -= n_rows

    def add(self, uvw: np.ndarray, freq: np.ndarray, vis: np.ndarray, weight: np.ndarray
            ) -> None:
        """Gather the rows of one chunk that have a positive weight,
        gridding whenever the buffers are full."""
        if self._freq is not None and not np.array_equal(freq, self._freq):
            self.flush()  # one vis2dirty call takes one frequency axis
        self._freq = freq
        rows = np.flatnonzero(np.any(weight > 0, axis=1))
        done = 0
        while done < rows.size:
            capacity = self._reserve(freq.size, rows.size - done)
            part = rows[done:done + capacity - self._filled]
            into = slice(self._filled, self._filled + part.size)
            np.take(uvw, part, axis=0, out=self._buffers["uvw"][into])
            np.take(vis, part, axis=0, out=self._buffers["vis"][into])
            np.take(weight, part, axis=0, out=self._buffers["wgt"][into])
            self._filled += part.size
            done += part.size
            if self._filled == capacity:
                self.flush()

    def _reserve(self, nchan: int, pending: int) -> int:
        """Rows the buffers hold, allocating them when there are none of
        ``nchan`` channels or too few rows for what is still to come."""
        row_bytes = 3 * 8 + nchan * (8 + 4 + (8 if self._make_psf else 0))
        wanted = max(1, min(self._budget // row_bytes, pending + self._filled + self._unread))
        held = self._buffers.get("vis")
        if held is not None and held.shape[1] == nchan and held.shape[0] >= wanted:
            return held.shape[0]
        if self._filled:  # new buffers for a batch under way: keep what it gathered
            self.flush()
        self._buffers = {}  # the old ones go before the new ones come
        self._buffers = {"uvw": np.empty((wanted, 3)),
                         "vis": np.empty((wanted, nchan), np.complex64),
                         "wgt": np.empty((wanted, nchan), np.float32)}
        if self._make_psf:
            self._buffers["ones"] = np.ones((wanted, nchan), np.complex64)
        return wanted

    def flush(self) -> None:
        """Grid the gathered rows (image, then PSF) and add the images."""
        n, self._filled = self._filled, 0
        if n == 0:
            return
        rows = {name: array[:n] for name, array in self._buffers.items()}
        self.dirty += self._grid(rows["uvw"], self._freq, rows["vis"], rows["wgt"])
        if self.psf is not None:
            self.psf += self._grid(rows["uvw"], self._freq, rows["ones"], rows["wgt"])
        self.n_calls += 1
        reclaim_signals()


def reclaim_signals() -> None:
    """Put Python's own SIGINT and SIGTERM handlers back in the process.

    The CPU OpenCL runtimes (Intel's ``libintelocl.so``, PoCL's ``libpocl``)
    install their LLVM's handlers for SIGINT, SIGTERM and SIGHUP when a
    context is made (read back with ``sigaction``), so a Ctrl-C reaches
    Python only through them; in one CI run it never did.  Re-setting each
    signal's current Python handler (``SIG_IGN`` under ``nohup`` stays so)
    makes Python take them first again.  Main thread only, as Python sets
    handlers there alone.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:   # None: set from C, not by Python; left alone
            signal.signal(signum, handler)


def _warn_bad_uvw(counts: dict, n_rows: int) -> None:
    """One RuntimeWarning for the rows left out for a non-finite uvw."""
    if counts["bad_uvw_rows"]:
        warnings.warn(f"{counts['bad_uvw_rows']} of {n_rows} rows ({counts['bad_uvw']} "
                      "visibilities) have non-finite uvw and were left out",
                      RuntimeWarning, stacklevel=3)


def _gridder(geometry: ImageGeometry, queue, devices, cluster) -> Grid:
    """The batches' :data:`Grid`: on the Dask ``cluster`` (its
    ``cluster_vis2dirty`` function and client), else on ``devices``, else on
    the weighting's ``queue``."""
    if cluster is not None:
        return lambda uvw, freq, vis, wgt: cluster[0](geometry, uvw=uvw, freq=freq, vis=vis,
                                                      wgt=wgt)
    context, devices = (None, devices) if devices else (queue, None)

    def grid(uvw: np.ndarray, freq: np.ndarray, vis: np.ndarray, wgt: np.ndarray) -> np.ndarray:
        return vis2dirty_with(geometry, uvw=uvw, freq=freq, vis=vis, wgt=wgt, context=context,
                              devices=devices)
    return grid


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc) -> None:
        pass


def _progress_bar(enabled: bool, total: int):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    # disable=None: no bar where stderr is not a terminal (logs, pipes, batch jobs)
    return tqdm(total=total, unit="row", desc="imaging", leave=False, disable=None)


__all__ = ["BATCH_CAP_BYTES", "BATCH_ENV", "BATCH_FRACTION", "Beam", "ImageResult",
           "OUTLIER_FACTOR", "UvExtent", "auto_cell_rad", "batch_budget_bytes", "fit_beam",
           "image_measurement_set", "uv_extent"]

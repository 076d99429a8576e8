"""Dirty images from visibilities and back, to a stated accuracy, like ducc0.

:func:`vis2dirty` and :func:`dirty2vis` take the keyword arguments and follow
the conventions of ``ducc0.wgridder.vis2dirty`` / ``dirty2vis``::

    dirty[i, j] = sum_k V_k exp(+2 pi i (u_k l_i + v_k m_j - w_k (n_ij - 1))) / n_ij
    l_i = (i - npix_x / 2) * pixsize_x + center_x      (first axis)
    m_j = (j - npix_y / 2) * pixsize_y + center_y

(no ``w`` term and no division by ``n`` when ``do_wgridding`` is False), with
u, v, w in wavelengths (``uvw * freq / c``).  :class:`Imager` is the
compile-once object behind them: it keeps the kernels, the FFT plan, the
uvw on the device and the grid buffers for repeated major cycles.

Method: the exponential-of-semicircle kernel (:mod:`clgrid.eskernel`) is
evaluated on the fly while gridding onto a grid padded by ``sigma``; with
``do_wgridding`` the visibilities are also spread over w planes with the same
kernel (W-stacking with a kernel in w, Arras et al. 2021), each plane is
transformed and multiplied by its phase screen, and the sum is corrected by
the kernel's Fourier transform in u, v and w.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .device import resolve_queue
from .eskernel import KernelChoice, candidate_kernels, es_kernel, good_fft_size
from .fft import DeviceFFT
from .kernels import KernelTemplate, Operation, real_dtype_name

SPEED_OF_LIGHT = 299792458.0
#: Smallest epsilon per precision (ducc0 refuses smaller ones too).
MIN_EPSILON = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 2e-13}
_QUADRATURE_NODES = 100
# Relative costs of one grid cell of FFT work and one kernel tap (atomic add),
# used only to rank kernel choices.
_FFT_COST_PER_CELL = 1.0
_GRID_COST_PER_TAP = 4.0


def _choose_kernel(epsilon: float, npix_x: int, npix_y: int, n_vis: int, n_planes_at,
                   do_w: bool, sigma_min: float, sigma_max: float,
                   grid_real: np.dtype) -> KernelChoice:
    """Cheapest (FFT + gridding) kernel meeting ``epsilon``; ducc0 does the same."""
    best, best_cost = None, math.inf
    roundoff = float(np.finfo(grid_real).eps) / 2.0
    for choice in candidate_kernels(epsilon, 3 if do_w else 2, sigma_min, sigma_max,
                                    roundoff):
        nu = good_fft_size(math.ceil(choice.sigma * npix_x))
        nv = good_fft_size(math.ceil(choice.sigma * npix_y))
        planes = n_planes_at(choice) if do_w else 1
        taps = choice.support ** (3 if do_w else 2)
        cost = (planes * _FFT_COST_PER_CELL * nu * nv * math.log2(nu * nv)
                + _GRID_COST_PER_TAP * n_vis * taps)
        if cost < best_cost:
            best, best_cost = choice, cost
    return best


class Imager(Operation):
    """Compile-once gridder/degridder for one observation and image geometry.

    Parameters
    ----------
    context
        :class:`pyopencl.Context`, :class:`pyopencl.CommandQueue` or None.
    uvw
        (nrow, 3) baseline coordinates in metres (uploaded once).
    freq
        (nchan,) channel frequencies in Hz.
    npix_x, npix_y
        Image size (even).
    pixsize_x, pixsize_y
        Pixel sizes in radians (direction cosines).
    epsilon
        Requested relative rms accuracy against a direct Fourier transform.
    do_wgridding
        Treat the w term exactly (W-stacking); False ignores w.
    precision
        ``'single'`` (complex64 visibilities, float32 images) or ``'double'``.
    flip_u, flip_v, flip_w, divide_by_n, sigma_min, sigma_max, center_x, center_y,
    double_precision_accumulation
        As in ``ducc0.wgridder``.
    fft_backend
        ``'reikna'`` (device) or ``'numpy'`` (host fallback); default the best.
    contexts
        Several devices instead of ``context``: a list of contexts, queues,
        devices or spec strings, or ``'all'``.  Then the object made is a
        :class:`clgrid.multidevice.MultiDeviceImager` (same methods; its
        extra keywords ``partition``, ``baseline_ids`` and ``reduce`` are
        accepted too).
    """

    def __new__(cls, context=None, *args, contexts=None, **kwargs):
        if contexts is None:
            return super().__new__(cls)
        if context is not None:
            raise ValueError("give context or contexts, not both")
        from .multidevice import MultiDeviceImager
        return MultiDeviceImager(contexts, **kwargs)

    def __init__(self, context=None, *, uvw, freq, npix_x: int, npix_y: int,
                 pixsize_x: float, pixsize_y: float, epsilon: float,
                 do_wgridding: bool = False, precision: str = "single",
                 flip_u: bool = False, flip_v: bool = False, flip_w: bool = False,
                 divide_by_n: bool = True, sigma_min: float = 1.1, sigma_max: float = 2.6,
                 center_x: float = 0.0, center_y: float = 0.0,
                 double_precision_accumulation: bool = False, fft_backend: str | None = None,
                 contexts=None):
        super().__init__(context)
        self.uvw_m = _check_uvw(uvw)
        self.freq_hz = _check_freq(freq)
        self.npix_x, self.npix_y = _check_npix(npix_x, npix_y)
        self.pixsize_x, self.pixsize_y = _check_positive(pixsize_x, "pixsize_x"), \
            _check_positive(pixsize_y, "pixsize_y")
        self.center_x, self.center_y = float(center_x), float(center_y)
        self.do_w = bool(do_wgridding)
        self.signs = tuple(-1.0 if flip else 1.0 for flip in (flip_u, flip_v, flip_w))
        self.divide_by_n = bool(divide_by_n) and self.do_w
        self.vis_real = _precision_dtype(precision)
        self.grid_real = (np.dtype(np.float64) if double_precision_accumulation
                          else self.vis_real)
        self.epsilon = _check_epsilon(epsilon, self.vis_real)
        self._check_device()
        self._max_eta = self._max_abs_n_minus_1()
        self._w_range = self._w_range_wavelengths()
        self.kernel_choice = _choose_kernel(
            self.epsilon, self.npix_x, self.npix_y, self.n_rows * self.n_chan,
            self._n_planes_for, self.do_w, sigma_min, sigma_max, self.grid_real)
        self.nu = good_fft_size(math.ceil(self.kernel_choice.sigma * self.npix_x))
        self.nv = good_fft_size(math.ceil(self.kernel_choice.sigma * self.npix_y))
        self._setup_planes()
        self._build(fft_backend)
        self._upload_geometry()

    # ------------------------------------------------------------------ setup
    @property
    def n_rows(self) -> int:
        return self.uvw_m.shape[0]

    @property
    def n_chan(self) -> int:
        return self.freq_hz.shape[0]

    def _check_device(self) -> None:
        if not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no double precision (fp64); "
                             "clgrid's imaging needs it for coordinates and phases")

    def _pixel_lm(self) -> tuple[np.ndarray, np.ndarray]:
        l_rad = (np.arange(self.npix_x) - self.npix_x // 2) * self.pixsize_x + self.center_x
        m_rad = (np.arange(self.npix_y) - self.npix_y // 2) * self.pixsize_y + self.center_y
        return l_rad, m_rad

    def _max_abs_n_minus_1(self) -> float:
        l_rad, m_rad = self._pixel_lm()
        r2 = np.max(l_rad ** 2) + np.max(m_rad ** 2)
        if r2 >= 1.0:
            raise ValueError("the image reaches beyond the horizon (l^2 + m^2 >= 1); "
                             "reduce npix, pixsize or the centre offset")
        return float(r2 / (np.sqrt(1.0 - r2) + 1.0))

    def _w_range_wavelengths(self) -> tuple[float, float]:
        w_m = self.uvw_m[:, 2] * self.signs[2]
        ends = np.outer([w_m.min(), w_m.max()], self.freq_hz[[0, -1]]) / SPEED_OF_LIGHT
        return float(ends.min()), float(ends.max())

    def _plane_spacing(self, choice: KernelChoice) -> float:
        # The w kernel's "image" is eta = n - 1: keep |eta| dw <= 1 / (2 sigma),
        # the same oversampling margin as in u and v.
        return 0.5 / (choice.sigma * max(self._max_eta, 1e-300))

    def _n_planes_for(self, choice: KernelChoice) -> int:
        w_min, w_max = self._w_range
        return int(math.ceil((w_max - w_min) / self._plane_spacing(choice))) + choice.support

    def _setup_planes(self) -> None:
        choice = self.kernel_choice
        if not self.do_w:
            self.n_planes, self.dw, self.w0 = 1, 1.0, 0.0
            self._row_order = np.arange(self.n_rows, dtype=np.uint32)
            self._plane_rows = [(0, self.n_rows)]
            return
        self.dw = self._plane_spacing(choice)
        self.n_planes = self._n_planes_for(choice)
        self.w0 = self._w_range[0] - 0.5 * choice.support * self.dw
        w_row_m = self.uvw_m[:, 2] * self.signs[2]
        order = np.argsort(w_row_m, kind="stable")
        self._row_order = order.astype(np.uint32)
        sorted_w = w_row_m[order]
        f_min, f_max = self.freq_hz.min(), self.freq_hz.max()
        self._plane_rows = []
        for plane in range(self.n_planes):
            # visibilities of this plane have w (wavelengths) in (lo, hi)
            lo = self.w0 + (plane - 0.5 * choice.support) * self.dw
            hi = self.w0 + (plane + 0.5 * choice.support) * self.dw
            row_lo = lo * SPEED_OF_LIGHT / (f_max if lo > 0 else f_min)
            row_hi = hi * SPEED_OF_LIGHT / (f_min if hi > 0 else f_max)
            first = int(np.searchsorted(sorted_w, row_lo, side="left"))
            last = int(np.searchsorted(sorted_w, row_hi, side="right"))
            self._plane_rows.append((first, max(first, last)))

    def _build(self, fft_backend: str | None) -> None:
        choice = self.kernel_choice
        coord = "double"
        need_f64 = True
        self.gridder = KernelTemplate(
            self.queue, "wgridder.cl.mako",
            {"real": real_dtype_name(self.grid_real), "coord": coord,
             "support": choice.support, "beta": choice.beta, "do_w": self.do_w,
             "shifted": bool(self.center_x or self.center_y)},
            need_f64=need_f64)
        self.corrector = KernelTemplate(
            self.queue, "gridcorrect.cl.mako",
            {"real": real_dtype_name(self.grid_real), "do_w": self.do_w,
             "divide_by_n": self.divide_by_n, "n_quadrature": _QUADRATURE_NODES},
            need_f64=True)
        self._grid_kernel = self.gridder.kernel("grid")
        self._degrid_kernel = self.gridder.kernel("degrid")
        self._to_dirty_kernel = self.corrector.kernel("grid_to_dirty")
        self._to_grid_kernel = self.corrector.kernel("dirty_to_grid")
        self.grid_complex = np.dtype(np.complex64 if self.grid_real == np.float32
                                     else np.complex128)
        self.fft = DeviceFFT(self.queue, (self.nu, self.nv), self.grid_complex, fft_backend)

    def _upload_geometry(self) -> None:
        queue = self.queue
        self.uvw_d = cla.to_device(queue, np.ascontiguousarray(self.uvw_m))
        self.freq_scale_d = cla.to_device(queue, self.freq_hz / SPEED_OF_LIGHT)
        self.row_order_d = cla.to_device(queue, self._row_order)
        self.grid_d = cla.empty(queue, (self.nu, self.nv), self.grid_complex)
        self.corr_d = self._compute_correction()

    def _compute_correction(self) -> cla.Array:
        choice = self.kernel_choice
        t_x = np.arange(self.npix_x) - self.npix_x // 2
        t_y = np.arange(self.npix_y) - self.npix_y // 2
        corr_x = 1.0 / choice.fourier(t_x / self.nu)
        corr_y = 1.0 / choice.fourier(t_y / self.nv)
        nodes, weights = np.polynomial.legendre.leggauss(_QUADRATURE_NODES)
        s_q = nodes * (choice.support / 2.0)
        phi_q = es_kernel(s_q, choice.support, choice.beta) * weights * (choice.support / 2.0)
        corr = cla.empty(self.queue, (self.npix_x, self.npix_y), self.grid_real)
        kernel = self.corrector.kernel("correction")
        arrays = [cla.to_device(self.queue, a) for a in (corr_x, corr_y, s_q, phi_q)]
        kernel(self.queue, (self.npix_x, self.npix_y), None, corr.data,
               np.int32(self.npix_x), np.int32(self.npix_y), arrays[0].data, arrays[1].data,
               np.float64(self.pixsize_x), np.float64(self.pixsize_y),
               np.float64(self.center_x), np.float64(self.center_y),
               arrays[2].data, arrays[3].data, np.float64(self.dw)).wait()
        return corr

    # ------------------------------------------------------------ per call
    def _scales(self) -> tuple:
        coord = np.float64
        u_scale = coord(self.signs[0] * self.nu * self.pixsize_x)
        v_scale = coord(self.signs[1] * self.nv * self.pixsize_y)
        w_scale = coord(self.signs[2] / self.dw)
        w_offset = coord(self.w0 / self.dw)
        shift_u = np.float64(2.0 * np.pi * self.signs[0] * self.center_x)
        shift_v = np.float64(2.0 * np.pi * self.signs[1] * self.center_y)
        return u_scale, v_scale, w_scale, w_offset, shift_u, shift_v

    def _launch_vis_kernel(self, kernel, vis_d, npol, pol, grid, plane) -> None:
        first, last = self._plane_rows[plane]
        if last <= first:
            return
        u_scale, v_scale, w_scale, w_offset, shift_u, shift_v = self._scales()
        kernel(self.queue, (last - first, self.n_chan), None,
               self.uvw_d.data, self.freq_scale_d.data, self.row_order_d.data,
               np.uint32(first), np.uint32(last - first), np.uint32(self.n_chan),
               vis_d.data, np.uint32(npol), np.uint32(pol), grid.data,
               np.int32(self.nu), np.int32(self.nv), u_scale, v_scale, w_scale, w_offset,
               np.int32(plane), shift_u, shift_v)

    def _w_plane(self, plane: int) -> float:
        return self.w0 + plane * self.dw if self.do_w else 0.0

    def _image_args(self) -> tuple:
        return (np.float64(self.pixsize_x), np.float64(self.pixsize_y),
                np.float64(self.center_x), np.float64(self.center_y))

    def vis2dirty(self, vis, wgt=None, mask=None, dirty=None) -> np.ndarray:
        """Dirty image(s) of ``vis``.

        Parameters
        ----------
        vis
            (nrow, nchan) or (nrow, nchan, npol) complex, numpy or device array.
        wgt, mask
            Optional (nrow, nchan) weights and flags (mask 0 drops a visibility).
        dirty
            Optional output numpy array of the result's shape and dtype.

        Returns
        -------
        numpy.ndarray
            (npix_x, npix_y), or (npol, npix_x, npix_y) for 3-D ``vis``.
        """
        vis_d, npol, squeeze = self._vis_to_device(vis, wgt, mask)
        images = [cla.zeros(self.queue, (self.npix_x, self.npix_y), self.grid_real)
                  for _ in range(npol)]
        scale = self.grid_real.type(self.fft.backward_scale)
        for pol, image in enumerate(images):
            for plane in range(self.n_planes):
                if self._plane_rows[plane][1] <= self._plane_rows[plane][0]:
                    continue
                self.grid_d.fill(0)
                self._launch_vis_kernel(self._grid_kernel, vis_d, npol, pol, self.grid_d, plane)
                self.fft.backward(self.grid_d)
                self._to_dirty_kernel(
                    self.queue, (self.npix_x, self.npix_y), None, self.grid_d.data,
                    np.int32(self.nu), np.int32(self.nv), image.data, self.corr_d.data,
                    np.int32(self.npix_x), np.int32(self.npix_y), *self._image_args(),
                    np.float64(self._w_plane(plane)), scale)
        result = np.stack([image.get() for image in images]).astype(self.vis_real, copy=False)
        result = result[0] if squeeze else result
        if dirty is not None:
            dirty[...] = result
            return dirty
        return result

    def dirty2vis(self, dirty, wgt=None, mask=None) -> np.ndarray:
        """Visibilities predicted from ``dirty`` (the adjoint of :meth:`vis2dirty`).

        Parameters
        ----------
        dirty
            (npix_x, npix_y) or (npol, npix_x, npix_y) real image.
        wgt, mask
            Optional (nrow, nchan) weights and flags applied to the output.

        Returns
        -------
        numpy.ndarray
            (nrow, nchan) or (nrow, nchan, npol) complex of the image's precision.
        """
        dirty = np.asarray(dirty)
        squeeze = dirty.ndim == 2
        images = dirty[None] if squeeze else dirty
        if images.ndim != 3 or images.shape[1:] != (self.npix_x, self.npix_y):
            raise ValueError(f"dirty must be ({self.npix_x}, {self.npix_y}) or "
                             f"(npol, {self.npix_x}, {self.npix_y}), got {dirty.shape}")
        _check_finite(images, "dirty")
        npol = images.shape[0]
        images_d = [cla.to_device(self.queue, np.ascontiguousarray(image, self.grid_real))
                    for image in images]
        out = cla.zeros(self.queue, (self.n_rows, self.n_chan, npol), self.grid_complex)
        for pol in range(npol):
            for plane in range(self.n_planes):
                if self._plane_rows[plane][1] <= self._plane_rows[plane][0]:
                    continue
                self.grid_d.fill(0)
                self._to_grid_kernel(
                    self.queue, (self.npix_x, self.npix_y), None, images_d[pol].data,
                    self.corr_d.data, np.int32(self.npix_x), np.int32(self.npix_y),
                    self.grid_d.data, np.int32(self.nu), np.int32(self.nv),
                    *self._image_args(), np.float64(self._w_plane(plane)))
                self.fft.forward(self.grid_d)
                self._launch_vis_kernel(self._degrid_kernel, out, npol, pol, self.grid_d, plane)
        vis = out.get()
        factor = self._row_factor(wgt, mask)
        if factor is not None:
            vis *= factor[:, :, None]
        vis = vis.astype(np.complex64 if self.vis_real == np.float32 else np.complex128,
                         copy=False)
        return vis[:, :, 0] if squeeze else vis

    # ------------------------------------------------------------ helpers
    def _row_factor(self, wgt, mask) -> np.ndarray | None:
        shape = (self.n_rows, self.n_chan)
        factor = None
        if wgt is not None:
            wgt = np.asarray(wgt)
            if wgt.shape != shape:
                raise ValueError(f"wgt must have shape {shape}, got {wgt.shape}")
            _check_finite(wgt, "wgt")
            factor = wgt.astype(np.float64)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != shape:
                raise ValueError(f"mask must have shape {shape}, got {mask.shape}")
            keep = mask != 0
            factor = keep.astype(np.float64) if factor is None else factor * keep
        return factor

    def _vis_to_device(self, vis, wgt, mask) -> tuple[cla.Array, int, bool]:
        if isinstance(vis, cla.Array) and wgt is None and mask is None:
            host = None
            shape = vis.shape
        else:
            host = vis.get() if isinstance(vis, cla.Array) else np.asarray(vis)
            shape = host.shape
        if len(shape) not in (2, 3) or shape[:2] != (self.n_rows, self.n_chan):
            raise ValueError(f"vis must be (nrow, nchan[, npol]) = ({self.n_rows}, "
                             f"{self.n_chan}[, npol]), got {shape}")
        squeeze = len(shape) == 2
        npol = 1 if squeeze else shape[2]
        if host is None:
            if vis.dtype != self.grid_complex:
                raise TypeError(f"device vis must be {self.grid_complex}, got {vis.dtype}")
            return vis, npol, squeeze
        if host.dtype.kind != "c":
            raise TypeError(f"vis must be complex, got {host.dtype}")
        _check_finite(host, "vis")
        factor = self._row_factor(wgt, mask)
        if factor is not None:
            host = host * (factor if squeeze else factor[:, :, None])
        return cla.to_device(self.queue, np.ascontiguousarray(host, self.grid_complex)), \
            npol, squeeze


# ---------------------------------------------------------------- validation
def _check_uvw(uvw) -> np.ndarray:
    uvw = np.asarray(uvw)
    if uvw.ndim != 2 or uvw.shape[1] != 3 or uvw.shape[0] == 0:
        raise ValueError(f"uvw must be (nrow, 3) with nrow > 0, got {uvw.shape}")
    if uvw.dtype.kind not in "fi":
        raise TypeError(f"uvw must be real, got {uvw.dtype}")
    uvw = np.ascontiguousarray(uvw, np.float64)
    _check_finite(uvw, "uvw")
    if uvw.shape[0] >= 2 ** 32:
        raise ValueError("more than 2**32 rows: split the observation")
    return uvw


def _check_freq(freq) -> np.ndarray:
    freq = np.ascontiguousarray(np.atleast_1d(np.asarray(freq, dtype=np.float64)))
    if freq.ndim != 1 or freq.size == 0:
        raise ValueError(f"freq must be (nchan,) with nchan > 0, got {freq.shape}")
    _check_finite(freq, "freq")
    if np.any(freq <= 0):
        raise ValueError("freq must be positive (Hz)")
    return freq


def _check_npix(npix_x, npix_y) -> tuple[int, int]:
    npix = (int(npix_x), int(npix_y))
    if any(n < 2 or n % 2 for n in npix):
        raise ValueError(f"npix_x and npix_y must be even and >= 2, got {npix}")
    return npix


def _check_positive(value, name) -> float:
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be positive and finite, got {value}")
    return value


def _check_epsilon(epsilon, real_dtype) -> float:
    epsilon = float(epsilon)
    floor = MIN_EPSILON[np.dtype(real_dtype)]
    if not (epsilon >= floor) or not math.isfinite(epsilon) or epsilon >= 1.0:
        raise ValueError(f"epsilon must be in [{floor:g}, 1) for {np.dtype(real_dtype)} "
                         f"data, got {epsilon}")
    return epsilon


def _check_finite(array: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or Inf")


def _precision_dtype(precision: str) -> np.dtype:
    if precision not in ("single", "double"):
        raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
    return np.dtype(np.float32 if precision == "single" else np.float64)


# ------------------------------------------------------------ functional API
_imagers: dict[tuple, Imager] = {}
_MAX_CACHED_IMAGERS = 4


def _cached_imager(queue: cl.CommandQueue, uvw, freq, **geometry) -> Imager:
    """One Imager per (queue, uvw, freq, geometry); kept for repeated calls."""
    uvw = _check_uvw(uvw)
    freq = _check_freq(freq)
    key = (queue.int_ptr, uvw.shape, hash(uvw.tobytes()), hash(freq.tobytes()),
           tuple(sorted(geometry.items())))
    imager = _imagers.get(key)
    if imager is None:
        if len(_imagers) >= _MAX_CACHED_IMAGERS:
            _imagers.pop(next(iter(_imagers)))
        imager = Imager(queue, uvw=uvw, freq=freq, **geometry)
        _imagers[key] = imager
    return imager


def _queue_of(context, queue) -> cl.CommandQueue:
    return resolve_queue(queue if queue is not None else context)


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x: int = 0, npix_y: int = 0,
              pixsize_x: float, pixsize_y: float, epsilon: float, do_wgridding: bool = False,
              nthreads: int = 1, verbosity: int = 0, flip_u: bool = False,
              flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
              sigma_min: float = 1.1, sigma_max: float = 2.6, center_x: float = 0.0,
              center_y: float = 0.0, double_precision_accumulation: bool = False,
              allow_nshift: bool = True, context=None, queue=None, dirty=None,
              devices=None) -> np.ndarray:
    """Dirty image of visibilities, with ``ducc0.wgridder.vis2dirty``'s arguments.

    ``nthreads``, ``verbosity`` and ``allow_nshift`` are accepted and ignored.
    ``vis`` of shape (nrow, nchan, npol) gives (npol, npix_x, npix_y).  The
    precision follows ``vis`` (complex64: float32 image, complex128: float64).
    ``context``/``queue`` choose the device (default :func:`clgrid.create_context`).
    See the module docstring for the conventions.  ``devices`` (a list of
    devices, contexts or queues, or ``'all'``) spreads the work over several
    devices: see :mod:`clgrid.multidevice`.
    """
    if devices is not None:
        from .multidevice import call_from_imaging
        return call_from_imaging("vis2dirty", devices, locals())
    vis_array = vis if isinstance(vis, cla.Array) else np.asarray(vis)
    if dirty is not None:
        npix_x = npix_x or dirty.shape[-2]
        npix_y = npix_y or dirty.shape[-1]
    precision = _precision_of(vis_array.dtype, "vis")
    imager = _cached_imager(
        _queue_of(context, queue), uvw, freq, npix_x=int(npix_x), npix_y=int(npix_y),
        pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y), epsilon=float(epsilon),
        do_wgridding=bool(do_wgridding), precision=precision, flip_u=bool(flip_u),
        flip_v=bool(flip_v), flip_w=bool(flip_w), divide_by_n=bool(divide_by_n),
        sigma_min=float(sigma_min), sigma_max=float(sigma_max), center_x=float(center_x),
        center_y=float(center_y),
        double_precision_accumulation=bool(double_precision_accumulation))
    return imager.vis2dirty(vis_array, wgt=wgt, mask=mask, dirty=dirty)


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x: float, pixsize_y: float,
              epsilon: float, do_wgridding: bool = False, nthreads: int = 1,
              verbosity: int = 0, flip_u: bool = False, flip_v: bool = False,
              flip_w: bool = False, divide_by_n: bool = True, sigma_min: float = 1.1,
              sigma_max: float = 2.6, center_x: float = 0.0, center_y: float = 0.0,
              allow_nshift: bool = True, context=None, queue=None, vis=None,
              devices=None) -> np.ndarray:
    """Visibilities of a dirty image, with ``ducc0.wgridder.dirty2vis``'s arguments.

    The adjoint of :func:`vis2dirty`.  ``dirty`` of shape (npol, npix_x,
    npix_y) gives (nrow, nchan, npol).  float32 images give complex64.
    """
    if devices is not None:  # several devices: see clgrid.multidevice
        from .multidevice import call_from_imaging
        return call_from_imaging("dirty2vis", devices, locals())
    dirty = np.asarray(dirty)
    if dirty.ndim not in (2, 3):
        raise ValueError(f"dirty must be 2-D or 3-D, got shape {dirty.shape}")
    precision = _precision_of(dirty.dtype, "dirty")
    imager = _cached_imager(
        _queue_of(context, queue), uvw, freq, npix_x=dirty.shape[-2], npix_y=dirty.shape[-1],
        pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y), epsilon=float(epsilon),
        do_wgridding=bool(do_wgridding), precision=precision, flip_u=bool(flip_u),
        flip_v=bool(flip_v), flip_w=bool(flip_w), divide_by_n=bool(divide_by_n),
        sigma_min=float(sigma_min), sigma_max=float(sigma_max), center_x=float(center_x),
        center_y=float(center_y), double_precision_accumulation=False)
    result = imager.dirty2vis(dirty, wgt=wgt, mask=mask)
    if vis is not None:
        vis[...] = result
        return vis
    return result


def _precision_of(dtype, name: str) -> str:
    dtype = np.dtype(dtype)
    if dtype in (np.complex64, np.float32):
        return "single"
    if dtype in (np.complex128, np.float64):
        return "double"
    raise TypeError(f"{name} must be complex64/complex128 (or float32/float64 images), "
                    f"got {dtype}")


# ------------------------------------------------------------ references
def dft_vis2dirty(uvw, freq, vis, npix_x, npix_y, pixsize_x, pixsize_y, *,
                  do_wgridding=False, divide_by_n=True, center_x=0.0, center_y=0.0,
                  pixels=None) -> np.ndarray:
    """Float64 direct Fourier transform with :func:`vis2dirty`'s convention.

    ``pixels``: optional (i, j) index arrays to evaluate only some pixels
    (returns a 1-D array then).  Cost O(nvis * npix): for tests only.
    """
    u, v, w = _wavelengths(uvw, freq)
    l_rad = (np.arange(npix_x) - npix_x // 2) * pixsize_x + center_x
    m_rad = (np.arange(npix_y) - npix_y // 2) * pixsize_y + center_y
    if pixels is None:
        ll, mm = np.meshgrid(l_rad, m_rad, indexing="ij")
    else:
        ll, mm = l_rad[pixels[0]], m_rad[pixels[1]]
    n = np.sqrt(1.0 - ll ** 2 - mm ** 2)
    eta = (n - 1.0) if do_wgridding else np.zeros_like(n)
    values = np.asarray(vis, np.complex128).ravel()
    out = np.zeros(ll.shape)
    for k in range(values.size):
        if values[k] != 0:
            phase = 2.0 * np.pi * (u[k] * ll + v[k] * mm - w[k] * eta)
            out += (values[k] * np.exp(1j * phase)).real
    if do_wgridding and divide_by_n:
        out /= n
    return out


def dft_dirty2vis(uvw, freq, dirty, pixsize_x, pixsize_y, *, do_wgridding=False,
                  divide_by_n=True, center_x=0.0, center_y=0.0) -> np.ndarray:
    """Float64 direct Fourier transform with :func:`dirty2vis`'s convention."""
    dirty = np.asarray(dirty, np.float64)
    npix_x, npix_y = dirty.shape
    u, v, w = _wavelengths(uvw, freq)
    l_rad = (np.arange(npix_x) - npix_x // 2) * pixsize_x + center_x
    m_rad = (np.arange(npix_y) - npix_y // 2) * pixsize_y + center_y
    ll, mm = np.meshgrid(l_rad, m_rad, indexing="ij")
    n = np.sqrt(1.0 - ll ** 2 - mm ** 2)
    eta = (n - 1.0) if do_wgridding else np.zeros_like(n)
    image = dirty / n if (do_wgridding and divide_by_n) else dirty
    out = np.empty(u.size, np.complex128)
    for k in range(u.size):
        phase = -2.0 * np.pi * (u[k] * ll + v[k] * mm - w[k] * eta)
        out[k] = np.sum(image * np.exp(1j * phase))
    return out.reshape(np.shape(uvw)[0], -1)


def _wavelengths(uvw, freq):
    uvw = np.asarray(uvw, np.float64)
    scale = np.asarray(freq, np.float64)[None, :] / SPEED_OF_LIGHT
    return ((uvw[:, 0:1] * scale).ravel(), (uvw[:, 1:2] * scale).ravel(),
            (uvw[:, 2:3] * scale).ravel())


__all__ = ["Imager", "dft_dirty2vis", "dft_vis2dirty", "dirty2vis", "vis2dirty"]

"""Natural, uniform and Briggs (robust) imaging weights, computed on the device.

Uniform and Briggs weighting divide each sample's weight by the density of
weights around it in the uv plane.  The density is a histogram on the
image's own uv grid (``npix_x`` x ``npix_y`` cells of ``1 / (npix *
pixsize)`` wavelengths, as CASA and WSClean do): every sample adds its
natural weight ``w_i`` to its cell ``k``, giving ``W_k``.  Then

* natural: ``w_i``
* uniform: ``w_i / W_k``
* Briggs:  ``w_i / (1 + W_k f^2)`` with
  ``f^2 = (5 * 10^-R)^2 / (sum_k W_k^2 / sum_i w_i)`` (robust ``R``;
  ``R = -2`` is close to uniform, ``R = 2`` close to natural).

A visibility and its conjugate fold onto one cell (half-plane ``u >= 0``).
Samples whose cell is off the grid get weight 0 under uniform and Briggs
weighting and are counted in :attr:`ImageWeighting.n_outside`.

Large observations stream: call :meth:`ImageWeighting.add` on every chunk,
then :meth:`ImageWeighting.apply` on every chunk again.

Determinism: with ``deterministic=True`` (the default) the histogram is
built without float atomics, so the weights, and the images made with them,
are bitwise the same run after run:

``'fixed'`` (devices with 64-bit integer atomics: every platform clgrid has
    met)
    each chunk's weights are scaled by a power of two ``2^k`` (chosen from
    the chunk's total weight so that no cell can exceed ``2^62``), rounded to
    64-bit integers and added with integer atomics -- exact, so their order
    cannot matter -- then folded into the float histogram.  A weight loses
    at most ``2^-k / 2``, about ``1e-19`` of the chunk's total weight: far
    below float32 rounding.  As fast as the float atomics.
``'sorted'`` (the fallback)
    every sample's cell becomes a key, clgrid's stable radix sort
    (:mod:`clgrid.device.radixsort`) groups the samples by cell in sample
    order and one work-item per cell sums its run in that order (float64
    where the device has it).  Several times slower than the atomics.

With ``deterministic=False`` (``'atomic'``) the samples add into their cells
with float atomics, whose order varies in the last bits.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.plan import SPEED_OF_LIGHT, check_npix
from ..device.kernels import KernelTemplate, Operation, launch, quiet_builds
from ..device.radixsort import RadixSort

SCHEMES = ("natural", "uniform", "briggs")
HISTOGRAM_METHODS = ("atomic", "fixed", "sorted")
#: Headroom of the fixed-point histogram: chunk total * 2^k <= 2^61 < 2^63.
_FIXED_POINT_BITS = 61
_INT64_ATOMICS = "cl_khr_int64_base_atomics"
#: Briggs' normalisation constant: f^2 = (5 * 10^-R)^2 / (mean density).
BRIGGS_SCALE = 5.0


class ImageWeighting(Operation):
    """Compile-once weighting for one image geometry.

    Parameters
    ----------
    context
        ``pyopencl.Context``, ``CommandQueue`` or ``None`` (default device).
    npix_x, npix_y
        Image size in pixels (also the uv grid of the density).
    pixsize_x, pixsize_y
        Pixel size in radians.
    scheme
        ``'natural'``, ``'uniform'`` or ``'briggs'``.
    robust
        Briggs robustness ``R`` (only for ``'briggs'``).
    atomics
        Force a float atomic path (``'cas'``...) of the non-deterministic
        histogram; default the device's best.
    deterministic
        True (default): the histogram is exact fixed-point or summed in a
        fixed order (module docstring): bitwise-reproducible weights.
        False: float atomic adds (order varies in the last bits).
    method
        Force a histogram method (``'atomic'``, ``'fixed'``, ``'sorted'``;
        for tests and benchmarks); default from ``deterministic`` and the
        device.  In :attr:`histogram_method`.
    """

    def __init__(self, context=None, *, npix_x: int, npix_y: int, pixsize_x: float,
                 pixsize_y: float, scheme: str = "natural", robust: float = 0.0,
                 atomics: str | None = None, deterministic: bool = True,
                 method: str | None = None):
        super().__init__(context)
        if deterministic not in (True, False):
            raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
        self.scheme = _validated_scheme(scheme)
        self.npix_x, self.npix_y = _validated_npix(npix_x, npix_y)
        self.pixsize_x, self.pixsize_y = float(pixsize_x), float(pixsize_y)
        if not (np.isfinite(self.pixsize_x) and np.isfinite(self.pixsize_y)
                and self.pixsize_x > 0 and self.pixsize_y > 0):
            raise ValueError("pixel sizes must be positive and finite (radians)")
        self.robust = float(robust)
        if not np.isfinite(self.robust):
            raise ValueError("robust must be finite")
        self.coord_dtype = np.dtype(np.float64 if self.profile.fp64 else np.float32)
        self.histogram_method = self._method(deterministic, method)
        self.deterministic = self.histogram_method != "atomic"
        self._briggs_f2: float | None = None
        self._buffers: list[cl.Buffer] | None = None
        if self.scheme == "natural":
            return
        int64_atomics = _INT64_ATOMICS in self.profile.extensions
        self.template = KernelTemplate(
            self.queue, "imaging_weighting.cl.mako",
            {"coord": "double" if self.profile.fp64 else "float",
             "scheme": self.scheme, "int64_atomics": int64_atomics}, atomics=atomics)
        self._histogram_kernel = self.template.kernel("weight_histogram")
        self._apply_kernel = self.template.kernel("apply_weights")
        if self.histogram_method == "fixed":
            self._fixed_kernel = self.template.kernel("weight_histogram_fixed")
            self._fold_kernel = self.template.kernel("fixed_to_histogram")
            with quiet_builds():   # pyopencl builds its fill kernel for int64 here
                self._histogram_fixed = cla.zeros(self.queue, self.npix_x * self.npix_y,
                                                  np.int64)
        elif self.histogram_method == "sorted":
            self._keys_kernel = self.template.kernel("cell_keys")
            self._sums_kernel = self.template.kernel("cell_sums")
            self._sort = RadixSort(self.queue)
        self.histogram = cla.zeros(self.queue, (self.npix_x, self.npix_y), np.float32)
        self._outside = cla.zeros(self.queue, 1, np.uint32)
        self._outside_applied = cla.zeros(self.queue, 1, np.uint32)

    def _method(self, deterministic: bool, method: str | None) -> str:
        """The histogram method: forced, or the fastest deterministic one."""
        if method is not None:
            if method not in HISTOGRAM_METHODS:
                raise ValueError(f"method must be one of {HISTOGRAM_METHODS}, got {method!r}")
            if method == "atomic" and deterministic:
                raise ValueError("method='atomic' is not deterministic: pass deterministic=False")
            if method == "fixed" and _INT64_ATOMICS not in self.profile.extensions:
                raise ValueError(f"method='fixed' needs {_INT64_ATOMICS}, which "
                                 f"{self.profile.device_name!r} lacks")
            return method
        if not deterministic:
            return "atomic"
        fixed_bytes = 8 * self.npix_x * self.npix_y
        if (_INT64_ATOMICS in self.profile.extensions
                and fixed_bytes <= self.profile.max_alloc_bytes):
            return "fixed"
        return "sorted"

    # -- per-call -------------------------------------------------------------

    def reset(self) -> None:
        """Forget the samples added so far."""
        self._briggs_f2 = None
        if self.scheme != "natural":
            with quiet_builds():   # pyopencl builds its fill kernels on first use
                self.histogram.fill(0)
                self._outside.fill(0)
                self._outside_applied.fill(0)

    def add(self, uvw_m, freq_hz, weight) -> None:
        """Add one chunk's natural weights to the density histogram.

        Parameters
        ----------
        uvw_m
            (nrow, 3) baseline coordinates in metres.
        freq_hz
            (nchan,) channel frequencies.
        weight
            (nrow, nchan) non-negative natural weights (0: flagged).
        """
        if self.scheme == "natural":
            _validated_inputs(uvw_m, freq_hz, weight)
            return
        args = self._device_inputs(uvw_m, freq_hz, weight)
        self._briggs_f2 = None
        if self.histogram_method == "fixed":
            self._add_fixed(args)
        elif self.histogram_method == "sorted":
            self._add_sorted(args)
        else:
            self._launch(self._histogram_kernel, args, self.histogram.data, self._outside.data)

    def _add_fixed(self, args) -> None:
        """Histogram in exact 64-bit fixed point, folded into the float one."""
        weight_d = args[2]
        n_cells = self.npix_x * self.npix_y
        total = self._total(weight_d)
        if not total > 0:
            return
        exponent = _FIXED_POINT_BITS - math.ceil(math.log2(total))
        exponent = max(-120, min(120, exponent))   # 2^k and 2^-k normal in float32
        self._launch(self._fixed_kernel, args, np.float32(2.0 ** exponent),
                     self._histogram_fixed.data, self._outside.data)
        launch(self._fold_kernel, self.queue, (n_cells,), self._histogram_fixed.data,
               self.coord_dtype.type(2.0 ** -exponent), np.uint32(n_cells), self.histogram.data)

    def _total(self, weight_d: cla.Array) -> float:
        """Sum of a chunk's weights (a fixed-order device reduction)."""
        if weight_d.size == 0:
            return 0.0
        with quiet_builds():  # pyopencl builds its reduction kernel here
            return float(cla.sum(weight_d, dtype=self.coord_dtype).get())

    def _add_sorted(self, args) -> None:
        """Histogram in a fixed order: cell keys, stable sort, per-cell sums."""
        weight_d = args[2]
        n = int(weight_d.size)
        if n == 0:
            return
        keys, *scratch = self._sort_buffers(n)
        self._launch(self._keys_kernel, args, keys, self._outside.data)
        n_cells = self.npix_x * self.npix_y
        sorted_keys, order, _ = self._sort(keys, n, 0, n_cells, tuple(scratch))
        launch(self._sums_kernel, self.queue, (n,), sorted_keys, order, weight_d.data,
               np.uint32(n), np.uint32(n_cells), self.histogram.data)

    def apply(self, uvw_m, freq_hz, weight, wait: bool = True):
        """Imaging weights of one chunk (after :meth:`add` saw every chunk).

        Returns a host ``float32`` array when ``weight`` is a host array, a
        ``pyopencl.array.Array`` when it is one.
        """
        if self.scheme == "natural":
            uvw_m, freq_hz, weight = _validated_inputs(uvw_m, freq_hz, weight)
            return weight.astype(np.float32)
        args = self._device_inputs(uvw_m, freq_hz, weight)
        out = cla.empty(self.queue, args[2].shape, np.float32)
        event = self._launch(self._apply_kernel, args, self.histogram.data,
                             np.float32(self.briggs_f2()), out.data,
                             self._outside_applied.data)
        if wait:
            event.wait()
        return out if isinstance(weight, cla.Array) else out.get()

    def __call__(self, uvw_m, freq_hz, weight):
        """Weights of a set that fits in one chunk: reset, add, apply."""
        self.reset()
        self.add(uvw_m, freq_hz, weight)
        return self.apply(uvw_m, freq_hz, weight)

    def briggs_f2(self) -> float:
        """Briggs ``f^2`` of the samples added so far (0 unless Briggs)."""
        if self.scheme != "briggs":
            return 0.0
        if self._briggs_f2 is None:
            wide = np.float64 if self.profile.fp64 else np.float32
            with warnings.catch_warnings():  # pyopencl builds its reduction kernels here
                warnings.simplefilter("ignore", cl.CompilerWarning)
                sum_w = float(cla.sum(self.histogram, dtype=wide).get())
                sum_w2 = float(cla.dot(self.histogram, self.histogram, dtype=wide).get())
            if sum_w <= 0:
                raise ValueError("no sample with a positive weight on the grid")
            self._briggs_f2 = (BRIGGS_SCALE * 10.0 ** -self.robust) ** 2 / (sum_w2 / sum_w)
        return self._briggs_f2

    @property
    def n_outside(self) -> int:
        """Samples with a positive weight that :meth:`add` found off the grid
        (they get weight 0 from :meth:`apply`)."""
        return 0 if self.scheme == "natural" else int(self._outside.get()[0])

    # -- helpers --------------------------------------------------------------

    def _sort_buffers(self, n: int) -> list[cl.Buffer]:
        """Keys and the sort's three scratch buffers for ``n`` samples, kept
        between calls (fresh buffers cost their first touch every chunk)."""
        if self._buffers is None or self._buffers[0].size < 4 * n:
            self._buffers = [cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 4 * n)
                             for _ in range(4)]
        return self._buffers

    def _device_inputs(self, uvw_m, freq_hz, weight):
        if isinstance(weight, cla.Array):
            if weight.dtype != np.float32 or weight.ndim != 2:
                raise TypeError("a device weight array must be 2-D float32")
            uvw_h, freq_h, _ = _validated_inputs(uvw_m, freq_hz, np.zeros(weight.shape, np.float32))
            weight_d = weight
        else:
            uvw_h, freq_h, weight_h = _validated_inputs(uvw_m, freq_hz, weight)
            weight_d = cla.to_device(self.queue, np.ascontiguousarray(weight_h, np.float32))
        uvw_d = cla.to_device(self.queue, np.ascontiguousarray(uvw_h, self.coord_dtype))
        freq_d = cla.to_device(self.queue, np.ascontiguousarray(freq_h, self.coord_dtype))
        return uvw_d, freq_d, weight_d

    def _launch(self, kernel: cl.Kernel, args, *tail) -> cl.Event:
        uvw_d, freq_d, weight_d = args
        nrow, nchan = weight_d.shape
        if nrow * nchan == 0:
            return cl.enqueue_marker(self.queue)
        u_scale = self.coord_dtype.type(self.npix_x * self.pixsize_x / SPEED_OF_LIGHT)
        v_scale = self.coord_dtype.type(self.npix_y * self.pixsize_y / SPEED_OF_LIGHT)
        return launch(kernel, self.queue, (nrow * nchan,), uvw_d.data, freq_d.data,
                      weight_d.data, np.uint32(nrow), np.uint32(nchan), u_scale, v_scale,
                      np.int32(self.npix_x), np.int32(self.npix_y), *tail)


def _validated_scheme(scheme: str) -> str:
    scheme = str(scheme).lower()
    if scheme == "robust":
        scheme = "briggs"
    if scheme not in SCHEMES:
        raise ValueError(f"unknown weighting {scheme!r}; expected one of {SCHEMES}")
    return scheme


def _validated_npix(npix_x: int, npix_y: int) -> tuple[int, int]:
    """:func:`clgrid.core.plan.check_npix`, and 32-bit cell indices."""
    npix_x, npix_y = check_npix(npix_x, npix_y)
    if npix_x * npix_y >= 2**31:
        raise ValueError("uv grid too large for 32-bit cell indices")
    return npix_x, npix_y


def _validated_inputs(uvw_m, freq_hz, weight):
    uvw_m = np.asarray(uvw_m, np.float64)
    freq_hz = np.asarray(freq_hz, np.float64)
    weight = np.asarray(weight)
    if uvw_m.ndim != 2 or uvw_m.shape[1] != 3:
        raise ValueError(f"uvw_m must be (nrow, 3), got {uvw_m.shape}")
    if freq_hz.ndim != 1:
        raise ValueError(f"freq_hz must be 1-D, got {freq_hz.shape}")
    if weight.shape != (uvw_m.shape[0], freq_hz.size):
        raise ValueError(f"weight must be (nrow, nchan) = {(uvw_m.shape[0], freq_hz.size)}, "
                         f"got {weight.shape}")
    if weight.dtype.kind not in "fiu":
        raise TypeError(f"weight must be real, got {weight.dtype}")
    if not (np.all(np.isfinite(uvw_m)) and np.all(np.isfinite(freq_hz))
            and np.all(np.isfinite(weight))):
        raise ValueError("uvw_m, freq_hz or weight contain NaN or Inf")
    if np.any(weight < 0):
        raise ValueError("weights must be non-negative (0 marks a flagged sample)")
    if np.any(freq_hz <= 0):
        raise ValueError("frequencies must be positive")
    if uvw_m.shape[0] * freq_hz.size >= 2**32:
        raise ValueError("chunk too large: split it into fewer than 2**32 samples")
    return uvw_m, freq_hz, weight


__all__ = ["BRIGGS_SCALE", "HISTOGRAM_METHODS", "ImageWeighting", "SCHEMES"]

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

Method: the exponential-of-semicircle kernel (:mod:`clgrid.core.eskernel`) is
evaluated on the fly while gridding onto a grid padded by ``sigma``; with
``do_wgridding`` the visibilities are also spread over w planes with the same
kernel (W-stacking with a kernel in w, Arras et al. 2021), each plane is
transformed and multiplied by its phase screen, and the sum is corrected by
the kernel's Fourier transform in u, v and w.  The work is done by the
gridding core (:mod:`clgrid.core`): this module validates ducc0-style
arguments, moves host arrays to and from the device and counts what it
leaves out.  Results are bit-reproducible: the core uses no float atomics.

The exact direct-Fourier references the tests compare with are in
:mod:`clgrid.imaging.reference`.  This module is above 400 lines because
:class:`Imager` is one compile-once object with both directions, the
host/device moves and the counts of what was left out.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import threading
from typing import Callable
import warnings

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools
from pyopencl.elementwise import ElementwiseKernel
from pyopencl.reduction import ReductionKernel

from ..core.engine import workspace_budget
from ..core.strategies import imaging_engine
from ..core.plan import (ROWS_IN_PARTS, GridLayout, ImageGeometry, check_allocation,
                         check_freq, check_uvw, precision_of)
from ..core.setpoints import needs_float_float, positions_to_device
from ..core.trace import StageTrace, stage
from ..core.transfer import Uploader, device_array
from ..device import plancache
from ..device.hostio import any_nonfinite, own_copy, same_bits, same_bits_later
from ..device.profiles import DeviceProfile, context_of, resolve_queue
from ..device.kernels import Operation, quiet_builds


# pyopencl reduction/elementwise kernels by (context, dtype, what): their
# kernel objects hold arguments, so every call enqueues under the lock
_reductions: dict[tuple, object] = {}
_reductions_lock = threading.RLock()


def _count_kernel(context: cl.Context, dtype: np.dtype, what: str) -> ReductionKernel:
    """Device count of non-finite complex/real values, or of zero mask entries."""
    key = (context.int_ptr, dtype.str, what)
    with _reductions_lock:
        kernel = _reductions.get(key)
        if kernel is None:
            if what == "zero":
                expr, arg = "x[i] == 0 ? 1 : 0", "const unsigned char *x"
            elif dtype.kind == "c":
                ctype = "float" if dtype == np.complex64 else "double"
                expr = "(isfinite(x[i].x) && isfinite(x[i].y)) ? 0 : 1"
                arg = f"const {ctype}2 *x"
            else:
                ctype = "float" if dtype == np.float32 else "double"
                expr, arg = "isfinite(x[i]) ? 0 : 1", f"const {ctype} *x"
            wide = dtype in (np.complex128, np.float64)
            preamble = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if wide else ""
            with quiet_builds():
                kernel = ReductionKernel(context, np.int64, neutral="0", reduce_expr="a+b",
                                         map_expr=expr, arguments=arg, preamble=preamble)
            _reductions[key] = kernel
    return kernel


def _device_count(queue: cl.CommandQueue, array: cla.Array, what: str,
                  allocator: cl_tools.MemoryPool) -> int:
    """Count of ``what`` in ``array``.  The reduction's scratch comes from
    ``allocator``, a pool that keeps its buffers: NVIDIA's runtime releases
    a buffer only once the queue's earlier work is done, and pyopencl holds
    the GIL while it does, so a freed scratch buffer stopped every other
    host thread (another device's uploads) until this device's gridding
    had finished (benchmarks/RESULTS.md, "the GIL held by a buffer release")."""
    return _device_count_later(queue, array, what, allocator)()


def _device_count_later(queue: cl.CommandQueue, array: cla.Array, what: str,
                        allocator: cl_tools.MemoryPool) -> Callable[[], int]:
    """:func:`_device_count` enqueued: the returned function reads the count
    (waiting for it), so that the host need not wait before enqueueing
    the work after it."""
    if array.size == 0:
        return lambda: 0
    flat = array.reshape(array.size) if array.flags.c_contiguous else array
    kernel = _count_kernel(queue.context, array.dtype, what)
    # one ReductionKernel per context: its kernel objects hold the arguments
    # from set_args to enqueue, so two threads must not enqueue at once
    with _reductions_lock:
        count_d = kernel(flat, queue=queue, allocator=allocator)
    return lambda: int(count_d.get())


def _used_nonfinite(queue: cl.CommandQueue, array_d: cla.Array, wgt_d: cla.Array | None,
                    mask_d: cla.Array | None) -> int:
    """Non-finite entries of ``array_d`` (row, chan[, pol]) whose visibility
    is used: weight (``wgt_d``, row x chan) and mask not 0."""
    dtype = array_d.dtype
    real = "double" if dtype in (np.complex128, np.float64) else "float"
    value = (f"(isfinite(x[i].x) && isfinite(x[i].y))" if dtype.kind == "c"
             else "isfinite(x[i])")
    key = (context_of(queue).int_ptr, dtype.str, "used", wgt_d is not None, mask_d is not None)
    per_weight = array_d.size // max(array_d.shape[0] * array_d.shape[1], 1)
    with _reductions_lock:
        kernel = _reductions.get(key)
        if kernel is None:
            preamble = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if real == "double" \
                else ""
            xtype = f"{real}2" if dtype.kind == "c" else real
            used = " && ".join(["1"] + (["w[i / k] != 0"] if wgt_d is not None else [])
                               + (["m[i / k] != 0"] if mask_d is not None else []))
            with quiet_builds():
                kernel = ReductionKernel(
                    context_of(queue), np.int64, neutral="0", reduce_expr="a+b",
                    map_expr=f"(!{value} && {used}) ? 1 : 0", preamble=preamble,
                    arguments=f"const {xtype} *x, const {real} *w, const uchar *m, long k")
            _reductions[key] = kernel
        dummy_w = wgt_d if wgt_d is not None else cla.empty(
            queue, 1, np.float64 if real == "double" else np.float32)
        dummy_m = mask_d if mask_d is not None else cla.empty(queue, 1, np.uint8)
        count_d = kernel(array_d.reshape(array_d.size), dummy_w.reshape(dummy_w.size),
                         dummy_m.reshape(dummy_m.size), np.int64(per_weight), queue=queue)
    return int(count_d.get())


def _finite_copy(queue: cl.CommandQueue, array_d: cla.Array) -> cla.Array:
    """A copy of ``array_d`` with every non-finite real or imaginary part 0."""
    real = np.dtype(np.float64 if array_d.dtype in (np.complex128, np.float64) else np.float32)
    ctype = "double" if real == np.float64 else "float"
    key = (context_of(queue).int_ptr, real.str, "zero")
    out = array_d.copy(queue=queue)
    parts = out.reshape(out.size).view(real)
    with _reductions_lock:
        kernel = _reductions.get(key)
        if kernel is None:
            preamble = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" \
                else ""
            with quiet_builds():
                kernel = ElementwiseKernel(context_of(queue), f"{ctype} *y",
                                           "if (!isfinite(y[i])) y[i] = 0", preamble=preamble)
            _reductions[key] = kernel
        kernel(parts, queue=queue)
    return out


def _retried(method: Callable) -> Callable:
    """An :class:`Imager` call tried once more where a device allocation
    failed, after the device's cached plans and its engines' second plans
    (kept for speed: :meth:`clgrid.core.engine.Engine.plan_for`) are given
    back; a second failure is a :class:`MemoryError` that says what to
    change (:func:`clgrid.device.plancache.retry_after_freeing`), not a raw
    driver error."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        return plancache.retry_after_freeing(
            lambda: method(self, *args, **kwargs), plancache.plans,
            [self.queue.device.int_ptr], what=f"this {method.__name__} call")
    return call


class Imager(Operation):
    """Compile-once gridder/degridder for one observation and image geometry.

    Thread-safe: share one between threads; each call leases its own scratch
    (:meth:`clgrid.core.engine.Engine.lease`), the plan is shared.

    Parameters
    ----------
    context
        :class:`pyopencl.Context`, :class:`pyopencl.CommandQueue` or None.
    uvw
        (nrow, 3) baseline coordinates in metres (uploaded once); nrow may be 0.
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
    geometry
        A :class:`clgrid.core.plan.ImageGeometry` made (and validated) already,
        in place of the keywords above (``npix_x`` ... ``epsilon`` must then be
        left out; the others are not read): how the functional API, several
        devices and Dask hand their one geometry down.
    fft_backend
        ``'pyvkfft'`` (VkFFT), ``'reikna'``, ``'host'`` (the buffer mapped and
        transformed by scipy.fft) or ``'numpy'`` (copied to the host and
        back); default the first that imports and plans, in the device's
        order (:func:`clgrid.core.fft.backend_order`).
    tiles
        :class:`clgrid.core.plan.TileShape` of the spreader; default from the device.
    vis_per_block
        Visibilities per row block (GPUs: each block's upload overlaps the
        spreading of the one before); default from the device
        (:func:`clgrid.core.plan.row_blocks`).
    layout, planes
        For pieces of a larger job (several devices, Dask): the
        :class:`clgrid.core.plan.GridLayout` of the whole observation, and the
        ``(first, stop)`` w planes this piece grids.
    plane_rows
        With ``planes``: ``{end plane: (first row, stop row)}`` where this
        piece shares its first or last plane with another by rows
        (:class:`clgrid.core.image.ImageStage`; not with the CPU vector tile).

    ``clgrid.Imager`` (:class:`clgrid.scaleout.entry.Imager`) is this class
    that also takes ``contexts=`` (several devices) instead of ``context``.

    Attributes
    ----------
    engine
        The :class:`clgrid.core.engine.Engine` doing the work
        (:func:`clgrid.core.strategies.imaging_engine`).
    last_counts
        Of the last call: ``n_vis``, ``invalid_uvw`` (non-finite uvw, left
        out), ``flagged`` (mask 0).
    """

    def __init__(self, context=None, *, uvw, freq, npix_x: int | None = None,
                 npix_y: int | None = None, pixsize_x: float | None = None,
                 pixsize_y: float | None = None, epsilon: float | None = None,
                 do_wgridding: bool = False, precision: str = "single", flip_u: bool = False,
                 flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
                 sigma_min: float = ImageGeometry.sigma_min,
                 sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                 center_y: float = 0.0, double_precision_accumulation: bool = False,
                 geometry: ImageGeometry | None = None, fft_backend: str | None = None,
                 layout: GridLayout | None = None, planes: tuple[int, int] | None = None,
                 tiles=None, vis_per_block: int | None = None,
                 plane_rows: dict[int, tuple[int, int]] | None = None):
        super().__init__(context)
        self.geometry = geometry = ImageGeometry.given(
            geometry,
            npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
            epsilon=epsilon, do_wgridding=do_wgridding, precision=precision,
            flip_u=flip_u, flip_v=flip_v, flip_w=flip_w, divide_by_n=divide_by_n,
            sigma_min=sigma_min, sigma_max=sigma_max, center_x=center_x,
            center_y=center_y, double_precision_accumulation=double_precision_accumulation)
        #: No fp64 on the device (single precision only): positions and
        #: phases in float-float (:func:`clgrid.core.setpoints.float_float`).
        self.float_float = needs_float_float(self.queue, self.geometry)
        uvw_m = check_uvw(uvw, allow_empty=True)
        self.uvw_m = own_copy(uvw_m, uvw)
        self.freq_hz = check_freq(freq)
        self.layout = layout if layout is not None else GridLayout.of_rows(
            self.geometry, self.uvw_m, self.freq_hz)
        # what one thread's last call left: its counts, its image copies
        self._per_thread = threading.local()
        self.engine = None
        self._empty_uploader: Uploader | None = None
        if self.n_rows:
            uvw_d = positions_to_device(self.queue, self.uvw_m, self.float_float)
            self.engine = imaging_engine(self.queue, self.geometry, self.layout, uvw_d,
                                         self.freq_hz, planes, fft_backend, tiles,
                                         vis_per_block, plane_rows)
        else:
            self._empty_uploader = Uploader(self.queue)

    # ------------------------------------------------------------ per call
    @property
    def last_counts(self) -> dict[str, int]:
        """Of this thread's last call: ``n_vis``, ``invalid_uvw`` (non-finite
        uvw, left out), ``flagged`` (mask 0)."""
        return getattr(self._per_thread, "counts", {})

    @last_counts.setter
    def last_counts(self, counts: dict[str, int]) -> None:
        self._per_thread.counts = counts

    @property
    def uploader(self) -> Uploader:
        """The uploader of the primary workspace (single-threaded callers,
        several devices' shards)."""
        return self.engine.primary.uploader if self.engine is not None else self._empty_uploader

    @uploader.setter
    def uploader(self, uploader: Uploader) -> None:
        # tests force the GPU path (pinned staging) on CPUs through this
        if self.engine is not None:
            self.engine.primary.uploader = uploader
        else:
            self._empty_uploader = uploader

    @property
    def trace(self) -> StageTrace | None:
        """Host times of the steps of later calls (:class:`clgrid.core.trace.StageTrace`:
        block uploads waited for, FFT, correction, checks, counts, downloads),
        or None (the default: nothing recorded)."""
        return self.engine.trace if self.engine is not None else None

    @trace.setter
    def trace(self, trace: StageTrace | None) -> None:
        if self.engine is not None:
            self.engine.trace = trace

    @contextlib.contextmanager
    def _lease(self, queue: cl.CommandQueue | None):
        """The workspace of one call (:meth:`clgrid.core.engine.Engine.lease`); a stand-in
        with this imager's uploader where there are no rows."""
        if self.engine is None:
            yield _NoRows(self.queue, self._empty_uploader)
            return
        with self.engine.lease(queue) as ws:
            yield ws

    # ------------------------------------------------------------ properties
    @property
    def n_rows(self) -> int:
        return self.uvw_m.shape[0]

    @property
    def n_chan(self) -> int:
        return self.freq_hz.shape[0]

    @property
    def npix_x(self) -> int:
        return self.geometry.npix_x

    @property
    def npix_y(self) -> int:
        return self.geometry.npix_y

    @property
    def vis_real(self) -> np.dtype:
        return self.geometry.vis_real

    @property
    def grid_real(self) -> np.dtype:
        return self.geometry.grid_real

    @property
    def vis_complex(self) -> np.dtype:
        return np.dtype(np.complex64 if self.vis_real == np.float32 else np.complex128)

    @property
    def kernel_choice(self):
        return self.layout.choice

    @property
    def nu(self) -> int:
        return self.layout.nu

    @property
    def nv(self) -> int:
        return self.layout.nv

    @property
    def n_planes(self) -> int:
        return self.layout.n_planes

    # ------------------------------------------------------------ inputs
    def _check_vis(self, vis) -> int:
        """``vis``'s polarisation count, after checking its shape and kind."""
        shape = vis.shape
        if len(shape) not in (2, 3) or tuple(shape[:2]) != (self.n_rows, self.n_chan):
            raise ValueError(f"vis must be (nrow, nchan[, npol]) = ({self.n_rows}, "
                             f"{self.n_chan}[, npol]), got {tuple(shape)}")
        if isinstance(vis, cla.Array):
            device_array(self.queue, vis, shape, self.vis_complex, "vis")
        elif vis.dtype.kind != "c":
            raise TypeError(f"vis must be complex, got {vis.dtype}")
        npol = 1 if len(shape) == 2 else shape[2]
        if npol < 1:
            raise ValueError(f"vis has no polarisation (shape {tuple(shape)}): give "
                             "(nrow, nchan) or (nrow, nchan, npol) with npol >= 1")
        if not isinstance(vis, cla.Array):
            check_allocation(self.profile,
                             self.n_rows * self.n_chan * npol * self.vis_complex.itemsize,
                             "vis needs {size} in one device buffer", ROWS_IN_PARTS)
        return npol

    def _check_weights(self, wgt, mask) -> tuple:
        """``wgt`` and ``mask`` checked: device arrays as they are, host ones
        as numpy (a mask as 0/1 bytes)."""
        shape = (self.n_rows, self.n_chan)
        if isinstance(wgt, cla.Array):
            device_array(self.queue, wgt, shape, self.vis_real, "wgt")
        elif wgt is not None:
            wgt = np.asarray(wgt)
            if wgt.shape != shape:
                raise ValueError(f"wgt must have shape {shape}, got {wgt.shape}")
        if isinstance(mask, cla.Array):
            device_array(self.queue, mask, shape, np.uint8, "mask")
        elif mask is not None:
            mask = np.asarray(mask)
            if mask.shape != shape:
                raise ValueError(f"mask must have shape {shape}, got {mask.shape}")
            # a boolean mask is already 0/1 bytes: no pass over it
            mask = mask.view(np.uint8) if mask.dtype == bool else mask != 0
        return wgt, mask

    def _inputs(self, ws, vis, wgt, mask, in_blocks: bool = True,
                counted: bool = False) -> tuple[dict, object, list]:
        """Device arrays of the checked inputs (``vis`` may be None), ``ready``
        for the engine (with ``in_blocks``, host arrays are sent in row blocks
        beside the spreading, on GPUs) and the (name, array) pairs still to
        be checked for NaN/Inf once sent (all of them where the spread
        counts them, ``counted``: :meth:`_spread_counts_nonfinite`)."""
        wanted = {"vis": (vis, self.vis_complex), "wgt": (wgt, self.vis_real),
                  "mask": (mask, np.uint8)}
        host = {name: (array, dtype) for name, (array, dtype) in wanted.items()
                if not isinstance(array, cla.Array)}
        # nothing to send: one block, no ready (a resident call, Engine.plan_for)
        sent = any(array is not None for array, _ in host.values())
        blocks = ([(b.first, b.stop) for b in self.engine.blocks]
                  if self.engine is not None and in_blocks and sent else [(0, self.n_rows)])
        arrays, ready = ws.uploader.rows_to_device(host, blocks)
        arrays.update({name: array for name, (array, _) in wanted.items()
                       if isinstance(array, cla.Array)})
        checks = [(name, arrays[name]) for name in ("vis", "wgt") if arrays[name] is not None]
        if ready is None and not ws.uploader.pinned:
            # CPU devices read the host arrays themselves: a host pass finds
            # them finite sooner than the device's count and its wait
            with stage(self.trace, "finite"):
                checks = [(name, array_d) for name, array_d in checks
                          if name not in host or any_nonfinite(host[name][0])]
        if ready is None and not counted:
            self._check_finite(ws, checks, arrays)
            checks = []
        return arrays, ready, checks

    def _spread_counts_nonfinite(self, ws) -> bool:
        """Whether this call's spread counts the NaN/Inf visibilities and
        weights (:attr:`clgrid.core.spread.Spreader.counts_nonfinite`) of
        every visibility: only where each one is a gridded point (no uvw left
        out), so that the count sees all that the device's count would."""
        return (self.engine is not None and self.engine.plan.n_invalid == 0
                and ws.spreader.counts_nonfinite)

    def _check_finite(self, ws, checks: list, arrays: dict) -> bool:
        """Refuse NaN/Inf in a visibility or weight that is used; one in a
        visibility with mask 0 or weight 0 is ignored, as ducc0 does: its
        array is replaced in ``arrays`` by a copy with those values zeroed
        (the spread multiplies by the weight, and NaN x 0 is NaN).  Returns
        whether any array was replaced."""
        replaced = False
        for name, array_d in checks:
            with stage(self.trace, "finite"):
                nonfinite = _device_count(ws.queue, array_d, "nonfinite", ws.scratch)
            if not nonfinite:
                continue
            used = _used_nonfinite(ws.queue, array_d, arrays["wgt"] if name == "vis" else None,
                                   arrays["mask"])
            if used:
                raise ValueError(f"{name} contains NaN or Inf in {used} visibilities that "
                                 "are used (mask and weight not 0)")
            arrays[name] = _finite_copy(ws.queue, array_d)
            replaced = True
        return replaced

    def _count(self, ws, mask_d: cla.Array | None) -> None:
        n_invalid = self.engine.plan.n_invalid
        with stage(self.trace, "count"):
            flagged = (_device_count(ws.queue, mask_d, "zero", ws.scratch)
                       if mask_d is not None else 0)
        self.last_counts = {"n_vis": self.n_rows * self.n_chan, "invalid_uvw": n_invalid,
                            "flagged": flagged}
        if n_invalid:
            warnings.warn(f"{n_invalid} of {self.n_rows * self.n_chan} visibilities "
                          "have non-finite uvw and were left out", RuntimeWarning, stacklevel=3)

    # ------------------------------------------------------------ vis2dirty
    @_retried
    def vis2dirty_device(self, vis, wgt=None, mask=None,
                         queue: cl.CommandQueue | None = None) -> cla.Array:
        """Dirty images on the device: (npol, npix_x, npix_y) in grid precision.

        ``vis``, ``wgt`` and ``mask`` may be numpy arrays or
        ``pyopencl.array.Array`` s on this imager's context (used without a
        copy: complex of the imager's precision, ``vis_real`` weights,
        uint8 mask).  On GPUs, host arrays are sent in row blocks while the
        blocks before are being gridded; with every array on the device
        already the call grids one row block (``Engine.plan_for``: a second
        plan, made once, where it fits).  ``queue``: the caller's queue on
        this imager's context and device (default the imager's); the result
        is ready in its order.  Safe to call from several threads at once
        (each call leases its own scratch).
        """
        with self._lease(queue) as ws:
            return self._vis2dirty_in(ws, vis, wgt, mask)

    def _vis2dirty_in(self, ws, vis, wgt, mask) -> cla.Array:
        npol = self._check_vis(vis)
        wgt, mask = self._check_weights(wgt, mask)
        g = self.geometry
        ws.uploader.settle()   # host copies lent to an earlier call are free again
        counted = self._spread_counts_nonfinite(ws)
        arrays, ready, checks = self._inputs(ws, vis, wgt, mask, counted=counted)
        if self.engine is None:
            self.last_counts = {"n_vis": 0, "invalid_uvw": 0, "flagged": 0}
            return cla.zeros(ws.queue, (npol, g.npix_x, g.npix_y), g.grid_real)
        if counted:
            ws.spreader.reset_nonfinite()
        # visibilities on the device already: the plan of one row block
        resident = ready is None
        dirty_d = self._grid(ws, arrays, npol, ready, resident)
        # where the spread counted none, nothing needs a second look
        if checks and counted and not ws.spreader.nonfinite_later()():
            checks = []
        if checks and self._check_finite(ws, checks, arrays):
            # NaN/Inf in unused visibilities came with the row blocks: grid
            # again without them (rare; the arrays are on the device now)
            dirty_d = self._grid(ws, arrays, npol, None, resident)
        self._count(ws, arrays["mask"])
        ws.uploader.settle()
        return dirty_d

    def _grid(self, ws, arrays: dict, npol: int, ready, resident: bool) -> cla.Array:
        """The (npol, npix_x, npix_y) dirty images of the device ``arrays``
        (``resident``: they were on the device before the call)."""
        g = self.geometry
        dirty_d = None
        images = []   # freed once the queue is done (see _device_count)
        for pol in range(npol):
            image_d = self.engine.image.vis2dirty(arrays["vis"], npol, pol, arrays["wgt"],
                                                  arrays["mask"], ready, ws=ws,
                                                  resident=resident)
            ready = None
            if npol == 1:   # the engine's image is the result: no copy
                return image_d.reshape((1,) + image_d.shape)
            if dirty_d is None:
                dirty_d = cla.empty(ws.queue, (npol, g.npix_x, g.npix_y), g.grid_real)
            cl.enqueue_copy(ws.queue, dirty_d.data, image_d.data,
                            dst_offset=pol * image_d.nbytes, byte_count=image_d.nbytes)
            images.append(image_d)
        return dirty_d

    @_retried
    def vis2dirty(self, vis, wgt=None, mask=None, dirty=None,
                  queue: cl.CommandQueue | None = None) -> np.ndarray:
        """Dirty image(s) of ``vis``.

        Parameters
        ----------
        vis
            (nrow, nchan) or (nrow, nchan, npol) complex, numpy or device array.
        wgt, mask
            Optional (nrow, nchan) weights and flags (mask 0 drops a visibility).
        dirty
            Optional output numpy array of the result's shape and dtype.
        queue
            The caller's queue (see :meth:`vis2dirty_device`).

        Returns
        -------
        numpy.ndarray
            (npix_x, npix_y), or (npol, npix_x, npix_y) for 3-D ``vis``.
        """
        with self._lease(queue) as ws:
            dirty_d = self._vis2dirty_in(ws, vis, wgt, mask)
            shape = dirty_d.shape[1:] if len(vis.shape) == 2 else dirty_d.shape
            return self._to_caller(ws, dirty_d, dirty, shape, self.vis_real)

    # ------------------------------------------------------------ grids, for sums
    def grid_only(self, vis, wgt=None, mask=None, on_device: bool = False):
        """The (npol, nu, nv) uv grids of ``vis`` before the FFT, for a sum over
        several imagers of one layout (devices, Dask chunks) that
        :meth:`grids_to_dirty` finishes.  No w-gridding (each w plane needs an
        FFT of its own).  numpy, or with ``on_device`` a device array on this
        imager's queue."""
        if self.geometry.do_w:
            raise ValueError("grid_only needs do_wgridding=False: each w plane has its own FFT")
        npol = self._check_vis(vis)
        with self._lease(None) as ws:
            ws.uploader.settle()
            arrays, ready, checks = self._inputs(ws, vis, *self._check_weights(wgt, mask))
            shape = (npol, self.nu, self.nv)
            grid_complex = self.engine.image.grid_complex
            grids = (cla.empty(ws.queue, shape, grid_complex) if on_device
                     else np.empty(shape, grid_complex))
            self._spread_into(ws, arrays, npol, ready, grids)
            if checks and self._check_finite(ws, checks, arrays):
                # NaN/Inf in unused visibilities came with the row blocks: again without them
                self._spread_into(ws, arrays, npol, None, grids)
            ws.uploader.settle()
            ws.queue.finish()
        return grids

    def _spread_into(self, ws, arrays: dict, npol: int, ready, grids) -> None:
        """Each polarisation's one plane (no w) into ``grids``."""
        for pol in range(npol):
            planes_d = self.engine.image.grid_pass(arrays["vis"], npol, pol, 0, 1,
                                                   arrays["wgt"], arrays["mask"], ready, ws)
            ready = None
            plane_bytes = grids[0].nbytes
            if isinstance(grids, cla.Array):
                cl.enqueue_copy(ws.queue, grids.data, planes_d.data, byte_count=plane_bytes,
                                dst_offset=pol * plane_bytes)
            else:
                cl.enqueue_copy(ws.queue, grids[pol], planes_d.data)   # no w: one plane

    def grids_to_dirty(self, grids) -> np.ndarray:
        """(npol, npix_x, npix_y) dirty images of summed uv ``grids`` of
        :meth:`grid_only` ((npol, nu, nv), numpy or a device array on this
        imager's context): the FFT and grid correction."""
        images = np.empty((grids.shape[0], self.npix_x, self.npix_y), self.vis_real)
        with self.engine.lease() as ws:
            for pol in range(grids.shape[0]):
                image = cla.empty(ws.queue, (self.npix_x, self.npix_y), self.grid_real)
                self.engine.image.grid_to_dirty(grids, pol, image, ws=ws)
                images[pol] = image.get(queue=ws.queue)
        return images

    def _to_caller(self, ws, array_d: cla.Array, out, shape: tuple, dtype) -> np.ndarray:
        """``array_d`` on the host as ``shape`` and ``dtype``: downloaded
        straight into the caller's ``out`` where it fits (that dtype,
        C-contiguous, as many items), else copied into it, else a new array."""
        if (out is not None and out.dtype == array_d.dtype and out.flags.c_contiguous
                and out.size == array_d.size):
            with stage(self.trace, "to_host"):
                ws.uploader.to_host(array_d, out=out.reshape(array_d.shape))
            return out
        with stage(self.trace, "to_host"):
            host = ws.uploader.to_host(array_d)
        result = host.astype(dtype, copy=False).reshape(shape)
        if out is None:
            return result
        out[...] = result
        return out

    # ------------------------------------------------------------ dirty2vis
    def _dirty_to_device(self, ws, dirty) -> tuple[cla.Array, Callable[[], None]]:
        """``dirty`` on the device as (npol, npix_x, npix_y), and its check
        for NaN/Inf (a ValueError), enqueued here and made by the returned
        function (so that the host need not wait for the upload before
        enqueueing the work after it)."""
        shape = tuple(dirty.shape)
        squeeze = len(shape) == 2
        if len(shape) not in (2, 3) or shape[-2:] != (self.npix_x, self.npix_y):
            raise ValueError(f"dirty must be ({self.npix_x}, {self.npix_y}) or "
                             f"(npol, {self.npix_x}, {self.npix_y}), got {shape}")
        full = shape if not squeeze else (1,) + shape
        if isinstance(dirty, cla.Array):
            dirty_d = device_array(self.queue, dirty, shape, self.grid_real, "dirty")
            dirty_d = dirty_d.reshape(full)
        else:
            dirty_d = ws.uploader.to_device(np.asarray(dirty).reshape(full), self.grid_real)
        nonfinite = _device_count_later(ws.queue, dirty_d, "nonfinite", ws.scratch)

        def check() -> None:
            if nonfinite():
                raise ValueError("dirty contains NaN or Inf")
        return dirty_d, check

    @_retried
    def dirty2vis_device(self, dirty, wgt=None, mask=None, into: np.ndarray | None = None,
                         downloads: list | None = None,
                         queue: cl.CommandQueue | None = None) -> cla.Array:
        """Visibilities on the device: (nrow, nchan, npol) complex.  For
        npol > 1 the image's per-polarisation copies stay on the device until
        :meth:`release_planes` or this thread's next call.  ``into``: pinned
        host memory of that shape (:meth:`clgrid.core.transfer.Uploader.pinned_target`)
        into which each row block comes down as soon as it is final, beside
        the device work on the rest; the copies' events go to ``downloads``
        (wait for them).  ``queue``: as for :meth:`vis2dirty_device`."""
        with self._lease(queue) as ws:
            return self._dirty2vis_in(ws, dirty, wgt, mask, into, downloads)

    def _dirty2vis_in(self, ws, dirty, wgt, mask, into, downloads,
                      checked: list | None = None) -> cla.Array:
        """dirty2vis on the device; ``checked``: a list to put the image's
        NaN/Inf check in (:meth:`_dirty_to_device`) for the
        caller to make before it hands anything out, else made here."""
        ws.uploader.settle()   # host copies lent to an earlier call are free again
        dirty_d, check = self._dirty_to_device(ws, dirty)
        if checked is None:
            check()
        else:
            checked.append(check)
        wgt, mask = self._check_weights(wgt, mask)
        npol = dirty_d.shape[0]
        arrays, _, _ = self._inputs(ws, None, wgt, mask, in_blocks=False)
        if self.engine is None:
            self.last_counts = {"n_vis": 0, "invalid_uvw": 0, "flagged": 0}
            return cla.zeros(ws.queue, (0, self.n_chan, npol), self.vis_complex)
        self._count(ws, arrays["mask"])
        # kept until the results are on the host (release_planes) or the next
        # call: freeing them now would wait for the queue holding the GIL on
        # NVIDIA (see _device_count)
        planes = self._per_thread.planes = _planes_of(dirty_d)
        block_done = None
        if into is not None:
            if downloads is None:
                raise ValueError("dirty2vis_device(into=...) needs downloads=[] for the "
                                 "copies' events")

            def block_done(out_d, block, event):
                downloads.append(ws.uploader.rows_to_pinned(
                    out_d, into, block.first, block.stop, [event]))
        out_d = self.engine.image.dirty2vis(planes, arrays["wgt"], arrays["mask"], block_done,
                                            ws=ws)
        ws.uploader.settle()
        return out_d.reshape(self.n_rows, self.n_chan, npol)

    def release_planes(self) -> None:
        """Free the per-polarisation image copies of this thread's last
        :meth:`dirty2vis_device` (npol > 1), once its results are read: they
        are kept past the call so that freeing them does not wait for the
        queue (see :func:`_device_count`)."""
        self._per_thread.planes = []

    @_retried
    def dirty2vis(self, dirty, wgt=None, mask=None, vis=None,
                  queue: cl.CommandQueue | None = None) -> np.ndarray:
        """Visibilities predicted from ``dirty`` (the adjoint of :meth:`vis2dirty`).

        Parameters
        ----------
        dirty
            (npix_x, npix_y) or (npol, npix_x, npix_y) real image (numpy or device).
        wgt, mask
            Optional (nrow, nchan) weights and flags applied to the output.
        vis
            Optional output numpy array of the result's shape; of its dtype
            and C-contiguous, the visibilities are downloaded straight into
            it (a major cycle's repeated calls then touch no fresh memory).
        queue
            The caller's queue (see :meth:`vis2dirty_device`).

        Returns
        -------
        numpy.ndarray
            (nrow, nchan) or (nrow, nchan, npol) complex of the image's precision.
        """
        npol = dirty.shape[0] if len(dirty.shape) == 3 else 1
        shape = (self.n_rows, self.n_chan) + ((npol,) if len(dirty.shape) == 3 else ())
        if vis is not None and tuple(vis.shape) != shape:
            raise ValueError(f"vis must have shape {shape}, got {vis.shape}")
        with self._lease(queue) as ws:
            # GPUs: rows come down into pinned memory as they are finished
            into = (ws.uploader.pinned_target(vis, (self.n_rows, self.n_chan, npol),
                                              self.vis_complex)
                    if self.engine is not None else None)
            downloads: list = []
            # where no array of the caller's is written, the image's NaN
            # check is read after the work is enqueued (a wait for the upload
            # and a read back, 1 ms of a 26 ms call on an H100, before)
            checked = [] if vis is None and into is not None else None
            vis_d = self._dirty2vis_in(ws, dirty, wgt, mask, into, downloads, checked)
            if into is not None:
                cl.wait_for_events(downloads) if downloads else None
                for check in checked or ():
                    check()
                result = vis if vis is not None else into.reshape(shape)
            else:
                result = self._to_caller(ws, vis_d, vis, shape, vis_d.dtype)
            self.release_planes()
        return result


class _NoRows:
    """The workspace of an imager without rows: its queue and uploader."""

    def __init__(self, queue: cl.CommandQueue, uploader: Uploader):
        self.queue, self.uploader = queue, uploader
        self.scratch = None


def _planes_of(stack_d: cla.Array) -> list[cla.Array]:
    """The 2-D planes of a (n, a, b) device array as arrays of their own
    (kernels take buffers without offsets)."""
    if stack_d.shape[0] == 1:
        return [stack_d.reshape(stack_d.shape[1:])]
    planes = []
    for index in range(stack_d.shape[0]):
        plane = cla.empty(stack_d.queue, stack_d.shape[1:], stack_d.dtype)
        cl.enqueue_copy(stack_d.queue, plane.data, stack_d.data, byte_count=plane.nbytes,
                        src_offset=index * plane.nbytes)
        planes.append(plane)
    return planes


# ------------------------------------------------------------ functional API
@atexit.register
def _drop_cached_imagers() -> None:
    """Free the cached imagers (and their FFT plans) while pyopencl and reikna
    are whole: their finalisers fail noisily once module globals are gone."""
    plancache.plans.clear()


def fingerprint(array: np.ndarray) -> tuple:
    """Cheap key of an array: shape and a strided sample of its values (the
    exact comparison follows, see :func:`cached_imager`)."""
    step = max(1, array.size // 4096)
    return (array.shape, array.reshape(-1)[::step].tobytes())


def plan_key(queue: cl.CommandQueue, uvw: np.ndarray, freq: np.ndarray,
             geometry: ImageGeometry) -> tuple:
    """What a cached plan is for: context, device (and its fp64, which
    decides the kernels), uvw, freq and geometry -- never the queue object."""
    return ("imager", context_of(queue).int_ptr, queue.device.int_ptr,
            DeviceProfile.from_device(queue.device).fp64, fingerprint(uvw),
            freq.tobytes(), geometry)


def plan_needs(queue: cl.CommandQueue, layout: GridLayout, n_vis: int,
               grid_itemsize: int) -> dict[int, tuple[int, int]]:
    """Device bytes a new plan will want (its planes up to the workspace
    budget, its points), as :meth:`PlanCache.get_or_build` takes them."""
    profile = DeviceProfile.from_device(queue.device)
    planes = layout.n_planes * layout.nu * layout.nv * 2 * grid_itemsize
    wanted = min(planes, workspace_budget(profile)) + n_vis * 32
    return {queue.device.int_ptr: (wanted, profile.global_mem_bytes)}


def cached_imager(queue: cl.CommandQueue, uvw, freq, geometry: ImageGeometry) -> Imager:
    """The shared :class:`Imager` of (context, device, uvw, freq, geometry),
    from the process's plan cache (:mod:`clgrid.device.plancache`).

    A candidate is found by a cheap fingerprint, then confirmed by an exact
    comparison of uvw and freq (a memory-speed pass over the rows, never over
    the visibilities), so a changed uvw never reuses a stale plan.  The
    imager is shared by every thread: each call leases its own scratch.
    """
    uvw = check_uvw(uvw, allow_empty=True)
    freq = check_freq(freq)
    layouts = []   # planned once, only when a plan is built

    def needs() -> dict[int, tuple[int, int]]:
        layouts.append(GridLayout.of_rows(geometry, uvw, freq))
        return plan_needs(queue, layouts[-1], uvw.shape[0] * freq.shape[0],
                          geometry.vis_real.itemsize)

    def build() -> Imager:
        return Imager(queue, uvw=uvw, freq=freq, geometry=geometry, layout=layouts[-1])

    return plancache.plans.get_or_build(
        plan_key(queue, uvw, freq, geometry), build,
        lambda imager: {queue.device.int_ptr: _device_bytes(imager)}, needs,
        valid=lambda imager: same_bits(imager.uvw_m, uvw))


def _device_bytes(imager: Imager) -> int:
    return imager.engine.device_bytes if imager.engine is not None else 0


def cached_call(queue: cl.CommandQueue, uvw, freq, geometry: ImageGeometry,
                method: Callable[[Imager], np.ndarray]) -> np.ndarray:
    """``method`` of a cached imager found by its key, run while the check
    threads compare its uvw with ``uvw`` (:func:`~clgrid.device.hostio.same_bits_later`:
    the comparison took 2.4 ms of a 28 ms ``dirty2vis`` on an H100 before
    the call; beside it, it is hidden).  Where the comparison fails (``uvw``
    edited in place since the plan was made) the result is thrown away, the
    stale plan dropped and the call made again with a new one, so no result
    of a stale plan reaches the caller.  Without a cached plan:
    :func:`cached_imager`.  Only for calls that write no array of the
    caller's (their output would hold the stale result if the second call
    failed)."""
    uvw_checked, freq_checked = check_uvw(uvw, allow_empty=True), check_freq(freq)
    key = plan_key(queue, uvw_checked, freq_checked, geometry)
    imager = plancache.plans.peek(key)
    if imager is None:
        return method(cached_imager(queue, uvw, freq, geometry))
    same = same_bits_later(imager.uvw_m, uvw_checked)
    result = method(imager)
    if same():
        return result
    plancache.plans.discard(key, imager)
    return method(cached_imager(queue, uvw, freq, geometry))


def _call(queue: cl.CommandQueue, uvw, freq, geometry: ImageGeometry,
          method: Callable[[Imager], np.ndarray], writes_caller_array: bool) -> np.ndarray:
    """``method`` of the cached imager (checked beside the call where it
    writes no array of the caller's: :func:`cached_call`).  A failed device
    allocation is retried inside the imager's call (:func:`_retried`), as
    its build is inside the plan cache's."""
    if writes_caller_array:
        return method(cached_imager(queue, uvw, freq, geometry))
    return cached_call(queue, uvw, freq, geometry, method)


def queue_of(context=None, queue=None) -> cl.CommandQueue:
    """The caller's queue of ``queue=``/``context=`` (either may be None):
    :func:`clgrid.device.profiles.resolve_queue`."""
    return resolve_queue(queue if queue is not None else context)


def as_input(array):
    """``array`` as numpy, a ``pyopencl.array.Array`` as it is."""
    return array if isinstance(array, cla.Array) else np.asarray(array)


def vis2dirty_geometry(vis, dirty, *, npix_x: int, npix_y: int, pixsize_x: float,
                       pixsize_y: float, epsilon: float, do_wgridding: bool, flip_u: bool,
                       flip_v: bool, flip_w: bool, divide_by_n: bool, sigma_min: float,
                       sigma_max: float, center_x: float, center_y: float,
                       double_precision_accumulation: bool) -> ImageGeometry:
    """The validated geometry of a ``vis2dirty`` call: the precision of
    ``vis``, ``npix_x``/``npix_y`` of the output ``dirty`` where 0."""
    precision = precision_of(vis.dtype, "vis")
    if dirty is not None:
        npix_x, npix_y = npix_x or dirty.shape[-2], npix_y or dirty.shape[-1]
    return ImageGeometry.from_arguments(
        npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
        epsilon=epsilon, do_wgridding=do_wgridding, precision=precision, flip_u=flip_u,
        flip_v=flip_v, flip_w=flip_w, divide_by_n=divide_by_n, sigma_min=sigma_min,
        sigma_max=sigma_max, center_x=center_x, center_y=center_y,
        double_precision_accumulation=double_precision_accumulation)


def dirty2vis_geometry(dirty, *, pixsize_x: float, pixsize_y: float, epsilon: float,
                       do_wgridding: bool, flip_u: bool, flip_v: bool, flip_w: bool,
                       divide_by_n: bool, sigma_min: float, sigma_max: float, center_x: float,
                       center_y: float) -> ImageGeometry:
    """The validated geometry of a ``dirty2vis`` call: size and precision of ``dirty``."""
    if len(dirty.shape) not in (2, 3):
        raise ValueError(f"dirty must be 2-D or 3-D, got shape {dirty.shape}")
    precision = precision_of(dirty.dtype, "dirty")
    return ImageGeometry.from_arguments(
        npix_x=dirty.shape[-2], npix_y=dirty.shape[-1], pixsize_x=pixsize_x,
        pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding, precision=precision,
        flip_u=flip_u, flip_v=flip_v, flip_w=flip_w, divide_by_n=divide_by_n,
        sigma_min=sigma_min, sigma_max=sigma_max, center_x=center_x, center_y=center_y)


def vis2dirty_with(geometry: ImageGeometry, queue: cl.CommandQueue, *, uvw, freq, vis,
                   wgt=None, mask=None, dirty=None) -> np.ndarray:
    """:func:`vis2dirty` of a geometry made already, on the caller's ``queue``,
    by the plan cache's imager (:func:`cached_imager`)."""
    return _call(queue, uvw, freq, geometry,
                 lambda imager: imager.vis2dirty(vis, wgt, mask, dirty, queue=queue),
                 writes_caller_array=dirty is not None)


def dirty2vis_with(geometry: ImageGeometry, queue: cl.CommandQueue, *, uvw, freq, dirty,
                   wgt=None, mask=None, vis=None) -> np.ndarray:
    """:func:`dirty2vis` of a geometry made already, on the caller's ``queue``."""
    return _call(queue, uvw, freq, geometry,
                 lambda imager: imager.dirty2vis(dirty, wgt, mask, vis, queue=queue),
                 writes_caller_array=vis is not None)


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x: int = 0, npix_y: int = 0,
              pixsize_x: float, pixsize_y: float, epsilon: float, do_wgridding: bool = False,
              nthreads: int = 1, verbosity: int = 0, flip_u: bool = False,
              flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
              sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, double_precision_accumulation: bool = False,
              allow_nshift: bool = True, context=None, queue=None,
              dirty=None) -> np.ndarray:
    """Dirty image of visibilities, with ``ducc0.wgridder.vis2dirty``'s arguments.

    ``nthreads``, ``verbosity`` and ``allow_nshift`` are accepted and ignored.
    ``vis`` of shape (nrow, nchan, npol) gives (npol, npix_x, npix_y).  The
    precision follows ``vis`` (complex64: float32 image, complex128: float64);
    ``vis``, ``wgt`` and ``mask`` may be ``pyopencl.array.Array`` s already on
    the device.  Zero rows give a zero image.  ``context``/``queue`` choose
    the device (default :func:`clgrid.create_context`).  See the module
    docstring for the conventions.  One device; ``clgrid.vis2dirty`` also
    takes ``devices=`` (:mod:`clgrid.scaleout.entry`).
    """
    vis = as_input(vis)
    geometry = vis2dirty_geometry(
        vis, dirty, npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
        epsilon=epsilon, do_wgridding=do_wgridding, flip_u=flip_u, flip_v=flip_v,
        flip_w=flip_w, divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
        center_x=center_x, center_y=center_y,
        double_precision_accumulation=double_precision_accumulation)
    return vis2dirty_with(geometry, queue_of(context, queue), uvw=uvw, freq=freq, vis=vis,
                          wgt=wgt, mask=mask, dirty=dirty)


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x: float, pixsize_y: float,
              epsilon: float, do_wgridding: bool = False, nthreads: int = 1,
              verbosity: int = 0, flip_u: bool = False, flip_v: bool = False,
              flip_w: bool = False, divide_by_n: bool = True,
              sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, allow_nshift: bool = True, context=None, queue=None,
              vis=None) -> np.ndarray:
    """Visibilities of a dirty image, with ``ducc0.wgridder.dirty2vis``'s arguments.

    The adjoint of :func:`vis2dirty`.  ``dirty`` of shape (npol, npix_x,
    npix_y) gives (nrow, nchan, npol).  float32 images give complex64.
    One device; ``clgrid.dirty2vis`` also takes ``devices=``.
    """
    dirty = as_input(dirty)
    geometry = dirty2vis_geometry(
        dirty, pixsize_x=pixsize_x, pixsize_y=pixsize_y, epsilon=epsilon,
        do_wgridding=do_wgridding, flip_u=flip_u, flip_v=flip_v, flip_w=flip_w,
        divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
        center_x=center_x, center_y=center_y)
    return dirty2vis_with(geometry, queue_of(context, queue), uvw=uvw, freq=freq, dirty=dirty,
                          wgt=wgt, mask=mask, vis=vis)


__all__ = ["Imager", "as_input", "cached_imager", "dirty2vis", "dirty2vis_geometry",
           "dirty2vis_with", "plan_key", "plan_needs", "queue_of", "vis2dirty",
           "vis2dirty_geometry", "vis2dirty_with"]

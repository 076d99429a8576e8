"""Table-based convolutional gridding (Romein 2012, Merry 2016) on the gridding core.

:class:`Gridder` convolves visibilities onto a uv grid with an oversampled
GCF table (:mod:`clgrid.gridders.gcf`); :class:`clgrid.Degridder`
(:mod:`clgrid.gridders.degridder`) predicts visibilities from a grid with
the same table and coordinate handling (its exact adjoint).  Both run on
the gridding core's one engine (:func:`clgrid.core.strategies.table_engine`:
set points on the device, then the spread :func:`clgrid.gridders.dispatch.choose`
picks); what stays here is the host side: the users' checks, uploads and
statistics.  Per call the uvw, frequencies, flags, visibilities and weights
go to the device as they are (no host pass over the visibilities); set
points bins them there (flagged, off-grid and non-finite positions
counted).  NaN/Inf in ``vis`` or ``weights`` is found on the device among
the gridded visibilities only (a flagged or off-grid one is never used)
and raises ``ValueError`` with the count.

Grid layout: ``(npol, ny, nx)`` complex; u runs along x (last axis), the
grid centre (u = v = 0) is at ``[ny // 2, nx // 2]``.  The grid holds
``sum_k weight_k V_k GCF(x - x_k)``; to make an image, inverse-FFT it
(``fftshift(ifft2(ifftshift(grid)))`` up to scaling) and multiply by the
grid correction of :func:`clgrid.gridders.gcf.grid_correction`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pyopencl.array as cla

from .checks import check_uvw_freq, check_vis_layout
from .gcf import GCF
from ..core.engine import Engine, Plan
from ..core.plan import TileShape, check_allocation, params_of
from ..core.setpoints import freq_scale
from ..core.table import TableGrid, linear_steps
from ..device.guard import one_thread_at_a_time
from ..device.kernels import Operation, real_dtype_name


POLARISATIONS = (1, 2, 4)


class _TableOperation(Operation):
    """Shared set-up of Gridder and Degridder: validation and tables."""

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float,
                 npol: int, precision: Any, conjugate_negative_w: bool):
        super().__init__(context)
        if not isinstance(gcf, GCF):
            raise TypeError(f"gcf must be a clgrid.gridders.gcf.GCF, got {type(gcf).__name__}")
        if npol not in POLARISATIONS:
            raise ValueError(f"npol must be one of {POLARISATIONS}, got {npol}")
        nx, ny = int(nx), int(ny)
        if nx < 2 or ny < 2 or nx % 2 or ny % 2:
            raise ValueError(f"grid sizes must be even and >= 2, got nx={nx}, ny={ny}")
        if gcf.support > min(nx, ny):
            raise ValueError(f"support {gcf.support} larger than the grid ({nx} x {ny})")
        if not (cell_size_rad > 0 and math.isfinite(cell_size_rad)):
            raise ValueError(f"cell_size_rad must be positive and finite, got {cell_size_rad}")
        self.real_dtype = np.dtype(precision)
        real_dtype_name(self.real_dtype)  # raises TypeError for anything but f32/f64
        self.complex_dtype = np.dtype(np.complex64 if self.real_dtype == np.float32
                                      else np.complex128)
        if self.real_dtype == np.float64 and not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no fp64: use precision=float32")
        if nx * ny * npol * self.complex_dtype.itemsize > self.profile.max_alloc_bytes:
            raise ValueError(f"grid of {nx} x {ny} x {npol} {self.complex_dtype} exceeds the "
                             f"device's largest allocation ({self.profile.max_alloc_bytes} B)")
        self.gcf, self.nx, self.ny, self.npol = gcf, nx, ny, npol
        self.cell_size_rad = float(cell_size_rad)
        self.conjugate_negative_w = conjugate_negative_w
        if gcf.separable:
            self._tables = [cla.to_device(self.queue, gcf.table_u.astype(self.complex_dtype)),
                            cla.to_device(self.queue, gcf.table_v.astype(self.complex_dtype))]
        else:
            self._tables = [cla.to_device(self.queue, gcf.table.astype(self.complex_dtype))]
        self.last_stats: dict[str, Any] = {}

    #: The :class:`clgrid.core.engine.Engine` doing the work (set points,
    #: spread or interpolation; :func:`clgrid.core.strategies.table_engine`).
    engine: Engine
    #: The grid, table and conventions the engine's stages take.
    table_grid: TableGrid

    def _table_grid(self, gcf_read: str) -> TableGrid:
        """The core's view of this gridder (``'image-linear'`` sets the points
        at :func:`clgrid.core.table.linear_steps` positions per table step)."""
        gcf = self.gcf
        steps = linear_steps(gcf.oversample, gcf.w_planes) if gcf_read == "image-linear" else 1
        return TableGrid(self.nx, self.ny, self.cell_size_rad, gcf.support,
                         gcf.oversample * steps, gcf.w_planes, float(gcf.w_step_lambda),
                         gcf.separable, gcf.real_tables, bool(self.conjugate_negative_w),
                         self.real_dtype, gcf_read, steps)

    @one_thread_at_a_time
    def plan(self, uvw_m, freq_hz, flags=None) -> Plan:
        """Set points on the device (a :class:`clgrid.core.engine.Plan`: no
        host pass over the rows) for (nrow, 3) metres, (nchan,) Hz and
        optional flags broadcastable to (nrow, nchan, npol); reuse it across
        calls (major cycles)."""
        uvw_m, freq_hz = check_uvw_freq(uvw_m, freq_hz, finite_uvw=False)
        shape = (uvw_m.shape[0], freq_hz.size)
        self._check_fits(shape[0] * shape[1])
        uvw_d, scale_d = self.engine.set_points.upload(uvw_m, freq_scale(freq_hz))
        flags_d = None
        if flags is not None:
            flags = np.broadcast_to(np.asarray(flags, dtype=bool), shape + (self.npol,))
            flags_d = cla.to_device(self.queue, np.ascontiguousarray(flags).view(np.uint8))
        plan = self.engine.make_plan(uvw_d, scale_d, flags_d=flags_d, npol=self.npol)
        if plan.points.n_nonfinite:
            raise ValueError(f"uvw_m contains NaN/Inf: {plan.points.n_nonfinite} visibilities "
                             "without a finite position; flag them instead")
        return plan

    def _check_fits(self, n_vis: int) -> None:
        """Refuse, before allocating, a call whose per-visibility buffers (the
        visibilities, their cells, the sort's keys) exceed one allocation."""
        check_allocation(self.profile,
                         n_vis * max(self.npol * self.complex_dtype.itemsize, 16),
                         f"{n_vis} visibilities of {self.npol} polarisations need {{size}} in "
                         "one device buffer",
                         "grid them with clgrid.StreamingGridder, which takes the rows in blocks")

    def check_plan(self, plan) -> None:
        """A Plan made by set points like this engine's (another gridder's,
        binned for other tiles or another grid, would be read out of bounds)."""
        if not isinstance(plan, Plan):
            raise TypeError(f"this gridder takes the Plan of its own plan(), got "
                            f"{type(plan).__name__}")
        if plan.points.binning != self.engine.set_points.binning:
            raise ValueError("this Plan was made by a gridder with another grid, table or "
                             "tile shape; make it with this gridder's plan()")

    def upload_vis(self, vis, plan: Plan) -> cla.Array:
        """``vis`` ((nrow, nchan, npol) of the plan, numpy or a C-contiguous
        device array) on the device."""
        check_vis_layout(vis, plan.shape + (plan.npol,))
        if isinstance(vis, cla.Array):
            if not vis.flags.c_contiguous:
                raise ValueError("device vis must be C-contiguous")
            return vis
        return cla.to_device(self.queue, np.ascontiguousarray(vis))

    def upload_weights(self, weights, plan: Plan) -> cla.Array | None:
        """Weights as (nrow, nchan, npol) in the grid precision on the device
        (a broadcast or another dtype is materialised on the host first)."""
        if weights is None:
            return None
        shape = plan.shape + (plan.npol,)
        if isinstance(weights, cla.Array):
            if weights.shape != shape or weights.dtype != self.real_dtype:
                raise ValueError(f"device weights must be {self.real_dtype} of shape {shape}")
            return weights
        weights = np.asarray(weights)
        if weights.dtype.kind not in "fiu":
            raise TypeError(f"weights must be real, got {weights.dtype}")
        try:
            weights = np.broadcast_to(weights, shape)
        except ValueError:
            raise ValueError(f"weights of shape {weights.shape} do not broadcast to "
                             f"{shape}") from None
        return cla.to_device(self.queue, np.ascontiguousarray(weights, self.real_dtype))

    def _stats(self, plan: Plan) -> dict[str, Any]:
        n_records = self.engine.n_records(plan)
        return {"n_visibilities": plan.shape[0] * plan.shape[1], "n_kept": plan.n_kept,
                "n_offgrid": plan.n_offgrid, "n_flagged": plan.n_flagged,
                "n_records": n_records, "compression_ratio": plan.n_kept / max(n_records, 1)}

    def _report_drops(self, plan: Plan) -> None:
        if plan.n_offgrid:
            warnings.warn(f"{plan.n_offgrid} visibilities off the grid (footprint outside "
                          f"{self.nx} x {self.ny} or W beyond the last plane) were dropped",
                          stacklevel=3)


class Gridder(_TableOperation):
    """Compile-once table-based gridder (Romein/Merry) for one configuration.

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

    Parameters
    ----------
    context
        :class:`pyopencl.Context`, :class:`pyopencl.CommandQueue` or None.
    gcf
        The GCF table (:func:`clgrid.gridders.gcf.separable_gcf`,
        :func:`clgrid.gridders.gcf.w_projection_gcf` or :func:`clgrid.gridders.gcf.user_gcf`).
    nx, ny
        Grid size (even; any even size, not only powers of two).
    cell_size_rad
        Image pixel size; uv cell = ``1 / (n * cell_size_rad)``.
    npol
        1, 2 or 4 polarisations, sharing one GCF, on separate grid planes.
    precision
        float32 (default) or float64 grid and arithmetic.  Without fp64 on
        the device (float32 only) the positions are float-float and the
        tiles' sums compensated.
    deterministic
        True: bitwise-identical grids call after call (same device and
        driver).  Where the register spread is the faster (GPUs with native
        float atomics, supports wider than the tiles take) and the grid is
        float32 on a device with 64-bit integer atomics: the register spread
        with its flushes added in 64-bit fixed point (integer sums, in any
        order the same; 0.85-1.27x the float atomics' device time on an H100,
        docs/determinism.md).  Elsewhere the tile spread (above support 33,
        64 on CPUs with the vector tile, each tile reads more neighbours'
        bins and grids several times slower than the register spread), or
        ValueError where its staging does not fit the local memory even one
        point at a time.  None (default) or False:
        whichever spread is the faster (:attr:`deterministic` says whether
        the grids are reproducible).
    method
        The spread: ``'tiles'`` (output-owned tiles, no float atomics; the
        default up to support 33, 64 on CPUs with the vector tile) or ``'register'``
        (Romein/Merry register accumulation, float atomics at flushes, any
        support, :mod:`clgrid.core.register`; fixed-point flushes with
        ``deterministic=True``); None (``'tiles'`` where ``tiles=`` is given):
        :func:`clgrid.gridders.dispatch.choose` (register accumulation on
        GPUs with native float atomics and wherever the support is wider
        than the tiles take, tiles elsewhere).  The choice and its reasons
        are in :attr:`choice`.
    tiles
        The tile spread's tile (:class:`clgrid.core.plan.TileShape` or a dict
        of its fields); default :func:`clgrid.core.table.table_tiles`.
    register_params
        Launch geometry of the register spread
        (:class:`clgrid.core.register.RegisterParams`, a dict of its fields,
        ``'auto'`` (the tuning cache of ``clgrid tune table``, else the defaults;
        ignored where the tile spread runs) or None (defaults)).
    atomics
        The register spread's atomic path (``'cas'``, ``'native-cl'``,
        ``'native-ptx'``); default the device's best.
    count_flushes
        Count the register spread's block flushes (statistics, slightly
        slower): ``last_stats['flushes']``.
    conjugate_negative_w
        Negate uvw with w < 0 and conjugate the visibility
        (:mod:`clgrid.gridders.checks`).
    gcf_read
        How the register spread reads the table: ``'buffer'`` (global
        memory), ``'image'`` (an OpenCL image through a nearest-texel
        sampler: the buffer's weights, through the texture cache) or
        ``'image-linear'`` (the sampler interpolates linearly between the
        table's oversampling steps, positions set 16 times finer: Romein
        2012; far more accurate than the table's own steps, fewer equal
        points merged); images need the register spread (asked for
        without ``method=``, it runs; with ``deterministic=True`` its
        fixed-point flushes) and float32.  None
        (default): :func:`clgrid.gridders.dispatch.choose_gcf_read`
        (``'buffer'``; with ``register_params='auto'`` ``'image'`` where
        ``clgrid tune`` measured it the faster and cached it).
        The choice and its reason: :attr:`gcf_read`, :attr:`gcf_read_reason`.
    """

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float, *,
                 npol: int = 1, precision=np.float32, deterministic: bool | None = None,
                 method: str | None = None, tiles=None, register_params=None,
                 atomics: str | None = None, count_flushes: bool = False,
                 conjugate_negative_w: bool = True, gcf_read: str | None = None):
        super().__init__(context, gcf, nx, ny, cell_size_rad, npol, precision,
                         conjugate_negative_w)
        if deterministic not in (None, True, False):
            raise TypeError(f"deterministic must be True, False or None, got {deterministic!r}")
        from ..core.strategies import table_engine
        from .dispatch import choose, choose_gcf_read
        if method is None and tiles is not None:
            method = "tiles"      # a tile asks for the tile spread
        if gcf_read not in (None, "buffer") and method is None:
            method = "register"   # only the register kernels read images
        self.choice = choose(self.profile, gcf.support, npol, self.real_dtype,
                             separable=gcf.separable, deterministic=bool(deterministic),
                             method=method)
        self.method = self.choice.method
        #: How the table is read (``'buffer'``, ``'image'``, ``'image-linear'``) and why.
        cached = None
        if gcf_read is None and register_params == "auto" and self.method == "register":
            from ..core.tuning.register import cached_gcf_read
            cached = cached_gcf_read(self.profile, gcf.support, npol, self.real_dtype,
                                     gcf.separable)
        self.gcf_read, self.gcf_read_reason = choose_gcf_read(
            self.profile, gcf.support, gcf.oversample, gcf.w_planes, self.real_dtype,
            separable=gcf.separable, method=self.method, gcf_read=gcf_read, cached=cached)
        if self.method == "tiles" and register_params == "auto":
            register_params = None   # the cache's register geometry: not this spread's
        if self.method == "tiles" and (atomics is not None or count_flushes
                                       or register_params is not None):
            raise ValueError("atomics=, count_flushes= and register_params= shape the register "
                             "spread; this gridder runs the tile spread (no float atomics)")
        if self.choice.fixed_point and atomics is not None:
            raise ValueError("atomics= picks the float atomics; deterministic=True adds the "
                             "register spread's flushes in 64-bit fixed point")
        if self.method == "register" and tiles is not None:
            raise ValueError("tiles= shapes the tile spread; this gridder runs the register "
                             "spread")
        #: Whether grids are bitwise-reproducible call after call.
        self.deterministic = self.choice.deterministic
        self.table_grid = self._table_grid(self.gcf_read)
        self.engine = table_engine(
            self.queue, self.table_grid, self._tables, method=self.method, npol=self.npol,
            tiles=params_of(tiles, TileShape, "tiles") or self.choice.tiles,
            register_params=self._register_params(register_params), atomics=atomics,
            count_flushes=count_flushes, fixed_point=self.choice.fixed_point)
        self.atomic_path = ("fixed64" if self.choice.fixed_point else
                            self.engine.spreader.atomic_path if self.method == "register"
                            else "none")

    def _register_params(self, register_params):
        from ..core.register import as_register_params
        if isinstance(register_params, str):
            if register_params != "auto":
                raise ValueError(f"register_params must be RegisterParams, a dict, 'auto' or "
                                 f"None, got {register_params!r}")
            from ..core.tuning.register import cached_register_params
            return cached_register_params(self.profile, self.gcf.support, self.npol,
                                          self.real_dtype, self.gcf.separable)
        return as_register_params(register_params)

    @one_thread_at_a_time
    def zeros(self) -> cla.Array:
        """A zeroed device grid (npol, ny, nx) of this gridder's complex dtype."""
        return cla.zeros(self.queue, (self.npol, self.ny, self.nx), self.complex_dtype)

    @one_thread_at_a_time
    def __call__(self, uvw_m, freq_hz, vis, weights=None, flags=None, *, out=None,
                 return_device: bool = False):
        """Grid visibilities; returns the (npol, ny, nx) grid.

        Parameters
        ----------
        uvw_m
            (nrow, 3) float metres.
        freq_hz
            (nchan,) Hz.
        vis
            (nrow, nchan, npol) complex64 or complex128, numpy or a
            C-contiguous ``pyopencl.array.Array`` (used without a copy).
        weights
            Real, broadcastable to ``vis``; default 1 (also a device array
            of the grid's real dtype and ``vis``'s shape; a host broadcast
            or another dtype is materialised before upload).
        flags
            Bool, broadcastable to ``vis``; True = not gridded.
        out
            Device grid to accumulate into (from :meth:`zeros`).
        return_device
            Return the ``pyopencl.array.Array`` instead of a numpy copy.

        Statistics (drops, records, flushes) land in :attr:`last_stats`;
        off-grid drops also raise a warning.
        """
        plan = self.plan(uvw_m, freq_hz, flags)
        return self.grid_plan(plan, vis, weights, out=out, return_device=return_device)

    @one_thread_at_a_time
    def grid_plan(self, plan, vis, weights=None, *, out=None, return_device: bool = False):
        """Grid with a plan from :meth:`plan` (reuse it across major cycles)."""
        self.check_plan(plan)
        shape = (self.npol, self.ny, self.nx)
        if out is not None and (not isinstance(out, cla.Array) or out.shape != shape
                                or out.dtype != self.complex_dtype):
            raise ValueError(f"out must be a {self.complex_dtype} device array of shape {shape}")
        grid = out if out is not None else cla.empty(self.queue, shape, self.complex_dtype)
        vis_d, wgt_d = self.upload_vis(vis, plan), self.upload_weights(weights, plan)
        self.engine.spread(plan, vis_d, self.npol, None, grid, wgt_d=wgt_d,
                           mask_d=plan.flags_d, accumulate=out is not None)
        self.last_stats = self._stats(plan)
        self.last_stats["grid_point_updates"] = (self.last_stats["n_records"]
                                                 * self.gcf.support ** 2 * self.npol)
        self.last_stats["flushes"] = (self.engine.spreader.last_flushes
                                      if self.method == "register" else None)
        self._report_drops(plan)
        return grid if return_device else grid.get()


__all__ = ["Gridder", "POLARISATIONS"]

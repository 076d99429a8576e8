"""Table-based convolutional gridding (Romein 2012, Merry 2016) and its adjoint.

:class:`Gridder` convolves visibilities onto a uv grid with an oversampled
GCF table (:mod:`clgrid.gridders.gcf`); :class:`Degridder` predicts visibilities from
a grid with the same table and coordinate handling (its exact adjoint).

Grid layout: ``(npol, ny, nx)`` complex; u runs along x (last axis), the
grid centre (u = v = 0) is at ``[ny // 2, nx // 2]``.  The grid holds
``sum_k weight_k V_k GCF(x - x_k)``; to make an image, inverse-FFT it
(``fftshift(ifft2(ifftshift(grid)))`` up to scaling) and multiply by the
grid correction of :func:`clgrid.gridders.gcf.grid_correction`.

:class:`Degridder` (the adjoint) is in :mod:`clgrid.gridders.degridder`.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from tqdm.auto import tqdm

from .gcf import GCF
from .params import GridderParams, ImageParams, default_params
from ..device.kernels import KernelTemplate, Operation, real_dtype_name
from .uvprep import UVPlan, check_finite, check_vis_layout, plan_uv


POLARISATIONS = (1, 2, 4)
#: Records per kernel launch: bounds a launch's run time (drivers with
#: watchdogs) and lets a progress bar advance.
RECORDS_PER_LAUNCH = 1 << 21
_HEADER_BYTES = 16  # one int4 per record


def _bin(support: int, block: int) -> int:
    """Smallest multiple of ``block`` that holds any block-aligned box around
    a ``support``-wide footprint."""
    return -(-(support + block - 1) // block) * block


class _TableOperation(Operation):
    """Shared set-up of Gridder and Degridder: validation, tables, planning."""

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float,
                 npol: int, precision: Any, conjugate_negative_w: bool, compress: bool):
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
        self.need_f64 = self.real_dtype == np.float64
        if self.need_f64 and not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no fp64: use precision=float32")
        if nx * ny * npol * self.complex_dtype.itemsize > self.profile.max_alloc_bytes:
            raise ValueError(f"grid of {nx} x {ny} x {npol} {self.complex_dtype} exceeds the "
                             f"device's largest allocation ({self.profile.max_alloc_bytes} B)")
        self.gcf, self.nx, self.ny, self.npol = gcf, nx, ny, npol
        self.cell_size_rad = float(cell_size_rad)
        self.conjugate_negative_w = conjugate_negative_w
        self.compress = compress
        if gcf.separable:
            self._tables = [cla.to_device(self.queue, gcf.table_u.astype(self.complex_dtype)),
                            cla.to_device(self.queue, gcf.table_v.astype(self.complex_dtype))]
        else:
            self._tables = [cla.to_device(self.queue, gcf.table.astype(self.complex_dtype))]
        self.last_stats: dict[str, Any] = {}

    def plan(self, uvw_m, freq_hz, flags=None) -> UVPlan:
        """Host-side preparation (positions, drops, compression); reusable."""
        return plan_uv(uvw_m, freq_hz, self.gcf, self.nx, self.ny, self.cell_size_rad,
                       flags=flags, npol=self.npol, compress=self.compress,
                       conjugate_negative_w=self.conjugate_negative_w)

    def _template_params(self) -> dict[str, Any]:
        return {"real": real_dtype_name(self.real_dtype), "with_f64": self.need_f64,
                "npol": self.npol, "support": self.gcf.support,
                "oversample": self.gcf.oversample, "separable": self.gcf.separable}

    def _check_vis(self, vis, plan: UVPlan, name: str = "vis") -> np.ndarray:
        vis = np.asarray(vis)
        check_vis_layout(vis, plan.shape + (self.npol,), name)
        check_finite(name, vis)
        return vis

    def _check_weights(self, weights, plan: UVPlan):
        if weights is None:
            return None
        weights = np.asarray(weights)
        if weights.dtype.kind not in "fiu":
            raise TypeError(f"weights must be real, got {weights.dtype}")
        try:
            np.broadcast_shapes(weights.shape, plan.shape + (self.npol,))
        except ValueError:
            raise ValueError(f"weights of shape {weights.shape} do not broadcast to "
                             f"{plan.shape + (self.npol,)}") from None
        check_finite("weights", weights)
        return weights

    def _report_drops(self, plan: UVPlan) -> None:
        if plan.n_offgrid:
            warnings.warn(f"{plan.n_offgrid} visibilities off the grid (footprint outside "
                          f"{self.nx} x {self.ny} or W beyond the last plane) were dropped",
                          stacklevel=3)

    def _launch_chunks(self, n_records: int, progress: bool | None,
                       step: int = RECORDS_PER_LAUNCH):
        n_chunks = -(-n_records // step)
        show = progress if progress is not None else n_chunks > 4
        starts = range(0, n_records, step)
        return tqdm(starts, total=n_chunks, disable=not show, unit="launch",
                    desc=type(self).__name__)


class Gridder(_TableOperation):
    """Compile-once table-based gridder (Romein/Merry) for one configuration.

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
        float32 (default) or float64 grid and arithmetic.
    params
        :class:`GridderParams`, a dict of its fields, ``'auto'`` (tuning
        cache, else defaults; never tunes on its own) or None (defaults).
    atomics
        Force an atomic path (``'cas'``...); default the device's best.
    count_flushes
        Count grid-point flushes (statistics, slightly slower).
    conjugate_negative_w, compress
        See :mod:`clgrid.gridders.uvprep`.
    strategy
        ``'auto'`` (default: :func:`clgrid.gridders.dispatch.choose` picks from the
        device profile and the tuning cache; explicit ``params``,
        ``atomics`` or ``count_flushes`` imply ``'scatter'``), or one of
        ``'scatter'`` (Romein/Merry with float atomics), ``'tiled'``
        (atomic-free, :mod:`clgrid.gridders.tiled`), ``'image'`` (GCF in an
        OpenCL image with hardware interpolation, :mod:`clgrid.gridders.image_gcf`)
        and ``'core'`` (the gridding core: set points on the device, no host
        pass over the visibilities; :mod:`clgrid.gridders.core_strategy`;
        without fp64 its positions in float-float, its sums compensated).
        The choice and its reasons are in :attr:`choice`.
    tiled_params, image_params, core_tiles
        Override the dispatcher's geometry of the tiled / image / core strategy
        (:class:`clgrid.gridders.tiled.TiledParams`, :class:`clgrid.gridders.params.ImageParams`,
        :class:`clgrid.core.plan.TileShape` or dicts of their fields).
    core_method
        The core strategy's spread: ``'tiles'`` (output-owned tiles, no
        float atomics, support <= 33, 64 on CPUs with the vector tile) or ``'register'`` (Romein/Merry
        register accumulation, float atomics at flushes, any support,
        :mod:`clgrid.core.register`; ``atomics`` picks its atomic path);
        None: :func:`clgrid.gridders.dispatch.core_method_for`.
    register_params
        Launch geometry of the register spread
        (:class:`clgrid.core.register.RegisterParams` or a dict of its fields).
    deterministic
        True: bitwise-identical grids call after call (same device and
        driver): ``'auto'`` picks the core strategy on GPUs (support <=
        33), on CPUs the core where
        :func:`clgrid.gridders.dispatch.cpu_core_faster`, and elsewhere the tiled strategy
        with its records binned in record order (a blocked counting sort on
        CPUs, clgrid's stable radix sort elsewhere) instead of an atomic
        cursor; forcing ``'scatter'``/``'image'``, explicit scatter
        ``params``, ``atomics`` or ``count_flushes`` is an error.
        None (default) or False (whichever is the fastest, the last bits
        may vary): on GPUs the core strategy with the spread of
        :func:`clgrid.gridders.dispatch.core_method_for` (register
        accumulation where float atomics are native: on the H200 faster than
        the scatter strategy at every support, with device set points; not
        bitwise reproducible); on CPUs the core strategy's tile spread where
        it is the faster (every table up to W 64 where the compiler builds
        the vector tile, any polarisations; one polarisation
        up to W 8: :func:`clgrid.gridders.dispatch.cpu_core_faster`), else
        the tiled strategy (both deterministic; ``deterministic=True`` picks
        the same); elsewhere the dispatcher's choice (with False, the tiled
        strategy's binning by atomics).  The result is in
        :attr:`deterministic`.
    """

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float, *,
                 npol: int = 1, precision=np.float32, params=None, atomics: str | None = None,
                 count_flushes: bool = False, conjugate_negative_w: bool = True,
                 compress: bool = True, strategy: str = "auto", tiled_params=None,
                 image_params=None, deterministic: bool | None = None, core_tiles=None,
                 core_method: str | None = None, register_params=None):
        super().__init__(context, gcf, nx, ny, cell_size_rad, npol, precision,
                         conjugate_negative_w, compress)
        if deterministic not in (None, True, False):
            raise TypeError(f"deterministic must be True, False or None, got {deterministic!r}")
        self.params = self._resolve_params(params)
        self.count_flushes = bool(count_flushes)
        core_default = self._core_by_default(deterministic, strategy, params, atomics)
        self.choice = self._choose("core" if core_default else strategy, params, atomics,
                                   tiled_params, image_params, deterministic is True,
                                   core_tiles, core_method)
        if core_default:
            from .dispatch import core_default as with_default_reason
            self.choice = with_default_reason(self.choice)
        self.strategy = self.choice.strategy
        #: Whether grids are bitwise-reproducible run to run (see ``deterministic``).
        self.deterministic = self.choice.core_method == "tiles" or (
            bool(deterministic) if deterministic is not None else
            (self.strategy == "tiled" and self.profile.device_type == "cpu"))
        self._plan_gcf = gcf
        self._engine = None
        self._core = None
        if self.strategy == "core":
            from ..core.register import as_register_params
            from .core_strategy import CoreTableEngine
            self._core = CoreTableEngine(
                self.queue, self.profile, gcf, nx, ny, cell_size_rad, self.real_dtype,
                self._tables, conjugate_negative_w, self.choice.core,
                method=self.choice.core_method, npol=self.npol,
                register_params=as_register_params(register_params), atomics=atomics)
            self.atomic_path = (self._core.register.atomic_path
                                if self.choice.core_method == "register" else "none")
        elif self.strategy == "tiled":
            from .tiled import TiledEngine
            self._engine = TiledEngine(self.queue, self._template_params(), self.choice.tiled,
                                       self._tables, self.complex_dtype.itemsize,
                                       deterministic=self.deterministic)
            self.atomic_path = "none"
        elif self.strategy == "image":
            from .image_gcf import ImageGCF
            self._image = ImageGCF(self.queue, gcf, self.choice.image, self.real_dtype)
            self._plan_gcf = self._image.position_gcf
            self._build(atomics, template="gridder_image.cl.mako",
                        extra=self._image.template_params())
        else:
            self._build(atomics)

    def _asks_for_scatter(self, params, atomics, strategy: str = "auto") -> bool:
        """Explicit scatter params, ``atomics=`` (except for the core) or
        ``count_flushes=``."""
        return (isinstance(params, (GridderParams, dict)) or self.count_flushes
                or (atomics is not None and strategy != "core"))

    def _core_by_default(self, deterministic, strategy: str, params, atomics) -> bool:
        """``deterministic`` None or False, ``strategy='auto'`` and nothing asked of
        the scatter strategy, on a device where the core runs by default
        (:func:`clgrid.gridders.dispatch.core_by_default`)."""
        from .dispatch import core_by_default
        return (deterministic is not True and strategy == "auto"
                and not self._asks_for_scatter(params, atomics)
                and core_by_default(self.profile, self.gcf.support, self.real_dtype,
                                    self.gcf.separable, self.npol))

    def _choose(self, strategy: str, params, atomics, tiled_params, image_params,
                deterministic: bool, core_tiles=None, core_method=None):
        """Resolve ``strategy`` through :func:`clgrid.gridders.dispatch.choose`."""
        from .dispatch import Choice, choose
        from .tiled import TiledParams
        forced_scatter = strategy == "auto" and self._asks_for_scatter(params, atomics)
        if deterministic and (forced_scatter or atomics is not None or self.count_flushes):
            raise ValueError("deterministic=True runs an atomic-free strategy (core or tiled): "
                             "explicit scatter params, atomics= and count_flushes= do not apply")
        if self.count_flushes and strategy not in ("auto", "scatter"):
            raise ValueError("count_flushes counts the scatter strategy's atomic flushes; "
                             f"strategy {strategy!r} has none")
        if forced_scatter:
            return Choice("scatter", scatter=self.params, reasons=(
                "explicit scatter params, atomics= or count_flushes= given",))
        tuned = None
        if strategy == "auto" and not deterministic:
            from .tunecache import cached_strategy
            tuned = cached_strategy(self.profile, self.gcf.support, self.npol, self.real_dtype,
                                    self.gcf.separable)
        choice = choose(self.profile, self.gcf.support, self.npol, self.real_dtype,
                        separable=self.gcf.separable, strategy=strategy,
                        scatter_params=self.params, tuned=tuned, deterministic=deterministic,
                        core_method=core_method)
        if core_method is not None and choice.strategy != "core":
            raise ValueError(f"core_method={core_method!r} applies to strategy 'core', not "
                             f"{choice.strategy!r}")
        if choice.strategy == "tiled" and tiled_params is not None:
            if isinstance(tiled_params, dict):
                tiled_params = TiledParams(**tiled_params)
            tiled_params.validate()
            choice = dataclasses.replace(choice, tiled=tiled_params)
        if choice.strategy == "core" and core_tiles is not None:
            if choice.core_method != "tiles":
                raise ValueError("core_tiles shapes the core's tile spread; core_method is "
                                 f"{choice.core_method!r}")
            from .core_strategy import tile_shape
            choice = dataclasses.replace(choice, core=tile_shape(core_tiles))
        if choice.strategy == "image" and image_params is not None:
            if isinstance(image_params, dict):
                image_params = ImageParams(**image_params)
            image_params.validate()
            choice = dataclasses.replace(choice, image=image_params)
        return choice

    def _resolve_params(self, params) -> GridderParams:
        if params is None:
            params = default_params(self.profile, self.gcf.support, self.npol)
        elif params == "auto":
            from .tunecache import cached_params
            params = cached_params(self.profile, self.gcf.support, self.npol, self.real_dtype,
                                   self.gcf.separable)
        elif isinstance(params, dict):
            params = GridderParams(**params)
        if not isinstance(params, GridderParams):
            raise TypeError("params must be GridderParams, a dict, 'auto' or None")
        params.validate()
        return params

    def _build(self, atomics, template: str = "gridder.cl.mako", extra=None) -> None:
        p = self.params
        bin_u, bin_v = _bin(self.gcf.support, p.block_u), _bin(self.gcf.support, p.block_v)
        n_blocks = (bin_u // p.block_u) * (bin_v // p.block_v)
        wg = min(p.wg_size, self.profile.max_work_group_size)
        record_bytes = _HEADER_BYTES + self.npol * self.complex_dtype.itemsize
        local_budget = self.profile.local_mem_bytes - 1024   # room for the driver's own use
        batch = max(1, min(p.vis_per_group, 1024, local_budget // record_bytes))
        while True:
            n_sub = max(1, wg // n_blocks)
            params = dict(self._template_params(), block_u=p.block_u, block_v=p.block_v,
                          bin_u=bin_u, bin_v=bin_v, wg_size=wg, n_sub=n_sub, batch=batch,
                          vis_per_group=p.vis_per_group, count_flushes=self.count_flushes,
                          **(extra or {}))
            self.template = KernelTemplate(self.queue, template, params,
                                           atomics=atomics, need_f64=self.need_f64)
            self._kernel = self.template.kernel("grid_records")
            limit = self.template.max_work_group_size(self._kernel)
            if wg <= limit:
                break
            wg = max(1, limit)   # registers limit this variant's group size
        self.wg_size, self.n_sub, self.batch = wg, n_sub, batch
        self.n_tiles = -(-n_blocks // wg) if n_sub == 1 else 1
        self.bin_size = (bin_u, bin_v)
        self.atomic_path = self.template.atomics[
            "atomic_f64" if self.need_f64 else "atomic_f32"]

    def zeros(self) -> cla.Array:
        """A zeroed device grid (npol, ny, nx) of this gridder's complex dtype."""
        return cla.zeros(self.queue, (self.npol, self.ny, self.nx), self.complex_dtype)

    def __call__(self, uvw_m, freq_hz, vis, weights=None, flags=None, *, out=None,
                 return_device: bool = False, progress: bool | None = None):
        """Grid visibilities; returns the (npol, ny, nx) grid.

        Parameters
        ----------
        uvw_m
            (nrow, 3) float metres, rows ordered by baseline then time.
        freq_hz
            (nchan,) Hz.
        vis
            (nrow, nchan, npol) complex64 or complex128 (strategy ``'core'``:
            also a C-contiguous ``pyopencl.array.Array``, used without a copy).
        weights
            Real, broadcastable to ``vis``; default 1 (strategy ``'core'``:
            also a device array of the grid's real dtype and ``vis``'s shape;
            a host broadcast or another dtype is materialised before upload).
        flags
            Bool, broadcastable to ``vis``; True = not gridded.
        out
            Device grid to accumulate into (from :meth:`zeros`).
        return_device
            Return the ``pyopencl.array.Array`` instead of a numpy copy.
        progress
            Show a progress bar (default: only for many launches).

        Statistics (drops, records, compression, flushes) land in
        :attr:`last_stats`; off-grid drops also raise a warning.
        """
        plan = self.plan(uvw_m, freq_hz, flags)
        return self.grid_plan(plan, vis, weights, out=out, return_device=return_device,
                              progress=progress)

    def grid_plan(self, plan, vis, weights=None, *, out=None,
                  return_device: bool = False, progress: bool | None = None):
        """Grid with a plan from :meth:`plan` (reuse it across major cycles)."""
        if self._core is not None:
            return self._grid_core(plan, vis, weights, out, return_device)
        vis = self._check_vis(vis, plan)
        weights = self._check_weights(weights, plan)
        records = plan.records(vis, weights, dtype=self.complex_dtype)
        grid = self.zeros() if out is None else out
        if grid.dtype != self.complex_dtype or grid.shape != (self.npol, self.ny, self.nx):
            raise ValueError(f"out must be a {self.complex_dtype} device array of shape "
                             f"{(self.npol, self.ny, self.nx)}")
        flushes = self.grid_records(plan.header, records, grid, progress=progress)
        support = self.gcf.support
        self.last_stats = {
            "n_visibilities": plan.shape[0] * plan.shape[1], "n_kept": plan.n_kept,
            "n_offgrid": plan.n_offgrid, "n_flagged": plan.n_flagged,
            "n_records": plan.n_records, "compression_ratio": plan.compression_ratio,
            "grid_point_updates": plan.n_records * support * support * self.npol,
            "flushes": flushes,
        }
        if flushes is not None:
            self.last_stats["flush_fraction"] = (
                flushes * self.npol / max(1, self.last_stats["grid_point_updates"]))
        self._report_drops(plan)
        return grid if return_device else grid.get()

    def _grid_core(self, plan, vis, weights, out, return_device: bool):
        """Strategy 'core': device set points (``plan``) and spread."""
        self._core.check_plan(plan)
        shape = (self.npol, self.ny, self.nx)
        if out is not None and (not isinstance(out, cla.Array) or out.shape != shape
                                or out.dtype != self.complex_dtype):
            raise ValueError(f"out must be a {self.complex_dtype} device array of shape {shape}")
        grid = out if out is not None else cla.empty(self.queue, shape, self.complex_dtype)
        self._core.grid(plan, vis, weights, grid, accumulate=out is not None)
        support = self.gcf.support
        self.last_stats = {
            "n_visibilities": plan.shape[0] * plan.shape[1], "n_kept": plan.n_kept,
            "n_offgrid": plan.n_offgrid, "n_flagged": plan.n_flagged,
            "n_records": plan.n_records, "compression_ratio": 1.0,
            "grid_point_updates": plan.n_records * support * support * self.npol,
            "flushes": None,
        }
        self._report_drops(plan)
        return grid if return_device else grid.get()

    def plan(self, uvw_m, freq_hz, flags=None):
        """Host-side preparation (positions, drops, compression); reusable.

        With ``strategy='image'`` positions are quantised to the image
        strategy's ``position_oversample``, not to the GCF's ``oversample``.
        With ``strategy='core'``: a :class:`clgrid.gridders.core_strategy.CorePlan`,
        the set points made on the device (no host pass over the rows).
        """
        if self._core is not None:
            return self._core.plan(uvw_m, freq_hz, flags, self.npol)
        return plan_uv(uvw_m, freq_hz, self._plan_gcf, self.nx, self.ny, self.cell_size_rad,
                       flags=flags, npol=self.npol, compress=self.compress,
                       conjugate_negative_w=self.conjugate_negative_w)

    def _no_records_for_core(self) -> None:
        if self._core is not None:
            raise ValueError("strategy 'core' sets its points from uvw on the device and has no "
                             "host records: call the Gridder (or grid_plan) instead")

    @property
    def records_per_launch(self) -> int:
        """Records per kernel launch of this strategy."""
        if self._engine is not None:
            return min(RECORDS_PER_LAUNCH, self._engine.records_per_launch)
        return RECORDS_PER_LAUNCH

    def grid_records(self, header: np.ndarray, records: np.ndarray, grid: cla.Array,
                     progress: bool | None = None) -> int | None:
        """Low level: add prepared records (from :class:`UVPlan`) to ``grid``.

        ``header`` (n, 4) int32 and ``records`` (n, npol) may be numpy or
        ``pyopencl.array.Array`` (then nothing is copied).

        Returns the number of grid-point flushes (per polarisation group)
        when ``count_flushes`` is on, else None.
        """
        self._no_records_for_core()
        on_device = isinstance(header, cla.Array) and isinstance(records, cla.Array)
        if not on_device:
            header = np.ascontiguousarray(header, dtype=np.int32)
            records = np.ascontiguousarray(records, dtype=self.complex_dtype)
        elif header.dtype != np.int32 or records.dtype != self.complex_dtype:
            raise TypeError(f"device header must be int32 and records {self.complex_dtype}")
        n_records = header.shape[0]
        if header.shape != (n_records, 4) or records.shape != (n_records, self.npol):
            raise ValueError("header must be (n, 4) and records (n, npol)")
        counter = cla.zeros(self.queue, 1, np.uint32)
        step = self.records_per_launch
        for start in self._launch_chunks(n_records, progress, step):
            stop = min(start + step, n_records)
            if on_device and step >= n_records:   # already there: no copy
                header_d, records_d = header, records
            elif on_device:
                # Kernels take whole buffers: a slice at an offset is copied
                # on the device (cheap next to gridding it).
                header_d, records_d = header[start:stop].copy(), records[start:stop].copy()
            else:
                header_d = cla.to_device(self.queue, header[start:stop])
                records_d = cla.to_device(self.queue, records[start:stop])
            self.enqueue_records(header_d, records_d, grid, counter=counter)
        self.queue.finish()
        return int(counter.get()[0]) if self.count_flushes else None

    def enqueue_records(self, header_d: cla.Array, records_d: cla.Array, grid: cla.Array, *,
                        wait_for=None, counter: cla.Array | None = None) -> cl.Event | None:
        """Enqueue the gridding of device records on :attr:`queue`; no copy,
        no wait (the tiled strategy blocks once to read its tile counts).

        Returns the last kernel's event (None when there is nothing to do).
        """
        self._no_records_for_core()
        n_records = int(header_d.shape[0])
        if n_records == 0:
            return None
        step = self.records_per_launch
        if n_records > step:   # device arrays longer than one launch: slice them
            event = None
            for start in range(0, n_records, step):
                stop = min(start + step, n_records)
                event = self.enqueue_records(header_d[start:stop], records_d[start:stop], grid,
                                             wait_for=wait_for if start == 0 else None,
                                             counter=counter)
            return event
        if self._engine is not None:
            return self._engine.enqueue(header_d, records_d, grid, self.nx, self.ny,
                                        wait_for=wait_for)
        if counter is None:
            counter = cla.zeros(self.queue, 1, np.uint32)
        n_groups = -(-n_records // self.params.vis_per_group)
        gcf_args = ([self._image.image] if self.strategy == "image"
                    else [t.data for t in self._tables])
        return self._kernel(self.queue, (n_groups * self.wg_size, self.n_tiles),
                            (self.wg_size, 1), header_d.data, records_d.data,
                            np.int32(n_records), *gcf_args, grid.data,
                            np.int32(self.nx), np.int32(self.ny), counter.data,
                            wait_for=wait_for)


__all__ = ["Gridder", "POLARISATIONS", "RECORDS_PER_LAUNCH"]

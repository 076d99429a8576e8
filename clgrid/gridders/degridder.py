"""Table-based degridding, the exact adjoint of :class:`clgrid.gridders.gridder.Gridder`.

:class:`Degridder` predicts visibilities from a grid with the gridder's GCF
table and coordinate handling (``templates/gridder_degrid.cl.mako``): each
record gathers ``sum conj(GCF) * grid`` over its footprint, one writer per
visibility, no atomics.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl.array as cla

from .gcf import GCF
from ..device.kernels import KernelTemplate
from .uvprep import check_finite
from .gridder import RECORDS_PER_LAUNCH, _TableOperation


@dataclasses.dataclass(frozen=True)
class DegridderParams:
    """lanes: work-items sharing one record's footprint (power of two);
    slots: records in flight per group; records_per_slot: coarsening."""

    lanes: int = 1
    slots: int = 64
    records_per_slot: int = 4

    def validate(self) -> None:
        if self.lanes < 1 or self.lanes & (self.lanes - 1):
            raise ValueError("lanes must be a power of two")
        if self.slots < 1 or self.records_per_slot < 1:
            raise ValueError("slots and records_per_slot must be >= 1")


def default_degridder_params(profile, support: int) -> DegridderParams:
    """Split large footprints over lanes on GPUs; one lane per record on CPUs."""
    if profile.device_type == "gpu":
        lanes = 1 if support < 8 else min(32, 1 << (support - 1).bit_length())
        return DegridderParams(lanes, max(1, 128 // lanes), 2)
    return DegridderParams(1, min(64, profile.max_work_group_size), 4)


class Degridder(_TableOperation):
    """Compile-once degridder: the exact adjoint of :class:`Gridder`.

    Predicts ``V_k = weight_k * sum conj(GCF) * grid`` (conjugated again for
    visibilities whose uvw was negated), with the same tables, coordinate
    rounding, drops and compression as the gridder.  Parameters as for
    :class:`Gridder`; ``params`` is a :class:`DegridderParams` or dict.

    ``strategy``: ``'auto'`` (default: ``'core'``, unless ``params`` or
    ``compress=False`` ask for the records strategy), ``'records'`` (the host plan's records,
    ``templates/gridder_degrid.cl.mako``) or ``'core'`` (the adjoint of
    ``Gridder(strategy='core')``: set points on the device sorted by cell
    and table slice, one work-item per record of equal points summing its
    footprint once, ``interpolate_table_records`` in
    ``templates/core_interp.cl.mako``; no host pass over the rows; on
    devices without fp64 the positions in float-float and the records'
    sums compensated; ``core_tiles`` bins by tile instead, one work-item per
    visibility, up to support 33).  Both
    are deterministic (one writer per visibility).
    """

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float, *,
                 npol: int = 1, precision=np.float32, params=None,
                 conjugate_negative_w: bool = True, compress: bool = True,
                 strategy: str = "auto", core_tiles=None):
        super().__init__(context, gcf, nx, ny, cell_size_rad, npol, precision,
                         conjugate_negative_w, compress)
        if strategy not in ("auto", "records", "core"):
            raise ValueError(f"strategy must be 'auto', 'records' or 'core', got {strategy!r}")
        if strategy == "auto":
            # the core: H200 5-10x, Intel CPU 1-1.3x the records strategy end
            # to end (benchmarks/RESULTS.md); explicit params or
            # compress=False are the records strategy's options
            strategy = "core" if params is None and compress else "records"
        self.strategy = strategy
        self._core = None
        if strategy == "core":
            from ..core.table import max_table_support
            from .core_strategy import CoreTableEngine, tile_shape
            # points sorted by cell and merged into records: one footprint a
            # record; core_tiles asks for the tile bins and one a point
            method = "register" if core_tiles is None else "tiles"
            if core_tiles is not None and gcf.support > max_table_support(self.profile):
                raise ValueError(f"core_tiles bins by tile, for support <= "
                                 f"{max_table_support(self.profile)}; "
                                 f"support {gcf.support} is sorted by cell")
            self._core = CoreTableEngine(self.queue, self.profile, gcf, nx, ny, cell_size_rad,
                                         self.real_dtype, self._tables, conjugate_negative_w,
                                         tile_shape(core_tiles), method=method, npol=npol,
                                         spread=False)
            self.params = None
            return
        if params is None:
            params = default_degridder_params(self.profile, gcf.support)
        elif isinstance(params, dict):
            params = DegridderParams(**params)
        params.validate()
        slots = params.slots
        while True:
            template_params = dict(self._template_params(), lanes=params.lanes, slots=slots,
                                   records_per_slot=params.records_per_slot)
            self.template = KernelTemplate(self.queue, "gridder_degrid.cl.mako", template_params,
                                           need_f64=self.need_f64)
            self._kernel = self.template.kernel("degrid_records")
            if params.lanes * slots <= self.template.max_work_group_size(self._kernel):
                break
            if slots == 1:
                raise ValueError(f"lanes={params.lanes} exceeds this device's work-group limit")
            slots = max(1, slots // 2)
        self.params = dataclasses.replace(params, slots=slots)

    def __call__(self, grid, uvw_m, freq_hz, weights=None, flags=None, *,
                 progress: bool | None = None) -> np.ndarray:
        """Predict (nrow, nchan, npol) visibilities from a (npol, ny, nx) grid
        (numpy or device array); zero where dropped or flagged."""
        plan = self.plan(uvw_m, freq_hz, flags)
        return self.degrid_plan(plan, grid, weights, progress=progress)

    def plan(self, uvw_m, freq_hz, flags=None):
        """Host plan (``'records'``) or device set points (``'core'``); reusable."""
        if self._core is not None:
            return self._core.plan(uvw_m, freq_hz, flags, self.npol)
        return super().plan(uvw_m, freq_hz, flags)

    def degrid_plan(self, plan, grid, weights=None, *, progress: bool | None = None,
                    return_device: bool = False) -> np.ndarray:
        """Degrid with a plan from :meth:`plan`; ``return_device`` (core
        strategy): the ``pyopencl.array.Array`` instead of a numpy copy."""
        if self._core is not None:
            out_d = self._core.degrid(plan, self._grid_on_device(grid), weights)
            n_records = self._core.n_records(plan)
            self.last_stats = {"n_visibilities": plan.shape[0] * plan.shape[1],
                               "n_kept": plan.n_kept, "n_offgrid": plan.n_offgrid,
                               "n_flagged": plan.n_flagged, "n_records": n_records,
                               "compression_ratio": plan.n_kept / max(n_records, 1)}
            self._report_drops(plan)
            return out_d if return_device else out_d.get()
        weights = self._check_weights(weights, plan)
        grid_d = self._grid_on_device(grid)
        records = self.degrid_records(plan.header, grid_d, progress=progress)
        self.last_stats = {"n_visibilities": plan.shape[0] * plan.shape[1],
                           "n_kept": plan.n_kept, "n_offgrid": plan.n_offgrid,
                           "n_flagged": plan.n_flagged, "n_records": plan.n_records,
                           "compression_ratio": plan.compression_ratio}
        self._report_drops(plan)
        return plan.expand(records, weights, self.npol, dtype=self.complex_dtype)

    def _grid_on_device(self, grid) -> cla.Array:
        shape = (self.npol, self.ny, self.nx)
        if isinstance(grid, cla.Array):
            if grid.shape != shape or grid.dtype != self.complex_dtype:
                raise ValueError(f"grid must be {self.complex_dtype} of shape {shape}")
            return grid
        grid = np.asarray(grid)
        if grid.shape != shape:
            raise ValueError(f"grid must have shape (npol, ny, nx) = {shape}, got {grid.shape}")
        if grid.dtype.kind != "c":
            raise TypeError(f"grid must be complex, got {grid.dtype}")
        check_finite("grid", grid)
        return cla.to_device(self.queue, np.ascontiguousarray(grid, dtype=self.complex_dtype))

    def degrid_records(self, header: np.ndarray, grid: cla.Array,
                       progress: bool | None = None) -> np.ndarray:
        """Low level: (n_records, npol) unweighted predictions of prepared records."""
        header = np.ascontiguousarray(header, dtype=np.int32)
        n_records = header.shape[0]
        out = np.zeros((n_records, self.npol), self.complex_dtype)
        per_group = self.params.slots * self.params.records_per_slot
        wg = self.params.lanes * self.params.slots
        for start in self._launch_chunks(n_records, progress):
            stop = min(start + RECORDS_PER_LAUNCH, n_records)
            header_d = cla.to_device(self.queue, header[start:stop])
            out_d = cla.empty(self.queue, (stop - start, self.npol), self.complex_dtype)
            n_groups = -(-(stop - start) // per_group)
            self._kernel(self.queue, (n_groups * wg,), (wg,), header_d.data,
                         np.int32(stop - start), *(t.data for t in self._tables), grid.data,
                         np.int32(self.nx), np.int32(self.ny), out_d.data)
            out[start:stop] = out_d.get()
        return out


__all__ = ["Degridder", "DegridderParams", "default_degridder_params"]

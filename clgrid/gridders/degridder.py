"""Table-based degridding, the exact adjoint of :class:`clgrid.gridders.gridder.Gridder`.

:class:`Degridder` predicts visibilities from a grid with the gridder's GCF
tables and coordinate handling, on the gridding core: set points on the
device sorted by cell and table slice, one work-item per record of equal
points summing ``conj(GCF) * grid`` over its footprint once
(``interpolate_table_records`` in ``templates/core_interp.cl.mako``; for
wide tables by register blocks, ``core_interp_register.cl.mako``),
one writer per visibility, no atomics: deterministic.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from ..device.guard import one_thread_at_a_time

from .checks import check_finite
from .gcf import GCF
from .gridder import _TableOperation


class Degridder(_TableOperation):
    """Compile-once degridder: the exact adjoint of :class:`Gridder`.

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

    Predicts ``V_k = weight_k * sum conj(GCF) * grid`` (conjugated again for
    visibilities whose uvw was negated), with the same tables, coordinate
    rounding and drops as the gridder.  Parameters as for :class:`Gridder`;
    ``tiles`` (a :class:`clgrid.core.plan.TileShape`, a dict of its fields,
    or ``'auto'``: :func:`clgrid.core.table.table_tiles`) bins the points by
    tile instead, one work-item per visibility, not merged into records (the
    default, points sorted by cell and merged, is faster wherever points
    repeat).  On devices without fp64 the positions are float-float and the
    records' sums compensated.  On GPUs from support
    :data:`clgrid.core.register.REGISTER_DEGRID_MIN_SUPPORT` (on CPUs for
    separable tables wider than W 64) the records are degridded by register
    blocks (:class:`clgrid.core.register.RegisterInterpolator`:
    each grid point read once per block move, not once per record);
    ``register_params`` (a :class:`clgrid.core.register.RegisterParams` or a
    dict of its fields) sets that geometry and asks for it on any device.
    ``gcf_read`` (``'buffer'``, ``'image'``, ``'image-linear'``, as for
    :class:`Gridder`; an image degrids by register blocks on any device,
    and cannot go with ``tiles=``); None: an image for a full table where
    the device degrids by register blocks (GPUs from support 32) and holds
    it as one (:func:`clgrid.gridders.dispatch.choose_gcf_read`), else the
    buffer.
    """

    def __init__(self, context, gcf: GCF, nx: int, ny: int, cell_size_rad: float, *,
                 npol: int = 1, precision=np.float32, conjugate_negative_w: bool = True,
                 tiles=None, register_params=None, gcf_read: str | None = None):
        super().__init__(context, gcf, nx, ny, cell_size_rad, npol, precision,
                         conjugate_negative_w)
        from ..core.plan import TileShape, params_of
        from ..core.register import as_register_params, degrid_by_register
        from ..core.strategies import table_engine
        from ..core.table import table_tiles
        from .dispatch import choose_gcf_read
        # points sorted by cell and merged into records: one footprint a
        # record; tiles= asks for the tile bins and one a point
        method = "register" if tiles is None else "tiles"
        register_params = as_register_params(register_params)
        if register_params is not None and tiles is not None:
            raise ValueError("register_params= shapes degridding by records; tiles= asks "
                             "for one work-item a point instead: give one of them")
        if isinstance(tiles, str):
            if tiles != "auto":
                raise ValueError(f"tiles must be a TileShape, a dict of its fields, 'auto' "
                                 f"or None, got {tiles!r}")
            tiles = table_tiles(self.profile, gcf.support)
        if tiles is not None:
            read_method = "tiles"
        elif gcf_read not in (None, "buffer") or register_params is not None or \
                degrid_by_register(self.profile, gcf.support, gcf.separable):
            read_method = "register"   # by register blocks: the kernels that read images
        else:
            read_method = "records"
        #: How the table is read (``'buffer'``, ``'image'``, ``'image-linear'``) and why.
        self.gcf_read, self.gcf_read_reason = choose_gcf_read(
            self.profile, gcf.support, gcf.oversample, gcf.w_planes, self.real_dtype,
            separable=gcf.separable, method=read_method, gcf_read=gcf_read)
        self.table_grid = self._table_grid(self.gcf_read)
        self.engine = table_engine(self.queue, self.table_grid, self._tables, method=method,
                                   npol=npol, tiles=params_of(tiles, TileShape, "tiles"),
                                   register_params=register_params, spread=False)

    @one_thread_at_a_time
    def __call__(self, grid, uvw_m, freq_hz, weights=None, flags=None, *,
                 return_device: bool = False):
        """Predict (nrow, nchan, npol) visibilities from a (npol, ny, nx) grid
        (numpy or device array); zero where dropped or flagged."""
        plan = self.plan(uvw_m, freq_hz, flags)
        return self.degrid_plan(plan, grid, weights, return_device=return_device)

    @one_thread_at_a_time
    def degrid_plan(self, plan, grid, weights=None, *, return_device: bool = False):
        """Degrid with a plan from :meth:`plan`; ``return_device``: the
        ``pyopencl.array.Array`` instead of a numpy copy."""
        self.check_plan(plan)
        grid_d = self._grid_on_device(grid)
        wgt_d = self.upload_weights(weights, plan)
        shape = plan.shape + (plan.npol,)
        out_d = cla.zeros(self.queue, shape, self.complex_dtype)
        if plan.points.n_vis:
            self.engine.interpolate(plan, out_d, plan.npol, None, grid_d, wgt_d=wgt_d,
                                    mask_d=plan.flags_d)
        self.last_stats = self._stats(plan)
        self._report_drops(plan)
        return out_d if return_device else out_d.get()

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


__all__ = ["Degridder"]

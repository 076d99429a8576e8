"""The table gridders on the gridding core (:mod:`clgrid.core.table`).

Per call of :class:`clgrid.Gridder` or :class:`clgrid.Degridder`: the uvw,
frequencies, flags, visibilities and weights go to the device as they are
(no host pass over the visibilities); set points bins them there (flagged,
off-grid and non-finite positions counted), and one of the core's spreads
grids them with the GCF tables: output-owned tiles (no float atomics, the
same bits call after call) or register accumulation over records of equal
points (:mod:`clgrid.core.register`).  NaN/Inf in ``vis`` or ``weights`` is
found on the device among the gridded visibilities only (a flagged or
off-grid one is never used) and raises ``ValueError`` with the count.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..core.plan import TileShape, check_allocation, params_of
from ..core.setpoints import freq_scale
from ..core.register import (RecordScan, RegisterInterpolator, RegisterParams,
                             RegisterSpreader, degrid_by_register)
from ..core.table import (TableGrid, TableInterpolator, TablePoints, TableSetPoints,
                          TableSpreader, check_tiles, fit_staging, linear_steps, table_tiles)
from .dispatch import METHODS
from .gcf import GCF
from .checks import check_uvw_freq, check_vis_layout


@dataclasses.dataclass
class CorePlan:
    """Device set points of one (uvw, freq, flags): reusable across calls
    (``Gridder.grid_plan``, ``Degridder.degrid_plan``)."""

    points: TablePoints
    flags_d: cla.Array | None
    shape: tuple[int, int]
    npol: int

    @property
    def n_kept(self) -> int:
        return self.points.n_kept

    @property
    def n_offgrid(self) -> int:
        return self.points.n_offgrid

    @property
    def n_flagged(self) -> int:
        return self.points.n_flagged


def tile_shape(tiles) -> TileShape | None:
    """A :class:`TileShape` from a TileShape, a dict of its fields or None."""
    return params_of(tiles, TileShape, "tiles")


class CoreTableEngine:
    """Set points and spread of one :class:`clgrid.Gridder` on the core.

    ``method``: ``'tiles'`` (output-owned tiles, no atomics, the same bits
    every run) or
    ``'register'`` (Romein/Merry register accumulation over points sorted by
    cell, float atomics at flushes; :mod:`clgrid.core.register`), with
    ``register_params``, ``atomics`` and ``count_flushes`` for the latter.
    ``spread=False``: set points and interpolation only
    (:class:`clgrid.Degridder`).  ``gcf_read`` (:data:`clgrid.core.table.GCF_READS`):
    how the register kernels read the table; an image needs
    ``method='register'`` (a Degridder then degrids by register blocks),
    and ``'image-linear'`` sets the points at
    :func:`clgrid.core.table.linear_steps` positions per table step."""

    def __init__(self, queue: cl.CommandQueue, profile, gcf: GCF, nx: int, ny: int,
                 cell_size_rad: float, real_dtype, tables_d: list[cla.Array],
                 conjugate_negative_w: bool, tiles: TileShape | None = None, *,
                 method: str = "tiles", npol: int = 1,
                 register_params: RegisterParams | None = None, atomics: str | None = None,
                 count_flushes: bool = False, spread: bool = True, gcf_read: str = "buffer"):
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if gcf_read != "buffer" and method != "register":
            raise ValueError(f"gcf_read={gcf_read!r} reads the table in the register kernels: "
                             "method 'register'")
        table_real = gcf.real_tables
        steps = linear_steps(gcf.oversample, gcf.w_planes) if gcf_read == "image-linear" else 1
        self.table_grid = TableGrid(nx, ny, float(cell_size_rad), gcf.support,
                                    gcf.oversample * steps, gcf.w_planes,
                                    float(gcf.w_step_lambda), gcf.separable, table_real,
                                    bool(conjugate_negative_w), np.dtype(real_dtype),
                                    gcf_read, steps)
        self.table_grid.check()
        self.gcf_read = gcf_read
        self.queue, self.method, self.profile = queue, method, profile
        # a Degridder's records by register blocks: wide footprints, or asked for
        by_blocks = (method == "register" and not spread
                     and (register_params is not None or gcf_read != "buffer"
                          or degrid_by_register(profile, gcf.support, gcf.separable)))
        #: A Degridder's records by register blocks (the kernels that read images).
        self.by_blocks = by_blocks
        self.interpolator = TableInterpolator(
            queue, self.table_grid, tables_d,
            register=RegisterInterpolator(queue, self.table_grid, tables_d, npol,
                                          register_params) if by_blocks else None)
        if method == "register":
            self.tiles = None
            # the tile only shapes the set points' (unused) bins in cell order
            self.set_points = TableSetPoints(queue, self.table_grid, TileShape(8, 8), "cell")
            #: Runs of equal points (cell, table slice), cut once per plan.
            self.records = RecordScan(queue, self.table_grid)
            if spread:
                self.register = RegisterSpreader(queue, self.table_grid, tables_d, npol,
                                                 register_params, atomics, count_flushes)
            return
        self.tiles = fit_staging(self.table_grid, tiles if tiles is not None
                                 else table_tiles(profile, gcf.support), profile)
        check_tiles(self.table_grid, self.tiles, profile)
        self.set_points = TableSetPoints(queue, self.table_grid, self.tiles)
        if spread:
            self.spreader = TableSpreader(queue, self.table_grid, self.tiles, tables_d,
                                          self.set_points.rows, self.set_points.cols)

    def n_records(self, plan: CorePlan) -> int:
        """Footprints summed per call: the records of the cell order (runs of
        equal points), else one a kept point."""
        if self.method == "register":
            return self.records(plan.points).n_records
        return plan.n_kept

    @property
    def geometry(self) -> str:
        """The spread's launch geometry, in words."""
        if self.method == "register":
            p = self.register.params
            pols = f" pol{p.pol_block}" if p.pol_block else ""
            return (f"register {p.block_u}x{p.block_v}{pols} wg{self.register.wg_size} "
                    f"sub{self.register.n_sub} b{self.register.batch} "
                    f"rpg{p.points_per_group}")
        return f"tile {self.tiles.tile_u}x{self.tiles.lanes} g{self.tiles.groups}"

    def plan(self, uvw_m, freq_hz, flags=None, npol: int = 1) -> CorePlan:
        """Set points on the device for (nrow, 3) metres, (nchan,) Hz and
        optional flags broadcastable to (nrow, nchan, npol)."""
        uvw_m, freq_hz = check_uvw_freq(uvw_m, freq_hz, finite_uvw=False)
        shape = (uvw_m.shape[0], freq_hz.size)
        self._check_fits(shape[0] * shape[1], npol)
        uvw_d, scale_d = self.set_points.upload(uvw_m, freq_scale(freq_hz))
        flags_d = None
        if flags is not None:
            flags = np.broadcast_to(np.asarray(flags, dtype=bool), shape + (npol,))
            flags_d = cla.to_device(self.queue, np.ascontiguousarray(flags).view(np.uint8))
        points = self.set_points(uvw_d, scale_d, flags_d, npol)
        if points.n_nonfinite:
            raise ValueError(f"uvw_m contains NaN/Inf: {points.n_nonfinite} visibilities "
                             "without a finite position; flag them instead")
        return CorePlan(points, flags_d, shape, npol)

    def _check_fits(self, n_vis: int, npol: int) -> None:
        """Refuse, before allocating, a call whose per-visibility buffers (the
        visibilities, their cells, the sort's keys) exceed one allocation."""
        check_allocation(self.profile,
                         n_vis * max(npol * self.table_grid.complex_dtype.itemsize, 16),
                         f"{n_vis} visibilities of {npol} polarisations need {{size}} in one "
                         "device buffer",
                         "grid them with clgrid.StreamingGridder, which takes the rows in blocks")

    def upload_vis(self, vis, plan: CorePlan) -> cla.Array:
        check_vis_layout(vis, plan.shape + (plan.npol,))
        if isinstance(vis, cla.Array):
            if not vis.flags.c_contiguous:
                raise ValueError("device vis must be C-contiguous")
            return vis
        return cla.to_device(self.queue, np.ascontiguousarray(vis))

    def upload_weights(self, weights, plan: CorePlan) -> cla.Array | None:
        """Weights as (nrow, nchan, npol) in the grid precision on the device
        (a broadcast or another dtype is materialised on the host first)."""
        if weights is None:
            return None
        shape = plan.shape + (plan.npol,)
        if isinstance(weights, cla.Array):
            if weights.shape != shape or weights.dtype != self.table_grid.real:
                raise ValueError(f"device weights must be {self.table_grid.real} of shape {shape}")
            return weights
        weights = np.asarray(weights)
        if weights.dtype.kind not in "fiu":
            raise TypeError(f"weights must be real, got {weights.dtype}")
        try:
            weights = np.broadcast_to(weights, shape)
        except ValueError:
            raise ValueError(f"weights of shape {weights.shape} do not broadcast to "
                             f"{shape}") from None
        return cla.to_device(self.queue, np.ascontiguousarray(weights, self.table_grid.real))

    def check_plan(self, plan) -> None:
        """A CorePlan made by set points like this engine's (another gridder's,
        binned for other tiles or another grid, would be read out of bounds)."""
        if not isinstance(plan, CorePlan):
            raise TypeError(f"this gridder takes the CorePlan of its own plan(), got "
                            f"{type(plan).__name__}")
        if plan.points.binning != self.set_points.binning:
            raise ValueError("this CorePlan was made by a gridder with another grid, table or "
                             "tile shape; make it with this gridder's plan()")

    def grid(self, plan: CorePlan, vis, weights, grid_d: cla.Array, accumulate: bool) -> None:
        """Spread ``vis`` ((nrow, nchan, npol), numpy or device) into ``grid_d``."""
        self.check_plan(plan)
        vis_d = self.upload_vis(vis, plan)
        wgt_d = self.upload_weights(weights, plan)
        if self.method == "register":
            self.register(plan.points, vis_d, wgt_d, plan.flags_d, grid_d, accumulate)
            return
        self.spreader(plan.points, vis_d, wgt_d, plan.flags_d, grid_d, accumulate)

    def degrid(self, plan: CorePlan, grid_d: cla.Array, weights) -> cla.Array:
        """(nrow, nchan, npol) visibilities of ``grid_d`` ((npol, ny, nx),
        on the device) on the device; zero where dropped or flagged."""
        self.check_plan(plan)
        wgt_d = self.upload_weights(weights, plan)
        records = self.records(plan.points) if self.method == "register" else None
        out_d = self.interpolator(plan.points, grid_d, plan.npol, wgt_d, plan.flags_d, records)
        return out_d.reshape(plan.shape + (plan.npol,)) if plan.points.n_vis else \
            cla.zeros(self.queue, plan.shape + (plan.npol,), self.table_grid.complex_dtype)


__all__ = ["CorePlan", "CoreTableEngine", "tile_shape"]

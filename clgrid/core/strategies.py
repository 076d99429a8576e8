"""Which stages the one engine runs, per path: the core's only place of that choice.

:func:`imaging_engine` gives the engine of ``vis2dirty`` / ``dirty2vis`` /
``Imager`` (ES kernel set points, spread and interpolation on the device's
tile, FFT and correction); :func:`table_engine` the engine of the table
``Gridder`` / ``Degridder`` (table set points by tile or by cell, the
tile or the register spread, buffer or image reads of the GCF, degridding
a point, a record or register blocks at a time; no image stage).  Both
return a :class:`clgrid.core.engine.Engine`, which drives the stages the
same way.  A new spread is a class with the :class:`clgrid.core.engine.SpreadStage`
protocol, chosen here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.profiles import DeviceProfile
from .engine import Engine, Stages
from .image import ImageStage
from .plan import (GridLayout, ImageGeometry, TileShape, check_points_fit, cut_blocks,
                   planes_per_pass, row_blocks)
from .register import (RecordScan, RegisterInterpolator, RegisterParams, RegisterSpreader,
                       degrid_by_register, table_bound)
from .setpoints import (EsPositions, SetPoints, freq_scale, needs_float_float,
                        positions_to_device)
from .spread import EsKernel, Interpolator, Spreader, splits_bins
from .table import (TableGrid, TableKernel, TablePositions, check_tiles, fit_staging,
                    table_tiles)
from .tuning.tiles import cached_tiles

#: The table gridders' spreads: output-owned tiles (no float atomics) or
#: Romein/Merry register accumulation over records of equal points.
TABLE_SPREADS = ("tiles", "register")


def imaging_tiles(queue: cl.CommandQueue, geometry: ImageGeometry,
                  layout: GridLayout) -> TileShape:
    """The spreading tile an imaging engine on ``queue`` takes by default: the
    device's tuned one (``clgrid tune imaging``), else
    :meth:`TileShape.for_device`."""
    profile = DeviceProfile.from_device(queue.device)
    support = layout.choice.support
    return (cached_tiles(profile, support, geometry.grid_real, geometry.do_w)
            or TileShape.for_device(profile, support, geometry.do_w))


def imaging_engine(queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                   uvw_d: cla.Array, freq_hz: np.ndarray,
                   planes: tuple[int, int] | None = None, fft_backend: str | None = None,
                   tiles: TileShape | None = None, vis_per_block: int | None = None,
                   plane_rows: dict[int, tuple[int, int]] | None = None) -> Engine:
    """The engine of one observation's imaging on one device.

    Parameters
    ----------
    queue
        Command queue of the device.
    geometry
        Image and conventions (:class:`clgrid.core.plan.ImageGeometry`).
    layout
        Kernel, grid and w planes (:class:`clgrid.core.plan.GridLayout`),
        shared with other devices gridding other rows of the observation.
    uvw_d, freq_hz
        (nrow, 3) device array of baselines in metres, as
        :func:`clgrid.core.setpoints.positions_to_device` gives it (float64,
        or float-float pairs on devices without fp64); (nchan,) Hz.
    planes
        ``(first, stop)``: grid only these w planes (a device's share of a
        multi-device w-stacking job); default all.
    fft_backend
        As for :class:`clgrid.core.fft.DeviceFFT`.
    tiles
        Spreading tile; default the device's tuned one (``clgrid tune imaging``,
        :func:`clgrid.core.tuning.tiles.cached_tiles`), else
        :meth:`TileShape.for_device` (tests force the GPU shape on CPUs with it).
    vis_per_block
        Visibilities per row block (see :func:`clgrid.core.plan.row_blocks`);
        default from the device.
    plane_rows
        With ``planes``, the rows an end plane shared with another device
        takes (:class:`clgrid.core.image.ImageStage`); not with the CPU
        vector tile, which cannot add a row block to planes.
    """
    profile = DeviceProfile.from_device(queue.device)
    support = layout.choice.support
    float_float = needs_float_float(queue, geometry)
    tiles = tiles or imaging_tiles(queue, geometry, layout)
    tiles.check(support)
    tiles.check_device(profile)
    freq_scale_d = positions_to_device(queue, freq_scale(freq_hz), float_float)
    n_chan = len(freq_hz)
    first, stop = planes if planes is not None else (0, layout.n_planes)
    image = ImageStage(geometry, layout, (first, stop), fft_backend, plane_rows)
    if tiles.vector:
        if plane_rows:
            raise ValueError("plane_rows needs a spreader that adds row blocks to planes, "
                             "not the CPU vector tile")
        vis_per_block = 0   # spread_vector writes every tile: one block
    # refuse a plane or an image that cannot fit before the points' bins
    # (one per tile of the grid) take host and device memory
    planes_per_pass(profile, layout, image.grid_complex, uvw_d.nbytes, image.image_bytes)
    # one decision for both: set points split the bins, the spread reads them so
    split_bins = splits_bins(tiles, layout, geometry.do_w)
    set_points = SetPoints(queue, EsPositions(geometry, layout, split_bins), tiles)
    bounds = cut_blocks(row_blocks(profile, uvw_d.shape[0], n_chan, vis_per_block),
                        [row for rows in (plane_rows or {}).values() for row in rows])
    check_points_fit(profile, uvw_d.shape[0] * n_chan,
                     max(row_stop - row0 for row0, row_stop in bounds) * n_chan,
                     geometry.grid_real)
    kernel = EsKernel(geometry, layout)
    # the GPU kernel's blocks of w planes no longer than this device's planes,
    # so that no plane group idles in every work item
    spread_tiles = (dataclasses.replace(tiles, plane_block=stop - first)
                    if geometry.do_w and not tiles.vector and tiles.plane_block > stop - first
                    else tiles)
    stages = Stages(points=set_points,
                    spread=lambda q: Spreader(q, kernel, spread_tiles, split_bins),
                    interpolate=lambda q: Interpolator(q, kernel, tiles),
                    image=image, tiles=tiles)
    return Engine(queue, stages, uvw_d, freq_scale_d, bounds)


def table_engine(queue: cl.CommandQueue, grid: TableGrid, tables_d: list[cla.Array], *,
                 method: str = "tiles", npol: int = 1, tiles: TileShape | None = None,
                 register_params: RegisterParams | None = None, atomics: str | None = None,
                 count_flushes: bool = False, fixed_point: bool = False,
                 spread: bool = True) -> Engine:
    """The engine of one table gridder (``Gridder``, or with ``spread=False``
    a ``Degridder``: set points and interpolation only).

    ``method``: ``'tiles'`` (output-owned tiles, no atomics, the same bits
    every run; ``tiles`` default :func:`clgrid.core.table.table_tiles`, its
    batch fitted to the local memory) or ``'register'`` (points sorted by
    cell and merged into records; Romein/Merry register accumulation,
    float atomics at flushes, with ``register_params``, ``atomics`` and
    ``count_flushes``; :mod:`clgrid.core.register`; ``fixed_point``: its
    flushes in 64-bit fixed point, the same bits every run).  ``grid.gcf_read``
    (:data:`clgrid.core.table.GCF_READS`): how the register kernels read
    the table; an image needs ``method='register'`` (a Degridder then
    degrids by register blocks).  A Degridder of the cell order degrids
    by register blocks where ``register_params`` or an image asks for it,
    or :func:`clgrid.core.register.degrid_by_register` says so, else a
    record at a time."""
    if method not in TABLE_SPREADS:
        raise ValueError(f"method must be one of {TABLE_SPREADS}, got {method!r}")
    if grid.gcf_read != "buffer" and method != "register":
        raise ValueError(f"gcf_read={grid.gcf_read!r} reads the table in the register "
                         "kernels: method 'register'")
    grid.check()
    profile = DeviceProfile.from_device(queue.device)
    #: The shared stages' configuration: the tables as the kernel source.
    kernel = TableKernel(grid, tuple(tables_d))
    if method == "register":
        # the tile only shapes the set points' (unused) bins in cell order
        set_points = SetPoints(queue, TablePositions(grid, "cell"), TileShape(8, 8))
        #: Runs of equal points (cell, table slice), cut once per plan.
        records = RecordScan(queue, grid)
        by_blocks = not spread and (register_params is not None or grid.gcf_read != "buffer"
                                    or degrid_by_register(profile, grid.support,
                                                          grid.separable))

        def interpolator(q):
            return Interpolator(q, kernel, records=records, register=(
                RegisterInterpolator(q, grid, tables_d, npol, register_params)
                if by_blocks else None))

        # the fixed-point scale's table factor: once, not per workspace
        bound = table_bound(tables_d, grid.separable) if fixed_point and spread else None

        def spreader(q):
            return RegisterSpreader(q, grid, tables_d, npol, register_params, atomics,
                                    count_flushes, fixed_point, bound)
    else:
        tiles = fit_staging(grid, tiles if tiles is not None
                            else table_tiles(profile, grid.support), profile)
        check_tiles(grid, tiles, profile)
        set_points = SetPoints(queue, TablePositions(grid), tiles)
        records = None

        def interpolator(q):
            return Interpolator(q, kernel)

        def spreader(q):
            return Spreader(q, kernel, tiles)
    return Engine(queue, Stages(points=set_points, spread=spreader if spread else None,
                                interpolate=interpolator, records=records,
                                tiles=tiles if method == "tiles" else None))


__all__ = ["TABLE_SPREADS", "imaging_engine", "imaging_tiles", "table_engine"]

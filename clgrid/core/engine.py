"""The gridding core: plan -> set points -> spread / interpolate -> FFT -> correct.

:class:`GriddingEngine` ties the stages together for one observation
geometry on one device; every imaging path (``clgrid.vis2dirty`` /
``dirty2vis`` / ``Imager``, ``clgrid image``, several devices, Dask) runs
through it.  It works on device arrays only; host arrays, weights and the
ducc0-style API are :mod:`clgrid.imaging`'s business.

Per call, for each polarisation and each pass of w planes that fits the
device (all planes at once where memory allows)::

    vis2dirty:  spread (all planes of the pass) -> batched backward FFT
                -> planes_to_dirty (phase screens, correction, fixed order)
    dirty2vis:  dirty_to_planes -> batched forward FFT -> interpolate (+=)

The bins (set points) depend on the geometry only and are computed once,
at construction, for each row block (:func:`clgrid.core.plan.row_blocks`):
on GPUs the visibilities are gridded in blocks of rows, so that the upload
of one block overlaps the spreading of the one before (``ready``); the first
block writes the planes and later ones add to them, always in block order.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Callable

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from ..device.profiles import DeviceProfile
from .correct import Corrector
from .fft import DeviceFFT, Pruning
from .plan import (GridLayout, ImageGeometry, TileShape, check_points_fit, planes_per_pass,
                   row_blocks)
from .setpoints import PointSet, SetPoints, freq_scale, needs_float_float, positions_to_device
from .spread import Interpolator, Spreader
from .transfer import Uploader, row_view
from .tuning.tiles import cached_tiles


@dataclasses.dataclass
class RowBlock:
    """Rows ``first .. stop - 1`` of the observation and their bins."""

    first: int
    stop: int
    points: PointSet
    uvw_d: cla.Array


def _view(array_d: cla.Array | None, block: RowBlock) -> cla.Array | None:
    """The rows of ``block`` of a (row, ...) device array, or None."""
    return None if array_d is None else row_view(array_d, block.first, block.stop)


#: ``ready(block index)``: events a block's spreading must wait for (its
#: visibilities' upload); called in block order, each index once.
Ready = Callable[[int], list]


class GriddingEngine:
    """Compile-once gridding and degridding of one geometry on one device.

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
    """

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                 uvw_d: cla.Array, freq_hz: np.ndarray,
                 planes: tuple[int, int] | None = None, fft_backend: str | None = None,
                 tiles: TileShape | None = None, vis_per_block: int | None = None):
        self.queue = queue
        self.profile = DeviceProfile.from_device(queue.device)
        self.geometry, self.layout = geometry, layout
        self.fft_backend = fft_backend
        self.float_float = needs_float_float(queue, geometry)
        self.tiles = tiles or cached_tiles(self.profile, layout.choice.support,
                                           geometry.grid_real, geometry.do_w) \
            or TileShape.for_device(self.profile, layout.choice.support)
        self.tiles.check(layout.choice.support)
        self.tiles.check_device(self.profile)
        self.uvw_d = uvw_d
        self.freq_scale_d = positions_to_device(queue, freq_scale(freq_hz), self.float_float)
        self.n_chan = len(freq_hz)
        self.grid_complex = np.dtype(np.complex64 if geometry.grid_real == np.float32
                                     else np.complex128)
        first, stop = planes if planes is not None else (0, layout.n_planes)
        self.plane_range = (int(first), int(stop))
        if self.tiles.vector:
            vis_per_block = 0   # spread_vector writes every tile: one block
        image_bytes = geometry.npix_x * geometry.npix_y * geometry.grid_real.itemsize
        # refuse a plane or an image that cannot fit before the points' bins
        # (one per tile of the grid) take host and device memory
        planes_per_pass(self.profile, layout, self.grid_complex, uvw_d.nbytes, image_bytes)
        set_points = SetPoints(queue, geometry, layout, self.tiles)
        self.blocks = []
        bounds = row_blocks(self.profile, uvw_d.shape[0], self.n_chan, vis_per_block)
        check_points_fit(self.profile, uvw_d.shape[0] * self.n_chan,
                         max(stop - start for start, stop in bounds) * self.n_chan,
                         geometry.grid_real)
        for row0, row_stop in bounds:
            block_uvw_d = row_view(uvw_d, row0, row_stop)
            self.blocks.append(RowBlock(row0, row_stop,
                                        set_points(block_uvw_d, self.freq_scale_d), block_uvw_d))
        other_bytes = uvw_d.nbytes + sum(self._block_bytes(b) for b in self.blocks)
        self.n_pass = min(planes_per_pass(self.profile, layout, self.grid_complex, other_bytes,
                                          image_bytes), max(stop - first, 1))
        self.pruning = self._pruning()
        self._pool = WorkspacePool(self)
        #: The workspace made with the plan, on ``queue``; the attributes
        #: ``spreader``, ``planes_d``, ``fft``... are its (see :meth:`lease`).
        self.primary = self._pool.primary

    def _block_bytes(self, block: RowBlock) -> int:
        """Device bytes of a block's bins, its records and (GPU, counted per
        block to be safe) its gathered values."""
        points = block.points
        return (points.sorted_index.nbytes * 2 + points.bin_start.nbytes + points.cells.nbytes
                + points.fracs.nbytes + points.n_valid * self.grid_complex.itemsize)

    def _pruning(self) -> Pruning:
        """Grid rows the visibilities' kernels reach and grid columns of image
        pixels: a pruned FFT transforms only those (ducc0's lever)."""
        layout, tiles = self.layout, self.tiles
        used = sum(np.diff(b.points.bin_start_host.astype(np.int64))
                   .reshape(b.points.ntiles_u, -1).sum(axis=1) for b in self.blocks) > 0
        reach = np.arange(tiles.tile_u + layout.choice.support - 1)
        rows = np.unique((np.flatnonzero(used)[:, None] * tiles.tile_u + reach).ravel()
                         % layout.nu) if used.any() else np.zeros(0, np.int64)
        offsets = np.arange(self.geometry.npix_y) - self.geometry.npix_y // 2
        cols = np.where(offsets < 0, offsets + layout.nv, offsets)
        return Pruning(rows, cols)

    # ---------------------------------------------------------- passes
    def passes(self) -> list[tuple[int, int]]:
        """(first plane, plane count) of every pass, in order."""
        first, stop = self.plane_range
        return [(p, min(self.n_pass, stop - p)) for p in range(first, stop, self.n_pass)]

    @property
    def n_vis(self) -> int:
        return self.uvw_d.shape[0] * self.n_chan

    @property
    def n_invalid(self) -> int:
        """Visibilities with non-finite uvw, left out."""
        return sum(b.points.n_invalid for b in self.blocks)

    @property
    def plan_bytes(self) -> int:
        """Device memory of the plan (uvw, bins, records), shared by all calls."""
        return self.uvw_d.nbytes + sum(self._block_bytes(b) for b in self.blocks)

    @property
    def device_bytes(self) -> int:
        """Device memory this engine keeps between calls: the plan and every
        workspace made so far."""
        return self.plan_bytes + self._pool.device_bytes

    def lease(self, queue: cl.CommandQueue | None = None) -> "Lease":
        """A workspace of this plan for one call (``with engine.lease(q) as ws``).

        Scratch -- the planes, FFT plans, kernel objects and staging -- is
        the workspace's own: two calls holding leases never share any.
        ``queue`` is the caller's: a workspace on it is preferred; another
        one is ordered after the caller's earlier commands on entry, and
        the caller's queue after the workspace's commands on exit.  A new
        workspace is made while the pool's budget allows
        (:class:`WorkspacePool`), else the call waits for one to be free."""
        return Lease(self._pool, queue or self.queue)

    # the primary workspace's stages, for single-threaded callers
    spreader = property(lambda self: self.primary.spreader)
    interpolator = property(lambda self: self.primary.interpolator)
    corrector = property(lambda self: self.primary.corrector)
    planes_d = property(lambda self: self.primary.planes_d)
    fft = property(lambda self: self.primary.fft)

    # ---------------------------------------------------------- gridding
    def grid_pass(self, vis_d: cla.Array, npol: int, pol: int, plane0: int, n_pass: int,
                  wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None,
                  ready: Ready | None = None, ws: "Workspace | None" = None) -> cla.Array:
        """Spread one polarisation into planes ``plane0 ..`` (no FFT); returns
        the planes buffer of workspace ``ws`` (default the primary; its
        first ``n_pass`` planes are valid).  ``vis_d``, ``wgt_d``,
        ``mask_d``: (row, chan, ...) device arrays; ``ready``: see
        :data:`Ready` (default: the data is on the device already)."""
        ws = ws or self.primary
        for index, block in enumerate(self.blocks):
            if ready is not None:
                events = ready(index)
                if events:   # the block's spreading waits for its upload
                    cl.enqueue_barrier(ws.queue, wait_for=events)
            ws.spreader(block.points, block.uvw_d, self.freq_scale_d, _view(vis_d, block),
                        npol, pol, ws.planes_d, plane0, n_pass, _view(wgt_d, block),
                        _view(mask_d, block), accumulate=index > 0)
        return ws.planes_d

    def planes_to_dirty(self, plane0: int, n_pass: int, dirty_d: cla.Array,
                        prune: bool = True, accumulate: bool = True,
                        ws: "Workspace | None" = None) -> None:
        """Backward FFT of the planes buffer and its corrected sum added into
        ``dirty_d`` (written over it with ``accumulate=False``).
        ``prune=False`` for grids holding other engines' visibilities too (a
        multi-device sum), whose rows this engine's pruning does not know."""
        ws = ws or self.primary
        ws.fft.backward(ws.planes_d, self.pruning if prune else None)
        ws.corrector.planes_to_dirty(ws.planes_d, plane0, n_pass, dirty_d,
                                     ws.fft.backward_scale, accumulate)

    def grid_to_dirty(self, grids, pol: int, dirty_d: cla.Array,
                      ws: "Workspace | None" = None) -> None:
        """Backward FFT and correction of ``grids[pol]`` written over ``dirty_d``
        (no w-gridding).  ``grids``: (npol, nu, nv) uv grids, numpy or a device
        array on this engine's context, holding other engines' visibilities
        too (a sum over devices or Dask chunks): transformed unpruned."""
        ws = ws or self.primary
        if isinstance(grids, cla.Array):
            plane_bytes = self.layout.nu * self.layout.nv * self.grid_complex.itemsize
            cl.enqueue_copy(ws.queue, ws.planes_d.data, grids.data, byte_count=plane_bytes,
                            src_offset=pol * plane_bytes)
        else:
            ws.planes_d.set(np.ascontiguousarray(grids[pol], self.grid_complex)
                            .reshape(ws.planes_d.shape), queue=ws.queue)
        self.planes_to_dirty(0, 1, dirty_d, prune=False, accumulate=False, ws=ws)

    def vis2dirty(self, vis_d: cla.Array, npol: int, pol: int,
                  wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None,
                  ready: Ready | None = None, ws: "Workspace | None" = None) -> cla.Array:
        """(npix_x, npix_y) dirty image of polarisation ``pol`` on the device,
        in grid precision, made in workspace ``ws`` (default the primary).
        ``vis_d``: complex, (row, chan[, pol]); ``ready``: see :data:`Ready`
        (only the first pass waits)."""
        g = self.geometry
        ws = ws or self.primary
        dirty_d = cla.empty(ws.queue, (g.npix_x, g.npix_y), g.grid_real)
        for index, (plane0, n_pass) in enumerate(self.passes()):
            self.grid_pass(vis_d, npol, pol, plane0, n_pass, wgt_d, mask_d, ready, ws)
            ready = None
            self.planes_to_dirty(plane0, n_pass, dirty_d, accumulate=index > 0, ws=ws)
        return dirty_d

    # ---------------------------------------------------------- degridding
    def dirty2vis(self, images_d: list[cla.Array], wgt_d: cla.Array | None = None,
                  mask_d: cla.Array | None = None,
                  block_done: Callable[[cla.Array, RowBlock, cl.Event], None] | None = None,
                  ws: "Workspace | None" = None) -> cla.Array:
        """(n_vis, npol) visibilities of npol (npix_x, npix_y) device images
        (grid precision).  ``block_done(out_d, block, event)`` is called as
        soon as a block's rows of the (n_rows, n_chan, npol) result ``out_d``
        are final (its last interpolation is enqueued; the event marks its
        end), so that their download can overlap the blocks after it."""
        npol = len(images_d)
        ws = ws or self.primary
        shape = (self.uvw_d.shape[0], self.n_chan, npol)
        dtype = np.dtype(np.complex64 if self.geometry.vis_real == np.float32
                         else np.complex128)
        # The first pass writes every valid point, so zeros are needed only for
        # invalid ones, and where the output is cut into row blocks (see row_view).
        fresh = self.n_invalid == 0 and len(self.blocks) == 1
        out_d = (cla.empty if fresh else cla.zeros)(ws.queue, shape, dtype)
        passes = self.passes()
        for pol, image_d in enumerate(images_d):
            for index, (plane0, n_pass) in enumerate(passes):
                ws.corrector.dirty_to_planes(image_d, plane0, n_pass, ws.planes_d)
                ws.fft.forward(ws.planes_d, self.pruning)
                final = pol == npol - 1 and index == len(passes) - 1
                for block in self.blocks:
                    ws.interpolator(block.points, block.uvw_d, self.freq_scale_d,
                                    _view(out_d, block), npol, pol, ws.planes_d, plane0,
                                    n_pass, _view(wgt_d, block), _view(mask_d, block),
                                    accumulate=index > 0)
                    if final and block_done is not None:
                        block_done(out_d, block, cl.enqueue_marker(ws.queue))
        return out_d.reshape(self.n_vis, npol)





# ------------------------------------------------------------------ scratch
class Workspace:
    """One call's scratch for a :class:`GriddingEngine`'s plan: its own
    queue, kernel objects (spreader, interpolator, corrector: OpenCL kernel
    arguments are per kernel object), w-plane buffer, FFT plan and host
    staging.  Made by :class:`WorkspacePool`; used by one call at a time."""

    def __init__(self, engine: "GriddingEngine", queue: cl.CommandQueue,
                 fft_backend: str | None):
        g, layout, tiles = engine.geometry, engine.layout, engine.tiles
        self.queue = queue
        self.spreader = Spreader(queue, g, layout, tiles)
        self.interpolator = Interpolator(queue, g, layout, tiles)
        self.corrector = Corrector(queue, g, layout)
        self.planes_d = cla.empty(queue, (engine.n_pass, layout.nu, layout.nv),
                                  engine.grid_complex)
        self.fft = DeviceFFT(queue, self.planes_d.shape, engine.grid_complex, fft_backend)
        self.uploader = Uploader(queue)
        #: Scratch of the count reductions (a pool that keeps its buffers).
        self.scratch = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))

    @property
    def device_bytes(self) -> int:
        """The planes and the correction (the bulk of a workspace)."""
        return self.planes_d.nbytes + self.corrector.corr_d.nbytes


class WorkspacePool:
    """The workspaces of one plan, bounded in device bytes.

    A lease takes a free workspace (one on the caller's queue first), makes
    a new one while all of them together stay within ``budget_bytes``
    (default a quarter of the device's memory, at least one workspace:
    ``CLGRID_WORKSPACE_MB`` overrides), and otherwise waits for one to be
    returned.  Nothing here grows with the number of calls: only with the
    number of calls at the same time, up to the budget."""

    def __init__(self, engine: "GriddingEngine", budget_bytes: int | None = None):
        self.engine = engine
        self._free: list[Workspace] = []
        self._all: list[Workspace] = []
        self._ready = threading.Condition()
        self.budget_bytes = budget_bytes if budget_bytes is not None else workspace_budget(
            engine.profile)
        self.primary = self._make(engine.queue)
        self._free.append(self.primary)

    @property
    def device_bytes(self) -> int:
        return sum(ws.device_bytes for ws in self._all)

    @property
    def count(self) -> int:
        """Workspaces made so far."""
        return len(self._all)

    def _make(self, queue: cl.CommandQueue) -> Workspace:
        ws = Workspace(self.engine, queue, self.engine.fft_backend)
        self._all.append(ws)
        return ws

    def take(self, queue: cl.CommandQueue) -> Workspace:
        """A workspace for a call on ``queue`` (see the class notes)."""
        with self._ready:
            while True:
                for ws in self._free:
                    if ws.queue.int_ptr == queue.int_ptr:
                        self._free.remove(ws)
                        return ws
                grows = (self.device_bytes + self.primary.device_bytes <= self.budget_bytes
                         and same_device(queue, self.engine.queue))
                if grows:
                    return self._make(queue)
                if self._free:
                    return self._free.pop(0)
                self._ready.wait()

    def give(self, ws: Workspace) -> None:
        with self._ready:
            self._free.append(ws)
            self._ready.notify()


def same_device(queue: cl.CommandQueue, other: cl.CommandQueue) -> bool:
    """Whether two queues are on one context and device."""
    return (queue.context.int_ptr == other.context.int_ptr
            and queue.device.int_ptr == other.device.int_ptr)


def workspace_budget(profile: DeviceProfile) -> int:
    """Device bytes all workspaces of one plan may hold together."""
    override = os.environ.get("CLGRID_WORKSPACE_MB")
    if override:
        return int(float(override) * 2 ** 20)
    return profile.global_mem_bytes // 4


class Lease:
    """``with engine.lease(queue) as ws``: a workspace for one call, ordered
    against the caller's queue where it runs on another (see
    :meth:`GriddingEngine.lease`)."""

    def __init__(self, pool: WorkspacePool, queue: cl.CommandQueue):
        self.pool, self.queue = pool, queue
        self.ws: Workspace | None = None

    def __enter__(self) -> Workspace:
        if not same_device(self.queue, self.pool.engine.queue):
            raise ValueError("the queue given is not on the plan's context and device")
        self.ws = self.pool.take(self.queue)
        if self.ws.queue.int_ptr != self.queue.int_ptr:
            # the caller's device arrays may still be being written there
            cl.enqueue_barrier(self.ws.queue, wait_for=[cl.enqueue_marker(self.queue)])
        return self.ws

    def __exit__(self, *exc) -> None:
        ws, self.ws = self.ws, None
        if ws.queue.int_ptr != self.queue.int_ptr:
            # results left on the device are the caller's once this is done
            cl.enqueue_barrier(self.queue, wait_for=[cl.enqueue_marker(ws.queue)])
        self.pool.give(ws)


__all__ = ["GriddingEngine", "Lease", "Ready", "RowBlock", "Workspace", "WorkspacePool",
           "same_device", "workspace_budget"]

"""Gridding core, the image stage: w planes <-> dirty image (FFT, then correction).

The imaging path's last stage (:class:`clgrid.core.engine.Engine` with
``Stages.image``); the table gridders have none (their caller's grid is the
target).  :class:`ImageStage` holds what the stage plans from the geometry
and the observation -- the planes a pass holds, the pruned FFT's rows and
columns -- makes each workspace's part (:class:`ImageScratch`: the w-plane
buffer, its FFT plan (:mod:`clgrid.core.fft`) and the correction
(:mod:`clgrid.core.correct`)), and drives the imaging path's calls through
its engine (the engine itself knows no path), per polarisation and per pass
of w planes that fits the device (all planes at once where memory allows)::

    vis2dirty:  spread (all planes of the pass) -> batched backward FFT
                -> planes_to_dirty (phase screens, correction, fixed order)
    dirty2vis:  dirty_to_planes -> batched forward FFT -> interpolate (+=)

``grid_pass`` and ``grid_to_dirty`` split ``vis2dirty`` for grids summed
elsewhere (several devices, Dask chunks).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.profiles import DeviceProfile
from .correct import Corrector
from .engine import Engine, Ready, RowBlock, Workspace
from .fft import DeviceFFT, Pruning
from .plan import (GridLayout, ImageGeometry, TileShape, check_points_fit, core_memory_budget,
                   planes_per_pass)
from .trace import stage


@dataclasses.dataclass
class ImageScratch:
    """One workspace's planes buffer, FFT plan and correction."""

    planes_d: cla.Array
    fft: DeviceFFT
    corrector: Corrector


class ImageStage:
    """FFT and correction of the w planes ``plane_range`` of one geometry
    and layout (``fft_backend``: as for :class:`clgrid.core.fft.DeviceFFT`),
    and the imaging path's calls on the engine it is bound to
    (:meth:`vis2dirty`, :meth:`dirty2vis`, :meth:`grid_pass`,
    :meth:`grid_to_dirty`): ``engine.image`` of an imaging engine.

    ``plane_rows``: for a piece of a job of several devices that shares its
    first or last plane with the next device, that plane's rows (first,
    stop) this piece grids and predicts, ``{plane: (first, stop)}``; the
    engine's row blocks must not straddle them
    (:func:`clgrid.core.plan.cut_blocks`), and its spreader must add a
    block to planes (not the CPU vector tile)."""

    def __init__(self, geometry: ImageGeometry, layout: GridLayout,
                 plane_range: tuple[int, int], fft_backend: str | None = None,
                 plane_rows: dict[int, tuple[int, int]] | None = None):
        self.geometry, self.layout = geometry, layout
        self.plane_rows = dict(plane_rows or {})
        ends = {int(plane_range[0]), int(plane_range[1]) - 1}
        for plane, (first, stop) in self.plane_rows.items():
            if plane not in ends or not 0 <= first < stop:
                raise ValueError(f"plane_rows: plane {plane} rows ({first}, {stop}) must be an "
                                 f"end plane of {tuple(plane_range)} and a non-empty row range")
        self.grid_complex = np.dtype(np.complex64 if geometry.grid_real == np.float32
                                     else np.complex128)
        self.plane_range = (int(plane_range[0]), int(plane_range[1]))
        self.fft_backend = fft_backend
        #: The engine whose observation this stage images (:meth:`bind`).
        self.engine: Engine | None = None
        #: Planes a pass holds, and the pruned FFT's rows and columns.
        self.n_pass = 0
        self.pruning: Pruning | None = None
        #: Device bytes of the engine's plan (uvw, bins, records, values).
        self.plan_bytes = 0

    def bind(self, engine: Engine) -> None:
        """Plan the passes of ``engine``'s observation: its plan's bytes, the
        planes a pass holds beside them and the pruned FFT (made before the
        engine's workspaces, which hold a pass's planes)."""
        self.engine = engine
        self.plan_bytes = engine.uvw_d.nbytes + self.points_bytes(engine.plan)
        self.n_pass = self.planes_per_pass(engine.profile, self.plan_bytes)
        self.pruning = self.pruned(engine.plan.blocks, engine.tiles)

    def fits_second_plan(self) -> bool:
        """Whether a second plan of the observation in one row block
        (:meth:`Engine.plan_for`) fits: no plane shared with another device
        (whose rows cut the blocks), its largest buffer within one
        allocation, and its bytes within the planes' share of the memory
        beside a pass's planes, the first plan and the images."""
        engine = self.engine
        if self.plane_rows:
            return False
        plan = engine.plan
        plane_bytes = self.layout.nu * self.layout.nv * self.grid_complex.itemsize
        try:
            check_points_fit(engine.profile, plan.n_rows * plan.n_chan,
                             plan.n_rows * plan.n_chan, self.geometry.grid_real)
        except MemoryError:
            return False
        budget = core_memory_budget(engine.profile)
        return (2 * self.plan_bytes + self.n_pass * plane_bytes + 3 * self.image_bytes
                <= budget)

    def points_bytes(self, plan) -> int:
        """Device bytes of a plan's row blocks (see :meth:`_block_bytes`)."""
        return sum(self._block_bytes(b) for b in plan.blocks)

    def _block_bytes(self, block: RowBlock) -> int:
        """Device bytes of a block's bins, its records and (GPU, counted per
        block to be safe) its gathered values."""
        points = block.points
        split = points.split_start.nbytes if points.split_start is not None else 0
        return (points.sorted_index.nbytes * 2 + points.bin_start.nbytes + split
                + points.cells.nbytes + points.fracs.nbytes
                + points.n_valid * self.grid_complex.itemsize)

    @property
    def image_bytes(self) -> int:
        """One image-sized buffer (the correction and each dirty image)."""
        g = self.geometry
        return g.npix_x * g.npix_y * g.grid_real.itemsize

    def planes_per_pass(self, profile: DeviceProfile, plan_bytes: int) -> int:
        """Planes one pass holds beside ``plan_bytes`` of plan; ValueError
        where not even one plane or the image fits."""
        first, stop = self.plane_range
        return min(planes_per_pass(profile, self.layout, self.grid_complex, plan_bytes,
                                   self.image_bytes), max(stop - first, 1))

    def pruned(self, blocks: list, tiles: TileShape) -> Pruning:
        """Grid rows the visibilities' kernels reach and grid columns of image
        pixels: a pruned FFT transforms only those (ducc0's lever)."""
        layout = self.layout
        # a row of tiles' bins are contiguous: its points are the difference
        # of the bin starts at its first bin and the next row's
        used = sum(np.diff(b.points.bin_start_host[::b.points.ntiles_v * layout.n_wbins]
                           .astype(np.int64)) for b in blocks) > 0
        reach = np.arange(tiles.tile_u + layout.choice.support - 1)
        rows = np.unique((np.flatnonzero(used)[:, None] * tiles.tile_u + reach).ravel()
                         % layout.nu) if used.any() else np.zeros(0, np.int64)
        offsets = np.arange(self.geometry.npix_y) - self.geometry.npix_y // 2
        cols = np.where(offsets < 0, offsets + layout.nv, offsets)
        return Pruning(rows, cols)

    def scratch(self, queue: cl.CommandQueue) -> ImageScratch:
        """A workspace's planes (a pass's), FFT plan and correction."""
        corrector = Corrector(queue, self.geometry, self.layout)
        planes_d = cla.empty(queue, (self.n_pass, self.layout.nu, self.layout.nv),
                             self.grid_complex)
        fft = DeviceFFT(queue, planes_d.shape, self.grid_complex, self.fft_backend)
        return ImageScratch(planes_d, fft, corrector)

    def block_planes(self, block: RowBlock) -> tuple[int, int]:
        """The planes (first, stop) this piece grids for ``block``'s rows:
        its plane range less an end plane that takes other rows."""
        first, stop = self.plane_range

        def takes(plane: int) -> bool:
            rows = self.plane_rows.get(plane)
            return rows is None or rows[0] <= block.first and block.stop <= rows[1]

        return first + (not takes(first)), stop - (not takes(stop - 1))

    @property
    def _block_planes(self):
        return self.block_planes if self.plane_rows else None

    # ------------------------------------------------------------ the calls
    def passes(self) -> list[tuple[int, int]]:
        """(first plane, plane count) of every pass, in order."""
        first, stop = self.plane_range
        return [(p, min(self.n_pass, stop - p)) for p in range(first, stop, self.n_pass)]

    def grid_pass(self, vis_d: cla.Array, npol: int, pol: int, plane0: int, n_pass: int,
                  wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None,
                  ready: Ready | None = None, ws: Workspace | None = None,
                  resident: bool = False) -> cla.Array:
        """Spread one polarisation into planes ``plane0 ..`` (no FFT); returns
        the planes buffer of workspace ``ws`` (default the engine's primary;
        its first ``n_pass`` planes are valid).  ``vis_d``, ``wgt_d``,
        ``mask_d``: (row, chan, ...) device arrays; ``ready``: see
        :data:`clgrid.core.engine.Ready` (default: the data is on the device
        already); ``resident``: a call whose visibilities were on the device
        already, which takes the plan of one row block
        (:meth:`~clgrid.core.engine.Engine.plan_for`; no ``ready`` then)."""
        engine = self.engine
        ws = ws or engine.primary
        if resident and ready is not None:
            raise ValueError("a resident call's visibilities are on the device: no ready")
        engine.spread(engine.plan_for(resident), vis_d, npol, pol, ws.planes_d, plane0, n_pass,
                      wgt_d, mask_d, ready=ready, ws=ws, block_planes=self._block_planes)
        return ws.planes_d

    def planes_to_dirty(self, plane0: int, n_pass: int, dirty_d: cla.Array,
                        prune: bool = True, accumulate: bool = True,
                        ws: Workspace | None = None) -> None:
        """Backward FFT of the planes buffer and its corrected sum added into
        ``dirty_d`` (written over it with ``accumulate=False``).
        ``prune=False`` for grids holding other engines' visibilities too (a
        multi-device sum), whose rows this engine's pruning does not know."""
        engine = self.engine
        ws = ws or engine.primary
        with stage(engine.trace, "fft"):
            ws.fft.backward(ws.planes_d, self.pruning if prune else None)
        with stage(engine.trace, "correct"):
            ws.corrector.planes_to_dirty(ws.planes_d, plane0, n_pass, dirty_d,
                                         ws.fft.backward_scale, accumulate)

    def grid_to_dirty(self, grids, pol: int, dirty_d: cla.Array,
                      ws: Workspace | None = None) -> None:
        """Backward FFT and correction of ``grids[pol]`` written over ``dirty_d``
        (no w-gridding).  ``grids``: (npol, nu, nv) uv grids, numpy or a device
        array on the engine's context, holding other engines' visibilities
        too (a sum over devices or Dask chunks): transformed unpruned."""
        ws = ws or self.engine.primary
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
                  ready: Ready | None = None, ws: Workspace | None = None,
                  resident: bool = False) -> cla.Array:
        """(npix_x, npix_y) dirty image of polarisation ``pol`` on the device,
        in grid precision, made in workspace ``ws`` (default the engine's
        primary).  ``vis_d``: complex, (row, chan[, pol]); ``ready``: see
        :data:`clgrid.core.engine.Ready` (only the first pass waits);
        ``resident``: see :meth:`grid_pass`."""
        g = self.geometry
        ws = ws or self.engine.primary
        dirty_d = cla.empty(ws.queue, (g.npix_x, g.npix_y), g.grid_real)
        for index, (plane0, n_pass) in enumerate(self.passes()):
            self.grid_pass(vis_d, npol, pol, plane0, n_pass, wgt_d, mask_d, ready, ws, resident)
            ready = None
            self.planes_to_dirty(plane0, n_pass, dirty_d, accumulate=index > 0, ws=ws)
        return dirty_d

    def dirty2vis(self, images_d: list[cla.Array], wgt_d: cla.Array | None = None,
                  mask_d: cla.Array | None = None,
                  block_done: Callable[[cla.Array, RowBlock, cl.Event], None] | None = None,
                  ws: Workspace | None = None) -> cla.Array:
        """(n_vis, npol) visibilities of npol (npix_x, npix_y) device images
        (grid precision).  ``block_done(out_d, block, event)`` is called as
        soon as a block's rows of the (n_rows, n_chan, npol) result ``out_d``
        are final (its last interpolation is enqueued; the event marks its
        end), so that their download can overlap the blocks after it.
        Always the row blocks' plan, even for results that stay on the
        device: the interpolation writes each point once, with no planes to
        add each block into, so one block gained 0-0.8 ms of 5-34 ms on an
        H100 (benchmarks/RESULTS.md), not worth a second plan to a caller
        who only predicts (:meth:`~clgrid.core.engine.Engine.plan_for`)."""
        engine, plan = self.engine, self.engine.plan
        npol = len(images_d)
        ws = ws or engine.primary
        shape = (plan.n_rows, plan.n_chan, npol)
        dtype = np.dtype(np.complex64 if self.geometry.vis_real == np.float32
                         else np.complex128)
        # From the workspace's pool, kept for the next call.  The first pass
        # writes every valid point, so zeros are needed only for invalid ones,
        # and where the output is cut into row blocks (see row_view) unless
        # this buffer was written before (a 0.93 GB fill took about 1 ms of
        # an H100's dirty2vis).
        out_d = cla.empty(ws.queue, shape, dtype, allocator=ws.scratch)
        written = out_d.base_data.int_ptr in ws.written_outputs
        if not (plan.n_invalid == 0 and not self.plane_rows
                and (len(plan.blocks) == 1 or written)):
            out_d.fill(0)
        if len(ws.written_outputs) >= 64:   # results callers kept: forget, fill again
            ws.written_outputs.clear()
        ws.written_outputs.add(out_d.base_data.int_ptr)
        passes = self.passes()
        for pol, image_d in enumerate(images_d):
            for index, (plane0, n_pass) in enumerate(passes):
                ws.corrector.dirty_to_planes(image_d, plane0, n_pass, ws.planes_d)
                ws.fft.forward(ws.planes_d, self.pruning)
                final = pol == npol - 1 and index == len(passes) - 1
                done = None
                if final and block_done is not None:
                    def done(block, ws=ws):
                        block_done(out_d, block, cl.enqueue_marker(ws.queue))
                engine.interpolate(plan, out_d, npol, pol, ws.planes_d, plane0, n_pass,
                                   wgt_d, mask_d, accumulate=index > 0, block_done=done, ws=ws,
                                   block_planes=self._block_planes)
        return out_d.reshape(plan.n_rows * plan.n_chan, npol)


__all__ = ["ImageScratch", "ImageStage"]

"""The gridding core's one engine: plan -> set points -> spread / interpolate -> FFT -> correct.

:class:`Engine` drives the core's stages for one device, the same way for
every path: ``clgrid.vis2dirty`` / ``dirty2vis`` / ``Imager`` (``clgrid
image``, several devices, Dask) and the table ``Gridder`` / ``Degridder``.
The stages are strategy objects (:class:`Stages`, their protocols below),
chosen in one place per path, :mod:`clgrid.core.strategies`; both paths
run the same stage classes, configured by their kernel source (the ES
kernel, or the GCF tables of :mod:`clgrid.core.table`):

=============  ==============================  ==================================
stage          imaging (ES kernel)             table gridders (GCF tables)
=============  ==============================  ==================================
points         ``setpoints.SetPoints`` of       ``setpoints.SetPoints`` of
               ``EsPositions``                  ``table.TablePositions`` (by tile
                                                or, for the register spread, by
                                                cell)
spread         ``spread.Spreader`` of           ``spread.Spreader`` of
               ``EsKernel``                     ``table.TableKernel`` (tiles) or
                                                ``register.RegisterSpreader``
interpolate    ``spread.Interpolator`` of       ``spread.Interpolator`` of
               ``EsKernel``                     ``table.TableKernel`` (a point,
                                                a record or register blocks at
                                                a time)
records        none                             ``register.RecordScan`` (register)
image          ``image.ImageStage`` (FFT +      none: the caller's grid is the
               correction of w planes)          target
=============  ==============================  ==================================

Set points bins the visibilities of a :class:`Plan` (one per observation for
the imaging path, made at construction in row blocks; one per call, or per
``Gridder.plan``, for the table path); the spread and interpolation run
over the plan's row blocks in order (the first block writes, later ones
add), each through the stage's ``spread`` / ``interpolate`` method with one
typed job (:class:`SpreadJob`, :class:`InterpolateJob`).  The engine knows
no path: the imaging path's passes of w planes through FFT and correction
(``vis2dirty``, ``dirty2vis``, and for grids summed elsewhere ``grid_pass``
/ ``grid_to_dirty``) are its image stage's (:class:`clgrid.core.image.ImageStage`,
``engine.image``), driving :meth:`Engine.spread` and :meth:`Engine.interpolate`.

Per-call scratch (the stages' kernel objects, planes, FFT plans, staging)
lives in a :class:`Workspace`; :meth:`Engine.lease` hands one out per call,
so threads share the plan, never scratch.  The engine works on device
arrays only; host arrays and user-facing checks are the missions' business
(:mod:`clgrid.imaging`, :mod:`clgrid.gridders`).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Callable, Protocol

import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as cl_tools

from ..device import plancache
from ..device.profiles import DeviceProfile
from .plan import TileShape
from .trace import StageTrace, stage
from .transfer import Uploader, row_view


@dataclasses.dataclass
class RowBlock:
    """Rows ``first .. stop - 1`` of the plan and their bins."""

    first: int
    stop: int
    points: object
    uvw_d: cla.Array


@dataclasses.dataclass
class Plan:
    """Set points of one (uvw, freq[, flags]): the row blocks' bins, reused
    by every call with new visibilities.  ``flags_d``: (nrow, nchan, npol)
    uint8 (the table path's flags, None: none); ``npol``: the polarisations
    the flags were read for."""

    blocks: list[RowBlock]
    freq_scale_d: cla.Array
    n_rows: int
    n_chan: int
    flags_d: cla.Array | None = None
    npol: int = 1

    @property
    def points(self):
        """The points of a plan of one row block (the table path's)."""
        if len(self.blocks) != 1:
            raise ValueError(f"a plan of {len(self.blocks)} row blocks has no one point set")
        return self.blocks[0].points

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_chan)

    @property
    def n_kept(self) -> int:
        """Points binned (the others left out)."""
        return sum(b.points.n_valid for b in self.blocks)

    @property
    def n_invalid(self) -> int:
        """Points left out (the ES set points: uvw not finite)."""
        return sum(b.points.n_invalid for b in self.blocks)

    @property
    def n_offgrid(self) -> int:
        """Points off the grid (the table set points count them; 0 for the ES set points)."""
        return sum(getattr(b.points, "n_offgrid", 0) for b in self.blocks)

    @property
    def n_flagged(self) -> int:
        """Points flagged in every polarisation (the table set points count them)."""
        return sum(getattr(b.points, "n_flagged", 0) for b in self.blocks)


def _view(array_d: cla.Array | None, block: RowBlock) -> cla.Array | None:
    """The rows of ``block`` of a (row, ...) device array, or None."""
    return None if array_d is None else row_view(array_d, block.first, block.stop)


#: ``ready(block index)``: events a block's spreading must wait for (its
#: visibilities' upload); called in block order, each index once.
Ready = Callable[[int], list]

#: ``block_planes(block) -> (first, stop)``: the w planes a row block is
#: spread into or interpolated from, where a piece of a job of several
#: devices shares an end plane with another by rows
#: (:meth:`clgrid.core.image.ImageStage.block_planes`).
BlockPlanes = Callable[[RowBlock], tuple[int, int]]


def _block_pass(block_planes: BlockPlanes | None, block: RowBlock, plane0: int,
                n_pass: int) -> tuple[int, int]:
    """(first plane, count) of the pass ``plane0 .. plane0 + n_pass - 1``
    that ``block`` takes (all of it without ``block_planes``)."""
    if block_planes is None:
        return plane0, n_pass
    first, stop = block_planes(block)
    first, stop = max(first, plane0), min(stop, plane0 + n_pass)
    return first, max(stop - first, 0)


def _planes(planes_d: cla.Array, first: int, count: int,
            block_planes: BlockPlanes | None) -> cla.Array:
    """Planes ``first .. first + count - 1`` of a (planes, nu, nv) buffer:
    the buffer itself without ``block_planes`` (the pass's planes, or a
    table gridder's grid) or where that is all of it."""
    if block_planes is None or (first == 0 and count == planes_d.shape[0]):
        return planes_d
    return row_view(planes_d, first, first + count)


# ------------------------------------------------------------------ protocols
@dataclasses.dataclass(frozen=True)
class SpreadJob:
    """One row block's spread: the visibilities of polarisation ``pol``
    (None: every polarisation, each into its own plane of ``planes_d``)
    into planes ``plane0 .. plane0 + n_pass - 1`` of ``planes_d``, written
    over or added (``accumulate``).  Arrays are the block's rows; a stage
    reads what it needs (the table spreads read the points' cells, not
    ``uvw_d``)."""

    points: object
    uvw_d: cla.Array
    freq_scale_d: cla.Array
    vis_d: cla.Array
    npol: int
    pol: int | None
    planes_d: cla.Array
    plane0: int
    n_pass: int
    wgt_d: cla.Array | None
    mask_d: cla.Array | None
    accumulate: bool


@dataclasses.dataclass(frozen=True)
class InterpolateJob:
    """One row block's interpolation: the visibilities of polarisation
    ``pol`` (None: all) from planes ``plane0 ..`` of ``planes_d`` into the
    block's rows of ``out_d`` (added, or written over with
    ``accumulate=False``)."""

    points: object
    uvw_d: cla.Array
    freq_scale_d: cla.Array
    out_d: cla.Array
    npol: int
    pol: int | None
    planes_d: cla.Array
    plane0: int
    n_pass: int
    wgt_d: cla.Array | None
    mask_d: cla.Array | None
    accumulate: bool


class PointsStage(Protocol):
    """Set points: bins every (row, channel) of ``uvw_d`` (nrow, 3) metres
    and ``freq_scale_d`` (nchan,) freq / c on the device (``flags_d``:
    (nrow, nchan, npol) uint8, for stages that leave flagged points out)."""

    float_float: bool

    def __call__(self, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 flags_d: cla.Array | None = None, npol: int = 1) -> object: ...


class SpreadStage(Protocol):
    """Visibilities -> planes, one row block at a time."""

    #: The engine zeroes a pass's planes and every block adds, rather than
    #: the first block writing every cell (:attr:`clgrid.core.spread.Spreader.adds_to_zeros`).
    adds_to_zeros: bool
    #: The spread counts the NaN/Inf visibilities and weights it reads
    #: (``reset_nonfinite`` .. ``nonfinite_later``:
    #: :attr:`clgrid.core.spread.Spreader.counts_nonfinite`).
    counts_nonfinite: bool

    @property
    def launch_geometry(self) -> str: ...

    def spread(self, job: SpreadJob) -> None: ...

    def prepare(self, passes: list[tuple[object, int, int, bool]]) -> None:
        """Plan ahead what the call's blocks' spreads will need (their
        points, first plane, planes and whether they add): the engine calls
        it before the first block."""

    def forget(self, points: object) -> None:
        """Drop what the stage keeps over ``points`` (a block's, whose plan
        is dropped)."""


class InterpolateStage(Protocol):
    """Planes -> visibilities, one row block at a time."""

    def interpolate(self, job: InterpolateJob) -> None: ...


class ImageScratch(Protocol):
    """A workspace's part of the image stage."""

    planes_d: cla.Array
    fft: object
    corrector: object


class ImageStage(Protocol):
    """W planes <-> image (FFT and correction), sized from the engine's plan
    (:class:`clgrid.core.image.ImageStage`, which also drives the imaging
    path's calls through the engine)."""

    #: Device bytes of the engine's plan as the stage counts it (once bound).
    plan_bytes: int

    def bind(self, engine: "Engine") -> None:
        """Plan the passes of ``engine``'s observation (before its workspaces)."""

    def scratch(self, queue: cl.CommandQueue) -> ImageScratch:
        """A workspace's planes, FFT plan and correction."""


#: A stage with per-call state (OpenCL kernel arguments are per kernel
#: object), made once per workspace on its queue.
StageFactory = Callable[[cl.CommandQueue], object]


@dataclasses.dataclass(frozen=True)
class Stages:
    """The strategies of one engine (:mod:`clgrid.core.strategies` picks them).

    ``points`` is shared by every call (set points is planned once);
    ``spread`` and ``interpolate`` are factories run once per workspace
    (None: the engine never spreads, or never interpolates); ``records``
    cuts sorted points into runs of equal points (the register spread's);
    ``image``: FFT and correction (the imaging path) or None; ``tiles``:
    the spread's tile (None for the register spread)."""

    points: PointsStage
    spread: StageFactory | None
    interpolate: StageFactory | None
    image: ImageStage | None = None
    records: Callable | None = None
    tiles: TileShape | None = None


# ------------------------------------------------------------------ engine
class Engine:
    """Compile-once gridding and degridding on one device, its stages given.

    Parameters
    ----------
    queue
        Command queue of the device.
    stages
        The strategies (:class:`Stages`).
    uvw_d, freq_scale_d, bounds
        With an image stage: the observation, planned here once (``uvw_d``
        (nrow, 3) and ``freq_scale_d`` (nchan,) as the points stage reads
        them; ``bounds``: (first, stop) rows of each row block).  Without
        one (the table path), plans are made per call (:meth:`make_plan`).
    """

    def __init__(self, queue: cl.CommandQueue, stages: Stages,
                 uvw_d: cla.Array | None = None, freq_scale_d: cla.Array | None = None,
                 bounds: list[tuple[int, int]] | None = None):
        self.queue = queue
        self.profile = DeviceProfile.from_device(queue.device)
        self.stages = stages
        #: The set points stage (shared by every call).
        self.set_points = stages.points
        self.tiles = stages.tiles
        self.float_float = bool(stages.points.float_float)
        #: The observation (image stage): its uvw and plan, made once; else None.
        self.uvw_d = uvw_d
        self.plan: Plan | None = None
        if uvw_d is not None:
            self.plan = self.make_plan(uvw_d, freq_scale_d, bounds)
        #: The plan of vis2dirty calls on device arrays (:meth:`plan_for`),
        #: made on first use.
        self._resident: Plan | None = None
        self._resident_lock = threading.Lock()
        if stages.image is not None:   # its passes, before the workspaces' planes
            stages.image.bind(self)
        #: Host times of the steps of later calls (:mod:`clgrid.core.trace`), or None.
        self.trace: StageTrace | None = None
        self._pool = WorkspacePool(self)
        #: The workspace made with the plan, on ``queue``; the attributes
        #: ``spreader`` and ``interpolator`` are its (see :meth:`lease`).
        self.primary = self._pool.primary

    # ---------------------------------------------------------- set points
    def make_plan(self, uvw_d: cla.Array, freq_scale_d: cla.Array,
                  bounds: list[tuple[int, int]] | None = None,
                  flags_d: cla.Array | None = None, npol: int = 1) -> Plan:
        """Set points of every row block ``bounds`` (default one block of all
        rows) of ``uvw_d`` and ``freq_scale_d``."""
        n_rows = uvw_d.shape[0]
        blocks = []
        for first, stop in bounds or [(0, n_rows)]:
            block_uvw_d = row_view(uvw_d, first, stop)
            points = self.set_points(block_uvw_d, freq_scale_d,
                                     None if flags_d is None else row_view(flags_d, first, stop),
                                     npol)
            blocks.append(RowBlock(first, stop, points, block_uvw_d))
        return Plan(blocks, freq_scale_d, n_rows, freq_scale_d.shape[0], flags_d, npol)

    def plan_for(self, resident: bool) -> Plan:
        """The observation's plan for one call (image stage).

        Row blocks let a call's uploads overlap its spreading.  A vis2dirty
        whose visibilities are on the device already (``resident``) has
        nothing to overlap, and one block spreads faster: each block's
        launch adds its tiles into the planes again and waits for the one
        before (an H100, SKA-mid: vis2dirty on device arrays 1.2-1.9 ms
        faster, benchmarks/RESULTS.md).  So such calls take a plan of one
        block where its bytes fit beside the planes
        (:meth:`~clgrid.core.image.ImageStage.fits_second_plan`), made at
        the first of them -- not later, so that the first call's bits are
        every later one's -- and shared by every later call and thread;
        elsewhere, and for every other call, the row blocks' plan."""
        plan = self.plan
        if not resident or len(plan.blocks) == 1:
            return plan
        with self._resident_lock:
            if self._resident is None:
                self._resident = plan   # unless the second plan fits and is made
                if self.stages.image.fits_second_plan():
                    try:
                        self._resident = self.make_plan(self.uvw_d, plan.freq_scale_d,
                                                        [(0, plan.n_rows)])
                    except Exception as error:   # noqa: BLE001 - allocation failures only
                        if not plancache.is_allocation_failure(error):
                            raise
                    else:   # given back where an allocation on the device fails later
                        plancache.on_memory_pressure(self.queue.device.int_ptr,
                                                     self.release_second_plan)
            return self._resident

    def release_second_plan(self) -> None:
        """Give back the plan of one row block (:meth:`plan_for`) and what the
        workspaces' spread stages keep over its points, for good: later
        vis2dirty calls on device arrays take the row blocks' plan.  Called
        where an allocation on the device failed
        (:func:`clgrid.device.plancache.on_memory_pressure`); a call using
        the plan meanwhile keeps it alive until it returns."""
        with self._resident_lock:
            dropped, self._resident = self._resident, self.plan
        if dropped is None or dropped is self.plan:
            return
        for ws in self._pool.workspaces():   # (only vis2dirty takes the plan)
            if ws.spreader is not None:
                for block in dropped.blocks:
                    ws.spreader.forget(block.points)

    def n_records(self, plan: Plan) -> int:
        """Footprints summed per call: the records of the cell order (runs of
        equal points) where the stages cut them, else one a kept point."""
        if self.stages.records is not None:
            return sum(self.stages.records(b.points).n_records for b in plan.blocks)
        return plan.n_kept

    @property
    def launch_geometry(self) -> str:
        """The spread's launch geometry, in words."""
        return self.primary.spreader.launch_geometry

    # ---------------------------------------------------------- the observation
    @property
    def blocks(self) -> list[RowBlock]:
        """The row blocks of the observation's plan (image stage)."""
        return self.plan.blocks if self.plan is not None else []

    @property
    def device_bytes(self) -> int:
        """Device memory this engine keeps between calls: the observation's
        plan (as its image stage counts it), its second plan where made
        (:meth:`plan_for`) and every workspace made so far."""
        if self.stages.image is None:
            return self._pool.device_bytes
        plan_bytes = self.stages.image.plan_bytes
        second = self._resident
        if second is not None and second is not self.plan:
            plan_bytes += self.stages.image.points_bytes(second)
        return plan_bytes + self._pool.device_bytes

    @property
    def image(self) -> ImageStage:
        """The image stage; ValueError for an engine without one (a table
        gridder's), whose target is the caller's grid."""
        if self.stages.image is None:
            raise ValueError("this engine has no image stage (a table gridder's): "
                             "spread into a grid with Engine.spread")
        return self.stages.image

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

    # ---------------------------------------------------------- the stages, driven
    def spread(self, plan: Plan, vis_d: cla.Array, npol: int, pol: int | None,
               planes_d: cla.Array, plane0: int = 0, n_pass: int = 1,
               wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None,
               accumulate: bool = False, ready: Ready | None = None,
               ws: "Workspace | None" = None, block_planes: BlockPlanes | None = None) -> None:
        """Spread ``vis_d`` ((row, chan, ...) on the device) over the plan's
        row blocks in order into ``planes_d``: the first block writes over it
        (adds with ``accumulate``), later ones add.  ``ready``: see
        :data:`Ready` (default: the data is on the device already);
        ``block_planes``: see :data:`BlockPlanes`; with them, or where the
        spreader :attr:`~SpreadStage.adds_to_zeros`, the planes are zeroed
        first, unless ``accumulate``, and every block adds."""
        ws = ws or self.primary
        zeroed = block_planes is not None or ws.spreader.adds_to_zeros
        if zeroed and not accumulate:
            _planes(planes_d, 0, n_pass, block_planes).fill(0, queue=ws.queue)
        passes = [(block, *_block_pass(block_planes, block, plane0, n_pass),
                   accumulate or index > 0 or zeroed) for index, block in enumerate(plan.blocks)]
        ws.spreader.prepare([(block.points, first, count, adds)
                             for block, first, count, adds in passes if count])
        for index, (block, first, count, adds) in enumerate(passes):
            if ready is not None:
                with stage(self.trace, f"b{index}"):
                    events = ready(index)
                if events:   # the block's spreading waits for its upload
                    cl.enqueue_barrier(ws.queue, wait_for=events)
            if count == 0:
                continue
            ws.spreader.spread(SpreadJob(
                block.points, block.uvw_d, plan.freq_scale_d, _view(vis_d, block), npol, pol,
                _planes(planes_d, first - plane0, count, block_planes), first, count,
                _view(wgt_d, block), _view(mask_d, block), adds))

    def interpolate(self, plan: Plan, out_d: cla.Array, npol: int, pol: int | None,
                    planes_d: cla.Array, plane0: int = 0, n_pass: int = 1,
                    wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None,
                    accumulate: bool = False,
                    block_done: Callable[[RowBlock], None] | None = None,
                    ws: "Workspace | None" = None,
                    block_planes: BlockPlanes | None = None) -> None:
        """Interpolate planes ``plane0 ..`` of ``planes_d`` into ``out_d``
        ((row, chan, npol) on the device) over the plan's row blocks;
        ``block_done(block)`` after each block's launch.  ``block_planes``:
        see :data:`BlockPlanes` (``out_d`` must hold zeros or earlier sums:
        every block adds)."""
        ws = ws or self.primary
        for block in plan.blocks:
            first, count = _block_pass(block_planes, block, plane0, n_pass)
            if count:
                ws.interpolator.interpolate(InterpolateJob(
                    block.points, block.uvw_d, plan.freq_scale_d, _view(out_d, block), npol,
                    pol, _planes(planes_d, first - plane0, count, block_planes), first, count,
                    _view(wgt_d, block), _view(mask_d, block),
                    accumulate or block_planes is not None))
            if block_done is not None:
                block_done(block)


# ------------------------------------------------------------------ scratch
class Workspace:
    """One call's scratch for an :class:`Engine`: its own queue, the stages'
    kernel objects (spreader, interpolator, corrector: OpenCL kernel
    arguments are per kernel object), with an image stage the w-plane
    buffer and FFT plan, and host staging.  Made by :class:`WorkspacePool`;
    used by one call at a time."""

    def __init__(self, engine: "Engine", queue: cl.CommandQueue):
        stages = engine.stages
        self.queue = queue
        self.spreader = stages.spread(queue) if stages.spread is not None else None
        self.interpolator = (stages.interpolate(queue) if stages.interpolate is not None
                             else None)
        self.corrector = self.planes_d = self.fft = None
        if stages.image is not None:
            image = stages.image.scratch(queue)
            self.corrector, self.planes_d, self.fft = image.corrector, image.planes_d, image.fft
        #: Scratch of the count reductions, the row uploads and dirty2vis's
        #: output (a pool that keeps its buffers for the next call).
        self.scratch = cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
        self.uploader = Uploader(queue, allocator=self.scratch)
        #: Buffers of :attr:`scratch` dirty2vis has written whole (their
        #: ``int_ptr``): a row view's first write to a never-written buffer
        #: goes through the host on NVIDIA (see ``row_view``).
        self.written_outputs: set[int] = set()

    @property
    def device_bytes(self) -> int:
        """The planes and the correction, and what the scratch pool holds."""
        pooled = int(self.scratch.managed_bytes)
        if self.planes_d is None:
            return pooled
        return self.planes_d.nbytes + self.corrector.corr_d.nbytes + pooled


class WorkspacePool:
    """The workspaces of one plan, bounded in device bytes.

    A lease takes a free workspace (one on the caller's queue first), makes
    a new one while all of them together stay within ``budget_bytes``
    (default a quarter of the device's memory, at least one workspace:
    ``CLGRID_WORKSPACE_MB`` overrides), and otherwise waits for one to be
    returned.  Nothing here grows with the number of calls: only with the
    number of calls at the same time, up to the budget."""

    def __init__(self, engine: "Engine", budget_bytes: int | None = None):
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

    def workspaces(self) -> list[Workspace]:
        """Every workspace made so far (leased or free)."""
        with self._ready:
            return list(self._all)

    @property
    def count(self) -> int:
        """Workspaces made so far."""
        return len(self._all)

    def _make(self, queue: cl.CommandQueue) -> Workspace:
        ws = Workspace(self.engine, queue)
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
    :meth:`Engine.lease`)."""

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
        ws.uploader.release()   # the device's pinned staging, for the next call of any plan
        self.pool.give(ws)


__all__ = ["Engine", "ImageScratch", "ImageStage", "InterpolateJob", "InterpolateStage", "Lease",
           "Plan", "PointsStage", "Ready", "RowBlock", "SpreadJob", "SpreadStage", "StageFactory",
           "Stages", "Workspace", "WorkspacePool", "same_device", "workspace_budget"]

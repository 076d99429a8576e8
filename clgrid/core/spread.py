"""Gridding core, stages "spread" and "interpolate": points <-> uv grid planes.

Both run on the bins of :mod:`clgrid.core.setpoints`, for either kernel
source (:class:`KernelSource`, their configuration): :class:`EsKernel`, the
ES kernel evaluated on the fly (the imaging path,
:func:`clgrid.core.strategies.imaging_engine`), or
:class:`clgrid.core.table.TableKernel`, the GCF tables of the table
gridders (:func:`clgrid.core.strategies.table_engine`).  The source holds
what differs -- template parameters, extra kernel arguments, how values are
gathered, the table's padded planes and its degridding by records -- and
the stages the tiles, work lists and launches they share.  They are spread
and interpolate strategies of the one engine
(:class:`clgrid.core.engine.Engine`, which calls ``spread(job)`` /
``interpolate(job)`` once per row block).

* :class:`Spreader` (``templates/core_spread.cl.mako``): output-owned tiles.
  A work-group owns one tile of one w plane and reads the points of the bins
  that can reach it; every cell is written by exactly one work-item, once:
  no atomics, no clearing, the same bits every run.  The tile shape comes
  from the device (:class:`clgrid.core.plan.TileShape`): on GPUs (kernel
  ``spread``) each of 32 lanes keeps a column of the tile in registers with
  a fixed, unrolled row loop; on CPUs (kernel ``spread_vector``) one
  work-item grids the points of its tile's own bins, each once, into a
  private tile with a halo (a point's W taps one vector, ducc0-style
  polynomials), writes the tile and leaves the halo in a slot, and
  ``add_halos`` adds the slots to the neighbouring tiles in a fixed order
  (:func:`block_list`).  The work list (:func:`work_list`, built once per
  pass from the bin sizes) splits the dense (tile, plane) point lists of the
  uv centre into chunks on GPUs, whose partial tiles ``fold_chunks`` adds in
  a fixed order; :func:`block_list` does the same for CPUs
  (``fold_vector_chunks``), its items in :func:`balanced_order`.
* :class:`Interpolator` (``templates/core_interp.cl.mako``): with the ES
  kernel one work-item per visibility in bin order, gathering its footprint
  from the planes of a pass; adds into its own output element (the table
  source's kernels -- a point, a record, a work-group a record, rows as
  vectors, register blocks -- are :class:`clgrid.core.table.TableKernel`'s).  On CPUs (vector tiles,
  ``interpolate_vector``) a work-item takes 64 points from their records
  (:attr:`clgrid.core.setpoints.PointSet.cells`, shared with the spreaders), a
  footprint row one contiguous vector load (PoCL 3, 720 k points: 35 -> 8 ms;
  the Intel runtime, which vectorises the plain kernel across work-items:
  about the same).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Protocol

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.hostio import copy_pool
from ..device.kernels import KernelTemplate, launch, real_dtype_name
from ..device.profiles import DeviceProfile
from .engine import InterpolateJob, SpreadJob
from .eskernel import horner_coefficients
from .plan import GridLayout, ImageGeometry, TileShape, fits_kept, row_taps
from .setpoints import PointSet, needs_float_float, position_args


def keeps_facet_phases(profile: DeviceProfile, geometry: ImageGeometry, n_vis: int,
                       as_float_float: bool) -> bool:
    """Whether a plan keeps every visibility's facet phasor (``facet_phasors``
    in ``templates/facet_phase.cl.mako``, once per plan) instead of a double
    sincos a visibility per call: CPUs (1.44 M visibilities, 1024^2 on 2 cores,
    2026-11-25: the facet phase cost 13-16 ms of a 37-46 ms call on the Intel
    runtime and PoCL alike, ducc0 0-3 ms), where the phasors fit
    (:func:`clgrid.core.plan.fits_kept`)."""
    phasor_bytes = int(n_vis) * 2 * np.dtype(geometry.grid_real).itemsize
    return bool(geometry.shifted and not as_float_float and profile.device_type == "cpu"
                and fits_kept(profile, phasor_bytes))


def _common_params(geometry: ImageGeometry, layout: GridLayout, weighted: bool,
                   masked: bool, as_float_float: bool, kept_phases: bool = False) -> dict:
    return {"real": real_dtype_name(geometry.grid_real),
            "vis_real": real_dtype_name(geometry.vis_real),
            "support": layout.choice.support, "beta": layout.choice.beta,
            "row_taps": row_taps(layout.choice.support),
            "do_w": geometry.do_w, "shifted": geometry.shifted,
            "weighted": weighted, "masked": masked, "with_f64": not as_float_float,
            "float_float": as_float_float, "kept_phases": kept_phases,
            "kernel_source": "es", "oversample": 1, "table_real": True}


def _shift_args(geometry: ImageGeometry, as_float_float: bool) -> tuple:
    """The facet phase per metre-wavelength of (sign-flipped) u and v:
    2 pi (sign * centre) radians in float64, or (sign * centre) turns as
    float-float pairs (devices without fp64: the kernels take the fraction
    of the turns before the sine)."""
    s_u, s_v, _ = geometry.signs
    centre_l, centre_m = geometry.centre_lm
    turns = (s_u * centre_l, s_v * centre_m)
    return position_args(turns if as_float_float else [2.0 * np.pi * t for t in turns],
                         as_float_float)


@dataclasses.dataclass
class SpreadPart:
    """One launch of the spread: the values of one polarisation into planes
    ``plane0 ..`` of ``planes_d``, as the work list numbers them; ``flags``:
    the kernel's build (weighted, masked, kept phases).  ``values_d``: the
    gathered values (``spread``); ``vector_head``/``phase_args``: the
    arguments of ``spread_vector`` before the planes and after the grid's
    geometry (it reads the points' values itself)."""

    points: PointSet
    work: "WorkList"
    planes_d: cla.Array
    plane0: int
    n_pass: int
    accumulate: bool
    flags: tuple[bool, bool, bool] = (False, False, False)
    values_d: cla.Array | None = None
    vector_head: tuple = ()
    phase_args: tuple = ()


class KernelSource(Protocol):
    """Where the stages take the kernel's weights from, and what else that
    changes: the configuration of :class:`Spreader` and :class:`Interpolator`.
    :class:`EsKernel` (the ES kernel on the fly, w planes, facet phases: the
    imaging path) or :class:`clgrid.core.table.TableKernel` (the GCF tables
    of the table gridders: their weights as extra kernel arguments, every
    polarisation gathered at once, grids padded to whole tiles, degridding
    by points or records).  It holds the template parameters, the extra
    arguments, the value gathering and which interpolation kernels run; the
    stages hold the kernels, tiles, work lists and the spread's launches."""

    #: The spread's vis precision where the kernel does not read visibilities.
    vis_real: np.dtype
    grid_complex: np.dtype
    #: Extra arguments of the ``spread`` kernel (the tables).
    kernel_args: tuple
    #: w-stacking (w planes as the plane axis; else one plane a polarisation).
    do_w: bool

    def float_float(self, queue: cl.CommandQueue) -> bool:
        """Positions and sums in float-float on this device (no fp64)."""

    def grid_layout(self, tiles: TileShape) -> GridLayout:
        """The planes the stage grids into, as the work lists see them."""

    def params(self, tiles: TileShape, weighted: bool, masked: bool, as_float_float: bool,
               kept_phases: bool, vis_real: np.dtype | None) -> dict:
        """Template parameters of the kernel source (beside the tile's)."""

    def kernel_params(self, name: str) -> dict:
        """Template parameters of kernel ``name`` alone."""

    def spread_state(self, stage: "Spreader") -> object:
        """What a spread stage keeps for this source (None: nothing)."""

    def work_cache(self, stage: "Spreader", points: PointSet) -> dict:
        """Where the work lists over ``points`` are kept."""

    def spread_parts(self, stage: "Spreader", job: SpreadJob) -> tuple[list, Callable | None]:
        """A job's launches and what finishes it after them (None: nothing)."""

    def record_kernels(self, profile: DeviceProfile, record_group: int | None,
                       record_vector: bool | None) -> tuple[int, bool]:
        """An interpolator's (record group, records as vectors), checked."""

    def interpolate_params(self, stage: "Interpolator") -> dict:
        """Template parameters of an interpolator's kernels (beside the source's)."""

    def interpolate(self, stage: "Interpolator", job: InterpolateJob) -> None:
        """A job's launches of the interpolator's kernels."""


@dataclasses.dataclass(frozen=True)
class EsKernel:
    """The imaging path's kernel source (:class:`KernelSource`): the ES
    kernel of ``layout`` evaluated on the fly over the w planes, facet
    phases where the image is shifted, one polarisation a job."""

    geometry: ImageGeometry
    layout: GridLayout

    kernel_args = ()

    @property
    def vis_real(self) -> np.dtype:
        return self.geometry.vis_real

    @property
    def grid_complex(self) -> np.dtype:
        return np.dtype(np.complex64 if self.geometry.grid_real == np.float32
                        else np.complex128)

    @property
    def do_w(self) -> bool:
        return self.geometry.do_w

    def float_float(self, queue: cl.CommandQueue) -> bool:
        return needs_float_float(queue, self.geometry)

    def grid_layout(self, tiles: TileShape) -> GridLayout:
        return self.layout

    def kernel_params(self, name: str) -> dict:
        return {}

    def spread_state(self, stage: "Spreader") -> None:
        return None

    def record_kernels(self, profile: DeviceProfile, record_group: int | None,
                       record_vector: bool | None) -> tuple[int, bool]:
        if record_group or record_vector:
            raise ValueError("the ES kernel interpolates points, not records")
        return 0, False

    def interpolate_params(self, stage: "Interpolator") -> dict:
        tiles = stage.tiles
        return {"vector": tiles.vector, "points_per_item": stage.points_per_item,
                "record_group": 0, "record_vector": False, "records_per_item": 1,
                "win_planes": stage.window_planes, "tile_u": tiles.tile_u,
                "lanes": tiles.lanes, "window_min_points": stage.WINDOW_MIN_POINTS}

    def interpolate(self, stage: "Interpolator", job: InterpolateJob) -> None:
        """The job's polarisation from its pass's planes (:meth:`Interpolator.__call__`)."""
        stage(job.points, job.uvw_d, job.freq_scale_d, job.out_d, job.npol, job.pol,
              job.planes_d, job.plane0, job.n_pass, job.wgt_d, job.mask_d,
              accumulate=job.accumulate)

    def work_cache(self, stage: "Spreader", points: PointSet) -> dict:
        """The stage's own (its work lists hold scratch the kernels write)."""
        return stage.work_of(points)

    def params(self, tiles: TileShape, weighted: bool, masked: bool, as_float_float: bool,
               kept_phases: bool, vis_real: np.dtype | None) -> dict:
        choice = self.layout.choice
        kernel_eval = tiles.kernel_eval_for(choice)
        horner = (horner_coefficients(choice.support, choice.beta).tolist()
                  if kernel_eval == "horner" else [])
        return {**_common_params(self.geometry, self.layout, weighted, masked, as_float_float,
                                 kept_phases), "kernel_eval": kernel_eval, "horner": horner}

    def spread_parts(self, stage: "Spreader", job: SpreadJob) -> tuple[list, None]:
        """One launch of the job's polarisation: its values gathered on GPUs
        (``gather_values``), read by ``spread_vector`` itself on CPUs."""
        points = job.points
        work = stage.work(points, job.plane0, job.n_pass, job.accumulate)
        if work.n_items == 0:
            return [], None
        phasors = stage.phasors(points, job.uvw_d, job.freq_scale_d)
        flags = (job.wgt_d is not None, job.mask_d is not None, phasors is not None)
        part = SpreadPart(points, work, job.planes_d, job.plane0, job.n_pass, job.accumulate,
                          flags)
        if stage.tiles.vector:
            part.vector_head = (
                points.cells.data, points.fracs.data, points.bin_start.data, job.uvw_d.data,
                job.freq_scale_d.data, np.uint32(job.freq_scale_d.shape[0]), job.vis_d.data,
                np.uint32(job.npol), np.uint32(job.pol), *stage._weights(job.wgt_d, job.mask_d))
            part.phase_args = stage._phase_args(phasors)
        else:
            part.values_d = stage.gather(points, job.uvw_d, job.freq_scale_d, job.vis_d,
                                         job.npol, job.pol, job.wgt_d, job.mask_d, phasors)
        return [part], None


class _Stage:
    """Kernels of one template for one kernel source, built on first use."""

    template_name = ""
    kernel_name = ""

    def __init__(self, queue: cl.CommandQueue, source: KernelSource, tiles: TileShape):
        self.queue = queue
        self.source, self.tiles = source, tiles
        self.layout = source.grid_layout(tiles)
        self._kernels: dict = {}
        # work lists and kept phasors of each point set, this stage's own:
        # they hold scratch (halos, chunk totals) the kernels write, so two
        # workspaces (two concurrent calls) must not share them
        self._work: dict[int, tuple[PointSet, dict]] = {}
        self._dummy_real = cla.empty(queue, 1, source.vis_real)
        self._dummy_mask = cla.empty(queue, 1, np.uint8)
        #: No fp64 on the device: float-float positions and phases,
        #: compensated float sums (lane tiles only: TileShape.check_device).
        self.float_float = source.float_float(queue)
        self._grid_complex = source.grid_complex
        self._dummy_phasors = cla.empty(queue, 1, self._grid_complex)
        self._profile = DeviceProfile.from_device(queue.device)

    @property
    def geometry(self) -> ImageGeometry:
        """The image of the ES kernel source."""
        return self.source.geometry

    @functools.cached_property
    def shifts(self) -> tuple:
        """The facet phase's arguments (:func:`_shift_args`)."""
        return _shift_args(self.geometry, self.float_float)

    def forget(self, points: PointSet) -> None:
        """Drop this stage's work lists over ``points`` (a block of a plan
        given back: :meth:`clgrid.core.engine.Engine.release_second_plan`)."""
        entry = self._work.get(id(points))
        if entry is not None and entry[0] is points:
            del self._work[id(points)]

    def work_of(self, points: PointSet) -> dict:
        """This stage's cache of work lists over ``points`` (see ``_work``)."""
        entry = self._work.get(id(points))
        if entry is None or entry[0] is not points:
            entry = self._work[id(points)] = (points, {})
        return entry[1]

    @property
    def kernel_eval(self) -> str:
        """How the ES kernel's taps are evaluated (see TileShape.kernel_eval_for)."""
        return self.tiles.kernel_eval_for(self.layout.choice)

    def _extra_params(self) -> dict:
        return {}

    def kernel(self, weighted: bool, masked: bool, kept_phases: bool = False) -> cl.Kernel:
        return self.built(self.kernel_name, weighted, masked, kept_phases)

    def built(self, name: str, weighted: bool = False, masked: bool = False,
              kept_phases: bool = False, vis_real: np.dtype | None = None) -> cl.Kernel:
        """Kernel ``name`` of the template, built once per (weighted, masked,
        kept phases, visibility precision: None the source's)."""
        key = (name, weighted, masked, kept_phases, vis_real)
        if key not in self._kernels:
            self._kernels[key] = self._template(weighted, masked, kept_phases, vis_real,
                                                name).kernel(name)
        return self._kernels[key]

    def _template(self, weighted: bool, masked: bool, kept_phases: bool = False,
                  vis_real: np.dtype | None = None, name: str = "") -> KernelTemplate:
        params = self.source.params(self.tiles, weighted, masked, self.float_float,
                                    kept_phases, vis_real)
        params.update(self._extra_params())
        params.update(self.source.kernel_params(name))
        return KernelTemplate(self.queue, self.template_name, params,
                              need_f64=not self.float_float)

    def phasors(self, points: PointSet, uvw_d: cla.Array,
                freq_scale_d: cla.Array) -> cla.Array | None:
        """The kept facet phasors of ``points``' visibilities (made once per
        set of points, :func:`keeps_facet_phases`), else None."""
        n_vis = uvw_d.shape[0] * freq_scale_d.shape[0]
        if not keeps_facet_phases(self._profile, self.geometry, n_vis, self.float_float):
            return None
        work = self.work_of(points)
        if "facet_phasors" not in work:
            phasors = cla.empty(self.queue, max(n_vis, 1), self._grid_complex)
            if n_vis:
                launch(
                    self.built("facet_phasors", kept_phases=True), self.queue, (n_vis,),
                    uvw_d.data, freq_scale_d.data, np.uint32(freq_scale_d.shape[0]),
                    np.uint32(n_vis), *self.shifts, phasors.data)
            work["facet_phasors"] = phasors
        return work["facet_phasors"]

    def _phase_args(self, phasors: cla.Array | None) -> tuple:
        """The kernels' facet arguments: shifts, then the kept phasors."""
        return (*self.shifts, (phasors if phasors is not None else self._dummy_phasors).data)

    def _weights(self, wgt: cla.Array | None, mask: cla.Array | None) -> tuple:
        return ((wgt if wgt is not None else self._dummy_real).data,
                (mask if mask is not None else self._dummy_mask).data)


@dataclasses.dataclass
class WorkList:
    """What the spreader's work-groups do in one pass (see :func:`work_list`)."""

    # spread: (n, 4) int32 tile, plane in pass, chunk, scratch slot or -1;
    # spread_vector: tile, first plane in pass, planes, first halo slot or -1
    items: cla.Array | None   # None: nothing to do (an accumulating row block)
    # spread: (m, 4) int32 tile, plane in pass, first slot, slots;
    # spread_vector: (tiles * blocks) int32 first halo slot of each item or -1
    folds: cla.Array | None
    # spread: (slots, tile_u, lanes) complex128 partial tiles;
    # spread_vector: halo slots (grid complex, halo_cells each)
    scratch: cla.Array | None
    n_items: int
    n_folds: int           # spread: folds; spread_vector: plane blocks per tile
    # spread_vector: dense tiles split into chunks of chunk_points points:
    # (n, 8) int32 tile, first plane in pass, planes, halo slot, first chunk
    # slot, chunks of each split item, and the chunks' float64 totals
    chunk_folds: cla.Array | None = None
    chunk_totals: cla.Array | None = None
    chunk_points: int = 2 ** 31
    # spread: the first of ``folds`` are of more than WIDE_FOLD_SLOTS slots
    # (fold_chunks_wide's, where the device has it)
    n_wide_folds: int = 0
    # fold_vector_chunks' launch per split item: (planes of a block, tile rows
    # with the halo)
    chunk_fold_shape: tuple[int, int] = (1, 1)

    def vector_args(self, dummy: cla.Array) -> tuple:
        """``spread_vector``'s last four arguments (``dummy`` where no tile
        is split)."""
        totals = self.chunk_totals if self.chunk_totals is not None else dummy
        return (self.items.data, self.scratch.data, np.uint32(self.chunk_points), totals.data)

    def fold_vector_chunks(self, kernel: cl.Kernel, queue: cl.CommandQueue,
                           planes_d: cla.Array, nu: int, nv: int,
                           ntiles_v: int) -> cl.Event | None:
        """Add the chunks of split tiles (kernel ``fold_vector_chunks``),
        before ``add_halos``."""
        if self.chunk_folds is None:
            return None
        # one fold per group row: the folds vary per call, the rows per plan
        return launch(kernel, queue, (self.chunk_folds.shape[0],) + self.chunk_fold_shape,
                      self.chunk_folds.data, self.chunk_totals.data, planes_d.data,
                      self.scratch.data, np.int32(nu), np.int32(nv), np.int32(ntiles_v),
                      group=(1,) + self.chunk_fold_shape)


def tile_bin_counts(points: PointSet, n_wbins: int, lo: int, hi: int) -> np.ndarray:
    """(ntiles_u, ntiles_v) int64: points of each tile's w bins ``lo .. hi``.

    Bin ``t * n_wbins + b`` of ``bin_start_host`` is tile t's bin b, so the
    bins' ends are strided views (no index arrays: a million tiles' fancy
    indexing took most of a work list's 170 ms on the H200's host)."""
    n_tiles = points.ntiles_u * points.ntiles_v
    starts = points.bin_start_host
    ends = starts[hi + 1::n_wbins][:n_tiles].astype(np.int64)
    return (ends - starts[lo::n_wbins][:n_tiles]).reshape(points.ntiles_u, points.ntiles_v)


def chunk_counts(points: PointSet, layout: GridLayout, plane0: int, n_pass: int,
                 chunk_points: int, accumulate: bool = False, reach: int = 1,
                 plane_block: int = 1) -> np.ndarray:
    """(blocks, n_tiles): points each (block of ``plane_block`` planes of the
    pass, tile) reads (from its own bins and those of ``reach`` lower
    neighbours per axis: every point that reaches a plane of the block), in
    chunks of ``chunk_points``: at least one chunk, which writes the zeros,
    unless ``accumulate`` (a later row block adds to the grid: empty tiles
    skip)."""
    n_tiles = points.ntiles_u * points.ntiles_v
    n_wbins, support = layout.n_wbins, layout.choice.support
    n_blocks = -(-n_pass // plane_block)
    counts = np.zeros((n_blocks, points.ntiles_u, points.ntiles_v), np.int64)
    for p in range(n_blocks):
        first = plane0 + p * plane_block
        last = plane0 + min((p + 1) * plane_block, n_pass) - 1
        lo, hi = (max(first - support + 1, 0), min(last, n_wbins - 1)) if n_wbins > 1 else (0, 0)
        if lo > hi:
            continue
        per_bin = tile_bin_counts(points, n_wbins, lo, hi)
        for du in range(-reach, 1):
            for dv in range(-reach, 1):
                # an axis of fewer tiles than the reach would read a bin twice
                if -du >= points.ntiles_u or -dv >= points.ntiles_v:
                    continue
                # tile (u, v) reads the bins of tile ((u + du) % nu, (v + dv) % nv)
                counts[p] += np.roll(per_bin, (-du, -dv), axis=(0, 1))
    counts = counts.reshape(n_blocks, n_tiles)
    if chunk_points != 1:
        counts = -(-counts // chunk_points)
    return counts if accumulate else np.maximum(1, counts)


def halo_cells(tiles: TileShape, support: int) -> int:
    """Complex cells of one halo slot of ``spread_vector`` (see the template)."""
    return (tiles.tile_u + support - 1) * (support - 1) + (support - 1) * tiles.lanes


#: spread_vector and interpolate_tiles: a dense tile's points are split into
#: chunks of at least this many (each chunk's private tile costs a fold) ...
VECTOR_CHUNK_MIN = 4096
#: ... and at most total / (this x compute units), so that the densest tiles
#: (a quarter of all points can fall in one tile at the uv centre) do not
#: leave the other cores idle (RESULTS "Dense tiles split over the cores").
VECTOR_CHUNKS_PER_UNIT = 4


#: fold_chunks: most work-items a work-group (rows of a tile's lanes)
FOLD_GROUP = 256
#: Split items of more slots than this are folded by ``fold_chunks_wide``
#: (several work-items a cell), the first of the work list's folds.
WIDE_FOLD_SLOTS = 32
#: fold_chunks_wide: most work-items a cell (a work-group of at most 1024)
FOLD_PARTS = 16


#: balanced_order: consecutive unsplit items kept together (neighbouring
#: tiles share the pages of the grid rows they read: scattering every item
#: cost up to 1.8x on sparse uv, RESULTS "Dense tiles split over the cores").
BALANCE_RUN = 16


def balanced_order(weights: np.ndarray, split: np.ndarray) -> np.ndarray:
    """A permutation of work items (in tile order) that spreads the work
    evenly over the list and keeps neighbours together.

    CPU runtimes hand contiguous ranges of work-groups to their threads
    (PoCL's pthread driver up to 4096 a thread at once, so a launch of 65536
    items is cut statically over 16 threads): every contiguous range should
    hold its share of the work, not the run of dense tiles at the uv centre.
    Runs of :data:`BALANCE_RUN` consecutive unsplit items, and each chunk of
    a ``split`` tile alone, take the golden-ratio sequence's places by
    descending weight (a low-discrepancy order: any range mixes heavy and
    light runs); within a run the items keep their order."""
    weights = np.asarray(weights, np.float64)
    split = np.asarray(split, bool)
    unsplit_rank = np.cumsum(~split) - 1
    n_unsplit_runs = -(-int((~split).sum()) // BALANCE_RUN)
    run = np.where(split, 0, unsplit_rank // BALANCE_RUN)
    run[split] = n_unsplit_runs + np.arange(int(split.sum()))
    run_weight = np.bincount(run, weights, minlength=n_unsplit_runs + int(split.sum()))
    rank = np.argsort(-run_weight, kind="stable")
    place = np.empty(rank.size)
    place[rank] = (np.arange(rank.size) * 0.6180339887498949) % 1.0
    return np.lexsort((np.arange(weights.size), place[run]))


def vector_acc_chunks(tiles: TileShape, support: int) -> int:
    """``ACC_CHUNKS`` of ``spread_vector``: 16 reals (8 complex cells) a
    chunk of a private tile's row (core_spread.cl.mako)."""
    cells = max(tiles.lanes + support - 1, tiles.lanes + row_taps(support))
    return 2 * (-(-cells // 8) * 8) // 16


def vector_chunk_points(total_points: int, compute_units: int,
                        tiles: TileShape | None = None) -> int:
    """Most points of one ``spread_vector`` or ``interpolate_tiles`` item:
    ``tiles.chunk_points`` where set below its default, else from the total
    and the compute units."""
    if tiles is not None and tiles.chunk_points < TileShape.chunk_points:
        return int(tiles.chunk_points)
    per_unit = -(-int(total_points) // (VECTOR_CHUNKS_PER_UNIT * max(1, int(compute_units))))
    return max(VECTOR_CHUNK_MIN, per_unit)


def split_items(chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Items of ``chunks[i]`` chunks each, in order: (owner i, chunk index
    within it) of every chunk."""
    owner = np.repeat(np.arange(chunks.size), chunks)
    return owner, np.arange(owner.size) - (np.cumsum(chunks) - chunks)[owner]


def block_list(queue: cl.CommandQueue, points: PointSet, layout: GridLayout,
               tiles: TileShape, plane_block: int, plane0: int, n_pass: int,
               grid_complex: np.dtype) -> WorkList:
    """Work items of ``spread_vector``: every tile and block of ``plane_block``
    planes of the pass, (tile, first plane in pass, planes, first halo slot or
    -1 where no point lies in the tile's bins of the block, chunk, first chunk
    slot or -1, 0, 0).  A (tile, block) of more than ``chunk_points`` points
    (:func:`vector_chunk_points`) becomes chunks that
    write float64 totals to chunk slots, added by ``fold_vector_chunks``.
    The items come in :func:`balanced_order` of their points.
    ``folds`` holds the (tiles, blocks) table of first halo slots for
    ``add_halos``, ``scratch`` the halo slots (one per plane of every item
    with points)."""
    n_tiles = points.ntiles_u * points.ntiles_v
    n_wbins, support = layout.n_wbins, layout.choice.support
    starts = np.arange(0, n_pass, plane_block)
    counts = np.minimum(plane_block, n_pass - starts)
    bounds = points.bin_start_host.astype(np.int64)
    cumulative = bounds[np.arange(n_tiles)[:, None] * n_wbins + np.arange(n_wbins + 1)]
    n_points = np.zeros((n_tiles, starts.size), np.int64)
    for b, (start, count) in enumerate(zip(starts, counts)):
        first = plane0 + int(start)
        lo, hi = ((max(first - support + 1, 0), min(first + int(count) - 1, n_wbins - 1))
                  if n_wbins > 1 else (0, 0))
        if lo <= hi:
            n_points[:, b] = cumulative[:, hi + 1] - cumulative[:, lo]
    occupied = n_points > 0
    slots_per_item = np.where(occupied, counts[None, :], 0)
    first_slot = (np.cumsum(slots_per_item.ravel()) - slots_per_item.ravel()).reshape(
        occupied.shape)
    slot_table = np.where(occupied, first_slot, -1).astype(np.int32)
    n_slots = int(slots_per_item.sum())
    chunk_points = vector_chunk_points(int(n_points.sum()), queue.device.max_compute_units,
                                       tiles)
    # items in block-major order, as the slot table; each split into its chunks
    pair_points = n_points.T.ravel()
    tile = np.tile(np.arange(n_tiles), starts.size)
    block = np.repeat(np.arange(starts.size), n_tiles)
    chunks = np.maximum(1, -(-pair_points // chunk_points))
    split = chunks > 1
    planes_of = counts[block]
    chunk_slots = np.where(split, chunks * planes_of, 0)
    first_chunk_slot = np.cumsum(chunk_slots) - chunk_slots
    pair, chunk = split_items(chunks)
    chunk_slot = np.where(split[pair], first_chunk_slot[pair] + chunk * planes_of[pair], -1)
    zeros = np.zeros(pair.size, np.int64)
    items = np.stack([tile[pair], starts[block[pair]], planes_of[pair],
                      slot_table[tile[pair], block[pair]], chunk, chunk_slot, zeros, zeros],
                     axis=1).astype(np.int32)
    item_points = np.minimum(pair_points[pair] - chunk * chunk_points, chunk_points)
    items = items[balanced_order(item_points, split[pair])]
    halos = cla.empty(queue, max(n_slots, 1) * halo_cells(tiles, support), grid_complex)
    work = WorkList(cla.to_device(queue, items), cla.to_device(queue, slot_table.ravel()),
                    halos, items.shape[0], starts.size, chunk_points=int(chunk_points))
    if split.any():
        folded = np.flatnonzero(split)
        zeros = np.zeros(folded.size, np.int64)
        folds = np.stack([tile[folded], starts[block[folded]], planes_of[folded],
                          slot_table[tile[folded], block[folded]], first_chunk_slot[folded],
                          chunks[folded], zeros, zeros], axis=1).astype(np.int32)
        acc_rows = tiles.tile_u + support - 1
        work.chunk_folds = cla.to_device(queue, folds)
        work.chunk_totals = cla.empty(
            queue, int(chunk_slots.sum()) * acc_rows * vector_acc_chunks(tiles, support) * 16,
            np.float64)
        work.chunk_fold_shape = (plane_block, acc_rows)
    return work


@dataclasses.dataclass
class WorkItems:
    """The host's side of a :class:`WorkList` (see :func:`work_items`)."""

    items: np.ndarray      # (n, 4) int32 tile, plane in pass, chunk, scratch slot or -1
    folds: np.ndarray      # (m, 4) int32 tile, plane in pass, first slot, slots
    n_slots: int           # scratch slots of the split items
    n_wide_folds: int      # the first folds, of more than WIDE_FOLD_SLOTS slots


def work_items(read: np.ndarray, n_tiles: int, chunk_points: int, plane_block: int,
               n_pass: int, on_cpu: bool) -> WorkItems:
    """``spread``'s items and folds from ``read`` (:func:`chunk_counts`
    raveled, chunks of one point): each (block of ``plane_block`` planes,
    tile) in chunks of ``chunk_points``, where more than one, each chunk
    with ``plane_block`` scratch slots side by side (one a plane) and a fold
    a plane.  GPUs: the split items first (the longest should not start
    last); CPUs: in :func:`balanced_order`.  Folds of more than
    :data:`WIDE_FOLD_SLOTS` slots come first."""
    # only the (plane block, tile) pairs with points: where later blocks
    # accumulate, a few percent of a large grid's tiles
    owner = np.flatnonzero(read)
    chunks = -(-read[owner] // chunk_points)
    rank, chunk = split_items(chunks)
    pair = owner[rank]
    split = chunks > 1
    slots = np.where(split, chunks * plane_block, 0)
    first_slot = np.cumsum(slots) - slots
    slot = np.where(split[rank], first_slot[rank] + chunk * plane_block, -1)
    items = np.stack([pair % n_tiles, (pair // n_tiles) * plane_block, chunk, slot],
                     axis=1).astype(np.int32)
    if on_cpu:
        items = items[balanced_order(np.minimum(read[pair] - chunk * chunk_points,
                                                chunk_points), split[rank])]
    else:
        items = np.concatenate([items[split[rank]], items[~split[rank]]])
    folded_rank = np.flatnonzero(split)
    folded = owner[folded_rank]
    # one fold a plane of each split item (the last block may hold fewer)
    offset = np.arange(plane_block)
    first_plane = (folded // n_tiles) * plane_block
    live = first_plane[:, None] + offset[None, :] < n_pass
    folds = np.stack([np.broadcast_to((folded % n_tiles)[:, None], live.shape)[live],
                      (first_plane[:, None] + offset[None, :])[live],
                      (first_slot[folded_rank][:, None] + offset[None, :])[live],
                      np.broadcast_to(chunks[folded_rank][:, None], live.shape)[live]],
                     axis=1).astype(np.int32)
    wide = folds[:, 3] > WIDE_FOLD_SLOTS   # first, for fold_chunks_wide
    return WorkItems(items, np.concatenate([folds[wide], folds[~wide]]), int(slots.sum()),
                     int(wide.sum()))


def work_host(device: cl.Device, points: PointSet, layout: GridLayout, tiles: TileShape,
              plane0: int, n_pass: int, accumulate: bool = False,
              plane_block: int = 1) -> tuple[WorkItems, int]:
    """The host's part of :func:`work_list` (numpy only, so that a call's
    row blocks may plan theirs side by side in threads): the items and
    folds, and the points a chunk."""
    # points each (plane, tile) reads (at least 1 where its item writes zeros)
    read = chunk_counts(points, layout, plane0, n_pass, 1, accumulate,
                        tiles.reach(layout.choice.support), plane_block).ravel()
    on_cpu = bool(device.type & cl.device_type.CPU)
    chunk_points = (vector_chunk_points(int(read.sum()), device.max_compute_units, tiles)
                    if on_cpu else tiles.chunk_points)
    return (work_items(read, points.ntiles_u * points.ntiles_v, chunk_points, plane_block,
                       n_pass, on_cpu), int(chunk_points))


def upload_work(queue: cl.CommandQueue, work: WorkItems, chunk_points: int,
                tiles: TileShape) -> WorkList:
    """A :class:`WorkList` on the device from :func:`work_host`'s result."""
    items, folds = work.items, work.folds
    return WorkList(
        cla.to_device(queue, items) if items.size else None,
        cla.to_device(queue, folds) if folds.size else None,
        cla.empty(queue, (work.n_slots, tiles.tile_u, tiles.lanes), np.complex128)
        if work.n_slots else None, items.shape[0], folds.shape[0],
        chunk_points=chunk_points, n_wide_folds=work.n_wide_folds)


def work_list(queue: cl.CommandQueue, points: PointSet, layout: GridLayout, tiles: TileShape,
              plane0: int, n_pass: int, accumulate: bool = False,
              plane_block: int = 1) -> WorkList:
    """Work items of one pass (``spread``): every (tile, plane) in chunks,
    split ones folded; with ``accumulate`` only those the points reach.
    ``plane_block`` > 1 (w-stacking): items of (tile, block of planes from
    the item's plane), a split item's chunk with ``plane_block`` scratch slots
    side by side, one a plane, and a fold per plane.
    GPUs: chunks of ``tiles.chunk_points``, the split items first (the
    longest should not start last).  CPUs (this kernel where the vector tile
    does not build): chunks of :func:`vector_chunk_points` unless the tile
    sets its own, in :func:`balanced_order` (their runtimes hand threads
    contiguous ranges of work-groups)."""
    work, chunk_points = work_host(queue.device, points, layout, tiles, plane0, n_pass,
                                   accumulate, plane_block)
    return upload_work(queue, work, chunk_points, tiles)


def lane_tile_local_bytes(tiles: TileShape, support: int, do_w: bool, real_bytes: int,
                          batch: int | None = None, compact: bool = True) -> int:
    """Local memory of one work-group of the ES source's GPU kernel
    (``spread``) staging ``batch`` points at a time (default
    ``tiles.staged_for(do_w)``): the staged points (``compact``, GPUs: the
    taps at their places in the tile, rows padded against bank conflicts,
    and a bit a point for those that touch it; else offsets, u taps between
    zero pads of ``tile_u - 1`` and v taps times the value; with plane blocks
    their w weights), the groups' totals and, where a group takes one plane
    on GPUs, the ranges of its source bins (:attr:`Spreader.local_state`)."""
    groups, planes = tiles.lane_groups(do_w)
    if compact:   # strides KU_STRIDE and KV_STRIDE of the template
        offsets, u_taps, v_taps = 0, -(-tiles.tile_u // 4) * 4 + 4, tiles.lanes + 1
    else:
        offsets, u_taps, v_taps = 8, 2 * (tiles.tile_u - 1) + support, support
    per_point = (offsets + (u_taps + 2 * v_taps) * real_bytes
                 + (planes * real_bytes if planes > 1 else 0))
    # the groups' totals: all in local memory with the source bins' ranges
    # (keeps_local_state), else all but the first group's at the end
    local_state = keeps_local_state(compact, planes)
    totals = (groups if local_state else groups - 1) * planes * tiles.tile_u * tiles.lanes * 16
    ranges = 8 * (tiles.reach(support) + 1) ** 2 if local_state else 0
    batch = batch or tiles.staged_for(do_w)
    bits = 4 * -(-batch // 32) if compact else 0
    return batch * per_point + bits + totals + ranges


def keeps_local_state(compact: bool, planes: int) -> bool:
    """Whether the GPU kernel (``spread``) keeps its lanes' double (or
    compensated) totals, and each group the ranges of its source bins, in
    local memory, not registers: where it stages ``compact`` ly (GPUs,
    :func:`compacts_points`) with one w plane a group (an H100 without w:
    104 -> 86 registers and the spread 16.1-16.3 -> 15.0-15.4 ms for the
    totals, then 14.7 -> 14.0 ms for the ranges; same bits); blocks of w
    planes keep both in registers (42.3-42.5 -> 42.9 and 46.9 ms the other
    way: benchmarks/RESULTS.md)."""
    return compact and planes == 1


def compacts_points(profile: DeviceProfile) -> bool:
    """Whether the GPU kernel (``spread``) stages only the points of a batch
    that touch its tile, side by side, each tap at its place in the tile
    (zeros elsewhere: no offsets and no test in the inner loop): on GPUs (an
    H100: the w spread 62.5 -> 42.4 ms, without w 20.1 -> 16.3 ms over three
    steps, benchmarks/RESULTS.md); CPUs that run this kernel (PyPI's PoCL
    3.0, CPUs without the vector tile) keep the points that miss the tile
    parked, 4-5% faster there (PoCL 3.1, one group of 8 lanes: a batch of 8
    points pays the extra barrier and bit counts).  Tests force it to run
    the GPU variant on CPUs."""
    return profile.device_type == "gpu"


def splits_bins(tiles: TileShape, layout: GridLayout, do_w: bool) -> bool:
    """Whether set points split each tile's bin by the next tiles its
    points' footprints reach (``split_bins`` of core_setpoints.cl.mako) and
    the tile kernel (``spread``) reads of a lower neighbour's bin only its
    points that reach the tile: the kernel's ES source without w, a footprint
    no wider than the tile (each point reaches at most the next tile per
    axis) on a grid of whole tiles.  With 8 x 8 tiles and W 7 a tile read
    4 bins of which only 75%, 75% and 56% of the neighbours' points touch
    it: 23% of the reads staged nothing; and every point read then touches
    the tile, so GPUs stage a batch as read, without touch bits (an H100
    without w: spread 14.4 -> 10.0-10.2 ms with the fill of the planes and 8
    lane groups, benchmarks/RESULTS.md)."""
    support = layout.choice.support
    return (not tiles.vector and not do_w and support <= min(tiles.tile_u, tiles.lanes)
            and layout.nu % tiles.tile_u == 0 and layout.nv % tiles.lanes == 0)


def lane_tile_batch(tiles: TileShape, profile: DeviceProfile, support: int, do_w: bool,
                    real_bytes: int, compact: bool = True) -> int:
    """Points the GPU kernel stages at a time: one a work-item, halved while
    the staging does not fit the local memory (a block of w planes in double
    precision), down to one a lane of a group; as the tile sets it, if it does."""
    batch = tiles.staged_for(do_w)
    while (not tiles.batch and batch > tiles.lanes
           and lane_tile_local_bytes(tiles, support, do_w, real_bytes, batch, compact)
           > profile.local_mem_bytes):
        batch //= 2
    return batch


def check_lane_tile(tiles: TileShape, profile: DeviceProfile, support: int, do_w: bool,
                    real_bytes: int) -> int:
    """The batch of :func:`lane_tile_batch` (staged as
    :func:`compacts_points` says for the device); ValueError where the GPU
    kernel's work-group (``lanes x groups``, times ``plane_block`` with
    w-stacking) or its local memory at that batch exceeds the device's."""
    groups, planes = tiles.lane_groups(do_w)
    items = tiles.lanes * groups * planes
    shape = f"tile {tiles.tile_u}x{tiles.lanes} in {groups} group(s)" + (
        f" x {planes} w planes" if planes > 1 else "")
    if items > profile.max_work_group_size:
        raise ValueError(f"{shape} takes {items} work-items a group; "
                         f"{profile.device_name.strip()!r} allows {profile.max_work_group_size}")
    compact = compacts_points(profile)
    batch = lane_tile_batch(tiles, profile, support, do_w, real_bytes, compact)
    need = lane_tile_local_bytes(tiles, support, do_w, real_bytes, batch, compact)
    if need > profile.local_mem_bytes:
        raise ValueError(f"{shape} needs {need} B of local memory for kernel support "
                         f"{support}; {profile.device_name.strip()!r} has "
                         f"{profile.local_mem_bytes}: fewer groups or a smaller plane_block")
    return batch


def tile_words(tiles: TileShape) -> str:
    """A tile spread's launch geometry, in words (``launch_geometry``)."""
    return (f"tile {tiles.tile_u}x{tiles.lanes} g{tiles.groups}"
            + (f" w{tiles.plane_block}" if tiles.plane_block > 1 and not tiles.vector else ""))


class Spreader(_Stage):
    """Visibilities -> the uv grid planes of one pass, for either kernel
    source (:class:`KernelSource`; see the module notes): the source gives
    each job's launches (:class:`SpreadPart`), this stage runs them on its
    tiles."""

    template_name = "core_spread.cl.mako"
    #: GPU kernel: points a lane adds in the grid precision before it folds
    #: them into its double (or compensated) totals; once a batch (1) cost an
    #: H100 2.5% of the spread without w (17.3 -> 16.9 ms), 1.3% with w, for
    #: an image 2e-7 (relative) from the one of float32 sums of <= 8 points
    fold_points = 64

    def __init__(self, queue: cl.CommandQueue, source: KernelSource, tiles: TileShape,
                 split_bins: bool = False):
        super().__init__(queue, source, tiles)
        #: Points the GPU kernel stages at a time; whether the ES source
        #: stages only the touching ones, their taps at their places in the
        #: tile (:func:`compacts_points`).
        self.batch, self.compact = self.tiles.staged_for(source.do_w), False
        if split_bins and not (isinstance(source, EsKernel)
                               and splits_bins(tiles, self.layout, source.do_w)):
            raise ValueError("split bins are the tile kernel's, ES source without w "
                             "(spread.splits_bins)")
        #: The tile kernel reads only the points of a neighbour's bin that
        #: reach its tile: set points split the bins (:func:`splits_bins`).
        self.split_bins = bool(split_bins)
        if not tiles.vector and isinstance(source, EsKernel):
            self.compact = compacts_points(self._profile)
            self.batch = check_lane_tile(
                self.tiles, self._profile, self.layout.choice.support, source.do_w,
                np.dtype(source.grid_complex).itemsize // 2)
        self._dummy_scratch = cla.empty(self.queue, 1, np.complex128)
        self._values: cla.Array | None = None   # gather's output, reused
        #: gather_values' count of NaN/Inf visibilities and weights (this
        #: stage's: one call's, as the stage is its workspace's).
        self._nonfinite_d = cla.zeros(self.queue, 1, np.uint32)
        #: The source's own per-stage state (the table's: its value
        #: gathering, vector taps and padded planes), or None.
        self.state = source.spread_state(self)

    def _extra_params(self) -> dict:
        return {**super()._extra_params(), "tile_u": self.tiles.tile_u,
                "lanes": self.tiles.lanes, "vector": self.tiles.vector,
                "groups": self.tiles.groups,
                "batch": self.batch, "compact": self.compact,
                "fold_points": self.fold_points, "fold_rows": self.fold_rows,
                "fold_parts": self.fold_parts,
                "local_state": self.local_state, "split_bins": self.split_bins,
                "reach": self.tiles.reach(self.layout.choice.support),
                "plane_block": self.plane_block}

    @property
    def local_state(self) -> bool:
        """GPU kernel: its totals and bin ranges in local memory
        (:func:`keeps_local_state`)."""
        return keeps_local_state(self.compact, self.plane_block)

    #: GPUs: the tile kernel adds each row block's tiles to planes the
    #: engine zeroes first, so a launch takes only the tiles its points
    #: reach.  The first block's launch writing every tile, zeros included
    #: (a work-group a tile of an 8192^2 grid), took 1.5 ms of an H100; the
    #: fill: spread 13.3 -> 12.2-12.6 ms without w, 42.4 -> 41.2 ms with w
    #: (benchmarks/RESULTS.md).  False: the first block writes (A/B).
    zero_fill = True

    @property
    def adds_to_zeros(self) -> bool:
        """Whether the engine zeroes the planes and every block adds: the
        ES source's GPU kernel (:func:`compacts_points`; tests force it).
        CPUs running the tile kernel keep the first block writing every
        tile (PoCL 3.1, quick SKA-mid case: the fill cost 12.9 -> 15.0 ms;
        the Intel runtime 25.4 -> 24.4 ms), as does ``spread_vector``,
        which grids all rows at once."""
        return self.zero_fill and self.compact

    @property
    def counts_nonfinite(self) -> bool:
        """Whether the spread counts the NaN/Inf visibilities and weights of
        the points it gathers (``gather_values``: the ES source's tile
        kernel), :meth:`reset_nonfinite` .. :meth:`nonfinite_later`.  The
        imager then need not read every visibility once more to refuse them:
        0.42 ms of an H100 for 116 M visibilities (benchmarks/RESULTS.md)."""
        return not self.tiles.vector and isinstance(self.source, EsKernel)

    def reset_nonfinite(self) -> None:
        """Zero the count before a call's spreads (enqueued)."""
        self._nonfinite_d.fill(0, queue=self.queue)

    def nonfinite_later(self) -> Callable[[], int]:
        """The count since :meth:`reset_nonfinite`, enqueued: the returned
        function waits for it."""
        count = np.empty(1, np.uint32)
        event = cl.enqueue_copy(self.queue, count, self._nonfinite_d.data, is_blocking=False)

        def read() -> int:
            event.wait()
            return int(count[0])
        return read

    @property
    def fold_rows(self) -> int:
        """``fold_chunks``: tile rows a work-group adds at once (LANES
        work-items each): the most that divide the tile's rows within
        :data:`FOLD_GROUP` work-items."""
        tiles = self.tiles
        return max(r for r in range(1, tiles.tile_u + 1)
                   if tiles.tile_u % r == 0 and r * tiles.lanes <= max(FOLD_GROUP, tiles.lanes))

    @property
    def fold_parts(self) -> int:
        """``fold_chunks_wide``: work-items a cell, each adding every
        fold_parts-th slot (at most :data:`FOLD_PARTS`, in a work-group the
        device takes); 1 where the tile's fold group leaves no room (no wide
        kernel: every split item folded by ``fold_chunks``)."""
        group = self.tiles.lanes * self.fold_rows
        # its parts' sums (16 bytes a cell each) within half the local memory
        by_local = self._profile.local_mem_bytes // 2 // (16 * group)
        return max(1, min(FOLD_PARTS, min(1024, self._profile.max_work_group_size) // group,
                          by_local))

    @property
    def plane_block(self) -> int:
        """w planes per work item of either kernel (1 without w-stacking)."""
        return self.tiles.plane_block if self.source.do_w else 1

    @property
    def kernel_name(self) -> str:
        return "spread_vector" if self.tiles.vector else "spread"

    def work(self, points: PointSet, plane0: int, n_pass: int,
             accumulate: bool = False) -> WorkList:
        """The pass's work list, built on first use (geometry only), kept
        where the source keeps them (this stage's own by default)."""
        key = (plane0, n_pass, accumulate)
        work = self.source.work_cache(self, points)
        if key not in work:
            if self.tiles.vector and accumulate:
                raise ValueError("spread_vector grids all rows in one block (no accumulate)")
            work[key] = (
                block_list(self.queue, points, self.layout, self.tiles, self.plane_block,
                           plane0, n_pass, self._grid_complex) if self.tiles.vector
                else work_list(self.queue, points, self.layout, self.tiles, plane0, n_pass,
                               accumulate, self.plane_block))
        return work[key]

    def prepare(self, passes: list[tuple[PointSet, int, int, bool]]) -> None:
        """Make the work lists of a call's row blocks ``(points, plane0,
        n_pass, accumulate)`` not kept yet, their host parts side by side in
        the copy threads: numpy over each block's million bins took 17-22 ms
        a block on the H200's host, one block after another, in a new
        observation's first call (the spread kernel's lists only; CPUs'
        vector tiles plan theirs one at a time in :meth:`work`)."""
        if self.tiles.vector or not isinstance(self.source, EsKernel):
            return   # (a table plan is one block, its lists kept on its points)
        missing = [(points, plane0, n_pass, accumulate)
                   for points, plane0, n_pass, accumulate in passes
                   if (plane0, n_pass, accumulate) not in self.source.work_cache(self, points)]
        if len(missing) < 2:
            return
        device = self.queue.device
        hosts = copy_pool().map(
            lambda job: work_host(device, job[0], self.layout, self.tiles, job[1], job[2],
                                  job[3], self.plane_block), missing)
        for (points, plane0, n_pass, accumulate), (work, chunk_points) in zip(missing, hosts):
            self.source.work_cache(self, points)[(plane0, n_pass, accumulate)] = upload_work(
                self.queue, work, chunk_points, self.tiles)

    @property
    def launch_geometry(self) -> str:
        """The spread's launch geometry, in words."""
        return tile_words(self.tiles)

    def spread(self, job: SpreadJob) -> None:
        """One row block's spread for the engine (:class:`clgrid.core.engine.SpreadStage`):
        the source's launches, then its finish."""
        parts, finish = self.source.spread_parts(self, job)
        for part in parts:
            if self.tiles.vector:
                self._spread_vector(part)
            else:
                self._spread_tiles(part)
        if finish is not None:
            finish()

    def _spread_tiles(self, part: SpreadPart) -> None:
        """GPUs (and CPUs without the vector tile): ``spread`` over the part's
        work list, then ``fold_chunks`` of the split items."""
        lanes, work, layout, points = self.tiles.lanes, part.work, self.layout, part.points
        scratch = work.scratch if work.scratch is not None else self._dummy_scratch
        group_size = lanes * int(np.prod(self.tiles.lane_groups(self.source.do_w)))
        # the table sources read no offsets: their cells stand in for them
        fracs = points.fracs if points.fracs is not None else points.cells
        if self.split_bins != (points.split_start is not None):
            raise ValueError("these points' bins are split as the spreader's are not: "
                             "set points and spreader from one engine")
        split_start = points.split_start if self.split_bins else points.bin_start
        self.kernel(*part.flags)(
            self.queue, (work.n_items * group_size,), (group_size,),
            points.cells.data, fracs.data, part.values_d.data, points.bin_start.data,
            split_start.data,
            part.planes_d.data, np.int32(layout.nu), np.int32(layout.nv),
            np.int32(points.ntiles_u), np.int32(points.ntiles_v),
            np.int32(part.plane0), np.int32(layout.n_wbins), work.items.data,
            np.uint32(work.chunk_points), scratch.data,
            np.int32(part.accumulate), np.int32(part.n_pass), *self.source.kernel_args)
        # the split items of many slots first, by the wide fold where built
        n_wide = work.n_wide_folds if self.fold_parts > 1 else 0
        group = lanes * self.fold_rows
        for name, first, count, size in (("fold_chunks_wide", 0, n_wide, group * self.fold_parts),
                                         ("fold_chunks", n_wide, work.n_folds - n_wide, group)):
            if count:
                self.built(name)(
                    self.queue, (count * size,), (size,), work.folds.data, np.int32(first),
                    work.scratch.data, part.planes_d.data, np.int32(layout.nu),
                    np.int32(layout.nv), np.int32(points.ntiles_v), np.int32(part.accumulate))

    def _spread_vector(self, part: SpreadPart) -> None:
        """CPUs: each tile grids its own points once into a private tile with
        a halo (``spread_vector``), split tiles' chunks are added
        (``fold_vector_chunks``), then ``add_halos`` adds the halos to the
        neighbouring tiles in a fixed order; whole planes are written."""
        work, layout, points = part.work, self.layout, part.points
        geometry = (np.int32(layout.nu), np.int32(layout.nv), np.int32(points.ntiles_u),
                    np.int32(points.ntiles_v))
        self.kernel(*part.flags)(
            self.queue, (work.n_items,), (1,), *part.vector_head, part.planes_d.data,
            *geometry, np.int32(part.plane0), np.int32(layout.n_wbins), *part.phase_args,
            *work.vector_args(self._dummy_scratch))
        work.fold_vector_chunks(self.built("fold_vector_chunks"), self.queue, part.planes_d,
                                layout.nu, layout.nv, points.ntiles_v)
        launch(self.built("add_halos"), self.queue,
               (points.ntiles_u * points.ntiles_v, part.n_pass), work.folds.data,
               np.int32(work.n_folds), work.scratch.data, part.planes_d.data, *geometry)

    def gather(self, points: PointSet, uvw_d: cla.Array, freq_scale_d: cla.Array,
               vis_d: cla.Array, npol: int, pol: int, wgt_d: cla.Array | None,
               mask_d: cla.Array | None, phasors: cla.Array | None = None) -> cla.Array:
        """The ES source's valid points' values (visibility x weight x mask x
        facet phase, from ``phasors`` where kept) in sorted order, for
        ``spread`` (kernel ``gather_values``)."""
        n_valid = points.n_valid
        values = self._values   # (a local: forget may drop the stage's meanwhile)
        if values is None or values.size < n_valid:
            values = self._values = cla.empty(self.queue, max(n_valid, 1), self._grid_complex)
        if n_valid:
            launch(
                self.built("gather_values", wgt_d is not None, mask_d is not None,
                           phasors is not None), self.queue, (n_valid,),
                points.sorted_index.data,
                np.uint32(n_valid), uvw_d.data, freq_scale_d.data,
                np.uint32(freq_scale_d.shape[0]), vis_d.data, np.uint32(npol), np.uint32(pol),
                *self._weights(wgt_d, mask_d), *self._phase_args(phasors), values.data,
                self._nonfinite_d.data, group=(256,))
        return values

    def forget(self, points: PointSet) -> None:
        """As the stage's, and the gathered values' buffer (sized for the
        largest block gathered: made again at the next call's size)."""
        super().forget(points)
        self._values = None


class Interpolator(_Stage):
    """The planes of one pass -> visibilities, for either kernel source: the
    source's launches (:meth:`KernelSource.interpolate`) of this stage's
    kernels of ``core_interp.cl.mako``.  The ES kernel (:class:`EsKernel`)
    adds into ``out_d`` a visibility a work-item (GPUs) or, on CPUs, 64
    points or a tile's points a work-item (:attr:`kernel_name`); the GCF
    tables (:class:`clgrid.core.table.TableKernel`) write every polarisation
    a kept point a work-item, or with ``records`` (points sorted by cell) a
    record of equal points a work-item, a work-group of ``record_group``, a
    work-item of rows as vectors (``record_vector``) or by register blocks
    (``register``; defaults from the device:
    :func:`clgrid.core.table.default_record_kernels`)."""

    template_name = "core_interp.cl.mako"
    #: interpolate_vector: points per work-item
    points_per_item = 64
    #: interpolate_tiles: most bytes of a work-item's private window
    WINDOW_BYTES = 96 * 2 ** 10
    #: interpolate_tiles: tiles with fewer points read them straight from the
    #: planes (a window's copy costs more than it saves for a few points)
    WINDOW_MIN_POINTS = 16
    #: None: interpolate_tiles on CPUs wherever its window fits; False: never
    #: (interpolate_vector; tests and benchmarks compare the two)
    tiled: bool | None = None

    def __init__(self, queue: cl.CommandQueue, source: KernelSource,
                 tiles: TileShape | None = None, *, record_group: int | None = None,
                 record_vector: bool | None = None, records=None, register=None):
        # the table sources degrid points or records, not tiles
        super().__init__(queue, source, tiles if tiles is not None else TileShape(8, 8))
        #: The points' records (:class:`clgrid.core.register.RecordScan`,
        #: points sorted by cell): one footprint a record; None: one a point.
        self.records = records
        #: Records degridded by register blocks instead
        #: (:class:`clgrid.core.register.RegisterInterpolator`), or None.
        self.register = register
        #: Work-items per record (0: one a record) and CPUs' records by rows
        #: as vectors (up to W 64): the source's choice for the device.
        self.record_group, self.record_vector = source.record_kernels(
            self._profile, record_group, record_vector)
        self._taps: list[cla.Array] | None = None   # vector taps, made on first use

    @property
    def window_planes(self) -> int:
        """w planes in interpolate_tiles' window of a tile's cells: W (every
        plane one point reads), more up to WINDOW_BYTES; 0 (no window, the
        kernel is not built) on GPUs, without w-stacking (one plane: copying
        the window costs more than it saves, RESULTS "Degridding from tile
        windows") or where W planes exceed WINDOW_BYTES."""
        if not self.tiles.vector or self.tiled is False or not self.geometry.do_w:
            return 0
        support = self.layout.choice.support
        plane_bytes = ((self.tiles.tile_u + support - 1)
                       * (self.tiles.lanes + row_taps(support) - 1) * self._grid_complex.itemsize)
        if support * plane_bytes > self.WINDOW_BYTES:
            return 0
        return max(support, min(self.layout.n_planes, self.WINDOW_BYTES // plane_bytes))

    @property
    def kernel_name(self) -> str:
        """CPUs (vector tiles): a tile's points from a compact window of its
        cells (interpolate_tiles), else each point's rows as vectors straight
        from the planes (interpolate_vector); GPUs: interpolate."""
        if not self.tiles.vector:
            return "interpolate"
        return "interpolate_tiles" if self.window_planes else "interpolate_vector"

    def _extra_params(self) -> dict:
        return {**super()._extra_params(), **self.source.interpolate_params(self)}

    def tile_items(self, points: PointSet) -> cla.Array | None:
        """``interpolate_tiles``' work items, (tile, first point, end) int4,
        once per point set: every tile with points, a dense one in chunks of
        :func:`vector_chunk_points` (load balance, as ``spread_vector``'s),
        in :func:`balanced_order`; None without points."""
        work = self.work_of(points)
        if "interp_tiles" not in work:
            n_tiles = points.ntiles_u * points.ntiles_v
            bounds = points.bin_start_host.astype(np.int64)
            starts = bounds[np.arange(n_tiles + 1) * self.layout.n_wbins]
            counts = np.diff(starts)
            size = vector_chunk_points(int(counts.sum()), self.queue.device.max_compute_units,
                                       self.tiles)
            chunks = -(-counts // size)
            tile, chunk = split_items(chunks)
            first = starts[tile] + chunk * size
            end = np.minimum(first + size, starts[tile + 1])
            items = np.stack([tile, first, end, np.zeros_like(tile)], axis=1).astype(np.int32)
            items = items[balanced_order(end - first, chunks[tile] > 1)]
            work["interp_tiles"] = cla.to_device(self.queue, items) if items.size else None
        return work["interp_tiles"]

    def interpolate(self, job: InterpolateJob) -> None:
        """One row block's interpolation for the engine
        (:class:`clgrid.core.engine.InterpolateStage`): the source's launches."""
        self.source.interpolate(self, job)

    def __call__(self, points: PointSet, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 out_d: cla.Array, npol: int, pol: int, planes_d: cla.Array,
                 plane0: int, n_pass: int, wgt_d: cla.Array | None = None,
                 mask_d: cla.Array | None = None, accumulate: bool = True) -> cl.Event | None:
        """The ES kernel's launch: add the interpolated visibilities of planes
        ``plane0 ..`` into ``out_d`` (overwrite the points' entries with
        ``accumulate=False``)."""
        if points.n_valid == 0:
            return None
        phasors = self.phasors(points, uvw_d, freq_scale_d)
        kernel = self.kernel(wgt_d is not None, mask_d is not None, phasors is not None)
        group = 64
        if self.kernel_name == "interpolate_tiles":
            items = self.tile_items(points)
            if items is None:
                return None
            return kernel(
                self.queue, (items.shape[0],), (1,),
                points.cells.data, points.fracs.data, items.data,
                np.int32(points.ntiles_v), uvw_d.data,
                freq_scale_d.data, np.uint32(freq_scale_d.shape[0]), out_d.data,
                np.uint32(npol), np.uint32(pol), *self._weights(wgt_d, mask_d), planes_d.data,
                np.int32(self.layout.nu), np.int32(self.layout.nv), np.int32(plane0),
                np.int32(n_pass), *self._phase_args(phasors), np.int32(accumulate))
        if self.kernel_name == "interpolate_vector":
            return kernel(
                self.queue, (-(-points.n_valid // self.points_per_item),), (1,),
                points.cells.data, points.fracs.data, np.uint32(points.n_valid), uvw_d.data,
                freq_scale_d.data, np.uint32(freq_scale_d.shape[0]), out_d.data,
                np.uint32(npol), np.uint32(pol), *self._weights(wgt_d, mask_d), planes_d.data,
                np.int32(self.layout.nu), np.int32(self.layout.nv), np.int32(plane0),
                np.int32(n_pass), *self._phase_args(phasors), np.int32(accumulate))
        return kernel(
            self.queue, (-(-points.n_valid // group) * group,), (group,),
            points.cells.data, points.fracs.data, np.uint32(points.n_valid), uvw_d.data,
            freq_scale_d.data, np.uint32(freq_scale_d.shape[0]), out_d.data, np.uint32(npol),
            np.uint32(pol), *self._weights(wgt_d, mask_d), planes_d.data,
            np.int32(self.layout.nu), np.int32(self.layout.nv),
            np.int32(plane0), np.int32(n_pass), *self._phase_args(phasors),
            np.int32(accumulate))


def explain_interpolation(profile: DeviceProfile, support: int = 7) -> str:
    """How dirty2vis interpolates on this device for a kernel of width
    ``support`` (``clgrid devices --explain``, beside
    :func:`clgrid.core.plan.explain_imaging`): the kernels
    :attr:`Interpolator.kernel_name` picks."""
    if not profile.usable:
        return "-"
    if not TileShape.for_device(profile, support).vector:
        return "a work-item a visibility"
    return (f"{Interpolator.points_per_item} points a work-item; with w a tile a work-item "
            f"from a window of its cells (tiles of >= {Interpolator.WINDOW_MIN_POINTS} points; "
            f"dense ones in chunks)")


__all__ = ["Interpolator", "Spreader", "explain_interpolation", "keeps_facet_phases",
           "tile_words"]

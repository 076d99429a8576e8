"""Gridding core, stage "set points": visibilities binned into tiles on the device.

One class, :class:`SetPoints`, for both kernel sources; what differs is its
configuration (:class:`PositionSource`): :class:`EsPositions` (the imaging
path, below) or :class:`clgrid.core.table.TablePositions` (the table
gridders: table footprints, flags, the cell order of the register spread).

For every visibility (row, channel) a kernel computes its bin: the spreading
tile holding the first cell of its kernel footprint and, with w-stacking, the
first w plane it touches (``templates/core_setpoints.cl.mako``).  clgrid's
radix sort (:mod:`clgrid.device.radixsort`: stable and free of atomics, so the order
-- and every sum made in it -- is the same run after run) orders the
visibility indices by bin, a second kernel writes where each bin starts and
a third each valid point's cells and offsets in that order (``point_records``,
read by the spreaders).  Points whose uvw is not finite are counted and left
out.  Nothing here reads the visibilities themselves: the result
depends on the geometry only and is reused by every call with new data.
On devices without fp64 the positions are computed in float-float pairs
(:func:`float_float`, ``templates/floatfloat.cl.mako``), to about 44 bits.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.cltypes as cltypes
import pyopencl.tools as cl_tools

from ..device.kernels import KernelTemplate, launch, real_dtype_name
from ..device.profiles import DeviceProfile
from ..device.radixsort import RadixSort
from .plan import SPEED_OF_LIGHT, GridLayout, ImageGeometry, TileShape


@dataclasses.dataclass
class PointSet:
    """Visibilities sorted by bin, on the device.

    Attributes
    ----------
    sorted_index
        (n_vis,) uint32 visibility indices (row * nchan + chan), in bin order;
        the ``n_valid`` valid ones first.
    bin_start
        (n_bins + 1,) uint32: bin ``b`` holds ``sorted_index[bin_start[b]:
        bin_start[b + 1]]``.
    n_valid, n_invalid
        Visibilities with a finite position, and without (left out).
    ntiles_u, ntiles_v
        Tiles along u and v.
    bin_start_host
        ``bin_start`` on the host, for planning the spreader's work list.
    split_start
        Where bins are split (:attr:`EsPositions.split_bins`): (4 n_bins + 1)
        uint32, sub-bin ``4 b + r`` of bin ``b`` holds its points of rank
        ``r`` (0: the footprint reaches neither the next tile in u nor in v;
        1: in u only; 2: both; 3: in v only), so a tile reads of its lower
        neighbours' bins only the points that reach it; else None.
    cells, fracs
        Per valid point in sorted order: (n_valid,) int4 (first footprint
        cell in u and v, first w plane, visibility index) and (n_valid,)
        real4 offsets in [0, 1] past those cells (kernel ``point_records``),
        which the spreaders and the CPU interpolator read instead of uvw
        (set by :class:`SetPoints`; the table gridder's points,
        :mod:`clgrid.core.table`, carry their own ``cells`` and no ``fracs``).
    work
        The spreader's work lists over these points, built on first use
        (they depend on the bins only).
    """

    sorted_index: cla.Array
    bin_start: cla.Array
    n_valid: int
    n_invalid: int
    ntiles_u: int
    ntiles_v: int
    bin_start_host: np.ndarray
    cells: cla.Array | None = None
    fracs: cla.Array | None = None
    split_start: cla.Array | None = None
    work: dict = dataclasses.field(default_factory=dict)


def coordinate_scales(geometry: ImageGeometry, layout: GridLayout) -> tuple[float, ...]:
    """(u_scale, v_scale, w_scale, w_offset) from metres * (freq / c) to grid cells
    in u, v and to plane units in w."""
    s_u, s_v, s_w = geometry.signs
    return (s_u * layout.nu * geometry.pixsize_x, s_v * layout.nv * geometry.pixsize_y,
            s_w / layout.dw, layout.w0 / layout.dw)


class PositionSource(Protocol):
    """What set points bin, and how: the kernel source's part of set points.

    :class:`EsPositions` (the imaging path: the ES kernel's footprints on
    the periodic grid, w planes binned too) or
    :class:`clgrid.core.table.TablePositions` (the table gridders: table
    footprints, flagged and off-grid points left out, by tile or by cell).
    It holds what differs -- the template parameters, the kernels' names and
    arguments, the counters, the records kept per point and the result --
    and :class:`SetPoints` runs the steps they share (keys, sort, bin
    starts, records).
    """

    #: ``'tile'`` (bins of tiles, with bin starts) or ``'cell'`` (one stream
    #: sorted by footprint start cell).
    order: str
    key_dtype: np.dtype
    #: Counters the key kernel adds to (points left out, by reason).
    n_counts: int
    #: Names of the key and record kernels of ``core_setpoints.cl.mako``.
    kernels: tuple[str, str]
    #: Plans made per call (their scratch from a pool that keeps it).
    per_call: bool
    #: Each bin's points in sub-bins by the next tiles they reach (the
    #: points' ``split_start``; the ES source only).
    split_bins: bool
    #: w bins per tile (1 without w-stacking).
    n_wbins: int
    #: What the bins depend on besides the tile (:attr:`SetPoints.binning`).
    binned: object

    def float_float(self, queue: cl.CommandQueue) -> bool:
        """Whether positions go in float-float on this device."""

    def params(self, tiles: TileShape, as_float_float: bool) -> dict:
        """The template parameters of ``core_setpoints.cl.mako``."""

    def extent(self, tiles: TileShape) -> tuple[int, int]:
        """Rows and columns of the binned grid, whole tiles."""

    def check_call(self, n_vis: int, flags_d: cla.Array | None) -> None:
        """ValueError for a call these set points cannot bin."""

    def key_args(self, stage: "SetPoints", flags_d: cla.Array | None, npol: int) -> tuple:
        """The key kernel's arguments between ``n_vis`` and the keys."""

    def record_args(self, stage: "SetPoints") -> tuple:
        """The records kernel's arguments between ``nchan`` and the cells."""

    def record_outputs(self, queue: cl.CommandQueue, n_valid: int, allocator) -> dict:
        """Arrays of the records kernel's outputs after ``cells``, by the
        :class:`PointSet` field each becomes."""

    def result(self, points: PointSet, counts: np.ndarray, n_vis: int,
               binning: tuple) -> object:
        """What a call returns: the points, with the counters read."""


@dataclasses.dataclass(frozen=True)
class EsPositions:
    """Set points of the imaging path (:class:`PositionSource`): each
    visibility's bin is the tile of its ES footprint's first cell on the
    periodic grid of ``layout`` and its first w plane; points with a
    non-finite uvw are counted and left out; each kept point's cells and
    offsets are kept (``point_records``)."""

    geometry: ImageGeometry
    layout: GridLayout
    #: Each bin's points sorted by which next tiles their footprints reach
    #: (:func:`clgrid.core.spread.splits_bins`; the points' ``split_start``).
    split_bins: bool = False

    order = "tile"
    key_dtype = np.dtype(np.uint32)
    n_counts = 1
    kernels = ("bin_keys", "point_records")
    per_call = False   # one plan per observation

    def float_float(self, queue: cl.CommandQueue) -> bool:
        return needs_float_float(queue, self.geometry)

    def params(self, tiles: TileShape, as_float_float: bool) -> dict:
        return {"support": self.layout.choice.support, "tile_u": tiles.tile_u,
                "tile_v": tiles.lanes, "do_w": self.geometry.do_w,
                "real": real_dtype_name(self.geometry.grid_real), "positions": "es",
                "oversample": 1, "conjugate": False, "w_planes": 1, "key_order": "tile",
                "float_float": as_float_float, "split_bins": self.split_bins}

    def extent(self, tiles: TileShape) -> tuple[int, int]:
        return self.layout.nu, self.layout.nv

    @property
    def n_wbins(self) -> int:
        return self.layout.n_wbins

    def check_call(self, n_vis: int, flags_d: cla.Array | None) -> None:
        if flags_d is not None:
            raise ValueError("the ES set points bin every point: masks go to the spread")

    def _scales(self, as_float_float: bool) -> tuple:
        return position_args(coordinate_scales(self.geometry, self.layout), as_float_float)

    def key_args(self, stage: "SetPoints", flags_d: cla.Array | None, npol: int) -> tuple:
        return (np.int32(self.layout.nu), np.int32(self.layout.nv), np.int32(stage.ntiles_v),
                *self._scales(stage.float_float), np.int32(self.layout.n_wbins))

    def record_args(self, stage: "SetPoints") -> tuple:
        return (np.int32(self.layout.nu), np.int32(self.layout.nv),
                *self._scales(stage.float_float))

    def record_outputs(self, queue: cl.CommandQueue, n_valid: int, allocator) -> dict:
        """Each kept point's offsets past its cells (the spreaders' ``fracs``)."""
        real4 = cltypes.float4 if self.geometry.grid_real == np.float32 else cltypes.double4
        return {"fracs": cla.empty(queue, max(n_valid, 1), real4)}

    @property
    def binned(self) -> "EsPositions":
        return self

    def result(self, points: PointSet, counts: np.ndarray, n_vis: int,
               binning: tuple) -> PointSet:
        return points


class SetPoints:
    """Compile-once binning of visibilities on one device (the engine's
    :class:`clgrid.core.engine.PointsStage`), for either kernel source.

    Parameters
    ----------
    queue
        Command queue of the device.
    source
        What is binned and how (:class:`PositionSource`): :class:`EsPositions`
        or :class:`clgrid.core.table.TablePositions`.
    tiles
        The spreading tile (from :mod:`clgrid.core.plan`): the bins are its tiles.
    float_float
        Positions in float-float, as on devices without fp64 (None: the
        source decides by the device; tests force it).
    """

    def __init__(self, queue: cl.CommandQueue, source: PositionSource, tiles: TileShape,
                 float_float: bool | None = None):
        self.queue, self.source, self.tiles = queue, source, tiles
        self.order = source.order
        #: No fp64 on the device: uvw, freq / c and the scales as float-float.
        self.float_float = (source.float_float(queue) if float_float is None
                            else bool(float_float))
        self.key_dtype = source.key_dtype
        self.sort = RadixSort(queue, key_dtype=self.key_dtype)
        template = KernelTemplate(queue, "core_setpoints.cl.mako",
                                  source.params(tiles, self.float_float),
                                  need_f64=not self.float_float)
        keys, records = source.kernels
        self._keys = template.kernel(keys)
        #: GPUs find each bin's start by a binary search, a work-item a bin
        #: (``bin_starts_search``): a work-item a point writes each empty run
        #: of bins alone, and most of a large grid's bins are empty; CPUs,
        #: whose threads take the points' runs in turn, keep that one.
        self.starts_per_bin = bool(queue.device.type & cl.device_type.GPU)
        self._starts = template.kernel("bin_starts_search" if self.starts_per_bin
                                       else "bin_starts")
        self._records = template.kernel(records)
        #: The binned grid's sides, whole tiles.
        self.rows, self.cols = source.extent(tiles)
        self.ntiles_u = self.rows // tiles.tile_u
        self.ntiles_v = self.cols // tiles.lanes
        self.n_bins = self.ntiles_u * self.ntiles_v * source.n_wbins
        #: Sub-bins a bin (split_bins: the SPLIT_RANKS of the template).
        self.split = 4 if source.split_bins else 1
        if self.n_bins * self.split >= 2 ** 32 - 1:
            raise ValueError(f"{self.n_bins} bins do not fit 32-bit keys: "
                             "image fewer pixels or split the w range")
        self._dummy_flags = cla.empty(queue, 1, np.uint8)
        # Plans made per call draw their buffers from a pool that keeps them:
        # a Gridder called again and again re-plans into memory already
        # touched (fresh host pages cost the CPU runtimes about a third of
        # the set points at 1 M visibilities).
        self.allocator = (cl_tools.MemoryPool(cl_tools.ImmediateAllocator(queue))
                          if source.per_call else None)

    @property
    def binning(self) -> tuple:
        """What the points' bins depend on; equal for interchangeable set points."""
        return (self.source.binned, self.tiles)

    def upload(self, uvw_m: np.ndarray, freq_scale: np.ndarray) -> tuple[cla.Array, cla.Array]:
        """``uvw_m`` (nrow, 3) and ``freq_scale`` (nchan,) on the device as
        these set points read them: float64, or float-float pairs."""
        return (positions_to_device(self.queue, uvw_m, self.float_float),
                positions_to_device(self.queue, freq_scale, self.float_float))

    def __call__(self, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 flags_d: cla.Array | None = None, npol: int = 1):
        """Bin every (row, channel) of ``uvw_d`` (nrow, 3) metres and
        ``freq_scale_d`` (nchan,) freq / c on the device; ``flags_d``: (nrow,
        nchan, npol) uint8, nonzero = flagged, for sources that leave
        flagged points out.  The source's result
        (:meth:`PositionSource.result`)."""
        queue, source, alloc = self.queue, self.source, self.allocator
        n_chan = freq_scale_d.shape[0]
        n_vis = uvw_d.shape[0] * n_chan
        source.check_call(n_vis, flags_d)
        counts_d = cla.zeros(queue, source.n_counts, np.uint32, allocator=alloc)
        keys = cla.empty(queue, max(n_vis, 1), self.key_dtype, allocator=alloc)
        if n_vis:
            launch(self._keys, queue, (n_vis,), uvw_d.data, freq_scale_d.data,
                   np.uint32(n_chan), np.uint32(n_vis), *source.key_args(self, flags_d, npol),
                   keys.data, counts_d.data, group=(256,))
        sorted_index, bin_start, split_start = self._sort(keys, n_vis)
        counts = counts_d.get() if n_vis else np.zeros(source.n_counts, np.uint32)
        n_valid = n_vis - int(counts.sum())
        points = PointSet(sorted_index, bin_start, n_valid, n_vis - n_valid, self.ntiles_u,
                          self.ntiles_v, bin_start.get() if self.order == "tile" else None,
                          split_start=split_start)
        self._write_records(points, uvw_d, freq_scale_d)
        return source.result(points, counts, n_vis, self.binning)

    def _sort(self, keys: cla.Array, n_vis: int) -> tuple:
        """Indices in key order, the bins' starts (the cell order has no
        bins: one sorted stream) and the sub-bins' (None unless split)."""
        if self.order == "cell":
            sorted_index = sort_by_key(self.queue, self.sort, keys, n_vis,
                                       self.source.n_cell_keys, self.allocator)[1]
            return sorted_index, cla.zeros(self.queue, 1, np.uint32), None
        return sort_into_bins(self.queue, self.sort, self._starts, keys, n_vis, self.n_bins,
                              self.allocator, self.split, self.starts_per_bin)

    def _write_records(self, points: PointSet, uvw_d: cla.Array,
                       freq_scale_d: cla.Array) -> None:
        """Each kept point's cells, and what else the source keeps, in sorted order."""
        n_valid = points.n_valid
        points.cells = cla.empty(self.queue, max(n_valid, 1), cltypes.int4,
                                 allocator=self.allocator)
        extra = self.source.record_outputs(self.queue, n_valid, self.allocator)
        for name, array in extra.items():
            setattr(points, name, array)
        if n_valid:
            launch(self._records, self.queue, (n_valid,), points.sorted_index.data,
                   np.uint32(n_valid), uvw_d.data, freq_scale_d.data,
                   np.uint32(freq_scale_d.shape[0]), *self.source.record_args(self),
                   points.cells.data, *(array.data for array in extra.values()), group=(256,))


def needs_float_float(queue: cl.CommandQueue, geometry: ImageGeometry) -> bool:
    """Whether the core computes positions and phases in float-float (a
    device without fp64); such a device takes single precision only."""
    profile = DeviceProfile.from_device(queue.device)
    if profile.fp64:
        return False
    if geometry.grid_real != np.float32:
        raise ValueError(f"{profile.device_name!r} has no double precision (fp64): use "
                         "single precision (complex64 visibilities, float32 images) without "
                         "double_precision_accumulation")
    return True


def float_float(values) -> np.ndarray:
    """float64 values as (..., 2) float32 (hi, lo) pairs, hi + lo equal to
    them to about 44 bits (``templates/floatfloat.cl.mako``).  Finite values
    beyond float range are clamped to +-1e30 (they are off any grid), so
    only NaN and Inf stay non-finite."""
    values = np.asarray(values, np.float64)
    pairs = np.empty(values.shape + (2,), np.float32)
    hi, lo = pairs[..., 0], pairs[..., 1]
    with np.errstate(invalid="ignore", over="ignore"):
        np.copyto(hi, values, casting="unsafe")
        np.subtract(values, hi, out=lo, casting="unsafe")
    odd = ~np.isfinite(lo)          # non-finite, or beyond float range (rare)
    if odd.any():
        finite = np.isfinite(values[odd])
        hi[odd] = np.where(finite, np.clip(values[odd], -1e30, 1e30), values[odd])
        lo[odd] = 0.0
    return pairs


def position_args(values, as_float_float: bool) -> tuple:
    """Scalar kernel arguments of positions: float64, or float2 (hi, lo)."""
    if as_float_float:
        return tuple(cltypes.make_float2(*pair) for pair in float_float(values))
    return tuple(np.float64(v) for v in values)


def positions_to_device(queue: cl.CommandQueue, values: np.ndarray,
                        as_float_float: bool) -> cla.Array:
    """uvw (nrow, 3) metres or freq / c (nchan,) on the device as the core
    reads them: float64, or (..., 2) float-float pairs."""
    if as_float_float:
        return cla.to_device(queue, float_float(values))
    return cla.to_device(queue, np.ascontiguousarray(values, np.float64))


def sort_by_key(queue: cl.CommandQueue, sort: RadixSort, keys: cla.Array, n_vis: int,
                span: int, allocator=None) -> tuple[cla.Array, cla.Array]:
    """Visibility indices sorted by their ``keys`` (stable, clgrid's radix
    sort of ``min(key, span)``, so keys >= ``span`` last):
    ``(sorted_keys, sorted_index)``; scratch from ``allocator`` (pyopencl's,
    None: the queue's context)."""
    sorted_keys, sorted_index = keys, cla.empty(queue, 1, np.uint32, allocator=allocator)
    if n_vis:
        scratch = [cla.empty(queue, n_vis, keys.dtype, allocator=allocator)] + [
            cla.empty(queue, n_vis, np.uint32, allocator=allocator) for _ in range(2)]
        keys_buffer, order_buffer, _ = sort(keys.data, n_vis, 0, span,
                                            tuple(a.data for a in scratch))
        sorted_keys = _array_of(keys_buffer, [keys] + scratch)
        sorted_index = _array_of(order_buffer, scratch)
    return sorted_keys, sorted_index


def sort_into_bins(queue: cl.CommandQueue, sort: RadixSort, starts: cl.Kernel,
                   keys: cla.Array, n_vis: int, n_bins: int, allocator=None,
                   split: int = 1, per_bin: bool = False
                   ) -> tuple[cla.Array, cla.Array, cla.Array | None]:
    """Visibility indices sorted by their ``keys`` (:func:`sort_by_key`),
    where each of the ``n_bins`` bins starts (kernel ``starts``:
    ``bin_starts``, a work-item a point, or with ``per_bin``
    ``bin_starts_search``, a work-item a bin) and, where keys hold
    ``split`` (4) sub-bins a bin in their low bits, where each sub-bin
    starts (else None): ``(sorted_index, bin_start, split_start)``."""
    sorted_keys, sorted_index = sort_by_key(queue, sort, keys, n_vis, n_bins * split,
                                            allocator)
    shift = (split - 1).bit_length()
    bin_start = cla.empty(queue, n_bins + 1, np.uint32, allocator=allocator)
    launch(starts, queue, ((n_bins if per_bin else n_vis) + 1,), sorted_keys.data,
           np.uint32(n_vis), np.uint32(n_bins), np.uint32(shift), bin_start.data, group=(256,))
    split_start = None
    if split > 1:
        split_start = cla.empty(queue, n_bins * split + 1, np.uint32, allocator=allocator)
        launch(starts, queue, ((n_bins * split if per_bin else n_vis) + 1,), sorted_keys.data,
               np.uint32(n_vis), np.uint32(n_bins * split), np.uint32(0), split_start.data,
               group=(256,))
    return sorted_index, bin_start, split_start


def freq_scale(freq_hz: np.ndarray) -> np.ndarray:
    """freq / c: metres to wavelengths per channel."""
    return np.asarray(freq_hz, np.float64) / SPEED_OF_LIGHT


def _array_of(buffer: cl.Buffer, candidates: list[cla.Array]) -> cla.Array:
    """The device array (among ``candidates``) whose buffer the sort returned."""
    for array in candidates:
        if array.data.int_ptr == buffer.int_ptr:
            return array
    raise AssertionError("the radix sort returned a buffer it was not given")


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (a launch's global size)."""
    return -(-int(n) // multiple) * multiple


__all__ = ["EsPositions", "PointSet", "PositionSource", "SetPoints", "coordinate_scales", "float_float", "freq_scale",
           "needs_float_float", "position_args", "positions_to_device", "round_up",
           "sort_by_key", "sort_into_bins"]

"""Gridding core, stage "set points": visibilities binned into tiles on the device.

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

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.cltypes as cltypes

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
    work: dict = dataclasses.field(default_factory=dict)


def coordinate_scales(geometry: ImageGeometry, layout: GridLayout) -> tuple[float, ...]:
    """(u_scale, v_scale, w_scale, w_offset) from metres * (freq / c) to grid cells
    in u, v and to plane units in w."""
    s_u, s_v, s_w = geometry.signs
    return (s_u * layout.nu * geometry.pixsize_x, s_v * layout.nv * geometry.pixsize_y,
            s_w / layout.dw, layout.w0 / layout.dw)


class SetPoints:
    """Compile-once binning of one observation's visibilities on one device.

    Parameters
    ----------
    queue
        Command queue of the device.
    geometry, layout, tiles
        From :mod:`clgrid.core.plan`.
    """

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                 tiles: TileShape):
        self.queue = queue
        self.sort = RadixSort(queue)
        self.geometry, self.layout, self.tiles = geometry, layout, tiles
        #: No fp64 on the device: uvw, freq / c and the scales as float-float.
        self.float_float = needs_float_float(queue, geometry)
        self.template = KernelTemplate(
            queue, "core_setpoints.cl.mako",
            {"support": layout.choice.support, "tile_u": tiles.tile_u,
             "tile_v": tiles.lanes, "do_w": geometry.do_w,
             "real": real_dtype_name(geometry.grid_real), "positions": "es",
             "oversample": 1, "conjugate": False, "w_planes": 1, "key_order": "tile",
             "float_float": self.float_float},
            need_f64=not self.float_float)
        self._keys = self.template.kernel("bin_keys")
        self._starts = self.template.kernel("bin_starts")
        self._records = self.template.kernel("point_records")
        self.ntiles_u = layout.nu // tiles.tile_u
        self.ntiles_v = layout.nv // tiles.lanes
        self.n_bins = self.ntiles_u * self.ntiles_v * layout.n_wbins
        if self.n_bins >= 2 ** 32 - 1:
            raise ValueError(f"{self.n_bins} bins do not fit 32-bit keys: "
                             "image fewer pixels or split the w range")

    def __call__(self, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 flags_d: cla.Array | None = None, npol: int = 1) -> PointSet:
        """Bin every (row, channel) of ``uvw_d`` (nrow, 3) metres and
        ``freq_scale_d`` (nchan,) freq / c on the device (the engine's
        :class:`clgrid.core.engine.PointsStage`; flags are the spread's
        masks here, never set points')."""
        if flags_d is not None:
            raise ValueError("the ES set points bin every point: masks go to the spread")
        queue = self.queue
        n_chan = freq_scale_d.shape[0]
        n_vis = uvw_d.shape[0] * n_chan
        keys = cla.empty(queue, max(n_vis, 1), np.uint32)
        n_invalid_d = cla.zeros(queue, 1, np.uint32)
        n_invalid = 0
        if n_vis:
            launch(self._keys, queue, (n_vis,), uvw_d.data, freq_scale_d.data,
                   np.uint32(n_chan), np.uint32(n_vis), np.int32(self.layout.nu),
                   np.int32(self.layout.nv), np.int32(self.ntiles_v), *self._scales(),
                   np.int32(self.layout.n_wbins), keys.data, n_invalid_d.data, group=(256,))
            n_invalid = int(n_invalid_d.get()[0])
        # keys sort as min(key, n_bins): the invalid ones (INVALID_KEY) last
        sorted_index, bin_start = sort_into_bins(queue, self.sort, self._starts, keys, n_vis,
                                                 self.n_bins)
        points = PointSet(sorted_index, bin_start, n_vis - n_invalid, n_invalid,
                          self.ntiles_u, self.ntiles_v, bin_start.get())
        self._write_records(points, uvw_d, freq_scale_d)
        return points

    def _write_records(self, points: PointSet, uvw_d: cla.Array,
                       freq_scale_d: cla.Array) -> None:
        n_valid = points.n_valid
        real4 = cltypes.float4 if self.geometry.grid_real == np.float32 else cltypes.double4
        points.cells = cla.empty(self.queue, max(n_valid, 1), cltypes.int4)
        points.fracs = cla.empty(self.queue, max(n_valid, 1), real4)
        if n_valid:
            launch(self._records, self.queue, (n_valid,), points.sorted_index.data,
                   np.uint32(n_valid), uvw_d.data, freq_scale_d.data,
                   np.uint32(freq_scale_d.shape[0]), np.int32(self.layout.nu),
                   np.int32(self.layout.nv), *self._scales(), points.cells.data,
                   points.fracs.data, group=(256,))

    def _scales(self) -> tuple:
        return position_args(coordinate_scales(self.geometry, self.layout), self.float_float)


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
                   keys: cla.Array, n_vis: int, n_bins: int,
                   allocator=None) -> tuple[cla.Array, cla.Array]:
    """Visibility indices sorted by their ``keys`` (:func:`sort_by_key`) and
    where each of the ``n_bins`` bins starts (kernel ``bin_starts``):
    ``(sorted_index, bin_start)``."""
    sorted_keys, sorted_index = sort_by_key(queue, sort, keys, n_vis, n_bins, allocator)
    bin_start = cla.empty(queue, n_bins + 1, np.uint32, allocator=allocator)
    launch(starts, queue, (n_vis + 1,), sorted_keys.data, np.uint32(n_vis), np.uint32(n_bins),
           bin_start.data, group=(256,))
    return sorted_index, bin_start


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


__all__ = ["PointSet", "SetPoints", "coordinate_scales", "float_float", "freq_scale",
           "needs_float_float", "position_args", "positions_to_device", "round_up",
           "sort_by_key", "sort_into_bins"]

"""Gridding core, stage "set points": visibilities binned into tiles on the device.

For every visibility (row, channel) a kernel computes its bin: the spreading
tile holding the first cell of its kernel footprint and, with w-stacking, the
first w plane it touches (``templates/core_setpoints.cl.mako``).  pyopencl's
radix sort (stable, so the order -- and every sum made in it -- is the same
run after run) orders the visibility indices by bin, and a second kernel
writes where each bin starts.  Points whose uvw is not finite are counted
and left out.  Nothing here reads the visibilities themselves: the result
depends on the geometry only and is reused by every call with new data.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.algorithm import RadixSort
from pyopencl.scan import GenericScanKernel

from ..device import DeviceProfile
from ..kernels import KernelTemplate
from .plan import SPEED_OF_LIGHT, GridLayout, ImageGeometry, TileShape

_sorters: dict[int, RadixSort] = {}
_sorters_lock = threading.Lock()


def _radix_sort(context: cl.Context) -> RadixSort:
    """pyopencl's radix sort of (key, index) pairs, compiled once per context."""
    with _sorters_lock:
        sorter = _sorters.get(context.int_ptr)
        if sorter is None:
            sorter = RadixSort(context, "unsigned int *keys, unsigned int *index",
                               key_expr="keys[i]", sort_arg_names=["keys", "index"],
                               key_dtype=np.uint32, bits_at_a_time=4,
                               scan_kernel=GenericScanKernel)
            _sorters[context.int_ptr] = sorter
    return sorter


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
    """

    sorted_index: cla.Array
    bin_start: cla.Array
    n_valid: int
    n_invalid: int
    ntiles_u: int
    ntiles_v: int
    bin_start_host: np.ndarray


def coordinate_scales(geometry: ImageGeometry, layout: GridLayout) -> tuple[float, ...]:
    """(u_scale, v_scale, w_scale, w_offset) from metres * (freq / c) to grid cells
    in u, v and to plane units in w."""
    s_u, s_v, s_w = geometry.signs
    return (s_u * layout.nu * geometry.pixsize_x, s_v * layout.nv * geometry.pixsize_y,
            s_w / layout.dw, layout.w0 / layout.dw)


#: Where the (key, index) pairs are sorted: pyopencl's radix sort on the
#: device, or numpy's stable argsort on the host (for the Oclgrind simulator,
#: which reports false races inside pyopencl's scan kernels -- a known
#: Oclgrind/LLVM problem with optimised scans -- and is too slow for it).
SORTS = ("device", "host")


class SetPoints:
    """Compile-once binning of one observation's visibilities on one device.

    Parameters
    ----------
    queue
        Command queue of the device.
    geometry, layout, tiles
        From :mod:`clgrid.core.plan`.
    sort
        One of :data:`SORTS`; default ``'host'`` on simulators, else ``'device'``.
        Both are stable, so both give the same order.
    """

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                 tiles: TileShape, sort: str | None = None):
        self.queue = queue
        profile = DeviceProfile.from_device(queue.device)
        self.sort = sort or ("host" if profile.is_simulator else "device")
        if self.sort not in SORTS:
            raise ValueError(f"sort must be one of {SORTS}, got {sort!r}")
        self.geometry, self.layout, self.tiles = geometry, layout, tiles
        self.template = KernelTemplate(
            queue, "core_setpoints.cl.mako",
            {"support": layout.choice.support, "tile_u": tiles.tile_u,
             "tile_v": tiles.lanes, "do_w": geometry.do_w}, need_f64=True)
        self._keys = self.template.kernel("bin_keys")
        self._starts = self.template.kernel("bin_starts")
        self.ntiles_u = layout.nu // tiles.tile_u
        self.ntiles_v = layout.nv // tiles.lanes
        self.n_bins = self.ntiles_u * self.ntiles_v * layout.n_wbins
        if self.n_bins >= 2 ** 32 - 1:
            raise ValueError(f"{self.n_bins} bins do not fit 32-bit keys: "
                             "image fewer pixels or split the w range")

    def __call__(self, uvw_d: cla.Array, freq_scale_d: cla.Array) -> PointSet:
        """Bin every (row, channel) of ``uvw_d`` (nrow, 3) metres and
        ``freq_scale_d`` (nchan,) freq / c on the device."""
        queue = self.queue
        n_chan = freq_scale_d.shape[0]
        n_vis = uvw_d.shape[0] * n_chan
        keys = cla.empty(queue, max(n_vis, 1), np.uint32)
        index = cla.empty(queue, max(n_vis, 1), np.uint32)
        n_invalid_d = cla.zeros(queue, 1, np.uint32)
        u_scale, v_scale, w_scale, w_offset = coordinate_scales(self.geometry, self.layout)
        if n_vis:
            self._keys(queue, (_round_up(n_vis, 256),), None, uvw_d.data, freq_scale_d.data,
                       np.uint32(n_chan), np.uint32(n_vis), np.int32(self.layout.nu),
                       np.int32(self.layout.nv), np.int32(self.ntiles_v),
                       np.float64(u_scale), np.float64(v_scale), np.float64(w_scale),
                       np.float64(w_offset), np.int32(self.layout.n_wbins),
                       keys.data, index.data, n_invalid_d.data)
            key_bits = max(int(self.n_bins).bit_length(), 1)
            n_invalid = int(n_invalid_d.get()[0])
            if n_invalid:
                key_bits = 32   # the INVALID_KEY sentinel sorts last
            if self.sort == "device":
                (keys, index), _ = _radix_sort(queue.context)(
                    keys[:n_vis], index[:n_vis], key_bits=_round_up(key_bits, 4), queue=queue)
            else:
                host_keys = keys.get()[:n_vis]
                order = np.argsort(host_keys, kind="stable").astype(np.uint32)
                keys, index = cla.to_device(queue, host_keys[order]), cla.to_device(queue, order)
        else:
            n_invalid = 0
        bin_start = cla.empty(queue, self.n_bins + 1, np.uint32)
        self._starts(queue, (_round_up(n_vis + 1, 256),), None, keys.data, np.uint32(n_vis),
                     np.uint32(self.n_bins), bin_start.data)
        return PointSet(index, bin_start, n_vis - n_invalid, n_invalid,
                        self.ntiles_u, self.ntiles_v, bin_start.get())


def freq_scale(freq_hz: np.ndarray) -> np.ndarray:
    """freq / c: metres to wavelengths per channel."""
    return np.asarray(freq_hz, np.float64) / SPEED_OF_LIGHT


def _round_up(n: int, multiple: int) -> int:
    return -(-int(n) // multiple) * multiple


__all__ = ["PointSet", "SetPoints", "coordinate_scales", "freq_scale"]

"""Gridding core, stages "spread" and "interpolate": points <-> uv grid planes.

Both run on the bins of :mod:`clgrid.core.setpoints` and evaluate the ES
kernel on the fly.

* :class:`Spreader` (``templates/core_spread.cl.mako``): output-owned tiles.
  A work-group owns one tile of one w plane and reads the points of the bins
  that can reach it; every cell is written by exactly one work-item, once:
  no atomics, no clearing, the same bits every run.  The tile shape comes
  from the device (:class:`clgrid.core.plan.TileShape`): on GPUs each lane
  keeps a column of the tile in registers with a fixed, unrolled row loop;
  on CPUs lanes are SIMD lanes and the row loop is clipped to the footprint.
* :class:`Interpolator` (``templates/core_interp.cl.mako``): one work-item
  per visibility in bin order, gathering its footprint from the planes of a
  pass; adds into its own output element.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..kernels import KernelTemplate, real_dtype_name
from .plan import GridLayout, ImageGeometry, TileShape
from .setpoints import PointSet, coordinate_scales


def _common_params(geometry: ImageGeometry, layout: GridLayout, weighted: bool,
                   masked: bool) -> dict:
    return {"real": real_dtype_name(geometry.grid_real),
            "vis_real": real_dtype_name(geometry.vis_real),
            "support": layout.choice.support, "beta": layout.choice.beta,
            "do_w": geometry.do_w, "shifted": geometry.shifted,
            "weighted": weighted, "masked": masked,
            "fast_math": False}


def _shift_args(geometry: ImageGeometry) -> tuple[np.float64, np.float64]:
    s_u, s_v, _ = geometry.signs
    return (np.float64(2.0 * np.pi * s_u * geometry.center_x),
            np.float64(2.0 * np.pi * s_v * geometry.center_y))


class _Stage:
    """Kernels of one template, built per (weighted, masked) on first use."""

    template_name = ""
    kernel_name = ""

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                 tiles: TileShape):
        self.queue = queue
        self.geometry, self.layout, self.tiles = geometry, layout, tiles
        self._kernels: dict[tuple[bool, bool], cl.Kernel] = {}
        self._dummy_real = cla.empty(queue, 1, geometry.vis_real)
        self._dummy_mask = cla.empty(queue, 1, np.uint8)
        self.scales = [np.float64(s) for s in coordinate_scales(geometry, layout)]

    def _extra_params(self) -> dict:
        return {}

    def kernel(self, weighted: bool, masked: bool) -> cl.Kernel:
        key = (weighted, masked)
        if key not in self._kernels:
            params = _common_params(self.geometry, self.layout, weighted, masked)
            params.update(self._extra_params())
            template = KernelTemplate(self.queue, self.template_name, params, need_f64=True)
            self._kernels[key] = template.kernel(self.kernel_name)
        return self._kernels[key]

    def _weights(self, wgt: cla.Array | None, mask: cla.Array | None) -> tuple:
        return ((wgt if wgt is not None else self._dummy_real).data,
                (mask if mask is not None else self._dummy_mask).data)


class Spreader(_Stage):
    """Visibilities -> the uv grid planes of one pass (see the module notes)."""

    template_name = "core_spread.cl.mako"
    kernel_name = "spread"

    def _extra_params(self) -> dict:
        return {"tile_u": self.tiles.tile_u, "lanes": self.tiles.lanes,
                "unrolled": self.tiles.unrolled}

    def __call__(self, points: PointSet, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 vis_d: cla.Array, npol: int, pol: int, planes_d: cla.Array,
                 plane0: int, n_pass: int, wgt_d: cla.Array | None = None,
                 mask_d: cla.Array | None = None) -> cl.Event:
        """Write planes ``plane0 .. plane0 + n_pass - 1`` of polarisation ``pol``
        into ``planes_d`` ((>= n_pass, nu, nv) complex)."""
        lanes = self.tiles.lanes
        n_tiles = points.ntiles_u * points.ntiles_v
        kernel = self.kernel(wgt_d is not None, mask_d is not None)
        return kernel(
            self.queue, (n_tiles * lanes, n_pass), (lanes, 1),
            points.sorted_index.data, points.bin_start.data, uvw_d.data, freq_scale_d.data,
            np.uint32(freq_scale_d.shape[0]), vis_d.data, np.uint32(npol), np.uint32(pol),
            *self._weights(wgt_d, mask_d), planes_d.data,
            np.int32(self.layout.nu), np.int32(self.layout.nv),
            np.int32(points.ntiles_u), np.int32(points.ntiles_v), *self.scales,
            np.int32(plane0), np.int32(self.layout.n_wbins), *_shift_args(self.geometry))


class Interpolator(_Stage):
    """The planes of one pass -> visibilities, added into ``out_d``."""

    template_name = "core_interp.cl.mako"
    kernel_name = "interpolate"

    def __call__(self, points: PointSet, uvw_d: cla.Array, freq_scale_d: cla.Array,
                 out_d: cla.Array, npol: int, pol: int, planes_d: cla.Array,
                 plane0: int, n_pass: int, wgt_d: cla.Array | None = None,
                 mask_d: cla.Array | None = None) -> cl.Event | None:
        if points.n_valid == 0:
            return None
        kernel = self.kernel(wgt_d is not None, mask_d is not None)
        group = 64
        return kernel(
            self.queue, (-(-points.n_valid // group) * group,), (group,),
            points.sorted_index.data, np.uint32(points.n_valid), uvw_d.data,
            freq_scale_d.data, np.uint32(freq_scale_d.shape[0]), out_d.data, np.uint32(npol),
            np.uint32(pol), *self._weights(wgt_d, mask_d), planes_d.data,
            np.int32(self.layout.nu), np.int32(self.layout.nv), *self.scales,
            np.int32(plane0), np.int32(n_pass), *_shift_args(self.geometry))


__all__ = ["Interpolator", "Spreader"]

"""Gridding core, stage "correct": uv grid planes <-> dirty image.

:class:`Corrector` (``templates/core_correct.cl.mako``) holds the per-pixel
correction (1 / the ES kernel's Fourier transform in u, v and, with
w-stacking, w; and 1 / n), computed once on the device, and applies it while
moving between the planes of one pass (after / before their FFTs) and the
image, with each plane's w phase screen.  Planes are summed into a pixel in
a fixed order, so repeated runs give the same bits.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .eskernel import es_kernel, gauss_legendre
from ..device.kernels import KernelTemplate, real_dtype_name
from .plan import GridLayout, ImageGeometry

#: Gauss-Legendre nodes for the w kernel's Fourier transform.
N_QUADRATURE = 100


class Corrector:
    """Compile-once grid correction for one geometry and layout on one device."""

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout):
        self.queue = queue
        self.geometry, self.layout = geometry, layout
        self.template = KernelTemplate(
            queue, "core_correct.cl.mako",
            {"real": real_dtype_name(geometry.grid_real), "do_w": geometry.do_w,
             "divide_by_n": geometry.divide_by_n, "n_quadrature": N_QUADRATURE},
            need_f64=True)
        self._to_dirty = self.template.kernel("planes_to_dirty")
        self._to_planes = self.template.kernel("dirty_to_planes")
        self.corr_d = self._compute_correction()

    def _image_args(self) -> tuple:
        g = self.geometry
        centre_l, centre_m = g.centre_lm
        return (np.float64(g.pixsize_x), np.float64(g.pixsize_y), np.float64(centre_l),
                np.float64(centre_m))

    def _compute_correction(self) -> cla.Array:
        g, layout, choice = self.geometry, self.layout, self.layout.choice
        t_x = np.arange(g.npix_x) - g.npix_x // 2
        t_y = np.arange(g.npix_y) - g.npix_y // 2
        corr_x = 1.0 / choice.fourier(t_x / layout.nu)
        corr_y = 1.0 / choice.fourier(t_y / layout.nv)
        nodes, weights = gauss_legendre(N_QUADRATURE)
        s_q = nodes * (choice.support / 2.0)
        phi_q = es_kernel(s_q, choice.support, choice.beta) * weights * (choice.support / 2.0)
        corr = cla.empty(self.queue, (g.npix_x, g.npix_y), g.grid_real)
        arrays = [cla.to_device(self.queue, a) for a in (corr_x, corr_y, s_q, phi_q)]
        self.template.kernel("correction")(
            self.queue, (g.npix_x, g.npix_y), None, corr.data, np.int32(g.npix_x),
            np.int32(g.npix_y), arrays[0].data, arrays[1].data, *self._image_args(),
            arrays[2].data, arrays[3].data, np.float64(layout.dw)).wait()
        return corr

    def planes_to_dirty(self, planes_d: cla.Array, plane0: int, n_pass: int,
                        dirty_d: cla.Array, scale: float, accumulate: bool = True) -> cl.Event:
        """``dirty_d += `` the corrected sum of planes ``plane0 ..`` (after the
        FFT); ``accumulate=False``: ``dirty_d =`` it (any prior content)."""
        g, layout = self.geometry, self.layout
        return self._to_dirty(
            self.queue, (g.npix_y, g.npix_x), None, planes_d.data, np.int32(layout.nu),
            np.int32(layout.nv), np.int32(n_pass), dirty_d.data, self.corr_d.data,
            np.int32(g.npix_x), np.int32(g.npix_y), *self._image_args(),
            np.float64(layout.w_of_plane(plane0)), np.float64(layout.dw),
            g.grid_real.type(scale), np.int32(accumulate))

    def dirty_to_planes(self, dirty_d: cla.Array, plane0: int, n_pass: int,
                        planes_d: cla.Array) -> cl.Event:
        """Planes ``plane0 ..`` (before the FFT) from the corrected image; every
        cell written."""
        g, layout = self.geometry, self.layout
        return self._to_planes(
            self.queue, (layout.nv, layout.nu), None, dirty_d.data, self.corr_d.data,
            np.int32(g.npix_x), np.int32(g.npix_y), planes_d.data, np.int32(layout.nu),
            np.int32(layout.nv), np.int32(n_pass), *self._image_args(),
            np.float64(layout.w_of_plane(plane0)),
            np.float64(layout.dw))


__all__ = ["Corrector", "N_QUADRATURE"]

"""Gridding core, stage "correct": uv grid planes <-> dirty image.

:class:`Corrector` (``templates/core_correct.cl.mako``) holds the per-pixel
correction (1 / the ES kernel's Fourier transform in u, v and, with
w-stacking, w; and 1 / n), computed once on the device, and applies it while
moving between the planes of one pass (after / before their FFTs) and the
image, with each plane's w phase screen.  Planes are summed into a pixel in
a fixed order, so repeated runs give the same bits.  On devices without
fp64 the screens' phases are float-float turns (see the template); on
PoCL's CPUs each pixel's screen and its step are computed once per pass and
kept (:func:`keeps_screens`).
"""

from __future__ import annotations

import functools

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .eskernel import es_fourier, es_kernel, gauss_legendre
from ..device.kernels import KernelTemplate, launch, real_dtype_name
from ..device.profiles import DeviceProfile
from .plan import GridLayout, ImageGeometry, fits_kept
from .setpoints import needs_float_float, position_args

#: Gauss-Legendre nodes for the w kernel's Fourier transform.
N_QUADRATURE = 100
#: Bytes of one pixel's cached screens (double4: first plane and step).
SCREEN_BYTES = 32


def keeps_screens(profile: DeviceProfile, geometry: ImageGeometry, layout: GridLayout,
                  float_float: bool) -> bool:
    """Whether the w screens are computed once per plan and kept: on PoCL's
    CPU devices, whose double sincos is a scalar libm call (two a pixel took
    15-16 ms of each 1024^2 correction kernel on 2 cores, 2026-11-25), where
    the screens of every plane fit (:func:`clgrid.core.plan.fits_kept`)."""
    screen_bytes = SCREEN_BYTES * geometry.npix_x * geometry.npix_y
    return bool(geometry.do_w and not float_float and profile.device_type == "cpu"
                and profile.platform_key == "pocl"
                and fits_kept(profile, screen_bytes, screen_bytes * layout.n_planes))


@functools.lru_cache(maxsize=64)
def axis_correction(npix: int, n_grid: int, support: int, beta: float) -> np.ndarray:
    """``1 / phi_hat(t / n_grid)`` for the pixel offsets ``t = -npix / 2 ..
    npix / 2 - 1`` of one axis (float64, read-only).  The transform is even,
    so it is computed for ``|t|`` (half the quadrature's cosines: 200 nodes a
    pixel, 8 M cosines for two 4096-pixel axes), and kept per geometry: a new
    observation's plan of the same image asks again."""
    offsets = np.arange(npix // 2 + 1)
    inverse = 1.0 / es_fourier(offsets / n_grid, support, beta)
    values = inverse[np.abs(np.arange(npix) - npix // 2)]
    values.flags.writeable = False
    return values


class Corrector:
    """Compile-once grid correction for one geometry and layout on one device."""

    #: GPUs' work-group of the plane <-> image kernels: two grid rows of 128
    #: cells.  The default (64, 1) left an H100's dirty_to_planes at 0.47 ms
    #: for a 8192^2 plane, (128, 2) 0.31 ms, planes_to_dirty 0.35-0.39 ->
    #: 0.25 ms (benchmarks/RESULTS.md, 2026-11-28); CPUs keep the default.
    GPU_GROUP = (128, 2)

    #: Whether the w correction and the kept screens of an image at the phase
    #: centre are computed for a quarter of the pixels
    #: (``w_kernel_hat_quadrant``, ``screen_phasors_quadrant``); tests compare.
    QUADRANT = True

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout):
        self.queue = queue
        self.geometry, self.layout = geometry, layout
        profile = DeviceProfile.from_device(queue.device)
        #: No fp64 on the device: phase screens from float-float n - 1 and w.
        self.float_float = needs_float_float(queue, geometry)
        #: The w screens computed once per pass and kept (:func:`keeps_screens`).
        self.cache_screens = keeps_screens(profile, geometry, layout, self.float_float)
        #: Work-group of planes_to_dirty and dirty_to_planes (None: launch's default).
        self.group = None if profile.device_type == "cpu" else self.GPU_GROUP
        self.template = KernelTemplate(
            queue, "core_correct.cl.mako",
            {"real": real_dtype_name(geometry.grid_real), "do_w": geometry.do_w,
             "divide_by_n": geometry.divide_by_n, "n_quadrature": N_QUADRATURE // 2,
             "float_float": self.float_float, "cache_screens": self.cache_screens},
            need_f64=not self.float_float)
        # the kept screens' variants read them instead of computing them
        kept = "_cached" if self.cache_screens else ""
        self._to_dirty = self.template.kernel("planes_to_dirty" + kept)
        self._to_planes = self.template.kernel("dirty_to_planes" + kept)
        self.corr_d = self._compute_correction()
        #: Each pass's cached screens (cache_screens), by its first plane.
        self._screens: dict[int, cla.Array] = {}

    def _cached_screens(self, plane0: int) -> cla.Array:
        """The screens of the pass starting at ``plane0`` (made on first use)."""
        if plane0 not in self._screens:
            g = self.geometry
            screens = cla.empty(self.queue, (g.npix_x, g.npix_y, 4), np.float64)
            if self._by_quadrant:   # a quarter of the sincos
                w_first, dw = self._screen_args(plane0)[-2:]
                launch(self.template.kernel("screen_phasors_quadrant"), self.queue,
                       (g.npix_y // 2 + 1, g.npix_x // 2 + 1), screens.data,
                       np.int32(g.npix_x), np.int32(g.npix_y), np.float64(g.pixsize_x),
                       np.float64(g.pixsize_y), w_first, dw)
            else:
                launch(self.template.kernel("screen_phasors"), self.queue, (g.npix_y, g.npix_x),
                       screens.data, np.int32(g.npix_x), np.int32(g.npix_y),
                       *self._screen_args(plane0))
            self._screens[plane0] = screens
        return self._screens[plane0]

    def _image_values(self) -> list[float]:
        g = self.geometry
        return [g.pixsize_x, g.pixsize_y, *g.centre_lm]

    def _screen_args(self, plane0: int) -> tuple:
        """Image geometry, first plane's w and the w step of the phase screens."""
        layout = self.layout
        return position_args(self._image_values() + [layout.w_of_plane(plane0), layout.dw],
                             self.float_float)

    def _compute_correction(self) -> cla.Array:
        g, layout, choice = self.geometry, self.layout, self.layout.choice
        corr_x = axis_correction(g.npix_x, layout.nu, choice.support, choice.beta)
        corr_y = axis_correction(g.npix_y, layout.nv, choice.support, choice.beta)
        # the kernel and the cosine are even and the nodes come in +- pairs of
        # equal weight: the positive half, each twice, halves the cosines
        nodes, weights = gauss_legendre(N_QUADRATURE)
        half = slice(N_QUADRATURE // 2, None)
        assert N_QUADRATURE % 2 == 0 and np.array_equal(nodes[half], -nodes[::-1][half])
        s_q = nodes[half] * (choice.support / 2.0)
        phi_q = (2 * es_kernel(s_q, choice.support, choice.beta) * weights[half]
                 * (choice.support / 2.0))
        corr = cla.empty(self.queue, (g.npix_x, g.npix_y), g.grid_real)
        # without fp64 the correction is computed in float (see the template)
        real = np.float32 if self.float_float else np.float64
        arrays = [cla.to_device(self.queue, a.astype(real)) for a in (corr_x, corr_y, s_q, phi_q)]
        hat, quadrant = self._w_kernel_hat_quadrant(arrays[2], arrays[3], real)
        launch(
            self.template.kernel("correction"), self.queue, (g.npix_x, g.npix_y), corr.data,
            np.int32(g.npix_x), np.int32(g.npix_y), arrays[0].data, arrays[1].data,
            *(real(v) for v in self._image_values()), arrays[2].data, arrays[3].data,
            real(layout.dw), hat.data, np.int32(quadrant)).wait()
        return corr

    @property
    def _by_quadrant(self) -> bool:
        """Whether this image's w terms come from a quadrant of pixel
        offsets: at the phase centre, where they depend on l^2 and m^2 only
        (:data:`QUADRANT`, read per call: tests switch it)."""
        return self.QUADRANT and self.geometry.centre_lm == (0.0, 0.0)

    def _w_kernel_hat_quadrant(self, s_q_d: cla.Array, phi_q_d: cla.Array,
                               real) -> tuple[cla.Array, bool]:
        """The w kernel's transform at each pixel offset of a quadrant (with
        w, an image centred on the phase centre: it depends on l^2 and m^2
        only), else a placeholder and False."""
        g = self.geometry
        if not (g.do_w and self._by_quadrant):
            return s_q_d, False
        shape = (g.npix_x // 2 + 1, g.npix_y // 2 + 1)
        hat = cla.empty(self.queue, shape, real)
        launch(self.template.kernel("w_kernel_hat_quadrant"), self.queue, shape, hat.data,
               np.int32(g.npix_x), np.int32(g.npix_y), real(g.pixsize_x), real(g.pixsize_y),
               s_q_d.data, phi_q_d.data, real(self.layout.dw))
        return hat, True

    def planes_to_dirty(self, planes_d: cla.Array, plane0: int, n_pass: int,
                        dirty_d: cla.Array, scale: float, accumulate: bool = True) -> cl.Event:
        """``dirty_d += `` the corrected sum of planes ``plane0 ..`` (after the
        FFT); ``accumulate=False``: ``dirty_d =`` it (any prior content)."""
        g, layout = self.geometry, self.layout
        cached = (self._cached_screens(plane0).data,) if self.cache_screens else ()
        return launch(
            self._to_dirty, self.queue, (g.npix_y, g.npix_x), planes_d.data, np.int32(layout.nu),
            np.int32(layout.nv), np.int32(n_pass), dirty_d.data, self.corr_d.data,
            np.int32(g.npix_x), np.int32(g.npix_y), *self._screen_args(plane0),
            g.grid_real.type(scale), np.int32(accumulate), *cached, group=self.group)

    def dirty_to_planes(self, dirty_d: cla.Array, plane0: int, n_pass: int,
                        planes_d: cla.Array) -> cl.Event:
        """Planes ``plane0 ..`` (before the FFT) from the corrected image; every
        cell written."""
        g, layout = self.geometry, self.layout
        cached = (self._cached_screens(plane0).data,) if self.cache_screens else ()
        return launch(
            self._to_planes, self.queue, (layout.nv, layout.nu), dirty_d.data, self.corr_d.data,
            np.int32(g.npix_x), np.int32(g.npix_y), planes_d.data, np.int32(layout.nu),
            np.int32(layout.nv), np.int32(n_pass), *self._screen_args(plane0), *cached,
            group=self.group)


__all__ = ["Corrector", "N_QUADRATURE", "SCREEN_BYTES", "keeps_screens"]

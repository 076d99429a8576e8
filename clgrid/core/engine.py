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
at construction.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.profiles import DeviceProfile
from .correct import Corrector
from .fft import DeviceFFT, Pruning
from .plan import GridLayout, ImageGeometry, TileShape, planes_per_pass
from .setpoints import SetPoints, freq_scale
from .spread import Interpolator, Spreader


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
        (nrow, 3) float64 device array of baselines in metres; (nchan,) Hz.
    planes
        ``(first, stop)``: grid only these w planes (a device's share of a
        multi-device w-stacking job); default all.
    fft_backend
        As for :class:`clgrid.core.fft.DeviceFFT`.
    tiles
        Spreading tile; default :meth:`TileShape.for_device` (tests force the
        GPU shape on CPUs with it).
    """

    def __init__(self, queue: cl.CommandQueue, geometry: ImageGeometry, layout: GridLayout,
                 uvw_d: cla.Array, freq_hz: np.ndarray,
                 planes: tuple[int, int] | None = None, fft_backend: str | None = None,
                 tiles: TileShape | None = None):
        self.queue = queue
        self.profile = DeviceProfile.from_device(queue.device)
        self.geometry, self.layout = geometry, layout
        self.tiles = tiles or TileShape.for_device(self.profile, layout.choice.support)
        self.tiles.check(layout.choice.support)
        self.uvw_d = uvw_d
        self.freq_scale_d = cla.to_device(queue, freq_scale(freq_hz))
        self.n_chan = len(freq_hz)
        self.grid_complex = np.dtype(np.complex64 if geometry.grid_real == np.float32
                                     else np.complex128)
        first, stop = planes if planes is not None else (0, layout.n_planes)
        self.plane_range = (int(first), int(stop))
        self.points = SetPoints(queue, geometry, layout, self.tiles)(uvw_d, self.freq_scale_d)
        other_bytes = (self.points.sorted_index.nbytes * 2 + self.points.bin_start.nbytes
                       + uvw_d.nbytes)
        image_bytes = geometry.npix_x * geometry.npix_y * geometry.grid_real.itemsize
        self.n_pass = min(planes_per_pass(self.profile, layout, self.grid_complex, other_bytes,
                                          image_bytes), max(stop - first, 1))
        self.spreader = Spreader(queue, geometry, layout, self.tiles)
        self.interpolator = Interpolator(queue, geometry, layout, self.tiles)
        self.corrector = Corrector(queue, geometry, layout)
        self.planes_d = cla.empty(queue, (self.n_pass, layout.nu, layout.nv), self.grid_complex)
        self.fft = DeviceFFT(queue, self.planes_d.shape, self.grid_complex, fft_backend)
        self.pruning = self._pruning()

    def _pruning(self) -> Pruning:
        """Grid rows the visibilities' kernels reach and grid columns of image
        pixels: a pruned FFT transforms only those (ducc0's lever)."""
        layout, tiles, points = self.layout, self.tiles, self.points
        counts = np.diff(points.bin_start_host.astype(np.int64))
        used = counts.reshape(points.ntiles_u, -1).sum(axis=1) > 0
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

    # ---------------------------------------------------------- gridding
    def grid_pass(self, vis_d: cla.Array, npol: int, pol: int, plane0: int, n_pass: int,
                  wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None) -> cla.Array:
        """Spread one polarisation into planes ``plane0 ..`` (no FFT); returns
        the planes buffer (its first ``n_pass`` planes are valid)."""
        self.spreader(self.points, self.uvw_d, self.freq_scale_d, vis_d, npol, pol,
                      self.planes_d, plane0, n_pass, wgt_d, mask_d)
        return self.planes_d

    def planes_to_dirty(self, plane0: int, n_pass: int, dirty_d: cla.Array,
                        prune: bool = True) -> None:
        """Backward FFT of the planes buffer and its corrected sum into ``dirty_d``.
        ``prune=False`` for grids holding other engines' visibilities too (a
        multi-device sum), whose rows this engine's pruning does not know."""
        self.fft.backward(self.planes_d, self.pruning if prune else None)
        self.corrector.planes_to_dirty(self.planes_d, plane0, n_pass, dirty_d,
                                       self.fft.backward_scale)

    def vis2dirty(self, vis_d: cla.Array, npol: int, pol: int,
                  wgt_d: cla.Array | None = None, mask_d: cla.Array | None = None) -> cla.Array:
        """(npix_x, npix_y) dirty image of polarisation ``pol`` on the device,
        in grid precision.  ``vis_d``: complex, (row, chan, pol) order."""
        g = self.geometry
        dirty_d = cla.zeros(self.queue, (g.npix_x, g.npix_y), g.grid_real)
        for plane0, n_pass in self.passes():
            self.grid_pass(vis_d, npol, pol, plane0, n_pass, wgt_d, mask_d)
            self.planes_to_dirty(plane0, n_pass, dirty_d)
        return dirty_d

    # ---------------------------------------------------------- degridding
    def dirty2vis(self, images_d: list[cla.Array], wgt_d: cla.Array | None = None,
                  mask_d: cla.Array | None = None) -> cla.Array:
        """(n_vis, npol) visibilities of npol (npix_x, npix_y) device images
        (grid precision)."""
        npol = len(images_d)
        out_d = cla.zeros(self.queue, (self.n_vis, npol), np.dtype(
            np.complex64 if self.geometry.vis_real == np.float32 else np.complex128))
        for pol, image_d in enumerate(images_d):
            for plane0, n_pass in self.passes():
                self.corrector.dirty_to_planes(image_d, plane0, n_pass, self.planes_d)
                self.fft.forward(self.planes_d, self.pruning)
                self.interpolator(self.points, self.uvw_d, self.freq_scale_d, out_d, npol, pol,
                                  self.planes_d, plane0, n_pass, wgt_d, mask_d)
        return out_d


__all__ = ["GriddingEngine"]

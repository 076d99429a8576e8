"""Gridding core, the image stage: w planes <-> dirty image (FFT, then correction).

The imaging path's last stage (:class:`clgrid.core.engine.Engine` with
``Stages.image``); the table gridders have none (their caller's grid is the
target).  :class:`ImageStage` holds what the stage plans from the geometry
and the observation -- the planes a pass holds, the pruned FFT's rows and
columns -- and makes each workspace's part (:class:`ImageScratch`: the
w-plane buffer, its FFT plan (:mod:`clgrid.core.fft`) and the correction
(:mod:`clgrid.core.correct`)).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.profiles import DeviceProfile
from .correct import Corrector
from .fft import DeviceFFT, Pruning
from .plan import GridLayout, ImageGeometry, TileShape, planes_per_pass


@dataclasses.dataclass
class ImageScratch:
    """One workspace's planes buffer, FFT plan and correction."""

    planes_d: cla.Array
    fft: DeviceFFT
    corrector: Corrector


class ImageStage:
    """FFT and correction of the w planes ``plane_range`` of one geometry
    and layout (``fft_backend``: as for :class:`clgrid.core.fft.DeviceFFT`)."""

    def __init__(self, geometry: ImageGeometry, layout: GridLayout,
                 plane_range: tuple[int, int], fft_backend: str | None = None):
        self.geometry, self.layout = geometry, layout
        self.grid_complex = np.dtype(np.complex64 if geometry.grid_real == np.float32
                                     else np.complex128)
        self.plane_range = (int(plane_range[0]), int(plane_range[1]))
        self.fft_backend = fft_backend

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

    def pruning(self, blocks: list, tiles: TileShape) -> Pruning:
        """Grid rows the visibilities' kernels reach and grid columns of image
        pixels: a pruned FFT transforms only those (ducc0's lever)."""
        layout = self.layout
        used = sum(np.diff(b.points.bin_start_host.astype(np.int64))
                   .reshape(b.points.ntiles_u, -1).sum(axis=1) for b in blocks) > 0
        reach = np.arange(tiles.tile_u + layout.choice.support - 1)
        rows = np.unique((np.flatnonzero(used)[:, None] * tiles.tile_u + reach).ravel()
                         % layout.nu) if used.any() else np.zeros(0, np.int64)
        offsets = np.arange(self.geometry.npix_y) - self.geometry.npix_y // 2
        cols = np.where(offsets < 0, offsets + layout.nv, offsets)
        return Pruning(rows, cols)

    def scratch(self, queue: cl.CommandQueue, n_pass: int) -> ImageScratch:
        """A workspace's planes (``n_pass`` of them), FFT plan and correction."""
        corrector = Corrector(queue, self.geometry, self.layout)
        planes_d = cla.empty(queue, (n_pass, self.layout.nu, self.layout.nv), self.grid_complex)
        fft = DeviceFFT(queue, planes_d.shape, self.grid_complex, self.fft_backend)
        return ImageScratch(planes_d, fft, corrector)


__all__ = ["ImageScratch", "ImageStage"]

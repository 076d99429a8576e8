"""``clgrid tune imaging``: time the gridding core's tiles on a device, cache the fastest.

:func:`tune_tiles` grids a synthetic observation (random baselines filling
the uv plane densely at its centre, as real arrays do) with every candidate
of :func:`clgrid.core.tuning.tiles.tile_candidates` and stores the per-tile
times; every later :class:`clgrid.Imager` of that device, kernel width,
precision and w mode then spreads with the winner.  Results are the same to
rounding whichever tile runs (each is tested against the direct transform),
and each is bit-reproducible.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from tqdm.auto import tqdm

from ..core.plan import SPEED_OF_LIGHT, ImageGeometry, TileShape
from ..core.tuning.tiles import store_tiles, tile_candidates
from ..core.tuning.timing import median_seconds
from ..device.profiles import DeviceProfile
from ..imaging.imager import Imager


def synthetic_observation(n_rows: int, n_chan: int, seed: int = 0
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uvw (metres, Gaussian: dense at the centre), freq (Hz), visibilities."""
    rng = np.random.default_rng(seed)
    uvw = rng.normal(scale=[1500.0, 1500.0, 300.0], size=(n_rows, 3))
    freq = np.linspace(1.3e9, 1.4e9, n_chan)
    vis = (rng.standard_normal((n_rows, n_chan))
           + 1j * rng.standard_normal((n_rows, n_chan))).astype(np.complex64)
    return uvw, freq, vis


def tune_tiles(queue: cl.CommandQueue, *, epsilon: float = 1e-5, do_wgridding: bool = False,
               precision: str = "single", npix: int = 1024, n_rows: int = 100_000,
               n_chan: int = 8, repeats: int = 3, progress: bool = True) -> dict:
    """Time every candidate tile for this device and problem; cache the fastest.

    Returns ``{"tiles": winner, "seconds": {tile: seconds}, "support": W}``.
    """
    uvw, freq, vis = synthetic_observation(n_rows, n_chan)
    cell = 1.0 / (2.2 * np.abs(uvw[:, :2]).max() * freq[-1] / SPEED_OF_LIGHT)
    geometry = ImageGeometry.from_arguments(npix_x=npix, npix_y=npix, pixsize_x=cell,
                                            pixsize_y=cell, epsilon=epsilon,
                                            do_wgridding=do_wgridding, precision=precision)
    reference = Imager(queue, uvw=uvw, freq=freq, geometry=geometry)
    vis = vis.astype(reference.vis_complex)
    support, profile = reference.kernel_choice.support, DeviceProfile.from_device(queue.device)
    seconds: dict[TileShape, float] = {}
    for shape in tqdm(tile_candidates(profile, support, do_wgridding),
                      desc="clgrid tune imaging", disable=not progress):
        imager = Imager(queue, uvw=uvw, freq=freq, geometry=geometry, tiles=shape,
                        layout=reference.layout)
        vis_d = cla.to_device(queue, np.ascontiguousarray(vis, imager.vis_complex))
        seconds[shape] = median_seconds(lambda: imager.vis2dirty_device(vis_d), queue, repeats)
    winner = store_tiles(profile, support, reference.grid_real, do_wgridding, seconds)
    return {"tiles": winner, "seconds": seconds, "support": support}


__all__ = ["synthetic_observation", "tune_tiles"]

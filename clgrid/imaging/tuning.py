"""``clgrid tune-core``: time the gridding core's tiles on a device, cache the fastest.

:func:`tune_tiles` grids a synthetic observation (random baselines filling
the uv plane densely at its centre, as real arrays do) with every candidate
of :func:`clgrid.core.tuning.tile_candidates` and stores the per-tile times;
every later :class:`clgrid.Imager` of that device, kernel width, precision
and w mode then spreads with the winner.  Results are the same to rounding
whichever tile runs (each is tested against the direct transform), and each
is bit-reproducible.
"""

from __future__ import annotations

import time

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from tqdm.auto import tqdm

from ..core.plan import SPEED_OF_LIGHT, ImageGeometry, TileShape
from ..core.tuning import store_tiles, tile_candidates
from ..device.profiles import DeviceProfile
from .imager import Imager


def synthetic_observation(n_rows: int, n_chan: int, seed: int = 0):
    """uvw (metres, Gaussian: dense at the centre), freq (Hz), visibilities."""
    rng = np.random.default_rng(seed)
    uvw = rng.normal(scale=[1500.0, 1500.0, 300.0], size=(n_rows, 3))
    freq = np.linspace(1.3e9, 1.4e9, n_chan)
    vis = (rng.standard_normal((n_rows, n_chan))
           + 1j * rng.standard_normal((n_rows, n_chan))).astype(np.complex64)
    return uvw, freq, vis


def _seconds(run, queue: cl.CommandQueue, repeats: int) -> float:
    run()
    queue.finish()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        queue.finish()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


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
    for shape in tqdm(tile_candidates(profile, support, do_wgridding), desc="clgrid tune-core",
                      disable=not progress):
        imager = Imager(queue, uvw=uvw, freq=freq, geometry=geometry, tiles=shape,
                        layout=reference.layout)
        vis_d = cla.to_device(queue, np.ascontiguousarray(vis, imager.vis_complex))
        seconds[shape] = _seconds(lambda: imager.vis2dirty_device(vis_d), queue, repeats)
    winner = store_tiles(profile, support, reference.grid_real, do_wgridding, seconds)
    return {"tiles": winner, "seconds": seconds, "support": support}


def _cmd_tune_core(args) -> int:
    from ..device.profiles import create_context
    from ..device.tunecache import cache_path
    try:
        queue = cl.CommandQueue(create_context(args.device))
    except (LookupError, RuntimeError) as error:
        print(f"clgrid: {error}")
        return 2
    for epsilon in args.epsilon:
        for do_w in (False, True) if args.w == "both" else (args.w == "yes",):
            result = tune_tiles(queue, epsilon=epsilon, do_wgridding=do_w,
                                precision=args.precision, npix=args.npix, n_rows=args.rows,
                                n_chan=args.channels)
            times = result["seconds"]
            print(f"epsilon {epsilon:g}, w {do_w}, W {result['support']}: best "
                  f"{result['tiles']} {times[result['tiles']] * 1e3:.1f} ms "
                  f"(of {len(times)} tiles; slowest {max(times.values()) * 1e3:.1f} ms), "
                  f"saved to {cache_path()}")
    return 0


def add_parser(commands) -> None:
    """Register ``clgrid tune-core`` on the CLI."""
    parser = commands.add_parser("tune-core", help="time the gridding core's spreading tiles "
                                 "on a device and cache the fastest (vis2dirty, Imager)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1e-4, 1e-5])
    parser.add_argument("--w", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--precision", choices=("single", "double"), default="single")
    parser.add_argument("--npix", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--channels", type=int, default=8)
    parser.set_defaults(func=_cmd_tune_core)


__all__ = ["add_parser", "synthetic_observation", "tune_tiles"]

"""CPU interpolation with w-stacking: a tile's points from a window of its
cells (``interpolate_tiles``) against each point read straight from the planes
(``interpolate_vector``), on uniformly random uvw from sparse to dense (a
4096² grid of 57 600 tiles, 16 w planes), for several ``WINDOW_MIN_POINTS``
(tiles with fewer points read the planes directly).  Device-only, one pass,
median of ``--repeats``.

    python benchmarks/interp_windows.py --device intel --points 20000 200000 2000000
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import median_seconds, write_json  # noqa: E402
from clgrid.core.plan import SPEED_OF_LIGHT  # noqa: E402
from clgrid.core.spread import Interpolator  # noqa: E402
from clgrid.imaging.imager import Imager  # noqa: E402

#: (column, Interpolator.tiled, Interpolator.WINDOW_MIN_POINTS)
VARIANTS = (("per point", False, 1), ("window >= 1", None, 1), ("window >= 4", None, 4),
            ("window >= 8", None, 8), ("window >= 16", None, 16), ("window >= 32", None, 32))


def interpolation_ms(queue, n_points: int, tiled, min_points: int, repeats: int) -> float:
    """Median time of one interpolation pass over ``n_points`` random points."""
    rng = np.random.default_rng(0)
    uvw_m = rng.uniform(-3000.0, 3000.0, (n_points, 3))
    uvw_m[:, 2] *= 0.3
    freq_hz = np.array([1.4e9])
    cell_rad = 1.0 / (3.0 * 3000.0 * np.sqrt(2.0) * freq_hz[0] / SPEED_OF_LIGHT)
    Interpolator.tiled, Interpolator.WINDOW_MIN_POINTS = tiled, min_points
    imager = Imager(queue, uvw=uvw_m, freq=freq_hz, npix_x=2048, npix_y=2048,
                    pixsize_x=cell_rad, pixsize_y=cell_rad, epsilon=1e-5, do_wgridding=True)
    engine = imager.engine
    plane0, n_pass = engine.image.passes()[0]
    out_d = cla.zeros(queue, (n_points, 1, 1), np.complex64)

    def run():
        for block in engine.blocks:
            engine.interpolator(block.points, block.uvw_d, engine.plan.freq_scale_d, out_d, 1,
                                0, engine.primary.planes_d, plane0, n_pass)

    return median_seconds(run, queue, repeats) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="intel")
    parser.add_argument("--points", type=int, nargs="+", default=[20000, 200000, 2000000])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    defaults = Interpolator.tiled, Interpolator.WINDOW_MIN_POINTS
    print(f"device {queue.device.name.strip()}; ms of one interpolation pass", flush=True)
    print(f"{'points':>9} " + " ".join(f"{name:>13}" for name, _, _ in VARIANTS))
    rows = []
    for n_points in args.points:
        row = {"points": n_points}
        for name, tiled, min_points in VARIANTS:
            row[name] = round(interpolation_ms(queue, n_points, tiled, min_points,
                                               args.repeats), 2)
        rows.append(row)
        print(f"{n_points:>9} " + " ".join(f"{row[name]:>13.2f}" for name, _, _ in VARIANTS),
              flush=True)
    Interpolator.tiled, Interpolator.WINDOW_MIN_POINTS = defaults
    write_json(args.json, "interp_windows", rows, device=queue.device.name.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The imaging core's GPU spreading tiles side by side: one observation, each
tile shape's spread (one pass), vis2dirty on device-resident visibilities and
end to end from numpy, the image's difference from the first tile's and
whether two runs give the same bits; and the first call on device arrays,
which makes the second plan of one row block (``Engine.plan_for``).

    python benchmarks/spread_tiles.py --device nvidia --w both \\
        --tiles 8,8,4096,groups=4 8,16,2048,groups=2 16,16,2048,groups=2

A tile is TileShape's fields in order or by name (as profile_core.py's
``--tiles``; default: the device's own); the first is the reference of the difference column.  Prints a
table and, with ``--json``, writes it.  ``--build-options`` times every tile
once with each set of extra compiler options for the spread kernels, each
set with a leading space so that argparse takes it (e.g. ``"" " -cl-nv-verbose
-cl-nv-maxrregcount=64"`` on NVIDIA), and prints their build logs
(``-cl-nv-verbose`` puts the registers and spills there).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from clgrid.core.tuning.timing import timed_calls  # noqa: E402
from clgrid.imaging.imager import Imager  # noqa: E402
from _common import print_table, write_json  # noqa: E402
from imaging import ska_mid_case  # noqa: E402
from profile_core import tile_shape  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true",
                        help="imaging.py's quick SKA-mid case (200 baselines, 0.25 h, 512^2)")
    for name, kind in (("--baselines", int), ("--hours", float), ("--channels", int),
                       ("--npix", int)):
        parser.add_argument(name, type=kind, default=None, help="as imaging.py's")
    parser.add_argument("--epsilon", type=float, default=1e-5)
    parser.add_argument("--w", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--tiles", nargs="+", default=["default"],
                        help="tiles as TileShape's fields; 'default': the device's own "
                             "for the kernel width and w (TileShape.for_device)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vis-per-block", type=int, nargs="+", default=[None],
                        help="visibilities per row block, each timed (default the device's)")
    parser.add_argument("--build-options", nargs="+", default=[""],
                        help='sets of extra compiler options for the spread kernels, each with a '
                             'leading space (" -cl-nv-verbose")')
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def spread_build_options(extra: str) -> None:
    """Give the spread programs built from here on the options ``extra``
    (a probe: through the kernel module's build step) and print their logs."""
    from clgrid.device import kernels
    original = getattr(kernels, "_original_cached_build", kernels._cached_build)
    kernels._original_cached_build = original

    def build(context, device, source, options):
        if "void spread(" not in source or not extra:
            return original(context, device, source, options)
        program = original(context, device, source, tuple(options) + tuple(extra.split()))
        log = program.get_build_info(device, cl.program_build_info.LOG).strip()
        print(f"spread build log ({extra}):\n{log}", flush=True)
        return program
    kernels._cached_build = build
    with kernels._programs_lock:   # built afresh, not from the memory cache
        kernels._programs.clear()


def observation(args) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """imaging.py's SKA-mid case with unit-variance complex64 visibilities."""
    case = ska_mid_case(args)
    args.npix = case["npix"]
    rng = np.random.default_rng(0)
    vis = np.empty((case["uvw"].shape[0], case["freq"].size), np.complex64)
    vis.real = rng.standard_normal(vis.shape, np.float32)
    vis.imag = rng.standard_normal(vis.shape, np.float32)
    return case["uvw"], case["freq"], vis, case["cell"]


def best_ms(run, queue, repeats: int) -> float:
    return round(min(timed_calls(run, queue, repeats)) * 1e3, 2)


def one_tile(queue, args, text: str, do_w: bool, data, reference,
             vis_per_block: int | None = None) -> tuple[dict, np.ndarray]:
    """One tile's row and its image."""
    uvw, freq, vis, cell = data
    imager = Imager(queue, uvw=uvw, freq=freq, npix_x=args.npix, npix_y=args.npix,
                    pixsize_x=cell, pixsize_y=cell, epsilon=args.epsilon, do_wgridding=do_w,
                    tiles=None if text == "default" else tile_shape(text),
                    vis_per_block=vis_per_block)
    engine = imager.engine
    vis_d = cla.to_device(queue, vis)
    plane0, n_pass = engine.image.passes()[0]
    # the first call on device arrays makes the second plan (Engine.plan_for),
    # after a numpy call has built the kernels (on GPUs on the blocks' plan;
    # CPUs, which read numpy in place, make it there)
    imager.vis2dirty(vis)
    queue.finish()
    started = time.perf_counter()
    imager.vis2dirty_device(vis_d)
    queue.finish()
    first_ms = round(1e3 * (time.perf_counter() - started), 2)
    row = {"w": "yes" if do_w else "no",
           "tiles": text, "geometry": engine.launch_geometry, "W": imager.kernel_choice.support,
           "row blocks": len(engine.blocks), "first device call ms": first_ms,
           "planes": imager.n_planes,
           "spread ms": best_ms(lambda: engine.image.grid_pass(vis_d, 1, 0, plane0, n_pass,
                                                                resident=True),
                                queue, args.repeats),
           "vis2dirty device ms": best_ms(lambda: imager.vis2dirty_device(vis_d), queue,
                                          args.repeats),
           "vis2dirty e2e ms": best_ms(lambda: imager.vis2dirty(vis), queue, args.repeats)}
    first = imager.vis2dirty(vis)
    row["same bits twice"] = bool(np.array_equal(first, imager.vis2dirty(vis)))
    row["rel diff to first tile"] = (0.0 if reference is None else float(
        np.linalg.norm(first - reference) / np.linalg.norm(reference)))
    print(row, flush=True)
    del imager, engine, vis_d
    gc.collect()
    return row, first


def main(argv=None) -> int:
    args = parse_args(argv)
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    start = time.perf_counter()
    data = observation(args)
    print(f"device {queue.device.name.strip()}; {data[2].size / 1e6:.1f} M vis, "
          f"{args.npix}^2, eps {args.epsilon} (simulated in "
          f"{time.perf_counter() - start:.1f} s)", flush=True)
    rows = []
    for do_w in {"no": [False], "yes": [True], "both": [False, True]}[args.w]:
        reference = None
        for text in args.tiles:
            for extra, per_block in ((e, b) for e in args.build_options
                                     for b in args.vis_per_block):
                spread_build_options(extra)
                row, image = one_tile(queue, args, text, do_w, data, reference, per_block)
                row["build options"] = extra
                reference = image if reference is None else reference
                rows.append(row)
    print_table(rows)
    write_json(args.json, "spread_tiles", rows,
               device=clgrid.DeviceProfile.from_device(queue.device).summary(),
               arguments=vars(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

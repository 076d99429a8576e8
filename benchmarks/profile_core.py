"""Where the time of one vis2dirty / dirty2vis goes, stage by stage (device seconds).

Prints one line per stage as soon as it is measured, so a run cut short
still tells where it stopped:

    python benchmarks/profile_core.py --device nvidia --baselines 2016 --hours 2 --channels 64
    python benchmarks/profile_core.py --device intel --baselines 200 --hours 0.25 --channels 8 --npix 512

``--ducc0``: ducc0.wgridder in the same process on every core, timed
between clgrid's rounds (best of ``--repeats`` each), with ducc0 / clgrid.
``--json``: write the stage times there.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from clgrid.core.transfer import row_view  # noqa: E402
from clgrid.core.tuning.timing import timed_calls  # noqa: E402
from clgrid.core.plan import SPEED_OF_LIGHT, TileShape  # noqa: E402
from clgrid.core.setpoints import EsPositions, SetPoints  # noqa: E402
from clgrid.core.spread import Interpolator  # noqa: E402
from clgrid.imaging.imager import Imager, _device_count  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--baselines", type=int, default=2016)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--npix", type=int, default=4096)
    parser.add_argument("--epsilon", type=float, default=1e-5)
    parser.add_argument("--w", action="store_true", help="do_wgridding=True")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vis-per-block", type=int, default=None,
                        help="visibilities per row block (0: one block); default the device's")
    parser.add_argument("--tiles", default=None,
                        help="spreading tile: TileShape's fields in order, comma-separated "
                             "('8,8,4096' a GPU tile; '16,16,2147483648,1,8,1,horner' a CPU "
                             "vector tile of 8 planes a block; '8,8,4096,groups=4' "
                             "by name); default the device's")
    parser.add_argument("--per-point-interp", action="store_true",
                        help="CPUs: interpolate point by point (interpolate_vector) instead "
                             "of from tile windows (interpolate_tiles)")
    parser.add_argument("--ducc0", action="store_true",
                        help="time ducc0.wgridder on every core in the same run")
    parser.add_argument("--json", default=None, help="write the times here")
    return parser.parse_args(argv)


TIMES: dict[str, float] = {}


def tile_shape(text: str) -> TileShape:
    """A TileShape from its fields in order (integers, then words), or by
    name: ``'8,8,4096'``, ``'8,8,4096,groups=4'``."""
    def value(part: str):
        part = part.strip()
        if part in ("True", "False"):
            return part == "True"
        return int(part) if part.lstrip("-").isdigit() else part
    parts = [part for part in text.split(",") if part.strip()]
    named = dict(part.split("=", 1) for part in parts if "=" in part)
    return TileShape(*(value(part) for part in parts if "=" not in part),
                     **{name.strip(): value(text) for name, text in named.items()})


def timed(label: str, run, queue, repeats: int) -> float:
    """Best seconds of ``run()`` (queue drained around it), printed and kept."""
    best = min(timed_calls(run, queue, repeats))
    TIMES[label] = round(best, 5)
    print(f"{label:28s} {best * 1e3:10.2f} ms", flush=True)
    return best


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.per_point_interp:
        Interpolator.tiled = False
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    uvw = simulate_observation("ska1_mid_meerkat_197", duration_h=args.hours, integration_s=8.0,
                               declination_deg=-30.0, n_baselines=args.baselines)
    freq = np.linspace(1.35e9, 1.45e9, args.channels)
    cell = 1.0 / (3.0 * np.max(np.hypot(uvw[:, 0], uvw[:, 1])) * freq[-1] / SPEED_OF_LIGHT)
    rng = np.random.default_rng(0)
    vis = np.empty((uvw.shape[0], freq.size), np.complex64)
    vis.real = rng.standard_normal(vis.shape, np.float32)
    vis.imag = rng.standard_normal(vis.shape, np.float32)
    print(f"device {queue.device.name.strip()}; {vis.size / 1e6:.1f} M vis, {args.npix}^2, "
          f"eps {args.epsilon}, w {args.w}", flush=True)
    start = time.perf_counter()
    imager = Imager(queue, uvw=uvw, freq=freq, npix_x=args.npix, npix_y=args.npix,
                    pixsize_x=cell, pixsize_y=cell, epsilon=args.epsilon, do_wgridding=args.w,
                    vis_per_block=args.vis_per_block,
                    tiles=tile_shape(args.tiles) if args.tiles else None)
    queue.finish()
    engine = imager.engine
    image, primary, freq_scale_d = engine.image, engine.primary, engine.plan.freq_scale_d
    print(f"plan (first, with builds)    {(time.perf_counter() - start) * 1e3:10.2f} ms; "
          f"W {imager.kernel_choice.support} sigma {imager.kernel_choice.sigma} "
          f"grid {imager.nu} planes {imager.n_planes} passes {len(image.passes())} "
          f"tiles {engine.tiles} row blocks {len(engine.blocks)}", flush=True)
    setpoints = SetPoints(queue, EsPositions(imager.geometry, imager.layout), engine.tiles)
    timed("set points (keys+sort+starts)", lambda: [
        setpoints(block.uvw_d, freq_scale_d) for block in engine.blocks], queue,
        args.repeats)
    vis_d = cla.to_device(queue, vis)
    timed("upload pageable", lambda: cla.to_device(queue, vis), queue, args.repeats)
    timed("upload pinned (clgrid)", lambda: imager.uploader.to_device(vis, np.complex64), queue,
          args.repeats)
    timed("download pinned (clgrid)", lambda: imager.uploader.to_host(vis_d), queue,
          args.repeats)
    timed("non-finite count",
          lambda: _device_count(queue, vis_d, "nonfinite", engine.primary.scratch), queue,
          args.repeats)
    plane0, n_pass = image.passes()[0]
    timed(f"spread (one pass, {n_pass} planes)",
          lambda: image.grid_pass(vis_d, 1, 0, plane0, n_pass, resident=True), queue,
          args.repeats)
    timed("fft (one pass)", lambda: primary.fft.backward(primary.planes_d), queue, args.repeats)
    image_d = cla.zeros(queue, (args.npix, args.npix), np.float32)
    timed("correct (one pass)", lambda: primary.corrector.planes_to_dirty(
        primary.planes_d, plane0, n_pass, image_d, 1.0), queue, args.repeats)
    out_d = cla.zeros(queue, vis.shape + (1,), np.complex64)
    timed("interpolate (one pass)", lambda: [engine.interpolator(
        block.points, block.uvw_d, freq_scale_d, row_view(out_d, block.first, block.stop),
        1, 0, primary.planes_d, plane0, n_pass) for block in engine.blocks], queue, args.repeats)
    timed("interpolate (first pass)", lambda: [engine.interpolator(
        block.points, block.uvw_d, freq_scale_d, row_view(out_d, block.first, block.stop),
        1, 0, primary.planes_d, plane0, n_pass, accumulate=False) for block in engine.blocks],
        queue, args.repeats)
    timed("dirty to planes", lambda: primary.corrector.dirty_to_planes(
        image_d, plane0, n_pass, primary.planes_d), queue, args.repeats)
    timed("fft forward (pruned)", lambda: primary.fft.forward(primary.planes_d, image.pruning),
          queue, args.repeats)
    timed("vis2dirty device-resident", lambda: imager.vis2dirty_device(vis_d), queue,
          args.repeats)
    timed("vis2dirty end to end", lambda: imager.vis2dirty(vis), queue, args.repeats)
    image = image_d.get()
    timed("dirty2vis device-resident", lambda: imager.dirty2vis_device(image_d), queue,
          args.repeats)
    timed("dirty2vis end to end", lambda: imager.dirty2vis(image), queue, args.repeats)
    # a major cycle's residuals: the predicted visibilities (pinned memory on
    # GPUs) overwritten in place and passed back, one DMA up
    residuals = imager.dirty2vis(image)
    residuals[...] = vis
    timed("vis2dirty e2e, vis pinned", lambda: imager.vis2dirty(residuals), queue,
          args.repeats)
    if args.ducc0:
        ducc0_rounds(args, queue, imager, uvw, freq, cell, vis, image)
    if args.json:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import write_json
        write_json(args.json, "profile_core", [dict(TIMES)],
                   device=clgrid.DeviceProfile.from_device(queue.device).summary(),
                   arguments=vars(args), ducc0_threads=os.cpu_count() if args.ducc0 else None)
    return 0


def ducc0_rounds(args, queue, imager, uvw, freq, cell, vis, image) -> None:
    """ducc0 and clgrid (end to end) in alternating rounds, best of each."""
    from ducc0 import wgridder
    common = {"uvw": uvw, "freq": freq, "pixsize_x": cell, "pixsize_y": cell,
              "epsilon": args.epsilon, "do_wgridding": args.w, "nthreads": os.cpu_count()}
    runs = {"ducc0 vis2dirty": lambda: wgridder.vis2dirty(
                vis=vis, npix_x=args.npix, npix_y=args.npix, **common),
            "ducc0 dirty2vis": lambda: wgridder.dirty2vis(dirty=image, **common),
            "clgrid vis2dirty": lambda: imager.vis2dirty(vis),
            "clgrid dirty2vis": lambda: imager.dirty2vis(image)}
    best = {label: float("inf") for label in runs}
    for run in runs.values():
        run()
    queue.finish()
    for _ in range(args.repeats):
        for label, run in runs.items():
            start = time.perf_counter()
            run()
            queue.finish()
            best[label] = min(best[label], time.perf_counter() - start)
    for label, seconds in best.items():
        TIMES[label + " (rounds)"] = round(seconds, 5)
        print(f"{label + ' (rounds)':28s} {seconds * 1e3:10.2f} ms", flush=True)
    for direction in ("vis2dirty", "dirty2vis"):
        ratio = best["ducc0 " + direction] / best["clgrid " + direction]
        TIMES["ducc0/clgrid " + direction] = round(ratio, 3)
        print(f"ducc0 / clgrid {direction:13s} {ratio:10.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""One device's vis2dirty (or, ``--dirty2vis``, dirty2vis) end to end, traced: when each row block was in
pinned memory, when the FFT, correction, NaN check, counts and download
ran (host ms from the call's start, ``Imager.trace``), for numpy
visibilities and for visibilities already in pinned memory.  SKA-mid case
of benchmarks/scaling.py (116 M visibilities, 4096^2, epsilon 1e-5).

    python3 benchmarks/trace_call.py --device nvidia [--w] [--repeats 5]
    python benchmarks/trace_call.py --device intel --quick

Prints each traced call and the median wall time of ``--repeats`` calls of
each kind (after two untimed ones); ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from benchmarks._common import write_json  # noqa: E402
from benchmarks.scaling import imaging_case  # noqa: E402
from clgrid.core.trace import StageTrace  # noqa: E402
from clgrid.imaging.imager import Imager  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--w", action="store_true", help="do_wgridding=True")
    parser.add_argument("--quick", action="store_true", help="small case (CPU)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--vis-per-block", type=int, default=None)
    parser.add_argument("--label", default="", help="a name for this tree in the output")
    parser.add_argument("--dirty2vis", action="store_true",
                        help="trace dirty2vis of vis2dirty's image instead (numpy in, the "
                             "visibilities handed out in pinned memory)")
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def traced(imager: Imager, call, repeats: int) -> tuple[list[float], list[str]]:
    """Wall ms of ``repeats`` calls of ``call()`` (a method of ``imager``),
    and the trace of the median one."""
    for _ in range(2):
        call()
    times, lines = [], []
    for _ in range(repeats):
        trace = StageTrace()
        imager.trace = trace
        trace.restart()
        started = time.perf_counter()
        call()
        times.append(1e3 * (time.perf_counter() - started))
        lines.append(", ".join(trace.lines()))
        imager.trace = None
    median = sorted(range(repeats), key=times.__getitem__)[repeats // 2]
    return times, lines[median].split(", ")


def dirty2vis_parts(imager: Imager, dirty: np.ndarray, repeats: int) -> list[dict]:
    """Median ms of dirty2vis's parts alone: on the device (numpy image in,
    visibilities left there), their whole download into pinned memory, and
    the pinned array taken for them."""
    queue = imager.queue

    def on_device():
        out_d = imager.dirty2vis_device(dirty)
        queue.finish()
        return out_d

    out_d = on_device()
    pinned = imager.uploader.empty_host(out_d.shape, out_d.dtype)

    def download():
        imager.uploader.rows_to_pinned(out_d, pinned, 0, out_d.shape[0], []).wait()

    def take():
        imager.uploader.empty_host(out_d.shape, out_d.dtype)

    rows = []
    for name, part in (("on the device", on_device), ("download", download),
                       ("pinned array", take)):
        for _ in range(2):
            part()
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            part()
            times.append(1e3 * (time.perf_counter() - started))
        rows.append({"input": f"dirty2vis part: {name}", "median ms":
                     round(statistics.median(times), 2), "best ms": round(min(times), 2)})
        print(f"dirty2vis part, {name}: median {statistics.median(times):.2f} ms, best "
              f"{min(times):.2f} ms", flush=True)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    uvw, freq, npix, cell, vis = imaging_case(args.quick)
    context = clgrid.create_context(clgrid.select_device(args.device))
    imager = Imager(context, uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=cell,
                    pixsize_y=cell, epsilon=1e-5, do_wgridding=args.w,
                    vis_per_block=args.vis_per_block)
    blocks = [b.stop - b.first for b in imager.engine.blocks]
    print(f"{args.label} {context.devices[0].name.strip()}, {vis.size / 1e6:.0f} M "
          f"visibilities, w={args.w}, blocks {blocks}", flush=True)
    rows = []
    pinned = imager.uploader.empty_host(vis.shape, vis.dtype)
    pinned[...] = vis
    calls = [("numpy", lambda: imager.vis2dirty(vis)),
             ("pinned", lambda: imager.vis2dirty(pinned))]
    if args.dirty2vis:
        dirty = np.array(imager.vis2dirty(vis))
        calls = [("dirty2vis", lambda: imager.dirty2vis(dirty))]
    for name, call in calls:
        times, lines = traced(imager, call, args.repeats)
        rows.append({"tree": args.label, "input": name, "w": args.w,
                     "median ms": round(statistics.median(times), 2),
                     "best ms": round(min(times), 2), "calls ms": [round(t, 2) for t in times],
                     "trace of the median call": lines})
        print(f"{args.label} {name}: median {statistics.median(times):.1f} ms, best "
              f"{min(times):.1f} ms; median call: {', '.join(lines)}", flush=True)
    if args.dirty2vis:
        rows += dirty2vis_parts(imager, dirty, args.repeats)
    write_json(args.json, "trace_call", rows, device=context.devices[0].name.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())

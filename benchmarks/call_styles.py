"""Benchmark: the call users make, many times in a row, in each calling style.

``clgrid.vis2dirty`` and ``dirty2vis`` with ``queue=``, ``context=`` and no
device argument (``CLGRID_DEVICE`` names the device), host arrays in and
out, ``--calls`` times each in a row (issue 35: with the w-term, 20 calls
in each style must run on an 80 GB card, and the styles within 1.1x of
``queue=`` on a GPU).  Prints each style's median and worst call, the plans
built, the process's RSS and, on NVIDIA, the device memory in use
(``nvidia-smi``) after each style.

    python benchmarks/call_styles.py --device intel --quick
    python benchmarks/call_styles.py --device nvidia --calls 20 --json out.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import clgrid  # noqa: E402
from clgrid.device import plancache  # noqa: E402
from imaging import ska_mid_case  # noqa: E402
from _common import print_table, write_json  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1e-5)
    parser.add_argument("--npix", type=int, default=None)
    parser.add_argument("--baselines", type=int, default=None)
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--channels", type=int, default=None)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def device_mib() -> list[float] | None:
    """Device memory in use on each GPU (NVIDIA only), MiB."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                              "nounits"], capture_output=True, text=True, timeout=20).stdout
        return [float(value) for value in out.split()] or None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def time_calls(call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def main(argv=None) -> int:
    args = parse_args(argv)
    context = clgrid.create_context(args.device)
    # the caller's own queue, as a pipeline makes it (context= and no device
    # argument use clgrid's queue of this thread: another workspace)
    queue = cl.CommandQueue(context)
    profile = clgrid.DeviceProfile.from_device(queue.device)
    os.environ["CLGRID_DEVICE"] = f"{profile.platform_index}:{profile.device_index}"
    case = ska_mid_case(args)
    rng = np.random.default_rng(0)
    shape = (case["uvw"].shape[0], case["freq"].size)
    vis = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    image = np.zeros((case["npix"], case["npix"]), np.float32)
    image[case["npix"] // 3, case["npix"] // 2] = 1.0
    print(f"device: {profile.platform_key}: {profile.device_name}; {vis.size} visibilities, "
          f"{case['npix']}^2, epsilon {args.epsilon}")
    rows = []
    for do_w in (False, True):
        common = dict(uvw=case["uvw"], freq=case["freq"], epsilon=args.epsilon,
                      do_wgridding=do_w, pixsize_x=case["cell"], pixsize_y=case["cell"])
        for style, device in (("queue=", dict(queue=queue)), ("context=", dict(context=context)),
                              ("no-device-arg", {})):
            for direction in ("v2d", "d2v"):
                if direction == "v2d":
                    def call():
                        return clgrid.vis2dirty(vis=vis, npix_x=case["npix"],
                                                npix_y=case["npix"], **device, **common)
                else:
                    def call():
                        return clgrid.dirty2vis(dirty=image, **device, **common)
                builds = plancache.plans.builds
                first = time_calls(call, 1)[0]
                times = time_calls(call, args.calls)
                rows.append({"w": do_w, "style": style, "call": direction,
                             "first s": round(first, 3),
                             "median s": round(float(np.median(times)), 4),
                             "worst s": round(max(times), 4), "calls": args.calls + 1,
                             "plans built": plancache.plans.builds - builds,
                             "plans cached": len(plancache.plans),
                             "RSS MiB": round(rss_mib()), "device MiB": device_mib()})
                print_table(rows[-1:])
    for row in rows:
        base = next(r for r in rows if r["w"] == row["w"] and r["call"] == row["call"]
                    and r["style"] == "queue=")
        row["/ queue="] = round(row["median s"] / base["median s"], 2)
    print()
    print_table(rows)
    write_json(args.json, "call_styles", rows, device=profile.summary(),
               nvis=int(vis.size), npix=case["npix"], epsilon=args.epsilon)
    return 0


if __name__ == "__main__":
    sys.exit(main())

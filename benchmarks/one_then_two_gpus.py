"""Benchmark: a one-GPU call, then the same data on every GPU (issue 35).

``clgrid.vis2dirty`` with the w-term on one GPU (no device argument), then
``devices=<all GPUs>`` ``--calls`` times, then one GPU again: before the plan
cache was bounded in bytes, the second step failed on 2 x H100 80 GB (VkFFT
error 4039: two imagers' w planes on one card).  Prints each step's median,
the plans cached and the device memory in use (``nvidia-smi``).

    python3 benchmarks/one_then_two_gpus.py --device nvidia --calls 20 --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import clgrid  # noqa: E402
from clgrid.device import plancache  # noqa: E402
from call_styles import device_mib  # noqa: E402
from imaging import ska_mid_case  # noqa: E402
from _common import print_table, write_json  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="nvidia")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    for name in ("npix", "baselines", "hours", "channels"):
        parser.add_argument(f"--{name}", type=float if name == "hours" else int, default=None)
    args = parser.parse_args(argv)
    devices = [p for p in clgrid.devices() if args.device in p.platform_key and p.usable]
    os.environ["CLGRID_DEVICE"] = f"{devices[0].platform_index}:{devices[0].device_index}"
    specs = [f"{p.platform_index}:{p.device_index}" for p in devices]
    case = ska_mid_case(args)
    rng = np.random.default_rng(0)
    shape = (case["uvw"].shape[0], case["freq"].size)
    vis = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    common = dict(uvw=case["uvw"], freq=case["freq"], vis=vis, epsilon=1e-5,
                  do_wgridding=True, npix_x=case["npix"], npix_y=case["npix"],
                  pixsize_x=case["cell"], pixsize_y=case["cell"])
    rows = []
    for step, devices_arg in (("1 GPU", None), (f"{len(specs)} GPUs", specs),
                              ("1 GPU again", None)):
        times = []
        for _ in range(args.calls + 1):
            start = time.perf_counter()
            clgrid.vis2dirty(devices=devices_arg, **common)
            times.append(time.perf_counter() - start)
        rows.append({"step": step, "first s": round(times[0], 3),
                     "median s": round(float(np.median(times[1:])), 4),
                     "worst s": round(max(times[1:]), 4), "calls": len(times),
                     "plans cached": len(plancache.plans), "device MiB": device_mib()})
        print_table(rows[-1:])
    print()
    print_table(rows)
    write_json(args.json, "one_then_two_gpus", rows, nvis=int(vis.size), npix=case["npix"],
               gpus=[p.device_name for p in devices])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Float atomic-add throughput per capability path per device.

Contended: N adds onto 1024 addresses; spread: N adds onto N random
addresses.  Run ``python benchmarks/atomics.py [--device SPEC] [--json F]``.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pyopencl.array as cla

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clgrid  # noqa: E402
from clgrid.device.profiles import DeviceProfile, all_devices  # noqa: E402
from _common import median_seconds, print_table, write_json  # noqa: E402

PATTERNS = {"contended": 1024, "spread": None}


def measure(queue, dtype, path: str, pattern: str, n_items: int) -> dict:
    rng = np.random.default_rng(0)
    n_out = PATTERNS[pattern] or n_items
    index = cla.to_device(queue, rng.integers(0, n_out, n_items).astype(np.uint32))
    values = cla.to_device(queue, rng.standard_normal(n_items).astype(dtype))
    out = cla.zeros(queue, n_out, dtype)
    operation = clgrid.ScatterAdd(queue, dtype, atomics=path)
    seconds = median_seconds(lambda: operation(index, values, out=out, wait=False), queue)
    return {"pattern": pattern, "dtype": np.dtype(dtype).name, "path": path,
            "adds": n_items, "ms": round(seconds * 1e3, 3),
            "G adds/s": round(n_items / seconds / 1e9, 4)}


def benchmark_device(device, n_items: int) -> list[dict]:
    profile = DeviceProfile.from_device(device)
    queue = clgrid.resolve_queue(clgrid.create_context(device))
    rows = []
    for dtype in (np.float32, np.float64):
        bits = 32 if dtype == np.float32 else 64
        if bits == 64 and not profile.fp64:
            continue
        for path in profile.supported_atomic_paths(bits):
            for pattern in PATTERNS:
                row = measure(queue, dtype, path, pattern, n_items)
                rows.append({"device": f"{profile.platform_key}: {profile.device_name}", **row})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None, help="device spec (default: every usable "
                        "non-simulator device)")
    parser.add_argument("--adds", type=int, default=16 * 2**20)
    parser.add_argument("--quick", action="store_true", help="1M adds")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    n_items = 2**20 if args.quick else args.adds
    if args.device:
        devices = [clgrid.select_device(args.device)]
    else:
        devices = [d for d in all_devices() if DeviceProfile.from_device(d).usable
                   and not DeviceProfile.from_device(d).is_simulator]
    rows = [row for device in devices for row in benchmark_device(device, n_items)]
    print_table(rows)
    write_json(args.json, "atomics", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

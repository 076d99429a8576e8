"""The plan cache's exact uvw check in the call users make: checked beside
the call (``clgrid.imaging.imager.cached_call``, the library's: the cached
plan runs while the check threads compare uvw, the result thrown away and
the call redone where they differ), checked before it in chunks on the copy
threads (``clgrid.device.hostio.same_bits``), and checked before it with
numpy's one-thread ``array_equal``, in alternating rounds: the lookup alone
(``cached_imager``: fingerprint, then the exact comparison) and
``clgrid.vis2dirty`` / ``dirty2vis`` with no device argument.  SKA-mid case
of benchmarks/scaling.py.

    python3 benchmarks/plan_lookup.py --device nvidia --rounds 2 --repeats 7
    python benchmarks/plan_lookup.py --device intel --quick
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
import clgrid.imaging.imager as imager_module  # noqa: E402
from benchmarks._common import print_table, write_json  # noqa: E402
from benchmarks.scaling import imaging_case  # noqa: E402
from clgrid.device.hostio import same_bits  # noqa: E402
from clgrid.device.profiles import default_queue  # noqa: E402
from clgrid.imaging.imager import (cached_call, cached_imager,  # noqa: E402
                                   vis2dirty_geometry)

def check_before(queue, uvw, freq, geometry, method):
    """What the calls did before the check went beside them."""
    return method(cached_imager(queue, uvw, freq, geometry))


#: name: (the exact check, the call's way to its plan)
CHECKS = {"beside the call (cached_call)": (same_bits, cached_call),
          "before, same_bits (chunked)": (same_bits, check_before),
          "before, np.array_equal (one thread)": (lambda a, b: np.array_equal(a, b),
                                                  check_before)}


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(1e3 * (time.perf_counter() - started))
    return round(statistics.median(times), 2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    uvw, freq, npix, cell, vis = imaging_case(args.quick)
    device = clgrid.select_device(args.device)
    context = clgrid.create_context(device)
    common = dict(uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=cell,
                  pixsize_y=cell, epsilon=1e-5)
    # the geometry clgrid.vis2dirty makes of these arguments (its defaults)
    defaults = {name: parameter.default for name, parameter
                in inspect.signature(clgrid.vis2dirty).parameters.items()
                if name in inspect.signature(vis2dirty_geometry).parameters
                and parameter.default is not inspect.Parameter.empty}
    defaults.update(npix_x=npix, npix_y=npix, pixsize_x=cell, pixsize_y=cell, epsilon=1e-5)
    defaults.pop("dirty", None)
    geometry = vis2dirty_geometry(vis, None, **defaults)
    queue = default_queue(context)
    dirty = clgrid.vis2dirty(vis=vis, **common)
    clgrid.dirty2vis(dirty=dirty, **{k: v for k, v in common.items()
                                     if k not in ("npix_x", "npix_y")})
    rows = []
    for round_ in range(args.rounds):
        for name, (check, call) in CHECKS.items():
            imager_module.same_bits, imager_module.cached_call = check, call
            rows.append({
                "round": round_ + 1, "check": name,
                "lookup ms": "-" if call is cached_call else median_ms(
                    lambda: cached_imager(queue, uvw, freq, geometry), args.repeats),
                "vis2dirty ms": median_ms(lambda: clgrid.vis2dirty(vis=vis, **common),
                                          args.repeats),
                "dirty2vis ms": median_ms(lambda: clgrid.dirty2vis(
                    dirty=dirty, **{k: v for k, v in common.items()
                                    if k not in ("npix_x", "npix_y")}), args.repeats)})
            print(rows[-1], flush=True)
    imager_module.same_bits, imager_module.cached_call = same_bits, cached_call
    print_table(rows)
    write_json(args.json, "plan_lookup", rows, device=device.name.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())

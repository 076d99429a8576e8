"""The plan cache's exact uvw check in the call users make: the lookup alone
(``cached_imager``: fingerprint, then the exact comparison of uvw) and
``clgrid.vis2dirty`` / ``dirty2vis`` with no device argument, with the check
in chunks on the copy threads (``clgrid.device.hostio.same_bits``, the
library's) against numpy's one-thread ``array_equal`` (what it was), in
alternating rounds.  SKA-mid case of benchmarks/scaling.py.

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
from clgrid.imaging.imager import cached_imager, vis2dirty_geometry  # noqa: E402

CHECKS = {"same_bits (chunked)": same_bits,
          "np.array_equal (one thread)": lambda a, b: np.array_equal(a, b)}


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
        for name, check in CHECKS.items():
            imager_module.same_bits = check
            rows.append({
                "round": round_ + 1, "check": name,
                "lookup ms": median_ms(lambda: cached_imager(queue, uvw, freq, geometry),
                                       args.repeats),
                "vis2dirty ms": median_ms(lambda: clgrid.vis2dirty(vis=vis, **common),
                                          args.repeats),
                "dirty2vis ms": median_ms(lambda: clgrid.dirty2vis(
                    dirty=dirty, **{k: v for k, v in common.items()
                                    if k not in ("npix_x", "npix_y")}), args.repeats)})
            print(rows[-1], flush=True)
    imager_module.same_bits = same_bits
    print_table(rows)
    write_json(args.json, "plan_lookup", rows, device=device.name.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Single-dish gridding benchmark: clgrid's HyGrid gather against cygrid.

The cases of Luo et al. (2018): a 5 x 5 degree field, 10^6 .. 1.5 x 10^8
samples, 90 x 90 .. 900 x 900 output cells, random and on-the-fly (OTF)
ordered samples.  Reports the parts of clgrid's time separately, as the
paper's Figure 6: the host copy into pinned staging memory, the
host-to-device transfers, the device pre-ordering (checks, HEALPix pixels,
radix sort, permutation, ring table) and the gather (device times, which
overlap one another), plus the end-to-end total (host arrays in, host cube
out), the samples per second and the ratio to cygrid measured in the same
run (cygrid columns are skipped with a note when cygrid is not importable;
``--cygrid-s`` takes cygrid times measured earlier on the same machine).

Examples
--------
    python benchmarks/singledish.py --device intel --quick
    python benchmarks/singledish.py --device nvidia --json sd_h200.json
    python benchmarks/singledish.py --device nvidia --samples 1.5e8 --cells 90 \
        --order random --no-cygrid --cygrid-s 110.6
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import clgrid  # noqa: E402
from clgrid.singledish import SlGrid  # noqa: E402
from clgrid.singledish.preorder import usable_cores  # noqa: E402

FIELD_DEG = 5.0
CENTRE = (30.0, 30.0)


def make_cells(n_side: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres of an n_side x n_side grid over the field (rows of constant latitude)."""
    cell = FIELD_DEG / n_side
    offsets = (np.arange(n_side) - (n_side - 1) / 2) * cell
    lat = CENTRE[1] + offsets[:, None] + 0 * offsets[None, :]
    lon = CENTRE[0] + offsets[None, :] / np.cos(np.radians(lat))
    return lon.ravel(), lat.ravel()


def make_samples(n: int, order: str, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random or OTF raster samples over the field, with a smooth signal plus noise."""
    half = FIELD_DEG / 2
    if order == "random":
        lat = CENTRE[1] + rng.uniform(-half, half, n)
        lon = CENTRE[0] + rng.uniform(-half, half, n) / np.cos(np.radians(lat))
    else:
        rows = max(1, int(round(math.sqrt(n))))
        per_row = -(-n // rows)
        lat = np.repeat(np.linspace(-half, half, rows), per_row)[:n] + CENTRE[1]
        along = np.linspace(-half, half, per_row)
        index = np.arange(n) % per_row
        row = np.arange(n) // per_row
        x = np.where(row % 2 == 0, along[index], along[::-1][index])
        lon = CENTRE[0] + x / np.cos(np.radians(lat))
    signal = np.sin(np.radians(lon) * 20) * np.cos(np.radians(lat) * 20)
    data = (signal + 0.1 * rng.standard_normal(n)).astype(np.float32)
    return lon, lat, data


def time_clgrid(queue, cells, samples, kernel, gamma, lanes=None, host_threads=None,
                repeats=1):
    """End to end: host arrays in, host cube out (kernels built by a warm-up
    call); the fastest of ``repeats`` fresh gridders, and every total."""
    best, totals = None, []
    for _ in range(repeats):
        gridder = SlGrid(*cells, context=queue, gamma=gamma, lanes=lanes, progress=False,
                         host_threads=host_threads)
        gridder.set_kernel(*kernel)
        gridder.grid(samples[0][:1000], samples[1][:1000], samples[2][:1000])  # build kernels
        gridder.clear_data_and_weights()
        gridder.stats.__init__()
        start = time.perf_counter()
        gridder.grid(*samples)
        cube = gridder.get_datacube()
        totals.append(time.perf_counter() - start)
        if best is None or totals[-1] < best[0]:
            best = (totals[-1], gridder.timings, gridder.stats.n_chunks, cube)
        del gridder
    return best + (totals,)


def exact_error(cells, samples, kernel, cube, n_check: int, rng) -> float:
    """Largest |clgrid - exact float64 sum| over ``n_check`` random cells,
    over the cube's peak (a latitude band preselects each cell's samples)."""
    from clgrid.singledish import gather_reference
    chosen = rng.choice(cells[0].size, min(n_check, cells[0].size), replace=False)
    radius = kernel[2]
    errors = []
    for c in chosen:
        near = np.abs(samples[1] - cells[1][c]) < 1.01 * radius
        exact = gather_reference(cells[0][c:c + 1], cells[1][c:c + 1], samples[0][near],
                                 samples[1][near], samples[2][near], kernel_type=kernel[0],
                                 kernel_params=kernel[1], sphere_radius=radius)[0]
        errors.append(abs(float(cube.ravel()[c]) - float(exact[0])))
    return max(errors) / float(np.nanmax(np.abs(cube)))


def time_cygrid(cygrid, cells, samples, kernel):
    start = time.perf_counter()
    gridder = cygrid.SlGrid(*cells)
    gridder.set_kernel(*kernel)
    gridder.grid(samples[0], samples[1], samples[2])
    total = time.perf_counter() - start
    return total, gridder.get_datacube()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--samples", type=float, nargs="+", help="sample counts")
    parser.add_argument("--cells", type=int, nargs="+", help="cells per side, e.g. 90 300 900")
    parser.add_argument("--order", nargs="+", default=["random", "otf"],
                        choices=["random", "otf"])
    parser.add_argument("--gamma", type=int, nargs="+", default=[1])
    parser.add_argument("--sigma-arcsec", type=float, default=180.0,
                        help="gauss1d kernel sigma (support 3 sigma, HEALPix res sigma/2)")
    parser.add_argument("--lanes", type=int, nargs="+", default=[None],
                        help="work-items per cell group (default: 32 on GPUs, 1 on CPUs)")
    parser.add_argument("--check-cells", type=int, default=0,
                        help="compare this many random cells with the exact float64 sum")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timed clgrid runs per case (the fastest is reported)")
    parser.add_argument("--host-threads", type=int, default=None,
                        help="host threads copying into pinned memory (default: usable cores)")
    parser.add_argument("--no-cygrid", action="store_true", help="skip the peer")
    parser.add_argument("--cygrid-s", type=float, nargs="+", default=None,
                        help="cygrid seconds measured before on this machine kind, one per "
                             "case in loop order (samples, order, cells), used with --no-cygrid")
    args = parser.parse_args(argv)

    samples_list = args.samples or ([1e5, 1e6] if args.quick else [1e6, 1e7, 3e7, 1.5e8])
    cells_list = args.cells or ([90, 300] if args.quick else [90, 300, 600, 900])
    sigma = args.sigma_arcsec / 3600.0
    kernel = ("gauss1d", (sigma,), 3 * sigma, sigma / 2)

    context = clgrid.create_context(args.device)
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    device = queue.device
    cygrid, note = None, ""
    if not args.no_cygrid:
        try:
            import cygrid
        except Exception as error:  # ImportError, or cygrid built against NumPy 1
            note = f"cygrid not available ({type(error).__name__}: {error}); peer columns skipped"
    threads = usable_cores()
    host_threads = threads if args.host_threads is None else args.host_threads
    earlier = list(args.cygrid_s or [])
    if earlier:
        note = (note + "; " if note else "") + "cygrid seconds given on the command line " \
            "(measured earlier on the same machine kind), not measured in this run"
    print(f"device: {device.platform.name.strip()} / {device.name.strip()}; "
          f"host: {platform.processor() or platform.machine()} x{threads}; "
          f"staging threads: {host_threads}")
    if note:
        print(note)
    header = (f"{'N':>10} {'cells':>9} {'order':>6} {'g':>2} {'lanes':>5} {'chunks':>6} "
              f"{'staging s':>9} {'upload s':>8} {'sort s':>7} {'gather s':>8} {'total s':>8} "
              f"{'Msamp/s':>8} "
              f"{'cygrid s':>9} {'speedup':>8} {'max diff/peak':>13} {'vs exact':>9}")
    print(header)
    rng = np.random.default_rng(0)
    results = []
    for n in samples_list:
        n = int(n)
        for order in args.order:
            samples = make_samples(n, order, rng)
            for n_side in cells_list:
                cells = make_cells(n_side)
                peer_s, peer_cube = (math.nan, None)
                if cygrid is not None:
                    peer_s, peer_cube = time_cygrid(cygrid, cells, samples, kernel)
                elif earlier:
                    peer_s = earlier.pop(0)
                for gamma, lanes in [(g, l) for g in args.gamma for l in args.lanes]:
                    total, timings, n_chunks, cube, totals = time_clgrid(
                        queue, cells, samples, kernel, gamma, lanes, host_threads, args.repeats)
                    diff = math.nan
                    if peer_cube is not None:
                        # Peak-normalised: the weighted means of a zero-mean signal
                        # come close to zero, where a relative error means nothing.
                        good = np.isfinite(peer_cube)
                        diff = float(np.max(np.abs(cube[good] - peer_cube[good]))
                                     / np.max(np.abs(peer_cube[good]))) if good.any() else 0.0
                    exact = math.nan
                    if args.check_cells:
                        exact = exact_error(cells, samples, kernel, cube, args.check_cells, rng)
                    row = {"n_samples": n, "cells": f"{n_side}x{n_side}", "order": order,
                           "gamma": gamma, "lanes": lanes, "chunks": n_chunks,
                           "all_totals_s": totals,
                           "staging_s": timings["staging_s"], "upload_s": timings["upload_s"],
                           "sort_s": timings["sort_s"], "gather_s": timings["gather_s"],
                           "total_s": total, "samples_per_s": n / total,
                           "cygrid_s": peer_s, "cygrid_measured_here": cygrid is not None,
                           "speedup_vs_cygrid": peer_s / total,
                           "max_diff_over_peak_vs_cygrid": diff,
                           "cells_checked_exact": args.check_cells,
                           "max_diff_over_peak_vs_exact": exact}
                    results.append(row)
                    print(f"{n:>10.3g} {row['cells']:>9} {order:>6} {gamma:>2} "
                          f"{str(lanes or 'auto'):>5} {n_chunks:>6} "
                          f"{timings['staging_s']:>9.3f} {timings['upload_s']:>8.3f} "
                          f"{timings['sort_s']:>7.3f} {timings['gather_s']:>8.3f} {total:>8.3f} "
                          f"{n / total / 1e6:>8.2f} {peer_s:>9.3f} {peer_s / total:>8.2f} "
                          f"{diff:>13.2e} {exact:>9.2e}", flush=True)
    if args.json:
        record = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                  "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                  "device": f"{device.platform.name.strip()} / {device.name.strip()}",
                  "host_threads": threads, "staging_threads": host_threads,
                  "kernel": list(map(str, kernel)),
                  "note": note,
                  "results": results}
        with open(args.json, "w") as handle:
            json.dump(record, handle, indent=1)


if __name__ == "__main__":
    main()

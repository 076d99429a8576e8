"""Strong scaling over devices in one host and over Dask worker processes.

For 1, 2, 4 ... devices (as many as given) the same problem is split:

* ``gridding``: the seed configuration of benchmarks/gridding.py (SKA1-mid +
  MeerKAT tracks, 16 channels, quad polarisation, W-projection table of 32 w
  planes, 8 x 8 oversampling, 2048^2 grid) for each support; the records are
  split in contiguous (time) blocks, each device grids its block into a
  private grid from device-resident records in its own host thread, and the
  grids are summed on the host.  Columns: time of the parallel gridding,
  time with the host reduction, efficiency t1 / (n t_n).
* ``vis2dirty``: :class:`clgrid.multidevice.MultiDeviceImager` at epsilon
  1e-5 with and without w-gridding, end to end from host visibilities (rows
  split in time without w, w planes split with w), plus the load balance of
  the time and baseline partitions.
* ``dask`` (``--dask-workers 1 2``): :func:`clgrid.dask.vis2dirty` on a
  LocalCluster of that many worker processes (needs ``distributed``).

    python benchmarks/scaling.py --devices cpu-split --quick --dask-workers 1 2
    python benchmarks/scaling.py --devices all --json scaling.json      # N GPUs
    python benchmarks/scaling.py --devices nvidia:0:0 nvidia:0:1 --counts 1 2

``--devices`` takes specs of :func:`clgrid.select_device` (``0:1``,
``nvidia``...), ``all`` (every GPU of the best platform) or ``cpu-split``
(the CPU cut into sub-devices, one per core, for a CPU-only machine).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import print_table, write_json  # noqa: E402
from clgrid.gcf import w_projection_gcf  # noqa: E402
from clgrid.gridder import Gridder  # noqa: E402
from clgrid.multidevice import (MultiDeviceImager, all_gpus_or_best,  # noqa: E402
                                best_cpu, cpu_sub_devices, partition_rows)
from clgrid.simulate import simulate_observation  # noqa: E402
from clgrid.uvprep import SPEED_OF_LIGHT_M_S, plan_uv  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", nargs="+", default=["all"],
                        help="device specs, 'all' or 'cpu-split'")
    parser.add_argument("--device", default=None, help="(unused; for the common CLI)")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="small run (CPU, CI)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--skip", nargs="*", default=[], choices=("gridding", "vis2dirty"))
    parser.add_argument("--dask-workers", type=int, nargs="*", default=[])
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args(argv)


def resolve_devices(specs: list[str]) -> list:
    if specs == ["all"]:
        return all_gpus_or_best()
    if specs == ["cpu-split"]:
        parent = best_cpu()
        return cpu_sub_devices(int(parent.max_compute_units), parent)
    return [clgrid.select_device(spec) for spec in specs]


def best_of(run, repeats: int) -> float:
    run()  # warm-up: compile, allocate
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def observation(quick: bool):
    """uvw in Measurement Set order (time-major), channels, baseline id per row."""
    hours, integration_s = (1.0 if quick else 6.0), 10.0
    uvw = simulate_observation(duration_h=hours, integration_s=integration_s,
                               n_baselines=200 if quick else None)
    n_times = int(round(hours * 3600.0 / integration_s))
    baseline_ids = np.arange(uvw.shape[0]) // n_times   # simulated: baseline-major
    time_major = np.lexsort((baseline_ids, np.arange(uvw.shape[0]) % n_times))
    freq_hz = 1.0e9 + np.arange(4 if quick else 16) * 1.0e6
    return uvw[time_major], freq_hz, baseline_ids[time_major]


# ------------------------------------------------------------------ gridding
def gridding_rows(args, devices, counts, uvw, freq_hz) -> list[dict]:
    nx = 512 if args.quick else 2048
    cell = 1.0 / (2.0 * np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S)
    w_max = np.abs(uvw[:, 2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    rows = []
    for support in args.supports or ([8, 32] if args.quick else [8, 16, 32, 64]):
        gcf = w_projection_gcf(support, 8, 32, w_max, nx * cell)
        plan = plan_uv(uvw, freq_hz, gcf, nx, nx, cell)
        budget = 2e8 if args.quick else 2e12
        n_records = int(min(plan.n_records, max(1, budget // (support * support * 4))))
        records = (np.random.default_rng(0).standard_normal((n_records, 4)) * (1 + 1j)
                   ).astype(np.complex64)
        t_one = None
        for n in counts:
            queues = [cl.CommandQueue(clgrid.create_context(d)) for d in devices[:n]]
            parts = partition_rows(n_records, n, "time")
            gridders = [Gridder(q, gcf, nx, nx, cell, npol=4, strategy="scatter")
                        for q in queues]
            loaded = [(g, cla.to_device(g.queue, plan.header[p[0]:p[-1] + 1]),
                       cla.to_device(g.queue, records[p[0]:p[-1] + 1]), g.zeros())
                      for g, p in zip(gridders, parts)]
            pool = concurrent.futures.ThreadPoolExecutor(n)

            def grid_all(reduce: bool):
                def one(item):
                    gridder, header_d, records_d, grid = item
                    grid.fill(0)
                    gridder.grid_records(header_d, records_d, grid)
                    gridder.queue.finish()
                    return grid.get() if reduce else None
                results = list(pool.map(one, loaded))
                if reduce:
                    total = results[0]
                    for extra in results[1:]:
                        total += extra
            t_grid = best_of(lambda: grid_all(False), args.repeats)
            t_total = best_of(lambda: grid_all(True), args.repeats)
            pool.shutdown()
            t_one = t_one or t_grid
            gpa = n_records * support * support * 4
            rows.append({"case": f"gridding S={support}", "devices": n,
                         "time s": round(t_grid, 4), "with sum s": round(t_total, 4),
                         "GGPAPS": round(gpa / t_grid / 1e9, 2),
                         "efficiency": round(t_one / (n * t_grid), 3)})
    return rows


# ------------------------------------------------------------------ vis2dirty
def vis2dirty_rows(args, devices, counts, uvw, freq_hz, baseline_ids) -> list[dict]:
    npix = 256 if args.quick else 2048
    cell = 1.0 / (2.2 * np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S)
    vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq_hz.size)) * (1 + 1j)
           ).astype(np.complex64)
    rows = []
    for do_w, partition in ((False, "time"), (False, "baseline"), (True, "time")):
        t_one = None
        for n in counts:
            imager = MultiDeviceImager(devices[:n], uvw=uvw, freq=freq_hz, npix_x=npix,
                                       npix_y=npix, pixsize_x=cell, pixsize_y=cell,
                                       epsilon=1e-5, do_wgridding=do_w, partition=partition,
                                       baseline_ids=baseline_ids)
            seconds = best_of(lambda: imager.vis2dirty(vis), args.repeats)
            imager.close()
            t_one = t_one or seconds
            rows.append({"case": f"vis2dirty eps 1e-5 {'w' if do_w else 'no-w'}",
                         "devices": n, "time s": round(seconds, 4),
                         "Mvis/s": round(vis.size / seconds / 1e6, 2),
                         "efficiency": round(t_one / (n * seconds), 3),
                         "partition": imager.partition,
                         "balance": round(imager.load_balance, 3)})
    return rows


# ------------------------------------------------------------------ dask
def dask_rows(args, worker_counts, uvw, freq_hz, device_spec) -> list[dict]:
    try:
        import dask.array as da
        import distributed
    except ImportError:
        print("note: dask[distributed] not installed: Dask columns skipped")
        return []
    import clgrid.dask as cldask
    npix = 256 if args.quick else 1024
    cell = 1.0 / (2.2 * np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S)
    vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq_hz.size)) * (1 + 1j)
           ).astype(np.complex64)
    rows, t_one = [], None
    for n in worker_counts:
        with distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster):
            chunk = -(-uvw.shape[0] // (4 * n))
            seconds = best_of(lambda: cldask.vis2dirty(
                uvw=da.from_array(uvw, chunks=(chunk, 3)), freq=freq_hz,
                vis=da.from_array(vis, chunks=(chunk, freq_hz.size)), npix_x=npix,
                npix_y=npix, pixsize_x=cell, pixsize_y=cell, epsilon=1e-5,
                device=device_spec), args.repeats)
        t_one = t_one or seconds
        rows.append({"case": "dask vis2dirty eps 1e-5 no-w", "devices": n,
                     "time s": round(seconds, 4),
                     "Mvis/s": round(vis.size / seconds / 1e6, 2),
                     "efficiency": round(t_one / (n * seconds), 3)})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    devices = resolve_devices(args.devices)
    counts = [n for n in args.counts if n <= len(devices)]
    names = sorted({f"{d.platform.name.strip()}: {d.name.strip()}" for d in devices})
    print(f"{len(devices)} device(s): {'; '.join(names)}; counts {counts}")
    uvw, freq_hz, baseline_ids = observation(args.quick)
    rows = []
    if "gridding" not in args.skip:
        rows += gridding_rows(args, devices, counts, uvw, freq_hz)
    if "vis2dirty" not in args.skip:
        rows += vis2dirty_rows(args, devices, counts, uvw, freq_hz, baseline_ids)
    if args.dask_workers:
        spec = args.devices[0] if args.devices[0] not in ("all", "cpu-split") else None
        rows += dask_rows(args, args.dask_workers, uvw, freq_hz, spec)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print_table([{k: row.get(k, "-") for k in keys} for row in rows])
    write_json(args.json, "scaling", rows, devices=names,
               n_rows=int(uvw.shape[0]), n_chan=int(freq_hz.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())

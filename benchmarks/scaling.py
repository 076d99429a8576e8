"""Strong scaling over devices in one host and over Dask worker processes.

For 1, 2, 4 ... devices (as many as given) the same problem is split:

* ``gridding``: the seed configuration of benchmarks/gridding.py (400
  SKA1-mid + MeerKAT baselines, 6 h of 10 s, 16 channels, quad
  polarisation, W-projection table of 32 w planes, 8 x 8 oversampling,
  2048^2 grid) for each support.  The rows are split in contiguous (time)
  blocks; each device's ``Gridder`` (the spread the dispatcher picks on it,
  column ``method``) grids its blocks with ``grid_plan`` (set points made
  once, visibilities on the device) into a private grid in its own host
  thread, ``passes`` times so that one device has about ``--gpa-budget``
  grid-point additions of work.  Columns: time of the parallel gridding,
  GGPAPS (the gridders' ``grid_point_updates``), efficiency t1 / (n t_n),
  and the time to sum the private grids on the host or on the first device.
* ``vis2dirty``: :class:`clgrid.scaleout.multidevice.MultiDeviceImager` at epsilon
  1e-5 on benchmarks/imaging.py's SKA-mid case (2000 baselines, 2 h of 8 s,
  64 channels = 115 M visibilities, 4096^2 pixels), end to end from host
  visibilities: rows split in time or by baseline (images summed, or
  without w grids summed on the first device), or w planes split with w;
  with the load balance
  and the phases (parallel gridding, reduction, FFT).
* ``calls``: the call users make, ``clgrid.vis2dirty``/``clgrid.dirty2vis``
  with and without w on the same case: with no device argument (one GPU,
  the default) and with ``devices=`` the first 1, 2, 4 ... devices, in one
  run; median of ``--repeats`` calls after one untimed call; efficiency =
  the no-device-argument time / (n t_n).
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
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import median_seconds, print_table, timed_calls, write_json  # noqa: E402
from clgrid.gcf import w_projection_gcf  # noqa: E402
from clgrid.gridders.gridder import Gridder  # noqa: E402
from clgrid.scaleout.multidevice import MultiDeviceImager, clear_cache  # noqa: E402
from clgrid.scaleout.partition import all_gpus_or_best, best_cpu, cpu_sub_devices  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402
from clgrid.gridders.checks import SPEED_OF_LIGHT_M_S  # noqa: E402


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
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=("gridding", "vis2dirty", "calls"))
    parser.add_argument("--dask-workers", type=int, nargs="*", default=[])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--defaults-only", action="store_true",
                        help="vis2dirty: only the devices' default partition and reduction, "
                             "w and no w")
    parser.add_argument("--cases", nargs="+", default=None,
                        help="vis2dirty: only these w:partition:reduce cases, e.g. "
                             "w:time:images w:w-planes:images no-w:time:images")
    parser.add_argument("--gpa-budget", type=float, default=4e12,
                        help="grid-point additions per support (the rows are gridded "
                             "repeatedly up to it)")
    return parser.parse_args(argv)


def resolve_devices(specs: list[str]) -> list:
    if specs == ["all"]:
        return all_gpus_or_best()
    if specs == ["cpu-split"]:
        parent = best_cpu()
        return cpu_sub_devices(int(parent.max_compute_units), parent)
    return [clgrid.select_device(spec) for spec in specs]


def parse_case(text: str) -> tuple:
    """``w:w-planes:images`` -> (True, 'w-planes', 'images'); ``default`` as
    the partition takes the devices' default."""
    w, partition, reduce = text.split(":")
    if w not in ("w", "no-w"):
        raise SystemExit(f"--cases: {text!r} must start with w: or no-w:")
    return w == "w", None if partition == "default" else partition, reduce


def best_of(run, repeats: int) -> float:
    """Best seconds of ``repeats`` calls (each blocks on its result), after
    warm-up (compile, allocate)."""
    return min(timed_calls(run, None, repeats))


def observation(*, baselines: int, hours: float, integration_s: float,
                n_chan: int, freq0_hz: float = 1.0e9):
    """uvw in Measurement Set order (time-major), channels, baseline id per row."""
    uvw = simulate_observation(duration_h=hours, integration_s=integration_s,
                               n_baselines=baselines)
    n_times = int(round(hours * 3600.0 / integration_s))
    baseline_ids = np.arange(uvw.shape[0]) // n_times   # simulated: baseline-major
    time_major = np.lexsort((baseline_ids, np.arange(uvw.shape[0]) % n_times))
    freq_hz = freq0_hz + np.arange(n_chan) * 1.0e6
    return uvw[time_major], freq_hz, baseline_ids[time_major]


def seed_blocks(quick: bool, n_blocks: int):
    """benchmarks/gridding.py's seed configuration (400 baselines, 6 h of 10 s,
    16 channels) cut into ``n_blocks`` time blocks, each in baseline-major
    order: Romein's partitioning (every GPU gets a time range of all
    baselines), and the order his work distribution needs (consecutive
    records of one baseline hit neighbouring grid points)."""
    baselines, hours, n_chan = (40, 1.0, 4) if quick else (400, 6.0, 16)
    integration_s = 10.0
    uvw = simulate_observation(duration_h=hours, integration_s=integration_s,
                               n_baselines=baselines)   # rows: baseline-major
    n_times = int(round(hours * 3600.0 / integration_s))
    per_baseline = uvw.reshape(-1, n_times, 3)
    edges = np.linspace(0, n_times, n_blocks + 1).round().astype(int)
    blocks = [np.ascontiguousarray(per_baseline[:, a:b].reshape(-1, 3))
              for a, b in zip(edges[:-1], edges[1:])]
    return blocks, 1.0e9 + np.arange(n_chan) * 1.0e6


def imaging_observation(quick: bool):
    """benchmarks/imaging.py's SKA-mid case: 2000 baselines, 2 h of 8 s, 64 channels."""
    if quick:
        return observation(baselines=200, hours=0.25, integration_s=8.0, n_chan=8,
                           freq0_hz=1.35e9)
    return observation(baselines=2000, hours=2.0, integration_s=8.0, n_chan=64,
                       freq0_hz=1.35e9)


def imaging_case(quick: bool) -> tuple:
    """:func:`imaging_observation` with its image (4096^2, or 512^2 quick),
    cell and visibilities: (uvw, freq, npix, cell, vis)."""
    uvw, freq, _ = imaging_observation(quick)
    npix = 512 if quick else 4096
    cell = 1.0 / (3.0 * np.hypot(uvw[:, 0], uvw[:, 1]).max() * freq.max() / SPEED_OF_LIGHT_M_S)
    vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq.size)) * (1 + 1j)
           ).astype(np.complex64)
    return uvw, freq, npix, cell, vis


# ------------------------------------------------------------------ gridding
def gridding_rows(args, devices, counts) -> list[dict]:
    """Every device grids its contiguous blocks of the rows ``passes`` times
    (the observation gridded repeatedly, so that one device has seconds of
    work: strong scaling of a ``passes`` times larger observation)."""
    n_blocks = max(counts)
    blocks, freq_hz = seed_blocks(args.quick, n_blocks)
    uvw = np.concatenate(blocks)
    nx = 512 if args.quick else 2048
    cell = 1.0 / (2.0 * np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S)
    w_max = np.abs(uvw[:, 2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    budget = 2e9 if args.quick else args.gpa_budget
    # the longest baselines' footprints leave the grid: dropped, as ever
    warnings.filterwarnings("ignore", message=".*off the grid")
    vis = [(np.random.default_rng(k).standard_normal((block.shape[0], freq_hz.size, 4))
            * (1 + 1j)).astype(np.complex64) for k, block in enumerate(blocks)]
    rows = []
    for support in args.supports or ([8, 32] if args.quick else [16, 32, 64, 128]):
        gcf = w_projection_gcf(support, 8, 32, w_max, nx * cell)
        passes, t_one = None, None
        for n in counts:
            queues = [cl.CommandQueue(clgrid.create_context(d)) for d in devices[:n]]
            # device d gets the contiguous time blocks of its share
            shares = np.array_split(np.arange(n_blocks), n)
            gridders = [Gridder(q, gcf, nx, nx, cell, npol=4) for q in queues]
            loaded = []
            for gridder, share in zip(gridders, shares):
                plan = gridder.plan(np.concatenate([blocks[b] for b in share]), freq_hz)
                vis_d = cla.to_device(gridder.queue, np.concatenate([vis[b] for b in share]))
                gridder.grid_plan(plan, vis_d, return_device=True)
                loaded.append((gridder, plan, vis_d, gridder.zeros(),
                               gridder.last_stats["grid_point_updates"]))
            gpa_once = sum(item[4] for item in loaded)
            # the first count fixes the work: the same for every count
            passes = passes or max(1, int(round(budget / max(gpa_once, 1))))
            with concurrent.futures.ThreadPoolExecutor(n) as pool:
                def grid_all():
                    def one(item):
                        gridder, plan, vis_d, grid, _ = item
                        grid.fill(0)
                        for _ in range(passes):
                            gridder.grid_plan(plan, vis_d, out=grid, return_device=True)
                        gridder.queue.finish()
                    list(pool.map(one, loaded))
                t_grid = best_of(grid_all, args.repeats)
            t_host_sum = best_of(lambda: host_sum([item[3] for item in loaded]), 1)
            t_device_sum = best_of(lambda: device_sum([item[3] for item in loaded]), 1)
            t_one = t_one or t_grid
            rows.append({"case": f"gridding S={support}", "devices": n,
                         "method": "/".join(sorted({g.method for g in gridders})),
                         "time s": round(t_grid, 4),
                         "GGPAPS": round(gpa_once * passes / t_grid / 1e9, 1),
                         "efficiency": round(t_one / (n * t_grid), 3),
                         "host sum s": round(t_host_sum, 4),
                         "device sum s": round(t_device_sum, 4),
                         "passes": passes,
                         "footprints": sum(item[0].last_stats["n_records"] for item in loaded)})
            print(rows[-1], flush=True)  # partial results survive a time limit
    return rows


def host_sum(grids: list) -> np.ndarray:
    """Download every private grid and add them with numpy."""
    total = grids[0].get()
    for grid in grids[1:]:
        total += grid.get()
    return total


def device_sum(grids: list) -> cla.Array:
    """Add the other private grids into the first one on its device (through the host:
    OpenCL has no copies between contexts)."""
    total = grids[0].copy()
    for grid in grids[1:]:
        total += cla.to_device(total.queue, grid.get())
    total.queue.finish()
    return total


# ------------------------------------------------------------------ vis2dirty
def vis2dirty_rows(args, devices, counts) -> list[dict]:
    uvw, freq_hz, baseline_ids = imaging_observation(args.quick)
    npix = 512 if args.quick else 4096
    cell = 1.0 / (3.0 * np.hypot(uvw[:, 0], uvw[:, 1]).max() * freq_hz.max()
                  / SPEED_OF_LIGHT_M_S)
    vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq_hz.size)) * (1 + 1j)
           ).astype(np.complex64)
    model = np.random.default_rng(2).standard_normal((npix, npix)).astype(np.float32)
    t_predict_one: dict[tuple, float] = {}
    rows = []
    cases = ((False, "time", "images"), (False, "time", "device"), (False, "baseline", "images"),
             (True, "time", "images"), (True, "w-planes", "images"))
    if args.defaults_only:
        cases = ((False, None, "auto"), (True, None, "auto"))   # the devices' defaults
    if args.cases:
        cases = tuple(parse_case(case) for case in args.cases)
    for do_w, partition, reduce in cases:
        t_one = None
        for n in counts:
            imager = MultiDeviceImager(devices[:n], uvw=uvw, freq=freq_hz, npix_x=npix,
                                       npix_y=npix, pixsize_x=cell, pixsize_y=cell,
                                       epsilon=1e-5, do_wgridding=do_w, partition=partition,
                                       baseline_ids=baseline_ids, reduce=reduce)
            seconds = best_of(lambda: imager.vis2dirty(vis), args.repeats)
            phases = imager.last_timings
            # dirty2vis once per partition (the reduction does not enter it)
            predict_s = (best_of(lambda: imager.dirty2vis(model), args.repeats)
                         if reduce in ("images", "auto") else None)
            imager.close()
            t_one = t_one or seconds
            if predict_s is not None:
                t_predict_one[(do_w, partition)] = (t_predict_one.get((do_w, partition))
                                                    or predict_s)
            rows.append({"case": f"vis2dirty eps 1e-5 {'w' if do_w else 'no-w'}",
                         "devices": n, "time s": round(seconds, 4),
                         "Mvis/s": round(vis.size / seconds / 1e6, 2),
                         "efficiency": round(t_one / (n * seconds), 3),
                         "partition": imager.partition,
                         "reduce": imager.reduce,
                         "reduce model s": {k: round(v, 4) for k, v in
                                            imager.reduction_seconds.items()} or None,
                         "balance": round(imager.load_balance, 3),
                         **{k: round(v, 4) for k, v in phases.items()},
                         "dirty2vis s": None if predict_s is None else round(predict_s, 4),
                         "dirty2vis efficiency": None if predict_s is None else round(
                             t_predict_one[(do_w, partition)] / (n * predict_s), 3)})
            print(rows[-1], flush=True)
    return rows


# ------------------------------------------------------------------ calls
def call_rows(args, devices, counts) -> list[dict]:
    """The four functional calls, no device argument and ``devices=`` the
    first n devices, end to end from host arrays to a host result."""
    uvw, freq_hz, _ = imaging_observation(args.quick)
    npix = 512 if args.quick else 4096
    cell = 1.0 / (3.0 * np.hypot(uvw[:, 0], uvw[:, 1]).max() * freq_hz.max()
                  / SPEED_OF_LIGHT_M_S)
    rng = np.random.default_rng(1)
    vis = (rng.standard_normal((uvw.shape[0], freq_hz.size)) * (1 + 1j)).astype(np.complex64)
    model = rng.standard_normal((npix, npix)).astype(np.float32)
    geometry = dict(uvw=uvw, freq=freq_hz, epsilon=1e-5, pixsize_x=cell, pixsize_y=cell)
    calls = {"vis2dirty": lambda w, where: clgrid.vis2dirty(
                 vis=vis, npix_x=npix, npix_y=npix, do_wgridding=w, **where, **geometry),
             "dirty2vis": lambda w, where: clgrid.dirty2vis(
                 dirty=model, do_wgridding=w, **where, **geometry)}
    rows = []
    for name, call in calls.items():
        for do_w in (False, True):
            steps = [("no device argument", {})] + [(f"devices= {n}", {"devices": devices[:n]})
                                                     for n in counts]
            t_default = None
            for label, where in steps:
                seconds = median_of(lambda: call(do_w, where), args.repeats)
                clear_cache()   # the next step's plans get the whole cards
                t_default = t_default or seconds
                n = len(where.get("devices", [None]))
                rows.append({"case": f"{name} {'w' if do_w else 'no-w'}", "call": label,
                             "devices": n, "time s": round(seconds, 4),
                             "efficiency": round(t_default / (n * seconds), 3)})
                print(rows[-1], flush=True)
    return rows


def median_of(run, repeats: int) -> float:
    """Median seconds of ``repeats`` calls (each blocks on its result), after
    warm-up (compile, plan)."""
    return median_seconds(run, None, repeats)


# ------------------------------------------------------------------ dask
def dask_rows(args, worker_counts, device_spec) -> list[dict]:
    try:
        import dask.array as da
        import distributed
    except ImportError:
        print("note: dask[distributed] not installed: Dask columns skipped")
        return []
    import clgrid.dask as cldask
    uvw, freq_hz, _ = imaging_observation(True)
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
    rows = []
    if "gridding" not in args.skip:
        rows += gridding_rows(args, devices, counts)
    if "vis2dirty" not in args.skip:
        rows += vis2dirty_rows(args, devices, counts)
    if "calls" not in args.skip:
        rows += call_rows(args, devices, counts)
    if args.dask_workers:
        spec = args.devices[0] if args.devices[0] not in ("all", "cpu-split") else None
        rows += dask_rows(args, args.dask_workers, spec)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print_table([{k: row.get(k, "-") for k in keys} for row in rows])
    write_json(args.json, "scaling", rows, devices=names)
    return 0


if __name__ == "__main__":
    sys.exit(main())

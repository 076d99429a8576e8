"""Gridding strategies per device: scatter, tiled, image, and what 'auto' picks.

For the seed configuration (2048 x 2048 grid, quad polarisation, separable
ES GCF with 8 x oversampling, supports 16..256; ``--quick``: 1024^2,
supports 16 and 32) this prints, per support and strategy, giga grid-point
additions per second (GGPAPS: records x S^2 x npol / time of
``Gridder.grid_records`` on device-resident records), time per call, the
ratio to the fastest strategy, and whether ``Gridder(strategy='auto')``
picked the fastest or one within 10% of it.  The image strategy plans
positions at 1/256 cell, so its record count can differ slightly (less
compression); its GGPAPS uses its own count.

Peer column: ducc0.wgridder.vis2dirty on the same rows (a different
algorithm, FFTs included), skipped with a note when ducc0 is missing.
``--streaming`` also times StreamingGridder in both transfer modes on the
largest support (host preparation and transfers included).
``--save-cache`` stores the measured winner per support in the tuning cache,
which ``strategy='auto'`` then follows.

    python benchmarks/strategies.py --device intel --quick
    python benchmarks/strategies.py --device nvidia --streaming --json strategies_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from clgrid.gcf import separable_gcf  # noqa: E402
from clgrid.gridders.gridder import Gridder  # noqa: E402
from clgrid.gridders.streaming import StreamingGridder  # noqa: E402
from clgrid.gridders.uvprep import SPEED_OF_LIGHT_M_S  # noqa: E402

from gridding import apply_size_defaults, observation, peer_ducc  # noqa: E402

STRATEGIES = ("scatter", "tiled", "image")
#: auto counts as right when within this fraction of the fastest strategy.
TOLERANCE = 0.10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--quick", action="store_true", help="small run (CPU, CI)")
    parser.add_argument("--json", default=None, help="write results to this path")
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES),
                        choices=STRATEGIES)
    parser.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    parser.add_argument("--nx", type=int, default=None)
    parser.add_argument("--oversample", type=int, default=8)
    parser.add_argument("--baselines", type=int, default=None)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--integration", type=float, default=10.0)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--gpa-budget", type=float, default=None,
                        help="grid-point additions per support (default 2e12, quick 1e9)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--streaming", action="store_true",
                        help="also time StreamingGridder (queues vs mapped)")
    parser.add_argument("--save-cache", action="store_true",
                        help="store the measured winner per support in the tuning cache")
    return parser.parse_args(argv)


def time_strategy(context, strategy, gcf, nx, cell, npol, uvw, freq_hz, budget, repeats):
    """Best time of grid_records over device-resident records, and the count."""
    gridder = Gridder(context, gcf, nx, nx, cell, npol=npol, strategy=strategy)
    plan = gridder.plan(uvw, freq_hz)
    n_records = int(min(plan.n_records, max(1, budget // (gcf.support ** 2 * npol))))
    rng = np.random.default_rng(0)
    records = (rng.standard_normal((n_records, npol))
               + 1j * rng.standard_normal((n_records, npol))).astype(np.complex64)
    header_d = cla.to_device(gridder.queue, plan.header[:n_records])
    records_d = cla.to_device(gridder.queue, records)
    grid = gridder.zeros()
    gridder.grid_records(header_d, records_d, grid)     # warm-up (and first-run builds)
    best = np.inf
    for _ in range(repeats):
        grid.fill(0)
        gridder.queue.finish()
        begin = time.perf_counter()
        gridder.grid_records(header_d, records_d, grid)
        best = min(best, time.perf_counter() - begin)
    geometry = {"scatter": gridder.params, "tiled": gridder.choice.tiled,
                "image": gridder.params}[strategy]
    return best, n_records, geometry


def time_streaming(context, gcf, nx, cell, npol, uvw, freq_hz, n_rows):
    """Seconds of StreamingGridder per transfer mode on the first n_rows rows."""
    gridder = Gridder(context, gcf, nx, nx, cell, npol=npol)
    vis = np.ones((n_rows, freq_hz.size, npol), np.complex64)
    plan = gridder.plan(uvw[:n_rows], freq_hz)
    result = {}
    for mode in ("queues", "mapped"):
        streamer = StreamingGridder(gridder, chunk_records=max(1, plan.n_records // 8),
                                    mode=mode)
        streamer.grid_plan(plan, vis, return_device=True, progress=False)    # warm-up
        begin = time.perf_counter()
        streamer.grid_plan(plan, vis, return_device=True, progress=False)
        result[mode] = time.perf_counter() - begin
    return result, gridder.strategy, plan.n_kept


def main(argv=None) -> int:
    args = parse_args(argv)
    apply_size_defaults(args, quick_supports=(16, 32))
    budget = args.gpa_budget or (1e9 if args.quick else 2e12)
    context = clgrid.create_context(args.device)
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    uvw, freq_hz = observation(args)
    margin = max(args.supports) + 2
    uv_max = np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    cell = 1.0 / (args.nx * uv_max / (args.nx / 2 - margin))
    print(f"# clgrid strategies benchmark {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# device: {profile.device_name} ({profile.platform_key}, {profile.driver_version}), "
          f"command: {' '.join(sys.argv)}")
    print(f"# grid {args.nx}^2, npol {args.npol}, separable ES, oversample {args.oversample}, "
          f"budget {budget:.0e} grid-point additions per support and strategy")
    rows, notes = [], []
    for support in args.supports:
        gcf = separable_gcf(support, args.oversample)
        auto = Gridder(context, gcf, args.nx, args.nx, cell, npol=args.npol)
        seconds = {}
        support_rows = []
        for strategy in args.strategies:
            try:
                best, n_records, geometry = time_strategy(
                    context, strategy, gcf, args.nx, cell, args.npol, uvw, freq_hz, budget,
                    args.repeats)
            except ValueError as error:      # e.g. no image support, tile does not fit
                notes.append(f"support {support} {strategy}: {error}")
                continue
            seconds[strategy] = best
            support_rows.append({
                "support": support, "strategy": strategy, "records": n_records,
                "time_s": best, "GGPAPS": n_records * support ** 2 * args.npol / best / 1e9,
                "geometry": " ".join(f"{k}={v}" for k, v in vars(geometry).items())})
        fastest = max(support_rows, key=lambda r: r["GGPAPS"])
        auto_row = next((r for r in support_rows if r["strategy"] == auto.strategy), None)
        auto_ok = auto_row is not None and auto_row["GGPAPS"] >= (1 - TOLERANCE) * fastest[
            "GGPAPS"]
        for row in support_rows:
            row["vs_fastest"] = row["GGPAPS"] / fastest["GGPAPS"]
            row["auto"] = ("<- auto" + ("" if auto_ok else " (NOT within 10%)")
                           if row["strategy"] == auto.strategy else "")
        rows.extend(support_rows)
        notes.append(f"support {support}: auto chose {auto.strategy} "
                     f"({'; '.join(auto.choice.reasons)}); fastest {fastest['strategy']}; "
                     f"auto within 10%: {'yes' if auto_ok else 'NO'}")
        if args.save_cache and seconds:
            from clgrid.gridders.tuning import store_strategy
            store_strategy(profile, support, args.npol, np.float32, True, seconds)
    n_peer_rows = min(uvw.shape[0], 20_000 if args.quick else 200_000)
    peer_seconds, peer_note = peer_ducc(uvw[:n_peer_rows], freq_hz,
                                        np.ones((n_peer_rows, freq_hz.size, args.npol),
                                                np.complex64), args.nx, cell, args.npol)
    if peer_seconds is not None:
        peer_rate = n_peer_rows * freq_hz.size / peer_seconds
        peer_note += f": {peer_rate / 1e6:.2f} M vis/s (npol {args.npol}); ratio column = " \
                     "clgrid visibilities/s over it (uncompressed records)"
        for row in rows:
            row["ratio_to_peer"] = row["records"] / row["time_s"] / peer_rate
    streaming = None
    if args.streaming:
        gcf = separable_gcf(max(args.supports), args.oversample)
        n_rows = min(uvw.shape[0], 5_000 if args.quick else 100_000)
        streaming, strategy, n_kept = time_streaming(context, gcf, args.nx, cell, args.npol,
                                                     uvw, freq_hz, n_rows)
        notes.append(f"streaming ({strategy}, support {max(args.supports)}, {n_kept} vis, "
                     "host prep + transfer + gridding): " + ", ".join(
                         f"{mode} {s:.3f} s" for mode, s in streaming.items()))
    from _common import fmt, print_table
    print_table([{k: fmt(v) for k, v in row.items()} for row in rows])
    for note in notes:
        print(f"# {note}")
    print(f"# peer: {peer_note}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": profile.summary(),
            "command": " ".join(sys.argv), "args": vars(args), "rows": rows,
            "notes": notes, "streaming_s": streaming, "peer": peer_note}, indent=1,
            default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

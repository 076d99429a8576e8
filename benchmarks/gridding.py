"""Benchmark of the table-based gridder (Romein work distribution, Merry coarsening).

Prints a table and optionally writes JSON.  Per support: giga grid-point
additions per second (GGPAPS: one complex multiply-add per polarisation per
GCF point of every gridded record), visibilities per second (uncompressed
equivalent), the fraction of grid-point updates that reach global memory
(atomic flushes / updates, the Romein paper's 0.23%), the compression ratio
and the host preparation rate.  Peer column: ducc0.wgridder.vis2dirty on the
same visibilities (a different algorithm: W-stacking with its own kernel
support chosen from epsilon; its time covers the FFTs too), skipped with a
note when ducc0 is missing.

Data: tracks simulated from the bundled SKA1-mid + MeerKAT layout
(clgrid/data), 6 h, 10 s integrations, 16 channels, quad polarisation, 8 x 8
oversampling and 32 W planes onto a 2048 x 2048 grid.  The gridded records are
the first records (consecutive tracks) of the compressed observation, up to a
budget of grid-point additions per support so that every support runs in
seconds.

Beside the scatter strategy's rows (one per atomic path; ``--no-scatter``
skips them), rows for ``Gridder(strategy='core')`` (the gridding core:
device set points; ``--no-core`` skips them), one per spread of
``--core-methods`` (``tiles``: output-owned tiles, no atomics;
``register``: Romein/Merry register accumulation, one row per
``--register`` geometry): the first rows of the
observation, all channels, up to the same budget of grid-point additions
(no compression: every kept visibility is gridded), device-only
(``grid_plan`` with its set points made and the visibilities on the device);
its ``prep_Mvis_per_s`` is the device set points' rate.  The register
spread merges sorted points of equal footprint start and table slice into
records on the device; its GGPAPS count the additions of those records.  Supports above 33
have no ``tiles`` row (that spread's limit).

    python benchmarks/gridding.py --device intel --quick
    python benchmarks/gridding.py --device nvidia --peak-gpaps 8.4e12 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import fmt, print_table  # noqa: E402
from clgrid.core.register import RegisterSpreader  # noqa: E402
from clgrid.core.table import MAX_TABLE_SUPPORT  # noqa: E402
from clgrid.gcf import separable_gcf, w_projection_gcf  # noqa: E402
from clgrid.gridders.gridder import Gridder, GridderParams  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402
from clgrid.gridders.uvprep import SPEED_OF_LIGHT_M_S, plan_uv  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--quick", action="store_true", help="small run (CPU, CI)")
    parser.add_argument("--json", default=None, help="write results to this path")
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--table", choices=("full", "separable", "separable-complex"),
                        default="full",
                        help="full W-projection table (Romein), separable ES (Merry; real "
                             "weights) or separable-complex (the ES rows times a phase "
                             "ramp: complex weights, as user tables may have)")
    parser.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    parser.add_argument("--nx", type=int, default=None)
    parser.add_argument("--oversample", type=int, default=8)
    parser.add_argument("--w-planes", type=int, default=32)
    parser.add_argument("--baselines", type=int, default=None,
                        help="baselines kept from the layout (default 400, quick 40)")
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--integration", type=float, default=10.0)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--gpa-budget", type=float, default=None,
                        help="grid-point additions per support (default 2e13, quick 3e9)")
    parser.add_argument("--atomics", nargs="+", default=None,
                        help="atomic paths to compare (default: every path the device has)")
    parser.add_argument("--params", default="auto",
                        help="'auto' (tuning cache, else defaults) or bu,bv,wg,vpg")
    parser.add_argument("--peak-gpaps", type=float, default=None,
                        help="device peak grid-point additions/s (H200: 8.4e12)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", action=argparse.BooleanOptionalAction, default=True,
                        help="also time Gridder(strategy='core') (default on, needs fp64)")
    parser.add_argument("--core-methods", nargs="+", default=["tiles", "register"],
                        choices=("tiles", "register"),
                        help="the core's spreads to time (tiles: support <= 33)")
    parser.add_argument("--register", nargs="+", default=["auto"],
                        help="register spread geometries: 'auto' (defaults) or "
                             "block_u,block_v,wg_size,batch,points_per_group")
    parser.add_argument("--no-fp64", action="store_true",
                        help="run as a device without fp64 would (DeviceProfile.fp64 "
                             "switched off): the core's set points in float-float")
    parser.add_argument("--ptx", action="store_true",
                        help="register rows: count the spread kernel's instructions by "
                             "class in the device binary (NVIDIA: PTX text)")
    parser.add_argument("--no-scatter", dest="scatter", action="store_false",
                        help="skip the scatter strategy's rows")
    return parser.parse_args(argv)


def observation(args):
    uvw = simulate_observation(duration_h=args.hours, integration_s=args.integration,
                               n_baselines=args.baselines)
    freq_hz = 1.0e9 + np.arange(args.channels) * 1.0e6   # 16 x 1 MHz at 1 GHz
    return uvw, freq_hz


def peer_ducc(uvw, freq_hz, vis, nx, cell, npol):
    try:
        import ducc0
    except ImportError:
        return None, "ducc0 not installed"
    start = time.perf_counter()
    for p in range(npol):
        ducc0.wgridder.vis2dirty(uvw=uvw, freq=freq_hz, vis=vis[:, :, p], npix_x=nx,
                                 npix_y=nx, pixsize_x=cell, pixsize_y=cell, epsilon=1e-5,
                                 do_wgridding=True, nthreads=0)
    return time.perf_counter() - start, "ducc0.wgridder.vis2dirty eps 1e-5, all threads"


def run_support(args, context, support, uvw, freq_hz, nx, cell, w_max, atomics_paths):
    fov = nx * cell
    if args.table == "full":
        gcf = w_projection_gcf(support, args.oversample, args.w_planes, w_max, fov)
    else:
        gcf = separable_gcf(support, args.oversample)
        if args.table == "separable-complex":
            ramp = np.exp(0.3j * np.arange(support))   # complex, same magnitude
            gcf = dataclasses.replace(gcf, table_u=gcf.table_u * ramp,
                                      table_v=gcf.table_v * ramp)
    params = args.params
    if params != "auto":
        params = GridderParams(*(int(x) for x in params.split(",")))
    start = time.perf_counter()
    plan = plan_uv(uvw, freq_hz, gcf, nx, nx, cell)
    prep_seconds = time.perf_counter() - start
    budget = args.gpa_budget or (3e9 if args.quick else 2e13)
    n_records = int(min(plan.n_records, max(1, budget // (support * support * args.npol))))
    n_vis = int(plan.record_start[n_records] if n_records < plan.n_records else plan.n_kept)
    rng = np.random.default_rng(0)
    records = (rng.standard_normal((n_records, args.npol))
               + 1j * rng.standard_normal((n_records, args.npol))).astype(np.complex64)
    rows = []
    for path in (atomics_paths if args.scatter else []):
        gridder = Gridder(context, gcf, nx, nx, cell, npol=args.npol, params=params,
                          atomics=path)
        header_d = cla.to_device(gridder.queue, plan.header[:n_records])
        records_d = cla.to_device(gridder.queue, records)
        grid = gridder.zeros()
        gridder.grid_records(header_d, records_d, grid)          # warm-up
        best = np.inf
        for _ in range(args.repeats):
            grid.fill(0)
            gridder.queue.finish()
            begin = time.perf_counter()
            gridder.grid_records(header_d, records_d, grid)
            best = min(best, time.perf_counter() - begin)
        counting = Gridder(context, gcf, nx, nx, cell, npol=args.npol,
                           params=gridder.params, atomics=path, count_flushes=True)
        grid.fill(0)
        flushes = counting.grid_records(header_d, records_d, grid)
        updates = n_records * support * support * args.npol
        gpaps = updates / best
        row = {"support": support, "atomics": gridder.atomic_path,
               "params": "%d,%d,%d,%d" % (gridder.params.block_u, gridder.params.block_v,
                                         gridder.wg_size, gridder.params.vis_per_group),
               "records": n_records, "vis": n_vis, "time_s": best,
               "GGPAPS": gpaps / 1e9, "Mvis_per_s": n_vis / best / 1e6,
               "flush_fraction": flushes * args.npol / updates,
               "compression": plan.compression_ratio,
               "prep_Mvis_per_s": (plan.n_kept + plan.n_offgrid) / prep_seconds / 1e6}
        if args.peak_gpaps:
            row["peak_fraction"] = gpaps / args.peak_gpaps
        rows.append(row)
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    if args.core:
        for method in args.core_methods:
            # the tile spread sums in double: not without fp64
            if method == "tiles" and (support > MAX_TABLE_SUPPORT or not profile.fp64):
                continue
            for geometry in (args.register if method == "register" else [None]):
                rows.append(core_row(args, context, gcf, support, uvw, freq_hz, nx, cell,
                                     budget, method, register_geometry(geometry)))
    return rows


def register_geometry(text: str | None) -> dict | None:
    """RegisterParams fields from 'block_u,block_v,wg_size,batch,points_per_group'."""
    if text in (None, "auto"):
        return None
    names = ("block_u", "block_v", "wg_size", "batch", "points_per_group")
    return dict(zip(names, (int(x) for x in text.split(","))))


def core_row(args, context, gcf, support, uvw, freq_hz, nx, cell, budget, method="tiles",
             register=None) -> dict:
    """Gridder(strategy='core') on the first rows, device-only."""
    per_row = support * support * args.npol * freq_hz.size
    n_rows = int(min(uvw.shape[0], max(1, budget // per_row)))
    gridder = Gridder(context, gcf, nx, nx, cell, npol=args.npol, strategy="core",
                      core_method=method, register_params=register)
    queue = gridder.queue
    gridder.plan(uvw[:n_rows], freq_hz)                     # warm-up (builds)
    queue.finish()
    begin = time.perf_counter()
    plan = gridder.plan(uvw[:n_rows], freq_hz)
    queue.finish()
    set_points_s = time.perf_counter() - begin
    rng = np.random.default_rng(0)
    vis = (rng.standard_normal((n_rows, freq_hz.size, args.npol))
           + 1j * rng.standard_normal((n_rows, freq_hz.size, args.npol))).astype(np.complex64)
    vis_d = cla.to_device(queue, vis)
    gridder.grid_plan(plan, vis_d, return_device=True)       # warm-up
    best = np.inf
    for _ in range(args.repeats):
        queue.finish()
        begin = time.perf_counter()
        gridder.grid_plan(plan, vis_d, return_device=True)
        queue.finish()
        best = min(best, time.perf_counter() - begin)
    records = (gridder._core.register.records(plan.points).n_records if method == "register"
               else plan.n_kept)
    gather_ms = flush_fraction = None
    if method == "register":      # the per-call sum of the records' values, alone
        spread = gridder._core.register
        counting = RegisterSpreader(queue, spread.grid, spread.tables_d, args.npol,
                                    spread.params, count_flushes=True)
        counting(plan.points, vis_d, None, None, cla.zeros(queue, (args.npol, nx, nx),
                                                           gridder.complex_dtype), False)
        block_points = spread.params.block_u * spread.params.block_v
        flush_fraction = (counting.last_flushes * block_points
                          / max(1, counting.records(plan.points).n_records * support ** 2))
        cut = spread.records(plan.points)
        queue.finish()
        begin = time.perf_counter()
        spread.gather(plan.points, cut, vis_d, None, None)
        queue.finish()
        gather_ms = (time.perf_counter() - begin) * 1e3
    updates = records * support * support * args.npol
    row = {"support": support, "atomics": f"{gridder.atomic_path} (core {method})",
           "params": gridder._core.geometry,
           "records": records, "vis": plan.n_kept, "time_s": best,
           "GGPAPS": updates / best / 1e9, "Mvis_per_s": plan.n_kept / best / 1e6,
           "flush_fraction": flush_fraction, "compression": plan.n_kept / max(records, 1),
           "prep_Mvis_per_s": n_rows * freq_hz.size / set_points_s / 1e6,
           "gather_ms": gather_ms}
    if args.peak_gpaps:
        row["peak_fraction"] = updates / best / args.peak_gpaps
    if args.ptx and method == "register":
        row["ptx"] = instruction_census(gridder._core.register._kernel)
    return row


#: PTX instruction classes counted by --ptx (prefix of the opcode).
PTX_CLASSES = ("fma", "mul", "add", "sub", "ld.global", "ld.shared", "ld.local", "st.local",
               "red", "atom", "setp", "bra", "mad", "cvt", "shl", "and", "selp")


def instruction_census(kernel) -> str:
    """Static instruction counts of ``kernel``'s function in its program's
    binary (PTX on NVIDIA), by class, as one short string; '' where the
    binary is not text."""
    import pyopencl as cl
    program = kernel.get_info(cl.kernel_info.PROGRAM)
    binary = program.get_info(cl.program_info.BINARIES)[0]
    try:
        text = binary.decode()
    except UnicodeDecodeError:
        return ""
    counts = dict.fromkeys(PTX_CLASSES, 0)
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0].startswith("@"):   # predicated
            tokens = tokens[1:]
        opcode = tokens[0] if tokens else ""
        for name in PTX_CLASSES:
            if opcode == name or opcode.startswith(name + "."):
                counts[name] += 1
                break
    return " ".join(f"{k}={v}" for k, v in counts.items() if v) + " | " + ptxas_info(program)


def ptxas_info(program) -> str:
    """Registers and spills of ``program``'s kernels as ptxas reports them
    (the source rebuilt with NVIDIA's ``-cl-nv-verbose``)."""
    import pyopencl as cl
    device = program.get_info(cl.program_info.DEVICES)[0]
    options = program.get_build_info(device, cl.program_build_info.OPTIONS)
    source = program.get_info(cl.program_info.SOURCE)
    verbose = cl.Program(program.context, source).build(
        options=f"{options} -cl-nv-verbose", devices=[device])
    log = verbose.get_build_info(device, cl.program_build_info.LOG)
    return "; ".join(line.split("ptxas info    :")[-1].strip() for line in log.splitlines()
                     if "registers" in line or "spill" in line)


def apply_size_defaults(args, quick_supports) -> None:
    """Fill unset sizes: the seed configuration, or a small one with --quick."""
    if args.quick:
        args.supports = args.supports or list(quick_supports)
        args.nx = args.nx or 1024
        args.baselines = args.baselines or 40
        args.hours = min(args.hours, 2.0)
        args.repeats = 2
    args.supports = args.supports or [16, 32, 64, 128, 256]
    args.nx = args.nx or 2048
    args.baselines = args.baselines or 400


def switch_off_fp64() -> None:
    """Every DeviceProfile from here on says 'no fp64' (--no-fp64)."""
    real = clgrid.DeviceProfile.from_device
    clgrid.DeviceProfile.from_device = classmethod(
        lambda cls, device: dataclasses.replace(real(device), fp64=False))


def main(argv=None) -> int:
    args = parse_args(argv)
    apply_size_defaults(args, quick_supports=(8, 16))
    if args.no_fp64:
        switch_off_fp64()
    context = clgrid.create_context(args.device)
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    uvw, freq_hz = observation(args)
    margin = max(args.supports) + 2
    uv_max = np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    nx_half = args.nx / 2 - margin
    cell = 1.0 / (args.nx * uv_max / nx_half)   # uv cell: uv_max / nx_half
    w_max = np.abs(uvw[:, 2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    atomics_paths = args.atomics or list(profile.supported_atomic_paths(32))
    print(f"# clgrid gridding benchmark {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# device: {profile.device_name} ({profile.platform_key}, {profile.driver_version}), "
          f"command: {' '.join(sys.argv)}")
    print(f"# {uvw.shape[0]} rows x {freq_hz.size} channels = {uvw.shape[0] * freq_hz.size} "
          f"visibilities, npol {args.npol}, grid {args.nx}^2, oversample {args.oversample}, "
          f"{args.w_planes if args.table == 'full' else 1} W planes ({args.table} table)")
    rows = []
    for support in args.supports:
        rows.extend(run_support(args, context, support, uvw, freq_hz, args.nx, cell, w_max,
                                atomics_paths))
    peer_seconds, peer_note = None, "skipped"
    if True:  # the peer runs on a subset of rows
        n_peer_rows = min(uvw.shape[0], 200_000 if not args.quick else 20_000)
        vis = np.ones((n_peer_rows, freq_hz.size, args.npol), np.complex64)
        peer_seconds, peer_note = peer_ducc(uvw[:n_peer_rows], freq_hz, vis, args.nx, cell,
                                            args.npol)
        if peer_seconds is not None:
            peer_rate = n_peer_rows * freq_hz.size / peer_seconds / 1e6
            for row in rows:
                row["ratio_to_peer"] = row["Mvis_per_s"] / peer_rate
            peer_note += f": {peer_rate:.2f} M vis/s (npol {args.npol})"
    keys = [k for k in dict.fromkeys(k for row in rows for k in row) if k != "ptx"]
    print_table([{k: fmt(row.get(k)) for k in keys} for row in rows])
    print(f"# peer: {peer_note}")
    for row in rows:
        if row.get("ptx"):
            print(f"# instructions, support {row['support']}, {row['params']}: {row['ptx']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": profile.summary(),
            "command": " ".join(sys.argv), "args": vars(args), "rows": rows,
            "peer": peer_note}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the table-based Gridder on the gridding core (Romein work
distribution, Merry coarsening).

Prints a table and optionally writes JSON.  Per support, one row per spread of
``--core-methods`` (``tiles``: output-owned tiles, no float atomics;
``register``: Romein/Merry register accumulation, one row per ``--register``
geometry and ``--atomics`` path): giga grid-point additions per second
(GGPAPS: one complex multiply-add per polarisation per GCF point of every
gridded footprint), visibilities per second, the fraction of grid-point
updates that reach global memory (register rows: atomic block flushes /
updates, the Romein paper's 0.23%), the compression (kept visibilities per
gridded footprint: the register spread merges sorted points of equal cell and
table slice into records on the device; the tile spread grids every kept
visibility) and the device set points' rate (``prep_Mvis_per_s``).
Device-only: ``Gridder.grid_plan`` with its plan made and the visibilities on
the device.  Supports whose tile staging does not fit the device's local
memory (:func:`clgrid.gridders.dispatch.tiles_possible`) have no ``tiles``
row.  Peer column: ducc0.wgridder.vis2dirty on the same visibilities (a
different algorithm: W-stacking with its own kernel support chosen from
epsilon; its time covers the FFTs too), skipped with a note when ducc0 is
missing.

Data: tracks simulated from the bundled SKA1-mid + MeerKAT layout
(clgrid/data), 6 h, 10 s integrations, 16 channels, quad polarisation, 8 x 8
oversampling and 32 W planes onto a 2048 x 2048 grid.  The gridded rows are
the first rows (consecutive tracks) of the observation, all channels, up to
a budget of grid-point additions per support so that every support runs in
seconds.

GCF read paths (``--gcf-reads``, issue 39): one register row per table
(``--table`` takes several), support and read path (``buffer``: the table
in global memory; ``image``: an OpenCL image through a nearest sampler;
``image-linear``: the sampler interpolating between oversampling steps at
positions 16 times finer), with the accuracy beside the speed
(``rel_error``: max |grid - reference| / max |reference| for
``--accuracy-vis`` visibilities gridded alone, one polarisation, the
reference in float64 with the kernel evaluated exactly at their exact
positions: the ES kernel for separable tables (times ``exp(0.3 i d)`` for
the complex ones), the W-projection screen's direct Fourier sum in the
table's rounded w plane for full tables).

    python benchmarks/gridding.py --device intel --quick
    python benchmarks/gridding.py --device nvidia --peak-gpaps 8.4e12 --json out.json
    python benchmarks/gridding.py --device intel --quick --core-methods register \
        --table separable separable-complex full --gcf-reads buffer image image-linear
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import fmt, print_table, switch_off_fp64, timed_calls  # noqa: E402
from clgrid.core.register import RegisterParams  # noqa: E402
from clgrid.core.table import gcf_image_fits  # noqa: E402
from clgrid.gcf import (es_kernel, footprint_distances, grid_correction,  # noqa: E402
                        separable_gcf, w_projection_gcf)
from clgrid.gridders.checks import SPEED_OF_LIGHT_M_S  # noqa: E402
from clgrid.gridders.dispatch import tiles_possible  # noqa: E402
from clgrid.gridders.gridder import Gridder  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--quick", action="store_true", help="small run (CPU, CI)")
    parser.add_argument("--json", default=None, help="write results to this path")
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--table", choices=TABLES, nargs="+", default=["full"],
                        help="full W-projection table (Romein), separable ES (Merry; real "
                             "weights) or separable-complex (the ES kernel times a phase "
                             "ramp exp(0.3 i d) in the distance d: complex weights, as user "
                             "tables may have); several: one after the other")
    parser.add_argument("--gcf-reads", nargs="+", default=None,
                        choices=("buffer", "image", "image-linear"),
                        help="register rows: how the table is read (Gridder(gcf_read=)), "
                             "one row each, with the accuracy; default: the gridder's "
                             "choice, no accuracy column")
    parser.add_argument("--accuracy-vis", type=int, default=64,
                        help="visibilities of the --gcf-reads accuracy check")
    parser.add_argument("--accuracy-oversamples", type=int, nargs="+", default=None,
                        help="a second table: the accuracy (no timing) of each --gcf-reads "
                             "path with tables of these oversamplings")
    parser.add_argument("--accuracy-only", action="store_true",
                        help="with --accuracy-oversamples: that table alone, no timing")
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
                        help="register rows: atomic paths to compare (default: the "
                             "device's best)")
    parser.add_argument("--peak-gpaps", type=float, default=None,
                        help="device peak grid-point additions/s (H200: 8.4e12)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip ducc0's row")
    parser.add_argument("--core-methods", nargs="+", default=["tiles", "register"],
                        choices=("tiles", "register", "deterministic"),
                        help="the Gridder's spreads to time (method=; tiles: support <= 33 "
                             "on GPUs, 64 on CPUs; deterministic: deterministic=True, the "
                             "register spread's fixed-point flushes where it picks them)")
    parser.add_argument("--register", "--params", dest="register", nargs="+",
                        default=["auto"],
                        help="register spread geometries: 'auto' (the tuning cache of "
                             "'clgrid tune table', else the defaults), 'default', "
                             "bu,bv,wg,vpg (batch 64) or "
                             "block_u,block_v,wg_size,batch,points_per_group[,pol_block]")
    parser.add_argument("--no-fp64", action="store_true",
                        help="run as a device without fp64 would (DeviceProfile.fp64 "
                             "switched off): the core's set points in float-float")
    parser.add_argument("--ptx", action="store_true",
                        help="register rows: count the spread kernel's instructions by "
                             "class in the device binary (NVIDIA: PTX text)")
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


#: Tables of --table.
TABLES = ("full", "separable", "separable-complex")
#: Phase slope (radians a cell of distance) of the separable-complex table.
COMPLEX_PHASE = 0.3


def make_gcf(table: str, support: int, oversample: int, w_planes: int, w_max: float,
             fov: float):
    """The benchmark's table: W projection, ES, or ES times exp(i 0.3 d)
    (a kernel of the distance d, so that linear filtering applies to it)."""
    if table == "full":
        return w_projection_gcf(support, oversample, w_planes, w_max, fov)
    gcf = separable_gcf(support, oversample)
    if table == "separable-complex":
        ramp = np.exp(1j * COMPLEX_PHASE * footprint_distances(support, oversample))[None]
        gcf = dataclasses.replace(gcf, table_u=gcf.table_u * ramp, table_v=gcf.table_v * ramp)
    return gcf


def run_support(args, context, table, support, uvw, freq_hz, nx, cell, w_max):
    gcf = make_gcf(table, support, args.oversample, args.w_planes, w_max, nx * cell)
    budget = args.gpa_budget or (3e9 if args.quick else 2e13)
    rows = []
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    for method in args.core_methods:
        if method == "tiles":
            possible, why = tiles_possible(profile, support, np.float32, gcf.separable)
            if not possible:
                print(f"# support {support}: no tiles row ({why})")
                continue
            rows.append(dict(table=table, **core_row(args, context, gcf, support, uvw,
                                                     freq_hz, nx, cell, budget, "tiles")))
            continue
        for read in (args.gcf_reads or [None]):
            if read not in (None, "buffer"):
                fits, why = gcf_image_fits(profile, support, args.oversample, gcf.w_planes,
                                           gcf.separable)
                if not fits:
                    print(f"# {table} support {support}: no {read} row ({why})")
                    continue
            for geometry in args.register:
                for path in ([None] if method == "deterministic" else args.atomics or [None]):
                    row = dict(table=table, **core_row(
                        args, context, gcf, support, uvw, freq_hz, nx, cell, budget,
                        method, register_geometry(geometry), path, read))
                    if read is not None:
                        row["rel_error"] = accuracy(args, context, gcf, table, uvw, freq_hz,
                                                    nx, cell, read)
                    rows.append(row)
    return rows


def accuracy_sweep(args, context, uvw, freq_hz, nx, cell, w_max) -> list[dict]:
    """``--accuracy-oversamples``: the accuracy (no timing) of every read
    path at each table oversampling, per table and support: how many
    oversampling steps image-linear saves for a given accuracy."""
    rows = []
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    for table in args.table:
        for support in args.supports:
            for oversample in args.accuracy_oversamples:
                gcf = make_gcf(table, support, oversample, args.w_planes, w_max, nx * cell)
                row = {"table": table, "support": support, "oversample": oversample}
                for read in args.gcf_reads or ["buffer", "image-linear"]:
                    fits = read == "buffer" or gcf_image_fits(
                        profile, support, oversample, gcf.w_planes, gcf.separable)[0]
                    row[read] = (accuracy(args, context, gcf, table, uvw, freq_hz, nx, cell,
                                          read) if fits else None)
                rows.append(row)
    return rows


def accuracy(args, context, gcf, table, uvw, freq_hz, nx, cell, read) -> float:
    """Max |grid - reference| / max |reference| of ``--accuracy-vis``
    visibilities (spread over the observation, one channel each, one
    polarisation) gridded alone with ``gcf_read=read``; the reference is
    float64 with the exact kernel at the exact positions (:func:`exact_grid`)."""
    rng = np.random.default_rng(1)
    rows = rng.choice(uvw.shape[0], min(args.accuracy_vis, uvw.shape[0]), replace=False)
    sample = uvw[rows]
    chan = freq_hz[:1]
    vis = (rng.standard_normal((rows.size, 1, 1))
           + 1j * rng.standard_normal((rows.size, 1, 1))).astype(np.complex64)
    gridder = Gridder(context, gcf, nx, nx, cell, method="register", gcf_read=read)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # off-grid drops: the reference drops them too
        grid = gridder(sample, chan, vis)[0]
    reference = exact_grid(gcf, table, sample, chan[0], vis[:, 0, 0], nx, cell)
    return float(np.abs(grid - reference).max() / np.abs(reference).max())


def exact_kernel(gcf, table: str, d_u: np.ndarray, d_v: np.ndarray, plane: int) -> np.ndarray:
    """(S, S) kernel ``[jv, ju]`` at distances ``d_u``, ``d_v`` (cells), in
    float64: the ES kernel (separable; times ``exp(0.3 i d)`` per axis for
    separable-complex), or the W-projection screen of ``plane`` summed as a
    direct Fourier series (what the table samples every 1/O cell)."""
    support = gcf.support
    if table != "full":
        ku = es_kernel(2 * d_u / support, gcf.beta).astype(np.complex128)
        kv = es_kernel(2 * d_v / support, gcf.beta).astype(np.complex128)
        if table == "separable-complex":
            ku, kv = ku * np.exp(1j * COMPLEX_PHASE * d_u), kv * np.exp(1j * COMPLEX_PHASE * d_v)
        return np.outer(kv, ku)
    screen = w_screen(gcf, plane)
    pixel = np.arange(support) - support // 2
    e_u = np.exp(-2j * np.pi * np.outer(d_u, pixel) / support)
    e_v = np.exp(-2j * np.pi * np.outer(d_v, pixel) / support)
    return e_v @ screen @ e_u.T / support ** 2


_SCREENS: dict = {}


def w_screen(gcf, plane: int) -> np.ndarray:
    """The image-plane screen of ``clgrid.gcf.w_projection_gcf`` for ``plane``
    ([m, l]: taper times the w term), as that function builds it."""
    key = (id(gcf), plane)
    if key not in _SCREENS:
        support = gcf.support
        taper = 1.0 / grid_correction(separable_gcf(support, gcf.oversample, gcf.kernel,
                                                    gcf.beta), support)
        fov = _FOV[0]
        l = (np.arange(support) - support // 2) * fov / support
        n_minus_1 = np.sqrt(np.maximum(0.0, 1.0 - l[None, :] ** 2 - l[:, None] ** 2)) - 1.0
        _SCREENS.clear()
        _SCREENS[key] = np.outer(taper, taper) * np.exp(
            -2j * np.pi * plane * gcf.w_step_lambda * n_minus_1)
    return _SCREENS[key]


#: The field of view of the W tables (set by main).
_FOV = [0.0]


def exact_grid(gcf, table: str, uvw: np.ndarray, freq: float, vis: np.ndarray, nx: int,
               cell: float) -> np.ndarray:
    """float64 grid of ``vis`` at the exact positions of ``uvw`` (metres) at
    ``freq``: the table gridder's conventions (w < 0 conjugated, footprint
    the S cells within [-S/2, S/2) of the position, off-grid dropped), the
    kernel exact (:func:`exact_kernel`) in the table's rounded w plane."""
    support = gcf.support
    grid = np.zeros((nx, nx), np.complex128)
    for (u, v, w), value in zip(uvw * freq / SPEED_OF_LIGHT_M_S, vis.astype(np.complex128)):
        if w < 0:
            u, v, w, value = -u, -v, -w, np.conj(value)
        x, y = u * nx * cell + nx // 2, v * nx * cell + nx // 2
        x0, y0 = int(np.ceil(x - support / 2)), int(np.ceil(y - support / 2))
        plane = int(np.rint(w / gcf.w_step_lambda)) if gcf.w_planes > 1 else 0
        if x0 < 0 or y0 < 0 or x0 + support > nx or y0 + support > nx or plane >= gcf.w_planes:
            continue
        offsets = np.arange(support)
        grid[y0:y0 + support, x0:x0 + support] += value * exact_kernel(
            gcf, table, x0 + offsets - x, y0 + offsets - y, plane)
    return grid


def register_geometry(text: str | None):
    """``register_params=`` of a Gridder from a --register entry: 'auto' (the
    tuning cache, else the defaults), 'default' (None: the defaults),
    'bu,bv,wg,vpg' (RegisterParams(bu, bv, wg, 64, vpg), the old --params
    form) or 'block_u,block_v,wg_size,batch,points_per_group[,pol_block]'."""
    if text in (None, "default"):
        return None
    if text == "auto":
        return "auto"
    values = [int(x) for x in text.split(",")]
    if len(values) == 4:
        block_u, block_v, wg_size, per_group = values
        return RegisterParams(block_u, block_v, wg_size, 64, per_group)
    if len(values) in (5, 6):
        return RegisterParams(*values)
    raise SystemExit(f"--register {text!r}: 'auto', 'default', bu,bv,wg,vpg or "
                     "block_u,block_v,wg_size,batch,points_per_group[,pol_block]")


def core_row(args, context, gcf, support, uvw, freq_hz, nx, cell, budget, method="tiles",
             register=None, atomics=None, gcf_read=None) -> dict:
    """Gridder(method=method) on the first rows, device-only."""
    per_row = support * support * args.npol * freq_hz.size
    n_rows = int(min(uvw.shape[0], max(1, budget // per_row)))
    deterministic = method == "deterministic"
    extra = (dict(register_params=register, atomics=atomics, gcf_read=gcf_read)
             if method == "register" else
             dict(deterministic=True, register_params=register, gcf_read=gcf_read)
             if deterministic else {})
    gridder = Gridder(context, gcf, nx, nx, cell, npol=args.npol,
                      method=None if deterministic else method, **extra)
    method = gridder.method
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
    best = min(timed_calls(lambda: gridder.grid_plan(plan, vis_d, return_device=True), queue,
                           args.repeats))
    records = gridder.last_stats["n_records"]
    gather_ms = flush_fraction = None
    if method == "register":
        spread = gridder.engine.spreader
        counting = Gridder(context, gcf, nx, nx, cell, npol=args.npol, method="register",
                           register_params=spread.params, count_flushes=True,
                           gcf_read=gridder.gcf_read,
                           **(dict(deterministic=True) if deterministic
                              else dict(atomics=atomics)))
        counting.grid_plan(counting.plan(uvw[:n_rows], freq_hz), vis_d, return_device=True)
        block_points = spread.params.block_u * spread.params.block_v
        flush_fraction = (counting.last_stats["flushes"] * block_points
                          / max(1, counting.last_stats["n_records"] * support ** 2))
        # the per-call sum of the records' values, alone
        cut = spread.records(plan.points)
        queue.finish()
        begin = time.perf_counter()
        spread.gather(plan.points, cut, vis_d, None, None)
        queue.finish()
        gather_ms = (time.perf_counter() - begin) * 1e3
    updates = records * support * support * args.npol
    row = {"support": support, "method": method, "deterministic": gridder.deterministic,
           "gcf_read": gridder.gcf_read,
           "atomics": gridder.atomic_path,
           "params": gridder.engine.launch_geometry,
           "records": records, "vis": plan.n_kept, "time_s": best,
           "GGPAPS": updates / best / 1e9, "Mvis_per_s": plan.n_kept / best / 1e6,
           "flush_fraction": flush_fraction, "compression": plan.n_kept / max(records, 1),
           "prep_Mvis_per_s": n_rows * freq_hz.size / set_points_s / 1e6,
           "gather_ms": gather_ms}
    if args.peak_gpaps:
        row["peak_fraction"] = updates / best / args.peak_gpaps
    if args.ptx and method == "register":
        row["ptx"] = instruction_census(gridder.engine.spreader.kernel)
        if os.environ.get("OUT"):   # the device tool's output folder: the binary itself
            save_binary(gridder.engine.spreader.kernel,
                        Path(os.environ["OUT"]) / f"spread_{support}_{gridder.gcf_read}.ptx")
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


def save_binary(kernel, path) -> None:
    """Write ``kernel``'s program binary (PTX text on NVIDIA) to ``path``."""
    import pyopencl as cl
    program = kernel.get_info(cl.kernel_info.PROGRAM)
    Path(path).write_bytes(program.get_info(cl.program_info.BINARIES)[0])


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
    print(f"# clgrid gridding benchmark {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# device: {profile.device_name} ({profile.platform_key}, {profile.driver_version}), "
          f"command: {' '.join(sys.argv)}")
    print(f"# {uvw.shape[0]} rows x {freq_hz.size} channels = {uvw.shape[0] * freq_hz.size} "
          f"visibilities, npol {args.npol}, grid {args.nx}^2, oversample {args.oversample}, "
          f"{args.w_planes} W planes (full tables), tables {' '.join(args.table)}")
    _FOV[0] = args.nx * cell
    rows = []
    for table in (args.table if not args.accuracy_only else []):
        for support in args.supports:
            rows.extend(run_support(args, context, table, support, uvw, freq_hz, args.nx, cell,
                                    w_max))
    peer_seconds, peer_note = None, "skipped"
    if not (args.no_peer or args.accuracy_only):  # the peer runs on a subset of rows
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
    sweep = []
    if args.accuracy_oversamples:
        sweep = accuracy_sweep(args, context, uvw, freq_hz, args.nx, cell, w_max)
        print(f"# accuracy (rel_error, {args.accuracy_vis} visibilities) against the table's "
              "oversampling")
        keys = list(dict.fromkeys(k for row in sweep for k in row))
        print_table([{k: fmt(row.get(k)) for k in keys} for row in sweep])
    for row in rows:
        if row.get("ptx"):
            print(f"# instructions, support {row['support']}, {row['params']}: {row['ptx']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": profile.summary(),
            "command": " ".join(sys.argv), "args": vars(args), "rows": rows,
            "accuracy_sweep": sweep, "peer": peer_note}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

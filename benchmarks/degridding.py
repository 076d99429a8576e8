"""Benchmark of the table degridder on the gridding core: ``Degridder()``
(device set points sorted by cell, records of equal points cut on the
device, one footprint a record: ``interpolate_table_records`` in
``templates/core_interp.cl.mako``) beside ``Degridder(tiles=...)`` (the
points binned by tile, one footprint a visibility; the device's default
tile, :func:`clgrid.core.table.table_tiles`; supports the tile spread takes
only).

Same observation as ``benchmarks/gridding.py`` (SKA1-mid + MeerKAT layout,
16 channels, quad polarisation, 8 x 8 oversampling, 32 W planes). Times,
best of ``--repeats``, plan made once: ``degrid_plan`` from a device grid
to host visibilities (``records_s``, ``tiles_s``) and with
``return_device=True`` (device-resident, ``*_device_s``); ``*_footprints``: the
footprints summed per call; ``*_max_rel_diff``: each variant's
visibilities against the records'.  Where the device degrids records by
register blocks (GPUs from support 32), ``group_*`` is the work-group a
record it replaced; ``--register`` adds register blocks at given geometries
(``reg <geometry>_*``).  Prints a table, writes JSON.

    python benchmarks/degridding.py --device intel --quick
    python benchmarks/degridding.py --device nvidia --supports 8 16 32 64
    python benchmarks/degridding.py --device nvidia --table separable --supports 128 \
        --register default 2,2,128,64,2048
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from benchmarks._common import fmt, print_table, timed_calls  # noqa: E402
from benchmarks.gridding import apply_size_defaults, observation, register_geometry  # noqa: E402
from clgrid.core.register import default_degrid_params  # noqa: E402
from clgrid.gcf import separable_gcf, w_projection_gcf  # noqa: E402
from clgrid.core.table import table_tiles  # noqa: E402
from clgrid.gridders.checks import SPEED_OF_LIGHT_M_S  # noqa: E402
from clgrid.gridders.dispatch import tiles_possible  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--table", choices=("full", "separable"), default="full")
    parser.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    parser.add_argument("--nx", type=int, default=None)
    parser.add_argument("--oversample", type=int, default=8)
    parser.add_argument("--w-planes", type=int, default=32)
    parser.add_argument("--baselines", type=int, default=None)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--integration", type=float, default=10.0)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--register", nargs="+", default=[],
                        help="also degrid by register blocks at these geometries "
                             "(as benchmarks/gridding.py --register: 'default', "
                             "block_u,block_v,wg_size,batch,points_per_group[,pol_block])")
    return parser.parse_args(argv)


def best_of(repeats: int, call) -> float:
    """Best seconds of ``repeats`` calls (each blocks on its result), after warm-up."""
    return min(timed_calls(call, None, repeats))


def main(argv=None) -> int:
    args = parse_args(argv)
    apply_size_defaults(args, quick_supports=(8, 16))
    context = clgrid.create_context(args.device)
    profile = clgrid.DeviceProfile.from_device(context.devices[0])
    uvw, freq_hz = observation(args)
    nx = args.nx
    uv_max = np.abs(uvw[:, :2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    cell = 1.0 / (nx * uv_max / (nx / 2 - max(args.supports) - 2))
    w_max = np.abs(uvw[:, 2]).max() * freq_hz.max() / SPEED_OF_LIGHT_M_S
    n_vis = uvw.shape[0] * freq_hz.size
    print(f"# clgrid degridding benchmark {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"# device: {profile.device_name} ({profile.platform_key}), command: "
          f"{' '.join(sys.argv)}")
    print(f"# {n_vis} visibilities, npol {args.npol}, grid {nx}^2, {args.table} table")
    rng = np.random.default_rng(0)
    rows = []
    for support in args.supports:
        gcf = (w_projection_gcf(support, args.oversample, args.w_planes, w_max, nx * cell)
               if args.table == "full" else separable_gcf(support, args.oversample))
        grid = (rng.standard_normal((args.npol, nx, nx))
                + 1j * rng.standard_normal((args.npol, nx, nx))).astype(np.complex64)
        row = {"support": support}
        results = {}
        # records: the device's choice; group: a work-group a record (where
        # the device's choice is register blocks); reg <geometry>: register
        # blocks at that geometry
        variants = {"records": {}, "group": {}}
        for text in args.register:
            variants[f"reg {text}"] = dict(register_params=register_geometry(text) or
                                           default_degrid_params(profile, support, args.npol,
                                                                 gcf.separable,
                                                                 gcf.real_tables))
        possible, why = tiles_possible(profile, support, np.float32, gcf.separable)
        if possible:
            variants["tiles"] = dict(tiles=table_tiles(profile, support))
        else:
            print(f"# support {support}: no tiles column ({why})")
        for name, options in variants.items():
            degridder = clgrid.Degridder(context, gcf, nx, nx, cell, npol=args.npol, **options)
            interpolator = degridder.engine.interpolator
            if name == "group":
                if interpolator.register is None:
                    continue                 # the device's choice already
                interpolator.register = None
            if interpolator.register is not None:
                p = interpolator.register.params
                row[f"{name}_geometry"] = (f"{p.block_u}x{p.block_v} pol{p.pols(args.npol)} "
                                           f"wg{interpolator.register.wg_size} "
                                           f"b{interpolator.register.batch}")
            grid_d = cla.to_device(degridder.queue, grid)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                plan = degridder.plan(uvw, freq_hz)
                row[f"{name}_s"] = best_of(
                    args.repeats, lambda: degridder.degrid_plan(plan, grid_d))
                row[f"{name}_device_s"] = best_of(
                    args.repeats, lambda: (degridder.degrid_plan(plan, grid_d,
                                                                 return_device=True),
                                           degridder.queue.finish()))
                results[name] = degridder.degrid_plan(plan, grid_d)
            row[f"{name}_footprints"] = degridder.last_stats["n_records"]
            row[f"{name}_Mvis_per_s"] = n_vis / row[f"{name}_device_s"] / 1e6
        reference = results["records"]
        for name in results:
            if name != "records":
                row[f"{name}_max_rel_diff"] = float(np.abs(results[name] - reference).max()
                                                    / np.abs(reference).max())
        if "tiles" in results:
            row["speedup_records_device"] = row["tiles_device_s"] / row["records_device_s"]
        rows.append(row)
        print(f"# support {support} done", flush=True)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print_table([{k: fmt(row.get(k, "-")) for k in keys} for row in rows])
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": profile.summary(),
            "command": " ".join(sys.argv), "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

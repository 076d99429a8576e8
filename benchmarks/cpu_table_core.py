"""Table ``Gridder`` on a CPU: the gridding core's two spreads and what the
dispatcher picks, end to end (numpy uvw, frequencies and visibilities in,
numpy grid out, the device set points included; each gridder is built once
(compiles excluded) and called ``--repeats`` times, median kept).

Columns: ``tiles`` (``method='tiles'``: output-owned tiles, no float atomics,
the vector tile where the CPU compiler builds it; '-' above its widest,
:func:`clgrid.core.table.max_table_support`, where only ``deterministic=True``
asks for the far slower lane tiles that ``benchmarks/deterministic.py``
times), ``register`` (``method='register'``: Romein/Merry register
accumulation, float atomics at flushes), ``auto`` (``method=None``, the
default: what :func:`clgrid.gridders.dispatch.choose` picks, named in ``auto
picks``), ``tiles dev`` and ``register dev`` (device-only: the plan made once,
the visibilities on the device, ``Gridder.grid_plan``, as a major cycle
reusing its plan sees), and ducc0's ``vis2dirty`` on the same rows with all
cores (FFT included; a different job, shown for scale) at epsilon 1e-4.
Separable ES tables of width 4, 8, 16 and 24, complex separable tables of
width 8 and 16 (the ES rows times a phase ramp) and W-projection tables of
width 8, 32 and 64, one and four polarisations (``--cases`` picks some);
``--wide`` adds separable and W-projection tables of width 72 and 128, wider
than the vector tile takes (the register spread runs).

Data: ``--rows`` random uvw rows (uniform over the uv plane: few points
share a cell, the register spread's worst case) or, with ``--tracks``,
simulated SKA-mid tracks of that many rows (1 h, 30 s dumps: neighbouring
dumps share cells and merge into records).  ``compression`` is the
visibilities per record of the register spread's set points.

    python benchmarks/cpu_table_core.py --device intel --json out.json
    python benchmarks/cpu_table_core.py --device intel --tracks --rows 240000 --channels 8
    python benchmarks/cpu_table_core.py --device intel --rows 5000 --cases "separable W8"
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import clgrid  # noqa: E402
from clgrid.core.table import max_table_support  # noqa: E402
from clgrid.device.profiles import DeviceProfile  # noqa: E402
from clgrid.gcf import separable_gcf, w_projection_gcf  # noqa: E402
from clgrid.gridders.gridder import Gridder  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402
from _common import median_seconds, write_json  # noqa: E402

SPEED_OF_LIGHT = 299_792_458.0
METHODS = {"tiles": dict(method="tiles"),
           "register": dict(method="register"),
           "auto": dict(method=None)}


def _observation(n_rows: int, n_chan: int, nx: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    uvw_m = rng.uniform(-2000, 2000, (n_rows, 3))
    uvw_m[:, 2] *= 0.01
    freq_hz = np.linspace(1.0e9, 1.2e9, n_chan)
    cell_size_rad = 0.9 / (2 * 2000 * freq_hz[-1] / SPEED_OF_LIGHT)
    return uvw_m, freq_hz, cell_size_rad


def _tracks(n_rows: int, n_chan: int, nx: int):  # noqa: ARG001 (as _observation)
    """SKA-mid tracks, 1 h of 30 s dumps, about ``n_rows`` rows; the longest
    baseline 0.4 * nx cells from the centre (as benchmarks/deterministic.py)."""
    uvw_m = simulate_observation(duration_h=1.0, integration_s=30.0,
                                 n_baselines=max(1, n_rows // 120))
    freq_hz = 1.0e9 + np.arange(n_chan) * 1.0e6
    uv_max_lambda = np.max(np.abs(uvw_m[:, :2])) * freq_hz.max() / SPEED_OF_LIGHT
    return uvw_m, freq_hz, 0.4 / uv_max_lambda


def _ducc0_seconds(queue, uvw_m, freq_hz, vis, nx, cell_size_rad, repeats) -> float | None:
    try:
        import ducc0
    except ImportError:
        return None
    return median_seconds(lambda: ducc0.wgridder.vis2dirty(
        uvw=uvw_m, freq=freq_hz, vis=vis[..., 0], npix_x=nx, npix_y=nx,
        pixsize_x=cell_size_rad, pixsize_y=cell_size_rad, epsilon=1e-4,
        nthreads=os.cpu_count() or 1), queue, repeats)


def _complex_rows(gcf):
    """The same table with complex rows: the ES rows times a phase ramp."""
    ramp = np.exp(0.3j * np.arange(gcf.support))
    return dataclasses.replace(gcf, table_u=gcf.table_u * ramp, table_v=gcf.table_v * ramp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--nx", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write results to this path")
    parser.add_argument("--wide", action="store_true",
                        help="also time tables of width 72 and 128 (register spread)")
    parser.add_argument("--tracks", action="store_true",
                        help="simulated SKA-mid tracks instead of random uvw")
    parser.add_argument("--cases", nargs="+", default=None,
                        help="tables to time, by label (default all)")
    args = parser.parse_args()
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    uvw_m, freq_hz, cell = (_tracks if args.tracks else _observation)(args.rows, args.channels,
                                                                       args.nx)
    # the W-projection tables' w range: 200 wavelengths, or the data's
    w_max = max(200.0, float(np.max(np.abs(uvw_m[:, 2]))) * freq_hz.max() / SPEED_OF_LIGHT)
    cases = [("separable W4", separable_gcf(4, 8)), ("separable W8", separable_gcf(8, 8)),
             ("separable W16", separable_gcf(16, 8)),
             ("complex sep W8", _complex_rows(separable_gcf(8, 8))),
             ("complex sep W16", _complex_rows(separable_gcf(16, 8))),
             ("separable W24", separable_gcf(24, 8)),
             ("W-projection W8", w_projection_gcf(8, 8, 8, w_max, args.nx * cell)),
             ("W-projection W32", w_projection_gcf(32, 8, 8, w_max, args.nx * cell)),
             ("W-projection W64", w_projection_gcf(64, 8, 8, w_max, args.nx * cell))]
    if args.wide:
        cases += [(f"{name} W{width}", make(width)) for width in (72, 128)
                  for name, make in (("separable", lambda w: separable_gcf(w, 8)),
                                     ("W-projection", lambda w: w_projection_gcf(
                                         w, 8, 8, w_max, args.nx * cell)))]
    if args.cases:
        cases = [case for case in cases if case[0] in args.cases]
    rng = np.random.default_rng(1)
    profile = DeviceProfile.from_device(queue.device)
    rows = []
    print(f"device: {queue.device.name.strip()} ({queue.device.platform.name.strip()}); "
          f"{args.rows} rows x {args.channels} channels, {args.nx}^2 grid; seconds, median of "
          f"{args.repeats}")
    print(f"{'table':16s} npol " + " ".join(f"{name:>13s}" for name in METHODS)
          + "  auto picks       compression  tiles dev  register dev  ducc0 vis2dirty")
    for label, gcf in cases:
        for npol in (1, 4):
            vis = (rng.standard_normal((args.rows, args.channels, npol)) + 1j).astype(np.complex64)
            row = {"table": label, "npol": npol}
            for name, kwargs in METHODS.items():
                if name == "tiles" and gcf.support > max_table_support(profile):
                    row[name], row[f"{name}_why"] = None, "lane tiles: deterministic.py"
                    continue
                try:
                    gridder = Gridder(queue, gcf, args.nx, args.nx, cell, npol=npol, **kwargs)
                except ValueError as error:   # e.g. staging beyond the local memory
                    row[name], row[f"{name}_why"] = None, str(error)
                    continue
                row[name] = median_seconds(lambda: gridder(uvw_m, freq_hz, vis), queue,
                                           args.repeats)
                if name == "auto":
                    row["auto_picks"] = gridder.method
                if name == "register":
                    row["compression"] = gridder.last_stats["compression_ratio"]
                if name != "auto":   # device-only: the plan made once, vis on the device
                    plan, vis_d = gridder.plan(uvw_m, freq_hz), cla.to_device(queue, vis)
                    row[f"{name}_device"] = median_seconds(
                        lambda: gridder.grid_plan(plan, vis_d, return_device=True), queue,
                        args.repeats)
            row["ducc0"] = _ducc0_seconds(queue, uvw_m, freq_hz, vis, args.nx, cell,
                                          args.repeats)
            rows.append(row)
            ducc0 = f"{row['ducc0']:.3f}" if row["ducc0"] is not None else "-"
            print(f"{label:16s} {npol:4d} "
                  + " ".join(f"{row[name]:13.3f}" if row[name] is not None else f"{'-':>13s}"
                             for name in METHODS)
                  + f"  {row['auto_picks']:16s} {row.get('compression', 0):11.2f}  "
                  + " ".join(f"{row[key]:9.3f}" if row.get(key) is not None else f"{'-':>9s}"
                             for key in ("tiles_device", "register_device"))
                  + f"     {ducc0}", flush=True)
    write_json(args.json, "cpu_table_core", rows, device=queue.device.name.strip(),
               platform=queue.device.platform.name.strip(), rows_in=args.rows,
               channels=args.channels, nx=args.nx)

if __name__ == "__main__":
    main()

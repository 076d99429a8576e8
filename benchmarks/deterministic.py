"""Cost of ``deterministic=True`` against the default paths (issue 19).

Two measurements on one device, each beside its non-deterministic twin:

1. ``Gridder`` (table gridding on the gridding core, separable ES GCF, 8x
   oversampled): ``deterministic=True`` (on GPUs the register spread with
   64-bit fixed-point flushes, elsewhere as ``clgrid.choose_method`` says)
   and ``method='tiles'`` (output-owned tiles, no float atomics) beside
   ``method='register'`` (Romein/Merry register accumulation, float atomics
   at flushes; the ratios' base).
   ``default`` says which of the two a Gridder with neither (``method=None``)
   runs on the device.  Device-only (set points made once, the
   visibilities on the device, ``Gridder.grid_plan``; the set points are
   timed apart, ``set_points_s``) and end to end (host uvw/vis in, host
   grid out).
2. ``vis2dirty`` with Briggs weights, end to end: ``ImageWeighting``
   (histogram by float atomics, by exact 64-bit fixed point -- the
   deterministic default --, or by the stable-sort fallback) then
   ``clgrid.vis2dirty`` with the weights; the peer ``ducc0.wgridder.vis2dirty``
   on the same weights for scale (ducc0 has no weighting of its own).

Every row also says whether two calls gave identical bits.  The
configurations are timed round by round (interleaved), medians reported:
on a shared machine the load drifts between them otherwise.

    python benchmarks/deterministic.py --device intel --quick --json det_intel.json
    python benchmarks/deterministic.py --device nvidia --no-wgridding --npix 2048 \
        --json det_h200.json

(On the H200 keep ``--no-wgridding``: reikna's FFT of the w planes took
16 s a call there on 2026-11-23, RESULTS.md "Imaging", and would swamp the
weighting being measured.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from clgrid.core.register import RegisterParams  # noqa: E402
from clgrid.gcf import separable_gcf  # noqa: E402
from clgrid.imaging.weighting import ImageWeighting  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402

from _common import fmt, print_table, write_json  # noqa: E402

C = 299_792_458.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="passed to clgrid.create_context")
    parser.add_argument("--quick", action="store_true", help="small sizes (CPU, CI)")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--supports", type=int, nargs="+", default=None)
    parser.add_argument("--skip-imaging", action="store_true")
    parser.add_argument("--dumps", type=int, default=None,
                        help="time dumps of the simulated track (default 120 quick, 60 full)")
    parser.add_argument("--npix", type=int, default=None)
    parser.add_argument("--fixed-params", nargs="+", default=(), metavar="UxV:WG:POLS",
                        help="also time deterministic=True with these register geometries "
                             "(block_u x block_v : work-group size : pol_block), e.g. 4x4:64:2")
    parser.add_argument("--wgridding", action=argparse.BooleanOptionalAction, default=True,
                        help="vis2dirty with the w term (default on); --no-wgridding where "
                             "the device FFT of many w planes would dominate")
    return parser.parse_args(argv)


def sizes(quick: bool) -> dict:
    if quick:   # ~0.5 M visibilities: minutes on 2 shared CPU cores
        return dict(hours=1.0, integration=30.0, baselines=2000, channels=8, npix=1024,
                    npol=1, supports=[8])
    return dict(hours=1.0, integration=60.0, baselines=19000, channels=8, npix=4096,
                npol=4, supports=[8, 16])   # ~9 M visibilities


_START = time.perf_counter()


def progress(message: str) -> None:
    """A timestamped line on stderr (where a run cut short stopped)."""
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


def observation(size: dict):
    uvw = simulate_observation(duration_h=size["hours"], integration_s=size["integration"],
                               n_baselines=size["baselines"])
    freq = 1.0e9 + np.arange(size["channels"]) * 1.0e6
    return uvw, freq


def interleaved_medians(calls: dict, queue, repeats: int) -> dict:
    """Median seconds of every call, timed round by round (each call once a
    round, after one warm-up round): on a shared machine the load drifts,
    and interleaving spreads the drift over all of them alike."""
    times = {name: [] for name in calls}
    for round_index in range(repeats + 1):
        for name, call in calls.items():
            queue.finish()
            start = time.perf_counter()
            call()
            queue.finish()
            if round_index:
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) for name, values in times.items()}


def fixed_configs(specs) -> list[tuple[str, dict]]:
    """deterministic=True with the register geometries of ``--fixed-params``."""
    configs = []
    for spec in specs:
        block, wg, pols = spec.split(":")
        block_u, block_v = (int(n) for n in block.split("x"))
        params = RegisterParams(block_u, block_v, int(wg), 64, 2048, int(pols))
        configs.append((f"deterministic=True {spec}",
                        dict(deterministic=True, register_params=params)))
    return configs


def gridder_rows(context, queue, uvw, freq, npix, npol, support, repeats,
                 fixed_params=()) -> list[dict]:
    """Gridder: the register spread (float atomics, the ratios' base),
    deterministic=True (the register spread with fixed-point flushes where it
    is the faster spread, else the tiles) and the tile spread."""
    rng = np.random.default_rng(1)
    nvis = uvw.shape[0] * freq.size
    vis = (rng.standard_normal((uvw.shape[0], freq.size, npol))
           + 1j * rng.standard_normal((uvw.shape[0], freq.size, npol))).astype(np.complex64)
    uv_max = np.max(np.abs(uvw[:, :2])) * freq.max() / C
    cell = 0.4 / uv_max   # the longest baseline 0.4 * npix cells from the centre
    gcf = separable_gcf(support, 8)
    profile = clgrid.DeviceProfile.from_device(queue.device)
    default = clgrid.choose_method(profile, support, npol, np.float32, separable=True).method
    configs = [("register, deterministic=False", dict(method="register")),
               ("deterministic=True", dict(deterministic=True)),
               ("tiles (method='tiles')", dict(method="tiles"))] + fixed_configs(fixed_params)
    prepared, set_points_s, notes = {}, {}, []
    for name, options in configs:
        progress(f"Gridder support {support}: build {name}")
        try:
            gridder = clgrid.Gridder(queue, gcf, npix, npix, cell, npol=npol, **options)
        except ValueError as error:   # tiles whose staging does not fit
            notes.append({"part": "Gridder", "support": support, "config": name,
                          "note": str(error)})
            continue
        plan = gridder.plan(uvw, freq)
        set_points_s[name] = interleaved_medians(
            {name: lambda g=gridder: g.plan(uvw, freq)}, queue, repeats)[name]
        prepared[name] = (gridder, plan, cla.to_device(queue, vis))

    def device_only(name):
        gridder, plan, vis_d = prepared[name]
        return gridder.grid_plan(plan, vis_d, return_device=True)

    progress(f"Gridder support {support}: timing device-only")
    device_s = interleaved_medians({name: (lambda n=name: device_only(n)) for name in prepared},
                                   queue, repeats)
    progress(f"Gridder support {support}: timing end to end")
    end_to_end_s = interleaved_medians(
        {name: (lambda g=prepared[name][0]: g(uvw, freq, vis)) for name in prepared},
        queue, repeats)
    rows, base = [], next(iter(prepared), None)
    if base is None:
        return notes
    reference = device_only(base).get()
    for name in prepared:
        first = device_only(name).get()
        second = device_only(name).get()
        gridder = prepared[name][0]
        rows.append({
            "part": "Gridder", "support": support, "config": name,
            "method": gridder.method, "default": gridder.method == default,
            "deterministic": gridder.deterministic, "atomics": gridder.atomic_path,
            "geometry": gridder.engine.launch_geometry,
            "nvis": nvis, "npix": npix, "npol": npol,
            "device_s": device_s[name], "end_to_end_s": end_to_end_s[name],
            "set_points_s": set_points_s[name],
            "ratio_device": device_s[name] / device_s[base],
            "ratio_end_to_end": end_to_end_s[name] / end_to_end_s[base],
            "repeat_bitwise": bool(np.array_equal(first, second)),
            "rel_diff_to_first": float(np.max(np.abs(first - reference))
                                       / np.max(np.abs(reference))),
        })
    return rows + notes


def imaging_rows(queue, uvw, freq, npix, repeats, do_w: bool) -> list[dict]:
    """ImageWeighting (Briggs) + vis2dirty, per histogram method; ducc0 beside."""
    rng = np.random.default_rng(2)
    vis = (rng.standard_normal((uvw.shape[0], freq.size))
           + 1j * rng.standard_normal((uvw.shape[0], freq.size))).astype(np.complex64)
    natural = rng.uniform(0.5, 2.0, vis.shape).astype(np.float32)
    uv_max = np.max(np.abs(uvw[:, :2])) * freq.max() / C
    pixsize = 0.9 / (2 * uv_max)   # Nyquist-ish, longest baseline inside the grid
    geometry = dict(npix_x=npix, npix_y=npix, pixsize_x=pixsize, pixsize_y=pixsize)
    methods = (("atomic", False), ("fixed", True), ("sorted", True))
    weightings = {}
    for method, deterministic in methods:
        progress(f"vis2dirty with Briggs weights: build histogram {method}")
        weightings[method] = ImageWeighting(queue, scheme="briggs", robust=0.0, method=method,
                                            deterministic=deterministic, **geometry)

    def image(method):
        weights = weightings[method](uvw, freq, natural)
        return clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=weights, epsilon=1e-4,
                                do_wgridding=do_w, queue=queue, **geometry)

    progress("vis2dirty with Briggs weights: timing the weighting")
    weighting_s = interleaved_medians(
        {m: (lambda w=weightings[m]: w(uvw, freq, natural)) for m in weightings}, queue,
        repeats)
    progress("vis2dirty with Briggs weights: timing weighting + vis2dirty")
    total_s = interleaved_medians({m: (lambda m=m: image(m)) for m in weightings}, queue,
                                  repeats)
    rows, reference_image = [], image("atomic")
    for method, _ in methods:
        first, second = image(method), image(method)
        rows.append({
            "part": "vis2dirty+Briggs", "config": f"weights {method}",
            "deterministic": weightings[method].deterministic, "nvis": vis.size,
            "npix": npix, "w": do_w, "weighting_s": weighting_s[method],
            "end_to_end_s": total_s[method],
            "ratio_end_to_end": total_s[method] / total_s["atomic"],
            "repeat_bitwise": bool(np.array_equal(first, second)),
            "rel_diff_to_first": float(np.max(np.abs(first - reference_image))
                                       / np.max(np.abs(reference_image))),
        })
    rows.append(_ducc_row(uvw, freq, vis, weightings["fixed"](uvw, freq, natural), geometry,
                          total_s["atomic"], reference_image, do_w))
    return rows


def _ducc_row(uvw, freq, vis, weights, geometry, baseline, reference_image,
              do_w: bool) -> dict:
    row = {"part": "vis2dirty+Briggs", "config": "peer ducc0 (same weights, all threads)"}
    try:
        import ducc0
    except ImportError:
        return dict(row, note="ducc0 not installed")
    progress("ducc0")
    arguments = dict(uvw=uvw, freq=freq, vis=vis, wgt=weights, epsilon=1e-4,
                     do_wgridding=do_w, nthreads=0, **geometry)
    ducc0.wgridder.vis2dirty(**arguments)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        image = ducc0.wgridder.vis2dirty(**arguments)
        times.append(time.perf_counter() - start)
    seconds = float(np.median(times))
    return dict(row, end_to_end_s=seconds, ratio_end_to_end=seconds / baseline,
                rel_diff_to_first=float(np.max(np.abs(image - reference_image))
                                        / np.max(np.abs(reference_image))))


def show(rows: list[dict]) -> None:
    """Print rows with the union of their keys, floats to 4 digits."""
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print_table([{k: fmt(row.get(k, "-")) for k in keys} for row in rows])


def main(argv=None) -> int:
    args = parse_args(argv)
    size = sizes(args.quick)
    if args.dumps:
        size["integration"] = size["hours"] * 3600.0 / args.dumps
    if args.npix:
        size["npix"] = args.npix
    context = clgrid.create_context(args.device)
    queue = cl.CommandQueue(context)
    device = queue.device
    print(f"device: {device.platform.name} / {device.name}")
    uvw, freq = observation(size)
    progress(f"{uvw.shape[0]} rows x {freq.size} channels, {size['npix']}^2")
    rows = []
    def save():   # after every section: a run cut short keeps what it measured
        write_json(args.json, "deterministic", rows,
                   device=f"{device.platform.name} / {device.name}", sizes=size,
                   command=" ".join(sys.argv))

    if not args.skip_imaging:
        imaging = imaging_rows(queue, uvw, freq, size["npix"], args.repeats, args.wgridding)
        show(imaging)
        rows += imaging
        save()
    for support in args.supports or size["supports"]:
        rows += gridder_rows(context, queue, uvw, freq, size["npix"], size["npol"], support,
                             args.repeats, args.fixed_params)
        show([r for r in rows if r.get("support") == support])
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: clgrid.vis2dirty / dirty2vis against ducc0.wgridder.

Same epsilon, image size and visibilities in the same run; ducc0 with all
cores (nthreads = os.cpu_count()).  Cases: a simulated SKA-mid (+MeerKAT)
observation and, when python-casacore is installed, the bundled VLA
Measurement Set (tests/data/*.ms.tar.gz).  ducc0 missing: its columns are
left empty with a note.

    python benchmarks/imaging.py --device intel --quick
    python benchmarks/imaging.py --device nvidia --epsilon 1e-5 --json out.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402

import clgrid  # noqa: E402
from clgrid.imaging import SPEED_OF_LIGHT, Imager  # noqa: E402
from clgrid.simulate import simulate_observation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_seconds, print_table, write_json  # noqa: E402

try:
    from ducc0 import wgridder
except ImportError:  # the H200 machine has no ducc0 unless its wheel is carried
    wgridder = None

VLA_ARCHIVE = Path(__file__).resolve().parent.parent / "tests" / "data" / \
    "vla_day2_TDEM0003_10s_norx_1src_1spw.ms.tar.gz"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="clgrid.create_context spec")
    parser.add_argument("--quick", action="store_true", help="small sizes (CI, CPUs)")
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1e-5])
    parser.add_argument("--npix", type=int, default=None, help="image size (default 4096)")
    parser.add_argument("--baselines", type=int, default=None,
                        help="random subset of SKA-mid baselines (default all 19306)")
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--channels", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-w", action="store_true", help="only do_wgridding=False")
    parser.add_argument("--json", default=None, help="write results here")
    return parser.parse_args(argv)


def ska_mid_case(args) -> dict:
    """2 h of 8 s dumps, 64 channels at 1.4 GHz (quick: 0.25 h, 8 channels, 200 baselines)."""
    hours = args.hours or (0.25 if args.quick else 2.0)
    channels = args.channels or (8 if args.quick else 64)
    baselines = args.baselines or (200 if args.quick else None)
    npix = args.npix or (512 if args.quick else 4096)
    uvw = simulate_observation("ska1_mid_meerkat_197", duration_h=hours, integration_s=8.0,
                               declination_deg=-30.0, n_baselines=baselines)
    freq = np.linspace(1.35e9, 1.45e9, channels)
    # Nyquist for the longest baseline at the top frequency, 1.5x oversampled
    max_uv = np.max(np.hypot(uvw[:, 0], uvw[:, 1])) * freq[-1] / SPEED_OF_LIGHT
    cell = 1.0 / (3.0 * max_uv)
    return {"name": "ska-mid", "uvw": uvw, "freq": freq, "npix": npix, "cell": cell}


def vla_case(args) -> dict | None:
    """The bundled VLA set, or None (with a note) without python-casacore."""
    try:
        from casacore.tables import table
    except ImportError:
        print("note: python-casacore missing, VLA case skipped")
        return None
    if not VLA_ARCHIVE.exists():
        print(f"note: {VLA_ARCHIVE.name} not found, VLA case skipped")
        return None
    folder = tempfile.mkdtemp(prefix="clgrid-vla-")
    with tarfile.open(VLA_ARCHIVE) as archive:
        archive.extractall(folder, filter="data")
    ms_path = next(Path(folder).glob("*.ms"))
    with table(str(ms_path), ack=False) as main:
        uvw = main.getcol("UVW")
        data = main.getcol("DATA")
        flags = main.getcol("FLAG")
    with table(str(ms_path / "SPECTRAL_WINDOW"), ack=False) as spw:
        freq = spw.getcol("CHAN_FREQ")[0]
    vis = 0.5 * (data[:, :, 0] + data[:, :, -1])
    vis[flags[:, :, 0] | flags[:, :, -1]] = 0
    max_uv = np.max(np.hypot(uvw[:, 0], uvw[:, 1])) * freq.max() / SPEED_OF_LIGHT
    npix = 256 if args.quick else 1024
    return {"name": "vla", "uvw": uvw, "freq": freq, "npix": npix,
            "cell": 1.0 / (3.0 * max_uv), "vis": vis.astype(np.complex128)}


def _visibilities(case) -> np.ndarray:
    if "vis" in case:
        return case["vis"]
    rng = np.random.default_rng(0)
    shape = (case["uvw"].shape[0], case["freq"].size)
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def run_case(case, queue, epsilon, do_w, repeats) -> dict:
    dtype = np.complex64 if epsilon >= 1e-5 else np.complex128
    real = np.float32 if dtype == np.complex64 else np.float64
    vis = _visibilities(case).astype(dtype)
    geometry = dict(npix_x=case["npix"], npix_y=case["npix"], pixsize_x=case["cell"],
                    pixsize_y=case["cell"])
    start = time.perf_counter()
    imager = Imager(queue, uvw=case["uvw"], freq=case["freq"], epsilon=epsilon,
                    do_wgridding=do_w, precision="single" if real == np.float32 else "double",
                    **geometry)
    setup_s = time.perf_counter() - start
    image = np.zeros((case["npix"], case["npix"]), real)
    image[case["npix"] // 3, case["npix"] // 2] = 1.0
    ours_v2d = median_seconds(lambda: imager.vis2dirty(vis), queue, repeats)
    ours_d2v = median_seconds(lambda: imager.dirty2vis(image), queue, repeats)
    row = {"case": case["name"], "npix": case["npix"], "nvis": vis.size, "epsilon": epsilon,
           "w": do_w, "W": imager.kernel_choice.support, "sigma": imager.kernel_choice.sigma,
           "planes": imager.n_planes, "setup s": round(setup_s, 3),
           "v2d s": round(ours_v2d, 4), "d2v s": round(ours_d2v, 4),
           "v2d Mvis/s": round(vis.size / ours_v2d / 1e6, 2)}
    if wgridder is None:
        row.update({"ducc v2d s": None, "ducc d2v s": None, "ratio v2d": None,
                    "ratio d2v": None})
        return row
    arguments = dict(uvw=case["uvw"], freq=case["freq"], epsilon=epsilon, do_wgridding=do_w,
                     nthreads=os.cpu_count(), pixsize_x=case["cell"], pixsize_y=case["cell"])
    ducc_v2d = _host_median(lambda: wgridder.vis2dirty(
        vis=vis, npix_x=case["npix"], npix_y=case["npix"], **arguments), repeats)
    ducc_d2v = _host_median(lambda: wgridder.dirty2vis(dirty=image, **arguments), repeats)
    ours = imager.vis2dirty(vis)
    theirs = wgridder.vis2dirty(vis=vis, npix_x=case["npix"], npix_y=case["npix"], **arguments)
    row.update({"ducc v2d s": round(ducc_v2d, 4), "ducc d2v s": round(ducc_d2v, 4),
                "ratio v2d": round(ours_v2d / ducc_v2d, 2),
                "ratio d2v": round(ours_d2v / ducc_d2v, 2),
                "rel diff": float(f"{np.linalg.norm(ours - theirs) / np.linalg.norm(theirs):.2e}")})
    return row


def _host_median(run, repeats) -> float:
    times = []
    run()
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main(argv=None) -> int:
    args = parse_args(argv)
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    profile = clgrid.DeviceProfile.from_device(queue.device)
    print(f"device: {profile.platform_key}: {profile.device_name}; ducc0 "
          f"{'with ' + str(os.cpu_count()) + ' threads' if wgridder else 'missing: peer columns empty'}")
    cases = [c for c in (ska_mid_case(args), vla_case(args)) if c is not None]
    rows = []
    for case in cases:
        for epsilon in args.epsilon:
            for do_w in ((False,) if args.no_w else (False, True)):
                rows.append(run_case(case, queue, epsilon, do_w, args.repeats))
                print_table(rows[-1:])
    print()
    print_table(rows)
    print("ratio = clgrid time / ducc0 time (below 1: clgrid faster)")
    write_json(args.json, "imaging", rows, device=profile.summary(),
               ducc0_threads=os.cpu_count() if wgridder else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

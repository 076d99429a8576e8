"""Benchmark: clgrid.vis2dirty / dirty2vis against ducc0.wgridder and cuFINUFFT.

Same epsilon, image size and visibilities in the same run; ducc0 with all
cores (nthreads = os.cpu_count()); cuFINUFFT (type 1 / type 2, no w) where
it imports.  Cases: a simulated SKA-mid observation (2016 baselines of the
SKA-mid + MeerKAT layout, 2 h of 8 s dumps, 64 channels: 116 M
visibilities, 4096^2) and, when python-casacore is installed, the bundled
VLA Measurement Set.  Columns (seconds, medians):

* ``plan``: Imager construction (kernel choice, set points with the device
  sort, buffers), once per geometry;
* ``v2d e2e`` / ``d2v e2e``: numpy arrays in, numpy arrays out (plan reused);
* ``v2d queue=`` / ``context=`` / ``no-device-arg`` (and ``d2v``): the
  functional ``clgrid.vis2dirty``/``dirty2vis`` as users call them, host to
  host, with each device argument, and their ratio to ``queue=``;
* ``v2d dev`` / ``d2v dev``: data already on the device, result left there;
* ``spread``, ``fft``: device time of those stages in one v2d pass;
* ``ducc0`` and ``cufi`` (host to host with the plan reused: points and data
  sent, setpts, execute, result back; ``cufi dev``: execute on device arrays
  with the points set); ``err``: relative rms difference to ducc0.

    python benchmarks/imaging.py --device intel --quick
    python benchmarks/imaging.py --device nvidia --epsilon 1e-4 1e-5 --json out.json
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
import pyopencl.array as cla

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402

import clgrid  # noqa: E402
from clgrid.core.plan import SPEED_OF_LIGHT  # noqa: E402
from clgrid.imaging.imager import Imager  # noqa: E402
from clgrid.io.simulate import simulate_observation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (median_seconds, print_table, switch_off_fp64, warm_up,  # noqa: E402
                     write_json)

try:
    from ducc0 import wgridder
except ImportError:  # the H200 machine has no ducc0 unless its wheel is carried
    wgridder = None
try:  # the GPU peer: ../shared/tools/cufinufft packs it for the H200
    import cufinufft
    import cupy
except ImportError:
    cufinufft = cupy = None

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
    parser.add_argument("--no-vla", action="store_true", help="skip the bundled VLA case")
    parser.add_argument("--no-fp64", action="store_true",
                        help="run as a device without fp64 would (DeviceProfile.fp64 "
                             "switched off): float-float positions and phases")
    parser.add_argument("--json", default=None, help="write results here")
    return parser.parse_args(argv)


def ska_mid_case(args) -> dict:
    """2 h of 8 s dumps, 64 channels at 1.4 GHz (quick: 0.25 h, 8 channels, 200 baselines)."""
    hours = args.hours or (0.25 if args.quick else 2.0)
    channels = args.channels or (8 if args.quick else 64)
    baselines = args.baselines or (200 if args.quick else 2016)
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


def _rel(a, b) -> float:
    return float(f"{np.linalg.norm(a - b) / np.linalg.norm(b):.2e}")


def _stage_times(imager, vis_d, queue, repeats) -> tuple[float, float]:
    """Device seconds of the spread and the FFT of the first v2d pass (of
    device-resident visibilities: the plan a resident call takes)."""
    engine = imager.engine
    plane0, n_pass = engine.image.passes()[0]
    spread = median_seconds(lambda: engine.image.grid_pass(vis_d, 1, 0, plane0, n_pass,
                                                           resident=True), queue, repeats)
    fft = median_seconds(lambda: engine.primary.fft.backward(engine.primary.planes_d), queue,
                         repeats)
    return spread, fft


def cufinufft_times(case, vis, image, epsilon, repeats) -> dict:
    """cuFINUFFT type 1 (v2d) and type 2 (d2v), host to host and on the device."""
    if cufinufft is None:
        return {}
    npix = case["npix"]
    scale = case["freq"][None, :] / SPEED_OF_LIGHT * 2 * np.pi * case["cell"]
    dtype = vis.dtype
    real = np.float32 if dtype == np.complex64 else np.float64

    x_host = (case["uvw"][:, 0:1] * scale).astype(real).ravel()
    y_host = (case["uvw"][:, 1:2] * scale).astype(real).ravel()
    plan1 = cufinufft.Plan(1, (npix, npix), eps=epsilon, isign=1, dtype=dtype.name)
    plan2 = cufinufft.Plan(2, (npix, npix), eps=epsilon, isign=-1, dtype=dtype.name)

    # host to host with the plans reused (as a pipeline would): the points
    # and data sent, setpts, execute, the result back
    def v2d_host():
        plan1.setpts(cupy.asarray(x_host), cupy.asarray(y_host))
        return plan1.execute(cupy.asarray(vis.ravel())).real.get()

    def d2v_host():
        plan2.setpts(cupy.asarray(x_host), cupy.asarray(y_host))
        return plan2.execute(cupy.asarray(image.astype(dtype))).get()

    def device_median(run):
        run()
        cupy.cuda.Device().synchronize()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            cupy.cuda.Device().synchronize()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    vis_c, image_c = cupy.asarray(vis.ravel()), cupy.asarray(image.astype(dtype))
    times = {"cufi v2d": round(device_median(v2d_host), 4),
             "cufi d2v": round(device_median(d2v_host), 4),
             # setpts last done by the host runs: the points are set
             "cufi v2d dev": round(device_median(lambda: plan1.execute(vis_c)), 4),
             "cufi d2v dev": round(device_median(lambda: plan2.execute(image_c)), 4),
             "_cufi_image": v2d_host()}
    # cupy's pool keeps freed blocks: give them back before the next case
    # (an H100 peaked at 79.9 of 80 GB with them kept beside the w case)
    del plan1, plan2, vis_c, image_c
    cupy.get_default_memory_pool().free_all_blocks()
    return times


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
    queue.finish()
    plan_s = time.perf_counter() - start
    image = np.zeros((case["npix"], case["npix"]), real)
    image[case["npix"] // 3, case["npix"] // 2] = 1.0
    vis_d = cla.to_device(queue, vis)
    image_d = cla.to_device(queue, image)
    row = {"case": case["name"], "npix": case["npix"], "nvis": vis.size, "epsilon": epsilon,
           "w": do_w, "W": imager.kernel_choice.support, "sigma": imager.kernel_choice.sigma,
           "planes": imager.n_planes, "passes": len(imager.engine.image.passes()),
           "plan": round(plan_s, 3),
           "v2d dev": round(median_seconds(lambda: imager.vis2dirty_device(vis_d), queue,
                                           repeats), 4),
           "d2v dev": round(median_seconds(lambda: imager.dirty2vis_device(image_d), queue,
                                           repeats), 4)}
    # end to end beside ducc0: their calls alternate, so a busy machine slows both alike
    peers = {}
    if wgridder is not None:
        arguments = dict(uvw=case["uvw"], freq=case["freq"], epsilon=epsilon,
                         do_wgridding=do_w, nthreads=os.cpu_count(), pixsize_x=case["cell"],
                         pixsize_y=case["cell"])
        peers = {"ducc0 v2d": lambda: wgridder.vis2dirty(
                     vis=vis, npix_x=case["npix"], npix_y=case["npix"], **arguments),
                 "ducc0 d2v": lambda: wgridder.dirty2vis(dirty=image, **arguments)}
    medians = interleaved_medians({"v2d e2e": lambda: imager.vis2dirty(vis),
                                   "d2v e2e": lambda: imager.dirty2vis(image),
                                   **user_calls(case, queue, epsilon, do_w, vis, image),
                                   **peers}, queue, repeats)
    row.update({key: round(value, 4) for key, value in medians.items()})
    for direction in ("v2d", "d2v"):
        for style in CALL_STYLES:
            row[f"{direction} {style} / queue"] = round(
                row[f"{direction} {style}"] / row[f"{direction} queue="], 2)
    order = ("v2d e2e", "v2d dev", "d2v e2e", "d2v dev")
    row = {**{k: v for k, v in row.items() if k not in order and not k.startswith("ducc0")},
           **{k: row[k] for k in order}, **{k: v for k, v in row.items() if k.startswith("ducc0")}}
    row.update(new_observation_times(case, epsilon, do_w, vis, image, repeats))
    spread, fft = _stage_times(imager, vis_d, queue, repeats)
    row.update({"spread": round(spread, 4), "fft": round(fft, 4)})
    ours = imager.vis2dirty(vis)
    row["bitwise"] = bool(np.array_equal(ours, imager.vis2dirty(vis)))
    vis_d = image_d = None   # free the device copies before cuFINUFFT runs
    if wgridder is not None:
        theirs = wgridder.vis2dirty(vis=vis, npix_x=case["npix"], npix_y=case["npix"],
                                    **arguments)
        row["err"] = _rel(ours, theirs)
        row["x ducc0 v2d"] = round(row["ducc0 v2d"] / row["v2d e2e"], 2)
        row["x ducc0 d2v"] = round(row["ducc0 d2v"] / row["d2v e2e"], 2)
    if not do_w:
        peer = cufinufft_times(case, vis, image, epsilon, repeats)
        cufi_image = peer.pop("_cufi_image", None)
        row.update(peer)
        if cufi_image is not None and wgridder is not None:
            row["cufi err"] = _rel(cufi_image, theirs)
    return row


#: The functional calls timed beside ``queue=`` (issue 35): as ducc0's swap
#: makes them, with no device argument (``CLGRID_DEVICE`` names the device),
#: and with ``context=``.
CALL_STYLES = ("no-device-arg", "context=")


def user_calls(case, queue, epsilon, do_w, vis, image) -> dict:
    """``clgrid.vis2dirty`` / ``dirty2vis`` as users call them, host arrays in
    and out, in each style: ``queue=``, ``context=`` and no device argument."""
    common = dict(uvw=case["uvw"], freq=case["freq"], epsilon=epsilon, do_wgridding=do_w,
                  pixsize_x=case["cell"], pixsize_y=case["cell"])
    styles = {"queue=": dict(queue=queue), "context=": dict(context=queue.context),
              "no-device-arg": {}}
    calls = {}
    for style, device in styles.items():
        calls[f"v2d {style}"] = lambda device=device: clgrid.vis2dirty(
            vis=vis, npix_x=case["npix"], npix_y=case["npix"], **device, **common)
        calls[f"d2v {style}"] = lambda device=device: clgrid.dirty2vis(
            dirty=image, **device, **common)
    return calls


def new_observation_times(case, epsilon, do_w, vis, image, repeats) -> dict:
    """Median seconds of ``clgrid.vis2dirty`` / ``dirty2vis`` with no device
    argument on an observation the process has not seen: the plan cache
    misses, so the plan and the first call's work lists are in the time (a
    pipeline imaging a new observation each call; the kernels are built by
    now).  Each repeat scales uvw by its own 1 + 1e-12: new bytes, the same
    geometry."""
    times = {"v2d new uvw": [], "d2v new uvw": []}
    for k in range(1, repeats + 1):
        for key, scale in (("v2d new uvw", 1.0 + k * 1e-12), ("d2v new uvw", 1.0 - k * 1e-12)):
            common = dict(uvw=case["uvw"] * scale, freq=case["freq"], epsilon=epsilon,
                          do_wgridding=do_w, pixsize_x=case["cell"], pixsize_y=case["cell"])
            start = time.perf_counter()
            if key.startswith("v2d"):
                clgrid.vis2dirty(vis=vis, npix_x=case["npix"], npix_y=case["npix"], **common)
            else:
                clgrid.dirty2vis(dirty=image, **common)
            times[key].append(time.perf_counter() - start)
    return {key: round(float(np.median(value)), 4) for key, value in times.items()}


def interleaved_medians(runs: dict, queue, repeats: int) -> dict:
    """Median seconds of each of ``runs`` (name -> call), timed in turns,
    each warmed up first and each turn after an untimed call of the same run
    (the previous run's threads may still hold the cores: ducc0's pool
    slowed the next 2 ms clgrid call by 1-2 ms on two cores)."""
    times = {name: [] for name in runs}
    for run in runs.values():
        warm_up(run, queue.finish)
    for _ in range(repeats):
        for name, run in runs.items():
            run()
            queue.finish()
            start = time.perf_counter()
            run()
            queue.finish()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) for name, values in times.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.no_fp64:
        switch_off_fp64()
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    profile = clgrid.DeviceProfile.from_device(queue.device)
    # the calls without a device argument go to the device benchmarked
    os.environ["CLGRID_DEVICE"] = f"{profile.platform_index}:{profile.device_index}"
    print(f"device: {profile.platform_key}: {profile.device_name}; ducc0 "
          f"{'with ' + str(os.cpu_count()) + ' threads' if wgridder else 'missing'}; "
          f"cuFINUFFT {'present' if cufinufft else 'missing'}")
    cases = [ska_mid_case(args)] + ([] if args.no_vla else [vla_case(args)])
    cases = [c for c in cases if c is not None]
    rows = []
    for case in cases:
        for epsilon in args.epsilon:
            for do_w in ((False,) if args.no_w else (False, True)):
                rows.append(run_case(case, queue, epsilon, do_w, args.repeats))
                print_table(rows[-1:])
    print()
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print_table([{k: row.get(k, "") for k in keys} for row in rows])
    print("x ducc0 = ducc0 time / clgrid end-to-end time (above 1: clgrid faster)")
    write_json(args.json, "imaging", rows, device=profile.summary(),
               ducc0_threads=os.cpu_count() if wgridder else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())

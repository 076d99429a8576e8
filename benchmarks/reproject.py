"""Reprojection throughput, SIN to SIN, complex images (memo 089 tables 1-2).

For each image size and mode: device time per call (prefilter + map +
interpolate, data already on the device, as the memo measured), end-to-end
``clgrid.reproject_interp`` time (with transfers), megapixels per second,
maximum error against the most accurate mode (complex128 data, float64
coordinates, buffer reads) and against ``reproject.reproject_interp`` (run on
the real and imaginary parts, timed in the same run) when it is installed.

    python benchmarks/reproject.py --device intel --quick
    python benchmarks/reproject.py --device nvidia --json results.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

# This file is named like the peer package: keep its folder off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402
import pyopencl as cl  # noqa: E402

import clgrid  # noqa: E402
from clgrid.reproject import Reprojector  # noqa: E402
from clgrid.wcs_params import CelestialPlane  # noqa: E402

# (label, order, sampling, coord_precision, fast_math)
MODES = [
    ("DP map, buffer", "bicubic", "buffer", "float64", False),
    ("DP map fast, buffer", "bicubic", "buffer", "float64", True),
    ("DP map, on-grid image", "bicubic", "image", "float64", False),
    ("DP map, linear image", "bicubic", "image-linear", "float64", False),
    ("SP map, buffer", "bicubic", "buffer", "float32", False),
    ("SP map, linear image", "bicubic", "image-linear", "float32", False),
    ("SP map fast, linear image", "bicubic", "image-linear", "float32", True),
    ("DP map, bilinear buffer", "bilinear", "buffer", "float64", False),
]


def planes(size: int) -> tuple[CelestialPlane, CelestialPlane]:
    """Two SIN planes 0.3 deg apart, rotated, 5% different pixel scales."""
    cell = 1.0 / size  # a 1-degree field
    plane_in = CelestialPlane("SIN", (150.0, -35.0), (size / 2 + 1, size / 2 + 1),
                              ((-cell, 0.0), (0.0, cell)))
    c, s = np.cos(np.deg2rad(15.0)), np.sin(np.deg2rad(15.0))
    cell_out = cell * 1.05
    plane_out = CelestialPlane("SIN", (150.2, -34.8), (size / 2 + 0.5, size / 2 + 1.5),
                               ((-cell_out * c, -cell_out * s), (-cell_out * s, cell_out * c)))
    return plane_in, plane_out


def to_astropy(plane: CelestialPlane):
    from astropy.wcs import WCS
    wcs = WCS(naxis=2)
    wcs.wcs.ctype = [f"RA---{plane.projection}", f"DEC--{plane.projection}"]
    wcs.wcs.crval, wcs.wcs.crpix = plane.crval_deg, plane.crpix
    wcs.wcs.cd = np.asarray(plane.cd_deg)
    wcs.wcs.set()
    return wcs


def time_device(operation: Reprojector, data: np.ndarray, plane_in, plane_out, repeats: int):
    """Median seconds of prefilter + fused reprojection, input on the device."""
    import pyopencl.array as cla
    params = operation.params_on_device(plane_out, plane_in)
    device_data = cla.to_device(operation.queue, data)
    out = cla.empty(operation.queue, data.shape, operation.dtype)
    times = []
    for _ in range(repeats + 1):  # the first call warms up
        operation.queue.finish()
        start = time.perf_counter()
        source = operation.prepare_input(device_data)
        operation.reproject_plane(source, params, data.shape, data.shape, out=out)
        operation.queue.finish()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:] or times)), out.get()


def max_error(result: np.ndarray, reference: np.ndarray) -> float:
    both = np.isfinite(result) & np.isfinite(reference)
    return float(np.abs(result[both] - reference[both]).max()) if both.any() else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="clgrid.create_context spec")
    parser.add_argument("--quick", action="store_true", help="1024 and 2048 only")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peer", action="store_true", help="skip reproject")
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args(argv)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else [1024, 2048] if args.quick else [1024, 2048, 4096, 8192])
    context = clgrid.create_context(args.device)  # kept: the queue does not hold it
    queue = cl.CommandQueue(context)
    profile = clgrid.DeviceProfile.from_device(queue.device)
    peer = None
    if not args.no_peer:
        try:
            import reproject as peer
        except ImportError:
            print("note: reproject/astropy not installed: peer columns skipped")
    modes = [m for m in MODES if m[2] == "buffer" or profile.image_support]
    modes = [m for m in modes if m[3] == "float32" or profile.fp64]
    rows = []
    print(f"device: {profile.device_name} ({profile.platform_key}), "
          f"{datetime.date.today().isoformat()}")
    header = (f"{'size':>5} {'mode':<28} {'device ms':>10} {'Mpix/s':>9} {'e2e ms':>9} "
              f"{'max err':>9} {'peer ms':>9} {'x peer':>7} {'err peer':>9}")
    print(header)
    for size in sizes:
        rng = np.random.default_rng(size)
        data = (rng.random((size, size)) + 1j * rng.random((size, size))).astype(np.complex64)
        plane_in, plane_out = planes(size)
        reference = None
        if profile.fp64:
            accurate = Reprojector(queue, np.complex128, order="bicubic")
            _, reference = time_device(accurate, data.astype(np.complex128), plane_in,
                                       plane_out, 0)
        peer_seconds, peer_result = {}, {}
        for label, order, sampling, coords, fast in modes:
            operation = Reprojector(queue, np.complex64, order=order, sampling=sampling,
                                    coord_precision=coords, fast_math=fast)
            seconds, result = time_device(operation, data, plane_in, plane_out, args.repeats)
            start = time.perf_counter()
            clgrid.reproject_interp((data, plane_in), plane_out, data.shape, order=order,
                                    sampling=sampling, coord_precision=coords,
                                    fast_math=fast, context=queue)
            end_to_end = time.perf_counter() - start
            if peer is not None and order not in peer_seconds:
                wcs_in, wcs_out = to_astropy(plane_in), to_astropy(plane_out)
                start = time.perf_counter()
                real = peer.reproject_interp((data.real, wcs_in), wcs_out, data.shape,
                                             order=order, return_footprint=False)
                imag = peer.reproject_interp((data.imag, wcs_in), wcs_out, data.shape,
                                             order=order, return_footprint=False)
                peer_seconds[order] = time.perf_counter() - start
                peer_result[order] = real + 1j * imag
            error = (max_error(result, reference) if reference is not None and order == "bicubic"
                     else float("nan"))
            row = {"size": size, "mode": label, "order": order, "sampling": sampling,
                   "coord_precision": coords, "fast_math": fast,
                   "device_seconds": seconds, "mpix_per_s": size * size / seconds / 1e6,
                   "end_to_end_seconds": end_to_end, "max_error_vs_dp": error}
            if order in peer_seconds:
                row.update(peer_seconds=peer_seconds[order],
                           speedup_vs_peer=peer_seconds[order] / end_to_end,
                           max_error_vs_peer=max_error(result, peer_result[order]))
            rows.append(row)
            print(f"{size:>5} {label:<28} {seconds * 1e3:>10.2f} {row['mpix_per_s']:>9.1f} "
                  f"{end_to_end * 1e3:>9.1f} {error:>9.2e} "
                  f"{row.get('peer_seconds', float('nan')) * 1e3:>9.1f} "
                  f"{row.get('speedup_vs_peer', float('nan')):>7.2f} "
                  f"{row.get('max_error_vs_peer', float('nan')):>9.2e}")
    print("x peer: reproject time / clgrid end-to-end time (reproject on real and imaginary "
          "parts); max err: against complex128 data with float64 map; data uniform [0,1)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "device": profile.summary(), "python": platform.python_version(),
                       "command": " ".join(sys.argv), "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

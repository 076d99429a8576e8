"""Reprojection throughput: float32 images, TAN -> rotated, shifted SIN,
bicubic (and bilinear), beside reproject on the same machine.

For each size:

- *device*: ``Reprojector.prepare_input`` + ``reproject_plane`` with the
  image already on the device (conversion, prefilter, map with round-trip
  check, interpolation), median of repeats;
- *e2e out=*: ``clgrid.reproject_interp`` from a host float32 array into a
  caller's ``output_array`` (``return_footprint=False``): host to host;
- *e2e default*: ``clgrid.reproject_interp`` as reproject is usually
  called (new output array and footprint returned);
- *peer*: ``reproject.reproject_interp`` (same order, footprint off); where
  reproject is not installed, its algorithm (astropy ``pixel_to_pixel`` +
  ``scipy.ndimage.map_coordinates``, reproject 0.21's ``_reproject_full``),
  labelled so;
- *err*: largest |clgrid - peer| / max |peer| and the count of pixels blank in one only.

    python benchmarks/reproject.py --device intel --quick
    python benchmarks/reproject.py --device nvidia --sizes 4096,8192 --json results.json
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
import pyopencl.array as cla  # noqa: E402

import clgrid  # noqa: E402
from clgrid.core.tuning.timing import median_seconds  # noqa: E402
from clgrid.reproject import Reprojector  # noqa: E402
from clgrid.reproject.plan import plan  # noqa: E402

ORDERS = ("bicubic", "bilinear")


def wcs_pair(size: int):
    """TAN input, SIN output 0.2 deg away, rotated 15 deg, 5% coarser pixels."""
    from astropy.wcs import WCS
    cell = 1.0 / size  # a 1-degree field
    wcs_in = WCS(naxis=2)
    wcs_in.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    wcs_in.wcs.crval, wcs_in.wcs.crpix = [150.0, -35.0], [size / 2 + 1, size / 2 + 1]
    wcs_in.wcs.cd = [[-cell, 0.0], [0.0, cell]]
    c, s = np.cos(np.deg2rad(15.0)), np.sin(np.deg2rad(15.0))
    cell_out = cell * 1.05
    wcs_out = WCS(naxis=2)
    wcs_out.wcs.ctype = ["RA---SIN", "DEC--SIN"]
    wcs_out.wcs.crval, wcs_out.wcs.crpix = [150.2, -34.8], [size / 2 + 0.5, size / 2 + 1.5]
    wcs_out.wcs.cd = [[-cell_out * c, -cell_out * s], [-cell_out * s, cell_out * c]]
    wcs_in.wcs.set()
    wcs_out.wcs.set()
    return wcs_in, wcs_out


def smooth_image(size: int, rng) -> np.ndarray:
    """Sky-like float32 image: smooth structure plus noise."""
    y, x = np.mgrid[0:size, 0:size] / size
    image = np.sin(7 * x) * np.cos(5 * y) + 0.1 * rng.standard_normal((size, size))
    return image.astype(np.float32)


def median_time(function, repeats: int) -> float:
    """Median seconds of ``repeats`` calls (each blocks on its result), after warm-up."""
    return median_seconds(function, None, repeats)


def time_device(queue, data, wcs_in, wcs_out, order, repeats):
    """Median seconds of the device work with the image on the device."""
    job = plan(data, wcs_in, wcs_out, data.shape, True, 3)
    operation = Reprojector(queue, np.float32, order=order, projections=job.projections)
    params = operation.params_on_device(*job.device_map)
    device_data = cla.to_device(queue, data)
    out = cla.empty(queue, data.shape, np.float32)

    def run():
        prepared = operation.prepare_input(device_data)
        operation.reproject_plane(prepared, params, data.shape, out=out, roundtrip=True)
        queue.finish()

    return median_time(run, repeats)


def run_peer(data, wcs_in, wcs_out, order):
    """(seconds, result, label) of reproject, or of its algorithm."""
    try:
        import reproject
        start = time.perf_counter()
        result = reproject.reproject_interp((data, wcs_in), wcs_out, data.shape, order=order,
                                            return_footprint=False)
        return time.perf_counter() - start, result, f"reproject {reproject.__version__}"
    except ImportError:
        from astropy.wcs.utils import pixel_to_pixel
        from scipy.ndimage import map_coordinates
        start = time.perf_counter()
        y, x = np.indices(data.shape, dtype=float)
        x_in, y_in = pixel_to_pixel(wcs_out, wcs_in, x, y)
        x_back, y_back = pixel_to_pixel(wcs_in, wcs_out, x_in, y_in)
        reset = (np.abs(x_back - x) > 1) | (np.abs(y_back - y) > 1)
        coords = np.array([np.where(reset, np.nan, y_in), np.where(reset, np.nan, x_in)])
        for axis, n in enumerate(data.shape):
            coords[axis][(coords[axis] < 0) & (coords[axis] >= -0.5)] = 0
            coords[axis][(coords[axis] < n - 0.5) & (coords[axis] >= n - 1)] = n - 1
        spline = {"bicubic": 3, "bilinear": 1}[order]
        result = map_coordinates(data, coords.reshape(2, -1), order=spline, cval=np.nan,
                                 mode="constant", output=np.float64).reshape(data.shape)
        for axis, n in enumerate(data.shape):
            result[(coords[axis] < -0.5) | (coords[axis] > n - 0.5)] = np.nan
        return (time.perf_counter() - start, result,
                "reproject's algorithm (astropy + scipy; reproject not installed)")


def _transfers(queue, data) -> dict:
    """Seconds of the pinned, overlapped upload and download of ``data`` alone."""
    from clgrid.device.hostio import PinnedStaging
    staging = PinnedStaging(queue.context, queue)
    device = cla.empty(queue, data.shape, data.dtype)
    back = np.empty_like(data)

    def upload():
        staging.upload(data, device.data)
        queue.finish()

    return {"upload_seconds": median_time(upload, 3),
            "download_seconds": median_time(lambda: staging.download(device.data, back), 3)}


def compare(ours, theirs) -> tuple[float, int]:
    both = np.isfinite(ours) & np.isfinite(theirs)
    error = float(np.abs(ours[both] - theirs[both]).max() / np.abs(theirs[both]).max())
    return error, int((np.isnan(ours) != np.isnan(theirs)).sum())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="clgrid.create_context spec")
    parser.add_argument("--quick", action="store_true", help="1024 and 2048 only")
    parser.add_argument("--sizes", default=None, help="comma-separated sizes")
    parser.add_argument("--peer-sizes", default=None,
                        help="sizes at which to run the peer (default: all)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args(argv)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else [1024, 2048] if args.quick else [4096, 8192])
    peer_sizes = set(sizes if args.peer_sizes is None
                     else [int(s) for s in args.peer_sizes.split(",") if s])
    context = clgrid.create_context(args.device)  # kept: the queue does not hold it
    queue = cl.CommandQueue(context)
    profile = clgrid.DeviceProfile.from_device(queue.device)
    print(f"device: {profile.device_name} ({profile.platform_key}), "
          f"{datetime.date.today().isoformat()}")
    print(f"{'size':>5} {'order':<9} {'device ms':>9} {'Gpix/s':>7} {'e2e out= ms':>11} "
          f"{'Gpix/s':>7} {'e2e dflt ms':>11} {'Gpix/s':>7} {'peer ms':>9} {'x peer':>7} "
          f"{'err':>8} {'blank!=':>7}")
    rows = []
    for size in sizes:
        rng = np.random.default_rng(size)
        data = smooth_image(size, rng)
        wcs_in, wcs_out = wcs_pair(size)
        pixels = size * size
        for order in ORDERS:
            device = time_device(queue, data, wcs_in, wcs_out, order, args.repeats)
            out = np.empty_like(data)
            into = median_time(lambda: clgrid.reproject_interp(
                (data, wcs_in), wcs_out, data.shape, order=order, output_array=out,
                return_footprint=False, context=queue), args.repeats)
            default = median_time(lambda: clgrid.reproject_interp(
                (data, wcs_in), wcs_out, data.shape, order=order, context=queue),
                max(1, args.repeats // 2))
            row = {"size": size, "order": order, "device_seconds": device,
                   "device_gpix_per_s": pixels / device / 1e9,
                   "e2e_output_array_seconds": into, "e2e_output_array_gpix_per_s":
                   pixels / into / 1e9, "e2e_default_seconds": default,
                   "e2e_default_gpix_per_s": pixels / default / 1e9}
            if order == "bicubic":
                row.update(_transfers(queue, data))
            if size in peer_sizes:
                seconds, theirs, label = run_peer(data, wcs_in, wcs_out, order)
                error, blank_mismatch = compare(out, theirs)
                row.update(peer=label, peer_seconds=seconds, speedup_e2e=seconds / into,
                           max_rel_error=error, blank_mismatch=blank_mismatch)
            rows.append(row)
            print(f"{size:>5} {order:<9} {device * 1e3:>9.2f} {row['device_gpix_per_s']:>7.2f} "
                  f"{into * 1e3:>11.1f} {row['e2e_output_array_gpix_per_s']:>7.2f} "
                  f"{default * 1e3:>11.1f} {row['e2e_default_gpix_per_s']:>7.2f} "
                  f"{row.get('peer_seconds', float('nan')) * 1e3:>9.0f} "
                  f"{row.get('speedup_e2e', float('nan')):>7.0f} "
                  f"{row.get('max_rel_error', float('nan')):>8.1e} "
                  f"{row.get('blank_mismatch', -1):>7}", flush=True)
    peers = {r["peer"] for r in rows if "peer" in r}
    print(f"peer: {', '.join(sorted(peers)) or 'not run'}; x peer = peer / e2e out=; "
          "err relative to max |peer|; blank!= pixels blank in one result only")
    for row in rows:
        if "upload_seconds" in row:
            print(f"{row['size']}: pinned overlapped upload {row['upload_seconds'] * 1e3:.1f} ms, "
                  f"download {row['download_seconds'] * 1e3:.1f} ms "
                  f"({row['size'] ** 2 * 4 / 1e9:.2f} GB each way)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "device": profile.summary(), "python": platform.python_version(),
                       "command": " ".join(sys.argv), "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""In-place 2-D complex FFT per backend per device, device-resident.

Times :class:`clgrid.core.fft.DeviceFFT` forward transforms (median of
repeats, queue drained around each, plan made once beforehand) of every
available backend at 1024², 2048², 4096² (and 8192² with ``--large``),
complex64 and complex128, beside the peer on host arrays (ducc0.fft on all
cores, in place), and checks each result against ``numpy.fft.fft2``.
Run ``python benchmarks/fft.py [--device SPEC] [--large] [--json F]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyopencl.array as cla

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import clgrid  # noqa: E402
from clgrid.core import fft as core_fft  # noqa: E402
from clgrid.device import DeviceProfile, all_devices, select_device  # noqa: E402
from _common import median_seconds, print_table, write_json  # noqa: E402

try:
    import ducc0.fft as ducc_fft
except ImportError:  # pragma: no cover - depends on the environment
    ducc_fft = None


def test_data(n: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(n)
    real = rng.standard_normal((n, n), dtype=np.float32)
    return (real + 1j * real[::-1]).astype(dtype)


def accuracy(data: np.ndarray, result: np.ndarray) -> float:
    """Max error relative to the largest coefficient, against numpy in float64."""
    expected = np.fft.fft2(data.astype(np.complex128))
    return float(np.abs(result - expected).max() / np.abs(expected).max())


def measure_backend(queue, backend: str, data: np.ndarray, repeats: int) -> dict:
    start = time.perf_counter()
    transform = core_fft.DeviceFFT(queue, data.shape, data.dtype, backend)
    array = cla.to_device(queue, data)
    transform.forward(array)
    queue.finish()
    plan_s = time.perf_counter() - start
    error = accuracy(data, array.get())
    seconds = median_seconds(lambda: transform.forward(array), queue, repeats=repeats)
    return {"backend": backend, "plan+first s": round(plan_s, 3), "ms": round(seconds * 1e3, 2),
            "rel err": float(f"{error:.2g}")}


def measure_peer(data: np.ndarray, repeats: int) -> dict | None:
    """ducc0.fft in place on a host array, all cores of this process."""
    if ducc_fft is None:
        return None
    threads = len(os.sched_getaffinity(0))
    array = data.copy()
    seconds = median_seconds(lambda: ducc_fft.c2c(array, axes=(0, 1), forward=True, out=array,
                                                  nthreads=threads), None, repeats)
    error = accuracy(data, ducc_fft.c2c(data, forward=True, nthreads=threads))
    return {"backend": f"peer: ducc0 host array ({threads} threads)", "plan+first s": "",
            "ms": round(seconds * 1e3, 2), "rel err": float(f"{error:.2g}")}


def benchmark_device(device, sizes: list[int], backends: list[str], repeats: int,
                     with_peer: bool) -> list[dict]:
    profile = DeviceProfile.from_device(device)
    queue = clgrid.resolve_queue(clgrid.create_context(device))
    label = f"{profile.platform_key}: {profile.device_name}"
    rows = []
    for dtype in (np.complex64, np.complex128):
        if dtype == np.complex128 and not profile.fp64:
            continue
        for n in sizes:
            data = test_data(n, dtype)
            results = []
            for backend in backends:
                try:
                    results.append(measure_backend(queue, backend, data, repeats))
                except Exception as error:  # noqa: BLE001 - report and go on
                    results.append({"backend": backend, "plan+first s": "", "ms": "",
                                    "rel err": f"failed: {type(error).__name__}: {error}"[:80]})
            peer = measure_peer(data, repeats) if with_peer else None
            results += [peer] if peer else []
            for result in results:
                rows.append({"device": label, "dtype": np.dtype(dtype).name, "n": f"{n}^2",
                             **result})
            print_table(rows[-len(results):])
            sys.stdout.flush()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None, help="device spec (default: every usable "
                        "non-simulator device)")
    parser.add_argument("--sizes", default="1024,2048,4096", help="comma-separated n of n x n")
    parser.add_argument("--large", action="store_true", help="add 8192^2")
    parser.add_argument("--backends", default=",".join(core_fft.available_backends()),
                        help="comma-separated subset of " + ",".join(core_fft.BACKENDS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true", help="skip the ducc0 host-array row")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    sizes = [int(part) for part in args.sizes.split(",")] + ([8192] if args.large else [])
    backends = [part.strip() for part in args.backends.split(",") if part.strip()]
    if args.device:
        devices = [select_device(args.device)]
    else:
        devices = [d for d in all_devices()
                   if DeviceProfile.from_device(d).usable
                   and not DeviceProfile.from_device(d).is_simulator]
    rows = []
    for device in devices:
        print(f"# {device.platform.name}: {device.name}; default order "
              f"{core_fft.backend_order(device)}")
        rows += benchmark_device(device, sizes, backends, args.repeats, not args.no_peer)
    print("\nall devices:")
    print_table(rows)
    write_json(args.json, "fft", rows, sizes=sizes, backends=backends, repeats=args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())

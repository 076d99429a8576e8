"""Where multi-GPU vis2dirty loses its scaling: each shard of a two-device
MultiDeviceImager timed alone and both at once, from host arrays (pinned
staging included) and from device-resident visibilities.  SKA-mid case of
benchmarks/scaling.py (116 M visibilities, 4096^2, epsilon 1e-5), w and no w.

    python3 benchmarks/scaling_shards.py      # two GPUs (nvidia-h200-x2)
    python benchmarks/scaling_shards.py --quick   # small case; a CPU split in two
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl.array as cla  # noqa: E402

from benchmarks.scaling import imaging_observation  # noqa: E402
from clgrid.gridders.checks import SPEED_OF_LIGHT_M_S  # noqa: E402
from clgrid.scaleout.multidevice import MultiDeviceImager, _take  # noqa: E402
from clgrid.scaleout.partition import all_gpus_or_best, cpu_sub_devices  # noqa: E402


def best_ms(run, repeats: int = 3) -> float:
    """Best wall time of ``run()`` in ms, after one untimed call."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small case (CPU, CI)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    uvw, freq, _ = imaging_observation(args.quick)
    npix = 512 if args.quick else 4096
    cell = 1.0 / (3.0 * np.hypot(uvw[:, 0], uvw[:, 1]).max() * freq.max() / SPEED_OF_LIGHT_M_S)
    vis = (np.random.default_rng(1).standard_normal((uvw.shape[0], freq.size)) * (1 + 1j)
           ).astype(np.complex64)
    devices = all_gpus_or_best()[:2]
    if len(devices) < 2:
        devices = cpu_sub_devices(2)
    for do_w in (True, False):
        imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, npix_x=npix, npix_y=npix,
                                   pixsize_x=cell, pixsize_y=cell, epsilon=1e-5,
                                   do_wgridding=do_w)
        shards = imager.shards
        pieces = [_take(vis, rows) for rows in imager.shard_rows]
        on_device = [cla.to_device(s.queue, p) for s, p in zip(shards, pieces)]

        def from_host(d):
            shards[d].vis2dirty(pieces[d])

        def device_resident(d):
            shards[d].vis2dirty_device(on_device[d])
            shards[d].queue.finish()

        for name, call in (("host", from_host), ("device", device_resident)):
            alone = [best_ms(lambda d=d: call(d)) for d in range(len(shards))]
            both = best_ms(lambda: imager._map(call))
            print(f"w={do_w} {name}: " + ", ".join(
                f"shard{d} alone {t:.1f} ms" for d, t in enumerate(alone))
                + f", all at once {both:.1f} ms", flush=True)
        imager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where multi-GPU vis2dirty loses its scaling: each shard of a multi-device
MultiDeviceImager timed alone and both at once, from host arrays (pinned
staging included) and from device-resident visibilities.  SKA-mid case of
benchmarks/scaling.py (116 M visibilities, 4096^2, epsilon 1e-5), w and no w.

    python3 benchmarks/scaling_shards.py      # two GPUs (nvidia-h200-x2); --count 4: four
    python benchmarks/scaling_shards.py --quick   # small case; a CPU split in two

``--transfers`` first times the host side alone: each device's half of the
visibilities copied into its pinned staging memory (host threads only), sent
from there (the DMA only), and both (PinnedStaging.upload), for each device
alone and for all at once; ``--trace`` prints, for one call from host arrays,
when each shard's row blocks were in pinned memory and its FFT, correction,
checks and download ran (ms from the call's start: ``Imager.trace``,
:class:`clgrid.core.trace.StageTrace`);
``--dirty2vis`` times dirty2vis's parts per shard, alone and all at once: the
device work (``dirty2vis_device``), the download of its visibilities into the
shared output, both, and the whole ``MultiDeviceImager.dirty2vis``.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402
import pyopencl.array as cla  # noqa: E402

from benchmarks._common import timed_calls  # noqa: E402
from benchmarks.scaling import imaging_case  # noqa: E402
from clgrid.scaleout.multidevice import MultiDeviceImager, _take  # noqa: E402
from clgrid.core.trace import StageTrace  # noqa: E402
from clgrid.device.hostio import PinnedStaging, copy_pool  # noqa: E402
from clgrid.scaleout.partition import all_gpus_or_best, cpu_sub_devices  # noqa: E402


def best_ms(run, repeats: int = 3) -> float:
    """Best wall time of ``run()`` in ms, after warm-up."""
    return min(timed_calls(run, None, repeats)) * 1e3


def transfers(imager: MultiDeviceImager, pieces: list[np.ndarray]) -> None:
    """Host copy into pinned memory, DMA from it, and both, per device alone
    and all at once (best of 3, ms)."""
    shards = imager.shards
    stagings = [PinnedStaging(s.queue.context, s.queue) for s in shards]
    targets = [cl.Buffer(s.queue.context, cl.mem_flags.READ_WRITE, p.nbytes)
               for s, p in zip(shards, pieces)]
    for staging, piece in zip(stagings, pieces):   # allocate and map once
        staging._up.view(piece.nbytes)

    def host_copy(d):
        pinned = stagings[d]._up.view(pieces[d].nbytes).view(pieces[d].dtype)
        rows = pieces[d].reshape(pieces[d].shape[0], -1)
        step = max(1, (8 << 20) // rows[:1].nbytes)
        chunks = range(0, rows.shape[0], step)
        list(copy_pool().map(lambda a: np.copyto(
            pinned.reshape(rows.shape)[a:a + step], rows[a:a + step]), chunks))

    def dma(d):
        pinned = stagings[d]._up.view(pieces[d].nbytes)
        cl.enqueue_copy(shards[d].queue, targets[d], pinned, is_blocking=True)

    def both(d):
        stagings[d].upload(pieces[d], targets[d])
        shards[d].queue.finish()

    gigabytes = [p.nbytes / 1e9 for p in pieces]
    for name, call in (("host copy to pinned", host_copy), ("DMA from pinned", dma),
                       ("pinned upload (both)", both)):
        alone = [best_ms(lambda d=d: call(d)) for d in range(len(shards))]
        together = best_ms(lambda: imager._map(call))
        print(f"{name}: " + ", ".join(f"dev{d} alone {t:.1f} ms ({gigabytes[d] / t * 1e3:.0f} "
                                      f"GB/s)" for d, t in enumerate(alone))
              + f", all at once {together:.1f} ms ({sum(gigabytes) / together * 1e3:.0f} GB/s)",
              flush=True)


def trace(imager: MultiDeviceImager, vis: np.ndarray) -> None:
    """When each shard's row blocks were in pinned memory and its later
    steps ran during one call (ms from the call's start; each shard's
    :attr:`clgrid.imaging.imager.Imager.trace`), and the longest stalls of a
    thread that only sleeps 1 ms at a time (a stall there means some thread
    held the GIL)."""
    traces = [StageTrace() for _ in imager.shards]
    for shard, shard_trace in zip(imager.shards, traces):
        shard.trace = shard_trace
    stalls: list[tuple[float, float]] = []
    running = [True]
    started = time.perf_counter()

    def watch():
        last = time.perf_counter()
        while running[0]:
            time.sleep(0.001)
            now = time.perf_counter()
            if now - last > 0.004:
                stalls.append((1e3 * (last - started), 1e3 * (now - last)))
            last = now
    watcher = threading.Thread(target=watch, daemon=True)
    for shard_trace in traces:
        shard_trace.restart()
    started = time.perf_counter()
    watcher.start()
    imager.vis2dirty(vis)
    total = 1e3 * (time.perf_counter() - started)
    running[0] = False
    watcher.join()
    for shard in imager.shards:
        shard.trace = None
    for d, shard_trace in enumerate(traces):
        print(f"  shard{d} (ms): " + ", ".join(shard_trace.lines()), flush=True)
    print("  stalls of a 1 ms sleeper (start ms, length ms): " + ", ".join(
        f"{a:.1f}+{b:.1f}" for a, b in stalls[:20]), flush=True)
    print(f"  call {total:.1f} ms", flush=True)


def dirty2vis_parts(imager: MultiDeviceImager, npix: int) -> None:
    """dirty2vis per shard, alone and all at once (best of 3, ms): device
    work, download into the output, both; then the whole call."""
    shards = imager.shards
    dirty = np.random.default_rng(2).standard_normal((npix, npix)).astype(np.float32)
    out = np.empty((imager.n_rows, len(imager.freq_hz), 1), shards[0].vis_complex)
    blocks = [out[rows[0]:rows[-1] + 1] for rows in imager.shard_rows]
    predicted = [s.dirty2vis_device(dirty) for s in shards]
    for s in shards:
        s.queue.finish()
        s.release_planes()

    def device(d):
        shards[d].dirty2vis_device(dirty)
        shards[d].queue.finish()
        shards[d].release_planes()

    def download(d):
        shards[d].uploader.to_host(predicted[d], out=blocks[d])

    def both(d):
        shards[d].uploader.to_host(shards[d].dirty2vis_device(dirty), out=blocks[d])
        shards[d].release_planes()

    for name, call in (("device", device), ("download", download), ("both", both)):
        alone = [best_ms(lambda d=d: call(d)) for d in range(len(shards))]
        together = best_ms(lambda: imager._map(call))
        print(f"w={imager.do_w} dirty2vis {name}: " + ", ".join(
            f"shard{d} alone {t:.1f} ms" for d, t in enumerate(alone))
            + f", all at once {together:.1f} ms", flush=True)
    default = imager.overlap_downloads
    for overlap in (default, not default, default, not default):
        imager.overlap_downloads = overlap
        print(f"w={imager.do_w} MultiDeviceImager.dirty2vis, overlap_downloads={overlap}: "
              f"{best_ms(lambda: imager.dirty2vis(dirty)):.1f} ms", flush=True)
    imager.overlap_downloads = default


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small case (CPU, CI)")
    parser.add_argument("--transfers", action="store_true",
                        help="time the host copies and DMA alone first")
    parser.add_argument("--trace", action="store_true",
                        help="print each shard's block upload times for one call")
    parser.add_argument("--w-only", action="store_true", help="only the w-stacking case")
    parser.add_argument("--no-w-only", action="store_true", help="only the case without w")
    parser.add_argument("--count", type=int, default=2, help="devices (GPUs, or CPU parts)")
    parser.add_argument("--reduce", default="auto", help="the imager's reduction")
    parser.add_argument("--pinned", action="store_true",
                        help="also time the call with the visibilities in pinned memory")
    parser.add_argument("--partition", default=None,
                        help="the imager's partition (default: the devices' own)")
    parser.add_argument("--dirty2vis", action="store_true",
                        help="time dirty2vis's parts per shard instead of vis2dirty")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    uvw, freq, npix, cell, vis = imaging_case(args.quick)
    devices = all_gpus_or_best()[:args.count]
    if len(devices) < args.count:
        devices = cpu_sub_devices(args.count)
    cases = (True,) if args.w_only else (False,) if args.no_w_only else (True, False)
    for do_w in cases:
        imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, npix_x=npix, npix_y=npix,
                                   pixsize_x=cell, pixsize_y=cell, epsilon=1e-5,
                                   do_wgridding=do_w, reduce=args.reduce,
                                   partition=args.partition if do_w else None)
        print(f"w={do_w}: partition {imager.partition}, reduce {imager.reduce} (model "
              f"{imager.reduction_seconds}), rows per shard "
              f"{[rows.size for rows in imager.shard_rows]}", flush=True)
        shards = imager.shards
        pieces = [_take(vis, rows) for rows in imager.shard_rows]
        if args.transfers and (do_w or args.no_w_only):
            transfers(imager, pieces)
        if args.dirty2vis:
            dirty2vis_parts(imager, npix)
            imager.close()
            continue
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
        print(f"w={do_w} MultiDeviceImager.vis2dirty, numpy visibilities "
              f"{best_ms(lambda: imager.vis2dirty(vis)):.1f} ms", flush=True)
        if args.pinned:
            # the visibilities already in pinned memory (as Imager.uploader.empty_host
            # hands out): every shard's blocks go up in one DMA each, no staging copy
            pinned = shards[0].uploader.empty_host(vis.shape, vis.dtype)
            pinned[...] = vis
            print(f"w={do_w} MultiDeviceImager.vis2dirty, pinned visibilities "
                  f"{best_ms(lambda: imager.vis2dirty(pinned)):.1f} ms", flush=True)
            del pinned
        if args.trace:
            imager.vis2dirty(vis)
            print(f"w={do_w} one call, traced:", flush=True)
            trace(imager, vis)
        imager.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

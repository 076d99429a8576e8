"""Where a row block's upload from pageable numpy spends its time (issues 40,
41): clgrid's pinned staging (``PinnedStaging.upload_rows``: the copy threads
fill pinned memory in chunks; each chunk's DMA is enqueued and the queue
flushed as its copy finishes) against its parts, per block size:

* ``copies``: the copy threads alone (np.copyto into the pinned memory);
* ``upload_rows``: until it returns (rows in pinned memory), and until the
  last DMA is done;
* ``one flush``: the same copies, every chunk's DMA enqueued as it finishes
  but the queue flushed once at the end;
* ``enqueue+flush``: one 1 MiB DMA enqueued and flushed, alone (per call).

    python3 benchmarks/upload_rows_probe.py --device nvidia --mbytes 16 128

Prints ms per block (best of ``--repeats``) and GB/s.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyopencl as cl  # noqa: E402

import clgrid  # noqa: E402
from clgrid.device.hostio import PinnedStaging, _row_chunks, copy_pool  # noqa: E402

ROW_BYTES = 64 * 8   # a row of 64 complex64 channels, as the SKA-mid case


def best_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times[1:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--mbytes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    context = clgrid.create_context(args.device)
    queue = cl.CommandQueue(context)
    largest = max(args.mbytes) << 20
    source = np.random.default_rng(0).standard_normal(largest // 4).astype(np.float32)
    rows = source.view(np.uint8).reshape(-1, ROW_BYTES)
    target = cl.Buffer(context, cl.mem_flags.READ_WRITE, largest)
    staging = PinnedStaging(context, queue)
    pinned = staging._up.view(largest)
    print(f"device {queue.device.name.strip()}; copy threads {copy_pool()._max_workers}")

    small_pinned = pinned[:1 << 20]

    def enqueue_flush():
        for _ in range(16):
            cl.enqueue_copy(queue, target, small_pinned, is_blocking=False)
            queue.flush()
        queue.finish()
    print(f"16 x (1 MiB enqueue + flush), then finish: {best_ms(enqueue_flush, args.repeats):.2f} ms")

    for mbytes in args.mbytes:
        n_rows = (mbytes << 20) // ROW_BYTES
        block = rows[:n_rows]
        chunks = _row_chunks(0, n_rows, ROW_BYTES)

        def copies():
            list(copy_pool().map(lambda c: np.copyto(
                pinned[c[0] * ROW_BYTES:c[1] * ROW_BYTES].reshape(c[1] - c[0], ROW_BYTES),
                block[c[0]:c[1]]), chunks))

        returned = []

        def upload():
            start = time.perf_counter()
            event = staging.upload_rows(block, target, 0, n_rows)
            returned.append(time.perf_counter() - start)
            event.wait()

        def one_flush():
            events = []
            for (a, b), _ in zip(chunks, copy_pool().map(lambda c: np.copyto(
                    pinned[c[0] * ROW_BYTES:c[1] * ROW_BYTES].reshape(c[1] - c[0], ROW_BYTES),
                    block[c[0]:c[1]]), chunks)):
                events.append(cl.enqueue_copy(queue, target, pinned[a * ROW_BYTES:b * ROW_BYTES],
                                              dst_offset=a * ROW_BYTES, is_blocking=False))
            queue.flush()
            events[-1].wait()

        def dma_only():
            cl.enqueue_copy(queue, target, pinned[:n_rows * ROW_BYTES], is_blocking=True)

        results = {"copies": best_ms(copies, args.repeats),
                   "upload_rows (done)": best_ms(upload, args.repeats),
                   "one flush (done)": best_ms(one_flush, args.repeats),
                   "one DMA alone": best_ms(dma_only, args.repeats)}
        results["upload_rows (returned)"] = 1e3 * min(returned[1:])
        print(f"{mbytes} MiB in {len(chunks)} chunks: " + ", ".join(
            f"{name} {ms:.2f} ms ({mbytes * 1.048576 / ms:.0f} GB/s)"
            for name, ms in results.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

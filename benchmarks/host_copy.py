"""Host copy rates of the kind clgrid's pinned staging makes: a pageable
numpy array copied into another buffer in chunks on threads (np.copyto, as
clgrid.device.hostio does), for several chunk sizes and thread counts.
Run it twice, with and without ``GLIBC_TUNABLES=glibc.cpu.x86_non_temporal_threshold=...``,
to see whether glibc's non-temporal (streaming) stores pay on this host:
below that threshold memcpy writes through the cache (each destination line
is read first), above it streams.

    python3 benchmarks/host_copy.py --mbytes 1024 --threads 1 8 16
"""
from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbytes", type=int, default=1024)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--chunks-mib", type=int, nargs="+", default=[1, 4, 8, 32])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.mbytes << 20
    source = np.ones(n, np.uint8)
    target = np.zeros(n, np.uint8)
    print(f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}, {os.cpu_count()} cores")
    for threads in args.threads:
        with ThreadPoolExecutor(threads) as pool:
            for chunk_mib in args.chunks_mib:
                chunk = chunk_mib << 20
                starts = range(0, n, chunk)
                best = 1e9
                for _ in range(args.repeats):
                    started = time.perf_counter()
                    list(pool.map(lambda a: np.copyto(target[a:a + chunk], source[a:a + chunk]),
                                  starts))
                    best = min(best, time.perf_counter() - started)
                print(f"threads {threads:3d}, chunks {chunk_mib:3d} MiB: {n / best / 1e9:6.1f} GB/s",
                      flush=True)


if __name__ == "__main__":
    main()

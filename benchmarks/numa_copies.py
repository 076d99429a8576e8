"""Probe (issues 40, 41): does it matter on which NUMA node the host copies
into a GPU's pinned staging run, and where that staging was allocated?

For each GPU: its NUMA node (sysfs, from the PCI id NVIDIA's OpenCL
reports), then a pageable numpy block copied into a pinned (ALLOC_HOST_PTR,
mapped) buffer by threads bound to each node's cores, the buffer allocated
from a thread bound to each node; and the DMA from that buffer to the GPU.
Then all GPUs at once, threads and buffers on each GPU's own node against
unbound.  Prints GB/s; Linux only (os.sched_setaffinity).

    python3 benchmarks/numa_copies.py --mbytes 256
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyopencl as cl


def node_cpus() -> dict[int, list[int]]:
    nodes = {}
    for path in sorted(Path("/sys/devices/system/node").glob("node[0-9]*")):
        cpus = []
        for part in (path / "cpulist").read_text().strip().split(","):
            a, _, b = part.partition("-")
            cpus += list(range(int(a), int(b or a) + 1))
        nodes[int(path.name[4:])] = cpus
    return nodes or {0: sorted(os.sched_getaffinity(0))}


def gpu_node(device) -> int:
    try:
        bus, slot = device.pci_bus_id_nv, device.pci_slot_id_nv
        domain = getattr(device, "pci_domain_id_nv", 0)
    except (cl.LogicError, AttributeError):
        return -1
    for name in (f"{domain:04x}:{bus:02x}:{slot:02x}.0", f"{domain:04x}:{bus:02x}:{slot >> 3:02x}.{slot & 7}"):
        path = Path("/sys/bus/pci/devices") / name / "numa_node"
        if path.exists():
            return int(path.read_text())
    return -1


def bound(cpus):
    """A pool whose threads are bound to ``cpus`` (None: unbound)."""
    def init():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return ThreadPoolExecutor(max_workers=8, initializer=init)


def pinned_buffer(ctx, queue, nbytes, cpus):
    """An ALLOC_HOST_PTR buffer mapped (and touched) from a thread bound to cpus."""
    out = {}

    def make():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, nbytes)
        host, _ = cl.enqueue_map_buffer(queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                        (nbytes,), np.uint8, is_blocking=True)
        host[::4096] = 0
        out["buf"], out["host"] = buf, host
    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    return out["buf"], out["host"]


def copy_rate(pool, source, host, repeats=3):
    step = 8 << 20
    chunks = range(0, source.size, step)
    best = 1e9
    for _ in range(repeats):
        t = time.perf_counter()
        list(pool.map(lambda a: np.copyto(host[a:a + step], source[a:a + step]), chunks))
        best = min(best, time.perf_counter() - t)
    return source.size / best / 1e9


def dma_rate(queue, target, host, repeats=3):
    best = 1e9
    for _ in range(repeats):
        t = time.perf_counter()
        cl.enqueue_copy(queue, target, host, is_blocking=True)
        best = min(best, time.perf_counter() - t)
    return host.size / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mbytes", type=int, default=256)
    args = ap.parse_args()
    nbytes = args.mbytes << 20
    nodes = node_cpus()
    print("nodes:", {n: f"{c[0]}-{c[-1]} ({len(c)})" for n, c in nodes.items()})
    platform = next(p for p in cl.get_platforms() if "nvidia" in p.name.lower())
    gpus = platform.get_devices()
    source = np.ones(nbytes, np.uint8)   # first touched by the main thread
    setups = []
    for device in gpus:
        ctx = cl.Context([device])
        queue = cl.CommandQueue(ctx)
        target = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
        node = gpu_node(device)
        setups.append((device, ctx, queue, target, node))
        print(f"{device.name} bus {device.pci_bus_id_nv:#x} slot {device.pci_slot_id_nv}: node {node}")
    pools = {n: bound(c) for n, c in nodes.items()}
    pools[None] = bound(None)
    for device, ctx, queue, target, node in setups:
        for alloc in list(nodes) + [None]:
            buf, host = pinned_buffer(ctx, queue, nbytes, nodes.get(alloc))
            rates = {f"copy threads node {c}": copy_rate(pools[c], source, host) for c in pools}
            rates["dma"] = dma_rate(queue, target, host)
            print(f"gpu node {node}, pinned from node {alloc}: "
                  + ", ".join(f"{k} {v:.0f} GB/s" for k, v in rates.items()), flush=True)
            buf.release()
    # all at once: each GPU's copy threads and staging on its node, or unbound
    for placed in (False, True):
        stagings = []
        for device, ctx, queue, target, node in setups:
            cpus = nodes.get(node) if placed else None
            buf, host = pinned_buffer(ctx, queue, nbytes, cpus)
            stagings.append((buf, host, pools[node] if placed and node in pools else pools[None]))
        sources = [np.ones(nbytes, np.uint8) for _ in setups]

        def one(i):
            buf, host, pool = stagings[i]
            step = 8 << 20
            list(pool.map(lambda a: np.copyto(host[a:a + step], sources[i][a:a + step]),
                          range(0, nbytes, step)))
            cl.enqueue_copy(setups[i][2], setups[i][3], host, is_blocking=True)
        with ThreadPoolExecutor(len(setups)) as outer:
            best = 1e9
            for _ in range(3):
                t = time.perf_counter()
                list(outer.map(one, range(len(setups))))
                best = min(best, time.perf_counter() - t)
        print(f"all {len(setups)} GPUs at once, copy then DMA, "
              f"{'threads and staging on each GPU node' if placed else 'unbound'}: "
              f"{best * 1e3:.1f} ms ({len(setups) * nbytes / best / 1e9:.0f} GB/s)", flush=True)
        for buf, _, _ in stagings:
            buf.release()


if __name__ == "__main__":
    main()

"""Probe (issue 41): how fast can a work-group spread the points of one grid
tile into local memory by integer atomic adds (fixed point: the sum does not
depend on the order, so the grid stays bit-reproducible)?

Standalone (pyopencl and numpy only).  A synthetic uv distribution (Gaussian
about the grid centre), points sorted by the tile of their footprint start;
each work-group owns one TILE x TILE tile plus its (W - 1) halo in local
memory, adds its points' W x W taps there, then adds the local tile to a
global fixed-point grid.  Variants: i64 or i32 integer atomics, racy plain
adds (the floor), and on NVIDIA float atomics (``red.shared.add.f32``, not
reproducible, for comparison); each with a work-item per point and with LANES
work-items per point (one column each, looping over rows).  ``--order cell``
sorts each tile's points by cell, as a baseline's channels and dumps cluster
in a real observation.  Prints device ms and G taps/s (benchmarks/RESULTS.md,
"A spread by fixed-point atomics in local memory").

    python3 benchmarks/shared_tile_probe.py --platform nvidia --points 1.16e8 --tiles 32 --wg 256
    python benchmarks/shared_tile_probe.py --platform intel --points 2e5 --n 512 --check
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import clgrid  # noqa: F401  (registers the pip-installed OpenCL runtimes)
import pyopencl as cl

SOURCE = r"""
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#define W ${W}
#define T ${T}
#define R (T + W - 1)
#define SCALE 1048576.0f

inline void taps(const float t, float *k)
{
    // a degree-7 polynomial a tap, as the Horner kernels cost
    for (int a = 0; a < W; ++a) {
        const float x = (t + a) * (2.0f / W) - 1.0f;
        float v = 0.1f;
        v = fma(v, x, -0.3f); v = fma(v, x, 0.2f); v = fma(v, x, 0.5f);
        v = fma(v, x, -0.7f); v = fma(v, x, 0.1f); v = fma(v, x, -1.1f);
        v = fma(v, x, 1.0f);
        k[a] = v;
    }
}

inline void flush_tile(__local ACC *re, __local ACC *im, __global long *grid,
                       const int tile, const int ntiles, const int n)
{
    const int tu = tile / ntiles, tv = tile % ntiles;
    for (int c = get_local_id(0); c < R * R; c += get_local_size(0)) {
        const int a = c / R, b = c % R;
        const ACC x = re[c], y = im[c];
        if (x != 0 || y != 0) {
            const size_t g = ((size_t)(tu * T + a) * n + (tv * T + b)) * 2;
            atom_add(grid + g, (long)x);
            atom_add(grid + g + 1, (long)y);
        }
    }
}

// a work-group's tile: its points [lo, hi) of the sort, its local sums zeroed
#define TILE_START \
    const int tile = get_group_id(0); \
    const uint lo = bin_start[tile], hi = bin_start[tile + 1]; \
    if (lo == hi) \
        return; \
    for (int c = get_local_id(0); c < R * R; c += get_local_size(0)) \
        re[c] = im[c] = 0; \
    barrier(CLK_LOCAL_MEM_FENCE); \
    const int tu = tile / ntiles, tv = tile % ntiles;

// point p: its footprint start, value and taps along u and v
#define POINT_TAPS \
    const int2 cell = cells[p]; \
    const float2 t = fracs[p]; \
    const float2 value = values[p]; \
    float ku[W], kv[W]; \
    taps(t.x, ku); \
    taps(t.y, kv);

__kernel void per_point(__global const int2 *cells, __global const float2 *fracs,
                        __global const float2 *values, __global const uint *bin_start,
                        __global long *grid, const int ntiles, const int n)
{
    __local ACC re[R * R], im[R * R];
    TILE_START
    for (uint p = lo + get_local_id(0); p < hi; p += get_local_size(0)) {
        POINT_TAPS
        const int du = cell.x - tu * T, dv = cell.y - tv * T;
        for (int a = 0; a < W; ++a) {
            const float2 row = value * ku[a];
            __local ACC *r_re = re + (du + a) * R + dv, *r_im = im + (du + a) * R + dv;
            for (int b = 0; b < W; ++b) {
                ADD(r_re + b, row.x * kv[b]);
                ADD(r_im + b, row.y * kv[b]);
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    flush_tile(re, im, grid, tile, ntiles, n);
}

// LANES work-items per point: lane b takes column b of the footprint and
// loops over its rows (lanes past W idle)
__kernel void per_lanes(__global const int2 *cells, __global const float2 *fracs,
                        __global const float2 *values, __global const uint *bin_start,
                        __global long *grid, const int ntiles, const int n)
{
    __local ACC re[R * R], im[R * R];
    TILE_START
    const int lane = get_local_id(0) % LANES, slot = get_local_id(0) / LANES;
    const int slots = get_local_size(0) / LANES;
    for (uint p = lo + slot; p < hi; p += slots) {
        if (lane >= W)
            continue;
        POINT_TAPS
        const float kb = kv[lane];
        const int du = cell.x - tu * T, dv = cell.y - tv * T + lane;
        for (int a = 0; a < W; ++a) {
            const float2 v = value * (ku[a] * kb);
            ADD(re + (du + a) * R + dv, v.x);
            ADD(im + (du + a) * R + dv, v.y);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    flush_tile(re, im, grid, tile, ntiles, n);
}
"""

VARIANTS = {
    "i64": ("long", "atom_add(p, (long)((x) * SCALE))"),
    "i32": ("int", "atomic_add(p, (int)((x) * SCALE))"),
    "racy": ("int", "*(p) += (int)((x) * SCALE)"),
    # NVIDIA only (inline PTX): float adds in shared memory, not reproducible
    "f32ptx": ("float", 'asm volatile("red.shared.add.f32 [%0], %1;" :: "r"((uint)(size_t)(p)), "f"(x) : "memory")'),
}


def make_points(n_points, n, W, T, seed=1, order="random"):
    """Gaussian uv points sorted by tile; within a tile in random order, or
    (``order='cell'``) by cell, so that a warp's points share cells as a
    baseline's channels and dumps do in a real observation."""
    rng = np.random.default_rng(seed)
    uv = rng.normal(n / 2, n / 7, size=(n_points, 2))
    uv = uv[(uv.min(axis=1) > W) & (uv.max(axis=1) < n - 2 * W)]
    start = np.floor(uv).astype(np.int32) - W // 2
    frac = (uv - np.floor(uv)).astype(np.float32)
    ntiles = n // T
    tile = (start[:, 0] // T) * ntiles + start[:, 1] // T
    if order == "cell":
        order = np.lexsort((start[:, 1], start[:, 0], tile))
    else:
        order = np.argsort(tile, kind="stable")
    counts = np.bincount(tile, minlength=ntiles * ntiles)
    bin_start = np.concatenate([[0], np.cumsum(counts)]).astype(np.uint32)
    values = (rng.normal(size=(len(uv), 2))).astype(np.float32)
    return (np.ascontiguousarray(start[order]), np.ascontiguousarray(frac[order]),
            np.ascontiguousarray(values[order]), bin_start, ntiles)


def host_taps(t, W):
    x = (t[:, None] + np.arange(W)) * (2.0 / W) - 1.0
    v = np.full_like(x, 0.1)
    for c in (-0.3, 0.2, 0.5, -0.7, 0.1, -1.1, 1.0):
        v = v * x + c
    return v


def check(queue, grid, cells, fracs, values, n, W, name, kname):
    """The device grid against a float64 numpy spread of the same taps."""
    out = np.empty((n, n, 2), np.int64)
    cl.enqueue_copy(queue, out, grid)
    ref = np.zeros((n, n), complex)
    ku, kv = host_taps(fracs[:, 0].astype(float), W), host_taps(fracs[:, 1].astype(float), W)
    z = values[:, 0] + 1j * values[:, 1]
    for a in range(W):
        for b in range(W):
            np.add.at(ref, (cells[:, 0] + a, cells[:, 1] + b), z * ku[:, a] * kv[:, b])
    got = (out[..., 0] + 1j * out[..., 1]) / 1048576.0  # SCALE
    err = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"    check {name} {kname}: max error {err:.2e} of the grid's largest cell")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=float, default=3.2e7)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--W", type=int, default=7)
    ap.add_argument("--tiles", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--wg", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--lanes", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--platform", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--check", action="store_true", help="compare each grid with numpy (small sizes)")
    ap.add_argument("--order", default="random", choices=("random", "cell"),
                    help="points within a tile: random, or sorted by cell")
    args = ap.parse_args()
    platform = [p for p in cl.get_platforms() if args.platform.lower() in p.name.lower()][0]
    device = platform.get_devices()[0]
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    print(device.name, platform.name)
    rows = []
    grid = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, args.n * args.n * 16)
    for T in args.tiles:
        cells, fracs, values, bin_start, ntiles = make_points(int(args.points), args.n, args.W, T, order=args.order)
        taps_total = len(cells) * args.W ** 2
        mf = cl.mem_flags
        bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a)
                for a in (cells, fracs, values, bin_start)]
        print(f"T {T}: {len(cells)} points, max {np.diff(bin_start).max()} a tile")
        for name, (acc, add) in VARIANTS.items():
            src = SOURCE.replace("${W}", str(args.W)).replace("${T}", str(T))
            defines = f"#define ACC {acc}\n#define ADD(p, x) {add}\n#define LANES {args.lanes}\n"
            try:
                prg = cl.Program(ctx, src.replace("#define W", defines + "#define W", 1)).build()
            except cl.RuntimeError as error:
                print(f"  {name}: does not build here ({str(error).splitlines()[0]})")
                continue
            for kname in ("per_point", "per_lanes"):
                for wg in args.wg:
                    kernel = getattr(prg, kname)
                    times = []
                    for _ in range(args.repeats):
                        cl.enqueue_fill_buffer(queue, grid, np.int64(0), 0, args.n * args.n * 16)
                        ev = kernel(queue, (ntiles * ntiles * wg,), (wg,), *bufs, grid,
                                    np.int32(ntiles), np.int32(args.n))
                        ev.wait()
                        times.append((ev.profile.end - ev.profile.start) * 1e-6)
                    ms = min(times)
                    if args.check and name not in ("racy", "f32ptx"):
                        check(queue, grid, cells, fracs, values, args.n, args.W, name, kname)
                    row = dict(tile=T, variant=name, kernel=kname, wg=wg, ms=ms,
                               gtaps=taps_total / ms * 1e-6, points=len(cells))
                    rows.append(row)
                    print(f"  {name:5s} {kname:10s} wg {wg:4d}: {ms:8.2f} ms  {row['gtaps']:7.1f} G taps/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=device.name, order=args.order, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()

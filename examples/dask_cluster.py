"""Image in row chunks on a Dask LocalCluster of two worker processes (clgrid.dask).

Simulates an SKA-mid track of three point sources, splits the rows into
chunks of a dask array, grids each chunk on a worker's OpenCL device
(clgrid.dask.vis2dirty: the chunks' uv grids are summed, one FFT at the end)
and compares the result with the one-device clgrid.vis2dirty image.  The
same code runs on a real cluster: pass the scheduler's address to Client.
About 20 s on a 2-core laptop (Intel OpenCL CPU runtime), most of it
starting the workers.

    python examples/dask_cluster.py [--device intel] [--small] [--png dask_cluster.png]
"""
import argparse
import dataclasses
import time

import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
from distributed import Client, LocalCluster

import clgrid
import clgrid.dask
from clgrid.io.simulate import load_layout, simulate_observation

C = 299_792_458.0
SOURCES = [(0, 0, 1.0), (-60, 30, 0.5), (45, -75, 0.8)]   # l, m offsets (pixels), Jy


def simulate(small: bool):
    """uvw (m), freq (Hz), complex64 vis of SOURCES (no w term: a narrow field), pixel size."""
    layout = load_layout("ska1_mid_meerkat_197")
    offset = layout.enu_m - np.median(layout.enu_m, axis=0)      # the core: within 1 km
    core = dataclasses.replace(layout, enu_m=layout.enu_m[np.hypot(*offset[:, :2].T) < 1000])
    uvw = simulate_observation(core, duration_h=1.0, integration_s=60.0,
                               n_baselines=300 if small else 3000)
    freq = np.array([1.4e9, 1.42e9])
    u, v = (uvw[:, k, None] * freq / C for k in range(2))
    pixsize = 1 / (3 * max(np.abs(u).max(), np.abs(v).max()))    # 3 pixels across the beam
    vis = sum(flux * np.exp(-2j * np.pi * (u * x + v * y) * pixsize) for x, y, flux in SOURCES)
    return uvw, freq, vis.astype(np.complex64), pixsize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="intel, pocl, 0:0... (default: CLGRID_DEVICE or best)")
    parser.add_argument("--small", action="store_true", help="fewer baselines")
    parser.add_argument("--png", default="dask_cluster.png")
    args = parser.parse_args()
    uvw, freq, vis, pixsize = simulate(args.small)
    geometry = dict(npix_x=256, npix_y=256, pixsize_x=pixsize, pixsize_y=pixsize, epsilon=1e-5)
    rows = -(-uvw.shape[0] // 4)                        # four row chunks
    start = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.register_plugin(clgrid.dask.OpenCLWorkerPlugin(args.device))  # opens devices
        print(f"cluster_start_seconds: {time.perf_counter() - start:.2f}")
        start = time.perf_counter()
        image = clgrid.dask.vis2dirty(uvw=da.from_array(uvw, chunks=(rows, 3)), freq=freq,
                                      vis=da.from_array(vis, chunks=(rows, freq.size)),
                                      device=args.device, **geometry)
        print(f"dask_seconds: {time.perf_counter() - start:.3f}")
        for status in client.run(clgrid.dask.worker_status, args.device).values():
            print(f"worker: pid {status['pid']} on {status['device']}, "
                  f"{status['programs']} programs compiled")
    start = time.perf_counter()
    single = clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis,
                              context=clgrid.create_context(args.device), **geometry)
    print(f"one_device_seconds: {time.perf_counter() - start:.3f}")
    difference = np.abs(image - single).max() / np.abs(single).max()
    print(f"visibilities: {vis.size} in {-(-uvw.shape[0] // rows)} chunks of {rows} rows")
    print(f"max_difference_over_peak: {difference:.2e}")
    i, j = np.unravel_index(np.argmax(image), image.shape)
    print(f"peak: {i} {j} {image[i, j] / vis.size:.6f}")
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for axis, data, title in [(axes[0], image, "two Dask workers"),
                              (axes[1], image - single, "Dask - one device")]:
        shown = axis.imshow(data.T / vis.size, origin="lower", cmap="inferno",
                            vmax=None if data is not image else 0.3)  # show the sidelobes
        axis.set(title=title, xlabel="l (pixels)", ylabel="m (pixels)")
        figure.colorbar(shown, ax=axis)
    figure.tight_layout()
    figure.savefig(args.png, dpi=80)
    print(f"wrote: {args.png}")


if __name__ == "__main__":
    main()

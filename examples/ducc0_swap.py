"""Swap ducc0 for clgrid: the same vis2dirty call through both on a simulated SKA-mid track.

Simulates a 2-hour track of the SKA-mid core (antennas within 1 km of the
centre) at 1.4 GHz observing five point sources over a 1-degree field, makes
the w-corrected dirty image with ``ducc0.wgridder.vis2dirty`` and with
``clgrid.vis2dirty`` (same keywords, plus the OpenCL context), and shows both
images, their difference and the time of each.  About 20 s on a 2-core
laptop (Intel OpenCL CPU runtime), 5 s with --small.  Needs ducc0
(``pip install ducc0``).

    python examples/ducc0_swap.py [--device intel] [--small] [--png ducc0_swap.png]
"""
import argparse
import dataclasses
import os
import sys
import time

import matplotlib.pyplot as plt
import numpy as np

import clgrid
from clgrid.io.simulate import load_layout, simulate_observation

C = 299_792_458.0
#: (l, m) offsets in units of 1/512 degree from the phase centre, flux density in Jy
SOURCES = [(0, 0, 1.0), (-120, 80, 0.6), (150, 140, 0.4), (60, -170, 0.8), (-200, -90, 0.5)]


def simulate(small: bool):
    """uvw (m), freq (Hz), complex64 vis of the five sources, npix, pixel size (rad)."""
    layout = load_layout("ska1_mid_meerkat_197")
    offset = layout.enu_m - np.median(layout.enu_m, axis=0)
    core = dataclasses.replace(layout, enu_m=layout.enu_m[np.hypot(*offset[:, :2].T) < 1000])
    uvw = simulate_observation(core, duration_h=0.5 if small else 2.0, integration_s=120.0,
                               declination_deg=-30.0, n_baselines=800 if small else None)
    freq = np.linspace(1.36e9, 1.44e9, 1 if small else 4)
    npix = 256 if small else 512                     # a 1-degree field either way
    u, v, w = (uvw[:, k, None] * freq / C for k in range(3))
    vis = np.zeros(u.shape, np.complex128)
    for dx, dy, flux in SOURCES:   # ducc0's convention: V = S exp(-2 pi i (u l + v m - w (n - 1)))
        l, m = np.radians(dx / 512), np.radians(dy / 512)
        vis += flux * np.exp(-2j * np.pi * (u * l + v * m - w * (np.sqrt(1 - l * l - m * m) - 1)))
    return uvw, freq, vis.astype(np.complex64), npix, np.radians(1 / npix)


def import_ducc0():
    """ducc0, or exit with one line saying how to install it."""
    try:
        import ducc0.wgridder
    except ImportError:
        sys.exit("ducc0_swap.py compares clgrid with ducc0, which is not installed here: "
                 "pip install ducc0")
    return ducc0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="intel, pocl, 0:0... (default: CLGRID_DEVICE or best)")
    parser.add_argument("--small", action="store_true", help="fewer baselines, one channel")
    parser.add_argument("--png", default="ducc0_swap.png")
    args = parser.parse_args()
    ducc0 = import_ducc0()
    uvw, freq, vis, npix, pixsize = simulate(args.small)
    call = dict(uvw=uvw, freq=freq, vis=vis, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                pixsize_y=pixsize, epsilon=1e-5, do_wgridding=True)
    print(f"visibilities: {vis.size}  image: {npix}^2 of {np.degrees(pixsize) * 3600:.1f} arcsec")
    start = time.perf_counter()
    ducc_image = ducc0.wgridder.vis2dirty(**call, nthreads=os.cpu_count()) / vis.size
    ducc_s = time.perf_counter() - start
    context = clgrid.create_context(args.device)
    seconds = []
    for _ in range(2):   # the first call compiles kernels and plans; the second reuses them
        start = time.perf_counter()
        image = clgrid.vis2dirty(**call, context=context) / vis.size
        seconds.append(time.perf_counter() - start)
    clgrid_s = seconds[1]
    difference = image - ducc_image
    print(f"ducc0_seconds: {ducc_s:.3f}\nclgrid_seconds: {clgrid_s:.3f} "
          f"(first call {seconds[0]:.3f})")
    print(f"max_difference_over_peak: {np.abs(difference).max() / ducc_image.max():.2e}")
    for dx, dy, flux in SOURCES:
        i, j = npix // 2 + dx * npix // 512, npix // 2 + dy * npix // 512
        print(f"source: {i} {j} {flux} clgrid {image[i, j]:.6f} ducc0 {ducc_image[i, j]:.6f}")
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    half = np.degrees(pixsize) * npix / 2
    panels = [(ducc_image, f"ducc0 ({ducc_s:.2f} s)"), (image, f"clgrid ({clgrid_s:.2f} s)"),
              (difference, "clgrid - ducc0")]
    for axis, (data, title) in zip(axes, panels):
        shown = axis.imshow(data.T, origin="lower", extent=[-half, half, -half, half],
                            cmap="RdBu_r" if data is difference else "inferno",
                            vmax=None if data is difference else 0.2)  # show the sidelobes
        axis.invert_xaxis()
        axis.set(title=title, xlabel="l (deg)", ylabel="m (deg)")
        figure.colorbar(shown, ax=axis, shrink=0.85)
    figure.tight_layout()
    figure.savefig(args.png, dpi=80)
    print(f"wrote: {args.png}")


if __name__ == "__main__":
    main()

"""A major-cycle loop with the visibilities kept on the device (pyopencl.array).

The observed visibilities are uploaded once; each major cycle grids the
residual visibilities straight from device memory (clgrid.Imager.vis2dirty),
runs a Hoegbom CLEAN minor cycle on the image (numpy), predicts the model's
visibilities into device memory (Imager.dirty2vis_device) and forms the new
residual there: only images cross to the host.
About 15 s on a 2-core laptop (Intel OpenCL CPU runtime), 10 s with --small.

    python examples/device_resident.py [--device intel] [--small] [--png device_resident.png]
"""
import argparse
import dataclasses
import time

import matplotlib.pyplot as plt
import numpy as np
import pyopencl.array as cla

import clgrid
from clgrid.io.simulate import load_layout, simulate_observation

C = 299_792_458.0
SOURCES = [(0, 0, 1.0), (-40, 25, 0.5), (30, -50, 0.8), (55, 35, 0.3)]  # offsets (pixels), Jy
NPIX = 256


def simulate(small: bool):
    """uvw (m), freq (Hz), complex64 vis of SOURCES on pixel centres, pixel size (rad)."""
    layout = load_layout("ska1_mid_meerkat_197")
    offset = layout.enu_m - np.median(layout.enu_m, axis=0)      # the core: within 1 km
    core = dataclasses.replace(layout, enu_m=layout.enu_m[np.hypot(*offset[:, :2].T) < 1000])
    uvw = simulate_observation(core, duration_h=2.0, integration_s=120.0,
                               n_baselines=500 if small else 3000)
    freq = np.array([1.4e9, 1.42e9])
    u, v = (uvw[:, k, None] * freq / C for k in range(2))
    pixsize = 1 / (3 * max(np.abs(u).max(), np.abs(v).max()))    # 3 pixels across the beam
    vis = sum(flux * np.exp(-2j * np.pi * (u * x + v * y) * pixsize) for x, y, flux in SOURCES)
    return uvw, freq, vis.astype(np.complex64), pixsize


def hoegbom(residual, psf, gain=0.1, threshold=0.0, max_components=500):
    """Minor cycle: point components (an image) until the residual peak is below threshold."""
    residual, model, centre = residual.copy(), np.zeros_like(residual), psf.shape[0] // 2
    for _ in range(max_components):
        i, j = np.unravel_index(np.argmax(np.abs(residual)), residual.shape)
        if abs(residual[i, j]) < threshold:
            break
        model[i, j] += gain * residual[i, j]
        residual -= gain * residual[i, j] * psf[centre - i:centre - i + NPIX,
                                                centre - j:centre - j + NPIX]
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="intel, pocl, 0:0... (default: CLGRID_DEVICE or best)")
    parser.add_argument("--small", action="store_true", help="fewer baselines and cycles")
    parser.add_argument("--png", default="device_resident.png")
    args = parser.parse_args()
    uvw, freq, vis, pixsize = simulate(args.small)
    context = clgrid.create_context(args.device)
    geometry = dict(uvw=uvw, freq=freq, pixsize_x=pixsize, pixsize_y=pixsize, epsilon=1e-5)
    imager = clgrid.Imager(context, npix_x=NPIX, npix_y=NPIX, **geometry)  # compile once
    queue = imager.queue
    data_d = cla.to_device(queue, vis)                     # uploaded once, stays on the device
    psf = clgrid.Imager(context, npix_x=2 * NPIX, npix_y=2 * NPIX, **geometry).vis2dirty(
        cla.empty_like(data_d).fill(1)) / vis.size          # twice the image: shifts stay inside
    residual_d, model, peaks = data_d, np.zeros((NPIX, NPIX), np.float32), []
    for cycle in range(3 if args.small else 5):
        start = time.perf_counter()
        residual = imager.vis2dirty(residual_d) / vis.size  # grids device-resident visibilities
        peaks.append(np.abs(residual).max())
        model += hoegbom(residual, psf, threshold=0.3 * peaks[-1])
        model_vis_d = imager.dirty2vis_device(model).reshape(vis.shape)  # on the device
        residual_d = data_d - model_vis_d                  # the residual is formed on the device
        print(f"cycle: {cycle} residual_peak {peaks[-1]:.6f} model_flux {model.sum():.6f} "
              f"seconds {time.perf_counter() - start:.3f}")
    residual = imager.vis2dirty(residual_d) / vis.size
    print(f"final_residual_peak: {np.abs(residual).max():.6f}")
    for x, y, flux in SOURCES:
        i, j = NPIX // 2 + x, NPIX // 2 + y
        print(f"source: {i} {j} true {flux} model {model[i - 1:i + 2, j - 1:j + 2].sum():.6f}")
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    axes[1].semilogy(peaks + [np.abs(residual).max()], "o-")
    axes[1].set(title="residual peak per major cycle", xlabel="major cycle", ylabel="Jy/beam")
    for axis, data, title in [(axes[0], imager.vis2dirty(data_d) / vis.size, "dirty image"),
                              (axes[2], residual, f"residual after {len(peaks)} major cycles")]:
        shown = axis.imshow(data.T, origin="lower", cmap="inferno")
        axis.set(title=title, xlabel="l (pixels)", ylabel="m (pixels)")
        figure.colorbar(shown, ax=axis, shrink=0.85)
    figure.tight_layout()
    figure.savefig(args.png, dpi=80)
    print(f"wrote: {args.png}")


if __name__ == "__main__":
    main()

"""Grid the bundled VLA observation with clgrid.Gridder and W-projection tables.

The bundled set is raw data of the calibrator J1008+0730: its antenna gains
scramble the source's phases, so the example first solves gains and delays
against a 1 Jy point source at the phase centre, as ``clgrid image --example``
does (``--calibrate point``; ``--calibrate none`` shows the raw data, where no
source appears).  Shows a W-projection GCF table (the oversampled kernel of the last W plane),
the uv grid's amplitude, the dirty image made from it (inverse FFT, grid
correction), and which spread of the gridding core the dispatcher picked
(``method``: ``tiles`` or ``register``) and why.
About 9 s on a shared, busy 2-core machine (Intel OpenCL CPU runtime), 5 s of it
solving the gains; 8 s with --small, 6 s with --calibrate none.

    python examples/gridding.py [--device intel] [--small] [--calibrate point|none]
        [--png gridding.png]
"""
import argparse
import tarfile
import tempfile
from importlib import resources
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import clgrid
from clgrid.gcf import footprint_distances, grid_correction, separable_gcf, w_projection_gcf
from clgrid.io.ms import MeasurementSet
from clgrid.pipeline.calibrate import solve_point

C = 299_792_458.0  # m/s
TARBALL = "vla_day2_TDEM0003_10s_norx_1src_1spw.ms.tar.gz"


def read_vla(calibrate: bool = True):
    """Stokes I of the bundled Measurement Set: uvw (m), freq (Hz), vis, weight, usable.

    ``calibrate``: divide out gains and delays solved against a 1 Jy point
    source at the phase centre (clgrid.pipeline.calibrate, as the CLI's
    ``--calibrate point``); the image then reads in units of the model.
    """
    with tempfile.TemporaryDirectory() as folder, \
            resources.as_file(resources.files("clgrid") / "data" / TARBALL) as path:
        tarfile.open(path).extractall(folder, filter="data")
        with MeasurementSet(next(Path(folder).glob("*.ms"))) as ms:
            calibration = solve_point(ms) if calibrate else None
            chunk = next(ms.chunks(chunk_rows=ms.nrows, calibration=calibration))
    return chunk.uvw_m, chunk.freq_hz, chunk.vis, chunk.weight, chunk.mask.astype(bool)


def dirty_image(grid, gcf, npix: int, sum_weights: float) -> np.ndarray:
    """Inverse FFT, grid correction, central npix^2 of the 2x larger grid; [l, m], Jy/beam."""
    image = np.fft.fftshift(np.fft.ifft2(np.fft.ifftshift(grid))).real * grid.size
    correction = grid_correction(separable_gcf(gcf.support, gcf.oversample), grid.shape[0])
    crop = slice((grid.shape[0] - npix) // 2, (grid.shape[0] + npix) // 2)
    return (image * np.outer(correction, correction)).T[crop, crop] / sum_weights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="intel, pocl, 0:0... (default: CLGRID_DEVICE or best)")
    parser.add_argument("--small", action="store_true", help="128^2 image instead of 256^2")
    parser.add_argument("--calibrate", choices=["point", "none"], default="point",
                        help="solve gains against a point source first (default), or not")
    parser.add_argument("--png", default="gridding.png")
    args = parser.parse_args()
    calibrate = args.calibrate == "point"
    npix, (uvw, freq, vis, weight, usable) = (128 if args.small else 256), read_vla(calibrate)
    print(f"calibration: {args.calibrate}")
    uv_max = np.abs(uvw[:, :2]).max() * freq.max() / C      # wavelengths
    w_max = np.abs(uvw[:, 2]).max() * freq.max() / C
    cell = 1 / (4 * uv_max)                          # four pixels across the beam
    gcf = w_projection_gcf(8, 32, 4, w_max, fov_rad=2 * npix * cell)  # support, oversampling, W
    gridder = clgrid.Gridder(clgrid.create_context(args.device), gcf, 2 * npix, 2 * npix, cell)
    print(f"device: {gridder.profile.device_name}\nmethod: {gridder.method}\n"
          f"why: {'; '.join(gridder.choice.reasons)}")
    grid = gridder(uvw, freq, vis[..., None], weights=weight[..., None], flags=~usable[..., None])
    stats = gridder.last_stats
    print(f"visibilities: {stats['n_visibilities']}, {stats['n_kept']} gridded as "
          f"{stats['n_records']} footprints, {stats['n_offgrid']} off the grid")
    image = dirty_image(grid[0], gcf, npix, weight[usable].sum())
    i, j = np.unravel_index(np.argmax(image), image.shape)
    print(f"cell_arcsec: {np.degrees(cell) * 3600:.4f}\npeak_pixel: {i} {j}\n"
          f"peak_jy_per_beam: {image[i, j]:.6e}\nrms_jy_per_beam: {image.std():.6e}")
    plot(args.png, gcf, grid[0], image, cell, uv_max, w_max, calibrate)
    print(f"wrote: {args.png}")


def plot(png, gcf, grid, image, cell, uv_max, w_max, calibrated) -> None:
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    distances = footprint_distances(gcf.support, gcf.oversample).ravel()  # (sub-cell, tap)
    order = np.argsort(distances)                # table -> the kernel on its fine grid
    fine = [gcf.table[p].transpose(0, 2, 1, 3).reshape(distances.size, -1)[np.ix_(order, order)]
            for p in (0, -1)]
    w_phase = np.abs(np.angle(fine[1] / fine[0]))[np.abs(fine[0]) > 1e-3].max()
    axes[0].imshow(np.log10(np.abs(fine[1]) + 1e-6), origin="lower",
                   extent=[distances.min(), distances.max()] * 2)
    axes[0].set(title=f"log10 |GCF| at w = {w_max:.0f} λ (w-term phase up to "
                f"{1e3 * w_phase:.0f} mrad)", xlabel="u (cells)", ylabel="v (cells)")
    half, reach = 0.5 / cell / 1e3, 1.1 * uv_max / 1e3     # kλ
    axes[1].imshow(np.log10(np.abs(grid) + 1e-3 * np.abs(grid).max()), origin="lower",
                   extent=[-half, half, -half, half], cmap="magma")
    axes[1].set(title="log10 |uv grid|", xlabel="u (kλ)", ylabel="v (kλ)",
                xlim=(-reach, reach), ylim=(-reach, reach))
    fov = image.shape[0] * np.degrees(cell) * 3600 / 2
    shown = axes[2].imshow(image.T, origin="lower", cmap="inferno", extent=[-fov, fov, -fov, fov])
    axes[2].invert_xaxis()  # east (increasing l, right ascension) to the left
    if calibrated:
        title = "J1008+0730, calibrated on a 1 Jy point model\ndirty image (Jy/beam of the model)"
    else:
        title = ("raw data: no source, the antenna gains scramble it\n"
                 "(--calibrate point solves them)")
    axes[2].set(title=title, xlabel="RA offset (arcsec)", ylabel="Dec offset (arcsec)")
    figure.colorbar(shown, ax=axes[2])
    figure.tight_layout()
    figure.savefig(png, dpi=80)


if __name__ == "__main__":
    main()

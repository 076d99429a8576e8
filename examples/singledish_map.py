"""Map a simulated single-dish on-the-fly scan with clgrid.WcsGrid (cygrid's API).

A raster scan in right ascension across RA = 0 (longitudes 358..2 degrees,
wrapping), rows stepped in declination, observes four Gaussian sources with
a 9-arcmin beam plus noise.  WcsGrid grids the samples with a Gaussian kernel
onto a SIN map centred at RA 0, Dec +30; the map and its weight map are drawn
with WCS axes.  About 5 s on a 2-core laptop (Intel OpenCL CPU runtime).

    python examples/singledish_map.py [--device intel] [--small] [--png singledish_map.png]
"""
import argparse
import time

import matplotlib.pyplot as plt
import numpy as np
from astropy.wcs import WCS

import clgrid

BEAM_SIGMA = 9 / 60 / 2.355                    # degrees (9 arcmin FWHM)
#: RA (deg, wrapping at 0), Dec (deg), peak (K)
SOURCES = [(359.0, 30.4, 5.0), (0.6, 29.5, 3.0), (0.0, 30.0, 2.0), (1.2, 30.8, 4.0)]


def simulate(small: bool):
    """OTF raster: sample longitudes, latitudes (deg) and brightness (K), seeded noise."""
    step = 0.04 if small else 0.02             # degrees between samples and between rows
    dec_rows = np.arange(28.9, 31.1, step)      # the map reaches beyond the scan
    ra_offsets = np.arange(-1.6, 1.6, step / 2)
    ra = np.concatenate([(ra_offsets if k % 2 == 0 else ra_offsets[::-1]) / np.cos(np.radians(d))
                         for k, d in enumerate(dec_rows)]) % 360    # boustrophedon
    dec = np.repeat(dec_rows, ra_offsets.size)
    signal = np.random.default_rng(1).normal(0, 0.05, ra.size)
    for ra0, dec0, peak in SOURCES:
        hav = (np.sin(np.radians(dec - dec0) / 2) ** 2 + np.cos(np.radians(dec))
               * np.cos(np.radians(dec0)) * np.sin(np.radians(ra - ra0) / 2) ** 2)
        distance = np.degrees(2 * np.arcsin(np.sqrt(hav)))
        signal += peak * np.exp(-distance ** 2 / (2 * BEAM_SIGMA ** 2))
    return ra, dec, signal


def header(small: bool) -> dict:
    cell = 0.05 if small else 0.025
    nx, ny = int(3.6 / cell), int(2.4 / cell)
    return {"NAXIS": 2, "NAXIS1": nx, "NAXIS2": ny, "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN",
            "CUNIT1": "deg", "CUNIT2": "deg", "CDELT1": -cell, "CDELT2": cell,
            "CRPIX1": nx / 2 + 0.5, "CRPIX2": ny / 2 + 0.5, "CRVAL1": 0.0, "CRVAL2": 30.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="intel, pocl, 0:0... (default: CLGRID_DEVICE or best)")
    parser.add_argument("--small", action="store_true", help="coarser scan and map")
    parser.add_argument("--png", default="singledish_map.png")
    args = parser.parse_args()
    ra, dec, signal = simulate(args.small)
    map_header = header(args.small)
    kernel_sigma = BEAM_SIGMA / 2              # cygrid's advice: half the beam
    gridder = clgrid.WcsGrid(map_header, context=clgrid.create_context(args.device),
                             progress=False)
    gridder.set_kernel("gauss1d", (kernel_sigma,), 3 * kernel_sigma, kernel_sigma / 2)
    start = time.perf_counter()
    gridder.grid(ra, dec, signal)
    sky, weights = gridder.get_datacube(), gridder.get_weights()
    print(f"samples: {ra.size}  map: {sky.shape[1]} x {sky.shape[0]}  "
          f"gridded in {time.perf_counter() - start:.3f} s")
    wcs = WCS(map_header)
    for ra0, dec0, peak in SOURCES:
        i, j = np.round(wcs.world_to_pixel_values(ra0, dec0)).astype(int)
        print(f"source: {ra0} {dec0} pixel {i} {j} map {sky[j, i]:.6f} weight {weights[j, i]:.6f}")
    j, i = np.unravel_index(np.nanargmax(sky), sky.shape)
    peak_ra, peak_dec = wcs.pixel_to_world_values(i, j)
    print(f"map_peak: {i} {j} {sky[j, i]:.6f} at RA {peak_ra:.3f} Dec {peak_dec:.3f}")
    figure = plt.figure(figsize=(14, 4.8))
    for k, (data, title) in enumerate([(sky, "map (K)"), (weights, "weights")]):
        axis = figure.add_subplot(1, 2, k + 1, projection=wcs)
        shown = axis.imshow(data, origin="lower", cmap="viridis" if k else "inferno")
        axis.set(title=title, xlabel="RA", ylabel="Dec")
        axis.coords.grid(color="white", alpha=0.3)
        figure.colorbar(shown, ax=axis, shrink=0.8)
    figure.tight_layout()
    figure.savefig(args.png, dpi=80)
    print(f"wrote: {args.png}")


if __name__ == "__main__":
    main()

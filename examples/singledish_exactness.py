"""clgrid's single-dish gridder against the exact sum, and cygrid beside it.

Grids 30000 random samples (a 1 degree cap) onto a 60 x 60 SIN map, once
across RA = 0 and once at the north pole, with a Gaussian of sigma 0.05
degrees and cygrid's recommended support (3 sigma) and HEALPix resolution
(sigma / 2).  The reference is the exact float64 sum over every sample within
the support (:func:`clgrid.singledish.gather_reference`).  cygrid (numpy < 2
only) is compared too when it can be imported.

    python examples/singledish_exactness.py [--device intel]
"""

import argparse
import warnings

import numpy as np
import pyopencl as cl

import clgrid
from clgrid.singledish import WcsGrid, gather_reference

SIGMA = 0.05  # degrees


def header(lon0: float, lat0: float, n: int = 60, cdelt: float = 0.04) -> dict:
    return {"NAXIS": 2, "NAXIS1": n, "NAXIS2": n, "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN",
            "CUNIT1": "deg", "CUNIT2": "deg", "CDELT1": -cdelt, "CDELT2": cdelt,
            "CRPIX1": n / 2 + 0.5, "CRPIX2": n / 2 + 0.5, "CRVAL1": lon0, "CRVAL2": lat0}


def cap(rng, lon0: float, lat0: float, radius: float, n: int):
    """Uniform random points in a spherical cap (degrees)."""
    lon_c, lat_c = np.radians([lon0, lat0])
    cos_d = rng.uniform(np.cos(np.radians(radius)), 1, n)
    bearing = rng.uniform(0, 2 * np.pi, n)
    d = np.arccos(cos_d)
    lat = np.arcsin(np.sin(lat_c) * cos_d + np.cos(lat_c) * np.sin(d) * np.cos(bearing))
    lon = lon_c + np.arctan2(np.sin(bearing) * np.sin(d) * np.cos(lat_c),
                             cos_d - np.sin(lat_c) * np.sin(lat))
    return np.mod(np.degrees(lon), 360.0), np.degrees(lat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    queue = cl.CommandQueue(clgrid.create_context(args.device))
    try:
        import cygrid
    except Exception:  # noqa: BLE001 -- missing, or built for NumPy 1
        cygrid = None
    for name, (lon0, lat0) in {"across RA = 0": (0.0, 30.0), "at the pole": (0.0, 89.5)}.items():
        rng = np.random.default_rng(1)
        lons, lats = cap(rng, lon0, lat0, 1.0, 30000)
        data = (1 + 0.3 * rng.standard_normal(lons.size)).astype(np.float32)
        gridders = {"clgrid": WcsGrid(header(lon0, lat0), context=queue, progress=False)}
        if cygrid is not None:
            gridders["cygrid"] = cygrid.WcsGrid(header(lon0, lat0))
        lon, lat = gridders["clgrid"].get_world_coords()
        cube, weights = gather_reference(lon, lat, lons, lats, data, kernel_params=(SIGMA,),
                                         sphere_radius=3 * SIGMA)
        covered = weights > 0
        peak = np.abs(cube[covered]).max()
        for label, gridder in gridders.items():
            gridder.set_kernel("gauss1d", (SIGMA,), 3 * SIGMA, SIGMA / 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gridder.grid(lons, lats, data)
            with np.errstate(invalid="ignore", divide="ignore"):  # cygrid's empty cells
                ours = gridder.get_datacube()
            error = np.abs(ours[covered] - cube[covered]).max() / peak
            ratio = gridder.get_weights()[covered] / weights[covered]
            print(f"{name:>14} {label}: max |cube - exact| / peak {error:.2g}; weight sums "
                  f"up to {np.abs(ratio - 1).max():.2g} off the exact ones, "
                  f"{np.count_nonzero(np.abs(ratio - 1) > 1e-5)} of {covered.sum()} cells by "
                  "more than 1e-5")


if __name__ == "__main__":
    main()

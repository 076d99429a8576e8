"""The float64 brute-force gather that the device gather is tested against.
"""

from __future__ import annotations


import numpy as np


def gather_reference(cell_lon_deg, cell_lat_deg, lons, lats, data, weights=None, *,
                     kernel_type: str = "gauss1d", kernel_params=(1.0,),
                     sphere_radius: float = 3.0, compat: str = "exact",
                     hpx_max_resolution: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Float64 brute-force gather: every sample against every cell.

    Written plainly from cygrid's definitions (haversine distance, kernels of
    cygrid's kernels.pyx) as the independent test reference.  With
    ``compat="cygrid"`` (and cygrid's ``hpx_max_resolution``, degrees) a
    sample within the radius counts only where cygrid 2.0.4 pairs it with
    the cell (:class:`clgrid.singledish.compat.CygridSelection`).

    Returns
    -------
    (datacube, weights)
        Shapes ``data.shape[1:] + cell shape``; datacube NaN where weights are 0.
    """
    cell_lon = np.radians(np.asarray(cell_lon_deg, np.float64)).ravel()
    cell_lat = np.radians(np.asarray(cell_lat_deg, np.float64)).ravel()
    lon = np.radians(np.asarray(lons, np.float64))
    lat = np.radians(np.asarray(lats, np.float64))
    data = np.asarray(data, np.float64)
    values = data.reshape(lon.size, -1)
    w_in = np.ones_like(values) if weights is None else np.asarray(weights, np.float64).reshape(
        lon.size, -1)
    num = np.zeros((values.shape[1], cell_lon.size))
    den = np.zeros_like(num)
    params = np.asarray(kernel_params, np.float64)
    if compat not in ("exact", "cygrid"):
        raise ValueError(f"compat must be 'exact' or 'cygrid', got {compat!r}")
    selection = None
    if compat == "cygrid":
        from .compat import CygridSelection, cygrid_nside
        if hpx_max_resolution is None:
            raise ValueError("compat='cygrid' needs cygrid's hpx_max_resolution")
        selection = CygridSelection(cygrid_nside(hpx_max_resolution), sphere_radius,
                                    np.asarray(cell_lon_deg, np.float64).ravel(),
                                    np.asarray(cell_lat_deg, np.float64).ravel())
        sample_pix = selection.sample_pixels(lons, lats)
    for c in range(cell_lon.size):
        if not (np.isfinite(cell_lon[c]) and np.isfinite(cell_lat[c])):
            continue
        hav = (np.sin((cell_lat[c] - lat) / 2) ** 2
               + np.cos(cell_lat[c]) * np.cos(lat) * np.sin((cell_lon[c] - lon) / 2) ** 2)
        dist_deg = np.degrees(2 * np.arcsin(np.sqrt(np.minimum(hav, 1.0))))
        near = dist_deg < sphere_radius
        if selection is not None:
            near[near] = selection.keeps(sample_pix[near], c)
        d = dist_deg[near]
        if kernel_type == "gauss1d":
            k = np.exp(-d**2 / (2 * params[0] ** 2))
        elif kernel_type == "gauss2d":
            dl = lon[near] - cell_lon[c]
            bearing = np.arctan2(np.cos(lat[near]) * np.sin(dl),
                                 np.cos(cell_lat[c]) * np.sin(lat[near])
                                 - np.sin(cell_lat[c]) * np.cos(lat[near]) * np.cos(dl))
            a, b, pa = params
            ell = a**2 * np.sin(bearing - pa) ** 2 + b**2 * np.cos(bearing - pa) ** 2
            k = np.exp(-((d / a / b) ** 2) / 2 * ell)
        else:
            sigma, a, b = params
            arg = np.pi * d / sigma
            k = np.sinc(arg / b / np.pi) * np.exp(-(arg / a) ** 2)
        kw = w_in[near] * k[:, None]
        num[:, c] = (kw * values[near]).sum(axis=0)
        den[:, c] = kw.sum(axis=0)
    shape = data.shape[1:] + np.shape(cell_lon_deg)
    with np.errstate(invalid="ignore", divide="ignore"):
        cube = num / den
    cube[den == 0] = np.nan
    return cube.reshape(shape), den.reshape(shape)


__all__ = ["gather_reference"]

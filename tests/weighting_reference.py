"""A plain float64 numpy reference of the imaging weights (natural, uniform,
Briggs), shared by the weighting and ``clgrid image`` tests."""

import numpy as np

C = 299_792_458.0


def weights_reference(uvw_m, freq_hz, weight, npix_x, npix_y, pixsize_x, pixsize_y,
                      scheme, robust=0.0):
    """Float64 numpy weighting written from Briggs (1995) / the CASA docs."""
    u = uvw_m[:, 0:1] * freq_hz[None, :] / C * (npix_x * pixsize_x)
    v = uvw_m[:, 1:2] * freq_hz[None, :] / C * (npix_y * pixsize_y)
    flip = (u < 0) | ((u == 0) & (v < 0))
    u, v = np.where(flip, -u, u), np.where(flip, -v, v)
    iu = np.floor(u + 0.5).astype(np.int64) + npix_x // 2
    iv = np.floor(v + 0.5).astype(np.int64) + npix_y // 2
    inside = (iu >= 0) & (iu < npix_x) & (iv >= 0) & (iv < npix_y) & (weight > 0)
    density = np.zeros((npix_x, npix_y))
    np.add.at(density, (iu[inside], iv[inside]), weight[inside].astype(np.float64))
    out = np.zeros(weight.shape)
    cell_density = density[iu[inside], iv[inside]]
    if scheme == "natural":
        return weight.astype(np.float64), 0
    if scheme == "uniform":
        out[inside] = weight[inside] / cell_density
    else:
        f2 = (5 * 10.0 ** -robust) ** 2 / (np.sum(density ** 2) / np.sum(weight[inside]))
        out[inside] = weight[inside] / (1 + cell_density * f2)
    n_outside = int(np.count_nonzero((weight > 0) & ~inside))
    return out, n_outside

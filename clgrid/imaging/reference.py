"""Exact direct Fourier transforms in float64 numpy: what the imaging tests compare with.

:func:`dft_vis2dirty` and :func:`dft_dirty2vis` follow the conventions of
:func:`clgrid.imaging.imager.vis2dirty` (ducc0's), with or without the w term;
O(rows x channels x pixels), for small problems.
"""

from __future__ import annotations


import numpy as np

from ..core.plan import SPEED_OF_LIGHT, n_minus_1


# ------------------------------------------------------------ references
def dft_vis2dirty(uvw, freq, vis, npix_x, npix_y, pixsize_x, pixsize_y, *,
                  do_wgridding=False, divide_by_n=True, center_x=0.0, center_y=0.0,
                  pixels=None) -> np.ndarray:
    """Float64 direct Fourier transform with :func:`vis2dirty`'s convention.

    ``pixels``: optional (i, j) index arrays to evaluate only some pixels
    (returns a 1-D array then).  Cost O(nvis * npix): for tests only.
    """
    u, v, w = _wavelengths(uvw, freq)
    l_rad = (np.arange(npix_x) - npix_x // 2) * pixsize_x + center_x
    m_rad = (np.arange(npix_y) - npix_y // 2) * pixsize_y + center_y
    if pixels is None:
        ll, mm = np.meshgrid(l_rad, m_rad, indexing="ij")
    else:
        ll, mm = l_rad[pixels[0]], m_rad[pixels[1]]
    eta, inverse_n = _eta_and_inverse_n(ll, mm, do_wgridding, divide_by_n)
    values = np.asarray(vis, np.complex128).ravel()
    out = np.zeros(ll.shape)
    for k in range(values.size):
        if values[k] != 0:
            phase = 2.0 * np.pi * (u[k] * ll + v[k] * mm - w[k] * eta)
            out += (values[k] * np.exp(1j * phase)).real
    return out * inverse_n


def dft_dirty2vis(uvw, freq, dirty, pixsize_x, pixsize_y, *, do_wgridding=False,
                  divide_by_n=True, center_x=0.0, center_y=0.0) -> np.ndarray:
    """Float64 direct Fourier transform with :func:`dirty2vis`'s convention."""
    dirty = np.asarray(dirty, np.float64)
    npix_x, npix_y = dirty.shape
    u, v, w = _wavelengths(uvw, freq)
    l_rad = (np.arange(npix_x) - npix_x // 2) * pixsize_x + center_x
    m_rad = (np.arange(npix_y) - npix_y // 2) * pixsize_y + center_y
    ll, mm = np.meshgrid(l_rad, m_rad, indexing="ij")
    eta, inverse_n = _eta_and_inverse_n(ll, mm, do_wgridding, divide_by_n)
    image = dirty * inverse_n
    out = np.empty(u.size, np.complex128)
    for k in range(u.size):
        phase = -2.0 * np.pi * (u[k] * ll + v[k] * mm - w[k] * eta)
        out[k] = np.sum(image * np.exp(1j * phase))
    return out.reshape(np.shape(uvw)[0], -1)


def _eta_and_inverse_n(ll, mm, do_wgridding: bool, divide_by_n: bool):
    """n - 1 per pixel and the factor 1/n of ``divide_by_n``, ducc0's convention:
    without w, 0 and 1; past the horizon n = -sqrt(l^2 + m^2 - 1), and the
    pixels where n <= 0 are zero with ``divide_by_n`` (ducc0 zeroes them)."""
    if not do_wgridding:
        return np.zeros_like(ll), np.ones_like(ll)
    eta = n_minus_1(ll ** 2 + mm ** 2)
    n = eta + 1.0
    if not divide_by_n:
        return eta, np.ones_like(ll)
    inverse = np.divide(1.0, n, out=np.zeros_like(n), where=n > 0)
    return eta, inverse


def _wavelengths(uvw, freq):
    uvw = np.asarray(uvw, np.float64)
    scale = np.asarray(freq, np.float64)[None, :] / SPEED_OF_LIGHT
    return ((uvw[:, 0:1] * scale).ravel(), (uvw[:, 1:2] * scale).ravel(),
            (uvw[:, 2:3] * scale).ravel())


__all__ = ["dft_dirty2vis", "dft_vis2dirty"]

"""Gridding convolution functions (GCFs) as oversampled tables.

Conventions shared by :class:`clgrid.Gridder`, :class:`clgrid.Degridder` and the
core's table set points (:mod:`clgrid.core.table`):

* A visibility at fractional grid coordinate ``x`` (pixels, grid centre at
  ``nx // 2``) is rounded to the oversampled grid: ``k = round(x * O)``.
  Its footprint is the ``S`` cells from ``x0 = ceil(k / O - S / 2)`` (integer
  arithmetic: ``x0 = -((S * O - 2 k) // (2 O))``), so the footprint covers
  distances ``[-S/2, S/2)`` from the visibility, for odd and even ``S``.
  The sub-pixel index is ``f = x0 * O - k + (S * O) // 2`` (0..O-1), and
  footprint cell ``j`` lies at distance ``j + (f - (S * O) // 2) / O``.
* Tables (complex, C order):

  - separable: ``table_u`` and ``table_v`` of shape ``(w_planes, O, S)``;
    the weight of cell ``(jv, ju)`` is ``table_v[w, fv, jv] * table_u[w, fu, ju]``;
  - full (W projection, Romein): ``table`` of shape
    ``(w_planes, O, O, S, S)`` indexed ``[w, fv, fu, jv, ju]``.

* W plane ``p`` holds the kernel for ``w = p * w_step_lambda`` (w >= 0
  after the gridder's conjugation of w < 0 visibilities).
"""

from __future__ import annotations

import dataclasses

import numpy as np

KERNELS = ("es", "kaiser-bessel")


def es_kernel(x: np.ndarray, beta: float) -> np.ndarray:
    """Exponential of semicircle ``exp(beta (sqrt(1 - x^2) - 1))`` on |x| < 1."""
    x = np.asarray(x, dtype=np.float64)
    inside = np.abs(x) < 1.0
    out = np.zeros_like(x)
    out[inside] = np.exp(beta * (np.sqrt(1.0 - x[inside] ** 2) - 1.0))
    return out


def kaiser_bessel(x: np.ndarray, beta: float) -> np.ndarray:
    """Kaiser-Bessel window ``I0(beta sqrt(1 - x^2)) / I0(beta)`` on |x| < 1."""
    x = np.asarray(x, dtype=np.float64)
    inside = np.abs(x) < 1.0
    out = np.zeros_like(x)
    out[inside] = np.i0(beta * np.sqrt(1.0 - x[inside] ** 2)) / np.i0(beta)
    return out


def default_beta(kernel: str, support: int) -> float:
    """Shape parameter: ES ``2.3 * support`` (ducc's value for 2x padding),
    Kaiser-Bessel ``pi * sqrt(...)`` of Jackson et al. (1991) for 2x padding."""
    if kernel == "es":
        return 2.3 * support
    if kernel == "kaiser-bessel":
        # Jackson et al. eq. for padding 2: pi sqrt(W^2 (2 - 1/2)^2 / 2^2 - 0.8)
        return float(np.pi * np.sqrt(max(support ** 2 * 0.5625 - 0.8, 0.25)))
    raise ValueError(f"unknown kernel {kernel!r}; expected one of {KERNELS}")


def _kernel_values(kernel: str, distance_cells: np.ndarray, support: int, beta: float):
    x = 2.0 * distance_cells / support
    if kernel == "es":
        return es_kernel(x, beta)
    if kernel == "kaiser-bessel":
        return kaiser_bessel(x, beta)
    raise ValueError(f"unknown kernel {kernel!r}; expected one of {KERNELS}")


def footprint_distances(support: int, oversample: int) -> np.ndarray:
    """(O, S) distances ``j + (f - (S * O) // 2) / O`` of footprint cells
    from a visibility with sub-pixel index ``f`` (all within [-S/2, S/2))."""
    j = np.arange(support)[None, :]
    f = np.arange(oversample)[:, None]
    return j + (f - (support * oversample) // 2) / oversample


@dataclasses.dataclass(frozen=True)
class GCF:
    """An oversampled gridding convolution function table.

    Attributes
    ----------
    support, oversample, w_planes
        Footprint width ``S`` in cells, sub-pixel steps ``O`` per cell and
        number of W planes.
    w_step_lambda
        W spacing of the planes in wavelengths (ignored when one plane).
    table_u, table_v
        Separable tables ``(w_planes, O, S)`` complex128, or None.
    table
        Full table ``(w_planes, O, O, S, S)`` complex128, or None.
    kernel, beta
        Anti-aliasing kernel name and shape parameter ('user' for user tables).
    """

    support: int
    oversample: int
    w_planes: int = 1
    w_step_lambda: float = 0.0
    table_u: np.ndarray | None = None
    table_v: np.ndarray | None = None
    table: np.ndarray | None = None
    kernel: str = "user"
    beta: float = 0.0

    def __post_init__(self):
        if self.support < 1 or self.oversample < 1 or self.w_planes < 1:
            raise ValueError("support, oversample and w_planes must be >= 1")
        if self.w_planes > 1 and not self.w_step_lambda > 0:
            raise ValueError("w_step_lambda must be > 0 when w_planes > 1")
        sep_shape = (self.w_planes, self.oversample, self.support)
        full_shape = sep_shape[:2] + (self.oversample, self.support, self.support)
        if self.table is None:
            for name in ("table_u", "table_v"):
                value = getattr(self, name)
                if value is None or np.shape(value) != sep_shape:
                    raise ValueError(f"{name} must have shape {sep_shape} (w_planes, O, S), "
                                     f"got {None if value is None else np.shape(value)}")
        elif np.shape(self.table) != full_shape:
            raise ValueError(f"table must have shape {full_shape} (w_planes, O, O, S, S), "
                             f"got {np.shape(self.table)}")
        for name in ("table_u", "table_v", "table"):
            value = getattr(self, name)
            if value is not None:
                value = np.ascontiguousarray(value, dtype=np.complex128)
                if not np.all(np.isfinite(value)):
                    raise ValueError(f"{name} contains NaN or Inf")
                object.__setattr__(self, name, value)

    @property
    def separable(self) -> bool:
        return self.table is None

    @property
    def real_tables(self) -> bool:
        """Separable tables with no imaginary part (ES, Kaiser-Bessel): the
        CPU's vector tile can spread them."""
        return bool(self.separable and not np.any(self.table_u.imag)
                    and not np.any(self.table_v.imag))

    def weights(self, w_index: np.ndarray, fu: np.ndarray, fv: np.ndarray) -> np.ndarray:
        """(n, S, S) footprint weights ``[.., jv, ju]`` (float64 reference use)."""
        if self.separable:
            return (self.table_v[w_index, fv][:, :, None] * self.table_u[w_index, fu][:, None, :])
        return self.table[w_index, fv, fu]


def separable_gcf(support: int, oversample: int = 8, kernel: str = "es",
                  beta: float | None = None) -> GCF:
    """Separable anti-aliasing GCF (Merry), one W plane.

    Parameters
    ----------
    support
        Footprint width in cells (any value >= 1, odd allowed).
    oversample
        Sub-pixel steps per cell.
    kernel
        ``'es'`` (exponential of semicircle) or ``'kaiser-bessel'``.
    beta
        Shape parameter; default :func:`default_beta`.
    """
    beta = default_beta(kernel, support) if beta is None else float(beta)
    values = _kernel_values(kernel, footprint_distances(support, oversample), support, beta)
    table = values[None].astype(np.complex128)
    return GCF(support, oversample, 1, 0.0, table_u=table, table_v=table.copy(),
               kernel=kernel, beta=beta)


def grid_correction(gcf: GCF, n_pixels: int, axis: str = "u") -> np.ndarray:
    """Image-plane correction ``1 / C(l)`` for one axis of a separable GCF.

    ``C`` is the Fourier transform of the W-plane-0 kernel, evaluated by
    quadrature over its oversampled samples at image pixel ``i`` of
    ``n_pixels`` (``x = (i - n_pixels // 2) / n_pixels`` cycles per cell).
    Multiply the dirty image by it (outer product of the u and v parts).
    """
    if not gcf.separable:
        raise ValueError("grid_correction needs a separable GCF; "
                         "for a full table use full_grid_correction")
    table = gcf.table_u if axis == "u" else gcf.table_v
    distances = footprint_distances(gcf.support, gcf.oversample).ravel()
    samples = table[0].real.ravel()
    x = (np.arange(n_pixels) - n_pixels // 2) / n_pixels
    transform = np.cos(2 * np.pi * np.outer(x, distances)) @ samples / gcf.oversample
    return 1.0 / transform


def w_projection_gcf(support: int, oversample: int, w_planes: int, w_max_lambda: float,
                     fov_rad: float, kernel: str = "es", beta: float | None = None) -> GCF:
    """Full W-projection GCF (Romein): anti-aliasing kernel times the w-term.

    For each plane ``w = p * w_max / (w_planes - 1)`` the image-plane screen
    ``T(l) T(m) exp(-2 pi i w (sqrt(1 - l^2 - m^2) - 1))`` (``T`` the
    Fourier transform of the anti-aliasing kernel) is sampled on ``S``
    pixels across ``fov_rad``, zero-padded ``O`` times (image-plane
    oversampling) and Fourier transformed to ``S x S`` cells sampled every
    ``1 / O`` cell.  With this w-sign, the inverse transform of the grid
    (``sum grid exp(+2 pi i (u l + v m))``) gives the ducc0 ``vis2dirty``
    convention ``exp(-2 pi i w (n - 1))`` times ``T(l) T(m)``.

    Parameters
    ----------
    support, oversample, w_planes
        Table geometry.
    w_max_lambda
        W of the last plane in wavelengths.
    fov_rad
        Image width (``nx * cell_size_rad``), the same on both axes.
    """
    if w_planes < 1:
        raise ValueError("w_planes must be >= 1")
    base = separable_gcf(support, oversample, kernel, beta)
    taper = 1.0 / grid_correction(base, support)
    l = (np.arange(support) - support // 2) * fov_rad / support
    l2 = l[None, :] ** 2 + l[:, None] ** 2
    n_minus_1 = np.sqrt(np.maximum(0.0, 1.0 - l2)) - 1.0
    w_step = w_max_lambda / (w_planes - 1) if w_planes > 1 else 0.0
    padded = support * oversample
    start = padded // 2 - support // 2
    distances = footprint_distances(support, oversample)          # (O, S)
    index = np.rint(distances * oversample).astype(int) + padded // 2
    outside = index < 0    # beyond -S/2: the anti-aliased kernel is zero there
    index[outside] = 0
    table = np.empty((w_planes, oversample, oversample, support, support), np.complex128)
    for plane in range(w_planes):
        screen = np.zeros((padded, padded), np.complex128)
        screen[start:start + support, start:start + support] = (
            np.outer(taper, taper) * np.exp(-2j * np.pi * plane * w_step * n_minus_1))
        kernel_uv = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(screen))) / support ** 2
        # kernel at distance d cells sits at padded // 2 + d * O
        plane_table = kernel_uv[index[:, None, :, None], index[None, :, None, :]]
        plane_table[outside[:, None, :, None] | outside[None, :, None, :]] = 0.0
        table[plane] = plane_table
    return GCF(support, oversample, w_planes, w_step if w_planes > 1 else 0.0,
               table=table, kernel=kernel, beta=base.beta)


def user_gcf(support: int, oversample: int, *, table=None, table_u=None, table_v=None,
             w_step_lambda: float = 0.0) -> GCF:
    """Wrap a user table; layouts as in the module docstring."""
    source = table if table is not None else table_u
    if source is None:
        raise ValueError("give table, or table_u and table_v")
    w_planes = int(np.shape(source)[0])
    return GCF(support, oversample, w_planes, w_step_lambda, table_u=table_u,
               table_v=table_v if table_v is not None else table_u, table=table)


__all__ = ["GCF", "KERNELS", "es_kernel", "footprint_distances", "grid_correction",
           "kaiser_bessel", "separable_gcf", "user_gcf", "w_projection_gcf"]

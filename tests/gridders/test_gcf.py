"""GCF tables: kernels, layouts, W projection and grid correction."""

import numpy as np
import pytest

from clgrid.gcf import (GCF, es_kernel, footprint_distances, grid_correction, kaiser_bessel,
                        separable_gcf, user_gcf, w_projection_gcf)


def test_separable_table_samples_kernel_at_documented_distances():
    gcf = separable_gcf(7, 4, "es", beta=10.0)
    distances = footprint_distances(7, 4)
    assert distances[2, 3] == 0.0 and distances[0, 3] == -0.5
    for support, oversample in ((7, 4), (6, 8), (3, 3), (1, 1)):
        d = footprint_distances(support, oversample)
        assert d.min() >= -support / 2 and d.max() < support / 2   # whole kernel covered
        assert np.unique(d).size == d.size                          # every sample distinct
    x = 2 * distances / 7
    expected = np.where(np.abs(x) < 1, np.exp(10.0 * (np.sqrt(np.clip(1 - x ** 2, 0, 1)) - 1)),
                        0.0)
    assert np.allclose(gcf.table_u[0].real, expected)
    assert gcf.table_u.shape == (1, 4, 7) and gcf.separable


def test_kaiser_bessel_and_es_are_windows():
    x = np.linspace(-1.2, 1.2, 25)
    for values in (es_kernel(x, 8.0), kaiser_bessel(x, 8.0)):
        assert values[12] == pytest.approx(1.0)
        assert np.all(values[np.abs(x) >= 1] == 0) and np.all(values >= 0)


def test_grid_correction_is_inverse_fourier_transform():
    gcf = separable_gcf(6, 16)
    n = 64
    correction = grid_correction(gcf, n)
    # direct transform of the continuous kernel by dense quadrature
    t = np.linspace(-3, 3, 20001)
    phi = es_kernel(2 * t / 6, gcf.beta)
    x = (np.arange(n) - n // 2) / n
    direct = np.trapezoid(phi[None] * np.cos(2 * np.pi * x[:, None] * t[None]), t, axis=1)
    assert np.allclose(1 / correction, direct, rtol=2e-3)
    assert correction[n // 2] == pytest.approx(1 / direct[n // 2], rel=2e-3)


def test_w_projection_plane_zero_is_antialiasing_kernel():
    support, oversample = 16, 4
    full = w_projection_gcf(support, oversample, 3, 500.0, 0.02)
    sep = separable_gcf(support, oversample)
    assert full.table.shape == (3, 4, 4, 16, 16) and not full.separable
    for fv, fu in ((0, 0), (1, 3)):
        outer = np.outer(sep.table_v[0, fv], sep.table_u[0, fu])
        assert np.max(np.abs(full.table[0, fv, fu] - outer)) < 2e-2


def test_w_projection_phase_screen():
    """Transforming a W plane back to the image gives taper * exp(-2 pi i w (n - 1))."""
    support, oversample, fov = 32, 1, 0.3
    w_max = 40.0
    gcf = w_projection_gcf(support, oversample, 2, w_max, fov)
    kernel = gcf.table[1, 0, 0]               # cells at distance j - S/2
    l = (np.arange(support) - support // 2) * fov / support
    # image-plane value at (l, m): sum_k K(k) exp(+2 pi i k l / du), du = 1 / fov
    k = np.arange(support) - support // 2
    phase = np.exp(2j * np.pi * np.outer(l, k) / fov)
    image = phase @ kernel @ phase.T
    n_minus_1 = np.sqrt(1 - l[:, None] ** 2 - l[None] ** 2) - 1
    inner = slice(support // 4, 3 * support // 4)
    ratio = image[inner, inner] / np.exp(-2j * np.pi * w_max * n_minus_1[inner, inner])
    assert np.max(np.abs(np.angle(ratio))) < 0.05   # phase of the w-term reproduced


def test_layout_errors():
    with pytest.raises(ValueError, match="table_u must have shape"):
        user_gcf(4, 2, table_u=np.ones((1, 2, 5)))
    with pytest.raises(ValueError, match="w_planes, O, O, S, S"):
        user_gcf(4, 2, table=np.ones((2, 2, 2, 4, 3)), w_step_lambda=1.0)
    with pytest.raises(ValueError, match="w_step_lambda"):
        user_gcf(4, 2, table=np.ones((2, 2, 2, 4, 4)))
    with pytest.raises(ValueError, match="NaN"):
        user_gcf(2, 1, table_u=np.full((1, 1, 2), np.nan))
    with pytest.raises(ValueError, match="unknown kernel"):
        separable_gcf(4, 2, "gauss")
    assert isinstance(user_gcf(4, 2, table_u=np.ones((1, 2, 4))), GCF)

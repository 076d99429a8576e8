"""The correction stage's plane <-> image kernels (``templates/core_correct.cl.mako``)
without w: each pixel's cell against a float64 numpy placement (the FFT's
frequency index, negative offsets wrapped to the top), with the default
work-group and with the GPUs' two-row group (Corrector.GPU_GROUP) on image
and grid sizes that are no multiple of it; and the correction itself with w
against the float64 formula, its w kernel's transform by a quadrant of the
pixel offsets or every pixel."""

import numpy as np
import pyopencl.array as cla
import pytest

from clgrid.core.correct import Corrector
from clgrid.imaging import Imager

NPIX_X, NPIX_Y = 90, 70
GROUPS = [None, Corrector.GPU_GROUP, (32, 8)]


def _corrector(cl_env):
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64 (the imaging core's default geometry)")
    rng = np.random.default_rng(3)
    uvw = np.column_stack([rng.uniform(-300, 300, (50, 2)), np.zeros(50)])
    imager = Imager(cl_env.queue, uvw=uvw, freq=np.array([1.4e9]), npix_x=NPIX_X,
                    npix_y=NPIX_Y, pixsize_x=4e-4, pixsize_y=5e-4, epsilon=1e-5,
                    do_wgridding=False)
    return imager.engine.primary.corrector


def _cells(corrector):
    """Each pixel's (row, column) on the grid."""
    layout = corrector.layout
    rows = (np.arange(NPIX_X) - NPIX_X // 2) % layout.nu
    cols = (np.arange(NPIX_Y) - NPIX_Y // 2) % layout.nv
    return np.ix_(rows, cols)


@pytest.mark.parametrize("group", GROUPS, ids=["default", "gpu-group", "32x8"])
def test_dirty_to_planes_places_each_corrected_pixel(cl_env, group):
    corrector = _corrector(cl_env)
    corrector.group = group
    layout, queue = corrector.layout, corrector.queue
    dirty = np.random.default_rng(1).standard_normal((NPIX_X, NPIX_Y)).astype(np.float32)
    planes_d = cla.empty(queue, (1, layout.nu, layout.nv), np.complex64)
    planes_d.fill(np.complex64(np.nan))   # every cell must be written
    corrector.dirty_to_planes(cla.to_device(queue, dirty), 0, 1, planes_d)
    corr = corrector.corr_d.get().astype(np.float64)
    expected = np.zeros((layout.nu, layout.nv), np.complex128)
    expected[_cells(corrector)] = dirty * corr
    np.testing.assert_allclose(planes_d.get()[0], expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("group", GROUPS, ids=["default", "gpu-group", "32x8"])
def test_planes_to_dirty_reads_each_pixels_cell(cl_env, group):
    corrector = _corrector(cl_env)
    corrector.group = group
    layout, queue = corrector.layout, corrector.queue
    rng = np.random.default_rng(2)
    planes = (rng.standard_normal((1, layout.nu, layout.nv))
              + 1j * rng.standard_normal((1, layout.nu, layout.nv))).astype(np.complex64)
    dirty_d = cla.to_device(queue, np.full((NPIX_X, NPIX_Y), np.nan, np.float32))
    corrector.planes_to_dirty(cla.to_device(queue, planes), 0, 1, dirty_d, 0.5,
                              accumulate=False)
    corr = corrector.corr_d.get().astype(np.float64)
    expected = planes[0].real.astype(np.float64)[_cells(corrector)] * corr * 0.5
    np.testing.assert_allclose(dirty_d.get(), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("npix", [(90, 70), (64, 66), (2, 40)])
@pytest.mark.parametrize("centred", [True, False], ids=["centred", "shifted"])
def test_w_correction_matches_the_formula_by_quadrant_or_every_pixel(cl_env, npix, centred,
                                                                      monkeypatch):
    """The per-pixel correction with w, corr_x[i] corr_y[j] / phi_w_hat((n - 1)
    dw) / n, against float64 numpy of that formula (Gauss-Legendre
    quadrature of the ES kernel, as the paper's correction), for a wide field
    where n - 1 reaches -0.25; an image at the phase centre takes the w
    kernel's transform from a quadrant of pixel offsets: the same values as
    computing it at every pixel."""
    from clgrid.core.correct import N_QUADRATURE
    from clgrid.core.eskernel import es_kernel
    from clgrid.core.plan import n_minus_1
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64 (the imaging core's default geometry)")
    npix_x, npix_y = npix
    rng = np.random.default_rng(5)
    uvw = rng.uniform(-300, 300, (50, 3))
    centre = dict(center_x=0.0, center_y=0.0) if centred else dict(center_x=0.02,
                                                                    center_y=-0.03)
    imager = Imager(cl_env.queue, uvw=uvw, freq=np.array([1.4e9]), npix_x=npix_x,
                    npix_y=npix_y, pixsize_x=3.6 / npix_x / 3, pixsize_y=3.2 / npix_y / 3,
                    epsilon=1e-5,
                    do_wgridding=True, **centre)
    corrector = imager.engine.primary.corrector
    g, layout, choice = corrector.geometry, corrector.layout, corrector.layout.choice
    by_quadrant = corrector._compute_correction().get()
    monkeypatch.setattr(Corrector, "QUADRANT", False)
    every_pixel = corrector._compute_correction().get()
    np.testing.assert_array_equal(by_quadrant, every_pixel)

    t_x, t_y = np.arange(npix_x) - npix_x // 2, np.arange(npix_y) - npix_y // 2
    centre_l, centre_m = g.centre_lm
    l, m = np.meshgrid(t_x * g.pixsize_x + centre_l, t_y * g.pixsize_y + centre_m,
                       indexing="ij")
    nm1 = n_minus_1(l ** 2 + m ** 2)
    assert nm1.min() < -0.25
    nodes, weights = np.polynomial.legendre.leggauss(N_QUADRATURE)
    s_q = nodes * choice.support / 2
    phi_q = es_kernel(s_q, choice.support, choice.beta) * weights * choice.support / 2
    phi_hat = np.cos(2 * np.pi * s_q * (nm1 * layout.dw)[..., None]) @ phi_q
    expected = (1 / choice.fourier(t_x / layout.nu))[:, None] \
        * (1 / choice.fourier(t_y / layout.nv))[None, :] / phi_hat
    if g.divide_by_n:
        expected = expected / (nm1 + 1)
    np.testing.assert_allclose(by_quadrant, expected, rtol=2e-6, atol=0)


@pytest.mark.parametrize("npix", [(90, 70), (2, 40)])
def test_kept_screens_by_quadrant_match_every_pixel_and_the_formula(cl_env, npix,
                                                                    monkeypatch):
    """The phase screens kept per plan (PoCL's choice, forced here: each
    pixel's exp(2 pi i w_first (n - 1)) and its step exp(2 pi i dw (n - 1))),
    of an image at the phase centre by a quadrant of pixel offsets: the bits
    of computing them at every pixel, and float64 numpy's values."""
    import clgrid.core.correct as correct
    from clgrid.core.plan import n_minus_1
    if not cl_env.profile.fp64:
        pytest.skip("kept screens are double")
    monkeypatch.setattr(correct, "keeps_screens", lambda *args: True)
    npix_x, npix_y = npix
    uvw = np.random.default_rng(6).uniform(-300, 300, (50, 3))
    imager = Imager(cl_env.queue, uvw=uvw, freq=np.array([1.4e9]), npix_x=npix_x,
                    npix_y=npix_y, pixsize_x=1.2 / npix_x, pixsize_y=1.1 / npix_y,
                    epsilon=1e-5, do_wgridding=True)
    corrector = imager.engine.primary.corrector
    assert corrector.cache_screens
    plane0 = imager.engine.image.passes()[-1][0]
    by_quadrant = corrector._cached_screens(plane0).get()
    corrector._screens.clear()
    monkeypatch.setattr(Corrector, "QUADRANT", False)
    np.testing.assert_array_equal(by_quadrant, corrector._cached_screens(plane0).get())
    g, layout = corrector.geometry, corrector.layout
    l, m = np.meshgrid((np.arange(npix_x) - npix_x // 2) * g.pixsize_x,
                       (np.arange(npix_y) - npix_y // 2) * g.pixsize_y, indexing="ij")
    eta = n_minus_1(l ** 2 + m ** 2)
    first, step = (2 * np.pi * w * eta for w in (layout.w_of_plane(plane0), layout.dw))
    expected = np.stack([np.cos(first), np.sin(first), np.cos(step), np.sin(step)], axis=-1)
    np.testing.assert_allclose(by_quadrant, expected, rtol=0, atol=1e-9)

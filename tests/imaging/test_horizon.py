"""Fields reaching or past the horizon, as ducc0 images them.

Where l^2 + m^2 > 1 there is no sky, but ducc0's wgridder images such pixels
anyway with n continued to n = -sqrt(l^2 + m^2 - 1) (``wgridder_impl.h``,
``Wgridder::phase``: ``nm1 = (tmp >= 0) ? (-xsq - ysq) / (sqrt(tmp) + 1) :
-sqrt(-tmp) - 1`` with ``tmp = 1 - l^2 - m^2``), and with ``divide_by_n``
sets them to zero (``apply_global_corrections``: "beyond the horizon, don't
really know what to do here", ``fct = divide_by_n ? 0 : ...``).  ducc0's own
test file images fields of 80, 90 and 120 degrees (``test_vis2dirty_wsclean``,
``test_adjointness_wsclean``).

Each case is checked against two independent references: a plain float64
numpy direct Fourier transform written out here (not clgrid's
``clgrid.imaging.reference``) and ducc0 0.42 itself.  Data as in ducc0's
``test_vis2dirty_wsclean`` (50 x 50 pixels, 27 rows x 5 channels, weights,
pixsize_y = 1.1 pixsize_x, so the corners of the 80-degree field lie past the
horizon too), both directions, with and without the w term, ``divide_by_n``
on and off, double precision at epsilon 1e-7 and single at 1e-5.
"""

from __future__ import annotations

import numpy as np
import pytest

import clgrid

SPEED_OF_LIGHT = 299792458.0
NPIX = 50
FOVS = (80.0, 90.0, 120.0)


def _n_minus_1(ll: np.ndarray, mm: np.ndarray) -> np.ndarray:
    """ducc0's n - 1: sqrt(1 - r2) - 1 inside the horizon, -sqrt(r2 - 1) - 1 past it."""
    r2 = ll ** 2 + mm ** 2
    root = np.sqrt(np.abs(1.0 - r2))
    return np.where(r2 <= 1.0, root - 1.0, -root - 1.0)


def _dft_matrix(uvw, freq, npix_x, npix_y, pixsize_x, pixsize_y, do_w, divide_by_n,
                center_x=0.0, center_y=0.0):
    """(nvis, npix_x * npix_y) float64 matrix A with dirty = Re(A^T vis) and
    vis = A (dirty) in ducc0's convention; the 1/n of ``divide_by_n`` folded in
    (0 where n <= 0, as ducc0)."""
    l_axis = (np.arange(npix_x) - npix_x / 2) * pixsize_x + center_x
    m_axis = (np.arange(npix_y) - npix_y / 2) * pixsize_y + center_y
    ll, mm = (a.ravel() for a in np.meshgrid(l_axis, m_axis, indexing="ij"))
    eta = _n_minus_1(ll, mm) if do_w else np.zeros_like(ll)
    scale = freq[None, :] / SPEED_OF_LIGHT
    u, v, w = ((uvw[:, k:k + 1] * scale).ravel() for k in range(3))
    matrix = np.exp(2j * np.pi * (np.outer(u, ll) + np.outer(v, mm) - np.outer(w, eta)))
    if do_w and divide_by_n:
        n = eta + 1.0
        matrix *= np.divide(1.0, n, out=np.zeros_like(n), where=n > 0)[None, :]
    return matrix


def _observation(fov: float, single: bool):
    """ducc0's test_vis2dirty_wsclean data for a field of ``fov`` degrees."""
    rng = np.random.default_rng(42)
    pixsize_x = fov * np.pi / 180 / NPIX
    pixsize_y = fov * np.pi / 180 / NPIX * 1.1
    nrow, nchan, f0 = 27, 5, 1e9
    freq = f0 + np.arange(nchan) * (f0 / nchan)
    uvw = (rng.random((nrow, 3)) - 0.5) / (pixsize_x * f0 / SPEED_OF_LIGHT)
    vis = rng.random((nrow, nchan)) - 0.5 + 1j * (rng.random((nrow, nchan)) - 0.5)
    wgt = rng.uniform(0.9, 1.1, (nrow, nchan))
    dirty = rng.random((NPIX, NPIX)) - 0.5
    if single:
        vis, wgt, dirty = vis.astype(np.complex64), wgt.astype(np.float32), \
            dirty.astype(np.float32)
    return uvw, freq, vis, wgt, dirty, pixsize_x, pixsize_y


def _l2error(a, b) -> float:
    """ducc0.misc.l2error: ||a - b|| / max(||a||, ||b||)."""
    a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
    scale = max(np.sum(np.abs(a) ** 2), np.sum(np.abs(b) ** 2))
    return float(np.sqrt(np.sum(np.abs(a - b) ** 2) / scale))


def _queue(cl_env, single: bool):
    if not single and not cl_env.profile.fp64:
        pytest.skip("double precision case: this device has no fp64")
    return cl_env.queue


CASES = [(fov, do_w, divide_by_n, single) for fov in FOVS for do_w in (True, False)
         for divide_by_n in (True, False) for single in (False, True)]


@pytest.mark.parametrize("fov,do_w,divide_by_n,single", [
    pytest.param(*case, id=f"fov{case[0]:g}-{'w' if case[1] else 'now'}-"
                           f"{'divn' if case[2] else 'nodivn'}-{'f32' if case[3] else 'f64'}")
    for case in CASES])
@pytest.mark.sweep
def test_horizon_field_against_dft_and_ducc0(cl_env, fov, do_w, divide_by_n, single):
    """vis2dirty and dirty2vis of a field reaching past the horizon: within
    epsilon (ducc0's l2error) of the float64 DFT and of ducc0 0.42."""
    ducc0 = pytest.importorskip("ducc0.wgridder", reason="ducc0 (the peer) is not installed")
    epsilon = 1e-5 if single else 1e-7
    uvw, freq, vis, wgt, dirty, pixsize_x, pixsize_y = _observation(fov, single)
    common = dict(uvw=uvw, freq=freq, wgt=wgt, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
                  epsilon=epsilon, do_wgridding=do_w, divide_by_n=divide_by_n)
    matrix = _dft_matrix(uvw, freq, NPIX, NPIX, pixsize_x, pixsize_y, do_w, divide_by_n)
    weighted = (np.asarray(vis, np.complex128) * np.asarray(wgt, np.float64)).ravel()
    reference_dirty = (weighted @ matrix).real.reshape(NPIX, NPIX)
    reference_vis = ((np.conj(matrix) @ np.asarray(dirty, np.float64).ravel()).reshape(vis.shape)
                     * np.asarray(wgt, np.float64))
    r2 = np.add.outer(((np.arange(NPIX) - NPIX / 2) * pixsize_x) ** 2,
                      ((np.arange(NPIX) - NPIX / 2) * pixsize_y) ** 2)
    assert (r2 > 1.0).any()  # the field does reach past the horizon

    image = clgrid.vis2dirty(vis=vis, npix_x=NPIX, npix_y=NPIX, queue=_queue(cl_env, single),
                             **common)
    predicted = clgrid.dirty2vis(dirty=dirty, queue=cl_env.queue, **common)
    assert image.dtype == (np.float32 if single else np.float64)
    assert _l2error(image, reference_dirty) <= epsilon
    assert _l2error(predicted, reference_vis) <= epsilon
    if do_w and divide_by_n:
        assert not image[r2 > 1.0].any()  # zero past the horizon, as ducc0

    theirs_dirty = ducc0.vis2dirty(vis=vis, npix_x=NPIX, npix_y=NPIX, **common)
    theirs_vis = ducc0.dirty2vis(dirty=dirty, **common)
    assert _l2error(theirs_dirty, reference_dirty) <= epsilon  # the reference is ducc0's
    assert _l2error(image, theirs_dirty) <= 2 * epsilon
    assert _l2error(predicted, theirs_vis) <= 2 * epsilon


@pytest.mark.parametrize("fov,center", [(60.0, (0.6, 0.3)), (120.0, (-0.2, 0.1))])
def test_horizon_facet_against_dft(cl_env, fov, center):
    """A facet whose centre lies off the phase centre, part of it past the
    horizon (the facet phases and the continued n together), with w and 1/n
    and without 1/n: against the float64 DFT and ducc0."""
    ducc0 = pytest.importorskip("ducc0.wgridder", reason="ducc0 (the peer) is not installed")
    epsilon = 1e-7
    uvw, freq, vis, wgt, dirty, pixsize_x, pixsize_y = _observation(fov, False)
    for divide_by_n in (True, False):
        common = dict(uvw=uvw, freq=freq, wgt=wgt, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
                      epsilon=epsilon, do_wgridding=True, divide_by_n=divide_by_n,
                      center_x=center[0], center_y=center[1])
        matrix = _dft_matrix(uvw, freq, NPIX, NPIX, pixsize_x, pixsize_y, True, divide_by_n,
                             *center)
        reference = ((vis * wgt).ravel() @ matrix).real.reshape(NPIX, NPIX)
        image = clgrid.vis2dirty(vis=vis, npix_x=NPIX, npix_y=NPIX,
                                 queue=_queue(cl_env, False), **common)
        assert _l2error(image, reference) <= epsilon
        predicted = clgrid.dirty2vis(dirty=dirty, queue=cl_env.queue, **common)
        assert _l2error(predicted, (np.conj(matrix) @ dirty.ravel()).reshape(vis.shape) * wgt) \
            <= epsilon
        assert _l2error(image, ducc0.vis2dirty(vis=vis, npix_x=NPIX, npix_y=NPIX, **common)) \
            <= 2 * epsilon


@pytest.mark.parametrize("do_w", [True, False])
def test_horizon_without_fp64(cl_env, without_fp64, do_w):
    """Devices without fp64 (float-float n - 1 and screens): a 120-degree field
    in single precision at epsilon 1e-5 against the float64 DFT, no double in
    any kernel."""
    from conftest import double_free
    epsilon = 1e-5
    uvw, freq, vis, wgt, dirty, pixsize_x, pixsize_y = _observation(120.0, True)
    imager = clgrid.Imager(cl_env.queue, uvw=uvw, freq=freq, npix_x=NPIX, npix_y=NPIX,
                           pixsize_x=pixsize_x, pixsize_y=pixsize_y, epsilon=epsilon,
                           do_wgridding=do_w, divide_by_n=False)
    assert imager.float_float
    matrix = _dft_matrix(uvw, freq, NPIX, NPIX, pixsize_x, pixsize_y, do_w, False)
    reference = ((vis.astype(np.complex128) * wgt).ravel() @ matrix).real.reshape(NPIX, NPIX)
    assert _l2error(imager.vis2dirty(vis, wgt), reference) <= epsilon
    expected = (np.conj(matrix) @ dirty.astype(np.float64).ravel()).reshape(vis.shape) * wgt
    assert _l2error(imager.dirty2vis(dirty, wgt), expected) <= epsilon
    assert double_free(without_fp64)


def test_n_minus_1_is_ducc0s():
    """clgrid.core.plan.n_minus_1 and max_eta: ducc0's formula on both sides of
    the horizon (no device)."""
    from clgrid.core.plan import ImageGeometry, n_minus_1
    r2 = np.array([0.0, 1e-12, 0.25, 1.0, 1.5, 4.0])
    expected = np.where(r2 <= 1, -r2 / (np.sqrt(np.abs(1 - r2)) + 1),
                        -np.sqrt(np.abs(r2 - 1)) - 1)
    assert np.array_equal(n_minus_1(r2), expected)
    assert n_minus_1(2.0) == -2.0
    geometry = ImageGeometry.from_arguments(npix_x=50, npix_y=50, pixsize_x=0.05,
                                            pixsize_y=0.05, epsilon=1e-5, do_wgridding=True)
    corner = 2 * (25 * 0.05) ** 2   # the first pixel, (-25, -25) pixels off centre
    assert geometry.max_eta == pytest.approx(1.0 + np.sqrt(corner - 1.0), rel=1e-15)

"""The ES kernel by Horner's rule (ducc0's piecewise polynomials), the CPU
spreader's and interpolator's default: against the float64 formula, and the
imaging results with it against the direct Fourier transform."""

import numpy as np
import pytest

from clgrid.core.eskernel import (
    HORNER_ERROR_SHARE,
    KERNEL_TABLE,
    KernelChoice,
    es_kernel,
    horner_coefficients,
    horner_error,
    horner_suits,
    horner_taps,
    horner_variables,
)
from clgrid.core.plan import TileShape
from clgrid.imaging import Imager, dft_dirty2vis, dft_vis2dirty

SUITED = sorted(key for key, (beta, _) in KERNEL_TABLE.items() if horner_suits(key[1], beta))


def _exact_taps(support, beta, t):
    return es_kernel(t[:, None] + np.arange(support) - support / 2.0, support, beta)


@pytest.mark.parametrize("sigma,support", SUITED, ids=[f"{s}-{w}" for s, w in SUITED])
def test_horner_taps_match_the_float64_kernel(sigma, support):
    """float64 and float32 Horner taps against the formula, at offsets the
    fit never saw (inside (0, 1): at t = 0 the formula cuts its first tap to
    0, see horner_error); float32 rounding is allowed on top (3e-7 of
    phi(0) = 1)."""
    beta, error_1d = KERNEL_TABLE[(sigma, support)]
    t = np.random.default_rng(support).uniform(1e-12, 1.0, 3001)
    exact = _exact_taps(support, beta, t)
    coefficients = horner_coefficients(support, beta)
    assert coefficients.shape == (max(12, support + 6) + 1, support)
    bound = HORNER_ERROR_SHARE * error_1d
    assert np.max(np.abs(horner_taps(coefficients, t) - exact)) <= bound
    single = horner_taps(coefficients, t.astype(np.float32), np.float32)
    assert np.max(np.abs(single - exact)) <= bound + 3e-7


def test_only_float64_rounding_limited_kernels_keep_exp():
    """The polynomials reach a hundredth of every kernel's aliasing error but
    those at float64 rounding (W >= 14, error ~1e-14)."""
    for (sigma, support), (beta, error) in KERNEL_TABLE.items():
        assert horner_suits(support, beta) or error < 1e-11, (sigma, support)
    assert horner_error(7, KERNEL_TABLE[(2.0, 7)][0]) < 1e-9
    tiles = TileShape(16, 16, vector=True, kernel_eval="horner")
    floor = KernelChoice(16, KERNEL_TABLE[(2.5, 16)][0], 2.5, KERNEL_TABLE[(2.5, 16)][1])
    small = KernelChoice(2, KERNEL_TABLE[(1.5, 2)][0], 1.5, KERNEL_TABLE[(1.5, 2)][1])
    large = KernelChoice(7, KERNEL_TABLE[(2.0, 7)][0], 2.0, KERNEL_TABLE[(2.0, 7)][1])
    assert tiles.kernel_eval_for(floor) == "exp"
    assert tiles.kernel_eval_for(small) == "horner"
    assert tiles.kernel_eval_for(large) == "horner"
    assert TileShape(16, 16, vector=True).kernel_eval_for(large) == "exp"


def test_edge_taps_use_square_root_variables():
    t = np.array([0.0, 0.25, 1.0])
    x = horner_variables(t, 4)
    assert np.allclose(x[:, 0], [-1.0, 0.0, 1.0])
    assert np.allclose(x[:, 1], [-1.0, -0.5, 1.0]) and np.allclose(x[:, 2], x[:, 1])
    assert np.allclose(x[:, 3], [1.0, 2.0 * np.sqrt(0.75) - 1.0, -1.0])


def test_kernel_eval_is_validated():
    with pytest.raises(ValueError, match="kernel_eval must be one of"):
        TileShape(16, 16, vector=True, kernel_eval="table").check(7)
    TileShape(8, 32, kernel_eval="horner").check(7)           # the GPU kernel's lanes too
    with pytest.raises(ValueError, match="not tables"):
        TileShape(8, 32, kernel_eval="horner").check(7, wide=True)
    with pytest.raises(ValueError, match="at most 8 kernel taps"):
        TileShape(16, 8, vector=True).check(9)


def _observation(n_rows=120, n_chan=2, seed=5):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-300.0, 300.0, (n_rows, 3))
    uvw[:, 2] *= 3.0
    freq = np.linspace(1.0e9, 1.1e9, n_chan)
    vis = rng.normal(size=(n_rows, n_chan)) + 1j * rng.normal(size=(n_rows, n_chan))
    return uvw, freq, vis


GEOMETRY = {"npix_x": 48, "npix_y": 40, "pixsize_x": 5e-3, "pixsize_y": 6e-3}


@pytest.mark.parametrize("epsilon,precision", [(1e-4, "single"), (1e-5, "single"),
                                               (1e-4, "double"), (1e-7, "double"),
                                               (1e-10, "double")])
@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("tile", [dict(tile_u=16, lanes=16, vector=True, plane_block=3),
                                  dict(tile_u=32, lanes=32, vector=True, plane_block=2),
                                  dict(tile_u=16, lanes=16, chunk_points=48, groups=2),
                                  dict(tile_u=16, lanes=16, chunk_points=48, plane_block=3)],
                         ids=["16x16", "32x32", "gpu-lanes-16x16-chunks",
                              "gpu-lanes-16x16-blocks3"])
@pytest.mark.sweep
def test_horner_gridding_matches_the_direct_transform(cl_env, epsilon, precision, do_w, tile):
    """Both directions with the Horner taps (forced, on any device) within
    epsilon of the direct transform, and adjoint to float rounding; tiles of
    one vector of columns and of two, and the GPU kernel's lanes."""
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    if tile.get("vector"):
        cl_env.require_vector_tiles()
    uvw, freq, vis = _observation()
    complex_type = np.complex64 if precision == "single" else np.complex128
    real_type = np.float32 if precision == "single" else np.float64
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=do_w,
                    precision=precision, tiles=TileShape(**tile, kernel_eval="horner"),
                    **GEOMETRY)
    assert imager.engine.spreader.kernel_eval == "horner"
    assert imager.engine.interpolator.kernel_eval == "horner"
    dirty = imager.vis2dirty(vis.astype(complex_type))
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    assert np.linalg.norm(dirty - reference) / np.linalg.norm(reference) <= epsilon
    image = np.random.default_rng(6).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    predicted = imager.dirty2vis(image.astype(real_type))
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w,
                             pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    assert np.linalg.norm(predicted - expected) / np.linalg.norm(expected) <= epsilon
    left = np.vdot(image, dirty.astype(np.float64))
    right = np.vdot(predicted.astype(np.complex128), vis).real
    rounding = 1e-5 if precision == "single" else 1e-12
    assert abs(left - right) <= rounding * abs(left)


@pytest.mark.parametrize("epsilon", [1e-4, 1e-5])
def test_points_on_cell_boundaries_stay_finite(cl_env, epsilon):
    """Points whose footprint starts exactly on, or a rounding error from, a
    cell boundary (offset t = 0 or just below after rounding: the Horner
    taps take sqrt(t)); the VLA example Measurement Set has such points."""
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    freq = np.array([1.0e9])
    probe = Imager(cl_env.queue, uvw=np.zeros((64, 3)), freq=freq, epsilon=epsilon,
                   **GEOMETRY)
    support, metres_per_cell = probe.kernel_choice.support, 299792458.0 / freq[0] / (
        probe.nu * GEOMETRY["pixsize_x"])
    rng = np.random.default_rng(9)
    cells = rng.integers(-20, 20, 64) + support / 2.0 + rng.choice([-1e-13, 0.0, 1e-13], 64)
    uvw = np.stack([cells * metres_per_cell, -cells * metres_per_cell * probe.nu / probe.nv
                    * GEOMETRY["pixsize_x"] / GEOMETRY["pixsize_y"], np.zeros(64)], axis=1)
    vis = (rng.normal(size=(64, 1)) + 1j * rng.normal(size=(64, 1))).astype(np.complex64)
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=epsilon, **GEOMETRY)
    dirty = imager.vis2dirty(vis)
    reference = dft_vis2dirty(uvw, freq, vis, **GEOMETRY)
    assert np.all(np.isfinite(dirty))
    assert np.linalg.norm(dirty - reference) / np.linalg.norm(reference) <= epsilon
    predicted = imager.dirty2vis(dirty)
    assert np.all(np.isfinite(predicted))

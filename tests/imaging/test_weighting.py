"""Imaging weights on the device against a plain float64 numpy reference."""

import numpy as np
import pytest

from clgrid.imaging.weighting import ImageWeighting

from weighting_reference import C, weights_reference


def _samples(rng, nrow, nchan, max_uv_m):
    uvw_m = rng.uniform(-max_uv_m, max_uv_m, (nrow, 3))
    freq_hz = np.linspace(1.0e9, 1.4e9, nchan)
    weight = rng.uniform(0.5, 2.0, (nrow, nchan)).astype(np.float32)
    weight[rng.random((nrow, nchan)) < 0.1] = 0  # flagged samples
    return uvw_m, freq_hz, weight


@pytest.mark.tiny
@pytest.mark.parametrize("scheme,robust", [("natural", 0.0), ("uniform", 0.0),
                                           ("briggs", -1.0), ("briggs", 0.0), ("briggs", 1.5)])
def test_weights_match_float64_reference(cl_env, scheme, robust):
    rng = np.random.default_rng(7)
    nrow, nchan, npix = (12, 3, 8) if cl_env.tiny else (3000, 16, 64)
    pixsize = np.radians(0.5)
    # |u| up to ~0.6 of the half grid, with some samples off it on purpose
    max_uv_m = 0.7 * (npix / 2) / (npix * pixsize) * C / 1.4e9
    uvw_m, freq_hz, weight = _samples(rng, nrow, nchan, max_uv_m)
    uvw_m[:2] *= 3  # far out: off the grid
    operation = ImageWeighting(cl_env.queue, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                               pixsize_y=pixsize, scheme=scheme, robust=robust)
    result = operation(uvw_m, freq_hz, weight)
    reference, n_outside = weights_reference(uvw_m, freq_hz, weight, npix, npix, pixsize,
                                             pixsize, scheme, robust)
    assert result.dtype == np.float32 and result.shape == weight.shape
    np.testing.assert_allclose(result, reference, rtol=2e-5, atol=1e-7 * reference.max())
    assert operation.n_outside == n_outside
    if scheme != "natural":
        assert n_outside > 0
        assert np.all(result[weight == 0] == 0)


def test_uniform_is_one_over_count_for_equal_weights(cl_env):
    """Equal natural weights: uniform weights are 1 / (samples in the cell)."""
    pixsize = np.radians(1.0)
    npix = 16
    cell_m = C / 1e9 / (npix * pixsize)  # one uv cell in metres at 1 GHz
    uvw_m = np.array([[0, 0, 0], [0.1, 0.1, 0], [-0.1, -0.1, 0],  # 3 in the centre cell
                      [2, 3, 0], [-2, -3, 0],                     # conjugates: one cell
                      [5, -1, 0]], float) * cell_m
    weight = np.ones((6, 1), np.float32)
    operation = ImageWeighting(cl_env.queue, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                               pixsize_y=pixsize, scheme="uniform")
    result = operation(uvw_m, np.array([1e9]), weight)[:, 0]
    np.testing.assert_allclose(result, [1 / 3, 1 / 3, 1 / 3, 1 / 2, 1 / 2, 1], rtol=1e-6)


def test_briggs_limits(cl_env):
    """Robust +5 tends to natural, robust -5 to uniform (up to a scale)."""
    rng = np.random.default_rng(3)
    pixsize, npix = np.radians(0.5), 64
    uvw_m, freq_hz, weight = _samples(rng, 2000, 4, 0.3 * C / 1.4e9 / (2 * pixsize))
    results = {}
    for scheme, robust in (("briggs", 5.0), ("briggs", -5.0), ("uniform", 0.0)):
        results[scheme, robust] = ImageWeighting(
            cl_env.queue, npix_x=npix, npix_y=npix, pixsize_x=pixsize, pixsize_y=pixsize,
            scheme=scheme, robust=robust)(uvw_m, freq_hz, weight)
    used = weight > 0
    natural_ratio = results["briggs", 5.0][used] / weight[used]
    assert np.ptp(natural_ratio) / natural_ratio.mean() < 1e-3
    uniform_ratio = results["briggs", -5.0][used] / results["uniform", 0.0][used]
    assert np.ptp(uniform_ratio) / uniform_ratio.mean() < 1e-3


def test_streamed_chunks_equal_one_pass(cl_env):
    rng = np.random.default_rng(5)
    pixsize, npix = np.radians(0.5), 32
    uvw_m, freq_hz, weight = _samples(rng, 600, 4, 0.3 * C / 1.4e9 / (2 * pixsize))
    operation = ImageWeighting(cl_env.queue, npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                               pixsize_y=pixsize, scheme="briggs", robust=0.5)
    whole = operation(uvw_m, freq_hz, weight)
    operation.reset()
    parts = np.array_split(np.arange(600), 4)
    for rows in parts:
        operation.add(uvw_m[rows], freq_hz, weight[rows])
    streamed = np.concatenate([operation.apply(uvw_m[rows], freq_hz, weight[rows])
                               for rows in parts])
    np.testing.assert_allclose(streamed, whole, rtol=1e-5)


@pytest.mark.parametrize("change,error,message", [
    (dict(scheme="superuniform"), ValueError, "unknown weighting 'superuniform'"),
    (dict(npix_x=33), ValueError, "npix_x and npix_y must be even"),
    (dict(pixsize_x=-1.0), ValueError, "pixel sizes must be positive"),
    (dict(robust=float("nan")), ValueError, "robust must be finite"),
])
def test_bad_parameters(cl_env, change, error, message):
    kwargs = dict(npix_x=32, npix_y=32, pixsize_x=1e-3, pixsize_y=1e-3, scheme="uniform")
    kwargs.update(change)
    with pytest.raises(error, match=message):
        ImageWeighting(cl_env.queue, **kwargs)


def test_bad_inputs(cl_env):
    operation = ImageWeighting(cl_env.queue, npix_x=32, npix_y=32, pixsize_x=1e-3,
                               pixsize_y=1e-3, scheme="uniform")
    uvw_m, freq_hz, weight = np.zeros((4, 3)), np.array([1e9, 2e9]), np.ones((4, 2))
    with pytest.raises(ValueError, match="nrow, nchan"):
        operation(uvw_m, freq_hz, np.ones((4, 3)))
    with pytest.raises(ValueError, match="NaN"):
        operation(np.full((4, 3), np.nan), freq_hz, weight)
    with pytest.raises(ValueError, match="non-negative"):
        operation(uvw_m, freq_hz, -weight)
    with pytest.raises(ValueError, match=r"\(nrow, 3\)"):
        operation(np.zeros((4, 2)), freq_hz, weight)


RACE_SCRIPT = """
import numpy as np, pyopencl as cl
import clgrid
from clgrid.imaging.weighting import ImageWeighting
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(1)
uvw_m = rng.uniform(-2, 2, (10, 3)); uvw_m[0] *= 50
weight = np.ones((10, 2), np.float32); weight[3, 1] = 0
operation = ImageWeighting(queue, npix_x=8, npix_y=8, pixsize_x=0.05, pixsize_y=0.05,
                           scheme="briggs", robust=0.0, atomics="cas",
                           deterministic=False)
result = operation(uvw_m, np.array([1e9, 1.2e9]), weight)
assert np.all(np.isfinite(result)) and result[3, 1] == 0, result
print("done", operation.n_outside)
"""


@pytest.mark.tiny
def test_weighting_kernels_have_no_race_under_oclgrind(request):
    from oclgrind_check import run_clean
    result = run_clean(request.config, RACE_SCRIPT, timeout=300)
    assert "done 2" in result.stdout, result.stdout

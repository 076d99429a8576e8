"""Image-object GCF with hardware linear interpolation: accuracy against the
ES kernel evaluated exactly at each visibility's true position (float64),
within the stated bound of clgrid.gridders.image_gcf.interpolation_error_bound, and
better than a nearest-sample table with the same number of stored samples."""

import numpy as np
import pytest

from clgrid.gridders.dispatch import ImageParams
from clgrid.gcf import es_kernel, separable_gcf, w_projection_gcf
from clgrid.gridders.gridder import Gridder
from clgrid.gridders.image_gcf import image_texels, interpolation_error_bound

from test_gridder_reference import C, random_uvw, random_vis

FREQ_HZ = np.array([1.0e9, 1.1e9])


def exact_reference(uvw_m, freq_hz, vis, support, beta, nx, ny, cell):
    """Grid with the ES kernel evaluated exactly at the unquantised position,
    plus the sum of |V| reaching each grid point (for the error bound)."""
    npol = vis.shape[2]
    grid = np.zeros((npol, ny, nx), np.complex128)
    magnitude = np.zeros((ny, nx))
    half = support / 2
    for row in range(uvw_m.shape[0]):
        for chan, freq in enumerate(freq_hz):
            u, v, w = uvw_m[row] * freq / C
            value = vis[row, chan].astype(np.complex128)
            if w < 0:
                u, v, value = -u, -v, np.conj(value)
            x = u * nx * cell + nx // 2
            y = v * ny * cell + ny // 2
            cols = np.arange(int(np.ceil(x - half)), int(np.floor(x + half)) + 1)
            rows = np.arange(int(np.ceil(y - half)), int(np.floor(y + half)) + 1)
            if cols[0] < 0 or rows[0] < 0 or cols[-1] >= nx or rows[-1] >= ny:
                continue
            wu = es_kernel(2 * (cols - x) / support, beta)
            wv = es_kernel(2 * (rows - y) / support, beta)
            grid[:, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] += (
                value[:, None, None] * np.outer(wv, wu)[None])
            magnitude[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] += np.abs(value).max()
    return grid, magnitude


def _setup(rng, nx, support, nrow, npol=1):
    cell = 1.0 / (nx * 50.0)
    uv_max_m = 0.8 * (nx / 2 - support) * 50.0 * C / FREQ_HZ.max()
    uvw = random_uvw(rng, nrow, uv_max_m, 50.0)
    return uvw, cell, random_vis(rng, (nrow, FREQ_HZ.size, npol))


def test_texel_layout():
    gcf = separable_gcf(4, 3)
    texels = image_texels(gcf)
    assert texels.shape == (1, 12, 4)
    # texel k = j O + f holds table[f, j]: distance (k - 6) / 3, peak at k = 6
    assert np.argmax(texels[0, :, 0]) == 6
    assert np.allclose(texels[0, :, 0], es_kernel((np.arange(12) - 6) / 3 * 2 / 4, gcf.beta))


@pytest.mark.parametrize("support, image_oversample, npol", [(8, 4, 1), (7, 8, 2), (16, 2, 4)])
def test_image_within_stated_bound_and_beats_table(cl_env, support, image_oversample, npol):
    if not cl_env.profile.image_support:
        pytest.skip("no image support")
    rng = np.random.default_rng(support)
    nx = 64
    uvw, cell, vis = _setup(rng, nx, support, 60, npol)
    gcf = separable_gcf(support, image_oversample)
    reference, magnitude = exact_reference(uvw, FREQ_HZ, vis, support, gcf.beta, nx, nx, cell)
    image = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=npol, strategy="image")
    assert image.strategy == "image" and image.plan(uvw, FREQ_HZ).n_records > 0
    result = image(uvw, FREQ_HZ, vis.astype(np.complex64))
    bound_1d = interpolation_error_bound(gcf, image.choice.image.position_oversample)
    bound_2d = 2 * bound_1d + bound_1d ** 2 + 1e-6      # + float32 rounding
    error = np.abs(result - reference).max(axis=0)
    covered = magnitude > 0
    assert np.all(error[covered] <= bound_2d * magnitude[covered])
    assert np.all(result[:, ~covered] == 0)
    # a nearest-sample table with the same samples per cell is clearly worse
    table = Gridder(cl_env.queue, gcf, nx, nx, cell, npol=npol, strategy="scatter")(
        uvw, FREQ_HZ, vis.astype(np.complex64))
    table_error = np.abs(table - reference).max()
    assert error.max() < 0.5 * table_error, (error.max(), table_error)


def test_image_oversample_resamples_the_kernel(cl_env):
    if not cl_env.profile.image_support:
        pytest.skip("no image support")
    rng = np.random.default_rng(3)
    nx = 48
    uvw, cell, vis = _setup(rng, nx, 6, 40)
    gcf = separable_gcf(6, 16)
    reference, magnitude = exact_reference(uvw, FREQ_HZ, vis, 6, gcf.beta, nx, nx, cell)
    errors = []
    for samples in (2, 8):
        gridder = Gridder(cl_env.queue, gcf, nx, nx, cell, strategy="image",
                          image_params=ImageParams(image_oversample=samples))
        errors.append(np.abs(gridder(uvw, FREQ_HZ, vis) - reference).max())
    assert errors[1] < errors[0] / 4       # linear interpolation: error ~ 1 / O^2


def test_image_refusals(cl_env):
    gcf = w_projection_gcf(8, 4, 3, 100.0, 0.01)
    with pytest.raises(ValueError, match="separable"):
        Gridder(cl_env.queue, gcf, 64, 64, 1e-4, strategy="image")


@pytest.mark.tiny
def test_tiny_image(cl_env):
    """Small enough for Oclgrind: image reads inside the scatter kernel."""
    if not cl_env.profile.image_support:
        pytest.skip("no image support")
    rng = np.random.default_rng(4)
    uvw, cell, vis = _setup(rng, 16, 3, 6)
    gcf = separable_gcf(3, 4)
    reference, magnitude = exact_reference(uvw, FREQ_HZ, vis, 3, gcf.beta, 16, 16, cell)
    result = Gridder(cl_env.queue, gcf, 16, 16, cell, strategy="image")(uvw, FREQ_HZ, vis)
    bound = 2 * interpolation_error_bound(gcf) * 1.01 + 1e-6
    assert np.all(np.abs(result - reference)[0] <= bound * magnitude + 1e-12)

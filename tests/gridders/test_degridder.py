"""Degridder against a float64 reference, and as the exact adjoint of the Gridder."""

import numpy as np
import pytest

from clgrid.gcf import separable_gcf, user_gcf, w_projection_gcf
from clgrid.gridders.degridder import Degridder
from clgrid.gridders.gridder import Gridder

from gridder_reference import C, degrid_reference, random_uvw, random_vis

FREQ_HZ = np.array([0.9e9, 1.0e9])


def _uvw(rng, nx, support, nrow=150, w_max_m=0.0):
    cell = 1.0 / (nx * 40.0)
    uv_max_m = 0.8 * (nx / 2 - support) * 40.0 * C / FREQ_HZ.max()
    return random_uvw(rng, nrow, uv_max_m, w_max_m), cell


CASES = [  # support, oversample, npol, precision, tiles (None: records of equal points)
    (7, 8, 1, np.float32, None),
    (8, 4, 4, np.float32, {"tile_u": 8, "lanes": 8}),
    (3, 2, 2, np.float64, None),
    (16, 8, 4, np.float64, None),
]


@pytest.mark.parametrize("support, oversample, npol, precision, tiles", CASES)
def test_degrid_matches_reference(cl_env, support, oversample, npol, precision, tiles):
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(support)
    nx, ny = 70, 70
    uvw, cell = _uvw(rng, nx, support)
    gcf = separable_gcf(support, oversample)
    grid = random_vis(rng, (npol, ny, nx))
    weights = rng.uniform(0.5, 1.5, (uvw.shape[0], FREQ_HZ.size, 1))
    degridder = Degridder(cl_env.queue, gcf, nx, ny, cell, npol=npol, precision=precision,
                          tiles=tiles)
    result = degridder(grid, uvw, FREQ_HZ, weights)
    reference = degrid_reference(grid, uvw, FREQ_HZ, gcf, nx, ny, cell, weights)
    tolerance = 1e-5 if precision == np.float32 else 1e-12
    assert np.max(np.abs(result - reference)) / np.max(np.abs(reference)) < tolerance


def _inner(a, b):
    return np.vdot(a.astype(np.complex128), b.astype(np.complex128))


@pytest.mark.parametrize("precision, table", [(np.float32, "separable"), (np.float64, "full"),
                                              (np.float64, "user")])
@pytest.mark.parametrize("npol", [1, 4])
def test_adjoint(cl_env, precision, table, npol):
    """<G x, y> = <x, G^H y> for random x (visibilities) and y (grid)."""
    if precision == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    rng = np.random.default_rng(npol)
    nx, ny, support = 64, 54, 6
    uvw, cell = _uvw(rng, nx, support, w_max_m=200.0)
    w_max_lambda = 200.0 * FREQ_HZ.max() / C
    if table == "separable":
        gcf = separable_gcf(support, 4)
    elif table == "full":
        gcf = w_projection_gcf(support, 4, 4, w_max_lambda, nx * cell)
    else:
        gcf = user_gcf(support, 4, table=random_vis(rng, (4, 4, 4, support, support)),
                       w_step_lambda=w_max_lambda / 3)
    complex_dtype = np.complex64 if precision == np.float32 else np.complex128
    x = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol), complex_dtype)
    y = random_vis(rng, (npol, ny, nx), complex_dtype)
    weights = rng.uniform(0.5, 2.0, x.shape)
    for conjugate in (False, True):
        uvw_used = uvw.copy()
        if not conjugate:
            uvw_used[:, 2] = np.abs(uvw_used[:, 2])   # keep it linear (no conjugation)
        kwargs = dict(npol=npol, precision=precision, conjugate_negative_w=conjugate)
        gx = Gridder(cl_env.queue, gcf, nx, ny, cell, **kwargs)(uvw_used, FREQ_HZ, x, weights)
        ghy = Degridder(cl_env.queue, gcf, nx, ny, cell, **kwargs)(y, uvw_used, FREQ_HZ,
                                                                      weights)
        left, right = _inner(gx, y), _inner(x, ghy)
        scale = np.linalg.norm(gx) * np.linalg.norm(y)
        tolerance = 1e-5 if precision == np.float32 else 1e-12
        if conjugate:
            # conjugating w < 0 makes G antilinear: the real inner product holds
            assert abs(left.real - right.real) < tolerance * scale
        else:
            assert abs(left - right) < tolerance * scale
        assert abs(left) > 1e-3 * scale   # not trivially zero


def test_degrid_records_equal_tiles(cl_env):
    """Records of equal points (each footprint summed once) predict what one
    footprint a point (the tile bins) does."""
    rng = np.random.default_rng(2)
    uvw, cell = _uvw(rng, 64, 4)
    uvw = np.repeat(uvw, 3, axis=0) * (1 + 1e-7 * rng.standard_normal((uvw.shape[0] * 3, 1)))
    gcf = separable_gcf(4, 4)
    grid = random_vis(rng, (1, 64, 64))
    results = []
    for tiles in (None, {"tile_u": 8, "lanes": 8}):
        degridder = Degridder(cl_env.queue, gcf, 64, 64, cell, tiles=tiles)
        results.append(degridder(grid, uvw, FREQ_HZ))
        ratio = degridder.last_stats["compression_ratio"]
        assert ratio > 2.0 if tiles is None else ratio == 1.0
    assert np.max(np.abs(results[0] - results[1])) < 1e-6 * np.max(np.abs(results[1]))


@pytest.mark.parametrize("support", [12, 72])
def test_degrid_tiles_auto_any_support(cl_env, support):
    """tiles='auto' (the device's tile, lane tiles above the vector tile's
    W 64 on CPUs) predicts what the records do, at any support."""
    rng = np.random.default_rng(support)
    nx = 2 * support + 32
    uvw, cell = _uvw(rng, nx, support, nrow=30)
    gcf = separable_gcf(support, 2)
    grid = random_vis(rng, (1, nx, nx))
    by_records = Degridder(cl_env.queue, gcf, nx, nx, cell)(grid, uvw, FREQ_HZ)
    by_tiles = Degridder(cl_env.queue, gcf, nx, nx, cell, tiles="auto")(grid, uvw, FREQ_HZ)
    assert np.abs(by_records).max() > 0
    assert np.max(np.abs(by_tiles - by_records)) < 1e-5 * np.max(np.abs(by_records))


def test_degrid_tiles_bad_name(cl_env):
    with pytest.raises(ValueError, match="tiles must be"):
        Degridder(cl_env.queue, separable_gcf(4, 4), 64, 64, 1e-4, tiles="big")

"""Plain float64 references for the table-based gridder tests (Romein's
Algorithm 1: for every visibility, add V * GCF over its footprint), and the
cases the gridder tests share (:func:`setup_case`, :func:`random_user_tables_case`).

Written from the paper and the documented conventions of clgrid.gcf, not
from the device set points, so that the tests compare two independent codes.
"""

import numpy as np

import clgrid
from clgrid.io.simulate import simulate_observation

C = 299_792_458.0


def footprints(uvw_m, freq_hz, gcf, nx, ny, cell, conjugate=True):
    """Yield (row, chan, u0, v0, fu, fv, plane, conjugated) for on-grid visibilities."""
    S, O = gcf.support, gcf.oversample
    for row in range(uvw_m.shape[0]):
        for chan, freq in enumerate(freq_hz):
            u, v, w = uvw_m[row] * freq / C
            flip = conjugate and w < 0
            if flip:
                u, v, w = -u, -v, -w
            ku = int(np.rint((u * nx * cell + nx // 2) * O))
            kv = int(np.rint((v * ny * cell + ny // 2) * O))
            # footprint from ceil(k / O - S / 2): distances [-S/2, S/2)
            u0 = int(np.ceil(ku / O - S / 2))
            v0 = int(np.ceil(kv / O - S / 2))
            fu = u0 * O - ku + (S * O) // 2
            fv = v0 * O - kv + (S * O) // 2
            assert 0 <= fu < O and 0 <= fv < O
            plane = int(np.rint(w / gcf.w_step_lambda)) if gcf.w_planes > 1 else 0
            if u0 < 0 or v0 < 0 or u0 + S > nx or v0 + S > ny or not 0 <= plane < gcf.w_planes:
                continue
            yield row, chan, u0, v0, fu, fv, plane, flip


def kernel_at(gcf, plane, fu, fv):
    if gcf.separable:
        return np.outer(gcf.table_v[plane, fv], gcf.table_u[plane, fu])
    return gcf.table[plane, fv, fu]


def grid_reference(uvw_m, freq_hz, vis, gcf, nx, ny, cell, weights=None, flags=None,
                   conjugate=True):
    npol = vis.shape[2]
    S = gcf.support
    grid = np.zeros((npol, ny, nx), np.complex128)
    weights = np.ones(vis.shape) if weights is None else np.broadcast_to(weights, vis.shape)
    flags = np.zeros(vis.shape, bool) if flags is None else np.broadcast_to(flags, vis.shape)
    for row, chan, u0, v0, fu, fv, plane, flip in footprints(uvw_m, freq_hz, gcf, nx, ny,
                                                             cell, conjugate):
        value = vis[row, chan].astype(np.complex128)
        if flip:
            value = np.conj(value)
        value = value * weights[row, chan] * ~flags[row, chan]
        grid[:, v0:v0 + S, u0:u0 + S] += value[:, None, None] * kernel_at(gcf, plane, fu, fv)
    return grid


def degrid_reference(grid, uvw_m, freq_hz, gcf, nx, ny, cell, weights=None, conjugate=True):
    npol = grid.shape[0]
    S = gcf.support
    out = np.zeros((uvw_m.shape[0], len(freq_hz), npol), np.complex128)
    for row, chan, u0, v0, fu, fv, plane, flip in footprints(uvw_m, freq_hz, gcf, nx, ny,
                                                             cell, conjugate):
        g = kernel_at(gcf, plane, fu, fv)
        value = np.sum(grid[:, v0:v0 + S, u0:u0 + S] * np.conj(g)[None], axis=(1, 2))
        out[row, chan] = np.conj(value) if flip else value
    if weights is not None:
        out *= np.broadcast_to(weights, out.shape)
    return out


def random_uvw(rng, nrow, uv_max_m, w_max_m=0.0):
    uvw = rng.uniform(-uv_max_m, uv_max_m, (nrow, 3))
    uvw[:, 2] = rng.uniform(-w_max_m, w_max_m, nrow)
    return uvw


def random_vis(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


FREQ_HZ = np.array([1.0e9, 1.05e9, 1.1e9])


def setup_case(rng, nx, ny, nrow, support, fill=0.8, w_max_m=0.0, tracks=False):
    """uvw in metres whose footprints mostly land on an nx x ny grid."""
    cell = 1.0 / (nx * 50.0)            # uv cell of 50 wavelengths
    uv_max_lambda = fill * (min(nx, ny) / 2 - support) * 50.0
    uv_max_m = uv_max_lambda * C / FREQ_HZ.max()
    if tracks:
        uvw = simulate_observation(duration_h=1.0, integration_s=60.0,
                                   n_baselines=max(1, nrow // 60))
        uvw = uvw / np.abs(uvw[:, :2]).max() * uv_max_m
    else:
        uvw = random_uvw(rng, nrow, uv_max_m, w_max_m)
    return uvw, cell


def relative_error(result, reference):
    """Largest deviation over the largest reference value."""
    return np.max(np.abs(result - reference)) / np.max(np.abs(reference))




def random_user_tables_case(separable: bool):
    """(rng, uvw, cell, gcf, nx, ny): random complex user tables, different on
    u and v (and in every slice of a full table), over 3 w planes."""
    rng = np.random.default_rng(11)
    support, oversample, planes, nx, ny = 5, 3, 3, 58, 46
    uvw, cell = setup_case(rng, nx, ny, 150, support, w_max_m=200.0)
    w_step = 200.0 * FREQ_HZ.max() / C / (planes - 1)
    shape = (planes, oversample, support) if separable else (
        planes, oversample, oversample, support, support)
    tables = [random_vis(rng, shape) for _ in range(2)]
    gcf = (clgrid.gcf.user_gcf(support, oversample, table_u=tables[0], table_v=tables[1],
                               w_step_lambda=w_step) if separable else
           clgrid.gcf.user_gcf(support, oversample, table=tables[0], w_step_lambda=w_step))
    return rng, uvw, cell, gcf, nx, ny

"""GCF tables read as OpenCL images (``gcf_read='image'``, ``'image-linear'``).

``'image'`` must give the buffer path's weights (the same texels through a
nearest sampler); ``'image-linear'`` interpolates between the table's
oversampling steps at positions 16 times finer (Romein 2012, 4.1), so it
must land much closer to the exact kernel than the buffer table of the same
steps: checked against float64 brute-force sums with the ES kernel
evaluated at the exact positions (separable), against a table sampled at
the finer positions (W projection: the same zero-padded FFT, finer), and
against a direct DFT of point sources (degridding).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import clgrid
from clgrid.core.table import (GCF_READS, LINEAR_STEPS, gcf_image_fits, gcf_image_shape,
                               gcf_texels, linear_steps)
from clgrid.gcf import (es_kernel, footprint_distances, grid_correction, separable_gcf,
                        user_gcf, w_projection_gcf)
from clgrid.gridders.dispatch import choose_gcf_read, explain

from fake_profiles import fake
from gridder_reference import C, degrid_reference, grid_reference, random_vis

IMAGES = ("image", "image-linear")
FREQ_HZ = np.array([1.0e9, 1.1e9])


def _require_images(cl_env) -> None:
    if not cl_env.profile.image_support:
        pytest.skip(f"{cl_env.profile.device_name}: no image support")


#: Phase slope (radians a cell) of the complex separable test kernel.
PHASE = 0.4


def _complex_rows(support: int, oversample: int):
    """A complex separable table: the ES kernel times ``exp(i PHASE d)``,
    ``d`` the distance (u) and ``-d`` (v): one continuous kernel of the
    distance, as linear filtering assumes."""
    base = separable_gcf(support, oversample)
    ramp = np.exp(1j * PHASE * footprint_distances(support, oversample))[None]
    return user_gcf(support, oversample, table_u=base.table_u * ramp,
                    table_v=base.table_v * ramp.conj())


def _table(kind: str, support: int, oversample: int, fov_rad: float):
    if kind == "separable":
        return separable_gcf(support, oversample)
    if kind == "complex":
        return _complex_rows(support, oversample)
    if kind == "full-one-plane":   # a 2-D image, not 3-D
        return w_projection_gcf(support, oversample, 1, 0.0, fov_rad)
    return w_projection_gcf(support, oversample, 3, 40.0, fov_rad)


def _case(rng, nx: int, nrow: int, support: int, w_max_lambda: float = 0.0):
    cell = 1.0 / (nx * 10.0)                  # uv cell of 10 wavelengths
    uv_max = (nx / 2 - support - 1) * 10.0 * C / FREQ_HZ.max()
    uvw = rng.uniform(-uv_max, uv_max, (nrow, 3))
    uvw[:, 2] = rng.uniform(-1, 1, nrow) * w_max_lambda * C / FREQ_HZ.max()
    return uvw, cell


def _relative(result, reference) -> float:
    return float(np.abs(result - reference).max() / np.abs(reference).max())


def test_texel_layout_is_the_table_by_distance():
    """Texel m = j O + f holds table[f, j]: consecutive texels are
    consecutive distances (what linear filtering needs)."""
    gcf = separable_gcf(5, 3)
    texels = gcf_texels(gcf.table_u, True, 1)
    assert texels.shape == (1, 15, 1)
    for f in range(3):
        for j in range(5):
            assert texels[0, j * 3 + f, 0] == np.float32(gcf.table_u[0, f, j].real)
    assert np.all(np.diff(texels[0, :8, 0]) > 0)    # rising towards the centre
    full = w_projection_gcf(4, 2, 2, 10.0, 0.01)
    texels = gcf_texels(full.table, False, 4)
    assert texels.shape == (2, 8, 8, 4) and not texels[..., 2:].any()
    assert texels[1, 3 * 2 + 1, 2 * 2 + 0, 1] == np.float32(full.table[1, 1, 0, 3, 2].imag)
    assert gcf_image_shape(4, 2, 2, False) == (8, 8, 2)
    assert gcf_image_shape(4, 2, 1, False) == (8, 8)
    assert gcf_image_shape(4, 2, 7, True) == (8, 7)


def test_dispatcher_picks_the_read_path_from_device_queries():
    gpu = fake()
    full = dict(separable=False)
    # a GPU reads buffers unless clgrid tune table measured images faster there:
    # images ran 1.1-5x slower on an H100 for every table kind (RESULTS)
    for kind in (dict(), full):
        read, why = choose_gcf_read(gpu, 16, 8, 32, **kind)
        assert read == "buffer" and "measured faster" in why
    assert choose_gcf_read(gpu, 16, 8, cached="image") == (
        "image", "the tuning cache: clgrid tune table measured it the faster here")
    assert choose_gcf_read(gpu, 16, 8, 32, method="tiles", **full)[0] == "buffer"
    assert choose_gcf_read(gpu, 16, 8, 32, method="records", **full)[0] == "buffer"
    read, why = choose_gcf_read(fake(image_support=False), 16, 8, **full)
    assert read == "buffer" and why == "no image support"
    read, why = choose_gcf_read(fake(device_type="cpu"), 16, 8, **full)
    assert read == "buffer" and "texture" in why
    read, why = choose_gcf_read(gpu, 16, 8, precision=np.float64, **full)
    assert read == "buffer" and "float32" in why
    read, why = choose_gcf_read(fake(image2d_max=(4096, 4096)), 256, 32, cached="image")
    assert read == "buffer" and "8192 x 1 exceeds" in why
    read, why = choose_gcf_read(fake(image3d_max=(2048, 2048, 2048)), 64, 64, 4,
                                separable=False)
    assert read == "buffer" and "4096 x 4096 x 4" in why
    assert choose_gcf_read(fake(device_type="cpu"), 16, 8, gcf_read="image-linear")[0] == \
        "image-linear"
    row = explain(fake(), 32, 4)
    assert row["gcf_read"].startswith("buffer (gpu: the buffer's reads measured faster")
    assert explain(fake(device_type="cpu"), 32, 4)["gcf_read"].startswith("buffer (the tile")
    assert explain(fake(device_type="cpu"), 72, 4)["gcf_read"].startswith("buffer (cpu")


@pytest.mark.parametrize("bad, match", [
    (dict(gcf_read="texture"), "gcf_read must be one of"),
    (dict(gcf_read="image", precision=np.float64), "float32"),
    (dict(gcf_read="image", deterministic=True, method="tiles"), "tile kernels"),
    (dict(gcf_read="image-linear", method="tiles"), "tile kernels"),
])
def test_gridder_refuses_bad_gcf_read_in_one_line(cl_env, bad, match):
    _require_images(cl_env)
    if bad.get("precision") == np.float64 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    with pytest.raises(ValueError, match=match) as error:
        clgrid.Gridder(cl_env.queue, separable_gcf(8, 4), 64, 64, 1e-3, **bad)
    assert "\n" not in str(error.value)


def test_degridder_refuses_images_with_tiles_and_fake_devices(cl_env, monkeypatch):
    _require_images(cl_env)
    with pytest.raises(ValueError, match="tile kernels"):
        clgrid.Degridder(cl_env.queue, separable_gcf(8, 4), 64, 64, 1e-3, tiles="auto",
                         gcf_read="image")
    # a device without images: the explicit request fails, the default keeps the buffer
    import clgrid.gridders.gridder as gridder_module
    from clgrid.device.profiles import DeviceProfile
    real = DeviceProfile.from_device
    monkeypatch.setattr(DeviceProfile, "from_device", classmethod(
        lambda cls, device: dataclasses.replace(real(device), image_support=False)))
    assert gridder_module.Operation is not None
    with pytest.raises(ValueError, match="impossible on .*: no image support"):
        clgrid.Gridder(cl_env.queue, separable_gcf(8, 4), 64, 64, 1e-3, gcf_read="image")
    assert clgrid.Gridder(cl_env.queue, separable_gcf(8, 4), 64, 64, 1e-3).gcf_read == "buffer"


@pytest.mark.parametrize("kind, npol", [("separable", 1), ("separable", 2), ("complex", 1),
                                        ("complex", 2), ("full", 1), ("full", 2),
                                        ("full-one-plane", 2)])
def test_image_gives_the_buffer_weights(cl_env, kind, npol):
    """'image' (nearest texel) grids and degrids as the buffer path does,
    and both match the float64 brute-force sum of the same table."""
    _require_images(cl_env)
    rng = np.random.default_rng(3)
    nx = 64
    uvw, cell = _case(rng, nx, 200, 8, w_max_lambda=40.0)
    gcf = _table(kind, 8, 4, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, npol)).astype(np.complex64)
    reference = grid_reference(uvw, FREQ_HZ, vis, gcf, nx, nx, cell)
    grids = {}
    for read in ("buffer", "image"):
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=npol,
                                 method="register", gcf_read=read)
        assert gridder.gcf_read == read
        grids[read] = gridder(uvw, FREQ_HZ, vis)
        assert _relative(grids[read], reference) < 2e-6
    assert _relative(grids["image"], grids["buffer"]) < 1e-6
    predicted = {}
    for read in ("buffer", "image"):
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, nx, cell, npol=npol,
                                     gcf_read=read)
        predicted[read] = degridder(reference, uvw, FREQ_HZ)
    expected = degrid_reference(reference, uvw, FREQ_HZ, gcf, nx, nx, cell)
    assert _relative(predicted["image"], expected) < 2e-6
    assert _relative(predicted["image"], predicted["buffer"]) < 2e-6


@pytest.mark.parametrize("kind", ["separable", "full"])
def test_image_reads_with_fixed_point_sums_repeat_bitwise(cl_env, kind):
    """deterministic=True with gcf_read='image': the register spread reads the
    image and adds its flushes in 64-bit fixed point: the same bits call
    after call, the buffer's grid to float rounding."""
    from clgrid.core.register import fixed_point_possible
    _require_images(cl_env)
    possible, why = fixed_point_possible(cl_env.profile, np.float32)
    if not possible:
        pytest.skip(f"no fixed-point register sums here: {why}")
    rng = np.random.default_rng(5)
    nx = 64
    uvw, cell = _case(rng, nx, 200, 8, w_max_lambda=40.0)
    gcf = _table(kind, 8, 4, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2)).astype(np.complex64)
    gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, gcf_read="image",
                             deterministic=True)
    assert gridder.method == "register" and gridder.atomic_path == "fixed64"
    first = gridder(uvw, FREQ_HZ, vis)
    assert np.array_equal(first, gridder(uvw, FREQ_HZ, vis))
    buffer = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, method="register")
    assert _relative(first, buffer(uvw, FREQ_HZ, vis)) < 1e-6


def _exact_es_grid(uvw, freq_hz, vis, support, beta, nx, cell, phase=0.0):
    """float64 brute force with the ES kernel (times ``exp(i phase d)`` in u,
    ``exp(-i phase d)`` in v) at the exact positions (footprint: the S cells
    within [-S/2, S/2) of the visibility)."""
    grid = np.zeros((vis.shape[2], nx, nx), np.complex128)
    for row in range(uvw.shape[0]):
        for chan, freq in enumerate(freq_hz):
            u, v, w = uvw[row] * freq / C
            value = vis[row, chan].astype(np.complex128)
            if w < 0:
                u, v, value = -u, -v, np.conj(value)
            x, y = u * nx * cell + nx // 2, v * nx * cell + nx // 2
            x0, y0 = int(np.ceil(x - support / 2)), int(np.ceil(y - support / 2))
            du, dv = x0 + np.arange(support) - x, y0 + np.arange(support) - y
            ku = es_kernel(2 * du / support, beta) * np.exp(1j * phase * du)
            kv = es_kernel(2 * dv / support, beta) * np.exp(-1j * phase * dv)
            grid[:, y0:y0 + support, x0:x0 + support] += \
                value[:, None, None] * np.outer(kv, ku)[None]
    return grid


@pytest.mark.parametrize("support, oversample, kind", [
    (8, 4, "separable"), (8, 16, "separable"), (5, 8, "separable"), (8, 4, "complex")])
def test_image_linear_separable_against_the_exact_kernel(cl_env, support, oversample, kind):
    """Linear filtering lands far closer to the exact kernel than the
    nearest sample of the same table: at O 4 and 16 (the table's error
    falls as 1/O, the interpolation's as 1/O^2, until the positions'
    quantisation, 1/(16 O), remains), for odd S O, real and complex."""
    _require_images(cl_env)
    rng = np.random.default_rng(5)
    nx = 64
    uvw, cell = _case(rng, nx, 150, support)
    gcf = _table(kind, support, oversample, nx * cell)
    beta = separable_gcf(support, oversample).beta
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1)).astype(np.complex64)
    exact = _exact_es_grid(uvw, FREQ_HZ, vis, support, beta, nx, cell,
                           PHASE if kind == "complex" else 0.0)
    errors = {}
    for read in GCF_READS:
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, method="register",
                                 gcf_read=read)
        errors[read] = _relative(gridder(uvw, FREQ_HZ, vis), exact)
    assert errors["image"] == pytest.approx(errors["buffer"], rel=1e-3)
    assert errors["image-linear"] < errors["buffer"] / 3, errors
    # the bound: interpolation (K'' / 8 O^2) plus quantisation (K' / 32 O) of
    # the ES kernel, with max |K'| ~ beta / S and |K''| ~ (2 beta / S)^2 / 2 per cell
    bound = (2 * beta / support) ** 2 / 16 / oversample ** 2 + \
        (beta / support) / (2 * LINEAR_STEPS * oversample)
    assert errors["image-linear"] < 4 * bound, (errors, bound)


def test_image_linear_w_projection_against_the_finer_table(cl_env):
    """Full W-projection tables (every w plane) interpolated: near the table
    sampled at the positions' own steps (the same screen's FFT zero-padded
    16 times more), far nearer than the table's nearest samples."""
    _require_images(cl_env)
    rng = np.random.default_rng(7)
    nx, support, oversample = 64, 8, 4
    uvw, cell = _case(rng, nx, 150, support, w_max_lambda=40.0)
    gcf = w_projection_gcf(support, oversample, 3, 40.0, nx * cell)
    steps = linear_steps(oversample, 3)
    fine = w_projection_gcf(support, oversample * steps, 3, 40.0, nx * cell)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2)).astype(np.complex64)
    reference = grid_reference(uvw, FREQ_HZ, vis, fine, nx, nx, cell)
    errors, predicted = {}, {}
    for read in GCF_READS:
        gridder = clgrid.Gridder(cl_env.queue, gcf, nx, nx, cell, npol=2, method="register",
                                 gcf_read=read)
        errors[read] = _relative(gridder(uvw, FREQ_HZ, vis), reference)
        predicted[read] = clgrid.Degridder(cl_env.queue, gcf, nx, nx, cell, npol=2,
                                           gcf_read=read)(reference, uvw, FREQ_HZ)
    assert errors["image-linear"] < errors["buffer"] / 3, errors
    expected = degrid_reference(reference, uvw, FREQ_HZ, fine, nx, nx, cell)
    degrid_errors = {read: _relative(p, expected) for read, p in predicted.items()}
    assert degrid_errors["image-linear"] < degrid_errors["buffer"] / 3, degrid_errors


def test_image_linear_degridding_against_a_direct_dft(cl_env):
    """Point sources: the grid of the corrected model image, degridded, and
    the visibilities' direct float64 DFT.  image-linear at O 4 comes about
    ten times closer than the buffer table of O 4."""
    _require_images(cl_env)
    rng = np.random.default_rng(11)
    nx, support, oversample = 64, 8, 4
    uvw, cell = _case(rng, nx, 120, support)
    uvw[:, 2] = 0.0
    gcf = separable_gcf(support, oversample)
    correction = grid_correction(gcf, nx)
    pixels = [(5, -7, 1.0), (-12, 3, 0.5), (0, 0, 0.25)]
    image = np.zeros((nx, nx))
    for px, py, flux in pixels:
        image[nx // 2 + py, nx // 2 + px] = flux
    model = image * np.outer(correction, correction)
    grid = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(model)))[None]
    l = np.array([p[0] for p in pixels]) * cell
    m = np.array([p[1] for p in pixels]) * cell
    flux = np.array([p[2] for p in pixels])
    u = uvw[:, 0, None] * FREQ_HZ / C
    v = uvw[:, 1, None] * FREQ_HZ / C
    # grid = sum image exp(-2 pi i (u l + v m)) (forward FFT of the image)
    dft = np.einsum("s,rcs->rc", flux,
                    np.exp(-2j * np.pi * (u[..., None] * l + v[..., None] * m)))
    errors = {}
    for read in GCF_READS:
        degridder = clgrid.Degridder(cl_env.queue, gcf, nx, nx, cell, gcf_read=read)
        errors[read] = _relative(degridder(grid, uvw, FREQ_HZ)[..., 0], dft)
    assert errors["image-linear"] < 0.02, errors     # the conventions agree
    assert errors["image-linear"] < errors["buffer"] / 5, errors


@pytest.mark.tiny
def test_oclgrind_image_kernels_clean(request):
    """The register kernels reading images, under Oclgrind's race and
    bounds checks (Oclgrind 21.10 implements images and samplers)."""
    from oclgrind_check import run_clean
    result = run_clean(request.config, _OCLGRIND_SCRIPT)
    assert "done" in result.stdout


_OCLGRIND_SCRIPT = """
import numpy as np, pyopencl as cl, clgrid
from clgrid.gcf import separable_gcf, w_projection_gcf, user_gcf
queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
rng = np.random.default_rng(0)
uvw = rng.uniform(-150, 150, (12, 3))
vis = (rng.standard_normal((12, 1, 2)) + 1j).astype(np.complex64)
cell = 1.0 / (20 * 20.0)
ramp = np.exp(0.7j * clgrid.gcf.footprint_distances(3, 2))[None]
complex_rows = user_gcf(3, 2, table_u=separable_gcf(3, 2).table_u * ramp,
                        table_v=separable_gcf(3, 2).table_v * ramp.conj())
for gcf in (separable_gcf(3, 2), w_projection_gcf(3, 2, 2, 60.0, 20 * cell), complex_rows):
    buffer = clgrid.Gridder(queue, gcf, 20, 18, cell, npol=2, method="register",
                            gcf_read="buffer", register_params=dict(
                                block_u=2, block_v=2, wg_size=4, batch=3,
                                points_per_group=5))(uvw, [1e8], vis)
    for read in ("image", "image-linear"):
        grid = clgrid.Gridder(queue, gcf, 20, 18, cell, npol=2, method="register",
                              gcf_read=read, register_params=dict(
                                  block_u=2, block_v=2, wg_size=4, batch=3,
                                  points_per_group=5))(uvw, [1e8], vis)
        assert np.abs(grid).max() > 0
        if read == "image":
            assert np.allclose(grid, buffer, atol=1e-5)
        pred = clgrid.Degridder(queue, gcf, 20, 18, cell, npol=2, gcf_read=read,
                                register_params=dict(block_u=2, block_v=2, wg_size=4,
                                                     batch=3, points_per_group=5))(
            grid, uvw, [1e8])
        assert np.abs(pred).max() > 0
print("done")
"""


def test_plans_shared_between_buffer_and_image_not_linear(cl_env):
    """A buffer gridder's plan serves an image gridder (the same points);
    image-linear's finer positions need their own."""
    _require_images(cl_env)
    rng = np.random.default_rng(2)
    uvw, cell = _case(rng, 64, 40, 8)
    gcf = separable_gcf(8, 4)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 1)).astype(np.complex64)
    make = {read: clgrid.Gridder(cl_env.queue, gcf, 64, 64, cell, method="register",
                                 gcf_read=read) for read in GCF_READS}
    plan = make["buffer"].plan(uvw, FREQ_HZ)
    assert np.allclose(make["image"].grid_plan(plan, vis), make["buffer"].grid_plan(plan, vis),
                       atol=1e-6)
    with pytest.raises(ValueError, match="another grid, table or tile shape"):
        make["image-linear"].grid_plan(plan, vis)

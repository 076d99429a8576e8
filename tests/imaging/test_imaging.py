"""vis2dirty / dirty2vis / Imager against a float64 direct Fourier transform,
against ducc0, as each other's adjoint, and on bad input."""

import dataclasses

import numpy as np
import pytest

import clgrid.device.kernels as kernels
from clgrid.core.eskernel import KERNEL_TABLE, aliasing_error, es_fourier, es_kernel
from clgrid.imaging import Imager, dft_dirty2vis, dft_vis2dirty, dirty2vis, vis2dirty

CASES = [(1e-2, np.complex64), (1e-4, np.complex64), (1e-5, np.complex64),
         (1e-7, np.complex128), (1e-10, np.complex128)]


def _observation(n_rows=150, n_chan=2, seed=1, w_scale=3.0):
    """Random baselines out to 300 m with large w, at 1.0-1.1 GHz."""
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-300.0, 300.0, (n_rows, 3))
    uvw[:, 2] *= w_scale
    freq = np.linspace(1.0e9, 1.1e9, n_chan)
    vis = rng.normal(size=(n_rows, n_chan)) + 1j * rng.normal(size=(n_rows, n_chan))
    return uvw, freq, vis


# Wide field: 48 x 40 pixels of 5 mrad (15 degrees): n - 1 reaches -0.016,
# so w (up to 3600 wavelengths) turns the phase by ~60 radians at the edge.
GEOMETRY = dict(npix_x=48, npix_y=40, pixsize_x=5e-3, pixsize_y=6e-3)


def _rel_rms(result, reference):
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def _queue(cl_env):
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    return cl_env.queue


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("epsilon,dtype", CASES, ids=[f"{e:g}" for e, _ in CASES])
@pytest.mark.sweep
def test_vis2dirty_matches_direct_fourier_transform(cl_env, epsilon, dtype, do_w):
    uvw, freq, vis = _observation()
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    dirty = vis2dirty(uvw=uvw, freq=freq, vis=vis.astype(dtype), epsilon=epsilon,
                      do_wgridding=do_w, queue=_queue(cl_env), **GEOMETRY)
    assert dirty.dtype == np.dtype(dtype).type(0).real.dtype
    assert dirty.shape == (GEOMETRY["npix_x"], GEOMETRY["npix_y"])
    assert _rel_rms(dirty, reference) <= epsilon


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("epsilon,dtype", [CASES[1], CASES[3]], ids=["1e-4", "1e-7"])
def test_dirty2vis_matches_direct_fourier_transform(cl_env, epsilon, dtype, do_w):
    uvw, freq, _ = _observation(n_rows=60)
    rng = np.random.default_rng(2)
    image = rng.normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    real = np.float32 if dtype == np.complex64 else np.float64
    reference = dft_dirty2vis(uvw, freq, image, GEOMETRY["pixsize_x"], GEOMETRY["pixsize_y"],
                              do_wgridding=do_w)
    vis = dirty2vis(uvw=uvw, freq=freq, dirty=image.astype(real), epsilon=epsilon,
                    pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"],
                    do_wgridding=do_w, queue=_queue(cl_env))
    assert vis.dtype == dtype and vis.shape == reference.shape
    assert _rel_rms(vis, reference) <= epsilon


def test_options_match_direct_fourier_transform(cl_env):
    """Flips, a shifted image centre, no division by n, weights and a mask.

    ducc0's convention: flipping u negates u and center_x."""
    uvw, freq, vis = _observation(n_rows=80, seed=3)
    rng = np.random.default_rng(4)
    wgt = rng.uniform(0.5, 2.0, vis.shape)
    mask = (rng.uniform(size=vis.shape) > 0.2).astype(np.uint8)
    options = dict(center_x=0.02, center_y=-0.03, divide_by_n=False)
    flipped = uvw * np.array([-1.0, 1.0, -1.0])
    reference = dft_vis2dirty(flipped, freq, vis * wgt * mask, do_wgridding=True,
                              **dict(options, center_x=-0.02), **GEOMETRY)
    dirty = vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, mask=mask, epsilon=1e-9,
                      do_wgridding=True, flip_u=True, flip_w=True, queue=_queue(cl_env),
                      **options, **GEOMETRY)
    assert _rel_rms(dirty, reference) <= 1e-9


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("epsilon,dtype", [CASES[1], CASES[4]], ids=["1e-4", "1e-10"])
def test_agrees_with_ducc0(cl_env, epsilon, dtype, do_w):
    wgridder = pytest.importorskip("ducc0.wgridder")
    uvw, freq, vis = _observation(seed=5)
    vis = vis.astype(dtype)
    arguments = dict(uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=do_w,
                     pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"],
                     center_x=0.01)
    ours = vis2dirty(vis=vis, npix_x=GEOMETRY["npix_x"], npix_y=GEOMETRY["npix_y"],
                     queue=_queue(cl_env), **arguments)
    theirs = wgridder.vis2dirty(vis=vis, npix_x=GEOMETRY["npix_x"],
                                npix_y=GEOMETRY["npix_y"], **arguments)
    assert _rel_rms(ours, theirs) <= 2 * epsilon
    image = np.random.default_rng(6).normal(size=ours.shape).astype(ours.dtype)
    ours_vis = dirty2vis(dirty=image, queue=_queue(cl_env), **arguments)
    theirs_vis = wgridder.dirty2vis(dirty=image, **arguments)
    assert _rel_rms(ours_vis, theirs_vis) <= 2 * epsilon


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_dirty2vis_is_the_adjoint_of_vis2dirty(cl_env, dtype, do_w):
    uvw, freq, vis = _observation(seed=7)
    real = np.float32 if dtype == np.complex64 else np.float64
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=do_w,
                    precision="single" if dtype == np.complex64 else "double", **GEOMETRY)
    image = np.random.default_rng(8).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    left = np.vdot(image, imager.vis2dirty(vis.astype(dtype)).astype(np.float64))
    right = np.vdot(imager.dirty2vis(image.astype(real)).astype(np.complex128), vis).real
    rounding = 1e-5 if dtype == np.complex64 else 1e-12
    assert abs(left - right) <= rounding * abs(left)


def test_polarisation_axis(cl_env):
    uvw, freq, vis = _observation(n_rows=60, seed=9)
    stacked = np.stack([vis, 2.0 * vis.conj(), -vis], axis=-1)
    queue = _queue(cl_env)
    arguments = dict(uvw=uvw, freq=freq, epsilon=1e-6, queue=queue, **GEOMETRY)
    images = vis2dirty(vis=stacked, **arguments)
    assert images.shape == (3, GEOMETRY["npix_x"], GEOMETRY["npix_y"])
    for pol in range(3):
        single = vis2dirty(vis=stacked[:, :, pol], **arguments)
        np.testing.assert_allclose(images[pol], single, rtol=0, atol=1e-12 * abs(single).max())
    predicted = dirty2vis(dirty=images, uvw=uvw, freq=freq, epsilon=1e-6, queue=queue,
                          pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    assert predicted.shape == stacked.shape


def test_imager_repeats_without_recompiling(cl_env, monkeypatch):
    uvw, freq, vis = _observation(n_rows=80, seed=10)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=True,
                    precision="double", **GEOMETRY)
    builds = []
    original = kernels.KernelTemplate.__init__
    monkeypatch.setattr(kernels.KernelTemplate, "__init__",
                        lambda self, *a, **k: builds.append(a) or original(self, *a, **k))
    first = imager.vis2dirty(vis)       # builds the unweighted spreader once
    programs = (imager.engine.primary.corrector.template.program,
                dict(imager.engine.spreader._kernels))
    index_buffer = imager.engine.blocks[0].points.sorted_index.data
    builds.clear()
    model = imager.dirty2vis(first)
    builds.clear()
    second = imager.vis2dirty(vis - 1e-3 * model)
    third = imager.vis2dirty(vis)
    # No float atomics in the core: the same input gives the same bits.
    assert np.array_equal(third, first)
    assert not np.array_equal(first, second)
    assert builds == []
    assert (imager.engine.primary.corrector.template.program,
            dict(imager.engine.spreader._kernels)) == programs
    assert imager.engine.blocks[0].points.sorted_index.data == index_buffer


@pytest.mark.parametrize("sigma,support", [(1.5, 6), (2.0, 9)])
def test_kernel_table_errors_are_measured(sigma, support):
    beta, error = KERNEL_TABLE[(sigma, support)]
    assert aliasing_error(support, beta, sigma) == pytest.approx(error, rel=1e-2)
    # Fourier transform by quadrature against a plain Riemann sum in float64
    s = np.linspace(-support / 2, support / 2, 200001)
    direct = np.trapezoid(es_kernel(s, support, beta) * np.cos(2 * np.pi * s * 0.2), s)
    assert es_fourier(0.2, support, beta) == pytest.approx(direct, rel=1e-8)


def test_bad_input_gives_clear_errors(cl_env):
    uvw, freq, vis = _observation(n_rows=20)
    queue = _queue(cl_env)
    good = dict(uvw=uvw, freq=freq, vis=vis, epsilon=1e-4, queue=queue, **GEOMETRY)

    def call(**changes):
        vis2dirty(**{**good, **changes})

    with pytest.raises(ValueError, match="uvw"):
        call(uvw=uvw[:, :2])
    with pytest.raises(ValueError, match="vis must be"):
        call(vis=vis[:10])
    with pytest.raises(TypeError, match="complex"):
        call(vis=vis.real.astype(np.int32))
    bad = vis.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        call(vis=bad)
    with pytest.raises(ValueError, match="epsilon"):
        call(vis=vis.astype(np.complex64), epsilon=1e-7)
    with pytest.raises(ValueError, match="even"):
        call(npix_x=47)
    with pytest.raises(ValueError, match="freq"):
        call(freq=-freq)
    with pytest.raises(ValueError, match="wgt"):
        call(wgt=np.ones(5))
    with pytest.raises(ValueError, match="sigma"):
        call(sigma_min=2.7, sigma_max=3.0)


@pytest.mark.parametrize("tiles,precision,epsilon", [
    ((8, 32, 2048), "single", 1e-4), ((16, 32, 16), "double", 1e-9),
    ((16, 16), "double", 1e-9), ((32, 16, 7), "single", 1e-4),
    ((16, 16, 2 ** 31, True), "double", 1e-9),
    ((8, 16, 2 ** 31, True, 3), "single", 1e-4),
    ((16, 16, 2 ** 31, True, 5), "double", 1e-9),
    ((8, 8, 2048, False, 1, 4), "single", 1e-4), ((16, 16, 9, False, 1, 2), "double", 1e-9),
    ((8, 8, 2048, False, 3, 4), "single", 1e-4), ((16, 16, 2, False, 4, 2), "double", 1e-9),
    ((8, 8, 64, False, 3, 2, "horner", 5), "single", 1e-4)],
    ids=["gpu-8x32", "gpu-16x32-chunks16", "lanes-16x16", "lanes-32x16-chunks7",
         "vector-16x16", "vector-8x16-blocks3", "vector-16x16-blocks5",
         "gpu-8x8-groups4", "gpu-16x16-groups2-chunks9",
         "gpu-8x8-blocks3", "gpu-16x16-blocks4-chunks2", "gpu-8x8-blocks3-batch5"])
@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.sweep
def test_every_tile_shape_matches_the_direct_transform(cl_env, tiles, precision, epsilon, do_w):
    """The GPU tile variant (registers, unrolled rows) runs on CPUs too: check it
    here, with (tile, plane) point lists split into small chunks and folded."""
    from clgrid.core.plan import TileShape
    if TileShape(*tiles).vector:
        cl_env.require_vector_tiles()
    uvw, freq, vis = _observation(n_rows=150, seed=3)
    real = np.float32 if precision == "single" else np.float64
    geometry = dict(GEOMETRY, center_x=0.004, center_y=-0.003)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=do_w,
                    precision=precision, tiles=TileShape(*tiles), **geometry)
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **geometry)
    assert _rel_rms(imager.vis2dirty(vis.astype(np.complex64 if real == np.float32
                                                 else np.complex128)), reference) <= epsilon
    image = np.random.default_rng(4).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    predicted = imager.dirty2vis(image.astype(real))
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w, pixsize_x=geometry["pixsize_x"],
                             pixsize_y=geometry["pixsize_y"], center_x=geometry["center_x"],
                             center_y=geometry["center_y"])
    assert np.linalg.norm(predicted - expected) / np.linalg.norm(expected) <= epsilon
    # dense tiles were split and folded (with w: the plane blocks' points)
    if len(tiles) in (3, 6) and tiles[2] < 100 and (not do_w or TileShape(*tiles).plane_block > 1):
        assert imager.engine.spreader.work(imager.engine.blocks[0].points,
                                           *imager.engine.image.passes()[0]).n_folds > 0


@pytest.mark.parametrize("tiles,precision,epsilon", [
    ((8, 8, 4096, False, 1, 4, "horner"), "single", 1e-4),
    ((8, 8, 4096, False, 8, 1, "horner"), "single", 1e-4),
    ((8, 8, 64, False, 3, 2, "horner", 5), "single", 1e-4),
    ((16, 16, 2, False, 4, 2), "double", 1e-9),
    ((16, 32, 64, False, 3), "double", 1e-9),
    ((2, 8, 64, False, 2, 2), "single", 0.2)],
    ids=["default-no-w", "default-w-blocks8", "blocks3-groups2-chunks-batch5",
         "16x16-blocks4-double", "16x32-double-w13", "2-rows-scalar-reads"])
@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_gpu_kernel_staging_only_touching_points(cl_env, monkeypatch, tiles, precision,
                                                 epsilon, do_w):
    """The GPU variant of the lane kernel, forced on this device
    (spread.compacts_points): only the points that touch a tile staged, side
    by side, each tap at its place in the tile (rows of 4 reals a load, or
    one where the tile's rows are no multiple of 4), the lanes' totals in
    local memory where a group takes one w plane; its image against the
    direct transform, the same bits twice."""
    import clgrid.core.spread as spread
    from clgrid.core.plan import TileShape
    monkeypatch.setattr(spread, "compacts_points", lambda profile: True)
    uvw, freq, vis = _observation(n_rows=150, seed=5)
    real = np.float32 if precision == "single" else np.float64
    vis = vis.astype(np.complex64 if real == np.float32 else np.complex128)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=do_w,
                    precision=precision, tiles=TileShape(*tiles), **GEOMETRY)
    spreader = imager.engine.spreader
    assert spreader.compact
    assert spreader.local_state == (spreader.plane_block == 1)
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    dirty = imager.vis2dirty(vis)
    assert _rel_rms(dirty, reference) <= epsilon
    assert np.array_equal(dirty, imager.vis2dirty(vis))


@pytest.mark.parametrize("tiles,do_w", [
    ((8, 8, 1, False, 1, 2), False), ((8, 8, 2, False, 3, 2), True),
    ((16, 16, 2, False, 4, 2), True), ((16, 32, 3, False, 1, 1), False)],
    ids=["8x8-no-w", "8x8-w-blocks3", "16x16-w-blocks4", "16x32-no-w"])
def test_split_items_folded_in_parts_match_the_direct_transform(cl_env, monkeypatch, tiles,
                                                                do_w):
    """Split items of many slots are folded by fold_chunks_wide (several
    work-items a cell, each every fold_parts-th slot, then the parts in
    order): with every split item of 2 or more slots sent there (and slots
    fewer than the parts), the image against the direct transform, the same
    bits twice, and within float32 sums of every item folded a slot at a
    time."""
    import clgrid.core.spread as spread
    from clgrid.core.plan import TileShape
    uvw, freq, vis = _observation(n_rows=400, seed=9)
    vis = vis.astype(np.complex64)

    def image(wide_slots):
        monkeypatch.setattr(spread, "WIDE_FOLD_SLOTS", wide_slots)
        imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                        do_wgridding=do_w, tiles=TileShape(*tiles), **GEOMETRY)
        engine = imager.engine
        work = engine.spreader.work(engine.blocks[0].points, *engine.image.passes()[0])
        return imager.vis2dirty(vis), imager, work

    by_slot, _, work = image(10 ** 9)
    assert work.n_folds > 0 and work.n_wide_folds == 0
    dirty, imager, work = image(1)
    assert imager.engine.spreader.fold_parts > 1
    assert 0 < work.n_wide_folds <= work.n_folds
    folds = work.folds.get()
    assert (folds[:work.n_wide_folds, 3] > 1).all() and (folds[work.n_wide_folds:, 3] <= 1).all()
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    assert _rel_rms(dirty, reference) <= 1e-4
    assert np.array_equal(dirty, imager.vis2dirty(vis))
    assert _rel_rms(dirty, by_slot) <= 1e-6


@pytest.mark.parametrize("n_vis,n_bins", [(0, 5), (1, 1), (60, 100_000), (5000, 300),
                                          (3000, 400_000)])
def test_bin_starts_by_point_and_by_bin_match_a_search(cl_env, n_vis, n_bins):
    """The bins' starts of the sorted keys, by a work-item a point
    (``bin_starts``, CPUs) and a work-item a bin (``bin_starts_search``,
    GPUs), bins and sub-bins: both numpy's searchsorted of the sorted keys,
    with long runs of empty bins, repeated keys and invalid keys at the end."""
    import pyopencl as cl
    import pyopencl.array as cla
    from clgrid.core.setpoints import sort_into_bins
    queue = _queue(cl_env)
    uvw, freq, _ = _observation()
    set_points = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, **GEOMETRY).engine.stages.points
    program = set_points._starts.get_info(cl.kernel_info.PROGRAM)
    rng = np.random.default_rng(n_vis + n_bins)
    for split in (1, 4):
        keys = rng.integers(0, n_bins * split, n_vis).astype(np.uint32)
        keys[: n_vis // 3] = keys[0] if n_vis else 0            # a dense bin
        keys[n_vis - n_vis // 10:] = 0xFFFFFFFF                  # invalid points
        shifted = np.minimum(np.sort(keys) >> (split - 1).bit_length(), n_bins)
        want = np.searchsorted(shifted, np.arange(n_bins + 1), side="left")
        want_split = np.searchsorted(np.minimum(np.sort(keys), n_bins * split),
                                     np.arange(n_bins * split + 1), side="left")
        for name, per_bin in (("bin_starts", False), ("bin_starts_search", True)):
            keys_d = cla.to_device(queue, keys if n_vis else np.zeros(1, np.uint32))
            _, bin_start, split_start = sort_into_bins(
                queue, set_points.sort, cl.Kernel(program, name), keys_d, n_vis, n_bins,
                split=split, per_bin=per_bin)
            np.testing.assert_array_equal(bin_start.get(), want, err_msg=name)
            if split > 1:
                np.testing.assert_array_equal(split_start.get(), want_split, err_msg=name)


@pytest.mark.parametrize("tiles", [(8, 8, 4096, False, 1, 4, "horner"), (8, 8, 5, False, 1, 2),
                                   (16, 16, 64, False, 1, 2)],
                         ids=["default", "chunks-of-5", "16x16"])
def test_split_bins_read_only_the_points_that_reach_a_tile(cl_env, monkeypatch, tiles):
    """Set points split each tile's bin by the next tiles its points'
    footprints reach (spread.splits_bins): every point lies in the sub-bin of
    its tile and rank (numpy from its footprint start), the bins' starts are
    every fourth sub-bin's, and the GPU kernel (forced here) reading only the
    reaching sub-bins of the neighbours' bins, split into chunks or not,
    images within epsilon of the direct transform, the same bits twice, and
    within float32 sums of the kernel reading whole bins."""
    import clgrid.core.spread as spread
    import clgrid.core.strategies as strategies
    from clgrid.core.plan import TileShape
    monkeypatch.setattr(spread, "compacts_points", lambda profile: True)
    uvw, freq, vis = _observation(n_rows=300, seed=7)
    vis = vis.astype(np.complex64)
    geometry = dict(GEOMETRY, npix_x=96, npix_y=80)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                    tiles=TileShape(*tiles), **geometry)
    points = imager.engine.blocks[0].points
    assert imager.engine.spreader.split_bins and points.split_start is not None
    split_start, bin_start = points.split_start.get(), points.bin_start.get()
    assert np.array_equal(split_start[::4], bin_start)
    cells = points.cells.get()[:points.n_valid]
    tile_u, lanes, support = tiles[0], tiles[1], imager.layout.choice.support
    reach_u = cells["x"] % tile_u >= tile_u - support + 1
    reach_v = cells["y"] % lanes >= lanes - support + 1
    rank = np.where(reach_u, np.where(reach_v, 2, 1), np.where(reach_v, 3, 0))
    tile = (cells["x"] // tile_u) * points.ntiles_v + cells["y"] // lanes
    sub_bin = np.searchsorted(split_start, np.arange(points.n_valid), side="right") - 1
    assert np.array_equal(sub_bin, 4 * tile + rank)
    assert np.bincount(rank, minlength=4).min() > 0   # every rank taken
    reference = dft_vis2dirty(uvw, freq, vis, **geometry)
    dirty = imager.vis2dirty(vis)
    assert _rel_rms(dirty, reference) <= 1e-4
    assert np.array_equal(dirty, imager.vis2dirty(vis))
    monkeypatch.setattr(strategies, "splits_bins", lambda tiles, layout, do_w: False)
    whole = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                   tiles=TileShape(*tiles), **geometry)
    assert whole.engine.blocks[0].points.split_start is None
    assert _rel_rms(dirty, whole.vis2dirty(vis)) <= 1e-6


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_tile_spread_adds_every_block_to_zeroed_planes(cl_env, monkeypatch, do_w):
    """The engine zeroes a pass's planes and every row block's launch of the
    GPU kernel (forced here) adds only the tiles its points reach
    (Spreader.adds_to_zeros): planes left full of NaN by anything before
    give the same bits as a fresh call, and the same bits as the first
    block writing every tile (Spreader.zero_fill off)."""
    import clgrid.core.spread as spread
    from clgrid.core.plan import TileShape
    monkeypatch.setattr(spread, "compacts_points", lambda profile: True)
    # blocks of `align` rows (block starts keep the device's base alignment)
    align = max(1, cl_env.profile.base_align_bytes)
    uvw, freq, vis = _observation(n_rows=3 * align + 50, seed=11)
    vis = vis.astype(np.complex64)
    shape = TileShape(8, 8, 64, groups=2, plane_block=3 if do_w else 1)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                    do_wgridding=do_w, tiles=shape, vis_per_block=2 * align, **GEOMETRY)
    assert len(imager.engine.blocks) > 1 and imager.engine.spreader.adds_to_zeros
    first = imager.vis2dirty(vis)
    assert _rel_rms(first, dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)) <= 1e-4
    imager.engine.primary.planes_d.fill(np.nan)
    assert np.array_equal(imager.vis2dirty(vis), first)
    monkeypatch.setattr(spread.Spreader, "zero_fill", False)
    writes = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                    do_wgridding=do_w, tiles=shape, vis_per_block=2 * align, **GEOMETRY)
    assert not writes.engine.spreader.adds_to_zeros
    assert np.array_equal(writes.vis2dirty(vis), first)


def test_split_bins_only_where_a_tile_reads_one_neighbour_a_side(cl_env):
    """No split with w, with the CPU vector tile or with a kernel wider than
    the tile; a spreader asked to read split bins there refuses in one line.
    Only GPUs' tile kernel adds every row block to zeroed planes."""
    from clgrid.core.plan import TileShape
    from clgrid.core.spread import Spreader, splits_bins
    uvw, freq, vis = _observation(n_rows=40)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                    tiles=TileShape(8, 8, 64), **GEOMETRY)
    layout, support = imager.layout, imager.layout.choice.support
    assert imager.engine.blocks[0].points.split_start is None
    assert imager.engine.spreader.adds_to_zeros == (cl_env.profile.device_type == "gpu")
    assert not splits_bins(TileShape(8, 8), layout, True)
    assert splits_bins(TileShape(8, 8), layout, False)
    assert not splits_bins(TileShape(16, 16, vector=True), layout, False)
    assert not splits_bins(TileShape(support - 1, 8), layout, False)
    with pytest.raises(ValueError, match="split bins are the tile kernel's"):
        Spreader(cl_env.queue, imager.engine.spreader.source, TileShape(8, 8, 64), True)


def test_gpu_plane_blocks_default_clamp_and_limits(cl_env):
    """The GPU tile with w: blocks of 8 planes, a group of lanes each, by
    default (no w: 8 groups, no blocks); a block longer than the planes there are is
    cut to them; a work-group past the device's work-items or local memory
    is refused in one line, before any kernel is built."""
    import dataclasses
    from clgrid.core.plan import TileShape
    from clgrid.core.spread import check_lane_tile, lane_tile_batch, lane_tile_local_bytes
    gpu = dataclasses.replace(cl_env.profile, device_type="gpu", local_mem_bytes=49152,
                              max_work_group_size=1024)
    assert TileShape.for_device(gpu, 7) == TileShape(8, 8, 4096, groups=8, kernel_eval="horner")
    blocks = TileShape.for_device(gpu, 7, do_w=True)
    assert blocks == TileShape(8, 8, 4096, plane_block=8, kernel_eval="horner")
    assert blocks.lane_groups(True) == (1, 8) and blocks.lane_groups(False) == (1, 1)
    two = dataclasses.replace(blocks, groups=2)
    # staged points on GPUs: each tap at its place in the tile, 8 u taps in
    # rows of 12, 8 complex v taps in rows of 9, 8 w weights of 4 B; a bit a
    # point; the second group's totals of each plane (double2); without w
    # no weights, and both groups' totals (kept in local memory throughout)
    # with the ranges of the 4 source bins
    assert (lane_tile_local_bytes(two, 7, True, 4)
            == 128 * (12 * 4 + 9 * 8 + 8 * 4) + 4 * 4 + 8 * 64 * 16)
    assert (lane_tile_local_bytes(two, 7, False, 4)
            == 16 * (12 * 4 + 9 * 8) + 4 + 2 * 64 * 16 + 4 * 8)
    # CPUs running this kernel: offsets, 7 u taps between pads of 7, 7 v taps
    assert (lane_tile_local_bytes(two, 7, True, 4, compact=False)
            == 128 * (8 + 21 * 4 + 7 * 8 + 8 * 4) + 8 * 64 * 16)
    assert check_lane_tile(two, gpu, 7, True, 4) == 128   # a point a work-item
    assert check_lane_tile(two, gpu, 7, True, 8) == 128   # double: 304 B a point
    assert check_lane_tile(two, gpu, 7, False, 4) == 16
    # a 16 x 32 tile of W 13 in double precision: 688 B a point, 32 fit
    assert check_lane_tile(TileShape(16, 32, 2048), gpu, 13, True, 8) == 32
    # four groups of lanes for each of 8 planes: the batch halves to fit 48 KiB
    four = dataclasses.replace(blocks, groups=4)
    assert lane_tile_local_bytes(four, 7, True, 8) > 49152
    assert lane_tile_batch(four, gpu, 7, True, 8) == check_lane_tile(four, gpu, 7, True, 8) == 64
    with pytest.raises(ValueError, match="local memory"):   # 7 groups' totals: 57 KiB
        check_lane_tile(dataclasses.replace(blocks, groups=8), gpu, 7, True, 4)
    with pytest.raises(ValueError, match="1152 work-items a group"):
        check_lane_tile(dataclasses.replace(blocks, groups=2, plane_block=9, lanes=64,
                                            tile_u=8), gpu, 7, True, 4)
    check_lane_tile(dataclasses.replace(blocks, groups=4), gpu, 7, False, 4)  # no w: no blocks
    uvw, freq, vis = _observation(n_rows=40, w_scale=0.02)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                    tiles=TileShape(8, 8, 64, groups=2, plane_block=64), **GEOMETRY)
    assert imager.engine.spreader.tiles.plane_block == imager.n_planes < 64
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **GEOMETRY)
    assert _rel_rms(imager.vis2dirty(vis), reference) <= 1e-4


def test_a_tile_too_small_for_the_kernel_is_refused(cl_env):
    from clgrid.core.plan import TileShape
    uvw, freq, _ = _observation(n_rows=20)
    with pytest.raises(ValueError, match="too small for kernel support"):
        Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-9, precision="double",
               tiles=TileShape(8, 32), **GEOMETRY)


@pytest.mark.parametrize("fp64", [True, False], ids=["fp64", "without-fp64"])
def test_single_precision_keeps_epsilon_on_a_dense_track(cl_env, request, fp64):
    """Thousands of float32 terms on the central cells: the spreader folds
    each batch into a float64 total (without fp64: a Kahan-compensated float
    one), so epsilon 1e-5 holds (long float32 sums gave 3e-5 here).
    Reference: ducc0 in float64 at 1e-12."""
    ducc0 = pytest.importorskip("ducc0")
    if not fp64:
        request.getfixturevalue("without_fp64")
    from clgrid.io.simulate import simulate_observation
    uvw = simulate_observation("ska1_mid_meerkat_197", duration_h=1.0, integration_s=60.0,
                               n_baselines=1500)
    freq = np.array([1.4e9, 1.42e9])
    u, v = (uvw[:, k, None] * freq / 299792458.0 for k in range(2))
    pixsize = 1 / (3 * max(np.abs(u).max(), np.abs(v).max()))
    vis = sum(flux * np.exp(-2j * np.pi * (u * x + v * y) * pixsize)
              for x, y, flux in [(0, 0, 1.0), (-60, 30, 0.5), (45, -75, 0.8)])
    geometry = dict(uvw=uvw, freq=freq, npix_x=256, npix_y=256, pixsize_x=pixsize,
                    pixsize_y=pixsize)
    reference = ducc0.wgridder.vis2dirty(vis=vis, epsilon=1e-12, **geometry)
    imager = Imager(_queue(cl_env), epsilon=1e-5, **geometry)
    assert imager.float_float == (not fp64)
    assert _rel_rms(imager.vis2dirty(vis.astype(np.complex64)), reference) <= 1e-5


def test_zero_rows_give_a_zero_image_as_ducc0(cl_env):
    """An all-flagged or empty chunk is normal in pipelines: zeros, not an error."""
    freq = np.array([1.0e9, 1.1e9])
    empty_uvw = np.zeros((0, 3))
    dirty = vis2dirty(uvw=empty_uvw, freq=freq, vis=np.zeros((0, 2), np.complex64),
                      epsilon=1e-4, queue=_queue(cl_env), **GEOMETRY)
    assert dirty.shape == (GEOMETRY["npix_x"], GEOMETRY["npix_y"]) and not np.any(dirty)
    vis = dirty2vis(uvw=empty_uvw, freq=freq, dirty=dirty, epsilon=1e-4, queue=_queue(cl_env),
                    pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    assert vis.shape == (0, 2) and vis.dtype == np.complex64


def test_an_image_larger_than_the_device_is_refused_with_the_bytes(cl_env):
    uvw, freq, vis = _observation(n_rows=10)
    with pytest.raises(MemoryError, match=r"needs \d+ MiB.*allows \d+ MiB per allocation"):
        Imager(_queue(cl_env), uvw=uvw, freq=freq, npix_x=131072, npix_y=131072,
               pixsize_x=1e-6, pixsize_y=1e-6, epsilon=1e-4)


def test_visibilities_beyond_the_device_are_refused_with_the_bytes(cl_env, monkeypatch):
    """A device of 64 MiB (16 MiB per allocation), as small devices are:
    too many visibilities for its set points, or a vis array beyond one
    allocation, is refused before anything is allocated, naming the bytes."""
    import dataclasses
    from clgrid.device.profiles import DeviceProfile
    real = DeviceProfile.from_device
    monkeypatch.setattr(DeviceProfile, "from_device", classmethod(
        lambda cls, device: dataclasses.replace(real(device), global_mem_bytes=64 * 2 ** 20,
                                                max_alloc_bytes=16 * 2 ** 20)))
    rng = np.random.default_rng(12)
    freq = np.linspace(1.0e9, 1.1e9, 4)
    from clgrid.core.plan import TileShape
    # the GPU tiles: row blocks on any device (the CPU vector tile takes one)
    geometry = dict(GEOMETRY, epsilon=1e-4, tiles=TileShape(8, 8))
    many = rng.uniform(-300.0, 300.0, (300_000, 3))
    with pytest.raises(MemoryError, match=r"1200000 visibilities need \d+ MiB .* gives the "
                                          r"core 38 MiB of its 64 MiB.*rows in parts"):
        Imager(_queue(cl_env), uvw=many, freq=freq, vis_per_block=2 ** 16, **geometry)
    with pytest.raises(MemoryError, match=r"need \d+ MiB for their offsets in one buffer; .*"
                                          r"allows 16 MiB per allocation"):
        Imager(_queue(cl_env), uvw=many, freq=freq, vis_per_block=0, **geometry)
    rows = rng.uniform(-300.0, 300.0, (120_000, 3))
    imager = Imager(_queue(cl_env), uvw=rows, freq=freq, vis_per_block=2 ** 16, **geometry)
    vis = np.zeros((rows.shape[0], freq.size, 5), np.complex64)   # 3.7 MiB a polarisation
    with pytest.raises(MemoryError, match=r"vis needs 18 MiB in one device buffer; .*16 MiB"):
        imager.vis2dirty(vis)
    assert imager.vis2dirty(vis[:, :, 0]).shape == (GEOMETRY["npix_x"], GEOMETRY["npix_y"])


def test_nonfinite_uvw_rows_are_counted_and_left_out(cl_env):
    uvw, freq, vis = _observation(n_rows=60, seed=8)
    bad = uvw.copy()
    bad[7] = np.nan
    imager = Imager(_queue(cl_env), uvw=bad, freq=freq, epsilon=1e-6, precision="double",
                    **GEOMETRY)
    with pytest.warns(RuntimeWarning, match=f"{freq.size} of {vis.size} visibilities"):
        dirty = imager.vis2dirty(vis)
    assert imager.last_counts["invalid_uvw"] == freq.size
    keep = np.ones(60, bool)
    keep[7] = False
    reference = dft_vis2dirty(uvw[keep], freq, vis[keep], **GEOMETRY)
    assert _rel_rms(dirty, reference) <= 1e-6
    with pytest.warns(RuntimeWarning):
        predicted = imager.dirty2vis(dirty)
    assert np.all(predicted[7] == 0) and np.all(predicted[keep] != 0)


@pytest.mark.parametrize("fp64", [True, False], ids=["fp64", "without-fp64"])
def test_finite_uvw_far_beyond_the_grid_lands_on_it(cl_env, request, fp64):
    """A finite but absurd baseline (1e20 m: cells far beyond int range)
    wraps onto the periodic grid like any other instead of indexing out of
    it; the other rows' image is unchanged where that row has zero weight."""
    if not fp64:
        request.getfixturevalue("without_fp64")
    uvw, freq, vis = _observation(n_rows=60, seed=9)
    bad = uvw.copy()
    bad[5] = [1e20, -3e19, 10.0]
    weights = np.ones(vis.shape)
    weights[5] = 0.0
    imager = Imager(cl_env.queue, uvw=bad, freq=freq, epsilon=1e-5, do_wgridding=True,
                    **GEOMETRY)
    dirty = imager.vis2dirty(vis.astype(np.complex64), wgt=weights)
    reference = dft_vis2dirty(uvw, freq, vis * weights, do_wgridding=True, **GEOMETRY)
    assert _rel_rms(dirty, reference) <= 1e-5
    assert np.all(np.isfinite(imager.dirty2vis(dirty)))


def test_cached_imagers_make_room_on_their_device(cl_env, monkeypatch):
    """A new geometry must not fail because earlier calls' grids are cached:
    the least recently used plans of the device are dropped once the cached
    bytes and the new plan's would pass the device's budget."""
    from clgrid.device.plancache import plans
    from clgrid.imaging import imager as imager_module
    uvw, freq, vis = _observation(n_rows=30)
    queue = _queue(cl_env)
    plans.clear()
    vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-4, queue=queue, **GEOMETRY)
    assert len(plans) == 1
    monkeypatch.setattr(imager_module, "_device_bytes", lambda imager: 2 ** 62)
    vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-3, queue=queue, **GEOMETRY)
    assert len(plans) == 1   # the first was dropped to make room


@pytest.mark.parametrize("shape,dtype", [((300, 9000), np.complex64), ((100, 40, 700), np.complex128),
                                         ((5, 7), np.complex64)])
def test_pinned_staged_uploads_equal_the_host_data(cl_env, shape, dtype):
    """The GPU upload path (pinned, chunked, several host threads), forced on this device."""
    from clgrid.core.transfer import Uploader
    rng = np.random.default_rng(9)
    host = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex128)
    uploader = Uploader(_queue(cl_env), pinned=True)
    for _ in range(2):   # the staging memory is reused
        assert np.array_equal(uploader.to_device(host, dtype).get(), host.astype(dtype))


@pytest.mark.parametrize("facet", [False, True], ids=["centred", "facet"])
@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("npol", [1, 2])
def test_row_blocks_sent_beside_the_spreading_match_one_block(cl_env, do_w, npol, facet):
    """The GPU path, forced here: visibilities, weights and mask sent in row
    blocks through pinned memory on a second queue while earlier blocks are
    spread, later blocks adding to the grid.  Same image as one block (to
    rounding), within epsilon of the direct transform, the same bits run to
    run, and the same visibilities back; also for a facet (its phases kept
    per block on CPUs)."""
    geometry = dict(GEOMETRY, center_x=0.02, center_y=-0.01) if facet else GEOMETRY
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    uvw, freq, vis = _observation(n_rows=1100, seed=12)
    rng = np.random.default_rng(13)
    vis = np.stack([vis, vis * 0.5j][:npol], axis=-1)
    wgt = rng.uniform(0.5, 2.0, size=vis.shape[:2]).astype(np.float32)
    mask = rng.uniform(size=vis.shape[:2]) > 0.1
    queue = _queue(cl_env)
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                  tiles=TileShape(8, 32, 64), **geometry)
    one = Imager(queue, **common)
    blocked = Imager(queue, vis_per_block=700, **common)   # rows in blocks of 128 (alignment)
    blocked.uploader = Uploader(queue, pinned=True)
    assert len(blocked.engine.blocks) >= 3 and len(one.engine.blocks) == 1
    vis64 = vis.astype(np.complex64)
    image = blocked.vis2dirty(vis64, wgt, mask)
    assert np.array_equal(image, blocked.vis2dirty(vis64, wgt, mask))
    out = np.full_like(image, np.nan)   # downloaded straight into the caller's array
    assert blocked.vis2dirty(vis64, wgt, mask, dirty=out) is out
    assert np.array_equal(out, image)
    expected = one.vis2dirty(vis64, wgt, mask)
    assert _rel_rms(image, expected) <= 1e-6
    reference = dft_vis2dirty(uvw, freq, vis[..., 0] * wgt * mask, do_wgridding=do_w, **geometry)
    assert _rel_rms(image[0], reference) <= 1e-5
    assert blocked.last_counts["flagged"] == int((~mask).sum())
    model = rng.normal(size=(npol, GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)
    back = blocked.dirty2vis(model, wgt, mask)
    assert np.abs(back - one.dirty2vis(model, wgt, mask)).max() <= 1e-6 * np.abs(back).max()


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_calls_on_device_arrays_take_one_row_block(cl_env, monkeypatch, do_w):
    """Row blocks overlap a call's copies with its spreading; a vis2dirty
    whose visibilities are on the device takes a plan of one row block
    instead (Engine.plan_for), made once, by one of eight threads calling at
    once: its image against the blocked numpy call's (to rounding) and the
    direct transform, the same bits in every thread; dirty2vis on the device
    keeps the blocks' plan (the numpy call's bits); where a second plan does
    not fit beside the planes, the blocks' plan."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    import pyopencl as cl
    import pyopencl.array as cla
    from clgrid.core import engine as engine_module, image as image_module
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    uvw, freq, vis = _observation(n_rows=1100, seed=31)
    vis = vis.astype(np.complex64)
    queue = _queue(cl_env)
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                  tiles=TileShape(8, 32, 64), vis_per_block=700, **GEOMETRY)
    made, lock = [], threading.Lock()
    make_plan = engine_module.Engine.make_plan

    def counted(self, *args, **kwargs):
        with lock:
            made.append(len(args[2]) if len(args) > 2 and args[2] else None)
        return make_plan(self, *args, **kwargs)

    imager = Imager(queue, **common)
    imager.uploader = Uploader(queue, pinned=True)   # the GPU path: numpy sent in blocks
    engine = imager.engine
    assert len(engine.blocks) >= 3
    streamed = imager.vis2dirty(vis)
    assert engine._resident is None   # numpy sent in blocks: the blocks' plan
    model = np.random.default_rng(32).normal(size=streamed.shape).astype(np.float32)
    monkeypatch.setattr(engine_module.Engine, "make_plan", counted)
    vis_d = cla.to_device(queue, vis)
    model_d = cla.to_device(queue, model)
    queue.finish()

    def call(_):
        own = cl.CommandQueue(queue.context, queue.device)
        image = imager.vis2dirty_device(vis_d, queue=own).get(queue=own)
        back = imager.dirty2vis_device(model_d, queue=own).get(queue=own)
        return image, back

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))
    assert made == [1]   # one plan of one block, made once
    resident = engine.plan_for(True)
    assert len(resident.blocks) == 1 and resident is not engine.plan
    image, back = results[0]
    assert all(np.array_equal(i, image) and np.array_equal(b, back) for i, b in results)
    assert _rel_rms(image[0], streamed) <= 1e-6
    assert _rel_rms(image[0], dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)) <= 1e-5
    predicted = dft_dirty2vis(uvw, freq, model, do_wgridding=do_w, pixsize_x=GEOMETRY["pixsize_x"],
                              pixsize_y=GEOMETRY["pixsize_y"])
    assert np.linalg.norm(back.ravel() - predicted.ravel()) <= 1e-5 * np.linalg.norm(predicted)
    assert np.array_equal(back.reshape(predicted.shape), imager.dirty2vis(model))
    # no room for a second plan beside the planes: the blocks' plan
    monkeypatch.setattr(image_module, "core_memory_budget", lambda profile: 0)
    tight = Imager(queue, **common)
    assert tight.engine.plan_for(True) is tight.engine.plan
    assert _rel_rms(tight.vis2dirty_device(vis_d).get()[0], streamed) <= 1e-6


def test_the_second_plan_is_given_back_when_memory_runs_out(cl_env, monkeypatch):
    """The plan of one row block is kept for speed alone: where an
    allocation on the device fails (plancache.release_memory, as
    retry_after_freeing calls it) the engine gives it back, with the work
    lists and gathered values its workspaces kept over its points, and
    later calls on device arrays take the blocks' plan (their bits); a
    second plan whose build fails to allocate is not made."""
    import gc
    import weakref
    import pyopencl as cl
    import pyopencl.array as cla
    from clgrid.core import engine as engine_module
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    from clgrid.device import plancache
    uvw, freq, vis = _observation(n_rows=1100, seed=33)
    vis = vis.astype(np.complex64)
    queue = _queue(cl_env)
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, tiles=TileShape(8, 32, 64),
                  vis_per_block=700, **GEOMETRY)
    imager = Imager(queue, **common)
    imager.uploader = Uploader(queue, pinned=True)
    engine = imager.engine
    vis_d = cla.to_device(queue, vis)
    held = engine.device_bytes
    one_block = imager.vis2dirty_device(vis_d).get()
    # the first call took the plan every later one takes: the same bits
    assert np.array_equal(imager.vis2dirty_device(vis_d).get(), one_block)
    second = engine.plan_for(True)
    assert len(second.blocks) == 1
    second_bytes = engine.stages.image.points_bytes(second)
    assert second_bytes > 0 and engine.device_bytes >= held + second_bytes
    points = second.blocks[0].points
    assert id(points) in engine.spreader._work and engine.spreader._values is not None
    alive = weakref.ref(second)
    del second
    assert plancache.release_memory(queue.device.int_ptr) >= 1
    gc.collect()
    assert alive() is None   # nothing keeps the plan
    assert engine.plan_for(True) is engine.plan and id(points) not in engine.spreader._work
    assert engine.device_bytes <= held + second_bytes - second_bytes // 2
    blocked = imager.vis2dirty_device(vis_d).get()
    assert _rel_rms(blocked, one_block) <= 1e-6
    streamed = imager.vis2dirty(vis)   # numpy in blocks: the blocks' plan, its bits
    assert np.array_equal(blocked[0], streamed)

    def no_memory(self, *args, **kwargs):
        raise cl.MemoryError("clEnqueueNDRangeKernel",
                             cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, "out of resources")

    other = Imager(queue, **common)
    monkeypatch.setattr(engine_module.Engine, "make_plan", no_memory)
    assert other.engine.plan_for(True) is other.engine.plan
    assert np.array_equal(other.vis2dirty_device(vis_d).get()[0], streamed)


def test_a_call_whose_allocation_fails_frees_memory_and_tries_again(cl_env, monkeypatch):
    """An Imager call whose device allocation fails gives back the device's
    cached plans and second plans, then tries once more (the same image); a
    second failure is a MemoryError saying what to change, not the driver's
    error."""
    import pyopencl as cl
    import pyopencl.array as cla
    from clgrid.core import image as image_module
    from clgrid.core.plan import TileShape
    uvw, freq, vis = _observation(n_rows=1100, seed=34)
    vis = vis.astype(np.complex64)
    queue = _queue(cl_env)
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, tiles=TileShape(8, 32, 64),
                    vis_per_block=700, **GEOMETRY)
    vis_d = cla.to_device(queue, vis)
    expected = imager.vis2dirty_device(vis_d).get()
    assert len(imager.engine.plan_for(True).blocks) == 1
    calls, real = [], image_module.ImageStage.vis2dirty

    def fails(times):
        def vis2dirty(self, *args, **kwargs):
            calls.append(1)
            if len(calls) <= times:
                raise cl.MemoryError("clEnqueueNDRangeKernel",
                                     cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE,
                                     "out of resources")
            return real(self, *args, **kwargs)
        return vis2dirty

    monkeypatch.setattr(image_module.ImageStage, "vis2dirty", fails(1))
    again = imager.vis2dirty_device(vis_d).get()
    assert len(calls) == 2 and imager.engine.plan_for(True) is imager.engine.plan
    assert _rel_rms(again, expected) <= 1e-6   # the blocks' plan now
    calls.clear()
    monkeypatch.setattr(image_module.ImageStage, "vis2dirty", fails(2))
    with pytest.raises(MemoryError, match="cannot hold this vis2dirty call.*use a smaller image"):
        imager.vis2dirty(vis)
    assert len(calls) == 2


@pytest.mark.parametrize("planes_per_pass", [None, 2], ids=["one-pass", "passes-of-2"])
def test_pieces_sharing_a_plane_by_rows_add_up_to_the_whole(cl_env, monkeypatch,
                                                            planes_per_pass):
    """Two pieces of one w-stacking job, as two devices get them to balance
    planes that do not split evenly: the first grids planes 0 .. k and
    takes plane k only for rows below r, the second planes k .. on and
    plane k for rows from r.  Their images add up to the whole job's and
    their predictions likewise (to rounding), in row blocks cut at r, also
    with the planes in passes of 2; the CPU vector tile, which cannot add a
    block to planes, is refused."""
    from clgrid.core import image as image_module
    from clgrid.core.plan import GridLayout, ImageGeometry, TileShape
    if planes_per_pass:
        monkeypatch.setattr(image_module, "planes_per_pass", lambda *a, **k: planes_per_pass)
    uvw, freq, vis = _observation(n_rows=1100, seed=21)
    vis = vis.astype(np.complex64)
    queue = _queue(cl_env)
    geometry = ImageGeometry.given(None, epsilon=1e-5, do_wgridding=True,
                                   **dict(GEOMETRY, pixsize_x=1e-3, pixsize_y=1.2e-3))
    layout = GridLayout.of_rows(geometry, uvw, freq)
    n, k = layout.n_planes, layout.n_planes // 2
    assert n >= 4
    rows = 512   # a multiple of any device's row alignment here
    common = dict(uvw=uvw, freq=freq, geometry=geometry, layout=layout,
                  tiles=TileShape(8, 32, 64), vis_per_block=700)
    whole = Imager(queue, **common)
    first = Imager(queue, planes=(0, k + 1), plane_rows={k: (0, rows)}, **common)
    second = Imager(queue, planes=(k, n), plane_rows={k: (rows, len(uvw))}, **common)
    assert any(b.stop == rows for b in first.engine.blocks)
    assert (len(first.engine.image.passes()) > 1) == bool(planes_per_pass)
    expected = whole.vis2dirty(vis)
    pieces = first.vis2dirty(vis) + second.vis2dirty(vis)
    assert _rel_rms(pieces, expected) <= 1e-6
    assert np.array_equal(first.vis2dirty(vis), first.vis2dirty(vis))
    model = np.random.default_rng(22).normal(size=expected.shape).astype(np.float32)
    predicted = first.dirty2vis(model) + second.dirty2vis(model)
    reference = whole.dirty2vis(model)
    assert np.abs(predicted - reference).max() <= 1e-5 * np.abs(reference).max()
    with pytest.raises(ValueError, match="end plane"):
        Imager(queue, planes=(0, k + 1), plane_rows={1: (0, rows)}, **common)
    if TileShape.for_device(cl_env.profile, layout.choice.support).vector:
        with pytest.raises(ValueError, match="vector tile"):
            Imager(queue, planes=(0, k + 1), plane_rows={k: (0, rows)},
                   **dict(common, tiles=None))


def test_nan_visibilities_sent_in_blocks_are_still_refused(cl_env):
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    uvw, freq, vis = _observation(n_rows=600, seed=14)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, vis_per_block=300,
                    tiles=TileShape(8, 32, 64), **GEOMETRY)
    imager.uploader = Uploader(_queue(cl_env), pinned=True)
    bad = vis.astype(np.complex64)
    bad[500, 1] = np.nan
    with pytest.raises(ValueError, match="vis contains NaN or Inf"):
        imager.vis2dirty(bad)


@pytest.mark.parametrize("inf", [False, True])
def test_a_nan_image_is_refused_with_results_in_pinned_memory(cl_env, inf):
    """dirty2vis of an image with a NaN (Inf) pixel, results in pinned memory
    (the GPU path, forced here): the check is read after the work is
    enqueued, yet the call raises and hands nothing out; given ``vis=``, it
    is checked first and the caller's array keeps its values; a clean image
    after it gives the staged path's bits."""
    from clgrid.core.transfer import Uploader
    queue = _queue(cl_env)
    uvw, freq, vis = _observation(n_rows=4096, n_chan=256, seed=43)
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, vis_per_block=300_000,
                    **GEOMETRY)
    dirty = imager.vis2dirty(vis)
    expected = imager.dirty2vis(dirty)
    imager.uploader = Uploader(queue, pinned=True)
    bad = dirty.copy()
    bad[3, 7] = np.inf if inf else np.nan
    with pytest.raises(ValueError, match="dirty contains NaN or Inf"):
        imager.dirty2vis(bad)
    out = imager.uploader.empty_host(expected.shape, expected.dtype)
    out[...] = 7.0
    with pytest.raises(ValueError, match="dirty contains NaN or Inf"):
        imager.dirty2vis(bad, vis=out)
    assert np.all(out == 7.0)
    assert np.array_equal(imager.dirty2vis(dirty), expected)


def test_count_scratch_is_kept_in_the_imagers_pool(cl_env):
    """The counts of a call (non-finite values, flags) reduce into scratch
    that goes back to the imager's pool, never freed: on NVIDIA a freed
    buffer waits for the queue holding the GIL, which stalled a second
    GPU's uploads (RESULTS, "the GIL held by a buffer release").  Same
    counts and image with the pool as the first call."""
    uvw, freq, vis = _observation(n_rows=400, seed=15)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, **GEOMETRY)
    mask = np.ones(vis.shape, bool)
    mask[:7] = False
    first = imager.vis2dirty(vis.astype(np.complex64), mask=mask)
    pool = imager.engine.primary.scratch
    assert pool.active_blocks == 0 and pool.held_blocks >= 1
    held = pool.held_blocks
    again = imager.vis2dirty(vis.astype(np.complex64), mask=mask)
    assert pool.held_blocks == held   # reused, not grown
    assert np.array_equal(first, again)
    assert imager.last_counts["flagged"] == 7 * vis.shape[1]


def test_per_polarisation_planes_outlive_the_device_call_only(cl_env):
    """dirty2vis of a (npol, ...) image copies each polarisation's plane out
    for the engine; the copies outlive dirty2vis_device (freeing them would
    wait for the queue) until release_planes or the host results; the
    predictions match one polarisation at a time."""
    uvw, freq, _ = _observation(n_rows=200, seed=16)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-4, **GEOMETRY)
    images = np.random.default_rng(17).normal(
        size=(2, GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)
    both_d = imager.dirty2vis_device(images)
    assert len(imager._per_thread.planes) == 2
    both = both_d.get()
    imager.release_planes()
    assert imager._per_thread.planes == []
    for pol in range(2):
        assert np.array_equal(both[:, :, pol], imager.dirty2vis(images[pol]))
    imager.dirty2vis(images)
    assert imager._per_thread.planes == []


@pytest.mark.parametrize("kept_screens", [False, True], ids=["screens", "kept-screens"])
@pytest.mark.parametrize("planes_per_pass", [1, 3])
def test_w_planes_in_several_passes_match_the_direct_transform(cl_env, monkeypatch,
                                                               planes_per_pass, kept_screens):
    """Where the device holds fewer w planes than the job needs, the planes
    go in passes: the first pass writes the image, later ones add to it; the
    visibilities predicted pass by pass add up likewise.  With the w screens
    computed per call and computed once per pass and kept (PoCL's CPUs),
    forced either way on any device."""
    from clgrid.core import correct as correct_module
    from clgrid.core import image as image_module
    monkeypatch.setattr(image_module, "planes_per_pass", lambda *a, **k: planes_per_pass)
    monkeypatch.setattr(correct_module, "keeps_screens", lambda *a: kept_screens)
    uvw, freq, vis = _observation(n_rows=120, seed=21)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-6, do_wgridding=True,
                    precision="double", **GEOMETRY)
    assert len(imager.engine.image.passes()) > 1
    assert imager.engine.primary.corrector.cache_screens == kept_screens
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **GEOMETRY)
    dirty = imager.vis2dirty(vis)
    assert _rel_rms(dirty, reference) <= 1e-6
    assert np.array_equal(dirty, imager.vis2dirty(vis))
    image = np.random.default_rng(22).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=True,
                             pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    predicted = imager.dirty2vis(image)
    assert np.linalg.norm(predicted - expected) / np.linalg.norm(expected) <= 1e-6
    if kept_screens:     # one kept screen per pass
        assert (len(imager.engine.primary.corrector._screens)
                == len(imager.engine.image.passes()))


@pytest.mark.parametrize("epsilon", [1e-4, 1e-7], ids=["vector-rows", "scalar-rows"])
@pytest.mark.parametrize("window", ["default", "every-tile", "sliding", "per-point"])
@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.sweep
def test_cpu_interpolation_from_tile_windows(cl_env, monkeypatch, do_w, window, epsilon):
    """The CPU interpolation (the vector tile forced on any device): with w
    a tile's points from a compact window of its cells (interpolate_tiles,
    the default; tiles of few points read the planes directly), every tile
    through a window, also one of only W planes that slides along the
    tile's points; point by point (interpolate_vector: without w, or where
    a window would not fit): the direct transform's answer to epsilon, with
    a facet, weights and flags; rows as vectors (W <= 8) and cell by cell
    (W > 8)."""
    from clgrid.core.plan import TileShape
    from clgrid.core.spread import Interpolator
    cl_env.require_vector_tiles()
    if window == "per-point":
        monkeypatch.setattr(Interpolator, "tiled", False)
    if window in ("every-tile", "sliding"):
        monkeypatch.setattr(Interpolator, "WINDOW_MIN_POINTS", 1)
    if window == "sliding":
        monkeypatch.setattr(Interpolator, "window_planes", property(
            lambda self: self.layout.choice.support if self.geometry.do_w else 0))
    uvw, freq, vis = _observation(n_rows=150, seed=41)
    facet = dict(GEOMETRY, center_x=0.01, center_y=0.02)
    rng = np.random.default_rng(42)
    wgt = rng.uniform(0.5, 2.0, size=vis.shape)
    mask = rng.uniform(size=vis.shape) > 0.1
    image = rng.normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    precision = "single" if epsilon > 1e-5 else "double"
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=do_w,
                    precision=precision, tiles=TileShape(16, 16, 2 ** 31, True, 2), **facet)
    interpolator = imager.engine.interpolator
    # windows with w only; by default W double planes at W 10 (1e-7) are over
    # WINDOW_BYTES
    tiled = do_w and (window == "sliding" or (window != "per-point" and epsilon > 1e-5))
    assert interpolator.kernel_name == ("interpolate_tiles" if tiled else "interpolate_vector")
    if do_w and window == "sliding":   # more planes than the window holds
        assert imager.n_planes > interpolator.window_planes
    real = np.float32 if precision == "single" else np.float64
    predicted = imager.dirty2vis(image.astype(real), wgt=wgt.astype(real), mask=mask)
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w, pixsize_x=facet["pixsize_x"],
                             pixsize_y=facet["pixsize_y"], center_x=facet["center_x"],
                             center_y=facet["center_y"]) * wgt * mask
    assert np.linalg.norm(predicted - expected) / np.linalg.norm(expected) <= 3 * epsilon


def test_balanced_order_gives_every_range_of_items_its_share():
    """The CPU work lists' order (PoCL hands its threads contiguous ranges
    of work-groups): a permutation; with a dense centre (one tile split into
    chunks, its neighbours heavy too) every sixteenth of the list holds
    about a sixteenth of the work, where tile order put 97% in one; runs of
    unsplit neighbours stay together and in order (they share grid pages);
    the chunks of the split tile land far apart."""
    from clgrid.core.spread import BALANCE_RUN, balanced_order
    weights = np.ones(65536)
    split = np.zeros(weights.size, bool)
    weights[30000:30640] = 600.0        # the dense centre's tiles
    weights[30200:30216] = 4096.0       # one of them in 16 chunks
    split[30200:30216] = True
    order = balanced_order(weights, split)
    assert np.array_equal(np.sort(order), np.arange(weights.size))
    shares = weights[order].reshape(16, -1).sum(axis=1) / weights.sum()
    assert shares.max() < 1.5 / 16 and shares.min() > 0.5 / 16
    assert weights.reshape(16, -1).sum(axis=1).max() / weights.sum() > 0.8
    unsplit = order[~split[order]]
    steps = np.diff(unsplit)
    assert np.mean(steps == 1) >= (BALANCE_RUN - 1) / BALANCE_RUN - 0.01
    chunk_places = np.flatnonzero(split[order])
    assert np.diff(chunk_places).min() > weights.size // 64


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_cpu_dense_tiles_split_over_work_items(cl_env, do_w):
    """The CPU vector tile with dense tiles cut into chunks of 16 points
    (spread: the chunks' float64 totals folded in chunk order; interpolation
    from tile windows: each chunk its own window): the direct transform's
    answer both ways, and the unsplit tiles' answer to rounding."""
    from clgrid.core.plan import TileShape
    cl_env.require_vector_tiles()
    uvw, freq, vis = _observation(n_rows=400, seed=43, w_scale=0.1)
    facet = dict(GEOMETRY, center_x=0.01, center_y=-0.02)
    rng = np.random.default_rng(44)
    wgt = rng.uniform(0.5, 2.0, size=vis.shape)
    image = rng.normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    results = {}
    for chunk in (2 ** 31, 16):
        imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                        tiles=TileShape(16, 16, chunk, True, 2), **facet)
        results[chunk] = (imager.vis2dirty(vis.astype(np.complex64), wgt=wgt),
                          imager.dirty2vis(image.astype(np.float32), wgt=wgt))
        points = imager.engine.blocks[0].points
        spread_work = imager.engine.spreader.work_of(points)
        split = [work for key, work in spread_work.items()
                 if isinstance(key, tuple) and len(key) == 3 and work.chunk_folds is not None]
        assert bool(split) == (chunk == 16)
        if do_w:   # interpolate_tiles: more items than occupied tiles
            assert imager.engine.interpolator.kernel_name == "interpolate_tiles"
            occupied = np.count_nonzero(np.diff(
                points.bin_start_host[::imager.layout.n_wbins].astype(np.int64)))
            items = imager.engine.interpolator.work_of(points)["interp_tiles"].shape[0]
            assert (items > occupied) == (chunk == 16)
    dirty, predicted = results[16]
    assert _rel_rms(dirty, results[2 ** 31][0]) <= 1e-6
    assert _rel_rms(predicted, results[2 ** 31][1]) <= 1e-6
    reference = dft_vis2dirty(uvw, freq, vis * wgt, do_wgridding=do_w, **facet)
    assert _rel_rms(dirty, reference) <= 1e-5
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w, pixsize_x=facet["pixsize_x"],
                             pixsize_y=facet["pixsize_y"], center_x=facet["center_x"],
                             center_y=facet["center_y"]) * wgt
    assert _rel_rms(predicted, expected) <= 1e-5


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_facet_phases_kept_or_computed_give_the_same_bits(cl_env, monkeypatch, do_w):
    """A facet's phases, kept per plan (CPUs) or computed per call (GPUs),
    forced either way on any device: the same bits, and the direct
    transform's answer, both directions."""
    from clgrid.core import spread as spread_module
    uvw, freq, vis = _observation(n_rows=120, seed=31)
    facet = dict(GEOMETRY, center_x=0.02, center_y=-0.03)
    image = np.random.default_rng(32).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    results = {}
    for kept in (False, True):
        monkeypatch.setattr(spread_module, "keeps_facet_phases", lambda *a, kept=kept: kept)
        imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5,
                        do_wgridding=do_w, **facet)
        results[kept] = (imager.vis2dirty(vis.astype(np.complex64)),
                         imager.dirty2vis(image.astype(np.float32)))
        block = imager.engine.blocks[0]
        assert ("facet_phasors" in imager.engine.spreader.work_of(block.points)) == kept
    assert np.array_equal(results[False][0], results[True][0])
    assert np.array_equal(results[False][1], results[True][1])
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **facet)
    assert _rel_rms(results[True][0], reference) <= 1e-5
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w, center_x=0.02,
                             center_y=-0.03, pixsize_x=GEOMETRY["pixsize_x"],
                             pixsize_y=GEOMETRY["pixsize_y"])
    assert _rel_rms(results[True][1], expected) <= 1e-5


def test_facet_phases_kept_on_cpus_where_they_fit(cl_env):
    from clgrid.core.spread import keeps_facet_phases
    from fake_profiles import fake
    uvw, freq, _ = _observation(n_rows=20, seed=33)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5,
                    **dict(GEOMETRY, center_x=0.01))
    geometry = imager.engine.image.geometry
    cpu = fake(device_type="cpu")
    assert keeps_facet_phases(cpu, geometry, 10 ** 6, False)
    assert not keeps_facet_phases(cpu, geometry, 10 ** 6, True)         # float-float phases
    assert not keeps_facet_phases(fake(), geometry, 10 ** 6, False)     # a GPU
    assert not keeps_facet_phases(cpu, geometry, 10 ** 12, False)       # too many
    centred = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5, **GEOMETRY)
    assert not keeps_facet_phases(cpu, centred.engine.image.geometry, 10 ** 6, False)


def test_kept_screens_only_on_pocl_cpus_and_where_they_fit(cl_env):
    from clgrid.core.correct import keeps_screens
    from fake_profiles import fake
    uvw, freq, _ = _observation(n_rows=20, seed=24)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=True,
                    **GEOMETRY)
    geometry, layout = imager.engine.image.geometry, imager.engine.image.layout
    pocl_cpu = fake(device_type="cpu", platform_name="Portable Computing Language")
    assert pocl_cpu.platform_key == "pocl"
    assert keeps_screens(pocl_cpu, geometry, layout, False)
    assert not keeps_screens(pocl_cpu, geometry, layout, True)           # float-float screens
    assert not keeps_screens(fake(), geometry, layout, False)             # a GPU
    assert not keeps_screens(dataclasses.replace(pocl_cpu, global_mem_bytes=2 ** 16),
                             geometry, layout, False)                     # too little memory
    assert imager.engine.primary.corrector.cache_screens == (cl_env.profile.platform_key == "pocl"
                                                     and cl_env.profile.device_type == "cpu")


def test_all_w_planes_in_one_pass_when_they_fit_whatever_the_row_count(cl_env):
    uvw, freq, _ = _observation(n_rows=3, seed=23)
    imager = Imager(_queue(cl_env), uvw=uvw, freq=freq, epsilon=1e-6, do_wgridding=True,
                    precision="double", **GEOMETRY)
    assert imager.n_planes > 3 and imager.engine.image.passes() == [(0, imager.n_planes)]


def test_a_cpu_pass_holds_at_most_cpu_plane_bytes_of_w_planes():
    """On a CPU the device memory is the caller's host memory: a pass takes
    CPU_PLANE_BYTES of planes (at least two), a GPU all that fit its share."""
    from clgrid.core.eskernel import KernelChoice
    from clgrid.core.plan import CPU_PLANE_BYTES, GridLayout, planes_per_pass
    from fake_profiles import fake
    choice = KernelChoice(support=7, beta=2.3, sigma=2.0, error_1d=1e-5)
    layout = GridLayout(choice, 1024, 1024, (-1.0, 1.0), 400, 0.01, -1.0)   # 16 MiB planes
    cpu = fake(device_type="cpu", global_mem_bytes=64 << 30, max_alloc_bytes=16 << 30)
    per_pass = planes_per_pass(cpu, layout, np.complex128)
    assert per_pass * 16 * 2 ** 20 <= CPU_PLANE_BYTES and per_pass >= CPU_PLANE_BYTES // 2 ** 25
    assert planes_per_pass(fake(), layout, np.complex128) == 400
    huge = GridLayout(choice, 8192, 8192, (-1.0, 1.0), 40, 0.01, -1.0)       # 1 GiB planes
    assert planes_per_pass(cpu, huge, np.complex128) == 2


def test_pinned_staging_uploads_a_strided_window_at_a_byte_offset(cl_env):
    """PinnedStaging.upload (reprojection's path): any strides, placed at an offset."""
    import pyopencl as cl
    from clgrid.device.hostio import PinnedStaging
    queue = _queue(cl_env)
    image = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    window = image[5:25:2, 3:27]   # strided rows and columns
    target = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 4096)
    staging = PinnedStaging(queue.context, queue)
    staging.upload(window, target, offset=64)
    queue.finish()
    back = np.empty(window.size, np.float32)
    cl.enqueue_copy(queue, back, target, src_offset=64)
    assert np.array_equal(back.reshape(window.shape), window)


@pytest.mark.parametrize("n_rows, row_bytes", [(1 << 14, 4096), (3, 1 << 20), (999, 8),
                                             (5, 64 << 20), (2 ** 24 // 64, 512), (0, 8),
                                             (4, 0)])
def test_copies_are_cut_into_a_chunk_for_every_copy_thread(monkeypatch, n_rows, row_bytes):
    """A row block's host copy is cut into whole rounds of the copy threads
    (a 64 MiB block in 8 MiB chunks kept half of 16 threads idle; 128 MiB
    made 17 chunks, the last copied alone), chunks stay within 1-8 MiB where
    rows allow, and every row is in exactly one chunk, in order."""
    from clgrid.device import hostio
    monkeypatch.setenv("CLGRID_COPY_THREADS", "16")
    chunks = hostio._row_chunks(7, 7 + n_rows, row_bytes)
    if n_rows == 0:
        assert chunks == []
        return
    assert chunks[0][0] == 7 and chunks[-1][1] == 7 + n_rows
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(chunks, chunks[1:]))
    sizes = np.array([(b - a) * row_bytes for a, b in chunks[:-1]])
    total = n_rows * row_bytes
    if total >= 16 * hostio.MIN_CHUNK_BYTES and row_bytes <= hostio.MIN_CHUNK_BYTES:
        assert len(chunks) % 16 == 0 or len(chunks) % 16 == 15   # rows round the sizes
    if row_bytes <= hostio.MIN_CHUNK_BYTES // 2:
        assert np.all(sizes >= hostio.MIN_CHUNK_BYTES // 2)
    assert np.all(sizes <= max(hostio.CHUNK_BYTES, row_bytes))


def test_pinned_staging_downloads_and_adds_in_chunks(cl_env, monkeypatch):
    """PinnedStaging.download (the multi-device image sum): written, then
    added from the staging memory, chunk by chunk, at a byte offset: exactly
    the numpy sum; an output whose rows are not a view is refused for adding."""
    import pyopencl as cl
    from clgrid.device import hostio
    monkeypatch.setattr(hostio, "CHUNK_BYTES", 4096)   # many chunks
    queue = _queue(cl_env)
    rng = np.random.default_rng(5)
    first, second = rng.normal(size=(2, 3, 40, 30)).astype(np.float32)
    source = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, first.nbytes + 128)
    staging = hostio.PinnedStaging(queue.context, queue)
    total = np.empty_like(first)
    for part, accumulate in ((first, False), (second, True)):
        cl.enqueue_copy(queue, source, part, dst_offset=128)
        staging.download(source, total, offset=128, accumulate=accumulate)
    assert np.array_equal(total, first + second)
    with pytest.raises(ValueError, match="view"):
        staging.download(source, np.empty((3, 41, 30), np.float32)[:, :40], offset=128,
                         accumulate=True)


def test_pinned_results_are_reused_only_when_every_view_is_gone(cl_env, monkeypatch):
    """PinnedResults (large GPU results handed out in pinned memory): a slot
    comes back once the array and all its views are dropped; with every slot
    held, or past the budget, take() says None (the caller downloads the usual
    way)."""
    import gc
    from clgrid.device import hostio
    queue = _queue(cl_env)
    pool = hostio.PinnedResults(queue.context, queue, max_slots=2)
    first = pool.take((100, 3), np.complex64)
    first[...] = 1 + 2j
    view = first[10:20, 1]
    second = pool.take((50,), np.float64)
    assert first.flags.c_contiguous and first.shape == (100, 3) and pool.held == 2
    assert pool.take((4,), np.float32) is None                 # both held
    del first
    gc.collect()
    assert pool.held == 2 and np.all(view == 1 + 2j)           # the view keeps its slot
    del view
    gc.collect()
    assert pool.held == 1
    third = pool.take((120, 3), np.complex64)                  # the free slot, grown
    assert third is not None and third.nbytes == 120 * 3 * 8 and pool.held == 2
    del second, third
    gc.collect()
    assert pool.held == 0
    # a major cycle: prediction, residuals in place, image; after two cycles
    # no slot is grown or added again (growing 930 MB costs 400 ms on a GPU)
    cycle_pool = hostio.PinnedResults(queue.context, queue)
    grown = []
    grow = cycle_pool._grow
    cycle_pool._grow = lambda slot, nbytes: grown.append(nbytes) or grow(slot, nbytes)
    image = cycle_pool.take((64,), np.float32)
    residual = None
    for cycle in range(6):
        if cycle == 2:
            grown.clear()
        residual = cycle_pool.take((4096,), np.complex64)   # the last one held meanwhile
        image = cycle_pool.take((64,), np.float32)          # likewise
        assert residual is not None and image is not None
    assert grown == []
    def refused(*args, **kwargs):
        raise hostio.cl.MemoryError("clCreateBuffer", "out of page-locked memory")

    with monkeypatch.context() as patch:
        patch.setattr(hostio.cl, "Buffer", refused)
        assert hostio.PinnedResults(queue.context, queue).take((1000,), np.float32) is None
    monkeypatch.setenv("CLGRID_PINNED_RESULTS_MB", "0")
    small = hostio.PinnedResults(queue.context, queue)
    assert small.take((1000,), np.float32) is None             # no budget


def test_imager_results_in_pinned_memory_match_the_staged_download(cl_env):
    """dirty2vis / vis2dirty results downloaded by one copy into pinned memory
    (what GPUs do; forced here on whatever device the fixture gives) are the
    staged path's bits; a result still held makes the next call use another
    slot, and with all four held the staged path.  A result passed back in
    (residuals in place) is uploaded from its slot directly, same bits."""
    import gc
    from clgrid.core.transfer import Uploader
    queue = _queue(cl_env)
    uvw, freq, vis = _observation(n_rows=4096, n_chan=256, seed=41)
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, **GEOMETRY)
    dirty = imager.vis2dirty(vis)
    expected_vis = imager.dirty2vis(dirty)
    assert expected_vis.nbytes >= 8 * 2 ** 20
    from clgrid.device import hostio
    results = hostio.PinnedResults(queue.context, queue)   # four slots, its own
    imager.uploader = Uploader(queue, pinned=True, results=results)
    held = [imager.dirty2vis(dirty) for _ in range(5)]   # four slots, then staged
    assert results.held == 4
    for predicted in held:
        assert np.array_equal(predicted, expected_vis)
    del held
    gc.collect()
    assert results.held == 0
    residual = imager.dirty2vis(dirty)
    assert np.array_equal(residual, expected_vis)
    np.subtract(vis.astype(residual.dtype), residual, out=residual)
    staged = imager.vis2dirty(residual.copy())
    assert imager.uploader._direct(residual, residual.dtype)
    assert not imager.uploader._direct(residual.copy(), residual.dtype)
    assert np.array_equal(imager.vis2dirty(residual), staged)
    assert imager.dirty2vis(dirty, vis=residual) is residual       # one DMA into it
    assert np.array_equal(residual, expected_vis)
    # in row blocks (GPUs: uploads on a second queue beside the spreading)
    from clgrid.core.plan import TileShape
    blocked = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, vis_per_block=300_000,
                     tiles=TileShape(8, 8), **GEOMETRY)   # lane tiles: the GPU kernel
    staged_blocks = blocked.dirty2vis(dirty)
    blocked.uploader = Uploader(queue, pinned=True)
    assert len(blocked.engine.blocks) > 2
    in_slot = blocked.dirty2vis(dirty)          # each block comes down once it is final
    assert blocked.uploader._direct(in_slot, in_slot.dtype)
    assert np.array_equal(in_slot, staged_blocks)
    assert _rel_rms(in_slot, expected_vis) < 1e-5
    np.subtract(vis.astype(in_slot.dtype), in_slot, out=in_slot)
    direct_rows = []
    rows_direct = blocked.uploader._rows_direct
    blocked.uploader._rows_direct = lambda *a: direct_rows.append(a[2:]) or rows_direct(*a)
    assert np.array_equal(blocked.vis2dirty(in_slot), blocked.vis2dirty(in_slot.copy()))
    assert direct_rows == [(b.first, b.stop) for b in blocked.engine.blocks]
    assert _rel_rms(blocked.vis2dirty(in_slot), staged) < 1e-5


def test_row_blocks_work_lists_planned_side_by_side_are_each_blocks_own(cl_env, monkeypatch):
    """Spreader.prepare plans a call's row blocks' work lists in the copy
    threads before the first block: each is the list the block would have
    made alone (work_list), and the image is the bits of a call that made
    them one block at a time."""
    import clgrid.core.spread as spread
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    queue = _queue(cl_env)
    uvw, freq, vis = _observation(n_rows=2048, n_chan=64, seed=71)

    def imager():
        made = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, vis_per_block=20_000,
                      tiles=TileShape(8, 8), **GEOMETRY)   # lane tiles: the GPU kernel
        made.uploader = Uploader(queue, pinned=True)        # numpy sent in the blocks
        return made
    planned = imager()
    spreader = planned.engine.primary.spreader
    blocks = planned.engine.plan.blocks
    assert len(blocks) > 3 and all(not spreader.work_of(b.points) for b in blocks)
    image = planned.vis2dirty(vis)
    for block in blocks:
        (key, work), = spreader.work_of(block.points).items()
        alone = spread.work_list(queue, block.points, spreader.layout, spreader.tiles, *key,
                                 spreader.plane_block)
        for name in ("items", "folds"):
            ours, theirs = getattr(work, name), getattr(alone, name)
            assert (ours is None and theirs is None) or np.array_equal(ours.get(), theirs.get())
    monkeypatch.setattr(spread.Spreader, "prepare", lambda self, passes: None)
    assert np.array_equal(imager().vis2dirty(vis), image)


def _pinned_imager(queue, seed: int):
    """An imager of its own observation in row blocks with the GPU's pinned
    copies (on whatever device the fixture gives), its visibilities, and
    vis2dirty and dirty2vis through the imager's own uploader first (on CPU
    devices lent host memory, one row block: the same values, other bits),
    copied out of any pinned slot."""
    from clgrid.core.plan import TileShape
    from clgrid.core.transfer import Uploader
    uvw, freq, vis = _observation(n_rows=4096, n_chan=256, seed=seed)
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, vis_per_block=300_000,
                    tiles=TileShape(8, 8), **GEOMETRY)   # lane tiles: the GPU kernel
    dirty = np.array(imager.vis2dirty(vis))
    unpinned = dirty, np.array(imager.dirty2vis(dirty))
    imager.uploader = Uploader(queue, pinned=True)
    assert len(imager.engine.blocks) > 2
    return imager, vis, unpinned


def test_pinned_memory_goes_from_one_observation_to_the_next(cl_env, monkeypatch):
    """The device's pinned staging and result slots are every plan's
    (PinnedPool, PinnedResults.for_device): a new observation's first calls
    map no pinned memory of their own (mapping 0.93 GB cost 0.4-0.6 s on the
    H200 machine, per observation) and give the same bits as its later
    calls; past CLGRID_PINNED_STAGING_MB the pool unmaps what it is given
    back, and the calls are unchanged."""
    import gc
    from clgrid.device import hostio
    queue = _queue(cl_env)
    pool = hostio.PinnedPool.for_device(queue.context, queue.device)
    results = hostio.PinnedResults.for_device(queue.context, queue.device)
    first, vis, _ = _pinned_imager(queue, 51)
    kept = first.dirty2vis(first.vis2dirty(vis))
    assert first.uploader._direct(kept, kept.dtype)   # a pinned result slot
    del kept
    gc.collect()
    # the call's end gave the visibilities' staging back
    assert pool.free_bytes >= vis.shape[0] * vis.shape[1] * 8
    mapped, slots = pool.mapped, len(results._slots)
    second, vis, (unpinned_dirty, unpinned_vis) = _pinned_imager(queue, 52)
    dirty = second.vis2dirty(vis)
    predicted = second.dirty2vis(dirty)
    assert (pool.mapped, len(results._slots)) == (mapped, slots)
    assert _rel_rms(dirty, unpinned_dirty) < 1e-6
    assert _rel_rms(predicted, second.dirty2vis(unpinned_dirty)) < 1e-6
    assert _rel_rms(second.dirty2vis(unpinned_dirty), unpinned_vis) < 1e-6
    assert np.array_equal(second.vis2dirty(vis), dirty)
    assert np.array_equal(second.dirty2vis(dirty), predicted)
    monkeypatch.setenv("CLGRID_PINNED_STAGING_MB", "1")
    assert np.array_equal(second.vis2dirty(vis), dirty)
    assert pool.free_bytes <= 2 ** 20                 # unmapped once given back
    assert np.array_equal(second.vis2dirty(vis), dirty)
    assert pool.mapped > mapped and pool.free_bytes <= 2 ** 20


def test_the_process_contexts_keep_their_pinned_pools_between_plans(cl_env):
    """On clgrid.create_context's contexts the device's pinned pools live for
    the process (the plan cache may drop the last plan before it makes the
    next one); on a caller's own context they go with their last user."""
    import gc
    import weakref
    import pyopencl as cl
    import clgrid
    from clgrid.device import hostio
    device = cl_env.device
    for context, kept in ((clgrid.create_context(device), True), (cl.Context([device]), False)):
        for pool_class in (hostio.PinnedPool, hostio.PinnedResults):
            pool = weakref.ref(pool_class.for_device(context, device))
            gc.collect()
            assert (pool() is not None) == kept, (pool_class.__name__, kept)
            if kept:
                assert pool_class.for_device(context, device) is pool()


def test_threads_imaging_their_own_observations_share_the_pinned_memory(cl_env):
    """Three threads, each with an imager of its own observation, calling at
    once through the device's shared pinned staging and result slots: every
    result is the bits of its imager called alone."""
    from concurrent.futures import ThreadPoolExecutor
    queue = _queue(cl_env)
    cases = []
    for seed in (61, 62, 63):
        imager, vis, _ = _pinned_imager(queue, seed)
        dirty = imager.vis2dirty(vis)
        cases.append((imager, vis, dirty, imager.dirty2vis(dirty)))

    def rounds(case):
        imager, vis, dirty, predicted = case
        return all(np.array_equal(imager.vis2dirty(vis), dirty)
                   and np.array_equal(imager.dirty2vis(dirty), predicted) for _ in range(2))

    with ThreadPoolExecutor(len(cases)) as threads:
        assert list(threads.map(rounds, cases)) == [True] * len(cases)


def _copy_at(array: np.ndarray, offset: int) -> np.ndarray:
    """A C-contiguous copy of ``array`` ``offset`` bytes past a page boundary."""
    raw = np.empty(array.nbytes + 8192, np.uint8)
    start = (-raw.ctypes.data) % 4096 + offset
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def test_cpu_devices_read_aligned_host_arrays_in_place(cl_env):
    """On CPU devices host arrays are lent to the kernels: an aligned one in
    place, another as an aligned copy; both give the same bits, and a device
    result is final before the lent array changes."""
    import pyopencl as cl
    queue = _queue(cl_env)
    if not queue.device.type & cl.device_type.CPU:
        pytest.skip("lending host arrays is for CPU devices")
    uvw, freq, vis = _observation(n_rows=600, n_chan=16, seed=31)
    aligned = _copy_at(vis.astype(np.complex64), 0)
    misaligned = _copy_at(vis.astype(np.complex64), 8)
    assert aligned.nbytes >= 64 * 1024
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-5, **GEOMETRY)
    lent = imager.uploader.to_device(aligned, np.complex64).data.hostbuf
    assert lent.ctypes.data == aligned.ctypes.data
    imager.uploader.settle()
    lent = imager.uploader.to_device(misaligned, np.complex64).data.hostbuf
    assert lent.ctypes.data != misaligned.ctypes.data and lent.ctypes.data % 128 == 0
    assert np.array_equal(lent, misaligned)
    imager.uploader.settle()
    expected = imager.vis2dirty(misaligned)
    assert np.array_equal(imager.vis2dirty(aligned), expected)
    assert np.array_equal(imager.vis2dirty(vis), expected)   # complex128, converted
    for lent in (aligned, misaligned):
        dirty_d = imager.vis2dirty_device(lent)
        lent[...] = 0   # after the call returns: must not reach the result
        assert np.array_equal(dirty_d.get()[0], expected)


# A facet 1.1 degrees off the phase centre seen by baselines to 20 km at
# 1.4 GHz (u to 9e4 wavelengths): its phases turn ~1900 times and w's tens
# of times across the rows, which float alone gets wrong by ~1e-3.
FACET = dict(npix_x=48, npix_y=40, pixsize_x=4e-6, pixsize_y=5e-6, center_x=0.02,
             center_y=-0.015)


def _long_baselines(n_rows=200, seed=11):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-20e3, 20e3, (n_rows, 3)) * np.array([1.0, 1.0, 0.5])
    freq = np.array([1.40e9, 1.41e9])
    vis = rng.normal(size=(n_rows, 2)) + 1j * rng.normal(size=(n_rows, 2))
    return uvw, freq, vis


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("case", ["wide", "facet", "far-w"])
def test_devices_without_fp64_keep_epsilon(cl_env, without_fp64, case, do_w):
    """Devices without fp64 (Apple, Intel Arc): positions, facet phases and
    phase screens in float-float, sums compensated; vis2dirty and dirty2vis
    in single precision at epsilon 1e-5 against the float64 direct Fourier
    transform, and no kernel uses double.  'far-w': w near 1e5 wavelengths,
    so the wide field's screens turn ~1400 times (few planes: w spans 2000)."""
    from conftest import double_free
    uvw, freq, vis = _observation(n_rows=150, seed=3) if case != "facet" else _long_baselines()
    if case == "far-w":
        uvw[:, 2] = 3e4 + uvw[:, 2] / 3
    geometry = dict(GEOMETRY, center_x=0.01) if case != "facet" else FACET
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                    **geometry)
    assert imager.float_float and not imager.engine.tiles.vector
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **geometry)
    assert _rel_rms(imager.vis2dirty(vis.astype(np.complex64)), reference) <= 1e-5
    image = np.random.default_rng(4).normal(size=(geometry["npix_x"], geometry["npix_y"]))
    expected = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w,
                             **{k: v for k, v in geometry.items() if not k.startswith("npix")})
    assert _rel_rms(imager.dirty2vis(image.astype(np.float32)), expected) <= 1e-5
    assert double_free(without_fp64)


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_gpus_without_fp64_stage_compensated_totals_in_local_memory(cl_env, without_fp64,
                                                                    monkeypatch, do_w):
    """A GPU without fp64 (Intel Arc, Apple; forced here): the GPU kernel's
    staging of only the touching points (spread.compacts_points) with the
    lanes' compensated float totals in local memory where a group takes one
    w plane (Spreader.local_state); epsilon 1e-5 against the float64 direct
    Fourier transform, the same bits twice, and no kernel uses double."""
    import clgrid.core.spread as spread
    from conftest import double_free
    monkeypatch.setattr(spread, "compacts_points", lambda profile: True)
    uvw, freq, vis = _observation(n_rows=150, seed=3)
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                    **GEOMETRY)
    spreader = imager.engine.spreader
    assert imager.float_float and spreader.compact
    assert spreader.local_state == (spreader.plane_block == 1)
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    dirty = imager.vis2dirty(vis.astype(np.complex64))
    assert _rel_rms(dirty, reference) <= 1e-5
    assert np.array_equal(dirty, imager.vis2dirty(vis.astype(np.complex64)))
    assert double_free(without_fp64)


def test_devices_without_fp64_take_single_precision_only(cl_env, without_fp64):
    uvw, freq, vis = _observation(n_rows=20)
    with pytest.raises(ValueError, match="has no double precision.*use single precision"):
        vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-7, queue=cl_env.queue, **GEOMETRY)
    from clgrid.core.plan import TileShape
    # a driver that cannot build vector tiles at all (PyPI's PoCL 3.0) says
    # that first; any other says the tile needs fp64
    expected = ("has no fp64, which the vector" if cl_env.profile.vector_kernels
                else "cannot build the vector \\(CPU\\) tiles")
    with pytest.raises(ValueError, match=expected):
        Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-4,
               tiles=TileShape(16, 16, vector=True), **GEOMETRY)
    # the fp64 check itself, on every platform: a profile that builds vector
    # tiles but has no fp64
    import types
    profile = types.SimpleNamespace(vector_kernels=True, fp64=False,
                                    device_name=cl_env.profile.device_name)
    with pytest.raises(ValueError, match="has no fp64, which the vector"):
        TileShape(16, 16, vector=True).check_device(profile)


def test_cached_call_sees_uvw_changed_in_place(cl_env):
    """clgrid.vis2dirty with a uvw edited in place between calls (a value the
    plan cache key's strided sample skips) images the new uvw, bit for bit
    as a fresh cache does: the cached imager compares with its own copy."""
    import clgrid
    from clgrid.imaging.imager import _drop_cached_imagers
    rng = np.random.default_rng(4)
    uvw = rng.normal(0.0, 60.0, (6000, 3))
    freq = np.array([1.0e9])
    vis = (rng.standard_normal((6000, 1)) + 1j * rng.standard_normal((6000, 1))).astype(np.complex64)
    kw = dict(freq=freq, vis=vis, npix_x=32, npix_y=32, pixsize_x=2e-3, pixsize_y=2e-3,
              epsilon=1e-5, context=cl_env.context)
    clgrid.vis2dirty(uvw=uvw, **kw)
    _edit_unsampled_value(uvw)
    again = clgrid.vis2dirty(uvw=uvw, **kw)
    _drop_cached_imagers()
    fresh = clgrid.vis2dirty(uvw=uvw.copy(), **kw)
    assert np.array_equal(again, fresh)


def _edit_unsampled_value(uvw: np.ndarray) -> None:
    """Change one uvw value the plan cache key's strided sample skips."""
    step = uvw.size // 4096
    assert step >= 2
    flat = uvw.reshape(-1)
    flat[next(i for i in range(uvw.size // 2, uvw.size) if i % step and i % 3 != 2)] *= 1.7


@pytest.mark.parametrize("output_given", [False, True])
def test_cached_dirty2vis_checks_beside_the_call_and_redoes_a_stale_one(cl_env, monkeypatch,
                                                                          output_given):
    """clgrid.dirty2vis on a cached plan compares uvw beside the call (the
    check threads) where it writes no array of the caller's, before it
    otherwise; a uvw edited in place gives the new uvw's visibilities, bit
    for bit as a fresh cache does, from one new plan, the stale one dropped."""
    import clgrid
    import clgrid.imaging.imager as imager_module
    from clgrid.device import plancache
    rng = np.random.default_rng(5)
    uvw = rng.normal(0.0, 60.0, (6000, 3))
    freq = np.array([1.0e9, 1.1e9])
    dirty = rng.standard_normal((32, 32)).astype(np.float32)
    kw = dict(freq=freq, dirty=dirty, pixsize_x=2e-3, pixsize_y=2e-3, epsilon=1e-5,
              context=cl_env.context)

    def out():
        return {"vis": np.zeros((6000, 2), np.complex64)} if output_given else {}

    beside = []
    real_later = imager_module.same_bits_later
    monkeypatch.setattr(imager_module, "same_bits_later",
                        lambda a, b: beside.append(1) or real_later(a, b))
    first = clgrid.dirty2vis(uvw=uvw, **kw, **out())
    assert np.array_equal(clgrid.dirty2vis(uvw=uvw, **kw, **out()), first)
    assert len(beside) == (0 if output_given else 1)
    builds, held = plancache.plans.builds, len(plancache.plans)
    _edit_unsampled_value(uvw)
    again = clgrid.dirty2vis(uvw=uvw, **kw, **out())
    assert plancache.plans.builds == builds + 1
    assert len(plancache.plans) == held   # the stale plan replaced, not kept beside
    assert not np.array_equal(again, first)
    imager_module._drop_cached_imagers()
    fresh = clgrid.dirty2vis(uvw=uvw.copy(), **kw, **out())
    assert np.array_equal(again, fresh)

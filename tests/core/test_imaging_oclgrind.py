"""The gridding core's kernels under Oclgrind (set points, spread, interpolate,
correct; w and no w, facet centre, weights and flags): no data race, no
out-of-bounds access."""

import textwrap

import pytest

from oclgrind_check import run_clean

SCRIPT = textwrap.dedent("""
    import numpy as np, pyopencl as cl
    import clgrid
    from clgrid.imaging import Imager, dft_vis2dirty
    queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
    rng = np.random.default_rng(0)
    uvw = rng.uniform(-40.0, 40.0, (6, 3))
    freq = np.array([1.0e9])
    vis = (rng.normal(size=(6, 1)) + 1j * rng.normal(size=(6, 1))).astype(np.complex64)
    geometry = dict(npix_x=8, npix_y=8, pixsize_x=0.02, pixsize_y=0.02)
    imager = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-2, do_wgridding=True,
                    precision="single", fft_backend="numpy", **geometry)
    dirty = imager.vis2dirty(vis)
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **geometry)
    error = np.linalg.norm(dirty - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    predicted = imager.dirty2vis(dirty)
    assert np.all(np.isfinite(predicted))
    # the other kernel variants: no w, facet centre, weights and flags, the GPU
    # tile shape with point lists split into chunks of 2 and folded
    wgt = rng.uniform(0.5, 2.0, (6, 1)).astype(np.float32)
    mask = np.array([[1], [0], [1], [1], [1], [1]], np.uint8)
    shifted = dict(geometry, center_x=0.01, center_y=-0.02)
    from clgrid.core.plan import TileShape
    facet = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-2, precision="single",
                   fft_backend="numpy", tiles=TileShape(8, 32, 2), **shifted)
    dirty = facet.vis2dirty(vis, wgt=wgt, mask=mask)
    reference = dft_vis2dirty(uvw, freq, vis * wgt * mask, **shifted)
    error = np.linalg.norm(dirty - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    assert np.all(np.isfinite(facet.dirty2vis(dirty, wgt=wgt, mask=mask)))
    # the CPU kernel (one work-item per tile, columns as one vector), blocks of
    # 3 planes, tiles split into chunks of 2 points (folded after)
    vector = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-2, do_wgridding=True,
                    precision="single", fft_backend="numpy",
                    tiles=TileShape(8, 16, 2, True, 3), **geometry)
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **geometry)
    error = np.linalg.norm(vector.vis2dirty(vis) - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    # the GPU kernel with w in blocks of 3 planes (two groups of lanes a
    # plane), chunks of 2 points folded per plane; the w taps by exp and by
    # Horner
    for epsilon, kernel_eval in ((1e-2, "exp"), (1e-4, "horner")):
        blocks = Imager(queue, uvw=uvw, freq=freq, epsilon=epsilon, do_wgridding=True,
                        precision="single", fft_backend="numpy",
                        tiles=TileShape(8, 8, 2, False, 3, groups=2,
                                        kernel_eval=kernel_eval), **geometry)
        error = np.linalg.norm(blocks.vis2dirty(vis) - reference) / np.linalg.norm(reference)
        assert error < epsilon, (kernel_eval, error)
    # the same on GPUs' terms (forced here): only the points that touch a tile
    # staged, by local atomics and bit counts, each tap at its place in the
    # tile; w blocks and 4 groups without w (their totals in local memory)
    import clgrid.core.spread as spread
    gpu_terms, spread.compacts_points = spread.compacts_points, lambda profile: True
    for do_w, shape in ((True, TileShape(8, 8, 2, False, 3, groups=2, kernel_eval="horner")),
                        (False, TileShape(8, 8, 2, groups=4, kernel_eval="horner"))):
        compact = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=do_w,
                         precision="single", fft_backend="numpy", tiles=shape, **geometry)
        assert compact.engine.spreader.compact
        assert compact.engine.spreader.local_state == (not do_w)
        expected = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **geometry)
        error = np.linalg.norm(compact.vis2dirty(vis) - expected) / np.linalg.norm(expected)
        assert error < 1e-4, (do_w, error)
    spread.compacts_points = gpu_terms
    # the CPU default: taps by Horner's rule (W = 6 at 1e-4), both directions;
    # every tile interpolated from a window (here too few points a tile for
    # one), chunks of 2 points a window
    from clgrid.core.spread import Interpolator
    min_points, Interpolator.WINDOW_MIN_POINTS = Interpolator.WINDOW_MIN_POINTS, 1
    horner = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                    precision="single", fft_backend="numpy",
                    tiles=TileShape(16, 16, 2, True, 2, kernel_eval="horner"), **geometry)
    assert horner.engine.spreader.kernel_eval == "horner"
    error = np.linalg.norm(horner.vis2dirty(vis) - reference) / np.linalg.norm(reference)
    assert error < 1e-4, error
    assert horner.engine.interpolator.kernel_name == "interpolate_tiles"
    assert np.all(np.isfinite(horner.dirty2vis(reference.astype(np.float32))))
    # the CPU interpolation point by point (where a tile's window would not fit)
    Interpolator.WINDOW_MIN_POINTS = min_points
    Interpolator.tiled = False
    per_point = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                       precision="single", fft_backend="numpy",
                       tiles=TileShape(16, 16, 2 ** 31, True, 2, kernel_eval="horner"),
                       **geometry)
    assert per_point.engine.interpolator.kernel_name == "interpolate_vector"
    assert np.all(np.isfinite(per_point.dirty2vis(reference.astype(np.float32))))
    Interpolator.tiled = None
    # the CPU kernels without w, with a facet centre, weights and flags
    flat = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, precision="single",
                  fft_backend="numpy", tiles=TileShape(16, 16, 2 ** 31, True, 1, kernel_eval="horner"),
                  **shifted)
    reference = dft_vis2dirty(uvw, freq, vis * wgt * mask, **shifted)
    error = np.linalg.norm(flat.vis2dirty(vis, wgt=wgt, mask=mask) - reference) / np.linalg.norm(
        reference)
    assert error < 1e-4, error
    assert np.all(np.isfinite(flat.dirty2vis(reference.astype(np.float32), wgt=wgt, mask=mask)))
    # the GPU kernels with w, visibilities in row blocks (sub-buffers, later
    # blocks adding to the grid) sent through pinned memory on a second queue
    from clgrid.core.transfer import Uploader
    align = queue.device.mem_base_addr_align // 8
    rows = 2 * align + 5
    uvw_b = rng.uniform(-40.0, 40.0, (rows, 3))
    vis_b = (rng.normal(size=(rows, 1)) + 1j * rng.normal(size=(rows, 1))).astype(np.complex64)
    blocked = Imager(queue, uvw=uvw_b, freq=freq, epsilon=1e-2, do_wgridding=True,
                     precision="single", fft_backend="numpy", vis_per_block=align,
                     tiles=TileShape(8, 8, 64, groups=4), **geometry)
    blocked.uploader = Uploader(queue, pinned=True)
    assert len(blocked.engine.blocks) == 3
    reference = dft_vis2dirty(uvw_b, freq, vis_b, do_wgridding=True, **geometry)
    error = np.linalg.norm(blocked.vis2dirty(vis_b) - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    # split items folded in parts (here every item of 2 or more chunks of 1
    # point), and a call on device arrays taking a plan of one row block
    import clgrid.core.spread as spread
    import pyopencl.array as cla
    spread.WIDE_FOLD_SLOTS = 1
    parts = Imager(queue, uvw=uvw_b, freq=freq, epsilon=1e-2, do_wgridding=True,
                   precision="single", fft_backend="numpy", vis_per_block=align,
                   tiles=TileShape(8, 8, 1, groups=2), **geometry)
    parts.uploader = Uploader(queue, pinned=True)
    work = parts.engine.spreader.work(parts.engine.blocks[0].points,
                                      *parts.engine.image.passes()[0], True)
    assert parts.engine.spreader.fold_parts > 1 and work.n_wide_folds > 0
    error = np.linalg.norm(parts.vis2dirty(vis_b) - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    on_device = parts.vis2dirty_device(cla.to_device(queue, vis_b)).get()[0]
    assert len(parts.engine.plan_for(True).blocks) == 1
    error = np.linalg.norm(on_device - reference) / np.linalg.norm(reference)
    assert error < 1e-2, error
    spread.WIDE_FOLD_SLOTS = 32
    # a device without fp64: float-float set points, facet phases and phase
    # screens, Kahan sums; w, a facet centre, weights and flags, split chunks
    import dataclasses
    from clgrid.device.profiles import DeviceProfile
    with_fp64 = DeviceProfile.from_device
    DeviceProfile.from_device = classmethod(
        lambda cls, device: dataclasses.replace(with_fp64(device), fp64=False))
    single = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                    fft_backend="numpy", tiles=TileShape(8, 8, 2, groups=2), **shifted)
    assert single.float_float
    reference = dft_vis2dirty(uvw, freq, vis * wgt * mask, do_wgridding=True, **shifted)
    dirty = single.vis2dirty(vis, wgt=wgt, mask=mask)
    error = np.linalg.norm(dirty - reference) / np.linalg.norm(reference)
    assert error < 1e-4, error
    assert np.all(np.isfinite(single.dirty2vis(dirty, wgt=wgt, mask=mask)))
    DeviceProfile.from_device = with_fp64
    # the w screens computed once per pass and kept (PoCL's CPUs), in passes
    # of 2 planes, and the facet phases kept per plan (CPUs), on the GPU
    # kernels and the CPU vector kernels
    from clgrid.core import correct, image, spread
    correct.keeps_screens = lambda *a: True
    spread.keeps_facet_phases = lambda *a: True
    image.planes_per_pass = lambda *a, **k: 2
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **shifted)
    for tiles in (None, TileShape(8, 16, 2 ** 31, True, 2)):
        kept = Imager(queue, uvw=uvw, freq=freq, epsilon=1e-4, do_wgridding=True,
                      fft_backend="numpy", tiles=tiles, **shifted)
        assert (kept.engine.primary.corrector.cache_screens
                and len(kept.engine.image.passes()) > 1)
        dirty = kept.vis2dirty(vis)
        assert "facet_phasors" in kept.engine.spreader.work_of(kept.engine.blocks[0].points)
        error = np.linalg.norm(dirty - reference) / np.linalg.norm(reference)
        assert error < 1e-4, error
        assert np.all(np.isfinite(kept.dirty2vis(dirty)))
    print("done", imager.n_planes)
""")


@pytest.mark.tiny
def test_wgridder_kernels_have_no_race_or_bad_access(request):
    result = run_clean(request.config, SCRIPT)
    assert "done" in result.stdout

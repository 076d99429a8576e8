"""Imperfect visibilities as real data brings them (issue 36): NaN or Inf in
a visibility that is masked or has zero weight is ignored, as ducc0 and
clgrid's own table Gridder do; in a used one it is refused, naming the
count; no polarisation axis and a NaN image size are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

import clgrid
from clgrid.core.plan import TileShape
from clgrid.core.transfer import Uploader
from clgrid.imaging import Imager, dft_dirty2vis, dft_vis2dirty

GEOMETRY = dict(npix_x=32, npix_y=32, pixsize_x=4e-4, pixsize_y=4e-4)


def _observation(n_rows: int = 80, seed: int = 0):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-300, 300, (n_rows, 3))
    freq = np.array([1.0e9, 1.05e9])
    vis = (rng.normal(size=(n_rows, 2)) + 1j * rng.normal(size=(n_rows, 2)))
    return uvw, freq, vis


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("blocks", [False, True], ids=["one-block", "row-blocks"])
@pytest.mark.parametrize("unused_by", ["mask", "weight"])
def test_nan_in_unused_visibilities_is_ignored_like_ducc0(cl_env, unused_by, blocks):
    """NaN and Inf where mask or weight is 0: the image of the other
    visibilities (direct Fourier transform; ducc0 gives the same), also
    when the data comes in row blocks beside the spreading (the GPU path,
    forced here), and dirty2vis stays finite."""
    # blocks start on multiples of the rows that keep sub-buffers aligned
    # (plan.row_blocks): more rows than that where the device's alignment is
    # coarse (an H100's), so that there are two blocks
    uvw, freq, vis = _observation(n_rows=max(400, cl_env.profile.base_align_bytes + 100))
    weight = np.ones(vis.shape)
    mask = np.ones(vis.shape, np.uint8)
    bad = vis.copy()
    bad[3, 0], bad[10, 1], bad[11, 0] = np.nan, np.inf, complex(1.0, np.nan)
    for row, chan in ((3, 0), (10, 1), (11, 0)):
        (mask if unused_by == "mask" else weight)[row, chan] = 0
    # row blocks (aligned to 128 rows) need the lane tile (the vector tile is one block)
    options = dict(vis_per_block=256, tiles=TileShape(8, 32, 64)) if blocks else {}
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-5, **options, **GEOMETRY)
    if blocks:
        imager.uploader = Uploader(cl_env.queue, pinned=True)
        assert len(imager.engine.blocks) >= 2
    dirty = imager.vis2dirty(bad.astype(np.complex64), wgt=weight, mask=mask)
    reference = dft_vis2dirty(uvw, freq, vis * weight * mask, **GEOMETRY)
    assert _rel(dirty, reference) <= 1e-5
    ducc0 = pytest.importorskip("ducc0")
    theirs = ducc0.wgridder.vis2dirty(uvw=uvw, freq=freq, vis=bad, wgt=weight, mask=mask,
                                      epsilon=1e-7, **GEOMETRY)
    assert _rel(dirty, theirs) <= 1e-5
    predicted = imager.dirty2vis(dirty, wgt=weight, mask=mask)
    assert np.isfinite(predicted).all()
    expected = dft_dirty2vis(uvw, freq, dirty.astype(np.float64), pixsize_x=4e-4,
                             pixsize_y=4e-4) * weight * mask
    assert _rel(predicted, expected) <= 1e-5


def test_nan_in_a_used_visibility_is_refused_with_its_count(cl_env):
    uvw, freq, vis = _observation(seed=1)
    bad = vis.astype(np.complex64)
    bad[3, 0] = np.nan
    bad[4, 1] = np.inf
    mask = np.ones(vis.shape, bool)
    mask[4, 1] = False   # this one is ignored; the other is used
    with pytest.raises(ValueError, match=r"vis contains NaN or Inf in 1 visibilities that "
                                         r"are used"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=bad, mask=mask, epsilon=1e-4,
                         queue=cl_env.queue, **GEOMETRY)


@pytest.mark.parametrize("on_device", [False, True], ids=["numpy", "device-array"])
def test_the_spread_counts_nonfinite_values_instead_of_a_second_read(cl_env, monkeypatch,
                                                                     on_device):
    """The lane tile's gather counts NaN/Inf visibilities and weights as it
    reads them (Spreader.counts_nonfinite), so a clean call runs no count of
    its own over the visibilities; a used NaN visibility or weight is still
    refused with its count, an unused one still ignored (direct Fourier
    transform), and where a uvw is left out (its visibility never gathered)
    the imager counts every visibility as before."""
    import pyopencl.array as cla
    import clgrid.imaging.imager as imager_module
    counts = []
    real_count = imager_module._device_count
    monkeypatch.setattr(imager_module, "_device_count",
                        lambda queue, array, what, allocator: counts.append(what)
                        or real_count(queue, array, what, allocator))
    uvw, freq, vis = _observation(n_rows=120, seed=6)
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-5,
                    tiles=TileShape(8, 32, 64), **GEOMETRY)
    assert imager.engine.spreader.counts_nonfinite
    send = (lambda a: cla.to_device(cl_env.queue, a)) if on_device else (lambda a: a)
    weight = np.ones(vis.shape, np.float32)
    clean = imager.vis2dirty(send(vis.astype(np.complex64)), wgt=send(weight))
    assert "nonfinite" not in counts
    assert _rel(clean, dft_vis2dirty(uvw, freq, vis, **GEOMETRY)) <= 1e-5
    bad = vis.astype(np.complex64)
    bad[7, 1] = complex(np.inf, 0)
    with pytest.raises(ValueError, match=r"vis contains NaN or Inf in 1 visibilities"):
        imager.vis2dirty(send(bad), wgt=send(weight))
    bad_weight = weight.copy()
    bad_weight[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"wgt contains NaN or Inf in 1 visibilities"):
        imager.vis2dirty(send(vis.astype(np.complex64)), wgt=send(bad_weight))
    unused = weight.copy()
    unused[7, 1] = 0
    dirty = imager.vis2dirty(send(bad), wgt=send(unused))
    assert _rel(dirty, dft_vis2dirty(uvw, freq, vis * unused, **GEOMETRY)) <= 1e-5
    # a row left out for its uvw: its NaN visibility is never gathered, so
    # the imager's own count must find it
    uvw_out = uvw.copy()
    uvw_out[5] = np.nan
    counts.clear()
    left_out = Imager(cl_env.queue, uvw=uvw_out, freq=freq, epsilon=1e-5,
                      tiles=TileShape(8, 32, 64), **GEOMETRY)
    nan_there = vis.astype(np.complex64)
    nan_there[5, 0] = np.nan
    with pytest.raises(ValueError, match=r"vis contains NaN or Inf in 1 visibilities"):
        left_out.vis2dirty(send(nan_there))
    assert "nonfinite" in counts


def test_vis_without_a_polarisation_axis_length_is_one_line(cl_env):
    uvw, freq, _ = _observation(seed=2)
    with pytest.raises(ValueError, match="no polarisation"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=np.zeros((80, 2, 0), np.complex64),
                         epsilon=1e-4, queue=cl_env.queue, **GEOMETRY)


@pytest.mark.parametrize("npix", [float("nan"), 33, 2.5])
def test_a_bad_image_size_names_the_argument(cl_env, npix):
    uvw, freq, vis = _observation(seed=3)
    with pytest.raises(ValueError, match="npix_x"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-4, queue=cl_env.queue,
                         **dict(GEOMETRY, npix_x=npix))

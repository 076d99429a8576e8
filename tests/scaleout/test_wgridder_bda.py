"""``clgrid.wgridder.experimental.vis2dirty_bda`` / ``dirty2vis_bda``: ducc0's
calls for baseline-dependent averaging (each row its own list of channel
frequencies, the visibilities one flat array), against ducc0 0.42's own and a
float64 direct Fourier transform written out here, on ragged lists."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest

import clgrid.wgridder as wgridder

SPEED_OF_LIGHT = 299792458.0
NPIX_X, NPIX_Y = 40, 34


def _bda_observation(single: bool, seed: int = 5):
    """Three frequency lists of 4, 1 and 7 channels over 30 rows (ids drawn
    at random), w spread so the w term matters, weights and a mask."""
    rng = np.random.default_rng(seed)
    pixsize = 0.4 * np.pi / 180 / NPIX_X * 10   # a 4-degree field
    nfreqs = np.array([4, 1, 7], np.uint64)
    freqs = np.concatenate([1e9 + np.arange(4) * 5e7, [1.3e9], 0.8e9 + np.arange(7) * 3e7])
    nrow = 30
    ids = rng.integers(0, 3, nrow).astype(np.uint64)
    ids[:3] = [0, 1, 2]                        # every list used
    uvw = (rng.random((nrow, 3)) - 0.5) / (pixsize * 1e9 / SPEED_OF_LIGHT)
    uvw[:, 2] *= 20.0
    nvis = int(nfreqs[ids].sum())
    vis = rng.random(nvis) - 0.5 + 1j * (rng.random(nvis) - 0.5)
    wgt = rng.uniform(0.5, 1.5, nvis)
    mask = (rng.random(nvis) > 0.2).astype(np.uint8)
    dirty = rng.random((NPIX_X, NPIX_Y)) - 0.5
    if single:
        vis, wgt, dirty = vis.astype(np.complex64), wgt.astype(np.float32), \
            dirty.astype(np.float32)
    return dict(uvw=uvw, freqlist_id=ids, freqlist_nfreqs=nfreqs, freqlist_freqs=freqs), \
        vis, wgt, mask, dirty, pixsize


def _dft_matrix(layout, pixsize_x, pixsize_y, do_w, center_x=0.0, center_y=0.0):
    """(nvis, npix) float64 matrix of ducc0's convention (1/n included),
    looping over the BDA layout's rows and their lists directly."""
    ids, nfreqs, freqs = (np.asarray(layout[k]) for k in
                          ("freqlist_id", "freqlist_nfreqs", "freqlist_freqs"))
    starts = np.concatenate([[0], np.cumsum(nfreqs.astype(np.int64))])
    u, v, w = [], [], []
    for row, list_id in enumerate(ids.astype(np.int64)):
        for f in freqs[starts[list_id]:starts[list_id + 1]]:
            u.append(layout["uvw"][row, 0] * f / SPEED_OF_LIGHT)
            v.append(layout["uvw"][row, 1] * f / SPEED_OF_LIGHT)
            w.append(layout["uvw"][row, 2] * f / SPEED_OF_LIGHT)
    l_axis = (np.arange(NPIX_X) - NPIX_X / 2) * pixsize_x + center_x
    m_axis = (np.arange(NPIX_Y) - NPIX_Y / 2) * pixsize_y + center_y
    ll, mm = (a.ravel() for a in np.meshgrid(l_axis, m_axis, indexing="ij"))
    n = np.sqrt(1.0 - ll ** 2 - mm ** 2) if do_w else np.ones_like(ll)
    phase = np.outer(u, ll) + np.outer(v, mm) - np.outer(w, n - 1.0)
    return np.exp(2j * np.pi * phase) / n[None, :]


def _l2error(a, b) -> float:
    a, b = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
    return float(np.sqrt(np.sum(np.abs(a - b) ** 2)
                         / max(np.sum(np.abs(a) ** 2), np.sum(np.abs(b) ** 2))))


@pytest.mark.parametrize("single", [False, True], ids=["f64", "f32"])
@pytest.mark.parametrize("do_w", [True, False], ids=["w", "now"])
@pytest.mark.parametrize("center", [(0.0, 0.0), (0.02, -0.01)], ids=["c0", "facet"])
def test_bda_against_dft_and_ducc0(cl_env, single, do_w, center):
    """Both BDA calls within epsilon of the float64 DFT and of ducc0's own."""
    ducc0 = pytest.importorskip("ducc0.wgridder", reason="ducc0 (the peer) is not installed")
    if not single and not cl_env.profile.fp64:
        pytest.skip("double precision case: this device has no fp64")
    epsilon = 1e-5 if single else 1e-9
    layout, vis, wgt, mask, dirty, pixsize = _bda_observation(single)
    common = dict(layout, wgt=wgt, mask=mask, pixsize_x=pixsize, pixsize_y=pixsize * 1.1,
                  epsilon=epsilon, do_wgridding=do_w, center_x=center[0], center_y=center[1])
    matrix = _dft_matrix(layout, pixsize, pixsize * 1.1, do_w, *center)
    keep = np.asarray(wgt, np.float64) * (mask != 0)
    reference_dirty = ((np.asarray(vis, np.complex128) * keep) @ matrix).real \
        .reshape(NPIX_X, NPIX_Y)
    reference_vis = (np.conj(matrix) @ np.asarray(dirty, np.float64).ravel()) * keep

    image = wgridder.experimental.vis2dirty_bda(vis=vis, npix_x=NPIX_X, npix_y=NPIX_Y,
                                                queue=cl_env.queue, **common)
    predicted = wgridder.experimental.dirty2vis_bda(dirty=dirty, queue=cl_env.queue, **common)
    assert image.shape == (NPIX_X, NPIX_Y) and predicted.shape == vis.shape
    assert image.dtype == (np.float32 if single else np.float64)
    assert predicted.dtype == vis.dtype
    assert _l2error(image, reference_dirty) <= epsilon
    assert _l2error(predicted, reference_vis) <= epsilon

    theirs_dirty = ducc0.experimental.vis2dirty_bda(vis=vis, npix_x=NPIX_X, npix_y=NPIX_Y,
                                                    **common)
    theirs_vis = ducc0.experimental.dirty2vis_bda(dirty=dirty, **common)
    assert _l2error(theirs_dirty, reference_dirty) <= epsilon   # the DFT encodes ducc0's
    assert _l2error(image, theirs_dirty) <= 2 * epsilon
    assert _l2error(predicted, theirs_vis) <= 2 * epsilon


def test_bda_outputs_and_flips(cl_env):
    """``dirty=`` and ``vis=`` are filled and returned; flips as ducc0's."""
    ducc0 = pytest.importorskip("ducc0.wgridder", reason="ducc0 (the peer) is not installed")
    layout, vis, wgt, _, dirty, pixsize = _bda_observation(False, seed=9)
    common = dict(layout, wgt=wgt, pixsize_x=pixsize, pixsize_y=pixsize, epsilon=1e-8,
                  do_wgridding=True, flip_u=True, flip_w=True, divide_by_n=False)
    out_image = np.zeros((NPIX_X, NPIX_Y))
    image = wgridder.experimental.vis2dirty_bda(vis=vis, dirty=out_image, queue=cl_env.queue,
                                                **common)
    assert image is out_image
    out_vis = np.zeros_like(vis)
    predicted = wgridder.experimental.dirty2vis_bda(dirty=dirty, vis=out_vis,
                                                    queue=cl_env.queue, **common)
    assert predicted is out_vis
    assert _l2error(image, ducc0.experimental.vis2dirty_bda(
        vis=vis, npix_x=NPIX_X, npix_y=NPIX_Y, **common)) <= 2e-8
    assert _l2error(predicted, ducc0.experimental.dirty2vis_bda(dirty=dirty, **common)) <= 2e-8


def test_bda_one_list_is_vis2dirty(cl_env):
    """One frequency list for every row (ducc0's test_vis2dirty_wsclean call):
    the same image as vis2dirty of the (nrow, nchan) data, within rounding."""
    rng = np.random.default_rng(2)
    nrow, nchan = 12, 3
    freq = 1e9 + np.arange(nchan) * 1e8
    uvw = (rng.random((nrow, 3)) - 0.5) * 300
    vis = rng.random((nrow, nchan)) + 1j * rng.random((nrow, nchan))
    common = dict(pixsize_x=1e-3, pixsize_y=1e-3, epsilon=1e-10, do_wgridding=True,
                  queue=cl_env.queue)
    image = wgridder.experimental.vis2dirty_bda(
        uvw=uvw, freqlist_id=np.zeros(nrow, np.uint64),
        freqlist_nfreqs=np.array([nchan], np.uint64), freqlist_freqs=freq,
        vis=vis.reshape(-1), npix_x=32, npix_y=32, **common)
    plain = wgridder.experimental.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=32, npix_y=32,
                                            **common)
    assert _l2error(image, plain) <= 1e-10


@pytest.mark.parametrize("change,message", [
    (dict(freqlist_id=np.array([0, 3], np.uint64)), "freqlist_nfreqs has 2 entries"),
    (dict(freqlist_id=np.array([0], np.uint64)), "freqlist_id has 1 entries for 2"),
    (dict(freqlist_freqs=np.array([1e9, 2e9, 1.5e9])), "ascending"),
    (dict(freqlist_freqs=np.array([1e9, 2e9])), "freqlist_freqs has 2 frequencies"),
    (dict(freqlist_freqs=np.array([1e9, 0.0, 1e9])), "starts with a frequency <= 0"),
    (dict(vis=np.zeros(4, np.complex128)), r"vis must have shape \(3,\)"),
    (dict(freqlist_id=np.array([0.0, 1.0])), "must hold integers"),
])
def test_bda_errors(change, message):
    """ducc0's checks of the BDA layout, as one-line errors (before any device work)."""
    arguments = dict(uvw=np.zeros((2, 3)), freqlist_id=np.array([0, 1], np.uint64),
                     freqlist_nfreqs=np.array([1, 2], np.uint64),
                     freqlist_freqs=np.array([1e9, 1e9, 2e9]), vis=np.zeros(3, np.complex128),
                     npix_x=16, npix_y=16, pixsize_x=1e-3, pixsize_y=1e-3, epsilon=1e-5)
    arguments.update(change)
    with pytest.raises((ValueError, TypeError), match=message):
        wgridder.experimental.vis2dirty_bda(**arguments)


@pytest.mark.parametrize("name", ["vis2dirty_bda", "dirty2vis_bda"])
def test_bda_keywords_are_ducc0s(name):
    """The keywords of ducc0's experimental BDA call, in ducc0's order, then
    clgrid's own (where to run)."""
    ducc0 = pytest.importorskip("ducc0.wgridder", reason="ducc0 (the peer) is not installed")
    first = getattr(ducc0.experimental, name).__doc__.splitlines()[0]
    theirs = re.findall(r"(\w+):", first[first.index("(") + 1:])
    ours = [name for name, parameter in
            inspect.signature(getattr(wgridder.experimental, name)).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    assert theirs and ours[:len(theirs)] == theirs
    assert ours[len(theirs):] == ["context", "queue", "devices", "deterministic"]

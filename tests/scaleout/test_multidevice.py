"""Several devices in one process: the result equals the single-device run to
rounding and the float64 direct Fourier transform to epsilon; partitions
cover every row once; bad input is refused."""

import textwrap

import numpy as np
import pytest

import clgrid

from clgrid.scaleout import partition
from clgrid.device.profiles import DeviceProfile, all_devices
from oclgrind_check import run_clean
from clgrid import dirty2vis, vis2dirty
from clgrid.imaging import Imager, dft_dirty2vis, dft_vis2dirty
from clgrid.scaleout.multidevice import MultiDeviceImager
from clgrid.scaleout.partition import cpu_sub_devices, partition_planes, partition_rows

GEOMETRY = dict(npix_x=48, npix_y=40, pixsize_x=5e-3, pixsize_y=6e-3)
TINY_GEOMETRY = dict(npix_x=8, npix_y=8, pixsize_x=2e-2, pixsize_y=2e-2)
# float32 sums of the same terms in a different order: a few ulp of the peak.
ROUNDING = 2e-6


def _observation(n_ant=10, n_times=6, n_chan=2, seed=3, w_scale=3.0):
    """Random antennas; rows time-major like a Measurement Set, with baseline ids."""
    rng = np.random.default_rng(seed)
    positions = rng.uniform(-150.0, 150.0, (n_ant, 3))
    positions[:, 2] *= w_scale
    ant1, ant2 = np.triu_indices(n_ant, 1)
    rows_uvw, rows_id = [], []
    for t in range(n_times):
        angle = 0.1 * t
        rotation = np.array([[np.cos(angle), -np.sin(angle), 0],
                             [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
        rotated = positions @ rotation.T
        rows_uvw.append(rotated[ant2] - rotated[ant1])
        rows_id.append(ant1 * n_ant + ant2)
    uvw = np.concatenate(rows_uvw)
    freq = np.linspace(1.0e9, 1.1e9, n_chan)
    vis = rng.normal(size=(len(uvw), n_chan)) + 1j * rng.normal(size=(len(uvw), n_chan))
    return uvw, freq, vis, np.concatenate(rows_id)


def _peak_error(result, reference):
    return float(np.max(np.abs(result - reference)) / np.max(np.abs(reference)))


def _two_devices(cl_env) -> list:
    """Two real devices in this process: sub-devices of a CPU, else this one
    plus another usable device."""
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    if cl_env.profile.device_type == "cpu" and cl_env.device.max_compute_units >= 2 \
            and not cl_env.profile.is_simulator:
        try:
            return cpu_sub_devices(2, cl_env.device)
        except ValueError:
            pass
    others = [d for d in all_devices() if d.int_ptr != cl_env.device.int_ptr
              and DeviceProfile.from_device(d).usable and DeviceProfile.from_device(d).fp64
              and not DeviceProfile.from_device(d).is_simulator]
    if not others:
        pytest.skip("only one usable device and it cannot be split")
    return [cl_env.queue, others[0]]


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("partition", ["time", "baseline", "w-planes"])
def test_vis2dirty_on_two_devices_equals_one_device(cl_env, do_w, partition):
    uvw, freq, vis, baseline_ids = _observation()
    vis = vis.astype(np.complex64)
    epsilon = 1e-5
    if partition == "w-planes" and not do_w:
        with pytest.raises(ValueError, match="w-planes.*do_wgridding"):
            MultiDeviceImager([cl_env.queue], uvw=uvw, freq=freq, epsilon=epsilon,
                              partition=partition, **GEOMETRY)
        return
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=epsilon, do_wgridding=do_w,
                       queue=cl_env.queue, **GEOMETRY)
    imager = MultiDeviceImager(_two_devices(cl_env), uvw=uvw, freq=freq, epsilon=epsilon,
                               do_wgridding=do_w, partition=partition,
                               baseline_ids=baseline_ids, **GEOMETRY)
    try:
        multi = imager.vis2dirty(vis)
        assert all(rows.size > 0 for rows in imager.shard_rows)
        assert imager.load_balance > 0.8
        # the grids of the devices are added in a fixed order: the same bits again
        assert np.array_equal(imager.vis2dirty(vis), multi)
    finally:
        imager.close()
    assert multi.dtype == single.dtype and multi.shape == single.shape
    assert _peak_error(multi, single) <= ROUNDING
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=do_w, **GEOMETRY)
    assert np.linalg.norm(multi - reference) / np.linalg.norm(reference) <= epsilon


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_dirty2vis_on_two_devices_equals_one_device(cl_env, do_w):
    """The default partition: rows, or w planes with w on CPUs."""
    uvw, freq, _, _ = _observation(n_times=3)
    image = np.random.default_rng(5).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    pixsizes = dict(pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    wgt = np.random.default_rng(6).uniform(0.5, 2.0, (len(uvw), len(freq)))
    mask = np.ones_like(wgt, np.uint8)
    mask[::7] = 0
    single = dirty2vis(uvw=uvw, freq=freq, dirty=image.astype(np.float32), epsilon=1e-5,
                       do_wgridding=do_w, wgt=wgt, mask=mask, queue=cl_env.queue, **pixsizes)
    multi = dirty2vis(uvw=uvw, freq=freq, dirty=image.astype(np.float32), epsilon=1e-5,
                      do_wgridding=do_w, wgt=wgt, mask=mask, devices=_two_devices(cl_env),
                      **pixsizes)
    assert multi.dtype == single.dtype
    assert _peak_error(multi, single) <= ROUNDING
    reference = dft_dirty2vis(uvw, freq, image, do_wgridding=do_w, **pixsizes) * wgt * mask
    assert np.linalg.norm(multi - reference) / np.linalg.norm(reference) <= 1e-5


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_one_device_predicts_through_its_own_imager(cl_env, do_w):
    """A MultiDeviceImager of one device (``devices=[one]``) predicts through
    that device's Imager call (row blocks sent down as they finish): the
    same bits as the one-device Imager, into the caller's ``vis`` too."""
    uvw, freq, _, _ = _observation(n_times=3)
    image = np.random.default_rng(12).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    image = image.astype(np.float32)
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w, **GEOMETRY)
    multi = MultiDeviceImager([cl_env.queue], **common)
    try:
        assert multi._whole_shard() is multi.shards[0]
        expected = Imager(cl_env.queue, **common).dirty2vis(image)
        assert np.array_equal(multi.dirty2vis(image), expected)
        vis = np.empty(expected.shape, expected.dtype)
        assert multi.dirty2vis(image, vis=vis) is vis and np.array_equal(vis, expected)
    finally:
        multi.close()


@pytest.mark.parametrize("devices", ["one", "two"])
def test_dirty2vis_fills_the_callers_vis_in_place(cl_env, devices):
    """ducc0's ``vis=`` (and ``dirty=`` of vis2dirty): an output of the
    result's dtype, C-contiguous, is filled in place (the same object back,
    no copy); another dtype or strides get the values copied in; a wrong
    shape is refused.  Twice in a row (a w-plane share adds into it: it must
    start from zeros)."""
    uvw, freq, _, _ = _observation(n_times=3)
    image = np.random.default_rng(8).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    where = (dict(queue=cl_env.queue) if devices == "one"
             else dict(devices=_two_devices(cl_env)))
    arguments = dict(uvw=uvw, freq=freq, dirty=image.astype(np.float32), epsilon=1e-5,
                     do_wgridding=True, pixsize_x=GEOMETRY["pixsize_x"],
                     pixsize_y=GEOMETRY["pixsize_y"], **where)
    expected = dirty2vis(**arguments)
    vis = np.full(expected.shape, 7 + 7j, np.complex64)
    for _ in range(2):
        assert dirty2vis(vis=vis, **arguments) is vis
        assert np.array_equal(vis, expected)
    wider = np.zeros(expected.shape, np.complex128)
    assert dirty2vis(vis=wider, **arguments) is wider
    assert np.array_equal(wider, expected)
    strided = np.zeros((expected.shape[0], 2 * expected.shape[1]), np.complex64)[:, ::2]
    assert np.array_equal(dirty2vis(vis=strided, **arguments), expected)
    with pytest.raises(ValueError, match="vis must have shape"):
        dirty2vis(vis=np.zeros((3, 3), np.complex64), **arguments)
    # and vis2dirty's dirty=, summed into in place
    back = dict(uvw=uvw, freq=freq, vis=expected, epsilon=1e-5, do_wgridding=True,
                pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"], **where)
    image_expected = vis2dirty(npix_x=GEOMETRY["npix_x"], npix_y=GEOMETRY["npix_y"], **back)
    dirty = np.full(image_expected.shape, 3.0, np.float32)
    for _ in range(2):
        assert vis2dirty(dirty=dirty, **back) is dirty
        assert np.array_equal(dirty, image_expected)


def test_dirty2vis_on_two_devices_into_pinned_memory(cl_env):
    """GPUs: the shared output of a row partition is pinned memory of the first
    device's, and each device sends its rows straight into it (forced here
    with pinned uploaders on whatever two devices there are); the same bits as
    the staged path, and the result passed back as ``vis=`` is filled again."""
    from clgrid.core.transfer import Uploader
    uvw, freq, _, _ = _observation(n_times=400, n_chan=64)
    image = np.random.default_rng(9).normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"]))
    imager = MultiDeviceImager(_two_devices(cl_env), uvw=uvw, freq=freq, epsilon=1e-5,
                               partition="time", **GEOMETRY)
    staged = imager.dirty2vis(image.astype(np.float32))
    assert staged.nbytes >= 8 * 2 ** 20
    for shard in imager.shards:
        shard.uploader = Uploader(shard.queue, pinned=True)
    pinned = imager.dirty2vis(image.astype(np.float32))
    assert imager.shards[0].uploader._results.held == 1
    assert np.array_equal(pinned, staged)
    pinned[...] = 0
    assert imager.dirty2vis(image.astype(np.float32), vis=pinned) is pinned
    assert np.array_equal(pinned, staged)
    imager.close()


def test_vis2dirty_on_two_devices_sums_images_into_pinned_memory(cl_env):
    """GPUs: the shards' images are summed into pinned memory of the first
    device's, so the first image comes down in one DMA (forced here with
    pinned uploaders on whatever two devices there are); the same bits as
    the staged path, the slot held while the caller holds the image."""
    from clgrid.core.transfer import Uploader
    uvw, freq, vis, _ = _observation(n_times=40, n_chan=4)
    geometry = dict(npix_x=1536, npix_y=1536, pixsize_x=4e-4, pixsize_y=4e-4)
    imager = MultiDeviceImager(_two_devices(cl_env), uvw=uvw, freq=freq, epsilon=1e-4,
                               partition="time", reduce="images", **geometry)
    staged = imager.vis2dirty(vis.astype(np.complex64))
    assert staged.nbytes >= 8 * 2 ** 20 and staged.dtype == np.float32
    for shard in imager.shards:
        shard.uploader = Uploader(shard.queue, pinned=True)
    pinned = imager.vis2dirty(vis.astype(np.complex64))
    assert imager.shards[0].uploader._results.held == 1
    assert np.array_equal(pinned, staged)
    del pinned
    assert imager.shards[0].uploader._results.held == 0
    imager.close()


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("pinned", [False, True], ids=["staged", "pinned"])
def test_dirty2vis_by_rows_sends_each_shards_blocks_down_as_they_finish(cl_env, pinned, do_w):
    """Rows partitioned: each shard predicts through its own Imager
    call into its rows of the output (``overlap_downloads``, row blocks down
    as each is final; forced pinned uploaders take the DMA path on any
    device).  The same bits as one DMA a shard after its work, weights and
    flags applied, within rounding of one device."""
    from clgrid.core.transfer import Uploader
    uvw, freq, _, _ = _observation(n_times=40, n_chan=16)
    rng = np.random.default_rng(13)
    image = rng.normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)
    wgt = rng.uniform(0.5, 2.0, (len(uvw), len(freq)))
    mask = np.ones_like(wgt, np.uint8)
    mask[::5] = 0
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w, **GEOMETRY)
    imager = MultiDeviceImager(_two_devices(cl_env), partition="time", **common)
    try:
        assert imager.overlap_downloads
        if pinned:
            for shard in imager.shards:
                shard.uploader = Uploader(shard.queue, pinned=True)
        overlapped = imager.dirty2vis(image, wgt, mask).copy()
        imager.overlap_downloads = False
        after_work = imager.dirty2vis(image, wgt, mask)
    finally:
        imager.close()
    assert np.array_equal(overlapped, after_work)
    single = Imager(cl_env.queue, **common).dirty2vis(image, wgt, mask)
    assert _peak_error(overlapped, single) <= ROUNDING
    assert np.all(overlapped[::5] == 0)


@pytest.mark.parametrize("do_w,partition", [(False, "time"), (False, "baseline"),
                                             (True, "time"), (True, "w-planes")])
def test_dirty2vis_of_polarisations_in_shares_equals_one_device(cl_env, do_w, partition):
    """Shares of whole baselines are not contiguous rows: each still lands on
    its own rows of the output, every row once; w-plane shares add up."""
    uvw, freq, _, baseline_ids = _observation(n_times=3)
    rng = np.random.default_rng(7)
    images = rng.normal(size=(2, GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)
    single = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=do_w,
                    **GEOMETRY)
    imager = MultiDeviceImager(_two_devices(cl_env), uvw=uvw, freq=freq, epsilon=1e-5,
                               do_wgridding=do_w, partition=partition,
                               baseline_ids=baseline_ids, **GEOMETRY)
    try:
        multi = imager.dirty2vis(images)
    finally:
        imager.close()
    expected = single.dirty2vis(images)
    assert multi.shape == expected.shape == (len(uvw), len(freq), 2)
    assert _peak_error(multi, expected) <= ROUNDING


def test_functional_devices_keyword_and_polarisations(cl_env):
    uvw, freq, vis, _ = _observation(n_times=3)
    vis3 = np.stack([vis, 2.0 * vis.conj()], axis=-1).astype(np.complex128)
    wgt = np.random.default_rng(7).uniform(0.5, 2.0, vis.shape)
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis3, wgt=wgt, epsilon=1e-7,
                       queue=cl_env.queue, **GEOMETRY)
    out = np.empty_like(single)
    multi = vis2dirty(uvw=uvw, freq=freq, vis=vis3, wgt=wgt, epsilon=1e-7, nthreads=4,
                      devices=_two_devices(cl_env), dirty=out, **GEOMETRY)
    assert multi is out and multi.shape == (2, GEOMETRY["npix_x"], GEOMETRY["npix_y"])
    assert _peak_error(multi, single) <= 1e-12


def test_functional_devices_keyword_notices_a_changed_uvw(cl_env):
    """The cached multi-device plan is found by a strided sample of uvw, then
    compared exactly: a uvw differing only between the sampled values gets
    a new plan, whose image is the one-device image of that uvw."""
    uvw, freq, vis, _ = _observation(n_ant=20, n_times=15)
    assert uvw.size // 4096 >= 2   # the sample skips values
    devices = _two_devices(cl_env)
    vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-7, devices=devices, **GEOMETRY)
    moved = uvw.copy()
    moved[0, 1] += 40.0   # element 1: not in a sample of every 2nd or more
    multi = vis2dirty(uvw=moved, freq=freq, vis=vis, epsilon=1e-7, devices=devices, **GEOMETRY)
    single = vis2dirty(uvw=moved, freq=freq, vis=vis, epsilon=1e-7, queue=cl_env.queue,
                       **GEOMETRY)
    assert _peak_error(multi, single) <= 1e-12


@pytest.mark.parametrize("reduce", ["images", "host", "device"])
def test_imager_contexts_keyword_and_grid_reduction(cl_env, reduce):
    """``Imager(contexts=...)`` is the multi-device imager; summing the
    devices' images, or their grids on the first device or on the host,
    gives the single-device image."""
    uvw, freq, vis, _ = _observation(n_times=4)
    vis2 = np.stack([vis, 0.5 * vis], axis=-1).astype(np.complex64)
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis2, epsilon=1e-5, queue=cl_env.queue,
                       **GEOMETRY)
    imager = clgrid.Imager(contexts=_two_devices(cl_env), uvw=uvw, freq=freq, epsilon=1e-5,
                           reduce=reduce, **GEOMETRY)
    try:
        assert isinstance(imager, MultiDeviceImager) and imager.reduce == reduce
        multi = imager.vis2dirty(vis2)
        assert set(imager.last_timings) == {"grid_s", "reduce_s", "fft_s"}
    finally:
        imager.close()
    assert multi.shape == single.shape
    assert _peak_error(multi, single) <= ROUNDING
    with pytest.raises(ValueError, match="context or contexts"):
        clgrid.Imager(cl_env.queue, contexts=[cl_env.queue], uvw=uvw, freq=freq,
                      epsilon=1e-5, **GEOMETRY)
    with pytest.raises(ValueError, match="reduce"):
        clgrid.Imager(contexts=[cl_env.queue], uvw=uvw, freq=freq, epsilon=1e-5,
                      reduce="gpu", **GEOMETRY)


@pytest.mark.tiny
def test_intel_and_oclgrind_side_by_side():
    """Two platforms in one process (Oclgrind grids a tiny share)."""
    found = {DeviceProfile.from_device(d).platform_key: d for d in all_devices()
             if DeviceProfile.from_device(d).usable}
    if "intel" not in found or "oclgrind" not in found:
        pytest.skip("needs the Intel CPU runtime and Oclgrind")
    uvw, freq, vis, _ = _observation(n_ant=4, n_times=2, n_chan=1)
    vis = vis.astype(np.complex64)
    geometry = dict(TINY_GEOMETRY, epsilon=1e-2)
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis,
                       context=clgrid.create_context(found["intel"]), **geometry)
    multi = vis2dirty(uvw=uvw, freq=freq, vis=vis, devices=[found["intel"], found["oclgrind"]],
                      **geometry)
    assert _peak_error(multi, single) <= ROUNDING


@pytest.mark.parametrize("partition", ["time", "w-planes"])
def test_three_devices_sum_their_images_in_shard_order(partition):
    """More than two shards (as on 4 GPUs): the images come down and are
    summed in shard order, so the bits repeat call after call and equal
    the single-device image to rounding; dirty2vis likewise.  Two Intel CPU
    sub-devices and a PoCL device.  With w planes over a narrow field
    (9 planes, W 8) every row touches every block: each shard takes every
    row as a view (no gathered copy), and dirty2vis's partial visibilities
    are summed as they come down, in shard order too."""
    usable = [d for d in all_devices() if DeviceProfile.from_device(d).usable
              and DeviceProfile.from_device(d).fp64]
    intel = [d for d in usable if DeviceProfile.from_device(d).platform_key == "intel"]
    pocl = [d for d in usable if DeviceProfile.from_device(d).platform_key == "pocl"]
    if not intel or not pocl or intel[0].max_compute_units < 2:
        pytest.skip("needs the Intel CPU runtime (2 compute units or more) and a PoCL")
    devices = cpu_sub_devices(2, intel[0]) + [pocl[0]]
    uvw, freq, vis, _ = _observation(n_times=4)
    vis = vis.astype(np.complex64)
    geometry = (GEOMETRY if partition == "time"
                else dict(GEOMETRY, pixsize_x=5e-4, pixsize_y=6e-4))
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-5, do_wgridding=True,
                       context=clgrid.create_context(intel[0]), **geometry)
    imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=True,
                               partition=partition, **geometry)
    try:
        assert len(imager.shards) == 3 and all(rows.size for rows in imager.shard_rows)
        if partition == "w-planes":
            assert imager.layout.n_planes == 9
            assert all(np.array_equal(rows, np.arange(len(uvw))) for rows in imager.shard_rows)
        multi = imager.vis2dirty(vis)
        for _ in range(2):
            assert np.array_equal(imager.vis2dirty(vis), multi)
        assert _peak_error(multi, single) <= ROUNDING
        predicted = imager.dirty2vis(single)
        assert np.array_equal(imager.dirty2vis(single), predicted)
        expected = dirty2vis(uvw=uvw, freq=freq, dirty=single, epsilon=1e-5,
                             do_wgridding=True, context=clgrid.create_context(intel[0]),
                             pixsize_x=geometry["pixsize_x"], pixsize_y=geometry["pixsize_y"])
        assert _peak_error(predicted, expected) <= ROUNDING
        reference = dft_dirty2vis(uvw, freq, single.astype(np.float64), do_wgridding=True,
                                  pixsize_x=geometry["pixsize_x"],
                                  pixsize_y=geometry["pixsize_y"])
        assert np.linalg.norm(predicted - reference) / np.linalg.norm(reference) <= 1e-5
    finally:
        imager.close()


def test_plane_blocks_share_a_plane_by_rows_where_planes_do_not_split_evenly(cl_env,
                                                                              monkeypatch):
    """With a spreader that adds row blocks to planes (the GPUs' tiles,
    forced here), plane blocks that every row touches are cut in equal cost:
    two devices share a plane, the first taking its rows below a cut, the
    second the rest.  The image and the predicted visibilities equal the
    single device's to rounding, the same bits call after call."""
    from clgrid.core import strategies
    from clgrid.core.plan import TileShape
    from clgrid.scaleout import multidevice
    gpu_tiles = lambda *args: TileShape(8, 32, 64)   # noqa: E731
    monkeypatch.setattr(strategies, "imaging_tiles", gpu_tiles)
    monkeypatch.setattr(multidevice, "imaging_tiles", gpu_tiles)
    devices = _two_devices(cl_env)
    # rows for a cut a few of the devices' row alignments from either end
    align = max(DeviceProfile.from_device(getattr(d, "device", d)).base_align_bytes
                for d in devices)
    uvw, freq, vis, _ = _observation(n_times=max(8, -(-6 * align // 45)))
    vis = vis.astype(np.complex64)
    geometry = dict(GEOMETRY, pixsize_x=5e-4, pixsize_y=6e-4)   # 9 planes, W 8
    common = dict(uvw=uvw, freq=freq, epsilon=1e-5, do_wgridding=True, **geometry)
    single = vis2dirty(vis=vis, queue=cl_env.queue, **common)
    imager = MultiDeviceImager(devices, partition="w-planes", **common)
    try:
        assert any(imager.plane_rows), "no plane is shared by rows"
        shared = [(p, r) for rows in imager.plane_rows for p, r in rows.items()]
        assert len({p for p, _ in shared}) == 1 and len(shared) == 2
        assert all(rows.size == len(uvw) for rows in imager.shard_rows)
        multi = imager.vis2dirty(vis)
        assert np.array_equal(imager.vis2dirty(vis), multi)
        assert _peak_error(multi, single) <= ROUNDING
        model = np.random.default_rng(9).normal(size=single.shape).astype(np.float32)
        predicted = imager.dirty2vis(model)
        expected = dirty2vis(dirty=model, queue=cl_env.queue,
                             **{k: v for k, v in common.items() if k not in ("npix_x", "npix_y")})
        assert _peak_error(predicted, expected) <= ROUNDING
        # each device counts NaN/Inf only in the points it grids (its w
        # planes: Spreader.counts_nonfinite); whichever grids the bad one
        # refuses it, and the imager goes on as before
        for row in (0, len(uvw) // 2, len(uvw) - 1):
            bad = vis.copy()
            bad[row, 1] = np.nan
            with pytest.raises(ValueError, match="NaN or Inf in 1 visibilities"):
                imager.vis2dirty(bad)
        assert np.array_equal(imager.vis2dirty(vis), multi)
    finally:
        imager.close()


ORACLE_SCRIPT = textwrap.dedent("""
    import numpy as np, clgrid
    from clgrid.scaleout.multidevice import MultiDeviceImager
    rng = np.random.default_rng(0)
    uvw = rng.uniform(-100, 100, (6, 3)); freq = np.array([1e9])
    vis = (rng.normal(size=(6, 1)) + 1j * rng.normal(size=(6, 1))).astype(np.complex64)
    imager = MultiDeviceImager(["intel", "oclgrind"], uvw=uvw, freq=freq, npix_x=8,
                               npix_y=8, pixsize_x=2e-2, pixsize_y=2e-2, epsilon=1e-2,
                               fft_backend="numpy")
    image = imager.vis2dirty(vis)
    assert np.all(np.isfinite(image)) and np.abs(image).max() > 0
    print("done")
""")


@pytest.mark.tiny
def test_oclgrind_share_has_no_race_or_bad_access(request):
    keys = {DeviceProfile.from_device(d).platform_key for d in all_devices()}
    if not {"intel", "oclgrind"} <= keys:
        pytest.skip("needs the Intel CPU runtime and Oclgrind")
    result = run_clean(request.config, ORACLE_SCRIPT, timeout=300)
    assert "done" in result.stdout


# ------------------------------------------------------------ partitions
@pytest.mark.parametrize("do_w, on_cpus, expected", [
    (False, False, "time"), (False, True, "time"), (True, False, "time"),
    (True, True, "w-planes")])
def test_default_partition(do_w, on_cpus, expected):
    """Rows, but plane blocks with w on CPUs (their FFTs cost as much as
    their spreading); on 2 x H200 plane blocks grid a little faster than
    rows with w (90-91 against 96 ms) and predict much slower (70-71
    against 41 ms)."""
    assert partition.default_partition(do_w, on_cpus) == expected


def _costs(fft_s, grid_down_s, grid_bytes=8 << 20, image_bytes=1 << 20, add=4e9):
    return partition.ReduceCosts(fft_s=fft_s, grid_down_s=grid_down_s, grid_bytes=grid_bytes,
                                 image_bytes=image_bytes, host_add_bytes_s=add)


def test_reduction_model_sums_images_on_like_devices_and_grids_past_a_slow_fft():
    """Two like GPUs (FFT 1 ms, grid down 10 ms): images (each FFT beside the
    other, 1/8 of the bytes); a GPU first and a CPU whose FFT takes 2 s:
    summed grids (one FFT on the GPU); a tie: images."""
    gpus = [_costs(1e-3, 10e-3)] * 2
    seconds = partition.reduction_seconds(gpus)
    assert seconds["images"] == pytest.approx(1e-3 + 10e-3 / 8 + (1 << 20) / 4e9)
    assert seconds["host"] == pytest.approx(10e-3 + (8 << 20) / 4e9 + 10e-3 + 1e-3 + 10e-3 / 8)
    assert partition.choose_reduction(gpus) == "images"
    assert partition.choose_reduction([_costs(1e-3, 10e-3), _costs(2.0, 1e-3)]) == "host"
    tie = [_costs(0.0, 0.0, grid_bytes=0, image_bytes=0)] * 3
    assert partition.choose_reduction(tie) == "images"


def test_reduction_is_measured_once_per_device_and_fixed_per_imager(cl_env):
    """reduce='auto' (the default) without w measures each device's FFT and
    grid download once per device and grid, picks the faster reduction when
    the imager is made, and images equal the single device's either way."""
    from clgrid.scaleout import multidevice
    uvw, freq, vis, _ = _observation(n_times=3)
    vis = vis.astype(np.complex64)
    devices = _two_devices(cl_env)
    imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, epsilon=1e-5, **GEOMETRY)
    try:
        assert imager.reduce in ("images", "host")
        seconds = imager.reduction_seconds
        assert set(seconds) == {"images", "host"} and all(t >= 0 for t in seconds.values())
        assert imager.reduce == min(("images", "host"), key=lambda r: (seconds[r], r != "images"))
        keys = list(multidevice._measured)
        again = MultiDeviceImager(devices, uvw=uvw, freq=freq, epsilon=1e-5, reduce="auto",
                                  **GEOMETRY)
        assert list(multidevice._measured) == keys and again.reduce == imager.reduce
        again.close()
        single = vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-5, queue=cl_env.queue,
                           **GEOMETRY)
        assert _peak_error(imager.vis2dirty(vis), single) <= ROUNDING
    finally:
        imager.close()
    with pytest.raises(ValueError, match="reduce must be one of"):
        MultiDeviceImager(devices, uvw=uvw, freq=freq, epsilon=1e-5, reduce="grids", **GEOMETRY)


def test_functional_calls_share_one_imager_of_the_default_partition(cl_env):
    """clgrid.vis2dirty(devices=...) and dirty2vis share the cached imager of
    the devices' default partition (a major cycle holds one set of plans)."""
    from clgrid.scaleout.multidevice import cached_multi_imager
    from clgrid.core.plan import ImageGeometry
    uvw, freq, _, _ = _observation(n_times=2)
    devices = _two_devices(cl_env)
    geometry = ImageGeometry.given(None, epsilon=1e-4, do_wgridding=True, **GEOMETRY)
    imager = cached_multi_imager(devices, uvw, freq, geometry)
    on_cpus = all(q.device.type & 2 for q in imager.queues)   # CL_DEVICE_TYPE_CPU
    assert imager.partition == partition.default_partition(True, on_cpus)
    assert cached_multi_imager(devices, uvw, freq, geometry) is imager


@pytest.mark.parametrize("n_parts", [1, 2, 3, 4])
def test_partitions_cover_every_row_once(n_parts):
    _, _, _, baseline_ids = _observation(n_ant=7, n_times=5)
    n_rows = baseline_ids.size
    for partition in ("time", "baseline"):
        parts = partition_rows(n_rows, n_parts, partition, baseline_ids)
        assert len(parts) == n_parts
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n_rows))
        sizes = [p.size for p in parts]
        assert max(sizes) - min(sizes) <= (1 if partition == "time" else 5)
    owners = np.empty(n_rows, np.int64)
    for part, rows in enumerate(partition_rows(n_rows, n_parts, "baseline", baseline_ids)):
        owners[rows] = part
    for baseline in np.unique(baseline_ids):  # a baseline is never split
        assert np.unique(owners[baseline_ids == baseline]).size == 1


def test_plane_partition_is_contiguous_and_balanced():
    rows = [0, 0, 10, 40, 40, 40, 40, 10, 0]
    blocks = partition_planes(partition.plane_costs(rows, taps_per_vis=1.0, fft_cost=5.0), 2)
    assert blocks[0][0] == 0 and blocks[-1][1] == len(rows)
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    cost = [sum(rows[p] + 5 * (rows[p] > 0) for p in range(*b)) for b in blocks]
    assert partition.balance(cost) > 0.8


def test_bad_input_is_refused(cl_env):
    uvw, freq, vis, _ = _observation(n_times=2)
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    with pytest.raises(ValueError, match="listed twice"):
        MultiDeviceImager([cl_env.device, cl_env.device], uvw=uvw, freq=freq, epsilon=1e-4,
                          **GEOMETRY)
    with pytest.raises(ValueError, match="baseline_ids"):
        partition_rows(10, 2, "baseline")
    with pytest.raises(ValueError, match="partition"):
        partition_rows(10, 2, "random")
    with pytest.raises(ValueError, match="npix"):
        MultiDeviceImager([cl_env.queue], uvw=uvw, freq=freq, epsilon=1e-4, npix_x=7,
                          npix_y=8, pixsize_x=1e-3, pixsize_y=1e-3)
    imager = MultiDeviceImager([cl_env.queue], uvw=uvw, freq=freq, epsilon=1e-4, **GEOMETRY)
    with pytest.raises(ValueError, match="vis must be"):
        imager.vis2dirty(vis[:-1])
    bad = vis.astype(np.complex64)
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        imager.vis2dirty(bad)
    with pytest.raises(ValueError, match="not both"):
        vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-4, devices=[cl_env.queue],
                  queue=cl_env.queue, **GEOMETRY)
    imager.close()


# -- one geometry, one device rule (issue 38) ---------------------------------------

def test_one_geometry_is_handed_down_by_name(cl_env):
    """The geometry made at the edge is the one the plan cache's imager, the
    shards and a Dask-style Imager(geometry=) keep; keywords and geometry= do
    not mix; a grid sum refuses the w term."""
    from clgrid.core.plan import ImageGeometry
    from clgrid.device import plancache
    from clgrid.imaging.imager import cached_imager, vis2dirty_with
    uvw, freq, vis, _ = _observation()
    vis = vis.astype(np.complex64)
    geometry = ImageGeometry.from_arguments(epsilon=1e-5, **GEOMETRY)
    plancache.plans.clear()   # an earlier test's imager would hold an equal geometry
    assert cached_imager(cl_env.queue, uvw, freq, geometry).geometry is geometry
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, geometry=geometry)
    assert np.array_equal(imager.vis2dirty(vis),
                          vis2dirty_with(geometry, cl_env.queue, uvw=uvw, freq=freq, vis=vis))
    assert np.array_equal(imager.vis2dirty(vis),
                          vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-5,
                                    queue=cl_env.queue, **GEOMETRY))
    with pytest.raises(ValueError, match="give geometry= or npix_x"):
        Imager(cl_env.queue, uvw=uvw, freq=freq, geometry=geometry, epsilon=1e-5)
    with_w = ImageGeometry.from_arguments(epsilon=1e-5, do_wgridding=True, **GEOMETRY)
    with pytest.raises(ValueError, match="grid_only needs do_wgridding=False"):
        Imager(cl_env.queue, uvw=uvw, freq=freq, geometry=with_w).grid_only(vis)


def test_devices_all_is_resolved_by_one_rule():
    """``devices='all'`` of the run and ``clgrid image --devices all``'s memory
    check take the same devices: every usable one of the best device's
    platform and type."""
    from clgrid.pipeline import image_command
    try:
        expected = partition.all_gpus_or_best()
    except (LookupError, RuntimeError) as error:
        pytest.skip(f"no usable device: {error}")
    assert partition.resolve_devices("all") == expected
    assert image_command._devices("all") == expected
    assert [q.device for q in partition.resolve_queues("all")] == expected
    with pytest.raises(ValueError, match="devices is empty"):
        partition.resolve_devices([])


def test_functional_call_sees_uvw_changed_in_place(cl_env):
    """A uvw array edited in place between two ``devices=`` calls (a value the
    cache key's strided sample does not read) gets a new plan: the cached
    imager keeps its own copy of uvw to compare with, never the caller's."""
    from clgrid.scaleout.multidevice import clear_cache
    uvw, freq, vis, _ = _observation(n_ant=30, n_times=12, n_chan=1)
    uvw = np.ascontiguousarray(uvw, np.float64)
    step = uvw.size // 4096   # imaging.imager.fingerprint's sample
    assert step >= 2
    devices = _two_devices(cl_env)
    kw = dict(freq=freq, vis=vis, epsilon=1e-5, do_wgridding=False, **GEOMETRY)
    clgrid.vis2dirty(uvw=uvw, devices=devices, **kw)
    flat = uvw.reshape(-1)
    index = next(i for i in range(uvw.size // 2, uvw.size) if i % step and i % 3 != 2)
    flat[index] *= 1.7    # a u or v value the sample skips
    again = clgrid.vis2dirty(uvw=uvw, devices=devices, **kw)
    clear_cache()
    fresh = clgrid.vis2dirty(uvw=uvw.copy(), devices=devices, **kw)
    assert np.array_equal(again, fresh)

"""Threads, memory and failed allocations (issue 35).

Every public function is thread-safe and every object either is safe to
share (``Imager``: scratch leased per call) or refuses a second thread with
:class:`clgrid.device.guard.ConcurrentUseError`; never another thread's
array.  The core is deterministic, so each threaded result must equal the
single-threaded one bit for bit.  Calls in every style reuse one plan and
keep memory flat; a refused device allocation is retried once with the
cached plans dropped, then is a ``MemoryError`` naming the bytes.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.device import plancache
from clgrid.device.guard import ConcurrentUseError
from clgrid.imaging import imager as imager_module
from vla_ms import vla_ms  # noqa: F401  (fixture)

N_THREADS = 8
GEOMETRY = dict(npix_x=64, npix_y=64, pixsize_x=2e-4, pixsize_y=2e-4, epsilon=1e-4)


def _observation(n_rows: int = 300, n_chan: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-600, 600, (n_rows, 3))
    uvw[:, 2] /= 10
    freq = np.linspace(1.0e9, 1.1e9, n_chan)
    return uvw, freq


def _vis(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)


def _image(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)


def _in_threads(call, n_calls: int) -> list:
    """``call(k)`` for k in range(n_calls) on N_THREADS threads, started
    together so that they overlap."""
    start = threading.Barrier(min(N_THREADS, n_calls))

    def run(k):
        if k < N_THREADS:
            start.wait()
        return call(k)

    with concurrent.futures.ThreadPoolExecutor(N_THREADS) as pool:
        return list(pool.map(run, range(n_calls)))


@pytest.fixture
def default_device(cl_env, monkeypatch):
    """Calls without a device argument go to the device under test."""
    monkeypatch.setenv("CLGRID_DEVICE",
                       f"{cl_env.profile.platform_index}:{cl_env.profile.device_index}")
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    plancache.plans.clear()
    yield
    plancache.plans.clear()


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
@pytest.mark.parametrize("style", ["shared-queue", "shared-context", "no-device-argument"])
def test_threads_calling_vis2dirty_and_dirty2vis_get_their_own_results(
        cl_env, default_device, style, do_w):
    """8 threads x 3 calls each of vis2dirty and dirty2vis, same uvw and
    different data, through one queue, one context or no device argument:
    bitwise the single-threaded results."""
    uvw, freq = _observation()
    device = {"shared-queue": dict(queue=cl_env.queue),
              "shared-context": dict(context=cl_env.context),
              "no-device-argument": {}}[style]
    common = dict(uvw=uvw, freq=freq, do_wgridding=do_w, **device)
    n_calls = 3 * N_THREADS
    visibilities = [_vis((uvw.shape[0], freq.size), seed) for seed in range(n_calls)]
    images = [_image(100 + seed) for seed in range(n_calls)]
    alone_dirty = [clgrid.vis2dirty(vis=v, **common, **GEOMETRY) for v in visibilities]
    alone_vis = [clgrid.dirty2vis(dirty=d, **common, **{k: v for k, v in GEOMETRY.items()
                                                      if not k.startswith("npix")})
                 for d in images]
    builds = plancache.plans.builds

    def both(k):
        dirty = clgrid.vis2dirty(vis=visibilities[k], **common, **GEOMETRY)
        vis = clgrid.dirty2vis(dirty=images[k], **common,
                               **{key: v for key, v in GEOMETRY.items()
                                  if not key.startswith("npix")})
        return dirty, vis

    results = _in_threads(both, n_calls)
    wrong = [k for k, (dirty, vis) in enumerate(results)
             if not (np.array_equal(dirty, alone_dirty[k]) and np.array_equal(vis, alone_vis[k]))]
    assert wrong == []
    # the functional API reused its plans: none built for the threaded calls
    # (dirty2vis has its own geometry key: no accumulation flag)
    assert plancache.plans.builds == builds


def test_threads_sharing_one_imager_get_their_own_images(cl_env):
    """One Imager (with w) shared by 8 threads: each vis2dirty and dirty2vis
    is the single-threaded result, bitwise; the pool of workspaces stays
    within its budget and leases were returned."""
    uvw, freq = _observation(seed=1)
    imager = clgrid.Imager(cl_env.queue, uvw=uvw, freq=freq, do_wgridding=True, **GEOMETRY)
    n_calls = 3 * N_THREADS
    visibilities = [_vis((uvw.shape[0], freq.size), 50 + k) for k in range(n_calls)]
    images = [_image(200 + k) for k in range(n_calls)]
    alone = [(imager.vis2dirty(v), imager.dirty2vis(d)) for v, d in zip(visibilities, images)]
    results = _in_threads(lambda k: (imager.vis2dirty(visibilities[k]),
                                     imager.dirty2vis(images[k])), n_calls)
    wrong = [k for k, (dirty, vis) in enumerate(results)
             if not (np.array_equal(dirty, alone[k][0]) and np.array_equal(vis, alone[k][1]))]
    assert wrong == []
    pool = imager.engine._pool
    assert 1 <= pool.count <= N_THREADS
    assert len(pool._free) == pool.count   # every lease came back


def test_threads_sharing_one_imager_each_get_their_own_nan_verdict(cl_env):
    """One Imager with the lane tile (whose spread counts NaN/Inf as it
    gathers: Spreader.counts_nonfinite, one count a workspace) shared by 8
    threads, every third call's visibilities holding a NaN: exactly those
    calls are refused, naming one visibility, and every other call gets the
    single-threaded image, bitwise."""
    from clgrid.core.plan import TileShape
    uvw, freq = _observation(seed=4)
    imager = clgrid.Imager(cl_env.queue, uvw=uvw, freq=freq, tiles=TileShape(8, 32, 64),
                           **GEOMETRY)
    assert imager.engine.spreader.counts_nonfinite
    n_calls = 3 * N_THREADS
    visibilities = [_vis((uvw.shape[0], freq.size), 80 + k) for k in range(n_calls)]
    for k in range(0, n_calls, 3):
        visibilities[k][(7 * k) % uvw.shape[0], k % freq.size] = np.nan
    alone = [None if k % 3 == 0 else imager.vis2dirty(visibilities[k]) for k in range(n_calls)]

    def call(k):
        try:
            return imager.vis2dirty(visibilities[k])
        except ValueError as error:
            return str(error)
    results = _in_threads(call, n_calls)
    refused = [k for k, result in enumerate(results) if isinstance(result, str)]
    assert refused == list(range(0, n_calls, 3))
    assert all("NaN or Inf in 1 visibilities" in results[k] for k in refused)
    wrong = [k for k, result in enumerate(results)
             if k % 3 and not np.array_equal(result, alone[k])]
    assert wrong == []


@pytest.mark.parametrize("method", [None, "register"])
def test_threads_sharing_one_gridder_are_refused_or_right(cl_env, method):
    """A Gridder holds per-call scratch: a second thread entering it gets a
    clear ConcurrentUseError, every grid that is returned is its own (the
    dispatcher's deterministic spread, and the register spread's fixed-point
    flushes with their long grid and bound)."""
    from clgrid.core.register import fixed_point_possible
    if method == "register" and not fixed_point_possible(cl_env.profile, np.float32)[0]:
        pytest.skip("no fixed-point register sums on this device")
    gcf = clgrid.gcf.separable_gcf(6)
    # deterministic: the GPUs' float-atomic spread adds in any order
    gridder = clgrid.Gridder(cl_env.queue, gcf, 64, 64, 2e-4, deterministic=True,
                             method=method)
    uvw, freq = _observation(n_rows=2000, seed=2)
    visibilities = [_vis((uvw.shape[0], freq.size, 1), 300 + k) for k in range(2 * N_THREADS)]
    alone = [gridder(uvw, freq, v) for v in visibilities]

    def grid(k):
        try:
            return gridder(uvw, freq, visibilities[k])
        except ConcurrentUseError as error:
            assert "another thread" in str(error) and "Gridder" in str(error)
            return None

    results = _in_threads(grid, 2 * N_THREADS)
    wrong = [k for k, r in enumerate(results) if r is not None and not np.array_equal(r, alone[k])]
    assert wrong == []


def _tan_wcs(crpix: float, cdelt_deg: float):
    """A gnomonic celestial WCS at (10, 20) degrees."""
    astropy_wcs = pytest.importorskip("astropy.wcs")
    wcs = astropy_wcs.WCS(naxis=2)
    wcs.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    wcs.wcs.crval = [10.0, 20.0]
    wcs.wcs.crpix = [crpix, crpix]
    wcs.wcs.cdelt = [-cdelt_deg, cdelt_deg]
    return wcs


def test_threads_calling_reproject_interp_with_one_queue(cl_env):
    """reproject_interp from 8 threads with one shared queue: each output is
    the single-threaded one, bitwise."""
    wcs_in = _tan_wcs(20.5, 0.01)
    wcs_out = wcs_in.deepcopy()
    wcs_out.wcs.ctype = ["RA---SIN", "DEC--SIN"]
    wcs_out.wcs.crval = [10.05, 19.97]
    images = [np.random.default_rng(k).normal(size=(40, 40)) for k in range(2 * N_THREADS)]

    def project(k):
        return clgrid.reproject_interp((images[k], wcs_in), wcs_out, shape_out=(36, 36),
                                       order="bicubic", context=cl_env.queue)

    alone = [project(k) for k in range(len(images))]
    results = _in_threads(project, len(images))
    assert all(np.array_equal(r[0], a[0], equal_nan=True) and np.array_equal(r[1], a[1])
               for r, a in zip(results, alone))


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("style", ["queue", "context", "no-device-argument"])
def test_repeated_calls_keep_memory_flat_and_reuse_one_plan(cl_env, default_device, style):
    """200 vis2dirty + dirty2vis calls in each calling style: one plan for
    both directions (same geometry), one default context, memory flat (RSS growth well under a
    tenth of what one leaked context and imager a call would cost)."""
    uvw, freq = _observation(n_rows=200, seed=4)
    device = {"queue": dict(queue=cl_env.queue), "context": dict(context=cl_env.context),
              "no-device-argument": {}}[style]
    vis = _vis((uvw.shape[0], freq.size), 7)
    image = _image(8)
    angles = {k: v for k, v in GEOMETRY.items() if not k.startswith("npix")}

    def call():
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, **device, **GEOMETRY)
        clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=image, **device, **angles)

    first = plancache.plans.builds
    for _ in range(20):   # warm-up: pools and pinned slots reach their size
        call()
    builds = plancache.plans.builds
    from clgrid.device import profiles
    contexts = len(profiles._default_contexts)   # earlier tests' sub-devices have theirs
    before = _rss_bytes()
    for _ in range(200):
        call()
    grown = _rss_bytes() - before
    assert plancache.plans.builds == builds == first + 1
    assert len(plancache.plans) == 1
    assert len(profiles._default_contexts) == contexts
    # before the plan cache, each such call leaked ~5 MiB (1 GiB over 200)
    assert grown < 24 * 2 ** 20, f"RSS grew {grown / 2 ** 20:.1f} MiB over 200 calls"


def test_a_new_observation_each_call_keeps_memory_flat(cl_env, default_device, monkeypatch):
    """A pipeline imaging a new observation each call, no device argument:
    the plan cache misses every time (it keeps two plans here), and after a
    few calls RSS stays flat over 100 more, with the
    device's pinned staging mapping nothing more (on GPUs every plan leases
    the same blocks; CPUs use none)."""
    from clgrid.device import hostio
    monkeypatch.setenv("CLGRID_PLAN_CACHE_PLANS", "2")
    uvw, freq = _observation(n_rows=200, seed=21)
    vis = _vis((uvw.shape[0], freq.size), 22)

    def call(k):
        return clgrid.vis2dirty(uvw=uvw * (1 + k * 1e-9), freq=freq, vis=vis, **GEOMETRY)

    first = call(0)
    for k in range(1, 10):   # warm-up: pools and pinned blocks reach their size
        call(k)
    builds = plancache.plans.builds
    mapped = sum(pool.mapped for pool in list(hostio.PinnedPool._pools.values()))
    before = _rss_bytes()
    for k in range(10, 110):
        call(k)
    grown = _rss_bytes() - before
    assert plancache.plans.builds == builds + 100 and len(plancache.plans) <= 2
    assert sum(pool.mapped for pool in list(hostio.PinnedPool._pools.values())) == mapped
    assert grown < 24 * 2 ** 20, f"RSS grew {grown / 2 ** 20:.1f} MiB over 100 observations"
    np.testing.assert_allclose(call(0), first, rtol=0, atol=1e-5 * np.abs(first).max())


def _two_devices(cl_env) -> list:
    """Two devices of this process: two GPUs of the device's platform, or
    sub-devices of a CPU; else skipped."""
    from clgrid.scaleout.partition import cpu_sub_devices
    if cl_env.profile.device_type == "gpu":
        gpus = [d for d in cl_env.device.platform.get_devices()
                if d.type & cl.device_type.GPU]
        if len(gpus) < 2 or not cl_env.profile.fp64:
            pytest.skip("needs two GPUs with fp64 on one platform")
        return gpus[:2]
    if cl_env.profile.device_type != "cpu" or cl_env.device.max_compute_units < 2 \
            or cl_env.profile.is_simulator or not cl_env.profile.fp64:
        pytest.skip("needs a CPU device of 2 compute units or more to split in two")
    try:
        return cpu_sub_devices(2, cl_env.device)
    except ValueError as error:
        pytest.skip(f"the CPU cannot be split: {error}")


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_threads_sharing_two_devices_get_the_one_thread_bits(cl_env, do_w):
    """8 threads calling clgrid.vis2dirty / dirty2vis with devices= two
    sub-devices share one cached multi-device imager (its calls take turns):
    every thread gets the bits its call gets alone."""
    devices = _two_devices(cl_env)
    uvw, freq = _observation(n_rows=240, seed=11)
    angles = {k: v for k, v in GEOMETRY.items() if not k.startswith("npix")}
    vis = [_vis((uvw.shape[0], freq.size), 20 + k) for k in range(N_THREADS)]
    images = [_image(40 + k) for k in range(N_THREADS)]

    def call(k):
        return (clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis[k], devices=devices,
                                 do_wgridding=do_w, **GEOMETRY),
                clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=images[k], devices=devices,
                                 do_wgridding=do_w, **angles))

    alone = [call(k) for k in range(N_THREADS)]
    results = _in_threads(call, N_THREADS)
    assert all(np.array_equal(r[0], a[0]) and np.array_equal(r[1], a[1])
               for r, a in zip(results, alone))


def test_repeated_multi_device_calls_keep_memory_flat(cl_env):
    """100 vis2dirty + dirty2vis calls of one MultiDeviceImager over two
    sub-devices, w planes split (every row a view, the parts summed as they
    come down): RSS flat."""
    from clgrid.scaleout.multidevice import MultiDeviceImager
    devices = _two_devices(cl_env)
    uvw, freq = _observation(n_rows=240, seed=12)
    vis = _vis((uvw.shape[0], freq.size), 13)
    image = _image(14)
    imager = MultiDeviceImager(devices, uvw=uvw, freq=freq, do_wgridding=True,
                               partition="w-planes", **GEOMETRY)
    try:
        for _ in range(10):
            imager.vis2dirty(vis)
            imager.dirty2vis(image)
        before = _rss_bytes()
        for _ in range(100):
            imager.vis2dirty(vis)
            imager.dirty2vis(image)
        grown = _rss_bytes() - before
    finally:
        imager.close()
    assert grown < 24 * 2 ** 20, f"RSS grew {grown / 2 ** 20:.1f} MiB over 100 calls"


def test_threads_with_their_own_fixed_point_gridders_on_one_queue(cl_env):
    """8 threads, each with its own deterministic register Gridder (fixed-point
    flushes), all on one shared queue: each grid is the one-thread grid, bitwise."""
    from clgrid.core.register import fixed_point_possible
    if not fixed_point_possible(cl_env.profile, np.float32)[0]:
        pytest.skip("no fixed-point register sums on this device")
    gcf = clgrid.gcf.separable_gcf(6)
    uvw, freq = _observation(n_rows=1000, seed=3)
    visibilities = [_vis((uvw.shape[0], freq.size, 1), 400 + k) for k in range(N_THREADS)]

    def make():
        return clgrid.Gridder(cl_env.queue, gcf, 64, 64, 2e-4, deterministic=True,
                              method="register")

    alone = [make()(uvw, freq, v) for v in visibilities]
    results = _in_threads(lambda k: make()(uvw, freq, visibilities[k]), N_THREADS)
    assert all(np.array_equal(r, a) for r, a in zip(results, alone))


def test_repeated_fixed_point_gridder_calls_keep_memory_flat(cl_env):
    """200 calls of one deterministic register Gridder: the long grid and the
    bound are the workspace's, made once; RSS flat."""
    from clgrid.core.register import fixed_point_possible
    if not fixed_point_possible(cl_env.profile, np.float32)[0]:
        pytest.skip("no fixed-point register sums on this device")
    gridder = clgrid.Gridder(cl_env.queue, clgrid.gcf.separable_gcf(6), 64, 64, 2e-4,
                             deterministic=True, method="register")
    uvw, freq = _observation(n_rows=200, seed=6)
    vis = _vis((uvw.shape[0], freq.size, 1), 11)
    first = gridder(uvw, freq, vis)
    for _ in range(20):   # warm-up
        gridder(uvw, freq, vis)
    before = _rss_bytes()
    for _ in range(200):
        assert np.array_equal(gridder(uvw, freq, vis), first)
    grown = _rss_bytes() - before
    assert grown < 24 * 2 ** 20, f"RSS grew {grown / 2 ** 20:.1f} MiB over 200 calls"


def test_a_refused_allocation_is_retried_once_with_the_cache_dropped(cl_env, monkeypatch):
    """A device allocation failure while planning drops the device's cached
    plans and tries once more; it succeeds then, with the earlier plan gone."""
    uvw, freq = _observation(n_rows=100, seed=5)
    vis = _vis((uvw.shape[0], freq.size), 9)
    plancache.plans.clear()
    clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, queue=cl_env.queue, **GEOMETRY)
    assert len(plancache.plans) == 1
    real_init = imager_module.Imager.__init__
    failures = []

    def failing_once(self, *args, **kwargs):
        if not failures:
            failures.append(1)
            raise cl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(imager_module.Imager, "__init__", failing_once)
    # a second geometry: a new plan is built
    dirty = clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, queue=cl_env.queue,
                             **dict(GEOMETRY, epsilon=1e-3))
    assert failures == [1] and len(plancache.plans) == 1   # the first plan was dropped
    assert np.isfinite(dirty).all()


def test_an_allocation_that_fails_again_is_a_memory_error_naming_bytes(cl_env, monkeypatch):
    uvw, freq = _observation(n_rows=100, seed=6)
    vis = _vis((uvw.shape[0], freq.size), 10)

    def always(self, *args, **kwargs):
        raise cl.MemoryError("clCreateBuffer failed: MEM_OBJECT_ALLOCATION_FAILURE")

    monkeypatch.setattr(imager_module.Imager, "__init__", always)
    plancache.plans.clear()
    with pytest.raises(MemoryError, match=r"GiB needed, .* GiB device memory"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, queue=cl_env.queue, **GEOMETRY)


@pytest.mark.parametrize("budget_mb,kept", [("0.01", 1), ("512", 4)])
def test_a_plan_cache_budget_evicts_by_bytes(cl_env, default_device, monkeypatch,
                                             budget_mb, kept):
    """Plans are kept by bytes, not by count: with a budget smaller than one
    plan each new geometry drops the one before; with room, all four stay."""
    monkeypatch.setenv("CLGRID_PLAN_CACHE_MB", budget_mb)
    uvw, freq = _observation(n_rows=100, seed=11)
    vis = _vis((uvw.shape[0], freq.size), 12)
    for count, epsilon in enumerate((1e-2, 1e-3, 1e-4, 1e-5), start=1):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, **dict(GEOMETRY, epsilon=epsilon))
        assert len(plancache.plans) == min(count, kept)


def test_reprojections_and_maps_without_a_queue_keep_memory_flat(cl_env, default_device):
    """reproject_interp(context=...) and WcsGrid maps without a context, many
    times: before, each leaked a context or a queue (+4 MiB and +2.5 MiB a
    call without bound); now RSS stays flat after the first few."""
    wcs_in = _tan_wcs(10.5, 0.05)
    header = wcs_in.to_header()
    header["NAXIS"], header["NAXIS1"], header["NAXIS2"] = 2, 20, 20
    image = np.random.default_rng(13).normal(size=(20, 20))
    rng = np.random.default_rng(14)
    lons, lats = rng.uniform(9.6, 10.4, 300), rng.uniform(19.6, 20.4, 300)
    data = rng.normal(size=(300, 1))

    def one_of_each():
        clgrid.reproject_interp((image, wcs_in), wcs_in, shape_out=(20, 20),
                                context=cl_env.context)
        gridder = clgrid.WcsGrid(header)
        gridder.set_kernel("gauss1d", (0.05,), 0.15, 0.025)
        gridder.grid(lons, lats, data)
        return gridder.get_datacube()

    for _ in range(10):
        one_of_each()
    before = _rss_bytes()
    for _ in range(100):
        cube = one_of_each()
    grown = _rss_bytes() - before
    assert np.isfinite(cube).any()
    assert grown < 24 * 2 ** 20, f"RSS grew {grown / 2 ** 20:.1f} MiB over 100 calls"


def test_threads_imaging_one_measurement_set(cl_env, vla_ms):
    """clgrid.image_measurement_set (the CLI's library entry) from 4 threads
    at once, natural and Briggs weighting, with and without point
    calibration: each image and PSF bitwise the single-threaded one."""
    from clgrid.pipeline.run import image_measurement_set
    cases = [dict(weighting="natural"), dict(weighting="briggs", robust=0.5),
             dict(weighting="natural", calibrate="point"), dict(weighting="uniform")]

    def image(k):
        result = image_measurement_set(vla_ms, npix_x=64, epsilon=1e-4, make_psf=True,
                                       context=cl_env.queue, **cases[k % len(cases)])
        return result.image, result.psf

    alone = [image(k) for k in range(len(cases))]
    start = threading.Barrier(len(cases))

    def together(k):
        start.wait()
        return image(k)

    with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
        results = list(pool.map(together, range(len(cases))))
    wrong = [k for k, (img, psf) in enumerate(results)
             if not (np.array_equal(img, alone[k][0]) and np.array_equal(psf, alone[k][1]))]
    assert wrong == []

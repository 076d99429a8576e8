"""clgrid.dask on a LocalCluster of two worker processes: equal to the
single-device result to rounding, one compile per worker (not per task), and
a worker killed mid-run gives the right image (Dask recomputes) or a clear
error, never a silently wrong image."""

import os
import signal
import sys
import threading
import time

import numpy as np
import pytest

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)
import dask.array as da  # noqa: E402

import clgrid.dask as cldask  # noqa: E402
from clgrid.imaging import dft_vis2dirty, dirty2vis, vis2dirty  # noqa: E402

GEOMETRY = dict(npix_x=48, npix_y=40, pixsize_x=5e-3, pixsize_y=6e-3)
ROUNDING = 2e-6
CHUNK_ROWS = 60
# Workers must import this module's slow block function by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _observation(n_rows=480, n_chan=2, seed=4):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-300.0, 300.0, (n_rows, 3))
    uvw[:, 2] *= 3.0
    freq = np.linspace(1.0e9, 1.1e9, n_chan)
    vis = (rng.normal(size=(n_rows, n_chan))
           + 1j * rng.normal(size=(n_rows, n_chan))).astype(np.complex64)
    flags = rng.uniform(size=(n_rows, n_chan)) < 0.1
    wgt = rng.uniform(0.5, 2.0, (n_rows, n_chan))
    return uvw, freq, vis, flags, wgt


def _spec(cl_env) -> str:
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64")
    return f"{cl_env.profile.platform_index}:{cl_env.profile.device_index}"


def _peak_error(result, reference):
    return float(np.max(np.abs(result - reference)) / np.max(np.abs(reference)))


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    with distributed.Client(cluster) as dask_client:
        yield dask_client
    cluster.close()


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_vis2dirty_on_two_workers_equals_one_device(cl_env, client, do_w):
    spec = _spec(cl_env)
    uvw, freq, vis, flags, wgt = _observation()
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, mask=~flags, epsilon=1e-5,
                       do_wgridding=do_w, queue=cl_env.queue, **GEOMETRY)
    client.register_plugin(cldask.OpenCLWorkerPlugin(spec))
    dirty = cldask.vis2dirty(
        uvw=da.from_array(uvw, chunks=(CHUNK_ROWS, 3)), freq=freq,
        vis=da.from_array(vis, chunks=(CHUNK_ROWS, 2)), wgt=da.from_array(wgt, chunks=100),
        flags=da.from_array(flags, chunks=(CHUNK_ROWS, 2)), epsilon=1e-5,
        do_wgridding=do_w, device=spec, nthreads=8, **GEOMETRY)
    assert dirty.shape == single.shape and dirty.dtype == single.dtype
    assert _peak_error(dirty, single) <= ROUNDING
    reference = dft_vis2dirty(uvw, freq, vis * wgt * ~flags, do_wgridding=do_w, **GEOMETRY)
    assert np.linalg.norm(dirty - reference) / np.linalg.norm(reference) <= 1e-5
    # Both workers did work and each compiled its kernels once, not per task.
    status = client.run(cldask.worker_status, spec)
    assert len(status) == 2
    before = {address: s["programs"] + s["fft_plans"] for address, s in status.items()}
    # Same weighting, other chunks: no new program (weights and flags select a
    # kernel variant, so they stay the same here).
    cldask.vis2dirty(uvw=da.from_array(uvw, chunks=(CHUNK_ROWS // 2, 3)), freq=freq,
                     vis=da.from_array(vis, chunks=(CHUNK_ROWS // 2, 2)),
                     wgt=da.from_array(wgt, chunks=50),
                     flags=da.from_array(flags, chunks=(CHUNK_ROWS // 2, 2)), epsilon=1e-5,
                     do_wgridding=do_w, device=spec, **GEOMETRY)
    after = client.run(cldask.worker_status, spec)
    assert {a: s["programs"] + s["fft_plans"] for a, s in after.items()} == before


def test_polarisations_and_threaded_scheduler(cl_env):
    spec = _spec(cl_env)
    uvw, freq, vis, _, _ = _observation(n_rows=200)
    vis3 = np.stack([vis, 0.5 * vis], axis=-1)
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis3, epsilon=1e-4, queue=cl_env.queue,
                       **GEOMETRY)
    dirty = cldask.vis2dirty(uvw=da.from_array(uvw, chunks=(50, 3)), freq=freq,
                             vis=da.from_array(vis3, chunks=(50, 2, 2)), epsilon=1e-4,
                             device=spec, scheduler="threads", **GEOMETRY)
    assert dirty.shape == (2, GEOMETRY["npix_x"], GEOMETRY["npix_y"])
    assert _peak_error(dirty, single) <= ROUNDING
    # chunks are summed by a fixed tree, whichever thread finishes first
    again = cldask.vis2dirty(uvw=da.from_array(uvw, chunks=(50, 3)), freq=freq,
                             vis=da.from_array(vis3, chunks=(50, 2, 2)), epsilon=1e-4,
                             device=spec, scheduler="threads", **GEOMETRY)
    assert np.array_equal(again, dirty)


@pytest.mark.parametrize("do_w", [False, True], ids=["no-w", "w"])
def test_dirty2vis_keeps_the_row_chunks(cl_env, client, do_w):
    spec = _spec(cl_env)
    uvw, freq, _, flags, wgt = _observation(n_rows=240)
    image = np.random.default_rng(8).normal(
        size=(GEOMETRY["npix_x"], GEOMETRY["npix_y"])).astype(np.float32)
    pixsizes = dict(pixsize_x=GEOMETRY["pixsize_x"], pixsize_y=GEOMETRY["pixsize_y"])
    single = dirty2vis(uvw=uvw, freq=freq, dirty=image, wgt=wgt, mask=~flags, epsilon=1e-5,
                       do_wgridding=do_w, queue=cl_env.queue, **pixsizes)
    uvw_d = da.from_array(uvw, chunks=(CHUNK_ROWS, 3))
    vis = cldask.dirty2vis(uvw=uvw_d, freq=freq, dirty=image, wgt=wgt,
                           flags=da.from_array(flags, chunks=(CHUNK_ROWS, 2)), epsilon=1e-5,
                           do_wgridding=do_w, device=spec, **pixsizes)
    assert isinstance(vis, da.Array) and vis.chunks[0] == uvw_d.chunks[0]
    assert vis.dtype == np.complex64
    assert _peak_error(vis.compute(), single) <= ROUNDING


def test_bad_input_is_refused(cl_env):
    spec = _spec(cl_env)
    uvw, freq, vis, flags, _ = _observation(n_rows=100)
    uvw_d = da.from_array(uvw, chunks=(50, 3))
    with pytest.raises(ValueError, match="rows"):
        cldask.vis2dirty(uvw=uvw_d, freq=freq, vis=vis[:-1], epsilon=1e-4, device=spec,
                         **GEOMETRY)
    with pytest.raises(ValueError, match="not both"):
        cldask.vis2dirty(uvw=uvw_d, freq=freq, vis=vis, mask=~flags, flags=flags,
                         epsilon=1e-4, device=spec, **GEOMETRY)
    bad = uvw.copy()
    bad[3, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or Inf"):
        cldask.vis2dirty(uvw=da.from_array(bad, chunks=(50, 3)), freq=freq, vis=vis,
                         epsilon=1e-4, device=spec, **GEOMETRY)
    with pytest.raises(ValueError, match="split_every"):
        cldask.vis2dirty(uvw=uvw_d, freq=freq, vis=vis, epsilon=1e-4, device=spec,
                         split_every=1, **GEOMETRY)


# ------------------------------------------------------------ a worker dies
_BLOCK_SECONDS = 0.4


def _slow_vis_block(vis_block):
    """An input stage that takes a while, so that a worker can die mid-run."""
    time.sleep(_BLOCK_SECONDS)
    return vis_block


def test_killed_worker_is_recomputed_or_fails_clearly(cl_env):
    spec = _spec(cl_env)
    uvw, freq, vis, _, _ = _observation(n_rows=960)
    single = vis2dirty(uvw=uvw, freq=freq, vis=vis, epsilon=1e-5, queue=cl_env.queue,
                       **GEOMETRY)
    slow_vis = da.from_array(vis, chunks=(CHUNK_ROWS, 2)).map_blocks(_slow_vis_block)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as dask_client:
        pids = dask_client.run(os.getpid)
        outcome = {}

        def killer():
            time.sleep(3 * _BLOCK_SECONDS)  # some chunks are done, most are not
            victim = next(iter(pids.values()))
            os.kill(victim, signal.SIGKILL)
            outcome["killed_at"] = time.perf_counter()
            outcome["killed"] = victim

        thread = threading.Thread(target=killer)
        thread.start()
        try:
            dirty = cldask.vis2dirty(uvw=da.from_array(uvw, chunks=(CHUNK_ROWS, 3)),
                                     freq=freq, vis=slow_vis, epsilon=1e-5, device=spec,
                                     **GEOMETRY)
        except distributed.KilledWorker as error:  # a clear failure is acceptable
            thread.join()
            assert "killed" in outcome
            assert "KilledWorker" in type(error).__name__
            return
        finished_at = time.perf_counter()
        thread.join()
        assert outcome["killed_at"] < finished_at  # killed mid-run
        alive = dask_client.run(os.getpid)
        assert outcome["killed"] not in alive.values()  # the worker really died
        assert _peak_error(dirty, single) <= ROUNDING


def test_cli_image_with_dask_scheduler_equals_local(cl_env, client, tmp_path):
    from astropy.io import fits

    from clgrid.cli import main
    spec = _spec(cl_env)
    local, remote = tmp_path / "local.fits", tmp_path / "remote.fits"
    common = ["--example", "--npix", "128", "--device", spec, "--quiet"]
    assert main(["image", *common[:1], str(local), *common[1:]]) == 0
    assert main(["image", *common[:1], str(remote), *common[1:],
                 "--dask-scheduler", client.scheduler.address]) == 0
    assert _peak_error(fits.getdata(remote), fits.getdata(local)) <= ROUNDING

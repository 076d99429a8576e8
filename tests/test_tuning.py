"""Autotuning: every variant agrees, the cache round-trips, 'auto' never tunes."""


from clgrid.gridders import tuning
from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder, GridderParams, default_params


def test_tune_stores_best_and_auto_reads_it(cl_env, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    gcf = separable_gcf(8, 4)
    auto = Gridder(cl_env.queue, gcf, 64, 64, 1e-3, npol=2, params="auto")
    assert auto.params == default_params(cl_env.profile, 8, 2)   # untuned: defaults
    n = 4 if cl_env.tiny else 64
    summary = tuning.tune(cl_env.queue, gcf, npol=2, nx=128 if not cl_env.tiny else 32,
                          n_baselines=n // 4 + 1, repeats=1, quick=True, progress=False)
    timed = [r for r in summary["results"] if "seconds" in r]
    assert len(timed) >= 3
    assert all(r["max_rel_diff"] < 1e-5 for r in timed)          # same grid for every variant
    assert summary["seconds"] == min(r["seconds"] for r in timed)
    tuned = Gridder(cl_env.queue, gcf, 64, 64, 1e-3, npol=2, params="auto")
    assert tuned.params == GridderParams(**summary["params"])
    # another parameter set is not affected
    other = Gridder(cl_env.queue, gcf, 64, 64, 1e-3, npol=1, params="auto")
    assert other.params == default_params(cl_env.profile, 8, 1)


def test_candidates_respect_limits(cl_env):
    for params in tuning.candidates(cl_env.profile):
        params.validate()
        assert params.wg_size <= cl_env.profile.max_work_group_size
        assert max(params.block_u, params.block_v) <= 2 * min(params.block_u, params.block_v)
    assert tuning.support_bucket(7) == 8 and tuning.support_bucket(16) == 16


def test_tune_core_caches_the_fastest_tile_and_imagers_use_it(cl_env, tmp_path, monkeypatch):
    """clgrid tune-core: every candidate fits the kernel, the winner is the
    fastest one timed, it is cached per device / W / precision / w mode, a new
    Imager spreads with it (and still matches the direct transform), and a
    stale entry that no longer fits falls back to the defaults."""
    import numpy as np
    from clgrid.core.plan import TileShape
    from clgrid.core.tuning import cached_tiles, store_tiles, tile_candidates
    from clgrid.imaging import Imager, dft_vis2dirty
    from clgrid.imaging.tuning import synthetic_observation, tune_tiles
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    profile = cl_env.profile
    for do_w in (False, True):
        shapes = tile_candidates(profile, 7, do_w)
        assert shapes[0] == TileShape.for_device(profile, 7) and len(shapes) == len(set(shapes))
        for shape in shapes:
            shape.check(7)
    result = tune_tiles(cl_env.queue, epsilon=1e-4, npix=64, n_rows=400, n_chan=2, repeats=1,
                        progress=False)
    winner, seconds = result["tiles"], result["seconds"]
    assert seconds[winner] == min(seconds.values())
    grid_real = np.float32
    assert cached_tiles(profile, result["support"], grid_real, False) == winner
    assert cached_tiles(profile, result["support"], grid_real, True) is None
    uvw, freq, vis = synthetic_observation(30, 2, seed=3)
    cell = 1.0 / (2.2 * np.abs(uvw[:, :2]).max() * freq[-1] / 299792458.0)
    geometry = dict(npix_x=64, npix_y=64, pixsize_x=cell, pixsize_y=cell)
    imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=1e-4, **geometry)
    assert imager.kernel_choice.support == result["support"] and imager.engine.tiles == winner
    reference = dft_vis2dirty(uvw, freq, vis, **geometry)
    error = np.linalg.norm(imager.vis2dirty(vis) - reference) / np.linalg.norm(reference)
    assert error <= 1e-4
    store_tiles(profile, 20, grid_real, False, {TileShape(8, 8): 1.0})   # too small for W 20
    assert cached_tiles(profile, 20, grid_real, False) is None

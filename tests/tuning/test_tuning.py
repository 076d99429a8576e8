"""``clgrid tune table`` and ``clgrid tune imaging``: every variant agrees,
the cache round-trips, Gridder(register_params='auto') and Imager read it and
never tune; the old spellings still run."""

import numpy as np

from clgrid.core.register import MAX_REGISTER_SUMS, REGISTER_BLOCKS, RegisterParams, \
    default_register_params
from clgrid.core.tuning import register as register_tuning
from clgrid.tuning import table as table_tuner
from clgrid.gcf import separable_gcf
from clgrid.gridders.gridder import Gridder

#: A few candidates, so that a tune takes seconds on a 2-core CPU.
FEW = [RegisterParams(1, 1, 32, 64, 1024), RegisterParams(2, 2, 64, 64, 2048),
       RegisterParams(2, 1, 32, 16, 512)]


def _auto(cl_env, gcf, npol, cell=1e-3):
    return Gridder(cl_env.queue, gcf, 64, 64, cell, npol=npol, method="register",
                   register_params="auto")


def test_tune_stores_best_and_auto_reads_it(cl_env, tmp_path, monkeypatch):
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    monkeypatch.setattr(table_tuner, "candidates", lambda profile, npol, quick=False: list(FEW))
    profile = cl_env.profile
    gcf = separable_gcf(8, 4)
    defaults = default_register_params(profile, 8, 2, True, gcf.real_tables)
    assert _auto(cl_env, gcf, 2).engine.spreader.params == defaults   # untuned: defaults
    summary = table_tuner.tune(cl_env.queue, gcf, npol=2, nx=64, n_baselines=3, repeats=1,
                          quick=True, progress=False)
    timed = [r for r in summary["results"] if "seconds" in r]
    # the candidates, and the defaults first where they are not among them
    tried = [RegisterParams(**r["params"]) for r in summary["results"]]
    assert tried == ([] if defaults in FEW else [defaults]) + FEW
    assert len(timed) == len(tried)                                # every variant compiles
    assert all(r["max_rel_diff"] < 1e-5 for r in timed)           # same grid for every variant
    assert summary["seconds"] == min(r["seconds"] for r in timed)
    assert summary["default_seconds"] == next(r["seconds"] for r in timed
                                              if r["params"] == defaults.__dict__)
    best = RegisterParams(**summary["params"])
    assert register_tuning.cached_register_params(profile, 8, 2, np.float32, True) == best
    tuned = _auto(cl_env, gcf, 2)
    assert tuned.engine.spreader.params == best
    # another parameter set is not affected
    assert _auto(cl_env, gcf, 1).engine.spreader.params == default_register_params(
        profile, 8, 1, True, gcf.real_tables)
    # save=False times without storing
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "other.json"))
    table_tuner.tune(cl_env.queue, gcf, npol=2, nx=64, n_baselines=3, repeats=1, progress=False,
                save=False)
    assert register_tuning.cached_register_params(profile, 8, 2, np.float32, True) is None


def test_tuned_gridder_matches_reference(cl_env, tmp_path, monkeypatch):
    """A geometry from the cache grids the same numbers as the float64 reference."""
    from gridder_reference import C, grid_reference, random_vis
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    gcf = separable_gcf(8, 4)
    uvw, freq, cell = table_tuner.synthetic_tracks(3, 64, gcf.support)
    assert np.abs(uvw[:, :2]).max() * freq.max() / C * 64 * cell < 32 - gcf.support
    register_tuning.store_register_params(cl_env.profile, 8, 2, np.float32, True, FEW[2], 1.0)
    gridder = _auto(cl_env, gcf, 2, cell)
    assert gridder.engine.spreader.params == FEW[2]
    rng = np.random.default_rng(0)
    uvw = uvw[:200]
    vis = random_vis(rng, (uvw.shape[0], freq.size, 2)).astype(np.complex64)
    grid = gridder(uvw, freq, vis)
    assert gridder.last_stats["n_offgrid"] == 0
    reference = grid_reference(uvw, freq, vis, gcf, 64, 64, cell)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))


def test_candidates_respect_limits(cl_env):
    from fake_profiles import fake
    profiles = [cl_env.profile, fake(), fake(max_work_group_size=64),
                fake(device_type="cpu", max_work_group_size=8192)]
    for profile in profiles:
        for npol in (1, 2, 4):
            for quick in (False, True):
                space = register_tuning.candidates(profile, npol, quick)
                assert space and len(space) == len(set(space))
                for params in space:
                    params.validate(npol)
                    assert params.block_u in REGISTER_BLOCKS and params.block_v in REGISTER_BLOCKS
                    assert params.block_u * params.block_v * params.pols(npol) <= \
                        MAX_REGISTER_SUMS
                    assert params.wg_size <= profile.max_work_group_size
                    assert max(params.block_u, params.block_v) <= 2 * min(params.block_u,
                                                                         params.block_v)
                if quick:
                    assert set(space) <= set(register_tuning.candidates(profile, npol))
    narrow = register_tuning.candidates(fake(max_work_group_size=64), 1)
    assert {p.wg_size for p in narrow} == {32, 64}
    # quad polarisation: at most 4 x 4 points a work-item holding all four,
    # 8 x 8 holding one (pol_block)
    quad = register_tuning.candidates(fake(), 4)
    assert max(p.block_u * p.block_v for p in quad if not p.pol_block) == 16
    assert max(p.block_u * p.block_v for p in quad) == 64
    assert {p.pol_block for p in quad} == {0, 1, 2}
    assert {p.pol_block for p in register_tuning.candidates(fake(), 1)} == {0}
    assert register_tuning.support_bucket(7) == 8 and register_tuning.support_bucket(16) == 16
    assert register_tuning.support_bucket(17) == 32 and register_tuning.support_bucket(1) == 1
    assert register_tuning.parameter_key(4, np.float64, False, 20) == \
        "register|npol=4|float64|full|support<=32"


def test_cli_tune_table(cl_env, tmp_path, monkeypatch, capsys):
    """``clgrid tune table`` on one device stores what Gridder(register_params='auto') reads."""
    from clgrid.cli import main as cli_main
    cache = tmp_path / "cache.json"
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(cache))
    monkeypatch.setattr(table_tuner, "candidates", lambda profile, npol, quick=False: list(FEW[:2]))
    profile = cl_env.profile
    device = f"{profile.platform_index}:{profile.device_index}"
    assert cli_main(["tune", "table", "--device", device, "--support", "6", "--npol", "1",
                     "--nx", "64", "--baselines", "3", "--quick", "--oversample", "4"]) == 0
    captured = capsys.readouterr()
    assert "support 6: best" in captured.out and str(cache) in captured.out
    assert "is now spelled" not in captured.err                  # the new spelling
    stored = register_tuning.cached_register_params(profile, 6, 1, np.float32, True)
    assert stored is not None
    assert _auto(cl_env, separable_gcf(6, 4), 1).engine.spreader.params == stored
    assert cli_main(["tune", "table", "--device", "no-such-device-xyz", "--support", "6"]) == 2


def test_tune_core_caches_the_fastest_tile_and_imagers_use_it(cl_env, tmp_path, monkeypatch):
    """clgrid tune imaging: every candidate fits the kernel, the winner is the
    fastest one timed, it is cached per device / W / precision / w mode, a new
    Imager spreads with it (and still matches the direct transform), and a
    stale entry that no longer fits falls back to the defaults."""
    from clgrid.core.plan import TileShape
    from clgrid.core.tuning.tiles import cached_tiles, store_tiles, tile_candidates
    from clgrid.imaging import Imager, dft_vis2dirty
    from clgrid.tuning.imaging import synthetic_observation, tune_tiles
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


def test_cli_tune_imaging(cl_env, tmp_path, monkeypatch, capsys):
    """``clgrid tune imaging`` stores the tile that a new Imager of that
    kernel width and w mode spreads with."""
    from clgrid.cli import main as cli_main
    from clgrid.core.tuning.tiles import cached_tiles
    cache = tmp_path / "cache.json"
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(cache))
    profile = cl_env.profile
    device = f"{profile.platform_index}:{profile.device_index}"
    assert cli_main(["tune", "imaging", "--device", device, "--epsilon", "1e-4", "--w", "no",
                     "--npix", "64", "--rows", "400", "--channels", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("epsilon 0.0001, w False, W ")
    assert str(cache) in out[0]
    support = int(out[0].split(", W ")[1].split(":")[0])
    assert cached_tiles(profile, support, np.float32, False) is not None
    assert cached_tiles(profile, support, np.float32, True) is None


def test_tune_times_the_gcf_read_paths_and_auto_reads_the_faster(cl_env, tmp_path, monkeypatch):
    """clgrid tune table times the winning geometry reading a buffer and an image
    (where the device holds one), stores the faster, and
    Gridder(register_params='auto') takes it where gcf_read is not given."""
    if not cl_env.profile.image_support:
        import pytest
        pytest.skip("no image support")
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(tmp_path / "cache.json"))
    monkeypatch.setattr(table_tuner, "candidates", lambda profile, npol, quick=False: list(FEW[:1]))
    gcf = separable_gcf(8, 4)
    summary = table_tuner.tune(cl_env.queue, gcf, npol=1, nx=64, n_baselines=3, repeats=1,
                          progress=False)
    assert set(summary["gcf_read_seconds"]) == set(register_tuning.TUNED_GCF_READS)
    faster = min(summary["gcf_read_seconds"], key=summary["gcf_read_seconds"].get)
    assert summary["gcf_read"] == faster
    assert register_tuning.cached_gcf_read(cl_env.profile, 8, 1, np.float32, True) == faster
    auto = _auto(cl_env, gcf, 1)
    assert auto.gcf_read == faster and "tuning cache" in auto.gcf_read_reason
    # an explicit gcf_read, or no register_params='auto', ignores the cache
    assert Gridder(cl_env.queue, gcf, 64, 64, 1e-3, method="register", register_params="auto",
                   gcf_read="image-linear").gcf_read == "image-linear"
    plain = Gridder(cl_env.queue, gcf, 64, 64, 1e-3, method="register")
    assert "tuning cache" not in plain.gcf_read_reason

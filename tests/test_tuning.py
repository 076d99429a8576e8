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

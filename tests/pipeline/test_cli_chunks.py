"""``clgrid image`` grids batches, not chunks (issue 36): the image and PSF
do not depend on the chunk size, a set within the batch budget is gridded
with one ``vis2dirty`` call (image, PSF) whatever the chunk size, and a small
budget splits it into several batches with the same result."""

import shutil

import numpy as np
import pytest

pytest.importorskip("casacore")
from casacore.tables import table  # noqa: E402

import clgrid.pipeline.run as run  # noqa: E402
from vla_ms import vla_ms  # noqa: E402,F401

ARCSEC = np.radians(1 / 3600)
#: The bundled set has 1360 rows: 100-row chunks are 14 chunks, 10000 one.
SMALL_CHUNKS, ONE_CHUNK = 100, 10_000
BAD_UVW_ROW, FLAGGED_ROWS = 7, slice(200, 260)
BATCH_ENV = "CLGRID_IMAGE_BATCH_MB"


@pytest.fixture(scope="module")
def imperfect_ms(vla_ms, tmp_path_factory):
    """The bundled set with one NaN uvw row and 60 rows flagged in channel 4,
    so that counts and left-out rows are part of what must not change."""
    path = tmp_path_factory.mktemp("chunks") / "imperfect.ms"
    shutil.copytree(vla_ms, path)
    with table(str(path), readonly=False, ack=False) as main_table:
        uvw = main_table.getcol("UVW")
        uvw[BAD_UVW_ROW] = np.nan
        main_table.putcol("UVW", uvw)
        flag = main_table.getcol("FLAG")
        flag[FLAGGED_ROWS, 4] = True  # a selected channel (0:64:4)
        main_table.putcol("FLAG", flag)
    return path


def _image(path, queue, monkeypatch, chunk_rows: int, **options):
    """Image ``path`` (64x64, 16 channels, PSF) counting vis2dirty calls."""
    calls = []
    real = run.vis2dirty_with

    def counted(geometry, **arguments):
        calls.append(np.shape(arguments["uvw"])[0])
        return real(geometry, **arguments)

    with monkeypatch.context() as patch, pytest.warns(RuntimeWarning, match="non-finite uvw"):
        patch.setattr(run, "vis2dirty_with", counted)
        result = run.image_measurement_set(path, npix_x=64, pixsize_x=0.8 * ARCSEC,
                                           channels="0:64:4", chunk_rows=chunk_rows,
                                           make_psf=True, context=queue, **options)
    return result, calls


def _assert_same_images(result, reference) -> None:
    """Image and PSF equal to float rounding relative to their peaks; counts equal."""
    for name in ("image", "psf"):
        got, want = getattr(result, name), getattr(reference, name)
        assert np.max(np.abs(got - want)) <= 1e-6 * np.max(np.abs(want)), name
    for name in ("n_samples", "n_flagged", "n_bad_uvw", "n_bad_uvw_rows", "n_outside"):
        assert getattr(result, name) == getattr(reference, name), name
    assert result.sum_weights == pytest.approx(reference.sum_weights, rel=1e-6)  # float32 weights


@pytest.mark.parametrize("options", [{}, {"weighting": "briggs", "calibrate": "point"}],
                         ids=["natural", "briggs-calibrated"])
def test_small_chunks_grid_once(cl_env, imperfect_ms, monkeypatch, options):
    """14 chunks give the one-chunk image and PSF with one call each."""
    monkeypatch.delenv(BATCH_ENV, raising=False)
    reference, reference_calls = _image(imperfect_ms, cl_env.queue, monkeypatch, ONE_CHUNK,
                                        **options)
    result, calls = _image(imperfect_ms, cl_env.queue, monkeypatch, SMALL_CHUNKS, **options)
    assert len(calls) == 2, calls  # image and PSF
    assert calls == reference_calls
    assert reference.n_bad_uvw_rows == 1 and reference.n_flagged >= 60
    _assert_same_images(result, reference)


def test_tiny_budget_grids_several_batches(cl_env, imperfect_ms, monkeypatch):
    """CLGRID_IMAGE_BATCH_MB 0.05 (about 150 rows of 16 channels): batches
    that cut across chunks, the same image and PSF."""
    monkeypatch.delenv(BATCH_ENV, raising=False)
    reference, _ = _image(imperfect_ms, cl_env.queue, monkeypatch, ONE_CHUNK)
    monkeypatch.setenv(BATCH_ENV, "0.05")
    result, calls = _image(imperfect_ms, cl_env.queue, monkeypatch, SMALL_CHUNKS)
    assert len(calls) >= 8 and len(calls) % 2 == 0, calls  # image and PSF per batch
    row_bytes = 24 + 16 * (8 + 4 + 8)
    assert max(calls) == int(0.05 * 2**20) // row_bytes
    _assert_same_images(result, reference)


def test_batch_budget_sources(monkeypatch):
    """Argument over environment over default; bad values named."""
    monkeypatch.delenv(BATCH_ENV, raising=False)
    default = run.batch_budget_bytes()
    assert 0 < default <= run.BATCH_CAP_BYTES
    monkeypatch.setenv(BATCH_ENV, "3")
    assert run.batch_budget_bytes() == 3 * 2**20
    assert run.batch_budget_bytes(0.5) == 2**19
    for bad in ("lots", "0", "-1", "nan"):
        monkeypatch.setenv(BATCH_ENV, bad)
        with pytest.raises(ValueError, match=BATCH_ENV):
            run.batch_budget_bytes()
    with pytest.raises(ValueError, match="batch_mb"):
        run.batch_budget_bytes(0)

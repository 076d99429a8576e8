"""The one tuning cache file (clgrid.core.tuning.cache): format 2's sections,
the files of clgrid before it, and the old ``clgrid tune`` spellings.

No OpenCL device is needed (fake profiles), so it runs once, not per platform.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from clgrid.core.plan import TileShape
from clgrid.core.register import RegisterParams
from clgrid.core.tuning import cache
from clgrid.core.tuning.register import (cached_gcf_read, cached_register_params,
                                         parameter_key, store_register_params)
from clgrid.core.tuning.tiles import cached_tiles, store_tiles, tile_key
from clgrid.tuning.command import new_spelling
from fake_profiles import fake

PROFILE = fake()
TILE = TileShape(8, 8, 2048, groups=2)
PARAMS = RegisterParams(2, 2, 64, 64, 2048)


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user cache directory's clgrid folder, with no CLGRID_TUNING_CACHE
    (the default file and the old one beside it)."""
    monkeypatch.delenv(cache.CACHE_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "clgrid"
    assert cache.cache_path() == folder / "tuning.json"
    assert cache.legacy_path() == folder / "gridder_tuning.json"
    return folder


def _format1() -> dict:
    """A file as clgrid wrote it before format 2: one map per device."""
    return {PROFILE.cache_key: {
        tile_key(7, np.float32, True): {"tiles": {"tile_u": 8, "lanes": 8, "chunk_points": 2048,
                                                  "groups": 2}, "seconds": 0.1},
        parameter_key(4, np.float32, True, 16): {"params": PARAMS.__dict__, "seconds": 0.2,
                                                 "gcf_read": "image"},
        "npol=4|float32|separable|support<=16": {"params": {"wg_size": 64}}}}  # first version's


def _read_silently() -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return (cached_tiles(PROFILE, 7, np.float32, True),
                cached_register_params(PROFILE, 16, 4, np.float32, True),
                cached_gcf_read(PROFILE, 16, 4, np.float32, True))


def test_both_kinds_go_to_their_sections_of_one_file(cache_home):
    """``clgrid tune imaging`` and ``clgrid tune table`` write one file, format 2,
    a section each keyed by device; the readers read them silently."""
    assert _read_silently() == (None, None, None)                      # no file: silent
    store_tiles(PROFILE, 7, np.float32, True, {TILE: 0.1, TileShape(8, 8): 0.3})
    store_register_params(PROFILE, 16, 4, np.float32, True, PARAMS, 0.2, "image",
                          {"buffer": 0.3, "image": 0.2})
    data = json.loads(cache.cache_path().read_text())
    assert set(data) == {"format", "imaging", "table"} and data["format"] == 2
    assert list(data["imaging"][PROFILE.cache_key]) == [tile_key(7, np.float32, True)]
    assert list(data["table"][PROFILE.cache_key]) == [parameter_key(4, np.float32, True, 16)]
    assert _read_silently() == (TILE, PARAMS, "image")
    assert not cache.legacy_path().exists()


def test_the_old_file_is_read_until_the_new_one_is_written(cache_home):
    """A format-1 ``gridder_tuning.json`` serves both readers while there is no
    ``tuning.json``; the first store writes the new file with its entries
    (the first version's keys dropped) and leaves the old file as it was."""
    cache_home.mkdir()
    old_text = json.dumps(_format1())
    cache.legacy_path().write_text(old_text)
    assert _read_silently() == (TILE, PARAMS, "image")
    other = TileShape(16, 16, 2048, groups=2)
    store_tiles(PROFILE, 9, np.float32, False, {other: 0.5})
    data = json.loads(cache.cache_path().read_text())
    assert data["format"] == 2
    assert set(data["imaging"][PROFILE.cache_key]) == {tile_key(7, np.float32, True),
                                                       tile_key(9, np.float32, False)}
    assert set(data["table"][PROFILE.cache_key]) == {parameter_key(4, np.float32, True, 16)}
    assert _read_silently() == (TILE, PARAMS, "image")
    assert cached_tiles(PROFILE, 9, np.float32, False) == other
    assert cache.legacy_path().read_text() == old_text
    # from now on the new file is the cache: the old one is not read
    cache.legacy_path().write_text(json.dumps({PROFILE.cache_key: "broken"}))
    assert _read_silently() == (TILE, PARAMS, "image")


def test_a_named_file_in_the_old_format_is_read(tmp_path, monkeypatch):
    """CLGRID_TUNING_CACHE naming a format-1 file: read, then rewritten in format 2."""
    path = tmp_path / "mine.json"
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(path))
    assert cache.legacy_path() is None
    path.write_text(json.dumps(_format1()))
    assert _read_silently() == (TILE, PARAMS, "image")
    store_register_params(PROFILE, 8, 1, np.float32, True, PARAMS, 0.1)
    assert json.loads(path.read_text())["format"] == 2
    assert _read_silently() == (TILE, PARAMS, "image")


@pytest.mark.parametrize("text, reason", [
    (json.dumps({"format": 3, "imaging": {}, "table": {}}), "format 3; this clgrid reads 2"),
    (json.dumps({"format": "2"}), "format '2'"),
    (json.dumps({"format": 2, "imaging": [], "table": {}}), "section 'imaging' is list"),
    ("{", "not JSON")], ids=["newer format", "format a string", "section a list", "not json"])
def test_a_malformed_file_gives_one_warning_per_read_and_a_store_replaces_it(
        tmp_path, monkeypatch, text, reason):
    path = tmp_path / "cache.json"
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(path))
    path.write_text(text)
    for read in (lambda: cached_tiles(PROFILE, 7, np.float32, True),
                 lambda: cached_register_params(PROFILE, 16, 4, np.float32, True),
                 lambda: cached_gcf_read(PROFILE, 16, 4, np.float32, True)):
        with pytest.warns(cache.TuningCacheWarning, match=reason) as caught:
            assert read() is None
        assert len(caught) == 1 and str(path) in str(caught[0].message)
    store_tiles(PROFILE, 7, np.float32, True, {TILE: 0.1})
    assert _read_silently() == (TILE, None, None)


def test_store_refuses_an_unknown_kind(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(tmp_path / "cache.json"))
    with pytest.raises(ValueError, match="kind must be one of"):
        cache.store_entry("gridders", PROFILE, "key", {})


@pytest.mark.parametrize("argv, expected, old", [
    (["tune-core", "--w", "no"], ["tune", "imaging", "--w", "no"], "clgrid tune-core"),
    (["tune", "--support", "8"], ["tune", "table", "--support", "8"], "clgrid tune"),
    (["tune"], ["tune", "table"], "clgrid tune"),
    (["tune", "imaging"], ["tune", "imaging"], None),
    (["tune", "table", "--quick"], ["tune", "table", "--quick"], None),
    (["tune", "--help"], ["tune", "--help"], None),
    (["image", "tune-core"], ["image", "tune-core"], None)])
def test_the_old_spellings_become_the_new_ones(argv, expected, old):
    rewritten, note = new_spelling(argv)
    assert rewritten == expected
    if old is None:
        assert note is None
    else:
        assert f"`{old}` is now spelled `clgrid {' '.join(expected[:2])}`" in note
        assert "\n" not in note


def test_an_old_spelling_prints_one_line_and_runs(capsys):
    """``clgrid tune-core`` runs as ``clgrid tune imaging`` (here: to its device
    error), after one line on stderr."""
    from clgrid.cli import main
    assert main(["tune-core", "--device", "no-such-device-xyz"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("clgrid: `clgrid tune-core` is now spelled `clgrid tune imaging`; "
                      "the old spelling will go")
    assert len(err) == 2 and "no-such-device-xyz" in err[1]

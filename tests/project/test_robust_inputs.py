"""Real runs survive what real machines hold (issue 36): caches that cannot
change results or fail a run, and sizes refused on the host before they are
allocated.

* Tuning-cache tiles: every tile ``TileShape.check`` accepts grids the
  w-term image to epsilon against the direct transform; tiles that do not
  divide the core's grids are refused (they left rows unspread, 20-50%
  wrong images); a malformed cache file or entry gives one warning and the
  defaults.
* pyopencl's binary cache: a corrupt entry builds without the cache, with
  one warning.
* Host limits: a 2**31-pixel-wide image is refused naming the bytes, with no
  npix-long host arrays; a NaN centre names ``center_x``; single-dish
  ``hpx_max_resolution`` far below the kernel's needs is clamped.
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
import uuid
import warnings
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.core.plan import GRID_MULTIPLE, GridLayout, ImageGeometry, TileShape
from clgrid.core.tuning.cache import TuningCacheWarning
from clgrid.core.tuning.register import cached_register_params, parameter_key
from clgrid.core.tuning.tiles import cached_tiles, store_tiles, tile_key
from clgrid.device.kernels import build_program
from clgrid.imaging.imager import Imager
from clgrid.imaging.reference import dft_vis2dirty
from clgrid.singledish import WcsGrid

# nu = nv = 64 at epsilon 1e-5 with w: tiles of 6, 12, 20 or 24 do not divide it
GEOMETRY = {"npix_x": 32, "npix_y": 32, "pixsize_x": 5e-3, "pixsize_y": 5e-3}
EPSILON = 1e-5


def _observation(n_rows: int = 40, seed: int = 3):
    rng = np.random.default_rng(seed)
    uvw = rng.uniform(-100.0, 100.0, (n_rows, 3))
    uvw[:, 2] *= 0.3
    freq = np.array([1.0e9, 1.1e9])
    vis = rng.normal(size=(n_rows, 2)) + 1j * rng.normal(size=(n_rows, 2))
    return uvw, freq, vis


def _rel_error(image, reference) -> float:
    return float(np.linalg.norm(image - reference) / np.linalg.norm(reference))


@pytest.fixture
def tuning_cache(tmp_path, monkeypatch) -> Path:
    """A tuning cache of the test's own (the file need not exist yet)."""
    path = tmp_path / "tuning.json"
    monkeypatch.setenv("CLGRID_TUNING_CACHE", str(path))
    return path


# ------------------------------------------------------------ tile shapes
def test_tile_check_accepts_only_tiles_that_divide_the_core_grid():
    """The imaging core's grids are multiples of GRID_MULTIPLE, not padded:
    a tile of another side left the last rows or columns of every plane to
    no tile.  Every accepted side divides it; the table kernels (``wide``,
    padded grids) keep any side."""
    for tile_u in range(1, 65):
        for lanes in range(1, 65):
            shape = TileShape(tile_u, lanes)
            try:
                shape.check(3)
            except ValueError:
                continue
            assert GRID_MULTIPLE % tile_u == 0 and GRID_MULTIPLE % lanes == 0, shape
    for tile_u in (6, 12, 20, 24):
        with pytest.raises(ValueError, match=rf"tile {tile_u}x8: .* must divide it"):
            TileShape(tile_u, 8).check(7)
        TileShape(tile_u, 8).check(7, wide=True)
    with pytest.raises(ValueError, match="tile 8x24"):
        TileShape(8, 24).check(7)


@pytest.mark.parametrize("fields, message", [
    ({"tile_u": "8", "lanes": 8}, "tile_u must be int"),
    ({"tile_u": 8.0, "lanes": 8}, "tile_u must be int"),
    ({"tile_u": True, "lanes": 8}, "tile_u must be int"),
    ({"tile_u": 8, "lanes": 8, "vector": "yes"}, "vector must be bool"),
    ({"tile_u": 10 ** 30, "lanes": 8}, r"tile_u must be in 1 \.\. 1024"),
    ({"tile_u": 8, "lanes": 8, "chunk_points": 2 ** 40}, "chunk_points must be in"),
    ({"tile_u": 8, "lanes": 8, "groups": -1}, "groups must be in"),
    ({"tile_u": 8, "lanes": 8, "kernel_eval": 5}, "kernel_eval must be str"),
])
def test_tile_fields_of_the_wrong_type_or_size_are_named(fields, message):
    with pytest.raises((TypeError, ValueError), match=message):
        TileShape.from_dict(fields)
    with pytest.raises((TypeError, ValueError), match=message):
        TileShape(**fields).check(7)


def _lane_and_vector_tiles(cl_env) -> list[TileShape]:
    """Accepted tiles, lane and (where the driver builds them) vector,
    with sides 8, 16 and 32 on both axes."""
    shapes = [TileShape(8, 8), TileShape(16, 32), TileShape(32, 16, groups=2)]
    if cl_env.profile.vector_kernels and cl_env.profile.fp64:
        shapes += [TileShape(16, 16, vector=True, plane_block=4),
                   TileShape(32, 8, vector=True, plane_block=8, kernel_eval="horner")]
    return shapes


def test_every_accepted_tile_grids_the_w_term_to_epsilon(cl_env):
    """Imager(tiles=...) with w: accepted tiles within epsilon of the direct
    transform; the sides that broke the image (6, 12, 20, 24 on a 64-cell
    grid: 20-50% wrong, silently) refused with a ValueError."""
    uvw, freq, vis = _observation()
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **GEOMETRY)
    for tiles in [TileShape(t, 8) for t in (6, 12, 20, 24)] + [TileShape(8, 12)]:
        with pytest.raises(ValueError, match="must divide"):
            Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=EPSILON, do_wgridding=True,
                   tiles=tiles, **GEOMETRY)
    for tiles in _lane_and_vector_tiles(cl_env):
        imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=EPSILON, do_wgridding=True,
                        tiles=tiles, **GEOMETRY)
        assert imager.layout.nu == 64 and imager.engine.tiles == tiles
        dirty = imager.vis2dirty(vis.astype(np.complex64))
        assert _rel_error(dirty, reference) <= EPSILON, tiles


def test_a_cached_tile_that_breaks_the_image_gives_the_defaults(cl_env, tuning_cache):
    """A tuning-cache entry with tile_u 20 (it passed TileShape.check):
    one warning, the device's default tile, and the right image."""
    uvw, freq, vis = _observation()
    reference = dft_vis2dirty(uvw, freq, vis, do_wgridding=True, **GEOMETRY)
    layout = GridLayout.of_rows(ImageGeometry.from_arguments(
        epsilon=EPSILON, do_wgridding=True, **GEOMETRY), uvw, freq)
    support = layout.choice.support
    key = tile_key(support, np.float32, True)
    tuning_cache.write_text(json.dumps({"format": 2, "imaging": {cl_env.profile.cache_key: {
        key: {"tiles": {"tile_u": 20, "lanes": 8}}}}}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imager = Imager(cl_env.queue, uvw=uvw, freq=freq, epsilon=EPSILON, do_wgridding=True,
                        **GEOMETRY)
    cache_warnings = [w for w in caught if issubclass(w.category, TuningCacheWarning)]
    assert len(cache_warnings) == 1 and "tile 20x8" in str(cache_warnings[0].message)
    assert imager.engine.tiles == TileShape.for_device(cl_env.profile, support)
    assert _rel_error(imager.vis2dirty(vis.astype(np.complex64)), reference) <= EPSILON


# ------------------------------------------------------------ cache files
_DEVICE = "<device>"    # replaced by the device's cache key
_TILES = "<tiles>"      # replaced by the tile entry's key
_REGISTER = "<register>"  # replaced by the register entry's key


def _malformed_caches():
    """(id, file text) of caches a hand edit, a crash or another version
    leaves behind, in the cache's format (2: a section per kind) and in the
    format of clgrid before it (1: one map per device, still read)."""
    cases = [("top-level list", "[]"), ("top-level null", "null"), ("top-level number", "42"),
             ("not json", "{'tiles': "), ("empty file", ""), ("deep nesting", "[" * 100000)]
    for layout in (1, 2):
        cases += [(f"format {layout}: {name}", text)
                  for name, text in _malformed_entries(layout)]
    return cases


def _malformed_entries(layout: int) -> list[tuple[str, str]]:
    """(id, file text) of caches whose device entries or entries are wrong."""
    def device(value):
        if layout == 1:
            return json.dumps({_DEVICE: value})
        return json.dumps({"format": 2, "imaging": {_DEVICE: value}, "table": {_DEVICE: value}})

    def entry(tiles=None, params=None):
        if layout == 1:
            return json.dumps({_DEVICE: {_TILES: tiles, _REGISTER: params}})
        return json.dumps({"format": 2, "imaging": {_DEVICE: {_TILES: tiles}},
                           "table": {_DEVICE: {_REGISTER: params}}})
    return [
        ("device is a string", device("fast")),
        ("device is a list", device([1, 2])),
        ("entry is a string", entry("8x8", "2x2")),
        ("missing tiles and params", entry({}, {})),
        ("tiles and params are lists", entry({"tiles": [8, 8]}, {"params": [2, 2]})),
        ("wrong types", entry({"tiles": {"tile_u": "8", "lanes": 8}},
                              {"params": {"block_u": "2"}})),
        ("huge ints", entry({"tiles": {"tile_u": 8, "lanes": 8, "chunk_points": 10 ** 40}},
                            {"params": {"wg_size": 10 ** 40}})),
        ("unknown fields", entry({"tiles": {"tile_u": 8, "lanes": 8, "speed": 1}},
                                 {"params": {"block_u": 2, "speed": 1}})),
        ("invalid values", entry({"tiles": {"tile_u": 24, "lanes": 8}},
                                 {"params": {"block_u": 3}})),
    ]


@pytest.mark.parametrize("text", [text for _, text in _malformed_caches()],
                         ids=[name for name, _ in _malformed_caches()])
def test_a_malformed_cache_gives_one_warning_and_the_defaults(cl_env, tuning_cache, text):
    """Both readers of the cache (the core's tiles, the register spread's
    geometry): one TuningCacheWarning each and None (the defaults), never
    an exception (these raised AttributeError, KeyError, TypeError and
    OverflowError)."""
    profile = cl_env.profile
    tiles_key = tile_key(7, np.float32, True)
    register_key = parameter_key(1, np.float32, True, 7)
    tuning_cache.write_text(text.replace(_DEVICE, profile.cache_key)
                            .replace(_TILES, tiles_key).replace(_REGISTER, register_key))
    for read in (lambda: cached_tiles(profile, 7, np.float32, True),
                 lambda: cached_register_params(profile, 7, 1, np.float32, True)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert read() is None
        assert [w.category for w in caught] == [TuningCacheWarning], caught
        assert str(tuning_cache) in str(caught[0].message)


def test_a_good_cache_entry_is_still_used_silently(cl_env, tuning_cache):
    profile = cl_env.profile
    shape = TileShape.for_device(profile, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_tiles(profile, 7, np.float32, False) is None   # no file: silent
        assert store_tiles(profile, 7, np.float32, False, {shape: 0.5}) == shape
        assert cached_tiles(profile, 7, np.float32, False) == shape
        # storing replaces a malformed device entry (or file) instead of failing
        tuning_cache.write_text(json.dumps({profile.cache_key: "broken"}))
        store_tiles(profile, 7, np.float32, False, {shape: 0.5})
        assert cached_tiles(profile, 7, np.float32, False) == shape


# ------------------------------------------------------------ pyopencl's cache
_SOURCE = """__kernel void twice(__global float *x) {{ x[get_global_id(0)] *= 2.0f; }}
// {tag}
"""


def test_a_corrupt_pyopencl_cache_builds_without_it(cl_env, tmp_path, monkeypatch):
    """pyopencl 2026.1.4 raised KeyError('PYOPENCL_CACHE_FAILURE_FATAL') from
    its own recovery path on a corrupt cache entry: clgrid builds without
    the cache, with one warning, and the kernel runs."""
    from pyopencl.characterize import has_src_build_cache
    if has_src_build_cache(cl_env.device) or os.environ.get("PYOPENCL_NO_CACHE"):
        pytest.skip("pyopencl leaves this device's builds to the driver's own cache "
                    "(or PYOPENCL_NO_CACHE is set): no pyopencl cache entry to corrupt")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))   # where pyopencl's cache lives
    monkeypatch.delenv("PYOPENCL_CACHE_FAILURE_FATAL", raising=False)
    source = _SOURCE.format(tag=uuid.uuid4().hex)
    build_program(cl_env.context, cl_env.device, source)
    infos = list(tmp_path.glob("pyopencl/**/info"))
    assert infos, "the first build left no cache entry to corrupt"
    for info in infos:
        info.write_bytes(b"\x80\x04not a pickle at all")
    context = cl.Context([cl_env.device])   # a fresh context: past clgrid's memory cache
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = build_program(context, cl_env.device, source)
    assert len(caught) == 1 and "pyopencl's kernel cache failed" in str(caught[0].message)
    queue = cl.CommandQueue(context)
    values = np.arange(4, dtype=np.float32)
    buffer = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=values)
    program.twice(queue, (4,), None, buffer)
    cl.enqueue_copy(queue, values, buffer)
    np.testing.assert_array_equal(values, [0, 2, 4, 6])


def test_a_compile_error_is_not_taken_for_a_cache_failure(cl_env):
    with pytest.raises(cl.Error, match="BUILD_PROGRAM_FAILURE") as raised:
        build_program(cl_env.context, cl_env.device,
                      "__kernel void broken(void) { no_such_call(); }\n// " + uuid.uuid4().hex)
    assert "cache" not in type(raised.value).__name__.lower()


# ------------------------------------------------------------ host limits
def test_image_sizes_are_refused_before_npix_long_host_arrays(cl_env):
    """The plan derives sizes from npix without npix-long arrays (a
    2**27-wide image took 2 GiB in plan.pixel_lm), and a 2**31-wide image
    is refused naming the bytes, before anything large is allocated."""
    tracemalloc.start()
    try:
        geometry = ImageGeometry.from_arguments(npix_x=2 ** 27, npix_y=2, pixsize_x=1e-10,
                                                pixsize_y=1e-10, epsilon=1e-4)
        GridLayout.build(geometry, (0.0, 0.0), 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 24, f"{peak} bytes traced"
    uvw, freq, vis = _observation(n_rows=4)
    started = time.perf_counter()
    with pytest.raises((MemoryError, ValueError), match=r"\d+ bytes"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis.astype(np.complex64), npix_x=2 ** 31,
                         npix_y=2, pixsize_x=1e-10, pixsize_y=1e-10, epsilon=1e-4,
                         queue=cl_env.queue)
    assert time.perf_counter() - started < 30


def test_a_plane_too_large_is_refused_before_the_points_are_set(cl_env, monkeypatch):
    """npix_x=2**30, npix_y=2 passes the host check but not one grid plane:
    the refusal comes before set points, whose bins (one per tile of the
    grid) took 4.8 GB before the plane was checked."""
    from clgrid.core import strategies

    def no_set_points(*args, **kwargs):
        raise AssertionError("SetPoints built for a grid that cannot fit")

    monkeypatch.setattr(strategies, "SetPoints", no_set_points)
    uvw, freq, vis = _observation(n_rows=4)
    with pytest.raises(MemoryError, match=r"needs \d+ MiB.* allows \d+ MiB"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis.astype(np.complex64), npix_x=2 ** 30,
                         npix_y=2, pixsize_x=1e-10, pixsize_y=1e-10, epsilon=1e-4,
                         queue=cl_env.queue)


@pytest.mark.parametrize("name", ["center_x", "center_y", "sigma_min"])
def test_a_nan_centre_is_named(cl_env, name):
    uvw, freq, vis = _observation(n_rows=4)
    arguments = dict(GEOMETRY, epsilon=1e-4, **{name: float("nan")})
    with pytest.raises(ValueError, match=rf"^{name} must be finite, got nan$"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis.astype(np.complex64), queue=cl_env.queue,
                         **arguments)


def _singledish_header():
    return {"NAXIS": 2, "NAXIS1": 12, "NAXIS2": 12, "CTYPE1": "RA---SIN",
            "CTYPE2": "DEC--SIN", "CRPIX1": 6.5, "CRPIX2": 6.5, "CRVAL1": 10.0,
            "CRVAL2": 20.0, "CDELT1": -0.05, "CDELT2": 0.05, "CUNIT1": "deg", "CUNIT2": "deg"}


def test_a_needlessly_fine_healpix_resolution_is_clamped(cl_env):
    """hpx_max_resolution 1e-7 deg for 10 samples took 140 s and 8 GiB for
    the map sigma / 2 gives: clamped (one warning) to the finest pixels the
    kernel's radius can use, the same map."""
    rng = np.random.default_rng(5)
    lons = 10.0 + rng.uniform(-0.3, 0.3, 10)
    lats = 20.0 + rng.uniform(-0.3, 0.3, 10)
    data = rng.uniform(1.0, 2.0, 10).astype(np.float32)
    sigma, radius = 0.1, 0.3
    maps = []
    for resolution in (sigma / 2, 1e-7):
        gridder = WcsGrid(_singledish_header(), context=cl_env.queue, progress=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gridder.set_kernel("gauss1d", (sigma,), radius, resolution)
        assert len(caught) == (resolution < 1e-6)
        assert gridder.nside <= 2 ** 19   # the ring table: 16 nside bytes a chunk
        started = time.perf_counter()
        gridder.grid(lons, lats, data)
        assert time.perf_counter() - started < 10
        maps.append(gridder.get_datacube())
    assert "hpx_max_resolution 1e-07 deg" in str(caught[0].message)
    np.testing.assert_allclose(maps[1], maps[0], rtol=1e-6)
    assert np.count_nonzero(np.isfinite(maps[0])) > 50


@pytest.mark.parametrize("setting, threads", [("", None), ("32", 32), (" 3 ", 3)])
def test_copy_threads_come_from_the_environment(monkeypatch, setting, threads):
    from clgrid.device import hostio
    monkeypatch.setenv("CLGRID_COPY_THREADS", setting)
    expected = threads or max(2, min(16, os.cpu_count() or 2))
    assert hostio.copy_threads() == expected


@pytest.mark.parametrize("setting, message", [("many", "must be a whole number, got 'many'"),
                                              ("0", "must be at least 1, got 0")])
def test_a_bad_copy_threads_setting_is_named(monkeypatch, setting, message):
    from clgrid.device import hostio
    monkeypatch.setenv("CLGRID_COPY_THREADS", setting)
    with pytest.raises(ValueError, match=f"^CLGRID_COPY_THREADS {message}$"):
        hostio.copy_threads()


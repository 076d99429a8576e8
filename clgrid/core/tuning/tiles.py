"""The gridding core's spreading tile per device: candidates and the cache's
``imaging`` section.

:func:`tile_candidates` lists the :class:`~clgrid.core.plan.TileShape` s worth
timing on a device (the GPU kernel's tile and lane groups, the CPU kernel's
tile and plane blocks); :func:`clgrid.tuning.imaging.tune_tiles` (``clgrid
tune imaging``) times them on a synthetic observation and stores the winner
with :func:`store_tiles`; :func:`clgrid.core.strategies.imaging_engine` then
takes :func:`cached_tiles` over :meth:`TileShape.for_device`.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ...device.profiles import DeviceProfile
from ..plan import TileShape
from ..spread import check_lane_tile
from .cache import cached_value, store_entry

#: The cache section of the tiles.
KIND = "imaging"


def tile_key(support: int, precision: object, do_w: bool) -> str:
    """Cache key of the tile for one kernel width, grid precision and w mode."""
    return f"core_tiles|{np.dtype(precision).name}|{'w' if do_w else 'no w'}|support={support}"


def tile_candidates(profile: DeviceProfile, support: int, do_w: bool = False
                    ) -> list[TileShape]:
    """Tiles worth timing on ``profile`` for kernel width ``support`` (the
    default first); every one passes :meth:`TileShape.check`.  GPUs: tile
    sizes, lane groups and chunk lengths of ``spread``, with w-stacking its
    blocks of w planes too; CPUs: the vector
    tile's rows and, with w-stacking, its planes per block (up to
    ``min(support, 8)``, all the planes a point touches: fewer visits of each
    point, more private memory; benchmarks/RESULTS.md, "Plane blocks")."""
    default = TileShape.for_device(profile, support, do_w)
    if profile.device_type == "gpu":
        shapes = [TileShape(8, 8, chunk, groups=groups, kernel_eval=kernel_eval)
                  for groups in (2, 4, 8) for chunk in (2048, 4096)
                  for kernel_eval in ("exp", "horner")]
        shapes += [TileShape(8, 16, 2048, groups=2), TileShape(8, 32, 2048),
                   TileShape(16, 16, 2048, groups=2), TileShape(16, 32, 2048)]
        if do_w:   # blocks of w planes, each point's taps staged once a block
            shapes += [TileShape(8, 8, 4096, groups=groups, plane_block=block,
                                 kernel_eval="horner")
                       for groups in (1, 2, 4) for block in (4, 8)]
    else:
        shapes = [dataclasses.replace(default, tile_u=tile_u, plane_block=block)
                  for tile_u in (16, 32)
                  for block in (sorted({1, 2, 4, min(support, 8)}) if do_w
                                else (default.plane_block,))]
    fitting = []
    for shape in [default] + shapes:
        try:
            _check_fits(shape, profile, support, do_w)
        except ValueError:
            continue
        if shape not in fitting:
            fitting.append(shape)
    return fitting


def _check_fits(shape: TileShape, profile: DeviceProfile, support: int, do_w: bool,
                real_bytes: int = 8) -> None:
    """ValueError where ``shape`` is not a tile this device and kernel run
    (the GPU kernel's work-group and local memory at ``real_bytes`` a real:
    double, the larger, unless the precision is known)."""
    shape.check(support)
    shape.check_device(profile)
    if not shape.vector:
        check_lane_tile(shape, profile, support, do_w, real_bytes)


def cached_tiles(profile: DeviceProfile, support: int, precision: object, do_w: bool
                 ) -> TileShape | None:
    """The tile measured fastest on this device (:func:`store_tiles`), or None.

    An entry that is not a tile this device and kernel run correctly
    (malformed, hand-edited, or stored by a version with looser rules) gives
    one :class:`~clgrid.core.tuning.cache.TuningCacheWarning` and None: a
    cache saves time, it must not fail a run or change its result."""
    def parse(entry: dict) -> TileShape:
        shape = TileShape.from_dict(entry.get("tiles"))
        _check_fits(shape, profile, support, do_w, np.dtype(precision).itemsize)
        return shape
    return cached_value(KIND, profile, tile_key(support, precision, do_w), parse)


def store_tiles(profile: DeviceProfile, support: int, precision: object, do_w: bool,
                seconds: dict[TileShape, float]) -> TileShape:
    """Record the seconds each tile took; returns (and caches) the fastest."""
    timed = {shape: float(value) for shape, value in seconds.items() if np.isfinite(value)}
    if not timed:
        raise ValueError("no finite tile time to store")
    winner = min(timed, key=timed.get)
    store_entry(KIND, profile, tile_key(support, precision, do_w), {
        "tiles": dataclasses.asdict(winner), "seconds": timed[winner],
        "candidates": {repr(shape): value for shape, value in timed.items()},
        "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")})
    return winner


__all__ = ["KIND", "cached_tiles", "store_tiles", "tile_candidates", "tile_key"]

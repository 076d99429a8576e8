"""Strategy choice and launch geometry of :class:`clgrid.Gridder`, with reasons.

Four gridding strategies share one table layout; the first three share one
host uv preparation (:mod:`clgrid.gridders.uvprep`):

``'scatter'``
    Romein/Merry work distribution with register accumulation and float
    atomics for the flushes (``templates/gridder.cl.mako``).  Best where
    float atomics are native and cheap: GPUs.
``'tiled'``
    Atomic-free: records bucket-sorted into tiles, one work-group per tile
    accumulating in local memory (``templates/gridder_tiled.cl.mako``,
    :mod:`clgrid.gridders.tiled`).  Best where atomics are slow and caches large:
    CPUs, and GPUs without native float atomics.
``'image'``
    The scatter kernel with the separable GCF held in an OpenCL image and
    sampled with hardware linear interpolation
    (``templates/gridder_image.cl.mako``, :mod:`clgrid.gridders.image_gcf`): fewer
    stored samples, interpolated rather than nearest values, so its result
    differs from the table strategies by the interpolation (see
    ``docs/dispatch.md``).  Never chosen by ``'auto'`` unless the tuning
    cache holds a measurement where it won on this device.
``'core'``
    The gridding core (:mod:`clgrid.core.table`, :mod:`clgrid.gridders.core_strategy`):
    set points on the device and no host pass over the visibilities, with
    one of two spreads (``core_method``): ``'tiles'``, output-owned tiles
    with the tables' weights (``templates/core_spread.cl.mako``), no float
    atomics, support <= 33 (64 on CPUs with the vector tile); or ``'register'``, Romein/Merry register
    accumulation over points sorted by cell, float atomics at flushes
    (``templates/core_spread_register.cl.mako``, any support).  Without fp64
    the positions are float-float and the tiles' sums compensated floats.

With ``deterministic=True`` only the atomic-free strategies qualify: the
scatter and image strategies add into the grid with float atomics, whose
order (and so the last bits of the sums) varies run to run.  ``'auto'``
then picks ``'core'`` on GPUs (support <= 33) and ``'tiled'``
elsewhere, which bins its records in record order in that mode
(:class:`clgrid.gridders.tiled.TiledEngine`; on CPUs its blocked binning
costs nothing, docs/determinism.md).

:func:`choose` is a pure function of a :class:`~clgrid.device.profiles.DeviceProfile`
(real or fake) and the gridder's configuration, so that the choice can be
tested and explained (``clgrid devices --explain``) without running kernels.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..core.plan import TileShape
from ..core.table import (TableGrid, cpu_vector_tiles, max_table_support, staging_bytes,
                          table_tiles)
from .params import GridderParams, ImageParams, default_params
from .tiled import TILE_SIZES, TiledParams, fits_local

STRATEGIES = ("auto", "scatter", "tiled", "image", "core")
#: Spreads of the core strategy (its ``core_method``).
CORE_METHODS = ("tiles", "register")
#: Strategies that add without float atomics (deterministic=True).
ATOMIC_FREE = ("tiled", "core")
#: Work-items per group the GPU strategies aim for (8 warps of 32, 4 wavefronts of 64).
GPU_TARGET_WG = 256
#: Tile edge on CPUs: a 32 x 32 quad-polarisation float32 tile is 32 KiB, an L1/L2-sized block.
CPU_TILE = 32
GPU_TILE = 32
#: Smallest tile worth the sort: below it the duplication of footprints dominates.
MIN_TILE = 16
_TILED_BATCH = 64


@dataclasses.dataclass(frozen=True)
class Choice:
    """What :func:`choose` decided, with the reasons, for display and tests."""

    strategy: str
    scatter: GridderParams | None = None
    tiled: TiledParams | None = None
    image: ImageParams | None = None
    reasons: tuple[str, ...] = ()
    core: TileShape | None = None
    core_method: str | None = None

    def describe(self) -> str:
        """One line: strategy, geometry and why."""
        geometry = {"scatter": self.scatter, "tiled": self.tiled, "image": self.image,
                    "core": self.core or self.core_method}.get(self.strategy)
        return f"{self.strategy} {geometry}: " + "; ".join(self.reasons)


def _has_native_atomics(profile) -> bool:
    return profile.atomic_f32 in ("native-ptx", "native-cl")


def _wg_limit(profile) -> int:
    limit = int(profile.max_work_group_size)
    if profile.max_work_item_sizes:
        limit = min(limit, int(profile.max_work_item_sizes[0]))
    return max(1, limit)


def tiled_params(profile, support: int, npol: int, complex_itemsize: int,
                 reasons: list[str] | None = None) -> TiledParams | None:
    """Tile geometry for this device, or None when no tile of at least
    :data:`MIN_TILE` cells fits its local memory or work-group limit."""
    reasons = [] if reasons is None else reasons
    is_gpu = profile.device_type == "gpu"
    preferred = GPU_TILE if is_gpu else CPU_TILE
    limit = _wg_limit(profile)
    for tile in sorted((t for t in TILE_SIZES if MIN_TILE <= t <= preferred), reverse=True):
        if tile > limit:
            continue
        rows = 1
        if is_gpu:  # enough work-items to hide latency, a multiple of the warp
            rows = max(1, min(tile, GPU_TARGET_WG // tile, limit // tile))
        for batch in (_TILED_BATCH, _TILED_BATCH // 4):
            params = TiledParams(tile, tile, rows, batch)
            if fits_local(params, profile, npol, complex_itemsize):
                if tile != preferred:
                    reasons.append(f"tile {tile} x {tile} (the preferred {preferred} does not "
                                   f"fit {profile.local_mem_bytes // 1024} KiB local memory "
                                   f"or work-group limit {limit})")
                return params
    reasons.append(f"no {MIN_TILE} x {MIN_TILE} tile of {npol} polarisations fits "
                   f"{profile.local_mem_bytes} B of local memory / work-group limit {limit}")
    return None


def choose(profile, support: int, npol: int = 1, precision: Any = np.float32, *,
           separable: bool = True, strategy: str = "auto", scatter_params=None,
           tuned: dict | None = None, deterministic: bool = False,
           core_method: str | None = None) -> Choice:
    """Pick strategy and launch geometry for one gridder configuration.

    Parameters
    ----------
    profile
        :class:`~clgrid.device.profiles.DeviceProfile` (real or fake).
    support, npol, precision, separable
        The gridder's configuration.
    strategy
        ``'auto'`` or a strategy to force.
    scatter_params
        Resolved :class:`GridderParams` for the scatter kernel (defaults
        from the profile when None).
    tuned
        A tuning-cache entry ``{"strategy": ..., "seconds": {...}}`` for
        this device and configuration, or None.
    deterministic
        Bitwise-reproducible grids wanted: ``'auto'`` picks the core
        strategy on GPUs that can run it and the tiled strategy elsewhere
        (whatever the tuning cache prefers).
    core_method
        The core strategy's spread, ``'tiles'`` or ``'register'``; None:
        :func:`core_method_for`.

    Raises
    ------
    ValueError
        Unknown strategy; float64 on a device without fp64; a forced
        strategy the device cannot run (images, local memory); a strategy
        with float atomics forced together with ``deterministic=True``, or
        ``deterministic=True`` where no tile fits.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    precision = np.dtype(precision)
    if precision == np.float64 and not profile.fp64:
        raise ValueError(f"{profile.device_name!r} has no double precision (fp64): "
                         "use precision=float32")
    complex_itemsize = 2 * precision.itemsize
    reasons: list[str] = []
    scatter = scatter_params or default_params(profile, support, npol)
    tile_notes: list[str] = []
    tiles = tiled_params(profile, support, npol, complex_itemsize, tile_notes)
    reasons += tile_notes
    image_ok, image_why = image_possible(profile, support, separable)

    if core_method not in (None,) + CORE_METHODS:
        raise ValueError(f"core_method must be one of {CORE_METHODS} or None, got "
                         f"{core_method!r}")
    if deterministic and core_method == "register":
        raise ValueError("deterministic=True needs the core's tile spread: core_method "
                         "'register' adds with float atomics in a varying order")
    method = core_method or core_method_for(profile, support, deterministic, npol)
    core_ok, core_why = core_possible(profile, support, precision, separable, method)
    if deterministic and strategy not in ("auto",) + ATOMIC_FREE:
        raise ValueError(f"deterministic=True needs an atomic-free strategy {ATOMIC_FREE}; "
                         f"{strategy!r} adds with float atomics in a varying order")
    if deterministic and strategy == "auto":
        if profile.device_type == "gpu" and core_ok:
            strategy = "core"
            reasons.append("deterministic=True on a GPU: core (device set points, "
                           "output-owned tiles, no float atomics)")
        elif core_ok and cpu_core_faster(profile, support, npol):
            strategy = "core"
            reasons.append("deterministic=True on a CPU: core (its tile spread, faster "
                           "than the tiled strategy for this table)")
        else:
            strategy = "tiled"
            why = "" if profile.device_type == "gpu" else f" on a {profile.device_type}"
            reasons.append(f"deterministic=True{why}: tiled, records binned in record order "
                           f"(no float atomics)" + (f"; core impossible: {core_why}"
                                                    if not core_ok else ""))
    elif strategy == "auto":
        strategy = _auto(profile, tiles, image_ok, tuned, reasons)
    else:
        reasons.append("forced by strategy=")
    if strategy == "tiled" and tiles is None:
        if deterministic:
            raise ValueError(f"deterministic=True needs the tiled strategy, impossible on "
                             f"{profile.device_name!r}: {tile_notes[-1]}")
        raise ValueError(f"tiled strategy impossible on {profile.device_name!r}: {tile_notes[-1]}")
    if strategy == "image" and not image_ok:
        raise ValueError(f"image strategy impossible on {profile.device_name!r}: {image_why}")
    if strategy == "core" and not core_ok:
        raise ValueError(f"core strategy impossible on {profile.device_name!r}: {core_why}")
    return Choice(strategy, scatter=scatter if strategy in ("scatter", "image") else None,
                  tiled=tiles if strategy == "tiled" else None,
                  image=ImageParams() if strategy == "image" else None,
                  reasons=tuple(reasons),
                  core=table_tiles(profile, support)
                  if strategy == "core" and method == "tiles" else None,
                  core_method=method if strategy == "core" else None)


#: Widest table for which CPUs default to the core strategy's lane tiles
#: (one polarisation; tables the vector tile takes go further): Intel CPU
#: runtime and PyPI's PoCL 3.0, 0.96 M visibilities, 1024^2
#: (benchmarks/cpu_table_core.py, 2026-11-25): 1.2-1.9x the tiled strategy at
#: W 4 and 8; at W 16 0.94x (Intel) and 1.3x (PoCL).
CPU_CORE_MAX_SUPPORT = 8


def cpu_vector_tile(profile, support: int) -> bool:
    """Whether the core's tile spread runs the CPU vector tile (CPUs whose
    compiler builds it, W <= 64: :func:`clgrid.core.table.table_tiles`)."""
    return cpu_vector_tiles(profile) and support <= max_table_support(profile)


def core_method_for(profile, support: int, deterministic: bool = False,
                    npol: int = 1) -> str:
    """The core strategy's spread when none is asked for: ``'tiles'`` where
    determinism is asked for, on CPUs for one polarisation or where the
    vector tile runs (Intel CPU runtime 2-11x the register spread,
    benchmarks/cpu_table_core.py), or where float atomics are not
    native and the tile spread fits (support <= 33); else ``'register'`` (on
    the H200 1.1-3.7x the scatter strategy's visibility rate and 8-27x the
    tile spread's, benchmarks/RESULTS.md)."""
    if deterministic:
        return "tiles"
    if support > max_table_support(profile):
        return "register"
    if profile.device_type == "cpu" and (npol == 1 or cpu_vector_tile(profile, support)):
        return "tiles"
    return "register" if _has_native_atomics(profile) else "tiles"


def core_possible(profile, support: int, precision: Any = np.float32,
                  separable: bool = True, method: str = "tiles") -> tuple[bool, str]:
    """Whether the core strategy can run with spread ``method``, and if not why
    (without fp64 both run: positions in float-float, sums compensated)."""
    if method == "register":
        return True, ""
    if support > max_table_support(profile):
        return False, (f"support {support}: the core's tiles take support <= "
                       f"{max_table_support(profile)} here")
    tiles = table_tiles(profile, support)
    if tiles.vector:   # a private tile, no local memory
        return True, ""
    # complex tables: the most local memory a table of this kind can need
    grid = TableGrid(2, 2, 1.0, support, 1, 1, 0.0, separable, False, True, np.dtype(precision))
    need = staging_bytes(grid, tiles)
    if need > profile.local_mem_bytes:
        return False, (f"its {tiles.tile_u}x{tiles.lanes} tile needs {need} B of local memory, "
                       f"the device has {profile.local_mem_bytes}")
    return True, ""


def _auto(profile, tiles, image_ok, tuned, reasons: list[str]) -> str:
    if tuned and tuned.get("strategy") in ("scatter", "tiled", "image"):
        measured = tuned["strategy"]
        if (measured == "tiled" and tiles is None) or (measured == "image" and not image_ok):
            reasons.append(f"tuning cache prefers {measured}, which this device cannot run")
        else:
            reasons.append(f"tuning cache: {measured} measured fastest on this device "
                           f"({_format_seconds(tuned.get('seconds', {}))})")
            return measured
    if profile.device_type in ("gpu", "accelerator") and _has_native_atomics(profile):
        reasons.append(f"{profile.device_type} with native float atomics "
                       f"({profile.atomic_f32}): scatter with register accumulation")
        return "scatter"
    if tiles is None:
        reasons.append(f"tiled impossible, so scatter with {profile.atomic_f32} atomics")
        return "scatter"
    if profile.device_type == "cpu":
        reasons.append("cpu: atomics are slow and caches large, so tiled atomic-free "
                       f"({profile.atomic_f32} atomics not needed)")
    else:
        reasons.append(f"{profile.device_type} without native float atomics "
                       f"({profile.atomic_f32}): tiled atomic-free")
    return "tiled"


def image_possible(profile, support: int, separable: bool) -> tuple[bool, str]:
    """Whether the image-GCF strategy can run, and if not why."""
    if not profile.image_support:
        return False, "the device has no image support"
    if not separable:
        return False, "the image strategy holds separable GCFs only (full W tables: scatter/tiled)"
    if profile.image2d_max[0] < support * 2 + 1:
        return False, f"image width limit {profile.image2d_max[0]} too small"
    return True, ""


def _format_seconds(seconds: dict) -> str:
    return ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(seconds.items())) or "no times"


def core_by_default(profile, support: int, precision: Any = np.float32,
                    separable: bool = True, npol: int = 1) -> bool:
    """Whether ``Gridder(strategy='auto')`` with ``deterministic`` None (the
    default) or False runs the core strategy, with the spread of
    :func:`core_method_for`: on GPUs (register accumulation where
    float atomics are native: on the H200 faster than the scatter strategy
    at every support, and its set points are on the device), and on CPUs
    where its tile spread (bitwise reproducible like the tiled strategy it
    replaces) is the faster: where the vector tile runs (W <= 64, any table:
    5-11x the tiled strategy on the Intel CPU runtime, any number of
    polarisations) and one polarisation up to :data:`CPU_CORE_MAX_SUPPORT`
    (lane tiles, 1.2-1.9x)."""
    method = core_method_for(profile, support, npol=npol)
    if profile.device_type == "gpu":
        return core_possible(profile, support, precision, separable, method)[0]
    # where cpu_core_faster holds, core_method_for gives the tile spread
    return (cpu_core_faster(profile, support, npol)
            and core_possible(profile, support, precision, separable, method)[0])


def cpu_core_faster(profile, support: int, npol: int) -> bool:
    """CPUs where the core's tile spread beats the tiled strategy (both
    deterministic): where the vector tile runs, and one polarisation up to
    :data:`CPU_CORE_MAX_SUPPORT`."""
    return profile.device_type == "cpu" and (
        cpu_vector_tile(profile, support)
        or (npol == 1 and support <= CPU_CORE_MAX_SUPPORT))


def core_default(choice: Choice) -> Choice:
    """A ``strategy='core'`` choice made because ``deterministic=None``
    (:func:`core_by_default`), with that reason."""
    return dataclasses.replace(choice, reasons=(
        "deterministic=None: the core strategy (device set points), "
        f"spread {choice.core_method!r} (core_method_for)",))


def explain(profile, support: int = 32, npol: int = 4, precision: Any = np.float32) -> dict:
    """One row for ``clgrid devices --explain``: what ``'auto'`` picks and why."""
    row = {"id": f"{profile.platform_index}:{profile.device_index}",
           "device": f"{profile.platform_key}: {profile.device_name}"}
    if not profile.usable:
        return dict(row, strategy="-", geometry="-", why=f"unusable: {profile.build_problem}")
    try:
        if core_by_default(profile, support, precision, npol=npol):
            choice = core_default(choose(profile, support, npol, precision, strategy="core"))
        else:
            from .tunecache import cached_strategy
            tuned = cached_strategy(profile, support, npol, precision, True)
            choice = choose(profile, support, npol, precision, tuned=tuned)
    except ValueError as error:
        return dict(row, strategy="-", geometry="-", why=str(error))
    geometry = {"scatter": choice.scatter, "tiled": choice.tiled,
                "image": choice.image, "core": choice.core}[choice.strategy]
    if choice.core_method == "register":
        from ..core.register import default_register_params
        return dict(row, strategy="core register",
                    geometry=_short(default_register_params(profile, support, npol, True)),
                    why="; ".join(choice.reasons))
    return dict(row, strategy=choice.strategy, geometry=_short(geometry),
                why="; ".join(choice.reasons))


def _short(params) -> str:
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(params).items())


__all__ = ["ATOMIC_FREE", "CORE_METHODS", "Choice", "ImageParams", "STRATEGIES", "choose",
           "CPU_CORE_MAX_SUPPORT", "core_by_default", "core_default", "core_method_for",
           "cpu_core_faster", "cpu_vector_tile",
           "core_possible", "explain", "image_possible", "tiled_params"]

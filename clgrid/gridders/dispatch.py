"""Which spread of the gridding core a :class:`clgrid.Gridder` runs, with reasons.

The table gridders run on the gridding core (:mod:`clgrid.core.table`,
:func:`clgrid.core.strategies.table_engine`): set points on the device, no host
pass over the visibilities, and one of two spreads (``method``):

``'tiles'``
    Output-owned tiles with the tables' weights
    (``templates/core_spread.cl.mako``): no float atomics, the same bits
    call after call.  Any support whose staging fits the local memory (one
    point at a time at the least: ``TileShape.batch``); the
    default up to 33 (64 on CPUs whose compiler builds the vector tile,
    ``spread_vector``), where a tile reads only its nearest neighbours'
    bins; wider tables read more of them and grid far slower than the
    register spread.  Without fp64 the positions are
    float-float and the tiles' sums compensated floats.
``'register'``
    Romein (2012)/Merry (2016) register accumulation over points sorted by
    cell, with float atomics where a work-item's block moves
    (``templates/core_spread_register.cl.mako``, :mod:`clgrid.core.register`):
    any support, the fastest where float atomics are native (GPUs); the
    last bits vary run to run.  With ``deterministic=True`` (float32 grids,
    devices with 64-bit integer atomics) its flushes add 64-bit fixed point
    instead (:attr:`Choice.fixed_point`, ``templates/fixed_point.cl.mako``):
    integer sums in any order, the same bits every run, wherever the
    register spread is the faster of the two.

:func:`choose` is a pure function of a :class:`~clgrid.device.profiles.DeviceProfile`
(real or fake) and the gridder's configuration, so that the choice can be
tested and explained (``clgrid devices --explain``) without running kernels.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..core.plan import TileShape
from ..core.register import fixed_point_possible
from ..core.table import (GCF_READS, TableGrid, cpu_vector_tiles, fit_staging,
                          gcf_image_fits, max_table_support, staging_bytes, table_tiles)

#: Spreads of the gridding core (a Gridder's ``method``).
METHODS = ("tiles", "register")


@dataclasses.dataclass(frozen=True)
class Choice:
    """What :func:`choose` decided, with the reasons, for display and tests."""

    method: str
    tiles: TileShape | None = None
    reasons: tuple[str, ...] = ()
    #: The register spread's flushes in 64-bit fixed point (deterministic).
    fixed_point: bool = False

    @property
    def deterministic(self) -> bool:
        """Whether this spread gives the same bits every call."""
        return self.method == "tiles" or self.fixed_point

    def describe(self) -> str:
        """One line: spread, geometry and why."""
        geometry = f" {self.tiles}" if self.tiles is not None else ""
        fixed = " fixed-point" if self.fixed_point else ""
        return f"{self.method}{fixed}{geometry}: " + "; ".join(self.reasons)


def _has_native_atomics(profile) -> bool:
    return profile.atomic_f32 in ("native-ptx", "native-cl")


def cpu_vector_tile(profile, support: int) -> bool:
    """Whether the tile spread runs the CPU vector tile (CPUs whose compiler
    builds it, W <= 64: :func:`clgrid.core.table.table_tiles`)."""
    return cpu_vector_tiles(profile) and support <= max_table_support(profile)


def method_for(profile, support: int, deterministic: bool = False, npol: int = 1) -> str:
    """The spread when none is asked for: ``'tiles'`` where determinism is
    asked for, on CPUs (the vector tile: Intel CPU runtime 2-11x the register
    spread, benchmarks/cpu_table_core.py; lane tiles elsewhere), or where
    float atomics are not native; ``'register'`` where float atomics are
    native (on the H200 8-27x the tile spread's rate, benchmarks/RESULTS.md)
    and wherever the support is wider than the tiles take."""
    if deterministic:
        return "tiles"
    if support > max_table_support(profile):
        return "register"
    if profile.device_type == "cpu":
        return "tiles"
    return "register" if _has_native_atomics(profile) else "tiles"


def tiles_possible(profile, support: int, precision: Any = np.float32,
                   separable: bool = True) -> tuple[bool, str]:
    """Whether the tile spread can run, and if not why (the register spread
    runs everywhere): its tile's staging must fit the local memory, with
    as few as one point staged at a time (:func:`clgrid.core.table.fit_staging`)."""
    tiles = table_tiles(profile, support)
    if tiles.vector:   # a private tile, no local memory
        return True, ""
    # complex tables: the most local memory a table of this kind can need
    grid = TableGrid(2, 2, 1.0, support, 1, 1, 0.0, separable, False, True, np.dtype(precision))
    tiles = fit_staging(grid, tiles, profile)
    need = staging_bytes(grid, tiles)
    if need > profile.local_mem_bytes:
        return False, (f"its {tiles.tile_u}x{tiles.lanes} tile needs {need} B of local memory "
                       f"staging {tiles.staged} points at a time, the device has "
                       f"{profile.local_mem_bytes}")
    return True, ""


def choose(profile, support: int, npol: int = 1, precision: Any = np.float32, *,
           separable: bool = True, deterministic: bool = False,
           method: str | None = None) -> Choice:
    """Pick the core's spread (and its tile) for one gridder configuration.

    Parameters
    ----------
    profile
        :class:`~clgrid.device.profiles.DeviceProfile` (real or fake).
    support, npol, precision, separable
        The gridder's configuration.
    deterministic
        Bitwise-reproducible grids wanted: the register spread with
        fixed-point flushes where the register spread is the faster and
        :func:`clgrid.core.register.fixed_point_possible` (float32, 64-bit
        integer atomics), else the tile spread (at any support whose
        staging fits the local memory), or an error where neither can run.
    method
        ``'tiles'`` or ``'register'`` to force; None: :func:`method_for`,
        falling back to ``'register'`` where the tiles do not fit.

    Raises
    ------
    ValueError
        Unknown method; float64 on a device without fp64; ``'register'``
        with ``deterministic=True`` where fixed point is impossible; the
        tile spread forced (or ``deterministic=True``) where it cannot run.
    """
    if method not in (None,) + METHODS:
        raise ValueError(f"method must be one of {METHODS} or None, got {method!r}")
    if np.dtype(precision) == np.float64 and not profile.fp64:
        raise ValueError(f"{profile.device_name!r} has no double precision (fp64): "
                         "use precision=float32")
    fixed_ok, fixed_why = fixed_point_possible(profile, precision)
    if deterministic and method == "register" and not fixed_ok:
        raise ValueError(f"deterministic=True with method 'register' needs fixed-point sums: "
                         f"{fixed_why}")
    tiles_ok, tiles_why = tiles_possible(profile, support, precision, separable)
    reasons = []
    fastest = method_for(profile, support, npol=npol)
    if fastest == "tiles" and not tiles_ok:
        fastest = "register"
    if method is not None:
        reasons.append("forced by method=")
    elif deterministic and fastest == "register" and fixed_ok:
        method = "register"
        reasons.append("deterministic=True: register accumulation (the faster spread here) "
                       "with 64-bit fixed-point flushes, integer sums in any order")
    elif deterministic:
        method = "tiles"
        if fastest == "register":
            reasons.append(f"no fixed-point register sums ({fixed_why})")
        reasons.append("deterministic=True: output-owned tiles, no float atomics" + (
            f" (support {support}: each tile reads its bins and "
            f"{table_tiles(profile, support).reach(support)} neighbours' per axis, slower than "
            "register accumulation)" if support > max_table_support(profile) else ""))
    else:
        method = method_for(profile, support, npol=npol)
        if method == "tiles" and not tiles_ok:
            method = "register"
            reasons.append(f"tiles impossible ({tiles_why}): register accumulation")
        elif method == "tiles" and profile.device_type == "cpu":
            kind = "the vector tile" if cpu_vector_tile(profile, support) else "lane tiles"
            reasons.append(f"cpu: output-owned tiles ({kind}), no float atomics")
        elif method == "tiles":
            reasons.append(f"{profile.device_type} without native float atomics "
                           f"({profile.atomic_f32}): output-owned tiles")
        elif support > max_table_support(profile):
            reasons.append(f"support {support} wider than the tiles take "
                           f"({max_table_support(profile)}): register accumulation")
        else:
            reasons.append(f"{profile.device_type} with native float atomics "
                           f"({profile.atomic_f32}): register accumulation")
    if method == "tiles" and not tiles_ok:
        need = "deterministic=True needs" if deterministic else "method 'tiles' needs"
        raise ValueError(f"{need} the tile spread, impossible on {profile.device_name!r}: "
                         f"{tiles_why}")
    return Choice(method, table_tiles(profile, support) if method == "tiles" else None,
                  tuple(reasons), fixed_point=bool(deterministic) and method == "register")


def choose_gcf_read(profile, support: int, oversample: int, w_planes: int = 1,
                    precision: Any = np.float32, *, separable: bool = True,
                    method: str = "register", gcf_read: str | None = None,
                    cached: str | None = None) -> tuple[str, str]:
    """How the register kernels read the GCF table, and why: ``(gcf_read,
    reason)``.

    Parameters
    ----------
    profile
        :class:`~clgrid.device.profiles.DeviceProfile` (real or fake).
    support, oversample, w_planes, precision, separable
        The table and the grid's precision.
    method
        The spread the gridder runs; a Degridder: ``'register'`` where it
        degrids by register blocks, ``'records'`` where a work-item (or
        group) takes a record.  Only the register kernels read images.
    gcf_read
        ``'buffer'``, ``'image'`` or ``'image-linear'`` to force; None: the
        device's: ``'buffer'``, unless ``cached`` says ``'image'`` was
        measured faster on this device.  On an H100 (RESULTS, "GCF read
        paths on an NVIDIA H100", 2026-11-26) image reads ran 1.1-5x slower
        than the buffer for every table and support (full W-projection
        tables included, where the census had found the reads
        latency-bound); CPUs have no texture units (the sampler is software
        there).  Never ``'image-linear'`` unasked: it changes the weights
        (interpolated).
    cached
        What ``clgrid tune table`` measured the faster here (``'buffer'`` or
        ``'image'``, :func:`clgrid.core.tuning.register.cached_gcf_read`):
        taken where ``gcf_read`` is None, the register kernels run and the
        device can hold the image.

    Raises
    ------
    ValueError
        An unknown ``gcf_read``; an image asked for where the device cannot
        hold the table (no image support, float64, too large) or with the
        tile spread.
    """
    if gcf_read is not None and gcf_read not in GCF_READS:
        raise ValueError(f"gcf_read must be one of {GCF_READS} or None, got {gcf_read!r}")
    fits, why = gcf_image_fits(profile, support, oversample, w_planes, separable, precision)
    if gcf_read == "buffer":
        return "buffer", "forced by gcf_read="
    if gcf_read is not None:
        if method != "register":
            raise ValueError(f"gcf_read={gcf_read!r} reads the table in the register kernels; "
                             "this one runs the tile kernels (method='tiles', deterministic=True "
                             "where the tiles run, or a Degridder's tiles=): use gcf_read='buffer'")
        if not fits:
            raise ValueError(f"gcf_read={gcf_read!r} impossible on {profile.device_name!r}: "
                             f"{why}")
        return gcf_read, "forced by gcf_read="
    if method == "tiles":
        return "buffer", "the tile spread stages the table's weights in local memory"
    if method != "register":
        return "buffer", "records degridded one footprint a work-item or group read buffers"
    if cached in ("buffer", "image") and fits:
        return cached, "the tuning cache: clgrid tune table measured it the faster here"
    if profile.device_type != "gpu" or profile.is_simulator:
        kind = "simulator" if profile.is_simulator else profile.device_type
        return "buffer", f"{kind}: no texture units, the sampler runs in software"
    if not fits:
        return "buffer", why
    # measured, not guessed: on an H100 the sampler's reads cost more than the
    # register kernels' L1-cached buffer reads at every support (image 0.2-0.9x
    # the buffer's speed, full W tables included); clgrid tune table can still find
    # a device where images win, and then `cached` above takes it
    return "buffer", ("gpu: the buffer's reads measured faster than the sampler's "
                      "(H100, 2026-11-26); clgrid tune table times both")


#: Oversampling (and w planes of a full table) of the tables ``clgrid
#: devices --explain`` asks about.
EXPLAIN_OVERSAMPLE = 8
EXPLAIN_W_PLANES = 32


def explain(profile, support: int = 32, npol: int = 4, precision: Any = np.float32) -> dict:
    """One row for ``clgrid devices --explain``: what a Gridder runs and why."""
    row = {"id": f"{profile.platform_index}:{profile.device_index}",
           "device": f"{profile.platform_key}: {profile.device_name}"}
    if not profile.usable:
        return dict(row, method="-", geometry="-", why=f"unusable: {profile.build_problem}",
                    gcf_read="-", degrid="-", deterministic="-")
    try:
        choice = choose(profile, support, npol, precision)
    except ValueError as error:
        return dict(row, method="-", geometry="-", why=str(error), gcf_read="-", degrid="-",
                    deterministic="-")
    if choice.method == "register":
        from ..core.register import default_register_params
        geometry = default_register_params(profile, support, npol, True)
    else:
        geometry = choice.tiles
    reads = [choose_gcf_read(profile, support, EXPLAIN_OVERSAMPLE, planes, precision,
                             separable=separable, method=choice.method)
             for separable, planes in ((True, 1), (False, EXPLAIN_W_PLANES))]
    if reads[0][0] == reads[1][0]:
        gcf_read = f"{reads[1][0]} ({reads[1][1]})"
    else:
        gcf_read = f"separable {reads[0][0]}, full {reads[1][0]} ({reads[1][1]})"
    return dict(row, method=choice.method, geometry=_short(geometry),
                why="; ".join(choice.reasons), gcf_read=gcf_read,
                degrid=degrid_choice(profile, support, npol),
                deterministic=deterministic_choice(profile, support, npol, precision))


def deterministic_choice(profile, support: int, npol: int, precision: Any = np.float32) -> str:
    """What ``Gridder(deterministic=True)`` runs, in words."""
    try:
        choice = choose(profile, support, npol, precision, deterministic=True)
    except ValueError as error:
        return f"impossible: {error}"
    if choice.fixed_point:
        return "register, 64-bit fixed-point flushes"
    from ..core.spread import tile_words
    return f"tiles, {tile_words(choice.tiles)}"


def degrid_choice(profile, support: int, npol: int) -> str:
    """What a Degridder of real separable tables runs on records, in words
    (and how it reads the table)."""
    from ..core.register import default_degrid_params, degrid_by_register
    from ..core.table import default_record_kernels
    if degrid_by_register(profile, support, separable=True):
        p = default_degrid_params(profile, support, npol, True, True)
        read = choose_gcf_read(profile, support, EXPLAIN_OVERSAMPLE)[0]
        full = choose_gcf_read(profile, support, EXPLAIN_OVERSAMPLE, EXPLAIN_W_PLANES,
                               separable=False)[0]
        return (f"register blocks {p.block_u}x{p.block_v}, {p.pols(npol)} pol, "
                f"groups of {p.wg_size}, gcf {read}" + (f" (full: {full})" if full != read
                                                        else ""))
    group, vector = default_record_kernels(profile, support)
    if group:
        return f"a work-group of {group} a record"
    return "a work-item a record" + (", rows as vectors" if vector else "")


def _short(params) -> str:
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(params).items())


__all__ = ["Choice", "EXPLAIN_OVERSAMPLE", "EXPLAIN_W_PLANES", "METHODS", "choose", "choose_gcf_read", "cpu_vector_tile", "degrid_choice", "deterministic_choice", "explain",
           "method_for",
           "tiles_possible"]

"""The register spread's geometry per device: candidates and the cache's
``table`` section.

:func:`candidates` lists the :class:`~clgrid.core.register.RegisterParams`
worth timing (Merry's coarsening 1, 2, 4, 8 per axis within the register
budget, work-group sizes, records per group);
:func:`clgrid.tuning.table.tune` (``clgrid tune table``) times them and
stores the fastest, with the faster GCF read path, by
:func:`store_register_params`, keyed by parameter set (npol, precision,
table kind, support bucket).  ``Gridder(register_params='auto')`` reads
:func:`cached_register_params` and :func:`cached_gcf_read`; it never tunes
on its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np

from ...device.profiles import DeviceProfile
from ..register import MAX_REGISTER_SUMS, REGISTER_BLOCKS, RegisterParams
from .cache import cached_value, store_entry

#: The cache section of the register spread.
KIND = "table"
#: GCF read paths the tuner compares (image-linear changes the weights: never cached).
TUNED_GCF_READS = ("buffer", "image")
#: Largest value a cached register-spread field may hold (the kernels take
#: them as 32-bit ints; the spread clamps work-groups and staging itself).
_MAX_FIELD = 2 ** 31 - 1


def candidates(profile: DeviceProfile, npol: int, quick: bool = False) -> list[RegisterParams]:
    """Search space: coarsening shapes no more than 2:1 (Merry's finding)
    within :data:`~clgrid.core.register.MAX_REGISTER_SUMS`, all or some of
    the polarisations a work-item (``pol_block``), work-group sizes within
    the device limit, records per group."""
    npol = max(int(npol), 1)
    pol_blocks = [0] + [p for p in ((2,) if quick else (1, 2)) if p < npol and npol % p == 0]
    shapes = [(u, v, p) for u, v, p in itertools.product(REGISTER_BLOCKS, REGISTER_BLOCKS,
                                                         pol_blocks)
              if u * v * (p or npol) <= MAX_REGISTER_SUMS and max(u, v) <= 2 * min(u, v)]
    groups = [g for g in (32, 64, 128, 256) if g <= profile.max_work_group_size]
    per_group = (2048,) if quick else (1024, 2048, 4096)
    if quick:
        shapes = [s for s in shapes if s[0] * s[1] in (1, 4, 16)]
        groups = groups[-2:]
    return [RegisterParams(u, v, g, 64, n, p)
            for (u, v, p), g, n in itertools.product(shapes, groups, per_group)]


def support_bucket(support: int) -> int:
    """Supports tuned together: the next power of two."""
    return 1 << max(0, (int(support) - 1).bit_length())


def parameter_key(npol: int, precision: object, separable: bool, support: int) -> str:
    """Cache key of one parameter set (npol, precision, table kind, support bucket)."""
    return (f"register|npol={npol}|{np.dtype(precision).name}|"
            f"{'separable' if separable else 'full'}|support<={support_bucket(support)}")


def cached_register_params(profile: DeviceProfile, support: int, npol: int, precision: object,
                           separable: bool) -> RegisterParams | None:
    """Tuned register-spread geometry from the cache, else None (the
    spread's defaults, :func:`clgrid.core.register.default_register_params`).
    A malformed entry gives one
    :class:`~clgrid.core.tuning.cache.TuningCacheWarning` and None."""
    return cached_value(KIND, profile, parameter_key(npol, precision, separable, support),
                        lambda entry: _register_params_of(entry.get("params"), npol))


def _register_params_of(fields: object, npol: int) -> RegisterParams:
    """A validated :class:`RegisterParams` from a cache entry's fields."""
    if not isinstance(fields, dict):
        raise TypeError(f"params must be an object of RegisterParams fields, got "
                        f"{type(fields).__name__}")
    known = {field.name for field in dataclasses.fields(RegisterParams)}
    if set(fields) - known:
        raise TypeError(f"unknown fields {sorted(set(map(str, fields)) - known)}")
    for name, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {value!r}")
        if not 0 <= value <= _MAX_FIELD:
            raise ValueError(f"{name} must be in 0 .. {_MAX_FIELD}, got {value}")
    params = RegisterParams(**fields)
    params.validate(npol)
    return params


def cached_gcf_read(profile: DeviceProfile, support: int, npol: int, precision: object,
                    separable: bool) -> str | None:
    """The GCF read path ``clgrid tune table`` measured the faster for this
    device and parameter set (``'buffer'`` or ``'image'``), else None.  A
    malformed value gives one
    :class:`~clgrid.core.tuning.cache.TuningCacheWarning` and None."""
    return cached_value(KIND, profile, parameter_key(npol, precision, separable, support),
                        _gcf_read_of)


def _gcf_read_of(entry: dict) -> str | None:
    """The entry's GCF read path; None where none was timed (no image)."""
    if "gcf_read" not in entry:
        return None
    if entry["gcf_read"] not in TUNED_GCF_READS:
        raise ValueError(f"gcf_read must be one of {TUNED_GCF_READS}, got "
                         f"{entry['gcf_read']!r}")
    return entry["gcf_read"]


def store_register_params(profile: DeviceProfile, support: int, npol: int, precision: object,
                          separable: bool, params: RegisterParams, seconds: float,
                          gcf_read: str | None = None,
                          gcf_read_seconds: dict[str, float] | None = None) -> None:
    """Record the fastest geometry measured for this device and parameter set
    (and, where both were timed, the faster GCF read path: ``'buffer'`` or
    ``'image'``, with each one's seconds)."""
    entry = {"params": params.__dict__, "seconds": float(seconds),
             "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    if gcf_read is not None:
        entry["gcf_read"] = gcf_read
        entry["gcf_read_seconds"] = {k: float(v) for k, v in (gcf_read_seconds or {}).items()}
    store_entry(KIND, profile, parameter_key(npol, precision, separable, support), entry)


__all__ = ["KIND", "TUNED_GCF_READS", "cached_gcf_read", "cached_register_params",
           "candidates", "parameter_key", "store_register_params", "support_bucket"]

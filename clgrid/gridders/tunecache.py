"""The per-device autotune cache of the table gridders (read and store).

Entries of clgrid's autotune cache (:mod:`clgrid.device.tunecache`: one
JSON file per user, keyed by device), one per parameter set: the register
spread's launch geometry (:class:`clgrid.core.register.RegisterParams`) and the
faster GCF read path (buffer or image) with it.
:mod:`clgrid.gridders.tuning` (``clgrid tune``) fills them;
``Gridder(register_params='auto')`` reads them.  It imports no gridder, so
the readers do not import the tuner.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..core.register import RegisterParams
from ..device.tunecache import cache_path, cached_entry, store_entry, warn_ignored


def support_bucket(support: int) -> int:
    """Supports tuned together: the next power of two."""
    return 1 << max(0, (int(support) - 1).bit_length())


def parameter_key(npol: int, precision, separable: bool, support: int) -> str:
    return (f"register|npol={npol}|{np.dtype(precision).name}|"
            f"{'separable' if separable else 'full'}|support<={support_bucket(support)}")


#: Largest value a cached register-spread field may hold (the kernels take
#: them as 32-bit ints; the spread clamps work-groups and staging itself).
_MAX_FIELD = 2 ** 31 - 1


def cached_register_params(profile, support: int, npol: int, precision, separable: bool
                           ) -> RegisterParams | None:
    """Tuned register-spread geometry from the cache, else None (the
    spread's defaults, :func:`clgrid.core.register.default_register_params`).
    A malformed entry gives one
    :class:`~clgrid.device.tunecache.TuningCacheWarning` and None."""
    key = parameter_key(npol, precision, separable, support)
    entry = cached_entry(profile, key)
    if entry is None:
        return None
    try:
        return _register_params_of(entry.get("params"), npol)
    except (TypeError, ValueError, OverflowError) as error:
        warn_ignored(f"entry {key!r}", str(error))
        return None


def _register_params_of(fields, npol: int) -> RegisterParams:
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


def store_register_params(profile, support: int, npol: int, precision, separable: bool,
                          params: RegisterParams, seconds: float,
                          gcf_read: str | None = None,
                          gcf_read_seconds: dict | None = None) -> None:
    """Record the fastest geometry measured for this device and parameter set
    (and, where both were timed, the faster GCF read path: ``'buffer'`` or
    ``'image'``, with each one's seconds)."""
    entry = {"params": params.__dict__, "seconds": float(seconds),
             "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    if gcf_read is not None:
        entry["gcf_read"] = gcf_read
        entry["gcf_read_seconds"] = {k: float(v) for k, v in (gcf_read_seconds or {}).items()}
    store_entry(profile, parameter_key(npol, precision, separable, support), entry)


#: GCF read paths the tuner compares (image-linear changes the weights: never cached).
TUNED_GCF_READS = ("buffer", "image")


def cached_gcf_read(profile, support: int, npol: int, precision, separable: bool
                    ) -> str | None:
    """The GCF read path ``clgrid tune`` measured the faster for this device
    and parameter set (``'buffer'`` or ``'image'``), else None.  A malformed
    value gives one :class:`~clgrid.device.tunecache.TuningCacheWarning`
    and None."""
    key = parameter_key(npol, precision, separable, support)
    entry = cached_entry(profile, key)
    if entry is None or "gcf_read" not in entry:
        return None
    if entry["gcf_read"] not in TUNED_GCF_READS:
        warn_ignored(f"entry {key!r}", f"gcf_read must be one of {TUNED_GCF_READS}, got "
                     f"{entry['gcf_read']!r}")
        return None
    return entry["gcf_read"]


__all__ = ["TUNED_GCF_READS", "cache_path", "cached_gcf_read", "cached_register_params",
           "parameter_key", "store_register_params", "support_bucket"]

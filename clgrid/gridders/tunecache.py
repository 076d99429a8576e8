"""The per-device autotune cache of the table gridders (read and store).

Entries of clgrid's autotune cache (:mod:`clgrid.device.tunecache`: one
JSON file per user, keyed by device), one per parameter set: the register
spread's launch geometry (:class:`clgrid.core.register.RegisterParams`).
:mod:`clgrid.gridders.tuning` (``clgrid tune``) fills them;
``Gridder(register_params='auto')`` reads them.  It imports no gridder, so
the readers do not import the tuner.
"""

from __future__ import annotations

import time

import numpy as np

from ..core.register import RegisterParams
from ..device.tunecache import cache_path, cached_entry, store_entry


def support_bucket(support: int) -> int:
    """Supports tuned together: the next power of two."""
    return 1 << max(0, (int(support) - 1).bit_length())


def parameter_key(npol: int, precision, separable: bool, support: int) -> str:
    return (f"register|npol={npol}|{np.dtype(precision).name}|"
            f"{'separable' if separable else 'full'}|support<={support_bucket(support)}")


def cached_register_params(profile, support: int, npol: int, precision, separable: bool
                           ) -> RegisterParams | None:
    """Tuned register-spread geometry from the cache, else None (the
    spread's defaults, :func:`clgrid.core.register.default_register_params`)."""
    entry = cached_entry(profile, parameter_key(npol, precision, separable, support))
    return RegisterParams(**entry["params"]) if entry else None


def store_register_params(profile, support: int, npol: int, precision, separable: bool,
                          params: RegisterParams, seconds: float) -> None:
    """Record the fastest geometry measured for this device and parameter set."""
    store_entry(profile, parameter_key(npol, precision, separable, support),
                {"params": params.__dict__, "seconds": float(seconds),
                 "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")})


__all__ = ["cache_path", "cached_register_params", "parameter_key", "store_register_params",
           "support_bucket"]

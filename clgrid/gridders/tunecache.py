"""The per-device autotune cache of the table gridders (read and store).

Entries of clgrid's autotune cache (:mod:`clgrid.device.tunecache`: one
JSON file per user, keyed by device), one per parameter set.
:mod:`clgrid.gridders.tuning` fills them; ``Gridder`` and
:func:`clgrid.gridders.dispatch.choose` read them.  It imports no gridder,
so the readers do not import the tuner.
"""

from __future__ import annotations

import time

import numpy as np

from ..device.tunecache import cache_path, load_cache, store_entry
from .params import GridderParams, default_params


def support_bucket(support: int) -> int:
    """Supports tuned together: the next power of two."""
    return 1 << max(0, (int(support) - 1).bit_length())


def parameter_key(npol: int, precision, separable: bool, support: int) -> str:
    return (f"npol={npol}|{np.dtype(precision).name}|"
            f"{'separable' if separable else 'full'}|support<={support_bucket(support)}")


_load = load_cache   # the names the tuner imports
_store = store_entry


def cached_params(profile, support: int, npol: int, precision, separable: bool
                  ) -> GridderParams:
    """Tuned parameters from the cache, else the profile's defaults."""
    entry = _load().get(profile.cache_key, {}).get(
        parameter_key(npol, precision, separable, support))
    if entry:
        return GridderParams(**entry["params"])
    return default_params(profile, support, npol)


def strategy_key(npol: int, precision, separable: bool, support: int) -> str:
    return "strategy|" + parameter_key(npol, precision, separable, support)


def cached_strategy(profile, support: int, npol: int, precision, separable: bool
                    ) -> dict | None:
    """A measured strategy winner ``{"strategy", "seconds"}`` for this device
    and configuration (stored by :func:`store_strategy`), or None."""
    return _load().get(profile.cache_key, {}).get(
        strategy_key(npol, precision, separable, support))


def store_strategy(profile, support: int, npol: int, precision, separable: bool,
                   seconds: dict[str, float]) -> str:
    """Record per-strategy times measured on this device; returns the winner.

    ``Gridder(strategy='auto')`` then uses the winner (the image strategy
    only this way: it is never picked without a measurement).
    """
    timed = {name: float(value) for name, value in seconds.items() if np.isfinite(value)}
    if not timed:
        raise ValueError("no finite strategy time to store")
    winner = min(timed, key=timed.get)
    _store(profile, strategy_key(npol, precision, separable, support),
           {"strategy": winner, "seconds": timed,
            "tuned_at": time.strftime("%Y-%m-%d %H:%M:%S")})
    return winner


__all__ = ["cache_path", "cached_params", "cached_strategy", "parameter_key", "store_strategy",
           "strategy_key", "support_bucket"]

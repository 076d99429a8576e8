"""The per-device autotune cache of the table gridders (read and store).

One JSON file under the user cache directory (``CLGRID_TUNING_CACHE``
overrides), keyed by device (:attr:`DeviceProfile.cache_key`) and by
parameter set.  :mod:`clgrid.gridders.tuning` fills it; ``Gridder`` and
:func:`clgrid.gridders.dispatch.choose` read it.  It imports no gridder, so
the readers do not import the tuner.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import platformdirs

from .params import GridderParams, default_params

_CACHE_VARIABLE = "CLGRID_TUNING_CACHE"


def cache_path() -> Path:
    """The tuning cache file (``CLGRID_TUNING_CACHE`` overrides)."""
    override = os.environ.get(_CACHE_VARIABLE)
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("clgrid")) / "gridder_tuning.json"


def support_bucket(support: int) -> int:
    """Supports tuned together: the next power of two."""
    return 1 << max(0, (int(support) - 1).bit_length())


def parameter_key(npol: int, precision, separable: bool, support: int) -> str:
    return (f"npol={npol}|{np.dtype(precision).name}|"
            f"{'separable' if separable else 'full'}|support<={support_bucket(support)}")


def _load() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


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


def _store(profile, key: str, entry: dict) -> None:
    path = cache_path()
    data = _load()
    data.setdefault(profile.cache_key, {})[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    temporary.replace(path)


__all__ = ["cache_path", "cached_params", "cached_strategy", "parameter_key", "store_strategy",
           "strategy_key", "support_bucket"]

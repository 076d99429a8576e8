"""clgrid's per-device autotune cache: one JSON file, read and written here.

The file lives under the user cache directory (``CLGRID_TUNING_CACHE``
overrides it) and maps a device (:attr:`DeviceProfile.cache_key`) to named
entries: the table gridders' register-spread geometry
(:mod:`clgrid.gridders.tunecache`) and the gridding core's spreading tiles
(:mod:`clgrid.core.tuning`).  Readers import only this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import platformdirs

_CACHE_VARIABLE = "CLGRID_TUNING_CACHE"


def cache_path() -> Path:
    """The tuning cache file (``CLGRID_TUNING_CACHE`` overrides)."""
    override = os.environ.get(_CACHE_VARIABLE)
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("clgrid")) / "gridder_tuning.json"


def load_cache() -> dict:
    """The whole cache; empty when the file is missing or unreadable."""
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def cached_entry(profile, key: str) -> dict | None:
    """The entry ``key`` stored for ``profile``'s device, or None."""
    return load_cache().get(profile.cache_key, {}).get(key)


def store_entry(profile, key: str, entry: dict) -> None:
    """Store ``entry`` under ``key`` for ``profile``'s device (atomic rename)."""
    path = cache_path()
    data = load_cache()
    data.setdefault(profile.cache_key, {})[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    temporary.replace(path)


__all__ = ["cache_path", "cached_entry", "load_cache", "store_entry"]

"""clgrid's per-device autotune cache: one JSON file, read and written here.

The file lives under the user cache directory (``CLGRID_TUNING_CACHE``
overrides it) and maps a device (:attr:`DeviceProfile.cache_key`) to named
entries: the table gridders' register-spread geometry
(:mod:`clgrid.gridders.tunecache`) and the gridding core's spreading tiles
(:mod:`clgrid.core.tuning`).  Readers import only this module.

A cache only saves time: a file that is not what :func:`store_entry` writes
(hand-edited, truncated, from another version) gives one
:class:`TuningCacheWarning` and the defaults, never an exception.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import platformdirs

_CACHE_VARIABLE = "CLGRID_TUNING_CACHE"


class TuningCacheWarning(UserWarning):
    """A tuning-cache file or entry was ignored (the defaults were used)."""


def cache_path() -> Path:
    """The tuning cache file (``CLGRID_TUNING_CACHE`` overrides)."""
    override = os.environ.get(_CACHE_VARIABLE)
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("clgrid")) / "gridder_tuning.json"


def warn_ignored(what: str, reason: str) -> None:
    """One warning line: what of the cache was ignored and why."""
    warnings.warn(f"clgrid tuning cache {cache_path()}: ignoring {what} ({reason}); using the "
                  "defaults (rerun `clgrid tune` / `clgrid tune-core`, or delete the file)",
                  TuningCacheWarning, stacklevel=3)


def _read_cache() -> tuple[dict, str | None]:
    """The cache's top level and, where the file is not a JSON object, why."""
    try:
        text = cache_path().read_text()
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as error:
        return {}, f"unreadable: {error}"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        return {}, f"not JSON: {str(error)[:80]}"
    if not isinstance(data, dict):
        return {}, f"its top level is {type(data).__name__}, not an object"
    return data, None


def load_cache() -> dict:
    """The whole cache; empty (with one warning) when it is unreadable or
    not a JSON object, empty and silent when the file is missing."""
    data, problem = _read_cache()
    if problem:
        warn_ignored("the file", problem)
    return data


def cached_entry(profile, key: str) -> dict | None:
    """The entry ``key`` stored for ``profile``'s device (a dict), or None;
    one warning where the file, the device's entries or the entry is not
    the JSON object it should be."""
    device = load_cache().get(profile.cache_key)
    if device is not None and not isinstance(device, dict):
        warn_ignored(f"the entries of {profile.cache_key!r}",
                     f"{type(device).__name__}, not an object")
        return None
    entry = (device or {}).get(key)
    if entry is not None and not isinstance(entry, dict):
        warn_ignored(f"entry {key!r}", f"{type(entry).__name__}, not an object")
        return None
    return entry


def store_entry(profile, key: str, entry: dict) -> None:
    """Store ``entry`` under ``key`` for ``profile``'s device (atomic rename);
    a malformed file or device entry is replaced, not added to."""
    path = cache_path()
    data, _ = _read_cache()
    if not isinstance(data.get(profile.cache_key), dict):
        data[profile.cache_key] = {}
    data[profile.cache_key][key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True))
    temporary.replace(path)


__all__ = ["TuningCacheWarning", "cache_path", "cached_entry", "load_cache", "store_entry",
           "warn_ignored"]

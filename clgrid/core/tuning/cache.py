"""clgrid's tuning cache: one JSON file per user, its one format, checked here.

The file (``tuning.json`` in the user cache directory; ``CLGRID_TUNING_CACHE``
names another) holds one section per kind of tuning, each keyed by device
(:attr:`~clgrid.device.profiles.DeviceProfile.cache_key`), then by entry::

    {"format": 2,
     "imaging": {"<device>": {"core_tiles|float32|w|support=7": {...}}},
     "table":   {"<device>": {"register|npol=4|float32|separable|support<=16": {...}}}}

``imaging`` holds the gridding core's tiles (:mod:`clgrid.core.tuning.tiles`,
``clgrid tune imaging``), ``table`` the register spread's geometry and GCF
read path (:mod:`clgrid.core.tuning.register`, ``clgrid tune table``).

Files of clgrid before format 2 (``gridder_tuning.json``: one map per device
holding both kinds, told apart by the entry keys' prefixes) are still read:
the old file where the new one does not exist yet, or any file without a
``format``; the first store writes the new file with their entries.

A cache only saves time: anything in the file that is not what
:func:`store_entry` writes (hand-edited, truncated, from another version)
gives one :class:`TuningCacheWarning` per read and the defaults, never an
exception; :func:`cached_value` is the one place that decides.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Callable, TypeVar

import platformdirs

from ...device.profiles import DeviceProfile

#: The environment variable naming the cache file instead of the default.
CACHE_VARIABLE = "CLGRID_TUNING_CACHE"
#: The layout :func:`store_entry` writes.
FORMAT = 2
#: The sections of the file: one per ``clgrid tune`` kind.
KINDS = ("imaging", "table")
#: Before format 2: the file's name, and the kind of each entry-key prefix.
LEGACY_NAME = "gridder_tuning.json"
LEGACY_PREFIXES = {"core_tiles|": "imaging", "register|": "table"}

Sections = dict[str, dict[str, object]]
T = TypeVar("T")
#: What :func:`_read_json` gives for a file that is not there (JSON's null is None).
_MISSING = object()


class TuningCacheWarning(UserWarning):
    """A tuning-cache file or entry was ignored (the defaults were used)."""


def cache_path() -> Path:
    """The tuning cache file (``CLGRID_TUNING_CACHE`` overrides)."""
    override = os.environ.get(CACHE_VARIABLE)
    if override:
        return Path(override)
    return Path(platformdirs.user_cache_dir("clgrid")) / "tuning.json"


def legacy_path() -> Path | None:
    """The cache file of clgrid before format 2, or None where
    ``CLGRID_TUNING_CACHE`` names the file (that one file is the cache)."""
    if os.environ.get(CACHE_VARIABLE):
        return None
    return cache_path().with_name(LEGACY_NAME)


def warn_ignored(what: str, reason: str) -> None:
    """One warning line: what of the cache was ignored and why."""
    warnings.warn(f"clgrid tuning cache {cache_path()}: ignoring {what} ({reason}); using the "
                  "defaults (rerun `clgrid tune imaging` / `clgrid tune table`, or delete "
                  "the file)", TuningCacheWarning, stacklevel=4)


def _read_json(path: Path) -> tuple[object, str | None]:
    """The file's JSON value (:data:`_MISSING` where there is no file) and,
    where it cannot be read or parsed, why."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return _MISSING, None
    except (OSError, UnicodeDecodeError) as error:
        return None, f"unreadable: {error}"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as error:
        return None, f"not JSON: {str(error)[:80]}"


def _from_legacy(data: dict) -> Sections:
    """Format 1's ``{device: {key: entry}}`` split into the sections by the
    keys' prefixes (keys of neither kind, from older versions, are dropped).
    A device value that is not an object stays in both sections, as it
    stood for both kinds, so that each reader warns about it."""
    sections: Sections = {kind: {} for kind in KINDS}
    for device, entries in data.items():
        if not isinstance(entries, dict):
            for kind in KINDS:
                sections[kind][device] = entries
            continue
        for key, entry in entries.items():
            kind = next((kind for prefix, kind in LEGACY_PREFIXES.items()
                         if str(key).startswith(prefix)), None)
            if kind is not None:
                sections[kind].setdefault(device, {})[key] = entry
    return sections


def _sections_of(data: object) -> tuple[Sections, str | None]:
    """The sections of a parsed file of either format and, where its top
    level is not what :func:`store_entry` writes, why (then empty ones)."""
    empty: Sections = {kind: {} for kind in KINDS}
    if data is _MISSING:
        return empty, None
    if not isinstance(data, dict):
        return empty, f"its top level is {type(data).__name__}, not an object"
    if "format" not in data:
        return _from_legacy(data), None
    if data["format"] != FORMAT:
        return empty, f"format {data['format']!r}; this clgrid reads {FORMAT}"
    sections = {kind: data.get(kind, {}) for kind in KINDS}
    for kind, section in sections.items():
        if not isinstance(section, dict):
            return empty, f"section {kind!r} is {type(section).__name__}, not an object"
    return sections, None


def _load() -> tuple[Sections, str | None]:
    """The cache's sections (from the old file where there is no new one)
    and, where the file is malformed, why."""
    data, problem = _read_json(cache_path())
    old = legacy_path()
    if data is _MISSING and old is not None:
        data, problem = _read_json(old)
    if problem:
        return {kind: {} for kind in KINDS}, problem
    return _sections_of(data)


def cached_entry(kind: str, profile: DeviceProfile, key: str) -> dict | None:
    """The entry ``key`` of section ``kind`` for ``profile``'s device (a
    dict), or None; one warning where the file, the device's entries or the
    entry is not the JSON object it should be."""
    sections, problem = _load()
    if problem:
        warn_ignored("the file", problem)
        return None
    device = sections[kind].get(profile.cache_key)
    if device is not None and not isinstance(device, dict):
        warn_ignored(f"the {kind} entries of {profile.cache_key!r}",
                     f"{type(device).__name__}, not an object")
        return None
    entry = (device or {}).get(key)
    if entry is not None and not isinstance(entry, dict):
        warn_ignored(f"entry {key!r}", f"{type(entry).__name__}, not an object")
        return None
    return entry


def cached_value(kind: str, profile: DeviceProfile, key: str,
                 parse: Callable[[dict], T | None]) -> T | None:
    """``parse(entry)`` of the entry ``key`` (:func:`cached_entry`), or None.

    ``parse`` turns the entry into what its reader returns and raises
    TypeError, ValueError or OverflowError where it is not one this device
    runs: then one warning and None (the defaults)."""
    entry = cached_entry(kind, profile, key)
    if entry is None:
        return None
    try:
        return parse(entry)
    except (TypeError, ValueError, OverflowError) as error:
        warn_ignored(f"entry {key!r}", str(error))
        return None


def store_entry(kind: str, profile: DeviceProfile, key: str, entry: dict) -> None:
    """Store ``entry`` under ``key`` in section ``kind`` for ``profile``'s
    device, in format 2 (atomic rename).  A malformed file or device entry
    is replaced, not added to; a format-1 cache's entries are carried over."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    sections, _ = _load()
    if not isinstance(sections[kind].get(profile.cache_key), dict):
        sections[kind][profile.cache_key] = {}
    sections[kind][profile.cache_key][key] = entry
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"format": FORMAT, **sections}, indent=1, sort_keys=True))
    temporary.replace(path)


__all__ = ["CACHE_VARIABLE", "FORMAT", "KINDS", "TuningCacheWarning", "cache_path",
           "cached_entry", "cached_value", "legacy_path", "store_entry", "warn_ignored"]

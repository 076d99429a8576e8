"""Shared helpers of the benchmark scripts: timing (clgrid's own,
:mod:`clgrid.core.tuning.timing`), tables, JSON."""

from __future__ import annotations

import datetime
import json
import platform

# the tuners' timing loop, so that a benchmark's time and a tuned choice
# are measured alike
from clgrid.core.tuning.timing import WARMUP_S, median_seconds, timed_calls, warm_up

__all__ = ["WARMUP_S", "fmt", "median_seconds", "print_table", "switch_off_fp64",
           "timed_calls", "warm_up", "write_json"]


def switch_off_fp64() -> None:
    """Every DeviceProfile from here on says 'no fp64' (the scripts'
    ``--no-fp64``): clgrid builds what it builds on Apple's or an Intel Arc
    GPU (float-float positions and phases, compensated sums)."""
    import dataclasses
    from clgrid.device.profiles import DeviceProfile
    real = DeviceProfile.from_device
    DeviceProfile.from_device = classmethod(
        lambda cls, device: dataclasses.replace(real(device), fp64=False))


def fmt(value) -> str:
    """A table cell: floats to 4 significant digits, anything else as str."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def print_table(rows: list[dict]) -> None:
    """Print dicts sharing their keys as an aligned table."""
    from clgrid.cli import format_table
    print(format_table(rows))


def write_json(path: str | None, benchmark: str, rows: list[dict], **extra) -> None:
    """Write rows plus the date and host to ``path`` (if given)."""
    if not path:
        return
    record = {"benchmark": benchmark, "date": datetime.date.today().isoformat(),
              "host": platform.node(), "python": platform.python_version(),
              "rows": rows, **extra}
    with open(path, "w") as handle:
        json.dump(record, handle, indent=1)

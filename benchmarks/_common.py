"""Shared helpers of the benchmark scripts: timing, tables, JSON."""

from __future__ import annotations

import datetime
import json
import platform
import statistics
import time
from typing import Callable

import pyopencl as cl


#: Seconds of calls before timing: short calls on a CPU runtime take 20-30%
#: longer for their first few dozen repeats (threads waking, caches, pools).
WARMUP_S = 0.2


def warm_up(run: Callable[[], object], finish: Callable[[], object] = lambda: None,
            calls: int = 1, seconds: float = WARMUP_S) -> None:
    """Call ``run()`` at least ``calls`` times and for at least ``seconds``."""
    start, done = time.perf_counter(), 0
    while done < calls or time.perf_counter() - start < seconds:
        run()
        finish()
        done += 1


def median_seconds(run: Callable[[], object], queue: cl.CommandQueue, repeats: int = 5,
                   warmup: int = 1) -> float:
    """Median wall time of ``run()`` with the queue drained around each call,
    after :func:`warm_up`."""
    warm_up(run, queue.finish, warmup)
    times = []
    for _ in range(repeats):
        queue.finish()
        start = time.perf_counter()
        run()
        queue.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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

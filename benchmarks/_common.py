"""Shared helpers of the benchmark scripts: timing, tables, JSON."""

from __future__ import annotations

import datetime
import json
import platform
import statistics
import time
from typing import Callable

import pyopencl as cl


def median_seconds(run: Callable[[], object], queue: cl.CommandQueue, repeats: int = 5,
                   warmup: int = 1) -> float:
    """Median wall time of ``run()`` with the queue drained around each call."""
    for _ in range(warmup):
        run()
        queue.finish()
    times = []
    for _ in range(repeats):
        queue.finish()
        start = time.perf_counter()
        run()
        queue.finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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

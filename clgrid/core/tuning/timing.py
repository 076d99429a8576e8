"""The one timing loop of the tuners and the benchmarks.

:func:`timed_calls` warms a call up, then times each of a few calls with the
device queue drained around it, so that a call's time is its own work and
not the tail of the one before; :func:`median_seconds` is the number the
tuners compare and the benchmark tables report.  ``benchmarks/_common.py``
imports both.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import pyopencl as cl

#: Seconds of calls before timing: short calls on a CPU runtime take 20-30%
#: longer for their first few dozen repeats (threads waking, caches, pools).
WARMUP_S = 0.2


def warm_up(run: Callable[[], object], finish: Callable[[], object] = lambda: None,
            calls: int = 1, seconds: float = WARMUP_S) -> None:
    """Call ``run()`` (then ``finish()``) at least ``calls`` times and for at
    least ``seconds``."""
    start, done = time.perf_counter(), 0
    while done < calls or time.perf_counter() - start < seconds:
        run()
        finish()
        done += 1


def timed_calls(run: Callable[[], object], queue: cl.CommandQueue | None = None,
                repeats: int = 5, warmup: int = 1, warmup_s: float = WARMUP_S) -> list[float]:
    """Wall seconds of each of ``repeats`` calls of ``run()``, after
    :func:`warm_up` (``warmup`` calls and :data:`WARMUP_S`).

    Parameters
    ----------
    run
        The call to time; device work it enqueues counts.
    queue
        Drained before and after each call (its earlier work is not the
        call's, its enqueued work is); None for calls that block on their
        own (host arrays in and out).
    repeats
        Calls timed, at least one.
    warmup
        Calls made, untimed, before (builds, allocations, threads waking).
    warmup_s
        Seconds the untimed calls go on for at least (:func:`warm_up`).

    Returns
    -------
    list of float
        One time per call, in call order.
    """
    finish = queue.finish if queue is not None else (lambda: None)
    warm_up(run, finish, warmup, warmup_s)
    times = []
    for _ in range(max(int(repeats), 1)):
        finish()
        start = time.perf_counter()
        run()
        finish()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(run: Callable[[], object], queue: cl.CommandQueue | None = None,
                   repeats: int = 5, warmup: int = 1) -> float:
    """Median of :func:`timed_calls`: robust to a slow call or a fast one
    on a shared machine."""
    return float(statistics.median(timed_calls(run, queue, repeats, warmup)))


__all__ = ["WARMUP_S", "median_seconds", "timed_calls", "warm_up"]

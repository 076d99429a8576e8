"""Host-side wall times of an engine's steps during calls: an optional trace.

A :class:`StageTrace` given to an engine (``engine.trace = StageTrace()``,
or ``Imager.trace``) records when each step of a call ran on the host, as
:class:`Span` s, in the order they ended: the wait for a row block's upload
before its spreading (``b<index>``, :meth:`clgrid.core.engine.Engine.spread`),
the FFT (``fft``) and correction (``correct``) of each pass
(:mod:`clgrid.core.image`), and the imager's NaN/Inf check (``finite``),
counts (``count``) and download (``to_host``).  The times are those of the
host call (enqueue, or the wait where the call blocks), not of the device.
Without a trace (the default) :func:`stage` costs one ``is None`` test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class Span:
    """One step: ``label``, ``begin`` and ``end`` in ``time.perf_counter`` seconds."""

    label: str
    begin: float
    end: float


class StageTrace:
    """The :class:`Span` s of the steps of every call traced since
    :meth:`restart` (thread-safe: shards of several devices may share one)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.origin = time.perf_counter()
        self._lock = threading.Lock()

    def restart(self) -> None:
        """Forget the spans so far; times count from now."""
        with self._lock:
            self.spans = []
            self.origin = time.perf_counter()

    @contextlib.contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Record the ``with`` block as a span of ``label``."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            with self._lock:
                self.spans.append(Span(label, begin, end))

    def lines(self) -> list[str]:
        """Each span as ``'label begin-end'`` in ms since :attr:`origin`."""
        return [f"{s.label} {1e3 * (s.begin - self.origin):.1f}-"
                f"{1e3 * (s.end - self.origin):.1f}" for s in self.spans]


def stage(trace: StageTrace | None, label: str) -> contextlib.AbstractContextManager:
    """``trace.stage(label)``, or nothing to record where ``trace`` is None."""
    return trace.stage(label) if trace is not None else contextlib.nullcontext()


__all__ = ["Span", "StageTrace", "stage"]

"""Objects that one thread uses at a time refuse a second one, clearly.

Some clgrid objects hold per-call device scratch and kernel objects (OpenCL
kernel arguments live on the kernel object, so two threads enqueueing the
same kernel can swap each other's buffers): ``Gridder``, ``Degridder``,
``StreamingGridder``, ``WcsGrid``/``SlGrid``, ``Reprojector`` and a
``MultiDeviceImager``.  Rather than hand back another thread's array, their
methods run under :func:`one_thread_at_a_time`, which raises
:class:`ConcurrentUseError` when a second thread enters while the first is
inside (the same thread may nest).  ``clgrid.Imager`` and the functional
APIs are shared safely instead: they lease scratch per call.
"""

from __future__ import annotations

import functools
import threading


class ConcurrentUseError(RuntimeError):
    """A second thread entered an object that one thread uses at a time."""


class SingleCaller:
    """The owner's state of :func:`one_thread_at_a_time`: which thread is
    inside and how deep."""

    def __init__(self):
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def enter(self, what: str) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._owner not in (None, me):
                raise ConcurrentUseError(
                    f"this {what} is in use by another thread: a {what} holds per-call "
                    "device scratch, so make one per thread (building another is cheap: "
                    "the kernels are cached per context)")
            self._owner, self._depth = me, self._depth + 1

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None


def one_thread_at_a_time(method):
    """Method decorator: a second thread entering the object while another is
    inside gets :class:`ConcurrentUseError` (see the module notes)."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        caller = self.__dict__.get("_single_caller")
        if caller is None:
            caller = self.__dict__.setdefault("_single_caller", SingleCaller())
        caller.enter(type(self).__name__)
        try:
            return method(self, *args, **kwargs)
        finally:
            caller.leave()
    return guarded


__all__ = ["ConcurrentUseError", "SingleCaller", "one_thread_at_a_time"]

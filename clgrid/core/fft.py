"""Gridding core, stage "FFT": 2-D complex FFTs of device arrays (reikna over pyopencl).

:class:`DeviceFFT` transforms a ``pyopencl.array.Array`` in place on its
device with reikna's FFT (compiled once per queue, shape and dtype).  When
reikna is not installed, or ``backend='numpy'`` is asked for, the array is
copied to the host, transformed with :mod:`numpy.fft` and copied back: the
same results, but slow for large grids (the fallback is for correctness, not
speed).

Sign conventions, unnormalised in both directions::

    forward:  X[k] = sum_n x[n] exp(-2 pi i k n / N)
    backward: x[n] = sum_k X[k] exp(+2 pi i k n / N)
"""

from __future__ import annotations

import atexit
import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

try:  # reikna is an optional extra ("fft")
    from reikna.cluda import ocl_api
    from reikna.fft import FFT as _ReiknaFFT
except ImportError:  # pragma: no cover - depends on the environment
    ocl_api = None
    _ReiknaFFT = None

BACKENDS = ("reikna", "numpy")
_compiled: dict[tuple, object] = {}
_lock = threading.Lock()
# Drop reikna's plans before interpreter shutdown: their temporary buffers'
# finalisers fail noisily once module globals are gone.
atexit.register(_compiled.clear)


def default_backend() -> str:
    """``'reikna'`` when it is importable, else ``'numpy'``."""
    return "reikna" if _ReiknaFFT is not None else "numpy"


class DeviceFFT:
    """In-place 2-D complex FFT of device arrays of one shape and dtype.

    Parameters
    ----------
    queue
        Command queue of the arrays.
    shape
        ``(n0, n1)`` of the arrays to transform, or ``(batch, n0, n1)``: a
        batch of planes transformed over their last two axes in one call.
    dtype
        complex64 or complex128.
    backend
        ``'reikna'`` (device), ``'numpy'`` (host fallback) or None (best).
    """

    def __init__(self, queue: cl.CommandQueue, shape: tuple[int, int], dtype=np.complex64,
                 backend: str | None = None):
        self.queue = queue
        self.shape = tuple(int(n) for n in shape)
        if len(self.shape) not in (2, 3):
            raise ValueError(f"DeviceFFT transforms (n0, n1) or (batch, n0, n1), got {shape}")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.complex64, np.complex128):
            raise TypeError(f"DeviceFFT needs complex64 or complex128, not {self.dtype}")
        self.backend = backend or default_backend()
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown FFT backend {self.backend!r}; expected one of {BACKENDS}")
        if self.backend == "reikna" and _ReiknaFFT is None:
            raise ImportError("reikna is not installed (pip install reikna)")
        self._size = self.shape[-2] * self.shape[-1]
        self._compiled = self._compile() if self.backend == "reikna" else None

    def _compile(self):
        key = (self.queue.int_ptr, self.shape, self.dtype.str)
        with _lock:
            compiled = _compiled.get(key)
        if compiled is None:
            thread = ocl_api().Thread(self.queue)
            template = cla.empty(self.queue, self.shape, self.dtype)
            axes = (len(self.shape) - 2, len(self.shape) - 1)
            compiled = _ReiknaFFT(template, axes=axes).compile(thread)
            with _lock:
                _compiled[key] = compiled
        return compiled

    def _check(self, array: cla.Array) -> None:
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(f"DeviceFFT built for {self.shape} {self.dtype}, got "
                             f"{array.shape} {array.dtype}")

    def forward(self, array: cla.Array) -> cla.Array:
        """In place, unnormalised, ``exp(-2 pi i k n / N)``."""
        self._check(array)
        if self._compiled is not None:
            self._compiled(array, array, inverse=0)
        else:
            array.set(np.fft.fft2(array.get()).astype(self.dtype))
        return array

    def backward(self, array: cla.Array) -> cla.Array:
        """In place, unnormalised, ``exp(+2 pi i k n / N)`` (N times numpy's ifft2)."""
        self._check(array)
        if self._compiled is not None:
            # reikna's inverse divides by N; callers fold N into their own scale
            # (see backward_scale) rather than paying one more pass here.
            self._compiled(array, array, inverse=1)
        else:
            array.set((np.fft.ifft2(array.get())).astype(self.dtype))
        return array

    @property
    def backward_scale(self) -> float:
        """Factor to multiply :meth:`backward` results by to get the unnormalised sum."""
        return float(self._size)


__all__ = ["BACKENDS", "DeviceFFT", "default_backend"]

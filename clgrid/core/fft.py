"""Gridding core, stage "FFT": 2-D complex FFTs of device arrays.

:class:`DeviceFFT` transforms a ``pyopencl.array.Array`` in place, with one
of four backends (each compiled or planned once per queue, shape and dtype):

``'pyvkfft'``
    VkFFT's OpenCL backend (the ``fft`` extra's ``pyvkfft``), on the device.
``'reikna'``
    reikna's FFT (pure Python + OpenCL), on the device.
``'host'``
    For CPU devices, whose buffers are host memory: the buffer is mapped
    (zero-copy there) and transformed by ``scipy.fft`` (pocketfft) on every
    core of the process (else numpy), written back into the mapped buffer.
    On a GPU the map copies over the bus: only a fallback there.  (ducc0's
    FFT was as fast in place, but ducc0 stays a test and benchmark
    dependency of clgrid, never a run-time one.)
``'numpy'``
    Copy to the host, :mod:`numpy.fft`, copy back: the same results, slowly
    (the fallback is for correctness, not speed).

``backend=None`` picks :func:`default_backend` for the queue's device: on
GPUs pyvkfft, then reikna, then (a fallback that warns) host; on CPUs the order measured fastest by
``benchmarks/fft.py`` (see benchmarks/RESULTS.md, "FFT backends").  A
backend that is importable but cannot plan this transform (VkFFT refuses a
size, a device lacks something) is skipped for the next in that order.

Sign conventions, identical for every backend::

    forward:  X[k] = sum_n x[n] exp(-2 pi i k n / N)          (unnormalised)
    backward: x[n] = (1/N) sum_k X[k] exp(+2 pi i k n / N)    (numpy's ifft2)

so ``backward(a) * backward_scale`` is the unnormalised backward sum.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import threading
import weakref
import warnings

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.kernels import quiet_builds

try:  # reikna is an optional extra ("fft")
    from reikna.cluda import ocl_api
    from reikna.fft import FFT as _ReiknaFFT
except ImportError:  # pragma: no cover - depends on the environment
    ocl_api = None
    _ReiknaFFT = None

try:  # pyvkfft is an optional extra ("fft"); its extension links the system's libOpenCL.so.1
    from pyvkfft.opencl import VkFFTApp as _VkFFTApp
except (ImportError, OSError):  # pragma: no cover - depends on the environment
    _VkFFTApp = None

BACKENDS = ("pyvkfft", "reikna", "host", "numpy")
# Fastest first, measured by benchmarks/fft.py (benchmarks/RESULTS.md, "FFT backends").
# On a GPU the host backend is a fallback, but 7.7x numpy's speed (8192^2 on an
# H100 host: 0.31 s against 2.42 s, the map copying both ways; RESULTS.md).
GPU_ORDER = ("pyvkfft", "reikna", "host", "numpy")
CPU_ORDER = ("host", "pyvkfft", "reikna", "numpy")
# Idle device FFT plans by (backend, queue, shape, dtype).  A plan is lent to
# one DeviceFFT at a time (taken out here, put back when that DeviceFFT is
# gone): plans hold kernel objects and work buffers, which two concurrent
# transforms must not share.  At most _MAX_IDLE_PLANS are kept idle.
_plans: dict[tuple, list] = {}
_lock = threading.Lock()
_MAX_IDLE_PLANS = 8
# Drop the plans before interpreter shutdown: reikna's temporary buffers'
# finalisers fail noisily once module globals are gone.
atexit.register(_plans.clear)


def _take_plan(key: tuple):
    with _lock:
        idle = _plans.get(key)
        return idle.pop() if idle else None


def _return_plan(key: tuple, plan) -> None:
    with _lock:
        _plans.setdefault(key, []).append(plan)
        while sum(len(idle) for idle in _plans.values()) > _MAX_IDLE_PLANS:
            oldest = next(k for k, idle in _plans.items() if idle)
            _plans[oldest].pop(0)
            if not _plans[oldest]:
                del _plans[oldest]


def available_backends() -> tuple[str, ...]:
    """The backends whose libraries import here, in :data:`BACKENDS` order."""
    present = {"pyvkfft": _VkFFTApp is not None, "reikna": _ReiknaFFT is not None,
               "host": True, "numpy": True}
    return tuple(name for name in BACKENDS if present[name])


def _is_cpu(device: cl.Device | None) -> bool:
    return device is not None and bool(device.type & cl.device_type.CPU)


def backend_order(device: cl.Device | None = None) -> tuple[str, ...]:
    """Available backends, fastest first, for ``device`` (a GPU when None)."""
    order = CPU_ORDER if _is_cpu(device) else GPU_ORDER
    available = available_backends()
    return tuple(name for name in order if name in available)


def default_backend(device: cl.Device | None = None) -> str:
    """The first of :func:`backend_order` for ``device``."""
    return backend_order(device)[0]


_warned_devices: set[int] = set()


def _warn_host_fallback(device: cl.Device, backend: str, failures: list[str]) -> None:
    """Once per device: a GPU's FFTs are running on the host (2 s a call
    instead of 2 ms for two 4096^2 grids on an H100), and why."""
    if device.int_ptr in _warned_devices:
        return
    _warned_devices.add(device.int_ptr)
    missing = [name for name, present in (("pyvkfft", _VkFFTApp), ("reikna", _ReiknaFFT))
               if present is None]
    reasons = ([f"{', '.join(missing)} not importable"] if missing else []) + failures
    warnings.warn(f"no device FFT for {device.name.strip()!r} ({'; '.join(reasons)}): the "
                  f"FFTs run on the host ({backend}), far slower for large grids; "
                  "pip install pyvkfft (docs/imaging.md, FFT)", RuntimeWarning, stacklevel=4)


def _host_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def _host_transform(array: np.ndarray, axes: tuple[int, int], forward: bool,
                    threads: int) -> np.ndarray:
    """scipy.fft (imported here: it takes ~0.2 s), else numpy.fft; a new array."""
    try:
        import scipy.fft as transforms
        options = {"overwrite_x": True, "workers": threads}
    except ImportError:
        transforms, options = np.fft, {}
    return (transforms.fft2 if forward else transforms.ifft2)(array, axes=axes, **options)


@dataclasses.dataclass(frozen=True)
class Pruning:
    """Which rows and columns of a grid plane matter (ducc0's pruned FFTs).

    ``rows`` (indices on the second-last axis): the only rows a backward
    transform's input can be non-zero in, and the only rows a forward
    transform's output is read in (the rows the visibilities' kernels touch).
    ``cols`` (last axis): the only columns a backward transform's output is
    read in, and the only non-zero columns of a forward transform's input
    (the columns of image pixels).  The other rows and columns are left
    partly transformed.
    """

    rows: np.ndarray
    cols: np.ndarray


def _runs(indices: np.ndarray) -> list[slice]:
    """Sorted indices as slices of consecutive runs."""
    if indices.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [indices.size]])
    return [slice(int(indices[a]), int(indices[b - 1]) + 1) for a, b in zip(starts, stops)]


#: Most bytes per block of the pruned transform's passes.  A block of
#: columns is copied out contiguously, transformed and copied back (a plane
#: row is nv * 8 bytes apart, so transforming columns in place thrashes the
#: caches: 2048^2 complex64, 1024 columns: 10.3 ms as one call, 5.7 ms in
#: blocks of 64 columns, 1 MiB, on one core); a block of rows is transformed
#: and copied back while in cache.  2 MiB measured best from 1024^2 to 4096^2
#: on two cores.
BLOCK_BYTES = 2 << 20
#: Fewest rows per block of the contiguous pass.
ROW_BLOCK = 32
#: Blocks per thread and pass, where BLOCK_BYTES allows: each block costs a
#: scipy call and a pool task (tens of microseconds), which small grids feel
#: (1024^2 pruned on two cores: 2.8 ms in blocks of 32 rows and 64 columns,
#: 1.7 ms in 4 blocks per thread, 1.5 ms in one).
BLOCKS_PER_THREAD = 1
_pool = None
_pool_lock = threading.Lock()


def _thread_pool(threads: int):
    """One process-wide pool for the blocks of the pruned transforms."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < threads:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="clgrid-fft")
        return _pool


def _blocks(runs: list[slice], size: int) -> list[slice]:
    """The runs cut into slices of at most ``size``."""
    return [slice(start, min(start + size, run.stop))
            for run in runs for start in range(run.start, run.stop, size)]


def _pruned_transform(view: np.ndarray, forward: bool, prune: Pruning, threads: int) -> None:
    """The 2-D transform of the last two axes of ``view`` in two 1-D passes,
    each over only the rows or columns that matter (see :class:`Pruning`), in
    blocks of consecutive rows or columns spread over ``threads`` threads
    (each block transformed on its own, so the bits do not depend on them)."""
    try:
        import scipy.fft as transforms
        options = {"workers": 1, "overwrite_x": True}
    except ImportError:  # pragma: no cover - depends on the environment
        transforms, options = np.fft, {}
    one_d = transforms.fft if forward else transforms.ifft
    planes = view.reshape((-1,) + view.shape[-2:])
    n_blocks = BLOCKS_PER_THREAD * threads
    row_size = max(ROW_BLOCK, min(-(-prune.rows.size // n_blocks),
                                  BLOCK_BYTES // (planes.shape[2] * planes.itemsize)))
    col_size = max(1, min(-(-prune.cols.size // n_blocks),
                          BLOCK_BYTES // (planes.shape[1] * planes.itemsize)))
    row_blocks = _blocks(_runs(np.sort(prune.rows)), row_size)
    col_blocks = _blocks(_runs(np.sort(prune.cols)), col_size)

    def rows(task):
        plane, block = task
        planes[plane, block, :] = one_d(planes[plane, block, :], axis=-1, **options)

    def cols(task):
        plane, block = task
        part = np.ascontiguousarray(planes[plane, :, block])
        planes[plane, :, block] = one_d(part, axis=-2, **options)

    def run(work, blocks):
        tasks = [(plane, block) for plane in range(planes.shape[0]) for block in blocks]
        if threads > 1 and len(tasks) > 1:
            list(_thread_pool(threads).map(work, tasks))
        else:
            for task in tasks:
                work(task)

    if forward:   # columns of the image along u, then the needed rows along v
        run(cols, col_blocks)
        run(rows, row_blocks)
    else:         # non-zero rows along v, then the needed columns along u
        run(rows, row_blocks)
        run(cols, col_blocks)


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
        One of :data:`BACKENDS`, or None: the fastest that plans here (see
        :func:`backend_order`).
    """

    def __init__(self, queue: cl.CommandQueue, shape: tuple[int, int], dtype=np.complex64,
                 backend: str | None = None):
        self.queue = queue
        self.shape = tuple(int(n) for n in shape)
        if len(self.shape) not in (2, 3) or min(self.shape) < 1:
            raise ValueError(f"DeviceFFT transforms (n0, n1) or (batch, n0, n1), got {shape}")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.complex64, np.complex128):
            raise TypeError(f"DeviceFFT needs complex64 or complex128, not {self.dtype}")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"unknown FFT backend {backend!r}; expected one of {BACKENDS}")
        self._size = self.shape[-2] * self.shape[-1]
        self._axes = (len(self.shape) - 2, len(self.shape) - 1)
        self._threads = _host_threads()
        if backend is not None:
            self.backend, self._plan = backend, self._make_plan(backend)
        else:
            self.backend, self._plan = self._first_that_plans()

    # ---------------------------------------------------------- planning
    def _first_that_plans(self) -> tuple[str, object]:
        failures = []
        for name in backend_order(self.queue.device):
            try:
                plan = self._make_plan(name)
            except (RuntimeError, cl.Error) as error:
                failures.append(f"{name}: {error}")
                continue
            if name in ("host", "numpy") and not _is_cpu(self.queue.device):
                _warn_host_fallback(self.queue.device, name, failures)
            return name, plan
        raise RuntimeError("no FFT backend could plan "  # pragma: no cover - numpy always plans
                           f"{self.shape} {self.dtype}: " + "; ".join(failures))

    def _make_plan(self, backend: str):
        if backend == "reikna" and _ReiknaFFT is None:
            raise ImportError("reikna is not installed (pip install reikna)")
        if backend == "pyvkfft" and _VkFFTApp is None:
            raise ImportError("pyvkfft is not installed or its OpenCL library does not load "
                              "(pip install pyvkfft; see docs/imaging.md, FFT)")
        if backend not in ("reikna", "pyvkfft"):
            return None
        key = (backend, self.queue.int_ptr, self.shape, self.dtype.str)
        plan = _take_plan(key)
        if plan is None:
            plan = self._reikna_plan() if backend == "reikna" else self._vkfft_plan()
        # not at exit: the plans are dropped then (see _plans)
        weakref.finalize(self, _return_plan, key, plan).atexit = False
        return plan

    def _reikna_plan(self):
        thread = ocl_api().Thread(self.queue)
        template = cla.empty(self.queue, self.shape, self.dtype)
        with quiet_builds():
            return _ReiknaFFT(template, axes=self._axes).compile(thread)

    def _vkfft_plan(self):
        # norm=1: the backward transform divides by N like numpy's ifft2 and
        # reikna's inverse, so backward_scale is the same for every backend.
        return _VkFFTApp(self.shape, self.dtype, self.queue, ndim=2, inplace=True, norm=1)

    # ---------------------------------------------------------- transforms
    def _check(self, array: cla.Array) -> None:
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(f"DeviceFFT built for {self.shape} {self.dtype}, got "
                             f"{array.shape} {array.dtype}")

    def _run(self, array: cla.Array, forward: bool, prune=None) -> cla.Array:
        self._check(array)
        if self.backend == "pyvkfft":
            (self._plan.fft if forward else self._plan.ifft)(array, queue=self.queue)
        elif self.backend == "reikna":
            # reikna's inverse divides by N; callers fold N into their own scale
            # (see backward_scale) rather than paying one more pass here.
            self._plan(array, array, inverse=0 if forward else 1)
        elif self.backend == "host":
            self._host_in_place(array, forward, prune)
        else:
            host = array.get()
            array.set((np.fft.fft2(host) if forward else np.fft.ifft2(host)).astype(self.dtype))
        return array

    def _host_in_place(self, array: cla.Array, forward: bool, prune=None) -> None:
        """Map the buffer and transform it where it lies (zero-copy on CPU devices)."""
        # clgrid's queues are in order, so the blocking map waits for the kernels
        # that filled the buffer, and kernels enqueued later wait for the unmap.
        flags = cl.map_flags.READ | cl.map_flags.WRITE
        view, _ = cl.enqueue_map_buffer(self.queue, array.base_data, flags, array.offset,
                                        self.shape, self.dtype, is_blocking=True)
        try:
            if prune is None:
                view[...] = _host_transform(view, self._axes, forward, self._threads)
            else:
                _pruned_transform(view, forward, prune, self._threads)
        finally:
            view.base.release(self.queue)

    def forward(self, array: cla.Array, prune: "Pruning | None" = None) -> cla.Array:
        """In place, unnormalised, ``exp(-2 pi i k n / N)``.  ``prune``: see
        :class:`Pruning` (used by the host backend, ignored by the others)."""
        return self._run(array, True, prune)

    def backward(self, array: cla.Array, prune: "Pruning | None" = None) -> cla.Array:
        """In place, ``exp(+2 pi i k n / N)`` divided by N (numpy's ifft2);
        multiply by :attr:`backward_scale` for the unnormalised sum."""
        return self._run(array, False, prune)

    @property
    def backward_scale(self) -> float:
        """Factor to multiply :meth:`backward` results by to get the unnormalised sum."""
        return float(self._size)


__all__ = ["BACKENDS", "DeviceFFT", "Pruning", "available_backends", "backend_order",
           "default_backend"]

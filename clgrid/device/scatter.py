"""Scatter-add with float atomics: ``out[index[i]] += values[i]``.

The smallest complete clgrid operation (template, compile-once object, light
call).  It is the demo job, the float-atomics test subject and the subject of
``benchmarks/atomics.py``.
"""

from __future__ import annotations

import numpy as np
import pyopencl.array as cla

from .kernels import KernelTemplate, Operation, launch, real_dtype_name

_SUPPORTED = (np.float32, np.float64, np.complex64, np.complex128)


class ScatterAdd(Operation):
    """Compile-once scatter-add of one value dtype on one device.

    Parameters
    ----------
    context
        A :class:`pyopencl.Context`, a :class:`pyopencl.CommandQueue` or
        None (then :func:`clgrid.create_context` picks a device).
    dtype
        float32, float64, complex64 or complex128.
    atomics
        Force an atomic path (``'cas'``, ``'native-cl'``, ``'native-ptx'``);
        default the device's best.
    items_per_work_item
        Consecutive items each work-item adds.
    """

    def __init__(self, context=None, dtype=np.float32, *, atomics: str | None = None,
                 items_per_work_item: int = 1):
        super().__init__(context)
        self.dtype = np.dtype(dtype)
        if self.dtype.type not in _SUPPORTED:
            raise TypeError(f"ScatterAdd supports {[np.dtype(t).name for t in _SUPPORTED]}, "
                            f"not {self.dtype}")
        if int(items_per_work_item) < 1:
            raise ValueError("items_per_work_item must be >= 1")
        self.is_complex = self.dtype.kind == "c"
        self.real_dtype = np.dtype(np.float32 if self.dtype in (np.float32, np.complex64)
                                   else np.float64)
        self.items_per_work_item = int(items_per_work_item)
        self.template = KernelTemplate(
            self.queue, "device_scatter_add.cl.mako",
            {"real": real_dtype_name(self.real_dtype), "is_complex": self.is_complex,
             "items_per_work_item": self.items_per_work_item},
            atomics=atomics, need_f64=self.real_dtype == np.float64)
        self.atomic_path = (self.template.atomics["atomic_f32"] if self.real_dtype == np.float32
                            else self.template.atomics["atomic_f64"])
        self._kernel = self.template.kernel("scatter_add")

    def __call__(self, index, values, n_out: int | None = None, out=None,
                 wait: bool = True):
        """Add ``values[i]`` into ``out[index[i]]``.

        Parameters
        ----------
        index
            Integer array (host or device) of output positions.
        values
            Values of this operation's dtype, same length as ``index``.
        n_out
            Output length when ``out`` is not given (zeros are allocated).
        out
            Device array to accumulate into (``pyopencl.array.Array`` of
            this dtype); returned.
        wait
            Block until the kernel has finished.

        Returns
        -------
        pyopencl.array.Array
        """
        index_d = self._to_device(index, np.uint32, "index")
        values_d = self._to_device(values, self.dtype, "values")
        if index_d.shape != values_d.shape or index_d.ndim != 1:
            raise ValueError(f"index and values must be 1-D of equal length, got "
                             f"{index_d.shape} and {values_d.shape}")
        if out is None:
            if n_out is None:
                raise ValueError("give n_out or out")
            out = cla.zeros(self.queue, int(n_out), self.dtype)
        if out.dtype != self.dtype:
            raise TypeError(f"out has dtype {out.dtype}, expected {self.dtype}")
        if isinstance(index, np.ndarray) and index.size and (
                index.min() < 0 or index.max() >= out.size):
            raise IndexError(f"index outside [0, {out.size})")
        n_items = index_d.size
        if n_items == 0:
            return out
        n_work_items = -(-n_items // self.items_per_work_item)
        event = launch(self._kernel, self.queue, (n_work_items,), index_d.data, values_d.data,
                       out.data, np.uint32(n_items))
        if wait:
            event.wait()
        return out

    def _to_device(self, array, dtype, name):
        if isinstance(array, cla.Array):
            if array.dtype != dtype:
                raise TypeError(f"{name} has dtype {array.dtype}, expected {np.dtype(dtype)}")
            return array
        array = np.asarray(array)
        if name == "index" and array.dtype.kind not in "iu":
            raise TypeError(f"index must be integer, got {array.dtype}")
        if name == "values" and not np.all(np.isfinite(array)):
            raise ValueError("values contain NaN or Inf")
        return cla.to_device(self.queue, np.ascontiguousarray(array, dtype=dtype))


def scatter_add_reference(index: np.ndarray, values: np.ndarray, n_out: int) -> np.ndarray:
    """Float64 (complex128) host reference of :class:`ScatterAdd`."""
    values = np.asarray(values)
    wide = np.complex128 if values.dtype.kind == "c" else np.float64
    out = np.zeros(n_out, wide)
    np.add.at(out, np.asarray(index), values.astype(wide))
    return out


__all__ = ["ScatterAdd", "scatter_add_reference"]

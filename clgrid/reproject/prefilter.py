"""B-spline interpolation orders and the device prefilter that makes their coefficients.

:data:`ORDERS` and the spline arithmetic (poles, FIR gain and halo), the
raw input types the kernels read, and :class:`BSplinePrefilter`
(``templates/reproject_bspline.cl.mako``): scipy's exact inverse filter as
a truncated symmetric FIR, mirror boundary, rows and columns in parallel.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.kernels import KernelTemplate, Operation, launch, real_dtype_name


#: Interpolation orders: name -> (spline order, prefilter).
ORDERS = {"nearest-neighbor": (0, False), "bilinear": (1, False), "biquadratic": (2, True),
          "bicubic": (3, True), "bicubic-unfiltered": (3, False)}
_ORDER_ALIASES = {0: "nearest-neighbor", 1: "bilinear", 2: "biquadratic", 3: "bicubic"}
SAMPLINGS = ("buffer", "image", "image-linear")
#: B-spline sampled at the integers: order -> normalisation of (1, K - 2, 1) / K.
_SPLINE_NORM = {2: 8.0, 3: 6.0}
#: Data taps of the stencil relative to the mask index (the tap after the first).
STENCIL_WINDOW = {2: (-1, 1), 3: (-1, 2)}
_WORK_GROUP_2D = (16, 8)
_ROW_GROUP = 256

#: OpenCL C type of each raw input dtype the device converts from.
RAW_TYPES = {"u1": "uchar", "i1": "char", "u2": "ushort", "i2": "short", "u4": "uint",
             "i4": "int", "u8": "ulong", "i8": "long", "f4": "float", "f8": "double",
             "c8": "float2", "c16": "double2"}


def spline_pole(order: int) -> float:
    """The one pole of the order-2 or order-3 B-spline inverse filter."""
    return {2: math.sqrt(8.0) - 3.0, 3: math.sqrt(3.0) - 2.0}[order]


def fir_gain(order: int) -> float:
    """c in the inverse filter's impulse response c * pole^|j| (sqrt(3) for cubic)."""
    pole = spline_pole(order)
    return _SPLINE_NORM[order] * pole / (pole * pole - 1.0)


def fir_halo(order: int, real_dtype) -> int:
    """FIR half-length: terms after which pole**j is below the data type's
    resolution (the truncation error is below one ulp of the result)."""
    eps = np.finfo(real_dtype).eps
    return int(math.ceil(math.log(eps) / math.log(abs(spline_pole(order))))) + 1


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _real_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64)


def raw_kind(dtype: np.dtype) -> tuple[np.dtype, bool]:
    """(native-order dtype the device reads, whether its bytes are swapped)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.dtype(np.uint8), False
    native = dtype.newbyteorder("=")
    if f"{native.kind}{native.itemsize}" not in RAW_TYPES:
        raise TypeError(f"cannot reproject data of dtype {dtype}")
    swap = not dtype.isnative and dtype.itemsize > 1
    if swap and dtype.kind == "c":
        raise TypeError("big-endian complex data: convert with .astype first")
    return native, swap


class _Scratch:
    """Device arrays kept between calls, regrown when too small."""

    def __init__(self, queue: cl.CommandQueue):
        self.queue = queue
        self._arrays: dict[str, cla.Array] = {}

    def get(self, name: str, shape, dtype) -> cla.Array:
        shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
        size = int(np.prod(shape)) * dtype.itemsize
        array = self._arrays.get(name)
        if array is None or array.base_data.size < max(size, 1):
            if array is not None:
                del self._arrays[name]
            array = cla.empty(self.queue, (max(size, 1),), np.uint8)
            self._arrays[name] = array
        return cla.Array(self.queue, shape, dtype, data=array.base_data)


class BSplinePrefilter(Operation):
    """Compile-once input preparation: raw input -> working dtype on the
    device, and the B-spline prefilter with blanked pixels kept out.

    The prefilter equals ``scipy.ndimage.spline_filter(image, order,
    mode='mirror')`` (also what scipy uses for ``mode='constant'``) to the
    working precision (FIR truncation below one ulp).

    Parameters
    ----------
    context
        Context, command queue or None.
    dtype
        Working dtype: float32, float64, complex64 or complex128.
    order
        Spline order, 2 or 3.
    raw_dtype
        Dtype of the raw input (any integer, float or complex numpy dtype,
        either byte order); default ``dtype``.
    """

    def __init__(self, context=None, dtype=np.float32, order: int = 3, raw_dtype=None):
        super().__init__(context)
        self.dtype = np.dtype(dtype)
        self.order = int(order)
        if self.order not in STENCIL_WINDOW:
            raise ValueError(f"prefilter order must be 2 or 3, got {order}")
        self.raw_dtype = np.dtype(raw_dtype if raw_dtype is not None else dtype)
        native, swap = raw_kind(self.raw_dtype)
        real = _real_of(self.dtype)
        channels = 2 if self.dtype.kind == "c" else 1
        if (native.kind == "c") != (channels == 2):
            raise TypeError(f"raw {self.raw_dtype} and working {self.dtype}: real/complex differ")
        self.halo = fir_halo(self.order, real)
        self.col_tile = self._column_tile(self.dtype.itemsize)
        need_f64 = real == np.float64 or native == np.float64 or native == np.complex128
        self.template = KernelTemplate(
            self.queue, "reproject_bspline.cl.mako",
            {"real": real_dtype_name(real), "channels": channels,
             "raw": RAW_TYPES[f"{native.kind}{native.itemsize}"], "swap": swap,
             "raw_bytes": native.itemsize // channels, "pole": spline_pole(self.order),
             "gain": fir_gain(self.order), "horizon": self.halo,
             "window": STENCIL_WINDOW[self.order], "row_group": _ROW_GROUP,
             "col_tile": self.col_tile, "with_f64": need_f64},
            need_f64=need_f64)
        self._convert = self.template.kernel("convert")
        self._convert_fill = self.template.kernel("convert_fill")
        self._rows = self.template.kernel("prefilter_rows")
        self._columns = self.template.kernel("prefilter_columns")
        self.scratch = _Scratch(self.queue)

    def _column_tile(self, itemsize: int) -> tuple[int, int, int]:
        cols = 16 if itemsize >= 16 else 32
        local_rows = 256 // cols
        tile_rows = 64
        budget = 0.8 * self.profile.local_mem_bytes
        while tile_rows > local_rows and \
                (tile_rows + 2 * fir_halo(3, np.float64)) * cols * (itemsize + 1) > budget:
            tile_rows //= 2
        return cols, tile_rows, local_rows

    def convert(self, raw: cla.Array, out: cla.Array, raw_offset: int = 0) -> cla.Array:
        """``out`` (working dtype) from ``raw`` element by element."""
        launch(self._convert, self.queue, (out.size,), raw.base_data, out.data,
               np.int32(out.size), np.int64(_element_offset(raw) + raw_offset), group=(256,))
        return out

    def prepare(self, raw: cla.Array, shape: tuple[int, int], raw_offset: int = 0,
                out: cla.Array | None = None) -> tuple[cla.Array, cla.Array]:
        """B-spline coefficients (working dtype, ``shape``) of the raw image
        and the blank mask (uint8: 1 where the stencil based there touches a
        non-finite pixel)."""
        ny, nx = (int(n) for n in shape)
        work = self.scratch.get("work", (ny, nx), self.dtype)
        rows = self.scratch.get("rows", (ny, nx), self.dtype)
        flags = self.scratch.get("flags", (ny, nx), np.uint8)
        row_flags = self.scratch.get("row_flags", (ny, nx), np.uint8)
        mask = self.scratch.get("mask", (ny, nx), np.uint8)
        out = out if out is not None else self.scratch.get("coefficients", (ny, nx), self.dtype)
        launch(self._convert_fill, self.queue, (nx * ny,), raw.base_data, work.data,
               flags.data, np.int32(nx), np.int32(ny),
               np.int64(_element_offset(raw) + raw_offset), group=(256,))
        self._rows(self.queue, (_round_up(nx, _ROW_GROUP), ny), (_ROW_GROUP, 1), work.data,
                   flags.data, rows.data, row_flags.data, np.int32(nx), np.int32(ny))
        cols, tile_rows, local_rows = self.col_tile
        self._columns(self.queue, (_round_up(nx, cols), -(-ny // tile_rows) * local_rows),
                      (cols, local_rows), rows.data, row_flags.data, out.data, mask.data,
                      np.int32(nx), np.int32(ny))
        return out, mask

    def __call__(self, image: cla.Array, scratch: cla.Array | None = None) -> cla.Array:
        """Replace ``image`` (2-D device array of the working dtype) by its
        B-spline coefficients (``scratch`` is accepted for compatibility)."""
        if image.dtype != self.dtype or image.ndim != 2 or self.raw_dtype != self.dtype:
            raise ValueError(f"expected a 2-D {self.dtype} device array, got {image.dtype} "
                             f"{image.shape}")
        copy = image.copy()
        self.prepare(copy, image.shape, out=image)
        return image


def _element_offset(array: cla.Array) -> int:
    """Where a device array (view) starts in its buffer, in elements."""
    if array.offset % array.dtype.itemsize:
        raise ValueError("device array offset is not a whole number of elements")
    return array.offset // array.dtype.itemsize


__all__ = ["BSplinePrefilter", "ORDERS", "RAW_TYPES", "SAMPLINGS", "STENCIL_WINDOW", "fir_gain", "fir_halo", "raw_kind", "spline_pole"]

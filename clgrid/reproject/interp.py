"""Reprojection of images between celestial projections on an OpenCL device.

Follows SKA SDP memo 089 (GPU reprojection) and the conventions of
``reproject.reproject_interp``: for every output pixel the input pixel is
found (output pixel -> intermediate -> native -> celestial [-> other frame]
-> input native -> input intermediate -> input pixel), then the input is
interpolated there.  The projections of :data:`clgrid.reproject.wcs_params.DEVICE_PROJECTIONS`
and frame changes that are rotations are mapped on the device; any other
WCS is mapped on the host by astropy, and only the interpolation runs on the
device.

``'bicubic'``/``'biquadratic'`` equal reproject's (scipy's B-splines with
prefilter): the coefficients are computed on the device by the exact
inverse filter written as a truncated symmetric FIR (rows and columns in
parallel), mirror boundary, then evaluated with memo 089's weights.
Blanked (non-finite) input pixels blank only the output pixels whose
interpolation stencil touches them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.profiles import resolve_queue
from ..device.hostio import PinnedStaging
from ..device.kernels import KernelTemplate, Operation, real_dtype_name
from .plan import Job, parse_input, parse_output, plan
from .wcs_params import CelestialPlane, pixel_map_params

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
        self._convert(self.queue, (_round_up(out.size, 256),), None, raw.base_data,
                      out.data, np.int32(out.size), np.int64(_element_offset(raw) + raw_offset))
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
        self._convert_fill(self.queue, (_round_up(nx * ny, 256),), None, raw.base_data,
                           work.data, flags.data, np.int32(nx), np.int32(ny),
                           np.int64(_element_offset(raw) + raw_offset))
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


@dataclasses.dataclass
class PreparedInput:
    """One input plane (or window of it) as the interpolation reads it."""

    source: Any            # cla.Array (buffer sampling) or cl.Image
    mask: cla.Array | None
    full_shape: tuple[int, int]   # (ny, nx) of the whole image: edges and mirroring
    origin: tuple[int, int] = (0, 0)  # (y0, x0) of the window in the whole image
    shape: tuple[int, int] | None = None  # window (ny, nx)

    def grid_args(self) -> tuple:
        ny, nx = self.full_shape
        y0, x0 = self.origin
        stride = (self.shape or self.full_shape)[1]
        return (np.int32(nx), np.int32(ny), np.int32(x0), np.int32(y0), np.int32(stride))


@dataclasses.dataclass(frozen=True)
class ModeInfo:
    """What one reprojection mode is."""

    order: str
    sampling: str
    coord_precision: str
    fast_math: bool


def order_name(order) -> str:
    """Canonical order name of a name or reproject-style integer."""
    name = _ORDER_ALIASES.get(order, order) if not isinstance(order, bool) else order
    if name not in ORDERS:
        raise ValueError(f"order must be one of {list(ORDERS)} or 0-3, got {order!r}")
    return name


class Reprojector(Operation):
    """Compile-once reprojection of one data dtype with one set of options.

    Parameters
    ----------
    context
        Context, command queue or None.
    dtype
        float32, float64, complex64 or complex128 (working precision).
    order
        ``'nearest-neighbor'``, ``'bilinear'``, ``'biquadratic'``,
        ``'bicubic'`` (scipy's prefiltered B-splines, as reproject; also
        0-3) or ``'bicubic-unfiltered'`` (memo 089's B-spline smoothing
        without prefilter).
    sampling
        ``'buffer'`` (global memory), ``'image'`` (image object, on-grid
        reads) or ``'image-linear'`` (image with a linear-filtering sampler:
        two filtered fetches per 4-tap pass, memo 089 section 2.1; its
        weights have the device's texture precision, 8 bits on NVIDIA).
        Images need float32 data.
    coord_precision
        ``'float64'`` or ``'float32'`` arithmetic of the pixel mapping.
    fast_math
        Build with ``-cl-unsafe-math-optimizations -cl-mad-enable`` and use
        ``native_sqrt``/``native_divide`` in float32 coordinates.
    projections
        (output, input) projection codes for the device pixel map, e.g.
        ``('SIN', 'TAN')``; None builds only the host-map path.
    """

    def __init__(self, context=None, dtype=np.complex64, *, order: str = "bicubic",
                 sampling: str = "buffer", coord_precision: str = "float64",
                 fast_math: bool = False, projections: tuple[str, str] | None = ("SIN", "SIN")):
        super().__init__(context)
        self.dtype = np.dtype(dtype)
        if self.dtype.type not in (np.float32, np.float64, np.complex64, np.complex128):
            raise TypeError(f"data dtype must be float32/64 or complex64/128, not {self.dtype}")
        order = order_name(order)
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
        if coord_precision not in ("float32", "float64"):
            raise ValueError("coord_precision must be 'float32' or 'float64'")
        self.real_dtype = _real_of(self.dtype)
        self.coord_dtype = np.dtype(coord_precision)
        if sampling != "buffer":
            if self.real_dtype != np.float32:
                raise ValueError(f"sampling={sampling!r} needs float32/complex64 data "
                                 "(image objects hold no doubles)")
            if not self.profile.image_support:
                raise ValueError(f"{self.profile.device_name!r} has no image support")
        need_f64 = self.real_dtype == np.float64 or self.coord_dtype == np.float64
        if need_f64 and not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no double precision; use "
                             "coord_precision='float32' and float32/complex64 data")
        self.mode = ModeInfo(order, sampling, coord_precision, bool(fast_math))
        self.spline_order, self.prefilter = ORDERS[order]
        self.projections = tuple(projections) if projections else None
        self.channels = 2 if self.dtype.kind == "c" else 1
        self._options = (("-cl-unsafe-math-optimizations", "-cl-mad-enable",
                          "-cl-no-signed-zeros") if fast_math else ())
        self._need_f64 = need_f64
        self._variants: dict[tuple, dict[str, cl.Kernel]] = {}
        self._preparers: dict[np.dtype, BSplinePrefilter] = {}
        self.scratch = _Scratch(self.queue)
        self.staging = _staging_for(self.context, self.queue)
        self._dummy = cla.zeros(self.queue, (16,), np.uint8)
        self.halo = fir_halo(self.spline_order, self.real_dtype) if self.prefilter else 0
        self.kernels()  # build the default variant now: errors show at construction

    # -- compiled variants ---------------------------------------------------

    def kernels(self, out_dtype=None, footprint_dtype=None) -> dict[str, cl.Kernel]:
        """Kernels writing ``out_dtype`` (default: the working dtype) and,
        when given, a footprint of ``footprint_dtype``."""
        out_real = _real_of(out_dtype if out_dtype is not None else self.dtype)
        foot = None if footprint_dtype is None else {
            "f4": "float", "f8": "double", "u1": "uchar", "b1": "uchar"}[
            f"{np.dtype(footprint_dtype).kind}{np.dtype(footprint_dtype).itemsize}"]
        key = (out_real, foot)
        if key not in self._variants:
            need_f64 = self._need_f64 or out_real == np.float64 or foot == "double"
            proj_out, proj_in = self.projections or (None, None)
            template = KernelTemplate(
                self.queue, "reproject.cl.mako",
                {"real": real_dtype_name(self.real_dtype), "channels": self.channels,
                 "out_real": real_dtype_name(out_real), "foot": foot,
                 "coord": real_dtype_name(self.coord_dtype), "order": self.spline_order,
                 "masked": self.prefilter, "sampling": self.mode.sampling,
                 "proj_out": proj_out, "proj_in": proj_in,
                 "fast_math": self.mode.fast_math, "with_f64": need_f64},
                need_f64=need_f64, options=self._options)
            kernels = {"interpolate_at": template.kernel("interpolate_at")}
            if self.projections:
                kernels["fused"] = template.kernel("reproject_fused")
                kernels["map"] = template.kernel("map_pixels")
            self._variants[key] = kernels
        return self._variants[key]

    def preparer(self, raw_dtype) -> BSplinePrefilter:
        """The input preparation for raw data of ``raw_dtype``."""
        raw_dtype = np.dtype(raw_dtype)
        if raw_dtype not in self._preparers:
            order = self.spline_order if self.prefilter else 3
            self._preparers[raw_dtype] = BSplinePrefilter(self.queue, self.dtype, order,
                                                          raw_dtype)
        return self._preparers[raw_dtype]

    # -- device-side pieces -------------------------------------------------

    def prepare_input(self, plane, full_shape: tuple[int, int] | None = None,
                      origin: tuple[int, int] = (0, 0)) -> PreparedInput:
        """Upload one 2-D plane (host array of any real/complex dtype and byte
        order, or device array), convert it to the working dtype on the
        device, prefilter it if the order needs it, and wrap it as the kernel
        reads it (buffer or image).  ``plane`` may be a window at ``origin``
        of an image of ``full_shape``."""
        shape = tuple(int(n) for n in plane.shape[-2:])
        if len(plane.shape) != 2:
            raise ValueError(f"expected a 2-D plane, got shape {plane.shape}")
        full_shape = tuple(full_shape) if full_shape is not None else shape
        raw, raw_dtype = self._raw_on_device(plane)
        if raw_dtype == self.dtype and not self.prefilter and raw.offset == 0:
            data, mask = raw, None
        elif self.prefilter:
            data, mask = self.preparer(raw_dtype).prepare(raw, shape)
        else:
            data = self.preparer(raw_dtype).convert(raw, self.scratch.get("work", shape,
                                                                           self.dtype))
            mask = None
        source = data if self.mode.sampling == "buffer" else self._to_image(data)
        return PreparedInput(source, mask, full_shape, tuple(origin), shape)

    def _raw_on_device(self, plane) -> tuple[cla.Array, np.dtype]:
        """The plane's raw elements on the device (device arrays as they are)
        and their dtype (byte order included: the device swaps bytes)."""
        if isinstance(plane, cla.Array):
            if not plane.flags.c_contiguous:
                raise ValueError("device input planes must be C-contiguous")
            raw_kind(plane.dtype)
            return plane, plane.dtype
        plane = np.asarray(plane)
        native, swap = raw_kind(plane.dtype)
        host = plane.view(native)  # same bytes, read natively
        name = "work" if native == self.dtype and not swap and not self.prefilter else "upload"
        device = self.scratch.get(name, plane.shape, native)
        self.staging.upload(host, device.data)
        return device, (native if plane.dtype.kind == "b" else plane.dtype)

    def _to_image(self, data: cla.Array) -> cl.Image:
        n_rows, n_cols = data.shape
        order = cl.channel_order.RG if self.channels == 2 else cl.channel_order.R
        image = cl.create_image(self.context, cl.mem_flags.READ_ONLY,
                                cl.ImageFormat(order, cl.channel_type.FLOAT),
                                shape=(n_cols, n_rows))
        cl.enqueue_copy(self.queue, image, data.data, offset=0, origin=(0, 0),
                        region=(n_cols, n_rows))
        return image

    def params_on_device(self, plane_out: CelestialPlane, plane_in: CelestialPlane,
                         frame_rotation: np.ndarray | None = None) -> cla.Array:
        """The pixel-map parameters in the kernel's coordinate type."""
        if self.projections != (plane_out.projection, plane_in.projection):
            raise ValueError(f"this Reprojector maps {self.projections}, not "
                             f"{(plane_out.projection, plane_in.projection)}")
        return cla.to_device(self.queue, pixel_map_params(plane_out, plane_in, frame_rotation)
                             .astype(self.coord_dtype))

    def reproject_plane(self, prepared: PreparedInput, params: cla.Array,
                        shape_out: tuple[int, int], out: cla.Array | None = None,
                        footprint: cla.Array | None = None, row0: int = 0,
                        roundtrip: bool = False, out_offset: int = 0) -> cla.Array:
        """Map and interpolate output rows ``row0 .. row0 + shape_out[0] - 1``
        on the device (fused kernel) into ``out`` (from element ``out_offset``)
        and, when given, ``footprint`` (1 where the output is not NaN)."""
        ny_out, nx_out = (int(n) for n in shape_out)
        out = out if out is not None else cla.empty(self.queue, (ny_out, nx_out), self.dtype)
        kernel = self.kernels(out.dtype, None if footprint is None else footprint.dtype)["fused"]
        kernel(self.queue, self._global_2d((ny_out, nx_out)), _WORK_GROUP_2D, params.data,
               _mem(prepared.source), self._mask(prepared), out.base_data,
               self._dummy.data if footprint is None else footprint.base_data,
               *prepared.grid_args(), np.int32(nx_out), np.int32(ny_out), np.int32(row0),
               np.int32(bool(roundtrip)), self._offset(out, footprint, out_offset))
        return out

    def map_pixels(self, params: cla.Array, shape_out, row0: int = 0,
                   roundtrip: bool = False, scratch: bool = False
                   ) -> tuple[cla.Array, cla.Array]:
        """Input pixel positions (x, y) of output rows ``row0 ..`` on the device
        (in this object's scratch arrays, overwritten by the next call, if
        ``scratch``)."""
        shape_out = tuple(int(n) for n in shape_out)
        if scratch:
            x_in, y_in = (self.scratch.get(name, shape_out, self.coord_dtype)
                          for name in ("x_map", "y_map"))
        else:
            x_in = cla.empty(self.queue, shape_out, self.coord_dtype)
            y_in = cla.empty(self.queue, shape_out, self.coord_dtype)
        self.kernels()["map"](self.queue, self._global_2d(shape_out), _WORK_GROUP_2D,
                              params.data, x_in.data, y_in.data, np.int32(shape_out[1]),
                              np.int32(shape_out[0]), np.int32(row0),
                              np.int32(bool(roundtrip)))
        return x_in, y_in

    def interpolate_at(self, prepared: PreparedInput, x_in: cla.Array, y_in: cla.Array,
                       out: cla.Array | None = None, footprint: cla.Array | None = None,
                       out_offset: int = 0) -> cla.Array:
        """Interpolate a prepared input at device positions ``x_in, y_in``."""
        out = out if out is not None else cla.empty(self.queue, x_in.shape, self.dtype)
        n_out = x_in.size
        kernel = self.kernels(out.dtype, None if footprint is None
                              else footprint.dtype)["interpolate_at"]
        kernel(self.queue, (_round_up(n_out, 64),), None, x_in.data, y_in.data,
               _mem(prepared.source), self._mask(prepared), out.base_data,
               self._dummy.data if footprint is None else footprint.base_data,
               *prepared.grid_args(), np.int32(n_out), self._offset(out, footprint, out_offset))
        return out

    def _mask(self, prepared: PreparedInput):
        return (self._dummy if prepared.mask is None else prepared.mask).data

    @staticmethod
    def _offset(out: cla.Array, footprint: cla.Array | None, out_offset: int) -> np.int64:
        """One element offset for the output and footprint (views must agree)."""
        offset = _element_offset(out) + out_offset
        if footprint is not None and _element_offset(footprint) + out_offset != offset:
            raise ValueError("output and footprint device arrays must start at the same element")
        return np.int64(offset)

    @staticmethod
    def _global_2d(shape_out):
        return (_round_up(shape_out[1], _WORK_GROUP_2D[0]),
                _round_up(shape_out[0], _WORK_GROUP_2D[1]))

    # -- whole arrays --------------------------------------------------------

    def __call__(self, data: np.ndarray, plane_in, plane_out, shape_out: tuple[int, ...],
                 progress: bool = False) -> np.ndarray:
        """Reproject ``data`` (2-D, or N-D with leading axes handled plane by
        plane) from ``plane_in`` to ``plane_out`` (:class:`CelestialPlane`
        objects of this Reprojector's projections and one frame)."""
        shape_out = tuple(shape_out)
        planes = np.asarray(data).reshape((-1,) + data.shape[-2:])
        result = np.empty((planes.shape[0],) + shape_out[-2:], self.dtype)
        params = self.params_on_device(plane_out, plane_in)
        out = self.scratch.get("out", shape_out[-2:], self.dtype)
        for index in _progress(range(planes.shape[0]), progress, "reproject planes"):
            prepared = self.prepare_input(planes[index])
            self.reproject_plane(prepared, params, shape_out[-2:], out=out)
            self.staging.download(out.data, result[index])
        return result.reshape(shape_out)


_stagings: dict[int, PinnedStaging] = {}


def _staging_for(context, queue) -> PinnedStaging:
    """One pinned staging pair per queue (its copies are serialised by it)."""
    if queue.int_ptr not in _stagings:
        _stagings[queue.int_ptr] = PinnedStaging(context, queue)
    return _stagings[queue.int_ptr]


def _mem(source):
    return source.data if isinstance(source, cla.Array) else source


def _progress(iterable, enabled: bool, description: str):
    if not enabled:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=description)


# -- reproject-compatible entry point ------------------------------------------

_default_queue = None
_reprojectors: dict[tuple, Reprojector] = {}


def _queue_for(context):
    global _default_queue
    if context is None:
        if _default_queue is None:
            _default_queue = resolve_queue(None)
        return _default_queue
    return resolve_queue(context)


def release_caches() -> None:
    """Drop the compiled Reprojectors that ``reproject_interp`` keeps, with
    their device scratch buffers and pinned host staging."""
    _reprojectors.clear()
    _stagings.clear()


def _reprojector(queue, **options) -> Reprojector:
    key = (queue.int_ptr,) + tuple(sorted(options.items()))
    if key not in _reprojectors:
        _reprojectors[key] = Reprojector(queue, **options)
    return _reprojectors[key]


def reproject_interp(input_data, output_projection, shape_out=None, order="bilinear", *,
                     hdu_in: int | str = 0, return_footprint: bool = True,
                     output_array=None, output_footprint=None,
                     roundtrip_coords: bool = True, block_size=None, parallel=False,
                     return_type: str | None = None, sampling: str = "buffer",
                     coord_precision: str = "float64", fast_math: bool = False,
                     context=None, progress: bool = False):
    """Reproject an image or cube to another projection on an OpenCL device.

    Drop-in for ``reproject.reproject_interp``.

    Parameters
    ----------
    input_data
        ``(array, wcs)`` with an :class:`astropy.wcs.WCS`, a FITS header, an
        APE-14 WCS or a :class:`~clgrid.reproject.wcs_params.CelestialPlane`; a FITS
        HDU, HDUList or file name.  The array may be a host numpy array of
        any integer/float/complex dtype and byte order (converted on the
        device) or a :class:`pyopencl.array.Array` (read in place).  Leading
        array axes beyond the WCS's are planes sharing one pixel map.
    output_projection
        WCS, FITS header (with NAXISn when ``shape_out`` is None) or
        :class:`~clgrid.reproject.wcs_params.CelestialPlane`.
    shape_out
        Output shape (numpy order); default from the header or
        ``output_array``.  Leading plane axes of the input are prepended
        when missing.
    order
        ``'nearest-neighbor'``, ``'bilinear'`` (default, as reproject),
        ``'biquadratic'``, ``'bicubic'`` (also 0-3) or
        ``'bicubic-unfiltered'``.
    hdu_in
        HDU of an HDUList or file.
    return_footprint
        Also return the footprint (1 where the output is not NaN).
    output_array, output_footprint
        Arrays to write into (host numpy of a float/complex dtype, or
        :class:`pyopencl.array.Array` on this device): written in place and
        returned, no extra copy.
    roundtrip_coords
        As reproject: blank output pixels whose input position does not map
        back to within one pixel of them (done on the device for device
        projections).
    block_size
        Output rows per block (reproject's ``(rows, cols)``: full-width
        bands of ``rows`` are used).  None: one block, or bands sized to the
        device memory when the image does not fit.  Results do not depend
        on it.
    parallel, return_type
        Accepted for compatibility: the device is the parallelism, and
        only ``'numpy'`` (or None) results exist.
    sampling, coord_precision, fast_math
        Speed options of :class:`Reprojector` (memo 089's trade-offs).
    context
        Context or command queue; default one picked by
        :func:`clgrid.create_context`.
    progress
        Show a progress bar over planes.

    Returns
    -------
    array or (array, footprint)
        Output in the input's precision (float32 or complex64 for 32-bit or
        integer input, float64/complex128 for 64-bit), or ``output_array``'s
        dtype; NaN where unmapped or where the interpolation stencil touches
        a non-finite input pixel.  The footprint has the output's real dtype
        (or ``output_footprint``'s).
    """
    if return_type not in (None, "numpy"):
        raise ValueError("clgrid.reproject_interp returns numpy (or device) arrays only")
    del parallel
    order = order_name(order)
    data, wcs_in = parse_input(input_data, hdu_in)
    wcs_out, shape_out = parse_output(output_projection, shape_out, output_array)
    queue = _queue_for(context)
    job = plan(data, wcs_in, wcs_out, shape_out, roundtrip_coords, ORDERS[order][0])
    dtype = _working_dtype(data.dtype)
    shape_caller = job.shape_out if job.permutation_out is None else \
        tuple(job.shape_out[k] for k in np.argsort(job.permutation_out))
    out = _output(output_array, shape_caller, dtype, "output_array")
    on_device = isinstance(out, cla.Array)
    if on_device and job.permutation_out is not None:
        raise ValueError("device output arrays must have the celestial axes last")
    footprint = None
    if return_footprint:
        foot_dtype = _real_of(out.dtype)
        if output_footprint is None and on_device:
            output_footprint = cla.empty(queue, shape_caller, foot_dtype)
        footprint = _output(output_footprint, shape_caller, foot_dtype, "output_footprint")
        if isinstance(footprint, cla.Array) != on_device:
            raise ValueError("output_array and output_footprint must both be host arrays "
                             "or both device arrays")
    projections = job.projections
    operation = _reprojector(queue, dtype=dtype, order=order, sampling=sampling,
                             coord_precision=coord_precision, fast_math=fast_math,
                             projections=projections)
    _run(operation, job, out, footprint, block_size, progress)
    if not return_footprint:
        return out
    return out, footprint


def _working_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return np.dtype(np.complex128 if dtype.itemsize > 8 else np.complex64)
    if dtype.kind == "f" and dtype.itemsize >= 8:
        return np.dtype(np.float64)
    if dtype.kind in "fiub":
        return np.dtype(np.float32)
    raise TypeError(f"cannot reproject data of dtype {dtype}")


def _output(given, shape, dtype, name):
    """The caller's array (checked) or a new host array."""
    if given is None:
        return np.empty(shape, dtype)
    if tuple(given.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(given.shape)}, expected {tuple(shape)}")
    if np.dtype(given.dtype).kind not in "fc" or (np.dtype(given.dtype).kind == "c") != (
            np.dtype(dtype).kind == "c" and name == "output_array"):
        raise ValueError(f"{name} must be a {'complex' if np.dtype(dtype).kind == 'c' else 'float'}"
                         f" array, got {given.dtype}")
    if isinstance(given, np.ndarray):
        if not given.dtype.isnative:
            raise ValueError(f"{name} must be in native byte order")
        if not given.flags.writeable:
            raise ValueError(f"{name} is read-only")
    elif not given.flags.c_contiguous:
        raise ValueError(f"{name} (device array) must be C-contiguous")
    return given


# -- running a plan ------------------------------------------------------------

def _run(operation: Reprojector, job: Job, out, footprint, block_size, progress):
    ny_out, nx_out = job.shape_out[-2:]
    planes_out = job.canonical(out)
    feet = job.canonical(footprint) if footprint is not None else None
    params = None
    if job.device_map is not None:
        params = operation.params_on_device(*job.device_map)
    bands = _bands(operation, job, block_size, out)
    device_out = isinstance(out, cla.Array)
    for index in _progress(range(planes_out.shape[0]), progress, "reproject planes"):
        plane = job.plane(index)
        for row0, row1 in bands:
            _run_band(operation, job, plane, params, (row0, row1), planes_out, feet, index,
                      device_out, len(bands) > 1)
    job.finish(out, planes_out)
    if footprint is not None:
        job.finish(footprint, feet)


def _run_band(operation, job, plane, params, band, planes_out, feet, index, device_out,
              windowed):
    row0, row1 = band
    ny_out, nx_out = job.shape_out[-2:]
    shape_band = (row1 - row0, nx_out)
    host_map = None
    if params is None:
        host_map = job.host_map(row0, row1)
    # Device inputs are read whole (a window of one would not be contiguous).
    window = _input_window(operation, job, params, host_map, band) \
        if windowed and not isinstance(plane, cla.Array) else \
        (0, plane.shape[-2], 0, plane.shape[-1])
    if window is None:  # nothing of the input reaches this band
        _fill(planes_out, index, band, np.nan)
        if feet is not None:
            _fill(feet, index, band, 0)
        return
    y0, y1, x0, x1 = window
    full = plane.shape[-2:]
    source = plane if (y0, y1, x0, x1) == (0, full[0], 0, full[1]) else plane[y0:y1, x0:x1]
    prepared = operation.prepare_input(source, full_shape=full, origin=(y0, x0))
    offset = (index * ny_out + row0) * nx_out
    if device_out:
        target, foot_target, target_offset = planes_out, feet, offset
    else:
        target = operation.scratch.get("out", shape_band, planes_out.dtype)
        foot_target = None if feet is None else operation.scratch.get("foot", shape_band,
                                                                       feet.dtype)
        target_offset = 0
    if params is not None:
        operation.reproject_plane(prepared, params, shape_band, out=target,
                                  footprint=foot_target, row0=row0,
                                  roundtrip=job.roundtrip, out_offset=target_offset)
    else:
        x_map, y_map = (operation.scratch.get(name, shape_band, operation.coord_dtype)
                        for name in ("x_map", "y_map"))
        for device, host in ((x_map, host_map[0]), (y_map, host_map[1])):
            operation.staging.upload(host.astype(operation.coord_dtype, copy=False), device.data)
        operation.interpolate_at(prepared, x_map, y_map, out=target, footprint=foot_target,
                                 out_offset=target_offset)
    if not device_out:
        operation.staging.download(target.data, planes_out[index, row0:row1])
        if feet is not None:
            operation.staging.download(foot_target.data, feet[index, row0:row1])


def _fill(array, index, band, value):
    part = array[index, band[0]:band[1]]
    if isinstance(part, cla.Array):
        part.fill(value)
    else:
        part[...] = value


def _bands(operation, job, block_size, out) -> list[tuple[int, int]]:
    """Output row bands: the caller's block size, else as many as device
    memory needs (one when the image fits comfortably)."""
    ny_out, nx_out = job.shape_out[-2:]
    if block_size is not None:
        rows = int(block_size[-2] if np.ndim(block_size) else block_size)
        if rows < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
    else:
        item = np.dtype(operation.dtype).itemsize
        in_bytes = job.plane_shape[0] * job.plane_shape[1] * (3 * item + 2 + job.raw_itemsize)
        out_bytes = ny_out * nx_out * (2 * item + (16 if job.device_map is None else 0))
        budget = 0.4 * operation.profile.global_mem_bytes
        limit = operation.profile.max_alloc_bytes
        largest = max(job.plane_shape[0] * job.plane_shape[1] * item, ny_out * nx_out * item)
        if in_bytes + out_bytes <= budget and largest <= limit:
            return [(0, ny_out)]
        parts = max(2, math.ceil((in_bytes + out_bytes) / budget),
                    math.ceil(largest / limit))
        rows = -(-ny_out // parts)
    return [(start, min(start + rows, ny_out)) for start in range(0, ny_out, rows)]


def _input_window(operation, job, params, host_map, band):
    """(y0, y1, x0, x1) of the input the band's interpolation reads
    (stencil plus the prefilter's reach), or None when it reads nothing."""
    row0, row1 = band
    if params is not None:
        x_map, y_map = operation.map_pixels(params, (row1 - row0, job.shape_out[-1]), row0,
                                            job.roundtrip, scratch=True)
        bounds = [_nan_min_max(operation.queue, axis) for axis in (y_map, x_map)]
    else:
        with np.errstate(invalid="ignore"):
            bounds = [(np.nanmin(axis, initial=np.inf), np.nanmax(axis, initial=-np.inf))
                      for axis in host_map[::-1]]
    if not all(np.isfinite(b).all() for b in bounds):
        return None
    margin = 2 + operation.halo + 1
    ny, nx = job.plane_shape
    (ymin, ymax), (xmin, xmax) = bounds
    y0, y1 = max(0, int(math.floor(ymin)) - margin), min(ny, int(math.ceil(ymax)) + margin + 1)
    x0, x1 = max(0, int(math.floor(xmin)) - margin), min(nx, int(math.ceil(xmax)) + margin + 1)
    if y0 >= y1 or x0 >= x1:
        return None
    return y0, y1, x0, x1


_minmax_kernels: dict[tuple, Any] = {}


def _nan_min_max(queue, values: cla.Array) -> tuple[float, float]:
    """Smallest and largest non-NaN value of a device array (inf, -inf if none)."""
    from pyopencl.reduction import ReductionKernel
    key = (queue.context.int_ptr, values.dtype)
    if key not in _minmax_kernels:
        name = real_dtype_name(values.dtype)
        preamble = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if name == "double" else ""
        _minmax_kernels[key] = tuple(
            ReductionKernel(queue.context, values.dtype, neutral=neutral, reduce_expr=expr,
                            map_expr="x[i]", arguments=f"__global const {name} *x",
                            preamble=preamble)
            for neutral, expr in (("INFINITY", "fmin(a, b)"), ("-INFINITY", "fmax(a, b)")))
    low, high = _minmax_kernels[key]
    return float(low(values, queue=queue).get()), float(high(values, queue=queue).get())


__all__ = ["BSplinePrefilter", "ORDERS", "PreparedInput", "Reprojector", "SAMPLINGS",
           "release_caches", "reproject_interp"]

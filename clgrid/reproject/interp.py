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

This module holds :class:`Reprojector`, the compile-once operation (the
pixel-map and interpolation kernels, ``templates/reproject.cl.mako``); the
prefilter is in :mod:`.prefilter`, the ``reproject_interp`` call in
:mod:`.driver`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.guard import one_thread_at_a_time
from ..device.hostio import PinnedStaging
from ..device.kernels import KernelTemplate, Operation, launch, real_dtype_name
from .wcs_params import CelestialPlane, pixel_map_params
from .prefilter import (BSplinePrefilter, ORDERS, SAMPLINGS, _ORDER_ALIASES, _Scratch,
                        _WORK_GROUP_2D, _element_offset, _real_of, _round_up, fir_halo, raw_kind)


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

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

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
        # the operation's own: a staging shared by two calls would mix their data
        self.staging = PinnedStaging(self.context, self.queue)
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

    @one_thread_at_a_time
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

    @one_thread_at_a_time
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

    @one_thread_at_a_time
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

    @one_thread_at_a_time
    def interpolate_at(self, prepared: PreparedInput, x_in: cla.Array, y_in: cla.Array,
                       out: cla.Array | None = None, footprint: cla.Array | None = None,
                       out_offset: int = 0) -> cla.Array:
        """Interpolate a prepared input at device positions ``x_in, y_in``."""
        out = out if out is not None else cla.empty(self.queue, x_in.shape, self.dtype)
        n_out = x_in.size
        kernel = self.kernels(out.dtype, None if footprint is None
                              else footprint.dtype)["interpolate_at"]
        launch(kernel, self.queue, (n_out,), x_in.data, y_in.data, _mem(prepared.source), self._mask(prepared), out.base_data,
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

    @one_thread_at_a_time
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


def _mem(source):
    return source.data if isinstance(source, cla.Array) else source


def _progress(iterable, enabled: bool, description: str):
    if not enabled:
        return iterable
    from tqdm import tqdm
    return tqdm(iterable, desc=description)


__all__ = ["ModeInfo", "PreparedInput", "Reprojector", "order_name"]

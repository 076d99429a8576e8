"""Reprojection of images between celestial projections on an OpenCL device.

Follows SKA SDP memo 089 (GPU reprojection) and the conventions of
``reproject.reproject_interp``: for every output pixel the input pixel is
found (output pixel -> intermediate -> native -> celestial -> input native ->
input intermediate -> input pixel), then the input is interpolated there.
SIN and TAN planes are mapped on the device; any other WCS is mapped on the
host by astropy, and only the interpolation runs on the device.

``'bicubic'`` equals reproject's (scipy's cubic B-spline with prefilter): the
B-spline coefficients are computed on the device with the recursive filter
along columns and rows, mirror boundary, then evaluated with the memo's four
weights per axis.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .device import resolve_queue
from .kernels import KernelTemplate, Operation, real_dtype_name
from .wcs_params import CelestialPlane, from_astropy, pixel_map_params

#: Interpolation orders: name -> (spline order, prefilter).
ORDERS = {"nearest-neighbor": (0, False), "bilinear": (1, False), "bicubic": (3, True),
          "bicubic-unfiltered": (3, False)}
_ORDER_ALIASES = {0: "nearest-neighbor", 1: "bilinear", 3: "bicubic"}
SAMPLINGS = ("buffer", "image", "image-linear")
_POLE = math.sqrt(3.0) - 2.0
_TRANSPOSE_TILE = 16
_WORK_GROUP_2D = (16, 8)


def _horizon(real_dtype: np.dtype) -> int:
    """Terms after which pole**k is below the data type's resolution."""
    return int(math.ceil(math.log(np.finfo(real_dtype).eps) / math.log(abs(_POLE)))) + 1


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


class BSplinePrefilter(Operation):
    """Compile-once cubic B-spline prefilter of 2-D images, in place.

    Equivalent to ``scipy.ndimage.spline_filter(image, order=3,
    mode='mirror')`` (also what scipy uses for ``mode='constant'``).

    Parameters
    ----------
    context
        Context, command queue or None.
    dtype
        float32, float64, complex64 or complex128.
    """

    def __init__(self, context=None, dtype=np.float32):
        super().__init__(context)
        self.dtype = np.dtype(dtype)
        real = _real_of(self.dtype)
        self.template = KernelTemplate(
            self.queue, "bspline_prefilter.cl.mako",
            {"real": real_dtype_name(real), "channels": 2 if self.dtype.kind == "c" else 1,
             "horizon": _horizon(real), "tile": _TRANSPOSE_TILE,
             "with_f64": real == np.float64},
            need_f64=real == np.float64)
        self._filter = self.template.kernel("prefilter_columns")
        self._transpose = self.template.kernel("transpose")

    def __call__(self, image: cla.Array, scratch: cla.Array | None = None) -> cla.Array:
        """Replace ``image`` (2-D device array of this dtype) by its
        B-spline coefficients; ``scratch`` (same size) avoids an allocation."""
        if image.dtype != self.dtype or image.ndim != 2:
            raise ValueError(f"expected a 2-D {self.dtype} device array, got {image.dtype} "
                             f"{image.shape}")
        n_rows, n_cols = image.shape
        if scratch is None or scratch.size < image.size or scratch.dtype != self.dtype:
            scratch = cla.empty(self.queue, (n_cols, n_rows), self.dtype)
        self._columns(image, n_rows, n_cols)
        self._transposed(image, scratch, n_rows, n_cols)
        self._columns(scratch, n_cols, n_rows)
        self._transposed(scratch, image, n_cols, n_rows)
        return image

    def _columns(self, array, n_rows, n_cols):
        size = _round_up(n_cols, 64)
        self._filter(self.queue, (size,), None, array.data, np.int32(n_rows), np.int32(n_cols))

    def _transposed(self, source, target, n_rows, n_cols):
        tile = _TRANSPOSE_TILE
        self._transpose(self.queue, (_round_up(n_cols, tile), _round_up(n_rows, tile)),
                        (tile, tile), source.data, target.data, np.int32(n_rows),
                        np.int32(n_cols))


@dataclasses.dataclass(frozen=True)
class ModeInfo:
    """What one reprojection mode is."""

    order: str
    sampling: str
    coord_precision: str
    fast_math: bool


class Reprojector(Operation):
    """Compile-once reprojection of one data dtype with one set of options.

    Parameters
    ----------
    context
        Context, command queue or None.
    dtype
        float32, float64, complex64 or complex128 (data and output).
    order
        ``'nearest-neighbor'``, ``'bilinear'``, ``'bicubic'`` (scipy's
        prefiltered cubic B-spline, as reproject) or ``'bicubic-unfiltered'``
        (memo 089's B-spline smoothing without prefilter).
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
        order = _ORDER_ALIASES.get(order, order)
        if order not in ORDERS:
            raise ValueError(f"order must be one of {list(ORDERS)}, got {order!r}")
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
        options = (("-cl-unsafe-math-optimizations", "-cl-mad-enable", "-cl-no-signed-zeros")
                   if fast_math else ())
        proj_out, proj_in = self.projections or (None, None)
        self.template = KernelTemplate(
            self.queue, "reproject.cl.mako",
            {"real": real_dtype_name(self.real_dtype), "channels": self.channels,
             "coord": real_dtype_name(self.coord_dtype), "order": self.spline_order,
             "sampling": sampling, "proj_out": proj_out, "proj_in": proj_in,
             "fast_math": bool(fast_math), "with_f64": need_f64},
            need_f64=need_f64, options=options)
        self._prefilter = BSplinePrefilter(self.queue, self.dtype) if self.prefilter else None
        self._interpolate = self.template.kernel("interpolate_at")
        if self.projections:
            self._fused = self.template.kernel("reproject_fused")
            self._map = self.template.kernel("map_pixels")

    # -- device-side pieces -------------------------------------------------

    def prepare_input(self, plane: np.ndarray | cla.Array) -> Any:
        """Upload one 2-D plane, prefilter it if the order needs it, and wrap
        it as the kernel reads it (buffer or image)."""
        if isinstance(plane, cla.Array):
            if plane.dtype != self.dtype:
                raise TypeError(f"device plane has dtype {plane.dtype}, expected {self.dtype}")
            data = plane.copy() if self.prefilter else plane
        else:
            data = cla.to_device(self.queue, np.ascontiguousarray(plane, self.dtype))
        if self._prefilter is not None:
            self._prefilter(data)
        if self.mode.sampling == "buffer":
            return data
        return self._to_image(data)

    def _to_image(self, data: cla.Array) -> cl.Image:
        n_rows, n_cols = data.shape
        order = cl.channel_order.RG if self.channels == 2 else cl.channel_order.R
        image = cl.create_image(self.context, cl.mem_flags.READ_ONLY,
                         cl.ImageFormat(order, cl.channel_type.FLOAT), shape=(n_cols, n_rows))
        cl.enqueue_copy(self.queue, image, data.data, offset=0, origin=(0, 0),
                        region=(n_cols, n_rows))
        return image

    def reproject_plane(self, source, params: cla.Array, shape_in, shape_out,
                        out: cla.Array | None = None) -> cla.Array:
        """Map and interpolate one plane on the device (fused kernel)."""
        out = self._output(out, shape_out)
        ny_out, nx_out = shape_out
        self._fused(self.queue, self._global_2d(shape_out), None,
                    params.data, _mem(source), out.data, np.int32(shape_in[1]),
                    np.int32(shape_in[0]), np.int32(nx_out), np.int32(ny_out))
        return out

    def map_pixels(self, params: cla.Array, shape_out) -> tuple[cla.Array, cla.Array]:
        """Input pixel positions (x, y) of every output pixel, on the device."""
        x_in = cla.empty(self.queue, shape_out, self.coord_dtype)
        y_in = cla.empty(self.queue, shape_out, self.coord_dtype)
        self._map(self.queue, self._global_2d(shape_out), None, params.data, x_in.data,
                  y_in.data, np.int32(shape_out[1]), np.int32(shape_out[0]))
        return x_in, y_in

    def interpolate_at(self, source, x_in: cla.Array, y_in: cla.Array, shape_in,
                       out: cla.Array | None = None) -> cla.Array:
        """Interpolate a prepared input at device positions ``x_in, y_in``."""
        out = self._output(out, x_in.shape)
        n_out = x_in.size
        self._interpolate(self.queue, (_round_up(n_out, 64),), None, x_in.data, y_in.data,
                          _mem(source), out.data, np.int32(shape_in[1]),
                          np.int32(shape_in[0]), np.int32(n_out))
        return out

    def params_on_device(self, plane_out: CelestialPlane, plane_in: CelestialPlane):
        """The pixel-map parameters in the kernel's coordinate type."""
        if self.projections != (plane_out.projection, plane_in.projection):
            raise ValueError(f"this Reprojector maps {self.projections}, not "
                             f"{(plane_out.projection, plane_in.projection)}")
        return cla.to_device(self.queue, pixel_map_params(plane_out, plane_in)
                             .astype(self.coord_dtype))

    def _output(self, out, shape):
        if out is None:
            return cla.empty(self.queue, tuple(shape), self.dtype)
        if out.dtype != self.dtype or out.shape != tuple(shape):
            raise ValueError(f"out must be {self.dtype} {tuple(shape)}")
        return out

    @staticmethod
    def _global_2d(shape_out):
        return (_round_up(shape_out[1], _WORK_GROUP_2D[0]),
                _round_up(shape_out[0], _WORK_GROUP_2D[1]))

    # -- whole arrays --------------------------------------------------------

    def __call__(self, data: np.ndarray, plane_in, plane_out, shape_out: tuple[int, ...],
                 progress: bool = False) -> np.ndarray:
        """Reproject ``data`` (2-D, or N-D with leading non-celestial axes
        handled plane by plane) from ``plane_in`` to ``plane_out``.

        ``plane_in``/``plane_out`` are :class:`CelestialPlane` objects (device
        pixel map) or a host pixel map ``(x_in, y_in)`` float64 arrays of the
        output's celestial shape.
        """
        shape_in = data.shape[-2:]
        celestial_out = tuple(shape_out[-2:])
        planes = data.reshape((-1,) + shape_in)
        result = np.empty((planes.shape[0],) + celestial_out, self.dtype)
        if isinstance(plane_in, CelestialPlane):
            params = self.params_on_device(plane_out, plane_in)
            if planes.shape[0] == 1:
                source = self.prepare_input(planes[0])
                self.reproject_plane(source, params, shape_in, celestial_out).get(
                    ary=result[0])
                return result.reshape(shape_out)
            x_in, y_in = self.map_pixels(params, celestial_out)
        else:
            x_in, y_in = (cla.to_device(self.queue, np.ascontiguousarray(c, self.coord_dtype))
                          for c in plane_in)
        out = cla.empty(self.queue, celestial_out, self.dtype)
        for index in _progress(range(planes.shape[0]), progress, "reproject planes"):
            source = self.prepare_input(planes[index])
            self.interpolate_at(source, x_in, y_in, shape_in, out=out).get(ary=result[index])
        return result.reshape(shape_out)


def _mem(source):
    return source.data if isinstance(source, cla.Array) else source


def _real_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64)


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


def _reprojector(queue, **options) -> Reprojector:
    key = (queue.int_ptr,) + tuple(sorted(options.items()))
    if key not in _reprojectors:
        _reprojectors[key] = Reprojector(queue, **options)
    return _reprojectors[key]


def reproject_interp(input_data, output_projection, shape_out=None, order="bicubic", *,
                     hdu_in: int | str = 0, return_footprint: bool = True,
                     roundtrip_coords: bool = True, sampling: str = "buffer",
                     coord_precision: str = "float64", fast_math: bool = False,
                     context=None, progress: bool = False):
    """Reproject an image (or cube) to another projection on an OpenCL device.

    Drop-in for ``reproject.reproject_interp``.

    Parameters
    ----------
    input_data
        ``(array, wcs)`` with an :class:`astropy.wcs.WCS`, a FITS header or a
        :class:`~clgrid.wcs_params.CelestialPlane`; or a FITS HDU / HDUList /
        file name.  Real or complex; leading axes beyond the two celestial
        ones are planes reprojected with one shared pixel map.
    output_projection
        WCS, FITS header (with NAXISn when ``shape_out`` is None) or
        :class:`~clgrid.wcs_params.CelestialPlane`.
    shape_out
        Output shape (planes first, as numpy); default from the header.
    order
        ``'nearest-neighbor'``, ``'bilinear'``, ``'bicubic'`` (as reproject,
        also 0/1/3) or ``'bicubic-unfiltered'``.
    roundtrip_coords
        Host (astropy) mapping only: blank pixels whose coordinates do not
        round-trip, as reproject.  The device map instead rejects points on
        the far side of the projection (wcslib's bounds check).
    sampling, coord_precision, fast_math
        Speed options of :class:`Reprojector` (memo 089's trade-offs).
    context
        Context or command queue; default one picked by
        :func:`clgrid.create_context`.
    progress
        Show a progress bar over cube planes.

    Returns
    -------
    array, footprint
        Output of the input's precision (float32 or complex64 for 32-bit or
        integer input), NaN where unmapped; footprint 1.0 where finite, else
        0.0 (as reproject: a NaN input value also gives footprint 0).
    """
    data, wcs_in = _parse_input(input_data, hdu_in)
    wcs_out, shape_out = _parse_output(output_projection, shape_out)
    dtype = _working_dtype(data.dtype)
    data = np.asarray(data, dtype)
    _check_shapes(data.shape, shape_out)
    _warn_non_finite(data)
    queue = _queue_for(context)
    plane_in, plane_out = _as_plane(wcs_in), _as_plane(wcs_out)
    if plane_in is not None and plane_out is not None and plane_in.frame == plane_out.frame:
        projections = (plane_out.projection, plane_in.projection)
        mapping_in, mapping_out = plane_in, plane_out
    else:
        projections = None
        mapping_in = _host_pixel_map(wcs_in, wcs_out, shape_out[-2:], roundtrip_coords)
        mapping_out = None
    operation = _reprojector(queue, dtype=dtype, order=order, sampling=sampling,
                             coord_precision=coord_precision, fast_math=fast_math,
                             projections=projections)
    result = operation(data, mapping_in, mapping_out, tuple(shape_out), progress=progress)
    if not return_footprint:
        return result
    return result, np.isfinite(result).astype(float)


def _working_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return np.dtype(np.complex128 if dtype.itemsize > 8 else np.complex64)
    if dtype.kind == "f" and dtype.itemsize >= 8:
        return np.dtype(np.float64)
    if dtype.kind in "fiub":
        return np.dtype(np.float32)
    raise TypeError(f"cannot reproject data of dtype {dtype}")


def _check_shapes(shape_in, shape_out):
    if len(shape_in) < 2:
        raise ValueError(f"input data must have at least 2 dimensions, got shape {shape_in}")
    if len(shape_in) != len(shape_out):
        raise ValueError(f"input {shape_in} and output {tuple(shape_out)} shapes must have "
                         "the same number of dimensions")
    if tuple(shape_in[:-2]) != tuple(shape_out[:-2]):
        raise ValueError(f"non-celestial axes must match: input {shape_in[:-2]}, "
                         f"output {tuple(shape_out[:-2])}")
    if min(shape_in[-2:]) < 1 or min(shape_out[-2:]) < 1:
        raise ValueError("empty celestial axes")


def _warn_non_finite(data):
    bad = int(np.count_nonzero(~np.isfinite(data)))
    if bad:
        warnings.warn(f"input has {bad} NaN/Inf pixels; they propagate to the output as in "
                      "reproject (for 'bicubic' the prefilter spreads them along rows and "
                      "columns)", RuntimeWarning, stacklevel=3)


def _parse_input(input_data, hdu_in):
    if isinstance(input_data, tuple) and len(input_data) == 2:
        data, wcs = input_data
        return np.asarray(data), _as_wcs(wcs)
    if isinstance(input_data, str):
        from astropy.io import fits
        with fits.open(input_data) as hdulist:
            return _parse_input(hdulist[hdu_in], hdu_in)
    if hasattr(input_data, "__getitem__") and hasattr(input_data, "index_of"):
        return _parse_input(input_data[hdu_in], hdu_in)  # HDUList
    if hasattr(input_data, "data") and hasattr(input_data, "header"):
        return np.asarray(input_data.data), _as_wcs(input_data.header)
    raise TypeError("input_data must be (array, wcs), an HDU, an HDUList or a file name")


def _parse_output(output_projection, shape_out):
    wcs = _as_wcs(output_projection)
    if shape_out is None:
        header = output_projection
        if not hasattr(header, "get") or header.get("NAXIS") is None:
            raise ValueError("give shape_out (the output projection has no NAXISn)")
        shape_out = tuple(int(header[f"NAXIS{i}"]) for i in range(header["NAXIS"], 0, -1))
    return wcs, tuple(int(n) for n in shape_out)


def _as_wcs(wcs):
    if isinstance(wcs, CelestialPlane):
        return wcs
    from astropy.wcs import WCS
    if not isinstance(wcs, WCS):
        wcs = WCS(wcs)
    if not wcs.has_celestial:
        raise ValueError("the WCS has no celestial axes: reproject_interp needs a celestial WCS")
    if wcs.naxis != 2:
        if wcs.celestial.naxis != 2 or wcs.wcs.lng != 0 or wcs.wcs.lat != 1:
            raise ValueError("the two celestial axes must be the first two WCS axes")
        wcs = wcs.celestial  # extra axes are planes, mapped identically
    return wcs


def _as_plane(wcs) -> CelestialPlane | None:
    if isinstance(wcs, CelestialPlane):
        return wcs
    return from_astropy(wcs)


def _host_pixel_map(wcs_in, wcs_out, shape_out, roundtrip: bool):
    """astropy's pixel map (reproject's own), for projections the device lacks."""
    from astropy.wcs.utils import pixel_to_pixel
    if isinstance(wcs_in, CelestialPlane) or isinstance(wcs_out, CelestialPlane):
        raise ValueError("mixing CelestialPlane and other WCS needs the same frame")
    y_out, x_out = np.indices(shape_out, dtype=float)
    x_in, y_in = pixel_to_pixel(wcs_out, wcs_in, x_out, y_out)
    if roundtrip:
        x_back, y_back = pixel_to_pixel(wcs_in, wcs_out, x_in, y_in)
        with np.errstate(invalid="ignore"):
            reset = (np.abs(x_back - x_out) > 1) | (np.abs(y_back - y_out) > 1)
        x_in, y_in = np.where(reset, np.nan, x_in), np.where(reset, np.nan, y_in)
    return x_in, y_in


__all__ = ["BSplinePrefilter", "ORDERS", "Reprojector", "SAMPLINGS", "reproject_interp"]

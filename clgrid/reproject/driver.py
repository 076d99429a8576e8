"""``reproject_interp``: reproject's call on the device.

Parses the call (:mod:`clgrid.reproject.plan`), keeps one compiled
:class:`~clgrid.reproject.interp.Reprojector` per queue and options, cuts
the output into bands that fit the device, stages the input through pinned
memory and fills the output and footprint.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

import numpy as np
import pyopencl.array as cla

from ..device.profiles import context_of, resolve_queue
from ..device.kernels import real_dtype_name
from .plan import Job, parse_input, parse_output, plan
from .interp import Reprojector, _progress, order_name
from .prefilter import ORDERS, _real_of


# Idle Reprojectors by (context, device, options): a call takes one (one on
# its own queue first) or builds one, and gives it back; a Reprojector holds
# device scratch, pinned staging and kernel objects, so two calls at once
# never share one.  At most _IDLE_PER_KEY are kept idle a key.
_reprojectors: dict[tuple, list[Reprojector]] = {}
_reprojectors_lock = threading.Lock()
_IDLE_PER_KEY = 4


def release_caches() -> None:
    """Drop the compiled Reprojectors that ``reproject_interp`` keeps, with
    their device scratch buffers and pinned host staging."""
    with _reprojectors_lock:
        _reprojectors.clear()


@contextlib.contextmanager
def _reprojector(queue, **options):
    """A Reprojector of ``options`` for one call on ``queue`` (see above)."""
    key = (context_of(queue).int_ptr, queue.device.int_ptr) + tuple(sorted(options.items()))
    with _reprojectors_lock:
        idle = _reprojectors.setdefault(key, [])
        mine = [op for op in idle if op.queue.int_ptr == queue.int_ptr]
        operation = mine[-1] if mine else None
        if operation is not None:
            idle.remove(operation)
    if operation is None:
        operation = Reprojector(queue, **options)
    try:
        yield operation
    finally:
        with _reprojectors_lock:
            idle = _reprojectors.setdefault(key, [])
            idle.append(operation)
            del idle[:-_IDLE_PER_KEY]


def reproject_interp(input_data, output_projection, shape_out=None, order="bilinear", *,
                     hdu_in: int | str = 0, return_footprint: bool = True,
                     output_array=None, output_footprint=None,
                     roundtrip_coords: bool = True, block_size=None, parallel=False,
                     return_type: str | None = None, sampling: str = "buffer",
                     coord_precision: str = "float64", fast_math: bool = False,
                     context=None, progress: bool = False, deterministic: bool = True):
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
    deterministic
        Accepted for symmetry with the gridders; always holds: every output
        pixel is computed by one work-item from its input stencil in a fixed
        order, the B-spline prefilter runs one work-item per image line (no
        atomics, no reductions across work-items), so repeated
        calls give bitwise-identical outputs on the same device and driver.
        False changes nothing.

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
    if deterministic not in (True, False):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    del parallel
    order = order_name(order)
    data, wcs_in = parse_input(input_data, hdu_in)
    wcs_out, shape_out = parse_output(output_projection, shape_out, output_array)
    queue = resolve_queue(context)
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
    with _reprojector(queue, dtype=dtype, order=order, sampling=sampling,
                      coord_precision=coord_precision, fast_math=fast_math,
                      projections=projections) as operation:
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


__all__ = ["release_caches", "reproject_interp"]

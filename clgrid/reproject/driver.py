"""``reproject_interp``: reproject's call on the device.

Parses the call (:mod:`clgrid.reproject.plan`), keeps one compiled
:class:`~clgrid.reproject.interp.Reprojector` per queue and options, cuts
the output into bands that fit the device, stages the input through pinned
memory and fills the output and footprint.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from typing import Any

import numpy as np
import pyopencl.array as cla

from ..device.profiles import DeviceProfile, context_of, resolve_queue
from ..device.kernels import quiet_builds, real_dtype_name
from .plan import Job, parse_input, parse_output, plan
from .interp import Reprojector, _progress, order_name
from .prefilter import ORDERS, _real_of


logger = logging.getLogger(__name__)

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
        # Drivers print build logs on success (Intel), which pyopencl turns
        # into CompilerWarnings; they must not reach the caller (or, under
        # ``-W error``, break pyopencl's cache): every build a call makes is
        # inside quiet_builds (clgrid's own programs: build_program; pyopencl's
        # array kernels here, in _fill and in _nan_min_max).
        with quiet_builds():
            operation = Reprojector(queue, **options)
    try:
        yield operation
    finally:
        operation.staging.release()   # the device's pinned staging, for the next call
        with _reprojectors_lock:
            idle = _reprojectors.setdefault(key, [])
            idle.append(operation)
            del idle[:-_IDLE_PER_KEY]


def reproject_interp(input_data, output_projection, shape_out=None, hdu_in: int | str = 0,
                     order="bilinear", roundtrip_coords: bool = True, output_array=None,
                     output_footprint=None, return_footprint: bool = True, block_size=None,
                     parallel=False, return_type: str | None = None,
                     dask_method: str | None = None, *, sampling: str = "buffer",
                     coord_precision: str = "float64", fast_math: bool = False,
                     context=None, progress: bool = False, deterministic: bool = True):
    """Reproject an image or cube to another projection on an OpenCL device.

    Drop-in for ``reproject.reproject_interp``: the same arguments in the same
    order (keyword-only after ``dask_method``: clgrid's own).

    Parameters
    ----------
    input_data
        ``(array, wcs)`` with an :class:`astropy.wcs.WCS`, a FITS header, an
        APE-14 WCS or a :class:`~clgrid.reproject.wcs_params.CelestialPlane`; a FITS
        HDU, HDUList, FITS file name or path, a PNG/JPEG file with AVM
        metadata (as reproject reads it: needs Pillow and PyAVM), or
        ``NDData``.  The array may be a host numpy (or dask) array of any
        integer/float/complex dtype and byte order (converted on the device)
        or a :class:`pyopencl.array.Array` (read in place).  Leading array
        axes beyond the WCS's are planes sharing one pixel map.
    output_projection
        WCS, FITS header (with NAXISn when ``shape_out`` is None) or
        :class:`~clgrid.reproject.wcs_params.CelestialPlane`.
    shape_out
        Output shape (numpy order); default from the header or
        ``output_array``.  Leading plane axes of the input are prepended
        when missing.
    hdu_in
        HDU of an HDUList or file.
    order
        ``'nearest-neighbor'``, ``'bilinear'`` (default, as reproject),
        ``'biquadratic'``, ``'bicubic'`` (also 0-3) or
        ``'bicubic-unfiltered'``.
    roundtrip_coords
        As reproject: blank output pixels whose input position does not map
        back to within one pixel of them (done on the device for device
        projections).
    output_array, output_footprint
        Arrays to write into (host numpy of a float/complex dtype, or
        :class:`pyopencl.array.Array` on this device): written in place and
        returned, no extra copy.
    return_footprint
        Also return the footprint (1 where the output is not NaN).
    block_size
        reproject's block shape (``(rows, cols)``, with leading plane axes,
        or ``'auto'``): clgrid works in full-width bands of ``rows`` output
        rows; results do not depend on it.  None: one band, or bands sized
        to the device memory when the image does not fit.  Checked as
        reproject checks it, and the chunks of ``return_type='dask'``.
    parallel
        Accepted for compatibility (the device is the parallelism); as in
        reproject it allows ``return_type='dask'`` without ``block_size``.
    return_type
        ``'numpy'`` (or None) or ``'dask'``: dask arrays chunked as reproject
        chunks them (computed on the device during this call).
    dask_method
        ``None``, ``'memmap'`` or ``'none'``, reproject's ways of reading a
        dask input; clgrid reads a dask input into host memory either way.
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
        float64 for real host input of any dtype, as reproject (computed in
        float64 where the device has it); complex input stays complex
        (complex64/complex128 as the input); device input keeps its
        precision (float32 for 32-bit or integer data, float64 for 64-bit);
        ``output_array``'s dtype when given (and then computed in its
        precision).  NaN where unmapped or where the interpolation stencil
        touches a non-finite input pixel.  The footprint has the output's
        real dtype (or ``output_footprint``'s).
    """
    if return_type is None:
        return_type = "numpy"
    elif return_type not in ("numpy", "dask"):
        raise ValueError("return_type should be set to 'numpy' or 'dask'")
    if dask_method not in (None, "memmap", "none"):
        raise ValueError("dask_method should be set to 'memmap' or 'none'")
    if deterministic not in (True, False):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    order = order_name(order)
    data, wcs_in = parse_input(input_data, hdu_in)
    wcs_out, shape_out = parse_output(output_projection, shape_out, output_array)
    queue = resolve_queue(context)
    job = plan(data, wcs_in, wcs_out, shape_out, roundtrip_coords, ORDERS[order][0])
    shape_caller = job.shape_out if job.permutation_out is None else \
        tuple(job.shape_out[k] for k in np.argsort(job.permutation_out))
    rows, chunks = _blocks(block_size, parallel, return_type, shape_caller, job.n_wcs)
    profile = DeviceProfile.from_device(queue.device)
    out = _output(output_array, shape_caller, _default_output_dtype(data), "output_array")
    dtype = _working_dtype(data.dtype, out.dtype, sampling, profile.fp64)
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
    # A device without fp64 writes float32; float64 host arrays get a copy.
    targets = [(array, _single_precision_stand_in(array, profile.fp64))
               for array in (out, footprint)]
    projections = job.projections
    with _reprojector(queue, dtype=dtype, order=order, sampling=sampling,
                      coord_precision=coord_precision, fast_math=fast_math,
                      projections=projections) as operation:
        _run(operation, job, targets[0][1], targets[1][1], rows, progress)
    for array, stand_in in targets:
        if stand_in is not array:
            array[...] = stand_in
    if return_type == "dask":
        import dask.array as da
        out = da.from_array(out, chunks=chunks, name=False)
        if footprint is not None:
            footprint = da.from_array(footprint, chunks=chunks, name=False)
    if not return_footprint:
        return out
    return out, footprint


def _default_output_dtype(data) -> np.dtype:
    """reproject's float64 for real host data; complex data and device
    arrays keep their precision."""
    dtype = np.dtype(data.dtype)
    if dtype.kind == "c":
        return np.dtype(np.complex128 if dtype.itemsize > 8 else np.complex64)
    if isinstance(data, cla.Array):
        return np.dtype(np.float64 if dtype.itemsize >= 8 and dtype.kind == "f"
                        else np.float32)
    return np.dtype(np.float64)


def _working_dtype(dtype: np.dtype, out_dtype: np.dtype, sampling: str = "buffer",
                   fp64: bool = True) -> np.dtype:
    """The precision the device interpolates in: 64-bit for 64-bit input,
    else the output's, except float32 for image sampling (image objects
    hold no doubles) and on devices without fp64 (which then write float32
    for a float64 output: :func:`_single_precision_stand_in`)."""
    dtype, out_dtype = np.dtype(dtype), np.dtype(out_dtype)
    if dtype.kind not in "fiubc":
        raise TypeError(f"cannot reproject data of dtype {dtype}")
    wide = (dtype.kind == "f" and dtype.itemsize >= 8) or \
        (dtype.kind == "c" and dtype.itemsize >= 16) or \
        (_real_of(out_dtype) == np.float64 and sampling == "buffer" and fp64)
    if dtype.kind == "c":
        return np.dtype(np.complex128 if wide else np.complex64)
    return np.dtype(np.float64 if wide else np.float32)


def _single_precision_stand_in(array, fp64: bool):
    """``array``, or a float32 host stand-in for a float64 host array where
    the device has no fp64 (copied back after the call)."""
    if array is None or fp64 or isinstance(array, cla.Array) or \
            _real_of(array.dtype) != np.float64:
        return array
    return np.empty(array.shape, np.complex64 if array.dtype.kind == "c" else np.float32)


def _blocks(block_size, parallel, return_type, shape_out, n_wcs):
    """reproject's checks of ``block_size``/``parallel``/``return_type`` and
    messages; returns (rows per band or None, chunks of dask outputs)."""
    if block_size is None and parallel is False:
        if return_type == "dask":
            raise ValueError("Output cannot be returned as dask arrays when parallel=False "
                             "and no block size has been specified")
        return None, None
    if not (isinstance(parallel, (bool, str)) or int(parallel) > 0):
        raise ValueError("The number of processors to use must be strictly positive")
    shape_out = tuple(int(n) for n in shape_out)
    broadcasting = n_wcs < len(shape_out)
    logger.info(f"Broadcasting is {'' if broadcasting else 'not '}being used")
    broadcasted_parallelization = False
    explicit = block_size is not None and not isinstance(block_size, str)
    if isinstance(block_size, str) and block_size != "auto":
        raise ValueError(f"block_size must be a shape or 'auto', got {block_size!r}")
    if explicit:
        if np.ndim(block_size) == 0:  # clgrid's own shorthand: rows per band
            block_size = (int(block_size), -1)
        block_size = tuple(int(n) for n in block_size)
        if len(block_size) > len(shape_out):
            raise ValueError(f"block_size {len(block_size)} cannot have more elements than "
                             f"the dimensionality of the output ({len(shape_out)})")
        if broadcasting and len(block_size) == len(shape_out):
            if block_size[-n_wcs:] == shape_out[-n_wcs:]:
                broadcasted_parallelization = True
                block_size = block_size[:-n_wcs] + (-1,) * n_wcs
            elif any(b not in (-1, n) for b, n in zip(block_size[:-n_wcs], shape_out)):
                raise ValueError("block shape should either match output data shape along "
                                 "broadcasted dimension or non-broadcasted dimensions")
        block_size = (-1,) * (len(shape_out) - len(block_size)) + block_size
        if any(b == 0 or b < -1 for b in block_size):
            raise ValueError(f"block_size must be positive, got {block_size}")
    logger.info(f"{'P' if broadcasted_parallelization else 'Not p'}arallelizing along "
                f"broadcasted dimension (block_size={block_size!r}, shape_out={shape_out!r})")
    if explicit:
        chunks = tuple(n if b == -1 else min(b, n) for b, n in zip(block_size, shape_out))
        rows = chunks[-2] if len(chunks) >= 2 else None
        return rows, chunks
    if return_type != "dask":
        return None, None
    import dask.array as da
    auto = ("auto",) * len(shape_out)
    if broadcasting:
        auto = (-1,) * (len(shape_out) - n_wcs) + ("auto",) * n_wcs
    chunks = da.empty(shape_out, dtype=np.float64).rechunk(
        chunks=auto, block_size_limit=64 * 1024**2).chunks
    return None, chunks


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

def _run(operation: Reprojector, job: Job, out, footprint, rows, progress):
    """Every band of output rows, and in it every plane: a band's pixel map
    and input window serve all planes."""
    planes_out = job.canonical(out)
    feet = job.canonical(footprint) if footprint is not None else None
    params = None
    if job.device_map is not None:
        params = operation.params_on_device(*job.device_map)
    bands = _bands(operation, job, rows)
    device_out = isinstance(out, cla.Array)
    n_planes = planes_out.shape[0]
    steps = [(band, index) for band in bands for index in range(n_planes)]
    band_state = None
    for band, index in _progress(steps, progress, "reproject planes"):
        if band_state is None or band_state[0] != band:
            band_state = (band, _band_map(operation, job, params, band, len(bands) > 1))
        _run_band(operation, job, params, band, band_state[1], planes_out, feet, index,
                  device_out)
    job.finish(out, planes_out)
    if footprint is not None:
        job.finish(footprint, feet)


def _band_map(operation, job, params, band, windowed):
    """(host map or None, input window or None) of one band: astropy's input
    positions where the device does not map, and the part of the input the
    band reads (the whole input when not banded)."""
    row0, row1 = band
    host_map = None if params is not None else job.host_map(row0, row1)
    device_input = isinstance(job.planes_in, cla.Array)
    if windowed and not device_input:
        window = _input_window(operation, job, params, host_map, band)
    else:  # device inputs are read whole (a window of one would not be contiguous)
        window = (0, job.plane_shape[0], 0, job.plane_shape[1])
    if host_map is not None and window is not None:  # uploaded once for all planes
        shape_band = (row1 - row0, job.shape_out[-1])
        for name, host in zip(("x_map", "y_map"), host_map):
            device = operation.scratch.get(name, shape_band, operation.coord_dtype)
            operation.staging.upload(host.astype(operation.coord_dtype, copy=False),
                                     device.data)
    return host_map, window


def _run_band(operation, job, params, band, band_map, planes_out, feet, index, device_out):
    row0, row1 = band
    _, window = band_map
    ny_out, nx_out = job.shape_out[-2:]
    shape_band = (row1 - row0, nx_out)
    if window is None:  # nothing of the input reaches this band
        _fill(planes_out, index, band, np.nan)
        if feet is not None:
            _fill(feet, index, band, 0)
        return
    plane = job.plane(index)
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
                        for name in ("x_map", "y_map"))  # uploaded by _band_map
        operation.interpolate_at(prepared, x_map, y_map, out=target, footprint=foot_target,
                                 out_offset=target_offset)
    if not device_out:
        operation.staging.download(target.data, planes_out[index, row0:row1])
        if feet is not None:
            operation.staging.download(foot_target.data, feet[index, row0:row1])


def _fill(array, index, band, value):
    part = array[index, band[0]:band[1]]
    if isinstance(part, cla.Array):
        with quiet_builds():  # pyopencl's fill kernel, built on first use
            part.fill(value)
    else:
        part[...] = value


def _bands(operation, job, rows) -> list[tuple[int, int]]:
    """Output row bands: ``rows`` at a time (the caller's block size), else
    as many as device memory needs (one when the image fits comfortably)."""
    ny_out, nx_out = job.shape_out[-2:]
    if rows is None:
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
        try:
            with quiet_builds():
                _minmax_kernels[key] = tuple(
                    ReductionKernel(queue.context, values.dtype, neutral=neutral,
                                    reduce_expr=expr, map_expr="x[i]",
                                    arguments=f"__global const {name} *x", preamble=preamble)
                    for neutral, expr in (("INFINITY", "fmin(a, b)"),
                                          ("-INFINITY", "fmax(a, b)")))
        except KeyError as error:
            # pyopencl's binary cache failed and its recovery path looks up
            # os.environ["PYOPENCL_CACHE_FAILURE_FATAL"] (pyopencl 2026.1,
            # cache.py), which is unset: a reduction cannot be built here, so
            # the bounds are found on the host (a cache only saves time).
            if error.args != ("PYOPENCL_CACHE_FAILURE_FATAL",):
                raise
            _minmax_kernels[key] = None
    if _minmax_kernels[key] is None:
        host = values.get(queue=queue)
        with np.errstate(invalid="ignore"):
            return (float(np.nanmin(host, initial=np.inf)),
                    float(np.nanmax(host, initial=-np.inf)))
    low, high = _minmax_kernels[key]
    return float(low(values, queue=queue).get()), float(high(values, queue=queue).get())


__all__ = ["release_caches", "reproject_interp"]

"""Dirty images of Dask arrays, on any Dask scheduler (a laptop or a cluster).

:func:`vis2dirty` takes ``uvw``, ``vis``, ``wgt`` and ``mask``/``flags`` as
:mod:`dask.array` arrays chunked along rows (as dask-ms or
``dask.array.from_array`` over a Measurement Set reader give them) and
returns the dirty image as a numpy array; :func:`dirty2vis` returns model
visibilities as a dask array with the rows chunked like ``uvw``.

How it runs
-----------
* The client computes the w range once and fixes the shared
  :class:`clgrid.scaleout.partition.Layout` (kernel, grid size, w planes), so every
  chunk is gridded exactly as one device would grid it.
* Each task runs in a Dask worker and gets this process's OpenCL queue from
  :func:`worker_queue`, opened once per worker process (optionally at worker
  start through :class:`OpenCLWorkerPlugin`) and then reused: kernels and
  FFT plans are compiled once per worker, never once per task.
* Without w-gridding each chunk yields its uv grid; the grids are summed in
  a tree (``split_every`` at a time) and a last task runs the one FFT and the
  grid correction.  With w-gridding each chunk yields the partial image of
  the w planes its rows touch (one FFT per touched plane) and the partial
  images are tree-summed.
* Dask owns the fault tolerance: a task whose worker dies is recomputed on
  another worker; past ``distributed.scheduler.allowed-failures`` the
  computation fails with ``KilledWorker``, never with a partial image.

The device of each worker is ``device=`` (a :func:`clgrid.select_device`
spec), else the worker's ``CLGRID_DEVICE`` environment variable, else the
best device: start one worker per GPU with ``CLGRID_DEVICE=nvidia:0:<i>``
style specs or ``CUDA_VISIBLE_DEVICES`` (see docs/scaling.md).
"""

from __future__ import annotations

import os
import threading

import dask
import dask.array as da
import numpy as np
import pyopencl as cl

from ..device.profiles import create_context, resolve_queue
from ..core.plan import ImageGeometry
from ..core.plan import check_freq as _check_freq
from ..core.plan import precision_of as _precision_of
from ..imaging.imager import Imager
from .partition import Layout, build_layout

try:  # distributed is optional: the threaded scheduler works without it
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - depends on the environment
    WorkerPlugin = object

_queues: dict[str, cl.CommandQueue] = {}
_queues_lock = threading.Lock()


# ------------------------------------------------------------------ workers
def worker_queue(device: str | None = None) -> cl.CommandQueue:
    """This process's command queue on ``device``, created on first use.

    The key is the spec (``device``, else ``CLGRID_DEVICE``, else the best
    device), so all tasks of a worker share one context, its compiled
    kernels and its FFT plans.
    """
    key = device or os.environ.get("CLGRID_DEVICE") or ""
    with _queues_lock:
        queue = _queues.get(key)
        if queue is None:
            queue = resolve_queue(create_context(key or None))
            _queues[key] = queue
    return queue


class OpenCLWorkerPlugin(WorkerPlugin):
    """Opens the OpenCL device of each worker when the worker starts.

    ``client.register_plugin(OpenCLWorkerPlugin("nvidia"))``: a device that
    fails shows up at registration, not in the middle of a computation.
    """

    name = "clgrid-opencl"

    def __init__(self, device: str | None = None):
        self.device = device

    def setup(self, worker=None):
        worker_queue(self.device)


def worker_status(device: str | None = None) -> dict:
    """Process id, device name and compiled-program count of this worker."""
    from ..device import kernels
    from ..core import fft
    queue = worker_queue(device)
    return {"pid": os.getpid(), "device": queue.device.name.strip(),
            "programs": len(kernels._programs), "fft_plans": len(fft._plans)}


# ------------------------------------------------------------------ tasks
_EMPTY_UVW = np.zeros((1, 3))


def _shard(device, layout: Layout, uvw, freq, geometry: ImageGeometry) -> Imager:
    return Imager(worker_queue(device), uvw=uvw, freq=freq, geometry=geometry, layout=layout)


def _grid_block(uvw, vis, wgt, mask, *, freq, geometry: ImageGeometry, layout,
                device) -> np.ndarray:
    """uv grids (npol, nu, nv) of one chunk, or its partial image with w-gridding."""
    vis = vis if vis.ndim == 3 else vis[:, :, None]
    shard = _shard(device, layout, uvw, freq, geometry)
    if geometry.do_w:
        return shard.vis2dirty(vis, wgt, mask)
    return shard.grid_only(vis, wgt, mask)


def _sum(*parts: np.ndarray) -> np.ndarray:
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


def _finish(total, *, freq, geometry: ImageGeometry, layout, device,
            squeeze: bool) -> np.ndarray:
    """One FFT and the grid correction (without w-gridding)."""
    if not geometry.do_w:
        total = _shard(device, layout, _EMPTY_UVW, freq, geometry).grids_to_dirty(total)
    return total[0] if squeeze else total


def _degrid_block(uvw, dirty, *, freq, geometry: ImageGeometry, layout,
                  device) -> np.ndarray:
    return _shard(device, layout, uvw, freq, geometry).dirty2vis(dirty)


# ------------------------------------------------------------------ API
def _rows_like(array, uvw, name: str):
    """``array`` as a dask array with ``uvw``'s row chunks, whole in other axes."""
    if array is None:
        return None
    array = da.asarray(array)
    if array.shape[0] != uvw.shape[0]:
        raise ValueError(f"{name} has {array.shape[0]} rows, uvw has {uvw.shape[0]}")
    return array.rechunk((uvw.chunks[0],) + tuple(-1 for _ in array.shape[1:]))


def _check_uvw_dask(uvw):
    uvw = da.asarray(uvw)
    if uvw.ndim != 2 or uvw.shape[1] != 3 or uvw.shape[0] == 0:
        raise ValueError(f"uvw must be (nrow, 3) with nrow > 0, got {uvw.shape}")
    return uvw.rechunk({1: -1}).astype(np.float64)


def _layout(uvw, freq, geometry: ImageGeometry, w_range_m, n_vis, scheduler=None) -> Layout:
    if w_range_m is None:
        w_m = uvw[:, 2] * geometry.signs[2]
        w_min, w_max, finite = dask.compute(w_m.min(), w_m.max(), da.isfinite(uvw).all(),
                                            scheduler=scheduler)
        if not finite:
            raise ValueError("uvw contains NaN or Inf")
    else:
        w_min, w_max = (float(x) for x in w_range_m)
    return build_layout(geometry, freq, float(w_min), float(w_max), n_vis)


def _blocks(array):
    return None if array is None else list(array.to_delayed().ravel())


def _tree_sum(parts: list, split_every: int):
    if split_every < 2:
        raise ValueError("split_every must be >= 2")
    while len(parts) > 1:
        parts = [dask.delayed(_sum, pure=True)(*parts[i:i + split_every])
                 for i in range(0, len(parts), split_every)]
    return parts[0]


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, flags=None, npix_x: int, npix_y: int,
              pixsize_x: float, pixsize_y: float, epsilon: float, do_wgridding: bool = False,
              flip_u: bool = False, flip_v: bool = False, flip_w: bool = False,
              divide_by_n: bool = True, sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, double_precision_accumulation: bool = False,
              nthreads: int = 1, verbosity: int = 0, allow_nshift: bool = True,
              device: str | None = None, split_every: int = 4, w_range_m=None,
              scheduler=None) -> np.ndarray:
    """Dirty image of row-chunked dask arrays; ``clgrid.vis2dirty``'s convention.

    Parameters
    ----------
    uvw, vis, wgt, mask
        Dask (or numpy) arrays: (nrow, 3) metres, (nrow, nchan[, npol])
        complex, (nrow, nchan) weights and mask (nonzero = keep).
    flags
        (nrow, nchan) booleans, True = drop (Measurement Set convention);
        an alternative to ``mask``.
    freq
        (nchan,) Hz, numpy.
    npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w
        As :func:`clgrid.vis2dirty`.
    divide_by_n, sigma_min, sigma_max, center_x, center_y, double_precision_accumulation
        As :func:`clgrid.vis2dirty`.
    nthreads, verbosity, allow_nshift
        Accepted and ignored, as by :func:`clgrid.vis2dirty`.
    device
        Device spec each worker opens (default ``CLGRID_DEVICE`` or best).
    split_every
        Fan-in of the tree summing the chunks' grids.
    w_range_m
        (min, max) of w in metres, if known (saves one pass over uvw).
    scheduler
        Passed to :func:`dask.compute` (default: the active client, if any).

    Returns
    -------
    numpy.ndarray
        (npix_x, npix_y), or (npol, npix_x, npix_y) for 3-D ``vis``.
    """
    vis = da.asarray(vis)
    geometry = ImageGeometry.from_arguments(
        npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
        epsilon=epsilon, do_wgridding=do_wgridding, precision=_precision_of(vis.dtype, "vis"),
        flip_u=flip_u, flip_v=flip_v, flip_w=flip_w, divide_by_n=divide_by_n,
        sigma_min=sigma_min, sigma_max=sigma_max, center_x=center_x, center_y=center_y,
        double_precision_accumulation=double_precision_accumulation)
    return vis2dirty_with(geometry, uvw=uvw, freq=freq, vis=vis, wgt=wgt, mask=mask,
                          flags=flags, device=device, split_every=split_every,
                          w_range_m=w_range_m, scheduler=scheduler)


def vis2dirty_with(geometry: ImageGeometry, *, uvw, freq, vis, wgt=None, mask=None,
                   flags=None, device: str | None = None, split_every: int = 4,
                   w_range_m=None, scheduler=None) -> np.ndarray:
    """:func:`vis2dirty` of a geometry made already (``clgrid image
    --dask-scheduler``'s batches); the other arguments as there."""
    uvw = _check_uvw_dask(uvw)
    freq = _check_freq(freq)
    vis = _rows_like(vis, uvw, "vis")
    if vis.ndim not in (2, 3) or vis.shape[1] != freq.size:
        raise ValueError(f"vis must be (nrow, {freq.size}[, npol]), got {vis.shape}")
    if mask is not None and flags is not None:
        raise ValueError("give mask or flags, not both")
    if flags is not None:
        mask = ~da.asarray(flags).astype(bool)
    layout = _layout(uvw, freq, geometry, w_range_m, uvw.shape[0] * freq.size, scheduler)
    wgt_blocks = _blocks(_rows_like(wgt, uvw, "wgt"))
    mask_blocks = _blocks(_rows_like(mask, uvw, "mask"))
    parts = [dask.delayed(_grid_block, pure=True)(
        u, v, None if wgt_blocks is None else wgt_blocks[i],
        None if mask_blocks is None else mask_blocks[i], freq=freq, geometry=geometry,
        layout=layout, device=device)
        for i, (u, v) in enumerate(zip(_blocks(uvw), _blocks(vis)))]
    total = _tree_sum(parts, int(split_every))
    image = dask.delayed(_finish, pure=True)(total, freq=freq, geometry=geometry, layout=layout,
                                             device=device, squeeze=vis.ndim == 2)
    (result,) = dask.compute(image, scheduler=scheduler)
    return result


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, flags=None, pixsize_x: float,
              pixsize_y: float, epsilon: float, do_wgridding: bool = False,
              flip_u: bool = False, flip_v: bool = False, flip_w: bool = False,
              divide_by_n: bool = True, sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, nthreads: int = 1, verbosity: int = 0,
              allow_nshift: bool = True, device: str | None = None,
              w_range_m=None) -> da.Array:
    """Model visibilities of ``dirty`` as a dask array chunked like ``uvw`` rows.

    The adjoint of :func:`vis2dirty`; nothing runs until the result is
    computed.  ``dirty`` (numpy, (npix_x, npix_y) or (npol, npix_x, npix_y))
    goes into the graph once and is shared by all chunks.
    """
    uvw = _check_uvw_dask(uvw)
    freq = _check_freq(freq)
    dirty = np.asarray(dirty)
    if dirty.ndim not in (2, 3) or not np.all(np.isfinite(dirty)):
        raise ValueError(f"dirty must be a finite 2-D or 3-D image, got shape {dirty.shape}")
    geometry = ImageGeometry.from_arguments(
        npix_x=dirty.shape[-2], npix_y=dirty.shape[-1], pixsize_x=pixsize_x,
        pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding,
        precision=_precision_of(dirty.dtype, "dirty"), flip_u=flip_u, flip_v=flip_v,
        flip_w=flip_w, divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
        center_x=center_x, center_y=center_y)
    layout = _layout(uvw, freq, geometry, w_range_m, uvw.shape[0] * freq.size)
    dirty_node = dask.delayed(dirty, pure=True)
    out_dtype = np.complex64 if dirty.dtype == np.float32 else np.complex128
    tail = (freq.size,) if dirty.ndim == 2 else (freq.size, dirty.shape[0])
    def degrid(uvw_block):
        return dask.delayed(_degrid_block, pure=True)(uvw_block, dirty_node, freq=freq,
                                                      geometry=geometry, layout=layout,
                                                      device=device)
    blocks = [da.from_delayed(degrid(u), shape=(rows,) + tail, dtype=out_dtype)
              for u, rows in zip(_blocks(uvw), uvw.chunks[0])]
    vis = da.concatenate(blocks, axis=0)
    if flags is not None:
        mask = ~da.asarray(flags).astype(bool)
    for factor in (wgt, mask):
        if factor is not None:
            factor = _rows_like(factor, uvw, "wgt/mask").astype(vis.real.dtype)
            vis = vis * (factor if dirty.ndim == 2 else factor[:, :, None])
    return vis


def cluster_vis2dirty(address: str, device: str | None = None):
    """A ``vis2dirty(geometry, *, uvw, freq, vis, wgt=None, mask=None)`` for
    numpy arrays that grids them on the Dask cluster at ``address``, split
    over its workers (``clgrid image --dask-scheduler``).  Returns the
    function and the client (close it)."""
    import distributed
    try:
        client = distributed.Client(address, timeout=30, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise RuntimeError(f"cannot reach the Dask scheduler at {address}: {error}") from None
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))

    def run(geometry: ImageGeometry, *, uvw, freq, vis, wgt=None, mask=None) -> np.ndarray:
        rows = max(1, -(-np.shape(uvw)[0] // n_workers))

        def chunked(array):
            array = np.asarray(array)
            return da.from_array(array, chunks=(rows,) + array.shape[1:])
        return vis2dirty_with(geometry, uvw=chunked(uvw), freq=freq, vis=chunked(vis),
                              wgt=None if wgt is None else chunked(wgt),
                              mask=None if mask is None else chunked(mask), device=device,
                              scheduler=client)
    return run, client


__all__ = ["OpenCLWorkerPlugin", "cluster_vis2dirty", "dirty2vis", "vis2dirty", "vis2dirty_with",
           "worker_queue", "worker_status"]

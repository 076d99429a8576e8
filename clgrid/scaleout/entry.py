"""The public imaging entry points: one device, or several.

``clgrid.vis2dirty``, ``clgrid.dirty2vis`` and ``clgrid.Imager`` are the
one-device versions of :mod:`clgrid.imaging.imager` with one more keyword:
``devices=`` (functions) or ``contexts=`` (``Imager``) hands the call to
:mod:`clgrid.scaleout.multidevice`.  The routing lives here, above both, so
that imaging never imports the scale-out layer (no import circle).

All three also take ``deterministic=`` (issue 19), accepted for the API's
symmetry with :class:`clgrid.Gridder` and :class:`clgrid.ImageWeighting`:
the gridding core is deterministic whatever its value -- no float atomics
(stable device sort of the visibilities, output-owned tiles, chunks folded
and planes summed in a fixed order, several devices' grids reduced in device
order) -- so ``True`` (the default) and ``False`` give the same bits, call
after call, on the same device and driver.  For uniform/Briggs weights made
with :class:`clgrid.ImageWeighting` (``deterministic=True`` there by
default) the whole chain is bit-reproducible.
"""

from __future__ import annotations

import numpy as np

from ..core.plan import ImageGeometry
from ..imaging import imager as _one_device
from . import multidevice


_DETERMINISTIC_DOC = """
    ``deterministic`` (default True) is accepted and always holds: the core
    adds in a fixed order with no float atomics, so repeated calls give
    bitwise-identical results on the same device and driver (False changes
    nothing: there is no faster non-deterministic path)."""


def check_deterministic(deterministic) -> bool:
    """``deterministic`` as a bool; anything but True/False is a TypeError."""
    if deterministic not in (True, False):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    return bool(deterministic)


def _one_place(devices, context, queue) -> None:
    """Refuse ``devices=`` beside ``context=``/``queue=``."""
    if devices is not None and (context is not None or queue is not None):
        raise ValueError("give either devices= or context=/queue=, not both")


def vis2dirty_with(geometry: ImageGeometry, *, uvw, freq, vis, wgt=None, mask=None,
                   dirty=None, context=None, queue=None, devices=None) -> np.ndarray:
    """:func:`vis2dirty` of a geometry made already (``clgrid image``'s
    batches): on ``devices`` (:func:`clgrid.scaleout.multidevice.vis2dirty`),
    else on the device of ``context``/``queue``
    (:func:`clgrid.imaging.imager.vis2dirty_with`)."""
    _one_place(devices, context, queue)
    if devices is not None:
        return multidevice.vis2dirty(devices, geometry, uvw=uvw, freq=freq, vis=vis, wgt=wgt,
                                     mask=mask, dirty=dirty)
    return _one_device.vis2dirty_with(geometry, _one_device.queue_of(context, queue), uvw=uvw,
                                      freq=freq, vis=vis, wgt=wgt, mask=mask, dirty=dirty)


def dirty2vis_with(geometry: ImageGeometry, *, uvw, freq, dirty, wgt=None, mask=None,
                   vis=None, context=None, queue=None, devices=None) -> np.ndarray:
    """:func:`dirty2vis` of a geometry made already; ``devices`` as in
    :func:`vis2dirty_with`."""
    _one_place(devices, context, queue)
    if devices is not None:
        return multidevice.dirty2vis(devices, geometry, uvw=uvw, freq=freq, dirty=dirty,
                                     wgt=wgt, mask=mask, vis=vis)
    return _one_device.dirty2vis_with(geometry, _one_device.queue_of(context, queue), uvw=uvw,
                                      freq=freq, dirty=dirty, wgt=wgt, mask=mask, vis=vis)


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x: int = 0, npix_y: int = 0,
              pixsize_x: float, pixsize_y: float, epsilon: float, do_wgridding: bool = False,
              nthreads: int = 1, verbosity: int = 0, flip_u: bool = False,
              flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
              sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, double_precision_accumulation: bool = False,
              allow_nshift: bool = True, context=None, queue=None, dirty=None,
              devices=None, deterministic: bool = True) -> np.ndarray:
    """``devices`` (a list of devices, contexts or queues, or ``'all'``)
    spreads the work over several devices (:mod:`clgrid.scaleout.multidevice`)."""
    check_deterministic(deterministic)
    _one_place(devices, context, queue)
    vis = _one_device.as_input(vis)
    geometry = _one_device.vis2dirty_geometry(
        vis, dirty, npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x, pixsize_y=pixsize_y,
        epsilon=epsilon, do_wgridding=do_wgridding, flip_u=flip_u, flip_v=flip_v,
        flip_w=flip_w, divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
        center_x=center_x, center_y=center_y,
        double_precision_accumulation=double_precision_accumulation)
    return vis2dirty_with(geometry, uvw=uvw, freq=freq, vis=vis, wgt=wgt, mask=mask,
                          dirty=dirty, context=context, queue=queue, devices=devices)


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x: float, pixsize_y: float,
              epsilon: float, do_wgridding: bool = False, nthreads: int = 1,
              verbosity: int = 0, flip_u: bool = False, flip_v: bool = False,
              flip_w: bool = False, divide_by_n: bool = True,
              sigma_min: float = ImageGeometry.sigma_min,
              sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
              center_y: float = 0.0, allow_nshift: bool = True, context=None, queue=None,
              vis=None, devices=None, deterministic: bool = True) -> np.ndarray:
    """``devices`` as in :func:`vis2dirty`."""
    check_deterministic(deterministic)
    _one_place(devices, context, queue)
    dirty = _one_device.as_input(dirty)
    geometry = _one_device.dirty2vis_geometry(
        dirty, pixsize_x=pixsize_x, pixsize_y=pixsize_y, epsilon=epsilon,
        do_wgridding=do_wgridding, flip_u=flip_u, flip_v=flip_v, flip_w=flip_w,
        divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
        center_x=center_x, center_y=center_y)
    return dirty2vis_with(geometry, uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, mask=mask,
                          vis=vis, context=context, queue=queue, devices=devices)


vis2dirty.__doc__ = (_one_device.vis2dirty.__doc__ + "\n    " + vis2dirty.__doc__
                     + _DETERMINISTIC_DOC)
dirty2vis.__doc__ = (_one_device.dirty2vis.__doc__ + "\n    " + dirty2vis.__doc__
                     + _DETERMINISTIC_DOC)


class Imager(_one_device.Imager):
    """:class:`clgrid.imaging.imager.Imager`, or with ``contexts=`` (a list of
    contexts, queues, devices or spec strings, or ``'all'``) a
    :class:`clgrid.scaleout.multidevice.MultiDeviceImager` (same methods; its
    extra keywords ``partition``, ``baseline_ids`` and ``reduce`` are
    accepted too)."""

    def __new__(cls, context=None, *, uvw, freq, npix_x: int | None = None,
                npix_y: int | None = None, pixsize_x: float | None = None,
                pixsize_y: float | None = None, epsilon: float | None = None,
                do_wgridding: bool = False, precision: str = "single", flip_u: bool = False,
                flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
                sigma_min: float = ImageGeometry.sigma_min,
                sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                center_y: float = 0.0, double_precision_accumulation: bool = False,
                geometry: ImageGeometry | None = None, fft_backend: str | None = None,
                layout=None, planes: tuple[int, int] | None = None, tiles=None,
                vis_per_block: int | None = None, plane_rows=None, contexts=None,
                partition: str | None = None,
                baseline_ids=None, reduce: str | None = None, deterministic: bool = True):
        check_deterministic(deterministic)
        if contexts is None:
            return super().__new__(cls)
        if context is not None:
            raise ValueError("give context or contexts, not both")
        if (layout, planes, tiles, vis_per_block, plane_rows) != (None,) * 5:
            raise TypeError("Imager(contexts=...) takes no layout, planes, tiles, "
                            "vis_per_block or plane_rows")
        return multidevice.MultiDeviceImager(
            contexts, uvw=uvw, freq=freq, partition=partition, baseline_ids=baseline_ids,
            reduce=reduce, npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x,
            pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding,
            precision=precision, flip_u=flip_u, flip_v=flip_v, flip_w=flip_w,
            divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
            center_x=center_x, center_y=center_y,
            double_precision_accumulation=double_precision_accumulation, geometry=geometry,
            fft_backend=fft_backend)

    def __init__(self, context=None, *, uvw, freq, npix_x: int | None = None,
                 npix_y: int | None = None, pixsize_x: float | None = None,
                 pixsize_y: float | None = None, epsilon: float | None = None,
                 do_wgridding: bool = False, precision: str = "single", flip_u: bool = False,
                 flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
                 sigma_min: float = ImageGeometry.sigma_min,
                 sigma_max: float = ImageGeometry.sigma_max, center_x: float = 0.0,
                 center_y: float = 0.0, double_precision_accumulation: bool = False,
                 geometry: ImageGeometry | None = None, fft_backend: str | None = None,
                 layout=None, planes: tuple[int, int] | None = None, tiles=None,
                 vis_per_block: int | None = None, plane_rows=None, contexts=None,
                 deterministic: bool = True):
        super().__init__(
            context, uvw=uvw, freq=freq, npix_x=npix_x, npix_y=npix_y, pixsize_x=pixsize_x,
            pixsize_y=pixsize_y, epsilon=epsilon, do_wgridding=do_wgridding,
            precision=precision, flip_u=flip_u, flip_v=flip_v, flip_w=flip_w,
            divide_by_n=divide_by_n, sigma_min=sigma_min, sigma_max=sigma_max,
            center_x=center_x, center_y=center_y,
            double_precision_accumulation=double_precision_accumulation, geometry=geometry,
            fft_backend=fft_backend, layout=layout, planes=planes, tiles=tiles,
            vis_per_block=vis_per_block, plane_rows=plane_rows)
        #: Always True: the core's results are bitwise reproducible.
        self.deterministic = True


Imager.__doc__ = (_one_device.Imager.__doc__ + "\n    " + Imager.__doc__
                  + _DETERMINISTIC_DOC)


__all__ = ["Imager", "check_deterministic", "dirty2vis", "dirty2vis_with", "vis2dirty",
           "vis2dirty_with"]

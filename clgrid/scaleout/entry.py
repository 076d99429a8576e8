"""The public imaging entry points: one device, or several.

``clgrid.vis2dirty``, ``clgrid.dirty2vis`` and ``clgrid.Imager`` are the
one-device versions of :mod:`clgrid.imaging.imager` with one more keyword:
``devices=`` (functions) or ``contexts=`` (``Imager``) hands the call to
:mod:`clgrid.scaleout.multidevice`.  The routing lives here, above both, so
that imaging never imports the scale-out layer (no import circle).
"""

from __future__ import annotations

import inspect

from ..imaging import imager as _one_device
from . import multidevice


def _with_devices(function):
    """The signature of ``function`` plus a trailing ``devices=None``."""
    signature = inspect.signature(function)
    devices = inspect.Parameter("devices", inspect.Parameter.KEYWORD_ONLY, default=None)
    return signature.replace(parameters=[*signature.parameters.values(), devices])


def _route(name: str, devices, arguments: dict):
    one_device = getattr(_one_device, name)
    if devices is None:
        return one_device(**arguments)
    try:
        bound = inspect.signature(one_device).bind(**arguments)
    except TypeError as error:
        raise TypeError(f"{name}: {error}") from None
    bound.apply_defaults()
    return multidevice.call_from_imaging(name, devices, bound.arguments)


def vis2dirty(*, devices=None, **arguments):
    """:func:`clgrid.imaging.imager.vis2dirty`; ``devices`` (a list of devices,
    contexts or queues, or ``'all'``) spreads the work over several devices
    (:mod:`clgrid.scaleout.multidevice`)."""
    return _route("vis2dirty", devices, arguments)


def dirty2vis(*, devices=None, **arguments):
    """:func:`clgrid.imaging.imager.dirty2vis`; ``devices`` as in :func:`vis2dirty`."""
    return _route("dirty2vis", devices, arguments)


vis2dirty.__signature__ = _with_devices(_one_device.vis2dirty)
dirty2vis.__signature__ = _with_devices(_one_device.dirty2vis)
vis2dirty.__doc__ = _one_device.vis2dirty.__doc__ + "\n    " + vis2dirty.__doc__
dirty2vis.__doc__ = _one_device.dirty2vis.__doc__ + "\n    " + dirty2vis.__doc__


class Imager(_one_device.Imager):
    """:class:`clgrid.imaging.imager.Imager`, or with ``contexts=`` (a list of
    contexts, queues, devices or spec strings, or ``'all'``) a
    :class:`clgrid.scaleout.multidevice.MultiDeviceImager` (same methods; its
    extra keywords ``partition``, ``baseline_ids`` and ``reduce`` are
    accepted too)."""

    def __new__(cls, context=None, *args, contexts=None, **kwargs):
        if contexts is None:
            return super().__new__(cls)
        if context is not None:
            raise ValueError("give context or contexts, not both")
        return multidevice.MultiDeviceImager(contexts, **kwargs)

    def __init__(self, context=None, *args, contexts=None, **kwargs):
        super().__init__(context, *args, **kwargs)


Imager.__doc__ = _one_device.Imager.__doc__ + "\n    " + Imager.__doc__


__all__ = ["Imager", "dirty2vis", "vis2dirty"]

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

import inspect

from ..imaging import imager as _one_device
from . import multidevice


_DETERMINISTIC_DOC = """
    ``deterministic`` (default True) is accepted and always holds: the core
    adds in a fixed order with no float atomics, so repeated calls give
    bitwise-identical results on the same device and driver (False changes
    nothing: there is no faster non-deterministic path)."""


def _with_devices(function):
    """The signature of ``function`` plus trailing ``devices=None`` and
    ``deterministic=True``."""
    signature = inspect.signature(function)
    devices = inspect.Parameter("devices", inspect.Parameter.KEYWORD_ONLY, default=None)
    deterministic = inspect.Parameter("deterministic", inspect.Parameter.KEYWORD_ONLY,
                                      default=True)
    return signature.replace(parameters=[*signature.parameters.values(), devices,
                                         deterministic])


def check_deterministic(deterministic) -> bool:
    """``deterministic`` as a bool; anything but True/False is a TypeError."""
    if deterministic not in (True, False):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    return bool(deterministic)


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


def vis2dirty(*, devices=None, deterministic: bool = True, **arguments):
    """:func:`clgrid.imaging.imager.vis2dirty`; ``devices`` (a list of devices,
    contexts or queues, or ``'all'``) spreads the work over several devices
    (:mod:`clgrid.scaleout.multidevice`)."""
    check_deterministic(deterministic)
    return _route("vis2dirty", devices, arguments)


def dirty2vis(*, devices=None, deterministic: bool = True, **arguments):
    """:func:`clgrid.imaging.imager.dirty2vis`; ``devices`` as in :func:`vis2dirty`."""
    check_deterministic(deterministic)
    return _route("dirty2vis", devices, arguments)


vis2dirty.__signature__ = _with_devices(_one_device.vis2dirty)
dirty2vis.__signature__ = _with_devices(_one_device.dirty2vis)
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

    def __new__(cls, context=None, *args, contexts=None, deterministic: bool = True,
                **kwargs):
        check_deterministic(deterministic)
        if contexts is None:
            return super().__new__(cls)
        if context is not None:
            raise ValueError("give context or contexts, not both")
        return multidevice.MultiDeviceImager(contexts, **kwargs)

    def __init__(self, context=None, *args, contexts=None, deterministic: bool = True,
                 **kwargs):
        super().__init__(context, *args, **kwargs)
        #: Always True: the core's results are bitwise reproducible.
        self.deterministic = True


Imager.__doc__ = (_one_device.Imager.__doc__ + "\n    " + Imager.__doc__
                  + _DETERMINISTIC_DOC)


__all__ = ["Imager", "check_deterministic", "dirty2vis", "vis2dirty"]

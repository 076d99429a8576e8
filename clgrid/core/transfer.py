"""Gridding core: host -> device copies of visibilities, weights and images.

Device-resident inputs (``pyopencl.array.Array`` on the right context, of the
right dtype) are used as they are (:func:`device_array`).  Host arrays go to
GPUs through the device layer's pinned staging
(:class:`clgrid.device.hostio.PinnedStaging`: mapped ``ALLOC_HOST_PTR``
memory, host threads copying one chunk while the DMA sends the last).
Pageable copies from numpy reach 6 GB/s on the H200 host, pinned ones 55 GB/s
(``../shared/PLATFORMS.md``).  On CPU devices the device memory is host memory
and one plain copy is cheapest.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.hostio import PinnedStaging

# Below this, staging costs more than it saves.
_MIN_PINNED_BYTES = 8 * 2 ** 20


class Uploader:
    """Host -> device copies for one queue, pinned and chunked on GPUs."""

    def __init__(self, queue: cl.CommandQueue, pinned: bool | None = None):
        self.queue = queue
        if pinned is None:
            pinned = queue.device.type & cl.device_type.GPU != 0
        self._staging = PinnedStaging(queue.context, queue) if pinned else None

    def to_device(self, host: np.ndarray, dtype) -> cla.Array:
        """A device copy of ``host`` as ``dtype`` (C order).  Data of another
        precision is converted on the host first (the caller's choice)."""
        dtype = np.dtype(dtype)
        host = np.asarray(host)
        out = cla.empty(self.queue, host.shape, dtype)
        if host.size == 0:
            return out
        if host.dtype != dtype:
            host = host.astype(dtype)
        if self._staging is None or host.nbytes < _MIN_PINNED_BYTES:
            out.set(np.ascontiguousarray(host))
        else:
            self._staging.upload(host, out.data)
        return out


def device_array(queue: cl.CommandQueue, array: cla.Array, shape: tuple, dtype,
                 name: str) -> cla.Array:
    """``array`` itself when it is on ``queue``'s context with ``shape`` and
    ``dtype``; a clear error otherwise (no silent copies of device data)."""
    if array.context.int_ptr != queue.context.int_ptr:
        raise ValueError(f"{name} is a device array of another OpenCL context")
    if array.shape != tuple(shape) or array.dtype != np.dtype(dtype):
        raise ValueError(f"device {name} must be {tuple(shape)} {np.dtype(dtype)}, got "
                         f"{array.shape} {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"device {name} must be C-contiguous")
    return array


__all__ = ["Uploader", "device_array"]

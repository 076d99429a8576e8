"""The device layer: everything clgrid knows about OpenCL devices, and nothing above it.

=====================  ===============================================================
module                 holds
=====================  ===============================================================
``_icd``               registration of the pip-installed Intel CPU runtime (ICD)
``profiles``           :class:`DeviceProfile` (capabilities, quirks, atomics path),
                       device listing, ranking and selection, contexts and queues
``kernels``            :class:`KernelTemplate` (render a ``templates/*.cl.mako`` for one
                       device and parameter set, compile once) and :class:`Operation`
``scatter``            :class:`ScatterAdd`, the atomics capability check (``clgrid devices``)
``radixsort``          stable device radix sort (set points, single-dish pre-ordering)
``hostio``             pinned host staging for overlapped transfers
=====================  ===============================================================

This package imports nothing else of clgrid.  Importing it registers the
Intel CPU runtime with the ICD loader before pyopencl first lists platforms.
"""

from ._icd import register_icd, register_intel_cpu_runtime

register_intel_cpu_runtime()

from .profiles import (  # noqa: E402  (after ICD registration on purpose)
    ATOMIC_PATHS, DeviceProfile, all_devices, context_of, create_context, devices,
    platform_key, resolve_queue, select_device, unusable_hint)

__all__ = ["ATOMIC_PATHS", "DeviceProfile", "all_devices", "context_of", "create_context",
           "devices", "platform_key", "register_icd", "register_intel_cpu_runtime",
           "resolve_queue", "select_device", "unusable_hint"]

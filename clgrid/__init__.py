"""clgrid: radio-astronomy gridding on any OpenCL device.

The package is layered (``docs/architecture.md``); imports point down only:

==============  ==========================================================
layer           subpackages
==============  ==========================================================
application     :mod:`clgrid.cli`, :mod:`clgrid.pipeline` (MS -> FITS)
scale-out       :mod:`clgrid.scaleout` (several devices, Dask)
missions        :mod:`clgrid.imaging`, :mod:`clgrid.gridders`,
                :mod:`clgrid.singledish`, :mod:`clgrid.reproject`
core            :mod:`clgrid.core` (plan, set points, spread, FFT, correct)
device, I/O     :mod:`clgrid.device`, :mod:`clgrid.io`
==============  ==========================================================

Importing clgrid registers the Intel CPU runtime from PyPI (the ``intel``
extra) with the OpenCL ICD loader of this process, before pyopencl first
enumerates platforms (:mod:`clgrid.device` does it first thing).
"""

from .device import (ATOMIC_PATHS, DeviceProfile, create_context, devices, register_icd,
                     register_intel_cpu_runtime, resolve_queue, select_device)
from .device.guard import ConcurrentUseError
from .device.kernels import KernelTemplate, Operation, render
from .device.scatter import ScatterAdd, scatter_add_reference
from .reproject import BSplinePrefilter, CelestialPlane, Reprojector, reproject_interp
from .singledish import HealpixGather, SlGrid, WcsGrid
from .imaging import ImageWeighting
from .gridders import gcf
from .gridders.degridder import Degridder
from .gridders.gridder import Gridder
from .gridders.streaming import StreamingGridder
from .gridders.dispatch import choose as choose_method
from .core.register import RegisterParams
from .core.plan import TileShape
from .scaleout.entry import Imager, dirty2vis, vis2dirty
from .scaleout.wgridder import dirty2ms, ms2dirty
from .scaleout.multidevice import MultiDeviceImager
from .scaleout.partition import cpu_sub_devices
from .pipeline import image_measurement_set

__version__ = "0.1.0"

__all__ = [
    "Imager", "dirty2vis", "vis2dirty", "dirty2ms", "ms2dirty", "MultiDeviceImager",
    "cpu_sub_devices",
    "Degridder", "Gridder", "RegisterParams", "TileShape", "gcf",
    "StreamingGridder", "choose_method",
    "ImageWeighting", "image_measurement_set",
    "HealpixGather", "SlGrid", "WcsGrid",
    "BSplinePrefilter", "CelestialPlane", "Reprojector", "reproject_interp",
    "ATOMIC_PATHS", "ConcurrentUseError", "DeviceProfile", "KernelTemplate", "Operation", "ScatterAdd",
    "create_context", "devices", "register_icd", "register_intel_cpu_runtime", "render",
    "resolve_queue", "scatter_add_reference", "select_device",
]

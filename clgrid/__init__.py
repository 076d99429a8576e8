"""clgrid: radio-astronomy gridding on any OpenCL device.

Importing clgrid registers the Intel CPU runtime from PyPI (the ``intel``
extra) with the OpenCL ICD loader of this process, before pyopencl first
enumerates platforms.
"""

from ._icd import register_icd, register_intel_cpu_runtime

register_intel_cpu_runtime()

from .device import (  # noqa: E402  (after ICD registration on purpose)
    ATOMIC_PATHS, DeviceProfile, create_context, devices, resolve_queue, select_device)
from .kernels import KernelTemplate, Operation, render  # noqa: E402
from .scatter import ScatterAdd, scatter_add_reference  # noqa: E402
from .reproject import BSplinePrefilter, Reprojector, reproject_interp  # noqa: E402
from .wcs_params import CelestialPlane  # noqa: E402
from .singledish import HealpixGather, SlGrid, WcsGrid  # noqa: E402
from .weighting import ImageWeighting  # noqa: E402
from .pipeline import image_measurement_set  # noqa: E402
from . import gcf  # noqa: E402
from .gridder import Degridder, Gridder, GridderParams  # noqa: E402
from .streaming import StreamingGridder  # noqa: E402
from .tiled import TiledParams  # noqa: E402
from .dispatch import ImageParams, choose as choose_strategy  # noqa: E402
from .imaging import Imager, dirty2vis, vis2dirty  # noqa: E402
from .multidevice import MultiDeviceImager, cpu_sub_devices  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Imager", "dirty2vis", "vis2dirty", "MultiDeviceImager", "cpu_sub_devices",
    "Degridder", "Gridder", "GridderParams", "gcf",
    "ImageParams", "StreamingGridder", "TiledParams", "choose_strategy",
    "ImageWeighting", "image_measurement_set",
    "HealpixGather", "SlGrid", "WcsGrid",
    "BSplinePrefilter", "CelestialPlane", "Reprojector", "reproject_interp",
    "ATOMIC_PATHS", "DeviceProfile", "KernelTemplate", "Operation", "ScatterAdd",
    "create_context", "devices", "register_icd", "register_intel_cpu_runtime", "render",
    "resolve_queue", "scatter_add_reference", "select_device",
]

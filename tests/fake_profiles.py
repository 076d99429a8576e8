"""Fake device profiles for the dispatch and tuning tests: what clgrid would
choose on devices this machine does not have."""

import dataclasses

from clgrid.device.profiles import DeviceProfile

#: An H100-like GPU: native float atomics, fp64, 64-bit integer atomics,
#: images, 48 KiB local memory.
BASE = DeviceProfile(
    platform_name="Fake", device_name="fake", vendor="fake", driver_version="1",
    device_type="gpu", compute_units=132, max_work_group_size=1024,
    max_work_item_sizes=(1024, 1024, 64), warp_size=32, local_mem_bytes=48 * 1024,
    global_mem_bytes=80 << 30, max_alloc_bytes=20 << 30, image_support=True,
    image2d_max=(32768, 32768), image3d_max=(16384, 16384, 2048), fp64=True,
    atomic_f32="native-ptx", atomic_f64="native-ptx", opencl_c_version=(1, 2),
    extensions=frozenset({"cl_khr_fp64", "cl_khr_int64_base_atomics",
                          "cl_khr_int64_extended_atomics"}))
POCL = "Portable Computing Language"


def fake(**changes) -> DeviceProfile:
    """:data:`BASE` with ``changes``."""
    return dataclasses.replace(BASE, **changes)

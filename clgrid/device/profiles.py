"""OpenCL device discovery, selection and profiles.

A :class:`DeviceProfile` holds what clgrid uses of a device: its limits,
its warp/wavefront width and which float atomic path its kernels get.  It is
a plain dataclass so that tests and the dispatcher can build fake profiles.

Above 400 lines on purpose: every device quirk clgrid knows (probes of
atomics, fp64, work-group multiples, unusable platforms) is in this one
file, next to the ranking and selection that read them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import re
import threading
import warnings
from typing import Iterable, Sequence

import pyopencl as cl

#: Float atomic capabilities, best first.
ATOMIC_PATHS = ("native-ptx", "native-cl", "cas")

_FORCE_ATOMICS_VARIABLE = "CLGRID_FORCE_ATOMICS"
_DEVICE_VARIABLE = "CLGRID_DEVICE"

_FP32_ATOMIC_PROBE = """
__kernel void probe(volatile __global float *x) {
    atomic_fetch_add_explicit((volatile __global atomic_float *)x, 1.0f,
                              memory_order_relaxed, memory_scope_device);
}
"""
_FP64_ATOMIC_PROBE = """
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void probe(volatile __global double *x) {
    atomic_fetch_add_explicit((volatile __global atomic_double *)x, 1.0,
                              memory_order_relaxed, memory_scope_device);
}
"""
_WG_MULTIPLE_PROBE = "__kernel void probe(__global float *x) { x[get_global_id(0)] *= 2.0f; }"


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """What clgrid knows and uses of one OpenCL device.

    Attributes
    ----------
    platform_name, device_name, vendor, driver_version
        As reported by the platform.
    device_type
        ``'gpu'``, ``'cpu'``, ``'accelerator'`` or ``'other'``.
    compute_units, max_work_group_size, max_work_item_sizes
        Device limits.
    warp_size
        Preferred work-group multiple: NVIDIA warp size, AMD wavefront width,
        else the ``PREFERRED_WORK_GROUP_SIZE_MULTIPLE`` of a probe kernel.
    local_mem_bytes, global_mem_bytes, max_alloc_bytes
        Memory sizes.
    base_align_bytes
        Alignment of a sub-buffer's origin (``MEM_BASE_ADDR_ALIGN`` in bytes).
    image_support, image2d_max, image3d_max
        Image objects and their largest sizes ((width, height) and
        (width, height, depth)).
    fp64
        Whether the device has double precision.
    atomic_f32, atomic_f64
        Float atomic path for 32- and 64-bit floats: ``'native-ptx'`` (inline
        PTX ``red.global.add``), ``'native-cl'`` (``cl_ext_float_atomics``)
        or ``'cas'`` (compare-and-swap loop).
    opencl_c_version
        Highest OpenCL C version the device compiles, e.g. ``(3, 0)``.
    is_simulator
        True for Oclgrind: correct but thousands of times slower.
    platform_index, device_index
        Position in :func:`pyopencl.get_platforms` order.
    """

    platform_name: str
    device_name: str
    vendor: str
    driver_version: str
    device_type: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    warp_size: int
    local_mem_bytes: int
    global_mem_bytes: int
    max_alloc_bytes: int
    image_support: bool
    image2d_max: tuple[int, int]
    image3d_max: tuple[int, int, int]
    fp64: bool
    atomic_f32: str
    atomic_f64: str
    opencl_c_version: tuple[int, int]
    is_simulator: bool = False
    platform_index: int = -1
    device_index: int = -1
    extensions: frozenset[str] = frozenset()
    build_problem: str = ""
    base_align_bytes: int = 128

    @property
    def usable(self) -> bool:
        """False when the device's compiler cannot build even a trivial kernel
        (PoCL 3.0's LLVM 14 on CPUs it does not know, such as AMD Zen 5)."""
        return not self.build_problem

    @property
    def vector_kernels(self) -> bool:
        """False where the compiler cannot be trusted with the CPU kernels'
        16-wide vectors: PyPI's PoCL 3.0 (LLVM 14) spends minutes in
        instcombine on ``spread_vector`` or aborts the process ("LLVM ERROR:
        Do not know how to scalarize this operator's operand"), seen on AMD
        EPYC 2026-11-25; PoCL 3.1 (LLVM 15) and 5 build them."""
        return not (self.platform_key == "pocl"
                    and _version_tuple(self.driver_version) < (3, 1))

    @property
    def float_atomics(self) -> str:
        """The float32 atomic path, the headline capability."""
        return self.atomic_f32

    @property
    def platform_key(self) -> str:
        """Short platform name: ``pocl``, ``intel``, ``oclgrind``, ``nvidia``, ..."""
        return platform_key(self.platform_name)

    @property
    def cache_key(self) -> str:
        """Identifies the device and driver, e.g. for tuning caches."""
        return f"{self.platform_name}|{self.device_name}|{self.driver_version}"

    def atomic_path(self, dtype_bits: int, forced: str | None = None) -> str:
        """Atomic path for floats of ``dtype_bits`` bits, honouring a forced path.

        Forcing ``'cas'`` always works; forcing a native path the device does
        not have raises ``ValueError``.
        """
        native = self.atomic_f32 if dtype_bits == 32 else self.atomic_f64
        forced = forced or os.environ.get(_FORCE_ATOMICS_VARIABLE) or None
        if forced is None:
            return native
        if forced not in ATOMIC_PATHS:
            raise ValueError(f"unknown atomic path {forced!r}; expected one of {ATOMIC_PATHS}")
        if forced != "cas" and forced != native:
            raise ValueError(
                f"{self.device_name!r} has no {forced!r} float{dtype_bits} atomics "
                f"(it has {native!r})")
        return forced

    def supported_atomic_paths(self, dtype_bits: int) -> tuple[str, ...]:
        """Every path usable for ``dtype_bits``-bit floats, native first."""
        native = self.atomic_f32 if dtype_bits == 32 else self.atomic_f64
        return (native,) if native == "cas" else (native, "cas")

    @classmethod
    def from_device(cls, device: cl.Device) -> "DeviceProfile":
        """Build the profile of ``device`` from queries (cached per device)."""
        return _profile_of(device)

    def summary(self) -> dict:
        """Plain dict of the fields shown by ``clgrid devices``."""
        return {
            "id": f"{self.platform_index}:{self.device_index}",
            "platform": self.platform_key,
            "device": self.device_name,
            "driver": self.driver_version[:24],
            "type": self.device_type,
            "CUs": self.compute_units,
            "max WG": self.max_work_group_size,
            "warp": self.warp_size,
            "local KiB": self.local_mem_bytes // 1024,
            "global GiB": round(self.global_mem_bytes / 2**30, 1),
            "max alloc GiB": round(self.max_alloc_bytes / 2**30, 1),
            "images": "yes" if self.image_support else "no",
            "fp64": "yes" if self.fp64 else "no",
            "atomic f32": self.atomic_f32,
            "atomic f64": self.atomic_f64,
            "OpenCL C": "%d.%d" % self.opencl_c_version,
            "usable": "yes" if self.usable else f"no: {self.build_problem}",
        }


def platform_key(platform_name: str) -> str:
    """Short lower-case name for a platform."""
    name = platform_name.lower()
    for key, needle in (("oclgrind", "oclgrind"), ("pocl", "portable computing language"),
                        ("pocl", "pocl"), ("intel", "intel"), ("nvidia", "nvidia"),
                        ("amd", "amd"), ("apple", "apple")):
        if needle in name:
            return key
    return name.split()[0] if name else "unknown"


def _device_type_name(device: cl.Device) -> str:
    kind = device.type
    if kind & cl.device_type.GPU:
        return "gpu"
    if kind & cl.device_type.CPU:
        return "cpu"
    if kind & cl.device_type.ACCELERATOR:
        return "accelerator"
    return "other"


def _opencl_c_version(device: cl.Device) -> tuple[int, int]:
    try:
        text = device.opencl_c_version  # "OpenCL C 1.2 ..."
        major, minor = text.split()[2].split(".")[:2]
        version = (int(major), int(minor))
    except (cl.Error, ValueError, IndexError):
        version = (1, 2)
    if version >= (3, 0) or not device.version.startswith("OpenCL 3"):
        return version
    try:  # OpenCL 3.0 devices may report 1.2 here but list 3.0 elsewhere
        for item in device.opencl_c_all_versions:
            version = max(version, (item.version >> 22, (item.version >> 12) & 0x3FF))
    except (cl.Error, AttributeError):
        pass
    return version


def _probe_builds(context: cl.Context, source: str, options: Sequence[str]) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cl.Program(context, source).build(options=list(options), cache_dir=False)
        return True
    except (cl.Error, RuntimeError):
        return False


def _native_cl_atomics(device: cl.Device, context: cl.Context, fp64: bool) -> tuple[bool, bool]:
    """Whether ``cl_ext_float_atomics`` global add works for fp32 and fp64."""
    if "cl_ext_float_atomics" not in device.extensions.split():
        return False, False
    if _opencl_c_version(device) < (2, 0):
        return False, False
    options = ["-cl-std=CL3.0" if _opencl_c_version(device) >= (3, 0) else "-cl-std=CL2.0"]
    f32 = _probe_builds(context, _FP32_ATOMIC_PROBE, options)
    f64 = fp64 and _probe_builds(context, _FP64_ATOMIC_PROBE, options)
    return f32, f64


def _probe_kernel(context: cl.Context) -> tuple[cl.Kernel | None, str]:
    """A trivial kernel, or None and the compiler's complaint."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cl.Program(context, _WG_MULTIPLE_PROBE).build(cache_dir=False).probe, ""
    except (cl.Error, RuntimeError) as error:
        lines = [line.strip() for line in str(error).splitlines() if "error" in line.lower()]
        return None, (lines[-1] if lines else str(error).splitlines()[0])[:200]


def _warp_size(device: cl.Device, probe: cl.Kernel | None) -> int:
    for attribute in ("warp_size_nv", "wavefront_width_amd"):
        try:
            value = getattr(device, attribute)
            if value:
                return int(value)
        except (cl.Error, AttributeError):
            continue
    if probe is None:
        return 1
    return int(probe.get_work_group_info(
        cl.kernel_work_group_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, device))


def _is_nvidia_gpu(device: cl.Device) -> bool:
    return "nvidia" in device.platform.name.lower() and bool(device.type & cl.device_type.GPU)


@functools.lru_cache(maxsize=None)
def _profile_of(device: cl.Device) -> DeviceProfile:
    context = cl.Context([device])
    probe, build_problem = _probe_kernel(context)
    fp64 = bool(device.double_fp_config) or "cl_khr_fp64" in device.extensions.split()
    if _is_nvidia_gpu(device):
        major = getattr(device, "compute_capability_major_nv", 6)
        atomic_f32 = "native-ptx"
        atomic_f64 = "native-ptx" if (fp64 and major >= 6) else "cas"
    else:
        native32, native64 = _native_cl_atomics(device, context, fp64)
        atomic_f32 = "native-cl" if native32 else "cas"
        atomic_f64 = "native-cl" if native64 else "cas"
    platforms = cl.get_platforms()
    platform_index = next(i for i, p in enumerate(platforms) if p == device.platform)
    root = device  # a sub-device (create_sub_devices) is listed as its root device
    while getattr(root, "parent_device", None) is not None:
        root = root.parent_device
    device_index = platforms[platform_index].get_devices().index(root)
    image2d = image3d = (0, 0)
    if device.image_support:
        image2d = (device.image2d_max_width, device.image2d_max_height)
        image3d = (device.image3d_max_width, device.image3d_max_height, device.image3d_max_depth)
    return DeviceProfile(
        platform_name=device.platform.name.strip(),
        device_name=device.name.strip(),
        vendor=device.vendor.strip(),
        driver_version=device.driver_version.strip(),
        device_type=_device_type_name(device),
        compute_units=int(device.max_compute_units),
        max_work_group_size=int(device.max_work_group_size),
        max_work_item_sizes=tuple(int(s) for s in device.max_work_item_sizes),
        warp_size=_warp_size(device, probe),
        local_mem_bytes=int(device.local_mem_size),
        global_mem_bytes=int(device.global_mem_size),
        max_alloc_bytes=int(device.max_mem_alloc_size),
        image_support=bool(device.image_support),
        image2d_max=tuple(int(s) for s in image2d),
        image3d_max=tuple(int(s) for s in image3d) if device.image_support else (0, 0, 0),
        fp64=fp64,
        atomic_f32=atomic_f32,
        atomic_f64=atomic_f64 if fp64 else "none",
        opencl_c_version=_opencl_c_version(device),
        is_simulator="oclgrind" in device.platform.name.lower(),
        platform_index=platform_index,
        device_index=device_index,
        extensions=frozenset(device.extensions.split()),
        build_problem=build_problem,
        base_align_bytes=max(1, int(device.mem_base_addr_align) // 8),
    )


def all_devices() -> list[cl.Device]:
    """Every OpenCL device of every platform, in platform order."""
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # the loader found no platform at all
        return []
    found = []
    for platform in platforms:
        try:
            found.extend(platform.get_devices())
        except cl.Error:
            continue  # a platform with no devices
    return found


def devices() -> list[DeviceProfile]:
    """Profiles of every OpenCL device on every platform."""
    return [DeviceProfile.from_device(device) for device in all_devices()]


def _version_tuple(text: str) -> tuple[int, ...]:
    """Leading dotted numbers of a driver version: ``'3.1+debian'`` -> ``(3, 1)``."""
    match = re.match(r"\s*(\d+(?:\.\d+)*)", text)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def _rank(profile: DeviceProfile) -> tuple:
    """Sort key of devices, best last: usable first of all, so that ``"pocl"``
    names a PoCL that builds kernels where another (PyPI's 3.0 on AMD Zen 5)
    cannot; among equals the newer driver wins."""
    type_rank = {"gpu": 3, "accelerator": 2, "cpu": 1}.get(profile.device_type, 0)
    return (profile.usable, not profile.is_simulator, type_rank, profile.atomic_f32 != "cas",
            profile.compute_units, _version_tuple(profile.driver_version))


def unusable_hint(profile: DeviceProfile) -> str:
    """What to install instead of a device that cannot build kernels."""
    if profile.platform_key == "pocl":
        return ("on Debian/Ubuntu `apt install pocl-opencl-icd` adds a PoCL built on a newer "
                "LLVM (clgrid finds it next to this one), or pip install 'clgrid[intel]' "
                "for the Intel CPU runtime")
    return "pip install 'clgrid[intel]' for the Intel CPU runtime, or another OpenCL driver"


def _match_spec(spec: str, candidates: Iterable[cl.Device]) -> cl.Device:
    candidates = list(candidates)
    spec = spec.strip()
    if ":" in spec and all(part.strip().isdigit() for part in spec.split(":", 1)):
        platform_index, device_index = (int(part) for part in spec.split(":", 1))
        platforms = cl.get_platforms()
        if platform_index >= len(platforms):
            raise LookupError(f"no OpenCL platform {platform_index} (found {len(platforms)})")
        platform_devices = platforms[platform_index].get_devices()
        if device_index >= len(platform_devices):
            raise LookupError(f"platform {platform_index} has no device {device_index}")
        return platform_devices[device_index]
    if spec.isdigit():
        return _match_spec(f"{spec}:0", candidates)
    needle = spec.lower()
    matches = [d for d in candidates
               if needle in f"{d.platform.name} {d.name}".lower()
               or needle == platform_key(d.platform.name)]
    if not matches:
        names = ", ".join(f"{platform_key(d.platform.name)}: {d.name.strip()}" for d in candidates)
        raise LookupError(f"no OpenCL device matches {spec!r}; available: {names or 'none'}")
    return max(matches, key=lambda d: _rank(DeviceProfile.from_device(d)))


def select_device(device: "str | cl.Device | DeviceProfile | None" = None) -> cl.Device:
    """Pick one OpenCL device.

    Order: an explicit ``device`` argument; else ``CLGRID_DEVICE``; else
    ``PYOPENCL_CTX``; else the best available device (GPU over CPU, native
    float atomics over CAS, more compute units; never a simulator unless it
    is all there is).

    Parameters
    ----------
    device
        A :class:`pyopencl.Device`, a :class:`DeviceProfile`, or a string:
        ``"platform:device"`` indices, or a case-insensitive substring of the
        platform or device name (``"pocl"``, ``"intel"``, ``"H200"``).  A
        name several devices match picks the best of them by the same order,
        devices that can build kernels first: with PyPI's PoCL 3.0 and a
        system PoCL (Debian's ``pocl-opencl-icd``) both present, ``"pocl"``
        gives the one that builds, the newer driver if both do.

    Raises
    ------
    LookupError
        When nothing matches ``device``.
    RuntimeError
        When the chosen device cannot build kernels on this machine, with
        what to install instead.
    """
    if isinstance(device, cl.Device):
        return device
    candidates = all_devices()
    if not candidates:
        raise RuntimeError(
            "no OpenCL device found; install a driver, e.g. "
            "pip install 'clgrid[pocl]' (PoCL) or 'clgrid[intel]' (Intel CPU runtime)")
    if isinstance(device, DeviceProfile):
        return _match_spec(f"{device.platform_index}:{device.device_index}", candidates)
    chosen = None
    for spec in (device, os.environ.get(_DEVICE_VARIABLE), os.environ.get("PYOPENCL_CTX")):
        if spec:
            chosen = _match_spec(str(spec), candidates)
            break
    if chosen is None:
        chosen = max(candidates, key=lambda d: _rank(DeviceProfile.from_device(d)))
    profile = DeviceProfile.from_device(chosen)
    if not profile.usable:
        raise RuntimeError(
            f"OpenCL device {profile.device_name!r} ({profile.platform_key} "
            f"{profile.driver_version}) cannot build kernels on this machine: "
            f"{profile.build_problem}; {unusable_hint(profile)}")
    return chosen


# One context per selected device for the life of the process: calls without
# a device argument share it (and everything cached on it), so nothing kept
# grows with the number of calls.  Held here because some drivers (the Intel
# CPU runtime) free a context whose last Python reference is gone even while
# a queue on it lives.
_default_contexts: dict[int, tuple[cl.Device, cl.Context]] = {}
_default_contexts_lock = threading.Lock()


def create_context(device: "str | cl.Device | DeviceProfile | None" = None) -> cl.Context:
    """The process's :class:`pyopencl.Context` on the device
    :func:`select_device` picks: one per device, made on first use and kept
    for the life of the process, so ``cl.CommandQueue(clgrid.create_context())``
    stays valid and repeated calls share kernels, plans and pools (make a
    ``pyopencl.Context`` yourself for a context of your own)."""
    chosen = select_device(device)
    with _default_contexts_lock:
        entry = _default_contexts.get(chosen.int_ptr)
        if entry is None:
            entry = (chosen, cl.Context([chosen]))
            _default_contexts[chosen.int_ptr] = entry
    return entry[1]


def is_process_context(context: cl.Context) -> bool:
    """Whether ``context`` is one :func:`create_context` made (kept for the
    life of the process), not a caller's own."""
    with _default_contexts_lock:
        return any(made.int_ptr == context.int_ptr for _, made in _default_contexts.values())


def _context_device(context: cl.Context) -> cl.Device:
    """The device queues on ``context`` go to: the one it was made for where
    clgrid made it (PoCL 3.1 reports the root device as the device of a
    context made on a sub-device), else its first."""
    for device, made in list(_default_contexts.values()):
        if made.int_ptr == context.int_ptr:
            return device
    return context.devices[0]


def context_of(queue: cl.CommandQueue) -> cl.Context:
    """The context of ``queue`` (the object it was made from, where known)."""
    return getattr(queue, "_clgrid_context", None) or queue.context


#: Default queues per thread: at most this many contexts' queues a thread.
_QUEUES_PER_THREAD = 8
_thread_queues = threading.local()


def default_queue(context: cl.Context) -> cl.CommandQueue:
    """This thread's queue on ``context`` (its device as :func:`resolve_queue`
    says): made on first use and kept while the thread uses the context; a
    thread keeps those of its last few contexts.  In-order queues of one
    thread never interleave another thread's commands."""
    queues = getattr(_thread_queues, "by_context", None)
    if queues is None:
        queues = _thread_queues.by_context = collections.OrderedDict()
    queue = queues.pop(context.int_ptr, None)
    if queue is None:
        queue = cl.CommandQueue(context, _context_device(context))
        queue._clgrid_context = context   # keeps the context alive with the queue
    queues[context.int_ptr] = queue
    while len(queues) > _QUEUES_PER_THREAD:
        queues.popitem(last=False)
    return queue


def resolve_queue(context_or_queue: "cl.Context | cl.CommandQueue | None" = None,
                  ) -> cl.CommandQueue:
    """A command queue from a context, a queue (returned as is) or nothing.

    ``None`` means the process's default context (:func:`create_context`);
    a context gives this thread's default queue on it (:func:`default_queue`),
    not a new queue per call.  A context with several devices uses its first.
    """
    if isinstance(context_or_queue, cl.CommandQueue):
        return context_or_queue
    if context_or_queue is None:
        context_or_queue = create_context()
    if not isinstance(context_or_queue, cl.Context):
        raise TypeError("expected a pyopencl Context or CommandQueue, got "
                        f"{type(context_or_queue).__name__}")
    return default_queue(context_or_queue)

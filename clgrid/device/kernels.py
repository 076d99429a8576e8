"""Rendering and building of the Mako OpenCL templates.

Every kernel family lives in one ``templates/*.cl.mako`` file.  A template is
rendered with explicit, validated parameters plus the device profile and the
resolved float-atomic paths, then built once per (context, device, source,
options) and kept in memory -- the :data:`MAX_PROGRAMS` most recently used
(``CLGRID_PROGRAM_CACHE`` overrides; a program in use stays alive with its
users) -- and pyopencl's binary cache keeps it on disk too.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyopencl as cl
from mako.lookup import TemplateLookup

from .profiles import DeviceProfile, context_of, resolve_queue


def templates_dir() -> Path:
    """Folder of the Mako templates (installed package data, or the repo's)."""
    try:
        folder = Path(str(resources.files("clgrid.templates")))
        if any(folder.glob("*.mako")):
            return folder
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "templates"


_lookup: TemplateLookup | None = None
#: Most built programs kept in memory for reuse, least recently used dropped
#: first.  The core's sources carry the kernel's support and beta, so every
#: kernel choice is a program of its own: ducc0's test file (epsilons from
#: 1e-1 to 1e-12, both precisions, w on and off) built 608 distinct ones in a
#: 1-in-10 sample.  Generous on purpose: the Intel CPU runtime keeps about
#: 2.2 MB of a program whose kernels were made even after it is released
#: (measured: 300 built-and-dropped programs, +670 MB; PoCL +50 MB), so there
#: a dropped program that is built again costs that memory twice; a cap of
#: 256 ended that sample at 1.78 GB and still growing, 1024 at 2.05 GB, flat.
MAX_PROGRAMS = 1024
_programs: collections.OrderedDict[tuple, cl.Program] = collections.OrderedDict()
_programs_lock = threading.Lock()


def max_programs() -> int:
    """``CLGRID_PROGRAM_CACHE`` (an integer >= 1) or :data:`MAX_PROGRAMS`."""
    override = os.environ.get("CLGRID_PROGRAM_CACHE")
    if not override:
        return MAX_PROGRAMS
    if not override.isdigit() or int(override) < 1:
        raise ValueError(f"CLGRID_PROGRAM_CACHE must be an integer >= 1, got {override!r}")
    return int(override)


def _template_lookup() -> TemplateLookup:
    global _lookup
    if _lookup is None:
        # read once per process: a template file rewritten under a running
        # job (a reinstall, a copied tree) must not change the kernels midway
        # (Mako's default re-reads a file whose time changed; ducc0's suite
        # then built programs with no kernels)
        _lookup = TemplateLookup(directories=[str(templates_dir())], strict_undefined=True,
                                 filesystem_checks=False)
    return _lookup


def render(template_name: str, **params: Any) -> str:
    """Render ``templates/<template_name>`` with ``params`` (strict: every
    name the template uses must be given)."""
    return _template_lookup().get_template(template_name).render(**params)


def atomic_params(profile: DeviceProfile, forced: str | None = None,
                  need_f64: bool = False) -> dict[str, str]:
    """Template parameters of ``atomics.cl.mako`` for this device."""
    params = {"atomic_f32": profile.atomic_path(32, forced), "atomic_f64": "none"}
    if need_f64:
        if not profile.fp64:
            raise ValueError(f"{profile.device_name!r} has no double precision (fp64)")
        params["atomic_f64"] = profile.atomic_path(64, forced)
    return params


def build_options(profile: DeviceProfile, atomics: Mapping[str, str],
                  extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Compiler options: OpenCL C 3.0 where native CL atomics need it."""
    options = list(extra)
    if "native-cl" in atomics.values():
        options.append("-cl-std=CL3.0" if profile.opencl_c_version >= (3, 0) else "-cl-std=CL2.0")
    return tuple(options)


@contextlib.contextmanager
def quiet_builds():
    """Hide pyopencl's CompilerWarning for the builds inside (clgrid's own
    programs, reikna's FFTs, pyopencl's reduction kernels): drivers chat on
    success (Intel prints a build log) and real errors raise anyway.
    PYOPENCL_COMPILER_OUTPUT=1 (``clgrid image --verbose``) shows them."""
    with warnings.catch_warnings():
        if os.environ.get("PYOPENCL_COMPILER_OUTPUT", "").lower() not in ("1", "true", "yes"):
            warnings.simplefilter("ignore", cl.CompilerWarning)
        yield


def _fresh_build(context: cl.Context, device: cl.Device, source: str,
                 options: tuple[str, ...]) -> cl.Program:
    """Build past the drivers' kernel caches.  PyPI's PoCL 3.0 hands back a
    program whose 16-wide vectors made its compiler warn (AVX ABI) from its
    kernel cache with no kernels in it (the first build is good): a source
    with an option no cache holds is built afresh."""
    nonce = f"-DCLGRID_FRESH_BUILD={os.getpid()}_{time.time_ns()}"
    # past pyopencl's binary cache too: an entry under a one-off key is
    # never read again, and writing it can fail where the cache is broken
    program = cl.Program(context, source).build(options=[*options, nonce], devices=[device],
                                                cache_dir=False)
    if not program.all_kernels():
        raise RuntimeError(f"{device.platform.name.strip()} built a program with no kernels "
                           "in it (set PYOPENCL_COMPILER_OUTPUT=1 to see its build log)")
    return program


def _is_build_failure(error: Exception) -> bool:
    """Whether ``error`` is the compiler refusing the source (which a build
    without the cache would only repeat)."""
    code = getattr(error, "code", None)
    return isinstance(error, cl.Error) and code == cl.status_code.BUILD_PROGRAM_FAILURE


def _cached_build(context: cl.Context, device: cl.Device, source: str,
                  options: tuple[str, ...]) -> cl.Program:
    """Build through pyopencl's binary cache; where the cache itself fails
    (a corrupt or unwritable entry: pyopencl 2026.1's recovery path then
    raises ``KeyError: 'PYOPENCL_CACHE_FAILURE_FATAL'``), build without it
    and say so in one warning.  A cache only saves time."""
    try:
        return cl.Program(context, source).build(options=list(options), devices=[device])
    except Exception as error:   # noqa: BLE001 - whatever the cache raised
        if _is_build_failure(error):
            raise
        cache_error = error
    program = cl.Program(context, source).build(options=list(options), devices=[device],
                                                cache_dir=False)
    reason = f"{type(cache_error).__name__}: {str(cache_error).splitlines()[0][:120]}" \
        if str(cache_error) else type(cache_error).__name__
    warnings.warn(f"pyopencl's kernel cache failed ({reason}); built without it (delete "
                  f"{_pyopencl_cache_folder()} if this repeats)", RuntimeWarning, stacklevel=3)
    return program


def _pyopencl_cache_folder() -> str:
    """Where pyopencl keeps its binaries (as ``pyopencl.cache`` finds it),
    for the warning: the folder to delete."""
    import platformdirs
    folder = platformdirs.user_cache_dir("pyopencl", "pyopencl")
    return os.path.join(folder, "pyopencl-compiler-cache-v2-py"
                        + ".".join(map(str, sys.version_info)))


def build_program(context: cl.Context, device: cl.Device, source: str,
                  options: tuple[str, ...] = ()) -> cl.Program:
    """Build ``source`` for ``device`` once per context; cached in memory
    and (where pyopencl caches binaries) on disk."""
    key = (context.int_ptr, device.int_ptr, source, options)
    with _programs_lock:
        program = _programs.get(key)
        if program is not None:
            _programs.move_to_end(key)
    if program is None:
        with quiet_builds():
            program = _cached_build(context, device, source, options)
            if not program.all_kernels():
                program = _fresh_build(context, device, source, options)
        most = max_programs()
        with _programs_lock:
            _programs[key] = program
            while len(_programs) > most:
                _programs.popitem(last=False)
    return program


class KernelTemplate:
    """One kernel family rendered and built for one device and parameter set.

    Parameters
    ----------
    queue
        Command queue whose device and context the program is built for.
    template_name
        File under ``templates/``.
    params
        Named template parameters (already validated by the caller).
    atomics
        Force an atomic path (``'cas'``...); default: the device's best,
        or ``CLGRID_FORCE_ATOMICS``.
    need_f64
        Whether the kernel uses double precision (and 64-bit atomics).
    options
        Extra compiler options.
    """

    def __init__(self, queue: cl.CommandQueue, template_name: str,
                 params: Mapping[str, Any], *, atomics: str | None = None,
                 need_f64: bool = False, options: tuple[str, ...] = ()):
        self.queue = queue
        self.profile = DeviceProfile.from_device(queue.device)
        self.atomics = atomic_params(self.profile, atomics, need_f64)
        self.params = dict(params)
        self.source = render(template_name, profile=self.profile, **self.atomics, **self.params)
        self.options = build_options(self.profile, self.atomics, options)
        self.program = build_program(context_of(queue), queue.device, self.source, self.options)

    def kernel(self, name: str) -> cl.Kernel:
        """A fresh kernel object (kernels hold arguments: one per caller)."""
        return cl.Kernel(self.program, name)

    def max_work_group_size(self, kernel: cl.Kernel) -> int:
        """The largest work-group this kernel may launch with on the device."""
        return int(kernel.get_work_group_info(
            cl.kernel_work_group_info.WORK_GROUP_SIZE, self.queue.device))


#: Work-group shapes :func:`launch` pins, by the number of dimensions: 64
#: work-items along the first (contiguous) axis, which CPU runtimes vectorise
#: and GPUs coalesce, and 1 along the others (so only the first is padded).
DEFAULT_GROUPS = {1: (64,), 2: (64, 1), 3: (64, 1, 1)}


def _kernel_group_limit(kernel: cl.Kernel, device: cl.Device) -> int:
    return int(kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device))


def pinned_group(kernel: cl.Kernel, device: cl.Device,
                 group: tuple[int, ...]) -> tuple[int, ...]:
    """``group``, its largest axis halved while the kernel cannot launch it."""
    group, limit = list(group), _kernel_group_limit(kernel, device)
    while int(np.prod(group)) > limit:
        axis = int(np.argmax(group))
        group[axis] = max(1, group[axis] // 2)
    return tuple(group)


def launch(kernel: cl.Kernel, queue: cl.CommandQueue, shape: tuple[int, ...], *args: Any,
           group: tuple[int, ...] | None = None,
           wait_for: list[cl.Event] | None = None) -> cl.Event:
    """Enqueue ``kernel`` over (at least) ``shape`` work-items in pinned groups.

    Each global size is rounded up to whole groups, so the kernel must return
    for ids past ``shape`` on every axis whose group is wider than 1.  The
    group shape is fixed (``group``, default :data:`DEFAULT_GROUPS`, halved
    where the kernel cannot launch that many) rather than left to the driver:
    a driver picks a divisor of the global size, which changes with every
    problem size, and PoCL compiles a new work-group function (0.1-1 s) for
    each group size it meets -- an unpinned launch cost a compile per new
    number of visibilities or image size.
    """
    shape = tuple(max(int(n), 1) for n in shape)
    group = pinned_group(kernel, queue.device, tuple(group or DEFAULT_GROUPS[len(shape)]))
    if len(group) != len(shape):
        raise ValueError(f"group {group} and shape {shape} differ in dimensions")
    global_size = tuple(-(-n // g) * g for n, g in zip(shape, group))
    return kernel(queue, global_size, group, *args, wait_for=wait_for)


class Operation:
    """Base of clgrid's compile-once operation objects.

    Holds a command queue and the device profile; subclasses build their
    :class:`KernelTemplate` in ``__init__`` and expose a light per-call method.
    """

    def __init__(self, context: "cl.Context | cl.CommandQueue | None" = None):
        self.queue = resolve_queue(context)
        self.context = context_of(self.queue)
        self.profile = DeviceProfile.from_device(self.queue.device)


def real_dtype_name(dtype: np.dtype) -> str:
    """OpenCL C scalar type name of a real float dtype."""
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return "float"
    if dtype == np.float64:
        return "double"
    raise TypeError(f"expected float32 or float64, got {dtype}")

"""Registration of OpenCL drivers with the ICD loader of this process.

The ICD loader bundled in the pyopencl wheel finds PoCL and Oclgrind by
itself, but the Intel CPU runtime from PyPI (``intel-opencl-rt``) installs
``libintelocl.so`` into ``<prefix>/lib`` without registering it anywhere.
The loader reads ``OCL_ICD_VENDORS`` once, when pyopencl first enumerates
platforms, so registration has to happen before that: ``import clgrid`` does
it.  Only this process's environment is changed, never the user's shell.

Pointing ``OCL_ICD_VENDORS`` at our own folder hides the system's vendors
folder (``/etc/OpenCL/vendors``, or ``OPENCL_VENDOR_PATH``) from the loader,
so the folder we write repeats every driver registered there: Debian's
``pocl-opencl-icd``, for one, which builds kernels on CPUs where PyPI's PoCL
3.0 cannot (AMD Zen 5).  A vendors folder the user chose through
``OCL_ICD_VENDORS`` is kept as the user's choice, as the loader does.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import platformdirs

_SYSTEM_VENDORS_DIR = Path("/etc/OpenCL/vendors")
_DISABLE_VARIABLE = "CLGRID_NO_ICD_REGISTRATION"
_registered: list[str] = []


def find_intel_cpu_runtime() -> Path | None:
    """Return the path of ``libintelocl.so`` from the ``intel`` extra, if installed."""
    candidates = [Path(sys.prefix) / "lib" / "libintelocl.so"]
    if sys.base_prefix != sys.prefix:
        candidates.append(Path(sys.base_prefix) / "lib" / "libintelocl.so")
    for path in candidates:
        if path.is_file():
            return path
    return None


def system_vendors_dir() -> Path:
    """The vendors folder the ICD loader reads when ``OCL_ICD_VENDORS`` is unset."""
    return Path(os.environ.get("OPENCL_VENDOR_PATH") or _SYSTEM_VENDORS_DIR)


def _existing_icd_lines() -> list[str]:
    """Library paths the loader would have used without our folder."""
    sources: list[Path] = []
    current = os.environ.get("OCL_ICD_VENDORS")
    if current:
        current_path = Path(current)
        if current_path.is_dir():
            sources.extend(sorted(current_path.glob("*.icd")))
        elif current_path.is_file():
            sources.append(current_path)
    elif system_vendors_dir().is_dir():
        sources.extend(sorted(system_vendors_dir().glob("*.icd")))
    lines = []
    for source in sources:
        try:
            line = source.read_text().strip()
        except OSError:
            continue
        if line:
            lines.append(line)
    return lines


def register_icd(library_path: str | os.PathLike) -> bool:
    """Make an OpenCL driver library visible to this process's ICD loader.

    Writes a vendors folder (under the user cache directory) that holds the
    drivers already visible plus ``library_path``, and points
    ``OCL_ICD_VENDORS`` of this process at it.  Must run before pyopencl
    first enumerates platforms; later calls have no effect on an already
    initialised loader.

    Parameters
    ----------
    library_path
        Absolute path of the driver's shared library (``libintelocl.so``,
        ``libnvidia-opencl.so.1``, ...).

    Returns
    -------
    bool
        True if the folder was (re)written, False if the library was already
        registered.
    """
    library = str(Path(library_path).resolve())
    lines = _existing_icd_lines()
    if library in lines or library in _registered:
        return False
    lines = lines + [library]
    key = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]
    folder = Path(platformdirs.user_cache_dir("clgrid")) / "icd" / key
    folder.mkdir(parents=True, exist_ok=True)
    for index, line in enumerate(lines):
        (folder / f"{index:02d}.icd").write_text(line + "\n")
    os.environ["OCL_ICD_VENDORS"] = str(folder)
    _registered.append(library)
    return True


def register_intel_cpu_runtime() -> bool:
    """Register the Intel CPU runtime from PyPI, if it is installed.

    Set ``CLGRID_NO_ICD_REGISTRATION=1`` to leave the loader alone.
    """
    if os.environ.get(_DISABLE_VARIABLE, "") not in ("", "0"):
        return False
    library = find_intel_cpu_runtime()
    if library is None:
        return False
    try:
        return register_icd(library)
    except OSError:
        # A read-only cache directory must not make clgrid unimportable;
        # the other platforms still work.
        return False

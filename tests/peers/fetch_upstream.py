"""Put a peer's own test files in place from its pinned sdist on PyPI.

cygrid's tests are GPL-3.0, ducc0's GPL-2.0-or-later, and clgrid is
BSD-3-Clause, so they are not kept in this repository: ``tox -e
peers-cygrid`` / ``tox -e peers-ducc0`` run this first (the tox env's setup,
like its package installs; nothing is downloaded while tests run).  The
sdist's sha256 and each file's (``<peer>/files.py``'s ``VENDORED``) are
checked.

    python tests/peers/fetch_upstream.py cygrid ducc0
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: peer -> (pip requirement, sdist sha256, prefix of the files in the sdist,
#: pip's --no-binary value: ":all:" takes the build requirements pip needs to
#: read the sdist's metadata from source too, the package's name only its own)
SDISTS = {
    "cygrid": ("cygrid==2.0.4",
               "ebc49f8ff3cd2c0363783e261825a3e6b948374703be56289f0937e11af4456a",
               "cygrid-2.0.4/", ":all:"),
    # scikit-build-core and nanobind (its build requirements) as wheels
    "ducc0": ("ducc0==0.42.0",
              "4e11c59b53a43355b053aebb2a62ee16eebeed026575f7d216cf09d437ce52ef",
              "ducc0-0.42.0/", "ducc0"),
}


def _wanted(peer: str) -> dict[str, str]:
    """The peer conftest's ``VENDORED``: file -> sha256."""
    spec = importlib.util.spec_from_file_location(f"_{peer}_files", HERE / peer / "files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.VENDORED


def _differences(peer: str) -> tuple[list[str], list[str]]:
    """The peer's pinned files missing here, and those here that differ."""
    wanted, folder = _wanted(peer), HERE / peer
    missing = [name for name in wanted if not (folder / name).exists()]
    changed = [name for name, digest in wanted.items() if name not in missing
               and hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest]
    return missing, changed


def fetched_problem(peer: str, version: str, licence: str) -> str | None:
    """Why a peer's fetched test files cannot run (missing, or not the pinned
    ones), as the one line its conftest raises; None when they are in place."""
    missing, changed = _differences(peer)
    if missing:
        return (f"{peer}'s test files are not here ({missing[0]}): they are {licence}, so "
                f"not kept in clgrid's repository; run `python tests/peers/fetch_upstream.py "
                f"{peer}` first (tox -e peers-{peer} does)")
    if changed:
        return f"fetched {peer} files differ from {peer} {version}'s sdist: {changed}"
    return None


def fetch(peer: str) -> None:
    requirement, sdist_sha256, prefix, no_binary = SDISTS[peer]
    wanted = _wanted(peer)
    target = HERE / peer
    if _differences(peer) == ([], []):
        return
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", no_binary, "-d", folder, requirement], check=True)
        sdist = next(Path(folder).glob("*.tar.gz"))
        if hashlib.sha256(sdist.read_bytes()).hexdigest() != sdist_sha256:
            raise SystemExit(f"{sdist.name}: not the sdist the tests were pinned to")
        with tarfile.open(sdist) as archive:
            for name, digest in wanted.items():
                data = archive.extractfile(prefix + name).read()
                if hashlib.sha256(data).hexdigest() != digest:
                    raise SystemExit(f"{name} in {sdist.name} differs from the pinned file")
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                (target / name).write_bytes(data)
    print(f"fetch_upstream: {peer}'s test files from {sdist.name} in {target}")


if __name__ == "__main__":
    for name in sys.argv[1:] or list(SDISTS):
        fetch(name)

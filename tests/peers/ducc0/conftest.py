"""ducc0 0.42.0's own wgridder tests with clgrid's functions in ducc0's place.

Run (``tox -e peers-ducc0`` fetches the file and runs a sample)::

    pytest tests/peers/ducc0 --cl-platform intel              # the whole file, 13,068 cases
    pytest tests/peers/ducc0 --cl-platform intel --sample 50  # every 50th case

What runs here, from the sdist ``ducc0-0.42.0.tar.gz`` (sha256
4e11c59b53a43355b053aebb2a62ee16eebeed026575f7d216cf09d437ce52ef), byte for
byte (checked against ``files.py``'s ``VENDORED`` when the session starts):
``python/test/test_wgridder.py`` (and ducc0's ``LICENSE`` beside it).  It is
GPL-2.0-or-later (clgrid is BSD-3-Clause), so it is not kept in this
repository: ``../fetch_upstream.py ducc0`` puts it in place from PyPI.  Kept
here: ``pyproject.toml``, which makes this folder the rootdir (ducc0's own
pyproject has no pytest table: pytest's defaults).

The file imports ``ducc0.wgridder as ng`` (and, in its faceting helpers,
``ducc0.wgridder as wgridder``) and calls ``ng.vis2dirty``, ``ng.dirty2vis``
and ``ng.experimental.vis2dirty_bda``.  The one change: :func:`_redirect`
replaces every function of the installed ``ducc0.wgridder`` and
``ducc0.wgridder.experimental`` by clgrid's (``clgrid.vis2dirty``,
``clgrid.dirty2vis``, ``clgrid.wgridder.ms2dirty`` / ``dirty2ms``,
``clgrid.wgridder.experimental.vis2dirty_bda`` / ``dirty2vis_bda``), so no
wgridder call reaches ducc0; a function ducc0 has and clgrid lacks is a
usage error, not a silent pass through ducc0.  What stays ducc0's: the
file's own helpers ``ducc0.misc.vdot`` and ``ducc0.misc.l2error`` (its
references' norms), and its float64 direct transforms.

No device argument: the call users make; the device is clgrid's own choice
under ``CLGRID_DEVICE``, set here from ``--cl-platform`` /
``CLGRID_TEST_PLATFORM`` (default ``intel``, the Intel CPU runtime).

``--sample N`` keeps every N-th case in collection order (the first, the
N+1-th, ...; ``--sample-offset K`` starts at the K-th) and deselects the
rest: the whole file takes hours on a small CPU (13,068 cases).  Nothing is
downloaded.  Every deviation is an explicit strict xfail in ``xfails.py``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
DUCC0_VERSION = "0.42.0"


def _load(name: str, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, HERE / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: not tests
collect_ignore = ["xfails.py", "files.py"]


def _check_vendored() -> None:
    problem = _load("../fetch_upstream.py", "_clgrid_fetch_upstream").fetched_problem(
        "ducc0", DUCC0_VERSION, "GPL")
    if problem:
        raise pytest.UsageError(problem)


def _functions(module) -> list[str]:
    """The public callables of a (pybind11/nanobind) module, submodules aside."""
    return sorted(name for name in dir(module) if not name.startswith("_")
                  and callable(getattr(module, name))
                  and not isinstance(getattr(module, name), type(module)))


def _redirect() -> dict[str, object]:
    """Every function of ducc0.wgridder and ducc0.wgridder.experimental becomes
    clgrid's of the same name (see the notes); returns what was put where."""
    import ducc0.wgridder

    import clgrid
    import clgrid.wgridder

    ours = {
        "vis2dirty": clgrid.vis2dirty, "dirty2vis": clgrid.dirty2vis,
        "ms2dirty": clgrid.wgridder.ms2dirty, "dirty2ms": clgrid.wgridder.dirty2ms,
        "experimental.vis2dirty": clgrid.wgridder.experimental.vis2dirty,
        "experimental.dirty2vis": clgrid.wgridder.experimental.dirty2vis,
        "experimental.vis2dirty_bda": clgrid.wgridder.experimental.vis2dirty_bda,
        "experimental.dirty2vis_bda": clgrid.wgridder.experimental.dirty2vis_bda,
    }
    theirs = ([name for name in _functions(ducc0.wgridder)]
              + [f"experimental.{name}" for name in _functions(ducc0.wgridder.experimental)])
    lacking = sorted(set(theirs) - set(ours))
    if lacking:
        raise pytest.UsageError(f"ducc0.wgridder has {lacking}, which clgrid lacks: they "
                                "would run ducc0 itself")
    for path, function in ours.items():
        module = ducc0.wgridder
        *parents, name = path.split(".")
        for parent in parents:
            module = getattr(module, parent)
        setattr(module, name, function)
    return ours


def pytest_addoption(parser):
    parser.addoption("--cl-platform", default=os.environ.get("CLGRID_TEST_PLATFORM", "intel"),
                     help="the OpenCL platform (or device) clgrid runs on: CLGRID_DEVICE")
    parser.addoption("--sample", type=int, default=1, metavar="N",
                     help="run every N-th case of the file (default 1: all 13,068)")
    parser.addoption("--sample-offset", type=int, default=0, metavar="K",
                     help="with --sample N: start at the K-th case (0 <= K < N)")


def pytest_configure(config):
    _check_vendored()
    sample, offset = config.getoption("--sample"), config.getoption("--sample-offset")
    if sample < 1 or not 0 <= offset < sample:
        raise pytest.UsageError(f"--sample must be >= 1 and 0 <= --sample-offset < --sample, "
                                f"got {sample} and {offset}")
    os.environ["CLGRID_DEVICE"] = config.getoption("--cl-platform")
    _redirect()


def pytest_report_header(config):
    import ducc0

    import clgrid
    from clgrid.device.profiles import DeviceProfile, select_device
    profile = DeviceProfile.from_device(select_device())
    version = getattr(ducc0, "__version__", "?")
    return [f"ducc0 {version}'s wgridder functions are clgrid's ({clgrid.__file__}) on "
            f"{profile.device_name} ({profile.platform_name} {profile.driver_version}); "
            f"ducc0.misc.vdot/l2error stay ducc0's"
            + ("" if version == DUCC0_VERSION else f"; the file is {DUCC0_VERSION}'s"),
            f"sample: every {config.getoption('--sample')}-th case from "
            f"{config.getoption('--sample-offset')}"]


def pytest_collection_modifyitems(config, items):
    xfails: dict[str, str] = _load("xfails.py", "clgrid_ducc0_peer_xfails").XFAILS
    sample, offset = config.getoption("--sample"), config.getoption("--sample-offset")
    kept, dropped = [], []
    for index, item in enumerate(items):
        (kept if index % sample == offset else dropped).append(item)
    for item in kept:
        test = item.nodeid.split("/")[-1]   # "test_wgridder.py::test_vis2dirty_wsclean[...]"
        if test in xfails:
            item.add_marker(pytest.mark.xfail(reason=xfails[test], strict=True))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept

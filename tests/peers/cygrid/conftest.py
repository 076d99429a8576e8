"""cygrid 2.0.4's own tests with clgrid's single-dish gridders in cygrid's place.

Run (``tox -e peers-cygrid`` runs both)::

    pytest tests/peers/cygrid --cl-platform intel                        # clgrid's default
    pytest tests/peers/cygrid --cl-platform intel --clgrid-compat cygrid # cygrid's selection

What runs here, from the sdist ``cygrid-2.0.4.tar.gz`` (sha256
ebc49f8ff3cd2c0363783e261825a3e6b948374703be56289f0937e11af4456a), byte for
byte (checked against ``files.py``'s ``VENDORED`` when the session starts):
its ``cygrid/tests/`` folder (``test_cygrid.py``, ``test_healpix.py``,
``__init__.py`` and the two reference files of ``data/`` they read).  They
are GPL-3.0 (clgrid is BSD-3-Clause), so they are not kept in this
repository: ``../fetch_upstream.py cygrid`` puts them in place from PyPI
(``tox -e peers-cygrid`` runs it first).  Kept here: ``pyproject.toml``: its ``[tool.pytest.ini_options]``, which makes this
folder the rootdir of the run (plugins as in cygrid's ``test`` extra:
pytest-astropy, pytest-doctestplus; healpy for four of the six
``test_healpix.py`` tests).

The tests import what they test relatively, as the package ``cygrid``
(``from .. import cygrid``, ``from ..healpix import Healpix``).  The one
change: that package is not cygrid.  :func:`_redirect` puts in
``sys.modules``

- ``cygrid.cygrid``: ``WcsGrid``, ``SlGrid`` and ``ShapeError`` are
  ``clgrid.WcsGrid``, ``clgrid.SlGrid`` and ``clgrid.singledish.ShapeError``
  themselves (with ``--clgrid-compat cygrid``: subclasses whose only change
  is the default ``compat="cygrid"``);
- ``cygrid.healpix``: ``clgrid.singledish.healpix`` itself (its ``Healpix``
  has cygrid's API).

No device argument: the call users make; the device is clgrid's own choice
under ``CLGRID_DEVICE``, set here from ``--cl-platform`` /
``CLGRID_TEST_PLATFORM`` (default ``intel``, the Intel CPU runtime).
Nothing is downloaded.  Every deviation is an explicit strict xfail in
``xfails.py``, per mode.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CYGRID_VERSION = "2.0.4"
MODES = ("exact", "cygrid")


def _load(name: str, module_name: str):
    """A module of this folder (or beside it) by path: this folder is its own
    pytest rootdir, not a package."""
    spec = importlib.util.spec_from_file_location(module_name, HERE / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: not tests (doctestplus would collect them)
collect_ignore = ["xfails.py", "files.py"]


def _check_vendored() -> None:
    problem = _load("../fetch_upstream.py", "_clgrid_fetch_upstream").fetched_problem(
        "cygrid", CYGRID_VERSION, "GPL-3.0")
    if problem:
        raise pytest.UsageError(problem)


def _redirect(compat: str) -> None:
    """clgrid's classes as the modules cygrid's tests import (see the notes)."""
    import clgrid
    from clgrid.singledish import ShapeError, healpix

    if compat == "exact":
        wcs_grid, sl_grid = clgrid.WcsGrid, clgrid.SlGrid
    else:
        class WcsGrid(clgrid.WcsGrid):
            __doc__ = clgrid.WcsGrid.__doc__

            def __init__(self, *args, compat=compat, **kwargs):
                super().__init__(*args, compat=compat, **kwargs)

        class SlGrid(clgrid.SlGrid):
            __doc__ = clgrid.SlGrid.__doc__

            def __init__(self, *args, compat=compat, **kwargs):
                super().__init__(*args, compat=compat, **kwargs)

        wcs_grid, sl_grid = WcsGrid, SlGrid

    package = types.ModuleType("cygrid", "clgrid's single-dish gridders under cygrid's names")
    package.__path__ = [str(HERE / "cygrid")]
    package.__file__ = str(HERE / "cygrid" / "__init__.py")   # astropy's get_pkg_data_filename
    module = types.ModuleType("cygrid.cygrid")
    module.WcsGrid, module.SlGrid, module.ShapeError = wcs_grid, sl_grid, ShapeError
    module.__all__ = ["WcsGrid", "SlGrid", "ShapeError"]
    package.cygrid, package.healpix = module, healpix
    package.WcsGrid, package.SlGrid, package.ShapeError = wcs_grid, sl_grid, ShapeError
    package.Healpix = getattr(healpix, "Healpix", None)
    sys.modules.update({"cygrid": package, "cygrid.cygrid": module, "cygrid.healpix": healpix})


def pytest_addoption(parser):
    parser.addoption("--cl-platform", default=os.environ.get("CLGRID_TEST_PLATFORM", "intel"),
                     help="the OpenCL platform (or device) clgrid runs on: CLGRID_DEVICE")
    parser.addoption("--clgrid-compat", choices=MODES,
                     default=os.environ.get("CLGRID_PEER_COMPAT", "exact"),
                     help="clgrid's sample selection: exact (its default) or cygrid "
                          "(compat='cygrid', cygrid's own)")


def pytest_configure(config):
    _check_vendored()
    os.environ["CLGRID_DEVICE"] = config.getoption("--cl-platform")
    _redirect(config.getoption("--clgrid-compat"))


def pytest_report_header(config):
    import clgrid
    from clgrid.device.profiles import DeviceProfile, select_device
    profile = DeviceProfile.from_device(select_device())
    return [f"cygrid's WcsGrid/SlGrid/Healpix are clgrid's ({clgrid.__file__}), "
            f"compat={config.getoption('--clgrid-compat')!r}, on {profile.device_name} "
            f"({profile.platform_name} {profile.driver_version})"]


def pytest_collection_modifyitems(config, items):
    xfails = _xfails()[config.getoption("--clgrid-compat")]
    for item in items:
        test = item.nodeid.split("/")[-1]   # "test_cygrid.py::TestWcsGrid::test_gridding2d"
        if test in xfails:
            item.add_marker(pytest.mark.xfail(reason=xfails[test], strict=True))


def _xfails() -> dict[str, dict[str, str]]:
    spec = importlib.util.spec_from_file_location("clgrid_cygrid_peer_xfails",
                                                  HERE / "xfails.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.XFAILS

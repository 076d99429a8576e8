"""reproject 0.21.0's own interpolation tests, and the items of its high-level
tests that call ``reproject_interp``, with ``clgrid.reproject_interp`` in place
of reproject's.

Run (``tox -e peers-reproject`` does this; the plugins below come with it)::

    pytest tests/peers/reproject --remote-data=any --cl-platform intel

What is here, from the sdist ``reproject-0.21.0.tar.gz`` (sha256
01ede715a1993c29431f52ff74189ef30f5e7b2e8b4dc88c1b002145a971dc1c), byte for
byte (checked against :data:`VENDORED` when the session starts):

- ``reproject/interpolation/tests/`` (``test_core.py``, ``__init__.py``) and
  its ``reference/`` folder, the four FITS files pytest-arraydiff compares
  with (336 kB);
- ``reproject/tests/test_high_level.py`` and the two headers its
  ``TestReproject`` reads next to it (``data/gc_ga.hdr``, ``data/gc_eq.hdr``):
  the high-level tests. Only their items that call ``reproject_interp`` are
  collected (:data:`NOT_INTERP`: the others exercise ``reproject_adaptive`` and
  ``reproject_exact``, which clgrid does not replace). The file's ``from ..
  import reproject_interp`` needs a parent package, so it is imported as
  ``clgrid_reproject_peer.tests.test_high_level``: ``clgrid_reproject_peer`` is
  a package made here whose folder is ``reproject/`` below and whose three
  functions are reproject's (``reproject_interp`` redirected), so its
  ``get_pkg_data_filename("data/...")`` reads the vendored headers, as
  reproject's own run reads them next to the installed file;
- ``reproject/tests/data/aia_171_level1.{fits,asdf}`` (290 kB): the solar
  image (FITS WCS, and gwcs in ASDF) of the round-trip tests, which reproject's
  ``aia_test_data`` fixture reads next to its conftest. Those tests need
  sunpy, asdf and gwcs (reproject's ``testall`` extras; the tox environment
  installs them) and skip without them; reproject's other test data are read
  from the installed reproject;
- ``reproject/upstream_conftest.py``: reproject's ``reproject/conftest.py``
  (the fixtures those tests take), loaded here as ``reproject.conftest`` so
  that its relative imports resolve in the installed reproject, as in
  reproject's own runs (``pytest --pyargs reproject``);
- ``pyproject.toml``: its ``[tool.pytest.ini_options]`` (``filterwarnings =
  error``, ``xfail_strict``, ``--strict-markers``, ``--arraydiff``, ...),
  which makes this folder the rootdir of the run. Its plugins must be
  installed: pytest-arraydiff, pytest-doctestplus, pytest-remotedata,
  pytest-astropy-header.

The other inputs those tests read, with ``get_pkg_data_filename(...,
package="reproject.tests")`` come from the installed reproject, which must be
0.21.0 (the tests import ``reproject._array_utils`` and
``reproject.tests.helpers`` too).

The one change: ``reproject_interp`` in ``reproject``,
``reproject.interpolation`` and ``reproject.interpolation._high_level`` is
``clgrid.reproject_interp`` itself (no wrapper: the call users make, no device
argument). The device is clgrid's own choice under ``CLGRID_DEVICE``, set here
from ``--cl-platform`` / ``CLGRID_TEST_PLATFORM`` (default ``intel``).

Nothing is downloaded at test time: astropy's ``allow_internet`` is off, and
the tests that read astropy's remote data are deselected (:data:`NETWORK`;
reproject's CI runs them with ``--remote-data``). Every other deviation is an
explicit xfail in ``xfails.py`` (strict, as reproject's ``xfail_strict``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPROJECT_VERSION = "0.21.0"

#: sha256 of each vendored file, as in the sdist.
VENDORED = {
    "reproject/upstream_conftest.py":
        "a6910c6504a5209fe20e3320632a36e9a742cb7ae5674f548ec96946051e360c",
    "reproject/interpolation/tests/__init__.py":
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "reproject/interpolation/tests/test_core.py":
        "e3608ea49df1bf009988f7ffb4ee552b374817577d1e0553875d8c519b6ec143",
    "reproject/interpolation/tests/reference/test_reproject_celestial_2d_gal2equ.fits":
        "0755af6e3c4e2ab40440d339b7c4c72a500eb07c908ee400953a540983c0f46d",
    "reproject/interpolation/tests/reference/test_reproject_celestial_3d_equ2gal.fits":
        "35c7e3d123713022e590e145e59a607a1e64dcb3f95c4d54ab9b60e6ff3fce75",
    "reproject/interpolation/tests/reference/test_small_cutout.fits":
        "ab611e2c698de8ecae90b623c847c09cb96142ce6ee7420157d49cdba6309e3c",
    "reproject/interpolation/tests/reference/test_reproject_roundtrip.fits":
        "06148b2f64ed22c913596e0ca29f044c6335f4a2b065fff07c6e88fea740546b",
    "reproject/tests/data/aia_171_level1.fits":
        "71d7f9f56908bd22d5dcac015884117c57c45f30951131bf4abdc06c55cb0280",
    "reproject/tests/data/aia_171_level1.asdf":
        "7d705a963538c8e454608f8a6824769bc3caa3b9a4ead997dda83b3954510341",
    "reproject/tests/test_high_level.py":
        "4eb3717951f64a2e50b57a9e02d863b30f3a69dc65c1a8384776cf38ea4eae8e",
    "reproject/tests/data/gc_ga.hdr":
        "a9cccf6d7bf2365e24583bf6f10b7f7e75f4a731d35b9bade7ba6b6651445b4c",
    "reproject/tests/data/gc_eq.hdr":
        "3360c2e88e4bf1e9c4ebd9272011783ea9c2c34e4d9a52a1f7bbb27cefcf9197",
}

#: Tests deselected because they read astropy's remote data
#: (data.astropy.org): test name -> reason.
NETWORK = {
    "test_blocked_against_single":
        "downloads astropy's galactic_center/gc_2mass_k.fits and gc_msx_e.fits "
        "(get_pkg_data_filename without package=): needs the network",
}


#: The high-level test file, and the reason its items that do not call
#: ``reproject_interp`` are deselected.
HIGH_LEVEL = "reproject/tests/test_high_level.py"
NOT_INTERP = ("exercises reproject_adaptive or reproject_exact, which clgrid does not replace "
              "(test_hdu_header[adaptive|exact] end with the reproject_interp call that "
              "test_hdu_header[interp] makes too)")
#: reproject_interp's ``order`` values among the file's ``projection_type`` modes
INTERP_MODES = ("nearest-neighbor", "bilinear", "biquadratic", "bicubic")
#: the package the high-level test file is imported in (see the docstring)
PEER_PACKAGE = "clgrid_reproject_peer"


def _calls_interp(item) -> bool:
    """Whether an item of the high-level file calls ``reproject_interp``: its
    ``reproject_function`` is reproject_interp, its ``projection_type`` one of
    reproject_interp's orders; items with neither (none now) are kept."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "reproject_function" in params:
        return getattr(params["reproject_function"], "__name__", "") == "reproject_interp"
    if "projection_type" in params:
        return params["projection_type"] in INTERP_MODES
    return True


def _peer_package():
    """``clgrid_reproject_peer``: the vendored ``reproject/`` folder as a package
    holding reproject's three functions (``reproject_interp`` is clgrid's)."""
    import types

    import reproject
    if PEER_PACKAGE not in sys.modules:
        package = types.ModuleType(PEER_PACKAGE)
        package.__path__ = [str(HERE / "reproject")]
        package.__file__ = str(HERE / "reproject" / "__init__.py")  # (none: a made package)
        package.__package__ = PEER_PACKAGE
        for name in ("reproject_interp", "reproject_adaptive", "reproject_exact"):
            setattr(package, name, getattr(reproject, name))
        sys.modules[PEER_PACKAGE] = package
    return sys.modules[PEER_PACKAGE]


class _PeerModule(pytest.Module):
    """The high-level test file, imported as a module of ``clgrid_reproject_peer``
    (through the import system, so that pytest's assertion rewriting applies)."""

    def _getobj(self):
        _peer_package()
        return importlib.import_module(f"{PEER_PACKAGE}.tests.{self.path.stem}")


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    """Not the doctest collector of the high-level file: it has no examples
    (reproject's run collects none there) and doctestplus imports it by path,
    where its ``from .. import`` has no parent package."""
    collectors = yield
    if file_path == HERE / HIGH_LEVEL:
        from _pytest.doctest import DoctestModule
        collectors = [c for c in collectors if not isinstance(c, DoctestModule)]
    return collectors


def pytest_pycollect_makemodule(module_path, parent):
    if module_path == HERE / HIGH_LEVEL:
        return _PeerModule.from_parent(parent, path=module_path)
    return None


def _check_vendored() -> None:
    changed = [name for name, digest in VENDORED.items()
               if hashlib.sha256((HERE / name).read_bytes()).hexdigest() != digest]
    if changed:
        raise pytest.UsageError(f"vendored reproject files differ from reproject "
                                f"{REPROJECT_VERSION}'s sdist: {changed}")


def _load_upstream_conftest():
    """reproject's conftest.py as the module ``reproject.conftest`` (its
    relative imports are reproject's; reproject.tests.helpers imports it by
    that name)."""
    import reproject
    if reproject.__version__ != REPROJECT_VERSION:
        raise pytest.UsageError(f"these are reproject {REPROJECT_VERSION}'s tests; reproject "
                                f"{reproject.__version__} is installed")
    spec = importlib.util.spec_from_file_location(
        "reproject.conftest", HERE / "reproject" / "upstream_conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["reproject.conftest"] = module
    spec.loader.exec_module(module)
    reproject.conftest = module
    return module


def _redirect() -> None:
    import reproject
    import reproject.interpolation
    import reproject.interpolation._high_level

    import clgrid
    for module in (reproject, reproject.interpolation, reproject.interpolation._high_level):
        module.reproject_interp = clgrid.reproject_interp


#: reproject's conftest is loaded above, not collected (doctestplus would try)
collect_ignore = ["reproject/upstream_conftest.py", "xfails.py"]

_check_vendored()
_upstream = _load_upstream_conftest()
# its fixtures (and helpers) as this conftest's
globals().update({name: value for name, value in vars(_upstream).items()
                  if not name.startswith("_") and name not in ("pytest_configure",
                                                               "collect_ignore")})
_redirect()


def pytest_addoption(parser):
    parser.addoption("--cl-platform", default=os.environ.get("CLGRID_TEST_PLATFORM", "intel"),
                     help="the OpenCL platform (or device) clgrid runs on: CLGRID_DEVICE")


def pytest_configure(config):
    _upstream.pytest_configure(config)
    os.environ["CLGRID_DEVICE"] = config.getoption("--cl-platform")
    from astropy.utils.data import conf
    conf.allow_internet = False


def pytest_report_header(config):
    import clgrid
    from clgrid.device.profiles import DeviceProfile, select_device
    profile = DeviceProfile.from_device(select_device())
    return [f"reproject_interp is clgrid.reproject_interp ({clgrid.__file__}) on "
            f"{profile.device_name} ({profile.platform_name} {profile.driver_version})"]


def _matches(item, test: str, params: str | None) -> bool:
    name = item.originalname if hasattr(item, "originalname") else item.name
    if name != test:
        return False
    if params is None:
        return True
    import re
    callspec = item.name[len(name):]
    return re.search(params, callspec) is not None


def pytest_collection_modifyitems(config, items):
    XFAILS = _xfails()
    kept, deselected = [], []
    not_interp = []
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in NETWORK:
            deselected.append(item)
            continue
        if item.path == HERE / HIGH_LEVEL and not _calls_interp(item):
            not_interp.append(item)
            continue
        kept.append(item)
        for test, params, reason in XFAILS:
            if _matches(item, test, params):
                item.add_marker(pytest.mark.xfail(reason=reason))
                break
    if deselected or not_interp:
        config.hook.pytest_deselected(items=deselected + not_interp)
        config._clgrid_network = deselected
        config._clgrid_not_interp = not_interp
        items[:] = kept


def pytest_terminal_summary(terminalreporter, config):
    deselected = getattr(config, "_clgrid_network", [])
    if deselected:
        names = sorted({getattr(item, "originalname", item.name) for item in deselected})
        for name in names:
            count = sum(getattr(i, "originalname", i.name) == name for i in deselected)
            terminalreporter.write_line(f"deselected {count} x {name}: {NETWORK[name]}")
    not_interp = getattr(config, "_clgrid_not_interp", [])
    if not_interp:
        terminalreporter.write_line(f"deselected {len(not_interp)} of {HIGH_LEVEL}: {NOT_INTERP}")


def _xfails():
    spec = importlib.util.spec_from_file_location("clgrid_reproject_peer_xfails",
                                                  HERE / "xfails.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.XFAILS


#: reproject's fixtures skip with a bare ``pytest.skip()`` the combinations
#: they cannot build (reproject reports them the same way).
FIXTURE_SKIP_REASON = ("reproject's own fixture skips this combination: a WCS that is not "
                       "an astropy WCS cannot be written as a FITS header, HDU or AVM tag")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Give the bare skips of reproject's fixtures their reason in -ra."""
    report = yield
    if (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3
            and report.longrepr[2].strip() in ("Skipped", "Skipped:")):
        path, line, _ = report.longrepr
        report.longrepr = (path, line, f"Skipped: {FIXTURE_SKIP_REASON}")
    return report

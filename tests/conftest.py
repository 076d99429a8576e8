"""Device fixture: every test that takes ``cl_env`` runs once per selected
OpenCL device.

Select platforms with ``--cl-platform pocl,intel`` or ``CLGRID_TEST_PLATFORM``
(default ``all``).  Simulators (Oclgrind) only run tests marked ``tiny``.
A platform named explicitly but not found, or found but with no device that
can build kernels here (PyPI's PoCL 3.0 on AMD Zen 5), is an error, not a
skip.  Devices that cannot build kernels are left out and listed in the
session header.  A session in which every kernel test of a platform was
skipped fails (``--allow-all-skipped`` to accept it), so that a platform
cannot pass CI untested.

tests/ mirrors the package (``tests/core/``, ``tests/reproject/`` ...; the
whole project's tests in ``tests/project/``); this conftest and the shared
helpers stay at the root, which pytest's default import mode puts on
``sys.path``: tests/README.md.
"""

from __future__ import annotations

import dataclasses
import os

import pyopencl as cl
import pytest

import clgrid  # noqa: F401  (registers the Intel CPU runtime first)
from clgrid.device.profiles import DeviceProfile, all_devices, unusable_hint

pytest_plugins = ("pytester",)


@dataclasses.dataclass
class ClEnv:
    """One device under test."""

    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue
    profile: DeviceProfile

    @property
    def key(self) -> str:
        return self.profile.platform_key

    @property
    def tiny(self) -> bool:
        """True on a simulator: tests must use tiny sizes."""
        return self.profile.is_simulator

    def require_vector_tiles(self) -> None:
        """Skip a test that forces the CPU vector tile where the driver cannot
        build it (PyPI's PoCL 3.0: DeviceProfile.vector_kernels)."""
        if not self.profile.vector_kernels:
            pytest.skip("this driver cannot build vector tiles (DeviceProfile.vector_kernels)")


def pytest_addoption(parser):
    parser.addoption("--cl-platform", default=os.environ.get("CLGRID_TEST_PLATFORM", "all"),
                     help="comma-separated platform keys (pocl, intel, oclgrind, nvidia) or all")
    parser.addoption("--sweep", choices=("all", "cover"),
                     default=os.environ.get("CLGRID_TEST_SWEEP", "all"),
                     help="tests marked sweep: every combination of their parameters (all) "
                          "or a covering subset in which every value of every parameter "
                          "runs at least once per device (cover)")
    parser.addoption("--allow-all-skipped", action="store_true",
                     help="do not fail the session when every kernel test of a platform "
                          "was skipped")


def pytest_configure(config):
    config.addinivalue_line("markers", "tiny: small enough for the Oclgrind simulator")
    config.addinivalue_line("markers", "integration: a whole-program test (examples, command "
                                       "line, Dask, README, the ducc0 port); see "
                                       "INTEGRATION_MODULES")
    config.addinivalue_line("markers", "sweep: a product of kernel parameters; --sweep cover "
                                       "runs every value of each at least once")
    # a developer's own tuning (clgrid tune imaging, clgrid tune table) must not change
    # what the tests run: an empty cache of the session's own
    if "CLGRID_TUNING_CACHE" not in os.environ:
        import tempfile
        folder = tempfile.mkdtemp(prefix="clgrid-test-tuning-")
        config._clgrid_tuning_folder = folder
        os.environ["CLGRID_TUNING_CACHE"] = os.path.join(folder, "cache.json")
    config.pluginmanager.register(KernelTestTally(config), "clgrid-kernel-test-tally")


def pytest_unconfigure(config):
    # the session's own tuning cache goes with the session (120 folders were
    # left in /tmp by a day of runs)
    folder = getattr(config, "_clgrid_tuning_folder", None)
    if folder is not None:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ["CLGRID_TUNING_CACHE"]


#: Modules that test whole programs over the gridding core -- the examples,
#: the command line, Dask clusters, README's snippet, the ducc0 port's API
#: cases -- rather than the kernels, whose own tests run on every platform.
#: Marked ``integration``: tox runs them in an environment of their own on the
#: Intel runtime (``-m integration``) beside the platforms' kernel tests
#: (``-m "not integration"``), whose four environments ``tox p`` runs at once.
#: Matched by file name, wherever the module sits (names are unique in tests/).
INTEGRATION_MODULES = frozenset({
    "test_examples.py", "test_dask.py", "test_cli_robust.py", "test_cli_first_run.py",
    "test_cli_chunks.py", "test_cli_image.py", "test_readme.py", "test_ducc0_compat.py"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in INTEGRATION_MODULES:
            item.add_marker(pytest.mark.integration)
    if config.getoption("--sweep") == "cover":
        kept, dropped = covering_subset(items)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
            config._clgrid_sweep_dropped = len(dropped)


def covering_subset(items: list) -> tuple[list, list]:
    """``items`` without the ``sweep``-marked cases that add no parameter
    value: per test function and device, cases are kept until every value of
    every parameter (other than the device) has run once -- first those whose
    values are all new (a diagonal through the product), then the first case
    of each value still missing.  So every kernel variant a sweep names still
    runs on every platform, in about as many cases as its longest parameter
    list rather than their product (PyPI's PoCL 3.0 compiles each new kernel
    in about a second: the pocl environment runs ``--sweep cover``)."""
    groups: dict[tuple, list[tuple[int, set]]] = {}
    keep = set()
    for index, item in enumerate(items):
        callspec = getattr(item, "callspec", None)
        if item.get_closest_marker("sweep") is None or callspec is None:
            keep.add(index)
            continue
        values = {(name, repr(value)) for name, value in callspec.params.items()
                  if name != "cl_env"}
        if not values:
            keep.add(index)
            continue
        key = (item.path, item.originalname, callspec.params.get("cl_env"))
        groups.setdefault(key, []).append((index, values))
    for cases in groups.values():
        covered: set = set()
        for all_new in (True, False):
            for index, values in cases:
                new = values - covered
                if new and (not all_new or new == values):
                    keep.add(index)
                    covered |= values
    kept = [item for index, item in enumerate(items) if index in keep]
    dropped = [item for index, item in enumerate(items) if index not in keep]
    return kept, dropped


def _wanted(config) -> set[str]:
    return {part.strip().lower() for part in config.getoption("--cl-platform").split(",")
            if part.strip()}


def _device_line(profile: DeviceProfile) -> str:
    return (f"{_ident(profile)}: {profile.device_name} ({profile.platform_name} "
            f"{profile.driver_version})")


def _ident(profile: DeviceProfile) -> str:
    return f"{profile.platform_key}{profile.platform_index}.{profile.device_index}"


def _matching_devices(config) -> list[tuple[cl.Device, DeviceProfile]]:
    """Every device of the selected platforms, usable or not."""
    wanted = _wanted(config)
    found = [(d, DeviceProfile.from_device(d)) for d in all_devices()]
    chosen = [(d, p) for d, p in found if "all" in wanted or p.platform_key in wanted]
    missing = wanted - {"all"} - {p.platform_key for _, p in chosen}
    if missing or not chosen:
        raise pytest.UsageError(
            f"OpenCL platform(s) {sorted(missing) or sorted(wanted)} requested but not found; "
            f"present: {sorted({p.platform_key for _, p in found})}")
    return chosen


def selected_devices(config) -> list[tuple[cl.Device, DeviceProfile]]:
    """The devices kernel tests run on: those of the selected platforms that
    build kernels.  Raises ``UsageError`` for a platform named explicitly
    none of whose devices can, and when nothing usable is left."""
    chosen = _matching_devices(config)
    wanted = _wanted(config)
    keys = wanted - {"all"} or {p.platform_key for _, p in chosen}
    for key in sorted(keys):
        of_key = [p for _, p in chosen if p.platform_key == key]
        if "all" in wanted and key not in wanted:
            continue  # with "all", a platform that cannot build is only reported
        if not any(p.usable for p in of_key):
            problems = "; ".join(f"{_device_line(p)}: {p.build_problem}" for p in of_key)
            raise pytest.UsageError(
                f"no {key} device can build kernels on this machine ({problems}); "
                f"{unusable_hint(of_key[0])}")
    usable = [(d, p) for d, p in chosen if p.usable]
    if not usable:
        raise pytest.UsageError(
            "no selected OpenCL device can build kernels on this machine: "
            + "; ".join(f"{_device_line(p)}: {p.build_problem}" for _, p in chosen))
    return usable


def pytest_sessionstart(session):
    # Check the selection once, before collection, for one clear error
    # rather than one per test module.
    selected_devices(session.config)


def pytest_report_header(config):
    try:
        chosen = _matching_devices(config)
    except pytest.UsageError:
        return None  # reported when the tests are collected
    lines = ["OpenCL devices under test (--cl-platform "
             f"{config.getoption('--cl-platform')}):"]
    for _, profile in chosen:
        status = ("tested" if profile.usable
                  else f"NOT tested, cannot build kernels: {profile.build_problem}")
        lines.append(f"  {_device_line(profile)}: {status}")
    return lines


_envs: dict[int, ClEnv] = {}


#: Why reproject's own tests (tests/reproject/test_reproject_port.py, kept unmodified as
#: reproject wrote them) skip: their fixtures call a bare ``pytest.skip()`` for
#: the combinations below, which ``-ra`` would print as only "Skipped".
REPROJECT_PORT_SKIP_REASON = ("reproject's own test skips this combination: a WCS that is "
                              "not an astropy WCS cannot be written as a FITS header or HDU")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Give the bare skips of test_reproject_port.py their reason."""
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and item.path.name == "test_reproject_port.py"
            and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3
            and report.longrepr[2].strip() in ("Skipped", "Skipped:")):
        path, line, _ = report.longrepr
        report.longrepr = (path, line, f"Skipped: {REPROJECT_PORT_SKIP_REASON}")


def pytest_generate_tests(metafunc):
    if "cl_env" not in metafunc.fixturenames:
        return
    tiny = metafunc.definition.get_closest_marker("tiny") is not None
    params = []
    for device, profile in selected_devices(metafunc.config):
        if profile.is_simulator and not tiny:
            continue
        params.append(pytest.param(device.int_ptr, id=_ident(profile)))
    if not params:
        params = [pytest.param(None, id="no-device", marks=pytest.mark.skip(
            reason="only simulators selected and this test is not marked tiny"))]
    metafunc.parametrize("cl_env", params, indirect=True)


@pytest.fixture
def cl_env(request) -> ClEnv:
    pointer = request.param
    if pointer not in _envs:
        device = next(d for d in all_devices() if d.int_ptr == pointer)
        context = cl.Context([device])
        _envs[pointer] = ClEnv(device, context, cl.CommandQueue(context),
                               DeviceProfile.from_device(device))
    return _envs[pointer]


class KernelTestTally:
    """The all-skipped guard: kernel tests (those taking ``cl_env``) counted
    per platform, ran versus skipped; a platform whose kernel tests were all
    skipped fails the session."""

    def __init__(self, config):
        self.config = config
        self.platform_of: dict[str, str] = {}
        self.ran: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.all_skipped: list[str] = []

    def pytest_collection_finish(self, session):
        key_of_pointer = {d.int_ptr: DeviceProfile.from_device(d).platform_key
                          for d in all_devices()}
        for item in session.items:
            callspec = getattr(item, "callspec", None)
            pointer = callspec.params.get("cl_env") if callspec is not None else None
            if pointer in key_of_pointer:  # None is the "no-device" placeholder
                self.platform_of[item.nodeid] = key_of_pointer[pointer]
        for key in self.platform_of.values():
            self.ran.setdefault(key, 0)
            self.skipped.setdefault(key, 0)

    def pytest_runtest_logreport(self, report):
        key = self.platform_of.get(report.nodeid)
        if key is None:
            return
        if report.skipped:
            self.skipped[key] += 1
        elif report.when == "call":
            self.ran[key] += 1

    def pytest_sessionfinish(self, session, exitstatus):
        if (self.config.option.collectonly or self.config.getoption("--allow-all-skipped")
                or exitstatus != pytest.ExitCode.OK):
            return
        self.all_skipped = sorted(key for key, ran in self.ran.items()
                                  if ran == 0 and self.skipped[key] > 0)
        if self.all_skipped:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.ran or self.config.option.collectonly:
            return
        tally = ", ".join(f"{key} {self.ran[key]} ran, {self.skipped[key]} skipped"
                          for key in sorted(self.ran))
        terminalreporter.write_line(f"kernel tests per platform: {tally}")
        dropped = getattr(self.config, "_clgrid_sweep_dropped", 0)
        if dropped:
            terminalreporter.write_line(
                f"--sweep cover: {dropped} parameter combinations of sweep-marked tests "
                "deselected; every value of each parameter ran")
        for key in self.all_skipped:
            terminalreporter.write_line(
                f"FAILED: every kernel test on {key} was skipped ({self.skipped[key]}), "
                "so that platform is untested; see the skip reasons above "
                "(--allow-all-skipped accepts this)", red=True, bold=True)


@pytest.fixture
def without_fp64(monkeypatch):
    """Every DeviceProfile says 'no fp64' (a device like Apple's or Intel
    Arc's); the kernels built meanwhile are collected: none may use double."""
    from clgrid.device import kernels
    real = DeviceProfile.from_device
    monkeypatch.setattr(DeviceProfile, "from_device", classmethod(
        lambda cls, device: dataclasses.replace(real(device), fp64=False)))
    sources = []
    build = kernels.build_program
    monkeypatch.setattr(kernels, "build_program", lambda context, device, source, options=(): (
        sources.append(source), build(context, device, source, options))[1])
    return sources


def double_free(sources: list[str]) -> bool:
    """Whether none of the kernel sources uses double (comments aside)."""
    import re
    code = [re.sub(r"//[^\n]*|/\*.*?\*/", "", source, flags=re.S) for source in sources]
    return bool(code) and not any(re.search(r"\bdouble\d*\b|cl_khr_fp64", c) for c in code)

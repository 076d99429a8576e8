"""Device fixture: every test that takes ``cl_env`` runs once per selected
OpenCL device.

Select platforms with ``--cl-platform pocl,intel`` or ``CLGRID_TEST_PLATFORM``
(default ``all``).  Simulators (Oclgrind) only run tests marked ``tiny``.
A platform named explicitly but not found is an error, not a skip.
"""

from __future__ import annotations

import dataclasses
import os

import pyopencl as cl
import pytest

import clgrid  # noqa: F401  (registers the Intel CPU runtime first)
from clgrid.device import DeviceProfile, all_devices


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


def pytest_addoption(parser):
    parser.addoption("--cl-platform", default=os.environ.get("CLGRID_TEST_PLATFORM", "all"),
                     help="comma-separated platform keys (pocl, intel, oclgrind, nvidia) or all")


def pytest_configure(config):
    config.addinivalue_line("markers", "tiny: small enough for the Oclgrind simulator")


def _wanted(config) -> set[str]:
    return {part.strip().lower() for part in config.getoption("--cl-platform").split(",")
            if part.strip()}


def selected_devices(config) -> list[tuple[cl.Device, DeviceProfile]]:
    wanted = _wanted(config)
    found = [(d, DeviceProfile.from_device(d)) for d in all_devices()]
    chosen = [(d, p) for d, p in found if "all" in wanted or p.platform_key in wanted]
    missing = wanted - {"all"} - {p.platform_key for _, p in chosen}
    if missing or not chosen:
        raise pytest.UsageError(
            f"OpenCL platform(s) {sorted(missing) or sorted(wanted)} requested but not found; "
            f"present: {sorted({p.platform_key for _, p in found})}")
    return chosen


_envs: dict[int, ClEnv] = {}


def pytest_generate_tests(metafunc):
    if "cl_env" not in metafunc.fixturenames:
        return
    tiny = metafunc.definition.get_closest_marker("tiny") is not None
    params = []
    for device, profile in selected_devices(metafunc.config):
        ident = f"{profile.platform_key}{profile.platform_index}.{profile.device_index}"
        marks = []
        if profile.is_simulator and not tiny:
            continue
        if not profile.usable:
            marks.append(pytest.mark.skip(
                reason=f"{profile.platform_key} cannot build kernels on this CPU: "
                       f"{profile.build_problem}"))
        params.append(pytest.param(device.int_ptr, id=ident, marks=marks))
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

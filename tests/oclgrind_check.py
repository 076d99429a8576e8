"""Run a script under the Oclgrind simulator and assert it is clean.

Oclgrind prints its diagnostics on the process's stderr, so a kernel check
runs a script in a subprocess with the race detector on.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clgrid.device.profiles import DeviceProfile, all_devices

PROBLEMS = ("data race", "invalid read", "invalid write", "uninitialized")


def require_oclgrind(config) -> None:
    """Skip unless Oclgrind is selected; fail if it is selected but missing."""
    wanted = config.getoption("--cl-platform").lower()
    if "all" not in wanted and "oclgrind" not in wanted:
        pytest.skip("Oclgrind not selected")
    if not any(DeviceProfile.from_device(d).is_simulator for d in all_devices()):
        pytest.fail("Oclgrind selected but not installed (pip install 'clgrid[oclgrind]')")


def run_script(script: str, *args: str, extra_env: dict | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``script`` with Oclgrind's race and API checks on."""
    environment = dict(os.environ, OCLGRIND_DATA_RACES="1", OCLGRIND_CHECK_API="1",
                       **(extra_env or {}))
    return subprocess.run([sys.executable, "-c", script, *args], env=environment,
                          capture_output=True, text=True, timeout=timeout)


def run_clean(config, script: str, *args: str, problems=PROBLEMS,
              extra_env: dict | None = None, timeout: float = 600,
              ) -> subprocess.CompletedProcess:
    """Require Oclgrind, run ``script``, assert success and none of ``problems``."""
    require_oclgrind(config)
    result = run_script(script, *args, extra_env=extra_env, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    diagnostics = result.stderr.lower()
    for problem in problems:
        assert problem not in diagnostics, result.stderr[-3000:]
    return result

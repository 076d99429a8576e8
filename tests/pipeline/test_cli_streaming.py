"""glibc's streaming stores for host copies (clgrid.device.hostio.streaming_copies_env):
when they apply, and ``clgrid image`` re-executing itself with them."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from clgrid.device.hostio import STREAMING_TUNABLE, streaming_copies_env

glibc_x86 = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
         and platform.libc_ver()[0] == "glibc"),
    reason="glibc's x86 streaming-store tunable exists only on Linux x86-64 with glibc")


@glibc_x86
def test_the_tunable_is_added_to_what_is_set():
    assert streaming_copies_env({})["GLIBC_TUNABLES"] == STREAMING_TUNABLE
    env = streaming_copies_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "HOME": "/h"})
    assert env == {"GLIBC_TUNABLES": f"glibc.malloc.arena_max=2:{STREAMING_TUNABLE}",
                   "HOME": "/h"}


@glibc_x86
def test_nothing_changes_where_the_threshold_is_chosen_or_turned_off():
    chosen = {"GLIBC_TUNABLES": "glibc.cpu.x86_non_temporal_threshold=0x4000000"}
    assert streaming_copies_env(chosen) is None
    assert streaming_copies_env({"CLGRID_STREAMING_COPIES": "0"}) is None


# Runs clgrid's main as the console script does (argv from sys.argv) with the
# image command's work replaced by printing the tunables it runs under.
_IMAGE_RUN = """
import os, sys
import clgrid.pipeline.image_command as image_command
image_command.run = lambda args: print("tunables=" + os.environ.get("GLIBC_TUNABLES", ""),
                                       "pid=%d" % os.getpid()) or 0
from clgrid.cli import main
sys.argv = ["clgrid", "image", "in.ms", "out.fits"]
print("started pid=%d" % os.getpid(), flush=True)
sys.exit(main())
"""


def _image_run(env: dict) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _IMAGE_RUN], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@glibc_x86
def test_clgrid_image_restarts_once_with_streaming_stores():
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLIBC_TUNABLES", "CLGRID_STREAMING_COPIES")}
    words = _image_run(env)
    # the script started twice (the second time from the exec, same pid) and
    # the command ran once, under the tunable
    assert words.count("started") == 2
    assert words.count(f"tunables={STREAMING_TUNABLE}") == 1
    assert len({w for w in words if w.startswith("pid=")}) == 1


def test_clgrid_image_runs_as_is_when_turned_off():
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["CLGRID_STREAMING_COPIES"] = "0"
    words = _image_run(env)
    assert words.count("started") == 1
    assert "tunables=" in words

"""README.md's "Using clgrid" snippet runs as pasted, on the device under test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import clgrid

README = Path(__file__).resolve().parents[2] / "README.md"


def using_clgrid_snippet() -> str:
    """The first python block under the heading '## Using clgrid'."""
    text = README.read_text()
    section = text[text.index("\n## Using clgrid\n"):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README.md has no python block under '## Using clgrid'"
    return match.group(1)


def test_using_clgrid_snippet_runs_as_pasted(cl_env, tmp_path):
    profile = cl_env.profile
    script = tmp_path / "snippet.py"
    script.write_text(using_clgrid_snippet())
    # the clgrid this test imported (the checkout, or the installed wheel under tox)
    package_parent = str(Path(clgrid.__file__).resolve().parents[1])
    env = dict(os.environ, CLGRID_DEVICE=f"{profile.platform_index}:{profile.device_index}",
               PYTHONPATH=os.pathsep.join([package_parent] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("PYOPENCL_CTX", None)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(profile.device_name in line for line in lines[:-1]), done.stdout
    assert float(lines[-1]) < 1e-4, done.stdout   # device sums = host sums, float32 rounding

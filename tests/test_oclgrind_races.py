"""Race and out-of-bounds checks under the Oclgrind simulator.

Oclgrind prints its diagnostics on the process's stderr, so each case runs
in a subprocess with ``OCLGRIND_DATA_RACES=1``.  A deliberately racy kernel
proves that the detector is on.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from clgrid.device import DeviceProfile, all_devices

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, pyopencl as cl, pyopencl.array as cla
    import clgrid
    queue = cl.CommandQueue(clgrid.create_context("oclgrind"))
    if sys.argv[1] == "racy":
        program = cl.Program(queue.context, '''
            __kernel void racy(__global float *out, __global const float *v)
            { out[0] += v[get_global_id(0)]; }''').build()
        out = cla.zeros(queue, 1, np.float32)
        values = cla.to_device(queue, np.ones(16, np.float32))
        program.racy(queue, (16,), (4,), out.data, values.data).wait()
    else:
        dtype = np.dtype(sys.argv[1])
        index = (np.arange(48) % 3).astype(np.uint32)
        values = np.ones(48, dtype)
        result = clgrid.ScatterAdd(queue, dtype, atomics="cas")(index, values, n_out=3).get()
        assert np.all(result == 16), result
    print("done")
""")


def _run(case: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, OCLGRIND_DATA_RACES="1", OCLGRIND_CHECK_API="1")
    return subprocess.run([sys.executable, "-c", SCRIPT, case], env=environment,
                          capture_output=True, text=True, timeout=300)


def _require_oclgrind(config):
    wanted = config.getoption("--cl-platform").lower()
    if "all" not in wanted and "oclgrind" not in wanted:
        pytest.skip("Oclgrind not selected")
    if not any(DeviceProfile.from_device(d).is_simulator for d in all_devices()):
        pytest.fail("Oclgrind selected but not installed (pip install 'clgrid[oclgrind]')")


@pytest.mark.tiny
def test_detector_sees_a_planted_race(request):
    _require_oclgrind(request.config)
    result = _run("racy")
    assert "data race" in result.stderr.lower()


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_cas_atomics_have_no_race(request, dtype):
    _require_oclgrind(request.config)
    result = _run(dtype)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "done" in result.stdout
    diagnostics = result.stderr.lower()
    for problem in ("data race", "invalid read", "invalid write", "uninitialized"):
        assert problem not in diagnostics, result.stderr[-2000:]

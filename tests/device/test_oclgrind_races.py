"""Race and out-of-bounds checks under the Oclgrind simulator.

Oclgrind prints its diagnostics on the process's stderr, so each case runs
in a subprocess with ``OCLGRIND_DATA_RACES=1``.  A deliberately racy kernel
proves that the detector is on.
"""

import textwrap

import pytest

from oclgrind_check import require_oclgrind, run_clean, run_script


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


@pytest.mark.tiny
def test_detector_sees_a_planted_race(request):
    require_oclgrind(request.config)
    result = run_script(SCRIPT, "racy", timeout=300)
    assert "data race" in result.stderr.lower()


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_cas_atomics_have_no_race(request, dtype):
    result = run_clean(request.config, SCRIPT, dtype, timeout=300)
    assert "done" in result.stdout

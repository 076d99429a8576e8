"""Reprojection kernels under Oclgrind: no data race, no invalid access, no
uninitialised read (every sampling mode, complex cube, prefilter)."""

import textwrap

import pytest

from oclgrind_check import PROBLEMS, run_clean

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, pyopencl as cl
    import clgrid
    from clgrid import CelestialPlane, reproject_interp
    context = clgrid.create_context("oclgrind")
    queue = cl.CommandQueue(context)
    plane_in = CelestialPlane("SIN", (150.0, -35.0), (6.3, 5.2), ((-0.05, 0.0), (0.0, 0.05)))
    plane_out = CelestialPlane(sys.argv[2], (150.05, -35.02), (5.1, 6.7),
                               ((-0.055, -0.02), (-0.02, 0.06)))
    rng = np.random.default_rng(0)
    cube = (rng.random((2, 11, 13)) + 1j * rng.random((2, 11, 13))).astype(np.complex64)
    cube[:, 5, 6] = np.nan  # a blank: fill, refill and mask paths
    data = cube if sys.argv[3] == "cube" else cube[0]
    shape_out = data.shape[:-2] + (12, 10)
    order = sys.argv[4] if len(sys.argv) > 4 else "bicubic"
    block = int(sys.argv[5]) if len(sys.argv) > 5 else None
    out, footprint = reproject_interp((data, plane_in), plane_out, shape_out, order=order,
                                      sampling=sys.argv[1], block_size=block, context=queue)
    assert 0.2 < footprint.mean() < 1.0, footprint.mean()
    assert np.all(np.isfinite(out[footprint > 0]))
    print("done")
""")


@pytest.mark.tiny
@pytest.mark.parametrize("sampling, projection, planes, extra", [
    ("buffer", "SIN", "plane", ()), ("buffer", "TAN", "cube", ()), ("image", "SIN", "cube", ()),
    ("image-linear", "SIN", "plane", ()), ("buffer", "ZEA", "plane", ("biquadratic", "5")),
    ("buffer", "STG", "plane", ("bilinear", "4"))])
def test_reproject_kernels_are_clean(request, sampling, projection, planes, extra):
    # Oclgrind flags every value read from an image filled by a buffer-to-image
    # copy as uninitialised (a shadow-memory limit of the simulator: the same
    # kernels on buffers are clean), so image modes check races and bounds only.
    check_uninitialised = sampling == "buffer"
    problems = PROBLEMS if check_uninitialised else PROBLEMS[:-1]
    result = run_clean(request.config, SCRIPT, sampling, projection, planes, *extra,
                       problems=problems, timeout=300,
                       extra_env={"OCLGRIND_UNINITIALIZED": "1" if check_uninitialised else "0"})
    assert "done" in result.stdout

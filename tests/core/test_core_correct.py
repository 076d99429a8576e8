"""The correction stage's plane <-> image kernels (``templates/core_correct.cl.mako``)
without w: each pixel's cell against a float64 numpy placement (the FFT's
frequency index, negative offsets wrapped to the top), with the default
work-group and with the GPUs' two-row group (Corrector.GPU_GROUP) on image
and grid sizes that are no multiple of it."""

import numpy as np
import pyopencl.array as cla
import pytest

from clgrid.core.correct import Corrector
from clgrid.imaging import Imager

NPIX_X, NPIX_Y = 90, 70
GROUPS = [None, Corrector.GPU_GROUP, (32, 8)]


def _corrector(cl_env):
    if not cl_env.profile.fp64:
        pytest.skip("device has no fp64 (the imaging core's default geometry)")
    rng = np.random.default_rng(3)
    uvw = np.column_stack([rng.uniform(-300, 300, (50, 2)), np.zeros(50)])
    imager = Imager(cl_env.queue, uvw=uvw, freq=np.array([1.4e9]), npix_x=NPIX_X,
                    npix_y=NPIX_Y, pixsize_x=4e-4, pixsize_y=5e-4, epsilon=1e-5,
                    do_wgridding=False)
    return imager.engine.primary.corrector


def _cells(corrector):
    """Each pixel's (row, column) on the grid."""
    layout = corrector.layout
    rows = (np.arange(NPIX_X) - NPIX_X // 2) % layout.nu
    cols = (np.arange(NPIX_Y) - NPIX_Y // 2) % layout.nv
    return np.ix_(rows, cols)


@pytest.mark.parametrize("group", GROUPS, ids=["default", "gpu-group", "32x8"])
def test_dirty_to_planes_places_each_corrected_pixel(cl_env, group):
    corrector = _corrector(cl_env)
    corrector.group = group
    layout, queue = corrector.layout, corrector.queue
    dirty = np.random.default_rng(1).standard_normal((NPIX_X, NPIX_Y)).astype(np.float32)
    planes_d = cla.empty(queue, (1, layout.nu, layout.nv), np.complex64)
    planes_d.fill(np.complex64(np.nan))   # every cell must be written
    corrector.dirty_to_planes(cla.to_device(queue, dirty), 0, 1, planes_d)
    corr = corrector.corr_d.get().astype(np.float64)
    expected = np.zeros((layout.nu, layout.nv), np.complex128)
    expected[_cells(corrector)] = dirty * corr
    np.testing.assert_allclose(planes_d.get()[0], expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("group", GROUPS, ids=["default", "gpu-group", "32x8"])
def test_planes_to_dirty_reads_each_pixels_cell(cl_env, group):
    corrector = _corrector(cl_env)
    corrector.group = group
    layout, queue = corrector.layout, corrector.queue
    rng = np.random.default_rng(2)
    planes = (rng.standard_normal((1, layout.nu, layout.nv))
              + 1j * rng.standard_normal((1, layout.nu, layout.nv))).astype(np.complex64)
    dirty_d = cla.to_device(queue, np.full((NPIX_X, NPIX_Y), np.nan, np.float32))
    corrector.planes_to_dirty(cla.to_device(queue, planes), 0, 1, dirty_d, 0.5,
                              accumulate=False)
    corr = corrector.corr_d.get().astype(np.float64)
    expected = planes[0].real.astype(np.float64)[_cells(corrector)] * corr * 0.5
    np.testing.assert_allclose(dirty_d.get(), expected, rtol=1e-6, atol=0)

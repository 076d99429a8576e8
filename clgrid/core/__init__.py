"""clgrid's gridding core, one stage per module (cuFINUFFT's layout):

========================  ==============================================  ================================
stage                     module                                          kernels (``templates/``)
========================  ==============================================  ================================
plan                      :mod:`clgrid.core.plan`                         (host: kernel, grid, planes, tiles)
set points (bin, sort)    :mod:`clgrid.core.setpoints`                    ``core_setpoints.cl.mako``
spread / interpolate      :mod:`clgrid.core.spread`                       ``core_spread``, ``core_interp``
table gridding (Gridder)  :mod:`clgrid.core.table`                        the same, table sources
FFT                       :mod:`clgrid.core.fft`                          (pyvkfft, reikna, host)
correct                   :mod:`clgrid.core.correct`                      ``core_correct.cl.mako``
transfers                 :mod:`clgrid.core.transfer`                     (pinned, row blocks)
all of them               :class:`clgrid.core.engine.GriddingEngine`
========================  ==============================================  ================================

The shared helpers are ``templates/es_kernel.cl.mako`` (the ES kernel) and
``templates/footprint.cl.mako`` (where a footprint starts).  The core depends on
the device layer (:mod:`clgrid.device.profiles`, :mod:`clgrid.device.kernels`) only; the
missions (imaging, several devices, Dask) sit on top of it.
"""

from .engine import GriddingEngine
from .plan import GridLayout, ImageGeometry, TileShape

__all__ = ["GridLayout", "GriddingEngine", "ImageGeometry", "TileShape"]

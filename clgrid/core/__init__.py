"""clgrid's gridding core, one stage per module (cuFINUFFT's layout):

========================  ==============================================  ================================
stage                     module                                          kernels (``templates/``)
========================  ==============================================  ================================
plan                      :mod:`clgrid.core.plan`                         (host: kernel, grid, planes, tiles)
set points (bin, sort)    :mod:`clgrid.core.setpoints`                    ``core_setpoints.cl.mako``
spread / interpolate      :mod:`clgrid.core.spread`                       ``core_spread``, ``core_interp``
table sources (Gridder)   :mod:`clgrid.core.table`                        the same, configured by the tables
register accumulation     :mod:`clgrid.core.register`                     ``core_records``, ``core_*_register``
FFT                       :mod:`clgrid.core.fft`                          (pyvkfft, reikna, host)
correct                   :mod:`clgrid.core.correct`                      ``core_correct.cl.mako``
image (FFT + correct)     :mod:`clgrid.core.image`                        (the two above, per pass)
transfers                 :mod:`clgrid.core.transfer`                     (pinned, row blocks)
all of them               :class:`clgrid.core.engine.Engine`              (stages as strategies)
host times of the steps   :mod:`clgrid.core.trace`                        (``Engine.trace``)
which stages, per path    :mod:`clgrid.core.strategies`                   (``imaging_engine``, ``table_engine``)
========================  ==============================================  ================================

The shared helpers are ``templates/es_kernel.cl.mako`` (the ES kernel) and
``templates/footprint.cl.mako`` (where a footprint starts).  The core depends on
the device layer (:mod:`clgrid.device.profiles`, :mod:`clgrid.device.kernels`) only; the
missions (imaging, several devices, Dask) sit on top of it.
"""

from .engine import Engine, Stages
from .plan import GridLayout, ImageGeometry, TileShape

__all__ = ["Engine", "GridLayout", "ImageGeometry", "Stages", "TileShape"]

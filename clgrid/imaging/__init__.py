"""Interferometric imaging on the gridding core (:mod:`clgrid.core`).

``imager``: :class:`Imager` and the ducc0-style :func:`vis2dirty` /
:func:`dirty2vis` on one device (exact DFT references beside them).
``weighting``: natural, uniform and Briggs weights on the device.
``reference``: exact direct Fourier transforms (float64 numpy) for the tests.

Several devices and Dask sit above this package in :mod:`clgrid.scaleout`;
``clgrid.vis2dirty(..., devices=...)`` and ``clgrid.Imager(contexts=...)``
are routed there by :mod:`clgrid.scaleout.entry`.
"""

from .imager import Imager, dirty2vis, vis2dirty
from .reference import dft_dirty2vis, dft_vis2dirty
from .weighting import ImageWeighting

__all__ = ["ImageWeighting", "Imager", "dft_dirty2vis", "dft_vis2dirty", "dirty2vis",
           "vis2dirty"]

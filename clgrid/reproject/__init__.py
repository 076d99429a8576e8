"""Image reprojection between celestial WCS (``reproject.reproject_interp`` on OpenCL).

``wcs_params``: a celestial WCS as kernel parameters (projections the device
evaluates) and their numpy reference.  ``plan``: what a call means (inputs,
outputs, frames, the per-job plan).  ``prefilter``: the B-spline prefilter.  ``interp``: the
compiled :class:`Reprojector`.  ``driver``: :func:`reproject_interp` (caches, bands, staging).
"""

from .driver import release_caches, reproject_interp
from .interp import Reprojector
from .prefilter import BSplinePrefilter
from .wcs_params import CelestialPlane

__all__ = ["BSplinePrefilter", "CelestialPlane", "Reprojector", "release_caches",
           "reproject_interp"]

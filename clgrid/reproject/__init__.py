"""Image reprojection between celestial WCS (``reproject.reproject_interp`` on OpenCL).

``wcs_params``: a celestial WCS as kernel parameters (projections the device
evaluates) and their numpy reference.  ``plan``: what a call means (inputs,
outputs, frames, the per-job plan).  ``interp``: the B-spline prefilter, the
compiled :class:`Reprojector` and :func:`reproject_interp`.
"""

from .interp import BSplinePrefilter, Reprojector, release_caches, reproject_interp
from .wcs_params import CelestialPlane

__all__ = ["BSplinePrefilter", "CelestialPlane", "Reprojector", "release_caches",
           "reproject_interp"]

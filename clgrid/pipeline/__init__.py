"""The application layer: a Measurement Set to a FITS image (``clgrid image``).

``run``: :func:`image_measurement_set` (read, weight, grid, normalise, PSF,
beam fit).  ``calibrate``: the point-source self-calibration it can apply.
``image_command``: the ``clgrid image`` subcommand (arguments, memory check,
FITS and PNG output).
"""

from .run import ImageResult, fit_beam, image_measurement_set

__all__ = ["ImageResult", "fit_beam", "image_measurement_set"]

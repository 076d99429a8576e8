"""cygrid's own test set-up (cygrid/tests/test_cygrid.py): map centre and
size, beam, kernel, support, the legacy NumPy random samples; shared by the
port of its suite and the compatibility tests."""

import numpy as np

MAPCENTER = (131.0, 50.0)
MAPSIZE = (1.0, 1.0)  # degrees
BEAMSIZE_FWHM = 0.05  # degrees
KERNEL_SIGMA = BEAMSIZE_FWHM / 2 / 2.35
SUPPORT = 3.0 * KERNEL_SIGMA
HPX_RES = KERNEL_SIGMA / 2.0


def cygrid_samples(with_targets: bool = False):
    """cygrid's set-up: NumpyRNGContext(0) seeds the legacy global stream."""
    n = int((5 * MAPSIZE[0] / BEAMSIZE_FWHM) * (5 * MAPSIZE[1] / BEAMSIZE_FWHM))
    scale = np.cos(np.radians(MAPCENTER[1]))
    rng = np.random.RandomState(0)
    x = rng.uniform(MAPCENTER[0] - MAPSIZE[0] / 2 / scale, MAPCENTER[0] + MAPSIZE[0] / 2 / scale,
                    n)
    y = rng.uniform(MAPCENTER[1] - MAPSIZE[1] / 2, MAPCENTER[1] + MAPSIZE[1] / 2, n)
    signal = rng.normal(0.0, 0.01, n)
    targets = None
    if with_targets:
        targets = (rng.uniform(MAPCENTER[0] - MAPSIZE[0] / 2 / scale,
                               MAPCENTER[0] + MAPSIZE[0] / 2 / scale, 1000),
                   rng.uniform(MAPCENTER[1] - MAPSIZE[1] / 2, MAPCENTER[1] + MAPSIZE[1] / 2,
                               1000))
    signal2 = np.column_stack([signal, signal**2])
    signal3 = np.column_stack([signal, signal**2, signal**3, signal**4]).reshape((-1, 2, 2))
    return x, y, (signal, signal2, signal3), targets


def cygrid_header():
    """cygrid's SIN map header around MAPCENTER, 3 pixels across the beam."""
    pixsize = BEAMSIZE_FWHM / 3.0
    naxis1 = int(MAPSIZE[0] / pixsize + 0.5)
    naxis2 = int(MAPSIZE[1] / pixsize + 0.5)
    return {"NAXIS": 2, "NAXIS1": naxis1, "NAXIS2": naxis2,
            "CTYPE1": "RA---SIN", "CTYPE2": "DEC--SIN", "CUNIT1": "deg", "CUNIT2": "deg",
            "CDELT1": -pixsize, "CDELT2": pixsize, "CRPIX1": naxis1 / 2.0,
            "CRPIX2": naxis2 / 2.0, "CRVAL1": MAPCENTER[0], "CRVAL2": MAPCENTER[1]}

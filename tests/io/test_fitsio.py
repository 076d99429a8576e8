"""FITS output: layout, WCS against spherical trigonometry, round trip."""

import numpy as np
import pytest

pytest.importorskip("astropy")
from clgrid.io.fitsio import (fits_data_to_image, image_pixel_to_world,  # noqa: E402
                           image_to_fits_data, read_image, write_image)


def _lm_of(ra, dec, ra0, dec0):
    l = np.cos(dec) * np.sin(ra - ra0)
    m = np.sin(dec) * np.cos(dec0) - np.cos(dec) * np.sin(dec0) * np.cos(ra - ra0)
    return l, m


@pytest.mark.parametrize("dec0_deg", [7.5, -60.0, 85.0])
def test_wcs_pixels_are_direction_cosines(tmp_path, dec0_deg):
    """World coordinates of pixel (i, j) have l = (i - nx/2) dx, m = (j - ny/2) dy:
    ducc0's axes, checked with spherical trigonometry independent of astropy."""
    npix_x, npix_y, pixsize = 64, 48, np.radians(1 / 60)
    centre = (np.radians(152.0), np.radians(dec0_deg))
    image = np.arange(npix_x * npix_y, dtype=float).reshape(npix_x, npix_y)
    path = tmp_path / "a.fits"
    write_image(path, image, pixsize_x=pixsize, pixsize_y=pixsize, phase_centre_rad=centre,
                freq_hz=1.4e9, bandwidth_hz=1e6, OBJECT="test", WEIGHTNG="NATURAL")
    back, header, wcs = read_image(path)
    np.testing.assert_array_equal(back, image.astype(np.float32))
    assert header["CTYPE1"] == "RA---SIN" and header["CDELT1"] < 0
    assert header["OBJECT"] == "test" and header["BUNIT"] == "JY/BEAM"
    assert header["NAXIS"] == 4 and header["CTYPE4"] == "STOKES"
    for i, j in [(32, 24), (0, 0), (63, 47), (40, 10)]:
        ra, dec = image_pixel_to_world(wcs, i, j)
        l, m = _lm_of(ra, dec, *centre)
        np.testing.assert_allclose([l, m], [(i - npix_x / 2) * pixsize, (j - npix_y / 2) * pixsize],
                                   atol=1e-12)


def test_east_is_left():
    """In the FITS array, the column of larger l (east) has a smaller x index."""
    image = np.zeros((8, 6))
    image[7, 2] = 1  # largest l
    data = image_to_fits_data(image)
    assert data.shape == (6, 8) and data[2, 0] == 1
    np.testing.assert_array_equal(fits_data_to_image(data[None, None]), image)


def test_bad_image_shape(tmp_path):
    with pytest.raises(ValueError, match="2-D"):
        write_image(tmp_path / "b.fits", np.zeros((2, 2, 2)), pixsize_x=1e-5, pixsize_y=1e-5,
                    phase_centre_rad=(0.0, 0.0))

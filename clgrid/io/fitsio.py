"""FITS images with a celestial WCS, via astropy.

clgrid's images use ducc0's layout: ``image[i, j]`` with axis 0 along l
(east, increasing right ascension) and axis 1 along m (north), pixel
``(npix_x/2, npix_y/2)`` at the phase centre, uniform steps in l and m.
Uniform steps in direction cosines are exactly the SIN (orthographic)
projection at the phase centre, so the FITS image is RA---SIN / DEC--SIN
with CDELT1 < 0 (east to the left, as on the sky).  The FITS data array is
``(ny, nx)`` with x running west: ``data[y, x] = image[npix_x - 1 - x, y]``.

Files are written under a temporary name beside the target and renamed when
complete (:func:`replaced_when_complete`): an interrupted write leaves no
partial file under the target's name.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import secrets
import textwrap
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

#: FITS STOKES axis code of Stokes I.
STOKES_I = 1


def _require_astropy():
    try:
        from astropy.io import fits
        from astropy.wcs import WCS
    except ImportError as error:  # pragma: no cover - depends on the install
        raise RuntimeError("writing FITS needs astropy: pip install 'clgrid[astro]'") from error
    return fits, WCS


def image_to_fits_data(image: np.ndarray) -> np.ndarray:
    """(npix_x, npix_y) image in ducc0 layout to the FITS (ny, nx) array."""
    return np.ascontiguousarray(np.asarray(image)[::-1, :].T)


def fits_data_to_image(data: np.ndarray) -> np.ndarray:
    """Inverse of :func:`image_to_fits_data` (extra length-1 axes dropped)."""
    data = np.asarray(data)
    data = data.reshape(data.shape[-2:])
    return np.ascontiguousarray(data.T[::-1, :])


def make_header(npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float,
                phase_centre_rad: tuple[float, float], freq_hz: float | None = None,
                bandwidth_hz: float | None = None, **keywords):
    """FITS header: RA---SIN, DEC--SIN at the phase centre, then FREQ and
    STOKES axes of length 1 (as CASA and WSClean write them) when
    ``freq_hz`` is given.  Extra ``keywords`` are added as cards."""
    fits, _ = _require_astropy()
    ra_deg, dec_deg = (float(np.degrees(a)) for a in phase_centre_rad)
    header = fits.Header()
    header["CTYPE1"], header["CRVAL1"] = "RA---SIN", ra_deg % 360.0
    header["CDELT1"], header["CRPIX1"] = -float(np.degrees(pixsize_x)), npix_x / 2.0
    header["CUNIT1"] = "deg"
    header["CTYPE2"], header["CRVAL2"] = "DEC--SIN", dec_deg
    header["CDELT2"], header["CRPIX2"] = float(np.degrees(pixsize_y)), npix_y / 2.0 + 1.0
    header["CUNIT2"] = "deg"
    if freq_hz is not None:
        header["CTYPE3"], header["CRVAL3"], header["CRPIX3"] = "FREQ", float(freq_hz), 1.0
        header["CDELT3"], header["CUNIT3"] = float(bandwidth_hz or 1.0), "Hz"
        header["CTYPE4"], header["CRVAL4"], header["CRPIX4"] = "STOKES", float(STOKES_I), 1.0
        header["CDELT4"] = 1.0
        header["SPECSYS"] = "TOPOCENT"
    header["RADESYS"], header["EQUINOX"] = "FK5", 2000.0
    header["LONPOLE"] = 180.0
    for key, value in keywords.items():
        header[key.upper()[:8]] = value
    return header


def write_image(path: "str | os.PathLike", image: np.ndarray, *, pixsize_x: float,
                pixsize_y: float, phase_centre_rad: tuple[float, float],
                freq_hz: float | None = None, bandwidth_hz: float | None = None,
                bunit: str = "JY/BEAM", overwrite: bool = True, history: "Sequence[str]" = (),
                **keywords) -> None:
    """Write a (npix_x, npix_y) image in ducc0 layout as a FITS file.

    Parameters
    ----------
    path
        Output file.
    image
        The image, axis 0 along l (east), axis 1 along m (north).
    pixsize_x, pixsize_y
        Pixel size in radians.
    phase_centre_rad
        (RA, Dec) of the phase centre in radians (J2000).
    freq_hz, bandwidth_hz
        Centre frequency and bandwidth: adds FREQ and STOKES axes.
    bunit
        Brightness unit.
    overwrite
        Replace an existing file (else an existing file raises ``OSError``).
        The file appears complete or not at all (:func:`replaced_when_complete`).
    history
        Lines written as HISTORY cards (what was done to the data).
    keywords
        Extra header cards (e.g. ``OBJECT``, ``TELESCOP``, ``WEIGHTNG``).
    """
    fits, _ = _require_astropy()
    image = np.asarray(image)
    if image.ndim != 2:
        raise ValueError(f"image must be 2-D (npix_x, npix_y), got {image.shape}")
    header = make_header(image.shape[0], image.shape[1], pixsize_x, pixsize_y,
                         phase_centre_rad, freq_hz, bandwidth_hz, **keywords)
    header["BUNIT"], header["BTYPE"] = bunit, "Intensity"
    header["ORIGIN"] = "clgrid"
    header["DATE"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    finite = image[np.isfinite(image)]
    if finite.size:
        header["DATAMIN"], header["DATAMAX"] = float(finite.min()), float(finite.max())
    for line in history:  # HISTORY holds 72 characters a card: wrap at words
        for part in textwrap.wrap(line, 72) or [""]:
            header.add_history(part)
    data = image_to_fits_data(image).astype(np.float32)
    if freq_hz is not None:
        data = data[None, None]
    if not overwrite and os.path.exists(path):
        raise OSError(f"{os.fspath(path)} exists (overwrite=False)")
    with replaced_when_complete(path) as temporary:
        fits.PrimaryHDU(data=data, header=header).writeto(temporary)


def temporary_path_beside(path: "str | os.PathLike") -> Path:
    """A fresh hidden name in ``path``'s folder that ends like ``path`` (so
    writers that go by the extension, ``.fits.gz`` or ``.png``, do the same)."""
    path = Path(path)
    return path.with_name(f".clgrid-part-{os.getpid()}-{secrets.token_hex(4)}-{path.name}")


@contextlib.contextmanager
def replaced_when_complete(path: "str | os.PathLike") -> Iterator[Path]:
    """A temporary name beside ``path`` to write to, renamed to ``path``
    (``os.replace``, atomic in one folder) when the block completes and
    removed when it fails or is interrupted."""
    temporary = temporary_path_beside(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def read_image(path: "str | os.PathLike"):
    """Read a FITS image back: (image in ducc0 layout, header, celestial WCS)."""
    fits, WCS = _require_astropy()
    with fits.open(os.fspath(path)) as hdus:
        header = hdus[0].header.copy()
        data = np.asarray(hdus[0].data, dtype=np.float64)
    return fits_data_to_image(data), header, WCS(header).celestial


def fits_pixel(i: int, j: int, npix_x: int) -> tuple[int, int]:
    """FITS pixel ``(x, y)``, 1-based as FITS viewers show it, of the
    ducc0-layout pixel ``image[i, j]`` (x runs west: the reverse of i)."""
    return npix_x - int(i), int(j) + 1


def image_pixel_to_world(wcs, i: float, j: float) -> tuple[float, float]:
    """(RA, Dec) in radians of ducc0-layout pixel ``(i, j)`` through ``wcs``."""
    npix_x = int(round(2 * wcs.wcs.crpix[0]))
    x, y = npix_x - 1 - i, j  # 0-based FITS pixel coordinates
    ra_deg, dec_deg = wcs.wcs_pix2world([[x, y]], 0)[0]
    return float(np.radians(ra_deg)), float(np.radians(dec_deg))


def ms_time_to_iso(time_s: float) -> str:
    """Measurement Set time (MJD seconds, UTC) as an ISO date for DATE-OBS."""
    mjd_epoch = datetime.datetime(1858, 11, 17, tzinfo=datetime.timezone.utc)
    moment = mjd_epoch + datetime.timedelta(seconds=float(time_s))
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


__all__ = ["fits_data_to_image", "fits_pixel", "image_pixel_to_world", "image_to_fits_data",
           "make_header", "ms_time_to_iso", "read_image", "replaced_when_complete",
           "temporary_path_beside", "write_image"]

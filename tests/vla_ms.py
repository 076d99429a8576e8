"""The bundled VLA Measurement Set, unpacked once per test session, and a
copy holding a simulated point source at a known direction."""

import shutil
import tarfile
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

#: The copy clgrid ships (package data, as the examples read it): one file, not two.
TARBALL_NAME = "vla_day2_TDEM0003_10s_norx_1src_1spw.ms.tar.gz"
C = 299_792_458.0
#: Simulated source: offset from the phase centre in arcsec (east, north), flux in Jy.
SIM_OFFSET_ARCSEC = (12.0, -7.0)
SIM_FLUX_JY = 1.5


def _unpack(folder: Path) -> Path:
    with resources.as_file(resources.files("clgrid") / "data" / TARBALL_NAME) as tarball, \
            tarfile.open(tarball) as archive:
        archive.extractall(folder, filter="data")
    return next(folder.glob("*.ms"))


@pytest.fixture(scope="session")
def vla_ms(tmp_path_factory) -> Path:
    # the test extra installs it; a bare GPU machine may not have it
    pytest.importorskip("casacore", reason="reading the Measurement Set needs "
                                           "python-casacore (pip install 'clgrid[ms]')")
    return _unpack(tmp_path_factory.mktemp("vla"))


def lm_of(ra, dec, ra0, dec0):
    """Direction cosines of (ra, dec) about the phase centre (ra0, dec0)."""
    l = np.cos(dec) * np.sin(ra - ra0)
    m = np.sin(dec) * np.cos(dec0) - np.cos(dec) * np.sin(dec0) * np.cos(ra - ra0)
    return l, m


def sim_direction(ra0, dec0):
    """(RA, Dec) of the simulated source, SIM_OFFSET_ARCSEC from the centre (SIN)."""
    l, m = (np.radians(a / 3600) for a in SIM_OFFSET_ARCSEC)
    n = np.sqrt(1 - l * l - m * m)
    dec = np.arcsin(m * np.cos(dec0) + n * np.sin(dec0))
    ra = ra0 + np.arctan2(l, n * np.cos(dec0) - m * np.sin(dec0))
    return ra, dec


@pytest.fixture(scope="session")
def sim_ms(tmp_path_factory) -> Path:
    """A copy whose CORRECTED_DATA is a point source (ducc0's convention:
    V = S exp(-2 pi i (u l + v m - w (n - 1)))) and whose rows 0..99 are
    flagged in channel 5."""
    from casacore.tables import makearrcoldesc, maketabdesc, table
    path = _unpack(tmp_path_factory.mktemp("vla_sim"))
    with table(str(path), readonly=False, ack=False) as main:
        ra0, dec0 = table(main.getkeyword("FIELD"), ack=False).getcell("PHASE_DIR", 0)[0]
        freq_hz = table(main.getkeyword("SPECTRAL_WINDOW"), ack=False).getcell("CHAN_FREQ", 0)
        l, m = lm_of(*sim_direction(ra0, dec0), ra0, dec0)
        n = np.sqrt(1 - l * l - m * m)
        uvw = main.getcol("UVW")
        scale = freq_hz[None, :] / C
        phase = -2j * np.pi * (uvw[:, 0:1] * scale * l + uvw[:, 1:2] * scale * m
                               - uvw[:, 2:3] * scale * (n - 1))
        vis = SIM_FLUX_JY * np.exp(phase)
        data = np.zeros(main.getcol("DATA").shape, np.complex64)
        data[..., 0] = data[..., 3] = vis  # RR = LL = I
        main.addcols(maketabdesc(makearrcoldesc("CORRECTED_DATA", 0j, valuetype="complex",
                                                shape=list(data.shape[1:]))))
        main.putcol("CORRECTED_DATA", data)
        flag = main.getcol("FLAG")
        flag[:100, 5, 0] = True
        main.putcol("FLAG", flag)
    return path


def device_spec(cl_env) -> str:
    """The ``--device`` spec of the device under test (``platform:device``)."""
    return f"{cl_env.profile.platform_index}:{cl_env.profile.device_index}"


def copy_ms(vla_ms, tmp_path, name="copy.ms") -> Path:
    """A copy of a Measurement Set folder that a test may change."""
    target = tmp_path / name
    shutil.copytree(vla_ms, target)
    return target

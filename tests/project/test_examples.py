"""Every script in examples/ runs (subprocess, ``--small``, on the fixture's
device) and the numbers it prints agree with independent references: ducc0
and float64 direct Fourier transforms, a brute-force single-dish gather,
astropy's reproject, the true simulated sky."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vla_ms import vla_ms  # noqa: F401  (fixture: the bundled Measurement Set, unpacked)

import clgrid

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
C = 299_792_458.0


def _spec(cl_env) -> str:
    if not cl_env.profile.fp64:
        pytest.skip("the examples image in double-precision coordinates: device has no fp64")
    return f"{cl_env.profile.platform_index}:{cl_env.profile.device_index}"


def run_example(name: str, cl_env, tmp_path: Path) -> dict[str, list[str]]:
    """Run examples/<name>.py --small on the fixture's device; its 'key: value' lines."""
    png = tmp_path / f"{name}.png"
    # the clgrid this test imported (the checkout, or the installed wheel under tox)
    package_parent = str(Path(clgrid.__file__).resolve().parents[1])
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--small",
                           "--device", _spec(cl_env), "--png", str(png)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert png.stat().st_size > 10_000, "no picture written"
    printed: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        match = re.match(r"^(\w+): (.*)$", line)
        if match:
            printed.setdefault(match.group(1), []).append(match.group(2))
    return printed


def load_example(name: str):
    """Import an example as a module (its data-making functions; main() not run)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dft_at(uvw, freq, vis, pixels, npix, pixsize, do_w=False) -> np.ndarray:
    """Float64 direct Fourier transform (ducc0's vis2dirty convention) at (i, j) pixels."""
    u, v, w = (np.outer(uvw[:, k], freq).ravel() / C for k in range(3))
    values = np.asarray(vis, np.complex128).ravel()
    out = []
    for i, j in pixels:
        l, m = (i - npix // 2) * pixsize, (j - npix // 2) * pixsize
        n = np.sqrt(1 - l * l - m * m)
        eta = n - 1 if do_w else 0.0
        total = np.sum(values * np.exp(2j * np.pi * (u * l + v * m - w * eta))).real
        out.append(total / n if do_w else total)
    return np.array(out)


def numbers(text: str) -> list[float]:
    """The numbers in a printed line (not digits inside words such as 'ducc0')."""
    return [float(x) for x in re.findall(r"(?<![\w.])-?\d+\.?\d*(?:e[-+]?\d+)?", text)]


def great_circle(lon, lat, lon0, lat0):
    """Haversine distance in radians."""
    hav = (np.sin((lat - lat0) / 2) ** 2
           + np.cos(lat) * np.cos(lat0) * np.sin((lon - lon0) / 2) ** 2)
    return 2 * np.arcsin(np.sqrt(np.minimum(hav, 1.0)))


# ----------------------------------------------------------------------------- examples
def test_gridding(cl_env, tmp_path, vla_ms):
    ducc0 = pytest.importorskip("ducc0")
    table = pytest.importorskip("casacore.tables").table
    printed = run_example("gridding", cl_env, tmp_path)
    assert printed["method"][0] in ("tiles", "register") and printed["why"][0]
    assert printed["calibration"] == ["point"]
    with table(str(vla_ms), ack=False) as main:   # Stokes I read plainly, not through clgrid
        uvw, data, flag = main.getcol("UVW"), main.getcol("DATA"), main.getcol("FLAG")
        weight = main.getcol("WEIGHT_SPECTRUM")
        freq = table(main.getkeyword("SPECTRAL_WINDOW"), ack=False).getcell("CHAN_FREQ", 0)
    assert not flag.any()
    example = load_example("gridding")
    raw = example.read_vla(calibrate=False)       # the example's reader is the plain read
    assert np.allclose(raw[0], uvw) and np.allclose(raw[1], freq)
    assert np.allclose(raw[2], 0.5 * (data[..., 0] + data[..., 3]), rtol=1e-6, atol=0)
    assert np.allclose(raw[3], 4.0 / (1.0 / weight[..., 0] + 1.0 / weight[..., 3]), rtol=1e-6)
    # what it grids: the data calibrated on a point model (clgrid.pipeline.calibrate,
    # tested in test_calibrate.py); here ducc0 grids the same samples
    _, _, vis, wgt, usable = example.read_vla(calibrate=True)
    wgt = np.where(usable, wgt, 0)
    cell = 1.0 / (4 * np.abs(uvw[:, :2]).max() * freq.max() / C)
    reference = ducc0.wgridder.vis2dirty(
        uvw=uvw, freq=freq, vis=vis.astype(np.complex128), wgt=wgt.astype(np.float64),
        npix_x=128, npix_y=128, pixsize_x=cell, pixsize_y=cell, epsilon=1e-7,
        do_wgridding=True) / wgt.sum()
    peak = np.unravel_index(np.argmax(reference), reference.shape)
    assert peak == (64, 64)                          # the calibrator, at the phase centre
    assert tuple(int(x) for x in printed["peak_pixel"][0].split()) == peak
    assert float(printed["peak_jy_per_beam"][0]) == pytest.approx(reference[peak], rel=1e-2)
    assert float(printed["peak_jy_per_beam"][0]) == pytest.approx(1.0, abs=0.02)  # the model
    assert float(printed["rms_jy_per_beam"][0]) == pytest.approx(reference.std(), rel=2e-2)


def test_ducc0_swap(cl_env, tmp_path):
    pytest.importorskip("ducc0")
    printed = run_example("ducc0_swap", cl_env, tmp_path)
    assert float(printed["max_difference_over_peak"][0]) < 1e-4
    uvw, freq, vis, npix, pixsize = load_example("ducc0_swap").simulate(small=True)
    sources = [numbers(line) for line in printed["source"]]
    pixels = [(int(s[0]), int(s[1])) for s in sources]
    expected = dft_at(uvw, freq, vis, pixels, npix, pixsize, do_w=True) / vis.size
    assert np.allclose([s[3] for s in sources], expected, atol=1e-4)   # clgrid's values
    assert np.allclose([s[4] for s in sources], expected, atol=1e-4)   # ducc0's values


def test_ducc0_swap_without_ducc0(tmp_path):
    """Where ducc0 is not installed: one line saying how to install it, exit 1, no
    traceback (ducc0 hidden by a None in sys.modules, as Python does for a missing one)."""
    hide = ("import runpy, sys; sys.modules['ducc0'] = None; "
            f"sys.argv = ['ducc0_swap.py', '--small', '--png', 'ducc0_swap.png']; "
            f"runpy.run_path({str(EXAMPLES / 'ducc0_swap.py')!r}, run_name='__main__')")
    package_parent = str(Path(clgrid.__file__).resolve().parents[1])
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join(
        [package_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    done = subprocess.run([sys.executable, "-c", hide], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "pip install ducc0" in done.stderr, done.stderr
    assert not (tmp_path / "ducc0_swap.png").exists()


def test_singledish_map(cl_env, tmp_path):
    WCS = pytest.importorskip("astropy.wcs").WCS
    printed = run_example("singledish_map", cl_env, tmp_path)
    example = load_example("singledish_map")
    lon, lat, signal = (np.radians(a) if k < 2 else a
                        for k, a in enumerate(example.simulate(small=True)))
    wcs = WCS(example.header(small=True))
    sigma = np.radians(example.BEAM_SIGMA / 2)
    for line in printed["source"]:     # exact float64 gather at each printed pixel
        ra, dec, i, j, value, weight = numbers(line)
        cell_lon, cell_lat = np.radians(wcs.pixel_to_world_values(i, j))
        distance = great_circle(lon, lat, cell_lon, cell_lat)
        kernel = np.where(distance < 3 * sigma, np.exp(-distance ** 2 / (2 * sigma ** 2)), 0)
        assert weight == pytest.approx(kernel.sum(), rel=1e-5)
        assert value == pytest.approx((kernel * signal).sum() / kernel.sum(), rel=1e-5, abs=1e-5)
        # the printed pixel is the source's (within half a 0.05-degree cell), across RA = 0
        assert np.degrees(great_circle(*np.radians([ra, dec]), cell_lon, cell_lat)) < 0.036
    peak = numbers(printed["map_peak"][0])
    brightest = max(example.SOURCES, key=lambda s: s[2])
    assert peak[:2] == numbers(printed["source"][example.SOURCES.index(brightest)])[2:4]


def test_reproject_image(cl_env, tmp_path):
    # a submodule: without reproject installed, ``import reproject`` finds
    # tests/reproject/ (a folder of these tests) as a namespace package
    pytest.importorskip("reproject.interpolation")
    import reproject
    fits = pytest.importorskip("astropy.io.fits")
    printed = run_example("reproject_image", cl_env, tmp_path)
    with fits.open(tmp_path / "reproject_image-radec.fits") as radec, \
            fits.open(tmp_path / "reproject_image-galactic.fits") as galactic:
        expected, footprint = reproject.reproject_interp(radec[0], galactic[0].header,
                                                         order="bicubic")
        result = galactic[0].data
    assert np.array_equal(np.isfinite(result), footprint > 0)
    finite = footprint > 0
    assert np.abs(result[finite] - expected[finite]).max() < 1e-4 * np.nanmax(expected)
    assert float(printed["footprint_fraction"][0]) == pytest.approx(footprint.mean(), abs=1e-4)
    assert numbers(printed["output_sum"][0])[0] == pytest.approx(np.nansum(expected), rel=1e-3)
    # calibrated on a point model: the calibrator, 1 Jy/beam of the model, at the centre
    with fits.open(tmp_path / "reproject_image-radec.fits") as radec:
        image, header = radec[0].data, radec[0].header
    y, x = np.unravel_index(np.argmax(image), image.shape)
    assert abs(x + 1 - header["CRPIX1"]) <= 1 and abs(y + 1 - header["CRPIX2"]) <= 1
    assert image[y, x] == pytest.approx(1.0, abs=0.02)
    assert numbers(printed["output_max"][0])[0] == pytest.approx(1.0, abs=0.02)


def test_dask_cluster(cl_env, tmp_path):
    pytest.importorskip("distributed")
    printed = run_example("dask_cluster", cl_env, tmp_path)
    assert float(printed["max_difference_over_peak"][0]) <= 1e-5
    assert len({line.split()[1] for line in printed["worker"]}) == 2     # two processes
    uvw, freq, vis, pixsize = load_example("dask_cluster").simulate(small=True)
    i, j, value = numbers(printed["peak"][0])
    assert value == pytest.approx(dft_at(uvw, freq, vis, [(i, j)], 256, pixsize)[0] / vis.size,
                                  abs=1e-4)


def test_device_resident(cl_env, tmp_path):
    printed = run_example("device_resident", cl_env, tmp_path)
    example = load_example("device_resident")
    uvw, freq, vis, pixsize = example.simulate(small=True)
    cycles = [numbers(line) for line in printed["cycle"]]
    centre = example.NPIX // 2
    first_peak = dft_at(uvw, freq, vis, [(centre, centre)], example.NPIX, pixsize)[0] / vis.size
    assert cycles[0][1] == pytest.approx(first_peak, abs=1e-4)
    peaks = [c[1] for c in cycles] + [float(printed["final_residual_peak"][0])]
    assert all(b < 0.4 * a for a, b in zip(peaks, peaks[1:]))     # each major cycle converges
    for line, (x, y, flux) in zip(printed["source"], example.SOURCES):
        i, j, true, model = numbers(line)
        assert (i, j, true) == (centre + x, centre + y, flux)
        assert model == pytest.approx(flux, abs=1.5 * peaks[-1])


"""Imaging the VLA Measurement Set: against a float64 direct Fourier
transform, a simulated source through FITS and its WCS, and CLI errors."""

import numpy as np
import pytest

pytest.importorskip("casacore")
pytest.importorskip("astropy")
from casacore.tables import table  # noqa: E402

from clgrid.cli import main  # noqa: E402
from clgrid.io.fitsio import image_pixel_to_world, read_image  # noqa: E402
from clgrid.pipeline.run import image_measurement_set  # noqa: E402
from weighting_reference import weights_reference  # noqa: E402
from vla_ms import copy_ms as _copy, device_spec as _device_spec, SIM_FLUX_JY, lm_of, sim_direction, sim_ms, vla_ms  # noqa: E402,F401

C = 299_792_458.0
ARCSEC = np.radians(1 / 3600)


def _plain_stokes_i(path, channels):
    """Stokes I, weights, uvw and frequencies read plainly with casacore."""
    with table(str(path), ack=False) as main_table:
        data = main_table.getcol("DATA")[:, channels]
        weight = main_table.getcol("WEIGHT_SPECTRUM")[:, channels].astype(np.float64)
        uvw = main_table.getcol("UVW")
        freq = table(main_table.getkeyword("SPECTRAL_WINDOW"), ack=False).getcell(
            "CHAN_FREQ", 0)[channels]
    vis = (data[..., 0] + data[..., 3]).astype(np.complex128) / 2
    return vis, 4 / (1 / weight[..., 0] + 1 / weight[..., 3]), uvw, freq


def _dft(vis, weight, uvw, freq, l, m, with_w):
    """Float64 direct Fourier transform at direction cosines (l, m), ducc0 sign."""
    u, v, w = (uvw[:, k:k + 1] * freq[None, :] / C for k in range(3))
    wv = (weight * vis).ravel()
    u, v, w = u.ravel(), v.ravel(), w.ravel()
    out = np.empty(l.size)
    for start in range(0, l.size, 64):
        ll, mm = l[start:start + 64, None], m[start:start + 64, None]
        n1 = np.sqrt(1 - ll * ll - mm * mm) - 1 if with_w else 0.0
        phase = 2 * np.pi * (u * ll + v * mm - w * n1)
        out[start:start + 64] = np.real(np.exp(1j * phase) @ wv)
    return out / weight.sum()


def test_vla_image_equals_dft_everywhere(cl_env, vla_ms):
    """Whole 64x64 image (no w term: separable DFT by matrix products)."""
    channels = np.arange(0, 64, 4)
    npix, cell, epsilon = 64, 0.8 * ARCSEC, 1e-5
    result = image_measurement_set(vla_ms, npix_x=npix, pixsize_x=cell, epsilon=epsilon,
                                   do_wgridding=False, channels="0:64:4", context=cl_env.queue)
    vis, weight, uvw, freq = _plain_stokes_i(vla_ms, channels)
    coords = (np.arange(npix) - npix / 2) * cell
    u = (uvw[:, 0:1] * freq / C).ravel()
    v = (uvw[:, 1:2] * freq / C).ravel()
    along_l = np.exp(2j * np.pi * np.outer(u, coords))
    along_m = np.exp(2j * np.pi * np.outer(v, coords))
    reference = np.real(along_l.T @ ((weight * vis).ravel()[:, None] * along_m)) / weight.sum()
    assert result.n_outside == 0 and result.sum_weights == pytest.approx(weight.sum())
    error = np.sqrt(np.mean((result.image - reference) ** 2) / np.mean(reference ** 2))
    assert error < epsilon
    peak = np.unravel_index(np.argmax(result.image), result.image.shape)
    assert peak == np.unravel_index(np.argmax(reference), reference.shape)
    assert result.image[peak] == pytest.approx(reference[peak], rel=epsilon)


@pytest.mark.parametrize("fp64", [True, False], ids=["fp64", "without-fp64"])
def test_vla_briggs_wgridding_peak_matches_dft(cl_env, vla_ms, request, fp64):
    """w term on, Briggs weights from the device: the peak and its
    neighbourhood agree with a DFT using float64 reference weights; also on
    a device without fp64 (float weights' densities, float-float phases)."""
    if not fp64:
        request.getfixturevalue("without_fp64")
    npix, cell, epsilon, robust = 256, 0.8 * ARCSEC, 1e-4, 0.5
    result = image_measurement_set(vla_ms, npix_x=npix, pixsize_x=cell, epsilon=epsilon,
                                   weighting="briggs", robust=robust, do_wgridding=True,
                                   channels="0:64:2", make_psf=True, context=cl_env.queue)
    vis, natural, uvw, freq = _plain_stokes_i(vla_ms, np.arange(0, 64, 2))
    weight, _ = weights_reference(uvw, freq, natural, npix, npix, cell, cell, "briggs", robust)
    peak = np.unravel_index(np.argmax(result.image), result.image.shape)
    i, j = np.meshgrid(np.arange(-3, 4) + peak[0], np.arange(-3, 4) + peak[1], indexing="ij")
    inside = (i >= 0) & (i < npix) & (j >= 0) & (j < npix)
    i, j = i[inside], j[inside]
    reference = _dft(vis, weight, uvw, freq, (i - npix / 2) * cell, (j - npix / 2) * cell, True)
    measured = result.image[i, j]
    assert np.argmax(reference) == np.argmax(measured)
    error = np.sqrt(np.mean((measured - reference) ** 2) / np.mean(reference ** 2))
    assert error < 2 * epsilon
    assert result.psf[npix // 2, npix // 2] == pytest.approx(1.0, abs=epsilon)
    assert result.psf.max() == pytest.approx(1.0, abs=epsilon)


def test_simulated_source_through_cli_fits_and_wcs(cl_env, sim_ms, tmp_path, capsys):
    """CLI on a point source 12" east, 7" south: FITS peak flux and WCS
    world coordinates of the peak pixel equal the simulated source."""
    output = tmp_path / "sim.fits"
    device = f"{cl_env.profile.platform_index}:{cl_env.profile.device_index}"
    code = main(["image", str(sim_ms), str(output), "--npix", "128", "--cell", "0.5",
                 "--column", "CORRECTED_DATA", "--weighting", "uniform", "--epsilon", "1e-5",
                 "--psf", "--png", "--device", device, "--quiet"])
    assert code == 0, capsys.readouterr().err
    image, header, wcs = read_image(output)
    peak = np.unravel_index(np.argmax(image), image.shape)
    assert peak == (64 + 24, 64 - 14)  # 12" / 0.5" east, 7" / 0.5" south
    assert image[peak] == pytest.approx(SIM_FLUX_JY, rel=1e-4)
    with table(str(sim_ms), ack=False) as main_table:
        ra0, dec0 = table(main_table.getkeyword("FIELD"), ack=False).getcell("PHASE_DIR", 0)[0]
    ra, dec = image_pixel_to_world(wcs, *peak)
    expected_ra, expected_dec = sim_direction(ra0, dec0)
    assert abs((ra - expected_ra) * np.cos(dec)) < 1e-3 * ARCSEC
    assert abs(dec - expected_dec) < 1e-3 * ARCSEC
    assert header["NFLAGGED"] == 100 and header["WEIGHTNG"] == "UNIFORM"
    psf, _, _ = read_image(tmp_path / "sim-psf.fits")
    assert psf[64, 64] == pytest.approx(1.0, abs=1e-4)
    assert (tmp_path / "sim.png").stat().st_size > 1000



def test_example_flag(cl_env, tmp_path, capsys):
    output = tmp_path / "example.fits"
    assert main(["image", "--example", str(output), "--npix", "64", "--cell", "0.8",
                 "--device", _device_spec(cl_env), "--quiet"]) == 0
    image, header, _ = read_image(output)
    assert image.shape == (64, 64) and header["OBJECT"] == "J1008+0730"


@pytest.mark.parametrize("extra,message", [
    (["--column", "MODEL_DATA"], "no column 'MODEL_DATA'"),
    (["--channels", "70:80"], "selects no channel"),
    (["--spw", "4"], "no spectral window"),
    (["--device", "no-such-device"], "no OpenCL device matches"),
    (["--cell", "-1"], "--cell must be a positive"),
])
def test_cli_errors_are_one_line(cl_env, vla_ms, tmp_path, capsys, extra, message):
    device = [] if "--device" in extra else ["--device", _device_spec(cl_env)]
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "32",
                 "--quiet"] + device + extra)
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert err.count("\n") == 0 and message in err, err
    assert not (tmp_path / "x.fits").exists()


def test_cli_missing_input(tmp_path, capsys):
    code = main(["image", str(tmp_path / "none.ms"), str(tmp_path / "x.fits"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.count("\n") == 0 and "no such file" in err


def test_cli_deterministic_images_repeat_bitwise(cl_env, sim_ms, tmp_path, capsys):
    """`clgrid image --deterministic` (the default) with Briggs weights: two
    runs write the same bits; --no-deterministic agrees to float rounding."""
    def image(name, *flags):
        output = tmp_path / name
        code = main(["image", str(sim_ms), str(output), "--npix", "64", "--cell", "1",
                     "--column", "CORRECTED_DATA", "--weighting", "briggs", "--robust", "0",
                     "--device", _device_spec(cl_env), "--quiet", *flags])
        assert code == 0, capsys.readouterr().err
        return read_image(output)[0]

    first = image("a.fits", "--deterministic")
    assert np.max(first) == pytest.approx(SIM_FLUX_JY, rel=0.05)
    assert np.array_equal(first, image("b.fits"))
    loose = image("c.fits", "--no-deterministic")
    assert np.max(np.abs(loose - first)) < 1e-5 * np.max(np.abs(first))

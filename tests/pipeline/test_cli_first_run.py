"""What a new user meets with ``clgrid image``: the bundled example shows the
calibrator at the centre, runs without warnings, and every failure the user
can cause is one line on stderr with a non-zero exit."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("casacore")
pytest.importorskip("astropy")
from astropy.io import fits  # noqa: E402
from casacore.tables import table  # noqa: E402

from clgrid.cli import main  # noqa: E402
from clgrid.io.fitsio import read_image  # noqa: E402
from clgrid.pipeline.image_command import memory_needed  # noqa: E402
from clgrid.pipeline.run import fit_beam  # noqa: E402
from vla_ms import copy_ms as _copy, device_spec as _device_spec, SIM_FLUX_JY, sim_ms, vla_ms  # noqa: E402,F401

import clgrid  # noqa: E402

#: Where this clgrid was imported from (the checkout, or the installed wheel under tox).
CLGRID_ROOT = Path(clgrid.__file__).resolve().parent.parent




def _one_line_error(capsys, code, message):
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and err.startswith("clgrid image: "), err
    assert message in err, err
    return err


# -- the first run --------------------------------------------------------------

def test_example_shows_the_calibrator_at_the_centre(cl_env, tmp_path, capsys):
    output = tmp_path / "vla.fits"
    code = main(["image", "--example", str(output), "--npix", "128", "--psf", "--png",
                 "--device", _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "column DATA" in captured.out and "calibration: point" in captured.out
    image, header, _ = read_image(output)
    peak = np.unravel_index(np.argmax(image), image.shape)
    assert abs(peak[0] - 64) <= 1 and abs(peak[1] - 64) <= 1
    history = " ".join(str(card) for card in header["HISTORY"])
    assert "StEFCal" in history and "column DATA" in history and "delay" in history
    psf, _, _ = read_image(tmp_path / "vla-psf.fits")
    beam = fit_beam(psf, np.radians(abs(header["CDELT1"])), np.radians(header["CDELT2"]))
    assert header["BMAJ"] == pytest.approx(np.degrees(beam.major), rel=1e-5)
    assert header["BMIN"] <= header["BMAJ"]
    assert (tmp_path / "vla.png").stat().st_size > 10_000


def test_example_runs_without_warnings(cl_env, tmp_path):
    """A fresh process (kernels built from scratch, every warning shown):
    nothing on stderr."""
    env = dict(os.environ, PYTHONWARNINGS="always", PYTHONPATH=str(CLGRID_ROOT))
    env.pop("PYOPENCL_COMPILER_OUTPUT", None)
    done = subprocess.run(
        [sys.executable, "-m", "clgrid.cli", "image", "--example", str(tmp_path / "v.fits"),
         "--npix", "64", "--quiet", "--device", _device_spec(cl_env)],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_verbose_shows_the_build_log(cl_env, tmp_path):
    """The Intel CPU runtime reports a log on every successful build."""
    if cl_env.key != "intel":
        pytest.skip("only the Intel CPU runtime is known to chat on success")
    env = dict(os.environ, PYTHONPATH=str(CLGRID_ROOT))
    env.pop("PYOPENCL_COMPILER_OUTPUT", None)
    done = subprocess.run(
        [sys.executable, "-m", "clgrid.cli", "image", "--example", str(tmp_path / "v.fits"),
         "--npix", "64", "--quiet", "--verbose", "--device", _device_spec(cl_env)],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "CompilerWarning" in done.stderr and "Compilation" in done.stderr


def test_beam_fit_recovers_a_gaussian():
    """An elliptical Gaussian of known FWHM and position angle (east of north)."""
    cell = np.radians(0.5 / 3600)
    major, minor, angle = 6 * cell, 3.5 * cell, np.radians(30.0)
    i, j = np.meshgrid(np.arange(64) - 32, np.arange(64) - 32, indexing="ij")
    l, m = i * cell, j * cell  # l east, m north
    along = l * np.sin(angle) + m * np.cos(angle)
    across = l * np.cos(angle) - m * np.sin(angle)
    psf = np.exp(-4 * np.log(2) * ((along / major) ** 2 + (across / minor) ** 2))
    beam = fit_beam(psf, cell, cell)
    assert beam.major == pytest.approx(major, rel=1e-9)
    assert beam.minor == pytest.approx(minor, rel=1e-9)
    assert beam.position_angle == pytest.approx(angle, abs=1e-9)
    assert fit_beam(np.zeros((8, 8)), cell, cell) is None


# -- the data column ------------------------------------------------------------

def test_corrected_data_is_the_default_column(cl_env, sim_ms, tmp_path, capsys):
    output = tmp_path / "sim.fits"
    code = main(["image", str(sim_ms), str(output), "--npix", "128", "--cell", "0.5",
                 "--epsilon", "1e-5", "--device", _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "column CORRECTED_DATA" in captured.out and "calibration: none" in captured.out
    image, header, _ = read_image(output)
    assert np.unravel_index(np.argmax(image), image.shape) == (64 + 24, 64 - 14)
    assert image.max() == pytest.approx(SIM_FLUX_JY, rel=1e-4)
    assert "CORRECTED_DATA" in " ".join(str(card) for card in header["HISTORY"])


# -- outputs --------------------------------------------------------------------

def test_existing_output_is_kept_unless_overwrite(cl_env, vla_ms, tmp_path, capsys):
    output = tmp_path / "x.fits"
    output.write_bytes(b"precious")
    args = ["image", str(vla_ms), str(output), "--npix", "32", "--quiet",
            "--device", _device_spec(cl_env)]
    _one_line_error(capsys, main(args), "exists; use --overwrite")
    assert output.read_bytes() == b"precious"
    assert main(args + ["--overwrite"]) == 0
    assert fits.getheader(output)["NAXIS1"] == 32


def test_existing_png_is_kept_too(cl_env, vla_ms, tmp_path, capsys):
    (tmp_path / "x.png").write_bytes(b"picture")
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "32", "--png",
                 "--quiet", "--device", _device_spec(cl_env)])
    _one_line_error(capsys, code, "x.png exists")
    assert not (tmp_path / "x.fits").exists()


@pytest.mark.parametrize("where,message", [
    ("missing/x.fits", "output folder does not exist"),
    ("afile/x.fits", "not a folder"),
])
def test_unusable_output_folder(vla_ms, tmp_path, capsys, where, message):
    (tmp_path / "afile").write_text("not a folder")
    code = main(["image", str(vla_ms), str(tmp_path / where), "--quiet"])
    _one_line_error(capsys, code, message)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_unwritable_output_folder(vla_ms, capsys):
    """/proc refuses new files even to root (for whom permission bits do not)."""
    code = main(["image", str(vla_ms), "/proc/clgrid-test.fits", "--quiet"])
    _one_line_error(capsys, code, "cannot write there")


# -- inputs ---------------------------------------------------------------------

def test_corrupt_measurement_set(tmp_path, capsys):
    bad = tmp_path / "corrupt.ms"
    bad.mkdir()
    (bad / "table.dat").write_bytes(np.random.default_rng(0).bytes(3000))
    code = main(["image", str(bad), str(tmp_path / "x.fits"), "--quiet"])
    _one_line_error(capsys, code, "not a readable Measurement Set")


def test_measurement_set_missing_a_subtable(vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    shutil.rmtree(copy / "SPECTRAL_WINDOW")
    code = main(["image", str(copy), str(tmp_path / "x.fits"), "--quiet"])
    _one_line_error(capsys, code, "damaged Measurement Set")


def test_measurement_set_with_a_truncated_data_file(cl_env, vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    biggest = max(copy.glob("table.f*"), key=lambda p: p.stat().st_size)
    os.truncate(biggest, 1000)
    code = main(["image", str(copy), str(tmp_path / "x.fits"), "--npix", "32", "--quiet",
                 "--device", _device_spec(cl_env)])
    _one_line_error(capsys, code, "cannot read column")
    assert not (tmp_path / "x.fits").exists()


def test_field_without_rows_is_an_empty_selection(cl_env, vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    with table(str(copy / "FIELD"), readonly=False, ack=False) as fields:
        fields.addrows(1)
        fields.putcell("PHASE_DIR", 1, fields.getcell("PHASE_DIR", 0))
        fields.putcell("NAME", 1, "EMPTY")
    code = main(["image", str(copy), str(tmp_path / "x.fits"), "--field", "1", "--npix", "32",
                 "--quiet", "--device", _device_spec(cl_env)])
    _one_line_error(capsys, code, "empty selection")


def test_all_flagged_gives_a_zero_image_and_the_count(cl_env, vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    with table(str(copy), readonly=False, ack=False) as main_table:
        main_table.putcol("FLAG", np.ones(main_table.getcol("FLAG").shape, bool))
    output = tmp_path / "x.fits"
    code = main(["image", str(copy), str(output), "--npix", "32", "--weighting", "briggs",
                 "--psf", "--device", _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "87040 flagged" in captured.out
    assert "no usable visibility" in captured.err and captured.err.count("\n") == 1
    image, header, _ = read_image(output)
    assert np.all(image == 0) and header["NFLAGGED"] == 87040 and header["NVIS"] == 0
    assert "BMAJ" not in header


def test_all_flagged_with_calibration(cl_env, vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    with table(str(copy), readonly=False, ack=False) as main_table:
        main_table.putcol("FLAG_ROW", np.ones(main_table.nrows(), bool))
    code = main(["image", str(copy), str(tmp_path / "x.fits"), "--npix", "32", "--quiet",
                 "--calibrate", "point", "--device", _device_spec(cl_env)])
    err = capsys.readouterr().err
    assert code == 0 and "no usable visibility" in err
    assert np.all(read_image(tmp_path / "x.fits")[0] == 0)


def test_zero_rows_give_a_zero_image(cl_env, vla_ms, tmp_path, capsys):
    """No --cell: the pixel size comes from the longest baseline of the
    ANTENNA table, as no uvw is left."""
    copy = tmp_path / "empty.ms"
    with table(str(vla_ms), ack=False) as main_table:  # tiled columns cannot lose rows:
        main_table.selectrows([]).copy(str(copy), deep=True).close()  # copy none
    with table(str(copy), ack=False) as empty:
        assert empty.nrows() == 0 and "SPECTRAL_WINDOW" in empty.keywordnames()
    output = tmp_path / "x.fits"
    code = main(["image", str(copy), str(output), "--npix", "32", "--device",
                 _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "read 0 rows" in captured.out and "no usable visibility" in captured.err
    image, header, _ = read_image(output)
    assert image.shape == (32, 32) and np.all(image == 0) and header["NVIS"] == 0


# -- devices and memory --------------------------------------------------------

def test_unknown_device(vla_ms, tmp_path, capsys):
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--device", "no-such-gpu"])
    _one_line_error(capsys, code, "no OpenCL device matches")


def test_image_too_large_for_the_device_is_refused(cl_env, vla_ms, tmp_path, capsys):
    """--npix 65536 (the issue's example): refused before allocating, naming
    the bytes needed and what the device (or host) has."""
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "65536",
                 "--device", _device_spec(cl_env)])
    err = _one_line_error(capsys, code, "bytes")
    grid, device_bytes, host = memory_needed(65536, 65536, False)
    profile = cl_env.profile
    if grid > profile.max_alloc_bytes:
        assert f"{grid} bytes" in err and f"{profile.max_alloc_bytes} bytes" in err
    elif device_bytes > profile.global_mem_bytes:
        assert f"{device_bytes} bytes" in err and f"{profile.global_mem_bytes} bytes" in err
    else:
        assert f"{host} bytes" in err and "host memory" in err


def test_memory_needed_counts_the_padded_grid():
    grid, device_bytes, host = memory_needed(1000, 1000, True)
    assert grid >= (1100 ** 2) * 8 and device_bytes == grid + 1000 * 1000 * 4
    assert host == 1000 * 1000 * 8 * 3


def test_kernel_build_failure_shows_the_log(cl_env, vla_ms, tmp_path, capsys, monkeypatch):
    """Not a user's failure: one summary line, then the compiler's log."""
    import pyopencl as cl
    import clgrid.pipeline.image_command as image_command

    def broken(args, ms_path, context, devices):
        cl.Program(context, "__kernel void k(__global float *x) { x[0] = y; }").build()
    monkeypatch.setattr(image_command, "_image", broken)
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--quiet",
                 "--device", _device_spec(cl_env)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("clgrid image: OpenCL error: ") and err.count("\n") > 1
    assert "y" in err.split("\n", 1)[1]  # the log names the undeclared identifier


@pytest.mark.parametrize("argv,message", [
    (["image", "a.ms", "b.fits", "--npix", "abc"], "invalid int value: 'abc'"),
    (["image", "a.ms", "b.fits", "--calibrate", "gains"], "invalid choice: 'gains'"),
    (["image"], "required: PATH"),
])
def test_argument_errors_are_one_line(capsys, argv, message):
    with pytest.raises(SystemExit, match="^2$") as stop:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.count("\n") == 0 and message in err, err
    assert err.startswith("clgrid image: ")


def test_odd_npix(vla_ms, tmp_path, capsys):
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "33"])
    _one_line_error(capsys, code, "--npix must be even")

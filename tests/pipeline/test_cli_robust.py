"""``clgrid image`` on imperfect data and interrupted runs (issue 36): bad
rows are data, the automatic cell ignores flagged and outlying rows, Ctrl-C
and SIGTERM end in one line and leave nothing behind, and what is printed
says what it means."""

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("casacore")
pytest.importorskip("astropy")
from astropy.io import fits  # noqa: E402
from casacore.tables import table  # noqa: E402

import clgrid  # noqa: E402
from clgrid.cli import main  # noqa: E402
from clgrid.io.ms import MeasurementSet  # noqa: E402
from clgrid.pipeline.run import auto_cell_rad  # noqa: E402
from vla_ms import copy_ms as _copy, device_spec as _device_spec, sim_ms, vla_ms  # noqa: E402,F401

CLGRID_ROOT = Path(clgrid.__file__).resolve().parent.parent
C = 299_792_458.0
ARCSEC_PER_RAD = 180.0 / np.pi * 3600.0
#: The bundled set: 1360 rows of 64 channels (27 antennas, D configuration).
N_ROWS, N_CHAN = 1360, 64




def _set_row(path: Path, row: int, uvw=None, flag_row=False, flag_all=False) -> None:
    """Give ``row`` of the set at ``path`` a uvw, FLAG_ROW or every FLAG."""
    with table(str(path), readonly=False, ack=False) as main_table:
        if uvw is not None:
            column = main_table.getcol("UVW")
            column[row] = uvw
            main_table.putcol("UVW", column)
        if flag_row:
            main_table.putcell("FLAG_ROW", row, True)
        if flag_all:
            main_table.putcell("FLAG", row, np.ones_like(main_table.getcell("FLAG", row)))


def _reference_cell(path: Path, leave_out=()) -> float:
    """4 pixels across the beam from the rows not in ``leave_out``, plainly."""
    with table(str(path), ack=False) as main_table:
        uvw = np.delete(main_table.getcol("UVW"), list(leave_out), axis=0)
        freq = table(main_table.getkeyword("SPECTRAL_WINDOW"), ack=False).getcell("CHAN_FREQ", 0)
    return 1.0 / (4 * np.max(np.abs(uvw[:, :2])) * np.max(freq) / C)


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


# -- 1. bad rows are data ---------------------------------------------------------

@pytest.mark.parametrize("bad,calibrate", [(np.nan, "none"), (np.inf, "none"),
                                           (np.nan, "point")])
def test_a_non_finite_uvw_row_is_dropped_and_counted(cl_env, vla_ms, tmp_path, capsys, bad,
                                                       calibrate):
    """One NaN or Inf uvw row (automatic cell): imaged without it, one warning
    line naming the count, the cell the same as without the row."""
    copy = _copy(vla_ms, tmp_path)
    _set_row(copy, 17, uvw=[bad, 10.0, bad])
    output = tmp_path / "x.fits"
    code = main(["image", str(copy), str(output), "--npix", "64", "--calibrate", calibrate,
                 "--device", _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = _error_lines(captured.err)
    assert len(lines) == 1 and "non-finite uvw" in lines[0], captured.err
    assert f"1 of {N_ROWS} rows ({N_CHAN} visibilities)" in lines[0]
    assert "1 row with non-finite uvw" in captured.out
    image, header = fits.getdata(output), fits.getheader(output)
    assert np.all(np.isfinite(image)) and image.max() > 0
    assert header["NBADUVW"] == N_CHAN and header["NVIS"] == (N_ROWS - 1) * N_CHAN
    cell = np.radians(header["CDELT2"])
    assert cell == pytest.approx(_reference_cell(vla_ms, leave_out=[17]), rel=1e-12)


def test_a_non_finite_row_images_like_a_flagged_one(cl_env, vla_ms, tmp_path):
    """The library: an image without the NaN row equals one with that row
    flagged; the RuntimeWarning names the count, as vis2dirty's does."""
    from clgrid.pipeline.run import image_measurement_set
    nan_copy, flagged_copy = _copy(vla_ms, tmp_path, "nan.ms"), _copy(vla_ms, tmp_path, "f.ms")
    _set_row(nan_copy, 5, uvw=[np.nan, np.nan, np.nan])
    _set_row(flagged_copy, 5, flag_row=True)
    common = dict(npix_x=64, pixsize_x=1.0 / ARCSEC_PER_RAD, context=cl_env.queue)
    with pytest.warns(RuntimeWarning, match=r"1 of 1360 rows \(64 visibilities\) have "
                                             r"non-finite uvw"):
        dropped = image_measurement_set(nan_copy, **common)
    flagged = image_measurement_set(flagged_copy, **common)
    assert np.array_equal(dropped.image, flagged.image)
    assert (dropped.n_bad_uvw_rows, dropped.n_bad_uvw, dropped.n_flagged) == (1, N_CHAN, 0)


# -- 2. the automatic cell --------------------------------------------------------

def test_the_example_cell_is_unchanged(vla_ms):
    with MeasurementSet(vla_ms) as ms, warnings.catch_warnings():
        warnings.simplefilter("error")
        cell = auto_cell_rad(ms)
    assert cell == pytest.approx(_reference_cell(vla_ms), rel=1e-12)
    assert round(cell * ARCSEC_PER_RAD, 3) == 0.421


@pytest.mark.parametrize("flag", ["FLAG_ROW", "FLAG", "none"])
def test_the_automatic_cell_ignores_flagged_and_outlying_rows(vla_ms, tmp_path, flag):
    """A 3e7 m row: flagged it is ignored silently; unflagged it is left out
    of the cell choice with one warning giving count and maximum."""
    copy = _copy(vla_ms, tmp_path)
    _set_row(copy, 3, uvw=[3e7, -2e4, 10.0], flag_row=flag == "FLAG_ROW",
             flag_all=flag == "FLAG")
    with MeasurementSet(copy) as ms, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cell = auto_cell_rad(ms)
    assert cell == pytest.approx(_reference_cell(vla_ms, leave_out=[3]), rel=1e-12)
    messages = [str(w.message) for w in caught]
    if flag != "none":
        assert messages == []
    else:
        assert len(messages) == 1 and "\n" not in messages[0]
        assert "1 row" in messages[0] and "3e+07 m" in messages[0] and "--cell" in messages[0]


def test_an_outlying_row_does_not_blank_the_cli_image(cl_env, vla_ms, tmp_path, capsys):
    copy = _copy(vla_ms, tmp_path)
    _set_row(copy, 3, uvw=[3e7, 0.0, 0.0])
    output = tmp_path / "x.fits"
    code = main(["image", str(copy), str(output), "--npix", "64", "--calibrate", "point",
                 "--device", _device_spec(cl_env)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = _error_lines(captured.err)
    assert len(lines) == 1 and "--cell" in lines[0] and "3e+07 m" in lines[0], captured.err
    header = fits.getheader(output)
    assert round(header["CDELT2"] * 3600, 3) == 0.421
    image = fits.getdata(output)[0, 0]
    peak = np.unravel_index(np.argmax(image), image.shape)
    assert abs(peak[0] - 32) <= 1 and abs(peak[1] - 32) <= 1  # the calibrator, centred


# -- 3. interrupts and outputs ----------------------------------------------------

def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".ms"))


def test_an_interrupt_while_writing_leaves_nothing(cl_env, vla_ms, tmp_path, capsys,
                                                   monkeypatch):
    """Ctrl-C while the PNG is written (after both FITS files): exit 130,
    one line, no output or temporary file; the rerun needs no --overwrite."""
    import clgrid.pipeline.image_command as image_command
    real_png = image_command.write_png

    def interrupted_png(path, result, beam=None):
        Path(path).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt
    monkeypatch.setattr(image_command, "write_png", interrupted_png)
    args = ["image", str(vla_ms), str(tmp_path / "c.fits"), "--npix", "64", "--psf", "--png",
            "--cell", "0.8", "--quiet", "--device", _device_spec(cl_env)]
    assert main(args) == 130
    lines = _error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert _leftovers(tmp_path) == []
    monkeypatch.setattr(image_command, "write_png", real_png)
    assert main(args) == 0, capsys.readouterr().err
    assert _leftovers(tmp_path) == ["c-psf.fits", "c.fits", "c.png"]


_SIGNALLED_RUN = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's post-mortem
# Ctrl-C as at a terminal: a runner started in the background (nohup, `cmd &`
# in a script) hands its children SIGINT ignored, and Python then keeps it so
signal.signal(signal.SIGINT, signal.default_int_handler)
import clgrid.pipeline.run as run
from clgrid.cli import main
real = run._grid_chunks
def slow(*args, **kwargs):
    sums = real(*args, **kwargs)
    print("gridded", flush=True)
    time.sleep(120)
    return sums
run._grid_chunks = slow
sys.exit(main(sys.argv[1:]))
"""


#: How long a signalled run may take to end (it ends in about a second).
_SIGNAL_EXIT_S = 60


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_gridding_ends_in_one_line(cl_env, vla_ms, tmp_path, signum, code):
    """A real process: SIGINT/SIGTERM after gridding has started gives exit
    130/143, one line on stderr, no output; the rerun needs no --overwrite."""
    env = dict(os.environ, PYTHONPATH=str(CLGRID_ROOT))
    argv = ["image", str(vla_ms), str(tmp_path / "c.fits"), "--npix", "64", "--cell", "0.8",
            "--psf", "--png", "--device", _device_spec(cl_env)]
    process = subprocess.Popen([sys.executable, "-c", _SIGNALLED_RUN, *argv], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "gridded"
        process.send_signal(signum)
        _, err = process.communicate(timeout=_SIGNAL_EXIT_S)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)   # every thread's stack to stderr
        time.sleep(2)
        process.kill()
        pytest.fail(f"still running {_SIGNAL_EXIT_S} s after the signal; its threads:\n"
                    f"{process.communicate()[1]}")
    finally:
        process.kill()
    assert process.returncode == code, err
    lines = _error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("clgrid image: "), err
    assert "Traceback" not in err
    assert _leftovers(tmp_path) == []
    assert main(argv + ["--quiet"]) == 0


_HANDLER_CHECK = """
import ctypes, signal, sys
class Action(ctypes.Structure):   # glibc's struct sigaction: the handler first
    _fields_ = [("handler", ctypes.c_void_p), ("rest", ctypes.c_byte * 256)]
def c_handler(signum):
    action = Action()
    assert ctypes.CDLL(None).sigaction(signum, None, ctypes.byref(action)) == 0
    return action.handler
python_own = c_handler(signal.SIGINT)
import clgrid.pipeline.run as run
from clgrid.cli import main
real, after_gridding = run._grid_chunks, []
def gridding(*args, **kwargs):
    sums = real(*args, **kwargs)
    after_gridding.append(c_handler(signal.SIGINT) == python_own)
    return sums
run._grid_chunks = gridding
code = main(sys.argv[1:])
print(code, *after_gridding)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's sigaction")
def test_ctrl_c_reaches_python_after_a_run(cl_env, vla_ms, tmp_path):
    """The OpenCL runtimes put their own C handler on SIGINT when a context
    is made (LLVM's); the command takes Python's back once it has gridded,
    so a Ctrl-C from then on is Python's to act on."""
    argv = ["image", str(vla_ms), str(tmp_path / "c.fits"), "--npix", "32", "--cell", "0.8",
            "--quiet", "--device", _device_spec(cl_env)]
    done = subprocess.run([sys.executable, "-c", _HANDLER_CHECK, *argv], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(CLGRID_ROOT)))
    assert done.stdout.split() == ["0", "True"], done.stdout + done.stderr


# -- 4.-6. what is printed ----------------------------------------------------------

def test_the_peak_pixel_says_its_order(cl_env, sim_ms, tmp_path, capsys):
    """The simulated source: the printed FITS (x, y), 1-based, is the FITS
    file's brightest pixel."""
    output = tmp_path / "sim.fits"
    code = main(["image", str(sim_ms), str(output), "--npix", "128", "--cell", "0.5",
                 "--device", _device_spec(cl_env)])
    out = capsys.readouterr().out
    assert code == 0
    data = fits.getdata(output)[0, 0]
    y, x = np.unravel_index(np.argmax(data), data.shape)
    assert f"at FITS pixel (x, y) = ({x + 1}, {y + 1}) (1-based)" in out, out


def test_no_progress_bar_when_stderr_is_not_a_terminal(cl_env, vla_ms, tmp_path, capsys):
    code = main(["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "32", "--cell", "0.8",
                 "--device", _device_spec(cl_env)])
    err = capsys.readouterr().err
    assert code == 0 and err == "", err


def test_errors_name_the_users_path_not_a_temporary_folder(cl_env, tmp_path, capsys):
    code = main(["image", "--example", str(tmp_path / "x.fits"), "--column", "MODEL_DATA",
                 "--npix", "32", "--device", _device_spec(cl_env)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "clgrid-example-" not in err and "the bundled example" in err, err
    assert "no column 'MODEL_DATA'" in err


# -- 7. unexpected failures ---------------------------------------------------------

@pytest.mark.parametrize("error,message", [
    (KeyError("PYOPENCL_CACHE_FAILURE_FATAL"), "PYOPENCL_NO_CACHE=1"),
    (ZeroDivisionError("float division by zero"), "ZeroDivisionError: float division"),
])
def test_an_unexpected_failure_is_one_line(cl_env, vla_ms, tmp_path, capsys, monkeypatch,
                                           error, message):
    import clgrid.pipeline.image_command as image_command

    def failing(args, ms_path, context, devices):
        raise error
    monkeypatch.setattr(image_command, "_image", failing)
    argv = ["image", str(vla_ms), str(tmp_path / "x.fits"), "--npix", "32", "--quiet",
            "--device", _device_spec(cl_env)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clgrid image: ") and message in err, err
    assert main(argv + ["--verbose"]) == 1
    assert "Traceback" in capsys.readouterr().err

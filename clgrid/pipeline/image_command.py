"""``clgrid image``: Measurement Set in, FITS (and PNG) out.

Arguments, output paths, the memory check, device choice, the example
data set, the FITS/PNG writing (all renamed into place when complete) and
the one-line reports of one subcommand; the imaging itself is
:func:`clgrid.pipeline.run.image_measurement_set`.  About 500 lines: the
parts are each short and only this command uses them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import tarfile
import tempfile
import threading
import traceback
import warnings
from importlib import resources
from pathlib import Path
from typing import Iterator

import numpy as np

EXAMPLE_TARBALL = "vla_day2_TDEM0003_10s_norx_1src_1spw.ms.tar.gz"
ARCSEC_PER_RAD = 180.0 / np.pi * 3600.0


class CommandError(Exception):
    """Ends the command with one line on stderr and a non-zero exit."""


def add_parser(commands) -> None:
    """Register the ``image`` subcommand on ``commands`` (argparse subparsers)."""
    parser = commands.add_parser(
        "image", help="image a Measurement Set's Stokes I into a FITS file",
        description="Dirty image (Jy/beam, PSF peak 1) of a Measurement Set's Stokes I.")
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="INPUT.ms OUTPUT.fits (with --example: OUTPUT.fits)")
    parser.add_argument("--example", action="store_true",
                        help="image the bundled VLA observation instead of INPUT.ms")
    parser.add_argument("--npix", type=int, default=512, help="image size in pixels (even)")
    parser.add_argument("--cell", type=float, default=None,
                        help="pixel size in arcsec (default: 4 pixels across the beam)")
    parser.add_argument("--weighting", default="natural",
                        choices=["natural", "uniform", "briggs"])
    parser.add_argument("--robust", type=float, default=0.0, help="Briggs robustness R")
    parser.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                        help="bitwise-identical images run after run (default on; "
                             "--no-deterministic builds the uniform/Briggs weight histogram "
                             "with float atomics)")
    parser.add_argument("--epsilon", type=float, default=1e-4,
                        help="requested accuracy against a direct Fourier transform")
    parser.add_argument("--wgridding", action=argparse.BooleanOptionalAction, default=True,
                        help="treat the w term (default on)")
    parser.add_argument("--device", default=None,
                        help="OpenCL device: 'platform:device' or a name (default: best)")
    parser.add_argument("--devices", default=None,
                        help="grid on several OpenCL devices: comma list of specs, or 'all'")
    parser.add_argument("--dask-scheduler", default=None, metavar="ADDRESS",
                        help="grid on the Dask cluster at ADDRESS (tcp://host:8786)")
    parser.add_argument("--psf", action="store_true", help="also write OUTPUT-psf.fits")
    parser.add_argument("--png", nargs="?", const="", default=None, metavar="PATH",
                        help="quick-look PNG (default path: OUTPUT with .png)")
    parser.add_argument("--column", default=None,
                        help="data column (default CORRECTED_DATA where present, else DATA)")
    parser.add_argument("--calibrate", default=None, choices=["none", "point"],
                        help="'point': solve and apply antenna gains and delays against a "
                             "point source at the phase centre (for a calibrator; default "
                             "none, point with --example)")
    parser.add_argument("--channels", default=None,
                        help="channels: start:stop[:step] or a comma list")
    parser.add_argument("--spw", default=None, help="spectral window(s), comma list")
    parser.add_argument("--field", type=int, default=0, help="FIELD_ID (default 0)")
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="rows per chunk")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output files (default: refuse)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.add_argument("--verbose", action="store_true",
                        help="show OpenCL compiler output and full error texts")
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _compiler_output(verbose: bool):
    """``PYOPENCL_COMPILER_OUTPUT=1`` for this run only with ``--verbose``:
    left set, every later build of the process (a library caller's, a test
    run's) would print its driver's whole log as a warning."""
    before = os.environ.get("PYOPENCL_COMPILER_OUTPUT")
    if verbose and before is None:
        os.environ["PYOPENCL_COMPILER_OUTPUT"] = "1"
    try:
        yield
    finally:
        if verbose and before is None:
            os.environ.pop("PYOPENCL_COMPILER_OUTPUT", None)


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """``clgrid image``'s arguments, typed: read once from argparse's
    Namespace (:meth:`of`) and handed to the command's parts by name."""

    paths: tuple[str, ...]
    example: bool
    npix: int
    cell: float | None
    weighting: str
    robust: float
    deterministic: bool
    epsilon: float
    wgridding: bool
    device: str | None
    devices: str | None
    dask_scheduler: str | None
    psf: bool
    png: str | None
    column: str | None
    calibrate: str | None
    channels: str | None
    spw: str | None
    field: int
    chunk_rows: int
    overwrite: bool
    quiet: bool
    verbose: bool

    @classmethod
    def of(cls, args: argparse.Namespace) -> "ImageOptions":
        """The options of parsed ``args`` (``paths`` as a tuple)."""
        values = {field.name: getattr(args, field.name) for field in dataclasses.fields(cls)}
        return cls(**{**values, "paths": tuple(values["paths"])})


def run(args: argparse.Namespace) -> int:
    """Entry point of ``clgrid image``: one line on stderr and 2 on errors,
    1 on a failure that is not the user's (``--verbose`` adds its traceback).

    OpenCL compilers' chatter (pyopencl's ``CompilerWarning``) is hidden
    unless ``--verbose``, which also shows it in full; every other warning
    is one line, ``warning: ...``.
    """
    import pyopencl as cl
    options = ImageOptions.of(args)
    with warnings.catch_warnings(), _compiler_output(options.verbose):
        if not options.verbose:
            warnings.simplefilter("ignore", cl.CompilerWarning)
            warnings.showwarning = _print_warning
        try:
            return _run(options)
        except CommandError as error:
            print(f"clgrid image: {error}", file=sys.stderr)
        except cl.Error as error:  # a driver failure, not the user's: say all
            failed_build = _is_build_failure(error)
            what = ("a kernel failed to build; the compiler's log follows" if failed_build
                    else _one_line(error))
            print(f"clgrid image: OpenCL error: {what}", file=sys.stderr)
            if options.verbose or failed_build:
                print(str(error), file=sys.stderr)
        except MemoryError:
            print("clgrid image: out of host memory: use a smaller --npix or --chunk-rows",
                  file=sys.stderr)
        except Exception as error:  # noqa: BLE001 - not the user's: say it in one line
            print(f"clgrid image: {_unexpected(error)}", file=sys.stderr)
            if options.verbose:
                traceback.print_exception(error, file=sys.stderr)
            return 1
        return 2


def _print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` of the command: the message's first line only
    (no source line, no location: they mean nothing to a user)."""
    print(f"warning: {_one_line(message)}", file=sys.stderr)


def _unexpected(error: BaseException) -> str:
    """One line for a failure that is not the user's, with the way out where
    one is known: a damaged kernel cache of pyopencl (its compiler cache, or
    the pytools database of its invokers) fails in ways of its own."""
    what = f"{type(error).__name__}: {_one_line(error)}"
    files = [frame.filename for frame in traceback.extract_tb(error.__traceback__)]
    cache_code = (os.path.join("pyopencl", "cache.py"),
                  os.path.join("pytools", "persistent_dict.py"))
    if "PYOPENCL_CACHE" in str(error) or any(f.endswith(cache_code) for f in files):
        caches = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
        return (f"pyopencl's kernel cache failed ({what}), probably a damaged cache file: "
                f"run again with PYOPENCL_NO_CACHE=1, or delete {caches}/pyopencl and "
                f"{caches}/pytools")
    return f"internal error ({what}); --verbose shows where"


def _is_build_failure(error) -> bool:
    """A kernel that did not compile: its build log is worth showing."""
    code = getattr(error, "code", None)
    return code == -11 or "BuildProgram" in str(getattr(error, "routine", ""))


def _run(options: ImageOptions) -> int:
    from ..io.ms import MSError
    input_ms, output = _paths(options)
    outputs = _output_paths(options, output)
    _check_outputs(outputs, options.overwrite)
    with _example_ms() if options.example else contextlib.nullcontext(input_ms) as ms_path:
        if not os.path.exists(ms_path):
            raise CommandError(f"{ms_path}: no such file or directory")
        shown = f"the bundled example {Path(ms_path).name}" if options.example else ms_path
        context = _context(options.device)
        devices = _devices(options.devices)
        _check_memory(options, context, devices)
        try:
            result = _image(options, ms_path, context, devices)
        except (MSError, ValueError, TypeError) as error:
            raise CommandError(_as_given(_one_line(error), ms_path, shown)) from None
        except RuntimeError as error:  # a damaged table casacore trips on elsewhere
            raise CommandError(f"{shown}: {_as_given(_one_line(error), ms_path, shown)}"
                               ) from None
    try:
        _write_outputs(options, result, outputs)
    except OSError as error:
        raise CommandError(f"cannot write output: {_one_line(error)}") from None
    if not options.quiet:
        _summary(options, result, output)
    elif result.sum_weights == 0:
        _warn_nothing_usable(result)
    return 0


def _paths(options: ImageOptions) -> tuple[str | None, Path]:
    expected = 1 if options.example else 2
    if len(options.paths) != expected:
        usage = "OUTPUT.fits" if options.example else "INPUT.ms OUTPUT.fits"
        raise CommandError(f"expected {usage}, got {len(options.paths)} path(s)")
    return (None if options.example else options.paths[0]), Path(options.paths[-1])


def _as_given(message: str, ms_path: str, shown: str) -> str:
    """``message`` naming the input as the user gave it (``shown``), not the
    temporary folder the bundled example was unpacked into."""
    for path in dict.fromkeys((ms_path, os.path.realpath(ms_path))):
        message = message.replace(path, shown)
    return message


def _output_paths(options: ImageOptions, output: Path) -> dict[str, Path]:
    """Every file the command will write, by kind ('image', 'psf', 'png')."""
    paths = {"image": output}
    if options.psf:
        paths["psf"] = _sibling(output, "-psf.fits")
    if options.png is not None:
        paths["png"] = Path(options.png) if options.png else _sibling(output, ".png")
    return paths


def _check_outputs(paths: dict[str, Path], overwrite: bool) -> None:
    """Refuse before any work: existing files (unless ``overwrite``), missing
    or unwritable folders."""
    for path in paths.values():
        folder = path.parent if str(path.parent) else Path(".")
        if path.is_dir():
            raise CommandError(f"{path}: is a folder, not an output file")
        if path.exists() and not overwrite:
            raise CommandError(f"{path} exists; use --overwrite to replace it")
        if not folder.exists():
            raise CommandError(f"{folder}: output folder does not exist")
        if not folder.is_dir():
            raise CommandError(f"{folder}: not a folder, cannot write {path.name} there")
        try:  # os.access says yes to root even on read-only file systems
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as error:
            raise CommandError(f"{folder}: cannot write there "
                               f"({error.strerror or _one_line(error)})") from None


def _context(device_spec):
    from ..device import create_context
    try:
        return create_context(device_spec)
    except (LookupError, RuntimeError) as error:
        raise CommandError(_one_line(error)) from None


def calibration_of(options: ImageOptions) -> str | None:
    """``--calibrate``, defaulting to 'point' for the bundled calibrator."""
    choice = options.calibrate or ("point" if options.example else "none")
    return None if choice == "none" else choice


def _image(options: ImageOptions, ms_path: str, context, devices: list | None):
    from .run import image_measurement_set
    cell_rad = None if options.cell is None else options.cell / ARCSEC_PER_RAD
    if cell_rad is not None and not (np.isfinite(cell_rad) and cell_rad > 0):
        raise CommandError(f"--cell must be a positive number of arcsec, got {options.cell}")
    if not 0 < options.epsilon < 1:
        raise CommandError(f"--epsilon must be in (0, 1), got {options.epsilon}")
    return image_measurement_set(
        ms_path, npix_x=options.npix, pixsize_x=cell_rad, weighting=options.weighting,
        robust=options.robust, epsilon=options.epsilon, do_wgridding=options.wgridding,
        column=options.column or "auto", channels=options.channels, spw=options.spw,
        field=options.field, chunk_rows=options.chunk_rows,
        make_psf=options.psf or options.png is not None, context=context,
        progress=not options.quiet, devices=devices, dask_scheduler=options.dask_scheduler,
        calibrate=calibration_of(options), deterministic=options.deterministic)


def memory_needed(npix_x: int, npix_y: int, psf: bool) -> tuple[int, int, int]:
    """Lower bounds of the bytes an image needs: (one device allocation: the
    uv grid, padded at least 1.1 times, complex64; all device memory: grid and
    float32 image; host memory: float64 sums of image, PSF and one chunk's
    result)."""
    from ..core.plan import good_grid_size
    grid = good_grid_size(math.ceil(1.1 * npix_x)) * good_grid_size(math.ceil(1.1 * npix_y)) * 8
    device = grid + npix_x * npix_y * 4
    host = npix_x * npix_y * 8 * (3 if psf else 2)
    return grid, device, host


def _check_memory(options: ImageOptions, context, devices: list | None) -> None:
    """Refuse an image the device (``context``'s, or each of ``devices``) or
    the host cannot hold, before allocating."""
    from ..core.plan import check_npix
    from .calibrate import available_host_bytes
    try:
        check_npix(options.npix, options.npix)
    except ValueError:
        raise CommandError(f"--npix must be even and >= 2, got {options.npix}") from None
    grid, device_bytes, host = memory_needed(options.npix, options.npix,
                                             options.psf or options.png is not None)
    profiles = [] if options.dask_scheduler else _device_profiles(context, devices)
    for profile in profiles:
        where = f"{profile.device_name!r}"
        if grid > profile.max_alloc_bytes:
            raise CommandError(
                f"a {options.npix}x{options.npix} image needs a uv grid of at least {_bytes(grid)} "
                f"in one allocation; {where} allows {_bytes(profile.max_alloc_bytes)} per "
                f"allocation ({_bytes(profile.global_mem_bytes)} in all): use a smaller --npix")
        if device_bytes > profile.global_mem_bytes:
            raise CommandError(
                f"a {options.npix}x{options.npix} image needs at least {_bytes(device_bytes)} of "
                f"device memory; {where} has {_bytes(profile.global_mem_bytes)}: "
                f"use a smaller --npix")
    available = available_host_bytes()
    if available and host > available:
        raise CommandError(f"a {options.npix}x{options.npix} image needs at least "
                           f"{_bytes(host)} of host memory; {_bytes(available)} are "
                           f"available: use a smaller --npix")


def _bytes(count: int) -> str:
    return f"{count} bytes ({count / 2**30:.1f} GiB)"


def _device_profiles(context, devices: list | None) -> list:
    """Profiles of the devices the run grids on: ``devices``, else ``context``'s."""
    from ..device.profiles import DeviceProfile
    chosen = devices if devices is not None else [context.devices[0]]
    return [DeviceProfile.from_device(device) for device in chosen]


def _devices(spec: str | None) -> list | None:
    """``--devices`` (None, 'all' or a comma list of specs) as the devices the
    run grids on (:func:`clgrid.scaleout.partition.resolve_devices`, the
    run's own rule), resolved once."""
    from ..scaleout.partition import resolve_devices
    if not spec:
        return None
    specs = "all" if spec.strip() == "all" else [p.strip() for p in spec.split(",") if p.strip()]
    try:
        return resolve_devices(specs)
    except (LookupError, RuntimeError, ValueError) as error:
        raise CommandError(_one_line(error)) from None


def _header_keywords(result) -> dict:
    from ..io.fitsio import ms_time_to_iso
    keywords = {"OBJECT": result.field_name, "TELESCOP": result.telescope,
                "OBSRA": float(np.degrees(result.phase_centre_rad[0])) % 360.0,
                "OBSDEC": float(np.degrees(result.phase_centre_rad[1])),
                "WEIGHTNG": result.weighting.upper(), "EPSILON": result.epsilon,
                "WGRIDDNG": result.do_wgridding, "NVIS": result.n_used,
                "NFLAGGED": result.n_flagged, "NBADUVW": result.n_bad_uvw,
                "NOFFGRID": result.n_outside,
                "SUMWT": result.sum_weights, "GRIDDER": result.backend,
                "NCHAN": int(result.freq_hz.size)}
    if result.weighting == "briggs":
        keywords["ROBUST"] = result.robust
    if result.time_range_s[0] > 0:
        keywords["DATE-OBS"] = ms_time_to_iso(result.time_range_s[0])
        keywords["MJD-OBS"] = result.time_range_s[0] / 86400.0  # astropy's WCS wants both
    return keywords


def _history(options: ImageOptions, result) -> list[str]:
    """What was done, for the FITS HISTORY cards."""
    lines = [f"clgrid image: Stokes I from column {result.column}, {result.n_rows} rows, "
             f"{result.n_used} samples used, {result.n_flagged} flagged"
             + _bad_uvw_text(result),
             f"{result.weighting} weighting, epsilon {result.epsilon:g}, w term "
             f"{'on' if result.do_wgridding else 'off'}, gridder {result.backend}"]
    lines += result.history or ["no calibration applied by clgrid"]
    if result.sum_weights == 0:
        lines.append("no usable visibility: the image is zero")
    return lines


def _write_outputs(options: ImageOptions, result, outputs: dict[str, Path]) -> None:
    """Every output written under a temporary name beside it, then all renamed
    at once: an interrupted or failed run leaves no partial file (and none
    that makes the next run ask for --overwrite)."""
    from ..io.fitsio import temporary_path_beside
    staged = {kind: temporary_path_beside(path) for kind, path in outputs.items()}
    try:
        _write_files(options, result, staged)
        if not options.overwrite:  # one may have appeared while we imaged
            _check_outputs(outputs, overwrite=False)
        with _signals_held():
            for kind, path in outputs.items():
                os.replace(staged[kind], path)
    finally:
        for temporary in staged.values():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then act as usual: the
    renames of one run happen all or none."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    wanted = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if held:
            signal.raise_signal(held[0])


def _write_files(options: ImageOptions, result, outputs: dict[str, Path]) -> None:
    from ..io.fitsio import write_image
    from .run import fit_beam
    freq = result.freq_hz
    keywords = _header_keywords(result)
    beam = None if result.psf is None else fit_beam(result.psf, result.pixsize_x,
                                                    result.pixsize_y)
    if beam is not None:
        keywords.update(BMAJ=float(np.degrees(beam.major)), BMIN=float(np.degrees(beam.minor)),
                        BPA=float(np.degrees(beam.position_angle)))
    common = dict(pixsize_x=result.pixsize_x, pixsize_y=result.pixsize_y,
                  phase_centre_rad=result.phase_centre_rad, freq_hz=float(np.mean(freq)),
                  bandwidth_hz=float(np.ptp(freq)) or None, overwrite=True,
                  history=_history(options, result), **keywords)
    write_image(outputs["image"], result.image, **common)
    if "psf" in outputs:
        write_image(outputs["psf"], result.psf, bunit="", **common)
    if "png" in outputs:
        write_png(outputs["png"], result, beam)


def _sibling(output: Path, suffix: str) -> Path:
    stem = output.name[:-5] if output.name.lower().endswith(".fits") else output.name
    return output.with_name(stem + suffix)


def write_png(path: Path, result, beam=None) -> None:
    """Quick-look picture: RA increasing to the left, offsets in arcsec from
    the phase centre, the fitted beam as an ellipse in the lower left."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError("--png needs matplotlib: pip install 'clgrid[plot]'") from None
    from ..io.fitsio import image_to_fits_data
    npix_x, npix_y = result.image.shape
    half_x = npix_x / 2 * result.pixsize_x * ARCSEC_PER_RAD
    half_y = npix_y / 2 * result.pixsize_y * ARCSEC_PER_RAD
    figure, axes = plt.subplots(figsize=(6, 5))
    shown = axes.imshow(image_to_fits_data(result.image), origin="lower", cmap="inferno",
                        extent=(half_x, -half_x, -half_y, half_y))
    figure.colorbar(shown, ax=axes, label="Jy/beam")
    if beam is not None:
        _draw_beam(axes, beam, half_x, half_y)
    axes.set_xlabel("RA offset (arcsec, east left)")
    axes.set_ylabel("Dec offset (arcsec)")
    calibrated = ", calibrated on a point model" if result.history else ""
    axes.set_title(f"{result.field_name} Stokes I, {result.weighting} weighting{calibrated}",
                   fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100, format="png")
    plt.close(figure)


def _draw_beam(axes, beam, half_x: float, half_y: float) -> None:
    from matplotlib.patches import Ellipse
    major, minor = beam.major * ARCSEC_PER_RAD, beam.minor * ARCSEC_PER_RAD
    margin = 0.6 * major + 0.04 * 2 * half_x
    # Data x is the east offset: the major axis (east, north) = (sin PA, cos PA)
    # lies at 90 deg - PA from the x axis.
    axes.add_patch(Ellipse((half_x - margin, -half_y + margin), width=major, height=minor,
                           angle=90.0 - np.degrees(beam.position_angle),
                           facecolor="none", edgecolor="white", linewidth=1.2))


def _summary(options: ImageOptions, result, output: Path) -> None:
    from ..io.fitsio import fits_pixel
    peak = tuple(int(p) for p in np.unravel_index(np.argmax(result.image), result.image.shape))
    centre = (result.image.shape[0] // 2, result.image.shape[1] // 2)
    offset = ((peak[0] - centre[0]) * result.pixsize_x * ARCSEC_PER_RAD,
              (peak[1] - centre[1]) * result.pixsize_y * ARCSEC_PER_RAD)
    calibration = calibration_of(options) or "none"
    print(f"read {result.n_rows} rows of column {result.column}; calibration: {calibration}; "
          f"{result.n_used} samples used, {result.n_flagged} flagged{_bad_uvw_text(result)}, "
          f"{result.n_outside} off the grid; gridder: {result.backend}")
    # FITS order, 1-based: what a FITS viewer (ds9, CARTA) shows for the file
    print(f"wrote {output}: {result.image.shape[0]}x{result.image.shape[1]} pixels of "
          f"{result.pixsize_x * ARCSEC_PER_RAD:.3g} arcsec, peak {result.image[peak]:.4g} "
          f"Jy/beam at FITS pixel (x, y) = {fits_pixel(*peak, result.image.shape[0])} "
          f"(1-based) ({offset[0]:+.2f}\", {offset[1]:+.2f}\" from the phase centre), "
          f"rms {np.std(result.image):.3g}")
    if result.sum_weights == 0:
        _warn_nothing_usable(result)
    # Rows left out of the automatic cell are off the grid by design: their
    # warning said so, and a smaller --cell is not the cure for a bad uvw.
    if result.n_outside and not (options.cell is None and result.n_uv_outliers):
        print(f"warning: {result.n_outside} samples lie beyond the uv range of this cell "
              f"size and were left out; use a smaller --cell", file=sys.stderr)


def _bad_uvw_text(result) -> str:
    """', N rows with non-finite uvw (M samples)' where there are any."""
    rows = result.n_bad_uvw_rows
    if not rows:
        return ""
    return f", {rows} row{'s' if rows > 1 else ''} with non-finite uvw ({result.n_bad_uvw} samples)"


def _warn_nothing_usable(result) -> None:
    print(f"warning: no usable visibility ({result.n_rows} rows, {result.n_samples} samples, "
          f"{result.n_flagged} flagged, {result.n_outside} off the grid): the image is zero",
          file=sys.stderr)


@contextlib.contextmanager
def _example_ms():
    """Unpack the bundled VLA Measurement Set into a temporary folder."""
    tarball = resources.files("clgrid").joinpath("data", EXAMPLE_TARBALL)
    if not tarball.is_file():
        raise CommandError(f"the bundled example {EXAMPLE_TARBALL} is missing from this install")
    with tempfile.TemporaryDirectory(prefix="clgrid-example-") as folder:
        with resources.as_file(tarball) as path, tarfile.open(path) as archive:
            _safe_extract(archive, folder)
        found = sorted(Path(folder).glob("*.ms"))
        if not found:
            raise CommandError(f"{EXAMPLE_TARBALL} holds no .ms folder")
        yield str(found[0])


def _safe_extract(archive: tarfile.TarFile, folder: str) -> None:
    if hasattr(tarfile, "data_filter"):
        archive.extractall(folder, filter="data")
        return
    root = os.path.realpath(folder)
    for member in archive.getmembers():  # pragma: no cover - Python < 3.11.4
        target = os.path.realpath(os.path.join(folder, member.name))
        if not target.startswith(root + os.sep):
            raise CommandError(f"unsafe path in archive: {member.name}")
    archive.extractall(folder)


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


__all__ = ["ImageOptions", "add_parser", "run", "write_png"]

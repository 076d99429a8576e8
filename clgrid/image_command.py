"""``clgrid image``: Measurement Set in, FITS (and PNG) out."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tarfile
import tempfile
from importlib import resources
from pathlib import Path

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
    parser.add_argument("--column", default="DATA", help="data column (default DATA)")
    parser.add_argument("--channels", default=None,
                        help="channels: start:stop[:step] or a comma list")
    parser.add_argument("--spw", default=None, help="spectral window(s), comma list")
    parser.add_argument("--field", type=int, default=0, help="FIELD_ID (default 0)")
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="rows per chunk")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``clgrid image``: one line on stderr and 2 on errors."""
    try:
        return _run(args)
    except CommandError as error:
        print(f"clgrid image: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from .ms import MSError
    input_ms, output = _paths(args)
    with _example_ms() if args.example else contextlib.nullcontext(input_ms) as ms_path:
        if not os.path.exists(ms_path):
            raise CommandError(f"{ms_path}: no such file or directory")
        context = _context(args.device)
        try:
            result = _image(args, ms_path, context)
        except (MSError, ValueError, TypeError) as error:
            raise CommandError(_one_line(error)) from None
    _write_outputs(args, result, output)
    if not args.quiet:
        _summary(result, output)
    return 0


def _paths(args: argparse.Namespace) -> tuple[str | None, Path]:
    expected = 1 if args.example else 2
    if len(args.paths) != expected:
        usage = "OUTPUT.fits" if args.example else "INPUT.ms OUTPUT.fits"
        raise CommandError(f"expected {usage}, got {len(args.paths)} path(s)")
    output = Path(args.paths[-1])
    if output.parent and not output.parent.exists():
        raise CommandError(f"{output.parent}: output folder does not exist")
    return (None if args.example else args.paths[0]), output


def _context(device_spec):
    from . import create_context
    try:
        return create_context(device_spec)
    except (LookupError, RuntimeError) as error:
        raise CommandError(_one_line(error)) from None


def _image(args, ms_path, context):
    from .pipeline import image_measurement_set
    cell_rad = None if args.cell is None else args.cell / ARCSEC_PER_RAD
    if cell_rad is not None and not (np.isfinite(cell_rad) and cell_rad > 0):
        raise CommandError(f"--cell must be a positive number of arcsec, got {args.cell}")
    if not 0 < args.epsilon < 1:
        raise CommandError(f"--epsilon must be in (0, 1), got {args.epsilon}")
    return image_measurement_set(
        ms_path, npix_x=args.npix, pixsize_x=cell_rad, weighting=args.weighting,
        robust=args.robust, epsilon=args.epsilon, do_wgridding=args.wgridding,
        column=args.column, channels=args.channels, spw=args.spw, field=args.field,
        chunk_rows=args.chunk_rows, make_psf=args.psf, context=context,
        progress=not args.quiet, devices=_devices(args.devices),
        dask_scheduler=args.dask_scheduler)


def _devices(spec):
    """``--devices``: None, 'all' or a list of device specs."""
    if not spec:
        return None
    return "all" if spec.strip() == "all" else [p.strip() for p in spec.split(",") if p.strip()]


def _header_keywords(result) -> dict:
    from .fitsio import ms_time_to_iso
    keywords = {"OBJECT": result.field_name, "TELESCOP": result.telescope,
                "OBSRA": float(np.degrees(result.phase_centre_rad[0])) % 360.0,
                "OBSDEC": float(np.degrees(result.phase_centre_rad[1])),
                "WEIGHTNG": result.weighting.upper(), "EPSILON": result.epsilon,
                "WGRIDDNG": result.do_wgridding, "NVIS": result.n_samples - result.n_flagged,
                "NFLAGGED": result.n_flagged, "NOFFGRID": result.n_outside,
                "SUMWT": result.sum_weights, "GRIDDER": result.backend,
                "NCHAN": int(result.freq_hz.size)}
    if result.weighting == "briggs":
        keywords["ROBUST"] = result.robust
    if result.time_range_s[0] > 0:
        keywords["DATE-OBS"] = ms_time_to_iso(result.time_range_s[0])
    return keywords


def _write_outputs(args, result, output: Path) -> None:
    from .fitsio import write_image
    freq = result.freq_hz
    common = dict(pixsize_x=result.pixsize_x, pixsize_y=result.pixsize_y,
                  phase_centre_rad=result.phase_centre_rad, freq_hz=float(np.mean(freq)),
                  bandwidth_hz=float(np.ptp(freq)) or None, **_header_keywords(result))
    write_image(output, result.image, **common)
    if result.psf is not None:
        write_image(_sibling(output, "-psf.fits"), result.psf, bunit="", **common)
    if args.png is not None:
        png = Path(args.png) if args.png else _sibling(output, ".png")
        write_png(png, result)


def _sibling(output: Path, suffix: str) -> Path:
    stem = output.name[:-5] if output.name.lower().endswith(".fits") else output.name
    return output.with_name(stem + suffix)


def write_png(path: Path, result) -> None:
    """Quick-look picture: RA increasing to the left, offsets in arcsec."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CommandError("--png needs matplotlib: pip install 'clgrid[plot]'") from None
    from .fitsio import image_to_fits_data
    npix_x, npix_y = result.image.shape
    half_x = npix_x / 2 * result.pixsize_x * ARCSEC_PER_RAD
    half_y = npix_y / 2 * result.pixsize_y * ARCSEC_PER_RAD
    figure, axes = plt.subplots(figsize=(6, 5))
    shown = axes.imshow(image_to_fits_data(result.image), origin="lower", cmap="inferno",
                        extent=(half_x, -half_x, -half_y, half_y))
    figure.colorbar(shown, ax=axes, label="Jy/beam")
    axes.set_xlabel("RA offset (arcsec, east left)")
    axes.set_ylabel("Dec offset (arcsec)")
    axes.set_title(f"{result.field_name} Stokes I, {result.weighting} weighting")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _summary(result, output: Path) -> None:
    peak = tuple(int(p) for p in np.unravel_index(np.argmax(result.image), result.image.shape))
    print(f"wrote {output}: {result.image.shape[0]}x{result.image.shape[1]} pixels of "
          f"{result.pixsize_x * ARCSEC_PER_RAD:.3g} arcsec, peak {result.image[peak]:.4g} "
          f"Jy/beam at pixel {peak}, rms {np.std(result.image):.3g}; "
          f"{result.n_samples - result.n_flagged} samples, {result.n_flagged} flagged, "
          f"{result.n_outside} off the grid; gridder: {result.backend}")
    if result.n_outside:
        print(f"warning: {result.n_outside} samples lie beyond the uv range of this cell "
              f"size and were left out; use a smaller --cell", file=sys.stderr)


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


__all__ = ["add_parser", "run", "write_png"]

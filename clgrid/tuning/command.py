"""``clgrid tune {imaging,table}``: one command for both tuners.

``clgrid tune imaging`` times the gridding core's tiles
(:func:`clgrid.tuning.imaging.tune_tiles`: ``vis2dirty``, ``Imager``);
``clgrid tune table`` times the register spread's geometries
(:func:`clgrid.tuning.table.tune`: ``Gridder(register_params='auto')``).
Both write the one cache file (:mod:`clgrid.core.tuning.cache`).

The spellings before it, ``clgrid tune-core`` and ``clgrid tune`` with
the table tuner's options, still run, with one line naming the new one
(:func:`new_spelling`).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pyopencl as cl

from ..core.tuning.cache import cache_path
from ..device.profiles import create_context
from ..gridders.gcf import separable_gcf, w_projection_gcf
from .imaging import tune_tiles
from .table import tune

#: The tuners, as ``clgrid tune KIND``.
KINDS = ("imaging", "table")


def new_spelling(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` with a deprecated tune spelling rewritten, and the line that
    says so (None where nothing was rewritten): ``tune-core ...`` is
    ``tune imaging ...``, ``tune`` without a kind is ``tune table``."""
    if argv[:1] == ["tune-core"]:
        return ["tune", "imaging", *argv[1:]], _note("clgrid tune-core", "clgrid tune imaging")
    if argv[:1] == ["tune"] and not set(argv[1:2]) & {*KINDS, "-h", "--help"}:
        return ["tune", "table", *argv[1:]], _note("clgrid tune", "clgrid tune table")
    return argv, None


def _note(old: str, new: str) -> str:
    return f"clgrid: `{old}` is now spelled `{new}`; the old spelling will go"


def _queue(device: str | None) -> cl.CommandQueue | None:
    """A queue on ``--device``, or None after one line saying why not."""
    try:
        return cl.CommandQueue(create_context(device))
    except (LookupError, RuntimeError) as error:
        print(f"clgrid: {error}", file=sys.stderr)
        return None


def _cmd_imaging(args: argparse.Namespace) -> int:
    queue = _queue(args.device)
    if queue is None:
        return 2
    for epsilon in args.epsilon:
        for do_w in (False, True) if args.w == "both" else (args.w == "yes",):
            result = tune_tiles(queue, epsilon=epsilon, do_wgridding=do_w,
                                precision=args.precision, npix=args.npix, n_rows=args.rows,
                                n_chan=args.channels)
            times = result["seconds"]
            print(f"epsilon {epsilon:g}, w {do_w}, W {result['support']}: best "
                  f"{result['tiles']} {times[result['tiles']] * 1e3:.1f} ms "
                  f"(of {len(times)} tiles; slowest {max(times.values()) * 1e3:.1f} ms), "
                  f"saved to {cache_path()}")
    return 0


def _cmd_table(args: argparse.Namespace) -> int:
    queue = _queue(args.device)
    if queue is None:
        return 2
    precision = np.float64 if args.precision == "float64" else np.float32
    for support in args.support:
        gcf = (separable_gcf(support, args.oversample) if args.table == "separable" else
               w_projection_gcf(support, args.oversample, 4, 100.0, 0.01))
        summary = tune(queue, gcf, args.npol, precision, nx=args.nx,
                       n_baselines=args.baselines, quick=args.quick)
        reads = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in summary["gcf_read_seconds"].items())
        print(f"support {support}: best {summary['params']} {summary['seconds'] * 1e3:.1f} ms "
              f"(defaults {summary['default_seconds'] * 1e3:.1f} ms)"
              + (f", GCF {summary['gcf_read']} ({reads})" if reads else "")
              + f", saved to {cache_path()}")
    return 0


def _add_imaging(kinds: argparse._SubParsersAction) -> None:
    parser = kinds.add_parser("imaging", help="the gridding core's spreading tiles "
                              "(vis2dirty, dirty2vis, Imager)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--epsilon", type=float, nargs="+", default=[1e-4, 1e-5])
    parser.add_argument("--w", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--precision", choices=("single", "double"), default="single")
    parser.add_argument("--npix", type=int, default=1024)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--channels", type=int, default=8)
    parser.set_defaults(func=_cmd_imaging)


def _add_table(kinds: argparse._SubParsersAction) -> None:
    parser = kinds.add_parser("table", help="the table Gridder's register spread "
                              "(Gridder(register_params='auto'))")
    parser.add_argument("--device", default=None)
    parser.add_argument("--support", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    parser.add_argument("--precision", default="float32", choices=("float32", "float64"))
    parser.add_argument("--table", default="separable", choices=("separable", "full"))
    parser.add_argument("--oversample", type=int, default=8)
    parser.add_argument("--nx", type=int, default=512)
    parser.add_argument("--baselines", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="fewer candidates")
    parser.set_defaults(func=_cmd_table)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Register ``clgrid tune {imaging,table}`` on the CLI."""
    parser = commands.add_parser("tune", help="time a device's kernels and cache the fastest "
                                 "(imaging: the core's tiles; table: the Gridder's register "
                                 "spread)")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="{imaging,table}")
    _add_imaging(kinds)
    _add_table(kinds)


__all__ = ["KINDS", "add_parser", "new_spelling"]

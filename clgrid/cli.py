"""The ``clgrid`` command line."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .device.profiles import DeviceProfile


def format_table(rows: list[dict]) -> str:
    """Plain text table of dicts sharing their keys."""
    if not rows:
        return "(none)"
    keys = list(rows[0])
    widths = {k: max(len(str(k)), *(len(str(r[k])) for r in rows)) for k in keys}
    lines = ["  ".join(str(k).ljust(widths[k]) for k in keys),
             "  ".join("-" * widths[k] for k in keys)]
    lines += ["  ".join(str(r[k]).ljust(widths[k]) for k in keys) for r in rows]
    return "\n".join(lines)


def _unusable_platform_notes(profiles: "list[DeviceProfile]") -> list[str]:
    """One line per platform none of whose devices can build kernels here."""
    from .device.profiles import unusable_hint
    notes = []
    for key in dict.fromkeys(p.platform_key for p in profiles):
        of_platform = [p for p in profiles if p.platform_key == key]
        if not any(p.usable for p in of_platform):
            notes.append(f"note: no {key} device builds kernels on this machine; "
                         f"{unusable_hint(of_platform[0])}")
    return notes


def _cmd_devices(args: argparse.Namespace) -> int:
    from . import devices
    profiles = devices()
    if not profiles:
        print("no OpenCL device found; pip install 'clgrid[pocl]' for the embedded CPU device")
        return 1
    print(format_table([p.summary() for p in profiles]))
    for line in _unusable_platform_notes(profiles):
        print(line)
    from .device.hostio import streaming_copies_note
    if (any(p.device_type == "gpu" and p.platform_key != "oclgrind" for p in profiles)
            and streaming_copies_note()):
        print(streaming_copies_note())
    if getattr(args, "explain", False):
        from .gridders.dispatch import explain
        print(f"\nGridder's spread (and Degridder's records) for support {args.support}, "
              f"npol {args.npol}, float32:")
        print(format_table([explain(p, args.support, args.npol) for p in profiles]))
        from .core.plan import explain_imaging
        from .core.spread import explain_interpolation
        print("\nvis2dirty / dirty2vis (the imaging core), epsilon 1e-5 in single precision:")
        print(format_table([dict(explain_imaging(p), dirty2vis=explain_interpolation(p))
                            for p in profiles]))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    """Scatter-add a histogram on the device and check it against numpy."""
    from . import ScatterAdd, create_context, scatter_add_reference
    from .device.profiles import DeviceProfile
    try:
        context = create_context(args.device)
    except (LookupError, RuntimeError) as error:
        print(f"clgrid: {error}", file=sys.stderr)
        return 2
    profile = DeviceProfile.from_device(context.devices[0])
    rng = np.random.default_rng(1)
    index = rng.integers(0, args.bins, args.items).astype(np.uint32)
    values = rng.standard_normal(args.items).astype(np.float32)
    operation = ScatterAdd(context, np.float32)
    operation(index, values, n_out=args.bins)  # warm-up
    start = time.perf_counter()
    result = operation(index, values, n_out=args.bins).get()
    seconds = time.perf_counter() - start
    reference = scatter_add_reference(index, values, args.bins)
    error = np.max(np.abs(result - reference)) / np.max(np.abs(reference))
    print(f"device: {profile.device_name} ({profile.platform_key}), "
          f"float atomics: {operation.atomic_path}")
    print(f"scatter-add of {args.items} float32 values into {args.bins} bins: "
          f"{seconds * 1e3:.1f} ms, {args.items / seconds / 1e6:.1f} M adds/s, "
          f"max relative error vs float64 numpy {error:.2e}")
    return 0 if error < 1e-4 else 1


class OneLineParser(argparse.ArgumentParser):
    """argparse with errors on one line (no usage block), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="clgrid", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    devices = commands.add_parser("devices", help="list OpenCL devices and what clgrid uses")
    devices.add_argument("--explain", action="store_true",
                         help="also show the spread a Gridder runs per device, and why")
    devices.add_argument("--support", type=int, default=32, help="GCF support for --explain")
    devices.add_argument("--npol", type=int, default=4, choices=(1, 2, 4))
    devices.set_defaults(func=_cmd_devices)
    demo = commands.add_parser("demo", help="run a small atomic scatter-add on a device")
    demo.add_argument("--device", default=None,
                      help="'platform:device' indices or a name substring (default: best)")
    demo.add_argument("--items", type=int, default=1_000_000)
    demo.add_argument("--bins", type=int, default=4096)
    demo.set_defaults(func=_cmd_demo)
    from .pipeline.image_command import add_parser as add_image_parser
    add_image_parser(commands)
    from .tuning.command import add_parser as add_tune_parser
    add_tune_parser(commands)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt for SIGINT
    (a BaseException, so that no ``except Exception`` swallows it)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises :class:`Terminated` within the block (main thread only:
    Python sets handlers there alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _restart_with_streaming_copies() -> None:
    """Run this process again with glibc's streaming stores on
    (:func:`clgrid.device.hostio.streaming_copies_env`): glibc reads its
    tunables only when a process starts, and ``clgrid image``'s copies into
    pinned staging run 1.3x faster with them on a GPU host.  Nothing
    happens where they are on already, do not apply, or
    ``CLGRID_STREAMING_COPIES=0``; a failed exec carries on as is."""
    from .device.hostio import streaming_copies_env
    env = streaming_copies_env()
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    with contextlib.suppress(OSError):
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    """Run one ``clgrid`` command; Ctrl-C and SIGTERM end it with one line
    and the shell's codes 130 and 143 (128 + the signal), no traceback
    (``clgrid image`` renames its outputs into place only when complete).
    ``clgrid image`` started from a shell first re-executes itself with
    glibc's streaming stores on (``CLGRID_STREAMING_COPIES=0`` keeps it
    from doing so; docs/imaging.md).  The old spellings ``clgrid
    tune-core`` and ``clgrid tune`` without a kind run as ``clgrid tune
    imaging`` / ``clgrid tune table``, with one line on stderr naming the
    new spelling."""
    from .tuning.command import new_spelling
    argv_given = argv
    argv, note = new_spelling(list(sys.argv[1:] if argv is None else argv))
    if note:
        print(note, file=sys.stderr)
    args = build_parser().parse_args(argv)
    if argv_given is None and args.command == "image":
        _restart_with_streaming_copies()
    try:
        with _sigterm_raises():
            return args.func(args)
    except KeyboardInterrupt:
        print(f"clgrid {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated:
        print(f"clgrid {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM


if __name__ == "__main__":
    sys.exit(main())

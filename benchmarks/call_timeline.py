"""Where one dirty2vis (or ``--vis2dirty``: vis2dirty) call's time goes
on the device: every queue made with profiling on, then the device times of
the call's copies (uploads, the row blocks' downloads), of its kernels and
fills (the FFT's are not seen) and of the markers that end each row block's
interpolation, in ms from the call's first command, with the host ms each
was enqueued at and (``--host-steps``) the host steps' times, then each kind's
total device ms and count (the call's profile in one line).  SKA-mid
case of benchmarks/scaling.py (``--quick``: its small case), one
``Imager``, numpy arrays in, results out as the call hands them
(``--on-device``: device arrays in and out).

    python3 benchmarks/call_timeline.py --device nvidia --host-steps
    python benchmarks/call_timeline.py --device intel --quick --vis2dirty
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_RealQueue = cl.CommandQueue


class _ProfilingQueue(_RealQueue):
    """A command queue with profiling on, whatever was asked."""

    def __init__(self, context, device=None, properties=None):
        flags = (properties or 0) | cl.command_queue_properties.PROFILING_ENABLE
        super().__init__(context, device, flags)


cl.CommandQueue = _ProfilingQueue   # before clgrid makes any queue

import clgrid  # noqa: E402
from benchmarks.scaling import imaging_case  # noqa: E402
from clgrid.imaging.imager import Imager  # noqa: E402

_recorded: list[tuple[str, cl.Event]] = []
_host: list[float] = []   # host ms (perf_counter) when each was enqueued
_real_copy, _real_marker = cl.enqueue_copy, cl.enqueue_marker


def _copy(queue, dest, src, **kwargs):
    event = _real_copy(queue, dest, src, **kwargs)
    down = isinstance(dest, np.ndarray)
    nbytes = (dest if down else src).nbytes if isinstance(dest if down else src, np.ndarray) else 0
    _recorded.append((f"{'down' if down else 'up'} {nbytes / 2**20:.0f} MiB", event))
    _host.append(time.perf_counter())
    return event


def _marker(queue, wait_for=None):
    event = _real_marker(queue, wait_for)
    _recorded.append(("marker", event))
    _host.append(time.perf_counter())
    return event


_real_call = cl.Kernel.__call__
_real_fill = cla.Array.fill


def _fill(array, value, queue=None, wait_for=None):
    result = _real_fill(array, value, queue=queue, wait_for=wait_for)
    if array.events:
        event = array.events[-1]
        label = f"fill {array.nbytes / 2**20:.0f} MiB"
        if _recorded and _recorded[-1][1].int_ptr == event.int_ptr:
            # pyopencl filled it by a kernel the kernel hook has recorded:
            # the same command once, with its size
            _recorded[-1] = (label, event)
        else:
            _recorded.append((label, event))
            _host.append(time.perf_counter())
    return result


def _kernel_call(kernel, *args, **kwargs):
    event = _real_call(kernel, *args, **kwargs)
    _recorded.append((kernel.function_name, event))
    _host.append(time.perf_counter())
    return event


_spans: list[tuple[str, float, float]] = []


def _by_kind() -> dict[str, tuple[float, int]]:
    """Device ms and count of the recorded commands by kind (a kernel's
    name; uploads, downloads, fills and markers each as one), longest first:
    the profile of a call in one line."""
    totals: dict[str, list] = {}
    for name, event in _recorded:
        kind = name.split()[0] if name.split()[0] in ("up", "down", "fill") else name
        entry = totals.setdefault(kind, [0.0, 0])
        entry[0] += (event.profile.end - event.profile.start) / 1e6
        entry[1] += 1
    return {kind: (ms, count) for kind, (ms, count)
            in sorted(totals.items(), key=lambda item: -item[1][0])}


def _timed(owner, name: str) -> None:
    """Record host enter/exit times of ``owner.name`` in :data:`_spans`."""
    real = getattr(owner, name)

    def wrapper(*args, **kwargs):
        entered = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            _spans.append((name, entered, time.perf_counter()))
    setattr(owner, name, wrapper)


def _time_host_steps() -> None:
    """The host steps of a call, timed (``--host-steps``)."""
    import clgrid.imaging.imager as imager_module
    from clgrid.core.engine import Lease
    from clgrid.core.image import ImageStage
    from clgrid.core.transfer import Uploader
    for owner, name in ((Lease, "__enter__"), (Lease, "__exit__"),
                        (Uploader, "pinned_target"), (Uploader, "settle"),
                        (Uploader, "to_device"), (Imager, "_dirty_to_device"),
                        (Imager, "_check_weights"), (Imager, "_inputs"), (Imager, "_count"),
                        (ImageStage, "dirty2vis"), (ImageStage, "vis2dirty"),
                        (Imager, "_check_vis"), (Imager, "_to_caller"),
                        (imager_module, "_device_count"), (imager_module, "_used_nonfinite")):
        _timed(owner, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--vis2dirty", action="store_true",
                        help="time vis2dirty of the case's visibilities instead")
    parser.add_argument("--on-device", action="store_true",
                        help="the call on device-resident visibilities (vis2dirty_device / "
                             "dirty2vis_device), not numpy arrays")
    parser.add_argument("--vis-per-block", type=int, default=None,
                        help="visibilities per row block (default the device's)")
    parser.add_argument("--host-steps", action="store_true",
                        help="also time the call's host steps (enter and exit, host ms)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    uvw, freq, npix, cell, vis = imaging_case(args.quick)
    context = clgrid.create_context(clgrid.select_device(args.device))
    imager = Imager(context, uvw=uvw, freq=freq, npix_x=npix, npix_y=npix, pixsize_x=cell,
                    pixsize_y=cell, epsilon=1e-5, vis_per_block=args.vis_per_block)
    dirty = np.array(imager.vis2dirty(vis))
    if args.on_device:
        queue = cl.CommandQueue(context)
        vis_d, dirty_d = cla.to_device(queue, vis), cla.to_device(queue, dirty)
        call = ((lambda: imager.vis2dirty_device(vis_d, queue=queue)) if args.vis2dirty
                else (lambda: imager.dirty2vis_device(dirty_d, queue=queue)))
    else:
        call = ((lambda: imager.vis2dirty(vis)) if args.vis2dirty
                else (lambda: imager.dirty2vis(dirty)))
    for _ in range(2):
        call()
    if args.host_steps:
        _time_host_steps()
    cl.enqueue_copy, cl.enqueue_marker, cl.Kernel.__call__ = _copy, _marker, _kernel_call
    cla.Array.fill = _fill
    try:
        for _ in range(args.calls):
            _recorded.clear()
            _host.clear()
            _spans.clear()
            started = time.perf_counter()
            call()
            wall = 1e3 * (time.perf_counter() - started)
            cl.wait_for_events([e for _, e in _recorded])
            zero = min(e.profile.start for _, e in _recorded)
            parts = [f"{name} {(e.profile.start - zero) / 1e6:.2f}-{(e.profile.end - zero) / 1e6:.2f}"
                     f" (host {1e3 * (t - started):.2f})"
                     for (name, e), t in zip(_recorded, _host)]
            print(f"call {wall:.1f} ms host; device ms from its first command (host ms "
                  "from the call's start when enqueued): " + ", ".join(parts), flush=True)
            print("device ms by kind (count): " + ", ".join(
                f"{kind} {ms:.2f} ({count})" for kind, (ms, count) in _by_kind().items()),
                  flush=True)
            if _spans:
                print("host steps (ms from the call's start): " + ", ".join(
                    f"{name} {1e3 * (a - started):.2f}-{1e3 * (b - started):.2f}"
                    for name, a, b in sorted(_spans, key=lambda span: span[1])), flush=True)
    finally:
        cl.enqueue_copy, cl.enqueue_marker, cl.Kernel.__call__ = (_real_copy, _real_marker,
                                                                   _real_call)
        cla.Array.fill = _real_fill
    return 0


if __name__ == "__main__":
    sys.exit(main())

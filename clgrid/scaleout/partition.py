"""How one imaging job is cut for several devices: devices, layouts, partitions.

Device lists (:func:`cpu_sub_devices`, :func:`best_cpu`,
:func:`all_gpus_or_best`, :func:`resolve_devices`, :func:`resolve_queues`), the
whole observation's :class:`~clgrid.core.plan.GridLayout` that every piece
keeps (:func:`build_layout`; :meth:`GridLayout.of_rows` where the rows are at
hand), and the splits of rows
(:func:`partition_rows`) and w planes (:func:`partition_planes`) of equal
cost.  Used by :mod:`clgrid.scaleout.multidevice` and :mod:`clgrid.scaleout.dask`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pyopencl as cl

from ..core.plan import SPEED_OF_LIGHT, GridLayout, ImageGeometry, check_freq
from ..device.profiles import (DeviceProfile, all_devices, create_context, resolve_queue,
                               select_device)


PARTITIONS = ("time", "baseline")
REDUCTIONS = ("images", "device", "host")


@dataclasses.dataclass(frozen=True)
class ReduceCosts:
    """Measured seconds one device of a job without w takes for the steps
    the two reductions differ in: its grid's FFT (``fft_s``, one plane)
    and its grid's download to the host (``grid_down_s``); plus the bytes
    of a grid and of an image, and the host's rate of adding arrays
    (``host_add_bytes_s``)."""

    fft_s: float
    grid_down_s: float
    grid_bytes: int
    image_bytes: int
    host_add_bytes_s: float

    @property
    def image_down_s(self) -> float:
        return self.grid_down_s * self.image_bytes / max(self.grid_bytes, 1)


def reduction_seconds(costs: Sequence[ReduceCosts]) -> dict[str, float]:
    """The critical path of each reduction of a job without w over the
    devices of ``costs`` (the first runs the one FFT where grids are
    summed), past the spreading, which both share: ``'images'``: every
    device its own FFT and correction, then the images summed on the host as
    they come down; ``'host'``: every grid down, summed on the host, up to
    the first device, one FFT and one image down."""
    first = costs[0]
    images = (max(c.fft_s + c.image_down_s for c in costs)
              + sum(c.image_bytes for c in costs[1:]) / first.host_add_bytes_s)
    grids = (max(c.grid_down_s for c in costs)
             + sum(c.grid_bytes for c in costs[1:]) / first.host_add_bytes_s
             + first.grid_down_s + first.fft_s + first.image_down_s)
    return {"images": images, "host": grids}


def choose_reduction(costs: Sequence[ReduceCosts]) -> str:
    """The reduction of the smaller :func:`reduction_seconds` (images on a
    tie: no grid crosses the host).  Like devices always sum images (each
    FFT runs beside the others); summed grids win where one device's FFT
    costs more than another's FFT plus moving the grids (a CPU beside a
    GPU)."""
    seconds = reduction_seconds(costs)
    return "host" if seconds["host"] < seconds["images"] else "images"


# ------------------------------------------------------------------ devices
def cpu_sub_devices(count: int, device: "str | cl.Device | None" = None) -> list[cl.Device]:
    """Split a CPU device into ``count`` equal sub-devices (real OpenCL devices).

    Useful to run several devices in one process on one CPU (tests, NUMA).
    ``device``: a spec of :func:`clgrid.select_device`; default the best
    usable CPU device that is not a simulator.
    """
    parent = select_device(device) if device is not None else best_cpu()
    units = int(parent.max_compute_units)
    if count < 1 or units < count:
        raise ValueError(f"cannot split {parent.name.strip()!r} ({units} compute units) "
                         f"into {count} sub-devices")
    try:
        subs = parent.create_sub_devices(
            [cl.device_partition_property.EQUALLY, units // count])
    except cl.Error as error:
        raise ValueError(f"{parent.name.strip()!r} cannot be partitioned: {error}") from None
    return list(subs[:count])


def best_cpu() -> cl.Device:
    """The usable, non-simulated CPU device with the most compute units."""
    cpus = [d for d in all_devices() if DeviceProfile.from_device(d).device_type == "cpu"
            and DeviceProfile.from_device(d).usable
            and not DeviceProfile.from_device(d).is_simulator]
    if not cpus:
        raise LookupError("no usable OpenCL CPU device")
    return max(cpus, key=lambda d: d.max_compute_units)


def all_gpus_or_best() -> list[cl.Device]:
    """``devices='all'``: every usable device of the best device's platform and type."""
    best = select_device()
    best_profile = DeviceProfile.from_device(best)
    same = [d for d in all_devices() if d.platform == best.platform
            and DeviceProfile.from_device(d).device_type == best_profile.device_type
            and DeviceProfile.from_device(d).usable]
    return same or [best]


def resolve_devices(devices) -> list:
    """The entries of a ``devices=`` (or ``clgrid image --devices``) value:
    ``'all'`` is :func:`all_gpus_or_best`; one entry or a list of them, each a
    spec string of :func:`clgrid.select_device` or a :class:`pyopencl.Device`
    (a device), or a :class:`pyopencl.Context` or :class:`pyopencl.CommandQueue`
    (kept as they are).  The one rule of both the run and ``clgrid image``'s
    memory check."""
    if isinstance(devices, str) and devices == "all":
        return all_gpus_or_best()
    if isinstance(devices, (str, cl.Device, cl.Context, cl.CommandQueue)):
        devices = [devices]
    devices = list(devices)
    if not devices:
        raise ValueError("devices is empty")
    return [entry if isinstance(entry, (cl.CommandQueue, cl.Context)) else select_device(entry)
            for entry in devices]


def resolve_queues(devices) -> list[cl.CommandQueue]:
    """One command queue per entry of :func:`resolve_devices` ``(devices)``,
    each on its own context (a queue is used as is)."""
    queues = [resolve_queue(entry if isinstance(entry, (cl.CommandQueue, cl.Context))
                            else create_context(entry)) for entry in resolve_devices(devices)]
    seen = [q.device.int_ptr for q in queues]
    if len(set(seen)) != len(seen):
        raise ValueError("the same device is listed twice; split a CPU with "
                         "clgrid.scaleout.partition.cpu_sub_devices instead")
    return queues


# ------------------------------------------------------------------ layout
#: The kernel, grid and w planes every piece of one observation shares.
Layout = GridLayout


def build_layout(geometry: ImageGeometry, freq_hz, w_min_m: float, w_max_m: float,
                 n_vis: int) -> GridLayout:
    """Layout of an observation whose (sign-flipped) w spans [w_min_m, w_max_m]
    metres; built on the host from sizes only (a Dask client needs no device)."""
    freq_hz = check_freq(freq_hz)
    ends = np.outer([w_min_m, w_max_m], freq_hz[[0, -1]]) / SPEED_OF_LIGHT
    return GridLayout.build(geometry, (float(ends.min()), float(ends.max())), int(n_vis))


def plane_span_of_rows(geometry: ImageGeometry, layout: GridLayout, uvw_m: np.ndarray,
                       freq_hz) -> tuple[np.ndarray, np.ndarray]:
    """First and last w plane (inclusive) each row touches over all channels."""
    freq_hz = check_freq(freq_hz)
    w_ends = np.outer(uvw_m[:, 2] * geometry.signs[2], freq_hz[[0, -1]]) / SPEED_OF_LIGHT
    pos = (w_ends - layout.w0) / layout.dw
    half = 0.5 * layout.choice.support
    first = np.clip(np.ceil(pos.min(axis=1) - half), 0, layout.n_planes - 1).astype(np.int64)
    last = np.clip(np.ceil(pos.max(axis=1) - half) + layout.choice.support - 1, 0,
                   layout.n_planes - 1).astype(np.int64)
    return first, last


# ------------------------------------------------------------------ partitions
def partition_rows(n_rows: int, n_parts: int, partition: str = "time",
                   baseline_ids=None) -> list[np.ndarray]:
    """Row indices of each part.

    ``'time'``: contiguous blocks of equal size.  ``'baseline'``: whole
    baselines (``baseline_ids`` per row, e.g. ``ant1 * n_ant + ant2``)
    assigned largest first to the least loaded part.
    """
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
    if partition == "time":
        edges = np.linspace(0, n_rows, n_parts + 1).round().astype(np.int64)
        return [np.arange(edges[i], edges[i + 1]) for i in range(n_parts)]
    if baseline_ids is None:
        raise ValueError("partition='baseline' needs baseline_ids (one id per row)")
    baseline_ids = np.asarray(baseline_ids)
    if baseline_ids.shape != (n_rows,):
        raise ValueError(f"baseline_ids must be ({n_rows},), got {baseline_ids.shape}")
    ids, inverse, counts = np.unique(baseline_ids, return_inverse=True, return_counts=True)
    load = np.zeros(n_parts, np.int64)
    owner = np.empty(ids.size, np.int64)
    for group in np.argsort(-counts, kind="stable"):
        part = int(np.argmin(load))
        owner[group] = part
        load[part] += counts[group]
    row_owner = owner[inverse]
    return [np.flatnonzero(row_owner == part) for part in range(n_parts)]


def plane_costs(rows_per_plane: Sequence[int], taps_per_vis: float,
                fft_cost: float) -> np.ndarray:
    """Each w plane's estimated cost: gridding its rows plus one FFT (none
    for a plane no row reaches)."""
    rows = np.asarray(rows_per_plane, np.float64)
    return np.where(rows > 0, rows * taps_per_vis + fft_cost, 0.0)


def partition_planes(plane_cost: Sequence[float], n_parts: int) -> list[tuple[int, int]]:
    """Contiguous blocks of w planes of about equal cost (:func:`plane_costs`)."""
    cost = np.asarray(plane_cost, np.float64)
    edges_cost = np.cumsum(cost)
    total = edges_cost[-1] if edges_cost.size else 0.0
    bounds = [0]
    for part in range(1, n_parts):
        bounds.append(int(np.searchsorted(edges_cost, total * part / n_parts, side="left")) + 1)
    bounds.append(len(cost))
    bounds = np.maximum.accumulate(np.minimum(bounds, len(cost)))
    return [(int(bounds[i]), int(bounds[i + 1])) for i in range(n_parts)]


def default_partition(do_w: bool, on_cpus: bool) -> str:
    """The partition a job of several devices takes unless told: rows
    (``'time'``) without w, and with w on GPUs; with w on CPUs plane blocks
    (``'w-planes'``: their FFTs cost as much as their spreading).  On GPUs
    plane blocks grid at best a little faster than rows (SKA-mid, 116 M
    visibilities, 4096^2, w, planes shared by rows, 2026-11-27: 90-91
    against 96 ms on 2 x H200, 99.4 against 98.1 ms on two of a 4 x H100
    host, 146 against 80.5 ms on all four, where every block's host copy of
    every row adds up) and predict much slower (every block predicts every
    row, summed through the host: 70-71 ms against 41 ms), and an imager
    serves both in a major cycle."""
    return "w-planes" if do_w and on_cpus else "time"


def plane_pieces(plane_cost: Sequence[float], n_parts: int, n_rows: int, align: int = 1,
                 snap: float = 0.1) -> list[tuple[int, int, dict]]:
    """Contiguous pieces of w planes of equal cost where a plane may be
    shared by two neighbouring pieces by rows: (first plane, stop plane,
    ``{end plane: (first row, stop row)}``) each (an empty piece has
    first == stop).  Seven planes that carry points cut 4 : 3 over two
    devices; cut 3.5 : 3.5, the middle plane's rows below r go to the first,
    the rest to the second.  ``plane_cost``: a plane's cost over all rows,
    taken as even over the rows; a cut within ``snap`` of a plane's edge,
    or that rounds (to ``align`` rows, the devices' sub-buffer alignment) to
    no rows either side, moves to the edge."""
    cost = np.asarray(plane_cost, np.float64)
    ends = np.concatenate([[0.0], np.cumsum(cost)])
    total = ends[-1]
    cuts = [(0, None)]
    for part in range(1, n_parts):
        at = total * part / n_parts
        plane = int(np.clip(np.searchsorted(ends, at, side="right") - 1, 0, len(cost) - 1))
        share = (at - ends[plane]) / cost[plane] if cost[plane] > 0 else 0.0
        row = int(round(share * n_rows / align)) * align
        if share < snap or row <= 0:
            cuts.append((plane, None))
        elif share > 1 - snap or row >= n_rows:
            cuts.append((plane + 1, None))
        else:
            cuts.append((plane, row))
    cuts.append((len(cost), None))
    pieces = []
    for (start, start_row), (end, end_row) in zip(cuts[:-1], cuts[1:]):
        stop = end if end_row is None else end + 1
        rows = {}
        if start_row is not None:
            rows[start] = (start_row, n_rows)
        if end_row is not None:
            rows[end] = (rows.get(end, (0, n_rows))[0], end_row)
        if stop <= start or any(a >= b for a, b in rows.values()):
            pieces.append((start, start, {}))
        else:
            pieces.append((start, stop, rows))
    return pieces


def balance(loads: Sequence[float]) -> float:
    """Mean load over the largest: 1.0 is perfect, 1/n all on one device."""
    loads = np.asarray(loads, np.float64)
    return float(loads.mean() / loads.max()) if loads.size and loads.max() > 0 else 1.0


__all__ = ["Layout", "PARTITIONS", "REDUCTIONS", "ReduceCosts", "choose_reduction", "reduction_seconds", "all_gpus_or_best", "balance", "best_cpu", "build_layout", "cpu_sub_devices", "default_partition", "partition_planes", "partition_rows", "plane_costs", "plane_pieces", "plane_span_of_rows", "resolve_devices", "resolve_queues"]

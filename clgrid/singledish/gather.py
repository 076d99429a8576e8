"""The single-dish gather on the device: one writer per output value, no atomics.

:class:`HealpixGather` compiles ``templates/singledish.cl.mako`` for one kernel
and map and gathers sorted samples into cells; the kernel limits, lane and
pixel-type helpers and :class:`GridStats` live beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

from ..device.kernels import KernelTemplate, Operation, launch, real_dtype_name


KERNEL_TYPES = {"gauss1d": 1, "gauss2d": 3, "tapered_sinc": 3}
#: Channels one work-item keeps in registers; more channels add work-items.
MAX_CHAN_BLOCK = 8
MAX_GAMMA = 8
MAX_LANES = 256


class ShapeError(ValueError):
    """Input or output shapes do not match (cygrid's exception name)."""


@dataclass
class GridStats:
    """Book-keeping of what :meth:`Gridder.grid` did.

    Attributes
    ----------
    n_samples
        Samples gridded (after dropping bad ones).
    n_dropped
        Samples dropped because their longitude or latitude was NaN/Inf.
    n_flagged_values
        Data or weight values that were NaN/Inf: given zero weight.
    n_chunks
        Chunks the samples were cut into (one sort and one gather pass each).
    staging_s
        Host wall time spent copying the inputs into pinned staging memory.
    total_s
        Wall time of the ``grid`` calls.
    """

    n_samples: int = 0
    n_dropped: int = 0
    n_flagged_values: int = 0
    n_chunks: int = 0
    staging_s: float = 0.0
    total_s: float = 0.0
    _events: dict = field(default_factory=lambda: {"upload": [], "sort": [], "gather": []},
                          repr=False)


class HealpixGather(Operation):
    """Compile-once gather kernel for one parameter set on one device.

    Parameters
    ----------
    context
        A :class:`pyopencl.Context`, a :class:`pyopencl.CommandQueue` or None.
    kernel_type
        ``'gauss1d'``, ``'gauss2d'`` or ``'tapered_sinc'``.
    gamma
        Output cells per work-item group (thread coarsening), 1 .. 8.
    chan_block
        Channels per work-item, 1 .. 8.
    nside
        HEALPix resolution of the pre-ordering (decides the pixel index type).
    data_dtype, out_dtype
        float32 or float64 input data/weights and accumulators.
    has_weights
        Whether per-value input weights are passed.
    lanes
        Work-items splitting the samples of one cell group (a power of two
        up to 256); default 32 on GPUs, 1 elsewhere.
    compat
        ``"exact"`` (every sample within the radius) or ``"cygrid"`` (only
        those cygrid 2.0.4 pairs with the cell: :class:`.compat.CygridSelection`).
    """

    def __init__(self, context=None, *, kernel_type: str = "gauss1d", gamma: int = 1,
                 chan_block: int = 1, nside: int = 1024, data_dtype=np.float32,
                 out_dtype=np.float32, has_weights: bool = False, lanes: int | None = None,
                 compat: str = "exact"):
        super().__init__(context)
        check_compat(compat)
        self.compat = compat
        if kernel_type not in KERNEL_TYPES:
            raise ValueError(f"kernel_type must be one of {sorted(KERNEL_TYPES)}, "
                             f"got {kernel_type!r}")
        if not 1 <= int(gamma) <= MAX_GAMMA:
            raise ValueError(f"gamma must be in 1..{MAX_GAMMA}, got {gamma}")
        if not 1 <= int(chan_block) <= MAX_CHAN_BLOCK:
            raise ValueError(f"chan_block must be in 1..{MAX_CHAN_BLOCK}, got {chan_block}")
        if not self.profile.fp64:
            raise ValueError(f"{self.profile.device_name!r} has no double precision (fp64), "
                             "which the single-dish gather needs for its geometry")
        self.lanes = check_lanes(default_lanes(self.profile) if lanes is None else lanes)
        self.gamma, self.chan_block = int(gamma), int(chan_block)
        self.pix_dtype = pixel_dtype(nside)
        self.nside = int(nside)
        # Work-groups hold whole cell groups; with one lane the runtime picks.
        self._local = None
        if self.lanes > 1:
            self._local = self.lanes if self.profile.device_type != "gpu" else max(self.lanes, 128)
        self.template = KernelTemplate(self.queue, "singledish.cl.mako", {
            "kernel_type": kernel_type, "gamma": self.gamma, "chan_block": self.chan_block,
            "pix_type": "uint" if self.pix_dtype == np.uint32 else "ulong",
            "data_real": real_dtype_name(data_dtype), "out_real": real_dtype_name(out_dtype),
            "has_weights": bool(has_weights), "lanes": self.lanes,
            "local_size": self._local or 1, "compat": compat == "cygrid"})
        self._kernel = self.template.kernel("gather")
        self._pixelise = self.template.kernel("pixelise")
        if self._local and self._local > self.template.max_work_group_size(self._kernel):
            raise ValueError(f"lanes={self.lanes} needs work-groups of {self._local}, more than "
                             f"{self.profile.device_name!r} allows for this kernel")
        if self._local is None and self.profile.device_type == "gpu":
            self._local = min(128, self.template.max_work_group_size(self._kernel))

    def pixelise(self, lon_rad: np.ndarray, lat_rad: np.ndarray, nside: int) -> np.ndarray:
        """RING pixels of (lon, lat) in radians computed on the device."""
        lonlat = np.ascontiguousarray(np.stack([lon_rad, lat_rad], axis=-1), np.float64)
        n = lonlat.shape[0]
        flags = cl.mem_flags
        lonlat_d = cl.Buffer(self.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=lonlat)
        pix = np.empty(n, self.pix_dtype)
        pix_d = cl.Buffer(self.context, flags.WRITE_ONLY, max(pix.nbytes, 1))
        launch(self._pixelise, self.queue, (n,), lonlat_d, np.uint32(n), np.uint32(nside), pix_d)
        cl.enqueue_copy(self.queue, pix, pix_d)
        return pix

    def cygrid_arithmetic(self, a, b, lon_deg, lat_deg, ring, k, shift_count) -> tuple:
        """cygrid's arithmetic on the device (``compat="cygrid"`` builds): the
        x87 quotients ``a / b``, the pixels of (lon, lat) in degrees, the
        longitudes of pixel ``k`` of ``ring`` and their shifts onto rings of
        ``shift_count`` pixels, at this gather's nside (for the tests)."""
        if self.compat != "cygrid":
            raise ValueError("cygrid_arithmetic needs a compat='cygrid' gather")
        n = len(a)
        if any(len(v) != n for v in (b, lon_deg, lat_deg, ring, k, shift_count)):
            raise ValueError("cygrid_arithmetic needs arrays of one length")
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR

        def buffer(*columns, dtype):
            host = np.ascontiguousarray(np.stack([np.asarray(c, dtype) for c in columns], -1))
            return cl.Buffer(self.context, flags, hostbuf=host)

        outputs = [np.empty(n, dtype) for dtype in (np.float64, np.uint64, np.float64, np.int64)]
        buffers = [cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, max(out.nbytes, 8))
                   for out in outputs]
        launch(
            self.template.kernel("cygrid_arithmetic"), self.queue, (n,),
            buffer(a, b, dtype=np.float64),
            buffer(lon_deg, lat_deg, dtype=np.float64), buffer(ring, k, dtype=np.uint64),
            buffer(shift_count, dtype=np.uint32), np.uint32(n), np.uint32(self.nside),
            *buffers)
        for out, buf in zip(outputs, buffers):
            cl.enqueue_copy(self.queue, out, buf)
        return tuple(outputs)

    def __call__(self, cells_d: cl.Buffer, n_cells: int, chunk: "SortedChunk",  # noqa: F821
                 n_chan: int,
                 radius_rad: float, search_radius_rad: float, params: tuple,
                 data_sum: cl.Buffer, weight_sum: cl.Buffer,
                 wait_for=None, selection: tuple = ()) -> cl.Event:
        """Enqueue the gather of one pre-ordered chunk; returns its event.

        ``selection`` (``compat="cygrid"`` only): the cells' (ring, index)
        buffer, the chunk's disc table buffer, its first ring, rows, first
        ring offset and width (:meth:`.compat.CygridSelection.disc_table`).
        """
        if (self.compat == "cygrid") != bool(selection):
            raise ValueError("the cygrid selection's buffers go with compat='cygrid' only")
        extra = ()
        if selection:
            cells, disc, first_ring, rows, first_offset, width = selection
            extra = (cells, disc, np.uint32(first_ring), np.uint32(rows), np.int32(first_offset),
                     np.uint32(width))
        n_items = -(-n_cells // self.gamma) * self.lanes
        n_chan_groups = -(-n_chan // self.chan_block)
        local = self._local
        if local:
            n_items = -(-n_items // local) * local
        weights = chunk.weights if chunk.weights is not None else chunk.data
        # A cheap chord test comes first; the exact distance decides.
        hav_limit = math.sin(min(radius_rad, math.pi) / 2) ** 2 * (1 + 1e-9) + 1e-30
        return self._kernel(
            self.queue, (n_items, n_chan_groups), (local, 1) if local else None,
            cells_d, np.uint32(n_cells), chunk.xyz, chunk.pix, chunk.data, weights,
            chunk.ring_start, np.uint32(chunk.nside), np.float64(radius_rad),
            np.float64(search_radius_rad), np.float64(hav_limit),
            *(np.float64(p) for p in params),
            np.uint32(n_chan), data_sum, weight_sum, *extra, wait_for=wait_for)


#: ``compat=`` values: clgrid's exact selection, or cygrid 2.0.4's own.
COMPAT_MODES = ("exact", "cygrid")


def check_compat(compat: str) -> str:
    """``compat`` itself, or a ValueError unless one of :data:`COMPAT_MODES`."""
    if compat not in COMPAT_MODES:
        raise ValueError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    return compat


def default_lanes(profile) -> int:
    """Lanes per cell group: 32 on GPUs (small maps fill the device), else 1."""
    return 32 if profile.device_type == "gpu" else 1


def check_lanes(lanes: int) -> int:
    """``lanes`` as an int, or a ValueError unless a power of two in 1..MAX_LANES."""
    lanes = int(lanes)
    if not (1 <= lanes <= MAX_LANES and lanes & (lanes - 1) == 0):
        raise ValueError(f"lanes must be a power of two in 1..{MAX_LANES}, got {lanes}")
    return lanes


def pixel_dtype(nside: int) -> np.dtype:
    """uint32 while every RING index fits, else uint64."""
    return np.dtype(np.uint32 if 12 * nside * nside < 2**32 else np.uint64)


__all__ = ["COMPAT_MODES", "GridStats", "HealpixGather", "KERNEL_TYPES", "check_compat", "MAX_CHAN_BLOCK", "MAX_GAMMA", "MAX_LANES", "ShapeError", "check_lanes", "default_lanes", "pixel_dtype"]

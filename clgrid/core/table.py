"""Gridding core with tabulated kernels: the configuration of the shared
stages for the oversampled GCF tables of :class:`clgrid.Gridder` and
:class:`clgrid.Degridder` (separable tables and full W-projection tables).

The table gridders run the ES path's stage classes -- set points, spread,
interpolate -- configured by this module's kernel sources, chosen by
:func:`clgrid.core.strategies.table_engine` for the one engine
(:class:`clgrid.core.engine.Engine`), with the table gridder's conventions
(:mod:`clgrid.gridders.gcf`: grid centre at ``[ny // 2, nx // 2]``, u
along x, positions rounded to ``1 / O`` cell, W plane ``rint(w / w_step)``,
``w < 0`` conjugated):

* :class:`TablePositions`, the table's configuration of the shared
  :class:`clgrid.core.setpoints.SetPoints` (``core_setpoints.cl.mako`` with
  ``positions="table"``): a bin key per visibility (``table_keys``: the tile
  of its footprint start; flagged, off-grid and non-finite points left out
  and counted on the device), clgrid's stable radix sort, bin starts, and
  each kept point's footprint start and table index in sorted order
  (``table_records``).  No host pass over the visibilities.
* :class:`TableKernel`, the table's configuration of the shared
  :class:`clgrid.core.spread.Spreader` (``core_spread.cl.mako``, kernel
  ``spread`` with ``kernel_source="table"`` or ``"table_full"``):
  output-owned tiles, the weights read from the tables instead of the ES
  kernel; no atomics, the same bits every run.  Polarisations share the
  positions: one gather and one spread launch each.

The table grid is not periodic: points whose footprint leaves it are
dropped (counted), so no footprint wraps; the core's tiles need grid sides
that are whole tiles, so the planes are padded up to them and the corner
copied (or added) into the caller's grid (``crop_planes``) when they differ.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.kernels import launch, real_dtype_name
from ..device.profiles import DeviceProfile
from .eskernel import KernelChoice
from .plan import GridLayout, TileShape, row_taps
from .setpoints import PointSet, position_args, round_up
from .engine import InterpolateJob, SpreadJob
from .transfer import row_view
from .spread import SpreadPart, WorkList

#: Widest table for which the tile spread is the default where float atomics
#: are native (a 32 x 32 tile reading only its nearest neighbours' bins: W <= 33;
#: wider kernels read more bins, :meth:`TileShape.reach`, and the register
#: spread is faster); CPUs with the vector tile: :func:`max_table_support`.
MAX_TABLE_SUPPORT = 33
#: Orders of the table set points: by tile (the tile spread's bins) or by
#: footprint start cell (the register spread's streams).
KEY_ORDERS = ("tile", "cell")
#: Most taps a point of the vector (CPU) table spread has per axis: rows of
#: real separable tables (one vector), and of full slices (pieces of vectors).
VECTOR_TAPS = 16
VECTOR_SLICE_TAPS = 64
#: Bit of a point's table index that marks a conjugated visibility.
TABLE_CONJUGATE = 1 << 30


@dataclasses.dataclass(frozen=True)
class TableGrid:
    """Geometry of one table gridder: grid, cell, table shape and conventions.

    ``table_real``: separable tables with zero imaginary parts (staged as
    reals: the ES kernel's inner loop).
    """

    nx: int
    ny: int
    cell_size_rad: float
    support: int
    oversample: int
    w_planes: int
    w_step_lambda: float
    separable: bool
    table_real: bool
    conjugate_negative_w: bool
    real: np.dtype
    #: How the register kernels read the GCF (:data:`GCF_READS`).
    gcf_read: str = "buffer"
    #: Position steps per table step: ``oversample`` is the positions'
    #: (set points, records), ``oversample // steps`` the table's; > 1 only
    #: with ``gcf_read='image-linear'`` (the sampler interpolates between).
    steps: int = 1

    @property
    def table_oversample(self) -> int:
        """Sub-pixel steps per cell of the table itself."""
        return self.oversample // self.steps

    @property
    def kernel_source(self) -> str:
        return "table" if self.separable else "table_full"

    @property
    def vector_source(self) -> str:
        """The kernel source of the CPU vector kernels: real separable tables
        up to :data:`VECTOR_TAPS` as their two rows, other tables as full
        slices (separable ones expanded by :func:`vector_taps`)."""
        return ("table" if self.separable and self.table_real
                and self.support <= VECTOR_TAPS else "table_full")

    @property
    def complex_dtype(self) -> np.dtype:
        return np.dtype(np.complex64 if self.real == np.float32 else np.complex128)

    def check(self) -> None:
        """ValueError where the core cannot grid with these tables: 32-bit
        table indices."""
        entries = self.w_planes * self.oversample ** 2
        table = self.w_planes * self.table_oversample ** 2
        if table * (1 if self.separable else self.support ** 2) >= 2 ** 31 or \
                entries >= TABLE_CONJUGATE:
            raise ValueError("the table is too large for the core's 32-bit indices")
        if self.gcf_read not in GCF_READS:
            raise ValueError(f"gcf_read must be one of {GCF_READS}, got {self.gcf_read!r}")
        if self.steps < 1 or self.oversample % self.steps or \
                (self.steps > 1 and self.gcf_read != "image-linear"):
            raise ValueError(f"steps {self.steps}: a divisor of oversample {self.oversample}, "
                             "above 1 only with gcf_read='image-linear'")


#: How the register kernels read the GCF: ``'buffer'`` (global memory;
#: separable tables phased for vector loads), ``'image'`` (an OpenCL image
#: read through a nearest-texel sampler: the same weights as the buffer) or
#: ``'image-linear'`` (the sampler's linear filter interpolates between the
#: table's oversampling steps at positions :data:`LINEAR_STEPS` times finer).
GCF_READS = ("buffer", "image", "image-linear")
#: Positions per table step of ``'image-linear'``: a power of two, so that
#: every interpolation weight is a multiple of 1/16 of a texel, exact in the
#: 8 fractional bits GPUs' texture units keep (CPU runtimes filter in float).
LINEAR_STEPS = 16


def linear_steps(oversample: int, w_planes: int) -> int:
    """Position steps per table step for ``'image-linear'``:
    :data:`LINEAR_STEPS`, halved while the finer positions' table slices
    (``w_planes * (oversample * steps)^2``) would not fit the core's 30-bit
    table index."""
    steps = LINEAR_STEPS
    while steps > 1 and w_planes * (oversample * steps) ** 2 >= TABLE_CONJUGATE:
        steps //= 2
    return steps


def gcf_image_shape(support: int, oversample: int, w_planes: int,
                    separable: bool) -> tuple[int, ...]:
    """Texels of the GCF image: separable tables one 2-D image per axis,
    ``(S * O, w_planes)`` (a row a w plane, texel ``m = j O + f`` the
    kernel at distance ``(m - (S O) // 2) / O``); full tables ``(S O, S O)``
    a plane, a 3-D image of ``w_planes`` layers where there are several
    (OpenCL 1.2 wants 3-D images at least 2 deep), 2-D for one.  OpenCL
    order: width first."""
    side = support * oversample
    if separable:
        return (side, w_planes)
    return (side, side) if w_planes == 1 else (side, side, w_planes)


def gcf_image_fits(profile: DeviceProfile, support: int, oversample: int, w_planes: int,
                   separable: bool, precision=np.float32) -> tuple[bool, str]:
    """Whether a GCF table can be read as an image on this device, and if not
    why: image support (``CL_DEVICE_IMAGE_SUPPORT``), float32 (images hold
    float texels) and the device's largest 2-D / 3-D image."""
    if not profile.image_support:
        return False, "no image support"
    if np.dtype(precision) != np.float32:
        return False, "images hold float32 texels, the grid is float64"
    shape = gcf_image_shape(support, oversample, w_planes, separable)
    limit = profile.image2d_max if len(shape) == 2 else profile.image3d_max
    if any(size > most for size, most in zip(shape, limit)):
        return False, (f"table image {' x '.join(map(str, shape))} exceeds the device's "
                       f"{len(shape)}-D image limit {' x '.join(map(str, limit))}")
    return True, ""


def gcf_texels(table: np.ndarray, separable: bool, channels: int) -> np.ndarray:
    """A GCF table as float32 texels of ``channels`` (1: real, 2: re, im;
    4: re, im, 0, 0 where the device lacks two-channel float images), in
    the layout of :func:`gcf_image_shape` (numpy order: slowest axis first).

    ``table``: separable ``(w_planes, O, S)`` or full ``(w_planes, O, O, S,
    S)``.  Sub-pixel ``f`` of footprint cell ``j`` is flat sample ``j O +
    f`` (:mod:`clgrid.gridders.gcf`: distance ``j + (f - (S O) // 2) / O``),
    so consecutive texels are consecutive distances and the sampler's linear
    filter interpolates the kernel, across cell boundaries too."""
    table = np.asarray(table)
    planes = table.shape[0]
    if separable:
        flat = table.transpose(0, 2, 1).reshape(planes, -1)          # [w, m]
    else:
        o, s = table.shape[1], table.shape[3]
        flat = table.transpose(0, 3, 1, 4, 2).reshape(planes, s * o, s * o)   # [w, mv, mu]
        if planes == 1:
            flat = flat[0]
    parts = [flat.real] if channels == 1 else [flat.real, flat.imag]
    parts += [np.zeros_like(flat.real)] * (channels - len(parts))
    return np.ascontiguousarray(np.stack(parts, axis=-1), dtype=np.float32)


def gcf_images(queue: cl.CommandQueue, grid: TableGrid, tables: list[np.ndarray]) -> list:
    """The GCF tables as read-only OpenCL images for the register kernels
    (:func:`gcf_texels`): ``[image_u, image_v]`` (separable) or ``[image]``;
    real separable tables one channel (``CL_R``), complex ones ``CL_RG``, or
    ``CL_RGBA`` where the device lacks ``CL_RG`` float images (PyPI's PoCL
    3.0).  ValueError where the device cannot hold them
    (:func:`gcf_image_fits`)."""
    profile = DeviceProfile.from_device(queue.device)
    ok, why = gcf_image_fits(profile, grid.support, grid.table_oversample, grid.w_planes,
                             grid.separable, grid.real)
    if not ok:
        raise ValueError(f"gcf_read={grid.gcf_read!r} impossible on "
                         f"{profile.device_name!r}: {why}")
    shape = gcf_image_shape(grid.support, grid.table_oversample, grid.w_planes, grid.separable)
    kind = cl.mem_object_type.IMAGE2D if len(shape) == 2 else cl.mem_object_type.IMAGE3D
    supported = {(f.channel_order, f.channel_data_type) for f in
                 cl.get_supported_image_formats(queue.context, cl.mem_flags.READ_ONLY, kind)}
    real = grid.separable and grid.table_real
    orders = ((1, cl.channel_order.R),) if real else ((2, cl.channel_order.RG),)
    orders += ((4, cl.channel_order.RGBA),)
    channels, order = next(((c, o) for c, o in orders
                            if (o, cl.channel_type.FLOAT) in supported), orders[-1])
    image_format = cl.ImageFormat(order, cl.channel_type.FLOAT)
    images = []
    for table in tables:
        texels = gcf_texels(table.real if real else table, grid.separable, channels)
        images.append(cl.create_image(queue.context,
                                      cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                      image_format, shape=shape, hostbuf=texels))
    return images


def gcf_image_params(grid: TableGrid) -> dict:
    """Template parameters of ``gcf_image.cl.mako`` for ``grid``: how a
    record's sub-pixel index (of ``grid.oversample`` steps) becomes a texel
    coordinate."""
    support, table_o, steps = grid.support, grid.table_oversample, grid.steps
    # flat sample m = j O + (f' - (S O')//2) / steps + (S O)//2 for position
    # sub-pixel f' of O' = O steps, plus 0.5 to the texel's centre: exact in
    # float (a multiple of 1/2)
    shift = (support * table_o) // 2 - ((support * grid.oversample) // 2) / steps + 0.5
    return {"gcf_read": grid.gcf_read, "table_oversample": table_o, "steps": steps,
            "coord_shift": repr(float(shift)) + "f",
            "image_planes": (not grid.separable) and grid.w_planes > 1}


def cpu_vector_tiles(profile: DeviceProfile) -> bool:
    """CPUs whose compiler builds the vector tile (its totals are double)."""
    return profile.device_type == "cpu" and profile.vector_kernels and profile.fp64


def max_table_support(profile: DeviceProfile) -> int:
    """Widest table the tile spread takes with tiles that read only their
    nearest neighbours' bins: the CPUs' vector tile (64 x 64 tiles,
    full-slice rows of up to :data:`VECTOR_SLICE_TAPS` taps) where the
    compiler builds it, else :data:`MAX_TABLE_SUPPORT`.  Wider tables take
    lane tiles that read more neighbours (the deterministic spread there;
    the register spread is the faster)."""
    if cpu_vector_tiles(profile):
        return VECTOR_SLICE_TAPS
    return MAX_TABLE_SUPPORT


def table_tiles(profile: DeviceProfile, support: int) -> TileShape:
    """Spreading tile of the table kernel for a device and support.

    GPUs: the ES path's shapes (8 x 8 in 4 groups up to W 9, 16 x 32 up to
    17), 32 x 32 above (reading ``TileShape.reach`` neighbours per axis
    above W 33).  CPUs up to W 64: the ES path's vector tile
    (``spread_vector``, 16 x 16, 32 x 32 above W 16, 64 x 64 above 32; real
    separable tables up to W 16 as a point's two rows of taps, others as
    its slice: :attr:`TableGrid.vector_source`) where the compiler builds it
    (``profile.vector_kernels``: not PyPI's PoCL 3.0).  Other devices run the GPU
    kernel with square tiles of one group (8, 16 or 32 lanes), as do CPUs
    above W 64 (on CPUs dense tiles split into chunks for the cores,
    :func:`clgrid.core.spread.work_list`).  Intel CPU
    runtime, 1.9 M points, W 8, 1024^2 (2026-11-23): 8 x 8: 0.08 s; 8 x 8 in
    4 groups: 0.33 s; 16 x 16: 0.86 s."""
    if profile.device_type == "gpu":
        if support <= 9:
            return TileShape(8, 8, 4096, groups=4)
        return TileShape(16, 32, 2048) if support <= 17 else TileShape(32, 32, 2048)
    if cpu_vector_tiles(profile) and support <= VECTOR_SLICE_TAPS:
        # a footprint's halo reaches one tile on: tiles of at least W - 1
        edge = max(VECTOR_TAPS, row_taps(support))
        return TileShape(edge, edge, vector=True)
    if support <= 9:
        return TileShape(8, 8)
    return TileShape(16, 16) if support <= 17 else TileShape(32, 32)


def staging_bytes(grid: TableGrid, tiles: TileShape) -> int:
    """Local memory of one work-group of the table spread."""
    real = np.dtype(grid.real).itemsize
    batch = tiles.staged
    if grid.separable:
        ku = real if grid.table_real else 2 * real
        per_point = 8 + grid.support * (ku + 2 * real)
    else:
        per_point = 8 + 2 * real + 4
    return batch * per_point + (tiles.groups - 1) * tiles.tile_u * tiles.lanes * 16


def fit_staging(grid: TableGrid, tiles: TileShape, profile: DeviceProfile) -> TileShape:
    """``tiles`` with its batch halved until a work-group's staging fits the
    local memory (complex separable tables above W 95 on the H200's 48 KiB,
    real ones above W 127), down to one point at a time (where even that does
    not fit, :func:`check_tiles` refuses it); as it is where it fits, is a
    vector tile or sets its batch."""
    if tiles.vector or tiles.batch:
        return tiles
    batch, fitted = tiles.staged, tiles
    while staging_bytes(grid, fitted) > profile.local_mem_bytes and batch > 1:
        batch //= 2
        fitted = dataclasses.replace(tiles, batch=batch)
    return fitted


def check_tiles(grid: TableGrid, tiles: TileShape, profile: DeviceProfile) -> None:
    """A tile the table spread can run with on this device, or ValueError."""
    tiles.check(grid.support, VECTOR_SLICE_TAPS if grid.vector_source == "table_full"
                else VECTOR_TAPS, wide=True)
    tiles.check_device(profile)
    if tiles.plane_block != 1:
        raise ValueError("the table spread grids one plane a polarisation: plane_block 1")
    if tiles.vector:
        if grid.support > VECTOR_SLICE_TAPS:
            raise ValueError(f"a vector tile takes support <= {VECTOR_SLICE_TAPS}, "
                             f"got {grid.support}")
        return
    need = staging_bytes(grid, tiles)
    if need > profile.local_mem_bytes:
        raise ValueError(f"tile {tiles.tile_u}x{tiles.lanes} in {tiles.groups} groups needs "
                         f"{need} B of local memory staging {tiles.staged} points at a time; "
                         f"the device has {profile.local_mem_bytes}")


@dataclasses.dataclass
class TablePoints:
    """Visibilities binned by tile on the device, with their table indices.

    ``points.cells[i]``: (footprint start y0, x0, table index | conjugated
    bit, visibility index) of the i-th kept point in sorted order.
    ``n_flagged`` (all polarisations flagged), ``n_offgrid`` (footprint off
    the grid or W beyond the table), ``n_nonfinite`` (uvw not finite): left
    out.
    """

    points: PointSet
    n_vis: int
    n_flagged: int
    n_offgrid: int
    n_nonfinite: int
    #: The :attr:`clgrid.core.setpoints.SetPoints.binning` of the set points
    #: that made them: spreading them with another binning would read past
    #: the bins.
    binning: tuple = ()

    @property
    def n_kept(self) -> int:
        return self.points.n_valid

    #: Points kept (the engine's name, as :class:`clgrid.core.setpoints.PointSet`'s).
    n_valid = n_kept


@dataclasses.dataclass(frozen=True)
class TablePositions:
    """Set points of a table gridder (:class:`clgrid.core.setpoints.PositionSource`
    of :class:`clgrid.core.setpoints.SetPoints`, ``core_setpoints.cl.mako``
    with ``positions="table"``): ``order='tile'`` bins the visibilities by
    the tile of their footprint start (with bin starts, for the tile spread),
    ``order='cell'`` sorts them by the start cell itself, row-major, then by
    table slice (32-bit keys where the (cell, slice) pairs fit, else 64-bit;
    for the register spread, :mod:`clgrid.core.register`, which merges the
    equal points this makes adjacent).  Flagged, off-grid and non-finite
    points are counted and left out; each kept point's footprint start and
    table index are kept (``table_records``).  ``wide_keys``: 64-bit keys
    in the cell order whatever the grid (None: where needed; tests,
    benchmarks)."""

    grid: TableGrid
    order: str = "tile"
    wide_keys: bool | None = None

    n_counts = 3   # flagged, off the grid, not finite
    kernels = ("table_keys", "table_records")
    per_call = True   # a plan per call or Gridder.plan
    n_wbins = 1
    split_bins = False   # the ES source's alone

    def __post_init__(self):
        if self.order not in KEY_ORDERS:
            raise ValueError(f"order must be one of {KEY_ORDERS}, got {self.order!r}")
        if self.order == "cell" and self.n_cell_keys >= 2 ** 64 - 1:
            g = self.grid
            raise ValueError(f"a {g.ny} x {g.nx} grid of {g.w_planes} w planes has "
                             "too many (cell, slice) pairs for 64-bit sort keys")
        if self.wide_keys and self.order != "cell":
            raise ValueError("wide_keys: the cell order's keys only")

    @property
    def n_cell_keys(self) -> int:
        """Sort keys of the cell order: (cell, table slice) pairs."""
        g = self.grid
        return g.nx * g.ny * g.w_planes * g.oversample ** 2

    @property
    def key_dtype(self) -> np.dtype:
        # 32-bit keys where the (cell, slice) pairs fit below the invalid key
        # (a third less to move per radix pass than 64-bit ones)
        wide = self.wide_keys
        if wide is None:
            wide = self.order == "cell" and self.n_cell_keys >= 2 ** 32 - 1
        return np.dtype(np.uint64 if wide else np.uint32)

    def float_float(self, queue: cl.CommandQueue) -> bool:
        """Positions in float-float on devices without fp64."""
        return not DeviceProfile.from_device(queue.device).fp64

    def params(self, tiles: TileShape, as_float_float: bool) -> dict:
        g = self.grid
        return {"support": g.support, "tile_u": tiles.tile_u, "tile_v": tiles.lanes,
                "do_w": False, "real": real_dtype_name(g.real), "positions": "table",
                "oversample": g.oversample, "conjugate": g.conjugate_negative_w,
                "w_planes": g.w_planes, "key_order": self.order,
                "wide_keys": self.key_dtype == np.uint64, "float_float": as_float_float}

    def extent(self, tiles: TileShape) -> tuple[int, int]:
        """The grid padded to whole tiles (the table grid is not periodic)."""
        return round_up(self.grid.ny, tiles.tile_u), round_up(self.grid.nx, tiles.lanes)

    def check_call(self, n_vis: int, flags_d: cla.Array | None) -> None:
        if n_vis >= 2 ** 31:
            raise ValueError(f"{n_vis} visibilities: the core takes fewer than 2**31 "
                             "per call; grid the rows in parts (out=)")

    def _geometry_args(self, as_float_float: bool) -> tuple:
        g = self.grid
        w_step = g.w_step_lambda if g.w_planes > 1 else 1.0
        if as_float_float:
            return (np.int32(g.nx), np.int32(g.ny), *position_args(
                [g.nx * g.cell_size_rad, g.ny * g.cell_size_rad, 1.0 / w_step], True))
        return (np.int32(g.nx), np.int32(g.ny), *position_args([g.cell_size_rad, w_step], False))

    def key_args(self, stage, flags_d: cla.Array | None, npol: int) -> tuple:
        return (*self._geometry_args(stage.float_float), np.int32(stage.ntiles_v),
                (flags_d if flags_d is not None else stage._dummy_flags).data,
                np.uint32(npol), np.int32(flags_d is not None))

    def record_args(self, stage) -> tuple:
        return self._geometry_args(stage.float_float)

    def record_outputs(self, queue: cl.CommandQueue, n_valid: int, allocator) -> dict:
        return {}   # the table index rides in the cells

    @property
    def binned(self) -> tuple:
        """What the points' bins depend on besides the tile: equal for
        interchangeable set points (how the table is read is not: a buffer's
        and an image's points are the same, those of image-linear's finer
        positions are not, by their oversampling)."""
        grid = self.grid
        return (dataclasses.replace(grid, gcf_read="buffer" if grid.steps == 1
                                    else grid.gcf_read), self.order)

    def result(self, points: PointSet, counts: np.ndarray, n_vis: int,
               binning: tuple) -> "TablePoints":
        n_flagged, n_offgrid, n_nonfinite = (int(c) for c in counts)
        return TablePoints(points, n_vis, n_flagged, n_offgrid, n_nonfinite, binning)


class TableValues:
    """Every polarisation's values in the points' sorted order (kernel
    ``gather_table_values``): what the tile spread adds (the register spread
    sums them per record instead, :mod:`clgrid.core.register`)."""

    def __init__(self, queue: cl.CommandQueue, grid: TableGrid,
                 kernels: Callable[[str, np.dtype, bool, bool], cl.Kernel]):
        self.queue, self.grid = queue, grid
        #: ``kernels(name, vis_real, weighted, masked)``: the spread stage's builds.
        self.kernels = kernels
        self._dummy_real = cla.empty(queue, 1, grid.real)
        self._dummy_flags = cla.empty(queue, 1, np.uint8)
        self._values: list[cla.Array] = []

    def __call__(self, table_points: TablePoints, vis_d: cla.Array, wgt_d: cla.Array | None,
                 flags_d: cla.Array | None) -> list[cla.Array]:
        """One (n_kept,) complex array per polarisation: the visibility times
        its weight, zero where flagged, conjugated where set points negated
        uvw; ValueError when a kept visibility or weight is not finite."""
        npol = vis_d.shape[-1]
        n_valid = table_points.n_kept
        while len(self._values) < npol:
            self._values.append(cla.empty(self.queue, 1, self.grid.complex_dtype))
        vis_real = np.float32 if vis_d.dtype == np.complex64 else np.float64
        kernel = self.kernels("gather_table_values", vis_real,
                              wgt_d is not None, flags_d is not None)
        n_bad = cla.zeros(self.queue, 1, np.uint32)
        for pol in range(npol):
            if self._values[pol].size < n_valid:
                self._values[pol] = cla.empty(self.queue, n_valid, self.grid.complex_dtype)
            if n_valid:
                launch(kernel, self.queue, (n_valid,), table_points.points.cells.data,
                       np.uint32(n_valid), vis_d.data, np.uint32(npol), np.uint32(pol),
                       (wgt_d if wgt_d is not None else self._dummy_real).data,
                       (flags_d if flags_d is not None else self._dummy_flags).data,
                       self._values[pol].data, n_bad.data, group=(256,))
        bad = int(n_bad.get()[0]) if n_valid else 0
        if bad:
            raise ValueError(f"vis or weights contain {bad} NaN/Inf value(s) among the gridded "
                             "visibilities; flag them instead")
        return self._values[:npol]


def vector_taps(queue: cl.CommandQueue, grid: TableGrid,
                tables_d: list[cla.Array]) -> list[cla.Array]:
    """The CPU vector kernels' taps (``spread_vector``,
    ``interpolate_table_records_vector``): each row of the real separable
    tables (u, v) as TAPS reals, or each row of each slice of a full table as
    TAPS complex weights, zeros past the support (one vector load a row).
    Complex separable tables, and real ones wider than :data:`VECTOR_TAPS`,
    become full slices, ``table_v[p, fy, jv] *
    table_u[p, fx, ju]`` at index ``(p O + fy) O + fx`` (as the set points
    index full tables): a point's row is then one complex vector, as for
    W-projection tables (:attr:`TableGrid.vector_source`)."""
    support = grid.support
    taps_n = row_taps(support)
    if grid.vector_source == "table_full":
        if grid.separable:
            table_u, table_v = (t.get().reshape(-1, grid.oversample, support)
                                for t in tables_d[:2])
            slices = (table_v[:, :, None, :, None] * table_u[:, None, :, None, :]).reshape(
                -1, support, support)
        else:
            slices = tables_d[0].get().reshape(-1, support, support)
        padded = np.zeros(slices.shape[:2] + (taps_n,), grid.complex_dtype)
        padded[..., :support] = slices
        return [cla.to_device(queue, padded)]
    taps = []
    for table_d in tables_d[:2]:
        rows = table_d.get().real.reshape(-1, support)
        padded = np.zeros((rows.shape[0], taps_n), grid.real)
        padded[:, :support] = rows
        taps.append(cla.to_device(queue, padded))
    return taps


@dataclasses.dataclass
class TableSpreadState:
    """What a spread stage keeps for a table source: its value gathering,
    the CPU vector kernel's taps and the padded planes (made when needed)."""

    gather: TableValues
    taps: list
    padded: bool
    planes: cla.Array | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class TableKernel:
    """The table gridders' kernel source (:class:`clgrid.core.spread.KernelSource`,
    the configuration of the shared :class:`clgrid.core.spread.Spreader`):
    the weights read from the GCF tables ``tables_d`` -- the ``spread``
    kernel's extra arguments (``kernel_source="table"`` or ``"table_full"``),
    on CPUs each point's rows as vector taps (:func:`vector_taps`) -- every
    polarisation's values gathered at once (``gather_table_values``: weight,
    flags, conjugation, the NaN check), each polarisation its own plane of
    the caller's (npol, ny, nx) grid, which is padded up to whole tiles and
    copied (or added) back (``crop_planes``) where the sides differ, or where
    the vector tile (which writes whole planes) adds to it."""

    grid: TableGrid
    tables_d: tuple

    do_w = False

    @property
    def vis_real(self) -> np.dtype:
        return self.grid.real

    @property
    def grid_complex(self) -> np.dtype:
        return self.grid.complex_dtype

    @property
    def kernel_args(self) -> tuple:
        return tuple(table.data for table in self.tables_d)

    def float_float(self, queue: cl.CommandQueue) -> bool:
        """No fp64 on the device: the tiles' totals in compensated float."""
        return not DeviceProfile.from_device(queue.device).fp64

    def grid_layout(self, tiles: TileShape) -> GridLayout:
        """The work lists' view of the grid: one plane, one w bin, the
        table's support, sides padded to whole tiles (as the set points bin)."""
        g = self.grid
        return GridLayout(KernelChoice(g.support, 0.0, 1.0, 0.0), round_up(g.ny, tiles.tile_u),
                          round_up(g.nx, tiles.lanes), (0.0, 0.0), 1, 1.0, 0.0)

    def params(self, tiles: TileShape, weighted: bool, masked: bool, as_float_float: bool,
               kept_phases: bool, vis_real: np.dtype | None) -> dict:
        g = self.grid
        return {"real": real_dtype_name(g.real),
                "vis_real": real_dtype_name(vis_real if vis_real is not None else g.real),
                "support": g.support, "beta": 0.0, "do_w": False, "shifted": False,
                "weighted": weighted, "masked": masked, "with_f64": not as_float_float,
                "float_float": as_float_float,
                "kernel_source": g.vector_source if tiles.vector else g.kernel_source,
                "oversample": g.oversample, "table_real": g.table_real,
                "row_taps": row_taps(g.support), "kernel_eval": "exp", "horner": []}

    def kernel_params(self, name: str) -> dict:
        """The records-as-vectors kernel reads complex separable tables as
        full slices (:func:`vector_taps`): built on its own."""
        if name == "interpolate_table_records_vector":
            return {"kernel_source": self.grid.vector_source, "record_vector": True}
        return {}

    def spread_state(self, stage) -> TableSpreadState:
        def kernels(name: str, vis_real, weighted: bool, masked: bool) -> cl.Kernel:
            return stage.built(name, weighted, masked, False, np.dtype(vis_real))
        layout, g = stage.layout, self.grid
        return TableSpreadState(
            TableValues(stage.queue, g, kernels),
            vector_taps(stage.queue, g, list(self.tables_d)) if stage.tiles.vector else [],
            (layout.nu, layout.nv) != (g.ny, g.nx))

    def work_cache(self, stage, points: PointSet) -> dict:
        """The points' own: a table plan lives for one call (or one
        ``Gridder.plan``) of a gridder used by one thread at a time, and a
        stage's cache would keep every call's points."""
        return points.work

    def spread_parts(self, stage, job: SpreadJob) -> tuple[list, Callable | None]:
        """Every polarisation's launch into its own plane, after one
        gathering of all their values; then the crop of padded planes."""
        check_table_job(job)
        state, points = stage.state, job.points.points
        npol = job.vis_d.shape[-1]
        values = state.gather(job.points, job.vis_d, job.wgt_d, job.mask_d)
        # the vector tile writes whole planes: adding to a grid goes through planes
        through = state.padded or (stage.tiles.vector and job.accumulate)
        planes = self._planes(stage, npol) if through else job.planes_d
        accumulate = job.accumulate and not through
        parts = []
        for pol in range(npol):
            if stage.tiles.vector:
                parts.append(SpreadPart(
                    points, stage.work(points, 0, 1), row_view(planes, pol, pol + 1), 0, 1,
                    False, vector_head=(points.cells.data, values[pol].data,
                                        points.bin_start.data, *(t.data for t in state.taps)),
                    phase_args=(np.float64(0), np.float64(0),   # no facet phase
                                stage._dummy_scratch.data)))
                continue
            work = self._work(stage, points, pol, accumulate)
            if work.n_items:
                parts.append(SpreadPart(points, work, planes, 0, 1, accumulate,
                                        values_d=values[pol]))
        if not through:
            return parts, None
        return parts, functools.partial(self._crop, stage, planes, job.planes_d, npol,
                                        job.accumulate)

    def _planes(self, stage, npol: int) -> cla.Array:
        """The stage's padded planes of ``npol`` polarisations, reused."""
        state, layout = stage.state, stage.layout
        shape = (npol, layout.nu, layout.nv)
        if state.planes is None or state.planes.shape != shape:
            state.planes = cla.empty(stage.queue, shape, self.grid.complex_dtype)
        return state.planes

    @staticmethod
    def _work(stage, points: PointSet, pol: int, accumulate: bool) -> WorkList:
        """The work list of polarisation ``pol`` (its plane index in the items),
        kept with the points: the first one is planned from the bins, the
        others from one host copy of it."""
        base = stage.work(points, 0, 1, accumulate)
        if pol == 0:
            return base
        work = points.work
        key = ("pol", pol, accumulate)
        if key not in work:
            host_key = ("host", accumulate)
            if host_key not in work:
                work[host_key] = tuple(
                    None if part is None else part.get() for part in (base.items, base.folds))
            items, folds = (None if part is None else part.copy()
                            for part in work[host_key])
            if items is not None:
                items[:, 1] = pol
            if folds is not None:
                folds[:, 1] = pol
            work[key] = WorkList(
                cla.to_device(stage.queue, items) if items is not None else None,
                cla.to_device(stage.queue, folds) if folds is not None else None,
                base.scratch, base.n_items, base.n_folds, chunk_points=base.chunk_points,
                n_wide_folds=base.n_wide_folds)
        return work[key]

    def _crop(self, stage, planes: cla.Array, grid_d: cla.Array, npol: int,
              accumulate: bool) -> None:
        """The planes' corner copied (or added) into the caller's grid."""
        g, layout = self.grid, stage.layout
        launch(stage.built("crop_planes"), stage.queue, (g.nx, g.ny, npol), planes.data,
               np.int32(layout.nu), np.int32(layout.nv), grid_d.data, np.int32(g.ny),
               np.int32(g.nx), np.int32(accumulate))

    # ------------------------------------------------------------ interpolation
    def record_kernels(self, profile: DeviceProfile, record_group: int | None,
                       record_vector: bool | None) -> tuple[int, bool]:
        """(work-items a record, records by rows as vectors): the device's
        choice (:func:`default_record_kernels`) where not given."""
        default_group, default_vector = default_record_kernels(profile, self.grid.support)
        if record_group is None:
            record_group = default_group
        if record_group < 0 or record_group & (record_group - 1):
            raise ValueError(f"record_group must be 0 or a power of two, got {record_group}")
        if record_vector is None:   # CPUs whose compiler builds the vector kernels
            record_vector = default_vector and not record_group
        return (int(record_group),
                bool(record_vector and self.grid.support <= RECORD_VECTOR_MAX_SUPPORT))

    def interpolate_params(self, stage) -> dict:
        return {"vector": False, "points_per_item": 1, "record_group": stage.record_group,
                "record_vector": False, "records_per_item": RECORDS_PER_ITEM}

    @property
    def _tables(self) -> list[cla.Array]:
        """(table_u, table_v), or the full table twice."""
        return list(self.tables_d) if len(self.tables_d) == 2 else list(self.tables_d) * 2

    @property
    def table_args(self) -> tuple:
        """The interpolation kernels' (table_a, table_b): (table_v, table_u) of
        separable tables (rows, then columns), the full table twice."""
        return tuple(self._tables[::-1] if self.grid.separable else self._tables)

    def interpolate(self, stage, job: InterpolateJob) -> None:
        """Every polarisation of the job's points from the (npol, ny, nx)
        grid ``job.planes_d`` into the zeroed ``job.out_d``, the job's mask
        the flags: a point a work-item, or a record where the stage has
        records (the kernel :attr:`Interpolator.record_group`,
        ``record_vector`` and ``register`` pick)."""
        check_table_job(job)
        if job.accumulate:
            raise ValueError("the table interpolation writes its visibilities (no accumulate)")
        table_points = job.points
        if table_points.n_kept == 0:
            return
        records = stage.records(table_points) if stage.records is not None else None
        wgt_d, flags_d, npol = job.wgt_d, job.mask_d, job.npol
        g, cells = self.grid, table_points.points.cells
        common = (job.planes_d.data, np.int32(g.nx), np.int32(g.ny), np.uint32(npol),
                  *(t.data for t in self.table_args), *stage._weights(wgt_d, flags_d),
                  job.out_d.data)
        weighted, masked = wgt_d is not None, flags_d is not None
        if records is not None and stage.register is not None:
            self._by_register(stage, records, job, cells)
        elif records is None:
            launch(stage.built("interpolate_table", weighted, masked), stage.queue,
                   (table_points.n_kept,), cells.data, np.uint32(table_points.n_kept), *common)
        elif records.n_records and stage.record_vector:
            stage.built("interpolate_table_records_vector", weighted, masked)(
                stage.queue, (-(-records.n_records // RECORDS_PER_ITEM),), (1,), cells.data,
                records.cells.data, records.start.data, np.uint32(records.n_records),
                *common[:6], *(t.data for t in self._vector_taps(stage)), *common[6:])
        elif records.n_records and stage.record_group:
            group = stage.record_group
            stage.built("interpolate_table_records_group", weighted, masked)(
                stage.queue, (records.n_records * group,), (group,), cells.data,
                records.cells.data, records.start.data, np.uint32(records.n_records), *common)
        elif records.n_records:
            launch(stage.built("interpolate_table_records", weighted, masked), stage.queue,
                   (records.n_records,), cells.data, records.cells.data, records.start.data,
                   np.uint32(records.n_records), *common)

    def _vector_taps(self, stage) -> list[cla.Array]:
        """The vector kernel's taps, made once, when records are first
        degridded that way (a Gridder's interpolator never is)."""
        if stage._taps is None:
            stage._taps = vector_taps(stage.queue, self.grid, self._tables)
        return stage._taps

    @staticmethod
    def _by_register(stage, records, job: InterpolateJob, cells: cla.Array) -> None:
        """Records by register blocks: partial sums, then their fixed-order
        totals given to the points (``sum_record_partials``), slice by slice."""
        register = stage.register
        finish = stage.built("sum_record_partials", job.wgt_d is not None,
                             job.mask_d is not None)
        for first, count in register.slices(records.n_records):
            partials = register.partials(records, first, count, job.planes_d)
            launch(finish, stage.queue, (count,), cells.data, records.start.data,
                   np.uint32(first), np.uint32(count), np.uint32(register.n_chunks),
                   partials.data, np.uint32(job.npol), *stage._weights(job.wgt_d, job.mask_d),
                   job.out_d.data)


def check_table_job(job) -> None:
    """A job the table stages take: every polarisation (``pol`` None) of one
    grid (plane 0 of one)."""
    if job.pol is not None or job.plane0 != 0 or job.n_pass != 1:
        raise ValueError("the table stages grid every polarisation into one grid: "
                         "pol None, plane 0 of 1")


#: GPUs: from this support on, degridding by records gives each record a
#: work-group (``interpolate_table_records_group``) instead of a work-item.
RECORD_GROUP_MIN_SUPPORT = 16
#: Work-items of such a group.
RECORD_GROUP = 128
#: CPUs: the widest table degridded by records with rows as vectors (in
#: pieces of 16 reals, as the vector tile spreads them).
RECORD_VECTOR_MAX_SUPPORT = VECTOR_SLICE_TAPS
#: Records a work-item of that kernel takes.
RECORDS_PER_ITEM = 64


def default_record_kernels(profile: DeviceProfile, support: int) -> tuple[int, bool]:
    """How a device degrids records by default: (work-items a record, 0 for
    one; rows as vectors): GPUs a work-group of :data:`RECORD_GROUP` from
    :data:`RECORD_GROUP_MIN_SUPPORT`, CPUs whose compiler builds the vector
    kernels rows as vectors up to :data:`RECORD_VECTOR_MAX_SUPPORT`."""
    group = (min(RECORD_GROUP, profile.max_work_group_size)
             if profile.device_type == "gpu" and support >= RECORD_GROUP_MIN_SUPPORT else 0)
    vector = (profile.device_type == "cpu" and profile.vector_kernels and not group
              and support <= RECORD_VECTOR_MAX_SUPPORT)
    return group, vector


__all__ = ["GCF_READS", "LINEAR_STEPS", "gcf_image_fits", "gcf_image_params",
           "gcf_image_shape", "gcf_images", "gcf_texels", "linear_steps",
           "KEY_ORDERS", "MAX_TABLE_SUPPORT", "TABLE_CONJUGATE", "TableGrid",
           "default_record_kernels", "max_table_support",
           "TableKernel", "TablePoints", "TablePositions", "TableSpreadState",
           "TableValues",
           "check_table_job", "check_tiles", "fit_staging", "staging_bytes", "table_tiles",
           "vector_taps", "VECTOR_SLICE_TAPS", "VECTOR_TAPS"]

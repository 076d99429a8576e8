"""Gridding core, tabulated kernels: the register-accumulation spread
(``templates/core_spread_register.cl.mako``).

Romein (2012)'s work distribution with Merry (2016)'s thread coarsening, on
the core's device set points: the points are sorted by footprint start
cell and table slice (:class:`clgrid.core.setpoints.SetPoints` of
:class:`clgrid.core.table.TablePositions` with ``order='cell'``), each run
of equal ones is one *record* (a device cut,
:class:`RecordScan`, once per set of points; the values summed per call by
``gather_records``, ``templates/core_records.cl.mako``: Muscat and Merry's
compression, made on the device), and a work-group streams a contiguous
run of records past a box of ``bin_u x bin_v`` grid points, each work-item holds ``block_u x block_v`` of those points (all
polarisations, or ``pol_block`` of them) in registers and adds them to the grid with one float atomic
per point and polarisation only when the stream moves its block.  Every
grid point of every footprint is one complex multiply-add per polarisation,
with no search over tiles: the spread for supports wider than the tiles
take, and the default on devices with native float atomics.  Atomics add
in a varying order, so the last bits of the grid vary run to run (the tile
spread, :class:`clgrid.core.spread.Spreader` of a
:class:`clgrid.core.table.TableKernel`, is the deterministic one).

:class:`RegisterSpreader` is a spread strategy of the one engine
(:class:`clgrid.core.engine.Engine`), :class:`RecordScan` its records stage
and :class:`RegisterInterpolator` the degridding a
:class:`clgrid.core.spread.Interpolator` of a :class:`clgrid.core.table.TableKernel`
runs by register blocks: chosen
by :func:`clgrid.core.strategies.table_engine`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.kernels import KernelTemplate, launch, real_dtype_name
from ..device.profiles import DeviceProfile
from .engine import SpreadJob
from .plan import params_of
from .table import (RECORD_VECTOR_MAX_SUPPORT, TableGrid, TablePoints, check_table_job,
                    gcf_image_params, gcf_images)

#: Coarsening factors a work-item may take along each axis.
REGISTER_BLOCKS = (1, 2, 4, 8)
#: Most complex sums (grid points times polarisations) a work-item holds:
#: 4 x 4 points of 4 polarisations (128 registers of sums).
MAX_REGISTER_SUMS = 64
#: Most points a record (runs are cut every MAX_RUN sorted points): bounds
#: the serial sum of one work-item of gather_records in a dense cell.
MAX_RUN = 64
#: Bytes of local memory per staged record: its cell and box (two int4).
_CELL_BYTES = 32


@dataclasses.dataclass(frozen=True)
class RegisterParams:
    """Launch geometry of the register spread (tunable).

    block_u, block_v
        Grid points per work-item along x (u) and y (v): Merry's coarsening.
    wg_size
        Work-items per group; a box of fewer blocks runs ``wg_size //
        blocks`` independent point streams in one group, one of more blocks
        is split over several groups that see the same points.
    batch
        Records each stream stages in local memory per pass.
    points_per_group
        Consecutive records per work-group (load balance against flushes
        at run ends).
    pol_block
        Polarisations a work-item holds (dividing npol; 0: all): fewer
        sums in registers, more work-items a box.
"""

    block_u: int = 2
    block_v: int = 2
    wg_size: int = 256
    batch: int = 64
    points_per_group: int = 4096
    pol_block: int = 0

    def pols(self, npol: int) -> int:
        """Polarisations a work-item holds for ``npol`` a visibility."""
        return self.pol_block or max(int(npol), 1)

    def validate(self, npol: int = 1) -> None:
        if self.block_u not in REGISTER_BLOCKS or self.block_v not in REGISTER_BLOCKS:
            raise ValueError(f"block_u and block_v must be in {REGISTER_BLOCKS}, got "
                             f"{self.block_u} x {self.block_v}")
        npol = max(int(npol), 1)
        if self.pol_block < 0 or (self.pol_block and npol % self.pol_block):
            raise ValueError(f"pol_block must divide npol ({npol}) or be 0 (all), got "
                             f"{self.pol_block}")
        if self.block_u * self.block_v * self.pols(npol) > MAX_REGISTER_SUMS:
            raise ValueError(f"block {self.block_u} x {self.block_v} of {self.pols(npol)} "
                             f"polarisations is more than {MAX_REGISTER_SUMS} complex sums "
                             "a work-item")
        if self.wg_size < 1 or self.batch < 1 or self.points_per_group < 1:
            raise ValueError("wg_size, batch and points_per_group must be >= 1")

    def bins(self, support: int) -> tuple[int, int]:
        """The box: smallest multiples of the block holding any block-aligned
        box around a ``support``-wide footprint."""
        return (-(-(support + self.block_u - 1) // self.block_u) * self.block_u,
                -(-(support + self.block_v - 1) // self.block_v) * self.block_v)


def default_register_params(profile: DeviceProfile, support: int, npol: int,
                            separable: bool = False, table_real: bool = False) -> RegisterParams:
    """Geometry from the device profile, as measured on the H200
    (benchmarks/RESULTS.md): GPUs 2 x 2 points a work-item, 256 work-items
    a group up to support 16 (several record streams a group), 128 above,
    2048 records a group (3-7% faster than 4096, fewer than 1024 flush
    more; 4 polarisations, 2026-11-23).  Separable tables (phased: one
    vector load a block) above 32: 4 x 4 in groups of 64 (2026-11-25,
    support 64 / 128 / 256, 4 polarisations: real tables 4233-4359 /
    5420-5495 / 6053-6194 G additions/s, complex 2710 / 3375 / 3723 against
    4 x 2's 2789 / 3213 / 3450), and for one polarisation of a real table
    8 x 8 in groups of 32 (2983 / 4631 / 6241, against 4 x 4's 3066 / 4196
    / 4862).  Four polarisations there: two a work-item (``pol_block``;
    H100, 2026-11-25: complex 2590-2608 / 3281-3307 / 3516-3579 against
    2405 / 3063 / 3383, real 4280 / 5369 / 6096 against 3928-3961 / 5326-5358
    / 6059-6088).  CPUs (Intel runtime, 2 cores): groups of 64 (the driver
    vectorises across items); separable tables 4 x 4 points a work-item for
    one polarisation (8 x 8 above support 32) and for more (2 x 2 up to
    support 16), full tables 2 x 2 for one polarisation and 1 x 1 for more.
    Wide tables (5000 rows x 16 channels, 1024^2, 2026-11-25, W 72 / 128,
    one polarisation: separable 8 x 8 0.23 / 0.52 s against 1 x 1's 0.88 /
    2.46 s, full 2 x 2 0.61 / 2.81 s against 1.40 / 9.48 s; four: separable
    4 x 4 1.09 / 2.36 s against 1.67 / 4.27 s); W 8 / 16 / 32 on a
    simulated track (1.92 M visibilities, 1024^2, 2026-11-25, one
    polarisation): separable 4 x 4 23 / 36 / 72 ms against 1 x 1's 34 / 91
    / 292 ms, full 2 x 2 13 / 19 / 42 ms against 17 / 36 / 124 ms
    (benchmarks/RESULTS.md, "CPU register geometry").  Fixed-point flushes
    take the same geometry: no other measured faster with them (H100,
    2026-11-27, RESULTS.md "deterministic=True by fixed-point register flushes")."""
    limit = int(profile.max_work_group_size)
    if profile.device_type != "gpu":
        if separable and npol == 1:
            block = (8, 8) if support > 32 else (4, 4)
        elif separable:
            block = (2, 2) if support <= 16 else (4, 4)
        else:
            block = (2, 2) if npol == 1 else (1, 1)
        return RegisterParams(*block, min(64, limit), 64, 4096)
    wg = 256 if support <= 16 else 128
    if support < 4:
        block = (1, 1)
    elif separable and support > 32:
        block, wg = ((8, 8), 32) if npol == 1 and table_real else ((4, 4), 64)
    else:
        block = (2, 2)
    # separable tables of 4 polarisations: two a work-item (complex: 115
    # registers instead of 254, twice the warps to hide the table reads)
    pol_block = 2 if separable and npol == 4 and support > 32 else 0
    while block[0] * block[1] * (pol_block or npol) > MAX_REGISTER_SUMS:
        block = (block[0], block[1] // 2) if block[1] > 1 else (block[0] // 2, 1)
    return RegisterParams(block[0], block[1], min(wg, limit), 64, 2048, pol_block)


def phased_table(table: np.ndarray, block: int, bin_: int, dtype) -> np.ndarray:
    """A separable table ``(w_planes, O, S)`` (real or complex) as the
    register spread reads it: for every row and phase ``f`` (the footprint start modulo
    ``block``) the row shifted right by ``f`` into ``bin_`` zeros, so that a
    block of a box always finds its ``block`` weights at an aligned place,
    the ones off the footprint zero: ``(w_planes * O, block, bin_)``."""
    rows = np.asarray(table).reshape(-1, table.shape[-1])
    support = rows.shape[1]
    phased = np.zeros((rows.shape[0], block, bin_), dtype)
    for phase in range(block):
        phased[:, phase, phase:phase + support] = rows
    return phased


def padded_slices(table: np.ndarray, support: int, params: RegisterParams) -> np.ndarray:
    """A full table's ``S x S`` slices with zeros around them wherever a
    block of a box can read (a box's blocks start up to a block less one
    before the footprint and end within the box, :meth:`RegisterParams.bins`):
    ``(slices, bin_v + 2 (block_v - 1), bin_u + 2 (block_u - 1))``, the
    footprint at ``(block_v - 1, block_u - 1)``.  The register kernels then
    test no bounds (as the imaging core's lane spread reads taps staged in place)."""
    slices = np.asarray(table).reshape(-1, support, support)
    bin_u, bin_v = params.bins(support)
    pad_u, pad_v = params.block_u - 1, params.block_v - 1
    padded = np.zeros((slices.shape[0], bin_v + 2 * pad_v, bin_u + 2 * pad_u), slices.dtype)
    padded[:, pad_v:pad_v + support, pad_u:pad_u + support] = slices
    return padded


def kernel_tables(queue: cl.CommandQueue, grid: TableGrid, tables_d: list[cla.Array],
                  params: RegisterParams) -> list[cla.Array]:
    """The tables as the register kernels read them: the full table's
    slices between zero pads (:func:`padded_slices`), separable ones phased
    (:func:`phased_table`, real where the grid's tables are) for ``params``'
    blocks."""
    if not grid.separable:
        return [cla.to_device(queue, padded_slices(tables_d[0].get(), grid.support, params))]
    table_real = bool(grid.table_real)
    weight = grid.real if table_real else grid.complex_dtype
    bin_u, bin_v = params.bins(grid.support)
    return [cla.to_device(queue, phased_table(table_d.get().real if table_real
                                              else table_d.get(), block, bin_, weight))
            for table_d, block, bin_ in ((tables_d[0], params.block_u, bin_u),
                                         (tables_d[1], params.block_v, bin_v))]


def table_arguments(queue: cl.CommandQueue, grid: TableGrid, tables_d: list[cla.Array],
                    params: RegisterParams) -> list:
    """The register kernels' table arguments: the buffers of
    :func:`kernel_tables`, or with ``grid.gcf_read`` an image the GCF
    images of :func:`clgrid.core.table.gcf_images` (made from the tables
    on the device)."""
    if grid.gcf_read == "buffer":
        return [t.data for t in kernel_tables(queue, grid, tables_d, params)]
    return gcf_images(queue, grid, [t.get() for t in tables_d])


def gcf_template_params(grid: TableGrid) -> dict:
    """The register templates' GCF read parameters: ``gcf_read`` and those
    of ``gcf_image.cl.mako`` (unused where the table is a buffer)."""
    return gcf_image_params(grid)


def as_register_params(value) -> RegisterParams | None:
    """A :class:`RegisterParams` from itself, a dict of its fields or None."""
    return params_of(value, RegisterParams, "register_params")


def _round_up(n: int, multiple: int) -> int:
    return -(-int(n) // multiple) * multiple


@dataclasses.dataclass
class Records:
    """Runs of sorted points with one footprint start and table slice (at
    most :data:`MAX_RUN` points each).

    ``cells[r]``: the first point's cell (y0, x0, table index | conjugated
    bit, visibility index) of record ``r``; its points are
    ``start[r] .. start[r + 1] - 1`` in sorted order."""

    cells: cla.Array
    start: cla.Array
    n_records: int


class RecordScan:
    """Compile-once cut of sorted points into :class:`Records`
    (``count_runs``, ``scan_tiles``, ``write_records`` in
    ``templates/core_records.cl.mako``: no atomics, the same records every
    run); ``group``: work-items a tile (default the device's: 256 on GPUs,
    1 on CPUs)."""

    def __init__(self, queue: cl.CommandQueue, grid: TableGrid, group: int | None = None):
        self.queue = queue
        profile = DeviceProfile.from_device(queue.device)
        if group is None:
            # CPUs: one work-item a tile, scanning it in order (no barriers:
            # 1.92 M points on the Intel runtime, 2 cores: 4.5 ms against
            # 30 ms with groups of 16, 2026-11-25)
            group = 256 if profile.device_type == "gpu" else 1
        if group < 1 or group & (group - 1):
            raise ValueError(f"group must be a power of two, got {group}")
        #: Work-items cutting one tile of points (1: in order, alone).
        self.group = min(group, int(profile.max_work_group_size))
        template = KernelTemplate(queue, "core_records.cl.mako", {
            "real": real_dtype_name(grid.real), "vis_real": real_dtype_name(grid.real),
            "npol": 1, "weighted": False, "masked": False, "group": self.group,
            "max_run": MAX_RUN, "float_float": not profile.fp64},
            need_f64=profile.fp64)
        self._count = template.kernel("count_runs")
        self._scan = template.kernel("scan_tiles")
        self._write = template.kernel("write_records")
        units = int(queue.device.max_compute_units)
        self._max_tiles = 8 * units if profile.device_type == "gpu" else 4 * units

    def __call__(self, table_points: TablePoints) -> Records:
        """The records of ``table_points`` (sorted by cell), kept with them."""
        work = table_points.points.work
        if "records" not in work:
            work["records"] = self._cut(table_points.points.cells, table_points.n_kept)
        return work["records"]

    def _cut(self, cells: cla.Array, n: int) -> Records:
        queue, group = self.queue, self.group
        start = cla.empty(queue, n + 1, np.uint32)
        record_cells = cla.empty(queue, max(n, 1), cells.dtype)
        if n == 0:
            start.fill(0)
            return Records(record_cells, start, 0)
        n_tiles = max(1, min(self._max_tiles, -(-n // group)))
        tile_size = _round_up(-(-n // n_tiles), group)
        n_tiles = -(-n // tile_size)
        tile_counts = cla.empty(queue, n_tiles, np.uint32)
        tile_first = cla.empty(queue, n_tiles, np.uint32)
        n_records = cla.empty(queue, 1, np.uint32)
        self._count(queue, (n_tiles * group,), (group,), cells.data, np.uint32(n),
                    np.uint32(tile_size), tile_counts.data)
        self._scan(queue, (group,), (group,), tile_counts.data, np.uint32(n_tiles),
                   tile_first.data, np.uint32(n), start.data, n_records.data)
        self._write(queue, (n_tiles * group,), (group,), cells.data, np.uint32(n),
                    np.uint32(tile_size), tile_first.data, start.data, record_cells.data)
        return Records(record_cells, start, int(n_records.get()[0]))


class RecordGather:
    """Per call: the summed values of every record (``gather_records``)."""

    def __init__(self, queue: cl.CommandQueue, grid: TableGrid, npol: int):
        self.queue, self.grid, self.npol = queue, grid, npol
        #: No fp64 on the device: the runs are summed in compensated float.
        self.float_float = not DeviceProfile.from_device(queue.device).fp64
        self._kernels: dict = {}
        self._dummy_real = cla.empty(queue, 1, grid.real)
        self._dummy_flags = cla.empty(queue, 1, np.uint8)
        self._values: cla.Array | None = None

    def _kernel(self, vis_real, weighted: bool, masked: bool) -> cl.Kernel:
        key = (np.dtype(vis_real), weighted, masked)
        if key not in self._kernels:
            template = KernelTemplate(self.queue, "core_records.cl.mako", {
                "real": real_dtype_name(self.grid.real), "vis_real": real_dtype_name(vis_real),
                "npol": self.npol, "weighted": weighted, "masked": masked, "group": 1,
                "max_run": MAX_RUN, "float_float": self.float_float},
                need_f64=not self.float_float)
            self._kernels[key] = template.kernel("gather_records")
        return self._kernels[key]

    def __call__(self, table_points: TablePoints, records: Records, vis_d: cla.Array,
                 wgt_d: cla.Array | None, flags_d: cla.Array | None) -> cla.Array:
        """(n_records, npol) summed values; ValueError when a kept visibility
        or weight is not finite."""
        if vis_d.shape[-1] != self.npol:
            raise ValueError(f"vis has {vis_d.shape[-1]} polarisations, the spread "
                             f"{self.npol}")
        n = records.n_records
        if self._values is None or self._values.shape[0] < max(n, 1):
            self._values = cla.empty(self.queue, (max(n, 1), self.npol),
                                     self.grid.complex_dtype)
        n_bad = cla.zeros(self.queue, 1, np.uint32)
        if n:
            vis_real = np.float32 if vis_d.dtype == np.complex64 else np.float64
            launch(
                self._kernel(vis_real, wgt_d is not None, flags_d is not None), self.queue,
                (n,), table_points.points.cells.data,
                records.start.data, np.uint32(n), vis_d.data,
                (wgt_d if wgt_d is not None else self._dummy_real).data,
                (flags_d if flags_d is not None else self._dummy_flags).data,
                self._values.data, n_bad.data)
            bad = int(n_bad.get()[0])
            if bad:
                raise ValueError(f"vis or weights contain {bad} NaN/Inf value(s) among the "
                                 "gridded visibilities; flag them instead")
        return self._values


class RegisterSpreader:
    """Compile-once register spread of one table grid on one device.

    Parameters
    ----------
    queue
        Command queue of the device.
    grid
        The table grid (:class:`TableGrid`).
    tables_d
        The GCF tables on the device: ``[table_u, table_v]`` (separable) or
        ``[table]`` (full), complex of the grid's precision.  Real
        separable tables (``grid.table_real``) are spread from real copies
        made here (half the multiply-adds); separable tables are phased by
        :func:`phased_table`.
    npol
        Polarisations per visibility.
    params
        :class:`RegisterParams` (default: :func:`default_register_params`).
    atomics
        Atomic path to force (``'cas'``, ``'native-cl'``, ``'native-ptx'``);
        default the device's best.
    count_flushes
        Count the block flushes (statistics, for benchmarks): after a call,
        :attr:`last_flushes` holds how many blocks were flushed.
    fixed_point
        Flushes add 64-bit fixed point with integer atomics
        (``templates/fixed_point.cl.mako``) into a scratch grid converted
        to the float grid after: integer sums do not depend on the order
        the flushes arrive in, so the grid is the same bits every call (the
        records, their streams and each work-item's order are fixed).  The
        scale is a power of two from a bound on every value added (the sum
        of ``|re| + |im|`` of the records' values times the table's largest
        modulus, summed on the device in a fixed order): resolution 2^-60 of
        that bound.  float32 grids and ``cl_khr_int64_base_atomics`` only
        (:func:`fixed_point_possible`).
    fixed_table_bound
        :func:`table_bound` of ``tables_d``, where the caller has it (an
        engine makes a spreader per workspace: one download of the tables
        for all); None: computed here.

    Attributes
    ----------
    kernel
        The built ``spread_register`` kernel (for profiles and instruction
        counts, e.g. ``benchmarks/gridding.py --ptx``).
    """

    adds_to_zeros = False   # it zeroes (or writes) its grid itself
    counts_nonfinite = False   # the table gridder checks its values itself

    #: Separable buffer tables: each work-group works out its records' row
    #: products G_v V once into local memory (``staged_rows``) instead of
    #: every work-item of a row doing so: complex tables always (an H100,
    #: supports 64 / 128 / 256: +3 / +10 / +14%), real ones where a group's
    #: work-items span at most :attr:`REAL_STAGED_ROWS` keys (their row
    #: products are half the multiplies: support 64, 5 keys, lost 6%; 256,
    #: 2 keys, gained 5-10%; benchmarks/RESULTS.md).
    stage_rows = True
    REAL_STAGED_ROWS = 3

    def __init__(self, queue: cl.CommandQueue, grid: TableGrid, tables_d: list[cla.Array],
                 npol: int, params: RegisterParams | None = None, atomics: str | None = None,
                 count_flushes: bool = False, fixed_point: bool = False,
                 fixed_table_bound: float | None = None):
        self.queue, self.grid = queue, grid
        self.table_real = bool(grid.separable and grid.table_real)
        profile = DeviceProfile.from_device(queue.device)
        self.npol = int(npol)
        self.params = params or default_register_params(profile, grid.support, self.npol,
                                                        grid.separable, self.table_real)
        self.params.validate(self.npol)
        if fixed_point:
            possible, why = fixed_point_possible(profile, grid.real)
            if not possible:
                raise ValueError(f"fixed-point sums impossible here: {why}")
        #: Flushes in 64-bit fixed point (the same bits every call).
        self.fixed_point = bool(fixed_point)
        bin_u, bin_v = self.params.bins(grid.support)
        self.tables_d = tables_d
        #: What the kernel reads (:func:`table_arguments`: buffers or images).
        self._kernel_tables = table_arguments(queue, grid, tables_d, self.params)
        pols = self.params.pols(self.npol)
        # one work-item per block position and polarisation group
        n_blocks = ((bin_u // self.params.block_u) * (bin_v // self.params.block_v)
                    * (self.npol // pols))
        wg = min(self.params.wg_size, int(profile.max_work_group_size))
        while True:
            n_sub = max(1, wg // n_blocks)
            staged_rows = self._staged_rows(grid, wg, n_sub, bin_u, bin_v)
            point_bytes = (_CELL_BYTES + self.npol * grid.complex_dtype.itemsize
                           + staged_rows * self.params.block_v * pols
                           * grid.complex_dtype.itemsize)
            batch = max(1, min(self.params.batch,
                               (profile.local_mem_bytes - 1024) // (n_sub * point_bytes)))
            template = KernelTemplate(queue, "core_spread_register.cl.mako", {
                "real": real_dtype_name(grid.real), "npol": self.npol,
                "support": grid.support, "oversample": grid.oversample,
                "separable": grid.separable, "table_real": self.table_real,
                "block_u": self.params.block_u,
                "block_v": self.params.block_v, "pol_block": pols,
                "bin_u": bin_u, "bin_v": bin_v,
                "wg_size": wg, "n_sub": n_sub, "batch": batch, "staged_rows": staged_rows,
                "count_flushes": bool(count_flushes), "fixed_point": self.fixed_point,
                "bound_group": FixedPointSums.group_for(profile),
                "with_f64": grid.real == np.float64, **gcf_template_params(grid)},
                atomics=atomics, need_f64=grid.real == np.float64)
            self.kernel = template.kernel("spread_register")
            limit = template.max_work_group_size(self.kernel)
            if wg <= limit:
                break
            wg = max(1, limit)   # registers limit this variant's group size
        self.wg_size, self.n_sub, self.batch = wg, n_sub, batch
        #: Row keys whose row products the group stages a record (0: none).
        self.staged_rows = staged_rows
        #: Groups along dimension 1 that share one box (a box of more blocks than wg_size).
        self.box_groups = 1 if n_sub > 1 else -(-n_blocks // wg)
        self.atomic_path = template.atomics["atomic_f64" if grid.real == np.float64
                                            else "atomic_f32"]
        self.records = RecordScan(queue, grid)
        self.count_flushes = bool(count_flushes)
        self._flush_count = cla.zeros(queue, 1, np.uint32)
        #: Blocks flushed by the last call (with ``count_flushes``), else None.
        self.last_flushes: int | None = None
        self.gather = RecordGather(queue, grid, self.npol)
        if self.fixed_point:
            bound = (fixed_table_bound if fixed_table_bound is not None
                     else table_bound(tables_d, grid.separable))
            self._fixed = FixedPointSums(queue, template, bound)

    def _staged_rows(self, grid: TableGrid, wg: int, n_sub: int, bin_u: int, bin_v: int) -> int:
        """Row keys (a block row of the box in one polarisation group) the
        work-items of one group span, where the group stages its records'
        row products G_v V once (:attr:`stage_rows`; separable buffer
        tables, one record stream a group; real ones spanning at most
        :attr:`REAL_STAGED_ROWS` keys), else 0."""
        if not (self.stage_rows and grid.separable and grid.gcf_read == "buffer"
                and n_sub == 1):
            return 0
        blocks_u = bin_u // self.params.block_u
        keys = (bin_v // self.params.block_v) * (self.npol // self.params.pols(self.npol))
        spanned = min((wg - 1) // blocks_u + 2, keys)
        return 0 if self.table_real and spanned > self.REAL_STAGED_ROWS else spanned

    @property
    def launch_geometry(self) -> str:
        """The spread's launch geometry, in words."""
        p = self.params
        pols = f" pol{p.pol_block}" if p.pol_block else ""
        fixed = " fixed64" if self.fixed_point else ""
        rows = f" rows{self.staged_rows}" if self.staged_rows else ""
        return (f"register {p.block_u}x{p.block_v}{pols} wg{self.wg_size} sub{self.n_sub} "
                f"b{self.batch} rpg{p.points_per_group}{rows}{fixed}")

    def forget(self, points) -> None:
        """Nothing kept over a plan's points (:class:`clgrid.core.engine.SpreadStage`)."""

    def prepare(self, passes: list) -> None:
        """Nothing to plan ahead: the records are cut per call on the device."""

    def spread(self, job: SpreadJob) -> None:
        """The engine's call (:class:`clgrid.core.engine.SpreadStage`): as
        the tile spread's (:class:`clgrid.core.table.TableKernel`)."""
        check_table_job(job)
        self(job.points, job.vis_d, job.wgt_d, job.mask_d, job.planes_d, job.accumulate)

    def __call__(self, table_points: TablePoints, vis_d: cla.Array,
                 wgt_d: cla.Array | None, flags_d: cla.Array | None, grid_d: cla.Array,
                 accumulate: bool) -> None:
        """Grid ``vis_d`` ((nrow, nchan, npol) complex on the device, with
        optional weights and flags of that shape) into ``grid_d`` ((npol,
        ny, nx) complex on the device): overwrite it, or add to it
        (``accumulate``)."""
        records = self.records(table_points)
        values = self.gather(table_points, records, vis_d, wgt_d, flags_d)
        if records.n_records == 0:
            if not accumulate:
                grid_d.fill(0)
            return
        per_group = self.params.points_per_group
        n_groups = -(-records.n_records // per_group)
        g = self.grid
        if self.fixed_point:
            target, extra = self._fixed.start(values, records.n_records * self.npol,
                                              grid_d.shape)
        else:
            if not accumulate:
                grid_d.fill(0)
            target, extra = grid_d, ()
        self.kernel(self.queue, (n_groups * self.wg_size, self.box_groups),
                    (self.wg_size, 1), records.cells.data, np.uint32(records.n_records),
                    np.uint32(per_group), values.data, *self._kernel_tables,
                    target.data, np.int32(g.nx), np.int32(g.ny), self._flush_count.data,
                    *extra)
        if self.fixed_point:
            self._fixed.finish(grid_d, accumulate)
        if self.count_flushes:
            self.last_flushes = int(self._flush_count.get()[0])
            self._flush_count.fill(0)


def table_bound(tables_d: list[cla.Array], separable: bool) -> float:
    """The largest weight modulus a GCF table gives (separable: the product
    of the two tables' largest moduli): with the records' values, the bound
    of fixed-point sums.  One download of the tables: once per gridder."""
    moduli = [float(np.abs(t.get()).max()) if t.size else 0.0 for t in tables_d]
    return float(np.prod(moduli)) if separable else max(moduli)


def fixed_point_possible(profile: DeviceProfile, real) -> tuple[bool, str]:
    """Whether the register spread can add in fixed point here, and if not
    why: float32 grids (64 bits hold a float's 24-bit mantissa with 2^36 of
    range to spare, not a double's) and 64-bit integer atomics."""
    if np.dtype(real) != np.float32:
        return False, "64-bit fixed point resolves a float32 grid, not a float64 one"
    if "cl_khr_int64_base_atomics" not in profile.extensions:
        return False, f"{profile.device_name!r} has no 64-bit integer atomics"
    return True, ""


class FixedPointSums:
    """The fixed-point scratch of one :class:`RegisterSpreader` (per
    workspace, so per call): the (npol, ny, nx, 2) long grid the flushes add
    into, the bound on the values (``templates/fixed_point.cl.mako``) and
    the conversion into the caller's float grid."""

    #: Work-groups of the bound's first pass (a fixed number: a fixed order).
    BOUND_GROUPS = 128

    @staticmethod
    def group_for(profile: DeviceProfile) -> int:
        """Work-items of a bound group: 256, or the device's largest power of two."""
        group = 256
        while group > int(profile.max_work_group_size):
            group //= 2
        return group

    def __init__(self, queue: cl.CommandQueue, template: KernelTemplate, table_bound: float):
        self.queue = queue
        self._partials = template.kernel("bound_partials")
        self._total = template.kernel("bound_total")
        self._convert = template.kernel("fixed_to_grid")
        #: The largest weight modulus the table gives (:func:`table_bound`).
        self.table_bound = np.float32(table_bound)
        self._group = self.group_for(DeviceProfile.from_device(queue.device))
        self._partials_d = cla.empty(queue, self.BOUND_GROUPS, np.float32)
        self._bound_d = cla.empty(queue, 1, np.float32)
        self._fixed_d: cla.Array | None = None
        #: Whether the long grid may hold sums (zeroed before the next spread).
        self._dirty = True

    def start(self, values: cla.Array, n_values: int, shape: tuple) -> tuple:
        """The zeroed long grid and the spread kernel's extra arguments."""
        group = self._group
        self._partials(self.queue, (self.BOUND_GROUPS * group,), (group,), values.data,
                       np.uint32(n_values), self._partials_d.data)
        self._total(self.queue, (1,), (1,), self._partials_d.data,
                    np.uint32(self.BOUND_GROUPS), self._bound_d.data)
        # a few bytes back (the records' gather has just waited for the device
        # too): a sum beyond float32 has no fixed-point scale, and would
        # saturate silently
        bound = float(self._bound_d.get()[0]) * float(self.table_bound)
        if not np.isfinite(bound):
            raise ValueError("the visibilities' total magnitude exceeds float32's range, so "
                             "fixed-point sums have no scale: scale the data down or use "
                             "precision=float64")
        fixed_shape = tuple(shape) + (2,)
        if self._fixed_d is None or self._fixed_d.shape != fixed_shape:
            self._fixed_d = cla.empty(self.queue, fixed_shape, np.int64)
            self._dirty = True
        if self._dirty:   # new, or a call stopped between the spread and finish
            self._fixed_d.fill(0)
        self._dirty = True
        return self._fixed_d, (self._bound_d.data, self.table_bound)

    def finish(self, grid_d: cla.Array, accumulate: bool) -> None:
        """``grid_d`` = (or +=) the long grid over the scale; the long grid
        left zeroed for the next call (:meth:`start` fills it only when
        that did not happen)."""
        n_complex = self._fixed_d.size // 2
        launch(self._convert, self.queue, (n_complex,), self._fixed_d.data,
               np.uint32(n_complex), self._bound_d.data, self.table_bound,
               np.int32(bool(accumulate)), grid_d.data)
        self._dirty = False


#: GPUs: from this support on, records are degridded by register blocks
#: (:class:`RegisterInterpolator`) rather than a work-group a record.
REGISTER_DEGRID_MIN_SUPPORT = 32


def degrid_by_register(profile: DeviceProfile, support: int, separable: bool = True) -> bool:
    """Whether a Degridder on this device degrids its records by register
    blocks: GPUs from :data:`REGISTER_DEGRID_MIN_SUPPORT` (there a record's
    footprint read again from the grid bounds the work-group kernel), CPUs
    for separable tables wider than the vector rows take (Intel runtime, 2
    cores, 2026-11-25, 4 polarisations: W 72 / 128 0.39 / 1.11 s against a
    work-item a record's 0.46 / 1.41 s; full tables at W 72 were slower,
    0.81 against 0.57 s)."""
    if profile.device_type == "gpu":
        return support >= REGISTER_DEGRID_MIN_SUPPORT
    return separable and support > RECORD_VECTOR_MAX_SUPPORT


def default_degrid_params(profile: DeviceProfile, support: int, npol: int,
                          separable: bool = False, table_real: bool = False) -> RegisterParams:
    """Geometry of degridding by register blocks: the spread's
    (:func:`default_register_params`), with groups of 128 for separable
    tables on GPUs (H100, 2026-11-25, 4 polarisations, 4 x 4 points of two:
    support 64 / 128 17.5 / 40.6 ms against groups of 64's 18.7 / 51.6 ms;
    a work-group a record took 80.8 / 303 ms)."""
    params = default_register_params(profile, support, npol, separable, table_real)
    if profile.device_type == "gpu" and separable:
        params = dataclasses.replace(params, wg_size=min(128, int(profile.max_work_group_size)))
    return params


#: Most bytes of partial sums one launch of :class:`RegisterInterpolator`
#: writes (records are degridded in slices that fit).
PARTIALS_BYTES = 64 * 2 ** 20


class RegisterInterpolator:
    """Compile-once degridding by register blocks of one table grid
    (``interpolate_register`` in ``templates/core_interp_register.cl.mako``):
    the gather twin of :class:`RegisterSpreader`.  A work-item keeps its
    block of grid points in registers, reading it again only where a record
    moves it, and adds its share of every record's footprint sum; the
    shares are summed in a fixed order (local memory, then the box chunks in
    ``sum_record_partials``), so the result is the same every run.

    Parameters
    ----------
    queue, grid, tables_d, npol
        As for :class:`RegisterSpreader`.
    params
        :class:`RegisterParams` (default: :func:`default_degrid_params`);
        ``points_per_group`` is the records a group takes, ``batch`` the
        records whose shares local memory holds at once.
    """

    def __init__(self, queue: cl.CommandQueue, grid: TableGrid, tables_d: list[cla.Array],
                 npol: int, params: RegisterParams | None = None):
        self.queue, self.grid = queue, grid
        profile = DeviceProfile.from_device(queue.device)
        self.npol = int(npol)
        table_real = bool(grid.separable and grid.table_real)
        self.params = params or default_degrid_params(profile, grid.support, self.npol,
                                                      grid.separable, table_real)
        self.params.validate(self.npol)
        bin_u, bin_v = self.params.bins(grid.support)
        self._kernel_tables = table_arguments(queue, grid, tables_d, self.params)
        pols = self.params.pols(self.npol)
        #: Polarisation groups (dimension 2 of the launch).
        self.pol_groups = self.npol // pols
        n_blocks = (bin_u // self.params.block_u) * (bin_v // self.params.block_v)
        wg = min(self.params.wg_size, int(profile.max_work_group_size))
        item = grid.complex_dtype.itemsize
        while True:
            # each record of a batch: its staged cell and box, and a share of
            # every work-item
            per_record = _CELL_BYTES + pols * (wg + 1) * item
            batch = max(1, min(self.params.batch, (profile.local_mem_bytes - 1024) // per_record))
            template = KernelTemplate(queue, "core_interp_register.cl.mako", {
                "real": real_dtype_name(grid.real), "npol": self.npol,
                "support": grid.support, "oversample": grid.oversample,
                "separable": grid.separable, "table_real": table_real,
                "block_u": self.params.block_u, "block_v": self.params.block_v,
                "pol_block": pols, "bin_u": bin_u, "bin_v": bin_v,
                "wg_size": wg, "batch": batch, "with_f64": grid.real == np.float64,
                **gcf_template_params(grid)},
                need_f64=grid.real == np.float64)
            self.kernel = template.kernel("interpolate_register")
            limit = template.max_work_group_size(self.kernel)
            if wg <= limit:
                break
            wg = max(1, limit)   # registers limit this variant's group size
        self.wg_size, self.batch = wg, batch
        #: Groups along dimension 1 that share one box: its chunks of wg blocks.
        self.n_chunks = -(-n_blocks // wg)
        self._partials: cla.Array | None = None

    def slices(self, n_records: int) -> list[tuple[int, int]]:
        """(first record, count) of each launch: partial sums of at most
        :data:`PARTIALS_BYTES`."""
        per_record = self.n_chunks * self.npol * self.grid.complex_dtype.itemsize
        step = max(1, PARTIALS_BYTES // per_record)
        return [(first, min(step, n_records - first)) for first in range(0, n_records, step)]

    def partials(self, records: Records, first: int, count: int,
                 grid_d: cla.Array) -> cla.Array:
        """The (n_chunks, count, npol) partial sums of records ``first ..
        first + count - 1`` over the (npol, ny, nx) grid ``grid_d``."""
        size = self.n_chunks * count * self.npol
        if self._partials is None or self._partials.size < size:
            self._partials = cla.empty(self.queue, size, self.grid.complex_dtype)
        per_group = self.params.points_per_group
        g = self.grid
        self.kernel(self.queue, (-(-count // per_group) * self.wg_size, self.n_chunks,
                                 self.pol_groups), (self.wg_size, 1, 1),
                    records.cells.data, np.uint32(first), np.uint32(count),
                    np.uint32(per_group), grid_d.data, np.int32(g.nx), np.int32(g.ny),
                    *self._kernel_tables, self._partials.data)
        return self._partials


__all__ = ["MAX_REGISTER_SUMS", "MAX_RUN", "REGISTER_BLOCKS", "RecordGather", "RecordScan", "Records",
           "REGISTER_DEGRID_MIN_SUPPORT", "RegisterInterpolator", "RegisterParams",
           "RegisterSpreader", "default_degrid_params", "degrid_by_register",
           "gcf_template_params", "kernel_tables", "padded_slices", "phased_table",
           "table_arguments",
           "as_register_params", "default_register_params"]

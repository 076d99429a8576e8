"""Tiled, atomic-free gridding (strategy ``'tiled'`` of :class:`clgrid.Gridder`).

The design of the NAG/Oxford KNL/GPU gridding poster: records are
bucket-sorted into grid tiles on the device by a parallel counting sort
(histogram with integer ``atomic_inc``, exclusive scan of the tile counts by
one work-group, scatter of record indices), and then one work-group owns
one tile: it accumulates the tile in local memory (cache on CPUs) and adds it
to the grid once with plain stores.  No float atomics anywhere, which is what
CPUs (slow atomics, large caches) want.

* Footprints that span several tiles: the record is *duplicated* into every
  tile its footprint touches (no halo); each tile adds only the footprint
  cells inside it, so every grid point has exactly one writer.
* Load order: the tiles' record counts are read back (one ``uint`` per tile)
  and tiles are launched heaviest first, so the long tiles start early and
  the short ones fill in at the end; empty tiles are not launched.
* Chunks: the records of one call are sorted and gridded in launches of at
  most :attr:`TiledEngine.records_per_launch`, so that the pair list stays
  within a bounded size; launches run in order on one queue, so the plain
  read-modify-write of the grid is safe across launches.
* Determinism (``deterministic=True``): the counting sort's scatter places a
  tile's records with an ``atomic_inc`` cursor, so their order inside the
  tile -- and the order of the float additions into a cell -- varies run to
  run.  The deterministic binnings put every tile's records in record order,
  so the grid is bitwise the same run after run (tile counts and offsets
  are integers: exact whatever the order):

  ``'blocked'`` (CPUs)
      a one-pass counting sort: the records are cut into a few blocks, one
      work-item per block counts its pairs per tile into a [tile][block]
      table, the table is scanned (exclusive, in that order), and each block
      writes its records, in order, from its (tile, block) offsets.  Few
      blocks (a few per core) keep the table small; CPUs run the sequential
      blocks fast.
  ``'sorted'`` (GPUs, and any device by :data:`DETERMINISTIC_BINNING`)
      every record gets ``K`` key slots (``K``: the most tiles a footprint
      can touch) holding its tiles (``tile_keys``), ordered by clgrid's
      stable radix sort (:mod:`clgrid.device.radixsort`): massively
      parallel, no table.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.kernels import KernelTemplate
from ..device.profiles import DeviceProfile
from ..device.radixsort import RadixSort

TILE_SIZES = (8, 16, 32, 64, 128)
#: Upper bound on (record, tile) pairs per launch: 64 Mi pairs = 256 MiB of indices.
MAX_PAIRS_PER_LAUNCH = 1 << 26
_HEADER_BYTES = 16
_LOCAL_RESERVE_BYTES = 1024   # left to the driver (kernel arguments, its own use)
#: Work-items of the single-group tile-count scan (thousands of tiles: one group suffices).
SCAN_WG = 64
BINNINGS = ("atomic", "blocked", "sorted")
#: Deterministic binning per device type (default ``'sorted'``); tests may
#: change it to run the other binning on their device.
DETERMINISTIC_BINNING = {"cpu": "blocked"}
#: Blocks of the ``'blocked'`` binning per compute unit, and records at least per block.
BLOCKS_PER_UNIT = 8
MIN_BLOCK_RECORDS = 256
#: Largest [tile][block] count table of the ``'blocked'`` binning (64 MiB of
#: uint): huge grids get fewer, longer blocks.
MAX_BLOCK_TABLE = 1 << 24


@dataclasses.dataclass(frozen=True)
class TiledParams:
    """Launch geometry of the tiled gridder.

    tile_u, tile_v
        Tile size in grid cells (one work-group per tile).
    rows_per_pass
        Work-items per tile column; the work-group has ``tile_u *
        rows_per_pass`` work-items, each owning every ``rows_per_pass``-th
        row of one column.
    batch
        Records staged in local memory at a time.
    """

    tile_u: int = 32
    tile_v: int = 32
    rows_per_pass: int = 1
    batch: int = 64

    @property
    def wg_size(self) -> int:
        return self.tile_u * self.rows_per_pass

    def validate(self) -> None:
        if self.tile_u not in TILE_SIZES or self.tile_v not in TILE_SIZES:
            raise ValueError(f"tile_u and tile_v must be in {TILE_SIZES}")
        if not 1 <= self.rows_per_pass <= self.tile_v:
            raise ValueError("rows_per_pass must be in [1, tile_v]")
        if self.batch < 1:
            raise ValueError("batch must be >= 1")

    def local_bytes(self, npol: int, complex_itemsize: int) -> int:
        """Local memory of one work-group: the tile accumulators and the batch."""
        return (self.tile_u * self.tile_v * npol * complex_itemsize
                + self.batch * (_HEADER_BYTES + npol * complex_itemsize))


def fits_local(params: TiledParams, profile, npol: int, complex_itemsize: int) -> bool:
    """Whether ``params`` fits the device's local memory."""
    return params.local_bytes(npol, complex_itemsize) <= (
        profile.local_mem_bytes - _LOCAL_RESERVE_BYTES)


class TiledEngine:
    """Compiled kernels of the tiled strategy for one gridder configuration.

    Parameters
    ----------
    queue
        Command queue (device and context of the build).
    template_params
        The gridder's shared template parameters (real, npol, support, ...).
    params
        :class:`TiledParams` (already checked against the device by the
        dispatcher; shrunk here if the compiled kernel allows fewer
        work-items).
    tables
        Device GCF tables (two separable tables or one full table).
    complex_itemsize
        Bytes of one complex grid value.
    deterministic
        Bin the records in record order (``'blocked'`` or ``'sorted'``, by
        :data:`DETERMINISTIC_BINNING`) instead of with the atomic cursor:
        bitwise-reproducible grids (module docstring).  :attr:`binning`
        says which.
    """

    def __init__(self, queue: cl.CommandQueue, template_params: dict[str, Any],
                 params: TiledParams, tables: list[cla.Array], complex_itemsize: int,
                 deterministic: bool = False):
        params.validate()
        self.queue = queue
        self.tables = tables
        self.support = int(template_params["support"])
        self.deterministic = bool(deterministic)
        device_type = DeviceProfile.from_device(queue.device).device_type
        self.binning = (DETERMINISTIC_BINNING.get(device_type, "sorted")
                        if self.deterministic else "atomic")
        if self.binning not in BINNINGS:
            raise ValueError(f"binning must be one of {BINNINGS}, got {self.binning!r}")
        self.n_units = int(queue.device.max_compute_units)
        npol = int(template_params["npol"])
        profile_limit = queue.device.max_work_group_size
        self.scan_wg = min(SCAN_WG, profile_limit)
        while True:
            self.pair_stride = (tiles_per_footprint(self.support, params)
                                if self.binning == "sorted" else 1)
            self.template = KernelTemplate(queue, "gridder_tiled.cl.mako",
                                           dict(template_params, scan_wg=self.scan_wg,
                                                pair_stride=self.pair_stride,
                                                binning=self.binning,
                                                **dataclasses.asdict(params)),
                                           need_f64=template_params["with_f64"])
            self._grid = self.template.kernel("grid_tiles")
            if params.wg_size <= self.template.max_work_group_size(self._grid):
                break
            if params.rows_per_pass == 1:
                raise ValueError(f"tile width {params.tile_u} exceeds this device's "
                                 "work-group limit for the tiled kernel")
            params = dataclasses.replace(params, rows_per_pass=params.rows_per_pass // 2)
        self.params = params
        self.local_bytes = params.local_bytes(npol, complex_itemsize)
        self._count = self.template.kernel("count_tiles")
        self._scatter = self.template.kernel("scatter_pairs")
        self._scan = self.template.kernel("exclusive_scan")
        self._sort = None
        if self.binning == "sorted":
            self._keys = self.template.kernel("tile_keys")
            self._sort = RadixSort(queue)
        elif self.binning == "blocked":
            self._block_counts = self.template.kernel("block_counts")
            self._block_scatter = self.template.kernel("block_scatter")
        self.last_tile_counts: np.ndarray | None = None

    def tiles(self, nx: int, ny: int) -> tuple[int, int]:
        """Number of tiles along u and v for an ``nx`` x ``ny`` grid."""
        return -(-nx // self.params.tile_u), -(-ny // self.params.tile_v)

    @property
    def records_per_launch(self) -> int:
        """Records per sort-and-grid launch, bounded by the pair budget."""
        return max(1, MAX_PAIRS_PER_LAUNCH // tiles_per_footprint(self.support, self.params))

    def enqueue(self, header: cla.Array, records: cla.Array, grid: cla.Array, nx: int,
                ny: int, wait_for=None) -> cl.Event | None:
        """Sort ``header``/``records`` (device arrays) into tiles and add them
        to ``grid``.  Blocks only to read the tile counts back (to size the
        pair list and order the tiles); returns the gridding kernel's event."""
        n_records = int(header.shape[0])
        if n_records == 0:
            return None
        queue = self.queue
        n_tiles_u, n_tiles_v = self.tiles(nx, ny)
        n_tiles = n_tiles_u * n_tiles_v
        counts = cla.zeros(queue, n_tiles, np.uint32)
        geometry = (np.int32(n_tiles_u), np.int32(n_tiles_v))
        items = (_round_up(n_records, 64),)
        self._count(queue, items, None, header.data, np.int32(n_records), *geometry,
                    counts.data, wait_for=wait_for)
        offsets = cla.empty_like(counts)
        self._scan(queue, (self.scan_wg,), (self.scan_wg,), counts.data, offsets.data,
                   np.int32(n_tiles))
        counts_host = counts.get(queue)
        if self.binning == "sorted":
            pairs = self._sorted_pairs(header, n_records, geometry, n_tiles)
        elif self.binning == "blocked":
            pairs = self._blocked_pairs(header, n_records, geometry, n_tiles,
                                        int(counts_host.sum(dtype=np.int64)))
        else:   # atomic cursor: the order inside a tile varies run to run
            n_pairs = int(counts_host.sum(dtype=np.int64))
            pairs = cla.empty(queue, max(1, n_pairs), np.uint32).data
            cursor = cla.zeros(queue, n_tiles, np.uint32)
            self._scatter(queue, items, None, header.data, np.int32(n_records), *geometry,
                          offsets.data, cursor.data, pairs)
        busy = np.flatnonzero(counts_host)
        order = busy[np.argsort(-counts_host[busy], kind="stable")].astype(np.uint32)
        self.last_tile_counts = counts_host
        order_d = cla.to_device(queue, order)
        wg = self.params.wg_size
        return self._grid(queue, (order.size * wg,), (wg,), header.data, records.data,
                          pairs, offsets.data, counts.data, order_d.data,
                          *(t.data for t in self.tables), grid.data, np.int32(nx),
                          np.int32(ny), np.int32(n_tiles_u))

    def _blocked_pairs(self, header: cla.Array, n_records: int, geometry: tuple,
                       n_tiles: int, n_pairs: int) -> cl.Buffer:
        """Record indices grouped by tile, in record order (one-pass counting
        sort over blocks of records, module docstring)."""
        queue = self.queue
        n_blocks = max(1, min(BLOCKS_PER_UNIT * self.n_units,
                              n_records // MIN_BLOCK_RECORDS, MAX_BLOCK_TABLE // n_tiles))
        per_block = -(-n_records // n_blocks)
        n_blocks = -(-n_records // per_block)
        table = n_tiles * n_blocks
        counts = cla.zeros(queue, table, np.uint32)
        block_args = (header.data, np.int32(n_records), *geometry, np.int32(per_block),
                      np.int32(n_blocks))
        self._block_counts(queue, (n_blocks,), None, *block_args, counts.data)
        cursor = cla.empty_like(counts)
        self._scan(queue, (self.scan_wg,), (self.scan_wg,), counts.data, cursor.data,
                   np.int32(table))
        pairs = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, 4 * max(1, n_pairs))
        self._block_scatter(queue, (n_blocks,), None, *block_args, cursor.data, pairs)
        return pairs

    def _sorted_pairs(self, header: cla.Array, n_records: int, geometry: tuple,
                      n_tiles: int) -> cl.Buffer:
        """Slot positions grouped by tile, in record order (stable radix sort);
        the first ``sum(counts)`` are the pairs, the sentinel slots follow."""
        queue = self.queue
        n_slots = n_records * self.pair_stride
        keys = cla.empty(queue, n_slots, np.uint32)
        self._keys(queue, (_round_up(n_records, 64),), None, header.data, np.int32(n_records),
                   *geometry, keys.data)
        scratch = tuple(cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, n_slots * 4)
                        for _ in range(3))
        _, order, _ = self._sort(keys.data, n_slots, 0, n_tiles, scratch)
        return order


def tiles_per_footprint(support: int, params: TiledParams) -> int:
    """Most tiles one ``support``-wide footprint can touch (a bound: the
    deterministic binning's key slots per record)."""
    return ((support - 1) // params.tile_u + 2) * ((support - 1) // params.tile_v + 2)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


__all__ = ["BINNINGS", "DETERMINISTIC_BINNING", "MAX_PAIRS_PER_LAUNCH", "TILE_SIZES",
           "TiledEngine", "TiledParams", "fits_local", "tiles_per_footprint"]

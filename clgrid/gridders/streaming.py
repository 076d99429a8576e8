"""Streamed gridding: an observation larger than the device, in blocks of rows.

:class:`StreamingGridder` wraps a :class:`clgrid.Gridder` for observations
larger than device memory, or than a block size the user sets: each block
of rows (about ``chunk_records`` visibilities) is one call of the gridder
adding into one device grid, in row order, so that a deterministic
gridder's bits are the same run after run.  A block whose visibilities
would exceed half the device's largest allocation is made smaller
(:attr:`StreamingGridder.last_stats` says so).  The result equals the
unblocked :meth:`Gridder.__call__` to rounding (the float additions happen
in a different order).
"""

from __future__ import annotations

import warnings

import numpy as np
from tqdm.auto import tqdm

from ..device.guard import one_thread_at_a_time
from .gridder import Gridder

#: Default block: 1 Mi visibilities (quad-pol complex64: 32 MiB).
DEFAULT_CHUNK_RECORDS = 1 << 20
#: Share of the device's largest allocation one block's visibilities may take.
_ALLOC_FRACTION = 0.5


class StreamingGridder:
    """Grid an observation block of rows by block with a :class:`~clgrid.Gridder`.

    One thread at a time: a second thread entering while another is inside
    gets :class:`clgrid.device.guard.ConcurrentUseError` (it holds per-call
    scratch); make one per thread.

    Parameters
    ----------
    gridder
        A compiled :class:`~clgrid.Gridder`.
    chunk_records
        Visibilities per block (default :data:`DEFAULT_CHUNK_RECORDS`;
        whole rows, at least one); larger values than half the device's
        largest allocation allows are reduced, with a warning.
    """

    def __init__(self, gridder: Gridder, chunk_records: int | None = None):
        if not isinstance(gridder, Gridder):
            raise TypeError(f"gridder must be a clgrid.Gridder, got {type(gridder).__name__}")
        if chunk_records is not None and int(chunk_records) < 1:
            raise ValueError(f"chunk_records must be >= 1, got {chunk_records}")
        self.gridder = gridder
        self.queue = gridder.queue
        vis_bytes = gridder.npol * gridder.complex_dtype.itemsize
        requested = int(chunk_records or DEFAULT_CHUNK_RECORDS)
        limit = max(1, int(gridder.profile.max_alloc_bytes * _ALLOC_FRACTION) // vis_bytes)
        self.split = requested > limit
        if self.split:
            warnings.warn(f"block of {requested} visibilities ({requested * vis_bytes} B) "
                          f"exceeds half the device's largest allocation "
                          f"({gridder.profile.max_alloc_bytes} B): blocks of {limit}",
                          stacklevel=2)
        self.chunk_records = min(requested, limit)
        self.last_stats: dict = {}

    @one_thread_at_a_time
    def __call__(self, uvw_m, freq_hz, vis, weights=None, flags=None, *, out=None,
                 return_device: bool = False, progress: bool | None = None):
        """Grid like :meth:`Gridder.__call__`, one gridder call per block of
        rows (``progress``: a bar over the blocks; default only for more
        than four)."""
        gridder = self.gridder
        uvw_m, vis = np.asarray(uvw_m), np.asarray(vis)
        n_chan = np.atleast_1d(np.asarray(freq_hz)).size
        full = (uvw_m.shape[0], n_chan, gridder.npol)

        def rows_of(array, first, stop):
            return None if array is None else np.broadcast_to(np.asarray(array),
                                                              full)[first:stop]

        grid = gridder.zeros() if out is None else out
        rows = max(1, self.chunk_records // max(n_chan, 1))
        starts = range(0, max(uvw_m.shape[0], 1), rows)
        show = progress if progress is not None else len(starts) > 4
        stats = {"n_kept": 0, "n_offgrid": 0, "n_flagged": 0}
        for first in tqdm(starts, disable=not show, unit="block", desc="StreamingGridder"):
            stop = min(first + rows, uvw_m.shape[0])
            gridder(uvw_m[first:stop], freq_hz, vis[first:stop], rows_of(weights, first, stop),
                    rows_of(flags, first, stop), out=grid, return_device=True)
            for key in stats:
                stats[key] += gridder.last_stats[key]
        self.last_stats = dict(stats, n_chunks=len(starts), chunk_records=rows * n_chan,
                               split=self.split)
        return grid if return_device else grid.get()


__all__ = ["DEFAULT_CHUNK_RECORDS", "StreamingGridder"]

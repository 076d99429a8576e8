"""Host-side preparation of visibilities for the table-based gridder.

Turns ``uvw_m`` (metres) and ``freq_hz`` into one *record* per kept
(row, channel): integer footprint start ``(u0, v0)``, combined sub-pixel
index ``fu + O * fv`` and W plane (see :mod:`clgrid.gridders.gcf` for the rounding).
Records are ordered channel-major, then by row, so that a baseline-ordered
observation gives slowly moving tracks (what Romein's algorithm needs).

* ``w < 0``: ``(u, v, w)`` is negated and the visibility conjugated (the
  same measurement seen from the other antenna), so only W planes ``w >= 0``
  are needed.  Disable with ``conjugate_negative_w=False`` (then a negative
  W plane index is off-grid).
* Off-grid (footprint leaves the grid or W beyond the last plane): dropped
  and counted in :attr:`UVPlan.n_offgrid`; fully flagged (row, channel):
  dropped and counted in :attr:`UVPlan.n_flagged`.  NaN/Inf uvw, frequencies,
  visibilities or weights raise ``ValueError``.
* Compression (Muscat/Merry): consecutive records with the same
  (u0, v0, sub-pixel, W plane) are merged into one pre-weighted visibility.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .gcf import GCF

SPEED_OF_LIGHT_M_S = 299_792_458.0


@dataclasses.dataclass
class UVPlan:
    """Where every kept visibility goes, and how records were merged.

    Attributes
    ----------
    header
        (n_records, 4) int32: u0, v0, fu + O * fv, W plane.
    kept
        (n_kept,) flat indices ``row * nchan + chan`` of kept visibilities,
        in record order.
    record_of
        (n_kept,) record index of each kept visibility.
    record_start
        (n_records,) first position in ``kept`` of each record.
    conjugated
        (n_kept,) True where uvw was negated (w < 0).
    shape
        (nrow, nchan) of the visibilities planned for.
    n_offgrid, n_flagged
        Visibilities dropped because off-grid / fully flagged.
    """

    header: np.ndarray
    kept: np.ndarray
    record_of: np.ndarray
    record_start: np.ndarray
    conjugated: np.ndarray
    shape: tuple[int, int]
    n_offgrid: int
    n_flagged: int
    pol_mask: np.ndarray | None = None  # (n_kept, npol) False where flagged

    @property
    def n_records(self) -> int:
        return int(self.header.shape[0])

    @property
    def n_kept(self) -> int:
        return int(self.kept.size)

    @property
    def compression_ratio(self) -> float:
        """Kept visibilities per record (1.0 without compression)."""
        return self.n_kept / self.n_records if self.n_records else 1.0

    def records(self, vis: np.ndarray, weights=None, dtype=np.complex128) -> np.ndarray:
        """(n_records, npol) pre-weighted, conjugated and merged visibilities."""
        nrow, nchan = self.shape
        npol = vis.shape[-1]
        flat = vis.reshape(nrow * nchan, npol)[self.kept].astype(dtype)
        np.conjugate(flat, out=flat, where=self.conjugated[:, None])
        factor = _kept_weights(self, weights, npol)
        if factor is not None:
            flat *= factor
        if self.n_records == self.n_kept:
            return flat
        return np.add.reduceat(flat, self.record_start, axis=0)

    def expand(self, record_values: np.ndarray, weights=None, npol: int | None = None,
               dtype=np.complex128) -> np.ndarray:
        """Adjoint of :meth:`records`: (nrow, nchan, npol) visibilities, zero
        where dropped."""
        nrow, nchan = self.shape
        npol = record_values.shape[-1] if npol is None else npol
        values = record_values[self.record_of].astype(dtype)
        np.conjugate(values, out=values, where=self.conjugated[:, None])
        factor = _kept_weights(self, weights, npol)
        if factor is not None:
            values *= factor
        out = np.zeros((nrow * nchan, npol), dtype)
        out[self.kept] = values
        return out.reshape(nrow, nchan, npol)


def _kept_weights(plan: UVPlan, weights, npol: int):
    """(n_kept, npol) real weights times the polarisation flag mask, or None."""
    nrow, nchan = plan.shape
    factor = None
    if weights is not None:
        weights = np.broadcast_to(np.asarray(weights, dtype=np.float64), (nrow, nchan, npol))
        factor = weights.reshape(nrow * nchan, npol)[plan.kept]
    if plan.pol_mask is not None:
        factor = plan.pol_mask if factor is None else factor * plan.pol_mask
    return factor


def check_vis_layout(vis, expected: tuple, name: str = "vis") -> None:
    """Raise unless ``vis`` (numpy or device array) is (nrow, nchan, npol) =
    ``expected`` complex64 or complex128."""
    if vis.shape != expected:
        raise ValueError(f"{name} must have shape (nrow, nchan, npol) = {expected}, "
                         f"got {vis.shape}")
    if vis.dtype not in (np.complex64, np.complex128):
        raise TypeError(f"{name} must be complex64 or complex128, got {vis.dtype}")


def check_finite(name: str, array: np.ndarray) -> None:
    """Raise ``ValueError`` naming ``name`` if ``array`` holds NaN or Inf."""
    if not np.all(np.isfinite(array)):
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        raise ValueError(f"{name} contains {bad} NaN/Inf value(s); flag them instead")


def check_uvw_freq(uvw_m, freq_hz, finite_uvw: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The Gridder's checks of (nrow, 3) float uvw in metres and (nchan,)
    positive frequencies in Hz; ``finite_uvw=False`` leaves NaN/Inf in uvw
    to the caller (the core strategy counts them on the device)."""
    uvw_m = np.asarray(uvw_m)
    freq_hz = np.atleast_1d(np.asarray(freq_hz, dtype=np.float64))
    if uvw_m.ndim != 2 or uvw_m.shape[1] != 3:
        raise ValueError(f"uvw_m must have shape (nrow, 3), got {uvw_m.shape}")
    if uvw_m.dtype.kind != "f":
        raise TypeError(f"uvw_m must be float, got {uvw_m.dtype}")
    if freq_hz.ndim != 1 or freq_hz.size == 0:
        raise ValueError(f"freq_hz must be 1-D and non-empty, got shape {freq_hz.shape}")
    if finite_uvw:
        check_finite("uvw_m", uvw_m)
    check_finite("freq_hz", freq_hz)
    if np.any(freq_hz <= 0):
        raise ValueError("freq_hz must be positive")
    return uvw_m, freq_hz


def plan_uv(uvw_m, freq_hz, gcf: GCF, nx: int, ny: int, cell_size_rad: float, *,
            flags=None, npol: int = 1, compress: bool = True,
            conjugate_negative_w: bool = True) -> UVPlan:
    """Compute grid positions of every (row, channel) visibility.

    Parameters
    ----------
    uvw_m
        (nrow, 3) float64 baseline coordinates in metres, rows ordered by
        baseline then time for best speed.
    freq_hz
        (nchan,) channel frequencies.
    gcf
        The table the gridder will use (support, oversampling, W planes).
    nx, ny
        Grid size (u along x).
    cell_size_rad
        Image pixel size; the uv cell is ``1 / (n * cell_size_rad)``.
    flags
        Boolean, broadcastable to (nrow, nchan, npol); True = flagged.
    npol
        Polarisations (for the flag mask).
    compress
        Merge consecutive records with identical positions.
    conjugate_negative_w
        Negate uvw with w < 0 (the gridder then conjugates the visibility).
    """
    uvw_m, freq_hz = check_uvw_freq(uvw_m, freq_hz)
    if not (cell_size_rad > 0 and np.isfinite(cell_size_rad)):
        raise ValueError(f"cell_size_rad must be positive, got {cell_size_rad}")
    nrow, nchan = uvw_m.shape[0], freq_hz.size
    support, oversample = gcf.support, gcf.oversample

    # channel-major (nchan, nrow) arrays: tracks stay consecutive per channel
    scale = freq_hz[:, None] / SPEED_OF_LIGHT_M_S
    u = uvw_m[None, :, 0] * scale
    v = uvw_m[None, :, 1] * scale
    w = uvw_m[None, :, 2] * scale
    conjugated = (w < 0) if conjugate_negative_w else np.zeros(w.shape, bool)
    sign = np.where(conjugated, -1.0, 1.0)
    k_u = np.rint((u * sign * nx * cell_size_rad + nx // 2) * oversample).astype(np.int64)
    k_v = np.rint((v * sign * ny * cell_size_rad + ny // 2) * oversample).astype(np.int64)
    span = support * oversample
    u0 = -((span - 2 * k_u) // (2 * oversample))      # ceil(k / O - S / 2)
    v0 = -((span - 2 * k_v) // (2 * oversample))
    f_u = u0 * oversample - k_u + span // 2           # sub-pixel index, 0..O-1
    f_v = v0 * oversample - k_v + span // 2
    if gcf.w_planes > 1:
        plane = np.rint(w * sign / gcf.w_step_lambda).astype(np.int64)
    else:
        plane = np.zeros(w.shape, np.int64)
    on_grid = ((u0 >= 0) & (u0 + support <= nx) & (v0 >= 0) & (v0 + support <= ny)
               & (plane >= 0) & (plane < gcf.w_planes))
    all_flagged = np.zeros(on_grid.shape, bool)
    if flags is not None:
        flags = np.broadcast_to(np.asarray(flags, dtype=bool), (nrow, nchan, npol))
        all_flagged = flags.all(axis=2).T                      # (nchan, nrow)
    kept_mask = on_grid & ~all_flagged
    n_flagged = int(np.count_nonzero(all_flagged))
    n_offgrid = int(np.count_nonzero(~on_grid & ~all_flagged))
    pol_mask = None
    chan, row = np.nonzero(kept_mask)                           # channel-major order
    kept = row * nchan + chan
    if flags is not None and flags.any():
        pol_mask = ~flags.reshape(nrow * nchan, npol)[kept]
        if pol_mask.all():   # only whole (row, channel) flags: nothing to mask
            pol_mask = None
    sub = f_u[chan, row] + oversample * f_v[chan, row]
    header = np.stack([u0[chan, row], v0[chan, row], sub, plane[chan, row]], axis=1)
    if compress and header.shape[0] > 1:
        new_record = np.empty(header.shape[0], bool)
        new_record[0] = True
        np.any(header[1:] != header[:-1], axis=1, out=new_record[1:])
    else:
        new_record = np.ones(header.shape[0], bool)
    record_start = np.flatnonzero(new_record)
    record_of = np.cumsum(new_record) - 1
    return UVPlan(header=np.ascontiguousarray(header[record_start], dtype=np.int32),
                  kept=kept, record_of=record_of, record_start=record_start,
                  conjugated=conjugated[chan, row], shape=(nrow, nchan),
                  n_offgrid=n_offgrid, n_flagged=n_flagged, pol_mask=pol_mask)


__all__ = ["SPEED_OF_LIGHT_M_S", "UVPlan", "check_finite", "check_uvw_freq", "check_vis_layout", "plan_uv"]

"""Input checks of the table gridders, with the messages users see.

Conventions of :class:`clgrid.Gridder` and :class:`clgrid.Degridder` (the
positions themselves are computed on the device by the core's set points,
:class:`clgrid.core.setpoints.SetPoints` with
:class:`clgrid.core.table.TablePositions`; the rounding is that of
:mod:`clgrid.gridders.gcf`):

* ``w < 0``: ``(u, v, w)`` is negated and the visibility conjugated (the
  same measurement seen from the other antenna), so only W planes ``w >= 0``
  are needed.  Disable with ``conjugate_negative_w=False`` (then a negative
  W plane index is off the grid).
* Off the grid (footprint leaves the grid or W beyond the last plane):
  dropped, counted (``last_stats['n_offgrid']``) and warned about; fully
  flagged (row, channel): dropped and counted (``n_flagged``).  NaN/Inf in
  uvw raises ``ValueError`` with the count (flag such rows instead).
"""

from __future__ import annotations

import numpy as np

from ..core.plan import SPEED_OF_LIGHT as SPEED_OF_LIGHT_M_S


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
    """The gridders' checks of (nrow, 3) float uvw in metres and (nchan,)
    positive frequencies in Hz; ``finite_uvw=False`` leaves NaN/Inf in uvw
    to the caller (the core's set points count them on the device)."""
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


__all__ = ["SPEED_OF_LIGHT_M_S", "check_finite", "check_uvw_freq", "check_vis_layout"]

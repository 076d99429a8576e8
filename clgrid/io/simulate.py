"""Simulated observations: uvw tracks from real telescope layouts.

Baselines from an east/north/up layout are turned into equatorial XYZ with
the site latitude and rotated with the hour angle (Thompson, Moran &
Swenson, eq. 4.1):

    u =  sin H Lx + cos H Ly
    v = -sin d cos H Lx + sin d sin H Ly + cos d Lz
    w =  cos d cos H Lx - cos d sin H Ly + sin d Lz
"""

from __future__ import annotations

import dataclasses
import re
from importlib import resources

import numpy as np

LAYOUTS = {"ska1_mid_meerkat_197": "ska1_mid_meerkat_197.csv",
           "ska1_low_v6_512": "ska1_low_v6_512.csv"}


@dataclasses.dataclass(frozen=True)
class Layout:
    """Antenna positions in the local horizontal frame."""

    name: str
    enu_m: np.ndarray          # (n_antennas, 3) east, north, up in metres
    latitude_rad: float
    longitude_rad: float

    @property
    def n_antennas(self) -> int:
        return self.enu_m.shape[0]


def load_layout(name: str = "ska1_mid_meerkat_197") -> Layout:
    """Load a bundled layout: ``'ska1_mid_meerkat_197'`` or ``'ska1_low_v6_512'``."""
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {name!r}; available: {sorted(LAYOUTS)}")
    text = resources.files("clgrid").joinpath("data", LAYOUTS[name]).read_text()
    header = text.splitlines()[0]
    longitude = float(re.search(r"longitude\s+(-?[\d.]+)", header).group(1))
    latitude = float(re.search(r"latitude\s+(-?[\d.]+)", header).group(1))
    enu_m = np.loadtxt(text.splitlines(), delimiter=",", comments="#")
    return Layout(name, enu_m, np.radians(latitude), np.radians(longitude))


def enu_to_xyz(enu_m: np.ndarray, latitude_rad: float) -> np.ndarray:
    """Local east/north/up to equatorial XYZ (X towards H=0, Z to the pole)."""
    east, north, up = enu_m[..., 0], enu_m[..., 1], enu_m[..., 2]
    sin_lat, cos_lat = np.sin(latitude_rad), np.cos(latitude_rad)
    x = -sin_lat * north + cos_lat * up
    y = east
    z = cos_lat * north + sin_lat * up
    return np.stack([x, y, z], axis=-1)


def baseline_pairs(n_antennas: int) -> tuple[np.ndarray, np.ndarray]:
    """Antenna index pairs (p < q) of every cross-correlation baseline."""
    return np.triu_indices(n_antennas, k=1)


def uvw_tracks(layout: Layout, hour_angles_rad: np.ndarray, declination_rad: float,
               ) -> np.ndarray:
    """uvw in metres, shape (n_baselines, n_times, 3), ordered by baseline.

    Rows of one baseline are consecutive in time (a 'track'), the order the
    Romein/Merry gridders want.
    """
    xyz = enu_to_xyz(layout.enu_m, layout.latitude_rad)
    p, q = baseline_pairs(layout.n_antennas)
    lx, ly, lz = (xyz[q] - xyz[p]).T[:, :, None]
    hour = np.asarray(hour_angles_rad, dtype=np.float64)[None, :]
    sin_h, cos_h = np.sin(hour), np.cos(hour)
    sin_d, cos_d = np.sin(declination_rad), np.cos(declination_rad)
    u = sin_h * lx + cos_h * ly
    v = -sin_d * cos_h * lx + sin_d * sin_h * ly + cos_d * lz
    w = cos_d * cos_h * lx - cos_d * sin_h * ly + sin_d * lz
    return np.stack([u, v, w], axis=-1)


def simulate_observation(layout: str | Layout = "ska1_mid_meerkat_197", *,
                         duration_h: float = 6.0, integration_s: float = 10.0,
                         declination_deg: float = -30.0, n_baselines: int | None = None,
                         seed: int = 0) -> np.ndarray:
    """uvw (n_rows, 3) in metres of an observation centred on transit.

    Parameters
    ----------
    layout
        Layout name or :class:`Layout`.
    duration_h, integration_s
        Length of the track and dump time.
    declination_deg
        Phase-centre declination.
    n_baselines
        Keep a random subset of this many baselines (all if None), to make
        small test observations with realistic tracks.
    seed
        For the baseline subset.

    Returns
    -------
    numpy.ndarray
        (n_baselines * n_times, 3), rows ordered by baseline then time.
    """
    if isinstance(layout, str):
        layout = load_layout(layout)
    n_times = max(1, int(round(duration_h * 3600.0 / integration_s)))
    hour_angles = (np.arange(n_times) - (n_times - 1) / 2) * integration_s * (2 * np.pi / 86164.1)
    tracks = uvw_tracks(layout, hour_angles, np.radians(declination_deg))
    if n_baselines is not None and n_baselines < tracks.shape[0]:
        keep = np.sort(np.random.default_rng(seed).choice(tracks.shape[0], n_baselines,
                                                          replace=False))
        tracks = tracks[keep]
    return tracks.reshape(-1, 3)

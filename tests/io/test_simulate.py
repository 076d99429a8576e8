"""uvw tracks from the bundled layouts."""

import numpy as np

from clgrid.io.simulate import baseline_pairs, enu_to_xyz, load_layout, simulate_observation, uvw_tracks


def test_layouts_load_with_their_site():
    mid = load_layout("ska1_mid_meerkat_197")
    low = load_layout("ska1_low_v6_512")
    assert mid.n_antennas == 197 and low.n_antennas == 512
    assert np.isclose(np.degrees(mid.latitude_rad), -30.721)
    assert np.isclose(np.degrees(low.longitude_rad), 116.7644482)


def test_tracks_are_rotations_of_the_baselines():
    layout = load_layout()
    hour_angles = np.linspace(-1.0, 1.0, 7)
    tracks = uvw_tracks(layout, hour_angles, np.radians(-45.0))
    p, q = baseline_pairs(layout.n_antennas)
    lengths = np.linalg.norm(layout.enu_m[q] - layout.enu_m[p], axis=1)
    np.testing.assert_allclose(np.linalg.norm(tracks, axis=2), lengths[:, None] * np.ones(7),
                               rtol=1e-12)


def test_pole_and_transit_geometry():
    layout = load_layout()
    xyz = enu_to_xyz(layout.enu_m, layout.latitude_rad)
    p, q = baseline_pairs(layout.n_antennas)
    baseline = xyz[q] - xyz[p]
    # At the pole, w is the polar component and (u, v) rotate rigidly in H.
    tracks = uvw_tracks(layout, np.array([0.0, 0.3]), np.radians(90.0))
    np.testing.assert_allclose(tracks[:, :, 2], baseline[:, 2:3] * np.ones(2), atol=1e-6)
    # At transit (H = 0), u is the east-west (Y) component.
    np.testing.assert_allclose(tracks[:, 0, 0], baseline[:, 1], atol=1e-9)


def test_observation_rows_are_ordered_by_baseline():
    uvw = simulate_observation(duration_h=0.1, integration_s=60, n_baselines=10)
    assert uvw.shape == (10 * 6, 3)
    # consecutive rows of one baseline move slowly compared with the jump between tracks
    steps = np.linalg.norm(np.diff(uvw.reshape(10, 6, 3), axis=1), axis=2)
    assert steps.max() < 0.05 * np.linalg.norm(uvw, axis=1).max()

"""Gridder inputs: drops, flags, records of equal points, bad input."""

import warnings

import numpy as np
import pytest

from clgrid.gcf import separable_gcf
from clgrid.gridders.degridder import Degridder
from clgrid.gridders.gridder import Gridder
from clgrid.io.simulate import simulate_observation

from gridder_reference import C, footprints, grid_reference, random_vis

FREQ_HZ = np.linspace(1.0e9, 1.016e9, 16)   # 16 narrow channels


def _track_data(nx=128, n_baselines=12):
    uvw = simulate_observation(duration_h=2.0, integration_s=10.0, n_baselines=n_baselines)
    cell = 1.0 / (nx * 20.0)
    uvw = uvw * (0.4 * nx * 20.0 * C / FREQ_HZ.max() / np.abs(uvw[:, :2]).max())
    return uvw, cell


def test_records_merge_equal_points(cl_env):
    """The register spread merges runs of equal points (cell, table slice) on
    the device into records: on tracks of narrow channels, fewer records than
    points, and the grid equals the tile spread's (one footprint a point)."""
    uvw, cell = _track_data()
    rng = np.random.default_rng(1)
    vis = random_vis(rng, (uvw.shape[0], FREQ_HZ.size, 2), np.complex64)
    gcf = separable_gcf(6, 4)
    grids, stats = [], []
    for method in ("register", "tiles"):
        gridder = Gridder(cl_env.queue, gcf, 128, 128, cell, npol=2, method=method)
        grids.append(gridder(uvw, FREQ_HZ, vis))
        stats.append(gridder.last_stats)
    assert stats[1]["compression_ratio"] == 1.0 and stats[0]["compression_ratio"] > 1.5
    assert stats[0]["n_records"] < stats[0]["n_kept"] == stats[1]["n_kept"]
    scale = np.max(np.abs(grids[1]))
    # Same sums in another order (records add partial sums; float32 atomics
    # land in arrival order): bound at 3e-5 of the peak.
    assert np.max(np.abs(grids[0] - grids[1])) < 3e-5 * scale


def test_offgrid_dropped_counted_and_warned(cl_env):
    gcf = separable_gcf(4, 4)
    cell = 1.0 / (32 * 10.0)
    lam = C / 1e9
    # uv in wavelengths: 0 (centre), 150 (footprint off the 32-cell grid), -20
    uvw = np.array([[0.0, 0.0, 0.0], [150 * lam, 0.0, 0.0], [-20 * lam, 30 * lam, 0.0]])
    vis = np.ones((3, 1, 1), np.complex64)
    gridder = Gridder(cl_env.queue, gcf, 32, 32, cell)
    with pytest.warns(UserWarning, match="1 visibilities off the grid"):
        grid = gridder(uvw, [1e9], vis)
    assert gridder.last_stats["n_offgrid"] == 1
    assert gridder.last_stats["n_kept"] == 2
    reference = grid_reference(uvw, np.array([1e9]), vis, gcf, 32, 32, cell)
    assert np.allclose(grid, reference, atol=1e-6)


def test_flags_counted(cl_env):
    uvw, cell = _track_data(n_baselines=3)
    vis = np.ones((uvw.shape[0], 2, 4), np.complex64)
    flags = np.zeros(vis.shape, bool)
    flags[:10] = True                    # whole rows: dropped, counted
    flags[10:20, :, 1] = True            # one polarisation: zero weight only
    gridder = Gridder(cl_env.queue, separable_gcf(4, 4), 128, 128, cell, npol=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grid = gridder(uvw, FREQ_HZ[:2], vis, flags=flags)
    assert gridder.last_stats["n_flagged"] == 20
    reference = grid_reference(uvw, FREQ_HZ[:2], vis, gridder.gcf, 128, 128, cell, flags=flags)
    assert np.max(np.abs(grid - reference)) < 1e-5 * np.max(np.abs(reference))


#: The message of each bad input of test_bad_input_rejected.
INPUT_ERRORS = {"nan_uvw": "uvw_m contains NaN/Inf", "inf_vis": "1 NaN/Inf value",
                "nan_weight": "2 NaN/Inf value", "shape": r"vis must have shape \(nrow",
                "dtype": "vis must be complex64 or complex128",
                "uvw_shape": "uvw_m must have shape", "freq": "freq_hz must be positive"}


@pytest.mark.parametrize("bad", ["nan_uvw", "inf_vis", "nan_weight", "shape", "dtype",
                                 "npol", "odd_grid", "uvw_shape", "freq"])
def test_bad_input_rejected(cl_env, bad):
    gcf = separable_gcf(4, 4)
    uvw = np.zeros((5, 3))
    vis = np.ones((5, 2, 1), np.complex64)
    freq = np.array([1e9, 1.1e9])
    weights = None
    kwargs = {}
    if bad == "odd_grid":
        with pytest.raises(ValueError, match="even"):
            Gridder(cl_env.queue, gcf, 33, 32, 1e-3)
        return
    if bad == "npol":
        with pytest.raises(ValueError, match="npol"):
            Gridder(cl_env.queue, gcf, 32, 32, 1e-3, npol=3)
        return
    if bad == "nan_uvw":
        uvw[2, 1] = np.nan
    elif bad == "inf_vis":
        vis[1, 0, 0] = np.inf
    elif bad == "nan_weight":
        weights = np.ones(vis.shape)
        weights[0] = np.nan
    elif bad == "shape":
        vis = np.ones((5, 3, 1), np.complex64)
    elif bad == "dtype":
        vis = np.ones((5, 2, 1), np.float32)
    elif bad == "uvw_shape":
        uvw = np.zeros((5, 2))
    elif bad == "freq":
        freq = np.array([1e9, -1.0])
    gridder = Gridder(cl_env.queue, gcf, 32, 32, 1e-3, **kwargs)
    error = TypeError if bad == "dtype" else ValueError
    with pytest.raises(error, match=INPUT_ERRORS[bad]):
        gridder(uvw, freq, vis, weights)
    if bad in ("nan_uvw", "uvw_shape", "freq"):
        with pytest.raises(ValueError, match=INPUT_ERRORS[bad]):
            Degridder(cl_env.queue, gcf, 32, 32, 1e-3)(np.zeros((1, 32, 32), complex),
                                                       uvw, freq)


def test_no_fp64_device_gives_clear_error(cl_env, monkeypatch):
    """A device without double precision refuses precision=float64 up front."""
    import dataclasses
    from clgrid.device.profiles import DeviceProfile
    real = DeviceProfile.from_device(cl_env.device)
    monkeypatch.setattr(DeviceProfile, "from_device",
                        classmethod(lambda cls, device: dataclasses.replace(real, fp64=False)))
    with pytest.raises(ValueError, match="fp64"):
        Gridder(cl_env.queue, separable_gcf(4, 4), 32, 32, 1e-3, precision=np.float64)


def test_visibilities_beyond_one_allocation_point_to_the_streaming_gridder(cl_env,
                                                                          monkeypatch):
    """A device allowing 1 MiB per allocation: 40 000 visibilities of 4
    polarisations (1.2 MiB) are refused before anything is allocated, naming
    the bytes and StreamingGridder, which then grids them in blocks."""
    import dataclasses
    from clgrid.device.profiles import DeviceProfile
    from clgrid.gridders.streaming import StreamingGridder
    real = DeviceProfile.from_device(cl_env.device)
    monkeypatch.setattr(DeviceProfile, "from_device", classmethod(
        lambda cls, device: dataclasses.replace(real, max_alloc_bytes=2 ** 20)))
    rng = np.random.default_rng(5)
    uvw = rng.uniform(-30.0, 30.0, (20000, 3))
    freq = np.array([1.0e9, 1.1e9])
    vis = random_vis(rng, (20000, 2, 4)).astype(np.complex64)
    gcf = separable_gcf(4, 4)
    gridder = Gridder(cl_env.queue, gcf, 64, 64, 2e-3, npol=4)
    with pytest.raises(MemoryError, match=r"40000 visibilities of 4 polarisations need 1.2 MiB "
                                          r"in one device buffer; .* allows 1.0 MiB per "
                                          r"allocation: .*StreamingGridder"):
        gridder(uvw, freq, vis)
    with pytest.warns(UserWarning, match="largest allocation"):
        streamer = StreamingGridder(gridder, chunk_records=10 ** 9)
    reference = grid_reference(uvw, freq, vis.astype(np.complex128), gcf, 64, 64, 2e-3)
    result = streamer(uvw, freq, vis)
    assert np.linalg.norm(result - reference) <= 1e-5 * np.linalg.norm(reference)

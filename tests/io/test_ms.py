"""Measurement Set reading on the real VLA set: metadata, Stokes I, chunks,
selections and errors, checked against plain python-casacore reads."""

import numpy as np
import pytest

pytest.importorskip("casacore")
from casacore.tables import table  # noqa: E402

from clgrid.io.ms import MeasurementSet, MSError, parse_channels  # noqa: E402
from vla_ms import sim_ms, vla_ms  # noqa: E402,F401  (fixtures)


def test_metadata(vla_ms):
    with MeasurementSet(vla_ms) as ms:
        assert ms.nrows == 1360
        np.testing.assert_allclose(ms.phase_centre_rad, (2.65290163, 0.13097994), atol=1e-8)
        assert ms.field_name == "J1008+0730"
        window = ms.spectral_windows[0]
        assert window.corr_names == ("RR", "RL", "LR", "LL")
        assert ms.parallel_hands(0) == (0, 3)
        assert window.freq_hz.size == 64
        np.testing.assert_allclose(window.freq_hz[[0, -1]], [3.6304542e10, 3.6312417e10],
                                   rtol=1e-8)
        assert ms.weight_column == "WEIGHT_SPECTRUM"
        assert ms.telescope == "EVLA"


@pytest.mark.parametrize("chunk_rows", [97, 10_000])
def test_chunks_equal_plain_stokes_i(vla_ms, chunk_rows):
    with table(str(vla_ms), ack=False) as plain:
        data = plain.getcol("DATA")
        weight = plain.getcol("WEIGHT_SPECTRUM").astype(np.float64)
        uvw = plain.getcol("UVW")
    expected_vis = (data[..., 0] + data[..., 3]) / 2
    expected_weight = 1 / (0.25 / weight[..., 0] + 0.25 / weight[..., 3])
    with MeasurementSet(vla_ms) as ms:
        chunks = list(ms.chunks(channels="3:40:3", chunk_rows=chunk_rows))
    assert len(chunks) == -(-1360 // chunk_rows)
    vis = np.concatenate([c.vis for c in chunks])
    channels = np.arange(3, 40, 3)
    np.testing.assert_allclose(vis, expected_vis[:, channels], rtol=1e-6)
    np.testing.assert_allclose(np.concatenate([c.weight for c in chunks]),
                               expected_weight[:, channels], rtol=1e-6)
    np.testing.assert_array_equal(np.concatenate([c.uvw_m for c in chunks]), uvw)
    assert all(c.mask.all() for c in chunks)  # this set has no flags


def test_flags_zero_the_weight(sim_ms):
    with MeasurementSet(sim_ms, column="CORRECTED_DATA") as ms:
        chunk = next(ms.chunks(channels="4:7"))
    assert chunk.mask[:100, 1].sum() == 0 and chunk.mask[100:, 1].all()
    assert np.all(chunk.weight[:100, 1] == 0) and np.all(chunk.vis[:100, 1] == 0)
    assert chunk.mask[:, [0, 2]].all()
    np.testing.assert_allclose(np.abs(chunk.vis[100:]), 1.5, rtol=1e-5)


def test_selection_errors(vla_ms):
    with pytest.raises(MSError, match="no such Measurement Set"):
        MeasurementSet(vla_ms.parent / "missing.ms")
    with pytest.raises(MSError, match="no column 'MODEL_DATA'"):
        MeasurementSet(vla_ms, column="MODEL_DATA")
    with pytest.raises(MSError, match="no field 3"):
        MeasurementSet(vla_ms, field=3)
    with MeasurementSet(vla_ms) as ms:
        with pytest.raises(MSError, match="no spectral window"):
            next(ms.chunks(spw=2))
        with pytest.raises(MSError, match="selects no channel"):
            next(ms.chunks(channels="70:80"))


def test_parse_channels():
    np.testing.assert_array_equal(parse_channels("2:8:2", 10), [2, 4, 6])
    np.testing.assert_array_equal(parse_channels("1,5", 10), [1, 5])
    np.testing.assert_array_equal(parse_channels(None, 3), [0, 1, 2])
    np.testing.assert_array_equal(parse_channels(slice(-2, None), 5), [3, 4])
    for bad in ("12", "a:b", "5:5"):
        with pytest.raises(MSError, match="channel selection"):
            parse_channels(bad, 10)

"""The engine's optional trace (clgrid.core.trace): the public hook that
benchmarks/scaling_shards.py --trace reads instead of wrapping internals."""

import numpy as np
import pytest

from clgrid.core.trace import StageTrace, stage
from clgrid.imaging import Imager


def test_a_trace_records_spans_in_order_and_restarts():
    trace = StageTrace()
    with trace.stage("first"):
        pass
    with stage(trace, "second"):
        pass
    with stage(None, "nothing"):   # no trace: nothing recorded, nothing fails
        pass
    assert [s.label for s in trace.spans] == ["first", "second"]
    assert all(s.begin <= s.end for s in trace.spans)
    assert trace.lines()[0].startswith("first ")
    trace.restart()
    assert trace.spans == []


def test_an_imager_call_records_its_steps_and_the_same_bits(cl_env):
    """A traced call names its FFT, correction, checks, counts and download,
    and gives the bits of an untraced one; taking the trace off stops it."""
    rng = np.random.default_rng(7)
    uvw = rng.uniform(-200, 200, (50, 3))
    vis = (rng.standard_normal((50, 2)) + 1j * rng.standard_normal((50, 2))).astype(np.complex64)
    imager = Imager(cl_env.queue, uvw=uvw, freq=[1.0e9, 1.1e9], npix_x=32, npix_y=32,
                    pixsize_x=1e-4, pixsize_y=1e-4, epsilon=1e-4)
    plain = imager.vis2dirty(vis, mask=np.ones((50, 2), bool))
    imager.trace = trace = StageTrace()
    traced = imager.vis2dirty(vis, mask=np.ones((50, 2), bool))
    assert traced.tobytes() == plain.tobytes()
    labels = {s.label for s in trace.spans}
    assert {"fft", "correct", "finite", "count", "to_host"} <= labels, labels
    imager.trace = None
    count = len(trace.spans)
    imager.vis2dirty(vis)
    assert len(trace.spans) == count


def test_an_imager_without_rows_has_no_trace(cl_env):
    imager = Imager(cl_env.queue, uvw=np.zeros((0, 3)), freq=[1.0e9], npix_x=16, npix_y=16,
                    pixsize_x=1e-4, pixsize_y=1e-4, epsilon=1e-4)
    imager.trace = StageTrace()
    assert imager.trace is None
    with pytest.raises(ValueError, match="vis must be"):
        imager.vis2dirty(np.zeros((1, 1), np.complex64))

"""DeviceFFT against numpy.fft on every device and on the host fallback."""

import numpy as np
import pyopencl.array as cla
import pytest

from clgrid.core.fft import DeviceFFT


@pytest.mark.tiny
@pytest.mark.parametrize("backend", ["reikna", "numpy"])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_fft_matches_numpy(cl_env, backend, dtype):
    if dtype == np.complex128 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    shape = (8, 6) if cl_env.tiny else (48, 40)
    rng = np.random.default_rng(0)
    data = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    fft = DeviceFFT(cl_env.queue, shape, dtype, backend)
    tolerance = 1e-5 if dtype == np.complex64 else 1e-12
    array = cla.to_device(cl_env.queue, data)
    forward = fft.forward(array).get()
    np.testing.assert_allclose(forward, np.fft.fft2(data), atol=tolerance * np.abs(forward).max())
    backward = fft.backward(cla.to_device(cl_env.queue, data)).get() * fft.backward_scale
    expected = np.fft.ifft2(data) * data.size
    np.testing.assert_allclose(backward, expected, atol=tolerance * np.abs(expected).max())


def test_fft_checks_shape(cl_env):
    fft = DeviceFFT(cl_env.queue, (8, 8), np.complex64)
    with pytest.raises(ValueError, match="built for"):
        fft.forward(cla.zeros(cl_env.queue, (8, 4), np.complex64))
    with pytest.raises(TypeError):
        DeviceFFT(cl_env.queue, (8, 8), np.float32)

"""DeviceFFT against numpy.fft on every device, for every backend that imports here."""

import sys

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

from clgrid.core import fft as core_fft
from clgrid.core.fft import BACKENDS, DeviceFFT, available_backends, backend_order


def _needs(backend: str) -> None:
    if backend not in available_backends():
        pytest.skip(f"{backend} is not installed here")


def _random(shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(len(shape))
    return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)


def _check_both_directions(cl_env, fft: DeviceFFT, data: np.ndarray) -> None:
    tolerance = 1e-5 if data.dtype == np.complex64 else 1e-12
    axes = (-2, -1)
    forward = fft.forward(cla.to_device(cl_env.queue, data)).get()
    expected = np.fft.fft2(data, axes=axes)
    np.testing.assert_allclose(forward, expected, atol=tolerance * np.abs(expected).max())
    backward = fft.backward(cla.to_device(cl_env.queue, data)).get() * fft.backward_scale
    expected = np.fft.ifft2(data, axes=axes) * (data.shape[-2] * data.shape[-1])
    np.testing.assert_allclose(backward, expected, atol=tolerance * np.abs(expected).max())


@pytest.mark.tiny
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_fft_matches_numpy(cl_env, backend, dtype):
    _needs(backend)
    if dtype == np.complex128 and not cl_env.profile.fp64:
        pytest.skip("no fp64")
    shape = (8, 6) if cl_env.tiny else (48, 40)
    fft = DeviceFFT(cl_env.queue, shape, dtype, backend)
    assert fft.backend == backend
    _check_both_directions(cl_env, fft, _random(shape, dtype))


@pytest.mark.tiny
@pytest.mark.parametrize("backend", BACKENDS)
def test_fft_batch_transforms_each_plane(cl_env, backend):
    """(batch, n0, n1): every plane transformed over its own two axes, odd sizes too."""
    _needs(backend)
    shape = (3, 6, 10) if cl_env.tiny else (3, 30, 22)
    fft = DeviceFFT(cl_env.queue, shape, np.complex64, backend)
    _check_both_directions(cl_env, fft, _random(shape, np.complex64))


@pytest.mark.tiny
def test_fft_default_backend_follows_device(cl_env):
    fft = DeviceFFT(cl_env.queue, (8, 8), np.complex64)
    order = backend_order(cl_env.queue.device)
    assert fft.backend == order[0]
    is_cpu = bool(cl_env.queue.device.type & cl.device_type.CPU)
    assert order == tuple(name for name in (core_fft.CPU_ORDER if is_cpu else core_fft.GPU_ORDER)
                          if name in available_backends())
    _check_both_directions(cl_env, fft, _random((8, 8), np.complex64))


@pytest.mark.parametrize("backend", ["pyvkfft", "reikna"])
def test_fft_plans_are_cached_per_queue_shape_dtype(cl_env, backend):
    """A plan is lent to one DeviceFFT at a time (it holds kernel objects and
    work buffers two concurrent transforms must not share) and reused for
    the same queue, shape and dtype once that DeviceFFT is gone."""
    import gc
    _needs(backend)
    first = DeviceFFT(cl_env.queue, (16, 12), np.complex64, backend)
    plan = first._plan
    assert DeviceFFT(cl_env.queue, (16, 12), np.complex64, backend)._plan is not plan
    del first
    gc.collect()
    assert DeviceFFT(cl_env.queue, (16, 12), np.complex64, backend)._plan is plan
    assert DeviceFFT(cl_env.queue, (16, 16), np.complex64, backend)._plan is not plan


def test_fft_falls_back_when_a_backend_cannot_plan(cl_env, monkeypatch):
    """A backend that raises while planning is skipped for the next in the order."""
    order = backend_order(cl_env.queue.device)
    if len(order) < 2:
        pytest.skip("only one FFT backend here")
    failing = order[0]

    def refuse(self, backend):
        if backend == failing:
            raise RuntimeError("refused for the test")
        return original(self, backend)

    original = DeviceFFT._make_plan
    monkeypatch.setattr(DeviceFFT, "_make_plan", refuse)
    fft = DeviceFFT(cl_env.queue, (8, 8), np.complex64)
    assert fft.backend == order[1]
    _check_both_directions(cl_env, fft, _random((8, 8), np.complex64))


def test_a_gpu_whose_fft_falls_back_to_the_host_says_so_once(cl_env, monkeypatch):
    """No device FFT on a GPU (pyvkfft missing, reikna refusing): the host
    fallback still gives the right transform, and one RuntimeWarning names
    what was missing and what failed."""
    monkeypatch.setattr(core_fft, "_is_cpu", lambda device: False)     # as a GPU
    monkeypatch.setattr(core_fft, "_VkFFTApp", None)
    monkeypatch.setattr(core_fft, "_warned_devices", set())
    original = DeviceFFT._make_plan

    def refuse(self, backend):
        if backend == "reikna":
            raise RuntimeError("refused for the test")
        return original(self, backend)

    monkeypatch.setattr(DeviceFFT, "_make_plan", refuse)
    pattern = ("no device FFT for .*pyvkfft.* not importable" +
               ("; reikna: refused for the test" if "reikna" in available_backends() else "")
               + r"\): the FFTs run on the host \(host\).*pip install pyvkfft")
    with pytest.warns(RuntimeWarning, match=pattern):
        fft = DeviceFFT(cl_env.queue, (8, 8), np.complex64)
    assert fft.backend == "host"
    _check_both_directions(cl_env, fft, _random((8, 8), np.complex64))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # once per device
        DeviceFFT(cl_env.queue, (16, 16), np.complex64)


@pytest.mark.parametrize("scipy_present", [True, False], ids=["scipy", "numpy"])
def test_fft_host_backend_with_scipy_or_numpy(cl_env, monkeypatch, scipy_present):
    """The host backend (scipy.fft, else numpy.fft) gives the same results."""
    if not scipy_present:
        monkeypatch.setitem(sys.modules, "scipy.fft", None)  # import now raises ImportError
    fft = DeviceFFT(cl_env.queue, (2, 12, 10), np.complex64, "host")
    _check_both_directions(cl_env, fft, _random((2, 12, 10), np.complex64))


def test_fft_checks_shape(cl_env):
    fft = DeviceFFT(cl_env.queue, (8, 8), np.complex64)
    with pytest.raises(ValueError, match="built for"):
        fft.forward(cla.zeros(cl_env.queue, (8, 4), np.complex64))
    with pytest.raises(TypeError, match="complex64 or complex128, not float32"):
        DeviceFFT(cl_env.queue, (8, 8), np.float32)
    with pytest.raises(ValueError, match="unknown FFT backend"):
        DeviceFFT(cl_env.queue, (8, 8), np.complex64, "fftw")


@pytest.mark.parametrize("forward", [True, False], ids=["forward", "backward"])
def test_pruned_host_transform_equals_the_full_one_where_it_matters(cl_env, forward):
    """ducc0's pruning: only the rows/columns that hold data or are read."""
    from clgrid.core.fft import Pruning
    shape = (3, 48, 40)
    rows = np.array([0, 1, 2, 7, 8, 30, 46, 47])     # runs, wrapping like a uv band
    cols = np.array([0, 1, 2, 3, 36, 37, 38, 39])     # image columns around zero
    data = _random(shape, np.complex128)
    if forward:
        data[..., np.setdiff1d(np.arange(shape[2]), cols)] = 0   # image: only its columns
    else:
        data[..., np.setdiff1d(np.arange(shape[1]), rows), :] = 0   # grid: only its rows
    fft = DeviceFFT(cl_env.queue, shape, np.complex128, "host")
    pruned = cla.to_device(cl_env.queue, data)
    (fft.forward if forward else fft.backward)(pruned, Pruning(rows, cols))
    full = np.fft.fft2(data) if forward else np.fft.ifft2(data)
    got = pruned.get()
    if forward:
        np.testing.assert_allclose(got[..., rows, :], full[..., rows, :], atol=1e-12)
    else:
        np.testing.assert_allclose(got[..., cols], full[..., cols], atol=1e-12)

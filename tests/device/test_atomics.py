"""Float atomics on every device and every atomic path it supports.

Each result is compared with a float64 host sum against the worst-case
bound of recursive summation in any order, |error| <= (k - 1) u sum|x| for k
terms (u = 2^-24 or 2^-53), and integer-valued sums must be exact (a lost
update, the symptom of a broken atomic, changes them by whole units).
"""

import numpy as np
import pytest

from clgrid import ScatterAdd, scatter_add_reference

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _unit_roundoff(dtype) -> float:
    return 2.0**-24 if np.dtype(dtype) in (np.float32, np.complex64) else 2.0**-53


def _bits(dtype) -> int:
    return 32 if np.dtype(dtype) in (np.float32, np.complex64) else 64


def _paths(profile, dtype):
    if _bits(dtype) == 64 and not profile.fp64:
        pytest.skip("device has no fp64")
    return profile.supported_atomic_paths(_bits(dtype))


def _random_values(rng, n, dtype):
    values = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(n)
    return values.astype(dtype)


def _check_bound(result, index, values, n_out, dtype):
    reference = scatter_add_reference(index, values, n_out)
    counts = np.bincount(index, minlength=n_out)
    u = _unit_roundoff(dtype)
    for part in (np.real, np.imag) if np.dtype(dtype).kind == "c" else (np.real,):
        absolute_sum = np.zeros(n_out)
        np.add.at(absolute_sum, index, np.abs(part(values.astype(np.complex128))))
        # (k-1) u sum|x| bounds the summation; + u |sum| the final rounding of the store
        bound = (np.maximum(counts - 1, 0) * u * absolute_sum
                 + u * np.abs(part(reference)) + 1e-300)
        error = np.abs(part(result.astype(np.complex128)) - part(reference))
        assert np.all(error <= bound), f"max error/bound {np.max(error / bound):.3g}"


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("pattern", ["contended", "spread"])
def test_scatter_add_matches_float64_sum(cl_env, dtype, pattern):
    rng = np.random.default_rng(42)
    n_items = 600 if cl_env.tiny else 300_000
    n_out = 5 if pattern == "contended" else n_items // 2
    index = rng.integers(0, n_out, n_items).astype(np.uint32)
    values = _random_values(rng, n_items, dtype)
    for path in _paths(cl_env.profile, dtype):
        operation = ScatterAdd(cl_env.queue, dtype, atomics=path)
        assert operation.atomic_path == path
        result = operation(index, values, n_out=n_out).get()
        _check_bound(result, index, values, n_out, dtype)


@pytest.mark.tiny
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_no_update_is_lost(cl_env, dtype):
    n_items = 512 if cl_env.tiny else 200_000
    n_out = 3
    index = (np.arange(n_items) % n_out).astype(np.uint32)
    values = np.ones(n_items, dtype) * (1 + 1j if np.dtype(dtype).kind == "c" else 1)
    expected = scatter_add_reference(index, values, n_out)
    for path in _paths(cl_env.profile, dtype):
        for items_per_work_item in (1, 7):
            operation = ScatterAdd(cl_env.queue, dtype, atomics=path,
                                   items_per_work_item=items_per_work_item)
            result = operation(index, values, n_out=n_out).get()
            np.testing.assert_array_equal(result, expected)


def test_paths_agree_on_one_device(cl_env):
    paths = cl_env.profile.supported_atomic_paths(32)
    if len(paths) < 2:
        pytest.skip(f"{cl_env.key} has only the {paths[0]} path")
    rng = np.random.default_rng(7)
    index = rng.integers(0, 64, 100_000).astype(np.uint32)
    values = rng.integers(-8, 8, 100_000).astype(np.float32)  # exact sums
    results = [ScatterAdd(cl_env.queue, np.float32, atomics=p)(index, values, n_out=64).get()
               for p in paths]
    np.testing.assert_array_equal(results[0], results[1])


def test_environment_forces_cas(cl_env, monkeypatch):
    monkeypatch.setenv("CLGRID_FORCE_ATOMICS", "cas")
    operation = ScatterAdd(cl_env.queue, np.float32)
    assert operation.atomic_path == "cas"
    assert "atomic_cmpxchg" in operation.template.source


def test_forcing_a_missing_native_path_is_an_error(cl_env):
    missing = next(p for p in ("native-ptx", "native-cl") if p != cl_env.profile.atomic_f32)
    with pytest.raises(ValueError, match="has no"):
        ScatterAdd(cl_env.queue, np.float32, atomics=missing)


def test_bad_input_is_rejected(cl_env):
    operation = ScatterAdd(cl_env.queue, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        operation(np.array([0], np.uint32), np.array([np.nan], np.float32), n_out=1)
    with pytest.raises(IndexError, match="index outside"):
        operation(np.array([5], np.uint32), np.array([1.0], np.float32), n_out=2)
    with pytest.raises(ValueError, match="equal length"):
        operation(np.array([0, 1], np.uint32), np.array([1.0], np.float32), n_out=2)
    with pytest.raises(TypeError, match="integer"):
        operation(np.array([0.5]), np.array([1.0], np.float32), n_out=2)
    with pytest.raises(TypeError, match="ScatterAdd supports .*, not int32"):
        ScatterAdd(cl_env.queue, np.int32)

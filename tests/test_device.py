"""Device profiles and device selection against what the platforms report."""

import os
import subprocess
import sys
from pathlib import Path

import pyopencl as cl
import pytest

import clgrid
from clgrid import DeviceProfile, create_context, select_device
from clgrid.device import all_devices

# What each platform must report (PLATFORMS.md): PoCL 3.0 and Oclgrind have
# no float atomics, the Intel CPU runtime has cl_ext_float_atomics, NVIDIA
# OpenCL gets inline PTX.
EXPECTED_ATOMICS = {"pocl": "cas", "oclgrind": "cas", "intel": "native-cl",
                    "nvidia": "native-ptx"}


@pytest.mark.tiny
def test_profile_matches_platform_queries(cl_env):
    device, profile = cl_env.device, cl_env.profile
    assert profile.device_name == device.name.strip()
    assert profile.compute_units == device.max_compute_units
    assert profile.max_work_group_size == device.max_work_group_size
    assert profile.local_mem_bytes == device.local_mem_size
    assert profile.global_mem_bytes == device.global_mem_size
    assert profile.max_alloc_bytes == device.max_mem_alloc_size
    assert profile.image_support == bool(device.image_support)
    assert profile.fp64 == ("cl_khr_fp64" in device.extensions or bool(device.double_fp_config))
    assert profile.warp_size >= 1
    if profile.image_support:
        assert profile.image2d_max == (device.image2d_max_width, device.image2d_max_height)
    if profile.platform_key in EXPECTED_ATOMICS:
        assert profile.atomic_f32 == EXPECTED_ATOMICS[profile.platform_key]
    assert profile.is_simulator == (profile.platform_key == "oclgrind")


def test_native_cl_atomics_follow_the_extension(cl_env):
    has_extension = "cl_ext_float_atomics" in cl_env.device.extensions.split()
    assert (cl_env.profile.atomic_f32 == "native-cl") == (
        has_extension and cl_env.profile.platform_key != "nvidia")


def test_selection_by_indices_and_name(cl_env):
    profile = cl_env.profile
    spec = f"{profile.platform_index}:{profile.device_index}"
    assert select_device(spec) == cl_env.device
    assert select_device(profile) == cl_env.device
    assert DeviceProfile.from_device(select_device(profile.platform_key)).platform_key == \
        profile.platform_key
    context = create_context(spec)
    assert context.devices[0] == cl_env.device


def test_selection_order_and_errors(monkeypatch):
    devices = all_devices()
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    monkeypatch.delenv("CLGRID_DEVICE", raising=False)
    if not any(DeviceProfile.from_device(d).usable for d in devices):
        with pytest.raises(RuntimeError, match="cannot build kernels"):
            select_device()
        return
    best = DeviceProfile.from_device(select_device())
    assert best.usable and (not best.is_simulator or all(
        DeviceProfile.from_device(d).is_simulator for d in devices))
    ranks = {"gpu": 3, "accelerator": 2, "cpu": 1}
    usable = [DeviceProfile.from_device(d) for d in devices]
    usable = [p for p in usable if p.usable and not p.is_simulator]
    if usable:
        assert ranks.get(best.device_type, 0) == max(ranks.get(p.device_type, 0) for p in usable)
    with pytest.raises(LookupError, match="no OpenCL device matches"):
        select_device("no-such-device-anywhere")
    with pytest.raises(LookupError):
        select_device("99:0")
    last = DeviceProfile.from_device(devices[-1])
    monkeypatch.setenv("CLGRID_DEVICE", f"{last.platform_index}:{last.device_index}")
    if last.usable:
        assert select_device() == devices[-1]
        assert select_device(devices[0]) == devices[0]  # the argument wins


def test_resolve_queue_accepts_user_objects(cl_env):
    assert clgrid.resolve_queue(cl_env.queue) is cl_env.queue
    queue = clgrid.resolve_queue(cl_env.context)
    assert queue.context == cl_env.context
    with pytest.raises(TypeError):
        clgrid.resolve_queue("not a context")


def test_register_icd_keeps_existing_drivers(tmp_path, monkeypatch):
    from clgrid import _icd
    vendors = tmp_path / "vendors"
    vendors.mkdir()
    (vendors / "other.icd").write_text("/opt/other/libOther.so\n")
    monkeypatch.setenv("OCL_ICD_VENDORS", str(vendors))
    monkeypatch.setattr(_icd.platformdirs, "user_cache_dir", lambda name: str(tmp_path / "c"))
    monkeypatch.setattr(_icd, "_registered", [])
    library = tmp_path / "libFake.so"
    library.write_text("")
    assert _icd.register_icd(library)
    folder = Path(os.environ["OCL_ICD_VENDORS"])
    lines = sorted(p.read_text().strip() for p in folder.glob("*.icd"))
    assert lines == sorted(["/opt/other/libOther.so", str(library.resolve())])
    assert not _icd.register_icd(library)  # already there


def test_intel_runtime_is_found_without_setup():
    """In a fresh process, with only the intel extra installed, import clgrid
    is enough for pyopencl to list the Intel platform."""
    if clgrid._icd.find_intel_cpu_runtime() is None:
        pytest.skip("the intel extra is not installed in this environment")
    environment = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    code = ("import clgrid, pyopencl as cl; "
            "print([p.name for p in cl.get_platforms()])")
    output = subprocess.run([sys.executable, "-c", code], env=environment, check=True,
                            capture_output=True, text=True).stdout
    assert "Intel(R) OpenCL" in output


def test_devices_cli_prints_a_table(capsys):
    from clgrid.cli import main
    assert main(["devices"]) == 0
    output = capsys.readouterr().out
    assert "atomic f32" in output
    for device in all_devices():
        assert device.name.strip() in output
    assert cl.get_platforms()


def test_queue_made_from_a_dropped_context_still_works(cl_env):
    """The Intel runtime frees a context with no Python reference even while
    a queue on it lives; queues made by clgrid keep theirs alive."""
    import gc

    import numpy as np

    from clgrid import ScatterAdd
    profile = cl_env.profile
    queue = clgrid.resolve_queue(create_context(f"{profile.platform_index}:"
                                                f"{profile.device_index}"))
    user_queue = cl.CommandQueue(create_context(f"{profile.platform_index}:"
                                                f"{profile.device_index}"))
    gc.collect()
    assert ScatterAdd(user_queue, np.float32).context.devices[0] == cl_env.device
    result = ScatterAdd(queue, np.float32)(np.array([0, 0], np.uint32),
                                           np.array([1.0, 2.0], np.float32), n_out=1)
    assert result.get()[0] == 3.0

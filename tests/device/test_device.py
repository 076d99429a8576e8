"""Device profiles and device selection against what the platforms report."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid import DeviceProfile, create_context, select_device
from clgrid.device.profiles import all_devices

#: The suite's own conftest, which the inner sessions below run under.
ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

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
    with pytest.raises(LookupError, match="no OpenCL platform 99"):
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
    with pytest.raises(TypeError, match="expected a pyopencl Context or CommandQueue"):
        clgrid.resolve_queue("not a context")


def test_register_icd_keeps_existing_drivers(tmp_path, monkeypatch):
    from clgrid.device import _icd
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
    if clgrid.device._icd.find_intel_cpu_runtime() is None:
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


# Several drivers of one platform (PyPI's PoCL 3.0 and Debian's PoCL 3.1 on
# AMD Zen 5, where only the latter builds kernels): discovery, selection and
# the test fixture's guard.

def _fake_device(platform_name: str, name: str):
    from types import SimpleNamespace
    return SimpleNamespace(platform=SimpleNamespace(name=platform_name), name=name)


def _fake_profiles(monkeypatch, specs):
    """Fake devices with profiles derived from a real one: (driver, problem)."""
    import dataclasses

    from clgrid.device import profiles as device_module
    real = DeviceProfile.from_device(all_devices()[0])
    fakes, profiles = [], {}
    for index, (driver, problem) in enumerate(specs):
        fake = _fake_device("Portable Computing Language", f"pthread-{index}")
        fakes.append(fake)
        profiles[id(fake)] = dataclasses.replace(
            real, platform_name="Portable Computing Language", device_name=fake.name,
            driver_version=driver, device_type="cpu", is_simulator=False,
            build_problem=problem, platform_index=index, device_index=0)
    monkeypatch.setattr(device_module, "all_devices", lambda: list(fakes))
    monkeypatch.setattr(device_module, "_profile_of", lambda d: profiles[id(d)])
    monkeypatch.delenv("CLGRID_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    return fakes


@pytest.mark.parametrize("order", [0, 1])
def test_pocl_by_name_picks_the_one_that_builds(monkeypatch, order):
    # the broken one has the newer version: usability must come first
    specs = [("5.0", "error: unknown target CPU 'generic'"), ("3.1+debian", "")]
    if order:
        specs.reverse()
    fakes = _fake_profiles(monkeypatch, specs)
    usable = fakes[1 - order]
    assert select_device("pocl") is usable
    assert select_device() is usable
    assert select_device("Portable Computing") is usable


def test_pocl_by_name_prefers_the_newer_driver(monkeypatch):
    fakes = _fake_profiles(monkeypatch, [("3.0-rc2", ""), ("5.0+debian", ""), ("3.1", "")])
    assert select_device("pocl") is fakes[1]


def test_no_usable_pocl_says_what_to_install(monkeypatch, capsys):
    from clgrid.cli import _unusable_platform_notes
    _fake_profiles(monkeypatch, [("3.0-rc2", "error: unknown target CPU 'generic'")])
    with pytest.raises(RuntimeError, match="apt install pocl-opencl-icd"):
        select_device("pocl")
    with pytest.raises(RuntimeError, match="unknown target CPU 'generic'"):
        select_device()
    notes = _unusable_platform_notes(clgrid.devices())
    assert len(notes) == 1 and "no pocl device builds kernels" in notes[0]
    assert "apt install pocl-opencl-icd" in notes[0]


def test_selection_by_platform_name_gives_a_usable_device():
    """On the real devices: a platform name picks a device that builds kernels
    whenever that platform has one (Debian's PoCL beside PyPI's on Zen 5)."""
    profiles = [DeviceProfile.from_device(d) for d in all_devices()]
    keys = {p.platform_key for p in profiles if p.usable and not p.is_simulator}
    if not keys:
        pytest.skip("no usable non-simulator device here")
    for key in keys:
        chosen = DeviceProfile.from_device(select_device(key))
        assert chosen.platform_key == key and chosen.usable
        best_driver = max(_version(p.driver_version) for p in profiles
                          if p.platform_key == key and p.usable
                          and p.compute_units == chosen.compute_units
                          and p.device_type == chosen.device_type)
        assert _version(chosen.driver_version) == best_driver


def _version(text):
    from clgrid.device.profiles import _version_tuple
    return _version_tuple(text)


def test_devices_cli_shows_every_driver_and_whether_it_builds(capsys):
    from clgrid.cli import main
    assert main(["devices"]) == 0
    rows = capsys.readouterr().out.splitlines()
    for profile in clgrid.devices():
        ident = f"{profile.platform_index}:{profile.device_index}"
        row = next(r for r in rows if r.startswith(ident + " "))
        assert profile.driver_version[:24] in row
        usable_cell = row[rows[0].index("usable"):].strip()  # the last column
        assert usable_cell == ("yes" if profile.usable else f"no: {profile.build_problem}")


def test_register_icd_repeats_the_system_vendors(tmp_path, monkeypatch):
    """Our vendors folder replaces the system's for the loader, so it must
    list the system's drivers (Debian's PoCL) too."""
    from clgrid.device import _icd
    system = tmp_path / "etc-vendors"
    system.mkdir()
    (system / "pocl.icd").write_text("libpocl.so.2.10.0\n")
    monkeypatch.delenv("OCL_ICD_VENDORS", raising=False)
    monkeypatch.setenv("OPENCL_VENDOR_PATH", str(system))
    monkeypatch.setattr(_icd.platformdirs, "user_cache_dir", lambda name: str(tmp_path / "c"))
    monkeypatch.setattr(_icd, "_registered", [])
    library = tmp_path / "libintelocl.so"
    library.write_text("")
    assert _icd.register_icd(library)
    folder = Path(os.environ["OCL_ICD_VENDORS"])
    lines = sorted(p.read_text().strip() for p in folder.glob("*.icd"))
    assert lines == sorted(["libpocl.so.2.10.0", str(library.resolve())])


def _platforms_in_fresh_process(register: bool) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if k != "OCL_ICD_VENDORS"}
    environment["CLGRID_NO_ICD_REGISTRATION"] = "" if register else "1"
    # With no driver registered the loader finds no platform at all (an
    # environment with only the Intel runtime's wheel): that is an empty list.
    code = ("import clgrid, pyopencl as cl\n"
            "try:\n"
            "    platforms = cl.get_platforms()\n"
            "except cl.LogicError:\n"
            "    platforms = []\n"
            "print('\\n'.join(p.name.strip() + ' | ' + p.version.strip() "
            "for p in platforms))")
    result = subprocess.run([sys.executable, "-c", code], env=environment,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line.strip()]


def test_registration_keeps_the_system_drivers_visible():
    """In fresh processes: every platform the loader finds by itself (the
    system's /etc/OpenCL/vendors and pyopencl's own) is still there after
    clgrid registers the Intel runtime, which is added."""
    by_itself = _platforms_in_fresh_process(register=False)
    registered = _platforms_in_fresh_process(register=True)
    assert set(by_itself) <= set(registered)
    intel_installed = clgrid.device._icd.find_intel_cpu_runtime() is not None
    assert any("Intel(R) OpenCL" in line for line in registered) == (
        intel_installed or any("Intel(R) OpenCL" in line for line in by_itself))
    system_icds = list(clgrid.device._icd.system_vendors_dir().glob("*.icd"))
    assert len(registered) >= len(system_icds)


# The fixture's guard, run on an inner pytest session with this conftest.

_INNER_TESTS = """
import pytest

def test_kernel(cl_env):
    if {skip}:
        pytest.skip("planted skip")
    assert cl_env.queue is not None

def test_plain():
    assert True
"""


def _usable_platform() -> str:
    profiles = [DeviceProfile.from_device(d) for d in all_devices()]
    keys = sorted({p.platform_key for p in profiles if p.usable and not p.is_simulator})
    if not keys:
        pytest.skip("no usable non-simulator device here")
    return keys[0]


def _inner_session(pytester, skip: bool, *options, platform: str | None = None):
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_inner=_INNER_TESTS.format(skip=skip))
    return pytester.runpytest("-p", "no:cacheprovider",
                              "--cl-platform", platform or _usable_platform(), *options)


def test_guard_fails_a_platform_whose_kernel_tests_all_skipped(pytester):
    result = _inner_session(pytester, skip=True)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("skipped", 0) >= 1
    assert "failed" not in outcomes
    result.stdout.fnmatch_lines([f"*FAILED: every kernel test on {_usable_platform()} "
                                 "was skipped*"])


def test_guard_passes_when_kernel_tests_ran(pytester):
    result = _inner_session(pytester, skip=False)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"kernel tests per platform: {_usable_platform()} * ran, "
                                 "0 skipped*"])


def test_guard_can_be_switched_off_and_ignores_collection(pytester):
    assert _inner_session(pytester, True, "--allow-all-skipped").ret == 0
    assert _inner_session(pytester, True, "--collect-only").ret == 0


def test_platform_that_cannot_build_is_an_error_not_a_skip(pytester, monkeypatch):
    """A platform named explicitly whose devices all fail to build kernels
    (PyPI's PoCL on Zen 5 with nothing else) stops the session."""
    import dataclasses

    from clgrid.device import profiles as device_module
    key = _usable_platform()
    real = device_module._profile_of

    def broken(device):
        profile = real(device)
        if profile.platform_key != key:
            return profile
        return dataclasses.replace(profile, build_problem="error: planted build failure")

    monkeypatch.setattr(device_module, "_profile_of", broken)
    result = _inner_session(pytester, skip=False, platform=key)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert f"no {key} device can build kernels on this machine" in output
    assert "planted build failure" in output


def test_queue_goes_to_the_sub_device_asked_for(cl_env):
    """PoCL 3.1 reports the root device as the device of a context made on a
    sub-device; clgrid's queues must still go to the sub-device."""
    from clgrid.scaleout.partition import cpu_sub_devices
    if cl_env.profile.device_type != "cpu" or cl_env.profile.compute_units < 2:
        pytest.skip("needs a CPU device with 2 compute units to split")
    subs = cpu_sub_devices(2, cl_env.device)
    queues = [clgrid.resolve_queue(create_context(sub)) for sub in subs]
    assert [q.device for q in queues] == subs
    assert queues[0].device != queues[1].device


_SHAPE_PROBE = """
__kernel void shape(__global uint *out, const uint n)
{
    if (get_global_id(0) == 0 && get_global_id(1) == 0) {
        for (uint d = 0; d < 2; ++d) {
            out[d] = get_global_size(d);
            out[2 + d] = get_local_size(d);
        }
    }
    if (get_global_id(0) < n)
        atomic_inc(out + 4);
}
"""


@pytest.mark.tiny
@pytest.mark.parametrize("shape, group, global_size, local_size", [
    ((1000,), None, (1024, 1), (64, 1)),
    ((1000,), (256,), (1024, 1), (256, 1)),
    ((0,), None, (64, 1), (64, 1)),
    ((100, 3), None, (128, 3), (64, 1)),
])
def test_launch_pins_the_group_and_pads_the_global_size(cl_env, shape, group, global_size,
                                                         local_size):
    """The driver never picks the group (PoCL would compile per size); every
    work-item below ``shape`` runs exactly once."""
    from clgrid.device.kernels import launch, quiet_builds
    with quiet_builds():
        kernel = cl.Program(cl_env.context, _SHAPE_PROBE).build().shape
    out = np.zeros(5, np.uint32)
    out_d = cl.Buffer(cl_env.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                      hostbuf=out)
    launch(kernel, cl_env.queue, shape, out_d, np.uint32(shape[0]), group=group).wait()
    cl.enqueue_copy(cl_env.queue, out, out_d)
    rows = shape[1] if len(shape) > 1 else 1
    assert tuple(out[:2]) == global_size and tuple(out[2:4]) == local_size
    assert out[4] == shape[0] * rows


_SWEEP_TESTS = """
import pytest

@pytest.mark.sweep
@pytest.mark.parametrize("a", [1, 2, 3])
@pytest.mark.parametrize("b", ["x", "y"])
def test_swept(cl_env, a, b):
    print(f"RAN a={a} b={b}")

@pytest.mark.parametrize("c", [1, 2, 3])
def test_not_swept(cl_env, c):
    pass
"""


@pytest.mark.parametrize("sweep, n_swept", [("all", 6), ("cover", 3)])
def test_sweep_cover_runs_every_value_of_each_parameter(pytester, sweep, n_swept):
    """--sweep cover (the pocl environment) keeps a case of a sweep-marked
    test only where it brings a new value; unmarked tests keep every case."""
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_inner=_SWEEP_TESTS)
    result = pytester.runpytest("-p", "no:cacheprovider", "-s", "--cl-platform",
                                _usable_platform(), "--sweep", sweep)
    assert result.ret == pytest.ExitCode.OK
    ran = {line.split("RAN ")[1] for line in result.stdout.lines if "RAN a=" in line}
    assert len(ran) == n_swept
    assert {pair.split()[0] for pair in ran} == {"a=1", "a=2", "a=3"}
    assert {pair.split()[1] for pair in ran} == {"b=x", "b=y"}
    assert result.parseoutcomes()["passed"] == n_swept + 3


def test_templates_are_read_once_per_process(tmp_path, monkeypatch):
    """A template rewritten under a running job (a reinstall, a tree copied
    over it) does not change what later renders give."""
    from clgrid.device import kernels
    (tmp_path / "probe.cl.mako").write_text("// first ${value}\n")
    monkeypatch.setattr(kernels, "templates_dir", lambda: tmp_path)
    monkeypatch.setattr(kernels, "_lookup", None)
    assert kernels.render("probe.cl.mako", value=1) == "// first 1\n"
    (tmp_path / "probe.cl.mako").write_text("// rewritten ${value}\n")
    os.utime(tmp_path / "probe.cl.mako", (1e9, 2e9))
    assert kernels.render("probe.cl.mako", value=2) == "// first 2\n"

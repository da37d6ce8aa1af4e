"""A profile of another device type than the device or dataset it predicts is refused with one
line and exit status 2 (predict / tune with --device, evaluate on a dataset's manifest)."""

from __future__ import annotations

import json

import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, ProfileDeviceMismatch, device_class, load_profile

from tests.cli_run import run_here as kc

VADD = """__kernel void vadd(__global const float *a, __global const float *b, __global float *c, const int n) {
  int i = get_global_id(0); if (i < n) c[i] = a[i] + b[i]; }
"""



def test_device_class_of_type_strings():
    assert device_class("GPU") == "GPU"
    assert device_class("CPU") == "CPU"
    assert device_class("ACCELERATOR | DEFAULT") == "ACCELERATOR"
    assert device_class("") == "" and device_class(None) == ""
    assert load_profile("a100").device_class == "GPU"
    assert load_profile("pocl-local").device_class == "CPU"
    # no device type, but GPU occupancy limits: a GPU profile
    p = DeviceProfile(device=DeviceIdentity(name="x"))
    assert p.device_class == ""
    p.set("max_warps_per_cu", 64, "warps", "published")
    assert p.device_class == "GPU"


def test_check_device_type():
    a100 = load_profile("a100")
    a100.check_device_type("GPU", "device g")          # same type: fine
    a100.check_device_type("", "device ?")             # unknown type: nothing to check
    with pytest.raises(ProfileDeviceMismatch) as e:
        a100.check_device_type("CPU", "device 'pthread'")
    msg = str(e.value)
    assert "\n" not in msg and "GPU" in msg and "CPU" in msg and "device 'pthread'" in msg
    with pytest.raises(ProfileDeviceMismatch):
        load_profile("pocl-local").check_device_type("GPU", "device g")


def test_evaluate_refuses_a_gpu_profile_for_a_cpu_dataset(tmp_path):
    data = tmp_path / "ds"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"schema_version": 1, "device": {"name": "cpu0", "type": "CPU"}}))
    out = tmp_path / "eval"
    r = kc("evaluate", "--data", str(data), "--models", "analytical", "--profile", "a100", "--out", str(out))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "describes a GPU device" in lines[0] and "is a CPU" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()             # refused before anything was written


def test_predict_refuses_a_profile_of_another_type_than_the_device(tmp_path, device):
    k = tmp_path / "v.cl"
    k.write_text(VADD)
    other = "pocl-local" if device_class(device.type) == "GPU" else "a100"
    r = kc("predict", "--kernel", str(k), "--gsize", "4096", "--lsize", "64", "--profile", other,
           "--device", device.spec or "auto")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "predicts only its own type of device" in lines[0], r.stderr
    # without --device the profile is a device of its own (predicting an A100 from here is fine)
    r = kc("predict", "--kernel", str(k), "--gsize", "4096", "--lsize", "64", "--profile", other)
    assert r.returncode == 0, r.stderr


def test_bench_refuses_a_profile_of_another_type_than_the_device_it_measures(tmp_path, device):
    other = "pocl-local" if device_class(device.type) == "GPU" else "a100"
    out = tmp_path / "rep"
    r = kc("bench", "--out", str(out), "--profile", other, "--kernels", "triad", "--max-sizes", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "predicts only its own type of device" in lines[0], r.stderr
    assert not out.exists()


def test_a_cpu_profile_without_the_newer_benchmarks_is_named(tmp_path):
    """The bundled local profile has every benchmark the CPU class reads; a copy without the atomic,
    gather and stride values (a calibration made before those benchmarks existed) is named by
    missing_cpu_benches and by a note of predict; a published GPU profile never is."""
    assert load_profile("pocl-local").missing_cpu_benches() == []
    assert load_profile("a100").missing_cpu_benches() == []
    data = json.loads(load_profile("pocl-local").to_json())
    data["values"] = {k: v for k, v in data["values"].items() if not k.startswith(("atomic_", "gather_", "strided_"))}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    assert load_profile(old).missing_cpu_benches() == ["atomic", "gather", "stride"]
    k = tmp_path / "v.cl"
    k.write_text(VADD)
    r = kc("predict", "--kernel", str(k), "--gsize", "4096", "--lsize", "64", "--profile", str(old))
    assert r.returncode == 0, r.stderr
    assert "note: the profile has no atomic, gather, stride values" in r.stderr
    r = kc("predict", "--kernel", str(k), "--gsize", "4096", "--lsize", "64", "--profile", "pocl-local")
    assert r.returncode == 0 and "the profile has no" not in r.stderr, r.stderr


def test_the_bundled_profile_measured_on_a_device_is_found_by_its_identity(device):
    """The device tests take the bundled profile measured on the device they run on: found by the
    device's name, platform, driver and device version (PoCL's names the CPU it compiles for),
    never a profile of another host's CPU or another driver, nor a datasheet profile."""
    from dataclasses import replace

    from kernelcast.calib.profile import bundled_profile_for, profiles_dir
    from kernelcast.instrument.backends.base import DeviceInfo

    rec = json.loads((profiles_dir() / "pocl-local.json").read_text())["device"]
    info = DeviceInfo(platform_index=0, device_index=0, platform_name="Portable Computing Language",
                      platform_version=rec["platform"], name=rec["name"], vendor=rec["vendor"],
                      type=rec["device_type"], driver_version=rec["driver"], device_version=rec["device_version"],
                      compute_units=2, max_work_group_size=4096, max_work_item_sizes=[4096] * 3,
                      preferred_wg_multiple=8, global_mem_bytes=1 << 32, max_alloc_bytes=1 << 30,
                      local_mem_bytes=1 << 19, max_constant_bytes=1 << 16, max_clock_mhz=2445,
                      mem_base_align_bytes=128)
    assert bundled_profile_for(info) == "pocl-local"
    other_cpu = rec["device_version"].replace("znver3", "znver4")
    assert bundled_profile_for(replace(info, device_version=other_cpu)) is None
    assert bundled_profile_for(replace(info, driver_version="9.9")) is None
    a100 = load_profile("a100").device
    assert bundled_profile_for(replace(info, name=a100.name, platform_version=a100.platform,
                                       driver_version=a100.driver, device_version=a100.device_version)) is None
    # the device these tests run on: its own profile when one was measured on it
    found = bundled_profile_for(device)
    if found is not None:
        assert load_profile(found).device.name == device.name


def test_without_a_profile_a_command_takes_the_one_measured_on_its_device(device, monkeypatch, tmp_path):
    """No --profile: the bundled profile measured on the device and driver (a full calibration),
    and only where none was, the device's cached quick calibration; nothing is calibrated here."""
    import kernelcast.calib.local as local

    monkeypatch.setenv("KERNELCAST_CACHE", str(tmp_path))
    monkeypatch.setattr(local, "calibrate", lambda *a, **kw: pytest.fail("calibrated"))
    monkeypatch.setattr(local, "bundled_profile_for", lambda info: "pocl-local")
    prof = local.resolve_profile(None)
    assert prof.values == load_profile("pocl-local").values and "bundled profile pocl-local" in prof.origin
    # none measured on it: the cached calibration of this device
    monkeypatch.setattr(local, "bundled_profile_for", lambda info: None)
    from kernelcast.instrument.backends import select_device

    from kernelcast.config import device_spec

    cached = load_profile("a100")
    cached.save(local.cached_profile_path(select_device(device_spec(None))))
    prof = local.resolve_profile(None)
    assert prof.values == cached.values and "cached calibration" in prof.origin

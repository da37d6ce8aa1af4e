"""The analytical model's device classes: the registry picks a class from what a profile says, the
shared pipeline calls the class's interface, and a new class is one registered class (hand-made
profiles, no device needed)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import (
    AnalyticalModel,
    CPUParams,
    CPURuntimeClass,
    DeviceClass,
    DeviceKind,
    DeviceParams,
    GenericClass,
    GPUClass,
    GPUParams,
    SharedParams,
    device_class_for,
    register,
    registered_classes,
    unregister,
)
from kernelcast.models.analytical import registry as registry_module

COPY = """__kernel void copy(__global const float* a, __global float* b) {
  int i = get_global_id(0); b[i] = a[i]; }"""


def profile(device_type: str, vendor: str = "x", wg_multiple: int | None = None, **values: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name=f"test-{device_type.lower() or 'none'}", vendor=vendor,
                                     device_type=device_type, compute_units=4, wg_multiple=wg_multiple))
    base = {"peak_fp32_fma_gops": 100.0, "peak_int32_add_gops": 100.0, "dram_bw_gbs": 20.0,
            "launch_overhead_us": 2.0, "wg_overhead_us": 0.01}
    for k, v in {**base, **values}.items():
        p.set(k, v, "x", "test")
    return p


def copy_frame(n: int, lsize: int) -> pd.DataFrame:
    args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": n},
            {"name": "b", "kind": "buffer", "dtype": "float", "count": n}]
    return pd.DataFrame([{"source": COPY, "kernel_name": "copy", "gsize": [n], "lsize": [lsize], "args": args}])


def test_the_registry_picks_the_class_from_the_device_type():
    assert device_class_for(profile("CPU")) is CPURuntimeClass
    assert device_class_for(profile("GPU")) is GPUClass
    assert device_class_for(profile("ACCELERATOR")) is GenericClass
    assert device_class_for(profile("")) is GenericClass
    # an occupancy limit in warps is a GPU's, whatever the device type says
    assert device_class_for(profile("CPU", max_warps_per_cu=64.0)) is GPUClass
    # the bundled classes, highest priority first; the generic one takes anything, last
    names = [c.name for c in registered_classes()]
    assert names[-1] == "generic" and {"gpu", "cpu-runtime"} <= set(names)


def test_each_class_reads_its_own_parameters():
    cpu = DeviceParams.from_profile(profile("CPU", wi_overhead_ns=3.0, cu_join_us=5.0))
    gpu = DeviceParams.from_profile(profile("GPU", max_warps_per_cu=64.0))
    other = DeviceParams.from_profile(profile("ACCELERATOR"))
    assert isinstance(cpu, CPUParams) and cpu.is_cpu and not cpu.is_gpu
    assert cpu.wi_overhead_s == pytest.approx(3e-9) and cpu.join_s == pytest.approx(5e-6)
    assert isinstance(gpu, GPUParams) and gpu.is_gpu and gpu.max_warps_per_cu == 64.0
    assert type(other) is SharedParams and not other.is_cpu and not other.is_gpu
    # the shared fields are the same reading of the profile in every class
    for p in (cpu, gpu, other):
        assert p.compute_units == 4 and p.dram_bw == pytest.approx(20e9) and p.launch_s == pytest.approx(2e-6)
        assert p.rate("fp32_fma") == pytest.approx(100e9)


def test_generic_class_is_the_shared_roofline():
    """One work-group per compute unit, compute and memory overlapped: a copy of 2^24 floats in
    groups of 64 on 4 units streams 8 B per work-item at 20 GB/s, plus the launch and 2^18
    work-groups at 0.01 us each."""
    m = AnalyticalModel(profile("ACCELERATOR"))
    assert isinstance(m.device_class, GenericClass)
    n = 1 << 24
    p = m.predict(copy_frame(n, 64))
    ex = p.explanation[0]
    assert ex["bound"] == "memory" and ex["occupancy"] == 1.0 and ex["waves"] == (n // 64) / 4
    expect = 2.0 + (n // 64) * 0.01 + 8 * n / 20e9 * 1e6
    assert p.time_us[0] == pytest.approx(expect, rel=1e-9)
    assert "cpu_vectorized" not in ex and np.isnan(p.energy_j[0])


def test_warp_width_is_a_parameter_of_the_profile():
    """Occupancy of groups of 64 work-items on a unit of at most 64 warps and 32 groups: with
    32-wide warps a group is 2 warps (32 groups fill the unit), with 64-wide wavefronts one (half)."""
    limits = {"max_warps_per_cu": 64.0, "max_wg_per_cu": 32.0}
    for width, occupancy in ((32, 1.0), (64, 0.5)):
        m = AnalyticalModel(profile("GPU", warp_size=float(width), **limits))
        assert m.dev.warp == width
        assert m.predict(copy_frame(1 << 20, 64)).explanation[0]["occupancy"] == pytest.approx(occupancy)
    # neither warp_size nor a preferred work-group multiple: the class's default width
    assert AnalyticalModel(profile("GPU", **limits)).dev.warp == GPUParams.default_warp == 32
    assert AnalyticalModel(profile("GPU", wg_multiple=64, **limits)).dev.warp == 64


class WavefrontParams(GPUParams):
    default_warp = 64


class WavefrontGPU(GPUClass):
    """A GPU class for a vendor whose wavefronts are 64 wide: one module's worth of code."""

    name = "test-wavefront-gpu"
    params_type = WavefrontParams
    priority = GPUClass.priority + 1

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        return "GPU" in kind.device_type and "advanced micro devices" in kind.vendor.lower()


class FixedLaunch(DeviceClass):
    """A class for a made-up device type whose launches cost 1 ms, the rest the defaults."""

    name = "test-fixed-launch"

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        return kind.device_type == "TESTDEVICE"

    def launch_seconds(self, n_wg: np.ndarray, lsz: np.ndarray) -> np.ndarray:
        return np.full_like(n_wg, 1e-3)


@pytest.fixture
def extra_classes() -> Iterator[None]:
    register(WavefrontGPU)
    register(FixedLaunch)
    try:
        yield
    finally:
        unregister(WavefrontGPU.name)
        unregister(FixedLaunch.name)


def test_a_new_class_registers_itself_without_core_edits(extra_classes):
    limits = {"max_warps_per_cu": 64.0, "max_wg_per_cu": 32.0}
    amd = AnalyticalModel(profile("GPU", vendor="Advanced Micro Devices, Inc.", **limits))
    nv = AnalyticalModel(profile("GPU", vendor="NVIDIA Corporation", **limits))
    assert isinstance(amd.device_class, WavefrontGPU) and amd.dev.warp == 64
    assert type(nv.device_class) is GPUClass and nv.dev.warp == 32
    assert amd.predict(copy_frame(1 << 20, 64)).explanation[0]["occupancy"] == pytest.approx(0.5)
    assert nv.predict(copy_frame(1 << 20, 64)).explanation[0]["occupancy"] == pytest.approx(1.0)
    # the pipeline asks the class for the launch: 1 ms instead of 2 us + 0.01 us per group
    generic = AnalyticalModel(profile("ACCELERATOR")).predict(copy_frame(4096, 64))
    fixed = AnalyticalModel(profile("TESTDEVICE")).predict(copy_frame(4096, 64))
    assert fixed.time_us[0] - generic.time_us[0] == pytest.approx(1000.0 - (2.0 + 64 * 0.01), rel=1e-9)
    assert fixed.explanation[0]["time_parts_us"]["launch"] == pytest.approx(1000.0)


def test_registering_a_name_again_replaces_the_class(extra_classes):
    class Other(FixedLaunch):
        name = FixedLaunch.name

    register(Other)
    assert [c for c in registered_classes() if c.name == FixedLaunch.name] == [Other]
    assert device_class_for(profile("TESTDEVICE")) is Other


def test_no_matching_class_is_a_lookup_error(monkeypatch):
    monkeypatch.setattr(registry_module, "_CLASSES", [CPURuntimeClass])
    with pytest.raises(LookupError, match="no device class for device type 'GPU'"):
        device_class_for(profile("GPU"))


FIRST = """__kernel void first(__global const float* a, __global float* b) {
  int i = get_global_id(0); if (get_local_id(0) == 0) b[get_group_id(0)] = a[i] * 2.0f; }"""


class RecordingGPU(GPUClass):
    """The GPU class, recording the per-warp multiply count the pipeline hands it."""

    name = "test-recording-gpu"
    priority = GPUClass.priority + 2
    seen: list[float] = []

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        return kind.name == "test-gpu" and "recording" in kind.vendor

    def item_costs(self, feats, f, env, g, n_wg):
        type(self).seen.append(float(np.asarray(f["warp_fp32_mul"]).ravel()[0]))
        return super().item_costs(feats, f, env, g, n_wg)


def test_features_are_counted_at_the_profiles_warp_width():
    """The multiply under ``lid == 0`` runs in one warp of each group: per work-item, warp / lsize
    warp issues (1/8 in groups of 256 with 32-wide warps, 1/4 with 64-wide wavefronts)."""
    args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": 4096},
            {"name": "b", "kind": "buffer", "dtype": "float", "count": 16}]
    frame = pd.DataFrame([{"source": FIRST, "kernel_name": "first", "gsize": [4096], "lsize": [256], "args": args}])
    register(RecordingGPU)
    try:
        for width, per_item in ((32, 1 / 8), (64, 1 / 4)):
            RecordingGPU.seen = []
            m = AnalyticalModel(profile("GPU", vendor="recording", warp_size=float(width), max_warps_per_cu=64.0))
            assert m.device_class.feature_symbols() == {"warp": float(width), "l1_line_bytes": 128.0}
            m.predict(frame)
            assert RecordingGPU.seen == [per_item]
    finally:
        unregister(RecordingGPU.name)
    assert AnalyticalModel(profile("CPU")).device_class.feature_symbols() == {}

"""Registers per work-item estimated from the static analysis (GPUs without a compiler path): the
terms counted by hand on kernels of our own, the CUDA occupancy calculator's register rule, the
occupancy and spills the GPU class derives from them, and the agreement with ``ptxas`` on two tiny
CUDA kernels (real nvcc; skipped only where it is not installed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.analytical.gpu import GPUClass
from kernelcast.models.analytical.registers import (
    estimate_registers,
    register_terms,
    warps_by_registers,
)
from kernelcast.models.cli import _count_lines
from kernelcast.models.static import analyze_source
from kernelcast.models.static.ptx import cuda_to_ptx, find_nvcc, ptxas_resources
from kernelcast.models.static.source import analyze_source_text

from kernelcast.schema import Kernel

# 3 buffers, one dimension, a kept loop over k, 4 accumulators in a fully unrolled private array,
# two load sites (w[k], a[...]) of which none repeats an address across the unrolled copies
ACC4 = """__kernel void acc4(__global const float* a, __global const float* w, __global float* o, int n) {
  int i = get_global_id(0);
  float acc[4];
  #pragma unroll
  for (int t = 0; t < 4; t++) acc[t] = 0.0f;
  for (int k = 0; k < n; k++) {
    float wk = w[k];
    #pragma unroll
    for (int t = 0; t < 4; t++) acc[t] += a[(i * 4 + t) * n + k] * wk;
  }
  #pragma unroll
  for (int t = 0; t < 4; t++) o[i * 4 + t] = acc[t];
}"""
# no kept loop; one load site whose unrolled copies read a[i + r + k]: 4 distinct addresses in 6
STENCIL = """__kernel void stencil(__global const float* a, __global float* o) {
  int i = get_global_id(0); float s = 0.0f;
  #pragma unroll
  for (int r = 0; r < 2; r++) {
    #pragma unroll
    for (int k = 0; k < 3; k++) s += a[i + r + k];
  }
  o[i] = s; }"""


def big_tile(words: int) -> str:
    """A kernel whose fully unrolled private array holds ``words`` accumulators."""
    return f"""__kernel void big(__global const float* a, __global float* o) {{
  int i = get_global_id(0);
  float acc[{words}];
  #pragma unroll
  for (int t = 0; t < {words}; t++) acc[t] = a[i + t];
  #pragma unroll
  for (int t = 0; t < {words}; t++) o[i * {words} + t] = acc[t] * 2.0f;
}}"""


def nvidia_profile(**extra: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-nvidia", device_type="GPU", compute_units=10, wg_multiple=32))
    for k, v, u in [("warp_size", 32, "threads"), ("max_warps_per_cu", 64, "warps"), ("max_wg_per_cu", 32, "wg"),
                    ("boost_clock_mhz", 1000.0, "MHz"), ("peak_fp32_gflops", 1000.0, "GFLOP/s"),
                    ("dram_bw_gbs", 100.0, "GB/s"), ("l2_bytes", 1 << 20, "B"),
                    ("registers_per_cu", 65536, "32-bit registers"), *[(k, v, "") for k, v in extra.items()]]:
        p.set(k, v, u, "test")
    return p


def buf(name: str, n: int) -> dict:
    return {"name": name, "kind": "buffer", "dtype": "float", "count": n}


def predict_one(profile: DeviceProfile, src: str, name: str, g: int, lsz: int, args: list) -> dict:
    fr = pd.DataFrame([{"source": src, "kernel_name": name, "gsize": [g], "lsize": [lsz], "args": args}])
    return AnalyticalModel(profile).predict(fr).explanation[0]


def test_terms_of_a_hand_counted_kernel():
    f = analyze_source_text(ACC4, "acc4")
    # 3 pointers of 2 registers, 2 indices of one dimension, the k loop's counter, 4 accumulators,
    # no repeated load, 4 temporaries and 2 load sites x 4 unrolled copies of the kept loop in flight
    assert register_terms(f) == {"pointers": 6, "indices": 2, "loop_counters": 1, "private_arrays": 4,
                                 "reused_loads": 0, "temporaries": 4 + 8}
    assert estimate_registers(f) == 25


def test_a_load_repeated_across_unrolled_copies_holds_a_register():
    f = analyze_source_text(STENCIL, "stencil")
    # 2 pointers, 1 dimension, every loop unrolled, one repeated load site, one load in flight
    assert register_terms(f) == {"pointers": 4, "indices": 2, "loop_counters": 0, "private_arrays": 0,
                                 "reused_loads": 1, "temporaries": 4 + 1}
    assert estimate_registers(f) == 12


def test_warps_per_compute_unit_follow_the_occupancy_calculators_rule():
    regs = np.array([32.0, 33.0, 40.0, 64.0, 255.0, 0.0, np.nan])
    # a warp's registers rounded up to 256, a quarter of 65,536 per sub-partition, whole warps there:
    # 32 x 32 = 1,024 -> 16 per sub-partition; 33 x 32 = 1,056 -> 1,280 -> 12; 64 -> 2,048 -> 8;
    # 255 x 32 = 8,160 -> 8,192 -> 2; no count, no limit
    assert warps_by_registers(regs, 65536, 32).tolist() == [64, 48, 48, 32, 8, np.inf, np.inf]


@pytest.fixture
def in_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU class with the estimated registers counted in the time (the default)."""
    monkeypatch.setattr(GPUClass, "estimate_in_time", True)


def test_switched_off_the_estimate_is_shown_and_not_counted(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(GPUClass, "estimate_in_time", False)
    n = 1 << 20
    words = 64
    src = big_tile(words)
    args = [buf("a", n + words), buf("o", n * words)]
    ex = predict_one(nvidia_profile(), src, "big", n, 256, args)
    assert ex["registers"] == {"per_work_item": 75, "estimated": True, "spilled": 0, "spill_bytes": 0.0,
                               "in_time": False}
    assert ex["occupancy"] == 1.0
    spill = predict_one(nvidia_profile(max_registers_per_thread=64), src, "big", n, 256, args)
    assert spill["registers"]["spilled"] == 75 - 64 and spill["registers"]["spill_bytes"] == 0.0
    assert spill["traffic_bytes"] == ex["traffic_bytes"]
    lines = _count_lines(pd.DataFrame({"explanation": [spill]}))
    assert lines[0] == "registers: 64 per work-item (estimated from the source; not counted in the time), 11 spilled"


def test_estimated_registers_limit_the_resident_work_groups(in_time: None):
    n = 1 << 20
    words = 64
    f = analyze_source_text(big_tile(words), "big")
    need = estimate_registers(f)
    assert register_terms(f)["private_arrays"] == words
    ex = predict_one(nvidia_profile(), big_tile(words), "big", n, 256, [buf("a", n + words), buf("o", n * words)])
    assert ex["registers"] == {"per_work_item": need, "estimated": True, "spilled": 0, "spill_bytes": 0.0,
                               "in_time": True}
    # 64 + 2 x 2 pointers + 2 indices + 4 temporaries + 1 load in flight (every loop unrolled, no
    # address repeated) = 75 registers: 75 x 32 = 2,400 -> 2,560 per warp, 6 warps per
    # sub-partition, 24 per unit: 3 work-groups of 8 warps
    assert need == 75
    assert ex["occupancy"] == pytest.approx(3 * 8 / 64)


def test_registers_beyond_the_per_thread_limit_are_spilled_through_the_hierarchy(in_time: None):
    n = 1 << 16
    words = 300
    src = big_tile(words)
    need = estimate_registers(analyze_source_text(src, "big"))
    ex = predict_one(nvidia_profile(max_registers_per_thread=255), src, "big", n, 64,
                     [buf("a", n + words), buf("o", n * words)])
    spilled = need - 255
    assert spilled > 0
    assert ex["registers"]["per_work_item"] == 255
    assert ex["registers"]["spilled"] == spilled
    # each spilled register stored and loaded once: 8 bytes per work-item, through L1 and L2
    assert ex["registers"]["spill_bytes"] == pytest.approx(8.0 * spilled * n)
    no_spill = predict_one(nvidia_profile(max_registers_per_thread=1023), src, "big", n, 64,
                           [buf("a", n + words), buf("o", n * words)])
    assert no_spill["registers"]["spilled"] == 0
    assert ex["traffic_bytes"]["l2"] == pytest.approx(no_spill["traffic_bytes"]["l2"] + 8.0 * spilled * n)
    lines = _count_lines(pd.DataFrame({"explanation": [ex]}))
    assert lines[0] == (f"registers: 255 per work-item (estimated from the source), {spilled} spilled: "
                        f"{8.0 * spilled * n / 1e6:,.1f} MB through the memory hierarchy")


def test_no_estimate_where_the_amd_compile_path_applies_or_without_a_register_file():
    f = analyze_source_text(ACC4, "acc4")
    ev = {"local_mem_bytes": np.zeros(3)}
    amd = nvidia_profile()
    amd.device.llvm_target = "gfx1032"
    # only the loads in flight (every GPU's latency floor reads them), no register estimate
    in_flight = {"loads_in_flight"}
    assert set(GPUClass(amd).estimated_resources(f, ev)) == in_flight
    assert set(GPUClass(nvidia_profile()).estimated_resources(f, {**ev, "compiled_vgprs": np.ones(3)})) == in_flight
    bare = DeviceProfile(DeviceIdentity(name="no-regs", device_type="GPU", compute_units=4, wg_multiple=32))
    assert set(GPUClass(bare).estimated_resources(f, ev)) == in_flight
    got = GPUClass(nvidia_profile()).estimated_resources(f, ev)
    assert got["registers"].tolist() == [25.0] * 3 and got["registers_spilled"].tolist() == [0.0] * 3


VADD_CU = """extern "C" __global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}"""
TILE_CU = """extern "C" __global__ void tile(const float *a, const float *w, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc[32];
    #pragma unroll
    for (int t = 0; t < 32; t++) acc[t] = 0.0f;
    for (int k = 0; k < n; k++) {
        float wk = w[k];
        #pragma unroll
        for (int t = 0; t < 32; t++) acc[t] += a[(i * 32 + t) * n + k] * wk;
    }
    #pragma unroll
    for (int t = 0; t < 32; t++) out[i * 32 + t] = acc[t];
}"""


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name, src", [("vadd", VADD_CU), ("tile", TILE_CU)])
def test_the_estimate_is_within_a_quarter_of_ptxas(name: str, src: str):
    ptx = cuda_to_ptx(src, "sm_80")
    assert ptx is not None
    got = ptxas_resources(ptx, "sm_80")[name]["registers"]
    feats = analyze_source(Kernel(source=src, name=name, language="cuda"))
    est = estimate_registers(getattr(feats, "source", feats))
    # ptxas (CUDA 13, sm_80): 12 and 48 registers; the estimate: 14 and 53
    assert abs(est / got - 1.0) <= 0.25, (est, got)

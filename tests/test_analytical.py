"""The analytical model on hand-written kernels and profiles (no device needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, load_profile
from kernelcast.models.analytical import AnalyticalModel, config_env

COPY = """__kernel void copy(__global const float* a, __global float* b, int n) {
  int i = get_global_id(0); if (i < n) b[i] = a[i]; }"""
HEAVY = """__kernel void heavy(__global const float* a, __global float* b, int k) {
  int i = get_global_id(0); float x = a[i];
  for (int j = 0; j < k; j++) x = fma(x, 1.0001f, 0.5f);
  b[i] = x; }"""
STRIDED = """__kernel void strided(__global const float* a, __global float* b, int s) {
  int i = get_global_id(0); b[i] = a[i * s]; }"""


def cpu_profile(energy: bool = False) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-cpu", device_type="CPU", compute_units=4, wg_multiple=8))
    for k, v, u in [("peak_fp32_fma_gops", 100.0, "Gop/s"), ("peak_fp32_add_gops", 100.0, "Gop/s"),
                    ("peak_int32_add_gops", 100.0, "Gop/s"), ("peak_int32_mul_gops", 50.0, "Gop/s"),
                    ("dram_bw_gbs", 20.0, "GB/s"), ("bw_level0_gbs", 200.0, "GB/s"),
                    ("cache_level0_bytes", 1 << 20, "B"), ("launch_overhead_us", 2.0, "us"),
                    ("wg_overhead_us", 0.01, "us"), ("barrier_ns", 5.0, "ns")]:
        p.set(k, v, u, "test")
    if energy:
        for k, v, u in [("idle_power_w", 20.0, "W"), ("energy_per_op_fp32_fma_pj", 50.0, "pJ"),
                        ("energy_per_access_dram_pj", 2000.0, "pJ"), ("energy_per_access_level0_pj", 300.0, "pJ")]:
            p.set(k, v, u, "test")
    return p


def frame(src, name, rows):
    return pd.DataFrame([{"source": src, "kernel_name": name, "gsize": [g], "lsize": [ls], "args": args}
                         for g, ls, args in rows])


def buf(name, n):
    return {"name": name, "kind": "buffer", "dtype": "float", "count": n}


def scal(name, v):
    return {"name": name, "kind": "scalar", "dtype": "int", "value": str(v)}


def test_memory_bound_copy_scales_with_size_and_level():
    m = AnalyticalModel(cpu_profile())
    sizes = [1 << 12, 1 << 16, 1 << 20, 1 << 24]
    p = m.predict(frame(COPY, "copy", [(n, 64, [buf("a", n), buf("b", n), scal("n", n)]) for n in sizes]))
    assert np.all(np.diff(p.time_us) > 0)
    big = p.explanation[-1]
    assert big["bound"] == "memory" and big["memory_level"] == 1      # 128 MiB: main memory
    # 8 B per item at 20 GB/s for 2^24 items, plus launch and work-group overheads
    expect = 8 * (1 << 24) / 20e9 * 1e6
    assert p.time_us[-1] == pytest.approx(expect + 2 + (1 << 18) * 0.01, rel=0.05)
    assert p.explanation[1]["memory_level"] == 0                      # 512 KiB fits the cache
    assert np.isnan(p.energy_j).all()                                  # no energy calibration


def test_compute_bound_loop_follows_the_trip_count():
    m = AnalyticalModel(cpu_profile())
    n = 1 << 16
    p = m.predict(frame(HEAVY, "heavy", [(n, 64, [buf("a", n), buf("b", n), scal("k", k)]) for k in (10, 1000)]))
    assert p.explanation[1]["bound"] == "compute"
    ratio = (p.time_us[1] - 2) / (p.time_us[0] - 2)
    assert 30 < ratio < 110


def test_uncoalesced_access_costs_more():
    m = AnalyticalModel(cpu_profile())
    n = 1 << 20
    rows = [(n, 64, [buf("a", n * s), buf("b", n), scal("s", s)]) for s in (1, 16)]
    p = m.predict(frame(STRIDED, "strided", rows))
    assert p.explanation[0]["coalescing"] == pytest.approx(1.0)
    assert p.explanation[1]["coalescing"] < 0.6          # the strided load at 1/8, the store at 1
    assert p.time_us[1] > 3 * p.time_us[0]


def test_idle_compute_units_make_small_launches_latency_bound():
    m = AnalyticalModel(cpu_profile())
    p = m.predict(frame(HEAVY, "heavy", [(64, 64, [buf("a", 64), buf("b", 64), scal("k", 10000)])]))
    assert p.explanation[0]["occupancy"] == pytest.approx(0.25)
    assert p.explanation[0]["bound"] == "latency"


def test_energy_roofline_and_power_cap():
    m = AnalyticalModel(cpu_profile(energy=True))
    n = 1 << 20
    rows = [(n, 64, [buf("a", n), buf("b", n), scal("k", 100)])]
    e = m.predict(frame(HEAVY, "heavy", rows))
    # E = 100 FMAs x 50 pJ + 8 B / 32 B x 2000 pJ (8 MiB working set: main memory) per item + 20 W x T
    per_item = 100 * 50e-12 + 8 / 32 * 2000e-12
    assert e.energy_j[0] == pytest.approx(n * per_item + 20.0 * e.time_us[0] * 1e-6, rel=1e-6)
    # a copy has no flops: with T by hand as in the copy test above
    big = 1 << 24
    c = m.predict(frame(COPY, "copy", [(big, 64, [buf("a", big), buf("b", big), scal("n", big)])]))
    t_copy = 8 * big / 20e9 + 2e-6 + (big // 64) * 0.01e-6
    assert c.time_us[0] * 1e-6 == pytest.approx(t_copy, rel=1e-6)
    assert c.energy_j[0] == pytest.approx(big * 8 / 32 * 2000e-12 + 20.0 * t_copy, rel=1e-6)
    p = cpu_profile(energy=True)
    p.set("tdp_w", 100.0, "W", "test")
    capped = AnalyticalModel(p, power_cap_w=50.0).predict(frame(HEAVY, "heavy", rows))
    free = AnalyticalModel(p).predict(frame(HEAVY, "heavy", rows))
    # compute bound: under the cap f_adj = f (50/100)^(1/3), so the time past the launch grows by 2^(1/3)
    assert free.explanation[0]["bound"] == "compute"
    launch = free.explanation[0]["time_parts_us"]["launch"]
    assert launch == pytest.approx(2 + (n // 64) * 0.01)
    assert (capped.time_us[0] - launch) / (free.time_us[0] - launch) == pytest.approx(2 ** (1 / 3), rel=1e-9)


# CUDA occupancy of 32-, 256- and 1024-thread blocks: V100, A100 and H100 hold 64 warps and 32
# blocks per SM, Ada (RTX 4090) 48 warps and 24 blocks (NVIDIA's occupancy calculator)
OCCUPANCY = {"v100": (0.5, 1.0, 1.0), "a100": (0.5, 1.0, 1.0), "h100": (0.5, 1.0, 1.0), "rtx4090": (0.5, 1.0, 2 / 3)}


@pytest.mark.parametrize("name", ["v100", "a100", "h100", "rtx4090"])
def test_published_gpu_profiles_use_occupancy_and_the_latency_floor(name):
    prof = load_profile(name)
    m = AnalyticalModel(prof)
    assert m.dev.is_gpu and m.dev.warp == 32
    n = 1 << 22
    p = m.predict(frame(COPY, "copy", [(n, ls, [buf("a", n), buf("b", n), scal("n", n)]) for ls in (32, 256, 1024)]))
    assert [ex["occupancy"] for ex in p.explanation] == pytest.approx(OCCUPANCY[name])
    # 32-thread blocks leave half the warps: 32 warps of 128 bytes in flight per SM cover less than
    # the DRAM bandwidth at a 500-cycle latency (Little's law), so the latency can bound them
    assert p.explanation[0]["bound"] in ("memory", "latency")
    assert [ex["bound"] for ex in p.explanation[1:]] == ["memory"] * 2
    # a 4M-element copy moves 32 MiB: no faster than at the DRAM bandwidth, and (a large streaming
    # copy) within 2x of that plus 10 us of launch and latency
    floor_us = 8 * n / (prof.get("dram_bw_gbs") * 1e9) * 1e6
    for t in p.time_us:
        assert floor_us <= t <= 2 * floor_us + 10, (t, floor_us)


def test_vectorized_evaluation_matches_row_by_row():
    from kernelcast.models.static import analyze_source

    from kernelcast.schema import Kernel

    m = AnalyticalModel(cpu_profile())
    feats = analyze_source(Kernel(HEAVY, "heavy"))
    n = 200_000
    g = np.random.default_rng(0).integers(1, 1 << 14, n).astype(float) * 64
    env = {"gsize0": g, "lsize0": np.full(n, 64.0), "ngroups0": g / 64, "gsize1": np.ones(n), "lsize1": np.ones(n),
           "ngroups1": np.ones(n), "gsize2": np.ones(n), "lsize2": np.ones(n), "ngroups2": np.ones(n),
           "k": np.full(n, 50.0), "__working_set_bytes": 8 * g}
    res = m.evaluate(feats, env)
    assert res.time_s.shape == (n,)
    # the speed of this path is a benchmark's business (bench/); here: each row as if predicted alone
    for i in (0, 1, n // 2, n - 1):
        gi = int(g[i])
        alone = m.predict(frame(HEAVY, "heavy", [(gi, 64, [buf("a", gi), buf("b", gi), scal("k", 50)])]))
        assert res.time_s[i] * 1e6 == pytest.approx(alone.time_us[0], rel=1e-12), i


def test_config_env():
    env = config_env([1024, 4], [64, 2], [buf("a", 10), scal("n", 7), {"name": "t", "kind": "local",
                                                                        "dtype": "float4", "count": 64}])
    assert env["ngroups0"] == 16 and env["ngroups1"] == 2 and env["n"] == 7 and env["len_t"] == 64
    assert env["__working_set_bytes"] == 40


# --- the CPU device class and the builtin families ----------------------------------------------

FLAT_POW = """__kernel void fpow(__global const float* a, __global float* b) {
  int i = get_global_id(0); b[i] = pow(a[i], 2.2f); }"""
FLAT_NEXP = """__kernel void fnexp(__global const float* a, __global float* b) {
  int i = get_global_id(0); b[i] = native_exp(a[i]); }"""
ATOMIC = """__kernel void hist(__global const int* a, __global int* h) {
  int i = get_global_id(0); atomic_inc(&h[a[i] & 15]); }"""


def fast_cpu_profile() -> DeviceProfile:
    """A CPU profile where everything but fp32 FMA and the two builtins is nearly free, so the
    compute time of the test kernels is their FMA / builtin count over one rate, by hand."""
    p = DeviceProfile(DeviceIdentity(name="test-cpu", device_type="CPU", compute_units=4, wg_multiple=8))
    for k in ("fp32_add", "fp32_mul", "int32_add", "int32_mul", "int32_div", "fp32_div", "sfu"):
        p.set(f"peak_{k}_gops", 1e9, "Gop/s", "test")
        p.set(f"scalar_{k}_gops", 1e9, "Gop/s", "test")
    for k, v, u in [("peak_fp32_fma_gops", 100.0, "Gop/s"), ("scalar_fp32_fma_gops", 10.0, "Gop/s"),
                    ("peak_pow_gops", 0.5, "Gop/s"), ("peak_native_exp_gops", 50.0, "Gop/s"),
                    ("dram_bw_gbs", 1e6, "GB/s"), ("launch_overhead_us", 2.0, "us"), ("wg_overhead_us", 0.0, "us")]:
        p.set(k, v, u, "test")
    return p


def test_cpu_loop_kernel_runs_at_the_scalar_rate():
    """HEAVY has a loop of k FMAs per work-item: not vectorized across work-items, so its FMAs run
    at scalar_fp32_fma_gops (10 Gop/s): 2^16 items x 1000 FMAs / 10e9 = 6553.6 us."""
    m = AnalyticalModel(fast_cpu_profile())
    assert m.dev.is_cpu
    n = 1 << 16
    p = m.predict(frame(HEAVY, "heavy", [(n, 64, [buf("a", n), buf("b", n), scal("k", 1000)])]))
    ex = p.explanation[0]
    assert ex["cpu_vectorized"] is False and "loop" in ex["cpu_vectorized_because"]
    assert ex["time_parts_us"]["compute"] == pytest.approx(6553.6, rel=0.01)


def test_builtin_families_are_charged_at_their_own_rates():
    """native_exp at 50 Gop/s, vectorized (no loop): 2^20 calls take 20.97 us. pow (0.5 Gop/s
    vectorized) keeps the work-item loop scalar: with no scalar_pow_gops in the profile, 1/8 of it,
    2^20 calls take 16777 us. Both used to cost the one special-function rate."""
    m = AnalyticalModel(fast_cpu_profile())
    n = 1 << 20
    rows = [(n, 64, [buf("a", n), buf("b", n)])]
    pw = m.predict(frame(FLAT_POW, "fpow", rows)).explanation[0]
    ne = m.predict(frame(FLAT_NEXP, "fnexp", rows)).explanation[0]
    assert ne["cpu_vectorized"] is True
    assert pw["cpu_vectorized"] is False and "pow" in pw["cpu_vectorized_because"]
    assert ne["time_parts_us"]["compute"] == pytest.approx(n / 50e9 * 1e6, rel=0.01)
    assert pw["time_parts_us"]["compute"] == pytest.approx(n / (0.5e9 / 8) * 1e6, rel=0.01)
    p = fast_cpu_profile()
    p.set("scalar_pow_gops", 0.01, "Gop/s", "test")
    pw2 = AnalyticalModel(p).predict(frame(FLAT_POW, "fpow", rows)).explanation[0]
    assert pw2["time_parts_us"]["compute"] == pytest.approx(n / 0.01e9 * 1e6, rel=0.01)


def test_atomics_are_not_vectorized_and_dead_loops_are_reported():
    m = AnalyticalModel(fast_cpu_profile())
    ex = m.predict(frame(ATOMIC, "hist", [(1024, 64, [buf("a", 1024), buf("h", 16)])])).explanation[0]
    assert ex["cpu_vectorized"] is False and "atomic" in ex["cpu_vectorized_because"]
    dead = """__kernel void over(__global float* out, const int iters) {
      int i = get_global_id(0); float acc = 0.0f;
      for (int k = 0; k < iters; k++) acc += sin((float)k);
      acc = 2.0f; out[i] = acc; }"""
    ex = m.predict(frame(dead, "over", [(1024, 64, [buf("out", 1024), scal("iters", 1 << 20)])])).explanation[0]
    assert any("dead code" in a for a in ex["assumed_trip_counts"])
    assert ex["cpu_vectorized"] is True       # the dead loop and its sin calls are gone


def test_gpu_profiles_have_no_cpu_class():
    from kernelcast.models.analytical import CPUParams, GPUClass

    m = AnalyticalModel(load_profile("a100"))
    assert isinstance(m.device_class, GPUClass) and not m.dev.is_cpu and not isinstance(m.dev, CPUParams)


def test_measured_counts_replace_the_assumption_and_are_named():
    src = """__kernel void rows(__global const int* ptr, __global const float* v, __global float* y) {
      int r = get_global_id(0); float s = 0.0f;
      for (int j = ptr[r]; j < ptr[r + 1]; ++j) s += v[j] * v[j];
      y[r] = s; }"""
    m = AnalyticalModel(fast_cpu_profile())
    args = [buf("ptr", 1 << 16), buf("v", 1 << 22), buf("y", 1 << 16)]
    rows = frame(src, "rows", [(1 << 16, 64, args)] * 2)
    rows["site_counts"] = ['', '{"trip_l3_c7": 64.0}']
    p = m.predict(rows)
    ex_assumed, ex_measured = p.explanation
    assert any("avg_trip assumed" in a for a in ex_assumed["assumed_counts"])
    assert "measured_counts" not in ex_assumed
    assert ex_measured["measured_counts"] == ["line 3: trips per entry 64 (measured)"]
    assert "assumed_counts" not in ex_measured and "assumed_trip_counts" not in ex_measured
    # 64 trips per row instead of the assumed 8: the loop's work is 8x, the time grows accordingly
    assert 3.0 < p.time_us[1] / p.time_us[0] <= 8.0

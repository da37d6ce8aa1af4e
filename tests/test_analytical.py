"""The analytical model on hand-written kernels and profiles (no device needed)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from calib.profile import DeviceIdentity, DeviceProfile, load_profile
from models.analytical import AnalyticalModel, config_env

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
    assert np.isfinite(e.energy_j).all() and e.energy_j[0] > 0
    flops_e = 100 * n * 50e-12                                  # 100 FMAs per item
    assert e.energy_j[0] > flops_e + 20.0 * e.time_us[0] * 1e-6 * 0.99
    p = cpu_profile(energy=True)
    p.set("tdp_w", 100.0, "W", "test")
    capped = AnalyticalModel(p, power_cap_w=50.0).predict(frame(HEAVY, "heavy", rows))
    free = AnalyticalModel(p).predict(frame(HEAVY, "heavy", rows))
    assert capped.time_us[0] > free.time_us[0]                  # f_adj = f (50/100)^(1/3)


@pytest.mark.parametrize("name", ["v100", "a100", "h100", "rtx4090"])
def test_published_gpu_profiles_use_occupancy_and_mwp_cwp(name):
    m = AnalyticalModel(load_profile(name))
    assert m.dev.is_gpu and m.dev.warp == 32
    n = 1 << 22
    p = m.predict(frame(COPY, "copy", [(n, ls, [buf("a", n), buf("b", n), scal("n", n)]) for ls in (32, 256, 1024)]))
    assert np.all(np.isfinite(p.time_us)) and np.all(p.time_us > 0)
    for ex in p.explanation:
        assert 0 < ex["occupancy"] <= 1
    # a 4M-element copy on a datacenter GPU: tens of microseconds, not milliseconds
    assert 5 < p.time_us[1] < 2000


def test_vectorized_throughput():
    from kernelcast.schema import Kernel
    from models.static import analyze_source

    m = AnalyticalModel(cpu_profile())
    feats = analyze_source(Kernel(HEAVY, "heavy"))
    n = 200_000
    g = np.random.default_rng(0).integers(1, 1 << 14, n).astype(float) * 64
    env = {"gsize0": g, "lsize0": np.full(n, 64.0), "ngroups0": g / 64, "gsize1": np.ones(n), "lsize1": np.ones(n),
           "ngroups1": np.ones(n), "gsize2": np.ones(n), "lsize2": np.ones(n), "ngroups2": np.ones(n),
           "k": np.full(n, 50.0)}
    t0 = time.perf_counter()
    res = m.evaluate(feats, env)
    assert res.time_s.shape == (n,) and np.isfinite(res.time_s).all()
    assert time.perf_counter() - t0 < 30        # generous bound: the figure itself is in bench/


def test_config_env():
    env = config_env([1024, 4], [64, 2], [buf("a", 10), scal("n", 7), {"name": "t", "kind": "local",
                                                                        "dtype": "float4", "count": 64}])
    assert env["ngroups0"] == 16 and env["ngroups1"] == 2 and env["n"] == 7 and env["len_t"] == 64
    assert env["__working_set_bytes"] == 40

"""Loop-carried recurrences (models.static.chains): the operations each trip of a loop waits for
the trip before on, counted by the static analysis, measured by calib chain, and charged by the
analytical model's CPU class as a floor under a work-item's arithmetic. Checked by hand and
against real launches on this device."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.microbench import CalibOptions, Calibrator
from kernelcast.calib.profile import Curve
from kernelcast.models.analytical import AnalyticalModel, chain_seconds, config_env
from kernelcast.models.static.chains import CHAIN_OVERLAP_TRIPS
from kernelcast.models.static.features import CHAIN_PREFIX
from kernelcast.models.static.source import analyze_source_text

from kernelcast.schema import ArgBinding
from tests.profiles import cpu_profile

KERNELS = """
__kernel void escape(__global float* data, int total) {
  int tid = get_global_id(0);
  float d = data[tid]; float z = d * 1.5f; const float c = d; int it = 0;
  for (; it < 256; it++) { z = z * z * 0.5f + c; if (fabs(z) > 4.0f) break; }
  data[tid] = z;
}
__kernel void fused(__global const float* a, __global float* out, int n) {
  float s = 0.0f; int k = 0;
  for (int j = get_global_id(0); j < n; ++j) { float t = a[j] * 2.0f; s = fma(s, 0.75f, t); k += j; }
  out[get_global_id(0)] = s + k;
}
__kernel void nested(__global const float* a, __global float* out, int n) {
  float s = 0.0f;
  for (int i = get_global_id(0); i < n; ++i) {
    float p = 0.0f; for (int j = 0; j < a[i]; ++j) { p = p * 0.5f + a[j]; } s += p; }
  out[get_global_id(0)] = s;
}
__kernel void branches(__global const float* a, __global float* out, int n) {
  float s = 1.0f;
  for (int j = get_global_id(0); j < n; ++j) { if (a[j] > 0.0f) s = s * a[j] + 1.0f; else s = s - 1.0f; }
  out[get_global_id(0)] = s;
}
__kernel void counts(__global const int* a, __global const int* next, __global int* out, int n) {
  int rank = 0, p = 0; float x = 0.0f;
  for (int j = get_global_id(0); j < n; ++j) { rank += a[j] * 3 + rank; p = next[p]; x = a[j] * 0.5f; }
  out[get_global_id(0)] = rank + p + (int)x;
}
__kernel void uniform(__global const float* a, __global float* out, int n) {
  float s = 0.0f;
  for (int j = 0; j < n; ++j) s = s * 0.5f + a[j];
  out[get_global_id(0)] = s;
}
"""


def _chain(name: str) -> dict[str, str]:
    return analyze_source_text(KERNELS, name).chain_ops


def test_the_longest_recurrence_of_a_trip_is_counted_per_work_item():
    """In loops whose trips differ between work-items (a start at the work-item id, a data-dependent
    exit or bound); a loop every work-item takes alike is counted apart (``uniform_<class>``: the
    core overlaps consecutive work-items' chains where they are short)."""
    # z * z * 0.5f + c: a multiply and an FMA (the compiler contracts x * y + c) wait for the trip before
    assert _chain("escape") == {"fp32_fma": "min(256, trip_l5_c3)", "fp32_mul": "min(256, trip_l5_c3)"}
    # s = fma(s, 0.75f, t): one FMA call; t does not depend on s, k is integer
    assert list(_chain("fused")) == ["fma_call"]
    # the inner loop's p * 0.5f + a[j] (data-bounded): an FMA per inner trip; the outer s += p: an add
    assert sorted(_chain("nested")) == ["fp32_add", "fp32_fma"]
    # both arms of an if are followed and the longer kept (s * a[j] + 1.0f, one FMA, against s - 1.0f,
    # one add: the first of equals)
    assert list(_chain("branches")) == ["fp32_fma"]
    # integer chains are left to the compiler to split, a chain through a load is not followed, and x
    # does not depend on itself
    assert _chain("counts") == {}
    # a loop every work-item takes alike: apart, but for its first trip (the test below)
    assert _chain("uniform") == {"uniform_fp32_fma": "max(0, max(0, n) - 41)"}



def test_the_chain_is_a_floor_under_scalar_arithmetic():
    """One escape-time trip waits 1.1 + 1.4 ns (a multiply and an FMA) for the trip before; with 256
    trips per work-item that is 640 ns of one compute unit, more than its arithmetic at the scalar
    rates (peak / 8 for the rule's scalar rates: 3 ops per trip at 12.5 Gop/s per 2 units). Without
    latencies nothing changes; an FMA call on the chain counts at the FMA latency unless the runtime
    calls its builtins out of line."""
    lat = {"chain_fp32_add_ns": 1.0, "chain_fp32_mul_ns": 1.1, "chain_fp32_fma_ns": 1.4}
    slow, plain = AnalyticalModel(cpu_profile(**lat)), AnalyticalModel(cpu_profile())
    f = analyze_source_text(KERNELS, "escape")
    args = [{"name": "data", "kind": "buffer", "dtype": "float", "count": 1024},
            {"name": "total", "kind": "scalar", "dtype": "int", "value": "1024"}]
    env = {k: np.asarray([v]) for k, v in config_env([1024], [64], args).items()}
    env["trip_l5_c3"] = np.asarray([256.0])
    feats = f.evaluate_many(env)
    assert float(chain_seconds(feats, slow.dev)[0]) == pytest.approx(256 * 2.5e-9)
    assert chain_seconds(feats, plain.dev) is None
    t_slow = float(slow.evaluate(f, env).parts["compute_s"][0])
    t_plain = float(plain.evaluate(f, env).parts["compute_s"][0])
    assert t_slow > 1.5 * t_plain and t_slow >= 1024 / 2 * 256 * 2.5e-9
    fused = analyze_source_text(KERNELS, "fused").evaluate_many({"n": np.asarray([100.0]),
                                                                 "gsize0": np.asarray([1.0])})
    assert fused[CHAIN_PREFIX + "fma_call"][0] == 100
    assert float(chain_seconds(fused, slow.dev)[0]) == pytest.approx(100 * 1.4e-9)
    out_of_line = AnalyticalModel(cpu_profile(**lat, wi_store_ns=0.5, wi_call_ns=4.0, wi_libcall_ns=3.5))
    assert out_of_line.dev.libcall_scalar and chain_seconds(fused, out_of_line.dev) is None


def test_fake_cpu_chain_latency():
    """calib chain reports the fake's per-unit time of one operation of one chain per work-item (the
    fake runs a width-1 kernel in groups of 64 at 0.54 of its class rate) and skips a GPU."""
    from tests.test_calib import FakeHarness, Truth, _fake_device

    truth = Truth(cu=2)
    truth.rates = {c: r / 1000 for c, r in truth.rates.items()}
    opts = CalibOptions(host_overhead=False, benches=("launch", "chain"), op_classes=("fp32_add", "fp32_fma"))
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    for cls in ("fp32_add", "fp32_fma"):
        assert p.get(f"chain_{cls}_ns") == pytest.approx(2e9 / (truth.rates[cls] * 0.54), rel=0.05), cls
    g = Calibrator(_fake_device(truth, "GPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert g.get("chain_fp32_add_ns") is None


#: trip counts that differ between work-items (one more for odd ones), as an escape-time loop's do
PAIR = """
__kernel void one_chain(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f;
  for (int it = 0; it < trips + (int)(get_global_id(0) & 1); ++it) z = z * z * 0.5f + d;
  data[get_global_id(0)] = z; }
__kernel void three_chains(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f, y = d, w = d * 0.25f;
  for (int it = 0; it < trips + (int)(get_global_id(0) & 1); ++it) { z = z * 0.5f; y = y + d; w = w * d; }
  data[get_global_id(0)] = z + y + w; }
"""


BARRIER_CHAINS = """
__kernel void chain_bar(__global float* data, __local float* l, int trips) {
  int tid = get_global_id(0); int lid = get_local_id(0);
  l[lid] = data[tid]; barrier(CLK_LOCAL_MEM_FENCE);
  float c = l[(lid + 1) % get_local_size(0)] * 0.1f; float z = c;
  for (int it = 0; it < trips + (tid & 1); it++) z = z * z * 0.5f + c;
  data[tid] = z; }
__kernel void chain_nobar(__global float* data, __local float* l, int trips) {
  int tid = get_global_id(0);
  float c = data[tid] * 0.1f; float z = c;
  for (int it = 0; it < trips + (tid & 1); it++) z = z * z * 0.5f + c;
  data[tid] = z; }
__kernel void uniform_bar(__global float* data, __local float* l, int trips) {
  int tid = get_global_id(0); int lid = get_local_id(0);
  l[lid] = data[tid]; barrier(CLK_LOCAL_MEM_FENCE);
  float c = l[(lid + 1) % get_local_size(0)] * 0.1f; float z = c;
  for (int it = 0; it < trips; it++) z = z * z * 0.5f + c;
  data[tid] = z; }
"""


def _barrier_chain_args(n: int, ls: int, trips: int) -> list[dict]:
    return [{"name": "data", "kind": "buffer", "dtype": "float", "count": n},
            {"name": "l", "kind": "local", "dtype": "float", "count": ls},
            {"name": "trips", "kind": "scalar", "dtype": "int", "value": str(trips)}]


def test_a_kernel_with_barriers_keeps_the_chains_of_loops_whose_trips_differ():
    """A barrier before the loop: the chain of a loop whose trips differ between work-items is still
    a floor under the arithmetic (as without the barrier), that of a loop all work-items take alike
    is not (the runtime's implicit loop barrier runs the group's work-items side by side in it)."""
    lat = {"chain_fp32_add_ns": 1.0, "chain_fp32_mul_ns": 1.1, "chain_fp32_fma_ns": 1.4}
    slow, plain = AnalyticalModel(cpu_profile(**lat)), AnalyticalModel(cpu_profile())
    rows = [{"source": BARRIER_CHAINS, "kernel_name": k, "gsize": [1024], "lsize": [64],
             "args": _barrier_chain_args(1024, 64, 256)} for k in ("chain_bar", "chain_nobar", "uniform_bar")]
    t = dict(zip(("chain_bar", "chain_nobar", "uniform_bar"), slow.predict(pd.DataFrame(rows)).time_us))
    t0 = dict(zip(("chain_bar", "chain_nobar", "uniform_bar"), plain.predict(pd.DataFrame(rows)).time_us))
    floor_us = 1024 / 2 * 256.5 * 2.5e-3           # two compute units, 256.5 trips of a multiply and an FMA
    assert t["chain_bar"] >= floor_us and t["chain_nobar"] >= floor_us
    assert t["chain_bar"] > 2 * t0["chain_bar"]
    assert t["uniform_bar"] == pytest.approx(t0["uniform_bar"], rel=1e-9)
    feats = analyze_source_text(BARRIER_CHAINS, "uniform_bar").evaluate_many(
        {k: np.asarray([v]) for k, v in config_env([1024], [64], _barrier_chain_args(1024, 64, 256)).items()})
    assert chain_seconds(feats, slow.dev) is not None and chain_seconds(feats, slow.dev, uniform=False) is None


NO_IMPLICIT = """
#define PRE __local float c[256]; int x = get_global_id(0); int l = get_local_id(0); \\
  c[l] = src[x]; barrier(CLK_LOCAL_MEM_FENCE); float s = c[(l + 1) % get_local_size(0)];
__kernel void down_bar(__global const float* src, __global float* dst, int trips) {
  PRE for (int i = trips - 1; i >= 0; --i) s = s * 0.999f + 1.0f; dst[x] = s; }
__kernel void down_nobar(__global const float* src, __global float* dst, int trips) {
  int x = get_global_id(0); float s = src[x]; for (int i = trips - 1; i >= 0; --i) s = s * 0.999f + 1.0f;
  dst[x] = s; }
__kernel void around_d(__global const float* src, __global float* dst, int trips) {
  PRE for (int i = 0; i < trips / 5; ++i) for (int d = -2; d <= 2; ++d) s = s * 0.999f + (float)d; dst[x] = s; }
__kernel void around_z(__global const float* src, __global float* dst, int trips) {
  PRE for (int i = 0; i < trips / 5; ++i) for (int d = 0; d < 5; ++d) s = s * 0.999f + (float)d; dst[x] = s; }
"""


def _no_implicit_binds(n: int, trips: int) -> list[ArgBinding]:
    return [ArgBinding("src", "buffer", "float", n, init="ones"), ArgBinding("dst", "buffer", "float", n),
            ArgBinding("trips", "scalar", "int", value=trips)]


def test_a_chain_in_a_loop_without_an_implicit_barrier_counts_in_a_kernel_with_barriers():
    """A loop all work-items take alike that counts down gets no implicit barrier from PoCL
    (``models.analytical.unbarriered_loops``): in a kernel with barriers its chain counts as in one
    without (it was left out as the chain of a loop the work-item loop runs inside)."""
    lat = {"chain_fp32_add_ns": 1.0, "chain_fp32_mul_ns": 1.1, "chain_fp32_fma_ns": 1.4}
    m = AnalyticalModel(cpu_profile(**lat))
    args = [{"name": "src", "kind": "buffer", "dtype": "float", "count": 1024},
            {"name": "dst", "kind": "buffer", "dtype": "float", "count": 1024},
            {"name": "trips", "kind": "scalar", "dtype": "int", "value": "512"}]
    rows = [{"source": NO_IMPLICIT, "kernel_name": k, "gsize": [1024], "lsize": [64], "args": args}
            for k in ("down_bar", "down_nobar")]
    bar, nobar = m.predict(pd.DataFrame(rows)).time_us
    floor_us = 1024 / 2 * (512 - 1 - CHAIN_OVERLAP_TRIPS) * 1.4e-3
    assert bar >= floor_us and nobar >= floor_us
    assert bar == pytest.approx(nobar, rel=0.2)


TILES = """
__kernel void tile_fma(__global const float* src, __global float* dst, __local float* tile) {
  int x = get_global_id(0); int l = get_local_id(0); int ls = get_local_size(0); int n = get_global_size(0);
  float acc = src[x];
  for (int base = 0; base < n; base += ls) {
    tile[l] = src[base + l]; barrier(CLK_LOCAL_MEM_FENCE);
    int cnt = min(ls, n - base);
    for (int t = 0; t < cnt; t++) acc = fma(acc, 0.999f, tile[t]);
    barrier(CLK_LOCAL_MEM_FENCE); }
  dst[x] = acc; }
__kernel void flat_fma(__global const float* src, __global float* dst, __local float* tile) {
  int x = get_global_id(0); int n = get_global_size(0);
  float acc = src[x];
  for (int t = 0; t < n; t++) acc = fma(acc, 0.999f, src[t]);
  dst[x] = acc; }
"""


def _tile_binds(n: int, ls: int) -> list[ArgBinding]:
    return [ArgBinding("src", "buffer", "float", n, init="ones"), ArgBinding("dst", "buffer", "float", n),
            ArgBinding("tile", "local", "float", ls)]


def test_the_chain_of_a_tile_loops_inner_loop_counts_in_groups_the_runtime_does_not_unroll():
    """The inner loop of a tile loop (a loop with barriers) is one all work-items take alike, but its
    chain is its own class (``inner_``): charged in a kernel with barriers in groups larger than
    ``barrier_unrolled_items``, not in those the runtime unrolls; a uniform loop's chain after a
    barrier, not inside a loop with one, stays uncharged (``uniform_``)."""
    assert list(analyze_source_text(TILES, "tile_fma").chain_ops) == ["inner_fma_call"]
    assert list(analyze_source_text(TILES, "flat_fma").chain_ops) == ["uniform_fma_call"]
    assert sorted(analyze_source_text(BARRIER_CHAINS, "uniform_bar").chain_ops) == ["uniform_fp32_fma",
                                                                                     "uniform_fp32_mul"]
    prof = cpu_profile(chain_fp32_fma_ns=2.0, barrier_unrolled_items=16.0)
    prof.curves["barrier_vs_local_size"] = Curve([8, 16, 32, 64], [1.0, 1.0, 40.0, 80.0], "work-items", "ns", "test")
    slow = AnalyticalModel(prof)
    assert slow.dev.barrier_unrolled_items == 16
    rows = [{"source": TILES, "kernel_name": "tile_fma", "gsize": [4096], "lsize": [ls],
             "args": [{"name": "src", "kind": "buffer", "dtype": "float", "count": 4096},
                      {"name": "dst", "kind": "buffer", "dtype": "float", "count": 4096},
                      {"name": "tile", "kind": "local", "dtype": "float", "count": ls}]} for ls in (16, 256)]
    env = config_env([4096], [256], rows[1]["args"])
    feats = analyze_source_text(TILES, "tile_fma").evaluate_many({k: np.asarray([v]) for k, v in env.items()})
    per_item = chain_seconds(feats, slow.dev, uniform=False, inner=np.asarray([True]))
    # 16 tiles of 256 trips, less the trips the core overlaps with the work-item before, at 2 ns
    assert per_item[0] == pytest.approx(16 * (256 - 1 - CHAIN_OVERLAP_TRIPS) * 2e-9)
    assert chain_seconds(feats, slow.dev, uniform=False, inner=np.asarray([False]))[0] == 0.0
    t = slow.predict(pd.DataFrame(rows)).time_us
    prof.values.pop("chain_fp32_fma_ns")
    t0 = AnalyticalModel(prof).predict(pd.DataFrame(rows)).time_us
    assert t[1] >= 4096 / 2 * per_item[0] * 1e6 > 1.5 * t0[1]
    assert t[0] == pytest.approx(t0[0], rel=1e-9)


MAX_CHAINS = """
__kernel void chain_add(__global const float* src, __global float* dst, int trips) {
  int x = get_global_id(0); float v = src[x]; float acc = 0.0f;
  for (int i = 0; i < trips; ++i) acc = acc + (v + (float)i);
  dst[x] = acc; }
__kernel void chain_fmax(__global const float* src, __global float* dst, int trips) {
  int x = get_global_id(0); float v = src[x]; float acc = 0.0f;
  for (int i = 0; i < trips; ++i) acc = fmax(acc, v + (float)i);
  dst[x] = acc; }
"""


def test_fmax_on_a_chain_counts_two_adds():
    """``fmax``/``fmin`` on a chain: a maximum and the blend that handles a NaN operand, two adds'
    latency; the call's other operand is off the chain."""
    assert list(analyze_source_text(MAX_CHAINS, "chain_add").chain_ops) == ["uniform_fp32_add"]
    env = config_env([1024], [64], [{"name": "src", "kind": "buffer", "dtype": "float", "count": 1024},
                                    {"name": "dst", "kind": "buffer", "dtype": "float", "count": 1024},
                                    {"name": "trips", "kind": "scalar", "dtype": "int", "value": "512"}])
    counts = {k: analyze_source_text(MAX_CHAINS, k).evaluate_many({a: np.asarray([v]) for a, v in env.items()})
              for k in ("chain_add", "chain_fmax")}
    key = CHAIN_PREFIX + "uniform_fp32_add"
    assert counts["chain_add"][key][0] > 0
    assert counts["chain_fmax"][key][0] == pytest.approx(2 * counts["chain_add"][key][0])


F64 = """
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void add64(__global double *x, int n)
{ int i = get_global_id(0); double acc = x[i], d = x[i] * 1e-9;
  for (int k = 0; k < n + (i & 1); ++k) acc = acc + d;
  x[i] = acc; }
__kernel void mul64(__global double *x, int n)
{ int i = get_global_id(0); double acc = x[i], d = 1.0 + x[i] * 1e-9;
  for (int k = 0; k < n + (i & 1); ++k) acc = acc * d;
  x[i] = acc; }
"""


def test_fp64_adds_and_multiplies_on_a_chain_take_the_fp32_latencies():
    """An fp64 add or multiply on a chain is its own class, at calib's fp64 value where measured and
    the fp32 one's where not (one adder, one multiplier); before, both counted at the fp64 FMA's."""
    assert list(analyze_source_text(F64, "add64").chain_ops) == ["fp64_add"]
    assert list(analyze_source_text(F64, "mul64").chain_ops) == ["fp64_mul"]
    dev = AnalyticalModel(cpu_profile(chain_fp32_add_ns=0.5, chain_fp32_mul_ns=0.7, chain_fp64_fma_ns=1.0)).dev
    assert dev.chain_s["fp64_add"] == pytest.approx(0.5e-9) and dev.chain_s["fp64_mul"] == pytest.approx(0.7e-9)
    own = AnalyticalModel(cpu_profile(chain_fp32_add_ns=0.5, chain_fp64_add_ns=0.6)).dev
    assert own.chain_s["fp64_add"] == pytest.approx(0.6e-9)


UNIFORM = """
__kernel void one_chain(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f;
  for (int it = 0; it < trips; ++it) z = z * 0.999f + d;
  data[get_global_id(0)] = z; }
__kernel void three_chains(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f, y = d, w = d * 0.25f;
  for (int it = 0; it < trips; ++it) { z = z * 0.999f; y = y + d; w = w * d; }
  data[get_global_id(0)] = z + y + w; }
"""


def test_a_chain_in_a_loop_all_work_items_take_alike_is_counted_apart():
    """Counted under ``uniform_<class>`` but for the first trip and the :data:`CHAIN_OVERLAP_TRIPS`
    the core overlaps with the work-item before: nothing of a short loop, almost all of a long one."""
    f = analyze_source_text(UNIFORM, "one_chain")
    assert f.chain_ops == {"uniform_fp32_fma": f"max(0, max(0, trips) - {CHAIN_OVERLAP_TRIPS + 1})"}
    dev = AnalyticalModel(cpu_profile(chain_fp32_fma_ns=1.0)).dev
    env = {"gsize0": np.asarray([1024.0, 1024.0]), "trips": np.asarray([16.0, 4096.0])}
    short, long = chain_seconds(f.evaluate_many(env), dev)
    assert short == pytest.approx(0.0)
    assert long == pytest.approx((4095 - CHAIN_OVERLAP_TRIPS) * 1e-9)



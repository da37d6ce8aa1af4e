"""The CPU device class of the analytical model and the calibration behind it: per-barrier and
per-work-item barrier cost (and the barriers a runtime unrolls away in small groups), per-core
cache levels, vectorization of uniform loops in kernels with barriers (checked against real PoCL
timings), host cache levels, and ``calib --rounds N``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.host_caches import CacheLevel, host_cache_levels, level_windows
from kernelcast.calib.microbench import CalibOptions, Calibrator
from kernelcast.calib.profile import Curve, DeviceIdentity, DeviceProfile, ProfileError, ProfileValue, combine_runs
from kernelcast.models.analytical import AnalyticalModel, cpu_vectorizable

KiB, MiB = 1024, 1024 * 1024

ONE_BARRIER = """__kernel void one(__global const float* a, __global float* b, __local float* l) {
  int i = get_global_id(0); int j = get_local_id(0);
  l[j] = a[i]; barrier(CLK_LOCAL_MEM_FENCE); b[i] = l[(j + 1) % get_local_size(0)]; }"""

# the same loop of two dependent LCG steps per trip, with and without a barrier after it, and with
# a trip count that differs between work-items
_BODY = """  uint s = seeds[gid] + (uint)gid * 747796405u + 1u; uint hits = 0;
  for (int k = 0; k < n; ++k) {
    s = s * 1664525u + 1013904223u; float x = (s >> 8) * (1.0f / 16777216.0f);
    s = s * 1664525u + 1013904223u; float y = (s >> 8) * (1.0f / 16777216.0f);
    hits += (x * x + y * y <= 1.0f); }"""
MC = f"""
__kernel void mc_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {{
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples;
{_BODY}
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }}
__kernel void mc_nobar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {{
  int gid = get_global_id(0); int n = samples;
{_BODY}
  out[gid] = hits; }}
__kernel void mc_div_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {{
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples + (gid & 1);
{_BODY}
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }}
__kernel void mc_down_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {{
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples;
{_BODY.replace("for (int k = 0; k < n; ++k)", "for (int k = n - 1; k >= 0; --k)")}
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }}
"""


def cpu_profile(**extra: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-cpu", device_type="CPU", compute_units=2, wg_multiple=8))
    vals = {"peak_fp32_fma_gops": 100.0, "peak_fp32_add_gops": 100.0, "peak_int32_add_gops": 100.0,
            "peak_int32_mul_gops": 50.0, "dram_bw_gbs": 20.0, "bw_level0_gbs": 200.0, "cache_level0_bytes": 1 << 20,
            "bw_level1_gbs": 20.0, "launch_overhead_us": 2.0, "wg_overhead_us": 0.01, "barrier_ns": 10.0, **extra}
    for k, v in vals.items():
        p.set(k, v, "?", "test")
    return p


def frame(src: str, name: str, rows: list) -> pd.DataFrame:
    return pd.DataFrame([{"source": src, "kernel_name": name, "gsize": [g], "lsize": [ls], "args": args}
                         for g, ls, args in rows])


def _args(n: int, ls: int) -> list[dict]:
    return [{"name": "a", "kind": "buffer", "dtype": "float", "count": n},
            {"name": "b", "kind": "buffer", "dtype": "float", "count": n},
            {"name": "l", "kind": "local", "dtype": "float", "count": ls}]


def test_barrier_cost_per_work_group_and_per_work_item():
    """One barrier per work-item; 1024 work-items in groups of 256 on 2 compute units: 4 groups,
    2 rounds of 2 side by side, each round one barrier of (10 + 2 x 256) ns: 1,044 ns."""
    m = AnalyticalModel(cpu_profile(barrier_wi_ns=2.0))
    p = m.predict(frame(ONE_BARRIER, "one", [(1024, 256, _args(1024, 256))]))
    assert p.explanation[0]["time_parts_us"]["sync"] == pytest.approx(1.044, rel=1e-6)
    # without the per-work-item value only the per-group cost: 2 x 10 ns
    p0 = AnalyticalModel(cpu_profile()).predict(frame(ONE_BARRIER, "one", [(1024, 256, _args(1024, 256))]))
    assert p0.explanation[0]["time_parts_us"]["sync"] == pytest.approx(0.020, rel=1e-6)


def test_unrolled_barriers_cost_the_measured_curve():
    """With ``barrier_unrolled_items`` (16) and the measured curve, a group of 16 pays the curve's
    cost per barrier (1.5 ns), not the line's (10 + 2 x 16 = 42 ns); a group of 8 interpolates it
    (1 ns), one of 4 takes the smallest measured (flat below it), and a group of 64 stays on the
    line. Without the value, or on a profile without the curve, the line everywhere."""
    prof = cpu_profile(barrier_wi_ns=2.0, barrier_unrolled_items=16)
    prof.curves["barrier_vs_local_size"] = Curve([8, 16, 32, 64], [1.0, 1.5, 2.0, 138.0], "work-items", "ns", "test")
    rows = [(1024, ls, _args(1024, ls)) for ls in (4, 8, 16, 64)]
    p = AnalyticalModel(prof).predict(frame(ONE_BARRIER, "one", rows))
    groups = [1024 // ls for ls in (4, 8, 16, 64)]
    rounds = [math.ceil(g / 2) for g in groups]                 # 2 compute units
    want = [r * c for r, c in zip(rounds, (1.0, 1.0, 1.5, 10 + 2 * 64))]
    assert [e["time_parts_us"]["sync"] * 1e3 for e in p.explanation] == pytest.approx(want, rel=1e-6)
    prof.values.pop("barrier_unrolled_items")
    p = AnalyticalModel(prof).predict(frame(ONE_BARRIER, "one", rows[2:3]))
    assert p.explanation[0]["time_parts_us"]["sync"] * 1e3 == pytest.approx(rounds[2] * (10 + 2 * 16), rel=1e-6)


def test_work_group_cost_depends_on_the_local_size():
    """launch + n_wg (a + b lsize): 64 groups of 16 -> 2 + 64 x (0.01 + 16 x 0.5e-3) us = 3.152 us;
    1024 work-items either way, so b adds the same 0.512 us to both."""
    m = AnalyticalModel(cpu_profile(wi_overhead_ns=0.5))
    p = m.predict(frame(ONE_BARRIER, "one", [(1024, 16, _args(1024, 16)), (1024, 256, _args(1024, 256))]))
    assert p.explanation[0]["time_parts_us"]["launch"] == pytest.approx(2 + 64 * (0.01 + 16 * 0.5e-3), rel=1e-9)
    assert p.explanation[1]["time_parts_us"]["launch"] == pytest.approx(2 + 4 * (0.01 + 256 * 0.5e-3), rel=1e-9)


def test_private_cache_level_seen_per_core():
    """A private 1 MiB level over 2 cores holds 512 KiB per core: 768 KiB of buffers over two busy
    cores (384 KiB each) fits, in one work-group (one core) it does not, 1.5 MiB over two cores
    (768 KiB each) does not. Shared by both cores, one busy core has all 1 MiB."""
    prof = cpu_profile()
    prof.set("cache_level0_cores", 1, "count", "test")
    m = AnalyticalModel(prof)
    n_fit = 768 * KiB // 8            # two float buffers of n elements: 8n bytes
    rows = [(2 * 256, 256, _args(n_fit, 256)), (256, 256, _args(n_fit, 256)),
            (2 * 256, 256, _args(2 * n_fit, 256))]
    p = m.predict(frame(ONE_BARRIER, "one", rows))
    assert [e["memory_level"] for e in p.explanation] == [0, 1, 1]
    # shared by both cores: one busy core has it all
    prof.set("cache_level0_cores", 2, "count", "test")
    p = AnalyticalModel(prof).predict(frame(ONE_BARRIER, "one", rows))
    assert [e["memory_level"] for e in p.explanation] == [0, 0, 1]


def _loop(trip: str, divergent: bool = False, depth: int = 1, **shape: bool) -> SimpleNamespace:
    return SimpleNamespace(trip=trip, trip_kind="affine", divergent=divergent, depth=depth, line=1, var="k",
                           **{"from_zero": True, "has_break": False, "early_exit": False, **shape})


def test_vectorizability_rule_for_loops_and_barriers():
    uni = _loop("max(0, samples)")
    feats = SimpleNamespace(accesses=[], ops={"int_add": "samples"}, loops=[uni])
    assert cpu_vectorizable(feats)[0] is False                        # no barrier: the loop stays scalar
    feats.ops["barrier"] = "1"
    ok, why = cpu_vectorizable(feats)
    assert ok and "implicit loop barriers" in why
    feats.loops = [_loop("max(0, samples + 1/2)", divergent=True)]
    assert cpu_vectorizable(feats)[0] is False                        # trip differs between work-items
    # PoCL's implicit loop barrier needs one exit and a counter from 0 by 1
    for shape, words in (({"from_zero": False}, "counting from 0 by 1"), ({"has_break": True}, "with a break"),
                         ({"early_exit": True}, "second exit")):
        feats.loops = [_loop("max(0, samples)", **shape)]
        ok, why = cpu_vectorizable(feats)
        assert not ok and words in why, why
    # a loop that contains barriers (its trip count is a factor of the barrier count)
    red = _loop("floor(log2(max(1, lsize0//2)))")
    feats = SimpleNamespace(accesses=[], ops={"barrier": "floor(log2(max(1, lsize0//2))) + 1"}, loops=[uni, red])
    assert cpu_vectorizable(feats)[0] is False                        # no per-work-item barrier cost known
    assert cpu_vectorizable(feats, barrier_loops=True)[0] is True     # charged per barrier and work-item
    inner = _loop("max(0, lsize0)", depth=2)
    feats.loops = [inner, red]
    assert cpu_vectorizable(feats, barrier_loops=True)[0] is False    # a loop inside the barrier loop


def test_a_loop_around_an_inner_loop_without_an_implicit_barrier_gets_none():
    """PoCL puts implicit barriers into innermost loops only: a uniform loop whose nested loop of a
    few constant trips gets none itself (counting from -2, a second exit) gets none either, and its
    work-item loop stays scalar; with a nested loop counting from 0 it is vectorized as before."""
    from kernelcast.models.analytical import unbarriered_loops

    inner, outer = _loop("5", depth=2), _loop("max(0, height//5)")
    outer.line = 7
    feats = SimpleNamespace(accesses=[], ops={"fp32_fma": "5*max(0, height//5)", "barrier": "1"},
                            loops=[inner, outer])
    assert cpu_vectorizable(feats)[0] is True and unbarriered_loops(feats) == []
    for shape in ({"from_zero": False}, {"early_exit": True}):
        feats.loops = [_loop("5", depth=2, **shape), outer]
        ok, why = cpu_vectorizable(feats)
        assert not ok and "innermost loops only" in why and "line 7" in why, why
        assert unbarriered_loops(feats) == [7]
    feats.loops = [_loop("max(0, height)", from_zero=False)]
    assert unbarriered_loops(feats) == [1]                            # its own shape
    feats.ops.pop("barrier")
    assert unbarriered_loops(feats) == []                             # no barrier: no implicit barriers at all


def test_unrolled_loops_follow_the_walkers_rule():
    """A constant loop is taken as unrolled (the work-item loop around it vectorizable) by the
    walker's rule for code motion (``walk_loop._unrolls_fully``): up to 16 trips without a pragma, a
    routine or an exit; any count under ``#pragma unroll``, routine or not; never under ``#pragma
    nounroll``."""
    def ok(trip: str, **shape) -> bool:
        feats = SimpleNamespace(accesses=[], ops={"fp32_add": trip}, loops=[_loop(trip, **shape)])
        return cpu_vectorizable(feats)[0]

    assert ok("4")
    assert not ok("32")
    assert ok("32", unroll_pragma=0) and ok("32", unroll_pragma=32) and not ok("32", unroll_pragma=8)
    assert not ok("4", unroll_pragma=1)
    assert not ok("4", has_break=True)
    assert not ok("4", calls=("bi_sin",)) and ok("4", calls=("bi_sin",), unroll_pragma=0)


TREE_SUM = """__kernel void tree_sum(__global const float* in, __global float* out, __local float* s) {
  int lid = get_local_id(0); int ls = get_local_size(0);
  s[lid] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = ls / 2; h > 0; h >>= 1) {
    if (lid < h) s[lid] += s[lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = s[0];
}"""


# ---------------------------------------------------------------------------------------------
# host cache levels and level windows


def _sysfs(root, entries):
    for i, (level, kind, size, shared) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")


def test_host_cache_levels_from_sysfs(tmp_path):
    _sysfs(tmp_path, [(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"), (2, "Unified", "1024K", "0"),
                      (3, "Unified", "32768K", "0-1")])
    lv = host_cache_levels(tmp_path)
    assert lv == [CacheLevel(1, 48 * KiB, 1), CacheLevel(2, MiB, 1), CacheLevel(3, 32 * MiB, 2)]
    assert [x.total_bytes(2) for x in lv] == [96 * KiB, 2 * MiB, 32 * MiB]
    assert lv[2].per_core_bytes(2) == 16 * MiB
    assert host_cache_levels(tmp_path / "missing") == []
    w = level_windows([96 * KiB, 2 * MiB])
    assert w[0] == (0.0, 64 * KiB) and w[1] == (144 * KiB, 2 * MiB / 1.5) and w[2] == (8 * MiB, math.inf)


def test_fake_cpu_calibration_uses_the_host_cache_sizes():
    """The fake device's levels are 64 KiB (private, 8 KiB per unit) and 4 MiB (shared): each
    level's bandwidth is the median of the points inside it, the sizes are the host's, not the
    curve's steps."""
    from tests.test_calib import FakeHarness, Truth, _fake_device

    truth = Truth()
    opts = CalibOptions(benches=("launch", "bandwidth", "latency"), host_overhead=False, max_bytes=64 * MiB,
                        host_caches=[CacheLevel(1, 8 * KiB, 1), CacheLevel(2, 4 * MiB, 8)])
    p = Calibrator(_fake_device(truth, "CPU"), FakeHarness(truth, energy=False), None, opts).run()
    assert p.get("cache_level0_bytes") == 64 * KiB and p.get("cache_level0_cores") == 1
    assert p.get("cache_level1_bytes") == 4 * MiB and p.get("cache_level1_cores") == 8
    assert p.get("bw_level0_gbs") == pytest.approx(800, rel=0.02)
    assert p.get("bw_level1_gbs") == pytest.approx(300, rel=0.02)
    assert p.get("dram_bw_gbs") == pytest.approx(100, rel=0.02) == p.get("bw_level2_gbs")
    assert p.entry("cache_level0_bytes").source.startswith("host: ")
    # latency: one work-item, one instance of each level (8 KiB is below the sweep's 16 KiB start)
    assert p.get("latency_level0_ns") == pytest.approx(10.0, rel=0.02)      # 16 KiB .. 2.7 MiB: truth level 1
    assert p.get("latency_level0_bytes") == 4 * MiB
    assert p.get("dram_latency_ns") == pytest.approx(80.0, rel=0.02)


# ---------------------------------------------------------------------------------------------
# several runs


def _run_profile(vals: dict[str, float], ys: list[float], xs: list[float], note: str) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="dev", device_type="CPU"), notes=[note])
    for k, v in vals.items():
        p.set(k, v, "u", "measured: test")
    p.curves["bw"] = Curve(xs, ys, "B", "GB/s", "measured: test")
    return p


def test_combine_runs_takes_medians_and_records_the_spread():
    runs = [_run_profile({"a": 10.0, "calib_host_load": 0.5, "b": 1.0}, [1, 2, 3], [1, 2, 3], "one"),
            _run_profile({"a": 12.0, "calib_host_load": 1.5}, [3, 2, 1], [1, 2, 4], "two"),
            _run_profile({"a": 11.0, "calib_host_load": 0.7, "b": 3.0}, [2, 2, 2], [1, 2, 3], "three")]
    c = combine_runs(runs)
    assert c.get("a") == 11.0 and c.entry("a").runs == 3
    assert c.entry("a").spread == pytest.approx(2 / 11)
    assert c.get("calib_host_load") == 1.5                      # the largest load, not the median
    assert c.get("b") == 2.0 and c.entry("b").runs == 2 and "2 of 3 runs" in c.entry("b").notes
    assert c.entry("b").spread == pytest.approx(1.0)
    assert c.curves["bw"].x == [1, 2] and c.curves["bw"].y == [2, 2]   # working sets all runs measured
    assert any(n.startswith("calib --rounds 3") for n in c.notes) and "run 2: two" in c.notes
    assert "median of 3 calibration runs" in c.describe()        # predict says so with the profile's age
    back = DeviceProfile.from_json(c.to_json())
    assert back.entry("a").spread == pytest.approx(2 / 11) and back.entry("a").runs == 3
    # one-run values keep their old JSON form
    assert "spread" not in ProfileValue(1.0, "u", "s").to_dict()


def test_profile_value_spread_and_runs_are_checked():
    with pytest.raises(ProfileError, match="spread"):
        ProfileValue.from_dict({"value": 1, "units": "u", "source": "s", "spread": -1}, "x")
    with pytest.raises(ProfileError, match="runs"):
        ProfileValue.from_dict({"value": 1, "units": "u", "source": "s", "runs": 1.5}, "x")


def test_calib_runs_option_is_checked_before_any_work(tmp_path):
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "calib", "--out", str(out), "--rounds", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--rounds 0" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_calib_runs_on_this_device(tmp_path):
    """Three quick runs of the overhead benchmarks on the real device: every value has its spread."""
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "calib", "--out", str(out), "--quick", "--rounds", "3",
                        "--only", "launch,wg,barrier", "--quiet"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    for k in ("launch_overhead_us", "wg_overhead_us", "barrier_wi_ns"):
        assert d["values"][k]["runs"] == 3 and d["values"][k]["spread"] >= 0
    assert "spread %" in r.stdout
    assert np.isfinite(d["values"]["wg_overhead_us"]["value"])


def test_uniform_loop_in_a_barrier_kernel_is_vectorized_and_its_variants_are_not():
    """The uniform loop with a barrier after it runs vectorized (the runtime's implicit loop barrier
    runs the group side by side in it); without the barrier, with trips that differ between
    work-items, or counting down (no implicit barrier) it stays scalar, and the scalar loop is
    predicted several times slower (``kernelcast validate`` measures the same pair)."""
    g, ls, n = 512, 64, 400
    rows = [(g, ls, [{"name": "seeds", "kind": "buffer", "dtype": "uint", "count": g},
                     {"name": "out", "kind": "buffer", "dtype": "uint", "count": g},
                     {"name": "l", "kind": "local", "dtype": "uint", "count": ls},
                     {"name": "samples", "kind": "scalar", "dtype": "int", "value": str(n)}])]
    m = AnalyticalModel(cpu_profile())
    pred = {k: m.predict(frame(MC, k, rows)) for k in ("mc_bar", "mc_nobar", "mc_div_bar", "mc_down_bar")}
    assert pred["mc_bar"].explanation[0]["cpu_vectorized"] is True
    for k in ("mc_nobar", "mc_div_bar", "mc_down_bar"):
        assert pred[k].explanation[0]["cpu_vectorized"] is False, k
        assert pred[k].time_us[0] > 2 * pred["mc_bar"].time_us[0], k


def test_throughput_loops_run_at_the_one_chain_rates_in_unrolled_groups():
    """In a group of at most ``barrier_unrolled_items`` (16, with the measured barrier curve) the
    runtime unrolls the work-items instead of running the work-item loop inside the uniform loop:
    with every one-chain rate a quarter of its peak the loop's computation costs 4x in groups of 8
    and 16, and the same as before in groups of 32 and 64; without one-chain rates (they default to
    the peaks), or without the unrolled size, nothing changes."""
    g, n = 512, 400

    def rows(ls: int) -> list:
        return [(g, ls, [{"name": "seeds", "kind": "buffer", "dtype": "uint", "count": g},
                         {"name": "out", "kind": "buffer", "dtype": "uint", "count": g},
                         {"name": "l", "kind": "local", "dtype": "uint", "count": ls},
                         {"name": "samples", "kind": "scalar", "dtype": "int", "value": str(n)}])]

    def compute(**extra: float) -> list[float]:
        prof = cpu_profile(barrier_wi_ns=1.0, **extra)
        prof.curves["barrier_vs_local_size"] = Curve([8, 16, 32, 64], [1.0, 1.5, 2.0, 138.0], "work-items", "ns",
                                                     "test")
        m = AnalyticalModel(prof)
        return [m.predict(frame(MC, "mc_bar", rows(ls))).explanation[0]["time_parts_us"]["compute"]
                for ls in (8, 16, 32, 64)]

    quarter = {"wi_fp32_fma_gops": 25.0, "wi_fp32_add_gops": 25.0, "wi_int32_add_gops": 25.0,
               "wi_int32_mul_gops": 12.5}
    peak = compute()
    assert peak == pytest.approx([peak[0]] * 4, rel=1e-12)
    assert compute(**quarter) == pytest.approx(peak, rel=1e-12)            # no unrolled size measured
    assert compute(barrier_unrolled_items=16) == pytest.approx(peak, rel=1e-12)
    got = compute(barrier_unrolled_items=16, **quarter)
    assert got == pytest.approx([4 * peak[0], 4 * peak[0], peak[0], peak[0]], rel=1e-9)


STRAIGHT = """__kernel void poly(__global const float* a, __global float* b) {
  int i = get_global_id(0); float x = a[i];
  x = fma(x, 0.5f, 1.0f); x = fma(x, 0.5f, 1.0f); x = fma(x, 0.5f, 1.0f); x = fma(x, 0.5f, 1.0f);
  b[i] = x; }"""


def test_vectorized_cpu_code_runs_at_the_one_chain_rate():
    """A profile with wi_fp32_fma_gops = 25 (a quarter of its 100 Gop/s peak) and no other wi_
    value: every class of vectorized code runs at a quarter of its peak, so the compute part is
    exactly 4x; a GPU-free profile without wi_ values keeps the peaks."""
    rows = [(1 << 16, 256, [{"name": "a", "kind": "buffer", "dtype": "float", "count": 1 << 16},
                            {"name": "b", "kind": "buffer", "dtype": "float", "count": 1 << 16}])]
    base = AnalyticalModel(cpu_profile()).predict(frame(STRAIGHT, "poly", rows))
    slow = AnalyticalModel(cpu_profile(wi_fp32_fma_gops=25.0)).predict(frame(STRAIGHT, "poly", rows))
    assert base.explanation[0]["cpu_vectorized"] is True
    c0 = base.explanation[0]["time_parts_us"]["compute"]
    assert slow.explanation[0]["time_parts_us"]["compute"] == pytest.approx(4 * c0, rel=1e-9)
    # 4 FMAs per work-item of 65,536 on 2 cores at 25 Gop/s: at least 10.5 us of compute
    assert slow.explanation[0]["time_parts_us"]["compute"] >= 4 * (1 << 16) / 25e9 * 1e6


def test_runs_wait_for_the_load_calibration_left_behind(monkeypatch):
    """Between runs the load average is calibration's own: the next run waits for it to drop
    below --max-load (here it falls 1.9, 1.6, 1.2 while waiting) and is refused if it never does."""
    import kernelcast.calib.local as local
    import kernelcast.calib.microbench as mb

    from tests.test_calib import Truth, _fake_device

    dev = _fake_device(Truth(), "CPU")
    loads = iter([1.9, 1.6, 1.2])
    monkeypatch.setattr(mb, "_loadavg", lambda: next(loads))
    monkeypatch.setattr(mb.time, "sleep", lambda s: None)
    local._settle(dev, CalibOptions(max_load=1.5), "before run 2", None)       # returns once 1.2 is seen
    monkeypatch.setattr(mb, "_loadavg", lambda: 1.9)
    monkeypatch.setattr(local, "RUN_SETTLE_S", 0.0)
    with pytest.raises(mb.HostBusyError, match="before run 2"):
        local._settle(dev, CalibOptions(max_load=1.5), "before run 2", None)


def test_throughput_loops_run_at_the_peak_rates():
    """A uniform loop without memory accesses in a kernel with barriers runs a pass over independent
    work-items per trip (peak rates); a loop that reads memory, a nested loop or no barrier: the
    one-chain rates. A loop with barriers (a tree reduction) does not count either way."""
    from kernelcast.models.analytical import cpu_throughput_loops

    red = _loop("floor(log2(max(1, lsize0//2)))")
    samples = SimpleNamespace(trip="max(0, samples)", trip_kind="affine", divergent=False, depth=1, line=7)
    ops = {"barrier": "floor(log2(max(1, lsize0//2))) + 1"}
    local = SimpleNamespace(count="floor(log2(max(1, lsize0//2)))")
    mc = SimpleNamespace(accesses=[local], ops=ops, loops=[samples, red])
    assert cpu_throughput_loops(mc) == [7]
    reads = SimpleNamespace(accesses=[local, SimpleNamespace(count="max(0, samples)")], ops=ops, loops=[samples, red])
    assert cpu_throughput_loops(reads) == []
    nested = SimpleNamespace(accesses=[], ops=ops, loops=[SimpleNamespace(**{**vars(samples), "depth": 2}), red])
    assert cpu_throughput_loops(nested) == []
    assert cpu_throughput_loops(SimpleNamespace(accesses=[], ops={}, loops=[samples])) == []
    # the model: the same vectorized kernel at the peak instead of the one-chain rate
    rows = [(512, 64, [{"name": "seeds", "kind": "buffer", "dtype": "uint", "count": 512},
                       {"name": "out", "kind": "buffer", "dtype": "uint", "count": 512},
                       {"name": "l", "kind": "local", "dtype": "uint", "count": 64},
                       {"name": "samples", "kind": "scalar", "dtype": "int", "value": "400"}])]
    prof = cpu_profile(wi_fp32_fma_gops=25.0, barrier_wi_ns=1.0)
    p = AnalyticalModel(prof).predict(frame(MC, "mc_bar", rows))
    assert p.explanation[0]["cpu_rates"].startswith("peak")
    base = AnalyticalModel(cpu_profile(barrier_wi_ns=1.0)).predict(frame(MC, "mc_bar", rows))
    assert p.explanation[0]["time_parts_us"]["compute"] == pytest.approx(
        base.explanation[0]["time_parts_us"]["compute"], rel=1e-9)

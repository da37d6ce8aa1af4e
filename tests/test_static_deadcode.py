"""Dead loops and break-bounded trip counts in the source analysis (hand-computed answers), and
on the device: the compiler really removes a dead loop, and a break-bounded loop really stops."""

from __future__ import annotations

import pytest
from kernelcast.instrument.runner import TimingPolicy
from kernelcast.models.static.source import analyze_source_text

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

OVERWRITTEN = """__kernel void over(__global float* out, const int iters) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < iters; k++) { acc += sin((float)k * 0.001f); }
  acc = 2.0f;
  out[i] = acc;
}"""
UNUSED = """__kernel void unused(__global float* out, const int iters) {
  int i = get_global_id(0);
  float acc = 0.0f, t = 0.0f;
  for (int k = 0; k < iters; k++) { acc += sin((float)k); }
  t = acc * 2.0f;
  out[i] = 1.0f;
}"""
# overwritten on both sides of an if/else, through an intermediate variable (the synthetic
# stencil shape: the loop result feeds 'val', and 'val' is overwritten before the store)
BOTH_SIDES = """__kernel void both(__global const float* a, __global float* out, int iters) {
  int i = get_global_id(0);
  float s = 0.0f;
  for (int k = 0; k < iters; k++) { s += a[(i + k) % 64] * 0.5f; }
  float val = a[i] + s;
  if ((i & 1) == 0) { val = a[i]; } else { val = 2.0f * a[i]; }
  out[i] = val;
}"""
# the same through a helper function without effects (the synthetic reductions: 2^11-2^12x too slow)
THROUGH_HELPER = """float mix2(float a, float b) { float t = a * b; return t + a; }
__kernel void helper(__global const float* a, __global float* out, int iters) {
  int i = get_global_id(0);
  float s = 0.0f;
  for (int k = 0; k < iters; k++) { s += sin(a[(i + k) % 64]); }
  float val = mix2(a[i] + s, s);
  if ((i & 1) == 0) { val = a[i]; } else { val = 2.0f * a[i]; }
  out[i] = val;
}"""
# ... but a helper that stores keeps the loop
HELPER_STORES = THROUGH_HELPER.replace(
    "float mix2(float a, float b) { float t = a * b; return t + a; }",
    "float mix2(__global float* o, float a, float b) { o[1] = a; return a + b; }").replace(
    "mix2(a[i] + s, s)", "mix2(out, a[i] + s, s)")
PARTLY = """__kernel void partly(__global float* out, const int iters) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < iters; k++) { acc += sin((float)k); }
  if (i > 3) acc = 1.0f;
  out[i] = acc;
}"""
STORES = """__kernel void stores(__global float* out, const int iters) {
  int i = get_global_id(0);
  for (int k = 0; k < iters; k++) { out[i] = (float)k; }
}"""
CARRIED = """__kernel void carried(__global float* out, const int iters, const int reps) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < iters; k++) { acc += sin((float)k); }
    acc = acc * 0.5f;
  }
  out[i] = acc;
}"""
STRIDED_BREAK = """__kernel void sbreak(__global const float* a, __global float* b, int n, int per_item) {
  int i = get_global_id(0);
  for (int t = 0; t < per_item; t++) {
    int j = i + t * (int)get_global_size(0);
    if (j >= n) break;
    b[j] = a[j] * 2.0f;
  }
}"""
WHILE_BREAK = """__kernel void wbreak(__global float* b, int n) {
  int i = get_global_id(0);
  int j = 0;
  while (1) {
    if (j >= n || j >= 100) break;
    b[i] += 1.0f;
    j++;
  }
}"""
DATA_BREAK = """__kernel void dbreak(__global const float* a, __global float* b, int iters) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int k = 0; k < iters; k++) {
    acc += a[(i + k) % 64];
    if (acc > 1000.0f) break;
  }
  b[i] = acc;
}"""


def _loop(src: str, name: str):
    f = analyze_source_text(src, name)
    assert len(f.loops) >= 1
    return f, f.loops[0]


@pytest.mark.parametrize("src,name", [(OVERWRITTEN, "over"), (UNUSED, "unused"), (BOTH_SIDES, "both"),
                                      (THROUGH_HELPER, "helper")])
def test_dead_loops_are_not_counted(src, name):
    f, lp = _loop(src, name)
    assert lp.trip_kind == "dead" and lp.trip == "0"
    assert "dead code" in lp.assumed
    assert any("dead code" in n for n in f.notes)
    v = f.evaluate({"gsize0": 1024, "iters": 1 << 20})
    assert v["sfu"] == 0.0
    assert v["fp32_add"] <= 2.0      # at most the statements outside the loop


@pytest.mark.parametrize("src,name", [(PARTLY, "partly"), (STORES, "stores"), (CARRIED, "carried")])
def test_live_loops_are_counted(src, name):
    f = analyze_source_text(src, name)
    assert all(lp.trip_kind == "affine" for lp in f.loops)
    v = f.evaluate({"gsize0": 1024, "iters": 100, "reps": 3})
    if name == "partly":
        assert v["sfu"] == pytest.approx(100)
    elif name == "carried":
        assert v["sfu"] == pytest.approx(300)
    else:
        assert v["global_stores"] == pytest.approx(100)


def test_a_helper_with_an_effect_keeps_the_loop():
    f = analyze_source_text(HELPER_STORES, "helper")
    assert [lp.trip_kind for lp in f.loops] == ["affine"]


def test_break_on_a_counter_bound_limits_the_trip_count():
    _f, lp = _loop(STRIDED_BREAK, "sbreak")
    assert "j >= n" in lp.assumed
    f = analyze_source_text(STRIDED_BREAK, "sbreak")
    g = 4096
    # j = i + t*g < n: with n = g every work-item runs one trip (the loop bound per_item = g)
    assert f.evaluate({"gsize0": g, "n": g, "per_item": g})["global_stores"] == pytest.approx(1.0)
    # n = 4g: four trips each; per_item = 2 caps it at two
    assert f.evaluate({"gsize0": g, "n": 4 * g, "per_item": 1 << 20})["global_stores"] == pytest.approx(4.0)
    assert f.evaluate({"gsize0": g, "n": 4 * g, "per_item": 2})["global_stores"] == pytest.approx(2.0)


def test_break_bounds_an_unbounded_while_loop():
    f, lp = _loop(WHILE_BREAK, "wbreak")
    assert lp.trip_kind == "affine"
    assert f.evaluate({"gsize0": 64, "n": 40})["global_stores"] == pytest.approx(40)
    assert f.evaluate({"gsize0": 64, "n": 4000})["global_stores"] == pytest.approx(100)


ESCAPE = """__kernel void esc(__global const float* a, __global float* b, int max_iter) {
  int i = get_global_id(0); float z = a[i]; int it = 0;
  while (it < max_iter && fabs(z) <= 4.0f) { z = z * z * 0.5f + 0.25f; it++; }
  b[i] = z; }"""


def test_data_dependent_exits_assume_avg_trip_below_the_static_bound():
    """A break or loop condition on loaded data: the static bound is only an upper bound, and
    min(bound, avg_trip) is assumed (avg_trip defaults to 8, as for loops bounded by data)."""
    f, lp = _loop(DATA_BREAK, "dbreak")
    assert lp.has_break and "data-dependent exit" in lp.assumed
    assert f.evaluate({"gsize0": 64, "iters": 50})["global_loads"] == pytest.approx(8)
    assert f.evaluate({"gsize0": 64, "iters": 5})["global_loads"] == pytest.approx(5)
    assert f.evaluate({"gsize0": 64, "iters": 50, "avg_trip": 30})["global_loads"] == pytest.approx(30)
    f, lp = _loop(ESCAPE, "esc")
    assert lp.early_exit and "data-dependent exit" in lp.assumed
    assert f.evaluate({"gsize0": 64, "max_iter": 1 << 20})["fp32_fma"] == pytest.approx(8)


REAL = TimingPolicy(warmup=2, min_repeats=5, min_time_s=0.0, max_repeats=10, max_time_s=5)


def _median_us(harness, src: str, name: str, g: int, scalars: dict[str, int]) -> float:
    args = [ArgBinding("out", "buffer", "float", count=g, init="zeros")] + [
        ArgBinding(k, "scalar", "int", value=v) for k, v in scalars.items()]
    m = harness.run(Kernel(src, name), LaunchConfig((g,), (64,), args), REAL)
    assert m.status == "ok", m.reason
    return m.time.median_us


@pytest.mark.slow
def test_device_removes_the_dead_loop_and_keeps_the_live_one(device, harness):
    """2^20 sines per work-item would take seconds; the dead loop costs what an empty kernel does.
    The live loop (PARTLY) with the same trip count is at least 100x slower than the dead one."""
    g = 4096
    dead = _median_us(harness, OVERWRITTEN, "over", g, {"iters": 1 << 20})
    empty = _median_us(harness, OVERWRITTEN, "over", g, {"iters": 0})
    live = _median_us(harness, PARTLY, "partly", g, {"iters": 1 << 12})
    assert dead < 20 * max(empty, 5.0)
    assert live > 10 * dead


CLOSED = """__kernel void closed(__global const int* source, __global int* out, const int niters) {
  const int id = get_global_id(0); const int s = source[id]; int acc = 0;
  for (int i = 0; i < niters; i++) { acc += (s - s % 3) * (i + clamp(s, 0, 255)); }
  out[id] = acc;
}"""
NOT_CLOSED = {
    "loads": """__kernel void k(__global const int* source, __global int* out, const int niters) {
  const int id = get_global_id(0); int acc = 0;
  for (int i = 0; i < niters; i++) { acc += source[(id + i) & 63]; }
  out[id] = acc; }""",
    "float": """__kernel void k(__global const float* source, __global float* out, const int niters) {
  const int id = get_global_id(0); float acc = 0.0f;
  for (int i = 0; i < niters; i++) { acc += (float)i * 2.0f; }
  out[id] = acc; }""",
    "division": """__kernel void k(__global const int* source, __global int* out, const int niters) {
  const int id = get_global_id(0); int acc = source[id];
  for (int i = 0; i < niters; i++) { acc += acc / 3 + i; }
  out[id] = acc; }""",
    # scalar evolution models no vector: synth_loop_000085 (seed 23) was predicted 23,000x too fast
    "vector": """__kernel void k(__global const int2* source, __global int2* out, const int niters) {
  const int id = get_global_id(0); int2 s = source[id]; int2 acc = (int2)(0);
  for (int i = 0; i < niters; i++) { acc += s + i; }
  out[id] = acc * s; }""",
}


def test_integer_sum_loops_are_closed_form():
    f, lp = _loop(CLOSED, "closed")
    assert lp.trip_kind == "closed_form" and lp.trip == "1" and "closed form" in lp.assumed
    # one pass: the product and the two multiplies of ``s % 3`` (by the reciprocal), not 2^20 of them
    assert f.evaluate({"gsize0": 1024, "niters": 1 << 20})["int_mul"] <= 3.0


#: a synthetic stencil's inner loop: its load, calls and select read only loop-invariant values
#: (hoisted), and what it adds is affine in the counter (the synthetic corpus, seed 23: 5,000x too slow)
CLOSED_HOISTED = """__kernel void k(__global const int* x, __global const int* y, __global int* out, int n, int steps) {
  int gi = get_global_id(0);
  if (gi < n) {
    int xv = x[gi], yv = y[gi], acc = 0;
    const int w[5] = {2, 2, -1, 1, -1};
    for (int d = -2; d <= 2; d++) {
      for (int i = 0; i < steps; i++) {
        int xj = x[clamp(gi + d, 0, n - 1)];
        acc += w[d + 2] * ((((yv + xv) * (xj + yv) <= xv) ? (int)abs(xj) + popcount(xj) : yv) - i);
      }
    }
    out[gi] = 2 + acc;
  }
}"""
NOT_HOISTED = {
    "variant load": CLOSED_HOISTED.replace("x[clamp(gi + d, 0, n - 1)]", "x[clamp(gi + i, 0, n - 1)]"),
    "variant select": CLOSED_HOISTED.replace("<= xv) ?", "<= i) ?"),
    "assigned declaration": CLOSED_HOISTED.replace("int xj = x[clamp(gi + d, 0, n - 1)];",
                                                   "int xj = x[clamp(gi + d, 0, n - 1)]; xj += 1;"),
}


def test_loop_invariant_values_are_hoisted_before_the_closed_form():
    f = analyze_source_text(CLOSED_HOISTED, "k")
    inner = [lp for lp in f.loops if lp.var == "i"]
    assert [lp.trip_kind for lp in inner] == ["closed_form"]
    ops = f.evaluate({"gsize0": 4096, "n": 4096, "steps": 4096})
    assert ops["global_loads"] <= 2 + 5 and ops["libcall"] <= 3 * 5     # once per entry, not per trip
    for why, src in NOT_HOISTED.items():
        g = analyze_source_text(src, "k")
        assert [lp.trip_kind for lp in g.loops if lp.var == "i"] == ["affine"], why


@pytest.mark.parametrize("why", sorted(NOT_CLOSED))
def test_other_loops_are_not_closed_form(why):
    f = analyze_source_text(NOT_CLOSED[why], "k")
    assert [lp.trip_kind for lp in f.loops] == ["affine"]


def _one_trip_or_many(harness, src: str, name: str, args: list, trips: str, many: int) -> list[float]:
    """Median times of kernel ``name`` with the scalar ``trips`` at 1 and at ``many``; asserts that
    the many trips cost what one costs (within 20x): the compiler removed the loop."""
    g = 4096
    times = []
    for n in (1, many):
        m = harness.run(Kernel(src, name), LaunchConfig((g,), (64,), args + [
            ArgBinding(trips, "scalar", "int", value=n)]), REAL)
        assert m.status == "ok", m.reason
        times.append(m.time.median_us)
    assert times[1] < 20 * max(times[0], 5.0), times
    return times


@pytest.mark.slow
def test_device_computes_the_integer_sum_in_closed_form(device, harness):
    """2^20 iterations per work-item cost what 1 iteration costs: the loop is gone."""
    _one_trip_or_many(harness, CLOSED, "closed", [ArgBinding("source", "buffer", "int", count=4096, init="random"),
                                                  ArgBinding("out", "buffer", "int", count=4096, init="zeros")],
                      "niters", 1 << 20)


@pytest.mark.slow
def test_device_runs_every_trip_of_a_vector_sum(device, harness):
    """The int2 sum of NOT_CLOSED: 2^14 trips per work-item cost far more than 1 (the loop stays)."""
    g = 4096
    times = []
    for n in (1, 1 << 14):
        m = harness.run(Kernel(NOT_CLOSED["vector"], "k"), LaunchConfig((g,), (64,), [
            ArgBinding("source", "buffer", "int2", count=g, init="random"),
            ArgBinding("out", "buffer", "int2", count=g, init="zeros"),
            ArgBinding("niters", "scalar", "int", value=n)]), REAL)
        assert m.status == "ok", m.reason
        times.append(m.time.median_us)
    assert times[1] > 100 * max(times[0], 5.0), times


@pytest.mark.slow
def test_device_hoists_the_invariant_values_and_computes_the_sum_in_closed_form(device, harness):
    """The hoisted stencil loop: 2^16 trips per work-item cost what 1 trip costs."""
    g = 4096
    args = [ArgBinding("x", "buffer", "int", count=g, init="random"), ArgBinding("y", "buffer", "int", count=g),
            ArgBinding("out", "buffer", "int", count=g, init="zeros"), ArgBinding("n", "scalar", "int", value=g)]
    _one_trip_or_many(harness, CLOSED_HOISTED, "k", args, "steps", 1 << 16)


@pytest.mark.slow
def test_device_removes_the_loop_whose_result_dies_in_a_helper_call(device, harness):
    """THROUGH_HELPER with 2^16 trips per work-item costs what 1 trip costs: the loop is gone."""
    _one_trip_or_many(harness, THROUGH_HELPER, "helper",
                      [ArgBinding("a", "buffer", "float", count=4096, init="random"),
                       ArgBinding("out", "buffer", "float", count=4096, init="zeros")], "iters", 1 << 16)


#: a value computed and then overwritten on both sides of an if/else (synth_stencil_000282, seed
#: 23: its pow was charged, 4.9x too slow); the loads that fed only it die with it
DEAD_STMT = """__kernel void k(__global const float* a, __global const float* b, __global float* out) {
  int i = get_global_id(0);
  float m = b[i];
  float v = pow(fabs(m), 0.37f) * 3.0f;
  if (a[i] > 0.5f) { v = a[i]; } else { v = -a[i]; }
  out[i] = v;
}"""
LIVE_STMT = {
    "read on one side": DEAD_STMT.replace("{ v = -a[i]; }", "{ v = v - a[i]; }"),
    "overwritten on one side only": DEAD_STMT.replace(" else { v = -a[i]; }", ""),
    "read in the condition": DEAD_STMT.replace("if (a[i] > 0.5f)", "if (a[i] > v)"),
}
NO_POW = DEAD_STMT.replace("  float v = pow(fabs(m), 0.37f) * 3.0f;\n", "  float v;\n")


def test_a_value_overwritten_before_any_read_is_not_counted():
    f = analyze_source_text(DEAD_STMT, "k")
    env = {"gsize0": 4096}
    assert f.evaluate(env).get("bi_pow", 0.0) == 0.0
    assert sum("line 4 not counted" in n for n in f.notes) == 1
    assert sum("line 3 not counted" in n for n in f.notes) == 1          # the load of m fed only it
    # what is left is the kernel without the pow (whose load of m is dead too)
    assert f.evaluate(env) == pytest.approx(analyze_source_text(NO_POW, "k").evaluate(env))
    for why, src in LIVE_STMT.items():
        g = analyze_source_text(src, "k")
        assert g.evaluate(env).get("bi_pow", 0.0) > 0, why


@pytest.mark.slow
def test_device_deletes_the_overwritten_value(device, harness):
    """The kernel with the dead pow runs as fast as the one without it (within 1.5x), and the one
    that reads it on one side is slower than both (the pow is real work on this device)."""
    g = 1 << 18
    args = [ArgBinding("a", "buffer", "float", count=g, init="random"),
            ArgBinding("b", "buffer", "float", count=g, init="random"),
            ArgBinding("out", "buffer", "float", count=g, init="zeros")]
    t = {}
    for label, src in (("dead", DEAD_STMT), ("none", NO_POW), ("live", LIVE_STMT["read on one side"])):
        m = harness.run(Kernel(src, "k"), LaunchConfig((g,), (64,), args), REAL)
        assert m.status == "ok", m.reason
        t[label] = m.time.median_us
    assert t["dead"] < 1.5 * t["none"], t
    assert t["live"] > 1.5 * max(t["dead"], t["none"]), t

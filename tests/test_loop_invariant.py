"""Loop-invariant code motion in the static counts: a computation of values that no iteration of a
loop changes runs once per entry of that loop, as the compiler hoists it (LLVM's LICM on every
target). Without it, synthetic stencils that call ``exp`` or ``log1p`` of a loaded value inside a
loop of ``n`` trips were predicted 8-25x too slow on this device (ds6). Checked by hand and against
a real measurement."""

from __future__ import annotations

from kernelcast.models.static.source import analyze_source_text

LOOPS = """
__kernel void invariant(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float x = a[i]; float acc = 0.0f;
  for (int k = 0; k < it; k++) { acc = acc * 0.999f + exp(x) - (float)k; } c[i] = acc; }
__kernel void variant(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float x = a[i]; float acc = 0.0f;
  for (int k = 0; k < it; k++) { acc = acc * 0.999f + exp(x - (float)k); } c[i] = acc; }
__kernel void under_if(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float x = a[i]; float acc = 0.0f;
  for (int k = 0; k < it; k++) { if (acc > 1.0f) acc += exp(x); acc -= 0.5f; } c[i] = acc; }
__kernel void in_select(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float x = a[i]; float acc = 0.0f;
  for (int k = 0; k < it; k++) { acc += (acc > 1.0f) ? exp(x) : 0.5f; } c[i] = acc; }
__kernel void nested(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float x = a[i]; float acc = 0.0f;
  for (int j = 0; j < 4; j++) {
    for (int k = 0; k < it; k++) { acc += exp(x) + sqrt(x + (float)j) - (float)k; } }
  c[i] = acc; }
__kernel void after_inner(__global const float *a, __global float *c, int it)
{ int i = get_global_id(0); float acc = 0.0f;
  for (int j = 0; j < 4; j++) {
    float s = a[i];
    for (int k = 0; k < it; k++) { s = s * 0.5f + 1.0f; }
    acc += exp(s); }
  c[i] = acc; }
"""


def _ops(name: str) -> dict[str, str]:
    return analyze_source_text(LOOPS, name).ops


def test_a_call_of_values_the_loop_does_not_change_is_counted_once():
    f = analyze_source_text(LOOPS, "invariant")
    assert f.ops["bi_exp"] == "1"
    assert any("exp at line 4: loop-invariant" in n for n in f.notes)
    assert _ops("variant")["bi_exp"] == "max(0, it)"


def test_a_call_under_an_if_in_the_loop_stays_and_a_select_arm_leaves():
    assert "it" in _ops("under_if")["bi_exp"]         # a library call is not speculated past an if
    assert _ops("in_select")["bi_exp"] == "1"         # the arms of ?: are computed as a select


def test_nested_loops_hoist_each_call_out_of_the_loops_it_does_not_depend_on():
    ops = _ops("nested")
    assert ops["bi_exp"] == "1"                       # out of both loops
    assert ops["bi_sqrt"] == "4"                      # depends on j: out of the inner loop only
    # exp(s) of a value the inner loop computed: once per outer iteration, not hoisted further
    assert _ops("after_inner")["bi_exp"] == "4"


VECTOR_CMP = """__kernel void vcmp(__global const int4 *data, __global int4 *res, const int n) {
  int i = get_global_id(0);
  int4 d = data[i];
  int4 s = (int4)(0);
  for (int a = 0; a < 64; a++) {
    for (int b = 0; b < 3; b++) {
      int4 g = (b + d) * a;
      if (any(g > 2)) s += g;
    }
  }
  res[i] = s;
}
"""


def test_a_value_the_analysis_cannot_follow_made_in_a_loop_stays_in_it_whatever_came_before():
    """``g > 2`` on a vector the walk keeps no polynomial of is an unknown value made inside both
    loops: its ``any`` runs on every inner trip (64 x 3), never hoisted, and the analysis is the
    same in a fresh process and after other kernels' analyses (its unknown values were numbered by a
    process-wide count, which loop-invariant code motion read as the walk's own order)."""
    first = analyze_source_text(VECTOR_CMP, "vcmp")
    for _ in range(3):
        analyze_source_text(LOOPS, "nested")
    again = analyze_source_text(VECTOR_CMP, "vcmp")
    assert first.ops == again.ops and first.notes == again.notes
    assert not any("loop-invariant" in n for n in first.notes)
    assert first.ops["int_bit"] == "192"


def test_arithmetic_of_invariant_values_is_counted_once_per_loop_entry():
    ops = _ops("invariant")
    # per iteration: acc * 0.999f + e (one fma) and - (float)k (an add and a conversion)
    assert ops["fp32_fma"] == "max(0, it)"
    assert ops["conv"] == "max(0, it)"



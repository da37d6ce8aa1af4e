"""Code motion out of loops the compiler unrolls fully: after a loop over ``i`` is unrolled, a
computation made of ``i`` and of values from before the loops is one copy per ``i``, each invariant
in the loops outside, and leaves them (``pow(w / (1 + i), 1.5f)`` inside a loop over ``d``: 8 calls
per work-item, not 40). Checked on the static counts and against real launches on this device."""

from __future__ import annotations

import pytest
from kernelcast.models.static.loops import unroll_pragma
from kernelcast.models.static.source import analyze_source_text

from kernelcast.clang import parse

BODY = """
    int gi = get_global_id(0); int len = get_global_size(0);
    float w = window[((uint)gi * 2) % len];
    float energy = -FLT_MAX;
    for (int d = 0; d < dn; d++) {
        PRAGMA
        for (int i = 0; i < 8; i++) {
            float xj = window[clamp(gi + d, 0, len - 1)];
            float q = (0.3333333f - w ARG) / (1.0f + fabs(max((float)i, gamma)));
            energy = fmax(energy, 0.2f * pow(fabs(q), 1.5f) * xj);
        }
    }
    out[gi] = energy;
}
"""
SIG = "__kernel void {}(__global const float* window, __global float* out, float gamma, int dn) {{"
VARIANTS = (("unrolled", "#pragma unroll", ""), ("of_d", "#pragma unroll", "+ d"), ("no_pragma", "", ""),
            ("unroll_1", "#pragma unroll 1", ""), ("unroll_4", "#pragma unroll 4", ""),
            ("unroll_8", "#pragma unroll 8", ""))
KERNELS = "\n".join(SIG.format(name) + BODY.replace("PRAGMA", pragma).replace("ARG", arg)
                    for name, pragma, arg in VARIANTS)
INT_LOOPS = """
__kernel void sums(__global const int* restrict u, __global const int* restrict filter,
                   __global int* restrict out, const int steps) {
  const int idx = get_global_id(0); const int num = get_global_size(0); int energy = 0;
  for (int i = 0; i < steps; i++)
    for (int d = -2; d <= 2; d++) energy += filter[d + 2] * u[clamp(idx + d, 0, num - 1)] / 8 * i;
  out[idx] = energy;
}
__kernel void sums_break(__global const int* restrict u, __global const int* restrict filter,
                         __global int* restrict out, const int steps) {
  const int idx = get_global_id(0); const int num = get_global_size(0); int energy = 0;
  for (int i = 0; i < steps; i++)
    for (int d = -2; d <= 2; d++) {
      if (u[idx] == d) break;
      energy += filter[d + 2] * u[clamp(idx + d, 0, num - 1)] / 8 * i;
    }
  out[idx] = energy;
}
"""


def _pow_calls(name: str) -> float:
    f = analyze_source_text(KERNELS, name)
    return float(f.evaluate_many({"dn": 5.0, "gsize0": 1024.0})["bi_pow"])


def test_a_computation_of_an_unrolled_loops_counter_leaves_the_loops_outside():
    """8 pow calls per work-item where the unrolled loop's 8 copies do not depend on ``d``, 40 where
    they do, where the loop calling a routine is not unrolled (no pragma: too large), or where the
    pragma's count is below the trips (a partial unroll leaves a loop)."""
    assert _pow_calls("unrolled") == pytest.approx(8)
    assert _pow_calls("unroll_8") == pytest.approx(8)
    for name in ("of_d", "no_pragma", "unroll_1", "unroll_4"):
        assert _pow_calls(name) == pytest.approx(40), name
    note = " ".join(analyze_source_text(KERNELS, "unrolled").notes)
    assert "pow at line" in note and "hoisted out of the loop" in note


def test_arithmetic_of_a_small_constant_loop_leaves_a_loop_around_it():
    """``filter[d + 2] * u[idx + d] / 8`` does not depend on ``i``: after the loop over ``d`` (5
    trips) is unrolled, its 5 multiplies leave the loop over ``i`` (PoCL 3.1's code gathers and
    multiplies before it); with a ``break`` in the loop over ``d`` it is not unrolled, and they stay."""
    env = {"steps": 512.0, "gsize0": 1024.0}
    hoisted = analyze_source_text(INT_LOOPS, "sums").evaluate_many(env)
    kept = analyze_source_text(INT_LOOPS, "sums_break").evaluate_many(env)
    assert float(kept["int_mul"]) == pytest.approx(512 * 5 * 2)        # two multiplies per trip of d and i
    assert float(hoisted["int_mul"]) == pytest.approx(512 * 5 + 5)     # the products once, the * i per trip


PRAGMAS = """
__kernel void p(__global float* o) {
  float s = 0.0f;
  #pragma unroll
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma unroll(4)
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma unroll 3
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma nounroll
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma clang loop unroll(full)
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma clang loop unroll(disable)
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma clang loop unroll_count(2)
  for (int i = 0; i < 8; i++) s += o[i];
  #pragma clang loop vectorize(enable)
  for (int i = 0; i < 8; i++) s += o[i];
  o[0] = s;
}
"""


def test_unroll_pragmas_are_read():
    """The count of each form (0: full, 1: none); a pragma that says nothing of unrolling is None."""
    got = [unroll_pragma(c) for c in parse(KERNELS).cursor.walk_preorder() if c.kind.name == "UNEXPOSED_STMT"]
    assert [g for g in got if g is not None] == [0, 0, 1, 4, 8]
    got = [unroll_pragma(c) for c in parse(PRAGMAS).cursor.walk_preorder() if c.kind.name == "UNEXPOSED_STMT"]
    assert got == [0, 4, 3, 1, 0, 1, 2, None]



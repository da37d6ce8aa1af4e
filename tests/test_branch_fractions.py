"""Branch fractions of guards on the row-major linear index of a 2D or 3D launch
(``y * get_global_size(0) + x < n``): the share of work-items below ``n`` is ``n`` over all of them.
Taken one id at a time with the other at its mean, the guard held for none whenever ``n`` was less
than half the launch (a memory-selection ``synth_loop2d`` kernel predicted 1,600x too fast)."""

from __future__ import annotations

import math

import pytest
from kernelcast.models.static.source import analyze_source_text

BODY = """{
  int x = get_global_id(0), y = get_global_id(1);
  int lin = y * get_global_size(0) + x;
  if (lin < n) {
    float v = a[lin];
    for (int k = 0; k < reps; k++) v = v * 0.999f + 0.5f;
    o[lin] = v;
  }
}"""
SIG = "(__global const float* a, __global float* o, const int n, const int reps)"
SRC = f"__kernel void all_rows{SIG}\n{BODY}\n__kernel void some_rows{SIG}\n{BODY}\n"

VOL = """__kernel void vol(__global float* o, const int n) {
  int lin = (get_global_id(2) * get_global_size(1) + get_global_id(1)) * get_global_size(0) + get_global_id(0);
  if (lin < n) o[lin] = 1.0f;
}"""
PITCHED = """__kernel void pitched(__global float* o, const int n, const int pitch) {
  int lin = get_global_id(1) * pitch + get_global_id(0);
  if (lin < n) o[lin] = 1.0f;
}"""


def _share(expr: str, **env: float) -> float:
    return float(eval(expr, {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor}, env))


def test_a_guard_on_the_linear_index_holds_for_n_of_all_work_items():
    f = analyze_source_text(SRC, "some_rows")
    fma = f.ops["fp32_fma"]
    assert "n/(gsize0*gsize1)" in fma, fma
    assert _share(fma, reps=1, n=4096, gsize0=256, gsize1=64) == pytest.approx(0.25)
    assert _share(fma, reps=1, n=10 ** 6, gsize0=256, gsize1=64) == 1.0
    g = analyze_source_text(VOL, "vol")
    (store,) = [a.count for a in g.accesses if a.arg == "o"]
    brute = sum(1 for z in range(4) for y in range(8) for x in range(16) if (z * 8 + y) * 16 + x < 300) / 512
    assert _share(store, n=300, gsize0=16, gsize1=8, gsize2=4) == pytest.approx(brute)
    # a pitch that is not the launch's width: not the linear index, one id at a time as before
    h = analyze_source_text(PITCHED, "pitched")
    (store,) = [a.count for a in h.accesses if a.arg == "o"]
    assert "gsize1)" not in store and "n/(gsize0*gsize1)" not in store, store



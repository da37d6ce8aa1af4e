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




TILED = """__kernel void tiled(__global const float* in, __global float* out, const int n) {
  int base = get_group_id(0) * get_local_size(0) * 4 + get_local_id(0);
  for (int t = 0; t < 4; t++) {
    int i = base + t * get_local_size(0);
    if (i < n) out[i] = in[i] * 2.0f;
  }
}"""


def _tiled_brute(n: int, lsize: int, ngroups: int) -> float:
    """Loads per work-item of TILED, counted over every work-item and tile."""
    hits = sum(1 for g in range(ngroups) for lid in range(lsize) for t in range(4)
               if g * lsize * 4 + lid + t * lsize < n)
    return hits / (lsize * ngroups)


@pytest.mark.parametrize("n,lsize,ngroups", [(4096, 64, 64), (4096, 32, 128), (1000, 64, 64), (20000, 16, 512)])
def test_a_tiled_guard_counts_the_groups_it_holds_for(n: int, lsize: int, ngroups: int):
    """Four tiles per work-item on a launch of one work-item per element (the grid not divided by
    the tile): the guard holds for the first quarter of the groups. Taken one id at a time with the
    group id at its mean it held for none, and the kernel was charged no global bytes."""
    f = analyze_source_text(TILED, "tiled")
    env = {"gsize0": float(lsize * ngroups), "lsize0": float(lsize), "ngroups0": float(ngroups),
           "gsize1": 1.0, "lsize1": 1.0, "ngroups1": 1.0, "gsize2": 1.0, "lsize2": 1.0, "ngroups2": 1.0,
           "n": float(n), "warp": 32.0}
    got = f.evaluate(env)
    brute = _tiled_brute(n, lsize, ngroups)
    assert got["global_load_bytes"] == pytest.approx(4 * brute, rel=0.03)
    assert got["global_store_bytes"] == pytest.approx(4 * brute, rel=0.03)
    assert got["global_fetched_bytes"] > 0


# Kernel Tuner's way: the block size is a literal define, so the group stride is a number the
# analysis cannot tie to the local size; a tile of T elements per work-item, strided by T
LITERAL = """#define BX {bx}
#define T 4
__kernel void lit(__global const float* in, __global float* out, const int n) {{
  int x = get_group_id(0) * BX * T + get_local_id(0) * T;
  for (int t = 0; t < T; t++) {{
    int i = x + t;
    if (i < n) out[i] = in[i] * 2.0f;
  }}
}}"""


@pytest.mark.parametrize("bx,n,ngroups", [(1, 25000, 25000), (64, 4096, 64), (64, 1000, 64), (16, 20000, 1250)])
def test_a_literal_group_stride_counts_the_groups_it_holds_for(bx: int, n: int, ngroups: int):
    """A launch of one work-item per element with a tile of four per work-item and the block size
    a literal: the guard holds for the first quarter of the work-items. Taken one id at a time with
    the group id at its mean it held for none (a tile of 4 and more) or for all (a tile of 2)."""
    f = analyze_source_text(LITERAL.format(bx=bx), "lit")
    env = {"gsize0": float(bx * ngroups), "lsize0": float(bx), "ngroups0": float(ngroups),
           "gsize1": 1.0, "lsize1": 1.0, "ngroups1": 1.0, "gsize2": 1.0, "lsize2": 1.0, "ngroups2": 1.0,
           "n": float(n), "warp": 32.0}
    got = f.evaluate(env)
    hits = sum(1 for g in range(ngroups) for lid in range(bx) for t in range(4) if g * bx * 4 + lid * 4 + t < n)
    brute = hits / (bx * ngroups)
    assert got["global_load_bytes"] == pytest.approx(4 * brute, rel=0.03)
    assert got["global_store_bytes"] == pytest.approx(4 * brute, rel=0.03)


# the tile strided by the (literal) block size, as dedispersion's y tiles: the tile loop's counter
# spreads each group's indices over its whole stride
STRIDED = """#define BX {bx}
#define T 5
__kernel void strided(__global const float* in, __global float* out, const int n) {{
  int y = get_group_id(0) * BX * T + get_local_id(0);
  for (int t = 0; t < T; t++) {{
    int i = y + t * BX;
    if (i < n) out[i] = in[i] * 2.0f;
  }}
}}"""


@pytest.mark.parametrize("bx,n,ngroups", [(224, 2048, 10), (64, 1000, 8), (32, 4096, 40)])
def test_a_tile_strided_by_a_literal_block_counts_each_copy(bx: int, n: int, ngroups: int):
    f = analyze_source_text(STRIDED.format(bx=bx), "strided")
    env = {"gsize0": float(bx * ngroups), "lsize0": float(bx), "ngroups0": float(ngroups),
           "gsize1": 1.0, "lsize1": 1.0, "ngroups1": 1.0, "gsize2": 1.0, "lsize2": 1.0, "ngroups2": 1.0,
           "n": float(n), "warp": 32.0}
    got = f.evaluate(env)
    hits = sum(1 for g in range(ngroups) for lid in range(bx) for t in range(5) if g * bx * 5 + lid + t * bx < n)
    assert got["global_load_bytes"] == pytest.approx(4 * hits / (bx * ngroups), rel=1e-6)

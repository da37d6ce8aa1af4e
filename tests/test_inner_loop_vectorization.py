"""An innermost loop that the compiler's loop vectorizer takes on its own within one work-item
(``rank += (in[j] < v)`` over ``j``) runs at vector rates even where the runtime leaves the
work-item loop scalar; the same loop carrying a float does not (the sum is not reordered without
fast-math). The static count keeps such loops' operations apart (``loopvec_ops``) and the CPU
class charges them at the peak rates (so_rank_scatter was predicted 6.5x too slow on ds6
without it). Checked by hand and against a real measurement."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, ProfileValue
from kernelcast.models.analytical import DeviceParams, inner_loop_correction
from kernelcast.models.static.source import analyze_source_text

LOOPS = """
__kernel void count_below(__global const float *in, __global int *out, const int n, const int m)
{ int i = get_global_id(0); if (i >= n) return; float v = in[i]; int r = 0;
  for (int j = 0; j < m; ++j) { float w = in[j]; r += (w < v); } out[i] = r; }
__kernel void float_sum(__global const float *in, __global int *out, const int n, const int m)
{ int i = get_global_id(0); if (i >= n) return; float v = in[i]; float r = 0.0f;
  for (int j = 0; j < m; ++j) { float w = in[j]; r += w * v; } out[i] = (int)r; }
__kernel void with_if(__global const float *in, __global int *out, const int n, const int m)
{ int i = get_global_id(0); float v = in[i]; int r = 0;
  for (int j = 0; j < m; ++j) { if (in[j] < v) r++; } out[i] = r; }
__kernel void gather(__global const float *in, __global const int *idx, __global int *out, const int m)
{ int i = get_global_id(0); float v = in[i]; int r = 0;
  for (int j = 0; j < m; ++j) { r += (in[idx[j]] < v); } out[i] = r; }
__kernel void stores(__global const float *in, __global int *out, const int m)
{ int i = get_global_id(0); for (int j = 0; j < m; ++j) out[i * m + j] = (int)in[j]; }
__kernel void lcg(__global uint *out, const int m)
{ int i = get_global_id(0); uint s = i; uint hits = 0;
  for (int j = 0; j < m; ++j) { s = s * 1664525u + 1013904223u; hits += (s >> 31); } out[i] = hits; }
__kernel void nested(__global const float *in, __global int *out, const int m)
{ int i = get_global_id(0); int r = 0;
  for (int k = 0; k < 4; ++k) { for (int j = 0; j < m; ++j) r += (in[j] < in[k]); } out[i] = r; }
"""


def test_an_integer_count_loop_is_marked_and_the_others_are_not():
    f = analyze_source_text(LOOPS, "count_below")
    assert set(f.loopvec_ops) == {"cmp", "int_add", "branch", "loads"}
    assert f.loopvec_ops["loads"] == "max(0, m)*min(1, max(0, n/gsize0))"
    for name in ("float_sum", "with_if", "gather", "stores", "lcg"):   # lcg: a recurrence, not a reduction
        assert analyze_source_text(LOOPS, name).loopvec_ops == {}, name
    # only the innermost loop: its trips (two loads each), four times
    assert analyze_source_text(LOOPS, "nested").loopvec_ops["loads"] == "8*max(0, m)"


def test_the_marked_operations_are_charged_at_the_peak_rate():
    p = DeviceProfile(DeviceIdentity(name="cpu", vendor="x", device_type="CPU", compute_units=2))
    for k, v in {"peak_int32_add_gops": 100.0, "scalar_int32_add_gops": 10.0}.items():
        p.values[k] = ProfileValue(v, "Gop/s", "measured")
    d = DeviceParams.from_profile(p)
    corr = inner_loop_correction({"loopvec:int_add": np.array([10.0]), "loopvec:loads": np.array([5.0])}, d)
    assert corr == pytest.approx(15 / 100e9 - 15 / 10e9)


TILE_WALK = """
__kernel void int_max(__global const int* field, __global int* out, __local int* tile, const int size)
{ const int gid = get_global_id(0), lid = get_local_id(0), wg = get_local_size(0);
  int acc = INT_MIN;
  for (int base = 0; base < size; base += wg) {
    tile[lid] = base + lid < size ? field[base + lid] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int cnt = min(wg, size - base);
    for (int t = 0; t < cnt; t++) acc = max(acc, tile[t] + 4);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (gid < size) out[gid] = acc & 0xffff; }
__kernel void float_min(__global const float* field, __global float* out, __local float* tile, const int size)
{ const int gid = get_global_id(0), lid = get_local_id(0), wg = get_local_size(0);
  float acc = 0.0f;
  for (int base = 0; base < size; base += wg) {
    tile[lid] = base + lid < size ? field[base + lid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int cnt = min(wg, size - base);
    for (int t = 0; t < cnt; t++) acc = fmin(acc, 1.0f + tile[t]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (gid < size) out[gid] = acc; }
__kernel void int_no_walk(__global const int* field, __global int* out, __local int* tile, const int size)
{ const int gid = get_global_id(0), lid = get_local_id(0), wg = get_local_size(0);
  int acc = INT_MIN;
  for (int base = 0; base < size; base += wg) {
    tile[lid] = base + lid < size ? field[base + lid] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    acc = max(acc, tile[lid] + min(wg, size - base));
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (gid < size) out[gid] = acc & 0xffff; }
"""


def test_an_integer_max_over_a_tile_is_a_reduction_and_a_float_min_is_not():
    """``acc = max(acc, tile[t] + 4)`` over an int tile is a reduction the loop vectorizer splits
    into lanes (integer min / max are single instructions, not library calls); the same walk with
    ``fmin`` on floats is a chain it does not reorder."""
    f = analyze_source_text(TILE_WALK, "int_max")
    assert "loads" in f.loopvec_ops and "libcall" not in f.ops
    assert analyze_source_text(TILE_WALK, "float_min").loopvec_ops == {}
    src = ("__kernel void k(__global int* o, int n)"
           "{ int s = 0; for (int j = 0; j < n; j++) s = max(s * 2, j); o[0] = s; }")
    assert analyze_source_text(src, "k").loopvec_ops == {}                  # max of a recurrence: no



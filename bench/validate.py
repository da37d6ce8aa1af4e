"""The validation benchmark of the analytical model: pairs of kernels (or one kernel at two
configurations) measured on the device and predicted with its profile, each check comparing the
measured ratio of their times with the predicted one.

A check states what the model must get right about a runtime (a guarded store that keeps a
work-item loop scalar, a routine's latency on a loop-carried chain, a divider with a roofline of its
own, ...). It is *within* when the predicted ratio lies within ``bound`` times the measured one
(``measured / bound < predicted < measured * bound``) and the measured ratio is above ``floor`` where
the check gives one (the fact of the runtime that the check relies on: without it the two kernels
do not differ and the check says nothing). A check without a bound only states that fact.

The kernels of a check are measured in interleaved rounds (one kernel after the other in each round,
each kernel's rounds pooled), so that a host that slows down in phases slows both alike; the figures
still move with the host's load, which is why this is a benchmark that prints figures and not a
test. ``kernelcast validate`` runs it::

    kernelcast validate [--profile P] [--device D] [--only PATTERN] [--rounds N] [--json]

Also runnable as ``python -m kernelcast.bench.validate``.
"""

from __future__ import annotations

import argparse
import fnmatch
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelcast.console import fmt_table, json_number, to_json
from kernelcast.errors import UsageError
from kernelcast.options import PROFILE_DEVICE_HELP, ROUNDS_HELP, add_device, add_quiet, positive_int
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

if TYPE_CHECKING:
    from kernelcast.calib.profile import DeviceProfile
    from kernelcast.instrument.backends import DeviceInfo
    from kernelcast.instrument.harness import Harness
    from kernelcast.models.analytical import AnalyticalModel

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# the kernels

DIVISION_LOOP = r"""
__kernel void with_mod(__global const float *a, __global float *c, const int n, const int m)
{ int i = get_global_id(0); if (i < n) { float s = 0; for (int k = 0; k < m; ++k) s += a[(i + k) % n]; c[i] = s; } }
__kernel void without(__global const float *a, __global float *c, const int n, const int m)
{ int i = get_global_id(0); if (i < n) { float s = 0; for (int k = 0; k < m; ++k) s += a[k]; c[i] = s; } }
"""

DIVISORS = r"""
__kernel void by_arg(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) % n; }
__kernel void by_const(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) % 100u; }
__kernel void masked(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) & 127u; }
"""

EXP2 = r"""
__kernel void k_exp2(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp2(-x[i]); }
__kernel void k_exp(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp(-x[i]); }
"""

ROUTINE_LOOPS = r"""
__kernel void k_data(__global float* restrict a)
{ int i = get_global_id(0); float x = a[i]; a[i] = exp(x) + exp(x + 0.25f) + exp(x + 0.5f) + exp(x + 0.75f); }
__kernel void k_loop(__global float* restrict a)
{ int i = get_global_id(0); float t = a[i]; for (int j = 0; j < 4; j++) t += exp(-fabs((float)j)); a[i] = t; }
__kernel void k_sqrt_loop(__global float* restrict a)
{ int i = get_global_id(0); float t = a[i]; for (int j = 0; j < 4; j++) t += sqrt(t + j); a[i] = t; }
"""

CHEAPER_FORMS = r"""
__kernel void k_sin(__global const float *x, __global float *o) { int i = get_global_id(0); o[i] = sin(x[i]); }
__kernel void k_native_sin(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = native_sin(x[i]); }
__kernel void k_exp2(__global const float *x, __global float *o) { int i = get_global_id(0); o[i] = exp2(x[i]); }
__kernel void k_exp_ln2(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp(x[i] * M_LN2_F); }
"""

POLY = r"""
__kernel void poly8(__global const float8 *in, __global float8 *out, const int n)
{ int i = get_global_id(0); if (i < n) { float8 x = in[i]; out[i] = ((x * 0.5f + 1.0f) * x - 2.0f) * x + 0.25f; } }
__kernel void poly1(__global const float *in, __global float *out, const int n)
{ int i = get_global_id(0); if (i < n) { float x = in[i]; out[i] = ((x * 0.5f + 1.0f) * x - 2.0f) * x + 0.25f; } }
__kernel void mixed(__global const int4 *a, __global int4 *b, __global float *c)
{ int i = get_global_id(0); int4 v = a[i] ^ (int4)(3); b[i] = v + 1; c[i] = convert_float4(v).x * 2.0f; }
"""

VECTOR_MATH = r"""
__kernel void pow4(__global const float *a, __global float *c, const float s)
{ int i = get_global_id(0); vstore4(pow(vload4(i, a), (float4)(s)), i, c); }
__kernel void pow1(__global const float *a, __global float *c, const float s)
{ int i = get_global_id(0); c[i] = pow(a[i], s); }
"""

CHAIN_PAIR = r"""
__kernel void one_chain(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f;
  for (int it = 0; it < trips + (int)(get_global_id(0) & 1); ++it) z = z * z * 0.5f + d;
  data[get_global_id(0)] = z; }
__kernel void three_chains(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f, y = d, w = d * 0.25f;
  for (int it = 0; it < trips + (int)(get_global_id(0) & 1); ++it) { z = z * 0.5f; y = y + d; w = w * d; }
  data[get_global_id(0)] = z + y + w; }
"""

BARRIER_CHAINS = r"""
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

NO_IMPLICIT = r"""
#define PRE __local float c[256]; int x = get_global_id(0); int l = get_local_id(0); \
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

TILES = r"""
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

MAX_CHAINS = r"""
__kernel void chain_add(__global const float* src, __global float* dst, int trips) {
  int x = get_global_id(0); float v = src[x]; float acc = 0.0f;
  for (int i = 0; i < trips; ++i) acc = acc + (v + (float)i);
  dst[x] = acc; }
__kernel void chain_fmax(__global const float* src, __global float* dst, int trips) {
  int x = get_global_id(0); float v = src[x]; float acc = 0.0f;
  for (int i = 0; i < trips; ++i) acc = fmax(acc, v + (float)i);
  dst[x] = acc; }
"""

F64_CHAINS = r"""
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

UNIFORM_CHAINS = r"""
__kernel void one_chain(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f;
  for (int it = 0; it < trips; ++it) z = z * 0.999f + d;
  data[get_global_id(0)] = z; }
__kernel void three_chains(__global float *data, int trips)
{ float d = data[get_global_id(0)]; float z = d * 0.5f, y = d, w = d * 0.25f;
  for (int it = 0; it < trips; ++it) { z = z * 0.999f; y = y + d; w = w * d; }
  data[get_global_id(0)] = z + y + w; }
"""

_UNROLLED_BODY = """
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
_UNROLLED_SIG = "__kernel void {}(__global const float* window, __global float* out, float gamma, int dn) {{"
#: a loop over i unrolled by its pragma: pow of i alone (8 copies, each invariant in the loop over d)
#: and pow of i and d (40 calls)
UNROLLED = "\n".join(_UNROLLED_SIG.format(name) + _UNROLLED_BODY.replace("PRAGMA", "#pragma unroll").replace("ARG", arg)
                     for name, arg in (("unrolled", ""), ("of_d", "+ d")))

ROWS_2D = r"""__kernel void all_rows(__global const float* a, __global float* o, const int n, const int reps)
{
  int x = get_global_id(0), y = get_global_id(1);
  int lin = y * get_global_size(0) + x;
  if (lin < n) {
    float v = a[lin];
    for (int k = 0; k < reps; k++) v = v * 0.999f + 0.5f;
    o[lin] = v;
  }
}
__kernel void some_rows(__global const float* a, __global float* o, const int n, const int reps)
{
  int x = get_global_id(0), y = get_global_id(1);
  int lin = y * get_global_size(0) + x;
  if (lin < n) {
    float v = a[lin];
    for (int k = 0; k < reps; k++) v = v * 0.999f + 0.5f;
    o[lin] = v;
  }
}
"""

INVARIANT = r"""
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

JOIN_FMA = r"""
__kernel void one_group(__global float *out, float s, float t, int iters)
{ float a = get_global_id(0) * 0.001f; for (int i = 0; i < iters; ++i) a = a * s + t; out[get_global_id(0)] = a; }
__kernel void many_groups(__global float *out, float s, float t, int iters)
{ float a = get_global_id(0) * 0.001f; for (int i = 0; i < iters; ++i) a = a * s + t; out[get_global_id(0)] = a; }
"""

GUARDED = r"""
__kernel void guarded(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 1.5f + b[i]; }
__kernel void plain(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = a[i] * 1.5f + b[i]; }
"""

CALLS = r"""
__kernel void k_fmax(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = fmax(a[i], b[i]) * 1.5f; }
__kernel void k_select(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); float x = a[i], y = b[i]; c[i] = (x > y ? x : y) * 1.5f; }
__kernel void k_mix(__global const float4 *a, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = dot(a[i], a[i]) + clamp(convert_float(n), 0.0f, 1.0f) + sqrt(c[i]); }
"""

ROUTINE_CHAINS = r"""
__kernel void sin_chain(__global const float *x, __global float *o) {
  int i = get_global_id(0); float v = x[i];
  for (int k = 0; k < 32; ++k) v = v * 0.99f + sin(v);
  o[i] = v;
}
__kernel void sin_4chains(__global const float *x, __global float *o) {
  int i = get_global_id(0); float a = x[i], b = a + 0.25f, c = a + 0.5f, d = a + 0.75f;
  for (int k = 0; k < 8; ++k) { a = a * 0.99f + sin(a); b = b * 0.99f + sin(b); c = c * 0.99f + sin(c);
                                d = d * 0.99f + sin(d); }
  o[i] = a + b + c + d;
}
__kernel void sin_indep(__global const float *x, __global float *o) {
  int i = get_global_id(0); float a = x[i], s = 0.0f;
  for (int k = 0; k < 32; ++k) s += sin(a + 0.1f * k);
  o[i] = s;
}
__kernel void escape(__global const float *x, __global float *o, float c) {
  int i = get_global_id(0); float z = x[i]; int it = 0;
  for (; it < 16; it++) { z = sin(z) * 2.0f + c; if (fabs(z) > 2.0f) break; }
  o[i] = z + it;
}
__kernel void adds_or_exp(__global const float *x, __global float *o, int n) {
  int i = get_global_id(0); float a = x[i], b = a;
  for (int k = 0; k < n; ++k) { a = a + 1.0f; a = a + 2.0f; a = a + 3.0f; b = exp(-b); }
  o[i] = a + b;
}
__kernel void sqrt_chain(__global const float *x, __global float *o) {
  int i = get_global_id(0); float v = x[i];
  for (int k = 0; k < 32; ++k) v = sqrt(v + 1.0f);
  o[i] = v;
}
"""

FLAG = r"""
__kernel void with_flag(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; *not_done = 1; } }
__kernel void no_flag(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; } }
__kernel void flag_always(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; }
  *not_done = 1; }
"""

GATHER = r"""
__kernel void gather(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[idx[i]]; }
__kernel void copy(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[i]; }
__kernel void hashed(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[(i * 7919) & (n - 1)]; }
__kernel void pairs(__global const float *src, __global const int *idx, __global float *dst, const int h)
{ int i = get_global_id(0); if (i < h) { dst[2 * i] = src[i]; dst[2 * i + 1] = src[i + h]; } }
__kernel void halves(__global const float *src, __global const int *idx, __global float *dst, const int h)
{ int i = get_global_id(0); if (i < h) { dst[i] = src[i]; dst[i + h] = src[i + h]; } }
__kernel void clamped(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  dst[i] = src[max(i - 1, 0)] + src[clamp(i + 1, 0, n - 1)] + src[min(i + 2, n - 1)] + src[i]; }
__kernel void shifted(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); dst[i] = src[i + 1] + src[i + 2] + src[i + 3] + src[i]; }
__kernel void shifted_wide(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ size_t i = get_global_id(0); dst[i] = src[i + 1] + src[i + 2] + src[i + 3] + src[i]; }
__kernel void shifted_guarded(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  dst[i] = (i + 1 < n ? src[i + 1] : 0.0f) + (i + 2 < n ? src[i + 2] : 0.0f) + (i >= 3 ? src[i - 3] : 0.0f) + src[i]; }
__kernel void shifted_exit(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  if (i < 3 || !(i + 1 < n)) return;
  dst[i] = src[i - 3] + src[i + 1]; }
__kernel void shifted_loose(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  if (i >= n - 2) return;
  dst[i] = (i < n - 1 ? src[i + 1] : 0.0f) + (i + 3 <= n ? src[i + 2] : 0.0f) + (i >= 2 ? src[i - 3] : 0.0f) + src[i]; }
__kernel void rows(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int x = get_global_id(0), y = get_global_id(1), w = get_global_size(0);
  dst[y * w + x] = src[min(y + 1, n - 1) * w + x]; }
"""

STRIDED = r"""
__kernel void grid(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), g = get_global_size(0); float s = 0.0f;
  for (uint at = gid; at < n; at += g) s += in[at];
  out[gid] = s; }
__kernel void chunk(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), per = n / get_global_size(0); float s = 0.0f;
  for (uint k = 0; k < per; k++) s += in[gid * per + k];
  out[gid] = s; }
__kernel void tiles(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), per = n / get_global_size(0), l = get_local_size(0); float s = 0.0f;
  for (uint base = 0; base < per; base += l)
    for (uint k = 0; k < min(l, per - base); k++) s += in[gid * per + base + k];
  out[gid] = s; }
"""

LANES = r"""
__kernel void aos_dist(__global const float2 *r, __global float *d, const float2 q, const int n)
{ int i = get_global_id(0); if (i < n) d[i] = distance(r[i], q); }
__kernel void aos_norm(__global const float2 *r, __global float *d, const float2 q, const int n)
{ int i = get_global_id(0); if (i < n) { float2 v = r[i] - q; d[i] = sqrt(v.x * v.x + v.y * v.y); } }
__kernel void soa_norm(__global const float *x, __global const float *y, __global float *d, const float2 q,
                       const int n)
{ int i = get_global_id(0); if (i < n) { float a = x[i] - q.x, b = y[i] - q.y; d[i] = sqrt(a * a + b * b); } }
__kernel void f4_whole(__global const float4 *a, __global float4 *c, const int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 1.5f; }
"""

HYPOT = r"""
__kernel void k_hypot(__global const float *x, __global const float *y, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = hypot(x[i], y[i]); }
__kernel void k_sqrt(__global const float *x, __global const float *y, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) { float a = x[i], b = y[i]; o[i] = sqrt(a * a + b * b); } }
"""

ROUNDING = r"""
__kernel void k_rte(__global const float *x, __global int *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = convert_int_rte(x[i] * 300.0f); }
__kernel void k_rtz(__global const float *x, __global int *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = convert_int(x[i] * 300.0f); }
__kernel void k_rint(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = rint(x[i]); }
__kernel void k_i2f(__global const int *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = convert_float_rte(x[i]); }
__kernel void k_u8(__global const float4 *x, __global uchar4 *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = convert_uchar4_sat_rte(x[i]); }
"""

CBRT = r"""
__kernel void k_cbrt(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = cbrt(x[i]); }
__kernel void k_sqrt(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = sqrt(x[i]); }
"""

FMOD = r"""
__kernel void k_fmod(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = fmod(x[i] * 40.0f, 0.37f); }
__kernel void k_div(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = (x[i] * 40.0f) / 0.37f; }
"""

EXP_SCALE = r"""
__kernel void k_exp(__global const float *t, __global float *o, const float a, const float r)
{ int i = get_global_id(0); o[i] = a * exp(-r * t[i]); }
__kernel void k_scale(__global const float *t, __global float *o, const float a, const float r)
{ int i = get_global_id(0); o[i] = a * (-r * t[i]); }
"""

TANH = r"""
float act(float x) { return tanh(x); }
__kernel void k_tanh(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = tanh(x[i] * 0.9f + 0.05f); }
__kernel void k_exp(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = exp(x[i] * 0.9f + 0.05f); }
__kernel void k_tanh2(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = act(x[i]) + act(x[i] + 1.0f); }
__kernel void k_tanh_loop(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); float s = 0.0f; for (int k = 0; k < n; k++) s = s * 0.5f + x[k]; o[i] = tanh(s); }
__kernel void k_asinh(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = asinh(x[i]); }
"""

SIN_CHAINS = r"""
__kernel void k_sin(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); o[i] = sin(x[i] * 0.9f + 0.05f); }
__kernel void k_sin8(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); float a0 = x[i] * 0.9f + 0.05f, a1 = a0 + 0.1f, a2 = a0 + 0.2f, a3 = a0 + 0.3f,
  a4 = a0 + 0.4f, a5 = a0 + 0.5f, a6 = a0 + 0.6f, a7 = a0 + 0.7f;
  for (int k = 0; k < n; ++k) { a0 = sin(a0); a1 = sin(a1); a2 = sin(a2); a3 = sin(a3);
    a4 = sin(a4); a5 = sin(a5); a6 = sin(a6); a7 = sin(a7); }
  o[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7; }
"""

INNER_LOOPS = r"""
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

TILE_WALK = r"""
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

MONTE_CARLO = r"""
__kernel void mc_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples;
  uint s = seeds[gid] + (uint)gid * 747796405u + 1u; uint hits = 0;
  for (int k = 0; k < n; ++k) {
    s = s * 1664525u + 1013904223u; float x = (s >> 8) * (1.0f / 16777216.0f);
    s = s * 1664525u + 1013904223u; float y = (s >> 8) * (1.0f / 16777216.0f);
    hits += (x * x + y * y <= 1.0f); }
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }
__kernel void mc_nobar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {
  int gid = get_global_id(0); int n = samples;
  uint s = seeds[gid] + (uint)gid * 747796405u + 1u; uint hits = 0;
  for (int k = 0; k < n; ++k) {
    s = s * 1664525u + 1013904223u; float x = (s >> 8) * (1.0f / 16777216.0f);
    s = s * 1664525u + 1013904223u; float y = (s >> 8) * (1.0f / 16777216.0f);
    hits += (x * x + y * y <= 1.0f); }
  out[gid] = hits; }
__kernel void mc_div_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples + (gid & 1);
  uint s = seeds[gid] + (uint)gid * 747796405u + 1u; uint hits = 0;
  for (int k = 0; k < n; ++k) {
    s = s * 1664525u + 1013904223u; float x = (s >> 8) * (1.0f / 16777216.0f);
    s = s * 1664525u + 1013904223u; float y = (s >> 8) * (1.0f / 16777216.0f);
    hits += (x * x + y * y <= 1.0f); }
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }
__kernel void mc_down_bar(__global const uint *seeds, __global uint *out, __local uint *l, const int samples) {
  int gid = get_global_id(0); int lid = get_local_id(0); int n = samples;
  uint s = seeds[gid] + (uint)gid * 747796405u + 1u; uint hits = 0;
  for (int k = n - 1; k >= 0; --k) {
    s = s * 1664525u + 1013904223u; float x = (s >> 8) * (1.0f / 16777216.0f);
    s = s * 1664525u + 1013904223u; float y = (s >> 8) * (1.0f / 16777216.0f);
    hits += (x * x + y * y <= 1.0f); }
  l[lid] = hits; barrier(CLK_LOCAL_MEM_FENCE); out[gid] = l[(lid + 1) % get_local_size(0)]; }
"""

TREE_SUM = r"""__kernel void tree_sum(__global const float* in, __global float* out, __local float* s) {
  int lid = get_local_id(0); int ls = get_local_size(0);
  s[lid] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = ls / 2; h > 0; h >>= 1) {
    if (lid < h) s[lid] += s[lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = s[0];
}"""


def _histogram_source() -> str:
    """The bundled corpus's histogram kernels (``datagen/bundled/histogram.cl``)."""
    import kernelcast.datagen as datagen

    return (Path(datagen.__file__).resolve().parent / "bundled" / "histogram.cl").read_text()


# ---------------------------------------------------------------------------------------------
# the checks

Size = tuple[int, ...]


@dataclass(frozen=True)
class Run:
    """One launch of a check: a kernel of the check's source at a configuration."""

    kernel: str
    gsize: Size
    lsize: Size
    binds: tuple[ArgBinding, ...]
    label: str = ""

    @property
    def key(self) -> str:
        return self.label or self.kernel

    def config(self) -> LaunchConfig:
        return LaunchConfig(self.gsize, self.lsize, list(self.binds))

    def row(self, source: str) -> dict[str, Any]:
        args = [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
                 "value": None if b.kind != "scalar" else str(b.value)} for b in self.binds]
        return {"source": source, "kernel_name": self.kernel, "gsize": list(self.gsize), "lsize": list(self.lsize),
                "args": args}


@dataclass(frozen=True)
class Check:
    """A measured-against-predicted ratio: ``num``'s time over ``den``'s (without ``den``: ``num``'s
    time itself, measured against predicted)."""

    name: str
    what: str
    source: str | Callable[[], str]
    num: Run
    den: Run | None
    bound: float | None                 # the predicted ratio within this factor of the measured one
    floor: float | None = None          # the measured ratio above this (the runtime fact the check needs)
    needs: tuple[str, ...] = ()         # profile values the prediction rests on
    calib: tuple[tuple[str, ...], tuple[str, ...] | None] | None = None   # benches, classes measuring them
    rounds: int = 3
    #: (floor, bound) instead where the profile says the runtime leaves a guarded store's loop scalar
    scalar_guarded: tuple[float | None, float | None] | None = None

    def text(self) -> str:
        return self.source() if callable(self.source) else self.source

    def limits(self, model: AnalyticalModel) -> tuple[float | None, float | None]:
        """(floor, bound) for the device ``model`` describes."""
        if self.scalar_guarded is not None and getattr(model.dev, "cond_store_scalar", False):
            return self.scalar_guarded
        return self.floor, self.bound


def _buf(name: str, dtype: str, count: int, init: str = "random") -> ArgBinding:
    return ArgBinding(name, "buffer", dtype, count, init=init)


def _val(name: str, dtype: str, value: Any) -> ArgBinding:
    return ArgBinding(name, "scalar", dtype, value=value)


def _loc(name: str, dtype: str, count: int) -> ArgBinding:
    return ArgBinding(name, "local", dtype, count)


def _pair(name: str, what: str, source: str | Callable[[], str], kernels: tuple[str, str], gsize: int | Size,
          lsize: int | Size, binds: list[ArgBinding], bound: float | None, floor: float | None = None,
          **kw: Any) -> Check:
    """Two kernels of ``source`` at one configuration: the first one's time over the second's."""
    g = gsize if isinstance(gsize, tuple) else (gsize,)
    ls = lsize if isinstance(lsize, tuple) else (lsize,)
    a, b = (Run(k, g, ls, tuple(binds)) for k in kernels)
    return Check(name, what, source, a, b, bound, floor, **kw)


_CHAIN = ("chain_fp32_add_ns", "chain_fp32_mul_ns", "chain_fp32_fma_ns")
_CHAIN_CALIB = (("chain",), ("fp32_add", "fp32_mul", "fp32_fma"))


def _family(name: str, what: str, family: str, source: str, kernels: tuple[str, str], n: int, floor: float,
            bound: float) -> Check:
    binds = [_buf("x", "float", n), _buf("o", "float", n), _val("n", "int", n)]
    return _pair(name, what, source, kernels, n, 256, binds, bound, floor,
                 needs=(f"peak_{family}_gops", f"scalar_{family}_gops"), calib=(("peak", "scalar"), (family,)))


def _checks() -> list[Check]:
    c: list[Check] = []
    # integer division
    n = 1 << 14
    c.append(_pair("int_division.modulo_loop",
                   "a float sum over a[(i + k) % n] against a[k], 64 trips: the division at its own (scalar) rate",
                   DIVISION_LOOP, ("with_mod", "without"), n, 256,
                   [_buf("a", "float", n), _buf("c", "float", n), _val("n", "int", n), _val("m", "int", 64)],
                   2.5, 1.2))
    n = 1 << 20
    div = [_buf("a", "uint", n), _buf("o", "uint", n), _val("n", "uint", 100)]
    c.append(_pair("int_division.by_argument", "x % n (a runtime divisor: one division per element) against x & 127",
                   DIVISORS, ("by_arg", "masked"), n, 256, div, 2.5, 4.0,
                   needs=("peak_int32_div_gops",), calib=(("peak",), ("int32_div",))))
    c.append(_pair("int_division.by_constant", "x % 100 (a multiply by the reciprocal, no division) against x & 127",
                   DIVISORS, ("by_const", "masked"), n, 256, div, 2.5,
                   needs=("peak_int32_div_gops",), calib=(("peak",), ("int32_div",))))
    # builtin routines
    n = 1 << 16
    c.append(_pair("builtin_routines.exp2_vs_exp", "exp2 (scalar library code) against exp (vectorized)",
                   EXP2, ("k_exp2", "k_exp"), n, 256, [_buf("x", "float", n), _buf("o", "float", n)], 3.0, 2.5,
                   needs=("peak_exp2_gops", "scalar_exp2_gops"), calib=(("peak", "scalar"), ("exp2",))))
    n = 1 << 18
    c.append(_pair("builtin_routines.loop_calling_exp",
                   "four exp calls in a 4-trip loop (not unrolled: the loop stays, the work-item loop scalar) "
                   "against the four calls written out", ROUTINE_LOOPS, ("k_loop", "k_data"), n, 64,
                   [_buf("a", "float", n)], 3.0, 3.0))
    forms = [_buf("x", "float", n), _buf("o", "float", n)]
    c.append(_pair("builtin_routines.sin_vs_native_sin", "sin against native_sin (the cheaper form predict suggests)",
                   CHEAPER_FORMS, ("k_sin", "k_native_sin"), n, 256, forms, 3.0, 3.0))
    c.append(_pair("builtin_routines.exp2_vs_exp_ln2", "exp2(x) against exp(x * M_LN2_F)",
                   CHEAPER_FORMS, ("k_exp2", "k_exp_ln2"), n, 256, forms, 3.0, 3.0))
    # vector values
    n = 1 << 16
    c.append(_pair("vector_values.float8_poly", "a guarded polynomial on 2^16 float8 values against 2^16 floats: "
                   "vector lanes at the SIMD gain, not as scalar operations", POLY, ("poly8", "poly1"), n, 256,
                   [_buf("in", "float", 8 * n), _buf("out", "float", 8 * n), _val("n", "int", n)], 2.0, 1.0))
    n = 1 << 18
    pw = (_buf("a", "float", n), _buf("c", "float", n), _val("s", "float", 1.7))
    c.append(Check("vector_values.pow_scalar_vs_float4", "2^18 scalar pow calls against 2^16 pow(float4) calls "
                   "(one vector-math call each)", VECTOR_MATH, Run("pow1", (n,), (256,), pw),
                   Run("pow4", (n // 4,), (256,), pw), 2.0, 1.5))
    # loop-carried chains
    pair = [_buf("data", "float", 1024, "ones"), _val("trips", "int", 512)]
    c.append(_pair("chains.one_vs_three", "a multiply and an FMA on one chain against three one-operation chains, "
                   "trips differing between work-items", CHAIN_PAIR, ("one_chain", "three_chains"), 1024, 64, pair,
                   1.5, 1.5, needs=_CHAIN, calib=_CHAIN_CALIB))
    for ls in (16, 64):
        binds = [_buf("data", "float", 4096, "ones"), _loc("l", "float", ls), _val("trips", "int", 512)]
        c.append(_pair(f"chains.after_barrier_ls{ls}", f"a chain with a barrier before its loop and without, "
                       f"groups of {ls}", BARRIER_CHAINS, ("chain_bar", "chain_nobar"), 4096, ls, binds, 1.5,
                       needs=_CHAIN, calib=_CHAIN_CALIB))
    n = 8192
    ni = [_buf("src", "float", n, "ones"), _buf("dst", "float", n), _val("trips", "int", 2000)]
    c.append(_pair("chains.count_down_barrier", "a count-down loop (no implicit barrier) with a barrier before it "
                   "and without", NO_IMPLICIT, ("down_bar", "down_nobar"), n, 64, ni, 1.5,
                   needs=_CHAIN, calib=_CHAIN_CALIB))
    c.append(_pair("chains.around_inner_from_minus_2", "a uniform loop around a 5-trip loop from -2 (no implicit "
                   "barrier) against the same from 0", NO_IMPLICIT, ("around_d", "around_z"), n, 64, ni, 6.0, 4.0,
                   needs=_CHAIN, calib=_CHAIN_CALIB))
    n = 4096
    tiles = [_buf("src", "float", n, "ones"), _buf("dst", "float", n), _loc("tile", "float", 256)]
    c.append(_pair("chains.tile_vs_flat", "an fma chain in the inner loop of a tile loop with barriers against a "
                   "plain loop", TILES, ("tile_fma", "flat_fma"), n, 256, tiles, 1.5,
                   needs=_CHAIN + ("barrier_unrolled_items",), calib=(("chain", "barrier"), _CHAIN_CALIB[1])))
    n = 8192
    c.append(_pair("chains.fmax_vs_add", "one fmax per trip on the chain (two adds' latency) against one add",
                   MAX_CHAINS, ("chain_fmax", "chain_add"), n, 64,
                   [_buf("src", "float", n, "ones"), _buf("dst", "float", n), _val("trips", "int", 1024)], 1.3,
                   needs=_CHAIN, calib=_CHAIN_CALIB))
    c.append(_pair("chains.fp64_mul_vs_add", "an fp64 multiply chain against an fp64 add chain (the fp32 latencies)",
                   F64_CHAINS, ("mul64", "add64"), 4096, 64,
                   [_buf("x", "double", 4096, "ones"), _val("n", "int", 4096)], 1.3, 1.2,
                   needs=_CHAIN, calib=_CHAIN_CALIB))
    c.append(_pair("chains.uniform_one_vs_three", "one FMA chain against three one-operation chains in a loop all "
                   "work-items take alike", UNIFORM_CHAINS, ("one_chain", "three_chains"), 1024, 64,
                   [_buf("data", "float", 1024, "ones"), _val("trips", "int", 4096)], 1.5, 1.05,
                   needs=_CHAIN, calib=_CHAIN_CALIB))
    # code motion out of unrolled loops
    n = 1 << 14
    c.append(_pair("unrolled_hoisting.dependent_vs_unrolled", "pow of the unrolled loop's counter and of d (40 "
                   "calls) against pow of the counter alone (8 calls, hoisted out of the loop over d)",
                   UNROLLED, ("of_d", "unrolled"), n, 64,
                   [_buf("window", "float", n), _buf("out", "float", n), _val("gamma", "float", 0.5),
                    _val("dn", "int", 5)], 2.0, 3.0))
    # branch fractions of a 2D launch
    g, total = (256, 64), 256 * 64

    def rows(n: int) -> tuple[ArgBinding, ...]:
        return (_buf("a", "float", total), _buf("o", "float", total), _val("n", "int", n), _val("reps", "int", 512))

    c.append(Check("branch_fractions.quarter_of_2d", "a guard on the linear index of a 2D launch letting all "
                   "work-items through against a quarter of them", ROWS_2D,
                   Run("all_rows", g, (16, 4), rows(total)), Run("some_rows", g, (16, 4), rows(total // 4)), 2.5, 1.5))
    # loop-invariant code motion
    n = 4096
    c.append(_pair("loop_invariant.variant_vs_invariant", "exp(x - k) against exp(x) (hoisted) in a 256-trip loop",
                   INVARIANT, ("variant", "invariant"), n, 256,
                   [_buf("a", "float", n), _buf("c", "float", n), _val("it", "int", 256)], 4.0, 2.0))
    # late-joining worker threads
    items = 1024
    for label, iters, bound in (("short", 8, 1.5), ("long", 3000, 2.0)):
        jb = (_buf("out", "float", items), _val("s", "float", 0.999), _val("t", "float", 0.5),
              _val("iters", "int", iters))
        c.append(Check(f"join_delay.{label}_launch", f"eight work-groups against one, {iters} dependent FMAs per "
                       "work-item (the other cores join a launch late)", JOIN_FMA,
                       Run("many_groups", (items,), (128,), jb),
                       Run("one_group", (items,), (items,), jb), bound, needs=("cu_join_us",),
                       calib=(("join",), None), rounds=5))
    # runtime facts: guarded stores and out-of-line builtins
    n = 1 << 16
    abc = [_buf("a", "float", n), _buf("b", "float", n), _buf("c", "float", n), _val("n", "int", n)]
    c.append(_pair("cpu_runtime_facts.guarded_store", "if (i < n) c[i] = ... against the same store unguarded",
                   GUARDED, ("guarded", "plain"), n, 256, abc, 2.0,
                   needs=("wi_store_ns", "wi_cond_store_ns"), calib=(("cond",), None)))
    c.append(_pair("cpu_runtime_facts.builtin_call", "fmax(a[i], b[i]) against a[i] > b[i] ? a[i] : b[i]",
                   CALLS, ("k_fmax", "k_select"), n, 256, abc, 2.5,
                   needs=("wi_store_ns", "wi_cond_store_ns", "wi_call_ns", "wi_libcall_ns"), calib=(("cond",), None)))
    # a routine on a chain
    n = 1 << 14
    c.append(_pair("routine_chains.sin_chain", "32 sin calls on one chain against four chains of 8",
                   ROUTINE_CHAINS, ("sin_chain", "sin_4chains"), n, 64, [_buf("x", "float", n), _buf("o", "float", n)],
                   2.0, 1.8, needs=("chain_sin_ns", "scalar_sin_gops"), calib=(("scalar", "chain"), ("sin",))))
    # atomics (the kernels' own times, predicted against measured)
    g, ls = 65536, 1024
    c.append(Check("cpu_costs.atomic_histogram_time", "a 256-bin global histogram of atomic_inc: predicted "
                   "against measured time (us)", _histogram_source,
                   Run("hg_global_inc_u8", (g,), (ls,), (_buf("data", "uchar", g), _buf("hist", "uint", 256, "zeros"),
                                                          _val("n", "int", g))), None, 2.0,
                   needs=("atomic_global_gops", "atomic_global_b256_gops"), calib=(("atomic",), None)))
    c.append(Check("cpu_costs.atomic_counter_time", "an atomic counter of a compaction: predicted against measured "
                   "time (us)", _histogram_source,
                   Run("hg_count_above", (g,), (ls,), (_buf("data", "float", g, "ones"),
                                                        _buf("counter", "int", 1, "zeros"),
                                                        _val("threshold", "float", 0.5), _val("n", "int", g))),
                   None, 2.0, needs=("atomic_global_gops", "atomic_global_b1_gops"), calib=(("atomic",), None)))
    # conditional store to one address
    n = 1 << 18
    c.append(_pair("cpu_costs.flag_store", "a conditional store to one address (keeps the loop scalar) against "
                   "the same kernel without it", FLAG, ("with_flag", "no_flag"), n, 512,
                   [_buf("f", "char", n), _buf("nf", "char", n, "ones"), _buf("not_done", "int", 1),
                    _val("n", "int", n)], 4.0, 4.0))
    # gathers and strided accesses
    n = 1 << 20
    gat = [_buf("src", "float", n + 4), _buf("idx", "int", 1), _buf("dst", "float", n), _val("n", "int", n)]
    gneeds = {"needs": ("gather_gops", "gather_clamped_gops"), "calib": (("gather",), None)}
    for k in ("clamped", "shifted"):
        c.append(_pair(f"cpu_costs.{k}_gathers", f"three neighbour loads at {k} int indices (gathered) against the "
                       "same with a size_t id (vector loads)", GATHER, (k, "shifted_wide"), n, 256, gat, 3.0, 1.5,
                       **gneeds))
    c.append(_pair("cpu_costs.guarded_shifted_loads", "the shifted loads gathered against the same under guards "
                   "bounding their indices (masked vector loads)", GATHER, ("shifted", "shifted_guarded"), n, 256,
                   gat, 2.5, 2.0, **gneeds))
    gat0 = [_buf("src", "float", n), _buf("idx", "int", 1), _buf("dst", "float", n), _val("n", "int", n)]
    c.append(_pair("cpu_costs.hashed_gather", "a gather at scattered indices of a 4 MiB table against a copy",
                   GATHER, ("hashed", "copy"), n, 256, gat0, 3.0, **gneeds))
    halves = [_buf("src", "float", n), _buf("idx", "int", 1), _buf("dst", "float", n), _val("h", "int", n // 2)]
    c.append(_pair("cpu_costs.strided_stores", "two halves interleaved (stores at stride 2) against copied "
                   "contiguously", GATHER, ("pairs", "halves"), n // 2, 256, halves, 3.0, **gneeds))
    n, g = 1 << 25, 16384
    c.append(_pair("cpu_costs.page_strided_walk", "a grid-stride sum of 128 MiB against contiguous chunks",
                   STRIDED, ("grid", "chunk"), g, 256,
                   [_buf("in", "float", n), _buf("out", "float", g), _val("n", "uint", n)], 4.0, 4.0,
                   needs=("strided_line_ns",), calib=(("stride",), None)))
    n = 1 << 20
    q, cnt = _val("q", "float2", "30,90"), _val("n", "int", n)
    c.append(Check("cpu_costs.vector_components", "distance() of a float2 element against the norm of two float "
                   "arrays", LANES,
                   Run("aos_dist", (n,), (256,), (_buf("r", "float2", n), _buf("d", "float", n), q, cnt)),
                   Run("soa_norm", (n,), (256,), (_buf("x", "float", n), _buf("y", "float", n), _buf("d", "float", n),
                                                  q, cnt)), 3.0))
    # builtin families
    n = 1 << 16
    c.append(_pair("builtin_families.hypot_vs_sqrt", "hypot(x, y) against sqrt(a * a + b * b)", HYPOT,
                   ("k_hypot", "k_sqrt"), n, 256,
                   [_buf("x", "float", n), _buf("y", "float", n), _buf("o", "float", n), _val("n", "int", n)], 4.0, 5.0,
                   needs=("peak_hypot_gops", "scalar_hypot_gops"), calib=(("peak", "scalar"), ("hypot",))))
    n = 1 << 18
    c.append(_pair("builtin_families.rounding_conversion", "convert_int_rte against convert_int (a truncation)",
                   ROUNDING, ("k_rte", "k_rtz"), n, 256,
                   [_buf("x", "float", n), _buf("o", "int", n), _val("n", "int", n)], 5.0, 2.5,
                   needs=("peak_rint_gops", "scalar_rint_gops"), calib=(("peak", "scalar"), ("rint",)),
                   scalar_guarded=(1.0, 6.0)))
    c.append(_family("builtin_families.cbrt_vs_sqrt", "cbrt(x) against sqrt(x)", "cbrt", CBRT, ("k_cbrt", "k_sqrt"),
                     1 << 16, 5.0, 4.0))
    c.append(_family("builtin_families.fmod_vs_division", "fmod (a library routine) against a division", "fmod",
                     FMOD, ("k_fmod", "k_div"), 1 << 16, 3.0, 4.0))
    n = 1 << 18
    c.append(_pair("builtin_families.exp_vs_arithmetic", "a * exp(-r * t[i]) against the same without the exp",
                   EXP_SCALE, ("k_exp", "k_scale"), n, 256,
                   [_buf("t", "float", n), _buf("o", "float", n), _val("a", "float", 2.0), _val("r", "float", 0.5)],
                   2.0, 2.0, needs=("wi_exp_gops",), calib=(("wi",), ("exp",))))
    n = 1 << 20
    c.append(_pair("builtin_families.tanh_vs_exp", "one tanh (inlined as vector code) against one exp per work-item",
                   TANH, ("k_tanh", "k_exp"), n, 256,
                   [_buf("x", "float", n), _buf("o", "float", n), _val("n", "int", n)], 2.0, 1.2,
                   needs=("wi_tanh_gops", "wi_exp_gops"), calib=(("wi",), ("tanh", "exp"))))
    n = 1 << 18
    c.append(_pair("builtin_families.sin_chains_vs_one_call", "eight chains of four sin calls against one call per "
                   "work-item (its single-call rate)", SIN_CHAINS, ("k_sin8", "k_sin"), n, 256,
                   [_buf("x", "float", n), _buf("o", "float", n), _val("n", "int", 4)], 1.5, 6.0,
                   needs=("scalar_sin_gops", "wi_sin_gops"), calib=(("scalar", "wi"), ("sin",))))
    # loops the compiler vectorizes within one work-item
    n = 4096
    c.append(_pair("inner_loop.float_sum_vs_count", "a float sum over 4,096 values (a chain) against an integer "
                   "count over them (vectorized within the work-item)", INNER_LOOPS, ("float_sum", "count_below"),
                   n, 256, [_buf("in", "float", n), _buf("out", "int", n), _val("n", "int", n), _val("m", "int", n)],
                   4.0, 3.0))
    n, wg = 8192, 256
    c.append(_pair("inner_loop.int_tile_walk", "an int max over each tile (a vectorized reduction) against the same "
                   "kernel without the walk", TILE_WALK, ("int_max", "int_no_walk"), n, wg,
                   [_buf("field", "int", n), _buf("out", "int", n), _loc("tile", "int", wg), _val("size", "int", n)],
                   3.0, 3.0))
    # uniform loops of barrier kernels, barrier unrolling
    mc = [_buf("seeds", "uint", 512), _buf("out", "uint", 512, "zeros"), _loc("l", "uint", 64),
          _val("samples", "int", 400)]
    c.append(_pair("cpu_class.uniform_loop_with_barrier", "a uniform loop without a barrier after it against the "
                   "same with one (run vectorized)", MONTE_CARLO, ("mc_nobar", "mc_bar"), 512, 64, mc, 4.0, 4.0,
                   rounds=4))
    c.append(_pair("cpu_class.differing_trips_with_barrier", "trips differing between work-items against the "
                   "uniform loop, both with a barrier (states the runtime fact only)", MONTE_CARLO,
                   ("mc_div_bar", "mc_bar"), 512, 64, mc, None, 2.5, rounds=4))
    c.append(_pair("cpu_class.count_down_with_barrier", "the uniform loop counting down against counting up, both "
                   "with a barrier (no implicit barrier; states the runtime fact only)", MONTE_CARLO,
                   ("mc_down_bar", "mc_bar"), 512, 64, mc, None, 2.5, rounds=4))
    n = 1 << 18
    tree = [Run("tree_sum", (n,), (ls,), (_buf("in", "float", n), _buf("out", "float", n // ls),
                                          _loc("s", "float", ls)), f"tree_sum@{ls}") for ls in (64, 16)]
    c.append(Check("cpu_class.tree_reduction_groups", "a tree reduction in groups of 64 against groups of 16 "
                   "(whose barriers the runtime unrolls away)", TREE_SUM, tree[0], tree[1], 2.0, 2.5,
                   needs=("barrier_unrolled_items",), calib=(("barrier",), None)))
    return c


#: every check, in the order they run
CHECKS: tuple[Check, ...] = tuple(_checks())


def select_checks(pattern: str | None) -> list[Check]:
    """The checks whose name matches ``pattern`` (shell wildcards; without one, a substring of the
    name; comma-separated alternatives); all without a pattern. :class:`UsageError` when none does."""
    if not pattern:
        return list(CHECKS)
    alts = [p.strip() for p in pattern.split(",") if p.strip()]

    def match(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) if any(ch in p for ch in "*?[") else p in name for p in alts)

    chosen = [c for c in CHECKS if match(c.name)]
    if not chosen:
        raise UsageError(f"--only {pattern!r}: no check matches; the checks are {', '.join(c.name for c in CHECKS)}")
    return chosen


# ---------------------------------------------------------------------------------------------
# measuring and predicting


@dataclass
class Result:
    """One check's figures: the measured and the predicted ratio, and whether the prediction is within."""

    name: str
    what: str
    measured: float | None
    predicted: float | None
    bound: float | None
    floor: float | None
    within: bool | None                 # None: not decided (the check could not run or predict)
    times_us: dict[str, float] = field(default_factory=dict)
    predicted_us: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "measured": json_number(self.measured),
                "predicted": json_number(self.predicted), "bound": self.bound, "floor": self.floor,
                "within": self.within, "times_us": {k: json_number(v) for k, v in self.times_us.items()},
                "predicted_us": {k: json_number(v) for k, v in self.predicted_us.items()}, "note": self.note}


def judge(measured: float, predicted: float, floor: float | None, bound: float | None) -> tuple[bool, str]:
    """Whether ``predicted`` is within ``bound`` x of ``measured`` and ``measured`` above ``floor``,
    and what failed."""
    why = []
    if not (math.isfinite(measured) and math.isfinite(predicted) and measured > 0 and predicted > 0):
        return False, "no finite positive ratio"
    if floor is not None and not measured > floor:
        why.append(f"measured {measured:.3g} not above {floor:g}")
    if bound is not None and not measured / bound < predicted < measured * bound:
        why.append(f"predicted {predicted:.3g} not within {bound:g}x of measured")
    return not why, "; ".join(why)


def complete_profile(profile: DeviceProfile, checks: list[Check], device: DeviceInfo, harness: Harness,
                     on_step: Callable[[str], None] | None = None) -> list[str]:
    """Calibrate the values ``checks`` rest on that ``profile`` lacks (each missing group's
    benchmarks once, with the launch overhead) and put them into ``profile``; the names of the
    values added."""
    from kernelcast.calib.microbench import CalibOptions, Calibrator

    added: list[str] = []
    done: set[tuple[tuple[str, ...], tuple[str, ...] | None]] = set()
    for chk in checks:
        missing = [k for k in chk.needs if profile.get(k) is None]
        if not missing or chk.calib is None or chk.calib in done:
            continue
        done.add(chk.calib)
        benches, classes = chk.calib
        if on_step is not None:
            on_step(f"calibrating {', '.join(missing)} (calib {','.join(benches)})")
        opts = CalibOptions(benches=("launch",) + benches, op_classes=classes, target_s=0.003)
        try:
            measured = Calibrator(device, harness, options=opts).run()
        except Exception as e:          # a benchmark that fails leaves the check without its value
            log.warning("calibration of %s failed: %s", ",".join(benches), e)
            continue
        for k, v in measured.values.items():
            if profile.get(k) is None and k != "launch_overhead_us":
                profile.values[k] = v
                added.append(k)
    return added


def measure_check(chk: Check, harness: Harness, model: AnalyticalModel, rounds: int | None = None) -> Result:
    """Measure ``chk``'s launches in interleaved rounds and predict them with ``model``."""
    import pandas as pd
    from kernelcast.instrument.runner import TimingPolicy, pool_rounds

    source = chk.text()
    runs = [chk.num] + ([chk.den] if chk.den is not None else [])
    floor, bound = chk.limits(model)
    res = Result(chk.name, chk.what, None, None, bound, floor, None)
    missing = [k for k in chk.needs if model.profile.get(k) is None] if hasattr(model, "profile") else []
    pol = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02, max_repeats=50, max_time_s=2.0)
    measured: dict[str, list] = {r.key: [] for r in runs}
    for _ in range(rounds or chk.rounds):
        for r in runs:
            m = harness.run(Kernel(source, r.kernel), r.config(), pol)
            if m.status != "ok":
                res.note = f"{r.key}: {m.status} ({m.reason})"
                return res
            measured[r.key].append(m)
    res.times_us = {k: float(pool_rounds(ms).time.median_us) for k, ms in measured.items()}
    pred = model.predict(pd.DataFrame([r.row(source) for r in runs]))
    res.predicted_us = {r.key: float(t) for r, t in zip(runs, pred.time_us)}
    a = chk.num.key
    if chk.den is None:
        res.measured, res.predicted = res.times_us[a], res.predicted_us[a]
    else:
        b = chk.den.key
        res.measured = res.times_us[a] / res.times_us[b]
        res.predicted = res.predicted_us[a] / res.predicted_us[b]
    res.within, res.note = judge(res.measured, res.predicted, floor, bound)
    if missing:
        res.note = "; ".join(x for x in (res.note, f"profile has no {', '.join(missing)}") if x)
    return res


@dataclass
class Report:
    """A run of the benchmark: the device, where its profile came from, and each check's result."""

    device: str
    profile: str
    calibrated: list[str]
    results: list[Result]
    wall_s: float

    @property
    def decided(self) -> list[Result]:
        return [r for r in self.results if r.within is not None]

    def summary(self) -> str:
        ok = sum(1 for r in self.decided if r.within)
        undecided = len(self.results) - len(self.decided)
        tail = f" ({undecided} could not run)" if undecided else ""
        return f"{ok} of {len(self.decided)} checks within bound{tail}"

    def table(self) -> str:
        rows = [[r.name, r.measured, r.predicted, None if r.bound is None else f"{r.bound:g}x",
                 None if r.floor is None else f">{r.floor:g}",
                 "-" if r.within is None else ("yes" if r.within else "no"), r.note] for r in self.results]
        return fmt_table(rows, ["check", "measured", "predicted", "bound", "floor", "within", "note"])

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "profile": self.profile, "calibrated": self.calibrated,
                "checks": [r.to_dict() for r in self.results], "within": sum(1 for r in self.decided if r.within),
                "decided": len(self.decided), "total": len(self.results), "summary": self.summary(),
                "wall_s": round(self.wall_s, 1)}


def run_validation(checks: list[Check], device: DeviceInfo, profile: DeviceProfile, *, rounds: int | None = None,
                   timeout_s: float = 60.0, on_step: Callable[[str], None] | None = None) -> Report:
    """Complete ``profile`` with what ``checks`` rest on, then measure and predict every check on
    ``device``."""
    from kernelcast.instrument.harness import Harness
    from kernelcast.models.analytical import AnalyticalModel

    t0 = time.perf_counter()
    results: list[Result] = []
    with Harness(device, meter="none", timeout_s=timeout_s) as h:
        added = complete_profile(profile, checks, device, h, on_step)
        model = AnalyticalModel(profile)
        for chk in checks:
            if on_step is not None:
                on_step(chk.name)
            results.append(measure_check(chk, h, model, rounds))
    return Report(device.name, profile.origin or "given", added, results, time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------
# the command


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", metavar="NAME|PATH",
                   help="device profile (bundled name or JSON); default: the bundled profile of this device and "
                        "driver, else its cached quick calibration (made now if there is none)")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--only", metavar="PATTERN",
                   help="run the checks whose name matches (shell wildcards, else a substring; comma-separated)")
    p.add_argument("--rounds", type=positive_int, metavar="N",
                   help=f"{ROUNDS_HELP} (default: each check's own, 3-5)")
    p.add_argument("--list", action="store_true", help="list the checks and their bounds; measure nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_quiet(p, dest="no_progress", old="--no-progress")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``validate`` on the main command line's subparsers."""
    p = sub.add_parser("validate", help="validate the analytical model on this device: measured against predicted "
                                        "time ratios of kernel pairs",
                       description="Measure pairs of kernels on the device and compare the ratio of their times "
                                   "with the ratio the analytical model predicts from the device's profile; print "
                                   "each check's measured and predicted ratio, its bound and whether it is within.")
    add_arguments(p)
    p.set_defaults(func=cmd_validate)
    return p


def _list(checks: list[Check], as_json: bool) -> int:
    rows = [[c.name, None if c.bound is None else f"{c.bound:g}x", None if c.floor is None else f">{c.floor:g}",
             ",".join(c.needs) or None, c.what] for c in checks]
    if as_json:
        print(to_json([{"name": c.name, "bound": c.bound, "floor": c.floor, "needs": list(c.needs), "what": c.what}
                       for c in checks]))
    else:
        print(fmt_table(rows, ["check", "bound", "floor", "needs", "what"]))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from kernelcast.calib.local import resolve_profile
    from kernelcast.calib.profile import ProfileError
    from kernelcast.instrument.backends import select_device

    from kernelcast.config import device_spec

    checks = select_checks(args.only)
    if args.list:
        return _list(checks, args.json)

    def say(msg: str) -> None:
        if not args.json:
            print(f"validate: {msg}", file=sys.stderr)

    profile = resolve_profile(args.profile, args.device, on_calibrate=say)
    device = select_device(device_spec(args.device))
    try:
        profile.check_device_type(device.type, f"the device {device.name!r} it would measure")
    except ProfileError as e:
        raise UsageError(f"--profile {args.profile}: {e}") from None
    bar: Any = None
    if not args.json and not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(checks), unit="check", desc="validate", dynamic_ncols=True, file=sys.stderr)
    names = {c.name for c in checks}
    started: list[str] = []

    def on_step(label: str) -> None:
        log.info("validate: %s", label)
        if bar is None:
            return
        if label in names:
            if started:
                bar.update(1)
            started.append(label)
            bar.set_description(label)
        else:
            bar.set_postfix_str(label[:40], refresh=True)

    try:
        report = run_validation(checks, device, profile, rounds=args.rounds, on_step=on_step)
    finally:
        if bar is not None:
            bar.update(len(started) and 1)
            bar.close()
    if args.json:
        print(to_json(report.to_dict()))
        return 0
    print(f"device   {report.device}\nprofile  {report.profile}")
    if report.calibrated:
        print(f"calibrated for the checks: {', '.join(report.calibrated)}")
    print()
    print(report.table())
    print(f"\n{report.summary()} ({report.wall_s:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m kernelcast.bench.validate``: the ``validate`` command on its own."""
    from kernelcast.errors import InputError
    from kernelcast.log import setup_logging
    from kernelcast.options import Parser

    p = Parser(prog="python -m kernelcast.bench.validate", description=__doc__.splitlines()[0])
    add_arguments(p)
    p.add_argument("-v", "--verbose", action="count", default=0)
    try:
        args = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    setup_logging(args.verbose)
    try:
        return cmd_validate(args)
    except InputError as e:
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelcast: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:     # output piped into a reader that stopped (| head): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

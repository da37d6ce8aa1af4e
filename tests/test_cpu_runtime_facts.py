"""Two facts of a CPU OpenCL runtime that calib cond measures and the CPU class uses: whether it
vectorizes a work-item loop with a store under a condition that differs between work-items (the
static mark ``Access.conditional``), and whether it calls its builtins out of line (the static
count ``libcall``; such a loop is scalar and pays each call). Each is checked by hand and against a
real measurement on this device."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.models.analytical import (
    AnalyticalModel,
    DeviceParams,
    builtin_calls,
    conditional_stores,
    config_env,
    cpu_vectorizable,
)
from kernelcast.models.static.source import analyze_source

from kernelcast.schema import Kernel
from tests.profiles import cpu_profile

MARKS = """
__kernel void guard(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 2.0f; }
__kernel void early(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); if (i >= n) return; float v = a[i]; c[i] = v; }
__kernel void on_data(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); float v = a[i]; if (v > 0.5f) c[i] = v; }
__kernel void select_form(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); float v = a[i]; c[i] = i < n ? v : 0.0f; }
__kernel void uniform_cond(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); if (n > 3) c[i] = a[i]; }
__kernel void private_only(__global const float *a, __global float *c, int n)
{ int i = get_global_id(0); float v = 0.0f; if (a[i] > 0.0f) v = a[i]; c[i] = v; }
__kernel void on_switch(__global float *c)
{ int i = get_global_id(0); switch (i & 3) { case 0: c[i] = 1.0f; break; default: break; } }
"""


REDUCE = """
__kernel void reduce(__global const float *a, __global float *out, __local float *s)
{ int l = get_local_id(0); s[l] = a[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);
  if (l == 0) { float t = 0.0f; for (int k = 0; k < 4; ++k) t += s[k]; out[get_group_id(0)] = t; } }
"""


def _store_marks(name: str) -> list[str]:
    f = analyze_source(Kernel(source=MARKS, name=name))
    return [a.conditional for a in f.accesses if a.kind == "store"]


@pytest.mark.parametrize("name,mark", [
    ("guard", "divergent line 3"), ("early", "divergent line 5"), ("on_data", "data line 7"),
    ("select_form", ""), ("uniform_cond", ""), ("private_only", ""), ("on_switch", "divergent line 15")])
def test_stores_under_a_condition_that_differs_between_work_items_are_marked(name, mark):
    """An ``if`` or ``switch`` on work-item ids or loaded data, and the rest of a block after such an
    ``if (...) return;``, mark the stores in them; a select, a uniform condition and a condition
    that only picks a private value do not."""
    assert _store_marks(name) == [mark]



def test_the_device_fact_decides_whether_a_conditional_store_keeps_the_loop_scalar():
    f = analyze_source(Kernel(source=MARKS, name="guard"))
    assert [a.arg for a in conditional_stores(f)] == ["c"]
    assert cpu_vectorizable(f)[0] is True                         # no fact: vectorized, as before
    ok, why = cpu_vectorizable(f, cond_store_scalar=True)
    assert ok is False and "divergent line 3" in why and "calib cond" in why
    sel = analyze_source(Kernel(source=MARKS, name="select_form"))
    assert cpu_vectorizable(sel, cond_store_scalar=True)[0] is True
    # with barriers the guarded store is one region's (a reduction's), not the kernel's work-item loop
    red = analyze_source(Kernel(source=REDUCE, name="reduce"))
    assert conditional_stores(red) and cpu_vectorizable(red, cond_store_scalar=True)[0] is True
    # the fact is the calibrated ratio of the guarded to the plain store, against a threshold
    assert DeviceParams.from_profile(cpu_profile(wi_store_ns=0.25, wi_cond_store_ns=0.9)).cond_store_scalar
    assert not DeviceParams.from_profile(cpu_profile(wi_store_ns=0.25, wi_cond_store_ns=0.3)).cond_store_scalar
    assert not DeviceParams.from_profile(cpu_profile()).cond_store_scalar



STRIDED_SUM = """
__kernel void guarded(__global const float *in, __global float *out, __local float *l, const int n, const int m)
{ int lid = get_local_id(0); int gid = get_global_id(0); int gsz = get_global_size(0); float acc = 0.0f;
  for (int k = 0; k < m; ++k) { int idx = gid + k * gsz; if (idx < n) acc += in[idx]; }
  l[lid] = acc; barrier(CLK_LOCAL_MEM_FENCE); if (lid == 0) out[get_group_id(0)] = l[0] + l[1]; }
__kernel void plain(__global const float *in, __global float *out, __local float *l, const int n, const int m)
{ int lid = get_local_id(0); int gid = get_global_id(0); int gsz = get_global_size(0); float acc = 0.0f;
  for (int k = 0; k < m; ++k) acc += in[gid + k * gsz];
  l[lid] = acc; barrier(CLK_LOCAL_MEM_FENCE); if (lid == 0) out[get_group_id(0)] = l[0] + l[1]; }
"""


def test_a_guarded_access_in_a_uniform_loop_of_a_barrier_kernel_keeps_it_scalar_on_such_a_runtime():
    """The uniform loop of a barrier kernel runs the work-item loop inside it, vectorized, unless its
    body has an access under a condition that differs between work-items and the runtime cannot
    mask one (calib cond). On ds6 rd_sum_multi_elem (``if (idx < n) acc += in[idx]``) ran 1.4-2.5 ns
    per trip and work-item per core and was predicted 8.6x too fast as vectorized; sc_serial_then_local
    27x. (A probe of these two kernels, 4,096 work-items x 64 trips, measured the guarded one
    1.4-1.5x slower than the plain one under load; both are predicted memory-bound there.)"""
    g = analyze_source(Kernel(source=STRIDED_SUM, name="guarded"))
    p = analyze_source(Kernel(source=STRIDED_SUM, name="plain"))
    assert cpu_vectorizable(g)[0] is True and cpu_vectorizable(p, cond_store_scalar=True)[0] is True
    ok, why = cpu_vectorizable(g, cond_store_scalar=True)
    assert ok is False and "load of in (line 4) in a loop" in why


GUARDED = """
__kernel void guarded(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 1.5f + b[i]; }
__kernel void plain(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = a[i] * 1.5f + b[i]; }
"""


CALLS = """
__kernel void k_fmax(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = fmax(a[i], b[i]) * 1.5f; }
__kernel void k_select(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); float x = a[i], y = b[i]; c[i] = (x > y ? x : y) * 1.5f; }
__kernel void k_mix(__global const float4 *a, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = dot(a[i], a[i]) + clamp(convert_float(n), 0.0f, 1.0f) + sqrt(c[i]); }
"""


def test_builtin_calls_are_counted_apart_from_conversions_and_families():
    f = analyze_source(Kernel(source=CALLS, name="k_fmax"))
    assert f.ops["libcall"] == "1" and builtin_calls(f) == ["libcall"]
    assert "libcall" not in analyze_source(Kernel(source=CALLS, name="k_select")).ops
    g = analyze_source(Kernel(source=CALLS, name="k_mix"))
    assert g.ops["libcall"] == "2"                         # dot and clamp; not convert_float, not sqrt
    assert sorted(builtin_calls(g)) == ["bi_sqrt", "libcall"]
    assert cpu_vectorizable(f)[0] is True                  # no fact: vectorized, as before
    ok, why = cpu_vectorizable(f, libcall_scalar=True)
    assert ok is False and "out of line" in why
    assert cpu_vectorizable(analyze_source(Kernel(source=CALLS, name="k_select")), libcall_scalar=True)[0] is True


def test_a_runtime_that_calls_its_builtins_charges_each_call():
    """With the fact (a call 8x the plain store) every call costs wi_libcall_ns of a compute unit per
    work-item on top of the scalar code; without it the call is arithmetic."""
    base = {"wi_store_ns": 0.5, "wi_cond_store_ns": 0.5, "scalar_fp32_add_gops": 10.0, "wi_fp32_add_gops": 50.0}
    out_of_line = AnalyticalModel(cpu_profile(**base, wi_call_ns=4.0, wi_libcall_ns=4.0))
    inlined = AnalyticalModel(cpu_profile(**base, wi_call_ns=0.6, wi_libcall_ns=0.1))
    assert out_of_line.dev.libcall_scalar and not inlined.dev.libcall_scalar
    f = analyze_source(Kernel(source=CALLS, name="k_fmax"))
    n = 1 << 20
    args = [{"name": x, "kind": "buffer", "dtype": "float", "count": n} for x in "abc"]
    env = {k: np.asarray([v]) for k, v in config_env([n], [256], args + [
        {"name": "n", "kind": "scalar", "dtype": "int", "value": str(n)}]).items()}
    t_call = float(out_of_line.evaluate(f, env).parts["compute_s"][0])
    t_inl = float(inlined.evaluate(f, env).parts["compute_s"][0])
    # 2^20 calls of 4 ns on 2 compute units: 2.1 ms of calls alone
    assert t_call >= n * 4e-9 / 2 and t_call > 10 * t_inl



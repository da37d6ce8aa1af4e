"""hypot, cbrt, fmod and rint (with the float -> integer conversions that round) are builtin families of their
own."""

from __future__ import annotations

import pandas as pd
import pytest
from kernelcast.models.analytical import AnalyticalModel, cpu_vectorizable
from kernelcast.models.static import analyze_source

from kernelcast.schema import Kernel
from tests.profiles import cpu_profile

SRC = """
__kernel void k_hypot(__global const float *x, __global const float *y, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = hypot(x[i], y[i]); }
__kernel void k_sqrt(__global const float *x, __global const float *y, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) { float a = x[i], b = y[i]; o[i] = sqrt(a * a + b * b); } }
"""


def test_hypot_counts_in_its_own_family():
    f = analyze_source(Kernel(source=SRC, name="k_hypot"))
    assert "bi_hypot" in f.ops and "bi_sqrt" not in f.ops
    assert cpu_vectorizable(f)[0] is False                 # scalar library code on a CPU runtime
    g = analyze_source(Kernel(source=SRC, name="k_sqrt"))
    assert "bi_sqrt" in g.ops and "bi_hypot" not in g.ops
    assert cpu_vectorizable(g)[0] is True


RND = """
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


def test_rounding_conversions_count_as_rint():
    ops = {k: analyze_source(Kernel(source=RND, name=k)).ops for k in ("k_rte", "k_rtz", "k_rint", "k_i2f", "k_u8")}
    assert "bi_rint" in ops["k_rte"] and "bi_rint" in ops["k_rint"]
    assert "bi_rint" not in ops["k_rtz"]            # convert_int rounds towards zero: a truncation
    assert "bi_rint" not in ops["k_i2f"]            # int -> float: no float rounding call
    assert "4" in str(ops["k_u8"]["bi_rint"])       # one per component of a uchar4


CBRT = """
__kernel void k_cbrt(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = cbrt(x[i]); }
__kernel void k_sqrt(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = sqrt(x[i]); }
"""


def test_cbrt_counts_in_its_own_family():
    f = analyze_source(Kernel(source=CBRT, name="k_cbrt"))
    assert "bi_cbrt" in f.ops and "bi_sqrt" not in f.ops
    assert cpu_vectorizable(f)[0] is False                 # scalar library code on a CPU runtime
    assert cpu_vectorizable(analyze_source(Kernel(source=CBRT, name="k_sqrt")))[0] is True


FMOD = """
__kernel void k_fmod(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = fmod(x[i] * 40.0f, 0.37f); }
__kernel void k_div(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); if (i < n) o[i] = (x[i] * 40.0f) / 0.37f; }
"""


def test_fmod_counts_in_its_own_family():
    f = analyze_source(Kernel(source=FMOD, name="k_fmod"))
    assert "bi_fmod" in f.ops and "fp32_div" not in f.ops and "libcall" not in f.ops
    assert "bi_fmod" not in analyze_source(Kernel(source=FMOD, name="k_div")).ops


EXP = """
__kernel void k_exp(__global const float *t, __global float *o, const float a, const float r)
{ int i = get_global_id(0); o[i] = a * exp(-r * t[i]); }
__kernel void k_scale(__global const float *t, __global float *o, const float a, const float r)
{ int i = get_global_id(0); o[i] = a * (-r * t[i]); }
"""


def _exp_row(n: int) -> dict:
    return {"source": EXP, "kernel_name": "k_exp", "gsize": [n], "lsize": [256],
            "args": [{"name": "t", "kind": "buffer", "dtype": "float", "count": n},
                     {"name": "o", "kind": "buffer", "dtype": "float", "count": n},
                     {"name": "a", "kind": "scalar", "dtype": "float", "value": "2.0"},
                     {"name": "r", "kind": "scalar", "dtype": "float", "value": "0.5"}]}


def test_vectorized_builtin_call_at_its_work_item_rate():
    """A vectorized kernel with one exp per work-item: charged at wi_exp_gops (independent calls
    per work-item, calib wi) where the profile has it, else at the float16 peak; 2^20 calls at
    1 G calls/s on 2 compute units take 1.05 ms of computation, at the 20 G/s peak 52 us."""
    n = 1 << 20
    with_wi = cpu_profile(peak_exp_gops=20.0, wi_exp_gops=1.0, wi_fp32_fma_gops=100.0)
    peak_only = cpu_profile(peak_exp_gops=20.0, wi_fp32_fma_gops=100.0)
    parts = [AnalyticalModel(p).predict(pd.DataFrame([_exp_row(n)])).explanation[0]["time_parts_us"]["compute"]
             for p in (with_wi, peak_only)]
    assert AnalyticalModel(with_wi).dev.wi_rates["bi_exp"] == 1e9
    assert AnalyticalModel(with_wi).dev.wi_rates["bi_half_exp"] == 1e9          # its variants fall back to it
    assert parts[0] > 10 * parts[1]
    assert parts[0] - parts[1] == pytest.approx(n / 1e9 * 1e6 - n / 20e9 * 1e6, rel=0.02)


TANH = """
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


def test_one_tanh_call_keeps_the_work_item_loop_vectorizable():
    """tanh's family is scalar library code on PoCL 3.1 but for one call of tanh itself, which it
    inlines as vector code (models.analytical.SCALAR_FAMILY_VECTOR_CALLS): call sites are counted per
    inlined path, however often they run; asinh, in tanh's family, stays scalar."""
    f = {k: analyze_source(Kernel(source=TANH, name=k)) for k in ("k_tanh", "k_tanh2", "k_tanh_loop", "k_asinh")}
    assert f["k_tanh"].call_sites == {"bi_tanh:tanh": 1}
    assert f["k_tanh2"].call_sites == {"bi_tanh:tanh": 2}            # one site in a helper, inlined twice
    assert f["k_tanh_loop"].call_sites == {"bi_tanh:tanh": 1}
    assert f["k_asinh"].call_sites == {"bi_tanh:asinh": 1}
    assert cpu_vectorizable(f["k_tanh"])[0] is True
    assert cpu_vectorizable(f["k_tanh2"])[0] is False
    assert cpu_vectorizable(f["k_asinh"])[0] is False


SIN = """
__kernel void k_sin(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); o[i] = sin(x[i] * 0.9f + 0.05f); }
__kernel void k_sin8(__global const float *x, __global float *o, const int n)
{ int i = get_global_id(0); float a0 = x[i] * 0.9f + 0.05f, a1 = a0 + 0.1f, a2 = a0 + 0.2f, a3 = a0 + 0.3f,
  a4 = a0 + 0.4f, a5 = a0 + 0.5f, a6 = a0 + 0.6f, a7 = a0 + 0.7f;
  for (int k = 0; k < n; ++k) { a0 = sin(a0); a1 = sin(a1); a2 = sin(a2); a3 = sin(a3);
    a4 = sin(a4); a5 = sin(a5); a6 = sin(a6); a7 = sin(a7); }
  o[i] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7; }
"""


def test_one_scalar_routine_call_per_work_item_costs_its_single_call_rate():
    """In scalar code a work-item's calls of a math library routine cost the scalar rate (8
    independent chains), but its first call at least what one call per work-item costs (calib wi,
    ``calib.kernels.SCALAR_ROUTINES``): one call 1 / wi, four calls 4 / scalar when that is more."""
    one = "__kernel void k(__global float *o) { int i = get_global_id(0); o[i] = sin(o[i]); }"
    four = ("__kernel void k(__global float *o) { int i = get_global_id(0); float x = o[i];"
            " o[i] = sin(x) + sin(x + 1.0f) + sin(x + 2.0f) + sin(x + 3.0f); }")
    def rows(src: str) -> pd.DataFrame:
        return pd.DataFrame([{"source": src, "kernel_name": "k", "gsize": [1 << 16], "lsize": [256],
                              "args": [{"name": "o", "kind": "buffer", "dtype": "float", "count": 1 << 16}]}])

    base = {"peak_sin_gops": 8.0, "scalar_sin_gops": 0.2}
    comp = {}
    for label, extra in (("scalar", {}), ("wi", {"wi_sin_gops": 0.1})):
        m = AnalyticalModel(cpu_profile(**base, **extra))
        comp[label] = [m.predict(rows(src)).explanation[0]["time_parts_us"]["compute"] for src in (one, four)]
    # per work-item and compute unit: 1 / (0.2e9 / 2) = 10 ns a call at the scalar rate, 20 ns one call alone
    assert comp["wi"][0] / comp["scalar"][0] == pytest.approx(2.0, rel=0.05)
    assert comp["wi"][1] == pytest.approx(comp["scalar"][1], rel=1e-9)       # 4 x 10 ns > 20 ns



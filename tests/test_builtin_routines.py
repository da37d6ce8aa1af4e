"""The routines of a builtin family (exp2 beside exp, log1p beside log, acos beside atan...) are
families of their own, with their own calibrated rates and their parent's where a profile has none."""

from __future__ import annotations

import pytest
from kernelcast.models.analytical import AnalyticalModel, cpu_vectorizable
from kernelcast.models.static import analyze_source
from kernelcast.models.static.features import BUILTIN_FAMILIES, FAMILY_PARENT

from kernelcast.schema import Kernel
from tests.profiles import cpu_profile

CALLS = """
__kernel void k(__global const float *x, __global float *o)
{
    int i = get_global_id(0);
    float v = x[i], c;
    o[i] = exp2(v) + exp10(v) + expm1(v) + log2(v) + log10(v) + log1p(v) + cos(v) + cospi(v) + tan(v)
         + sinh(v) + cosh(v) + asin(v) + acos(v) + erfc(v) + sincos(v, &c) + exp(v) + atan2(v, v);
}
"""


def test_routines_count_in_their_own_families():
    ops = analyze_source(Kernel(source=CALLS, name="k")).ops
    counts = {k: float(str(v)) for k, v in ops.items() if k.startswith("bi_")}
    assert counts == {"bi_exp2": 1, "bi_exp10": 1, "bi_expm1": 1, "bi_log2": 1, "bi_log10": 1, "bi_log1p": 1,
                      "bi_cos": 2, "bi_tan": 1, "bi_sinh": 1, "bi_cosh": 1, "bi_asin": 1, "bi_acos": 1,
                      "bi_erfc": 1, "bi_sin": 2, "bi_exp": 1, "bi_atan": 1}
    assert set(FAMILY_PARENT) <= set(BUILTIN_FAMILIES)
    assert all(p in BUILTIN_FAMILIES and p not in FAMILY_PARENT for p, _ in FAMILY_PARENT.values())


def test_rates_fall_back_to_the_parent_family():
    """A profile without a routine's own rates charges it at its parent's (a tangent at half the
    sine's: one tangent counted a sine and a cosine before it had a family of its own); its own
    rates win where calibrated, for the peak, the scalar and the work-item rates alike."""
    old = AnalyticalModel(cpu_profile(peak_exp_gops=20.0, scalar_exp_gops=1.0, wi_exp_gops=4.0, peak_sin_gops=4.0,
                                      scalar_sin_gops=0.5)).dev
    assert old.builtin_rates["bi_exp2"] == old.builtin_rates["bi_exp"] == 20e9
    assert old.builtin_rates["bi_native_exp2"] == 20e9
    assert old.wi_rates["bi_exp2"] == 4e9
    assert old.scalar_rates["bi_exp2"] == pytest.approx(1e9)
    assert old.builtin_rates["bi_tan"] == pytest.approx(2e9) and old.scalar_rates["bi_tan"] == pytest.approx(0.25e9)
    assert "peak_exp_gops" in old.rate_sources["bi_exp2"]
    new = AnalyticalModel(cpu_profile(peak_exp_gops=20.0, scalar_exp_gops=1.0, peak_exp2_gops=12.0,
                                      scalar_exp2_gops=0.3, peak_sin_gops=4.0, peak_tan_gops=3.0)).dev
    assert new.builtin_rates["bi_exp2"] == 12e9 and new.scalar_rates["bi_exp2"] == pytest.approx(0.3e9)
    assert new.builtin_rates["bi_tan"] == 3e9 and new.rate_sources["bi_tan"] == "profile"


EXP2 = """
__kernel void k_exp2(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp2(-x[i]); }
__kernel void k_exp(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp(-x[i]); }
"""


def test_exp2_leaves_the_work_item_loop_scalar():
    f = analyze_source(Kernel(source=EXP2, name="k_exp2"))
    ok, why = cpu_vectorizable(f)
    assert ok is False and "exp2" in why
    assert cpu_vectorizable(analyze_source(Kernel(source=EXP2, name="k_exp")))[0] is True


LOOPS = """
__kernel void k_data(__global float* restrict a)
{ int i = get_global_id(0); float x = a[i]; a[i] = exp(x) + exp(x + 0.25f) + exp(x + 0.5f) + exp(x + 0.75f); }
__kernel void k_loop(__global float* restrict a)
{ int i = get_global_id(0); float t = a[i]; for (int j = 0; j < 4; j++) t += exp(-fabs((float)j)); a[i] = t; }
__kernel void k_sqrt_loop(__global float* restrict a)
{ int i = get_global_id(0); float t = a[i]; for (int j = 0; j < 4; j++) t += sqrt(t + j); a[i] = t; }
"""


def test_a_small_loop_calling_a_library_routine_is_not_unrolled():
    """A constant loop of 4 trips is unrolled, unless its body calls a math library routine (the
    inlined routine makes it too large): then the work-item loop is not innermost and stays scalar.
    A square root is one instruction and does not count."""
    f = analyze_source(Kernel(source=LOOPS, name="k_loop"))
    assert [lp.calls for lp in f.loops] == [("bi_exp",)]
    ok, why = cpu_vectorizable(f)
    assert ok is False and "4 trips calling exp" in why
    g = analyze_source(Kernel(source=LOOPS, name="k_sqrt_loop"))
    assert [lp.calls for lp in g.loops] == [("bi_sqrt",)]
    assert cpu_vectorizable(g)[0] is True


FORMS = """
__kernel void k_sin(__global const float *x, __global float *o) { int i = get_global_id(0); o[i] = sin(x[i]); }
__kernel void k_native_sin(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = native_sin(x[i]); }
__kernel void k_exp2(__global const float *x, __global float *o) { int i = get_global_id(0); o[i] = exp2(x[i]); }
__kernel void k_exp_ln2(__global const float *x, __global float *o)
{ int i = get_global_id(0); o[i] = exp(x[i] * M_LN2_F); }
"""



"""Operations on OpenCL vector values (``float8 x; x * 0.5f``) are SIMD instructions of the
target whether or not the runtime vectorizes its work-item loop: the static count keeps them apart
(``vec_ops``) and the CPU class charges a work-item loop it leaves scalar for them at the scalar
rate times the target's SIMD gain, not as ``width`` scalar operations (vt_float8_poly was predicted
2.1x too slow on ds6 without it). Checked by hand and against a real measurement."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, ProfileValue
from kernelcast.models.analytical import DeviceParams, vector_value_correction
from kernelcast.models.static.source import analyze_source_text

POLY = """
__kernel void poly8(__global const float8 *in, __global float8 *out, const int n)
{ int i = get_global_id(0); if (i < n) { float8 x = in[i]; out[i] = ((x * 0.5f + 1.0f) * x - 2.0f) * x + 0.25f; } }
__kernel void poly1(__global const float *in, __global float *out, const int n)
{ int i = get_global_id(0); if (i < n) { float x = in[i]; out[i] = ((x * 0.5f + 1.0f) * x - 2.0f) * x + 0.25f; } }
__kernel void mixed(__global const int4 *a, __global int4 *b, __global float *c)
{ int i = get_global_id(0); int4 v = a[i] ^ (int4)(3); b[i] = v + 1; c[i] = convert_float4(v).x * 2.0f; }
"""


def test_operations_on_vector_values_are_counted_apart_by_width():
    f = analyze_source_text(POLY, "poly8")
    assert f.vec_ops == {"fp32_fma@8": "24*min(1, max(0, n/gsize0))"}
    assert f.ops["fp32_fma"] == f.vec_ops["fp32_fma@8"]         # still in the per-class count
    assert analyze_source_text(POLY, "poly1").vec_ops == {}
    g = analyze_source_text(POLY, "mixed")
    assert g.vec_ops == {"int_bit@4": "4", "int_add@4": "4", "conv@4": "4"}
    assert g.ops["fp32_mul"] == "1"                              # a component's use is scalar


def _cpu(**values: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="cpu", vendor="x", device_type="CPU", compute_units=2))
    for k, v in values.items():
        p.values[k] = ProfileValue(v, "Gop/s", "measured")
    return p


def test_a_scalar_loop_pays_vector_lanes_at_the_simd_gain():
    """Scalar 10 Gop/s, vectorized 40: a lane of a float8 FMA costs 1/40 ns, not 1/10 (gain
    min(8, 4)); of a float2, 1/20 (gain 2)."""
    d = DeviceParams.from_profile(_cpu(peak_fp32_fma_gops=40.0, scalar_fp32_fma_gops=10.0,
                                       wi_fp32_fma_gops=40.0))
    f = {"vec:fp32_fma@8": np.array([8.0]), "vec:fp32_fma@2": np.array([2.0]), "fp32_fma": np.array([10.0])}
    corr = vector_value_correction(f, d)
    assert corr == pytest.approx(8 / 40e9 - 8 / 10e9 + 2 / 20e9 - 2 / 10e9)


VECTOR_MATH = """
__kernel void pow4(__global const float *a, __global float *c, const float s)
{ int i = get_global_id(0); vstore4(pow(vload4(i, a), (float4)(s)), i, c); }
__kernel void pow1(__global const float *a, __global float *c, const float s)
{ int i = get_global_id(0); c[i] = pow(a[i], s); }
"""


def test_a_builtin_on_a_vector_value_is_one_vector_math_call():
    """``exp(float4)`` is recorded apart (``vec:bi_exp@4``) and a scalar work-item loop pays its
    components at the family's scalar rate times min(4, peak / scalar): here min(4, 8 / 1) = 4."""
    f = analyze_source_text("__kernel void exp4(__global const float *a, __global float *c)\n"
                            "{ int i = get_global_id(0); vstore4(exp(vload4(i, a)), i, c); }", "exp4")
    assert f.vec_ops.get("bi_exp@4") == "4"
    d = DeviceParams.from_profile(_cpu(peak_exp_gops=8.0, scalar_exp_gops=1.0))
    corr = vector_value_correction({"vec:bi_exp@4": np.array([4.0])}, d)
    assert corr == pytest.approx(4 / (1e9 * 4) - 4 / 1e9)
    assert "bi_pow@4" in analyze_source_text(VECTOR_MATH, "pow4").vec_ops



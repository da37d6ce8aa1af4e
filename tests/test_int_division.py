"""Integer division in a work-item loop the runtime leaves scalar: CPUs have no SIMD integer
divide, so the calibrated (or ruled) peak of ``int32_div`` is already the scalar rate, not a
vector rate to scale down by the FMA's scalar/vector ratio (which charged 3.8 ns per ``%``)."""

from __future__ import annotations

import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel, DeviceParams

from tests.profiles import cpu_profile

MOD = """
__kernel void with_mod(__global const float *a, __global float *c, const int n, const int m)
{ int i = get_global_id(0); if (i < n) { float s = 0; for (int k = 0; k < m; ++k) s += a[(i + k) % n]; c[i] = s; } }
__kernel void without(__global const float *a, __global float *c, const int n, const int m)
{ int i = get_global_id(0); if (i < n) { float s = 0; for (int k = 0; k < m; ++k) s += a[k]; c[i] = s; } }
"""


def test_integer_division_is_never_scaled_below_its_peak_in_scalar_code():
    p = DeviceProfile(DeviceIdentity(name="cpu", vendor="x", device_type="CPU", compute_units=2))
    for k, v in {"peak_fp32_fma_gops": 40.0, "scalar_fp32_fma_gops": 10.0, "peak_int32_mul_gops": 40.0,
                 "peak_int32_add_gops": 80.0}.items():
        p.set(k, v, "Gop/s", "test")
    d = DeviceParams.from_profile(p)
    assert d.scalar_rate("int_div") == d.rate("int_div")            # the rule: int32 mul / 20
    assert d.scalar_rate("int_add") == 80e9 * 10 / 40


DIV = """
__kernel void by_arg(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) % n; }
__kernel void by_const(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) % 100u; }
__kernel void masked(__global const uint *a, __global uint *o, const uint n)
{ int i = get_global_id(0); o[i] = (a[i] * 7u + 3u) & 127u; }
"""


def _div_rows(names: tuple[str, ...], n: int) -> pd.DataFrame:
    args = [{"name": "a", "kind": "buffer", "dtype": "uint", "count": n},
            {"name": "o", "kind": "buffer", "dtype": "uint", "count": n},
            {"name": "n", "kind": "scalar", "dtype": "uint", "value": "100"}]
    return pd.DataFrame([{"source": DIV, "kernel_name": k, "gsize": [n], "lsize": [256], "args": args}
                         for k in names])


def test_divider_is_a_roofline_of_its_own():
    """2^20 divisions at 1 G/s on 2 compute units: 1.05 ms of one unit's divider; the other
    operations (a multiply, an add, a store's address) are not added to it but overlap it, so the
    computation takes the larger of the two; a constant divisor is no division at all."""
    n = 1 << 20
    p = cpu_profile(peak_int32_div_gops=1.0, peak_int32_add_gops=100.0, peak_int32_mul_gops=100.0)
    pred = AnalyticalModel(p).predict(_div_rows(("by_arg", "by_const", "masked"), n))
    comp = [e["time_parts_us"]["compute"] for e in pred.explanation]
    assert comp[0] == pytest.approx(n / 2 / 0.5e9 * 1e6, rel=1e-6)
    assert comp[1] < comp[0] / 10 and comp[2] < comp[0] / 10



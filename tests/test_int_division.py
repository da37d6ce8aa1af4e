"""Integer division in a work-item loop the runtime leaves scalar: CPUs have no SIMD integer
divide, so the calibrated (or ruled) peak of ``int32_div`` is already the scalar rate, not a
vector rate to scale down by the FMA's scalar/vector ratio (which charged 3.8 ns per ``%``)."""

from __future__ import annotations

from calib.microbench import CalibOptions
from calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.schema import ArgBinding
from models.analytical import DeviceParams
from tests.device_ratio import known_miss, measured_ratio_tries, require_pocl_cpu

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


def test_modulo_loop_against_the_same_loop_without_on_this_device(harness, device):
    """2^14 work-items, 64 trips of a float sum, one with ``a[(i + k) % n]``. Measured here (PoCL
    3.0 wheel, AMD EPYC Zen 3): 2.7x alone on the idle host and under a datagen, 5.0-5.2x in one full
    clean-clone test run where the modulo kernel ran 2x slower in every try (2.1 instead of 1.1 ms);
    predicted 2.3 (5.8 when the division was scaled down; ds6's modulo kernels, 50 rows, agree with
    the 2.3). Within 2.5x: a check of the division's magnitude, not of the choice between the two."""
    require_pocl_cpu(device)
    n, m = 1 << 14, 64
    binds = [ArgBinding("a", "buffer", "float", n, init="random"), ArgBinding("c", "buffer", "float", n),
             ArgBinding("n", "scalar", "int", value=n), ArgBinding("m", "scalar", "int", value=m)]
    with known_miss(device, "pocl31-zen5", "the modulo loop measured 6-9x the one without, predicted 1.5x "
                    "(with_mod 0.8-1.2 ms against 0.34 predicted)"):
        measured_ratio_tries(3, 1.2, 2.5, harness, device, CalibOptions(benches=("launch",), quick=True), (),
                             MOD, ("with_mod", "without"), n, 256, binds)

"""hypot, cbrt, fmod and rint (with the float -> integer conversions that round) are builtin families of their
own."""

from __future__ import annotations

import pandas as pd
import pytest
from kernelcast.calib.microbench import CalibOptions
from kernelcast.models.analytical import AnalyticalModel, cpu_vectorizable
from kernelcast.models.static import analyze_source

from kernelcast.schema import ArgBinding, Kernel
from tests.device_ratio import cpu_profile, local_profile, measured_ratio, measured_ratio_tries, require_pocl_cpu

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


def test_hypot_against_sqrt_on_this_device(harness, device):
    """Measured here (PoCL 3.1, load 3.5): 28.2 ns per work-item for hypot(x, y), 0.155 for
    sqrt(a * a + b * b). With hypot's rates calibrated by ``calib`` (peak and scalar), the model
    predicts the ratio of the two kernels within 4x of the measured one (it was ~1 with hypot
    charged as a square root)."""
    require_pocl_cpu(device)
    n = 1 << 16
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("y", "buffer", "float", n),
             ArgBinding("o", "buffer", "float", n), ArgBinding("n", "scalar", "int", value=n)]
    r = measured_ratio(harness, device, CalibOptions(benches=("launch", "peak", "scalar"), op_classes=("hypot",),
                                                     target_s=0.003),
                       ("peak_hypot_gops", "scalar_hypot_gops"), SRC, ("k_hypot", "k_sqrt"), n, 256, binds)
    # PoCL 3.0's wheel on a Zen 3 calls sqrt out of line too (both scalar): 7-14x measured
    assert r.measured > 5, r
    assert r.within(4), r


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


def test_rounding_conversion_against_truncation_on_this_device(harness, device):
    """Measured here (PoCL 3.1, load 3.7): 0.67 ns per work-item for convert_int_rte, 0.085 for
    convert_int. With rint's rates calibrated, the model predicts the ratio within 4x on an AMD
    EPYC Zen 5 host and within 5x on a Zen 4 one: there the kernels run as fast (0.62 and 0.107 ns,
    idle) but the calibrated scalar rint rate is half the Zen 5 one, and the predicted ratio was
    14-25 against a measured 2.9-6.0 in five runs (a known over-charge, not fixed). Charged as a
    truncation, as before the rint family, the ratio was ~1: outside either bound."""
    require_pocl_cpu(device)
    n = 1 << 18
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("o", "buffer", "int", n),
             ArgBinding("n", "scalar", "int", value=n)]
    # On a runtime that leaves these guarded kernels scalar (calib cond, the bundled profile: PoCL
    # 3.0's wheel on a Zen 3) both run one work-item at a time: measured 1.2-2.0x (k_rte 311-355 us,
    # k_rtz 160-288 us, idle), predicted 6.3-6.8x, as the scalar rint rate is calib's rint() call
    # (out of line there) while convert_int_rte is a cheaper inline conversion: a known over-charge
    # of up to 6x, not fixed. Elsewhere, as above.
    scalar = AnalyticalModel(local_profile(device)).dev.cond_store_scalar
    # the two kernels' times vary from run to run here (k_rte 106-190 us, idle): three tries
    measured_ratio_tries(3, 1.0 if scalar else 2.5, 6 if scalar else 5, harness, device,
                         CalibOptions(benches=("launch", "peak", "scalar"), op_classes=("rint",), target_s=0.003),
                         ("peak_rint_gops", "scalar_rint_gops"), RND, ("k_rte", "k_rtz"), n, 256, binds)


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


def _family_against(harness, device, family: str, source: str, names: tuple[str, str]):
    """The measured and predicted time ratio of ``names`` (x and o buffers, n = 2^16), with the
    family's peak and scalar rates calibrated on this device first."""
    require_pocl_cpu(device)
    n = 1 << 16
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("o", "buffer", "float", n),
             ArgBinding("n", "scalar", "int", value=n)]
    return measured_ratio(harness, device, CalibOptions(benches=("launch", "peak", "scalar"), op_classes=(family,),
                                                        target_s=0.003),
                          (f"peak_{family}_gops", f"scalar_{family}_gops"), source, names, n, 256, binds)


def test_cbrt_against_sqrt_on_this_device(harness, device):
    """Measured here (PoCL 3.1 on an AMD EPYC Zen 4, 2^20 work-items, load ~2): 33.6 ns per
    work-item for cbrt(x), 0.18 for sqrt(x); it was charged as a square root (a ratio of ~1).
    With cbrt's rates calibrated (peak and scalar) the model predicts the ratio within 4x."""
    r = _family_against(harness, device, "cbrt", CBRT, ("k_cbrt", "k_sqrt"))
    # PoCL 3.0's wheel on a Zen 3 calls sqrt out of line too (both scalar): 14x measured, 17x predicted
    assert r.measured > 5, r
    assert r.within(4), r


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


def test_fmod_against_division_on_this_device(harness, device):
    """fmod is a library routine (an exact remainder), not a division: measured here (PoCL 3.0 on
    an AMD EPYC Zen 3, a datagen beside it) 20-23x the division kernel, 19-27 ns per call; it was
    charged as one division. With fmod's rates calibrated the model predicts 48-68x: within 4x."""
    r = _family_against(harness, device, "fmod", FMOD, ("k_fmod", "k_div"))
    assert r.measured > 3, r
    assert r.within(4), r


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


def test_exp_against_arithmetic_on_this_device(harness, device):
    """``o[i] = a * exp(-r * t[i])`` against the same without the exp, on PoCL: measured here 4.0x
    (88 and 22 us at 2^18 work-items); with the exp's one-call-per-work-item rate calibrated (calib
    wi: 3.4 G calls/s, against the 14.3 G/s of its float16 peak) the model predicts the ratio
    within 2x (3.5x; it was 1.6x at the peak rate)."""
    require_pocl_cpu(device)
    n = 1 << 18
    binds = [ArgBinding("t", "buffer", "float", n), ArgBinding("o", "buffer", "float", n),
             ArgBinding("a", "scalar", "float", value=2.0), ArgBinding("r", "scalar", "float", value=0.5)]
    # up to 3 tries: in a slow phase of the host one try measured 7.8x (152 us with the exp), predicted 3.4x
    measured_ratio_tries(3, 2, 2, harness, device, CalibOptions(benches=("launch", "wi"), op_classes=("exp",)),
                         ("wi_exp_gops",), EXP, ("k_exp", "k_scale"), n, 256, binds)


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


def test_tanh_against_exp_on_this_device(harness, device):
    """One tanh and one exp call per work-item, both vector code on PoCL 3.1: measured 1.26-1.57x at
    2^20 work-items (k_tanh 715-1,300 us, k_exp 454-1,030, the host's phases); with wi_tanh_gops and
    wi_exp_gops calibrated the model predicts 1.9-2.0x (charged as scalar library code, as before:
    5.0x, k_tanh predicted 1,872 us against 715 measured)."""
    require_pocl_cpu(device)
    n = 1 << 20
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("o", "buffer", "float", n),
             ArgBinding("n", "scalar", "int", value=n)]
    measured_ratio_tries(3, 1.2, 2, harness, device,
                         CalibOptions(benches=("launch", "wi"), op_classes=("tanh", "exp"), target_s=0.003),
                         ("wi_tanh_gops", "wi_exp_gops"), TANH, ("k_tanh", "k_exp"), n, 256, binds)


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


def test_one_sin_call_against_eight_chains_on_this_device(harness, device):
    """Scalar library code on PoCL 3.1: one sin call per work-item against eight independent chains
    of four calls (the shape of calib's scalar benchmark). Per call, measured 15.4 ns a core alone
    and 9.0 in the chains (2^18 work-items; 12.4-20x per work-item, the host's phases moving the
    single call 2,023-3,150 us); with the single-call rate calib wi measures the model predicts
    18.6x, charged at the scalar rate alone 31x."""
    require_pocl_cpu(device)
    n = 1 << 18
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("o", "buffer", "float", n),
             ArgBinding("n", "scalar", "int", value=4)]
    measured_ratio_tries(3, 6, 1.5, harness, device,
                         CalibOptions(benches=("launch", "scalar", "wi"), op_classes=("sin",), target_s=0.003),
                         ("scalar_sin_gops", "wi_sin_gops"), SIN, ("k_sin8", "k_sin"), n, 256, binds)

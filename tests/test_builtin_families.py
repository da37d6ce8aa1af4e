"""hypot and rint (with the float -> integer conversions that round) are builtin families of their own."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from calib.microbench import CalibOptions, Calibrator
from calib.profile import load_profile
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig
from models.analytical import AnalyticalModel, cpu_vectorizable
from models.static import analyze_source

ROOT = Path(__file__).resolve().parents[1]
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
    if "pocl" not in (device.platform_name + device.platform_version).lower() or device.type != "CPU":
        pytest.skip("a PoCL CPU device")
    from instrument.runner import TimingPolicy

    cal = Calibrator(device, harness, options=CalibOptions(benches=("launch", "peak", "scalar"),
                                                           op_classes=("hypot",), target_s=0.003))
    measured = cal.run()
    assert measured.get("peak_hypot_gops") and measured.get("scalar_hypot_gops")
    prof = load_profile(ROOT / "calib" / "profiles" / "pocl-local.json")
    for k in ("peak_hypot_gops", "scalar_hypot_gops"):
        prof.values[k] = measured.values[k]
    model = AnalyticalModel(prof)
    pol = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02, max_repeats=50, max_time_s=2.0)
    n, ls = 1 << 16, 256
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("y", "buffer", "float", n),
             ArgBinding("o", "buffer", "float", n), ArgBinding("n", "scalar", "int", value=n)]
    args = [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.value is None else str(b.value)} for b in binds]
    t, pred = {}, {}
    for name in ("k_hypot", "k_sqrt"):
        m = harness.run(Kernel(SRC, name), LaunchConfig((n,), (ls,), binds), pol)
        assert m.status == "ok", m.reason
        t[name] = m.time.median_us
        pred[name] = model.predict(pd.DataFrame([{"source": SRC, "kernel_name": name, "gsize": [n], "lsize": [ls],
                                                   "args": args}])).time_us[0]
    ratio_m = t["k_hypot"] / t["k_sqrt"]
    ratio_p = pred["k_hypot"] / pred["k_sqrt"]
    assert ratio_m > 20, t
    assert ratio_m / 4 < ratio_p < ratio_m * 4, (ratio_p, ratio_m, pred, t)


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
    convert_int. With rint's rates calibrated, the model predicts the ratio within 4x."""
    if "pocl" not in (device.platform_name + device.platform_version).lower() or device.type != "CPU":
        pytest.skip("a PoCL CPU device")
    from instrument.runner import TimingPolicy

    cal = Calibrator(device, harness, options=CalibOptions(benches=("launch", "peak", "scalar"),
                                                           op_classes=("rint",), target_s=0.003))
    measured = cal.run()
    prof = load_profile(ROOT / "calib" / "profiles" / "pocl-local.json")
    for k in ("peak_rint_gops", "scalar_rint_gops"):
        prof.values[k] = measured.values[k]
    model = AnalyticalModel(prof)
    pol = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02, max_repeats=50, max_time_s=2.0)
    n, ls = 1 << 18, 256
    binds = [ArgBinding("x", "buffer", "float", n), ArgBinding("o", "buffer", "int", n),
             ArgBinding("n", "scalar", "int", value=n)]
    args = [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.value is None else str(b.value)} for b in binds]
    t, pred = {}, {}
    for name in ("k_rte", "k_rtz"):
        m = harness.run(Kernel(RND, name), LaunchConfig((n,), (ls,), binds), pol)
        assert m.status == "ok", m.reason
        t[name] = m.time.median_us
        pred[name] = model.predict(pd.DataFrame([{"source": RND, "kernel_name": name, "gsize": [n], "lsize": [ls],
                                                   "args": args}])).time_us[0]
    ratio_m = t["k_rte"] / t["k_rtz"]
    ratio_p = pred["k_rte"] / pred["k_rtz"]
    assert ratio_m > 3, t
    assert ratio_m / 4 < ratio_p < ratio_m * 4, (ratio_p, ratio_m, pred, t)

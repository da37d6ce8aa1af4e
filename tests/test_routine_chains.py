"""A math library routine on a loop-carried chain (``v = v * 0.99f + sin(v)`` in a loop): every call
waits for the call before, so it costs the routine's latency (calib chain's ``chain_<routine>_ns``),
not its throughput (the scalar rate, measured with 8 independent chains). Counted by the static
chain pass in every loop, charged by the analytical model's CPU class as a floor under scalar code,
and checked against real launches on this device."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.microbench import QUICK_ROUTINE_CHAIN_CLASSES, ROUTINE_CHAIN_CLASSES
from kernelcast.models.analytical import AnalyticalModel, chain_seconds
from kernelcast.models.static.chains import ROUTINE_PREFIX, routine_class
from kernelcast.models.static.features import CHAIN_PREFIX
from kernelcast.models.static.source import analyze_source_text

from tests.profiles import cpu_profile

KERNELS = """
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


def _chain(name: str) -> dict[str, str]:
    """The routine classes of the kernel's chains (the arithmetic on them counts apart)."""
    return {k: v for k, v in analyze_source_text(KERNELS, name).chain_ops.items() if k.startswith(ROUTINE_PREFIX)}


def test_routine_calls_on_a_chain_are_counted_in_every_loop():
    """A loop all work-items take alike counts a routine's calls on its chain (arithmetic chains
    count only where trips differ between work-items), but for the first trip's: 31 of 32. Four
    chains of 8 trips count one chain's 7; independent calls (``s += sin(a + k)``) none; a loop whose
    trips differ between work-items (a data-dependent exit) counts all its trips from two on
    average, none at one; sqrt is one instruction, not a routine."""
    assert _chain("sin_chain") == {"bi_sin": "31"}
    assert _chain("sin_4chains") == {"bi_sin": "7"}
    assert _chain("sin_indep") == {}
    esc = analyze_source_text(KERNELS, "escape")
    site = next(s.symbol for s in esc.sites if s.symbol.startswith("trip_l"))
    for mean, want in ((1.0, 0.0), (1.5, 1.0), (2.0, 2.0), (6.0, 6.0)):
        env = {"gsize0": np.asarray([64.0]), site: np.asarray([mean])}
        assert esc.evaluate_many(env)[CHAIN_PREFIX + "bi_sin"][0] == pytest.approx(want), mean
    assert _chain("sqrt_chain") == {}
    assert routine_class("native_exp") == "bi_native_exp" and routine_class("sincos") == "bi_sin"
    assert routine_class("sqrt") is None and routine_class("fmax") is None


def test_a_routine_outweighs_arithmetic_when_the_longer_chain_is_kept():
    """Three adds on one carried value and an exp on another: the exp's chain is the longer (a
    routine's latency is 20-60 arithmetic operations'), so the exp is what the loop waits for and
    the adds are not counted."""
    assert analyze_source_text(KERNELS, "adds_or_exp").chain_ops == {ROUTINE_PREFIX + "exp": "max(0, max(0, n) - 1)"}


def test_routine_latencies_fall_back_and_floor_scalar_code():
    """``chain_<routine>_ns`` where the profile has it, the parent family's (a tangent twice a
    sine's) where not, none without any; the chain floors the compute time of scalar code: 31 sin
    calls at 34 ns of one of 2 compute units per work-item."""
    prof = cpu_profile(scalar_sin_gops=0.2, peak_sin_gops=2.0, chain_sin_ns=34.0, chain_exp_ns=19.0)
    dev = AnalyticalModel(prof).dev
    assert dev.chain_s["bi_sin"] == pytest.approx(34e-9) and dev.chain_s["bi_tan"] == pytest.approx(68e-9)
    assert dev.chain_s["bi_exp2"] == pytest.approx(19e-9) and "bi_log" not in dev.chain_s
    assert dev.chain_s["bi_native_sin"] == pytest.approx(34e-9)
    assert not any(k.startswith(ROUTINE_PREFIX) for k in AnalyticalModel(cpu_profile()).dev.chain_s)
    f = analyze_source_text(KERNELS, "sin_chain").evaluate_many({"gsize0": np.asarray([4096.0])})
    assert float(chain_seconds(f, dev)[0]) == pytest.approx(31 * 34e-9)
    args = [{"name": n, "kind": "buffer", "dtype": "float", "count": 4096} for n in ("x", "o")]
    rows = [{"source": KERNELS, "kernel_name": k, "gsize": [4096], "lsize": [64], "args": args}
            for k in ("sin_chain", "sin_indep")]
    slow = AnalyticalModel(prof).predict(pd.DataFrame(rows)).time_us
    plain = AnalyticalModel(cpu_profile(scalar_sin_gops=0.2, peak_sin_gops=2.0)).predict(pd.DataFrame(rows)).time_us
    assert slow[0] > 2 * plain[0] and slow[0] >= 4096 / 2 * 31 * 34e-9 * 1e6
    assert slow[1] == pytest.approx(plain[1])


def test_calib_times_the_routines_chains():
    assert set(QUICK_ROUTINE_CHAIN_CLASSES) <= set(ROUTINE_CHAIN_CLASSES)
    assert {"sin", "exp", "log", "exp2", "native_exp"} <= set(ROUTINE_CHAIN_CLASSES)
    assert not {"sqrt", "rsqrt", "native_divide", "rint"} & set(ROUTINE_CHAIN_CLASSES)



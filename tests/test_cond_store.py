"""Stores under a condition that differs between work-items: the static mark
(``Access.conditional``), the device fact calib measures (``calib cond``: a guarded elementwise
store against a plain one) and the CPU class's use of it (such a work-item loop is scalar where the
runtime leaves it so), checked against a real measurement on this device."""

from __future__ import annotations

import pytest

from calib.microbench import CalibOptions
from calib.profile import DeviceIdentity, DeviceProfile, ProfileValue
from kernelcast.schema import ArgBinding, Kernel
from models.analytical import DeviceParams, conditional_stores, cpu_vectorizable
from models.static.source import analyze_source
from tests.device_ratio import measured_ratio_tries, require_pocl_cpu

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


def _cpu_profile(**values: float) -> DeviceProfile:
    dev = DeviceIdentity(name="cpu", vendor="x", device_type="CPU", platform="PoCL", compute_units=2)
    p = DeviceProfile(device=dev)
    for k, v in {"peak_fp32_fma_gops": 100.0, "dram_bw_gbs": 20.0, **values}.items():
        p.values[k] = ProfileValue(v, "x", "test")
    return p


def test_the_device_fact_decides_whether_a_conditional_store_keeps_the_loop_scalar():
    f = analyze_source(Kernel(source=MARKS, name="guard"))
    assert [a.arg for a in conditional_stores(f)] == ["c"]
    assert cpu_vectorizable(f)[0] is True                         # no fact: vectorized, as before
    ok, why = cpu_vectorizable(f, cond_store_scalar=True)
    assert ok is False and "divergent line 3" in why and "calib cond" in why
    sel = analyze_source(Kernel(source=MARKS, name="select_form"))
    assert cpu_vectorizable(sel, cond_store_scalar=True)[0] is True
    # the fact is the calibrated ratio of the guarded to the plain store, against a threshold
    assert DeviceParams.from_profile(_cpu_profile(wi_store_ns=0.25, wi_cond_store_ns=0.9)).cond_store_scalar
    assert not DeviceParams.from_profile(_cpu_profile(wi_store_ns=0.25, wi_cond_store_ns=0.3)).cond_store_scalar
    assert not DeviceParams.from_profile(_cpu_profile()).cond_store_scalar


GUARDED = """
__kernel void guarded(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 1.5f + b[i]; }
__kernel void plain(__global const float *a, __global const float *b, __global float *c, const int n)
{ int i = get_global_id(0); c[i] = a[i] * 1.5f + b[i]; }
"""


def test_guarded_against_plain_store_on_this_device(harness, device):
    """The same elementwise kernel with and without ``if (i < n)`` (every work-item passes), 2^16
    work-items (768 KiB, in the caches, as calib cond measures). Measured here (PoCL 3.0 wheel, AMD
    EPYC Zen 3, a datagen on the other core): 2.8-4.4x (50-72 us against 16-18 us; at 2^20
    work-items 6-9x), predicted 4.7x with the cond values calibrated a moment before; without them
    the model predicts the two alike (a ratio of 1), as it still does, rightly, on a runtime that
    vectorizes the masked store."""
    require_pocl_cpu(device)
    n = 1 << 16
    binds = [ArgBinding("a", "buffer", "float", n), ArgBinding("b", "buffer", "float", n),
             ArgBinding("c", "buffer", "float", n), ArgBinding("n", "scalar", "int", value=n)]
    # a calibration and a measurement of kernels this short get three tries to agree on a shared host
    measured_ratio_tries(3, 0.0, 2.0, harness, device, CalibOptions(benches=("launch", "cond"), quick=True),
                         ("wi_store_ns", "wi_cond_store_ns"), GUARDED, ("guarded", "plain"), n, 256, binds)

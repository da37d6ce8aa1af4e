"""Loops a GPU compiler keeps but unrolls in part: the static analysis records their control, size
and trips (``partial_loops``), and the GPU class leaves one U-th of the control, U the factor of the
profile's compiler (``models.analytical.gpu.partial_unroll_factor``). Known answers worked out from
the rules in docs/analytical-model.md, "Loops unrolled in part"."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.models.analytical.gpu import GPUClass, compiled_counts, control_kept, partial_unroll_factor
from kernelcast.models.static.source import analyze_source_text

from tests.test_gpu_class import gpu_profile

# 4 fp32 multiply-adds a trip, no loads: 7 operations with the condition, branch and increment
LOOP = """__kernel void loop4(__global float* o) {
  int i = get_global_id(0); float a = o[i], b = a + 1.0f;
  for (int k = 0; k < TRIPS; k++) { a = a * 1.01f + 2.0f; b = b * 1.02f + 3.0f; a = a * b + 1.0f; b = b * a + 1.5f; }
  o[i] = a + b; }"""
RUNTIME = LOOP.replace("k < TRIPS", "k < n").replace("__global float* o)", "__global float* o, int n)").replace(
    "loop4(", "loopn(")
ENV = {"gsize0": 1024.0, "lsize0": 64.0, "ngroups0": 16.0, "warp": 32.0}


def _features(src: str, name: str, trips: int | None = None, **env: float) -> dict[str, np.ndarray]:
    s = src.replace("TRIPS", str(trips)) if trips is not None else src
    return analyze_source_text(s, name).evaluate_many({k: np.array([v]) for k, v in {**ENV, **env}.items()})


def test_a_kept_loop_records_its_control_size_and_trips():
    f = analyze_source_text(LOOP.replace("TRIPS", "64"), "loop4")
    assert len(f.partial_loops) == 1
    lp = f.partial_loops[0]
    assert lp["trip"] == "64" and lp["const"] and lp["pragma"] is None
    assert lp["size"] == 7 and lp["loads"] == 0
    # 65 checks and branches, 64 increments; the multiply-adds are no control
    assert lp["ops"] == {"int_add": "64", "cmp": "65", "branch": "65"}
    assert f.ops["fp32_fma"] == "256"


def test_loops_that_are_not_innermost_or_may_exit_are_not_unrolled_in_part():
    nest = """__kernel void nest(__global float* o, int n) {
      int i = get_global_id(0); float a = o[i];
      for (int j = 0; j < n; j++) { for (int k = 0; k < 100; k++) a = a * 1.01f + 2.0f; }
      o[i] = a; }"""
    got = analyze_source_text(nest, "nest").partial_loops
    assert [lp["trip"] for lp in got] == ["100"]            # the inner loop only
    brk = LOOP.replace("TRIPS", "64").replace("a = a * b + 1.0f;", "a = a * b + 1.0f; if (a > 9.0f) break;")
    assert analyze_source_text(brk, "loop4").partial_loops == []
    once = LOOP.replace("TRIPS", "64").replace("  for (int k", "  #pragma unroll 1\n  for (int k")
    assert analyze_source_text(once, "loop4").partial_loops == []
    # a loop the compiler unrolls fully has no part left
    assert analyze_source_text(LOOP.replace("TRIPS", "16"), "loop4").partial_loops == []


@pytest.mark.parametrize("trip,size,loads,pragma,amd,factor", [
    (1024, 7, 0, None, False, 16),     # 16 * 5 <= 128 < 32 * 5
    (100, 7, 0, None, False, 4),       # the largest power of two dividing 100
    (1001, 7, 0, None, False, 4),      # odd: a remainder loop, as for a runtime trip count
    (None, 7, 0, None, False, 4),
    (17, 39, 4, None, False, 2),       # 2 * 37 <= 128 < 4 * 37
    (1024, 67, 0, None, False, 1),
    (1000, 4, 0, None, True, 40),      # divisors of 1000 with U * 4 <= 192
    (100, 7, 0, None, True, 25),
    (1024, 12, 1, None, True, 8),      # U * (12 + 3) <= 192: 12, the largest power of two is 8
    (17, 24, 1, None, True, 4),        # 17 is prime: a power of two with a remainder
    (None, 7, 0, None, True, 1),       # no runtime unrolling
    (1000, 7, 0, 8, False, 8),         # #pragma unroll 8
    (6, 7, 0, 8, True, 6),
])
def test_partial_unroll_factor(trip, size, loads, pragma, amd, factor):
    assert partial_unroll_factor(trip, size, loads, pragma, amd) == factor


def test_control_is_counted_once_per_unrolled_pass():
    rolled = _features(LOOP, "loop4", 64)
    nv = compiled_counts(rolled)
    # 64 trips, U = 16: 65 checks and branches and 64 increments become 65 / 16 and 4
    assert rolled["cmp"][0] == 65 and nv["cmp"][0] == pytest.approx(65 / 16)
    assert nv["warp_branch"][0] == pytest.approx(rolled["warp_branch"][0] - 65 * 15 / 16)
    assert nv["int_add"][0] == pytest.approx(rolled["int_add"][0] - 64 * 15 / 16)
    assert nv["fp32_fma"][0] == rolled["fp32_fma"][0] == 256
    # trips 100: NVIDIA unrolls by 4, clang's AMDGPU back-end by 25
    f = _features(LOOP, "loop4", 100)
    assert compiled_counts(f)["cmp"][0] == pytest.approx(101 - 101 * 3 / 4)
    assert compiled_counts(f, amd=True)["cmp"][0] == pytest.approx(101 - 101 * 24 / 25)


def test_a_runtime_trip_count_keeps_its_remainder():
    f = _features(RUNTIME, "loopn", n=10.0)
    # NVIDIA unrolls by 4: 10 trips run 2 unrolled passes and 2 remainder trips, 4 of 10 checks
    assert control_kept(np.array([10.0]), False, 7.0)[0] == pytest.approx(0.4)
    assert compiled_counts(f)["cmp"][0] == pytest.approx(f["cmp"][0] - 11 * 0.6)
    # fewer trips than the factor: nothing saved; clang's AMDGPU back-end does not unroll it
    assert control_kept(np.array([3.0]), False, 7.0)[0] == 1.0
    assert compiled_counts(f, amd=True)["cmp"][0] == f["cmp"][0]


def test_the_gpu_class_takes_its_profiles_compiler():
    f = _features(LOOP, "loop4", 100)
    nv = GPUClass(gpu_profile()).compiled_features(dict(f))
    assert nv["cmp"][0] == pytest.approx(101 / 4)
    amd = gpu_profile()
    amd.device.llvm_target = "gfx90a"
    assert GPUClass(amd).compiled_features(dict(f))["cmp"][0] == pytest.approx(101 / 25)
    # the CPU runtime class counts the loop's control as written
    from kernelcast.models.analytical.cpu_runtime import CPURuntimeClass

    from tests.profiles import cpu_profile
    assert CPURuntimeClass(cpu_profile()).compiled_features(dict(f))["cmp"][0] == f["cmp"][0] == 101


def test_the_probe_reads_the_unroll_factor_off_the_code():
    from kernelcast.bench.unroll_probe import _AMD_FP, _PTX_FP, loop_factor

    ptx = "\n".join(["$L__BB0_1:", *["\tfma.rn.f32 \t%f1, %f1, %f2, %f3;"] * 8, "\tadd.s32 \t%r1, %r1, 2;",
                     "\tsetp.ne.s32 \t%p1, %r1, 64;", "\t@%p1 bra \t$L__BB0_1;", "\tret;"])
    assert loop_factor(ptx, r"^(\$L__BB\d+_\d+):", r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", _PTX_FP, 4) == "2"
    # a packed instruction does two lanes; no backward branch left: unrolled fully
    amd = "\n".join([".LBB0_2:", "\tv_pk_fma_f32 v[0:1], v[0:1], v[2:3], v[4:5]", "\tv_fmac_f32_e32 v6, v7, v8",
                     "\ts_cbranch_scc0 .LBB0_2"])
    assert loop_factor(amd, r"^(\.LBB\d+_\d+):", r"\bs_cbranch_\w+\s+(\.LBB\d+_\d+)", _AMD_FP, 1) == "3"
    assert loop_factor("\tv_fmac_f32_e32 v6, v7, v8\n\ts_endpgm", r"^(\.LBB\d+_\d+):",
                       r"\bs_cbranch_\w+\s+(\.LBB\d+_\d+)", _AMD_FP, 1) == "full"


def test_the_probe_rejects_bad_arguments(capsys):
    from kernelcast.bench.unroll_probe import main

    with pytest.raises(SystemExit) as e:
        main(["--trips", "17,x"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kernelcast: error: bench.unroll_probe: --ops takes")


def test_arithmetic_on_loaded_data_is_not_loop_control():
    src = """__kernel void dd(__global const uchar* in, __global float* out, __global const float* shifts, float x) {
      int sample = get_global_id(0); float acc = 0.0f;
      for (int c = 0; c < 1536; c++) { unsigned int s = x * shifts[c]; acc += in[c * 25650 + (sample + s)]; }
      out[sample] = acc; }"""
    lp = analyze_source_text(src, "dd").partial_loops[0]
    # the increment and c * 25650 are the counter's; sample + s and the index sum read a load
    assert lp["ops"] == {"int_add": "1536", "int_mul": "1536", "cmp": "1537", "branch": "1537"}
    assert lp["size"] == 12 and lp["loads"] == 2


def test_the_partial_unrolling_can_be_switched_off(monkeypatch):
    f = _features(LOOP, "loop4", 100)
    assert compiled_counts(f, partial=False)["cmp"][0] == f["cmp"][0] == 101
    monkeypatch.setattr(GPUClass, "partial_unrolling", False)
    assert GPUClass(gpu_profile()).compiled_features(dict(f))["cmp"][0] == 101

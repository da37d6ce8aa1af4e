"""instrument.rewrite: libclang rewriting that records the element range every pointer argument
is touched at, run for real on the local OpenCL device."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.instrument.rewrite import (
    REC_NAME,
    AccessExtent,
    RewriteError,
    instrument_kernel,
    measure_instrumented,
    run_instrumented,
)

from kernelcast.clang import kernel_signatures
from kernelcast.schema import Kernel

N = 64
LS = (32,)


def _run(harness, src: str, name: str, sizes: dict[str, int], scalars: dict | None = None, gsize=(N,),
         lsize=LS, **kw) -> dict[str, AccessExtent]:
    rr = instrument_kernel(Kernel(src, name), **kw)
    assert rr.unsupported == []
    return run_instrumented(harness, rr, gsize, lsize, scalars or {}, sizes)


def _range(e: AccessExtent) -> tuple[int, int]:
    return e.min_index, e.max_index


# -- pure rewriting ------------------------------------------------------------------------------


def test_rewritten_source_keeps_name_and_adds_the_record_parameter():
    src = "__kernel void k(__global float* a, int n) { a[get_global_id(0)] = n; }"
    rr = instrument_kernel(Kernel(src, "k"))
    assert rr.kernel.name == "k" and rr.ok and rr.accesses == 1
    params = kernel_signatures(rr.kernel.source)["k"]
    assert [p.name for p in params] == ["a", "n", REC_NAME]
    assert params[-1].dtype == "long"
    assert rr.slots["a"].slot == 0 and rr.slots["a"].elem_bytes == 4
    rec = rr.initial_record({"a": 400})
    assert rec.dtype == np.int64 and list(rec[:4]) == [2**63 - 1, -(2**63), 0, 400]


def test_other_kernels_and_helpers_in_the_file_stay_intact():
    src = """
float twice(__global const float* p, int i) { return 2.0f * p[i]; }
__kernel void other(__global const float* a, __global float* b) { b[0] = twice(a, 0); }
__kernel void k(__global const float* a, __global float* b) { int i = get_global_id(0); b[i] = twice(a, i); }
"""
    rr = instrument_kernel(Kernel(src, "k"))
    assert rr.helpers == ["twice"]
    out = rr.kernel.source
    assert "__kernel void other(__global const float* a, __global float* b) { b[0] = twice(a, 0); }" in out
    assert "float twice(__global const float* p, int i) { return 2.0f * p[i]; }" in out
    assert "__kc_h_twice(a, i, __kc_rec, 0, __kc_b0, __kc_l0)" in out


def test_no_such_kernel_and_parse_errors():
    with pytest.raises(RewriteError, match="no kernel"):
        instrument_kernel(Kernel("__kernel void a(__global int* x) { x[0] = 1; }", "b"))
    with pytest.raises(RewriteError):
        instrument_kernel(Kernel("__kernel void a(__global int* x) { x[0] = ; }", "a"))


@pytest.mark.parametrize("body,what", [
    ("__global float* p = (get_global_id(0) & 1) ? a : b; p[0] = 1.0f;", "several arguments"),
    ("__global float* ptrs[2] = {a, b}; ptrs[get_global_id(0) & 1][0] = 1.0f;", "aggregate"),
    ("__global float* p = (__global float*)((ulong)a + 4); p[0] = 1.0f;", "unknown origin"),
    ("__local float t[64]; event_t e = async_work_group_copy(t, a, 64, 0); wait_group_events(1, &e);",
     "asynchronous"),
    ("opaque(a);", "no body"),
])
def test_unsupported_constructs_are_reported(body, what):
    src = f"void opaque(__global float* q);\n__kernel void k(__global float* a, __global float* b) {{ {body} }}"
    rr = instrument_kernel(Kernel(src, "k"))
    assert not rr.ok
    assert any(what in u for u in rr.unsupported), rr.unsupported
    assert all(u.startswith("k:") for u in rr.unsupported)


def test_access_written_in_a_function_like_macro_is_reported():
    src = "#define AT(p, i) p[i]\n__kernel void k(__global float* a) { AT(a, get_global_id(0)) = 1.0f; }"
    rr = instrument_kernel(Kernel(src, "k"))
    assert any("macro 'AT'" in u for u in rr.unsupported)


def test_address_of_and_sizeof_are_not_accesses():
    src = """__kernel void k(__global float* a, __global float* b) {
  __global float* p = &a[8];
  b[0] = (float)sizeof(a[100]) + (float)(p - a);
}"""
    rr = instrument_kernel(Kernel(src, "k"))
    assert rr.ok and rr.accesses == 1


# -- on the device -------------------------------------------------------------------------------


def test_subscripts_and_scalar_bounds(harness):
    src = "__kernel void k(__global const float* a, __global float* b, int n) { int i = get_global_id(0); " \
          "if (i < n) b[2 * i + 1] = a[i] + a[i + 3]; }"
    ext = _run(harness, src, "k", {"a": 200, "b": 200}, {"n": 10})
    assert _range(ext["a"]) == (0, 12) and ext["a"].count == 20
    assert _range(ext["b"]) == (1, 19) and ext["b"].count == 10
    assert ext["b"].needed == 20 and not ext["b"].out_of_bounds


def test_pointer_arithmetic_and_increments(harness):
    src = """__kernel void k(__global float* p, __global float* q, __global float* r, int off) {
  int i = get_global_id(0);
  p += off;
  p[i] = 1.0f;
  *(q + 2 * i) = 2.0f;
  __global float* s = r;
  s = s + 5;
  *(s++) = 0.0f;
  *(s++) = (float)i;
}"""
    ext = _run(harness, src, "k", {"p": 500, "q": 500, "r": 500}, {"off": 100})
    assert _range(ext["p"]) == (100, 100 + N - 1)
    assert _range(ext["q"]) == (0, 2 * (N - 1))
    assert _range(ext["r"]) == (5, 6) and ext["r"].count == 2 * N


def test_local_alias_of_a_row(harness):
    src = """__kernel void rowsum(__global const float* A, __global float* s, int n) {
  int r = get_global_id(0);
  __global const float* row = A + r * n;
  float t = 0.0f;
  for (int j = 0; j < n; ++j) t += row[j];
  s[r] = t;
}"""
    ext = _run(harness, src, "rowsum", {"A": 4096, "s": N}, {"n": 8})
    assert _range(ext["A"]) == (0, 8 * N - 1) and ext["A"].count == 8 * N


def test_pointer_comparison_loop(harness):
    src = """__kernel void k(__global const int* a, __global int* out, int k) {
  int i = get_global_id(0);
  int t = 0;
  for (__global const int* q = a + i * k; q < a + (i + 1) * k; ++q) t += *q;
  out[i] = t;
}"""
    ext = _run(harness, src, "k", {"a": 1024, "out": N}, {"k": 4})
    assert _range(ext["a"]) == (0, 4 * N - 1)


def test_vload_vstore_count_scalar_elements(harness):
    src = """__kernel void k(__global const float* in, __global float* out, __global const half* h) {
  int i = get_global_id(0);
  float4 v = vload4(i, in);
  vstore4(v * 2.0f, i + 1, out);
  out[0] += vload_half(i, h);
}"""
    ext = _run(harness, src, "k", {"in": 1024, "out": 1024, "h": 1024})
    assert _range(ext["in"]) == (0, 4 * N - 1)
    assert _range(ext["out"]) == (0, 4 * (N + 1) - 1)
    assert _range(ext["h"]) == (0, N - 1)


def test_vector_arguments_count_vector_elements_and_casts_convert(harness):
    src = """__kernel void k(__global const float4* a, __global float4* b, __global float* c) {
  int i = get_global_id(0);
  b[i] = a[i] * 2.0f;
  ((__global float4*)c)[i] = a[i];
  b[i].y = ((__global const float*)a)[i];
}"""
    ext = _run(harness, src, "k", {"a": 256, "b": 256, "c": 1024})
    assert _range(ext["a"]) == (0, N - 1)           # float4 elements, even through the float* cast
    assert _range(ext["b"]) == (0, N - 1)
    assert _range(ext["c"]) == (0, 4 * N - 1)       # a float4 store covers 4 floats


def test_helper_functions_are_cloned_with_the_argument_slot(harness):
    src = """
float get(__global const float* p, int i, int stride);
__global float* at(__global float* base, int i) { return base + i; }
void put(__global float* p, int i, float v) { *at(p, i) = v; }
float get(__global const float* p, int i, int stride) { return p[i * stride]; }
__kernel void k(__global const float* in, __global float* out, int st) {
  int i = get_global_id(0);
  put(out, i + 1, get(in, i, st));
}"""
    rr = instrument_kernel(Kernel(src, "k"))
    assert rr.ok, rr.unsupported
    assert sorted(rr.helpers) == ["at", "get", "put"]
    ext = run_instrumented(harness, rr, (N,), LS, {"st": 3}, {"in": 1024, "out": 1024})
    assert _range(ext["in"]) == (0, 3 * (N - 1))
    assert _range(ext["out"]) == (1, N)


def test_atomics_histogram_records_the_bin_range(harness):
    src = """__kernel void hist(__global const uint* data, __global int* bins, __global int* total, uint nbins) {
  int i = get_global_id(0);
  uint b = data[i] % nbins;
  atomic_add(&bins[b], 1);
  atom_inc(total + 1);
}"""
    ext = _run(harness, src, "hist", {"data": N, "bins": 64, "total": 2}, {"nbins": 16})
    assert _range(ext["bins"]) == (0, 15) and ext["bins"].count == N
    assert _range(ext["total"]) == (1, 1)


def test_constant_arguments(harness):
    src = "__kernel void k(__constant float* w, __global float* o) { int i = get_global_id(0); o[i] = w[i % 5]; }"
    ext = _run(harness, src, "k", {"w": 16, "o": N})
    assert _range(ext["w"]) == (0, 4)


def test_out_of_range_accesses_are_recorded_not_performed(harness):
    # b is far too small: the plain kernel would write out of bounds; the instrumented one must
    # not (the harness canaries would say out_of_bounds) and must report the real extent
    src = "__kernel void k(__global const float* a, __global float* b) { int i = get_global_id(0); " \
          "b[i * 1000] = a[i - 5]; }"
    rr = instrument_kernel(Kernel(src, "k"))
    run = measure_instrumented(harness, rr, (N,), LS, {}, {"a": N, "b": 8})
    assert run.measurement.status == "ok", run.measurement.reason
    assert _range(run.extents["b"]) == (0, 1000 * (N - 1)) and run.extents["b"].out_of_bounds
    assert run.extents["a"].min_index == -5 and run.extents["a"].out_of_bounds


def test_untouched_argument(harness):
    src = "__kernel void k(__global float* a, __global float* unused) { a[get_global_id(0)] = 0.0f; }"
    ext = _run(harness, src, "k", {"a": N, "unused": 4})
    assert ext["unused"].count == 0 and ext["unused"].needed == 0


def test_two_dimensional_launch(harness):
    src = """__kernel void t(__global const float* in, __global float* out, int w) {
  int x = get_global_id(0), y = get_global_id(1);
  out[y * w + x] = in[x * w + y];
}"""
    ext = _run(harness, src, "t", {"in": 4096, "out": 4096}, {"w": 16}, gsize=(16, 8), lsize=(8, 8))
    assert _range(ext["out"]) == (0, 7 * 16 + 15)
    assert _range(ext["in"]) == (0, 15 * 16 + 7)


def test_32_bit_atomics_fallback(harness):
    src = "__kernel void k(__global float* a, int off) { a[get_global_id(0) + off] = 1.0f; }"
    rr = instrument_kernel(Kernel(src, "k"), int64_atomics=False)
    assert rr.rec_dtype == "int" and "cl_khr_int64" not in rr.kernel.source
    ext = run_instrumented(harness, rr, (N,), LS, {"off": 7}, {"a": 1024})
    assert _range(ext["a"]) == (7, N + 6)


def test_buffer_contents_match_a_plain_run(harness):
    # a scatter through random indices: the instrumented run sees the same indices as a plain
    # run of the kernel with the same sizes and seed, so its extent is the plain run's
    from kernelcast.instrument.runner import TimingPolicy

    from kernelcast.schema import ArgBinding, LaunchConfig

    src = "__kernel void sc(__global const int* idx, __global float* dst) { int i = get_global_id(0); " \
          "dst[idx[i]] = 1.0f; }"
    k = Kernel(src, "sc")
    cfg = LaunchConfig((N,), LS, [ArgBinding("idx", "buffer", "int", N), ArgBinding("dst", "buffer", "float", 4096)])
    plain = harness.run(k, cfg, TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1),
                        readback=["idx"])
    assert plain.status == "ok"
    ext = _run(harness, src, "sc", {"idx": N, "dst": 4096})
    assert _range(ext["dst"]) == (int(plain.readback["idx"].min()), int(plain.readback["idx"].max()))

"""instrument.activity: which work-items touch which arguments, and how many bytes, on the real device.

Known answers are hand-computed from the kernels: LLMPerf's Listing 1 (``summation(in, out, N,
k)``, work-item ``id`` reads ``in[id*k + i]`` for ``i < k`` while ``id*k + i < N`` and writes
``out[id]``) at 1024 work-items reads ``in`` in ``min(1024, ceil(N / k))`` work-items."""

from __future__ import annotations

import pytest
from kernelcast.instrument.activity import activity_rewrite, measure_activity
from kernelcast.instrument.rewrite import instrument_kernel

from kernelcast.schema import Kernel

LISTING1 = """__kernel void summation(__global float* in, __global float* out, int N, int k) {
  int id = get_global_id(0);
  float sum = 0.0f;
  for (int i = 0; i < k; i++) {
    int cId = id * k + i;
    if (cId < N) {
      sum += in[cId];
    }
  }
  out[id] = sum;
}"""

LEADER = """__kernel void leader(__global const float* in, __global float* out) {
  if (get_local_id(0) == 0) out[get_group_id(0)] = in[get_global_id(0)];
}"""


@pytest.fixture(scope="module")
def listing1():
    return activity_rewrite(instrument_kernel(Kernel(LISTING1, "summation", dims=1)))


@pytest.mark.parametrize(("n", "k", "frac", "nbytes"), [
    (1, 1, 1 / 1024, 4 + 4 / 1024),        # only work-item 0 reads in (one float); every one writes out
    (1024, 1, 1.0, 8.0),                    # full work: one read, one write each
    (1024, 4, 0.25, 8.0),                   # the bound stops 3/4 of the work-items: 256 x 4 reads
    (4096, 4, 1.0, 20.0),                   # N = k * gsize: four reads and one write each
    (256, 1, 0.25, 5.0),
])
def test_listing1_activity(harness, listing1, n, k, frac, nbytes):
    run, act = measure_activity(harness, listing1, (1024,), (64,), {"N": n, "k": k},
                                {"in": max(n, 1), "out": 1024})
    assert not any(e.out_of_bounds for e in run.extents.values())
    assert act.sampled == 1024 and act.stride == 1
    assert act.active_fraction == pytest.approx(frac)
    assert act.per_arg["out"] == 1.0
    assert act.bytes_per_item == pytest.approx(nbytes)


def test_sampled_work_items_see_a_power_of_two_pattern(harness):
    """2^20 work-items are tracked through an odd stride; one work-item in 256 is active."""
    ar = activity_rewrite(instrument_kernel(Kernel(LEADER, "leader", dims=1)))
    total = 1 << 20
    _, act = measure_activity(harness, ar, (total,), (256,), {}, {"in": total, "out": total // 256})
    assert act.stride % 2 == 1 and act.sampled <= 1 << 16
    assert act.active_fraction == pytest.approx(1 / 256, rel=0.1)
    assert act.bytes_per_item == pytest.approx(8 / 256, rel=0.1)


def test_out_of_range_accesses_are_recorded_not_performed(harness, listing1):
    run, act = measure_activity(harness, listing1, (1024,), (64,), {"N": 4096, "k": 4}, {"in": 16, "out": 1024})
    assert run.extents["in"].out_of_bounds and run.extents["in"].max_index == 4095
    assert act.active_fraction == 1.0          # the guard sent the reads to the pad; they still count


def test_32_bit_record_gives_the_same_answer(harness):
    """Devices without 64-bit atomics get an int record: same mask and byte counts."""
    ar = activity_rewrite(instrument_kernel(Kernel(LISTING1, "summation", dims=1), int64_atomics=False))
    _, act = measure_activity(harness, ar, (1024,), (64,), {"N": 1024, "k": 4}, {"in": 1024, "out": 1024})
    assert act.active_fraction == pytest.approx(0.25) and act.bytes_per_item == pytest.approx(8.0)


REDUCE = """__kernel void reduce(__global const float* in, __global float* partial, __local float* red) {
  int lid = get_local_id(0);
  red[lid] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) red[lid] += red[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) partial[get_group_id(0)] = red[0];
}"""

BROADCAST_GUARD = """__kernel void bguard(__global const int* len, __global float* in, __global float* out) {
  int n = len[0];
  int i = get_global_id(0);
  if (i >= n) return;
  out[i] = in[i] * 2.0f;
}"""


def test_a_reduction_is_active_where_one_item_per_group_writes(harness):
    """Every work-item loads and combines; one in 64 writes: active 1.0, all-args 1/64."""
    ar = activity_rewrite(instrument_kernel(Kernel(REDUCE, "reduce", dims=1)))
    assert ar.inputs == {"in"}
    _, act = measure_activity(harness, ar, (1024,), (64,), {}, {"in": 1024, "partial": 16},
                              local_sizes={"red": 64})
    assert act.active_fraction == 1.0
    assert act.all_args_fraction == pytest.approx(1 / 64)


@pytest.mark.parametrize(("n", "frac"), [(1024, 1.0), (256, 0.25), (1, 1 / 1024)])
def test_a_one_element_read_before_the_guard_does_not_make_items_active(harness, n, frac):
    """``len[0]``, read by every work-item before ``if (i >= n) return``, is not the work."""
    ar = activity_rewrite(instrument_kernel(Kernel(BROADCAST_GUARD, "bguard", dims=1)))
    assert ar.inputs == {"len", "in"}           # ``len`` declared const; ``in`` only read
    _, act = measure_activity(harness, ar, (1024,), (64,), {}, {"len": 1, "in": 1024, "out": 1024},
                              inits={"len": f"uniform:{n}:{n + 1}"})
    assert act.per_arg["len"] == 1.0
    assert act.active_fraction == pytest.approx(frac)


@pytest.mark.parametrize(("src", "name", "expect"), [
    (LISTING1, "summation", {"in"}),
    (REDUCE, "reduce", {"in"}),
    ("__kernel void k(__global int* a, __global int* b, __global int* c, __global int* d) {"
     " int i = get_global_id(0); b[i] += a[i]; atomic_inc(&c[a[i] & 3]); d[i]++; }", "k", {"a"}),
    ("__kernel void k(__global float4* a, __global float* b, __global float* c) {"
     " int i = get_global_id(0); vstore4(a[i], i, b); *c = 1.0f; }", "k", {"a"}),
    ("void h(__global float* p) { p[0] = 1.0f; }\n"
     "__kernel void k(__global float* a, __global float* b) { h(a); b[0] = a[1] == 2.0f; }", "k", set()),
    ("__kernel void k(__global float* a, __global float* b) { __global float* q = a + 4; q[0] = b[0]; }",
     "k", {"b"}),
])
def test_read_only_buffers(src, name, expect):
    from kernelcast.instrument.activity import read_only_buffers
    assert read_only_buffers(src, name, ["a", "b", "c", "d", "in", "out", "partial"]) == expect


COOP = """__kernel void coop(__global const float* in, __global const float* w, __global float* out,
                   __local float* lw, const int n, const int width) {
  int i = get_global_id(0);
  for (int k = get_local_id(0); k < width; k += get_local_size(0)) lw[k] = w[k];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (i < n - width + 1) {
    float acc = 0.0f;
    for (int k = 0; k < width; ++k) acc += in[i + k] * lw[k];
    out[i] = acc;
  }
}"""


@pytest.mark.parametrize(("width", "frac"), [(1024, 1 / 1024), (9, 1016 / 1024)])
def test_helping_with_a_cooperative_load_is_not_doing_the_work(harness, width, frac):
    """Every work-item copies part of ``w`` to local memory; only those past ``i < n - width + 1``
    read ``in``: the active share is theirs."""
    ar = activity_rewrite(instrument_kernel(Kernel(COOP, "coop", dims=1)))
    assert ar.inputs == {"in", "w"}
    _, act = measure_activity(harness, ar, (1024,), (1024,), {"n": 1024, "width": width},
                              {"in": 1024, "w": width, "out": 1024}, local_sizes={"lw": width})
    assert act.per_arg["w"] == pytest.approx(min(1.0, width / 1024))
    assert act.active_fraction == pytest.approx(frac)

"""instrument.counters: loop trips and branch outcomes counted by one launch on the real device.

Every expected figure is worked out by hand from the kernel and the data it is given (or, for
harness-drawn random buffers, from the same numpy draw the harness makes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernelcast.instrument.counters import (
    REC_NAME,
    SiteCounts,
    count_config,
    count_rewrite,
    measure_counts,
)
from kernelcast.instrument.rewrite import RewriteError
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig
from kernelcast.sites import site_symbol
from tests.kernels import CSR


def buf(name: str, n: int, dtype: str = "float", init: str = "array") -> ArgBinding:
    return ArgBinding(name, "buffer", dtype, count=n, init=init)


def scalar(name: str, value: object, dtype: str = "int") -> ArgBinding:
    return ArgBinding(name, "scalar", dtype, value=value)




def test_csr_row_loop_counts_the_row_lengths(harness):
    rows = 1000                               # gsize 1024: 24 work-items leave at the bound
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 40, rows)
    rowptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    nnz = int(rowptr[-1])
    cfg = LaunchConfig((1024,), (64,), [buf("rowptr", rows + 1, "int"), buf("col", nnz, "int"), buf("val", nnz),
                                        buf("x", rows), buf("y", rows, init="zeros"), scalar("rows", rows)])
    arrays = {"rowptr": rowptr, "col": rng.integers(0, rows, nnz).astype(np.int32),
              "val": np.ones(nnz, np.float32), "x": np.ones(rows, np.float32)}
    sc = measure_counts(harness, Kernel(CSR, "spmv", dims=1), cfg, arrays=arrays)
    assert sc.items == 1024
    assert sc.branches[site_symbol("if", 4, 3)] == (1024, 24)
    assert sc.loops[site_symbol("loop", 6, 3)] == (rows, nnz)
    assert sc.values()["trip_l6_c3"] == pytest.approx(nnz / rows)
    assert sc.values()["br_l4_c3"] == pytest.approx(24 / 1024)
    # the busiest work-item ran the longest row (its one entry)
    assert sc.values()["tpeak_l6_c3"] == lengths.max()


EARLY = """__kernel void early(__global const float* a, __global float* out, float t) {
  int i = get_global_id(0);
  if (a[i] <= t) return;
  out[i] = a[i] * 2.0f;
}"""


def test_early_return_share_on_the_harness_random_data(harness):
    """``a`` is drawn by the harness (init=random, seed 7): the then-fraction is the share of its
    values <= 0.3 in the same numpy draw, so the counting run saw the plain run's data."""
    n = 4096
    cfg = LaunchConfig((n,), (128,), [buf("a", n, init="random"), buf("out", n, init="random"),
                                      scalar("t", 0.3, "float")])
    sc = measure_counts(harness, Kernel(EARLY, "early", dims=1), cfg, policy=TimingPolicy(seed=7))
    a = np.random.default_rng(7).random(n, dtype=np.float32)          # the harness's first draw
    assert sc.branches["br_l3_c3"] == (n, int(np.sum(a <= np.float32(0.3))))
    assert 0.25 < sc.values()["br_l3_c3"] < 0.35


WHILE = """__kernel void halve(__global const uint* v, __global uint* steps) {
  int i = get_global_id(0);
  uint x = v[i];
  uint k = 0;
  while (x > 1u) {
    x >>= 1;
    k++;
  }
  steps[i] = k;
}"""


def test_while_loop_with_a_data_dependent_exit(harness):
    n = 512
    v = np.arange(1, n + 1, dtype=np.uint32)          # trips of v: floor(log2 v)
    cfg = LaunchConfig((n,), (64,), [buf("v", n, "uint"), buf("steps", n, "uint", init="zeros")])
    sc = measure_counts(harness, Kernel(WHILE, "halve", dims=1), cfg, arrays={"v": v})
    trips = sum(int(math.floor(math.log2(x))) for x in range(1, n + 1))
    assert sc.loops["trip_l5_c3"] == (n, trips)


HELPER = """int popc(uint x) {
  int c = 0;
  for (int b = 0; b < 32; ++b)
    if ((x >> b) & 1u) c++;
  return c;
}

int twice(uint x) {
  return popc(x) + popc(x ^ 0xffffffffu);
}

__kernel void bits(__global const uint* v, __global int* out) {
  int i = get_global_id(0);
  out[i] = twice(v[i]);
}

__kernel void other(__global const uint* v, __global int* out) {
  out[get_global_id(0)] = popc(v[get_global_id(0)]);
}"""


def test_loop_in_a_helper_called_through_another_helper(harness):
    """``popc`` runs twice per work-item through ``twice``: 64 loop trips, 32 bits set in all; the
    other kernel of the file keeps calling the original and still builds."""
    n = 256
    v = (np.arange(n, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)
    cfg = LaunchConfig((n,), (32,), [buf("v", n, "uint"), buf("out", n, "int", init="zeros")])
    k = Kernel(HELPER, "bits", dims=1)
    cr = count_rewrite(k)
    assert cr.helpers == ["popc", "twice"] and not cr.unsupported
    assert "out[get_global_id(0)] = popc(v[get_global_id(0)]);" in cr.kernel.source     # other: untouched
    sc = measure_counts(harness, k, cfg, arrays={"v": v}, rewrite=cr)
    assert sc.loops["trip_l3_c3"] == (2 * n, 64 * n)
    assert sc.branches["br_l4_c5"] == (64 * n, 32 * n)


NESTED = """__kernel void tri(__global float* out, int n) {
  int i = get_global_id(0);
  float s = 0.0f;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < a; ++b) {
      s += 1.0f;
    }
  }
  out[i] = s;
}"""


def test_nested_loops(harness):
    n, items = 12, 64
    cfg = LaunchConfig((items,), (16,), [buf("out", items, init="zeros"), scalar("n", n)])
    sc = measure_counts(harness, Kernel(NESTED, "tri", dims=1), cfg)
    assert sc.loops["trip_l4_c3"] == (items, items * n)
    assert sc.loops["trip_l5_c5"] == (items * n, items * n * (n - 1) // 2)
    assert sc.values()["trip_l5_c5"] == pytest.approx((n - 1) / 2)
    # every work-item runs both loops alike: the busiest is the mean
    assert sc.values()["tpeak_l4_c3"] == n and sc.values()["tpeak_l5_c5"] == (n - 1) / 2


CHUNKED = """__kernel void chunked(__global const float* a, __global float* out, int n, int chunk) {
  size_t first = get_global_id(0) * (size_t)chunk;
  float acc = 0.0f;
  for (size_t j = first; j < first + chunk && j < n; j++)
    acc += a[j];
  out[get_global_id(0)] = acc;
}"""


@pytest.mark.parametrize("int64", [True, False])
def test_the_busiest_work_item_of_an_uneven_loop(harness, int64):
    """chunk = n: work-item 0 runs all n trips and the others none. The mean says one trip per
    work-item; the peak says n."""
    n = 512
    cfg = LaunchConfig((n,), (64,), [buf("a", n, init="random"), buf("out", n, init="zeros"), scalar("n", n),
                                     scalar("chunk", n)])
    k = Kernel(CHUNKED, "chunked", dims=1)
    sc = measure_counts(harness, k, cfg, rewrite=count_rewrite(k, int64_atomics=int64))
    v = sc.values()
    assert sc.loops["trip_l4_c3"] == (n, n)
    assert v["trip_l4_c3"] == 1.0 and v["tpeak_l4_c3"] == n


UNBRACED = """__kernel void ub(__global const int* v, __global int* out, int n) {
  int i = get_global_id(0);
  int s = 0;
  if (v[i] > 2)
    for (int j = 0; j < n; ++j) s += j;
  if (v[i] & 1) if (v[i] > 4) s += 100; else s -= 1000;
  do s++; while (s < 0);
  while (s > 1000) s -= 7;
  for (;;) break;
  out[i] = s;
}"""


def _plain_and_counted(harness, kernel, cfg, arrays, out):
    pol = TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, group_us=0.0)
    plain = harness.run(kernel, cfg, pol, readback=[out], arrays=arrays)
    cr = count_rewrite(kernel)
    ccfg, carrays, _ = count_config(cr, cfg, arrays)
    counted = harness.run(cr.kernel, ccfg, pol, readback=[out, REC_NAME], arrays=carrays)
    assert plain.status == "ok" and counted.status == "ok", (plain.reason, counted.reason)
    return plain.readback[out], counted.readback[out], cr.decode(counted.readback[REC_NAME])


def test_unbraced_bodies_and_dangling_else_keep_their_meaning(harness):
    n, items = 5, 64
    v = np.arange(items, dtype=np.int32) % 8
    cfg = LaunchConfig((items,), (8,), [buf("v", items, "int"), buf("out", items, "int", init="zeros"),
                                        scalar("n", n)])
    plain, counted, sc = _plain_and_counted(harness, Kernel(UNBRACED, "ub", dims=1), cfg, {"v": v}, "out")
    assert np.array_equal(plain, counted)        # the braces changed nothing the kernel computes
    big = int(np.sum(v > 2))                     # 5 of every 8
    odd = int(np.sum(v & 1))                     # 4 of every 8: values 1, 3, 5, 7
    odd_big = int(np.sum((v & 1) & (v > 4)))     # 5, 7
    assert sc.branches["br_l4_c3"] == (items, big)
    assert sc.loops["trip_l5_c5"] == (big, big * n)
    assert sc.branches["br_l6_c3"] == (items, odd)
    assert sc.branches["br_l6_c17"] == (odd, odd_big)      # the else binds to the inner if
    assert sc.loops["trip_l7_c3"][0] == items
    assert sc.loops["trip_l9_c3"] == (items, items)        # for (;;) break: one trip


REDUCE = """__kernel void reduce(__global const float* in, __global float* out, __local float* tmp) {
  __local float scratch[256];
  int lid = get_local_id(0);
  tmp[lid] = in[get_global_id(0)];
  scratch[lid] = 1.0f;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
    if (lid < s) tmp[lid] += tmp[lid + s] * scratch[lid];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) out[get_group_id(0)] = tmp[0];
}"""


def test_local_memory_and_barriers(harness):
    wg, groups = 128, 8
    n = wg * groups
    cfg = LaunchConfig((n,), (wg,), [buf("in", n), buf("out", groups, init="zeros"),
                                     ArgBinding("tmp", "local", "float", count=wg)])
    plain, counted, sc = _plain_and_counted(harness, Kernel(REDUCE, "reduce", dims=1), cfg,
                                            {"in": np.ones(n, np.float32)}, "out")
    assert np.array_equal(plain, counted) and counted[0] == wg
    steps = int(math.log2(wg))                              # 7 halvings
    assert sc.loops["trip_l7_c3"] == (n, n * steps)
    assert sc.branches["br_l8_c5"] == (n * steps, groups * (wg - 1))     # 64 + 32 + ... + 1 per group
    assert sc.branches["br_l11_c3"] == (n, groups)


def test_kernel_without_sites(harness):
    src = ("__kernel void add(__global const float* a, __global float* b) "
           "{ b[get_global_id(0)] += a[get_global_id(0)]; }")
    cfg = LaunchConfig((300,), None, [buf("a", 300, init="random"), buf("b", 300, init="random")])
    sc = measure_counts(harness, Kernel(src, "add", dims=1), cfg)
    assert sc == SiteCounts(300, {}, {}) and sc.values() == {}


LOOPY = """__kernel void loopy(__global int* out) {
  int i = get_global_id(0);
  int s = 0;
  for (int j = 0; j < (i & 7); ++j) s++;
  out[i] = s;
}"""


def test_sampled_work_items_and_the_32_bit_record(harness):
    """2^20 work-items, at most 2^14 flushed through an odd stride: i & 7 stays uniform over the
    sample, so the mean trip count is 3.5; the 32-bit record gives the same counts."""
    total = 1 << 20
    cfg = LaunchConfig((total,), (256,), [buf("out", total, "int", init="zeros")])
    k = Kernel(LOOPY, "loopy", dims=1)
    sc = measure_counts(harness, k, cfg, max_tracked=1 << 14)
    stride = 65                                    # smallest odd >= 2^20 / 2^14 = 64
    assert sc.items == len(range(0, total, stride)) <= 1 << 14
    expected = sum(i & 7 for i in range(0, total, stride))
    assert sc.loops["trip_l4_c3"] == (sc.items, expected)
    assert sc.values()["trip_l4_c3"] == pytest.approx(3.5, abs=0.01)
    assert sc.values()["tpeak_l4_c3"] == 7
    sc32 = measure_counts(harness, k, cfg, max_tracked=1 << 14, rewrite=count_rewrite(k, int64_atomics=False))
    assert sc32 == sc


def test_counts_are_deterministic(harness):
    n = 2048
    cfg = LaunchConfig((n,), (64,), [buf("a", n, init="random"), buf("out", n, init="random"),
                                     scalar("t", 0.5, "float")])
    k = Kernel(EARLY, "early", dims=1)
    assert measure_counts(harness, k, cfg) == measure_counts(harness, k, cfg)


# -- rewriting only (no device) ------------------------------------------------------------------

MACROS = """#define LOOP(i, n) for (int i = 0; i < (n); ++i)
#define CHECK(c) if (c) { return; }
__kernel void m(__global float* a, int n) {
  LOOP(j, n) a[j] += 1.0f;
  for (int q = 0; q < n; ++q) a[q] *= 2.0f;
}"""


def test_sites_in_macros_are_listed_not_counted():
    cr = count_rewrite(Kernel(MACROS, "m"))
    assert [s.symbol for s in cr.sites] == ["trip_l5_c3"]
    assert len(cr.unsupported) == 1 and "macro" in cr.unsupported[0] and ":4:" in cr.unsupported[0]


def test_a_return_written_by_a_macro_is_refused():
    src = MACROS.replace("  LOOP(j, n)", "  CHECK(n < 0)\n  LOOP(j, n)")
    with pytest.raises(RewriteError, match="macro"):
        count_rewrite(Kernel(src, "m"))


def test_recursive_helpers_and_the_site_cap():
    src = """int f(int x) { if (x <= 0) return 0; return f(x - 1) + 1; }
__kernel void r(__global int* o, int n) {
  for (int i = 0; i < n; ++i) o[i] = f(i);
  if (n > 3) o[0] = 1;
  while (n > 10) n--;
}"""
    cr = count_rewrite(Kernel(src, "r"), max_sites=2)
    assert [s.symbol for s in cr.sites] == ["trip_l3_c3", "br_l4_c3"]
    assert any("recursive" in u for u in cr.unsupported)
    assert any("more than 2 sites" in u and ":5:" in u for u in cr.unsupported)
    assert "__kc_c_f" not in cr.kernel.source


def test_bad_input_is_one_line():
    with pytest.raises(RewriteError, match="no kernel"):
        count_rewrite(Kernel("__kernel void a(__global int* x) { x[0] = 1; }", "b"))
    with pytest.raises(RewriteError):
        count_rewrite(Kernel("__kernel void a(__global int* x) { x[0] = ; }", "a"))
    with pytest.raises(ValueError):
        site_symbol("switch", 1, 1)


def test_site_counts_round_trip():
    sc = SiteCounts(10, {"trip_l1_c1": (4, 10), "trip_l2_c1": (0, 0)}, {"br_l3_c1": (10, 3)})
    assert SiteCounts.from_dict(sc.to_dict()) == sc
    assert sc.values() == {"trip_l1_c1": 2.5, "trip_l2_c1": 0.0, "br_l3_c1": 0.3}
    # with a peak (rounded down to 1/16 on the device, never reported below the mean)
    sc.peaks = {"trip_l1_c1": 6.0, "trip_l2_c1": 0.0}
    assert SiteCounts.from_dict(sc.to_dict()) == sc
    assert sc.values()["tpeak_l1_c1"] == 6.0 and sc.values()["tpeak_l2_c1"] == 0.0
    sc.peaks = {"trip_l1_c1": 2.4375}
    assert sc.values()["tpeak_l1_c1"] == 2.5
    # a record of before the peaks (no "peaks") reads as one without them
    d = sc.to_dict()
    del d["peaks"]
    assert SiteCounts.from_dict(d).peaks == {} and "tpeak_l1_c1" not in SiteCounts.from_dict(d).values()


PRAGMA = """__kernel void unrolled(__global int* out, int n) {
  int s = 0;
  if (n > 0)
    #pragma unroll
    for (int t = 0; t < 4; t++) s += t;
  #pragma unroll 2
  // a comment between the pragma and its loop

  for (int t = 0; t < n; t++) s += t;
  out[get_global_id(0)] = s;
}"""


def test_pragma_unroll_stays_attached_to_its_loop(harness):
    cfg = LaunchConfig((32,), (8,), [buf("out", 32, "int", init="zeros"), scalar("n", 6)])
    plain, counted, sc = _plain_and_counted(harness, Kernel(PRAGMA, "unrolled", dims=1), cfg, {}, "out")
    assert np.array_equal(plain, counted) and counted[0] == 6 + 15
    assert sc.branches["br_l3_c3"] == (32, 32)
    assert sc.loops["trip_l5_c5"] == (32, 4 * 32)
    assert sc.loops["trip_l9_c3"] == (32, 6 * 32)

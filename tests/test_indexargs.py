"""Index-aware and predicate-aware inputs (datagen.indexargs): one kernel per rule of
docs/argument-selection.md. Each is found by the source analysis, and on PoCL each fails the
validity checks (or the instrumented bounds check) under simple selection and passes them with the
rule applied."""

from __future__ import annotations

import pytest
from kernelcast.datagen.args import simple_args
from kernelcast.datagen.indexargs import analyse_uses, index_args, index_selector
from kernelcast.datagen.validity import check_validity
from kernelcast.instrument.activity import activity_of_args, activity_rewrite
from kernelcast.instrument.backends.base import init_contents, parse_ranged_init
from kernelcast.instrument.rewrite import instrument_kernel

from kernelcast.clang import kernel_signatures
from kernelcast.cltypes import parse_type
from kernelcast.schema import Kernel, LaunchConfig

#: rule -> (kernel source, the label analyse_uses gives it)
RULES = {
    "R1": ("__kernel void ia_gather(__global const int* idx, __global const float* src, __global float* dst) {\n"
           "  int i = get_global_id(0);\n  dst[i] = 2.0f * src[idx[i]];\n}\n", "R1 idx->src"),
    "R2": ("__kernel void ia_csr(__global const int* rp, __global const int* col, __global const float* val,\n"
           "                     __global const float* x, __global float* y) {\n"
           "  int r = get_global_id(0);\n  float acc = 0.0f;\n  int end = rp[r + 1];\n"
           "  for (int j = rp[r]; j < end; ++j) acc += val[j] * x[col[j]];\n  y[r] = acc;\n}\n", "R2 rp"),
    "R3": ("__kernel void ia_threshold(__global const float* in, __global float* out, const float t) {\n"
           "  int i = get_global_id(0);\n  out[i] = in[i] >= t ? in[i] : -1.0f;\n}\n", "R3 t~in"),
    "R4": ("__kernel void ia_clamp(__global const int* in, __global int* out, const int lo, const int hi) {\n"
           "  int i = get_global_id(0);\n  out[i] = clamp(in[i], lo, hi);\n}\n", "R4 hi=hi(in)"),
    "R5": ("__kernel void ia_keep_mod(__global const int* in, __global int* out, const int m) {\n"
           "  int i = get_global_id(0);\n  int v = in[i];\n  if (v % m == 0) out[i] = v;\n}\n", "R5 m%in"),
    "R6": ("__kernel void ia_sign(__global const float* in, __global uint* flags) {\n"
           "  int i = get_global_id(0);\n  flags[i] = in[i] > 0.0f ? 1u : 0u;\n}\n", "R6 in~0"),
    "R7": ("__kernel void ia_append(__global const float* in, __global float* out, __global int* count) {\n"
           "  int i = get_global_id(0);\n  int s = atomic_inc(count);\n  out[s] = in[i];\n}\n", "R7 count"),
    "R8": ("__kernel void ia_collatz(__global const uint* start, __global uint* steps, const uint cap) {\n"
           "  int i = get_global_id(0);\n  ulong x = start[i] + 1;\n  uint s = 0;\n"
           "  while (x != 1 && s < cap) { x = (x & 1) ? 3 * x + 1 : x >> 1; ++s; }\n  steps[i] = s;\n}\n", "R8 cap"),
    "R9": ("__kernel void ia_digit(__global const uint* keys, __global uint* digit, const int shift) {\n"
           "  int i = get_global_id(0);\n  digit[i] = (keys[i] >> shift) & 0xFu;\n}\n", "R9 shift"),
    "R13": ("__kernel void ia_unvisited(__global const int* mark, __global const float* in, __global float* out) {\n"
            "  int i = get_global_id(0);\n  if (mark[i] == -1) out[i] = 2.0f * in[i];\n}\n", "R13 mark==-1"),
}
GSIZE, LSIZE = (64,), (16,)


def _kernel(src: str) -> tuple[Kernel, list]:
    name = src.split("void ", 1)[1].split("(", 1)[0]
    k = Kernel(source=src, name=name, dims=1, origin=f"test/{name}")
    return k, kernel_signatures(k.source, k.build_options)[name]


#: the launch each rule's kernel is checked at (datagen's validity launch is this small on a CPU
#: device: two warp-sized work-groups per compute unit)
SIZES = {"R8": ((16,), (8,)), "R9": ((16,), (8,))}


def _outcome(harness, k: Kernel, args, gsize=GSIZE, lsize=LSIZE) -> str:
    """out_of_bounds when the instrumented run touches a buffer past its size, else the validity status."""
    bad, _ = activity_of_args(harness, activity_rewrite(instrument_kernel(k)), gsize, lsize, args)
    if any("touches [" in b for b in bad):
        return "out_of_bounds"
    return check_validity(harness, k, LaunchConfig(gsize, lsize, args)).status


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_analysis_finds_each_rule(rule: str) -> None:
    src, label = RULES[rule]
    k, params = _kernel(src)
    assert label in analyse_uses(k.source, k.name, params).rules()


def test_no_rule_fires_on_an_elementwise_kernel() -> None:
    k, params = _kernel("__kernel void ia_saxpy(__global const float* x, __global float* y, float a, int n) {\n"
                        "  int i = get_global_id(0);\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n")
    assert analyse_uses(k.source, k.name, params).empty


def test_the_values_each_rule_gives() -> None:
    def args(rule: str) -> dict:
        k, params = _kernel(RULES[rule][0])
        out, _ = index_args(analyse_uses(k.source, k.name, params), params, simple_args(params, GSIZE, LSIZE))
        return {a.name: a for a in out}

    assert args("R1")["idx"].init == "uniform:0:64"
    r2 = args("R2")      # 4 entries per row: the column and value arrays grow to 4 x 64
    assert r2["rp"].init == "sorted:0:256" and r2["rp"].count == 65
    assert r2["col"].init == "uniform:0:64" and r2["col"].count == r2["val"].count == 256
    assert args("R3")["t"].value == 0.5                       # the middle of [0, 1)
    assert (args("R4")["lo"].value, args("R4")["hi"].value) == (256, 768)   # quarters of [0, 1024)
    assert args("R5")["m"].value == 4
    assert args("R6")["in"].init == "uniform:-0.5:0.5"
    r7 = args("R7")["count"]
    assert r7.init == "zeros" and r7.reset_each_run
    assert args("R8")["cap"].value == 256
    assert args("R9")["shift"].value == 4


def test_two_thresholds_of_one_buffer_split_its_range() -> None:
    k, params = _kernel("__kernel void ia_band(__global const float* v, __global int* hits, const float lo,\n"
                        "                      const float hi) {\n  int i = get_global_id(0);\n"
                        "  if (v[i] < lo || v[i] >= hi) return;\n  hits[i] = 1;\n}\n")
    out, _ = index_args(analyse_uses(k.source, k.name, params), params, simple_args(params, GSIZE, LSIZE))
    got = {a.name: a.value for a in out if a.kind == "scalar"}
    assert got == {"lo": pytest.approx(1 / 3), "hi": pytest.approx(2 / 3)}


def test_ranged_inits_draw_within_their_range() -> None:
    import numpy as np

    assert parse_ranged_init("uniform:2:5") == ("uniform", 2.0, 5.0) and parse_ranged_init("random") is None
    a = init_contents(parse_type("int"), 1000, "uniform:2:5", np.random.default_rng(1))
    assert a.min() == 2 and a.max() == 4
    s = init_contents(parse_type("int"), 1000, "sorted:0:100", np.random.default_rng(1))
    assert (np.diff(s) >= 0).all() and s.max() < 100
    rp = init_contents(parse_type("int"), 65, "sorted:0:256", np.random.default_rng(1))
    assert (np.diff(rp) > 0).all() and rp.min() >= 0 and rp.max() < 256     # room: no empty row
    f = init_contents(parse_type("float"), 1000, "uniform:-0.5:0.5", np.random.default_rng(1))
    assert f.min() >= -0.5 and f.max() < 0.5 and (f < 0).any() and (f > 0).any()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_simple_selection_fails_and_the_rule_passes(harness, rule: str) -> None:
    k, params = _kernel(RULES[rule][0])
    gsize, lsize = SIZES.get(rule, (GSIZE, LSIZE))
    assert _outcome(harness, k, simple_args(params, gsize, lsize), gsize, lsize) != "ok"
    select = index_selector(simple_args, analyse_uses(k.source, k.name, params))
    assert _outcome(harness, k, select(params, gsize, lsize), gsize, lsize) == "ok"
    assert select.last_rules    # type: ignore[attr-defined]


def test_a_kernel_that_reads_no_buffer_is_not_input_insensitive(harness) -> None:
    """A generator over scalars (an escape-time fractal) writes the same image for any buffer
    contents: validity does not call it input-insensitive; one that reads its input and ignores it
    still is."""
    gen, gp = _kernel("__kernel void ia_escape(__global int* it, const float step, const int cap) {\n"
                      "  int i = get_global_id(0);\n  float c = i * step, z = 0.0f;\n  int n = 0;\n"
                      "  while (n < cap && z * z <= 4.0f) { z = z * z + c; ++n; }\n  it[i] = n;\n}\n")
    assert check_validity(harness, gen, LaunchConfig(GSIZE, LSIZE, simple_args(gp, GSIZE, LSIZE))).status == "ok"
    const, cp = _kernel("__kernel void ia_const(__global const float* in, __global float* out) {\n"
                        "  int i = get_global_id(0);\n  out[i] = in[0] * 0.0f + 1.0f;\n}\n")
    v = check_validity(harness, const, LaunchConfig(GSIZE, LSIZE, simple_args(cp, GSIZE, LSIZE)))
    assert v.status == "invalid_output" and "input-insensitive" in v.reason


#: rules that serve kernels simple selection leaves mostly idle (it passes validity, but few
#: work-items do work): rule -> (kernel source, label)
WORK_RULES = {
    "R10": ("__kernel void ia_chunks(__global const float* in, __global float* sums, const int chunk,\n"
            "                        const int n) {\n  int g = get_global_id(0);\n  int start = g * chunk;\n"
            "  if (start >= n) return;\n  float s = 0.0f;\n"
            "  for (int j = start; j < min(start + chunk, n); ++j) s += in[j];\n  sums[g] = s;\n}\n",
            "R10 chunk*<n"),
    "R11": ("__kernel void ia_window(__global const float* in, __global const float* w, __global float* out,\n"
            "                        const int n, const int width) {\n  int i = get_global_id(0);\n"
            "  if (i < n - width + 1) {\n    float acc = 0.0f;\n"
            "    for (int k = 0; k < width; ++k) acc += in[i + k] * w[k];\n    out[i] = acc;\n  }\n}\n",
            "R11 n-width"),
}


def test_a_window_added_to_the_global_id() -> None:
    """``if (i + w <= n)`` (a moving average): R11 with the bound ``n``."""
    k, params = _kernel("__kernel void ia_moving(__global const float* in, __global float* out, const int w,\n"
                        "                        const int n) {\n  int i = get_global_id(0);\n  if (i + w <= n) {\n"
                        "    float s = 0.0f;\n    for (int j = 0; j < w; ++j) s += in[i + j];\n"
                        "    out[i] = s / (float)w;\n  }\n}\n")
    u = analyse_uses(k.source, k.name, params)
    assert u.windows == {"w": "n"}
    out, _ = index_args(u, params, simple_args(params, GSIZE, LSIZE))
    got = {a.name: a for a in out}
    assert (got["w"].value, got["n"].value, got["in"].count) == (8, 71, 71)


@pytest.mark.parametrize("rule", sorted(WORK_RULES))
def test_the_analysis_finds_each_work_rule(rule: str) -> None:
    src, label = WORK_RULES[rule]
    k, params = _kernel(src)
    u = analyse_uses(k.source, k.name, params)
    assert label in u.rules() and u.work_rules


def test_the_values_the_work_rules_give() -> None:
    def args(rule: str) -> dict:
        k, params = _kernel(WORK_RULES[rule][0])
        out, _ = index_args(analyse_uses(k.source, k.name, params), params, simple_args(params, GSIZE, LSIZE))
        return {a.name: a for a in out}

    r10 = args("R10")
    assert (r10["chunk"].value, r10["n"].value) == (4, 256) and r10["in"].count == 256
    r11 = args("R11")
    assert (r11["width"].value, r11["n"].value) == (8, 71) and r11["in"].count == 71


def test_no_work_rule_fires_on_row_major_indexing() -> None:
    """``out[y * width + x]`` with ``x < width``: the width is a row length, not a chunk."""
    k, params = _kernel("__kernel void ia_rows(__global const float* in, __global float* out, const int width,\n"
                        "                      const int height) {\n  int x = get_global_id(0);\n"
                        "  int y = get_global_id(1);\n  if (x < width && y < height)\n"
                        "    out[y * width + x] = in[y * width + x] * 2.0f;\n}\n")
    assert not analyse_uses(k.source, k.name, params).work_rules


@pytest.mark.parametrize("rule", sorted(WORK_RULES))
def test_simple_selection_leaves_items_idle_and_the_work_rule_does_not(harness, rule: str) -> None:
    """Under simple selection (every scalar = gsize) one work-item of 64 does the work; with the
    rule every one does, and the kernel passes validity."""
    k, params = _kernel(WORK_RULES[rule][0])
    ar = activity_rewrite(instrument_kernel(k))
    _, before = activity_of_args(harness, ar, GSIZE, LSIZE, simple_args(params, GSIZE, LSIZE))
    assert before.active_fraction == pytest.approx(1 / 64)
    select = index_selector(simple_args, analyse_uses(k.source, k.name, params))
    args = select(params, GSIZE, LSIZE)
    bad, after = activity_of_args(harness, ar, GSIZE, LSIZE, args)
    assert not bad and after.active_fraction == 1.0
    assert check_validity(harness, k, LaunchConfig(GSIZE, LSIZE, args)).status == "ok"


def test_row_pointers_leave_no_row_empty(harness) -> None:
    """R2's row pointer is strictly increasing within the grown column arrays: every row has an
    entry, so every work-item reads ``col`` and ``val`` (active 1.0)."""
    k, params = _kernel(RULES["R2"][0])
    select = index_selector(simple_args, analyse_uses(k.source, k.name, params))
    bad, act = activity_of_args(harness, activity_rewrite(instrument_kernel(k)), GSIZE, LSIZE,
                                select(params, GSIZE, LSIZE))
    assert not bad and act.active_fraction == 1.0


def test_a_scalar_bounding_the_global_id_keeps_the_problem_size() -> None:
    """``count`` guards the global id and divides loaded data: R5 would leave 4 work-items."""
    k, params = _kernel("__kernel void ia_guarded_mod(__global const uint* idx, __global const float* in,\n"
                        "                             __global float* out, const int count) {\n"
                        "  int tid = get_global_id(0);\n  if (tid >= count) return;\n"
                        "  out[tid] = in[idx[tid] % count];\n}\n")
    u = analyse_uses(k.source, k.name, params)
    assert "count" in u.gid_bounds and not u.moduli
    out, _ = index_args(u, params, simple_args(params, GSIZE, LSIZE))
    assert {a.name: a.value for a in out}["count"] == 64


def test_a_chunk_through_a_cast_and_a_loop_variable() -> None:
    """``first = gid * (size_t)k`` bounded through the loop variable ``j < count``: R10."""
    k, params = _kernel("__kernel void ia_chunk_loop(__global const int* in, __global int* out, const int count,\n"
                        "                            const int k) {\n"
                        "  const size_t first = get_global_id(0) * (size_t)k;\n"
                        "  int acc = 0;\n  for (size_t j = first; j < first + k && j < count; j++) acc += in[j];\n"
                        "  out[get_global_id(0)] = acc;\n}\n")
    u = analyse_uses(k.source, k.name, params)
    assert u.chunks == {"k": {"count"}}


#: R12's kernel: each work-item takes the pair starting at ``2 * gid + phase`` (an odd-even
#: transposition step)
R12_KERNEL = ("__kernel void ia_pairs(__global const float* in, __global float* out, const int phase,\n"
              "                       const int n) {\n  int i = 2 * get_global_id(0) + (phase & 1);\n"
              "  if (i + 1 < n) {\n    float a = in[i], b = in[i + 1];\n"
              "    out[i] = fmin(a, b);\n    out[i + 1] = fmax(a, b);\n  }\n}\n")


def test_a_literal_stride_of_the_global_id_scales_its_bound() -> None:
    """``i = 2 * gid + phase`` bounded by ``i + 1 < n``: R12 doubles ``n`` and every buffer."""
    k, params = _kernel(R12_KERNEL)
    u = analyse_uses(k.source, k.name, params)
    assert u.strides == {"n": 2} and u.work_rules and "R12 n*2" in u.rules()
    out, applied = index_args(u, params, simple_args(params, GSIZE, LSIZE))
    got = {a.name: a for a in out}
    assert (got["n"].value, got["in"].count, got["out"].count) == (128, 128, 128)
    assert got["phase"].value == 64 and "R12 n=128" in applied


def test_no_stride_rule_on_a_scaled_row_index() -> None:
    """``out[2 * x]`` bounded by ``x < width``: the bound meets the id itself, not the product."""
    k, params = _kernel("__kernel void ia_spread(__global const float* in, __global float* out,\n"
                        "                        const int width) {\n  int x = get_global_id(0);\n"
                        "  if (x < width) out[2 * x] = in[x];\n}\n")
    assert not analyse_uses(k.source, k.name, params).strides


def test_simple_selection_leaves_half_the_pairs_idle_and_r12_does_not(harness) -> None:
    """Under simple selection (``n = gsize``) the work-items past ``gsize / 2`` find no pair
    (active 0.5); with R12 every one has its pair, and the kernel passes validity."""
    k, params = _kernel(R12_KERNEL)
    ar = activity_rewrite(instrument_kernel(k))
    _, before = activity_of_args(harness, ar, GSIZE, LSIZE, simple_args(params, GSIZE, LSIZE))
    assert before.active_fraction == pytest.approx(0.5)
    args = index_selector(simple_args, analyse_uses(k.source, k.name, params))(params, GSIZE, LSIZE)
    bad, after = activity_of_args(harness, ar, GSIZE, LSIZE, args)
    assert not bad and after.active_fraction == 1.0
    assert check_validity(harness, k, LaunchConfig(GSIZE, LSIZE, args)).status == "ok"


def test_equality_with_a_scalar_and_a_compare_exchange() -> None:
    """R13: ``level[v] != cur`` and ``atomic_cmpxchg(&owner[u], -1, v)``: the data hold 4 values
    around the tested one and R3 puts the scalar inside them; a loop's test is not a predicate."""
    k, params = _kernel("__kernel void ia_frontier(__global const int* level, __global int* owner,\n"
                        "                          __global const int* nbr, const int cur) {\n"
                        "  int v = get_global_id(0);\n  if (level[v] != cur) return;\n"
                        "  int u = nbr[v];\n  atomic_cmpxchg(&owner[u], -1, v);\n}\n")
    u = analyse_uses(k.source, k.name, params)
    assert u.equalities == {"level": 0.0, "owner": -1.0}
    got = {a.name: a for a in index_args(u, params, simple_args(params, GSIZE, LSIZE))[0]}
    assert got["level"].init == "uniform:-1:3" and got["cur"].value == 1
    assert got["owner"].init == "uniform:-2:2"
    loop, lp = _kernel("__kernel void ia_steps(__global const int* start, __global int* steps) {\n"
                       "  int i = get_global_id(0);\n  int x = start[i];\n  int s = 0;\n"
                       "  while (x != 1) { x = (x & 1) ? 3 * x + 1 : x / 2; ++s; }\n  steps[i] = s;\n}\n")
    assert not analyse_uses(loop.source, loop.name, lp).equalities

"""Source (libclang) static features on hand-written kernels with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernelcast.models.static.features import SourceFeatures
from kernelcast.models.static.source import analyze_source

from kernelcast.clang import ParseError
from kernelcast.schema import Kernel


def feats(src: str, name: str, build_options: str = "") -> SourceFeatures:
    return analyze_source(Kernel(source=src, name=name, build_options=build_options))


def accesses(f: SourceFeatures, arg: str, kind: str | None = None, space: str | None = None):
    return [a for a in f.accesses if a.arg == arg and (kind is None or a.kind == kind)
            and (space is None or a.space == space)]


ENV = {"gsize0": 1024, "lsize0": 128}

VADD = """
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, const int n) {
    int i = get_global_id(0);
    c[i] = a[i] + b[i];
}
"""


def test_vector_add():
    f = feats(VADD, "vadd")
    assert f.dims == 1
    assert f.n_args == {"buffer": 3, "constant": 0, "local": 0, "scalar": 1}
    loads = [a for a in f.accesses if a.kind == "load"]
    stores = [a for a in f.accesses if a.kind == "store"]
    assert sorted(a.arg for a in loads) == ["a", "b"] and [a.arg for a in stores] == ["c"]
    for a in f.accesses:
        assert a.space == "global" and a.elem_bytes == 4 and a.stride0 == "1" and a.affine and not a.indirect
        assert a.count == "1"
    assert f.ops["fp32_add"] == "1"
    v = f.evaluate(ENV)
    assert v["global_loads"] == 2 and v["global_stores"] == 1
    assert v["global_load_bytes"] == 8 and v["global_store_bytes"] == 4
    assert v["fp32_add"] == 1 and v["fp32_mul"] == 0
    assert v["eta_coal"] == pytest.approx(1.0) and v["eta_bytes"] == pytest.approx(1.0)
    assert v["n_sync"] == 0 and v["branches_divergent"] == 0


def test_strided_access_symbolic_stride():
    src = """
    __kernel void strided(__global const float *a, __global float *b, const int stride) {
        int gid = get_global_id(0);
        b[gid] = a[gid * stride];
    }"""
    f = feats(src, "strided")
    (ld,) = accesses(f, "a", "load")
    assert ld.stride0 == "stride" and ld.coeffs == {"gid0": "stride"}
    e1 = f.evaluate({**ENV, "stride": 1})
    e32 = f.evaluate({**ENV, "stride": 32})
    assert e1["eta_coal"] == pytest.approx(1.0)
    # load: 4 B of every 32 B sector (1/8); store still coalesced -> average (1/8 + 1) / 2
    assert e32["eta_coal"] == pytest.approx((0.125 + 1.0) / 2)
    assert e32["global_fetched_bytes"] == pytest.approx(4 / 0.125 + 4)
    e2 = f.evaluate({**ENV, "stride": 2})
    assert e2["eta_coal"] == pytest.approx((0.5 + 1.0) / 2)


def test_loop_trip_symbolic():
    src = """
    __kernel void rowsum(__global const float *in, __global float *out, const int k) {
        int gid = get_global_id(0);
        float acc = 0.0f;
        for (int j = 0; j < k; j++)
            acc += in[gid * k + j];
        out[gid] = acc;
    }"""
    f = feats(src, "rowsum")
    (ld,) = accesses(f, "in", "load")
    assert ld.count == "max(0, k)"
    assert ld.stride0 == "k"          # each work-item walks its own row
    (loop,) = f.loops
    assert loop.trip_kind == "affine" and loop.var == "j" and loop.trip == "max(0, k)" and not loop.data_dependent
    for k in (1, 7, 100):
        assert f.evaluate({**ENV, "k": k})["global_loads"] == k
    assert f.evaluate({**ENV, "k": 16})["fp32_add"] == 16
    # loop condition is tested k+1 times
    assert f.evaluate({**ENV, "k": 16})["branch"] == 17


@pytest.mark.parametrize("loop, from_zero", [
    ("for (int k = 0; k < n; k++)", True),
    ("for (int k = 0; k != n; ++k)", True),
    ("for (uint k = 0; k <= n - 1; k += 1)", True),
    ("int k = 0; while (k < n) { k++;", True),
    ("for (int k = n - 1; k >= 0; k--)", False),
    ("for (int k = 1; k <= n; k++)", False),
    ("for (int k = 0; k < 2 * n; k += 2)", False),
    ("for (int k = 0; k < n && k < 64; k++)", False),
])
def test_loop_counting_from_zero_by_one(loop, from_zero):
    """``from_zero``: the loop's condition is one bound on a counter from 0 by 1 (the form PoCL
    puts an implicit barrier into, models.analytical._implicit_barrier_blocker)."""
    body = "{ acc += in[gid] * (float)k; }" + (" }" if loop.startswith("int k") else "")
    src = f"""
    __kernel void k1(__global const float *in, __global float *out, const int n) {{
        int gid = get_global_id(0);
        float acc = 0.0f;
        {loop} {body}
        out[gid] = acc;
    }}"""
    (lp,) = feats(src, "k1").loops
    assert lp.from_zero is from_zero


def test_loop_stepped_inside_an_assignment():
    """``k = j++`` (a polygon's edge loop: ``k`` trails ``j``) steps ``j``: the trip count is exact."""
    src = """
    #define VERTICES 600
    __kernel void edges(__global const float2 *v, __global float *out) {
        int gid = get_global_id(0);
        float s = 0.0f;
        int k = VERTICES - 1;
        for (int j = 0; j < VERTICES; k = j++)
            s += v[j].x * v[k].y;
        out[gid] = s;
    }"""
    f = feats(src, "edges")
    (lp,) = f.loops
    assert (lp.var, lp.trip_kind, lp.assumed) == ("j", "affine", "")
    assert f.evaluate(ENV)["global_loads"] == 2 * 600


def test_nested_loops_multiply():
    src = """
    #define REPS 3
    __kernel void nest(__global float *a, const int n, const int m) {
        int gid = get_global_id(0);
        float s = 0.0f;
        for (int i = 0; i < n; ++i)
            for (int j = 0; j <= m; j += 2)
                for (int r = REPS; r > 0; r--)
                    s += a[i * m + j] * 2.0f;
        a[gid] = s;
    }"""
    f = feats(src, "nest")
    v = f.evaluate({**ENV, "n": 5, "m": 9})
    # j = 0,2,4,6,8 -> 5 trips; r = 3,2,1 -> 3 trips
    assert v["global_loads"] == 5 * 5 * 3
    assert v["fp32_fma"] == 5 * 5 * 3        # s += x * 2 is contracted to fma
    assert [lp.depth for lp in sorted(f.loops, key=lambda x: x.line)] == [1, 2, 3]
    (ld,) = accesses(f, "a", "load")
    assert ld.stride0 == "0"                   # every work-item reads the same element: broadcast


def test_float4_counts_four_ops_and_16_bytes():
    src = """
    __kernel void v4(__global const float4 *a, __global const float4 *b, __global float4 *c) {
        int i = get_global_id(0);
        c[i] = a[i] + b[i] * 2.0f;
    }"""
    f = feats(src, "v4")
    v = f.evaluate(ENV)
    assert v["fp32_fma"] == 4 and v["fp32_add"] == 0 and v["fp32_mul"] == 0
    assert v["global_load_bytes"] == 32 and v["global_store_bytes"] == 16
    assert v["eta_coal"] == pytest.approx(1.0)
    src2 = src.replace("a[i] + b[i] * 2.0f", "a[i] + b[i]")
    assert feats(src2, "v4").evaluate(ENV)["fp32_add"] == 4


def test_integer_division_by_a_power_of_two_is_a_shift():
    """``i / 16``, ``i % 8`` and ``w /= 4`` compile to a shift or mask plus a sign fix (one
    int_bit and one int_add each); ``i / 3`` and ``i % 100`` to a multiply by the reciprocal, a
    shift and a sign fix (``%``: a multiply and subtract more); ``i / n`` stays a division."""
    src = """
    __kernel void d(__global int *a, const int n) {
        int i = get_global_id(0);
        int q = i / 16; int m = i % 8; int d = i / 3; int w = n; w /= 4;
        a[i] = q + m + d + w;
    }"""
    v = feats(src, "d").evaluate(ENV)
    assert v["int_div"] == 0
    assert v["int_bit"] == 3 + 1
    assert v["int_mul"] == 1
    assert v["int_add"] == 3 + 1 + 3      # four sign fixes and the three additions of the sum
    src2 = src.replace("int d = i / 3;", "int d = i % 100 + i / n;")
    v2 = feats(src2, "d").evaluate(ENV)
    assert v2["int_div"] == 1 and v2["int_mul"] == 2 and v2["int_add"] == 3 + 2 + 4


def test_sfu_and_conversions():
    src = """
    __kernel void tr(__global float *x, __global const int *k) {
        int i = get_global_id(0);
        float v = x[i];
        x[i] = sin(v) + exp(v) + native_sqrt(v) + pow(v, 2.0f) + (float)k[i];
    }"""
    f = feats(src, "tr")
    v = f.evaluate(ENV)
    assert v["sfu"] == 1 + 1 + 1 + 2      # pow counts two
    assert v["conv"] == 1
    assert v["fp32_add"] == 4


def test_local_tile_two_barriers_and_bank_conflicts():
    src = """
    #define TS 16
    __kernel void transpose(__global const float *in, __global float *out, const int w, const int h) {
        __local float tile[TS][TS + 1];
        int x = get_global_id(0), y = get_global_id(1);
        int lx = get_local_id(0), ly = get_local_id(1);
        tile[ly][lx] = in[y * w + x];
        barrier(CLK_LOCAL_MEM_FENCE);
        out[x * h + y] = tile[lx][ly];
        barrier(CLK_LOCAL_MEM_FENCE);
    }"""
    f = feats(src, "transpose")
    assert f.dims == 2
    assert f.local_mem_bytes == 16 * 17 * 4
    assert f.ops["barrier"] == "2"
    st = accesses(f, "tile", "store", "local")[0]
    ld = accesses(f, "tile", "load", "local")[0]
    assert (st.stride0, st.stride1) == ("1", "17")
    assert (ld.stride0, ld.stride1) == ("17", "1")
    v = f.evaluate({"gsize0": 256, "gsize1": 256, "lsize0": 16, "lsize1": 16, "w": 256, "h": 256})
    assert v["barrier"] == 2 and v["n_sync"] == 2
    assert v["local_loads"] == 1 and v["local_stores"] == 1
    assert v["local_mem_bytes"] == 16 * 17 * 4
    assert v["local_bank_conflict"] == pytest.approx(1.0)       # padded tile: conflict-free
    unpadded = feats(src.replace("TS + 1", "TS"), "transpose")
    v2 = unpadded.evaluate({"gsize0": 256, "gsize1": 256, "lsize0": 16, "lsize1": 16, "w": 256, "h": 256})
    assert v2["local_bank_conflict"] > 4                          # column read: stride 16 words
    # the transposed store is uncoalesced
    assert v["eta_coal"] < 0.7


def test_local_pointer_argument_bytes():
    src = """
    __kernel void red(__global const float *in, __global float *out, __local float *scratch) {
        int lid = get_local_id(0);
        scratch[lid] = in[get_global_id(0)];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {
            if (lid < s)
                scratch[lid] += scratch[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0)
            out[get_group_id(0)] = scratch[0];
    }"""
    f = feats(src, "red")
    assert f.local_args == {"scratch": 4}
    (geo,) = [lp for lp in f.loops]
    assert geo.trip_kind == "geometric"
    v = f.evaluate({"gsize0": 4096, "lsize0": 256, "len_scratch": 256})
    assert v["local_mem_bytes"] == 1024
    assert v["barrier"] == pytest.approx(1 + 8)          # log2(128) + 1 halving steps
    # the store of lid == 0 happens once per group
    assert v["global_stores"] == pytest.approx(1 / 256)
    assert v["warp_global_mem"] > v["global_stores"]     # but its warp issues it
    # sum over the tree: (128 + 64 + ... + 1) / 256 = 255/256 additions per item (mean-field: ~1)
    assert 0.7 < v["fp32_add"] < 1.3


def test_atomics_global_and_local():
    src = """
    __kernel void hist(__global const uint *data, __global uint *bins, const int n) {
        __local uint lbins[256];
        int lid = get_local_id(0);
        lbins[lid] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        uint v = data[get_global_id(0)];
        atomic_inc(&lbins[v & 255]);
        barrier(CLK_LOCAL_MEM_FENCE);
        atomic_add(&bins[lid], lbins[lid]);
    }"""
    f = feats(src, "hist")
    la = accesses(f, "lbins", "atomic")
    ga = accesses(f, "bins", "atomic")
    assert len(la) == 1 and la[0].space == "local" and la[0].via == "atomic_inc" and la[0].indirect
    assert len(ga) == 1 and ga[0].space == "global" and ga[0].stride0 == "1"
    v = f.evaluate({"gsize0": 1024, "lsize0": 256, "n": 1024})
    assert v["global_atomics"] == 1 and v["local_atomics"] == 1


def test_divergent_branch_gid_mod_2():
    src = """
    __kernel void eo(__global float *x) {
        int i = get_global_id(0);
        if (i % 2 == 0)
            x[i] = x[i] * 2.0f;
        else
            x[i] = sqrt(x[i]);
    }"""
    f = feats(src, "eo")
    assert f.branch_counts() == {"divergent": 1, "data": 0, "uniform": 0}
    v = f.evaluate(ENV)
    # each item takes one side, each warp both
    assert v["fp32_mul"] == pytest.approx(0.5) and v["warp_fp32_mul"] == pytest.approx(1.0)
    assert v["sfu"] == pytest.approx(0.5) and v["warp_sfu"] == pytest.approx(1.0)
    assert v["global_loads"] == pytest.approx(1.0)


def test_uniform_and_data_branches_and_early_return():
    src = """
    __kernel void k(__global const float *x, __global float *y, const int n, const int flag) {
        int i = get_global_id(0);
        if (i >= n)
            return;
        float v = x[i];
        if (flag > 0)
            v = v + 1.0f;
        if (v > 0.0f)
            v = v * 3.0f;
        y[i] = v;
    }"""
    f = feats(src, "k")
    assert f.branch_counts() == {"divergent": 1, "data": 1, "uniform": 1}
    assert f.early_returns == 1
    v = f.evaluate({"gsize0": 1000, "lsize0": 100, "n": 250, "flag": 1})
    # everything after the guard runs for n / gsize0 of the items
    assert v["global_loads"] == pytest.approx(0.25) and v["global_stores"] == pytest.approx(0.25)
    assert f.evaluate({"gsize0": 1000, "lsize0": 100, "n": 5000, "flag": 1})["global_loads"] == pytest.approx(1.0)


def test_csr_loop_data_dependent_fallback():
    src = """
    __kernel void spmv(__global const int *row_ptr, __global const int *col, __global const float *val,
                       __global const float *x, __global float *y, const int rows) {
        int r = get_global_id(0);
        if (r < rows) {
            float s = 0.0f;
            for (int j = row_ptr[r]; j < row_ptr[r + 1]; ++j)
                s += val[j] * x[col[j]];
            y[r] = s;
        }
    }"""
    f = feats(src, "spmv")
    (loop,) = f.loops
    # the row loop's trips are data: a site (line 7, column 13) that a run on real inputs measures
    assert loop.data_dependent and loop.trip_kind == "data_dependent" and loop.trip == "trip_l7_c13"
    (site,) = f.sites
    assert (site.symbol, site.kind, site.line, site.col, site.default) == ("trip_l7_c13", "loop", 7, 13, None)
    base = {"gsize0": 1024, "lsize0": 128, "rows": 1024}
    assert f.evaluate(base)["global_loads"] == 2 + 4 * 8                      # avg_trip 8 when not measured
    assert f.evaluate({**base, "avg_trip": 5})["global_loads"] == 2 + 4 * 5
    assert f.evaluate({**base, "trip_l7_c13": 2.5})["global_loads"] == 2 + 4 * 2.5   # measured: 2.5 per row
    assert loop.divergent
    (xv,) = accesses(f, "x", "load")
    assert xv.indirect and xv.stride0 is None and not xv.affine
    env = {"gsize0": 1024, "lsize0": 128, "rows": 1024}
    assert f.evaluate(env)["fp32_fma"] == pytest.approx(8.0)                 # documented default
    assert f.evaluate({**env, "avg_trip": 20})["fp32_fma"] == pytest.approx(20.0)
    assert f.branch_counts()["data"] == 1


def test_gather_indirect():
    src = """
    __kernel void gather(__global const float *a, __global const int *idx, __global float *out) {
        int gid = get_global_id(0);
        out[gid] = a[idx[gid]];
    }"""
    f = feats(src, "gather")
    (g,) = accesses(f, "a", "load")
    assert g.indirect and not g.affine and g.stride0 is None
    (i,) = accesses(f, "idx", "load")
    assert not i.indirect and i.stride0 == "1"
    v = f.evaluate(ENV)
    assert v["eta_coal"] == pytest.approx((4 / 32 + 1 + 1) / 3)


def test_uniform_index_from_data_is_not_a_gather():
    src = """
    __kernel void k(__global const int *off, __global const float *a, __global float *b) {
        int i = get_global_id(0);
        b[i] = a[off[0] + i];
    }"""
    f = feats(src, "k")
    (ld,) = accesses(f, "a", "load")
    assert ld.stride0 == "1" and not ld.indirect


def test_2d_kernel_row_major():
    src = """
    __kernel void add2d(__global const float *a, __global float *b, const int w, const int h) {
        int x = get_global_id(0);
        int y = get_global_id(1);
        if (x < w && y < h)
            b[y * w + x] = a[y * w + x] + 1.0f;
    }"""
    f = feats(src, "add2d")
    assert f.dims == 2
    for a in f.accesses:
        assert a.stride0 == "1" and a.stride1 == "w" and a.coeffs == {"gid0": "1", "gid1": "w"}
    v = f.evaluate({"gsize0": 64, "gsize1": 64, "lsize0": 16, "lsize1": 16, "w": 32, "h": 64})
    assert v["global_loads"] == pytest.approx(0.5)          # x < w for half of the items
    assert v["eta_coal"] == pytest.approx(1.0)               # 16-float rows are full 32 B sectors
    # column-major access of the same data
    g = feats(src.replace("y * w + x", "x * h + y"), "add2d")
    assert all(a.stride0 == "h" for a in g.accesses)
    assert g.evaluate({"gsize0": 64, "gsize1": 64, "lsize0": 16, "lsize1": 16, "w": 64, "h": 64})["eta_coal"] < 0.2


def test_grid_stride_and_group_stride_loops_average_trip():
    src = """
    __kernel void gs(__global float *a, const int n) {
        for (int i = get_global_id(0); i < n; i += get_global_size(0))
            a[i] *= 2.0f;
    }
    __kernel void ls(__global float *a, const int n) {
        for (int i = get_local_id(0); i < n; i += get_local_size(0))
            a[get_group_id(0) * n + i] += 1.0f;
    }"""
    f = feats(src, "gs")
    assert f.evaluate({"gsize0": 1000, "lsize0": 100, "n": 10000})["global_loads"] == pytest.approx(10.0)
    (ld,) = accesses(f, "a", "load")
    assert ld.stride0 == "1"
    g = feats(src, "ls")
    assert g.evaluate({"gsize0": 1000, "lsize0": 100, "n": 1000})["global_stores"] == pytest.approx(10.0)
    assert accesses(g, "a", "store")[0].stride0 == "1"


def test_triangular_loop_exact_average():
    src = """
    __kernel void tri(__global float *a, const int n) {
        int i = get_global_id(0);
        float s = 0.0f;
        for (int j = i; j < n; j++)
            s += a[j];
        a[i] = s;
    }"""
    f = feats(src, "tri")
    (loop,) = f.loops
    assert loop.divergent
    # sum_{i<n} (n - i) / n = (n + 1) / 2 when gsize0 == n
    assert f.evaluate({"gsize0": 1024, "lsize0": 64, "n": 1024})["global_loads"] == pytest.approx(1025 / 2)


def test_helper_inlining_with_arguments():
    src = """
    float axpy(float a, __global const float *x, int i) { return a * x[i] + 1.0f; }
    float twice(float v) { return v + v; }
    __kernel void k(__global const float *x, __global float *y, const float a, const int off) {
        int i = get_global_id(0);
        y[i] = twice(axpy(a, x, i + off));
    }"""
    f = feats(src, "k")
    assert f.helpers == ["axpy", "twice"]
    (ld,) = accesses(f, "x", "load")
    assert ld.stride0 == "1" and sorted(ld.index_expr.split(" + ")) == ["gid0", "off"]
    v = f.evaluate(ENV)
    assert v["fp32_fma"] == 1 and v["fp32_add"] == 1


def test_vload_vstore_and_remainder_loop():
    src = """
    __kernel void dot4(__global const float *a, __global float *out, const int K) {
        int i = get_global_id(0);
        float4 acc = (float4)(0.0f);
        int k = 0;
        for (; k + 4 <= K; k += 4)
            acc += vload4(0, a + i * K + k);
        float s = acc.x + acc.y + acc.z + acc.w;
        for (; k < K; ++k)
            s += a[i * K + k];
        vstore4((float4)(s), i, out);
    }"""
    f = feats(src, "dot4")
    vl = [a for a in f.accesses if a.via == "vload4"]
    vs = [a for a in f.accesses if a.via == "vstore4"]
    assert len(vl) == 1 and vl[0].elem_bytes == 16 and len(vs) == 1 and vs[0].stride0 == "1"
    for K in (4, 10, 33):
        v = f.evaluate({**ENV, "K": K})
        assert v["global_load_bytes"] == pytest.approx(16 * (K // 4) + 4 * (K % 4))


def test_struct_member_and_private_array():
    src = """
    typedef struct { float x, y, z, m; } body_t;
    __kernel void k(__global const body_t *b, __global float *out) {
        int i = get_global_id(0);
        float tmp[4];
        for (int j = 0; j < 4; j++)
            tmp[j] = b[i].x * j;
        out[i] = tmp[0] + tmp[3] + b[i].m;
    }"""
    f = feats(src, "k")
    bl = accesses(f, "b", "load")
    assert all(a.elem_bytes == 4 and a.unit_bytes == 16 for a in bl)
    v = f.evaluate(ENV)
    assert v["private_accesses"] == 4 + 2
    assert f.private_array_bytes == 16
    # a 4-byte field of a 16-byte struct: a quarter of each sector is used
    assert accesses(f, "b", "load")[0].stride0 == "1"
    assert v["eta_bytes"] < 0.6


def test_switch_and_ternary():
    src = """
    __kernel void k(__global const int *op, __global float *x) {
        int i = get_global_id(0);
        float v = x[i];
        switch (op[i] & 3) {
            case 0: v = v + 1.0f; break;
            case 1: v = v * 2.0f; break;
            default: v = sqrt(v); break;
        }
        x[i] = (v > 0.0f) ? v : -v;
    }"""
    f = feats(src, "k")
    kinds = sorted(b.kind for b in f.branches)
    assert kinds == ["?:", "switch"]
    v = f.evaluate(ENV)
    assert v["sfu"] == pytest.approx(1 / 3) and v["warp_sfu"] == pytest.approx(1.0)


def test_geometric_growing_loop_and_while_loop():
    src = """
    __kernel void k(__global float *a, const int n) {
        int i = get_global_id(0);
        float s = 0.0f;
        for (int step = 1; step < n; step *= 2)
            s += a[i + step];
        int j = 0;
        while (j < n) {
            s += 1.0f;
            j += 3;
        }
        a[i] = s;
    }"""
    f = feats(src, "k")
    kinds = {lp.kind: lp.trip_kind for lp in f.loops}
    assert kinds == {"for": "geometric", "while": "affine"}
    v = f.evaluate({**ENV, "n": 100})
    assert v["global_loads"] == pytest.approx(7)            # 1, 2, 4, ..., 64
    assert v["fp32_add"] == pytest.approx(7 + 34)           # j = 0, 3, ..., 99


def test_evaluate_many_matches_evaluate():
    src = """
    __kernel void k(__global const float *a, __global float *b, const int n, const int stride) {
        int gid = get_global_id(0);
        int lid = get_local_id(0);
        if (gid >= n) return;
        float s = 0.0f;
        for (int j = lid; j < n; j += get_local_size(0))
            s += a[j * stride];
        if (lid == 0)
            b[get_group_id(0)] = s;
    }"""
    f = feats(src, "k")
    rng = np.random.default_rng(0)
    envs = {
        "gsize0": rng.choice([256, 1024, 4096], size=50).astype(float),
        "lsize0": rng.choice([32, 64, 128, 256], size=50).astype(float),
        "n": rng.integers(1, 5000, size=50).astype(float),
        "stride": rng.integers(0, 40, size=50).astype(float),
    }
    many = f.evaluate_many(envs)
    for i in range(0, 50, 7):
        one = f.evaluate({k: float(v[i]) for k, v in envs.items()})
        for key, val in one.items():
            assert many[key][i] == pytest.approx(val, rel=1e-12, abs=1e-12), key
    assert many["eta_coal"].shape == (50,)


def test_evaluate_many_on_a_large_batch():
    # how fast this is, is a benchmark's business; here: every row equals the one-row evaluation
    f = feats(VADD, "vadd")
    n = 200_000
    envs = {"gsize0": np.full(n, 1 << 20, dtype=float), "lsize0": np.random.default_rng(1).choice([32, 64, 256], n)}
    out = f.evaluate_many(envs)
    assert out["eta_coal"].shape == (n,)
    for ls in (32, 64, 256):
        rows = np.flatnonzero(envs["lsize0"] == ls)
        one = f.evaluate({"gsize0": float(1 << 20), "lsize0": float(ls)})
        for key, val in one.items():
            np.testing.assert_allclose(out[key][rows], val, rtol=1e-12, atol=1e-12, err_msg=f"{ls} {key}")


def test_defaults_and_argument_name_mapping():
    src = """
    __kernel void k(__global float *a, const int in, const int lambda) {
        for (int j = 0; j < in; j++) a[j] += lambda;
    }"""
    f = feats(src, "k")
    assert f.symbol_map == {"in_": "in", "lambda_": "lambda"}
    assert f.evaluate({"in": 5})["global_loads"] == 5          # original argument names accepted
    assert f.evaluate({"in_": 6})["global_loads"] == 6
    assert f.evaluate({})["global_loads"] == 1                  # missing scalar -> 1


def test_round_trip_dict_json():
    f = feats(VADD, "vadd")
    d = json.loads(json.dumps(f.to_dict()))
    g = SourceFeatures.from_dict(d)
    assert g == f
    assert g.evaluate(ENV) == f.evaluate(ENV)


def test_errors():
    with pytest.raises(ValueError, match="not found"):
        feats(VADD, "nope")
    with pytest.raises(ParseError):
        feats("__kernel void k(__global float *a) { a[0] = undefined_thing; }", "k")
    with pytest.raises(ValueError, match="OpenCL C and CUDA"):
        analyze_source(Kernel(source="kernel void k() {}", name="k", language="metal"))
    # CUDA goes through its translation (tests/test_cuda_static.py)
    assert analyze_source(Kernel(source="__global__ void k() {}", name="k", language="cuda")).kernel_name == "k"


def test_build_option_defines_are_used():
    src = """
    __kernel void k(__global float *a) {
        for (int j = 0; j < REPS; j++) a[get_global_id(0)] += 1.0f;
    }"""
    f = feats(src, "k", build_options="-DREPS=12")
    assert f.evaluate(ENV)["global_stores"] == 12


def test_pointer_walks_and_row_pointers():
    src = """
    __kernel void k(__global const float *A, __global float *y, const int cols) {
        int r = get_global_id(0);
        __global const float *row = A + r * cols;
        float s = 0.0f;
        for (int c = 0; c < cols; ++c) s += row[c];
        __global const float *p = A + r;
        for (int c = 0; c < cols; ++c) { s += *p; p += get_global_size(0); }
        y[r] = s;
    }"""
    f = feats(src, "k")
    a = accesses(f, "A", "load")
    assert [x.stride0 for x in a] == ["cols", "1"]
    assert all(x.count == "max(0, cols)" for x in a)


def test_fallback_loops_and_flags():
    src = """
    __constant float W[3] = {0.25f, 0.5f, 0.25f};
    __kernel void k(__global float *a, const int n) {
        int i = get_global_id(0);
        int j = 0;
        do { a[i] += W[j % 3]; j++; } while (j < n);
        while (a[i] > 1.0f) { a[i] *= 0.5f; }
        for (;;) { if (a[i] < 0.1f) break; a[i] -= 0.1f; }
        for (int k = 0; k < n && a[k] > 0.0f; k++) a[i] += 1.0f;
    }"""
    f = feats(src, "k")
    lp = sorted(f.loops, key=lambda x: x.line)
    assert [(x.kind, x.trip_kind) for x in lp] == [("do", "affine"), ("while", "data_dependent"),
                                                  ("for", "unknown"), ("for", "affine")]
    assert lp[0].trip == "max(1, max(0, n))"
    assert lp[2].has_break and lp[2].trip == "trip_l8_c9"
    assert lp[3].early_exit and lp[3].trip == "min(max(0, n), trip_l9_c9)"   # data-dependent exit
    assert [(x.symbol, x.default) for x in f.sites] == [
        ("trip_l7_c9", None), ("trip_l8_c9", None), ("br_l8_c20", 1.0), ("trip_l9_c9", None)]
    (w,) = accesses(f, "W")
    assert w.space == "constant" and w.stride0 == "0"
    assert f.evaluate({**ENV, "n": 0})["constant_loads"] == 1      # do-while runs once


def test_fp64_and_local_keyword():
    src = """
    __kernel void k(__global double *a, __global const double *b, local double *tmp) {
        int i = get_global_id(0);
        tmp[get_local_id(0)] = b[i] * 2.0;
        barrier(CLK_LOCAL_MEM_FENCE);
        a[i] = tmp[get_local_size(0) - 1 - get_local_id(0)] / 3.0 + (double)i;
    }"""
    f = feats(src, "k")
    v = f.evaluate(ENV)
    assert v["fp64_mul"] == 1 and v["fp64_div"] == 1 and v["fp64_add"] == 1 and v["fp32_add"] == 0
    assert v["conv"] == 1
    assert f.local_args == {"tmp": 8}
    rev = [a for a in f.accesses if a.space == "local" and a.kind == "load"][0]
    assert rev.stride0 == "-1" and rev.elem_bytes == 8
    assert v["local_bank_conflict"] == pytest.approx(1.0)


def test_2d_from_1d_index_decomposition():
    src = """
    __kernel void k(__global float *a, const int w) {
        int gid = get_global_id(0);
        int x = gid % w, y = gid / w;
        a[y * w + x] = 1.0f;
        a[x * w + y] = 2.0f;
    }"""
    f = feats(src, "k")
    s = [a.stride0 for a in accesses(f, "a", "store")]
    assert s == ["1", "w"]


INTERLEAVED = """
__kernel void red(__global const float *in, __global float *out, __local float *buf) {
    unsigned int lid = get_local_id(0);
    buf[lid] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 1; s < get_local_size(0); s *= 2) {
        if ((lid % (2 * s)) == 0)
            buf[lid] += buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = buf[0];
}
__kernel void red_idx(__global const float *in, __global float *out, __local float *buf) {
    unsigned int lid = get_local_id(0);
    unsigned int lsz = get_local_size(0);
    buf[lid] = in[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (unsigned int s = 1; s < lsz; s <<= 1) {
        unsigned int idx = 2 * s * lid;
        if (idx + s < lsz)
            buf[idx] += buf[idx + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = buf[0];
}
"""


# warp-issued adds of the interleaved reduction per work-item, by hand: step s = 2^t keeps the
# work-items below L / 2s busy; a warp of 32 issues while any lane is busy, so a work-item's share is
# min(1, 32 / 2s): 1 for s <= 16, then 1/2, 1/4, ... (L = 32: 5 steps; 1024: 5 + 1/2 + ... + 1/32)
WARP_ADDS = {32: 5.0, 64: 5.5, 256: 5.875, 1024: 5.96875}


@pytest.mark.parametrize("lsize", [32, 64, 256, 1024])
def test_tree_reductions_are_summed_exactly(lsize):
    # every tree reduction performs lsize - 1 additions per work-group
    for name in ("red", "red_idx"):
        f = feats(INTERLEAVED, name)
        assert "itersum(" in f.ops["fp32_add"]
        v = f.evaluate({"gsize0": 65536, "lsize0": lsize})
        assert v["fp32_add"] == pytest.approx((lsize - 1) / lsize), name
        assert v["barrier"] == pytest.approx(1 + np.log2(lsize)), name
    # interleaved addressing: a warp issues the add while any of its lanes is active
    v = feats(INTERLEAVED, "red").evaluate({"gsize0": 65536, "lsize0": lsize})
    assert v["warp_fp32_add"] == pytest.approx(WARP_ADDS[lsize])


def test_itersum_vectorized_matches_scalar():
    f = feats(INTERLEAVED, "red_idx")
    ls = np.array([32.0, 64.0, 128.0, 256.0, 512.0, 1024.0])
    many = f.evaluate_many({"gsize0": 65536.0, "lsize0": ls})
    for i, L in enumerate(ls):
        one = f.evaluate({"gsize0": 65536, "lsize0": float(L)})
        assert many["fp32_add"][i] == pytest.approx(one["fp32_add"])
        assert many["local_loads"][i] == pytest.approx(one["local_loads"])


def test_early_return_on_data_is_a_measured_branch_site():
    src = """
    __kernel void k(__global const float *a, __global float *b, const float t) {
        int i = get_global_id(0);
        if (a[i] <= t) return;
        b[i] = a[i] * 2.0f;
    }"""
    f = feats(src, "k")
    (site,) = f.sites
    assert (site.symbol, site.kind, site.default) == ("br_l4_c9", "if", 0.0)
    assert "early exit" in site.assumed
    assert f.evaluate(ENV)["global_stores"] == 1                  # unmeasured: nobody leaves early
    assert f.evaluate({**ENV, "br_l4_c9": 0.75})["global_stores"] == 0.25   # 3 in 4 work-items return
    assert f.evaluate({**ENV, "br_l4_c9": 0.75})["global_loads"] == 1 + 0.25


def test_data_dependent_if_else_site_and_per_warp_issue():
    src = """
    __kernel void k(__global const float *a, __global float *b) {
        int i = get_global_id(0);
        float x = a[i];
        if (x > 0.5f) { b[i] = sqrt(x); } else { b[i] = x; }
    }"""
    f = feats(src, "k")
    (site,) = f.sites
    assert site.default == 0.5
    e = f.evaluate({**ENV, "br_l5_c9": 0.01})
    assert e["sfu"] == pytest.approx(0.01)                        # 1 % of the work-items take the sqrt
    assert e["warp_sfu"] == pytest.approx(min(1.0, 32 * 0.01))    # issued by a warp when any lane takes it


def test_constant_expressions_are_folded_not_counted():
    src = """
    __kernel void k(__global float *a, __global uint *s) {
        int i = get_global_id(0);
        a[i] = (s[i] >> 8) * (1.0f / 16777216.0f) + 2.0f * 4.0f;
    }"""
    f = feats(src, "k")
    # one multiply-add per work-item (the division and 2*4 are done by the compiler), one shift
    assert f.ops.get("fp32_fma") == "1" and "fp32_div" not in f.ops and "fp32_mul" not in f.ops
    assert f.ops.get("int_bit") == "1"

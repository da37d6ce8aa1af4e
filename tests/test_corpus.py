"""Corpus ingest on a messy little crawl: real pcpp, libclang, clang-format and (where a device
builds) the OpenCL trial build."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from kernelcast.datagen import corpus
from kernelcast.datagen.corpus import (
    IngestReport,
    MinHasher,
    dedup_tokens,
    ingest,
    ingest_to,
    normalize_source,
    shingle_hashes,
    strip_qualifiers,
)
from kernelcast.datagen.corpus_store import read_corpus, read_records

from kernelcast.schema import Kernel

COMMON_H = """\
#ifndef COMMON_H
#define COMMON_H
#define COMMON_FACTOR 3.0f
/* a helper defined in a header */
inline float common_scale(float x) { return x * COMMON_FACTOR; }
#endif
"""

TILES_H = """\
#define TILE 8
"""

MULTI = """\
// Two kernels sharing helpers, plus a double kernel, from a made-up repository
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#include "inc/common.h"

#define N_ITEMS 16
#define SQR(x) ((x) * (x))

/* A pair of values
   (block comment spanning lines) */
typedef struct {
    float a;
    float b;
} Pair;

float pair_sum(Pair p) { return p.a + p.b; }   // shared helper

float only_for_sum(float v) { return SQR(v) + 1.0f; }

float never_used(float v) { return v * 42.0f; }

__constant float WEIGHTS[3] = {0.25f, 0.5f, 0.25f};

__kernel void k_sum(__global const Pair *in, __global float *out) {
    int i = get_global_id(0);
    float acc = 0.0f;
    for (int j = 0; j < N_ITEMS; j++) {
        acc += only_for_sum(pair_sum(in[i * N_ITEMS + j])) * WEIGHTS[j % 3];
    }
    out[i] = acc;
}

kernel void k_scale(global Pair *data, const float factor) {
    int __local_idx = get_global_id(0);   /* a user identifier starting with __local */
    Pair p = data[__local_idx];
    p.a = common_scale(p.a) * factor;
    p.b = pair_sum(p);
    data[__local_idx] = p;
}

#ifdef cl_khr_fp64
__kernel void k_double(__global double *x) {
    x[get_global_id(0)] = x[get_global_id(0)] * 2.0;
}
#else
__kernel void k_no_double(__global float *x) { x[0] = 0.0f; }
#endif
"""

VADD = """\
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, const int n) {
    int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
"""

# the same kernel as VADD after normalization: other comments, spacing and qualifier spelling
VADD_REFORMATTED = """\
/* vector addition, reformatted copy */
kernel   void vadd( global const float* a,
                    __global const float * b,
                    global float *c,
                    const int n )
{
    // one work-item per element

    int i = get_global_id( 0 );
    if (i < n)
        c[i] = a[i] + b[i];   // add
}
"""

STENCIL = """\
__kernel void smooth(__global const float *input, __global float *output, const int width,
                     const float alpha, const float beta) {
    const int gid = get_global_id(0);
    if (gid <= 1 || gid >= width - 2) {
        output[gid] = input[gid];
        return;
    }
    float far_left = input[gid - 2];
    float left = input[gid - 1];
    float center = input[gid];
    float right = input[gid + 1];
    float far_right = input[gid + 2];
    float lap = left - 2.0f * center + right;
    float lap4 = far_left - 4.0f * left + 6.0f * center - 4.0f * right + far_right;
    float grad = 0.5f * (right - left);
    float grad2 = 0.25f * (far_right - far_left);
    float value = center + alpha * lap - beta * lap4;
    value = value - 0.1f * alpha * grad * grad;
    value = value + 0.05f * beta * grad2 * grad2;
    value = clamp(value, -1.0e6f, 1.0e6f);
    if (value != value) {
        value = 0.0f;
    }
    float energy = value * value + grad * grad + grad2 * grad2;
    float damp = exp(-0.001f * energy);
    output[gid] = value * damp + 0.001f * sqrt(energy);
}
"""

# STENCIL with every variable renamed and one extra statement: a near duplicate
STENCIL_RENAMED = """\
__kernel void smooth_v2(__global const float *src, __global float *dst, const int n,
                        const float a, const float b) {
    const int x = get_global_id(0);
    if (x <= 1 || x >= n - 2) {
        dst[x] = src[x];
        return;
    }
    float ll = src[x - 2];
    float l = src[x - 1];
    float c = src[x];
    float r = src[x + 1];
    float rr = src[x + 2];
    float d2 = l - 2.0f * c + r;
    float d4 = ll - 4.0f * l + 6.0f * c - 4.0f * r + rr;
    float g = 0.5f * (r - l);
    float g2 = 0.25f * (rr - ll);
    float v = c + a * d2 - b * d4;
    v = v - 0.1f * a * g * g;
    v = v + 0.05f * b * g2 * g2;
    v = clamp(v, -1.0e6f, 1.0e6f);
    v += 0.0f;
    if (v != v) {
        v = 0.0f;
    }
    float e = v * v + g * g + g2 * g2;
    float k = exp(-0.001f * e);
    dst[x] = v * k + 0.001f * sqrt(e);
}
"""

MATMUL = """\
#include "tiles.h"
__attribute__((reqd_work_group_size(TILE, TILE, 1)))
__kernel void matmul(__global const float *A, __global const float *B, __global float *C, const int n) {
    const int row = get_global_id(1);
    const int col = get_global_id(0);
    __local float tile[TILE][TILE];
    float sum = 0.0f;
    for (int k = 0; k < n; k++) {
        sum += A[row * n + k] * B[k * n + col];
    }
    tile[get_local_id(1)][get_local_id(0)] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    C[row * n + col] = tile[get_local_id(1)][get_local_id(0)];
}
"""

VOLUME = """\
enum Axis { AXIS_X, AXIS_Y, AXIS_Z };

int linear_index3(int w, int h) {
    return ((int)get_global_id(2) * h + (int)get_global_id(1)) * w + (int)get_global_id(0);
}

__kernel void vol_scale(__global float *v, const int w, const int h) {
    int idx = linear_index3(w, h);
    v[idx] = v[idx] * (float)(AXIS_Z + 1);
}
"""

FAILS = """\
kernel void k_fake_fail(global int *x) {
    x[get_global_id(0)] += 7;
}
"""

BIASED = """\
__kernel void biased(__global float *x) {
    x[get_global_id(0)] = x[get_global_id(0)] * 3.0f + SCALE_BIAS;
}
"""

BROKEN = """\
__kernel void broken(__global float *x) {
    x[0] = 1.0f   // missing semicolon
}
"""

MISSING_INCLUDE = """\
#include "does_not_exist.h"
__kernel void orphan(__global float *x) { x[0] = 1.0f; }
"""

HELPERS_ONLY = """\
/* no kernel in this file */
float helper_a(float x) { return x + 1.0f; }
"""

LATIN1 = (
    b"/* commentaire: donn\xe9es tri\xe9es (Latin-1, not UTF-8) */\n"
    b"__kernel void scale_latin(__global float *x, const float s) {\n"
    b"    x[get_global_id(0)] *= s;\n"
    b"}\n"
)


def make_crawl(root: Path) -> tuple[Path, Path]:
    """The messy fixture: ``root/crawl`` (sources) and ``root/includes`` (an include dir)."""
    crawl = root / "crawl"
    a, b = crawl / "repo_a", crawl / "repo_b"
    (a / "inc").mkdir(parents=True)
    b.mkdir(parents=True)
    inc = root / "includes"
    inc.mkdir()
    (inc / "tiles.h").write_text(TILES_H)
    (a / "inc" / "common.h").write_text(COMMON_H)
    (a / "multi.cl").write_text(MULTI)
    (a / "vadd.cl").write_text(VADD)
    (a / "stencil.cl").write_text(STENCIL)
    (a / "matmul.cl").write_text(MATMUL)
    (a / "volume.cl").write_text(VOLUME)
    (a / "fails.cl").write_text(FAILS)
    (a / "biased.cl").write_text(BIASED)
    (b / "vadd_copy.cl").write_text(VADD)
    (b / "vadd_reformatted.cl").write_text(VADD_REFORMATTED)
    (b / "stencil_renamed.cl").write_text(STENCIL_RENAMED)
    (b / "broken.cl").write_text(BROKEN)
    (b / "missing_include.cl").write_text(MISSING_INCLUDE)
    (b / "helpers_only.cl").write_text(HELPERS_ONLY)
    (b / "latin1.cl").write_bytes(LATIN1)
    (b / "binary.cl").write_bytes(b"\x7fELF\x00\x01\x02 not a source")
    (b / "notes.txt").write_text("not a .cl file")
    return crawl, inc


def fake_compile(k: Kernel) -> tuple[bool, str]:
    if k.name == "k_fake_fail":
        return False, "fake: rejected"
    return True, ""


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_crawl(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def ingested(crawl: tuple[Path, Path]) -> tuple[list[dict], IngestReport]:
    src, inc = crawl
    return ingest([src], compile_fn=fake_compile, defines={"SCALE_BIAS": "0.5f"}, include_dirs=[inc])


def by_name(records: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in records}


def test_stage_counts(ingested: tuple[list[dict], IngestReport]) -> None:
    records, rep = ingested
    assert rep.files_found == 15
    assert rep.files_read == 14
    assert rep.non_utf8_files == 1
    assert [f.file for f in rep.read_failures] == ["crawl/repo_b/binary.cl"]
    assert [f.file for f in rep.preprocess_failures] == ["crawl/repo_b/missing_include.cl"]
    assert "does_not_exist.h" in rep.preprocess_failures[0].reason
    assert [f.file for f in rep.parse_failures] == ["crawl/repo_b/broken.cl"]
    assert "expected ';'" in rep.parse_failures[0].reason
    assert rep.files_without_kernels == ["crawl/repo_b/helpers_only.cl"]
    assert rep.split_failures == []
    assert rep.kernels_found == 13
    assert rep.kernels_normalized == 13
    assert rep.format_fallbacks == 0
    assert rep.exact_duplicates_removed == 2
    assert rep.near_duplicates_removed == 1
    assert rep.compile_checked
    assert (rep.compile_ok, rep.compile_failures) == (9, 1)
    assert rep.kept == len(records) == 10
    assert rep.dims == {"1": 8, "2": 1, "3": 1}
    assert sorted(r["name"] for r in records) == sorted([
        "k_sum", "k_scale", "k_double", "vadd", "smooth", "matmul", "vol_scale", "k_fake_fail",
        "biased", "scale_latin"])


def test_report_table_and_dict(ingested: tuple[list[dict], IngestReport]) -> None:
    _, rep = ingested
    table = rep.format_table()
    for label in ("files found", "preprocess failures", "kernels found", "exact duplicates removed",
                  "near duplicates removed", "compile failures", "kept", "dims 1D / 2D / 3D"):
        assert label in table
    assert re.search(r"kernels found\s+13$", table, re.M)
    assert re.search(r"kept\s+10$", table, re.M)
    assert "does_not_exist.h" in table
    d = json.loads(json.dumps(rep.to_dict()))
    assert IngestReport.from_dict(d) == rep


def test_records_schema(ingested: tuple[list[dict], IngestReport]) -> None:
    records, _ = ingested
    for r in records:
        k = Kernel.from_dict(r)
        assert r["id"] == k.id
        assert r["language"] == "opencl"
        assert r["build_options"] == "-DSCALE_BIAS=0.5f"
        assert r["compile_status"] in ("ok", "compile_error")
        assert Path(r["original_file"]).is_file()
        assert r["origin"].startswith("crawl/repo_")
        assert len(r["sha256"]) == 64
    recs = by_name(records)
    assert recs["k_fake_fail"]["compile_status"] == "compile_error"
    assert recs["k_fake_fail"]["compile_log"] == "fake: rejected"
    assert recs["vadd"]["compile_status"] == "ok"
    assert recs["k_sum"]["origin"] == "crawl/repo_a/multi.cl"


def test_helpers_are_exactly_what_each_kernel_needs(ingested: tuple[list[dict], IngestReport]) -> None:
    recs = by_name(ingested[0])
    k_sum = recs["k_sum"]["source"]
    for needed in ("Pair;", "float pair_sum(", "float only_for_sum(", "WEIGHTS[3]"):
        assert needed in k_sum
    for unneeded in ("never_used", "common_scale", "k_scale", "#pragma", "double"):
        assert unneeded not in k_sum
    k_scale = recs["k_scale"]["source"]
    for needed in ("Pair;", "float pair_sum(", "float common_scale(", "3.0f"):
        assert needed in k_scale
    for unneeded in ("never_used", "only_for_sum", "WEIGHTS", "k_sum", "#pragma"):
        assert unneeded not in k_scale
    k_double = recs["k_double"]["source"]
    assert k_double.startswith("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n")
    assert "Pair" not in k_double and "pair_sum" not in k_double
    # source order: typedef, helpers, constant, kernel
    assert k_sum.index("Pair;") < k_sum.index("pair_sum(") < k_sum.index("only_for_sum(") \
        < k_sum.index("WEIGHTS[3]") < k_sum.index("kernel void k_sum")
    assert "enum Axis" in recs["vol_scale"]["source"]
    assert "int linear_index3(" in recs["vol_scale"]["source"]


def test_macros_includes_comments_qualifiers(ingested: tuple[list[dict], IngestReport]) -> None:
    records, _ = ingested
    recs = by_name(records)
    assert "k_no_double" not in recs                     # cl_khr_fp64 is predefined
    k_sum = recs["k_sum"]["source"]
    assert "N_ITEMS" not in k_sum and "j < 16" in k_sum  # object-like macro expanded
    assert "SQR" not in k_sum and "((v) * (v))" in k_sum  # function-like macro expanded
    assert "COMMON_FACTOR" not in recs["k_scale"]["source"]
    assert "__local_idx" in recs["k_scale"]["source"]     # user identifier untouched
    matmul = recs["matmul"]["source"]
    assert "__attribute__((reqd_work_group_size(8, 8, 1)))" in matmul  # include dir + attribute
    assert "local float tile[8][8]" in matmul
    assert "0.5f" in recs["biased"]["source"] and "SCALE_BIAS" not in recs["biased"]["source"]
    for r in records:
        src = r["source"]
        assert "//" not in src and "/*" not in src
        for q in ("__kernel", "__global", "__constant", "__private"):
            assert not re.search(rf"\b{q}\b", src), (r["name"], q)
        assert re.search(r"\bkernel\s+void\s+" + r["name"] + r"\(", src)
    assert "constant float WEIGHTS[3]" in recs["k_sum"]["source"]
    assert "global const Pair *in" in recs["k_sum"]["source"]


def test_dims(ingested: tuple[list[dict], IngestReport]) -> None:
    recs = by_name(ingested[0])
    assert recs["matmul"]["dims"] == 2
    assert recs["vol_scale"]["dims"] == 3               # get_global_id(2) is in the helper
    for name in ("k_sum", "k_scale", "k_double", "vadd", "smooth", "biased", "scale_latin"):
        assert recs[name]["dims"] == 1


def test_duplicates_keep_the_first(ingested: tuple[list[dict], IngestReport]) -> None:
    records, rep = ingested
    recs = by_name(records)
    assert recs["vadd"]["origin"] == "crawl/repo_a/vadd.cl"
    assert {p["removed_origin"] for p in rep.exact_duplicate_pairs} == {
        "crawl/repo_b/vadd_copy.cl", "crawl/repo_b/vadd_reformatted.cl"}
    assert all(p["kept"] == recs["vadd"]["id"] for p in rep.exact_duplicate_pairs)
    [pair] = rep.near_duplicate_pairs
    assert pair["kept"] == recs["smooth"]["id"]
    assert pair["kept_origin"] == "crawl/repo_a/stencil.cl"
    assert pair["removed_name"] == "smooth_v2"
    assert pair["similarity"] >= 0.92
    assert "smooth_v2" not in recs


def test_near_duplicate_similarity_is_a_good_estimate() -> None:
    a = shingle_hashes(dedup_tokens(normalize_source(STENCIL)))
    b = shingle_hashes(dedup_tokens(normalize_source(STENCIL_RENAMED)))
    exact = len(np.intersect1d(a, b)) / len(np.union1d(a, b))
    assert exact > 0.95
    h = MinHasher(128)
    est = MinHasher.similarity(h.signature(a), h.signature(b))
    assert abs(est - exact) < 0.06
    c = shingle_hashes(dedup_tokens(normalize_source(MATMUL)))
    assert MinHasher.similarity(h.signature(a), h.signature(c)) < 0.3


@pytest.mark.device
def test_records_compile_alone_on_device(ingested: tuple[list[dict], IngestReport]) -> None:
    compile_fn = corpus.opencl_compile_fn()
    for r in ingested[0]:
        ok, log = compile_fn(Kernel.from_dict(r))
        assert ok, (r["name"], log, r["source"])


@pytest.mark.device
def test_opencl_compile_fn_accepts_good_rejects_bad() -> None:
    compile_fn = corpus.opencl_compile_fn()
    good = Kernel(source="kernel void good(global float *x) { x[get_global_id(0)] *= N; }\n",
                  name="good", build_options="-DN=2.0f")
    assert compile_fn(good) == (True, compile_fn(good)[1])
    assert compile_fn(good)[0]
    bad = Kernel(source="kernel void bad(global float *x) { x[0] = undeclared_thing; }\n", name="bad")
    ok, log = compile_fn(bad)
    assert not ok and "undeclared_thing" in log
    wrong_name = Kernel(source=good.source, name="missing", build_options="-DN=2.0f")
    assert not compile_fn(wrong_name)[0]


def test_ingest_to_writes_corpus(crawl: tuple[Path, Path], tmp_path: Path) -> None:
    src, inc = crawl
    rep = ingest_to(tmp_path / "out", [src], compile_fn=fake_compile, defines={"SCALE_BIAS": "0.5f"},
                    include_dirs=[inc])
    assert len(read_records(tmp_path / "out")) == rep.kept == 10
    kernels = read_corpus(tmp_path / "out")
    assert len(kernels) == 9 and "k_fake_fail" not in {k.name for k in kernels}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["report"]["near_duplicates_removed"] == 1
    assert manifest["kernels"] == 10


def test_unchecked_without_compile_fn_and_whitespace_fallback(crawl: tuple[Path, Path]) -> None:
    src, inc = crawl
    records, rep = ingest([src / "repo_a" / "vadd.cl", src / "repo_b" / "vadd_reformatted.cl",
                           src / "repo_a" / "multi.cl"], use_clang_format=False)
    assert "clang-format unavailable" in rep.formatter
    assert not rep.compile_checked
    assert rep.exact_duplicates_removed == 1            # the fallback is canonical too
    assert {r["compile_status"] for r in records} == {"unchecked"}
    assert by_name(records)["vadd"]["origin"] == "vadd.cl"
    assert rep.kept == 4


def test_strip_qualifiers_only_touches_keywords() -> None:
    src = ('__kernel void f(__global float *__globalish, __local int *l, __constant float *c,\n'
           '  __read_only image2d_t img) __attribute__((vec_type_hint(float))) {\n'
           '  printf("__global %d", __private_count); __private int q; }\n')
    out = strip_qualifiers(src)
    assert out.startswith("kernel void f(global float *__globalish, local int *l, constant float *c,")
    assert "read_only image2d_t" in out
    assert "__attribute__((vec_type_hint(float)))" in out
    assert '"__global %d"' in out and "__private_count" in out and "private int q" in out


def test_missing_source_is_a_read_failure(tmp_path: Path) -> None:
    records, rep = ingest([tmp_path / "nope.cl"])
    assert records == [] and len(rep.read_failures) == 1 and rep.files_found == 1

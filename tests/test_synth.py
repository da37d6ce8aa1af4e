"""Tests of the synthetic OpenCL kernel generator (the datagen.synth package)."""

from __future__ import annotations

import json
import random
import re

import pytest
from kernelcast.datagen.corpus_store import read_records
from kernelcast.datagen.synth import (
    SynthOptions,
    compile_check,
    dedup_key,
    default_device,
    generate_kernel,
    generate_kernels,
    generate_kernels_with_features,
    normalize_source,
    write_synth_corpus,
)

_KERNEL_RE = re.compile(r"\b(?:__)?kernel\s+void\b")
_GLOBAL_PARAM_RE = re.compile(r"\b(?:__)?global\s+(const\s+)?\w+\s*\*\s*(?:restrict\s+)?(\w+)")


@pytest.fixture(scope="module")
def kernels200():
    return generate_kernels(200, 1234)


def _written_globals(src: str) -> list[str]:
    names = [m.group(2) for m in _GLOBAL_PARAM_RE.finditer(src) if not m.group(1)]
    written = []
    for n in names:
        e = re.escape(n)
        if (re.search(rf"\b{e}\[[^;]*\]\s*(?:[-+*/^|&]?=)(?!=)", src)
                or re.search(rf"vstore\d\([^;]*,\s*{e}\)", src)
                or re.search(rf"atomic_\w+\(\s*&?{e}\b", src)):
            written.append(n)
    return written


def test_determinism():
    a = generate_kernels(60, 7)
    b = generate_kernels(60, 7)
    assert [k.source for k in a] == [k.source for k in b]
    assert [k.name for k in a] == [k.name for k in b]
    c = generate_kernels(60, 8)
    assert [k.source for k in a] != [k.source for k in c]
    # a longer run extends a shorter one
    assert [k.source for k in generate_kernels(20, 7)] == [k.source for k in a[:20]]


def test_metadata(kernels200):
    names = [k.name for k in kernels200]
    assert len(set(names)) == len(names)
    for i, k in enumerate(kernels200):
        assert k.language == "opencl"
        assert k.dims in (1, 2, 3)
        assert k.origin == f"synth:seed=1234:i={i}"
        assert k.name.startswith("synth_") and k.name.endswith(f"_{i:06d}")


def test_generate_kernel_single():
    k = generate_kernel(random.Random(5), 17, SynthOptions())
    assert k.name.endswith("_000017")
    assert len(_KERNEL_RE.findall(k.source)) == 1


def test_distinct_after_normalization(kernels200):
    assert len({normalize_source(k.source) for k in kernels200}) == 200
    assert len({dedup_key(k) for k in kernels200}) == 200
    # the renamed form really hides the name (helpers are named after the kernel)
    for k in kernels200[:20]:
        assert k.name not in dedup_key(k)


def test_normalize_source():
    s = "kernel void f(int n) { // c\n  /* block\n */ int  x = n;\n}\n"
    assert normalize_source(s) == "kernel void f(int n) { int x = n; }"
    assert normalize_source(s, "f") == "kernel void KERNEL(int n) { int x = n; }"


def test_structure(kernels200):
    for k in kernels200:
        assert len(_KERNEL_RE.findall(k.source)) == 1, k.source
        assert re.search(rf"\bvoid\s+{k.name}\s*\(", k.source)
        assert _written_globals(k.source), k.source
        if "double" in k.source:
            assert "cl_khr_fp64" in k.source


def test_features(kernels200):
    pairs = generate_kernels_with_features(50, 1234)
    assert [k.source for k, _ in pairs] == [k.source for k in kernels200[:50]]
    for k, f in pairs:
        assert f["dims"] == k.dims
        assert f["vector_width"] in (1, 2, 4)
        # the argument list matches the signature order
        start = k.source.index(f"void {k.name}(")
        sig = k.source[start:k.source.index(")", start)]
        declared = [re.findall(r"\w+", part)[-1] for part in sig.split("(", 1)[1].split(",")]
        assert declared == [a["name"] for a in f["args"]]
        kinds = [a["kind"] for a in f["args"]]
        assert kinds == sorted(kinds, key=["global", "local", "scalar"].index)   # buffers first
        json.dumps(f)


def test_options_respected():
    ks = generate_kernels(150, 3, SynthOptions(p_local=0.0, p_2d=0.0))
    for k in ks:
        assert k.dims == 1
        assert not re.search(r"\b(?:__)?local\b", k.source), k.source
        assert "barrier(" not in k.source
        assert "get_global_id(1)" not in k.source
    ks = generate_kernels(100, 3, SynthOptions(p_vector=0.0, p_double=0.0, p_atomic=0.0, max_loop_depth=0))
    for k in ks:
        assert not re.search(r"\b(?:float|int|double)[248]\b", k.source)
        assert "double" not in k.source
        assert "atomic_" not in k.source
    many = generate_kernels(100, 4, SynthOptions(p_local=1.0, p_2d=1.0))
    assert all(k.dims in (2, 3) for k in many)
    assert all(re.search(r"\b(?:__)?local\b", k.source) for k in many)


def test_write_synth_corpus(tmp_path):
    out = write_synth_corpus(tmp_path / "c", 12, 9)
    recs = read_records(out)
    assert len(recs) == 12
    assert all("synth_features" in r and r["language"] == "opencl" for r in recs)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == "synth" and manifest["seed"] == 9 and manifest["count"] == 12
    assert manifest["options"]["p_local"] == SynthOptions().p_local
    assert [r["source"] for r in recs] == [k.source for k in generate_kernels(12, 9)]


@pytest.mark.device
def test_compile_30():
    dev = default_device()
    assert dev is not None, "default_device() found no OpenCL device that builds"
    ks = generate_kernels(30, 99, SynthOptions(p_local=0.3, p_vector=0.3, p_double=0.1, p_atomic=0.1))
    res = compile_check(ks, dev, batch=8)
    assert set(res) == {k.name for k in ks}
    failed = {n: log for n, log in res.items() if log}
    assert not failed, next(iter(failed.values()))


@pytest.mark.device
def test_compile_check_bisects_failures():
    dev = default_device()
    assert dev is not None, "default_device() found no OpenCL device that builds"
    ks = generate_kernels(6, 5)
    broken = type(ks[0])(source="__kernel void broken_k(__global float* a) { a[0] = undefined_x; }\n",
                         name="broken_k")
    res = compile_check([*ks[:3], broken, *ks[3:]], dev, batch=7)
    assert res["broken_k"] and "undefined_x" in res["broken_k"]
    assert all(res[k.name] == "" for k in ks)

"""PTX parsing (hand-written fixture), toolchains (clang NVPTX, nvcc, ptxas) where installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernelcast.models.static import ptx as P
from kernelcast.models.static.extract import extract
from kernelcast.models.static.features import StaticFeatures

from kernelcast.schema import Kernel

FIXTURE = Path(__file__).parent / "data" / "static" / "rowsum_loop.ptx"

needs_clang = pytest.mark.skipif(P.find_clang() is None, reason="no clang with the NVPTX back-end")
needs_nvcc = pytest.mark.skipif(P.find_nvcc() is None, reason="nvcc not installed")
needs_ptxas = pytest.mark.skipif(P.find_ptxas() is None, reason="ptxas not installed")


@pytest.fixture(scope="module")
def fixture_ptx() -> str:
    return FIXTURE.read_text()


def test_split_functions_and_entries(fixture_ptx):
    funcs = P.split_functions(fixture_ptx)
    assert [(f.name, f.is_entry) for f in funcs] == [("square", False), ("rowsum", True), ("nested", True)]
    assert P.ptx_entries(fixture_ptx) == ["rowsum", "nested"]


def test_cfg_blocks_and_loop(fixture_ptx):
    f = P.parse_ptx(fixture_ptx, "rowsum")
    labels = [b.label for b in f.blocks]
    assert labels[2:] == ["$L__BB0_2", "$L__BB0_3"]
    assert len(f.blocks) == 4
    assert f.blocks[0].successors == [3, 1]          # predicated bra: target and fall-through
    assert f.blocks[2].successors == [2, 3]          # self loop
    assert f.blocks[3].successors == []              # ret
    assert len(f.loops) == 1
    (lp,) = f.loops
    assert lp.header == 2 and lp.blocks == [2] and lp.back_edges == [[2, 2]] and lp.depth == 1
    assert [b.loop_depth for b in f.blocks] == [0, 0, 1, 0]
    assert f.max_loop_depth == 1


def test_instruction_counts(fixture_ptx):
    f = P.parse_ptx(fixture_ptx, "rowsum")
    c = f.counts
    assert c["ld_global"] == 1 and c["st_global"] == 1 and c["fp32_add"] == 1
    assert c["barrier"] == 1 and c["branch"] == 2 and c["cmp"] == 2 and c["ld_param"] == 4
    assert c["int_mul"] == 4                      # mad.lo.s32, mul.lo.s32, mul.wide.s32 (x2)
    assert f.bytes["ld_global"] == 4 and f.bytes["st_global"] == 8      # st.global.v2.f32
    assert f.n_sync == 1
    # loop body weighted by the default trip count; the called helper's multiply is added
    assert f.weighted["ld_global"] == P.DEFAULT_PTX_TRIP
    assert f.weighted["fp32_mul"] == 1
    assert f.shared_bytes == 512
    assert f.registers_declared == {"pred": 3, "f32": 6, "b32": 10, "b64": 10}
    assert f.n_params == 3 and f.dims_used == 1
    assert f.target == "sm_75" and f.version == "7.5"
    assert f.calls == {"square": 1}


def test_nested_loops_depth(fixture_ptx):
    f = P.parse_ptx(fixture_ptx, "nested")
    assert sorted(lp.depth for lp in f.loops) == [1, 2]
    assert f.max_loop_depth == 2
    assert f.counts["fp32_fma"] == 1
    assert f.weighted["fp32_fma"] == P.DEFAULT_PTX_TRIP ** 2
    assert f.dims_used == 2                       # reads %tid.y
    assert P.parse_ptx(fixture_ptx, "nested", trip=2.0).weighted["fp32_fma"] == 4


def test_default_entry_and_missing(fixture_ptx):
    assert P.parse_ptx(fixture_ptx).kernel_name == "rowsum"
    with pytest.raises(ValueError, match="no entry"):
        P.parse_ptx(fixture_ptx, "nope")


def test_classify():
    assert P.classify("ld.global.nc.v4.f32") == ("ld_global", 16)
    assert P.classify("st.shared.u8") == ("st_shared", 1)
    assert P.classify("ld.u32") == ("ld_generic", 4)
    assert P.classify("atom.global.add.u32") == ("atom_global", 4)
    assert P.classify("red.shared.add.f32") == ("atom_shared", 4)
    assert P.classify("fma.rn.f32")[0] == "fp32_fma"
    assert P.classify("add.rn.f64")[0] == "fp64_add"
    assert P.classify("sqrt.rn.f64")[0] == "fp64_div"
    assert P.classify("sin.approx.ftz.f32")[0] == "sfu"
    assert P.classify("ex2.approx.f32")[0] == "sfu"
    assert P.classify("mad.lo.s32")[0] == "int_mul"
    assert P.classify("shr.s64")[0] == "int_bit"
    assert P.classify("bar.sync")[0] == "barrier"
    assert P.classify("setp.lt.s32")[0] == "cmp"
    assert P.classify("cvt.rn.f32.s32")[0] == "conv"


def test_builtin_calls_demangled():
    assert P.demangle_builtin("_Z13get_global_idj") == "get_global_id"
    assert P._builtin_class("_Z3sinf") == ("sfu", 0)
    assert P._builtin_class("_Z7barrierj") == ("barrier", 0)
    assert P._builtin_class("_Z10atomic_addPU3AS3Vii") == ("atom_shared", 4)
    assert P._builtin_class("_Z6vload4mPU3AS1Kf") == ("ld_global", 16)


def test_ptxas_output_parsing():
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'vadd' for 'sm_75'
ptxas info    : Function properties for vadd
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
"""
    r = P.parse_ptxas_output(text)
    assert r == {"vadd": {"stack_bytes": 8, "spill_stores": 4, "spill_loads": 4, "registers": 40,
                          "barriers": 1, "shared_bytes": 2048, "cmem_bytes": 380}}


@needs_ptxas
def test_ptxas_resources_fixture(fixture_ptx):
    r = P.ptxas_resources(fixture_ptx, "sm_75")
    assert r["rowsum"]["registers"] > 0 and r["rowsum"]["shared_bytes"] == 512
    assert r["rowsum"]["barriers"] == 1


VADD_CL = """
__kernel void vadd(__global const float *a, __global const float *b, __global float *c, const int n) {
    int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
__kernel void rowsum(__global const float *in, __global float *out, const int k) {
    int gid = get_global_id(0);
    float acc = 0.0f;
    for (int j = 0; j < k; j++) acc += in[gid * k + j];
    out[gid] = acc;
}
"""


@needs_clang
def test_opencl_to_ptx_vector_add_and_loop():
    text = P.opencl_to_ptx(Kernel(source=VADD_CL, name="vadd"))
    assert text is not None and ".entry vadd" in text and ".entry rowsum" in text
    v = P.parse_ptx(text, "vadd")
    assert v.counts["ld_global"] == 2 and v.counts["st_global"] == 1 and v.counts["fp32_add"] == 1
    assert v.loops == [] and v.calls.get("_Z13get_global_idj") == 1
    r = P.parse_ptx(text, "rowsum")
    assert r.loops and r.max_loop_depth >= 1
    assert r.counts["ld_global"] >= 1 and r.counts["fp32_add"] >= 1
    # the loads sit in loops
    assert all(b.loop_depth >= 1 for b in r.blocks if b.counts.get("ld_global"))


@needs_clang
def test_opencl_to_ptx_bad_source_is_none():
    assert P.opencl_to_ptx(Kernel(source="__kernel void k( { }", name="k")) is None
    assert P.opencl_to_ptx(Kernel(source="", name="k", language="cuda")) is None


@needs_clang
@needs_ptxas
def test_extract_opencl_with_resources():
    sf = extract(Kernel(source=VADD_CL, name="rowsum"), arch="sm_75")
    assert sf.errors == []
    assert sf.source is not None and sf.ptx is not None and sf.ptx.kernel_name == "rowsum"
    assert sf.resources is not None and sf.resources["registers"] > 0
    assert set(sf.seconds) == {"source", "compile", "ptx"}
    back = StaticFeatures.from_dict(sf.to_dict())
    assert back == sf


VADD_CU = """
extern "C" __global__ void vadd(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
__global__ void scale(float *a, float s, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] *= s;
}
"""


@needs_nvcc
def test_cuda_to_ptx_vector_add():
    text = P.cuda_to_ptx(VADD_CU, "sm_70")          # below CUDA 13's minimum: falls back
    assert text is not None
    v = P.parse_ptx(text, "vadd")
    assert v.counts["ld_global"] == 2 and v.counts["st_global"] == 1 and v.counts["fp32_add"] == 1
    s = P.parse_ptx(text, "scale")                  # C++-mangled entry found by its name
    assert s.loops and s.counts["fp32_mul"] >= 1
    sf = extract(Kernel(source=VADD_CU, name="vadd", language="cuda"))
    assert sf.ptx is not None and sf.toolchain["arch"] == P.resolve_arch(None)
    assert sf.source is not None and sf.source.kernel_name == "vadd"      # extern "C" kernels are kernels


def test_extract_without_ptx_never_raises():
    sf = extract(Kernel(source="__kernel void k( {", name="k"), ptx=False)
    assert sf.source is None and sf.errors and sf.errors[0].startswith("source:")


@pytest.mark.parametrize("banner, major", [
    ("Debian clang version 16.0.6 (15~deb12u1)\nTarget: x86_64-pc-linux-gnu", 16),
    ("Ubuntu clang version 15.0.7\n", 15),
    ("clang version 19.1.0 (https://github.com/llvm/llvm-project a4bf6cd7)", 19),
    ("not a compiler\n", None),
])
def test_clang_major_reads_the_version_banner(tmp_path, banner, major):
    fake = tmp_path / "clang"
    fake.write_text("#!/bin/sh\ncat <<'EOF'\n" + banner + "\nEOF\n")
    fake.chmod(0o755)
    assert P.clang_major(str(fake)) == major


def test_clang_major_of_a_missing_binary_is_none(tmp_path):
    assert P.clang_major(str(tmp_path / "no-such-clang")) is None

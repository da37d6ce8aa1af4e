"""The CUDA front end on the idioms of Kernel Tuner kernels: include directories, ``#pragma unroll``
with a macro (0: the compiler decides), ``extern "C"``, host-filled ``__constant__`` arrays,
typedef'd and macro argument types, OpenCL compiled as CUDA through a header, HIP spellings,
tensor-core kernels refused, Kernel Tuner's launch macros, templates. Real ``cpp``, libclang
and the analytical model on the small kernels of ``tests/data/cuda/kt``."""

from __future__ import annotations

import ast
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
from kernelcast.models.static import analyze_source

from kernelcast.clang import ParseError
from kernelcast.cuda import (
    UnsupportedKernel,
    cuda_kernel_info,
    cuda_kernel_signatures,
    flatten_includes,
    launch_defines,
    preprocess_cuda,
    tensor_core_reason,
    unreferenced_parameters,
    warn_unreferenced,
)
from kernelcast.schema import Kernel

ROOT = Path(__file__).resolve().parent.parent
KT = Path(__file__).parent / "data" / "cuda" / "kt"
INC = str(KT / "include")


def src(name: str) -> str:
    return (KT / name).read_text()


def kc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def one_error_line(r: subprocess.CompletedProcess[str], text: str) -> None:
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert text in r.stderr, r.stderr


def test_include_directories_reach_the_parse_and_the_analysis():
    with pytest.raises(ParseError, match="'stencil_params.h' file not found.*-I DIR"):
        cuda_kernel_info(src("stencil_const.cu"), "stencil", "-Dunroll_taps=0", filename="stencil_const.cu")
    for opts, dirs in ((f"-I {INC} -Dunroll_taps=0", ()), ("-Dunroll_taps=0", (INC,)), (f"-I{INC}", ())):
        info = cuda_kernel_info(src("stencil_const.cu"), "stencil", opts, filename="stencil_const.cu",
                                include_dirs=dirs)
        assert [(p.name, p.dtype) for p in info.params] == [("out", "float"), ("in", "float"), ("n", "int")]
    # the header inlined: a self-contained source (what a dataset stores)
    flat = flatten_includes(src("stencil_const.cu"), [INC])
    assert "#define TAPS (2 * RADIUS + 1)" in flat and '#include "stencil_params.h"' not in flat
    feats = analyze_source(Kernel(source=src("stencil_const.cu"), name="stencil", language="cuda",
                                  build_options=f"-I {INC} -Dunroll_taps=0"))
    # TAPS = 7 taps from the header: 7 fma per in-range thread
    assert feats.ops["fp32_fma"].startswith("7*")


def test_pragma_unroll_macro_zero_is_the_compilers_choice():
    text = src("stencil_const.cu")
    zero = preprocess_cuda(text, f"-I {INC} -Dunroll_taps=0")
    assert "#pragma unroll" not in zero
    seven = preprocess_cuda(text, f"-I {INC} -Dunroll_taps=7")
    assert "#pragma unroll 7" in seven
    expr = preprocess_cuda("#define U (2*2)\n__global__ void k(float* a) {\n#pragma unroll U\n"
                           "for (int i = 0; i < 8; i++) a[i] = 0; }\n")
    assert "#pragma unroll 4" in expr
    # lines of a file without includes keep their numbers
    plain = src("typed_args.cu")
    out = preprocess_cuda(plain, "-DVW=1").split("\n")
    line = next(i for i, x in enumerate(plain.split("\n")) if "x[i] = alpha * x[i];" in x)
    assert "x[i] = alpha * x[i];" in out[line]
    # a macro the configuration leaves undefined gives no factor; a template parameter is kept
    assert "#pragma unroll" not in preprocess_cuda(text, f"-I {INC}")
    tmpl = "template <int N> __global__ void k(float* a) {\n#pragma unroll N\nfor (int i = 0; i < N; i++) a[i] = 0; }\n"
    assert "#pragma unroll N" in preprocess_cuda(tmpl)
    for v in ("0", "4"):
        info = cuda_kernel_info(text, "stencil", f"-I {INC} -Dunroll_taps={v}")
        assert len(info.params) == 3


def test_extern_c_kernels_single_and_block():
    assert list(cuda_kernel_signatures(src("vector_add.cu"), "-Dblock_size_x=128")) == ["vector_add"]
    assert list(cuda_kernel_signatures(src("stencil_const.cu"), f"-I {INC}")) == ["stencil"]
    two = 'extern "C" {\n__global__ void a(float* x) { x[threadIdx.x] = 1; }\n' \
          '__global__ void b(float* x) { x[threadIdx.x] = 2; }\n}\n__global__ void c(int* y) { y[0] = 0; }\n'
    assert sorted(cuda_kernel_signatures(two)) == ["a", "b", "c"]
    feats = analyze_source(Kernel(source=two, name="b", language="cuda"))
    assert feats.kernel_name == "b" and len(feats.accesses) == 1


def test_host_filled_constant_array_analyzes_and_predicts(tmp_path):
    feats = analyze_source(Kernel(source=src("stencil_const.cu"), name="stencil", language="cuda",
                                  build_options=f"-I {INC} -Dunroll_taps=0"))
    spaces = {a.space for a in feats.accesses}
    assert "constant" in spaces and "global" in spaces
    r = kc("predict", "--kernel", str(KT / "stencil_const.cu"), "--gsize", "4096", "--lsize", "128",
           "--profile", "a100", f"--build-options=-I {INC} -Dunroll_taps=0", "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["predictions"][0]["analytical"]["time_us"]
    assert t is not None and math.isfinite(t) and t > 0


def test_a_prediction_that_is_not_finite_is_an_error(tmp_path):
    # __syncthreads_count parses as CUDA but has no C++ for OpenCL translation: the analysis fails
    p = tmp_path / "k.cu"
    p.write_text("__global__ void k(float *a, int n) {\n int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                 " int c = __syncthreads_count(i < n);\n if (i < n) a[i] = c;\n}\n")
    for extra in ((), ("--json",)):
        r = kc("predict", "--kernel", str(p), "--gsize", "1024", "--lsize", "256", "--profile", "a100", *extra)
        one_error_line(r, "no finite prediction: static analysis failed")
        assert "energy calibration" not in r.stderr and "nan" not in r.stdout
        assert r.stdout == ""


def test_unreferenced_tune_parameters_are_named_once(caplog):
    text = src("stencil_const.cu")
    assert unreferenced_parameters(text, ["unroll_taps", "use_shmem", "TAPS", "RADIUS"], [INC]) == ["use_shmem"]
    # without the include directory the header's macros are not seen
    assert unreferenced_parameters(text, ["RADIUS"]) == ["RADIUS"]
    with caplog.at_level(logging.WARNING, logger="kernelcast.cuda"):
        for _ in range(3):
            assert warn_unreferenced(text, ["use_shmem", "use_cmem", "unroll_taps"], "stencil.cu") == \
                ["use_shmem", "use_cmem"]
    msgs = [r.getMessage() for r in caplog.records if "tune parameter" in r.getMessage()]
    assert len(msgs) == 1 and "use_shmem, use_cmem" in msgs[0] and "stencil.cu" in msgs[0]


@pytest.mark.parametrize("vw,dtype", [("1", "float"), ("2", "float2"), ("4", "float4")])
def test_typedef_and_macro_argument_types_follow_the_defines(vw, dtype):
    info = cuda_kernel_info(src("typed_args.cu"), "scale", f"-DVW={vw}")
    assert [(p.name, p.kind, p.dtype) for p in info.params] == \
        [("x", "buffer", dtype), ("alpha", "scalar", "float"), ("n", "scalar", "int")]


def test_typedef_argument_binds_by_simple_selection_and_by_arg():
    base = ["predict", "--kernel", str(KT / "typed_args.cu"), "--gsize", "4096", "--lsize", "64", "--profile",
            "a100", "--build-options=-DVW=4", "--json"]
    r = kc(*base)
    assert r.returncode == 0, r.stderr
    r = kc(*base, "--arg", "alpha=1.5")
    assert r.returncode == 0, r.stderr
    args = {a["name"]: a for a in json.loads(r.stdout)["predictions"][0]["args"]}
    assert args["alpha"]["dtype"] == "float" and args["x"]["dtype"] == "float4"


def test_opencl_compiled_as_cuda_through_a_header():
    opts = f"-DVW=8 -I {KT}"
    info = cuda_kernel_info(src("cl_as_cuda.cu"), "blocksum", opts)
    assert [(p.name, p.dtype) for p in info.params] == [("restrict_in", "float8"), ("out", "float")]
    feats = analyze_source(Kernel(source=src("cl_as_cuda.cu"), name="blocksum", language="cuda", build_options=opts))
    # 8 components summed (7 adds) per thread, one barrier, the 64-term sum by thread 0
    assert feats.ops["barrier"] == "1"
    assert feats.ops["fp32_add"] == "64*min(1, 1/lsize0) + 7"
    assert any("get_global_id left out" in n for n in feats.notes)
    # one 32-byte load of the float8 struct per thread
    loads = [(a.arg, a.elem_bytes, a.count) for a in feats.accesses if a.space == "global" and a.kind == "load"]
    assert loads == [("restrict_in", 32, "1")]


def test_hip_kernel_parses_as_cuda():
    info = cuda_kernel_info(src("saxpy.cu.hip"), "saxpy", filename="saxpy.cu.hip")
    assert [p.name for p in info.params] == ["y", "x", "a", "n"]
    feats = analyze_source(Kernel(source=src("saxpy.cu.hip"), name="saxpy", language="cuda"))
    assert feats.ops["fp32_fma"].startswith("min(1")
    r = kc("predict", "--kernel", str(KT / "saxpy.cu.hip"), "--gsize", "65536", "--lsize", "256", "--profile",
           "a100", "--json")
    assert r.returncode == 0, r.stderr


def test_tensor_core_kernels_are_refused_in_one_line():
    assert tensor_core_reason(src("wmma_tile.cu")) == "<mma.h>"
    assert tensor_core_reason("#include <cuda/pipeline>\n") == "<cuda/pipeline>"
    assert tensor_core_reason("nvcuda::wmma::fragment<int> f;") == "nvcuda::wmma"
    assert tensor_core_reason(src("vector_add.cu")) is None
    with pytest.raises(UnsupportedKernel, match="tensor-core kernels"):
        cuda_kernel_signatures(src("wmma_tile.cu"))
    r = kc("predict", "--kernel", str(KT / "wmma_tile.cu"), "--gsize", "256", "--lsize", "32", "--profile", "a100")
    one_error_line(r, "tensor-core kernels (<mma.h>) are not modelled")


def test_launch_defines_follow_kernel_tuner():
    assert launch_defines("-DN=4", (1024, 64), (32, 8)).split() == \
        ["-DN=4", "-Dkernel_tuner=1", "-Dblock_size_x=32", "-Dgrid_size_x=32", "-Dblock_size_y=8",
         "-Dgrid_size_y=8", "-Dblock_size_z=1", "-Dgrid_size_z=1"]
    # a macro the user defines is kept as given
    assert "-Dblock_size_x=128" not in launch_defines("-Dblock_size_x=64", (1024,), (128,))
    assert launch_defines("", (100,), (32,)).split()[2] == "-Dgrid_size_x=4"


def test_predict_defines_block_size_x_from_lsize():
    base = ["predict", "--kernel", str(KT / "vector_add.cu"), "--gsize", "80000000", "--profile", "a100"]
    r = kc(*base, "--lsize", "256", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["predictions"][0]
    assert d["explanation"]["bound"] == "memory" and d["analytical"]["time_us"] > 0
    one_error_line(kc(*base), "uses block_size_x (Kernel Tuner's launch macros")
    # the user's own define wins (and no --lsize is needed for it)
    r = kc(*base, "--build-options=-Dblock_size_x=256", "--json")
    assert r.returncode == 0, r.stderr


def test_tune_defines_block_size_x_per_configuration():
    r = kc("tune", "--kernel", str(KT / "vector_add.cu"), "--gsize", "1048576", "--profile", "a100", "--max-wg",
           "256", "--json")
    assert r.returncode == 0, r.stderr


def test_template_kernel_named_with_its_arguments():
    info = cuda_kernel_info(src("scaled_copy.cu"), "scaled_copy<float, 4>")
    assert [(p.name, p.dtype) for p in info.params] == [("dst", "float"), ("src", "float"), ("s", "float")]
    feats = analyze_source(Kernel(source=src("scaled_copy.cu"), name="scaled_copy<double, 2>", language="cuda"))
    assert feats.ops["fp64_mul"] == "2"
    r = kc("predict", "--kernel", str(KT / "scaled_copy.cu"), "--name", "scaled_copy<float, 4>", "--gsize", "4096",
           "--lsize", "128", "--profile", "a100", "--json")
    assert r.returncode == 0, r.stderr


def test_static_source_does_not_import_static_cuda():
    tree = ast.parse((ROOT / "models" / "static" / "source.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.endswith("static.cuda") for m in mods)
    assert "kernelcast.models.static.source" in {n.module for n in ast.walk(
        ast.parse((ROOT / "models" / "static" / "cuda.py").read_text())) if isinstance(n, ast.ImportFrom)}


def test_vector_constructors_and_user_overloads():
    src = ("inline __device__ float2 make_float2(float s) { return make_float2(s, s); }\n"
           "extern \"C\" __global__ void k(float2 *o, const float *a) {\n"
           "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "    float2 v = make_float2(a[i]);\n"
           "    o[i] = make_float2(v.x * 2.0f, v.y);\n}\n")
    feats = analyze_source(Kernel(source=src, name="k", language="cuda"))
    assert feats.ops["fp32_mul"] == "1"
    assert sorted((a.arg, a.kind) for a in feats.accesses if a.space == "global") == [("a", "load"), ("o", "store")]


def test_shared_array_in_a_nested_scope_is_allocated_once_per_block():
    src = ("#define B 64\n"
           "__global__ void tile_sum(float *out, const float *in, int n) {\n"
           "    int i = blockIdx.x * B + threadIdx.x;\n"
           "    if (i < n) {\n"
           "        __shared__ float part[B];\n"
           "        part[threadIdx.x] = in[i];\n"
           "        __syncthreads();\n"
           "        if (threadIdx.x == 0) out[blockIdx.x] = part[0] + part[B - 1];\n"
           "    }\n}\n")
    feats = analyze_source(Kernel(source=src, name="tile_sum", language="cuda"))
    assert feats.local_mem_bytes == 64 * 4
    assert any("part" in n and "outermost scope" in n for n in feats.notes)
    assert sorted({(a.arg, a.space) for a in feats.accesses}) == \
        [("in", "global"), ("out", "global"), ("part", "local")]


def test_measure_defines_the_launch_macros_on_a_real_build(tmp_path):
    # a real build and launch on the OpenCL device: the kernel compiles only with block_size_x and
    # grid_size_x defined from --lsize/--gsize
    p = tmp_path / "fill.cl"
    p.write_text("__kernel void fill(__global float *a) {\n"
                 "    a[get_group_id(0) * block_size_x + get_local_id(0)] = (float)grid_size_x;\n}\n")
    r = kc("measure", "--kernel", str(p), "--gsize", "1024", "--lsize", "64", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "ok"
    one_error_line(kc("measure", "--kernel", str(p), "--gsize", "1024"), "uses block_size_x, grid_size_x")


def test_host_code_in_the_kernel_file_parses_and_is_left_out():
    assert list(cuda_kernel_signatures(src("with_host.cu"), filename="with_host.cu")) == ["halve"]
    feats = analyze_source(Kernel(source=src("with_host.cu"), name="halve", language="cuda"))
    assert feats.ops["fp32_mul"].startswith("min(1")
    assert any("run_halve left out" in n for n in feats.notes)


def test_noinline_helper_is_translated():
    src = ("__noinline__ __device__ float twice(float v) { return 2.0f * v; }\n"
           "__global__ void k(float *a) { a[threadIdx.x] = twice(a[threadIdx.x]); }\n")
    feats = analyze_source(Kernel(source=src, name="k", language="cuda"))
    assert feats.ops["fp32_mul"] == "1"

"""CUDA kernels through the static path: real libclang (CUDA mode, then the C++ for OpenCL
translation), real ``nvcc -ptx`` and ``ptxas -v``; feature values computed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kernelcast.models.static import analyze_source, extract
from kernelcast.models.static import ptx as P

from kernelcast.clang import ParseError
from kernelcast.cuda import cuda_kernel_info, cuda_kernel_signatures, split_name, translate
from kernelcast.schema import Kernel

DATA = Path(__file__).parent / "data" / "cuda"
CU = (DATA / "kernels.cu").read_text()
CL = (DATA / "kernels.cl").read_text()
needs_nvcc = pytest.mark.skipif(P.find_nvcc() is None or P.find_ptxas() is None, reason="nvcc/ptxas not installed")

ENV1 = {"gsize0": 1 << 20, "lsize0": 256, "n": 1 << 20}
ENV2 = {"gsize0": 1024, "gsize1": 1024, "lsize0": 16, "lsize1": 16, "n": 1024}


def cuda(name: str, opts: str = "") -> Kernel:
    return Kernel(source=CU, name=name, language="cuda", build_options=opts)


def test_split_name():
    assert split_name("reduce<float, 256>") == ("reduce", ["float", "256"])
    assert split_name("k<Pair<int, 2>, 8>") == ("k", ["Pair<int, 2>", "8"])
    assert split_name("vadd") == ("vadd", None)


def test_signatures_and_template_arguments():
    sigs = cuda_kernel_signatures(CU)
    assert list(sigs) == ["vadd", "matmul", "reduce"]
    assert [(p.name, p.kind, p.qualifier, p.dtype, p.is_const) for p in sigs["vadd"]] == [
        ("a", "buffer", "global", "float", True), ("b", "buffer", "global", "float", True),
        ("c", "buffer", "global", "float", False), ("n", "scalar", "private", "int", False)]
    info = cuda_kernel_info(CU, "reduce<int, 64>")
    assert info.base == "reduce" and [p.dtype for p in info.params] == ["int", "int", "int"]
    with pytest.raises(ParseError, match="is a template"):
        cuda_kernel_info(CU, "reduce")
    with pytest.raises(ParseError, match="takes 2 template"):
        cuda_kernel_info(CU, "reduce<int>")
    with pytest.raises(ParseError, match="undeclared identifier 'oops'"):
        cuda_kernel_signatures("__global__ void k(float* a) { a[threadIdx.x] = oops; }")


def test_translation_maps_builtins():
    tr = translate(CU, "reduce<float, 128>")
    body = tr.source[len(tr.source) - 700:]
    assert "__kernel void reduce(__global const float* in, __global float* out, int n)" in tr.source
    assert "get_local_id(0)" in body and "get_group_id(0)" in body and "__local float s[(128)]" in body
    assert "atomicAdd" not in body and "__global__" not in tr.source.split("\n", tr.prelude_lines)[-1]
    assert tr.build_options.startswith("-cl-std=CLC++")


def test_vadd_features():
    f = analyze_source(cuda("vadd"))
    e = f.evaluate(ENV1)
    # one thread: loads a[i], b[i] (4 B each), stores c[i], one fp32 add, stride 1 along x
    assert e["global_load_bytes"] == 8 and e["global_store_bytes"] == 4 and e["fp32_add"] == 1
    assert e["eta_coal"] == 1.0 and e["barrier"] == 0
    assert {a.stride0 for a in f.accesses} == {"1"}
    assert f.branches[0].kind == "if" and f.branches[0].line == 8       # the CUDA file's line


def test_matmul_features():
    e = analyze_source(cuda("matmul")).evaluate(ENV2)
    # n/TILE = 64 tiles; per tile 2 global loads, 2 barriers, 16 fma and 2x16 shared loads
    assert e["global_loads"] == 128 and e["global_load_bytes"] == 512
    assert e["barrier"] == 128 and e["fp32_fma"] == 64 * 16
    assert e["local_loads"] == 64 * 32 and e["local_stores"] == 128
    assert e["local_mem_bytes"] == 2 * 16 * 16 * 4 and e["dims"] == 2


@pytest.mark.parametrize("block,barriers", [(128, 8), (256, 9)])
def test_template_reduction_with_define(block, barriers):
    # BLOCK comes from -D; the loop k = BLOCK/2 .. 1 halves: log2(BLOCK) iterations + the first barrier
    e = analyze_source(cuda("reduce<float, BLOCK>", f"-DBLOCK={block}")).evaluate({**ENV1, "lsize0": block})
    assert e["barrier"] == barriers and e["local_mem_bytes"] == 4 * block
    assert e["global_atomics"] == pytest.approx(1 / block)          # only thread 0 of a block
    assert e["global_load_bytes"] == 4


@pytest.mark.parametrize("cu_name,cl_name,opts_cu,opts_cl,env", [
    ("vadd", "vadd", "", "-DBS=256", ENV1),
    ("matmul", "matmul", "", "-DBS=256", ENV2),
    ("reduce<int, 256>", "reduce", "", "-DBS=256", ENV1),
])
def test_cuda_and_opencl_twins_match(cu_name, cl_name, opts_cu, opts_cl, env):
    a = analyze_source(cuda(cu_name, opts_cu)).evaluate(env)
    b = analyze_source(Kernel(source=CL, name=cl_name, build_options=opts_cl)).evaluate(env)
    assert set(a) == set(b)
    diff = {k: (a[k], b[k]) for k in a if abs(float(a[k]) - float(b[k])) > 1e-9}
    assert diff == {}


@needs_nvcc
def test_ptx_features_vadd_and_matmul():
    sf = extract(cuda("vadd"), arch="sm_80")
    assert sf.errors == [] and sf.language == "cuda"
    assert sf.ptx is not None and sf.ptx.counts["ld_global"] == 2 and sf.ptx.counts["st_global"] == 1
    assert sf.resources is not None and 4 <= sf.resources["registers"] <= 64 and sf.resources["spill_stores"] == 0
    mm = extract(cuda("matmul"), arch="sm_80")
    assert mm.ptx is not None and mm.resources is not None
    assert mm.resources["shared_bytes"] == 2048 and mm.ptx.shared_bytes == 2048
    assert mm.ptx.counts["barrier"] == 2 and mm.ptx.counts["ld_global"] == 2


@needs_nvcc
def test_ptx_template_instantiated():
    sf = extract(cuda("reduce<float, BLOCK>", "-DBLOCK=128"), arch="sm_80")
    assert sf.ptx is not None and sf.ptx.kernel_name.startswith("_Z6reduceIfLi128E")
    assert sf.resources is not None and sf.resources["shared_bytes"] == 512
    assert sf.ptx.counts.get("atom_global") == 1
    other = extract(cuda("reduce<int, 64>"), arch="sm_80")
    assert other.ptx is not None and other.ptx.kernel_name.startswith("_Z6reduceIiLi64E")


def kc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_predict_cuda_kernel_cli(tmp_path):
    p = tmp_path / "k.cu"
    p.write_text(CU)
    r = kc("predict", "--kernel", str(p), "--name", "vadd", "--gsize", "1048576", "--lsize", "256",
           "--profile", "a100", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)["predictions"][0]
    # 12 B per thread over 2^20 threads at the A100's 1555 GB/s: memory bound
    floor_us = 12 * (1 << 20) / 1555e9 * 1e6
    assert d["explanation"]["bound"] == "memory"
    assert floor_us <= d["analytical"]["time_us"] <= 2 * floor_us + 10
    r = kc("predict", "--kernel", str(p), "--name", "reduce<float, 256>", "--gsize", "1048576", "--lsize", "256",
           "--profile", "a100", "--json")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("src,name,msg", [
    ("__global__ void k(float* a) { a[threadIdx.x] = nope; }", None, "undeclared identifier 'nope'"),
    ("__global__ void k(float* a) { a[threadIdx.x] = 1.0f }", None, "expected ';'"),
    (CU, "reduce", "is a template"),
    (CU, "nokernel", "no __global__ kernel named 'nokernel'"),
])
def test_bad_cuda_exits_2_and_writes_nothing(tmp_path, src, name, msg):
    p = tmp_path / "bad.cu"
    p.write_text(src)
    args = ["predict", "--kernel", str(p), "--gsize", "1024", "--lsize", "256", "--profile", "a100"]
    r = kc(*args, *(["--name", name] if name else []), cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["bad.cu"]


SOFTSUM = """#include <cuda_runtime.h>
#include <stdint.h>
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ float act(const float* __restrict__ p, int32_t i) { return expf(__ldg(p + i)); }

__global__ void __launch_bounds__(256) softsum(const float* __restrict__ x, float* __restrict__ out, int n) {
    int stride = gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) acc += act(x, i);
    acc = warp_sum(acc);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, fminf(acc, 1e30f));
}
"""


def test_grid_stride_helpers_shuffles_and_includes():
    f = analyze_source(Kernel(source=SOFTSUM, name="softsum", language="cuda"))
    e = f.evaluate({"gsize0": 1 << 20, "lsize0": 256, "n": 1 << 24})
    # grid-stride loop: n / (gridDim * blockDim) = 16 trips, each one __ldg load and one expf
    assert e["global_loads"] == 16 and e["global_load_bytes"] == 64 and e["sfu"] == 16
    # 16 accumulations + 5 shuffle-reduction adds + fminf in lane 0 of each warp (1/32)
    assert e["fp32_add"] == pytest.approx(16 + 5 + 1 / 32)
    assert e["global_atomics"] == pytest.approx(1 / 32)
    assert "builtin sub_group_shuffle_down not classified" in f.notes


@needs_nvcc
def test_ptx_counts_the_shuffles():
    sf = extract(Kernel(source=SOFTSUM, name="softsum", language="cuda"), arch="sm_80")
    assert sf.errors == [] and sf.ptx is not None
    assert sf.ptx.counts.get("warp") == 5            # five shfl.sync.down (the loop is unrolled by nvcc)


def test_dynamic_shared_memory_is_a_local_parameter():
    src = (DATA / "kernels.cu").read_text() + """
template <typename T> __global__ void blocksum(const T* in, T* out, int n) {
    extern __shared__ T buf[];
    unsigned int tid = threadIdx.x, i = blockIdx.x * blockDim.x + threadIdx.x;
    buf[tid] = i < n ? in[i] : T(0);
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) { if (tid < s) buf[tid] += buf[tid + s]; __syncthreads(); }
    if (tid == 0) out[blockIdx.x] = buf[0];
}
"""
    info = cuda_kernel_info(src, "blocksum<double>")
    assert [(p.name, p.kind, p.dtype) for p in info.params][-1] == ("buf", "local", "double")
    f = analyze_source(Kernel(source=src, name="blocksum<double>", language="cuda"))
    e = f.evaluate({"gsize0": 1 << 20, "lsize0": 256, "n": 1 << 20, "len_buf": 256})
    # 256 doubles of shared memory; the halving loop over blockDim.x = 256 runs log2(256) = 8 times
    assert f.local_args == {"buf": 8} and e["local_mem_bytes"] == 2048 and e["barrier"] == 9


def test_a_configuration_macro_named_like_a_template_parameter_does_not_break_the_parse():
    # Kernel Tuner scripts define their parameters as macros; T or vx must not reach the
    # declarations the analysis adds for CUDA's built-ins (as they reach none of CUDA's own headers)
    src = """__global__ void scale(float* o, const float* a) {
        float s[T];
        for (int k = 0; k < T; k++) s[k] = a[threadIdx.x * T + k] * 2.0f;
        o[threadIdx.x] = atomicAdd(o, s[0]) + __ldg(a) + __shfl_sync(0xffffffffu, s[vx], 0); }"""
    sf = analyze_source(Kernel(source=src, name="scale", language="cuda", build_options="-DT=4 -Dvx=1"))
    assert sf.evaluate({"gsize0": 64, "lsize0": 64})["fp32_mul"] == pytest.approx(4.0)

"""CUDA C++ kernels: libclang in CUDA mode, kernel signatures, and a translation to C++ for OpenCL.

The libclang wheel ships no CUDA resource headers and clang 18 does not support CUDA 13's headers,
so the source is parsed in CUDA mode (``-x cuda --cuda-device-only -nocudainc``) with a small shim
of our own (:data:`CUDA_SHIM`): the execution-space and memory-space attributes, ``threadIdx``,
``blockIdx``, ``blockDim``, ``gridDim``, ``warpSize``, ``__syncthreads``/fences, atomics, warp
shuffles/votes, ``__ldg``, the math functions, ``make_float2``-style constructors and, for host
code in a kernel file, the common runtime API. A call of anything the shim does not declare is a
parse error (:class:`kernelcast.clang.ParseError`), as it is for nvcc without the header that
declares it.

Before parsing, :func:`preprocess_cuda` runs the C preprocessor over the source with one
configuration's ``-D``/``-I`` options (Kernel Tuner's tune parameters, include directories),
stand-in toolkit headers (HIP's map its spellings to CUDA's) and resolves ``#pragma unroll N``
(``N`` = 0: the compiler decides): parsing, the translation and nvcc all see the source of that
configuration. :func:`launch_defines` adds Kernel Tuner's ``block_size_x/y/z``,
``grid_size_x/y/z`` and ``kernel_tuner`` macros of a launch; :func:`tensor_core_reason` names why
a kernel is a tensor-core kernel, which kernelcast does not model (:class:`UnsupportedKernel`).

:func:`translate` rewrites one kernel, by the tokens of the CUDA translation unit, into C++ for
OpenCL (parsed with ``-cl-std=CLC++``) so that the OpenCL source walker counts it in the same
vocabulary: ``threadIdx.x`` -> ``get_local_id(0)``, ``blockIdx.x`` -> ``get_group_id(0)``,
``blockDim.x`` -> ``get_local_size(0)``, ``gridDim.x`` -> ``get_num_groups(0)`` (each cast to
``unsigned int``, CUDA's type), ``__shared__`` -> ``__local``, ``__syncthreads()`` ->
``barrier``, ``__threadfence*`` -> ``mem_fence``, ``atomicAdd`` -> ``atomic_add`` (and the other
atomics), ``__shfl*_sync`` -> ``sub_group_shuffle*``, ``expf`` -> ``exp``, ``__expf`` ->
``native_exp`` and the like; pointer parameters of the kernel get ``__global``. A template
kernel is named with its arguments, as Kernel Tuner names them (``reduce<float, 256>``): the
template header is dropped and each template parameter replaced by its argument inside the
kernel. Host functions (no ``__device__``/``__global__``) are blanked, ``extern "C"`` is dropped,
a ``__constant__`` array without initializer (filled by the host) becomes an ``extern __constant``
array, ``__shared__`` arrays of nested scopes move to the kernel's outermost scope, and user types
named like OpenCL vector types (an OpenCL-as-CUDA header's ``float8`` struct) are renamed. The
translation keeps the line numbers of the preprocessed source after a prelude of
:attr:`Translation.prelude_lines` lines.

Dynamic shared memory (``extern __shared__ T s[];`` in the kernel) becomes a ``__local T* s``
parameter after the real ones, as OpenCL writes it (:func:`dynamic_shared`).

Not handled (a note, or a parse error): file-scope ``extern __shared__`` and ``extern __shared__``
in device functions, cooperative groups, CUB/Thrust, ``half`` intrinsics, templates of helper
functions called with explicit arguments (they are counted as calls).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import clang.cindex as ci

from kernelcast.clang import KernelParam, ParseError, build_option_defines
from kernelcast.cltypes import is_known_type

K = ci.CursorKind
TK = ci.TypeKind
log = logging.getLogger(__name__)

SHIM_NAME = "/__kernelcast__/cuda_shim.h"
SHIM_INCLUDE = "/__kernelcast__/include"
#: toolkit and C headers a kernel file may include: empty stand-ins (the shim declares what they would)
SYSTEM_HEADERS = ("cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h",
                  "device_functions.h", "math_constants.h", "math.h", "cmath", "stdio.h", "cstdio", "stdint.h",
                  "cstdint", "stdlib.h", "cstdlib", "assert.h", "cassert")
_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]([\w./]+)[>\"][^\n]*$", re.M)

#: the declarations libclang needs to parse CUDA device code without the toolkit's headers
CUDA_SHIM = r"""
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
typedef __SIZE_TYPE__ size_t;
typedef signed char int8_t; typedef unsigned char uint8_t; typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t; typedef long long int64_t; typedef unsigned long long uint64_t;
struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    __host__ __device__ constexpr dim3(unsigned int __kc_x = 1, unsigned int __kc_y = 1, unsigned int __kc_z = 1)
        : x(__kc_x), y(__kc_y), z(__kc_z) {}
};
struct int2 { int x, y; }; struct int4 { int x, y, z, w; };
struct float2 { float x, y; }; struct float3 { float x, y, z; }; struct float4 { float x, y, z, w; };
struct double2 { double x, y; }; struct double3 { double x, y, z; }; struct double4 { double x, y, z, w; };
struct int3 { int x, y, z; }; struct uint2 { unsigned int x, y; }; struct uint4 { unsigned int x, y, z, w; };
struct char4 { signed char x, y, z, w; }; struct uchar4 { unsigned char x, y, z, w; };
extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;
__device__ void __syncthreads();
__device__ int __syncthreads_count(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_or(int);
__device__ void __syncwarp(unsigned int mask = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ void __threadfence_system();
template <typename __KcT> __device__ __KcT atomicAdd(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicSub(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicExch(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicMin(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicMax(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicAnd(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicOr(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicXor(__KcT*, __KcT);
template <typename __KcT> __device__ __KcT atomicCAS(__KcT*, __KcT, __KcT);
__device__ unsigned int atomicInc(unsigned int*, unsigned int);
__device__ unsigned int atomicDec(unsigned int*, unsigned int);
template <typename __KcT> __device__ __KcT __shfl_sync(unsigned int, __KcT, int, int __kc_w = 32);
template <typename __KcT> __device__ __KcT __shfl_up_sync(unsigned int, __KcT, unsigned int, int __kc_w = 32);
template <typename __KcT> __device__ __KcT __shfl_down_sync(unsigned int, __KcT, unsigned int, int __kc_w = 32);
template <typename __KcT> __device__ __KcT __shfl_xor_sync(unsigned int, __KcT, int, int __kc_w = 32);
__device__ int __all_sync(unsigned int, int);
__device__ int __any_sync(unsigned int, int);
__device__ unsigned int __ballot_sync(unsigned int, int);
__device__ unsigned int __activemask();
template <typename __KcT> __device__ __KcT __ldg(const __KcT*);
__device__ int __popc(unsigned int);
__device__ int __clz(int);
__device__ int __ffs(int);
__device__ int __mul24(int, int);
__device__ unsigned int __umul24(unsigned int, unsigned int);
__device__ int __mulhi(int, int);
__device__ float __fdividef(float, float);
__device__ float __saturatef(float);
__device__ float __int_as_float(int);
__device__ int __float_as_int(float);
__device__ float __uint_as_float(unsigned int);
__device__ unsigned int __float_as_uint(float);
__device__ int __float2int_rn(float);
__device__ int __float2int_rz(float);
__device__ float __int2float_rn(int);
__device__ float __fmaf_rn(float, float, float);
__device__ float __fadd_rn(float, float);
__device__ float __fmul_rn(float, float);
__device__ int min(int, int); __device__ unsigned int min(unsigned int, unsigned int);
__device__ float min(float, float); __device__ double min(double, double);
__device__ int max(int, int); __device__ unsigned int max(unsigned int, unsigned int);
__device__ float max(float, float); __device__ double max(double, double);
__device__ int abs(int);
#define KC_F1(n) __device__ float n(float); __device__ double n(double);
#define KC_F2(n) __device__ float n(float, float); __device__ double n(double, double);
#define KC_F3(n) __device__ float n(float, float, float); __device__ double n(double, double, double);
KC_F1(sqrt) KC_F1(rsqrt) KC_F1(cbrt) KC_F1(exp) KC_F1(exp2) KC_F1(exp10) KC_F1(expm1) KC_F1(log)
KC_F1(log2) KC_F1(log10) KC_F1(log1p) KC_F1(sin) KC_F1(cos) KC_F1(tan) KC_F1(asin) KC_F1(acos)
KC_F1(atan) KC_F1(sinh) KC_F1(cosh) KC_F1(tanh) KC_F1(erf) KC_F1(erfc) KC_F1(fabs) KC_F1(floor)
KC_F1(ceil) KC_F1(trunc) KC_F1(round) KC_F1(rint) KC_F1(sinpi) KC_F1(cospi)
KC_F2(pow) KC_F2(atan2) KC_F2(fmin) KC_F2(fmax) KC_F2(fmod) KC_F2(hypot) KC_F2(copysign) KC_F3(fma)
#define KC_FF1(n) __device__ float n(float);
#define KC_FF2(n) __device__ float n(float, float);
KC_FF1(sqrtf) KC_FF1(rsqrtf) KC_FF1(cbrtf) KC_FF1(expf) KC_FF1(exp2f) KC_FF1(exp10f) KC_FF1(expm1f)
KC_FF1(logf) KC_FF1(log2f) KC_FF1(log10f) KC_FF1(log1pf) KC_FF1(sinf) KC_FF1(cosf) KC_FF1(tanf)
KC_FF1(asinf) KC_FF1(acosf) KC_FF1(atanf) KC_FF1(sinhf) KC_FF1(coshf) KC_FF1(tanhf) KC_FF1(erff)
KC_FF1(erfcf) KC_FF1(fabsf) KC_FF1(floorf) KC_FF1(ceilf) KC_FF1(truncf) KC_FF1(roundf) KC_FF1(rintf)
KC_FF1(__expf) KC_FF1(__exp10f) KC_FF1(__logf) KC_FF1(__log2f) KC_FF1(__log10f) KC_FF1(__sinf)
KC_FF1(__cosf) KC_FF1(__tanf) KC_FF1(sinpif) KC_FF1(cospif)
KC_FF2(powf) KC_FF2(__powf) KC_FF2(atan2f) KC_FF2(fminf) KC_FF2(fmaxf) KC_FF2(fmodf) KC_FF2(hypotf)
KC_FF2(copysignf) KC_FF2(fdividef)
__device__ float fmaf(float, float, float);
__device__ void sincosf(float, float*, float*);
__device__ void __sincosf(float, float*, float*);
extern "C" __device__ int printf(const char*, ...);
/* host code of a kernel file (left out of the analysis): the runtime API's types, and its
   functions accepting any arguments, so that host functions and <<<...>>> launches parse */
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
typedef cudaError_t cudaError;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
typedef struct CUstream_st* cudaStream_t; typedef struct CUevent_st* cudaEvent_t;
#define cudaHostAllocDefault 0
#define cudaHostAllocPortable 1
#define cudaHostAllocMapped 2
#define cudaStreamNonBlocking 1
#define KC_HOST_API(n) template <typename... A> __host__ cudaError_t n(A...);
KC_HOST_API(cudaMalloc) KC_HOST_API(cudaFree) KC_HOST_API(cudaMallocHost) KC_HOST_API(cudaHostAlloc)
KC_HOST_API(cudaFreeHost) KC_HOST_API(cudaMallocManaged) KC_HOST_API(cudaMemcpy) KC_HOST_API(cudaMemcpyAsync)
KC_HOST_API(cudaMemcpyToSymbol) KC_HOST_API(cudaMemcpyToSymbolAsync) KC_HOST_API(cudaMemcpyFromSymbol)
KC_HOST_API(cudaMemset) KC_HOST_API(cudaMemsetAsync) KC_HOST_API(cudaDeviceSynchronize) KC_HOST_API(cudaGetLastError)
KC_HOST_API(cudaPeekAtLastError) KC_HOST_API(cudaStreamCreate) KC_HOST_API(cudaStreamCreateWithFlags)
KC_HOST_API(cudaStreamDestroy) KC_HOST_API(cudaStreamSynchronize) KC_HOST_API(cudaStreamWaitEvent)
KC_HOST_API(cudaEventCreate) KC_HOST_API(cudaEventDestroy) KC_HOST_API(cudaEventRecord)
KC_HOST_API(cudaEventSynchronize) KC_HOST_API(cudaEventElapsedTime) KC_HOST_API(cudaSetDevice)
KC_HOST_API(cudaGetDevice) KC_HOST_API(cudaGetDeviceCount) KC_HOST_API(cudaFuncSetAttribute)
KC_HOST_API(cudaFuncSetCacheConfig) KC_HOST_API(cudaDeviceReset) KC_HOST_API(cudaHostGetDevicePointer)
template <typename... A> __host__ const char* cudaGetErrorString(A...);
template <typename... A> __host__ int fprintf(A...); template <typename... A> __host__ void exit(A...);
template <typename... A> __host__ void* malloc(A...); template <typename... A> __host__ void free(A...);
template <typename... A> __host__ void* memset(A...); template <typename... A> __host__ void* memcpy(A...);
template <typename... A> __host__ int strncmp(A...); template <typename... A> __host__ int strcmp(A...);
template <typename... A> __host__ unsigned long strlen(A...);
extern void* stderr; extern void* stdout;
extern "C" unsigned __cudaPushCallConfiguration(dim3 g, dim3 b, size_t shared = 0, void* stream = 0);
__host__ cudaError_t cudaConfigureCall(dim3 g, dim3 b, size_t shared = 0, cudaStream_t stream = 0);
__device__ int2 make_int2(int, int); __device__ int4 make_int4(int, int, int, int);
__device__ float2 make_float2(float, float); __device__ float3 make_float3(float, float, float);
__device__ float4 make_float4(float, float, float, float); __device__ double2 make_double2(double, double);
"""

#: CUDA builtin variable -> OpenCL work-item function
INDEX_VARS = {"threadIdx": "get_local_id", "blockIdx": "get_group_id", "blockDim": "get_local_size",
              "gridDim": "get_num_groups"}
_DIM = {"x": 0, "y": 1, "z": 2}

#: identifier -> OpenCL spelling in the translation (function names keep their arguments)
RENAMES = {
    "__syncthreads": "__kc_syncthreads", "__threadfence": "__kc_fence_global",
    "__threadfence_system": "__kc_fence_global", "__threadfence_block": "__kc_fence_local",
    "atomicAdd": "atomic_add", "atomicSub": "atomic_sub", "atomicExch": "atomic_xchg",
    "atomicMin": "atomic_min", "atomicMax": "atomic_max", "atomicAnd": "atomic_and", "atomicOr": "atomic_or",
    "atomicXor": "atomic_xor", "atomicCAS": "atomic_cmpxchg", "atomicInc": "atomic_inc2",
    "atomicDec": "atomic_dec2",
    "__shfl_sync": "__kc_shfl", "__shfl_up_sync": "__kc_shfl_up", "__shfl_down_sync": "__kc_shfl_down",
    "__shfl_xor_sync": "__kc_shfl_xor",
    "sqrtf": "sqrt", "rsqrtf": "rsqrt", "cbrtf": "cbrt", "expf": "exp", "exp2f": "exp2", "exp10f": "exp10",
    "expm1f": "expm1", "logf": "log", "log2f": "log2", "log10f": "log10", "log1pf": "log1p", "sinf": "sin",
    "cosf": "cos", "tanf": "tan", "asinf": "asin", "acosf": "acos", "atanf": "atan", "sinhf": "sinh",
    "coshf": "cosh", "tanhf": "tanh", "erff": "erf", "erfcf": "erfc", "fabsf": "fabs", "floorf": "floor",
    "ceilf": "ceil", "truncf": "trunc", "roundf": "round", "rintf": "rint", "powf": "pow", "atan2f": "atan2",
    "fminf": "fmin", "fmaxf": "fmax", "fmodf": "fmod", "hypotf": "hypot", "copysignf": "copysign",
    "fmaf": "fma", "sinpif": "sinpi", "cospif": "cospi", "sincosf": "sincos",
    "__expf": "native_exp", "__exp10f": "native_exp10", "__logf": "native_log", "__log2f": "native_log2",
    "__log10f": "native_log10", "__sinf": "native_sin", "__cosf": "native_cos", "__tanf": "native_tan",
    "__powf": "native_powr", "__fdividef": "native_divide", "fdividef": "native_divide",
    "__sincosf": "sincos", "__fmaf_rn": "fma", "__saturatef": "__kc_saturate",
    "__popc": "popcount", "__clz": "clz", "__mul24": "mul24", "__umul24": "mul24", "__mulhi": "mul_hi",
    "__int_as_float": "as_float", "__float_as_int": "as_int", "__uint_as_float": "as_float",
    "__float_as_uint": "as_uint", "__float2int_rn": "convert_int_rte", "__float2int_rz": "convert_int_rtz",
    "__int2float_rn": "convert_float_rte",
    "__restrict__": "__restrict", "__forceinline__": "inline", "__inline__": "inline",
}
#: OpenCL work-item functions: a device function of the same name (an OpenCL-as-CUDA header's
#: stand-in) is left out of the translation, where the builtin is used
OPENCL_WORK_ITEM_FUNCTIONS = frozenset({"get_local_id", "get_group_id", "get_global_id", "get_local_size",
                                        "get_num_groups", "get_global_size", "get_global_offset", "get_work_dim"})
_CL_VECTOR_NAMES = frozenset(f"{b}{w}" for b in ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                                                  "half", "float", "double") for w in (2, 3, 4, 8, 16))
#: attributes dropped in the translation
DROPPED = {"__device__", "__host__", "__noinline__", "__managed__"}

#: the C++ for OpenCL prelude of a translation (one declaration per line)
PRELUDE = r"""#define __kc_syncthreads() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define __kc_fence_global() mem_fence(CLK_GLOBAL_MEM_FENCE)
#define __kc_fence_local() mem_fence(CLK_LOCAL_MEM_FENCE)
#define __syncwarp(...) ((void)0)
#define __ldg(p) (*(p))
#define __launch_bounds__(...)
#define atomic_inc2(p, v) atomic_inc(p)
#define atomic_dec2(p, v) atomic_dec(p)
#define __kc_saturate(x) clamp((x), 0.0f, 1.0f)
#define warpSize 32
inline int2 make_int2(int a, int b) { return (int2)(a, b); }
inline int4 make_int4(int a, int b, int c, int d) { return (int4)(a, b, c, d); }
inline float2 make_float2(float a, float b) { return (float2)(a, b); }
inline float3 make_float3(float a, float b, float c) { return (float3)(a, b, c); }
inline float4 make_float4(float a, float b, float c, float d) { return (float4)(a, b, c, d); }
inline double2 make_double2(double a, double b) { return (double2)(a, b); }
typedef char int8_t; typedef uchar uint8_t; typedef short int16_t; typedef ushort uint16_t;
typedef int int32_t; typedef uint uint32_t; typedef long int64_t; typedef ulong uint64_t;
template <typename __KcT> __KcT sub_group_shuffle(__KcT, unsigned int);
template <typename __KcT> __KcT sub_group_shuffle_up(__KcT, unsigned int);
template <typename __KcT> __KcT sub_group_shuffle_down(__KcT, unsigned int);
template <typename __KcT> __KcT sub_group_shuffle_xor(__KcT, unsigned int);
#define __kc_shfl(m, v, ...) sub_group_shuffle(v, __VA_ARGS__)
#define __kc_shfl_up(m, v, ...) sub_group_shuffle_up(v, __VA_ARGS__)
#define __kc_shfl_down(m, v, ...) sub_group_shuffle_down(v, __VA_ARGS__)
#define __kc_shfl_xor(m, v, ...) sub_group_shuffle_xor(v, __VA_ARGS__)
int __all_sync(unsigned int, int);
int __any_sync(unsigned int, int);
unsigned int __ballot_sync(unsigned int, int);
unsigned int __activemask();
#define __KC_AT(n, T) T n(volatile T*, T);
#define __KC_ATS(n) __KC_AT(n, int) __KC_AT(n, unsigned int) __KC_AT(n, long) \
    __KC_AT(n, unsigned long) __KC_AT(n, float) __KC_AT(n, double)
__KC_ATS(atomic_add) __KC_ATS(atomic_sub) __KC_ATS(atomic_xchg) __KC_ATS(atomic_min) __KC_ATS(atomic_max)
__KC_ATS(atomic_and) __KC_ATS(atomic_or) __KC_ATS(atomic_xor)
int atomic_cmpxchg(volatile int*, int, int);
unsigned int atomic_cmpxchg(volatile unsigned int*, unsigned int, unsigned int);
unsigned long atomic_cmpxchg(volatile unsigned long*, unsigned long, unsigned long);
unsigned int atomic_inc(volatile unsigned int*);
unsigned int atomic_dec(volatile unsigned int*);
"""

#: C++ for OpenCL standard of the translation
TRANSLATION_STD = "CLC++"

_UNSIGNED = {"unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint", "unsigned": "uint",
             "unsigned long": "ulong", "unsigned long long": "ulong", "long long": "long", "size_t": "ulong",
             "signed char": "char", "__half": "half"}


def is_cuda_path(path: str) -> bool:
    """Whether a file name is CUDA (or HIP, parsed as CUDA) by its extension."""
    return path.lower().endswith((".cu", ".cuh", ".hip"))


_KERNEL_CL = re.compile(r"\b(__kernel|kernel)\b\s+void\b")
_GLOBAL_CU = re.compile(r"\b__global__\b")


def looks_like_cuda(source: str) -> bool:
    """A source with a ``__global__`` function and no OpenCL ``__kernel``: CUDA."""
    return bool(_GLOBAL_CU.search(source)) and not _KERNEL_CL.search(source)


def split_name(name: str) -> tuple[str, list[str] | None]:
    """``'reduce<float, 256>'`` -> ``('reduce', ['float', '256'])``; a plain name -> ``(name, None)``."""
    name = name.strip()
    i = name.find("<")
    if i < 0:
        return name, None
    if not name.endswith(">"):
        raise ParseError(f"kernel name {name!r}: template arguments must end with '>'")
    inner = name[i + 1:-1]
    args: list[str] = []
    depth, cur = 0, ""
    for ch in inner:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        args.append(cur.strip())
    return name[:i].strip(), args


def instantiation(name: str) -> str:
    """Source text that makes nvcc emit template kernel ``name`` (``reduce<float, 256>``): a
    host-side reference to it (nvcc emits only instantiated templates); empty for a plain name."""
    base, targs = split_name(name)
    if not targs:
        return ""
    return f"\nstatic void* __kernelcast_instance_ = (void*)&{base}<{', '.join(targs)}>;\n"


# ---------------------------------------------------------------------------------------------
# Preprocessing: include directories, the configuration's defines, HIP spellings, #pragma unroll

#: what nvcc's implicit ``cuda_runtime.h`` (through ``math.h``) defines for every kernel file
IMPLICIT_HEADER = "".join(f"#ifndef {n}\n#define {n} {v}\n#endif\n" for n, v in (
    ("M_PI", "3.14159265358979323846"), ("M_PI_2", "1.57079632679489661923"), ("M_PI_4", "0.78539816339744830962"),
    ("M_1_PI", "0.31830988618379067154"), ("M_2_PI", "0.63661977236758134308"), ("M_E", "2.7182818284590452354"),
    ("M_LN2", "0.69314718055994530942"), ("M_LN10", "2.30258509299404568402"), ("M_SQRT2", "1.41421356237309504880"),
    ("M_SQRT1_2", "0.70710678118654752440"), ("INT_MAX", "2147483647"), ("FLT_MAX", "3.402823466e+38F")))
#: a HIP kernel's header: the HIP spellings of CUDA's index variables and launch helpers
HIP_HEADER = "#pragma once\n" + "".join(
    f"#define hip{h}_{d} {c}.{d}\n" for h, c in (("ThreadIdx", "threadIdx"), ("BlockIdx", "blockIdx"),
                                                    ("BlockDim", "blockDim"), ("GridDim", "gridDim"))
    for d in "xyz") + "#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];\n"
#: HIP headers parsed through :data:`HIP_HEADER`
HIP_HEADERS = ("hip/hip_runtime.h", "hip/hip_runtime_api.h")
#: headers of the tensor-core APIs: kernels that include them are refused (see :func:`tensor_core_reason`)
TENSOR_CORE_MARKS = (("<mma.h>", re.compile(r"#\s*include\s*[<\"]mma\.h[>\"]")),
                     ("nvcuda::wmma", re.compile(r"\bnvcuda\s*::\s*wmma\b|\bwmma\s*::")),
                     ("<cuda/pipeline>", re.compile(r"#\s*include\s*[<\"]cuda/(pipeline|barrier)[>\"]")),
                     ("mma.sync (inline PTX)", re.compile(r"\bmma\.sync\b|\bwgmma\b")))
#: the macros Kernel Tuner defines for every kernel from its launch (besides the tune parameters)
LAUNCH_MACROS = ("block_size_x", "block_size_y", "block_size_z", "grid_size_x", "grid_size_y", "grid_size_z")
#: the macros nvcc and Kernel Tuner predefine while compiling device code
DEVICE_MACROS = ("__CUDACC__", "__NVCC__", "__CUDA_ARCH__=800")

_UNROLL_RE = re.compile(r"^([ \t]*)#[ \t]*pragma[ \t]+unroll[ \t]+(\S[^\n]*?)[ \t]*$", re.M)
_UNROLL_MARK = "__kc_pragma_unroll__"
_UNROLL_BACK = re.compile(rf"^([ \t]*){_UNROLL_MARK}\s*\((.*)\)[ \t]*;?[ \t]*$", re.M)
_LINEMARK = re.compile(r'^# (\d+) "((?:[^"\\]|\\.)*)"(?: [0-9 ]*)?$')
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"[^\n]*$', re.M)


class UnsupportedKernel(ParseError):
    """A kernel kernelcast does not model (tensor-core kernels): refused with one line."""


def tensor_core_reason(source: str) -> str | None:
    """Why ``source`` is a tensor-core kernel (``'nvcuda::wmma'``...), or None.

    Tensor-core kernels (WMMA fragments, ``mma.sync``, asynchronous copies through
    ``<cuda/pipeline>``) are not modelled: their work is not in the per-thread operation counts
    the analytical model reads. An importer keeps their measured rows without predictions."""
    for what, rx in TENSOR_CORE_MARKS:
        if rx.search(source):
            return what
    return None


def check_modelled(source: str) -> None:
    """:class:`UnsupportedKernel` when ``source`` is a tensor-core kernel."""
    why = tensor_core_reason(source)
    if why is not None:
        raise UnsupportedKernel(f"tensor-core kernels ({why}) are not modelled by kernelcast")


def include_dirs_of(build_options: str) -> list[str]:
    """The ``-I DIR`` / ``-IDIR`` directories of a build-option string, in order."""
    out: list[str] = []
    toks = build_options.split()
    for i, t in enumerate(toks):
        if t == "-I" and i + 1 < len(toks):
            out.append(toks[i + 1])
        elif t.startswith("-I") and len(t) > 2:
            out.append(t[2:])
    return out


def defined_macros(build_options: str) -> dict[str, str]:
    """``NAME -> value`` of the ``-D`` options of a build-option string (``-DX`` is ``X -> '1'``)."""
    out: dict[str, str] = {}
    toks = build_options.split()
    i = 0
    while i < len(toks):
        t = toks[i]
        d = None
        if t == "-D" and i + 1 < len(toks):
            d = toks[i + 1]
            i += 1
        elif t.startswith("-D") and len(t) > 2:
            d = t[2:]
        if d:
            k, _, v = d.partition("=")
            out[k] = v if "=" in d else "1"
        i += 1
    return out


def with_include_dirs(build_options: str, include_dirs: Iterable[str] = ()) -> str:
    """``build_options`` with ``-I DIR`` appended for each of ``include_dirs`` not already there."""
    have = set(include_dirs_of(build_options))
    extra = [f"-I {d}" for d in include_dirs if d and d not in have]
    return " ".join([build_options.strip(), *extra]).strip()


def flatten_includes(source: str, include_dirs: Iterable[str] = (), base_dir: str | None = None) -> str:
    """``source`` with each ``#include "x.h"`` that resolves (in ``base_dir``, then ``include_dirs``,
    then relative to the including file) replaced by the file's text, recursively (a file is
    inlined once): a self-contained source, as a dataset stores it. Includes that do not resolve
    (toolkit headers) are kept."""
    dirs = [d for d in ([base_dir] if base_dir else []) + list(include_dirs) if d]
    seen: set[str] = set()

    def expand(text: str, here: str | None, depth: int) -> str:
        def repl(m: re.Match[str]) -> str:
            name = m.group(1)
            for d in ([here] if here else []) + dirs:
                cand = os.path.normpath(os.path.join(d, name))
                if os.path.isfile(cand):
                    if cand in seen or depth > 32:
                        return ""
                    seen.add(cand)
                    try:
                        body = Path(cand).read_text(encoding="utf-8", errors="replace")
                    except OSError:
                        return m.group(0)
                    body = re.sub(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*$", "", body, flags=re.M)
                    return expand(body, os.path.dirname(cand), depth + 1).rstrip("\n")
            return m.group(0)
        return _QUOTED_INCLUDE.sub(repl, text)

    return expand(source, base_dir, 0)


@functools.lru_cache(maxsize=1)
def _stub_dir() -> str:
    """A directory of stand-in toolkit and C headers for the preprocessor (empty, HIP: macros)."""
    d = tempfile.mkdtemp(prefix="kc_cuda_stubs_")
    for h in SYSTEM_HEADERS + HIP_HEADERS:
        f = Path(d) / h
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(HIP_HEADER if h in HIP_HEADERS else "#pragma once\n")
    (Path(d) / "__kc_implicit.h").write_text(IMPLICIT_HEADER)
    return d


def _unroll_value(expr: str) -> int | None:
    """The integer value of a preprocessed ``#pragma unroll`` argument, or None."""
    e = expr.strip()
    if not re.fullmatch(r"[0-9a-fA-FxXuUlL\s()+\-*/%<>]*", e) or not e:
        return None
    e = re.sub(r"(?<=[0-9])[uUlL]+", "", e).replace("/", "//")
    try:
        v = eval(e, {"__builtins__": {}}, {})  # noqa: S307 - digits and arithmetic only (checked above)
    except Exception:  # noqa: BLE001 - anything that is not a constant expression
        return None
    return int(v) if isinstance(v, int) else None


def _restore_lines(text: str, main: str) -> str:
    """Preprocessor output with its line markers removed and the lines of ``main`` at their line
    numbers (blank lines added where the preprocessor skipped lines; included files' blank lines
    dropped)."""
    out: list[str] = []
    cur_file, cur_line = main, 1
    for line in text.split("\n"):
        m = _LINEMARK.match(line)
        if m:
            cur_file, cur_line = m.group(2), int(m.group(1))
            if cur_file == main:
                while len(out) + 1 < cur_line:
                    out.append("")
            continue
        if cur_file == main or line.strip():      # an included file's blank lines are dropped
            out.append(line)
        cur_line += 1
    return "\n".join(out)


def preprocess_cuda(source: str, build_options: str = "", include_dirs: Iterable[str] = (),
                    filename: str = "kernel.cu") -> str:
    """The device source nvcc compiles for one configuration: ``source`` run through the C
    preprocessor with the configuration's ``-D`` macros, ``-I`` directories (and
    ``include_dirs``), :data:`DEVICE_MACROS` and stand-in toolkit headers (HIP's map its
    spellings to CUDA's). ``#pragma unroll N`` is resolved: ``N`` a macro or expression whose value
    is 0 is Kernel Tuner's "let the compiler decide" (the pragma is dropped), a positive value is
    the unroll factor. Lines of the main file keep their numbers when it includes no file of its own.
    :class:`ParseError` when the
    preprocessor fails (an include not found, ``#error``)."""
    return _preprocess(source, build_options, tuple(include_dirs), filename)


@functools.lru_cache(maxsize=256)
def _preprocess(source: str, build_options: str, include_dirs: tuple[str, ...], filename: str) -> str:
    cpp = shutil.which("cpp")
    if cpp is None:  # pragma: no cover - a C preprocessor ships with every compiler
        raise ParseError("no C preprocessor (cpp) found: install gcc or clang")
    marked = _UNROLL_RE.sub(lambda m: f"{m.group(1)}{_UNROLL_MARK}({m.group(2)})", source)
    main = os.path.basename(filename) or "kernel.cu"
    dirs = [os.path.abspath(d) for d in (*include_dirs_of(build_options), *include_dirs)]
    args = [cpp, "-x", "c++", "-std=c++17", "-nostdinc", "-w"]
    for d in dirs:
        args += ["-I", d]
    args += ["-I", _stub_dir(), "-include", os.path.join(_stub_dir(), "__kc_implicit.h")]
    for k, v in defined_macros(build_options).items():
        args.append(f"-D{k}={v}")
    args += [f"-D{m}" for m in DEVICE_MACROS]
    with tempfile.TemporaryDirectory(prefix="kc_cpp_") as td:
        path = os.path.join(td, main)
        Path(path).write_text(marked, encoding="utf-8")
        try:
            r = subprocess.run([*args, main], capture_output=True, text=True, timeout=60, check=False, cwd=td)
        except (OSError, subprocess.TimeoutExpired) as e:  # pragma: no cover - the host refused to run cpp
            raise ParseError(f"the C preprocessor failed on {main}: {e}") from e
    if r.returncode != 0:
        err = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip().splitlines()[-1:] or [""])
        msg = err if isinstance(err, str) else err[0]
        msg = re.sub(r"^[^:]*/kc_cpp_[^/]*/", "", msg)
        m = re.search(r"fatal error: ([^:]+): No such file or directory", msg)
        if m:
            raise ParseError(f"{filename}: '{m.group(1)}' file not found (give its directory with -I DIR in the "
                             f"build options, or include_dirs)")
        raise ParseError(f"{filename}: {msg.strip()}")
    text = _restore_lines(r.stdout, main)

    template_names = set(re.findall(r"\b(?:typename|class|int|unsigned|long|size_t|bool)\s+([A-Za-z_]\w*)\s*[,>=]",
                                    " ".join(re.findall(r"template\s*<[^{;]*?>", text))))

    def unroll(m: re.Match[str]) -> str:
        arg = m.group(2).strip()
        v = _unroll_value(arg)
        if v == 0:
            return ""
        if v is None and re.fullmatch(r"\(?\s*[A-Za-z_]\w*\s*\)?", arg) and arg.strip("() ") not in template_names:
            return ""       # a macro the configuration leaves undefined: no factor, the compiler decides
        return f"{m.group(1)}#pragma unroll {v if v is not None else arg}"
    return _UNROLL_BACK.sub(unroll, text)


def launch_defines(build_options: str, gsize: tuple[int, ...] | None, lsize: tuple[int, ...] | None) -> str:
    """``build_options`` plus the macros Kernel Tuner defines from a launch: ``block_size_x/y/z``
    (the local size, 1 for a missing dimension), ``grid_size_x/y/z`` (work-groups per dimension:
    global size / local size) and ``kernel_tuner=1``; a macro the options define already is kept
    as given. Without a local size only ``kernel_tuner`` is added."""
    have = defined_macros(build_options)
    add: list[str] = []
    if "kernel_tuner" not in have:
        add.append("-Dkernel_tuner=1")
    if lsize:
        ls = (tuple(lsize) + (1, 1, 1))[:3]
        gs = (tuple(gsize or ()) + (1, 1, 1))[:3]
        for d, b, g in zip("xyz", ls, gs):
            if f"block_size_{d}" not in have:
                add.append(f"-Dblock_size_{d}={b}")
            if gsize and f"grid_size_{d}" not in have:
                add.append(f"-Dgrid_size_{d}={max(1, -(-g // max(1, b)))}")
    return " ".join([build_options.strip(), *add]).strip()


def uses_launch_macros(source: str) -> list[str]:
    """The launch macros (:data:`LAUNCH_MACROS`) ``source`` refers to."""
    return [m for m in LAUNCH_MACROS if re.search(rf"\b{m}\b", source)]


def unreferenced_parameters(source: str, names: Iterable[str], include_dirs: Iterable[str] = (),
                            base_dir: str | None = None) -> list[str]:
    """The tune parameters of ``names`` that ``source`` (with its resolvable includes) never
    mentions: a ``-D`` of them changes nothing in the build, so measurements that depend on them
    were taken with another source. In the order given."""
    text = flatten_includes(source, include_dirs, base_dir)
    words = set(re.findall(r"[A-Za-z_]\w*", text))
    return [n for n in names if n not in words]


_WARNED_UNREFERENCED: set[tuple[str, tuple[str, ...]]] = set()


def warn_unreferenced(source: str, names: Iterable[str], what: str = "the kernel",
                      include_dirs: Iterable[str] = (), base_dir: str | None = None) -> list[str]:
    """:func:`unreferenced_parameters`, with one warning (logged once per kernel and set of names)
    naming them; returns them."""
    missing = unreferenced_parameters(source, names, include_dirs, base_dir)
    key = (what, tuple(missing))
    if missing and key not in _WARNED_UNREFERENCED:
        _WARNED_UNREFERENCED.add(key)
        log.warning("%s does not reference the tune parameter(s) %s: their -D changes nothing in its build "
                    "(measurements that depend on them were taken with another source)", what, ", ".join(missing))
    return missing



def cuda_args(build_options: str = "") -> list[str]:
    """libclang arguments for CUDA device code with the shim."""
    return ["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80",
            "-std=c++17", "-Wno-unknown-cuda-version", "-include", SHIM_NAME,
            *build_option_defines(build_options), "-isystem", SHIM_INCLUDE]


def parse_cuda(source: str, filename: str = "kernel.cu", build_options: str = "",
               include_dirs: Iterable[str] = ()) -> ci.TranslationUnit:
    """Parse CUDA (or HIP) source with libclang in CUDA mode after :func:`preprocess_cuda`;
    :class:`ParseError` on errors in the file, :class:`UnsupportedKernel` for a tensor-core kernel."""
    check_modelled(source)
    return _parse_device(preprocess_cuda(source, build_options, include_dirs, filename), filename, build_options)


def _parse_device(source: str, filename: str, build_options: str) -> ci.TranslationUnit:
    """libclang parse of preprocessed device source (:func:`parse_cuda`)."""
    index = ci.Index.create()
    try:
        tu = index.parse(filename, args=cuda_args(build_options),
                         unsaved_files=[(filename, source), (SHIM_NAME, CUDA_SHIM),
                                        *((f"{SHIM_INCLUDE}/{h}", "#pragma once\n") for h in SYSTEM_HEADERS)],
                         options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    except ci.TranslationUnitLoadError as e:  # pragma: no cover - libclang internal failure
        raise ParseError(f"libclang could not parse {filename}: {e}") from e
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        d = errors[0]
        where = f"{d.location.file.name}:{d.location.line}:{d.location.column}" if d.location.file else filename
        raise ParseError(f"{where}: {d.spelling}")
    return tu


def _attrs(c: ci.Cursor) -> set[ci.CursorKind]:
    return {x.kind for x in c.get_children() if x.kind.is_attribute()}


def top_level(tu: ci.TranslationUnit, filename: str) -> list[ci.Cursor]:
    """The declarations at file scope of the main file, those inside ``extern "C" { ... }`` (and
    ``extern "C"`` in front of one declaration) included."""
    out: list[ci.Cursor] = []
    stack = list(tu.cursor.get_children())[::-1]
    while stack:
        c = stack.pop()
        if c.location.file is None or c.location.file.name != filename:
            continue
        if c.kind == K.LINKAGE_SPEC:
            stack.extend(list(c.get_children())[::-1])
            continue
        out.append(c)
    return out


def find_cuda_kernels(tu: ci.TranslationUnit, filename: str) -> dict[str, ci.Cursor]:
    """``__global__`` function definitions (and function templates) of the main file, by name
    (``extern "C"`` kernels included)."""
    out: dict[str, ci.Cursor] = {}
    for c in top_level(tu, filename):
        if c.kind in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) and c.is_definition() and K.CUDAGLOBAL_ATTR in _attrs(c):
            out[c.spelling] = c
    return out


def template_params(c: ci.Cursor) -> list[tuple[str, str]]:
    """``(name, 'type'|'value')`` of a function template's parameters, in order."""
    out = []
    for x in c.get_children():
        if x.kind == K.TEMPLATE_TYPE_PARAMETER:
            out.append((x.spelling, "type"))
        elif x.kind == K.TEMPLATE_NON_TYPE_PARAMETER:
            out.append((x.spelling, "value"))
        elif x.kind == K.TEMPLATE_TEMPLATE_PARAMETER:
            out.append((x.spelling, "template"))
    return out


def _strip(spelling: str) -> str:
    s = spelling
    for word in ("const", "volatile", "__restrict", "restrict", "struct"):
        s = re.sub(rf"\b{re.escape(word)}\b", "", s)
    return " ".join(s.replace("*", " ").split())


def _norm(t: str, subst: dict[str, str]) -> str:
    t = subst.get(t, t)
    return _UNSIGNED.get(t, t)


def _type_name(t: ci.Type, sub: dict[str, str]) -> str:
    """The OpenCL name of a parameter's (or pointee's) type: as spelled when OpenCL knows it, else
    through its typedef chain (``real_arg`` -> ``real`` -> ``float``), else its canonical type."""
    name = _norm(_strip(t.spelling), sub)
    if is_known_type(name) or name in sub.values():
        return name
    cur = t
    for _ in range(32):
        decl = cur.get_declaration()
        if decl is None or decl.kind != K.TYPEDEF_DECL:
            break
        cur = decl.underlying_typedef_type
        cand = _norm(_strip(cur.spelling), sub)
        if is_known_type(cand):
            return cand
    canon = _norm(_strip(t.get_canonical().spelling), sub)
    return canon if is_known_type(canon) else name


def cuda_params(c: ci.Cursor, subst: dict[str, str] | None = None) -> list[KernelParam]:
    """The parameters of a CUDA kernel cursor as :class:`KernelParam` (pointers are global buffers)."""
    sub = subst or {}
    out: list[KernelParam] = []
    args = list(c.get_arguments()) if c.kind == K.FUNCTION_DECL else \
        [x for x in c.get_children() if x.kind == K.PARM_DECL]
    for i, a in enumerate(args):
        t = a.type
        spelling = t.spelling
        if t.kind == TK.POINTER or "*" in spelling:
            pointee = t.get_pointee() if t.kind == TK.POINTER else None
            ps = pointee.spelling if pointee is not None else spelling.rsplit("*", 1)[0]
            dtype = _type_name(pointee, sub) if pointee is not None else _norm(_strip(ps), sub)
            is_const = bool(re.search(r"\bconst\b", ps))
            out.append(KernelParam(i, a.spelling, "buffer", "global", dtype, is_const, spelling))
        else:
            dtype = _type_name(t, sub)
            out.append(KernelParam(i, a.spelling, "scalar", "private", dtype, t.is_const_qualified(), spelling))
    for j, (_stmt, var) in enumerate(dynamic_shared(c)):
        dtype = _norm(_strip(var.type.spelling.split("[")[0]), sub)
        out.append(KernelParam(len(args) + j, var.spelling, "local", "local", dtype, False, var.type.spelling))
    return out


def dynamic_shared(c: ci.Cursor) -> list[tuple[ci.Cursor, ci.Cursor]]:
    """``(declaration statement, variable)`` of each ``extern __shared__ T name[];`` in a kernel body.

    Such an array is the block's dynamic shared memory, sized at launch: kernelcast treats it as
    OpenCL treats a ``__local T*`` argument (a ``local`` parameter after the real ones, bound with
    ``--arg name=local:T:COUNT``). Several of them alias the same memory in CUDA; each is bound on
    its own here."""
    out = []
    for stmt in c.walk_preorder():
        if stmt.kind != K.DECL_STMT:
            continue
        for v in stmt.get_children():
            if (v.kind == K.VAR_DECL and v.storage_class == ci.StorageClass.EXTERN
                    and any(x.kind == K.CUDASHARED_ATTR for x in v.get_children())):
                out.append((stmt, v))
    return out


@dataclass
class CudaKernelInfo:
    """One kernel of a CUDA source: its cursor name, template parameters and the name given."""

    name: str                             # as given (``reduce<float, 256>``)
    base: str                             # function name (``reduce``)
    template_args: list[str] | None
    params: list[KernelParam]


def _resolve(kernels: dict[str, ci.Cursor], name: str, path: str) -> tuple[ci.Cursor, str, list[str] | None]:
    base, targs = split_name(name)
    if base not in kernels:
        raise ParseError(f"{path} has no __global__ kernel named {base!r} (it has: {', '.join(kernels) or 'none'})")
    c = kernels[base]
    tps = template_params(c) if c.kind == K.FUNCTION_TEMPLATE else []
    if tps and targs is None:
        want = ", ".join(n for n, _ in tps)
        raise ParseError(f"kernel {base!r} is a template; give its arguments in the name, e.g. '{base}<{want}>'")
    if not tps and targs:
        raise ParseError(f"kernel {base!r} is not a template but the name gives arguments")
    if tps and targs is not None and len(targs) != len(tps):
        raise ParseError(f"kernel {base!r} takes {len(tps)} template argument(s) "
                         f"({', '.join(n for n, _ in tps)}), {len(targs)} given")
    return c, base, targs


def cuda_kernel_signatures(source: str, build_options: str = "", filename: str = "kernel.cu",
                           include_dirs: Iterable[str] = ()) -> dict[str, list[KernelParam]]:
    """Every ``__global__`` kernel of ``source`` with its parameters (template kernels: the
    parameters as declared, with template parameter names as types), preprocessed with the
    ``-D``/``-I`` of ``build_options`` and ``include_dirs``."""
    tu = parse_cuda(source, filename, build_options, include_dirs)
    return {name: cuda_params(c) for name, c in find_cuda_kernels(tu, filename).items()}


def cuda_kernel_info(source: str, name: str, build_options: str = "", filename: str = "kernel.cu",
                     include_dirs: Iterable[str] = ()) -> CudaKernelInfo:
    """The kernel ``name`` (``reduce<float, 256>`` for a template) of a CUDA source, its argument
    types resolved with the configuration's ``build_options`` (a typedef or macro type such as
    ``real_arg`` is its underlying OpenCL type); ParseError when the source does not parse or the
    kernel is not there."""
    tu = parse_cuda(source, filename, build_options, include_dirs)
    kernels = find_cuda_kernels(tu, filename)
    c, base, targs = _resolve(kernels, name, filename)
    subst = dict(zip((n for n, _ in template_params(c)), targs or []))
    return CudaKernelInfo(name=name, base=base, template_args=targs, params=cuda_params(c, subst))


@dataclass
class Translation:
    """A CUDA kernel rewritten as C++ for OpenCL."""

    source: str
    kernel_name: str                      # name of the kernel in ``source``
    build_options: str                    # options to parse ``source`` with (``-cl-std=CLC++`` + defines)
    prelude_lines: int
    notes: list[str] = field(default_factory=list)


def _offsets(source: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", source):
        starts.append(m.end())
    return starts


def translate(source: str, name: str, build_options: str = "", filename: str = "kernel.cu",
              include_dirs: Iterable[str] = ()) -> Translation:
    """C++ for OpenCL text of kernel ``name`` of a CUDA source (module docstring), from its
    preprocessed text (:func:`preprocess_cuda`)."""
    check_modelled(source)
    source = preprocess_cuda(source, build_options, include_dirs, filename)
    tu = _parse_device(source, filename, build_options)
    kernels = find_cuda_kernels(tu, filename)
    kc, base, targs = _resolve(kernels, name, filename)
    line_start = _offsets(source)
    bsrc = source.encode("utf-8")
    # byte offsets (libclang) -> character positions need care with non-ASCII text
    if len(bsrc) != len(source):
        source = bsrc.decode("ascii", errors="replace").replace("\ufffd", " ")
        line_start = _offsets(source)

    def off(loc: ci.SourceLocation) -> int:
        return line_start[loc.line - 1] + loc.column - 1

    edits: list[tuple[int, int, str]] = []
    notes: list[str] = []
    toks = [t for t in tu.get_tokens(extent=tu.cursor.extent)
            if t.location.file is not None and t.location.file.name == filename]
    n = len(toks)
    kstart, kend = off(kc.extent.start), off(kc.extent.end)
    tparams = template_params(kc) if kc.kind == K.FUNCTION_TEMPLATE else []
    subst = {n: (a if kind != "value" else f"({a})") for (n, kind), a in zip(tparams, targs or [])}
    # blank host-only functions, the other kernels and explicit instantiations of kernels
    blank: list[tuple[int, int]] = []
    tok_at = {off(t.location): k for k, t in enumerate(toks)}
    top = top_level(tu, filename)
    for c in top:
        if c.kind not in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) or off(c.extent.start) == kstart:
            continue
        at = _attrs(c)
        if c.spelling in OPENCL_WORK_ITEM_FUNCTIONS and K.CUDAGLOBAL_ATTR not in at:
            # an OpenCL-as-CUDA header's stand-in for an OpenCL builtin: the builtin itself is used
            blank.append((off(c.extent.start), off(c.extent.end)))
            notes.append(f"device function {c.spelling} left out: the OpenCL builtin of that name is used")
            continue
        is_host = c.is_definition() and not at & {K.CUDAGLOBAL_ATTR, K.CUDADEVICE_ATTR}
        if not (is_host or K.CUDAGLOBAL_ATTR in at):
            continue
        a, b = off(c.extent.start), off(c.extent.end)
        k0 = tok_at.get(a)
        if k0 is not None and k0 > 0 and toks[k0 - 1].spelling in ("template", "extern"):
            a = off(toks[k0 - 1].location)
        k1 = next((k for k in range(k0 or 0, n) if off(toks[k].location) >= b), None)
        if k1 is not None and toks[k1].spelling == ";":
            b = off(toks[k1].location) + 1
        blank.append((a, b))
        if is_host:
            notes.append(f"host function {c.spelling} left out")
    # extern "C" (before one declaration, or around a block of them) is dropped
    for k, t in enumerate(toks):
        if t.spelling == "extern" and k + 1 < n and toks[k + 1].spelling == '"C"':
            edits.append((off(t.location), off(toks[k + 1].location) + 3, ""))
            if k + 2 < n and toks[k + 2].spelling == "{":
                depth = 0
                for j in range(k + 2, n):
                    depth += (toks[j].spelling == "{") - (toks[j].spelling == "}")
                    if depth == 0:
                        edits.append((off(toks[k + 2].location), off(toks[k + 2].location) + 1, ""))
                        edits.append((off(toks[j].location), off(toks[j].location) + 1, ""))
                        break
    # a __constant__ array without initializer is filled by the host (cudaMemcpyToSymbol, Kernel
    # Tuner's constant-memory arguments): an extern declaration of constant memory in OpenCL
    for c in top:
        if c.kind == K.VAR_DECL and K.CUDACONSTANT_ATTR in _attrs(c) and c.storage_class != ci.StorageClass.EXTERN:
            a, b = off(c.extent.start), off(c.extent.end)
            if not any(t.spelling == "=" for t in toks if a <= off(t.location) < b):
                edits.append((a, a, "extern "))
    # user types named like OpenCL's vector types (an OpenCL-as-CUDA header's float8 struct) are renamed
    clash = {c.spelling for c in top if c.kind in (K.TYPEDEF_DECL, K.STRUCT_DECL) and c.spelling in _CL_VECTOR_NAMES}
    # explicit instantiations ("template __global__ void k<float>(...);"; libclang does not expose them)
    depth = 0
    for k, t in enumerate(toks):
        sp = t.spelling
        depth += (sp == "{") - (sp == "}")
        if sp == "template" and depth == 0 and k + 1 < n and toks[k + 1].spelling != "<":
            a = off(toks[k - 1].location) if k > 0 and toks[k - 1].spelling == "extern" else off(t.location)
            k1 = next((j for j in range(k, n) if toks[j].spelling == ";"), None)
            if k1 is not None and not kstart <= a < kend:
                blank.append((a, off(toks[k1].location) + 1))
    i = 0
    while i < n:
        t = toks[i]
        s = t.spelling
        o = off(t.location)
        e = o + len(s)
        inside = kstart <= o < kend
        if any(a <= o < b for a, b in blank):
            i += 1
            continue
        if t.kind == ci.TokenKind.KEYWORD and s in DROPPED:     # clang spells __noinline__ as a keyword
            edits.append((o, e, ""))
        elif t.kind == ci.TokenKind.IDENTIFIER:
            if s in INDEX_VARS and i + 2 < n and toks[i + 1].spelling == "." and toks[i + 2].spelling in _DIM:
                fn = INDEX_VARS[s]
                end = off(toks[i + 2].location) + 1
                edits.append((o, end, f"((unsigned int){fn}({_DIM[toks[i + 2].spelling]}))"))
                i += 3
                continue
            if s == "__global__":
                edits.append((o, e, "__kernel" if inside else ""))
            elif s == "__shared__":
                if not inside and any(x.spelling == "extern" for x in toks[max(0, i - 2):i + 2]):
                    notes.append("file-scope dynamic shared memory (extern __shared__) not modelled")
                edits.append((o, e, "__local"))
            elif s == "__constant__":
                edits.append((o, e, "__constant"))
            elif s in DROPPED:
                edits.append((o, e, ""))
            elif s in RENAMES:
                edits.append((o, e, RENAMES[s]))
            elif inside and s in subst:
                edits.append((o, e, subst[s]))
            elif s in clash:
                edits.append((o, e, f"__kc_{s}"))
        i += 1
    if tparams:
        # drop "template < ... >" in front of the kernel
        j = next(k for k, t in enumerate(toks) if off(t.location) >= kstart)
        if toks[j].spelling == "template":
            depth = 0
            k = j + 1
            while k < n:
                sp = toks[k].spelling
                depth += sp.count("<") - sp.count(">")
                if depth <= 0 and ">" in sp:
                    break
                k += 1
            edits = [ed for ed in edits if not (off(toks[j].location) <= ed[0] <= off(toks[k].location))]
            edits.append((off(toks[j].location), off(toks[k].location) + len(toks[k].spelling), ""))
    # __shared__ arrays declared in a nested scope move to the top of the kernel body: OpenCL
    # allows local memory only at a kernel's outermost scope, and CUDA allocates them once per
    # block wherever they are declared
    body = next((x for x in kc.get_children() if x.kind == K.COMPOUND_STMT), None)
    if body is not None:
        top_stmts = {off(x.extent.start) for x in body.get_children()}
        names: set[str] = set()
        hoisted: list[str] = []
        for stmt in kc.walk_preorder():
            if stmt.kind != K.DECL_STMT or off(stmt.extent.start) in top_stmts:
                continue
            decls = list(stmt.get_children())
            if not decls or not all(v.kind == K.VAR_DECL and v.storage_class != ci.StorageClass.EXTERN
                                    and any(x.kind == K.CUDASHARED_ATTR for x in v.get_children()) for v in decls):
                continue
            if any(v.spelling in names for v in decls):
                continue
            names.update(v.spelling for v in decls)
            a, b = off(stmt.extent.start), off(stmt.extent.end)
            text = source[a:b].rstrip().rstrip(";")
            text = re.sub(r"\b__shared__\b", "__local", text)
            text = re.sub(r"\b\w+\b", lambda m: subst.get(m.group(0), m.group(0)), text)
            edits = [ed for ed in edits if not a <= ed[0] < b]
            end = b + 1 if source[b:b + 1] == ";" else b
            edits.append((a, end, "\n" * source.count("\n", a, end)))
            hoisted.append(" ".join(text.split()) + ";")
        if hoisted:
            p0 = off(body.extent.start) + 1
            edits.append((p0, p0, " " + " ".join(hoisted)))
            notes.append(f"shared arrays {', '.join(sorted(names))} declared in a nested scope: allocated at the "
                         f"kernel's outermost scope")
    # pointer parameters of the kernel live in global memory
    parms = [x for x in kc.get_children() if x.kind == K.PARM_DECL]
    for a in parms:
        if a.type.kind == TK.POINTER or "*" in a.type.spelling:
            p = off(a.extent.start)
            edits.append((p, p, "__global "))
    # dynamic shared memory becomes __local pointer parameters (see dynamic_shared)
    extra = []
    for stmt, var in dynamic_shared(kc):
        a, b = off(stmt.extent.start), off(stmt.extent.end)
        edits = [ed for ed in edits if not a <= ed[0] < b]
        edits.append((a, b, ""))
        elem = var.type.spelling.split("[")[0].strip()
        elem = " ".join(subst.get(w, w) for w in elem.split())
        extra.append(f"__local {elem}* {var.spelling}")
    if extra:
        if not parms:
            raise ParseError(f"kernel {base!r}: dynamic shared memory in a kernel without parameters is not supported")
        p = off(parms[-1].extent.end)
        edits.append((p, p, ", " + ", ".join(extra)))
    for a, b in blank:
        edits.append((a, b, "\n" * source.count("\n", a, b)))
    for m in _INCLUDE_RE.finditer(source):      # the stand-in headers do not exist for C++ for OpenCL
        if m.group(1) in SYSTEM_HEADERS:
            edits.append((m.start(), m.end(), ""))
    edits.sort(key=lambda x: (x[0], x[1]))
    out: list[str] = []
    pos = 0
    for a, b, txt in edits:
        if a < pos:      # overlapping (inside a blanked range)
            continue
        out.append(source[pos:a])
        out.append(txt)
        pos = b
    out.append(source[pos:])
    body = "".join(out)
    defines = " ".join(build_option_defines(build_options))
    return Translation(source=PRELUDE + body, kernel_name=base,
                       build_options=f"-cl-std={TRANSLATION_STD} {defines}".strip(),
                       prelude_lines=PRELUDE.count("\n"), notes=notes)

# ---------------------------------------------------------------------------------------------
# PTX entries of a kernel name


@functools.lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt") or shutil.which("cu++filt")


def _demangle(names: list[str]) -> list[str]:
    tool = _cxxfilt()
    if tool is None or not names:
        return names
    try:
        r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return names
    out = r.stdout.splitlines()
    return out if len(out) == len(names) else names


_ENTRY = re.compile(r"\.entry\s+([\w$]+)")


def _mangled_base(name: str) -> str:
    m = re.match(r"_Z(\d+)", name)
    return name[m.end():m.end() + int(m.group(1))] if m else name


def ptx_entry_name(ptx: str, name: str) -> str | None:
    """The ``.entry`` of a PTX module that is kernel ``name`` (``vadd``, ``reduce<float, 256>``):
    the name itself, else the one C++-mangled entry of that function, else (several
    instantiations) the one whose demangled template arguments match (``c++filt``)."""
    base, targs = split_name(name)
    entries = _ENTRY.findall(ptx)
    if base in entries and targs is None:
        return base
    cands = [e for e in entries if _mangled_base(e) == base]
    if len(cands) <= 1:
        return cands[0] if cands else None
    want = re.sub(r"\s+", "", f"{base}<{','.join(targs)}>" if targs else base)
    for e, d in zip(cands, _demangle(cands)):
        if re.sub(r"^void", "", re.sub(r"\s+", "", d)).split("(")[0] == want:
            return e
    return None


__all__ = ["CUDA_SHIM", "DEVICE_MACROS", "HIP_HEADER", "LAUNCH_MACROS", "CudaKernelInfo", "Translation",
           "UnsupportedKernel", "check_modelled", "cuda_kernel_info", "cuda_kernel_signatures", "cuda_params",
           "defined_macros", "dynamic_shared", "find_cuda_kernels", "flatten_includes", "include_dirs_of",
           "instantiation", "is_cuda_path", "launch_defines", "looks_like_cuda", "parse_cuda", "preprocess_cuda",
           "ptx_entry_name", "split_name", "tensor_core_reason", "top_level", "translate", "unreferenced_parameters",
           "uses_launch_macros", "warn_unreferenced", "with_include_dirs"]

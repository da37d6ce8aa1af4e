"""CUDA C++ kernels: libclang in CUDA mode, kernel signatures, and a translation to C++ for OpenCL.

The libclang wheel ships no CUDA resource headers and clang 18 does not support CUDA 13's headers,
so the source is parsed in CUDA mode (``-x cuda --cuda-device-only -nocudainc``) with a small shim
of our own (:data:`CUDA_SHIM`): the execution-space and memory-space attributes, ``threadIdx``,
``blockIdx``, ``blockDim``, ``gridDim``, ``warpSize``, ``__syncthreads``/fences, atomics, warp
shuffles/votes, ``__ldg`` and the single-precision math functions. A call of anything the shim
does not declare is a parse error (:class:`kernelcast.clang.ParseError`), as it is for nvcc
without the header that declares it.

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
kernel. Host functions (no ``__device__``/``__global__``) are blanked. The translation keeps the
line numbers of the CUDA source after a prelude of :attr:`Translation.prelude_lines` lines.

Dynamic shared memory (``extern __shared__ T s[];`` in the kernel) becomes a ``__local T* s``
parameter after the real ones, as OpenCL writes it (:func:`dynamic_shared`).

Not handled (a note, or a parse error): file-scope ``extern __shared__``, host code that launches
kernels (``<<<...>>>``), cooperative groups, CUB/Thrust, ``half`` intrinsics, templates of helper
functions called with explicit arguments (they are counted as calls).
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass, field

import clang.cindex as ci

from kernelcast.clang import KernelParam, ParseError, build_option_defines

K = ci.CursorKind
TK = ci.TypeKind

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
struct dim3 { unsigned int x, y, z; };
struct int2 { int x, y; }; struct int4 { int x, y, z, w; };
struct float2 { float x, y; }; struct float3 { float x, y, z; }; struct float4 { float x, y, z, w; };
struct double2 { double x, y; };
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
template <typename T> __device__ T atomicAdd(T*, T);
template <typename T> __device__ T atomicSub(T*, T);
template <typename T> __device__ T atomicExch(T*, T);
template <typename T> __device__ T atomicMin(T*, T);
template <typename T> __device__ T atomicMax(T*, T);
template <typename T> __device__ T atomicAnd(T*, T);
template <typename T> __device__ T atomicOr(T*, T);
template <typename T> __device__ T atomicXor(T*, T);
template <typename T> __device__ T atomicCAS(T*, T, T);
__device__ unsigned int atomicInc(unsigned int*, unsigned int);
__device__ unsigned int atomicDec(unsigned int*, unsigned int);
template <typename T> __device__ T __shfl_sync(unsigned int, T, int, int w = 32);
template <typename T> __device__ T __shfl_up_sync(unsigned int, T, unsigned int, int w = 32);
template <typename T> __device__ T __shfl_down_sync(unsigned int, T, unsigned int, int w = 32);
template <typename T> __device__ T __shfl_xor_sync(unsigned int, T, int, int w = 32);
__device__ int __all_sync(unsigned int, int);
__device__ int __any_sync(unsigned int, int);
__device__ unsigned int __ballot_sync(unsigned int, int);
__device__ unsigned int __activemask();
template <typename T> __device__ T __ldg(const T*);
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
typedef char int8_t; typedef uchar uint8_t; typedef short int16_t; typedef ushort uint16_t;
typedef int int32_t; typedef uint uint32_t; typedef long int64_t; typedef ulong uint64_t;
template <typename T> T sub_group_shuffle(T, unsigned int);
template <typename T> T sub_group_shuffle_up(T, unsigned int);
template <typename T> T sub_group_shuffle_down(T, unsigned int);
template <typename T> T sub_group_shuffle_xor(T, unsigned int);
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
    """Whether a file name is CUDA by its extension."""
    return path.lower().endswith((".cu", ".cuh"))


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


def cuda_args(build_options: str = "") -> list[str]:
    """libclang arguments for CUDA device code with the shim."""
    return ["-x", "cuda", "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80",
            "-std=c++17", "-Wno-unknown-cuda-version", "-include", SHIM_NAME,
            *build_option_defines(build_options), "-isystem", SHIM_INCLUDE]


def parse_cuda(source: str, filename: str = "kernel.cu", build_options: str = "") -> ci.TranslationUnit:
    """Parse CUDA source with libclang in CUDA mode; :class:`ParseError` on errors in the file."""
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


def find_cuda_kernels(tu: ci.TranslationUnit, filename: str) -> dict[str, ci.Cursor]:
    """``__global__`` function definitions (and function templates) of the main file, by name."""
    out: dict[str, ci.Cursor] = {}
    for c in tu.cursor.get_children():
        if c.location.file is None or c.location.file.name != filename:
            continue
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
            dtype = _norm(_strip(ps), sub)
            is_const = bool(re.search(r"\bconst\b", ps))
            out.append(KernelParam(i, a.spelling, "buffer", "global", dtype, is_const, spelling))
        else:
            dtype = _norm(_strip(spelling), sub)
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


def cuda_kernel_signatures(source: str, build_options: str = "", filename: str = "kernel.cu"
                           ) -> dict[str, list[KernelParam]]:
    """Every ``__global__`` kernel of ``source`` with its parameters (template kernels: the
    parameters as declared, with template parameter names as types)."""
    tu = parse_cuda(source, filename, build_options)
    return {name: cuda_params(c) for name, c in find_cuda_kernels(tu, filename).items()}


def cuda_kernel_info(source: str, name: str, build_options: str = "", filename: str = "kernel.cu") -> CudaKernelInfo:
    """The kernel ``name`` (``reduce<float, 256>`` for a template) of a CUDA source; ParseError
    when the source does not parse or the kernel is not there."""
    tu = parse_cuda(source, filename, build_options)
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


def translate(source: str, name: str, build_options: str = "", filename: str = "kernel.cu") -> Translation:
    """C++ for OpenCL text of kernel ``name`` of a CUDA source (module docstring)."""
    tu = parse_cuda(source, filename, build_options)
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
    for c in tu.cursor.get_children():
        if c.location.file is None or c.location.file.name != filename:
            continue
        if c.kind not in (K.FUNCTION_DECL, K.FUNCTION_TEMPLATE) or off(c.extent.start) == kstart:
            continue
        at = _attrs(c)
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
        if t.kind == ci.TokenKind.IDENTIFIER:
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


__all__ = ["CUDA_SHIM", "CudaKernelInfo", "Translation", "cuda_kernel_info", "cuda_kernel_signatures",
           "cuda_params", "dynamic_shared", "find_cuda_kernels", "instantiation", "is_cuda_path", "looks_like_cuda",
           "parse_cuda", "ptx_entry_name", "split_name", "translate"]

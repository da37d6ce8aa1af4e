"""What an AMD GPU compiler makes of a CUDA/HIP kernel: registers, spills and scratch accesses.

A kernel's registers decide how many wavefronts a compute unit holds, and a kernel that needs more
than the compiler may give it spills to scratch (per-lane private memory in device memory): every
spilled value is stored and loaded again through the memory hierarchy. Neither shows in the source.
Tuned kernels hit both: a convolution whose tile of accumulators and re-used inputs grows with two
tunable parameters goes from 17 to 128 vector registers and from none to hundreds of spilled ones.

:func:`compile_resources` compiles the kernel for the profile's LLVM target (``gfx90a``,
``gfx1032``, ``gfx1100``...; :attr:`calib.profile.DeviceIdentity.llvm_target`) with a clang that has
the AMDGPU back-end (the same clang the PTX features use; Debian's ``clang-16`` has it), device code
only, without the HIP runtime headers: a small prelude maps CUDA's built-in variables and
intrinsics to clang's AMDGPU builtins. Like HIP's runtime compiler, the kernel is compiled for
work-groups of up to 1,024 work-items unless it states its own ``__launch_bounds__``, which is what
limits its registers (128 vector registers per lane on RDNA wave32 and on CDNA). It reads the code
object's metadata (``.vgpr_count``, ``.sgpr_count``, ``.vgpr_spill_count``,
``.private_segment_fixed_size``, ``.group_segment_fixed_size``) and counts the kernel's
instructions: scratch loads and stores (``scratch_*``, ``buffer_*``: without the runtime headers
every global access is a ``global_``/``flat_`` instruction, so ``buffer_`` ones are scratch) with
their bytes per lane, global vector memory instructions (``global_*``/``flat_*`` loads, stores and
atomics) with the 32-bit values each moves per lane, and vector ALU instructions. The values per
lane are what the compute unit's vector memory path returns (a GCN/CDNA compute unit 16 per clock):
a load that every lane makes from one address still returns its values to each lane, and the
compiler turns some of the loads the source shows as one per work-group into such per-lane vector
loads (a tile loop it unrolls fully loads a table through the scalar unit in its first copy and
with ``global_load_dwordx4`` in the others).

The counts are static (instructions in the code, not executions): a loop the compiler kept runs
its body many times. :attr:`AmdgpuResources.scratch_per_float` relates the two: the spill code sits
in the same bodies as the arithmetic whose values it holds, so a device class scales it by the
floating-point operations the source analysis counts per work-item (executed, with trip counts).
:attr:`AmdgpuResources.vmem_per_float` scales the vector memory values the same way.

Compiles are cached per (target, source, the macros it names, kernel) in memory and, given a
directory, on disk as JSON (:func:`compile_cached`), so a dataset's thousands of configurations
compile once each; a kernel whose first :data:`FAIL_FAST` compiles all fail is not tried again.
OpenCL C sources are not compiled here (their built-ins need the device library): ``None``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelcast.models.static.ptx import _run, find_clang

from kernelcast.cuda import defined_macros

log = logging.getLogger(__name__)

#: the version of what :func:`compile_resources` computes; part of every cache key
AMDGPU_VERSION = 2
#: languages compiled here
LANGUAGES = ("cuda", "hip")

#: CUDA's built-in variables and intrinsics over clang's AMDGPU builtins (device code, no HIP
#: runtime headers). ``__ldg`` is a plain load on AMD GPUs, as HIP defines it.
PRELUDE = r"""
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __attribute__((always_inline)) inline
#define __launch_bounds__(n, ...) __attribute__((amdgpu_flat_work_group_size(1, n)))
struct __kc_dim3 { unsigned x, y, z; };
#define threadIdx (__kc_dim3{__builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(), \
                              __builtin_amdgcn_workitem_id_z()})
#define blockIdx (__kc_dim3{__builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(), \
                             __builtin_amdgcn_workgroup_id_z()})
#define blockDim (__kc_dim3{__builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(), \
                             __builtin_amdgcn_workgroup_size_z()})
#define gridDim (__kc_dim3{__builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(), \
                            __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(), \
                            __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z()})
#define warpSize __builtin_amdgcn_wavefrontsize()
#define __syncthreads() __builtin_amdgcn_s_barrier()
#define __threadfence() __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent")
template <class __KcT> __device__ inline __KcT __ldg(const __KcT* p) { return *p; }
template <class __KcT> __device__ inline __KcT min(__KcT a, __KcT b) { return a < b ? a : b; }
template <class __KcT> __device__ inline __KcT max(__KcT a, __KcT b) { return a > b ? a : b; }
template <class __KcT> __device__ inline __KcT atomicAdd(__KcT* p, __KcT v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
#define sqrtf __builtin_sqrtf
#define fabsf __builtin_fabsf
#define fminf __builtin_fminf
#define fmaxf __builtin_fmaxf
#define floorf __builtin_floorf
#define ceilf __builtin_ceilf
#define fmaf __builtin_fmaf
#define rsqrtf(x) (1.0f / __builtin_sqrtf(x))
"""

_META_KEYS = {".vgpr_count": "vgprs", ".sgpr_count": "sgprs", ".vgpr_spill_count": "vgpr_spills",
              ".sgpr_spill_count": "sgpr_spills", ".private_segment_fixed_size": "scratch_bytes",
              ".group_segment_fixed_size": "lds_bytes", ".wavefront_size": "wavefront",
              ".agpr_count": "agprs"}
_SCRATCH_RE = re.compile(r"^(?:scratch|buffer)_(load|store)_(?:dword|b)(x?\d*)")
#: global (and flat) vector memory instructions: loads, stores and atomics, and their data type
_VMEM_RE = re.compile(r"^(?:global|flat)_(?:load|store|atomic)_(\w+)")
_VMEM_WIDTH_RE = re.compile(r"^(?:dwordx?(\d*)|[buif](\d+)|x(\d+))$")
_VALU_RE = re.compile(r"^v_")
#: floating-point arithmetic: what the source analysis counts as fp32/fp64 operations
_FLOAT_RE = re.compile(r"^v_(?:pk_)?(?:fma|fmac|mac|mad|mul|add|sub|subrev)(?:k|mk|ak)?_(?:legacy_)?f(?:16|32|64)")


@dataclass
class AmdgpuResources:
    """One kernel compiled for one AMD target (module docstring)."""

    target: str
    vgprs: int = 0                # vector registers per lane (architected; CDNA adds ``agprs``)
    agprs: int = 0                # accumulation registers per lane (CDNA)
    sgprs: int = 0
    vgpr_spills: int = 0          # vector registers spilled to scratch
    sgpr_spills: int = 0
    scratch_bytes: int = 0        # private segment per work-item
    lds_bytes: int = 0            # static local (shared) memory per work-group
    wavefront: int = 0
    scratch_ops: int = 0          # scratch load/store instructions in the code
    scratch_op_bytes: int = 0     # their bytes per lane, summed
    vmem_ops: int = 0             # global/flat vector load, store and atomic instructions in the code
    vmem_dwords: int = 0          # their 32-bit values per lane, summed (a byte or a short: one)
    valu_ops: int = 0             # vector ALU instructions in the code
    float_ops: int = 0            # of them floating-point add/multiply/FMA
    instructions: int = 0         # every instruction in the kernel's code

    @property
    def scratch_per_float(self) -> float:
        """Scratch bytes per lane for each floating-point instruction of the code (0: none)."""
        return self.scratch_op_bytes / self.float_ops if self.float_ops else 0.0

    @property
    def scratch_per_valu(self) -> float:
        """Scratch bytes per lane for each vector ALU instruction of the code (0: none)."""
        return self.scratch_op_bytes / self.valu_ops if self.valu_ops else 0.0

    @property
    def vmem_per_float(self) -> float:
        """Global vector-memory values per lane for each floating-point instruction of the code."""
        return self.vmem_dwords / self.float_ops if self.float_ops else 0.0

    @property
    def vmem_per_valu(self) -> float:
        """Global vector-memory values per lane for each vector ALU instruction of the code."""
        return self.vmem_dwords / self.valu_ops if self.valu_ops else 0.0


def vmem_dwords(op: str) -> int:
    """The 32-bit values per lane a global/flat vector memory instruction moves, or 0 for another
    instruction: ``global_load_dwordx4`` and ``global_load_b128`` 4, ``global_atomic_add_x2``,
    ``global_atomic_add_u64`` and ``global_load_b64`` 2, a byte, a short or a dword 1."""
    m = _VMEM_RE.match(op)
    if not m:
        return 0
    n = 1
    for token in m.group(1).split("_"):
        w = _VMEM_WIDTH_RE.match(token)
        if w is None:
            continue
        if w.group(1) is not None:                      # dword, dwordxN
            n = max(n, int(w.group(1) or 1))
        elif w.group(2):                                 # bN / uN / iN / fN: bits
            n = max(n, int(w.group(2)) // 32)
        else:                                            # xN: N dwords (64-bit atomics)
            n = max(n, int(w.group(3)))
    return n


@functools.lru_cache(maxsize=1)
def find_amdgpu_clang() -> str | None:
    """The clang of the PTX features if it also has the AMDGPU back-end, else None."""
    clang = find_clang()
    if clang is None:
        return None
    r = _run([clang, "--print-targets"], timeout=30.0)
    if r is None or r.returncode != 0 or "amdgcn" not in r.stdout:
        return None
    return clang


def _symbol_matches(symbol: str, name: str) -> bool:
    """``name`` is the kernel's plain name; ``symbol`` its (possibly Itanium-mangled) symbol."""
    return symbol == name or symbol.startswith(f"_Z{len(name)}{name}")


def parse_assembly(asm: str, kernel_name: str, target: str) -> AmdgpuResources | None:
    """The resources of ``kernel_name`` from clang's AMDGPU assembly (metadata and code), or None
    when the assembly has no such kernel."""
    meta = asm.split(".amdgpu_metadata", 1)[1] if ".amdgpu_metadata" in asm else ""
    entries: list[dict[str, str]] = []
    for line in meta.splitlines():
        s = line.strip()
        if line.startswith("  - ."):          # a new kernel entry of ``amdhsa.kernels``
            entries.append({})
            s = s[2:]
        if entries and line.startswith(("  - .", "    .")) and ":" in s:
            k, _, v = s.partition(":")
            entries[-1][k.strip()] = v.strip()
    entry = next((e for e in entries if _symbol_matches(e.get(".name", ""), kernel_name)), None)
    if entry is None:
        return None
    symbol = entry[".name"]
    res = AmdgpuResources(target=target)
    for key, attr in _META_KEYS.items():
        if entry.get(key, "").isdigit():
            setattr(res, attr, int(entry[key]))
    body = re.search(rf"^{re.escape(symbol)}:(.*?)^\.Lfunc_end", asm, re.M | re.S)
    for line in (body.group(1).splitlines() if body else []):
        op = line.strip().split(None, 1)[0] if line.strip() else ""
        if not op or op.startswith((".", ";")) or op.endswith(":"):
            continue
        res.instructions += 1
        m = _SCRATCH_RE.match(op)
        if m:
            res.scratch_ops += 1
            width = m.group(2).lstrip("x")
            n = int(width) if width.isdigit() else 1
            res.scratch_op_bytes += 4 * n if op.split("_")[2].startswith("dword") else max(n // 8, 1)
        elif _VMEM_RE.match(op):
            res.vmem_ops += 1
            res.vmem_dwords += vmem_dwords(op)
        elif _VALU_RE.match(op):
            res.valu_ops += 1
            res.float_ops += bool(_FLOAT_RE.match(op))
    return res


_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


@functools.lru_cache(maxsize=64)
def _names(source: str) -> frozenset[str]:
    """The identifiers of a source (one pass per source, not per configuration)."""
    return frozenset(_IDENT_RE.findall(source))


def used_defines(source: str, options: str) -> list[str]:
    """The ``-D`` flags of ``options`` (either spelling, ``-DX=1`` or ``-D X=1``) whose macro the
    source names: a macro it never names cannot change its code (a tuner's parameter that only
    another version of the kernel reads), so configurations that differ only in such macros share
    one compile."""
    names = _names(source)
    return [f"-D{k}={v}" for k, v in defined_macros(options).items() if k in names]


_UNROLL_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll[ \t]+\(?[ \t]*(\w+)[ \t]*\)?[ \t]*$", re.M)


def drop_zero_unrolls(source: str, options: str) -> str:
    """``source`` without the ``#pragma unroll N`` lines whose ``N`` is 0 (a literal, or a macro
    ``options`` define as 0): Kernel Tuner's rule for CUDA and HIP, where a ``loop_unroll_factor``
    of 0 leaves the unrolling to the compiler (clang rejects a count of 0)."""
    zeros = {k for k, v in defined_macros(options).items() if v.strip() == "0"}
    return _UNROLL_RE.sub(lambda m: "" if m.group(1) == "0" or m.group(1) in zeros else m.group(0), source)


def compile_resources(source: str, kernel_name: str, target: str, options: str = "",
                      language: str = "cuda") -> AmdgpuResources | None:
    """Compile ``kernel_name`` of a CUDA/HIP ``source`` for ``target`` with the build ``options``'
    macros (``-D``), or None: no clang with the AMDGPU back-end, an OpenCL source, or a compile
    error (logged at debug level)."""
    if language.lower() not in LANGUAGES or not target:
        return None
    clang = find_amdgpu_clang()
    if clang is None:
        return None
    with tempfile.TemporaryDirectory(prefix="kc_amdgpu_") as td:
        pre = os.path.join(td, "prelude.h")
        src = os.path.join(td, "kernel.cu")
        out = os.path.join(td, "kernel.s")
        Path(pre).write_text(PRELUDE)
        Path(src).write_text(drop_zero_unrolls(source, options))
        cmd = [clang, "-x", "hip", f"--offload-arch={target}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
               "-O3", "-S", "-w", "-include", pre, *used_defines(source, options), src, "-o", out]
        r = _run(cmd, cwd=td)
        if r is None or r.returncode != 0 or not os.path.exists(out):
            log.debug("clang could not compile %s for %s: %s", kernel_name, target,
                      (r.stderr.strip()[:500] if r is not None else "did not run"))
            return None
        return parse_assembly(Path(out).read_text(), kernel_name, target)


def cache_key(source: str, kernel_name: str, target: str, options: str, language: str) -> str:
    """The key of one compile: the inputs that decide its result (the source as compiled), and the
    versions."""
    clang = find_amdgpu_clang() or ""
    return hashlib.sha256("\0".join([str(AMDGPU_VERSION), clang, target, language.lower(), kernel_name,
                                     " ".join(used_defines(source, options)),
                                     drop_zero_unrolls(source, options)]).encode()).hexdigest()[:32]


_MEMO: dict[str, AmdgpuResources | None] = {}
#: compiles remembered in memory at most (the oldest forgotten first; the disk cache keeps them all)
MEMO_MAX = 1 << 16
#: a kernel (source, target) whose first compiles all failed is not compiled again in this process
#: (a construct this compiler rejects fails every configuration alike): failures, successes
FAIL_FAST = 3
_TRIES: dict[str, list[int]] = {}


def compile_cached(source: str, kernel_name: str, target: str, options: str = "", language: str = "cuda",
                   cache_dir: str | os.PathLike[str] | None = None) -> AmdgpuResources | None:
    """:func:`compile_resources`, remembered in memory and, with ``cache_dir``, on disk (one JSON file
    per compile under ``cache_dir/amdgpu/``; a failed compile is remembered as ``null``)."""
    if language.lower() not in LANGUAGES or not target:
        return None
    key = cache_key(source, kernel_name, target, options, language)
    if key in _MEMO:
        return _MEMO[key]
    path = Path(cache_dir) / "amdgpu" / f"{key}.json" if cache_dir else None
    if path is not None and path.is_file():
        try:
            d = json.loads(path.read_text())
            _MEMO[key] = AmdgpuResources(**d) if d else None
            return _MEMO[key]
        except (OSError, ValueError, TypeError):
            log.debug("unreadable compile cache entry %s: compiling again", path)
    kernel = hashlib.sha256("\0".join([target, kernel_name, source]).encode()).hexdigest()
    tries = _TRIES.setdefault(kernel, [0, 0])
    if tries[0] >= FAIL_FAST and not tries[1]:
        return None
    got = compile_resources(source, kernel_name, target, options, language)
    tries[got is not None] += 1
    if len(_MEMO) >= MEMO_MAX:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = got
    if path is not None and find_amdgpu_clang() is not None:
        # a temporary name of this writer's own (processes and threads sharing the cache may compile
        # the same configuration at once); a cache that cannot be written only costs a compile later
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(asdict(got) if got else None))
            os.replace(tmp, path)
        except OSError as e:
            log.debug("could not write the compile cache entry %s: %s", path, e)
    return got


def compile_many(items: Iterable[tuple[str, str, str, str]], target: str,
                 cache_dir: str | os.PathLike[str] | None = None, workers: int | None = None) -> int:
    """Compile the distinct ``(source, kernel_name, options, language)`` of ``items`` for ``target``
    into the caches of :func:`compile_cached`, ``workers`` compiles at a time (default: the CPUs;
    each is a clang process, so threads suffice). Returns how many were not cached yet."""
    if not target or find_amdgpu_clang() is None:
        return 0
    todo: dict[str, tuple[str, str, str, str]] = {}
    for source, name, options, language in items:
        if language.lower() not in LANGUAGES:
            continue
        key = cache_key(source, name, target, options, language)
        path = Path(cache_dir) / "amdgpu" / f"{key}.json" if cache_dir else None
        if key not in _MEMO and key not in todo and not (path is not None and path.is_file()):
            todo[key] = (source, name, options, language)
    if not todo:
        return 0
    n = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    log.info("compiling %d configurations for %s (%d at a time)", len(todo), target, n)
    with ThreadPoolExecutor(max_workers=n) as pool:
        list(pool.map(lambda a: compile_cached(a[0], a[1], target, a[2], a[3], cache_dir), todo.values()))
    return len(todo)

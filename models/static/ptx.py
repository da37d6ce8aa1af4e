"""PTX static features: toolchains that produce PTX, and a PTX parser with CFG and loop analysis.

Toolchains (each optional; the functions return ``None`` when it is missing or fails):

* OpenCL C -> PTX: a ``clang`` with the NVPTX back-end (Debian ``clang-14``..``clang-19``, or
  ``KERNELCAST_CLANG``), ``clang -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -S
  -Xclang -finclude-default-header``. Without libclc the OpenCL builtins stay external calls
  (``call _Z13get_global_idj``, ``call _Z3sinf``, ``call _Z7barrierj``); :func:`parse_ptx`
  classifies such calls by their demangled name (``sin`` -> sfu, ``barrier`` -> barrier,
  ``atomic_add`` on ``AS1``/``AS3`` -> global/shared atomic, ``vload4`` -> a 16-byte global load).
* CUDA -> PTX: ``nvcc -ptx -arch=sm_XX``. CUDA 13 supports ``sm_75`` and newer; an arch the
  installed nvcc does not support is replaced by the lowest one it does (logged).
* ``ptxas -v`` for registers, shared memory, stack, spills, barriers per function
  (:func:`ptxas_resources`); undefined builtin declarations are marked ``.extern`` and compiled
  with ``-c`` so OpenCL PTX assembles too.

Parser: functions (``.entry``/``.func``), statements, labels, basic blocks (leaders: first
statement, labels, statements after a branch/return), edges (``bra`` target, fall-through unless
unconditional; ``ret``/``exit`` end the function), dominators, back edges (edge ``u -> h`` with
``h`` dominating ``u``), natural loops (merged by header) and the loop depth of every block.
``weighted`` counts multiply every block by ``trip ** depth`` with a default trip count per loop
level of :data:`DEFAULT_PTX_TRIP` (8, the same default as the source analysis' ``avg_trip``):
a rough dynamic count per thread when trip counts are unknown. Calls of functions defined in the
module add the callee's weighted counts at the call site.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from kernelcast.models.static.features import PtxBlock, PtxFeatures, PtxLoop

from kernelcast.clang import build_option_defines
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

#: default trip count per loop level for ``PtxFeatures.weighted``
DEFAULT_PTX_TRIP = 8.0
#: seconds a compiler may run
TOOL_TIMEOUT_S = 60.0

_CLANG_CANDIDATES = ("clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14", "clang")


# ----------------------------------------------------------------------------------------------
# toolchains
# ----------------------------------------------------------------------------------------------

def _run(cmd: list[str], *, stdin: str | None = None, timeout: float = TOOL_TIMEOUT_S,
         cwd: str | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.debug("%s failed: %s", cmd[0], e)
        return None


@functools.lru_cache(maxsize=1)
def find_clang() -> str | None:
    """A clang binary with the NVPTX back-end, or None."""
    env = os.environ.get("KERNELCAST_CLANG")
    cands = [env] if env else []
    cands += [c for c in (shutil.which(n) for n in _CLANG_CANDIDATES) if c]
    for c in cands:
        r = _run([c, "--print-targets"], timeout=20)
        if r is not None and r.returncode == 0 and "nvptx64" in r.stdout:
            return c
    return None


#: the oldest clang the set-up accepts without installing a newer one: LLVM 15 compiles for gfx1100
#: with at most 128 VGPRs a work-item and spills what clang 16 keeps in up to 192, so an older
#: clang's AMD register counts (models.static.amdgpu) are not those the figures were made with
MIN_CLANG_MAJOR = 16

_VERSION_RE = re.compile(r"clang version (\d+)\.")


def clang_major(clang: str) -> int | None:
    """The major version of a clang binary (``clang --version``), None when it does not say."""
    r = _run([clang, "--version"], timeout=20)
    m = _VERSION_RE.search(r.stdout) if r is not None and r.returncode == 0 else None
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=1)
def find_nvcc() -> str | None:
    c = shutil.which("nvcc")
    if c is None and os.path.exists("/usr/local/cuda/bin/nvcc"):
        c = "/usr/local/cuda/bin/nvcc"
    return c


@functools.lru_cache(maxsize=1)
def find_ptxas() -> str | None:
    c = shutil.which("ptxas")
    if c is None and os.path.exists("/usr/local/cuda/bin/ptxas"):
        c = "/usr/local/cuda/bin/ptxas"
    return c


@functools.lru_cache(maxsize=1)
def nvcc_archs() -> tuple[str, ...]:
    """``sm_XX`` targets the installed nvcc accepts, ascending (empty without nvcc)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return ()
    r = _run([nvcc, "--list-gpu-arch"], timeout=30)
    if r is None or r.returncode != 0:
        return ()
    nums = sorted({int(m) for m in re.findall(r"compute_(\d+)", r.stdout)})
    return tuple(f"sm_{n}" for n in nums)


def _arch_num(arch: str) -> int:
    m = re.match(r"(?:sm|compute)_(\d+)", arch)
    return int(m.group(1)) if m else 0


def resolve_arch(arch: str | None) -> str:
    """``arch`` if nvcc supports it, else the lowest supported (``sm_75`` when nvcc is absent)."""
    archs = nvcc_archs()
    if not archs:
        return arch or "sm_75"
    if arch is None:
        return archs[0]
    if arch in archs:
        return arch
    log.info("nvcc does not support %s; using %s", arch, archs[0])
    return archs[0]


@functools.lru_cache(maxsize=1)
def tool_versions() -> dict[str, str]:
    """First version line of each toolchain found (for provenance)."""
    out: dict[str, str] = {}
    for name, path in (("clang", find_clang()), ("nvcc", find_nvcc()), ("ptxas", find_ptxas())):
        if path is None:
            continue
        r = _run([path, "--version"], timeout=20)
        if r is not None and r.returncode == 0:
            lines = [x for x in r.stdout.splitlines() if x.strip()]
            first = lines[0] if lines else ""
            ver = next((x for x in lines if "version" in x.lower() or "release" in x.lower()), first)
            out[name] = f"{path}: {ver.strip()}"
    return out


_PTX_CACHE: dict[str, str | None] = {}
_PTX_CACHE_MAX = 64


def _cache_get(key: str) -> tuple[bool, str | None]:
    if key in _PTX_CACHE:
        return True, _PTX_CACHE[key]
    return False, None


def _cache_put(key: str, val: str | None) -> None:
    if len(_PTX_CACHE) >= _PTX_CACHE_MAX:
        _PTX_CACHE.pop(next(iter(_PTX_CACHE)))
    _PTX_CACHE[key] = val


def _cl_options(build_options: str) -> tuple[list[str], str]:
    """clang flags from an OpenCL build-option string: -D/-I, -cl-* flags, and the -cl-std."""
    flags = build_option_defines(build_options)
    std = "CL1.2"
    for tok in build_options.split():
        if tok.startswith("-cl-std="):
            std = tok.split("=", 1)[1]
        elif tok in ("-cl-fast-relaxed-math", "-cl-mad-enable", "-cl-no-signed-zeros", "-cl-unsafe-math-optimizations",
                     "-cl-finite-math-only", "-cl-denorms-are-zero", "-cl-single-precision-constant"):
            flags.append(tok)
    return flags, std


def opencl_to_ptx(kernel: Kernel, arch: str | None = None) -> str | None:
    """PTX of an OpenCL C source (all its kernels) with clang's NVPTX back-end, or None.

    ``arch`` (e.g. ``sm_75``) sets the PTX ``.target``; default: clang's default target.
    """
    if kernel.language not in ("opencl", "cl", "opencl-c"):
        return None
    clang = find_clang()
    if clang is None:
        return None
    flags, std = _cl_options(kernel.build_options)
    cmd = [clang, "-x", "cl", f"-cl-std={std}", "-target", "nvptx64-nvidia-nvcl", "-O2", "-S", "-o", "-",
           "-Xclang", "-finclude-default-header", "-Wno-everything", *flags]
    if arch:
        cmd += ["-Xclang", "-target-cpu", "-Xclang", arch]
    cmd.append("-")
    key = hashlib.sha256("\0".join([*cmd, kernel.source]).encode()).hexdigest()
    hit, val = _cache_get(key)
    if hit:
        return val
    out: str | None = None
    # TableGen-declared builtins parse faster than opencl-c.h; fall back to the full header
    for extra in (["-Xclang", "-fdeclare-opencl-builtins"], []):
        r = _run(cmd[:-1] + extra + ["-"], stdin=kernel.source)
        if r is not None and r.returncode == 0 and ".entry" in r.stdout:
            out = r.stdout
            break
        if r is not None:
            log.debug("clang could not compile %s to PTX: %s", kernel.name, r.stderr.strip()[:500])
    _cache_put(key, out)
    return out


def cuda_to_ptx(source: str, arch: str | None = None, options: list[str] | None = None) -> str | None:
    """PTX of a CUDA source with ``nvcc -ptx``, or None (no nvcc, or it failed)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    a = resolve_arch(arch)
    key = hashlib.sha256("\0".join([nvcc, a, *(options or []), source]).encode()).hexdigest()
    hit, val = _cache_get(key)
    if hit:
        return val
    out: str | None = None
    with tempfile.TemporaryDirectory(prefix="kc_nvcc_") as td:
        src = os.path.join(td, "kernel.cu")
        dst = os.path.join(td, "kernel.ptx")
        with open(src, "w") as f:
            f.write(source)
        r = _run([nvcc, "-ptx", f"-arch={a}", *(options or []), src, "-o", dst], cwd=td)
        if r is not None and r.returncode == 0 and os.path.exists(dst):
            with open(dst) as f:
                out = f.read()
        elif r is not None:
            log.debug("nvcc failed: %s", r.stderr.strip()[:500])
    _cache_put(key, out)
    return out


_DECL_RE = re.compile(r"^(\.func\b[^{;]*?\)\s*;|\.func\b[^{;(]*;)", re.M | re.S)


def _mark_extern(ptx: str) -> str:
    """Mark function declarations without a body ``.extern`` (OpenCL builtins on nvcl)."""
    return _DECL_RE.sub(lambda m: ".extern " + m.group(1), ptx)


_RES_CACHE: dict[str, dict[str, dict[str, int]]] = {}


def ptxas_resources(ptx: str, arch: str | None = None) -> dict[str, dict[str, int]]:
    """Per function: ``registers``, ``shared_bytes``, ``stack_bytes``, ``spill_stores``,
    ``spill_loads``, ``barriers``, ``cmem_bytes`` from ``ptxas -v`` (empty dict without ptxas
    or when it fails)."""
    ptxas = find_ptxas()
    if ptxas is None:
        return {}
    a = resolve_arch(arch)
    # a .target newer than the requested arch cannot be assembled for it
    m = re.search(r"^\s*\.target\s+(sm_\d+)", ptx, re.M)
    if m and _arch_num(m.group(1)) > _arch_num(a):
        a = m.group(1)
    text = _mark_extern(ptx)
    key = hashlib.sha256((a + "\0" + text).encode()).hexdigest()
    if key in _RES_CACHE:
        return _RES_CACHE[key]
    out: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="kc_ptxas_") as td:
        src = os.path.join(td, "k.ptx")
        with open(src, "w") as f:
            f.write(text)
        r = _run([ptxas, "-v", "-c", f"-arch={a}", src, "-o", os.path.join(td, "k.o")], cwd=td)
    if r is None or r.returncode != 0:
        if r is not None:
            log.debug("ptxas failed: %s", r.stderr.strip()[:500])
        _RES_CACHE[key] = out
        return out
    out = parse_ptxas_output(r.stderr + r.stdout)
    _RES_CACHE[key] = out
    return out


def parse_ptxas_output(text: str) -> dict[str, dict[str, int]]:
    """Resources per function from ``ptxas -v`` output."""
    out: dict[str, dict[str, int]] = {}
    cur: dict[str, int] | None = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for)\s+'?([\w$.]+)'?", line)
        if m:
            cur = out.setdefault(m.group(1), {})
            continue
        if cur is None:
            continue
        for pat, name in ((r"(\d+) bytes stack frame", "stack_bytes"), (r"(\d+) bytes spill stores", "spill_stores"),
                          (r"(\d+) bytes spill loads", "spill_loads"), (r"Used (\d+) registers", "registers"),
                          (r"(\d+) bytes smem", "shared_bytes"), (r"used (\d+) barriers", "barriers"),
                          (r"(\d+) bytes cmem\[0\]", "cmem_bytes"), (r"(\d+) bytes lmem", "local_bytes")):
            mm = re.search(pat, line)
            if mm:
                cur[name] = int(mm.group(1))
    for v in out.values():
        v.setdefault("shared_bytes", 0)
    return out


# ----------------------------------------------------------------------------------------------
# parsing
# ----------------------------------------------------------------------------------------------

@dataclass
class Instr:
    """One PTX instruction."""

    opcode: str
    operands: str
    pred: str = ""           # "%p1" or "!%p1"
    labels: list[str] = field(default_factory=list)  # labels directly before it


@dataclass
class PtxFunction:
    name: str
    is_entry: bool
    params: list[str]
    body: str
    instrs: list[Instr] = field(default_factory=list)
    directives: list[str] = field(default_factory=list)


_FUNC_RE = re.compile(r"(?:^|\s)(?:\.visible\s+|\.weak\s+|\.extern\s+)?\.(entry|func)\b")
_TYPE_BYTES = {"b8": 1, "s8": 1, "u8": 1, "b16": 2, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "b32": 4, "s32": 4,
               "u32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "s64": 8, "u64": 8, "f64": 8, "b128": 16,
               "pred": 1}
_SPACES = ("global", "shared", "local", "const", "param")
_MANGLED_ELEM = {"f": 4, "d": 8, "i": 4, "j": 4, "h": 1, "c": 1, "a": 1, "s": 2, "t": 2, "l": 8, "m": 8, "Dh": 2}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_functions(ptx: str) -> list[PtxFunction]:
    """Functions with a body (declarations are skipped)."""
    text = strip_comments(ptx)
    out: list[PtxFunction] = []
    pos = 0
    n = len(text)
    while True:
        m = _FUNC_RE.search(text, pos)
        if m is None:
            break
        is_entry = m.group(1) == "entry"
        i = m.end()
        # optional return parameter list of a .func
        j = i
        while j < n and text[j].isspace():
            j += 1
        if not is_entry and j < n and text[j] == "(":
            j = _match_paren(text, j) + 1
        nm = re.match(r"\s*([\w$.]+)", text[j:])
        if nm is None:
            pos = i
            continue
        name = nm.group(1)
        k = j + nm.end()
        params: list[str] = []
        while k < n and text[k].isspace():
            k += 1
        if k < n and text[k] == "(":
            e = _match_paren(text, k)
            params = [p.strip() for p in text[k + 1:e].split(",") if p.strip()]
            k = e + 1
        # directives until '{' (body) or ';' (declaration)
        brace = text.find("{", k)
        semi = text.find(";", k)
        if brace < 0 or (0 <= semi < brace):
            pos = (semi + 1) if semi >= 0 else n
            continue
        end = _match_brace(text, brace)
        out.append(PtxFunction(name, is_entry, params, text[brace + 1:end]))
        pos = end + 1
    return out


def _match_paren(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def _match_brace(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


_LABEL_RE = re.compile(r"^\s*([A-Za-z_$][\w$]*)\s*:(?!:)")


def parse_body(fn: PtxFunction) -> None:
    """Fill ``fn.instrs`` and ``fn.directives`` from the body text."""
    pending: list[str] = []
    for chunk in fn.body.split(";"):
        s = chunk.strip()
        while True:
            s = s.lstrip()
            if s.startswith(("{", "}")):
                s = s[1:]
                continue
            m = _LABEL_RE.match(s)
            if m and not s.startswith((".", "@")):
                pending.append(m.group(1))
                s = s[m.end():]
                continue
            break
        s = s.strip()
        if not s:
            continue
        if s.startswith("."):
            fn.directives.append(" ".join(s.split()))
            continue
        pred = ""
        if s.startswith("@"):
            p, _, s = s.partition(" ")
            pred = p[1:]
            s = s.strip()
        parts = s.split(None, 1)
        op = parts[0]
        rest = parts[1] if len(parts) > 1 else ""
        fn.instrs.append(Instr(op, " ".join(rest.split()), pred, pending))
        pending = []
    if pending:  # labels at the very end (before the closing brace)
        fn.instrs.append(Instr("nop", "", "", pending))


def demangle_builtin(name: str) -> str:
    """``_Z13get_global_idj`` -> ``get_global_id``; other names unchanged."""
    m = re.match(r"_Z(\d+)", name)
    if not m:
        return name
    n = int(m.group(1))
    return name[m.end():m.end() + n]


_SFU_CALLS = {"sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
              "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "pown", "powr", "rootn",
              "sqrt", "rsqrt", "cbrt", "erf", "erfc", "sincos", "hypot", "lgamma", "tgamma", "sinpi", "cospi",
              "tanpi", "recip", "divide"}


def classify(op: str, operands: str = "") -> tuple[str, int]:
    """``(class, bytes)`` of one instruction (bytes for memory instructions, else 0)."""
    parts = op.split(".")
    base = parts[0]
    mods = parts[1:]
    typ = next((p for p in reversed(mods) if p in _TYPE_BYTES), "")
    vec = 1
    for p in mods:
        if p in ("v2", "v4", "v8"):
            vec = int(p[1:])
    if base in ("ld", "ldu", "st"):
        space = next((p for p in mods if p in _SPACES), "generic")
        kind = "st" if base == "st" else "ld"
        return f"{kind}_{space}", _TYPE_BYTES.get(typ, 4) * vec
    if base in ("atom", "red"):
        space = next((p for p in mods if p in ("global", "shared")), "generic")
        return f"atom_{space}", _TYPE_BYTES.get(typ, 4)
    if base in ("bar", "barrier") and "warp" not in mods:
        return "barrier", 0
    if base in ("membar", "fence"):
        return "fence", 0
    if base in ("bra", "brx"):
        return "branch", 0
    if base in ("ret", "exit"):
        return "ret", 0
    if base == "call":
        return "call", 0
    if base in ("setp", "set"):
        return "cmp", 0
    if base in ("selp", "slct"):
        return "select", 0
    if base == "cvt":
        return "conv", 0
    if base in ("mov", "cvta", "nop", "prefetch", "prefetchu", "isspacep"):
        return "mov", 0
    if base in ("tex", "tld4", "suld", "sust", "sured", "txq", "suq"):
        return "texture", 0
    if base in ("shfl", "vote", "match", "activemask", "redux", "elect"):
        return "warp", 0
    fp = "fp64" if typ == "f64" else "fp32" if typ in ("f32", "f16", "f16x2", "bf16", "bf16x2") else ""
    if fp:
        if base in ("add", "sub", "neg", "abs", "min", "max", "copysign", "testp"):
            return f"{fp}_add", 0
        if base == "mul":
            return f"{fp}_mul", 0
        if base in ("fma", "mad"):
            return f"{fp}_fma", 0
        if base == "div":
            return f"{fp}_div", 0
        if base in ("rcp", "sqrt") and fp == "fp64" and "approx" not in mods:
            return "fp64_div", 0
        if base in ("sin", "cos", "ex2", "lg2", "rsqrt", "sqrt", "rcp", "tanh"):
            return "sfu", 0
        return f"{fp}_add", 0
    if base in ("add", "sub", "neg", "abs", "min", "max", "addc", "subc", "sad"):
        return "int_add", 0
    if base in ("mul", "mul24", "mad", "mad24", "madc", "mul.wide", "dp4a", "dp2a"):
        return "int_mul", 0
    if base in ("div", "rem"):
        return "int_div", 0
    if base in ("and", "or", "xor", "not", "cnot", "shl", "shr", "bfe", "bfi", "brev", "popc", "clz", "prmt",
                "lop3", "shf", "bmsk", "fns", "bfind", "szext"):
        return "int_bit", 0
    return "other", 0


def _call_target(operands: str) -> str:
    """Callee of a ``call`` operand string: ``(retval0), _Z3sinf, (param0)`` -> ``_Z3sinf``."""
    for tok in re.split(r"[,\s]+", re.sub(r"\([^)]*\)", " ", operands)):
        tok = tok.strip()
        if tok and not tok.startswith("%"):
            return tok
    return ""


def _builtin_class(callee: str) -> tuple[str, int]:
    """Class and bytes of a call of an OpenCL builtin (nvcl target without libclc)."""
    name = demangle_builtin(callee)
    if name.startswith(("get_", "get_work_dim")):
        return "sreg", 0
    if name in ("barrier", "work_group_barrier"):
        return "barrier", 0
    if name in ("mem_fence", "read_mem_fence", "write_mem_fence"):
        return "fence", 0
    if name.startswith(("atomic_", "atom_")):
        return ("atom_shared" if "AS3" in callee else "atom_global"), 4
    m = re.match(r"v(load|store)(_half)?(\d+)?$", name)
    if m:
        n = int(m.group(3) or 1)
        space = "shared" if "AS3" in callee else "const" if "AS2" in callee else "global"
        elem = 2 if m.group(2) else _MANGLED_ELEM.get(callee[-1], 4)
        return ("ld_" if m.group(1) == "load" else "st_") + space, n * elem
    base = name
    for pre in ("native_", "half_"):
        if base.startswith(pre):
            base = base[len(pre):]
    if base in _SFU_CALLS:
        return "sfu", 0
    if base in ("fma", "mad", "mix", "dot"):
        return "fp32_fma", 0
    return "call", 0


# ----------------------------------------------------------------------------------------------
# CFG
# ----------------------------------------------------------------------------------------------

@dataclass
class _Block:
    label: str
    instrs: list[Instr]
    succ: list[int] = field(default_factory=list)


def build_cfg(instrs: list[Instr]) -> list[_Block]:
    """Basic blocks with successor indices."""
    blocks: list[_Block] = []
    cur: list[Instr] = []
    label = "entry"

    def close() -> None:
        nonlocal cur
        if cur:
            blocks.append(_Block(label, cur))
        cur = []

    for ins in instrs:
        if ins.labels and cur:
            close()
        if ins.labels:
            label = ins.labels[0]
        elif not cur:
            label = f"bb{len(blocks)}"
        cur.append(ins)
        base = ins.opcode.split(".")[0]
        if base in ("bra", "brx", "ret", "exit", "trap"):
            close()
    close()
    index: dict[str, int] = {}
    for i, b in enumerate(blocks):
        for ins in b.instrs[:1]:
            for lab in ins.labels:
                index[lab] = i
    for i, b in enumerate(blocks):
        last = b.instrs[-1]
        base = last.opcode.split(".")[0]
        fall = i + 1 < len(blocks)
        if base == "bra":
            tgt = last.operands.strip().rstrip(",").split(",")[0].strip()
            if tgt in index:
                b.succ.append(index[tgt])
            if last.pred and fall:
                b.succ.append(i + 1)
        elif base == "brx":
            for lab in re.findall(r"[A-Za-z_$][\w$]*", last.operands):
                if lab in index and index[lab] not in b.succ:
                    b.succ.append(index[lab])
        elif base in ("ret", "exit", "trap"):
            if last.pred and fall:
                b.succ.append(i + 1)
        elif fall:
            b.succ.append(i + 1)
    return blocks


def dominators(blocks: list[_Block]) -> list[set[int]]:
    n = len(blocks)
    if n == 0:
        return []
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, b in enumerate(blocks):
        for s in b.succ:
            preds[s].append(i)
    full = set(range(n))
    dom = [full.copy() for _ in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for i in range(1, n):
            ps = [dom[p] for p in preds[i]]
            new = set.intersection(*ps) if ps else set()
            new = new | {i}
            if new != dom[i]:
                dom[i] = new
                changed = True
    return dom


def natural_loops(blocks: list[_Block]) -> tuple[list[PtxLoop], list[int]]:
    """Natural loops (merged by header) and the loop depth of every block."""
    dom = dominators(blocks)
    preds: list[list[int]] = [[] for _ in blocks]
    for i, b in enumerate(blocks):
        for s in b.succ:
            preds[s].append(i)
    by_header: dict[int, tuple[set[int], list[list[int]]]] = {}
    for u, b in enumerate(blocks):
        for h in b.succ:
            if h in dom[u]:
                body = {h, u}
                stack = [u] if u != h else []
                while stack:
                    x = stack.pop()
                    for p in preds[x]:
                        if p not in body:
                            body.add(p)
                            stack.append(p)
                entry = by_header.setdefault(h, (set(), []))
                entry[0].update(body)
                entry[1].append([u, h])
    depth = [0] * len(blocks)
    for body, _ in by_header.values():
        for x in body:
            depth[x] += 1
    loops: list[PtxLoop] = []
    for h, (body, edges) in sorted(by_header.items()):
        loops.append(PtxLoop(header=h, blocks=sorted(body), depth=depth[h], back_edges=edges))
    return loops, depth


# ----------------------------------------------------------------------------------------------
# features
# ----------------------------------------------------------------------------------------------

def _block_counts(instrs: list[Instr], calls: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    counts: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for ins in instrs:
        if ins.opcode == "nop" and not ins.operands:
            continue
        cls, b = classify(ins.opcode, ins.operands)
        if cls == "call":
            callee = _call_target(ins.operands)
            calls[callee] = calls.get(callee, 0) + 1
            bcls, bb = _builtin_class(callee)
            if bcls != "call":
                cls, b = bcls, bb
        counts[cls] = counts.get(cls, 0) + 1
        if b and (cls.startswith(("ld_", "st_", "atom_"))):
            nbytes[cls] = nbytes.get(cls, 0) + b
    return counts, nbytes


def _select(funcs: list[PtxFunction], kernel_name: str | None) -> PtxFunction | None:
    entries = [f for f in funcs if f.is_entry]
    if kernel_name is None:
        return entries[0] if entries else (funcs[0] if funcs else None)
    for f in entries:
        if f.name == kernel_name:
            return f
    for f in entries:  # C++-mangled CUDA kernel: _Z<len><name>...
        if demangle_builtin(f.name) == kernel_name:
            return f
    return None


def parse_ptx(ptx: str, kernel_name: str | None = None, *, trip: float = DEFAULT_PTX_TRIP) -> PtxFeatures:
    """Static features of one ``.entry`` of a PTX module (the first one without ``kernel_name``).

    Raises ``ValueError`` if there is no such entry.
    """
    funcs = split_functions(ptx)
    for f in funcs:
        parse_body(f)
    fn = _select(funcs, kernel_name)
    if fn is None:
        names = ", ".join(f.name for f in funcs if f.is_entry) or "none"
        raise ValueError(f"PTX has no entry {kernel_name!r} (entries: {names})")
    by_name = {f.name: f for f in funcs}
    memo: dict[str, tuple[dict[str, float], dict[str, float]]] = {}

    def weighted_of(f: PtxFunction, stack: tuple[str, ...]) -> tuple[dict[str, float], dict[str, float],
                                                                    list[PtxBlock], list[PtxLoop], dict[str, int]]:
        blocks = build_cfg(f.instrs)
        loops, depth = natural_loops(blocks)
        calls: dict[str, int] = {}
        w: dict[str, float] = {}
        wb: dict[str, float] = {}
        out_blocks: list[PtxBlock] = []
        for i, b in enumerate(blocks):
            bcalls: dict[str, int] = {}
            c, nb = _block_counts(b.instrs, bcalls)
            for k, v in bcalls.items():
                calls[k] = calls.get(k, 0) + v
            scale = trip ** depth[i]
            for k, v in c.items():
                w[k] = w.get(k, 0.0) + v * scale
            for k, v in nb.items():
                wb[k] = wb.get(k, 0.0) + v * scale
            for callee, ncall in bcalls.items():
                g = by_name.get(callee)
                if g is None or callee in stack:
                    continue
                if callee not in memo:
                    cw, cwb, *_ = weighted_of(g, (*stack, callee))
                    memo[callee] = (cw, cwb)
                cw, cwb = memo[callee]
                for k, fv in cw.items():
                    w[k] = w.get(k, 0.0) + fv * ncall * scale
                for k, fv in cwb.items():
                    wb[k] = wb.get(k, 0.0) + fv * ncall * scale
            out_blocks.append(PtxBlock(label=b.label, n_instructions=len(b.instrs), counts=c, successors=list(b.succ),
                                       loop_depth=depth[i]))
        return w, wb, out_blocks, loops, calls

    weighted, wbytes, pblocks, loops, calls = weighted_of(fn, (fn.name,))
    counts: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for b in pblocks:
        for k, v in b.counts.items():
            counts[k] = counts.get(k, 0) + v
    _, nbytes = _block_counts(fn.instrs, {})
    for k, fv in wbytes.items():
        weighted[f"{k}_bytes"] = fv
    regs: dict[str, int] = {}
    shared = local = 0
    seen: set[str] = set()
    for d in fn.directives:
        m = re.match(r"\.reg\s+\.(\w+)\s+%\w+(?:<(\d+)>)?", d)
        if m:
            regs[m.group(1)] = regs.get(m.group(1), 0) + int(m.group(2) or 1)
            continue
        m = re.match(r"\.(shared|local)\b.*?\.(\w+)\s+[\w$.]+\[(\d+)\]", d)
        if m:
            size = _TYPE_BYTES.get(m.group(2), 1) * int(m.group(3))
            nm = re.search(r"([\w$.]+)\[\d+\]", d)
            if nm:
                seen.add(nm.group(1))
            if m.group(1) == "shared":
                shared += size
            else:
                local += size
    # module-level .shared declarations that the kernel uses (clang puts __local arrays there)
    text = strip_comments(ptx)
    for m in re.finditer(r"^\s*\.shared\s+[^;]*?\.(\w+)\s+([\w$.]+)\[(\d+)\]\s*;", text, re.M):
        if m.group(2) not in seen and m.group(2) in fn.body:
            shared += _TYPE_BYTES.get(m.group(1), 1) * int(m.group(3))
    dims = 1
    for m in re.finditer(r"%(?:tid|ctaid|ntid|nctaid)\.([xyz])", fn.body):
        dims = max(dims, {"x": 1, "y": 2, "z": 3}[m.group(1)])
    tm = re.search(r"^\s*\.target\s+([^\n]+)", text, re.M)
    vm = re.search(r"^\s*\.version\s+([\d.]+)", text, re.M)
    return PtxFeatures(
        kernel_name=fn.name,
        target=tm.group(1).strip() if tm else "",
        version=vm.group(1) if vm else "",
        n_instructions=sum(b.n_instructions for b in pblocks),
        counts=counts,
        weighted={k: float(v) for k, v in weighted.items()},
        bytes=nbytes,
        blocks=pblocks,
        loops=loops,
        max_loop_depth=max((b.loop_depth for b in pblocks), default=0),
        n_params=len(fn.params),
        registers_declared=regs,
        shared_bytes=shared,
        local_bytes=local,
        dims_used=dims,
        calls=calls,
        trip_per_level=trip,
    )


def ptx_entries(ptx: str) -> list[str]:
    """Names of the ``.entry`` functions of a PTX module."""
    return [f.name for f in split_functions(ptx) if f.is_entry]

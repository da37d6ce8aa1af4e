"""Source rewriting that records where a kernel touches its __global / __constant arguments.

This is the "InsertArrayHook" of LLMPerf's Algorithm 1 (II-B2): libclang finds every access to
memory reached through a pointer *argument*, and the source is rewritten (by byte offsets of the
cursor extents, edits applied back to front) so each access first records its byte range into a
small side buffer with atomics, then goes through a guard.

What the rewritten kernel does
------------------------------
* One parameter is appended: ``__global long* __kc_rec`` (``__global int*`` in 32-bit mode). Per
  argument slot it holds four words ``[min byte, max byte, access count, limit bytes]``; the host
  initialises min to LONG_MAX, max to LONG_MIN, count to 0 and limit to the number of bytes of the
  argument that are really in use (see :meth:`RewriteResult.initial_record`).
* At kernel entry the address of every pointer argument is saved (``__kc_b<slot>``) together with
  its limit (``__kc_l<slot>``). An access computes its byte offset at run time as
  ``(address accessed) - (saved base)``, so any pointer arithmetic works without modelling it:
  ``*(p + i)``, ``*(p++)``, ``p += off; p[i]``, aliases such as ``__global float* row = A + r*n``,
  casts such as ``((__global float4*)p)[i]``, pointer-bumping loops ``for (q = p; q < end; ++q)``.
  The source only has to tell *which* argument a pointer comes from; that is a small data-flow
  analysis over local pointer variables (their initialisers and assignments).
* **Guarded accesses.** Every access is rewritten to ``*__KC_ACC(ptr, index, n, slot...)``, which
  records the range and returns the real address when the range lies inside ``[0, limit)``, and a
  *sink* address past the limit otherwise. The instrumented run therefore never touches memory
  out of bounds however wrong the trial sizes are: out-of-range accesses are recorded but land in
  a small pad allocated after each buffer (``PAD_BYTES``). Reads from the sink return whatever the
  pad holds (random data, like the rest of the buffer).
* Byte ranges are converted to element indices of the argument's declared type on the host, so a
  ``float4*`` argument counts in float4 elements, and ``vload4(i, p)`` on a ``float*`` touches
  elements ``4i..4i+3``; a cast ``((__global float4*)p)[i]`` touches float elements ``4i..4i+3``.
* Helper functions that receive a pointer argument are cloned (``__kc_h_<name>``) with three extra
  parameters per __global/__constant pointer parameter (slot, base, limit) plus the record buffer;
  the kernel calls the clone, the original stays for any other caller. Helpers returning a pointer
  derived from one of their parameters are followed too.
* Atomics (``atomic_add(&p[i], v)``, ``atom_inc(p + i)``...) and math built-ins with an out
  pointer (``sincos``, ``fract``...) count as one-element accesses at the pointer they receive.
* ``__KC_ACC`` uses ``__typeof__`` (a GNU extension accepted by every clang-based OpenCL compiler:
  PoCL, NVIDIA, AMD, Intel) so no type has to be spelled by the rewriter.

64-bit atomics: the record uses ``atom_min``/``atom_max``/``atom_inc`` on ``long`` with
``cl_khr_int64_base_atomics`` and ``cl_khr_int64_extended_atomics`` enabled. On a device without
them pass ``int64_atomics=False``: the record becomes ``int`` and 32-bit ``atomic_min``/
``atomic_max``/``atomic_inc`` are used, byte offsets saturate at +-2^31 (so buffers of the
instrumented run must stay below 2 GiB) and counts wrap past 2^31.

Unsupported (reported in :attr:`RewriteResult.unsupported`, never silently mis-sized): accesses
through a pointer whose argument cannot be told statically (a variable assigned from two
arguments, a pointer read from memory, made from an integer, returned by an unknown function);
storing a pointer argument into memory (arrays/structs of pointers); passing one to a function
with no body in the source; ``async_work_group_copy`` and friends; accesses written inside a
function-like macro expansion (corpus kernels are preprocessed, so this concerns raw sources).
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

import clang.cindex as ci
import numpy as np
from kernelcast.instrument.backends import backend_for
from kernelcast.instrument.backends.base import DeviceInfo, init_contents
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.clang import KernelParam, ParseError, find_kernels, is_kernel, kernel_params, parse
from kernelcast.cltypes import is_known_type, parse_type
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

log = logging.getLogger(__name__)

REC_NAME = "__kc_rec"
REC_FIELDS = 4                  # per slot: min byte, max byte, count, limit bytes
PAD_BYTES = 512                 # sink region after every buffer of an instrumented run
_SINK_ALIGN = 128               # the sink starts on this alignment past the limit
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)
_PARSE_NAME = "kc_instrument.cl"

_GUARD_64 = """\
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable
ulong __kc_guard(ulong q, long i, long n, long sz, int s, __global long* r, ulong b, long lim) {
  if (s < 0) return q + (ulong)(i * sz);
  long off = (long)(q - b) + i * sz;
  long last = off + n * sz - 1;
  volatile __global long* e = r + 4 * s;
  if (off < e[0]) atom_min(e, off);
  if (last > e[1]) atom_max(e + 1, last);
  atom_inc(e + 2);
  if (off >= 0 && last < lim) return q + (ulong)(i * sz);
  return b + (ulong)((lim + SINK_ALIGN - 1) / SINK_ALIGN * SINK_ALIGN);
}
"""
_GUARD_32 = """\
ulong __kc_guard(ulong q, long i, long n, long sz, int s, __global int* r, ulong b, long lim) {
  if (s < 0) return q + (ulong)(i * sz);
  long off = (long)(q - b) + i * sz;
  long last = off + n * sz - 1;
  int o32 = (int)clamp(off, (long)INT_MIN, (long)INT_MAX);
  int l32 = (int)clamp(last, (long)INT_MIN, (long)INT_MAX);
  volatile __global int* e = r + 4 * s;
  if (o32 < e[0]) atomic_min(e, o32);
  if (l32 > e[1]) atomic_max(e + 1, l32);
  atomic_inc(e + 2);
  if (off >= 0 && last < lim) return q + (ulong)(i * sz);
  return b + (ulong)((lim + SINK_ALIGN - 1) / SINK_ALIGN * SINK_ALIGN);
}
"""
_MACRO = ("#define __KC_ACC(q, i, n, s, b, l) ((__typeof__(q))__kc_guard((ulong)(q), (long)(i), (long)(n), "
          "(long)sizeof(*(q)), (s), __kc_rec, (b), (l)))\n")

#: built-ins that move several elements between memory and private values: name -> (count, stride)
_VLOAD = re.compile(r"^(vload|vstore)(a?_half)?(2|3|4|8|16)?(_rte|_rtz|_rtp|_rtn)?$")
_ASYNC = ("async_work_group_copy", "async_work_group_strided_copy")
_NO_ACCESS_BUILTINS = ("prefetch", "printf")


class RewriteError(ValueError):
    """The kernel could not be rewritten at all (parse error, no such kernel)."""


class InstrumentedRunError(RuntimeError):
    """The instrumented kernel did not run to completion (compile error, timeout, crash...)."""

    def __init__(self, status: str, reason: str, measurement: Measurement | None = None):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.measurement = measurement


@dataclass
class AccessExtent:
    """Where one argument was touched, in elements of its declared type.

    ``count == 0`` means never touched (then ``min_index``/``max_index`` are 0/-1). ``allocated``
    is the element count the run made available, when known."""

    min_index: int
    max_index: int
    count: int
    allocated: int | None = None

    @property
    def needed(self) -> int:
        """Elements an allocation starting at index 0 needs: ``max_index + 1`` (0 if untouched)."""
        return self.max_index + 1 if self.count else 0

    @property
    def out_of_bounds(self) -> bool:
        if not self.count:
            return False
        return self.min_index < 0 or (self.allocated is not None and self.max_index >= self.allocated)


@dataclass
class ArgSlot:
    """One __global/__constant pointer argument and its slot in the record buffer."""

    slot: int
    name: str
    param_index: int
    dtype: str
    qualifier: str
    elem_bytes: int | None          # None for types the host cannot bind (structs)


@dataclass
class RewriteResult:
    original: Kernel
    kernel: Kernel                          # the rewritten kernel (same name, one more parameter)
    slots: dict[str, ArgSlot]
    params: list[KernelParam]               # the original kernel's parameters
    unsupported: list[str] = field(default_factory=list)
    accesses: int = 0                       # access sites rewritten (kernel and helper clones)
    helpers: list[str] = field(default_factory=list)   # helper functions cloned
    int64_atomics: bool = True

    @property
    def ok(self) -> bool:
        return not self.unsupported

    @property
    def rec_dtype(self) -> str:
        return "long" if self.int64_atomics else "int"

    @property
    def rec_count(self) -> int:
        return REC_FIELDS * max(1, len(self.slots))

    def initial_record(self, limit_bytes: dict[str, int]) -> np.ndarray:
        """The record buffer's initial contents for the given per-argument limits (bytes)."""
        big, small = (INT64_MAX, INT64_MIN) if self.int64_atomics else (INT32_MAX, INT32_MIN)
        rec = np.zeros(self.rec_count, dtype=np.int64 if self.int64_atomics else np.int32)
        for s in self.slots.values():
            base = REC_FIELDS * s.slot
            rec[base], rec[base + 1], rec[base + 2] = big, small, 0
            rec[base + 3] = min(int(limit_bytes.get(s.name, 0)), big)
        return rec

    def decode(self, rec: np.ndarray, allocated: dict[str, int] | None = None) -> dict[str, AccessExtent]:
        """Per argument, the touched element range from a record buffer read back after a run."""
        out: dict[str, AccessExtent] = {}
        for s in self.slots.values():
            base = REC_FIELDS * s.slot
            lo, hi, cnt = (int(x) for x in rec[base:base + 3])
            alloc = (allocated or {}).get(s.name)
            if cnt == 0 and lo in (INT64_MAX, INT32_MAX):
                out[s.name] = AccessExtent(0, -1, 0, alloc)
                continue
            esz = s.elem_bytes or 1
            out[s.name] = AccessExtent(lo // esz, hi // esz, cnt if cnt > 0 else cnt + (1 << 32), alloc)
        return out


# ---------------------------------------------------------------------------------------------
# rewriting


@dataclass
class _Hole:
    start: int
    end: int


@dataclass
class _Edit:
    start: int
    end: int
    parts: list[str | _Hole]
    order: int = 0

    def key(self) -> tuple[int, int, int, int]:
        return (self.start, 0 if self.start == self.end else 1, -self.end, self.order)


def _inside(x: _Edit, ed: _Edit) -> bool:
    if ed.start == ed.end or x is ed:
        return False
    if x.start == x.end and x.start in (ed.start, ed.end):
        return False
    return ed.start <= x.start and x.end <= ed.end


def _render(data: bytes, start: int, end: int, edits: list[_Edit]) -> bytes:
    """The bytes ``[start, end)`` with ``edits`` (sorted, all inside the range) applied."""
    out = bytearray()
    pos, i, n = start, 0, len(edits)
    while i < n:
        ed = edits[i]
        if ed.start < pos:
            raise RewriteError(f"overlapping rewrites at byte {ed.start}")
        out += data[pos:ed.start]
        j = i + 1
        nested: list[_Edit] = []
        while j < n and _inside(edits[j], ed):
            nested.append(edits[j])
            j += 1
        for part in ed.parts:
            if isinstance(part, str):
                out += part.encode("utf-8")
            else:
                inner = [x for x in nested if part.start <= x.start and x.end <= part.end]
                out += _render(data, part.start, part.end, inner)
        pos, i = ed.end, j
    out += data[pos:end]
    return bytes(out)


def _apply(data: bytes, start: int, end: int, edits: list[_Edit]) -> bytes:
    return _render(data, start, end, sorted(edits, key=_Edit.key))


Root = tuple[Any, ...]          # ("arg", slot) | ("param", index) | ("static",) | ("unknown",)
_STATIC: Root = ("static",)
_UNKNOWN: Root = ("unknown",)


def _space(t: Any) -> str | None:
    """``"global"``/``"constant"`` for a pointer into that address space, else None."""
    try:
        c = t.get_canonical()
    except Exception:  # noqa: BLE001 - invalid type
        return None
    if c.kind != ci.TypeKind.POINTER:
        return None
    ps = c.get_pointee().spelling
    if "__global" in ps:
        return "global"
    if "__constant" in ps:
        return "constant"
    return None


def _is_array(t: Any) -> bool:
    return t.get_canonical().kind in (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY)


def _exprs(c: Any) -> list[Any]:
    return [x for x in c.get_children() if x.kind.is_expression()]


def _key(decl: Any) -> tuple[str, int]:
    f = decl.location.file
    return (f.name if f else "", decl.location.offset)


@dataclass
class _FuncInfo:
    """One instrumented function (the kernel, or a helper to clone)."""

    cursor: Any
    is_kernel: bool
    edits: list[_Edit] = field(default_factory=list)
    ptr_params: list[int] = field(default_factory=list)        # indices of global/constant pointer params
    return_roots: frozenset[Root] = frozenset()
    accesses: int = 0


class _Instrumenter:
    def __init__(self, kernel: Kernel, int64_atomics: bool):
        self.ci = ci
        self.kernel = kernel
        self.int64 = int64_atomics
        self.data = kernel.source.encode("utf-8")
        ps = parse_for_rewrite(kernel)
        self.tu, self.kcursor, self.tokens, self.tok_offsets = ps.tu, ps.kcursor, ps.tokens, ps.tok_offsets
        self.macros, self.defs, self.protos = ps.macros, ps.defs, ps.protos
        self.unsupported: list[str] = []
        self._order = 0
        self.funcs: dict[str, _FuncInfo] = {}
        self.in_progress: set[str] = set()

    # -- small helpers ------------------------------------------------------------------------

    def _edit(self, start: int, end: int, parts: list[str | _Hole]) -> _Edit:
        self._order += 1
        return _Edit(start, end, parts, self._order)

    def _text(self, c: Any, limit: int = 60) -> str:
        s = self.data[c.extent.start.offset:c.extent.end.offset].decode("utf-8", "replace")
        s = " ".join(s.split())
        return s if len(s) <= limit else s[:limit - 3] + "..."

    def _where(self, func: Any, c: Any) -> str:
        return f"{func.spelling}:{c.location.line}"

    def _report(self, func: Any, c: Any, what: str) -> None:
        msg = f"{self._where(func, c)}: {what}: `{self._text(c)}`"
        if msg not in self.unsupported:
            self.unsupported.append(msg)

    def _token_from(self, offset: int) -> tuple[int, str] | None:
        i = bisect.bisect_left(self.tok_offsets, offset)
        if i >= len(self.tok_offsets):
            return None
        o = self.tok_offsets[i]
        return o, self.tokens[o]

    def _binop(self, c: Any, lhs: Any) -> str:
        t = self._token_from(lhs.extent.end.offset)
        return t[1] if t and t[0] < c.extent.end.offset else "?"

    def _unop(self, c: Any, child: Any) -> str:
        if c.extent.start.offset < child.extent.start.offset:
            return self.tokens.get(c.extent.start.offset, "?")
        t = self._token_from(child.extent.end.offset)
        return t[1] if t else "?"

    def _macro_clash(self, ed: _Edit) -> str | None:
        """A macro expansion overlapping a region the edit replaces (not inside one of its holes)."""
        holes = [p for p in ed.parts if isinstance(p, _Hole)]
        for ms, me, name in self.macros:
            overlaps = (max(ed.start, ms) < min(ed.end, me)) or (ed.start == ed.end and ms <= ed.start < me)
            if not overlaps:
                continue
            if any(h.start <= ms and me <= h.end for h in holes):
                continue
            return name
        return None

    # -- which argument a pointer comes from ----------------------------------------------------

    def _strip(self, c: Any) -> Any:
        K = self.ci.CursorKind
        while c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR) and len(_exprs(c)) == 1:
            c = _exprs(c)[0]
        return c

    def _roots(self, c: Any, env: dict[tuple[str, int], frozenset[Root]]) -> frozenset[Root]:
        K = self.ci.CursorKind
        k = c.kind
        kids = _exprs(c)
        if k == K.DECL_REF_EXPR:
            ref = c.referenced
            if ref is None or ref.kind not in (K.VAR_DECL, K.PARM_DECL):
                return frozenset({_UNKNOWN})
            parent = ref.semantic_parent
            if parent is not None and parent.kind == K.TRANSLATION_UNIT:
                return frozenset({_STATIC})
            return env.get(_key(ref), frozenset())
        if k in (K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.CSTYLE_CAST_EXPR):
            if len(kids) != 1:
                return frozenset({_UNKNOWN})
            child = kids[0]
            if _space(child.type) is None and not _is_array(child.type):
                return frozenset({_UNKNOWN})      # a pointer made from an integer or another space
            return self._roots(child, env)
        if k == K.BINARY_OPERATOR and len(kids) == 2:
            op = self._binop(c, kids[0])
            if op in ("+", "-"):
                ptr = [x for x in kids if _space(x.type) is not None or _is_array(x.type)]
                return self._roots(ptr[0], env) if len(ptr) == 1 else frozenset({_UNKNOWN})
            if op in ("=", ","):
                return self._roots(kids[1], env)
            return frozenset({_UNKNOWN})
        if k == K.COMPOUND_ASSIGNMENT_OPERATOR and kids:
            return self._roots(kids[0], env)
        if k == K.UNARY_OPERATOR and len(kids) == 1:
            op = self._unop(c, kids[0])
            if op == "&":
                return self._lvalue_roots(kids[0], env)
            if op in ("++", "--"):
                return self._roots(kids[0], env)
            return frozenset({_UNKNOWN})
        if k == K.CONDITIONAL_OPERATOR and len(kids) == 3:
            return self._roots(kids[1], env) | self._roots(kids[2], env)
        if k == K.CALL_EXPR:
            callee = c.referenced
            info = self._helper(callee.spelling) if callee is not None and callee.spelling in self.defs else None
            if info is None or not info.return_roots:
                return frozenset({_UNKNOWN})
            args = list(c.get_arguments())
            out: set[Root] = set()
            for r in info.return_roots:
                if r[0] == "param" and r[1] < len(args):
                    out |= self._roots(args[r[1]], env)
                else:
                    out.add(r)
            return frozenset(out)
        return frozenset({_UNKNOWN})

    def _lvalue_roots(self, c: Any, env: dict[tuple[str, int], frozenset[Root]]) -> frozenset[Root]:
        """Roots of ``&(lvalue)``: the pointer the lvalue is reached through."""
        K = self.ci.CursorKind
        while True:
            kids = _exprs(c)
            if c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR) and len(kids) == 1:
                c = kids[0]
            elif c.kind == K.MEMBER_REF_EXPR and kids and _space(kids[0].type) is None:
                c = kids[0]                       # s.field: the address of s
            else:
                break
        kids = _exprs(c)
        if c.kind == K.ARRAY_SUBSCRIPT_EXPR and len(kids) == 2:
            ptr = [x for x in kids if _space(x.type) is not None or _is_array(x.type)]
            return self._roots(ptr[0], env) if len(ptr) == 1 else frozenset({_UNKNOWN})
        if c.kind == K.UNARY_OPERATOR and len(kids) == 1 and self._unop(c, kids[0]) == "*":
            return self._roots(kids[0], env)
        if c.kind == K.MEMBER_REF_EXPR and kids and _space(kids[0].type) is not None:
            return self._roots(kids[0], env)
        return frozenset({_UNKNOWN})

    def _env(self, func: Any, param_roots: dict[int, Root]) -> dict[tuple[str, int], frozenset[Root]]:
        """Roots of every parameter and local pointer variable (fixpoint over assignments)."""
        K = self.ci.CursorKind
        env: dict[tuple[str, int], frozenset[Root]] = {}
        for i, p in enumerate(func.get_arguments()):
            if i in param_roots:
                env[_key(p)] = frozenset({param_roots[i]})
        sources: list[tuple[tuple[str, int], Any]] = []
        for c in func.walk_preorder():
            if c.kind == K.VAR_DECL and _space(c.type) is not None:
                env.setdefault(_key(c), frozenset())
                init = [x for x in c.get_children() if x.kind.is_expression()]
                if init:
                    sources.append((_key(c), init[-1]))
            elif c.kind == K.BINARY_OPERATOR:
                kids = _exprs(c)
                if len(kids) == 2 and self._binop(c, kids[0]) == "=":
                    lhs = self._strip(kids[0])
                    if lhs.kind == K.DECL_REF_EXPR and lhs.referenced is not None and _space(lhs.type) is not None:
                        sources.append((_key(lhs.referenced), kids[1]))
        for _ in range(50):
            changed = False
            for key, expr in sources:
                new = env.get(key, frozenset()) | self._roots(expr, env)
                if new != env.get(key):
                    env[key] = new
                    changed = True
            if not changed:
                break
        return env

    # -- one function ---------------------------------------------------------------------------

    def _helper(self, name: str) -> _FuncInfo | None:
        """The analysed helper ``name`` (analysed on first use)."""
        if name in self.funcs:
            return self.funcs[name]
        if name in self.in_progress:
            return None                           # recursion is not OpenCL C; do not loop
        cur = self.defs.get(name)
        if cur is None:
            return None

        if is_kernel(cur):
            return None
        self.in_progress.add(name)
        info = _FuncInfo(cur, is_kernel=False)
        info.ptr_params = [i for i, p in enumerate(cur.get_arguments()) if _space(p.type) is not None]
        self._analyse(info, {i: ("param", i) for i in info.ptr_params})
        self.in_progress.discard(name)
        self.funcs[name] = info
        return info

    def _triple(self, info: _FuncInfo, roots: frozenset[Root]) -> str | None:
        """Slot, base and limit expressions for an access through a pointer with ``roots``."""
        if len(roots) != 1:
            return None
        (r,) = roots
        if r[0] == "arg":
            return f"{r[1]}, __kc_b{r[1]}, __kc_l{r[1]}"
        if r[0] == "param":
            return f"__kc_s{r[1]}, __kc_b{r[1]}, __kc_l{r[1]}"
        return None

    def _analyse(self, info: _FuncInfo, param_roots: dict[int, Root]) -> None:
        env = self._env(info.cursor, param_roots)
        body = [c for c in info.cursor.get_children() if c.kind == self.ci.CursorKind.COMPOUND_STMT]
        if not body:
            return
        rets: set[Root] = set()
        self._walk(info, body[0], [], env, rets)
        info.return_roots = frozenset(rets) if not info.is_kernel else frozenset()
        for ed in info.edits:
            name = self._macro_clash(ed)
            if name is not None:
                self.unsupported.append(f"{info.cursor.spelling}: access inside the expansion of macro {name!r} "
                                        f"(byte {ed.start}); preprocess the source first")

    def _access(self, info: _FuncInfo, node: Any, ptr: Any, env: dict[tuple[str, int], frozenset[Root]],
                what: str) -> str | None:
        """The slot/base/limit text for an access through ``ptr``, or None (reported / not an argument)."""
        roots = self._roots(ptr, env)
        if roots == frozenset({_STATIC}):
            return None
        triple = self._triple(info, roots)
        if triple is None:
            kinds = sorted({r[0] for r in roots})
            why = ("a pointer that may come from several arguments" if len(roots) > 1 and "unknown" not in kinds
                   else "a pointer of unknown origin")
            self._report(info.cursor, node, f"{what} through {why}")
            return None
        info.accesses += 1
        return triple

    def _address_context(self, node: Any, stack: list[Any]) -> bool:
        """Whether ``node`` (a subscript / dereference) only computes an address (``&p[i]``)."""
        K = self.ci.CursorKind
        child = node
        for parent in reversed(stack):
            if parent.kind == K.PAREN_EXPR:
                child = parent
                continue
            if parent.kind == K.MEMBER_REF_EXPR and _space(child.type) is None:
                child = parent
                continue
            if parent.kind == K.UNEXPOSED_EXPR and (parent.extent.start.offset, parent.extent.end.offset) != (
                    child.extent.start.offset, child.extent.end.offset):
                child = parent                    # vector component a[i].x
                continue
            kids = _exprs(parent)
            return parent.kind == K.UNARY_OPERATOR and len(kids) == 1 and self._unop(parent, kids[0]) == "&"
        return False

    def _walk(self, info: _FuncInfo, c: Any, stack: list[Any], env: dict[tuple[str, int], frozenset[Root]],
              rets: set[Root]) -> None:
        K = self.ci.CursorKind
        if c.kind == K.CXX_UNARY_EXPR:            # sizeof / alignof / vec_step: not evaluated
            return
        self._visit(info, c, stack, env, rets)
        stack.append(c)
        for ch in c.get_children():
            self._walk(info, ch, stack, env, rets)
        stack.pop()

    def _visit(self, info: _FuncInfo, c: Any, stack: list[Any], env: dict[tuple[str, int], frozenset[Root]],
               rets: set[Root]) -> None:
        K = self.ci.CursorKind
        kids = _exprs(c)
        s, e = c.extent.start.offset, c.extent.end.offset
        if c.kind == K.ARRAY_SUBSCRIPT_EXPR and len(kids) == 2:
            ptr_i = [i for i, x in enumerate(kids) if _space(x.type) is not None]
            if len(ptr_i) != 1 or self._address_context(c, stack):
                return
            ptr, idx = kids[ptr_i[0]], kids[1 - ptr_i[0]]
            triple = self._access(info, c, ptr, env, "access")
            if triple:
                info.edits.append(self._edit(s, e, [
                    "(*__KC_ACC((", _Hole(ptr.extent.start.offset, ptr.extent.end.offset), "), (",
                    _Hole(idx.extent.start.offset, idx.extent.end.offset), f"), 1, {triple}))"]))
        elif c.kind == K.UNARY_OPERATOR and len(kids) == 1 and _space(kids[0].type) is not None:
            if self._unop(c, kids[0]) != "*" or self._address_context(c, stack):
                return
            ptr = kids[0]
            triple = self._access(info, c, ptr, env, "dereference")
            if triple:
                info.edits.append(self._edit(s, e, [
                    "(*__KC_ACC((", _Hole(ptr.extent.start.offset, ptr.extent.end.offset), f"), 0, 1, {triple}))"]))
        elif c.kind == K.MEMBER_REF_EXPR and kids and _space(kids[0].type) is not None:
            if self._address_context(c, stack):
                return
            ptr = kids[0]
            triple = self._access(info, c, ptr, env, "member access")
            if triple:
                pe = ptr.extent.end.offset
                info.edits.append(self._edit(s, e, [
                    "__KC_ACC((", _Hole(ptr.extent.start.offset, pe), f"), 0, 1, {triple})", _Hole(pe, e)]))
        elif c.kind == K.CALL_EXPR:
            self._call(info, c, env)
        elif c.kind == K.BINARY_OPERATOR and len(kids) == 2 and self._binop(c, kids[0]) == "=":
            lhs = self._strip(kids[0])
            if lhs.kind != K.DECL_REF_EXPR and _space(kids[1].type) is not None:
                if any(r[0] in ("arg", "param") for r in self._roots(kids[1], env)):
                    self._report(info.cursor, c, "a pointer argument is stored into memory")
        elif c.kind == K.INIT_LIST_EXPR:
            for x in kids:
                if _space(x.type) is not None and any(r[0] in ("arg", "param") for r in self._roots(x, env)):
                    self._report(info.cursor, c, "a pointer argument is stored into an aggregate")
                    break
        elif c.kind == K.RETURN_STMT and kids and _space(kids[0].type) is not None:
            rets |= self._roots(kids[0], env)

    def _call(self, info: _FuncInfo, c: Any, env: dict[tuple[str, int], frozenset[Root]]) -> None:
        callee = c.referenced
        name = callee.spelling if callee is not None else c.spelling
        args = list(c.get_arguments())
        ptr_args = [i for i, a in enumerate(args) if _space(a.type) is not None]
        if not ptr_args:
            return
        s, e = c.extent.start.offset, c.extent.end.offset
        if name in self.defs:                     # a helper defined in the source: call its clone
            helper = self._helper(name)
            if helper is None:
                self._report(info.cursor, c, f"pointer argument passed to {name!r}, which cannot be instrumented")
                return
            if not helper.ptr_params:
                return
            extra = [REC_NAME]
            for j in helper.ptr_params:
                triple = None
                if j < len(args):
                    roots = self._roots(args[j], env)
                    if roots == frozenset({_STATIC}):
                        triple = "-1, 0UL, 0L"
                    else:
                        triple = self._triple(info, roots)
                if triple is None:
                    self._report(info.cursor, c, f"argument {j} of {name!r} is a pointer of unknown origin")
                    triple = "-1, 0UL, 0L"
                extra.append(triple)
            if self.data[e - 1:e] != b")" or self.data[s:s + len(name)] != name.encode():
                self._report(info.cursor, c, f"call to {name!r} written through a macro")
                return
            info.edits.append(self._edit(s, e, [f"__kc_h_{name}", _Hole(s + len(name), e - 1),
                                                ", " + ", ".join(extra) + ")"]))
            return
        if name in _NO_ACCESS_BUILTINS:
            return
        if name in _ASYNC or name.startswith("async_"):
            self._report(info.cursor, c, f"{name} (asynchronous copies are not instrumented)")
            return
        m = _VLOAD.match(name)
        if m:
            self._vload(info, c, m, args, env)
            return
        if name in self.protos:
            self._report(info.cursor, c, f"pointer argument passed to {name!r}, which has no body in the source")
            return
        # other built-ins receiving a pointer (atomics, sincos/fract/modf/frexp out-pointers):
        # one element of the pointee type at that address
        for i in ptr_args:
            a = args[i]
            triple = self._access(info, c, a, env, f"{name} argument")
            if triple:
                info.edits.append(self._edit(a.extent.start.offset, a.extent.end.offset, [
                    "__KC_ACC((", _Hole(a.extent.start.offset, a.extent.end.offset), f"), 0, 1, {triple})"]))

    def _vload(self, info: _FuncInfo, c: Any, m: re.Match[str], args: list[Any],
               env: dict[tuple[str, int], frozenset[Root]]) -> None:
        kind, half, width = m.group(1), m.group(2), int(m.group(3) or 1)
        if kind == "vload":
            if len(args) != 2:
                return
            off, ptr = args
        else:
            if len(args) != 3:
                return
            off, ptr = args[1], args[2]
        if _space(ptr.type) is None:
            return
        stride = 4 if (half == "a_half" and width == 3) else width
        triple = self._access(info, c, ptr, env, m.group(0))
        if not triple:
            return
        s, e = c.extent.start.offset, c.extent.end.offset
        os_, oe = off.extent.start.offset, off.extent.end.offset
        ps, pe = ptr.extent.start.offset, ptr.extent.end.offset
        if not (s <= os_ <= oe <= ps <= pe <= e):
            self._report(info.cursor, c, f"{m.group(0)} written through a macro")
            return
        info.edits.append(self._edit(s, e, [
            _Hole(s, os_), "0", _Hole(oe, ps), "__KC_ACC((", _Hole(ps, pe), "), (long)(", _Hole(os_, oe),
            f") * {stride}, {width}, {triple})", _Hole(pe, e)]))

    # -- putting the source together -------------------------------------------------------------

    def _paren_range(self, func: Any) -> tuple[int, int]:
        """Offsets of the '(' and ')' of a function's parameter list."""
        return param_list_range(func, self.tokens, self.tok_offsets)

    def _signature_edits(self, func: Any, extra: str, new_name: str | None) -> list[_Edit]:
        lp, rp = self._paren_range(func)
        inner = self.data[lp + 1:rp].decode("utf-8", "replace").strip()
        edits = []
        if inner in ("", "void"):
            edits.append(self._edit(lp + 1, rp, [extra]))
        else:
            edits.append(self._edit(rp, rp, [", " + extra]))
        if new_name is not None:
            n = func.location.offset
            edits.append(self._edit(n, n + len(func.spelling), [new_name]))
        return edits

    def rewrite(self) -> RewriteResult:
        K = self.ci.CursorKind
        params = kernel_params(self.kcursor)
        slots: dict[str, ArgSlot] = {}
        arg_cursors = list(self.kcursor.get_arguments())
        for p in params:
            if p.kind == "buffer" and p.qualifier in ("global", "constant"):
                esz = parse_type(p.dtype).itemsize if is_known_type(p.dtype) else None
                if esz is None:           # a typedef or struct: ask clang for the size
                    size = arg_cursors[p.index].type.get_canonical().get_pointee().get_size()
                    esz = int(size) if size and size > 0 else None
                slots[p.name] = ArgSlot(len(slots), p.name, p.index, p.dtype, p.qualifier, esz)
        kinfo = _FuncInfo(self.kcursor, is_kernel=True)
        self._analyse(kinfo, {slots[p.name].param_index: ("arg", slots[p.name].slot) for p in params
                              if p.name in slots})
        rec_type = "long" if self.int64 else "int"
        file_edits = list(kinfo.edits)
        file_edits += self._signature_edits(self.kcursor, f"__global {rec_type}* {REC_NAME}", None)
        body = [c for c in self.kcursor.get_children() if c.kind == K.COMPOUND_STMT]
        if not body:
            raise RewriteError(f"kernel {self.kernel.name!r} has no body")
        entry = []
        for sl in slots.values():
            pname = params[sl.param_index].name
            lim = f"{REC_NAME}[{REC_FIELDS * sl.slot + 3}]"
            entry.append(f"const ulong __kc_b{sl.slot} = (ulong)({pname}); "
                         f"const long __kc_l{sl.slot} = (long){lim};")
        bstart = body[0].extent.start.offset + 1
        file_edits.append(self._edit(bstart, bstart, ["\n  " + "\n  ".join(entry) if entry else ""]))

        accesses = kinfo.accesses
        helpers = sorted(self.funcs)
        for name in helpers:
            h = self.funcs[name]
            accesses += h.accesses
            if not h.ptr_params:
                continue
            cur = h.cursor
            extra = ", ".join([f"__global {rec_type}* {REC_NAME}"] + [
                f"int __kc_s{j}, ulong __kc_b{j}, long __kc_l{j}" for j in h.ptr_params])
            sig = self._signature_edits(cur, extra, f"__kc_h_{name}")
            fs, fe = cur.extent.start.offset, cur.extent.end.offset
            clone = _apply(self.data, fs, fe, h.edits + sig)
            file_edits.append(self._edit(fe, fe, ["\n\n" + clone.decode("utf-8") + "\n"]))
            hbody = [c for c in cur.get_children() if c.kind == K.COMPOUND_STMT]
            proto_text = _apply(self.data, fs, hbody[0].extent.start.offset, sig).decode("utf-8").rstrip() + ";"
            for proto in self.protos.get(name, []):
                pe = proto.extent.end.offset
                semi = self.data.find(b";", pe)
                at = semi + 1 if semi >= 0 else pe
                file_edits.append(self._edit(at, at, ["\n" + proto_text + "\n"]))
        guard = (_GUARD_64 if self.int64 else _GUARD_32).replace("SINK_ALIGN", str(_SINK_ALIGN))
        prelude = "/* kernelcast instrumentation: records accessed ranges of pointer arguments */\n" + guard + _MACRO
        file_edits.append(self._edit(0, 0, [prelude]))
        src = _apply(self.data, 0, len(self.data), file_edits).decode("utf-8")
        new = Kernel(source=src, name=self.kernel.name, language=self.kernel.language,
                     build_options=self.kernel.build_options, dims=self.kernel.dims,
                     origin=f"{self.kernel.origin} [instrumented]".strip())
        return RewriteResult(original=self.kernel, kernel=new, slots=slots, params=params,
                             unsupported=list(self.unsupported), accesses=accesses,
                             helpers=[n for n in helpers if self.funcs[n].ptr_params], int64_atomics=self.int64)


@dataclass
class ParsedSource:
    """What a source rewrite starts from (:func:`parse_for_rewrite`)."""

    tu: Any
    kcursor: Any                                  # the kernel's cursor
    tokens: dict[int, str]                        # byte offset -> token spelling, in the file
    tok_offsets: list[int]                        # sorted offsets of ``tokens``
    macros: list[tuple[int, int, str]]            # macro expansions: (start, end, name)
    defs: dict[str, Any]                          # functions defined in the file
    protos: dict[str, list[Any]]                  # declarations without a body


def parse_for_rewrite(kernel: Kernel, filename: str = _PARSE_NAME) -> ParsedSource:
    """The translation unit of ``kernel``'s source (parsed as ``filename``) with what both rewrites
    need of it. :class:`RewriteError` (one line) when it does not parse or lacks the kernel."""
    data = kernel.source.encode("utf-8")
    try:
        tu = parse(kernel.source, filename, kernel.build_options)
    except ParseError as e:
        raise RewriteError(str(e).splitlines()[0] if str(e) else "parse error") from e
    kernels = find_kernels(tu, filename)
    if kernel.name not in kernels:
        raise RewriteError(f"no kernel {kernel.name!r} in the source")
    tokens: dict[int, str] = {}
    for t in tu.get_tokens(extent=tu.get_extent(filename, (0, len(data)))):
        loc = t.location
        if loc.file is not None and loc.file.name == filename:
            tokens.setdefault(loc.offset, t.spelling)
    ps = ParsedSource(tu, kernels[kernel.name], tokens, sorted(tokens), [], {}, {})
    for c in tu.cursor.get_children():
        if c.location.file is None or c.location.file.name != filename:
            continue
        if c.kind == ci.CursorKind.MACRO_INSTANTIATION:
            start, end = c.extent.start.offset, c.extent.end.offset
            ps.macros.append((start, max(end, start + 1), c.spelling))
        elif c.kind == ci.CursorKind.FUNCTION_DECL:
            if c.is_definition():
                ps.defs[c.spelling] = c
            else:
                ps.protos.setdefault(c.spelling, []).append(c)
    return ps


def param_list_range(func: Any, tokens: dict[int, str], tok_offsets: list[int]) -> tuple[int, int]:
    """Byte offsets of the '(' and ')' of the parameter list of the function cursor ``func``,
    from the file's tokens (``tokens``: offset -> spelling, ``tok_offsets`` sorted)."""
    name_off = int(func.location.offset)
    depth, lp = 0, -1
    for off in tok_offsets:
        if off <= name_off:
            continue
        t = tokens[off]
        if t == "(":
            if depth == 0:
                lp = off
            depth += 1
        elif t == ")":
            depth -= 1
            if depth == 0 and lp >= 0:
                return lp, off
    raise RewriteError(f"cannot find the parameter list of {func.spelling!r}")


def instrument_kernel(kernel: Kernel, *, int64_atomics: bool = True) -> RewriteResult:
    """Rewrite ``kernel`` so a run records, per pointer argument, the range of elements it touches.

    Raise :class:`RewriteError` when the source does not parse or has no such kernel; constructs
    that cannot be instrumented are listed in ``RewriteResult.unsupported``."""
    if kernel.language != "opencl":
        raise RewriteError(f"only OpenCL C kernels can be instrumented, not {kernel.language}")
    result = _Instrumenter(kernel, int64_atomics).rewrite()
    for u in result.unsupported:
        log.debug("%s: unsupported: %s", kernel.name, u)
    return result


def device_supports_int64_atomics(device: DeviceInfo) -> bool:
    """Whether ``device`` has 64-bit min/max/inc atomics on global memory
    (cl_khr_int64_base_atomics + extended_atomics); ``False`` when it cannot be asked."""
    return backend_for(device).has_int64_atomics(device)


# ---------------------------------------------------------------------------------------------
# running


@dataclass
class InstrumentedRun:
    measurement: Measurement
    extents: dict[str, AccessExtent]


def _pad_elems(elem_bytes: int) -> int:
    return math.ceil(PAD_BYTES / elem_bytes)


def instrumented_config(result: RewriteResult, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                        scalars: dict[str, Any], buffer_sizes: dict[str, int],
                        local_sizes: dict[str, int] | None = None,
                        seed: int = 0, inits: dict[str, str] | None = None
                        ) -> tuple[LaunchConfig, dict[str, np.ndarray]]:
    """The launch configuration of an instrumented run and the initial arrays it needs.

    Each buffer gets ``buffer_sizes[name]`` elements in use plus a pad for the sink; the guard
    limit is the in-use part, so accesses beyond it are recorded but not performed. The in-use
    part holds exactly what the harness would put in a plain run of the kernel with these sizes
    and timing-policy ``seed`` (each buffer's init from ``inits``, ``"random"`` when not given),
    so data-dependent indices (gathers, scatters, histograms) behave as in that run."""
    args: list[ArgBinding] = []
    limits: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(seed)             # the harness's draw order: buffers in parameter order
    pad_rng = np.random.default_rng([seed, 0x6B63])
    wg = math.prod(lsize) if lsize else 1
    for p in result.params:
        if p.kind == "scalar":
            if p.name not in scalars:
                raise KeyError(f"no value for scalar argument {p.name!r}")
            args.append(ArgBinding(p.name, "scalar", p.dtype, value=scalars[p.name]))
        elif p.kind == "local":
            args.append(ArgBinding(p.name, "local", p.dtype, count=(local_sizes or {}).get(p.name, wg)))
        else:
            sl = result.slots.get(p.name)
            if sl is None or sl.elem_bytes is None or not is_known_type(p.dtype):
                raise ValueError(f"argument {p.name!r} of type {p.dtype!r} cannot be bound")
            n = int(buffer_sizes[p.name])
            if n < 0:
                raise ValueError(f"argument {p.name!r}: negative size {n}")
            t = parse_type(p.dtype)
            pad = _pad_elems(sl.elem_bytes)
            data = init_contents(t, n, (inits or {}).get(p.name, "random"), rng)
            arrays[p.name] = np.concatenate([data, init_contents(t, pad, "random", pad_rng)])
            limits[p.name] = n * sl.elem_bytes
            args.append(ArgBinding(p.name, "buffer", p.dtype, count=n + pad, init="array"))
    args.append(ArgBinding(REC_NAME, "buffer", result.rec_dtype, count=result.rec_count, init="array"))
    arrays[REC_NAME] = result.initial_record(limits)
    return LaunchConfig(tuple(gsize), tuple(lsize) if lsize else None, args), arrays


class KernelRunner(Protocol):
    """What an instrumented run needs of a harness (:class:`instrument.harness.Harness` is one;
    a ``close()`` method, where present, is called after an ``out_of_bounds`` run)."""

    def run(self, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy | None = None, *,
            want_outputs: bool = False, readback: list[str] | None = None,
            arrays: dict[str, np.ndarray] | None = None) -> Measurement: ...


def measure_instrumented(harness: KernelRunner, result: RewriteResult, gsize: tuple[int, ...],
                         lsize: tuple[int, ...] | None, scalars: dict[str, Any], buffer_sizes: dict[str, int],
                         *, local_sizes: dict[str, int] | None = None,
                         policy: TimingPolicy | None = None) -> InstrumentedRun:
    """Run the instrumented kernel once; the measurement and the extents. Raise
    :class:`InstrumentedRunError` when the run is not ``ok``."""
    pol = policy or TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=5.0)
    cfg, arrays = instrumented_config(result, gsize, lsize, scalars, buffer_sizes, local_sizes, seed=pol.seed)
    m = harness.run(result.kernel, cfg, pol, readback=[REC_NAME], arrays=arrays)
    if m.status == "out_of_bounds" and hasattr(harness, "close"):
        # an access escaped the instrumentation; on a CPU device the stray write may have hit the
        # worker's heap, so do not keep that worker
        harness.close()
    if m.status != "ok":
        raise InstrumentedRunError(m.status, m.reason or m.compile_log[:300], m)
    rec = m.readback.get(REC_NAME)
    if rec is None:
        raise InstrumentedRunError("runtime_error", "the record buffer was not read back", m)
    extents = result.decode(np.asarray(rec), {k: int(v) for k, v in buffer_sizes.items()})
    return InstrumentedRun(m, extents)


def run_instrumented(harness: KernelRunner, result: RewriteResult, gsize: tuple[int, ...],
                     lsize: tuple[int, ...] | None, scalars: dict[str, Any], buffer_sizes: dict[str, int], *,
                     local_sizes: dict[str, int] | None = None) -> dict[str, AccessExtent]:
    """Per pointer argument, the element range the kernel touched in one run at (gsize, lsize).

    ``buffer_sizes`` (elements) is what each argument is allocated with; accesses beyond it are
    recorded (``AccessExtent.out_of_bounds``) but not performed, so this is also a crash-free
    bounds check of a configuration."""
    return measure_instrumented(harness, result, gsize, lsize, scalars, buffer_sizes,
                                local_sizes=local_sizes).extents

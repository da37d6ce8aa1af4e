"""Profile-guided features: how many times each loop of a kernel iterated and how each branch went.

The analytical model guesses a loop's trip count from its source; where the count is data (a CSR
row, a neighbour list, a ``while`` with a data-dependent exit, an early ``return``) one run of the
kernel on the real inputs tells. This module rewrites a kernel (libclang, byte extents, the edit
machinery of :mod:`instrument.rewrite`) so one launch counts, per *site*:

* a loop (``for`` / ``while`` / ``do``): ``entries`` (times the loop statement was reached) and
  ``trips`` (body executions); its value is ``trips / entries``, the mean trips per entry;
* an ``if``: ``evaluations`` and ``taken`` (the then-side ran); its value is ``taken / evaluations``.

Sites are the loop and if statements of the kernel's source file, in the kernel body and in the
helper functions it calls (transitively). A site is named by the 1-based line and column of its
statement in the kernel source as :func:`kernelcast.clang.parse` reads it (:func:`site_symbol`):
``trip_l{line}_c{col}`` for loops, ``br_l{line}_c{col}`` for branches.

What the counting kernel does
-----------------------------
* Every work-item keeps PRIVATE counters ``ulong __kc_cnt[2 * sites]`` zeroed at kernel entry;
  ``__kc_cnt[k]++`` at each site, so no atomics run inside loops. A loop becomes
  ``{ ENTRY; for (...) { TRIP; ... } }`` and an if ``{ EVAL; if (c) { TAKEN; ... } else ... }``;
  the braces keep unbraced bodies, ``if (c) for (...) ...`` and dangling elses as they were.
* Once per work-item (before every ``return`` of the kernel body, which becomes
  ``{ FLUSH; return; }``, and before the kernel's closing brace) the counters of *sampled*
  work-items are added into a ``__global`` record buffer appended as the LAST kernel parameter,
  with 64-bit atomics (``atom_add``, ``cl_khr_int64_base_atomics``). Work-items are sampled with
  an odd stride over the linear global id, as :mod:`instrument.activity` does, so at most
  ``max_tracked`` work-items flush; counts are summed over them and ``items`` says how many.
* The flush also keeps, per site, the largest ``trips / entries`` of any sampled work-item (a
  loop's busiest work-item; in 1/:data:`PEAK_FIX` steps, 32-bit ``atomic_max``, core OpenCL 1.1,
  on 32-bit words after the counters): ``chunk`` elements per work-item over ``n < chunk x
  items`` give most work-items no trip and a few ``chunk``, which a mean cannot tell.
* Helper functions with sites (or calling helpers with sites) are cloned as ``__kc_c_<name>`` with
  one extra parameter ``__private ulong* __kc_cnt``; calls from the kernel and from other clones go
  to the clone, so any other kernel of the file still calls the original. The kernel body itself
  stays in the kernel (``__local`` variables may only be declared at kernel scope).
* The record buffer is the last parameter and is bound ``init="array"``, so the harness draws the
  other buffers' random contents exactly as in a plain run with the same configuration and seed:
  the counts are those of the measured row's data.

32-bit fallback (``int64_atomics=False``): the record is ``uint`` and 32-bit ``atomic_add`` is
used; a per-item count above 2^32-1 or a sum that wraps sets an overflow word, and decoding such
a record raises :class:`~instrument.rewrite.InstrumentedRunError` (never a wrapped figure).

Not counted, listed in :attr:`CountRewrite.unsupported` (never a crash): sites written inside a
macro expansion or whose statement end cannot be found among the tokens; sites of helpers that are
recursive, are ``__kernel`` functions, are reached through a call written by a macro, or are
called (directly or not) only through such a helper; sites past :data:`MAX_SITES`. A ``return``
of the kernel that cannot be wrapped (written by a macro) makes the kernel uncountable
(:class:`~instrument.rewrite.RewriteError`), since its work-items would leave without flushing.
"""

from __future__ import annotations

import bisect
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import clang.cindex as ci
import numpy as np
from kernelcast.instrument.activity import _stride
from kernelcast.instrument.rewrite import (
    InstrumentedRunError,
    KernelRunner,
    RewriteError,
    _apply,
    _Edit,
    _Hole,
    device_supports_int64_atomics,
    param_list_range,
    parse_for_rewrite,
)
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.clang import is_kernel
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig
from kernelcast.sites import peak_symbol, site_symbol

log = logging.getLogger(__name__)

#: most sites one counting kernel instruments (2 private counters each); later ones are listed
#: as unsupported
MAX_SITES = 128
#: work-items whose counters are flushed at most (odd-stride sample of the linear global id)
MAX_TRACKED = 1 << 16
REC_NAME = "__kc_sites"
CNT_NAME = "__kc_cnt"
#: record words before the counters: stride, items flushed, 32-bit overflow flag
HEADER = 3
#: a site's busiest work-item's trips per entry are kept in steps of 1 / PEAK_FIX
PEAK_FIX = 16
_PARSE_NAME = "kc_counts.cl"
_LOOPS = {"FOR_STMT": "for", "WHILE_STMT": "while", "DO_STMT": "do"}

_FLUSH_64 = """\
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
void __kc_flush(__private ulong* c, __global ulong* r) {
  ulong lin = get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2));
  if (lin % r[0]) return;
  atom_inc(r + 1);
  for (int k = 0; k < NCOUNTERS; ++k)
    if (c[k]) atom_add(r + HEADER + k, c[k]);
  __global uint* peak = (__global uint*)(r + HEADER + NCOUNTERS);
  for (int k = 0; k < NSITES; ++k)
    if (c[2 * k]) {
      ulong v = c[2 * k + 1] * PEAK_FIX / c[2 * k];
      atomic_max(peak + k, v > 0xffffffffUL ? 0xffffffffu : (uint)v);
    }
}
"""
_FLUSH_32 = """\
void __kc_flush(__private ulong* c, __global uint* r) {
  ulong lin = get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2));
  if (lin % r[0]) return;
  atomic_inc(r + 1);
  for (int k = 0; k < NCOUNTERS; ++k) {
    if (!c[k]) continue;
    uint v = c[k] > 0xffffffffUL ? 0xffffffffu : (uint)c[k];
    uint old = atomic_add(r + HEADER + k, v);
    if (c[k] > 0xffffffffUL || old + v < old) atomic_or(r + 2, 1u);
  }
  for (int k = 0; k < NSITES; ++k)
    if (c[2 * k]) {
      ulong v = c[2 * k + 1] * PEAK_FIX / c[2 * k];
      atomic_max(r + HEADER + NCOUNTERS + k, v > 0xffffffffUL ? 0xffffffffu : (uint)v);
    }
}
"""


@dataclass
class SiteCounts:
    """What one counting launch found, summed over the sampled work-items."""

    items: int                                  # sampled work-items that ran the kernel (flushed)
    loops: dict[str, tuple[int, int]] = field(default_factory=dict)      # symbol -> (entries, trips)
    branches: dict[str, tuple[int, int]] = field(default_factory=dict)   # symbol -> (evaluations, taken)
    # loop symbol -> the largest trips per entry of one sampled work-item (a record of before the
    # peaks has none)
    peaks: dict[str, float] = field(default_factory=dict)

    def values(self) -> dict[str, float]:
        """Per site: mean trips per entry of a loop, share of evaluations taken of an if (0.0
        where the site was never reached); per loop with a peak, ``tpeak_...``: its busiest
        work-item's trips per entry (never below the mean: the peak is rounded down)."""
        out: dict[str, float] = {}
        for sym, (entries, trips) in self.loops.items():
            out[sym] = trips / entries if entries else 0.0
            if sym in self.peaks:
                out[peak_symbol(sym)] = max(self.peaks[sym], out[sym])
        for sym, (evals, taken) in self.branches.items():
            out[sym] = taken / evals if evals else 0.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"items": int(self.items),
                "loops": {k: [int(a), int(b)] for k, (a, b) in self.loops.items()},
                "branches": {k: [int(a), int(b)] for k, (a, b) in self.branches.items()},
                "peaks": {k: float(v) for k, v in self.peaks.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SiteCounts:
        return cls(int(d.get("items", 0)),
                   {str(k): (int(v[0]), int(v[1])) for k, v in (d.get("loops") or {}).items()},
                   {str(k): (int(v[0]), int(v[1])) for k, v in (d.get("branches") or {}).items()},
                   {str(k): float(v) for k, v in (d.get("peaks") or {}).items()})


@dataclass
class Site:
    """One instrumented site: its counters are ``HEADER + 2 * index`` and the next word."""

    symbol: str
    kind: str               # "loop" | "if"
    line: int
    col: int
    function: str
    index: int


@dataclass
class CountRewrite:
    """A counting variant of a kernel (same name, one more parameter: the record buffer)."""

    original: Kernel
    kernel: Kernel
    sites: list[Site]
    unsupported: list[str]
    int64_atomics: bool = True
    helpers: list[str] = field(default_factory=list)    # helpers cloned with the counter parameter

    @property
    def rec_dtype(self) -> str:
        return "ulong" if self.int64_atomics else "uint"

    @property
    def rec_count(self) -> int:
        """Header, two counters per site, and one word per site for the peaks (32-bit words: in a
        64-bit record they fill the first half of theirs)."""
        return HEADER + max(1, 2 * len(self.sites)) + len(self.sites)

    def initial_record(self, stride: int) -> np.ndarray:
        rec = np.zeros(self.rec_count, dtype=np.uint64 if self.int64_atomics else np.uint32)
        rec[0] = stride
        return rec

    def decode(self, rec: np.ndarray) -> SiteCounts:
        """The counts held in a record buffer read back after a counting launch."""
        r = np.asarray(rec).astype(np.uint64)
        if len(r) < self.rec_count:
            raise InstrumentedRunError("runtime_error", f"site record has {len(r)} words, expected {self.rec_count}")
        if not self.int64_atomics and int(r[2]):
            raise InstrumentedRunError("runtime_error", "32-bit site counters overflowed (use a device with "
                                                        "64-bit atomics or fewer sampled work-items)")
        out = SiteCounts(int(r[1]))
        start = HEADER + max(1, 2 * len(self.sites))
        words = np.ascontiguousarray(np.asarray(rec)[start:self.rec_count])
        peaks = np.frombuffer(words.tobytes(), dtype=np.uint32)[:len(self.sites)]
        for s in self.sites:
            a, b = int(r[HEADER + 2 * s.index]), int(r[HEADER + 2 * s.index + 1])
            (out.loops if s.kind == "loop" else out.branches)[s.symbol] = (a, b)
            if s.kind == "loop" and a:
                out.peaks[s.symbol] = int(peaks[s.index]) / PEAK_FIX
        return out


# ---------------------------------------------------------------------------------------------
# rewriting


@dataclass
class _Func:
    cursor: Any
    name: str
    is_kernel: bool
    sites: list[tuple[Any, str]] = field(default_factory=list)    # (statement, "loop" | "if"), supported
    calls: list[tuple[Any, str, bool]] = field(default_factory=list)   # (call, callee, rewritable)
    returns: list[Any] = field(default_factory=list)


class _Counter:
    def __init__(self, kernel: Kernel, int64_atomics: bool, max_sites: int):
        self.ci = ci
        self.kernel = kernel
        self.int64 = int64_atomics
        self.max_sites = max_sites
        self.data = kernel.source.encode("utf-8")
        ps = parse_for_rewrite(kernel, _PARSE_NAME)
        self.tu, self.kcursor, self.tokens, self.tok_offsets = ps.tu, ps.kcursor, ps.tokens, ps.tok_offsets
        self.macros, self.defs, self.protos = ps.macros, ps.defs, ps.protos
        self.unsupported: list[str] = []
        self._order = 0

    # -- small helpers ----------------------------------------------------------------------------

    def _edit(self, start: int, end: int, parts: list[str | _Hole]) -> _Edit:
        self._order += 1
        return _Edit(start, end, parts, self._order)

    def _in_macro(self, off: int) -> bool:
        return any(ms < off < me for ms, me, _ in self.macros)

    def _next_token(self, off: int) -> tuple[int, str] | None:
        i = bisect.bisect_left(self.tok_offsets, off)
        if i >= len(self.tok_offsets):
            return None
        o = self.tok_offsets[i]
        return o, self.tokens[o]

    def _stmts(self, c: Any) -> list[Any]:
        return [x for x in c.get_children() if x.kind.is_statement() or x.kind.is_expression()
                or x.kind == self.ci.CursorKind.DECL_STMT]

    def _end(self, c: Any) -> int | None:
        """Offset just past a statement, its ``;`` included (None when it cannot be told)."""
        K = self.ci.CursorKind
        k = c.kind
        if k in (K.COMPOUND_STMT, K.NULL_STMT, K.DECL_STMT):
            return int(c.extent.end.offset)
        if k in (K.IF_STMT, K.FOR_STMT, K.WHILE_STMT, K.SWITCH_STMT, K.LABEL_STMT, K.CASE_STMT, K.DEFAULT_STMT):
            kids = self._stmts(c)
            if not kids:
                return None
            return self._end(kids[-1])
        nt = self._next_token(int(c.extent.end.offset))
        if nt is None or nt[1] != ";":
            return None
        return nt[0] + 1

    def _lead(self, s: int) -> int:
        """Where a statement starting at ``s`` begins with the ``#pragma`` lines right above it
        (``#pragma unroll`` must stay attached to its loop): the start of the first such line, or
        ``s``."""
        ls = self.data.rfind(b"\n", 0, s) + 1
        if self.data[ls:s].strip():
            return s
        start = ls if self.data[s:s + 1] == b"#" else s     # a statement clang starts at its pragma
        while ls > 0:                          # blank and // comment lines may sit in between
            prev = self.data.rfind(b"\n", 0, ls - 1) + 1
            line = self.data[prev:ls].strip()
            if line.startswith(b"#pragma"):
                start = prev
            elif line and not line.startswith(b"//"):
                break
            ls = prev
        return start

    def _wrap(self, s: int, e: int, counter: str) -> _Edit:
        """``{ COUNTER; <statement> }``; pragmas above the statement stay above it, inside the braces."""
        lead = self._lead(s)
        sep = "\n" if lead < s or self.data[s:s + 1] == b"#" else " "
        return self._edit(lead, e, [f"{{ {counter}{sep}", _Hole(lead, e), " }"])

    def _where(self, func: str, c: Any, what: str) -> str:
        return f"{func}:{c.location.line}:{c.location.column}: {what}"

    def _report(self, msg: str) -> None:
        if msg not in self.unsupported:
            self.unsupported.append(msg)

    # -- analysis ---------------------------------------------------------------------------------

    def _site_kind(self, c: Any) -> str | None:
        name = c.kind.name
        if name in _LOOPS:
            return "loop"
        if name == "IF_STMT":
            return "if"
        return None

    def _site_problem(self, c: Any, kind: str) -> str | None:
        """Why a site cannot be instrumented (None: it can)."""
        s = int(c.extent.start.offset)
        word = _LOOPS.get(c.kind.name, "if")
        if c.location.file is None or c.location.file.name != _PARSE_NAME:
            return "in another file"
        if self.tokens.get(s) != word or self._in_macro(s):
            return "written inside a macro expansion"
        e = self._end(c)
        if e is None or self._in_macro(e):
            return "cannot find the end of the statement"
        body = self._body(c)
        if body is None:
            return "no body"
        if body.kind == self.ci.CursorKind.COMPOUND_STMT:
            bs = int(body.extent.start.offset)
            if self.tokens.get(bs) != "{":
                return "body written inside a macro expansion"
        else:
            bs, be = int(body.extent.start.offset), self._end(body)
            if be is None or self._in_macro(bs) or self._in_macro(be) or not (s < bs < be <= e):
                return "cannot find the end of the body"
        return None

    def _body(self, c: Any) -> Any:
        kids = self._stmts(c)
        name = c.kind.name
        if name == "DO_STMT":
            return kids[0] if kids else None
        if name == "IF_STMT":
            return kids[1] if len(kids) >= 2 else None
        return kids[-1] if kids else None

    def _scan(self, f: _Func) -> None:
        K = self.ci.CursorKind

        def walk(c: Any) -> None:
            for x in c.get_children():
                kind = self._site_kind(x)
                if kind is not None:
                    why = self._site_problem(x, kind)
                    if why is None:
                        f.sites.append((x, kind))
                    else:
                        self._report(self._where(f.name, x, f"{kind} not counted ({why})"))
                elif x.kind == K.CALL_EXPR:
                    ref = x.referenced
                    name = ref.spelling if ref is not None else ""
                    if name in self.defs:
                        s, e = int(x.extent.start.offset), int(x.extent.end.offset)
                        ok = (self.data[s:s + len(name)] == name.encode() and self.data[e - 1:e] == b")"
                              and not self._in_macro(s + 1) and not self._in_macro(e - 1))
                        f.calls.append((x, name, ok))
                elif x.kind == K.RETURN_STMT and f.is_kernel:
                    f.returns.append(x)
                walk(x)

        body = [c for c in f.cursor.get_children() if c.kind == K.COMPOUND_STMT]
        if body:
            walk(body[0])

    def rewrite(self) -> CountRewrite:
        K = self.ci.CursorKind
        funcs: dict[str, _Func] = {}
        kf = _Func(self.kcursor, self.kernel.name, True)
        self._scan(kf)
        todo = [kf]
        while todo:                                    # every helper reachable from the kernel
            f = todo.pop()
            for _, name, _ in f.calls:
                if name not in funcs and name != self.kernel.name:
                    h = _Func(self.defs[name], name, False)
                    funcs[name] = h
                    if not is_kernel(h.cursor):
                        self._scan(h)
                    todo.append(h)
        graph = {n: {c for _, c, _ in f.calls} for n, f in [(self.kernel.name, kf), *funcs.items()]}

        def reach(start: str) -> set[str]:
            seen: set[str] = set()
            stack = list(graph.get(start, ()))
            while stack:
                n = stack.pop()
                if n not in seen:
                    seen.add(n)
                    stack.extend(graph.get(n, ()))
            return seen

        excluded: dict[str, str] = {}
        for n, f in funcs.items():
            if n == self.kernel.name or is_kernel(f.cursor):
                excluded[n] = "a __kernel function called as a helper"
            elif n in reach(n):
                excluded[n] = "recursive"
        while True:                # a call a macro writes cannot be redirected; what it reaches is partial
            before = len(excluded)
            for n, f in [(self.kernel.name, kf), *funcs.items()]:
                if n in excluded and n != self.kernel.name:
                    continue
                for _, callee, ok in f.calls:
                    if not ok and callee not in excluded:
                        excluded[callee] = "called through a macro"
            for n in list(excluded):
                for m in reach(n):
                    if m != self.kernel.name:
                        excluded.setdefault(m, f"reached through {n}, which is not counted")
            if len(excluded) == before:
                break
        for n in sorted(excluded):
            if n in funcs:
                for c, kind in funcs[n].sites:
                    self._report(self._where(n, c, f"{kind} not counted (helper {excluded[n]})"))
        live = [kf] + [f for n, f in funcs.items() if n not in excluded]
        all_sites = sorted(((int(c.extent.start.offset), f.name, c, kind) for f in live for c, kind in f.sites),
                           key=lambda t: t[0])
        sites: list[Site] = []
        chosen: dict[str, list[tuple[Any, Site]]] = {f.name: [] for f in live}
        for _, fname, c, kind in all_sites:
            if len(sites) >= self.max_sites:
                self._report(self._where(fname, c, f"{kind} not counted (more than {self.max_sites} sites)"))
                continue
            s = Site(site_symbol(kind, c.location.line, c.location.column), kind, c.location.line,
                     c.location.column, fname, len(sites))
            sites.append(s)
            chosen[fname].append((c, s))
        # helpers that need the counters: with sites, or calling one that does
        need = {f.name for f in live[1:] if chosen[f.name]}
        while True:
            more = {f.name for f in live[1:] if f.name not in need and any(c in need for _, c, _ in f.calls)}
            if not more:
                break
            need |= more
        for r in kf.returns:
            rs = int(r.extent.start.offset)
            re_ = self._end(r)
            if self.tokens.get(rs) != "return" or re_ is None or self._in_macro(rs) or self._in_macro(re_ - 1):
                raise RewriteError(f"{self.kernel.name}:{r.location.line}: a return written by a macro "
                                   f"cannot flush the counters")
        nc = max(1, 2 * len(sites))
        rec_t = "ulong" if self.int64 else "uint"
        flush = f"__kc_flush({CNT_NAME}, {REC_NAME});"

        file_edits = self._func_edits(kf, chosen[kf.name], need)
        body = [c for c in self.kcursor.get_children() if c.kind == K.COMPOUND_STMT]
        if not body:
            raise RewriteError(f"kernel {self.kernel.name!r} has no body")
        bs, be = int(body[0].extent.start.offset), int(body[0].extent.end.offset)
        if self.tokens.get(bs) != "{" or self.tokens.get(be - 1) != "}":
            raise RewriteError(f"kernel {self.kernel.name!r}: its body's braces are written by a macro")
        file_edits.append(self._edit(bs + 1, bs + 1, [f"\n  ulong {CNT_NAME}[{nc}] = {{0}};"]))
        for r in kf.returns:
            rs, re_ = int(r.extent.start.offset), self._end(r)
            assert re_ is not None
            file_edits.append(self._edit(rs, re_, [f"{{ {flush} ", _Hole(rs, re_), " }"]))
        file_edits.append(self._edit(be - 1, be - 1, [f"\n  {flush}\n"]))
        file_edits += self._signature(self.kcursor, f"__global {rec_t}* {REC_NAME}", None)
        for name in sorted(need):
            h = funcs[name]
            sig = self._signature(h.cursor, f"__private ulong* {CNT_NAME}", f"__kc_c_{name}")
            fs, fe = int(h.cursor.extent.start.offset), int(h.cursor.extent.end.offset)
            clone = _apply(self.data, fs, fe, self._func_edits(h, chosen[name], need) + sig)
            file_edits.append(self._edit(fe, fe, ["\n\n" + clone.decode("utf-8") + "\n"]))
            hbody = [c for c in h.cursor.get_children() if c.kind == K.COMPOUND_STMT]
            proto = _apply(self.data, fs, int(hbody[0].extent.start.offset), sig).decode("utf-8").rstrip() + ";"
            for p in self.protos.get(name, []):
                semi = self.data.find(b";", int(p.extent.end.offset))
                at = semi + 1 if semi >= 0 else int(p.extent.end.offset)
                file_edits.append(self._edit(at, at, ["\n" + proto + "\n"]))
        prelude = ("/* kernelcast instrumentation: counts loop trips and branch outcomes */\n"
                   + (_FLUSH_64 if self.int64 else _FLUSH_32).replace("NCOUNTERS", str(nc))
                   .replace("NSITES", str(len(sites))).replace("PEAK_FIX", f"{PEAK_FIX}UL")
                   .replace("HEADER", str(HEADER)))
        file_edits.append(self._edit(0, 0, [prelude]))
        src = _apply(self.data, 0, len(self.data), file_edits).decode("utf-8")
        new = Kernel(source=src, name=self.kernel.name, language=self.kernel.language,
                     build_options=self.kernel.build_options, dims=self.kernel.dims,
                     origin=f"{self.kernel.origin} [site counts]".strip())
        return CountRewrite(self.kernel, new, sites, list(self.unsupported), self.int64, sorted(need))

    def _func_edits(self, f: _Func, sites: list[tuple[Any, Site]], need: set[str]) -> list[_Edit]:
        """The edits inside one function: site wraps and counters (outer before inner), calls."""
        K = self.ci.CursorKind
        edits: list[_Edit] = []
        for c, site in sorted(sites, key=lambda t: t[1].index):       # source order: outer first
            s, e = int(c.extent.start.offset), self._end(c)
            assert e is not None
            a, b = 2 * site.index, 2 * site.index + 1
            edits.append(self._wrap(s, e, f"{CNT_NAME}[{a}]++;"))
            body = self._body(c)
            if body.kind == K.COMPOUND_STMT:
                at = int(body.extent.start.offset) + 1
                edits.append(self._edit(at, at, [f" {CNT_NAME}[{b}]++;"]))
            else:
                bs, be = int(body.extent.start.offset), self._end(body)
                assert be is not None
                edits.append(self._wrap(bs, be, f"{CNT_NAME}[{b}]++;"))
        for call, name, ok in f.calls:
            if name not in need or not ok:
                continue
            s, e = int(call.extent.start.offset), int(call.extent.end.offset)
            sep = ", " if list(call.get_arguments()) else ""
            edits.append(self._edit(s, e, [f"__kc_c_{name}", _Hole(s + len(name), e - 1), f"{sep}{CNT_NAME})"]))
        return edits

    def _signature(self, func: Any, extra: str, new_name: str | None) -> list[_Edit]:
        name_off = int(func.location.offset)
        lp, rp = param_list_range(func, self.tokens, self.tok_offsets)
        inner = self.data[lp + 1:rp].decode("utf-8", "replace").strip()
        edits = [self._edit(lp + 1, rp, [extra]) if inner in ("", "void") else self._edit(rp, rp, [", " + extra])]
        if new_name is not None:
            edits.append(self._edit(name_off, name_off + len(func.spelling), [new_name]))
        return edits


def count_rewrite(kernel: Kernel, *, int64_atomics: bool = True, max_sites: int = MAX_SITES) -> CountRewrite:
    """The counting variant of ``kernel`` (see the module docstring). Raise
    :class:`~instrument.rewrite.RewriteError` (one line) when it cannot be made at all; sites it
    skips are listed in :attr:`CountRewrite.unsupported`."""
    if kernel.language != "opencl":
        raise RewriteError(f"only OpenCL C kernels can be instrumented, not {kernel.language}")
    result = _Counter(kernel, int64_atomics, max_sites).rewrite()
    for u in result.unsupported:
        log.debug("%s: %s", kernel.name, u)
    return result


def count_config(cr: CountRewrite, config: LaunchConfig, arrays: dict[str, np.ndarray] | None,
                 max_tracked: int = MAX_TRACKED) -> tuple[LaunchConfig, dict[str, np.ndarray], int]:
    """The configuration of a counting launch (the row's bindings plus the record buffer), its
    arrays and the number of work-items sampled."""
    if max_tracked < 1:
        raise ValueError("max_tracked must be at least 1")
    total = math.prod(config.gsize)
    stride = _stride(total, max_tracked)
    rec = cr.initial_record(stride)
    args = [a for a in config.args if a.name != REC_NAME]
    args.append(ArgBinding(REC_NAME, "buffer", cr.rec_dtype, count=len(rec), init="array"))
    cfg = LaunchConfig(tuple(config.gsize), tuple(config.lsize) if config.lsize else None, args)
    return cfg, {**(arrays or {}), REC_NAME: rec}, len(range(0, total, stride))


def measure_counts(harness: KernelRunner, kernel: Kernel, config: LaunchConfig, *,
                   arrays: dict[str, np.ndarray] | None = None, policy: TimingPolicy | None = None,
                   max_tracked: int = MAX_TRACKED, rewrite: CountRewrite | None = None) -> SiteCounts:
    """Run the counting variant of ``kernel`` once with exactly ``config`` (the same bindings and
    ``policy.seed``, so the same data as a plain run) and return the counts. ``rewrite``: a
    :func:`count_rewrite` of ``kernel`` made before (saves the parse). Raise
    :class:`~instrument.rewrite.InstrumentedRunError` when the launch is not ``ok`` and
    :class:`~instrument.rewrite.RewriteError` when the kernel cannot be instrumented."""
    cr = rewrite
    if cr is None:
        device = getattr(harness, "device", None)
        cr = count_rewrite(kernel, int64_atomics=device_supports_int64_atomics(device) if device else True)
    cfg, arrs, tracked = count_config(cr, config, arrays, max_tracked)
    base = policy or TimingPolicy()
    pol = TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=base.max_time_s,
                       idle_s=0.0, seed=base.seed, group_us=0.0, guard_bytes=base.guard_bytes)
    m = harness.run(cr.kernel, cfg, pol, readback=[REC_NAME], arrays=arrs)
    if m.status == "out_of_bounds" and hasattr(harness, "close"):
        harness.close()
    if m.status != "ok":
        raise InstrumentedRunError(m.status, (m.reason or m.compile_log[:300]).splitlines()[0]
                                   if (m.reason or m.compile_log) else m.status, m)
    rec = m.readback.get(REC_NAME)
    if rec is None:
        raise InstrumentedRunError("runtime_error", "the site record was not read back", m)
    counts = cr.decode(np.asarray(rec))
    if counts.items != tracked:
        log.info("%s: %d of %d sampled work-items flushed their counters", kernel.name, counts.items, tracked)
    return counts

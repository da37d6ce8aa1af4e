"""Index-aware and predicate-aware inputs: buffer contents and scalar values chosen from how the
kernel uses the values it loads.

Simple and memory-analysis selection fill every buffer with random values (floats in [0, 1),
integers in [0, 1024)) and bind scalars to the global size or small constants. A kernel that uses
loaded values as addresses (a gather ``x[col[k]]``, a scatter ``out[pos[i]] = ...``, a histogram
``hist[bin[i]]++``) then reads or writes far outside its buffers, and a kernel whose branches
compare loaded values with a scalar threshold (``in[i] >= threshold``, ``v % keep_mod == 0``,
``clamp(v, lo, hi)``) takes one branch everywhere. This module reads the kernel body once
(:func:`analyse_uses`: a small dataflow over its statements) and rewrites a base selection's
arguments (:func:`index_args`) by the rules of ``docs/argument-selection.md``:

* **R1 index bound**: an integer buffer ``B`` whose loaded values reach the subscript of a buffer
  ``A`` holds values uniform in ``[0, count(A) / (1 + largest integer literal of the subscript))``
  (the smallest such bound over every buffer it indexes);
* **R2 monotone index**: such a ``B`` whose loaded values also bound a ``for`` loop (a CSR row
  pointer, a neighbour-list offset) holds the same range sorted, with one element more than its
  base size (``row_ptr[row + 1]`` of the last row); the buffers it indexes grow by
  :data:`ROW_ENTRIES`, so the values are distinct (no empty row) and a row holds that many
  entries on average;
* **R3 threshold**: a scalar compared (``< <= > >= == !=``) with a value loaded from ``B`` takes the
  middle of ``B``'s value range; ``k`` such scalars of one buffer (``v < lo || v >= hi``) take its
  ``(j + 1) / (k + 1)`` quantiles in parameter order;
* **R4 clamp bounds**: a scalar argument of ``clamp`` / ``min`` / ``max`` / ``fmin`` / ``fmax`` beside
  a value loaded from ``B`` takes the first quarter (lower bounds: ``max``, ``clamp``'s second) or
  the third quarter (upper bounds) of ``B``'s range;
* **R5 modulus**: a scalar divisor of a loaded value (``v % m``) takes :data:`MODULUS` (a
  predicate ``v % m == 0`` then keeps a quarter of the work-items);
* **R6 signed data**: a buffer whose loaded values are compared (``< <= > >=``) with the literal 0
  holds values in ``[-w/2, w/2)`` of the range's width ``w`` (signed and float types only), so
  the sign test splits the work-items;
* **R7 atomic counter**: a buffer updated by an atomic whose returned value reaches a subscript
  (``slot = atomic_inc(count); out[slot] = v``) starts at zero before every launch
  (``init="zeros"``, ``reset_each_run``), so the slots it hands out start at the buffer's start;
* **R8 iteration cap**: a scalar compared with a counter in the header of a loop whose other test
  depends on loaded data (``while (x != 1 && s < max_steps)``) takes :data:`ITERATION_CAP`, so
  the data, not the cap, ends most work-items' loops;
* **R9 shift count**: a scalar shift count of loaded data (``(key >> shift) & 0xF``) takes
  :data:`SHIFT`, so the shifted digits still vary with the data.
* **R10 chunk per work-item**: a scalar multiplying the global id (``start = g * chunk``) whose
  product is compared with scalar bounds (``start >= n``) takes :data:`CHUNK`; the bounds and
  every global buffer grow by that factor, so every work-item has its chunk (not fired on a
  scalar also compared with a global-id variable directly: a row length in ``y * width + x``);
* **R11 window**: a scalar subtracted from the bound of the global id (``i < n - width + 1``)
  takes :data:`WINDOW`; the bound and every global buffer grow by ``WINDOW - 1``.
* **R13 equality**: integer data tested equal to a scalar or a literal (``levels[v] != cur_level``,
  ``atomic_cmpxchg(&levels[u], -1, d)``; not in a loop's header, where it is an iteration test,
  nor through a modulus, mask or shift, which R5 and R9 serve) holds :data:`EQUALITY_VALUES` values around the tested
  one (``[L - 1, L + 3)``, ``L`` = the literal, or 0 for a scalar, which R3 then sets inside that
  range), so a quarter of the tests hold instead of about 1 in 1,024;
* **R12 literal stride**: a literal multiple of the global id (``i = 2 * gid + phase``) compared
  with a scalar bound (``i + 1 < n``): the bound and every global buffer grow by the literal, so
  every work-item has its elements (with ``n = gsize`` the work-items past ``gsize / 2`` idle).

Where an expression carries both an index and the value it addressed (``pos[nbr[k]]``), R3-R6
take the value's buffer.

The analysis is lexical (the kernel function's body; helper functions are not followed), so it
errs on the side of not firing; validity (:mod:`datagen.validity`) checks every result.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace

from kernelcast.datagen.args import Selector

from kernelcast.clang import KernelParam
from kernelcast.cltypes import parse_type
from kernelcast.schema import ArgBinding

log = logging.getLogger(__name__)

#: the value a scalar divisor of loaded data gets (R5)
MODULUS = 4
#: the value a shift count of loaded data gets (R9): random integers in [0, 1024) keep 6 bits
SHIFT = 4
#: the value an iteration cap gets (R8)
ITERATION_CAP = 256
#: entries per row an R2 row pointer's ranges hold on average (the buffers it indexes grow by it)
ROW_ENTRIES = 4
#: the value a scalar that multiplies the global id gets (R10); the scalars bounding the product
#: and the buffers the kernel only reads are scaled by it
CHUNK = 4
#: the value a scalar window subtracted from the global id's bound gets (R11)
WINDOW = 8
#: the largest literal factor of the global id R12 scales a bound by
MAX_STRIDE = 16
#: the number of distinct values R13 draws integer data from (one below the tested value, it, and
#: two above): a quarter of the loads equal it
EQUALITY_VALUES = 4
#: index settings tried in turn: (divisor of every index bound, extra elements of every buffer
#: as a fraction of its count): the first keeps the base sizes, the second leaves slack for
#: reads one row past the end (``row_ptr[row + 1]``) and indices scaled by a scalar
SETTINGS: tuple[tuple[int, float], ...] = ((1, 0.0), (8, 0.125))

_TOKEN = re.compile(r"\s*(?:(/\*.*?\*/|//[^\n]*)|([A-Za-z_]\w*)|(0[xX][0-9a-fA-F]+[uUlL]*|\d+\.?\d*(?:[eE][-+]?\d+)?"
                    r"[fFuUlL]*|\.\d+(?:[eE][-+]?\d+)?[fF]?)|(<<=|>>=|<=|>=|==|!=|&&|\|\||\+\+|--|\+=|-=|\*=|/=|"
                    r"%=|&=|\|=|\^=|<<|>>|->|[-+*/%<>=!&|^~?:;,.(){}\[\]#]))", re.S)
_RELATIONAL = {"<", ">", "<=", ">=", "==", "!="}
_ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
_CLAMPS = {"clamp": ("x", "lo", "hi"), "min": ("hi", "hi"), "max": ("lo", "lo"), "fmin": ("hi", "hi"),
           "fmax": ("lo", "lo")}
#: tokens that end an operand of a comparison
_STOP = {";", ",", "&&", "||", "?", ":", "{", "}", *_ASSIGN}


@dataclass
class Uses:
    """What :func:`analyse_uses` found in a kernel body (names are the kernel's parameters)."""

    indexes: dict[str, set[str]] = field(default_factory=dict)       # B -> buffers its values index
    index_literal: dict[str, int] = field(default_factory=dict)      # B -> largest literal beside it
    loop_bound: set[str] = field(default_factory=set)                # B whose values bound a for loop
    thresholds: dict[str, str] = field(default_factory=dict)         # scalar -> buffer compared with
    clamps: dict[str, tuple[str, str]] = field(default_factory=dict)  # scalar -> (buffer, "lo" | "hi")
    moduli: dict[str, str] = field(default_factory=dict)             # scalar -> buffer it divides
    literal_cmp: dict[str, float] = field(default_factory=dict)      # B -> literal its values meet
    counters: set[str] = field(default_factory=set)                  # B whose atomic results index
    caps: set[str] = field(default_factory=set)                      # scalar iteration caps
    shifts: set[str] = field(default_factory=set)                    # scalar shift counts of data
    chunks: dict[str, set[str]] = field(default_factory=dict)        # R10: chunk scalar -> scalars bounding it
    windows: dict[str, str] = field(default_factory=dict)            # R11: window scalar -> scalar it shrinks
    strides: dict[str, int] = field(default_factory=dict)            # R12: bound scalar -> literal factor
    equalities: dict[str, float] = field(default_factory=dict)       # R13: int buffer -> value tested equal
    gid_bounds: set[str] = field(default_factory=set)                # scalars compared with a global id

    @property
    def empty(self) -> bool:
        return not (self.indexes or self.thresholds or self.clamps or self.moduli or self.literal_cmp
                    or self.counters or self.caps or self.shifts or self.work_rules or self.equalities)

    @property
    def work_rules(self) -> bool:
        """Whether R10, R11 or R12 fire: simple selection's scalars leave many work-items idle."""
        return bool(self.chunks or self.windows or self.strides)

    def rules(self) -> list[str]:
        """The rules that fire, as short labels (R1..R6 of the module docstring)."""
        out = [f"R1 {b}->{','.join(sorted(a))}" for b, a in sorted(self.indexes.items())]
        out += [f"R2 {b}" for b in sorted(self.loop_bound & set(self.indexes))]
        out += [f"R3 {s}~{b}" for s, b in sorted(self.thresholds.items())]
        out += [f"R4 {s}={r}({b})" for s, (b, r) in sorted(self.clamps.items())]
        out += [f"R5 {s}%{b}" for s, b in sorted(self.moduli.items())]
        out += [f"R6 {b}~{v:g}" for b, v in sorted(self.literal_cmp.items())]
        out += [f"R7 {b}" for b in sorted(self.counters)]
        out += [f"R8 {s}" for s in sorted(self.caps)]
        out += [f"R9 {s}" for s in sorted(self.shifts)]
        out += [f"R10 {s}*<{','.join(sorted(b))}" for s, b in sorted(self.chunks.items())]
        out += [f"R11 {b}-{s}" for s, b in sorted(self.windows.items())]
        out += [f"R12 {s}*{k}" for s, k in sorted(self.strides.items())]
        out += [f"R13 {b}=={v:g}" for b, v in sorted(self.equalities.items())]
        return out


def _tokens(src: str) -> list[str]:
    out, pos = [], 0
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if m is None or m.end() == pos:
            pos += 1
            continue
        pos = m.end()
        if m.group(1) is None:
            tok = m.group(0).strip()
            if tok:
                out.append(tok)
    return out


def kernel_body(source: str, name: str) -> list[str]:
    """The tokens of the body of kernel ``name`` (empty when it is not found)."""
    toks = _tokens(source)
    for i, t in enumerate(toks):
        if t == name and i + 1 < len(toks) and toks[i + 1] == "(" and any(
                q in toks[max(0, i - 6):i] for q in ("__kernel", "kernel", "__global__")):
            depth, j = 0, i + 1
            while j < len(toks):       # past the parameter list
                depth += toks[j] == "("
                depth -= toks[j] == ")"
                j += 1
                if depth == 0:
                    break
            if j < len(toks) and toks[j] == "{":
                depth, k = 0, j
                while k < len(toks):
                    depth += toks[k] == "{"
                    depth -= toks[k] == "}"
                    k += 1
                    if depth == 0:
                        return toks[j:k]
    return []


def _literal(tok: str) -> float | None:
    t = tok.rstrip("fFuUlL") if not tok.lower().startswith("0x") else tok.rstrip("uUlL")
    try:
        return float(int(t, 16)) if t.lower().startswith("0x") else float(t)
    except ValueError:
        return None


class _Flow:
    def __init__(self, toks: list[str], buffers: set[str], scalars: set[str]):
        self.t, self.buffers, self.scalars = toks, buffers, scalars
        self.taint: dict[str, set[str]] = {}

    def sources(self, lo: int, hi: int) -> set[str]:
        """Buffers whose loaded values reach the expression ``t[lo:hi]``: ``B[...]`` loads and
        variables assigned from them."""
        out: set[str] = set()
        for i in range(lo, hi):
            tok = self.t[i]
            if tok.startswith(("atomic_", "atom_")) and i + 2 < hi and self.t[i + 1] == "(":
                # the value an atomic returns: the counter it updated, marked with "@"
                j = i + 2 + (self.t[i + 2] == "&")
                if self.t[j] in self.buffers:
                    out.add("@" + self.t[j])
            elif tok in self.buffers and i + 1 < hi and self.t[i + 1] == "[":
                out.add(tok)
            elif tok in self.taint and not (i + 1 < len(self.t) and self.t[i + 1] == "("):
                out |= self.taint[tok]
        return out

    def expr_end(self, i: int, stops: set[str]) -> int:
        """The end of the expression starting at ``i``: the first stop token at depth 0 or an
        unmatched closing bracket."""
        depth = 0
        while i < len(self.t):
            tok = self.t[i]
            if tok in "([":
                depth += 1
            elif tok in ")]":
                if depth == 0:
                    return i
                depth -= 1
            elif depth == 0 and tok in stops:
                return i
            i += 1
        return i

    def expr_start(self, i: int, stops: set[str]) -> int:
        """The start of the expression ending just before ``i`` (the mirror of :meth:`expr_end`)."""
        depth = 0
        j = i - 1
        while j >= 0:
            tok = self.t[j]
            if tok in ")]":
                depth += 1
            elif tok in "([":
                if depth == 0:
                    return j + 1
                depth -= 1
            elif depth == 0 and tok in stops:
                return j + 1
            j -= 1
        return 0

    def propagate(self) -> None:
        """Variables assigned (or declared) from loaded values, to a fixed point."""
        for _ in range(4):
            changed = False
            for i, tok in enumerate(self.t):
                if tok not in _ASSIGN or i == 0:
                    continue
                lhs = self.t[i - 1]
                if not re.match(r"^[A-Za-z_]\w*$", lhs) or lhs in self.buffers:
                    continue
                src = self.sources(i + 1, self.expr_end(i + 1, {";", ","}))
                if src - self.taint.get(lhs, set()):
                    self.taint.setdefault(lhs, set()).update(src)
                    changed = True
            if not changed:
                return


def analyse_uses(source: str, name: str, params: list[KernelParam]) -> Uses:
    """Find the patterns of the rules R1-R13 in kernel ``name`` of ``source``."""
    toks = kernel_body(source, name)
    buffers = {p.name for p in params if p.kind == "buffer"}
    scalars = {p.name for p in params if p.kind == "scalar"}
    u = Uses()
    if not toks:
        return u
    f = _Flow(toks, buffers, scalars)
    f.propagate()
    thresholds: dict[str, set[str]] = {}
    clamps: dict[str, tuple[set[str], str]] = {}
    moduli: dict[str, set[str]] = {}
    signed: list[set[str]] = []
    equal: list[tuple[set[str], float]] = []      # R13: loaded values tested equal to a scalar or literal
    cmpxchg: dict[str, float] = {}                # R13: buffer -> the literal a compare-exchange expects
    t = toks

    in_loop_test: set[int] = set()               # tokens of for / while headers (iteration tests)
    for i, tok in enumerate(t):
        if tok in ("for", "while") and i + 1 < len(t) and t[i + 1] == "(":
            in_loop_test.update(range(i + 2, f.expr_end(i + 2, set())))

    def plain(a: int, b: int) -> bool:
        """Whether ``t[a:b]`` carries loaded values unchanged by a modulus, mask or shift."""
        return not any(x in ("%", "&", "|", "^", ">>", "<<") for x in t[a:b])

    def literal_at(a: int, b: int) -> float | None:
        """The value of ``t[a:b]`` when it is a literal, possibly negated."""
        if b - a == 1:
            return _literal(t[a])
        if b - a == 2 and t[a] == "-":
            v = _literal(t[a + 1])
            return None if v is None else -v
        return None
    for i, tok in enumerate(t):
        # R1: loaded values in a buffer's subscript
        if tok in buffers and i + 1 < len(t) and t[i + 1] == "[":
            end = f.expr_end(i + 2, set())
            for b in f.sources(i + 2, end):
                if b.startswith("@"):
                    if b[1:] != tok:
                        u.counters.add(b[1:])
                elif b != tok:
                    u.indexes.setdefault(b, set()).add(tok)
                    lits = [v for v in (_literal(x) for x in t[i + 2:end]) if v is not None]
                    u.index_literal[b] = max(u.index_literal.get(b, 0), int(max(lits, default=0)))
        # R2: loaded values in a for loop's header; R8: an iteration cap beside a data-dependent test
        if tok in ("for", "while") and i + 1 < len(t) and t[i + 1] == "(":
            end = f.expr_end(i + 2, set())
            src = f.sources(i + 2, end)
            if tok == "for":
                u.loop_bound |= {b for b in src if not b.startswith("@")}
            if src:
                for j in range(i + 2, end):
                    if t[j] not in _RELATIONAL:
                        continue
                    a0 = f.expr_start(j, _STOP | _RELATIONAL)
                    b1 = f.expr_end(j + 1, _STOP | _RELATIONAL)
                    side = [x for x in (*t[a0:j], *t[j + 1:b1]) if x in scalars]
                    if side and not f.sources(a0, b1):
                        u.caps.add(side[0])
        # R3 / R6: comparisons
        if tok in _RELATIONAL:
            a0 = f.expr_start(i, _STOP | _RELATIONAL)
            b1 = f.expr_end(i + 1, _STOP | _RELATIONAL)
            left, right = (a0, i), (i + 1, b1)
            for (x0, x1), (y0, y1) in ((left, right), (right, left)):
                src = f.sources(x0, x1)
                if not src:
                    continue
                side = [s for s in t[y0:y1] if s in scalars]
                if side and not f.sources(y0, y1):
                    thresholds.setdefault(side[0], src)
                    if tok in ("==", "!=") and i not in in_loop_test and plain(x0, x1):
                        equal.append((src, 0.0))
                elif tok in ("==", "!=") and i not in in_loop_test and plain(x0, x1) \
                        and literal_at(y0, y1) is not None and not f.sources(y0, y1):
                    equal.append((src, float(literal_at(y0, y1) or 0.0)))
                elif tok not in ("==", "!=") and y1 - y0 == 1 and _literal(t[y0]) == 0.0:
                    signed.append(src)
        # R4: clamp bounds
        if tok in _CLAMPS and i + 1 < len(t) and t[i + 1] == "(":
            args, j = [], i + 2
            while j < len(t):
                e = f.expr_end(j, {","})
                args.append((j, e))
                if e >= len(t) or t[e] != ",":
                    break
                j = e + 1
            data = set().union(*(f.sources(a, b) for a, b in args)) if args else set()
            if data:
                roles = _CLAMPS[tok]
                for k, (a, b) in enumerate(args):
                    role = roles[min(k, len(roles) - 1)]
                    if role != "x" and b - a == 1 and t[a] in scalars:
                        clamps.setdefault(t[a], (data, role))
        # R13: ``atomic_cmpxchg(&B[i], L, v)``: B's values are tested equal to the literal L
        if tok in ("atomic_cmpxchg", "atom_cmpxchg") and i + 1 < len(t) and t[i + 1] == "(":
            a0 = i + 2
            a1 = f.expr_end(a0, {","})
            buf = next((x for x in t[a0:a1] if x in buffers), None)
            if buf is not None and a1 < len(t) and t[a1] == ",":
                e1 = f.expr_end(a1 + 1, {","})
                lit = literal_at(a1 + 1, e1)
                if lit is not None:
                    cmpxchg.setdefault(buf, lit)
        # R9: a scalar shift count of loaded data
        if tok in (">>", "<<") and i + 1 < len(t) and t[i + 1] in scalars:
            if f.sources(f.expr_start(i, _STOP | _RELATIONAL | {"+", "-", "*", "/", "&", "|", "^"}), i):
                u.shifts.add(t[i + 1])
        # R5: a scalar divisor of loaded data
        if tok == "%" and i + 1 < len(t) and t[i + 1] in scalars:
            src = f.sources(f.expr_start(i, _STOP | _RELATIONAL | {"+", "-", "*", "/"}), i)
            if src:
                moduli.setdefault(t[i + 1], src)

    def data_of(src: set[str]) -> str:
        """The buffer whose values an expression carries: a loaded value rather than the index
        that addressed it."""
        loaded = {b for b in src if not b.startswith("@")} or {b[1:] for b in src}
        values = sorted(loaded - set(u.indexes))
        return values[0] if values else sorted(loaded)[0]

    _work_patterns(f, u, scalars)
    # a scalar that bounds the global id (``if (tid >= count) return``) is the problem size: the
    # value rules leave it to the base selection even where it also meets loaded data
    u.thresholds = {s: data_of(src) for s, src in thresholds.items() if s not in u.gid_bounds}
    u.clamps = {s: (data_of(src), role) for s, (src, role) in clamps.items() if s not in u.gid_bounds}
    u.moduli = {s: data_of(src) for s, src in moduli.items() if s not in u.gid_bounds}
    u.caps -= u.gid_bounds
    u.shifts -= u.gid_bounds
    for src in signed:
        b = data_of(src)
        if b not in u.indexes:
            u.literal_cmp.setdefault(b, 0.0)
    for src, v in equal:
        b = data_of(src)
        if b not in u.indexes and not any(x.startswith("@") for x in src):
            u.equalities.setdefault(b, v)
    for b, v in cmpxchg.items():
        if b not in u.indexes:
            u.equalities.setdefault(b, v)
    # a scalar both compared and clamped: the clamp role wins
    for s in list(u.thresholds):
        if s in u.clamps or s in u.moduli:
            del u.thresholds[s]
    return u


def _work_patterns(f: _Flow, u: Uses, scalars: set[str]) -> None:
    """R10, R11 and R12: scalars that, bound like simple selection binds them (to the global size),
    leave all but a few work-items idle."""
    t = f.t
    ident = re.compile(r"^[A-Za-z_]\w*$")
    gid: set[str] = set()           # variables derived from the global id
    pure: set[str] = set()          # variables holding a global id itself (``x = get_global_id(0)``)
    for i, tok in enumerate(t):
        if tok in _ASSIGN and 0 < i < len(t) - 1 and ident.match(t[i - 1]) and t[i + 1] == "get_global_id":
            if f.expr_end(i + 1, {";", ","}) == i + 5:
                pure.add(t[i - 1])
    for _ in range(3):
        for i, tok in enumerate(t):
            if tok in _ASSIGN and i > 0 and ident.match(t[i - 1]) and t[i - 1] not in f.buffers:
                end = f.expr_end(i + 1, {";", ","})
                if any(x == "get_global_id" or x in gid for x in t[i + 1:end]):
                    gid.add(t[i - 1])

    def is_gid(j: int) -> bool:
        return t[j] in gid or (t[j] == ")" and j >= 3 and t[j - 3] == "get_global_id")

    def relation_other_side(i: int) -> tuple[int, int] | None:
        """The other operand of the comparison whose operand holds ``t[i]`` (None: not in one)."""
        a0, b1 = f.expr_start(i, _STOP | _RELATIONAL), f.expr_end(i, _STOP | _RELATIONAL)
        if a0 > 0 and t[a0 - 1] in _RELATIONAL:
            return f.expr_start(a0 - 1, _STOP | _RELATIONAL), a0 - 1
        if b1 < len(t) and t[b1] in _RELATIONAL:
            return b1 + 1, f.expr_end(b1 + 1, _STOP | _RELATIONAL)
        return None

    # scalars compared directly with a global id (a row width in ``x < width``)
    direct: set[str] = set()
    for i, tok in enumerate(t):
        if tok in scalars:
            other = relation_other_side(i)
            if other and not f.sources(*other) \
                    and any(t[j] in pure or (is_gid(j) and t[j] == ")") for j in range(*other)):
                direct.add(tok)
    u.gid_bounds = direct

    def product_bounds(i: int, chunk: str | None) -> set[str]:
        """The scalars (other than ``chunk``) compared with the product at ``t[i]`` or with a
        variable assigned from it."""
        sites = [i]
        s0 = f.expr_start(i, {";", "{", "}", ",", *_ASSIGN})
        if s0 > 1 and t[s0 - 1] == "=" and ident.match(t[s0 - 2]):
            prod = {t[s0 - 2]}      # the product's variable and those assigned from it
            for _ in range(3):
                for j, x in enumerate(t):
                    if x == "=" and j > 0 and ident.match(t[j - 1]) and t[j - 1] not in prod:
                        if any(y in prod for y in t[j + 1:f.expr_end(j + 1, {";", ","})]):
                            prod.add(t[j - 1])
            sites += [j for j, x in enumerate(t) if x in prod and not (j + 1 < len(t) and t[j + 1] == "=")]
        bounds: set[str] = set()
        for j in sites:
            other = relation_other_side(j)
            if other:
                bounds |= {x for x in t[other[0]:other[1]] if x in scalars and x != chunk}
        return bounds

    # R10: ``start = g * chunk`` compared with a bound (``start >= n``) or starting a loop
    for i, tok in enumerate(t):
        if tok != "*" or i == 0 or i + 1 >= len(t):
            continue
        right = i + 1
        if t[i + 1] == "(" and i + 4 < len(t) and t[i + 3] == ")" and t[i + 4] in scalars:
            right = i + 4                                           # ``g * (size_t)k``
        pairs = ((i - 1, right), (i + 1, i - 1))
        for g, sc in pairs:
            if not is_gid(g) or t[sc] not in scalars or t[sc] in direct:
                continue
            if sc > i and sc + 1 < len(t) and t[sc + 1] in ("[", "("):
                continue
            chunk = t[sc]
            bounds = product_bounds(i, chunk)
            if bounds:
                u.chunks.setdefault(chunk, set()).update(bounds)
    # R12: ``i = 2 * get_global_id(0) + phase`` compared with a bound (``i + 1 < n``): a literal
    # number of elements per work-item
    for i, tok in enumerate(t):
        if tok != "*" or i == 0 or i + 1 >= len(t):
            continue
        for lit, g in ((i - 1, i + 1), (i + 1, i - 1)):
            if not re.fullmatch(r"\d+[uUlL]*", t[lit]):
                continue
            factor = int(re.sub(r"[uUlL]+$", "", t[lit]))
            if not 2 <= factor <= MAX_STRIDE:
                continue
            if not (is_gid(g) or (g > i and t[g] == "get_global_id")):
                continue
            if g < i and t[g] != ")" and g > 0 and t[g - 1] in ("*", "/", "%", "[", "."):
                continue                                            # ``y * width * 2``: not the id itself
            for b in product_bounds(i, None):
                if b not in direct:
                    u.strides[b] = max(u.strides.get(b, 1), factor)
    # R11: ``i < n - width + 1``: a window scalar subtracted from the bound of the global id, or
    # added to the global id (``i + w <= n``)
    for i, tok in enumerate(t):
        if tok == "-" and 0 < i < len(t) - 1 and t[i - 1] in scalars and t[i + 1] in scalars:
            other = relation_other_side(i)
            if other and any(is_gid(j) for j in range(*other)):
                u.windows.setdefault(t[i + 1], t[i - 1])
        if tok == "+" and 0 < i < len(t) - 1 and t[i - 1] in pure and t[i + 1] in scalars:
            other = relation_other_side(i)
            if other and other[1] - other[0] == 1 and t[other[0]] in scalars and t[other[0]] != t[i + 1]:
                u.windows.setdefault(t[i + 1], t[other[0]])


def default_range(dtype: str) -> tuple[float, float]:
    """The value range :func:`instrument.backends.base.init_contents` draws ``random`` values from."""
    nt = parse_type(dtype).numpy
    if nt.kind == "f":
        return 0.0, 1.0
    if nt.itemsize == 1:
        return 0.0, 256.0 if nt.kind == "u" else 128.0
    return 0.0, 1024.0


def _typed(dtype: str, v: float) -> int | float:
    nt = parse_type(dtype).numpy
    return float(v) if nt.kind == "f" else int(math.floor(v))


def index_args(uses: Uses, params: list[KernelParam], base: list[ArgBinding], setting: int = 0
               ) -> tuple[list[ArgBinding], list[str]]:
    """``base`` (a selection's arguments) rewritten by the rules that fire in ``uses`` under index
    setting ``setting`` (:data:`SETTINGS`); the rules applied, as labels."""
    divisor, slack = SETTINGS[setting]
    by = {b.name: b for b in base}
    out = {b.name: b for b in base}
    dtypes = {p.name: p.dtype for p in params}
    if slack:
        for b in base:
            if b.kind == "buffer" and b.count:
                out[b.name] = replace(b, count=int(b.count + math.ceil(b.count * slack)))
    applied: list[str] = []
    ranges: dict[str, tuple[float, float]] = {}
    for b in sorted(uses.counters):
        if b in by and by[b].kind == "buffer":
            out[b] = replace(out[b], init="zeros", reset_each_run=True)
            ranges[b] = (0.0, 0.0)
            applied.append(f"R7 {b}=0")
    for b, targets in sorted(uses.indexes.items()):
        if b in ranges or b not in by or by[b].kind != "buffer" or parse_type(by[b].dtype).numpy.kind not in "iu":
            continue
        counts = [by[a].count or 0 for a in targets if a in by and by[a].kind == "buffer"]
        if not counts:
            continue
        kind = "sorted" if b in uses.loop_bound else "uniform"
        if kind == "sorted":        # the ranges it bounds: ROW_ENTRIES entries per row on average
            for a in targets:
                if a in out and out[a].kind == "buffer" and out[a].count:
                    out[a] = replace(out[a], count=int(out[a].count) * ROW_ENTRIES)
            counts = [c * ROW_ENTRIES for c in counts]
        hi = max(1, min(counts) // (1 + uses.index_literal.get(b, 0)) // divisor)
        out[b] = replace(out[b], init=f"{kind}:0:{hi}")
        if kind == "sorted" and out[b].count:       # a row pointer: one entry more than rows
            out[b] = replace(out[b], count=int(out[b].count) + 1)
        ranges[b] = (0.0, float(hi))
        applied.append(f"{'R2' if kind == 'sorted' else 'R1'} {b}<{hi}")
    for eq, c in sorted(uses.equalities.items()):
        if eq in ranges or eq not in by or by[eq].kind != "buffer":
            continue
        et = parse_type(by[eq].dtype).numpy
        if et.kind not in "iu":
            continue
        lo = c - 1 if (et.kind == "i" or c >= 1) else c
        out[eq] = replace(out[eq], init=f"uniform:{lo:g}:{lo + EQUALITY_VALUES:g}")
        ranges[eq] = (lo, lo + EQUALITY_VALUES)
        applied.append(f"R13 {eq}~{c:g}")
    for b, c in sorted(uses.literal_cmp.items()):
        if b in ranges or b not in by or by[b].kind != "buffer":
            continue
        nt = parse_type(by[b].dtype).numpy
        if nt.kind == "u":
            continue
        lo, hi = default_range(by[b].dtype)
        w = hi - lo
        if nt.kind == "i":
            w = min(w, float(2 ** (8 * nt.itemsize - 1)))
        out[b] = replace(out[b], init=f"uniform:{c - w / 2:g}:{c + w / 2:g}")
        ranges[b] = (c - w / 2, c + w / 2)
        applied.append(f"R6 {b}~{c:g}")

    def value_range(b: str) -> tuple[float, float] | None:
        if b in ranges:
            return ranges[b]
        return default_range(by[b].dtype) if b in by and by[b].kind == "buffer" else None

    order = {p.name: i for i, p in enumerate(params)}
    for s, b in sorted(uses.thresholds.items()):
        r = value_range(b)
        if s in out and out[s].kind == "scalar" and r is not None:
            # the k thresholds of one buffer, in parameter order, at its (j + 1) / (k + 1) quantiles
            peers = sorted((x for x, y in uses.thresholds.items() if y == b), key=lambda x: order.get(x, 0))
            q = (peers.index(s) + 1) / (len(peers) + 1)
            out[s] = replace(out[s], value=_typed(dtypes.get(s, out[s].dtype), r[0] + q * (r[1] - r[0])))
            applied.append(f"R3 {s}={out[s].value}")
    for s, (b, role) in sorted(uses.clamps.items()):
        r = value_range(b)
        if s in out and out[s].kind == "scalar" and r is not None:
            q = 0.25 if role == "lo" else 0.75
            out[s] = replace(out[s], value=_typed(dtypes.get(s, out[s].dtype), r[0] + q * (r[1] - r[0])))
            applied.append(f"R4 {s}={out[s].value}")
    for s in sorted(uses.caps - set(uses.thresholds) - set(uses.clamps) - set(uses.moduli)):
        if s in out and out[s].kind == "scalar":
            out[s] = replace(out[s], value=_typed(dtypes.get(s, out[s].dtype), ITERATION_CAP))
            applied.append(f"R8 {s}={out[s].value}")
    for s in sorted(uses.shifts - set(uses.thresholds) - set(uses.clamps) - set(uses.moduli)):
        if s in out and out[s].kind == "scalar":
            out[s] = replace(out[s], value=_typed(dtypes.get(s, out[s].dtype), SHIFT))
            applied.append(f"R9 {s}={out[s].value}")
    for s in sorted(uses.moduli):
        if s in out and out[s].kind == "scalar":
            out[s] = replace(out[s], value=_typed(dtypes.get(s, out[s].dtype), MODULUS))
            applied.append(f"R5 {s}={out[s].value}")
    _apply_work_rules(uses, params, by, out, applied)
    return [out[p.name] for p in params if p.name in out], applied


def _apply_work_rules(uses: Uses, params: list[KernelParam], by: dict[str, ArgBinding],
                      out: dict[str, ArgBinding], applied: list[str]) -> None:
    """R10, R11 and R12 on ``out`` (``by``: the base arguments; ``applied`` gets their labels)."""
    if not uses.work_rules:
        return
    taken = set(uses.thresholds) | set(uses.clamps) | set(uses.moduli) | uses.caps | uses.shifts

    def scalar(name: str) -> bool:
        return name in out and out[name].kind == "scalar" and name not in taken \
            and parse_type(out[name].dtype).numpy.kind in "iu" and isinstance(by[name].value, (int, float))

    grow = 1
    extra = 0
    for s, bounds in sorted(uses.chunks.items()):
        if not scalar(s) or not any(scalar(b) for b in bounds):
            continue
        out[s] = replace(out[s], value=CHUNK)
        applied.append(f"R10 {s}={CHUNK}")
        for b in sorted(bounds):
            if scalar(b) and b not in uses.chunks:
                out[b] = replace(out[b], value=int(by[b].value) * CHUNK)
                applied.append(f"R10 {b}={out[b].value}")
        grow = CHUNK
    for s, b in sorted(uses.windows.items()):
        if not (scalar(s) and scalar(b)) or s in uses.chunks:
            continue
        out[s] = replace(out[s], value=WINDOW)
        out[b] = replace(out[b], value=int(out[b].value) + WINDOW - 1)
        applied.append(f"R11 {s}={WINDOW} {b}={out[b].value}")
        extra = WINDOW - 1
    for b, factor in sorted(uses.strides.items()):
        if not scalar(b) or b in uses.chunks or any(b in (s, w) for s, w in uses.windows.items()):
            continue
        out[b] = replace(out[b], value=int(by[b].value) * factor)
        applied.append(f"R12 {b}={out[b].value}")
        grow = max(grow, factor)
    if grow == 1 and not extra:
        return
    for p in params:           # every global buffer holds the larger problem
        if p.name in out and out[p.name].kind == "buffer" and out[p.name].count:
            out[p.name] = replace(out[p.name], count=int(out[p.name].count) * grow + extra)


def index_selector(base: Selector, uses: Uses, setting: int = 0) -> Selector:
    """A selector: ``base``'s arguments rewritten by :func:`index_args` (``select.last_rules``: the
    rules applied to the last configuration)."""

    def select(params: list[KernelParam], gsize: tuple[int, ...], lsize: tuple[int, ...] | None
               ) -> list[ArgBinding]:
        args, rules = index_args(uses, params, base(params, gsize, lsize), setting)
        select.last_rules = rules  # type: ignore[attr-defined]
        for attr in ("last_setting", "last_activity", "last_grown"):
            if hasattr(base, attr):
                setattr(select, attr, getattr(base, attr) if attr != "last_activity" else None)
        return args

    select.last_rules = []  # type: ignore[attr-defined]
    return select


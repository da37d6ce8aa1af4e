"""Static features of an OpenCL C kernel from its AST (libclang): per-work-item symbolic counts.

:func:`analyze_source` walks the kernel body once, inlining the helper functions it calls (with
their arguments bound), and builds every count as a polynomial (:mod:`models.static.expr`) in the
scalar arguments and ``gsize``/``lsize``/``ngroups``. The choices it makes:

**Counts and weights.** Each statement is counted with two weights: the *item* weight (average
number of executions per work-item: loop trip counts times branch fractions) and the *warp*
weight (SIMT view: how often the warp a work-item belongs to issues it, per work-item - a
divergent branch costs the whole warp both paths). Branch fractions are computed for conditions
comparing a work-item id, group id, loop counter or ``id % c`` with a uniform value
(``gid < n`` -> ``min(1, n/gsize0)``, ``lid == 0`` -> ``1/lsize0`` per item and ``min(1,
warp/lsize0)`` per warp; ``&&`` multiplies, ``||`` adds, ``!`` swaps). Other conditions: a branch
without ``else`` counts fully (it is mostly a guard), ``if/else`` counts each side 1/2 per item,
and both sides fully per warp when the condition depends on work-item ids or loaded data.
``switch`` weights each case ``1/cases``. After ``if (c) return;`` the rest of the block runs
with the fraction of items for which ``c`` is false (when that fraction is known).

**Operations.** Classes ``fp32_add`` (add/sub/neg/min/max/abs...), ``fp32_mul``, ``fp32_fma``
(``fma``/``mad``/``mix``/``dot``, and ``a*b+c`` which clang contracts by default),
``fp32_div``, the same for ``fp64``, ``int_add``, ``int_mul``, ``int_div`` (``/`` and ``%``),
``int_bit`` (bitwise, shifts, logical), ``sfu`` (transcendental and ``sqrt``/``rsqrt``/native
reciprocal; ``pow``/``tan``/``sincos``/hyperbolic count 2), ``cmp``, ``conv`` (int <-> float <->
double conversions of non-constants, ``convert_*``), ``branch`` (if, ?:, each loop-condition
test, switch), ``barrier``, ``fence``. The class comes from the libclang type of the operation
(vectors count once per component; ``half`` counts as fp32).

**Memory.** Every array subscript, pointer dereference, struct member of a buffer element,
``vloadN``/``vstoreN``, atomic and image read/write is an :class:`Access` with its address space,
load/store/atomic, bytes, index and the affine analysis below. A component of a vector element
(``a[i].x``) counts as a load of the component.

**Loops and trip counts.** ``for (i = A; i < B; i += C)`` and the ``<=``, ``>``, ``>=``, ``!=``,
``i++``/``i--``/``i -= C``/``i = i + C`` forms give ``max(0, ceil((B - A) / C))`` (``+1`` for
``<=``/``>=``); ``i *= F``, ``i <<= k``, ``i /= F``, ``i >>= k`` give ``log2`` formulas. The same
applies to ``while``/``do`` loops whose variable is updated by one such statement at the top
level of the body. ``#define`` constants are already expanded in the AST (their values are read
with ``clang_Cursor_Evaluate``). When ``A`` or ``B`` depend on a work-item id or an enclosing
loop's counter the trip count is the *average* over work-items/iterations: ids are replaced by
their means (``gid0`` -> ``(gsize0-1)/2``; counter of an enclosing loop -> ``(T-1)/2``) and
``ceil(x/C)`` by its mean ``x/C + (C-1)/(2C)``, which is exact for the grid-stride and
work-group-stride loops ``for (i = lid; i < n; i += lsize)``, and gives the exact triangular sum
for ``for (j = i; j < n; j++)``. A bound that depends on loaded data (CSR
``row_ptr[i]..row_ptr[i+1]``, a length array) or that the analysis cannot follow makes the loop
``data_dependent`` (or ``unknown``) with trip count ``avg_trip`` (a symbol, default 8). A
conjunction ``i < n && <data test>`` takes the affine bound (an upper bound; ``early_exit``),
and a ``break`` inside keeps the bound (``has_break``).

**Affine analysis.** Index expressions are polynomials in ``gid{d}``, ``lid{d}``, ``grp{d}``,
loop counters, loaded values and scalars. The lane stride along local dimension ``d`` is the
discrete derivative of the index with respect to a one-step move of the work-item along ``d``
(``gid_d`` and ``lid_d`` move by 1, group ids and everything uniform by 0; ``x / c`` and
``x % c`` use the common case of no bucket change: 0 and ``dx``; ``min``/``max``/``?:`` use the
side that varies). A loaded value whose own index varies between lanes has an unknown
derivative: the access is ``indirect`` (gather) and gets the worst-case coalescing of
:mod:`models.static.coalescing`. An index that is not affine in the ids (``gid*gid``) has
``affine=False``.

**Divergence.** Each branch site is ``divergent`` (condition depends on a work-item id),
``data`` (on loaded data) or ``uniform``. Values assigned under a condition carry the
condition's dependencies.

Not handled (noted in ``SourceFeatures.notes`` where met): recursion, ``goto``,
``async_work_group_copy`` and other builtins without a table entry, pointers whose target the
analysis cannot follow, function pointers. Loop trip counts of divergent loops are averages,
not warp maxima.
"""

from __future__ import annotations

import itertools
import keyword
import logging
import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import clang.cindex as ci

from kernelcast.clang import ParseError, find_kernels, kernel_params, parse
from kernelcast.schema import Kernel
from models.static import _cx
from models.static.expr import (
    DATA,
    GRP,
    ITER,
    MAX_TERMS,
    VAR,
    WI,
    Atom,
    Poly,
    opaque,
    p_ceil_div,
    p_clamp01,
    p_div,
    p_floordiv,
    p_itersum,
    p_max,
    p_min,
    p_mod,
    p_unary,
    sym,
)
from models.static.features import (
    OP_CLASSES,
    RESERVED,
    Access,
    BranchInfo,
    LoopInfo,
    SourceFeatures,
)

log = logging.getLogger(__name__)

K = ci.CursorKind
TK = ci.TypeKind

ZERO = Poly()
ONE = Poly.const(1)
HALF = Poly.const(Fraction(1, 2))
AVG_TRIP = Poly.symbol("avg_trip")
WARP = Poly.symbol("warp", integer=True)

_FP32 = {TK.FLOAT, TK.HALF}
_FP64 = {TK.DOUBLE, TK.LONGDOUBLE}
_INT = {TK.BOOL, TK.CHAR_U, TK.UCHAR, TK.CHAR16, TK.CHAR32, TK.USHORT, TK.UINT, TK.ULONG,
        TK.ULONGLONG, TK.UINT128, TK.CHAR_S, TK.SCHAR, TK.WCHAR, TK.SHORT, TK.INT, TK.LONG,
        TK.LONGLONG, TK.INT128, TK.ENUM}
for _name in ("FLOAT16", "BFLOAT16"):
    if hasattr(TK, _name):
        _FP32.add(getattr(TK, _name))

_EXPR_KINDS_PASSTHRU = {K.PAREN_EXPR}


def type_class(t: ci.Type) -> tuple[str, int]:
    """``(class, width)``: class fp32 / fp64 / int / ptr / other; width = vector components."""
    t = t.get_canonical()
    width = 1
    if t.kind in (TK.EXTVECTOR, TK.VECTOR):
        width = max(1, t.element_count)
        t = t.element_type.get_canonical()
    k = t.kind
    if k in _FP32:
        return "fp32", width
    if k in _FP64:
        return "fp64", width
    if k in _INT:
        return "int", width
    if k == TK.POINTER:
        return "ptr", 1
    return "other", width


def _type_bytes(t: ci.Type) -> int:
    n = t.get_canonical().get_size()
    return int(n) if n and n > 0 else 0


def _space_of(t: ci.Type) -> str:
    """Address space of a pointee / variable type from its spelling."""
    s = t.spelling
    if "__global" in s:
        return "global"
    if "__constant" in s:
        return "constant"
    if "__local" in s:
        return "local"
    return "private"


# ----------------------------------------------------------------------------------------------
# builtin tables
# ----------------------------------------------------------------------------------------------

_SFU: dict[str, int] = {
    **dict.fromkeys(["sin", "cos", "asin", "acos", "atan", "sinpi", "cospi", "asinpi", "acospi", "atanpi",
                     "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "logb", "sqrt",
                     "rsqrt", "cbrt", "erf", "erfc", "recip", "ilogb"], 1),
    **dict.fromkeys(["tan", "tanpi", "atan2", "atan2pi", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                     "pow", "pown", "powr", "rootn", "sincos", "lgamma", "lgamma_r", "tgamma", "hypot"], 2),
}
_ALU = {"fabs", "fmin", "fmax", "min", "max", "floor", "ceil", "round", "trunc", "rint", "sign", "step",
        "copysign", "select", "abs", "abs_diff", "add_sat", "sub_sat", "hadd", "rhadd", "fdim", "maxmag",
        "minmag", "nextafter", "degrees", "radians", "fract", "modf", "frexp", "ldexp", "nan"}
_ALU2 = {"clamp": 2, "smoothstep": 4}
_INT_MUL = {"mul24", "mad24", "mul_hi", "mad_hi", "mad_sat"}
_INT_BIT = {"rotate", "popcount", "clz", "ctz", "bitselect", "shuffle", "shuffle2", "upsample", "any", "all"}
_CMP = {"isnan", "isinf", "isfinite", "isnormal", "signbit", "isequal", "isnotequal", "isgreater",
        "isgreaterequal", "isless", "islessequal", "islessgreater", "isordered", "isunordered"}
_DIV = {"divide", "fmod", "remainder", "remquo"}
_BARRIER = {"barrier", "work_group_barrier", "sub_group_barrier"}
_FENCE = {"mem_fence", "read_mem_fence", "write_mem_fence", "atomic_work_item_fence"}
_IGNORE = {"printf", "get_image_width", "get_image_height", "get_image_depth", "get_image_dim",
           "get_image_channel_order", "get_image_channel_data_type", "prefetch", "get_work_dim",
           "get_global_offset", "atomic_init", "vec_step",
           "__builtin_inff", "__builtin_inf", "__builtin_nanf", "__builtin_huge_valf"}
_WORKITEM = {"get_global_id": "gid", "get_local_id": "lid", "get_group_id": "grp"}
_SIZES = {"get_global_size": "gsize", "get_local_size": "lsize", "get_enqueued_local_size": "lsize",
          "get_num_groups": "ngroups"}
_VLOAD = re.compile(r"^vload(a)?(_half)?(\d+)?(_rt[enpz])?$")
_VSTORE = re.compile(r"^vstore(a)?(_half)?(\d+)?(_rt[enpz])?$")


# ----------------------------------------------------------------------------------------------
# values
# ----------------------------------------------------------------------------------------------

@dataclass
class Ptr:
    """A pointer value: ``base`` (buffer/array name) + ``offset`` leaf elements."""

    base: str
    space: str
    offset: Poly | None
    leaf_bytes: int
    deps: frozenset[str] = frozenset()


@dataclass
class Val:
    poly: Poly | None
    deps: frozenset[str] = frozenset()
    ptr: Ptr | None = None

    @staticmethod
    def of(p: Poly | None, extra: frozenset[str] = frozenset()) -> Val:
        if p is not None and len(p.terms) > MAX_TERMS:
            return Val(None, p.deps | extra)
        return Val(p, (p.deps if p is not None else frozenset()) | extra)


UNKNOWN = Val(None)


@dataclass
class MemRef:
    base: str
    space: str
    index: Poly | None
    deps: frozenset[str]
    elem_bytes: int
    unit_bytes: int
    text: str


@dataclass
class Frac:
    """Fractions of items / warps taking the then and else sides of a condition."""

    it: Poly
    ie: Poly
    wt: Poly
    we: Poly
    known: bool = True

    def swap(self) -> Frac:
        return Frac(self.ie, self.it, self.we, self.wt, self.known)


@dataclass
class _LoopCtx:
    has_break: bool = False


@dataclass
class _Frame:
    """One inlined function body (the kernel itself is the outermost frame)."""

    name: str
    returns: list[Val] = field(default_factory=list)
    is_kernel: bool = False


# ----------------------------------------------------------------------------------------------
# derivative and averaging
# ----------------------------------------------------------------------------------------------

def _is_zero(p: Poly | None) -> bool:
    return p is not None and p.is_zero()


def deriv(p: Poly, dim: int) -> Poly | None:
    """Lane stride of ``p`` along local dimension ``dim`` (module docstring), or None."""
    if WI not in p.deps:
        return ZERO
    out = ZERO
    for mono, c in p.terms.items():
        for i, (a, pw) in enumerate(mono):
            da = _deriv_atom(a, dim)
            if da is None:
                return None
            if da.is_zero():
                continue
            rest = Poly({mono[:i] + ((a, pw - 1),) + mono[i + 1:] if pw > 1 else mono[:i] + mono[i + 1:]: c * pw})
            out = out + rest * da
    return out


def _deriv_atom(a: Atom, dim: int) -> Poly | None:
    if WI not in a.deps:
        return ZERO
    if a.kind == "wi":
        return ONE if (a.dim == dim and a.name[:3] in ("gid", "lid")) else ZERO
    if a.kind in ("var", "data", "geo"):
        if a.deriv is None:
            return None
        return a.deriv[dim] if dim < len(a.deriv) else ZERO
    if a.kind != "fn":
        return None
    f = a.fn
    if f in ("floordiv", "mod", "div"):
        num, den = a.args
        if WI in den.deps:
            return None
        dn = deriv(num, dim)
        if dn is None:
            return None
        if dn.is_zero():
            return ZERO
        if f == "div":
            return p_div(dn, den)
        if f == "mod":
            return dn
        if dn.is_const() and den.is_const() and den.const_value() != 0:
            q = dn.const_value() / den.const_value()
            return Poly.const(q) if q.denominator == 1 else ZERO
        return ZERO
    if f in ("max", "min", "sel"):
        ds = [deriv(x, dim) for x in a.args]
        if any(x is None for x in ds):
            return None
        nz = [x for x in ds if x is not None and not x.is_zero()]
        if not nz:
            return ZERO
        if all(x == nz[0] for x in nz):
            return nz[0]
        return None
    if f in ("abs", "floor", "ceil"):
        # floor(x * r) advances by r on average between adjacent lanes
        return deriv(a.args[0], dim)
    if f == "bit" and a.name in ("bit|", "bit^") and len(a.args) == 2:
        # x | y with disjoint bits and x ^ uniform: the varying side's stride (common index idioms)
        ds = [deriv(x, dim) for x in a.args]
        if any(x is None for x in ds):
            return None
        nz = [x for x in ds if x is not None and not x.is_zero()]
        if a.name == "bit^" and len(nz) > 1:
            return None
        return nz[0] + nz[1] if len(nz) == 2 else (nz[0] if nz else ZERO)
    return None


def average(p: Poly | None, keep_geo: bool = False) -> Poly | None:
    """``p`` with work-item ids and loop counters replaced by their means; None if ``p``
    depends on loaded data or unknown values. ``keep_geo`` keeps the variables of halving/doubling
    loops (they are summed exactly over their iterations when the loop is left)."""
    if p is None:
        return None

    def rep(a: Atom) -> Poly | None:
        if a.kind == "sym":
            return Poly.atom(a)
        if a.kind == "geo" and keep_geo:
            return Poly.atom(a)
        if a.kind in ("wi", "iter", "geo"):
            return average(a.avg, keep_geo) if a.avg is not None else None
        if a.kind == "fn":
            if a.fn == "mod" and a.args[0].deps & {WI, GRP, ITER} and not a.args[1].deps & {WI, GRP, ITER}:
                # x % c over many equally likely x: the remainders are uniform on 0..c-1
                m = average(a.args[1], keep_geo)
                return None if m is None else (m - 1) * Fraction(1, 2)
            if a.fn == "sel":
                # c ? x : y with an unknown condition: the mean of both sides
                x, y = average(a.args[0], keep_geo), average(a.args[1], keep_geo)
                return None if x is None or y is None else (x + y) * HALF
            return Poly.atom(a)
        return None

    return p.subst(rep)


def _printable(p: Poly | None) -> Poly | None:
    return p if p is not None and p.printable else None


def _geo_printable(p: Poly | None) -> Poly | None:
    """Printable once the variables of enclosing halving/doubling loops are summed out."""
    return p if p is not None and p.printable_in(None) else None


def _has_atom(p: Poly, a: Atom) -> bool:
    return any(x == a for x in p.all_atoms())


def integrate_geo(delta: Poly, g: Atom, start: Poly, factor: Fraction, trips: Poly) -> Poly:
    """Counts ``delta`` accumulated in a geometric loop body (weighted by ``trips`` times a
    per-iteration weight in ``g``) -> the exact sum over the iterations."""
    with_g = Poly({m: c for m, c in delta.terms.items() if any(_has_atom(Poly.atom(x), g) for x, _ in m)})
    if with_g.is_zero():
        return delta
    rest = delta - with_g
    return rest + p_div(p_itersum(with_g, g.name, start, factor, trips), trips)


# ----------------------------------------------------------------------------------------------
# the walker
# ----------------------------------------------------------------------------------------------

class _Walker:
    def __init__(self, filename: str, params: dict[str, str]) -> None:
        self.filename = filename
        self.argsym = params                 # kernel argument name -> expression symbol
        self.vars: dict[int, Val] = {}
        self.w_item: Poly = ONE
        self.w_warp: Poly = ONE
        self.mute = 0
        self.ops: dict[str, Poly] = {}
        self.ops_warp: dict[str, Poly] = {}
        self.accesses: list[Access] = []
        self.loops: list[LoopInfo] = []
        self.branches: list[BranchInfo] = []
        self.notes: list[str] = []
        self.helpers: list[str] = []
        self.frames: list[_Frame] = []
        self.loop_stack: list[_LoopCtx] = []
        self.dims = 0
        self.local_bytes = 0
        self.private_bytes = 0
        self.early_returns = 0
        self._serial = 0
        self._seen_local: set[int] = set()
        self.geo_params: dict[int, tuple[Poly, Fraction]] = {}   # loop id -> (start, factor)
        self.acc_polys: list[tuple[Poly, Poly]] = []              # count polys of self.accesses

    # --- bookkeeping ----------------------------------------------------------------------------
    def serial(self) -> int:
        self._serial += 1
        return self._serial

    def note(self, msg: str) -> None:
        if not self.mute and msg not in self.notes:
            self.notes.append(msg)

    def op(self, cls: str, n: int | Fraction = 1) -> None:
        if self.mute or not n:
            return
        self.ops[cls] = self.ops.get(cls, ZERO) + self.w_item * n
        self.ops_warp[cls] = self.ops_warp.get(cls, ZERO) + self.w_warp * n

    def branch(self, line: int, kind: str, deps: frozenset[str]) -> None:
        if self.mute:
            return
        cat = "data" if DATA in deps else "divergent" if WI in deps else "uniform"
        self.branches.append(BranchInfo(line, kind, cat))

    def scaled(self, item: Poly, warp: Poly) -> _Scale:
        return _Scale(self, item, warp)

    # --- statements -------------------------------------------------------------------------------
    def walk_body(self, c: ci.Cursor) -> None:
        self.walk_stmt(c, top=True)

    def walk_stmts(self, stmts: list[ci.Cursor], top: bool = False) -> None:
        """Walk a statement list; an early return scales the statements after it."""
        saved = (self.w_item, self.w_warp)
        for i, s in enumerate(stmts):
            last = top and i == len(stmts) - 1
            cont = self.walk_stmt(s, top_last=last)
            if cont is not None:
                self.w_item = self.w_item * cont[0]
                self.w_warp = self.w_warp * cont[1]
        self.w_item, self.w_warp = saved

    def walk_stmt(self, c: ci.Cursor, top: bool = False, top_last: bool = False) -> tuple[Poly, Poly] | None:
        k = c.kind
        if k == K.COMPOUND_STMT:
            self.walk_stmts(list(c.get_children()), top=top)
            return None
        if k == K.DECL_STMT:
            for d in c.get_children():
                if d.kind == K.VAR_DECL:
                    self.decl(d)
            return None
        if k == K.IF_STMT:
            return self.if_stmt(c)
        if k in (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT):
            self.loop(c)
            return None
        if k == K.RETURN_STMT:
            ch = list(c.get_children())
            v = self.ev(ch[0]) if ch else UNKNOWN
            fr = self.frames[-1]
            if fr.is_kernel:
                if not top_last and not self.mute:
                    self.early_returns += 1
            else:
                fr.returns.append(v)
            return None
        if k == K.BREAK_STMT:
            if self.loop_stack:
                self.loop_stack[-1].has_break = True
            return None
        if k in (K.CONTINUE_STMT, K.NULL_STMT):
            return None
        if k == K.SWITCH_STMT:
            self.switch(c)
            return None
        if k in (K.CASE_STMT, K.DEFAULT_STMT, K.LABEL_STMT):
            ch = list(c.get_children())
            if ch:
                self.walk_stmt(ch[-1])
            return None
        if k == K.GOTO_STMT:
            self.note("goto is ignored")
            return None
        if k.is_statement() and not k.is_expression():
            for ch in c.get_children():
                self.walk_stmt(ch)
            return None
        self.ev(c)
        return None

    def decl(self, d: ci.Cursor) -> None:
        t = d.type
        canon = t.get_canonical()
        key = d.hash
        if canon.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY, TK.VARIABLEARRAY):
            size = _type_bytes(t)
            space = "local" if "__local" in t.spelling else "constant" if "__constant" in t.spelling else "private"
            if key not in self._seen_local and not self.mute:
                self._seen_local.add(key)
                if space == "local":
                    self.local_bytes += size
                elif space == "private":
                    self.private_bytes += size
            leaf = canon
            while leaf.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY, TK.VARIABLEARRAY):
                leaf = leaf.get_array_element_type().get_canonical()
            self.vars[key] = Val(None, frozenset(), Ptr(d.spelling, space, ZERO, max(1, _type_bytes(leaf))))
            for ch in d.get_children():
                if ch.kind == K.INIT_LIST_EXPR:
                    self.ev(ch)
            return
        init = [ch for ch in d.get_children() if ch.kind.is_expression()]
        if init:
            v = self.ev(init[-1])
            self.assign_var(key, v, t, init[-1])
        else:
            self.vars[key] = self.var_val(d.spelling, frozenset())

    def var_val(self, name: str, deps: frozenset[str], deriv_: tuple[Poly | None, ...] | None = None) -> Val:
        """A fresh unknown value (e.g. a variable declared without initializer)."""
        n = self.serial()
        if deriv_ is None and WI not in deps:
            deriv_ = (ZERO, ZERO, ZERO)
        a = Atom(f"v:{name}#{n}", "var", f"{name}'{n}", deps=deps | {VAR}, deriv=deriv_)
        return Val(Poly.atom(a), deps | {VAR})

    def assign_var(self, key: int, v: Val, t: ci.Type | None, src: ci.Cursor | None = None) -> None:
        if v.ptr is not None and t is not None and t.get_canonical().kind == TK.POINTER:
            v = Val(v.poly, v.deps, self.retype_ptr(v.ptr, t))
        self.vars[key] = v

    # --- if / switch ------------------------------------------------------------------------------
    def if_stmt(self, c: ci.Cursor) -> tuple[Poly, Poly] | None:
        ch = [x for x in c.get_children()]
        cond, then = ch[0], ch[1]
        els = ch[2] if len(ch) > 2 else None
        cv = self.ev(cond)
        self.op("branch")
        self.branch(c.location.line, "if", cv.deps)
        fr = self.fraction(cv, has_else=els is not None)
        before = dict(self.vars)
        with self.scaled(fr.it, fr.wt):
            self.walk_stmt(then)
        after_then = self.vars
        self.vars = dict(before)
        if els is not None:
            with self.scaled(fr.ie, fr.we):
                self.walk_stmt(els)
        self.merge_vars(after_then, self.vars, cv.deps)
        if els is None and _terminates(then) and fr.known:
            return fr.ie, fr.we
        return None

    def merge_vars(self, a: dict[int, Val], b: dict[int, Val], cond_deps: frozenset[str]) -> None:
        out: dict[int, Val] = {}
        for key in set(a) | set(b):
            va, vb = a.get(key), b.get(key)
            if va is None or vb is None:
                out[key] = va or vb  # type: ignore[assignment]
                continue
            if va is vb or _same(va, vb):
                out[key] = va
                continue
            out[key] = self.phi(va, vb, cond_deps)
        self.vars = out

    def phi(self, va: Val, vb: Val, cond_deps: frozenset[str]) -> Val:
        deps = (va.deps | vb.deps | cond_deps) - {VAR}
        ptr = va.ptr if (va.ptr and vb.ptr and va.ptr.base == vb.ptr.base) else (va.ptr or vb.ptr)
        if ptr is not None and va.ptr and vb.ptr and va.ptr.offset != vb.ptr.offset:
            ptr = Ptr(ptr.base, ptr.space, None, ptr.leaf_bytes, deps)
        dv: tuple[Poly | None, ...] | None = None
        if va.poly is not None and vb.poly is not None:
            ds = []
            for d in range(3):
                da, db = deriv(va.poly, d), deriv(vb.poly, d)
                ds.append(da if (da is not None and db is not None and da == db) else None)
            dv = tuple(ds)
        v = self.var_val("phi", deps, dv if WI in deps else None)
        return Val(v.poly, v.deps, ptr)

    def switch(self, c: ci.Cursor) -> None:
        ch = list(c.get_children())
        cond, body = ch[0], ch[-1]
        cv = self.ev(cond)
        self.op("branch")
        self.branch(c.location.line, "switch", cv.deps)
        n = sum(1 for x in body.walk_preorder() if x.kind in (K.CASE_STMT, K.DEFAULT_STMT))
        n = max(1, n)
        f = Poly.const(Fraction(1, n))
        fw = ONE if (WI in cv.deps or DATA in cv.deps) else f
        before = dict(self.vars)
        with self.scaled(f, fw):
            self.walk_stmt(body)
        self.merge_vars(before, self.vars, cv.deps)

    # --- branch fractions ---------------------------------------------------------------------
    def fraction(self, cv: Val, has_else: bool) -> Frac:
        f = self._frac(cv.poly)
        if f is not None:
            return f
        p = HALF if has_else else ONE
        if WI in cv.deps or DATA in cv.deps:
            return Frac(p, p, ONE, ONE, known=False)
        return Frac(p, p, p, p, known=False)

    def _frac(self, p: Poly | None) -> Frac | None:
        if p is None or len(p.terms) != 1:
            return None
        ((mono, coef),) = p.terms.items()
        if coef != 1 or len(mono) != 1 or mono[0][1] != 1:
            return None
        a = mono[0][0]
        if a.kind != "fn":
            return None
        if a.fn == "not":
            f = self._frac(a.args[0])
            return f.swap() if f else None
        if a.fn in ("and", "or"):
            f1, f2 = self._frac(a.args[0]), self._frac(a.args[1])
            if f1 is None and f2 is None:
                return None
            if a.fn == "and":
                f1 = f1 or Frac(ONE, ZERO, ONE, ZERO)
                f2 = f2 or Frac(ONE, ZERO, ONE, ZERO)
                it = f1.it * f2.it
                wt = f1.wt * f2.wt
                return Frac(it, ONE - it, wt, p_min(ONE, f1.we + f2.we))
            f1 = f1 or Frac(ZERO, ONE, ZERO, ONE)
            f2 = f2 or Frac(ZERO, ONE, ZERO, ONE)
            ie = f1.ie * f2.ie
            we = f1.we * f2.we
            return Frac(ONE - ie, ie, p_min(ONE, f1.wt + f2.wt), we)
        if a.fn == "cmp":
            return self._cmp_frac(a.name[3:], a.args[0], a.args[1])
        return None

    def _cmp_frac(self, op: str, lhs: Poly, rhs: Poly) -> Frac | None:
        d = lhs - rhs
        for x in sorted(d.atoms(), key=_range_preference):
            rng, lane = _range_of(x)
            if rng is None:
                continue
            coef = d.coefficient(x)
            if coef is None or coef.is_zero() or coef.deps & {WI, DATA, VAR}:
                continue
            u = d - coef * Poly.atom(x)
            ua = _geo_printable(average(u, keep_geo=True))
            n = _geo_printable(average(rng, keep_geo=True))
            ca = _geo_printable(average(coef, keep_geo=True))
            if ua is None or n is None or ca is None:
                continue
            # a symbolic coefficient (2*s in "2*s*lid + s < n") is taken as positive
            a = coef.const_value() if coef.is_const() else Fraction(1)
            t = -ua * (1 / a) if coef.is_const() else p_div(-ua, ca)
            o = op
            if a < 0:
                o = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[op]
            # X takes the integers 0..n-1: P(X < t) = ceil(t)/n, P(X <= t) = (floor(t) + 1)/n
            if o == "<":
                it = p_clamp01(p_div(p_unary("ceil", t), n))
            elif o == "<=":
                it = p_clamp01(p_div(p_unary("floor", t) + 1, n))
            elif o == ">":
                it = ONE - p_clamp01(p_div(p_unary("floor", t) + 1, n))
            elif o == ">=":
                it = ONE - p_clamp01(p_div(p_unary("ceil", t), n))
            elif o in ("==", "!="):
                it = p_min(ONE, p_div(ONE, n))
                wt = p_min(ONE, p_div(WARP, n)) if lane else it
                we = ONE if lane else ONE - it
                f = Frac(it, ONE - it, wt, we)
                return f if o == "==" else f.swap()
            else:
                return None
            return Frac(it, ONE - it, it, ONE - it)
        return None

    # --- loops ----------------------------------------------------------------------------------
    def loop(self, c: ci.Cursor) -> None:
        kind = {K.FOR_STMT: "for", K.WHILE_STMT: "while", K.DO_STMT: "do"}[c.kind]
        ch = list(c.get_children())
        init = cond = inc = None
        if kind == "for":
            init, cond, inc, body = _for_parts(c, ch)
        elif kind == "while":
            cond, body = ch[0], ch[-1]
        else:
            body, cond = ch[0], ch[-1]
        line = c.location.line
        if init is not None:
            self.walk_stmt(init)
        parts = [x for x in (cond, inc, body) if x is not None]
        assigned = _assigned(parts)
        declared = {x.hash for p in parts for x in p.walk_preorder() if x.kind == K.VAR_DECL}
        carried = {k: v for k, v in assigned.items() if k not in declared}
        lid = self.serial()
        entry_vars = dict(self.vars)

        # induction candidates: i++ / i += C / i *= F ... in the increment or top-level body statements
        cands: dict[int, tuple[str, str, ci.Cursor | None, str]] = {}
        inc_stmts: list[ci.Cursor] = []
        if inc is not None:
            inc_stmts += _comma_split(inc)
        top_body = list(body.get_children()) if body.kind == K.COMPOUND_STMT else [body]
        for s in inc_stmts + top_body:
            r = _step_of(s)
            if r is not None and r[0] in carried and len(carried[r[0]]) == 1:
                key, name, how, step_c = r
                cands[key] = (name, how, step_c, "inc" if s in inc_stmts else "body")

        # loop-variant values of the carried variables (syntactic dependencies, fixed point)
        dep_map = {k: (self.vars[k].deps if k in self.vars else frozenset()) for k in carried}
        for _ in range(3):
            for k, sites in carried.items():
                d = set(dep_map[k]) | {ITER}
                for rhs in sites:
                    if rhs is not None:
                        d |= _syntactic_deps(rhs, self.vars, dep_map)
                dep_map[k] = frozenset(d)
        loop_atoms: set[str] = set()
        for k in carried:
            name = next((x.spelling for x in _iter_refs(parts) if x.referenced.hash == k), "v")
            v = self.var_val(name, dep_map[k] - {VAR} | {ITER})
            old = self.vars.get(k)
            if old is not None and old.ptr is not None:
                v = Val(v.poly, v.deps, Ptr(old.ptr.base, old.ptr.space, None, old.ptr.leaf_bytes, v.deps))
            self.vars[k] = v
            loop_atoms |= {a.key for a in v.poly.atoms()} if v.poly is not None else set()

        # trip count from the condition
        trip, trip_kind, var_name, ind_key, early, ind_val = self.trip_count(
            cond, cands, entry_vars, loop_atoms, kind, lid)
        if trip_kind != "affine" and trip_kind != "geometric":
            trip = AVG_TRIP
        if _printable(trip) is None:
            trip, trip_kind = AVG_TRIP, "unknown"
        if kind == "do":
            trip = p_max(ONE, trip)
        it_atom = Atom(f"i:{lid}", "iter", f"it{lid}", deps=frozenset({ITER}),
                       avg=(trip - 1) * Fraction(1, 2), rng=trip, deriv=(ZERO, ZERO, ZERO))
        it = Poly.atom(it_atom)
        # induction variables: A + C*it
        post: dict[int, Callable[[Poly], Val]] = {}
        for key, (_name, how, step_c, _where) in cands.items():
            start = entry_vars.get(key)
            if start is None:
                continue
            sptr = start.ptr
            if start.poly is None and (sptr is None or sptr.offset is None):
                continue
            if key == ind_key and ind_val is not None:
                self.vars[key] = ind_val(it)
                if trip_kind == "affine":
                    post[key] = ind_val
                continue
            if how in ("+", "-") and step_c is not None:
                with self.muted():
                    sv = self.ev(step_c)
                if sv.poly is None or any(a.key in loop_atoms for a in sv.poly.all_atoms()):
                    continue
                step = sv.poly if how == "+" else -sv.poly
            elif how in ("++", "--"):
                step = ONE if how == "++" else -ONE
            else:
                continue
            if start.poly is None and sptr is not None and sptr.offset is not None:
                # a pointer walking through a buffer: p += step
                def advance(t: Poly, p: Ptr = sptr, step: Poly = step, deps: frozenset[str] = start.deps) -> Val:
                    off = p.offset + step * t  # type: ignore[operator]
                    pdeps = p.deps | step.deps | {ITER}
                    return Val(None, deps | {ITER}, Ptr(p.base, p.space, off, p.leaf_bytes, pdeps))
            else:
                sp = start.poly

                def advance(t: Poly, sp: Poly = sp, step: Poly = step,  # type: ignore[misc]
                            deps: frozenset[str] = start.deps) -> Val:
                    return Val.of(sp + step * t, deps | {ITER})

            self.vars[key] = advance(it)
            if trip_kind == "affine":
                post[key] = advance

        # condition deps (for divergence) with the loop-variant values
        with self.muted():
            cv = self.ev(cond) if cond is not None else Val(ONE)
        divergent = WI in (cv.deps - {ITER})
        data_dep = trip_kind == "data_dependent"
        self.branch(line, "loop", cv.deps)
        ctx = _LoopCtx()
        self.loop_stack.append(ctx)
        depth = len(self.loop_stack)
        snap = (dict(self.ops), dict(self.ops_warp), len(self.acc_polys))
        n_checks = trip if kind == "do" else trip + 1
        if cond is not None:
            with self.scaled(n_checks, n_checks):
                self.ev(cond)
                self.op("branch")
        else:
            with self.scaled(n_checks, n_checks):
                self.op("branch")
        with self.scaled(trip, trip):
            self.walk_stmt(body)
            if inc is not None:
                self.ev(inc)
        self.loop_stack.pop()
        if trip_kind == "geometric" and lid in self.geo_params and ind_val is not None:
            self.integrate(snap, ind_val(it).poly, trip, *self.geo_params[lid])
        # after the loop: induction variables hold start + step * trip, other carried variables
        # unknown (iteration-independent) values
        for k in carried:
            if k in post and not ctx.has_break:
                pv = post[k](trip)
                if pv.ptr is not None:
                    self.vars[k] = Val(None, pv.deps - {ITER}, Ptr(pv.ptr.base, pv.ptr.space, pv.ptr.offset,
                                                                   pv.ptr.leaf_bytes, pv.ptr.deps - {ITER}))
                else:
                    self.vars[k] = Val.of(pv.poly, pv.deps - {ITER})
                continue
            v = self.vars.get(k)
            deps = (v.deps if v is not None else frozenset()) - {ITER}
            nv = self.var_val("post", deps - {VAR})
            if v is not None and v.ptr is not None:
                nv = Val(nv.poly, nv.deps, Ptr(v.ptr.base, v.ptr.space, None, v.ptr.leaf_bytes, deps))
            self.vars[k] = nv
        if not self.mute:
            self.loops.append(LoopInfo(
                line=line, kind=kind, var=var_name, trip=trip.to_str(), trip_kind=trip_kind, depth=depth,
                data_dependent=data_dep, divergent=divergent, has_break=ctx.has_break, early_exit=early))

    def integrate(self, snap: tuple[dict[str, Poly], dict[str, Poly], int], gp: Poly | None, trip: Poly,
                  start: Poly, factor: Fraction) -> None:
        """Sum the counts added in a geometric loop exactly over its iterations."""
        if gp is None or self.mute or len(gp.terms) != 1:
            return
        g = next(iter(gp.atoms()))
        if g.kind != "geo":
            return
        ops0, warp0, n_acc = snap
        for cur, before in ((self.ops, ops0), (self.ops_warp, warp0)):
            for k, v in list(cur.items()):
                b = before.get(k, ZERO)
                cur[k] = b + integrate_geo(v - b, g, start, factor, trip)
        for i in range(n_acc, len(self.acc_polys)):
            ci_, cw = self.acc_polys[i]
            self.acc_polys[i] = (integrate_geo(ci_, g, start, factor, trip),
                                 integrate_geo(cw, g, start, factor, trip))

    def trip_count(self, cond: ci.Cursor | None, cands: dict, entry: dict[int, Val], loop_atoms: set[str],
                   kind: str, lid: int) -> tuple[Poly, str, str | None, int | None, bool,
                                                 Callable[[Poly], Val] | None]:
        """``(trip, kind, var, var key, early_exit, value-of-var(it))`` from the loop condition.

        Every conjunct of the condition that is linear in an induction variable bounds the trip
        count (the minimum is taken); other conjuncts make the loop ``early_exit``.
        """
        if cond is None:
            return AVG_TRIP, "unknown", None, None, False, None
        comps: list[ci.Cursor] = []
        _conjuncts(cond, comps)
        solved = [self.solve_bound(x, cands) for x in comps]
        keys = [x[1] for x in solved if x is not None]
        if not keys:
            with self.muted():
                cv = self.ev(cond)
            k = "data_dependent" if DATA in cv.deps else "unknown"
            return AVG_TRIP, k, None, None, False, None
        key = keys[0]
        name = cands[key][0]
        early = False
        trips: list[Poly] = []
        tkind = ""
        value: Callable[[Poly], Val] | None = None
        fallback = "unknown"
        for x in solved:
            if x is None or x[1] != key:
                early = True
                continue
            op, _k, bound, bdeps = x
            t, tk, val = self.trip_one(op, key, bound, bdeps, cands, entry, loop_atoms, lid)
            if tk in ("affine", "geometric"):
                trips.append(t)
                tkind = tkind or tk
                value = value or val
            else:
                early = True
                if tk == "data_dependent":
                    fallback = tk
        if not trips:
            return AVG_TRIP, fallback, name, None, False, None
        trip = trips[0] if len(trips) == 1 else p_min(*trips)
        return trip, tkind, name, key, early, value

    def solve_bound(self, c: ci.Cursor, cands: dict) -> tuple[str, int, Poly | None, frozenset[str]] | None:
        """``(op, var key, B, deps)`` for a comparison rewritten as ``var op B`` (linear in var)."""
        if c.kind != K.BINARY_OPERATOR:
            return None
        op = _cx.binary_op(c)
        if op not in ("<", "<=", ">", ">=", "!="):
            return None
        keys = [x.referenced.hash for x in c.walk_preorder()
                if x.kind == K.DECL_REF_EXPR and x.referenced is not None and x.referenced.hash in cands]
        if not keys:
            return None
        key = keys[0]
        probe = Atom("s:__probe__", "sym", "__probe__")
        lhs, rhs = list(c.get_children())
        with self.muted():
            self.vars[key] = Val(Poly.atom(probe))
            lv, rv = self.ev(lhs), self.ev(rhs)
        deps = (lv.deps | rv.deps)
        if lv.poly is None or rv.poly is None:
            return op, key, None, deps
        d = lv.poly - rv.poly
        co = d.coefficient(probe)
        if co is None or not co.is_const() or co.const_value() == 0:
            return op, key, None, deps
        rest = d - co * Poly.atom(probe)
        if any(a == probe for a in rest.all_atoms()):
            return op, key, None, deps
        cval = co.const_value()
        bound = rest * (-1 / cval)
        if cval < 0:
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "!=": "!="}[op]
        return op, key, bound, bound.deps

    def trip_one(self, op: str, key: int, bound: Poly | None, bdeps: frozenset[str], cands: dict,
                 entry: dict[int, Val], loop_atoms: set[str], lid: int
                 ) -> tuple[Poly, str, Callable[[Poly], Val] | None]:
        """Trip count of ``var op bound`` for the induction variable ``key``."""
        name, how, step_c, _where = cands[key]
        start = entry.get(key)
        with self.muted():
            sv = self.ev(step_c) if step_c is not None else Val(ONE)
        if start is None or start.poly is None or bound is None or sv.poly is None:
            deps = bdeps | (start.deps if start else frozenset())
            return AVG_TRIP, "data_dependent" if DATA in deps else "unknown", None
        A, B, C = start.poly, bound, sv.poly
        if any(a.key in loop_atoms for p in (B, C) for a in p.all_atoms()):
            return AVG_TRIP, "unknown", None
        for p in (A, B, C):
            if DATA in p.deps or VAR in p.deps:
                k = "data_dependent" if DATA in (A.deps | B.deps | C.deps) else "unknown"
                return AVG_TRIP, k, None
        Aa, Ba, Ca = average(A), average(B), average(C)
        if Aa is None or Ba is None or Ca is None:
            return AVG_TRIP, "unknown", None
        averaged = bool((A.deps | B.deps | C.deps) & {WI, ITER, GRP})
        if how in ("++", "--", "+", "-"):
            if how in ("++", "--"):
                signed = ONE if how == "++" else -ONE
            else:
                signed = C if how == "+" else -C
            sa = average(signed)
            if sa is None:
                return AVG_TRIP, "unknown", None
            pos = sa.const_value() > 0 if sa.is_const() else how in ("++", "+")
            mag = sa if pos else -sa
            if pos and op in ("<", "<=", "!="):
                diff = Ba - Aa + (1 if op == "<=" else 0)
            elif not pos and op in (">", ">=", "!="):
                diff = Aa - Ba + (1 if op == ">=" else 0)
            else:
                return AVG_TRIP, "unknown", None
            if mag.is_const() and mag.const_value() == 1:
                trip = p_max(ZERO, diff)
            elif averaged:
                trip = p_max(ZERO, p_div(diff, mag) + HALF - p_div(HALF, mag))
            else:
                trip = p_max(ZERO, p_ceil_div(diff, mag))

            def value(it: Poly, A: Poly = A, signed: Poly = signed, deps: frozenset[str] = start.deps) -> Val:
                return Val.of(A + signed * it, deps | {ITER})

            return trip, "affine", value
        # geometric
        f = _geo_factor(how, C)
        if f is None:
            return AVG_TRIP, "unknown", None
        F, grows = f
        k = Fraction(F).limit_denominator(1 << 20)
        logk = Poly.const(Fraction(_log2(F)).limit_denominator(1 << 20))
        if grows and op in ("<", "<=", "!="):
            ratio = p_unary("log2", p_div(p_max(ONE, Ba), p_max(ONE, Aa)))
            if op == "<=":
                trip = p_max(ZERO, p_unary("floor", p_div(ratio, logk)) + 1)
            else:
                trip = p_max(ZERO, p_unary("ceil", p_div(ratio, logk)))
            avgv = p_div(Ba - Aa, Poly.const(k - 1) * p_max(ONE, trip))
        elif not grows and op in (">", ">=", "!="):
            Bx = Ba - 1 if op == ">=" else Ba
            if op == "!=":
                Bx = Ba
            ratio = p_unary("log2", p_div(p_max(ONE, Aa), Bx + 1))
            trip = p_min(ONE, p_max(ZERO, Aa - Bx)) * (p_unary("floor", p_div(ratio, logk)) + 1)
            avgv = p_div(Aa * k, Poly.const(k - 1) * p_max(ONE, trip))
        else:
            return AVG_TRIP, "unknown", None
        deps_a = start.deps
        self.geo_params[lid] = (Aa, k if grows else 1 / k)

        def gvalue(it: Poly, avgv: Poly = avgv, deps: frozenset[str] = deps_a) -> Val:
            dv = (ZERO, ZERO, ZERO) if WI not in deps else None
            a = Atom(f"g:{lid}", "geo", f"_g{lid}_", deps=frozenset(deps | {ITER}), avg=avgv, deriv=dv)
            return Val(Poly.atom(a), frozenset(deps | {ITER}))

        return trip, "geometric", gvalue

    # --- expressions ----------------------------------------------------------------------------
    def muted(self) -> _Mute:
        return _Mute(self)

    def ev(self, c: ci.Cursor, skip_mul: bool = False) -> Val:
        k = c.kind
        if k in _EXPR_KINDS_PASSTHRU:
            ch = list(c.get_children())
            return self.ev(ch[0]) if ch else UNKNOWN
        if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL, K.CXX_BOOL_LITERAL_EXPR):
            v = _cx.evaluate(c)
            return Val(Poly.const(v)) if v is not None else UNKNOWN
        if k == K.DECL_REF_EXPR:
            return self.ref(c)
        if k == K.UNEXPOSED_EXPR:
            return self.unexposed(c)
        if k == K.CSTYLE_CAST_EXPR:
            return self.cast(c)
        if k == K.BINARY_OPERATOR:
            return self.binop(c, skip_mul)
        if k == K.COMPOUND_ASSIGNMENT_OPERATOR:
            return self.compound(c)
        if k == K.UNARY_OPERATOR:
            return self.unop(c)
        if k == K.ARRAY_SUBSCRIPT_EXPR or k == K.MEMBER_REF_EXPR:
            return self.load_lvalue(c)
        if k == K.CALL_EXPR:
            return self.call(c)
        if k == K.CONDITIONAL_OPERATOR:
            return self.ternary(c)
        if k in (K.INIT_LIST_EXPR, K.COMPOUND_LITERAL_EXPR):
            deps: set[str] = set()
            for ch in c.get_children():
                deps |= self.ev(ch).deps
            return Val(None, frozenset(deps))
        if k in (K.CXX_UNARY_EXPR,):
            v = _cx.evaluate(c)
            return Val(Poly.const(v)) if v is not None else UNKNOWN
        if k == K.STRING_LITERAL:
            return UNKNOWN
        if k.is_statement() and not k.is_expression():
            self.walk_stmt(c)
            return UNKNOWN
        # anything else: constant if clang can fold it, else evaluate the children
        v = _cx.evaluate(c)
        if v is not None:
            return Val(Poly.const(v))
        deps = set()
        for ch in c.get_children():
            deps |= self.ev(ch).deps
        return Val(None, frozenset(deps))

    def ref(self, c: ci.Cursor) -> Val:
        r = c.referenced
        if r is None:
            return UNKNOWN
        if r.kind == K.ENUM_CONSTANT_DECL:
            return Val(Poly.const(r.enum_value))
        key = r.hash
        v = self.vars.get(key)
        if v is not None:
            return v
        if r.kind == K.VAR_DECL:
            # file-scope variables: __constant arrays and constants
            t = r.type
            canon = t.get_canonical()
            if canon.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                leaf = canon
                while leaf.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                    leaf = leaf.get_array_element_type().get_canonical()
                v = Val(None, frozenset(), Ptr(r.spelling, _space_of(t) if "__constant" in t.spelling else "constant",
                                               ZERO, max(1, _type_bytes(leaf))))
            else:
                cv = _cx.evaluate(r)
                v = Val(Poly.const(cv)) if cv is not None else self.var_val(r.spelling, frozenset())
            self.vars[key] = v
            return v
        if r.kind == K.FUNCTION_DECL:
            return UNKNOWN
        v = self.var_val(r.spelling, frozenset())
        self.vars[key] = v
        return v

    def unexposed(self, c: ci.Cursor) -> Val:
        ch = list(c.get_children())
        if len(ch) != 1:
            v = _cx.evaluate(c) if not ch else None
            if v is not None:
                return Val(Poly.const(v))
            deps: set[str] = set()
            for x in ch:
                deps |= self.ev(x).deps
            return Val(None, frozenset(deps))
        inner = ch[0]
        tc_out = type_class(c.type)
        tc_in = type_class(inner.type)
        # vector component (swizzle) of a memory element: a narrower access
        if tc_in[0] in ("fp32", "fp64", "int") and tc_in[1] > 1 and tc_out[1] < tc_in[1] and tc_out[0] == tc_in[0]:
            base = _strip(inner)
            if base.kind in (K.ARRAY_SUBSCRIPT_EXPR, K.MEMBER_REF_EXPR) or (
                    base.kind == K.UNARY_OPERATOR and _cx.unary_op(base) == "*"):
                m = self.lvalue_mem(base)
                if m is not None:
                    m.elem_bytes = max(1, _type_bytes(c.type))
                    return self.record_load(m, c)
            v = self.ev(inner)
            return Val(None, v.deps)
        v = self.ev(inner)
        self.count_conversion(tc_in, tc_out, v)
        if v.ptr is not None and c.type.get_canonical().kind == TK.POINTER:
            return Val(v.poly, v.deps, self.retype_ptr(v.ptr, c.type))
        return v

    def count_conversion(self, tc_in: tuple[str, int], tc_out: tuple[str, int], v: Val) -> None:
        a, b = tc_in[0], tc_out[0]
        if a == b or a not in ("fp32", "fp64", "int") or b not in ("fp32", "fp64", "int"):
            return
        if v.poly is not None and v.poly.is_const():
            return
        self.op("conv", max(tc_in[1], tc_out[1]))

    def retype_ptr(self, p: Ptr, t: ci.Type) -> Ptr:
        pointee = t.get_canonical().get_pointee()
        nb = _type_bytes(pointee)
        if nb <= 0 or nb == p.leaf_bytes:
            return p
        off = None if p.offset is None else p.offset * Fraction(p.leaf_bytes, nb)
        return Ptr(p.base, p.space, off, nb, p.deps)

    def cast(self, c: ci.Cursor) -> Val:
        ch = [x for x in c.get_children() if x.kind != K.TYPE_REF]
        if not ch:
            return UNKNOWN
        if len(ch) > 1 or ch[-1].kind in (K.INIT_LIST_EXPR,) or (
                ch[-1].kind == K.PAREN_EXPR and len(list(ch[-1].get_children())) > 1):
            deps: set[str] = set()
            for x in ch:
                deps |= self.ev(x).deps
            return Val(None, frozenset(deps))
        inner = ch[-1]
        v = self.ev(inner)
        self.count_conversion(type_class(inner.type), type_class(c.type), v)
        if v.ptr is not None and c.type.get_canonical().kind == TK.POINTER:
            return Val(v.poly, v.deps, self.retype_ptr(v.ptr, c.type))
        tc = type_class(c.type)
        if tc[1] > 1 and type_class(inner.type)[1] == 1:
            return Val(None, v.deps)  # scalar broadcast to a vector
        return v

    def binop(self, c: ci.Cursor, skip_count: bool = False) -> Val:
        op = _cx.binary_op(c)
        ch = list(c.get_children())
        if len(ch) != 2:
            return UNKNOWN
        lhs_c, rhs_c = ch
        if op == "=":
            rv = self.ev(rhs_c)
            self.store_to(lhs_c, rv, c)
            return rv
        if op == ",":
            self.ev(lhs_c)
            return self.ev(rhs_c)
        if op in ("&&", "||"):
            lv = self.ev(lhs_c)
            rv = self.ev(rhs_c)
            self.op("int_bit")
            return Val.of(opaque("and" if op == "&&" else "or", [_p(lv), _p(rv)]), lv.deps | rv.deps)
        tcls, width = type_class(c.type)
        if op in ("<", ">", "<=", ">=", "==", "!="):
            lv, rv = self.ev(lhs_c), self.ev(rhs_c)
            w = type_class(lhs_c.type)[1]
            if not skip_count:
                self.op("cmp", w)
            return Val.of(opaque("cmp", [_p(lv), _p(rv)], tag=op), lv.deps | rv.deps)
        # a*b +/- c contracted to fma
        fused = False
        if op in ("+", "-") and tcls in ("fp32", "fp64"):
            for side in (lhs_c, rhs_c):
                s = _strip(side)
                if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "*" and type_class(s.type)[0] == tcls:
                    fused = True
                    lv = self.ev(lhs_c, skip_mul=True) if side is lhs_c else self.ev(lhs_c)
                    rv = self.ev(rhs_c, skip_mul=True) if side is rhs_c else self.ev(rhs_c)
                    break
        if not fused:
            lv, rv = self.ev(lhs_c), self.ev(rhs_c)
        if not skip_count:
            if fused:
                self.op(f"{tcls}_fma", width)
            else:
                self.count_arith(op, tcls, width)
        return self.arith(op, lv, rv, tcls, c)

    def count_arith(self, op: str, tcls: str, width: int) -> None:
        if tcls in ("fp32", "fp64"):
            cls = {"+": "add", "-": "add", "*": "mul", "/": "div", "%": "div"}.get(op)
            if cls:
                self.op(f"{tcls}_{cls}", width)
            return
        if tcls in ("int", "ptr", "other"):
            cls = {"+": "int_add", "-": "int_add", "*": "int_mul", "/": "int_div", "%": "int_div",
                   "<<": "int_bit", ">>": "int_bit", "&": "int_bit", "|": "int_bit", "^": "int_bit"}.get(op)
            if cls:
                self.op(cls, width)

    def arith(self, op: str, lv: Val, rv: Val, tcls: str, c: ci.Cursor) -> Val:
        deps = lv.deps | rv.deps
        # pointer arithmetic
        if lv.ptr is not None and rv.ptr is None and op in ("+", "-"):
            off = None if (lv.ptr.offset is None or rv.poly is None) else (
                lv.ptr.offset + rv.poly if op == "+" else lv.ptr.offset - rv.poly)
            return Val(None, deps, Ptr(lv.ptr.base, lv.ptr.space, off, lv.ptr.leaf_bytes, lv.ptr.deps | rv.deps))
        if rv.ptr is not None and lv.ptr is None and op == "+":
            off = None if (rv.ptr.offset is None or lv.poly is None) else rv.ptr.offset + lv.poly
            return Val(None, deps, Ptr(rv.ptr.base, rv.ptr.space, off, rv.ptr.leaf_bytes, rv.ptr.deps | lv.deps))
        a, b = lv.poly, rv.poly
        if a is None or b is None or type_class(c.type)[1] > 1:
            return Val(None, deps)
        if op == "+":
            return Val.of(a + b, deps)
        if op == "-":
            return Val.of(a - b, deps)
        if op == "*":
            return Val.of(a * b, deps)
        if op == "/":
            return Val.of(p_floordiv(a, b) if tcls == "int" else p_div(a, b), deps)
        if op == "%":
            return Val.of(p_mod(a, b), deps)
        if op == "<<" and b.is_const() and 0 <= b.const_value() < 63:
            return Val.of(a * (2 ** int(b.const_value())), deps)
        if op == ">>" and b.is_const() and 0 <= b.const_value() < 63:
            return Val.of(p_floordiv(a, Poly.const(2 ** int(b.const_value()))), deps)
        if op == "&":
            for m, o in ((b, a), (a, b)):
                if m.is_const():
                    mv = m.const_value()
                    if mv.denominator == 1 and mv >= 0 and (int(mv) + 1) & int(mv) == 0:
                        return Val.of(p_mod(o, Poly.const(int(mv) + 1)), deps)
        return Val.of(opaque("bit", [a, b], tag=op), deps)

    def compound(self, c: ci.Cursor) -> Val:
        op = _cx.binary_op(c)[:-1]
        ch = list(c.get_children())
        if len(ch) != 2:
            return UNKNOWN
        lhs_c, rhs_c = ch
        tcls, width = type_class(lhs_c.type)
        s = _strip(rhs_c)
        fused = (op in ("+", "-") and tcls in ("fp32", "fp64") and s.kind == K.BINARY_OPERATOR
                 and _cx.binary_op(s) == "*" and type_class(s.type)[0] == tcls)
        rv = self.ev(rhs_c, skip_mul=fused) if fused else self.ev(rhs_c)
        if fused:
            self.op(f"{tcls}_fma", width)
        else:
            self.count_arith(op, tcls, width)
        target = _strip(lhs_c)
        if target.kind == K.DECL_REF_EXPR and target.referenced is not None:
            old = self.ev(target)
            new = self.arith(op, old, rv, tcls, lhs_c)
            self.vars[target.referenced.hash] = new
            return new
        m = self.lvalue_mem(lhs_c)
        if m is not None:
            self.record(m, "load", c)
            self.record(m, "store", c)
            return Val(None, m.deps | rv.deps | {DATA})
        self.ev(lhs_c)
        return UNKNOWN

    def unop(self, c: ci.Cursor) -> Val:
        op = _cx.unary_op(c)
        ch = list(c.get_children())
        if not ch:
            v = _cx.evaluate(c)
            return Val(Poly.const(v)) if v is not None else UNKNOWN
        x = ch[0]
        tcls, width = type_class(c.type)
        if op in ("post++", "post--", "pre++", "pre--"):
            tc = type_class(x.type)
            self.op("fp32_add" if tc[0] == "fp32" else "fp64_add" if tc[0] == "fp64" else "int_add", tc[1])
            target = _strip(x)
            delta = 1 if "++" in op else -1
            if target.kind == K.DECL_REF_EXPR and target.referenced is not None:
                old = self.ev(target)
                if old.ptr is not None:
                    off = None if old.ptr.offset is None else old.ptr.offset + delta
                    new = Val(None, old.deps, Ptr(old.ptr.base, old.ptr.space, off, old.ptr.leaf_bytes, old.ptr.deps))
                else:
                    new = Val.of(old.poly + delta if old.poly is not None else None, old.deps)
                self.vars[target.referenced.hash] = new
                return new if op.startswith("pre") else old
            m = self.lvalue_mem(x)
            if m is not None:
                self.record(m, "load", c)
                self.record(m, "store", c)
                return Val(None, m.deps | {DATA})
            return UNKNOWN
        if op == "&":
            return self.address_of(x)
        if op == "*":
            return self.load_lvalue(c)
        v = self.ev(x)
        if op == "-":
            self.op("fp32_add" if tcls == "fp32" else "fp64_add" if tcls == "fp64" else "int_add", width)
            return Val.of(-v.poly if v.poly is not None else None, v.deps)
        if op == "+":
            return v
        if op == "~":
            self.op("int_bit", width)
            return Val.of(opaque("bit", [_p(v)], tag="~"), v.deps)
        if op == "!":
            self.op("int_bit", width)
            return Val.of(opaque("not", [_p(v)]), v.deps)
        return Val(None, v.deps)

    def address_of(self, x: ci.Cursor) -> Val:
        s = _strip(x)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            base_v, idx_v = self.subscript_parts(s)
            if base_v.ptr is not None:
                p = base_v.ptr
                off = None if (p.offset is None or idx_v.poly is None) else p.offset + idx_v.poly * _unit_scale(s, p)
                return Val(None, base_v.deps | idx_v.deps, Ptr(p.base, p.space, off, p.leaf_bytes, p.deps | idx_v.deps))
            return Val(None, base_v.deps | idx_v.deps)
        if s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*":
            return self.ev(list(s.get_children())[0])
        if s.kind == K.DECL_REF_EXPR and s.referenced is not None:
            v = self.ev(s)
            name = s.spelling
            return Val(None, v.deps, Ptr(name, "private", ZERO, max(1, _type_bytes(s.type))))
        m = self.lvalue_mem(s)
        if m is not None:
            return Val(None, m.deps, Ptr(m.base, m.space, m.index, m.unit_bytes, m.deps))
        self.ev(x)
        return UNKNOWN

    def ternary(self, c: ci.Cursor) -> Val:
        ch = list(c.get_children())
        if len(ch) != 3:
            return UNKNOWN
        cv = self.ev(ch[0])
        self.op("branch")
        self.branch(c.location.line, "?:", cv.deps)
        fr = self.fraction(cv, has_else=True)
        with self.scaled(fr.it, fr.wt):
            a = self.ev(ch[1])
        with self.scaled(fr.ie, fr.we):
            b = self.ev(ch[2])
        deps = a.deps | b.deps | cv.deps
        if a.poly is not None and b.poly is not None:
            if a.poly == b.poly:
                return a
            return Val.of(opaque("sel", [a.poly, b.poly], extra_deps=cv.deps, tag=str(self.serial())), deps)
        ptr = a.ptr or b.ptr
        return Val(None, deps, ptr)

    # --- memory ---------------------------------------------------------------------------------
    def subscript_parts(self, s: ci.Cursor) -> tuple[Val, Val]:
        ch = list(s.get_children())
        base_c, idx_c = ch[0], ch[1]
        # C allows idx[ptr]; normalize
        if type_class(base_c.type)[0] != "ptr" and type_class(idx_c.type)[0] == "ptr":
            base_c, idx_c = idx_c, base_c
        return self.ev(base_c), self.ev(idx_c)

    def lvalue_mem(self, c: ci.Cursor) -> MemRef | None:
        """A memory reference for an lvalue expression (subscript, deref, member), or None."""
        s = _strip(c)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            base_v, idx_v = self.subscript_parts(s)
            p = base_v.ptr
            if p is None:
                self.note(f"line {s.location.line}: subscript of a pointer the analysis does not follow")
                return None
            scale = _unit_scale(s, p)
            idx = None if (p.offset is None or idx_v.poly is None) else p.offset + idx_v.poly * scale
            deps = p.deps | idx_v.deps | base_v.deps
            eb = max(1, _type_bytes(s.type))
            return MemRef(p.base, p.space, idx, deps, eb, p.leaf_bytes, _text(s))
        if s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*":
            v = self.ev(list(s.get_children())[0])
            p = v.ptr
            if p is None:
                self.note(f"line {s.location.line}: dereference of a pointer the analysis does not follow")
                return None
            return MemRef(p.base, p.space, p.offset, p.deps | v.deps, max(1, _type_bytes(s.type)), p.leaf_bytes,
                          _text(s))
        if s.kind == K.MEMBER_REF_EXPR:
            ch = list(s.get_children())
            if not ch:
                return None
            base = _strip(ch[0])
            if type_class(base.type)[0] == "ptr":  # p->field
                v = self.ev(base)
                p = v.ptr
                if p is None:
                    return None
                return MemRef(p.base, p.space, p.offset, p.deps | v.deps, max(1, _type_bytes(s.type)),
                              p.leaf_bytes, _text(s))
            m = self.lvalue_mem(base)
            if m is not None:
                m.elem_bytes = max(1, _type_bytes(s.type))
                m.text = _text(s)
            return m
        return None

    def load_lvalue(self, c: ci.Cursor) -> Val:
        s = _strip(c)
        if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
            canon = s.type.get_canonical()
            if canon.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY, TK.VARIABLEARRAY):
                base_v, idx_v = self.subscript_parts(s)  # a row of a multi-dimensional array
                p = base_v.ptr
                if p is None:
                    return Val(None, base_v.deps | idx_v.deps)
                off = None if (p.offset is None or idx_v.poly is None) else p.offset + idx_v.poly * _unit_scale(s, p)
                return Val(None, base_v.deps | idx_v.deps, Ptr(p.base, p.space, off, p.leaf_bytes, p.deps | idx_v.deps))
        if s.kind == K.MEMBER_REF_EXPR:
            ch = list(s.get_children())
            base = _strip(ch[0]) if ch else None
            if base is None:
                return UNKNOWN
            if type_class(base.type)[0] != "ptr" and not _is_mem_lvalue(base):
                v = self.ev(base)
                return Val(None, v.deps)
        m = self.lvalue_mem(s)
        if m is None:
            deps: set[str] = set()
            for ch in s.get_children():
                deps |= self.ev(ch).deps
            return Val(None, frozenset(deps))
        return self.record_load(m, c)

    def record_load(self, m: MemRef, c: ci.Cursor) -> Val:
        self.record(m, "load", c)
        return self.loaded_value(m)

    def loaded_value(self, m: MemRef) -> Val:
        deps = frozenset(m.deps | {DATA}) - {VAR}
        idx = m.index.to_str() if m.index is not None else "?"
        key = f"d:{m.base}[{m.index.key() if m.index is not None else self.serial()}]"
        dv: tuple[Poly | None, ...] | None = (ZERO, ZERO, ZERO)
        if WI in deps:
            # the same address in every lane of a warp (e.g. row_ptr[gid / 32]) loads a uniform value
            dv = None
            if m.index is not None and all(_is_zero(deriv(m.index, d)) for d in range(3)):
                dv = (ZERO, ZERO, ZERO)
        a = Atom(key, "data", f"ld({m.base}[{idx}])", deps=deps, deriv=dv)
        return Val(Poly.atom(a), deps)

    def store_to(self, lhs_c: ci.Cursor, rv: Val, c: ci.Cursor) -> None:
        s = _strip(lhs_c)
        if s.kind == K.DECL_REF_EXPR and s.referenced is not None:
            self.assign_var(s.referenced.hash, rv, s.type, None)
            return
        # v.x = ... on a variable: partial update
        if s.kind in (K.UNEXPOSED_EXPR, K.MEMBER_REF_EXPR):
            base = s
            while base.kind in (K.UNEXPOSED_EXPR, K.MEMBER_REF_EXPR, K.PAREN_EXPR):
                chs = list(base.get_children())
                if len(chs) != 1:
                    break
                base = chs[0]
            if base.kind == K.DECL_REF_EXPR and base.referenced is not None and \
                    type_class(base.type)[0] != "ptr":
                old = self.vars.get(base.referenced.hash, UNKNOWN)
                self.vars[base.referenced.hash] = Val(None, old.deps | rv.deps)
                return
            if s.kind == K.UNEXPOSED_EXPR:
                chs = list(s.get_children())
                if len(chs) == 1:
                    m = self.lvalue_mem(chs[0])
                    if m is not None:
                        m.elem_bytes = max(1, _type_bytes(s.type))
                        self.record(m, "store", c)
                        return
        m = self.lvalue_mem(s)
        if m is not None:
            self.record(m, "store", c)
            return
        self.ev(lhs_c)

    def record(self, m: MemRef, kind: str, c: ci.Cursor, via: str = "") -> None:
        if self.mute:
            return
        idx = m.index
        s0 = s1 = None
        affine = True
        coeffs: dict[str, str] = {}
        if idx is not None:
            d0, d1 = deriv(idx, 0), deriv(idx, 1)
            for d in (d0, d1):
                if d is not None and WI in d.deps:
                    affine = False
            s0 = _printable(average(d0)) if d0 is not None else None
            s1 = _printable(average(d1)) if d1 is not None else None
            if d0 is None:
                s1 = None
            for a in sorted(idx.atoms()):
                if a.kind == "wi":
                    co = idx.coefficient(a)
                    coeffs[a.name] = co.to_str() if co is not None else "?"
        else:
            affine = False
        indirect = DATA in m.deps and s0 is None
        if s0 is None:
            affine = False
        self.accesses.append(Access(
            arg=m.base, space=m.space, kind=kind, elem_bytes=m.elem_bytes, unit_bytes=m.unit_bytes,
            index=m.text, count="", count_warp="",
            stride0=s0.to_str() if s0 is not None else None, stride1=s1.to_str() if s1 is not None else None,
            index_expr=idx.to_str() if idx is not None else "?", coeffs=coeffs, affine=affine,
            indirect=indirect, line=c.location.line, via=via))
        self.acc_polys.append((self.w_item, self.w_warp))

    # --- calls ----------------------------------------------------------------------------------
    def call(self, c: ci.Cursor) -> Val:
        name = c.spelling
        args = list(c.get_arguments())
        ref = c.referenced
        if ref is not None and ref.kind == K.FUNCTION_DECL:
            d = ref.get_definition()
            if d is not None and d.location.file is not None and d.location.file.name == self.filename:
                return self.inline(d, args, c)
        return self.builtin(name, args, c)

    def inline(self, d: ci.Cursor, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        name = d.spelling
        if any(f.name == name for f in self.frames):
            self.note(f"recursive call of {name} not followed")
            for a in args:
                self.ev(a)
            return UNKNOWN
        vals = [self.ev(a) for a in args]
        if not self.mute and name not in self.helpers:
            self.helpers.append(name)
        params = list(d.get_arguments())
        saved = self.vars
        self.vars = dict(saved)
        for p, v in zip(params, vals):
            self.vars[p.hash] = v
        body = next((x for x in d.get_children() if x.kind == K.COMPOUND_STMT), None)
        fr = _Frame(name)
        self.frames.append(fr)
        try:
            if body is not None:
                self.walk_stmt(body)
        finally:
            self.frames.pop()
            inner = self.vars
            # variables of the caller keep their (possibly updated through pointers) values
            self.vars = {k: inner.get(k, v) for k, v in saved.items()}
        if not fr.returns:
            return UNKNOWN
        r = fr.returns[0]
        for other in fr.returns[1:]:
            if not _same(r, other):
                r = self.phi(r, other, frozenset())
        return r

    def builtin(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        if name in _WORKITEM:
            dim = _const_arg(args)
            for a in args:
                self.ev(a)
            if dim is None or not 0 <= dim <= 2:
                return Val(None, frozenset({WI}) if name != "get_group_id" else frozenset({GRP}))
            self.dims = max(self.dims, dim + 1)
            return Val.of(Poly.atom(wi_atom(_WORKITEM[name], dim)))
        if name in _SIZES:
            dim = _const_arg(args)
            if dim is None or not 0 <= dim <= 2:
                return UNKNOWN
            return Val(Poly.symbol(f"{_SIZES[name]}{dim}", integer=True))
        if name in ("get_global_linear_id", "get_local_linear_id"):
            pre = "gid" if name == "get_global_linear_id" else "lid"
            sz = "gsize" if pre == "gid" else "lsize"
            s0, s1 = Poly.symbol(f"{sz}0", integer=True), Poly.symbol(f"{sz}1", integer=True)
            p = Poly.atom(wi_atom(pre, 0)) + Poly.atom(wi_atom(pre, 1)) * s0 + Poly.atom(wi_atom(pre, 2)) * s0 * s1
            return Val.of(p)
        if name == "get_global_offset":
            return Val(ZERO)
        if name == "get_work_dim":
            return Val(Poly.symbol("work_dim", integer=True))
        if name in _BARRIER:
            self.op("barrier")
            return UNKNOWN
        if name in _FENCE:
            self.op("fence")
            return UNKNOWN
        if name.startswith(("atomic_", "atom_")) and name not in _IGNORE and name not in _FENCE:
            return self.atomic(name, args, c)
        m = _VLOAD.match(name)
        if m and args:
            return self.vload(m, args, c, name)
        m = _VSTORE.match(name)
        if m and args:
            return self.vstore(m, args, c, name)
        if name.startswith(("read_image", "write_image")):
            vals = [self.ev(a) for a in args]
            kind = "load" if name.startswith("read") else "store"
            if not self.mute:
                img = _strip(args[0]).spelling if args else "image"
                eb = 16 if name[-1] in "fi" or name.endswith("ui") else 8
                self.accesses.append(Access(
                    arg=img, space="image", kind=kind, elem_bytes=eb, unit_bytes=eb, index=_text(c),
                    count="", count_warp="", stride0=None, stride1=None,
                    affine=False, line=c.location.line, via=name))
                self.acc_polys.append((self.w_item, self.w_warp))
            deps: set[str] = {DATA}
            for v in vals:
                deps |= v.deps
            return Val(None, frozenset(deps))
        vals = [self.ev(a) for a in args]
        deps = set()
        for v in vals:
            deps |= v.deps
        fdeps = frozenset(deps)
        if name in _IGNORE:
            return Val(None, fdeps)
        base = name
        for pre in ("native_", "half_", "fast_"):
            if base.startswith(pre):
                base = base[len(pre):]
        tcls, width = type_class(c.type)
        atc, awidth = type_class(args[0].type) if args else (tcls, width)
        fp = tcls if tcls in ("fp32", "fp64") else atc if atc in ("fp32", "fp64") else "fp32"
        if name.startswith("convert_"):
            self.op("conv", width)
            return Val(vals[0].poly if vals and width == 1 else None, fdeps)
        if name.startswith("as_"):
            return Val(None, fdeps)
        if base in _SFU:
            self.op("sfu", _SFU[base] * width)
            if base == "hypot":
                self.op(f"{fp}_fma", 2 * width)
            return Val(None, fdeps)
        if base in ("fma", "mad"):
            self.op(f"{fp}_fma", width)
            return Val(None, fdeps)
        if base == "mix":
            self.op(f"{fp}_fma", width)
            self.op(f"{fp}_add", width)
            return Val(None, fdeps)
        if base == "divide" and name.startswith(("native_", "half_")):
            self.op("sfu", width)
            self.op(f"{fp}_mul", width)
            return Val(None, fdeps)
        if base in _DIV:
            self.op(f"{fp}_div", width)
            return Val(None, fdeps)
        if base == "dot":
            self.op(f"{fp}_fma", awidth)
            return Val(None, fdeps)
        if base == "cross":
            self.op(f"{fp}_mul", 3)
            self.op(f"{fp}_fma", 3)
            return Val(None, fdeps)
        if base in ("length", "distance", "normalize"):
            if base == "distance":
                self.op(f"{fp}_add", awidth)
            self.op(f"{fp}_fma", awidth)
            self.op("sfu")
            if base == "normalize":
                self.op(f"{fp}_mul", awidth)
            return Val(None, fdeps)
        if base in ("floor", "ceil", "trunc", "round", "rint") and width == 1 and vals and vals[0].poly is not None:
            self.op(f"{tcls}_add" if tcls in ("fp32", "fp64") else "int_add")
            arg = vals[0].poly
            if base == "round":
                arg = arg + HALF
            return Val.of(p_unary("ceil" if base == "ceil" else "floor", arg), fdeps)
        if base in _ALU or base in _ALU2:
            n = _ALU2.get(base, 1) * width
            self.op(f"{tcls}_add" if tcls in ("fp32", "fp64") else "int_add", n)
            if tcls == "int" and base in ("min", "max") and len(vals) == 2 and all(v.poly is not None for v in vals):
                f = p_min if base == "min" else p_max
                return Val.of(f(vals[0].poly, vals[1].poly), fdeps)  # type: ignore[arg-type]
            if tcls == "int" and base == "clamp" and len(vals) == 3 and all(v.poly is not None for v in vals):
                return Val.of(p_min(p_max(vals[0].poly, vals[1].poly), vals[2].poly), fdeps)  # type: ignore[arg-type]
            return Val(None, fdeps)
        if base in _INT_MUL:
            self.op("int_mul", width)
            if base in ("mul24", "mad24") and all(v.poly is not None for v in vals):
                p = vals[0].poly * vals[1].poly  # type: ignore[operator]
                if base == "mad24" and len(vals) > 2:
                    p = p + vals[2].poly  # type: ignore[operator]
                return Val.of(p, fdeps)
            return Val(None, fdeps)
        if base in _INT_BIT:
            self.op("int_bit", width)
            return Val(None, fdeps)
        if base in _CMP:
            self.op("cmp", awidth)
            return Val(None, fdeps)
        if name.startswith(("async_work_group", "wait_group_events")):
            self.note(f"{name} not modelled")
            return Val(None, fdeps)
        self.note(f"builtin {name} not classified")
        return Val(None, fdeps)

    def atomic(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val:
        if not args:
            return UNKNOWN
        pv = self.ev(args[0])
        for a in args[1:]:
            self.ev(a)
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return Val(None, pv.deps | {DATA})
        pointee = args[0].type.get_canonical().get_pointee()
        eb = max(1, _type_bytes(pointee))
        m = MemRef(p.base, p.space, p.offset, p.deps | pv.deps, eb, p.leaf_bytes, _text(args[0]))
        self.record(m, "atomic", c, via=name)
        return Val(None, frozenset(m.deps | {DATA}))

    def vload(self, m: re.Match[str], args: list[ci.Cursor], c: ci.Cursor, name: str) -> Val:
        n = int(m.group(3) or 1)
        half = bool(m.group(2))
        off = self.ev(args[0])
        pv = self.ev(args[1]) if len(args) > 1 else UNKNOWN
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return Val(None, off.deps | {DATA})
        eb = (2 if half else p.leaf_bytes) * n
        idx = None if (p.offset is None or off.poly is None) else off.poly + p.offset * Fraction(p.leaf_bytes, eb)
        mr = MemRef(p.base, p.space, idx, p.deps | off.deps | pv.deps, eb, eb, _text(c))
        self.record(mr, "load", c, via=name)
        if half:
            self.op("conv", n)
        return Val(None, frozenset(mr.deps | {DATA}))

    def vstore(self, m: re.Match[str], args: list[ci.Cursor], c: ci.Cursor, name: str) -> Val:
        n = int(m.group(3) or 1)
        half = bool(m.group(2))
        self.ev(args[0])
        off = self.ev(args[1]) if len(args) > 1 else UNKNOWN
        pv = self.ev(args[2]) if len(args) > 2 else UNKNOWN
        p = pv.ptr
        if p is None:
            self.note(f"line {c.location.line}: {name} on a pointer the analysis does not follow")
            return UNKNOWN
        eb = (2 if half else p.leaf_bytes) * n
        idx = None if (p.offset is None or off.poly is None) else off.poly + p.offset * Fraction(p.leaf_bytes, eb)
        mr = MemRef(p.base, p.space, idx, p.deps | off.deps | pv.deps, eb, eb, _text(c))
        self.record(mr, "store", c, via=name)
        if half:
            self.op("conv", n)
        return UNKNOWN


class _Scale:
    """Context manager multiplying the walker's weights."""

    def __init__(self, w: _Walker, item: Poly, warp: Poly) -> None:
        self.w, self.item, self.warp = w, item, warp

    def __enter__(self) -> None:
        self.saved = (self.w.w_item, self.w.w_warp)
        self.w.w_item = self.w.w_item * self.item
        self.w.w_warp = self.w.w_warp * self.warp

    def __exit__(self, *exc: object) -> None:
        self.w.w_item, self.w.w_warp = self.saved


class _Mute:
    def __init__(self, w: _Walker) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.mute += 1
        self.saved = dict(self.w.vars)

    def __exit__(self, *exc: object) -> None:
        self.w.mute -= 1
        self.w.vars = self.saved


# ----------------------------------------------------------------------------------------------
# AST helpers
# ----------------------------------------------------------------------------------------------

_WI_CACHE: dict[tuple[str, int], Atom] = {}


def wi_atom(kind: str, dim: int) -> Atom:
    """``gid{d}`` / ``lid{d}`` / ``grp{d}`` with their mean and range."""
    a = _WI_CACHE.get((kind, dim))
    if a is None:
        size = {"gid": "gsize", "lid": "lsize", "grp": "ngroups"}[kind]
        rng = Poly.symbol(f"{size}{dim}", integer=True)
        a = Atom(f"w:{kind}{dim}", "wi", f"{kind}{dim}", dim=dim,
                 deps=frozenset({WI}) if kind != "grp" else frozenset({GRP}),
                 avg=(rng - 1) * Fraction(1, 2), rng=rng)
        _WI_CACHE[(kind, dim)] = a
    return a


def _range_of(a: Atom) -> tuple[Poly | None, bool]:
    """Number of equally likely values of an atom and whether it varies across lanes."""
    if a.kind == "wi":
        return a.rng, a.name.startswith(("gid", "lid"))
    if a.kind == "iter":
        return a.rng, False
    if a.kind == "fn" and a.fn == "mod" and (WI in a.args[0].deps or GRP in a.args[0].deps):
        m = a.args[1]
        if WI not in m.deps and DATA not in m.deps and VAR not in m.deps:
            return m, WI in a.args[0].deps
    return None, False


_UNKNOWN_IDS = itertools.count()


def _range_preference(a: Atom) -> tuple[int, str]:
    """Order in which branch-fraction analysis tries atoms: lane ids, id % c, group ids, counters."""
    if a.kind == "wi":
        return (0 if a.name.startswith(("gid", "lid")) else 2), a.key
    if a.kind == "fn":
        return 1, a.key
    return 3, a.key


def _p(v: Val) -> Poly:
    """The polynomial of a value; a fresh unknown atom carrying its dependencies if it has none."""
    if v.poly is not None:
        return v.poly
    n = next(_UNKNOWN_IDS)
    return Poly.atom(Atom(f"u:{n}", "var", "?", deps=v.deps | {VAR}, deriv=None if WI in v.deps else (ZERO,) * 3))


def _is_mem_lvalue(c: ci.Cursor) -> bool:
    """Whether an lvalue lives in memory addressed through a pointer or array (syntactically)."""
    s = _strip(c)
    while s.kind == K.MEMBER_REF_EXPR:
        ch = list(s.get_children())
        if not ch:
            return False
        if type_class(_strip(ch[0]).type)[0] == "ptr":
            return True
        s = _strip(ch[0])
    if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
        return True
    return s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*"


def _same(a: Val, b: Val) -> bool:
    if a.ptr is not None or b.ptr is not None:
        if a.ptr is None or b.ptr is None:
            return False
        return (a.ptr.base == b.ptr.base and a.ptr.space == b.ptr.space and
                (a.ptr.offset == b.ptr.offset))
    if a.poly is None or b.poly is None:
        return a.poly is None and b.poly is None and a.deps == b.deps
    return a.poly == b.poly


def _strip(c: ci.Cursor) -> ci.Cursor:
    """Skip parentheses and implicit casts that keep the vector width."""
    while c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR):
        ch = list(c.get_children())
        if len(ch) != 1:
            break
        if c.kind == K.UNEXPOSED_EXPR:
            a, b = type_class(c.type), type_class(ch[0].type)
            if a[1] != b[1]:
                break
        c = ch[0]
    return c


def _unit_scale(s: ci.Cursor, p: Ptr) -> Fraction:
    """Leaf elements per index step of a subscript (>1 for rows of multi-dimensional arrays)."""
    nb = _type_bytes(s.type)
    if nb <= 0 or p.leaf_bytes <= 0:
        return Fraction(1)
    if s.type.get_canonical().kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
        return Fraction(nb, p.leaf_bytes)
    return Fraction(max(nb, p.leaf_bytes), p.leaf_bytes) if nb > p.leaf_bytes else Fraction(1)


def _const_arg(args: list[ci.Cursor]) -> int | None:
    if not args:
        return None
    v = _cx.evaluate(args[0])
    return int(v) if isinstance(v, (int, float)) else None


def _terminates(c: ci.Cursor) -> bool:
    if c.kind == K.RETURN_STMT:
        return True
    if c.kind == K.COMPOUND_STMT:
        ch = list(c.get_children())
        return bool(ch) and ch[-1].kind == K.RETURN_STMT
    return False


def _for_parts(c: ci.Cursor, ch: list[ci.Cursor]) -> tuple[ci.Cursor | None, ci.Cursor | None,
                                                             ci.Cursor | None, ci.Cursor]:
    """(init, cond, inc, body) of a FOR_STMT, telling missing parts apart by token positions."""
    body = ch[-1]
    rest = ch[:-1]
    if len(rest) == 3:
        return rest[0], rest[1], rest[2], body
    semis: list[int] = []
    depth = 0
    started = False
    for t in c.get_tokens():
        s = t.spelling
        if s == "(":
            depth += 1
            started = True
        elif s == ")":
            depth -= 1
            if started and depth == 0:
                break
        elif s == ";" and depth == 1:
            semis.append(t.extent.start.offset)
    slots: list[ci.Cursor | None] = [None, None, None]
    if len(semis) == 2:
        for x in rest:
            off = x.extent.start.offset
            i = 0 if off < semis[0] else 1 if off < semis[1] else 2
            slots[i] = x
        return slots[0], slots[1], slots[2], body
    for i, x in enumerate(rest):  # pragma: no cover - macro-generated loop headers
        slots[i] = x
    return slots[0], slots[1], slots[2], body


def _comma_split(c: ci.Cursor) -> list[ci.Cursor]:
    s = _strip(c)
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == ",":
        a, b = list(s.get_children())
        return _comma_split(a) + _comma_split(b)
    return [s]


def _step_of(s: ci.Cursor) -> tuple[int, str, str, ci.Cursor | None] | None:
    """``(var key, name, how, step cursor)`` for ``i++``, ``i += C``, ``i = i * F``, ``i >>= k``..."""
    s = _strip(s)
    if s.kind == K.UNARY_OPERATOR:
        op = _cx.unary_op(s)
        if op in ("post++", "pre++", "post--", "pre--"):
            x = _strip(list(s.get_children())[0])
            if x.kind == K.DECL_REF_EXPR and x.referenced is not None:
                return x.referenced.hash, x.spelling, "++" if "++" in op else "--", None
        return None
    if s.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
        op = _cx.binary_op(s)
        lhs, rhs = list(s.get_children())
        x = _strip(lhs)
        if x.kind == K.DECL_REF_EXPR and x.referenced is not None and op in ("+=", "-=", "*=", "/=", "<<=", ">>="):
            return x.referenced.hash, x.spelling, op[:-1], rhs
        return None
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "=":
        lhs, rhs = list(s.get_children())
        x = _strip(lhs)
        r = _strip(rhs)
        if x.kind == K.DECL_REF_EXPR and x.referenced is not None and r.kind == K.BINARY_OPERATOR:
            op = _cx.binary_op(r)
            a, b = list(r.get_children())
            sa = _strip(a)
            if op in ("+", "-", "*", "/", "<<", ">>") and sa.kind == K.DECL_REF_EXPR and \
                    sa.referenced is not None and sa.referenced.hash == x.referenced.hash:
                return x.referenced.hash, x.spelling, op, b
            sb = _strip(b)
            if op in ("+", "*") and sb.kind == K.DECL_REF_EXPR and sb.referenced is not None and \
                    sb.referenced.hash == x.referenced.hash:
                return x.referenced.hash, x.spelling, op, a
    return None


def _geo_factor(how: str, step: Poly) -> tuple[float, bool] | None:
    if not step.is_const():
        return None
    v = step.const_value()
    if how == "*" and v >= 2:
        return float(v), True
    if how == "/" and v >= 2:
        return float(v), False
    if how == "<<" and 1 <= v <= 30:
        return float(2 ** int(v)), True
    if how == ">>" and 1 <= v <= 30:
        return float(2 ** int(v)), False
    return None


def _log2(x: float) -> float:
    return math.log2(x)


def _conjuncts(c: ci.Cursor, out: list[ci.Cursor]) -> None:
    s = _strip(c)
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "&&":
        a, b = list(s.get_children())
        _conjuncts(a, out)
        _conjuncts(b, out)
    else:
        out.append(s)


def _iter_refs(parts: Iterable[ci.Cursor]) -> Iterable[ci.Cursor]:
    for p in parts:
        for x in p.walk_preorder():
            if x.kind == K.DECL_REF_EXPR and x.referenced is not None:
                yield x


def _assigned(parts: list[ci.Cursor]) -> dict[int, list[ci.Cursor | None]]:
    """Variables assigned in ``parts``: key -> right-hand sides (None for ++/--/address taken)."""
    out: dict[int, list[ci.Cursor | None]] = {}
    for p in parts:
        for x in p.walk_preorder():
            k = x.kind
            if k in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
                op = _cx.binary_op(x)
                if op == "=" or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
                    lhs, rhs = list(x.get_children())
                    base = _base_var(lhs)
                    if base is not None:
                        out.setdefault(base, []).append(rhs)
            elif k == K.UNARY_OPERATOR:
                op = _cx.unary_op(x)
                if op in ("post++", "post--", "pre++", "pre--", "&"):
                    ch = list(x.get_children())
                    if ch:
                        base = _base_var(ch[0])
                        if base is not None:
                            out.setdefault(base, []).append(None)
    return out


def _base_var(c: ci.Cursor) -> int | None:
    s = c
    while s.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR, K.MEMBER_REF_EXPR):
        ch = list(s.get_children())
        if len(ch) != 1:
            return None
        if s.kind == K.MEMBER_REF_EXPR and type_class(ch[0].type)[0] == "ptr":
            return None
        s = ch[0]
    if s.kind == K.DECL_REF_EXPR and s.referenced is not None and s.referenced.kind in (K.VAR_DECL, K.PARM_DECL):
        return s.referenced.hash
    return None


def _syntactic_deps(rhs: ci.Cursor, vars_: dict[int, Val], dep_map: dict[int, frozenset[str]]) -> set[str]:
    out: set[str] = set()
    for x in rhs.walk_preorder():
        k = x.kind
        if k == K.DECL_REF_EXPR and x.referenced is not None:
            key = x.referenced.hash
            if key in dep_map:
                out |= dep_map[key]
            elif key in vars_:
                out |= vars_[key].deps
        elif k == K.CALL_EXPR:
            n = x.spelling
            if n in ("get_global_id", "get_local_id", "get_global_linear_id", "get_local_linear_id"):
                out.add(WI)
            elif n == "get_group_id":
                out.add(GRP)
            elif n.startswith(("atomic_", "atom_", "vload", "read_image")):
                out.add(DATA)
        elif k == K.ARRAY_SUBSCRIPT_EXPR:
            if x.type.get_canonical().kind not in (TK.CONSTANTARRAY,):
                out.add(DATA)
        elif k == K.UNARY_OPERATOR and _cx.unary_op(x) == "*":
            out.add(DATA)
    return out - {VAR}


_TEXT_MAX = 200


def _text(c: ci.Cursor, depth: int = 0) -> str:
    """Re-print an expression from the AST (tokens lie inside macro expansions)."""
    if depth > 30:
        return "..."
    k = c.kind
    ch = [x for x in c.get_children() if x.kind != K.TYPE_REF]
    if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL):
        v = _cx.evaluate(c)
        return str(v) if v is not None else "?"
    if k == K.DECL_REF_EXPR:
        return c.spelling
    if k == K.PAREN_EXPR:
        return "(" + (_text(ch[0], depth + 1) if ch else "") + ")"
    if k == K.UNEXPOSED_EXPR:
        if len(ch) == 1:
            inner = _text(ch[0], depth + 1)
            a, b = type_class(c.type), type_class(ch[0].type)
            if b[1] > 1 and a[1] < b[1]:
                return inner + ".?"
            return inner
        return "?"
    if k == K.BINARY_OPERATOR or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
        if len(ch) == 2:
            return f"{_text(ch[0], depth + 1)} {_cx.binary_op(c)} {_text(ch[1], depth + 1)}"
    if k == K.UNARY_OPERATOR and ch:
        op = _cx.unary_op(c)
        inner = _text(ch[0], depth + 1)
        if op.startswith("post"):
            return inner + op[4:]
        return op.replace("pre", "") + inner
    if k == K.ARRAY_SUBSCRIPT_EXPR and len(ch) == 2:
        return f"{_text(ch[0], depth + 1)}[{_text(ch[1], depth + 1)}]"
    if k == K.CALL_EXPR:
        return f"{c.spelling}(" + ", ".join(_text(a, depth + 1) for a in c.get_arguments()) + ")"
    if k == K.MEMBER_REF_EXPR and ch:
        sep = "->" if type_class(ch[0].type)[0] == "ptr" else "."
        return f"{_text(ch[0], depth + 1)}{sep}{c.spelling}"
    if k == K.CSTYLE_CAST_EXPR and ch:
        return f"({c.type.spelling}){_text(ch[-1], depth + 1)}"
    if k == K.CONDITIONAL_OPERATOR and len(ch) == 3:
        return f"{_text(ch[0], depth + 1)} ? {_text(ch[1], depth + 1)} : {_text(ch[2], depth + 1)}"
    return "?"


# ----------------------------------------------------------------------------------------------
# entry points
# ----------------------------------------------------------------------------------------------

def symbol_name(arg: str) -> str:
    """Expression symbol of a scalar argument (reserved words and collisions get a ``_``)."""
    s = arg
    while keyword.iskeyword(s) or s in RESERVED or s.startswith("len_") or s in ("gid0", "lid0", "grp0"):
        s = s + "_"
    return s


_TU_CACHE: dict[tuple[str, str, str], tuple[ci.TranslationUnit, dict[str, ci.Cursor]]] = {}
_TU_CACHE_MAX = 16


def _parse_cached(source: str, filename: str, build_options: str) -> tuple[ci.TranslationUnit, dict[str, ci.Cursor]]:
    """The translation unit and its kernels, cached per source (a file holds many kernels)."""
    key = (source, filename, build_options)
    hit = _TU_CACHE.get(key)
    if hit is None:
        tu = parse(source, filename, build_options)
        hit = (tu, find_kernels(tu, filename))
        if len(_TU_CACHE) >= _TU_CACHE_MAX:
            _TU_CACHE.pop(next(iter(_TU_CACHE)))
        _TU_CACHE[key] = hit
    return hit


def analyze_source(kernel: Kernel, filename: str = "kernel.cl") -> SourceFeatures:
    """Static per-work-item features of an OpenCL C kernel (module docstring).

    Raises :class:`kernelcast.clang.ParseError` when the source does not parse and
    ``ValueError`` when the kernel is not in it.
    """
    if kernel.language not in ("opencl", "cl", "opencl-c"):
        raise ValueError(f"analyze_source handles OpenCL C kernels, not {kernel.language!r}")
    _tu, kernels = _parse_cached(kernel.source, filename, kernel.build_options)
    if kernel.name not in kernels:
        raise ValueError(f"kernel {kernel.name!r} not found (kernels in the source: {', '.join(kernels) or 'none'})")
    kc = kernels[kernel.name]
    params = kernel_params(kc)
    argsym: dict[str, str] = {}
    n_args = {"buffer": 0, "constant": 0, "local": 0, "scalar": 0}
    local_args: dict[str, int] = {}
    w = _Walker(filename, argsym)
    w.frames.append(_Frame(kernel.name, is_kernel=True))
    cursors = list(kc.get_arguments())
    for p, pc in zip(params, cursors):
        t = pc.type.get_canonical()
        if p.kind in ("buffer", "local") and t.kind == TK.POINTER:
            pointee = t.get_pointee()
            leaf = max(1, _type_bytes(pointee))
            space = "local" if p.kind == "local" else p.qualifier if p.qualifier in ("global", "constant") else "global"
            n_args["local" if p.kind == "local" else "constant" if space == "constant" else "buffer"] += 1
            if p.kind == "local":
                local_args[p.name] = leaf
            w.vars[pc.hash] = Val(None, frozenset(), Ptr(p.name, space, ZERO, leaf))
        else:
            n_args["scalar"] += 1
            s = symbol_name(p.name)
            argsym[p.name] = s
            tc = type_class(pc.type)
            if tc[0] in ("int", "fp32", "fp64") and tc[1] == 1:
                w.vars[pc.hash] = Val(Poly.symbol(s, integer=tc[0] == "int"))
            else:
                w.vars[pc.hash] = w.var_val(p.name, frozenset())
    body = next((x for x in kc.get_children() if x.kind == K.COMPOUND_STMT), None)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20000))  # long unrolled expressions nest deeply
    try:
        if body is not None:
            w.walk_body(body)
    finally:
        sys.setrecursionlimit(limit)
    for acc, (pi, pw) in zip(w.accesses, w.acc_polys):
        acc.count = _final(pi, w).to_str()
        acc.count_warp = _final(pw, w).to_str()
    feats = SourceFeatures(
        kernel_name=kernel.name,
        dims=max(1, w.dims),
        n_args=n_args,
        scalar_args=[p.name for p in params if p.kind == "scalar"],
        symbol_map={s: a for a, s in argsym.items()},
        local_args=local_args,
        local_mem_bytes=w.local_bytes,
        private_array_bytes=w.private_bytes,
        ops=_op_strings(w.ops, w),
        ops_warp=_op_strings(w.ops_warp, w),
        accesses=w.accesses,
        loops=w.loops,
        branches=w.branches,
        early_returns=w.early_returns,
        helpers=w.helpers,
        notes=w.notes,
    )
    return feats


def _final(p: Poly, w: _Walker) -> Poly:
    """A count ready to print: a loop variable left outside its ``itersum`` (should not happen)
    is replaced by its mean."""
    if p.printable:
        return p
    q = average(p)
    if q is not None and q.printable:
        return q
    w.note(f"count {p.to_str()[:80]} not expressible; using 0")  # pragma: no cover
    return ZERO  # pragma: no cover


def _op_strings(ops: dict[str, Poly], w: _Walker) -> dict[str, str]:
    out: dict[str, str] = {}
    for k in OP_CLASSES:
        p = ops.get(k)
        if p is None or p.is_zero():
            continue
        p = _final(p, w)
        if not p.is_zero():
            out[k] = p.to_str()
    return out


def analyze_source_text(source: str, name: str, build_options: str = "") -> SourceFeatures:
    """Convenience: :func:`analyze_source` on a source string."""
    return analyze_source(Kernel(source=source, name=name, build_options=build_options))


__all__ = ["ParseError", "analyze_source", "analyze_source_text", "deriv", "average", "type_class",
           "symbol_name", "sym"]

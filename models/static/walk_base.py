"""State of the source walker and the interface its parts share.

The walker (:class:`models.static.source._Walker`) is assembled from mixins, one per concern:
statements and joins (:mod:`~models.static.walk_stmt`), loops (:mod:`~models.static.walk_loop`),
expressions (:mod:`~models.static.walk_expr`), memory accesses (:mod:`~models.static.walk_mem`)
and calls (:mod:`~models.static.walk_call`). Each derives from :class:`WalkerBase`, which holds
the state (variable values, the current weights, the counts found so far), the bookkeeping every
part uses, and declares the methods one part calls in another.

**Weights.** Each statement is counted with two weights: the *item* weight ``w_item`` (average
number of executions per work-item: loop trip counts times branch fractions) and the *warp*
weight ``w_warp`` (SIMT view: how often the warp a work-item belongs to issues it, per
work-item). :meth:`WalkerBase.scaled` multiplies both inside a ``with`` block;
:meth:`WalkerBase.muted` evaluates without counting (and restores the variables afterwards).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static.affine import deriv
from kernelcast.models.static.expr import DATA, VAR, WI, Atom, Poly
from kernelcast.models.static.features import BUILTIN_CLASSES, Access, BranchInfo, LoopInfo, SiteInfo
from kernelcast.models.static.groups import WorkGroups
from kernelcast.models.static.guards import Fact
from kernelcast.models.static.values import ONE, ZERO, MemRef, Ptr, Val, retype_ptr

from kernelcast.sites import site_symbol

TK = ci.TypeKind


def branch_category(deps: frozenset[str]) -> str:
    """``data`` (the condition reads loaded data), ``divergent`` (it depends on work-item ids) or
    ``uniform``."""
    return "data" if DATA in deps else "divergent" if WI in deps else "uniform"


@dataclass
class LoopCtx:
    """A loop being walked: ``lid`` its serial (every atom made while walking it has a larger
    one), its line, the weights before it (``entry``) and in its body (``body``, None while its
    condition is walked, and for a geometric loop, whose counts are integrated afterwards)."""

    has_break: bool = False
    lid: int = 0
    line: int = 0
    entry: tuple[Poly, Poly] | None = None
    body: tuple[Poly, Poly] | None = None
    #: the trip count of a loop the compiler unrolls fully (:meth:`WalkerBase.hoisted`), else None
    unrolled: Poly | None = None
    #: whether the loop's body calls a work-group barrier
    barrier: bool = False
    #: a loop the compiler keeps (not unrolled fully) that may be unrolled in part: its index in
    #: :attr:`WalkerBase.ops_partial`, else -1
    partial: int = -1
    #: the operations and memory accesses of one trip of its body as compiled (each site once,
    #: times the trips of the loops inside it that are unrolled fully), while ``partial`` >= 0
    size: Fraction = Fraction(0)
    #: of them, the loads from memory other than private (registers)
    loads: Fraction = Fraction(0)
    #: whether a loop the compiler keeps is nested in it (it is then not innermost)
    kept_inner: bool = False


@dataclass
class PartialLoop:
    """An innermost loop the compiler keeps (not unrolled fully) and may unroll in part: affine trips
    without an exit, barrier or kept loop inside, and no ``#pragma unroll 1``. ``trip``: its trips
    per entry, ``size``: the operations and accesses of one trip as compiled (:attr:`LoopCtx.size`),
    ``ops``: its control and counter arithmetic per work-item, by class (what unrolling it fully
    would remove)."""

    line: int
    trip: Poly
    size: Fraction
    loads: Fraction
    pragma: int | None
    ops: dict[str, Poly]


# the serial numbers in atom keys: ``v:name#N`` / ``u:N`` (unknown values), ``i:N`` / ``g:N``
# (iteration counters), ``d:buf[N]`` (a load at an address the analysis does not follow)
_SERIAL = re.compile(r"#(\d+)|(?<![\w:])[igu]:(\d+)|\[(\d+)\]")


#: arithmetic classes whose operations on OpenCL vector values are counted apart (``ops_vec``)
VECTOR_OP_CLASSES = frozenset({"fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_add", "fp64_mul", "fp64_fma",
                               "fp64_div", "int_add", "int_mul", "int_bit", "cmp", "conv"})


#: the operation classes :meth:`WalkerBase.folds_in_unrolled` takes as folded by a full unrolling
UNROLL_FOLDED = frozenset({"int_add", "int_mul", "int_bit", "cmp"})


def serials(vals: list[Val]) -> set[int] | None:
    """The serials of the atoms in the values, None when a value is unknown."""
    out: set[int] = set()
    for v in vals:
        if v.poly is None:
            return None
        out.update(int(m.group(1) or m.group(2) or m.group(3)) for m in _SERIAL.finditer(v.poly.key()))
    return out


def newest_serial(vals: list[Val]) -> int | None:
    """The largest serial of an atom in the values (-1 if none), None when a value is unknown."""
    got = serials(vals)
    return None if got is None else max(got, default=-1)


@dataclass
class Frame:
    """One inlined function body (the kernel itself is the outermost frame)."""

    name: str
    returns: list[Val] = field(default_factory=list)
    is_kernel: bool = False


class WalkerBase(ABC):
    def __init__(self, filename: str, params: dict[str, str]) -> None:
        self.filename = filename
        self.argsym = params                 # kernel argument name -> expression symbol
        self.vars: dict[int, Val] = {}
        self.w_item: Poly = ONE
        self.w_warp: Poly = ONE
        self.mute = 0
        self.ops: dict[str, Poly] = {}
        self.ops_warp: dict[str, Poly] = {}
        # "class@width" -> lanes of operations on OpenCL vector values of that width (each one SIMD
        # instruction of the target, whether or not the runtime vectorizes across work-items)
        self.ops_vec: dict[str, Poly] = {}
        # class -> operations in innermost loops whose trips are independent within a work-item
        # (walk_loop._record_independent_trip_loop), and their loads (LOOPVEC_LOADS)
        self.ops_loopvec: dict[str, Poly] = {}
        self.ops_chain: dict[str, Poly] = {}     # operations on loop-carried recurrences (models.static.chains)
        # operations of fully unrolled loops that their unrolling removes: the loops' control (condition,
        # branch, counter increment) and integer arithmetic on their counters (constant in each copy:
        # an immediate offset); counted in ops too, subtracted where a device class compiles so
        self.ops_unrolled: dict[str, Poly] = {}
        self.unrolled_control = False
        # the same operations of the innermost loops the compiler keeps (walk_loop: which may be
        # unrolled in part, by a factor the device class's compiler rule decides), per loop
        # (LoopCtx.partial); partial_control: the loop whose control is being counted, else -1
        self.ops_partial: dict[int, dict[str, Poly]] = {}
        self.partial_control: int = -1
        self._partial_serial = 0
        self._sizing = True       # off while counting a computation hoisted out of the loop
        self.partial_loops: list[PartialLoop] = []
        self.accesses: list[Access] = []
        self.loops: list[LoopInfo] = []
        # the comparisons around each work site (models.static.groups): the share of the work-groups
        # in which some work-item does the kernel's work
        self.work_groups = WorkGroups()
        self.branches: list[BranchInfo] = []
        self.sites: list[SiteInfo] = []
        self._site_names: set[str] = set()
        self.notes: list[str] = []
        self.lane_mixing: list[int] = []   # lines where components of one vector value are combined
        self.call_sites: dict[str, int] = {}   # "<family class>:<builtin>" -> call sites walked (not muted)
        self.helpers: list[str] = []
        self.frames: list[Frame] = []
        self.loop_stack: list[LoopCtx] = []
        # the weights before the arms of each ``?:`` being walked, with the loop depth it is at
        # (its arms are computed as a select: the compiler may speculate them out of a loop)
        self.select_stack: list[tuple[int, tuple[Poly, Poly]]] = []
        self.unroll_pragma: int | None = None    # of the loop walked next (models.static.loops.unroll_pragma)
        self.dims = 0
        self.local_bytes = 0
        self.private_bytes = 0
        self.early_returns = 0
        # conditions that differ between work-items around the statement walked ("divergent line 7");
        # an ``if (c) return;`` with such a condition leaves its text in ``exit_cond`` for the block
        self.cond_stack: list[str] = []
        self.exit_cond = ""
        # the comparisons known true around the statement walked (models.static.guards: those of the
        # enclosing ``if``s and ``?:`` arms, and after ``if (c) return;`` those of !c, which the
        # ``if`` leaves in ``exit_facts`` for the rest of its block)
        self.guard_stack: list[tuple[Fact, ...]] = []
        self.exit_facts: tuple[Fact, ...] = ()
        self._serial = 0
        self._seen_local: set[int] = set()
        self.geo_params: dict[int, tuple[Poly, Fraction]] = {}   # loop id -> (start, factor)
        self.acc_polys: list[tuple[Poly, Poly]] = []              # count polys of self.accesses
        # the space and the enclosing loops' serials of each store and atomic; the outermost fully
        # unrolled loop of each load (index in self.accesses) that repeats addresses in them
        self.store_loops: list[tuple[str, frozenset[int]]] = []
        self.repeat_nests: dict[int, int] = {}
        self.dead_loops: dict[tuple[int, int, int], str] = {}    # loop key -> why it is dead code
        self.dead_stmts: dict[tuple[int, int, int], str] = {}    # statement key -> why it is dead code

    # --- bookkeeping ----------------------------------------------------------------------------
    def serial(self) -> int:
        self._serial += 1
        return self._serial

    def mix_lanes(self, c: ci.Cursor) -> None:
        """Components of a vector value are taken apart (``v.x``) or combined (``dot``) at ``c``."""
        line = c.location.line
        if not self.mute and line not in self.lane_mixing:
            self.lane_mixing.append(line)

    def note(self, msg: str) -> None:
        if not self.mute and msg not in self.notes:
            self.notes.append(msg)

    def op(self, cls: str, n: int | Fraction = 1, width: int = 1) -> None:
        """Count ``n`` operations (lanes) of class ``cls``; ``width`` > 1: they operate on vector
        values of that many components (recorded apart in :attr:`ops_vec`, arithmetic and the
        builtin families: a vector math library evaluates ``pow(float4)`` as one call)."""
        if self.mute or not n:
            return
        self.ops[cls] = self.ops.get(cls, ZERO) + self.w_item * n
        self.ops_warp[cls] = self.ops_warp.get(cls, ZERO) + self.w_warp * n
        if self.unrolled_control:
            self.ops_unrolled[cls] = self.ops_unrolled.get(cls, ZERO) + self.w_item * n
        elif self.partial_control >= 0 and self.partial_control in self.ops_partial:
            got = self.ops_partial[self.partial_control]
            got[cls] = got.get(cls, ZERO) + self.w_item * n
        self.count_size(n)
        if width > 1 and (cls in VECTOR_OP_CLASSES or cls in BUILTIN_CLASSES):
            key = f"{cls}@{width}"
            self.ops_vec[key] = self.ops_vec.get(key, ZERO) + self.w_item * n

    def op_of(self, cls: str, n: int | Fraction, vals: list[Val], width: int = 1) -> int:
        """Count ``n`` operations of class ``cls`` on the values ``vals``, once per entry of the
        loops they are invariant in (:meth:`hoisted`); returns the line of the outermost loop they
        leave, 0 where they stay."""
        if cls in UNROLL_FOLDED and not self.unrolled_control and self.folds_in_unrolled(vals):
            self.unrolled_control = True
            try:
                return self.op_of(cls, n, vals, width)
            finally:
                self.unrolled_control = False
        if cls in UNROLL_FOLDED and not self.unrolled_control and self.partial_control < 0:
            kept = self.folds_in_partial(vals)
            if kept >= 0:
                self.partial_control = kept
                try:
                    return self.op_of(cls, n, vals, width)
                finally:
                    self.partial_control = -1
        hoist = self.hoisted(vals)
        if hoist is None:
            self.op(cls, n, width)
            return 0
        saved, (self.w_item, self.w_warp) = (self.w_item, self.w_warp), hoist[0]
        sizing, self._sizing = self._sizing, False
        try:
            self.op(cls, n, width)
        finally:
            self.w_item, self.w_warp = saved
            self._sizing = sizing
        return hoist[1]

    def count_size(self, n: int | Fraction = 1, load: bool = False) -> None:
        """Add ``n`` operations (or accesses; ``load``: loads, :attr:`LoopCtx.loads`) to the body
        size of the innermost loop the compiler keeps (:attr:`LoopCtx.size`), times the trips of the
        fully unrolled loops between."""
        if self.mute or not self._sizing:
            return
        mult = Fraction(1)
        for ctx in reversed(self.loop_stack):
            if ctx.unrolled is None:
                if ctx.partial >= 0:
                    ctx.size += mult * n
                    if load:
                        ctx.loads += mult * n
                return
            if not ctx.unrolled.is_const():
                return
            mult *= Fraction(ctx.unrolled.const_value())

    def folds_in_partial(self, vals: list[Val]) -> int:
        """The loop (:attr:`LoopCtx.partial`) in whose partly unrolled copies integer arithmetic on
        ``vals`` is constant, as :meth:`folds_in_unrolled` for full unrolling: the innermost loop the
        compiler keeps, where some value depends on its counter (or on those of the fully unrolled
        loops inside it) and nothing on another value made in it or on loaded data (``sample +
        shift[c]`` is computed in every copy); -1 where there is none."""
        if self.mute or not self.loop_stack:
            return -1
        i = len(self.loop_stack) - 1
        while i >= 0 and self.loop_stack[i].unrolled is not None:
            i -= 1
        if i < 0 or self.loop_stack[i].partial < 0 or any(DATA in v.deps for v in vals):
            return -1
        made = serials(vals)
        if not made:
            return -1
        first = self.loop_stack[i].lid
        inside = {x for x in made if x >= first}
        counters = {ctx.lid for ctx in self.loop_stack[i:]}
        return self.loop_stack[i].partial if inside and inside <= counters else -1

    def branch(self, line: int, kind: str, deps: frozenset[str]) -> None:
        if self.mute:
            return
        self.branches.append(BranchInfo(line, kind, branch_category(deps)))

    @property
    def conditional(self) -> str:
        """The innermost condition that differs between work-items around the current statement
        (:attr:`models.static.features.Access.conditional`), "" if none."""
        return self.cond_stack[-1] if self.cond_stack else ""

    @property
    def guards(self) -> list[Fact]:
        """The comparisons known true around the current statement (:mod:`models.static.guards`)."""
        return [f for fs in self.guard_stack for f in fs]

    def guarded(self, known: tuple[Fact, ...]) -> _Guard:
        """A context in which the comparisons ``known`` hold (an ``if`` body, a ``?:`` arm)."""
        return _Guard(self, known)

    def site(self, kind: str, c: ci.Cursor, default: float | None, assumed: str, default_expr: str = ""
             ) -> Poly | None:
        """The symbol of a count a run on real inputs can measure at the loop / ``if`` statement
        ``c`` (:class:`~models.static.features.SiteInfo`; ``default_expr``: its value where not
        measured, an expression); None for a statement outside the kernel's own source file (an
        included header), which no measurement can name."""
        loc = c.location
        if loc.file is None or loc.file.name != self.filename:
            return None
        name = site_symbol(kind, loc.line, loc.column)
        if not self.mute and name not in self._site_names:
            self._site_names.add(name)
            self.sites.append(SiteInfo(name, kind, loc.line, loc.column, default, assumed, default_expr))
        return Poly.symbol(name)

    def keep_site_if_used(self, kind: str, c: ci.Cursor, used_in: Poly) -> None:
        """Forget the site of ``c`` when the count finally used does not contain its symbol (a
        bound found later replaced the guess)."""
        name = site_symbol(kind, c.location.line, c.location.column)
        if name in self._site_names and not any(a.key == "s:" + name for a in used_in.all_atoms()):
            self._site_names.discard(name)
            self.sites = [x for x in self.sites if x.symbol != name]

    def folds_in_unrolled(self, vals: list[Val]) -> bool:
        """Whether integer arithmetic on ``vals`` in the innermost loop is constant in each copy of
        the fully unrolled loops around it: some value depends on their counters and nothing on a
        value made in a loop that is not unrolled (``ty + yi * 16 + i`` over unrolled ``yi``, ``i``:
        an immediate offset from ``ty``'s address) or on loaded data (``sample + shift[i]`` is
        computed in every copy)."""
        if self.mute or not self.loop_stack or self.loop_stack[-1].unrolled is None \
                or any(DATA in v.deps for v in vals):
            return False
        made = serials(vals)
        if not made:
            return False
        first = self.loop_stack[0].lid
        inside = {x for x in made if x >= first}
        unrolled = {ctx.lid for ctx in self.loop_stack if ctx.unrolled is not None}
        return bool(inside) and inside <= unrolled

    def hoisted(self, vals: list[Val]) -> tuple[tuple[Poly, Poly], int] | None:
        """Where loop-invariant code motion puts a computation of ``vals``: the weights it runs at
        and the line of the outermost loop it leaves, or None where it stays. It leaves each
        enclosing loop, innermost first, while none of ``vals`` was made inside that loop and the
        computation is not under a condition inside it, other than an arm of ``?:`` (computed as
        a select; a call under an ``if`` is not speculated). A loop the compiler unrolls fully
        (:attr:`LoopCtx.unrolled`) whose counter is all of ``vals`` made inside it leaves one copy of
        the computation per trip, each invariant in the loops outside it: ``pow(w / (1 + i), 1.5f)``
        in an unrolled loop over ``i`` inside a loop over ``d`` runs once per ``i``, not per ``d``
        (PoCL 3.1, 16,384 work-items: 6,835 us with 5 trips of a constant ``d`` loop, 6,537
        with 5 of a ``d`` loop bounded by an argument, 6,756 with 1, 33,615 without the unrolling
        pragma on the 8 trips of ``i``, which call a routine). Loads too, where nothing in the loop
        stores (``filter[d + 2] * u[idx + d] / 8`` in an unrolled loop over ``d`` inside a loop over
        ``i``: PoCL 3.1's code gathers and divides before the ``i`` loop)."""
        if self.mute or not self.loop_stack or self.loop_stack[-1].body is None:
            return None
        made = serials(vals)
        if made is None:
            return None
        cur, line = (self.w_item, self.w_warp), 0
        depth = len(self.loop_stack)
        cur = next((w for d, w in self.select_stack if d == depth), cur)
        copies, counters = ONE, set[int]()
        for ctx in reversed(self.loop_stack):
            if ctx.body is None or ctx.entry is None:
                break
            if cur[0] != ctx.body[0] or cur[1] != ctx.body[1]:
                break
            inside = {s for s in made if s >= ctx.lid} - counters
            if not inside:
                line = ctx.line
            elif ctx.unrolled is not None and inside == {ctx.lid}:
                copies, counters = copies * ctx.unrolled, counters | inside
            else:
                break
            cur = ctx.entry
        return ((cur[0] * copies, cur[1] * copies), line) if line else None

    def scaled(self, item: Poly, warp: Poly) -> _Scale:
        return _Scale(self, item, warp)

    def muted(self) -> _Mute:
        return _Mute(self)

    # --- values ---------------------------------------------------------------------------------
    def var_val(self, name: str, deps: frozenset[str], deriv_: tuple[Poly | None, ...] | None = None) -> Val:
        """A fresh unknown value (e.g. a variable declared without initializer)."""
        n = self.serial()
        if deriv_ is None and WI not in deps:
            deriv_ = (ZERO, ZERO, ZERO)
        a = Atom(f"v:{name}#{n}", "var", f"{name}'{n}", deps=deps | {VAR}, deriv=deriv_)
        return Val(Poly.atom(a), deps | {VAR})

    def assign_var(self, key: int, v: Val, t: ci.Type | None) -> None:
        if v.ptr is not None and t is not None and t.get_canonical().kind == TK.POINTER:
            v = Val(v.poly, v.deps, retype_ptr(v.ptr, t))
        self.vars[key] = v

    def phi(self, va: Val, vb: Val, cond_deps: frozenset[str]) -> Val:
        """The value of a variable after a join of two paths holding ``va`` and ``vb``."""
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

    # --- implemented by the parts -------------------------------------------------------------
    @abstractmethod
    def walk_stmt(self, c: ci.Cursor, top: bool = False, top_last: bool = False) -> tuple[Poly, Poly] | None:
        """Walk a statement; returns the weights of what follows an early ``if (c) return;``."""

    @abstractmethod
    def loop(self, c: ci.Cursor) -> None:
        """Walk a ``for``/``while``/``do`` loop."""

    @abstractmethod
    def ev(self, c: ci.Cursor, skip_mul: bool = False) -> Val:
        """Evaluate (and count) an expression."""

    @abstractmethod
    def call(self, c: ci.Cursor) -> Val:
        """A call: inlined helper or builtin."""

    @abstractmethod
    def lvalue_mem(self, c: ci.Cursor) -> MemRef | None:
        """The memory reference of an lvalue expression, or None."""

    @abstractmethod
    def load_lvalue(self, c: ci.Cursor) -> Val:
        """Load (and record) the value of a memory lvalue."""

    @abstractmethod
    def record_load(self, m: MemRef, c: ci.Cursor) -> Val:
        """Record a load of ``m`` and return the loaded value."""

    @abstractmethod
    def record(self, m: MemRef, kind: str, c: ci.Cursor, via: str = "") -> None:
        """Record an access (load / store / atomic) with the current weights."""

    @abstractmethod
    def store_to(self, lhs_c: ci.Cursor, rv: Val, c: ci.Cursor) -> None:
        """An assignment ``lhs = rv``: to a variable or a memory store."""

    @abstractmethod
    def address_of(self, x: ci.Cursor) -> Val:
        """The pointer value of ``&x``."""

    @abstractmethod
    def memory_builtin(self, name: str, args: list[ci.Cursor], c: ci.Cursor) -> Val | None:
        """Atomics, ``vloadN``/``vstoreN`` and image reads/writes; None for other builtins."""


class _Scale:
    """Context manager multiplying the walker's weights."""

    def __init__(self, w: WalkerBase, item: Poly, warp: Poly) -> None:
        self.w, self.item, self.warp = w, item, warp

    def __enter__(self) -> None:
        self.saved = (self.w.w_item, self.w.w_warp)
        self.w.w_item = self.w.w_item * self.item
        self.w.w_warp = self.w.w_warp * self.warp

    def __exit__(self, *exc: object) -> None:
        self.w.w_item, self.w.w_warp = self.saved


class _Guard:
    """Context manager under which comparisons are known true (:meth:`WalkerBase.guarded`)."""

    def __init__(self, w: WalkerBase, known: tuple[Fact, ...]) -> None:
        self.w, self.known = w, known

    def __enter__(self) -> None:
        self.w.guard_stack.append(self.known)

    def __exit__(self, *exc: object) -> None:
        self.w.guard_stack.pop()


class _Mute:
    """Context manager evaluating without counting; the variables are restored on exit."""

    def __init__(self, w: WalkerBase) -> None:
        self.w = w

    def __enter__(self) -> None:
        self.w.mute += 1
        self.saved = dict(self.w.vars)

    def __exit__(self, *exc: object) -> None:
        self.w.mute -= 1
        self.w.vars = self.saved

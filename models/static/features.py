"""Static feature records: source features (libclang), PTX features, and their combination.

Every count in :class:`SourceFeatures` is an expression string in the grammar of
:func:`kernelcast.expr.compile_expr` over these symbols:

* ``gsize0..2``, ``lsize0..2``, ``ngroups0..2`` - global size, work-group size, number of groups;
* scalar kernel arguments by name (a name that is a Python keyword or collides with a reserved
  symbol gets a trailing ``_``; ``symbol_map`` maps expression symbols back to argument names);
* ``avg_trip`` - trip count assumed for loops whose bounds depend on loaded data or are unknown;
* ``trip_l<line>_c<col>`` / ``br_l<line>_c<col>`` - one symbol per *site* whose count the source
  cannot tell (the loop or ``if`` statement at that line and column, :class:`SiteInfo`): the trips
  per entry of a data-dependent loop, the share of evaluations taking the then-side of a condition
  on loaded data. A run of the kernel on real inputs measures them
  (:func:`instrument.counters.measure_counts`); unmeasured, a loop site takes ``avg_trip`` and a
  branch site its :attr:`SiteInfo.default`;
* ``len_<arg>`` - element count of a ``__local`` pointer argument (for ``local_mem_bytes``).

:meth:`SourceFeatures.evaluate_many` evaluates all of them over arrays of configurations at once.
Missing symbols take these defaults (:data:`DEFAULTS`, :func:`complete_env`): ``gsize0`` 1024,
``gsize1``/``gsize2`` 1, ``lsize0`` ``min(64, gsize0)``, other ``lsize`` 1,
``ngroups = ceil(gsize / lsize)`` (or ``gsize = ngroups * lsize`` when ``ngroups`` is given),
``avg_trip`` 8, ``warp`` 32, ``seg_bytes`` 32, ``l1_line_bytes`` 128, site symbols as above, and any
other symbol (an unbound scalar argument) 1.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
from kernelcast.models.static.coalescing import (
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_WARP,
    bank_conflict_degree,
    coalescing_efficiency,
)

from kernelcast.expr import CACHE_KEY, compile_expr
from kernelcast.sites import SITE_PREFIXES

log = logging.getLogger(__name__)

FEATURES_VERSION = 3

#: prefix of the evaluated counts of operations on vector values (``vec:fp32_fma@8``)
VEC_PREFIX = "vec:"
#: prefix of the evaluated counts of operations in innermost loops with independent trips within a
#: work-item (``loopvec_ops``; the name says what a loop vectorizer can take, the fact is the loop's shape)
LOOPVEC_PREFIX = "loopvec:"
#: key prefix of the operations on loop-carried recurrences in ``evaluate_many``'s output
CHAIN_PREFIX = "chain:"
#: :meth:`SourceFeatures.evaluate_many` key prefix of one buffer argument's global bytes per work-item
#: as the work-group's warps fetch them (``global_block_bytes`` of that argument's accesses)
ARG_BYTES_PREFIX = "arg_bytes:"
ARG_STORE_SUFFIX = "@store"   # arg_bytes:<name>@store: the bytes stored (or atomically updated)
#: the line a first-level cache looks up per cycle where the device states none (symbol
#: ``l1_line_bytes``; ``global_l1_lines``: the lines per work-item a warp's global accesses touch,
#: lanes sharing one counting it once)
L1_LINE_BYTES = 128.0
#: key prefix of the operations full unrolling removes (``unrolled_ops``) in ``evaluate_many``'s output
UNROLLED_PREFIX = "unrolled:"
#: key prefix of the innermost loops the compiler keeps (``partial_loops``) in ``evaluate_many``'s
#: output: ``partial:<n>:<class>`` the control and counter arithmetic of the loop ``n`` (what a full
#: unrolling would remove), ``partial:<n>:trip`` its trips per entry, ``partial:<n>:const`` 1 where
#: they are a constant the compiler sees, ``partial:<n>:size`` the operations and accesses of one
#: trip, ``partial:<n>:loads`` the loads among them (memory other than private),
#: ``partial:<n>:pragma`` its ``#pragma unroll`` count (0 without one; ``trip`` is 0 where the
#: analysis has no expression for it); a device class whose compiler unrolls such loops in part by
#: a factor U leaves 1/U of the control
PARTIAL_PREFIX = "partial:"
#: key prefix of the memory counts (``global_loads``, ``local_bytes``, ...) that loads repeating an
#: address within fully unrolled loops contribute (``Access.unrolled_distinct``), in
#: ``evaluate_many``'s output; a device class whose compiler keeps such values in registers
#: subtracts them
REPEATED_PREFIX = "repeated:"
#: key prefix of the share of the work-groups of dimension ``d`` in which some work-item does the
#: kernel's work (``group_share0`` ... ``group_share2``, :attr:`SourceFeatures.group_share`)
GROUP_SHARE = "group_share"
#: the key of those loops' loads in ``loopvec_ops``
LOOPVEC_LOADS = "loads"

#: default trip count of a loop whose bound is loaded from memory or unknown
DEFAULT_AVG_TRIP = 8.0

#: defaults of symbols (see module docstring)
DEFAULTS: dict[str, float] = {
    "gsize0": 1024.0, "gsize1": 1.0, "gsize2": 1.0,
    "avg_trip": DEFAULT_AVG_TRIP,
    "warp": float(DEFAULT_WARP),
    "seg_bytes": float(DEFAULT_SEGMENT_BYTES),
    "l1_line_bytes": L1_LINE_BYTES,
    "work_dim": 1.0,
}
#: default for any other missing symbol (e.g. a scalar argument not given)
DEFAULT_SYMBOL = 1.0

#: operation classes counted per work-item
OP_CLASSES = (
    "fp32_add", "fp32_mul", "fp32_fma", "fp32_div",
    "fp64_add", "fp64_mul", "fp64_fma", "fp64_div",
    "int_add", "int_mul", "int_div", "int_bit",
    "sfu", "cmp", "conv", "branch", "barrier", "fence",
)
#: builtin families with their own rates (:data:`models.static.clbuiltins.FAMILY`); a call counts in
#: ``sfu`` (all special functions together) and in ``bi_<variant><family>``
BUILTIN_FAMILIES = ("exp", "log", "sin", "atan", "pow", "tanh", "sqrt", "rsqrt", "erf", "divide", "hypot", "rint",
                    "cbrt", "fmod", "exp2", "exp10", "expm1", "log2", "log10", "log1p", "cos", "tan", "sinh", "cosh",
                    "asin", "acos", "erfc")
#: where a profile has no rate of a family of its own: the family whose rate it takes and how many
#: of that family's calls one call counts as (a tangent is a sine and a cosine). Each of these is
#: its own library routine with its own cost (PoCL 3.1, ``o[i] = f(x[i])`` on data in
#: [0, 1), 2^18 work-items: exp 74 us, exp2 1,389; log 1,618, log2 692, log10 1,908, log1p 3,704;
#: sin 1,949, cos 3,845; atan 3,092, asin 1,368, acos 1,610; tanh 141, sinh 2,460, cosh 1,363; erf
#: 3,877), so calib measures each; the parent keeps profiles that predate them working
FAMILY_PARENT: dict[str, tuple[str, int]] = {
    "exp2": ("exp", 1), "exp10": ("exp", 1), "expm1": ("exp", 1), "log2": ("log", 1), "log10": ("log", 1),
    "log1p": ("log", 1), "cos": ("sin", 1), "tan": ("sin", 2), "sinh": ("tanh", 1), "cosh": ("tanh", 1),
    "asin": ("atan", 1), "acos": ("atan", 1), "erfc": ("erf", 1),
}
BUILTIN_CLASSES = tuple(f"bi_{v}{f}" for v in ("", "native_", "half_") for f in BUILTIN_FAMILIES)
#: calls of the runtime's other math, common, integer, geometric and relational builtins (``fmax``,
#: ``clamp``, ``fabs``, ``fma``, ``mad24``, ``add_sat``, ``dot``, ``isnan``...), per vector component:
#: arithmetic where the runtime inlines them, an out-of-line call where it does not (calib cond's
#: ``wi_libcall_ns``); the families above are not counted here (their calibrated rates hold their calls)
LIBCALL = "libcall"
RESERVED = frozenset({
    "gsize0", "gsize1", "gsize2", "lsize0", "lsize1", "lsize2", "ngroups0", "ngroups1", "ngroups2",
    "avg_trip", "warp", "seg_bytes", "l1_line_bytes", "work_dim", "min", "max", "log2", "ceil", "floor", "abs",
})


@dataclass
class Access:
    """One memory access site (per inlined call path) of a kernel."""

    arg: str                 # buffer argument, __local/__private array or pointer name
    space: str               # global / constant / local / private / image
    kind: str                # load / store / atomic
    elem_bytes: int          # bytes moved by one execution
    unit_bytes: int          # bytes per step of the index (element size of the indexed pointer)
    index: str               # index expression, re-printed from the AST
    count: str               # executions per work-item (expression)
    count_warp: str          # executions per work-item counted per issuing warp (SIMT view)
    stride0: str | None      # index steps between adjacent lanes along local dim 0 (None: unknown)
    stride1: str | None      # ... along local dim 1
    index_expr: str = ""     # index as analysed (gid0, lid0, grp0, it<n>, ld(...) symbols)
    coeffs: dict[str, str] = field(default_factory=dict)  # coefficient of gid0/lid0/grp0/... in the index
    affine: bool = True      # index is affine in the work-item ids
    indirect: bool = False   # index depends on loaded data (gather / scatter)
    trip_strides: dict[str, str] = field(default_factory=dict)  # index steps per trip of each enclosing loop (it<n>)
    line: int = 0
    via: str = ""            # builtin through which the access happens (vload4, atomic_add, ...)
    # the innermost condition that differs between work-items and that this access runs under: an
    # ``if``/``switch`` on work-item ids or loaded data, or the rest of a block after such an
    # ``if (...) return;`` ("divergent line 7" / "data line 12"; "" where every work-item runs it)
    conditional: str = ""
    index_int32: bool = False  # a subscript of the buffer itself by a signed 32-bit int (``in[i + 1]``, ``int i``)
    # a guard around it bounds its global id plus a constant so that the vectorizer proves the lanes'
    # addresses consecutive (``i >= 1 ? in[i - 1]``, ``if (i + 1 < n)``: models.static.guards)
    index_guarded: bool = False
    # the share of its executions inside the fully unrolled loops around it (innermost first, up to
    # the first loop that is not unrolled) whose address no earlier copy of the body read: copies
    # at ``[ty + yi * 4 + i]`` over ``yi`` < 2, ``i`` < 5 read 9 distinct addresses in 10 (0.9).
    # 1 where any copy may read new data: a store or atomic to memory of its space, or a barrier, in
    # those loops, an index that is not a sum of constant multiples of their counters
    unrolled_distinct: float = 1.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Access:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class LoopInfo:
    """One loop (per inlined call path)."""

    line: int
    kind: str                # for / while / do
    var: str | None          # induction variable
    trip: str                # trip count (expression; averaged over work-items)
    trip_kind: str           # affine / geometric / data_dependent / unknown / dead / closed_form
    depth: int               # nesting depth, 1 = outermost
    data_dependent: bool = False
    divergent: bool = False  # trip count differs between work-items
    has_break: bool = False  # break/return inside: trip is an upper bound
    early_exit: bool = False  # extra data-dependent exit condition: trip is an upper bound
    assumed: str = ""        # what the trip count assumes (dead code, a break bound, avg_trip), "" if exact
    from_zero: bool = False  # its condition is one bound on a variable counting from 0 by 1 (LLVM's canonical form)
    calls: tuple[str, ...] = ()  # builtin family classes (bi_*) called in its body, nested loops included
    unroll_pragma: int | None = None  # its unrolling pragma (models.static.loops.unroll_pragma): 0 full, 1 none, N

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoopInfo:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "calls" in kw:
            kw["calls"] = tuple(kw["calls"])
        return cls(**kw)


@dataclass
class BranchInfo:
    """One branch site: ``kind`` if / ?: / loop / switch / return; ``category`` divergent (condition
    depends on a work-item id), data (on loaded data), or uniform."""

    line: int
    kind: str
    category: str

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BranchInfo:
        return cls(**{k: d[k] for k in ("line", "kind", "category")})


@dataclass
class SiteInfo:
    """A count the source cannot tell: the trips per entry of a loop bounded by data (``loop``), or
    the share of evaluations of an ``if`` taking its then-side when the condition is on data (``if``)."""

    symbol: str
    kind: str                # loop / if
    line: int
    col: int
    default: float | None    # value when not measured (None: the avg_trip symbol's value)
    assumed: str             # what the analysis assumes without a measurement
    default_expr: str = ""   # or an expression for it (a static mean trip count), over the other symbols

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SiteInfo:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class SourceFeatures:
    """Per-work-item static features of one kernel from its OpenCL C source."""

    kernel_name: str
    dims: int = 1
    n_args: dict[str, int] = field(default_factory=dict)      # by kind: buffer / constant / local / scalar
    scalar_args: list[str] = field(default_factory=list)
    symbol_map: dict[str, str] = field(default_factory=dict)  # expression symbol -> argument name
    local_args: dict[str, int] = field(default_factory=dict)  # __local pointer argument -> element bytes
    local_mem_bytes: int = 0           # fixed-size __local arrays declared in the kernel
    private_array_bytes: int = 0       # fixed-size private arrays
    ops: dict[str, str] = field(default_factory=dict)         # class -> count per work-item
    ops_warp: dict[str, str] = field(default_factory=dict)    # class -> SIMT issue count per work-item
    # "class@width" -> lanes of those operations that act on OpenCL vector values of that width
    vec_ops: dict[str, str] = field(default_factory=dict)
    # class -> operations in innermost loops whose trips are independent within one work-item (a
    # count loop ``rank += (in[j] < v)``: no exit, nested loop, ``if``, call or store, unit-stride
    # loads, only integer reductions carried), and ``loads`` their loads; what a loop vectorizer
    # makes of them is the device class's (models.analytical.cpu_costs.inner_loop_correction)
    loopvec_ops: dict[str, str] = field(default_factory=dict)
    # class -> operations per work-item on loop-carried recurrences: each waits for the one before
    # (models.static.chains)
    chain_ops: dict[str, str] = field(default_factory=dict)
    # class -> operations per work-item that full unrolling removes (counted in ops too): fully
    # unrolled loops' control and the integer arithmetic on their counters (UNROLLED_PREFIX keys of
    # evaluate_many; a device class whose compiler unrolls so subtracts them)
    unrolled_ops: dict[str, str] = field(default_factory=dict)
    # the innermost loops the compiler keeps, which it may unroll in part (PARTIAL_PREFIX keys of
    # evaluate_many): {"line", "trip" (trips per entry, an expression or None), "const" (whether they
    # are a constant the compiler sees), "size"
    # (operations and accesses of one trip as compiled), "loads" (of them, the loads from memory other
    # than private), "pragma" (its #pragma unroll count or None),
    # "ops" (class -> its control and counter arithmetic per work-item, counted in ops too)}
    partial_loops: list[dict[str, Any]] = field(default_factory=list)
    accesses: list[Access] = field(default_factory=list)
    loops: list[LoopInfo] = field(default_factory=list)
    branches: list[BranchInfo] = field(default_factory=list)
    early_returns: int = 0
    sites: list[SiteInfo] = field(default_factory=list)      # counts a run on real inputs can measure
    helpers: list[str] = field(default_factory=list)          # inlined helper functions
    notes: list[str] = field(default_factory=list)            # constructs approximated or skipped
    lane_mixing: list[int] = field(default_factory=list)      # lines combining the components of a vector value
    # "<builtin family class>:<builtin>" (``bi_tanh:asinh``) -> its call sites (each inlined path
    # counted), however often they run
    call_sites: dict[str, int] = field(default_factory=dict)
    # per dimension, the share of the work-groups in which some work-item does the kernel's work
    # (passes the guards around its accesses and loops: models.static.groups); "1" where all do
    group_share: list[str] = field(default_factory=lambda: ["1", "1", "1"])
    version: int = FEATURES_VERSION

    # --- (de)serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SourceFeatures:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["accesses"] = [Access.from_dict(a) for a in kw.get("accesses", [])]
        kw["loops"] = [LoopInfo.from_dict(x) for x in kw.get("loops", [])]
        kw["branches"] = [BranchInfo.from_dict(x) for x in kw.get("branches", [])]
        kw["sites"] = [SiteInfo.from_dict(x) for x in kw.get("sites", [])]
        return cls(**kw)

    # --- derived static numbers -----------------------------------------------------------------
    def branch_counts(self) -> dict[str, int]:
        out = {"divergent": 0, "data": 0, "uniform": 0}
        for b in self.branches:
            out[b.category] = out.get(b.category, 0) + 1
        return out

    def expressions(self) -> list[str]:
        """Every expression string the features hold (for checks and pre-compilation)."""
        out = list(self.ops.values()) + list(self.ops_warp.values()) + list(self.vec_ops.values())
        out += list(self.loopvec_ops.values()) + list(self.chain_ops.values()) + list(self.unrolled_ops.values())
        out += [t for lp in self.partial_loops for t in [*lp.get("ops", {}).values(), lp.get("trip") or "0"]]
        for a in self.accesses:
            out += [a.count, a.count_warp]
            out += [s for s in (a.stride0, a.stride1) if s is not None]
        out += [lp.trip for lp in self.loops]
        out += [s.default_expr for s in self.sites if s.default_expr]
        out += list(self.group_share)
        return out

    def symbols(self) -> set[str]:
        """Free symbols of all expressions."""
        out: set[str] = set()
        for e in self.expressions():
            out |= compile_expr(e)[1]
        return out

    def site_defaults(self) -> dict[str, float | str | None]:
        """Site symbol -> its value when not measured (None: ``avg_trip``'s value; a string: an
        expression over the other symbols)."""
        return {s.symbol: s.default_expr or s.default for s in self.sites}

    def complete(self, envs: Mapping[str, np.ndarray | float]) -> dict[str, np.ndarray]:
        """:func:`complete_env` for this kernel's symbols and sites."""
        return complete_env(envs, dims=self.dims, symbol_map=self.symbol_map, symbols=self.symbols(),
                            site_defaults=self.site_defaults())

    # --- evaluation ---------------------------------------------------------------------------
    def evaluate(self, env: Mapping[str, float]) -> dict[str, float]:
        """Numeric per-work-item features for one configuration (see :meth:`evaluate_many`)."""
        res = self.evaluate_many({k: np.asarray([v], dtype=np.float64) for k, v in env.items()})
        return {k: float(np.asarray(v).reshape(-1)[0]) for k, v in res.items()}

    def evaluate_many(self, envs: Mapping[str, np.ndarray | float]) -> dict[str, np.ndarray]:
        """Numeric features over arrays of configurations at once.

        ``envs`` maps symbols (``gsize0``, ``lsize0``, ..., scalar argument names) to arrays of
        one shape (scalars broadcast). Returns arrays of that shape: every op class (per
        work-item average) and ``warp_<class>`` (SIMT issue count), memory counts and bytes,
        ``eta_coal`` / ``eta_bytes`` / ``local_bank_conflict``, FlipFlop's ``n_comp`` / ``n_mem``
        / ``n_sync``, and static numbers (``dims``, ``local_mem_bytes`` ...).
        """
        env = self.complete(envs)
        shape = np.broadcast_shapes(*[np.shape(v) for v in env.values()]) if env else ()
        memo: dict[str, np.ndarray] = {}

        def ev(text: str) -> np.ndarray:
            r = memo.get(text)
            if r is None:
                fn, _ = compile_expr(text)
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    r = np.asarray(fn(env), dtype=np.float64)
                r = np.nan_to_num(np.broadcast_to(r, shape), nan=0.0)
                memo[text] = r
            return r

        env[CACHE_KEY] = {}  # type: ignore[assignment]  # common sub-expressions, shared by all expressions
        zeros = np.zeros(shape, dtype=np.float64)
        out: dict[str, np.ndarray] = {}
        for k in OP_CLASSES:
            out[k] = ev(self.ops[k]) if k in self.ops else zeros
            out["warp_" + k] = ev(self.ops_warp[k]) if k in self.ops_warp else zeros
        for k in BUILTIN_CLASSES + (LIBCALL,):
            out[k] = ev(self.ops[k]) if k in self.ops else zeros
            out["warp_" + k] = ev(self.ops_warp[k]) if k in self.ops_warp else zeros
        for k, text in self.vec_ops.items():
            out[VEC_PREFIX + k] = ev(text)
        for k, text in self.loopvec_ops.items():
            out[LOOPVEC_PREFIX + k] = ev(text)
        for k, text in self.chain_ops.items():
            out[CHAIN_PREFIX + k] = ev(text)
        for k, text in self.unrolled_ops.items():
            out[UNROLLED_PREFIX + k] = ev(text)
        for n, lp in enumerate(self.partial_loops):
            pre = f"{PARTIAL_PREFIX}{n}:"
            for k, text in lp.get("ops", {}).items():
                out[pre + k] = ev(text)
            out[pre + "trip"] = ev(lp["trip"]) if lp.get("trip") else zeros
            for k in ("const", "size", "loads", "pragma"):
                out[pre + k] = np.full(shape, float(lp.get(k) or 0.0))

        mem_keys = ("global_loads", "global_stores", "global_atomics", "global_load_bytes",
                    "global_store_bytes", "global_atomic_bytes", "global_fetched_bytes",
                    "constant_loads", "constant_load_bytes", "local_loads", "local_stores",
                    "local_atomics", "local_bytes", "private_accesses", "image_reads", "image_writes",
                    "warp_global_mem", "warp_local_mem", "global_sector_bytes", "global_block_bytes",
                    "global_l1_lines")
        acc = {k: zeros.copy() for k in mem_keys}
        per_arg: dict[str, np.ndarray] = {}
        eta_num = zeros.copy()
        eta_den = zeros.copy()
        bank_num = zeros.copy()
        bank_den = zeros.copy()
        l0, l1, l2 = env["lsize0"], env["lsize1"], env["lsize2"]
        warp, seg, line = env["warp"], env["seg_bytes"], env["l1_line_bytes"]
        repeated: dict[str, np.ndarray] = {}
        for a in self.accesses:
            c = ev(a.count)
            cw = ev(a.count_warp)
            s0 = ev(a.stride0) if a.stride0 is not None else None
            s1 = ev(a.stride1) if a.stride1 is not None else None
            part: dict[str, np.ndarray] = {}
            b = c * a.elem_bytes
            if a.space == "global":
                eta = coalescing_efficiency(s0, s1, a.elem_bytes, a.unit_bytes, l0, l1, l2,
                                            warp=warp, segment=seg)
                eta = np.broadcast_to(eta, shape)
                key = {"load": "global_loads", "store": "global_stores", "atomic": "global_atomics"}[a.kind]
                bkey = {"load": "global_load_bytes", "store": "global_store_bytes",
                        "atomic": "global_atomic_bytes"}[a.kind]
                part[key] = c
                part[bkey] = b
                part["global_fetched_bytes"] = b / np.maximum(eta, 1e-9)
                part["warp_global_mem"] = cw
                # the memory hierarchy's view (models.analytical.hierarchy): the bytes of the segments
                # a warp fetches per lane, lanes sharing a segment counted once, and the same over
                # the warps of a work-group that read the same segments (served by the first one's)
                share = np.broadcast_to(coalescing_efficiency(s0, s1, a.elem_bytes, a.unit_bytes, l0, l1, l2,
                                                              warp=warp, segment=seg, shared=True), shape)
                sector = b / np.maximum(share, 1e-9)
                part["global_sector_bytes"] = sector
                lines = np.broadcast_to(coalescing_efficiency(s0, s1, a.elem_bytes, a.unit_bytes, l0, l1, l2,
                                                              warp=warp, segment=line, shared=True), shape)
                part["global_l1_lines"] = b / np.maximum(lines, 1e-9) / line
                block = sector / block_reuse(a, l0, l1, l2, warp) if a.kind == "load" else sector
                part["global_block_bytes"] = block
                # loads and stores of one buffer apart: each direction moves the buffer at most once
                key = a.arg if a.kind == "load" else a.arg + ARG_STORE_SUFFIX
                part[ARG_BYTES_PREFIX + key] = block
                if a.kind != "atomic":
                    eta_num += c * eta
                    eta_den += c
            elif a.space == "constant":
                part["constant_loads"] = c
                part["constant_load_bytes"] = b
            elif a.space == "local":
                key = {"load": "local_loads", "store": "local_stores", "atomic": "local_atomics"}[a.kind]
                part[key] = c
                part["local_bytes"] = b
                part["warp_local_mem"] = cw
                # the first row's pattern: the row-aware degree (stride1) over-weights the conflicts
                # of 16- and 48-wide work-groups (docs/gpu-yardstick.md, per tunable parameter)
                deg = np.broadcast_to(bank_conflict_degree(s0, a.elem_bytes, a.unit_bytes, l0, warp=warp), shape)  # type: ignore[arg-type]
                bank_num += c * deg
                bank_den += c
            elif a.space == "image":
                part["image_reads" if a.kind == "load" else "image_writes"] = c
            else:
                part["private_accesses"] = c
            for k, arr in part.items():
                if k.startswith(ARG_BYTES_PREFIX):
                    per_arg[k] = per_arg.get(k, zeros) + arr
                else:
                    acc[k] += arr
            if a.unrolled_distinct < 1.0:
                for k, arr in part.items():
                    repeated[k] = repeated.get(k, zeros) + arr * (1.0 - a.unrolled_distinct)
        out.update(acc)
        out.update(per_arg)
        for k, v in repeated.items():
            out[REPEATED_PREFIX + k] = v
        with np.errstate(divide="ignore", invalid="ignore"):
            out["eta_coal"] = np.where(eta_den > 0, eta_num / np.where(eta_den > 0, eta_den, 1), 1.0)
            req = acc["global_load_bytes"] + acc["global_store_bytes"]
            out["eta_bytes"] = np.where(acc["global_fetched_bytes"] - acc["global_atomic_bytes"] > 0,
                                        req / np.maximum(acc["global_fetched_bytes"] - acc["global_atomic_bytes"],
                                                         1e-12), 1.0)
            out["eta_bytes"] = np.minimum(out["eta_bytes"], 1.0)
            out["local_bank_conflict"] = np.where(bank_den > 0, bank_num / np.where(bank_den > 0, bank_den, 1), 1.0)
        out["n_comp"] = sum((out[k] for k in OP_CLASSES if k not in ("branch", "barrier", "fence", "cmp")), zeros)
        out["n_mem"] = (acc["global_loads"] + acc["global_stores"] + acc["global_atomics"] + acc["local_loads"]
                        + acc["local_stores"] + acc["local_atomics"] + acc["constant_loads"])
        out["n_sync"] = out["barrier"]
        local_dyn = zeros.copy()
        for name, eb in self.local_args.items():
            local_dyn = local_dyn + env.get("len_" + name, zeros) * eb
        out["local_mem_bytes"] = local_dyn + float(self.local_mem_bytes)
        bc = self.branch_counts()
        static = {
            "dims": float(self.dims),
            "branches_divergent": float(bc.get("divergent", 0)),
            "branches_data": float(bc.get("data", 0)),
            "branches_uniform": float(bc.get("uniform", 0)),
            "early_returns": float(self.early_returns),
            "loops": float(len(self.loops)),
            "loops_data_dependent": float(sum(1 for lp in self.loops if lp.data_dependent)),
            "private_array_bytes": float(self.private_array_bytes),
        }
        for k, v in static.items():
            out[k] = np.full(shape, v)
        for d, text in enumerate(self.group_share):
            out[f"{GROUP_SHARE}{d}"] = np.clip(ev(text), 0.0, 1.0)
        return out


def block_reuse(a: Access, l0: np.ndarray, l1: np.ndarray, l2: np.ndarray, warp: np.ndarray | float) -> np.ndarray:
    """How many warps of a work-group read the same segments at one access: the work-group's warps
    over the warps that differ in the local ids the index depends on (``in[k]`` in every work-item:
    all of them alike; ``in[get_local_id(0)]`` in a 32 x 8 work-group: 8 alike). Warps hold
    consecutive work-items, dimension 0 fastest; an index of unknown structure depends on every id."""
    warps = np.maximum(np.ceil(l0 * l1 * l2 / warp), 1.0)
    if a.indirect or a.stride0 is None and not a.coeffs:
        return np.ones_like(warps)
    dep = {d for d in range(3) for name in (f"lid{d}", f"gid{d}") if a.coeffs.get(name, "0") not in ("0", "")}
    if not a.affine:
        dep = {0, 1, 2}
    if not dep:
        return warps
    sizes = (l0, l1, l2)
    lanes = np.ones_like(warps)
    for d in dep:
        lanes = lanes * sizes[d]
    if 0 not in dep:
        lanes = lanes * l0       # a warp spans whole rows of dimension 0: the rows it holds differ
    distinct = np.clip(np.ceil(lanes / warp), 1.0, warps)
    return warps / distinct


def complete_env(envs: Mapping[str, np.ndarray | float], *, dims: int = 3,
                 symbol_map: Mapping[str, str] | None = None,
                 symbols: set[str] | None = None,
                 site_defaults: Mapping[str, float | str | None] | None = None) -> dict[str, np.ndarray]:
    """Fill in defaults and derived sizes (module docstring); arrays stay float64.

    Keys may be expression symbols or the original argument names of ``symbol_map``. A site
    symbol not in ``envs`` (or NaN there: not measured for that configuration) takes its
    ``site_defaults`` value (``avg_trip``'s when that is None or the site is not listed; an
    expression's value over the completed other symbols, in the order the sites are listed, so an
    inner loop's may use an outer one's).
    """
    env: dict[str, np.ndarray] = {k: np.asarray(v, dtype=np.float64) for k, v in envs.items()}
    for s, argname in (symbol_map or {}).items():
        if s not in env and argname in env:
            env[s] = env[argname]
    for d in range(3):
        g, loc, n = f"gsize{d}", f"lsize{d}", f"ngroups{d}"
        if g not in env:
            if n in env and loc in env:
                env[g] = env[n] * env[loc]
            else:
                env[g] = np.asarray(DEFAULTS[g])
        if loc not in env:
            if n in env:
                env[loc] = np.maximum(np.floor(env[g] / np.maximum(env[n], 1.0)), 1.0)
            else:
                env[loc] = np.minimum(64.0, env[g]) if d == 0 else np.asarray(1.0)
        if n not in env:
            env[n] = np.ceil(env[g] / np.maximum(env[loc], 1.0))
    for k, v in DEFAULTS.items():
        env.setdefault(k, np.asarray(v))
    if "work_dim" not in envs:
        env["work_dim"] = np.asarray(float(dims))
    defaults = site_defaults or {}

    def fill(s: str, dv: np.ndarray) -> None:
        if s not in env:
            env[s] = dv
        elif np.isnan(env[s]).any():    # measured for some configurations only
            env[s] = np.where(np.isnan(env[s]), dv, env[s])

    exprs = [s for s, d in defaults.items() if isinstance(d, str) and d]
    for s in (symbols or set()) | set(defaults):
        if not s.startswith(SITE_PREFIXES) or s in exprs:
            continue
        dflt = defaults.get(s)
        fill(s, env["avg_trip"] if dflt is None else np.asarray(float(dflt)))
    missing = (symbols or set()) - env.keys() - set(exprs)
    if missing:
        log.debug("symbols without a value, using %s: %s", DEFAULT_SYMBOL, sorted(missing))
        for s in missing:
            env[s] = np.asarray(DEFAULT_SYMBOL)
    for s in exprs:
        if s in env and not np.isnan(env[s]).any():
            continue
        fn, free = compile_expr(str(defaults[s]))
        scope: dict[str, Any] = {**{x: np.asarray(DEFAULT_SYMBOL) for x in free if x not in env}, **env,
                                 CACHE_KEY: {}}
        with np.errstate(all="ignore"):
            dv = np.nan_to_num(np.asarray(fn(scope), dtype=np.float64), nan=0.0)
        fill(s, dv)
    return env


# ----------------------------------------------------------------------------------------------
# PTX features
# ----------------------------------------------------------------------------------------------

@dataclass
class PtxBlock:
    """A basic block of one PTX function."""

    label: str
    n_instructions: int
    counts: dict[str, int]
    successors: list[int]
    loop_depth: int = 0


@dataclass
class PtxLoop:
    """A natural loop: header block, member blocks, nesting depth (1 = outermost)."""

    header: int
    blocks: list[int]
    depth: int
    back_edges: list[list[int]]


@dataclass
class PtxFeatures:
    """Static features of one PTX entry (kernel).

    ``counts`` are static instruction counts per class; ``weighted`` multiplies each block's
    counts by ``trip ** loop_depth`` with the default trip count per loop level
    (:data:`models.static.ptx.DEFAULT_PTX_TRIP`) - an estimate of dynamic counts per thread when
    no trip counts are known. ``bytes`` sums the widths of global/shared loads and stores.
    """

    kernel_name: str
    target: str = ""
    version: str = ""
    n_instructions: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    weighted: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    blocks: list[PtxBlock] = field(default_factory=list)
    loops: list[PtxLoop] = field(default_factory=list)
    max_loop_depth: int = 0
    n_params: int = 0
    registers_declared: dict[str, int] = field(default_factory=dict)  # .reg declarations by type
    shared_bytes: int = 0          # static .shared declarations
    local_bytes: int = 0           # .local declarations (stack arrays)
    dims_used: int = 1             # highest %tid/%ctaid/%ntid dimension read, plus one
    calls: dict[str, int] = field(default_factory=dict)  # callee -> count (OpenCL builtins on nvcl)
    trip_per_level: float = 8.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def n_sync(self) -> int:
        return self.counts.get("barrier", 0)


@dataclass
class StaticFeatures:
    """Everything static about one kernel: source features, PTX features, toolchain info."""

    kernel_id: str
    kernel_name: str
    language: str
    source: SourceFeatures | None = None
    ptx: PtxFeatures | None = None
    resources: dict[str, Any] | None = None   # ptxas -v: registers, shared, spills, ...
    toolchain: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    version: int = FEATURES_VERSION

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StaticFeatures:
        kw = dict(d)
        if kw.get("source") is not None:
            kw["source"] = SourceFeatures.from_dict(kw["source"])
        if kw.get("ptx") is not None:
            p = dict(kw["ptx"])
            p["blocks"] = [PtxBlock(**b) for b in p.get("blocks", [])]
            p["loops"] = [PtxLoop(**x) for x in p.get("loops", [])]
            kw["ptx"] = PtxFeatures(**p)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kw.items() if k in names})

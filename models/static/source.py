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

Where each part lives: :mod:`~models.static.walk_base` (walker state and weights),
:mod:`~models.static.walk_stmt` (statements, ``if``/``switch``), :mod:`~models.static.walk_loop`
(loops), :mod:`~models.static.walk_expr` (expressions and operation counts),
:mod:`~models.static.walk_mem` (memory accesses), :mod:`~models.static.walk_call` (inlining and
builtins), with the pure parts in :mod:`~models.static.affine` (lane strides, averages),
:mod:`~models.static.branches` (branch fractions), :mod:`~models.static.loops` (loop syntax),
:mod:`~models.static.trips` (trip-count formulas), :mod:`~models.static.clbuiltins` (builtin
tables), :mod:`~models.static.cursors` (libclang types and cursors) and
:mod:`~models.static.values` (values and pointers).
"""

from __future__ import annotations

import keyword
import sys
from collections.abc import Iterable
from typing import Any

import clang.cindex as ci
from kernelcast.models.static.affine import average
from kernelcast.models.static.cursors import type_bytes, type_class
from kernelcast.models.static.deadcode import closed_form_loops, dead_loops, dead_statements
from kernelcast.models.static.expr import Poly
from kernelcast.models.static.features import BUILTIN_CLASSES, LIBCALL, OP_CLASSES, RESERVED, SourceFeatures
from kernelcast.models.static.values import WALK_SERIALS, ZERO, Ptr, Val
from kernelcast.models.static.walk_base import Frame, PartialLoop
from kernelcast.models.static.walk_call import CallWalker
from kernelcast.models.static.walk_expr import ExprWalker
from kernelcast.models.static.walk_loop import LoopWalker
from kernelcast.models.static.walk_mem import MemWalker
from kernelcast.models.static.walk_stmt import StmtWalker

from kernelcast.clang import find_kernels, kernel_params, parse
from kernelcast.cuda import looks_like_cuda, translate
from kernelcast.schema import Kernel

K = ci.CursorKind
TK = ci.TypeKind


class _Walker(StmtWalker, LoopWalker, ExprWalker, MemWalker, CallWalker):
    """The walker of one kernel body: all the parts over one state (:mod:`models.static.walk_base`)."""


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
    if kernel.language == "cuda" or (kernel.language == "opencl" and looks_like_cuda(kernel.source)):
        return analyze_cuda_source(kernel)
    if kernel.language not in ("opencl", "cl", "opencl-c"):
        raise ValueError(f"analyze_source handles OpenCL C and CUDA kernels, not {kernel.language!r}")
    _tu, kernels = _parse_cached(kernel.source, filename, kernel.build_options)
    if kernel.name not in kernels:
        raise ValueError(f"kernel {kernel.name!r} not found (kernels in the source: {', '.join(kernels) or 'none'})")
    kc = kernels[kernel.name]
    params = kernel_params(kc)
    argsym: dict[str, str] = {}
    n_args = {"buffer": 0, "constant": 0, "local": 0, "scalar": 0}
    local_args: dict[str, int] = {}
    w = _Walker(filename, argsym)
    w.frames.append(Frame(kernel.name, is_kernel=True))
    cursors = list(kc.get_arguments())
    for p, pc in zip(params, cursors):
        t = pc.type.get_canonical()
        if p.kind in ("buffer", "local") and t.kind == TK.POINTER:
            pointee = t.get_pointee()
            leaf = max(1, type_bytes(pointee))
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
    token = WALK_SERIALS.set(w.serial)        # unknown values numbered by this walk (models.static.values)
    try:
        if body is not None:
            w.dead_loops = {**closed_form_loops(body), **dead_loops(body)}
            w.dead_stmts = dead_statements(body, {k: v for k, v in w.dead_loops.items()
                                                  if "closed form" not in v})
            w.walk_body(body)
    finally:
        WALK_SERIALS.reset(token)
        sys.setrecursionlimit(limit)
    w.finish_repeats()
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
        vec_ops=_op_strings(w.ops_vec, w, sorted(w.ops_vec)),
        loopvec_ops=_op_strings(w.ops_loopvec, w, sorted(w.ops_loopvec)),
        chain_ops=_op_strings(w.ops_chain, w, sorted(w.ops_chain)),
        unrolled_ops=_op_strings(w.ops_unrolled, w),
        partial_loops=[_partial_loop(lp, w) for lp in w.partial_loops if _op_strings(lp.ops, w)],
        accesses=w.accesses,
        loops=w.loops,
        branches=w.branches,
        early_returns=w.early_returns,
        sites=w.sites,
        helpers=w.helpers,
        notes=w.notes,
        lane_mixing=sorted(w.lane_mixing),
        call_sites=dict(sorted(w.call_sites.items())),
        group_share=w.work_groups.shares(),
    )
    return feats


def analyze_cuda_source(kernel: Kernel, filename: str = "kernel.cu") -> SourceFeatures:
    """Per-thread source features of a CUDA (or HIP) kernel through its C++ for OpenCL translation
    (:func:`kernelcast.cuda.translate`; ``kernel.name`` may carry template arguments). Line
    numbers are those of the preprocessed CUDA source.

    Raises :class:`kernelcast.clang.ParseError` when the source does not parse and
    ``ValueError`` when the kernel is not in it.
    """
    tr = translate(kernel.source, kernel.name, kernel.build_options, filename)
    feats = analyze_source(Kernel(source=tr.source, name=tr.kernel_name, language="opencl",
                                  build_options=tr.build_options), filename="kernel_cuda.clcpp")
    shift = tr.prelude_lines
    for seq in (feats.accesses, feats.loops, feats.branches):
        for x in seq:
            if getattr(x, "line", 0) > shift:
                x.line = x.line - shift
    for lp in feats.partial_loops:
        if lp["line"] > shift:
            lp["line"] -= shift
    feats.kernel_name = kernel.name
    feats.notes = [*tr.notes, *feats.notes]
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


def _partial_loop(lp: PartialLoop, w: _Walker) -> dict[str, Any]:
    """One of :attr:`SourceFeatures.partial_loops`: the trips per entry as an expression (its mean
    over the outer loops' iterations; None where it has none), whether they are a constant the
    compiler sees."""
    trip = lp.trip if lp.trip.printable else average(lp.trip)
    return {"line": lp.line, "trip": trip.to_str() if trip is not None and trip.printable else None,
            "const": lp.trip.is_const(), "size": float(lp.size), "loads": float(lp.loads), "pragma": lp.pragma,
            "ops": _op_strings(lp.ops, w)}


def _op_strings(ops: dict[str, Poly], w: _Walker, keys: Iterable[str] = OP_CLASSES + BUILTIN_CLASSES + (LIBCALL,)
                ) -> dict[str, str]:
    """The printable counts of ``ops`` under ``keys`` (zero counts left out)."""
    out: dict[str, str] = {}
    for k in keys:
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


__all__ = ["analyze_cuda_source", "analyze_source", "analyze_source_text", "symbol_name"]

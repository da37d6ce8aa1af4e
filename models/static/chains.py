"""Loop-carried recurrences: the operations of one trip of a loop that wait for the trip before.

A loop whose trips carry a value (``z = z * z * 0.5f + c``, ``acc = fma(acc, 0.75f, r)``) cannot
start a trip's operations on it before the previous trip's are done: however many operations a
core issues per cycle, a trip takes at least the latency of that chain (``tests/test_chains.py``:
one chain of a multiply and an FMA per trip ran 1.9-2.2x as long as three chains of one operation
each, the same operation count). :func:`carried_chain` reads the chain off the syntax of the loop's
body; the walker counts it per work-item like any operation (``SourceFeatures.chain_ops``) and the
analytical model's CPU class charges scalar code at least its latency (``chain_<class>_ns``,
``calib chain``).

The chain of a trip is the longest path, in operations, from a variable's value at the start of
the trip to a variable's value at its end, through the statements of the body in order: an
assignment gives its variable the chain of its right-hand side, an arithmetic operator adds one
operation of its class (:data:`CHAIN_OPS`) to the longer chain of its operands (``a * b + c`` is
one FMA: OpenCL C contracts it by default; ``(z * z) * 0.5f + d`` ran at 2.35 ns per trip here, a
multiply and an FMA, where a multiply, a multiply and an add would take 3.2), a compound
assignment adds its operator to the chain of its variable; both arms of an ``if``/``?:`` are
followed and the longer kept (a routine weighs :data:`ROUTINE_WEIGHT` operations there). What the
pass does not follow: nested loops (a variable they assign leaves the chain; the nested loop has its
own), calls other than ``fma``/``mad``, ``fmax``/``fmin`` (:data:`CHAIN_CALLS`) and the routines
(their arguments' chain passes through, the call adds nothing), loads (a chain through a loaded
address, a pointer chase, is left out), comparisons, casts and conversions (about a cycle), integer
arithmetic (:data:`CHAIN_OPS`). The loop's own induction variable is left out: the compiler
strength-reduces it. The walker counts the arithmetic of loops whose trips differ between
work-items as it is, that of loops all work-items take alike apart (``uniform_<class>``, but for
the first trip and the :data:`CHAIN_OVERLAP_TRIPS` the core runs beside the work-item before;
``walk_loop``), and the chains of such a loop nested in a loop with barriers (a tile loop's inner
loop) apart again (``inner_<class>``). These are facts about the source; which of the chains a
device pays is the device class's decision (the CPU-runtime class:
``models.analytical.cpu_costs.chain_seconds``).

A call of a math library routine (:func:`routine_class`: sin, exp, log... not sqrt, rsqrt or a
division, which are one instruction) is one operation of its own class on the chain, with its own
latency (calib chain's ``chain_<routine>_ns``: PoCL 3.1, sin 34 ns, exp 19, log 22, against
9.4, 2.2 and 12 ns per call at the scalar rates of 8 independent chains). Those the walker counts in
every loop, but for the first trip where all work-items take the same trips (see ``walk_loop``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.clbuiltins import FAMILY, FAMILY_CALLS, INSTRUCTION_FAMILIES, family_class
from kernelcast.models.static.cursors import type_class

K = ci.CursorKind

#: the class of one operation on a chain, by operand class and operator. Integer operations are
#: left off: they are associative, and the compiler reassociates and splits their chains (calib
#: measured 0.12 ns per multiply of a chain, a fraction of its latency; the loop vectorizer splits
#: a count ``rank += (w < v)`` into lanes)
CHAIN_OPS: dict[tuple[str, str], str] = {
    ("fp32", "+"): "fp32_add", ("fp32", "-"): "fp32_add", ("fp32", "*"): "fp32_mul", ("fp32", "/"): "fp32_div",
    ("fp64", "+"): "fp64_add", ("fp64", "-"): "fp64_add", ("fp64", "*"): "fp64_mul",
}
#: builtins that are operations on a chain, with their class and how many of it one call is: an
#: FMA, counted apart (``fma_call``) because a runtime that calls its builtins out of line charges
#: the call already; ``fmax``/``fmin``, a maximum and the blend that gives a NaN operand's other
#: operand, two adds' latency (PoCL 3.1, a chain of one per trip: 1.13 ns a trip, of one
#: add 0.66, of ``t > acc ? t : acc`` 0.70)
CHAIN_CALLS: dict[str, tuple[str, int]] = {"fma": ("fma_call", 1), "mad": ("fma_call", 1),
                                            "fmax": ("fp32_add", 2), "fmin": ("fp32_add", 2)}
#: how much more a library routine on a chain weighs than an arithmetic operation when the pass
#: keeps the longer of two chains (PoCL 3.1: one call of sin on a chain 35 ns, of exp 18,
#: of log 22, an fp32 FMA 1)
ROUTINE_WEIGHT = 20
#: the arithmetic classes a chain counts in (``SourceFeatures.chain_ops``), each with a latency
#: calib measures (``chain_<class>_ns``; fp64 adds and multiplies take the fp32 ones' where a profile
#: has none of their own: ``models.analytical.cpu_params._chain_latencies``)
CHAIN_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_add", "fp64_mul", "fp64_fma")
#: ``fma``/``mad`` calls on a chain
FMA_CALL = "fma_call"
#: the prefix of an arithmetic class on the chain of a loop every work-item takes alike (the
#: consecutive work-items of scalar code overlap such chains where they are short:
#: ``models.analytical.cpu_costs.chain_seconds``)
UNIFORM_PREFIX = "uniform_"
#: the prefix of an arithmetic class on the chain of a loop every work-item takes alike inside a
#: loop with barriers (a tile loop's inner loop; what a runtime makes of it:
#: ``models.analytical.cpu_costs.chain_seconds``)
INNER_PREFIX = "inner_"
#: trips of such a chain per work-item that the core overlaps with the work-item before (PoCL 3.1:
#: a loop every work-item takes alike with one fp32 add or FMA on its chain, n trips
#: per work-item; per trip 0.24 / 0.40 ns at n = 64, 0.40 / 0.73 at 256, 0.48 / 0.93 at 1,024 and
#: 0.49 / 0.97 at 4,096, the chain latencies being 0.49 / 0.98: 20-64 trips overlapped)
CHAIN_OVERLAP_TRIPS = 40
#: the prefix of a library routine's chain class (:func:`routine_class`), with a latency calib
#: measures too (``chain_<family>_ns``: ``chain_sin_ns`` for ``bi_sin``)
ROUTINE_PREFIX = "bi_"

Chain = Counter  # class -> operations on the path; an empty Counter is a carried value itself

_LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)
_ASSIGN_OPS = {"+=": "+", "-=": "-", "*=": "*", "/=": "/"}


def _weight(chain: Chain) -> int:
    return sum(n * (ROUTINE_WEIGHT if cls.startswith(ROUTINE_PREFIX) else 1) for cls, n in chain.items())


def _longer(*chains: Chain | None) -> Chain | None:
    best: Chain | None = None
    for c in chains:
        if c is not None and (best is None or _weight(c) > _weight(best)):
            best = c
    return best


def routine_class(name: str) -> str | None:
    """The chain class of a call of builtin ``name`` when it is a math library routine (a family of
    :data:`models.static.clbuiltins.FAMILY` that is not one instruction): its family class
    (``bi_sin``, ``bi_native_exp``), else ``None``."""
    base = name
    for pre in ("native_", "half_", "fast_"):
        base = base.removeprefix(pre)
    fam = FAMILY.get(base)
    if fam is None or fam in INSTRUCTION_FAMILIES:
        return None
    return family_class(name)


def _unparen(c: ci.Cursor) -> ci.Cursor:
    while c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR):
        ch = list(c.get_children())
        if len(ch) != 1:
            break
        c = ch[0]
    return c


def _var_key(c: ci.Cursor) -> int | None:
    u = _unparen(c)
    if u.kind == K.DECL_REF_EXPR and u.referenced is not None and u.referenced.kind == K.VAR_DECL:
        return u.referenced.hash
    return None


def _is_mul(c: ci.Cursor) -> bool:
    u = _unparen(c)
    return u.kind == K.BINARY_OPERATOR and _cx.binary_op(u) == "*" and type_class(u.type)[0] in ("fp32", "fp64")


def _plus(chain: Chain | None, t: ci.Type, op: str) -> Chain | None:
    if chain is None:
        return None
    out = Counter(chain)
    cls = CHAIN_OPS.get((type_class(t)[0], op))
    if cls is not None:
        out[cls] += 1
    return out


class _Pass:
    def __init__(self, carried: Iterable[int]) -> None:
        self.depth: dict[int, Chain] = {k: Counter() for k in carried}

    def expr(self, c: ci.Cursor) -> Chain | None:
        k = c.kind
        if k == K.DECL_REF_EXPR:
            key = _var_key(c)
            return self.depth.get(key) if key is not None else None
        if k == K.BINARY_OPERATOR:
            op = _cx.binary_op(c)
            ch = list(c.get_children())
            if op == "=" and len(ch) == 2:
                return self.assign(ch[0], self.expr(ch[1]))
            if op == ",":
                for x in ch[:-1]:
                    self.expr(x)
                return self.expr(ch[-1])
            if op in ("+", "-") and len(ch) == 2 and type_class(c.type)[0] in ("fp32", "fp64"):
                mul = next((x for x in ch if _is_mul(x)), None)
                if mul is not None:
                    # OpenCL C contracts a * b + c into one FMA (FP_CONTRACT is on by default)
                    got = _longer(*(self.expr(x) for x in list(_unparen(mul).get_children())
                                    + [x for x in ch if x is not mul]))
                    if got is None:
                        return None
                    got = Counter(got)
                    got["fp64_fma" if type_class(c.type)[0] == "fp64" else "fp32_fma"] += 1
                    return got
            chains = [self.expr(x) for x in ch]
            if op in ("+", "-", "*", "/"):
                return _plus(_longer(*chains), c.type, op)
            return _longer(*chains)      # comparisons, logic, shifts, bit operations: about a cycle
        if k == K.COMPOUND_ASSIGNMENT_OPERATOR:
            ch = list(c.get_children())
            rhs = self.expr(ch[1])
            key = _var_key(ch[0])
            aop = _ASSIGN_OPS.get(_cx.binary_op(c))
            cur = self.depth.get(key) if key is not None else None
            new = _longer(cur, rhs)
            if aop in ("+", "-") and new is not None and _is_mul(ch[1]) and \
                    type_class(ch[0].type)[0] in ("fp32", "fp64"):
                new = Counter(new)             # s += a * b: one FMA
                new["fp64_fma" if type_class(ch[0].type)[0] == "fp64" else "fp32_fma"] += 1
            else:
                new = _plus(new, ch[0].type, aop) if aop else new
            return self.assign(ch[0], new)
        if k == K.UNARY_OPERATOR:
            op = _cx.unary_op(c)
            ch = list(c.get_children())
            if op in ("post++", "post--", "pre++", "pre--") and ch:
                key = _var_key(ch[0])
                cur = self.depth.get(key) if key is not None else None
                return self.assign(ch[0], _plus(cur, ch[0].type, "+"))
            if op == "*":
                for x in ch:
                    self.expr(x)
                return None                # a load
            return _longer(*(self.expr(x) for x in ch))
        if k == K.ARRAY_SUBSCRIPT_EXPR:
            for x in c.get_children():
                self.expr(x)
            return None                    # a load (or a private array element: not followed)
        if k == K.CALL_EXPR:
            args = [self.expr(x) for x in c.get_arguments()]
            got = _longer(*args)
            cls, ops = CHAIN_CALLS.get(c.spelling) or (routine_class(c.spelling), FAMILY_CALLS.get(c.spelling, 1))
            if cls is not None and got is not None:
                got = Counter(got)
                got[cls] += ops
            return got
        if k == K.CONDITIONAL_OPERATOR:
            return _longer(*(self.expr(x) for x in c.get_children()))
        if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL, K.STRING_LITERAL):
            return None
        return _longer(*(self.expr(x) for x in c.get_children()))

    def assign(self, lhs: ci.Cursor, chain: Chain | None) -> Chain | None:
        key = _var_key(lhs)
        if key is None:
            self.expr(lhs)                 # a store: its address may read carried values
            return chain
        if chain is None:
            self.depth.pop(key, None)
        else:
            self.depth[key] = chain
        return chain

    def stmt(self, c: ci.Cursor) -> None:
        k = c.kind
        if k in _LOOPS:
            # a nested loop has its own chain; what it assigns leaves this one
            for x in c.walk_preorder():
                key = None
                if x.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
                    kids = list(x.get_children())
                    if kids and (x.kind == K.COMPOUND_ASSIGNMENT_OPERATOR or _cx.binary_op(x) == "="):
                        key = _var_key(kids[0])
                elif x.kind == K.UNARY_OPERATOR and _cx.unary_op(x) in ("post++", "post--", "pre++", "pre--"):
                    kids = list(x.get_children())
                    key = _var_key(kids[0]) if kids else None
                if key is not None:
                    self.depth.pop(key, None)
            return
        if k == K.COMPOUND_STMT:
            for x in c.get_children():
                self.stmt(x)
            return
        if k == K.IF_STMT:
            ch = list(c.get_children())
            self.expr(ch[0])
            before = dict(self.depth)
            arms = []
            for arm in ch[1:3]:
                self.depth = dict(before)
                self.stmt(arm)
                arms.append(self.depth)
            if len(arms) == 1:
                arms.append(before)
            merged: dict[int, Chain] = {}
            for key in set(arms[0]) | set(arms[1]):
                got = _longer(arms[0].get(key), arms[1].get(key))
                if got is not None:
                    merged[key] = got
            self.depth = merged
            return
        if k == K.DECL_STMT:
            for d in c.get_children():
                if d.kind != K.VAR_DECL:
                    continue
                init = [x for x in d.get_children() if x.kind != K.TYPE_REF]
                got = _longer(*(self.expr(x) for x in init)) if init else None
                if got is not None:
                    self.depth[d.hash] = got
                else:
                    self.depth.pop(d.hash, None)
            return
        if k in (K.RETURN_STMT, K.BREAK_STMT, K.CONTINUE_STMT, K.NULL_STMT):
            for x in c.get_children():
                self.expr(x)
            return
        if k in (K.SWITCH_STMT, K.CASE_STMT, K.DEFAULT_STMT):
            for x in c.get_children():
                self.stmt(x)
            return
        self.expr(c)


def carried_chain(parts: list[ci.Cursor], carried: Iterable[int], induction: int | None = None) -> dict[str, int]:
    """The operations, by class (:data:`CHAIN_CLASSES`), on the longest chain from a carried
    variable's value at the start of a trip through ``parts`` (condition, increment and body, in
    that order of the list) to a carried variable's value at its end (module docstring). ``carried``:
    the keys of the variables assigned in the loop and declared before it; ``induction``: the
    loop's induction variable, left out. Empty when no carried value depends on itself."""
    keys = [k for k in carried if k != induction]
    if not keys:
        return {}
    p = _Pass(keys)
    for part in parts:
        p.stmt(part)
    best = _longer(*(p.depth.get(k) for k in keys))
    return {k: int(v) for k, v in sorted(best.items()) if v} if best else {}

"""What a loop's syntax says: header parts, induction steps, carried variables and their
loop-variant dependencies (no evaluation; :mod:`models.static.trips` turns them into trip counts).

``for (init; cond; inc)``, ``while`` and ``do`` loops are read alike: a variable is an induction
candidate when it is assigned once in the loop, by ``i++``/``i--``/``i += C``/``i -= C``/
``i = i + C``/``i *= F``/``i /= F``/``i <<= k``/``i >>= k`` in the increment or at the top level
of the body.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.cursors import type_class, unwrap
from kernelcast.models.static.expr import DATA, GRP, ITER, VAR, WI
from kernelcast.models.static.values import Val

K = ci.CursorKind
TK = ci.TypeKind

#: constant trip counts up to this are taken as fully unrolled by the compiler (LLVM's full unroll
#: of small constant loops), leaving the work-item loop innermost and vectorizable, unless the body
#: calls a math library routine (:func:`blocks_full_unroll`)
UNROLL_MAX_TRIP = 16
#: a ``#pragma unroll`` without a count unrolls a constant loop of up to this many trips fully
PRAGMA_UNROLL_MAX_TRIP = 1024


def unroll_pragma(c: ci.Cursor) -> int | None:
    """The count of the unrolling pragma that statement ``c`` (libclang's unexposed attributed
    statement) puts on the loop it holds: ``#pragma unroll [N]`` (0 without a count), ``#pragma
    nounroll`` (1), ``#pragma clang loop unroll(full|enable|disable)`` / ``unroll_count(N)``; None
    where ``c`` is no such pragma."""
    toks: list[str] = []
    for t in c.get_tokens():
        if t.spelling in ("for", "while", "do"):
            break
        toks.append(t.spelling)
        if len(toks) == 12:
            break
    if toks[:2] != ["#", "pragma"] or len(toks) < 3:
        return None
    if toks[2] == "nounroll":
        return 1
    if toks[2] == "unroll":
        arg = toks[4] if len(toks) > 5 and toks[3] == "(" else toks[3] if len(toks) > 3 else ""
        return int(arg, 0) if arg.isdigit() else 0
    if toks[2:4] == ["clang", "loop"]:
        for i in range(4, len(toks) - 3):
            if toks[i] in ("unroll", "unroll_count") and toks[i + 1] == "(":
                arg = toks[i + 2]
                if toks[i] == "unroll_count":
                    return int(arg, 0) if arg.isdigit() else None
                return {"full": 0, "enable": 0, "disable": 1}.get(arg)
    return None


def blocks_full_unroll(body: ci.Cursor, routines: bool = True) -> bool:
    """Whether a loop body keeps the compiler from unrolling the loop fully: an exit (``break``,
    ``return``, ``goto``) or, with ``routines``, a call of a math library routine (inlined, too large
    for the full-unroll threshold: :func:`models.static.chains.routine_class`)."""
    from kernelcast.models.static.chains import routine_class

    for x in body.walk_preorder():
        if x.kind in (K.BREAK_STMT, K.RETURN_STMT, K.GOTO_STMT):
            return True
        if routines and x.kind == K.CALL_EXPR and routine_class(x.spelling) is not None:
            return True
    return False


class Induction(NamedTuple):
    """An induction candidate: ``name op= step`` (``step`` None for ``++``/``--``)."""

    name: str
    how: str
    step: ci.Cursor | None
    where: str


def for_parts(c: ci.Cursor, ch: list[ci.Cursor]) -> tuple[ci.Cursor | None, ci.Cursor | None,
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


def comma_split(c: ci.Cursor) -> list[ci.Cursor]:
    """The operands of a comma expression (``i++, j++``)."""
    s = unwrap(c)
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == ",":
        a, b = list(s.get_children())
        return comma_split(a) + comma_split(b)
    return [s]


def chain_operands(c: ci.Cursor, op: str, out: list[ci.Cursor]) -> None:
    """Append the operands of an ``op`` chain (``a op b op c``, e.g. ``&&`` or ``||``) to ``out``."""
    s = unwrap(c)
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == op:
        a, b = list(s.get_children())
        chain_operands(a, op, out)
        chain_operands(b, op, out)
    else:
        out.append(s)


def conjuncts(c: ci.Cursor, out: list[ci.Cursor]) -> None:
    """Append the operands of a ``&&`` chain to ``out``."""
    chain_operands(c, "&&", out)


def step_of(s: ci.Cursor) -> tuple[int, str, str, ci.Cursor | None] | None:
    """``(var key, name, how, step cursor)`` for ``i++``, ``i += C``, ``i = i * F``, ``i >>= k``..."""
    s = unwrap(s)
    if s.kind == K.UNARY_OPERATOR:
        op = _cx.unary_op(s)
        if op in ("post++", "pre++", "post--", "pre--"):
            x = unwrap(list(s.get_children())[0])
            if x.kind == K.DECL_REF_EXPR and x.referenced is not None:
                return x.referenced.hash, x.spelling, "++" if "++" in op else "--", None
        return None
    if s.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
        op = _cx.binary_op(s)
        lhs, rhs = list(s.get_children())
        x = unwrap(lhs)
        if x.kind == K.DECL_REF_EXPR and x.referenced is not None and op in ("+=", "-=", "*=", "/=", "<<=", ">>="):
            return x.referenced.hash, x.spelling, op[:-1], rhs
        return None
    if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "=":
        lhs, rhs = list(s.get_children())
        x = unwrap(lhs)
        r = unwrap(rhs)
        if x.kind == K.DECL_REF_EXPR and x.referenced is not None and r.kind == K.BINARY_OPERATOR:
            op = _cx.binary_op(r)
            a, b = list(r.get_children())
            sa = unwrap(a)
            if op in ("+", "-", "*", "/", "<<", ">>") and sa.kind == K.DECL_REF_EXPR and \
                    sa.referenced is not None and sa.referenced.hash == x.referenced.hash:
                return x.referenced.hash, x.spelling, op, b
            sb = unwrap(b)
            if op in ("+", "*") and sb.kind == K.DECL_REF_EXPR and sb.referenced is not None and \
                    sb.referenced.hash == x.referenced.hash:
                return x.referenced.hash, x.spelling, op, a
    return None


def iter_refs(parts: Iterable[ci.Cursor]) -> Iterable[ci.Cursor]:
    """Every reference to a declaration in ``parts``."""
    for p in parts:
        for x in p.walk_preorder():
            if x.kind == K.DECL_REF_EXPR and x.referenced is not None:
                yield x


def assigned(parts: list[ci.Cursor]) -> dict[int, list[ci.Cursor | None]]:
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


#: compound assignments that make a variable a reduction the loop vectorizer can split into lanes
REDUCTION_OPS = ("+=", "-=", "|=", "&=", "^=")


def reduction_only(parts: list[ci.Cursor], keys: set[int]) -> bool:
    """Whether every assignment in ``parts`` to a variable of ``keys`` is a reduction step: a
    compound ``+=``/``-=``/``|=``/``&=``/``^=`` whose right-hand side does not read it, ``++``/``--``,
    or ``s = max(s, e)`` / ``min`` with ``e`` not reading it (not ``s = s * a + c``, a recurrence
    the loop vectorizer cannot split)."""
    for p in parts:
        for x in p.walk_preorder():
            if x.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
                lhs, rhs = list(x.get_children())
                k = _base_var(lhs)
                if k in keys and (_cx.binary_op(x) not in REDUCTION_OPS or _reads(rhs, k)):
                    return False
            elif x.kind == K.BINARY_OPERATOR and _cx.binary_op(x) == "=":
                lhs, rhs = list(x.get_children())
                k = _base_var(lhs)
                if k in keys and not _min_max_step(rhs, k):
                    return False
            elif x.kind == K.UNARY_OPERATOR and _cx.unary_op(x) == "&":
                ch = list(x.get_children())
                if ch and _base_var(ch[0]) in keys:
                    return False
    return True


def _reads(c: ci.Cursor, key: int | None) -> bool:
    return any(r.kind == K.DECL_REF_EXPR and r.referenced is not None and r.referenced.hash == key
               for r in c.walk_preorder())


def _min_max_step(rhs: ci.Cursor, key: int | None) -> bool:
    """``rhs`` is ``max(s, e)`` or ``min(s, e)`` (either order) of the variable ``key`` and an ``e``
    that does not read it: an integer min / max reduction, which the loop vectorizer splits into
    lanes (its callers admit integer variables only: a float ``fmin`` chain is not reordered)."""
    c = rhs
    while c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR):
        ch = list(c.get_children())
        if len(ch) != 1:
            return False
        c = ch[0]
    if c.kind != K.CALL_EXPR or c.spelling not in ("max", "min"):
        return False
    args = list(c.get_arguments())
    if len(args) != 2:
        return False
    mine = [_base_var(a) == key for a in args]
    return sum(mine) == 1 and not _reads(args[mine.index(False)], key)


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


def assigned_step(s: ci.Cursor) -> ci.Cursor | None:
    """The step an assignment's value makes, as in the increment ``k = j++`` (the edge loop of a
    polygon: ``k`` trails ``j``), which steps ``j``; None for any other statement."""
    s = unwrap(s)
    if s.kind != K.BINARY_OPERATOR or _cx.binary_op(s) != "=":
        return None
    rhs = unwrap(list(s.get_children())[1])
    if rhs.kind == K.UNARY_OPERATOR and _cx.unary_op(rhs) in ("post++", "pre++", "post--", "pre--"):
        return rhs
    if rhs.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
        return rhs
    return None


def induction_candidates(inc: ci.Cursor | None, body: ci.Cursor,
                         carried: dict[int, list[ci.Cursor | None]]) -> dict[int, Induction]:
    """Induction candidates among the ``carried`` variables: stepped once, in the increment or by a
    top-level statement of the body."""
    cands: dict[int, Induction] = {}
    inc_stmts: list[ci.Cursor] = []
    if inc is not None:
        for s in comma_split(inc):
            inc_stmts.append(s)
            nested = assigned_step(s)
            if nested is not None:
                inc_stmts.append(nested)
    top_body = list(body.get_children()) if body.kind == K.COMPOUND_STMT else [body]
    for s in inc_stmts + top_body:
        r = step_of(s)
        if r is not None and r[0] in carried and len(carried[r[0]]) == 1:
            key, name, how, step_c = r
            cands[key] = Induction(name, how, step_c, "inc" if s in inc_stmts else "body")
    return cands


def variant_deps(carried: dict[int, list[ci.Cursor | None]], vars_: dict[int, Val]) -> dict[int, frozenset[str]]:
    """Dependencies of the loop-variant values of the carried variables (syntactic, fixed point)."""
    dep_map = {k: (vars_[k].deps if k in vars_ else frozenset()) for k in carried}
    for _ in range(3):
        for k, sites in carried.items():
            d = set(dep_map[k]) | {ITER}
            for rhs in sites:
                if rhs is not None:
                    d |= _syntactic_deps(rhs, vars_, dep_map)
            dep_map[k] = frozenset(d)
    return dep_map


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

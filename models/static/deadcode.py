"""Dead loops of a kernel body: loops whose results never reach memory, as the compiler sees them.

A loop in the kernel body is *dead* (the compiler deletes it: LLVM's dead-code and loop-deletion
passes at -O2, which OpenCL runtimes use) when

* it has no side effect: no store through a pointer or into an array, no atomic, ``vstore``,
  image write, barrier, fence, ``printf``, asynchronous copy, call to a helper function that has
  one (helpers are followed three calls deep), ``return`` or ``goto``; and
* every variable it assigns that is declared outside it is *dead after it*: either it is not
  *useful* (flow-insensitively, its value never flows into a store, an atomic, a side-effecting
  call or a condition controlling one), or every path from the loop's exit to a read of it first
  overwrites it (``acc = expr`` not reading ``acc``, or both sides of an ``if``/``else`` doing so).

The check is conservative: anything it does not follow (a ``break``/``continue``/``goto`` on the
path after the loop, a loop after it that mentions the variable, a ``switch``) counts as a read.
Only loops of the kernel body itself are examined (not loops of inlined helpers). The result is a
set of loop keys (:func:`loop_key`) with a short reason each; the walker counts such a loop zero
times and says so in its :class:`~models.static.features.LoopInfo` (``trip_kind`` ``dead``).
Dead loops whose variables were read only by other dead loops are found by iterating (twice).
:func:`closed_form_loops` finds loops the compiler replaces by a formula (integer sums of
polynomials in the counter, LLVM scalar evolution); the walker counts one trip of them (the
hoisted loop-invariant values and the formula; ``trip_kind`` ``closed_form``).
"""

from __future__ import annotations

from collections.abc import Iterable

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.cursors import ARRAY_KINDS, unwrap

K = ci.CursorKind

LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)
#: builtins with side effects (prefixes)
SIDE_EFFECT_CALLS = ("atomic_", "atom_", "vstore", "write_image", "barrier", "work_group_barrier", "mem_fence",
                     "read_mem_fence", "write_mem_fence", "atomic_work_item_fence", "printf",
                     "async_work_group", "wait_group_events", "prefetch", "sub_group_barrier")

Key = tuple[int, int, int]


def loop_key(c: ci.Cursor) -> Key:
    """Identity of a cursor that survives re-walking: kind and source extent offsets."""
    return (c.kind.value, c.extent.start.offset, c.extent.end.offset)


def _inside(c: ci.Cursor, outer: Key) -> bool:
    return outer[1] <= c.extent.start.offset and c.extent.end.offset <= outer[2]


def _var_key(c: ci.Cursor) -> int | None:
    if c.kind == K.DECL_REF_EXPR and c.referenced is not None and c.referenced.kind in (K.VAR_DECL, K.PARM_DECL):
        return int(c.referenced.hash)
    return None


def _lhs_var(lhs: ci.Cursor) -> int | None:
    """The variable a plain assignment writes, or None when it writes memory (array, pointer, member)."""
    return _var_key(unwrap(lhs))


def _refs(c: ci.Cursor, ignored: list[Key]) -> set[int]:
    out: set[int] = set()
    for x in c.walk_preorder():
        k = _var_key(x)
        if k is not None and not any(_inside(x, ig) for ig in ignored):
            out.add(k)
    return out


def _is_user_function(c: ci.Cursor) -> bool:
    ref = c.referenced
    if ref is None:
        return False
    d = ref.get_definition()
    return d is not None and any(ch.kind == K.COMPOUND_STMT for ch in d.get_children())


#: how deep :func:`side_effect` follows calls of helper functions
MAX_CALL_DEPTH = 3


def _pure_call(call: ci.Cursor, depth: int) -> bool:
    """Whether a call of a helper function has no effect but its result: its body (followed
    :data:`MAX_CALL_DEPTH` calls deep) stores nothing through a pointer, calls nothing with an
    effect and takes no address; the compiler inlines it, and a result nobody reads is deleted."""
    ref = call.referenced
    d = ref.get_definition() if ref is not None else None
    if d is None or depth >= MAX_CALL_DEPTH:
        return False
    body = next((ch for ch in d.get_children() if ch.kind == K.COMPOUND_STMT), None)
    return body is not None and side_effect(body, depth + 1, in_function=True) is None


def side_effect(c: ci.Cursor, depth: int = 0, in_function: bool = False) -> str | None:
    """Why a statement has an effect outside its variables (None: it has none). Calls of helper
    functions are followed (:func:`_pure_call`); ``in_function``: ``c`` is a helper's body, whose
    ``return`` only ends the call."""
    for x in c.walk_preorder():
        k = x.kind
        if k in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            op = _cx.binary_op(x)
            if op == "=" or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
                lhs = list(x.get_children())[0]
                if _lhs_var(lhs) is None:
                    return "stores to memory"
        elif k == K.UNARY_OPERATOR:
            op = _cx.unary_op(x)
            if op in ("post++", "post--", "pre++", "pre--"):
                ch = list(x.get_children())
                if ch and _lhs_var(ch[0]) is None:
                    return "stores to memory"
            elif op == "&":
                return "takes an address"
        elif k == K.CALL_EXPR:
            name = x.spelling
            if name.startswith(SIDE_EFFECT_CALLS):
                return f"calls {name}"
            if _is_user_function(x) and not _pure_call(x, depth):
                return f"calls {name or 'a function'}"
        elif k == K.RETURN_STMT and in_function:
            continue
        elif k in (K.RETURN_STMT, K.GOTO_STMT, K.INDIRECT_GOTO_STMT, K.ASM_STMT):
            return "returns or jumps"
    return None


def _conditions(c: ci.Cursor) -> list[ci.Cursor]:
    """The controlling expressions of a statement (if / loop / switch)."""
    ch = list(c.get_children())
    if c.kind in (K.IF_STMT, K.WHILE_STMT, K.SWITCH_STMT) and ch:
        return [ch[0]]
    if c.kind == K.DO_STMT and ch:
        return [ch[-1]]
    if c.kind == K.FOR_STMT:
        return ch[:-1]
    return []


def useful_vars(body: ci.Cursor, ignored: list[Key]) -> set[int]:
    """Variables whose value may reach a side effect (flow-insensitive fixed point)."""
    # assignment sites: (var, refs of the right-hand side, refs of the controlling conditions)
    sites: list[tuple[int, set[int], set[int]]] = []
    sinks: set[int] = set()

    def visit(c: ci.Cursor, conds: set[int]) -> None:
        if any(loop_key(c) == ig for ig in ignored):
            return
        k = c.kind
        if k in (K.IF_STMT, K.WHILE_STMT, K.DO_STMT, K.FOR_STMT, K.SWITCH_STMT):
            cs = set(conds)
            for e in _conditions(c):
                cs |= _refs(e, ignored)
            for ch in c.get_children():
                visit(ch, cs)
            return
        if k == K.VAR_DECL:
            init = [x for x in c.get_children() if x.kind.is_expression()]
            refs = set().union(*(_refs(x, ignored) for x in init)) if init else set()
            sites.append((int(c.hash), refs, conds))
            for x in init:
                visit(x, conds)
            return
        if k in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            op = _cx.binary_op(c)
            if op == "=" or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
                lhs, rhs = list(c.get_children())
                v = _lhs_var(lhs)
                if v is None:
                    sinks.update(_refs(c, ignored) | conds)
                else:
                    refs = _refs(rhs, ignored) | ({v} if k == K.COMPOUND_ASSIGNMENT_OPERATOR else set())
                    sites.append((v, refs, conds))
                visit(rhs, conds)
                return
        if k == K.CALL_EXPR and (c.spelling.startswith(SIDE_EFFECT_CALLS) or _is_user_function(c)):
            sinks.update(_refs(c, ignored) | conds)
        if k == K.RETURN_STMT:
            sinks.update(_refs(c, ignored) | conds)
        if k == K.UNARY_OPERATOR and _cx.unary_op(c) == "&":
            sinks.update(_refs(c, ignored))
        if k == K.UNARY_OPERATOR and _cx.unary_op(c) in ("post++", "post--", "pre++", "pre--"):
            ch = list(c.get_children())
            if ch and _lhs_var(ch[0]) is None:
                sinks.update(_refs(c, ignored) | conds)
        for ch in c.get_children():
            visit(ch, conds)

    visit(body, set())
    useful = set(sinks)
    changed = True
    while changed:
        changed = False
        for v, refs, conds in sites:
            if v in useful:
                new = (refs | conds) - useful
                if new:
                    useful |= new
                    changed = True
    return useful


def _has_jump(c: ci.Cursor) -> bool:
    """A break / continue / goto in ``c`` that leaves it (not inside a nested loop or switch)."""
    def rec(x: ci.Cursor, nested: bool) -> bool:
        k = x.kind
        if k in (K.GOTO_STMT, K.INDIRECT_GOTO_STMT):
            return True
        if k in (K.BREAK_STMT, K.CONTINUE_STMT) and not nested:
            return True
        inner = nested or k in LOOPS or k == K.SWITCH_STMT
        return any(rec(ch, inner) for ch in x.get_children())
    return rec(c, False)


class _Liveness:
    """Backward liveness of variables on the AST of one kernel body (module docstring)."""

    MAX_DEPTH = 3

    def __init__(self, parents: dict[Key, ci.Cursor], ignored: list[Key]) -> None:
        self.parents = parents
        self.ignored = ignored

    def dead_def(self, c: ci.Cursor, v: int, depth: int) -> bool:
        """Whether ``c`` is ``x = f(v)`` / ``T x = f(v)`` with no side effect and ``x`` dead after it."""
        if depth >= self.MAX_DEPTH or side_effect(c) is not None:
            return False
        s = unwrap(c)
        target: int | None = None
        if s.kind == K.DECL_STMT:
            decls = list(s.get_children())
            if len(decls) == 1 and decls[0].kind == K.VAR_DECL:
                target = int(decls[0].hash)
        elif s.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR) and (
                s.kind == K.COMPOUND_ASSIGNMENT_OPERATOR or _cx.binary_op(s) == "="):
            target = _lhs_var(list(s.get_children())[0])
        if target is None or target == v:
            return False
        return not self.live_after(c, target, depth + 1)

    def first_effect(self, c: ci.Cursor, v: int, depth: int = 0) -> str | None:
        """What a statement first does to variable ``v``: ``read``, ``kill`` (overwritten without
        being read) or None (neither, on some path)."""
        ig = self.ignored
        if any(loop_key(c) == x for x in ig):
            return None
        refs = _refs(c, ig)
        if _has_jump(c):
            return "read"
        if v not in refs:
            return None
        k = c.kind
        s = unwrap(c)
        if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "=":
            lhs, rhs = list(s.get_children())
            if _lhs_var(lhs) == v and v not in _refs(rhs, ig):
                return "kill"
        if k == K.COMPOUND_STMT:
            for ch in c.get_children():
                e = self.first_effect(ch, v, depth)
                if e is not None:
                    return e
            return None
        if k == K.IF_STMT:
            ch = list(c.get_children())
            if v in _refs(ch[0], ig):
                return "read"
            e_then = self.first_effect(ch[1], v, depth)
            e_else = self.first_effect(ch[2], v, depth) if len(ch) > 2 else None
            if "read" in (e_then, e_else):
                return "read"
            if e_then == "kill" and e_else == "kill":
                return "kill"
            return None
        if self.dead_def(c, v, depth):
            return None
        return "read"

    def effect_before(self, container: ci.Cursor, target: Key, v: int, depth: int) -> str | None:
        """The first effect on ``v`` from the start of ``container`` down to the statement ``target``."""
        if loop_key(container) == target:
            return None
        ch = list(container.get_children())
        if container.kind == K.COMPOUND_STMT:
            for x in ch:
                if _inside(x, target):
                    return self.effect_before(x, target, v, depth)
                e = self.first_effect(x, v, depth)
                if e is not None:
                    return e
            return None
        if container.kind in LOOPS or container.kind in (K.IF_STMT, K.SWITCH_STMT):
            if any(v in _refs(x, self.ignored) for x in _conditions(container)):
                return "read"
        for x in ch:
            if _inside(x, target):
                return self.effect_before(x, target, v, depth)
        return None

    def live_after(self, stmt: ci.Cursor, v: int, depth: int = 0) -> bool:
        """Whether ``v`` may be read after ``stmt`` before being overwritten."""
        target = loop_key(stmt)
        cur = stmt
        while True:
            parent = self.parents.get(loop_key(cur))
            if parent is None:
                return False
            pk = parent.kind
            if pk == K.COMPOUND_STMT:
                after = False
                for x in parent.get_children():
                    if loop_key(x) == loop_key(cur):
                        after = True
                        continue
                    if after:
                        e = self.first_effect(x, v, depth)
                        if e == "read":
                            return True
                        if e == "kill":
                            return False
            elif pk in LOOPS:
                if any(v in _refs(x, self.ignored) for x in _conditions(parent)):
                    return True
                body = list(parent.get_children())[-1] if pk != K.DO_STMT else list(parent.get_children())[0]
                if self.effect_before(body, target, v, depth) == "read":
                    return True
            elif pk in (K.SWITCH_STMT, K.CASE_STMT, K.DEFAULT_STMT, K.LABEL_STMT):
                return True
            elif pk not in (K.IF_STMT, K.DECL_STMT) and not pk.is_statement():
                return True
            cur = parent


def _parents(body: ci.Cursor) -> dict[Key, ci.Cursor]:
    out: dict[Key, ci.Cursor] = {}
    stack = [body]
    while stack:
        c = stack.pop()
        for ch in c.get_children():
            out[loop_key(ch)] = c
            stack.append(ch)
    return out


def _loops(body: ci.Cursor) -> Iterable[ci.Cursor]:
    for x in body.walk_preorder():
        if x.kind in LOOPS:
            yield x


def carried(loop: ci.Cursor) -> set[int]:
    """Variables the loop assigns that are declared outside it."""
    declared = {int(x.hash) for x in loop.walk_preorder() if x.kind == K.VAR_DECL}
    out: set[int] = set()
    for x in loop.walk_preorder():
        k = x.kind
        if k in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            op = _cx.binary_op(x)
            if op == "=" or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
                v = _lhs_var(list(x.get_children())[0])
                if v is not None:
                    out.add(v)
        elif k == K.UNARY_OPERATOR and _cx.unary_op(x) in ("post++", "post--", "pre++", "pre--"):
            ch = list(x.get_children())
            v = _lhs_var(ch[0]) if ch else None
            if v is not None:
                out.add(v)
    return out - declared


def dead_loops(body: ci.Cursor) -> dict[Key, str]:
    """Dead loops of a kernel body: loop key -> reason (module docstring)."""
    parents = _parents(body)
    loops = list(_loops(body))
    dead: dict[Key, str] = {}
    for _round in range(2):
        ignored = list(dead)
        useful = useful_vars(body, ignored)
        lv = _Liveness(parents, ignored)
        found = False
        for lp in loops:
            key = loop_key(lp)
            if key in dead or any(_inside(lp, d) for d in dead):
                continue
            if side_effect(lp) is not None:
                continue
            vs = carried(lp)
            unused = [v for v in vs if v not in useful]
            killed = [v for v in vs if v in useful and not lv.live_after(lp, v)]
            if len(unused) + len(killed) == len(vs):
                why = "its results are never used" if not killed else "its results are overwritten before use"
                dead[key] = why
                found = True
        if not found:
            break
    return dead


def dead_statements(body: ci.Cursor, loops: dict[Key, str] | None = None) -> dict[Key, str]:
    """Statements of a kernel body the compiler deletes (dead-store elimination): a declaration
    of one non-array variable with an initializer, or an assignment ``x = expr`` to a variable,
    with no side effect, whose variable is dead after it (:class:`_Liveness`; ``loops``: the dead
    loops, whose reads do not count). ``v = a ? b : pow(fabs(m), 0.5f); if (c) v = x; else v = y;``
    computes nothing (synth_stencil_000282, seed 23: 4.9x too slow when its ``pow`` was charged).
    Keys as :func:`loop_key`, with a short reason."""
    parents = _parents(body)
    lv = _Liveness(parents, list(loops or {}))
    out: dict[Key, str] = {}
    for x in body.walk_preorder():
        target: int | None = None
        if x.kind == K.DECL_STMT:
            decls = list(x.get_children())
            if len(decls) == 1 and decls[0].kind == K.VAR_DECL and \
                    decls[0].type.get_canonical().kind not in ARRAY_KINDS:
                if any(ch.kind.is_expression() for ch in decls[0].get_children()):
                    target = int(decls[0].hash)
        elif x.kind == K.BINARY_OPERATOR and _cx.binary_op(x) == "=" and parents.get(loop_key(x)) is not None \
                and parents[loop_key(x)].kind == K.COMPOUND_STMT:
            target = _lhs_var(list(x.get_children())[0])
        if target is None or side_effect(x) is not None or any(_inside(x, d) for d in (loops or {})):
            continue
        if not lv.live_after(x, target):
            out[loop_key(x)] = "its value is overwritten or never read"
    return out


def _loop_variant(lp: ci.Cursor) -> set[int]:
    """Variables that change in the loop: assigned in it, or declared in it."""
    declared = {int(x.hash) for x in lp.walk_preorder() if x.kind == K.VAR_DECL}
    return carried(lp) | declared


def _polynomial(e: ci.Cursor, variant: set[int]) -> bool:
    """Whether an integer expression is a polynomial (+, -, *) in the loop-variant variables:
    other operations (/, %, shifts, comparisons, calls) only on loop-invariant operands."""
    s = unwrap(e)
    k = s.kind
    if k in (K.INTEGER_LITERAL, K.CHARACTER_LITERAL):
        return True
    if k == K.DECL_REF_EXPR:
        return True
    if not (_refs(s, []) & variant):
        return True         # loop-invariant: hoisted out of the loop
    if k in (K.PAREN_EXPR, K.UNEXPOSED_EXPR, K.CSTYLE_CAST_EXPR):
        ch = list(s.get_children())
        return len(ch) >= 1 and _polynomial(ch[-1], variant)
    if k == K.UNARY_OPERATOR and _cx.unary_op(s) in ("-", "+"):
        return _polynomial(list(s.get_children())[0], variant)
    if k == K.BINARY_OPERATOR and _cx.binary_op(s) in ("+", "-", "*"):
        a, b = list(s.get_children())
        return _polynomial(a, variant) and _polynomial(b, variant)
    return False


def _hoistable_decls(lp: ci.Cursor, variant: set[int]) -> tuple[set[int], set[int]]:
    """The variables declared in the loop that hold a loop-invariant value (an ``int``/``float``
    scalar initialised from loop-invariant values and never assigned: LICM hoists it), and the
    variant set without them (to a fixed point: one such value may feed another)."""
    from kernelcast.models.static.cursors import type_class

    assigned = carried(lp) | {v for x in lp.walk_preorder() if x.kind in (
        K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR, K.UNARY_OPERATOR) for v in _assigned_by(x)}
    decls = [x for x in lp.walk_preorder() if x.kind == K.VAR_DECL]
    invariant: set[int] = set()
    changed = True
    while changed:
        changed = False
        for d in decls:
            v = int(d.hash)
            if v in invariant or v in assigned or type_class(d.type)[0] not in ("int", "float"):
                continue
            init = [c for c in d.get_children() if c.kind.is_expression()]
            if len(init) == 1 and not (_refs(init[0], []) & (variant - invariant)):
                invariant.add(v)
                changed = True
    return invariant, variant - invariant


def _assigned_by(x: ci.Cursor) -> set[int]:
    """The variable an assignment, compound assignment or increment writes (empty otherwise)."""
    if x.kind == K.UNARY_OPERATOR:
        if _cx.unary_op(x) not in ("post++", "post--", "pre++", "pre--"):
            return set()
    elif x.kind == K.BINARY_OPERATOR and _cx.binary_op(x) != "=":
        return set()
    ch = list(x.get_children())
    v = _lhs_var(ch[0]) if ch else None
    return set() if v is None else {v}


def closed_form_loops(body: ci.Cursor) -> dict[Key, str]:
    """Loops the compiler replaces by their closed form (LLVM scalar evolution rewrites the exit
    value of integer add recurrences): no side effect, no load, call, branch or inner loop, and
    every variable carried out of the loop is a scalar integer updated by ``v += p`` / ``v -= p`` /
    ``v++`` with ``p`` a polynomial in the counter and loop-invariant values (scalar evolution
    models no vector: ``int2 total += s + i`` runs every trip, and was predicted 23,000x too fast). Loop-invariant
    values are hoisted first (LICM): a load, call or ``?:`` of them, and a scalar declared in the
    loop from them and never assigned (:func:`_hoistable_decls`). ``acc += w[d] * (c - i)`` with
    ``c`` such a value, from the synthetic stencils, was predicted 5,000x too slow."""
    from kernelcast.models.static.cursors import type_class

    out: dict[Key, str] = {}
    for lp in _loops(body):
        if side_effect(lp) is not None:
            continue
        kids = list(lp.get_children())
        inner = kids[-1] if lp.kind != K.DO_STMT else kids[0]
        hoisted, variant = _hoistable_decls(lp, _loop_variant(lp))
        bad = False
        for x in inner.walk_preorder():
            if x.kind == K.VAR_DECL and int(x.hash) in hoisted:
                continue
            if x.kind == K.CONDITIONAL_OPERATOR and not (_refs(x, []) & variant):
                continue        # a select of loop-invariant values: hoisted
            if x.kind in (K.IF_STMT, K.CONDITIONAL_OPERATOR, K.SWITCH_STMT, K.BREAK_STMT, K.CONTINUE_STMT,
                          K.RETURN_STMT, K.VAR_DECL) or x.kind in LOOPS:
                bad = True
                break
            # loads and calls of loop-invariant values are hoisted (no store in the loop aliases them)
            if (x.kind in (K.CALL_EXPR, K.ARRAY_SUBSCRIPT_EXPR, K.MEMBER_REF_EXPR)
                    or (x.kind == K.UNARY_OPERATOR and _cx.unary_op(x) == "*")) and _refs(x, []) & variant:
                bad = True
                break
        if bad:
            continue
        ok = bool(carried(lp))
        for x in inner.walk_preorder():
            if not ok:
                break
            if x.kind == K.COMPOUND_ASSIGNMENT_OPERATOR:
                lhs, rhs = list(x.get_children())
                ok = _cx.binary_op(x) in ("+=", "-=") and type_class(lhs.type) == ("int", 1) and \
                    _polynomial(rhs, variant)
            elif x.kind == K.BINARY_OPERATOR and _cx.binary_op(x) == "=":
                ok = False
        for x in lp.walk_preorder():
            v = _var_key(x)
            if v is not None and v in carried(lp) and type_class(x.type) != ("int", 1):
                ok = False
                break
        if ok:
            out[loop_key(lp)] = "integer sums in closed form (scalar evolution)"
    return out

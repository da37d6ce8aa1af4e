"""Statements of the source walker: blocks, declarations, ``if``/``switch`` and the joins after them.

A branch is weighted by :func:`models.static.branches.branch_fraction`; a condition it cannot tell
(on loaded data or unknown values) is a *site* whose then-side share a run on real inputs measures
(:meth:`StmtWalker.measured_fraction`, ``br_l<line>_c<col>``); ``switch`` weights each
case ``1/cases`` (each fully per warp when the selector depends on work-item ids or loaded data).
After ``if (c) return;`` the rest of the block runs with the fraction of items for which ``c`` is
false (known, or the site's measurement). Values assigned under a condition carry the condition's
dependencies (:meth:`~models.static.walk_base.WalkerBase.phi`).
"""

from __future__ import annotations

from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static.branches import Frac, branch_fraction
from kernelcast.models.static.cursors import ARRAY_KINDS, terminates, type_bytes, unwrap
from kernelcast.models.static.deadcode import loop_key
from kernelcast.models.static.expr import DATA, WI, Poly, p_min
from kernelcast.models.static.guards import facts
from kernelcast.models.static.loops import unroll_pragma
from kernelcast.models.static.values import ONE, UNKNOWN, WARP, ZERO, Ptr, Val, same_value
from kernelcast.models.static.walk_base import WalkerBase, branch_category

K = ci.CursorKind


class StmtWalker(WalkerBase):
    def walk_body(self, c: ci.Cursor) -> None:
        self.walk_stmt(c, top=True)

    def walk_stmts(self, stmts: list[ci.Cursor], top: bool = False) -> None:
        """Walk a statement list; an early return scales the statements after it."""
        saved = (self.w_item, self.w_warp)
        depth, guard_depth = len(self.cond_stack), len(self.guard_stack)
        for i, s in enumerate(stmts):
            last = top and i == len(stmts) - 1
            self.exit_cond, self.exit_facts = "", ()
            cont = self.walk_stmt(s, top_last=last)
            if cont is not None:
                self.w_item = self.w_item * cont[0]
                self.w_warp = self.w_warp * cont[1]
            if self.exit_cond:
                # after ``if (c) return;`` with c differing between work-items, the rest runs under !c
                self.cond_stack.append(self.exit_cond)
                self.exit_cond = ""
            if self.exit_facts:
                self.guard_stack.append(self.exit_facts)
                self.exit_facts = ()
        del self.cond_stack[depth:]
        del self.guard_stack[guard_depth:]
        self.w_item, self.w_warp = saved

    def walk_stmt(self, c: ci.Cursor, top: bool = False, top_last: bool = False) -> tuple[Poly, Poly] | None:
        k = c.kind
        if self.dead_stmts and loop_key(c) in self.dead_stmts:
            self._dead_stmt(c)
            return None
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
        if k == K.UNEXPOSED_STMT:
            pragma = unroll_pragma(c)
            if pragma is not None:
                self.unroll_pragma = pragma        # for the loop it holds (walk_loop)
        if k.is_statement() and not k.is_expression():
            for ch in c.get_children():
                self.walk_stmt(ch)
            return None
        self.ev(c)
        return None

    def _dead_stmt(self, c: ci.Cursor) -> None:
        """A statement the compiler deletes (:func:`~models.static.deadcode.dead_statements`): its
        variable gets an unknown value and nothing is counted."""
        if c.kind == K.DECL_STMT:
            for d in c.get_children():
                if d.kind == K.VAR_DECL:
                    self.vars[d.hash] = self.var_val(d.spelling, frozenset())
        else:
            lhs = unwrap(list(c.get_children())[0])
            if lhs.referenced is not None:
                self.vars[lhs.referenced.hash] = self.var_val(lhs.spelling, frozenset())
        if not self.mute:
            self.note(f"statement at line {c.location.line} not counted: dead code, removed by the compiler "
                      f"({self.dead_stmts[loop_key(c)]})")

    def decl(self, d: ci.Cursor) -> None:
        t = d.type
        canon = t.get_canonical()
        key = d.hash
        if canon.kind in ARRAY_KINDS:
            size = type_bytes(t)
            space = "local" if "__local" in t.spelling else "constant" if "__constant" in t.spelling else "private"
            if key not in self._seen_local and not self.mute:
                self._seen_local.add(key)
                if space == "local":
                    self.local_bytes += size
                elif space == "private":
                    self.private_bytes += size
            leaf = canon
            while leaf.kind in ARRAY_KINDS:
                leaf = leaf.get_array_element_type().get_canonical()
            self.vars[key] = Val(None, frozenset(), Ptr(d.spelling, space, ZERO, max(1, type_bytes(leaf))))
            for ch in d.get_children():
                if ch.kind == K.INIT_LIST_EXPR:
                    self.ev(ch)
            return
        init = [ch for ch in d.get_children() if ch.kind.is_expression()]
        if init:
            v = self.ev(init[-1])
            self.assign_var(key, v, t)
        else:
            self.vars[key] = self.var_val(d.spelling, frozenset())

    def if_stmt(self, c: ci.Cursor) -> tuple[Poly, Poly] | None:
        ch = [x for x in c.get_children()]
        cond, then = ch[0], ch[1]
        els = ch[2] if len(ch) > 2 else None
        cv = self.ev(cond)
        self.op("branch")
        self.branch(c.location.line, "if", cv.deps)
        fr = branch_fraction(cv, has_else=els is not None)
        if not fr.known:
            fr = self.measured_fraction(c, cv, els is not None, terminates(then))
        before = dict(self.vars)
        cat = branch_category(cv.deps)
        if cat != "uniform":
            self.cond_stack.append(f"{cat} line {c.location.line}")
        with self.scaled(fr.it, fr.wt), self.guarded(facts(cv.poly)):
            self.walk_stmt(then)
        after_then = self.vars
        self.vars = dict(before)
        if els is not None:
            with self.scaled(fr.ie, fr.we), self.guarded(facts(cv.poly, holds=False)):
                self.walk_stmt(els)
        if cat != "uniform":
            self.cond_stack.pop()
        self.merge_vars(after_then, self.vars, cv.deps)
        self.exit_facts = ()             # an ``if (c) return;`` inside a branch tells nothing after it
        if els is None and terminates(then) and cat != "uniform":
            self.exit_cond = f"{cat} line {c.location.line}"
        if els is None and terminates(then):
            self.exit_facts = facts(cv.poly, holds=False)
        if els is None and terminates(then) and fr.known:
            return fr.ie, fr.we
        return None

    def measured_fraction(self, c: ci.Cursor, cv: Val, has_else: bool, term: bool) -> Frac:
        """The fractions of a condition the analysis cannot tell, as a site a run on real inputs
        measures (the share ``b`` of evaluations taking the then-side). Unmeasured, ``b`` keeps
        the static guess: 1 for a guard without ``else``, 1/2 with ``else``, and 0 for
        ``if (c) return;`` (the statements after it count fully). Per warp, a side is issued when
        any lane takes it: ``min(1, warp * b)`` when the condition differs between lanes."""
        default = 0.5 if has_else else 0.0 if term else 1.0
        what = {0.5: "each side taken by half of the work-items", 0.0: "the early exit taken by no work-item",
                1.0: "the guarded statements run by every work-item"}[default]
        b = self.site("if", c, default, f"condition on {'loaded data' if DATA in cv.deps else 'unknown values'}: "
                                        f"{what} assumed")
        if b is None:
            return branch_fraction(cv, has_else)
        if WI in cv.deps or DATA in cv.deps:
            return Frac(b, ONE - b, p_min(ONE, WARP * b), p_min(ONE, WARP * (ONE - b)))
        return Frac(b, ONE - b, b, ONE - b)

    def merge_vars(self, a: dict[int, Val], b: dict[int, Val], cond_deps: frozenset[str]) -> None:
        out: dict[int, Val] = {}
        for key in set(a) | set(b):
            va, vb = a.get(key), b.get(key)
            if va is None or vb is None:
                out[key] = va or vb  # type: ignore[assignment]
                continue
            if va is vb or same_value(va, vb):
                out[key] = va
                continue
            out[key] = self.phi(va, vb, cond_deps)
        self.vars = out

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
        cat = branch_category(cv.deps)
        if cat != "uniform":
            self.cond_stack.append(f"{cat} line {c.location.line}")
        with self.scaled(f, fw):
            self.walk_stmt(body)
        if cat != "uniform":
            self.cond_stack.pop()
        self.merge_vars(before, self.vars, cv.deps)

"""Loops in the source walker: induction variables, trip counts, the weighted body, values after.

The body is walked once with the weights multiplied by the trip count; the condition is counted
``trip + 1`` times (``trip`` for ``do``). Inside, carried variables are loop-variant unknowns
(their dependencies from :func:`models.static.loops.variant_deps`) and induction variables are
``A + C*it`` with ``it`` the iteration counter (mean ``(trip-1)/2``); after the loop they hold
``A + C*trip`` (unless the loop has a ``break``). Every conjunct of the condition that is linear
in an induction variable bounds the trip count (the minimum is taken; :mod:`models.static.trips`);
other conjuncts make the loop ``early_exit``. A loop without a usable bound gets ``avg_trip``.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.affine import printable
from kernelcast.models.static.chains import (
    CHAIN_OVERLAP_TRIPS,
    INNER_PREFIX,
    ROUTINE_PREFIX,
    UNIFORM_PREFIX,
    carried_chain,
)
from kernelcast.models.static.clbuiltins import BARRIER
from kernelcast.models.static.cursors import expr_text, type_class
from kernelcast.models.static.deadcode import loop_key
from kernelcast.models.static.expr import DATA, ITER, VAR, WI, Atom, Poly, p_max, p_min
from kernelcast.models.static.features import LIBCALL, LOOPVEC_LOADS, LoopInfo
from kernelcast.models.static.loops import (
    PRAGMA_UNROLL_MAX_TRIP,
    UNROLL_MAX_TRIP,
    Induction,
    assigned,
    blocks_full_unroll,
    chain_operands,
    conjuncts,
    for_parts,
    induction_candidates,
    iter_refs,
    reduction_only,
    variant_deps,
)
from kernelcast.models.static.trips import Trip, induction_trip, integrate_geo
from kernelcast.models.static.values import AVG_TRIP, ONE, ZERO, Ptr, Val
from kernelcast.models.static.walk_base import VECTOR_OP_CLASSES, LoopCtx, PartialLoop, WalkerBase

K = ci.CursorKind


class LoopWalker(WalkerBase):
    def loop(self, c: ci.Cursor) -> None:
        kind = {K.FOR_STMT: "for", K.WHILE_STMT: "while", K.DO_STMT: "do"}[c.kind]
        pragma, self.unroll_pragma = self.unroll_pragma, None
        ch = list(c.get_children())
        init = cond = inc = None
        if kind == "for":
            init, cond, inc, body = for_parts(c, ch)
        elif kind == "while":
            cond, body = ch[0], ch[-1]
        else:
            body, cond = ch[0], ch[-1]
        line = c.location.line
        if init is not None:
            self.walk_stmt(init)
        parts = [x for x in (cond, inc, body) if x is not None]
        assigned_ = assigned(parts)
        declared = {x.hash for p in parts for x in p.walk_preorder() if x.kind == K.VAR_DECL}
        carried = {k: v for k, v in assigned_.items() if k not in declared}
        lid = self.serial()
        entry_vars = dict(self.vars)
        cands = induction_candidates(inc, body, carried)
        loop_atoms = self._loop_variant_values(carried, parts)

        # trip count from the condition
        tr, var_name, ind_key, early = self.trip_count(cond, cands, entry_vars, loop_atoms, lid)
        trip, trip_kind, ind_val = tr.trip, tr.kind, tr.value
        if printable(trip) is None:
            trip_kind = "unknown"
        if trip_kind != "affine" and trip_kind != "geometric":
            # the trips per entry are data (or beyond the analysis): a site a run can measure
            trip = self.site("loop", c, None, f"{trip_kind} trip count: avg_trip assumed") or AVG_TRIP
        elif trip_kind == "affine" and tr.averaged:
            # a count that differs between work-items (or outer iterations) is taken at their mean
            # bounds, which misses every clipped one (``j < first + chunk && j < n`` with
            # ``first = gid * chunk``: 0 trips at the mean, 1 per work-item in fact): a site a run
            # can measure, its static mean where none did
            trip = self.site("loop", c, None, "trip count differs between work-items: static mean at the mean "
                                              "bounds assumed", default_expr=trip.to_str()) or trip
        elif trip_kind == "affine" and early and cond is not None:
            with self.muted():
                data_exit = DATA in self.ev(cond).deps
            if not data_exit:
                # a second exit the analysis cannot bound and that is not on loaded data (a bisection's
                # ``(hi - lo) > tol``): a site a run can measure, the static bound where none did
                # (cf_bisection_cubic under memory selection: max_iter 357,632 trips charged, 5 run)
                trip = self.site("loop", c, None, "an exit the analysis does not bound: the static bound assumed",
                                 default_expr=trip.to_str()) or trip
        why_dead = self.dead_loops.get(loop_key(c))
        closed = ""
        if why_dead and trip_kind in ("affine", "geometric") and "closed form" in why_dead:
            # the compiler computes the loop's results by a formula (models.static.deadcode): what
            # is left is about one trip, the hoisted loop-invariant values and the formula
            closed = f"computed in closed form by the compiler: {why_dead} (static trip {trip.to_str()})"
            if not self.mute:
                self.note(f"loop at line {line} counted once: {closed}")
        elif why_dead and trip_kind in ("affine", "geometric"):
            # the compiler deletes a finite loop without effects (models.static.deadcode)
            self._leave_loop(carried, {}, True, trip)
            if not self.mute:
                self.note(f"loop at line {line} not counted: dead code, removed by the compiler ({why_dead})")
                self.loops.append(LoopInfo(
                    line=line, kind=kind, var=var_name, trip="0", trip_kind="dead", depth=len(self.loop_stack) + 1,
                    assumed=f"dead code, removed by the compiler: {why_dead} (static trip {trip.to_str()})"))
            return
        if kind == "do":
            trip = p_max(ONE, trip)
        vars_in = dict(self.vars)
        it_atom = Atom(f"i:{lid}", "iter", f"it{lid}", deps=frozenset({ITER}),
                       avg=(trip - 1) * Fraction(1, 2), rng=trip, deriv=(ZERO, ZERO, ZERO))
        it = Poly.atom(it_atom)
        post = self._induction_values(cands, entry_vars, loop_atoms, ind_key, ind_val, trip_kind, it)
        assumed = "" if trip_kind in ("affine", "geometric") else f"{trip_kind} trip count: avg_trip assumed"
        data_exit = False
        if trip_kind != "geometric" and not closed:
            bounds, data_break = self._break_bounds(body, it_atom, loop_atoms, lid)
            with self.muted():
                data_cond = early and cond is not None and DATA in self.ev(cond).deps
            data_exit = data_break or data_cond
            if (data_break or data_cond) and trip_kind == "affine":
                # a data-dependent exit (escape-time iteration, search): the static bound is only an
                # upper bound; like a loop bounded by data, avg_trip iterations are assumed
                exit_trip = self.site("loop", c, None, "data-dependent exit: min(static bound, avg_trip) assumed")
                bounds = bounds + [(exit_trip or AVG_TRIP, "data-dependent exit: min(static bound, avg_trip)")]
            if bounds:
                alt = bounds[0][0] if len(bounds) == 1 else p_min(*(b for b, _ in bounds))
                new_trip = alt if trip_kind != "affine" else p_min(trip, alt)
                if kind == "do":
                    new_trip = p_max(ONE, new_trip)
                if printable(new_trip) is not None:
                    trip, trip_kind = new_trip, "affine"
                    assumed = "trip bounded by " + " / ".join(
                        t if t.startswith("data-dependent") else f"'if ({t}) break'" for _, t in bounds)
                    self.vars = vars_in
                    it_atom = Atom(f"i:{lid}", "iter", f"it{lid}", deps=frozenset({ITER}),
                                   avg=(trip - 1) * Fraction(1, 2), rng=trip, deriv=(ZERO, ZERO, ZERO))
                    it = Poly.atom(it_atom)
                    post = self._induction_values(cands, entry_vars, loop_atoms, ind_key, ind_val, trip_kind, it)

        if not self.mute:
            self.keep_site_if_used("loop", c, trip)
        # condition deps (for divergence) with the loop-variant values
        with self.muted():
            cv = self.ev(cond) if cond is not None else Val(ONE)
        divergent = WI in (cv.deps - {ITER})
        data_dep = trip_kind == "data_dependent"
        self.branch(line, "loop", cv.deps)
        ctx = LoopCtx(lid=lid, line=line, entry=(self.w_item, self.w_warp),
                      unrolled=trip if not closed and not early and self._unrolls_fully(trip, trip_kind, pragma, body)
                      else None,
                      barrier=_calls_barrier(body))
        if ctx.unrolled is None and not closed and not early and trip_kind == "affine" and pragma != 1 \
                and not self.mute:
            # a loop the compiler keeps: its control may be unrolled in part (walk_base.ops_partial)
            ctx.partial = self._partial_serial
            self._partial_serial += 1
            self.ops_partial[ctx.partial] = {}
        w_entry = self.w_item
        self.loop_stack.append(ctx)
        depth = len(self.loop_stack)
        snap = (dict(self.ops), dict(self.ops_warp), len(self.acc_polys))
        before = (snap[0], dict(self.ops_vec), len(self.accesses), len(self.branches), len(self.loops))
        walk_trip = ONE if closed else trip      # the weight of one pass over the body
        n_checks = walk_trip if kind == "do" or closed else trip + 1
        control, self.unrolled_control = self.unrolled_control, ctx.unrolled is not None
        kept = int(self.partial_control)
        self.partial_control = ctx.partial
        try:
            with self.scaled(n_checks, n_checks):
                if cond is not None:
                    self.ev(cond)
                self.op("branch")
        finally:
            self.unrolled_control = control
            self.partial_control = kept
        with self.scaled(walk_trip, walk_trip):
            if trip_kind != "geometric":
                ctx.body = (self.w_item, self.w_warp)
            self.walk_stmt(body)
            if inc is not None:
                control, self.unrolled_control = self.unrolled_control, ctx.unrolled is not None
                kept = int(self.partial_control)
                self.partial_control = ctx.partial
                try:
                    self.ev(inc)
                finally:
                    self.unrolled_control = control
                    self.partial_control = kept
            if not closed and not self.mute:
                # the operations each trip waits for the trip before on (models.static.chains): the
                # arithmetic in a loop whose trips differ between work-items, which no runtime can
                # run for several work-items at once; in a loop all work-items take alike, apart
                # (uniform_<class>, but for the first trip and the CHAIN_OVERLAP_TRIPS the core runs
                # beside the work-item before: the work-items of short loops overlap); a library
                # routine's calls in any loop (a chain of 32 sin calls per work-item ran 2.7x as
                # long as four chains of 8, 3.5x for exp), but for the first trip's where every work-item takes the same
                # trips: it waits for nothing, and the core runs it beside the work-item before (T
                # trips of a sin chain per work-item: 19 ns per work-item for T = 1, then 30-32 ns
                # per trip). Where trips differ between work-items the loop's exit mispredicts and
                # the first trip waits too (2 trips on average cost what 2.5 constant trips do),
                # unless there are hardly more trips than one per work-item: from 1 trip (none on
                # the chain) to 2 (both)
                uneven = divergent or data_dep or data_exit or trip_kind not in ("affine", "geometric")
                for cls, n in carried_chain([x for x in (cond, body, inc) if x is not None], carried,
                                            ind_key).items():
                    if not cls.startswith(ROUTINE_PREFIX) and not uneven:
                        # the arithmetic of a loop all work-items take alike: apart (uniform_), as
                        # a core can run consecutive work-items' short chains side by side; apart
                        # again inside a loop with barriers (inner_); which of them a device pays is
                        # the device class's (models.analytical.cpu_costs.chain_seconds)
                        w = w_entry * p_max(ZERO, trip - 1 - CHAIN_OVERLAP_TRIPS) if ctx.unrolled is None else None
                        inner = any(o.barrier for o in self.loop_stack[:-1])
                        cls = (INNER_PREFIX if inner else UNIFORM_PREFIX) + cls
                    elif not cls.startswith(ROUTINE_PREFIX):
                        w = self.w_item
                    elif uneven:
                        w = w_entry * p_max(ZERO, p_min(trip, 2 * trip - 2))
                    else:
                        w = w_entry * p_max(ZERO, trip - 1)
                    if w is not None:
                        self.ops_chain[cls] = self.ops_chain.get(cls, ZERO) + w * n
        self.loop_stack.pop()
        if ctx.unrolled is None:
            for o in self.loop_stack:
                o.kept_inner = True
        if ctx.partial >= 0:
            got = self.ops_partial.pop(ctx.partial)
            if not (ctx.has_break or ctx.kept_inner or ctx.barrier or data_exit) and got:
                self.partial_loops.append(PartialLoop(
                    line=line, trip=trip, size=ctx.size, loads=ctx.loads, pragma=pragma, ops=got))
        if not self.mute and trip_kind == "affine" and not closed and not early and not ctx.has_break and \
                reduction_only([body], set(carried) - {ind_key}):
            self._record_independent_trip_loop(before, lid, carried, ind_key)
        if trip_kind == "geometric" and not closed and lid in self.geo_params and ind_val is not None:
            self.integrate(snap, ind_val(it).poly, trip, *self.geo_params[lid])
        self._leave_loop(carried, post, ctx.has_break, trip)
        if not assumed and (early or ctx.has_break):
            assumed = "upper bound: the loop can exit earlier on a condition the analysis does not bound"
        if closed:
            assumed, trip, trip_kind = closed, ONE, "closed_form"
        if not self.mute:
            if all(a.space == "private" for a in self.accesses[before[2]:]):
                self.work_groups.add_site(self.guards)      # a loop of its own work (models.static.groups)
            self.loops.append(LoopInfo(
                line=line, kind=kind, var=var_name, trip=trip.to_str(), trip_kind=trip_kind, depth=depth,
                data_dependent=data_dep, divergent=divergent, has_break=ctx.has_break, early_exit=early,
                assumed=assumed, from_zero=self._from_zero(cond, cands, entry_vars, ind_key),
                calls=tuple(sorted(k for k, v in self.ops.items()
                                   if k.startswith("bi_") and not (v - snap[0].get(k, ZERO)).is_zero())),
                unroll_pragma=pragma))

    @staticmethod
    def _unrolls_fully(trip: Poly, trip_kind: str, pragma: int | None, body: ci.Cursor) -> bool:
        """Whether the compiler unrolls a loop fully: a constant trip count of at most
        :data:`~models.static.loops.UNROLL_MAX_TRIP` (a ``#pragma unroll``: its count, or up to
        :data:`~models.static.loops.PRAGMA_UNROLL_MAX_TRIP` without one) and a body without an exit
        or, but under the pragma, a library routine's call (:func:`~models.static.loops.blocks_full_unroll`)."""
        if trip_kind != "affine" or not trip.is_const() or pragma == 1:
            return False
        t = trip.const_value()
        if t < 1:
            return False
        limit = UNROLL_MAX_TRIP if pragma is None else pragma or PRAGMA_UNROLL_MAX_TRIP
        return t <= limit and not blocks_full_unroll(body, routines=pragma is None)

    def _from_zero(self, cond: ci.Cursor | None, cands: dict[int, Induction], entry_vars: dict[int, Val],
                   ind_key: int | None) -> bool:
        """Whether the loop's condition is one comparison of an induction variable that starts at 0
        and steps by 1 (LLVM's canonical induction variable): a fact the CPU-runtime class reads
        (:func:`models.analytical.cpu_vectorizer.cpu_vectorizable`)."""
        if cond is None or ind_key is None or ind_key not in cands:
            return False
        parts: list[ci.Cursor] = []
        conjuncts(cond, parts)
        if len(parts) != 1:
            return False
        start = entry_vars.get(ind_key)
        if start is None or start.poly is None or not start.poly.is_const() or start.poly.const_value() != 0:
            return False
        ind = cands[ind_key]
        if ind.how == "++":
            return True
        if ind.how != "+" or ind.step is None:
            return False
        with self.muted():
            sv = self.ev(ind.step)
        return sv.poly is not None and sv.poly.is_const() and sv.poly.const_value() == 1

    def _record_independent_trip_loop(self, before: tuple[dict[str, Poly], dict[str, Poly], int, int, int],
                                      lid: int, carried: dict[int, list[ci.Cursor | None]], ind_key: int | None
                                      ) -> None:
        """Count the operations of an innermost loop whose trips are independent within one
        work-item (:attr:`ops_loopvec`): an affine trip count without exits, no nested loop, no
        ``if``, no call, atomic or barrier, no store, every load at an address invariant in the loop
        or stepping one element per trip, and only integer variables carried from trip to trip, each
        as a reduction (:func:`~models.static.loops.reduction_only`; a float sum is not reordered
        without fast-math). ``rank += (in[j] < v)`` over ``j`` is such a loop. A loop vectorizer can
        take it; what that costs is the device class's
        (:func:`models.analytical.cpu_costs.inner_loop_correction`)."""
        ops0, vec0, n_acc, n_br, n_loops = before
        if len(self.loops) > n_loops or any(b.kind != "?:" for b in self.branches[n_br:]):
            return
        if any(r is not None and type_class(r.type)[0] not in ("int", "other")
               for k, rhs in carried.items() if k != ind_key for r in rhs):
            return
        it = f"it{lid}"
        for a in self.accesses[n_acc:]:
            if a.kind != "load" or a.space == "private" or "ld(" in a.index_expr:
                return
            if it in a.index_expr and (a.trip_strides.get(it) not in ("1", "-1") or "(" in a.index_expr):
                return
        delta = {k: v - ops0.get(k, ZERO) for k, v in self.ops.items()}
        if any((k.startswith("bi_") or k in (LIBCALL, "barrier", "fence", "sfu")) and not d.is_zero()
               for k, d in delta.items()):
            return
        vec_delta: dict[str, Poly] = {}
        for k, v in self.ops_vec.items():
            cls = k.split("@")[0]
            vec_delta[cls] = vec_delta.get(cls, ZERO) + (v - vec0.get(k, ZERO))
        for k, d in delta.items():
            d = d - vec_delta.get(k, ZERO)
            if (k in VECTOR_OP_CLASSES or k == "branch") and not d.is_zero():
                self.ops_loopvec[k] = self.ops_loopvec.get(k, ZERO) + d
        loads = ZERO
        for w_item, _w in self.acc_polys[n_acc:]:
            loads = loads + w_item
        if not loads.is_zero():
            self.ops_loopvec[LOOPVEC_LOADS] = self.ops_loopvec.get(LOOPVEC_LOADS, ZERO) + loads

    def _break_bounds(self, body: ci.Cursor, it_atom: Atom, loop_atoms: set[str], lid: int
                      ) -> tuple[list[tuple[Poly, str]], bool]:
        """Trip counts implied by ``if (cond) break;`` statements at the top level of the body whose
        condition is linear in the iteration counter with a bound that is not loaded data: the
        number of iterations before ``cond`` first holds (averaged over work-items); and whether
        another such ``break`` depends on loaded data."""
        stmts = list(body.get_children()) if body.kind == K.COMPOUND_STMT else [body]
        out: list[tuple[Poly, str]] = []
        data_break = False
        if not any(x.kind == K.BREAK_STMT for s in stmts for x in s.walk_preorder()):
            return out, data_break
        with self.muted():
            for s in stmts:
                if s.kind == K.IF_STMT:
                    ch = list(s.get_children())
                    if len(ch) == 2 and _is_break(ch[1]):
                        b = self._exit_bound(ch[0], it_atom, loop_atoms, lid)
                        if b is not None:
                            out.append((b, expr_text(ch[0])))
                        elif DATA in self.ev(ch[0]).deps:
                            data_break = True
                        continue
                if s.kind in (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT, K.SWITCH_STMT, K.RETURN_STMT, K.BREAK_STMT,
                              K.CONTINUE_STMT, K.GOTO_STMT):
                    break
                self.walk_stmt(s)
        return out, data_break

    def _exit_bound(self, cond: ci.Cursor, it_atom: Atom, loop_atoms: set[str], lid: int) -> Poly | None:
        """Iterations before the exit condition ``cond`` (a ``||`` chain) first holds, or None."""
        disj: list[ci.Cursor] = []
        chain_operands(cond, "||", disj)
        trips: list[Poly] = []
        for x in disj:
            if x.kind != K.BINARY_OPERATOR:
                continue
            op = _cx.binary_op(x)
            if op not in ("<", "<=", ">", ">=", "=="):
                continue
            lhs, rhs = list(x.get_children())
            lv, rv = self.ev(lhs), self.ev(rhs)
            if lv.poly is None or rv.poly is None:
                continue
            d = lv.poly - rv.poly
            co = d.coefficient(it_atom)
            if co is None or co.is_zero():
                continue
            rest = d - co * Poly.atom(it_atom)
            if any(a == it_atom for a in rest.all_atoms()) or any(a == it_atom for a in co.all_atoms()):
                continue
            if co.is_const():
                pos = co.const_value() > 0
            elif all(c > 0 for c in co.terms.values()) and not (co.deps & {DATA, VAR, WI, ITER}):
                pos = True      # a positive combination of sizes / scalar arguments
            else:
                continue
            # exit when co*it + rest (op) 0; keep going while step*it (cont) B
            if pos and op in (">=", ">", "=="):
                cont, bound, step = ("<=" if op == ">" else "<"), -rest, co
            elif not pos and op in ("<", "<=", "=="):
                cont, bound, step = ("<=" if op == "<" else "<"), rest, -co
            else:
                continue
            t = induction_trip(cont, "+", Val(ZERO), bound, bound.deps, Val(step), loop_atoms, lid)
            if t.kind == "affine":
                trips.append(t.trip)
        if not trips:
            return None
        return trips[0] if len(trips) == 1 else p_min(*trips)

    def _loop_variant_values(self, carried: dict[int, list[ci.Cursor | None]], parts: list[ci.Cursor]) -> set[str]:
        """Give the carried variables fresh loop-variant values; returns the keys of their atoms."""
        dep_map = variant_deps(carried, self.vars)
        loop_atoms: set[str] = set()
        for k in carried:
            name = next((x.spelling for x in iter_refs(parts) if x.referenced.hash == k), "v")
            v = self.var_val(name, dep_map[k] - {VAR} | {ITER})
            old = self.vars.get(k)
            if old is not None and old.ptr is not None:
                v = Val(v.poly, v.deps, Ptr(old.ptr.base, old.ptr.space, None, old.ptr.leaf_bytes, v.deps))
            self.vars[k] = v
            loop_atoms |= {a.key for a in v.poly.atoms()} if v.poly is not None else set()
        return loop_atoms

    def _induction_values(self, cands: dict[int, Induction], entry_vars: dict[int, Val], loop_atoms: set[str],
                          ind_key: int | None, ind_val: Callable[[Poly], Val] | None, trip_kind: str,
                          it: Poly) -> dict[int, Callable[[Poly], Val]]:
        """Set the induction variables to ``A + C*it`` inside the loop; returns, for an affine
        loop, their values as functions of the iteration (to evaluate at ``trip`` after it)."""
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
            sp = start.poly
            if sp is None and sptr is not None and sptr.offset is not None:
                advance = _pointer_stepper(sptr, sptr.offset, step, start.deps)  # p += step through a buffer
            elif sp is not None:
                advance = _value_stepper(sp, step, start.deps)
            else:
                continue
            self.vars[key] = advance(it)
            if trip_kind == "affine":
                post[key] = advance
        return post

    def _leave_loop(self, carried: dict[int, list[ci.Cursor | None]], post: dict[int, Callable[[Poly], Val]],
                    has_break: bool, trip: Poly) -> None:
        """After the loop: induction variables hold ``start + step * trip``, other carried
        variables unknown (iteration-independent) values."""
        for k in carried:
            if k in post and not has_break:
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

    def trip_count(self, cond: ci.Cursor | None, cands: dict[int, Induction], entry: dict[int, Val],
                   loop_atoms: set[str], lid: int) -> tuple[Trip, str | None, int | None, bool]:
        """``(trip, var, var key, early_exit)`` from the loop condition (module docstring)."""
        if cond is None:
            return Trip(AVG_TRIP, "unknown"), None, None, False
        comps: list[ci.Cursor] = []
        conjuncts(cond, comps)
        solved = [self.solve_bound(x, cands) for x in comps]
        keys = [x[1] for x in solved if x is not None]
        if not keys:
            with self.muted():
                cv = self.ev(cond)
            k = "data_dependent" if DATA in cv.deps else "unknown"
            return Trip(AVG_TRIP, k), None, None, False
        key = keys[0]
        name = cands[key].name
        early = False
        trips: list[Poly] = []
        tkind = ""
        value: Callable[[Poly], Val] | None = None
        fallback = "unknown"
        averaged = False
        for x in solved:
            if x is None or x[1] != key:
                early = True
                continue
            op, _k, bound, bdeps = x
            t = self.trip_one(op, key, bound, bdeps, cands, entry, loop_atoms, lid)
            if t.kind in ("affine", "geometric"):
                trips.append(t.trip)
                tkind = tkind or t.kind
                value = value or t.value
                averaged = averaged or t.averaged
            else:
                early = True
                if t.kind == "data_dependent":
                    fallback = t.kind
        if not trips:
            return Trip(AVG_TRIP, fallback), name, None, False
        trip = trips[0] if len(trips) == 1 else p_min(*trips)
        return Trip(trip, tkind, value, averaged=averaged), name, key, early

    def solve_bound(self, c: ci.Cursor, cands: dict[int, Induction]
                    ) -> tuple[str, int, Poly | None, frozenset[str]] | None:
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

    def trip_one(self, op: str, key: int, bound: Poly | None, bdeps: frozenset[str], cands: dict[int, Induction],
                 entry: dict[int, Val], loop_atoms: set[str], lid: int) -> Trip:
        """Trip count of ``var op bound`` for the induction variable ``key``."""
        ind = cands[key]
        start = entry.get(key)
        with self.muted():
            sv = self.ev(ind.step) if ind.step is not None else Val(ONE)
        t = induction_trip(op, ind.how, start, bound, bdeps, sv, loop_atoms, lid)
        if t.geo is not None:
            self.geo_params[lid] = t.geo
        return t


def _pointer_stepper(p: Ptr, offset: Poly, step: Poly, deps: frozenset[str]) -> Callable[[Poly], Val]:
    """The value at iteration ``t`` of a pointer starting at ``p`` (offset ``offset``) moved by ``step``."""
    def advance(t: Poly) -> Val:
        off = offset + step * t
        pdeps = p.deps | step.deps | {ITER}
        return Val(None, deps | {ITER}, Ptr(p.base, p.space, off, p.leaf_bytes, pdeps))
    return advance


def _value_stepper(start: Poly, step: Poly, deps: frozenset[str]) -> Callable[[Poly], Val]:
    """The value at iteration ``t`` of a variable starting at ``start`` moved by ``step``."""
    def advance(t: Poly) -> Val:
        return Val.of(start + step * t, deps | {ITER})
    return advance


def _calls_barrier(c: ci.Cursor) -> bool:
    """Whether the statement ``c`` calls a work-group barrier (not through a helper function)."""
    return any(n.kind == K.CALL_EXPR and n.spelling in BARRIER for n in c.walk_preorder())


def _is_break(c: ci.Cursor) -> bool:
    if c.kind == K.BREAK_STMT:
        return True
    ch = list(c.get_children()) if c.kind == K.COMPOUND_STMT else []
    return len(ch) == 1 and ch[0].kind == K.BREAK_STMT

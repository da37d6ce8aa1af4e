"""Loops of the synthetic kernel generator: accumulators, loop nests (constant, scalar-argument,
stencil, row and column loops) with branches inside, escape-time iterations, and the chunked
shape where each work-item loops over several elements.
"""

from __future__ import annotations

import re

from kernelcast.datagen.synth.core import P_ADD, P_MUL, P_UNARY, Buf, Expr, Loop, Param, Val
from kernelcast.datagen.synth.memory import MemoryBuilder


class LoopBuilder(MemoryBuilder):
    """Adds loops and accumulation to :class:`MemoryBuilder`."""

    # ---- loops
    def acc_mode(self) -> str:
        if self.is_float:
            return self.wpick({"sum": 5, "decay": 1.2, "max": 1, "min": 0.4})
        return self.wpick({"sum": 5, "xor": 1, "max": 1, "or": 0.4})

    def accumulate(self, acc: str, mode: str, g: Expr) -> None:
        if mode == "sum":
            self.emit(f"{acc} += {g.text};")
        elif mode == "decay":
            c = self.lit(self.pick(("0.5", "0.9", "0.75", "0.25")))
            if self.W == 1 and not g.vec and self.chance(0.5):
                self.emit(f"{acc} = fma({acc}, {c}, {g.text});")
            else:
                self.emit(f"{acc} = {c} * {acc} + {self.wrap(g, P_ADD)};")
        elif mode in ("max", "min"):
            fn = ("f" if self.is_float else "") + mode
            self.emit(f"{acc} = {fn}({acc}, {g.text});")
        elif mode == "xor":
            self.emit(f"{acc} ^= {g.text};")
        else:
            self.emit(f"{acc} |= {g.text};")

    def loop_phase(self) -> None:
        if self.depth == 0:
            return
        if self.is_float and self.W == 1 and self.depth == 1 and self.chance(0.2):
            self.escape_loop()
            return
        deferred = [b for b in self.inputs if b.pattern == "deferred"]
        depth = self.depth
        # choose kinds, outermost first
        kinds: list[str] = []
        lvl = 0
        while lvl < depth:
            left = depth - lvl
            opts = {"const": 3.0}
            if self.budget > 0:
                opts["scalar"] = 4.0 * self.o.p_scalar_loop
            if self.dims == 1 and "stencil" not in kinds:
                opts["stencil"] = 1.0
            if self.dims == 2 and self.budget > 0 and lvl == 0:
                opts["row"] = 0.8
                opts["col"] = 0.6
            if self.dims == 2 and left >= 2 and lvl == 0:
                opts["stencil2d"] = 1.0
            k = self.wpick(opts)
            if k in ("scalar", "row", "col"):
                self.budget -= 1
            if k == "stencil2d":
                kinds += ["stencil_y", "stencil_x"]
                lvl += 2
            else:
                kinds.append(k)
                lvl += 1
        scalar_nested = any(k in ("scalar", "row", "col") for k in kinds) and len(kinds) > 1
        mode = self.acc_mode()
        acc = self.fresh(*self.pick((("acc", "sum"), ("sum", "acc"), ("total", "acc"), ("s", "acc"),
                                     ("energy", "acc"), ("score", "acc"), ("result_acc", "acc"))))
        init = self.lowest() if mode == "max" else (
            ({"float": "FLT_MAX", "double": "DBL_MAX", "int": "INT_MAX"}[self.T]) if mode == "min" else self.zero())
        if mode == "min" and self.W > 1:
            init = f"({self.VT})({init})"
        self.comment(self.pick(("accumulate", "main loop", "reduce over the window", "iterate")))
        self.emit(f"{self.VT} {acc} = {init};")

        # stencil weights
        weights_arr: str | None = None
        radius = self.pick((1, 1, 2, 2, 3)) if any(k.startswith("stencil") for k in kinds) else 0
        if radius and self.dims == 2:
            radius = min(radius, 2)
        if radius:
            ntaps = (2 * radius + 1) ** (2 if "stencil_y" in kinds else 1)
            wstyle = self.wpick({"array": 1.5 if ntaps <= 9 else 0.0, "buffer": 1.0, "none": 1.0})
            if wstyle == "array":
                weights_arr = self.fresh("wts", "taps", "coeffs", "kw")
                vals = ", ".join(self.lit(self.pick(("0.1", "0.2", "0.25", "0.5", "0.125", "0.0625", "1.0")))
                                 if self.is_float else self.pick(("1", "2", "3", "4", "-1"))
                                 for _ in range(ntaps))
                self.emit(f"const {self.T} {weights_arr}[{ntaps}] = {{{vals}}};")
            elif wstyle == "buffer":
                weights_arr = self.fresh("filter", "weights", "coef", "w", "kern_w")
                self.add_param(Param(weights_arr, "global", self.T, "weights", const=True))

        loops: list[Loop] = []
        nest_start = len(self.lines)
        inner_acc: str | None = None
        inner_mode = "sum"
        inner_line = -1
        for lvl, kind in enumerate(kinds):
            lp = self.open_loop(kind, radius, scalar_nested)
            loops.append(lp)
            if lvl == 0 and len(kinds) == 2 and self.chance(0.35) and kind not in ("stencil_y",):
                inner_acc = self.fresh("part", "inner", "row_sum", "local_acc")
                inner_mode = "sum"
                inner_line = self.emit(f"{self.VT} {inner_acc} = {self.zero()};")
        self.feat["loops"] += [lp.kind for lp in loops]
        self.cur_depth = max(self.cur_depth, len(loops))
        if any(lp.kind in ("scalar", "row", "col") for lp in loops):
            self.feat["scalar_trip_loop"] = True

        # body
        self.scopes.append([])
        loop_vals: list[Val] = []
        innermost = loops[-1]
        for buf in deferred:
            loop_vals.append(self.load_val(buf, self.loop_index(loops, buf), self.val_names(buf, ["xj", "vj"])))
        indexed = any(lp.index_fn is not None for lp in loops)    # stencil / row / column loops read
        if not deferred and (indexed or self.chance(0.45)):
            cands = [b for b in self.inputs if b.pattern not in ("tiled", "contig+tiled")
                     and not (self.inplace and b is self.inputs[0])]
            if cands:
                buf = self.pick(cands)
                loop_vals.append(self.load_val(buf, self.loop_index(loops, buf),
                                               self.val_names(buf, ["xj", "vj", "elem"])))
        wexpr: Expr | None = None
        if weights_arr is not None:
            if "stencil_y" in kinds:
                side = 2 * radius + 1
                dy, dx = loops[0].var, loops[1].var
                wexpr = Expr(f"{weights_arr}[({dy} + {radius}) * {side} + {dx} + {radius}]")
            else:
                st = next(lp for lp in loops if lp.kind == "stencil")
                wexpr = Expr(f"{weights_arr}[{st.var} + {radius}]")
        leaves = [self.vexpr(v) for v in self.values() if v.name != acc]
        for lp in loops:
            if lp.kind not in ("stencil", "stencil_y", "stencil_x") or self.chance(0.3):
                ty = self.T
                leaves.append(Expr(f"({ty}){lp.var}", False, P_UNARY) if self.is_float else Expr(lp.var))
        g = self.expr(self.rand_depth(), leaves + [self.vexpr(v) for v in loop_vals])
        g = self.fold_all(g, loop_vals)
        # the body must depend on the loaded data and on every loop variable
        outer_vals = [v for v in self.values() if v.name != acc and v not in loop_vals]
        if outer_vals and not loop_vals and not any(
                re.search(rf"\b{re.escape(v.name)}\b", g.text) for v in outer_vals):
            g = self.combine(g, self.vexpr(self.pick(outer_vals)))
        nest_text = " ".join([g.text, wexpr.text if wexpr is not None else ""] + [
            t for _, t in self.lines[nest_start:] if not t.startswith(("for (", "#pragma"))])
        for lp in loops:
            if not re.search(rf"\b{re.escape(lp.var)}\b", nest_text):
                g = self.combine(g, Expr(f"({self.T}){lp.var}", False, P_UNARY) if self.is_float
                                 else Expr(lp.var))
        if wexpr is not None:
            g = self.binop(wexpr, "*", g, P_MUL)
        target, tmode = (inner_acc, inner_mode) if inner_acc else (acc, mode)
        if self.branchy and self.chance(0.45):
            self.loop_branch(target, tmode, g, innermost, leaves)
        else:
            self.accumulate(target, tmode, g)
        self.scopes.pop()
        self.close()
        if inner_acc is not None:
            post = self.vexpr(Val(inner_acc, self.W > 1, inner_line))
            if self.chance(0.5) and self.is_float:
                post = self.unary(post)
            self.accumulate(acc, mode, post)
        for _ in loops[1:]:
            self.close()
        self.add_val(acc, self.W > 1, len(self.lines) - 1)

    def loop_index(self, loops: list[Loop], buf: Buf) -> str:
        for lp in reversed(loops):
            if lp.index_fn is not None:
                return lp.index_fn(buf.param.name)
        # combine constant/scalar loop variables into an offset
        lb, n = self.lb, self.n_name
        vars_ = [lp for lp in loops if lp.kind in ("const", "scalar")]
        if len(vars_) == 2 and vars_[1].const_trip is not None:
            off = f"{vars_[0].var} * {vars_[1].const_trip} + {vars_[1].var}"
        elif len(vars_) == 2:
            off = f"{vars_[0].var} + {vars_[1].var}"
        else:
            off = vars_[-1].var
        if self.chance(0.5):
            return f"({lb} + {off}) % {n}"
        return f"min({lb} + {off}, {n} - 1)"

    def open_loop(self, kind: str, radius: int, scalar_nested: bool) -> Loop:
        lb, n = self.lb, self.n_name
        if kind == "const":
            trips = (2, 3, 4, 5, 8) if scalar_nested else (2, 3, 4, 5, 8, 10, 16, 32, 64)
            c = self.pick(trips)
            v = self.fresh("i", "k", "t", "m", "it", "r")
            if c <= 8 and self.chance(0.2):
                self.emit("#pragma unroll")
            self.open(f"for (int {v} = 0; {v} < {c}; {v}++)")
            return Loop(v, kind, str(c), const_trip=c)
        if kind == "scalar":
            k = self.scalar_param("loop", self.rng.sample(["k", "iters", "m", "steps", "reps", "niters",
                                                           "nsteps", "passes"], 8))
            v = self.fresh("i", "k", "t", "m", "it", "r")
            style = self.wpick({"up": 5, "down": 1})
            if style == "up":
                self.open(f"for (int {v} = 0; {v} < {k}; {v}++)")
            else:
                self.open(f"for (int {v} = {k} - 1; {v} >= 0; {v}--)")
            return Loop(v, kind, k)
        if kind == "stencil":
            d = self.fresh("d", "o", "dd", "tap")

            def fn(name: str, d: str = d) -> str:
                return f"clamp({lb} + {d}, 0, {n} - 1)"

            self.open(f"for (int {d} = -{radius}; {d} <= {radius}; {d}++)")
            return Loop(d, kind, str(2 * radius + 1), const_trip=2 * radius + 1, index_fn=fn)
        if kind == "stencil_y":
            dy = self.fresh("dy", "oy", "sy")
            self.stencil_dy = dy
            self.open(f"for (int {dy} = -{radius}; {dy} <= {radius}; {dy}++)")
            return Loop(dy, kind, str(2 * radius + 1), const_trip=2 * radius + 1)
        if kind == "stencil_x":
            dx = self.fresh("dx", "ox", "sx")
            dy = self.stencil_dy
            x, y = self.coords[0], self.coords[1]
            w, h = self.ext[0], self.ext[1]
            xx, yy = self.fresh("xx", "nx_", "cx"), self.fresh("yy", "ny_", "cy")
            self.open(f"for (int {dx} = -{radius}; {dx} <= {radius}; {dx}++)")
            self.emit(f"{self.decl()}int {xx} = clamp({x} + {dx}, 0, {w} - 1);")
            self.emit(f"{self.decl()}int {yy} = clamp({y} + {dy}, 0, {h} - 1);")

            def fn2(name: str) -> str:
                return f"{yy} * {w} + {xx}"

            return Loop(dx, kind, str(2 * radius + 1), const_trip=2 * radius + 1, index_fn=fn2)
        x, y = self.coords[0], self.coords[1]
        w, h = self.ext[0], self.ext[1]
        v = self.fresh("k", "c", "kk", "t")
        if kind == "row":
            self.open(f"for (int {v} = 0; {v} < {w}; {v}++)")

            def fr(name: str) -> str:
                return f"{y} * {w} + {v}"

            return Loop(v, kind, w, index_fn=fr)
        # col
        self.open(f"for (int {v} = 0; {v} < {h}; {v}++)")

        def fc(name: str) -> str:
            return f"{v} * {w} + {x}"

        return Loop(v, kind, h, index_fn=fc)

    def loop_branch(self, acc: str, mode: str, g: Expr, lp: Loop, leaves: list[Expr]) -> None:
        kinds = {"loop_mod": 1.0, "loop_cond": 1.0}
        if lp.const_trip is not None and mode == "sum":
            kinds["loop_break"] = 0.7
        kinds["loop_continue"] = 0.4
        k = self.wpick(kinds)
        self.feat["branches"].append(k)
        if k == "loop_mod":
            m = self.pick(("2", "3", "4"))
            self.open(f"if ({lp.var} % {m} == 0)")
            self.accumulate(acc, mode, g)
            self.close()
            self.open("else")
            g2 = self.expr(1, leaves)
            self.accumulate(acc, mode, g2)
            self.close()
        elif k == "loop_cond":
            gn = self.fresh("g", "term", "contrib", "delta")
            self.emit(f"{self.decl()}{self.VT} {gn} = {self.bc(g).text if self.W > 1 else g.text};")
            thr = self.coef_expr() if self.chance(0.4) else self.const_expr()
            cond = f"{gn} > {thr.text}"
            if self.W > 1:
                cond = f"{self.pick(('any', 'all'))}({cond})"
            self.open(f"if ({cond})")
            self.accumulate(acc, mode, Expr(gn, self.W > 1))
            self.close()
        elif k == "loop_break":
            self.accumulate(acc, mode, g)
            limit = self.lit(self.pick(("1000.0", "1e6", "100.0"))) if self.is_float else self.pick(
                ("100000", "1000000", "65536"))
            if self.T == "float" and "e" in limit and not limit.endswith("f"):
                limit += "f"
            cond = f"{acc} > {limit}"
            if self.W > 1:
                cond = f"any({cond})"
            self.emit(f"if ({cond}) break;")
        else:
            cond = f"(({self.lin} + {lp.var}) & {self.pick(('1', '3', '7'))}) == 0"
            self.emit(f"if ({cond}) continue;")
            self.accumulate(acc, mode, g)

    def escape_loop(self) -> None:
        vals = self.values()
        leaves = [self.vexpr(v) for v in vals]
        z = self.fresh("z", "zr", "state")
        c = self.fresh("c", "cst", "cv")
        it = self.fresh("it", "iter", "steps_done", "count_it")
        ze = self.expr(1, leaves)
        ce = self.expr(1, leaves)
        if self.budget > 0 and self.chance(self.o.p_scalar_loop + 0.2):
            maxit = self.scalar_param("loop", ("max_iter", "maxit", "limit_it", "iters"))
            self.budget -= 1
            self.feat["scalar_trip_loop"] = True
        else:
            maxit = self.pick(("16", "32", "64", "100", "256"))
        self.comment("escape-time iteration")
        self.emit(f"{self.T} {z} = {ze.text};")
        self.emit(f"{self.decl()}{self.T} {c} = {ce.text};")
        self.emit(f"int {it} = 0;")
        step = self.pick((f"{z} = {z} * {z} + {c};", f"{z} = {z} * {z} * {self.lit('0.5')} + {c};",
                          f"{z} = sin({z}) * {self.lit('2.0')} + {c};", f"{z} = {z} * {z} - {c};"))
        bail = self.lit(self.pick(("2.0", "4.0", "10.0")))
        if self.chance(0.5):
            self.open(f"for (; {it} < {maxit}; {it}++)")
            self.emit(step)
            self.emit(f"if (fabs({z}) > {bail}) break;")
            self.close()
        else:
            self.open(f"while ({it} < {maxit} && fabs({z}) <= {bail})")
            self.emit(step)
            self.emit(f"{it}++;")
            self.close()
        self.feat["loops"].append("escape")
        self.feat["branches"].append("loop_break")
        self.cur_depth = max(self.cur_depth, 1)
        self.add_val(z, False, len(self.lines) - 1)
        self.add_val(c, False, len(self.lines) - 1)
        # the iteration count as a value
        self.declare(["fit", "niter_f", "itf"], Expr(f"({self.T}){it}", False, P_UNARY))

    # ---- chunked shape
    def chunked(self) -> None:
        n = self.n_name
        style = self.wpick({"consecutive": 1.0, "gridstride": 1.2, "strided_k": 0.8})
        map_mode = self.chance(0.55)
        self.feat["loops"].append(f"chunk_{style}")
        self.feat["scalar_trip_loop"] = True
        self.budget -= 1
        acc = None
        mode = self.acc_mode()
        if not map_mode:
            acc = self.fresh("acc", "sum", "partial_sum", "local_total")
            init = self.lowest() if mode == "max" else self.zero()
            if mode == "min":
                init = ({"float": "FLT_MAX", "double": "DBL_MAX", "int": "INT_MAX"}[self.T])
                if self.W > 1:
                    init = f"({self.VT})({init})"
            self.emit(f"{self.VT} {acc} = {init};")
        int_index = True
        if style == "consecutive":
            k = self.scalar_param("loop", self.rng.sample(["k", "per_item", "chunk", "work", "items"], 5))
            first = self.fresh("first", "start", "begin", "base")
            j = self.fresh("j", "e", "pos_j", "el")
            self.comment(f"each work-item handles {k} consecutive elements")
            self.emit(f"{self.decl()}size_t {first} = get_global_id(0) * (size_t){k};")
            self.open(f"for (size_t {j} = {first}; {j} < {first} + {k} && {j} < {n}; {j}++)")
            int_index = False
        elif style == "gridstride":
            j = self.fresh("j", "e", "pos_j", "el")
            self.comment("grid-stride loop")
            self.open(f"for (int {j} = {self.gid}; {j} < {n}; {j} += get_global_size(0))")
        else:
            k = self.scalar_param("loop", self.rng.sample(["k", "per_item", "chunk", "work", "items"], 5))
            t = self.fresh("t", "r", "it")
            j = self.fresh("j", "e", "pos_j", "el")
            self.open(f"for (int {t} = 0; {t} < {k}; {t}++)")
            self.emit(f"{self.decl()}int {j} = {self.gid} + {t} * (int)get_global_size(0);")
            self.emit(f"if ({j} >= {n}) break;")
        self.scopes.append([])
        pats = []
        for kk, buf in enumerate(self.inputs):
            if self.inplace and kk == 0:
                pat = "contig"
            else:
                opts = {"contig": 4.0, "gather": 8 * self.o.p_gather, "offset": 0.8}
                if int_index:
                    opts["neighbors"] = 0.8
                pat = self.wpick(opts)
            buf.pattern = pat
            pats.append(pat)
            self.point_load(buf, pat, at=j, int_index=int_index)
        self.feat["access"] = ["chunk:" + p for p in pats]
        vals = self.scopes[-1]
        # optional inner constant loop
        inner_vals: list[Val] = []
        if self.depth >= 2:
            c = self.pick((2, 3, 4, 8))
            v = self.fresh("i", "m", "q")
            inner = self.fresh("inner", "part", "tmp_acc")
            self.emit(f"{self.VT} {inner} = {self.zero()};")
            self.open(f"for (int {v} = 0; {v} < {c}; {v}++)")
            lv = [Expr(f"({self.T}){v}", False, P_UNARY) if self.is_float else Expr(v)]
            g = self.expr(self.rand_depth(), [self.vexpr(x) for x in vals] + lv)
            self.emit(f"{inner} += {g.text};")
            self.close()
            self.feat["loops"].append("const")
            inner_vals.append(self.add_val(inner, self.W > 1, len(self.lines) - 1))
            self.cur_depth = 2
        else:
            self.cur_depth = 1
        leaves = [self.vexpr(x) for x in self.values()]
        g = self.expr(self.rand_depth(), leaves)
        g = self.fold_all(g, [x for x in self.scopes[-1] if not self.is_used(x)])
        if self.branchy and self.is_float and self.W == 1 and self.chance(0.4):
            gn = self.fresh("r", "res", "val_r")
            self.emit(f"{self.T} {gn} = {g.text};")
            self.emit(f"if ({gn} < {self.zero()}) {gn} = {self.zero()};")
            self.feat["branches"].append("clip")
            g = Expr(gn)
        elif self.atomic:
            gn = self.fresh("r", "res", "val_r")
            self.emit(f"{self.decl()}{self.VT} {gn} = {self.bc(g).text if self.W > 1 else g.text};")
            g = Expr(gn, self.W > 1)
        if map_mode:
            self.store(g, j)
        else:
            assert acc is not None
            self.accumulate(acc, mode, g)
        if self.atomic:
            self.global_atomic(g)
        self.scopes.pop()
        self.close()
        if not map_mode:
            assert acc is not None
            self.add_val(acc, self.W > 1, len(self.lines) - 1)
            self.store(Expr(acc, self.W > 1), self.gid)

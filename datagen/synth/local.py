"""Local memory of the synthetic kernel generator: ``__local`` tiles with barriers (neighbours
within the tile, tile sweeps), tiled loops streaming an input through local memory,
work-group reductions and local histograms.
"""

from __future__ import annotations

import re

from kernelcast.datagen.synth.core import P_ADD, P_MUL, P_TERN, Expr, Param
from kernelcast.datagen.synth.loops import LoopBuilder


class LocalBuilder(LoopBuilder):
    """Adds ``__local`` memory patterns to :class:`LoopBuilder`."""

    # ---- local memory
    def local_buf(self, role: str = "tile") -> str:
        name = self.fresh(*self.pick((("tile", "cache"), ("cache", "tile"), ("scratch", "tmp_l"),
                                      ("shared", "sdata"), ("lmem", "tile"), ("sdata", "scratch"))))
        if self.chance(0.55):
            self.add_param(Param(name, "local", self.VT, role, elems="lsize"))
            self.feat["local"] = "arg"
        else:
            self.fixed_locals.append(f"{self.ql} {self.VT} {name}[1024];")
            self.feat["local"] = "fixed"
        return name

    def local_neighbors(self) -> None:
        tile = self.local_buf()
        lid, lsz = self.lid, self.lsz
        vals = self.values()
        src = self.expr(self.rng.randint(0, 2), [self.vexpr(v) for v in vals]) if vals else self.const_expr()
        if vals and not any(re.search(rf"\b{v.name}\b", src.text) for v in vals):
            src = self.combine(src, self.vexpr(self.pick(vals)))
        self.comment("stage values in local memory")
        self.emit(f"{tile}[{lid}] = {self.bc(src).text if self.W > 1 else src.text};")
        self.barrier()
        passes = 2 if self.chance(0.25) else 1
        for p in range(passes):
            variant = self.wpick({"nb": 3.0, "mirror": 0.8, "sweep": 1.2 if p == passes - 1 else 0.0})
            if variant == "nb":
                if self.chance(0.5):
                    le = f"({lid} > 0) ? {tile}[{lid} - 1] : {tile}[{lid}]"
                    ri = f"({lid} + 1 < {lsz}) ? {tile}[{lid} + 1] : {tile}[{lid}]"
                else:
                    le = f"{tile}[max({lid} - 1, 0)]"
                    ri = f"{tile}[min({lid} + 1, {lsz} - 1)]"
                a = self.declare(["tl", "lleft", "nb_l"], Expr(le, self.W > 1, P_TERN))
                b = self.declare(["tr", "lright", "nb_r"], Expr(ri, self.W > 1, P_TERN))
                c = self.declare(["tc", "own", "mine"], Expr(f"{tile}[{lid}]", self.W > 1))
                new = [a, b, c]
            elif variant == "mirror":
                new = [self.declare(["mirror", "other", "partner"],
                                    Expr(f"{tile}[{lsz} - 1 - {lid}]", self.W > 1))]
            else:
                acc = self.fresh("lsum", "tile_acc", "group_acc")
                t = self.fresh("t", "m", "q")
                self.emit(f"{self.VT} {acc} = {self.zero()};")
                self.open(f"for (int {t} = 0; {t} < {lsz}; {t}++)")
                self.feat["loops"].append("local_sweep")
                tv = Expr(f"{tile}[{t}]", self.W > 1)
                own = [self.vexpr(v) for v in self.values()]
                g = self.expr(self.rng.randint(1, 2), [tv, tv, *own[-3:]])
                if tv.text not in g.text:
                    g = self.combine(g, tv)
                self.emit(f"{acc} += {g.text};")
                self.close()
                self.cur_depth = max(self.cur_depth, 1)
                new = [self.add_val(acc, self.W > 1, len(self.lines) - 1)]
            if p < passes - 1:
                sm = new[0]
                e = self.vexpr(sm)
                for v in new[1:]:
                    e = self.binop(e, "+", self.vexpr(v), P_ADD)
                if len(new) > 1:
                    e = self.binop(e, "*", Expr(self.lit("0.3333333")), P_MUL) if self.is_float else \
                        self.binop(e, "/", Expr("3"), P_MUL)
                self.barrier()
                self.emit(f"{tile}[{lid}] = {e.text};")
                self.barrier()

    def tiled_loop(self) -> None:
        tb = next(b for b in self.inputs if b.pattern in ("tiled", "contig+tiled"))
        tile = self.local_buf()
        lid, lsz, n = self.lid, self.lsz, self.n_name
        self.budget -= 1
        self.feat["scalar_trip_loop"] = True
        self.feat["loops"] += ["tiled", "tile_inner"]
        self.cur_depth = max(self.cur_depth, 2)
        acc = self.fresh("acc", "sum", "total", "force_acc")
        mode = self.acc_mode()
        init = self.lowest() if mode == "max" else self.zero()
        self.comment("process the input tile by tile through local memory")
        self.emit(f"{self.VT} {acc} = {init};")
        base = self.fresh("base", "tile_start", "t0", "off0")
        j = self.fresh("j", "src_j", "gj")
        t = self.fresh("t", "m", "q", "jj")
        cnt = self.fresh("cnt", "tile_n", "valid")
        self.open(f"for (int {base} = 0; {base} < {n}; {base} += {lsz})")
        self.emit(f"{self.decl()}int {j} = {base} + {lid};")
        ld = self.ld(tb, j)
        self.emit(f"{tile}[{lid}] = ({j} < {n}) ? {self.bc(ld).text if self.W > 1 else ld.text} : {self.zero()};")
        self.barrier()
        self.emit(f"{self.decl()}int {cnt} = min({lsz}, {n} - {base});")
        self.open(f"for (int {t} = 0; {t} < {cnt}; {t}++)")
        tv = Expr(f"{tile}[{t}]", self.W > 1)
        own = [self.vexpr(v) for v in self.values()]
        g = self.expr(self.rand_depth(), [tv, tv, *own])
        if tv.text not in g.text:
            g = self.combine(g, tv)
        self.accumulate(acc, mode, g)
        self.close()
        self.barrier()
        self.close()
        self.add_val(acc, self.W > 1, len(self.lines) - 1)

    def local_reduce(self, r: Expr) -> None:
        tile = self.local_buf()
        lid, lsz = self.lid, self.lsz
        op = "max" if self.chance(0.3) else "sum"
        ident = self.lowest() if op == "max" else self.zero()
        contrib = self.bc(r) if self.W > 1 else r
        self.comment("work-group reduction in local memory")
        if self.n_scalar:
            self.emit(f"{tile}[{lid}] = ({self.lin} < {self.n_name}) ? {self.wrap(contrib, P_TERN + 1)} : {ident};")
        else:
            self.emit(f"{tile}[{lid}] = {contrib.text};")
        self.barrier()
        pname = self.fresh("partial", "block_sums", "group_out", "sums")
        pp = Param(pname, "global", self.VT, "partial", written=True)
        self.add_param(pp)
        self.feat["outputs"].append("partial")

        def comb(a: str, b: str) -> str:
            if op == "sum":
                return f"{a} + {b}"
            return f"{'fmax' if self.is_float else 'max'}({a}, {b})"

        if self.chance(0.7):
            s = self.fresh("s", "stride_l", "half")
            self.open(f"for (int {s} = {lsz} / 2; {s} > 0; {s} >>= 1)")
            self.feat["loops"].append("reduce_tree")
            self.open(f"if ({lid} < {s})")
            if op == "sum":
                self.emit(f"{tile}[{lid}] += {tile}[{lid} + {s}];")
            else:
                self.emit(f"{tile}[{lid}] = {comb(f'{tile}[{lid}]', f'{tile}[{lid} + {s}]')};")
            self.close()
            self.barrier()
            self.close()
            self.open(f"if ({lid} == 0)")
            self.emit(f"{pname}[{self.grp}] = {tile}[0];")
            self.close()
        else:
            self.open(f"if ({lid} == 0)")
            acc = self.fresh("gsum", "block", "red")
            t = self.fresh("t", "m", "q")
            self.emit(f"{self.VT} {acc} = {ident};")
            self.open(f"for (int {t} = 0; {t} < {lsz}; {t}++)")
            self.feat["loops"].append("reduce_serial")
            self.emit(f"{acc} = {comb(acc, f'{tile}[{t}]')};")
            self.close()
            self.emit(f"{pname}[{self.grp}] = {acc};")
            self.close()
        self.cur_depth = max(self.cur_depth, 1)

    def local_hist(self, r: Expr) -> None:
        bins = self.pick((16, 32, 64))
        lh = self.fresh("lhist", "local_hist", "lbins")
        self.fixed_locals.append(f"{self.ql} int {lh}[{bins}];")
        self.feat["local"] = "fixed"
        lid, lsz = self.lid, self.lsz
        b = self.fresh("b", "bin_i", "bb")
        self.comment("per-group histogram in local memory, merged with global atomics")
        self.open(f"for (int {b} = {lid}; {b} < {bins}; {b} += {lsz})")
        self.emit(f"{lh}[{b}] = 0;")
        self.close()
        self.barrier()
        bin_ = self.bin_of(r, bins)
        if self.n_scalar:
            self.open(f"if ({self.lin} < {self.n_name})")
            self.emit(f"atomic_inc(&{lh}[{bin_}]);")
            self.close()
        else:
            self.emit(f"atomic_inc(&{lh}[{bin_}]);")
        self.barrier()
        hname = self.fresh("hist", "bins", "histogram", "counts")
        self.add_param(Param(hname, "global", "int", "atomic", written=True))
        b2 = self.fresh("b", "bin_j", "bk")
        self.open(f"for (int {b2} = {lid}; {b2} < {bins}; {b2} += {lsz})")
        self.emit(f"atomic_add(&{hname}[{b2}], {lh}[{b2}]);")
        self.close()
        self.feat["atomic"] = "local_hist"
        self.feat["loops"] += ["hist_init", "hist_merge"]
        self.cur_depth = max(self.cur_depth, 1)

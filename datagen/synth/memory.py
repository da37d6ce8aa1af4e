"""Memory access patterns of the synthetic kernel generator: bound checks, point loads (contiguous,
offset, strided, gathered, transposed, neighbours), early returns, stores (scalar, vector pointer,
``vstoreN``; contiguous, transposed, scattered; a second output) and global atomics.
"""

from __future__ import annotations

import re

from kernelcast.datagen.synth.core import P_ADD, P_ATOM, P_MUL, P_TERN, Buf, Expr, Param
from kernelcast.datagen.synth.expressions import ExprBuilder


class MemoryBuilder(ExprBuilder):
    """Adds global-memory access patterns, stores and atomics to :class:`ExprBuilder`."""

    # ---- phases
    def bound_open(self) -> None:
        if self.bound == "early_return":
            self.comment("bounds check")
            if self.chance(0.7):
                self.emit(f"if ({self.lin} >= {self.n_name}) return;")
            else:
                self.open(f"if ({self.lin} >= {self.n_name})")
                self.emit("return;")
                self.close()
        elif self.bound == "wrap":
            self.open(f"if ({self.lin} < {self.n_name})")

    def bound_close(self) -> None:
        if self.bound == "wrap":
            self.close()

    def load_phase(self) -> None:
        """Point loads (relative to the work-item's own element)."""
        pats = []
        for k, buf in enumerate(self.inputs):
            if self.inplace and k == 0:
                pat = "contig"
            elif self.dims == 1:
                pat = self.wpick({"contig": 4.0, "offset": 1.2, "strided": 0.8,
                                  "gather": 8 * self.o.p_gather, "neighbors": 1.5,
                                  "deferred": 1.3 if self.depth > 0 and k > 0 else 0.0})
            elif self.dims == 2:
                pat = self.wpick({"contig": 4.0, "transposed": 1.0, "neighbors": 2.0,
                                  "gather": 4 * self.o.p_gather,
                                  "deferred": 1.3 if self.depth > 0 and k > 0 else 0.0})
            else:
                pat = self.wpick({"contig": 4.0, "neighbors": 2.0,
                                  "deferred": 1.0 if self.depth > 0 and k > 0 else 0.0})
            buf.pattern = pat
            pats.append(pat)
        if self.local_pattern == "tiled":
            # the tiled loop streams one input through local memory
            cand = [b for b in self.inputs if b.pattern != "contig" or len(self.inputs) == 1]
            tb = cand[-1] if cand and not (self.inplace and cand[-1] is self.inputs[0]) else None
            if tb is None or (self.inplace and tb is self.inputs[0]):
                tb = self.inputs[-1] if not (self.inplace and len(self.inputs) == 1) else None
            if tb is not None:
                if tb is self.inputs[0] and len(self.inputs) == 1:
                    tb.pattern = "contig+tiled"
                else:
                    tb.pattern = "tiled"
            else:
                self.local_pattern = "neighbors"
        self.feat["access"] = [b.pattern for b in self.inputs]
        if any(b.pattern in ("contig", "offset", "strided", "gather", "neighbors", "transposed",
                             "contig+tiled") for b in self.inputs):
            self.comment("load inputs")
        for buf in self.inputs:
            self.point_load(buf, buf.pattern)

    def index_buf(self) -> Param:
        if self.index_param is None:
            self.index_style = "clamp" if self.chance(0.5) else "mod"
            name = self.fresh(*self.pick((("idx", "indices"), ("indices", "idx"), ("perm", "idx"),
                                          ("map", "indices"), ("lookup", "idx"))))
            ctype = "int" if self.index_style == "clamp" else "uint"
            self.index_param = self.add_param(Param(name, "global", ctype, "index", const=True))
        return self.index_param

    def gather_index(self, at: str) -> str:
        ip = self.index_buf()
        n = self.n_name
        if self.index_style == "clamp":
            j = self.fresh("j", "src_idx", "jj", "nb")
            self.emit(f"{self.decl()}int {j} = clamp({ip.name}[{at}], 0, {n} - 1);")
            return j
        return f"{ip.name}[{at}] % {n}"

    def point_load(self, buf: Buf, pat: str, at: str | None = None, int_index: bool = True) -> None:
        lb = at or self.lb
        n = self.n_name
        names = self.val_names(buf)
        if pat in ("contig", "contig+tiled"):
            self.load_val(buf, lb, names)
        elif pat == "offset":
            if self.chance(0.5):
                off = self.scalar_param("offset", ("offset", "shift", "off", "delta"))
                idx = f"({lb} + {off}) % {n}"
            else:
                c = self.pick(("1", "2", "3", "4", "8", "16"))
                idx = f"min({lb} + {c}, {n} - 1)" if self.chance(0.5) and int_index else f"({lb} + {c}) % {n}"
            self.load_val(buf, idx, names)
        elif pat == "strided":
            if self.chance(0.5):
                s = self.scalar_param("stride", ("stride", "step_size", "pitch", "jump"))
            else:
                s = self.pick(("2", "4", "8", "16", "32", "3"))
            self.load_val(buf, f"((uint){lb} * {s}) % {n}", names)
        elif pat == "gather":
            self.load_val(buf, self.gather_index(lb), names)
        elif pat == "transposed":
            x, y = self.coords[0], self.coords[1]
            self.load_val(buf, f"{x} * {self.ext[1]} + {y}", names)
        elif pat == "neighbors":
            self.neighbor_loads(buf, lb)
        # deferred / tiled: read later

    def neighbor_loads(self, buf: Buf, lb: str) -> None:
        n = self.n_name
        self.comment("neighbours")
        if self.dims == 1:
            radius = 2 if self.chance(0.25) else 1
            names = self.pick((("left", "right", "center"), ("prev", "next", "cur"), ("xm", "xp", "x0"),
                               ("lo", "hi", "mid")))
            clamp_style = self.chance(0.6)
            for r in range(1, radius + 1):
                sfx = "" if r == 1 else str(r)
                if clamp_style:
                    li, ri = f"max({lb} - {r}, 0)", f"min({lb} + {r}, {n} - 1)"
                    self.load_val(buf, li, [names[0] + sfx, f"l{r}"])
                    self.load_val(buf, ri, [names[1] + sfx, f"r{r}"])
                else:
                    zl = self.zero(buf.mode != "scalar")
                    le = self.ld(buf, f"{lb} - {r}")
                    re_ = self.ld(buf, f"{lb} + {r}")
                    self.declare([names[0] + sfx, f"l{r}"],
                                 Expr(f"({lb} >= {r}) ? {le.text} : {zl}", le.vec, P_TERN))
                    self.declare([names[1] + sfx, f"r{r}"],
                                 Expr(f"({lb} + {r} < {n}) ? {re_.text} : {zl}", re_.vec, P_TERN))
            if self.chance(0.6):
                self.load_val(buf, lb, [names[2], "c0"])
            return
        x, y = self.coords[0], self.coords[1]
        w, h = self.ext[0], self.ext[1]
        if self.dims == 2:
            row = f"{y} * {w}"
            opts = [("left", f"{row} + max({x} - 1, 0)"), ("right", f"{row} + min({x} + 1, {w} - 1)"),
                    ("up", f"max({y} - 1, 0) * {w} + {x}"), ("down", f"min({y} + 1, {h} - 1) * {w} + {x}")]
            if self.chance(0.3):
                opts.append(("center", self.lin))
        else:
            z, d = self.coords[2], self.ext[2]
            base = f"({z} * {h} + {y}) * {w}"
            opts = [("west", f"{base} + max({x} - 1, 0)"), ("east", f"{base} + min({x} + 1, {w} - 1)"),
                    ("south", f"({z} * {h} + max({y} - 1, 0)) * {w} + {x}"),
                    ("north", f"({z} * {h} + min({y} + 1, {h} - 1)) * {w} + {x}"),
                    ("below", f"(max({z} - 1, 0) * {h} + {y}) * {w} + {x}"),
                    ("above", f"(min({z} + 1, {d} - 1) * {h} + {y}) * {w} + {x}")]
            k = self.pick((2, 4, 6, 6))
            opts = opts[:k]
            if self.chance(0.4):
                opts.append(("center", self.lin))
        for nm, idx in opts:
            self.load_val(buf, idx, [nm, nm[0] + "v", nm + "_v"])

    def early_return(self) -> None:
        vals = self.values()
        if not vals:
            return
        v = self.pick(vals)
        e = self.vexpr(v)
        thr = self.coef_expr() if self.chance(0.5) else self.const_expr()
        cond = self.compare(e, thr).text
        if v.vec:
            cond = f"{self.pick(('all', 'any'))}({cond})"
        self.feat["branches"].append("early_return")
        self.open(f"if ({cond})")
        if self.chance(0.7):
            zvec = self.W > 1 and self.out.mode != "scalar"
            self.store(Expr(self.zero(zvec), zvec) if self.chance(0.5) else e, self.lin_store_index())
        self.emit("return;")
        self.close()

    def lin_store_index(self) -> str:
        return self.lin

    # ---- stores
    def scalarize(self, e: Expr) -> Expr:
        if not e.vec:
            return e
        name = e.text
        if e.prec != P_ATOM or not re.fullmatch(r"\w+", name):
            # a temporary, not registered as a value (it may live in a nested block)
            name = self.fresh("rv", "vres", "vr")
            self.emit(f"{self.decl()}{self.VT} {name} = {e.text};")
        comps = ["x", "y", "z", "w"][: self.W]
        if self.is_float and self.chance(0.3):
            return self.call("dot", Expr(name, True), Expr(name, True), vec=False)
        if self.is_float and self.chance(0.2):
            return self.call("length", Expr(name, True), vec=False)
        return Expr(" + ".join(f"{name}.{c}" for c in comps), False, P_ADD)

    def store(self, r: Expr, idx: str, buf: Buf | None = None) -> None:
        b = buf or self.out
        name = b.param.name
        if b.mode == "vload":
            self.emit(f"vstore{self.W}({self.bc(r).text}, {idx}, {name});")
        elif b.mode == "vecptr":
            self.emit(f"{name}[{idx}] = {self.bc(r).text};")
        else:
            self.emit(f"{name}[{idx}] = {self.scalarize(r).text};")

    def final_stores(self, r: Expr) -> None:
        guard = self.bound == "clamp" and self.n_scalar
        lin = self.lin
        if guard:
            self.open(f"if ({lin} < {self.n_name})")
        guard_line = len(self.lines)
        style = "contig"
        if self.local_pattern in ("reduce", "hist") and self.chance(0.5) and not self.inplace:
            style = "none"
        elif self.dims == 2 and not self.inplace and self.chance(0.15):
            style = "transposed"
        elif self.index_param is not None and not self.inplace and self.chance(0.3):
            style = "scatter"
        if style == "none":
            # the output of this kernel is the per-group result only; drop the unused output buffer
            self.params.remove(self.out.param)
        else:
            if style == "contig":
                idx = lin
            elif style == "transposed":
                idx = f"{self.coords[0]} * {self.ext[1]} + {self.coords[1]}"
            else:
                ip = self.index_param
                assert ip is not None
                idx = f"clamp({ip.name}[{self.lb}], 0, {self.n_name} - 1)" if ip.ctype == "int" else \
                    f"{ip.name}[{self.lb}] % {self.n_name}"
            self.store(r, idx)
            self.feat["outputs"].append(style if not self.inplace else "inplace")
        # a second output
        vals = self.values()
        if style != "none" and vals and self.chance(0.2):
            aname = self.fresh(self.theme_out[1], "aux", "extra_out")
            amode = "scalar" if self.W == 1 else self.pick(("vecptr", "vload", "scalar"))
            ap = Param(aname, "global", self.T, "output", written=True)
            if amode == "vecptr":
                ap.ctype = self.VT
            elif amode == "vload":
                ap.elems = f"gsize*{self.W}"
            self.add_param(ap)
            v = self.pick(vals)
            e = self.vexpr(v)
            if self.is_float and self.chance(0.4):
                e = self.unary(e)
            self.store(e, lin, Buf(ap, amode))
            self.feat["outputs"].append("aux")
        if self.atomic and self.local_pattern != "hist":
            self.global_atomic(r)
        if guard:
            if len(self.lines) == guard_line:      # nothing was stored: drop the empty block
                del self.lines[-1]
                self.level -= 1
            else:
                self.close()

    def bin_of(self, r: Expr, bins: int) -> str:
        s = self.scalarize(r)
        bname = self.fresh("bin", "bucket", "slot")
        if self.is_float:
            k = self.pick(("16.0", "8.0", "32.0", "4.0"))
            k = self.lit(k)
            self.emit(f"{self.decl()}int {bname} = clamp(convert_int_sat({self.wrap(s, P_MUL)} * {k}), 0, {bins - 1});")
        else:
            self.emit(f"{self.decl()}int {bname} = (int)((uint)({s.text}) % {bins}u);")
        return bname

    def global_atomic(self, r: Expr) -> None:
        kind = self.wpick({"counter": 1.0, "hist": 1.0, "sum": 1.0 if not self.is_float else 0.5, "max": 0.7})
        name = self.fresh(*{"counter": ("count", "counter", "num_hits"), "hist": ("hist", "bins", "histogram"),
                            "sum": ("total", "sum_out", "accum"), "max": ("maxval", "peak", "max_out")}[kind])
        self.add_param(Param(name, "global", "int", "atomic", written=True))
        self.feat["atomic"] = kind
        self.comment("global atomic update")
        s = self.scalarize(r)
        if kind == "counter":
            thr = self.coef_expr() if self.chance(0.4) else self.const_expr()
            self.open(f"if ({self.compare(s, thr).text})")
            self.emit(self.pick((f"atomic_inc(&{name}[0]);", f"atomic_add({name}, 1);", f"atomic_inc({name});")))
            self.close()
        elif kind == "hist":
            bins = self.pick((16, 32, 64, 256))
            b = self.bin_of(s, bins)
            self.emit(f"atomic_inc(&{name}[{b}]);")
        else:
            fn = "atomic_add" if kind == "sum" else "atomic_max"
            if self.is_float:
                val = f"convert_int_sat({self.wrap(s, P_MUL)} * {self.lit('100.0')})"
            else:
                val = s.text
            self.emit(f"{fn}(&{name}[0], {val});")

"""Assembly of one synthetic kernel: the plan (dimensions, types, style, buffers), the helper
function, branches after the loops, the order of the phases, the prologue of index
definitions, the kernel name and the final source text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kernelcast.datagen.synth.core import KNAME, P_MUL, RESERVED, THEMES, Buf, Expr, Param, Val
from kernelcast.datagen.synth.local import LocalBuilder


class KernelBuilder(LocalBuilder):
    """The whole builder: :meth:`build` plans a kernel, emits its phases and assembles the source."""

    # ---- planning
    def plan(self) -> None:
        o, r = self.o, self.rng
        self.dims = 1
        if r.random() < o.p_2d:
            self.dims = 3 if r.random() < o.share_3d else 2
        u = r.random()
        self.T = "double" if u < o.p_double else ("int" if u < o.p_double + o.p_int else "float")
        self.W = self.pick((2, 4, 4)) if r.random() < o.p_vector else 1
        self.use_const = r.random() < 0.65
        self.underscores = r.random() < 0.85
        self.restrict = r.random() < 0.35
        self.indent = "  " if r.random() < 0.15 else "    "
        self.brace_newline = r.random() < 0.5
        self.qg = "__global" if self.underscores else "global"
        self.ql = "__local" if self.underscores else "local"

        self.local = r.random() < o.p_local
        self.atomic = r.random() < o.p_atomic
        self.branchy = r.random() < o.p_branch
        self.shape = "point"
        if self.dims == 1 and not self.local and r.random() < o.p_chunked:
            self.shape = "chunked"
        self.local_pattern = None
        if self.local:
            lp = {"neighbors": 3.0, "reduce": 2.5, "tiled": 1.5 if self.dims == 1 else 0.0,
                  "hist": 3.0 if self.atomic else 0.0}
            self.local_pattern = self.wpick(lp)
        dw = [0.35, 0.4, 0.25] + [0.1] * max(0, o.max_loop_depth - 2)
        self.depth = self.rng.choices(range(max(0, o.max_loop_depth) + 1),
                                      weights=dw[: max(0, o.max_loop_depth) + 1])[0]

        # index names
        if self.dims == 1:
            self.gid = self.fresh(self.pick(("gid", "i", "id", "tid", "idx", "gi")))
            self.coords = [self.gid]
            self.ext = []
            self.lin = self.gid
        else:
            cs = self.pick(((("x", "y", "z")), ("col", "row", "slice"), ("gx", "gy", "gz"), ("i", "j", "k")))
            es = self.pick((("width", "height", "depth"), ("w", "h", "d"), ("nx", "ny", "nz"),
                            ("cols", "rows", "layers")))
            self.coords = [self.fresh(c) for c in cs[: self.dims]]
            self.ext = [self.fresh(e) for e in es[: self.dims]]
            self.lin = self.fresh(*self.pick((("idx", "gid", "pos"), ("gid", "idx"), ("pos", "idx"),
                                              ("lin", "idx"))))
            self.gid = self.lin
        self.lid = self.fresh("lid", "li", "lx")
        self.lsz = self.fresh(*self.pick((("lsz", "lsize"), ("lsize", "lsz"), ("local_size", "lsz"),
                                          ("wg", "lsz"))))
        self.grp = self.fresh(*self.pick((("grp", "group"), ("group", "grp"), ("wg_id", "grp"),
                                          ("bid", "grp"))))

        # problem size n: a scalar argument, or derived from the NDRange
        n_scalar = r.random() < (0.8 if self.dims == 1 else 0.3) or self.shape == "chunked"
        self.n_name = self.fresh(*self.pick((("n", "N"), ("N", "n"), ("count", "n"), ("len", "n"),
                                             ("size", "n"), ("num", "n"), ("nelems", "n"), ("total", "n"))))
        self.n_scalar = n_scalar
        if n_scalar:
            self.add_param(Param(self.n_name, "scalar", "int", "n"))

        # bound check
        if self.local:
            self.bound = "clamp" if n_scalar else "none"
        elif self.shape == "chunked" or not n_scalar:
            self.bound = "none"
        else:
            self.bound = "early_return" if r.random() < 0.6 else "wrap"
        self.feat["bound_check"] = self.bound
        self.safe = self.fresh("i", "ci", "si", "safe_i", "j0") if self.bound == "clamp" else self.lin
        self.lb = self.safe                       # base index for loads

        # buffers
        theme_in, theme_out = self.pick(THEMES)
        n_in = self.rng.choices([1, 2, 3], weights=[0.35, 0.4, 0.25])[0]
        n_in = max(1, min(n_in, o.max_inputs))
        self.inputs = []
        inplace = (not self.local and self.chance(0.1))
        for k in range(n_in):
            if k == 0 and inplace:
                name = self.fresh(self.pick(("data", "buf", "vals", "field_data", "arr")))
                p = Param(name, "global", self.T, "inout", const=False, written=True)
            else:
                name = self.fresh(theme_in[k], theme_in[k] + "_in", f"in{k}")
                p = Param(name, "global", self.T, "input", const=True)
            mode = "scalar"
            if self.W > 1:
                mode = "vecptr" if self.chance(0.5) else "vload"
            conv = False
            if self.T == "float" and k > 0 and self.chance(0.12) and not inplace:
                p.ctype = "int"
                conv = True
            if mode == "vecptr":
                p.ctype = f"{p.ctype}{self.W}"
            elif mode == "vload":
                p.elems = f"gsize*{self.W}"
            self.add_param(p)
            self.inputs.append(Buf(p, mode, conv))
        self.inplace = inplace
        # primary output
        if inplace:
            self.out = self.inputs[0]
        else:
            oname = self.fresh(theme_out[0], "out", "dst")
            omode = "scalar"
            if self.W > 1:
                omode = self.wpick({"vecptr": 0.45, "vload": 0.45, "scalar": 0.1})
            op = Param(oname, "global", self.T, "output", written=True)
            if omode == "vecptr":
                op.ctype = f"{self.T}{self.W}"
            elif omode == "vload":
                op.elems = f"gsize*{self.W}"
            self.add_param(op)
            self.out = Buf(op, omode)
        self.theme_out = theme_out

    # ---- prologue
    def prologue(self) -> list[str]:
        defs: list[tuple[str, str]] = []
        c = "const " if self.use_const else ""
        if self.dims == 1:
            defs.append((self.gid, f"{c}int {self.gid} = get_global_id(0);"))
        else:
            for d, name in enumerate(self.coords):
                defs.append((name, f"{c}int {name} = get_global_id({d});"))
            for d, name in enumerate(self.ext):
                defs.append((name, f"{c}int {name} = get_global_size({d});"))
            x, y = self.coords[0], self.coords[1]
            w, h = self.ext[0], self.ext[1]
            if self.dims == 2:
                defs.append((self.lin, f"{c}int {self.lin} = {y} * {w} + {x};"))
            else:
                z = self.coords[2]
                defs.append((self.lin, f"{c}int {self.lin} = ({z} * {h} + {y}) * {w} + {x};"))
        if not self.n_scalar:
            if self.dims == 1:
                defs.append((self.n_name, f"{c}int {self.n_name} = get_global_size(0);"))
            else:
                defs.append((self.n_name, f"{c}int {self.n_name} = {' * '.join(self.ext)};"))
        if self.dims == 1:
            defs.append((self.lid, f"{c}int {self.lid} = get_local_id(0);"))
            defs.append((self.lsz, f"{c}int {self.lsz} = get_local_size(0);"))
            defs.append((self.grp, f"{c}int {self.grp} = get_group_id(0);"))
        elif self.dims == 2:
            defs.append((self.lid, f"{c}int {self.lid} = get_local_id(1) * get_local_size(0) + get_local_id(0);"))
            defs.append((self.lsz, f"{c}int {self.lsz} = get_local_size(0) * get_local_size(1);"))
            defs.append((self.grp, f"{c}int {self.grp} = get_group_id(1) * get_num_groups(0) + get_group_id(0);"))
        else:
            defs.append((self.lid, f"{c}int {self.lid} = (get_local_id(2) * get_local_size(1) + get_local_id(1))"
                                   " * get_local_size(0) + get_local_id(0);"))
            defs.append((self.lsz, f"{c}int {self.lsz} = get_local_size(0) * get_local_size(1)"
                                   " * get_local_size(2);"))
            defs.append((self.grp, f"{c}int {self.grp} = (get_group_id(2) * get_num_groups(1) + get_group_id(1))"
                                   " * get_num_groups(0) + get_group_id(0);"))
        if self.bound == "clamp":
            defs.append((self.safe, f"{c}int {self.safe} = min({self.lin}, {self.n_name} - 1);"))

        body = "\n".join(t for _, t in self.lines)
        text = body
        chosen: list[str] = []
        for name, line in reversed(defs):
            if re.search(rf"\b{re.escape(name)}\b", text):
                chosen.append(line)
                rhs = line.split("=", 1)[1]
                text += "\n" + rhs
        chosen.reverse()
        return self.fixed_locals + chosen

    # ---- branches after the loops
    def branch_expr(self, leaves: Sequence[Expr], target: str) -> Expr:
        """An expression to assign to ``target`` in a branch (never ``target`` itself)."""
        e = self.expr(self.rng.randint(1, 2), leaves)
        if e.text == target or e.const:
            x = self.pick([lf for lf in leaves if not lf.const and lf.text != target] or
                          [Expr(target, self.W > 1)])
            e = self.unary(x) if self.is_float else self.binop(x, "*", self.const_expr(), P_MUL)
        return e

    def post_branches(self, r: Val) -> None:
        leaves = [self.vexpr(v) for v in self.values()]
        kinds = {"mod": 2.0, "data": 2.0, "switch": 0.7}
        if self.W == 1:
            kinds["clip"] = 1.0
        k = self.wpick(kinds)
        self.feat["branches"].append(k)
        rn = r.name
        if k in ("mod", "data"):
            if k == "mod":
                if self.dims == 1:
                    m = self.pick(("2", "3", "4", "8", "16"))
                    cond = self.pick((f"{self.lin} % {m} == 0", f"({self.lin} & 1) == 0", f"{self.lin} % {m} != 0"))
                else:
                    x, y = self.coords[0], self.coords[1]
                    cond = self.pick((f"({x} + {y}) % 2 == 0", f"{x} < {self.ext[0]} / 2", f"{y} % 4 == 0",
                                      f"({x} & 1) == ({y} & 1)"))
            else:
                a = self.pick(leaves)
                b = self.coef_expr() if self.chance(0.4) else (self.pick(leaves) if self.chance(0.5)
                                                                  else self.const_expr())
                cond = self.compare(a, b).text
                if a.vec or b.vec:
                    cond = f"{self.pick(('any', 'all'))}({cond})"
            self.open(f"if ({cond})")
            e1 = self.branch_expr(leaves, rn)
            self.emit(f"{rn} = {self.bc(e1).text if self.W > 1 else e1.text};")
            self.close()
            if self.chance(0.6):
                self.open("else")
                e2 = self.branch_expr(leaves, rn)
                self.emit(f"{rn} = {self.bc(e2).text if self.W > 1 else e2.text};")
                self.close()
        elif k == "switch":
            sel = self.lin if self.dims == 1 else f"{self.coords[0]} + {self.coords[1]}"
            cases = self.pick((3, 4))
            self.open(f"switch (({sel}) % {cases})")
            for cidx in range(cases):
                label = f"case {cidx}:" if cidx < cases - 1 else "default:"
                self.emit(label)
                self.level += 1
                e = self.branch_expr(leaves, rn)
                op = self.pick(("=", "+=", "*=")) if cidx else "="
                self.emit(f"{rn} {op} {self.bc(e).text if self.W > 1 else e.text};")
                self.emit("break;")
                self.level -= 1
            self.close()
        else:
            lo = self.zero()
            hi = self.lit(self.pick(("1.0", "255.0", "100.0"))) if self.is_float else self.pick(("255", "1000"))
            if self.chance(0.5):
                self.emit(f"if ({rn} < {lo}) {rn} = {lo};")
                if self.chance(0.5):
                    self.emit(f"else if ({rn} > {hi}) {rn} = {hi};")
            else:
                self.open(f"if ({rn} < {lo})")
                self.emit(f"{rn} = {self.pick((lo, f'-{rn}'))};")
                self.close()


    # ---- helper function
    def make_helper(self) -> None:
        verbs = ("activate", "blend", "transform", "combine", "shade", "score", "weigh", "mix_vals",
                 "response", "kernel_fn", "filter_val", "op")
        verb = self.pick(verbs)
        self.helper = f"{KNAME}_{verb}"
        self.helper_arity = self.pick((1, 2, 2))
        pnames = self.pick((("x", "y"), ("a", "b"), ("u", "v"), ("p", "q"), ("lhs", "rhs")))
        ty = self.VT
        self.in_helper = True
        leaves = [Expr(pnames[0], self.W > 1)]
        if self.helper_arity == 2:
            leaves.append(Expr(pnames[1], self.W > 1))
        saved_used = self.used
        self.used = set(RESERVED) | set(pnames)
        lines: list[str] = []
        if self.chance(0.4):
            t = self.fresh("t", "tmp", "h")
            e = self.expr(self.rng.randint(1, 2), leaves)
            lines.append(f"    const {ty} {t} = {self.bc(e).text if self.W > 1 else e.text};")
            leaves = [*leaves, Expr(t, self.W > 1)]
        e = self.expr(self.rng.randint(1, self.o.max_expr_depth), leaves)
        for lf in leaves:
            if not re.search(rf"\b{lf.text}\b", e.text):
                e = self.combine(e, lf)
        lines.append(f"    return {self.bc(e).text if self.W > 1 else e.text};")
        self.used = saved_used
        self.in_helper = False
        params = ", ".join(f"{ty} {p}" for p in pnames[: self.helper_arity])
        head = f"{ty} {self.helper}({params})"
        if self.brace_newline:
            self.helper_lines = [head, "{", *lines, "}"]
        else:
            self.helper_lines = [head + " {", *lines, "}"]
        self.feat["helper"] = True

    # ---- whole kernel
    def build(self) -> tuple[str, str, int, dict[str, Any]]:
        self.plan()
        if self.chance(self.o.p_helper):
            self.make_helper()
        self.level = 0
        self.bound_open()
        if self.shape == "chunked":
            self.chunked()
        else:
            self.load_phase()
            if self.branchy and self.bound != "clamp" and not self.local and self.chance(0.2):
                self.early_return()
            if self.local_pattern == "neighbors":
                self.local_neighbors()
            if self.local_pattern == "tiled":
                self.tiled_loop()
                self.depth = max(0, self.depth - 1)
            if self.depth:
                self.loop_phase()
            vals = self.values()
            leaves = [self.vexpr(v) for v in vals]
            unused = [v for v in vals if not self.is_used(v)]
            e = self.expr(self.rand_depth(), leaves)
            e = self.fold_all(e, unused)
            if not vals:
                e = self.combine(e, self.const_expr())
            if self.helper and not self.helper_used:
                e = self.helper_call(e, self.pick(leaves) if leaves else self.const_expr())
            if self.branchy and (self.chance(0.75) or "early_return" not in self.feat["branches"]):
                rv = self.declare(self.pick((("r", "res"), ("res", "r"), ("result_v", "r"), ("outv", "r"),
                                             ("val", "r"))), e, const=False, vec=self.W > 1)
                self.post_branches(rv)
                r = self.vexpr(rv)
            elif self.local_pattern or self.atomic or self.chance(0.5):
                rv = self.declare(self.pick((("r", "res"), ("res", "r"), ("y_out", "r"), ("val", "r"))), e,
                                  vec=self.W > 1)
                r = self.vexpr(rv)
            else:
                r = self.bc(e) if self.W > 1 else e
            if self.local_pattern == "reduce":
                if self.atomic or self.chance(0.5):
                    self.final_stores(r)
                elif self.out.param in self.params and self.out.param.role == "output":
                    self.params.remove(self.out.param)
                self.local_reduce(r)
            elif self.local_pattern == "hist":
                self.final_stores(r)
                self.local_hist(r)
            else:
                self.final_stores(r)
        self.bound_close()
        if self.helper and not self.helper_used:
            # a helper that ended up unused (e.g. chunked kernels) is dropped
            self.helper = None
            self.helper_lines = []
            self.feat["helper"] = False
        return self.assemble()

    def name_tag(self) -> str:
        lp = self.local_pattern
        loops = self.feat["loops"]
        acc = self.feat["access"]
        if lp == "reduce":
            tag = "reduce"
        elif lp == "hist" or self.feat["atomic"] == "hist":
            tag = "histogram"
        elif lp == "tiled":
            tag = "tiled"
        elif lp == "neighbors":
            tag = "tile"
        elif self.shape == "chunked":
            tag = "chunked"
        elif any(a == "neighbors" for a in acc) or any(str(k).startswith("stencil") for k in loops):
            tag = "stencil"
        elif any(a == "gather" for a in acc):
            tag = "gather"
        elif "escape" in loops:
            tag = "iterate"
        elif loops:
            tag = "loop"
        else:
            tag = "map"
        if self.dims > 1:
            tag += f"{self.dims}d"
        return tag

    def assemble(self) -> tuple[str, str, int, dict[str, Any]]:
        name = f"synth_{self.name_tag()}_{self.index:06d}"
        ind = self.indent
        out: list[str] = []
        if self.T == "double":
            out += ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable", ""]
        if self.helper_lines:
            out += [ln.replace("    ", ind) if ln.startswith("    ") else ln for ln in self.helper_lines]
            out.append("")
        order = {"global_in": 0, "global_out": 1, "local": 2, "scalar": 3}

        def group(p: Param) -> int:
            if p.kind == "global":
                return order["global_out"] if p.written else order["global_in"]
            return order[p.kind]

        params = sorted(self.params, key=group)   # stable
        decls = []
        for p in params:
            if p.kind == "global":
                c = "const " if p.const else ""
                rs = "restrict " if self.restrict else ""
                decls.append(f"{self.qg} {c}{p.ctype}* {rs}{p.name}")
            elif p.kind == "local":
                decls.append(f"{self.ql} {p.ctype}* {p.name}")
            else:
                decls.append(f"{'const ' if self.use_const else ''}{p.ctype} {p.name}")
        kq = "__kernel" if self.underscores else "kernel"
        head = f"{kq} void {name}("
        one = head + ", ".join(decls) + ")"
        if len(one) <= 100 and self.chance(0.6):
            sig = [one]
        else:
            pad = " " * len(head)
            sig = [head + decls[0] + ("," if len(decls) > 1 else ")")]
            for k, d in enumerate(decls[1:], start=1):
                sig.append(pad + d + ("," if k < len(decls) - 1 else ")"))
        if self.brace_newline:
            out += sig + ["{"]
        else:
            sig[-1] += " {"
            out += sig
        pro = self.prologue()
        out += [ind + ln for ln in pro]
        if pro and self.chance(0.5):
            out.append("")
        for lvl, text in self.lines:
            out.append(ind * (lvl + 1) + text)
        out.append("}")
        src = "\n".join(out).replace(KNAME, name) + "\n"
        feat = dict(self.feat)
        feat.update({
            "dims": self.dims, "base_type": self.T, "vector_width": self.W, "shape": self.shape,
            "local_pattern": self.local_pattern, "double": self.T == "double",
            "loop_depth": self.cur_depth, "n_inputs": len(self.inputs),
            "args": [p.describe() for p in params],
        })
        return src, name, self.dims, feat

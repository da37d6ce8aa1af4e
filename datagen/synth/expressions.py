"""Expression trees of the synthetic kernel generator: random float and int expressions over
given leaves (arithmetic, builtins, comparisons, selects, bit operations, helper calls) and
loads from input buffers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kernelcast.datagen.synth.core import (
    P_ADD,
    P_AND,
    P_ATOM,
    P_CMP,
    P_MUL,
    P_OR,
    P_SHIFT,
    P_TERN,
    P_UNARY,
    P_XOR,
    Buf,
    BuilderBase,
    Expr,
    Val,
)


class ExprBuilder(BuilderBase):
    """Adds expression trees and buffer loads to :class:`BuilderBase`."""

    # ---- expressions
    def wrap(self, e: Expr, prec: int, strict: bool = False) -> str:
        if e.prec < prec or (strict and e.prec == prec):
            return f"({e.text})"
        return e.text

    def binop(self, a: Expr, op: str, b: Expr, prec: int) -> Expr:
        strict_right = op in ("-", "/", "%", "<<", ">>")
        return Expr(f"{self.wrap(a, prec)} {op} {self.wrap(b, prec, strict_right)}", a.vec or b.vec, prec,
                     a.const and b.const)

    def call(self, fn: str, *args: Expr, vec: bool | None = None) -> Expr:
        v = any(a.vec for a in args) if vec is None else vec
        return Expr(f"{fn}({', '.join(a.text for a in args)})", v, P_ATOM, all(a.const for a in args))

    def operands(self, k: int, sub: Callable[[], Expr], leaves: Sequence[Expr]) -> list[Expr]:
        """``k`` sub-expressions, not all constant and not all the same text (when avoidable)."""
        args = [sub() for _ in range(k)]
        useful = [lf for lf in leaves if not lf.const]
        for j in range(1, k):
            for _ in range(3):
                if args[j].text != args[0].text or len({lf.text for lf in useful}) < 2:
                    break
                args[j] = sub()
            if args[j].text == args[0].text:
                args[j] = self.const_expr() if self.in_helper or self.chance(0.6) else self.coef_expr()
        if useful and all(a.const for a in args):
            args[-1] = self.pick(useful)
        return args

    def same(self, *args: Expr) -> list[Expr]:
        if any(a.vec for a in args):
            return [self.bc(a) for a in args]
        return list(args)

    def neg(self, e: Expr) -> Expr:
        if e.prec >= P_UNARY and not e.text.startswith("-"):
            return Expr(f"-{e.text}", e.vec, P_UNARY, e.const)
        return Expr(f"-({e.text})", e.vec, P_UNARY, e.const)

    def const_expr(self) -> Expr:
        return Expr(self.flit(), False, P_ATOM, True)

    def coef_expr(self) -> Expr:
        return Expr(self.coef(), False, P_ATOM, True)

    def leaf(self, leaves: Sequence[Expr]) -> Expr:
        r = self.rng.random()
        if leaves and r < 0.82:
            return self.pick(leaves)
        if not self.in_helper and r < 0.9:
            return self.coef_expr()
        return self.const_expr()

    def expr(self, depth: int, leaves: Sequence[Expr]) -> Expr:
        if depth <= 0 or self.chance(0.18):
            return self.leaf(leaves)
        if self.is_float:
            return self.fexpr(depth, leaves)
        return self.iexpr(depth, leaves)

    def helper_call(self, a: Expr, b: Expr) -> Expr:
        assert self.helper is not None
        self.helper_used = True
        args = [a] if self.helper_arity == 1 else [a, b]
        args = [self.bc(x) if self.W > 1 else x for x in args]
        return Expr(f"{self.helper}({', '.join(x.text for x in args)})", self.W > 1, P_ATOM)

    def fexpr(self, depth: int, leaves: Sequence[Expr]) -> Expr:
        ops = {"add": 3, "sub": 2, "mul": 3, "div": 0.8, "fma": 0.8, "un": 3.2, "minmax": 0.8,
               "clamp": 0.4, "mix": 0.4, "sel": 0.7, "scale": 1.0, "hypot": 0.25}
        if self.helper and not self.in_helper:
            ops["helper"] = 1.0
        if self.W > 1:
            ops["dot"] = 0.25
        op = self.wpick(ops)

        def sub() -> Expr:
            return self.expr(depth - 1, leaves)

        one = self.lit("1.0")

        def ops_(k: int) -> list[Expr]:
            return self.operands(k, sub, leaves)

        if op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[op]
            a, b = ops_(2)
            return self.binop(a, sym, b, P_MUL if sym == "*" else P_ADD)
        if op == "div":
            a, b = ops_(2)
            if self.chance(0.35) or b.const:
                if a.const:
                    a = self.pick([lf for lf in leaves if not lf.const] or [a])
                return self.binop(a, "/", self.const_expr(), P_MUL)
            den = Expr(f"({one} + fabs({b.text}))", b.vec, P_ATOM)
            return self.binop(a, "/", den, P_MUL)
        if op == "fma":
            a, b, c = self.same(*ops_(3))
            return self.call(self.pick(("fma", "mad", "fma")), a, b, c)
        if op == "un":
            x = sub()
            if x.const:
                x = self.pick([lf for lf in leaves if not lf.const] or [x])
            return self.unary(x)
        if op == "minmax":
            a, b = ops_(2)
            if b.vec and not a.vec:
                a, b = b, a
            return self.call(self.pick(("fmin", "fmax", "fmax", "min", "max")), a, b, vec=a.vec)
        if op == "clamp":
            lo, hi = self.pick((("-1.0", "1.0"), ("0.0", "1.0"), ("-10.0", "10.0"), ("0.0", "255.0"),
                                ("-100.0", "100.0")))
            a = sub()
            return self.call("clamp", a, Expr(self.lit(lo)), Expr(self.lit(hi)), vec=a.vec)
        if op == "mix":
            a, b = self.same(*ops_(2))
            t = Expr(self.lit(self.pick(("0.25", "0.5", "0.75", "0.1", "0.9"))))
            return self.call("mix", a, b, t, vec=a.vec)
        if op == "sel":
            return self.select(depth, leaves)
        if op == "scale":
            a = sub()
            if a.const:
                a = self.pick([lf for lf in leaves if not lf.const] or [a])
            k = self.coef_expr() if self.chance(0.3) and not self.in_helper else self.const_expr()
            return self.binop(k, "*", a, P_MUL) if self.chance(0.5) else self.binop(a, "*", k, P_MUL)
        if op == "hypot":
            a, b = self.same(*ops_(2))
            return self.call("hypot", a, b)
        if op == "dot":
            a, b = (self.bc(x) for x in ops_(2))
            return self.call("dot", a, b, vec=False)
        # helper
        return self.helper_call(sub(), sub())

    def unary(self, x: Expr) -> Expr:
        one = self.lit("1.0")
        atom = x.prec >= P_UNARY and not x.text.startswith("-")
        forms = ["sin", "cos", "tanh", "expneg", "log1p", "sqrt", "fabs", "sigmoid", "pow", "atan",
                 "cbrt", "floor", "erf", "fmod", "exp2neg", "asinh", "acos", "neg", "sinpi"]
        if atom:
            forms += ["gauss", "square", "rsqrt", "logsq"]
        if self.T == "float":
            forms += ["native_sin", "native_exp", "half_sqrt"]
        f = self.pick(forms)
        v = x.vec
        if f in ("sin", "cos", "tanh", "atan", "cbrt", "floor", "erf", "asinh", "sinpi", "native_sin"):
            return self.call(f, x)
        if f == "expneg":
            return self.call("exp", self.neg(self.call("fabs", x)))
        if f == "native_exp":
            return self.call("native_exp", self.neg(self.call("fabs", x)))
        if f == "exp2neg":
            return self.call("exp2", self.neg(self.call("fabs", x)))
        if f == "log1p":
            return self.call("log1p", self.call("fabs", x))
        if f == "sqrt":
            return self.call("sqrt", self.call("fabs", x))
        if f == "half_sqrt":
            return self.call("half_sqrt", self.call("fabs", x))
        if f == "fabs":
            return self.call("fabs", x)
        if f == "sigmoid":
            den = Expr(f"({one} + exp({self.neg(x).text}))", v, P_ATOM)
            return Expr(f"{one} / {den.text}", v, P_MUL)
        if f == "pow":
            e = Expr(self.lit(self.pick(("1.5", "2.0", "0.5", "3.0", "0.25"))))
            return self.call("pow", self.call("fabs", x), self.bc(e) if v else e)
        if f == "fmod":
            e = Expr(self.lit(self.pick(("2.0", "1.0", "3.0", "10.0"))))
            return self.call("fmod", x, self.bc(e) if v else e)
        if f == "acos":
            return self.call("acos", self.call("clamp", x, Expr(self.lit("-1.0")), Expr(one), vec=v))
        if f == "neg":
            return self.neg(x)
        if f == "gauss":
            return self.call("exp", Expr(f"-{x.text} * {x.text}", v, P_MUL))
        if f == "square":
            return Expr(f"{x.text} * {x.text}", v, P_MUL)
        if f == "rsqrt":
            return self.call("rsqrt", Expr(f"{x.text} * {x.text} + {one}", v, P_ADD))
        # logsq
        return self.call("log", Expr(f"{one} + {x.text} * {x.text}", v, P_ADD))

    def compare(self, a: Expr, b: Expr) -> Expr:
        op = self.pick((">", "<", ">=", "<="))
        if a.text == b.text:
            b = self.const_expr()
        return self.binop(a, op, b, P_CMP)

    def select(self, depth: int, leaves: Sequence[Expr]) -> Expr:
        a = self.expr(depth - 1, leaves)
        b = self.leaf(leaves) if self.chance(0.6) else self.expr(depth - 1, leaves)
        c = self.expr(depth - 1, leaves)
        d = self.expr(depth - 1, leaves)
        for _ in range(3):
            if d.text != c.text:
                break
            d = self.expr(depth - 1, leaves)
        if d.text == c.text:
            d = self.const_expr()
        if not (a.vec or b.vec):
            c, d = self.same(c, d)
            cond = self.compare(a, b)
            return Expr(f"({cond.text}) ? {self.wrap(c, P_TERN + 1)} : {self.wrap(d, P_TERN)}",
                         c.vec, P_TERN)
        c, d = self.bc(c), self.bc(d)
        cond = self.compare(a, b)
        return self.call("select", d, c, cond, vec=True)

    def iexpr(self, depth: int, leaves: Sequence[Expr]) -> Expr:
        ops = {"add": 3, "sub": 2, "mul": 2, "divc": 0.6, "modc": 0.5, "and": 0.6, "or": 0.4,
               "xor": 0.6, "shl": 0.4, "shr": 0.6, "minmax": 0.8, "clamp": 0.4, "sel": 0.7,
               "mad24": 0.3, "abs": 0.3, "popcount": 0.15, "hadd": 0.2}
        if self.helper and not self.in_helper:
            ops["helper"] = 1.0
        op = self.wpick(ops)

        def sub() -> Expr:
            return self.expr(depth - 1, leaves)

        def bit(e: Expr) -> str:
            return e.text if e.prec == P_ATOM else f"({e.text})"

        def ops_(k: int) -> list[Expr]:
            return self.operands(k, sub, leaves)

        if op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[op]
            a, b = ops_(2)
            return self.binop(a, sym, b, P_MUL if sym == "*" else P_ADD)
        if op == "divc":
            return self.binop(sub(), "/", Expr(self.pick(("2", "3", "4", "7", "8", "16"))), P_MUL)
        if op == "modc":
            return self.binop(sub(), "%", Expr(self.pick(("3", "5", "7", "16", "100", "256"))), P_MUL)
        if op in ("and", "or", "xor"):
            sym, prec = {"and": ("&", P_AND), "or": ("|", P_OR), "xor": ("^", P_XOR)}[op]
            a, b = ops_(2)
            b = b if self.chance(0.5) else Expr(self.pick(("0xff", "0x7f", "15", "0xffff", "1023")))
            return Expr(f"{bit(a)} {sym} {bit(b)}", a.vec or b.vec, prec)
        if op in ("shl", "shr"):
            a = sub()
            sym = "<<" if op == "shl" else ">>"
            return Expr(f"{bit(a)} {sym} {self.pick(('1', '2', '3', '4', '5'))}", a.vec, P_SHIFT)
        if op == "minmax":
            a, b = ops_(2)
            if b.vec and not a.vec:
                a, b = b, a
            return self.call(self.pick(("min", "max")), a, b, vec=a.vec)
        if op == "clamp":
            lo, hi = self.pick((("-100", "100"), ("0", "255"), ("0", "1023"), ("-1000", "1000")))
            a = sub()
            return self.call("clamp", a, Expr(lo), Expr(hi), vec=a.vec)
        if op == "sel":
            return self.select(depth, leaves)
        if op == "mad24":
            a, b, c = self.same(*ops_(3))
            if self.chance(0.5):
                return self.call("mad24", a, b, c)
            return self.call("mul24", a, b)
        if op == "abs":
            a = sub()
            if a.vec:
                return self.call(f"convert_{self.VT}", self.call("abs", a), vec=True)
            return Expr(f"(int)abs({a.text})", False, P_UNARY)
        if op == "popcount":
            return self.call("popcount", sub())
        if op == "hadd":
            a, b = self.same(*ops_(2))
            return self.call("hadd", a, b)
        return self.helper_call(sub(), sub())

    def combine(self, e: Expr, v: Expr) -> Expr:
        """Fold value ``v`` into expression ``e``."""
        if self.is_float:
            k = self.wpick({"add": 3, "mul": 2, "sub": 1, "fma": 1, "max": 0.5})
            if k == "fma":
                a, b, c = self.same(v, self.const_expr(), e)
                return self.call("fma", a, b, c)
            if k == "max":
                a, b = (e, v) if e.vec or not v.vec else (v, e)
                return self.call("fmax", a, b, vec=a.vec)
        else:
            k = self.wpick({"add": 3, "mul": 1, "sub": 1, "xor": 1, "max": 0.5})
            if k == "xor":
                return Expr(f"({e.text}) ^ {v.text}", e.vec or v.vec, P_XOR)
            if k == "max":
                a, b = (e, v) if e.vec or not v.vec else (v, e)
                return self.call("max", a, b, vec=a.vec)
        sym = {"add": "+", "mul": "*", "sub": "-"}[k]
        return self.binop(e, sym, v, P_MUL if sym == "*" else P_ADD)

    def fold_all(self, e: Expr, vals: Sequence[Val]) -> Expr:
        for v in vals:
            if not re.search(rf"\b{re.escape(v.name)}\b", e.text):
                e = self.combine(e, self.vexpr(v))
        return e

    def rand_depth(self) -> int:
        return self.rng.randint(1, max(1, self.o.max_expr_depth))

    # ---- loads
    def ld(self, buf: Buf, idx: str) -> Expr:
        name = buf.param.name
        if buf.mode == "vload":
            text, vec = f"vload{self.W}({idx}, {name})", True
        else:
            text, vec = f"{name}[{idx}]", buf.mode == "vecptr"
        if buf.conv:
            if vec:
                return Expr(f"convert_{self.VT}({text})", True, P_ATOM)
            return Expr(f"({self.T}){text}", False, P_UNARY)
        return Expr(text, vec, P_ATOM)

    def load_val(self, buf: Buf, idx: str, cands: Sequence[str]) -> Val:
        e = self.ld(buf, idx)
        return self.declare(cands, e)

    def val_names(self, buf: Buf, extra: Sequence[str] = ()) -> list[str]:
        b = buf.param.name
        first = b[0].lower()
        return [*extra, first, f"{first}v", f"{b}_val", f"{first}0", "val", "v", "e"]

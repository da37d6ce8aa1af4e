"""Synthetic OpenCL C 1.2 kernel generator.

Builds random but realistic kernels so a dataset can reach LLMPerf's scale without crawling
GitHub. Every kernel is a random composition of

* access patterns: contiguous ``a[gid]``, offset ``a[(gid + off) % n]``, strided
  ``a[((uint)gid * stride) % n]``, gathers through an index buffer, 2D/3D row/column access
  (``a[y * width + x]``, transposed ``a[x * height + y]``), clamped neighbour/stencil reads,
  ``float2``/``float4`` loads and stores (vector pointers or ``vloadN``/``vstoreN``), and
  partitioning loops (each work-item handles ``k`` elements, consecutive or strided by
  ``get_global_size(0)``);
* arithmetic: int/float/double add/mul/fma/div, transcendental builtins, comparisons,
  min/max/clamp/select, bit operations, random expression trees of bounded depth;
* loop nests of depth 0-2 with trip counts from a scalar argument or small constants,
  stencil loops, row/column sweeps, escape-time iterations, accumulation into privates;
* local memory: tiles with ``barrier(CLK_LOCAL_MEM_FENCE)`` (neighbours within the tile,
  tile sweeps, n-body style tiled loops), work-group reductions, local histograms;
* branches: bound checks, divergent branches on the index, data-dependent branches,
  ``switch``, early returns, ``break``/``continue`` in loops;
* occasional global atomics on ``int`` buffers.

Safety conventions (so that *simple argument selection* -- every buffer ``gsize`` elements of
its declared type (``gsize * vector width`` for buffers read with ``vloadN``), every int scalar
``= gsize``, float scalars ``= 1.0``, local buffers ``= lsize`` elements -- stays in bounds):
computed indices are reduced with ``% n``, ``min``/``max``/``clamp``; 2D/3D extents come from
``get_global_size``; gathers clamp or reduce the index; a kernel has at most one loop whose trip
count scales with an argument (or the problem size), so work is ``O(gsize * k)``; kernels with
barriers never return early and keep barriers in uniform control flow; fixed-size ``__local``
arrays hold 1024 elements (any legal work-group of a 1024-item device). Integer division only
by nonzero constants; float maths guards its domains (``log1p(fabs(x))``, ``x / (1 + fabs(y))``,
``exp(-fabs(x))``) so that outputs are rarely NaN.

Determinism and uniqueness: :func:`generate_kernels` draws everything from one
``random.Random(seed)``; the same ``(count, seed)`` gives byte-identical sources (and a longer
run extends a shorter one). Kernels are deduplicated inside :func:`generate_kernels` on
:func:`normalize_source` with the kernel name replaced by a fixed one (comments stripped,
whitespace collapsed); a kernel colliding with an earlier one is regenerated from the same
stream, so the returned kernels are distinct even ignoring their names.

Helper functions are named ``<kernel name>_<verb>`` so many kernels can be concatenated into
one program (see :func:`compile_check`).
"""

from __future__ import annotations

import logging
import random
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

__all__ = [
    "SynthOptions",
    "generate_kernel",
    "generate_kernel_with_features",
    "generate_kernels",
    "generate_kernels_with_features",
    "normalize_source",
    "dedup_key",
    "write_synth_corpus",
    "compile_check",
    "default_device",
]


@dataclass
class SynthOptions:
    """Knobs of the generator (probabilities are per kernel unless stated)."""

    max_loop_depth: int = 2          # loop nest depth 0..max_loop_depth
    p_local: float = 0.2             # uses __local memory (+ barriers)
    p_branch: float = 0.4            # has divergent / data-dependent branches
    p_vector: float = 0.2            # works on float2/float4 (int2/int4, double2/double4)
    p_double: float = 0.05           # element type double
    p_atomic: float = 0.05           # global atomics on an int buffer
    p_2d: float = 0.2                # multi-dimensional NDRange (2D, or 3D with share_3d)
    share_3d: float = 0.15           # share of the multi-dimensional kernels that are 3D
    p_int: float = 0.2               # element type int
    p_helper: float = 0.15           # defines and calls a helper function
    p_gather: float = 0.15           # weight of indirect (index-buffer) access
    p_chunked: float = 0.12          # 1D kernels: each work-item loops over several elements
    p_scalar_loop: float = 0.5       # a loop's trip count is a scalar argument (at most one)
    p_comment: float = 0.3           # sprinkle explanatory comments
    max_expr_depth: int = 3          # depth of random expression trees
    max_inputs: int = 3              # input buffers (besides index/weight/mask buffers)
    max_attempts: int = 100          # regenerations per index on a duplicate


# --------------------------------------------------------------------------------------------
# names

_RESERVED = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while kernel global local constant private image2d_t image3d_t
    sampler_t event_t half bool uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
    read_only write_only read_write float2 float4 int2 int4 double2 double4 float8 int8 uint2
    uint4 long2 long4 min max clamp mix step dot length distance select sign fabs fmin fmax fma
    mad sin cos tan exp log sqrt pow pown any all abs hadd rotate popcount mad24 mul24 barrier
    vload2 vload4 vstore2 vstore4 atomic_add atomic_inc atomic_max atomic_min native_sin
    native_cos native_exp half_sqrt hypot sinpi erf fmod floor cbrt atan acos asinh tanh rsqrt
    log1p exp2 convert_int_sat true false NULL in_range
    """.split()
)

_THEMES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("in", "in2", "in3"), ("out", "out2")),
    (("src", "src2", "src3"), ("dst", "dst2")),
    (("a", "b", "c"), ("result", "aux")),
    (("x", "y", "z"), ("out", "res")),
    (("input", "weights", "bias"), ("output", "extra")),
    (("data", "coef", "ref"), ("res", "tmp")),
    (("u", "v", "w"), ("u_out", "v_out")),
    (("pos", "vel", "mass"), ("force", "energy")),
    (("img", "prev", "guide"), ("img_out", "edges")),
    (("samples", "window", "noise"), ("filtered", "power")),
    (("p", "q", "r"), ("out", "norm")),
    (("field", "source", "sink"), ("field_out", "flux")),
    (("lhs", "rhs", "scale_in"), ("prod", "diff")),
)

_FLOAT_CONSTS = ("0.5", "2.0", "0.25", "1.5", "0.1", "3.0", "0.01", "0.75", "1.0", "0.125", "4.0",
                 "0.001", "10.0", "0.9", "0.3333333", "1.4142135", "0.0625", "0.2", "5.0")
_INT_CONSTS = ("1", "2", "3", "4", "5", "7", "8", "13", "16", "31", "64", "255", "1024")

# precedence levels (higher binds tighter)
P_TERN, P_OR, P_XOR, P_AND, P_CMP, P_SHIFT, P_ADD, P_MUL, P_UNARY, P_ATOM = range(1, 11)

_KNAME = "@KNAME@"


@dataclass(frozen=True)
class _Expr:
    text: str
    vec: bool = False
    prec: int = P_ATOM
    const: bool = False             # built only from literals and coefficient arguments


@dataclass
class _Val:
    name: str
    vec: bool
    line: int                       # index of the declaring body line


@dataclass
class _Param:
    name: str
    kind: str                       # "global" | "local" | "scalar"
    ctype: str                      # pointee type for pointers, type for scalars
    role: str
    const: bool = False
    written: bool = False
    elems: str = "gsize"            # size hint in elements of ctype ("gsize", "gsize*4", "lsize")

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "kind": self.kind, "type": self.ctype, "role": self.role}
        if self.kind != "scalar":
            d["elems"] = self.elems
            d["access"] = "rw" if (self.written and not self.const and self.role == "inout") else (
                "w" if self.written else "r")
        return d


@dataclass
class _Buf:
    """An input buffer and how it is read."""

    param: _Param
    mode: str                       # "scalar" | "vecptr" | "vload"
    conv: bool = False              # element type differs from the kernel's (converted on load)
    pattern: str = "contig"


@dataclass
class _Loop:
    var: str
    kind: str
    trip: str                       # trip count text (constant or name)
    const_trip: int | None = None
    index_fn: Callable[[str], str] | None = None   # load index for a buffer name -> index text


# --------------------------------------------------------------------------------------------
# the builder


class _Builder:
    def __init__(self, rng: random.Random, index: int, opts: SynthOptions) -> None:
        self.rng = rng
        self.o = opts
        self.index = index
        self.used: set[str] = set(_RESERVED)
        self.params: list[_Param] = []
        self.lines: list[tuple[int, str]] = []
        self.level = 0
        self.scopes: list[list[_Val]] = [[]]
        self.budget = 1
        self.helper: str | None = None
        self.helper_used = False
        self.helper_lines: list[str] = []
        self.in_helper = False
        self.coefs: list[str] = []
        self.fixed_locals: list[str] = []
        self.feat: dict[str, Any] = {
            "access": [], "loops": [], "loop_depth": 0, "scalar_trip_loop": False,
            "local": "none", "local_pattern": None, "barriers": 0, "branches": [],
            "atomic": None, "helper": False, "outputs": [],
        }
        self.index_param: _Param | None = None
        self.index_style = "clamp"
        self.cur_depth = 0
        self.stencil_dy = ""
        self.helper_arity = 2

    # ---- random helpers
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, seq: Sequence[Any]) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def wpick(self, weights: dict[str, float]) -> str:
        keys = [k for k, w in weights.items() if w > 0]
        total = sum(weights[k] for k in keys)
        r = self.rng.random() * total
        for k in keys:
            r -= weights[k]
            if r < 0:
                return k
        return keys[-1]

    def fresh(self, *cands: str) -> str:
        for c in cands:
            if c not in self.used:
                self.used.add(c)
                return c
        base = cands[0]
        k = 2
        while f"{base}{k}" in self.used:
            k += 1
        name = f"{base}{k}"
        self.used.add(name)
        return name

    # ---- code emission
    def emit(self, text: str) -> int:
        self.lines.append((self.level, text))
        return len(self.lines) - 1

    def open(self, text: str) -> None:
        self.emit(text + " {")
        self.level += 1

    def close(self, text: str = "") -> None:
        self.level -= 1
        self.emit("}" + text)

    def comment(self, text: str) -> None:
        if self.chance(self.o.p_comment):
            self.emit(f"// {text}")

    def barrier(self) -> None:
        self.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        self.feat["barriers"] += 1

    # ---- types and literals
    @property
    def VT(self) -> str:
        return self.T if self.W == 1 else f"{self.T}{self.W}"

    @property
    def is_float(self) -> bool:
        return self.T != "int"

    def lit(self, s: str) -> str:
        if self.T == "float":
            return s + "f"
        if self.T == "double":
            return s
        return s

    def flit(self) -> str:
        return self.lit(self.pick(_FLOAT_CONSTS)) if self.is_float else self.pick(_INT_CONSTS)

    def zero(self, vec: bool | None = None) -> str:
        z = {"float": "0.0f", "double": "0.0", "int": "0"}[self.T]
        if vec if vec is not None else self.W > 1:
            return f"({self.VT})({z})"
        return z

    def lowest(self) -> str:
        s = {"float": "-FLT_MAX", "double": "-DBL_MAX", "int": "INT_MIN"}[self.T]
        return f"({self.VT})({s})" if self.W > 1 else s

    def decl(self, const: bool = True) -> str:
        return "const " if const and self.use_const else ""

    def bc(self, e: _Expr) -> _Expr:
        """Broadcast a scalar expression to the working vector type."""
        if self.W == 1 or e.vec:
            return e
        return _Expr(f"({self.VT})({e.text})", True, P_UNARY)

    # ---- values
    def values(self) -> list[_Val]:
        return [v for s in self.scopes for v in s]

    def add_val(self, name: str, vec: bool, line: int) -> _Val:
        v = _Val(name, vec, line)
        self.scopes[-1].append(v)
        return v

    def declare(self, name_cands: Sequence[str], e: _Expr, const: bool = True,
                vec: bool | None = None) -> _Val:
        name = self.fresh(*name_cands)
        is_vec = e.vec if vec is None else vec
        ty = self.VT if is_vec else self.T
        if is_vec and not e.vec:
            e = self.bc(e)
        line = self.emit(f"{self.decl(const)}{ty} {name} = {e.text};")
        return self.add_val(name, is_vec, line)

    def is_used(self, v: _Val) -> bool:
        pat = re.compile(rf"\b{re.escape(v.name)}\b")
        return any(pat.search(t) for _, t in self.lines[v.line + 1:])

    @staticmethod
    def vexpr(v: _Val) -> _Expr:
        return _Expr(v.name, v.vec, P_ATOM)

    # ---- parameters
    def add_param(self, p: _Param) -> _Param:
        self.params.append(p)
        return p

    def scalar_param(self, role: str, cands: Sequence[str], ctype: str = "int") -> str:
        for p in self.params:
            if p.role == role and p.kind == "scalar":
                return p.name
        name = self.fresh(*cands)
        self.add_param(_Param(name, "scalar", ctype, role))
        return name

    def coef(self) -> str:
        """A float (or int) coefficient argument."""
        if self.coefs and (len(self.coefs) >= 2 or self.chance(0.5)):
            return self.pick(self.coefs)
        if self.is_float:
            name = self.fresh(*self.rng.sample(
                ["alpha", "beta", "scale", "gamma", "factor", "mu", "sigma", "dt", "eps", "weight"], 10))
            self.add_param(_Param(name, "scalar", self.T, "coef"))
        else:
            name = self.fresh(*self.rng.sample(["bias", "seed", "key", "salt", "delta_v"], 5))
            self.add_param(_Param(name, "scalar", "int", "coef"))
        self.coefs.append(name)
        return name

    def n(self) -> str:
        return self.n_name

    # ---- expressions
    def wrap(self, e: _Expr, prec: int, strict: bool = False) -> str:
        if e.prec < prec or (strict and e.prec == prec):
            return f"({e.text})"
        return e.text

    def binop(self, a: _Expr, op: str, b: _Expr, prec: int) -> _Expr:
        strict_right = op in ("-", "/", "%", "<<", ">>")
        return _Expr(f"{self.wrap(a, prec)} {op} {self.wrap(b, prec, strict_right)}", a.vec or b.vec, prec,
                     a.const and b.const)

    def call(self, fn: str, *args: _Expr, vec: bool | None = None) -> _Expr:
        v = any(a.vec for a in args) if vec is None else vec
        return _Expr(f"{fn}({', '.join(a.text for a in args)})", v, P_ATOM, all(a.const for a in args))

    def operands(self, k: int, sub: Callable[[], _Expr], leaves: Sequence[_Expr]) -> list[_Expr]:
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

    def same(self, *args: _Expr) -> list[_Expr]:
        if any(a.vec for a in args):
            return [self.bc(a) for a in args]
        return list(args)

    def neg(self, e: _Expr) -> _Expr:
        if e.prec >= P_UNARY and not e.text.startswith("-"):
            return _Expr(f"-{e.text}", e.vec, P_UNARY, e.const)
        return _Expr(f"-({e.text})", e.vec, P_UNARY, e.const)

    def const_expr(self) -> _Expr:
        return _Expr(self.flit(), False, P_ATOM, True)

    def coef_expr(self) -> _Expr:
        return _Expr(self.coef(), False, P_ATOM, True)

    def leaf(self, leaves: Sequence[_Expr]) -> _Expr:
        r = self.rng.random()
        if leaves and r < 0.82:
            return self.pick(leaves)
        if not self.in_helper and r < 0.9:
            return self.coef_expr()
        return self.const_expr()

    def expr(self, depth: int, leaves: Sequence[_Expr]) -> _Expr:
        if depth <= 0 or self.chance(0.18):
            return self.leaf(leaves)
        if self.is_float:
            return self.fexpr(depth, leaves)
        return self.iexpr(depth, leaves)

    def helper_call(self, a: _Expr, b: _Expr) -> _Expr:
        assert self.helper is not None
        self.helper_used = True
        args = [a] if self.helper_arity == 1 else [a, b]
        args = [self.bc(x) if self.W > 1 else x for x in args]
        return _Expr(f"{self.helper}({', '.join(x.text for x in args)})", self.W > 1, P_ATOM)

    def fexpr(self, depth: int, leaves: Sequence[_Expr]) -> _Expr:
        ops = {"add": 3, "sub": 2, "mul": 3, "div": 0.8, "fma": 0.8, "un": 3.2, "minmax": 0.8,
               "clamp": 0.4, "mix": 0.4, "sel": 0.7, "scale": 1.0, "hypot": 0.25}
        if self.helper and not self.in_helper:
            ops["helper"] = 1.0
        if self.W > 1:
            ops["dot"] = 0.25
        op = self.wpick(ops)

        def sub() -> _Expr:
            return self.expr(depth - 1, leaves)

        one = self.lit("1.0")

        def ops_(k: int) -> list[_Expr]:
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
            den = _Expr(f"({one} + fabs({b.text}))", b.vec, P_ATOM)
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
            return self.call("clamp", a, _Expr(self.lit(lo)), _Expr(self.lit(hi)), vec=a.vec)
        if op == "mix":
            a, b = self.same(*ops_(2))
            t = _Expr(self.lit(self.pick(("0.25", "0.5", "0.75", "0.1", "0.9"))))
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

    def unary(self, x: _Expr) -> _Expr:
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
            den = _Expr(f"({one} + exp({self.neg(x).text}))", v, P_ATOM)
            return _Expr(f"{one} / {den.text}", v, P_MUL)
        if f == "pow":
            e = _Expr(self.lit(self.pick(("1.5", "2.0", "0.5", "3.0", "0.25"))))
            return self.call("pow", self.call("fabs", x), self.bc(e) if v else e)
        if f == "fmod":
            e = _Expr(self.lit(self.pick(("2.0", "1.0", "3.0", "10.0"))))
            return self.call("fmod", x, self.bc(e) if v else e)
        if f == "acos":
            return self.call("acos", self.call("clamp", x, _Expr(self.lit("-1.0")), _Expr(one), vec=v))
        if f == "neg":
            return self.neg(x)
        if f == "gauss":
            return self.call("exp", _Expr(f"-{x.text} * {x.text}", v, P_MUL))
        if f == "square":
            return _Expr(f"{x.text} * {x.text}", v, P_MUL)
        if f == "rsqrt":
            return self.call("rsqrt", _Expr(f"{x.text} * {x.text} + {one}", v, P_ADD))
        # logsq
        return self.call("log", _Expr(f"{one} + {x.text} * {x.text}", v, P_ADD))

    def compare(self, a: _Expr, b: _Expr) -> _Expr:
        op = self.pick((">", "<", ">=", "<="))
        if a.text == b.text:
            b = self.const_expr()
        return self.binop(a, op, b, P_CMP)

    def select(self, depth: int, leaves: Sequence[_Expr]) -> _Expr:
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
            return _Expr(f"({cond.text}) ? {self.wrap(c, P_TERN + 1)} : {self.wrap(d, P_TERN)}",
                         c.vec, P_TERN)
        c, d = self.bc(c), self.bc(d)
        cond = self.compare(a, b)
        return self.call("select", d, c, cond, vec=True)

    def iexpr(self, depth: int, leaves: Sequence[_Expr]) -> _Expr:
        ops = {"add": 3, "sub": 2, "mul": 2, "divc": 0.6, "modc": 0.5, "and": 0.6, "or": 0.4,
               "xor": 0.6, "shl": 0.4, "shr": 0.6, "minmax": 0.8, "clamp": 0.4, "sel": 0.7,
               "mad24": 0.3, "abs": 0.3, "popcount": 0.15, "hadd": 0.2}
        if self.helper and not self.in_helper:
            ops["helper"] = 1.0
        op = self.wpick(ops)

        def sub() -> _Expr:
            return self.expr(depth - 1, leaves)

        def bit(e: _Expr) -> str:
            return e.text if e.prec == P_ATOM else f"({e.text})"

        def ops_(k: int) -> list[_Expr]:
            return self.operands(k, sub, leaves)

        if op in ("add", "sub", "mul"):
            sym = {"add": "+", "sub": "-", "mul": "*"}[op]
            a, b = ops_(2)
            return self.binop(a, sym, b, P_MUL if sym == "*" else P_ADD)
        if op == "divc":
            return self.binop(sub(), "/", _Expr(self.pick(("2", "3", "4", "7", "8", "16"))), P_MUL)
        if op == "modc":
            return self.binop(sub(), "%", _Expr(self.pick(("3", "5", "7", "16", "100", "256"))), P_MUL)
        if op in ("and", "or", "xor"):
            sym, prec = {"and": ("&", P_AND), "or": ("|", P_OR), "xor": ("^", P_XOR)}[op]
            a, b = ops_(2)
            b = b if self.chance(0.5) else _Expr(self.pick(("0xff", "0x7f", "15", "0xffff", "1023")))
            return _Expr(f"{bit(a)} {sym} {bit(b)}", a.vec or b.vec, prec)
        if op in ("shl", "shr"):
            a = sub()
            sym = "<<" if op == "shl" else ">>"
            return _Expr(f"{bit(a)} {sym} {self.pick(('1', '2', '3', '4', '5'))}", a.vec, P_SHIFT)
        if op == "minmax":
            a, b = ops_(2)
            if b.vec and not a.vec:
                a, b = b, a
            return self.call(self.pick(("min", "max")), a, b, vec=a.vec)
        if op == "clamp":
            lo, hi = self.pick((("-100", "100"), ("0", "255"), ("0", "1023"), ("-1000", "1000")))
            a = sub()
            return self.call("clamp", a, _Expr(lo), _Expr(hi), vec=a.vec)
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
            return _Expr(f"(int)abs({a.text})", False, P_UNARY)
        if op == "popcount":
            return self.call("popcount", sub())
        if op == "hadd":
            a, b = self.same(*ops_(2))
            return self.call("hadd", a, b)
        return self.helper_call(sub(), sub())

    def combine(self, e: _Expr, v: _Expr) -> _Expr:
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
                return _Expr(f"({e.text}) ^ {v.text}", e.vec or v.vec, P_XOR)
            if k == "max":
                a, b = (e, v) if e.vec or not v.vec else (v, e)
                return self.call("max", a, b, vec=a.vec)
        sym = {"add": "+", "mul": "*", "sub": "-"}[k]
        return self.binop(e, sym, v, P_MUL if sym == "*" else P_ADD)

    def fold_all(self, e: _Expr, vals: Sequence[_Val]) -> _Expr:
        for v in vals:
            if not re.search(rf"\b{re.escape(v.name)}\b", e.text):
                e = self.combine(e, self.vexpr(v))
        return e

    def rand_depth(self) -> int:
        return self.rng.randint(1, max(1, self.o.max_expr_depth))

    # ---- loads
    def ld(self, buf: _Buf, idx: str) -> _Expr:
        name = buf.param.name
        if buf.mode == "vload":
            text, vec = f"vload{self.W}({idx}, {name})", True
        else:
            text, vec = f"{name}[{idx}]", buf.mode == "vecptr"
        if buf.conv:
            if vec:
                return _Expr(f"convert_{self.VT}({text})", True, P_ATOM)
            return _Expr(f"({self.T}){text}", False, P_UNARY)
        return _Expr(text, vec, P_ATOM)

    def load_val(self, buf: _Buf, idx: str, cands: Sequence[str]) -> _Val:
        e = self.ld(buf, idx)
        return self.declare(cands, e)

    def val_names(self, buf: _Buf, extra: Sequence[str] = ()) -> list[str]:
        b = buf.param.name
        first = b[0].lower()
        return [*extra, first, f"{first}v", f"{b}_val", f"{first}0", "val", "v", "e"]

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
        self.local_pattern: str | None = None
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
            self.ext: list[str] = []
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
            self.add_param(_Param(self.n_name, "scalar", "int", "n"))

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
        theme_in, theme_out = self.pick(_THEMES)
        n_in = self.rng.choices([1, 2, 3], weights=[0.35, 0.4, 0.25])[0]
        n_in = max(1, min(n_in, o.max_inputs))
        self.inputs: list[_Buf] = []
        inplace = (not self.local and self.chance(0.1))
        for k in range(n_in):
            if k == 0 and inplace:
                name = self.fresh(self.pick(("data", "buf", "vals", "field_data", "arr")))
                p = _Param(name, "global", self.T, "inout", const=False, written=True)
            else:
                name = self.fresh(theme_in[k], theme_in[k] + "_in", f"in{k}")
                p = _Param(name, "global", self.T, "input", const=True)
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
            self.inputs.append(_Buf(p, mode, conv))
        self.inplace = inplace
        # primary output
        if inplace:
            self.out = self.inputs[0]
        else:
            oname = self.fresh(theme_out[0], "out", "dst")
            omode = "scalar"
            if self.W > 1:
                omode = self.wpick({"vecptr": 0.45, "vload": 0.45, "scalar": 0.1})
            op = _Param(oname, "global", self.T, "output", written=True)
            if omode == "vecptr":
                op.ctype = f"{self.T}{self.W}"
            elif omode == "vload":
                op.elems = f"gsize*{self.W}"
            self.add_param(op)
            self.out = _Buf(op, omode)
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

    def index_buf(self) -> _Param:
        if self.index_param is None:
            self.index_style = "clamp" if self.chance(0.5) else "mod"
            name = self.fresh(*self.pick((("idx", "indices"), ("indices", "idx"), ("perm", "idx"),
                                          ("map", "indices"), ("lookup", "idx"))))
            ctype = "int" if self.index_style == "clamp" else "uint"
            self.index_param = self.add_param(_Param(name, "global", ctype, "index", const=True))
        return self.index_param

    def gather_index(self, at: str) -> str:
        ip = self.index_buf()
        n = self.n_name
        if self.index_style == "clamp":
            j = self.fresh("j", "src_idx", "jj", "nb")
            self.emit(f"{self.decl()}int {j} = clamp({ip.name}[{at}], 0, {n} - 1);")
            return j
        return f"{ip.name}[{at}] % {n}"

    def point_load(self, buf: _Buf, pat: str, at: str | None = None, int_index: bool = True) -> None:
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

    def neighbor_loads(self, buf: _Buf, lb: str) -> None:
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
                                 _Expr(f"({lb} >= {r}) ? {le.text} : {zl}", le.vec, P_TERN))
                    self.declare([names[1] + sfx, f"r{r}"],
                                 _Expr(f"({lb} + {r} < {n}) ? {re_.text} : {zl}", re_.vec, P_TERN))
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
            self.store(_Expr(self.zero(zvec), zvec) if self.chance(0.5) else e, self.lin_store_index())
        self.emit("return;")
        self.close()

    def lin_store_index(self) -> str:
        return self.lin

    # ---- local memory
    def local_buf(self, role: str = "tile") -> str:
        name = self.fresh(*self.pick((("tile", "cache"), ("cache", "tile"), ("scratch", "tmp_l"),
                                      ("shared", "sdata"), ("lmem", "tile"), ("sdata", "scratch"))))
        if self.chance(0.55):
            self.add_param(_Param(name, "local", self.VT, role, elems="lsize"))
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
                a = self.declare(["tl", "lleft", "nb_l"], _Expr(le, self.W > 1, P_TERN))
                b = self.declare(["tr", "lright", "nb_r"], _Expr(ri, self.W > 1, P_TERN))
                c = self.declare(["tc", "own", "mine"], _Expr(f"{tile}[{lid}]", self.W > 1))
                new = [a, b, c]
            elif variant == "mirror":
                new = [self.declare(["mirror", "other", "partner"],
                                    _Expr(f"{tile}[{lsz} - 1 - {lid}]", self.W > 1))]
            else:
                acc = self.fresh("lsum", "tile_acc", "group_acc")
                t = self.fresh("t", "m", "q")
                self.emit(f"{self.VT} {acc} = {self.zero()};")
                self.open(f"for (int {t} = 0; {t} < {lsz}; {t}++)")
                self.feat["loops"].append("local_sweep")
                tv = _Expr(f"{tile}[{t}]", self.W > 1)
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
                    e = self.binop(e, "*", _Expr(self.lit("0.3333333")), P_MUL) if self.is_float else \
                        self.binop(e, "/", _Expr("3"), P_MUL)
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
        tv = _Expr(f"{tile}[{t}]", self.W > 1)
        own = [self.vexpr(v) for v in self.values()]
        g = self.expr(self.rand_depth(), [tv, tv, *own])
        if tv.text not in g.text:
            g = self.combine(g, tv)
        self.accumulate(acc, mode, g)
        self.close()
        self.barrier()
        self.close()
        self.add_val(acc, self.W > 1, len(self.lines) - 1)

    def local_reduce(self, r: _Expr) -> None:
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
        pp = _Param(pname, "global", self.VT, "partial", written=True)
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

    def local_hist(self, r: _Expr) -> None:
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
        self.add_param(_Param(hname, "global", "int", "atomic", written=True))
        b2 = self.fresh("b", "bin_j", "bk")
        self.open(f"for (int {b2} = {lid}; {b2} < {bins}; {b2} += {lsz})")
        self.emit(f"atomic_add(&{hname}[{b2}], {lh}[{b2}]);")
        self.close()
        self.feat["atomic"] = "local_hist"
        self.feat["loops"] += ["hist_init", "hist_merge"]
        self.cur_depth = max(self.cur_depth, 1)

    # ---- loops
    def acc_mode(self) -> str:
        if self.is_float:
            return self.wpick({"sum": 5, "decay": 1.2, "max": 1, "min": 0.4})
        return self.wpick({"sum": 5, "xor": 1, "max": 1, "or": 0.4})

    def accumulate(self, acc: str, mode: str, g: _Expr) -> None:
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
                self.add_param(_Param(weights_arr, "global", self.T, "weights", const=True))

        loops: list[_Loop] = []
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
        loop_vals: list[_Val] = []
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
        wexpr: _Expr | None = None
        if weights_arr is not None:
            if "stencil_y" in kinds:
                side = 2 * radius + 1
                dy, dx = loops[0].var, loops[1].var
                wexpr = _Expr(f"{weights_arr}[({dy} + {radius}) * {side} + {dx} + {radius}]")
            else:
                st = next(lp for lp in loops if lp.kind == "stencil")
                wexpr = _Expr(f"{weights_arr}[{st.var} + {radius}]")
        leaves = [self.vexpr(v) for v in self.values() if v.name != acc]
        for lp in loops:
            if lp.kind not in ("stencil", "stencil_y", "stencil_x") or self.chance(0.3):
                ty = self.T
                leaves.append(_Expr(f"({ty}){lp.var}", False, P_UNARY) if self.is_float else _Expr(lp.var))
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
                g = self.combine(g, _Expr(f"({self.T}){lp.var}", False, P_UNARY) if self.is_float
                                 else _Expr(lp.var))
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
            post = self.vexpr(_Val(inner_acc, self.W > 1, inner_line))
            if self.chance(0.5) and self.is_float:
                post = self.unary(post)
            self.accumulate(acc, mode, post)
        for _ in loops[1:]:
            self.close()
        self.add_val(acc, self.W > 1, len(self.lines) - 1)

    def loop_index(self, loops: list[_Loop], buf: _Buf) -> str:
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

    def open_loop(self, kind: str, radius: int, scalar_nested: bool) -> _Loop:
        lb, n = self.lb, self.n_name
        if kind == "const":
            trips = (2, 3, 4, 5, 8) if scalar_nested else (2, 3, 4, 5, 8, 10, 16, 32, 64)
            c = self.pick(trips)
            v = self.fresh("i", "k", "t", "m", "it", "r")
            if c <= 8 and self.chance(0.2):
                self.emit("#pragma unroll")
            self.open(f"for (int {v} = 0; {v} < {c}; {v}++)")
            return _Loop(v, kind, str(c), const_trip=c)
        if kind == "scalar":
            k = self.scalar_param("loop", self.rng.sample(["k", "iters", "m", "steps", "reps", "niters",
                                                           "nsteps", "passes"], 8))
            v = self.fresh("i", "k", "t", "m", "it", "r")
            style = self.wpick({"up": 5, "down": 1})
            if style == "up":
                self.open(f"for (int {v} = 0; {v} < {k}; {v}++)")
            else:
                self.open(f"for (int {v} = {k} - 1; {v} >= 0; {v}--)")
            return _Loop(v, kind, k)
        if kind == "stencil":
            d = self.fresh("d", "o", "dd", "tap")

            def fn(name: str, d: str = d) -> str:
                return f"clamp({lb} + {d}, 0, {n} - 1)"

            self.open(f"for (int {d} = -{radius}; {d} <= {radius}; {d}++)")
            return _Loop(d, kind, str(2 * radius + 1), const_trip=2 * radius + 1, index_fn=fn)
        if kind == "stencil_y":
            dy = self.fresh("dy", "oy", "sy")
            self.stencil_dy = dy
            self.open(f"for (int {dy} = -{radius}; {dy} <= {radius}; {dy}++)")
            return _Loop(dy, kind, str(2 * radius + 1), const_trip=2 * radius + 1)
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

            return _Loop(dx, kind, str(2 * radius + 1), const_trip=2 * radius + 1, index_fn=fn2)
        x, y = self.coords[0], self.coords[1]
        w, h = self.ext[0], self.ext[1]
        v = self.fresh("k", "c", "kk", "t")
        if kind == "row":
            self.open(f"for (int {v} = 0; {v} < {w}; {v}++)")

            def fr(name: str) -> str:
                return f"{y} * {w} + {v}"

            return _Loop(v, kind, w, index_fn=fr)
        # col
        self.open(f"for (int {v} = 0; {v} < {h}; {v}++)")

        def fc(name: str) -> str:
            return f"{v} * {w} + {x}"

        return _Loop(v, kind, h, index_fn=fc)

    def loop_branch(self, acc: str, mode: str, g: _Expr, lp: _Loop, leaves: list[_Expr]) -> None:
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
            self.accumulate(acc, mode, _Expr(gn, self.W > 1))
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
        self.declare(["fit", "niter_f", "itf"], _Expr(f"({self.T}){it}", False, P_UNARY))

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
        inner_vals: list[_Val] = []
        if self.depth >= 2:
            c = self.pick((2, 3, 4, 8))
            v = self.fresh("i", "m", "q")
            inner = self.fresh("inner", "part", "tmp_acc")
            self.emit(f"{self.VT} {inner} = {self.zero()};")
            self.open(f"for (int {v} = 0; {v} < {c}; {v}++)")
            lv = [_Expr(f"({self.T}){v}", False, P_UNARY) if self.is_float else _Expr(v)]
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
            g = _Expr(gn)
        elif self.atomic:
            gn = self.fresh("r", "res", "val_r")
            self.emit(f"{self.decl()}{self.VT} {gn} = {self.bc(g).text if self.W > 1 else g.text};")
            g = _Expr(gn, self.W > 1)
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
            self.store(_Expr(acc, self.W > 1), self.gid)

    # ---- branches after the loops
    def branch_expr(self, leaves: Sequence[_Expr], target: str) -> _Expr:
        """An expression to assign to ``target`` in a branch (never ``target`` itself)."""
        e = self.expr(self.rng.randint(1, 2), leaves)
        if e.text == target or e.const:
            x = self.pick([lf for lf in leaves if not lf.const and lf.text != target] or
                          [_Expr(target, self.W > 1)])
            e = self.unary(x) if self.is_float else self.binop(x, "*", self.const_expr(), P_MUL)
        return e

    def post_branches(self, r: _Val) -> None:
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

    # ---- stores
    def scalarize(self, e: _Expr) -> _Expr:
        if not e.vec:
            return e
        name = e.text
        if e.prec != P_ATOM or not re.fullmatch(r"\w+", name):
            # a temporary, not registered as a value (it may live in a nested block)
            name = self.fresh("rv", "vres", "vr")
            self.emit(f"{self.decl()}{self.VT} {name} = {e.text};")
        comps = ["x", "y", "z", "w"][: self.W]
        if self.is_float and self.chance(0.3):
            return self.call("dot", _Expr(name, True), _Expr(name, True), vec=False)
        if self.is_float and self.chance(0.2):
            return self.call("length", _Expr(name, True), vec=False)
        return _Expr(" + ".join(f"{name}.{c}" for c in comps), False, P_ADD)

    def store(self, r: _Expr, idx: str, buf: _Buf | None = None) -> None:
        b = buf or self.out
        name = b.param.name
        if b.mode == "vload":
            self.emit(f"vstore{self.W}({self.bc(r).text}, {idx}, {name});")
        elif b.mode == "vecptr":
            self.emit(f"{name}[{idx}] = {self.bc(r).text};")
        else:
            self.emit(f"{name}[{idx}] = {self.scalarize(r).text};")

    def final_stores(self, r: _Expr) -> None:
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
            ap = _Param(aname, "global", self.T, "output", written=True)
            if amode == "vecptr":
                ap.ctype = self.VT
            elif amode == "vload":
                ap.elems = f"gsize*{self.W}"
            self.add_param(ap)
            v = self.pick(vals)
            e = self.vexpr(v)
            if self.is_float and self.chance(0.4):
                e = self.unary(e)
            self.store(e, lin, _Buf(ap, amode))
            self.feat["outputs"].append("aux")
        if self.atomic and self.local_pattern != "hist":
            self.global_atomic(r)
        if guard:
            if len(self.lines) == guard_line:      # nothing was stored: drop the empty block
                del self.lines[-1]
                self.level -= 1
            else:
                self.close()

    def bin_of(self, r: _Expr, bins: int) -> str:
        s = self.scalarize(r)
        bname = self.fresh("bin", "bucket", "slot")
        if self.is_float:
            k = self.pick(("16.0", "8.0", "32.0", "4.0"))
            k = self.lit(k)
            self.emit(f"{self.decl()}int {bname} = clamp(convert_int_sat({self.wrap(s, P_MUL)} * {k}), 0, {bins - 1});")
        else:
            self.emit(f"{self.decl()}int {bname} = (int)((uint)({s.text}) % {bins}u);")
        return bname

    def global_atomic(self, r: _Expr) -> None:
        kind = self.wpick({"counter": 1.0, "hist": 1.0, "sum": 1.0 if not self.is_float else 0.5, "max": 0.7})
        name = self.fresh(*{"counter": ("count", "counter", "num_hits"), "hist": ("hist", "bins", "histogram"),
                            "sum": ("total", "sum_out", "accum"), "max": ("maxval", "peak", "max_out")}[kind])
        self.add_param(_Param(name, "global", "int", "atomic", written=True))
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

    # ---- helper function
    def make_helper(self) -> None:
        verbs = ("activate", "blend", "transform", "combine", "shade", "score", "weigh", "mix_vals",
                 "response", "kernel_fn", "filter_val", "op")
        verb = self.pick(verbs)
        self.helper = f"{_KNAME}_{verb}"
        self.helper_arity = self.pick((1, 2, 2))
        pnames = self.pick((("x", "y"), ("a", "b"), ("u", "v"), ("p", "q"), ("lhs", "rhs")))
        ty = self.VT
        self.in_helper = True
        leaves = [_Expr(pnames[0], self.W > 1)]
        if self.helper_arity == 2:
            leaves.append(_Expr(pnames[1], self.W > 1))
        saved_used = self.used
        self.used = set(_RESERVED) | set(pnames)
        lines: list[str] = []
        if self.chance(0.4):
            t = self.fresh("t", "tmp", "h")
            e = self.expr(self.rng.randint(1, 2), leaves)
            lines.append(f"    const {ty} {t} = {self.bc(e).text if self.W > 1 else e.text};")
            leaves = [*leaves, _Expr(t, self.W > 1)]
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

        def group(p: _Param) -> int:
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
        src = "\n".join(out).replace(_KNAME, name) + "\n"
        feat = dict(self.feat)
        feat.update({
            "dims": self.dims, "base_type": self.T, "vector_width": self.W, "shape": self.shape,
            "local_pattern": self.local_pattern, "double": self.T == "double",
            "loop_depth": self.cur_depth, "n_inputs": len(self.inputs),
            "args": [p.describe() for p in params],
        })
        return src, name, self.dims, feat


# --------------------------------------------------------------------------------------------
# public API

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WS_RE = re.compile(r"\s+")


def normalize_source(source: str, name: str | None = None, replacement: str = "KERNEL") -> str:
    """Source with comments stripped and whitespace collapsed; ``name`` (if given) replaced.

    Helper functions are named after their kernel, so replacing the kernel name renames them too.
    """
    s = _COMMENT_RE.sub(" ", source)
    if name:
        s = re.sub(re.escape(name), replacement, s)
    return _WS_RE.sub(" ", s).strip()


def dedup_key(kernel: Kernel) -> str:
    """The key kernels are deduplicated on: normalized source with the kernel name fixed."""
    return normalize_source(kernel.source, kernel.name)


def generate_kernel_with_features(rng: random.Random, index: int, options: SynthOptions,
                                  seed: int | None = None) -> tuple[Kernel, dict[str, Any]]:
    """One random kernel and the pattern choices it was built from."""
    src, name, dims, feat = _Builder(rng, index, options).build()
    origin = f"synth:seed={seed}:i={index}" if seed is not None else f"synth:i={index}"
    return Kernel(source=src, name=name, language="opencl", dims=dims, origin=origin), feat


def generate_kernel(rng: random.Random, index: int, options: SynthOptions,
                    seed: int | None = None) -> Kernel:
    """One random kernel named ``synth_<tag>_<index:06d>`` drawn from ``rng``."""
    return generate_kernel_with_features(rng, index, options, seed)[0]


def generate_kernels_with_features(count: int, seed: int, options: SynthOptions | None = None
                                   ) -> list[tuple[Kernel, dict[str, Any]]]:
    """``count`` distinct kernels (see the module docstring on determinism and deduplication)."""
    opts = options or SynthOptions()
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[Kernel, dict[str, Any]]] = []
    regenerated = 0
    for i in range(count):
        for attempt in range(opts.max_attempts):
            k, feat = generate_kernel_with_features(rng, i, opts, seed)
            key = dedup_key(k)
            if key not in seen:
                seen.add(key)
                if attempt:
                    feat["regenerated"] = attempt
                out.append((k, feat))
                break
            regenerated += 1
        else:
            raise RuntimeError(f"synth: could not generate a distinct kernel for index {i} "
                               f"after {opts.max_attempts} attempts")
    if regenerated:
        log.info("synth: regenerated %d duplicate kernels (seed=%d, count=%d)", regenerated, seed, count)
    return out


def generate_kernels(count: int, seed: int, options: SynthOptions | None = None) -> list[Kernel]:
    """``count`` distinct kernels from ``random.Random(seed)``; byte-identical for the same arguments.

    Duplicates (after :func:`dedup_key` normalization) are regenerated, so the result holds no two
    kernels that differ only in name, comments or whitespace.
    """
    return [k for k, _ in generate_kernels_with_features(count, seed, options)]


def write_synth_corpus(out_dir: str | Path, count: int, seed: int,
                       options: SynthOptions | None = None) -> Path:
    """Generate ``count`` kernels and write them as a corpus (``kernels.jsonl`` + ``manifest.json``).

    Each record is ``Kernel.to_dict()`` plus ``synth_features`` (the generator's pattern choices,
    including an argument list with roles and size hints).
    """
    from datagen.corpus_store import write_corpus

    opts = options or SynthOptions()
    pairs = generate_kernels_with_features(count, seed, opts)
    records = []
    for k, feat in pairs:
        d = k.to_dict()
        d["synth_features"] = feat
        records.append(d)
    manifest = {"source": "synth", "seed": seed, "count": count, "options": asdict(opts)}
    return write_corpus(out_dir, records, manifest)


# --------------------------------------------------------------------------------------------
# compile checking

def default_device() -> Any:
    """The device the shared selection picks (first GPU that builds, else first device that
    builds), as a pyopencl device; ``None`` when there is none."""
    try:
        from instrument.backends.opencl import DeviceNotFound, cl_device, select_device
    except ImportError:
        return None
    try:
        return cl_device(select_device("auto"))
    except DeviceNotFound as exc:
        log.debug("no OpenCL device: %s", exc)
        return None


def _try_build(ctx: Any, dev: Any, source: str, options: str) -> tuple[bool, str]:
    import pyopencl as cl

    prg = cl.Program(ctx, source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prg.build(options=options, devices=[dev])
        return True, ""
    except cl.Error as exc:
        try:
            text = prg.get_build_info(dev, cl.program_build_info.LOG)
        except Exception:  # noqa: BLE001
            text = ""
        return False, (text or str(exc)).strip() or "build failed"


def compile_check(kernels: Sequence[Kernel], device: Any = None, batch: int = 64) -> dict[str, str]:
    """Build ``kernels`` on an OpenCL device; map kernel name -> ``""`` (ok) or the build log.

    Kernels are concatenated ``batch`` at a time into one program (their names, and their helper
    functions' names, are unique); a failing batch is bisected down to the failing kernels. Each
    kernel is built with ``-cl-std=CL1.2`` plus its own ``build_options``.
    """
    import pyopencl as cl

    dev = device if device is not None else default_device()
    if dev is None:
        raise RuntimeError("compile_check: no working OpenCL device")
    ctx = cl.Context([dev])
    results: dict[str, str] = {}
    # group by build options, keep order; a name already in the current batch starts a new one
    by_opts: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_opts.setdefault(k.build_options, []).append(k)
    t0 = time.perf_counter()
    n_builds = 0

    def check(group: list[Kernel], options: str) -> None:
        nonlocal n_builds
        n_builds += 1
        ok, text = _try_build(ctx, dev, "\n".join(k.source for k in group), options)
        if ok:
            for k in group:
                results[k.name] = ""
        elif len(group) == 1:
            results[group[0].name] = text
        else:
            mid = len(group) // 2
            check(group[:mid], options)
            check(group[mid:], options)

    for opts_str, ks in by_opts.items():
        options = ("-cl-std=CL1.2 " + opts_str).strip()
        cur: list[Kernel] = []
        names: set[str] = set()
        for k in ks:
            if len(cur) >= max(1, batch) or k.name in names:
                check(cur, options)
                cur, names = [], set()
            cur.append(k)
            names.add(k.name)
        if cur:
            check(cur, options)
    log.info("compile_check: %d kernels, %d builds, %.1f s", len(kernels), n_builds, time.perf_counter() - t0)
    return results


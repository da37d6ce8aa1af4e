"""Shared pieces of the synthetic kernel generator: its options, the name pools, the records the
builder works with, and :class:`BuilderBase` (random draws, line emission, types and literals,
values, parameters).

The kernel builder is layered, one class per module, each adding one family of code on top of
the one below: :class:`BuilderBase` (here) -> :class:`~datagen.synth.expressions.ExprBuilder`
(expression trees, loads) -> :class:`~datagen.synth.memory.MemoryBuilder` (access patterns,
stores, global atomics) -> :class:`~datagen.synth.loops.LoopBuilder` (loop nests, chunked
kernels) -> :class:`~datagen.synth.local.LocalBuilder` (``__local`` memory and barriers) ->
:class:`~datagen.synth.assembly.KernelBuilder` (plan, branches, helper, the whole kernel).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


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

RESERVED = frozenset(
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

THEMES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
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

FLOAT_CONSTS = ("0.5", "2.0", "0.25", "1.5", "0.1", "3.0", "0.01", "0.75", "1.0", "0.125", "4.0",
                 "0.001", "10.0", "0.9", "0.3333333", "1.4142135", "0.0625", "0.2", "5.0")
INT_CONSTS = ("1", "2", "3", "4", "5", "7", "8", "13", "16", "31", "64", "255", "1024")

# precedence levels (higher binds tighter)
P_TERN, P_OR, P_XOR, P_AND, P_CMP, P_SHIFT, P_ADD, P_MUL, P_UNARY, P_ATOM = range(1, 11)

KNAME = "@KNAME@"


@dataclass(frozen=True)
class Expr:
    text: str
    vec: bool = False
    prec: int = P_ATOM
    const: bool = False             # built only from literals and coefficient arguments


@dataclass
class Val:
    name: str
    vec: bool
    line: int                       # index of the declaring body line


@dataclass
class Param:
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
class Buf:
    """An input buffer and how it is read."""

    param: Param
    mode: str                       # "scalar" | "vecptr" | "vload"
    conv: bool = False              # element type differs from the kernel's (converted on load)
    pattern: str = "contig"


@dataclass
class Loop:
    var: str
    kind: str
    trip: str                       # trip count text (constant or name)
    const_trip: int | None = None
    index_fn: Callable[[str], str] | None = None   # load index for a buffer name -> index text


# --------------------------------------------------------------------------------------------
# the builder's base


class BuilderBase:
    """The state of one kernel being built and the primitives every layer uses."""

    # chosen by KernelBuilder.plan() before any code is emitted
    dims: int                       # NDRange dimensions (1-3)
    T: str                          # element type: "float", "double" or "int"
    W: int                          # vector width (1, 2 or 4)
    use_const: bool                 # declare values const
    underscores: bool               # __global / __local / __kernel spellings
    restrict: bool
    indent: str
    brace_newline: bool
    qg: str                         # the global qualifier as spelled in this kernel
    ql: str                         # the local qualifier as spelled in this kernel
    local: bool                     # uses __local memory
    atomic: bool                    # uses global atomics
    branchy: bool                   # has divergent / data-dependent branches
    shape: str                      # "point" or "chunked"
    local_pattern: str | None       # "neighbors", "reduce", "tiled", "hist" or None
    depth: int                      # loop nest depth
    gid: str
    coords: list[str]               # names of the global ids per dimension
    ext: list[str]                  # names of the global sizes per dimension (multi-dimensional)
    lin: str                        # the linear index of the work-item
    lid: str
    lsz: str
    grp: str
    n_name: str                     # the problem size
    n_scalar: bool                  # the problem size is a scalar argument
    bound: str                      # "clamp", "none", "early_return" or "wrap"
    safe: str                       # the clamped index (or lin)
    lb: str                         # base index for loads
    inputs: list[Buf]
    inplace: bool                   # the first input is also the output
    out: Buf
    theme_out: tuple[str, ...]

    def __init__(self, rng: random.Random, index: int, opts: SynthOptions) -> None:
        self.rng = rng
        self.o = opts
        self.index = index
        self.used: set[str] = set(RESERVED)
        self.params: list[Param] = []
        self.lines: list[tuple[int, str]] = []
        self.level = 0
        self.scopes: list[list[Val]] = [[]]
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
        self.index_param: Param | None = None
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
        return self.lit(self.pick(FLOAT_CONSTS)) if self.is_float else self.pick(INT_CONSTS)

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

    def bc(self, e: Expr) -> Expr:
        """Broadcast a scalar expression to the working vector type."""
        if self.W == 1 or e.vec:
            return e
        return Expr(f"({self.VT})({e.text})", True, P_UNARY)

    # ---- values
    def values(self) -> list[Val]:
        return [v for s in self.scopes for v in s]

    def add_val(self, name: str, vec: bool, line: int) -> Val:
        v = Val(name, vec, line)
        self.scopes[-1].append(v)
        return v

    def declare(self, name_cands: Sequence[str], e: Expr, const: bool = True,
                vec: bool | None = None) -> Val:
        name = self.fresh(*name_cands)
        is_vec = e.vec if vec is None else vec
        ty = self.VT if is_vec else self.T
        if is_vec and not e.vec:
            e = self.bc(e)
        line = self.emit(f"{self.decl(const)}{ty} {name} = {e.text};")
        return self.add_val(name, is_vec, line)

    def is_used(self, v: Val) -> bool:
        pat = re.compile(rf"\b{re.escape(v.name)}\b")
        return any(pat.search(t) for _, t in self.lines[v.line + 1:])

    @staticmethod
    def vexpr(v: Val) -> Expr:
        return Expr(v.name, v.vec, P_ATOM)

    # ---- parameters
    def add_param(self, p: Param) -> Param:
        self.params.append(p)
        return p

    def scalar_param(self, role: str, cands: Sequence[str], ctype: str = "int") -> str:
        for p in self.params:
            if p.role == role and p.kind == "scalar":
                return p.name
        name = self.fresh(*cands)
        self.add_param(Param(name, "scalar", ctype, role))
        return name

    def coef(self) -> str:
        """A float (or int) coefficient argument."""
        if self.coefs and (len(self.coefs) >= 2 or self.chance(0.5)):
            return self.pick(self.coefs)
        if self.is_float:
            name = self.fresh(*self.rng.sample(
                ["alpha", "beta", "scale", "gamma", "factor", "mu", "sigma", "dt", "eps", "weight"], 10))
            self.add_param(Param(name, "scalar", self.T, "coef"))
        else:
            name = self.fresh(*self.rng.sample(["bias", "seed", "key", "salt", "delta_v"], 5))
            self.add_param(Param(name, "scalar", "int", "coef"))
        self.coefs.append(name)
        return name

    def n(self) -> str:
        return self.n_name

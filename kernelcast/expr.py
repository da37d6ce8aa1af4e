"""Safe arithmetic expressions: one parser and validator, a scalar and a numpy back end.

Two kinds of text are small arithmetic expressions:

* benchmark-suite manifests describe sizes, counts and scalar values as expressions of the
  problem size ``n`` and named constants (``"round_up(n, 64)"``): :func:`evaluate` /
  :func:`evaluate_int` compute them on Python numbers with limits on length, exponents and
  magnitudes;
* static features store per-work-item counts as expressions of launch symbols
  (``"min(1, max(0, n/gsize0))"``): :func:`compile_expr` turns one into a closure over numpy
  arrays, evaluated for many configurations at once.

Both are parsed with :mod:`ast` and checked against a whitelist of node types (:func:`parse`,
driven by a :class:`Grammar`); nothing is ever passed to ``eval``. The two grammars differ on
purpose and each keeps its own function set:

* :data:`SCALAR` (manifests, at most :data:`MAX_LENGTH` characters): numbers, names not starting
  with ``_``, ``+ - * / // % **``, unary ``+``/``-`` and the functions in :data:`FUNCTIONS`
  (``min max ceil floor log2 sqrt abs int round_up``).
* :data:`ARRAY` (static features): numbers, names, ``+ - * / // %`` (no power), unary
  ``+``/``-``, ``min``/``max`` of two or more arguments, ``log2 ceil floor abs`` and the bounded
  special form ``itersum(body, s, start, factor, trips)`` - the sum of ``body`` over the (at most
  :data:`ITERSUM_MAX`) values ``s`` takes in a halving/doubling loop, which makes branch fractions
  like ``lid % (2*s) == 0`` exact. ``//`` and ``%`` follow numpy/Python floor semantics (C
  truncates toward zero; they agree for the non-negative values counts and indices take);
  ``log2`` clamps its argument to 1e-300 instead of failing.
"""

from __future__ import annotations

import ast
import collections
import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from kernelcast.errors import InputError

Number = int | float


class ExprError(InputError, ValueError):
    """An expression that does not parse, uses something not allowed, or cannot be evaluated."""


# ----------------------------------------------------------------------------------------------
# the grammar and the one parser
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Grammar:
    """What one dialect of expressions accepts (the node types besides these are fixed: numbers,
    names, binary and unary ``+``/``-`` operations, plain calls)."""

    name: str
    max_length: int                                   # characters of one expression
    binops: frozenset[type[ast.operator]]             # allowed binary operators
    calls: Mapping[str, tuple[int, int | None]]       # function -> (fewest, most arguments; None: any)
    #: special forms binding a name: function -> (index of the name argument, index of the argument it is bound in)
    binders: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    private_names: bool = False                       # whether names may start with "_"
    strip: bool = False                               # whether surrounding whitespace is ignored


def _describe(node: ast.AST) -> str:
    return type(node).__name__


def _arity(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"at least {lo}"
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def parse(text: str, grammar: Grammar) -> ast.Expression:
    """Parse ``text`` and check every node against ``grammar``; raise :class:`ExprError` for
    anything outside it. (Uncached: :func:`parse_expr` and :func:`compile_expr` cache.)"""
    if len(text) > grammar.max_length:
        raise ExprError(f"expression longer than {grammar.max_length} characters")
    try:
        tree = ast.parse(text.strip() if grammar.strip else text, mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load)):
            continue
        if isinstance(node, ast.BinOp):
            if type(node.op) not in grammar.binops:
                raise ExprError(f"operator {_describe(node.op)} is not allowed in {text!r}")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.UAdd, ast.USub)):
                raise ExprError(f"operator {_describe(node.op)} is not allowed in {text!r}")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExprError(f"only numbers are allowed as literals, got {node.value!r} in {text!r}")
        elif isinstance(node, ast.Call):
            _check_call(node, grammar, text)
        elif isinstance(node, ast.Name):
            if not grammar.private_names and node.id.startswith("_"):
                raise ExprError(f"name {node.id!r} is not allowed in {text!r}")
        elif isinstance(node, ast.operator | ast.unaryop):
            continue
        else:
            raise ExprError(f"{_describe(node)} is not allowed in {text!r}")
    return tree


def _check_call(node: ast.Call, grammar: Grammar, text: str) -> None:
    if not isinstance(node.func, ast.Name) or node.func.id not in grammar.calls:
        what = node.func.id if isinstance(node.func, ast.Name) else _describe(node.func)
        raise ExprError(f"call of {what!r} is not allowed in {text!r} "
                        f"(functions: {', '.join(sorted(grammar.calls))})")
    name = node.func.id
    if node.keywords:
        raise ExprError(f"keyword arguments are not allowed in {text!r}")
    lo, hi = grammar.calls[name]
    if len(node.args) < lo or (hi is not None and len(node.args) > hi):
        raise ExprError(f"{name}() takes {_arity(lo, hi)} arguments, got {len(node.args)} in {text!r}")
    if name in grammar.binders and not isinstance(node.args[grammar.binders[name][0]], ast.Name):
        raise ExprError(f"argument {grammar.binders[name][0] + 1} of {name}() must be a name in {text!r}")


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else ""


def free_names(node: ast.AST, grammar: Grammar) -> set[str]:
    """The names a checked expression reads from its environment (function names and names bound
    by a special form inside it excluded)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Call):
        out: set[str] = set()
        binder = grammar.binders.get(_call_name(node))
        for i, arg in enumerate(node.args):
            if binder is not None and i == binder[0]:
                continue
            names = free_names(arg, grammar)
            if binder is not None and i == binder[1]:
                names.discard(node.args[binder[0]].id)  # type: ignore[attr-defined]  # checked by parse()
            out |= names
        return out
    out = set()
    for child in ast.iter_child_nodes(node):
        out |= free_names(child, grammar)
    return out


# ----------------------------------------------------------------------------------------------
# scalar back end (manifests)
# ----------------------------------------------------------------------------------------------

MAX_LENGTH = 500            # characters of one expression
MAX_EXPONENT = 64           # |b| in a ** b
MAX_MAGNITUDE = 1e300       # results beyond this are rejected (runaway arithmetic)


def _ceil(x: Number) -> int:
    return math.ceil(x)


def _floor(x: Number) -> int:
    return math.floor(x)


def _log2(x: Number) -> float:
    if x <= 0:
        raise ExprError(f"log2 of non-positive value {x}")
    r = math.log2(x)
    return int(r) if float(r).is_integer() else r


def _sqrt(x: Number) -> float:
    if x < 0:
        raise ExprError(f"sqrt of negative value {x}")
    return math.sqrt(x)


def _round_up(x: Number, m: Number) -> int:
    if m <= 0:
        raise ExprError(f"round_up to non-positive multiple {m}")
    return int(math.ceil(x / m) * m)


def _int(x: Number) -> int:
    return int(x)


#: functions a manifest expression may call, with their allowed argument counts
FUNCTIONS: dict[str, tuple[Callable[..., Number], tuple[int, int]]] = {
    "min": (min, (2, 16)),
    "max": (max, (2, 16)),
    "ceil": (_ceil, (1, 1)),
    "floor": (_floor, (1, 1)),
    "log2": (_log2, (1, 1)),
    "sqrt": (_sqrt, (1, 1)),
    "abs": (abs, (1, 1)),
    "int": (_int, (1, 1)),
    "round_up": (_round_up, (2, 2)),
}

_SCALAR_BINOPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

#: the manifests' grammar
SCALAR = Grammar("scalar", MAX_LENGTH, frozenset(_SCALAR_BINOPS), {k: v[1] for k, v in FUNCTIONS.items()},
                 strip=True)


@functools.lru_cache(maxsize=4096)
def parse_expr(text: str) -> ast.Expression:
    """Parse and check a manifest expression; raise :class:`ExprError` for anything outside :data:`SCALAR`."""
    return parse(text, SCALAR)


def names_in(text: str | Number) -> set[str]:
    """The free names a manifest expression uses (function names excluded)."""
    if not isinstance(text, str):
        return set()
    return free_names(parse_expr(text), SCALAR)


def _check(value: Number, text: str) -> Number:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value) or abs(value) > MAX_MAGNITUDE):
        raise ExprError(f"{text!r} evaluates to {value}")
    if isinstance(value, int) and abs(value) > MAX_MAGNITUDE:
        raise ExprError(f"{text!r} evaluates to a number beyond {MAX_MAGNITUDE:g}")
    return value


def _eval(node: ast.AST, env: Mapping[str, Number], text: str) -> Number:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env, text)
    if isinstance(node, ast.Constant):
        return cast(Number, node.value)   # parse() admits only int and float literals
    if isinstance(node, ast.Name):
        if node.id not in env:
            known = ", ".join(sorted(env)) or "none"
            raise ExprError(f"unknown name {node.id!r} in {text!r} (known: {known})")
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, text)
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp):
        a = _eval(node.left, env, text)
        b = _eval(node.right, env, text)
        if isinstance(node.op, ast.Pow):
            if abs(b) > MAX_EXPONENT:
                raise ExprError(f"exponent {b} too large in {text!r} (at most {MAX_EXPONENT})")
            if a == 0 and b < 0:
                raise ExprError(f"zero to a negative power in {text!r}")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise ExprError(f"division by zero in {text!r}")
        try:
            return _check(_SCALAR_BINOPS[type(node.op)](a, b), text)
        except OverflowError:
            raise ExprError(f"overflow evaluating {text!r}") from None
    if isinstance(node, ast.Call):
        name = _call_name(node)
        args = [_eval(a, env, text) for a in node.args]
        try:
            return _check(FUNCTIONS[name][0](*args), text)
        except (OverflowError, ValueError) as e:
            if isinstance(e, ExprError):
                raise
            raise ExprError(f"{name}() failed in {text!r}: {e}") from None
    raise ExprError(f"{_describe(node)} is not allowed in {text!r}")  # pragma: no cover - parse() rejects


def evaluate(expr: str | Number, env: Mapping[str, Number] | None = None) -> Number:
    """Evaluate a manifest expression (or pass a number through) with the names in ``env``."""
    if isinstance(expr, bool):
        raise ExprError(f"expected a number or an expression, got {expr!r}")
    if isinstance(expr, (int, float)):
        return _check(expr, str(expr))
    if not isinstance(expr, str):
        raise ExprError(f"expected a number or an expression, got {type(expr).__name__}")
    return _eval(parse_expr(expr), env or {}, expr)


def evaluate_int(expr: str | Number, env: Mapping[str, Number] | None = None) -> int:
    """Evaluate to an integer; a float result must be integral (``n / 2`` with even ``n``)."""
    v = evaluate(expr, env)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"{expr!r} = {v:g} is not an integer")
        return int(v)
    return int(v)


# ----------------------------------------------------------------------------------------------
# numpy back end (static features)
# ----------------------------------------------------------------------------------------------

Evaluator = Callable[[Mapping[str, np.ndarray]], np.ndarray]

#: most iterations an ``itersum`` evaluates (a halving/doubling loop of 64-bit values ends sooner)
ITERSUM_MAX = 64

#: key under which an environment may carry a dict for sharing common sub-expressions
CACHE_KEY = "__cse__"

#: longest static-feature expression compiled
MAX_ARRAY_LENGTH = 20000

_ARRAY_BINOPS: dict[type[ast.operator], Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    ast.Add: np.add,
    ast.Sub: np.subtract,
    ast.Mult: np.multiply,
    ast.Div: np.true_divide,
    ast.FloorDiv: np.floor_divide,
    ast.Mod: np.mod,
}


def _safe_log2(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(x, 1e-300))


#: one-argument functions of static-feature expressions
ARRAY_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "log2": _safe_log2,
    "ceil": np.ceil,
    "floor": np.floor,
    "abs": np.abs,
}

#: functions of two or more arguments, folded pairwise
ARRAY_REDUCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "min": np.minimum,
    "max": np.maximum,
}

#: the static features' grammar
ARRAY = Grammar(
    "array", MAX_ARRAY_LENGTH, frozenset(_ARRAY_BINOPS),
    {**{k: (2, None) for k in ARRAY_REDUCTIONS}, **{k: (1, 1) for k in ARRAY_FUNCTIONS}, "itersum": (5, 5)},
    binders={"itersum": (1, 0)}, private_names=True)


def _compile(node: ast.AST) -> Evaluator:
    fn = _compile_node(node)
    if isinstance(node, (ast.Constant, ast.Name, ast.Expression)):
        return fn
    key = ast.unparse(node)

    def cached(env: Mapping[str, np.ndarray]) -> np.ndarray:
        cache = cast("dict[str, np.ndarray] | None", env.get(CACHE_KEY))
        if cache is None:
            return fn(env)
        r = cache.get(key)
        if r is None:
            r = fn(env)
            cache[key] = r
        return r

    return cached


def _compile_node(node: ast.AST) -> Evaluator:
    """A closure for one node of a tree :func:`parse` accepted with :data:`ARRAY`."""
    if isinstance(node, ast.Expression):
        return _compile(node.body)
    if isinstance(node, ast.Constant):
        v = np.float64(cast(float, node.value))   # parse() admits only int and float literals
        return lambda env: v
    if isinstance(node, ast.Name):
        name = node.id
        return lambda env: env[name]
    if isinstance(node, ast.BinOp):
        op = _ARRAY_BINOPS[type(node.op)]
        lhs, rhs = _compile(node.left), _compile(node.right)
        return lambda env: op(lhs(env), rhs(env))
    if isinstance(node, ast.UnaryOp):
        inner = _compile(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda env: np.negative(inner(env))
        return inner
    if isinstance(node, ast.Call):
        fname = _call_name(node)
        if fname == "itersum":
            return _compile_itersum(node)
        args = [_compile(a) for a in node.args]
        if fname in ARRAY_REDUCTIONS:
            red = ARRAY_REDUCTIONS[fname]

            def call_red(env: Mapping[str, np.ndarray]) -> np.ndarray:
                out = args[0](env)
                for a in args[1:]:
                    out = red(out, a(env))
                return out

            return call_red
        f = ARRAY_FUNCTIONS[fname]
        a0 = args[0]
        return lambda env: f(a0(env))
    raise ExprError(f"{_describe(node)} is not allowed in an expression")  # pragma: no cover - parse() rejects


def _compile_itersum(node: ast.Call) -> Evaluator:
    """``itersum(body, var, start, factor, trips)``: the sum of ``body`` with ``var`` bound to
    ``s_t = start * factor**t`` (``floor`` of it for ``factor < 1``, as integer halving does) for
    ``t = 0 .. trips-1`` (at most :data:`ITERSUM_MAX`), elementwise over configurations."""
    var = node.args[1].id  # type: ignore[attr-defined]  # parse() checked it is a name
    body = _compile(node.args[0])
    start, factor, trips = (_compile(a) for a in node.args[2:])

    def run(env: Mapping[str, np.ndarray]) -> np.ndarray:
        a = np.asarray(start(env), dtype=np.float64)
        f = np.asarray(factor(env), dtype=np.float64)
        t_n = np.asarray(trips(env), dtype=np.float64)
        finite = np.where(np.isfinite(t_n), t_n, 0.0)
        n = int(min(ITERSUM_MAX, max(0.0, float(np.max(finite)) if finite.size else 0.0)))
        total: np.ndarray = np.zeros(np.broadcast_shapes(a.shape, f.shape, t_n.shape), dtype=np.float64)
        scope: dict[str, np.ndarray | None] = {CACHE_KEY: None}
        local = collections.ChainMap(scope, env)  # type: ignore[arg-type]
        for t in range(n):
            s_t = a * f ** t
            scope[var] = np.where(f < 1.0, np.floor(s_t), s_t)
            val = np.asarray(body(local), dtype=np.float64)  # type: ignore[arg-type]
            total = total + np.where(t < t_n, np.nan_to_num(val, nan=0.0), 0.0)
        return total

    return run


@functools.lru_cache(maxsize=8192)
def compile_expr(text: str) -> tuple[Evaluator, frozenset[str]]:
    """Compile a static-feature expression to ``(evaluator, names it uses)``.

    The evaluator takes a mapping of names to floats or numpy arrays (broadcast together) and
    returns a numpy value. Raises :class:`ExprError` for anything outside :data:`ARRAY`.
    """
    tree = parse(text, ARRAY)
    return _compile(tree), frozenset(free_names(tree, ARRAY))


def evaluate_expr(text: str, env: Mapping[str, float | np.ndarray]) -> np.ndarray:
    """Evaluate one static-feature expression; missing names raise ``KeyError``."""
    fn, _ = compile_expr(text)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(fn(env), dtype=np.float64)  # type: ignore[arg-type]


def free_symbols(text: str) -> frozenset[str]:
    """The names a static-feature expression uses (function names excluded)."""
    return compile_expr(text)[1]

"""Safe arithmetic expressions of the problem size ``n`` and named constants.

Manifests describe sizes, counts and scalar values as small expressions (``"ceil(n / 256) * 256"``).
They are parsed with :mod:`ast` and evaluated by walking a whitelist of node types; nothing is
ever passed to ``eval``. Allowed: numbers, names bound in the environment, ``+ - * / // % **``,
unary ``+``/``-``, parentheses and the functions in :data:`FUNCTIONS`.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Mapping

Number = int | float

MAX_LENGTH = 500            # characters of one expression
MAX_EXPONENT = 64           # |b| in a ** b
MAX_MAGNITUDE = 1e300       # results beyond this are rejected (runaway arithmetic)


class ExprError(ValueError):
    """An expression that does not parse, uses something not allowed, or cannot be evaluated."""


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


#: functions an expression may call, with their allowed argument counts
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

_BINOPS: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_BINOP_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
                  ast.Mod: "%", ast.Pow: "**"}


def _describe(node: ast.AST) -> str:
    return type(node).__name__


@functools.lru_cache(maxsize=4096)
def parse_expr(text: str) -> ast.Expression:
    """Parse and check an expression; raise :class:`ExprError` for anything outside the whitelist."""
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"cannot parse {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load)):
            continue
        if isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise ExprError(f"operator {_describe(node.op)} is not allowed in {text!r}")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.UAdd, ast.USub)):
                raise ExprError(f"operator {_describe(node.op)} is not allowed in {text!r}")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExprError(f"only numbers are allowed as literals, got {node.value!r} in {text!r}")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                what = node.func.id if isinstance(node.func, ast.Name) else _describe(node.func)
                raise ExprError(f"call of {what!r} is not allowed in {text!r} "
                                f"(functions: {', '.join(sorted(FUNCTIONS))})")
            if node.keywords:
                raise ExprError(f"keyword arguments are not allowed in {text!r}")
            lo, hi = FUNCTIONS[node.func.id][1]
            if not lo <= len(node.args) <= hi:
                raise ExprError(f"{node.func.id}() takes {lo}{'' if lo == hi else f'-{hi}'} arguments, "
                                f"got {len(node.args)} in {text!r}")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise ExprError(f"name {node.id!r} is not allowed in {text!r}")
        elif isinstance(node, ast.operator | ast.unaryop):
            continue
        else:
            raise ExprError(f"{_describe(node)} is not allowed in {text!r}")
    return tree


def names_in(text: str | Number) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    if not isinstance(text, str):
        return set()
    tree = parse_expr(text)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


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
        return node.value  # type: ignore[no-any-return]
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
            return _check(_BINOPS[type(node.op)](a, b), text)
        except OverflowError:
            raise ExprError(f"overflow evaluating {text!r}") from None
    if isinstance(node, ast.Call):
        fn = FUNCTIONS[node.func.id][0]  # type: ignore[union-attr]
        args = [_eval(a, env, text) for a in node.args]
        try:
            return _check(fn(*args), text)
        except (OverflowError, ValueError) as e:
            if isinstance(e, ExprError):
                raise
            raise ExprError(f"{node.func.id}() failed in {text!r}: {e}") from None  # type: ignore[union-attr]
    raise ExprError(f"{_describe(node)} is not allowed in {text!r}")  # pragma: no cover - parse_expr rejects


def evaluate(expr: str | Number, env: Mapping[str, Number] | None = None) -> Number:
    """Evaluate an expression (or pass a number through) with the names in ``env``."""
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

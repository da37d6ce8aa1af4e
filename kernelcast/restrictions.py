"""Kernel Tuner-style restrictions of a search space: Python expressions over the tune
parameters (``"use_padding==0 or block_size_x % 32 != 0"``, ``"32 <= block_size_x * block_size_y
<= 1024"``), evaluated for many configurations at once on numpy arrays. Parsed with :mod:`ast`
and checked node by node (arithmetic, comparisons, ``and``/``or``/``not``, ``in (...)``,
``min``/``max``/``abs``); nothing is passed to ``eval``. Used to restrict a simulated search space
(``tune --simulate``) and to select the records of a Kernel Tuner cache on import
(``dataset import-kt --where``)."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.errors import UsageError

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
    ast.GtE: operator.ge}
_FUNCS: dict[str, Callable[..., Any]] = {"min": np.minimum, "max": np.maximum, "abs": np.abs}
#: the longest restriction taken
MAX_RESTRICTION = 2000


def _eval_restriction(node: ast.AST, env: dict[str, np.ndarray], text: str) -> Any:
    if isinstance(node, ast.Expression):
        return _eval_restriction(node.body, env, text)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise UsageError(f"restriction {text!r}: unknown parameter {node.id!r} (parameters: "
                             f"{', '.join(sorted(env))})")
        return env[node.id]
    if isinstance(node, ast.BoolOp):
        vals = [np.asarray(_eval_restriction(v, env, text)).astype(bool) for v in node.values]
        fn = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        return out
    if isinstance(node, ast.UnaryOp):
        v = _eval_restriction(node.operand, env, text)
        if isinstance(node.op, ast.Not):
            return np.logical_not(np.asarray(v).astype(bool))
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval_restriction(node.left, env, text), _eval_restriction(node.right, env, text)
        if isinstance(node.op, ast.Pow) and np.any(np.abs(np.asarray(b, dtype=np.float64)) > 64):
            raise UsageError(f"restriction {text!r}: exponent too large")
        return _BINOPS[type(node.op)](a, b)
    if isinstance(node, ast.Compare):
        left = _eval_restriction(node.left, env, text)
        acc: Any = True
        for op, comp in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(comp, (ast.Tuple, ast.List)):
                vals = [_eval_restriction(e, env, text) for e in comp.elts]
                r: Any = np.isin(left, vals)
                if isinstance(op, ast.NotIn):
                    r = np.logical_not(r)
            elif type(op) in _CMPOPS:
                right = _eval_restriction(comp, env, text)
                r = _CMPOPS[type(op)](left, right)
                left = right
            else:
                break
            acc = np.logical_and(acc, r)
        else:
            return acc
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS \
            and not node.keywords and node.args:
        return _FUNCS[node.func.id](*[_eval_restriction(a, env, text) for a in node.args])
    raise UsageError(f"restriction {text!r}: {type(node).__name__} is not allowed (arithmetic, comparisons, "
                     f"and/or/not, in (...), min/max/abs)")


def parse_restriction(text: str) -> ast.Expression:
    """The syntax tree of one restriction; :class:`UsageError` for text that is not an expression
    (the node types are checked when it is evaluated)."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"restriction {text!r}: expected a non-empty expression string")
    if len(text) > MAX_RESTRICTION:
        raise UsageError(f"restriction of {len(text)} characters: at most {MAX_RESTRICTION}")
    try:
        return ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise UsageError(f"restriction {text!r}: not an expression ({e.msg})") from None


def restriction_mask(params: pd.DataFrame, restrictions: Sequence[str]) -> np.ndarray:
    """Which configurations (rows of ``params``) satisfy every restriction, each a Python expression
    over the tune parameters as Kernel Tuner takes them (``"use_padding==0 or block_size_x % 32 !=
    0"``, ``"32 <= block_size_x * block_size_y <= 1024"``). :class:`UsageError` for an expression
    that is not one, or names a parameter the space does not have."""
    env: dict[str, np.ndarray] = {}
    for c in params.columns:
        v = pd.to_numeric(params[c], errors="coerce")
        env[str(c)] = v.to_numpy() if v.notna().all() else params[c].to_numpy(dtype=object)
    mask = np.ones(len(params), dtype=bool)
    for text in restrictions:
        tree = parse_restriction(text)
        with np.errstate(all="ignore"):
            r = np.asarray(_eval_restriction(tree, env, text))
        mask &= np.broadcast_to(r.astype(bool), mask.shape)
    return mask

"""Symbolic polynomials, the numpy back end of the safe expression evaluator, and the coalescing model."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.models.static.coalescing import bank_conflict_degree, coalescing_efficiency
from kernelcast.models.static.expr import Poly, p_ceil_div, p_floordiv, p_max, p_mod

from kernelcast.errors import InputError
from kernelcast.expr import ExprError, compile_expr, evaluate, evaluate_expr, free_symbols


def test_poly_arithmetic_and_printing():
    k, n = Poly.symbol("k"), Poly.symbol("n")
    p = (k + 1) * (k - 1)
    assert p.to_str() == "k*k - 1"
    assert (k * 2 + n * 0).to_str() == "2*k"
    assert ((n - 1) * 0.5).to_str() == "n/2 - 1/2"
    assert p_floordiv(k * 4 + 8, Poly.const(4)).to_str() == "k + 2"
    assert p_floordiv(k * 4 + 1, Poly.const(4)).to_str() == "k"
    assert p_mod(k * 8 + 3, Poly.const(4)).to_str() == "3"
    assert p_max(Poly.const(0), Poly.const(3)).to_str() == "3"
    assert p_ceil_div(n, Poly.const(4)).to_str() == "(n + 3)//4"
    atom_k = k.atoms().pop()
    assert (k * n * 3 + k + 5).coefficient(atom_k).to_str() == "3*n + 1"   # k * (3n + 1) + 5
    assert p_max(Poly.const(0), k).coefficient(atom_k).to_str() == "0"     # max(0, k) is opaque: no k term
    assert (k * k).coefficient(atom_k) is None                              # k^2 has no linear coefficient


def test_evaluator_matches_python_and_numpy():
    e = "max(0, (n + 3)//4) * k - n % 3 + log2(n) / 2 + min(n, k, 7) + ceil(n / 3) - floor(-n / 3) + abs(-k)"
    env = {"n": 10.0, "k": 3.0}
    expect = max(0, (10 + 3) // 4) * 3 - 10 % 3 + np.log2(10) / 2 + min(10, 3, 7) + np.ceil(10 / 3) \
        - np.floor(-10 / 3) + 3
    assert float(evaluate_expr(e, env)) == pytest.approx(expect)
    arr = evaluate_expr(e, {"n": np.array([10.0, 20.0]), "k": 3.0})
    assert arr.shape == (2,) and arr[0] == pytest.approx(expect)
    assert free_symbols(e) == {"n", "k"}


@pytest.mark.parametrize("bad", [
    "__import__('os').system('true')", "a.b", "x[0]", "lambda: 1", "x ** 2", "open('f')", "'s'",
    "x if y else z", "[1, 2]", "f(x)", "max(x)", "x < y", "True",
])
def test_evaluator_rejects(bad):
    with pytest.raises(ExprError):
        compile_expr(bad)


def test_the_two_grammars_keep_their_own_whitelists():
    # one parser, two function sets: what one back end accepts the other may not
    assert float(evaluate_expr("_tmp + 1", {"_tmp": 2.0})) == 3.0            # names may start with _
    assert evaluate("round_up(n, 4) + 2 ** 3", {"n": 5}) == 16
    for array_only in ("itersum(s, s, 8, 1/2, 3)", "min(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)"):
        compile_expr(array_only)
        with pytest.raises(ExprError):
            evaluate(array_only, {"s": 1})
    for scalar_only in ("2 ** 3", "sqrt(4)", "round_up(5, 4)", "int(2.5)"):
        evaluate(scalar_only)
        with pytest.raises(ExprError):
            compile_expr(scalar_only)
    with pytest.raises(ExprError, match="name '_tmp'"):
        evaluate("_tmp + 1", {"_tmp": 2})
    with pytest.raises(ExprError, match="argument 2 of itersum"):
        compile_expr("itersum(s, 2, 8, 1/2, 3)")
    assert issubclass(ExprError, InputError) and issubclass(ExprError, ValueError)


def test_itersum_binds_its_variable():
    e = "itersum(lid0 % (2*s), s, lsize0/2, 1/2, log2(lsize0))"
    assert free_symbols(e) == {"lid0", "lsize0"}
    # s = 4, 2, 1 with lid0 = 5: 5 % 8 + 5 % 4 + 5 % 2
    assert float(evaluate_expr(e, {"lid0": 5.0, "lsize0": 8.0})) == 5 + 1 + 1


def test_poly_strings_round_trip_through_evaluator():
    k, n = Poly.symbol("k"), Poly.symbol("n")
    p = p_max(Poly.const(0), p_ceil_div(n - k, Poly.const(3))) * (k + Poly.const(0.25))
    env = {"n": 17.0, "k": 2.0}
    assert float(evaluate_expr(p.to_str(), env)) == pytest.approx(max(0, -(-(17 - 2) // 3)) * 2.25)


def test_coalescing_model():
    # 1D, 32 lanes, 4-byte elements, 32-byte sectors
    assert coalescing_efficiency(1, 0, 4, 4, 256) == pytest.approx(1.0)
    assert coalescing_efficiency(0, 0, 4, 4, 256) == pytest.approx(1.0)
    assert coalescing_efficiency(2, 0, 4, 4, 256) == pytest.approx(0.5)
    assert coalescing_efficiency(8, 0, 4, 4, 256) == pytest.approx(0.125)
    assert coalescing_efficiency(1000, 0, 4, 4, 256) == pytest.approx(0.125)
    assert coalescing_efficiency(None, None, 4, 4, 256) == pytest.approx(0.125)
    # 128-byte lines
    assert coalescing_efficiency(8, 0, 4, 4, 256, segment=128) == pytest.approx(0.125)
    assert coalescing_efficiency(32, 0, 4, 4, 256, segment=128) == pytest.approx(1 / 32)
    # float4, contiguous
    assert coalescing_efficiency(1, 0, 16, 16, 256) == pytest.approx(1.0)
    # 2D 8x4 work-group on a row-major 2D array: 4 rows of 32 B
    assert coalescing_efficiency(1, 1024, 4, 4, 8, 4) == pytest.approx(1.0)
    assert coalescing_efficiency(1, 1024, 4, 4, 8, 4, segment=128) == pytest.approx(0.25)
    # vectorized over configurations
    v = coalescing_efficiency(np.array([1.0, 2.0, 32.0]), 0, 4, 4, np.array([256.0, 256.0, 256.0]))
    assert v.tolist() == pytest.approx([1.0, 0.5, 0.125])
    # small work-group: idle lanes
    assert coalescing_efficiency(1, 0, 4, 4, 8) == pytest.approx(1.0)


def test_bank_conflicts():
    assert bank_conflict_degree(1, 4, 4, 256) == pytest.approx(1)
    assert bank_conflict_degree(0, 4, 4, 256) == pytest.approx(1)
    assert bank_conflict_degree(2, 4, 4, 256) == pytest.approx(2)
    assert bank_conflict_degree(32, 4, 4, 256) == pytest.approx(32)
    assert bank_conflict_degree(33, 4, 4, 256) == pytest.approx(1)
    assert bank_conflict_degree(32, 4, 4, 16) == pytest.approx(16)
    assert bank_conflict_degree(1, 16, 16, 256) == pytest.approx(1)


def test_bank_conflicts_of_warps_across_rows():
    # 16-wide rows of a 30-word tile: a warp holds two rows, lanes 0-1 and 18-19 of row 0 share
    # banks 0-1 ... 12-13 with row 1's words 32-43: two words in a bank, a 2-way conflict
    assert bank_conflict_degree(1, 4, 4, 16, stride1=30, lsize1=4) == pytest.approx(2)
    # padded to 48 words, row 1 takes banks 16-31: no conflict
    assert bank_conflict_degree(1, 4, 4, 16, stride1=48, lsize1=4) == pytest.approx(1)
    # 32-wide rows: each warp is one row, the row stride never meets a warp
    assert bank_conflict_degree(1, 4, 4, 32, stride1=30, lsize1=4) == pytest.approx(1)
    # 48-wide rows of 62 words, 2 rows: warps 0 and 2 lie in one row; warp 1 holds words 32-47 of
    # row 0 and 62-77 of row 1, banks 30-31 and 0-13 against 0-15: 2-way; mean (1 + 2 + 1) / 3
    assert bank_conflict_degree(1, 4, 4, 48, stride1=62, lsize1=2) == pytest.approx(4 / 3)
    # a 64-wide wavefront is served 32 lanes a pass: stride 2 words is 2-way in each pass
    assert bank_conflict_degree(2, 4, 4, 64, warp=64) == pytest.approx(2)
    # unknown row stride: the first row alone, as without one
    assert bank_conflict_degree(1, 4, 4, 16, stride1=None, lsize1=4) == pytest.approx(1)
    # vectorized over configurations (work-group shapes, row strides and warp widths alike)
    v = bank_conflict_degree(np.array([1.0, 1.0]), 4, 4, np.array([16.0, 32.0]), stride1=np.array([30.0, 30.0]),
                             lsize1=np.array([4.0, 4.0]), warp=np.array([32.0, 32.0]))
    assert v.tolist() == pytest.approx([2.0, 1.0])


def _apply(fn: str, args: list[float]) -> float:
    import math

    if fn == "max":
        return max(args)
    if fn == "min":
        return min(args)
    if fn == "floordiv":
        return args[0] // args[1]
    if fn == "mod":
        return args[0] % args[1]
    if fn == "div":
        return args[0] / args[1]
    return {"log2": math.log2, "ceil": math.ceil, "floor": math.floor, "abs": abs}[fn](args[0])


def _direct(p: Poly, env: dict[str, float]) -> float:
    """Evaluate a polynomial without printing it (reference for the printer + evaluator)."""
    total = 0.0
    for mono, c in p.terms.items():
        term = float(c)
        for a, pw in mono:
            if a.kind == "sym":
                v = env[a.name]
            else:
                v = _apply(a.fn, [_direct(x, env) for x in a.args])
            term *= v ** pw
        total += term
    return total


def test_printing_precedence_random():
    from kernelcast.models.static.expr import p_div, p_min, p_unary

    rng = np.random.default_rng(3)
    syms = [Poly.symbol(s) for s in ("a", "b", "c")]
    ops = [
        lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: -x,
        lambda x, y: p_floordiv(x, y + 100), lambda x, y: p_mod(x, y + 50), lambda x, y: p_div(x, y + 200),
        lambda x, y: p_max(x, y), lambda x, y: p_min(x, y), lambda x, y: p_unary("ceil", x * 0.5),
        lambda x, y: x * 0.75, lambda x, y: p_ceil_div(x, Poly.const(3)),
    ]
    env = {"a": 7.0, "b": 13.0, "c": 5.0}
    for _ in range(300):
        pool = list(syms) + [Poly.const(int(rng.integers(-5, 6)))]
        for _ in range(6):
            f = ops[int(rng.integers(len(ops)))]
            x, y = pool[int(rng.integers(len(pool)))], pool[int(rng.integers(len(pool)))]
            r = f(x, y)
            if len(r.terms) < 20:
                pool.append(r)
        p = pool[-1]
        assert float(evaluate_expr(p.to_str(), env)) == pytest.approx(_direct(p, env), rel=1e-9, abs=1e-9), p.to_str()

"""Trip counts of loops from their induction variable: ``var op bound`` with ``var = A`` on entry
and one step per iteration.

``for (i = A; i < B; i += C)`` and the ``<=``, ``>``, ``>=``, ``!=``, ``i++``/``i--``/
``i -= C``/``i = i + C`` forms give ``max(0, ceil((B - A) / C))`` (``+1`` for ``<=``/``>=``);
``i *= F``, ``i <<= k``, ``i /= F``, ``i >>= k`` give ``log2`` formulas (*geometric* loops, whose
counts are summed exactly over their iterations by :func:`integrate_geo`). When ``A`` or ``B``
depend on a work-item id or an enclosing loop's counter the trip count is the *average* over
work-items/iterations (:func:`models.static.affine.average`) and ``ceil(x/C)`` is replaced by
its mean ``x/C + (C-1)/(2C)``. A bound on loaded data makes the loop ``data_dependent``, one the
analysis cannot follow ``unknown``; both get the symbol ``avg_trip``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from kernelcast.models.static.affine import average
from kernelcast.models.static.expr import (
    DATA,
    GRP,
    ITER,
    VAR,
    WI,
    Atom,
    Poly,
    p_ceil_div,
    p_div,
    p_itersum,
    p_max,
    p_min,
    p_unary,
)
from kernelcast.models.static.values import AVG_TRIP, HALF, ONE, ZERO, Val


@dataclass
class Trip:
    """A trip count, its kind (affine / geometric / data_dependent / unknown), the value of the
    induction variable at iteration ``it`` and, for geometric loops, ``(start, factor)``."""

    trip: Poly
    kind: str
    value: Callable[[Poly], Val] | None = None
    geo: tuple[Poly, Fraction] | None = None
    # the count is a mean over work-items or iterations of an enclosing loop (its start, bound or
    # step differs between them): taken at the mean start and bound, which is not the mean count
    # where the count is clipped at zero or by another bound for some of them
    averaged: bool = False


def induction_trip(op: str, how: str, start: Val | None, bound: Poly | None, bdeps: frozenset[str], step: Val,
                   loop_atoms: set[str], lid: int) -> Trip:
    """Trip count of ``var op bound`` for an induction variable stepped by ``how``/``step``
    (``loop_atoms``: atoms of the loop-variant values; ``lid``: the loop's serial number)."""
    if start is None or start.poly is None or bound is None or step.poly is None:
        deps = bdeps | (start.deps if start else frozenset())
        return Trip(AVG_TRIP, "data_dependent" if DATA in deps else "unknown")
    A, B, C = start.poly, bound, step.poly
    if any(a.key in loop_atoms for p in (B, C) for a in p.all_atoms()):
        return Trip(AVG_TRIP, "unknown")
    for p in (A, B, C):
        if DATA in p.deps or VAR in p.deps:
            k = "data_dependent" if DATA in (A.deps | B.deps | C.deps) else "unknown"
            return Trip(AVG_TRIP, k)
    Aa, Ba, Ca = average(A), average(B), average(C)
    if Aa is None or Ba is None or Ca is None:
        return Trip(AVG_TRIP, "unknown")
    averaged = bool((A.deps | B.deps | C.deps) & {WI, ITER, GRP})
    if how in ("++", "--", "+", "-"):
        return _affine_trip(op, how, A, Aa, Ba, C, averaged, start.deps)
    return _geometric_trip(op, how, Aa, Ba, C, start.deps, lid)


def _affine_trip(op: str, how: str, A: Poly, Aa: Poly, Ba: Poly, C: Poly, averaged: bool,
                 deps: frozenset[str]) -> Trip:
    if how in ("++", "--"):
        signed = ONE if how == "++" else -ONE
    else:
        signed = C if how == "+" else -C
    sa = average(signed)
    if sa is None:
        return Trip(AVG_TRIP, "unknown")
    pos = sa.const_value() > 0 if sa.is_const() else how in ("++", "+")
    mag = sa if pos else -sa
    if pos and op in ("<", "<=", "!="):
        diff = Ba - Aa + (1 if op == "<=" else 0)
    elif not pos and op in (">", ">=", "!="):
        diff = Aa - Ba + (1 if op == ">=" else 0)
    else:
        return Trip(AVG_TRIP, "unknown")
    if mag.is_const() and mag.const_value() == 1:
        trip = p_max(ZERO, diff)
    elif averaged:
        trip = p_max(ZERO, p_div(diff, mag) + HALF - p_div(HALF, mag))
    else:
        trip = p_max(ZERO, p_ceil_div(diff, mag))

    def value(it: Poly, A: Poly = A, signed: Poly = signed, deps: frozenset[str] = deps) -> Val:
        return Val.of(A + signed * it, deps | {ITER})

    return Trip(trip, "affine", value, averaged=averaged)


def _geometric_trip(op: str, how: str, Aa: Poly, Ba: Poly, C: Poly, deps_a: frozenset[str], lid: int) -> Trip:
    f = geo_factor(how, C)
    if f is None:
        return Trip(AVG_TRIP, "unknown")
    F, grows = f
    k = Fraction(F).limit_denominator(1 << 20)
    logk = Poly.const(Fraction(math.log2(F)).limit_denominator(1 << 20))
    if grows and op in ("<", "<=", "!="):
        ratio = p_unary("log2", p_div(p_max(ONE, Ba), p_max(ONE, Aa)))
        if op == "<=":
            trip = p_max(ZERO, p_unary("floor", p_div(ratio, logk)) + 1)
        else:
            trip = p_max(ZERO, p_unary("ceil", p_div(ratio, logk)))
        avgv = p_div(Ba - Aa, Poly.const(k - 1) * p_max(ONE, trip))
    elif not grows and op in (">", ">=", "!="):
        Bx = Ba - 1 if op == ">=" else Ba
        if op == "!=":
            Bx = Ba
        ratio = p_unary("log2", p_div(p_max(ONE, Aa), Bx + 1))
        trip = p_min(ONE, p_max(ZERO, Aa - Bx)) * (p_unary("floor", p_div(ratio, logk)) + 1)
        avgv = p_div(Aa * k, Poly.const(k - 1) * p_max(ONE, trip))
    else:
        return Trip(AVG_TRIP, "unknown")

    def gvalue(it: Poly, avgv: Poly = avgv, deps: frozenset[str] = deps_a) -> Val:
        dv = (ZERO, ZERO, ZERO) if WI not in deps else None
        a = Atom(f"g:{lid}", "geo", f"_g{lid}_", deps=frozenset(deps | {ITER}), avg=avgv, deriv=dv)
        return Val(Poly.atom(a), frozenset(deps | {ITER}))

    return Trip(trip, "geometric", gvalue, geo=(Aa, k if grows else 1 / k))


def geo_factor(how: str, step: Poly) -> tuple[float, bool] | None:
    """``(factor, grows)`` of a geometric step (``*= F``, ``/= F``, ``<<= k``, ``>>= k``)."""
    if not step.is_const():
        return None
    v = step.const_value()
    if how == "*" and v >= 2:
        return float(v), True
    if how == "/" and v >= 2:
        return float(v), False
    if how == "<<" and 1 <= v <= 30:
        return float(2 ** int(v)), True
    if how == ">>" and 1 <= v <= 30:
        return float(2 ** int(v)), False
    return None


def integrate_geo(delta: Poly, g: Atom, start: Poly, factor: Fraction, trips: Poly) -> Poly:
    """Counts ``delta`` accumulated in a geometric loop body (weighted by ``trips`` times a
    per-iteration weight in ``g``) -> the exact sum over the iterations."""
    with_g = Poly({m: c for m, c in delta.terms.items() if any(_has_atom(Poly.atom(x), g) for x, _ in m)})
    if with_g.is_zero():
        return delta
    rest = delta - with_g
    return rest + p_div(p_itersum(with_g, g.name, start, factor, trips), trips)


def _has_atom(p: Poly, a: Atom) -> bool:
    return any(x == a for x in p.all_atoms())

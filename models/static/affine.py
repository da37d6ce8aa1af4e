"""Affine analysis of index polynomials: lane strides (discrete derivatives) and averages.

Index expressions are polynomials in ``gid{d}``, ``lid{d}``, ``grp{d}``, loop counters, loaded
values and scalars. The lane stride along local dimension ``d`` is the discrete derivative of the
index with respect to a one-step move of the work-item along ``d`` (``gid_d`` and ``lid_d`` move
by 1, group ids and everything uniform by 0; ``x / c`` and ``x % c`` use the common case of no
bucket change: 0 and ``dx``; ``min``/``max``/``?:`` use the side that varies). A loaded value
whose own index varies between lanes has an unknown derivative (None).

:func:`average` replaces work-item ids and loop counters by their means (``gid0`` ->
``(gsize0-1)/2``, the counter of a loop with ``T`` trips -> ``(T-1)/2``).
"""

from __future__ import annotations

from fractions import Fraction

from kernelcast.models.static.expr import GRP, ITER, WI, Atom, Poly, p_div
from kernelcast.models.static.values import HALF, ONE, ZERO


def is_zero(p: Poly | None) -> bool:
    return p is not None and p.is_zero()


def deriv(p: Poly, dim: int) -> Poly | None:
    """Lane stride of ``p`` along local dimension ``dim`` (module docstring), or None."""
    if WI not in p.deps:
        return ZERO
    out = ZERO
    for mono, c in p.terms.items():
        for i, (a, pw) in enumerate(mono):
            da = _deriv_atom(a, dim)
            if da is None:
                return None
            if da.is_zero():
                continue
            rest = Poly({mono[:i] + ((a, pw - 1),) + mono[i + 1:] if pw > 1 else mono[:i] + mono[i + 1:]: c * pw})
            out = out + rest * da
    return out


def _deriv_atom(a: Atom, dim: int) -> Poly | None:
    if WI not in a.deps:
        return ZERO
    if a.kind == "wi":
        return ONE if (a.dim == dim and a.name[:3] in ("gid", "lid")) else ZERO
    if a.kind in ("var", "data", "geo"):
        if a.deriv is None:
            return None
        return a.deriv[dim] if dim < len(a.deriv) else ZERO
    if a.kind != "fn":
        return None
    f = a.fn
    if f in ("floordiv", "mod", "div"):
        num, den = a.args
        if WI in den.deps:
            return None
        dn = deriv(num, dim)
        if dn is None:
            return None
        if dn.is_zero():
            return ZERO
        if f == "div":
            return p_div(dn, den)
        if f == "mod":
            return dn
        if dn.is_const() and den.is_const() and den.const_value() != 0:
            q = dn.const_value() / den.const_value()
            return Poly.const(q) if q.denominator == 1 else ZERO
        return ZERO
    if f in ("max", "min", "sel"):
        ds = [deriv(x, dim) for x in a.args]
        if any(x is None for x in ds):
            return None
        nz = [x for x in ds if x is not None and not x.is_zero()]
        if not nz:
            return ZERO
        if all(x == nz[0] for x in nz):
            return nz[0]
        return None
    if f in ("abs", "floor", "ceil"):
        # floor(x * r) advances by r on average between adjacent lanes
        return deriv(a.args[0], dim)
    if f == "bit" and a.name in ("bit|", "bit^") and len(a.args) == 2:
        # x | y with disjoint bits and x ^ uniform: the varying side's stride (common index idioms)
        ds = [deriv(x, dim) for x in a.args]
        if any(x is None for x in ds):
            return None
        nz = [x for x in ds if x is not None and not x.is_zero()]
        if a.name == "bit^" and len(nz) > 1:
            return None
        return nz[0] + nz[1] if len(nz) == 2 else (nz[0] if nz else ZERO)
    return None


def average(p: Poly | None, keep_geo: bool = False) -> Poly | None:
    """``p`` with work-item ids and loop counters replaced by their means; None if ``p``
    depends on loaded data or unknown values. ``keep_geo`` keeps the variables of halving/doubling
    loops (they are summed exactly over their iterations when the loop is left)."""
    if p is None:
        return None

    def rep(a: Atom) -> Poly | None:
        if a.kind == "sym":
            return Poly.atom(a)
        if a.kind == "geo" and keep_geo:
            return Poly.atom(a)
        if a.kind in ("wi", "iter", "geo"):
            return average(a.avg, keep_geo) if a.avg is not None else None
        if a.kind == "fn":
            if a.fn == "mod" and a.args[0].deps & {WI, GRP, ITER} and not a.args[1].deps & {WI, GRP, ITER}:
                # x % c over many equally likely x: the remainders are uniform on 0..c-1
                m = average(a.args[1], keep_geo)
                return None if m is None else (m - 1) * Fraction(1, 2)
            if a.fn == "sel":
                # c ? x : y with an unknown condition: the mean of both sides
                x, y = average(a.args[0], keep_geo), average(a.args[1], keep_geo)
                return None if x is None or y is None else (x + y) * HALF
            return Poly.atom(a)
        return None

    return p.subst(rep)


def printable(p: Poly | None) -> Poly | None:
    """``p`` if it can be printed as a count (no loop or work-item variables left), else None."""
    return p if p is not None and p.printable else None


def geo_printable(p: Poly | None) -> Poly | None:
    """Printable once the variables of enclosing halving/doubling loops are summed out."""
    return p if p is not None and p.printable_in(None) else None


_WI_CACHE: dict[tuple[str, int], Atom] = {}


def wi_atom(kind: str, dim: int) -> Atom:
    """``gid{d}`` / ``lid{d}`` / ``grp{d}`` with their mean and range."""
    a = _WI_CACHE.get((kind, dim))
    if a is None:
        size = {"gid": "gsize", "lid": "lsize", "grp": "ngroups"}[kind]
        rng = Poly.symbol(f"{size}{dim}", integer=True)
        a = Atom(f"w:{kind}{dim}", "wi", f"{kind}{dim}", dim=dim,
                 deps=frozenset({WI}) if kind != "grp" else frozenset({GRP}),
                 avg=(rng - 1) * Fraction(1, 2), rng=rng)
        _WI_CACHE[(kind, dim)] = a
    return a

"""Branch fractions: which share of work-items (and of warps) takes each side of a condition.

Conditions comparing a work-item id, group id, loop counter or ``id % c`` with a uniform value
get exact fractions (``gid < n`` -> ``min(1, n/gsize0)``, the row-major linear index of a 2D or
3D launch ``y * get_global_size(0) + x < n`` -> ``min(1, n/(gsize0*gsize1))``, ``lid == 0`` ->
``1/lsize0`` per item and ``min(1, warp/lsize0)`` per warp; ``&&`` multiplies, ``||`` adds, ``!`` swaps). Other
conditions: a branch without ``else`` counts fully (it is mostly a guard), ``if/else`` counts
each side 1/2 per item, and both sides fully per warp when the condition depends on work-item
ids or loaded data.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kernelcast.models.static.affine import average, geo_printable
from kernelcast.models.static.expr import (
    DATA,
    GRP,
    ITER,
    VAR,
    WI,
    Atom,
    Poly,
    fn_atom,
    p_clamp01,
    p_div,
    p_max,
    p_min,
    p_unary,
)
from kernelcast.models.static.values import HALF, ONE, WARP, ZERO, Val


@dataclass
class Frac:
    """Fractions of items / warps taking the then and else sides of a condition."""

    it: Poly
    ie: Poly
    wt: Poly
    we: Poly
    known: bool = True

    def swap(self) -> Frac:
        return Frac(self.ie, self.it, self.we, self.wt, self.known)


def branch_fraction(cv: Val, has_else: bool) -> Frac:
    """The fractions of a branch on the condition value ``cv`` (module docstring)."""
    f = _poly_fraction(cv.poly)
    if f is not None:
        return f
    p = HALF if has_else else ONE
    if WI in cv.deps or DATA in cv.deps:
        return Frac(p, p, ONE, ONE, known=False)
    return Frac(p, p, p, p, known=False)


def _poly_fraction(p: Poly | None) -> Frac | None:
    a = fn_atom(p)
    if a is None:
        return None
    if a.fn == "not":
        f = _poly_fraction(a.args[0])
        return f.swap() if f else None
    if a.fn in ("and", "or"):
        f1, f2 = _poly_fraction(a.args[0]), _poly_fraction(a.args[1])
        if f1 is None and f2 is None:
            return None
        if a.fn == "and":
            f1 = f1 or Frac(ONE, ZERO, ONE, ZERO)
            f2 = f2 or Frac(ONE, ZERO, ONE, ZERO)
            it = f1.it * f2.it
            wt = f1.wt * f2.wt
            return Frac(it, ONE - it, wt, p_min(ONE, f1.we + f2.we))
        f1 = f1 or Frac(ZERO, ONE, ZERO, ONE)
        f2 = f2 or Frac(ZERO, ONE, ZERO, ONE)
        ie = f1.ie * f2.ie
        we = f1.we * f2.we
        return Frac(ONE - ie, ie, p_min(ONE, f1.wt + f2.wt), we)
    if a.fn == "cmp":
        return _compare_fraction(a.name[3:], a.args[0], a.args[1])
    return None


def _compare_fraction(op: str, lhs: Poly, rhs: Poly) -> Frac | None:
    d = lhs - rhs
    lin = _linear_index(d)
    if lin is not None:
        f = _affine_fraction(op, *lin, lane=True)
        if f is not None:
            return f
    f = _two_level_fraction(op, d)
    if f is not None:
        return f
    for x in sorted(d.atoms(), key=_range_preference):
        rng, lane = _range_of(x)
        if rng is None:
            continue
        coef = d.coefficient(x)
        if coef is None or coef.is_zero() or coef.deps & {WI, DATA, VAR}:
            continue
        f = _affine_fraction(op, coef, rng, d - coef * Poly.atom(x), lane)
        if f is not None:
            return f
    return None


def _linear_index(d: Poly) -> tuple[Poly, Poly, Poly] | None:
    """``d = c * (x0 + n0 * x1 [+ n0 * n1 * x2]) + u`` for the global ids ``x_i`` of a 2D or 3D
    launch (``n_i`` their ranges: the row-major linear index ``y * get_global_size(0) + x``) and a
    constant ``c``, with no other work-item id in ``u``: ``(c, n0 * n1 [* n2], u)``. The linear
    index takes its ``n0 * n1`` values alike, so ``lin < n`` holds for ``n / (n0 * n1)`` of the
    work-items; taken one id at a time, the other at its mean, it held for none."""
    ids = {a.dim: a for a in d.atoms() if a.kind == "wi" and a.name.startswith("gid")}
    x0 = ids.get(0)
    if x0 is None or 1 not in ids or x0.rng is None:
        return None
    c = d.coefficient(x0)
    if c is None or not c.is_const() or c.is_zero():
        return None
    rest, stride, dims = d - c * Poly.atom(x0), x0.rng, 1
    for dim in (1, 2):
        x = ids.get(dim)
        if x is None or x.rng is None:
            break
        cx = rest.coefficient(x)
        if cx is None or cx != c * stride:
            return None
        rest, stride, dims = rest - cx * Poly.atom(x), stride * x.rng, dims + 1
    if dims < 2 or WI in rest.deps or DATA in rest.deps or VAR in rest.deps:
        return None
    return c, stride, rest


def _two_level_fraction(op: str, d: Poly) -> Frac | None:
    """The fractions of ``cl * lid_k + cg * grp_k + u  op  0`` with the local and the group id of
    one dimension both in the condition, with positive coefficients: ``cg = cl * lsize_k`` is the
    global id (exact); any other ``cg`` (a tiled index ``grp * lsize * tile + lid``, or a group
    stride written as a literal, ``blockIdx.x * 64 * 4 + threadIdx.x * 4`` with Kernel Tuner's
    ``-Dblock_size_x=64``, which the analysis cannot tie to ``lsize_k``): the share of the
    work-items for which the condition holds is counted group by group (:func:`_groups_below`),
    ``u`` at its mean. Taking one id at a time with the other at its mean decides a guard that
    cuts across the work-groups (``dm < n`` true for the first groups only) for all work-items
    alike: 0 or 1 instead of the share of groups it holds for."""
    if op not in ("<", "<=", ">", ">="):
        return None
    ids = {(a.name[:3], a.dim): a for a in d.atoms() if a.kind == "wi" and a.name[:3] in ("lid", "grp")}
    for dim in range(3):
        lid, grp = ids.get(("lid", dim)), ids.get(("grp", dim))
        if lid is None or grp is None or lid.rng is None or grp.rng is None:
            continue
        cl, cg = d.coefficient(lid), d.coefficient(grp)
        if cl is None or cg is None or cl.is_zero() or cg.is_zero():
            continue
        if (cl.deps | cg.deps) & {WI, DATA, VAR, GRP}:
            continue
        if (cl.is_const() and cl.const_value() < 0) or (cg.is_const() and cg.const_value() < 0):
            continue
        u = d - cl * Poly.atom(lid) - cg * Poly.atom(grp)
        if (cg - cl * lid.rng).is_zero():
            # cl * (grp * lsize + lid): the global id, one id over all work-items (exact)
            return _affine_fraction(op, cl, lid.rng * grp.rng, u, lane=True)
        # otherwise a tiled index (``grp * lsize * tile + lid``) or an index whose group stride is a
        # literal (a Kernel Tuner ``block_size_x`` define), counted group by group; the counters of
        # loops from 0 in it (a tile loop's ``tj * block_size``) spread each group's values as its
        # lanes do, not at their mean
        spread = ZERO
        for x in sorted(u.atoms(), key=lambda a: a.key):
            if x.kind != "iter" or x.rng is None or x.avg is None or not (x.avg - (x.rng - 1) * HALF).is_zero():
                continue
            c = u.coefficient(x)
            if c is None or c.is_zero() or c.deps & {WI, DATA, VAR, GRP, ITER} \
                    or (c.is_const() and c.const_value() < 0):
                continue
            spread = spread + c * (x.rng - 1)
            u = u - c * Poly.atom(x)
        ua = geo_printable(average(u, keep_geo=True))
        cla, cga = geo_printable(average(cl, keep_geo=True)), geo_printable(average(cg, keep_geo=True))
        spa = geo_printable(average(spread, keep_geo=True))
        if ua is None or cla is None or cga is None or spa is None:
            return None
        # the sum below ``t`` (``<``), or at most ``t`` (``<=``: below floor(t) + 1 for integers)
        t = -ua if op in ("<", ">=") else p_unary("floor", -ua) + 1
        # a group's values: its lanes ``cl`` apart, or every integer of its span with counters in it
        step = cla if spread.is_zero() else ONE
        cdf = _groups_below(t, step, cla * lid.rng + spa, cga, grp.rng)
        it = cdf if op in ("<", "<=") else ONE - cdf
        return Frac(it, ONE - it, it, ONE - it)
    return None


def _groups_below(t: Poly, step: Poly, span: Poly, cg: Poly, ngroups: Poly) -> Poly:
    """The share of work-items with ``w + cg * grp < t``, each group's ``w`` taking the values
    ``0, step, ..., span - step`` alike: the groups whose every value is below ``t`` (``cg * k +
    span - step < t``), plus the share of the next group's values below it. Exact where a group's
    values span no more than its stride (``span <= cg``: a tiled index, or the global id with the
    block size a literal); where they span more, the groups after the next one that also hold some
    values below ``t`` are not counted."""
    full = p_min(ngroups, p_max(ZERO, p_unary("ceil", p_div(t - span + step, cg))))
    next_share = p_clamp01(p_div(p_unary("ceil", p_div(t - cg * full, step)) * step, span))
    return p_clamp01(p_div(full + next_share * p_min(ONE, ngroups - full), ngroups))


def _affine_fraction(op: str, coef: Poly, rng: Poly, u: Poly, lane: bool) -> Frac | None:
    """The fractions of ``coef * X + u  op  0`` for ``X`` taking ``rng`` values alike (``lane``:
    varying across the lanes of a warp), ``u`` at its mean."""
    ua = geo_printable(average(u, keep_geo=True))
    n = geo_printable(average(rng, keep_geo=True))
    ca = geo_printable(average(coef, keep_geo=True))
    if ua is None or n is None or ca is None:
        return None
    # a symbolic coefficient (2*s in "2*s*lid + s < n") is taken as positive
    a = coef.const_value() if coef.is_const() else Fraction(1)
    t = -ua * (1 / a) if coef.is_const() else p_div(-ua, ca)
    o = op
    if a < 0:
        o = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}[op]
    # X takes the integers 0..n-1: P(X < t) = ceil(t)/n, P(X <= t) = (floor(t) + 1)/n
    if o == "<":
        it = p_clamp01(p_div(p_unary("ceil", t), n))
    elif o == "<=":
        it = p_clamp01(p_div(p_unary("floor", t) + 1, n))
    elif o == ">":
        it = ONE - p_clamp01(p_div(p_unary("floor", t) + 1, n))
    elif o == ">=":
        it = ONE - p_clamp01(p_div(p_unary("ceil", t), n))
    elif o in ("==", "!="):
        it = p_min(ONE, p_div(ONE, n))
        wt = p_min(ONE, p_div(WARP, n)) if lane else it
        we = ONE if lane else ONE - it
        f = Frac(it, ONE - it, wt, we)
        return f if o == "==" else f.swap()
    else:
        return None
    return Frac(it, ONE - it, it, ONE - it)


def _range_of(a: Atom) -> tuple[Poly | None, bool]:
    """Number of equally likely values of an atom and whether it varies across lanes."""
    if a.kind == "wi":
        return a.rng, a.name.startswith(("gid", "lid"))
    if a.kind == "iter":
        return a.rng, False
    if a.kind == "fn" and a.fn == "mod" and (WI in a.args[0].deps or GRP in a.args[0].deps):
        m = a.args[1]
        if WI not in m.deps and DATA not in m.deps and VAR not in m.deps:
            return m, WI in a.args[0].deps
    return None, False


def _range_preference(a: Atom) -> tuple[int, str]:
    """Order in which branch-fraction analysis tries atoms: lane ids, id % c, group ids, counters."""
    if a.kind == "wi":
        return (0 if a.name.startswith(("gid", "lid")) else 2), a.key
    if a.kind == "fn":
        return 1, a.key
    return 3, a.key

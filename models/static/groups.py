"""Working work-groups: the share of a launch's work-groups in which some work-item does the
kernel's work.

A kernel that tiles several elements per work-item (``x = grp * lsize * tile + lid``) but is
launched over a grid sized for one element per work-item (``ceil(n / lsize)`` groups, Kernel
Tuner's default grid divisors) guards its work with ``x < n``: only about ``1 / tile`` of its
work-groups pass the guard, the others exit at once. Per work-item averages (the branch
fractions of :mod:`.branches`) get the work right but cannot tell how it is spread over the
work-groups, which is what the waves of a GPU are counted in.

The rule, per *work site* (a load, store or atomic outside private memory, and a loop without
such an access inside it; :meth:`WorkGroups.add_site`): each comparison known true around it
(:mod:`.guards`) that is affine in one group id ``grp_d`` (``gid_d`` counts as ``grp_d * lsize_d +
lid_d``) is taken with its local ids and loop counters at the value that makes it easiest to hold
(0 for a positive coefficient on the side that must be small, the last value for a negative one),
and the group ids ``0 .. ngroups_d - 1`` for which it can then hold are counted: a prefix of them for
an upper bound, a suffix for a lower bound; the site's count in dimension ``d`` is the overlap of
its tightest prefix and its tightest suffix. A comparison of another form (two group ids, loaded
data, ``==``, a coefficient of unknown sign) tells nothing: every group id. The kernel's share in
dimension ``d`` is the largest share of its work sites (at least one work site passes in those
groups), 1 where it has none. ``if (gid < n)`` over a grid of ``ceil(n / lsize)`` groups gives 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernelcast.models.static.affine import geo_printable, wi_atom
from kernelcast.models.static.expr import DATA, GRP, ITER, VAR, WI, Atom, Poly, p_div, p_max, p_min, p_unary
from kernelcast.models.static.guards import Fact
from kernelcast.models.static.values import ONE, ZERO

#: the comparison ``e op 0`` after moving everything to the left, as an upper bound on ``e``
_UPPER = {"<": ("<", 1), "<=": ("<=", 1), ">": ("<", -1), ">=": ("<=", -1)}


def _sign(p: Poly) -> int:
    """+1 / -1 where every term of ``p`` has that sign over symbols (sizes and scalar arguments,
    taken as positive), 0 where it cannot tell."""
    if p.is_zero() or any(a.kind != "sym" for a in p.atoms()):
        return 0
    signs = {1 if c > 0 else -1 for c in p.terms.values()}
    return signs.pop() if len(signs) == 1 else 0


def _easiest(e: Poly) -> Poly | None:
    """``e`` with every local id and loop counter at the value that makes ``e`` smallest (and its
    global ids split into group and local ids); None where a coefficient's sign is unknown."""
    for a in sorted(x for x in e.atoms() if x.kind == "wi" and x.name.startswith("gid")):
        d = a.dim
        split = Poly.atom(wi_atom("grp", d)) * Poly.symbol(f"lsize{d}", integer=True) + Poly.atom(wi_atom("lid", d))
        got = e.subst(lambda x, a=a, split=split: split if x == a else Poly.atom(x))
        if got is None:
            return None
        e = got
    for a in sorted(x for x in e.atoms() if (x.kind == "wi" and x.name.startswith("lid")) or x.kind == "iter"):
        c = e.coefficient(a)
        if c is None:
            return None
        s = _sign(c)
        if s == 0 or a.rng is None:
            return None
        at = ZERO if s > 0 else a.rng - ONE
        got = e.subst(lambda x, a=a, at=at: at if x == a else Poly.atom(x))
        if got is None:
            return None
        e = got
    return e


def _bound(fact: Fact) -> tuple[int, bool, Poly] | None:
    """The dimension a comparison bounds the group id in, whether it bounds it from above (the
    first group ids pass: a prefix), and the number of group ids that can pass; None where it
    tells nothing about the group ids."""
    op, lhs, rhs = fact
    if op not in _UPPER:
        return None
    strict, sign = _UPPER[op]
    e = _easiest((lhs - rhs) * sign)        # e < 0 (strict) or e <= 0
    if e is None:
        return None
    grps = [a for a in e.atoms() if a.kind == "wi"]
    if len(grps) != 1 or not grps[0].name.startswith("grp") or grps[0].rng is None:
        return None
    g: Atom = grps[0]
    cg = e.coefficient(g)
    if cg is None:
        return None
    s = _sign(cg) if not cg.is_const() else (1 if cg.const_value() > 0 else -1 if cg.const_value() < 0 else 0)
    u = e - cg * Poly.atom(g)
    if s == 0 or u.deps & {WI, DATA, VAR, ITER, GRP} or geo_printable(u) is None or geo_printable(cg) is None:
        return None
    n = g.rng
    t = p_div(-u, cg)                       # cg * grp + u < 0  <=>  grp < t (cg > 0), grp > t (cg < 0)
    if s > 0:
        count = p_unary("ceil", t) if strict == "<" else p_unary("floor", t) + ONE
    else:
        count = n - (p_unary("floor", t) + ONE if strict == "<" else p_unary("ceil", t))
    return g.dim, s > 0, p_max(ZERO, count)


def site_shares(guards: Sequence[Fact]) -> tuple[Poly, Poly, Poly]:
    """The share of the group ids of each dimension for which the comparisons ``guards`` (all
    known true at one work site) can hold (module docstring)."""
    prefix: dict[int, list[Poly]] = {}
    suffix: dict[int, list[Poly]] = {}
    for f in guards:
        b = _bound(f)
        if b is None:
            continue
        dim, upper, count = b
        (prefix if upper else suffix).setdefault(dim, []).append(count)
    out = []
    for d in range(3):
        if d not in prefix and d not in suffix:
            out.append(ONE)
            continue
        n = Poly.symbol(f"ngroups{d}", integer=True)
        pre = p_min(n, *prefix[d]) if d in prefix else n
        suf = p_min(n, *suffix[d]) if d in suffix else n
        count = pre if d not in suffix else suf if d not in prefix else p_max(ZERO, pre + suf - n)
        out.append(p_div(count, n))
    return out[0], out[1], out[2]


class WorkGroups:
    """The work sites of a kernel walked so far and the group shares they pass in."""

    def __init__(self) -> None:
        self._seen: dict[tuple[tuple[str, str, str], ...], tuple[Poly, Poly, Poly]] = {}

    def add_site(self, guards: Sequence[Fact]) -> None:
        """A work site under the comparisons ``guards``."""
        key = tuple((op, lhs.key(), rhs.key()) for op, lhs, rhs in guards)
        if key not in self._seen:
            self._seen[key] = site_shares(guards)

    def shares(self) -> list[str]:
        """The share of each dimension's group ids in which some work site passes (expressions
        over the sizes and scalar arguments; "1" where every group does work)."""
        out = []
        for d in range(3):
            per_site = {s[d].key(): s[d] for s in self._seen.values()}
            if not per_site or any(p == ONE for p in per_site.values()):
                out.append("1")
                continue
            p = p_max(*per_site.values())
            out.append(p.to_str() if p.printable else "1")
        return out


__all__ = ["WorkGroups", "site_shares"]

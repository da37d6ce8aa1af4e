"""Values the source walker computes: polynomials with their dependencies, pointers, memory references.

A :class:`Val` is what an expression evaluates to: a polynomial (:mod:`models.static.expr`) when
the analysis can follow it, its dependency tags (``WI``, ``GRP``, ``ITER``, ``DATA``, ``VAR``)
and, for pointers, the buffer it points into (:class:`Ptr`). A :class:`MemRef` is one memory
access before it is recorded as an :class:`~models.static.features.Access`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static.cursors import type_bytes
from kernelcast.models.static.expr import MAX_TERMS, VAR, WI, Atom, Poly

ZERO = Poly()
ONE = Poly.const(1)
HALF = Poly.const(Fraction(1, 2))
AVG_TRIP = Poly.symbol("avg_trip")
WARP = Poly.symbol("warp", integer=True)


@dataclass
class Ptr:
    """A pointer value: ``base`` (buffer/array name) + ``offset`` leaf elements."""

    base: str
    space: str
    offset: Poly | None
    leaf_bytes: int
    deps: frozenset[str] = frozenset()


@dataclass
class Val:
    poly: Poly | None
    deps: frozenset[str] = frozenset()
    ptr: Ptr | None = None

    @staticmethod
    def of(p: Poly | None, extra: frozenset[str] = frozenset()) -> Val:
        if p is not None and len(p.terms) > MAX_TERMS:
            return Val(None, p.deps | extra)
        return Val(p, (p.deps if p is not None else frozenset()) | extra)


UNKNOWN = Val(None)


@dataclass
class MemRef:
    base: str
    space: str
    index: Poly | None
    deps: frozenset[str]
    elem_bytes: int
    unit_bytes: int
    text: str
    signed32: bool = False   # a subscript of the buffer itself whose index is a signed 32-bit integer


def same_value(a: Val, b: Val) -> bool:
    """Whether two values are known to be equal (same polynomial or same pointer)."""
    if a.ptr is not None or b.ptr is not None:
        if a.ptr is None or b.ptr is None:
            return False
        return (a.ptr.base == b.ptr.base and a.ptr.space == b.ptr.space and
                (a.ptr.offset == b.ptr.offset))
    if a.poly is None or b.poly is None:
        return a.poly is None and b.poly is None and a.deps == b.deps
    return a.poly == b.poly


_UNKNOWN_IDS = itertools.count()
#: the serial counter of the walk in progress (:meth:`models.static.walk_base.WalkerBase.serial`):
#: an unknown value's atom is numbered in the order the walk made it, as the walker's own atoms
#: are, because loop-invariant code motion reads those numbers (``newest_serial``: a value made
#: after a loop began is not hoisted out of it). A process-wide count here made the same kernel's
#: analysis depend on what was analysed before it: ``any(g > 2)`` on a value ``g`` made inside two
#: loops was hoisted out of both in a fresh process and out of the inner one after another
#: analysis (synth_gather_000118: its integer-bit count 64x apart, and evaluate's tabular figures
#: depended on whether the analytical model was evaluated beside it).
WALK_SERIALS: ContextVar[Callable[[], int] | None] = ContextVar("walk_serials", default=None)


def poly_of(v: Val) -> Poly:
    """The polynomial of a value; a fresh unknown atom carrying its dependencies if it has none,
    numbered by the walk in progress (:data:`WALK_SERIALS`) when there is one."""
    if v.poly is not None:
        return v.poly
    serials = WALK_SERIALS.get()
    n = serials() if serials is not None else next(_UNKNOWN_IDS)
    return Poly.atom(Atom(f"u:{n}", "var", "?", deps=v.deps | {VAR}, deriv=None if WI in v.deps else (ZERO,) * 3))


def retype_ptr(p: Ptr, t: ci.Type) -> Ptr:
    """``p`` cast to the pointer type ``t``: the offset in units of the new pointee."""
    pointee = t.get_canonical().get_pointee()
    nb = type_bytes(pointee)
    if nb <= 0 or nb == p.leaf_bytes:
        return p
    off = None if p.offset is None else p.offset * Fraction(p.leaf_bytes, nb)
    return Ptr(p.base, p.space, off, nb, p.deps)

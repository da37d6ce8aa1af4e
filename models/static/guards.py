"""What a condition tells about the code it guards: the comparisons that hold inside an ``if``, in
an arm of ``?:`` and after ``if (...) return;``, and the one use the analysis makes of them.

A condition value is the walker's polynomial of it (:mod:`models.static.walk_expr`: a comparison is
the function atom ``cmp<op>(lhs, rhs)``, ``&&`` / ``||`` / ``!`` the atoms ``and``, ``or``,
``not``). :func:`facts` takes it apart into the comparisons known true where it holds (both sides of
``&&``) or where it fails (both sides of ``||``, negated); anything else tells nothing.

:func:`shift_guarded`: whether a guard around an access at a signed 32-bit work-item id plus a
constant (``int i = get_global_id(0); ... in[i + 1]``) bounds that very index: for ``i - c`` a lower
bound ``i >= c`` or tighter (``i > 0`` for ``in[i - 1]``), for ``i + c`` a strict upper bound on
``i + c`` itself (``i + c < n`` or ``n > i + c``). A fact about the source; what a vectorizer makes
of it (a masked vector access instead of a gather) is the device class's:
:func:`models.analytical.cpu_vectorizer.shifted_int_index`, and ``docs/analytical-model.md`` has
the compiled-code probe behind it.
"""

from __future__ import annotations

import math

from kernelcast.models.static.expr import Poly, fn_atom

#: a comparison known to hold: ``(op, lhs, rhs)`` for ``lhs op rhs``
Fact = tuple[str, Poly, Poly]

_NEGATED = {"<": ">=", ">": "<=", "<=": ">", ">=": "<", "==": "!=", "!=": "=="}
_MIRRORED = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


def facts(cond: Poly | None, holds: bool = True) -> tuple[Fact, ...]:
    """The comparisons known true where the condition ``cond`` holds (``holds``) or fails."""
    a = fn_atom(cond)
    if a is None:
        return ()
    if a.fn == "cmp" and len(a.args) == 2:
        op = a.name[len("cmp"):]
        if op not in _NEGATED:
            return ()
        return ((op if holds else _NEGATED[op], a.args[0], a.args[1]),)
    if a.fn == "not" and len(a.args) == 1:
        return facts(a.args[0], not holds)
    if len(a.args) == 2 and ((a.fn == "and" and holds) or (a.fn == "or" and not holds)):
        return facts(a.args[0], holds) + facts(a.args[1], holds)
    return ()


def _gid0(index: Poly) -> Poly | None:
    atom = next((a for a in index.atoms() if a.kind == "wi" and a.name == "gid0"), None)
    return Poly.atom(atom) if atom is not None else None


def shift_guarded(index: Poly | None, known: tuple[Fact, ...] | list[Fact]) -> bool:
    """Whether the comparisons ``known`` around an access at ``index`` = the global id plus a
    nonzero integer constant bound it so that the vectorizer proves the lanes' addresses
    consecutive (module docstring)."""
    if index is None or not known:
        return False
    gid = _gid0(index)
    if gid is None:
        return False
    shift = index - gid
    if not shift.is_const() or shift.const_value() == 0 or shift.const_value().denominator != 1:
        return False
    c = shift.const_value()
    for op, lhs, rhs in known:
        for o, lo, hi in ((op, lhs, rhs), (_MIRRORED[op], rhs, lhs)):
            if c > 0 and o == "<" and lo == index:
                return True
            if c < 0 and o in (">=", ">"):
                rest = lo - hi - gid           # gid + rest (o) 0
                if rest.is_const():
                    bound = -rest.const_value()
                    low = math.floor(bound) + 1 if o == ">" else math.ceil(bound)
                    if low >= -c:
                        return True
    return False

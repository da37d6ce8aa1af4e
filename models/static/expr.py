"""Small symbolic algebra for static features: polynomials whose strings the evaluator computes.

:class:`Poly` - a polynomial with rational coefficients over :class:`Atom` s. Atoms are symbols
(scalar arguments, ``gsize0``...), work-item ids (``gid0``, ``lid0``, ``grp0``), loop iteration
counters, loaded values, unknown variables, and *function atoms* (``max``, ``min``, floor
division, modulo, ``log2``...) whose arguments are again polynomials. The source analysis builds
index expressions and per-work-item counts with it; polynomials print to the expression strings
stored in the features, which :func:`kernelcast.expr.compile_expr` evaluates over numpy arrays
(its grammar: numbers, names, ``+ - * / // %``, unary minus, ``min max log2 ceil floor abs`` and
the bounded special form ``itersum``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction

# ----------------------------------------------------------------------------------------------
# atoms
# ----------------------------------------------------------------------------------------------

#: functions the evaluator understands (printable function atoms)
EVAL_FUNCS = frozenset({"max", "min", "floordiv", "mod", "div", "log2", "ceil", "floor", "abs", "itersum"})

#: dependency tags an atom can carry
WI = "wi"          # varies between work-items of a work-group (get_global_id/get_local_id)
GRP = "grp"        # varies between work-groups only (get_group_id)
DATA = "data"      # depends on a value loaded from memory
ITER = "iter"      # varies between loop iterations
VAR = "var"        # unknown value (assigned in a way the analysis does not follow)


class Atom:
    """An indivisible factor of a monomial. Equality and hashing go by ``key``."""

    __slots__ = ("key", "kind", "name", "dim", "fn", "args", "deps", "avg", "deriv", "rng", "extra", "hash_")

    def __init__(self, key: str, kind: str, name: str, *, dim: int = -1, fn: str = "",
                 args: tuple[Poly, ...] = (), deps: frozenset[str] = frozenset(),
                 avg: Poly | None = None, deriv: tuple[Poly | None, ...] | None = None,
                 rng: Poly | None = None, extra: frozenset[str] = frozenset()) -> None:
        self.key = key
        self.kind = kind          # sym / wi / iter / data / var / fn
        self.name = name          # printed name
        self.dim = dim            # work-item dimension for wi atoms
        self.fn = fn              # function name for fn atoms
        self.args = args
        self.deps = deps
        self.avg = avg            # average value over work-items / iterations (wi, iter atoms)
        self.deriv = deriv        # lane derivative per local dim (var / data atoms); None = unknown
        self.rng = rng            # number of distinct equally likely values (wi / iter atoms)
        self.extra = extra        # fn atoms: dependencies beyond those of the arguments
        self.hash_ = hash(key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Atom) and other.key == self.key

    def __hash__(self) -> int:
        return self.hash_

    def __lt__(self, other: Atom) -> bool:
        return self.key < other.key

    def __repr__(self) -> str:
        return f"Atom({self.key})"

    @property
    def printable(self) -> bool:
        """Whether the evaluator can compute this atom from an environment of symbols."""
        return self.printable_in(frozenset())

    def printable_in(self, bound: frozenset[str] | None) -> bool:
        """Printable when the geometric-loop variables in ``bound`` are bound (None: all are)."""
        if self.kind == "sym":
            return True
        if self.kind == "geo":
            return bound is None or self.name in bound
        if self.kind == "fn":
            if self.fn == "itersum":
                inner = None if bound is None else bound | {self.name[len("itersum"):]}
                return self.args[0].printable_in(inner) and all(a.printable_in(bound) for a in self.args[1:])
            return self.fn in EVAL_FUNCS and all(a.printable_in(bound) for a in self.args)
        return False

    def text(self) -> str:
        if self.kind != "fn":
            return self.name
        a = [x.to_str() for x in self.args]
        if self.fn in ("max", "min"):
            return f"{self.fn}({', '.join(a)})"
        if self.fn in ("log2", "ceil", "floor", "abs"):
            return f"{self.fn}({a[0]})"
        if self.fn == "itersum":
            return f"itersum({a[0]}, {self.name[len('itersum'):]}, {a[1]}, {a[2]}, {a[3]})"
        if self.fn == "floordiv":
            return f"{_paren(self.args[0])}//{_paren(self.args[1])}"
        if self.fn == "mod":
            return f"{_paren(self.args[0])}%{_paren(self.args[1])}"
        if self.fn == "div":
            return f"{_paren(self.args[0])}/{_paren(self.args[1])}"
        return f"{self.name}({', '.join(a)})"


def _paren(p: Poly) -> str:
    s = p.to_str()
    if p.is_const():
        v = p.const_value()
        return s if v >= 0 and v.denominator == 1 else f"({s})"
    if len(p.terms) == 1:
        ((mono, c),) = p.terms.items()
        if c == 1 and len(mono) == 1 and mono[0][1] == 1:
            return s
    return f"({s})"


#: the ``extra`` tag of symbols that only take integer values (sizes, integer arguments)
INTEGER = "int"


def sym(name: str, integer: bool = False) -> Atom:
    return Atom("s:" + name, "sym", name, extra=frozenset({INTEGER}) if integer else frozenset())


# ----------------------------------------------------------------------------------------------
# polynomials
# ----------------------------------------------------------------------------------------------

Monomial = tuple[tuple[Atom, int], ...]

#: polynomials with more terms than this become unknown (keeps pathological sources cheap)
MAX_TERMS = 48


class Poly:
    """A polynomial: ``{monomial: coefficient}`` with ``Fraction`` coefficients. Immutable."""

    __slots__ = ("terms", "_str", "_deps")

    def __init__(self, terms: dict[Monomial, Fraction] | None = None) -> None:
        self.terms: dict[Monomial, Fraction] = {m: c for m, c in (terms or {}).items() if c != 0}
        self._str: str | None = None
        self._deps: frozenset[str] | None = None

    # construction -----------------------------------------------------------------------------
    @staticmethod
    def const(c: int | float | Fraction) -> Poly:
        if isinstance(c, float):
            c = Fraction(c).limit_denominator(1 << 20) if math.isfinite(c) else Fraction(0)
        return Poly({(): Fraction(c)})

    @staticmethod
    def atom(a: Atom) -> Poly:
        return Poly({((a, 1),): Fraction(1)})

    @staticmethod
    def symbol(name: str, integer: bool = False) -> Poly:
        return Poly.atom(sym(name, integer))

    # queries ----------------------------------------------------------------------------------
    def is_const(self) -> bool:
        return all(not m for m in self.terms)

    def const_value(self) -> Fraction:
        return self.terms.get((), Fraction(0))

    def is_zero(self) -> bool:
        return not self.terms

    def atoms(self) -> set[Atom]:
        return {a for m in self.terms for a, _ in m}

    def all_atoms(self) -> Iterable[Atom]:
        """Atoms, including those inside function-atom arguments."""
        for a in self.atoms():
            yield a
            if a.kind == "fn":
                for arg in a.args:
                    yield from arg.all_atoms()

    @property
    def deps(self) -> frozenset[str]:
        if self._deps is None:
            out: set[str] = set()
            for a in self.atoms():
                out |= a.deps
            self._deps = frozenset(out)
        return self._deps

    @property
    def printable(self) -> bool:
        return all(a.printable for a in self.atoms())

    def printable_in(self, bound: frozenset[str] | None) -> bool:
        return all(a.printable_in(bound) for a in self.atoms())

    def __len__(self) -> int:
        return len(self.terms)

    # arithmetic -------------------------------------------------------------------------------
    def __add__(self, other: Poly | int | Fraction) -> Poly:
        o = other if isinstance(other, Poly) else Poly.const(other)
        t = dict(self.terms)
        for m, c in o.terms.items():
            t[m] = t.get(m, Fraction(0)) + c
        return Poly(t)

    __radd__ = __add__

    def __neg__(self) -> Poly:
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Poly | int | Fraction) -> Poly:
        o = other if isinstance(other, Poly) else Poly.const(other)
        return self + (-o)

    def __rsub__(self, other: int | Fraction) -> Poly:
        return Poly.const(other) - self

    def __mul__(self, other: Poly | int | Fraction) -> Poly:
        if not isinstance(other, Poly):
            f = Fraction(other)
            return Poly({m: c * f for m, c in self.terms.items()})
        t: dict[Monomial, Fraction] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _mono_mul(m1, m2)
                t[m] = t.get(m, Fraction(0)) + c1 * c2
        return Poly(t)

    __rmul__ = __mul__

    def scale(self, f: Fraction) -> Poly:
        return self * f

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"Poly({self.to_str()})"

    # structure --------------------------------------------------------------------------------
    def coefficient(self, a: Atom) -> Poly | None:
        """The polynomial ``q`` with ``self = q * a + r`` and ``a`` absent from ``r``; ``None`` if
        ``a`` occurs with a power above one."""
        t: dict[Monomial, Fraction] = {}
        for m, c in self.terms.items():
            for i, (x, p) in enumerate(m):
                if x == a:
                    if p != 1:
                        return None
                    rest = m[:i] + m[i + 1:]
                    t[rest] = t.get(rest, Fraction(0)) + c
        return Poly(t)

    def without(self, atoms: set[Atom]) -> Poly:
        """The terms that contain none of ``atoms``."""
        return Poly({m: c for m, c in self.terms.items() if not any(x in atoms for x, _ in m)})

    def subst(self, fn: Callable[[Atom], Poly | None]) -> Poly | None:
        """Replace atoms: ``fn(atom)`` gives the replacement, the atom itself (unchanged), or
        ``None`` (fail: the whole result is ``None``). Function atoms are rebuilt from their
        substituted arguments."""
        cache: dict[Atom, Poly | None] = {}

        def rep(a: Atom) -> Poly | None:
            if a in cache:
                return cache[a]
            r = fn(a)
            if r is not None and r.terms == {((a, 1),): Fraction(1)} and a.kind == "fn":
                new_args = [x.subst(fn) for x in a.args]
                if any(x is None for x in new_args):
                    r = None
                else:
                    r = rebuild(a, new_args)  # type: ignore[arg-type]
            cache[a] = r
            return r

        out = Poly()
        for m, c in self.terms.items():
            term = Poly.const(c)
            for a, p in m:
                r = rep(a)
                if r is None:
                    return None
                for _ in range(p):
                    term = term * r
            out = out + term
            if len(out.terms) > MAX_TERMS * 4:
                return None
        return out

    # printing ---------------------------------------------------------------------------------
    def key(self) -> str:
        """Canonical text using atom keys (distinguishes atoms that print alike)."""
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda mc: _mono_key(mc[0])):
            parts.append(f"{c}*{_mono_key(m)}")
        return "+".join(parts) or "0"

    def to_str(self) -> str:
        if self._str is None:
            self._str = _format(self)
        return self._str

    def __str__(self) -> str:
        return self.to_str()


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    if not m1:
        return m2
    if not m2:
        return m1
    d: dict[Atom, int] = dict(m1)
    for a, p in m2:
        d[a] = d.get(a, 0) + p
    return tuple(sorted(d.items(), key=lambda ap: ap[0].key))


def _mono_key(m: Monomial) -> str:
    return "*".join(f"{a.key}^{p}" for a, p in m)


def _mono_text(m: Monomial, alone: bool = False) -> str:
    """Factors joined by ``*``; ``//``, ``%`` and ``/`` atoms are parenthesized unless ``alone``."""
    parts: list[str] = []
    single = alone and len(m) == 1 and m[0][1] == 1
    for a, p in m:
        t = a.text()
        if not single and a.kind == "fn" and a.fn in ("floordiv", "mod", "div"):
            t = f"({t})"
        parts.extend([t] * p)
    return "*".join(parts)


def _format(p: Poly) -> str:
    if not p.terms:
        return "0"
    items = sorted(p.terms.items(), key=lambda mc: (-sum(e for _, e in mc[0]), _mono_key(mc[0])))
    out = ""
    for i, (m, c) in enumerate(items):
        neg = c < 0
        a = -c if neg else c
        if not m:
            body = _frac_text(a)
        else:
            # a leading unary minus binds tighter than // and %: keep "-(x//4)" parenthesized
            mt = _mono_text(m, alone=a == 1 and not (neg and i == 0))
            if a == 1:
                body = mt
            elif a.denominator == 1:
                body = f"{a.numerator}*{mt}"
            elif a.numerator == 1:
                body = f"{mt}/{a.denominator}"
            else:
                body = f"{a.numerator}*{mt}/{a.denominator}"
        if i == 0:
            out = ("-" if neg else "") + body
        else:
            out += (" - " if neg else " + ") + body
    return out


def _frac_text(f: Fraction) -> str:
    if f.denominator == 1:
        return str(f.numerator)
    return f"{f.numerator}/{f.denominator}"


# ----------------------------------------------------------------------------------------------
# function atoms (with constant folding and a few identities)
# ----------------------------------------------------------------------------------------------

def _fn_atom(fn: str, args: list[Poly], extra_deps: frozenset[str] = frozenset(), tag: str = "") -> Poly:
    deps: set[str] = set(extra_deps)
    for a in args:
        deps |= a.deps
    key = f"f:{fn}{tag}(" + ",".join(a.key() for a in args) + ")"
    return Poly.atom(Atom(key, "fn", fn + tag, fn=fn, args=tuple(args), deps=frozenset(deps), extra=extra_deps))


def fn_atom(p: Poly | None) -> Atom | None:
    """The function atom ``p`` is, alone with coefficient 1 and power 1 (a condition's ``cmp<``,
    ``and``, ``not``); None otherwise."""
    if p is None or len(p.terms) != 1:
        return None
    ((mono, coef),) = p.terms.items()
    if coef != 1 or len(mono) != 1 or mono[0][1] != 1 or mono[0][0].kind != "fn":
        return None
    return mono[0][0]


def rebuild(a: Atom, args: list[Poly]) -> Poly:
    """A function atom with new arguments (folding where they became constants)."""
    f = a.fn
    if f == "max":
        return p_max(*args)
    if f == "min":
        return p_min(*args)
    if f == "floordiv":
        return p_floordiv(args[0], args[1])
    if f == "mod":
        return p_mod(args[0], args[1])
    if f == "div":
        return p_div(args[0], args[1])
    if f in ("log2", "ceil", "floor", "abs"):
        return p_unary(f, args[0])
    return _fn_atom(f, args, a.extra, tag=a.name[len(f):])


def p_max(*args: Poly) -> Poly:
    uniq: dict[str, Poly] = {}
    consts: list[Fraction] = []
    for a in args:
        if a.is_const():
            consts.append(a.const_value())
        else:
            uniq.setdefault(a.key(), a)
    rest = [uniq[k] for k in sorted(uniq)]
    if consts:
        rest_c = Poly.const(max(consts))
        if not rest:
            return rest_c
        rest = [rest_c, *rest]
    if len(rest) == 1:
        return rest[0]
    return _fn_atom("max", rest)


def p_min(*args: Poly) -> Poly:
    uniq: dict[str, Poly] = {}
    consts: list[Fraction] = []
    for a in args:
        if a.is_const():
            consts.append(a.const_value())
        else:
            uniq.setdefault(a.key(), a)
    rest = [uniq[k] for k in sorted(uniq)]
    if consts:
        rest_c = Poly.const(min(consts))
        if not rest:
            return rest_c
        rest = [rest_c, *rest]
    if len(rest) == 1:
        return rest[0]
    return _fn_atom("min", rest)


def p_div(a: Poly, b: Poly) -> Poly:
    """True division."""
    if b.is_const():
        v = b.const_value()
        if v == 0:
            return _fn_atom("div", [a, b])
        return a * (1 / v)
    if a.is_zero():
        return a
    if a == b:
        return Poly.const(1)
    return _fn_atom("div", [a, b])


def p_floordiv(a: Poly, b: Poly) -> Poly:
    """Integer division (C ``/`` on integers; exact for non-negative operands)."""
    if b.is_const():
        v = b.const_value()
        if v == 1:
            return a
        if v != 0 and v.denominator == 1 and v > 0:
            iv = int(v)
            if a.is_const():
                return Poly.const(math.floor(a.const_value() / v))
            # split a = v*q + r where q collects the terms with coefficients divisible by v
            q: dict[Monomial, Fraction] = {}
            r: dict[Monomial, Fraction] = {}
            for m, c in a.terms.items():
                if c.denominator == 1 and c.numerator % iv == 0:
                    q[m] = c / v
                else:
                    r[m] = c
            if not r:
                return Poly(q)
            rp = Poly(r)
            if rp.is_const() and q:
                return Poly(q) + Poly.const(math.floor(rp.const_value() / v))
            return _fn_atom("floordiv", [a, b])
    if a.is_zero():
        return a
    if a.is_const() and b.is_const() and b.const_value() != 0:
        return Poly.const(math.floor(a.const_value() / b.const_value()))
    if a == b:
        return Poly.const(1)
    return _fn_atom("floordiv", [a, b])


def p_mod(a: Poly, b: Poly) -> Poly:
    if b.is_const():
        v = b.const_value()
        if v == 1:
            return Poly.const(0)
        if v != 0 and v.denominator == 1 and v > 0:
            iv = int(v)
            if a.is_const():
                av = a.const_value()
                return Poly.const(av - v * math.floor(av / v))
            keep = {m: c for m, c in a.terms.items() if not (c.denominator == 1 and c.numerator % iv == 0)}
            if not keep:
                return Poly.const(0)
            a = Poly(keep)
            if a.is_const():
                return p_mod(a, b)
    if a.is_const() and b.is_const() and b.const_value() != 0:
        av, bv = a.const_value(), b.const_value()
        return Poly.const(av - bv * math.floor(av / bv))
    if a == b:
        return Poly.const(0)
    return _fn_atom("mod", [a, b])


def is_integral(p: Poly) -> bool:
    """Whether ``p`` only takes integer values (integer coefficients over integer atoms)."""
    for m, c in p.terms.items():
        if c.denominator != 1:
            return False
        for a, _ in m:
            if a.kind == "sym" and INTEGER in a.extra:
                continue
            if a.kind == "fn" and a.fn in ("floordiv", "ceil", "floor"):
                continue
            if a.kind == "fn" and a.fn in ("max", "min", "mod", "abs") and all(is_integral(x) for x in a.args):
                continue
            return False
    return True


def p_unary(fn: str, a: Poly) -> Poly:
    if fn in ("ceil", "floor") and is_integral(a):
        return a
    if a.is_const():
        v = a.const_value()
        if fn == "ceil":
            return Poly.const(math.ceil(v))
        if fn == "floor":
            return Poly.const(math.floor(v))
        if fn == "abs":
            return Poly.const(abs(v))
        if fn == "log2" and v > 0:
            lv = math.log2(v)
            return Poly.const(Fraction(round(lv)) if abs(lv - round(lv)) < 1e-12 else Fraction(lv))
    return _fn_atom(fn, [a])


def p_itersum(body: Poly, var: str, start: Poly, factor: Fraction, trips: Poly) -> Poly:
    """``sum_{t < trips} body[var := s_t]`` over a geometric sequence ``s_t`` (``itersum``, :mod:`kernelcast.expr`)."""
    if not any(a.kind == "geo" and a.name == var for a in body.all_atoms()):
        return body * trips
    return _fn_atom("itersum", [body, start, Poly.const(factor), trips], tag=var)


def opaque(fn: str, args: list[Poly], extra_deps: frozenset[str] = frozenset(), tag: str = "") -> Poly:
    """A function atom the evaluator does not compute (comparisons, selects, bit operations)."""
    return _fn_atom(fn, args, extra_deps, tag)


def p_ceil_div(a: Poly, b: Poly) -> Poly:
    """``ceil(a / b)`` for a positive integer-valued ``b``, as ``(a + b - 1) // b``."""
    if b.is_const() and b.const_value() == 1:
        return a
    return p_floordiv(a + b - Poly.const(1), b)


def p_clamp01(a: Poly) -> Poly:
    return p_min(Poly.const(1), p_max(Poly.const(0), a))

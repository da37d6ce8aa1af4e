"""Expressions in the source walker: values as polynomials and the arithmetic they count.

Operation classes come from the libclang type of the operation (vectors count once per
component; ``half`` counts as fp32): ``fp32_add`` (add/sub/neg), ``fp32_mul``, ``fp32_fma``
(``a*b+c``, which clang contracts by default), ``fp32_div``, the same for ``fp64``, ``int_add``,
``int_mul``, ``int_div`` (``/`` and ``%``), ``int_bit`` (bitwise, shifts, logical), ``cmp``,
``conv`` (int <-> float <-> double conversions of non-constants) and ``branch`` (``?:``).
"""

from __future__ import annotations

import clang.cindex as ci
from kernelcast.models.static import _cx
from kernelcast.models.static.branches import branch_fraction
from kernelcast.models.static.cursors import space_of, type_bytes, type_class, unwrap
from kernelcast.models.static.expr import DATA, WI, Poly, opaque, p_div, p_floordiv, p_mod
from kernelcast.models.static.guards import facts
from kernelcast.models.static.values import UNKNOWN, ZERO, Ptr, Val, poly_of, retype_ptr
from kernelcast.models.static.walk_base import WalkerBase

K = ci.CursorKind
TK = ci.TypeKind

_EXPR_KINDS_PASSTHRU = {K.PAREN_EXPR}


class ExprWalker(WalkerBase):
    def ev(self, c: ci.Cursor, skip_mul: bool = False) -> Val:
        k = c.kind
        if k in _EXPR_KINDS_PASSTHRU:
            ch = list(c.get_children())
            return self.ev(ch[0]) if ch else UNKNOWN
        if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL, K.CXX_BOOL_LITERAL_EXPR):
            v = _cx.evaluate(c)
            return Val(Poly.const(v)) if v is not None else UNKNOWN
        if k == K.DECL_REF_EXPR:
            return self.ref(c)
        if k == K.UNEXPOSED_EXPR:
            return self.unexposed(c)
        if k == K.CSTYLE_CAST_EXPR:
            return self.cast(c)
        if k == K.BINARY_OPERATOR:
            return self.binop(c, skip_mul)
        if k == K.COMPOUND_ASSIGNMENT_OPERATOR:
            return self.compound(c)
        if k == K.UNARY_OPERATOR:
            return self.unop(c)
        if k == K.ARRAY_SUBSCRIPT_EXPR or k == K.MEMBER_REF_EXPR:
            return self.load_lvalue(c)
        if k == K.CALL_EXPR:
            return self.call(c)
        if k == K.CONDITIONAL_OPERATOR:
            return self.ternary(c)
        if k in (K.INIT_LIST_EXPR, K.COMPOUND_LITERAL_EXPR):
            deps: set[str] = set()
            for ch in c.get_children():
                deps |= self.ev(ch).deps
            return Val(None, frozenset(deps))
        if k in (K.CXX_UNARY_EXPR,):
            v = _cx.evaluate(c)
            return Val(Poly.const(v)) if v is not None else UNKNOWN
        if k == K.STRING_LITERAL:
            return UNKNOWN
        if k.is_statement() and not k.is_expression():
            self.walk_stmt(c)
            return UNKNOWN
        # anything else: constant if clang can fold it, else evaluate the children
        v = _cx.evaluate(c)
        if v is not None:
            return Val(Poly.const(v))
        deps = set()
        for ch in c.get_children():
            deps |= self.ev(ch).deps
        return Val(None, frozenset(deps))

    def ref(self, c: ci.Cursor) -> Val:
        r = c.referenced
        if r is None:
            return UNKNOWN
        if r.kind == K.ENUM_CONSTANT_DECL:
            return Val(Poly.const(r.enum_value))
        key = r.hash
        v = self.vars.get(key)
        if v is not None:
            return v
        if r.kind == K.VAR_DECL:
            # file-scope variables: __constant arrays and constants
            t = r.type
            canon = t.get_canonical()
            if canon.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                leaf = canon
                while leaf.kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
                    leaf = leaf.get_array_element_type().get_canonical()
                v = Val(None, frozenset(), Ptr(r.spelling, space_of(t) if "__constant" in t.spelling else "constant",
                                               ZERO, max(1, type_bytes(leaf))))
            else:
                cv = _cx.evaluate(r)
                v = Val(Poly.const(cv)) if cv is not None else self.var_val(r.spelling, frozenset())
            self.vars[key] = v
            return v
        if r.kind == K.FUNCTION_DECL:
            return UNKNOWN
        v = self.var_val(r.spelling, frozenset())
        self.vars[key] = v
        return v

    def unexposed(self, c: ci.Cursor) -> Val:
        ch = list(c.get_children())
        if len(ch) != 1:
            cv = _cx.evaluate(c) if not ch else None
            if cv is not None:
                return Val(Poly.const(cv))
            deps: set[str] = set()
            for x in ch:
                deps |= self.ev(x).deps
            return Val(None, frozenset(deps))
        inner = ch[0]
        tc_out = type_class(c.type)
        tc_in = type_class(inner.type)
        # vector component (swizzle) of a memory element: a narrower access
        if tc_in[0] in ("fp32", "fp64", "int") and tc_in[1] > 1 and tc_out[1] < tc_in[1] and tc_out[0] == tc_in[0]:
            base = unwrap(inner)
            if base.kind in (K.ARRAY_SUBSCRIPT_EXPR, K.MEMBER_REF_EXPR) or (
                    base.kind == K.UNARY_OPERATOR and _cx.unary_op(base) == "*"):
                m = self.lvalue_mem(base)
                if m is not None:
                    m.elem_bytes = max(1, type_bytes(c.type))
                    return self.record_load(m, c)
            v = self.ev(inner)
            if v.deps & {WI, DATA}:         # a value of each work-item's own (not a kernel argument's)
                self.mix_lanes(c)
            return Val(None, v.deps)
        v = self.ev(inner)
        self.count_conversion(tc_in, tc_out, v)
        if v.ptr is not None and c.type.get_canonical().kind == TK.POINTER:
            return Val(v.poly, v.deps, retype_ptr(v.ptr, c.type))
        return v

    def count_conversion(self, tc_in: tuple[str, int], tc_out: tuple[str, int], v: Val) -> None:
        a, b = tc_in[0], tc_out[0]
        if a == b or a not in ("fp32", "fp64", "int") or b not in ("fp32", "fp64", "int"):
            return
        if v.poly is not None and v.poly.is_const():
            return
        w = max(tc_in[1], tc_out[1])
        self.op_of("conv", w, [v], w)

    def cast(self, c: ci.Cursor) -> Val:
        ch = [x for x in c.get_children() if x.kind != K.TYPE_REF]
        if not ch:
            return UNKNOWN
        if len(ch) > 1 or ch[-1].kind in (K.INIT_LIST_EXPR,) or (
                ch[-1].kind == K.PAREN_EXPR and len(list(ch[-1].get_children())) > 1):
            deps: set[str] = set()
            for x in ch:
                deps |= self.ev(x).deps
            return Val(None, frozenset(deps))
        inner = ch[-1]
        v = self.ev(inner)
        self.count_conversion(type_class(inner.type), type_class(c.type), v)
        if v.ptr is not None and c.type.get_canonical().kind == TK.POINTER:
            return Val(v.poly, v.deps, retype_ptr(v.ptr, c.type))
        tc = type_class(c.type)
        if tc[1] > 1 and type_class(inner.type)[1] == 1:
            return Val(None, v.deps)  # scalar broadcast to a vector
        return v

    def binop(self, c: ci.Cursor, skip_count: bool = False) -> Val:
        op = _cx.binary_op(c)
        ch = list(c.get_children())
        if len(ch) != 2:
            return UNKNOWN
        lhs_c, rhs_c = ch
        if op == "=":
            rv = self.ev(rhs_c)
            self.store_to(lhs_c, rv, c)
            return rv
        if op == ",":
            self.ev(lhs_c)
            return self.ev(rhs_c)
        if op in ("&&", "||"):
            lv = self.ev(lhs_c)
            rv = self.ev(rhs_c)
            self.op("int_bit")
            return Val.of(opaque("and" if op == "&&" else "or", [poly_of(lv), poly_of(rv)]), lv.deps | rv.deps)
        tcls, width = type_class(c.type)
        if op in ("<", ">", "<=", ">=", "==", "!="):
            lv, rv = self.ev(lhs_c), self.ev(rhs_c)
            w = type_class(lhs_c.type)[1]
            if not skip_count:
                self.op_of("cmp", w, [lv, rv], w)
            return Val.of(opaque("cmp", [poly_of(lv), poly_of(rv)], tag=op), lv.deps | rv.deps)
        # a*b +/- c contracted to fma
        fused = False
        if op in ("+", "-") and tcls in ("fp32", "fp64"):
            for side in (lhs_c, rhs_c):
                s = unwrap(side)
                if s.kind == K.BINARY_OPERATOR and _cx.binary_op(s) == "*" and type_class(s.type)[0] == tcls:
                    fused = True
                    lv = self.ev(lhs_c, skip_mul=True) if side is lhs_c else self.ev(lhs_c)
                    rv = self.ev(rhs_c, skip_mul=True) if side is rhs_c else self.ev(rhs_c)
                    break
        if not fused:
            lv, rv = self.ev(lhs_c), self.ev(rhs_c)
        if _constant(lv) and _constant(rv):
            skip_count = True          # folded by the compiler (1.0f / 16777216.0f): no instruction
        if not skip_count:
            if fused:
                self.op_of(f"{tcls}_fma", width, [lv, rv], width)
            else:
                self.count_arith(op, tcls, width, rv, [lv, rv])
        return self.arith(op, lv, rv, tcls, c)

    def count_arith(self, op: str, tcls: str, width: int, rv: Val | None = None,
                    operands: list[Val] | None = None) -> None:
        """Count one arithmetic operator. An integer ``/`` or ``%`` by a constant power of two is
        what the compiler makes of it, a shift or a mask plus the sign correction of a signed
        operand (one ``int_bit`` and one ``int_add``), not a division: a kernel
        spending six ``x / 16``-like operations per work-item (``kc_spmv_csr_lanes``) was predicted
        3.8x too slow with them charged as divisions. By any other constant it is a multiply by the
        reciprocal, a shift and an add (``%``: one more multiply and add), not a division either.
        With ``operands``, an operation of values invariant in a loop is counted once per entry of
        it (:meth:`~WalkerBase.op_of`)."""
        def count(cls: str) -> None:
            if operands is None:
                self.op(cls, width, width)
            else:
                self.op_of(cls, width, operands, width)

        if (op in ("/", "%") and tcls in ("int", "other") and rv is not None and _constant(rv)
                and _power_of_two(rv)):
            count("int_bit")
            count("int_add")
            return
        if op in ("/", "%") and tcls in ("int", "other") and rv is not None and _constant(rv):
            # by another constant: a multiply by its reciprocal, a shift and a sign correction (and
            # for ``%`` a multiply and subtract back); measured on PoCL 3.1: ``(x * k + 7) % 100`` in a
            # scalar loop 0.05 ns per operation and core over ``& 127``, ``% n`` 1.4 ns
            for part in ("int_mul", "int_bit", "int_add") + (("int_mul", "int_add") if op == "%" else ()):
                count(part)
            return
        if tcls in ("fp32", "fp64"):
            cls = {"+": "add", "-": "add", "*": "mul", "/": "div", "%": "div"}.get(op)
            if cls:
                count(f"{tcls}_{cls}")
            return
        if tcls in ("int", "ptr", "other"):
            cls = {"+": "int_add", "-": "int_add", "*": "int_mul", "/": "int_div", "%": "int_div",
                   "<<": "int_bit", ">>": "int_bit", "&": "int_bit", "|": "int_bit", "^": "int_bit"}.get(op)
            if cls:
                count(cls)

    def arith(self, op: str, lv: Val, rv: Val, tcls: str, c: ci.Cursor) -> Val:
        deps = lv.deps | rv.deps
        # pointer arithmetic
        if lv.ptr is not None and rv.ptr is None and op in ("+", "-"):
            off = None if (lv.ptr.offset is None or rv.poly is None) else (
                lv.ptr.offset + rv.poly if op == "+" else lv.ptr.offset - rv.poly)
            return Val(None, deps, Ptr(lv.ptr.base, lv.ptr.space, off, lv.ptr.leaf_bytes, lv.ptr.deps | rv.deps))
        if rv.ptr is not None and lv.ptr is None and op == "+":
            off = None if (rv.ptr.offset is None or lv.poly is None) else rv.ptr.offset + lv.poly
            return Val(None, deps, Ptr(rv.ptr.base, rv.ptr.space, off, rv.ptr.leaf_bytes, rv.ptr.deps | lv.deps))
        a, b = lv.poly, rv.poly
        if a is None or b is None or type_class(c.type)[1] > 1:
            return Val(None, deps)
        if op == "+":
            return Val.of(a + b, deps)
        if op == "-":
            return Val.of(a - b, deps)
        if op == "*":
            return Val.of(a * b, deps)
        if op == "/":
            return Val.of(p_floordiv(a, b) if tcls == "int" else p_div(a, b), deps)
        if op == "%":
            return Val.of(p_mod(a, b), deps)
        if op == "<<" and b.is_const() and 0 <= b.const_value() < 63:
            return Val.of(a * (2 ** int(b.const_value())), deps)
        if op == ">>" and b.is_const() and 0 <= b.const_value() < 63:
            return Val.of(p_floordiv(a, Poly.const(2 ** int(b.const_value()))), deps)
        if op == "&":
            for m, o in ((b, a), (a, b)):
                if m.is_const():
                    mv = m.const_value()
                    if mv.denominator == 1 and mv >= 0 and (int(mv) + 1) & int(mv) == 0:
                        return Val.of(p_mod(o, Poly.const(int(mv) + 1)), deps)
        return Val.of(opaque("bit", [a, b], tag=op), deps)

    def compound(self, c: ci.Cursor) -> Val:
        op = _cx.binary_op(c)[:-1]
        ch = list(c.get_children())
        if len(ch) != 2:
            return UNKNOWN
        lhs_c, rhs_c = ch
        tcls, width = type_class(lhs_c.type)
        s = unwrap(rhs_c)
        fused = (op in ("+", "-") and tcls in ("fp32", "fp64") and s.kind == K.BINARY_OPERATOR
                 and _cx.binary_op(s) == "*" and type_class(s.type)[0] == tcls)
        rv = self.ev(rhs_c, skip_mul=fused) if fused else self.ev(rhs_c)
        if fused:
            self.op(f"{tcls}_fma", width, width)
        else:
            self.count_arith(op, tcls, width, rv)
        target = unwrap(lhs_c)
        if target.kind == K.DECL_REF_EXPR and target.referenced is not None:
            old = self.ev(target)
            new = self.arith(op, old, rv, tcls, lhs_c)
            self.vars[target.referenced.hash] = new
            return new
        m = self.lvalue_mem(lhs_c)
        if m is not None:
            self.record(m, "load", c)
            self.record(m, "store", c)
            return Val(None, m.deps | rv.deps | {DATA})
        self.ev(lhs_c)
        return UNKNOWN

    def unop(self, c: ci.Cursor) -> Val:
        op = _cx.unary_op(c)
        ch = list(c.get_children())
        if not ch:
            cv = _cx.evaluate(c)
            return Val(Poly.const(cv)) if cv is not None else UNKNOWN
        x = ch[0]
        tcls, width = type_class(c.type)
        if op in ("post++", "post--", "pre++", "pre--"):
            tc = type_class(x.type)
            self.op("fp32_add" if tc[0] == "fp32" else "fp64_add" if tc[0] == "fp64" else "int_add", tc[1], tc[1])
            target = unwrap(x)
            delta = 1 if "++" in op else -1
            if target.kind == K.DECL_REF_EXPR and target.referenced is not None:
                old = self.ev(target)
                if old.ptr is not None:
                    off = None if old.ptr.offset is None else old.ptr.offset + delta
                    new = Val(None, old.deps, Ptr(old.ptr.base, old.ptr.space, off, old.ptr.leaf_bytes, old.ptr.deps))
                else:
                    new = Val.of(old.poly + delta if old.poly is not None else None, old.deps)
                self.vars[target.referenced.hash] = new
                return new if op.startswith("pre") else old
            m = self.lvalue_mem(x)
            if m is not None:
                self.record(m, "load", c)
                self.record(m, "store", c)
                return Val(None, m.deps | {DATA})
            return UNKNOWN
        if op == "&":
            return self.address_of(x)
        if op == "*":
            return self.load_lvalue(c)
        v = self.ev(x)
        if op == "-":
            self.op_of("fp32_add" if tcls == "fp32" else "fp64_add" if tcls == "fp64" else "int_add", width, [v], width)
            return Val.of(-v.poly if v.poly is not None else None, v.deps)
        if op == "+":
            return v
        if op == "~":
            self.op("int_bit", width, width)
            return Val.of(opaque("bit", [poly_of(v)], tag="~"), v.deps)
        if op == "!":
            self.op("int_bit", width, width)
            return Val.of(opaque("not", [poly_of(v)]), v.deps)
        return Val(None, v.deps)

    def ternary(self, c: ci.Cursor) -> Val:
        ch = list(c.get_children())
        if len(ch) != 3:
            return UNKNOWN
        cv = self.ev(ch[0])
        self.op("branch")
        self.branch(c.location.line, "?:", cv.deps)
        fr = branch_fraction(cv, has_else=True)
        self.select_stack.append((len(self.loop_stack), (self.w_item, self.w_warp)))
        try:
            with self.scaled(fr.it, fr.wt), self.guarded(facts(cv.poly)):
                a = self.ev(ch[1])
            with self.scaled(fr.ie, fr.we), self.guarded(facts(cv.poly, holds=False)):
                b = self.ev(ch[2])
        finally:
            self.select_stack.pop()
        deps = a.deps | b.deps | cv.deps
        if a.poly is not None and b.poly is not None:
            if a.poly == b.poly:
                return a
            return Val.of(opaque("sel", [a.poly, b.poly], extra_deps=cv.deps, tag=str(self.serial())), deps)
        ptr = a.ptr or b.ptr
        return Val(None, deps, ptr)


def _power_of_two(v: Val) -> bool:
    """A constant value that is a positive integer power of two (1, 2, 4, ...)."""
    if v.poly is None or not v.poly.is_const():
        return False
    x = v.poly.const_value()
    return x.denominator == 1 and x > 0 and int(x) & (int(x) - 1) == 0


def _constant(v: Val) -> bool:
    """A value the compiler knows (a literal or an expression of literals)."""
    return v.poly is not None and v.poly.is_const() and not v.deps and v.ptr is None

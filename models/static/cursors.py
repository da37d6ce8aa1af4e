"""libclang types and cursors as the source walker reads them: type classes, sizes, address
spaces, implicit casts and re-printed expressions."""

from __future__ import annotations

from fractions import Fraction

import clang.cindex as ci
from kernelcast.models.static import _cx

K = ci.CursorKind
TK = ci.TypeKind

_FP32 = {TK.FLOAT, TK.HALF}
_FP64 = {TK.DOUBLE, TK.LONGDOUBLE}
_INT = {TK.BOOL, TK.CHAR_U, TK.UCHAR, TK.CHAR16, TK.CHAR32, TK.USHORT, TK.UINT, TK.ULONG,
        TK.ULONGLONG, TK.UINT128, TK.CHAR_S, TK.SCHAR, TK.WCHAR, TK.SHORT, TK.INT, TK.LONG,
        TK.LONGLONG, TK.INT128, TK.ENUM}
for _name in ("FLOAT16", "BFLOAT16"):
    if hasattr(TK, _name):
        _FP32.add(getattr(TK, _name))

ARRAY_KINDS = (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY, TK.VARIABLEARRAY)


def type_class(t: ci.Type) -> tuple[str, int]:
    """``(class, width)``: class fp32 / fp64 / int / ptr / other; width = vector components."""
    t = t.get_canonical()
    width = 1
    if t.kind in (TK.EXTVECTOR, TK.VECTOR):
        width = max(1, t.element_count)
        t = t.element_type.get_canonical()
    k = t.kind
    if k in _FP32:
        return "fp32", width
    if k in _FP64:
        return "fp64", width
    if k in _INT:
        return "int", width
    if k == TK.POINTER:
        return "ptr", 1
    return "other", width


def type_bytes(t: ci.Type) -> int:
    """Size of a type in bytes (0 when libclang does not know it)."""
    n = t.get_canonical().get_size()
    return int(n) if n and n > 0 else 0


def space_of(t: ci.Type) -> str:
    """Address space of a pointee / variable type from its spelling."""
    s = t.spelling
    if "__global" in s:
        return "global"
    if "__constant" in s:
        return "constant"
    if "__local" in s:
        return "local"
    return "private"


def unwrap(c: ci.Cursor) -> ci.Cursor:
    """Skip parentheses and implicit casts that keep the vector width."""
    while c.kind in (K.PAREN_EXPR, K.UNEXPOSED_EXPR):
        ch = list(c.get_children())
        if len(ch) != 1:
            break
        if c.kind == K.UNEXPOSED_EXPR:
            a, b = type_class(c.type), type_class(ch[0].type)
            if a[1] != b[1]:
                break
        c = ch[0]
    return c


def is_mem_lvalue(c: ci.Cursor) -> bool:
    """Whether an lvalue lives in memory addressed through a pointer or array (syntactically)."""
    s = unwrap(c)
    while s.kind == K.MEMBER_REF_EXPR:
        ch = list(s.get_children())
        if not ch:
            return False
        if type_class(unwrap(ch[0]).type)[0] == "ptr":
            return True
        s = unwrap(ch[0])
    if s.kind == K.ARRAY_SUBSCRIPT_EXPR:
        return True
    return s.kind == K.UNARY_OPERATOR and _cx.unary_op(s) == "*"


def unit_scale(s: ci.Cursor, leaf_bytes: int) -> Fraction:
    """Leaf elements per index step of a subscript (>1 for rows of multi-dimensional arrays)."""
    nb = type_bytes(s.type)
    if nb <= 0 or leaf_bytes <= 0:
        return Fraction(1)
    if s.type.get_canonical().kind in (TK.CONSTANTARRAY, TK.INCOMPLETEARRAY):
        return Fraction(nb, leaf_bytes)
    return Fraction(max(nb, leaf_bytes), leaf_bytes) if nb > leaf_bytes else Fraction(1)


def const_arg(args: list[ci.Cursor]) -> int | None:
    """The first argument of a call as a compile-time integer, or None."""
    if not args:
        return None
    v = _cx.evaluate(args[0])
    return int(v) if isinstance(v, (int, float)) else None


def terminates(c: ci.Cursor) -> bool:
    """Whether a statement is (or ends with) ``return``."""
    if c.kind == K.RETURN_STMT:
        return True
    if c.kind == K.COMPOUND_STMT:
        ch = list(c.get_children())
        return bool(ch) and ch[-1].kind == K.RETURN_STMT
    return False


def expr_text(c: ci.Cursor, depth: int = 0) -> str:
    """Re-print an expression from the AST (tokens lie inside macro expansions)."""
    if depth > 30:
        return "..."
    k = c.kind
    ch = [x for x in c.get_children() if x.kind != K.TYPE_REF]
    if k in (K.INTEGER_LITERAL, K.FLOATING_LITERAL, K.CHARACTER_LITERAL):
        v = _cx.evaluate(c)
        return str(v) if v is not None else "?"
    if k == K.DECL_REF_EXPR:
        return c.spelling
    if k == K.PAREN_EXPR:
        return "(" + (expr_text(ch[0], depth + 1) if ch else "") + ")"
    if k == K.UNEXPOSED_EXPR:
        if len(ch) == 1:
            inner = expr_text(ch[0], depth + 1)
            a, b = type_class(c.type), type_class(ch[0].type)
            if b[1] > 1 and a[1] < b[1]:
                return inner + ".?"
            return inner
        return "?"
    if k == K.BINARY_OPERATOR or k == K.COMPOUND_ASSIGNMENT_OPERATOR:
        if len(ch) == 2:
            return f"{expr_text(ch[0], depth + 1)} {_cx.binary_op(c)} {expr_text(ch[1], depth + 1)}"
    if k == K.UNARY_OPERATOR and ch:
        op = _cx.unary_op(c)
        inner = expr_text(ch[0], depth + 1)
        if op.startswith("post"):
            return inner + op[4:]
        return op.replace("pre", "") + inner
    if k == K.ARRAY_SUBSCRIPT_EXPR and len(ch) == 2:
        return f"{expr_text(ch[0], depth + 1)}[{expr_text(ch[1], depth + 1)}]"
    if k == K.CALL_EXPR:
        return f"{c.spelling}(" + ", ".join(expr_text(a, depth + 1) for a in c.get_arguments()) + ")"
    if k == K.MEMBER_REF_EXPR and ch:
        sep = "->" if type_class(ch[0].type)[0] == "ptr" else "."
        return f"{expr_text(ch[0], depth + 1)}{sep}{c.spelling}"
    if k == K.CSTYLE_CAST_EXPR and ch:
        return f"({c.type.spelling}){expr_text(ch[-1], depth + 1)}"
    if k == K.CONDITIONAL_OPERATOR and len(ch) == 3:
        return (f"{expr_text(ch[0], depth + 1)} ? {expr_text(ch[1], depth + 1)} : "
                f"{expr_text(ch[2], depth + 1)}")
    return "?"

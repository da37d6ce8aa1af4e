"""libclang C functions the Python bindings (libclang 18) do not wrap: operator kinds, evaluation.

``clang_getCursorBinaryOperatorKind`` / ``clang_getCursorUnaryOperatorKind`` (LLVM 17+) give
operators without reading tokens, which lie for code expanded from macros; ``clang_Cursor_Evaluate``
gives the value of literals (also macro-expanded ones) and constant expressions.
"""

from __future__ import annotations

import ctypes
import functools

import clang.cindex as ci

#: CXBinaryOperatorKind -> spelling (LLVM 17 enum, stable)
BINARY_OPS = {
    1: ".*", 2: "->*", 3: "*", 4: "/", 5: "%", 6: "+", 7: "-", 8: "<<", 9: ">>", 10: "<=>",
    11: "<", 12: ">", 13: "<=", 14: ">=", 15: "==", 16: "!=", 17: "&", 18: "^", 19: "|",
    20: "&&", 21: "||", 22: "=", 23: "*=", 24: "/=", 25: "%=", 26: "+=", 27: "-=", 28: "<<=",
    29: ">>=", 30: "&=", 31: "^=", 32: "|=", 33: ",",
}
#: CXUnaryOperatorKind -> name
UNARY_OPS = {
    1: "post++", 2: "post--", 3: "pre++", 4: "pre--", 5: "&", 6: "*", 7: "+", 8: "-", 9: "~",
    10: "!", 11: "__real", 12: "__imag", 13: "__extension__", 14: "co_await",
}

_EVAL_INT = 1
_EVAL_FLOAT = 2


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    lib = ci.conf.lib
    try:
        lib.clang_getCursorBinaryOperatorKind.argtypes = [ci.Cursor]
        lib.clang_getCursorBinaryOperatorKind.restype = ctypes.c_int
        lib.clang_getCursorUnaryOperatorKind.argtypes = [ci.Cursor]
        lib.clang_getCursorUnaryOperatorKind.restype = ctypes.c_int
    except AttributeError:  # pragma: no cover - libclang older than 17
        return None
    lib.clang_Cursor_Evaluate.argtypes = [ci.Cursor]
    lib.clang_Cursor_Evaluate.restype = ctypes.c_void_p
    lib.clang_EvalResult_getKind.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getKind.restype = ctypes.c_int
    lib.clang_EvalResult_getAsLongLong.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsLongLong.restype = ctypes.c_longlong
    lib.clang_EvalResult_getAsDouble.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_getAsDouble.restype = ctypes.c_double
    lib.clang_EvalResult_dispose.argtypes = [ctypes.c_void_p]
    lib.clang_EvalResult_dispose.restype = None
    return lib


def binary_op(c: ci.Cursor) -> str:
    """Spelling of a BinaryOperator / CompoundAssignOperator cursor ('' if unknown)."""
    lib = _lib()
    if lib is not None:
        return BINARY_OPS.get(lib.clang_getCursorBinaryOperatorKind(c), "")
    return _op_from_tokens(c)  # pragma: no cover


def unary_op(c: ci.Cursor) -> str:
    """Name of a UnaryOperator cursor: post++ post-- pre++ pre-- & * + - ~ ! ('' if unknown)."""
    lib = _lib()
    if lib is not None:
        return UNARY_OPS.get(lib.clang_getCursorUnaryOperatorKind(c), "")
    return ""  # pragma: no cover


def evaluate(c: ci.Cursor) -> int | float | None:
    """Value of a constant expression cursor, or None."""
    lib = _lib()
    if lib is None:  # pragma: no cover
        return None
    res = lib.clang_Cursor_Evaluate(c)
    if not res:
        return None
    try:
        kind = lib.clang_EvalResult_getKind(res)
        if kind == _EVAL_INT:
            return int(lib.clang_EvalResult_getAsLongLong(res))
        if kind == _EVAL_FLOAT:
            return float(lib.clang_EvalResult_getAsDouble(res))
        return None
    finally:
        lib.clang_EvalResult_dispose(res)


def _op_from_tokens(c: ci.Cursor) -> str:  # pragma: no cover - fallback for old libclang
    children = list(c.get_children())
    if len(children) != 2:
        return ""
    end = children[0].extent.end.offset
    for t in c.get_tokens():
        if t.extent.start.offset >= end and t.kind == ci.TokenKind.PUNCTUATION:
            return t.spelling
    return ""

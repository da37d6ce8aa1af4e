"""Kernels that consume their own input: which buffers may be read, and whether a launch changed them.

A launch that changes a buffer it also reads (a BFS step clearing the frontier it expands, an
in-place update) leaves the next launch a different problem. The runner detects it in two steps:

1. :func:`maybe_read_buffers`, a conservative source test: a writable pointer parameter counts as
   read unless every use of its name in the kernel's body is the target of a plain assignment
   (``p[i] = ...``, ``*p = ...``). Passing it to a function, ``+=``, atomics, reading it, taking
   ``p + k``: all count as a read. A false "read" only costs a comparison.
2. the runner compares those buffers' contents after the first launch with their initial
   contents (:func:`changed`); the ones that changed are restored from a pristine device copy
   before every later launch, outside the timed interval (``state_reset = "restore"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _matching(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes ``text[start]`` (== ``open_``); -1 if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def kernel_body(source: str, name: str) -> str | None:
    """The text between the braces of kernel ``name``'s definition (comments removed)."""
    text = _COMMENT.sub(" ", source)
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        end = _matching(text, m.end() - 1, "(", ")")
        if end < 0:
            continue
        rest = text[end:]
        stripped = rest.lstrip()
        if not stripped.startswith("{"):
            continue          # a declaration or a call, not the definition
        open_at = end + (len(rest) - len(stripped))
        close = _matching(text, open_at, "{", "}")
        if close > 0:
            return text[open_at + 1:close - 1]
    return None


def _plain_store(body: str, at: int, end: int) -> bool:
    """Whether the name at ``body[at:end]`` is the target of a plain ``=`` (``p[...] =`` or ``*p =``)."""
    j = end
    while j < len(body) and body[j].isspace():
        j += 1
    deref = body[:at].rstrip().endswith("*") and not re.search(r"[\w)\]]\s*\*\s*$", body[:at])
    if j < len(body) and body[j] == "[" and not deref:
        k = _matching(body, j, "[", "]")
        if k < 0:
            return False
        j = k
        while j < len(body) and body[j].isspace():
            j += 1
    elif not deref:
        return False
    return body.startswith("=", j) and not body.startswith("==", j)


def maybe_read_buffers(source: str, kernel_name: str, names: Iterable[str]) -> set[str]:
    """The pointer parameters of ``names`` the kernel may read (all of them when the body is not found)."""
    names = list(names)
    body = kernel_body(source, kernel_name)
    if body is None:
        return set(names)
    out = set()
    for n in names:
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\b", body):
            if not _plain_store(body, m.start(), m.end()):
                out.add(n)
                break
    return out


def changed(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether a buffer's bytes differ (NaN payloads compared bitwise)."""
    return before.shape != after.shape or not np.array_equal(before.view(np.uint8), after.view(np.uint8))

"""Stages 4 and 8 of corpus ingest: split a normalized text with libclang into self-contained
kernels, each with exactly the top-level declarations and pragmas it needs, and its dimensionality.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import clang.cindex as ci

from kernelcast import clang as kc

#: work-item functions whose constant argument gives a kernel's dimensionality (LLMPerf Table I)
WORK_ITEM_FUNCTIONS = frozenset({
    "get_global_id", "get_local_id", "get_group_id", "get_global_size", "get_local_size",
    "get_num_groups", "get_global_offset",
})


@dataclass
class ExtractedKernel:
    """One kernel cut out of a file with what it needs."""

    name: str
    source: str
    dims: int
    declarations: list[str]          # spellings of the top-level declarations included


@dataclass
class _Chunk:
    start: int                       # byte offsets into the normalized text
    end: int
    cursors: list[Any]
    prefix: bytes = b""


_PRAGMA_LINE = re.compile(rb"^[ \t]*#[ \t]*pragma\b.*$", re.M)
_DIRECTIVE_LINE = re.compile(rb"^[ \t]*#.*$", re.M)
_DOUBLE_TYPE = re.compile(r"\bdouble(?:2|3|4|8|16)?\b")
_HALF_TYPE = re.compile(r"\bhalf(?:2|3|4|8|16)?\b")
#: the file name libclang parses every text under (error messages name it)
PARSE_NAME = "corpus_input.cl"


def _ref_kinds() -> frozenset[Any]:
    return frozenset({
        ci.CursorKind.DECL_REF_EXPR, ci.CursorKind.MEMBER_REF_EXPR, ci.CursorKind.MEMBER_REF,
        ci.CursorKind.CALL_EXPR, ci.CursorKind.TYPE_REF, ci.CursorKind.VARIABLE_REF,
    })


def _build_chunks(data: bytes, tops: list[Any]) -> tuple[list[_Chunk], list[tuple[int, bytes]]]:
    """Group top-level cursors into non-overlapping chunks; collect top-level pragma lines."""
    tops = sorted(tops, key=lambda c: (c.extent.start.offset, -c.extent.end.offset))
    chunks: list[_Chunk] = []
    for c in tops:
        s, e = c.extent.start.offset, c.extent.end.offset
        if chunks and s < chunks[-1].end:
            chunks[-1].end = max(chunks[-1].end, e)
            chunks[-1].cursors.append(c)
            continue
        chunks.append(_Chunk(s, e, [c]))
        # a declaration's extent stops before its ';'
        j = e
        while j < len(data) and data[j:j + 1] in (b" ", b"\t", b"\n"):
            j += 1
        if data[j:j + 1] == b";":
            chunks[-1].end = j + 1
    pragmas: list[tuple[int, bytes]] = []
    prev = 0
    for ch in [*chunks, None]:
        stop = ch.start if ch is not None else len(data)
        gap = data[prev:stop]
        pragmas += [(prev + m.start(), m.group().strip()) for m in _PRAGMA_LINE.finditer(gap)]
        if ch is not None:
            rest = _DIRECTIVE_LINE.sub(b"", gap).strip()
            while rest.startswith(b";"):
                rest = rest[1:].strip()
            ch.prefix = rest           # e.g. an attribute libclang left out of the extent
            prev = ch.end
    return chunks, pragmas


def _dims_of(call_cursors: Iterable[Any]) -> int:
    highest = -1
    for call in call_cursors:
        args = list(call.get_arguments())
        if not args:
            continue
        toks = [t.spelling for t in args[0].get_tokens()]
        toks = [t for t in toks if t not in ("(", ")")]
        if len(toks) != 1:
            continue
        try:
            idx = int(toks[0].rstrip("uUlL"), 0)
        except ValueError:
            continue
        if 0 <= idx <= 2:
            highest = max(highest, idx)
    return highest + 1 if highest >= 0 else 1


def split_kernels(text: str) -> list[ExtractedKernel]:
    """Every kernel of a normalized (preprocessed, comment-free) text, each with what it needs.

    Raise :class:`kernelcast.clang.ParseError` when libclang reports an error.
    """
    data = text.encode("utf-8")
    tu = kc.parse(text, PARSE_NAME)
    kernels = kc.find_kernels(tu, PARSE_NAME)
    if not kernels:
        return []
    tops = [c for c in tu.cursor.get_children()
            if c.location.file is not None and c.location.file.name == PARSE_NAME]
    chunks, pragmas = _build_chunks(data, tops)

    decl_chunk: dict[Any, int] = {}
    usr_chunks: dict[str, set[int]] = {}
    for i, ch in enumerate(chunks):
        for top in ch.cursors:
            usr = top.get_usr()
            if usr:
                usr_chunks.setdefault(usr, set()).add(i)
            for d in top.walk_preorder():
                if d.kind.is_declaration():
                    decl_chunk[d] = i

    ref_kinds = _ref_kinds()
    deps_cache: dict[int, tuple[set[int], list[Any]]] = {}

    def direct_deps(i: int) -> tuple[set[int], list[Any]]:
        if i in deps_cache:
            return deps_cache[i]
        deps: set[int] = set()
        calls: list[Any] = []
        for top in chunks[i].cursors:
            for d in top.walk_preorder():
                if d.kind not in ref_kinds:
                    continue
                if d.kind == ci.CursorKind.CALL_EXPR and d.spelling in WORK_ITEM_FUNCTIONS:
                    calls.append(d)
                r = d.referenced
                if r is None:
                    continue
                for cand in (r, r.canonical, r.get_definition()):
                    if cand is not None and cand in decl_chunk:
                        deps.add(decl_chunk[cand])
                if r.kind in (ci.CursorKind.FUNCTION_DECL, ci.CursorKind.VAR_DECL):
                    deps |= usr_chunks.get(r.get_usr() or "", set())
        deps.discard(i)
        deps_cache[i] = (deps, calls)
        return deps_cache[i]

    out: list[ExtractedKernel] = []
    for name, cursor in kernels.items():
        root = decl_chunk[cursor]
        needed = {root}
        todo = [root]
        calls: list[Any] = []
        while todo:
            deps, chunk_calls = direct_deps(todo.pop())
            calls += chunk_calls
            for j in deps - needed:
                needed.add(j)
                todo.append(j)
        code_parts = []
        for j in sorted(needed):
            ch = chunks[j]
            body = (ch.prefix + b" " if ch.prefix else b"") + data[ch.start:ch.end]
            # blank lines left by comments and directives carry nothing: drop them so the
            # formatted text does not depend on them
            body = b"\n".join(line for line in body.split(b"\n") if line.strip())
            code_parts.append((ch.start, body))
        code_text = "\n".join(p.decode("utf-8") for _, p in code_parts)
        last_end = max(chunks[j].end for j in needed)
        parts = list(code_parts)
        for off, line in pragmas:
            if off >= last_end or not _pragma_needed(line.decode("utf-8"), code_text):
                continue
            parts.append((off, line))
        parts.sort(key=lambda p: p[0])
        source = "\n\n".join(p.decode("utf-8").strip() for _, p in parts) + "\n"
        declared = [c.spelling or c.kind.name for j in sorted(needed) for c in chunks[j].cursors]
        out.append(ExtractedKernel(name=name, source=source, dims=_dims_of(calls), declarations=declared))
    return out


def _pragma_needed(line: str, code: str) -> bool:
    """Whether a top-level pragma belongs in a record whose code is ``code``."""
    words = line.replace(":", " ").split()
    if len(words) >= 4 and words[2] == "EXTENSION":
        ext = words[3]
        if "fp64" in ext:
            return bool(_DOUBLE_TYPE.search(code))
        if "fp16" in ext:
            return bool(_HALF_TYPE.search(code))
    return True

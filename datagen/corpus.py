"""Corpus ingest: turn a messy crawl of OpenCL ``.cl`` files into self-contained kernel records.

The stages follow the LLMPerf/BenchPress corpus pipelines, each counted in an :class:`IngestReport`:

1. **read** every ``.cl`` file (directories recursively); bytes that are not UTF-8 are decoded as
   Latin-1 rather than failing the file;
2. **preprocess** with ``pcpp`` (a pure-Python C preprocessor): macros and ``#include``\\ s of local
   headers are expanded, ``#pragma`` lines are kept, OpenCL builtins are left alone, and the macros
   an OpenCL C 1.2 compiler predefines (:data:`OPENCL_PREDEFINES`) plus ``defines`` (the ``-D``
   options) are defined. A missing include fails that file only, with its reason;
3. **normalize**: strip comments and the double-underscore OpenCL qualifier keywords
   (``__kernel`` -> ``kernel``, ``__global`` -> ``global``...), and nothing else;
4. **split** with libclang: one record per kernel holding the kernel plus exactly the top-level
   functions, structs, typedefs, enums, program-scope constants and pragmas it needs
   (transitively), in source order;
5. **format** with ``clang-format`` (a fixed built-in style), or a whitespace normalization where
   clang-format is missing;
6. **deduplicate**: exact duplicates (sha256 of the normalized text), then near duplicates (MinHash
   over 5-token shingles with identifiers mapped to a placeholder, LSH banding for candidates);
7. **compile check** with an optional ``compile_fn`` (failures are kept, marked ``compile_error``);
8. **dimensionality**: 1D/2D/3D from the highest constant index given to the work-item functions
   (LLMPerf Table I), looking into the helpers a kernel calls.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.schema import Kernel

logger = logging.getLogger(__name__)

CompileFn = Callable[[Kernel], tuple[bool, str]]

#: macros an OpenCL C 1.2 compiler predefines that kernels commonly test
OPENCL_PREDEFINES: dict[str, str] = {
    "__OPENCL_VERSION__": "120",
    "__OPENCL_C_VERSION__": "120",
    "CL_VERSION_1_0": "100",
    "CL_VERSION_1_1": "110",
    "CL_VERSION_1_2": "120",
    "CL_VERSION_2_0": "200",
    "CL_VERSION_3_0": "300",
    "__ENDIAN_LITTLE__": "1",
    "__IMAGE_SUPPORT__": "1",
    "cl_khr_fp64": "1",
    "cl_khr_byte_addressable_store": "1",
    "cl_khr_global_int32_base_atomics": "1",
    "cl_khr_global_int32_extended_atomics": "1",
    "cl_khr_local_int32_base_atomics": "1",
    "cl_khr_local_int32_extended_atomics": "1",
}

#: the double-underscore OpenCL qualifier keywords and their plain spellings
QUALIFIERS: dict[str, str] = {
    "__kernel": "kernel",
    "__global": "global",
    "__local": "local",
    "__constant": "constant",
    "__private": "private",
    "__read_only": "read_only",
    "__write_only": "write_only",
    "__read_write": "read_write",
}

#: the clang-format style every record is formatted with
CLANG_FORMAT_STYLE = "{BasedOnStyle: LLVM, ColumnLimit: 100}"

#: work-item functions whose constant argument gives a kernel's dimensionality (LLMPerf Table I)
WORK_ITEM_FUNCTIONS = frozenset({
    "get_global_id", "get_local_id", "get_group_id", "get_global_size", "get_local_size",
    "get_num_groups", "get_global_offset",
})

DEFAULT_EXTENSIONS = (".cl",)
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024
SHINGLE_SIZE = 5


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


@dataclass
class FileFailure:
    """A file (or one kernel of it) that a stage could not handle, and why."""

    file: str
    stage: str          # "read", "preprocess", "parse" or "split"
    reason: str


@dataclass
class IngestReport:
    """Counts per stage of one ingest, with the reasons of every failure."""

    sources: list[str] = field(default_factory=list)
    files_found: int = 0
    files_read: int = 0
    non_utf8_files: int = 0
    read_failures: list[FileFailure] = field(default_factory=list)
    preprocess_failures: list[FileFailure] = field(default_factory=list)
    parse_failures: list[FileFailure] = field(default_factory=list)
    files_without_kernels: list[str] = field(default_factory=list)
    kernels_found: int = 0
    split_failures: list[FileFailure] = field(default_factory=list)
    kernels_normalized: int = 0
    formatter: str = ""
    format_fallbacks: int = 0
    exact_duplicates_removed: int = 0
    exact_duplicate_pairs: list[dict[str, Any]] = field(default_factory=list)
    near_dup_threshold: float = 0.92
    minhash_permutations: int = 0
    lsh_bands: int = 0
    lsh_rows: int = 0
    near_duplicates_removed: int = 0
    near_duplicate_pairs: list[dict[str, Any]] = field(default_factory=list)
    compile_checked: bool = False
    compile_ok: int = 0
    compile_failures: int = 0
    kept: int = 0
    dims: dict[str, int] = field(default_factory=lambda: {"1": 0, "2": 0, "3": 0})
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IngestReport:
        d = dict(d)
        for key in ("read_failures", "preprocess_failures", "parse_failures", "split_failures"):
            d[key] = [FileFailure(**f) for f in d.get(key, [])]
        return cls(**d)

    def format_table(self) -> str:
        """A plain-text table of the counts per stage, then the failures with their reasons."""
        compile_ok = str(self.compile_ok) if self.compile_checked else "unchecked"
        compile_bad = str(self.compile_failures) if self.compile_checked else "unchecked"
        rows: list[tuple[str, str]] = [
            ("files found", str(self.files_found)),
            ("files read", str(self.files_read)),
            ("  not UTF-8 (decoded as Latin-1)", str(self.non_utf8_files)),
            ("  read failures", str(len(self.read_failures))),
            ("  preprocess failures", str(len(self.preprocess_failures))),
            ("  parse failures", str(len(self.parse_failures))),
            ("  files without kernels", str(len(self.files_without_kernels))),
            ("kernels found", str(self.kernels_found)),
            ("  split failures", str(len(self.split_failures))),
            ("kernels after normalization", str(self.kernels_normalized)),
            ("  formatter fallbacks", str(self.format_fallbacks)),
            ("exact duplicates removed", str(self.exact_duplicates_removed)),
            (f"near duplicates removed (>= {self.near_dup_threshold:g})", str(self.near_duplicates_removed)),
            ("compile ok", compile_ok),
            ("compile failures (kept, marked)", compile_bad),
            ("kept", str(self.kept)),
            ("dims 1D / 2D / 3D",
             f"{self.dims.get('1', 0)} / {self.dims.get('2', 0)} / {self.dims.get('3', 0)}"),
        ]
        width = max(len(r[0]) for r in rows) + 2
        vwidth = max(len(r[1]) for r in rows)
        lines = [f"{'stage':<{width}}{'count':>{vwidth}}", "-" * (width + vwidth)]
        lines += [f"{name:<{width}}{value:>{vwidth}}" for name, value in rows]
        lines.append(f"formatter: {self.formatter}")
        failures = self.read_failures + self.preprocess_failures + self.parse_failures + self.split_failures
        if failures:
            lines.append("failures:")
            lines += [f"  [{f.stage}] {f.file}: {_one_line(f.reason)}" for f in failures]
        return "\n".join(lines)


def _one_line(text: str, limit: int = 200) -> str:
    s = " ".join(text.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# Stage 1: reading and preprocessing
# --------------------------------------------------------------------------------------------


def decode_source(data: bytes) -> tuple[str, bool]:
    """Text of a source file and whether it was not valid UTF-8 (then decoded as Latin-1)."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        text, non_utf8 = data.decode("utf-8"), False
    except UnicodeDecodeError:
        text, non_utf8 = data.decode("latin-1"), True
    return text.replace("\r\n", "\n").replace("\r", "\n"), non_utf8


class PreprocessError(ValueError):
    """A file could not be preprocessed (missing include, ``#error``, malformed directive)."""


def _make_preprocessor_class() -> type:
    try:
        import pcpp
    except ImportError as e:  # pragma: no cover - pcpp is a declared dependency
        raise ImportError("corpus ingest needs the 'pcpp' package (pip install pcpp)") from e

    class _OpenCLPreprocessor(pcpp.Preprocessor):  # type: ignore[misc]
        """pcpp with errors collected instead of printed and missing includes fatal."""

        def __init__(self) -> None:
            super().__init__()
            self.line_directive = None
            self.errors: list[str] = []
            self.macros.pop("__PCPP__", None)

        def on_error(self, file: str, line: int, msg: str) -> None:
            self.errors.append(f"{file}:{line}: {msg}")
            self.return_code += 1

        def on_file_open(self, is_system_include: bool, includepath: str) -> io.StringIO:
            with open(includepath, "rb") as f:
                data = f.read()
            return io.StringIO(decode_source(data)[0])

        def on_include_not_found(self, is_malformed: bool, is_system_include: bool, curdir: str,
                                 includepath: str) -> str:
            where = ""
            if self.lastdirective is not None:
                where = f"{self.lastdirective.source}:{self.lastdirective.lineno}: "
            if is_malformed:
                raise PreprocessError(f"{where}malformed #include {includepath}")
            kind = "<...>" if is_system_include else '"..."'
            raise PreprocessError(f"{where}include file {kind} not found: {includepath}")

        def on_directive_unknown(self, directive: Any, toks: list[Any], ifpassthru: bool,
                                 precedingtoks: list[Any]) -> bool | None:
            text = "".join(t.value for t in toks).strip()
            if directive.value == "error":
                self.errors.append(f"{directive.source}:{directive.lineno}: #error {text}")
                return True
            if directive.value == "warning":
                logger.debug("%s:%s: #warning %s", directive.source, directive.lineno, text)
                return True
            return None

    return _OpenCLPreprocessor


@functools.lru_cache(maxsize=1)
def _preprocessor_class() -> type:
    return _make_preprocessor_class()


def preprocess(text: str, filename: str | os.PathLike[str], *,
               defines: dict[str, str] | None = None,
               include_dirs: Sequence[str | os.PathLike[str]] = ()) -> str:
    """Expand macros and includes of one OpenCL source; keep ``#pragma`` lines.

    Includes are searched relative to the including file's directory, then in ``include_dirs``.
    Raise :class:`PreprocessError` on a missing include, ``#error`` or another directive error.
    """
    pp = _preprocessor_class()()
    out = io.StringIO()
    try:
        for d in include_dirs:
            pp.add_path(str(d))
        for name, value in {**OPENCL_PREDEFINES, **(defines or {})}.items():
            pp.define(f"{name} {value if value != '' else '1'}")
        pp.parse(text, source=str(filename))
        pp.write(out)
    except PreprocessError:
        raise
    except Exception as e:  # pcpp raises assorted errors on malformed input
        raise PreprocessError(f"preprocessor failed: {type(e).__name__}: {e}") from e
    if pp.errors:
        raise PreprocessError("; ".join(pp.errors))
    return out.getvalue()


def defines_to_build_options(defines: dict[str, str] | None) -> str:
    """The ``-D`` option string of a defines mapping (an empty value means ``-DNAME``, i.e. 1)."""
    opts = []
    for name, value in (defines or {}).items():
        if any(c.isspace() for c in name + value):
            raise ValueError(f"define {name}={value!r}: whitespace cannot go into an OpenCL -D option")
        opts.append(f"-D{name}={value}" if value != "" else f"-D{name}")
    return " ".join(opts)


# --------------------------------------------------------------------------------------------
# Stage 2: comments and qualifiers
# --------------------------------------------------------------------------------------------

_LEX = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<number>0[xX][0-9a-fA-F.]*(?:[pP][+-]?\d+)?[a-zA-Z]*
               |(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z_0-9]*)
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<punct>->|\+\+|--|<<=|>>=|<<|>>|&&|\|\||\#\#|\.\.\.|[-+*/%&|^!=<>]=|[^\s\w])
  | (?P<other>.)
    """,
    re.S | re.X,
)


def strip_comments(text: str) -> str:
    """Remove ``//`` and ``/* */`` comments (not inside string or character literals)."""
    out = []
    for m in _LEX.finditer(text):
        if m.lastgroup == "comment":
            out.append(" " if m.group().startswith("/*") else "")
        else:
            out.append(m.group())
    return "".join(out)


def strip_qualifiers(text: str) -> str:
    """Rewrite the double-underscore OpenCL qualifier keywords (only those) to their plain form."""
    out = []
    for m in _LEX.finditer(text):
        tok = m.group()
        out.append(QUALIFIERS.get(tok, tok) if m.lastgroup == "ident" else tok)
    return "".join(out)


def normalize_source(text: str) -> str:
    """Stage 2 on a preprocessed text: comments stripped, qualifier keywords plain."""
    return strip_qualifiers(strip_comments(text))


# --------------------------------------------------------------------------------------------
# Stage 3: splitting into self-contained kernels (libclang)
# --------------------------------------------------------------------------------------------


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
_PARSE_NAME = "corpus_input.cl"


def _ref_kinds() -> frozenset[Any]:
    import clang.cindex as ci

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
    import clang.cindex as ci

    from kernelcast import clang as kc

    data = text.encode("utf-8")
    tu = kc.parse(text, _PARSE_NAME)
    kernels = kc.find_kernels(tu, _PARSE_NAME)
    if not kernels:
        return []
    tops = [c for c in tu.cursor.get_children()
            if c.location.file is not None and c.location.file.name == _PARSE_NAME]
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


# --------------------------------------------------------------------------------------------
# Stage 4: formatting
# --------------------------------------------------------------------------------------------


def find_clang_format() -> str | None:
    """The clang-format binary: the ``clang-format`` package's, the venv's, or one on PATH."""
    candidates: list[str] = []
    try:
        import clang_format

        candidates.append(clang_format.get_executable("clang-format"))
    except (ImportError, AttributeError):
        pass
    candidates.append(str(Path(sys.executable).parent / "clang-format"))
    found = shutil.which("clang-format")
    if found:
        candidates.append(found)
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


class Formatter:
    """Formats record text with clang-format, or normalizes whitespace where it is missing."""

    def __init__(self, use_clang_format: bool = True) -> None:
        self.exe = find_clang_format() if use_clang_format else None
        self.description = "whitespace normalization (clang-format unavailable)"
        if self.exe is not None:
            try:
                res = subprocess.run([self.exe, "--version"], capture_output=True, text=True, timeout=30,
                                     check=True)
                version = res.stdout.strip().split("version")[-1].strip().split()[0]
                self.description = f"clang-format {version} style={CLANG_FORMAT_STYLE}"
            except (OSError, subprocess.SubprocessError, IndexError) as e:
                logger.warning("clang-format at %s does not run (%s); normalizing whitespace only",
                               self.exe, e)
                self.exe = None
        if self.exe is None and use_clang_format:
            logger.warning("clang-format not found; normalizing whitespace only")

    def __call__(self, text: str) -> tuple[str, bool]:
        """Formatted text and whether clang-format formatted it."""
        if self.exe is not None:
            try:
                res = subprocess.run(
                    [self.exe, f"--style={CLANG_FORMAT_STYLE}", "--assume-filename=kernel.cl"],
                    input=text, capture_output=True, text=True, timeout=60,
                )
                if res.returncode == 0 and res.stdout.strip():
                    return res.stdout.strip() + "\n", True
                logger.debug("clang-format failed (%s): %s", res.returncode, res.stderr.strip())
            except (OSError, subprocess.SubprocessError) as e:
                logger.debug("clang-format failed: %s", e)
        return normalize_whitespace(text), False


def normalize_whitespace(text: str, indent: str = "  ") -> str:
    """Fallback formatting where clang-format is missing: one statement or brace per line,
    indented by brace depth, single spaces between tokens; directive lines kept as they are."""
    out: list[str] = []
    line: list[str] = []
    depth = 0
    parens = 0

    def flush() -> None:
        if line:
            text = line[0]
            for prev, tok in zip(line, line[1:]):
                text += tok if tok in (",", ";", ")", "]", "[") or prev in ("(", "[") else " " + tok
            out.append(indent * depth + text)
            line.clear()

    for raw in text.split("\n"):
        if raw.lstrip().startswith("#"):
            flush()
            out.append(raw.strip())
            continue
        for m in _LEX.finditer(raw):
            if m.lastgroup in ("ws", "comment"):
                continue
            tok = m.group()
            if tok in ("(", "["):
                parens += 1
            elif tok in (")", "]") and parens > 0:
                parens -= 1
            if tok == "}" and parens == 0:
                flush()
                depth = max(0, depth - 1)
            line.append(tok)
            if parens == 0 and tok in ("{", "}", ";"):
                if tok == ";" and len(line) == 1 and out and not out[-1].lstrip().startswith("#"):
                    out[-1] += ";"          # the ';' closing a struct or initializer
                    line.clear()
                    continue
                flush()
                if tok == "{":
                    depth += 1
    flush()
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Stage 5: near-duplicate detection (MinHash + LSH)
# --------------------------------------------------------------------------------------------

_KEYWORDS = frozenset("""
auto break case char const continue default do double else enum extern float for goto if inline int
long register restrict return short signed sizeof static struct switch typedef union unsigned void
volatile while bool half uchar ushort uint ulong size_t ptrdiff_t intptr_t uintptr_t
kernel global local constant private read_only write_only read_write __attribute__ __restrict
image1d_t image2d_t image3d_t image1d_array_t image1d_buffer_t image2d_array_t sampler_t event_t
true false NULL
""".split())

_VECTOR_TYPE = re.compile(
    r"^(?:char|uchar|short|ushort|int|uint|long|ulong|float|double|half)(?:2|3|4|8|16)$")

_BUILTINS = frozenset("""
get_global_id get_local_id get_group_id get_global_size get_local_size get_num_groups get_work_dim
get_global_offset barrier mem_fence read_mem_fence write_mem_fence
acos acosh acospi asin asinh asinpi atan atan2 atanh atanpi atan2pi cbrt ceil copysign cos cosh cospi
erfc erf exp exp2 exp10 expm1 fabs fdim floor fma fmax fmin fmod fract frexp hypot ilogb ldexp
lgamma log log2 log10 log1p logb mad maxmag minmag modf nan nextafter pow pown powr remainder remquo
rint rootn round rsqrt sin sincos sinh sinpi sqrt tan tanh tanpi tgamma trunc
native_cos native_divide native_exp native_exp2 native_exp10 native_log native_log2 native_log10
native_powr native_recip native_rsqrt native_sin native_sqrt native_tan
half_cos half_divide half_exp half_log half_powr half_recip half_rsqrt half_sin half_sqrt half_tan
abs abs_diff add_sat hadd rhadd clamp clz mad_hi mad_sat max min mul_hi rotate sub_sat upsample
popcount mad24 mul24 degrees radians mix step smoothstep sign cross dot distance length normalize
fast_distance fast_length fast_normalize isequal isnotequal isgreater isgreaterequal isless
islessequal isfinite isinf isnan isnormal signbit any all bitselect select shuffle shuffle2
async_work_group_copy async_work_group_strided_copy wait_group_events prefetch printf
""".split())

_BUILTIN_PREFIXES = ("convert_", "as_", "vload", "vstore", "atomic_", "atom_", "read_image",
                     "write_image", "get_image")


def dedup_tokens(text: str) -> list[str]:
    """Tokens for near-duplicate detection: user identifiers become ``ID``."""
    toks: list[str] = []
    for m in _LEX.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        tok = m.group()
        if kind == "ident" and not (tok in _KEYWORDS or tok in _BUILTINS or _VECTOR_TYPE.match(tok)
                                    or tok.startswith(_BUILTIN_PREFIXES)):
            tok = "ID"
        toks.append(tok)
    return toks


def shingle_hashes(tokens: Sequence[str], k: int = SHINGLE_SIZE) -> np.ndarray:
    """Distinct 64-bit hashes of the k-token shingles (the whole sequence if shorter)."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    n = max(1, len(tokens) - k + 1)
    seen = set()
    for i in range(n):
        s = "\x1f".join(tokens[i:i + k]).encode("utf-8")
        seen.add(int.from_bytes(hashlib.blake2b(s, digest_size=8).digest(), "little"))
    return np.fromiter(seen, dtype=np.uint64, count=len(seen))


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


class MinHasher:
    """MinHash signatures with ``num_perm`` seeded hash functions ``h_i(x) = mix64(x ^ seed_i)``."""

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self.seeds = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64,
                                  endpoint=True)

    def signature(self, hashes: np.ndarray, block: int = 4096) -> np.ndarray:
        sig = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for s in range(0, len(hashes), block):
            x = _mix64(hashes[None, s:s + block] ^ self.seeds[:, None])
            sig = np.minimum(sig, x.min(axis=1))
        return sig

    @staticmethod
    def similarity(a: np.ndarray, b: np.ndarray) -> float:
        """Estimated Jaccard similarity of the sets behind two signatures."""
        return float(np.mean(a == b))


def lsh_params(num_perm: int, threshold: float, min_recall: float = 0.995) -> tuple[int, int]:
    """(bands, rows): the most rows per band that still makes a pair at ``threshold`` a candidate
    with probability at least ``min_recall``."""
    for rows in sorted((r for r in range(1, num_perm + 1) if num_perm % r == 0), reverse=True):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold ** rows) ** bands >= min_recall:
            return bands, rows
    return num_perm, 1


class NearDuplicateIndex:
    """Kept signatures in LSH buckets; :meth:`query` returns the most similar kept item."""

    def __init__(self, num_perm: int, threshold: float) -> None:
        self.threshold = threshold
        self.bands, self.rows = lsh_params(num_perm, threshold)
        self.buckets: dict[tuple[int, bytes], list[int]] = {}
        self.signatures: list[np.ndarray] = []

    def _keys(self, sig: np.ndarray) -> list[tuple[int, bytes]]:
        return [(b, sig[b * self.rows:(b + 1) * self.rows].tobytes()) for b in range(self.bands)]

    def query(self, sig: np.ndarray) -> tuple[int, float] | None:
        best: tuple[int, float] | None = None
        seen: set[int] = set()
        for key in self._keys(sig):
            for idx in self.buckets.get(key, ()):
                if idx in seen:
                    continue
                seen.add(idx)
                sim = MinHasher.similarity(sig, self.signatures[idx])
                if sim >= self.threshold and (best is None or sim > best[1]):
                    best = (idx, sim)
        return best

    def add(self, sig: np.ndarray) -> int:
        idx = len(self.signatures)
        self.signatures.append(sig)
        for key in self._keys(sig):
            self.buckets.setdefault(key, []).append(idx)
        return idx


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


@dataclass
class _SourceFile:
    path: Path
    origin: str


def _collect_files(sources: Sequence[str | os.PathLike[str]], extensions: Sequence[str],
                   report: IngestReport) -> list[_SourceFile]:
    files: list[_SourceFile] = []
    seen: set[Path] = set()
    exts = tuple(e.lower() for e in extensions)
    for src in sources:
        p = Path(src)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix.lower() in exts and f.is_file())
            items = [(f, (Path(p.resolve().name) / f.relative_to(p)).as_posix()) for f in found]
        else:
            items = [(p, p.name)]
        for f, origin in items:
            key = f.resolve()
            if key in seen:
                continue
            seen.add(key)
            files.append(_SourceFile(f, origin))
    report.files_found = len(files)
    return files


def _progress(items: list[_SourceFile], enabled: bool) -> Iterable[_SourceFile]:
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a declared dependency
        return items
    return tqdm(items, desc="ingest", unit="file")


def ingest(
    sources: list[str | Path],
    *,
    compile_fn: Callable[[Kernel], tuple[bool, str]] | None = None,
    near_dup_threshold: float = 0.92,
    progress: bool = False,
    defines: dict[str, str] | None = None,
    include_dirs: Sequence[str | os.PathLike[str]] = (),
    extensions: Sequence[str] = DEFAULT_EXTENSIONS,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    num_perm: int = 128,
    use_clang_format: bool = True,
) -> tuple[list[dict[str, Any]], IngestReport]:
    """Read OpenCL sources (files or directories, recursively) into deduplicated kernel records.

    Returns the records (``Kernel.to_dict()`` plus ``compile_status``, ``compile_log``,
    ``original_file`` and ``sha256``) and the :class:`IngestReport` of the stages.
    """
    from kernelcast.clang import ParseError

    t0 = time.monotonic()
    report = IngestReport(sources=[str(s) for s in sources], near_dup_threshold=near_dup_threshold,
                          minhash_permutations=num_perm)
    build_options = defines_to_build_options(defines)
    formatter = Formatter(use_clang_format)
    report.formatter = formatter.description

    # stages 1-4, per file
    records: list[dict[str, Any]] = []
    for sf in _progress(_collect_files(sources, extensions, report), progress):
        try:
            size = sf.path.stat().st_size
            if size > max_file_bytes:
                raise OSError(f"file too large ({size} bytes > {max_file_bytes})")
            data = sf.path.read_bytes()
            if b"\0" in data:
                raise OSError("binary content (NUL bytes)")
        except OSError as e:
            report.read_failures.append(FileFailure(sf.origin, "read", str(e)))
            continue
        text, non_utf8 = decode_source(data)
        report.files_read += 1
        report.non_utf8_files += int(non_utf8)
        try:
            expanded = preprocess(text, sf.path, defines=defines, include_dirs=include_dirs)
        except PreprocessError as e:
            reason = str(e).replace(str(sf.path.resolve()), sf.origin).replace(str(sf.path), sf.origin)
            report.preprocess_failures.append(FileFailure(sf.origin, "preprocess", reason))
            continue
        normalized = normalize_source(expanded)
        try:
            extracted = split_kernels(normalized)
        except ParseError as e:
            reason = str(e).replace(_PARSE_NAME, "(preprocessed)", 1)
            report.parse_failures.append(FileFailure(sf.origin, "parse", reason))
            continue
        except Exception as e:  # libclang surprises must not end a crawl
            logger.exception("splitting %s failed", sf.origin)
            report.split_failures.append(FileFailure(sf.origin, "split", f"{type(e).__name__}: {e}"))
            continue
        if not extracted:
            report.files_without_kernels.append(sf.origin)
            continue
        report.kernels_found += len(extracted)
        for ek in extracted:
            source, formatted = formatter(ek.source)
            report.format_fallbacks += int(not formatted and formatter.exe is not None)
            kernel = Kernel(source=source, name=ek.name, language="opencl", build_options=build_options,
                            dims=ek.dims, origin=sf.origin)
            rec = kernel.to_dict()
            rec.update(compile_status="unchecked", compile_log="", original_file=str(sf.path.resolve()),
                       sha256=hashlib.sha256(source.encode("utf-8")).hexdigest())
            records.append(rec)
    report.kernels_normalized = len(records)

    # stage 5: exact, then near duplicates
    first_by_hash: dict[str, dict[str, Any]] = {}
    unique: list[dict[str, Any]] = []
    for rec in records:
        kept = first_by_hash.get(rec["sha256"])
        if kept is not None:
            report.exact_duplicate_pairs.append(_pair(kept, rec, 1.0))
            continue
        first_by_hash[rec["sha256"]] = rec
        unique.append(rec)
    report.exact_duplicates_removed = len(records) - len(unique)

    hasher = MinHasher(num_perm)
    index = NearDuplicateIndex(num_perm, near_dup_threshold)
    report.lsh_bands, report.lsh_rows = index.bands, index.rows
    kept_records: list[dict[str, Any]] = []
    indexed: list[dict[str, Any]] = []          # kept records with a signature, by index position
    for rec in unique:
        hashes = shingle_hashes(dedup_tokens(rec["source"]))
        if len(hashes) == 0:
            kept_records.append(rec)
            continue
        sig = hasher.signature(hashes)
        hit = index.query(sig)
        if hit is not None:
            report.near_duplicate_pairs.append(_pair(indexed[hit[0]], rec, hit[1]))
            continue
        kept_records.append(rec)
        index.add(sig)
        indexed.append(rec)
    report.near_duplicates_removed = len(unique) - len(kept_records)

    # stage 6: compile check
    if compile_fn is not None:
        report.compile_checked = True
        for rec in kept_records:
            try:
                ok, log = compile_fn(Kernel.from_dict(rec))
            except Exception as e:  # a compile function must not end a crawl
                ok, log = False, f"compile_fn raised {type(e).__name__}: {e}"
            rec["compile_status"] = "ok" if ok else "compile_error"
            rec["compile_log"] = log
            if ok:
                report.compile_ok += 1
            else:
                report.compile_failures += 1

    # stage 7: dimensionality counts (computed per kernel while splitting)
    report.kept = len(kept_records)
    report.dims = {"1": 0, "2": 0, "3": 0}
    for rec in kept_records:
        report.dims[str(rec["dims"])] = report.dims.get(str(rec["dims"]), 0) + 1
    report.elapsed_s = round(time.monotonic() - t0, 3)
    logger.info("ingest: %d files, %d kernels found, %d kept", report.files_found, report.kernels_found,
                report.kept)
    return kept_records, report


def _pair(kept: dict[str, Any], removed: dict[str, Any], similarity: float) -> dict[str, Any]:
    return {
        "kept": kept["id"], "removed": removed["id"], "similarity": round(similarity, 4),
        "kept_name": kept["name"], "removed_name": removed["name"],
        "kept_origin": kept["origin"], "removed_origin": removed["origin"],
    }


def ingest_to(out_dir: str | os.PathLike[str], sources: list[str | Path], **kw: Any) -> IngestReport:
    """:func:`ingest` and write the corpus (``kernels.jsonl`` + ``manifest.json``) to ``out_dir``."""
    from datagen.corpus_store import write_corpus

    records, report = ingest(sources, **kw)
    manifest = {
        "kind": "kernel_corpus",
        "created_by": "datagen.corpus.ingest",
        "sources": [str(s) for s in sources],
        "defines": dict(kw.get("defines") or {}),
        "opencl_predefines": OPENCL_PREDEFINES,
        "report": report.to_dict(),
    }
    write_corpus(out_dir, records, manifest)
    return report


# --------------------------------------------------------------------------------------------
# Compile check on an OpenCL device
# --------------------------------------------------------------------------------------------

CL_STD_OPTION = "-cl-std=CL1.2"


@functools.lru_cache(maxsize=1)
def default_opencl_device() -> Any:
    """The device :func:`instrument.backends.opencl.select_device` picks (the first GPU that
    builds a trivial kernel, else the first device that does), as a pyopencl device."""
    from instrument.backends.opencl import DeviceNotFound, cl_device, select_device

    try:
        return cl_device(select_device("auto"))
    except DeviceNotFound as e:
        raise RuntimeError(str(e)) from None


def opencl_compile_fn(device: Any = None) -> Callable[[Kernel], tuple[bool, str]]:
    """A compile check building each kernel with ``-cl-std=CL1.2`` plus its build options on an
    OpenCL device (default: :func:`default_opencl_device`). Returns ``(ok, build log)``."""
    import pyopencl as cl

    dev = device if device is not None else default_opencl_device()
    ctx = cl.Context([dev])

    def compile_kernel(kernel: Kernel) -> tuple[bool, str]:
        if kernel.language != "opencl":
            return False, f"not an OpenCL kernel (language={kernel.language})"
        options = " ".join(o for o in (CL_STD_OPTION, kernel.build_options) if o)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prg = cl.Program(ctx, kernel.source).build(options=options)
            log = prg.get_build_info(dev, cl.program_build_info.LOG) or ""
            cl.Kernel(prg, kernel.name)
        except cl.Error as e:
            return False, str(e)
        return True, log.strip()

    return compile_kernel

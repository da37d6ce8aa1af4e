"""Stages 1-3 of corpus ingest: read and preprocess a source (``pcpp``: macros, local
includes, the OpenCL predefines), then strip comments and the double-underscore qualifier
keywords. :data:`LEX` is the C tokenizer the later stages share.
"""

from __future__ import annotations

import codecs
import functools
import io
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import pcpp

from kernelcast.errors import InputError

logger = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------------------------
# Stages 1-2: reading and preprocessing
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


class PreprocessError(InputError, ValueError):
    """A file could not be preprocessed (missing include, ``#error``, malformed directive)."""


def _make_preprocessor_class() -> type:
    class _OpenCLPreprocessor(pcpp.Preprocessor):
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
# Stage 3: comments and qualifiers (normalize)
# --------------------------------------------------------------------------------------------

#: one C token (or run of whitespace, or comment) per match; the group name is its kind
LEX = re.compile(
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
    for m in LEX.finditer(text):
        if m.lastgroup == "comment":
            out.append(" " if m.group().startswith("/*") else "")
        else:
            out.append(m.group())
    return "".join(out)


def strip_qualifiers(text: str) -> str:
    """Rewrite the double-underscore OpenCL qualifier keywords (only those) to their plain form."""
    out = []
    for m in LEX.finditer(text):
        tok = m.group()
        out.append(QUALIFIERS.get(tok, tok) if m.lastgroup == "ident" else tok)
    return "".join(out)


def normalize_source(text: str) -> str:
    """Stage 2 on a preprocessed text: comments stripped, qualifier keywords plain."""
    return strip_qualifiers(strip_comments(text))

"""Stage 5 of corpus ingest: format each record with ``clang-format`` (a fixed built-in style), or
normalize its whitespace where clang-format is missing.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import clang_format
from kernelcast.datagen.corpus.preprocess import LEX

logger = logging.getLogger(__name__)


#: the clang-format style every record is formatted with
CLANG_FORMAT_STYLE = "{BasedOnStyle: LLVM, ColumnLimit: 100}"


def find_clang_format() -> str | None:
    """The clang-format binary: the ``clang-format`` package's, the venv's, or one on PATH."""
    candidates: list[str] = []
    try:
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
        for m in LEX.finditer(raw):
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

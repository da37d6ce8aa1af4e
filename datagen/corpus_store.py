"""A corpus on disk: ``DIR/kernels.jsonl`` (one kernel record per line) and ``DIR/manifest.json``.

Each line is :meth:`kernelcast.schema.Kernel.to_dict` plus stage fields (``compile_status``,
``compile_log``, ``near_duplicate_of``...). Writing goes to a temporary file renamed into place,
so a crash never leaves a half-written corpus.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kernelcast.errors import InputError
from kernelcast.schema import SCHEMA_VERSION, Kernel


class CorpusError(InputError, ValueError):
    """A corpus file that cannot be read (a damaged ``kernels.jsonl``), naming the file and line."""


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_corpus(directory: str | os.PathLike[str], records: Iterable[dict[str, Any]],
                 manifest: dict[str, Any]) -> Path:
    """Write kernel records (dicts with at least the Kernel fields) and a manifest."""
    d = Path(directory)
    lines = []
    for r in records:
        r = dict(r)
        if "id" not in r:
            r["id"] = Kernel.from_dict(r).id
        lines.append(json.dumps(r, sort_keys=True))
    _atomic_write(d / "kernels.jsonl", "\n".join(lines) + ("\n" if lines else ""))
    m = {"schema_version": SCHEMA_VERSION, **manifest, "kernels": len(lines)}
    _atomic_write(d / "manifest.json", json.dumps(m, indent=2, sort_keys=True) + "\n")
    return d


def read_records(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(directory) / "kernels.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{directory}: not a corpus (no kernels.jsonl)")
    out: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                except ValueError as e:
                    raise CorpusError(f"{path} line {i}: not a JSON record ({e}); the corpus is damaged: "
                                      f"regenerate it (kernelcast corpus ingest/synth)") from None
                if not isinstance(r, dict) or not isinstance(r.get("source"), str) or \
                        not isinstance(r.get("name"), str):
                    raise CorpusError(f"{path} line {i}: not a kernel record (needs 'source' and 'name'); the "
                                      f"corpus is damaged: regenerate it (kernelcast corpus ingest/synth)")
                out.append(r)
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text (byte {e.start}); the corpus is damaged: regenerate it "
                          f"(kernelcast corpus ingest/synth)") from None
    return out


def read_corpus(directory: str | os.PathLike[str], *, compiled_only: bool = True) -> list[Kernel]:
    """The kernels of a corpus; by default without those that failed the compile check."""
    out = []
    for r in read_records(directory):
        if compiled_only and r.get("compile_status", "ok") not in ("ok", "unchecked"):
            continue
        out.append(Kernel.from_dict(r))
    return out


def bundled_dir() -> Path:
    """The bundled corpus's ``.cl`` files."""
    return Path(__file__).parent / "bundled"

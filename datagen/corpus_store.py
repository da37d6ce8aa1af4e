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

from kernelcast.schema import SCHEMA_VERSION, Kernel


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
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_corpus(directory: str | os.PathLike[str], *, compiled_only: bool = True) -> list[Kernel]:
    """The kernels of a corpus; by default without those that failed the compile check."""
    out = []
    for r in read_records(directory):
        if compiled_only and r.get("compile_status", "ok") not in ("ok", "unchecked"):
            continue
        out.append(Kernel.from_dict(r))
    return out

"""Kernels of a corpus by name: a corpus directory, or ``bundled`` (the bundled ``.cl`` files,
ingested on the fly)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kernelcast.datagen.corpus.driver import ingest_to
from kernelcast.datagen.corpus_store import bundled_dir, read_corpus

from kernelcast.errors import UsageError
from kernelcast.schema import Kernel


def load_corpus_kernels(spec: str, limit: int | None = None, device: str | None = None) -> tuple[list[Kernel], str]:
    """Kernels of a corpus directory and its description; ``bundled`` ingests the bundled corpus
    on the fly (into a temporary directory removed once read). :class:`UsageError` for a
    directory that is not a corpus."""
    if spec == "bundled":
        with tempfile.TemporaryDirectory(prefix="kernelcast-bundled-") as tmp:
            ingest_to(Path(tmp), [bundled_dir()], compile_fn=None)
            kernels = read_corpus(Path(tmp))
        desc = "bundled"
    else:
        p = Path(spec)
        if not (p / "kernels.jsonl").is_file():
            raise UsageError(f"{spec}: not a corpus directory (no kernels.jsonl); make one with "
                             f"'kernelcast corpus ingest' or 'kernelcast corpus synth'")
        kernels = read_corpus(p)
        desc = str(p.resolve())
    if limit is not None:
        kernels = kernels[:limit]
    return kernels, desc

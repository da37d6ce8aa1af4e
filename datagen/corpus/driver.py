"""The corpus ingest driver: every stage in order over a list of files and directories, the
exact and near deduplication, the optional compile check, and the corpus written to disk.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.datagen.corpus.dedup import MinHasher, NearDuplicateIndex, dedup_tokens, shingle_hashes
from kernelcast.datagen.corpus.formatting import Formatter
from kernelcast.datagen.corpus.preprocess import (
    OPENCL_PREDEFINES,
    PreprocessError,
    decode_source,
    defines_to_build_options,
    normalize_source,
    preprocess,
)
from kernelcast.datagen.corpus.report import FileFailure, IngestReport
from kernelcast.datagen.corpus.split import PARSE_NAME, split_kernels
from kernelcast.datagen.corpus_store import write_corpus
from tqdm import tqdm

from kernelcast.clang import ParseError
from kernelcast.schema import Kernel

logger = logging.getLogger(__name__)


DEFAULT_EXTENSIONS = (".cl",)
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024


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
            reason = str(e).replace(PARSE_NAME, "(preprocessed)", 1)
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

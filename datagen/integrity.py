"""Check and repair a dataset directory (``kernelcast dataset check|repair DS``).

What can be damaged: a Parquet shard (truncated, overwritten, not Parquet), ``manifest.json`` (not
JSON, not an object, missing while rows exist), lines of ``journal.jsonl`` (torn by a kill, or
garbage), the dataset's kernel sources ``kernels/kernels.jsonl``, and temporary files a killed
compaction left behind. :func:`check_dataset` names each; :func:`repair_dataset` moves every
damaged file (or the damaged journal lines) into ``DS/quarantine/<time>/``, never deleting
anything, and keeps every good row. A rerun of the same ``datagen`` command then re-measures the
rows that were lost (their row keys are no longer stored) and rewrites the kernel sources.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from kernelcast.datagen.corpus_store import CorpusError, read_records
from kernelcast.datagen.dataset import (
    JOURNAL,
    MANIFEST,
    SHARDS,
    DatasetDamaged,
    _atomic_write_text,
    _shard_paths,
    fsync_dir,
    load_manifest,
    read_dataset,
    read_shard,
)

from kernelcast.errors import UsageError

QUARANTINE = "quarantine"
KERNELS = Path("kernels") / "kernels.jsonl"


@dataclass
class Damage:
    """One damaged file (or journal lines) of a dataset."""

    path: str            # relative to the dataset directory
    what: str            # manifest / shard / journal / kernels / leftover
    detail: str
    rows_lost: int | None = None     # rows it held, where known (None: unknown)
    lines: list[int] = field(default_factory=list)      # damaged journal line numbers


@dataclass
class CheckReport:
    root: str
    shards: int
    shard_rows: int
    journal_rows: int
    damage: list[Damage]

    @property
    def ok(self) -> bool:
        return not self.damage

    @property
    def rows(self) -> int:
        return self.shard_rows + self.journal_rows

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "ok": self.ok, "shards": self.shards, "shard_rows": self.shard_rows,
                "journal_rows": self.journal_rows, "good_rows": self.rows, "damage": [asdict(d) for d in self.damage]}

    def format(self) -> str:
        lines = [f"dataset {self.root}: {self.shards} readable shard(s) with {self.shard_rows} rows, "
                 f"{self.journal_rows} journal rows"]
        if self.ok:
            lines.append("no damage found")
            return "\n".join(lines)
        lines.append(f"{len(self.damage)} damaged file(s):")
        for d in self.damage:
            lost = "" if d.rows_lost is None else f" ({d.rows_lost} rows)"
            lines.append(f"  {d.path}: {d.what}: {d.detail}{lost}")
        lines.append(f"run 'kernelcast dataset repair {self.root}' to quarantine them (every good row is kept; "
                     f"rerunning datagen re-measures what was lost)")
        return "\n".join(lines)


def _dataset_dir(root: str | os.PathLike[str]) -> Path:
    p = Path(root)
    if not p.exists():
        raise UsageError(f"{root}: no such dataset directory")
    if not p.is_dir():
        raise UsageError(f"{root}: not a dataset directory (a file)")
    if not (p / MANIFEST).exists() and not (p / SHARDS).is_dir() and not (p / JOURNAL).exists():
        raise UsageError(f"{root}: not a dataset (no {MANIFEST}, {SHARDS}/ or {JOURNAL})")
    return p


def _journal_lines(path: Path) -> tuple[list[str], list[int]]:
    """Good lines (JSON objects with a row key) and the numbers of the damaged ones."""
    good: list[str] = []
    bad: list[int] = []
    if not path.is_file():
        return good, bad
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                r = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                bad.append(i)
                continue
            if not isinstance(r, dict) or "row_key" not in r:
                bad.append(i)
                continue
            good.append(raw.decode("utf-8").rstrip("\n"))
    return good, bad


def check_dataset(root: str | os.PathLike[str]) -> CheckReport:
    """Read every file of the dataset and name the damaged ones (nothing is changed)."""
    p = _dataset_dir(root)
    damage: list[Damage] = []
    if not (p / MANIFEST).exists():
        damage.append(Damage(MANIFEST, "manifest", "missing (rows exist without it)"))
    else:
        try:
            load_manifest(p)
        except DatasetDamaged as e:
            damage.append(Damage(MANIFEST, "manifest", e.what))
    shards = rows = 0
    for s in _shard_paths(p):
        try:
            rows += len(read_shard(p, s))
            shards += 1
        except DatasetDamaged as e:
            damage.append(Damage(str(s.relative_to(p)), "shard", e.what, _footer_rows(s)))
    if (p / SHARDS).is_dir():
        for tmp in sorted((p / SHARDS).glob(".*.tmp")):
            damage.append(Damage(str(tmp.relative_to(p)), "leftover", "temporary file of an interrupted compaction"))
    good, bad = _journal_lines(p / JOURNAL)
    if bad:
        damage.append(Damage(JOURNAL, "journal", f"{len(bad)} damaged line(s) (not a JSON row): "
                                                 f"{', '.join(map(str, bad[:10]))}{' ...' if len(bad) > 10 else ''}",
                             len(bad), bad))
    if (p / KERNELS).exists():
        try:
            read_records(p / KERNELS.parent)
        except CorpusError as e:
            detail = str(e).split(";")[0].replace(str(p / KERNELS), "").replace(str(p / KERNELS.parent), "")
            damage.append(Damage(str(KERNELS), "kernels", detail.lstrip(": ").strip()))
    return CheckReport(str(p), shards, rows, len(good), damage)


def _footer_rows(path: Path) -> int | None:
    """Rows a damaged shard's footer claims (None when even the footer is unreadable)."""
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # noqa: BLE001 - any failure means: unknown
        return None


@dataclass
class RepairReport:
    root: str
    quarantine: str | None
    moved: list[str]
    journal_lines_dropped: int
    manifest_rebuilt: bool
    rows_before_readable: int
    rows_kept: int
    damage: list[Damage]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d

    def format(self) -> str:
        if not self.damage:
            return f"dataset {self.root}: no damage found; nothing changed ({self.rows_kept} rows)"
        lines = [f"dataset {self.root}: quarantined {len(self.damage)} damaged file(s) in {self.quarantine}"]
        for d in self.damage:
            lost = "" if d.rows_lost is None else f" ({d.rows_lost} rows)"
            lines.append(f"  {d.path}: {d.what}: {d.detail}{lost}")
        if self.manifest_rebuilt:
            lines.append("  manifest.json rebuilt from the rows (the next datagen run fills in its settings)")
        lines.append(f"rows kept: {self.rows_kept} (every readable row); rerun the same datagen command to "
                     f"re-measure what was lost")
        return "\n".join(lines)


def repair_dataset(root: str | os.PathLike[str]) -> RepairReport:
    """Quarantine every damaged file of the dataset; keep every good row. Never deletes."""
    report = check_dataset(root)
    p = Path(report.root)
    if report.ok:
        return RepairReport(str(p), None, [], 0, False, report.rows, len(read_dataset(p)), [])
    q = p / QUARANTINE / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    n = 0
    while q.exists():
        n += 1
        q = q.with_name(f"{q.name.split('.')[0]}.{n}")
    q.mkdir(parents=True)
    moved: list[str] = []
    dropped = 0
    rebuilt = False

    def move(rel: str) -> None:
        dst = q / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(p / rel), str(dst))
        fsync_dir(dst.parent)
        moved.append(rel)

    for d in report.damage:
        if d.what in ("shard", "leftover", "kernels"):
            move(d.path)
        elif d.what == "journal":
            # the whole journal goes to quarantine; its good lines come back
            good, bad = _journal_lines(p / JOURNAL)
            shutil.copy2(p / JOURNAL, q / JOURNAL)
            fsync_dir(q)
            _atomic_write_text(p / JOURNAL, "".join(line + "\n" for line in good))
            moved.append(f"{JOURNAL} (lines {', '.join(map(str, bad[:10]))}{' ...' if len(bad) > 10 else ''})")
            dropped = len(bad)
        elif d.what == "manifest":
            if (p / MANIFEST).exists():
                move(MANIFEST)
            rebuilt = True
    if rebuilt:
        _atomic_write_text(p / MANIFEST, json.dumps(_rebuilt_manifest(p), indent=2, sort_keys=True) + "\n")
    for sub in (p / SHARDS, p / QUARANTINE):
        fsync_dir(sub)
    kept = len(read_dataset(p))
    return RepairReport(str(p), str(q), moved, dropped, rebuilt, report.rows, kept, report.damage)


def _rebuilt_manifest(p: Path) -> dict[str, Any]:
    """A manifest for rows whose manifest was lost: what the rows themselves say."""
    devices: set[str] = set()
    seeds: set[int] = set()
    for s in _shard_paths(p):
        try:
            df = read_shard(p, s)
        except DatasetDamaged:
            continue
        if "device" in df.columns:
            devices.update(str(x) for x in df["device"].dropna().unique())
        if "seed" in df.columns:
            seeds.update(int(x) for x in df["seed"].dropna().unique())
    m: dict[str, Any] = {"kind": "kernelcast-dataset", "rebuilt_by_repair": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime()),
                         "devices_in_rows": sorted(devices)}
    if len(seeds) == 1:
        m["seed"] = seeds.pop()
    return m

"""The report of one corpus ingest: counts per stage and the reasons of every failure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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

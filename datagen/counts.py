"""Per-site loop trips and branch outcomes for dataset rows (profile-guided features).

Datagen counts each new ok row right after its timed launches (:class:`SiteCounter`, used by
:mod:`datagen.generate`). For datasets made before, :func:`backfill_counts` (``kernelcast dataset
counts DS``) regenerates every ok row's launch configuration from what the row stores (global and
local size, the argument bindings with their counts and scalar values) and the kernel in
``DS/kernels``, and runs the counting kernel once in the isolated harness with the dataset's data
seed (``options.timing.seed`` of the manifest: buffers get exactly the contents the timed run had).
Results go to the journaled sidecar ``DS/site_counts.jsonl`` (one fsync'd line per row, failures
included with their status and reason), never into the shards; :func:`datagen.dataset.read_dataset`
merges it as the ``site_counts`` column. Rows whose own counts lack what the counting launch
measures now (each loop's busiest work-item, :func:`datagen.dataset.counts_current`) are counted
again the same way, and the sidecar's counts take their place. A killed backfill loses at most the
rows in flight; a rerun skips every row the sidecar has (``retry_failed`` re-runs the failed ones).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
from kernelcast.datagen.corpus_store import read_records
from kernelcast.datagen.dataset import (
    MANIFEST,
    SITE_COUNTS,
    _read_journal,
    counts_current,
    fsync_dir,
    kill_point,
    load_manifest,
    read_dataset,
)
from kernelcast.datagen.frame import TRAIN_PASSES, DataError
from kernelcast.instrument.counters import MAX_TRACKED, CountRewrite, SiteCounts, count_rewrite, measure_counts
from kernelcast.instrument.harness import Harness
from kernelcast.instrument.rewrite import InstrumentedRunError, RewriteError, device_supports_int64_atomics
from kernelcast.instrument.runner import TimingPolicy
from tqdm import tqdm

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

log = logging.getLogger(__name__)

#: a kernel whose counting launches time out this many times (or crash MAX_CRASHES times) gets its
#: other rows skipped (recorded as ``skipped``; ``retry_failed`` runs them again)
MAX_TIMEOUTS = 2
MAX_CRASHES = 5


def counts_text(sc: SiteCounts) -> str:
    """The ``site_counts`` cell of a row: JSON of :meth:`SiteCounts.values`, keys sorted."""
    return json.dumps(sc.values(), sort_keys=True)


class SiteCounter:
    """Counts rows of one kernel after another through one harness, keeping the kernel's
    counting rewrite (the harness caches its build)."""

    def __init__(self, harness: Any, max_tracked: int = MAX_TRACKED):
        self.h = harness
        self.max_tracked = max_tracked
        self._kid: str | None = None
        self._cr: CountRewrite | None = None
        self._why = ""

        self.int64 = device_supports_int64_atomics(harness.device)

    def rewrite(self, k: Kernel) -> CountRewrite:
        """The kernel's counting rewrite (cached for the last kernel); :class:`RewriteError`."""
        if self._kid != k.id:
            self._kid, self._cr, self._why = k.id, None, ""
            try:
                self._cr = count_rewrite(k, int64_atomics=self.int64)
            except (RewriteError, ValueError) as e:
                self._why = (str(e).splitlines() or ["cannot be instrumented"])[0]
        if self._cr is None:
            raise RewriteError(self._why)
        return self._cr

    def count(self, k: Kernel, cfg: LaunchConfig, policy: TimingPolicy, arrays: dict[str, Any] | None = None
              ) -> SiteCounts:
        """One counting launch; :class:`RewriteError` / :class:`InstrumentedRunError` when it fails."""
        cr = self.rewrite(k)
        return measure_counts(self.h, k, cfg, arrays=arrays, policy=policy, max_tracked=self.max_tracked,
                              rewrite=cr)


def row_config(row: dict[str, Any]) -> LaunchConfig:
    """A stored row's launch configuration (``gsize``, ``lsize``, ``args`` as datagen wrote them);
    ``ValueError`` for a row that does not hold one."""
    args = row.get("args")
    if isinstance(args, str):
        args = json.loads(args)
    if not isinstance(args, list):
        raise ValueError("the row has no argument bindings")
    gsize = row.get("gsize")
    lsize = row.get("lsize")
    if gsize is None or len(gsize) == 0:
        raise ValueError("the row has no global size")
    bindings: list[ArgBinding] = []
    for a in args:
        if a.get("init") == "array":
            raise ValueError(f"argument {a.get('name')!r} was bound to an array the dataset does not keep")
        bindings.append(ArgBinding(str(a["name"]), a["kind"], str(a["dtype"]),
                                   count=None if a.get("count") is None else int(a["count"]),
                                   value=a.get("value"), init=str(a.get("init") or "random"),
                                   reset_each_run=bool(a.get("reset_each_run", False))))
    lsz = None if lsize is None or (not isinstance(lsize, str) and len(lsize) == 0) else tuple(int(x) for x in lsize)
    return LaunchConfig(tuple(int(x) for x in gsize), lsz, bindings)


def data_seed(manifest: dict[str, Any]) -> int:
    """The seed the dataset's timed launches drew buffer contents from (``options.timing.seed``)."""
    timing = (manifest.get("options") or {}).get("timing") or {}
    return int(timing.get("seed", 0) or 0)


@dataclass
class BackfillSummary:
    rows_ok: int = 0                  # ok rows of the training passes
    had_counts: int = 0               # with counts (or a recorded failure) before this run
    attempted: int = 0
    counted: int = 0
    failed: Counter = field(default_factory=Counter)     # status -> rows
    kernel_failures: dict[str, str] = field(default_factory=dict)   # kernel name -> first reason
    rows_with_counts: int = 0         # after this run, with counts of what the counting launch measures now
    wall_s: float = 0.0
    sidecar: str = ""

    @property
    def coverage(self) -> float:
        return self.rows_with_counts / self.rows_ok if self.rows_ok else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"rows_ok": self.rows_ok, "had_counts": self.had_counts, "attempted": self.attempted,
                "counted": self.counted, "failed": dict(self.failed), "kernel_failures": dict(self.kernel_failures),
                "rows_with_counts": self.rows_with_counts, "coverage": self.coverage, "wall_s": self.wall_s,
                "rows_per_min": self.attempted / self.wall_s * 60 if self.wall_s else None,
                "sidecar": self.sidecar}

    def format(self) -> str:
        d = self.to_dict()
        lines = [f"ok rows: {self.rows_ok}; before this run {self.had_counts} had an entry; counted now "
                 f"{self.counted} of {self.attempted}"
                 + (f" in {self.wall_s:.0f} s ({d['rows_per_min']:.1f} rows/min)" if self.wall_s else ""),
                 f"rows with current counts: {self.rows_with_counts} / {self.rows_ok} ({100 * self.coverage:.1f} %)"]
        if self.failed:
            lines.append("failed rows by status: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.failed.items())))
        for name, why in sorted(self.kernel_failures.items()):
            lines.append(f"  {name}: {why}")
        lines.append(f"sidecar: {self.sidecar}")
        return "\n".join(lines)


class _Sidecar:
    """The journaled sidecar: one fsync'd JSON line per row, appends from several threads."""

    def __init__(self, root: Path):
        self.path = root / SITE_COUNTS
        rows, bad = _read_journal(self.path)
        if bad:      # a kill mid-write: rewrite without the torn line so appends start on a fresh line
            log.warning("%s: dropped %d damaged line(s)", self.path, bad)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
        self.entries: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r.get("row_key"):
                old = self.entries.get(r["row_key"])
                if old is None or old.get("status") != "ok":     # an ok entry is never replaced
                    self.entries[r["row_key"]] = r
        self._lock = threading.Lock()
        self.appended = 0
        self._f: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held for the run

    def append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._f.write(json.dumps(entry, default=str) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
            old = self.entries.get(entry["row_key"])
            if old is None or old.get("status") != "ok":
                self.entries[entry["row_key"]] = entry
            self.appended += 1
            kill_point(self.appended)

    def close(self) -> None:
        self._f.close()


def open_checked_dataset(root: Path, resolve: bool = True) -> tuple[dict[str, Any], pd.DataFrame]:
    """The manifest and the rows of a dataset (one per configuration with ``resolve``, else every
    stored row); :class:`DataError` (one line, exit 2) for a directory that is not one or has no
    measured rows."""
    if not root.is_dir():
        raise DataError(f"no such dataset directory: {root}")
    if not (root / MANIFEST).is_file():
        raise DataError(f"{root}: not a dataset (no {MANIFEST})")
    try:
        manifest = load_manifest(root)
        df = read_dataset(root, resolve=resolve)
    except (FileNotFoundError, ValueError) as e:
        raise DataError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    if df.empty or not {"status", "pass", "kernel_id", "args", "gsize"} <= set(df.columns):
        raise DataError(f"{root}: the dataset has no measured rows")
    return manifest, df


def dataset_kernels(root: Path) -> dict[str, Kernel]:
    """The kernels of a dataset (``DS/kernels``) by id; :class:`DataError` where they are missing
    or cannot be read."""
    if not (root / "kernels" / "kernels.jsonl").is_file():
        raise DataError(f"{root}: no kernel sources (expected {root / 'kernels'}/kernels.jsonl)")
    try:
        return {r["id"]: Kernel.from_dict(r) for r in read_records(root / "kernels")}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{root}/kernels/kernels.jsonl cannot be read ({type(e).__name__})") from None


def check_counts_dataset(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Kernel]]:
    """The manifest, the ok training rows and the kernels of a dataset to backfill; :class:`DataError`
    (one line, exit 2) for a directory that is not one, has no such rows or lacks their kernels."""
    manifest, df = open_checked_dataset(root)
    df = df[(df["status"] == "ok") & df["pass"].isin(TRAIN_PASSES)]
    if df.empty:
        raise DataError(f"{root}: the dataset has no ok rows of pass {'/'.join(TRAIN_PASSES)}")
    kernels = dataset_kernels(root)
    cols = [c for c in ("row_key", "kernel_id", "kernel_name", "gsize", "lsize", "args", "site_counts")
            if c in df.columns]
    return manifest, df[cols].to_dict("records"), kernels


def backfill_counts(dataset: str | os.PathLike[str], *, device: Any = "auto", jobs: int = 1,
                    limit: int | None = None, timeout_s: float = 30.0, max_tracked: int = MAX_TRACKED,
                    retry_failed: bool = False, kernel_ids: set[str] | None = None,
                    progress: bool = False) -> BackfillSummary:
    """Compute ``site_counts`` for the ok rows of ``dataset`` that have none (see the module
    docstring): ``jobs`` harness workers, at most ``limit`` rows this run."""
    root = Path(dataset)
    manifest, rows, kernels = check_counts_dataset(root)
    seed = data_seed(manifest)
    side = _Sidecar(root)
    summary = BackfillSummary(rows_ok=len(rows), sidecar=str(side.path))
    try:
        summary.had_counts = sum(1 for r in rows if r["row_key"] in side.entries
                                 or counts_current(r.get("site_counts")))
        pending = [r for r in rows if (kernel_ids is None or r["kernel_id"] in kernel_ids)
                   and ((r["row_key"] not in side.entries and not counts_current(r.get("site_counts")))
                        or (retry_failed and r["row_key"] in side.entries
                            and side.entries[r["row_key"]].get("status") != "ok"))]
        pending.sort(key=lambda r: (r["kernel_id"], r["row_key"]))
        if limit is not None:
            pending = pending[:limit]
        by_kernel: dict[str, list[dict[str, Any]]] = {}
        for r in pending:
            by_kernel.setdefault(r["kernel_id"], []).append(r)
        work: queue.Queue[str] = queue.Queue()
        for kid in by_kernel:
            work.put(kid)
        summary.attempted = len(pending)
        lock = threading.Lock()
        rewrite_lock = threading.Lock()          # libclang parses one at a time
        bar = None
        if progress:
            bar = tqdm(total=len(pending), unit="row", desc="site counts", dynamic_ncols=True)
        policy = TimingPolicy(seed=seed)
        t0 = time.perf_counter()
        stop = threading.Event()

        def record(r: dict[str, Any], status: str, reason: str = "", sc: SiteCounts | None = None,
                   wall: float = 0.0) -> None:
            entry: dict[str, Any] = {"row_key": r["row_key"], "kernel_id": r["kernel_id"], "status": status,
                                     "at": time.time(), "wall_s": round(wall, 4)}
            if sc is not None:
                entry["site_counts"] = counts_text(sc)
                entry["counts"] = sc.to_dict()
            else:
                entry["reason"] = reason[:300]
            side.append(entry)
            with lock:
                if sc is not None:
                    summary.counted += 1
                else:
                    summary.failed[status] += 1
                    name = str(r.get("kernel_name") or r["kernel_id"])
                    summary.kernel_failures.setdefault(name, f"{status}: {reason[:200]}")
                if bar is not None:
                    bar.update(1)

        def worker() -> None:
            with Harness(device, meter="none", timeout_s=timeout_s) as h:
                counter = SiteCounter(h, max_tracked)
                while not stop.is_set():
                    try:
                        kid = work.get_nowait()
                    except queue.Empty:
                        return
                    k = kernels.get(kid)
                    krows = by_kernel[kid]
                    if k is None:
                        for r in krows:
                            record(r, "no_kernel", "the kernel is not in DS/kernels")
                        continue
                    try:
                        with rewrite_lock:
                            counter.rewrite(k)
                    except RewriteError as e:
                        for r in krows:
                            record(r, "rewrite_error", str(e))
                        continue
                    faults: Counter[str] = Counter()
                    for r in krows:
                        if stop.is_set():
                            return
                        if faults["timeout"] >= MAX_TIMEOUTS or faults["crash"] >= MAX_CRASHES:
                            record(r, "skipped", f"kernel abandoned after {faults['timeout']} timeouts and "
                                                 f"{faults['crash']} crashes")
                            continue
                        t = time.perf_counter()
                        try:
                            sc = counter.count(k, row_config(r), policy)
                        except InstrumentedRunError as e:
                            faults[e.status] += 1
                            record(r, e.status, e.reason, wall=time.perf_counter() - t)
                            continue
                        except (ValueError, KeyError, TypeError) as e:
                            record(r, "invalid_config", f"{type(e).__name__}: {e}")
                            continue
                        record(r, "ok", sc=sc, wall=time.perf_counter() - t)

        errors: list[BaseException] = []

        def run() -> None:
            try:
                worker()
            except BaseException as e:  # noqa: BLE001 - a worker that cannot start: re-raised below
                stop.set()
                errors.append(e)

        threads = [threading.Thread(target=run, name=f"counts-{i}", daemon=True)
                   for i in range(max(1, min(jobs, len(by_kernel))))]
        for th in threads:
            th.start()
        try:
            for th in threads:
                while th.is_alive():
                    th.join(0.5)
        except KeyboardInterrupt:
            stop.set()
            for th in threads:
                th.join()
            raise
        finally:
            if bar is not None:
                bar.close()
        if errors:
            raise errors[0]
        summary.wall_s = time.perf_counter() - t0
        summary.rows_with_counts = sum(1 for r in rows if side.entries.get(r["row_key"], {}).get("status") == "ok"
                                       or (r["row_key"] not in side.entries and counts_current(r.get("site_counts"))))
    finally:
        side.close()
    return summary

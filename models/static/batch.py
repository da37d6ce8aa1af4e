"""Static analysis of many configurations at once: one analysis per distinct key, cached on disk.

An imported Kernel Tuner cache has thousands of configurations of one kernel; each row names the
analysis it needs by ``analysis_key`` (a hash of the text the preprocessor reads, the kernel, the
language and the macros: :func:`kernelcast.datagen.ktcache.analysis_key`) and the options to run it
with (``analysis_options``). :func:`analyze_dataset` runs every key not yet in the cache directory,
in a process pool, writing each result as it finishes (an interrupted run resumes where it
stopped), and reports how many it found cached. :func:`load_analyses` reads them back as
:class:`~models.static.features.SourceFeatures` per key.

Rows whose ``analysis_options`` differ from their ``build_options`` share an analysis in which the
block and grid sizes are the launch's own (``blockDim.x`` for ``block_size_x``...): the features
are then expressions of ``lsize``/``ngroups``, bound per row. :func:`verify_shared` re-analyses a
few such rows with their exact macros and compares the evaluated features.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.models.static.features import SourceFeatures

from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

CACHE_FORMAT = 1
#: the static analysis's own version: raised whenever what an analysis computes changes, so that a
#: cache entry written by an older analysis is analysed again, not reused
ANALYSIS_VERSION = 12


@dataclass
class BatchStats:
    """What one :func:`analyze_dataset` run did."""

    configurations: int = 0
    distinct: int = 0
    cached: int = 0                  # keys found in the cache directory (hits)
    analysed: int = 0                # keys analysed by this run (misses)
    failed: int = 0                  # keys whose analysis failed (written with the message, tried again next run)
    skipped: int = 0                 # keys not tried: the kernel's first analyses all failed alike
    seconds: float = 0.0
    workers: int = 1
    errors: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Configurations per second of wall time."""
        return self.configurations / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "configurations_per_s": self.rate}


def _entry_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / key[:2] / f"{key}.json"


def _analyze(job: tuple[str, str, str, str, str]) -> tuple[str, dict[str, Any]]:
    """One analysis (in a worker process): (key, cache entry)."""
    from kernelcast.models.static.source import analyze_source

    key, source, name, language, options = job
    t0 = time.perf_counter()
    entry: dict[str, Any] = {"format": CACHE_FORMAT, "version": _version(), "analysis_version": ANALYSIS_VERSION,
                             "key": key, "kernel_name": name,
                             "language": language,
                             "options": options}
    try:
        if language == "cuda" and _LAUNCH_MACRO.search(options):
            feats = _analyze_cuda_symbolic(Kernel(source=source, name=name, language=language, build_options=options))
        else:
            feats = analyze_source(Kernel(source=source, name=name, language=language, build_options=options))
        entry["features"] = feats.to_dict()
    except Exception as e:  # noqa: BLE001 - a kernel the analysis refuses is an entry with its message
        entry["features"] = None
        entry["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    entry["seconds"] = time.perf_counter() - t0
    return key, entry


_LAUNCH_MACRO = re.compile(r"=(blockDim|gridDim)\.([xyz])(?=\s|$)")
_OPENCL_OF = {"blockDim": "get_local_size", "gridDim": "get_num_groups"}


def _analyze_cuda_symbolic(kernel: Kernel) -> SourceFeatures:
    """:func:`~models.static.cuda.analyze_cuda_source` for macros whose values are the launch's own
    (``-Dblock_size_x=blockDim.x``): the CUDA parse reads them as they are, the C++ for OpenCL
    translation gets them as the OpenCL work-item functions it maps those variables to."""
    from kernelcast.models.static.source import analyze_source

    from kernelcast.cuda import translate

    tr = translate(kernel.source, kernel.name, kernel.build_options)
    opts = _LAUNCH_MACRO.sub(lambda m: f"=((int){_OPENCL_OF[m.group(1)]}({'xyz'.index(m.group(2))}))",
                             tr.build_options)
    feats = analyze_source(Kernel(source=tr.source, name=tr.kernel_name, language="opencl", build_options=opts),
                           filename="kernel_cuda.clcpp")
    shift = tr.prelude_lines
    for seq in (feats.accesses, feats.loops, feats.branches):
        for x in seq:
            if getattr(x, "line", 0) > shift:
                x.line = x.line - shift
    feats.kernel_name = kernel.name
    feats.notes = [*tr.notes, *feats.notes]
    return feats


def analyze_one(key: str, source: str, name: str, language: str, options: str) -> SourceFeatures | str:
    """The analysis ``key`` names, run here: its features, or the message of a failed analysis."""
    _, entry = _analyze((key, source, name, language, options))
    return SourceFeatures.from_dict(entry["features"]) if entry.get("features") else str(entry.get("error"))


def _version() -> str:
    import kernelcast

    return str(kernelcast.__version__)


def _cached(cache_dir: Path, key: str) -> bool:
    """A successful cache entry of this kernelcast (an entry of another version is stale: the analysis
    changed; a failed analysis is tried again, as the front end may take the kernel now)."""
    p = _entry_path(cache_dir, key)
    if not p.is_file():
        return False
    try:
        entry = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return _current(entry) and entry.get("version") == _version() and entry.get("features") is not None


def _current(entry: dict[str, Any]) -> bool:
    """Whether a cache entry was written by this format and this version of the analysis."""
    return entry.get("format") == CACHE_FORMAT and entry.get("analysis_version") == ANALYSIS_VERSION


def _write_entry(cache_dir: Path, key: str, entry: dict[str, Any]) -> None:
    path = _entry_path(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entry, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _dataset_jobs(root: Path) -> tuple[int, dict[str, tuple[str, str, str, str, str]]]:
    """(rows with a key, the distinct analyses they need)."""
    from kernelcast.datagen.corpus_store import read_records
    from kernelcast.datagen.dataset import read_dataset

    df = read_dataset(root, resolve=False)
    if df.empty or "analysis_key" not in df.columns:
        return 0, {}
    kernels = {r["id"]: r for r in read_records(root / "kernels")} if (root / "kernels").is_dir() else {}
    sub = df[df["analysis_key"].notna()]
    jobs: dict[str, tuple[str, str, str, str, str]] = {}
    for key, kid, opts in zip(sub["analysis_key"], sub["kernel_id"], sub["analysis_options"]):
        if key in jobs:
            continue
        k = kernels.get(kid)
        if k is None:
            continue
        jobs[str(key)] = (str(key), k["source"], k["name"], k.get("language", "opencl"), str(opts or ""))
    return len(sub), jobs


def analyze_dataset(root: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                    workers: int = 2, progress: Callable[[int, int], None] | None = None,
                    probe: int = 8) -> BatchStats:
    """Analyse every distinct ``analysis_key`` of a dataset not yet in ``cache_dir`` (default:
    ``DATASET/analysis``), with ``workers`` processes (1: in this process)."""
    t0 = time.perf_counter()
    path = Path(root)
    cdir = Path(cache_dir) if cache_dir is not None else path / "analysis"
    n_rows, jobs = _dataset_jobs(path)
    stats = BatchStats(configurations=n_rows, distinct=len(jobs), workers=workers)
    todo = []
    for key, job in jobs.items():
        if _cached(cdir, key):
            stats.cached += 1
        else:
            todo.append(job)
    done = 0

    def finished(key: str, entry: dict[str, Any]) -> None:
        nonlocal done
        _write_entry(cdir, key, entry)
        stats.analysed += 1
        if entry.get("error"):
            stats.failed += 1
            if len(stats.errors) < 5 and entry["error"] not in stats.errors:
                stats.errors.append(entry["error"])
        done += 1
        if progress is not None:
            progress(done, len(todo))

    # a kernel the analysis cannot take fails on every configuration alike: after its first
    # `probe` analyses failed with one message, the others are not tried (nor cached)
    first: list[Any] = []
    rest: list[Any] = []
    seen: dict[tuple[str, str], int] = {}
    for j in todo:
        kk = (j[1], j[2])
        seen[kk] = seen.get(kk, 0) + 1
        (first if seen[kk] <= probe else rest).append(j)
    dead: dict[tuple[str, str], str] = {}

    def run_jobs(jobs_: list[Any]) -> list[tuple[str, dict[str, Any]]]:
        got: list[tuple[str, dict[str, Any]]] = []
        if jobs_ and workers > 1:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(_analyze, j) for j in jobs_]
                for fut in as_completed(futures):
                    got.append(fut.result())
                    finished(*got[-1])
        else:
            for j in jobs_:
                got.append(_analyze(j))
                finished(*got[-1])
        return got

    first_results = {k: e for k, e in run_jobs(first)}
    for (src, name), n in seen.items():
        if n <= probe:
            continue
        msgs = {first_results[j[0]].get("error") for j in first if (j[1], j[2]) == (src, name)}
        if len(msgs) == 1 and None not in msgs:
            dead[(src, name)] = str(next(iter(msgs)))
    live = [j for j in rest if (j[1], j[2]) not in dead]
    stats.skipped = len(rest) - len(live)
    run_jobs(live)
    stats.seconds = time.perf_counter() - t0
    return stats


def load_analyses(cache_dir: str | os.PathLike[str], keys: list[str]) -> dict[str, SourceFeatures | str]:
    """The cached analysis of each key: its features, or the message of a failed analysis; an entry
    of another analysis version is left out (stale: the caller analyses it again)."""
    cdir = Path(cache_dir)
    out: dict[str, SourceFeatures | str] = {}
    for key in dict.fromkeys(keys):
        p = _entry_path(cdir, key)
        if not p.is_file():
            continue
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not _current(entry):
            continue
        out[key] = SourceFeatures.from_dict(entry["features"]) if entry.get("features") else str(entry.get("error"))
    return out


def row_env(row: dict[str, Any]) -> dict[str, float]:
    """The launch and scalar arguments of a dataset row, as the symbols of its features."""
    env: dict[str, float] = {}
    g = list(row["gsize"]) + [1] * 3
    loc = list(row["lsize"]) + [1] * 3
    for d in range(3):
        env[f"gsize{d}"] = float(g[d])
        env[f"lsize{d}"] = float(loc[d])
        env[f"ngroups{d}"] = float(-(-int(g[d]) // int(loc[d])))
    args = row.get("args")
    args = json.loads(args) if isinstance(args, str) else (args or [])
    for a in args:
        if a.get("kind") == "scalar":
            try:
                env[a["name"]] = float(a["value"])
            except (TypeError, ValueError):
                pass
    return env


def _evaluated(feats: SourceFeatures, env: dict[str, float]) -> dict[str, float]:
    return feats.evaluate(env)


def verify_shared(root: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None,
                  samples: int = 3) -> dict[str, Any]:
    """Re-analyse up to ``samples`` rows that share a launch-symbolic analysis with their exact
    macros and compare every evaluated feature: the largest relative difference and where."""
    from kernelcast.datagen.corpus_store import read_records
    from kernelcast.datagen.dataset import read_dataset
    from kernelcast.models.static.source import analyze_source

    path = Path(root)
    cdir = Path(cache_dir) if cache_dir is not None else path / "analysis"
    df = read_dataset(path, resolve=False)
    if df.empty or "analysis_options" not in df.columns:
        return {"checked": 0}
    shared = df[(df["analysis_options"] != df["build_options"]) & df["analysis_key"].notna()]
    if shared.empty:
        return {"checked": 0}
    kernels = {r["id"]: r for r in read_records(path / "kernels")}
    idx = np.linspace(0, len(shared) - 1, min(samples, len(shared))).astype(int)
    worst = 0.0
    where = ""
    checked = 0
    for row in shared.iloc[idx].to_dict("records"):
        got = load_analyses(cdir, [row["analysis_key"]]).get(row["analysis_key"])
        if not isinstance(got, SourceFeatures):
            continue
        k = kernels[row["kernel_id"]]
        exact = analyze_source(Kernel(source=k["source"], name=k["name"], language=k.get("language", "opencl"),
                                      build_options=row["build_options"]))
        env = row_env(row)
        a, b = _evaluated(got, env), _evaluated(exact, env)
        checked += 1
        for name in sorted(set(a) | set(b)):
            x, y = a.get(name, 0.0), b.get(name, 0.0)
            if not (np.isfinite(x) and np.isfinite(y)):
                continue
            rel = abs(x - y) / max(abs(y), 1e-30) if (x or y) else 0.0
            if rel > worst:
                worst, where = rel, f"{row['kt_key']}: {name} {x:.6g} vs {y:.6g}"
    return {"checked": checked, "max_rel_diff": worst, "where": where}

"""Rebuild the GPU yardstick from the public repositories, at pinned commits, in one command.

    python -m kernelcast.bench.gpu_yardstick --clones DIR --out OUT [--clone-from TEMPLATE] [--json]

For every repository the specs (``bench/gpu/specs/*.yaml``) name, ``DIR/<name>`` is a clone of it
(cloned with git from ``--clone-from``, default ``https://github.com/{repo}.git``, when absent),
checked out at the commit pinned in :data:`PINS`. Every (benchmark, GPU) cache of every spec is then
imported into ``OUT/<benchmark>/<GPU>`` (``kernelcast dataset import-kt``), its rows are read back
and compared with the cache (one row per record, status, mean time and every iteration), and its
static analyses are run into ``OUT/analysis-cache`` (shared by every GPU of a benchmark: the
kernel's macros do not depend on the GPU). One line per pair: configurations, import wall time,
whether the rows equal the cache, whether the T4 file beside it
holds the same records, failed configurations by status, analyses (distinct / cached /
failed, and why), and the analysis wall time.

A clone whose pinned commit lacks some file contents (a partial mirror) is checked out file by
file; a cache that is absent is reported as such. A spec with ``kept_aside`` holds check data: its
pairs are imported and analysed like the others, marked so in the table, and
:mod:`bench.gpu_model` leaves them out of what it fits and evaluates.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.options import Parser

log = logging.getLogger(__name__)

#: the public repositories of the yardstick and their pinned commits
PINS: dict[str, str] = {
    "AutoTuningAssociation/benchmark_hub": "8eeb99e7179e6838af95d392ac6c60cebfd8c434",
    "NTNU-HPC-Lab/BAT": "06e0be2412e174a32323ecd8054f33fd188540e3",
    "KernelTuner/kernel_tuner": "96a6abc1019179397753c4afede9149a80aec369",
    "MiloLurati/AutoTuning_AMD_vs_Nvidia_GPUs": "a156f1201b62d6a25d0452edb66096d2eb6cc22b",
}
SPECS = Path(__file__).resolve().parent / "gpu" / "specs"


@dataclass
class PairResult:
    """One (benchmark, GPU) pair of the yardstick."""

    benchmark: str
    gpu: str
    cache: str
    dataset: str = ""
    configurations: int = 0
    import_s: float | None = None
    rows_equal: bool | None = None
    mismatch: str = ""
    t4_equal: bool | None = None             # the sibling T4 file holds the same records (None: no T4 file)
    statuses: dict[str, int] = field(default_factory=dict)
    analyses: int = 0
    analyses_cached: int = 0
    analyses_failed: int = 0
    analysis_s: float | None = None
    analysis_error: str = ""
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    kept_aside: bool = False


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-c", "core.hooksPath=/dev/null", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=1800)


def ensure_clone(repo: str, clones: Path, clone_from: str, paths: list[str]) -> tuple[Path, list[str]]:
    """``clones/<name>`` at the pinned commit (cloned when absent); the pinned files in ``paths``
    restored one by one where a whole checkout is not possible. Returns (clone, notes)."""
    pin = PINS[repo]
    owner, name = repo.split("/")
    d = clones / name
    notes: list[str] = []
    if not (d / ".git").exists():
        src = clone_from.format(repo=repo, owner=owner, name=name)
        r = _git(["clone", "-q", "--no-checkout", src, str(d)])
        if r.returncode != 0:
            raise RuntimeError(f"git clone {src}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r}")
    if _git(["cat-file", "-e", f"{pin}^{{commit}}"], cwd=d).returncode != 0:
        _git(["fetch", "-q", "origin", pin], cwd=d)
    r = _git(["checkout", "-q", "--detach", "-f", pin], cwd=d)
    if r.returncode != 0:
        # a partial mirror: detach HEAD at the pin and check out the files the specs need
        if _git(["update-ref", "--no-deref", "HEAD", pin], cwd=d).returncode != 0:
            raise RuntimeError(f"{d}: cannot check out {pin[:12]}: {r.stderr.strip()[:200]}")
        for p in paths:
            rr = _git(["checkout", "-q", pin, "--", p], cwd=d)
            if rr.returncode != 0:
                notes.append(f"{p}: not in the clone at {pin[:12]}")
    return d, notes


def _spec_paths(spec: Any) -> list[str]:
    return [spec.kernel_file, *spec.include_dirs, *spec.caches]


def run(clones: Path, out: Path, *, clone_from: str, specs_dir: Path = SPECS, workers: int = 2,
        analysis: bool = True, only: str | None = None) -> list[PairResult]:
    from kernelcast.datagen.dataset import read_dataset
    from kernelcast.datagen.ktcache import (
        KTCacheError,
        import_kt,
        load_spec,
        plan_import,
        read_kt_cache,
        records_equal,
        rows_equal_cache,
        select_records,
    )
    from kernelcast.models.static.batch import analyze_dataset

    specs = [load_spec(p) for p in sorted(specs_dir.glob("*.yaml")) + sorted(specs_dir.glob("*.json"))]
    if only:
        specs = [s for s in specs if only in s.benchmark]
    clones.mkdir(parents=True, exist_ok=True)
    roots: dict[str, tuple[Path, list[str]]] = {}
    for s in specs:
        if s.repository not in PINS:
            raise SystemExit(f"spec {s.path}: repository {s.repository!r} has no pinned commit")
        paths = [p for sp in specs if sp.repository == s.repository for p in _spec_paths(sp)]
        if s.repository not in roots:
            roots[s.repository] = ensure_clone(s.repository, clones, clone_from, paths)
    results: list[PairResult] = []
    acache = out / "analysis-cache"
    for s in specs:
        root, notes = roots[s.repository]
        for c in s.caches:
            res = PairResult(benchmark=s.benchmark, gpu=s.pair_name(c), cache=c, kept_aside=bool(s.kept_aside))
            results.append(res)
            missing = [n for n in notes if n.startswith(f"{c}:")]
            if missing or not (root / c).is_file():
                res.error = "cache absent at the pinned commit (blob not in the clone)"
                continue
            ds = out / s.benchmark / s.pair_name(c)
            res.dataset = str(ds)
            t0 = time.perf_counter()
            try:
                plan = plan_import([], spec=_one_cache(s, c), root=root)
                imp = plan.imports[0]
                import_kt(imp, ds)
            except KTCacheError as e:
                res.error = str(e)
                continue
            res.import_s = time.perf_counter() - t0
            res.configurations = len(imp.rows)
            res.statuses = dict(imp.statuses)
            if imp.excluded:
                res.warnings.append(f"{imp.excluded} configurations left out by where: {' and '.join(imp.where)}")
            if imp.unreferenced:
                res.warnings.append(f"tune parameters not in the source: {', '.join(imp.unreferenced)}")
            df = read_dataset(ds, resolve=False)
            cache = read_kt_cache(root / c)
            selected, _ = select_records(cache, s.where, s.constants)
            res.rows_equal, res.mismatch = rows_equal_cache(selected, df)
            t4 = root / c.replace(".json", "_T4.json")
            if t4.is_file() and t4 != root / c:
                ok, why = records_equal(cache, read_kt_cache(t4, problem_size=cache.problem_size))
                res.t4_equal = ok
                if not ok:
                    res.warnings.append(f"T4 file differs: {why}")
            if imp.frontend_error:
                res.analysis_error = f"front end: {imp.frontend_error}"
                continue
            if analysis:
                st = analyze_dataset(ds, cache_dir=acache, workers=workers)
                res.analyses, res.analyses_cached, res.analyses_failed = st.distinct, st.cached, st.failed + st.skipped
                res.analysis_s = st.seconds
                if st.errors:
                    res.analysis_error = st.errors[0]
    return results


def kept_aside(specs_dir: Path = SPECS) -> dict[str, str]:
    """The benchmarks whose spec keeps their caches aside as check data, and why."""
    from kernelcast.datagen.ktcache import load_spec

    specs = [load_spec(p) for p in sorted(specs_dir.glob("*.yaml")) + sorted(specs_dir.glob("*.json"))]
    return {s.benchmark: s.kept_aside for s in specs if s.kept_aside}


def _one_cache(spec: Any, cache: str) -> Any:
    from dataclasses import replace

    return replace(spec, caches=[cache])


def _fmt(results: list[PairResult]) -> str:
    from kernelcast.console import fmt_table

    rows = []
    for r in results:
        failed = ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()) if k != "ok")
        rows.append([r.benchmark + (" (kept aside)" if r.kept_aside else ""), r.gpu, r.configurations,
                     "" if r.import_s is None else f"{r.import_s:.1f}",
                     {True: "yes", False: f"no ({r.mismatch})", None: ""}[r.rows_equal],
                     {True: "yes", False: "no", None: "-"}[r.t4_equal], failed or "-",
                     f"{r.analyses}/{r.analyses_cached}/{r.analyses_failed}" if r.analysis_s is not None else "-",
                     "" if r.analysis_s is None else f"{r.analysis_s:.1f}",
                     "; ".join(x for x in (r.error, r.analysis_error, *r.warnings) if x)[:160]])
    return fmt_table(rows, ["benchmark", "gpu", "configs", "import s", "rows = cache", "T4 = cache", "failed configs",
                            "analyses distinct/cached/failed", "analysis s", "notes"])


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m kernelcast.bench.gpu_yardstick", description=__doc__.split("\n\n")[0])
    p.add_argument("--clones", required=True, help="directory of the repositories' clones (DIR/<name>)")
    p.add_argument("--out", required=True, help="directory of the datasets (OUT/<benchmark>/<GPU>)")
    p.add_argument("--clone-from", default="https://github.com/{repo}.git",
                   help="where to clone a missing repository from ({repo}, {owner}, {name} are filled in)")
    p.add_argument("--specs", default=str(SPECS), help="directory of the benchmark specs")
    p.add_argument("--only", help="only the benchmarks whose name contains this")
    p.add_argument("--workers", type=int, default=2, help="analysis processes (2)")
    p.add_argument("--no-analysis", action="store_true", help="import and check only")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.workers < 1:
        print("gpu_yardstick: --workers must be at least 1", file=sys.stderr)
        return 2
    specs_dir = Path(a.specs)
    if not specs_dir.is_dir():
        print(f"gpu_yardstick: --specs {specs_dir}: no such directory", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.ERROR)
    t0 = time.perf_counter()
    results = run(Path(a.clones), Path(a.out), clone_from=a.clone_from, specs_dir=specs_dir, workers=a.workers,
                  analysis=not a.no_analysis, only=a.only)
    info = {"pins": PINS, "pairs": [asdict(r) for r in results], "wall_s": time.perf_counter() - t0,
            "load_avg": os.getloadavg()}
    if a.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print(_fmt(results))
    print(f"wall {info['wall_s']:.0f} s; load average {' '.join(f'{x:.1f}' for x in info['load_avg'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

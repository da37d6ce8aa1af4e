"""The bundled GPU model: one tabular model (LightGBM on the analytical residual, with the device
columns of each row's profile) trained on the public GPU yardstick, and its cross-GPU evaluation.

```
python -m kernelcast.bench.gpu_model build --yardstick DIR --analysis-cache CACHE --out DIR
python -m kernelcast.bench.gpu_model evaluate --yardstick DIR --analysis-cache CACHE --group-by gpu --out DIR
python -m kernelcast.bench.gpu_model check --yardstick DIR --analysis-cache CACHE [--model DIR] --out DIR
```

``DIR`` is the layout :mod:`bench.gpu_yardstick` writes (``DIR/<benchmark>/<GPU>``, one kernelcast
dataset per pair); each GPU directory name maps to a bundled profile (:data:`GPU_PROFILES`). Every
pair is read, its ok rows sampled (``--rows-per-pair``, seeded), each row tagged with its GPU
(``device``) and its table built with that GPU's profile, so everything the model sees (the
analytical columns and the residual target included) is recomputed from the datasets and the
analysis cache. ``build`` fits the model on every row and writes ``tabular.json``, ``xfer.json``
(the configuration-transfer table of :mod:`models.xfer`, made of every ok row of every pair, sampled
or not, with each row's analytical time: the table of every ok row is built for it) and
``card.json`` (sources, GPUs, kernels, rows per pair); ``evaluate`` runs ``kernelcast
evaluate``'s grouped out-of-fold loop (``--group-by kernel|gpu|both``), each fold's transfer table
holding only the ok rows of its training rows' GPUs and problems, and writes ``metrics.json``,
``oof.parquet`` (every scored row's out-of-fold predictions, with its ``device``) and ``REPORT.md``.
``--no-config-transfer`` leaves the transfer columns out (the model before them). Benchmarks whose
spec is ``kept_aside`` are check data: ``build`` and ``evaluate`` never read them, and ``check``
scores a saved model (default: the bundled one) and the analytical model on them alone, every ok
row (``--rows-per-pair``), each GPU with its profile, nothing fitted; it writes what ``evaluate``
writes and prints one line per pair and model.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.bench.gpu_yardstick import SPECS, kept_aside
from kernelcast.calib.profile import DeviceProfile, load_profile
from kernelcast.datagen.frame import DataError, load_measured_frame
from kernelcast.datagen.ktcache import load_spec
from kernelcast.models.bundled import BUNDLED_GPU_DIR
from kernelcast.models.predict import load_learned
from kernelcast.models.static.batch import ANALYSIS_VERSION
from kernelcast.models.tabular import (
    DEVICE_COLUMNS,
    DEVICE_RATIO_COLUMNS,
    FEATURE_COLUMNS,
    MAX_SAVED_SEEDS,
    TABLE_VERSION,
    XFER_COLUMNS,
    build_table,
    table_transfer_rows,
    transfer_rows,
)
from kernelcast.train.oof import DeviceProfiles, TabularFitter, device_tables
from kernelcast.train.tabular import fit_tabular

from kernelcast.errors import InputError, UsageError
from kernelcast.options import Parser

log = logging.getLogger(__name__)

#: GPU directory name of the yardstick -> bundled profile
GPU_PROFILES: dict[str, str] = {
    "A100": "a100-pcie", "A4000": "rtx-a4000", "A6000": "rtx-a6000", "MI250X": "mi250x-gcd", "W6600": "w6600",
    "W7800": "w7800", "RTX_2080_Ti": "rtx-2080ti", "RTX_3090": "rtx-3090", "MI50": "mi50",
}
#: default rows sampled per (benchmark, GPU) pair
ROWS_PER_PAIR = 1000
CARD_FILE = "card.json"
CARD_FORMAT = "kernelcast-gpu-model-card"


@dataclass
class Pair:
    benchmark: str
    gpu: str
    path: Path
    profile: str
    rows: int = 0           # ok rows of the dataset
    sampled: int = 0


def find_pairs(yardstick: Path, only_gpus: Sequence[str] = (), skip_gpus: Sequence[str] = (),
               skip_benchmarks: Sequence[str] = (), kept_aside_only: bool = False) -> list[Pair]:
    """The (benchmark, GPU) datasets under ``yardstick`` whose GPU has a profile, less the
    benchmarks a spec keeps aside as check data (:func:`bench.gpu_yardstick.kept_aside`); with
    ``kept_aside_only``, those benchmarks' alone."""
    if not yardstick.is_dir():
        raise InputError(f"--yardstick {yardstick}: not a directory")
    aside = kept_aside()
    out = []
    for bench in sorted(p for p in yardstick.iterdir() if p.is_dir() and p.name != "analysis-cache"):
        if bench.name in skip_benchmarks or (bench.name in aside) != kept_aside_only:
            continue
        for g in sorted(p for p in bench.iterdir() if (p / "manifest.json").is_file()):
            if g.name not in GPU_PROFILES or g.name in skip_gpus or (only_gpus and g.name not in only_gpus):
                continue
            out.append(Pair(bench.name, g.name, g, GPU_PROFILES[g.name]))
    if not out:
        what = "of a benchmark kept aside " if kept_aside_only else ""
        raise InputError(f"--yardstick {yardstick}: no dataset {what}of a known GPU under DIR/<benchmark>/<GPU> "
                         f"(GPUs: {', '.join(GPU_PROFILES)})")
    return out


def load_pairs(pairs: Sequence[Pair], rows_per_pair: int, seed: int, analysis_dirs: Sequence[str] | None = None,
               transfer: bool = True) -> tuple[pd.DataFrame, DeviceProfiles, pd.DataFrame]:
    """Every pair's ok rows (measured time > 0), at most ``rows_per_pair`` of each drawn with ``seed``
    (0: all), as one frame with ``device`` = the GPU, the profile of each GPU, and *every* ok row of
    every pair as configuration-transfer rows (:func:`models.tabular.transfer_rows`: the measured
    times the transfer features are made of, sampled or not). With ``analysis_dirs`` (the analysis
    caches) the transfer rows carry each row's analytical time (the feature table of every ok row is
    built: :func:`models.tabular.table_transfer_rows`), which the transfer's residual shape
    (``xfer_shape``) needs. Without ``transfer`` no transfer rows are made (an empty frame)."""
    frames = []
    refs = []
    by_device: dict[str, DeviceProfile] = {}
    for i, p in enumerate(pairs):
        df, _ = load_measured_frame(p.path)
        t = pd.to_numeric(df["time_median_us"], errors="coerce")
        df = df[np.isfinite(t) & (t > 0)].reset_index(drop=True)
        p.rows = len(df)
        prof = load_profile(p.profile)
        if transfer:
            refs.append(transfer_rows(df, prof) if analysis_dirs is None
                        else table_transfer_rows(build_table(df, prof, analysis_dirs)))
        if rows_per_pair and len(df) > rows_per_pair:
            df = df.sample(n=rows_per_pair, random_state=seed + i).sort_index().reset_index(drop=True)
        p.sampled = len(df)
        df["device"] = p.gpu
        df["row_key"] = f"{p.benchmark}/{p.gpu}:" + df["row_key"].astype(str) if "row_key" in df.columns else None
        frames.append(df)
        by_device[p.gpu] = prof
    return (pd.concat(frames, ignore_index=True, sort=False), DeviceProfiles(by_device=by_device),
            pd.concat(refs, ignore_index=True, sort=False) if refs else pd.DataFrame())


def build_model(yardstick: Path, out: Path, analysis_dirs: Sequence[str], *, rows_per_pair: int = ROWS_PER_PAIR,
                seed: int = 0, skip_gpus: Sequence[str] = (), skip_benchmarks: Sequence[str] = (),
                transfer: bool = True, split: bool = True, seeds: int | None = None) -> dict[str, Any]:
    """Fit the bundled GPU model on every pair of the yardstick (but the GPUs and benchmarks
    skipped); write it and its card to ``out``. With ``transfer`` its configuration-transfer table
    holds every ok row of every pair (not only the sampled ones). ``seeds``: boosters per booster of
    the time head (``train.tabular.HEAD_SEEDS`` by default)."""
    t0 = time.perf_counter()
    pairs = find_pairs(yardstick, skip_gpus=skip_gpus, skip_benchmarks=skip_benchmarks)
    frame, profiles, ref = load_pairs(pairs, rows_per_pair, seed, analysis_dirs if transfer else None)
    table = device_tables(frame, profiles, analysis_dirs)
    first = profiles.by_device[pairs[0].gpu]
    model = fit_tabular(table, first, target="time", seed=seed, transfer=transfer, transfer_rows=ref, split=split,
                        seeds=seeds)
    model.summary["devices"] = sorted(profiles.by_device)
    model.summary["device_profiles"] = {g: GPU_PROFILES[g] for g in sorted(profiles.by_device)}
    model.save(out)
    card = {
        "format": CARD_FORMAT, "version": 1, "table_version": TABLE_VERSION,
        "rows": int(len(table)), "rows_per_pair": rows_per_pair, "seed": seed,
        "kernels": sorted(str(k) for k in pd.unique(frame["kernel_name"])),
        "gpus": {g: GPU_PROFILES[g] for g in sorted(profiles.by_device)},
        "pairs": [{"benchmark": p.benchmark, "gpu": p.gpu, "profile": p.profile, "ok_rows": p.rows,
                   "rows": p.sampled} for p in pairs],
        "rows_with_analytical": int(np.isfinite(table["analytical_us"]).sum()),
        "analysis_version": ANALYSIS_VERSION,
        "sources": spec_sources(sorted({p.benchmark for p in pairs})),
        "config_transfer": model.summary.get("config_transfer"),
        "level_shape_split": model.heads["time"].split,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / CARD_FILE).write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    return card


def spec_sources(benchmarks: Sequence[str], specs: Path = SPECS) -> list[dict[str, str]]:
    """Where each benchmark's kernel and caches come from (repository, commit, kernel file), as its
    yardstick spec (``bench/gpu/specs``) names them; a benchmark without a spec is left out."""
    out = []
    for f in sorted(specs.glob("*.yaml")) + sorted(specs.glob("*.json")):
        spec = load_spec(f)
        if spec.benchmark in benchmarks:
            out.append({"benchmark": spec.benchmark, "repository": spec.repository or "",
                        "commit": spec.commit or "", "kernel": spec.kernel_file})
    return out


def evaluate_model(yardstick: Path, out: Path, analysis_dirs: Sequence[str], group_by: str, folds: int, *,
                   rows_per_pair: int = ROWS_PER_PAIR, seed: int = 0, models: str = "analytical,tabular",
                   skip_gpus: Sequence[str] = (), skip_benchmarks: Sequence[str] = (),
                   device_features: bool = True, residual: bool = True, transfer: bool = True,
                   split: bool = True, seeds: int | None = None) -> dict[str, Any]:
    """``kernelcast evaluate``'s grouped out-of-fold figures on the sampled yardstick; without
    ``device_features`` the tabular model is fitted without the device columns (the baseline);
    without ``transfer`` without the configuration-transfer columns. With them, each fold's
    transfer table holds every ok row (sampled or not) of its training rows' GPUs and problems."""
    from kernelcast.train.evaluate import EvaluateOptions, _make_fitters, evaluate_frame, parse_models
    from kernelcast.train.evaluate_report import write_evaluation

    pairs = find_pairs(yardstick, skip_gpus=skip_gpus, skip_benchmarks=skip_benchmarks)
    frame, profiles, ref = load_pairs(pairs, rows_per_pair, seed, analysis_dirs if transfer else None)
    opts = EvaluateOptions(models=parse_models(models), folds=folds, seed=seed, group_by=group_by,
                           analysis_dirs=tuple(analysis_dirs))
    fitters = _make_fitters(opts.models, profiles, opts)
    if "tabular" in fitters:
        feats = None if device_features else \
            [c for c in FEATURE_COLUMNS if c not in DEVICE_COLUMNS + DEVICE_RATIO_COLUMNS + XFER_COLUMNS]
        fitters["tabular"] = TabularFitter(profiles, seed, tuple(analysis_dirs), feats, residual, transfer,
                                           ref if transfer else None, split, seeds)
    ev = evaluate_frame(frame, profiles, opts, fitters=fitters, progress=lambda m: log.info("%s", m))
    ev.metrics["sampling"] = {"rows_per_pair": rows_per_pair, "seed": seed,
                              "pairs": [{"benchmark": p.benchmark, "gpu": p.gpu, "ok_rows": p.rows,
                                         "rows": p.sampled} for p in pairs]}
    write_evaluation(ev, out, plots=False)
    return ev.metrics


def check_model(yardstick: Path, out: Path, analysis_dirs: Sequence[str], model_dir: Path, *,
                rows_per_pair: int = 0, seed: int = 0, skip_gpus: Sequence[str] = ()) -> dict[str, Any]:
    """A saved GPU model (default: the bundled one) and the analytical model scored on the pairs
    the specs keep aside (``kernelcast evaluate --folds 0``, each GPU's rows with its profile):
    nothing is fitted; ``out`` gets what :func:`evaluate_model` writes."""
    from kernelcast.train.evaluate import EvaluateOptions, evaluate_frame
    from kernelcast.train.evaluate_report import write_evaluation

    pairs = find_pairs(yardstick, skip_gpus=skip_gpus, kept_aside_only=True)
    frame, profiles, _ = load_pairs(pairs, rows_per_pair, seed, transfer=False)
    opts = EvaluateOptions(models=("analytical", "saved"), folds=0, seed=seed, saved_model=str(model_dir),
                           analysis_dirs=tuple(analysis_dirs))
    ev = evaluate_frame(frame, profiles, opts, progress=lambda m: log.info("%s", m))
    ev.metrics["sampling"] = {"rows_per_pair": rows_per_pair, "seed": seed, "model": str(model_dir),
                              "pairs": [{"benchmark": p.benchmark, "gpu": p.gpu, "ok_rows": p.rows,
                                         "rows": p.sampled} for p in pairs]}
    write_evaluation(ev, out, plots=False)
    return ev.metrics


def format_check(metrics: dict[str, Any]) -> str:
    """One line per pair: each model's median APE %, rows within 2x %, Spearman and first pick
    over the best."""
    lines = [f"{'pair':<40} {'model':<10} {'rows':>5} {'medAPE%':>8} {'in2x%':>6} {'rho':>6} {'regret':>7}"]
    for r in metrics["pairs"]["list"]:
        for name, m in r["models"].items():
            lines.append(f"{r['pair'][:40]:<40} {name:<10} {m['rows']:5d} {m['median_ape']:8.1f} "
                         f"{m['within_2x_pct']:6.1f} {m['spearman']:6.3f} {m['regret_median']:7.3f}")
    names = list(dict.fromkeys(n for r in metrics["pairs"]["list"] for n in r["models"]))
    for name in names:
        m = metrics["pairs"]["overall"].get(name)
        if not m:
            continue
        lines.append(f"{'median over pairs':<40} {name:<10} {'':>5} {m['median_ape']:8.1f} "
                     f"{m['within_2x_pct']:6.1f} {m['spearman']:6.3f} {m['regret_median']:7.3f}  first pick "
                     f"within 5 % in {m['pairs_top1_pct']:.0f} % of pairs")
    return "\n".join(lines)


#: the pair figures :func:`sample_summary` averages (``metrics["pairs"]["overall"][model]``)
SAMPLE_FIGURES = ("median_ape", "within_2x_pct", "spearman", "pairs_top1_pct", "regret_median", "shot3_median_ape")
#: most samples one ``evaluate --samples`` runs
MAX_SAMPLES = 20


def sample_summary(metrics: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several samples' evaluations of the same pairs (each a ``metrics.json``): per
    model, each sample's pair figures (:data:`SAMPLE_FIGURES`), their mean and standard deviation,
    and the first picks within 5 % counted over every sample's pairs (``top1_pairs`` of
    ``pairs_scored``)."""
    out: dict[str, Any] = {"kind": "kernelcast-gpu-samples", "version": 1, "samples": len(metrics),
                           "seeds": [m.get("sampling", {}).get("seed") for m in metrics], "models": {}}
    models = [k for k in (metrics[0].get("pairs", {}).get("overall") or {}) if
              all(k in (m.get("pairs", {}).get("overall") or {}) for m in metrics)]
    for model in models:
        per = [{f: m["pairs"]["overall"][model].get(f) for f in SAMPLE_FIGURES} for m in metrics]
        doc: dict[str, Any] = {"per_sample": per, "mean": {}, "sd": {}}
        for f in SAMPLE_FIGURES:
            v = np.array([np.nan if p[f] is None else float(p[f]) for p in per])
            ok = np.isfinite(v)
            doc["mean"][f] = float(v[ok].mean()) if ok.any() else None
            doc["sd"][f] = float(v[ok].std(ddof=1)) if ok.sum() > 1 else None
        hits = scored = 0
        for m in metrics:
            for r in m["pairs"].get("list", []):
                top = ((r.get("models") or {}).get(model) or {}).get("top1_within")
                if top is not None and np.isfinite(top):
                    scored += 1
                    hits += int(top >= 1.0)     # as train.pairs counts a pair's first pick
        doc["top1_pairs"], doc["pairs_scored"] = hits, scored
        out["models"][model] = doc
    return out


def format_samples(doc: dict[str, Any]) -> str:
    """One line per model: the mean (and sd) of each figure over the samples."""
    lines = [f"{doc['samples']} samples (seeds {', '.join(str(s) for s in doc['seeds'])}); median over pairs, "
             "mean +- sd over samples"]
    for model, d in doc["models"].items():
        parts = [f"{f} {d['mean'][f]:.3g}" + (f" +- {d['sd'][f]:.2g}" if d["sd"][f] is not None else "")
                 for f in SAMPLE_FIGURES if d["mean"][f] is not None]
        lines.append(f"{model}: " + ", ".join(parts) + f"; first pick within 5 % in {d['top1_pairs']} of "
                     f"{d['pairs_scored']} pairs")
    return "\n".join(lines)


def evaluate_samples(yardstick: Path, out: Path, analysis_dirs: Sequence[str], group_by: str, folds: int,
                     samples: int, *, seed: int = 0, **kw: Any) -> dict[str, Any]:
    """:func:`evaluate_model` on ``samples`` samples of the pairs' rows (seeds ``seed`` ..
    ``seed + samples - 1``), each into ``out/sample-<seed>``, and their :func:`sample_summary`
    into ``out/samples.json`` (written last, whole)."""
    metrics = [evaluate_model(yardstick, out / f"sample-{s}", analysis_dirs, group_by, folds, seed=s, **kw)
               for s in range(seed, seed + samples)]
    doc = sample_summary(metrics)
    tmp = out / ".samples.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, out / "samples.json")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.gpu_model", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("build", "evaluate"):
        p = sub.add_parser(name)
        p.add_argument("--yardstick", required=True, help="DIR/<benchmark>/<GPU> datasets (bench.gpu_yardstick)")
        p.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                       help="shared static analyses (kernelcast analyze --cache); default DIR/analysis-cache")
        p.add_argument("--out", required=True)
        p.add_argument("--rows-per-pair", type=int, default=ROWS_PER_PAIR,
                       help=f"ok rows sampled per (benchmark, GPU), seeded ({ROWS_PER_PAIR}; 0: all)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--json", action="store_true")
        p.add_argument("--verbose", action="store_true", help="log progress")
        p.add_argument("--skip-gpu", action="append", default=[], help="leave a GPU out entirely")
        p.add_argument("--skip-benchmark", action="append", default=[], help="leave a benchmark out entirely")
        if name == "evaluate":
            p.add_argument("--group-by", choices=("kernel", "gpu", "both"), default="gpu")
            p.add_argument("--folds", type=int, default=6)
            p.add_argument("--models", default="analytical,tabular")
            p.add_argument("--direct", action="store_true",
                           help="fit the tabular model on log2(measured) alone, not on the analytical residual")
            p.add_argument("--no-device-features", action="store_true",
                           help="fit the tabular model without the device columns (the baseline)")
            p.add_argument("--samples", type=int, default=1,
                           help="evaluate this many samples of the rows (seeds --seed, --seed + 1, ...), each "
                                "into OUT/sample-<seed>, with their mean figures in OUT/samples.json (default 1: "
                                "one sample, into OUT)")
        p.add_argument("--no-level-split", action="store_true",
                       help="fit the tabular model's residual as one booster, not as a level per (kernel, GPU) "
                            "and a shape within it")
        p.add_argument("--seeds", type=int, default=None,
                       help="boosters each booster of the time head is the mean of (default: the tabular model's, 5)")
        p.add_argument("--no-config-transfer", action="store_true",
                       help="fit the tabular model without the configuration-transfer columns (the same "
                            "configuration's times on the other GPUs)")
    p = sub.add_parser("check", help="score a saved GPU model and the analytical model on the pairs kept aside")
    p.add_argument("--yardstick", required=True, help="DIR/<benchmark>/<GPU> datasets (bench.gpu_yardstick)")
    p.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                   help="shared static analyses (kernelcast analyze --cache); default DIR/analysis-cache")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=None, metavar="DIR",
                   help="the saved model (bench.gpu_model build --out); default the bundled GPU model")
    p.add_argument("--rows-per-pair", type=int, default=0, help="ok rows sampled per pair, seeded (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-gpu", action="append", default=[], help="leave a GPU out entirely")
    p.add_argument("--json", action="store_true")
    p.add_argument("--verbose", action="store_true", help="log progress")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="%(message)s")
    try:
        if a.rows_per_pair < 0:
            raise InputError("--rows-per-pair must be >= 0")
        if getattr(a, "seeds", None) is not None and not 1 <= a.seeds <= MAX_SAVED_SEEDS:
            raise InputError(f"--seeds must be in 1-{MAX_SAVED_SEEDS}")
        if a.cmd == "evaluate" and not 1 <= a.samples <= MAX_SAMPLES:
            raise InputError(f"--samples must be in 1-{MAX_SAMPLES}")
        if a.cmd == "evaluate" and a.samples > 1 and a.rows_per_pair == 0:
            raise InputError("--samples > 1 with --rows-per-pair 0 would score every row each time")
        ys = Path(a.yardstick)
        caches = a.analysis_cache or ([str(ys / "analysis-cache")] if (ys / "analysis-cache").is_dir() else [])
        for c in caches:
            if not Path(c).is_dir():
                raise InputError(f"--analysis-cache {c}: not a directory")
        if a.cmd == "check":
            model = Path(a.model) if a.model else BUNDLED_GPU_DIR
            if not model.is_dir():
                raise InputError(f"--model {model}: not a directory")
            try:
                load_learned(str(model))
            except UsageError as e:
                raise InputError(str(e)) from None
            find_pairs(ys, skip_gpus=a.skip_gpu, kept_aside_only=True)
            doc = check_model(ys, Path(a.out), caches, model, rows_per_pair=a.rows_per_pair, seed=a.seed,
                              skip_gpus=a.skip_gpu)
            if not a.json:
                print(format_check(doc))
        elif a.cmd == "build":
            find_pairs(ys)
            doc = build_model(ys, Path(a.out), caches, rows_per_pair=a.rows_per_pair, seed=a.seed,
                              skip_gpus=a.skip_gpu, skip_benchmarks=a.skip_benchmark,
                              transfer=not a.no_config_transfer, split=not a.no_level_split, seeds=a.seeds)
        else:
            find_pairs(ys)
            kw = dict(rows_per_pair=a.rows_per_pair, models=a.models, skip_gpus=a.skip_gpu,
                      skip_benchmarks=a.skip_benchmark, device_features=not a.no_device_features,
                      residual=not a.direct, transfer=not a.no_config_transfer, split=not a.no_level_split,
                      seeds=a.seeds)
            if a.samples > 1:
                doc = evaluate_samples(ys, Path(a.out), caches, a.group_by, a.folds, a.samples, seed=a.seed, **kw)
                if not a.json:
                    print(format_samples(doc))
            else:
                doc = evaluate_model(ys, Path(a.out), caches, a.group_by, a.folds, seed=a.seed, **kw)
    except (InputError, DataError) as e:
        print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measurement ceiling: what a perfect model could score on a dataset of this machine.

``kernelcast evaluate`` compares a model's predictions with one measurement of each configuration.
That measurement is itself a draw: measured again, the same configuration on the same machine gives
another time. This benchmark measures a seeded sample of a dataset's configurations again (whole
problem groups of whole kernels, in a shuffled order, with the dataset's own timing policy unless
``--min-time`` changes the window; with ``--rounds N`` each problem's configurations in N
interleaved rounds, pooled, as ``datagen --sweep-rounds`` measures them) and scores the new
measurement *as if it were a model's prediction* of the stored one, with evaluate's own
functions: median APE, MAPE, median |log2|,
1- and 3-shot MAPE (the per-kernel log offset of :func:`train.evaluate.few_shot`), the offset floor,
and the tuning figures (the configuration measured fastest now, within 5 % of the stored best:
top-1; regret). No model can be expected to beat these figures by much on that dataset: a
model that predicted the second measurement exactly would score them.

With ``--passes 2`` every configuration is measured twice more and the second pass is scored
against the first as well (the ceiling of data measured under the chosen policy, independent of
the stored rows). With ``--oof EVAL/oof.parquet`` (an evaluation of the same dataset) every
model's out-of-fold predictions of the same rows are scored beside it.

    PYTHONPATH=. python -m kernelcast.bench.ceiling --data DATASET [--kernels 20] [--max-rows 12] [--passes 1]
        [--min-time S] [--rounds 1] [--oof EVAL/oof.parquet] [--seed 0] [--out DIR] [--json]
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.errors import InputError
from kernelcast.options import Parser

#: the shots scored (evaluate's defaults, less zero: the zero-shot figures are the row figures)
SHOTS = (1, 3)


def sample_rows(frame: pd.DataFrame, groups: np.ndarray, kernels: int, max_rows: int, seed: int) -> np.ndarray:
    """Row positions of ``frame`` to measure again: ``kernels`` kernels drawn at random (seeded) from
    those with at least four rows, and of each, whole problem groups (``groups``: evaluate's tuning
    groups) in a random order until ``max_rows`` rows (at least one group)."""
    rng = np.random.default_rng(seed)
    kid = frame["kernel_id"].to_numpy()
    ids, counts = np.unique(kid, return_counts=True)
    eligible = ids[counts >= 4]
    chosen = rng.permutation(eligible)[:kernels]
    out: list[int] = []
    for k in sorted(chosen):
        rows = np.flatnonzero(kid == k)
        taken: list[int] = []
        for g in rng.permutation(np.unique(groups[rows].astype(str))):
            members = rows[groups[rows].astype(str) == g]
            if taken and len(taken) + len(members) > max_rows:
                continue
            taken += members.tolist()
        out += taken
    return np.asarray(sorted(out), dtype=np.int64)


def score(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray, groups: np.ndarray,
          scale: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """``pred`` (a re-measurement, or a model) scored against ``true`` as evaluate scores a model."""
    from kernelcast.train.evaluate import few_shot, offset_floor, row_metrics

    from kernelcast.metrics import tuning_scores

    m = row_metrics(pred, true, kernels)
    out: dict[str, Any] = {k: m[k] for k in ("rows", "kernels", "median_ape", "mape", "p90_ape", "median_abs_log2",
                                                "bias_log2", "within_2x_pct")}
    for k in SHOTS:
        pk, scored = few_shot(pred, true, kernels, k, seed)
        out[f"shot{k}_mape"] = row_metrics(np.where(scored, pk, np.nan), true, kernels)["mape"]
    out["offset_floor_mape"] = row_metrics(offset_floor(pred, true, kernels), true, kernels)["mape"]
    t = tuning_scores(pred / scale, true / scale, groups)
    out["tuning_groups"] = t["groups"]
    out["top1_pct"] = 100.0 * t["top1_within"] if t["groups"] else math.nan
    out["regret_geomean"] = t["regret_geomean"] if t["groups"] else math.nan
    return out


def _policy(manifest: dict[str, Any], min_time_s: float | None) -> Any:
    from kernelcast.instrument.runner import TimingPolicy

    given = (manifest.get("options") or {}).get("timing") or {}
    names = {f.name for f in dataclasses.fields(TimingPolicy)}
    policy = TimingPolicy(**{k: v for k, v in given.items() if k in names})
    if min_time_s is not None:
        policy = dataclasses.replace(policy, min_time_s=min_time_s,
                                     max_time_s=max(policy.max_time_s, 4 * min_time_s))
    return policy


def check_inputs(data: Path, oof: Path | None, kernels: int, max_rows: int, passes: int,
                 min_time_s: float | None, rounds: int = 1) -> None:
    """One line (:class:`InputError`) for options or files that cannot work, before any measurement."""
    if kernels < 1 or max_rows < 2 or not 1 <= rounds <= 16:
        raise InputError("--kernels must be >= 1, --max-rows >= 2 and --rounds 1-16")
    if passes not in (1, 2):
        raise InputError("--passes must be 1 or 2")
    if min_time_s is not None and not (0 < min_time_s <= 10):
        raise InputError("--min-time must be in (0, 10] seconds")
    if not (data / "manifest.json").is_file():
        raise InputError(f"{data}: not a dataset (no manifest.json)")
    if oof is not None and not oof.is_file():
        raise InputError(f"no such file: {oof} (an evaluation's oof.parquet)")


def _oof_columns(oof: Path, keys: np.ndarray) -> dict[str, np.ndarray]:
    """Each model's OOF predictions (``<model>_us``) of the rows ``keys``; an evaluation of several
    datasets prefixes its keys with the dataset's position (``0:``), matched on the key after it."""
    o = pd.read_parquet(oof)
    if "row_key" not in o.columns:
        raise InputError(f"{oof}: not an evaluation's oof.parquet (no row_key column)")
    o = o.assign(key=o["row_key"].astype(str).str.replace(r"^\d+:", "", regex=True)).drop_duplicates("key")
    o = o.set_index("key")
    if not pd.Index(keys).isin(o.index).any():
        raise InputError(f"{oof}: none of the sampled rows are in this evaluation (another dataset?)")
    models = [c[:-3] for c in o.columns if c.endswith("_us") and not c.endswith(("_lo_us", "_hi_us"))
              and c != "measured_us"]
    return {m: o[f"{m}_us"].reindex(keys).to_numpy(dtype=np.float64) for m in models}


def run(data: Path, *, kernels: int = 20, max_rows: int = 12, passes: int = 1, min_time_s: float | None = None,
        rounds: int = 1, oof: Path | None = None, seed: int = 0, device: str = "auto",
        out: Path | None = None) -> dict[str, Any]:
    from kernelcast.datagen.corpus_store import read_corpus
    from kernelcast.datagen.counts import row_config
    from kernelcast.datagen.dataset import load_manifest
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.harness import Harness
    from kernelcast.instrument.runner import pool_rounds
    from kernelcast.train.evaluate import tuning_basis

    check_inputs(data, oof, kernels, max_rows, passes, min_time_s, rounds)
    manifest = load_manifest(data)
    dev = select_device(device)
    if manifest.get("device_identity") != dev.identity:
        raise InputError(f"{data} was measured on {(manifest.get('device') or {}).get('name')!r}, not on this "
                         f"device ({dev.name!r}): a re-measurement here says nothing of its noise")
    frame, _ = load_measured_frame(data)
    frame = frame[frame["time_median_us"].astype(float) > 0].reset_index(drop=True)
    corpus = {k.id: k for k in read_corpus(data / "kernels", compiled_only=False)}
    frame = frame[frame["kernel_id"].isin(list(corpus))].reset_index(drop=True)
    basis = tuning_basis(frame)
    pick = sample_rows(frame, basis.groups, kernels, max_rows, seed)
    if len(pick) == 0:
        raise InputError(f"{data}: no kernel with four or more ok rows to measure again")
    sub = frame.iloc[pick].reset_index(drop=True)
    models = _oof_columns(oof, sub["row_key"].to_numpy()) if oof is not None else {}
    policy = _policy(manifest, min_time_s)
    # the problem groups in a shuffled order; within one, its configurations in `rounds` interleaved rounds
    sub_groups = basis.groups[pick].astype(str)
    rng = np.random.default_rng(seed + 1)
    batches = [rng.permutation(np.flatnonzero(sub_groups == g)) for g in rng.permutation(np.unique(sub_groups))]
    times = np.full((passes, len(sub)), np.nan)
    cvs = np.full((passes, len(sub)), np.nan)
    t0 = time.time()
    with Harness(dev, meter="none", timeout_s=60) as h:
        for p in range(passes):
            for batch in batches:
                runs: dict[int, list[Any]] = {int(i): [] for i in batch}
                for _ in range(rounds if len(batch) > 1 else 1):
                    for i in batch:
                        row = sub.iloc[int(i)]
                        runs[int(i)].append(h.run(corpus[row["kernel_id"]], row_config(row.to_dict()), policy))
                for i, ms in runs.items():
                    m = pool_rounds(ms)
                    if m.status == "ok" and m.time is not None:
                        times[p, i], cvs[p, i] = m.time.median_us, m.time.cv
    stored = sub["time_median_us"].to_numpy(dtype=np.float64)
    kid = sub["kernel_id"].to_numpy()
    groups, scale = basis.groups[pick], basis.scale[pick]
    ok = np.isfinite(times).all(axis=0)
    res: dict[str, Any] = {
        "dataset": str(data), "rows": len(sub), "rows_remeasured": int(ok.sum()),
        "kernels": int(len(np.unique(kid))), "seed": seed, "passes": passes, "rounds": rounds,
        "policy": dataclasses.asdict(policy), "wall_s": round(time.time() - t0, 1),
        "stored_cv_median": float(np.nanmedian(sub["time_cv"].astype(float))) if "time_cv" in sub else None,
        "cv_median": float(np.nanmedian(cvs)), "scores": {}}
    mask = np.where(ok, 1.0, np.nan)
    res["scores"]["remeasured vs stored"] = score(times[0] * mask, stored, kid, groups, scale, seed)
    if passes == 2:
        res["scores"]["pass 2 vs pass 1"] = score(times[1] * mask, times[0] * mask, kid, groups, scale, seed)
    for name, pred in models.items():
        res["scores"][f"{name} (OOF) vs stored"] = score(pred * mask, stored, kid, groups, scale, seed)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table = sub[["row_key", "kernel_name", "gsize", "lsize"]].assign(
            stored_us=stored, **{f"pass{p + 1}_us": times[p] for p in range(passes)},
            **{f"pass{p + 1}_cv": cvs[p] for p in range(passes)})
        table.to_csv(out / "remeasured.csv", index=False)
        (out / "ceiling.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    return res


def format_report(r: dict[str, Any]) -> str:
    pol = r["policy"]
    lines = [f"{r['dataset']}: {r['rows_remeasured']} of {r['rows']} rows of {r['kernels']} kernels measured again "
             f"({r['passes']} pass(es), {r['rounds']} interleaved round(s) per problem, window >= "
             f"{pol['min_time_s']} s and {pol['min_repeats']} samples; "
             f"{r['wall_s']:.0f} s); CV of a configuration's samples, median {r['cv_median']:.3f} (stored rows "
             f"{r['stored_cv_median'] if r['stored_cv_median'] is None else round(r['stored_cv_median'], 3)})",
             f"{'scored':<28} {'rows':>5} {'medAPE%':>8} {'MAPE%':>7} {'p90%':>7} {'med|log2|':>9} {'1-shot%':>8} "
             f"{'3-shot%':>8} {'floor%':>7} {'groups':>6} {'top1%':>6} {'regret':>7}"]
    for name, s in r["scores"].items():
        lines.append(f"{name:<28} {s['rows']:5d} {s['median_ape']:8.1f} {s['mape']:7.1f} {s['p90_ape']:7.1f} "
                     f"{s['median_abs_log2']:9.3f} {s['shot1_mape']:8.1f} {s['shot3_mape']:8.1f} "
                     f"{s['offset_floor_mape']:7.1f} {s['tuning_groups']:6d} {s['top1_pct']:6.1f} "
                     f"{s['regret_geomean']:7.3f}")
    lines.append("a re-measurement scored as a prediction of the stored one: what a perfect model of this "
                 "machine would score")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.ceiling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a dataset made on this device")
    ap.add_argument("--kernels", type=int, default=20, help="kernels sampled (default 20)")
    ap.add_argument("--max-rows", type=int, default=12, help="rows per kernel, whole problem groups (default 12)")
    ap.add_argument("--passes", type=int, default=1, help="1, or 2 to score a second pass against the first")
    ap.add_argument("--min-time", type=float, default=None, help="timing window in seconds (default: the dataset's)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure each problem's configurations in N interleaved rounds, pooled (default 1)")
    ap.add_argument("--oof", default=None, help="an evaluation's oof.parquet of the same dataset")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write remeasured.csv and ceiling.json here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        r = run(Path(a.data), kernels=a.kernels, max_rows=a.max_rows, passes=a.passes, min_time_s=a.min_time,
                rounds=a.rounds,
                oof=None if a.oof is None else Path(a.oof), seed=a.seed, device=a.device,
                out=None if a.out is None else Path(a.out))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2, default=str) if a.json else format_report(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

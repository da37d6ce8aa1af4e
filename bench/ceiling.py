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

With ``--split-half`` nothing is measured and any dataset will do, one imported from another
machine's tuning cache included: every row whose stored samples (``times_us``) number at least
:data:`MIN_SPLIT_SAMPLES` is split in two, and the median of one half is scored as a prediction of
the median of the other, twice: the odd-numbered samples against the even-numbered ones
(interleaved: the noise between samples taken together) and the second half against the first
(sequential: that noise plus any drift while the configuration was timed). A model scored no better
than that on the same rows is at the data's own noise; the distance to it is the model's.

With ``--against OTHER`` nothing is measured either: ``OTHER`` is another measurement of the same
kernel's configurations (another tuning run, another machine of the same model, a cache made
months apart) and its times are scored as a prediction of ``DATA``'s, configuration by
configuration (rows matched on the tune parameters both datasets have, ``tp_*``). A model that
ranks ``DATA``'s configurations as well as ``OTHER``'s measurements do is as good as a measurement
made elsewhere; where the two differ in more than the measurement (a changed problem, compiler or
driver), the figure is the agreement of the two setups, not a noise floor.

    PYTHONPATH=. python -m kernelcast.bench.ceiling --data DATASET [--kernels 20] [--max-rows 12] [--passes 1]
        [--min-time S] [--rounds 1] [--oof EVAL/oof.parquet] [--seed 0] [--out DIR] [--json]
    PYTHONPATH=. python -m kernelcast.bench.ceiling --data DATASET --split-half [--oof EVAL/oof.parquet]
        [--out DIR] [--json]
    PYTHONPATH=. python -m kernelcast.bench.ceiling --data DATASET --against OTHER [--oof EVAL/oof.parquet]
        [--out DIR] [--json]
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
#: fewest stored samples of a row that ``--split-half`` splits (two per half)
MIN_SPLIT_SAMPLES = 4


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
    out["spearman_mean"] = t["spearman_mean"]
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


def _oof_columns(oof: Path, keys: np.ndarray, data: Path | None = None) -> dict[str, np.ndarray]:
    """Each model's OOF predictions (``<model>_us``) of the rows ``keys``; an evaluation of several
    datasets prefixes its keys with the dataset's position (``0:``), matched on the key after it, and
    one of the GPU yardstick (``bench.gpu_model evaluate``) with ``<benchmark>/<GPU>:``, of which
    only the rows of ``data`` (a dataset directory ``.../<benchmark>/<GPU>``) are read."""
    o = pd.read_parquet(oof)
    if "row_key" not in o.columns:
        raise InputError(f"{oof}: not an evaluation's oof.parquet (no row_key column)")
    parts = o["row_key"].astype(str).str.extract(r"^(?:(\d+|[^/:]+/[^/:]+):)?(.*)$")
    prefix, key = parts[0].fillna(""), parts[1]
    named = prefix.str.contains("/")
    if named.any() and data is not None:
        keep = ~named | (prefix == f"{data.parent.name}/{data.name}")
        o, key = o[keep.to_numpy()], key[keep]
    o = o.assign(key=key.to_numpy()).drop_duplicates("key").set_index("key")
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
    models = _oof_columns(oof, sub["row_key"].to_numpy(), data) if oof is not None else {}
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


def half_medians(samples: Any) -> np.ndarray:
    """The medians of a row's stored samples split in two (columns: odd-numbered, even-numbered,
    first half, second half; the sequential halves of an odd count leave the middle sample out);
    NaN when fewer than :data:`MIN_SPLIT_SAMPLES` are finite and positive."""
    x = np.asarray(samples if samples is not None else [], dtype=np.float64).ravel()
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) < MIN_SPLIT_SAMPLES:
        return np.full(4, np.nan)
    h = len(x) // 2
    return np.array([np.median(x[1::2]), np.median(x[0::2]), np.median(x[:h]), np.median(x[len(x) - h:])])


def split_half(data: Path, *, oof: Path | None = None, seed: int = 0, out: Path | None = None) -> dict[str, Any]:
    """The ``--split-half`` ceiling of a dataset (module docstring): no device, no measurement."""
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.train.evaluate import tuning_basis

    check_inputs(data, oof, 1, 2, 1, None)
    t0 = time.time()
    frame, _ = load_measured_frame(data)
    if "times_us" not in frame.columns:
        raise InputError(f"{data}: its rows keep no samples (times_us) to split")
    frame = frame[frame["time_median_us"].astype(float) > 0].reset_index(drop=True)
    halves = np.array([half_medians(v) for v in frame["times_us"]]).reshape(len(frame), 4)
    ok = np.isfinite(halves).all(axis=1)
    if ok.sum() < 2:
        raise InputError(f"{data}: fewer than two ok rows with {MIN_SPLIT_SAMPLES} or more stored samples")
    basis = tuning_basis(frame)
    sub, halves = frame[ok].reset_index(drop=True), halves[ok]
    groups, scale = basis.groups[ok], basis.scale[ok]
    kid = sub["kernel_id"].to_numpy()
    stored = sub["time_median_us"].to_numpy(dtype=np.float64)
    models = _oof_columns(oof, sub["row_key"].to_numpy(), data) if oof is not None else {}
    n = sub["times_us"].map(lambda v: int(np.size(v)))
    res: dict[str, Any] = {
        "mode": "split-half", "dataset": str(data), "rows": len(frame), "rows_split": len(sub),
        "kernels": int(len(np.unique(kid))), "seed": seed, "samples_median": float(n.median()),
        "stored_cv_median": float(np.nanmedian(sub["time_cv"].astype(float))) if "time_cv" in sub else None,
        "scores": {}}
    res["scores"]["odd vs even samples"] = score(halves[:, 0], halves[:, 1], kid, groups, scale, seed)
    res["scores"]["second vs first half"] = score(halves[:, 3], halves[:, 2], kid, groups, scale, seed)
    for name, pred in models.items():
        res["scores"][f"{name} (OOF) vs stored"] = score(pred, stored, kid, groups, scale, seed)
    scored = np.any([np.isfinite(p) for p in models.values()], axis=0) if models else np.ones(len(sub), bool)
    if not scored.all() and scored.sum() >= 2:
        # the models' rows alone (an evaluation samples some of a dataset's rows)
        res["scores"]["odd vs even, OOF rows"] = score(np.where(scored, halves[:, 0], np.nan), halves[:, 1],
                                                       kid, groups, scale, seed)
    res["wall_s"] = round(time.time() - t0, 1)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        sub[["row_key", "kernel_name"]].assign(
            stored_us=stored, odd_us=halves[:, 0], even_us=halves[:, 1], first_us=halves[:, 2],
            second_us=halves[:, 3]).to_csv(out / "halves.csv", index=False)
        (out / "ceiling.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    return res


def match_rows(frame: pd.DataFrame, other: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The tune-parameter columns (``tp_*``) both frames have, and the positions of the rows of each
    that share a configuration (aligned). A configuration that two rows of one frame share makes
    the match ambiguous: :class:`InputError`."""
    cols = sorted(c for c in frame.columns if c.startswith("tp_") and c in other.columns)
    if not cols:
        raise InputError("--against: the datasets share no tune parameter (tp_*) to match configurations on")

    def keys(f: pd.DataFrame, which: str) -> pd.Series:
        k = f[cols].astype(str).agg(",".join, axis=1)
        dup = k[k.duplicated()]
        if len(dup):
            raise InputError(f"--against: {which} has several rows of configuration {dup.iloc[0]} "
                             f"({', '.join(c[3:] for c in cols)}); a tune parameter the other lacks varies")
        return k

    ka, kb = keys(frame, "--data"), keys(other, "--against")
    pos_b = pd.Series(np.arange(len(other)), index=kb.to_numpy())
    inb = ka.isin(pos_b.index).to_numpy()
    ia = np.flatnonzero(inb)
    return cols, ia, pos_b.loc[ka[inb].to_numpy()].to_numpy()


def against(data: Path, other: Path, *, oof: Path | None = None, seed: int = 0,
            out: Path | None = None) -> dict[str, Any]:
    """The ``--against`` score (module docstring): ``other``'s measured times as a prediction of
    ``data``'s, on the configurations both measured ok; no device, no measurement."""
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.train.evaluate import tuning_basis

    check_inputs(data, oof, 1, 2, 1, None)
    if not (other / "manifest.json").is_file():
        raise InputError(f"{other}: not a dataset (no manifest.json)")
    t0 = time.time()
    frames = []
    for d in (data, other):
        f, _ = load_measured_frame(d)
        frames.append(f[f["time_median_us"].astype(float) > 0].reset_index(drop=True))
    frame, oth = frames
    cols, ia, ib = match_rows(frame, oth)
    if len(ia) < 2:
        raise InputError(f"--against: fewer than two configurations measured ok in both ({len(ia)})")
    basis = tuning_basis(frame)
    sub = frame.iloc[ia].reset_index(drop=True)
    groups, scale = basis.groups[ia], basis.scale[ia]
    kid = sub["kernel_id"].to_numpy()
    stored = sub["time_median_us"].to_numpy(dtype=np.float64)
    theirs = oth["time_median_us"].to_numpy(dtype=np.float64)[ib]
    ratio = np.log2(theirs / stored)
    res: dict[str, Any] = {
        "mode": "against", "dataset": str(data), "against": str(other), "rows": len(frame),
        "rows_other": len(oth), "rows_matched": len(sub), "matched_on": [c[3:] for c in cols],
        "kernels": int(len(np.unique(kid))), "seed": seed,
        "log2_other_over_data": {"median": float(np.median(ratio)), "p10": float(np.percentile(ratio, 10)),
                                 "p90": float(np.percentile(ratio, 90))},
        "scores": {"other dataset vs stored": score(theirs, stored, kid, groups, scale, seed)}}
    models = _oof_columns(oof, sub["row_key"].to_numpy(), data) if oof is not None else {}
    for name, pred in models.items():
        res["scores"][f"{name} (OOF) vs stored"] = score(pred, stored, kid, groups, scale, seed)
    res["wall_s"] = round(time.time() - t0, 1)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        sub[["row_key", "kernel_name", *cols]].assign(stored_us=stored, other_us=theirs).to_csv(
            out / "against.csv", index=False)
        (out / "ceiling.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
    return res


def _score_lines(scores: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"{'scored':<28} {'rows':>5} {'medAPE%':>8} {'MAPE%':>7} {'p90%':>7} {'med|log2|':>9} {'1-shot%':>8} "
             f"{'3-shot%':>8} {'floor%':>7} {'groups':>6} {'top1%':>6} {'regret':>7} {'rho':>6}"]
    for name, s in scores.items():
        lines.append(f"{name:<28} {s['rows']:5d} {s['median_ape']:8.1f} {s['mape']:7.1f} {s['p90_ape']:7.1f} "
                     f"{s['median_abs_log2']:9.3f} {s['shot1_mape']:8.1f} {s['shot3_mape']:8.1f} "
                     f"{s['offset_floor_mape']:7.1f} {s['tuning_groups']:6d} {s['top1_pct']:6.1f} "
                     f"{s['regret_geomean']:7.3f} {s['spearman_mean']:6.3f}")
    return lines


def _block(head: str, scores: dict[str, dict[str, Any]], foot: str) -> str:
    return "\n".join([head, *_score_lines(scores), foot])


def format_report(r: dict[str, Any]) -> str:
    if r.get("mode") == "against":
        q = r["log2_other_over_data"]
        return _block(f"{r['dataset']}: {r['rows_matched']} of its {r['rows']} ok rows matched in {r['against']} "
                      f"({r['rows_other']} ok rows) on {', '.join(r['matched_on'])}; log2(other / stored) median "
                      f"{q['median']:+.3f}, p10 {q['p10']:+.3f}, p90 {q['p90']:+.3f}", r["scores"],
                      "the other dataset's times scored as a prediction of this one's: the agreement of two "
                      "measurements")
    if r.get("mode") == "split-half":
        cv = r["stored_cv_median"]
        return _block(f"{r['dataset']}: {r['rows_split']} of {r['rows']} ok rows of {r['kernels']} kernels with "
                      f"{MIN_SPLIT_SAMPLES}+ stored samples (median {r['samples_median']:.0f}; CV median "
                      f"{'-' if cv is None else round(cv, 4)}), split in two halves", r["scores"],
                      "one half of each row's samples scored as a prediction of the other: the data's own noise")
    pol = r["policy"]
    lines = [f"{r['dataset']}: {r['rows_remeasured']} of {r['rows']} rows of {r['kernels']} kernels measured again "
             f"({r['passes']} pass(es), {r['rounds']} interleaved round(s) per problem, window >= "
             f"{pol['min_time_s']} s and {pol['min_repeats']} samples; "
             f"{r['wall_s']:.0f} s); CV of a configuration's samples, median {r['cv_median']:.3f} (stored rows "
             f"{r['stored_cv_median'] if r['stored_cv_median'] is None else round(r['stored_cv_median'], 3)})"]
    lines += _score_lines(r["scores"])
    lines.append("a re-measurement scored as a prediction of the stored one: what a perfect model of this "
                 "machine would score")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.ceiling", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True,
                    help="a dataset made on this device (with --split-half: any dataset)")
    ap.add_argument("--kernels", type=int, default=None, help="kernels sampled (default 20)")
    ap.add_argument("--max-rows", type=int, default=None, help="rows per kernel, whole problem groups (default 12)")
    ap.add_argument("--passes", type=int, default=None, help="1, or 2 to score a second pass against the first")
    ap.add_argument("--min-time", type=float, default=None, help="timing window in seconds (default: the dataset's)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="measure each problem's configurations in N interleaved rounds, pooled (default 1)")
    ap.add_argument("--split-half", action="store_true",
                    help="measure nothing: score one half of each row's stored samples against the other")
    ap.add_argument("--against", default=None, metavar="OTHER",
                    help="measure nothing: score another dataset of the same kernel's configurations (matched "
                         "on their tune parameters) as a prediction of this one")
    ap.add_argument("--oof", default=None, help="an evaluation's oof.parquet of the same dataset")
    ap.add_argument("--device", default=None, help="the device to measure on (default: auto)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None,
                    help="write the scored rows (remeasured.csv, halves.csv or against.csv) and ceiling.json here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    measuring = {"--kernels": a.kernels, "--max-rows": a.max_rows, "--passes": a.passes, "--min-time": a.min_time,
                 "--rounds": a.rounds, "--device": a.device}
    oof = None if a.oof is None else Path(a.oof)
    out = None if a.out is None else Path(a.out)
    try:
        if a.split_half or a.against is not None:
            mode = "--split-half" if a.split_half else "--against"
            given = [k for k, v in measuring.items() if v is not None]
            if a.split_half and a.against is not None:
                raise InputError("give --split-half or --against, not both")
            if given:
                raise InputError(f"{mode} measures nothing: leave out {', '.join(given)}")
            r = (split_half(Path(a.data), oof=oof, seed=a.seed, out=out) if a.split_half
                 else against(Path(a.data), Path(a.against), oof=oof, seed=a.seed, out=out))
        else:
            r = run(Path(a.data), kernels=20 if a.kernels is None else a.kernels,
                    max_rows=12 if a.max_rows is None else a.max_rows, passes=1 if a.passes is None else a.passes,
                    min_time_s=a.min_time, rounds=1 if a.rounds is None else a.rounds, oof=oof, seed=a.seed,
                    device="auto" if a.device is None else a.device, out=out)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r, indent=2, default=str) if a.json else format_report(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The yardstick per (kernel, device) pair: how each model does on the configurations of one kernel
measured on one device, the question a tuner asks, and where the analytical model goes wrong.

A pair is a kernel group (:mod:`train.oof`: a kernel, its near-duplicates, its synthetic template
family) on one device (the ``device`` column: an OpenCL device, or ``kt:NAME`` for a Kernel Tuner
cache of a GPU). Per pair and model: MAPE, median APE, the share within 2x, the median signed
``log2(predicted / measured)``, Spearman's rho over the pair's configurations (per problem, then
averaged, and over all its rows), top-1 within the tolerance and the regret of the predicted best
(per problem), and the k-shot median APE. Per pair where energy was measured: the analytical
energy's Spearman and top-k capture. Per pair, the analytical model's parts (launch, compute,
memory, sync; ``latency``: what its total adds above the largest part) as the median
``log2(part / measured)``, and the share of rows each part bounds with their median error: a part
far above 0 is charged too much on its own. ``overall``: the median over pairs of each figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.train.oof import AnalyticalFitter, Grouping, problem_keys

from kernelcast.metrics import (
    log2_ratio,
    mape,
    median_ape,
    ranking_scores,
    spearman,
    tuning_scores,
    within_factor,
)

#: the analytical model's time parts, as its explanation names them, and the derived latency part
PARTS = ("launch", "compute", "memory", "sync", "latency")
#: energy: the top-k of the ranking share
ENERGY_TOP_K = 20
ENERGY = "energy_j"


def _finite_median(values: Sequence[Any]) -> float:
    """The median of the finite values, NaN when there is none (without numpy's all-NaN warning)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if len(v) else float("nan")


def pair_keys(frame: pd.DataFrame, grouping: Grouping, devices: np.ndarray) -> tuple[np.ndarray, dict[str, str]]:
    """The pair of every row (``group|device``) and a readable label per pair (kernel names @ device)."""
    kernel_ids = frame["kernel_id"].astype(str).to_numpy()
    names = frame["kernel_name"].astype(str).to_numpy()
    groups = np.array([grouping.group_of[k] for k in kernel_ids], dtype=object)
    keys = np.array([f"{g}|{d}" for g, d in zip(groups, devices)], dtype=object)
    labels: dict[str, str] = {}
    for key in pd.unique(keys):
        sel = keys == key
        kn = sorted(set(names[sel]))
        kname = kn[0] if len(kn) == 1 else f"{kn[0]} (+{len(kn) - 1})"
        labels[str(key)] = f"{kname} @ {str(devices[sel][0]).removeprefix('kt:')}"
    return keys, labels


def _median_signed_log2(pred: np.ndarray, true: np.ndarray) -> float:
    r = log2_ratio(pred, true)
    r = r[np.isfinite(r)]
    return float(np.median(r)) if len(r) else float("nan")


def model_pair_figures(pred: np.ndarray, true: np.ndarray, problems: np.ndarray, tol: float) -> dict[str, Any]:
    """The figures of one model on the rows of one pair."""
    ok = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    t = tuning_scores(pred, true, problems, tol=tol)
    return {
        "rows": int(ok.sum()),
        "mape": mape(pred, true),
        "median_ape": median_ape(pred, true),
        "within_2x_pct": 100.0 * within_factor(pred, true, 2.0),
        "median_log2": _median_signed_log2(pred, true),
        "spearman": t["spearman_mean"],
        "spearman_all": spearman(pred[ok], true[ok], min_points=3) if ok.sum() >= 3 else float("nan"),
        "top1_within": t["top1_within"],
        "regret_median": t["regret_median"],
        "problems": t["groups"],
    }


def part_figures(an: AnalyticalFitter, sel: np.ndarray, true: np.ndarray) -> dict[str, Any]:
    """The analytical model's parts on the rows ``sel``: per part the median ``log2(part /
    measured)`` and, per bound, the share of rows and their median ``log2(predicted / measured)``."""
    parts = {k: v[sel] for k, v in getattr(an, "parts", {}).items()}
    y = true[sel]
    out: dict[str, Any] = {}
    if parts and "latency" not in parts:
        stacked = np.vstack([v for v in parts.values()])
        with np.errstate(invalid="ignore"):
            largest = np.nanmax(np.where(np.isfinite(stacked), stacked, np.nan), axis=0) \
                if np.isfinite(stacked).any() else np.full(len(y), np.nan)
        parts = {**parts, "latency": np.maximum(an.pred[sel] - largest, 0.0)}
    for k in PARTS:
        if k in parts:
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.log2(parts[k] / y)
            r = r[np.isfinite(r)]
            out[k] = {"median_log2": float(np.median(r)) if len(r) else float("nan"),
                      "rows": int(len(r))}
    bound = np.asarray(an.bound)[sel]
    pred = an.pred[sel]
    by_bound: dict[str, Any] = {}
    for b in sorted(set(bound.tolist())):
        m = bound == b
        by_bound[str(b)] = {"share_pct": 100.0 * float(m.mean()), "median_log2": _median_signed_log2(pred[m], y[m])}
    return {"parts": out, "by_bound": by_bound}


def analytical_energy_pairs(frame: pd.DataFrame, an: AnalyticalFitter, devices: np.ndarray,
                            grouping: Grouping, top_k: int = ENERGY_TOP_K) -> dict[str, Any]:
    """Per pair with measured energy: the analytical energy's ranking figures
    (:func:`kernelcast.metrics.ranking_scores` over the pair's problems)."""
    if ENERGY not in frame.columns:
        return {}
    e = pd.to_numeric(frame[ENERGY], errors="coerce").to_numpy(dtype=np.float64)
    has = np.isfinite(e) & (e > 0)
    if not has.any():
        return {}
    keys, _ = pair_keys(frame, grouping, devices)
    problems = problem_keys(frame)
    pred = getattr(an, "energy", np.full(len(frame), np.nan))
    out: dict[str, Any] = {}
    for key in pd.unique(keys[has]):
        sel = has & (keys == key)
        if sel.sum() < 3:
            continue
        out[str(key)] = ranking_scores(pred[sel], e[sel], problems[sel], top_k=top_k)
    return out


def pair_figures(frame: pd.DataFrame, oof: Mapping[str, np.ndarray], models: Sequence[str], true: np.ndarray,
                 grouping: Grouping, devices: np.ndarray, opts: Any, *, an: AnalyticalFitter | None = None,
                 shots: Mapping[str, Mapping[str, np.ndarray]] | None = None,
                 energy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Figures per (kernel, device) pair and their medians over pairs (module docstring).
    ``shots``: model -> k -> the k-shot corrected predictions (NaN on the rows not scored)."""
    keys, labels = pair_keys(frame, grouping, devices)
    problems = problem_keys(frame)
    tol = float(getattr(opts, "tuning_tolerance", 0.05))
    rows: list[dict[str, Any]] = []
    for key in sorted(pd.unique(keys), key=lambda k: labels[str(k)]):
        sel = keys == key
        entry: dict[str, Any] = {"pair": labels[str(key)], "key": str(key), "rows": int(sel.sum()),
                                 "device": str(devices[sel][0]), "models": {}}
        for m in models:
            fig = model_pair_figures(oof[m][sel], true[sel], problems[sel], tol)
            for k, pk in (shots or {}).get(m, {}).items():
                if int(k) > 0:
                    fig[f"shot{k}_median_ape"] = median_ape(pk[sel], true[sel])
            entry["models"][m] = fig
        if an is not None and "analytical" in models:
            entry["analytical_parts"] = part_figures(an, sel, true)
        if energy and str(key) in energy:
            entry["energy"] = energy[str(key)]
        rows.append(entry)
    overall: dict[str, Any] = {}
    for m in models:
        figs: dict[str, Any] = {}
        names = sorted({k for r in rows for k in r["models"].get(m, {}) if k not in ("rows", "problems")})
        for name in names:
            vals = np.array([r["models"][m].get(name, np.nan) for r in rows], dtype=np.float64)
            vals = vals[np.isfinite(vals)]
            figs[name] = float(np.median(vals)) if len(vals) else float("nan")
        tops = np.array([r["models"][m]["top1_within"] for r in rows], dtype=np.float64)
        tops = tops[np.isfinite(tops)]
        figs["pairs_top1_pct"] = 100.0 * float(np.mean(tops >= 1.0)) if len(tops) else float("nan")
        overall[m] = figs
    en = [r["energy"] for r in rows if "energy" in r]
    if en:
        overall["energy_analytical"] = {
            k: _finite_median([e.get(k, np.nan) for e in en])
            for k in ("spearman_mean", "top_k_share_pct") if any(k in e for e in en)}
    return {"count": len(rows), "list": rows, "overall": overall,
            "note": "per pair: a kernel group on one device; overall: the median over pairs"}


def format_pairs(pairs: Mapping[str, Any], models: Sequence[str]) -> str:
    """The per-pair table (one line per pair and model) and the per-part breakdown, as text."""
    if not pairs or not pairs.get("list"):
        return ""

    def f(x: Any, spec: str) -> str:
        return "-" if not isinstance(x, (int, float)) or x != x else format(x, spec)

    lines = ["per (kernel, device) pair:",
             f"  {'pair':<40} {'model':<10} {'rows':>6} {'MAPE%':>8} {'medAPE%':>8} {'in2x%':>6} "
             f"{'medlog2':>8} {'rho':>6} {'top1':>5} {'regret':>7}"]
    for r in pairs["list"]:
        for m in models:
            g = r["models"].get(m)
            if not g:
                continue
            lines.append(f"  {r['pair'][:40]:<40} {m:<10} {g['rows']:>6} {f(g['mape'], '.1f'):>8} "
                         f"{f(g['median_ape'], '.1f'):>8} {f(g['within_2x_pct'], '.0f'):>6} "
                         f"{f(g['median_log2'], '+.2f'):>8} {f(g['spearman'], '.2f'):>6} "
                         f"{f(g['top1_within'], '.0%'):>5} {f(g['regret_median'], '.2f'):>7}")
    for m in models:
        o = pairs["overall"].get(m, {})
        lines.append(f"  {'median over ' + str(pairs['count']) + ' pairs':<40} {m:<10} {'':>6} "
                     f"{f(o.get('mape'), '.1f'):>8} {f(o.get('median_ape'), '.1f'):>8} "
                     f"{f(o.get('within_2x_pct'), '.0f'):>6} {f(o.get('median_log2'), '+.2f'):>8} "
                     f"{f(o.get('spearman'), '.2f'):>6} {f(o.get('pairs_top1_pct'), '.0f'):>4}% "
                     f"{f(o.get('regret_median'), '.2f'):>7}")
    parted = [r for r in pairs["list"] if "analytical_parts" in r]
    if parted:
        lines.append("analytical parts, median log2(part / measured) (latency: the total above the largest part):")
        lines.append(f"  {'pair':<40} " + " ".join(f"{p:>8}" for p in PARTS) + "  bound (share %)")
        for r in parted:
            pp = r["analytical_parts"]
            bounds = ", ".join(f"{b} {v['share_pct']:.0f}" for b, v in pp["by_bound"].items())
            lines.append(f"  {r['pair'][:40]:<40} "
                         + " ".join(f"{f(pp['parts'].get(p, {}).get('median_log2'), '+.2f'):>8}" for p in PARTS)
                         + f"  {bounds}")
    en = [r for r in pairs["list"] if "energy" in r]
    if en:
        lines.append("analytical energy ranking (pairs with measured energy):")
        for r in en:
            e = r["energy"]
            lines.append(f"  {r['pair'][:40]:<40} rho {f(e.get('spearman_mean'), '.2f')}, "
                         f"top-{e.get('k_max')} capture {f(e.get('top_k_share_pct'), '.0f')} % over {e['rows']} rows")
    return "\n".join(lines)

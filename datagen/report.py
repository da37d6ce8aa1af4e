"""Dataset summaries and the IQR before/after plot (LLMPerf Figure 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.datagen.dataset import repeatability


def _times(v: Any) -> float:
    if v is None:
        return 0.0
    try:
        return float(np.sum(np.asarray(v, dtype=float)))
    except (TypeError, ValueError):
        return 0.0


def _dist(s: pd.Series) -> dict[str, float]:
    s = s.dropna()
    if s.empty:
        return {"n": 0}
    return {"n": int(len(s)), "p10": float(s.quantile(0.1)), "p25": float(s.quantile(0.25)),
            "p50": float(s.median()), "p75": float(s.quantile(0.75)), "p90": float(s.quantile(0.9)),
            "max": float(s.max())}


def summarize(df: pd.DataFrame, manifest: dict[str, Any], raw: pd.DataFrame | None = None) -> dict[str, Any]:
    """Counts and distributions of a dataset, and a text rendering of them; with ``raw`` (the rows
    before re-measurements are resolved) also its repeatability (:func:`datagen.dataset.repeatability`)."""
    if df.empty:
        return {"rows": 0, "text": "empty dataset"}
    valid = df[df["pass"] == "validity"]
    rows = df[df["pass"] != "validity"]
    kernels = df["kernel_id"].nunique()
    ok = rows[rows["status"] == "ok"]
    with_ok = ok["kernel_id"].nunique()
    info: dict[str, Any] = {
        "device": manifest.get("device", {}).get("name"),
        "kernels": int(kernels),
        "kernel_validity": valid["status"].value_counts().to_dict(),
        "rows": int(len(rows)),
        "rows_by_status": rows["status"].value_counts().to_dict(),
        "kernels_with_ok_row": int(with_ok),
        "share_kernels_with_ok_row": with_ok / kernels if kernels else 0.0,
        "time_by_regime": {r: _dist(g["time_median_us"]) for r, g in ok.groupby("regime")},
        "time_before_iqr": _dist(ok[ok["pass"] == "sample"]["time_median_us"]),
        "time_after_iqr": _dist(ok["time_median_us"]),
    }
    kt = sum(_times(v) for v in rows["times_us"]) * 1e-6 if "times_us" in rows else 0.0
    wall = float(rows["wall_s"].fillna(0).sum()) if "wall_s" in rows else 0.0
    info["harness_overhead_ratio"] = wall / kt if kt else None
    if len(rows) > 1 and "measured_at" in rows:
        span = float(rows["measured_at"].max() - rows["measured_at"].min())
        info["rows_per_hour_span"] = len(rows) / span * 3600 if span > 0 else None
    lines = [
        f"device: {info['device']}",
        f"kernels: {kernels}; validity: " + ", ".join(f"{k} {v}" for k, v in info["kernel_validity"].items()),
        f"rows: {len(rows)}; " + ", ".join(f"{k} {v}" for k, v in info["rows_by_status"].items()),
        f"kernels with at least one ok configuration: {with_ok}/{kernels} "
        f"({100 * info['share_kernels_with_ok_row']:.1f} %)",
    ]
    if info["harness_overhead_ratio"]:
        lines.append(f"harness overhead: {info['harness_overhead_ratio']:.2f}x summed kernel time")
    if info.get("rows_per_hour_span"):
        lines.append(f"rate: {info['rows_per_hour_span']:.0f} rows/hour (first to last row)")
    if raw is not None:
        rep = info["repeatability"] = repeatability(raw)
        if rep.get("pairs"):
            reasons = ", ".join(f"{r} {v['pairs']}" for r, v in (rep.get("by_reason") or {}).items())
            lines.append(f"measured twice: {rep['pairs']} second measurements ({reasons}); the dropped measurement "
                         f"against the kept one: MAPE {rep['mape']:.1f} %, median APE {rep['median_ape']:.1f} %, "
                         f"median |log2| {rep['median_abs_log2']:.3f}")
    for name, d in [*(("regime " + r, v) for r, v in info["time_by_regime"].items()),
                    ("before IQR", info["time_before_iqr"]), ("after IQR", info["time_after_iqr"])]:
        if d.get("n"):
            lines.append(f"time {name:>15}: n={d['n']:6d} p10 {d['p10']:10.1f} p50 {d['p50']:10.1f} "
                         f"p90 {d['p90']:10.1f} max {d['max']:10.1f} us")
    info["text"] = "\n".join(lines)
    return info


def plot_rebalance(df: pd.DataFrame, kernel: str, out: Path) -> Path:
    """Histogram of times and time vs N_WG before (first pass) and after IQR rebalancing for the
    (kernel, local size) with the most rebalancing rows (``kernel='auto'``: over all kernels)."""
    import matplotlib  # deferred: matplotlib is a heavy import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib is a heavy import

    ok = df[(df["status"] == "ok") & (df["pass"].isin(["sample", "iqr"]))].copy()
    if kernel != "auto":
        ok = ok[ok["kernel_name"] == kernel]
        if ok.empty:
            raise ValueError(f"no ok rows for kernel {kernel!r} in the dataset")
    ok["lkey"] = ok["lsize"].map(lambda v: json.dumps([int(x) for x in v]) if v is not None else "")
    counts = ok[ok["pass"] == "iqr"].groupby(["kernel_name", "lkey"]).size()
    if counts.empty:
        raise ValueError("no IQR rebalancing rows to plot (run datagen with --rebalance iqr)")
    name, lkey = counts.idxmax()
    sel = ok[(ok["kernel_name"] == name) & (ok["lkey"] == lkey)]
    before = sel[sel["pass"] == "sample"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    bins = np.linspace(sel["time_median_us"].min(), sel["time_median_us"].max(), 21)
    axes[0, 0].hist(before["time_median_us"], bins=bins, color="tab:blue")
    axes[0, 0].set_title(f"before IQR (n={len(before)})")
    axes[0, 1].hist(sel["time_median_us"], bins=bins, color="tab:orange")
    axes[0, 1].set_title(f"after IQR (n={len(sel)})")
    for ax in axes[0]:
        ax.set_xlabel("median time (us)")
        ax.set_ylabel("configurations")
    axes[1, 0].scatter(before["n_wg"], before["time_median_us"], s=10)
    axes[1, 1].scatter(sel["n_wg"], sel["time_median_us"], s=10,
                       c=np.where(sel["pass"] == "iqr", "tab:orange", "tab:blue"))
    for ax in axes[1]:
        ax.set_xlabel("work-groups N_WG")
        ax.set_ylabel("median time (us)")
    fig.suptitle(f"{name}, lsize {lkey}: execution-time distribution before/after IQR rebalancing")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

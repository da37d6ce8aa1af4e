"""Accuracy metrics of time/energy predictions: MAPE (LLMPerf eq. 3), median APE, Spearman's rho."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Absolute percentage error per row, in percent."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    return 100.0 * np.abs(pred - true) / np.abs(true)


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(ape(pred, true))) if len(true) else float("nan")


def median_ape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.median(ape(pred, true))) if len(true) else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties get the average of the ranks they span (as scipy.stats.rankdata 'average')."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    i = 0
    n = len(x)
    while i < n:
        j = i
        while j + 1 < n and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's r of the tie-averaged ranks (NaN when a side is constant)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(a) < 2:
        return float("nan")
    ra = rankdata(a)
    rb = rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den > 0 else float("nan")


def evaluate(pred: np.ndarray, true: np.ndarray, kernels: Sequence[Any] | np.ndarray,
             names: Sequence[Any] | np.ndarray | None = None) -> dict[str, Any]:
    """MAPE over rows and averaged per kernel, median APE, Spearman rho, and each kernel's MAPE."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    kernels = np.asarray(kernels)
    errs = ape(pred, true)
    per_kernel: dict[str, dict[str, Any]] = {}
    for k in np.unique(kernels):
        sel = kernels == k
        entry: dict[str, Any] = {"rows": int(sel.sum()), "mape": float(errs[sel].mean())}
        if names is not None:
            entry["name"] = str(np.asarray(names)[sel][0])
        per_kernel[str(k)] = entry
    return {
        "rows": int(len(true)),
        "kernels": len(per_kernel),
        "mape": float(errs.mean()) if len(errs) else float("nan"),
        "mape_per_kernel": float(np.mean([v["mape"] for v in per_kernel.values()])) if per_kernel else float("nan"),
        "median_ape": float(np.median(errs)) if len(errs) else float("nan"),
        "spearman": spearman(pred, true),
        "per_kernel": per_kernel,
    }

"""Accuracy metrics of time/energy predictions, the one copy every stage uses: absolute percentage
errors (MAPE, LLMPerf eq. 3; median APE) and Spearman's rank correlation (``scipy.stats``).

Rows whose prediction or measurement is not finite, or whose measurement is not positive, carry no
error and are left out of every figure; a figure with no row left is NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats


def _valid(pred: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    return pred[ok], true[ok]


def ape(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Absolute percentage error per row, in percent (NaN where the row carries no error)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 100.0 * np.abs(pred - true) / np.abs(true)
    return np.where(np.isfinite(pred) & np.isfinite(true) & (true > 0), out, np.nan)


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    p, y = _valid(pred, true)
    return float(np.mean(100.0 * np.abs(p - y) / y)) if len(y) else float("nan")


def median_ape(pred: np.ndarray, true: np.ndarray) -> float:
    """Median absolute percentage error, in percent."""
    p, y = _valid(pred, true)
    return float(np.median(100.0 * np.abs(p - y) / y)) if len(y) else float("nan")


def spearman(a: np.ndarray, b: np.ndarray, min_points: int = 2) -> float:
    """Spearman's rho over the pairs where both sides are finite (ties get average ranks); NaN with
    fewer than ``min_points`` pairs or when a side is constant."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < max(2, min_points):
        return float("nan")
    a, b = a[ok], b[ok]
    if np.all(a == a[0]) or np.all(b == b[0]):
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = stats.spearmanr(a, b).statistic
    return float(rho)


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
        entry: dict[str, Any] = {"rows": int(sel.sum()), "mape": mape(pred[sel], true[sel])}
        if names is not None:
            entry["name"] = str(np.asarray(names)[sel][0])
        per_kernel[str(k)] = entry
    return {
        "rows": int(len(true)),
        "kernels": len(per_kernel),
        "mape": mape(pred, true),
        "mape_per_kernel": float(np.nanmean([v["mape"] for v in per_kernel.values()])) if per_kernel
        else float("nan"),
        "median_ape": float(np.nanmedian(errs)) if np.isfinite(errs).any() else float("nan"),
        "spearman": spearman(pred, true),
        "per_kernel": per_kernel,
    }

"""Accuracy metrics of time/energy predictions, the one copy every stage uses: absolute percentage
errors (MAPE, LLMPerf eq. 3; median and 90th-percentile APE), Spearman's rank correlation
(``scipy.stats``), errors in log space (``log2(pred / measured)``: median absolute value, bias,
mean square, share within a factor), per-kernel MAPE, tuning scores over groups of configurations
(top-1 within a tolerance of the measured best, regret) and interval coverage.

Rows whose prediction or measurement is not finite, or whose measurement is not positive, carry no
error and are left out of every figure; the log-space figures also leave out rows whose prediction
is not positive. A figure with no row left is NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


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
    from scipy import stats  # imported on first use: it costs a second at start-up

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


# ---------------------------------------------------------------------------------------------
# percentiles of APE, log-space errors, per-kernel MAPE


def ape_quantile(pred: np.ndarray, true: np.ndarray, q: float) -> float:
    """The ``q`` quantile (0-1, linear interpolation) of the absolute percentage errors, in percent."""
    p, y = _valid(pred, true)
    return float(np.quantile(100.0 * np.abs(p - y) / y, q)) if len(y) else float("nan")


def p90_ape(pred: np.ndarray, true: np.ndarray) -> float:
    """90th percentile of the absolute percentage errors, in percent (the tail MAPE averages in)."""
    return ape_quantile(pred, true, 0.9)


def log2_ratio(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """``log2(pred / true)`` per row (NaN where the row carries no error or the prediction is not
    positive): 1 is a prediction twice the measurement, -1 half of it."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0) & (pred > 0)
    out = np.full(pred.shape, np.nan)
    out[ok] = np.log2(pred[ok] / true[ok])
    return out


def _finite(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x[np.isfinite(x)]
    return out


def median_abs_log2(pred: np.ndarray, true: np.ndarray) -> float:
    """Median of ``|log2(pred / true)|`` (0.585 is a factor of 1.5, 1 a factor of 2)."""
    r = _finite(log2_ratio(pred, true))
    return float(np.median(np.abs(r))) if len(r) else float("nan")


def log2_bias(pred: np.ndarray, true: np.ndarray) -> float:
    """Median of ``log2(pred / true)``: negative when the model predicts low."""
    r = _finite(log2_ratio(pred, true))
    return float(np.median(r)) if len(r) else float("nan")


def mean_sq_log2(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean of ``log2(pred / true) ** 2`` (the loss of a model fitted in log space)."""
    r = _finite(log2_ratio(pred, true))
    return float(np.mean(r ** 2)) if len(r) else float("nan")


def within_factor(pred: np.ndarray, true: np.ndarray, factor: float = 2.0) -> float:
    """Share (0-1) of the rows whose prediction is within ``factor`` of the measurement
    (``true / factor <= pred <= true * factor``); a prediction that is not positive is outside."""
    p, y = _valid(pred, true)
    if not len(y):
        return float("nan")
    return float(np.mean((p >= y / factor) & (p <= y * factor)))


def per_kernel_mape(pred: np.ndarray, true: np.ndarray, kernels: Sequence[Any] | np.ndarray) -> tuple[float, float]:
    """(mean, median) over kernels of each kernel's MAPE, in percent: every kernel counts once,
    however many rows it has."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    kernels = np.asarray(kernels)
    per = [mape(pred[kernels == k], true[kernels == k]) for k in np.unique(kernels)]
    per = [v for v in per if np.isfinite(v)]
    if not per:
        return float("nan"), float("nan")
    return float(np.mean(per)), float(np.median(per))


# ---------------------------------------------------------------------------------------------
# tuning: which configuration of a group is fastest


def tuning_scores(pred: np.ndarray, true: np.ndarray, groups: Sequence[Any] | np.ndarray, *, tol: float = 0.05,
                  min_rho_points: int = 3) -> dict[str, Any]:
    """How well predictions pick the fastest configuration of each group (e.g. the launch
    configurations of one kernel for one problem).

    Per group of at least two rows with a prediction: the configuration predicted fastest is
    *top-1* when its measured time is within ``tol`` of the group's measured best, its *regret* is
    its measured time / the measured best (1 is perfect), and Spearman's rho compares the two
    orders (groups of at least ``min_rho_points`` rows). Returns the number of groups, the share
    (0-1) of top-1 groups, the median, mean, geometric mean and largest regret, and the mean rho.
    """
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    groups = np.asarray(groups)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    regrets: list[float] = []
    rhos: list[float] = []
    for g in np.unique(groups[ok]):
        sel = ok & (groups == g)
        if sel.sum() < 2:
            continue
        p, y = pred[sel], true[sel]
        regrets.append(float(y[int(np.argmin(p))] / y.min()))
        rho = spearman(p, y, min_points=min_rho_points)
        if np.isfinite(rho):
            rhos.append(rho)
    r = np.asarray(regrets)
    nan = float("nan")
    return {
        "groups": len(regrets),
        "top1_within": float(np.mean(r <= 1.0 + tol)) if len(r) else nan,
        "regret_median": float(np.median(r)) if len(r) else nan,
        "regret_mean": float(np.mean(r)) if len(r) else nan,
        "regret_geomean": float(np.exp(np.mean(np.log(r)))) if len(r) else nan,
        "regret_max": float(np.max(r)) if len(r) else nan,
        "spearman_mean": float(np.mean(rhos)) if rhos else nan,
        "spearman_groups": len(rhos),
    }


def measured_top_scores(pred: np.ndarray, true: np.ndarray, groups: Sequence[Any] | np.ndarray, k: int, *,
                        tol: float = 0.05) -> dict[str, Any]:
    """Tuning with ``k`` measurements, as ``kernelcast tune --measure-top K`` does it: in each group
    of more than ``k`` rows with a prediction, the ``k`` configurations predicted fastest are
    measured and the fastest of them is the choice (as ``tune --measure-top K`` chooses without a
    shape prior: a per-kernel factor from those measurements scales every unmeasured configuration
    alike, so it never moves one of them ahead of another; ``train.evaluate.adaptive_top_scores``
    scores the choice with each measurement fed back).
    Groups of ``k`` rows or fewer are left out: measuring all of them always finds the best. Returns
    the number of groups, the share (0-1) whose choice is within ``tol`` of the group's measured
    best, and the median, geometric mean and largest regret (measured time of the choice / best)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    groups = np.asarray(groups)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    regrets: list[float] = []
    for g in np.unique(groups[ok]):
        sel = np.flatnonzero(ok & (groups == g))
        if len(sel) <= k or k < 1:
            continue
        top = sel[np.argsort(pred[sel], kind="stable")[:k]]
        regrets.append(float(true[top].min() / true[sel].min()))
    r = np.asarray(regrets)
    nan = float("nan")
    return {
        "k": k,
        "groups": len(regrets),
        "top1_within": float(np.mean(r <= 1.0 + tol)) if len(r) else nan,
        "regret_median": float(np.median(r)) if len(r) else nan,
        "regret_geomean": float(np.exp(np.mean(np.log(r)))) if len(r) else nan,
        "regret_max": float(np.max(r)) if len(r) else nan,
    }


def top_k_share(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    """The share (0-1) of the ``k`` rows with the lowest measured value that are among the ``k`` rows
    with the lowest prediction (FlipFlop's "top-20 found in the predicted top-20"); rows where either
    side is not finite are left out; NaN when fewer than ``k`` rows remain. Ties are broken by row
    order (a stable sort)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    ok = np.flatnonzero(np.isfinite(pred) & np.isfinite(true))
    if k < 1 or len(ok) < k:
        return float("nan")
    best_true = set(ok[np.argsort(true[ok], kind="stable")[:k]].tolist())
    best_pred = set(ok[np.argsort(pred[ok], kind="stable")[:k]].tolist())
    return len(best_true & best_pred) / k


def ranking_scores(pred: np.ndarray, true: np.ndarray, groups: Sequence[Any] | np.ndarray, *, top_k: int = 20,
                   min_rho_points: int = 3) -> dict[str, Any]:
    """How well predictions order the configurations of each group (e.g. the energies of one
    kernel's configurations for one problem): per group with at least ``min_rho_points`` rows where
    both sides are finite, Spearman's rho and :func:`top_k_share` with ``k = min(top_k, rows // 2)``
    (a group no larger than ``top_k`` would otherwise find its whole top-k trivially). Returns the
    number of groups, the mean and median rho over groups where it is defined, the mean top-k share
    in percent, and the smallest and largest k used."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    groups = np.asarray(groups)
    ok = np.isfinite(pred) & np.isfinite(true)
    rhos: list[float] = []
    shares: list[float] = []
    ks: list[int] = []
    n_groups = 0
    for g in np.unique(groups[ok]):
        sel = ok & (groups == g)
        n = int(sel.sum())
        if n < min_rho_points:
            continue
        n_groups += 1
        rho = spearman(pred[sel], true[sel], min_points=min_rho_points)
        if np.isfinite(rho):
            rhos.append(rho)
        k = min(top_k, n // 2)
        share = top_k_share(pred[sel], true[sel], k)
        if np.isfinite(share):
            shares.append(share)
            ks.append(k)
    nan = float("nan")
    return {
        "groups": n_groups,
        "rows": int(ok.sum()),
        "spearman_mean": float(np.mean(rhos)) if rhos else nan,
        "spearman_median": float(np.median(rhos)) if rhos else nan,
        "spearman_groups": len(rhos),
        "top_k": top_k,
        "top_k_share_pct": 100.0 * float(np.mean(shares)) if shares else nan,
        "k_min": min(ks) if ks else None,
        "k_max": max(ks) if ks else None,
    }


# ---------------------------------------------------------------------------------------------
# intervals


def conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The split-conformal quantile of nonconformity ``scores`` for coverage ``level``: the
    ``ceil((n + 1) level)``-th smallest finite score (infinite when that exceeds ``n``)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    s = np.sort(_finite(np.asarray(scores, dtype=np.float64)))
    k = int(np.ceil((len(s) + 1) * level))
    if k > len(s):
        return float("inf")
    return float(s[k - 1])


def interval_coverage(lo: np.ndarray, hi: np.ndarray, true: np.ndarray) -> float:
    """Share (0-1) of the rows with a measurement and an interval whose interval holds the measurement."""
    lo, hi, true = (np.asarray(x, dtype=np.float64) for x in (lo, hi, true))
    ok = ~np.isnan(lo) & ~np.isnan(hi) & np.isfinite(true) & (true > 0)
    if not ok.any():
        return float("nan")
    return float(np.mean((lo[ok] <= true[ok]) & (true[ok] <= hi[ok])))

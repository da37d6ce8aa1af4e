"""Model-guided search: the best configuration of a finite space with as few measurements as possible.

The model predicts every configuration before anything runs. The search measures the configuration
predicted fastest, then corrects the model for this kernel with what it measured and picks the next
one, until a budget is spent or no unmeasured configuration can still beat the best measured one.

The correction works on ``log2`` times. Its mean is the model's prediction plus an offset (the mean
residual ``log2(measured / predicted)`` of the measurements so far) plus a Gaussian process over
the residuals, whose inputs are the configuration's tune parameters (each scaled to [0, 1], on a
log2 scale where the values span a factor of 4 or more) and the model's own ``log2`` prediction: a
parameter the model gets wrong moves the predictions of the configurations that share it. The GP's
length scale is chosen by marginal likelihood among a few values after every measurement, its
variance from the residuals' spread (at least ``min_var``: the model is never trusted to better than
about ``2**sqrt(min_var)`` in shape). The next configuration is the one with the largest expected
improvement over the best measured time under that posterior; a configuration whose measurement
failed is measured once and never again. The search stops early (``settle``) when no unmeasured
configuration has an expected improvement above ``settle_ei`` (in log2 units): its posterior says
none is likely to beat the best.

Where the model has no prediction for a configuration (its analysis failed), the prior mean there
is the median prediction, so the GP and the measurements decide.

``measure(i)`` is the seam: a real launch of configuration ``i`` on the local device, or a lookup
in a cache of measurements (a simulation of the search on public data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import ndtr

#: length scales tried (inputs scaled to [0, 1])
LENGTH_SCALES = (0.15, 0.3, 0.6, 1.2)
#: the GP's noise variance, in log2 units (measurement repeatability)
NOISE_VAR = 0.003
#: the GP's least signal variance, in log2 units
MIN_VAR = 0.25
#: prior signal variance before the residuals say anything (one measurement)
PRIOR_VAR = 1.0


@dataclass
class SearchStep:
    """One measurement of the search."""

    index: int                  # position of the configuration in the space
    measured_us: float          # NaN: the configuration failed
    predicted_us: float         # the corrected prediction when it was chosen
    best_us: float              # the best measured time so far (NaN while none succeeded)
    expected_improvement: float  # in log2 units (inf for the first, the model's pick)


@dataclass
class SearchResult:
    steps: list[SearchStep]
    best_index: int | None
    stopped: str                # budget | settled | exhausted
    space: int

    @property
    def best_us(self) -> float:
        return self.steps[-1].best_us if self.steps else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"space": self.space, "measurements": len(self.steps), "best_index": self.best_index,
                "best_us": self.best_us, "stopped": self.stopped, "steps": [asdict(s) for s in self.steps]}


def encode_params(params: pd.DataFrame) -> np.ndarray:
    """Tune parameters as GP inputs in [0, 1]: numeric columns on a log2 scale where all values are
    positive and span a factor of 4 or more, others linear; non-numeric columns by their sorted
    distinct values; constant columns dropped."""
    cols: list[np.ndarray] = []
    for c in params.columns:
        v = pd.to_numeric(params[c], errors="coerce")
        if v.notna().all():
            a = v.to_numpy(dtype=np.float64)
            if (a > 0).all() and a.max() / a.min() >= 4:
                a = np.log2(a)
        else:
            cats = sorted(set(params[c].astype(str)))
            a = np.array([cats.index(x) for x in params[c].astype(str)], dtype=np.float64)
        lo, hi = float(np.min(a)), float(np.max(a))
        if hi > lo:
            cols.append((a - lo) / (hi - lo))
    if not cols:
        return np.zeros((len(params), 0))
    return np.column_stack(cols)


def _sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T, 0.0)


@dataclass
class _Posterior:
    mean: np.ndarray            # log2 time
    sd: np.ndarray
    length_scale: float = field(default=float("nan"))


def _posterior(x: np.ndarray, prior: np.ndarray, idx: np.ndarray, z: np.ndarray, *, min_var: float,
               noise: float) -> _Posterior:
    """The GP posterior of log2 time over every configuration from the successful measurements
    ``z`` (log2 us) of the configurations ``idx``."""
    r = z - prior[idx]
    off = float(np.mean(r))
    d = r - off
    var = max(float(np.var(r)) if len(r) >= 3 else PRIOR_VAR, min_var)
    xm = x[idx]
    best: tuple[float, float, np.ndarray, np.ndarray] | None = None
    for ls in LENGTH_SCALES:
        k = var * np.exp(-0.5 * _sqdist(xm, xm) / ls ** 2) + noise * np.eye(len(idx))
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            continue
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, d))
        nll = 0.5 * float(d @ alpha) + float(np.log(np.diag(chol)).sum())
        if best is None or nll < best[0]:
            best = (nll, ls, chol, alpha)
    if best is None:
        return _Posterior(prior + off, np.full(len(prior), math.sqrt(var)))
    _, ls, chol, alpha = best
    ks = var * np.exp(-0.5 * _sqdist(x, xm) / ls ** 2)
    mean = prior + off + ks @ alpha
    v = np.linalg.solve(chol, ks.T)
    sd = np.sqrt(np.maximum(var - (v * v).sum(0), 1e-12))
    return _Posterior(mean, sd, ls)


def _expected_improvement(best: float, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    u = (best - mean) / sd
    return (best - mean) * ndtr(u) + sd * np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)


def guided_search(predicted_us: Sequence[float] | np.ndarray, params: pd.DataFrame,
                  measure: Callable[[int], float], budget: int, *, seed: int = 0, settle: bool = True,
                  settle_ei: float = 0.01, min_var: float = MIN_VAR, noise: float = NOISE_VAR,
                  on_step: Callable[[SearchStep], None] | None = None) -> SearchResult:
    """Search the configurations (rows of ``params``, predicted ``predicted_us``) for the fastest
    with at most ``budget`` calls of ``measure(i)`` (time in us; NaN or a non-positive value: the
    configuration failed). ``seed`` breaks ties between equally promising configurations."""
    pred = np.asarray(predicted_us, dtype=np.float64)
    n = len(pred)
    if len(params) != n:
        raise ValueError(f"{len(params)} configurations for {n} predictions")
    if budget < 1:
        raise ValueError("the budget must be at least one measurement")
    ok = np.isfinite(pred) & (pred > 0)
    prior = np.full(n, float(np.median(np.log2(pred[ok]))) if ok.any() else 0.0)
    prior[ok] = np.log2(pred[ok])
    x = encode_params(params)
    if ok.any() and np.ptp(prior) > 0:
        x = np.column_stack([x, (prior - prior.min()) / np.ptp(prior)])
    rng = np.random.default_rng(seed)
    tie = rng.random(n) * 1e-9
    measured = np.zeros(n, dtype=bool)
    idx: list[int] = []
    z: list[float] = []
    steps: list[SearchStep] = []
    best_us, best_i = float("nan"), None
    mean, ei = prior.copy(), np.full(n, np.inf)
    stopped = "budget"
    for _ in range(min(budget, n)):
        if idx:
            post = _posterior(x, prior, np.asarray(idx), np.asarray(z), min_var=min_var, noise=noise)
            mean = post.mean
            ei = _expected_improvement(math.log2(best_us), post.mean, post.sd)
            ei[measured] = -np.inf
            if settle and float(np.max(ei)) < settle_ei:
                stopped = "settled"
                break
            i = int(np.argmax(ei + tie))
        else:
            # nothing succeeded yet: the model's (or the prior's) best unmeasured configuration
            cand = np.where(measured, np.inf, mean + tie)
            i = int(np.argmin(cand))
        t = float(measure(i))
        measured[i] = True
        if math.isfinite(t) and t > 0:
            idx.append(i)
            z.append(math.log2(t))
            if not best_us <= t:
                best_us, best_i = t, i
        step = SearchStep(i, t if math.isfinite(t) and t > 0 else float("nan"), float(2.0 ** mean[i]), best_us,
                          float(ei[i]))
        steps.append(step)
        if on_step is not None:
            on_step(step)
    else:
        if len(steps) == n:
            stopped = "exhausted"
    return SearchResult(steps, best_i, stopped, n)


def frame_space(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The search space of a dataset's rows for a simulated search: the tune parameters (the
    ``tp_*`` columns of rows imported from a Kernel Tuner cache; else the launch's local size and
    global size per dimension) and each row's measured time (us; NaN where it failed)."""
    tp = [c for c in frame.columns if c.startswith("tp_")]
    if tp:
        params = frame[tp].rename(columns=lambda c: c[3:]).reset_index(drop=True)
    else:
        def dims(col: str) -> pd.DataFrame:
            vals = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else [v] for v in frame[col]]
            width = max(len(v) for v in vals) if vals else 1
            return pd.DataFrame([v + [1] * (width - len(v)) for v in vals],
                                columns=[f"{col}{i}" for i in range(width)])
        params = pd.concat([dims("lsize"), dims("gsize")], axis=1)
    t = pd.to_numeric(frame.get("time_median_us"), errors="coerce").to_numpy(dtype=np.float64)
    if "status" in frame.columns:
        t = np.where(frame["status"].astype(str).to_numpy() == "ok", t, np.nan)
    return params, t

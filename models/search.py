"""Model-guided search: the best configuration of a finite space with as few measurements as possible.

The model predicts every configuration before anything runs. The search measures the configuration
predicted fastest, then corrects the model for this kernel with what it measured and picks the next
one, until a budget is spent or no unmeasured configuration can still beat the best measured one.

The correction works on ``log2`` times. Its mean is the model's prediction times a trust slope (the
slope of the measured on the predicted ``log2`` times, held near 1 by a few pseudo-measurements and
clipped to [0, 1]: a model the measurements contradict fades to a flat prior) plus an offset (the
mean residual) plus a Gaussian process over the residuals, whose inputs are the configuration's tune
parameters (each scaled to [0, 1], on a log2 scale where the values span a factor of 4 or more) and
the model's own ``log2`` prediction: a parameter the model gets wrong moves the predictions of the
configurations that share it. The GP's length scale is chosen by marginal likelihood among a few
values after every measurement, then refined per input (an input that does not move the time is
smoothed out) once a few measurements succeeded, its variance from the residuals' spread (at least ``min_var``: the
model is never trusted to better than about ``2**sqrt(min_var)`` in shape).

The picks: the model's best first (without a model, a random configuration), then
:data:`INITIAL_FILL` space-filling picks (the unmeasured configuration farthest from the measured
ones), then the steps of :data:`CYCLE` in turn: the fastest unmeasured configuration by the
corrected prediction (the model's ranking as the measurements have bent it), the largest expected
improvement over the best measured time under the posterior, the largest within the trust region
around the best measured configuration (:data:`LOCAL_RADIUS`), or a space-filling pick, so a model
whose ranking is poor still leaves the search covering the space. A configuration whose measurement failed is measured
once and never again. The search stops early (``settle``) when no unmeasured configuration has an
expected improvement above ``settle_ei`` (in log2 units): its posterior says none is likely to beat
the best.

Where the model has no prediction for a configuration (its analysis failed), the prior mean there
is the median prediction, so the GP and the measurements decide.

Several sources of predictions (e.g. the kernel's measured times on other devices and the models'
predictions for this device, one row each) make
the prior their weighted mean in ``log2`` (each source centred on its median), the weights
re-estimated after every measurement by Bayesian model averaging (:func:`source_weights`): each
source is a model of this device's ``log2`` times up to an unknown offset and an unknown residual
spread, and its weight is its prior weight times its marginal likelihood of the measurements so far,
so a source whose shape the measurements bear out comes to dominate the prior, the trust slope and
the GP's prior input, and one they contradict fades. Before two measurements succeeded the weights
are the prior ones (equal unless given). One source is the single-model search above.

With ``fallback``, the weighting admits that every source can be wrong: when even the best source's
residual variance about its offset (``RSS / m``) exceeds ``min_var`` (the GP's least signal variance:
the shape error below which the search trusts a model), the measurements are no evidence that one
source is right and another wrong (their residuals are structured misfit, not the independent noise
the likelihood assumes, so it would count each one as fresh evidence and swing the weights after
every measurement): the weights are the prior ones (:func:`source_weights`, ``misfit_var``). The
prior is then the sources' equally weighted mean, and the GP over the residuals does the rest.

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
#: factors tried on one input's length scale when the scales are fitted per input
ARD_FACTORS = (0.5, 2.0, 8.0)
#: bounds of a per-input length scale (inputs scaled to [0, 1]; the upper bound: the input is ignored)
ARD_MIN_SCALE, ARD_MAX_SCALE = 0.05, 20.0
#: per-input length scales once this many measurements succeeded (before: one shared scale)
ARD_MIN_POINTS = 6
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
    pick: str = "ei"            # model (the model's best) | mean (corrected best) | ei | local (trust region) | fill
    weights: list[float] | None = None  # the sources' weights when it was chosen (several sources only)


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


def _nll(xs: np.ndarray, d: np.ndarray, var: float, noise: float) -> tuple[float, np.ndarray, np.ndarray] | None:
    """The negative log marginal likelihood of the residuals ``d`` at the scaled inputs ``xs`` (inputs
    divided by their length scales), with the Cholesky factor and the weights; None where singular."""
    k = var * np.exp(-0.5 * _sqdist(xs, xs)) + noise * np.eye(len(xs))
    try:
        chol = np.linalg.cholesky(k)
    except np.linalg.LinAlgError:
        return None
    alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, d))
    return 0.5 * float(d @ alpha) + float(np.log(np.diag(chol)).sum()), chol, alpha


def _ard(xm: np.ndarray, d: np.ndarray, var: float, noise: float,
         start: tuple[float, np.ndarray, np.ndarray, np.ndarray]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """Per-input length scales from the shared one: each input's scale in turn multiplied by each of
    :data:`ARD_FACTORS` where that makes the residuals more likely (two passes over the inputs), so
    inputs that do not move the time are smoothed out and the ones that do are resolved finely."""
    best = start
    for _ in range(2):
        for j in range(xm.shape[1]):
            for f in ARD_FACTORS:
                ell = best[1].copy()
                ell[j] = min(max(ell[j] * f, ARD_MIN_SCALE), ARD_MAX_SCALE)
                if ell[j] == best[1][j]:
                    continue
                got = _nll(xm / ell, d, var, noise)
                if got is not None and got[0] < best[0] - 1e-9:
                    best = (got[0], ell, got[1], got[2])
    return best


def _posterior(x: np.ndarray, prior: np.ndarray, idx: np.ndarray, z: np.ndarray, *, min_var: float,
               noise: float, ard: bool = False) -> _Posterior:
    """The GP posterior of log2 time over every configuration from the successful measurements
    ``z`` (log2 us) of the configurations ``idx``, its length scale the most likely of
    :data:`LENGTH_SCALES`."""
    r = z - prior[idx]
    off = float(np.mean(r))
    d = r - off
    var = max(float(np.var(r)) if len(r) >= 3 else PRIOR_VAR, min_var)
    xm = x[idx]
    best: tuple[float, np.ndarray, np.ndarray, np.ndarray] | None = None
    for ls in LENGTH_SCALES:
        ell = np.full(x.shape[1], ls)
        got = _nll(xm / ell, d, var, noise)
        if got is not None and (best is None or got[0] < best[0]):
            best = (got[0], ell, got[1], got[2])
    if best is None:
        return _Posterior(prior + off, np.full(len(prior), math.sqrt(var)))
    if ard and len(idx) >= ARD_MIN_POINTS:
        best = _ard(xm, d, var, noise, best)
    _, ell, chol, alpha = best
    ks = var * np.exp(-0.5 * _sqdist(x / ell, xm / ell))
    mean = prior + off + ks @ alpha
    v = np.linalg.solve(chol, ks.T)
    sd = np.sqrt(np.maximum(var - (v * v).sum(0), 1e-12))
    return _Posterior(mean, sd, float(np.exp(np.mean(np.log(ell)))))


def _expected_improvement(best: float, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    u = (best - mean) / sd
    return (best - mean) * ndtr(u) + sd * np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)


def _trust(prior: np.ndarray, idx: np.ndarray, z: np.ndarray, model: bool) -> float:
    """How far the measurements follow the model: the slope of the measured ``log2`` times on the
    predicted ones, shrunk toward 1 by :data:`TRUST_PRIOR_N` pseudo-measurements and clipped to
    [0, 1]. 0 (no model, or one the measurements contradict): the prior mean is flat."""
    if not model:
        return 0.0
    p = prior[idx]
    pc, zc = p - p.mean(), z - z.mean()
    sxx = float(pc @ pc)
    slope = (float(pc @ zc) + TRUST_PRIOR_N * TRUST_PRIOR_VAR) / (sxx + TRUST_PRIOR_N * TRUST_PRIOR_VAR)
    return float(min(max(slope, 0.0), 1.0))


def _space_filling(x: np.ndarray, measured: np.ndarray, idx: list[int], rng: np.random.Generator) -> int:
    """The unmeasured configuration farthest from every measured one (among at most
    :data:`FILL_CANDIDATES` drawn at random); a random one without inputs."""
    free = np.flatnonzero(~measured)
    if len(free) > FILL_CANDIDATES:
        free = rng.choice(free, FILL_CANDIDATES, replace=False)
    if not idx or x.shape[1] == 0:
        return int(rng.choice(free))
    d = _sqdist(x[free], x[np.asarray(idx)]).min(axis=1)
    return int(free[int(np.argmax(d + rng.random(len(free)) * 1e-9))])


#: pseudo-measurements that hold the model's slope near 1 until the measurements say otherwise
TRUST_PRIOR_N = 4.0
#: the spread (log2 variance) of a pseudo-measurement's prediction
TRUST_PRIOR_VAR = 1.0
#: space-filling picks after the model's own first pick, before the GP steers
INITIAL_FILL = 1
#: the steps of the cycle after the start: the best unmeasured configuration by the corrected
#: prediction (mean; expected improvement without a model), expected improvement over the space (ei),
#: expected improvement in the trust region around the best measured configuration (local), a
#: space-filling pick (fill)
CYCLE = ("mean", "ei", "local", "ei", "fill")
#: the trust region: the configurations within this distance (encoded inputs) of the best measured
LOCAL_RADIUS = 0.35
#: at most this many unmeasured configurations compete for a space-filling pick
FILL_CANDIDATES = 2000


def source_matrix(predicted_us: np.ndarray) -> np.ndarray:
    """Several sources' predicted times (us; one row per source, NaN or non-positive where a source
    has no prediction) as ``log2`` times each centred on its own median: where a source has no
    prediction for a configuration it takes the mean of the sources that have one there (0, its
    median, where none has), so with equal weights the mean of the rows is the mean over the sources
    that predict each configuration."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lt = np.where(np.isfinite(predicted_us) & (predicted_us > 0), np.log2(predicted_us), np.nan)
    for j in range(len(lt)):
        ok = np.isfinite(lt[j])
        if ok.any():
            lt[j, ok] -= float(np.median(lt[j, ok]))
    has = np.isfinite(lt)
    count = has.sum(axis=0)
    fill = np.where(count > 0, np.where(has, lt, 0.0).sum(axis=0) / np.maximum(count, 1), 0.0)
    return np.where(has, lt, fill[None, :])


def source_weights(sources: np.ndarray, idx: np.ndarray, z: np.ndarray, prior_weights: np.ndarray,
                   noise: float = NOISE_VAR, misfit_var: float | None = None) -> np.ndarray:
    """The posterior weight of each source (rows of ``sources``, ``log2`` times) given the measured
    ``log2`` times ``z`` of the configurations ``idx``: Bayesian model averaging over the sources,
    each a Gaussian model ``z = offset + source + e`` with a flat prior on the offset and the scale
    prior ``1/sigma`` on the residual spread. Both integrated out, a source's marginal likelihood is
    proportional to ``RSS ** (-(m - 1) / 2)`` (``RSS``: its residuals' sum of squares about their
    mean, ``m`` measurements), the same constant for every source, so no spread is assumed: a source
    whose shape explains the measurements better gains weight geometrically with each one. ``RSS``
    has ``m * noise`` added (the measurements' own repeatability), so sources that both explain them
    to within their noise keep their prior weights. With fewer than two measurements: the prior
    weights. ``misfit_var`` given: the prior weights too where every source's ``RSS / m`` exceeds it
    (no source explains the measurements, so they say nothing about which one is right)."""
    w = np.asarray(prior_weights, dtype=np.float64)
    w = w / w.sum()
    m = len(idx)
    if m < 2 or len(sources) < 2:
        return w
    r = z[None, :] - sources[:, idx]
    rss = ((r - r.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    if misfit_var is not None and float(np.min(rss)) / m > misfit_var:
        return w
    logw = np.log(w) - 0.5 * (m - 1) * np.log(rss / m + noise)
    logw -= logw.max()
    out = np.exp(logw)
    return out / out.sum()


def guided_search(predicted_us: Sequence[float] | np.ndarray, params: pd.DataFrame,
                  measure: Callable[[int], float], budget: int, *, seed: int = 0, settle: bool = True,
                  settle_ei: float = 0.01, min_var: float = MIN_VAR, noise: float = NOISE_VAR,
                  explore: bool = True, ard: bool = True, source_prior: Sequence[float] | None = None,
                  fallback: bool = False, on_step: Callable[[SearchStep], None] | None = None) -> SearchResult:
    """Search the configurations (rows of ``params``, predicted ``predicted_us``) for the fastest
    with at most ``budget`` calls of ``measure(i)`` (time in us; NaN or a non-positive value: the
    configuration failed). ``seed`` breaks ties between equally promising configurations and draws
    the candidates of space-filling picks; ``explore`` False: expected improvement alone after the
    model's first pick (no space-filling or trust-region steps); ``ard`` False: one length scale
    shared by every input (else each input's own, once :data:`ARD_MIN_POINTS` measurements succeeded).

    ``predicted_us`` two-dimensional (one row per source, e.g. the kernel's measured times on other
    devices, or those and a model's predictions): the prior is the weighted mean of the sources'
    ``log2`` times (:func:`source_matrix`), the weights re-estimated after every measurement by
    :func:`source_weights` from ``source_prior`` (equal where not given); ``fallback``: the prior
    weights while every source's residual variance exceeds ``min_var`` (see the module's docstring)."""
    pred = np.asarray(predicted_us, dtype=np.float64)
    multi = pred.ndim == 2
    if pred.ndim not in (1, 2):
        raise ValueError("predictions must be one array, or one row per source")
    n = pred.shape[-1]
    if len(params) != n:
        raise ValueError(f"{len(params)} configurations for {n} predictions")
    if budget < 1:
        raise ValueError("the budget must be at least one measurement")
    sources = np.zeros((0, n))
    weights = prior_w = np.ones(0)
    if multi:
        if len(pred) < 1:
            raise ValueError("no source of predictions")
        prior_w = np.ones(len(pred)) if source_prior is None else np.asarray(source_prior, dtype=np.float64)
        if prior_w.shape != (len(pred),) or not (np.isfinite(prior_w).all() and (prior_w > 0).all()):
            raise ValueError(f"source_prior needs one positive weight per source ({len(pred)})")
        sources = source_matrix(pred)
        weights = prior_w / prior_w.sum()
        prior = weights @ sources
        has_model = bool(np.ptp(sources) > 0)
    else:
        ok = np.isfinite(pred) & (pred > 0)
        has_model = bool(ok.any() and np.ptp(np.log2(pred[ok])) > 0)
        prior = np.full(n, float(np.median(np.log2(pred[ok]))) if ok.any() else 0.0)
        prior[ok] = np.log2(pred[ok])
    x = encode_params(params)

    def gp_inputs(prior: np.ndarray) -> np.ndarray:
        # the prior's own value is one more input of the GP: configurations the model ranks alike are near
        span = float(np.ptp(prior))
        return np.column_stack([x, (prior - prior.min()) / span]) if has_model and span > 0 else x

    xg = gp_inputs(prior)
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
        kind = "model"
        if multi and len(idx) >= 2:
            weights = source_weights(sources, np.asarray(idx), np.asarray(z), prior_w, noise,
                                     misfit_var=min_var if fallback else None)
            prior = weights @ sources
            xg = gp_inputs(prior)
        if idx:
            b = _trust(prior, np.asarray(idx), np.asarray(z), has_model)
            base = prior * b
            post = _posterior(xg, base, np.asarray(idx), np.asarray(z), min_var=min_var, noise=noise, ard=ard)
            mean = post.mean
            ei = _expected_improvement(math.log2(best_us), post.mean, post.sd)
            ei[measured] = -np.inf
            if settle and float(np.max(ei)) < settle_ei:
                stopped = "settled"
                break
            kind = "ei"
            if explore:
                kind = "fill" if len(steps) <= INITIAL_FILL else CYCLE[(len(steps) - INITIAL_FILL - 1) % len(CYCLE)]
            if kind == "mean" and not has_model:
                kind = "ei"
            if kind == "fill":
                i = _space_filling(x, measured, idx, rng)
            elif kind == "mean":
                i = int(np.argmin(np.where(measured, np.inf, mean + tie)))
            elif kind == "local" and best_i is not None and x.shape[1]:
                near = _sqdist(x, x[[best_i]])[:, 0] <= LOCAL_RADIUS ** 2
                cand = np.where(near & ~measured, ei + tie, -np.inf)
                i = int(np.argmax(cand)) if np.isfinite(cand).any() else int(np.argmax(ei + tie))
            else:
                i = int(np.argmax(ei + tie))
        elif has_model or not explore:
            # nothing succeeded yet: the model's (or the prior's) best unmeasured configuration
            i = int(np.argmin(np.where(measured, np.inf, mean + tie)))
        else:
            kind = "fill"
            i = _space_filling(x, measured, idx, rng)
        t = float(measure(i))
        measured[i] = True
        if math.isfinite(t) and t > 0:
            idx.append(i)
            z.append(math.log2(t))
            if not best_us <= t:
                best_us, best_i = t, i
        step = SearchStep(i, t if math.isfinite(t) and t > 0 else float("nan"), float(2.0 ** mean[i]), best_us,
                          float(ei[i]), kind, [float(v) for v in weights] if multi else None)
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
    times = frame["time_median_us"] if "time_median_us" in frame.columns else pd.Series(np.nan, index=frame.index)
    t = pd.to_numeric(times, errors="coerce").to_numpy(dtype=np.float64)
    if "status" in frame.columns:
        t = np.where(frame["status"].astype(str).to_numpy() == "ok", t, np.nan)
    return params, t

"""Fitting the tabular model (``kernelcast train --kind tabular``): LightGBM on :func:`models.tabular.build_table`.

Each head (time, energy) gets a *residual* booster on ``log2(measured / analytical)`` (rows with an
analytical value) and a *direct* booster on ``log2(measured)`` (every row; it predicts the rows the
analytical model cannot). The time head fits the median: its loss is the absolute error in log2
space, with extra trees (LightGBM draws each split's threshold at random), and its inner folds
(below) hold out whole kernel groups by the rule of evaluate's folds (a source file, a synthetic
template family: :func:`kernel_groups`). Why: a kernel of a group the model has not seen is off by a
factor its features barely explain (on ds2s two thirds of the tabular model's squared log error is
one constant per kernel), so what fits the training groups closest transfers worst; the median loss
does not chase the few kernels that are 4-30x off (atomics, u8 images), random thresholds smooth the
steps one group's rows carve, and inner folds by kernel rather than by file let a kernel's siblings
vouch for a residual scale that a new file does not bear out. Measured with ``kernelcast evaluate
--data DS --models analytical,tabular --profile calib/profiles/pocl-local.json --repeats 3`` (mean
+- sd over fold seeds 0-2; the analytical model and profile of 938667a), squared error with inner
folds by kernel -> this: ds1c median APE 46.0 +- 1.3 -> 44.2 +- 1.0 %, MAPE 90 +- 2 -> 88 +- 5 %,
top-1 68.2 +- 2.0 -> 73 +- 2 %, 3-shot MAPE 71 -> 66 %; ds2 (2,317 rows of 139 kernels, 14 groups,
load ~3) 40.5 +- 1.2 -> 40.3 +- 1.2 %, MAPE 64 +- 2 -> 55 +- 1 %, top-1 78 +- 1 -> 75 +- 1 %, 3-shot
MAPE 38 -> 36 %; ds2s 50.3 +- 1.7 -> 48.9 +- 2.7 %, MAPE 83 +- 3 -> 66 +- 3 %, top-1 79 -> 78 %;
ds3s (2,177 rows of 123 kernels, 28 groups, idle) 43.6 +- 2.0 -> 45.7 +- 4.6 %, MAPE 977 +- 328 ->
905 +- 192 % (one kernel whose loop the compiler deletes carries it), top-1 73.1 +- 2.2 -> 71 +- 1
%. Over the four datasets the median APE and the tuning top-1 do not move beyond the fold-seed sd
(means 45.1 -> 44.8 % and 74.5 -> 74.3 %); MAPE falls on all four. Each part alone (ds2s, ds2,
ds1c): the median loss 43.8 / 41.0 / 44.3 % median APE, extra trees alone (ds2s) 42.2 %, group folds
alone (ds2s) 45.8 % with MAPE 64 %; weighting every kernel the same (row weights 1 / rows of its
kernel, squared error) made ds2 worse (45.8 %, MAPE 67 %) and is not done. The energy head keeps
squared error and exact thresholds (:data:`HEAD_PARAMS`): no dataset here has energy to measure the
change on. The time head's residual booster's prediction is scaled by a factor in [0, 1] (its
``residual_scale``) chosen on inner grouped out-of-fold predictions of the training rows
(:func:`choose_residual_scale`). Why: kernel-disjoint, the booster's differences between the
configurations of one kernel are partly noise (on ds1c, grouped 5-fold, its within-kernel residual
predictions have a slope of 0.82 against the true within-kernel residuals, on ds2s 0.43), so the
full-scale booster ranked a kernel's configurations worse than the analytical model alone (tuning
top-1 62.6 vs 74.8 % on ds1c); the shrunk booster keeps more of the analytical ordering. The scale
is chosen by the median ``|log2|`` error, not the mean squared one: the squared error is carried by
a few far-off rows and picks ~1 (0.96-1.0 on ds1c), the median by the typical row (0.7-0.9 on ds1c,
0.35-1.0 on ds2s). Measured with ``kernelcast evaluate --data DS --models analytical,tabular,blend
--profile calib/profiles/pocl-local.json --repeats 3`` (mean +- sd over fold seeds 0-2), unscaled ->
scaled: on ds1c median APE 52.2 +- 1.3 -> 51.0 +- 1.2 %, MAPE 111 +- 10 -> 106 +- 8 %, top-1 62.6 +-
1.8 -> 67.3 +- 1.7 %; on ds2s median APE 44.7 +- 1.2 -> 41.3 +- 4.0 %, MAPE 129 +- 43 -> 111 +- 33
%, top-1 80.1 +- 3.0 -> 81.8 +- 1.7 % (the analytical model alone: 74.8 and 77.6 %). The energy head
weights rows by Zhang et al.'s ``1 / E_measured`` (sample weights normalised to mean 1 and clipped
to [:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`] so that a few tiny kernels cannot carry the whole fit).
Zhang et al. weight a squared error in joules, ``(E_p - E_m)^2 / E_m``, to favour low-energy
kernels; here the error is already relative (log2), so the same weights favour them more strongly
than in their paper, hence the clipping.

Level and shape (``split``, the default for the time head): the residual of a (kernel, device)
pair's rows is its *level* (their median) plus a *shape* (the rest). The shape booster is fitted
on the shapes, the level booster (on :data:`models.tabular.LEVEL_COLUMNS` only, so one value per
pair) on each row's level, and the training pairs' levels are kept. A kernel the model was fitted
on gets its own levels (on another device, the mean of the level booster's and of its levels on
the training devices weighted by :func:`models.xfer.device_weight`); a kernel it was not gets
``u x level + s x shape`` with ``(s, u)`` chosen on inner folds that hold out kernel groups (the
groups of :func:`kernel_groups` merged where they share a kernel, e.g. one Kernel Tuner cache per
device; :func:`choose_split_scales`), both 0 with a single kernel group. Why: with one booster on
the raw residual, the L1 loss is carried by the levels between kernels and devices (on the GPU
yardstick convolution's residuals differ by ~5 log2 between NVIDIA and AMD GPUs, a kernel's
configurations span 1.15-10x), and a model trained on one kernel applies that kernel's level to
another one (kernel-disjoint median APE 103 %, the analytical model 38 %). Measured
(docs/gpu-model.md, "Level and shape"): GPU yardstick kernel-disjoint and both-disjoint median
APE 103 / 97 % -> 39 / 39 % (the source-only analytical model's), GPU-disjoint median pair Spearman 0.57 ->
0.62 and 3-shot median APE 32 -> 23 % at the same median APE (23 %); CPU yardstick
(``kernelcast evaluate --data base-ds --folds 3``) tabular MAPE 60.0 -> 50.8 %, median APE 48.0 ->
42.5 %, top-1 68 -> 74 %, 3-shot MAPE 30.2 -> 27.7 %.

Fast rows weigh more in the shape (:func:`fast_weights`, when the training rows come from several
devices): the rows among the fastest :data:`FAST_SHARE` of their pair's rows by measured time weigh
:data:`FAST_WEIGHT` times the others in the shape boosters' loss (and in the inner fits that choose
the unseen-kernel scales). Why: a tuner reads the fast end of a kernel's space (the first-ranked
configuration, the regret), and an unweighted L1 fit spends its trees evenly over a space whose
slow half no tuner visits. Measured on the GPU yardstick (12 pairs x 600 rows, GPU-disjoint,
docs/gpu-model.md "Transfer into the shape"): without the transfer median APE 21.9 -> 20.9 %,
median pair Spearman 0.793 -> 0.848, regret 1.21 -> 1.14, top-1 within 5 % in 5 -> 4 of 12 pairs;
with it 24.5 -> 22.7 %, 0.837 -> 0.838, 1.17 -> 1.23, 2 -> 4 pairs; kernel- and both-disjoint
unchanged. On two more samples of the pairs (seeds 1, 2) the Spearman and level gains held, and
with the transfer the regret got worse on all three (1.06-1.17 -> 1.14-1.24): the first pick of the
transfer shape, which follows the other devices' ordering, does not gain from the weighting.
Weighting by the rank of the *shape* rather than of the time, a linear or a steeper weight (the
fastest tenth at 10x) moved the figures by as much in either direction (the doc).
One device (the CPU yardstick, 4 kernel groups) is left unweighted: there the weighting made the
tabular MAPE worse (50.82 -> 52.88 %) for a median APE of 42.45 -> 42.04 % and the same top-1.

Configuration transfer (:mod:`models.xfer`): when the training rows come from several devices that
measured the same configurations, :func:`fit_tabular` builds the table of their measured times
(plus any ``transfer_rows``) and fills each training row's ``xfer_*`` columns from the *other*
devices. A split time head (the default) reads them in its shape alone: a *transfer shape* booster
is the shape booster fitted on every feature, the transfer columns included, on the training rows
that have a transfer value, and a row with one gets its shape from it and its level from the level
path as any row (the kernel's levels, the level booster). The level and the level booster never
see the transfer columns. Why: the other devices' times of a configuration tell how it ranks among
its problem's configurations, not how fast an unseen device runs the problem; the earlier transfer
path (below) predicted that absolute level from the features and missed it on unseen GPUs by up to
2.5x (median signed log2 error +1.34 on one held-out GPU), and its geometric mean with the split
head's better level cost the level split's gain: GPU-disjoint on the public yardstick (12 pairs,
600 rows each) median APE 21.9 % without transfer, 36.1 % with that path, 24.5 % with the transfer
shape, at a median pair Spearman of 0.79, 0.85 and 0.84 (docs/gpu-model.md, "Transfer into the
shape"). An unsplit head (``split=False``) keeps that path: its residual and direct boosters are
fitted without the ``xfer_*`` columns and a third booster, the transfer booster, on
``log2(measured) - xfer_rel`` of the rows that have a value, and prediction takes the geometric
mean of the two paths where a row has a transfer value (``models.tabular.TabularHead.predict``).
Why the mean and not either path alone (before the split): GPU-disjoint on the public yardstick
the residual booster with the transfer columns among its features barely used them (median pair
Spearman 0.60), the transfer path alone ranked best (0.69) but missed the level of an unseen GPU
(median APE 68 %), the mean kept 0.63 at 41 % (docs/gpu-model.md).

The transfer shape is not offset by ``xfer_shape`` by default (``transfer_offset``; the column is
among the booster's features either way). With an AMD profile the table charges the compiler's
registers and spills (``models.tabular.build_table``), and the other devices' residual shape then
carries each AMD target's own spill decisions: GPU-disjoint on the GPU yardstick (12 pairs x 600
rows, three booster seeds, five boosters each, below) the offset ranks worse, median pair Spearman
0.855-0.861 against 0.882-0.886 without it, median APE 20.0-22.5 % against 17.2-18.7 %, top-1
within 5 % in 25 % of pairs on every seed against 33-50 %. The offset had ranked better while the
table was built from the source alone (docs/gpu-model.md, "The other GPUs' residual shape").

Seeds (:data:`HEAD_SEEDS`): each booster of the time head (and of the inner fits that choose its
scales) is the mean of five boosters fitted alike but for their seed (:class:`models.tabular.
BoosterMean`). Why: random thresholds, row bagging and feature fractions make one booster's ranking
of a kernel's configurations depend on its seed; on the GPU yardstick (GPU-disjoint, 12 pairs x 600
rows, with the transfer) one booster's median pair Spearman was 0.885, 0.871 and 0.872 for seeds
0-2, and pairs whose rows did not change moved by up to 0.03 between refits. Means of boosters,
same evaluation: 3 seeds 0.888, 5 seeds 0.893 (0.893 again with other seeds), 10 seeds 0.893; five
also lowered the median APE (25.2 -> 20.4 %; the level booster's share: 23.4 % with the shape
boosters alone averaged). On the table that charges AMD compiles: with the transfer 0.834 -> 0.856
(offset) and without it 0.833 -> 0.859, median APE 20.0 -> 16.7 %; kernel-disjoint unchanged. On
the CPU yardstick (``kernelcast evaluate --folds 3``, 264 rows of 29 kernels, fold seeds 0-2) the
tabular model's MAPE went 192.3 / 177.8 / 192.6 -> 198.4 / 180.1 / 193.5 %, its median APE 48.6 /
45.3 / 45.8 -> 53.8 / 46.7 / 44.8 %, its top-1 80 / 80 / 84 -> 84 / 80 / 84 %: a little worse on
the level, by less than the fold seeds move it. The cost is five times the fitting time and the
file size of the time head.

Intervals (:func:`calibrate_intervals`, run by :func:`train_tabular`): an internal grouped K-fold
(:data:`INTERVAL_FOLDS`; groups by :func:`kernel_groups`: a synthetic template family, a source
file, or one kernel, as evaluate's folds) refits the time head on each fold's other rows with the
same parameters and seed and predicts the fold. The out-of-fold residuals ``log2(measured /
predicted)`` of the tabular model and of the analytical model give their split-conformal quantiles
(the ``ceil((n + 1) 0.9)``-th smallest ``|r|``, and the 5 % / 95 % signed quantiles by the same
rule), overall and per analytical bound with at least 50 rows; the shrinkage prior and the shape
prior of few-shot updating (``models.fewshot``); and the quantiles of the residuals left after a
simulated k-shot correction with both (k in :data:`SHOT_COUNTS`, k random rows of each kernel as its
measured configurations, :data:`SHOT_DRAWS` draws). Per model the interval kind (symmetric or signed) whose held-out
intervals are narrower is kept. The figures stored with them: OOF median APE, MAPE and share within
2x, and the cross-fold coverage and median width (upper / lower) of the intervals, each fold's
intervals from the other folds' quantiles.

Defaults (:data:`DEFAULT_PARAMS`, :data:`DEFAULT_ROUNDS`) are generic settings for a few thousand
rows (31 leaves, at least 20 rows per leaf, learning rate 0.1 for 100 rounds, feature and row
bagging, one thread, deterministic for a seed); fitting one booster takes about a second per thousand
rows, the time head five of each (:data:`HEAD_SEEDS`). Few trees keep prediction fast (the
booster's cost grows with the number of trees).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.frame import DataError
from kernelcast.models.fewshot import (
    BALANCE_CLIP,
    DEFAULT_SHRINK_PRIOR,
    Offset,
    ShapePrior,
    choose_shots,
    estimate_prior,
    fit_shape_prior,
    shape_inputs,
)
from kernelcast.models.tabular import (
    BASES,
    CATEGORICAL_COLUMNS,
    DEVICE_COLUMNS,
    FEATURE_COLUMNS,
    INTERVAL_KINDS,
    INTERVAL_LEVEL,
    KERNEL_KEY_COLUMN,
    LEVEL_COLUMNS,
    MIN_BOUND_ROWS,
    TARGETS,
    XFER_COLUMNS,
    BoosterMean,
    IntervalCalibration,
    ResidualCalibration,
    ResidualQuantiles,
    TabularHead,
    TabularPredictor,
    bound_names,
    build_table,
    fill_transfer,
    is_tabular_dir,
    transfer_table,
)
from kernelcast.train.split import group_key

from kernelcast.metrics import mape, median_ape, within_factor

log = logging.getLogger(__name__)

Target = Literal["time", "energy", "both"]

DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "regression",
    "learning_rate": 0.1,
    "num_leaves": 31,
    "min_data_in_leaf": 20,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "max_bin": 255,
    "num_threads": 1,
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}
#: what a head changes in :data:`DEFAULT_PARAMS` (the caller's ``params`` override both): the time head
#: fits the median (absolute error in log2 space) with extra trees (split thresholds drawn at random);
#: the energy head keeps squared error and exact thresholds, since no dataset here has energy to
#: measure a change on (module docstring)
HEAD_PARAMS: dict[str, dict[str, Any]] = {
    "time": {"objective": "regression_l1", "extra_trees": True},
    "energy": {},
}
#: how many boosters, fitted alike but for their seed, each booster of a head is the mean of
#: (module docstring, "Seeds"): the time head's random thresholds, row bagging and feature fractions
#: make one booster's ranking of a kernel's configurations depend on its seed; the energy head keeps
#: one (no dataset here has energy to measure a change on)
HEAD_SEEDS: dict[str, int] = {"time": 5, "energy": 1}
#: the seed of a head's k-th booster is its first booster's plus k times this
SEED_STRIDE = 1000
#: 100 rounds at learning rate 0.1 with 31 leaves: as accurate in grouped 5-fold CV on a PoCL dataset
#: (two fold seeds) as 300 rounds at 0.05 with 15 leaves, and three times faster to fit and to predict
DEFAULT_ROUNDS = 100
MIN_WEIGHT, MAX_WEIGHT = 0.1, 10.0
#: inner grouped folds over the training rows that choose the time head's residual scale (0: scale 1)
SCALE_FOLDS = 3
#: candidate residual scales; the one with the lowest inner-OOF median |log2(measured / predicted)| wins
SCALE_GRID = tuple(float(v) for v in np.linspace(0.0, 1.0, 21))
#: fewest rows with a valid target a head is fitted on
MIN_ROWS = 2
#: when the training rows come from several devices, the shape boosters weigh a row among the
#: fastest :data:`FAST_SHARE` of its (kernel, device) pair's rows (by measured time) this much more
#: than the others (module docstring, "Level and shape")
FAST_WEIGHT = 4.0
FAST_SHARE = 0.2


def _weights(y: np.ndarray) -> np.ndarray:
    w = 1.0 / y
    w = w / w.mean()
    w = np.clip(w, MIN_WEIGHT, MAX_WEIGHT)
    return w / w.mean()


def _fit_booster(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, features: list[str], params: dict[str, Any],
                 rounds: int, seeds: int = 1) -> Any:
    """A LightGBM booster on ``x`` / ``y``; with ``seeds`` > 1 a :class:`models.tabular.BoosterMean`
    of that many, the k-th with the seed ``params["seed"] + k x`` :data:`SEED_STRIDE`."""
    import lightgbm as lgb

    cats = [c for c in CATEGORICAL_COLUMNS if c in features]

    def fit(p: dict[str, Any]) -> Any:
        ds = lgb.Dataset(x, label=y, weight=w, feature_name=features, categorical_feature=cats or "auto",
                         free_raw_data=True, params={"verbose": -1})
        return lgb.train(p, ds, num_boost_round=rounds)

    if seeds <= 1:
        return fit(params)
    first = int(params.get("seed", 0))
    return BoosterMean([fit({**params, "seed": first + k * SEED_STRIDE}) for k in range(seeds)])


def _log2_summary(r: np.ndarray) -> dict[str, float]:
    a = np.abs(r)
    return {"median_abs_log2": float(np.median(a)), "mean_log2": float(np.mean(r)),
            "within_2x": float(np.mean(a <= 1.0))}


def choose_residual_scale(x: np.ndarray, r: np.ndarray, groups: np.ndarray, features: list[str],
                          params: dict[str, Any], rounds: int, folds: int = SCALE_FOLDS,
                          seed: int = 0, seeds: int = 1) -> tuple[float, dict[str, Any]]:
    """The residual scale of a head (module docstring): the residual booster is refitted on
    ``folds`` grouped folds of its rows ``x`` / ``r`` (``groups``: :func:`kernel_groups`), and the
    scale in :data:`SCALE_GRID` whose inner out-of-fold predictions ``s x r_hat`` leave the lowest
    median ``|r - s x r_hat|`` wins (the smallest on a tie). 1 with the reason when there are fewer
    than ``folds`` groups (or ``folds`` < 2). ``seeds``: boosters per fit (:func:`_fit_booster`)."""
    n_groups = len(np.unique(groups.astype(str))) if len(groups) else 0
    if folds < 2 or n_groups < folds:
        return 1.0, {"scale": 1.0, "why": f"{n_groups} kernel group(s) for {folds} inner folds"}
    inner = grouped_folds(groups, folds, seed)
    r_hat = np.full(len(r), np.nan)
    for f in range(folds):
        b = _fit_booster(x[inner != f], r[inner != f], None, features, params, rounds, seeds)
        r_hat[inner == f] = b.predict(x[inner == f])
    scores = [float(np.median(np.abs(r - s * r_hat))) for s in SCALE_GRID]
    best = int(np.argmin(scores))              # argmin keeps the first (smallest scale) of equals
    return SCALE_GRID[best], {"scale": SCALE_GRID[best], "folds": folds, "inner_median_abs_log2": scores[best],
                              "inner_median_abs_log2_at_1": scores[-1]}


def pair_keys(table: pd.DataFrame) -> np.ndarray:
    """The (kernel, device) pair of every row of a :func:`build_table` table: its
    :data:`KERNEL_KEY_COLUMN` and its profile's device name (``xfer_device``)."""
    n = len(table)
    k = table[KERNEL_KEY_COLUMN].astype(str).to_numpy() if KERNEL_KEY_COLUMN in table.columns \
        else np.asarray(table["kernel_name"].astype(str) if "kernel_name" in table.columns else [""] * n, dtype=object)
    d = table["xfer_device"].astype(str).to_numpy() if "xfer_device" in table.columns else np.full(n, "")
    return np.asarray([f"{a}|{b}" for a, b in zip(k, d)], dtype=object)


def pair_medians(v: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Each row's median of ``v`` over the rows of its pair."""
    return pd.Series(v).groupby(pairs).transform("median").to_numpy(dtype=np.float64)


def fast_weights(log_time: np.ndarray, pairs: np.ndarray, weight: float = FAST_WEIGHT,
                 share: float = FAST_SHARE) -> np.ndarray | None:
    """Row weights of the shape boosters (module docstring, "Level and shape"): ``weight`` for a row
    among the fastest ``share`` of its pair's rows by ``log_time`` (any per-pair offset of it ranks
    the same), 1 for the others, normalised to a mean of 1; ``None`` (unweighted) for a weight of 1."""
    if weight == 1.0 or not len(log_time):
        return None
    frac = pd.Series(log_time).groupby(pairs.astype(str)).rank(pct=True, method="average").to_numpy(dtype=np.float64)
    w = np.where(frac <= share, weight, 1.0)
    return w / w.mean()


def split_residual(r: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(level, shape)`` of the residuals ``r``: each row's pair median, and ``r`` minus it."""
    lvl = pair_medians(r, pairs)
    return lvl, r - lvl


def choose_split_scales(x: np.ndarray, r: np.ndarray, pairs: np.ndarray, groups: np.ndarray, features: list[str],
                        params: dict[str, Any], rounds: int, folds: int = SCALE_FOLDS,
                        seed: int = 0, weights: np.ndarray | None = None,
                        seeds: int = 1) -> tuple[float, float, dict[str, Any]]:
    """``(unseen_shape_scale, unseen_level_scale, detail)`` of a split head (module docstring): on
    at most ``folds`` grouped folds over kernel groups (at least 2) the level and shape boosters are
    refitted on the other folds and predict the held-out kernels; of :data:`SCALE_GRID`, the pair
    ``(s, u)`` that leaves the lowest median ``|r - s x shape_hat - u x level_hat|`` wins (the
    smallest on a tie, shape scale first). With one kernel group nothing shows that either carries
    to another kernel: both are 0 (an unseen kernel gets the analytical model's prediction).
    ``weights``: the shape booster's row weights (:func:`fast_weights`), also in the inner fits;
    ``seeds``: boosters per fit (:func:`_fit_booster`)."""
    n_groups = len(np.unique(groups.astype(str))) if len(groups) else 0
    k = min(folds, n_groups)
    if folds < 2 or k < 2:
        return 0.0, 0.0, {"unseen_shape_scale": 0.0, "unseen_level_scale": 0.0,
                          "why": f"{n_groups} kernel group(s): no held-out kernel to choose the scales on"}
    lvl, shp = split_residual(r, pairs)
    li = [i for i, c in enumerate(features) if c in LEVEL_COLUMNS]
    level_names = [features[i] for i in li]
    inner = grouped_folds(groups, k, seed)
    s_hat, l_hat = np.full(len(r), np.nan), np.full(len(r), np.nan)
    for f in range(k):
        tr, te = inner != f, inner == f
        s_hat[te] = _fit_booster(x[tr], shp[tr], None if weights is None else weights[tr], features, params,
                                 rounds, seeds).predict(x[te])
        l_hat[te] = _fit_booster(x[tr][:, li], lvl[tr], None, level_names, params, rounds,
                                 seeds).predict(x[te][:, li])
    grid = np.asarray(SCALE_GRID)
    scores = np.array([[float(np.median(np.abs(r - g * s_hat - u * l_hat))) for u in grid] for g in grid])
    i, j = np.unravel_index(int(np.argmin(scores)), scores.shape)     # first minimum: smallest scales
    return float(grid[i]), float(grid[j]), {
        "unseen_shape_scale": float(grid[i]), "unseen_level_scale": float(grid[j]), "folds": k,
        "inner_median_abs_log2": float(scores[i, j]), "inner_median_abs_log2_analytical": float(scores[0, 0])}


def merge_groups(groups: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``groups`` with every two groups that share a kernel key merged (transitively): a kernel
    measured on several devices whose rows fall into several groups (e.g. one Kernel Tuner cache per
    device) is held out whole. Rows with an empty key keep their group."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    first: dict[str, str] = {}
    for g, k in zip(groups.astype(str), keys.astype(str)):
        find(g)
        if not k:
            continue
        if k in first:
            ra, rb = find(first[k]), find(g)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        else:
            first[k] = g
    return np.asarray([find(g) for g in groups.astype(str)], dtype=object)


def pair_levels(r: np.ndarray, kernels: np.ndarray, devices: np.ndarray) -> dict[str, dict[str, float]]:
    """The median residual of every (kernel, device) pair: kernel key -> device -> level."""
    out: dict[str, dict[str, float]] = {}
    frame = pd.DataFrame({"k": kernels.astype(str), "d": devices.astype(str), "r": r})
    for (k, d), v in frame.groupby(["k", "d"])["r"].median().items():
        if k:
            out.setdefault(str(k), {})[str(d)] = float(v)
    return out


def fit_tabular(table: pd.DataFrame, profile: DeviceProfile, *, target: Target = "time", seed: int = 0,
                params: dict[str, Any] | None = None, scale_folds: int = SCALE_FOLDS,
                features: Sequence[str] | None = None, residual: bool = True,
                transfer: bool = True, transfer_rows: pd.DataFrame | None = None,
                split: bool = True, fast_weight: float | None = None,
                transfer_offset: bool = False, seeds: int | None = None) -> TabularPredictor:
    """Fit the heads of ``target`` on a :func:`build_table` table (module docstring).

    ``params`` override :data:`DEFAULT_PARAMS` (LightGBM names); ``num_boost_round`` among them sets
    the rounds (default :data:`DEFAULT_ROUNDS`). The time head's residual scale is chosen on
    ``scale_folds`` inner grouped folds (:func:`choose_residual_scale`; 0: no shrinkage).
    ``features``: a subset of :data:`FEATURE_COLUMNS` to fit on (default all). Without
    ``residual`` only the direct booster (on ``log2(measured)``) is fitted and predicts every row.
    With ``transfer`` the configuration-transfer table (:mod:`models.xfer`) is built from the
    table's measured rows and ``transfer_rows`` (:func:`models.tabular.transfer_rows` of more
    measured rows, e.g. every row of the training devices' datasets), each training row gets the
    transfer columns of the *other* devices, and the model keeps the table; with fewer than two
    devices, or no configuration measured on two, the transfer columns are left out of the features.
    With ``split`` (the default) the time head's residual is learned as a level per (kernel,
    device) and a shape within it (module docstring); without it as one booster. ``fast_weight``: the
    weight of a pair's fastest rows in the shape boosters (:func:`fast_weights`; 1: unweighted;
    default :data:`FAST_WEIGHT` when the table's rows come from several devices, else 1).
    ``transfer_offset``: a split head's transfer shape booster learns the shape minus the rows'
    ``xfer_shape`` (the other devices' residual shape) when any training row has one; without it
    (the default, module docstring), the shape itself, with ``xfer_shape`` among its features.
    ``seeds``: how many boosters each booster of a head is the mean of (default :data:`HEAD_SEEDS`
    of the head).
    :class:`DataError` when the table has no usable rows for a head asked for (e.g. ``energy``
    without measured energy)."""
    if target not in ("time", "energy", "both"):
        raise ValueError(f"target must be time, energy or both, not {target!r}")
    given = dict(params or {})
    rounds = int(given.pop("num_boost_round", given.pop("num_iterations", DEFAULT_ROUNDS)))
    missing = [c for c in FEATURE_COLUMNS if c not in table.columns]
    if missing:
        raise DataError(f"the table lacks feature column(s) {missing[:3]}: build it with models.tabular.build_table")
    features = list(FEATURE_COLUMNS) if features is None else [c for c in FEATURE_COLUMNS if c in set(features)]
    xfer = transfer_table(table, transfer_rows) if transfer and any(c in features for c in XFER_COLUMNS) else None
    if xfer is not None:
        table = fill_transfer(table, xfer)
        if not np.isfinite(table["xfer_rel"].to_numpy(dtype=np.float64)).any():
            xfer = None                             # no configuration of these rows measured on another device
    features = [c for c in features if c not in XFER_COLUMNS] + (list(XFER_COLUMNS) if xfer is not None else [])
    x_all = table[features].to_numpy(dtype=np.float64)
    # the residual and direct boosters never see the transfer columns (a row without a transfer
    # value gets the prediction of the model without them); only the transfer booster does
    base_features = [c for c in features if c not in XFER_COLUMNS]
    x_base = x_all[:, :len(base_features)]
    kernels = table["kernel_name"].to_numpy() if "kernel_name" in table.columns else None
    wanted = ["time", "energy"] if target == "both" else [target]
    heads: dict[str, TabularHead] = {}
    t0 = time.perf_counter()
    for t in wanted:
        col = TARGETS[t]
        y = pd.to_numeric(table[col], errors="coerce").to_numpy(dtype=np.float64) if col in table.columns \
            else np.full(len(table), np.nan)
        ok = np.isfinite(y) & (y > 0)
        if ok.sum() < MIN_ROWS:
            what = "no energy" if t == "energy" else "no measured time"
            raise DataError(f"{what}: {int(ok.sum())} row(s) with a positive {col}; a {t} head needs at least "
                            f"{MIN_ROWS} (energy needs a dataset measured with an energy meter)")
        base = table[BASES[t]].to_numpy(dtype=np.float64)
        has_base = ok & np.isfinite(base) & (base > 0)
        w_all = _weights(y[ok]) if t == "energy" else None
        th = time.perf_counter()
        p = {**DEFAULT_PARAMS, **HEAD_PARAMS[t], **given, "seed": seed}
        ns = max(1, int(HEAD_SEEDS[t] if seeds is None else seeds))
        head = TabularHead(t, BASES[t])
        summary: dict[str, Any] = {"rows": int(ok.sum()), "rows_with_analytical": int(has_base.sum()),
                                   "rounds": rounds, "params": {**p, "num_boost_round": rounds}, "seeds": ns,
                                   "weighting": "1/E (Zhang et al.)" if t == "energy" else "none"}
        if kernels is not None:
            summary["kernels"] = int(pd.Series(kernels[ok]).nunique())
        do_split = t == "time" and split
        if residual and has_base.sum() >= MIN_ROWS and do_split:
            r = np.log2(y[has_base] / base[has_base])
            pairs = pair_keys(table)[has_base]
            lvl, shp = split_residual(r, pairs)
            kk = table[KERNEL_KEY_COLUMN].astype(str).to_numpy()[has_base] if KERNEL_KEY_COLUMN in table.columns \
                else np.full(int(has_base.sum()), "")
            groups = merge_groups(table_groups(table)[has_base], kk)
            if fast_weight is None:
                several = "xfer_device" in table.columns and table["xfer_device"].astype(str).nunique() > 1
                fast_weight = FAST_WEIGHT if several else 1.0
            sw = fast_weights(np.log2(y[has_base]), pairs, fast_weight)
            head.unseen_shape_scale, head.unseen_level_scale, summary["split"] = choose_split_scales(
                x_base[has_base], r, pairs, groups, base_features, p, rounds, scale_folds, seed, sw, ns)
            head.shape = _fit_booster(x_base[has_base], shp, sw, base_features, p, rounds, ns)
            summary["split"]["fast_weight"] = {"weight": fast_weight, "share": FAST_SHARE}
            head.level_index = tuple(i for i, c in enumerate(base_features) if c in LEVEL_COLUMNS)
            level_names = [base_features[i] for i in head.level_index]
            head.level = _fit_booster(x_base[has_base][:, list(head.level_index)], lvl, None, level_names, p, rounds,
                                      ns)
            dd = table["xfer_device"].astype(str).to_numpy()[has_base] if "xfer_device" in table.columns \
                else np.full(int(has_base.sum()), "")
            head.kernel_levels = pair_levels(r, kk, dd)
            sub = table.loc[has_base]
            head.level_devices = {str(d): {c: float(g[c].iloc[0]) for c in DEVICE_COLUMNS if c in g.columns}
                                  for d, g in sub.groupby(sub["xfer_device"].astype(str))} \
                if "xfer_device" in sub.columns else {}
            summary["split"]["pairs"] = int(len(set(pairs.tolist())))
            summary["split"]["kernels"] = len(head.kernel_levels)
            hx = None
            if xfer is not None:
                hx = np.isfinite(table["xfer_rel"].to_numpy(dtype=np.float64))[has_base]
                xs = table["xfer_shape"].to_numpy(dtype=np.float64)[has_base] if "xfer_shape" in features \
                    else np.full(int(has_base.sum()), np.nan)
                if hx.sum() >= MIN_ROWS:
                    head.transfer_shape_offset = bool(transfer_offset and np.isfinite(xs[hx]).any())
                    off = np.nan_to_num(xs[hx], nan=0.0) if head.transfer_shape_offset else 0.0
                    head.transfer_shape = _fit_booster(x_all[has_base][hx], shp[hx] - off,
                                                       None if sw is None else sw[hx], features, p, rounds, ns)
                    summary["rows_with_transfer"] = int(hx.sum())
                    summary["transfer_shape_offset"] = {"on": head.transfer_shape_offset,
                                                        "rows_with_xfer_shape": int(np.isfinite(xs[hx]).sum())}
                else:
                    hx = None
            fitted = head.residual_log2(x_base[has_base], lvl, np.ones(len(lvl), dtype=bool),
                                        x_all[has_base] if hx is not None else None, hx,
                                        xs if hx is not None else None)
            summary["analytical_in_sample"] = _log2_summary(r)
            summary["residual_in_sample"] = _log2_summary(r - fitted)
        elif residual and has_base.sum() >= MIN_ROWS:
            r = np.log2(y[has_base] / base[has_base])
            w = _weights(y[has_base]) if t == "energy" else None
            if t == "time" and kernels is not None:
                groups = table_groups(table)[has_base]
                head.residual_scale, summary["residual_scale"] = choose_residual_scale(
                    x_base[has_base], r, groups, base_features, p, rounds, scale_folds, seed, ns)
            head.residual = _fit_booster(x_base[has_base], r, w, base_features, p, rounds, ns)
            fitted = head.residual_scale * np.asarray(head.residual.predict(x_base[has_base]), dtype=np.float64)
            summary["analytical_in_sample"] = _log2_summary(r)
            summary["residual_in_sample"] = _log2_summary(r - fitted)
        head.direct = _fit_booster(x_base[ok], np.log2(y[ok]), w_all, base_features, p, rounds, ns)
        if t == "time" and xfer is not None and not head.split:
            rel = table["xfer_rel"].to_numpy(dtype=np.float64)
            has_rel = ok & np.isfinite(rel)
            if has_rel.sum() >= MIN_ROWS:
                head.transfer = _fit_booster(x_all[has_rel], np.log2(y[has_rel]) - rel[has_rel], None, features, p,
                                             rounds, ns)
                summary["rows_with_transfer"] = int(has_rel.sum())
        summary["seconds"] = time.perf_counter() - th
        head.summary = summary
        heads[t] = head
    import lightgbm as lgb

    summary_all = {"target": target, "seed": seed, "rows": len(table), "features": len(features),
                   "params": {**DEFAULT_PARAMS, **given, "seed": seed, "num_boost_round": rounds},
                   "head_params": HEAD_PARAMS, "lightgbm": lgb.__version__,
                   "profile_device": profile.device.name, "seconds": time.perf_counter() - t0}
    if kernels is not None:
        summary_all["kernels"] = int(pd.Series(kernels).nunique())
    if xfer is not None:
        summary_all["config_transfer"] = {
            "devices": xfer.devices, "configurations": len(xfer.configs), "problems": len(xfer.levels),
            "training_rows_with_transfer": int(np.isfinite(table["xfer_rel"].to_numpy(dtype=np.float64)).sum())}
    return TabularPredictor(heads, features, profile, summary_all, xfer=xfer)


# ---------------------------------------------------------------------------------------------
# intervals: an internal grouped K-fold over the training rows


#: folds of the internal grouped cross-validation that calibrates the intervals
INTERVAL_FOLDS = 5
#: numbers of measured configurations whose corrected residual quantiles a model stores
SHOT_COUNTS = (1, 2, 3, 5)
#: random draws of the measured configurations per kernel in the k-shot simulation
SHOT_DRAWS = 5


def kernel_groups(names: Sequence[Any] | np.ndarray, ids: Sequence[Any] | np.ndarray | None = None,
                  origins: Sequence[Any] | np.ndarray | None = None) -> np.ndarray:
    """The cross-validation group of each row, by the rule of evaluate's folds
    (:func:`train.split.group_key`): a synthetic kernel belongs to its template family, any other
    kernel with an origin to its source file (kernels of one file share helpers, idioms and often
    their residual), a kernel without an origin or imported from a Kernel Tuner cache (origin
    ``kt:FILE``: the caches of several kernels share file names such as ``A100.json``, as
    :func:`train.oof.base_group` rules) to itself (its id, else its name). The inner folds
    that choose the residual scale and calibrate the intervals and the few-shot prior hold out what
    the outer folds hold out: a kernel of a file whose siblings were trained on is easier than a new
    one, and scoring on it chooses too large a residual scale and too narrow intervals."""
    out = []
    for i, name in enumerate(names):
        origin = origins[i] if origins is not None else None
        kid = ids[i] if ids is not None else None
        kid_s = str(kid) if kid is not None and str(kid) not in ("", "nan", "None") else ""
        if isinstance(origin, str) and origin.startswith("kt:"):
            origin = None
        key, _ = group_key(str(name), origin if isinstance(origin, str) and origin else None, kid_s)
        out.append(key)
    return np.asarray(out, dtype=object)


def table_groups(table: pd.DataFrame) -> np.ndarray:
    """:func:`kernel_groups` of the rows of a frame or a :func:`build_table` table (its
    ``kernel_name``, ``kernel_id`` and ``kernel_origin`` columns, where present)."""
    def col(c: str) -> list[Any] | None:
        return table[c].tolist() if c in table.columns else None

    return kernel_groups(col("kernel_name") or [""] * len(table), col("kernel_id"), col("kernel_origin"))


def grouped_folds(groups: Sequence[Any] | np.ndarray, n_folds: int, seed: int = 0) -> np.ndarray:
    """The fold (0..n_folds-1) of every row; a group is never in two folds. Groups are placed
    largest first (ties in a seeded hash order) into the fold with the fewest rows so far
    (ties: the lowest fold): deterministic for a seed, balanced by rows."""
    g = np.asarray(groups, dtype=object)
    keys, inv, counts = np.unique(g.astype(str), return_inverse=True, return_counts=True)
    if len(keys) < n_folds:
        raise DataError(f"{len(keys)} kernel group(s) for {n_folds} folds")
    rank = [hashlib.sha256(f"{seed}:{k}".encode()).hexdigest() for k in keys]
    order = sorted(range(len(keys)), key=lambda i: (-int(counts[i]), rank[i]))
    load = [0] * n_folds
    fold_of = np.zeros(len(keys), dtype=int)
    for i in order:
        f = min(range(n_folds), key=lambda j: (load[j], j))
        fold_of[i] = f
        load[f] += int(counts[i])
    return fold_of[inv]


def _figures(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    return {"rows": int((np.isfinite(pred) & np.isfinite(true) & (true > 0)).sum()),
            "median_ape": median_ape(pred, true), "mape": mape(pred, true), "within_2x": within_factor(pred, true)}


def _bins(bounds: list[str | None], sel: np.ndarray) -> set[str]:
    """The bounds with at least :data:`MIN_BOUND_ROWS` rows among ``sel``."""
    counts: dict[str, int] = {}
    for b, s in zip(bounds, sel):
        if s and b is not None:
            counts[b] = counts.get(b, 0) + 1
    return {b for b, n in counts.items() if n >= MIN_BOUND_ROWS}


def _calibration(r: np.ndarray, sel: np.ndarray, bounds: list[str | None], level: float) -> ResidualCalibration:
    """Zero-shot quantiles of the residuals ``r[sel]``: overall and per bound with enough rows."""
    cal = ResidualCalibration(ResidualQuantiles.of(r[sel], level))
    b_arr = np.asarray(bounds, dtype=object)
    for b in sorted(_bins(bounds, sel)):
        cal.by_bound[b] = ResidualQuantiles.of(r[sel & (b_arr == b)], level)
    return cal


def _coverage(lo: np.ndarray, hi: np.ndarray, true: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(true) & (true > 0)
    if not ok.any():
        return {"coverage": float("nan"), "width_median": float("nan"), "rows": 0}
    return {"coverage": float(np.mean((lo[ok] <= true[ok]) & (true[ok] <= hi[ok]))),
            "width_median": float(np.median(hi[ok] / lo[ok])), "rows": int(ok.sum())}


def _shot_draws(r: np.ndarray, kernels: np.ndarray, k: int, prior: float, seed: int,
                within_var: float | None = None, shape: ShapePrior | None = None,
                x: np.ndarray | None = None, chosen: bool = False) -> tuple[np.ndarray, ...]:
    """Simulated k-shot corrections on out-of-fold residuals: per kernel with more than k rows and
    per draw, k random rows are the measured configurations and the kernel's other rows are
    corrected as ``predict`` and ``tune`` correct them (:class:`models.fewshot.Offset`: the shrunk
    mean residual, and with ``shape`` and the rows' inputs ``x`` the shape correction). With
    ``chosen`` (and ``shape`` and ``x``) one draw per kernel: the k rows the model chooses
    (:func:`models.fewshot.choose_shots`, as ``predict --suggest-shots``). Returns (row index,
    corrected residual, kernel) of every corrected row."""
    rng = np.random.default_rng(seed + 1000 * k)
    rows, res, ker = [], [], []
    ok = np.isfinite(r)
    for kern in sorted(set(kernels[ok].tolist())):
        idx = np.flatnonzero(ok & (kernels == kern))
        if len(idx) <= k:
            continue
        for _ in range(1 if chosen else SHOT_DRAWS):
            if chosen and shape is not None and x is not None:
                shots = idx[choose_shots(shape, x[idx], k)]
                rest = np.setdiff1d(idx, shots)
            else:
                pick = rng.permutation(len(idx))
                shots, rest = idx[pick[:k]], idx[pick[k:]]
            rows.append(rest)
            off = Offset([float(v) for v in r[shots]], prior, within_var, shape if x is not None else None,
                         x[shots] if x is not None and shape is not None else None)
            res.append(r[rest] - off.log2_at(x[rest] if x is not None else np.zeros((len(rest), 1))))
            ker.append(np.full(len(rest), kern, dtype=object))
    if not rows:
        return np.zeros(0, dtype=int), np.zeros(0), np.zeros(0, dtype=object)
    return np.concatenate(rows), np.concatenate(res), np.concatenate(ker)


def _model_calibration(pred: np.ndarray, true: np.ndarray, bounds: list[str | None], kernels: np.ndarray,
                       folds: np.ndarray, level: float, seed: int,
                       launch: np.ndarray | None = None) -> ResidualCalibration | None:
    """The residual calibration of one model from its out-of-fold predictions ``pred``, with its
    figures: OOF accuracy, and the cross-fold coverage and width of the intervals (each fold's
    intervals from the quantiles of the other folds' residuals), zero-shot and k-shot. Of the
    interval kinds (:data:`models.tabular.INTERVAL_KINDS`) it keeps the one whose cross-fold
    intervals are narrower (median upper/lower ratio). With ``launch`` (rows of
    :func:`models.fewshot.launch_inputs`) it fits the prior of the shape correction
    (:func:`models.fewshot.fit_shape_prior`) and the k-shot figures and quantiles are those of the
    correction with it."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where((pred > 0) & (true > 0), np.log2(true / pred), np.nan)
    ok = np.isfinite(r)
    if ok.sum() < 2:
        return None
    by_kind: dict[str, dict[str, float]] = {}
    for kind in INTERVAL_KINDS:
        lo, hi = np.full(len(r), np.nan), np.full(len(r), np.nan)
        for f in np.unique(folds):
            test = ok & (folds == f)
            other = ok & (folds != f)
            if other.sum() < 2 or not test.any():
                continue
            c = _calibration(r, other, bounds, level)
            c.kind = kind
            idx = np.flatnonzero(test)
            lo[idx], hi[idx] = c.interval(pred[idx], [bounds[i] for i in idx])
        by_kind[kind] = _coverage(lo, hi, true)
    widths = {k: v["width_median"] for k, v in by_kind.items() if np.isfinite(v["width_median"])}
    cal = _calibration(r, ok, bounds, level)
    cal.kind = min(widths, key=lambda k: (widths[k], INTERVAL_KINDS.index(k))) if widths else INTERVAL_KINDS[0]
    prior, detail = estimate_prior(r, kernels)
    cal.prior = prior
    cal.within_var = detail.get("within_var")
    x = shape_inputs(launch, pred) if launch is not None else None
    cal.shape = fit_shape_prior(r, kernels, x, seed) if x is not None else None
    figures: dict[str, Any] = {"oof": _figures(pred, true), "bias_log2_median": float(np.median(-r[ok])),
                               "interval_cv": by_kind[cal.kind], "interval_cv_by_kind": by_kind, "prior": prior,
                               "prior_detail": detail, "shots": {}}
    for k in SHOT_COUNTS:
        entry: dict[str, Any] = {}
        for name, pr, wv, sh in (("estimated_prior", prior, cal.within_var, cal.shape),
                                 ("offset_only", prior, cal.within_var, None),
                                 ("default_prior", DEFAULT_SHRINK_PRIOR, None, None)):
            rows, rc, _ = _shot_draws(r, kernels, k, pr, seed, wv, sh, x if sh is not None else None)
            if not len(rows):
                break
            pc = true[rows] / np.exp2(rc)                   # the corrected predictions
            entry[name] = _figures(pc, true[rows])
            if name != "estimated_prior":
                continue
            q = ResidualQuantiles.of(rc, level)
            if not np.isfinite(q.abs_q):
                break
            cal.shots[k] = q
            slo, shi = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
            for f in np.unique(folds[rows]):
                test = folds[rows] == f
                if test.all():
                    continue
                a, z = ResidualQuantiles.of(rc[~test], level).log2_bounds(cal.kind)
                slo[test], shi[test] = pc[test] * np.exp2(a), pc[test] * np.exp2(z)
            entry["interval_cv"] = _coverage(slo, shi, true[rows])
        if entry and cal.shape is not None and x is not None:
            rows_c, rc_c, _ = _shot_draws(r, kernels, k, prior, seed, cal.within_var, cal.shape, x, chosen=True)
            if len(rows_c):
                entry["chosen"] = _figures(true[rows_c] / np.exp2(rc_c), true[rows_c])
        if entry:
            figures["shots"][str(k)] = entry
    cal.figures = figures
    return cal


def calibrate_intervals(table: pd.DataFrame, profile: DeviceProfile,
                        groups: Sequence[Any] | np.ndarray | None = None, *, folds: int = INTERVAL_FOLDS,
                        seed: int = 0, params: dict[str, Any] | None = None,
                        level: float = INTERVAL_LEVEL) -> tuple[IntervalCalibration | None, str]:
    """Out-of-fold residuals of the tabular time model (refitted on each grouped fold's other
    rows, same parameters and seed as :func:`fit_tabular`) and of the analytical model, and their
    :class:`IntervalCalibration`. ``groups`` (one per row): :func:`kernel_groups` of the table's
    kernel names by default. Returns ``(None, reason)`` when the table has fewer than two groups
    with a measured time; the number of folds is at most the number of groups."""
    t0 = time.perf_counter()
    y = pd.to_numeric(table[TARGETS["time"]], errors="coerce").to_numpy(dtype=np.float64) \
        if TARGETS["time"] in table.columns else np.full(len(table), np.nan)
    valid = np.isfinite(y) & (y > 0)
    names = table["kernel_name"].tolist() if "kernel_name" in table.columns else [""] * len(table)
    ids = table["kernel_id"].tolist() if "kernel_id" in table.columns else None
    g = np.asarray(groups, dtype=object) if groups is not None else table_groups(table)
    n_groups = len(set(g[valid].tolist()))
    if n_groups < 2:
        return None, (f"no intervals: the training rows hold {n_groups} kernel group(s); out-of-fold residuals need "
                      f"at least 2 (a synthetic template family counts once)")
    n_folds = min(folds, n_groups)
    sub = table.loc[valid]
    fold = grouped_folds(g[valid], n_folds, seed)
    oof = np.full(len(sub), np.nan)
    for f in range(n_folds):
        tr, te = fold != f, fold == f
        m = fit_tabular(sub.iloc[np.flatnonzero(tr)], profile, target="time", seed=seed, params=params)
        oof[te] = m.predict_table(sub.iloc[np.flatnonzero(te)]).time_us
    true = y[valid]
    bounds = bound_names(sub["an_bound"].to_numpy(dtype=np.float64))
    kernels = np.asarray([str(x) for x in (ids if ids is not None else names)], dtype=object)[valid]
    launch = np.column_stack([sub["log2_items"].to_numpy(dtype=np.float64),
                              sub["log2_wg_items"].to_numpy(dtype=np.float64),
                              np.clip(sub["an_log2_compute_over_memory"].to_numpy(dtype=np.float64),
                                      -BALANCE_CLIP, BALANCE_CLIP)])      # the rows of launch_inputs
    models: dict[str, ResidualCalibration] = {}
    for name, pred in (("tabular", oof), ("analytical", sub[BASES["time"]].to_numpy(dtype=np.float64))):
        c = _model_calibration(pred, true, bounds, kernels, fold, level, seed, launch)
        if c is not None:
            models[name] = c
    if "tabular" not in models:
        return None, "no intervals: no out-of-fold tabular prediction"
    cal = IntervalCalibration(level, n_folds, n_groups, int(valid.sum()), models, seed=seed)
    log.info("intervals calibrated on %d rows, %d groups, %d folds in %.1f s", cal.rows, n_groups, n_folds,
             time.perf_counter() - t0)
    return cal, ""


def interval_summary(cal: IntervalCalibration | None, reason: str = "") -> dict[str, Any]:
    """The figures of a calibration as ``train --kind tabular --json`` reports them."""
    if cal is None:
        return {"available": False, "reason": reason}
    out: dict[str, Any] = {"available": True, "level": cal.level, "folds": cal.folds,
                           "groups": cal.groups, "rows": cal.rows, "models": {}}
    for m, c in cal.models.items():
        f = c.figures
        out["models"][m] = {"oof": f.get("oof"), "interval_kind": c.kind, "interval_cv": f.get("interval_cv"),
                            "quantiles": c.overall.to_dict(), "bounds_with_own_quantiles": sorted(c.by_bound),
                            "prior": c.prior, "shape": c.shape.to_dict() if c.shape is not None else None,
                            "shots": f.get("shots")}
    return out


def train_tabular(dataset_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], profile: DeviceProfile, *,
                  target: Target = "time", seed: int = 0, params: dict[str, Any] | None = None,
                  interval_folds: int = INTERVAL_FOLDS) -> dict[str, Any]:
    """Load a dataset (``datagen.frame.load_measured_frame``), build its table, fit, calibrate the
    time intervals (:func:`calibrate_intervals` with ``interval_folds`` grouped folds, grouped by
    :func:`kernel_groups`; below 2: none), save the model in ``out_dir`` and return a summary (also
    what ``kernelcast train --kind tabular --json`` prints). Nothing is written when loading or
    fitting fails."""
    from kernelcast.datagen.frame import load_measured_frame

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {out} exists and is not a directory")
    if out.is_dir() and (out / "config.json").is_file() and not is_tabular_dir(out):
        raise DataError(f"--out {out} holds a CodeGen model (config.json); give another directory")
    t0 = time.perf_counter()
    frame, counts = load_measured_frame(dataset_dir)
    t1 = time.perf_counter()
    table = build_table(frame, profile)
    t2 = time.perf_counter()
    model = fit_tabular(table, profile, target=target, seed=seed, params=params)
    t3 = time.perf_counter()
    if "time" not in model.heads:
        cal, why = None, "no intervals: the model has no time head"
    elif interval_folds < 2:
        cal, why = None, "no intervals: the internal cross-validation was turned off"
    else:
        groups = table_groups(frame)
        cal, why = calibrate_intervals(table, profile, groups, folds=interval_folds, seed=seed, params=params)
    model.calibration = cal
    t4 = time.perf_counter()
    model.summary["data"] = {"dataset": str(dataset_dir), **counts, "rows": len(frame),
                             "kernels": int(frame["kernel_id"].nunique()) if "kernel_id" in frame.columns else None,
                             "rows_static_failed": int((table["k_static_ok"] == 0).sum())}
    model.save(out)
    return {"kind": "tabular", "out_dir": str(out), "data": model.summary["data"],
            "targets": model.targets, "features": len(model.features),
            "heads": {t: h.summary for t, h in model.heads.items()},
            "intervals": interval_summary(cal, why),
            "seconds": {"load": t1 - t0, "table": t2 - t1, "fit": t3 - t2, "intervals": t4 - t3,
                        "total": time.perf_counter() - t0},
            "profile": profile.device.name}

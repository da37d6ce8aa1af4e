"""One accuracy yardstick (``kernelcast evaluate``): grouped K-fold out-of-fold (OOF) predictions
of every model for every row of a dataset, and the figures every change to a model is judged by.

Folds are grouped by *kernel group*: a synthetic kernel belongs to its template family (its name
without the trailing number, ``synth_tile_000028`` -> ``synth_tile``), any other kernel to its
source file (the corpus record's ``origin``); groups holding near-duplicate sources (token-shingle
Jaccard >= 0.8 over identifier-normalised tokens, the corpus ingest's tokens) are merged. A group
is never on both sides of a split, and the folds are balanced by row count.

Models: ``analytical`` (no fitting), ``tabular`` (gradient-boosted trees, one table built for the
whole dataset and sliced per fold), ``codegen`` (the CodeGen regression model, slow) and
``blend``: stacking, whose weights for each outer fold are fitted on OOF predictions of the
training kernels from an inner grouped CV, never on the rows it is scored on; its candidates
include every single model, and it is chosen by the median ``|log2(pred / measured)|`` (never by
MAPE, which rewards predicting low).

Figures per model (:mod:`kernelcast.metrics`): MAPE, median and p90 APE, median |log2 ratio|, bias,
share within 2x, per-kernel MAPE; tuning (top-1 within 5 % of the measured best, regret, Spearman)
on groups of configurations of one problem, or per work-item within each kernel when the dataset
has too few such groups; few-shot (k measured configurations of each held-out kernel give a log
offset); 90 % intervals by cross-conformal quantiles of the OOF |log2 ratio| with their coverage.
"""

from __future__ import annotations

import abc
import hashlib
import itertools
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.dataset import ROUND_SPREAD, read_dataset, repeatability
from kernelcast.datagen.frame import DataError, load_measured_frames, prefix_keys
from kernelcast.models.blend import StackedBlend
from kernelcast.models.fewshot import frame_launch_inputs
from kernelcast.train.blend import CRITERIA, fit_stacked_blend  # noqa: F401 - fit_stacked_blend re-exported
from kernelcast.train.split import group_key

from kernelcast.columns import decode_args, decode_sizes
from kernelcast.errors import UsageError
from kernelcast.metrics import (
    conformal_quantile,
    interval_coverage,
    log2_bias,
    log2_ratio,
    mape,
    mean_sq_log2,
    measured_top_scores,
    median_abs_log2,
    median_ape,
    p90_ape,
    per_kernel_mape,
    tuning_scores,
    within_factor,
)

log = logging.getLogger(__name__)

MODEL_NAMES = ("analytical", "tabular", "codegen", "blend")
DEFAULT_MODELS = ("analytical", "tabular", "blend")
KIND = "kernelcast-evaluation"
FORMAT_VERSION = 1
TARGET = "time_median_us"
#: nominal coverages of the calibration plot
CALIBRATION_LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)

Progress = Callable[[str], None]


@dataclass
class EvaluateOptions:
    folds: int = 5
    models: tuple[str, ...] = DEFAULT_MODELS
    seed: int = 0
    shots: tuple[int, ...] = (0, 1, 3)
    level: float = 0.9                     # nominal coverage of the intervals
    interval_by: str = "none"              # none | regime | bound (analytical bound): per-bin quantiles
    min_bin_rows: int = 30                 # a bin with fewer OOF residuals uses all of them
    inner_folds: int = 3                   # blend: inner grouped CV on the training kernels
    criterion: str = "median_abs_log2"     # blend selection
    near_duplicate_threshold: float = 0.8
    tuning_tolerance: float = 0.05
    learning_curve: bool = False
    codegen_epochs: int = 20               # at most, per fit (early stopping on held-out kernel groups)
    codegen_base: str | None = None        # pretrained backbone (kernelcast pretrain --out, or a hub name)
    codegen_minutes: float | None = None   # training-time limit per fit
    energy_pcts: tuple[float, ...] = (10.0, 25.0)   # few-shot energy: % of each problem's configurations measured
    energy_top_k: int = 20
    repeats: int = 1                       # whole evaluations with fold seeds seed .. seed + repeats - 1

    def __post_init__(self) -> None:
        if self.folds < 2:
            raise UsageError(f"--folds must be at least 2, got {self.folds}")
        if self.inner_folds < 2:
            raise UsageError(f"--inner-folds must be at least 2, got {self.inner_folds}")
        unknown = [m for m in self.models if m not in MODEL_NAMES]
        if unknown:
            raise UsageError(f"unknown model {unknown[0]!r} (choose from {', '.join(MODEL_NAMES)})")
        if not self.models:
            raise UsageError("no model to evaluate")
        if self.models == ("blend",):
            raise UsageError("the blend needs at least one other model to blend (e.g. --models analytical,blend)")
        if any(k < 0 for k in self.shots):
            raise UsageError("--shots must be non-negative numbers of configurations")
        if not 0.0 < self.level < 1.0:
            raise UsageError(f"the interval level must be in (0, 1), got {self.level}")
        if self.interval_by not in ("none", "regime", "bound"):
            raise UsageError(f"--interval-by must be none, regime or bound, got {self.interval_by!r}")
        if self.criterion not in CRITERIA:
            raise UsageError(f"blend criterion must be one of {', '.join(CRITERIA)}, got {self.criterion!r}")
        if self.codegen_epochs < 1:
            raise UsageError("--codegen-epochs must be at least 1")
        if any(not 0.0 < p < 100.0 for p in self.energy_pcts):
            raise UsageError("--energy-pcts must be percentages in (0, 100)")
        if self.energy_top_k < 1:
            raise UsageError("--energy-top-k must be at least 1")
        if self.codegen_minutes is not None and not self.codegen_minutes > 0:
            raise UsageError("--codegen-minutes must be positive")
        if self.codegen_base is not None:
            if "codegen" not in self.models:
                raise UsageError("--codegen-base applies to the codegen model: add codegen to --models")
            if not Path(self.codegen_base).is_dir() and str(self.codegen_base).count("/") != 1:
                raise UsageError(f"--codegen-base {self.codegen_base}: no such directory, and not a hub name")
        if not 1 <= self.repeats <= MAX_REPEATS:
            raise UsageError(f"--repeats must be in 1..{MAX_REPEATS}, got {self.repeats}")
        if self.learning_curve and "tabular" not in self.models:
            raise UsageError("--learning-curve is drawn for the tabular model: add tabular to --models")


def parse_models(text: str) -> tuple[str, ...]:
    """``analytical,blend`` -> the models in canonical order; :class:`UsageError` for an unknown name."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in MODEL_NAMES:
            raise UsageError(f"--models: unknown model {n!r} (choose from {', '.join(MODEL_NAMES)})")
    if not names:
        raise UsageError("--models: no model named")
    return tuple(m for m in MODEL_NAMES if m in names)


def parse_shots(text: str) -> tuple[int, ...]:
    """``0,1,3`` -> (0, 1, 3); :class:`UsageError` for anything else."""
    try:
        shots = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--shots {text!r}: expected numbers like 0,1,3") from None
    if not shots or shots[0] < 0:
        raise UsageError(f"--shots {text!r}: expected non-negative numbers like 0,1,3")
    return tuple(shots)


def parse_pcts(text: str) -> tuple[float, ...]:
    """``10,25`` -> (10.0, 25.0); :class:`UsageError` for anything else (range checked by the options)."""
    try:
        pcts = sorted({float(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--energy-pcts {text!r}: expected percentages like 10,25") from None
    if not pcts or not all(0.0 < p < 100.0 for p in pcts):
        raise UsageError(f"--energy-pcts {text!r}: expected percentages in (0, 100) like 10,25")
    return tuple(pcts)


# ---------------------------------------------------------------------------------------------
# kernel groups and folds


@dataclass
class KernelGroup:
    key: str
    kind: str                               # synthetic_family | source_file | kernel | merged
    kernels: list[str]                      # kernel ids
    names: list[str]                        # kernel names, same order
    rows: int = 0
    fold: int = -1


@dataclass
class Grouping:
    group_of: dict[str, str]                # kernel id -> group key
    groups: dict[str, KernelGroup]
    near_duplicates: list[tuple[str, str, float]]   # (kernel id, kernel id, Jaccard) that merged groups


def base_group(name: str, origin: Any, kernel_id: str) -> tuple[str, str]:
    """(key, kind) of a kernel before near-duplicate merging: its synthetic template family, its
    source file, or (with no origin) the kernel alone (:func:`train.split.group_key`)."""
    return group_key(name, origin, kernel_id)


def _shingles(source: str) -> np.ndarray:
    from kernelcast.datagen.corpus.dedup import dedup_tokens, shingle_hashes

    return np.unique(shingle_hashes(dedup_tokens(source)))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted arrays of distinct values."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def near_duplicate_pairs(sources: Mapping[str, str], threshold: float = 0.8, *, num_perm: int = 128,
                         max_bucket: int = 64) -> list[tuple[str, str, float]]:
    """Pairs of kernels whose normalised sources are near-duplicates (exact Jaccard of token
    shingles >= ``threshold``), found among MinHash-LSH candidates so the cost stays near-linear:
    a bucket with more than ``max_bucket`` members is compared along a chain (each member with the
    first and with its neighbour), enough for the transitive merge the groups make."""
    from kernelcast.datagen.corpus.dedup import MinHasher, lsh_params

    ids = sorted(sources)
    sh = {i: _shingles(sources[i]) for i in ids}
    hasher = MinHasher(num_perm=num_perm, seed=1)
    bands, rows = lsh_params(num_perm, threshold)
    buckets: dict[tuple[int, bytes], list[str]] = {}
    for i in ids:
        sig = hasher.signature(sh[i])
        for b in range(bands):
            buckets.setdefault((b, sig[b * rows:(b + 1) * rows].tobytes()), []).append(i)
    cands: set[tuple[str, str]] = set()
    for members in buckets.values():
        if len(members) < 2:
            continue
        if len(members) <= max_bucket:
            cands.update(itertools.combinations(members, 2))
        else:
            cands.update((members[0], m) for m in members[1:])
            cands.update(zip(members[1:], members[2:]))
    out: list[tuple[str, str, float]] = []
    for x, y in sorted(cands):
        j = jaccard(sh[x], sh[y])
        if j >= threshold:
            out.append((x, y, j))
    return out


def build_groups(kernels: pd.DataFrame, threshold: float = 0.8) -> Grouping:
    """Kernel groups of a frame with one row per kernel (``kernel_id``, ``kernel_name``,
    ``kernel_origin``, ``source``, ``rows``)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    base: dict[str, tuple[str, str]] = {}
    for r in kernels.itertuples(index=False):
        base[str(r.kernel_id)] = base_group(str(r.kernel_name), getattr(r, "kernel_origin", None), str(r.kernel_id))
    for kid, (key, _) in base.items():
        parent.setdefault(kid, kid)
        parent.setdefault(key, key)
        union(kid, key)
    merges = []
    if threshold <= 1.0:
        for a, b, j in near_duplicate_pairs(dict(zip(kernels["kernel_id"], kernels["source"])), threshold):
            if find(a) != find(b):
                merges.append((a, b, j))
            union(a, b)
    names = dict(zip(kernels["kernel_id"], kernels["kernel_name"].astype(str)))
    rows = dict(zip(kernels["kernel_id"], kernels["rows"].astype(int)))
    comps: dict[str, list[str]] = {}
    for kid in sorted(base):
        comps.setdefault(find(kid), []).append(kid)
    group_of: dict[str, str] = {}
    groups: dict[str, KernelGroup] = {}
    for members in comps.values():
        keys = sorted({base[k][0] for k in members})
        kinds = {base[k][1] for k in members}
        key = keys[0] if len(keys) == 1 else f"{keys[0]} +{len(keys) - 1}"
        kind = kinds.pop() if len(keys) == 1 else "merged"
        members = sorted(members, key=lambda k: (names[k], k))
        groups[key] = KernelGroup(key, kind, members, [names[k] for k in members], sum(rows[k] for k in members))
        for k in members:
            group_of[k] = key
    return Grouping(group_of, groups, merges)


def assign_folds(group_rows: Mapping[str, int], n_folds: int, seed: int = 0) -> dict[str, int]:
    """Group -> fold, balanced by rows: groups larger than half a fold's share go first (largest
    first), then the others in a seeded random order, each to the fold with the fewest rows so far
    (ties: fewest groups, then a seeded order of the folds). Raises :class:`DataError` when there
    are fewer groups than folds."""
    if n_folds < 2:
        raise UsageError(f"--folds must be at least 2, got {n_folds}")
    if len(group_rows) < n_folds:
        raise DataError(f"too few kernel groups for {n_folds} folds: the dataset has {len(group_rows)} (a kernel, "
                        f"its near-duplicates and the synthetic kernels of its template family form one group); "
                        f"use fewer --folds or a dataset with more kernels")
    rng = np.random.default_rng([seed, n_folds])
    keys = sorted(group_rows)
    order = [keys[i] for i in rng.permutation(len(keys))]
    cut = sum(group_rows.values()) / (2 * n_folds)
    big = sorted((k for k in keys if group_rows[k] > cut), key=lambda k: (-group_rows[k], k))
    small = [k for k in order if group_rows[k] <= cut]
    prio = rng.permutation(n_folds)
    load = [0] * n_folds
    count = [0] * n_folds
    out: dict[str, int] = {}
    for k in big + small:
        f = min(range(n_folds), key=lambda i: (load[i], count[i], prio[i]))
        out[k] = f
        load[f] += group_rows[k]
        count[f] += 1
    return out


def row_folds(kernel_ids: np.ndarray, grouping: Grouping, n_folds: int, seed: int) -> np.ndarray:
    """The fold of every row (and each group's fold recorded in ``grouping``)."""
    fold_of = assign_folds({k: g.rows for k, g in grouping.groups.items()}, n_folds, seed)
    for k, g in grouping.groups.items():
        g.fold = fold_of[k]
    return np.array([fold_of[grouping.group_of[k]] for k in kernel_ids], dtype=int)


def _inner_folds(train: np.ndarray, kernel_ids: np.ndarray, grouping: Grouping, n_folds: int,
                 seed: int) -> np.ndarray | None:
    """Inner grouped folds of the training rows ``train`` (None when they hold fewer than 2 groups)."""
    groups = [grouping.group_of[k] for k in kernel_ids[train]]
    rows: dict[str, int] = {}
    for g in groups:
        rows[g] = rows.get(g, 0) + 1
    if len(rows) < 2:
        return None
    fold_of = assign_folds(rows, min(n_folds, len(rows)), seed)
    return np.array([fold_of[g] for g in groups], dtype=int)


# ---------------------------------------------------------------------------------------------
# the models, fitted per fold


class Fitter(abc.ABC):
    """One model of the evaluation: prepared once on the whole frame, then fitted on the rows
    ``train`` and predicting the rows ``test`` (row positions) for each fold."""

    name = "model"

    def prepare(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    @abc.abstractmethod
    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        """Predicted time (us) of the rows ``test`` by the model fitted on the rows ``train``."""


class AnalyticalFitter(Fitter):
    """The analytical model: nothing fitted, every row predicted once."""

    name = "analytical"

    def __init__(self, profile: DeviceProfile) -> None:
        from kernelcast.models.analytical import AnalyticalModel

        self.model = AnalyticalModel(profile)

    def prepare(self, frame: pd.DataFrame) -> None:
        from kernelcast.models.fewshot import analytical_balance

        p = self.model.predict(frame)
        self.pred = p.time_us
        self.bound = np.array([str(e.get("bound", "none")) for e in p.explanation], dtype=object)
        self.balance = analytical_balance(p.explanation)
        self.frame_rows = len(frame)
        failed = int(np.isnan(self.pred).sum())
        if failed:
            log.warning("the analytical model has no prediction for %d row(s) (static analysis failed)", failed)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        return np.asarray(self.pred[test], dtype=np.float64)


def _analytical_of(fitters: Mapping[str, Fitter], profile: DeviceProfile, frame: pd.DataFrame) -> AnalyticalFitter:
    """The evaluation's analytical fitter, prepared on ``frame``; one made for the purpose when the
    analytical model is not among the models evaluated (its bounds and balances are inputs of the
    interval bins and the few-shot shape correction of every model)."""
    an = fitters.get("analytical")
    if isinstance(an, AnalyticalFitter) and getattr(an, "frame_rows", None) == len(frame):
        return an
    an = AnalyticalFitter(profile)
    an.prepare(frame)
    return an


class TabularFitter(Fitter):
    """The tabular model: its table is built once for the whole dataset and sliced per fold."""

    name = "tabular"

    def __init__(self, profile: DeviceProfile, seed: int = 0) -> None:
        self.profile, self.seed = profile, seed

    def prepare(self, frame: pd.DataFrame) -> None:
        from kernelcast.models.tabular import build_table

        self.table = build_table(frame, self.profile)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        from kernelcast.train.tabular import fit_tabular

        model = fit_tabular(self.table.iloc[train].reset_index(drop=True), self.profile, target="time",
                            seed=self.seed)
        return np.asarray(model.predict_table(self.table.iloc[test].reset_index(drop=True)).time_us,
                          dtype=np.float64)


class CodegenFitter(Fitter):
    """The CodeGen regression model (efficient mode: the residual over the analytical model of the
    profile, with the feature table in the input), trained on each fold's rows from scratch or from
    a pretrained backbone (``base``). Each fit holds out kernel groups of its training rows for
    early stopping and model selection (``train.loop``); the test fold is never seen."""

    name = "codegen"

    def __init__(self, profile: DeviceProfile, seed: int = 0, epochs: int = 20, base: str | None = None,
                 max_minutes: float | None = None, threads: int | None = 1) -> None:
        self.profile, self.seed, self.epochs, self.base = profile, seed, epochs, base
        self.max_minutes, self.threads = max_minutes, threads
        self.runs: list[dict[str, Any]] = []

    def prepare(self, frame: pd.DataFrame) -> None:
        from kernelcast.models.tabular import build_table

        self.frame = frame
        self.table = build_table(frame, self.profile)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        from kernelcast.train.loop import TrainOptions, fit_frame

        opts = TrainOptions(mode="efficient", epochs=self.epochs, seed=self.seed, resume=False, progress=False,
                            profile=self.profile, base=self.base, max_minutes=self.max_minutes,
                            threads=self.threads)
        with tempfile.TemporaryDirectory(prefix="kernelcast-evaluate-codegen-") as d:
            res = fit_frame(self.frame.iloc[train].reset_index(drop=True), out_dir=d, options=opts,
                            table=self.table.iloc[train].reset_index(drop=True))
            pred = res.predictor.predict(self.frame.iloc[test].reset_index(drop=True),
                                         table=self.table.iloc[test].reset_index(drop=True))
        t = res.metrics["training"]
        self.runs.append({"train_rows": len(train), "test_rows": len(test), "stopped": res.stopped,
                          "epochs": t["epochs_completed"], "steps": t["steps"], "best_epoch": t["best_epoch"],
                          "best_step": t["best_step"], "final_lr": t["final_lr"], "seconds": t["seconds"],
                          "validation_kernels": res.metrics["data"]["val_kernels"],
                          "validation_split": res.metrics["split"].get("by")})
        return np.asarray(pred.time_us, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# the stacked blend


# ---------------------------------------------------------------------------------------------
# figures


def row_metrics(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray) -> dict[str, Any]:
    """The zero-shot figures of one model's predictions."""
    valid = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    km_mean, km_median = per_kernel_mape(pred[valid], true[valid], kernels[valid])
    return {
        "rows": int(valid.sum()),
        "rows_without_prediction": int((~np.isfinite(pred)).sum()),
        "kernels": int(len(np.unique(kernels[valid]))),
        "mape": mape(pred, true),
        "median_ape": median_ape(pred, true),
        "p90_ape": p90_ape(pred, true),
        "median_abs_log2": median_abs_log2(pred, true),
        "bias_log2": log2_bias(pred, true),
        "mse_log2": mean_sq_log2(pred, true),
        "within_2x_pct": 100.0 * within_factor(pred, true, 2.0),
        "kernel_mape_mean": km_mean,
        "kernel_mape_median": km_median,
    }


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def few_shot(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray, k: int,
             seed: int = 0, folds: np.ndarray | None = None, launch: np.ndarray | None = None,
             priors: Mapping[int, tuple[float, float | None, Any]] | None = None,
             design: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Few-shot updating (:mod:`models.fewshot`): for each kernel, ``k`` of its rows chosen at
    random (seeded by ``seed`` and the kernel, the same rows for every model that predicts them;
    the shots of k are among those of any larger k) are "measured", and the correction they give
    scales the kernel's other rows. With ``folds`` the correction is the one ``predict`` applies: the
    offset's prior strength and the pooled within-kernel variance are estimated
    (:func:`models.fewshot.estimate_prior`) on the residuals ``log2(true / pred)`` of the rows of the
    other folds, never on the kernel's own fold, and with ``launch`` (rows of
    :func:`models.fewshot.launch_inputs`) the shape prior too (:func:`models.fewshot.fit_shape_prior`),
    so the correction depends on the configuration (``priors``: those of :func:`fold_priors`, when
    already estimated); without ``folds`` it is the plain mean of ``log2(measured / predicted)``
    over the shots. With ``design`` the shots are not random but the ones the model would ask to
    measure (:func:`models.fewshot.choose_shots` with the fold's shape prior, from the kernel's
    configurations alone; random where the fold has no shape prior). Returns the corrected
    predictions and the mask of the rows to score (those that were not shots; none of a kernel with
    k rows or fewer)."""
    from kernelcast.models.fewshot import choose_shots, fit_offset, shape_inputs

    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    valid = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    out = pred.copy()
    scored = valid.copy()
    if k <= 0:
        return out, scored
    x = shape_inputs(launch, pred) if launch is not None else None
    shrink = {} if folds is None else priors if priors is not None else fold_priors(pred, true, kernels, folds,
                                                                                    launch, seed)
    for kern in np.unique(kernels[valid]):
        idx = np.flatnonzero(valid & (kernels == kern))
        prior, within, shape = shrink.get(int(folds[idx[0]]), (0.0, None, None)) if folds is not None \
            else (0.0, None, None)
        if design and shape is not None and x is not None and len(idx) > k:
            shots = idx[choose_shots(shape, x[idx], k, seed=seed)]
            rest = np.setdiff1d(idx, shots)
        else:
            rng = np.random.default_rng([seed, _stable_int(str(kern))])
            perm = idx[rng.permutation(len(idx))]
            shots, rest = perm[:k], perm[k:]
        scored[shots] = False
        if len(rest):
            off = fit_offset(true[shots], pred[shots], prior, within, shape, x[shots] if x is not None else None)
            out[rest] = off.apply(pred[rest], x[rest] if x is not None else None)
    return out, scored


def fold_priors(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray, folds: np.ndarray,
                launch: np.ndarray | None = None, seed: int = 0) -> dict[int, tuple[float, float | None, Any]]:
    """Per fold, the few-shot priors ``predict`` would use, estimated on the residuals of the
    other folds' rows: the offset's prior strength and pooled within-kernel variance
    (:func:`models.fewshot.estimate_prior`) and, with ``launch``, the shape prior
    (:func:`models.fewshot.fit_shape_prior`; ``None`` without)."""
    from kernelcast.models.fewshot import estimate_prior, fit_shape_prior, shape_inputs

    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    valid = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    x = shape_inputs(launch, pred) if launch is not None else None
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(valid, np.log2(true / np.where(valid, pred, 1.0)), np.nan)
    out: dict[int, tuple[float, float | None, Any]] = {}
    for f in np.unique(folds):
        other = valid & (folds != f)
        prior, detail = estimate_prior(r[other], kernels[other])
        shape = fit_shape_prior(r[other], kernels[other], x[other], seed) if x is not None else None
        out[int(f)] = (prior, detail.get("within_var"), shape)
    return out


def adaptive_top_scores(pred: np.ndarray, true: np.ndarray, groups: np.ndarray, k: int, launch: np.ndarray,
                        folds: np.ndarray, priors: Mapping[int, tuple[float, float | None, Any]], *,
                        scale: np.ndarray | None = None, tol: float = 0.05) -> dict[str, Any]:
    """Tuning with ``k`` measurements fed back, as ``kernelcast tune --measure-top K`` with a model
    does it: in each group of more than ``k`` rows, the configuration predicted fastest is measured,
    the group's other configurations are corrected by the measurements so far
    (:func:`models.fewshot.fit_offset` with the fold's ``priors``: offset and shape), the fastest
    corrected one is measured next, and after ``k`` the fastest measured is the choice (times
    compared divided by ``scale``, as :class:`TuningBasis` compares them). Returns the figures of
    :func:`kernelcast.metrics.measured_top_scores`."""
    from kernelcast.models.fewshot import fit_offset, shape_inputs

    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    ok = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    x = shape_inputs(launch, pred)
    sc = np.ones(len(pred)) if scale is None else np.asarray(scale, dtype=np.float64)
    regrets: list[float] = []
    for g in np.unique(groups[ok]):
        sel = np.flatnonzero(ok & (groups == g))
        if len(sel) <= k or k < 1:
            continue
        prior, within, shape = priors.get(int(folds[sel[0]]), (1.0, None, None))
        now = pred[sel] / sc[sel]
        measured: list[int] = []
        for _ in range(k):
            left = [i for i in np.argsort(now, kind="stable") if i not in measured]
            measured.append(int(left[0]))
            m = sel[measured]
            now = fit_offset(true[m], pred[m], prior, within, shape, x[m]).apply(pred[sel], x[sel]) / sc[sel]
        y = true[sel] / sc[sel]
        regrets.append(float(y[measured].min() / y.min()))
    r = np.asarray(regrets)
    nan = float("nan")
    return {"k": k, "groups": len(regrets), "top1_within": float(np.mean(r <= 1.0 + tol)) if len(r) else nan,
            "regret_median": float(np.median(r)) if len(r) else nan,
            "regret_geomean": float(np.exp(np.mean(np.log(r)))) if len(r) else nan,
            "regret_max": float(np.max(r)) if len(r) else nan}


def offset_floor(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """Every kernel's predictions times the one factor that fits all of its rows best (the mean of
    ``log2(true / pred)`` over them): what no per-kernel offset, and so no number of shots, can
    beat on average; the rest is the model's error in the shape of a kernel's times across its
    configurations, and the measurements' own noise."""
    pred = np.asarray(pred, dtype=np.float64)
    valid = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    out = np.full(len(pred), np.nan)
    if not valid.any():
        return out
    r = np.log2(true[valid] / pred[valid])
    keys, inv = np.unique(kernels[valid], return_inverse=True)
    mean = np.bincount(inv, weights=r) / np.bincount(inv)
    out[valid] = pred[valid] * 2.0 ** mean[inv]
    return out


def conformal_intervals(pred: np.ndarray, true: np.ndarray, folds: np.ndarray, level: float,
                        bins: np.ndarray | None = None, min_bin_rows: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Cross-conformal intervals ``[pred / 2^q, pred * 2^q]``: for the rows of fold f, ``q`` is the
    conformal ``level`` quantile of ``|log2(pred / measured)|`` over the rows of the other folds
    (with ``bins``, of the other folds' rows in the same bin when it has ``min_bin_rows`` of them)."""
    pred = np.asarray(pred, dtype=np.float64)
    r = np.abs(log2_ratio(pred, true))
    has_r = np.isfinite(r)
    q = np.full(len(pred), np.nan)
    for f in np.unique(folds):
        te = folds == f
        other = has_r & ~te
        q_all = conformal_quantile(r[other], level) if other.any() else np.inf
        q[te] = q_all
        if bins is None:
            continue
        for b in np.unique(bins[te]):
            sel = other & (bins == b)
            if sel.sum() >= min_bin_rows:
                q[te & (bins == b)] = conformal_quantile(r[sel], level)
    with np.errstate(over="ignore"):
        f = 2.0 ** q
    return pred / f, pred * f


def interval_figures(pred: np.ndarray, true: np.ndarray, folds: np.ndarray, level: float,
                     bins: np.ndarray | None, min_bin_rows: int) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    lo, hi = conformal_intervals(pred, true, folds, level, bins, min_bin_rows)
    ok = np.isfinite(pred) & (pred > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        width = hi[ok] / lo[ok]
    calib = []
    for lv in CALIBRATION_LEVELS:
        lo2, hi2 = conformal_intervals(pred, true, folds, lv, bins, min_bin_rows)
        calib.append([lv, 100.0 * interval_coverage(lo2, hi2, true)])
    return {
        "level": level,
        "coverage_pct": 100.0 * interval_coverage(lo, hi, true),
        "mean_width_factor": float(np.mean(width)) if len(width) else float("nan"),
        "median_width_factor": float(np.median(width)) if len(width) else float("nan"),
        "calibration": calib,
    }, lo, hi


def problem_keys(frame: pd.DataFrame) -> np.ndarray:
    """One key per row naming its problem: the kernel plus ``problem_id`` where the row has one
    (dataset schema 2), else the kernel, the global size and the argument sizes (buffer element counts and scalar
    values; local-memory arguments belong to the configuration, not the problem)."""
    pids = frame["problem_id"] if "problem_id" in frame.columns else pd.Series([None] * len(frame), index=frame.index)
    out = []
    for k, g, a, pid in zip(frame["kernel_id"], frame["gsize"], frame["args"], pids):
        if isinstance(pid, str) and pid:        # schema 2: the row's own problem id
            out.append(f"{k}|{pid}")
            continue
        args = tuple((x.get("name"), x.get("count") if x.get("kind") == "buffer" else x.get("value"))
                     for x in decode_args(a) if x.get("kind") != "local")
        out.append(f"{k}|{decode_sizes(g)}|{args}")
    return np.array(out, dtype=object)


def global_items(frame: pd.DataFrame) -> np.ndarray:
    if "global_items" in frame.columns and frame["global_items"].notna().all():
        return frame["global_items"].to_numpy(dtype=np.float64)
    return np.array([float(np.prod(decode_sizes(g) or (1,))) for g in frame["gsize"]])


@dataclass
class TuningBasis:
    basis: str                  # "problem" or "per_work_item"
    groups: np.ndarray          # group label per row
    scale: np.ndarray           # times are divided by this before comparing (1, or global work-items)
    problem_groups: int         # groups of >= 2 configurations of one problem
    problem_kernels: int        # kernels with such a group
    kernels: int
    problems: np.ndarray        # the problem key of every row (whichever basis is used)


def tuning_basis(frame: pd.DataFrame) -> TuningBasis:
    """Groups of configurations of one problem when at least a quarter of the kernels have one with
    two or more distinct launch configurations (local sizes); else each kernel's configurations
    compared per work-item. A problem measured twice with the same configuration (e.g. under two
    argument selections that gave the same sizes) is no tuning question: its rows are left out of
    the problem groups."""
    raw = problem_keys(frame)
    kern = frame["kernel_id"].to_numpy()
    lsizes = [str(decode_sizes(v)) for v in frame["lsize"]] if "lsize" in frame.columns else [""] * len(frame)
    configs = pd.DataFrame({"key": raw, "lsize": lsizes}).groupby("key")["lsize"].nunique()
    multi = set(configs[configs >= 2].index)
    keys = np.array([k if k in multi else f"{k}#{i}" for i, k in enumerate(raw)], dtype=object)
    n_kernels = int(len(np.unique(kern)))
    p_kernels = int(len({k for k, key in zip(kern, keys) if key in multi}))
    if multi and p_kernels * 4 >= n_kernels:
        return TuningBasis("problem", keys, np.ones(len(frame)), len(multi), p_kernels, n_kernels, keys)
    return TuningBasis("per_work_item", kern, global_items(frame), len(multi), p_kernels, n_kernels, keys)


# ---------------------------------------------------------------------------------------------
# the evaluation


@dataclass
class Evaluation:
    metrics: dict[str, Any]
    oof: pd.DataFrame


def _identity_of_profile(profile: DeviceProfile, spec: str | None) -> dict[str, Any]:
    d = profile.to_dict()
    return {"spec": spec, "device": profile.device.name, "kind": profile.kind, "created": profile.created,
            "sha256": hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]}


def _identity_of_datasets(roots: Sequence[Path], frame: pd.DataFrame, counts: dict[str, int]) -> dict[str, Any]:
    """What metrics.json records of the evaluated dataset(s): path, device, corpus, argument
    selection, a fingerprint of the rows used and the row counts; with several datasets, the paths
    joined by ``+`` and each one's own record under ``parts``."""
    from kernelcast.datagen.dataset import read_manifest

    def one(root: Path) -> dict[str, Any]:
        try:
            m = read_manifest(root)
        except (OSError, ValueError):
            m = {}
        return {"path": str(root.resolve()), "device": (m.get("device") or {}).get("name"),
                "device_identity": m.get("device_identity"), "created": m.get("created"), "corpus": m.get("corpus"),
                "args_selection": m.get("args_selection"), "seed": (m.get("options") or {}).get("seed")}

    keys = "\n".join(sorted(frame["row_key"].astype(str))) if "row_key" in frame.columns else ""
    parts = [one(r) for r in roots]
    out = dict(parts[0])
    if len(parts) > 1:
        for k in ("path", "corpus", "args_selection", "created"):
            out[k] = " + ".join(str(p.get(k)) for p in parts)
        out["parts"] = parts
    return {**out, "rows_fingerprint": hashlib.sha256(keys.encode()).hexdigest()[:16], **counts}


def _make_fitters(models: Sequence[str], profile: DeviceProfile, opts: EvaluateOptions) -> dict[str, Fitter]:
    out: dict[str, Fitter] = {}
    for m in models:
        if m == "analytical":
            out[m] = AnalyticalFitter(profile)
        elif m == "tabular":
            out[m] = TabularFitter(profile, opts.seed)
        elif m == "codegen":
            out[m] = CodegenFitter(profile, opts.seed, opts.codegen_epochs, opts.codegen_base, opts.codegen_minutes)
    return out


def check_profile_for_dataset(profile: DeviceProfile, root: Path) -> None:
    """A profile of another device type (GPU / CPU) than the device the dataset was measured on
    (its manifest's ``device.type``) is refused with one line
    (:class:`~calib.profile.ProfileDeviceMismatch`); a dataset without a manifest or a device
    type passes."""
    from kernelcast.datagen.dataset import read_manifest

    try:
        dev = read_manifest(root).get("device") or {}
    except (OSError, ValueError):
        return
    if isinstance(dev, dict):
        profile.check_device_type(str(dev.get("type") or ""), f"the device of dataset {root} "
                                                             f"({dev.get('name') or '?'})")


def evaluate_dataset(dataset_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], profile: DeviceProfile,
                     options: EvaluateOptions, *, profile_spec: str | None = None,
                     progress: Progress | None = None) -> Evaluation:
    """Load a dataset (or several of one device, evaluated as one: see
    :func:`~datagen.frame.load_measured_frames`) and evaluate ``options.models`` on it (see the
    module docstring). :class:`~kernelcast.errors.InputError` for a dataset that cannot be used."""
    roots = [Path(dataset_dir)] if isinstance(dataset_dir, (str, os.PathLike)) else [Path(d) for d in dataset_dir]
    for root in roots:
        check_profile_for_dataset(profile, root)
    frame, counts = load_measured_frames(roots)
    y = frame[TARGET].to_numpy(dtype=np.float64)
    keep = np.isfinite(y) & (y > 0)
    counts["rows_without_time"] = int((~keep).sum())
    frame = frame[keep].reset_index(drop=True)
    if frame.empty:
        raise DataError(f"{' + '.join(map(str, roots))}: no row has a measured time")
    counts["rows_used"] = len(frame)
    fitters = _make_fitters(options.models, profile, options)   # before anything slow: a missing model is an error
    ev = evaluate_frame(frame, profile, options, fitters=fitters, progress=progress)
    if options.repeats > 1:
        runs = [ev.metrics]
        for r in range(1, options.repeats):
            say = progress or (lambda msg: log.info("%s", msg))
            say(f"repeat {r + 1}/{options.repeats}: fold seed {options.seed + r}")
            o = replace(options, seed=options.seed + r, learning_curve=False)
            runs.append(evaluate_frame(frame, profile, o, fitters=_make_fitters(o.models, profile, o),
                                       progress=progress).metrics)
        ev.metrics["repeats"] = repeat_spread(runs)
    ev.metrics["dataset"] = _identity_of_datasets(roots, frame, counts)
    raw = [read_dataset(r, resolve=False) for r in roots]
    if len(raw) > 1:
        raw = [prefix_keys(df, f"{i}:") for i, df in enumerate(raw)]
    ev.metrics["dataset"]["repeatability"] = repeatability(pd.concat(raw, ignore_index=True, sort=False))
    ev.metrics["profile"] = _identity_of_profile(profile, profile_spec)
    return ev


#: tuning with k measurements (``tune --measure-top K``): the fastest of the k configurations
#: predicted fastest; k = 1 is the zero-shot pick itself
MEASURE_TOP = (2, 3)
#: most whole evaluations ``--repeats`` runs
MAX_REPEATS = 20
#: the headline figures whose spread over fold seeds ``--repeats`` reports: (name, where in metrics.json)
REPEAT_FIGURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("median_ape", ("metrics", "{m}", "median_ape")),
    ("mape", ("metrics", "{m}", "mape")),
    ("median_abs_log2", ("metrics", "{m}", "median_abs_log2")),
    ("within_2x_pct", ("metrics", "{m}", "within_2x_pct")),
    ("top1_within", ("tuning", "models", "{m}", "top1_within")),
    ("shot1_mape", ("few_shot", "models", "{m}", "1", "mape")),
    ("shot3_mape", ("few_shot", "models", "{m}", "3", "mape")),
    ("shot3_median_ape", ("few_shot", "models", "{m}", "3", "median_ape")),
    ("shot3_top1_within", ("few_shot", "models", "{m}", "3", "tuning", "top1_within")),
    ("shot3_offset_only_mape", ("few_shot", "offset_only", "{m}", "3", "mape")),
    ("shot3_designed_mape", ("few_shot", "models", "{m}", "3", "designed", "mape")),
    ("shot3_designed_median_ape", ("few_shot", "models", "{m}", "3", "designed", "median_ape")),
    ("shot3_designed_top1_within", ("few_shot", "models", "{m}", "3", "designed", "tuning", "top1_within")),
    ("measure2_top1_within", ("tuning", "models", "{m}", "measure_top", "2", "top1_within")),
    ("adaptive2_top1_within", ("tuning", "models", "{m}", "measure_top_adaptive", "2", "top1_within")),
)


def repeat_spread(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean, standard deviation, min and max of the headline figures of each model over whole
    evaluations with different fold seeds: how much of a difference between two evaluations the
    choice of folds alone makes."""
    out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "models": {}}
    for m in runs[0]["models"]:
        figs: dict[str, Any] = {}
        for name, path in REPEAT_FIGURES:
            vals = []
            for r in runs:
                x: Any = r
                for key in path:
                    x = x.get(key.format(m=m)) if isinstance(x, Mapping) else None
                if isinstance(x, (int, float)) and math.isfinite(x):
                    vals.append(float(x))
            if vals:
                a = np.asarray(vals)
                figs[name] = {"mean": float(a.mean()), "sd": float(a.std(ddof=1)) if len(a) > 1 else 0.0,
                              "min": float(a.min()), "max": float(a.max()), "values": vals}
        out["models"][m] = figs
    return out


def evaluate_frame(frame: pd.DataFrame, profile: DeviceProfile, options: EvaluateOptions, *,
                   fitters: dict[str, Fitter] | None = None, progress: Progress | None = None) -> Evaluation:
    """Evaluate on the rows of ``frame`` (dataset columns with ``source`` and a positive measured time)."""
    say = progress or (lambda msg: log.info("%s", msg))
    opts = options
    t_start = time.perf_counter()
    kernel_ids = frame["kernel_id"].astype(str).to_numpy()
    y = frame[TARGET].to_numpy(dtype=np.float64)
    kf = frame.assign(kernel_id=kernel_ids)
    if "kernel_origin" not in kf.columns:
        kf["kernel_origin"] = None
    per_kernel = (kf.groupby("kernel_id", sort=True)
                  .agg(kernel_name=("kernel_name", "first"), kernel_origin=("kernel_origin", "first"),
                       source=("source", "first"), rows=("kernel_name", "size")).reset_index())
    grouping = build_groups(per_kernel, opts.near_duplicate_threshold)
    folds = row_folds(kernel_ids, grouping, opts.folds, opts.seed)
    say(f"{len(frame)} rows of {len(per_kernel)} kernels in {len(grouping.groups)} kernel groups "
        f"({len(grouping.near_duplicates)} near-duplicate merge(s)), {opts.folds} folds")

    fitters = fitters if fitters is not None else _make_fitters(opts.models, profile, opts)
    seconds: dict[str, float] = {}
    for name, ft in fitters.items():
        t0 = time.perf_counter()
        say(f"preparing {name}")
        ft.prepare(frame)
        seconds[name] = time.perf_counter() - t0
    oof = {name: np.full(len(frame), np.nan) for name in fitters}
    for f in range(opts.folds):
        test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
        for name, ft in fitters.items():
            t0 = time.perf_counter()
            say(f"fold {f + 1}/{opts.folds}: {name} ({len(train)} training rows, {len(test)} test rows)")
            oof[name][test] = ft.fit_predict(train, test)
            seconds[name] += time.perf_counter() - t0
    blends: list[dict[str, Any]] = []
    if "blend" in opts.models:
        t0 = time.perf_counter()
        oof["blend"], blends = _stacked_oof(fitters, oof, y, kernel_ids, folds, grouping, opts, say)
        seconds["blend"] = time.perf_counter() - t0
    models = [m for m in opts.models if m in oof]

    an = _analytical_of(fitters, profile, frame)
    bins = None
    if opts.interval_by == "regime" and "regime" in frame.columns:
        bins = frame["regime"].fillna("none").astype(str).to_numpy()
    elif opts.interval_by == "bound":
        bins = an.bound

    basis = tuning_basis(frame)
    metrics: dict[str, dict[str, Any]] = {}
    tuning: dict[str, Any] = {"basis": basis.basis, "tolerance": opts.tuning_tolerance,
                              "problem_groups": basis.problem_groups, "problem_kernels": basis.problem_kernels,
                              "kernels": basis.kernels, "models": {}}
    shots: dict[str, dict[str, Any]] = {}
    offset_shots: dict[str, dict[str, Any]] = {}
    floors: dict[str, dict[str, Any]] = {}
    disagree = None
    if "time_rounds_spread" in frame.columns:
        disagree = pd.to_numeric(frame["time_rounds_spread"], errors="coerce").fillna(0).to_numpy() > ROUND_SPREAD
    launch = frame_launch_inputs(frame, an.balance)
    intervals: dict[str, Any] = {"level": opts.level, "by": opts.interval_by, "method": "cross-conformal |log2 ratio|",
                                 "models": {}}
    out = pd.DataFrame({"row_key": frame["row_key"] if "row_key" in frame.columns else np.arange(len(frame)),
                        "kernel_id": kernel_ids, "kernel_name": frame["kernel_name"].astype(str),
                        "group": [grouping.group_of[k] for k in kernel_ids], "fold": folds, "measured_us": y})
    for m in models:
        p = oof[m]
        metrics[m] = row_metrics(p, y, kernel_ids)
        metrics[m]["per_fold"] = [{"fold": f, "rows": int((folds == f).sum()),
                                   "mape": mape(p[folds == f], y[folds == f]),
                                   "median_ape": median_ape(p[folds == f], y[folds == f])}
                                  for f in range(opts.folds)]
        metrics[m]["seconds"] = seconds.get(m)
        tuning["models"][m] = tuning_scores(p / basis.scale, y / basis.scale, basis.groups,
                                            tol=opts.tuning_tolerance)
        tuning["models"][m]["measure_top"] = {
            str(k): measured_top_scores(p / basis.scale, y / basis.scale, basis.groups, k, tol=opts.tuning_tolerance)
            for k in MEASURE_TOP}
        priors = fold_priors(p, y, kernel_ids, folds, launch, opts.seed)
        tuning["models"][m]["measure_top_adaptive"] = {
            str(k): adaptive_top_scores(p, y, basis.groups, k, launch, folds, priors, scale=basis.scale,
                                        tol=opts.tuning_tolerance)
            for k in MEASURE_TOP}
        if basis.basis != "problem" and basis.problem_groups:
            # the few problem groups there are, for reference
            tuning.setdefault("problem_basis_models", {})[m] = tuning_scores(p, y, basis.problems,
                                                                             tol=opts.tuning_tolerance)
        shots[m], offset_shots[m] = {}, {}
        no_shape = {f: (a, b, None) for f, (a, b, _) in priors.items()}
        for k in opts.shots:
            pk, scored = few_shot(p, y, kernel_ids, k, opts.seed, folds, launch, priors)
            shots[m][str(k)] = row_metrics(np.where(scored, pk, np.nan), y, kernel_ids)
            # tuning after k shots: a measured configuration counts with its measured time
            known = np.where(scored, pk, np.where(np.isfinite(p) & (p > 0), y, np.nan))
            shots[m][str(k)]["tuning"] = tuning_scores(known / basis.scale, y / basis.scale, basis.groups,
                                                       tol=opts.tuning_tolerance)
            if k > 0 and disagree is not None:
                # the rows whose rounds disagreed (bimodal on the host) against those whose rounds agreed
                shots[m][str(k)]["by_rounds"] = {
                    name: row_metrics(np.where(scored & sel, pk, np.nan), y, kernel_ids)
                    for name, sel in (("agree", ~disagree), ("disagree", disagree))}
            if k > 0:
                po, so = few_shot(p, y, kernel_ids, k, opts.seed, folds, priors=no_shape)
                offset_shots[m][str(k)] = row_metrics(np.where(so, po, np.nan), y, kernel_ids)
            if k > 0 and priors and all(v[2] is not None for v in priors.values()):
                # the shots the model would ask for (models.fewshot.choose_shots) instead of random ones
                pd_, sd_ = few_shot(p, y, kernel_ids, k, opts.seed, folds, launch, priors, design=True)
                shots[m][str(k)]["designed"] = row_metrics(np.where(sd_, pd_, np.nan), y, kernel_ids)
                known = np.where(sd_, pd_, np.where(np.isfinite(p) & (p > 0), y, np.nan))
                shots[m][str(k)]["designed"]["tuning"] = tuning_scores(known / basis.scale, y / basis.scale,
                                                                       basis.groups, tol=opts.tuning_tolerance)
        floors[m] = row_metrics(offset_floor(p, y, kernel_ids), y, kernel_ids)
        intervals["models"][m], lo, hi = interval_figures(p, y, folds, opts.level, bins, opts.min_bin_rows)
        out[f"{m}_us"] = p
        out[f"{m}_lo_us"] = lo
        out[f"{m}_hi_us"] = hi

    lc = None
    if opts.learning_curve:
        tab = fitters["tabular"]
        lc = learning_curve(tab, oof["tabular"], y, kernel_ids, folds, opts.seed, say)

    from kernelcast.train.evaluate_energy import energy_rows, evaluate_energy

    energy = None
    if energy_rows(frame).any():
        energy = evaluate_energy(frame, profile, folds, models=models, seed=opts.seed, pcts=opts.energy_pcts,
                                 top_k=opts.energy_top_k, progress=say)

    fold_table = []
    for f in range(opts.folds):
        sel = folds == f
        fold_table.append({"fold": f, "rows": int(sel.sum()), "kernels": int(len(np.unique(kernel_ids[sel]))),
                           "groups": sum(1 for g in grouping.groups.values() if g.fold == f)})
    largest = max(grouping.groups.values(), key=lambda g: (g.rows, g.key))
    kinds: dict[str, int] = {}
    for g in grouping.groups.values():
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    result: dict[str, Any] = {
        "kind": KIND, "version": FORMAT_VERSION, "seed": opts.seed, "target": "time",
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(opts).items()},
        "models": models,
        "metrics": metrics,
        "tuning": tuning,
        "few_shot": {"shots": list(opts.shots), "models": shots, "offset_only": offset_shots, "offset_floor": floors,
                     "correction": "as predict corrects (models.fewshot.Offset): a per-kernel log offset shrunk by the "
                                   "prior strength and within-kernel variance of the other folds' residuals, and a "
                                   "shape correction over the configuration (Gaussian process over log2 work-items, "
                                   "log2 work-group size, log2 prediction) whose prior is fitted on the other folds' "
                                   "residuals; offset_only: the offset alone",
                     "note": "The shape correction can reorder a kernel's unmeasured configurations; the k-shot "
                             "tuning figures count a measured configuration with its measured time"},
        "intervals": intervals,
        "blend": {"criterion": opts.criterion, "inner_folds": opts.inner_folds, "folds": blends} if blends else None,
        "learning_curve": lc,
        "energy": energy,
        "training": {name: runs for name, ft in fitters.items() if isinstance(runs := getattr(ft, "runs", None), list)},
        "folds": fold_table,
        "groups": {
            "count": len(grouping.groups), "by_kind": kinds, "near_duplicate_threshold": opts.near_duplicate_threshold,
            "near_duplicate_merges": [{"a": a, "b": b, "jaccard": j} for a, b, j in grouping.near_duplicates],
            "largest": {"key": largest.key, "kernels": len(largest.kernels), "rows": largest.rows},
            "list": [asdict(g) for g in sorted(grouping.groups.values(), key=lambda g: (-g.rows, g.key))],
        },
        "rows": len(frame), "kernels": int(len(per_kernel)),
        "seconds": time.perf_counter() - t_start,
    }
    return Evaluation(result, out)


def _stacked_oof(fitters: Mapping[str, Fitter], oof: Mapping[str, np.ndarray], y: np.ndarray, kernel_ids: np.ndarray,
                 folds: np.ndarray, grouping: Grouping, opts: EvaluateOptions,
                 say: Progress) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """OOF predictions of the blend: for each outer fold, the blend is fitted on OOF predictions of
    the training rows from an inner grouped CV and applied to the outer OOF predictions of the fold."""
    out = np.full(len(y), np.nan)
    record = []
    for f in range(opts.folds):
        test, train = np.flatnonzero(folds == f), np.flatnonzero(folds != f)
        inner = _inner_folds(train, kernel_ids, grouping, opts.inner_folds, opts.seed + 1000 * (f + 1))
        if inner is None:
            first = next(iter(fitters))
            w = StackedBlend({first: 1.0}, 0.0, f"{first} (too few training groups for an inner fit)",
                             fallback=list(fitters))
        else:
            inner_oof = {m: np.full(len(train), np.nan) for m in fitters}
            for g in np.unique(inner):
                say(f"fold {f + 1}/{opts.folds}: blend, inner fold {g + 1}/{len(np.unique(inner))}")
                for m, ft in fitters.items():
                    inner_oof[m][inner == g] = ft.fit_predict(train[inner != g], train[inner == g])
            w = fit_stacked_blend(inner_oof, y[train], opts.criterion,
                                  [grouping.group_of[k] for k in kernel_ids[train]])
        out[test] = w.combine({m: oof[m][test] for m in fitters})
        record.append({"fold": f, **asdict(w)})
    return out, record


def learning_curve(fitter: Fitter, oof_all: np.ndarray, y: np.ndarray, kernel_ids: np.ndarray, folds: np.ndarray,
                   seed: int, say: Progress) -> dict[str, Any]:
    """Median APE (and MAPE, within 2x) of a model's OOF predictions when each fold trains on 10,
    20, 40... of its training kernels (chosen at random, seeded), and on all of them."""
    fold_ids = np.unique(folds)
    n_train = [len(np.unique(kernel_ids[folds != f])) for f in fold_ids]
    sizes = []
    n = 10
    while n < min(n_train):
        sizes.append(n)
        n *= 2
    points = []
    for n in sizes:
        pred = np.full(len(y), np.nan)
        for f in fold_ids:
            test, train_mask = np.flatnonzero(folds == f), folds != f
            ks = np.unique(kernel_ids[train_mask])
            chosen = np.random.default_rng([seed, n, int(f)]).choice(ks, size=n, replace=False)
            train = np.flatnonzero(train_mask & np.isin(kernel_ids, chosen))
            say(f"learning curve: {n} training kernels, fold {int(f) + 1}/{len(fold_ids)}")
            pred[test] = fitter.fit_predict(train, test)
        points.append(_curve_point(n, pred, y))
    points.append(_curve_point(float(np.mean(n_train)), oof_all, y, all_kernels=True))
    return {"model": fitter.name, "points": points}


def _curve_point(n: float, pred: np.ndarray, y: np.ndarray, all_kernels: bool = False) -> dict[str, Any]:
    return {"train_kernels": n, "all": all_kernels, "median_ape": median_ape(pred, y), "mape": mape(pred, y),
            "median_abs_log2": median_abs_log2(pred, y), "within_2x_pct": 100.0 * within_factor(pred, y)}

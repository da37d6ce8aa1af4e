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

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.dataset import ROUND_SPREAD, read_dataset, read_manifest, repeatability
from kernelcast.datagen.frame import DataError, load_measured_frames, prefix_keys
from kernelcast.models.blend import StackedBlend
from kernelcast.models.fewshot import (
    choose_shots,
    estimate_prior,
    fit_offset,
    fit_shape_prior,
    frame_launch_inputs,
    shape_inputs,
)
from kernelcast.train.blend import CRITERIA, fit_stacked_blend  # noqa: F401 - fit_stacked_blend re-exported
from kernelcast.train.evaluate_energy import energy_rows, evaluate_energy
from kernelcast.train.oof import (  # noqa: F401 - re-exported: the evaluation's groups, folds and fitters
    GROUP_BY,
    TARGET,
    AnalyticalFitter,
    CodegenFitter,
    DeviceProfiles,
    Fitter,
    Grouping,
    KernelGroup,
    SavedFitter,
    Splits,
    TabularFitter,
    TuningBasis,
    analytical_of,
    assign_folds,
    base_group,
    build_groups,
    devices_of,
    global_items,
    inner_folds,
    jaccard,
    kernel_table,
    make_splits,
    near_duplicate_pairs,
    on_device,
    oof_predictions,
    problem_keys,
    row_folds,
    row_metrics,
    tuning_basis,
)
from kernelcast.train.pairs import analytical_energy_pairs, pair_figures

from kernelcast.errors import UsageError
from kernelcast.metrics import (
    conformal_quantile,
    interval_coverage,
    log2_ratio,
    mape,
    measured_top_scores,
    median_abs_log2,
    median_ape,
    tuning_scores,
    within_factor,
)

log = logging.getLogger(__name__)

MODEL_NAMES = ("analytical", "tabular", "codegen", "blend", "saved")
DEFAULT_MODELS = ("analytical", "tabular", "blend")
KIND = "kernelcast-evaluation"
FORMAT_VERSION = 1
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
    group_by: str = "kernel"               # kernel | gpu | both: what a fold holds out
    saved_model: str | None = None         # a saved learned model scored as it is (model "saved")
    analysis_dirs: tuple[str, ...] = ()    # caches of the shared analyses of imported rows (kernelcast analyze)

    @property
    def scoring(self) -> bool:
        """No folds: the models that need no training (analytical, a saved model) score every row."""
        return self.folds == 0

    def __post_init__(self) -> None:
        if self.folds == 0:
            trained = [m for m in self.models if m not in ("analytical", "saved")]
            if trained:
                raise UsageError(f"--folds 0 scores models that need no training (analytical, --saved-model); "
                                 f"{trained[0]} is fitted per fold: give --folds 2 or more")
            if self.learning_curve:
                raise UsageError("--learning-curve needs folds")
        elif self.folds < 2:
            raise UsageError(f"--folds must be 0 (no folds: score) or at least 2, got {self.folds}")
        if self.group_by not in GROUP_BY:
            raise UsageError(f"--group-by must be one of {', '.join(GROUP_BY)}, got {self.group_by!r}")
        if ("saved" in self.models) != (self.saved_model is not None):
            raise UsageError("--saved-model DIR and the model 'saved' go together")
        if self.inner_folds < 2:
            raise UsageError(f"--inner-folds must be at least 2, got {self.inner_folds}")
        unknown = [m for m in self.models if m not in MODEL_NAMES]
        if unknown:
            raise UsageError(f"unknown model {unknown[0]!r} (choose from {', '.join(MODEL_NAMES)})")
        if not self.models:
            raise UsageError("no model to evaluate")
        if self.models == ("blend",) or (self.scoring and "blend" in self.models):
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
        if self.learning_curve and self.group_by != "kernel":
            raise UsageError("--learning-curve is drawn over kernel-grouped folds (--group-by kernel)")
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


def _stable_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")


def few_shot(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray, k: int,
             seed: int = 0, folds: np.ndarray | None = None, launch: np.ndarray | None = None,
             priors: Mapping[int, tuple[float, float | None, Any]] | None = None,
             design: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Few-shot updating (:mod:`models.fewshot`): for each kernel (``kernels``: the problem of each
    row; :func:`evaluate_frame` passes a kernel on one device when the rows span devices), ``k`` of
    its rows chosen at random (seeded by ``seed`` and the kernel, the same rows for every model that
    predicts them; the shots of k are among those of any larger k) are "measured", and the
    correction they give scales the kernel's other rows. With ``folds`` the correction is the one
    ``predict`` applies: the offset's prior strength and the pooled within-kernel variance are estimated
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


def _make_fitters(models: Sequence[str], profile: DeviceProfile | DeviceProfiles,
                  opts: EvaluateOptions) -> dict[str, Fitter]:
    profiles = DeviceProfiles.of(profile)
    out: dict[str, Fitter] = {}
    for m in models:
        if m == "analytical":
            out[m] = AnalyticalFitter(profiles.single() or profiles, opts.analysis_dirs)
        elif m == "tabular":
            out[m] = TabularFitter(profiles.single() or profiles, opts.seed, opts.analysis_dirs)
        elif m == "codegen":
            single = profiles.single()
            if single is None:
                raise UsageError("the codegen model is evaluated on the datasets of one device")
            out[m] = CodegenFitter(single, opts.seed, opts.codegen_epochs, opts.codegen_base, opts.codegen_minutes)
        elif m == "saved":
            assert opts.saved_model is not None
            out[m] = SavedFitter(opts.saved_model, profiles.single() or profiles, opts.analysis_dirs)
    return out


def check_profile_for_dataset(profile: DeviceProfile | DeviceProfiles, root: Path) -> None:
    """A profile of another device type (GPU / CPU) than the device the dataset was measured on
    (its manifest's ``device.type``) is refused with one line
    (:class:`~calib.profile.ProfileDeviceMismatch`); a dataset without a manifest or a device
    type passes (with several profiles, the one of the dataset's device when it is named there)."""
    try:
        man = read_manifest(root)
    except (OSError, ValueError):
        return
    dev = man.get("device") or {}
    if not isinstance(dev, dict):
        return
    if isinstance(profile, DeviceProfiles):
        try:
            profile = profile.for_device(str(man.get("device_identity") or dev.get("name") or ""))
        except KeyError:
            return
    profile.check_device_type(str(dev.get("type") or ""), f"the device of dataset {root} "
                                                         f"({dev.get('name') or '?'})")


def evaluate_dataset(dataset_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                     profile: DeviceProfile | DeviceProfiles, options: EvaluateOptions, *,
                     profile_spec: str | None = None, progress: Progress | None = None) -> Evaluation:
    """Load a dataset (or several, evaluated as one: see
    :func:`~datagen.frame.load_measured_frames`; datasets of several devices when each device has
    its profile in ``profile``, a :class:`~train.oof.DeviceProfiles`) and evaluate ``options.models``
    on it (see the module docstring). :class:`~kernelcast.errors.InputError` for a dataset that
    cannot be used."""
    roots = [Path(dataset_dir)] if isinstance(dataset_dir, (str, os.PathLike)) else [Path(d) for d in dataset_dir]
    profiles = DeviceProfiles.of(profile)
    for root in roots:
        check_profile_for_dataset(profiles.single() or profiles, root)
    # each dataset's own analysis cache (kernelcast analyze's default) after the ones given
    own = tuple(str(r / "analysis") for r in roots if (r / "analysis").is_dir())
    options = replace(options, analysis_dirs=tuple(dict.fromkeys((*options.analysis_dirs, *own))))
    several = profiles.single() is None or options.group_by != "kernel"
    frame, counts = load_measured_frames(roots, several_devices=several)
    y = frame[TARGET].to_numpy(dtype=np.float64)
    keep = np.isfinite(y) & (y > 0)
    counts["rows_without_time"] = int((~keep).sum())
    frame = frame[keep].reset_index(drop=True)
    if frame.empty:
        raise DataError(f"{' + '.join(map(str, roots))}: no row has a measured time")
    if profiles.single() is None:
        missing = sorted({d for d in devices_of(frame) if not _has_profile(profiles, d)})
        if missing:
            raise UsageError(f"no profile for device {missing[0]!r}: give --profile {missing[0]}=PROFILE "
                             f"(or one --profile for every device)")
    counts["rows_used"] = len(frame)
    fitters = _make_fitters(options.models, profiles, options)   # before anything slow: a missing model is an error
    ev = evaluate_frame(frame, profiles.single() or profiles, options, fitters=fitters, progress=progress)
    if options.repeats > 1 and not options.scoring:
        runs = [ev.metrics]
        for r in range(1, options.repeats):
            say = progress or (lambda msg: log.info("%s", msg))
            say(f"repeat {r + 1}/{options.repeats}: fold seed {options.seed + r}")
            o = replace(options, seed=options.seed + r, learning_curve=False)
            runs.append(evaluate_frame(frame, profiles.single() or profiles, o,
                                       fitters=_make_fitters(o.models, profiles, o), progress=progress).metrics)
        ev.metrics["repeats"] = repeat_spread(runs)
    ev.metrics["dataset"] = _identity_of_datasets(roots, frame, counts)
    raw = [read_dataset(r, resolve=False) for r in roots]
    if len(raw) > 1:
        raw = [prefix_keys(df, f"{i}:") for i, df in enumerate(raw)]
    ev.metrics["dataset"]["repeatability"] = repeatability(pd.concat(raw, ignore_index=True, sort=False))
    single = profiles.single()
    ev.metrics["profile"] = (_identity_of_profile(single, profile_spec) if single is not None else
                             {d: _identity_of_profile(p, None) for d, p in sorted(profiles.by_device.items())})
    return ev


def _has_profile(profiles: DeviceProfiles, device: str) -> bool:
    try:
        profiles.for_device(device)
    except KeyError:
        return False
    return True


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


def evaluate_frame(frame: pd.DataFrame, profile: DeviceProfile | DeviceProfiles, options: EvaluateOptions, *,
                   fitters: dict[str, Fitter] | None = None, progress: Progress | None = None) -> Evaluation:
    """Evaluate on the rows of ``frame`` (dataset columns with ``source`` and a positive measured time)."""
    say = progress or (lambda msg: log.info("%s", msg))
    opts = options
    t_start = time.perf_counter()
    kernel_ids = frame["kernel_id"].astype(str).to_numpy()
    y = frame[TARGET].to_numpy(dtype=np.float64)
    per_kernel = kernel_table(frame)
    grouping = build_groups(per_kernel, opts.near_duplicate_threshold)
    devices = devices_of(frame)
    if opts.scoring:
        splits = Splits("none", np.zeros(len(frame), dtype=int), 1, np.zeros(len(frame), dtype=int),
                        np.zeros(len(frame), dtype=int), ["all rows"])
    else:
        splits = make_splits(frame, grouping, opts.folds, opts.seed, opts.group_by)
    folds = splits.folds
    n_dev = len(pd.unique(devices))
    # few-shot problems: a kernel on one device (its shots are measured there, and its offset is
    # that device's); a kernel measured on several devices is as many problems
    shot_ids = on_device(kernel_ids, devices, "{k}@{d}")
    say(f"{len(frame)} rows of {len(per_kernel)} kernels in {len(grouping.groups)} kernel groups "
        f"({len(grouping.near_duplicates)} near-duplicate merge(s))" + (f" on {n_dev} devices" if n_dev > 1 else "")
        + (", scored without folds" if opts.scoring else
           f", {splits.n} folds" + (f" by {opts.group_by}" if opts.group_by != "kernel" else "")))

    fitters = fitters if fitters is not None else _make_fitters(opts.models, profile, opts)
    seconds: dict[str, float] = {}
    for name, ft in fitters.items():
        t0 = time.perf_counter()
        say(f"preparing {name}")
        ft.prepare(frame)
        seconds[name] = time.perf_counter() - t0
    oof = oof_predictions(fitters, splits, say, seconds)
    blends: list[dict[str, Any]] = []
    if "blend" in opts.models:
        t0 = time.perf_counter()
        oof["blend"], blends = _stacked_oof(fitters, oof, y, kernel_ids, splits, grouping, opts, say)
        seconds["blend"] = time.perf_counter() - t0
    models = [m for m in opts.models if m in oof]

    an = analytical_of(fitters, profile, frame, opts.analysis_dirs)
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
    shot_preds: dict[str, dict[str, np.ndarray]] = {}
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
                                  for f in range(splits.n)] if not opts.scoring else []
        metrics[m]["seconds"] = seconds.get(m)
        tuning["models"][m] = tuning_scores(p / basis.scale, y / basis.scale, basis.groups,
                                            tol=opts.tuning_tolerance)
        tuning["models"][m]["measure_top"] = {
            str(k): measured_top_scores(p / basis.scale, y / basis.scale, basis.groups, k, tol=opts.tuning_tolerance)
            for k in MEASURE_TOP}
        # without folds there is no other fold to estimate priors on: plain offsets
        priors = fold_priors(p, y, shot_ids, folds, launch, opts.seed) if not opts.scoring else {}
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
            pk, scored = few_shot(p, y, shot_ids, k, opts.seed, None if opts.scoring else folds, launch, priors)
            shot_preds.setdefault(m, {})[str(k)] = np.where(scored, pk, np.nan)
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
                po, so = few_shot(p, y, shot_ids, k, opts.seed, None if opts.scoring else folds, priors=no_shape)
                offset_shots[m][str(k)] = row_metrics(np.where(so, po, np.nan), y, kernel_ids)
            if k > 0 and priors and all(v[2] is not None for v in priors.values()):
                # the shots the model would ask for (models.fewshot.choose_shots) instead of random ones
                pd_, sd_ = few_shot(p, y, shot_ids, k, opts.seed, folds, launch, priors, design=True)
                shots[m][str(k)]["designed"] = row_metrics(np.where(sd_, pd_, np.nan), y, kernel_ids)
                known = np.where(sd_, pd_, np.where(np.isfinite(p) & (p > 0), y, np.nan))
                shots[m][str(k)]["designed"]["tuning"] = tuning_scores(known / basis.scale, y / basis.scale,
                                                                       basis.groups, tol=opts.tuning_tolerance)
        floors[m] = row_metrics(offset_floor(p, y, shot_ids), y, kernel_ids)
        if opts.scoring:         # intervals are calibrated on other folds' residuals: none without folds
            intervals["models"][m], lo, hi = None, np.full(len(p), np.nan), np.full(len(p), np.nan)
        else:
            intervals["models"][m], lo, hi = interval_figures(p, y, folds, opts.level, bins, opts.min_bin_rows)
        out[f"{m}_us"] = p
        out[f"{m}_lo_us"] = lo
        out[f"{m}_hi_us"] = hi

    lc = None
    if opts.learning_curve:
        tab = fitters["tabular"]
        lc = learning_curve(tab, oof["tabular"], y, kernel_ids, folds, opts.seed, say)


    energy = None
    if energy_rows(frame).any():
        energy = evaluate_energy(frame, profile, folds, models=[m for m in models if m in ("analytical", "tabular")],
                                 seed=opts.seed, pcts=() if opts.scoring else opts.energy_pcts, splits=splits,
                                 analytical_energy=an.energy, analytical_time_us=an.pred,
                                 analytical_pcts=opts.energy_pcts,
                                 analysis_dirs=list(opts.analysis_dirs),
                                 top_k=opts.energy_top_k, progress=say)

    fold_table = []
    for f in range(splits.n):
        sel = folds == f
        fold_table.append({"fold": f, "rows": int(sel.sum()), "kernels": int(len(np.unique(kernel_ids[sel]))),
                           "groups": sum(1 for g in grouping.groups.values() if g.fold == f)})
        if splits.by in ("gpu", "both"):
            fold_table[-1].update(holds_out=splits.labels[f], training_rows=int(len(splits.train(f))))
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
        "splits": {"by": "none (scored without folds)" if opts.scoring else splits.by, "folds": splits.n,
                   "devices": sorted(str(d) for d in pd.unique(devices))},
        "pairs": pair_figures(frame, oof, models, y, grouping, devices, opts, an=an, shots=shot_preds,
                              energy=analytical_energy_pairs(frame, an, devices, grouping, opts.energy_top_k)),
        "seconds": time.perf_counter() - t_start,
    }
    out["device"] = devices
    return Evaluation(result, out)


def _stacked_oof(fitters: Mapping[str, Fitter], oof: Mapping[str, np.ndarray], y: np.ndarray, kernel_ids: np.ndarray,
                 splits: Splits, grouping: Grouping, opts: EvaluateOptions,
                 say: Progress) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """OOF predictions of the blend: for each outer fold, the blend is fitted on OOF predictions of
    the training rows from an inner grouped CV and applied to the outer OOF predictions of the fold."""
    out = np.full(len(y), np.nan)
    record = []
    for f in range(splits.n):
        test, train = splits.test(f), splits.train(f)
        if not len(test) or not len(train):
            continue
        inner = inner_folds(train, kernel_ids, grouping, opts.inner_folds, opts.seed + 1000 * (f + 1))
        if inner is None:
            first = next(iter(fitters))
            w = StackedBlend({first: 1.0}, 0.0, f"{first} (too few training groups for an inner fit)",
                             fallback=list(fitters))
        else:
            inner_oof = {m: np.full(len(train), np.nan) for m in fitters}
            for g in np.unique(inner):
                say(f"fold {f + 1}/{splits.n}: blend, inner fold {g + 1}/{len(np.unique(inner))}")
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

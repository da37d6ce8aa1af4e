"""Fitting the tabular model (``kernelcast train --kind tabular``): LightGBM on :func:`models.tabular.build_table`.

Each head (time, energy) gets a *residual* booster on ``log2(measured / analytical)`` (rows with an
analytical value) and a *direct* booster on ``log2(measured)`` (every row; it predicts the rows the
analytical model cannot). The loss is squared error in log2 space. The energy head weights rows by
Zhang et al.'s ``1 / E_measured`` (sample weights normalised to mean 1 and clipped to
[:data:`MIN_WEIGHT`, :data:`MAX_WEIGHT`] so that a few tiny kernels cannot carry the whole fit).
Zhang et al. weight a squared error in joules, ``(E_p - E_m)^2 / E_m``, to favour low-energy
kernels; here the error is already relative (log2), so the same weights favour them more strongly
than in their paper, hence the clipping.

Defaults (:data:`DEFAULT_PARAMS`, :data:`DEFAULT_ROUNDS`) are generic settings for a few thousand
rows (31 leaves, at least 20 rows per leaf, learning rate 0.1 for 100 rounds, feature and row
bagging, one thread, deterministic for a seed); fitting takes about a second per thousand rows. Few
trees keep prediction fast (the booster's cost grows with the number of trees).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from calib.profile import DeviceProfile
from datagen.frame import DataError
from models.tabular import (
    BASES,
    CATEGORICAL_COLUMNS,
    FEATURE_COLUMNS,
    TARGETS,
    TabularHead,
    TabularPredictor,
    build_table,
    is_tabular_dir,
)

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
#: 100 rounds at learning rate 0.1 with 31 leaves: as accurate in grouped 5-fold CV on a PoCL dataset
#: (two fold seeds) as 300 rounds at 0.05 with 15 leaves, and three times faster to fit and to predict
DEFAULT_ROUNDS = 100
MIN_WEIGHT, MAX_WEIGHT = 0.1, 10.0
#: fewest rows with a valid target a head is fitted on
MIN_ROWS = 2


def _weights(y: np.ndarray) -> np.ndarray:
    w = 1.0 / y
    w = w / w.mean()
    w = np.clip(w, MIN_WEIGHT, MAX_WEIGHT)
    return w / w.mean()


def _fit_booster(x: np.ndarray, y: np.ndarray, w: np.ndarray | None, features: list[str], params: dict[str, Any],
                 rounds: int) -> Any:
    import lightgbm as lgb

    cats = [c for c in CATEGORICAL_COLUMNS if c in features]
    ds = lgb.Dataset(x, label=y, weight=w, feature_name=features, categorical_feature=cats or "auto",
                     free_raw_data=True, params={"verbose": -1})
    return lgb.train(params, ds, num_boost_round=rounds)


def _log2_summary(r: np.ndarray) -> dict[str, float]:
    a = np.abs(r)
    return {"median_abs_log2": float(np.median(a)), "mean_log2": float(np.mean(r)),
            "within_2x": float(np.mean(a <= 1.0))}


def fit_tabular(table: pd.DataFrame, profile: DeviceProfile, *, target: Target = "time", seed: int = 0,
                params: dict[str, Any] | None = None) -> TabularPredictor:
    """Fit the heads of ``target`` on a :func:`build_table` table (module docstring).

    ``params`` override :data:`DEFAULT_PARAMS` (LightGBM names); ``num_boost_round`` among them sets
    the rounds (default :data:`DEFAULT_ROUNDS`). :class:`DataError` when the table has no usable
    rows for a head asked for (e.g. ``energy`` without measured energy)."""
    if target not in ("time", "energy", "both"):
        raise ValueError(f"target must be time, energy or both, not {target!r}")
    p = {**DEFAULT_PARAMS, **(params or {})}
    rounds = int(p.pop("num_boost_round", p.pop("num_iterations", DEFAULT_ROUNDS)))
    p["seed"] = seed
    missing = [c for c in FEATURE_COLUMNS if c not in table.columns]
    if missing:
        raise DataError(f"the table lacks feature column(s) {missing[:3]}: build it with models.tabular.build_table")
    features = list(FEATURE_COLUMNS)
    x_all = table[features].to_numpy(dtype=np.float64)
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
        head = TabularHead(t, BASES[t])
        summary: dict[str, Any] = {"rows": int(ok.sum()), "rows_with_analytical": int(has_base.sum()),
                                   "rounds": rounds, "weighting": "1/E (Zhang et al.)" if t == "energy" else "none"}
        if kernels is not None:
            summary["kernels"] = int(pd.Series(kernels[ok]).nunique())
        if has_base.sum() >= MIN_ROWS:
            r = np.log2(y[has_base] / base[has_base])
            w = _weights(y[has_base]) if t == "energy" else None
            head.residual = _fit_booster(x_all[has_base], r, w, features, p, rounds)
            fitted = head.residual.predict(x_all[has_base])
            summary["analytical_in_sample"] = _log2_summary(r)
            summary["residual_in_sample"] = _log2_summary(r - fitted)
        head.direct = _fit_booster(x_all[ok], np.log2(y[ok]), w_all, features, p, rounds)
        summary["seconds"] = time.perf_counter() - th
        head.summary = summary
        heads[t] = head
    import lightgbm as lgb

    summary_all = {"target": target, "seed": seed, "rows": len(table), "features": len(features),
                   "params": {**p, "num_boost_round": rounds}, "lightgbm": lgb.__version__,
                   "profile_device": profile.device.name, "seconds": time.perf_counter() - t0}
    if kernels is not None:
        summary_all["kernels"] = int(pd.Series(kernels).nunique())
    return TabularPredictor(heads, features, profile, summary_all)


def train_tabular(dataset_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], profile: DeviceProfile, *,
                  target: Target = "time", seed: int = 0, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load a dataset (``datagen.frame.load_measured_frame``), build its table, fit, save the model
    in ``out_dir`` and return a summary (also what ``kernelcast train --kind tabular --json`` prints).
    Nothing is written when loading or fitting fails."""
    from datagen.frame import load_measured_frame

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
    model.summary["data"] = {"dataset": str(dataset_dir), **counts, "rows": len(frame),
                             "kernels": int(frame["kernel_id"].nunique()) if "kernel_id" in frame.columns else None,
                             "rows_static_failed": int((table["k_static_ok"] == 0).sum())}
    model.save(out)
    return {"kind": "tabular", "out_dir": str(out), "data": model.summary["data"],
            "targets": model.targets, "features": len(model.features),
            "heads": {t: h.summary for t, h in model.heads.items()},
            "seconds": {"load": t1 - t0, "table": t2 - t1, "fit": t3 - t2, "total": time.perf_counter() - t0},
            "profile": profile.device.name}

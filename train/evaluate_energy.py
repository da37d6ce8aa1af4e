"""Energy figures of ``kernelcast evaluate``: how well the models order the configurations of a kernel
by measured energy (FlipFlop's yardstick: Spearman's rho across the configurations of a kernel, and
the share of the measured top-20 energy-efficient configurations found in the predicted top-20).

Rows: those of the evaluation that carry a measured energy (``energy_j`` > 0: datagen with a meter,
or a Kernel Tuner cache with NVML / PowerSensor energy imported by ``dataset import-kt``). Groups:
the configurations of one problem (:func:`train.evaluate.problem_keys`: a Kernel Tuner cache is one
problem). Per group :func:`kernelcast.metrics.ranking_scores` (``k = min(top_k, rows // 2)``).

* **zero-shot, analytical**: the analytical energy model of the profile (NaN without an energy
  calibration: the figures say so).
* **zero-shot, tabular**: the tabular model's energy head fitted, for each fold of the evaluation,
  on the energy rows of the other folds (kernel-disjoint) and predicting the fold.
* **few-shot, tabular** (``pcts``): for each problem, ``pct`` % of its configurations (at least one,
  chosen at random, seeded) are "measured"; the energy head is fitted on the other folds' rows plus
  the measured configurations of the fold's problems and scored on the fold's other configurations
  (the measured ones are left out of the scores). With a single problem (one cache) that is fitting
  on ``pct`` % of the cache and predicting the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.frame import DataError
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.train.oof import DeviceProfiles, Splits, device_tables, problem_keys
from kernelcast.train.tabular import fit_tabular

from kernelcast.metrics import ranking_scores

log = logging.getLogger(__name__)

ENERGY = "energy_j"
TOP_K = 20
DEFAULT_PCTS = (10, 25)
#: fewest energy rows for which the figures are computed
MIN_ENERGY_ROWS = 3


def energy_rows(frame: pd.DataFrame) -> np.ndarray:
    """Mask of the rows with a measured energy."""
    if ENERGY not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    e = pd.to_numeric(frame[ENERGY], errors="coerce").to_numpy(dtype=np.float64)
    return np.isfinite(e) & (e > 0)


def shot_mask(groups: np.ndarray, pct: float, seed: int) -> np.ndarray:
    """``pct`` % of the rows of every group (rounded, at least one, never all but when the group has
    one row), chosen at random for a seed, the group and the percentage."""
    import hashlib

    out = np.zeros(len(groups), dtype=bool)
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        m = min(len(idx) - 1 if len(idx) > 1 else 1, max(1, int(round(pct / 100.0 * len(idx)))))
        h = int.from_bytes(hashlib.sha256(f"{seed}:{pct}:{g}".encode()).digest()[:8], "little")
        out[np.random.default_rng(h).choice(idx, size=m, replace=False)] = True
    return out


def evaluate_energy(frame: pd.DataFrame, profile: DeviceProfile | DeviceProfiles, folds: np.ndarray, *,
                    models: Sequence[str], seed: int = 0, pcts: Sequence[float] = DEFAULT_PCTS, top_k: int = TOP_K,
                    progress: Callable[[str], None] | None = None, splits: Splits | None = None,
                    analytical_energy: np.ndarray | None = None, analytical_time_us: np.ndarray | None = None,
                    analysis_dirs: Sequence[str] = (),
                    analytical_pcts: Sequence[float] | None = None) -> dict[str, Any]:
    """The energy figures (module docstring) of the rows of ``frame`` (the evaluation's rows, with
    ``folds`` its row folds; with ``splits``, each fold is fitted on the rows its split trains on;
    ``analytical_energy``: the analytical model's energy of every row of ``frame``, when already
    predicted; ``analytical_time_us``: its time; ``analysis_dirs``: the shared static analyses;
    ``analytical_pcts``: the shares measured for the analytical few-shot correction, default ``pcts``)."""
    profiles = DeviceProfiles.of(profile)
    say = progress or (lambda msg: log.info("%s", msg))
    has = energy_rows(frame)
    out: dict[str, Any] = {"rows": int(has.sum()), "top_k": top_k, "grouping": "configurations of one problem",
                           "zero_shot": {}, "few_shot": {"pcts": list(pcts), "models": {}}, "notes": []}
    if has.sum() < MIN_ENERGY_ROWS:
        out["notes"].append(f"{int(has.sum())} row(s) carry a measured energy: no energy figures")
        return out
    fe = frame[has].reset_index(drop=True)
    y = pd.to_numeric(fe[ENERGY], errors="coerce").to_numpy(dtype=np.float64)
    fo = np.asarray(folds)[has]
    pos = np.flatnonzero(has)
    rank = np.full(len(frame), -1)
    rank[pos] = np.arange(len(pos))

    def train_rows(f: int) -> np.ndarray:
        """The energy rows (positions in ``fe``) a fold is fitted on."""
        if splits is None:
            return np.flatnonzero(fo != f)
        r = rank[splits.train(f)]
        return r[r >= 0]

    groups = problem_keys(fe)
    out["problems"] = int(len(np.unique(groups)))
    out["meters"] = sorted(str(m) for m in fe["meter"].dropna().unique()) if "meter" in fe.columns else []

    if "analytical" in models:
        if analytical_energy is not None:
            e = np.asarray(analytical_energy, dtype=np.float64)[has]
        else:
            e = np.full(len(fe), np.nan)
            for prof, idx in profiles.row_blocks(fe):
                model = AnalyticalModel(prof, analysis_dirs=analysis_dirs)
                e[idx] = np.asarray(model.predict(fe.iloc[idx].reset_index(drop=True)).energy_j, dtype=np.float64)
        if np.isfinite(e).any():
            out["zero_shot"]["analytical"] = {**ranking_scores(e, y, groups, top_k=top_k), **error_figures(e, y)}
            tm = measured_time_s(fe)
            variants: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
            split = split_energy(fe, profiles, analysis_dirs, at_measured_time=False)
            if np.isfinite(split[1]).any():
                variants["analytical"] = split
            if np.isfinite(tm).any():
                split_m = split_energy(fe, profiles, analysis_dirs, at_measured_time=True)
                if np.isfinite(split_m[1]).any():
                    # the model's power terms over the measured time (a tuner with a clock but no meter)
                    em = split_m[1] * split_m[0] + split_m[2]
                    out["zero_shot"]["analytical, measured time"] = {**ranking_scores(em, y, groups, top_k=top_k),
                                                                     **error_figures(em, y)}
                    variants["analytical, measured time"] = split_m
            few_a: dict[str, Any] = {}
            for pct in (pcts if analytical_pcts is None else analytical_pcts):
                shots = shot_mask(groups, pct, seed)
                for label, (t, sw, dj) in variants.items():
                    pred, lo, hi = few_shot_energy(t, sw, dj, y, groups, shots)
                    test = ~shots
                    sc = ranking_scores(np.where(test, pred, np.nan), y, groups, top_k=top_k)
                    sc.update(error_figures(pred[test], y[test]))
                    inside = (y >= lo) & (y <= hi) & test & np.isfinite(lo)
                    n_int = int((test & np.isfinite(lo)).sum())
                    sc["interval_cover_pct"] = 100.0 * inside.sum() / n_int if n_int else float("nan")
                    sc["measured_rows"] = int(shots.sum())
                    few_a.setdefault(label, {})[f"{pct:g}"] = sc
            out["few_shot"]["models"].update(few_a)
        else:
            out["notes"].append(f"analytical: the profile ({profiles.describe()}) has no energy values "
                                "(and, for a GPU, no TDP)")
        # the baselines: ranking by time alone, measured and predicted
        tm0 = measured_time_s(fe)
        base: dict[str, Any] = {}
        if np.isfinite(tm0).any():
            base["measured time"] = ranking_scores(tm0, y, groups, top_k=top_k)
        if analytical_time_us is not None:
            tp = np.asarray(analytical_time_us, dtype=np.float64)[has]
            if np.isfinite(tp).any():
                base["predicted time (analytical)"] = ranking_scores(tp, y, groups, top_k=top_k)
        if base:
            out["baselines"] = base
    if "tabular" in models:
        tprofile = profiles.default or next(iter(profiles.by_device.values()))
        table = device_tables(fe, profiles)
        oof = np.full(len(fe), np.nan)
        for f in np.unique(fo):
            test, train = np.flatnonzero(fo == f), train_rows(int(f))
            if len(train) < 2:
                continue
            say(f"energy: fold {int(f) + 1}: tabular energy head ({len(train)} training rows, {len(test)} test rows)")
            oof[test] = _fit_predict(table, train, test, tprofile, seed)
        if np.isfinite(oof).any():
            out["zero_shot"]["tabular"] = ranking_scores(oof, y, groups, top_k=top_k)
        else:
            out["notes"].append("tabular zero-shot: the energy rows are all in one kernel group (one fold): no "
                                "held-out kernel to score")
        few: dict[str, Any] = {}
        for pct in pcts:
            shots = shot_mask(groups, pct, seed)
            pred = np.full(len(fe), np.nan)
            for f in np.unique(fo):
                test = np.flatnonzero((fo == f) & ~shots)
                train = np.union1d(train_rows(int(f)), np.flatnonzero((fo == f) & shots))
                if len(test) == 0 or len(train) < 2:
                    continue
                say(f"energy: {pct:g} % measured, fold {int(f) + 1}: tabular energy head ({len(train)} training rows)")
                pred[test] = _fit_predict(table, train, test, tprofile, seed)
            scores = ranking_scores(pred, y, groups, top_k=top_k)
            scores["measured_rows"] = int(shots.sum())
            few[f"{pct:g}"] = scores
        out["few_shot"]["models"]["tabular"] = few
    return out


def split_energy(frame: pd.DataFrame, profiles: DeviceProfiles, analysis_dirs: Sequence[str] = (), *,
                 at_measured_time: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The analytical energy of each row split as the GPU energy model's terms: (time s, static
    power W, dynamic energy J); NaN where the model gives no terms (no GPU energy constants).
    ``at_measured_time``: the energy at the row's measured time (:class:`AnalyticalModel`)."""
    n = len(frame)
    t, sw, dj = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for prof, idx in profiles.row_blocks(frame):
        model = AnalyticalModel(prof, analysis_dirs=analysis_dirs, at_measured_time=at_measured_time)
        p = model.predict(frame.iloc[idx].reset_index(drop=True))
        for j, i in enumerate(idx):
            terms = p.explanation[j].get("energy_parts_j")
            ts = float(p.time_us[j]) * 1e-6
            if terms and np.isfinite(ts) and ts > 0:
                t[i], sw[i] = ts, float(terms.get("static", 0.0)) / ts
                dj[i] = float(sum(v for k, v in terms.items() if k != "static"))
    return t, sw, dj


def measured_time_s(frame: pd.DataFrame) -> np.ndarray:
    """Each row's measured time (s): the median, else the mean; NaN where none."""
    out = np.full(len(frame), np.nan)
    for col in ("time_mean_us", "time_median_us"):
        if col in frame.columns:
            v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=np.float64) * 1e-6
            out = np.where(np.isfinite(out), out, v)
    return out


def error_figures(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """MAPE and median APE (%) of predicted energies where both sides are finite and positive."""
    pred, true = np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    if not ok.any():
        return {"mape": float("nan"), "median_ape": float("nan")}
    ape = 100.0 * np.abs(pred[ok] / true[ok] - 1.0)
    return {"mape": float(ape.mean()), "median_ape": float(np.median(ape))}


#: z of the two-sided 90 % interval of the few-shot energy correction
Z90 = 1.6449
#: log-space spread assumed for the interval when fewer than three shots leave no estimate of it
DEFAULT_LOG_SD = 0.5


#: the prior on the model's own split (static vs dynamic energy): each scale is 1 +- SPLIT_PRIOR_SD,
#: against shots whose relative error scatters by SHOT_NOISE (a measured energy's repeatability)
SPLIT_PRIOR_SD = 1.0
SHOT_NOISE = 0.05


def few_shot_energy(time_s: np.ndarray, static_w: np.ndarray, dynamic_j: np.ndarray, measured_j: np.ndarray,
                    groups: np.ndarray, shots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The analytical energy corrected by a kernel's own measured configurations (``shots``), per
    group. The model's energy is ``S + D``: static ``S = P_static T`` (``T`` the time, predicted or
    measured; the static power follows the clock) and dynamic ``D``. The corrected energy is
    ``k (a S + b D)``: ``k`` the shots' geometric-mean ratio to ``S + D``, and with two shots or
    more ``a, b >= 0`` the least-squares fit of the shots in relative error (noise
    :data:`SHOT_NOISE`) with a prior ``1 +- SPLIT_PRIOR_SD`` on each (the model's own split), which
    decides only what the shots leave undetermined. The 90 % interval is
    ``E exp(+-1.645 s)``, ``s`` the shots' log-residual spread (three shots or more, else
    :data:`DEFAULT_LOG_SD`). Returns (prediction, low, high); the shots are predicted by their
    measurement."""
    from scipy.optimize import nnls

    n = len(measured_j)
    pred, lo, hi = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    t, p, d, y = (np.asarray(x, dtype=np.float64) for x in (time_s, static_w, dynamic_j, measured_j))
    st = p * t
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        s = idx[shots[idx] & np.isfinite(st[idx]) & np.isfinite(d[idx]) & (y[idx] > 0)]
        if len(s) == 0:
            continue
        k = float(np.exp(np.mean(np.log(y[s] / np.maximum(st[s] + d[s], 1e-30)))))
        a = b = 1.0
        if len(s) >= 2:
            lam = SHOT_NOISE / SPLIT_PRIOR_SD
            m = np.vstack([np.c_[k * st[s] / y[s], k * d[s] / y[s]], [[lam, 0.0], [0.0, lam]]])
            coef, _ = nnls(m, np.r_[np.ones(len(s)), lam, lam])
            if coef.sum() > 0:
                a, b = float(coef[0]), float(coef[1])
        e = k * (a * st[idx] + b * d[idx])
        fit_s = k * (a * st[s] + b * d[s])
        res = np.log(y[s] / np.maximum(fit_s, 1e-30))
        sd = max(float(np.std(res, ddof=1)) if len(s) >= 3 else DEFAULT_LOG_SD, 1e-3)
        pred[idx], lo[idx], hi[idx] = e, e * np.exp(-Z90 * sd), e * np.exp(Z90 * sd)
        pred[s], lo[s], hi[s] = y[s], y[s], y[s]
    return pred, lo, hi


def _fit_predict(table: pd.DataFrame, train: np.ndarray, test: np.ndarray, profile: DeviceProfile,
                 seed: int) -> np.ndarray:
    try:
        model = fit_tabular(table.iloc[train].reset_index(drop=True), profile, target="energy", seed=seed)
    except DataError as e:
        log.info("energy head not fitted: %s", e)
        return np.full(len(test), np.nan)
    p = model.predict_table(table.iloc[test].reset_index(drop=True))
    return np.asarray(p.energy_j, dtype=np.float64)


def energy_lines(m: dict[str, Any] | None) -> list[str]:
    """The energy part of ``kernelcast evaluate``'s summary."""
    if not m:
        return []
    if not m.get("zero_shot") and not m.get("few_shot", {}).get("models") and not m.get("baselines"):
        return [f"energy: {'; '.join(m.get('notes') or ['no measured energy'])}"]

    def fig(s: dict[str, Any]) -> str:
        err = ""
        if "median_ape" in s and s["median_ape"] == s["median_ape"]:
            err = f"; energy MAPE {s['mape']:.1f} %, median APE {s['median_ape']:.1f} %"
        if "interval_cover_pct" in s and s["interval_cover_pct"] == s["interval_cover_pct"]:
            err += f", 90 % interval covers {s['interval_cover_pct']:.0f} %"
        return rank(s) + err

    def rank(s: dict[str, Any]) -> str:
        rho = s["spearman_mean"]
        share = s["top_k_share_pct"]
        k = s["k_min"] if s["k_min"] == s["k_max"] else f"{s['k_min']}-{s['k_max']}"
        no_rho, no_share = rho is None or rho != rho, share is None or share != share
        return (f"rho {'-' if no_rho else f'{rho:.3f}'} over {s['spearman_groups']} problem(s), measured top-k "
                f"found in the predicted top-k {'-' if no_share else f'{share:.0f} %'} (k = {k})")

    lines = [f"energy ({m['rows']} rows with measured energy, {m.get('problems', 0)} problem(s), meters "
             f"{', '.join(m.get('meters') or ['-'])}): ranking of each problem's configurations by energy"]
    for name, s in m["zero_shot"].items():
        lines.append(f"  zero-shot {name}: {fig(s)}")
    for name, s in (m.get("baselines") or {}).items():
        lines.append(f"  baseline, ranking by {name}: {fig(s)}")
    for name, by_pct in m["few_shot"]["models"].items():
        for pct, s in by_pct.items():
            lines.append(f"  {pct} % measured, {name}: {fig(s)} ({s['measured_rows']} measured rows)")
    lines += [f"  note: {n}" for n in m.get("notes") or []]
    return lines

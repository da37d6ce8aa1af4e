"""Blending the analytical and the learned model in log space.

``log2 t = a * log2 t_analytical + b * log2 t_learned + c`` with ``(a, b, c)`` fitted by least
squares on a validation split (rows neither model was fitted on). Candidates are the fitted blend,
the analytical model alone (1, 0, 0), the learned model alone (0, 1, 0) and the equal-weight
geometric mean (0.5, 0.5, 0); the one with the lowest validation MAPE is kept and recorded with
its figures in ``blend.json`` beside the learned model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.base import Predictions, Predictor

BLEND_FILE = "blend.json"


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    ok = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    return float(np.mean(np.abs(pred[ok] - true[ok]) / true[ok]) * 100) if ok.any() else float("nan")


@dataclass
class BlendWeights:
    a: float = 0.5
    b: float = 0.5
    c: float = 0.0
    kind: str = "geometric_mean"
    validation: dict[str, Any] = field(default_factory=dict)

    def combine(self, t_an: np.ndarray, t_le: np.ndarray) -> np.ndarray:
        la, ll = np.log2(np.maximum(t_an, 1e-9)), np.log2(np.maximum(t_le, 1e-9))
        out = 2.0 ** (self.a * la + self.b * ll + self.c)
        # a row one model cannot predict falls back to the other
        out = np.where(np.isfinite(t_an) & np.isfinite(t_le), out, np.where(np.isfinite(t_le), t_le, t_an))
        return out

    def save(self, directory: str | Path) -> Path:
        p = Path(directory) / BLEND_FILE
        p.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return p

    @classmethod
    def load(cls, directory: str | Path) -> BlendWeights | None:
        p = Path(directory) / BLEND_FILE
        if not p.is_file():
            return None
        return cls(**json.loads(p.read_text()))


def fit_blend(t_an: np.ndarray, t_le: np.ndarray, measured: np.ndarray) -> BlendWeights:
    """Choose the blend with the lowest MAPE on validation rows."""
    t_an, t_le, y = (np.asarray(x, dtype=np.float64) for x in (t_an, t_le, measured))
    ok = np.isfinite(t_an) & np.isfinite(t_le) & (t_an > 0) & (t_le > 0) & (y > 0)
    cands = [BlendWeights(1, 0, 0, "analytical"), BlendWeights(0, 1, 0, "learned"),
             BlendWeights(0.5, 0.5, 0, "geometric_mean")]
    if ok.sum() >= 3:
        X = np.vstack([np.log2(t_an[ok]), np.log2(t_le[ok]), np.ones(ok.sum())]).T
        (a, b, c), *_ = np.linalg.lstsq(X, np.log2(y[ok]), rcond=None)
        cands.append(BlendWeights(float(a), float(b), float(c), "least_squares"))
    scores = {w.kind: mape(w.combine(t_an[ok], t_le[ok]), y[ok]) for w in cands}
    best = min(cands, key=lambda w: scores[w.kind] if np.isfinite(scores[w.kind]) else np.inf)
    best.validation = {"rows": int(ok.sum()), "mape_by_candidate": scores}
    return best


class BlendModel(Predictor):
    """The blend of an analytical and a learned predictor."""

    name = "blend"

    def __init__(self, analytical: Predictor, learned: Predictor, weights: BlendWeights | None = None):
        self.analytical, self.learned = analytical, learned
        self.weights = weights or BlendWeights()

    def fit(self, frame: pd.DataFrame) -> BlendModel:
        pa, pl = self.analytical.predict(frame), self.learned.predict(frame)
        self.weights = fit_blend(pa.time_us, pl.time_us, frame["time_median_us"].to_numpy(dtype=float))
        return self

    def predict(self, frame: pd.DataFrame) -> Predictions:
        pa, pl = self.analytical.predict(frame), self.learned.predict(frame)
        return self.combine(pa, pl)

    def combine(self, pa: Predictions, pl: Predictions) -> Predictions:
        t = self.weights.combine(pa.time_us, pl.time_us)
        e = np.where(np.isfinite(pl.energy_j), pl.energy_j, pa.energy_j)
        return Predictions(t, e, pa.explanation)


def _spearman(p: np.ndarray, y: np.ndarray) -> float:
    ok = np.isfinite(p) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    a, b = pd.Series(p[ok]).rank().to_numpy(), pd.Series(y[ok]).rank().to_numpy()
    return float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else float("nan")


def fit_on_validation(dataset_dir: str | Path, model_dir: str | Path, profile: Any) -> dict[str, Any]:
    """Fit the blend on the validation kernels of a trained model, save ``blend.json`` beside it,
    and return analytical / learned / blend figures side by side on those rows."""
    from models.analytical import AnalyticalModel
    from models.learned.predictor import LearnedPredictor
    from train.loop import load_training_frame

    metrics = json.loads((Path(model_dir) / "metrics.json").read_text())
    val = set(metrics["split"]["val_kernels"])
    df, _ = load_training_frame(dataset_dir)
    df = df[df["kernel_id"].isin(val)].reset_index(drop=True)
    if df.empty:
        raise ValueError("no validation rows of this model in the dataset")
    an = AnalyticalModel(profile)
    pa = an.predict(df)
    f2 = df.assign(analytical_log2_time=np.log2(np.maximum(pa.time_us, 1e-9)))
    pl = LearnedPredictor.from_pretrained(model_dir).predict(f2)
    y = df["time_median_us"].to_numpy(dtype=float)
    w = fit_blend(pa.time_us, pl.time_us, y)
    w.save(model_dir)
    pb = w.combine(pa.time_us, pl.time_us)
    out: dict[str, Any] = {"rows": len(df), "kernels": int(df["kernel_id"].nunique()), "weights": asdict(w)}
    for name, p in (("analytical", pa.time_us), ("learned", pl.time_us), ("blend", pb)):
        ape = np.abs(p - y) / y
        per_kernel = pd.Series(ape).groupby(df["kernel_id"]).mean()
        rhos = [_spearman(p[g.index], y[g.index]) for _, g in df.groupby("kernel_id")]
        out[name] = {"mape": float(np.nanmean(ape) * 100), "mape_per_kernel": float(per_kernel.mean() * 100),
                     "median_ape": float(np.nanmedian(ape) * 100), "spearman_all": _spearman(p, y),
                     "spearman_per_kernel": float(np.nanmean(rhos)) if rhos else float("nan")}
    (Path(model_dir) / "blend_validation.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out

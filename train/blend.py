"""Fitting the analytical+learned blend (``kernelcast blend``).

Candidates are the least-squares blend ``log2 t = a log2 t_analytical + b log2 t_learned + c``, the
analytical model alone (1, 0, 0), the learned model alone (0, 1, 0) and the equal-weight geometric
mean (0.5, 0.5, 0); the one with the lowest validation MAPE is kept and recorded with its figures
in ``blend.json`` beside the learned model.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calib.profile import DeviceProfile
from datagen.frame import DataError, load_measured_frame
from kernelcast.metrics import mape, spearman
from models.blend import BlendWeights


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


def _json_file(path: Path, what: str) -> Any:
    from kernelcast.errors import UsageError

    if not path.is_file():
        raise UsageError(f"--model {path.parent}: not a trained model directory (no {path.name})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UsageError(f"--model {path.parent}: {path.name} is not JSON ({what} damaged)") from None
    except OSError as e:
        raise UsageError(f"--model {path.parent}: cannot read {path.name}: {e.strerror}") from None


def validation_kernels(model_dir: str | Path) -> set[str]:
    """The validation kernels of a trained model (its ``metrics.json``); :class:`UsageError` naming
    the file for a directory that is not a complete trained model."""
    from kernelcast.errors import UsageError

    d = Path(model_dir)
    metrics = _json_file(d / "metrics.json", "training metrics")
    cfg = _json_file(d / "config.json", "model configuration")
    if not isinstance(cfg, dict):
        raise UsageError(f"--model {d}: config.json is not a JSON object")
    if not (d / "model.safetensors").is_file():
        raise UsageError(f"--model {d}: no model.safetensors")
    split = metrics.get("split") if isinstance(metrics, dict) else None
    val = split.get("val_kernels") if isinstance(split, dict) else None
    if not isinstance(val, list):
        raise UsageError(f"--model {d}: metrics.json has no split.val_kernels (not written by kernelcast train)")
    return {str(k) for k in val}


def fit_on_validation(dataset_dir: str | Path, model_dir: str | Path, profile: DeviceProfile) -> dict[str, Any]:
    """Fit the blend on the validation kernels of a trained model, save ``blend.json`` beside it,
    and return analytical / learned / blend figures side by side on those rows."""
    from models.analytical import AnalyticalModel
    from models.learned.predictor import LearnedPredictor

    val = validation_kernels(model_dir)
    df, _ = load_measured_frame(dataset_dir)
    df = df[df["kernel_id"].isin(val)].reset_index(drop=True)
    if df.empty:
        raise DataError("no validation rows of this model in the dataset")
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
        rhos = [spearman(p[g.index], y[g.index], min_points=3) for _, g in df.groupby("kernel_id")]
        out[name] = {"mape": float(np.nanmean(ape) * 100), "mape_per_kernel": float(per_kernel.mean() * 100),
                     "median_ape": float(np.nanmedian(ape) * 100), "spearman_all": spearman(p, y, min_points=3),
                     "spearman_per_kernel": float(np.nanmean(rhos)) if rhos else float("nan")}
    (Path(model_dir) / "blend_validation.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out

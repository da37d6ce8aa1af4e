"""Blending the analytical and the learned model in log space (stacking).

``log2 t = sum_m w_m log2 t_m + c`` over the models' predicted times. The weights are chosen by
:func:`train.blend.fit_stacked_blend` on out-of-fold predictions of the training kernels (never on
the rows the blend is scored on) and saved as ``blend.json`` beside the learned model, with the
out-of-fold figures of every candidate that chose them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.models.base import Predictions, Predictor

from kernelcast.errors import InputError

BLEND_FILE = "blend.json"
BLEND_KIND = "kernelcast-blend"
BLEND_VERSION = 2


class BlendFileError(InputError):
    """A ``blend.json`` that cannot be read."""


@dataclass
class StackedBlend:
    """``log2 t = sum_m w_m log2 t_m + c`` over the models' predictions; a row where a weighted
    model has no prediction takes the first model of ``fallback`` that has one."""

    weights: dict[str, float]
    intercept: float = 0.0
    kind: str = ""
    fallback: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)   # candidate -> criterion where chosen
    criterion: str = "median_abs_log2"
    rows: int = 0
    #: the candidate every other had to beat (train.blend.fit_stacked_blend): the best single
    #: model, or ``geometric_mean`` where the kernel groups could not tell the single models apart
    anchor: str = ""
    #: how it was fitted and its out-of-fold figures (free-form, saved with it)
    fitted: dict[str, Any] = field(default_factory=dict)

    def combine(self, preds: dict[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(preds.values())))
        acc = np.full(n, float(self.intercept))
        ok = np.ones(n, dtype=bool)
        for m, w in self.weights.items():
            p = np.asarray(preds[m], dtype=np.float64)
            good = np.isfinite(p) & (p > 0)
            ok &= good
            acc += w * np.log2(np.where(good, p, 1.0))
        out = np.where(ok, 2.0 ** acc, np.nan)
        for m in self.fallback:
            if m not in preds:
                continue
            p = np.asarray(preds[m], dtype=np.float64)
            fill = np.isnan(out) & np.isfinite(p) & (p > 0)
            out[fill] = p[fill]
        return out

    def formula(self) -> str:
        terms = [f"{w:.3f} log2 t_{m}" for m, w in self.weights.items()]
        return "log2 t = " + " + ".join(terms) + (f" {'+' if self.intercept >= 0 else '-'} {abs(self.intercept):.3f}"
                                                   if self.intercept else "")

    def to_dict(self) -> dict[str, Any]:
        return {"kind_of_file": BLEND_KIND, "version": BLEND_VERSION, **asdict(self)}

    def save(self, directory: str | Path) -> Path:
        p = Path(directory) / BLEND_FILE
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n")
        tmp.replace(p)
        return p

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StackedBlend:
        if d.get("kind_of_file") == BLEND_KIND:
            if d.get("version") != BLEND_VERSION:
                raise BlendFileError(f"blend version {d.get('version')} is not supported (this kernelcast reads "
                                     f"version {BLEND_VERSION}); refit it with 'kernelcast blend'")
            known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
            return cls(**known)
        if {"a", "b", "c"} <= set(d):           # version 1: log2 t = a log2 t_an + b log2 t_le + c
            return cls({"analytical": float(d["a"]), "learned": float(d["b"])}, float(d["c"]),
                       str(d.get("kind", "")), ["learned", "analytical"],
                       fitted={"legacy": "version 1 blend (chosen on validation kernels)",
                               "validation": d.get("validation", {})})
        raise BlendFileError("not a kernelcast blend")

    @classmethod
    def load(cls, directory: str | Path) -> StackedBlend | None:
        p = Path(directory) / BLEND_FILE
        if not p.is_file():
            return None
        try:
            d = json.loads(p.read_text())
            if not isinstance(d, dict):
                raise BlendFileError("not a JSON object")
            return cls.from_dict(d)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, ValueError, BlendFileError) as e:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise BlendFileError(f"{p}: cannot read the blend: {why}") from None


def single(model: str, fallback: str, kind: str | None = None) -> StackedBlend:
    """The blend that is one model alone (falling back to another where it has no prediction)."""
    return StackedBlend({model: 1.0}, 0.0, kind or model, [model, fallback])


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return str(x)


class BlendModel(Predictor):
    """The blend of an analytical and a learned predictor (``analytical`` and ``learned`` are the
    names the blend's weights use)."""

    name = "blend"

    def __init__(self, analytical: Predictor, learned: Predictor, blend: StackedBlend | None = None):
        self.analytical, self.learned = analytical, learned
        self.blend = blend or single("learned", "analytical")

    def predict(self, frame: pd.DataFrame) -> Predictions:
        pa, pl = self.analytical.predict(frame), self.learned.predict(frame)
        return self.combine(pa, pl)

    def combine(self, pa: Predictions, pl: Predictions) -> Predictions:
        t = self.blend.combine({"analytical": pa.time_us, "learned": pl.time_us})
        e = np.where(np.isfinite(pl.energy_j), pl.energy_j, pa.energy_j)
        return Predictions(t, e, pa.explanation)

"""Blending the analytical and the learned model in log space.

``log2 t = a * log2 t_analytical + b * log2 t_learned + c``; the weights are chosen by
:func:`train.blend.fit_blend` on rows neither model was fitted on and saved as ``blend.json``
beside the learned model, with the figures that chose them.
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


class BlendModel(Predictor):
    """The blend of an analytical and a learned predictor."""

    name = "blend"

    def __init__(self, analytical: Predictor, learned: Predictor, weights: BlendWeights | None = None):
        self.analytical, self.learned = analytical, learned
        self.weights = weights or BlendWeights()

    def predict(self, frame: pd.DataFrame) -> Predictions:
        pa, pl = self.analytical.predict(frame), self.learned.predict(frame)
        return self.combine(pa, pl)

    def combine(self, pa: Predictions, pl: Predictions) -> Predictions:
        t = self.weights.combine(pa.time_us, pl.time_us)
        e = np.where(np.isfinite(pl.energy_j), pl.energy_j, pa.energy_j)
        return Predictions(t, e, pa.explanation)

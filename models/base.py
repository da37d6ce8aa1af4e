"""The predictor interface shared by the analytical, learned and blended models.

Like scikit-learn estimators, predictors take plain tables: a pandas frame with one row per
(kernel, configuration) holding at least ``source``, ``kernel_name``, ``gsize``, ``lsize`` and
``args`` (the dataset's columns), and return arrays. ``fit`` may be a no-op (the analytical model
is fitted by calibration, never on benchmark kernels).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass
class Predictions:
    """Time (us) and energy (J, NaN where the model has none) per row, with optional explanations."""

    time_us: np.ndarray
    energy_j: np.ndarray
    explanation: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def time_only(cls, time_us: np.ndarray) -> Predictions:
        t = np.asarray(time_us, dtype=np.float64)
        return cls(t, np.full_like(t, np.nan))


class Predictor(abc.ABC):
    """A model of kernel time (and energy): it predicts (and saves and loads); fitting one is the
    trainer's job (``train/``)."""

    name: str = "predictor"

    @abc.abstractmethod
    def predict(self, frame: pd.DataFrame) -> Predictions:
        """One prediction per row of ``frame``."""

"""The predictor interface shared by the analytical, learned and blended models.

Like scikit-learn estimators, predictors take plain tables: a pandas frame with one row per
(kernel, configuration) holding at least ``source``, ``kernel_name``, ``gsize``, ``lsize`` and
``args`` (the dataset's columns), and return arrays. Fitting is not part of the interface: the
analytical model is set by calibration (never fitted on benchmark kernels), the learned model by
the trainer (``train/``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd


@dataclass
class Predictions:
    """Time (us) and energy (J, NaN where the model has none) per row, with optional explanations."""

    time_us: npt.NDArray[np.float64]
    energy_j: npt.NDArray[np.float64]
    explanation: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def time_only(cls, time_us: npt.ArrayLike) -> Predictions:
        t = np.asarray(time_us, dtype=np.float64)
        return cls(t, np.full_like(t, np.nan))


class Predictor(abc.ABC):
    """A model of kernel time (and energy): it predicts (and saves and loads); fitting one is the
    trainer's job (``train/``)."""

    name: str = "predictor"

    @abc.abstractmethod
    def predict(self, frame: pd.DataFrame) -> Predictions:
        """One prediction per row of ``frame``."""

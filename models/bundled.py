"""The model ``predict`` and ``tune`` use when no ``--model`` is given.

A GPU profile gets the bundled GPU model: a tabular model trained on the public GPU yardstick with
the device columns of each GPU's profile (``models/bundled/gpu/tabular.json``, its data card
``card.json``; rebuilt with ``python -m kernelcast.bench.gpu_model build``, docs/gpu-model.md), so it
predicts a GPU it has not seen from its profile. Any other profile gets the analytical model alone,
as does ``--model none``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.tabular import MODEL_FILE, TabularPredictor

#: where the bundled GPU model's files are
BUNDLED_GPU_DIR = Path(__file__).resolve().parent / "bundled" / "gpu"
CARD_FILE = "card.json"
#: the ``--model`` value that asks for the analytical model alone
NO_MODEL = "none"


def default_model_for(profile: DeviceProfile) -> Path | None:
    """The directory of the model to use with ``profile`` when no ``--model`` is given: the bundled
    GPU model for a GPU profile (when its files are installed), ``None`` (the analytical model
    alone) for any other."""
    if profile.device_class != "GPU":
        return None
    return BUNDLED_GPU_DIR if (BUNDLED_GPU_DIR / MODEL_FILE).is_file() else None


@dataclass
class ModelChoice:
    """Which model a command predicts with: ``path`` (None: the analytical model alone) and how it
    was chosen: ``given`` (``--model DIR``), ``bundled`` (:func:`default_model_for`) or ``none``."""

    path: str | None
    source: str

    def describe(self) -> str:
        if self.path is None:
            return "analytical model only" + (" (--model none)" if self.source == "none" else "")
        return f"tabular model {self.path}" + (" (bundled GPU model)" if self.source == "bundled" else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "source": self.source, "bundled": self.source == "bundled"}


def choose_model(given: str | None, profile: DeviceProfile) -> ModelChoice:
    """The model for ``--model given`` (None when not given) with ``profile``."""
    if given == NO_MODEL:
        return ModelChoice(None, "none")
    if given:
        return ModelChoice(given, "given")
    d = default_model_for(profile)
    return ModelChoice(None, "none") if d is None else ModelChoice(str(d), "bundled")


def is_multi_device(model: Any) -> bool:
    """Whether a tabular model was trained on the rows of several devices (its summary names them):
    its device columns come from the profile it predicts with, not the one saved with it."""
    return isinstance(model, TabularPredictor) and len(model.summary.get("devices") or ()) > 1


def with_profile(model: Any, profile: DeviceProfile) -> Any:
    """A multi-device tabular model set to predict with ``profile`` (other models unchanged)."""
    if is_multi_device(model):
        model.profile = profile
    return model


def bundled_card() -> dict[str, Any] | None:
    """The bundled GPU model's data card, None when it is not installed."""
    p = BUNDLED_GPU_DIR / CARD_FILE
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None

"""Predictions of the models in use, side by side: what ``predict``, ``tune`` and ``bench`` call.

A prediction frame has one row per launch configuration with the dataset's columns (``source``,
``kernel_name``, ``build_options``, ``gsize``, ``lsize``, ``args``, ``power_cap_w``);
:func:`configuration_row` builds one from a kernel and a configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kernelcast.errors import UsageError
from kernelcast.schema import ArgBinding, Kernel

if TYPE_CHECKING:
    from calib.profile import DeviceProfile
    from kernelcast.clang import KernelParam
    from models.base import Predictor
    from models.blend import BlendWeights


def arg_dicts(bindings: list[ArgBinding]) -> list[dict[str, Any]]:
    """Argument bindings as the ``args`` column holds them."""
    return [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.value is None else str(b.value), "init": b.init} for b in bindings]


def bind_arguments(params: list[KernelParam], given_specs: list[str], gsize: tuple[int, ...],
                   lsize: tuple[int, ...] | None, kernel_name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Bind every argument of a kernel: the ones given (``NAME=...`` specs), the others by LLMPerf's
    simple selection. Returns the ``args`` column and the names bound by selection."""
    from datagen.args import UnsupportedArgument, complete_args
    from kernelcast.argspec import check_against_signature, parse_arg

    given = [parse_arg(a) for a in given_specs]
    check_against_signature(given, params, kernel_name)
    try:
        bindings, filled = complete_args(params, given, gsize, lsize)
    except UnsupportedArgument as e:
        raise UsageError(f"{e}; give it with --arg") from None
    return arg_dicts(bindings), filled


def configuration_row(kernel: Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                      args: list[dict[str, Any]], power_cap_w: float | None = None) -> dict[str, Any]:
    """One row of a prediction frame."""
    return {"source": kernel.source, "kernel_name": kernel.name, "build_options": kernel.build_options,
            "gsize": list(gsize), "lsize": list(lsize) if lsize else None, "args": args,
            "power_cap_w": np.nan if power_cap_w is None else power_cap_w}


def load_learned(model: str | None) -> tuple[Predictor | None, BlendWeights | None]:
    """The learned predictor of a model directory and its blend weights, or ``(None, None)``
    without one. The kind is read from the directory: a tabular model (``tabular.json``, loaded
    without torch) or a CodeGen model (``config.json``). :class:`UsageError` for a directory that
    holds no loadable model (another kind, another version)."""
    if not model:
        return None, None
    p = Path(model)
    from models.tabular import is_tabular_dir

    if p.is_dir() and is_tabular_dir(p):
        from models.blend import BlendWeights
        from models.tabular import TabularPredictor

        try:
            tp = TabularPredictor.load(p)
        except Exception as e:  # noqa: BLE001 - any loading failure is bad input here
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UsageError(f"--model {model}: cannot load: {why}") from None
        return tp, BlendWeights.load(p)
    if p.exists() and not (p / "config.json").is_file():
        raise UsageError(f"--model {model}: not a model directory (no config.json or tabular.json); train one with "
                         f"'kernelcast train'")
    try:
        from models.blend import BlendWeights
        from models.learned.predictor import LearnedPredictor

        lp = LearnedPredictor.from_pretrained(model)
    except Exception as e:  # noqa: BLE001 - any loading failure is bad input here
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--model {model}: cannot load: {why}") from None
    return lp, (BlendWeights.load(p) if p.is_dir() else None)


def predict_frame(frame: pd.DataFrame, profile: DeviceProfile, learned: Predictor | None = None,
                  weights: BlendWeights | None = None) -> pd.DataFrame:
    """Analytical, learned and blended predictions side by side for the rows of ``frame``:
    ``analytical_us``, ``analytical_energy_j``, ``explanation``, and with a learned model
    ``learned_us``, ``learned_energy_j``, ``blend_us``, ``blend_kind``.

    ``learned`` is a CodeGen predictor (it gets the analytical prediction as ``analytical_log2_time``)
    or a tabular one (which computes its own analytical columns with the profile saved with it, and
    already corrects the analytical model: without ``weights`` its blend is the tabular prediction)."""
    from models.analytical import AnalyticalModel

    an = AnalyticalModel(profile)
    pa = an.predict(frame)
    out = pd.DataFrame({"analytical_us": pa.time_us, "analytical_energy_j": pa.energy_j})
    out["explanation"] = pa.explanation
    if learned is not None:
        from models.blend import BlendModel, BlendWeights
        from models.tabular import TabularPredictor

        if isinstance(learned, TabularPredictor):
            pl = learned.predict(frame)
            default = BlendWeights(0.0, 1.0, 0.0, "learned")
        else:
            f2 = frame.copy()
            f2["analytical_log2_time"] = np.log2(np.maximum(pa.time_us, 1e-9))
            pl = learned.predict(f2)
            default = BlendWeights()
        out["learned_us"] = pl.time_us
        out["learned_energy_j"] = pl.energy_j
        blend = BlendModel(an, learned, weights or default)
        pb = blend.combine(pa, pl)
        out["blend_us"] = pb.time_us
        out["blend_kind"] = blend.weights.kind
    return out

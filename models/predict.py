"""Predictions of the models in use, side by side: what ``predict``, ``tune`` and ``bench`` call.

A prediction frame has one row per launch configuration with the dataset's columns (``source``,
``kernel_name``, ``build_options``, ``gsize``, ``lsize``, ``args``, ``power_cap_w``, and
``site_counts``: the kernel's data-dependent counts measured on real inputs, :mod:`kernelcast.sites`);
:func:`configuration_row` builds one from a kernel and a configuration.
:func:`predict_with_intervals` adds the 90 % intervals and the few-shot corrections of measured
configurations (:func:`measured_frame`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from kernelcast.datagen.args import UnsupportedArgument, complete_args
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.blend import BlendModel, StackedBlend, single
from kernelcast.models.fewshot import (
    DEFAULT_SHRINK_PRIOR,
    MeasuredFileError,
    MeasuredSet,
    Offset,
    analytical_balance,
    choose_shots,
    fit_offset,
    frame_launch_inputs,
    shape_inputs,
)
from kernelcast.models.tabular import TabularPredictor, bound_names, build_table, is_tabular_dir

from kernelcast.argspec import check_against_signature, parse_arg
from kernelcast.columns import decode_args, decode_sizes
from kernelcast.errors import InputError, UsageError
from kernelcast.options import read_text_file
from kernelcast.schema import ArgBinding, Kernel
from kernelcast.sites import SITE_PREFIXES

if TYPE_CHECKING:
    from kernelcast.calib.profile import DeviceProfile
    from kernelcast.models.base import Predictor
    from kernelcast.models.tabular import ResidualCalibration

    from kernelcast.clang import KernelParam


def arg_dicts(bindings: list[ArgBinding]) -> list[dict[str, Any]]:
    """Argument bindings as the ``args`` column holds them."""
    return [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.value is None else str(b.value), "init": b.init} for b in bindings]


def complete_bindings(params: list[KernelParam], given_specs: list[str], gsize: tuple[int, ...],
                      lsize: tuple[int, ...] | None, kernel_name: str) -> tuple[list[ArgBinding], list[str]]:
    """Bind every argument of a kernel: the ones given (``NAME=...`` specs, ``NAME=@FILE.npy``),
    the others by LLMPerf's simple selection. Returns the bindings and the names bound by selection."""
    given = [parse_arg(a) for a in given_specs]
    check_against_signature(given, params, kernel_name)
    try:
        return complete_args(params, given, gsize, lsize)
    except UnsupportedArgument as e:
        raise UsageError(f"{e}; give it with --arg") from None


def bind_arguments(params: list[KernelParam], given_specs: list[str], gsize: tuple[int, ...],
                   lsize: tuple[int, ...] | None, kernel_name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`complete_bindings` as the ``args`` column and the names bound by selection."""
    bindings, filled = complete_bindings(params, given_specs, gsize, lsize, kernel_name)
    return arg_dicts(bindings), filled


class CountsFileError(InputError):
    """A ``--counts`` file that holds no site counts."""


def read_site_counts(path: str) -> dict[str, float]:
    """The site counts of a ``--counts`` file: the JSON of ``kernelcast measure --counts --json``
    (its ``site_counts``), a :class:`~instrument.counters.SiteCounts` record with ``values``, or an
    object of site symbol -> count (``trip_l7_c13``: mean trips per entry, ``br_l4_c9``: share of
    evaluations taking the then-side)."""
    text = read_text_file(path, "--counts")
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise CountsFileError(f"--counts {path}: not JSON ({e})") from None
    if isinstance(doc, dict) and isinstance(doc.get("site_counts"), dict):
        doc = doc["site_counts"]
    if isinstance(doc, dict) and "error" in doc and "values" not in doc:
        raise CountsFileError(f"--counts {path}: the counts were not measured: {doc['error']}")
    if isinstance(doc, dict) and isinstance(doc.get("values"), dict):
        doc = doc["values"]
    if not isinstance(doc, dict):
        raise CountsFileError(f"--counts {path}: expected a JSON object of site counts")
    out: dict[str, float] = {}
    for k, v in doc.items():
        if not isinstance(k, str) or not k.startswith(SITE_PREFIXES):
            raise CountsFileError(f"--counts {path}: {k!r} is not a site (trip_l<line>_c<col> or br_l<line>_c<col>)")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise CountsFileError(f"--counts {path}: {k}: expected a non-negative number, got {v!r}")
        if k.startswith("br_l") and v > 1:
            raise CountsFileError(f"--counts {path}: {k}: a branch share is at most 1, got {v}")
        out[k] = float(v)
    return out


def configuration_row(kernel: Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                      args: list[dict[str, Any]], power_cap_w: float | None = None,
                      site_counts: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One row of a prediction frame (``site_counts``: measured counts of the kernel's sites)."""
    return {"source": kernel.source, "kernel_name": kernel.name, "build_options": kernel.build_options,
            "gsize": list(gsize), "lsize": list(lsize) if lsize else None, "args": args,
            "power_cap_w": np.nan if power_cap_w is None else power_cap_w,
            "site_counts": json.dumps(dict(site_counts)) if site_counts else ""}


def measured_frame(kernel: Kernel, params: list[KernelParam], measured: MeasuredSet, arg_specs: list[str],
                   power_cap_w: float | None = None) -> tuple[pd.DataFrame, np.ndarray]:
    """Prediction rows of the measured configurations of ``kernel`` and their times (us): the
    argument bindings the measurement used where the file has them (``measure --json``), else the
    file's argument columns, then ``arg_specs`` and simple selection (as ``predict --configs``)."""
    rows = []
    for c in measured.configs:
        if c.args is not None:
            args = c.args
        else:
            specs = list(arg_specs) + [f"{k}={v}" for k, v in c.arg_values.items()]
            try:
                args, _ = bind_arguments(params, specs, c.gsize, c.lsize, kernel.name)
            except UsageError as e:
                raise MeasuredFileError(f"--measured {measured.path}: {c.where}: {e}") from None
        rows.append(configuration_row(kernel, c.gsize, c.lsize, args, power_cap_w))
    return pd.DataFrame(rows), np.array([c.time_us for c in measured.configs], dtype=np.float64)


def load_learned(model: str | None) -> tuple[Predictor | None, StackedBlend | None]:
    """The learned predictor of a model directory and its blend weights, or ``(None, None)``
    without one. The kind is read from the directory: a tabular model (``tabular.json``, loaded
    without torch) or a CodeGen model (``config.json``). :class:`UsageError` for a directory that
    holds no loadable model (another kind, another version)."""
    if not model:
        return None, None
    p = Path(model)
    if p.is_dir() and is_tabular_dir(p):
        try:
            tp = TabularPredictor.load(p)
        except Exception as e:  # noqa: BLE001 - any loading failure is bad input here
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UsageError(f"--model {model}: cannot load: {why}") from None
        return tp, StackedBlend.load(p)
    if p.exists() and not (p / "config.json").is_file():
        raise UsageError(f"--model {model}: not a model directory (no config.json or tabular.json); train one with "
                         f"'kernelcast train'")
    try:
        from kernelcast.models.learned.predictor import LearnedPredictor  # deferred: imports torch

        lp = LearnedPredictor.from_pretrained(model)
    except Exception as e:  # noqa: BLE001 - any loading failure is bad input here
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--model {model}: cannot load: {why}") from None
    return lp, (StackedBlend.load(p) if p.is_dir() else None)


def no_prediction_reason(explanation: Any) -> str | None:
    """Why the analytical model gave a configuration no time: its static analysis failed
    (``error``) or the device cannot run it (``unrunnable``); None where the explanation says
    neither."""
    if not isinstance(explanation, dict):
        return None
    why = explanation.get("error") or explanation.get("unrunnable")
    return str(why) if why else None


def predict_frame(frame: pd.DataFrame, profile: DeviceProfile, learned: Predictor | None = None,
                  weights: StackedBlend | None = None) -> pd.DataFrame:
    """Analytical, learned and blended predictions side by side for the rows of ``frame``:
    ``analytical_us``, ``analytical_energy_j``, ``explanation``, and with a learned model
    ``learned_us``, ``learned_energy_j``, ``blend_us``, ``blend_kind``.

    ``learned`` is a CodeGen predictor (it gets the analytical prediction as ``analytical_log2_time``)
    or a tabular one (which computes its own analytical columns with the profile saved with it, and
    already corrects the analytical model: without ``weights`` its blend is the tabular prediction)."""
    return _predict(frame, profile, learned, weights)[0]


def _predict(frame: pd.DataFrame, profile: DeviceProfile, learned: Predictor | None,
             weights: StackedBlend | None) -> tuple[pd.DataFrame, list[str | None] | None]:
    """:func:`predict_frame`, and with a tabular model the analytical bound of each row under the
    model's profile (what its interval quantiles are binned by)."""
    an = AnalyticalModel(profile)
    pa = an.predict(frame)
    out = pd.DataFrame({"analytical_us": pa.time_us, "analytical_energy_j": pa.energy_j})
    out["explanation"] = pa.explanation
    bounds = None
    if learned is not None:
        if isinstance(learned, TabularPredictor):
            table = build_table(frame, learned.profile)
            pl = learned.predict_table(table)
            bounds = bound_names(table["an_bound"].to_numpy(dtype=np.float64))
            default = single("learned", "analytical", "learned (no blend fitted)")
        else:
            f2 = frame.copy()
            f2["analytical_log2_time"] = np.log2(np.maximum(pa.time_us, 1e-9))
            pl = learned.predict(f2)
            default = single("learned", "analytical", "learned (no blend fitted)")
        out["learned_us"] = pl.time_us
        out["learned_energy_j"] = pl.energy_j
        blend = BlendModel(an, learned, weights or default)
        pb = blend.combine(pa, pl)
        out["blend_us"] = pb.time_us
        out["blend_kind"] = blend.blend.kind
    return out, bounds


# ---------------------------------------------------------------------------------------------
# intervals and few-shot corrections

#: the time columns of :func:`predict_frame` that get intervals and corrections, in printing order
MODEL_COLUMNS = ("analytical", "learned", "blend")


@dataclass
class PredictionSet:
    """Predictions with their 90 % intervals and few-shot corrections (:func:`predict_with_intervals`).

    ``frame`` holds :func:`predict_frame`'s columns, where ``<model>_us`` is the corrected prediction
    when measured configurations were given (``<model>_raw_us`` the uncorrected one), and
    ``<model>_lo_us`` / ``<model>_hi_us`` the interval (NaN where the model has none), and
    ``measured_us`` the measurement of a configuration that was itself measured (NaN elsewhere; its
    model columns hold it too). ``offsets``: the correction of each model; ``notes``: why a model
    has no interval, or kept its zero-shot one; ``suggested``: the rows of ``frame`` to measure next,
    in the order chosen (:func:`models.fewshot.choose_shots`), when asked for."""

    frame: pd.DataFrame
    models: list[str]
    offsets: dict[str, Offset] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    shots: int = 0
    suggested: list[int] = field(default_factory=list)

    @property
    def has_intervals(self) -> bool:
        return any(np.isfinite(self.frame[f"{m}_lo_us"]).any() for m in self.models)


def same_profile(a: DeviceProfile, b: DeviceProfile) -> bool:
    """Whether two device profiles hold the same values (the analytical model's residuals taken
    with one apply to the other)."""
    return json.dumps(a.to_dict(), sort_keys=True, default=str) == json.dumps(b.to_dict(), sort_keys=True, default=str)


def _calibrations(profile: DeviceProfile, learned: Predictor | None, weights: StackedBlend | None,
                  models: list[str]) -> tuple[dict[str, ResidualCalibration], dict[str, str]]:
    """The residual calibration behind each model column's interval, or why it has none."""
    cals: dict[str, ResidualCalibration] = {}
    notes: dict[str, str] = {}
    tab = learned if isinstance(learned, TabularPredictor) else None
    cal_an = tab.residual_calibration("analytical") if tab is not None else None
    if cal_an is not None and same_profile(profile, tab.profile):      # type: ignore[union-attr]
        cals["analytical"] = cal_an
    elif tab is None:
        notes["analytical"] = ("no measured residuals of the analytical model on this device: its interval would be "
                               "invented (a tabular model stores them: 'kernelcast train --kind tabular', then "
                               "--model)")
    elif cal_an is None:
        notes["analytical"] = "the tabular model was saved without residuals (no interval calibration)"
    else:
        notes["analytical"] = (f"the model's analytical residuals were measured with another profile "
                               f"({tab.profile.device.name}, {tab.profile.kind}); predicting with "
                               f"{profile.device.name} ({profile.kind})")
    if "learned" in models:
        cal = tab.residual_calibration("tabular") if tab is not None else None
        if cal is not None:
            cals["learned"] = cal
            if weights is None or (weights.weights == {"learned": 1.0} and weights.intercept == 0):
                cals["blend"] = cal
            else:
                notes["blend"] = f"the blend ({weights.kind}) stores no residuals"
        else:
            why = ("the CodeGen model stores no residuals" if tab is None
                   else "the tabular model was saved without residuals (no interval calibration)")
            notes["learned"] = notes["blend"] = why
    return cals, notes


def predict_with_intervals(frame: pd.DataFrame, profile: DeviceProfile, learned: Predictor | None = None,
                           weights: StackedBlend | None = None, measured: pd.DataFrame | None = None,
                           measured_us: Any = None, suggest: int = 0) -> PredictionSet:
    """:func:`predict_frame` with a 90 % interval per model where measured residuals exist, and,
    with ``measured`` (prediction rows of measured configurations of the same kernel) and their
    ``measured_us``, every model corrected by its few-shot offset (:mod:`models.fewshot`).

    Intervals: a tabular model's own (out-of-fold quantiles saved with it, per analytical bound),
    the same for its blend when the blend is the tabular prediction, and the analytical model's
    when the model's profile is the one predicted with. After a k-shot correction the interval
    uses the model's k-shot quantiles, widened to the shots' own scatter; a model without k-shot
    quantiles keeps its zero-shot interval (said in ``notes``). The shrinkage of the offset uses
    the prior strength estimated with the model's residuals, else ``k / (k + 1)``; a model whose
    calibration holds a shape prior is corrected by configuration (:class:`models.fewshot.ShapePrior`).

    With ``suggest`` = k, the k rows of ``frame`` that the learned model's shape prior says to
    measure next (given the measured ones) are in ``suggested``; an :class:`InputError` when the
    learned model's calibration holds no shape prior."""
    res, bounds = _predict(frame, profile, learned, weights)
    models = ["analytical"] + (["learned", "blend"] if learned is not None else [])
    cals, notes = _calibrations(profile, learned, weights, models)
    out = PredictionSet(res, models, notes=notes)
    offsets: dict[str, Offset] = {}
    launch_rows = frame_launch_inputs(frame, analytical_balance(res["explanation"].tolist()))
    if suggest:
        cal = cals.get("learned")
        if cal is None or cal.shape is None:
            raise InputError("--suggest-shots needs a tabular model whose calibration holds a shape prior (kernelcast "
                             "train --kind tabular on a dataset of 8 kernels or more)")
    shots_x = None
    if measured is not None:
        m_us = np.asarray(measured_us, dtype=np.float64)
        if len(measured) != len(m_us):
            raise ValueError(f"{len(measured)} measured rows, {len(m_us)} times")
        shots_pred, _ = _predict(measured, profile, learned, weights)
        launch_shots = frame_launch_inputs(measured, analytical_balance(shots_pred["explanation"].tolist()))
        if learned is not None:
            shots_x = shape_inputs(launch_shots, shots_pred["learned_us"].to_numpy(dtype=np.float64))
        for m in models:
            cal = cals.get(m)
            sp = shots_pred[f"{m}_us"].to_numpy(dtype=np.float64)
            raw = res[f"{m}_us"].to_numpy(dtype=np.float64)
            offsets[m] = fit_offset(m_us, sp, cal.prior if cal is not None else DEFAULT_SHRINK_PRIOR,
                                    cal.within_var if cal is not None else None,
                                    cal.shape if cal is not None else None,
                                    shape_inputs(launch_shots, sp))
            res[f"{m}_raw_us"] = res[f"{m}_us"]
            res[f"{m}_us"] = offsets[m].apply(raw, shape_inputs(launch_rows, raw))
        out.offsets = offsets
        out.shots = max((o.k for o in offsets.values()), default=0)
    if suggest:
        # the design uses the uncorrected prediction, as the correction's own inputs do
        raw_col = "learned_raw_us" if "learned_raw_us" in res.columns else "learned_us"
        shape = cals["learned"].shape
        assert shape is not None
        x = shape_inputs(launch_rows, res[raw_col].to_numpy(dtype=np.float64))
        if measured is not None:            # a configuration already measured is not asked for again
            done = set(_config_keys(measured))
            x[[k in done for k in _config_keys(frame)]] = np.nan
        out.suggested = choose_shots(shape, x, suggest, measured=shots_x)
    an_bounds = [e.get("bound") if isinstance(e, dict) else None for e in res["explanation"]]
    for m in models:
        pred = res[f"{m}_us"].to_numpy(dtype=np.float64)
        cal = cals.get(m)
        if cal is None:
            res[f"{m}_lo_us"], res[f"{m}_hi_us"] = np.nan, np.nan
            continue
        off = offsets.get(m)
        k = off.k if off is not None else 0
        if k and not any(s <= k for s in cal.shots):
            notes[m] = (f"kept the zero-shot interval: the model stores no {k}-shot residual quantiles (its training "
                        f"kernels had too few rows)")
        lo, hi = cal.interval(pred, an_bounds if m == "analytical" else bounds, shots=k,
                              spread=off.spread if off is not None else 0.0)
        res[f"{m}_lo_us"], res[f"{m}_hi_us"] = lo, hi
    res["measured_us"] = np.nan
    if measured is not None:
        # a configuration that was itself measured is predicted by its measurement (module docstring
        # of models.fewshot): no model column keeps its own guess there, and no interval is claimed
        m_us = np.asarray(measured_us, dtype=np.float64)
        times: dict[str, list[float]] = {}
        for key, t in zip(_config_keys(measured), m_us):
            if np.isfinite(t) and t > 0:
                times.setdefault(key, []).append(float(t))
        for i, key in enumerate(_config_keys(frame)):
            if key in times:
                v = float(2.0 ** np.mean(np.log2(times[key])))
                res.loc[res.index[i], "measured_us"] = v
                for m in models:
                    res.loc[res.index[i], [f"{m}_us", f"{m}_lo_us", f"{m}_hi_us"]] = [v, np.nan, np.nan]
    return out


def _config_keys(frame: pd.DataFrame) -> list[str]:
    """A key per prediction row that two rows of the same configuration share (sizes, argument
    bindings without their initialisation, power cap)."""
    keys = []
    for _, r in frame.iterrows():
        args = [(a.get("name"), a.get("kind"), a.get("dtype"), a.get("count"),
                 None if a.get("value") is None else str(a.get("value"))) for a in decode_args(r.get("args"))]
        cap = r.get("power_cap_w")
        cap = None if cap is None or (isinstance(cap, float) and not np.isfinite(cap)) else float(cap)
        keys.append(json.dumps([list(decode_sizes(r.get("gsize")) or ()), list(decode_sizes(r.get("lsize")) or ()),
                                args, cap], default=str))
    return keys


@dataclass
class ScoredConfigs:
    """The configurations ``tune`` scores: the time and energy of the scoring model (``tabular``
    with a tabular model, else ``analytical``), the analytical explanation of each row, the bins
    of the model's interval quantiles and its residual calibration (``None``, with ``note``, when
    it has none)."""

    model: str
    time_us: np.ndarray
    energy_j: np.ndarray
    explanation: list[dict[str, Any]]
    bounds: list[str | None]
    calibration: ResidualCalibration | None
    note: str = ""

    def intervals(self, time_us: np.ndarray, offset: Offset | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the interval around ``time_us`` (the predictions, corrected by
        ``offset`` when given); NaN without a calibration."""
        if self.calibration is None:
            return np.full(len(time_us), np.nan), np.full(len(time_us), np.nan)
        k = offset.k if offset is not None else 0
        return self.calibration.interval(time_us, self.bounds, shots=k, spread=offset.spread if offset else 0.0)


def score_configurations(frame: pd.DataFrame, profile: DeviceProfile,
                         tabular: Predictor | None = None,
                         analysis_dirs: Sequence[str | os.PathLike[str]] = ()) -> ScoredConfigs:
    """Score prediction rows with the analytical model of ``profile``, or with ``tabular`` (a
    :class:`models.tabular.TabularPredictor`; energy from its energy head where it has one, else
    the analytical energy). Rows naming a shared analysis read it from ``analysis_dirs``."""
    pa = AnalyticalModel(profile, analysis_dirs=analysis_dirs).predict(frame)
    if tabular is None:
        return ScoredConfigs("analytical", pa.time_us, pa.energy_j, pa.explanation,
                             [e.get("bound") for e in pa.explanation], None,
                             "no measured residuals of the analytical model on this device: its interval would be "
                             "invented (tune --model with a tabular model gives intervals)")

    if not isinstance(tabular, TabularPredictor):
        raise TypeError("score_configurations scores with a tabular model only")
    table = build_table(frame, tabular.profile, analysis_dirs)
    pt = tabular.predict_table(table)
    energy = np.where(np.isfinite(pt.energy_j), pt.energy_j, pa.energy_j)
    cal = tabular.residual_calibration("tabular")
    return ScoredConfigs("tabular", pt.time_us, energy, pa.explanation,
                         bound_names(table["an_bound"].to_numpy(dtype=np.float64)), cal,
                         "" if cal is not None else "the tabular model was saved without residuals (no interval "
                                                    "calibration)")

"""Tuning: the search space (work-group sizes and block shapes, FlipFlop Algorithm 2; power caps),
its scoring and ranking with a model, the time/energy Pareto set, and the measure-and-feedback
loop (:func:`tune`). Every enumeration is bounded.

:func:`tune` is the library entry point (``kernelcast tune`` parses its arguments and prints its
result): it scores every candidate of a :class:`TuneSpace`, corrects the predictions by the
kernel's measured configurations when given, ranks them by the objective and, with a ``measure``
callable (:class:`models.measure.HarnessMeasure` launches on the device; any function from a
kernel and a launch configuration to a :class:`~kernelcast.schema.Measurement` will do, e.g. a
lookup in measured data), measures the best ones one at a time, refitting the correction after
each measurement before picking the next."""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.instrument.runner import pool_rounds
from kernelcast.models.base import Predictor
from kernelcast.models.fewshot import (
    DEFAULT_SHRINK_PRIOR,
    Offset,
    analytical_balance,
    fit_offset,
    frame_launch_inputs,
    launch_inputs,
    shape_inputs,
)
from kernelcast.models.predict import (
    ScoredConfigs,
    bind_arguments,
    configuration_row,
    no_prediction_reason,
    score_configurations,
)

from kernelcast.clang import KernelParam
from kernelcast.console import json_number
from kernelcast.errors import UsageError
from kernelcast.metrics import spearman
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

#: the most power caps one search takes
MAX_POWER_CAPS = 1000
#: the most (configuration x power cap) points one search scores
MAX_POINTS = 200_000


def power_caps(text: str | None, flag: str = "--power-caps", unit: str = "watts", what: str = "caps"
               ) -> list[float | None]:
    """``LO:HI:STEP`` in watts as a list of caps (``[None]``: no cap); with ``flag``, ``unit`` and
    ``what``, any such range (``--clocks`` in MHz)."""
    if not text:
        return [None]
    try:
        parts = [float(x) for x in text.split(":")]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected LO:HI:STEP in {unit}") from None
    if len(parts) != 3 or not all(math.isfinite(x) for x in parts) or parts[2] <= 0 or parts[0] > parts[1] \
            or parts[0] <= 0:
        raise UsageError(f"{flag} {text!r}: expected LO:HI:STEP with 0 < LO <= HI and STEP > 0")
    n = math.floor((parts[1] - parts[0]) / parts[2] + 1e-9) + 1
    if n > MAX_POWER_CAPS:
        raise UsageError(f"{flag} {text!r}: {n} {what}; at most {MAX_POWER_CAPS} (use a larger STEP)")
    return list(np.arange(parts[0], parts[1] + 1e-9, parts[2]))


def clocks(text: str | None) -> list[float | None]:
    """``LO:HI:STEP`` in MHz as a list of GPU core clocks (``[None]``: the profile's boost clock)."""
    return power_caps(text, "--clocks", "MHz", "clocks")


def enumerate_shapes(n: tuple[int, ...], warp: int, max_wg: int, max_items: list[int] | None,
                     shapes: bool) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(gsize, lsize) pairs: work-group sizes that are multiples of the warp up to the device
    maximum (FlipFlop Algorithm 2), the global size padded up to a multiple of each."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    dims = len(n)
    totals = [w for w in range(warp, max_wg + 1, warp)]
    for t in totals:
        cand: list[tuple[int, ...]]
        if dims == 1:
            cand = [(t,)]
        elif shapes:
            cand = [(x, t // x) + (1,) * (dims - 2) for x in range(1, t + 1) if t % x == 0]
        else:
            x = min(t, 2 ** int(math.log2(max(1, int(math.sqrt(t))))) * 2)
            cand = [(x, t // x) + (1,) * (dims - 2)] if t % x == 0 else []
        for ls in cand:
            if max_items and any(a > b for a, b in zip(ls, max_items)):
                continue
            g = tuple(int(math.ceil(a / b) * b) for a, b in zip(n, ls))
            out.append((g, ls))
    return out


def pareto(time_: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both time and energy."""
    order = np.lexsort((energy, time_))
    best_e = np.inf
    keep = []
    for i in order:
        if energy[i] < best_e:
            keep.append(i)
            best_e = energy[i]
    return np.array(keep, dtype=int)


#: Kernel Tuner's names of the work-group dimensions
KT_BLOCK_NAMES = ("block_size_x", "block_size_y", "block_size_z")
KT_FORMAT = "kernelcast-kernel-tuner-shortlist"


def kernel_tuner_shortlist(kernel_name: str, problem: tuple[int, ...], lsizes: list[tuple[int, ...]],
                           power_caps_w: list[float | None], pred_us: list[float], pred_energy_j: list[float | None],
                           *, objective: str, profile: str, clocks_mhz: list[float | None] | None = None
                           ) -> dict[str, Any]:
    """The chosen configurations (best first) as Kernel Tuner input: ``tune_params`` (the values of
    ``block_size_x/y/z`` and, with power caps, ``nvml_pwr_limit``, with clocks ``nvml_gr_clock``) and
    ``restrictions`` (one string
    that admits exactly the chosen combinations), for ``kernel_tuner.tune_kernel(name, source,
    problem_size, args, tune_params, restrictions=restrictions)``. Kernel Tuner launches
    ``ceil(problem / block)`` work-groups of ``block`` work-items, the global size kernelcast
    predicted (the problem padded up to a multiple of the work-group size)."""
    dims = len(problem)
    names = list(KT_BLOCK_NAMES[:dims])
    with_caps = any(c is not None for c in power_caps_w)
    ck = list(clocks_mhz) if clocks_mhz is not None else [None] * len(lsizes)
    with_clocks = any(c is not None for c in ck)
    if with_caps:
        names.append("nvml_pwr_limit")
    if with_clocks:
        names.append("nvml_gr_clock")
    configs: list[dict[str, object]] = []
    seen: set[tuple[int, ...]] = set()
    for rank, (ls, cap, clk, t, e) in enumerate(zip(lsizes, power_caps_w, ck, pred_us, pred_energy_j), start=1):
        values = tuple(int(x) for x in ls) + ((int(round(cap)) if cap is not None else 0,) if with_caps else ()) \
            + ((int(round(clk)) if clk is not None else 0,) if with_clocks else ())
        if values in seen:        # two caps that round to the same whole watt
            continue
        seen.add(values)
        c: dict[str, object] = dict(zip(names, values))
        c.update(rank=rank, pred_us=float(t), pred_energy_j=None if e is None or not math.isfinite(e) else float(e))
        configs.append(c)
    tune_params = {n: sorted({int(str(c[n])) for c in configs}) for n in names}
    clauses = ["(" + " and ".join(f"{n} == {c[n]}" for n in names) + ")" for c in configs]
    return {
        "format": KT_FORMAT, "version": 1, "kernel_name": kernel_name, "problem_size": list(problem),
        "objective": objective, "profile": profile,
        "tune_params": tune_params,
        "restrictions": [" or ".join(clauses)] if len(configs) > 1 or dims > 1 or with_caps or with_clocks else [],
        "configurations": configs,
        "usage": "kernel_tuner.tune_kernel(kernel_name, source, problem_size, arguments, tune_params, "
                 "restrictions=restrictions, lang='OpenCL')",
    }


def write_shortlist(path: str | os.PathLike[str], doc: dict[str, Any]) -> None:
    """Write a :func:`kernel_tuner_shortlist` as JSON, atomically (a temporary file renamed)."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------------------
# the tuning loop

#: the objectives of :func:`tune`
OBJECTIVES = ("time", "energy", "pareto")
#: :func:`tune` measures its ``measure_top`` picks in this many interleaved rounds and pools them (as
#: datagen's sweeps, :data:`datagen.generate.SWEEP_ROUNDS`) unless ``measure_rounds`` says otherwise
MEASURE_ROUNDS = 4

#: what :func:`tune` measures a configuration with: a real launch (:class:`models.measure.HarnessMeasure`)
#: or anything else that returns a :class:`Measurement` (its ``time.median_us`` is used where ``status`` is ok)
Measure = Callable[[Kernel, LaunchConfig], Measurement]


@dataclass
class TuneSpace:
    """The candidates of one tuning problem: one prediction row
    (:func:`models.predict.configuration_row`) per (configuration, power cap)."""

    problem: tuple[int, ...]
    rows: list[dict[str, Any]]


def tune_space(kernel: Kernel, params: Sequence[KernelParam], arg_specs: Sequence[str], problem: tuple[int, ...],
               configs: Sequence[tuple[tuple[int, ...], tuple[int, ...]]], caps: Sequence[float | None] = (None,),
               site_counts: dict[str, float] | None = None,
               launch_options: Callable[[tuple[int, ...], tuple[int, ...]], str] | None = None,
               clocks_mhz: Sequence[float | None] = (None,)) -> TuneSpace:
    """The rows of every (global size, local size) of ``configs`` (:func:`enumerate_shapes`) at every
    power cap and GPU core clock (``clocks_mhz``: the row's ``gr_clock_mhz``, NaN for the boost
    clock), with arguments bound for the problem size (``arg_specs``: ``NAME=VALUE`` as ``--arg``;
    the sizes follow the problem, not the padding) and the measured ``site_counts``;
    ``launch_options(gsize, lsize)``: the build options of a configuration, where they depend on the
    launch (Kernel Tuner's ``block_size_x``, ...)."""
    rows = []
    for g, ls in configs:
        a, _ = bind_arguments(list(params), list(arg_specs), problem, ls, kernel.name)
        k = replace(kernel, build_options=launch_options(g, ls)) if launch_options is not None else kernel
        for cap in caps:
            for clk in clocks_mhz:
                row = configuration_row(k, g, ls, a, cap, site_counts)
                if any(c is not None for c in clocks_mhz):
                    row["gr_clock_mhz"] = float("nan") if clk is None else float(clk)
                rows.append(row)
    return TuneSpace(tuple(problem), rows)


@dataclass
class Shots:
    """Configurations of the kernel measured beforehand (``tune --measured``): their prediction rows
    (:func:`models.predict.measured_frame`) and measured times (us)."""

    frame: pd.DataFrame
    time_us: np.ndarray


@dataclass
class TuneResult:
    """What :func:`tune` found. Per candidate (the rows of the space, in order): the model's raw and
    corrected time, the energy, the 90 % interval (NaN where the model has no residual calibration);
    ``order`` ranks them by time (by energy for the energy objective), ``chosen`` is the shortlist
    (the best ``top``, or the Pareto set); ``measured`` is what the feedback loop measured (None
    without ``measure``), ``choice`` the configuration to use."""

    rows: list[dict[str, Any]]
    scored: ScoredConfigs
    raw_time_us: np.ndarray
    time_us: np.ndarray
    energy_j: np.ndarray
    lower_us: np.ndarray
    upper_us: np.ndarray
    offset: Offset | None
    have_energy: bool
    objective: str
    order: np.ndarray
    chosen: np.ndarray
    label: str
    seconds: float
    measured: dict[str, Any] | None = None

    @property
    def choice(self) -> dict[str, Any] | None:
        """The fastest measured configuration where the loop measured one, else the first of the
        shortlist (None for an empty space)."""
        if self.measured is not None and self.measured.get("final") is not None:
            return dict(self.measured["final"])
        if not len(self.chosen):
            return None
        r = self.rows[int(self.chosen[0])]
        return {"gsize": r["gsize"], "lsize": r["lsize"], "pred_us": float(self.time_us[int(self.chosen[0])])}


def tune(kernel: Kernel, space: TuneSpace, profile: DeviceProfile, model: Predictor | None = None,
         measure: Measure | None = None, *, objective: str = "time", top: int = 10, shots: Shots | None = None,
         measure_top: int = 0, measure_rounds: int | None = None) -> TuneResult:
    """Score and rank the candidates of ``space`` with the analytical model of ``profile`` or the
    tabular ``model``; with ``shots`` correct every prediction by the kernel's offset from them
    (:mod:`models.fewshot`); with ``measure`` and ``measure_top`` K, measure K candidates one at a
    time, each the best by its prediction corrected by everything measured so far
    (:func:`measure_feedback`). :class:`UsageError` for an unknown objective, or the energy
    objective with a profile that has no energy calibration."""
    if objective not in OBJECTIVES:
        raise UsageError("--objective must be time, energy or pareto")
    rows = space.rows
    t0 = time.perf_counter()
    sc = score_configurations(pd.DataFrame(rows), profile, model)
    dt = time.perf_counter() - t0
    t_raw, e = sc.time_us, sc.energy_j
    if not np.isfinite(t_raw).any():
        why = next((w for w in map(no_prediction_reason, sc.explanation) if w), "no finite time")
        raise UsageError(f"no configuration of the search space has a prediction: {why}")
    prior = sc.calibration.prior if sc.calibration is not None else DEFAULT_SHRINK_PRIOR
    within_var = sc.calibration.within_var if sc.calibration is not None else None
    shape = sc.calibration.shape if sc.calibration is not None else None
    launch = launch_inputs([r["gsize"] for r in rows], [r["lsize"] for r in rows], analytical_balance(sc.explanation))
    offset: Offset | None = None
    shots_pred: list[float] = []
    shots_launch = np.zeros((0, 3))
    if shots is not None:
        msc = score_configurations(shots.frame, profile, model)
        shots_pred = [float(x) for x in msc.time_us]
        shots_launch = frame_launch_inputs(shots.frame, analytical_balance(msc.explanation))
        offset = fit_offset(shots.time_us, shots_pred, prior, within_var, shape, shape_inputs(shots_launch, shots_pred))
    t = offset.apply(t_raw, shape_inputs(launch, t_raw)) if offset is not None else t_raw
    lo, hi = sc.intervals(t, offset)
    have_energy = bool(np.isfinite(e).any())
    if objective == "energy" and not have_energy:
        raise UsageError("--objective energy needs a profile with energy calibration (this one has none)")
    if objective == "time" or not have_energy:
        order = np.argsort(t)
        chosen = order[:top]
    elif objective == "energy":
        order = np.argsort(e)
        chosen = order[:top]
    else:
        chosen = pareto(t, e)
        order = np.argsort(t)
    # a configuration the device cannot run (NaN: ``explanation['unrunnable']``) is never chosen
    chosen = np.asarray([i for i in chosen if np.isfinite(t[i])], dtype=int)
    label = "Pareto set (time vs energy)" if objective == "pareto" and have_energy else \
        f"best {len(chosen)} by predicted {objective if have_energy else 'time'}"
    result = TuneResult(rows, sc, t_raw, t, e, lo, hi, offset, have_energy, objective, order, chosen, label, dt)
    if measure is not None and measure_top:
        fb = _Feedback(kernel, rows, order, t_raw, sc, prior, within_var=within_var, shape=shape,
                       objective_time=objective != "energy" or not have_energy,
                       shots_us=[float(x) for x in shots.time_us] if shots is not None else [], shots_pred=shots_pred,
                       launch=launch, shots_launch=shots_launch)
        result.measured = measure_feedback(fb, measure, measure_top, top=top, rounds=measure_rounds)
    return result


class _Feedback:
    """What the measure-and-feedback loop needs: the candidates, the scoring model's raw predictions,
    the shots measured beforehand, the shrinkage and shape priors and the launch inputs
    (:func:`models.fewshot.launch_inputs`) of the candidates and of the shots."""

    def __init__(self, kernel: Kernel, rows: list[dict[str, Any]], order: np.ndarray, t_raw: np.ndarray,
                 scored: ScoredConfigs, prior: float, *, objective_time: bool, shots_us: list[float],
                 shots_pred: list[float], within_var: float | None = None, shape: Any = None,
                 launch: np.ndarray | None = None, shots_launch: np.ndarray | None = None) -> None:
        self.kernel, self.rows, self.order = kernel, rows, order
        self.within_var, self.shape = within_var, shape
        self.t_raw, self.scored, self.prior, self.objective_time = t_raw, scored, prior, objective_time
        self.shots_us, self.shots_pred = shots_us, shots_pred
        self.launch = launch if launch is not None else np.zeros((len(rows), 3))
        self.shots_launch = shots_launch if shots_launch is not None else np.zeros((0, 3))

    def correction(self, shots_us: list[float], shots_pred: list[float], shots: list[int]) -> Offset:
        """The kernel's correction from the shots measured beforehand and the measured candidates
        ``shots`` (their times ``shots_us`` and predictions ``shots_pred`` follow the earlier ones)."""
        launch = np.vstack([self.shots_launch, self.launch[shots]]) if shots else self.shots_launch
        return fit_offset(shots_us, shots_pred, self.prior, self.within_var, self.shape,
                          shape_inputs(launch, shots_pred) if len(shots_pred) else None)

    def corrected(self, offset: Offset) -> np.ndarray:
        """Every candidate's prediction corrected by ``offset``."""
        return offset.apply(self.t_raw, shape_inputs(self.launch, self.t_raw))


def _interval_json(lo: float, hi: float) -> list[float | None] | None:
    return [json_number(lo), json_number(hi)] if np.isfinite(lo) and np.isfinite(hi) else None


def measure_feedback(ctx: _Feedback, measure: Measure, measure_top: int, *, top: int = 10,
                     rounds: int | None = None) -> dict[str, Any]:
    """Measure the predicted best configurations one at a time, feeding each measurement back:
    after each one the kernel's offset is refitted (:mod:`models.fewshot`) and the candidates not
    yet measured are re-ranked by their corrected prediction (by the predicted energy for the
    energy objective, which measuring does not correct) before the next is chosen. Returns the
    measured rows with their ranks, Spearman rho and the gap of the predicted best to the measured
    best, the final offset, the re-ranked order (measured time where measured, else the corrected
    prediction; the first ``max(top, measure_top)`` and every measured one) and the final choice
    (the fastest measured configuration).

    Without a shape prior (no tabular model) the correction is one factor for the kernel, so it
    re-ranks the unmeasured candidates among the measured ones but not among themselves; with a
    tabular model's shape prior it depends on the configuration (:mod:`models.fewshot`), so a
    measurement moves the candidates near it more than those far from it and can reorder them.

    With ``rounds`` N (> 1; default :data:`MEASURE_ROUNDS`) the measured configurations are then
    measured N - 1 times more, one after the other in each round, and each one's rounds pooled (as
    datagen's sweeps): the final offset, the order and the final choice use the pooled times, since
    a host that slows down in phases makes a single measurement of each pick the fastest by chance."""
    rows, t_raw = ctx.rows, ctx.t_raw
    k_max = min(int(measure_top), len(rows))
    got: dict[int, float] = {}
    seq: list[int] = []
    runs: dict[int, list[Measurement]] = {}
    configs: dict[int, LaunchConfig] = {}
    shots_us, shots_pred = list(ctx.shots_us), list(ctx.shots_pred)
    mine: list[int] = []                # the candidates measured so far with a time
    for _ in range(k_max):
        now = ctx.corrected(ctx.correction(shots_us, shots_pred, mine))
        # never a configuration the device cannot run (no finite prediction)
        left = [int(i) for i in ctx.order if int(i) not in got and np.isfinite(ctx.t_raw[int(i)])]
        if not left:
            break
        if ctx.objective_time:      # stable: ties keep the initial order
            left.sort(key=lambda i: now[i])
        i = left[0]
        r = rows[i]
        binds = [ArgBinding(a["name"], a["kind"], a["dtype"], a["count"], a["value"], a.get("init", "random"))
                 for a in r["args"]]
        configs[i] = LaunchConfig(tuple(r["gsize"]), tuple(r["lsize"]), binds)
        m = measure(replace(ctx.kernel, build_options=rows[i]["build_options"]), configs[i])
        runs[i] = [m]
        val = m.time.median_us if m.status == "ok" and m.time else np.nan
        got[i] = val
        seq.append(i)
        if np.isfinite(val):
            shots_us.append(val)
            shots_pred.append(float(t_raw[i]))
            mine.append(i)
    again = [i for i in seq if np.isfinite(got[i])]
    for _ in range(int(rounds or MEASURE_ROUNDS) - 1):
        if len(again) < 2:
            break
        for i in again:
            runs[i].append(measure(replace(ctx.kernel, build_options=rows[i]["build_options"]), configs[i]))
    for i in seq:
        pooled = pool_rounds(runs[i])
        if pooled.status == "ok" and pooled.time is not None:
            got[i] = pooled.time.median_us
    shots_us = list(ctx.shots_us) + [got[i] for i in seq if np.isfinite(got[i])]
    shots_pred = list(ctx.shots_pred) + [float(t_raw[i]) for i in seq if np.isfinite(got[i])]
    idx = np.array(seq, dtype=int)
    meas = np.array([got[i] for i in seq])
    p = t_raw[idx]
    ok = np.isfinite(meas)
    prank = pd.Series(p).rank().to_numpy()
    mrank = pd.Series(meas).rank().to_numpy()
    out_rows = [{"gsize": rows[i]["gsize"], "lsize": rows[i]["lsize"],
                 "lsize_text": "x".join(map(str, rows[i]["lsize"])),
                 "pred_us": float(p[k]), "measured_us": json_number(meas[k]), "pred_rank": int(prank[k]),
                 "measured_rank": None if not ok[k] else int(mrank[k]),
                 "rounds": sum(m.status == "ok" for m in runs[i])} for k, i in enumerate(idx)]
    rho = gap = None
    if ok.sum() >= 2:
        best_pred = int(np.argmin(p))
        best_meas = int(np.nanargmin(meas))
        gap = json_number((meas[best_pred] - meas[best_meas]) / meas[best_meas] * 100) \
            if np.isfinite(meas[best_pred]) else None
        rho = json_number(spearman(p[ok], meas[ok]))
    offset = ctx.correction(shots_us, shots_pred, [i for i in seq if np.isfinite(got[i])])
    t_corr = ctx.corrected(offset)
    lo, hi = ctx.scored.intervals(t_corr, offset)
    key = np.array([got[i] if i in got and np.isfinite(got[i]) else t_corr[i] for i in range(len(rows))])
    reranked = sorted(range(len(rows)), key=lambda i: (key[i], 0 if i in got else 1))
    n_top = max(int(top), k_max)
    order = [{"rank": k + 1, "gsize": rows[i]["gsize"], "lsize": rows[i]["lsize"],
              "power_cap_w": json_number(rows[i]["power_cap_w"]),
              "measured_us": json_number(got[i]) if i in got else None, "pred_us": json_number(t_corr[i]),
              "interval_90_us": _interval_json(lo[i], hi[i])}
             for k, i in enumerate(reranked) if k < n_top or i in got]        # the measured ones always
    final = None
    if ok.any():
        b = int(idx[int(np.nanargmin(meas))])
        final = {"gsize": rows[b]["gsize"], "lsize": rows[b]["lsize"], "measured_us": json_number(got[b])}
    return {"rows": out_rows, "compared": bool(ok.sum() >= 2), "spearman": rho,
            "gap_pct": gap, "sequence": [int(i) for i in seq], "correction": offset.to_dict(),
            "shots_from_file": len(ctx.shots_us), "order": order, "final": final}

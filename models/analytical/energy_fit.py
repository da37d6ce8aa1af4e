"""GPU energy constants fitted to measured energy: ``kernelcast fit-energy --data DATASET --profile P``.

The GPU energy model (:mod:`models.analytical.energy`) has four constants a profile can set:

* ``idle_power_w``: the power at the boost clock with nothing but the kernel's static part, of which
  ``idle_clock_share`` follows ``f V^2`` (the clock tree: :func:`~models.analytical.energy.idle_power`)
  and the rest is constant;
* ``energy_per_op_fp32_fma_pj``: the energy of one fp32 FMA (the other operation classes follow it
  by :data:`~models.analytical.energy.OP_ENERGY_FACTOR`, or scale with it where the profile has
  their own values);
* ``voltage_floor_ratio``: the core voltage at the lowest clocks over the boost clock's.

A clock sweep of a compute-bound kernel (Kernel Tuner's synthetic fp32 kernel, the one its energy
module fits a power-frequency model on, imported with ``dataset import-kt``) determines three of
them: for each candidate floor the model's energy of every row at its measured time is split into
the idle power's constant part ``C``, its clock tree's part ``F``, the operations' part ``D`` and
the memory's part ``M``, and ``E = a C + F + b D + M`` is fitted in relative error (non-negative
least squares, a weak prior pulling ``a`` and ``b`` to 1, repeated until the power limit's clock
settles); the floor with the smallest residual wins. The clock tree's watts are kept as the profile
(or its rule, :func:`~models.analytical.energy.clock_tree_w`) has them: one kernel's sweep cannot
tell them from its operations' energy, which follows ``f V^2`` alike. Without a clock axis (fewer
than :data:`MIN_CLOCKS` distinct clocks) the floor is kept and only ``a``, ``b`` are fitted, which
one kernel at one clock barely separates: the prior keeps the model's split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.analytical.energy import OP_ENERGY_FACTOR, clock_tree_w, gpu_energy_constants

from kernelcast.errors import InputError

#: distinct clocks a dataset needs for the voltage floor to be fitted
MIN_CLOCKS = 3
#: the candidate voltage floors (ratio to the boost clock's voltage)
FLOOR_GRID = tuple(np.round(np.arange(0.40, 1.0001, 0.01), 2))
#: relative-error weight of the prior pulling each scale to 1 (the rows' noise over the prior's spread)
PRIOR_WEIGHT = 0.05
#: refits of the scales at one floor (the power limit's clock moves with the constants)
ITERATIONS = 12


@dataclass
class EnergyFit:
    """The fitted constants, what they replaced and how well they fit."""

    idle_w: float
    idle_share: float
    fma_pj: float
    floor: float
    before: dict[str, float]
    rows: int
    clocks: list[float]
    floor_fitted: bool
    rms_log: float
    rms_log_before: float
    scaled: dict[str, float] = field(default_factory=dict)

    def table(self) -> str:
        clk = (f"{len(self.clocks)} clocks {min(self.clocks):g}-{max(self.clocks):g} MHz" if self.clocks
               else "no clock column")
        lines = [f"fitted on {self.rows} rows with measured energy ({clk})",
                 f"  idle_power_w               {self.before['idle_w']:10.4g} -> {self.idle_w:10.4g} W",
                 f"  idle_clock_share           {self.before['idle_share']:10.4g} -> {self.idle_share:10.4g} "
                 "(the clock tree's watts kept)",
                 f"  energy_per_op_fp32_fma_pj  {self.before['fma_pj']:10.4g} -> {self.fma_pj:10.4g} pJ",
                 f"  voltage_floor_ratio        {self.before['floor']:10.4g} -> {self.floor:10.4g}"
                 + ("" if self.floor_fitted else f" (kept: fewer than {MIN_CLOCKS} clocks)")]
        lines += [f"  {k:<26} {self.before.get(k, float('nan')):10.4g} -> {v:10.4g} pJ (scaled with the FMA)"
                  for k, v in self.scaled.items()]
        lines.append(f"  rms log error of the rows' energy: {self.rms_log:.3f} (the profile's constants: "
                     f"{self.rms_log_before:.3f})")
        return "\n".join(lines)


def energy_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a measured energy and a measured time."""
    if "energy_j" not in frame.columns:
        return frame.iloc[:0]
    e = pd.to_numeric(frame["energy_j"], errors="coerce")
    t = pd.Series(np.nan, index=frame.index)
    for col in ("time_median_us", "time_mean_us"):
        if col in frame.columns:
            t = t.fillna(pd.to_numeric(frame[col], errors="coerce"))
    keep = np.isfinite(e) & (e > 0) & np.isfinite(t) & (t > 0)
    return frame[keep.to_numpy()].reset_index(drop=True)


def with_constants(profile: DeviceProfile, idle_w: float, idle_share: float, fma_pj: float, floor: float,
                    scaled: dict[str, float], source: str) -> DeviceProfile:
    """``profile`` with the four GPU energy constants (and ``scaled`` energies per operation) set."""
    p = DeviceProfile.from_dict(profile.to_dict())
    p.set("idle_power_w", float(idle_w), "W", source)
    p.set("idle_clock_share", float(idle_share), "1", source)
    p.set("energy_per_op_fp32_fma_pj", float(fma_pj), "pJ", source)
    p.set("voltage_floor_ratio", float(floor), "1", source)
    for k, v in scaled.items():
        p.set(k, float(v), "pJ", source)
    return p


def _terms(profile: DeviceProfile, frame: pd.DataFrame, analysis_dirs: Sequence[str], idle_w: float,
           idle_share: float) -> np.ndarray:
    """Per row the energy (J) of the model at the row's measured time, split as (the idle power's
    constant part, its part that follows the clock, the operations, the memory)."""
    model = AnalyticalModel(profile, analysis_dirs=analysis_dirs, at_measured_time=True)
    pred = model.predict(frame)
    out = np.full((len(frame), 4), np.nan)
    for i, ex in enumerate(pred.explanation):
        parts = ex.get("energy_parts_j") or {}
        t = float(pred.time_us[i]) * 1e-6
        if parts and np.isfinite(t):
            const = (1.0 - idle_share) * idle_w * t
            out[i] = (const, float(parts.get("static", np.nan)) - const, parts.get("compute", np.nan),
                      sum(float(parts.get(k, 0.0)) for k in ("l2", "shared", "dram")))
    return out


def _scales(terms: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """``a, b >= 0`` of ``y = a const + clock + b ops + mem`` in relative error, each pulled to 1."""
    from scipy.optimize import nnls

    ok = np.isfinite(terms).all(axis=1)
    c, f, d, m = (terms[ok, j] / y[ok] for j in range(4))
    lam = PRIOR_WEIGHT
    a_mat = np.vstack([np.c_[c, d], [[lam, 0.0], [0.0, lam]]])
    coef, _ = nnls(a_mat, np.r_[1.0 - f - m, lam, lam])
    return float(coef[0]), float(coef[1])


def _rms_log(terms: np.ndarray, y: np.ndarray) -> float:
    e = terms.sum(axis=1)
    ok = np.isfinite(e) & (e > 0)
    return float(np.sqrt(np.mean(np.log(e[ok] / y[ok]) ** 2))) if ok.any() else float("inf")


def fit_energy_constants(profile: DeviceProfile, frame: pd.DataFrame, analysis_dirs: Sequence[str] = (),
                         source: str = "fitted") -> tuple[DeviceProfile, EnergyFit]:
    """``profile`` with its GPU energy constants fitted to ``frame``'s measured energy (rows of one
    device), and the fit. The idle power's part that follows the clock (the clock tree) is kept at
    the profile's: a kernel's sweep cannot tell it from the dynamic energy of its operations, which
    follow ``f V^2`` alike; the constant part, the energy per operation and the floor are fitted.
    :class:`InputError` for a profile that is not a GPU's or has no energy constants (no TDP), or a
    frame without measured energy the model can split."""
    model = AnalyticalModel(profile, analysis_dirs=analysis_dirs)
    if not model.dev.is_gpu:
        raise InputError(f"{profile.describe()}: not a GPU profile; the fit is of the GPU energy model")
    consts = gpu_energy_constants(model.dev)
    if consts is None:
        raise InputError(f"{profile.describe()}: no GPU energy constants to fit (the profile has no tdp_w and "
                         "no energy values)")
    rows = energy_rows(frame)
    if len(rows) < 2:
        raise InputError(f"{len(rows)} row(s) with a measured energy and time; the fit needs at least 2")
    y = pd.to_numeric(rows["energy_j"]).to_numpy(dtype=np.float64)
    clocks: list[float] = []
    if "gr_clock_mhz" in rows.columns:
        ck = pd.to_numeric(rows["gr_clock_mhz"], errors="coerce").to_numpy(dtype=np.float64)
        clocks = sorted({float(c) for c in ck if np.isfinite(c) and c > 0})
    floor_fitted = len(clocks) >= MIN_CLOCKS
    own = {f"energy_per_op_{c}_pj": v for c in OP_ENERGY_FACTOR
           if c != "fp32_fma" and (v := profile.get(f"energy_per_op_{c}_pj")) is not None}
    share0 = consts.clock_share()
    before = {"idle_w": consts.idle_w, "idle_share": share0, "fma_pj": consts.fma_pj, "floor": consts.voltage_floor,
              **own}
    base_terms = _terms(profile, rows, analysis_dirs, consts.idle_w, share0)
    if not np.isfinite(base_terms).all(axis=1).any():
        raise InputError("the model gives no energy terms for these rows (no kernel source or analysis?)")
    best: tuple[float, float, float, float, float, dict[str, float]] | None = None
    for floor in (FLOOR_GRID if floor_fitted else (consts.voltage_floor,)):
        # the clock tree's watts at the boost clock, as the profile (or its rule at this floor) has them
        clock_w = clock_tree_w(model.dev, floor)
        idle, fma, scale = consts.idle_w, consts.fma_pj, 1.0
        for _ in range(ITERATIONS):
            share = clock_w / idle
            trial = with_constants(profile, idle, share, fma, floor, {k: v * scale for k, v in own.items()},
                                    source)
            a, b = _scales(_terms(trial, rows, analysis_dirs, idle, share), y)
            idle, fma, scale = clock_w + a * (idle - clock_w), fma * b, scale * b
            if abs(a - 1) < 1e-4 and abs(b - 1) < 1e-4:
                break
        share = clock_w / idle
        scaled = {k: v * scale for k, v in own.items()}
        err = _rms_log(_terms(with_constants(profile, idle, share, fma, floor, scaled, source), rows,
                              analysis_dirs, idle, share), y)
        if best is None or err < best[4] - 1e-9:
            best = (idle, share, fma, float(floor), err, scaled)
    assert best is not None
    idle, share, fma, floor, err, scaled = best
    fit = EnergyFit(idle_w=idle, idle_share=share, fma_pj=fma, floor=floor, before=before, rows=len(rows),
                    clocks=clocks, floor_fitted=floor_fitted, rms_log=err, rms_log_before=_rms_log(base_terms, y),
                    scaled=scaled)
    return with_constants(profile, idle, share, fma, floor, scaled, source), fit


def fit_summary(fit: EnergyFit) -> dict[str, Any]:
    """The fit as JSON-ready values."""
    return {"idle_power_w": fit.idle_w, "idle_clock_share": fit.idle_share, "energy_per_op_fp32_fma_pj": fit.fma_pj,
            "voltage_floor_ratio": fit.floor, "floor_fitted": fit.floor_fitted, "rows": fit.rows,
            "clocks_mhz": fit.clocks, "rms_log": fit.rms_log, "rms_log_before": fit.rms_log_before,
            "before": fit.before, "scaled": fit.scaled}

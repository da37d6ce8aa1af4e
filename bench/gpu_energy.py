"""GPU energy constants fitted on one GPU's clock sweep and carried to others: how well they rank.

Each ``--sweep DATASET=PROFILE`` is a dataset with measured energy over a clock axis (Kernel Tuner's
synthetic fp32 kernel, imported with ``dataset import-kt``): its profile's GPU energy constants are
fitted to it (:func:`models.analytical.energy_fit.fit_energy_constants`) and expressed relative to the GPU's
specification (the idle power's constant part / TDP, the power of fp32 FMAs at the peak rate / TDP,
the voltage floor; the idle power's part that follows the clock is never fitted).
Every sweep and every ``--score DATASET=PROFILE`` (measured energy, no fit) is then scored with:

* ``rule``: the profile as it is (the model's default constants where it has none);
* ``fitted here``: the constants fitted to this dataset (in-sample: not a prediction);
* ``from NAME``: another sweep's relative constants applied to this GPU's TDP and fp32 rate, the
  way a GPU without a sweep of its own gets them (out-of-sample);

each at the model's predicted time and at the row's measured time (a tuner that times but has no
meter): Spearman's rho of the energies over the dataset, the share of the measured top-k (k =
min(20, rows / 2)) in the predicted top-k, and the energy's median APE.

    PYTHONPATH=. python -m kernelcast.bench.gpu_energy --sweep A100_SWEEP=calib/profiles/a100-pcie.json
        --sweep A4000_SWEEP=calib/profiles/rtx-a4000.json [--score JETSON=calib/profiles/jetson-nano.json]
        [--analysis-cache DIR] [--json]
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.errors import InputError
from kernelcast.options import Parser


@dataclass
class Shares:
    """GPU energy constants relative to the GPU's specification."""

    idle_constant_of_tdp: float
    fma_power_of_tdp: float
    floor: float


def _spec(profile: Any) -> tuple[float, float]:
    tdp, gflops = profile.get("tdp_w"), profile.get("peak_fp32_gflops")
    if not tdp or not gflops:
        raise InputError(f"{profile.describe()}: needs tdp_w and peak_fp32_gflops to carry energy constants")
    return float(tdp), float(gflops) * 1e9 / 2.0


def shares_of(profile: Any, fit: Any) -> Shares:
    """A fit's constants relative to its GPU's TDP and fp32 FMA rate: the idle power's constant part,
    the power of fp32 FMAs at the peak rate, the voltage floor."""
    tdp, rate = _spec(profile)
    return Shares((1.0 - fit.idle_share) * fit.idle_w / tdp, fit.fma_pj * 1e-12 * rate / tdp, fit.floor)


def with_shares(profile: Any, s: Shares, source: str) -> Any:
    """``profile`` with constants from relative ones; the clock tree's watts (the idle power's part
    that follows the clock, never fitted) are the profile's own at that floor."""
    from kernelcast.models.analytical import AnalyticalModel
    from kernelcast.models.analytical.energy import clock_tree_w
    from kernelcast.models.analytical.energy_fit import with_constants

    tdp, rate = _spec(profile)
    clock_w = clock_tree_w(AnalyticalModel(profile).dev, s.floor)
    idle = s.idle_constant_of_tdp * tdp + clock_w
    return with_constants(profile, idle, clock_w / idle, s.fma_power_of_tdp * tdp / rate * 1e12, s.floor, {},
                           source)


def scores(profile: Any, frame: pd.DataFrame, analysis_dirs: list[str], at_measured_time: bool) -> dict[str, float]:
    """rho / top-k share / median APE of the model's energy on ``frame`` (one problem)."""
    from kernelcast.models.analytical import AnalyticalModel

    from kernelcast.metrics import ranking_scores

    y = pd.to_numeric(frame["energy_j"]).to_numpy(dtype=np.float64)
    pred = np.asarray(AnalyticalModel(profile, analysis_dirs=analysis_dirs,
                                      at_measured_time=at_measured_time).predict(frame).energy_j, dtype=np.float64)
    r = ranking_scores(pred, y, np.zeros(len(y)), top_k=20)
    ok = np.isfinite(pred) & (y > 0)
    ape = float(np.median(np.abs(pred[ok] / y[ok] - 1.0)) * 100) if ok.any() else float("nan")
    return {"rho": float(r["spearman_median"]), "top_k_pct": float(r["top_k_share_pct"]),
            "k": float(r["k_max"] or 0), "median_ape": ape}


def _pair(text: str, option: str) -> tuple[str, str]:
    if "=" not in text:
        raise InputError(f"{option} {text!r}: expected DATASET=PROFILE")
    d, p = text.split("=", 1)
    return d, p


def run(sweeps: list[tuple[str, str]], others: list[tuple[str, str]], analysis_dirs: list[str]) -> dict[str, Any]:
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.analytical.energy_fit import energy_rows, fit_energy_constants

    loaded: dict[str, tuple[pd.DataFrame, Any, bool]] = {}
    for (d, p), is_sweep in [(x, True) for x in sweeps] + [(x, False) for x in others]:
        name = Path(d).name
        if name in loaded:
            raise InputError(f"two datasets named {name!r}")
        rows = energy_rows(load_measured_frame(d)[0])
        if len(rows) < 2:
            raise InputError(f"{d}: fewer than 2 rows with measured energy")
        loaded[name] = (rows, load_profile(p), is_sweep)
    fitted: dict[str, tuple[Any, Shares, dict[str, Any]]] = {}
    for name, (rows, prof, is_sweep) in loaded.items():
        if is_sweep:
            fp, fit = fit_energy_constants(prof, rows, analysis_dirs, source=f"fitted: {name}")
            fitted[name] = (fp, shares_of(prof, fit),
                            {"rms_log": fit.rms_log, "rms_log_before": fit.rms_log_before})
    out: dict[str, Any] = {"shares": {n: vars(s) | extra for n, (_, s, extra) in fitted.items()}, "targets": {}}
    for name, (rows, prof, _) in loaded.items():
        variants: list[tuple[str, Any]] = [("rule", prof)]
        if name in fitted:
            variants.append(("fitted here", fitted[name][0]))
        variants += [(f"from {o}", with_shares(prof, s, f"transferred: {o}")) for o, (_, s, _) in fitted.items()
                     if o != name]
        out["targets"][name] = {"rows": len(rows), "variants": {
            v: {"predicted time": scores(p, rows, analysis_dirs, False),
                "measured time": scores(p, rows, analysis_dirs, True)} for v, p in variants}}
    return out


def format_result(res: dict[str, Any]) -> str:
    lines = ["relative constants fitted on each sweep (the idle power's constant part / TDP, fp32 FMAs' power at "
             "the peak rate / TDP, voltage floor):"]
    for n, s in res["shares"].items():
        lines.append(f"  {n:<28} idle constant {s['idle_constant_of_tdp']:.3f}  FMA power {s['fma_power_of_tdp']:.3f}"
                     f"  floor "
                     f"{s['floor']:.2f}  (rms log error {s['rms_log_before']:.3f} -> {s['rms_log']:.3f})")
    lines.append("")
    lines.append(f"{'dataset':<28} {'constants':<28} {'at predicted time: rho  top-k  medAPE':>38}   "
                 f"{'at measured time: rho  top-k  medAPE':>37}")
    for n, t in res["targets"].items():
        for v, sc in t["variants"].items():
            a, b = sc["predicted time"], sc["measured time"]
            lines.append(f"{n:<28} {v:<28} {a['rho']:>20.3f} {a['top_k_pct']:>5.0f}% {a['median_ape']:>6.1f}%   "
                         f"{b['rho']:>19.3f} {b['top_k_pct']:>5.0f}% {b['median_ape']:>6.1f}%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.gpu_energy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="append", default=[], metavar="DATASET=PROFILE",
                    help="a dataset with measured energy over a clock axis, fitted and carried to the others")
    ap.add_argument("--score", action="append", default=[], metavar="DATASET=PROFILE",
                    help="a dataset with measured energy, only scored")
    ap.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                    help="cache of the shared static analyses (kernelcast analyze); repeatable")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    try:
        if not args.sweep:
            raise InputError("give at least one --sweep DATASET=PROFILE")
        sweeps = [_pair(s, "--sweep") for s in args.sweep]
        others = [_pair(s, "--score") for s in args.score]
        for d, _ in sweeps + others:
            if not Path(d).is_dir():
                raise InputError(f"no such dataset directory: {d}")
        res = run(sweeps, others, list(args.analysis_cache))
    except (InputError, ValueError) as e:
        print(f"gpu_energy: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=1) if args.json else format_result(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())

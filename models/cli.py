"""``kernelcast predict`` and ``kernelcast tune``: the models in use."""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


def _usage(msg: str) -> Exception:
    from kernelcast.cli import UsageError

    return UsageError(msg)


# ---------------------------------------------------------------------------------------------
# profiles


def cached_profile_path(device: Any) -> Path:
    from kernelcast.config import cache_dir

    h = hashlib.sha256(device.identity.encode()).hexdigest()[:16]
    d = cache_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{h}.json"


def resolve_profile(spec: str | None, device_spec: str | None = None, *, quiet: bool = False) -> Any:
    """A profile by name/path, or the cached calibration of the device (made with a quick
    calibration, about 10 s, the first time)."""
    from calib.profile import DeviceProfile, ProfileError, load_profile

    if spec:
        try:
            return load_profile(spec)
        except (ProfileError, OSError, ValueError) as e:
            raise _usage(f"--profile {spec}: {e}") from None
    from kernelcast.cli import _device

    device = _device(device_spec)
    path = cached_profile_path(device)
    if path.is_file():
        return DeviceProfile.load(path)
    from calib.microbench import CalibOptions, run_calibration
    from instrument.harness import Harness

    if not quiet:
        print(f"note: no profile for {device.name} yet; running a quick calibration (kernelcast calib --quick), "
              f"cached in {path}", file=sys.stderr)
    with Harness(device, meter="none") as h:
        profile, _ = run_calibration(device, h, None, CalibOptions(quick=True), meter="none")
    profile.save(path)
    return profile


# ---------------------------------------------------------------------------------------------
# predict


def _arg_dicts(bindings: list[Any]) -> list[dict[str, Any]]:
    return [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.value is None else str(b.value), "init": b.init} for b in bindings]


def _bind(params: list[Any], given_specs: list[str], gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
          kernel_name: str) -> tuple[list[dict[str, Any]], list[str]]:
    from datagen.args import UnsupportedArgument, complete_args
    from kernelcast.argspec import SpecError, check_against_signature, parse_arg

    try:
        given = [parse_arg(a) for a in given_specs]
        check_against_signature(given, params, kernel_name)
        bindings, filled = complete_args(params, given, gsize, lsize)
    except SpecError as e:
        raise _usage(str(e)) from None
    except UnsupportedArgument as e:
        raise _usage(f"{e}; give it with --arg") from None
    return _arg_dicts(bindings), filled


def load_learned(model: str | None) -> tuple[Any, Any]:
    """The learned predictor and its blend weights, or (None, None)."""
    if not model:
        return None, None
    p = Path(model)
    if p.exists() and not (p / "config.json").is_file():
        raise _usage(f"--model {model}: not a model directory (no config.json); train one with 'kernelcast train'")
    try:
        from models.blend import BlendWeights
        from models.learned.predictor import LearnedPredictor

        lp = LearnedPredictor.from_pretrained(model)
    except Exception as e:  # noqa: BLE001 - any loading failure is bad input here
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _usage(f"--model {model}: cannot load: {why}") from None
    return lp, (BlendWeights.load(p) if p.is_dir() else None)


def predict_frame(frame: pd.DataFrame, profile: Any, learned: Any = None, weights: Any = None) -> pd.DataFrame:
    """Analytical, learned and blended predictions side by side for rows of ``frame``."""
    from models.analytical import AnalyticalModel
    from models.blend import BlendModel, BlendWeights

    an = AnalyticalModel(profile)
    pa = an.predict(frame)
    out = pd.DataFrame({"analytical_us": pa.time_us, "analytical_energy_j": pa.energy_j})
    out["explanation"] = pa.explanation
    if learned is not None:
        f2 = frame.copy()
        f2["analytical_log2_time"] = np.log2(np.maximum(pa.time_us, 1e-9))
        pl = learned.predict(f2)
        out["learned_us"] = pl.time_us
        out["learned_energy_j"] = pl.energy_j
        blend = BlendModel(an, learned, weights or BlendWeights())
        pb = blend.combine(pa, pl)
        out["blend_us"] = pb.time_us
        out["blend_kind"] = blend.weights.kind
    return out


def _read_configs(path: str) -> list[dict[str, str]]:
    p = Path(path)
    if not p.is_file():
        raise _usage(f"--configs {path}: no such file")
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise _usage(f"--configs {path}: no rows")
    if "gsize" not in rows[0]:
        raise _usage(f"--configs {path}: needs a 'gsize' column (and optionally 'lsize' and one per argument)")
    return rows


def cmd_predict(args: argparse.Namespace) -> int:
    from kernelcast.argspec import SpecError, parse_size
    from kernelcast.cli import fmt_table, load_kernel_source

    t0 = time.perf_counter()
    kernel, params = load_kernel_source(args.kernel, args.name, args.build_options or "")
    if args.configs:
        specs = _read_configs(args.configs)
    else:
        if not args.gsize:
            raise _usage("give --gsize (and --lsize), or --configs FILE.csv")
        specs = [{"gsize": args.gsize, "lsize": args.lsize or ""}]
    learned, weights = load_learned(args.model)
    rows, notes = [], set()
    pnames = {p.name for p in params}
    for i, s in enumerate(specs):
        try:
            g = parse_size(s["gsize"], "gsize")
            ls = parse_size(s["lsize"], "lsize") if s.get("lsize") else None
        except SpecError as e:
            raise _usage(f"configuration {i + 1}: {e}") from None
        if ls and any(gg % ll for gg, ll in zip(g, ls)):
            raise _usage(f"configuration {i + 1}: local size {ls} does not divide global size {g}")
        arg_specs = list(args.arg) + [f"{k}={v}" for k, v in s.items() if k in pnames and v not in (None, "")]
        a, filled = _bind(params, arg_specs, g, ls, kernel.name)
        notes.update(filled)
        rows.append({"source": kernel.source, "kernel_name": kernel.name, "build_options": kernel.build_options,
                     "gsize": list(g), "lsize": list(ls) if ls else None, "args": a,
                     "power_cap_w": args.power_cap if args.power_cap else np.nan})
    frame = pd.DataFrame(rows)
    profile = resolve_profile(args.profile, args.device, quiet=args.json)
    t1 = time.perf_counter()
    res = predict_frame(frame, profile, learned, weights)
    t_pred = time.perf_counter() - t1
    if args.json:
        out = []
        for r, (_, p) in zip(rows, res.iterrows()):
            d = {"gsize": r["gsize"], "lsize": r["lsize"], "args": r["args"],
                 "analytical": {"time_us": _num(p["analytical_us"]), "energy_j": _num(p["analytical_energy_j"])},
                 "explanation": p["explanation"]}
            if learned is not None:
                d["learned"] = {"time_us": _num(p["learned_us"]), "energy_j": _num(p["learned_energy_j"])}
                d["blend"] = {"time_us": _num(p["blend_us"]), "kind": p["blend_kind"]}
            out.append(d)
        print(json.dumps({"kernel": kernel.name, "profile": profile.device.name, "learned_model": args.model,
                          "predictions": out, "seconds": {"total": time.perf_counter() - t0, "predict": t_pred}},
                         indent=2, default=str))
        return 0
    if notes:
        print(f"note: arguments {', '.join(sorted(notes))} bound by simple selection (arrays of gsize elements, "
              f"scalars = gsize)", file=sys.stderr)
    if learned is None:
        print("note: no --model given: analytical model only (train one with 'kernelcast train')", file=sys.stderr)
    header = ["gsize", "lsize", "analytical us"] + (["learned us", "blend us"] if learned is not None else []) + \
        ["energy J", "bound", "occupancy", "coalescing", "intensity F/B"]
    table = []
    for r, (_, p) in zip(rows, res.iterrows()):
        ex = p["explanation"] or {}
        e = p["learned_energy_j"] if learned is not None and np.isfinite(p.get("learned_energy_j", np.nan)) \
            else p["analytical_energy_j"]
        table.append(["x".join(map(str, r["gsize"])), "x".join(map(str, r["lsize"])) if r["lsize"] else "auto",
                      p["analytical_us"]] + ([p["learned_us"], p["blend_us"]] if learned is not None else [])
                     + [None if not np.isfinite(e) else float(e), ex.get("bound", ex.get("error", "-")),
                        ex.get("occupancy"), ex.get("coalescing"), ex.get("arithmetic_intensity")])
    print(f"kernel {kernel.name}; profile {profile.device.name} ({profile.kind})"
          + (f"; blend: {weights.kind}" if weights is not None else ""))
    print(fmt_table(table, header))
    print(f"{len(rows)} configuration(s) predicted in {t_pred * 1e3:.1f} ms (energy '-': the profile has no energy "
          f"calibration)")
    return 0


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# ---------------------------------------------------------------------------------------------
# tune


def _caps(text: str | None) -> list[float | None]:
    if not text:
        return [None]
    try:
        parts = [float(x) for x in text.split(":")]
    except ValueError:
        raise _usage(f"--power-caps {text!r}: expected LO:HI:STEP in watts") from None
    if len(parts) != 3 or parts[2] <= 0 or parts[0] > parts[1] or parts[0] <= 0:
        raise _usage(f"--power-caps {text!r}: expected LO:HI:STEP with 0 < LO <= HI and STEP > 0")
    return list(np.arange(parts[0], parts[1] + 1e-9, parts[2]))


def enumerate_shapes(n: tuple[int, ...], warp: int, max_wg: int, max_items: list[int] | None,
                     shapes: bool) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(gsize, lsize) pairs: work-group sizes that are multiples of the warp up to the device
    maximum (FlipFlop Algorithm 2), the global size padded up to a multiple of each."""
    out = []
    dims = len(n)
    totals = [w for w in range(warp, max_wg + 1, warp)]
    for t in totals:
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


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    if len(a) < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def cmd_tune(args: argparse.Namespace) -> int:
    from kernelcast.argspec import SpecError, parse_size
    from kernelcast.cli import fmt_table, load_kernel_source
    from models.analytical import AnalyticalModel

    kernel, params = load_kernel_source(args.kernel, args.name, args.build_options or "")
    try:
        n = parse_size(args.gsize, "--gsize")
    except SpecError as e:
        raise _usage(str(e)) from None
    if args.objective not in ("time", "energy", "pareto"):
        raise _usage("--objective must be time, energy or pareto")
    caps = _caps(args.power_caps)
    profile = resolve_profile(args.profile, args.device)
    model = AnalyticalModel(profile)
    dev = profile.device
    warp = int(profile.get("warp_size") or dev.wg_multiple or 32)
    max_wg = int(profile.get("max_wg_size") or dev.max_work_group_size or 1024)
    if args.max_wg:
        max_wg = min(max_wg, args.max_wg)
    if caps != [None] and not (profile.get("tdp_w")):
        raise _usage("--power-caps needs a profile with tdp_w (a GPU profile); this one has none")
    configs = enumerate_shapes(n, warp, max_wg, None, args.shapes)
    if not configs:
        raise _usage(f"no valid work-group size: warp {warp} exceeds the maximum {max_wg}")
    rows = []
    for g, ls in configs:
        a, _ = _bind(params, list(args.arg), n, ls, kernel.name)   # sizes follow the problem, not the padding
        for cap in caps:
            rows.append({"source": kernel.source, "kernel_name": kernel.name, "build_options": kernel.build_options,
                         "gsize": list(g), "lsize": list(ls), "args": a, "power_cap_w": np.nan if cap is None else cap})
    frame = pd.DataFrame(rows)
    t0 = time.perf_counter()
    pred = model.predict(frame)
    dt = time.perf_counter() - t0
    t, e = pred.time_us, pred.energy_j
    have_energy = np.isfinite(e).any()
    if args.objective in ("energy", "pareto") and not have_energy:
        if args.objective == "energy":
            raise _usage("--objective energy needs a profile with energy calibration (this one has none)")
        print("note: the profile has no energy calibration: the Pareto set is over time only", file=sys.stderr)
    if args.objective == "time" or not have_energy:
        order = np.argsort(t)
        chosen = order[: args.top]
    elif args.objective == "energy":
        order = np.argsort(e)
        chosen = order[: args.top]
    else:
        chosen = pareto(t, e)
        order = np.argsort(t)
    header = ["#", "gsize", "lsize", "power cap W", "pred us", "pred energy J", "bound", "occupancy"]
    table = [[k + 1, "x".join(map(str, rows[i]["gsize"])), "x".join(map(str, rows[i]["lsize"])),
              None if not np.isfinite(rows[i]["power_cap_w"]) else rows[i]["power_cap_w"], t[i],
              None if not np.isfinite(e[i]) else e[i], pred.explanation[i].get("bound"),
              pred.explanation[i].get("occupancy")] for k, i in enumerate(chosen)]
    label = "Pareto set (time vs energy)" if args.objective == "pareto" and have_energy else \
        f"best {len(chosen)} by predicted {args.objective if have_energy else 'time'}"
    print(f"kernel {kernel.name}, problem {args.gsize}; {len(rows)} configurations scored in {dt * 1e3:.1f} ms "
          f"({len(rows) / max(dt, 1e-9):.0f}/s); profile {dev.name}")
    print(label)
    print(fmt_table(table, header))
    if args.measure_top:
        return _measure_top(args, kernel, rows, order[: args.measure_top], t)
    return 0


def _measure_top(args: argparse.Namespace, kernel: Any, rows: list[dict[str, Any]], idx: np.ndarray,
                 pred_us: np.ndarray) -> int:
    from instrument.harness import Harness
    from kernelcast.cli import _device, fmt_table
    from kernelcast.schema import ArgBinding, LaunchConfig

    device = _device(args.device)
    measured = []
    with Harness(device, meter="auto") as h:
        for i in idx:
            r = rows[i]
            binds = [ArgBinding(a["name"], a["kind"], a["dtype"], a["count"], a["value"], a.get("init", "random"))
                     for a in r["args"]]
            m = h.run(kernel, LaunchConfig(tuple(r["gsize"]), tuple(r["lsize"]), binds))
            measured.append(m.time.median_us if m.status == "ok" and m.time else np.nan)
    meas = np.array(measured)
    p = pred_us[idx]
    ok = np.isfinite(meas)
    prank = pd.Series(p).rank().to_numpy()
    mrank = pd.Series(meas).rank().to_numpy()
    table = [["x".join(map(str, rows[i]["lsize"])), p[k], meas[k], int(prank[k]),
              None if not ok[k] else int(mrank[k])] for k, i in enumerate(idx)]
    print(f"\nmeasured the predicted best {len(idx)} on {device.name}")
    print(fmt_table(table, ["lsize", "pred us", "measured us", "pred rank", "measured rank"]))
    if ok.sum() >= 2:
        best_pred = int(np.argmin(p))
        best_meas = int(np.nanargmin(meas))
        gap = (meas[best_pred] - meas[best_meas]) / meas[best_meas] * 100 if np.isfinite(meas[best_pred]) else np.nan
        print(f"Spearman rho (predicted vs measured) {_spearman(p[ok], meas[ok]):.3f}; the predicted best is "
              f"{gap:.1f} % slower than the measured best of these")
    return 0


# ---------------------------------------------------------------------------------------------
# blend


def cmd_blend(args: argparse.Namespace) -> int:
    from kernelcast.cli import fmt_table
    from models.blend import fit_on_validation

    if not (Path(args.model) / "metrics.json").is_file():
        raise _usage(f"--model {args.model}: not a trained model directory (no metrics.json)")
    if not Path(args.data).is_dir():
        raise _usage(f"--data {args.data}: no such dataset directory")
    profile = resolve_profile(args.profile, args.device)
    try:
        res = fit_on_validation(args.data, args.model, profile)
    except ValueError as e:
        raise _usage(str(e)) from None
    rows = [[m, res[m]["mape"], res[m]["mape_per_kernel"], res[m]["median_ape"], res[m]["spearman_all"],
             res[m]["spearman_per_kernel"]] for m in ("analytical", "learned", "blend")]
    print(f"validation split of {args.model}: {res['rows']} rows of {res['kernels']} kernels")
    print(fmt_table(rows, ["model", "MAPE %", "MAPE/kernel %", "median APE %", "rho", "rho/kernel"]))
    b = res["weights"]
    print(f"blend chosen: {b['kind']} (log2 t = {b['a']:.3f} log2 t_analytical + {b['b']:.3f} log2 t_learned "
          f"+ {b['c']:.3f}); written to {Path(args.model) / 'blend.json'}")
    return 0


# ---------------------------------------------------------------------------------------------
# parsers


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict time (and energy) of a kernel for launch configurations",
                       description="Predict a kernel's time (and energy where the profile has energy calibration) "
                                   "with the analytical model, the learned model and their blend, with the "
                                   "analytical explanation (bound, occupancy, coalescing).")
    p.add_argument("--kernel", required=True, help="OpenCL C source file")
    p.add_argument("--name", help="kernel name (needed when the file has several)")
    p.add_argument("--gsize", help="global size: N, NxM or NxMxK")
    p.add_argument("--lsize", help="local size")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC",
                   help="NAME=buffer:DTYPE:COUNT, NAME=local:DTYPE:COUNT or NAME=VALUE; others are inferred")
    p.add_argument("--configs", metavar="CSV", help="batch mode: columns gsize, lsize and any argument names")
    p.add_argument("--model", help="trained learned model directory (kernelcast train --out)")
    p.add_argument("--profile", help="device profile: a bundled name (a100, v100, h100, rtx4090) or a JSON path; "
                                     "default: this machine's device, calibrated on first use")
    p.add_argument("--device", help="OpenCL device whose profile to use when --profile is not given")
    p.add_argument("--power-cap", type=float, help="power cap in W (DVFS adjustment; needs tdp_w in the profile)")
    p.add_argument("--build-options", default="")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("blend", help="fit the analytical+learned blend on a trained model's validation split",
                       description="Predict the validation kernels of a trained model with the analytical and the "
                                   "learned model, fit the log-space blend, keep the candidate with the lowest "
                                   "validation MAPE (blend.json in the model directory), and print all three.")
    p.add_argument("--data", required=True, help="the dataset the model was trained on")
    p.add_argument("--model", required=True)
    p.add_argument("--profile")
    p.add_argument("--device")
    p.set_defaults(func=cmd_blend)

    p = sub.add_parser("tune", help="search launch configurations (and power caps) with the analytical model",
                       description="Enumerate valid work-group sizes (multiples of the warp up to the device "
                                   "limit; --shapes for every 2D block shape) and power caps, score them with the "
                                   "analytical model, and print the best or the time/energy Pareto set; "
                                   "--measure-top K measures the best K and compares the ranks.")
    p.add_argument("--kernel", required=True)
    p.add_argument("--name")
    p.add_argument("--gsize", required=True, help="problem global size: N, NxM or NxMxK (padded up per local size)")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC")
    p.add_argument("--shapes", action="store_true", help="every 2D/3D block shape, not one per size")
    p.add_argument("--power-caps", metavar="LO:HI:STEP", help="power caps in W, e.g. 100:250:25")
    p.add_argument("--objective", default="time", help="time, energy or pareto")
    p.add_argument("--top", type=int, default=10, help="rows to print for time/energy objectives")
    p.add_argument("--max-wg", type=int, help="cap the work-group size")
    p.add_argument("--profile")
    p.add_argument("--device")
    p.add_argument("--measure-top", type=int, metavar="K", help="measure the predicted best K on the device")
    p.add_argument("--build-options", default="")
    p.set_defaults(func=cmd_tune)

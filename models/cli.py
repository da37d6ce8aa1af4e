"""``kernelcast predict`` and ``kernelcast tune``: the models in use."""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.console import fmt_table, json_number, load_kernel_source, to_json
from kernelcast.errors import InputError, UsageError

log = logging.getLogger(__name__)


def _note(msg: str) -> None:
    print(f"note: {msg}", file=sys.stderr)


def _read_configs(path: str) -> list[dict[str, str]]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--configs {path}: no such file")
    try:
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"--configs {path}: not a CSV file ({e})") from None
    except OSError as e:
        raise UsageError(f"--configs {path}: cannot read: {e.strerror}") from None
    if not rows:
        raise UsageError(f"--configs {path}: no rows")
    if "gsize" not in rows[0]:
        raise UsageError(f"--configs {path}: needs a 'gsize' column (and optionally 'lsize' and one per argument)")
    return rows


def cmd_predict(args: argparse.Namespace) -> int:
    from calib.local import resolve_profile
    from kernelcast.argspec import parse_size
    from models.predict import bind_arguments, configuration_row, load_learned, predict_frame

    t0 = time.perf_counter()
    kernel, params = load_kernel_source(args.kernel, args.name, args.build_options or "")
    if args.configs:
        specs = _read_configs(args.configs)
    else:
        if not args.gsize:
            raise UsageError("give --gsize (and --lsize), or --configs FILE.csv")
        specs = [{"gsize": args.gsize, "lsize": args.lsize or ""}]
    learned, weights = load_learned(args.model)
    rows, notes = [], set()
    pnames = {p.name for p in params}
    for i, s in enumerate(specs):
        try:
            g = parse_size(s["gsize"], "gsize")
            ls = parse_size(s["lsize"], "lsize") if s.get("lsize") else None
        except InputError as e:
            raise UsageError(f"configuration {i + 1}: {e}") from None
        if ls and any(gg % ll for gg, ll in zip(g, ls)):
            raise UsageError(f"configuration {i + 1}: local size {ls} does not divide global size {g}")
        arg_specs = list(args.arg) + [f"{k}={v}" for k, v in s.items() if k in pnames and v not in (None, "")]
        a, filled = bind_arguments(params, arg_specs, g, ls, kernel.name)
        notes.update(filled)
        rows.append(configuration_row(kernel, g, ls, a, args.power_cap or None))
    frame = pd.DataFrame(rows)
    profile = resolve_profile(args.profile, args.device, on_calibrate=None if args.json else _note)
    t1 = time.perf_counter()
    res = predict_frame(frame, profile, learned, weights)
    t_pred = time.perf_counter() - t1
    if args.json:
        out = []
        for r, (_, p) in zip(rows, res.iterrows()):
            d = {"gsize": r["gsize"], "lsize": r["lsize"], "args": r["args"],
                 "analytical": {"time_us": json_number(p["analytical_us"]),
                                "energy_j": json_number(p["analytical_energy_j"])},
                 "explanation": p["explanation"]}
            if learned is not None:
                d["learned"] = {"time_us": json_number(p["learned_us"]), "energy_j": json_number(p["learned_energy_j"])}
                d["blend"] = {"time_us": json_number(p["blend_us"]), "kind": p["blend_kind"]}
            out.append(d)
        print(to_json({"kernel": kernel.name, "profile": profile.device.name, "learned_model": args.model,
                          "predictions": out, "seconds": {"total": time.perf_counter() - t0, "predict": t_pred}}))
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
        energy = p["learned_energy_j"] if learned is not None and np.isfinite(p.get("learned_energy_j", np.nan)) \
            else p["analytical_energy_j"]
        table.append(["x".join(map(str, r["gsize"])), "x".join(map(str, r["lsize"])) if r["lsize"] else "auto",
                      p["analytical_us"]] + ([p["learned_us"], p["blend_us"]] if learned is not None else [])
                     + [None if not np.isfinite(energy) else float(energy), ex.get("bound", ex.get("error", "-")),
                        ex.get("occupancy"), ex.get("coalescing"), ex.get("arithmetic_intensity")])
    print(f"kernel {kernel.name}; profile {profile.device.name} ({profile.kind})"
          + (f"; blend: {weights.kind}" if weights is not None else ""))
    print(fmt_table(table, header))
    print(f"{len(rows)} configuration(s) predicted in {t_pred * 1e3:.1f} ms (energy '-': the profile has no energy "
          f"calibration)")
    return 0


# ---------------------------------------------------------------------------------------------
# tune


def cmd_tune(args: argparse.Namespace) -> int:
    from calib.local import resolve_profile
    from kernelcast.argspec import parse_size
    from models.analytical import AnalyticalModel
    from models.predict import bind_arguments, configuration_row
    from models.tune import MAX_POINTS, enumerate_shapes, pareto, power_caps

    kernel, params = load_kernel_source(args.kernel, args.name, args.build_options or "")
    n = parse_size(args.gsize, "--gsize")
    if args.objective not in ("time", "energy", "pareto"):
        raise UsageError("--objective must be time, energy or pareto")
    if args.top < 1:
        raise UsageError("--top must be at least 1")
    if args.measure_top is not None and args.measure_top < 1:
        raise UsageError("--measure-top must be at least 1")
    if args.max_wg is not None and args.max_wg < 1:
        raise UsageError("--max-wg must be at least 1")
    caps = power_caps(args.power_caps)
    profile = resolve_profile(args.profile, args.device, on_calibrate=None if args.json else _note)
    model = AnalyticalModel(profile)
    dev = profile.device
    warp = int(profile.get("warp_size") or dev.wg_multiple or 32)
    max_wg = int(profile.get("max_wg_size") or dev.max_work_group_size or 1024)
    if args.max_wg:
        max_wg = min(max_wg, args.max_wg)
    if caps != [None] and not (profile.get("tdp_w")):
        raise UsageError("--power-caps needs a profile with tdp_w (a GPU profile); this one has none")
    configs = enumerate_shapes(n, warp, max_wg, None, args.shapes)
    if not configs:
        raise UsageError(f"no valid work-group size: warp {warp} exceeds the maximum {max_wg}")
    if len(configs) * len(caps) > MAX_POINTS:
        raise UsageError(f"{len(configs)} configurations x {len(caps)} power caps is more than {MAX_POINTS} points; "
                         f"narrow --power-caps or --max-wg")
    rows = []
    for g, ls in configs:
        a, _ = bind_arguments(params, list(args.arg), n, ls, kernel.name)   # sizes follow the problem, not the padding
        for cap in caps:
            rows.append(configuration_row(kernel, g, ls, a, cap))
    frame = pd.DataFrame(rows)
    t0 = time.perf_counter()
    pred = model.predict(frame)
    dt = time.perf_counter() - t0
    t, e = pred.time_us, pred.energy_j
    have_energy = np.isfinite(e).any()
    if args.objective in ("energy", "pareto") and not have_energy:
        if args.objective == "energy":
            raise UsageError("--objective energy needs a profile with energy calibration (this one has none)")
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
    if args.json:
        measured = _measure_top(args, kernel, rows, order[: args.measure_top], t) if args.measure_top else None
        print(to_json({
            "kernel": kernel.name, "problem": list(n), "profile": dev.name, "objective": args.objective,
            "selection": label, "configurations": len(rows), "seconds": dt,
            "chosen": [dict(zip(("rank", "gsize", "lsize", "power_cap_w", "pred_us", "pred_energy_j", "bound",
                                 "occupancy"), [r[0], rows[i]["gsize"], rows[i]["lsize"]] + r[3:]))
                       for r, i in zip(table, chosen)],
            "measured": measured}))
        return 0
    print(f"kernel {kernel.name}, problem {args.gsize}; {len(rows)} configurations scored in {dt * 1e3:.1f} ms "
          f"({len(rows) / max(dt, 1e-9):.0f}/s); profile {dev.name}")
    print(label)
    print(fmt_table(table, header))
    if args.measure_top:
        measured = _measure_top(args, kernel, rows, order[: args.measure_top], t)
        print(f"\nmeasured the predicted best {len(measured['rows'])} on {measured['device']}")
        print(fmt_table([[r["lsize_text"], r["pred_us"], r["measured_us"], r["pred_rank"], r["measured_rank"]]
                         for r in measured["rows"]], ["lsize", "pred us", "measured us", "pred rank", "measured rank"]))
        if measured["compared"]:
            print(f"Spearman rho (predicted vs measured) {_fnum(measured['spearman'])}; the predicted best is "
                  f"{_fnum(measured['gap_pct'], 1)} % slower than the measured best of these")
    return 0


def _fnum(x: float | None, digits: int = 3) -> str:
    return "nan" if x is None else f"{x:.{digits}f}"


def _measure_top(args: argparse.Namespace, kernel: Any, rows: list[dict[str, Any]], idx: np.ndarray,
                 pred_us: np.ndarray) -> dict[str, Any]:
    """Measure the predicted best configurations; their ranks, Spearman rho and the gap of the
    predicted best to the measured best."""
    from instrument.backends import select_device
    from instrument.harness import Harness
    from kernelcast.config import device_spec
    from kernelcast.metrics import spearman
    from kernelcast.schema import ArgBinding, LaunchConfig

    device = select_device(device_spec(args.device))
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
    out_rows = [{"gsize": rows[i]["gsize"], "lsize": rows[i]["lsize"],
                 "lsize_text": "x".join(map(str, rows[i]["lsize"])),
                 "pred_us": float(p[k]), "measured_us": json_number(meas[k]), "pred_rank": int(prank[k]),
                 "measured_rank": None if not ok[k] else int(mrank[k])} for k, i in enumerate(idx)]
    rho = gap = None
    if ok.sum() >= 2:
        best_pred = int(np.argmin(p))
        best_meas = int(np.nanargmin(meas))
        gap = json_number((meas[best_pred] - meas[best_meas]) / meas[best_meas] * 100) \
            if np.isfinite(meas[best_pred]) else None
        rho = json_number(spearman(p[ok], meas[ok]))
    return {"device": device.name, "rows": out_rows, "compared": bool(ok.sum() >= 2), "spearman": rho,
            "gap_pct": gap}


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
    p.add_argument("--json", action="store_true", help="print the chosen configurations (and measurements) as JSON")
    p.set_defaults(func=cmd_tune)

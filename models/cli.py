"""``kernelcast predict`` and ``kernelcast tune``: the models in use."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.local import resolve_profile
from kernelcast.datagen.dataset import existing_dataset
from kernelcast.models.bundled import NO_MODEL, choose_model, is_multi_device, with_profile
from kernelcast.models.fewshot import read_measured
from kernelcast.models.measure import HarnessMeasure, measure_site_counts
from kernelcast.models.predict import (
    arg_dicts,
    complete_bindings,
    configuration_row,
    load_learned,
    measured_frame,
    no_prediction_reason,
    predict_frame,
    predict_with_intervals,
    read_site_counts,
)
from kernelcast.models.static.batch import analyze_dataset, verify_shared
from kernelcast.models.tabular import TabularPredictor, is_tabular_dir
from kernelcast.models.tune import (
    MAX_POINTS,
    Shots,
    clocks,
    enumerate_shapes,
    kernel_tuner_shortlist,
    power_caps,
    tune,
    tune_space,
    write_shortlist,
)

from kernelcast.argspec import parse_size
from kernelcast.console import (
    fmt_table,
    json_number,
    launch_macros_used,
    load_kernel_source,
    options_for_launch,
    read_configs_csv,
    to_json,
)
from kernelcast.errors import InputError, UsageError
from kernelcast.options import (
    GSIZE_HELP,
    LSIZE_HELP,
    NAME_HELP,
    PROFILE_DEVICE_HELP,
    ROUNDS_HELP,
    add_alias,
    add_build_options,
    add_device,
    add_kernel_file,
    positive_float,
    positive_int,
)
from kernelcast.restrictions import restriction_mask
from kernelcast.schema import LaunchConfig

log = logging.getLogger(__name__)



def _note(msg: str) -> None:
    print(f"note: {msg}", file=sys.stderr)


def _note_missing_benches(profile: Any) -> None:
    """Say when a measured CPU profile lacks values of benchmarks this kernelcast's ``calib`` runs
    (``DeviceProfile.missing_cpu_benches``: e.g. a cached calibration made by an older version)."""
    missing = profile.missing_cpu_benches()
    if missing:
        _note(f"the profile has no {', '.join(missing)} values (calibrated before those benchmarks existed): the "
              f"model falls back for them (e.g. atomics and gathers as bytes only); 'kernelcast calib --out P.json' "
              f"measures them, then give --profile P.json")


def _span(lo: float, hi: float) -> str | None:
    """An interval as the tables print it (``None``, printed ``-``, where there is none)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    return f"{_num(lo)}-{_num(hi)}"


def _num(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}" if abs(x) < 100 else f"{x:.1f}"


def _interval_json(lo: float, hi: float) -> list[float | None] | None:
    return [json_number(lo), json_number(hi)] if np.isfinite(lo) and np.isfinite(hi) else None


def _read_measured(args: argparse.Namespace, kernel: Any, params: list[Any]) -> tuple[Any, pd.DataFrame, np.ndarray]:
    """The measured configurations of ``--measured`` as prediction rows and times."""
    ms = read_measured(args.measured, kernel, [p.name for p in params])
    mframe, m_us = measured_frame(kernel, params, ms, list(args.arg), getattr(args, "power_cap", None) or None)
    return ms, mframe, m_us


def _measured_notes(ms: Any, json_mode: bool) -> None:
    if json_mode:
        return
    for n in ms.notes:
        _note(n)
    if ms.skipped:
        _note(f"--measured {ms.path}: {ms.skipped} record(s) with a status other than ok left out")


def _check_local_sizes(rows: list[dict[str, Any]], profile: Any) -> None:
    """A local size the device (profile) cannot run is refused, as ``measure`` refuses it."""
    max_wg = profile.get("max_wg_size") or profile.device.max_work_group_size
    if not max_wg:
        return
    for i, r in enumerate(rows):
        if r["lsize"] and int(np.prod(r["lsize"])) > max_wg:
            where = f"configuration {i + 1}: " if len(rows) > 1 else ""
            raise UsageError(f"{where}work-group of {int(np.prod(r['lsize']))} work-items exceeds the maximum "
                             f"{int(max_wg)} of {profile.device.name}")


def cmd_predict(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.configs:
        specs = read_configs_csv(args.configs)
    else:
        if not args.gsize:
            raise UsageError("give --gsize (and --lsize), or --configs FILE.csv")
        specs = [{"gsize": args.gsize, "lsize": args.lsize or ""}]
    opts = args.build_options or ""
    used = launch_macros_used(args.kernel, opts)
    launch_opts = [opts] * len(specs)
    if used:                    # Kernel Tuner's block_size_x, ... : defined per configuration
        for i, s in enumerate(specs):
            try:
                g = parse_size(s["gsize"], "gsize")
                ls = parse_size(s["lsize"], "lsize") if s.get("lsize") else None
            except InputError as e:
                raise UsageError(f"configuration {i + 1}: {e}") from None
            launch_opts[i] = options_for_launch(opts, used, g, ls, f"configuration {i + 1}: " if args.configs else "")
    kernel, params = load_kernel_source(args.kernel, args.name, launch_opts[0])
    if args.counts and args.measure_counts:
        raise UsageError("give --counts FILE or --measure-counts, not both")
    given_counts = read_site_counts(args.counts) if args.counts else None
    learned, weights = load_learned(args.model if args.model != NO_MODEL else None)
    if args.suggest_shots:
        if not isinstance(learned, TabularPredictor):
            raise UsageError("--suggest-shots needs a tabular model (--model DIR of 'kernelcast train --kind tabular')")
        if args.suggest_shots >= len(specs):
            raise UsageError(f"--suggest-shots {args.suggest_shots}: choose fewer than the {len(specs)} "
                             f"configuration(s) given (--configs FILE.csv for more)")
        cal = learned.residual_calibration()
        if cal is None or cal.shape is None:
            raise UsageError(f"--suggest-shots: the model {args.model} stores no shape prior (it is fitted when the "
                             f"training dataset has 8 kernels or more: retrain with kernelcast train --kind tabular)")
    rows, notes = [], set()
    configs = []
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
        bindings, filled = complete_bindings(params, arg_specs, g, ls, kernel.name)
        notes.update(filled)
        configs.append(LaunchConfig(g, ls, bindings))
        k_i = kernel if launch_opts[i] == kernel.build_options else replace(kernel, build_options=launch_opts[i])
        rows.append(configuration_row(k_i, g, ls, arg_dicts(bindings), args.power_cap or None, given_counts))
    count_notes: list[str] = []
    if args.measure_counts:
        measured_counts, count_notes = measure_site_counts(kernel, configs, args.device)
        for r, c in zip(rows, measured_counts):
            r["site_counts"] = json.dumps(c) if c else ""
    frame = pd.DataFrame(rows)
    ms = mframe = m_us = None
    if args.measured:
        ms, mframe, m_us = _read_measured(args, kernel, params)
    profile = resolve_profile(args.profile, args.device, on_calibrate=None if args.json else _note)
    if not args.json:
        _note_missing_benches(profile)
    _check_local_sizes(rows, profile)
    if getattr(args, "clock", None):
        dev = getattr(profile, "device", None)
        if "GPU" not in str(getattr(dev, "device_type", "")) or not (profile.get("boost_clock_mhz")
                                                                      or getattr(dev, "max_clock_mhz", None)):
            raise UsageError("--clock needs a GPU profile with a boost clock (boost_clock_mhz)")
        frame["gr_clock_mhz"] = float(args.clock)
    choice = choose_model(args.model, profile)
    if choice.source == "bundled":
        learned, weights = load_learned(choice.path)
    learned = with_profile(learned, profile)
    # intervals and corrections are shown with a tabular model or measured configurations; the
    # outputs of the other cases are unchanged
    detailed = isinstance(learned, TabularPredictor) or ms is not None
    t1 = time.perf_counter()
    ps = None
    if detailed:
        ps = predict_with_intervals(frame, profile, learned, weights, mframe, m_us, suggest=args.suggest_shots or 0)
        res = ps.frame
    else:
        res = predict_frame(frame, profile, learned, weights)
    t_pred = time.perf_counter() - t1
    _check_finite(res)
    models = ps.models if ps is not None else []
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
            for m in models:
                d[m]["interval_90_us"] = _interval_json(p[f"{m}_lo_us"], p[f"{m}_hi_us"])
                if ps is not None and ps.offsets:
                    d[m]["uncorrected_time_us"] = json_number(p[f"{m}_raw_us"])
            if ps is not None and ps.offsets:
                d["measured_us"] = json_number(p["measured_us"])
            out.append(d)
        age = profile.age_days()
        doc: dict[str, Any] = {"kernel": kernel.name, "profile": profile.device.name, "learned_model": choice.path,
                               "model": choice.to_dict(),
                               "profile_origin": profile.origin, "profile_created": profile.created,
                               "profile_age_days": None if age is None else round(age, 2), "predictions": out,
                               "energy_transferred": profile.transferred_values()}
        if ps is not None:
            doc["intervals"] = {"level": 0.9, "none_because": {m: ps.notes[m] for m in models if m in ps.notes}}
            if ms is not None:
                doc["correction"] = {"measured": args.measured, "configurations": len(ms.configs),
                                     "skipped": ms.skipped, "models": {m: o.to_dict() for m, o in ps.offsets.items()}}
        if args.suggest_shots and ps is not None:
            doc["suggested_shots"] = [{"order": n + 1, "configuration": i + 1, "gsize": rows[i]["gsize"],
                                       "lsize": rows[i]["lsize"]} for n, i in enumerate(ps.suggested)]
        doc["seconds"] = {"total": time.perf_counter() - t0, "predict": t_pred}
        print(to_json(doc))
        return 0
    if notes:
        print(f"note: arguments {', '.join(sorted(notes))} bound by simple selection (arrays of gsize elements, "
              f"scalars = gsize)", file=sys.stderr)
    for msg in count_notes:
        _note(f"site counts not measured: {msg}")
    if learned is None and args.model == NO_MODEL:
        print("note: --model none: analytical model only", file=sys.stderr)
    elif learned is None:
        print("note: no --model given: analytical model only (train one with 'kernelcast train')", file=sys.stderr)
    elif choice.source == "bundled":
        print(f"model: {choice.describe()}", file=sys.stderr)
    if ps is None:
        if learned is None:
            _note("no 90% interval: no measured residuals of the analytical model on this device (a tabular model "
                  "stores them: 'kernelcast train --kind tabular', then --model)")
    else:
        if ms is not None:
            _measured_notes(ms, False)
        for m in models:
            if m in ps.notes:
                _note(f"{m}: {'no 90% interval: ' if not np.isfinite(res[f'{m}_lo_us']).any() else ''}{ps.notes[m]}")
    iv = ["90% interval"] if ps is not None else []
    header = ["gsize", "lsize", "analytical us"] + iv + \
        (["learned us"] + iv + ["blend us"] + iv if learned is not None else []) + \
        ["energy J", "bound", "occupancy", "coalescing", "intensity F/B"]
    order = {i: n + 1 for n, i in enumerate(ps.suggested)} if ps is not None and args.suggest_shots else None
    if order is not None:
        header.append("measure")
    table = []
    for i, (r, (_, p)) in enumerate(zip(rows, res.iterrows())):
        ex = p["explanation"] or {}
        energy = p["learned_energy_j"] if learned is not None and np.isfinite(p.get("learned_energy_j", np.nan)) \
            else p["analytical_energy_j"]
        cells: list[Any] = []
        for m in ["analytical"] + (["learned", "blend"] if learned is not None else []):
            cells.append(p[f"{m}_us"])
            if ps is not None:
                cells.append(_span(p[f"{m}_lo_us"], p[f"{m}_hi_us"]))
        table.append(["x".join(map(str, r["gsize"])), "x".join(map(str, r["lsize"])) if r["lsize"] else "auto"]
                     + cells + [None if not np.isfinite(energy) else float(energy),
                                ex.get("bound", ex.get("error", "-")), ex.get("occupancy"), ex.get("coalescing"),
                                ex.get("arithmetic_intensity")] + ([order.get(i)] if order is not None else []))
    print(f"kernel {kernel.name}; {profile.describe()}"
          + (f"; blend: {weights.kind}" if weights is not None else ""))
    if ps is not None and ps.offsets:
        for m, o in ps.offsets.items():
            unmeasured = ~np.isfinite(res["measured_us"].to_numpy(dtype=np.float64))
            factors = (res[f"{m}_us"] / res[f"{m}_raw_us"]).to_numpy(dtype=np.float64)[unmeasured]
            print(f"{m}: {o.describe(factors)}" if o.k else f"{m}: not corrected (no measured configuration it "
                                                             f"predicts)")
        n_meas = int(np.isfinite(res["measured_us"]).sum())
        if n_meas:
            print(f"{n_meas} of these configuration(s) were measured (--measured): their predictions are the "
                  f"measurement, without an interval")
    print(fmt_table(table, header))
    print(f"{len(rows)} configuration(s) predicted in {t_pred * 1e3:.1f} ms ({_energy_note(profile, res)})")
    if order is not None:
        print(f"measure the {len(order)} configuration(s) numbered in column 'measure' (kernelcast measure --json), "
              f"then give them with --measured: of these configurations they leave the least uncertainty about the "
              f"others under the model's shape prior")
    for line in _count_lines(res):
        print(line)
    return 0


def _check_finite(res: pd.DataFrame) -> None:
    """:class:`UsageError` naming the cause when a configuration's analytical time is not finite
    (the static analysis failed, the device cannot run the configuration, or the model produced no
    number): never a printed nan."""
    t = res["analytical_us"].to_numpy(dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(t))
    if not len(bad):
        return
    ex = res["explanation"].iloc[int(bad[0])]
    cause = no_prediction_reason(ex)
    where = f"configuration {int(bad[0]) + 1}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
    raise UsageError(f"{where}: no finite prediction: {cause or 'the analytical model returned no finite time'}")


def _count_lines(res: pd.DataFrame) -> list[str]:
    """What the device's compiler made of the kernel (registers, spills: AMD profiles; estimated
    registers elsewhere on GPUs), which
    data-dependent counts the analytical model took from a run on real inputs and which it
    assumed (the first configuration's; ``--json`` has every configuration's), the accesses it
    charges as gathers on a CPU device (``cpu_gathers``) and the library routines with a cheaper
    form there (``cpu_calls``)."""
    ex = res["explanation"].iloc[0] if len(res) else None
    if not isinstance(ex, dict):
        return []
    out = []
    comp = ex.get("compiled")
    if isinstance(comp, dict):
        # what the device's compiler made of the first configuration (AMD profiles)
        out.append(f"compiled: {comp['vgprs']} vector registers per work-item, "
                   + (f"{comp['spill_bytes'] / 1e6:,.1f} MB of register spills through the memory hierarchy"
                      if comp["spill_bytes"] > 0 else "no register spills")
                   + (f", {comp['vector_memory_insts']:,.0f} warp instructions of global vector memory "
                      "(one per 32-bit value per lane)" if "vector_memory_insts" in comp else ""))
    regs = ex.get("registers")
    if isinstance(regs, dict):
        # the registers estimated from the static analysis (GPUs the model cannot compile for)
        spills = "no spills"
        if regs["spilled"] > 0:
            spills = f"{regs['spilled']} spilled"
            if regs.get("in_time"):
                spills += f": {regs['spill_bytes'] / 1e6:,.1f} MB through the memory hierarchy"
        out.append(f"registers: {regs['per_work_item']} per work-item (estimated from the source"
                   + ("" if regs.get("in_time") else "; not counted in the time") + f"), {spills}")
    wg = ex.get("work_groups")
    if isinstance(wg, dict) and wg["working"] < wg["launched"]:
        # a grid larger than the kernel's work: the waves count the work-groups that do it
        out.append(f"work-groups: {wg['working']:,.0f} of {wg['launched']:,.0f} launched do the kernel's work (the "
                   f"others fail its guards and exit); {ex['waves']:,.0f} waves of them, the last "
                   f"{100 * ex.get('last_wave_fill', 1.0):.0f} % full")
    out += [f"gather:   {x}" for x in ex.get("cpu_gathers", [])]
    out += [f"call:     {x}" for x in ex.get("cpu_calls", [])]
    out += [f"measured: {x}" for x in ex.get("measured_counts", [])]
    out += [f"assumed:  {x}" for x in ex.get("assumed_counts", [])]
    if ex.get("assumed_counts"):
        out.append("(measure them on real inputs: --measure-counts with --arg NAME=@FILE.npy, or --counts FILE "
                   "from 'kernelcast measure --counts --json')")
    return out


def _energy_note(profile: Any, res: pd.DataFrame) -> str:
    """Where the energy column comes from: none, or the profile's constants (naming transferred ones)."""
    if not np.isfinite(res["analytical_energy_j"].to_numpy(dtype=float)).any():
        return "energy '-': the profile has no energy calibration"
    if not profile.has_energy:
        # the GPU energy model's constants derived from the profile's TDP and peak rates
        return ("energy from constants derived from the profile's TDP and fp32 rate, with per-byte energies "
                "transferred from the A100 (docs/energy.md)")
    tr = profile.transferred_values()
    return "energy from the profile's " + ("measured" if profile.kind == "measured" else "published") + \
        " constants" + (f"; measured on another GPU and transferred: {', '.join(tr)}" if tr else "")


# ---------------------------------------------------------------------------------------------
# tune


def _load_tune_model(model: str) -> Any:
    """The tabular model ``tune --model`` scores with (a CodeGen model is refused)."""
    p = Path(model)
    if p.is_dir() and not is_tabular_dir(p) and (p / "config.json").is_file():
        raise UsageError(f"tune --model {model}: a CodeGen model; tune scores configurations with a tabular model "
                         f"only (kernelcast train --kind tabular)")
    try:
        return TabularPredictor.load(p)
    except InputError as e:
        raise UsageError(f"--model {model}: cannot load: {str(e).splitlines()[0]}") from None


def _check_kt_format(args: argparse.Namespace) -> Path | None:
    """``--format kernel-tuner`` / ``--out``: checked before any work; the output path or None (stdout)."""
    if args.format != "kernel-tuner":
        if args.out:
            raise UsageError("--out goes with --format kernel-tuner")
        return None
    if args.json or args.measure_top:
        raise UsageError("--format kernel-tuner prints the shortlist only: drop --json / --measure-top")
    if not args.out:
        return None
    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory")
    if not out.parent.is_dir():
        raise UsageError(f"--out {args.out}: no such directory {out.parent}")
    return out


def cmd_tune(args: argparse.Namespace) -> int:
    if args.simulate:
        return cmd_tune_simulate(args)
    sim_only = [f for f, v in (("--budget", args.budget), ("--seed", args.seed), ("--restrictions", args.restrictions),
                               ("--dataset", args.dataset), ("--trace", args.trace), ("--plot", args.plot),
                               ("--analysis-cache", args.analysis_cache), ("--no-settle", args.no_settle),
                               ("--prior", args.prior), ("--fallback", args.fallback)) if v]
    if sim_only:
        raise UsageError(f"{sim_only[0]} goes with --simulate")
    if not args.kernel or not args.gsize:
        raise UsageError("tune needs --kernel and --gsize (or --simulate CACHE)")
    n = parse_size(args.gsize, "--gsize")
    opts = args.build_options or ""
    used = launch_macros_used(args.kernel, opts)
    # Kernel Tuner's block_size_x, ... are defined per configuration below; the signature is read
    # with a local size of 1
    kernel, params = load_kernel_source(args.kernel, args.name,
                                        options_for_launch(opts, used, n, (1,) * len(n)) if used else opts)
    if args.counts and args.measure_counts:
        raise UsageError("give --counts FILE or --measure-counts, not both")
    if args.measure_rounds is not None and not args.measure_top:
        raise UsageError("--measure-rounds goes with --measure-top")
    counts = read_site_counts(args.counts) if args.counts else None
    if args.objective not in ("time", "energy", "pareto"):
        raise UsageError("--objective must be time, energy or pareto")
    caps = power_caps(args.power_caps)
    clock_list = clocks(getattr(args, "clocks", None))
    if clock_list != [None] and args.measure_top:
        raise UsageError("--clocks with --measure-top: the harness does not set GPU clocks")
    kt_out = _check_kt_format(args)
    tab = _load_tune_model(args.model) if args.model and args.model != NO_MODEL else None
    ms = shots = None
    if args.measured:
        ms, mframe, m_us = _read_measured(args, kernel, params)
        shots = Shots(mframe, m_us)
    profile = resolve_profile(args.profile, args.device, on_calibrate=None if args.json else _note)
    if not args.json:
        _note_missing_benches(profile)
    choice = choose_model(args.model, profile)
    if choice.source == "bundled":
        tab = _load_tune_model(str(choice.path))
    tab = with_profile(tab, profile)
    args.model_choice = choice
    dev = profile.device
    warp = int(profile.get("warp_size") or dev.wg_multiple or 32)
    max_wg = int(profile.get("max_wg_size") or dev.max_work_group_size or 1024)
    if args.max_wg:
        max_wg = min(max_wg, args.max_wg)
    if caps != [None] and not (profile.get("tdp_w")):
        raise UsageError("--power-caps needs a profile with tdp_w (a GPU profile); this one has none")
    if clock_list != [None] and ("GPU" not in str(getattr(dev, "device_type", ""))
                                 or not (profile.get("boost_clock_mhz") or getattr(dev, "max_clock_mhz", None))):
        raise UsageError("--clocks needs a GPU profile with a boost clock (boost_clock_mhz)")
    if max_wg // max(warp, 1) > MAX_POINTS:     # a profile's limits bound the enumeration; say so
        raise UsageError(f"{max_wg // max(warp, 1)} work-group sizes (max {max_wg} / warp {warp}) is more than "
                         f"{MAX_POINTS}; lower --max-wg")
    configs = enumerate_shapes(n, warp, max_wg, None, args.shapes)
    if not configs:
        raise UsageError(f"no valid work-group size: warp {warp} exceeds the maximum {max_wg}")
    if len(configs) * len(caps) * len(clock_list) > MAX_POINTS:
        raise UsageError(f"{len(configs)} configurations x {len(caps)} power caps x {len(clock_list)} clocks is more "
                         f"than {MAX_POINTS} points; narrow --power-caps, --clocks or --max-wg")
    if args.measure_counts:
        # a data-dependent count is a property of the problem's data, not of the work-group size: one
        # counting launch at the first configuration serves them all
        g0, ls0 = configs[0]
        b0, _ = complete_bindings(params, list(args.arg), n, ls0, kernel.name)
        k0 = replace(kernel, build_options=options_for_launch(opts, used, g0, ls0)) if used else kernel
        (c0,), count_notes = measure_site_counts(k0, [LaunchConfig(g0, ls0, b0)], args.device)
        for msg in count_notes:
            _note(f"site counts not measured: {msg}")
        counts = c0
    space = tune_space(kernel, params, list(args.arg), n, configs, caps, counts,
                       launch_options=(lambda g, ls: options_for_launch(opts, used, g, ls)) if used else None,
                       clocks_mhz=clock_list)
    # the feedback loop measures only with --measure-top (the harness opens at its first launch)
    with HarnessMeasure(args.device) as measure:
        res = tune(kernel, space, profile, tab, measure if args.measure_top else None, objective=args.objective,
                   top=args.top, shots=shots, measure_top=args.measure_top or 0, measure_rounds=args.measure_rounds)
    measured = None if res.measured is None else {"device": measure.device_name, **res.measured}
    _print_tune(args, kernel, profile, n, res, measured, ms, tab, kt_out)
    return 0


def _read_restrictions(values: list[str], source: str) -> list[str]:
    """``--restrictions``: expressions, or a JSON file holding a list of them, ``{"restrictions":
    [...]}``, or a benchmark spec (``{"pairs": [...]}``: the restrictions of the pair whose cache or
    dataset is the ``--simulate`` source)."""
    out: list[str] = []
    for v in values:
        if not v.endswith(".json"):
            out.append(v)
            continue
        try:
            doc = json.loads(Path(v).read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"--restrictions {v}: cannot read it as JSON: {e}") from None
        if isinstance(doc, dict) and isinstance(doc.get("pairs"), list):
            src = Path(source).resolve()
            base = Path(v).parent
            match = [pr for pr in doc["pairs"] if isinstance(pr, dict) and any(
                isinstance(pr.get(k), str) and (base / pr[k]).resolve() == src for k in ("cache", "dataset"))]
            if not match:
                raise UsageError(f"--restrictions {v}: no pair of the spec has the cache or dataset {source}")
            doc = match[0].get("restrictions") or []
        elif isinstance(doc, dict):
            doc = doc.get("restrictions")
        if not isinstance(doc, list) or not all(isinstance(x, str) for x in doc):
            raise UsageError(f"--restrictions {v}: expected a list of expression strings")
        out.extend(doc)
    return out


def _simulation_model(args: argparse.Namespace) -> tuple[Any, Any, str]:
    """The model a simulated search ranks with, chosen here only: a saved tabular model (``--model``;
    one trained on several devices, such as the bundled GPU model, predicts with ``--profile``, which
    it then needs) or the analytical model of ``--profile``; none (the search runs on its
    measurements alone) without either. Returns (profile, tabular model, label)."""
    tab = _load_tune_model(args.model) if args.model else None
    if tab is not None:
        if is_multi_device(tab):
            if not args.profile:
                raise UsageError(f"--model {args.model} was trained on several devices: give --profile, the "
                                 f"profile of the cache's device")
            tab = with_profile(tab, resolve_profile(args.profile, None, on_calibrate=None))
        return tab.profile, tab, f"tabular {args.model}"
    if args.profile:
        profile = resolve_profile(args.profile, None, on_calibrate=None)
        return profile, None, f"analytical ({profile.device.name})"
    return None, None, ""


def cmd_tune_simulate(args: argparse.Namespace) -> int:
    """``tune --simulate CACHE``: the guided search replayed on a cache, a lookup per measurement."""
    from kernelcast.models.simulate import (  # deferred: only this mode reads caches
        dataset_rows,
        load_space,
        plot_simulation,
        prior_times,
        simulate,
        source_label,
        space_predictions,
    )

    if args.kernel or args.gsize or args.measure_top or args.measured or args.power_caps or args.format != "table":
        raise UsageError("--simulate takes no kernel, problem, measurements or output format: the cache is the "
                         "search space (--dataset, --profile or --model give the model its rows)")
    budget = args.budget or 20
    if args.fallback and not args.prior:
        raise UsageError("--fallback weighs several sources: give --prior")
    for opt, path in (("--trace", args.trace), ("--plot", args.plot)):
        if path and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{opt} {path}: no such directory {Path(path).parent}")
    if args.plot and not args.plot.endswith(".png"):
        raise UsageError(f"--plot {args.plot}: expected a .png file")
    if args.dataset and not Path(args.dataset).is_dir():
        raise UsageError(f"--dataset {args.dataset}: no such dataset directory")
    for d in args.analysis_cache:
        if not Path(d).is_dir():
            raise UsageError(f"--analysis-cache {d}: no such directory")
    restrictions = _read_restrictions(args.restrictions, args.simulate)
    space = load_space(args.simulate)
    full = len(space.keys)
    mask = restriction_mask(space.params, restrictions)
    space = space.subset(mask)
    if not np.isfinite(space.time_us).any():
        raise UsageError(f"the restrictions leave {len(space.keys)} of {full} configurations and none measured: "
                         f"nothing to search")
    # other devices' measurements of the kernel: one source each
    sources: list[str] = []
    prior_rows: list[np.ndarray] = []
    for src in args.prior:
        if Path(src).resolve() == Path(args.simulate).resolve():
            raise UsageError(f"--prior {src}: the searched cache itself (a prior is another device's measurements)")
        other = load_space(src)
        prior_rows.append(prior_times(space, other))
        name = source_label(other)
        sources.append(name if name not in sources else f"{name} ({Path(src).name})")
    profile, tab, label = _simulation_model(args)
    rows_from = args.dataset or (args.simulate if space.kind == "dataset" else None)
    if profile is not None and rows_from is None:
        raise UsageError("a Kernel Tuner cache has no kernel source for the model: give --dataset (the cache "
                         "imported with 'kernelcast dataset import-kt'), or no --profile/--model to search "
                         "without a model")
    pred = np.ones(len(space.keys))
    if profile is not None and rows_from is not None:
        own = Path(rows_from) / "analysis"
        dirs = list(args.analysis_cache) + ([str(own)] if own.is_dir() else [])
        pred = space_predictions(space, profile, tab, frame=dataset_rows(rows_from), analysis_dirs=dirs)
        if not np.isfinite(pred).any():
            raise InputError(f"{rows_from}: the model predicted none of the cache's configurations (do the "
                             f"dataset's kt_key values match the cache?)")
    if prior_rows:
        if profile is not None:
            prior_rows.append(pred)
            sources.append(label)
        pred = np.vstack(prior_rows)
    if not args.json:
        what = f"model {label or 'none (the measurements alone)'}" if not sources else \
            f"{len(sources)} sources weighted by the measurements: " + ", ".join(
                f"{j + 1} {n}" for j, n in enumerate(sources)) + (
                " (equal while none explains them)" if args.fallback else "")
        print(f"{space.source}: {len(space.keys)} configurations" + (f" ({full} before the restrictions)"
                                                                    if len(space.keys) < full else "")
              + f", device {space.device or '?'}; {what}; budget {budget}, seed {args.seed or 0}")
        head = f"{'#':>3} {'pick':<5} {'measured us':>12} {'predicted us':>13} {'error %':>8} {'best us':>11}  config"
        print(head + ("  (weights of sources 1..N)" if sources else ""))

    def show(r: Any) -> None:
        if args.json:
            return
        cfg = ",".join(f"{k}={v}" for k, v in r.config.items())
        m = "failed" if r.measured_us is None else f"{r.measured_us:.4g}"
        e = "" if r.error_pct is None else f"{r.error_pct:+.0f}"
        b = "" if r.best_us is None else f"{r.best_us:.4g}"
        pr = f"{r.predicted_us:.4g}" if np.isfinite(r.predicted_us) else "-"
        w = "  (" + " ".join(f"{x:.2f}" for x in r.weights) + ")" if r.weights else ""
        print(f"{r.step:>3} {r.pick:<5} {m:>12} {pr:>13} {e:>8} {b:>11}  {cfg}{w}")

    sim = simulate(space, pred, budget, seed=args.seed or 0, settle=not args.no_settle, restrictions=restrictions,
                   model=label, sources=sources, fallback=args.fallback, on_row=show)
    doc = sim.to_dict()
    if args.trace:
        Path(args.trace).write_text(to_json(doc) + "\n")
    if args.plot:
        plot_simulation(sim, args.plot)
    if args.json:
        print(to_json(doc))
        return 0
    choice = sim.choice
    print(f"\nstopped: {sim.stopped} after {len(sim.trace)} measurements")
    if choice is None:
        print("no configuration measured successfully")
    else:
        print(f"choice: {','.join(f'{k}={v}' for k, v in choice['config'].items())}: {choice['measured_us']:.4g} us "
              f"(measurement {choice['step']})")
    print(f"cache's best: {','.join(f'{k}={v}' for k, v in sim.optimum_config.items())}: {sim.optimum_us:.4g} us")
    if sim.sources and sim.trace and sim.trace[-1].weights:
        print("final weights: " + ", ".join(f"{n} {w:.2f}" for n, w in zip(sim.sources, sim.trace[-1].weights)))
    to5, to1 = sim.measurements_to(0.05), sim.measurements_to(0.01)
    print(f"fraction of the optimum: {sim.fraction_of_optimum:.3f} (optimum / choice); within 5 % after "
          f"{to5 if to5 else 'not within the budget'}, within 1 % after {to1 if to1 else 'not within the budget'}")
    for what, path in (("trace", args.trace), ("plot", args.plot)):
        if path:
            print(f"{what} written to {path}")
    return 0
def _tune_model_label(args: argparse.Namespace) -> str:
    choice = getattr(args, "model_choice", None)
    return choice.describe() if choice is not None else f"tabular {args.model}"


def _print_tune(args: argparse.Namespace, kernel: Any, profile: Any, n: tuple[int, ...], res: Any,
                measured: dict[str, Any] | None, ms: Any, tab: Any, kt_out: Path | None) -> None:
    """Print :func:`models.tune.tune`'s result as ``kernelcast tune`` does (a table or ``--json``, or
    the Kernel Tuner shortlist)."""
    rows, sc, t, t_raw, e = res.rows, res.scored, res.time_us, res.raw_time_us, res.energy_j
    lo, hi, offset, chosen, label, have_energy = res.lower_us, res.upper_us, res.offset, res.chosen, res.label, \
        res.have_energy
    dev = profile.device
    # intervals (and a correction) are shown with --model or --measured; the other outputs are unchanged
    detailed = tab is not None or ms is not None
    if args.objective in ("energy", "pareto") and not have_energy:
        print("note: the profile has no energy calibration: the Pareto set is over time only", file=sys.stderr)
    elif args.objective in ("energy", "pareto") and profile.transferred_values() and not args.json:
        print(f"note: energy uses constants measured on another GPU: {', '.join(profile.transferred_values())}",
              file=sys.stderr)
    explanation = sc.explanation
    with_clock = any("gr_clock_mhz" in r for r in rows)

    def clock_of(i: int) -> float | None:
        v = rows[i].get("gr_clock_mhz")
        return None if v is None or not np.isfinite(v) else float(v)

    header = ["#", "gsize", "lsize", "power cap W", "pred us"] + (["90% interval"] if detailed else []) + \
        ["pred energy J", "bound", "occupancy"] + (["clock MHz"] if with_clock else [])
    table = [[k + 1, "x".join(map(str, rows[i]["gsize"])), "x".join(map(str, rows[i]["lsize"])),
              None if not np.isfinite(rows[i]["power_cap_w"]) else rows[i]["power_cap_w"], t[i]]
             + ([_span(lo[i], hi[i])] if detailed else [])
             + [None if not np.isfinite(e[i]) else e[i], explanation[i].get("bound"), explanation[i].get("occupancy")]
             + ([clock_of(i)] if with_clock else [])
             for k, i in enumerate(chosen)]
    if args.format == "kernel-tuner":
        shortlist = kernel_tuner_shortlist(
            kernel.name, n, [tuple(rows[i]["lsize"]) for i in chosen],
            [None if not np.isfinite(rows[i]["power_cap_w"]) else float(rows[i]["power_cap_w"]) for i in chosen],
            [float(t[i]) for i in chosen], [float(e[i]) for i in chosen],
            objective=args.objective if have_energy else "time", profile=dev.name,
            clocks_mhz=[clock_of(i) for i in chosen] if with_clock else None)
        if kt_out is None:
            print(to_json(shortlist))
        else:
            write_shortlist(kt_out, shortlist)
            print(f"{len(shortlist['configurations'])} configurations ({label}) written to {kt_out} as Kernel Tuner "
                  f"tune_params + restrictions", file=sys.stderr)
        return
    dt = res.seconds
    if args.json:
        keys = ("rank", "gsize", "lsize", "power_cap_w", "pred_us", "pred_energy_j", "bound", "occupancy")
        chosen_json = []
        for r, i in zip(table, chosen):
            vals = [r[0], rows[i]["gsize"], rows[i]["lsize"]] + r[3:5] + r[6 if detailed else 5:]
            d = dict(zip(keys, vals))
            if with_clock:
                d["gr_clock_mhz"] = clock_of(i)
                d["clock_ratio"] = explanation[i].get("clock_ratio")
            if detailed:
                d["interval_90_us"] = _interval_json(lo[i], hi[i])
                if offset is not None:
                    d["uncorrected_pred_us"] = json_number(t_raw[i])
            chosen_json.append(d)
        doc: dict[str, Any] = {
            "kernel": kernel.name, "problem": list(n), "profile": dev.name, "objective": args.objective,
            "selection": label, "configurations": len(rows), "seconds": dt, "chosen": chosen_json,
            "measured": measured, "site_counts": {k: explanation[0].get(k, []) for k in ("measured_counts",
                                                                                           "assumed_counts")}}
        choice = getattr(args, "model_choice", None)
        doc["model"] = {"kind": sc.model if detailed else "analytical",
                        **(choice.to_dict() if choice is not None else {"path": args.model})}
        if detailed:
            doc["intervals"] = {"level": 0.9, "none_because": sc.note or None}
            if offset is not None and ms is not None:
                doc["correction"] = {"measured": args.measured, "configurations": len(ms.configs),
                                     "skipped": ms.skipped, **offset.to_dict()}
        print(to_json(doc))
        return
    if ms is not None:
        _measured_notes(ms, False)
    if detailed and sc.note:
        _note(f"no 90% interval: {sc.note}")
    print(f"kernel {kernel.name}, problem {args.gsize}; {len(rows)} configurations scored in {dt * 1e3:.1f} ms "
          f"({len(rows) / max(dt, 1e-9):.0f}/s); profile {dev.name}"
          + (f"; model {_tune_model_label(args)}" if tab is not None else ""))
    if offset is not None:
        print(offset.describe(t / t_raw) if offset.k else "not corrected: no measured configuration the model "
                                                          "predicts")
    print(label)
    print(fmt_table(table, header))
    for line in _count_lines(pd.DataFrame({"explanation": explanation[:1]})):
        print(line)
    if measured is not None:
        rounds = max((r["rounds"] for r in measured["rows"]), default=1)
        print(f"\nmeasured the predicted best {len(measured['rows'])} on {measured['device']}"
              + (f", then in {rounds} interleaved rounds (pooled)" if rounds > 1 else ""))
        pred_head = "uncorrected pred us" if offset is not None else "pred us"
        print(fmt_table([[r["lsize_text"], r["pred_us"], r["measured_us"], r["pred_rank"], r["measured_rank"]]
                         for r in measured["rows"]], ["lsize", pred_head, "measured us", "pred rank", "measured rank"]))
        if measured["compared"]:
            print(f"Spearman rho (predicted vs measured) {_fnum(measured['spearman'])}; the predicted best is "
                  f"{_fnum(measured['gap_pct'], 1)} % slower than the measured best of these")
        _print_reranked(measured, sc.note)


def _fnum(x: float | None, digits: int = 3) -> str:
    return "nan" if x is None else f"{x:.{digits}f}"


def _print_reranked(measured: dict[str, Any], interval_note: str) -> None:
    off = measured["correction"]
    n_own = len(measured["rows"])
    print(f"\nafter {n_own} measurement(s): "
          + (f"corrected by {'configuration (shape correction), offset ' if off.get('shape') else ''}"
             f"x{off['factor']:.3g} from {off['k']} measured configuration{'s' if off['k'] != 1 else ''}"
             f" (shrunk by {off['k']}/({off['k']}+{off['prior']:.3g}))" if off["k"] else "no correction (no "
             "measurement succeeded)"))
    print("re-ranked (measured time where measured, else the corrected prediction):")
    table = [[o["rank"], "x".join(map(str, o["gsize"])), "x".join(map(str, o["lsize"])), o["measured_us"],
              o["pred_us"], _span(*(o["interval_90_us"] or (np.nan, np.nan)))] for o in measured["order"]]
    print(fmt_table(table, ["#", "gsize", "lsize", "measured us", "pred us", "90% interval"]))
    if interval_note:
        print(f"(90% interval '-': {interval_note})")
    f = measured["final"]
    if f is None:
        print("final choice: none (no measurement succeeded)")
        return
    print(f"final choice: gsize {'x'.join(map(str, f['gsize']))} lsize {'x'.join(map(str, f['lsize']))}, measured "
          f"{_num(f['measured_us'])} us (the fastest of {n_own} measured)")


# ---------------------------------------------------------------------------------------------
# parsers


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("predict", help="predict time (and energy) of a kernel for launch configurations",
                       description="Predict a kernel's time (and energy where the profile has energy calibration) "
                                   "with the analytical model, the learned model and their blend, with the "
                                   "analytical explanation (bound, occupancy, coalescing). A tabular model "
                                   "adds 90% intervals (out-of-fold residual quantiles); --measured corrects "
                                   "every prediction by the kernel's offset from measured configurations (with a "
                                   "tabular model also by configuration: a shape correction over size, "
                                   "work-group size, the analytical compute/memory balance and the prediction).")
    add_kernel_file(p)
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--gsize", help=GSIZE_HELP)
    p.add_argument("--lsize", help=LSIZE_HELP)
    p.add_argument("--arg", action="append", default=[], metavar="SPEC",
                   help="NAME=buffer:DTYPE:COUNT, NAME=local:DTYPE:COUNT, NAME=@FILE.npy (the file's values) or "
                        "NAME=VALUE; others are inferred")
    p.add_argument("--configs", metavar="CSV", help="batch mode: columns gsize, lsize and any argument names")
    p.add_argument("--model", help="trained learned model directory (kernelcast train --out); a tabular model adds "
                                   "90%% intervals. Default: with a GPU profile the bundled GPU model "
                                   "(docs/gpu-model.md), else none; 'none': the analytical model alone")
    p.add_argument("--counts", metavar="FILE",
                   help="measured loop trips and branch outcomes of the kernel's data-dependent sites (the JSON of "
                        "'kernelcast measure --counts --json', or an object of site -> count), used for every "
                        "configuration instead of the static guesses")
    p.add_argument("--measure-counts", action="store_true",
                   help="measure those counts first: one instrumented launch per configuration on the local device "
                        "(--device) with the --arg values and files (at most 64 configurations)")
    p.add_argument("--measured", metavar="FILE",
                   help="measured configurations of this kernel (CSV: gsize, lsize, time_us and argument columns; or "
                        "the JSON of 'kernelcast measure --json', one object or a list): every prediction is "
                        "corrected by the kernel's offset log2(measured/predicted), and with a tabular model's "
                        "shape prior by how close it is to the measured configurations")
    p.add_argument("--suggest-shots", type=positive_int, metavar="K",
                   help="with a tabular --model and several configurations (--configs): which K of them to measure "
                        "(kernelcast measure --json) to correct the model for this kernel with --measured: the ones "
                        "that leave the least uncertainty about the others under its shape prior, chosen before "
                        "measuring (given the --measured ones)")
    p.add_argument("--profile", help="device profile: a bundled name (a100, v100, h100, rtx4090) or a JSON path; "
                                     "default: this machine's device, calibrated on first use")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--power-cap", type=positive_float,
                   help="power cap in W (DVFS adjustment; needs tdp_w in the profile)")
    p.add_argument("--clock", type=positive_float, metavar="MHZ",
                   help="GPU core clock in MHz (as Kernel Tuner's nvml_gr_clock): all but DRAM-bound time scales "
                        "with it, the energy's core voltage follows it, the power limit (--power-cap, else the TDP "
                        "above the boost clock) may lower it; docs/energy.md")
    add_build_options(p)
    p.add_argument("--json", action="store_true", help="print the predictions as JSON")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("tune", help="search launch configurations (and power caps) with the analytical model",
                       description="Enumerate valid work-group sizes (multiples of the warp up to the device "
                                   "limit; --shapes for every 2D block shape) and power caps, score them with the "
                                   "analytical model (or a tabular model, --model), and print the best or the "
                                   "time/energy Pareto set; --measure-top K measures the best K one at a time, "
                                   "corrects the rest by the measurements, measures the K again in interleaved "
                                   "rounds, and compares the ranks.")
    add_kernel_file(p, required=False)
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--gsize", help=GSIZE_HELP + " (the problem; padded up per local size; required without --simulate)")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC",
                   help="bind one argument, as in predict (repeatable)")
    p.add_argument("--simulate", metavar="CACHE",
                   help="replay the model-guided search on a Kernel Tuner cache (.json, .json.gz), a T4 file or a "
                        "dataset imported from one: each measurement is a lookup; prints the trace and the choice "
                        "against the cache's best")
    p.add_argument("--budget", type=positive_int, metavar="N", help="with --simulate: at most N measurements (20)")
    p.add_argument("--seed", type=int, help="with --simulate: the seed of ties and space-filling picks (0)")
    p.add_argument("--restrictions", action="append", default=[], metavar="EXPR",
                   help="with --simulate: a Kernel Tuner-style restriction over the tune parameters, e.g. "
                        "'block_size_x*block_size_y<=1024' (repeatable), or a JSON file: a list of them or a "
                        "tuning benchmark spec (the pair of this cache)")
    p.add_argument("--prior", action="append", default=[], metavar="CACHE_OR_DATASET",
                   help="with --simulate: the kernel's measurements on another device (a Kernel Tuner cache, T4 "
                        "file or imported dataset) as one source of predictions (repeatable; with --profile or "
                        "--model the model's prediction is one more): the sources are weighted after each "
                        "measurement by how well each explains the measurements so far, the trace prints the "
                        "weights")
    p.add_argument("--fallback", action="store_true",
                   help="with --simulate and --prior: the sources keep their equal weights while none explains the "
                        "measurements (the best one's residual variance above the search's least shape variance)")
    p.add_argument("--dataset", metavar="DIR", help="with --simulate CACHE: the cache imported with 'kernelcast "
                                                    "dataset import-kt', the rows the model predicts")
    p.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                   help="a cache of the shared static analyses of imported rows (kernelcast analyze --cache; "
                        "each dataset's own DATASET/analysis is read too; with --simulate); repeatable")
    p.add_argument("--no-settle", action="store_true",
                   help="with --simulate: spend the whole budget (default: stop when no unmeasured configuration "
                        "is likely to beat the best)")
    p.add_argument("--trace", metavar="OUT.json", help="with --simulate: write the trace as JSON")
    p.add_argument("--plot", metavar="OUT.png", help="with --simulate: plot the best found against measurements")
    p.add_argument("--shapes", action="store_true", help="every 2D/3D block shape, not one per size")
    p.add_argument("--power-caps", metavar="LO:HI:STEP", help="power caps in W, e.g. 100:250:25")
    p.add_argument("--clocks", metavar="LO:HI:STEP",
                   help="GPU core clocks in MHz, e.g. 600:1400:100 (as Kernel Tuner's nvml_gr_clock; a GPU profile; "
                        "docs/energy.md): the energy-optimal clock with --objective energy or pareto")
    p.add_argument("--objective", default="time", help="time, energy or pareto")
    p.add_argument("--top", type=positive_int, default=10, help="rows to print for time/energy objectives")
    p.add_argument("--max-wg", type=positive_int, help="cap the work-group size")
    p.add_argument("--profile",
                   help="device profile: a bundled name or a JSON path (default: this device's calibration)")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--model", metavar="DIR", help="score with a tabular model (kernelcast train --kind tabular) "
                                                  "instead of the analytical model; adds 90%% intervals. Default: "
                                                  "with a GPU profile the bundled GPU model (docs/gpu-model.md), "
                                                  "else none; 'none': the analytical model alone. With --simulate: "
                                                  "only the model given (a model of several GPUs, such as "
                                                  "models/bundled/gpu, with --profile), else the analytical model "
                                                  "of --profile")
    p.add_argument("--counts", metavar="FILE",
                   help="measured loop trips and branch outcomes of the kernel's data-dependent sites (as predict "
                        "--counts), for every configuration")
    p.add_argument("--measure-counts", action="store_true",
                   help="measure them first: one instrumented launch on the local device with the --arg values and "
                        "files (NAME=@FILE.npy)")
    p.add_argument("--measured", metavar="FILE", help="measured configurations of this kernel (as predict --measured): "
                                                      "predictions corrected by the kernel's offset (and shape, "
                                                      "with --model)")
    p.add_argument("--measure-top", type=positive_int, metavar="K",
                   help="measure the predicted best K on the device, one at a time, re-ranking the rest by the "
                        "corrected prediction after each measurement")
    p.add_argument("--rounds", dest="measure_rounds", type=positive_int, default=None, metavar="N",
                   help=ROUNDS_HELP + " (with --measure-top: the K configurations measured again in N - 1 interleaved "
                                      "rounds and chosen by their pooled times; 4; 1: each once)")
    add_alias(p, "--measure-rounds", "--rounds")
    add_build_options(p)
    p.add_argument("--json", action="store_true", help="print the chosen configurations (and measurements) as JSON")
    p.add_argument("--format", default="table", choices=["table", "kernel-tuner"],
                   help="kernel-tuner: the chosen configurations as Kernel Tuner tune_params + restrictions (JSON)")
    p.add_argument("--out", metavar="FILE", help="with --format kernel-tuner: write the JSON here (default: stdout)")
    p.set_defaults(func=cmd_tune)
    add_analyze_parser(sub)


# ---------------------------------------------------------------------------------------------
# analyze: the static analyses an imported dataset needs, once per distinct key


def cmd_analyze(args: argparse.Namespace) -> int:
    roots = [Path(d) for d in args.datasets]
    for r in roots:
        manifest, _ = existing_dataset(r)
        if manifest is None:
            raise UsageError(f"{r}: not a dataset (no manifest)")
    out = []
    for r in roots:
        st = analyze_dataset(r, cache_dir=args.cache, workers=args.workers)
        info = {"dataset": str(r), **st.to_dict()}
        if args.verify:
            info["verify"] = verify_shared(r, cache_dir=args.cache, samples=args.verify)
        out.append(info)
    if args.json:
        print(to_json(out[0] if len(out) == 1 else out))
        return 0
    rows = [[i["dataset"], i["configurations"], i["distinct"], i["cached"], i["analysed"], i["failed"], i["skipped"],
             f"{i['seconds']:.1f}", f"{i['configurations_per_s']:.0f}", (i["errors"] or [""])[0][:100]] for i in out]
    print(fmt_table(rows, ["dataset", "configs", "distinct", "cached", "analysed", "failed", "skipped", "s",
                           "configs/s", "first error"]))
    for i in out:
        v = i.get("verify")
        if v:
            print(f"{i['dataset']}: {v['checked']} shared analyses re-checked with exact macros, largest relative "
                  f"difference {v.get('max_rel_diff', 0):.3g}{' at ' + v['where'] if v.get('where') else ''}")
    return 0


def add_analyze_parser(sub: Any) -> None:
    p = sub.add_parser("analyze", help="run the static analyses of imported datasets (one per distinct key, cached)",
                       description="Static analysis of every configuration of a dataset imported with "
                                   "'dataset import-kt': one analysis per distinct analysis_key (configurations "
                                   "with the same preprocessed source share it), in a process pool, cached on "
                                   "disk as each finishes (interrupt and rerun: it resumes).")
    p.add_argument("datasets", nargs="+", help="dataset directories")
    p.add_argument("--cache", help="analysis cache directory (default: DATASET/analysis); share one across the "
                                   "datasets of a kernel on several GPUs")
    p.add_argument("--workers", type=positive_int, default=2, help="processes (2)")
    p.add_argument("--verify", type=int, default=0, metavar="N",
                   help="re-analyse N rows of shared analyses with their exact macros and compare")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_analyze)

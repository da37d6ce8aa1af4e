"""The files of an evaluation (``kernelcast evaluate --out DIR``): ``metrics.json``,
``oof.parquet``, ``REPORT.md`` with its plots, written all at once; and the summary the command
prints."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.train.evaluate import KIND, TARGET, Evaluation
from kernelcast.train.evaluate_energy import energy_lines
from kernelcast.train.pairs import format_pairs

from kernelcast.console import fmt_table, json_number
from kernelcast.errors import UsageError


def check_out_dir(out: str | os.PathLike[str]) -> Path:
    """The output directory, if it can be written: absent, empty, or an earlier evaluation (which
    is replaced); :class:`UsageError` otherwise. Nothing is created here."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--out {p} exists and is not a directory")
    if p.is_dir() and any(p.iterdir()):
        try:
            kind = json.loads((p / "metrics.json").read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        if kind != KIND:
            raise UsageError(f"--out {p} is a non-empty directory that holds no evaluation; choose another")
    return p


def _clean(obj: Any) -> Any:
    """JSON-ready: NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return json_number(obj)
    return obj


def metrics_json(ev: Evaluation) -> dict[str, Any]:
    cleaned: dict[str, Any] = _clean(ev.metrics)
    return cleaned


def write_evaluation(ev: Evaluation, out: str | os.PathLike[str], *, plots: bool = True) -> Path:
    """Write ``metrics.json``, ``oof.parquet``, ``REPORT.md`` and the plots into ``out``, all at
    once: they are written into a temporary directory beside it that replaces ``out`` at the end."""
    out = check_out_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        m = metrics_json(ev)
        (tmp / "metrics.json").write_text(json.dumps(m, indent=2) + "\n")
        ev.oof.to_parquet(tmp / "oof.parquet", index=False)
        figures = write_plots(ev, tmp) if plots else []
        (tmp / "REPORT.md").write_text(format_report(m, figures))
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_plots(ev: Evaluation, directory: Path) -> list[tuple[str, str]]:
    """Predicted vs measured (log-log, per model), interval calibration, and the learning curve:
    ``(title, file name)`` of each figure written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m, oof = ev.metrics, ev.oof
    models = m["models"]
    figs = []
    y = oof["measured_us"].to_numpy(dtype=float)
    ncol = min(len(models), 3)
    nrow = -(-len(models) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 4.0 * nrow), squeeze=False)
    finite = y[np.isfinite(y) & (y > 0)]
    lo_v, hi_v = (float(finite.min()), float(finite.max())) if len(finite) else (1.0, 10.0)
    for ax, name in zip(axes.flat, models):
        p = oof[f"{name}_us"].to_numpy(dtype=float)
        ok = np.isfinite(p) & (p > 0)
        ax.scatter(y[ok], p[ok], s=4, alpha=0.4)
        line = np.array([lo_v / 2, hi_v * 2])
        ax.plot(line, line, "k-", lw=0.8)
        ax.plot(line, line * 2, "k:", lw=0.6)
        ax.plot(line, line / 2, "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        mm = m["metrics"][name]
        ax.set_title(f"{name}: median APE {_num(mm['median_ape'])} %, within 2x {_num(mm['within_2x_pct'])} %",
                     fontsize=9)
        ax.set_xlabel("measured time (us)")
        ax.set_ylabel("predicted time (us, out-of-fold)")
    for ax in list(axes.flat)[len(models):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(directory / "pred_vs_measured.png", dpi=110)
    plt.close(fig)
    figs.append(("Predicted vs measured (out-of-fold, log-log; dotted: 2x)", "pred_vs_measured.png"))

    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.plot([0, 100], [0, 100], "k-", lw=0.8)
    for name in models:
        if not m["intervals"]["models"].get(name):
            continue                              # scored without folds: no intervals
        cal = m["intervals"]["models"][name]["calibration"]
        ax.plot([100 * a for a, _ in cal], [b if b is not None else np.nan for _, b in cal], "o-", label=name, ms=3)
    ax.set_xlim(40, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("nominal coverage (%)")
    ax.set_ylabel("empirical coverage (%)")
    ax.set_title("interval calibration (cross-conformal)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(directory / "calibration.png", dpi=110)
    plt.close(fig)
    figs.append(("Interval calibration", "calibration.png"))

    lc = m.get("learning_curve")
    if lc:
        pts = lc["points"]
        fig, ax = plt.subplots(figsize=(4.8, 4.0))
        ax.plot([p["train_kernels"] for p in pts], [p["median_ape"] for p in pts], "o-")
        ax.set_xscale("log", base=2)
        ax.set_xticks([p["train_kernels"] for p in pts], [f"{p['train_kernels']:.0f}" for p in pts])
        ax.minorticks_off()
        ax.set_xlabel("training kernels per fold")
        ax.set_ylabel("median APE (%)")
        ax.set_title(f"learning curve ({lc['model']}, out-of-fold)", fontsize=9)
        fig.tight_layout()
        fig.savefig(directory / "learning_curve.png", dpi=110)
        plt.close(fig)
        figs.append(("Learning curve", "learning_curve.png"))
    return figs


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def summary_rows(m: Mapping[str, Any]) -> tuple[list[list[Any]], list[str]]:
    """The accuracy table: one row per model."""
    header = ["model", "rows", "MAPE %", "median APE %", "p90 APE %", "med |log2|", "bias log2", "within 2x %",
              "kernel MAPE % mean", "median"]
    rows = []
    for name in m["models"]:
        x = m["metrics"][name]
        rows.append([name, x["rows"], x["mape"], x["median_ape"], x["p90_ape"], x["median_abs_log2"],
                     x["bias_log2"], x["within_2x_pct"], x["kernel_mape_mean"], x["kernel_mape_median"]])
    return rows, header


def unpredicted_note(m: Mapping[str, Any]) -> list[str]:
    """Which models left rows without a prediction (a configuration the device cannot run, an
    analysis that failed): those rows are not in that model's figures."""
    got = [f"{name} {m['metrics'][name].get('rows_without_prediction', 0)}" for name in m["models"]
           if m["metrics"][name].get("rows_without_prediction")]
    if not got:
        return []
    return ["rows without a prediction (the device cannot run the configuration, or the analysis failed; not "
            "in that model's figures): " + ", ".join(got)]


def decision_rows(m: Mapping[str, Any]) -> tuple[list[list[Any]], list[str]]:
    """The tuning, interval and few-shot table: one row per model."""
    shots = [k for k in m["few_shot"]["shots"] if k > 0]
    pct = int(round(100 * m["intervals"]["level"]))
    header = ["model", "top-1 %", "regret med", "regret gmean", "rho", f"{pct}% cover %", "width x"]
    for k in shots:
        header += [f"{k}-shot MAPE %", f"{k}-shot med APE %", f"{k}-shot top-1 %"]
    # a k no group has more than k configurations for (e.g. 3 with sweeps of 3 local sizes) has no figure
    tops = [k for k, v in _measure_top_of_first(m["tuning"]).items() if (v or {}).get("groups", 1)]
    header += [f"top-1 % measuring {k}" for k in tops]
    adaptive = [k for k in tops
                if any((v.get("measure_top_adaptive") or {}).get(k) for v in m["tuning"]["models"].values())]
    header += [f"top-1 % measuring {k}, fed back" for k in adaptive]
    rows = []
    for name in m["models"]:
        t = m["tuning"]["models"][name]
        iv = m["intervals"]["models"][name] or {"coverage_pct": None, "mean_width_factor": None}
        top1 = None if t["top1_within"] is None else 100.0 * t["top1_within"]
        row = [name, top1, t["regret_median"], t["regret_geomean"], t["spearman_mean"], iv["coverage_pct"],
               iv["mean_width_factor"]]
        for k in shots:
            s = m["few_shot"]["models"][name][str(k)]
            st = (s.get("tuning") or {}).get("top1_within")
            row += [s["mape"], s["median_ape"], None if st is None else 100.0 * st]
        for k in tops:
            v = (t.get("measure_top") or {}).get(k, {}).get("top1_within")
            row.append(None if v is None else 100.0 * v)
        for k in adaptive:
            v = (t.get("measure_top_adaptive") or {}).get(k, {}).get("top1_within")
            row.append(None if v is None else 100.0 * v)
        rows.append(row)
    return rows, header


def _measure_top_of_first(t: Mapping[str, Any]) -> dict[str, Any]:
    """The measure-top figures (k -> scores) of the first model of the tuning figures ``t``."""
    for v in t["models"].values():
        return dict(v.get("measure_top") or {})
    return {}


def _measure_top_note(t: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{v['groups']} for k = {k}" for k, v in _measure_top_of_first(t).items())
    if not counts:
        return ""
    return (f"; top-1 measuring k: the fastest of the k configurations predicted fastest, on the groups of more "
            f"than k configurations ({counts}); fed back: each measurement corrects the group's other predictions "
            f"(offset and shape, the fold's priors) before the next is chosen, as `tune --model M --measure-top K` "
            f"does")


def tuning_note(m: Mapping[str, Any]) -> str:
    t = m["tuning"]
    n_groups = next(iter(t["models"].values()))["groups"] if t["models"] else 0
    if t["basis"] == "problem":
        return (f"tuning: {n_groups} groups of configurations of one problem (same kernel, global size and argument "
                f"sizes) in {t['problem_kernels']} kernels; top-1 = the predicted best within "
                f"{100 * t['tolerance']:.0f} % of the measured best{_measure_top_note(t)}")
    if t["problem_groups"]:
        why = (f"only {t['problem_groups']} group(s) of two or more configurations of one problem exist (in "
               f"{t['problem_kernels']} of {t['kernels']} kernels), too few to use")
    else:
        why = "no two configurations in the dataset share a problem (same global size and argument sizes)"
    note = (f"tuning: per work-item (time / global work-items) across the configurations of each kernel, "
            f"{n_groups} kernels, since {why}; top-1 = the predicted best within {100 * t['tolerance']:.0f} % "
            f"of the measured best{_measure_top_note(t)}")
    other = t.get("problem_basis_models")
    if other:
        figs = ", ".join(f"{name} {_num(100 * v['top1_within'] if v['top1_within'] is not None else None)} %"
                         for name, v in other.items())
        note += f" (top-1 on those problem groups, for reference: {figs})"
    return note


def format_summary(m: Mapping[str, Any]) -> str:
    """What ``kernelcast evaluate`` prints."""
    d, g = m.get("dataset") or {}, m["groups"]
    sp = m.get("splits") or {"by": "kernel"}
    scoring = str(sp.get("by", "")).startswith("none")
    devices = sp.get("devices") or []
    if scoring:
        folds = f"no folds (scored: the models need no training) over {g['count']} kernel groups"
    else:
        held = {"kernel": "kernel groups", "gpu": "devices", "both": "kernel groups and devices"}.get(sp["by"], "")
        folds = (f"{len(m['folds'])} folds holding out {held} (seed {m['seed']}) over {g['count']} kernel groups; "
                 f"largest {g['largest']['key']} ({g['largest']['kernels']} kernels, {g['largest']['rows']} rows); "
                 f"{len(g['near_duplicate_merges'])} near-duplicate merge(s)")
    lines = [
        f"dataset     {d.get('path', '-')}: {m['rows']} rows of {m['kernels']} kernels"
        + (f" on {len(devices)} devices" if len(devices) > 1 else ""),
        f"folds       {folds}",
        "",
        "zero-shot, every row scored" if scoring else "out-of-fold, zero-shot",
        fmt_table(*summary_rows(m)),
        *unpredicted_note(m),
        "",
        fmt_table(*decision_rows(m)),
        "",
        tuning_note(m),
    ]
    lines += floor_lines(m)
    lines += designed_lines(m)
    if m.get("blend"):
        kinds = [b["kind"] for b in m["blend"]["folds"]]
        lines.append(f"blend: chosen per fold by {m['blend']['criterion']} on inner OOF predictions: "
                     f"{', '.join(kinds)}")
    lines += energy_lines(m.get("energy"))
    pairs = format_pairs(m.get("pairs") or {}, m.get("models") or [])
    if pairs:
        lines += ["", pairs]
    lines += [training_note(name, runs) for name, runs in (m.get("training") or {}).items() if runs]
    lines += repeat_lines(m.get("repeats"))
    lc = m.get("learning_curve")
    if lc:
        pts = ", ".join(f"{p['train_kernels']:.0f}{' (all)' if p['all'] else ''}: {_num(p['median_ape'])} %"
                        for p in lc["points"])
        lines.append(f"learning curve ({lc['model']}, median APE by training kernels per fold): {pts}")
    return "\n".join(lines)


def designed_lines(m: Mapping[str, Any]) -> list[str]:
    """The k-shot figures with the shots the model chooses (``choose_shots``), one line per k."""
    out = []
    for k in m["few_shot"]["shots"]:
        figs = []
        for name in m["models"]:
            d = (m["few_shot"]["models"][name].get(str(k)) or {}).get("designed")
            if d:
                top = (d.get("tuning") or {}).get("top1_within")
                figs.append(f"{name} MAPE {_num(d['mape'])} %, median APE {_num(d['median_ape'])} %, top-1 "
                            f"{_num(None if top is None else 100.0 * top)} %")
        if figs:
            out.append(f"{k}-shot with the shots the model chooses (least posterior variance of the shape correction "
                       f"over the kernel's other configurations, chosen before measuring): {'; '.join(figs)}")
    return out


def floor_lines(m: Mapping[str, Any]) -> list[str]:
    """What no few-shot correction gets below: each model with the per-kernel offset fitted on all
    of the kernel's rows, and the dataset's own repeatability (its configurations measured twice)."""
    lines = []
    floors = m["few_shot"].get("offset_floor") or {}
    if floors:
        figs = ", ".join(f"{name} MAPE {_num(f['mape'])} %, median APE {_num(f['median_ape'])} %"
                         for name, f in floors.items())
        lines.append(f"offset floor (each kernel's rows corrected by the one factor that fits them all: what no "
                     f"number of shots gets below with the offset alone; the shape correction can): {figs}")
    rep = (m.get("dataset") or {}).get("repeatability") or {}
    if rep.get("pairs"):
        reasons = ", ".join(f"{r} {v['pairs']}" for r, v in (rep.get("by_reason") or {}).items())
        lines.append(f"repeatability: {rep['pairs']} second measurements of a configuration ({reasons}): the "
                     f"measurement it dropped against the one it kept MAPE {_num(rep['mape'])} %, median APE "
                     f"{_num(rep['median_ape'])} %, median |log2| {_num(rep['median_abs_log2'])}, p90 "
                     f"{_num(rep['p90_abs_log2'])} (rows measured again for noise, load or drift "
                     f"are the noisy end; a sweep's rounds, reason round, are not chosen)")
    return lines


def _designed_cell(m: Mapping[str, Any], name: str, k: int) -> str:
    d = (m["few_shot"]["models"][name].get(str(k)) or {}).get("designed")
    if not d:
        return ""
    top = (d.get("tuning") or {}).get("top1_within")
    return (f"{_num(d['median_ape'])} / {_num(d['mape'])} / {_num(None if top is None else 100.0 * top)} "
            f"({d['rows']})")


def rounds_lines(m: Mapping[str, Any]) -> list[str]:
    """The k-shot figures on configurations whose rounds agreed and on those whose rounds disagreed
    (``time_rounds_spread``), where the dataset has rounds."""
    out = []
    for name in m["models"]:
        for k in m["few_shot"]["shots"]:
            b = (m["few_shot"]["models"][name].get(str(k)) or {}).get("by_rounds")
            if not b or not b["disagree"].get("rows"):
                continue
            a, d = b["agree"], b["disagree"]
            out.append(f"{name} {k}-shot on configurations whose rounds agreed: MAPE {_num(a['mape'])} %, median APE "
                       f"{_num(a['median_ape'])} % ({a['rows']} rows); whose rounds disagreed (middle half of the "
                       f"window medians over 1.15x apart): MAPE {_num(d['mape'])} %, median APE "
                       f"{_num(d['median_ape'])} % ({d['rows']} rows)")
    return out


def repeat_lines(rep: Mapping[str, Any] | None) -> list[str]:
    """The spread of the headline figures over fold seeds (``--repeats``), a row per model."""
    if not rep:
        return []
    cols = [("median_ape", "median APE %", 1.0), ("mape", "MAPE %", 1.0), ("median_abs_log2", "med |log2|", 1.0),
            ("within_2x_pct", "within 2x %", 1.0), ("top1_within", "top-1 %", 100.0),
            ("shot3_mape", "3-shot MAPE %", 1.0), ("shot3_median_ape", "3-shot med APE %", 1.0),
            ("shot3_offset_only_mape", "3-shot MAPE % offset only", 1.0),
            ("shot3_designed_mape", "3-shot MAPE % shots chosen", 1.0),
            ("shot3_top1_within", "3-shot top-1 %", 100.0), ("measure2_top1_within", "top-1 % measuring 2", 100.0),
            ("adaptive2_top1_within", "top-1 % measuring 2 fed back", 100.0)]
    rows = []
    for name, figs in rep["models"].items():
        row: list[Any] = [name]
        for key, _, scale in cols:
            f = figs.get(key)
            row.append("-" if f is None else f"{_num(scale * f['mean'])} ± {_num(scale * f['sd'])}")
        rows.append(row)
    seeds = rep["seeds"]
    return ["", f"over {len(seeds)} fold seeds ({seeds[0]}..{seeds[-1]}): mean ± sd; a change smaller than the sd "
                f"is within what the choice of folds alone moves",
            fmt_table(rows, ["model"] + [c[1] for c in cols])]


def training_note(name: str, runs: Sequence[Mapping[str, Any]]) -> str:
    """One line on how a trained model's fits went (epochs, best epoch, why they stopped, time)."""
    stops: dict[str, int] = {}
    for r in runs:
        stops[r["stopped"]] = stops.get(r["stopped"], 0) + 1
    return (f"{name} training per fit: epochs {', '.join(str(r['epochs']) for r in runs)}; best epoch "
            f"{', '.join(str(r['best_epoch']) for r in runs)}; steps {', '.join(str(r['steps']) for r in runs)}; "
            f"stopped: {', '.join(f'{k} x{v}' for k, v in sorted(stops.items()))}; "
            f"{sum(float(r['seconds']) for r in runs):.0f} s of training in all")


def _md_table(rows: list[list[Any]], header: list[str]) -> str:
    def cell(c: Any) -> str:
        if isinstance(c, float):
            return _num(c, 4)
        return "-" if c is None else str(c).replace("|", "\\|")

    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def format_report(m: Mapping[str, Any], figures: Sequence[tuple[str, str]] = ()) -> str:
    """``REPORT.md``."""
    d, p, g = m.get("dataset") or {}, m.get("profile") or {}, m["groups"]
    o = m["options"]
    lines = [
        "# Evaluation",
        "",
        f"- dataset: `{d.get('path', '-')}` ({d.get('corpus', '-')}; device {d.get('device', '-')}; "
        f"rows fingerprint {d.get('rows_fingerprint', '-')}): {m['rows']} rows of {m['kernels']} kernels used "
        f"({d.get('rows_total', '-')} rows in the dataset, {d.get('rows_ok', '-')} ok of passes sample/iqr)",
        f"- profile: {p.get('spec') or '-'} (device {p.get('device', '-')}, {p.get('kind', '-')}, sha256 "
        f"{p.get('sha256', '-')})",
        f"- {len(m['folds'])} folds grouped by kernel group, seed {m['seed']}; {g['count']} groups "
        f"({', '.join(f'{v} {k}' for k, v in sorted(g['by_kind'].items()))}); largest `{g['largest']['key']}` "
        f"({g['largest']['kernels']} kernels, {g['largest']['rows']} rows); "
        f"{len(g['near_duplicate_merges'])} near-duplicate merge(s) at Jaccard >= {g['near_duplicate_threshold']}",
        f"- models: {', '.join(m['models'])}; target: time (`{TARGET}`); {_num(m['seconds'])} s",
        "",
        "## Accuracy (out-of-fold, zero-shot)",
        "",
        "APE in percent; `med |log2|` is the median |log2(predicted / measured)| (1 = a factor of 2); `bias` is "
        "the median log2 ratio (negative: predicts low); kernel MAPE is each kernel's MAPE, averaged over kernels.",
        "",
        _md_table(*summary_rows(m)),
        *(["", *unpredicted_note(m)] if unpredicted_note(m) else []),
        "",
        "## Tuning, intervals, few-shot",
        "",
        tuning_note(m) + ". " + m["few_shot"]["note"] + ".",
        "",
        f"Intervals: {int(round(100 * m['intervals']['level']))} % cross-conformal intervals from the |log2 ratio| "
        f"of the other folds' OOF residuals (by: {m['intervals']['by']}); width = upper / lower bound. "
        f"Few-shot: k measured configurations of each held-out kernel correct its other rows, as `predict "
        f"--measured` corrects them (a shrunk log offset and a shape correction over the configuration), scored "
        f"on those other rows; k-shot top-1 counts a measured configuration with its measured time.",
        "",
        _md_table(*decision_rows(m)),
        "",
    ]
    shots = m["few_shot"]["shots"]
    lines += ["### Few-shot (median APE % / MAPE % / within 2x %; rows scored)", ""]
    header = ["model"] + [f"k={k}" for k in shots]
    rows = []
    for name in m["models"]:
        r: list[Any] = [name]
        for k in shots:
            s = m["few_shot"]["models"][name][str(k)]
            r.append(f"{_num(s['median_ape'])} / {_num(s['mape'])} / {_num(s['within_2x_pct'])} ({s['rows']})")
        rows.append(r)
    lines += [_md_table(rows, header), ""]
    only = m["few_shot"].get("offset_only") or {}
    if only:
        orow = [[name] + [f"{_num(o['median_ape'])} / {_num(o['mape'])}" if (o := only.get(name, {}).get(str(k)))
                          else "" for k in shots if k > 0] for name in m["models"]]
        lines += ["The offset alone, without the shape correction (median APE % / MAPE %):", "",
                  _md_table(orow, ["model"] + [f"k={k}" for k in shots if k > 0]), ""]
    designed = [[name] + [_designed_cell(m, name, k) for k in shots if k > 0] for name in m["models"]]
    if any(c for r in designed for c in r[1:]):
        lines += ["Shots the model chooses (`models.fewshot.choose_shots`: least posterior variance of the shape "
                  "correction over the kernel's other configurations, chosen before measuring) instead of random "
                  "ones (median APE % / MAPE % / k-shot top-1 %; rows scored):", "",
                  _md_table(designed, ["model"] + [f"k={k}" for k in shots if k > 0]), ""]
    rl = rounds_lines(m)
    if rl:
        lines += [f"- {x}" for x in rl] + [""]
    fl = floor_lines(m)
    if fl:
        lines += [f"- {x}" for x in fl] + [""]
    if m.get("blend"):
        lines += ["## Blend (stacking)", "",
                  f"Per outer fold, chosen by {m['blend']['criterion']} on the OOF predictions of an inner "
                  f"{m['blend']['inner_folds']}-fold grouped CV over the training kernels.", ""]
        brow = []
        for b in m["blend"]["folds"]:
            w = ", ".join(f"{k} {_num(v)}" for k, v in b["weights"].items())
            brow.append([b["fold"], b["kind"], w, _num(b["intercept"]), b["rows"]])
        lines += [_md_table(brow, ["fold", "chosen", "weights", "intercept", "inner rows"]), ""]
    for name, runs in (m.get("training") or {}).items():
        if not runs:
            continue
        lines += [f"## Training of {name}", "", "One fit per outer fold (and per inner fold of the blend); early "
                  "stopping and model selection on kernel groups held out of the fold's training rows.", ""]
        lines += [_md_table([[i, r["train_rows"], r["validation_kernels"], r["validation_split"], r["epochs"],
                              r["best_epoch"], r["steps"], r["final_lr"], r["stopped"], r["seconds"]]
                             for i, r in enumerate(runs)],
                            ["fit", "training rows", "validation kernels", "split by", "epochs", "best epoch",
                             "steps", "final lr", "stopped", "s"]), ""]
    rep = repeat_lines(m.get("repeats"))
    if rep:
        lines += ["## Spread over fold seeds", "", "```", *rep[1:], "```", ""]
    lc = m.get("learning_curve")
    if lc:
        lines += [f"## Learning curve ({lc['model']})", ""]
        lines += [_md_table([[_num(p["train_kernels"]) + (" (all)" if p["all"] else ""), p["median_ape"], p["mape"],
                              p["within_2x_pct"]] for p in lc["points"]],
                            ["training kernels per fold", "median APE %", "MAPE %", "within 2x %"]), ""]
    energy = m.get("energy")
    if energy:
        lines += ["## Energy ranking", "", "```", *energy_lines(energy), "```", ""]
    pairs = format_pairs(m.get("pairs") or {}, m.get("models") or [])
    if pairs:
        lines += ["## Per (kernel, device) pair", "", "```", pairs, "```", ""]
    lines += ["## Folds", "", _md_table([[f["fold"], f["groups"], f["kernels"], f["rows"]] for f in m["folds"]],
                                         ["fold", "groups", "kernels", "rows"]), ""]
    lines += ["Largest groups:", ""]
    lines += [_md_table([[x["key"], x["kind"], len(x["kernels"]), x["rows"], x["fold"]] for x in g["list"][:10]],
                        ["group", "kind", "kernels", "rows", "fold"]), ""]
    for title, fname in figures:
        lines += [f"## {title}", "", f"![{title}]({fname})", ""]
    opts = ", ".join(f"{k}={v}" for k, v in o.items())
    lines += ["## Options", "", f"`{opts}`", ""]
    return "\n".join(lines)

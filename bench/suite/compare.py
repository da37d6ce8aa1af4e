"""``kernelcast bench``: learned vs analytical vs blend on a benchmark suite (LLMPerf Table IV, Figure 2).

For each kernel and problem size of the suite: measure on the device (adaptive repeats; the
statistic is the median), predict with the analytical model, the learned model and the blend,
then write into the report directory:

* ``results.csv``: every instance, measured and predicted;
* ``table.csv`` and the table in ``REPORT.md``: per kernel, MAPE of each model across sizes and
  Spearman rho across sizes, with the averages (Table IV with three model columns);
* ``plots/<kernel>.png``: predicted and measured time against problem size (Figure 2);
* kernels that failed, with their status and reason.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.console import fmt_table
from kernelcast.errors import UsageError
from kernelcast.metrics import mape, spearman, tuning_scores

log = logging.getLogger(__name__)
MODELS = ("analytical", "learned", "blend")
#: a model's pick of a sweep is right when its measured time is within this share of the measured best
TUNING_TOLERANCE = 0.05


def default_suite() -> Path:
    return Path(__file__).resolve().parents[2] / "suites" / "kernelcast" / "suite.json"


def predict_rows(rows: pd.DataFrame, sources: dict[str, tuple[str, str]], profile: Any, model: str | None
                 ) -> pd.DataFrame:
    """Add analytical / learned / blend predictions (us) to the measured rows."""
    from kernelcast.models.predict import load_learned, predict_frame

    ok = rows[rows["status"] == "ok"].copy()
    if ok.empty:
        return rows.assign(**{f"{m}_us": np.nan for m in MODELS})
    ok["source"] = ok["kernel"].map(lambda k: sources[k][0])
    ok["build_options"] = ok["kernel"].map(lambda k: sources[k][1])
    learned, weights = load_learned(model)
    pred = predict_frame(ok, profile, learned, weights)
    out = rows.copy()
    for m in MODELS:
        col = f"{m}_us"
        out[col] = np.nan
        if col in pred:
            out.loc[ok.index, col] = pred[col].to_numpy()
    out["bound"] = None
    out.loc[ok.index, "bound"] = [e.get("bound") if isinstance(e, dict) else None for e in pred["explanation"]]
    # how many of the kernel's data-dependent sites the analytical model took from measured counts, and
    # how many it assumed
    out["sites_measured"] = np.nan
    out["sites_assumed"] = np.nan
    out.loc[ok.index, "sites_measured"] = [len(e.get("measured_counts", [])) if isinstance(e, dict) else np.nan
                                           for e in pred["explanation"]]
    out.loc[ok.index, "sites_assumed"] = [len(e.get("assumed_counts", [])) if isinstance(e, dict) else np.nan
                                          for e in pred["explanation"]]
    if learned is not None and "blend_kind" in pred:
        out.attrs["blend_kind"] = str(pred["blend_kind"].iloc[0])
    return out


def table(results: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for kid, g in results.groupby("kernel", sort=False):
        ok = g[g["status"] == "ok"]
        y = ok["median_us"].to_numpy(float)
        r: dict[str, Any] = {"kernel": kid, "sizes": len(g), "ok": len(ok),
                             "measured_us": f"{y.min():.1f}..{y.max():.1f}" if len(y) else "-"}
        if "sites_measured" in ok.columns and len(ok):
            # data-dependent sites the analytical model took from measured counts / assumed (first ok row)
            got, assumed = (int(np.nan_to_num(ok[c].iloc[0])) for c in ("sites_measured", "sites_assumed"))
            r["sites"] = f"{got}/{got + assumed}"
        n = ok["n"].to_numpy()
        for m in MODELS:
            p = ok[f"{m}_us"].to_numpy(float)
            r[f"{m}_mape"] = mape(p, y)
            r[f"{m}_rho"] = spearman(p, y, min_points=3)
            # a sweep: which local size each model picks for each problem size
            ts = tuning_scores(p, y, n, tol=TUNING_TOLERANCE)
            r["tuning_groups"] = max(r.get("tuning_groups", 0), ts["groups"])
            r[f"{m}_top1"] = 100.0 * ts["top1_within"] if ts["groups"] else float("nan")
            r[f"{m}_regret"] = ts["regret_geomean"] if ts["groups"] else float("nan")
        rows.append(r)
    t = pd.DataFrame(rows)
    avg = {"kernel": "average", "sizes": int(t["sizes"].sum()), "ok": int(t["ok"].sum()), "measured_us": "",
           "tuning_groups": int(t["tuning_groups"].sum())}
    for c in t.columns:
        if c.endswith(("_mape", "_rho", "_top1")):
            avg[c] = float(np.nanmean(t[c])) if t[c].notna().any() else float("nan")
        elif c.endswith("_regret"):
            avg[c] = float(np.exp(np.nanmean(np.log(t[c])))) if t[c].notna().any() else float("nan")
    return pd.concat([t, pd.DataFrame([avg])], ignore_index=True)


def plot_kernel(g: pd.DataFrame, kid: str, out: Path) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = g[g["status"] == "ok"].sort_values("n")
    if ok.empty:
        return None
    sweep = bool(ok.duplicated("n").any())
    if sweep:      # a local-size sweep: the fastest configuration of each size, measured and predicted
        ok = ok.groupby("n", as_index=False).agg(
            median_us=("median_us", "min"), **{f"{m}_us": (f"{m}_us", "min") for m in MODELS})
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.plot(ok["n"], ok["median_us"], "ko-", label="measured (median)" + (", fastest local size" if sweep else ""))
    style = {"analytical": ("tab:blue", "s--"), "learned": ("tab:orange", "^--"), "blend": ("tab:green", "d-.")}
    for m in MODELS:
        col = f"{m}_us"
        if ok[col].notna().any():
            c, s = style[m]
            ax.plot(ok["n"], ok[col], s, color=c, label=m)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("problem size n")
    ax.set_ylabel("time (us)")
    ax.set_title(f"{kid}: predicted vs measured" + (" (best of the sweep)" if sweep else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, float):
        return f"{x:.1f}" if pct else f"{x:.3f}"
    return str(x)


def write_report(results: pd.DataFrame, tab: pd.DataFrame, out: Path, meta: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    results.to_csv(out / "results.csv", index=False)
    tab.to_csv(out / "table.csv", index=False)
    plots = {}
    for kid, g in results.groupby("kernel", sort=False):
        p = plot_kernel(g, str(kid), out / "plots" / f"{kid}.png")
        if p is not None:
            plots[kid] = p.relative_to(out)
    lines = [f"# kernelcast bench: {meta['suite']}", "",
             f"Device {meta['device']}; profile {meta['profile']}; learned model {meta['model'] or 'none'}"
             + (f" (blend: {meta['blend']})" if meta.get("blend") else "") + f"; measured {meta['date']}; "
             f"{meta['instances']} instances in {meta['wall_s']:.0f} s. Times are medians of the harness's adaptive "
             f"repeats (at least 10 launches and 0.1 s per instance)"
             + (f"; reused from {meta['measured']}, not measured again." if meta.get("measured") else "."), "",
             "## MAPE across problem sizes (%) and Spearman rho", "",
             "| kernel | sizes ok | measured us | " + " | ".join(f"{m} MAPE" for m in MODELS) + " | "
             + " | ".join(f"{m} rho" for m in MODELS) + " |",
             "|---|---|---|" + "---|" * (2 * len(MODELS))]
    for _, r in tab.iterrows():
        lines.append(f"| {r['kernel']} | {r['ok']}/{r['sizes']} | {r['measured_us']} | "
                     + " | ".join(_fmt(r[f'{m}_mape'], True) for m in MODELS) + " | "
                     + " | ".join(_fmt(r[f'{m}_rho']) for m in MODELS) + " |")
    sweeps = tab[(tab["kernel"] != "average") & (tab["tuning_groups"] > 0)]
    if not sweeps.empty:
        lines += ["", "## Local-size sweeps: which configuration each model picks", "",
                  f"Per problem size, a model's pick (its fastest predicted local size) is right when its measured "
                  f"time is within {TUNING_TOLERANCE:.0%} of the measured best; regret = measured time of the pick / "
                  f"the measured best (geometric mean over the sizes).", "",
                  "| kernel | sizes swept | " + " | ".join(f"{m} top-1 %" for m in MODELS) + " | "
                  + " | ".join(f"{m} regret" for m in MODELS) + " |", "|---|---|" + "---|" * (2 * len(MODELS))]
        for _, r in sweeps.iterrows():
            lines.append(f"| {r['kernel']} | {int(r['tuning_groups'])} | "
                         + " | ".join(_fmt(r[f'{m}_top1'], True) for m in MODELS) + " | "
                         + " | ".join(_fmt(r[f'{m}_regret']) for m in MODELS) + " |")
    failed = results[results["status"] != "ok"]
    lines += ["", "## Failed instances", ""]
    if failed.empty:
        lines.append("None.")
    else:
        for _, r in failed.iterrows():
            lines.append(f"- {r['label']}: {r['status']}: {r['reason']}")
    lines += ["", "## Predicted vs measured time (Figure 2)", ""]
    for kid, p in plots.items():
        lines.append(f"### {kid}\n\n![{kid}]({p})\n")
    path = out / "REPORT.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def print_table(tab: pd.DataFrame) -> str:
    sites = "sites" in tab.columns
    rows = [[r["kernel"], f"{r['ok']}/{r['sizes']}"] + ([r["sites"] if isinstance(r["sites"], str) else ""]
                                                          if sites else [])
            + [r[f"{m}_mape"] for m in MODELS] + [r[f"{m}_rho"] for m in MODELS] for _, r in tab.iterrows()]
    out = fmt_table(rows, ["kernel", "ok"] + (["sites"] if sites else []) + [f"{m[:5]} MAPE%" for m in MODELS]
                    + [f"{m[:5]} rho" for m in MODELS])
    if sites:
        out += ("\nsites: the kernel's data-dependent loop trips and branch outcomes the analytical model took "
                "from a counting launch on the instance's inputs / all of them")
    sweeps = tab[tab["tuning_groups"] > 0] if "tuning_groups" in tab else tab.iloc[:0]
    if not sweeps.empty:
        rows = [[r["kernel"], int(r["tuning_groups"])] + [r[f"{m}_top1"] for m in MODELS]
                + [r[f"{m}_regret"] for m in MODELS] for _, r in sweeps.iterrows()]
        out += ("\n\nlocal-size sweeps: the model's pick within 5 % of the measured best (top-1 %), regret "
                "(measured time of the pick / best, geometric mean)\n"
                + fmt_table(rows, ["kernel", "sizes"] + [f"{m[:5]} top1%" for m in MODELS]
                            + [f"{m[:5]} regret" for m in MODELS]))
    return out


def run_bench(suite_path: str, out: str, *, model: str | None, profile_spec: str | None, device: str | None,
              meter: str = "auto", max_sizes: int | None = None, ids: list[str] | None = None,
              progress: bool = True, measured: str | None = None, counts: bool = True,
              rounds: int | None = None) -> tuple[pd.DataFrame, Path]:
    """Measure (or, with ``measured``, reuse an earlier ``results.csv`` of) every instance of a
    suite, predict each with every model, and write the report; returns the per-kernel table and
    the report's path. With ``counts`` each instance's data-dependent loop trips and branch outcomes
    are measured on its inputs (one counting launch; rows of a reused file that lack them get it)
    and the models predict with them. An entry's local sizes are measured in ``rounds``
    interleaved rounds (default :data:`bench.suite.run.SWEEP_ROUNDS`), pooled."""
    from kernelcast.bench.suite.manifest import load_manifest
    from kernelcast.bench.suite.model import ManifestError
    from kernelcast.bench.suite.run import SWEEP_ROUNDS, fill_counts, measure_suite, measured_rows
    from kernelcast.calib.local import resolve_profile
    from kernelcast.calib.profile import ProfileError
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.harness import Harness
    from kernelcast.models.predict import load_learned

    from kernelcast.config import device_spec

    if not Path(suite_path).is_file():
        raise UsageError(f"--suite {suite_path}: no such file")
    try:
        suite = load_manifest(suite_path)
    except ManifestError as e:
        raise UsageError(str(e).replace("\n", "; ")) from None
    if ids:
        unknown = [i for i in ids if i not in suite.ids()]
        if unknown:
            raise UsageError(f"--kernels: {', '.join(unknown)} not in the suite (has {', '.join(suite.ids())})")
    load_learned(model)                      # fail early on a bad --model
    reused = measured_rows(suite, measured, ids=ids, max_sizes=max_sizes) if measured else None
    if profile_spec:                         # and on a bad --profile, before measuring the suite
        resolve_profile(profile_spec)
    info = select_device(device_spec(device))
    profile = resolve_profile(profile_spec, device,
                              on_calibrate=lambda msg: print(f"note: {msg}", file=sys.stderr))
    if profile_spec:                         # the suite is measured on info: a profile of its type only
        try:
            profile.check_device_type(info.type, f"the device the suite runs on ({info.name})")
        except ProfileError as e:
            raise UsageError(f"--profile {profile_spec}: {e}") from None
    t0 = time.perf_counter()
    if reused is not None:
        rows = reused
        if counts:
            with Harness(info, meter="none") as h:
                fill_counts(suite, rows, h)
    else:
        with Harness(info, meter=meter) as h:
            rows = measure_suite(suite, h, progress=progress, ids=ids, max_sizes=max_sizes, counts=counts,
                                 rounds=SWEEP_ROUNDS if rounds is None else rounds)
    if not counts:
        rows["site_counts"] = ""
    sources = {k.id: (k.kernel_record().source, k.kernel_record().build_options) for k in suite.kernels}
    results = predict_rows(rows, sources, profile, model)
    tab = table(results)
    meta = {"suite": suite.name, "device": info.name, "profile": f"{profile.device.name} ({profile.kind})",
            "model": model, "blend": results.attrs.get("blend_kind"), "instances": len(rows),
            "wall_s": time.perf_counter() - t0, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "measured": str(Path(measured).resolve()) if measured else None}
    report = write_report(results, tab, Path(out), meta)
    (Path(out) / "meta.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return tab, report

"""The dataset card: ``DATASET/CARD.md`` (and ``DATASET/card-time.png``), from the rows and manifest.

What it states, every figure computed from the dataset as it is on disk: the device, driver and
software versions; kernels by origin and validity; rows by status and argument selection; regime
and pass counts; tuning sweeps (problems measured with two or more local sizes, groups per
kernel); the distribution of median times (plot); the noise of the measurements (within-row
coefficient of variation); the active fraction of the rows' arguments; how the dataset was made
and the command that continues it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.datagen.dataset import read_dataset, read_manifest

log = logging.getLogger(__name__)

CARD = "CARD.md"
TIME_PLOT = "card-time.png"


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


def _share(v: float | None) -> str:
    return "n/a" if v is None else _pct(v)


def _quantiles(s: pd.Series, qs: tuple[float, ...] = (0.1, 0.25, 0.5, 0.75, 0.9)) -> dict[str, float]:
    s = pd.to_numeric(s, errors="coerce").dropna()
    if s.empty:
        return {}
    return {f"p{int(q * 100)}": float(s.quantile(q)) for q in qs} | {"max": float(s.max()), "n": float(len(s))}


def card_facts(df: pd.DataFrame, manifest: dict[str, Any]) -> dict[str, Any]:
    """The card's figures as a dictionary (the ``--json`` of ``dataset card``)."""
    rows = df[df["pass"] != "validity"] if len(df) else df
    valid = df[df["pass"] == "validity"] if len(df) else df
    ok = rows[rows["status"] == "ok"] if len(rows) else rows
    facts: dict[str, Any] = {
        "device": (manifest.get("device") or {}).get("name"),
        "versions": {k: manifest.get(k) for k in ("driver_version", "platform_version", "kernelcast_version",
                                                   "harness_version", "schema_version", "python", "pyopencl")
                     if manifest.get(k) is not None},
        "host": manifest.get("host"),
        "created": manifest.get("created"),
        "preset": (manifest.get("preset") or {}).get("name") if isinstance(manifest.get("preset"), dict)
        else manifest.get("preset"),
        "corpus": manifest.get("corpus"),
        "seed": manifest.get("seed"),
        "kernels": int(df["kernel_id"].nunique()) if len(df) else 0,
        "rows": int(len(rows)),
        "ok_rows": int(len(ok)),
    }
    if not len(df):
        return facts
    facts["kernels_by_origin"] = {str(k): int(v) for k, v in
                                  df.groupby(df["kernel_origin"].fillna("").map(_origin_class))["kernel_id"]
                                  .nunique().items()}
    facts["kernel_validity"] = _pair_counts(valid)
    facts["rows_by_status"] = {str(k): int(v) for k, v in rows["status"].value_counts().items()}
    facts["rows_by_selection_status"] = _pair_counts(rows)
    facts["kernels_with_ok_row"] = int(ok["kernel_id"].nunique())
    facts["ok_rows_by_regime"] = {str(k): int(v) for k, v in ok["regime"].value_counts().items()}
    facts["ok_rows_by_pass"] = {str(k): int(v) for k, v in ok["pass"].value_counts().items()}
    facts["sweeps"] = _sweeps(ok)
    facts["time_median_us"] = _quantiles(ok["time_median_us"])
    cv = pd.to_numeric(ok["time_cv"], errors="coerce").dropna() if "time_cv" in ok else pd.Series(dtype=float)
    facts["noise"] = {"cv": _quantiles(cv), "share_cv_le_5pct": float((cv <= 0.05).mean()) if len(cv) else None,
                      "share_cv_le_10pct": float((cv <= 0.10).mean()) if len(cv) else None,
                      "repeats": _quantiles(ok["repeats"]) if "repeats" in ok else {}}
    af = _numeric(ok, "active_fraction")
    facts["active_fraction"] = {"rows": int(len(af)), "quantiles": _quantiles(af),
                                "share_full": float((af >= 0.99).mean()) if len(af) else None,
                                "share_below_10pct": float((af < 0.1).mean()) if len(af) else None}
    kt = float(np.nansum([np.sum(np.asarray(v, dtype=float)) for v in ok["times_us"] if v is not None])) * 1e-6 \
        if "times_us" in ok else 0.0
    wall = float(_numeric(rows, "wall_s").sum())
    facts["kernel_time_s"] = kt
    facts["harness_wall_s"] = wall
    if len(rows) > 1 and "measured_at" in rows:
        t = pd.to_numeric(rows["measured_at"], errors="coerce").dropna()
        span = float(t.max() - t.min()) if len(t) else 0.0
        facts["measuring_span_h"] = span / 3600
    return facts


def _numeric(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame.columns:
        return pd.Series(dtype=float)
    return pd.Series(pd.to_numeric(frame[col], errors="coerce")).dropna()


def _pair_counts(frame: pd.DataFrame) -> dict[str, int]:
    """Rows per ``selection:status``."""
    if not len(frame):
        return {}
    keys = frame["selection"].astype(str) + ":" + frame["status"].astype(str)
    return {str(k): int(v) for k, v in keys.value_counts().items()}


def _origin_class(origin: str) -> str:
    o = origin.lower()
    if "synth" in o:
        return "synthetic"
    if "bundled" in o:
        return "bundled"
    return "ingested/other" if o else "unknown"


def _sweeps(ok: pd.DataFrame) -> dict[str, Any]:
    """Problems measured with two or more local sizes (the tuning groups evaluate uses)."""
    if "problem_id" not in ok or ok["problem_id"].isna().all():
        return {"groups": 0, "kernels": 0, "sweep_rows": 0}
    g = ok.dropna(subset=["problem_id"]).copy()
    g["lkey"] = g["lsize"].map(lambda v: str(list(v)) if v is not None else "")
    n = g.groupby(["kernel_id", "problem_id"])["lkey"].nunique()
    multi = n[n >= 2]
    per_kernel = multi.groupby(level=0).size()
    sweep_rows = int(g["sweep"].fillna(False).astype(bool).sum()) if "sweep" in g else 0
    return {"groups": int(len(multi)), "kernels": int(len(per_kernel)), "sweep_rows": sweep_rows,
            "groups_per_kernel": _quantiles(per_kernel.astype(float)),
            "configs_per_group": _quantiles(multi.astype(float))}


def _plot_times(ok: pd.DataFrame, out: Path) -> Path | None:
    import matplotlib  # deferred: matplotlib is a heavy import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred: matplotlib is a heavy import

    t = pd.to_numeric(ok["time_median_us"], errors="coerce").dropna()
    t = t[t > 0]
    if t.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = [float(b) for b in np.logspace(np.log10(t.min()), np.log10(t.max()) + 1e-9, 40)]
    for name, grp in ok.assign(_t=pd.to_numeric(ok["time_median_us"], errors="coerce")).groupby("pass"):
        v = grp["_t"].dropna()
        v = v[v > 0]
        if len(v):
            ax.hist(v, bins=bins, alpha=0.6, label=f"{name} (n={len(v)})")
    ax.set_xscale("log")
    ax.set_xlabel("median kernel time (us)")
    ax.set_ylabel("rows")
    ax.set_title("time distribution of the ok rows")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _dist_line(d: dict[str, float], unit: str = "", fmt: str = "{:.1f}") -> str:
    if not d:
        return "n/a"
    return ", ".join(f"{k} {fmt.format(v)}{unit}" for k, v in d.items() if k != "n") + f" (n={int(d['n'])})"


def render_card(facts: dict[str, Any], continue_cmd: str | None, plot: str | None) -> str:
    lines = [f"# Dataset card{': ' + facts['preset'] if facts.get('preset') else ''}", ""]
    lines += ["Generated by `kernelcast dataset card` from the rows on disk; every figure is computed from them.",
              ""]
    lines += ["## Device and versions", "", f"- device: {facts.get('device')}", f"- host: {facts.get('host')}"]
    lines += [f"- {k}: {v}" for k, v in facts.get("versions", {}).items()]
    lines += [f"- created: {facts.get('created')}; seed {facts.get('seed')}", f"- corpus: {facts.get('corpus')}", ""]
    lines += ["## Kernels and rows", "", f"- kernels: {facts['kernels']}"
              + ("; by origin: " + ", ".join(f"{k} {v}" for k, v in facts.get("kernels_by_origin", {}).items())
                 if facts.get("kernels_by_origin") else ""),
              "- kernel validity (selection:status): " + ", ".join(
                  f"{k} {v}" for k, v in sorted(facts.get("kernel_validity", {}).items())),
              f"- kernels with at least one ok row: {facts.get('kernels_with_ok_row', 0)}",
              f"- measured rows: {facts['rows']} ({facts['ok_rows']} ok); by status: " + ", ".join(
                  f"{k} {v}" for k, v in sorted(facts.get("rows_by_status", {}).items())),
              "- rows by selection:status: " + ", ".join(
                  f"{k} {v}" for k, v in sorted(facts.get("rows_by_selection_status", {}).items())), ""]
    sw = facts.get("sweeps", {})
    lines += ["## Regimes and sweeps", "",
              "- ok rows by regime: " + ", ".join(f"{k} {v}" for k, v in sorted(facts.get("ok_rows_by_regime",
                                                                                           {}).items())),
              "- ok rows by pass: " + ", ".join(f"{k} {v}" for k, v in sorted(facts.get("ok_rows_by_pass",
                                                                                       {}).items())),
              f"- tuning groups (one problem, >= 2 local sizes): {sw.get('groups', 0)} over {sw.get('kernels', 0)} "
              f"kernels; {sw.get('sweep_rows', 0)} ok sweep rows",
              f"- groups per kernel: {_dist_line(sw.get('groups_per_kernel', {}), fmt='{:.0f}')}",
              f"- configurations per group: {_dist_line(sw.get('configs_per_group', {}), fmt='{:.0f}')}", ""]
    lines += ["## Times", "", f"- median time per ok row: {_dist_line(facts.get('time_median_us', {}), ' us')}"]
    if plot:
        lines += ["", f"![time distribution]({plot})"]
    n = facts.get("noise", {})
    lines += ["", "## Noise", "",
              f"- within-row coefficient of variation: {_dist_line(n.get('cv', {}), fmt='{:.3f}')}",
              f"- rows with CV <= 5 %: {_share(n.get('share_cv_le_5pct'))}; <= 10 %: "
              f"{_share(n.get('share_cv_le_10pct'))}",
              f"- timed repeats per row: {_dist_line(n.get('repeats', {}), fmt='{:.0f}')}", ""]
    a = facts.get("active_fraction", {})
    lines += ["## Representative arguments", "",
              f"- ok rows with an activity record: {a.get('rows', 0)}; active fraction "
              f"{_dist_line(a.get('quantiles', {}), fmt='{:.3f}')}",
              f"- share with active fraction >= 0.99: "
              f"{_pct(a['share_full']) if a.get('share_full') is not None else 'n/a'}; below 0.1: "
              f"{_pct(a['share_below_10pct']) if a.get('share_below_10pct') is not None else 'n/a'}", ""]
    lines += ["## Cost", "", f"- summed kernel time {facts.get('kernel_time_s', 0):.0f} s; harness wall time "
              f"{facts.get('harness_wall_s', 0):.0f} s"
              + (f"; first to last row {facts['measuring_span_h']:.2f} h" if facts.get("measuring_span_h") else ""),
              ""]
    if continue_cmd:
        lines += ["## Continue", "", "Rerun the command that made it; it resumes where it stopped:", "",
                  f"    {continue_cmd}", ""]
    return "\n".join(lines)


def write_card(root: str | Path) -> tuple[Path, dict[str, Any]]:
    """Write ``CARD.md`` (and the time plot) into the dataset directory; the path and the facts."""
    root = Path(root)
    df = read_dataset(root)
    manifest = read_manifest(root)
    facts = card_facts(df, manifest)
    plot = None
    if len(df):
        ok = df[(df["pass"] != "validity") & (df["status"] == "ok")]
        if len(ok) and _plot_times(ok, root / TIME_PLOT) is not None:
            plot = TIME_PLOT
    cmd = manifest.get("command")
    text = render_card(facts, cmd, plot)
    path = root / CARD
    tmp = path.with_name(f".{CARD}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path, facts

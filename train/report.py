"""What the training stage's commands print: the summaries of a trained tabular or CodeGen model, of a
pretrained backbone and of a fitted blend. Library functions, so that every command that trains (the
``train``/``pretrain``/``blend`` commands, the demo) prints the same tables."""

from __future__ import annotations

import math
from typing import Any

from kernelcast.train.blend import BLEND_SE, HEDGE_SE

from kernelcast.console import fmt_table

__all__ = ["format_blend", "format_metrics", "format_pretrain", "format_tabular"]


def format_tabular(res: dict[str, Any]) -> str:
    """What ``train --kind tabular`` prints."""
    d = res["data"]
    rows = []
    for t, h in res["heads"].items():
        an, fit = h.get("analytical_in_sample") or {}, h.get("residual_in_sample") or {}
        rows.append([t, h["rows"], h.get("kernels"), h["rounds"], h["weighting"], an.get("median_abs_log2"),
                     fit.get("median_abs_log2"), h["seconds"]])
    s = res["seconds"]
    return "\n".join([
        f"model       {res['out_dir']}   (tabular: LightGBM on {res['features']} features, residual "
        f"log2(measured/analytical); profile {res['profile']})",
        f"data        {d['rows']} rows of {d['kernels']} kernels ({d['rows_static_failed']} without static features)",
        f"time        {s['total']:.1f} s (load {s['load']:.1f}, table {s['table']:.1f}, fit {s['fit']:.1f})",
        "",
        fmt_table(rows, ["head", "rows", "kernels", "rounds", "weights", "analytical |log2| median",
                         "fitted |log2| median", "s"]),
        "(|log2| on the training rows, in-sample: 'kernelcast evaluate' gives held-out figures)"]
        + _few_shot_lines(res.get("intervals") or {}))


def _few_shot_lines(iv: dict[str, Any]) -> list[str]:
    """The few-shot correction the tabular model was saved with: its shape prior and the k-shot
    figures of its internal out-of-fold residuals, with the offset alone beside them."""
    tab = (iv.get("models") or {}).get("tabular")
    if not iv.get("available") or not tab:
        return [f"intervals   none: {iv.get('reason') or 'not calibrated'}"]
    sp = tab.get("shape")
    if sp:
        head = (f"shape prior: offset sd {sp['offset_sd']:.3g}, shape sd {sp['shape_sd']:.3g}, noise sd "
                f"{sp['noise_sd']:.3g} (log2), length scales " + " / ".join(f"{v:.3g}" for v in sp["lengths"])
                + f" over {sp['kernels']} kernels")
    else:
        head = "offset only (too few kernels with two rows for a shape prior)"
    lines = ["", "few-shot    " + head]
    rows = []
    for k, e in sorted((tab.get("shots") or {}).items(), key=lambda kv: int(kv[0])):
        a, b, c = e.get("estimated_prior") or {}, e.get("offset_only") or {}, e.get("chosen") or {}
        rows.append([k, a.get("median_ape"), a.get("mape"), b.get("median_ape"), b.get("mape"), c.get("median_ape"),
                     c.get("mape")])
    if rows:
        lines.append(fmt_table(rows, ["shots", "median APE %", "MAPE %", "offset only: median APE %", "MAPE %",
                                      "shots chosen: median APE %", "MAPE %"]))
        lines.append("(the model's internal out-of-fold residuals, k random rows of each kernel measured; chosen: the "
                     "k rows predict --suggest-shots would ask for)")
    return lines


def format_metrics(m: dict[str, Any], out_dir: str) -> str:
    rows = []
    for target, v in (m.get("validation") or {}).items():
        if not isinstance(v, dict):
            continue
        rows.append([target, v["rows"], v["kernels"], v["mape"], v["mape_per_kernel"], v["median_ape"], v["spearman"]])
    d, t = m["data"], m["training"]
    mm = m["model"]
    target = (f"residual log2(measured/analytical), profile {mm.get('profile')}, {mm.get('table_features')} table "
              f"features" if mm.get("residual") else "log2 time")
    split = m.get("split") or {}
    lines = [
        f"model       {out_dir}   ({m['mode']} mode, {mm['parameters']:,} parameters"
        + (f", base {mm['base']}" if mm.get("base") else ", from scratch") + f"; target {target})",
        f"data        {d['train_rows']} training rows ({d['train_kernels']} kernels), {d['val_rows']} validation "
        f"rows ({d['val_kernels']} kernels); discarded over {m['model']['max_length']} tokens: "
        f"{d['discarded_over_length_train']} train, {d['discarded_over_length_val']} validation",
        f"split       validation by {split.get('by', 'kernel')}"
        + (f": {len(split.get('val_groups') or [])} of {split.get('groups')} kernel groups"
           if split.get("by") == "group" else ""),
        f"training    {t['steps']} steps, {t['epochs_completed']} epoch(s), {t['seconds']:.0f} s, "
        + (f"{t['samples_per_s']:.1f} samples/s" if t["samples_per_s"] else "-")
        + f"; best epoch {t['best_epoch']} (step {t.get('best_step')}); final lr "
        + (f"{t['final_lr']:.2e}" if t.get("final_lr") else "-") + f"; stopped: {m['stopped']}",
    ]
    if m["stopped"] in ("max_steps", "time_limit"):
        lines.append("            (stopped by --max-steps/--max-minutes: rerun the same command to continue)")
    if rows:
        lines += ["", "validation (held-out kernels)",
                  fmt_table(rows, ["target", "rows", "kernels", "MAPE %", "MAPE/kernel %", "median APE %",
                                   "Spearman"])]
    else:
        lines.append("validation  no held-out rows (too few kernels)")
    return "\n".join(lines)


def format_pretrain(m: dict[str, Any], out_dir: str) -> str:
    """What ``pretrain`` prints."""
    t, k = m["texts"], m["tokens"]
    rows = [[when, m[f"validation_loss_{when}"], math.exp(m[f"validation_loss_{when}"])]
            for when in ("before", "after")]
    return "\n".join([
        f"model       {out_dir}   (CodeGen causal LM, {m['model']['parameters']:,} parameters, vocabulary "
        f"{k['vocab']})",
        f"data        {t['total']} kernel texts of {', '.join(m['corpora'])}: {t['train']} training "
        f"({k['train']:,} tokens), {t['validation']} held out in {t['validation_groups']} kernel groups "
        f"({k['validation']:,} tokens)",
        f"training    {m['steps']} of {m['planned_steps']} planned steps, {m['epochs_completed']} full epoch(s), "
        f"{m['train_seconds']:.0f} s; stopped: {m['stopped']}",
        "",
        fmt_table(rows, ["validation", "loss (nats/token)", "perplexity"]),
        f"fine-tune:  kernelcast train --mode efficient --base {out_dir} --data DATASET --out MODEL"])


def format_blend(res: dict[str, Any], model_dir: str) -> str:
    """What ``blend`` prints: the two models and the chosen blend on the out-of-fold rows, and every
    candidate's criterion."""
    f = res["figures"]
    rows = [[m, f[m]["rows"], f[m]["median_ape"], f[m]["p90_ape"], f[m]["mape"], f[m]["within_2x_pct"],
             f[m]["median_abs_log2"]] for m in ("analytical", "learned", "blend")]
    b = res["blend"]
    cands = [[k, v] for k, v in sorted(b.scores.items(), key=lambda kv: (not math.isfinite(kv[1]), kv[1]))]
    return "\n".join([
        f"out-of-fold predictions of {res['rows']} rows of {res['kernels']} kernels ({res['groups']} kernel groups, "
        f"{res['folds']} grouped folds; learned model: {res['learned_kind']} refitted per fold)",
        fmt_table(rows, ["model", "rows", "median APE %", "p90 APE %", "MAPE %", "within 2x %", "med |log2|"]),
        "",
        f"candidates (criterion {b.criterion}, lower is better)",
        fmt_table(cands, ["candidate", b.criterion]),
        "",
        f"blend chosen: {b.kind} ({b.formula()}); written to {res['path']}"]
        + _blend_why(b, res["groups"]) + [
        "(the blend's figures are on the out-of-fold rows it was chosen on; 'kernelcast evaluate --models "
        "...,blend' scores it on rows it never saw)"])


def _blend_why(b: Any, groups: int) -> list[str]:
    """Why the chosen blend is not the candidate that scored lowest, when it is not
    (:func:`train.blend.fit_stacked_blend`: a candidate has to beat the best single model, or the
    hedge, by standard errors of its per-group difference)."""
    finite = {k: v for k, v in b.scores.items() if math.isfinite(v)}
    if not finite:
        return []
    top = min(finite, key=lambda k: finite[k])
    if top == b.kind or finite[top] >= finite.get(b.kind, math.inf):
        return []
    anchor = b.anchor or b.kind
    hedge = ("; the single models were within " f"{HEDGE_SE:g} standard error of each other, so the geometric mean "
             "was the one to beat") if anchor == "geometric_mean" else ""
    return [f"({top} scored lower on these rows but did not beat {anchor} by {BLEND_SE:g} standard errors of the "
            f"per-group difference over {groups} kernel groups{hedge}: a margin that small was not borne out on "
            f"held-out kernels)"]

"""Which tunable parameters' effects the analytical model gets right: per-parameter medians.

For a dataset imported from a Kernel Tuner cache (rows carry the tunable parameters as ``tp_<name>``
columns), the analytical model predicts every row (or a seeded sample) with the given profile; the
rows are then grouped by each tunable parameter in turn, and for each value the benchmark prints
the median measured time, the median predicted time, the median ``log2(predicted / measured)`` and
both medians relative to the parameter's fastest value (``meas x`` / ``pred x``: a parameter whose
effect the model gets right has the two columns alike), with the medians of the model's parts
(compute, memory, latency in microseconds) and of its occupancy. The overall Spearman rank
correlation and the one within each value of every parameter of two or three values say whether
the order across the other parameters holds when one is fixed.

    PYTHONPATH=. python -m kernelcast.bench.gpu_params --data DATASET --profile PROFILE
        [--analysis-cache DIR] [--max-rows 1500] [--seed 0] [--max-values 20] [--json]
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.errors import InputError
from kernelcast.options import Parser

#: the prefix of the tunable-parameter columns of rows imported from a Kernel Tuner cache
TP_PREFIX = "tp_"


@dataclass
class ValueRow:
    """One value of one parameter: medians over its rows."""

    value: str
    rows: int
    measured_us: float
    predicted_us: float
    log2_ratio: float
    measured_rel: float          # the value's measured median over the parameter's fastest value's
    predicted_rel: float         # the same of the predictions
    compute_us: float
    memory_us: float
    latency_us: float
    occupancy: float
    spearman: float | None = None   # within the value's rows (parameters of two or three values)


@dataclass
class ParamReport:
    name: str
    values: list[ValueRow] = field(default_factory=list)


def _spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 3:
        return None
    v = pd.Series(a).corr(pd.Series(b), method="spearman")
    return None if pd.isna(v) else float(v)


def param_reports(frame: pd.DataFrame, max_values: int = 20) -> list[ParamReport]:
    """The per-parameter tables of ``frame`` (columns ``measured_us``, ``predicted_us``,
    ``compute_us``, ``memory_us``, ``latency_us``, ``occupancy`` and the ``tp_`` parameters); a
    parameter with a single value or more than ``max_values`` values is left out."""
    out: list[ParamReport] = []
    for col in [c for c in frame.columns if c.startswith(TP_PREFIX)]:
        n_values = frame[col].nunique(dropna=False)
        if n_values < 2 or n_values > max_values:
            continue
        rep = ParamReport(col[len(TP_PREFIX):])
        grouped = list(frame.groupby(col, dropna=False, sort=True))
        meds = {k: (float(g["measured_us"].median()), float(g["predicted_us"].median())) for k, g in grouped}
        best_m = min(m for m, _ in meds.values())
        best_p = min(p for _, p in meds.values())
        for k, g in grouped:
            m, p = meds[k]
            rep.values.append(ValueRow(
                value=str(k), rows=len(g), measured_us=m, predicted_us=p,
                log2_ratio=float(np.median(np.log2(g["predicted_us"] / g["measured_us"]))),
                measured_rel=m / best_m, predicted_rel=p / best_p,
                compute_us=float(g["compute_us"].median()), memory_us=float(g["memory_us"].median()),
                latency_us=float(g["latency_us"].median()), occupancy=float(g["occupancy"].median()),
                spearman=_spearman(g["measured_us"].to_numpy(), g["predicted_us"].to_numpy())
                if n_values <= 3 else None))
        out.append(rep)
    return out


def predicted_frame(data: str, profile: str, analysis_cache: str | None, max_rows: int, seed: int) -> pd.DataFrame:
    """The dataset's ok rows (a seeded sample of ``max_rows``; 0: all) with the analytical model's
    prediction and parts."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frames
    from kernelcast.models.analytical.model import AnalyticalModel

    frame, _ = load_measured_frames([Path(data)])
    if max_rows and len(frame) > max_rows:
        frame = frame.sample(max_rows, random_state=seed)
    frame = frame.reset_index(drop=True)
    model = AnalyticalModel(load_profile(profile), analysis_dirs=[analysis_cache] if analysis_cache else [])
    pred = model.predict(frame)
    parts = [e.get("time_parts_us", {}) for e in pred.explanation]
    out = frame[[c for c in frame.columns if c.startswith(TP_PREFIX)]].copy()
    out["measured_us"] = frame["time_median_us"].astype(float)
    out["predicted_us"] = pred.time_us
    for k in ("compute", "memory", "latency"):
        out[f"{k}_us"] = [float(p.get(k, np.nan)) for p in parts]
    out["occupancy"] = [float(e.get("occupancy", np.nan)) for e in pred.explanation]
    return out[np.isfinite(out["predicted_us"]) & (out["measured_us"] > 0)]


def _fmt(v: float | None, nd: int = 2) -> str:
    return "-" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def render(overall: float | None, rows: int, reports: list[ParamReport]) -> str:
    lines = [f"rows {rows}; Spearman (measured, predicted) {_fmt(overall)}"]
    head = (f"  {'value':>8} {'rows':>6} {'meas us':>10} {'pred us':>10} {'log2':>6} {'meas x':>7} {'pred x':>7}"
            f" {'comp us':>9} {'mem us':>9} {'lat us':>9} {'occ':>5} {'rho':>6}")
    for rep in reports:
        lines += ["", rep.name, head]
        for v in rep.values:
            lines.append(f"  {v.value:>8} {v.rows:>6} {v.measured_us:>10.1f} {v.predicted_us:>10.1f} "
                         f"{v.log2_ratio:>+6.2f} {v.measured_rel:>7.2f} {v.predicted_rel:>7.2f} {v.compute_us:>9.1f} "
                         f"{v.memory_us:>9.1f} {v.latency_us:>9.1f} {v.occupancy:>5.2f} {_fmt(v.spearman):>6}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.gpu_params", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a dataset imported from a Kernel Tuner cache")
    ap.add_argument("--profile", required=True, help="device profile: bundled name or JSON path")
    ap.add_argument("--analysis-cache", help="cache of the shared static analyses (kernelcast analyze)")
    ap.add_argument("--max-rows", type=int, default=1500, help="seeded sample of the rows (0: every row)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-values", type=int, default=20, help="leave out parameters of more values")
    ap.add_argument("--json", action="store_true", help="the same content as JSON")
    a = ap.parse_args(argv)
    try:
        if not (Path(a.data) / "manifest.json").is_file():
            raise InputError(f"--data {a.data}: not a dataset (no manifest.json)")
        if a.max_rows < 0 or a.max_values < 2:
            raise InputError("--max-rows must be >= 0 and --max-values >= 2")
        if a.analysis_cache and not Path(a.analysis_cache).is_dir():
            raise InputError(f"--analysis-cache {a.analysis_cache}: no such directory")
        from kernelcast.calib.profile import load_profile
        try:
            load_profile(a.profile)
        except (OSError, ValueError, KeyError) as e:
            raise InputError(f"--profile {a.profile}: {e}") from None
        frame = predicted_frame(a.data, a.profile, a.analysis_cache, a.max_rows, a.seed)
        if not any(c.startswith(TP_PREFIX) for c in frame.columns):
            raise InputError(f"--data {a.data}: the rows carry no tunable parameters (tp_ columns)")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    overall = _spearman(frame["measured_us"].to_numpy(), frame["predicted_us"].to_numpy())
    reports = param_reports(frame, a.max_values)
    if a.json:
        doc: dict[str, Any] = {"rows": len(frame), "spearman": overall,
                               "parameters": [asdict(r) for r in reports]}
        print(json.dumps(doc, indent=2))
    else:
        print(render(overall, len(frame), reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())

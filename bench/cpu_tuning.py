"""Model-guided tuning on a CPU device: kernelcast's search against random sampling over local-size
sweeps measured for real.

    python -m kernelcast.bench.cpu_lsize --out DIR [--sizes 16384,262144 --match suite:]   # measure
    python -m kernelcast.bench.cpu_tuning --from DIR [DIR ...] [--profile P] [--seeds 20] [--json]

The sweeps are those of :mod:`kernelcast.bench.cpu_lsize`: each problem (a kernel at one global
size) measured at every valid power-of-two local size in the isolated harness, in interleaved
shuffled rounds, stored in ``DIR/measurements.jsonl``. Several directories (the same problems
measured again) are combined per configuration by the geometric mean. Every search is then
replayed on that table: a measurement is a lookup of the configuration's measured time, so every
searcher sees the same times and the figures do not depend on the load while the search runs.

Searchers, ``--seeds`` runs each: ``kernelcast`` (:func:`kernelcast.models.search.guided_search`
with the analytical model's predictions for the profile), ``none`` (the same search without a
model: a flat prior) and ``random`` (a seeded random order without repetition, Kernel Tuner's
``random_sample``). Per problem and searcher: the median over seeds of the measurements needed to
come within 5 % and 1 % of the problem's best measured time (never: counted past the problem's
configuration count), the share of runs within 5 % after 1, 3 and 5 measurements, and the median
best found as a fraction of the optimum (``optimum / best``) after 1, 3 and 5. Overall: the
figures pooled over every run of every problem, and the sums over problems of the median
measurements to 5 %.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.errors import InputError
from kernelcast.options import Parser

SEARCHERS = ("kernelcast", "none", "random")
#: the measurement counts the shares and best-found fractions are reported at
AT = (1, 3, 5)
TOLERANCES = (0.05, 0.01)


def search_order(searcher: str, times: np.ndarray, preds: np.ndarray, lsizes: Sequence[int], seed: int) -> list[int]:
    """The configurations (indices) ``searcher`` measures, in order, over every configuration of one
    problem; a measurement returns the configuration's time in ``times`` (nan: failed)."""
    n = len(times)
    if searcher == "random":
        return [int(i) for i in np.random.default_rng(seed).permutation(n)]
    from kernelcast.models.search import guided_search

    prior = preds if searcher == "kernelcast" else np.ones(n)
    res = guided_search(prior, pd.DataFrame({"lsize": [float(s) for s in lsizes]}), lambda i: float(times[i]), n,
                        seed=seed, settle=False)
    order = [s.index for s in res.steps]
    return order + [i for i in range(n) if i not in set(order)]


def reach(order: Sequence[int], good: np.ndarray) -> int:
    """The 1-based position of the first configuration in ``order`` that is ``good``;
    ``len(order) + 1`` if none is."""
    return next((j + 1 for j, i in enumerate(order) if good[i]), len(order) + 1)


def best_after(order: Sequence[int], times: np.ndarray, k: int) -> float:
    """The optimum over the best time among the first ``k`` measured (0 if none succeeded)."""
    got = [times[i] for i in order[:k] if math.isfinite(times[i]) and times[i] > 0]
    return float(np.nanmin(times) / min(got)) if got else 0.0


def replay(times: Mapping[int, float], preds: Mapping[int, float], seeds: int,
           searchers: Sequence[str] = SEARCHERS) -> dict[str, Any] | None:
    """Every searcher's runs on one problem (local size -> measured us, local size -> predicted us);
    None with fewer than two measured local sizes."""
    lsizes = sorted(s for s, t in times.items() if t is not None and math.isfinite(t) and t > 0
                    and s in preds and math.isfinite(preds[s]) and preds[s] > 0)
    if len(lsizes) < 2:
        return None
    t = np.array([times[s] for s in lsizes], dtype=np.float64)
    p = np.array([preds[s] for s in lsizes], dtype=np.float64)
    out: dict[str, Any] = {"lsizes": lsizes, "best": lsizes[int(np.argmin(t))], "pick": lsizes[int(np.argmin(p))],
                           "within5": int((t <= t.min() * 1.05).sum()), "searchers": {}}
    for name in searchers:
        runs = []
        for seed in range(seeds):
            order = search_order(name, t, p, lsizes, seed)
            runs.append({"order": [lsizes[i] for i in order],
                         **{f"reach_{round(tol * 100)}": reach(order, t <= t.min() * (1 + tol)) for tol in TOLERANCES},
                         **{f"frac_{k}": best_after(order, t, k) for k in AT}})
        out["searchers"][name] = runs
    return out


def summary(runs: Sequence[Mapping[str, Any]], n: int) -> dict[str, Any]:
    """Medians and shares over runs on problems of ``n`` configurations each (``n`` None: pooled)."""
    r5 = np.array([r["reach_5"] for r in runs], dtype=np.float64)
    r1 = np.array([r["reach_1"] for r in runs], dtype=np.float64)
    out: dict[str, Any] = {"runs": len(runs), "median_to_5": float(np.median(r5)), "median_to_1": float(np.median(r1))}
    for k in AT:
        out[f"within5_at_{k}_pct"] = float(100.0 * np.mean(r5 <= k))
        out[f"median_frac_{k}"] = float(np.median([r[f"frac_{k}"] for r in runs]))
    return out


def score(table: Mapping[str, Mapping[int, float]], preds: Mapping[str, Mapping[int, float]], seeds: int,
          searchers: Sequence[str] = SEARCHERS) -> dict[str, Any]:
    """Every problem replayed; per problem and pooled summaries."""
    problems: dict[str, Any] = {}
    for pid in sorted(table):
        got = replay(table[pid], preds.get(pid, {}), seeds, searchers)
        if got is None:
            continue
        got["summary"] = {s: summary(got["searchers"][s], len(got["lsizes"])) for s in searchers}
        problems[pid] = got
    overall = {}
    for s in searchers:
        pooled = [r for p in problems.values() for r in p["searchers"][s]]
        if not pooled:
            continue
        overall[s] = summary(pooled, 0)
        overall[s]["sum_median_to_5"] = float(sum(p["summary"][s]["median_to_5"] for p in problems.values()))
    return {"problems": problems, "overall": overall, "seeds": seeds, "searchers": list(searchers)}


def format_table(res: Mapping[str, Any]) -> str:
    s = list(res["searchers"])
    head = f"{'problem':<42} {'n':>3} {'best':>5} {'pick':>5} " + " ".join(f"{x + ' to5%':>15}" for x in s)
    lines = [head]
    for pid, p in res["problems"].items():
        lines.append(f"{pid:<42} {len(p['lsizes']):>3} {p['best']:>5} {p['pick']:>5} "
                     + " ".join(f"{p['summary'][x]['median_to_5']:>15g}" for x in s))
    lines.append("")
    lines.append(f"pooled over problems x {res['seeds']} seeds   to 5%   to 1%   5% @1   5% @3   5% @5   "
                 f"@1      @3      @5      sum of medians to 5%")
    for x, o in res["overall"].items():
        lines.append(f"  {x:<36} {o['median_to_5']:>6g} {o['median_to_1']:>7g} "
                     + " ".join(f"{o[f'within5_at_{k}_pct']:6.1f}%" for k in AT) + " "
                     + " ".join(f"{o[f'median_frac_{k}']:7.3f}" for k in AT) + f" {o['sum_median_to_5']:>10g}")
    lines.append(f"{len(res['problems'])} problems; measurements: {', '.join(res.get('measurements', []))}; "
                 f"device {res.get('device')}; profile {res.get('profile')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.cpu_tuning", description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="from_dirs", nargs="+", required=True, metavar="DIR",
                    help="directories of `python -m kernelcast.bench.cpu_lsize --out DIR` (several: combined)")
    ap.add_argument("--profile", default="pocl-local", help="the device profile of the model (default pocl-local)")
    ap.add_argument("--seeds", type=int, default=20, help="runs per searcher and problem (default 20)")
    ap.add_argument("--searchers", default=",".join(SEARCHERS), help=f"comma-separated of {', '.join(SEARCHERS)}")
    ap.add_argument("--out", default=None, help="write every run's trace to this JSON file")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args(argv)
    from kernelcast.bench.cpu_lsize import MEASUREMENTS, combined_table, measured_table, predictions, read_measurements
    from kernelcast.calib.profile import load_profile

    try:
        if not 1 <= a.seeds <= 1000:
            raise InputError("--seeds must be 1-1000")
        searchers = [x.strip() for x in a.searchers.split(",") if x.strip()]
        bad = [x for x in searchers if x not in SEARCHERS]
        if not searchers or bad:
            raise InputError(f"--searchers {a.searchers!r}: expected some of {', '.join(SEARCHERS)}")
        for d in a.from_dirs:
            if not (Path(d) / MEASUREMENTS).is_file():
                raise InputError(f"--from {d}: no {MEASUREMENTS}")
        if a.out is not None and Path(a.out).is_dir():
            raise InputError(f"--out {a.out}: a directory, expected a file name")
        try:
            profile = load_profile(a.profile)
        except (OSError, ValueError) as e:
            raise InputError(f"--profile {a.profile}: {e}") from None
        runs = [read_measurements(Path(d)) for d in a.from_dirs]
        if not all(runs):
            raise InputError(f"--from: no measurements in {', '.join(d for d, r in zip(a.from_dirs, runs) if not r)}")
        tables = [measured_table(r)[0] for r in runs]
    except InputError as e:
        print(f"kernelcast: error: cpu_tuning: {e}", file=sys.stderr)
        return 2
    table = combined_table(tables) if len(tables) > 1 else tables[0]
    res = score(table, predictions(runs[0], profile), a.seeds, searchers)
    res.update(measurements=list(a.from_dirs), device=runs[0][0].get("device"), profile=a.profile)
    if a.out is not None:
        Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    if a.json:
        print(json.dumps({k: v for k, v in res.items() if k != "problems"}
                         | {"problems": {pid: {"lsizes": p["lsizes"], "best": p["best"], "pick": p["pick"],
                                               "summary": p["summary"]} for pid, p in res["problems"].items()}},
                         indent=2, default=str))
    else:
        print(format_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

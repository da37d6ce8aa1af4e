"""Local-size picks of the analytical model on a CPU device, measured on real kernels.

    python -m kernelcast.bench.cpu_lsize --out DIR [--profile P] [--sizes 65536] [--limit N]
        [--rounds 3] [--timeout S] [--seed 0] [--json]
    python -m kernelcast.bench.cpu_lsize --from DIR [--profile P] [--json]

Problems: the one-dimensional kernels of the bundled corpus (simple argument selection: every
buffer ``gsize`` elements, every scalar ``gsize``, a ``__local`` array one element per work-item)
and the entries of the project's suite whose local size is a free launch parameter (not a build
constant), each at the problem sizes given (the suite's at its listed size nearest each). Each
problem is swept over the local sizes that are powers of two from 1 to 1024, divide the global size
and are at most the device's maximum work-group size and work-item size (queried from the device).
A problem's local sizes are measured in the isolated harness in ``--rounds`` rounds, each round
visiting them in a fresh shuffled order (so a load drift hits every configuration alike), and each
configuration's rounds pooled (median).

Scored per problem: the local size the model predicts fastest, its regret (measured time of the
pick / measured best), whether that is within 5 %, and the regret of fixed local sizes 64, 128 and
256; overall, the share of problems within 5 % and the median regrets, on all problems and on the
two halves of a seeded split by kernel (``design`` and ``check``).

``DIR/measurements.jsonl`` holds one line per measured (problem, local size) with the kernel,
arguments and the host's 1-minute load average as the problem's rounds ended, so ``--from DIR``
scores a model again without measuring; a run into a DIR that already holds measurements measures
only the problems missing there (resumes).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.errors import InputError
from kernelcast.options import Parser
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

log = logging.getLogger(__name__)

#: local sizes swept (filtered per problem by divisibility and the device's limits; ``--min-lsize``
#: drops the smallest)
LSIZES = tuple(2 ** i for i in range(11))
#: the smallest local size swept by default
DEFAULT_MIN_LSIZE = 16
#: fixed local sizes scored beside the model
FIXED = (64, 128, 256)
#: a pick within this share of the best counts as a hit
TOLERANCE = 0.05
#: default global sizes of the bundled kernels
DEFAULT_SIZES = (65536,)
MEASUREMENTS = "measurements.jsonl"


@dataclass
class Problem:
    """One kernel at one global size, with its arguments per local size."""

    pid: str
    origin: str                         # "bundled" or "suite"
    kernel: Kernel
    gsize: tuple[int, ...]
    args: dict[int, list[ArgBinding]]   # local size -> bindings
    arrays: dict[str, np.ndarray] | None = None

    @property
    def kernel_key(self) -> str:
        """The kernel the problem belongs to (the split is by this)."""
        return f"{self.origin}:{self.kernel.name}"


@dataclass
class ProblemScore:
    """The model's pick on one problem against the measured times."""

    pid: str
    kernel_key: str
    lsizes: list[int]
    best: int
    pick: int
    regret: float
    within: bool
    fixed: dict[int, float] = field(default_factory=dict)     # local size -> regret (nan: not valid)


def valid_lsizes(gsize: int, max_wg: int, max_item: int, lsizes: Iterable[int] = LSIZES) -> list[int]:
    """The local sizes of ``lsizes`` that divide ``gsize`` and the device allows."""
    return [s for s in lsizes if gsize % s == 0 and s <= max_wg and s <= max_item]


def kernel_split(keys: Iterable[str], seed: int) -> dict[str, str]:
    """Each kernel key to ``design`` or ``check``: a seeded shuffle of the sorted keys, the first
    half (rounded up) design."""
    uniq = sorted(set(keys))
    random.Random(seed).shuffle(uniq)
    half = (len(uniq) + 1) // 2
    return {k: ("design" if i < half else "check") for i, k in enumerate(uniq)}


def score_problem(pid: str, kernel_key: str, times: Mapping[int, float], preds: Mapping[int, float],
                  fixed: Sequence[int] = FIXED) -> ProblemScore | None:
    """The pick (lowest prediction among the measured local sizes; ties to the smaller) against the
    measured ``times`` (local size -> us); None with fewer than two measured local sizes."""
    ok = sorted(s for s, t in times.items() if t is not None and math.isfinite(t) and t > 0)
    ok = [s for s in ok if s in preds and math.isfinite(preds[s])]
    if len(ok) < 2:
        return None
    best_t = min(times[s] for s in ok)
    best = min(ok, key=lambda s: (times[s], s))
    pick = min(ok, key=lambda s: (preds[s], s))
    regret = times[pick] / best_t
    fx = {f: (times[f] / best_t if f in ok else math.nan) for f in fixed}
    return ProblemScore(pid, kernel_key, ok, best, pick, regret, regret <= 1.0 + TOLERANCE, fx)


def summarize(scores: Sequence[ProblemScore], fixed: Sequence[int] = FIXED) -> dict[str, Any]:
    """Share of problems within 5 %, median and geometric-mean regret of the model and of each
    fixed local size (over the problems where that size was valid), and the picks' histogram."""
    n = len(scores)
    out: dict[str, Any] = {"problems": n}
    if not n:
        return out
    reg = np.array([s.regret for s in scores])
    out["within_pct"] = 100.0 * float(np.mean([s.within for s in scores]))
    out["median_regret"] = float(np.median(reg))
    out["geomean_regret"] = float(np.exp(np.mean(np.log(reg))))
    for f in fixed:
        r = np.array([s.fixed[f] for s in scores])
        r = r[np.isfinite(r)]
        out[f"fixed{f}_problems"] = int(r.size)
        out[f"fixed{f}_median_regret"] = float(np.median(r)) if r.size else math.nan
        out[f"fixed{f}_within_pct"] = 100.0 * float(np.mean(r <= 1.0 + TOLERANCE)) if r.size else math.nan
    picks: dict[str, int] = {}
    for s in scores:
        picks[str(s.pick)] = picks.get(str(s.pick), 0) + 1
    out["picks"] = dict(sorted(picks.items(), key=lambda kv: int(kv[0])))
    bests: dict[str, int] = {}
    for s in scores:
        bests[str(s.best)] = bests.get(str(s.best), 0) + 1
    out["bests"] = dict(sorted(bests.items(), key=lambda kv: int(kv[0])))
    return out


def score_table(table: Mapping[str, Mapping[int, float]], preds: Mapping[str, Mapping[int, float]],
                keys: Mapping[str, str], seed: int = 0) -> dict[str, Any]:
    """Every problem of ``table`` (problem -> local size -> measured us) scored with ``preds``
    (problem -> local size -> predicted us); ``keys`` maps a problem to its kernel (the split)."""
    scores = [s for pid in sorted(table)
              if (s := score_problem(pid, keys[pid], table[pid], preds.get(pid, {}))) is not None]
    split = kernel_split(keys.values(), seed)
    return {"seed": seed, "problems": [_score_dict(s, split[s.kernel_key]) for s in scores],
            "all": summarize(scores),
            "design": summarize([s for s in scores if split[s.kernel_key] == "design"]),
            "check": summarize([s for s in scores if split[s.kernel_key] == "check"])}


def _score_dict(s: ProblemScore, half: str) -> dict[str, Any]:
    return {"problem": s.pid, "kernel": s.kernel_key, "half": half, "lsizes": s.lsizes, "best": s.best,
            "pick": s.pick, "regret": s.regret, "within": s.within,
            **{f"fixed{f}_regret": (None if math.isnan(r) else r) for f, r in s.fixed.items()}}


# -- problems ------------------------------------------------------------------------------------


def bundled_problems(sizes: Sequence[int], lsizes: Sequence[int]) -> list[Problem]:
    """The one-dimensional bundled kernels at each global size, simple argument selection."""
    from kernelcast.datagen.args import UnsupportedArgument, simple_args
    from kernelcast.datagen.corpus.load import load_corpus_kernels

    from kernelcast.clang import kernel_signatures

    kernels, _ = load_corpus_kernels("bundled")
    out: list[Problem] = []
    for k in sorted(kernels, key=lambda k: k.name):
        if (k.dims or 1) != 1:
            continue
        params = kernel_signatures(k.source, k.build_options).get(k.name)
        if params is None:
            continue
        for g in sizes:
            try:
                args = {s: simple_args(params, (g,), (s,)) for s in lsizes if g % s == 0}
            except UnsupportedArgument:
                break
            out.append(Problem(f"bundled:{k.name}:g={g}", "bundled", k, (g,), args))
    return out


def suite_problems(manifest: Path, sizes: Sequence[int], lsizes: Sequence[int]) -> list[Problem]:
    """The suite entries whose local size is a launch parameter only (a plain number or a sweep,
    not a name the build uses), one-dimensional, at their listed size nearest each of ``sizes``
    whose global size the largest local size divides."""
    from kernelcast.bench.suite import load_manifest

    suite = load_manifest(manifest)
    out: list[Problem] = []
    for spec in suite.kernels:
        if len(spec.gsize) != 1:
            continue
        if spec.lsize is not None and not all(str(e).strip().isdigit() for e in spec.lsize):
            continue                       # the local size is a constant the kernel is built with
        chosen: list[int] = []
        for want in sizes:
            n = min(spec.sizes, key=lambda n: abs(math.log(n / want)))
            if n not in chosen:
                chosen.append(n)
        for n in chosen:
            inst = spec.instance(n, suite.name, 0)
            g = inst.gsize[0]
            args = {s: list(inst.args) for s in lsizes if g % s == 0}
            if any(a.kind == "local" for a in inst.args):
                continue
            out.append(Problem(f"suite:{spec.id}:n={n}", "suite", inst.kernel, inst.gsize, args, inst.arrays))
    return out


# -- measurement ---------------------------------------------------------------------------------


def _binding_dict(b: ArgBinding) -> dict[str, Any]:
    return {"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count, "value": b.value, "init": b.init,
            "reset_each_run": b.reset_each_run}


def read_measurements(out: Path) -> list[dict[str, Any]]:
    """The lines of ``out/measurements.jsonl`` (a truncated last line is dropped)."""
    path = out / MEASUREMENTS
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def measure(problems: Sequence[Problem], out: Path, *, rounds: int = 3, min_time_s: float = 0.02,
            timeout_s: float = 60.0, seed: int = 0, device: str = "auto", budget_s: float | None = None,
            progress: bool = True) -> dict[str, Any]:
    """Measure every problem not yet in ``out`` (all its local sizes, ``rounds`` shuffled rounds,
    pooled) and append its lines; stops starting problems after ``budget_s`` seconds."""
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.harness import Harness
    from kernelcast.instrument.runner import TimingPolicy, pool_rounds

    from kernelcast.config import device_spec

    out.mkdir(parents=True, exist_ok=True)
    done = {r["problem"] for r in read_measurements(out)}
    dev = select_device(device_spec(device))
    max_wg = int(dev.max_work_group_size)
    max_item = int(dev.max_work_item_sizes[0]) if dev.max_work_item_sizes else max_wg
    policy = TimingPolicy(warmup=1, min_repeats=3, min_time_s=min_time_s, max_time_s=max(1.0, 20 * min_time_s))
    t0 = time.time()
    measured = skipped = 0
    todo = [p for p in problems if p.pid not in done]
    with Harness(dev, meter="none", timeout_s=timeout_s) as h, (out / MEASUREMENTS).open("a") as fh:
        for i, p in enumerate(todo):
            if budget_s is not None and time.time() - t0 > budget_s:
                skipped = len(todo) - i
                break
            ls = [s for s in valid_lsizes(p.gsize[0], max_wg, max_item, sorted(p.args))]
            rng = random.Random(f"{seed}:{p.pid}")
            runs: dict[int, list[Any]] = {s: [] for s in ls}
            dead: set[int] = set()
            for _ in range(rounds):
                order = list(ls)
                rng.shuffle(order)
                for s in order:
                    if s in dead:
                        continue
                    m = h.run(p.kernel, LaunchConfig(p.gsize, (s,), p.args[s]), policy, arrays=p.arrays)
                    runs[s].append(m)
                    if m.status == "timeout":
                        dead.update(ls)     # a problem too slow for the launch timeout is abandoned
                    elif m.status != "ok":
                        dead.add(s)         # a failed configuration is not run again
            load = round(os.getloadavg()[0], 2)      # the host's load as the problem's rounds end
            for s in ls:
                if not runs[s]:
                    fh.write(json.dumps({"problem": p.pid, "origin": p.origin, "kernel": p.kernel.to_dict(),
                                         "gsize": list(p.gsize), "lsize": s,
                                         "args": [_binding_dict(b) for b in p.args[s]], "status": "abandoned",
                                         "time_us": None, "round_us": [], "device": dev.name,
                                         "max_work_group_size": max_wg, "load_avg_1m": load}) + "\n")
                    continue
                m = pool_rounds(runs[s])
                t = m.time.median_us if (m.status == "ok" and m.time is not None) else None
                rt = [r.time.median_us for r in runs[s] if r.status == "ok" and r.time is not None]
                fh.write(json.dumps({"problem": p.pid, "origin": p.origin, "kernel": p.kernel.to_dict(),
                                     "gsize": list(p.gsize), "lsize": s, "args": [_binding_dict(b) for b in p.args[s]],
                                     "status": m.status, "time_us": t, "round_us": rt,
                                     "device": dev.name, "max_work_group_size": max_wg,
                                     "load_avg_1m": load}) + "\n")
            fh.flush()
            measured += 1
            if progress:
                print(f"[{i + 1}/{len(todo)}] {p.pid}: {len(ls)} local sizes, {time.time() - t0:.0f} s",
                      file=sys.stderr)
    return {"measured": measured, "skipped_for_budget": skipped, "already": len(done), "wall_s": time.time() - t0}


# -- prediction and scoring ----------------------------------------------------------------------


def predictions(rows: Sequence[Mapping[str, Any]], profile: Any) -> dict[str, dict[int, float]]:
    """The analytical model's time of every measured line (problem -> local size -> us)."""
    import pandas as pd
    from kernelcast.models.analytical import AnalyticalModel

    frame_rows = []
    for r in rows:
        k = r["kernel"]
        frame_rows.append({"source": k["source"], "kernel_name": k["name"], "build_options": k.get("build_options", ""),
                           "gsize": list(r["gsize"]), "lsize": [int(r["lsize"])],
                           "args": [{**a, "value": None if a.get("value") is None else str(a["value"])}
                                    for a in r["args"]],
                           "power_cap_w": np.nan, "site_counts": ""})
    if not frame_rows:
        return {}
    pred = AnalyticalModel(profile).predict(pd.DataFrame(frame_rows)).time_us
    out: dict[str, dict[int, float]] = {}
    for r, t in zip(rows, pred):
        out.setdefault(r["problem"], {})[int(r["lsize"])] = float(t)
    return out


def measured_table(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """Measured times (problem -> local size -> us, nan where not ok) and each problem's kernel."""
    table: dict[str, dict[int, float]] = {}
    keys: dict[str, str] = {}
    for r in rows:
        if not isinstance(r, dict) or not {"problem", "lsize", "time_us", "origin", "kernel"} <= set(r):
            raise InputError(f"{MEASUREMENTS}: a line without problem, lsize, time_us, origin and kernel: not "
                             f"this benchmark's measurements")
        table.setdefault(r["problem"], {})[int(r["lsize"])] = r["time_us"] if r["time_us"] is not None else math.nan
        keys[r["problem"]] = f"{r['origin']}:{r['kernel']['name']}"
    return table, keys


def score_dir(out: Path, profile: Any, seed: int = 0) -> dict[str, Any]:
    """Score the model of ``profile`` on the measurements stored in ``out``."""
    rows = read_measurements(out)
    if not rows:
        raise InputError(f"{out}: no measurements ({MEASUREMENTS})")
    table, keys = measured_table(rows)
    res = score_table(table, predictions(rows, profile), keys, seed)
    res["measurements"] = str(out)
    res["device"] = rows[0].get("device")
    res["load_avg_1m"] = load_summary(rows)
    return res


def load_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The host's 1-minute load average while the problems of ``rows`` were measured (one value per
    problem, taken as its rounds ended): mean, minimum and maximum over the problems, None where the
    lines do not record it."""
    per: dict[str, float] = {}
    for r in rows:
        v = r.get("load_avg_1m")
        if isinstance(v, (int, float)) and math.isfinite(v):
            per[str(r.get("problem"))] = float(v)
    if not per:
        return None
    v = list(per.values())
    return {"problems": len(v), "mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))}


def stability(first: Mapping[str, Mapping[int, float]], second: Mapping[str, Mapping[int, float]],
              preds: Mapping[str, Mapping[int, float]], keys: Mapping[str, str]) -> dict[str, Any]:
    """Two measurements of the same problems: how much the model's regret moves between them
    (median absolute difference, share of problems whose within-5 % verdict is the same), and what
    the second measurement scores as a pick on the first (its measured best taken as the
    prediction): the share within 5 % a perfect model of one run reaches on the other."""
    both = sorted(set(first) & set(second))
    a = {p: s for p in both if (s := score_problem(p, keys[p], first[p], preds.get(p, {}))) is not None}
    b = {p: s for p in both if (s := score_problem(p, keys[p], second[p], preds.get(p, {}))) is not None}
    common = [p for p in both if p in a and p in b]
    ceiling = [s for p in common if (s := score_problem(p, keys[p], first[p], second[p])) is not None]
    if not common:
        return {"problems": 0}
    return {"problems": len(common),
            "regret_first_median": float(np.median([a[p].regret for p in common])),
            "regret_second_median": float(np.median([b[p].regret for p in common])),
            "within_first_pct": 100.0 * float(np.mean([a[p].within for p in common])),
            "within_second_pct": 100.0 * float(np.mean([b[p].within for p in common])),
            "regret_abs_change_median": float(np.median([abs(a[p].regret - b[p].regret) for p in common])),
            "same_verdict_pct": 100.0 * float(np.mean([a[p].within == b[p].within for p in common])),
            "same_best_pct": 100.0 * float(np.mean([a[p].best == b[p].best for p in common])),
            "second_run_as_pick_within_pct": 100.0 * float(np.mean([s.within for s in ceiling])),
            "second_run_as_pick_median_regret": float(np.median([s.regret for s in ceiling]))}


def combined_table(tables: Sequence[Mapping[str, Mapping[int, float]]]) -> dict[str, dict[int, float]]:
    """Several measurements of the same problems as one: per (problem, local size) the geometric
    mean of the runs that measured it ok (nan where none did)."""
    out: dict[str, dict[int, float]] = {}
    for pid in sorted(set().union(*[set(t) for t in tables])):
        sizes = sorted(set().union(*[set(t.get(pid, {})) for t in tables]))
        for s in sizes:
            v = [t[pid][s] for t in tables if s in t.get(pid, {}) and math.isfinite(t[pid][s]) and t[pid][s] > 0]
            out.setdefault(pid, {})[s] = float(np.exp(np.mean(np.log(v)))) if v else math.nan
    return out


def score_runs(dirs: Sequence[Path], profile: Any, seed: int = 0) -> dict[str, Any]:
    """The first run scored (:func:`score_dir`); with a second run, its stability against the
    first (:func:`stability`, over the problems both measured) and the model scored on the two
    combined (:func:`combined_table`)."""
    rows = [read_measurements(d) for d in dirs]
    for d, r in zip(dirs, rows):
        if not r:
            raise InputError(f"{d}: no measurements ({MEASUREMENTS})")
    res = score_dir(dirs[0], profile, seed)
    if len(dirs) > 1:
        tables, keys = [], {}
        for r in rows:
            t, k = measured_table(r)
            tables.append(t)
            keys.update(k)
        preds = predictions([x for r in rows for x in r], profile)
        res["again"] = str(dirs[1])
        res["again_load_avg_1m"] = load_summary(rows[1])
        res["stability"] = stability(tables[0], tables[1], preds, keys)
        common = set(tables[0]) & set(tables[1])
        comb = combined_table([{p: t[p] for p in common} for t in tables[:2]])
        res["combined"] = {k: v for k, v in score_table(comb, preds, keys, seed).items() if k != "problems"}
    return res


def format_table(res: Mapping[str, Any]) -> str:
    def f(x: Any) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"

    lines = [f"{'problem':<46} {'half':<6} {'best':>5} {'pick':>5} {'regret':>7} {'<=5%':>4} "
             f"{'r64':>6} {'r128':>6} {'r256':>6}"]
    for p in res["problems"]:
        lines.append(f"{p['problem'][:46]:<46} {p['half']:<6} {p['best']:5d} {p['pick']:5d} {p['regret']:7.3f} "
                     f"{'yes' if p['within'] else 'no':>4} {f(p['fixed64_regret']):>6} {f(p['fixed128_regret']):>6} "
                     f"{f(p['fixed256_regret']):>6}")
    lines.append("")
    lines.append(f"{'set':<7} {'problems':>8} {'within5%':>9} {'med regret':>10} {'geo regret':>10} "
                 f"{'256 med':>8} {'256 <=5%':>8} {'128 med':>8} {'64 med':>8}")
    for name in ("all", "design", "check"):
        s = res[name]
        if not s.get("problems"):
            lines.append(f"{name:<7} {0:8d}")
            continue
        lines.append(f"{name:<7} {s['problems']:8d} {s['within_pct']:8.1f}% {s['median_regret']:10.3f} "
                     f"{s['geomean_regret']:10.3f} {f(s['fixed256_median_regret']):>8} "
                     f"{s['fixed256_within_pct']:7.1f}% {f(s['fixed128_median_regret']):>8} "
                     f"{f(s['fixed64_median_regret']):>8}")
    lines.append(f"model picks: {res['all'].get('picks')}; measured bests: {res['all'].get('bests')}")
    for key, what in (("load_avg_1m", "measurements"), ("again_load_avg_1m", "second measurements")):
        ld = res.get(key)
        if ld:
            lines.append(f"1-minute load average during the {what}: mean {ld['mean']:.2f}, "
                         f"{ld['min']:.2f}-{ld['max']:.2f} over {ld['problems']} problems")
    st = res.get("stability")
    if st and st.get("problems"):
        lines.append(f"again ({res['again']}), {st['problems']} problems measured twice: model median regret "
                     f"{st['regret_first_median']:.3f} / {st['regret_second_median']:.3f}, within 5 % "
                     f"{st['within_first_pct']:.1f}% / {st['within_second_pct']:.1f}%; median |regret change| "
                     f"{st['regret_abs_change_median']:.3f}; same verdict {st['same_verdict_pct']:.1f}%, same best "
                     f"local size {st['same_best_pct']:.1f}%; the second run's best as a pick on the first: within 5 % "
                     f"{st['second_run_as_pick_within_pct']:.1f}%, median regret "
                     f"{st['second_run_as_pick_median_regret']:.3f}")
        for name in ("all", "design", "check"):
            c = res["combined"][name]
            if c.get("problems"):
                lines.append(f"both runs combined (geometric mean), {name}: {c['problems']} problems, within 5 % "
                             f"{c['within_pct']:.1f}%, median regret {c['median_regret']:.3f} (fixed 256 "
                             f"{c['fixed256_median_regret']:.3f}, within 5 % {c['fixed256_within_pct']:.1f}%)")
    return "\n".join(lines)


def _pid_hash(pid: str) -> str:
    return hashlib.sha1(pid.encode()).hexdigest()[:8]


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.cpu_lsize", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="measure into this directory (resumes what it holds)")
    ap.add_argument("--from", dest="from_dir", default=None, help="score the measurements of this directory only")
    ap.add_argument("--again", default=None,
                    help="with --from: a second measurement of the same problems (stability, and both combined)")
    ap.add_argument("--profile", default="pocl-local", help="the device profile of the model (default pocl-local)")
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="global sizes, comma-separated")
    ap.add_argument("--min-lsize", type=int, default=DEFAULT_MIN_LSIZE,
                    help=f"smallest local size swept, a power of two (default {DEFAULT_MIN_LSIZE})")
    ap.add_argument("--suite", default=None, help="suite manifest (default: the project's suite)")
    ap.add_argument("--no-suite", action="store_true", help="bundled kernels only")
    ap.add_argument("--match", default=None, help="only problems whose name contains this text (e.g. suite:)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many problems (seeded choice)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per problem (default 3)")
    ap.add_argument("--min-time", type=float, default=0.02, help="timing window per round, seconds (default 0.02)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="stop starting problems after this many seconds of measuring (default 600)")
    ap.add_argument("--launch-timeout", type=float, default=10.0, help="one configuration's timeout, seconds")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=0, help="the split by kernel and the shuffles")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from kernelcast.calib.profile import load_profile

    try:
        if (a.out is None) == (a.from_dir is None):
            raise InputError("give exactly one of --out DIR (measure) and --from DIR (score stored measurements)")
        if a.again is not None and a.from_dir is None:
            raise InputError("--again goes with --from")
        try:
            sizes = [int(x) for x in a.sizes.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--sizes {a.sizes!r}: expected comma-separated integers") from None
        if not sizes or any(s < 2 for s in sizes):
            raise InputError(f"--sizes {a.sizes!r}: every size must be at least 2")
        if a.limit is not None and a.limit < 1:
            raise InputError("--limit must be >= 1")
        if not 1 <= a.rounds <= 16 or not 0 < a.min_time <= 10 or a.timeout <= 0 or a.launch_timeout <= 0:
            raise InputError("--rounds must be 1-16, --min-time in (0, 10], --timeout and --launch-timeout > 0")
        if a.min_lsize not in LSIZES:
            raise InputError(f"--min-lsize {a.min_lsize}: expected a power of two from 1 to {LSIZES[-1]}")
        lsizes = [s for s in LSIZES if s >= a.min_lsize]
        try:
            profile = load_profile(a.profile)
        except (OSError, ValueError) as e:
            raise InputError(f"--profile {a.profile}: {e}") from None
        if a.out is not None and Path(a.out).exists() and not Path(a.out).is_dir():
            raise InputError(f"--out {a.out}: not a directory")
        if a.from_dir is not None:
            if not (Path(a.from_dir) / MEASUREMENTS).is_file():
                raise InputError(f"{a.from_dir}: no {MEASUREMENTS}")
            if a.again is not None and not (Path(a.again) / MEASUREMENTS).is_file():
                raise InputError(f"--again {a.again}: no {MEASUREMENTS}")
            res = score_runs([Path(a.from_dir)] + ([Path(a.again)] if a.again else []), profile, a.seed)
        else:
            suite = Path(a.suite) if a.suite else Path(__file__).resolve().parent.parent / "suites" / "kernelcast" \
                / "suite.json"
            if not a.no_suite and not suite.is_file():
                raise InputError(f"--suite {suite}: no such file")
            # the suite first: a manifest that does not load is reported before any other work
            suite_part = [] if a.no_suite else suite_problems(suite, sizes, lsizes)
            problems = bundled_problems(sizes, lsizes) + suite_part
            if a.match:
                problems = [p for p in problems if a.match in p.pid]
                if not problems:
                    raise InputError(f"--match {a.match!r}: no problem's name contains it")
            if a.limit is not None and a.limit < len(problems):
                problems = sorted(problems, key=lambda p: _pid_hash(f"{a.seed}:{p.pid}"))[:a.limit]
            info = measure(problems, Path(a.out), rounds=a.rounds, min_time_s=a.min_time,
                           timeout_s=a.launch_timeout, seed=a.seed, device=a.device, budget_s=a.timeout)
            res = score_dir(Path(a.out), profile, a.seed)
            res["run"] = info
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res, indent=2, default=str) if a.json else format_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CPU tuning benchmark: kernelcast's model-guided search against the same search without a model and
random sampling, over the local-size sweeps of the suite kernels measured for real on the local device.

    python -m kernelcast.bench.cpu_tuning [--kernels K,...] [--sizes 2] [--skip-sizes 1] [--seeds 20]
        [--budget 10] [--profile P] [--rounds 1] [--check-budget 5] [--reference FILE] [--out DIR] [--json]
    python -m kernelcast.bench.cpu_tuning --from DIR/cpu_tuning.json [--profile P] [--reference FILE] [--json]

Instances: the one-dimensional suite entries whose local size is a free launch parameter, each at
``--sizes`` of its problem sizes after the ``--skip-sizes`` smallest, swept over the powers of two
that divide the global size and the device allows. The table: every configuration measured in the
isolated harness with datagen's timing policy, in one run, in a seeded order across all instances,
with the machine's load. The replay on the table, ``--seeds`` seeds each: measurements to come within
5 % and 1 % of the best, the share of runs within 5 % and the best found after 1, 3, 5 and 10. The
check: one real guided run per instance measuring as it goes. Reference: docs/benchmarks.md.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.models.search import guided_search

from kernelcast.errors import InputError
from kernelcast.options import Parser, check_in_file, check_out_dir, nonneg_int, positive_int, seed
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

SEARCHERS = ("kernelcast", "none", "random")
TOLERANCES = (0.05, 0.01)
SHARE_BUDGETS = (1, 3, 5, 10)
FRAC_BUDGETS = (1, 3, 5, 10)
RESULT = "cpu_tuning.json"
DEFAULT_SUITE = Path(__file__).resolve().parent.parent / "suites" / "kernelcast" / "suite.json"


@dataclass
class Instance:
    """One suite kernel at one problem size, with its local-size sweep."""

    iid: str
    kernel: Kernel
    gsize: tuple[int, ...]
    args: list[ArgBinding]
    lsizes: list[int]
    arrays: dict[str, np.ndarray] | None = None
    times: list[float] = field(default_factory=list)          # measured us per local size (NaN: failed)
    records: list[dict[str, Any]] = field(default_factory=list)

    def config(self, j: int) -> LaunchConfig:
        return LaunchConfig(self.gsize, (self.lsizes[j],), list(self.args))


def sweep(gsize: int, max_wg: int, max_item: int, lo: int = 1, hi: int = 1024) -> list[int]:
    """Powers of two in [lo, hi] that divide ``gsize`` and the device allows."""
    from kernelcast.bench.cpu_lsize import valid_lsizes

    return valid_lsizes(gsize, max_wg, max_item, [2 ** i for i in range(31) if lo <= 2 ** i <= hi])


def eligible(suite: Any) -> list[Any]:
    """The suite entries whose local size is a free launch parameter: one-dimensional, given as plain
    numbers (no build constant) and no ``__local`` argument (sized for one local size)."""
    out = []
    for spec in suite.kernels:
        fixed = [e for ls in ([spec.lsize] if spec.lsize else []) + (spec.lsizes or []) for e in ls]
        if len(spec.gsize) == 1 and all(str(e).strip().isdigit() for e in fixed) and \
                not any(a.kind == "local" for a in spec.args):
            out.append(spec)
    return out


def select(manifest: Path, kernels: Sequence[str] | None) -> tuple[Any, list[Any]]:
    """The suite and its eligible entries (those of ``kernels``); :class:`InputError` for an unknown id."""
    from kernelcast.bench.suite import load_manifest

    suite = load_manifest(manifest)
    specs = eligible(suite)
    if kernels:
        ids = [s.id for s in specs]
        bad = [k for k in kernels if k not in ids]
        if bad:
            raise InputError(f"--kernels: {', '.join(bad)} not among the suite kernels with a free local size "
                             f"({', '.join(ids)})")
        specs = [s for s in specs if s.id in kernels]
    return suite, specs


def instances(suite: Any, specs: Sequence[Any], sizes: int, skip: int, max_wg: int, max_item: int,
              lo: int, hi: int) -> list[Instance]:
    """Each entry at ``sizes`` of its problem sizes after the ``skip`` smallest, with its inputs."""
    out = []
    for spec in specs:
        for n in sorted(spec.sizes)[skip:skip + sizes]:
            inst = spec.instance(n, suite.name, 0)
            ls = sweep(inst.gsize[0], max_wg, max_item, lo, hi)
            if len(ls) >= 2:
                out.append(Instance(f"{spec.id}:n={n}", inst.kernel, inst.gsize, list(inst.args), ls, inst.arrays))
    return out


# -- measurement ---------------------------------------------------------------------------------


def _record(m: Measurement) -> dict[str, Any]:
    ok = m.status == "ok" and m.time is not None
    return {"status": m.status, "time_us": m.time.median_us if ok and m.time else None,
            "cv": m.time.cv if ok and m.time else None, "load_avg_1m": m.machine.get("load_avg_1m"),
            "other_cpu_frac": m.machine.get("other_cpu_frac")}


def measure_table(insts: Sequence[Instance], harness: Any, rounds: int, seed_: int,
                  say: Callable[[str], None]) -> dict[str, Any]:
    """Every (instance, local size) measured ``rounds`` times, each round in a fresh seeded order across
    all instances, rounds pooled; then a noisy or loaded measurement once more (datagen's rule),
    keeping the lower CV. Fills each instance's ``times`` and ``records``."""
    from kernelcast.datagen.generate import DatagenOptions, needs_remeasure
    from kernelcast.instrument.runner import pool_rounds

    policy = DatagenOptions().timing
    jobs = [(i, j) for i, inst in enumerate(insts) for j in range(len(inst.lsizes))]
    runs: dict[tuple[int, int], list[Measurement]] = {k: [] for k in jobs}
    rng = random.Random(seed_)
    t0, done = time.time(), 0

    def run(k: tuple[int, int]) -> Measurement:
        nonlocal done
        inst = insts[k[0]]
        m = harness.run(inst.kernel, inst.config(k[1]), policy, arrays=inst.arrays)
        done += 1
        if done % 25 == 0:
            say(f"{done} measurements, {time.time() - t0:.0f} s")
        return m

    for _ in range(rounds):
        order = list(jobs)
        rng.shuffle(order)
        for k in order:
            if all(m.status == "ok" for m in runs[k]):      # a failed configuration is not run again
                runs[k].append(run(k))
    again = 0
    for k in jobs:
        m = runs[k][-1]
        if m.time is not None and needs_remeasure(m.status, m.time.cv, sum(m.time.times_us) * m.time.group * 1e-6,
                                                  m.machine.get("other_cpu_frac")):
            m2 = run(k)
            again += 1
            if m2.status == "ok" and m2.time is not None and m2.time.cv < m.time.cv:
                runs[k][-1] = m2
    for i, inst in enumerate(insts):
        inst.records = []
        for j in range(len(inst.lsizes)):
            p = pool_rounds(runs[(i, j)])
            rec = {"lsize": inst.lsizes[j], **_record(p), "rounds": [_record(m) for m in runs[(i, j)]]}
            inst.records.append(rec)
        inst.times = [r["time_us"] if r["time_us"] else math.nan for r in inst.records]
    every = [r for inst in insts for x in inst.records for r in x["rounds"]]
    loads = [r["load_avg_1m"] for r in every if r["load_avg_1m"] is not None]
    other = [r["other_cpu_frac"] for r in every if r["other_cpu_frac"] is not None]
    return {"measurements": done, "remeasured": again, "wall_s": round(time.time() - t0, 1),
            "load_avg_1m_mean": float(np.mean(loads)) if loads else None,
            "load_avg_1m_max": float(np.max(loads)) if loads else None,
            "other_cpu_frac_mean": float(np.mean(other)) if other else None, "cpus": os.cpu_count()}


def predictions(inst: Instance, profile: Any) -> np.ndarray:
    """The analytical model's time (us) of every local size of ``inst`` (NaN where it has none)."""
    from kernelcast.models.predict import configuration_row, score_configurations

    args = [{"name": a.name, "kind": a.kind, "dtype": a.dtype, "count": a.count,
             "value": None if a.value is None else str(a.value), "init": a.init} for a in inst.args]
    rows = [configuration_row(inst.kernel, inst.gsize, (s,), args) for s in inst.lsizes]
    return np.asarray(score_configurations(pd.DataFrame(rows), profile).time_us, dtype=np.float64)


# -- replay --------------------------------------------------------------------------------------


def random_trace(n: int, budget: int, seed_: int) -> list[int]:
    """Random sampling without replacement: the first ``budget`` of a seeded permutation."""
    return [int(i) for i in np.random.default_rng(seed_).permutation(n)[:budget]]


def guided_trace(pred: np.ndarray, lsizes: Sequence[int], times: Sequence[float] | np.ndarray, budget: int,
                 seed_: int) -> list[int]:
    """kernelcast's search replayed on ``times``: the configurations it measures, in order."""
    res = guided_search(pred, pd.DataFrame({"lsize": list(lsizes)}), lambda i: float(times[i]), budget,
                        seed=seed_, settle=False)
    return [s.index for s in res.steps]


def trace_stats(seq: Sequence[int], times: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """Measurements to reach within 5 % and 1 % of the table's best (None: never) and the fraction
    of the optimum found after each of :data:`FRAC_BUDGETS`, of one run visiting ``seq``
    (:func:`kernelcast.bench.tuning.trace_stats` on the times in that order)."""
    from kernelcast.bench.tuning import trace_stats as stats

    t = np.asarray(times, dtype=np.float64)
    out = stats([float(t[i]) for i in seq], float(np.nanmin(t)), FRAC_BUDGETS)
    return {"sequence": [int(i) for i in seq], **{k: v for k, v in out.items() if k.startswith(("reach_", "frac_"))}}


def _median(vals: Sequence[float | None]) -> float | None:
    m = float(np.median([math.inf if v is None else v for v in vals])) if len(vals) else math.inf
    return m if math.isfinite(m) else None          # None: more than the budget


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Medians over runs: measurements to 5 % and 1 %, the share within 5 % at each of
    :data:`SHARE_BUDGETS`, the fraction of the optimum at each of :data:`FRAC_BUDGETS`."""
    out: dict[str, Any] = {"runs": len(runs)}
    for tol in TOLERANCES:
        key = f"reach_{round(tol * 100)}"
        out[f"median_{key}"] = _median([r[key] for r in runs])
    for b in SHARE_BUDGETS:
        out[f"within5_at_{b}_pct"] = 100.0 * float(np.mean([r["reach_5"] is not None and r["reach_5"] <= b
                                                             for r in runs]))
    for b in FRAC_BUDGETS:
        out[f"median_frac_{b}"] = float(np.median([r[f"frac_{b}"] for r in runs]))
    return out


def replay(times: Sequence[float], pred: np.ndarray, lsizes: Sequence[int], seeds: int, budget: int,
           extra: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Each searcher ``seeds`` times on one measured table (at most ``budget`` measurements each);
    ``extra``: more guided searches, each with its own predictions (name -> us per local size)."""
    t = np.asarray(times, dtype=np.float64)
    n, b = len(t), min(budget, len(t))
    good = int((t <= np.nanmin(t) * 1.05).sum())
    out: dict[str, Any] = {"configurations": n, "budget": b, "within5_configurations": good,
                           "best_lsize": int(lsizes[int(np.nanargmin(t))]),
                           "predicted_best_lsize": int(lsizes[int(np.nanargmin(pred))]) if np.isfinite(pred).any()
                           else None,
                           "random_expected_reach_5": (n + 1) / (good + 1), "searchers": {}}
    models = {"kernelcast": pred, "none": np.ones(n), "random": None, **(extra or {})}
    for s, p in models.items():
        if p is None:
            seqs = [random_trace(n, b, k) for k in range(seeds)]
        else:
            seqs = [guided_trace(p, lsizes, t, b, k) for k in range(seeds)]
        runs = [trace_stats(q, t) for q in seqs]
        out["searchers"][s] = {**summarize(runs), "traces": runs}
    return out


def overall(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per searcher: the median over instances, the pooled figures over every run, and the sum over
    instances of the median measurements to 5 % (a run that never gets there as budget + 1), over
    the instances the searcher ran on."""
    out: dict[str, Any] = {}
    for s in dict.fromkeys(k for r in results for k in r["searchers"]):
        ent = [r["searchers"][s] for r in results if s in r["searchers"]]
        results_s = [r for r in results if s in r["searchers"]]
        runs = [x for e in ent for x in e["traces"]]
        figs = {f"instances_{k}": _median([e[k] for e in ent]) for k in ("median_reach_5", "median_reach_1")}
        figs.update({f"pooled_{k}": v for k, v in summarize(runs).items()})
        figs["sum_median_reach_5"] = float(sum(e["median_reach_5"] if e["median_reach_5"] is not None
                                               else r["budget"] + 1 for e, r in zip(ent, results_s)))
        figs["instances"] = len(ent)
        out[s] = figs
    return out


# -- the real guided run -------------------------------------------------------------------------


def live_check(inst: Instance, pred: np.ndarray, measure: Callable[[Kernel, LaunchConfig], Measurement],
               budget: int) -> dict[str, Any]:
    """kernelcast's search (seed 0) measuring on the device through ``measure`` (the seam of
    :func:`models.tune.tune`), its choice scored against the instance's measured table."""
    live: list[float] = []

    def one(j: int) -> float:
        m = measure(inst.kernel, inst.config(j))
        live.append(m.time.median_us if m.status == "ok" and m.time is not None else math.nan)
        return live[-1]

    b = min(budget, len(inst.lsizes))
    res = guided_search(pred, pd.DataFrame({"lsize": inst.lsizes}), one, b, seed=0, settle=False)
    t = np.asarray(inst.times, dtype=np.float64)
    opt = float(np.nanmin(t))
    replayed = guided_trace(pred, inst.lsizes, t, b, 0)
    seq = [s.index for s in res.steps]
    same = next((k for k, (x, y) in enumerate(zip(seq, replayed)) if x != y), min(len(seq), len(replayed)))
    choice = res.best_index
    ratio = float(t[choice] / opt) if choice is not None and np.isfinite(t[choice]) else None
    rp = [t[i] for i in replayed if np.isfinite(t[i])]
    agree = [lv / t[i] for i, lv in zip(seq, live) if np.isfinite(lv) and np.isfinite(t[i])]
    return {"budget": b, "sequence": seq, "live_us": live,
            "choice_lsize": None if choice is None else inst.lsizes[choice],
            "choice_over_best": ratio, "within5": ratio is not None and ratio <= 1.05,
            "replay_sequence": replayed, "same_prefix": same,
            "replay_within5": bool(rp and min(rp) <= opt * 1.05),
            "live_over_table_median": float(np.median(agree)) if agree else None}


# -- report --------------------------------------------------------------------------------------


def _f(x: Any, spec: str = ".1f", none: str = ">B") -> str:
    return none if x is None else format(x, spec)


def _cols() -> str:
    return " ".join([f"{'5%@' + str(b):>6}" for b in SHARE_BUDGETS] + [f"{'f@' + str(b):>6}" for b in FRAC_BUDGETS])


def format_table(res: dict[str, Any]) -> str:
    """The report: a line per instance and searcher, the overall figures, the table's run and the check."""
    head = f"{'instance':<26} {'N':>3} {'m5':>3} {'searcher':<10} {'to5%':>5} {'to1%':>5} " + _cols()
    lines = [f"device {res['device']}; profile {res['profile']}; {res['seeds']} seeds, budget {res['budget']}", head]
    for r in res["instances"]:
        for s, v in r["searchers"].items():
            lines.append(f"{r['instance'][:26]:<26} {r['configurations']:3d} {r['within5_configurations']:3d} {s:<10} "
                         f"{_f(v['median_reach_5']):>5} {_f(v['median_reach_1']):>5} "
                         + " ".join(f"{v[f'within5_at_{b}_pct']:5.0f}%" for b in SHARE_BUDGETS) + " "
                         + " ".join(f"{v[f'median_frac_{b}']:6.3f}" for b in FRAC_BUDGETS))
    lines.append("")
    lines.append(f"{'overall':<10} {'sum to5%':>8} {'med to5%':>8} {'med to1%':>8} {'pool to5%':>9} " + _cols())
    for s, v in res["overall"].items():
        lines.append(f"{s:<10} {v['sum_median_reach_5']:8.1f} {_f(v['instances_median_reach_5']):>8} "
                     f"{_f(v['instances_median_reach_1']):>8} {_f(v['pooled_median_reach_5']):>9} "
                     + " ".join(f"{v[f'pooled_within5_at_{b}_pct']:5.1f}%" for b in SHARE_BUDGETS) + " "
                     + " ".join(f"{v[f'pooled_median_frac_{b}']:6.3f}" for b in FRAC_BUDGETS))
    if res.get("run"):
        r = res["run"]
        lines.append(f"table: {r['measurements']} measurements ({r['remeasured']} again) in {r['wall_s']:.0f} s; "
                     f"load average mean {_f(r['load_avg_1m_mean'], '.2f', '-')}, "
                     f"max {_f(r['load_avg_1m_max'], '.2f', '-')} on "
                     f"{r['cpus']} CPUs; other processes' CPU share mean {_f(r['other_cpu_frac_mean'], '.2f', '-')}")
    checks = [(r["instance"], r["check"]) for r in res["instances"] if r.get("check")]
    if checks:
        ok = sum(c["within5"] for _, c in checks)
        lines.append(f"real guided runs (seed 0, budget {checks[0][1]['budget']}): choice within 5 % of the table's "
                     f"best on {ok}/{len(checks)} instances (the replay: "
                     f"{sum(c['replay_within5'] for _, c in checks)}/{len(checks)}); the same sequence as the replay "
                     f"on {sum(c['same_prefix'] == len(c['sequence']) for _, c in checks)}/{len(checks)}")
        for name, c in checks:
            lines.append(f"  {name:<26} choice {c['choice_lsize']}, {_f(c['choice_over_best'], '.3f', '-')} x best, "
                         f"same as replay for {c['same_prefix']}/{len(c['sequence'])} steps; live / table time "
                         f"median {_f(c.get('live_over_table_median'), '.2f', '-')}")
    return "\n".join(lines)


def _write(out: Path, res: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{RESULT}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    os.replace(tmp, out / RESULT)


def _profile(name: str | None, info: Any, say: Callable[[str], None]) -> Any:
    """The profile named, else the bundled profile measured on this device, else (said on stderr) the
    cached or a quick calibration of this device; a named profile must describe this type of device."""
    from kernelcast.calib.local import resolve_profile
    from kernelcast.calib.profile import bundled_profile_for, load_profile

    if name and info is None:           # a stored table: no device to check the profile against
        try:
            return load_profile(name)
        except (OSError, ValueError) as e:
            raise InputError(f"--profile {name}: {str(e).splitlines()[0] if str(e) else e}") from None
    if not name and bundled_profile_for(info) is None:
        say(f"no bundled profile (calib/profiles/pocl-local.json included) was measured on this device ({info.name}): "
            f"using its own calibration (give --profile P to choose)")
    return resolve_profile(name, "auto", on_calibrate=say)


def _stored(path: str, option: str) -> tuple[dict[str, Any], list[Instance]]:
    """A previous run's result and its instances with their measured tables."""
    try:
        doc = json.loads(check_in_file(path, option).read_text())
        if not isinstance(doc, dict) or doc.get("benchmark") != "cpu_tuning" or not doc.get("instances"):
            raise ValueError("no instances")
        out = []
        for r in doc["instances"]:
            inst = Instance(r["instance"], Kernel.from_dict(r["kernel"]), tuple(r["gsize"]),
                            [ArgBinding(**a) for a in r["args"]], [int(x["lsize"]) for x in r["table"]])
            inst.records = r["table"]
            inst.times = [x["time_us"] if x["time_us"] else math.nan for x in r["table"]]
            out.append(inst)
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{option} {path}: not a {RESULT} of this benchmark ({e})") from None
    return doc, out


def build_parser() -> Parser:
    p = Parser(prog="python -m kernelcast.bench.cpu_tuning", description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", default=None, help="suite kernel ids, comma-separated (default: every eligible one)")
    p.add_argument("--sizes", type=positive_int, default=2, help="problem sizes per kernel (2)")
    p.add_argument("--skip-sizes", type=nonneg_int, default=1, help="skip this many of a kernel's smallest sizes (1)")
    p.add_argument("--min-lsize", type=positive_int, default=1, help="smallest local size swept (1)")
    p.add_argument("--max-lsize", type=positive_int, default=1024, help="largest local size swept (1024)")
    p.add_argument("--seeds", type=positive_int, default=20, help="replays per searcher and instance (20)")
    p.add_argument("--budget", type=positive_int, default=10, help="measurements per replayed search (10)")
    p.add_argument("--check-budget", type=nonneg_int, default=5,
                   help="measurements of the real guided run per instance (5; 0: no real run)")
    p.add_argument("--rounds", type=positive_int, default=1, help="measurements of each configuration, pooled (1)")
    p.add_argument("--seed", type=seed, default=0, help="the order of the measurements (0)")
    p.add_argument("--profile", default=None,
                   help="device profile of the analytical model (default: the one measured on this device)")
    p.add_argument("--suite", default=None, help="suite manifest (default: the project's suite)")
    p.add_argument("--from", dest="from_file", default=None,
                   help=f"replay the table of a previous run's {RESULT} (nothing is measured)")
    p.add_argument("--reference", default=None,
                   help=f"another run's {RESULT}: its measured times as a fourth searcher's model ('reference', "
                        f"the best a model can do on a host as repeatable as this one)")
    p.add_argument("--out", default=None, help=f"write DIR/{RESULT} (the table, every trace, the checks)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the report (without traces) as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)

    def say(msg: str) -> None:
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        if a.min_lsize > a.max_lsize:
            raise InputError(f"--min-lsize {a.min_lsize} is above --max-lsize {a.max_lsize}")
        out = check_out_dir(a.out) if a.out else None
        ref = {i.iid: dict(zip(i.lsizes, i.times)) for i in _stored(a.reference, "--reference")[1]} \
            if a.reference else {}
        doc: dict[str, Any] | None = None
        if a.from_file:
            if a.kernels:
                raise InputError("--kernels chooses what a new run measures; --from replays a stored table whole")
            doc, insts = _stored(a.from_file, "--from")
        else:
            manifest = Path(a.suite) if a.suite else DEFAULT_SUITE
            if not manifest.is_file():
                raise InputError(f"--suite {manifest}: no such file")
            suite, specs = select(manifest, [k.strip() for k in (a.kernels or "").split(",") if k.strip()] or None)
        info: Any = None
        if doc is None or not a.profile:
            from kernelcast.instrument.backends import select_device

            from kernelcast.config import device_spec

            info = select_device(device_spec(None))
        profile = _profile(a.profile, info, say)
        if doc is None:
            item = int(info.max_work_item_sizes[0]) if info.max_work_item_sizes else int(info.max_work_group_size)
            insts = instances(suite, specs, a.sizes, a.skip_sizes, int(info.max_work_group_size), item,
                              a.min_lsize, a.max_lsize)
            if not insts:
                raise InputError("no instance has two or more local sizes to choose from")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    preds = [predictions(inst, profile) for inst in insts]
    run_info = doc.get("run") if doc else None
    checks: list[dict[str, Any] | None] = [None] * len(insts)
    if doc is None:
        from kernelcast.datagen.generate import DatagenOptions
        from kernelcast.instrument.harness import Harness

        say(f"{len(insts)} instances, {sum(len(i.lsizes) for i in insts)} configurations on {info.name}")
        policy = DatagenOptions().timing
        with Harness(info, meter="none") as h:
            run_info = measure_table(insts, h, a.rounds, a.seed, say)
            for k, (inst, pred) in enumerate(zip(insts, preds)):
                if a.check_budget and np.isfinite(inst.times).any():
                    def seam(kern: Kernel, cfg: LaunchConfig, inst: Instance = inst) -> Measurement:
                        return h.run(kern, cfg, policy, arrays=inst.arrays)
                    checks[k] = live_check(inst, pred, seam, a.check_budget)
    elif doc:
        checks = [r.get("check") for r in doc["instances"]]
    results = []
    for inst, pred, chk in zip(insts, preds, checks):
        if not np.isfinite(inst.times).any():
            say(f"{inst.iid}: no configuration ran; left out")
            continue
        other = ref.get(inst.iid)
        extra = {"reference": np.array([other.get(s, math.nan) for s in inst.lsizes])} if other else None
        r = {"instance": inst.iid, **replay(inst.times, pred, inst.lsizes, a.seeds, a.budget, extra),
             "predicted_us": [float(x) for x in pred], "check": chk, "kernel": inst.kernel.to_dict(),
             "gsize": list(inst.gsize), "args": [vars(x) for x in inst.args], "table": inst.records}
        results.append(r)
    res = {"benchmark": "cpu_tuning", "device": doc.get("device") if doc else getattr(info, "name", ""),
           "profile": getattr(profile, "origin", None) or a.profile or "", "seeds": a.seeds, "budget": a.budget,
           "run": run_info, "instances": results, "overall": overall(results)}
    if out is not None:
        _write(out, res)
    if a.json:
        for r in results:       # the report without the traces, inputs and table of the file
            r["searchers"] = {s: {x: y for x, y in e.items() if x != "traces"} for s, e in r["searchers"].items()}
            for key in ("kernel", "args", "table"):
                del r[key]
    print(json.dumps(res, indent=1, default=str) if a.json else format_table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

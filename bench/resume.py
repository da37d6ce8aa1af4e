"""Kill-and-resume benchmark: does a datagen killed at random moments and rerun end with exactly the
configurations of an uninterrupted run?

One uninterrupted reference run of ``kernelcast datagen`` over a small corpus, then, into a second
dataset, ``--kills`` runs of the same command each killed with SIGKILL (its whole process group) at
a random moment (seeded by ``--seed``), and a final complete rerun. The two datasets' *planned*
configurations are compared: first rows (no re-measurements, no IQR additions: those depend on
measured times) of the passes ``validity``, ``sample`` and ``sweep``, identified by kernel,
selection, pass, global size, local size, regime and sweep label. Printed: the configurations
missing from the resumed dataset, extra in it, and present twice, and whether any process of a
killed run (the datagen process and every descendant it had at the kill) outlived its kill.

    PYTHONPATH=. python -m kernelcast.bench.resume [--kills 10] [--seed 0] [--limit 6] [--json]

Each killed run's moment is start-up + a seeded uniform fraction of twice the work still missing
per kill left: ``startup + u x 2 x (missing share x work) / kills left``, start-up being the time
the reference run took to write its first plan (imports, device, corpus) and work the rest of its
wall time. So the kills spread over the whole dataset's work (planning, validity checks,
measuring, writing), about one kill-interval of work apart, instead of bunching in the start-up
of reruns that have little left. ``--span S`` draws every moment uniformly in ``[0.2, S]``
instead. A run that ends before its moment counts as not killed (the
table says how many kills were delivered). Exit status 0 when the sets are equal and no process
survived, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.datagen.dataset import KILL_AFTER_ENV, read_dataset
from kernelcast.datagen.generate import PLAN_FILE

from kernelcast.options import Parser, nonneg_int, positive_float, positive_int

ROOT = Path(__file__).resolve().parent.parent
#: the passes whose configurations are planned before any measurement (``iqr`` rows are added from
#: measured times, re-measurements carry ``remeasure_of``)
PLANNED_PASSES = ("validity", "sample", "sweep")
#: seconds a killed run's processes get to disappear before they count as survivors
SURVIVOR_WAIT_S = 10.0

Key = tuple[Any, ...]


# ---------------------------------------------------------------------------------------------
# the comparison (pure)


def _size(v: Any) -> tuple[int, ...] | None:
    if v is None or isinstance(v, float) or isinstance(v, str):
        return None
    return tuple(int(x) for x in v)


def config_keys(records: Iterable[dict[str, Any]]) -> Counter[Key]:
    """The planned configurations of a dataset's rows, with how many first rows each has:
    (kernel, selection, pass, gsize, lsize, regime, sweep) of every row of a planned pass that is
    not a re-measurement."""
    out: Counter[Key] = Counter()
    for r in records:
        if r.get("pass") not in PLANNED_PASSES:
            continue
        rem = r.get("remeasure_of")
        if rem is not None and not (isinstance(rem, float) and math.isnan(rem)) and rem != "":
            continue
        regime = r.get("regime")
        if isinstance(regime, float) and math.isnan(regime):
            regime = None
        out[(str(r.get("kernel_name")), str(r.get("selection")), str(r.get("pass")), _size(r.get("gsize")),
             _size(r.get("lsize")), regime, bool(r.get("sweep")))] += 1
    return out


@dataclass
class Comparison:
    """A resumed dataset's planned configurations against the reference's."""

    reference: int                    # distinct configurations of the reference run
    resumed: int                      # distinct configurations of the resumed dataset
    missing: list[Key] = field(default_factory=list)      # in the reference, not in the resumed
    extra: list[Key] = field(default_factory=list)        # in the resumed, not in the reference
    duplicated: list[Key] = field(default_factory=list)   # more than one first row in the resumed
    reference_duplicated: list[Key] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.duplicated or self.reference_duplicated)


def compare(reference: Counter[Key], resumed: Counter[Key]) -> Comparison:
    """Missing, extra and duplicated configurations of ``resumed`` against ``reference``."""
    def srt(keys: Iterable[Key]) -> list[Key]:
        return sorted(keys, key=repr)

    return Comparison(
        reference=len(reference), resumed=len(resumed),
        missing=srt(set(reference) - set(resumed)), extra=srt(set(resumed) - set(reference)),
        duplicated=srt(k for k, n in resumed.items() if n > 1),
        reference_duplicated=srt(k for k, n in reference.items() if n > 1))


def kill_fractions(n: int, seed: int) -> list[float]:
    """``n`` seeded fractions uniform in [0, 1): where in its run each kill falls."""
    rng = random.Random(seed)
    return [rng.random() for _ in range(n)]


def kill_moment(fraction: float, span_s: float, low_s: float = 0.2) -> float:
    """The moment (seconds after a run starts) ``fraction`` of the way through ``span_s``, at
    least ``low_s``."""
    return round(max(low_s, fraction * span_s), 3)


def kill_window(startup_s: float, work_s: float, missing: int, planned: int, kills_left: int) -> tuple[float, float]:
    """(start, length) of the window a rerun's kill moment is drawn in: after its start-up,
    within twice the reference's work still missing (the planned rows not stored yet) per kill
    left."""
    share = 1.0 if planned <= 0 else min(1.0, max(0.0, missing / planned))
    return startup_s, 2.0 * share * work_s / max(1, kills_left)


# ---------------------------------------------------------------------------------------------
# processes


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process visible in /proc."""
    out: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        out[int(d)] = (int(fields[1]), fields[19])       # ppid, starttime
    return out


def descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid`` (and ``pid`` itself), pid -> start time."""
    table = _proc_table()
    kids: dict[int, list[int]] = {}
    for p, (pp, _) in table.items():
        kids.setdefault(pp, []).append(p)
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in table and p not in out:
            out[p] = table[p][1]
            todo += kids.get(p, [])
    return out


def survivors(procs: dict[int, str]) -> list[int]:
    """The processes of ``procs`` still alive (same pid and start time, not a zombie)."""
    table = _proc_table()
    alive = []
    for p, start in procs.items():
        if p in table and table[p][1] == start:
            try:
                state = Path(f"/proc/{p}/stat").read_text()
            except OSError:
                continue
            if state[state.rfind(")") + 2:].split()[0] != "Z":
                alive.append(p)
    return alive


# ---------------------------------------------------------------------------------------------
# runs


@dataclass
class KillRecord:
    """One killed (or completed) run of the resumed dataset."""

    moment_s: float
    span_s: float                     # the end of the window the moment was drawn in
    killed: bool                      # still running at its moment (SIGKILL delivered)
    processes: int                    # the datagen process and its descendants at the kill
    survivors: int                    # of those, alive SURVIVOR_WAIT_S after the kill
    rows_after: int                   # planned first rows in the dataset after this run
    wall_s: float


@dataclass
class ResumeReport:
    command: list[str]
    kills_planned: int
    kills_delivered: int
    reference_wall_s: float
    startup_s: float
    final_wall_s: float
    final_status: int
    survivors: int
    comparison: dict[str, Any]
    by_pass: dict[str, int]
    runs: list[KillRecord]

    @property
    def ok(self) -> bool:
        return bool(self.comparison["equal"]) and self.survivors == 0 and self.final_status == 0


def _rows(ds: Path) -> Counter[Key]:
    if not (ds / "manifest.json").is_file() and not any(ds.glob("**/*.parquet")):
        return Counter()
    try:
        frame = read_dataset(ds, resolve=False)
    except (OSError, ValueError, KeyError):
        return Counter()
    return config_keys(frame.to_dict("records"))


def datagen_command(out: Path, a: argparse.Namespace) -> list[str]:
    cmd = [sys.executable, "-m", "kernelcast", "datagen", "--out", str(out), "--seed", str(a.datagen_seed),
           "--configs-per-kernel", str(a.configs_per_kernel), "--lsizes-per-kernel", str(a.lsizes_per_kernel),
           "--sweeps-per-kernel", str(a.sweeps_per_kernel), "--lsizes-per-sweep", str(a.lsizes_per_sweep),
           "--sweep-rounds", "1", "--rebalance", a.rebalance, "--no-site-counts", "--repeats", str(a.repeats),
           "--min-time", "0", "--max-items", str(a.max_items), "--meter", "none", "--device", a.device, "--quiet"]
    for c in a.corpus:
        cmd += ["--corpus", c]
    if a.limit:
        cmd += ["--limit", str(a.limit)]
    return cmd


def _env() -> dict[str, str]:
    env = {**os.environ}
    env.pop(KILL_AFTER_ENV, None)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + path if path else "")
    return env


def _run_to_end(cmd: list[str], timeout_s: float, watch: Path | None = None) -> tuple[int, float, str, float | None]:
    """Run ``cmd`` to its end: (status, wall seconds, stderr, seconds until ``watch`` existed)."""
    t0 = time.monotonic()
    seen: float | None = None
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=err, text=True,
                             start_new_session=True)
        while p.poll() is None:
            if seen is None and watch is not None and watch.exists():
                seen = time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return -signal.SIGKILL, time.monotonic() - t0, f"timed out after {timeout_s:.0f} s", seen
            time.sleep(0.2)
        err.seek(0)
        return p.returncode, time.monotonic() - t0, err.read(), seen


def _run_killed(cmd: list[str], moment_s: float, span_s: float, out: Path, timeout_s: float) -> KillRecord:
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        p.wait(timeout=moment_s)
        return KillRecord(moment_s, span_s, False, 0, 0, sum(_rows(out).values()), time.monotonic() - t0)
    except subprocess.TimeoutExpired:
        pass
    procs = descendants(p.pid)
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in procs:            # a descendant that left the group is killed too (and counted)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    p.wait(timeout=timeout_s)
    left = survivors(procs)
    t1 = time.monotonic()
    while left and time.monotonic() - t1 < SURVIVOR_WAIT_S:
        time.sleep(0.1)
        left = survivors(procs)
    return KillRecord(moment_s, span_s, True, len(procs), len(left), sum(_rows(out).values()),
                      time.monotonic() - t0)


def run(a: argparse.Namespace, work: Path, log: Any = None) -> ResumeReport:
    ref, res = work / "reference", work / "resumed"
    cmd_ref = datagen_command(ref, a)
    status, ref_wall, err, startup = _run_to_end(cmd_ref, a.timeout, watch=ref / PLAN_FILE)
    if status != 0:
        raise RuntimeError(f"the reference run failed (status {status}): {err.strip()[-400:]}")
    want = _rows(ref)
    start = min(startup if startup is not None else 0.0, ref_wall)
    planned = sum(want.values())
    fractions = kill_fractions(a.kills, a.seed)
    cmd = datagen_command(res, a)
    runs: list[KillRecord] = []
    for i, frac in enumerate(fractions):
        have = sum(_rows(res).values())
        if a.span is not None:
            span = a.span
            m = kill_moment(frac, span)
        else:
            w0, wlen = kill_window(start, ref_wall - start, planned - have, planned, len(fractions) - i)
            span = w0 + wlen
            m = round(w0 + frac * wlen, 3)
        rec = _run_killed(cmd, m, span, res, a.timeout)
        runs.append(rec)
        if log:
            log(f"run {i + 1}/{len(fractions)}: {'killed' if rec.killed else 'completed'} at {m:.2f} s of "
                f"{span:.1f}, {rec.processes} processes, {rec.survivors} survivors, {rec.rows_after} rows")
    final_status, final_wall, _, _ = _run_to_end(cmd, a.timeout)
    got = _rows(res)
    cmp_ = compare(want, got)
    by_pass: Counter[str] = Counter(k[2] for k in want)
    comparison = {"reference": cmp_.reference, "resumed": cmp_.resumed, "missing": len(cmp_.missing),
                  "extra": len(cmp_.extra), "duplicated": len(cmp_.duplicated),
                  "reference_duplicated": len(cmp_.reference_duplicated), "equal": cmp_.equal,
                  "examples": {"missing": [repr(k) for k in cmp_.missing[:5]],
                               "extra": [repr(k) for k in cmp_.extra[:5]],
                               "duplicated": [repr(k) for k in cmp_.duplicated[:5]]}}
    return ResumeReport(command=cmd[2:], kills_planned=len(fractions), kills_delivered=sum(r.killed for r in runs),
                        reference_wall_s=round(ref_wall, 2), startup_s=round(start, 2),
                        final_wall_s=round(final_wall, 2),
                        final_status=final_status, survivors=sum(r.survivors for r in runs), comparison=comparison,
                        by_pass=dict(by_pass), runs=runs)


def render(r: ResumeReport) -> str:
    c = r.comparison
    lines = [
        "| quantity | value |", "|---|---|",
        f"| reference run wall time (start-up to its first plan) | {r.reference_wall_s:.1f} s "
        f"({r.startup_s:.1f} s) |",
        f"| kills delivered / planned | {r.kills_delivered} / {r.kills_planned} |",
        f"| processes killed (datagen + descendants) | {sum(k.processes for k in r.runs)} |",
        f"| processes alive {SURVIVOR_WAIT_S:.0f} s after a kill | {r.survivors} |",
        f"| final rerun | status {r.final_status}, {r.final_wall_s:.1f} s |",
        f"| planned configurations: reference / resumed | {c['reference']} / {c['resumed']} |",
        "| by pass (reference) | " + ", ".join(f"{k} {v}" for k, v in sorted(r.by_pass.items())) + " |",
        f"| missing / extra / duplicated | {c['missing']} / {c['extra']} / {c['duplicated']} |",
        f"| equal to the uninterrupted run | {'yes' if c['equal'] else 'no'} |",
        "", "| run | moment (s) / window end (s) | killed | processes | survivors | planned rows after |",
        "|---|---|---|---|---|---|"]
    lines += [f"| {i + 1} | {k.moment_s:.2f} / {k.span_s:.1f} | {'yes' if k.killed else 'no'} | {k.processes} | "
              f"{k.survivors} | {k.rows_after} |" for i, k in enumerate(r.runs)]
    for what in ("missing", "extra", "duplicated"):
        for ex in c["examples"][what]:
            lines.append(f"{what}: {ex}")
    return "\n".join(lines)


def build_parser() -> Parser:
    p = Parser(prog="python -m kernelcast.bench.resume",
                                description="Kill a datagen with SIGKILL at random moments, rerun it each time, and "
                                            "compare the resumed dataset's planned configurations with an "
                                            "uninterrupted run's (missing, extra, duplicated; processes left).")
    p.add_argument("--corpus", action="append", default=None,
                   help="corpus directory, or 'bundled' (repeatable; default: bundled)")
    p.add_argument("--limit", type=nonneg_int, default=6, help="only the first N kernels (6; 0: all)")
    p.add_argument("--kills", type=positive_int, default=10, help="killed runs before the final rerun (10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the kill moments (0)")
    p.add_argument("--span", type=positive_float, default=None,
                   help="draw every kill moment uniformly in [0.2, SPAN] seconds (default: after start-up, within "
                        "twice the work left per kill left)")
    p.add_argument("--datagen-seed", type=int, default=1, help="datagen's --seed, the same for every run (1)")
    p.add_argument("--configs-per-kernel", type=positive_int, default=4, help="datagen's (4)")
    p.add_argument("--lsizes-per-kernel", type=positive_int, default=1, help="datagen's (1)")
    p.add_argument("--sweeps-per-kernel", type=nonneg_int, default=1, help="datagen's (1)")
    p.add_argument("--lsizes-per-sweep", type=positive_int, default=2, help="datagen's (2)")
    p.add_argument("--rebalance", choices=("iqr", "none"), default="iqr",
                   help="datagen's (iqr: its rows are left out of the comparison)")
    p.add_argument("--repeats", type=positive_int, default=2, help="datagen's (2)")
    p.add_argument("--max-items", type=positive_int, default=16384, help="datagen's (16384)")
    p.add_argument("--device", default="auto", help="datagen's (auto)")
    p.add_argument("--timeout", type=positive_float, default=1800.0, help="seconds one datagen run may take (1800)")
    p.add_argument("--work", default=None,
                   help="directory for the two datasets (must not exist; default: a temporary one, removed)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def _validate(a: argparse.Namespace) -> str | None:
    a.corpus = a.corpus or ["bundled"]
    for c in a.corpus:
        if c != "bundled" and not Path(c).is_dir():
            return f"--corpus {c}: not a directory (nor 'bundled')"
    if a.work is not None and Path(a.work).exists():
        return f"--work {a.work}: exists (give a new directory)"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    problem = _validate(a)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    keep = a.work is not None
    work = Path(a.work) if keep else Path(tempfile.mkdtemp(prefix="kc-resume-"))
    work.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        if not a.quiet:
            print(msg, file=sys.stderr, flush=True)

    try:
        rep = run(a, work, log)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    if a.json:
        d = asdict(rep)
        d["ok"] = rep.ok
        print(json.dumps(d, indent=1))
    else:
        print(render(rep))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

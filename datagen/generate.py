"""Dataset generation: corpus kernels x sampled launch configurations -> measured rows.

Per kernel: read its signature (libclang), run the cldrive-style validity checks
(:mod:`datagen.validity`), sample ``configs_per_kernel`` configurations (``lsizes_per_kernel``
local sizes x work-group counts over the idle / under-utilized / fully-utilized regimes), measure
each in the isolated harness, then, with ``rebalance="iqr"``, measure the configurations the IQR
rebalancing adds (:mod:`datagen.rebalance`).

Sampling is seeded per kernel (seed, kernel id), and the rebalancing depends only on rows already
stored, so an interrupted run regenerates the same configurations and skips every stored one.

Within one local size configurations run in increasing ``N_WG``; once one times out or takes
longer than ``max_config_time_s`` per launch, the larger ones of that local size are skipped
(counted, not stored), and a kernel that crashes or times out ``max_faults`` times is abandoned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import platform
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.datagen.args import SELECTORS, UnsupportedArgument
from kernelcast.datagen.corpus_store import read_records, write_corpus
from kernelcast.datagen.counts import SiteCounter, counts_text, row_config
from kernelcast.datagen.dataset import DATASET_SCHEMA_VERSION as SCHEMA_VERSION
from kernelcast.datagen.dataset import ROUND_SPREAD as DATASET_ROUND_SPREAD
from kernelcast.datagen.dataset import (
    DatasetWriter,
    device_load_limit,
    loaded,
    machine_busy,
    read_dataset,
    round_spread,
    row_key,
)
from kernelcast.datagen.indexargs import SETTINGS, analyse_uses, index_selector
from kernelcast.datagen.memargs import KERNEL_SELECTORS
from kernelcast.datagen.rebalance import plan_rebalance
from kernelcast.datagen.reference import REF_CONFIG, REF_KERNEL, REF_POLICY, ReferenceCheck, log_check
from kernelcast.datagen.sampler import (
    DEFAULT_K,
    DEFAULT_MAX_TOTAL_ITEMS,
    DEFAULT_RATIO,
    DeviceLimits,
    SampledConfig,
    grid_for,
    regime_of,
    sample_configs,
    sample_sweeps,
)
from kernelcast.datagen.validity import VALIDITY_SEED, check_validity
from kernelcast.instrument.activity import activity_of_args, activity_rewrite
from kernelcast.instrument.backends import backend_for
from kernelcast.instrument.harness import Harness
from kernelcast.instrument.memcheck import HOST_MEMORY_REASON
from kernelcast.instrument.rewrite import (
    InstrumentedRunError,
    RewriteError,
    device_supports_int64_atomics,
    instrument_kernel,
)
from kernelcast.instrument.runner import HARNESS_VERSION, TimingPolicy, arg_dict
from tqdm import tqdm

import kernelcast
from kernelcast.clang import KernelParam, ParseError, kernel_signatures
from kernelcast.errors import KernelcastError, Terminated
from kernelcast.schema import ArgsSelection, Kernel, LaunchConfig, Measurement

log = logging.getLogger(__name__)

FAULTS = ("crash", "timeout")
#: what a generator keeps of every stored row (resuming, pruning, rebalancing)
STORED_COLUMNS = ("row_key", "kernel_id", "status", "reason", "time_median_us", "lsize", "n_wg", "pass")

#: a configuration measured in rounds whose windows disagree (:data:`datagen.dataset.ROUND_SPREAD`)
#: gets further rounds, interleaved, up to ``DatagenOptions.max_rounds``: the pooled time (each
#: round weighing the same) is then the median of more windows. On ds8m + ds8s (4 rounds), a tenth
#: of the configurations' windows spanned more than 1.66x between the fastest and the slowest, and
#: the three-shot APE of those rows was 1.3x that of rows whose windows agreed.
ROUND_SPREAD = DATASET_ROUND_SPREAD
#: most rounds any option asks for
MAX_ROUNDS = 32

#: a tuning sweep's configurations are measured in this many rounds, one configuration after the
#: other in each round, and readers pool the rounds, each weighing the same (:func:`datagen.dataset.pool_rounds`).
#: Some hosts run throughput-bound code 1.3-2x slower in phases of tens of milliseconds to seconds,
#: and one window usually falls in one phase: on the KVM development host, which local size of a
#: problem is fastest (within 5 %) agreed between two measurements of 21 sw8 problems for 43 % of
#: them with one window per configuration, 48 % with four windows back to back, 81 % with four
#: interleaved rounds (``bench/ceiling.py`` and the session-12 notes in ``bench/README.md``)
SWEEP_ROUNDS = 4
#: a kernel's regime samples (and the configurations rebalancing adds) are measured in this many
#: rounds by default: once, since they are not compared with each other within a problem; more
#: rounds make their times repeatable (labels for few-shot updating, ``datagen --sample-rounds``)
SAMPLE_ROUNDS = 1

#: a row with a larger CV is measured once more at the end of its kernel (interleaved with the
#: kernel's other noisy rows); readers keep the measurement with the lower CV
REMEASURE_CV = 0.05
#: ... when measuring it again costs at most this much kernel time (a long kernel's few repeats
#: under load rarely improve, and would double the run's time)
REMEASURE_MAX_S = 0.25


def remeasure_reason(status: str, cv: float | None, kernel_s: float = 0.0, other_cpu_frac: Any = None) -> str | None:
    """``load`` (other processes busy, :func:`loaded`), ``noise`` (a CV above :data:`REMEASURE_CV`)
    or None: why a measurement is taken once more at the end of its kernel (only when that costs at
    most :data:`REMEASURE_MAX_S` of kernel time; the load threshold is
    :data:`datagen.dataset.REMEASURE_OTHER_CPU`)."""
    if status != "ok" or kernel_s > REMEASURE_MAX_S:
        return None
    if loaded(other_cpu_frac):
        return "load"
    return "noise" if cv is not None and not math.isnan(cv) and cv > REMEASURE_CV else None


def needs_remeasure(status: str, cv: float | None, kernel_s: float = 0.0, other_cpu_frac: Any = None) -> bool:
    return remeasure_reason(status, cv, kernel_s, other_cpu_frac) is not None


#: the selection names of the index/predicate-aware rewrites of simple selection, one per index
#: setting (:data:`datagen.indexargs.SETTINGS`), as rows of ``--args auto`` name them
AUTO_INDEX_NAMES = ("index", "index-slack")

#: work-items of the validity launch along each dimension after the first
VALIDITY_EXTENT = 4

#: the journal of every kernel's planned configurations, in the dataset directory
PLAN_FILE = "plan.jsonl"

#: the validity race check's global size: at least this many work-items, and this many
#: warp-sized work-groups per compute unit
CONCURRENT_MIN_ITEMS = 4096
CONCURRENT_WGS_PER_CU = 64


@dataclass
class DatagenOptions:
    configs_per_kernel: int = 200
    lsizes_per_kernel: int = 4
    args: ArgsSelection = "auto"
    rebalance: str | None = "iqr"
    rebalance_extra: float = 0.75
    k: float = DEFAULT_K
    ratio: tuple[int, int, int] = DEFAULT_RATIO
    max_total_items: int = DEFAULT_MAX_TOTAL_ITEMS
    sweeps_per_kernel: int = 4        # tuning sweeps: problems measured with several local sizes each
    lsizes_per_sweep: int = 4
    sweep_rounds: int = SWEEP_ROUNDS  # each sweep measured in this many interleaved rounds, pooled by readers
    sample_rounds: int = SAMPLE_ROUNDS  # a kernel's regime samples measured in this many interleaved rounds
    max_rounds: int | None = None     # rounds in all of a configuration whose rounds disagree (None: 2x)
    activity: bool = True             # record active_fraction / bytes_touched (instrumented run)
    site_counts: bool = True          # record site_counts: loop trips / branch outcomes (one counting launch)
    max_config_time_s: float = 0.2
    max_faults: int = 3
    validity: bool = True
    keep_invalid: bool = False        # measure kernels that fail a validity check anyway
    seed: int = 0
    reference_every_s: float = 300.0  # reference-kernel drift check period (0: none)
    timing: TimingPolicy = field(default_factory=lambda: TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02,
                                                                       max_repeats=200, max_time_s=5.0))


def validity_gsize(warp: int, compute_units: int, dims: int) -> tuple[int, ...]:
    """The global size of the validity launch: two warp-sized work-groups per compute unit along
    the first dimension, and :data:`VALIDITY_EXTENT` work-items along each further one, so a kernel
    indexing rows (``y * width + x``) touches more than its first row there."""
    return tuple([warp * max(2, compute_units)] + [VALIDITY_EXTENT] * (dims - 1))


def _slow_reason(r: Mapping[str, Any], limit_s: float) -> str:
    if r.get("status") == "timeout":
        return "timed out"
    return f"took {float(r.get('time_median_us') or 0) * 1e-3:.1f} ms per launch (limit {limit_s * 1e3:.0f} ms)"


def kernel_rng(seed: int, kernel_id: str, salt: str = "") -> random.Random:
    h = hashlib.sha256(f"{seed}:{kernel_id}:{salt}".encode()).digest()
    return random.Random(int.from_bytes(h[:8], "little"))


def problem_id(kernel_id: str, selection: str, gsize: tuple[int, ...], args: list[dict[str, Any]]) -> str:
    """The problem a row measures: kernel, argument selection, global size and every argument but
    the local-memory ones (those belong to the launch configuration, like the local size). Rows
    of one problem with different local sizes form a tuning group."""
    payload = json.dumps([kernel_id, selection, list(gsize),
                          [[a["name"], a["kind"], a["dtype"], a.get("count"), a.get("value")]
                           for a in args if a["kind"] != "local"]], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def flatten(m: Measurement, kernel: Kernel, *, key: str, selection: str, pass_: str, regime: str | None,
            n_wg: int | None, seed: int, problem: str | None = None, sweep: bool = False,
            activity: Any = None) -> dict[str, Any]:
    """One dataset row from a measurement (``activity``: an
    :class:`instrument.activity.Activity` of the row's arguments, or None)."""
    t = m.time
    return {
        "row_key": key,
        "problem_id": problem,
        "sweep": sweep,
        "active_fraction": activity.active_fraction if activity is not None else None,
        "all_args_fraction": getattr(activity, "all_args_fraction", None) if activity is not None else None,
        "bytes_touched": activity.bytes_per_item if activity is not None else None,
        "kernel_id": kernel.id,
        "kernel_name": kernel.name,
        "kernel_origin": kernel.origin,
        "dims": len(m.gsize),
        "selection": selection,
        "pass": pass_,
        "regime": regime,
        "n_wg": n_wg,
        "gsize": list(m.gsize),
        "lsize": list(m.lsize) if m.lsize else None,
        "global_items": int(np.prod(m.gsize)),
        "local_items": int(np.prod(m.lsize)) if m.lsize else None,
        "args": m.args,
        "status": m.status,
        "reason": m.reason,
        "repeats": t.repeats if t else None,
        "time_median_us": t.median_us if t else None,
        "time_min_us": t.min_us if t else None,
        "time_mean_us": t.mean_us if t else None,
        "time_q1_us": t.q1_us if t else None,
        "time_q3_us": t.q3_us if t else None,
        "time_iqr_us": t.iqr_us if t else None,
        "time_cv": t.cv if t else None,
        "times_us": t.times_us if t else None,
        "time_group": t.group if t else None,
        "energy_j": m.energy_j,
        "dynamic_energy_j": m.dynamic_energy_j,
        "avg_power_w": m.avg_power_w,
        "idle_power_w": m.idle_power_w,
        "meter": m.meter,
        "meter_method": m.meter_method,
        "meter_samples": m.meter_samples,
        "meter_window_s": m.meter_window_s,
        "device": m.device,
        "device_state": m.device_state,
        "outputs": m.outputs,
        "compile_log": m.compile_log[:4000],
        "build_s": m.build_s,
        "wall_s": m.wall_s,
        "harness_version": m.harness_version or HARNESS_VERSION,
        "schema_version": SCHEMA_VERSION,
        "seed": seed,
        "measured_at": time.time(),
        "state_reset": m.state_reset,
        "reset_buffers": list(m.reset_buffers),
        "load_avg_1m": m.machine.get("load_avg_1m"),
        "other_cpu_frac": m.machine.get("other_cpu_frac"),
        "cpu_mhz": m.machine.get("cpu_mhz"),
    }


@dataclass
class Summary:
    kernels: int = 0
    kernel_status: Counter = field(default_factory=Counter)
    rows_new: int = 0
    rows_resumed: int = 0
    remeasured: int = 0
    rounds: int = 0               # extra interleaved rounds of sweep (and sample) configurations
    reference_checks: int = 0
    reference_drifted: int = 0
    duplicates: int = 0           # sampled configurations identical to one already visited this run
    skipped: int = 0
    status: Counter = field(default_factory=Counter)
    wall_s: float = 0.0
    measure_wall_s: float = 0.0
    kernel_time_s: float = 0.0
    activity_s: float = 0.0           # wall time of the activity runs of simple-selection rows
    counts_s: float = 0.0             # wall time of the counting launches (site_counts)
    counted: int = 0                  # ok rows that got site_counts
    busy: int = 0                     # ok rows measured beside other work (datagen.dataset.busy_rows)
    by_regime: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    by_pass: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, m: Measurement, regime: str | None, pass_: str, busy: bool = False) -> None:
        self.rows_new += 1
        self.status[m.status] += 1
        self.busy += int(busy and m.status == "ok")
        self.measure_wall_s += m.wall_s or 0.0
        if m.time is not None:
            self.kernel_time_s += sum(m.time.times_us) * m.time.group * 1e-6
            if regime:
                self.by_regime[regime].append(m.time.median_us)
            self.by_pass[pass_].append(m.time.median_us)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in ("kernels", "rows_new", "rows_resumed", "duplicates",
                                                           "remeasured", "rounds", "reference_checks",
                                                           "reference_drifted",
                                                           "skipped", "wall_s", "measure_wall_s", "kernel_time_s",
                                                           "activity_s", "counts_s", "counted", "busy")}
        d["kernel_status"] = dict(self.kernel_status)
        d["status"] = dict(self.status)
        d["by_regime"] = {k: _dist(v) for k, v in self.by_regime.items()}
        d["by_pass"] = {k: _dist(v) for k, v in self.by_pass.items()}
        d["rows_per_hour"] = self.rows_new / self.wall_s * 3600 if self.wall_s else None
        d["overhead_ratio"] = self.measure_wall_s / self.kernel_time_s if self.kernel_time_s else None
        return d

    def format(self) -> str:
        d = self.to_dict()
        lines = [
            f"kernels: {self.kernels}  ("
            + ", ".join(f"{k}: {v}" for k, v in sorted(self.kernel_status.items())) + ")",
            f"rows: {self.rows_new} new, {self.rows_resumed} already stored, {self.skipped} skipped (pruned)"
            + (f", {self.duplicates} duplicate configuration(s) sampled" if self.duplicates else "")
            + f", {self.remeasured} re-measured (noisy, loaded or drifted)"
            + (f", {self.rounds} extra rounds" if self.rounds else "")
            + f", reference checks {self.reference_checks} "
            f"({self.reference_drifted} drifted)",
            "rows by status: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.status.items())),
        ]
        if self.busy:
            lines.append(f"{self.busy} ok row(s) measured beside other work on the host: run 'kernelcast dataset "
                         f"remeasure DATASET' when it is idle")
        if self.wall_s:
            lines.append(f"wall {self.wall_s:.1f} s, {d['rows_per_hour']:.0f} rows/hour" +
                         (f", harness overhead {d['overhead_ratio']:.1f}x summed kernel time"
                          if d["overhead_ratio"] else "") +
                         (f", activity runs {self.activity_s:.1f} s" if self.activity_s else "") +
                         (f", site counts {self.counted} rows in {self.counts_s:.1f} s" if self.counts_s else ""))
        for name, dist in (("regime", d["by_regime"]), ("pass", d["by_pass"])):
            for k, v in sorted(dist.items()):
                lines.append(f"time by {name} {k:>8}: n={v['n']:5d}  p10 {v['p10']:10.1f} us  median "
                             f"{v['p50']:10.1f} us  p90 {v['p90']:10.1f} us")
        return "\n".join(lines)


def _dist(v: list[float]) -> dict[str, float]:
    if not v:
        return {"n": 0, "p10": 0.0, "p50": 0.0, "p90": 0.0}
    a = np.asarray(v)
    return {"n": len(v), "p10": float(np.percentile(a, 10)), "p50": float(np.median(a)),
            "p90": float(np.percentile(a, 90))}


class Generator:
    """Measures a corpus into a dataset through a harness."""

    def __init__(self, harness: Any, writer: DatasetWriter, options: DatagenOptions, progress: Any = None,
                 known_rows: Iterable[dict[str, Any]] = ()):
        """``known_rows``: rows stored elsewhere (the main dataset of a distributed run), with at
        least the columns of :data:`STORED_COLUMNS`; their configurations are not measured again."""
        self.h = harness
        self.w = writer
        self.o = options
        self.limits = DeviceLimits.from_device(harness.device)
        self.load_limit = device_load_limit(str(getattr(harness.device, "type", "")), self.limits.compute_units)

        self.kernel_selectors = KERNEL_SELECTORS
        if options.args in SELECTORS:
            self.select = SELECTORS[options.args]
        elif options.args in ("both", "auto"):
            self.select = SELECTORS["simple"]
        elif options.args not in KERNEL_SELECTORS:
            raise ValueError(f"unknown argument selection {options.args!r}")
        self.summary = Summary()
        self._noisy: list[tuple[dict[str, Any], LaunchConfig, str]] = []
        self._samples: dict[str, tuple[SampledConfig, dict[str, Any]]] = {}   # this kernel's sample firsts

        self.ref = ReferenceCheck(every_s=options.reference_every_s)
        self._since_check: list[tuple[Kernel, dict[str, Any], LaunchConfig]] = []
        self._suspect: list[tuple[Kernel, dict[str, Any], LaunchConfig]] = []
        self.progress = progress
        self._ticked = 0        # progress units so far (a configuration's measurement or one round of it)
        self._added = 0         # units rebalancing added to the kernel in flight
        self._act_kernel: str | None = None
        self._act: Any = None
        self._counter: Any = None
        self._count_faults: dict[str, int] = {}
        # planning (pruning, rebalancing) uses each configuration's first measurement, as the
        # run that stored it did, so a resumed run plans the same configurations
        existing = read_dataset(writer.root, resolve=False) if len(writer) else None
        self.stored: dict[str, dict[str, Any]] = {}
        self.preexisting: set[str] = set()
        self.visited: set[str] = set()        # row keys this run has asked for
        if existing is not None and len(existing):
            # a dataset killed after its first rows may hold validity rows only, without the
            # columns of a measured row: those read as missing
            for r in existing.reindex(columns=list(STORED_COLUMNS)).to_dict("records"):
                self.stored[r["row_key"]] = r
        for r in known_rows:
            self.stored.setdefault(r["row_key"], r)
        self.preexisting = set(self.stored)
        self._left: list[tuple[str, Any]] = []      # the kernel's planned configurations not yet handled
        self._ok_rows = 0                           # ok rows of the kernel in flight (stored or new)
        self.plans: dict[tuple[str, str], dict[str, Any]] = {}
        plan_path = writer.root / PLAN_FILE
        if plan_path.is_file():
            good: list[str] = []
            lines = plan_path.read_text(encoding="utf-8").splitlines()
            for line in lines:
                try:
                    e = json.loads(line)
                    self.plans.setdefault((e["kernel_id"], e["selection"]), e)
                    good.append(line)
                except (ValueError, KeyError, TypeError):
                    continue      # a line torn by a kill: the rerun journals that plan again
            if len(good) != len(lines):     # appends never land after a torn line
                tmp = plan_path.with_suffix(".tmp")
                tmp.write_text("".join(x + "\n" for x in good), encoding="utf-8")
                tmp.replace(plan_path)

    def units_per_kernel(self) -> int:
        """Progress units one kernel is planned to take under one selection: each regime sample in
        its rounds and each sweep configuration in its rounds (rebalancing and the further rounds of
        configurations whose rounds disagree add their own)."""
        o = self.o
        return (o.configs_per_kernel * o.sample_rounds
                + o.sweeps_per_kernel * o.lsizes_per_sweep * o.sweep_rounds)

    def _tick(self, n: int = 1) -> None:
        self._ticked += n
        if self.progress is not None:
            self.progress.update(n)

    def _settle(self, start: int) -> None:
        """Count what a kernel did not measure (a failed validity check, faults, a configuration too
        slow, a round of a failed first) as done, so the bar's rate and ETA stay honest."""
        short = self.units_per_kernel() + self._added - (self._ticked - start)
        if short > 0:
            self._tick(short)

    def run(self, kernels: Iterable[Kernel]) -> Summary:
        t0 = time.perf_counter()
        selections: list[ArgsSelection] = ["simple", "memory"] if self.o.args == "both" else [self.o.args]
        requested = self.o.args
        for k in kernels:
            self.summary.kernels += 1
            for sel in selections:      # --args both: every kernel under each selection, rows tagged
                self.o.args = sel
                if sel in SELECTORS:
                    self.select = SELECTORS[sel]
                start, self._added = self._ticked, 0
                status = self.kernel(k)
                self._settle(start)
                self.summary.kernel_status[status if len(selections) == 1 else f"{sel}:{status}"] += 1
        self.o.args = requested
        self._reference(final=True)
        self.summary.reference_checks, self.summary.reference_drifted = self.ref.checks, self.ref.drifted
        self.summary.wall_s = time.perf_counter() - t0
        return self.summary

    # -- one kernel -----------------------------------------------------------------------------

    def kernel(self, k: Kernel) -> str:
        try:
            params = kernel_signatures(k.source, k.build_options).get(k.name)
        except ParseError as e:
            return self._kernel_row(k, "compile_error", f"libclang: {e}")
        if params is None:
            return self._kernel_row(k, "invalid_config", f"no kernel {k.name!r} in its source")
        if self.o.args == "auto":
            return self._kernel_auto(k, params)
        if self.o.args in self.kernel_selectors:
            # memory-analysis selection (LLMPerf II-B2): per kernel, cached beside the dataset
            self.select = self.kernel_selectors[self.o.args](
                self.h, k, params, seed=self.o.seed, device_limits=self.limits, cache_dir=self.w.root / "memargs")
        return self._kernel_with(k, params)

    def _auto_chain(self, k: Kernel, params: list[KernelParam]) -> Iterable[tuple[str, Any]]:
        """The selections ``--args auto`` tries on a kernel, in order, as (name, selector):
        simple, the index/predicate-aware rewrites of simple selection (:mod:`datagen.indexargs`,
        one per index setting) when a rule fires on the kernel, then memory analysis (last: its
        scalars are constants fitted at small launches, so larger launches leave work-items past
        the fitted problem idle). A kernel on which R10 or R11 fires (a chunk or window scalar
        that simple selection's values would leave most work-items idle with) gets the index
        selections before simple. Lazily: a selection is built (the memory analysis run) only
        when the ones before it failed."""
        uses = analyse_uses(k.source, k.name, params)
        index = [] if uses.empty else [(AUTO_INDEX_NAMES[i], i) for i in range(len(SETTINGS))]
        if not uses.work_rules:
            yield "simple", SELECTORS["simple"]
        for name, i in index:
            yield name, index_selector(SELECTORS["simple"], uses, i)
        if uses.work_rules:
            yield "simple", SELECTORS["simple"]
        try:
            yield "memory", self.kernel_selectors["memory"](
                self.h, k, params, seed=self.o.seed, device_limits=self.limits, cache_dir=self.w.root / "memargs")
        except (RewriteError, ValueError, KeyError, KernelcastError) as e:
            log.info("%s: no memory-analysis selection (%s)", k.name, e)

    def _kernel_auto(self, k: Kernel, params: list[KernelParam]) -> str:
        """``--args auto``: the first selection of :meth:`_auto_chain` under which the kernel
        passes validity measures it (its rows say which, in ``selection``); a kernel that fails
        under one selection (out of bounds, a crash, no output...) gets the next, and a verdict only
        when every one failed (the kernel status is then the last selection's, and the validity rows
        of every selection tried give their reasons)."""
        status = "invalid_output"
        first_invalid: tuple[str, Any] | None = None
        try:
            for name, selector in self._auto_chain(k, params):
                self.o.args, self.select = name, selector       # type: ignore[assignment]
                if not self.o.validity:
                    return self._kernel_with(k, params)
                status = self._validity(k, params, k.dims or 1)
                if status == "ok":
                    self._ok_rows = 0
                    kstatus = self._kernel_with(k, params, validated=True)
                    if self._ok_rows or kstatus == "compile_error":
                        return kstatus
                    # valid at the small validity launch, but not one sampled configuration ran
                    # (sizes that follow one dimension of a larger nD launch, a fit past its range):
                    # these arguments, not the kernel, are wrong; the next selection measures it
                    log.info("%s: no ok row under %s selection (%s); trying the next selection", k.name, name,
                             kstatus)
                    status = "no_ok_rows"
                    continue
                if status == "invalid_output" and first_invalid is None:
                    first_invalid = (name, selector)
                log.info("%s: validity under %s selection: %s", k.name, name, status)
            if self.o.keep_invalid and first_invalid is not None:
                self.o.args, self.select = first_invalid    # type: ignore[assignment]
                return self._kernel_with(k, params, validated=True)
            return "failed" if status == "no_ok_rows" else status
        finally:
            self.o.args = "auto"

    def _kernel_with(self, k: Kernel, params: list[KernelParam], validated: bool = False) -> str:
        """Measure ``k`` under the current selection (``validated``: its validity already passed)."""
        dims = k.dims or 1
        # as many configurations as asked: the remainder goes one each to the first local sizes
        per, extra = divmod(self.o.configs_per_kernel, max(1, self.o.lsizes_per_kernel))
        configs = sample_configs(kernel_rng(self.o.seed, k.id), self.limits, dims, self.o.lsizes_per_kernel, per,
                                 self.o.k, self.o.ratio, self.o.max_total_items, extra=extra)
        if self.o.validity and not validated:
            vstatus = self._validity(k, params, dims)
            if vstatus != "ok" and not (self.o.keep_invalid and vstatus == "invalid_output"):
                return vstatus
        sweeps = self._planned(k, configs, self.sweep_configs(k, dims))
        by_lsize: dict[tuple[int, ...], list[Any]] = defaultdict(list)
        for c in configs:
            by_lsize[c.lsize].append(c)
        faults = 0
        self._noisy = []
        self._samples = {}
        self._left = [("sample", c) for g in by_lsize.values() for c in sorted(g, key=lambda c: c.n_wg)] + \
            [("sweep", c) for c in sorted(sweeps, key=lambda c: c.sweep)]
        for lsize, group in by_lsize.items():
            group.sort(key=lambda c: c.n_wg)
            rows = []
            for i, c in enumerate(group):
                r = self._measure(k, params, c.gsize, c.lsize, c.n_wg, c.regime, "sample")
                self._left.remove(("sample", c))
                rows.append(r)
                if r["status"] == "compile_error":
                    self._prune(k, self._left, "the kernel failed to build")
                    return "compile_error"
                faults += r["status"] in FAULTS
                if faults >= self.o.max_faults:
                    log.info("%s: %d crashes/timeouts, abandoned", k.name, faults)
                    self._prune(k, self._left, f"kernel abandoned after {faults} crashes/timeouts")
                    return "abandoned"
                if self._too_slow(r):
                    self.summary.skipped += len(group) - i - 1
                    self._prune(k, [("sample", x) for x in group[i + 1:]],
                                f"pruned: n_wg {c.n_wg} of this local size {_slow_reason(r, self.o.max_config_time_s)}")
                    break
            if self.o.rebalance == "iqr":
                faults += self._rebalance(k, params, lsize, rows)
                if faults >= self.o.max_faults:
                    self._prune(k, self._left, f"kernel abandoned after {faults} crashes/timeouts")
                    return "abandoned"
        for n in range(2, self.o.sample_rounds + 1):
            for c, r in self._samples.values():
                self._round(k, params, c, r, n)
        self._more_rounds(k, params, list(self._samples.values()), self.o.sample_rounds)
        status = self._sweeps(k, params, sweeps, faults)
        self._remeasure(k)
        return status

    def _planned(self, k: Kernel, configs: list[SampledConfig], sweeps: list[Any]) -> list[Any]:
        """Journal the kernel's plan under the current selection (its regime samples and sweeps, a
        function of the corpus, the options and the seed) in ``DATASET/plan.jsonl`` before any of
        it is measured; a rerun reads the plan back and checks that it plans the same (a warning
        when it does not: the options changed). Returns ``sweeps``."""
        entry = {"kernel_id": k.id, "selection": self.o.args,
                 "samples": [[list(c.gsize), list(c.lsize), c.n_wg, c.regime] for c in configs],
                 "sweeps": [[list(c.gsize), list(c.lsize), c.n_wg, c.regime, c.sweep] for c in sweeps]}
        key = (k.id, self.o.args)
        old = self.plans.get(key)
        if old is None:
            self.plans[key] = entry
            path = self.w.root / PLAN_FILE
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
                f.flush()
                os.fsync(f.fileno())
        elif old != entry:
            log.warning("%s: the configurations planned now differ from the plan journaled by the run that "
                        "created this dataset (other options?)", k.name)
        return sweeps

    def _prune(self, k: Kernel, items: list[tuple[str, Any]], reason: str) -> None:
        """A ``skipped`` row for each planned configuration in ``items`` (pass, configuration) that
        will not be measured (a smaller one of its local size or sweep was too slow, the kernel was
        abandoned): every planned configuration ends as one row, measured or not, so a resumed
        run's configurations are the uninterrupted run's. The decision depends on measured times
        (``reason`` says which), like IQR rebalancing."""
        for pass_, c in list(items):
            sweep = pass_ == "sweep"
            key = row_key(k.id, c.gsize, c.lsize, [], f"skipped:{self.o.args}:{pass_}:{getattr(c, 'sweep', '')}")
            if (pass_, c) in self._left:
                self._left.remove((pass_, c))
            if key in self.stored:
                continue
            row = {"row_key": key, "kernel_id": k.id, "kernel_name": k.name, "kernel_origin": k.origin,
                   "pass": pass_, "selection": self.o.args, "status": "skipped", "reason": reason,
                   "regime": c.regime, "n_wg": c.n_wg, "gsize": list(c.gsize), "lsize": list(c.lsize),
                   "global_items": math.prod(c.gsize), "local_items": math.prod(c.lsize), "sweep": sweep,
                   "dims": len(c.gsize), "seed": self.o.seed, "harness_version": HARNESS_VERSION,
                   "schema_version": SCHEMA_VERSION, "measured_at": time.time()}
            self.w.append(row)
            self.stored[key] = {col: row.get(col) for col in STORED_COLUMNS}
            self.summary.status["skipped"] += 1

    def sweep_configs(self, k: Kernel, dims: int) -> list[Any]:
        """The tuning-sweep configurations of ``k`` (seeded per kernel, like the regime samples)."""
        return sample_sweeps(kernel_rng(self.o.seed, k.id, "sweeps"), self.limits, dims, self.o.sweeps_per_kernel,
                             self.o.lsizes_per_sweep, self.o.k, self.o.ratio, self.o.max_total_items)

    def _sweeps(self, k: Kernel, params: list[KernelParam], sweeps: list[Any], faults: int) -> str:
        """Measure the kernel's tuning sweeps: each problem with several local sizes, smallest
        first; a sweep whose configuration times out or runs past ``max_config_time_s`` is cut
        short (the rest stored as ``skipped`` rows)."""
        by_sweep: dict[int, list[Any]] = defaultdict(list)
        for c in sweeps:
            by_sweep[c.sweep].append(c)
        for _, group in sorted(by_sweep.items()):
            firsts: list[tuple[Any, dict[str, Any]]] = []
            for i, c in enumerate(group):
                r = self._measure(k, params, c.gsize, c.lsize, c.n_wg, c.regime, "sweep", sweep=True)
                if ("sweep", c) in self._left:
                    self._left.remove(("sweep", c))
                firsts.append((c, r))
                faults += r["status"] in FAULTS
                if faults >= self.o.max_faults:
                    log.info("%s: %d crashes/timeouts, abandoned", k.name, faults)
                    self._prune(k, self._left, f"kernel abandoned after {faults} crashes/timeouts")
                    return "abandoned"
                if self._too_slow(r):
                    self.summary.skipped += len(group) - i - 1
                    self._prune(k, [("sweep", x) for x in group[i + 1:]],
                                f"pruned: local size {'x'.join(map(str, c.lsize))} of this sweep "
                                f"{_slow_reason(r, self.o.max_config_time_s)}")
                    break
            for n in range(2, self.o.sweep_rounds + 1):
                for c, r in firsts:
                    self._round(k, params, c, r, n)
            self._more_rounds(k, params, firsts, self.o.sweep_rounds)
        return "ok"

    def round_windows(self, first: Mapping[str, Any], n: int) -> list[float]:
        """The time medians of a configuration's first measurement and its rounds 2..``n`` that are
        stored and ok (this run's or an earlier run's)."""
        rows = [first] + [self.stored.get(f"{first.get('row_key')}~r{i}") or {} for i in range(2, n + 1)]
        out = []
        for r in rows:
            v = r.get("time_median_us")
            if r.get("status") == "ok" and isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
                out.append(float(v))
        return out

    def rounds_disagree(self, first: Mapping[str, Any], n: int) -> bool:
        """Whether the middle half of the windows of a configuration's first ``n`` rounds spans more
        than :data:`ROUND_SPREAD` (log2)."""
        return bool(round_spread(self.round_windows(first, n)) > ROUND_SPREAD)

    def _more_rounds(self, k: Kernel, params: list[KernelParam], pairs: list[tuple[Any, dict[str, Any]]],
                     rounds: int) -> None:
        """Further rounds, interleaved, of the configurations in ``pairs`` (configuration, first row)
        measured in ``rounds`` rounds whose windows disagree (:meth:`rounds_disagree`), one round at a
        time until they agree or have ``max_rounds`` (default twice ``rounds``); a rerun measures
        only those it has not stored."""
        limit = self.o.max_rounds if self.o.max_rounds is not None else 2 * rounds
        if rounds < 2:
            return
        for n in range(rounds + 1, limit + 1):
            todo = [(c, r) for c, r in pairs if r.get("status") == "ok" and self.rounds_disagree(r, n - 1)]
            if not todo:
                return
            self._added += len(todo)
            if self.progress is not None:
                self.progress.total += len(todo)
            for c, r in todo:
                self._round(k, params, c, r, n)

    def _round(self, k: Kernel, params: list[KernelParam], c: Any, first: dict[str, Any], n: int) -> None:
        """Round ``n`` of a sweep or sample configuration ``c`` (with ``gsize``, ``lsize``,
        ``regime``, ``n_wg``) whose first measurement is ``first`` (ok rows only; one stored before is
        not measured again): a row keyed ``<key>~r<n>`` of the first's pass with ``remeasure_of``
        the first's key and ``remeasure_reason = "round"``, journaled like any other, so a kill
        loses at most this round; readers pool it into the first (:func:`datagen.dataset.pool_rounds`)."""
        self._tick()
        if first.get("status") != "ok" or f"{first['row_key']}~r{n}" in self.stored:
            return
        key = f"{first['row_key']}~r{n}"
        try:      # a first stored by an earlier run keeps only STORED_COLUMNS: select its arguments again
            cfg = row_config(first) if first.get("args") is not None else \
                LaunchConfig(c.gsize, c.lsize, self.select(params, c.gsize, c.lsize))
        except (UnsupportedArgument, ValueError) as e:
            log.info("%s: no round %d of %s (%s)", k.name, n, first["row_key"], e)
            return
        arg_dicts = [arg_dict(a) for a in cfg.args]
        self._reference()
        m = self.h.run(k, cfg, self.o.timing)
        sweep = first["pass"] == "sweep"
        new = flatten(m, k, key=key, selection=self.o.args, pass_=first["pass"], regime=c.regime, n_wg=c.n_wg,
                      seed=self.o.seed, problem=problem_id(k.id, self.o.args, c.gsize, arg_dicts), sweep=sweep)
        new["remeasure_of"] = first["row_key"]
        new["remeasure_reason"] = "round"
        self.w.append(new)
        self.stored[key] = {col: new[col] for col in STORED_COLUMNS}
        self.summary.rounds += 1
        self.summary.measure_wall_s += m.wall_s or 0.0
        if m.time is not None:
            self.summary.kernel_time_s += sum(m.time.times_us) * m.time.group * 1e-6

    def _remeasure(self, k: Kernel) -> None:
        """Measure the kernel's noisy rows and those measured under another process's load once
        more, now that others ran in between; the new row (``remeasure_of`` the first) is journaled
        like any other, readers keep the unloaded one, then the lower CV
        (:func:`datagen.dataset.resolve_remeasured`)."""
        for reason in ("noise", "load"):
            self._remeasure_rows([(k, row, cfg) for row, cfg, why in self._noisy if why == reason], reason)
        self._noisy = []

    def _reference(self, final: bool = False) -> None:
        """The drift check (when due, or ``final``): see :mod:`datagen.reference`."""
        if not final and not self.ref.due():
            return
        if final and (self.ref.every_s <= 0 or not (self._since_check or self._suspect)):
            return
        m = self.h.run(REF_KERNEL, REF_CONFIG, REF_POLICY)
        good, ratio = self.ref.record(m)
        log_check(self.w.root, m, ratio, good)
        if not good:
            log.info("reference kernel %.2fx its best: %d rows since the last check are suspect",
                     ratio or float("nan"), len(self._since_check))
            self._suspect += self._since_check
        else:
            suspect, self._suspect = self._suspect, []
            self._remeasure_rows(suspect, "drift")
        self._since_check = []

    def _remeasure_rows(self, items: list[tuple[Kernel, dict[str, Any], LaunchConfig]], reason: str) -> None:
        for k, row, cfg in items:
            key = f"{row['row_key']}~{reason[0]}1"
            if key in self.stored:
                continue
            m = self.h.run(k, cfg, self.o.timing)
            new = {**row, **flatten(m, k, key=key, selection=row["selection"], pass_=row["pass"],
                                    regime=row["regime"], n_wg=row["n_wg"], seed=self.o.seed,
                                    problem=row.get("problem_id"), sweep=bool(row.get("sweep")))}
            # the same arguments: the original's
            for c in ("active_fraction", "all_args_fraction", "bytes_touched", "site_counts"):
                new[c] = row.get(c)
            new["remeasure_of"] = row["row_key"]
            new["remeasure_reason"] = reason
            self.w.append(new)
            self.stored[key] = {c: new[c] for c in STORED_COLUMNS}
            self.summary.remeasured += 1
            self.summary.measure_wall_s += m.wall_s or 0.0
            if m.time is not None:
                self.summary.kernel_time_s += sum(m.time.times_us) * m.time.group * 1e-6

    def _too_slow(self, r: dict[str, Any]) -> bool:
        if r["status"] == "timeout":
            return True
        med = r.get("time_median_us")
        return med is not None and not math.isnan(med) and med * 1e-6 > self.o.max_config_time_s

    def _rebalance(self, k: Kernel, params: list[KernelParam], lsize: tuple[int, ...],
                   rows: list[dict[str, Any]]) -> int:
        ok = [r for r in rows if r["status"] == "ok" and r.get("time_median_us") is not None]
        max_nwg = max(1, self.o.max_total_items // math.prod(lsize))
        slow = [r["n_wg"] for r in rows if self._too_slow(r)]
        if slow:
            max_nwg = min(max_nwg, min(slow) - 1)
        plan = plan_rebalance([r["n_wg"] for r in ok], [r["time_median_us"] for r in ok],
                              kernel_rng(self.o.seed, k.id, f"iqr{lsize}"), extra=self.o.rebalance_extra,
                              max_nwg=max_nwg)
        if plan.reason:
            log.debug("%s lsize %s: no rebalancing (%s)", k.name, lsize, plan.reason)
        if plan.new_nwg:     # each with its rounds
            self._added += len(plan.new_nwg) * self.o.sample_rounds
            if self.progress is not None:
                self.progress.total += len(plan.new_nwg) * self.o.sample_rounds
                self.progress.refresh()
        faults = 0
        rng = kernel_rng(self.o.seed, k.id, f"grid{lsize}")

        for n_wg in plan.new_nwg:
            grid = grid_for(rng, n_wg, len(lsize))
            gsize = tuple(g * loc for g, loc in zip(grid, lsize))
            r = self._measure(k, params, gsize, lsize, n_wg, regime_of(n_wg, self.limits.compute_units, self.o.k),
                              "iqr")
            faults += r["status"] in FAULTS
            if faults >= self.o.max_faults:
                break
        return faults

    def _measure(self, k: Kernel, params: list[KernelParam], gsize: tuple[int, ...], lsize: tuple[int, ...],
                 n_wg: int, regime: str, pass_: str, sweep: bool = False) -> dict[str, Any]:
        try:
            args = self.select(params, gsize, lsize)
        except UnsupportedArgument as e:
            return {"status": "invalid_config", "reason": str(e)}
        arg_dicts = [arg_dict(a) for a in args]
        key = row_key(k.id, gsize, lsize, arg_dicts, self.o.args)
        self._tick()
        first_visit = key not in self.visited
        self.visited.add(key)
        if not sweep:      # a regime sample or rebalancing's: its rounds follow the kernel's samples
            self._samples.setdefault(key, (SampledConfig(gsize, lsize, n_wg, regime), self.stored.get(key, {})))
        if key in self.stored:
            if not first_visit:
                self.summary.duplicates += 1      # sampled twice (or rebalancing hit a sampled N_WG)
            elif key in self.preexisting:
                self.summary.rows_resumed += 1
            self._ok_rows += self.stored[key].get("status") == "ok"
            return self.stored[key]   # stored before, or earlier in this run (rebalancing hit a sampled N_WG)
        setting = getattr(self.select, "last_setting", None)
        activity = getattr(self.select, "last_activity", None)
        if activity is None and self.o.activity:
            t_act = time.perf_counter()
            activity = self._activity(k, gsize, lsize, args)
            self.summary.activity_s += time.perf_counter() - t_act
        cfg = LaunchConfig(gsize, lsize, args)
        self._reference()
        m = self.h.run(k, cfg, self.o.timing)
        if m.status == "invalid_config" and HOST_MEMORY_REASON in (m.reason or ""):
            # refused for the host's free memory at this moment: not stored, so a rerun tries again
            self.summary.skipped += 1
            return {"status": "invalid_config", "reason": m.reason}
        row = flatten(m, k, key=key, selection=self.o.args, pass_=pass_, regime=regime, n_wg=n_wg, seed=self.o.seed,
                      problem=problem_id(k.id, self.o.args, gsize, arg_dicts), sweep=sweep, activity=activity)
        row["site_counts"] = self._site_counts(k, cfg) if m.status == "ok" and self.o.site_counts else ""
        if setting is not None:   # memory analysis: the fitted size = c * work-items + d of every array
            row["extra"] = {"array_fits": {n: {"c": float(f.c), "d": float(f.d)} for n, f in setting.arrays.items()},
                            "scalar_choices": {n: str(v) for n, v in setting.scalars.items()}}
            grown = getattr(self.select, "last_grown", None)
            if grown:             # arrays sized by what the bounds check touched, not by their fit
                row["extra"]["grown"] = dict(grown)
        self.w.append(row)
        self.stored[key] = {c: row[c] for c in STORED_COLUMNS}
        self.summary.add(m, regime, pass_, machine_busy(m.machine, self.load_limit))
        why = None if m.time is None else remeasure_reason(
            m.status, m.time.cv, sum(m.time.times_us) * m.time.group * 1e-6, m.machine.get("other_cpu_frac"))
        rounds = self.o.sweep_rounds if sweep else self.o.sample_rounds
        if why is not None and rounds <= 1:   # measured in rounds: the rounds take its noise
            self._noisy.append((row, cfg, why))
        if not sweep:
            self._samples[key] = (self._samples[key][0], row)
        if m.status == "ok":
            self._since_check.append((k, row, cfg))
            self._ok_rows += 1
        return row

    def _site_counts(self, k: Kernel, cfg: LaunchConfig) -> str:
        """One counting launch with the row's configuration and data (:mod:`datagen.counts`): the
        ``site_counts`` cell, ``""`` when the kernel cannot be counted or the launch fails (the
        row is kept either way)."""
        if self._counter is None:
            self._counter = SiteCounter(self.h)
        if self._count_faults.get(k.id, 0) >= 2:     # its counting launches crash or time out: not again
            return ""
        t = time.perf_counter()
        try:
            sc = self._counter.count(k, cfg, self.o.timing)
        except (RewriteError, InstrumentedRunError, ValueError, KeyError) as e:
            log.debug("%s: no site counts (%s)", k.name, e)
            if isinstance(e, InstrumentedRunError) and e.status in FAULTS:
                self._count_faults[k.id] = self._count_faults.get(k.id, 0) + 1
            return ""
        finally:
            self.summary.counts_s += time.perf_counter() - t
        self.summary.counted += 1
        return counts_text(sc)

    def _activity(self, k: Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...], args: list[Any]) -> Any:
        """One run of the activity-instrumented kernel with the row's arguments (simple selection;
        memory selection gets it from its bounds check); None when the kernel cannot be
        instrumented or the run fails (the plain run then says why)."""

        self._prepare_activity(k)
        if self._act is None:
            return None
        try:
            bad, act = activity_of_args(self.h, self._act, gsize, lsize, args)
        except (InstrumentedRunError, ValueError, KeyError) as e:
            log.debug("%s: activity run failed (%s)", k.name, e)
            return None
        return None if bad else act

    def _prepare_activity(self, k: Kernel) -> None:
        """The activity-instrumented variant of ``k`` in ``self._act`` (None when it cannot be made)."""
        if self._act_kernel != k.id:
            self._act_kernel, self._act = k.id, None
            try:
                rr = instrument_kernel(k, int64_atomics=device_supports_int64_atomics(self.h.device))
                if rr.ok and all(s.elem_bytes for s in rr.slots.values()):
                    self._act = activity_rewrite(rr)
            except (RewriteError, ValueError) as e:
                log.debug("%s: no activity record (%s)", k.name, e)

    # -- validity -----------------------------------------------------------------------------

    def _validity_key(self, k: Kernel) -> str:
        return row_key(k.id, (0,), None, [], f"validity:{self.o.args}")

    def _kernel_row(self, k: Kernel, status: str, reason: str, extra: dict[str, Any] | None = None) -> str:
        key = self._validity_key(k)
        if key not in self.w:
            row = {"row_key": key, "kernel_id": k.id, "kernel_name": k.name, "kernel_origin": k.origin,
                   "pass": "validity", "selection": self.o.args, "status": status, "reason": reason,
                   "dims": k.dims, "seed": self.o.seed, "harness_version": HARNESS_VERSION,
                   "schema_version": SCHEMA_VERSION, "measured_at": time.time(), **(extra or {})}
            self.w.append(row)
            self.stored[key] = {"row_key": key, "kernel_id": k.id, "status": status, "reason": reason,
                                "time_median_us": None, "lsize": None, "n_wg": None, "pass": "validity"}
            self.summary.status[f"validity:{status}"] += 1
        return status

    def _validity(self, k: Kernel, params: list[KernelParam], dims: int) -> str:
        key = self._validity_key(k)
        if key in self.stored:
            return str(self.stored[key]["status"])
        lsize = tuple([self.limits.warp] + [1] * (dims - 1))
        gsize = validity_gsize(self.limits.warp, self.limits.compute_units, dims)
        try:
            args = self.select(params, gsize, lsize)
        except UnsupportedArgument as e:
            return self._kernel_row(k, "invalid_config", str(e))
        # the race check: many small work-groups, several per compute unit, so that they overlap
        cgsize = tuple([self.limits.warp * max(CONCURRENT_WGS_PER_CU * self.limits.compute_units,
                                               CONCURRENT_MIN_ITEMS // self.limits.warp)] + [1] * (dims - 1))
        try:
            concurrent = LaunchConfig(cgsize, lsize, self.select(params, cgsize, lsize))
        except UnsupportedArgument:
            concurrent = None
        if self.o.args not in self.kernel_selectors:     # memory selection bounds-checks its own arguments
            oob = self._out_of_bounds(k, gsize, lsize, args)
            if oob:
                return self._kernel_row(k, "out_of_bounds", f"instrumented run: {oob[0]}",
                                        {"gsize": list(gsize), "lsize": list(lsize)})
        v = check_validity(self.h, k, LaunchConfig(gsize, lsize, args), seed=VALIDITY_SEED, concurrent=concurrent)
        return self._kernel_row(k, v.status, v.reason, {"gsize": list(gsize), "lsize": list(lsize),
                                                        "extra": v.to_dict()})

    def _out_of_bounds(self, k: Kernel, gsize: tuple[int, ...], lsize: tuple[int, ...], args: list[Any]) -> list[str]:
        """The buffers the instrumented kernel touches (reads or writes) outside their sizes with
        ``args`` at the validity configuration, from the buffer contents of the validity runs: a
        gather through random indices reads past its source, which the plain run's guards do not
        see (and which may crash it). Empty when nothing is out of bounds or the kernel cannot be
        instrumented."""
        self._prepare_activity(k)
        if self._act is None:
            return []
        try:
            bad, _ = activity_of_args(self.h, self._act, gsize, lsize, args)
        except (InstrumentedRunError, ValueError, KeyError) as e:
            return [f"{e}"] if isinstance(e, InstrumentedRunError) and e.status in FAULTS else []
        return [b for b in bad if "touches [" in b]


def dataset_manifest(harness: Any, options: DatagenOptions, corpus: str) -> dict[str, Any]:
    dev = harness.device
    o = asdict(options)
    o["timing"] = asdict(options.timing)
    return {
        "kind": "kernelcast-dataset",
        "schema_version": SCHEMA_VERSION,
        "harness_version": HARNESS_VERSION,
        "kernelcast_version": kernelcast.__version__,
        "device": dev.to_dict(),
        "device_identity": dev.identity,
        "driver_version": dev.driver_version,
        "platform_version": dev.platform_version,
        **backend_for(dev).version_facts(),
        "python": platform.python_version(),
        "host": platform.node(),
        "seed": options.seed,
        "args_selection": options.args,
        "options": o,
        "corpus": corpus,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def write_kernels(root: Path, kernels: list[Kernel]) -> None:
    """Keep the dataset's kernel sources beside its rows (a corpus in ``DATASET/kernels``), merged by id."""
    kdir = root / "kernels"
    have: dict[str, dict[str, Any]] = {}
    if (kdir / "kernels.jsonl").is_file():
        have = {r["id"]: r for r in read_records(kdir)}
    for k in kernels:
        have.setdefault(k.id, k.to_dict())
    write_corpus(kdir, have.values(), {"source": "kernels measured in this dataset"})


class DatagenInterrupted(KernelcastError):
    """Ctrl-C during :func:`run_datagen`: every row stored so far is kept; rerunning resumes."""

    def __init__(self, appended: int, terminated: bool = False):
        super().__init__(f"{'terminated' if terminated else 'interrupted'}: {appended} rows stored this run; "
                         f"rerun the same command to resume")
        self.appended = appended
        self.terminated = terminated    # by SIGTERM (exit 143), else Ctrl-C (130)


@dataclass
class DatagenRun:
    """What :func:`run_datagen` did: the summary of this run, and the dataset's rows in all."""

    summary: Summary
    rows_total: int
    appended: int


def run_datagen(kernels: list[Kernel], out: str | Path, device: Any, options: DatagenOptions, *, meter: str,
                timeout_s: float, corpus: str, progress: bool = True,
                extra_manifest: dict[str, Any] | None = None) -> DatagenRun:
    """Measure ``kernels`` on ``device`` into the dataset directory ``out`` (created, or resumed),
    with a progress bar when ``progress``. :class:`DatagenInterrupted` on Ctrl-C."""
    with Harness(device, meter=meter, timeout_s=timeout_s) as h:
        manifest = {**dataset_manifest(h, options, corpus), **(extra_manifest or {})}
        writer = DatasetWriter(out, manifest)
        write_kernels(Path(out), kernels)
        with writer, tqdm(total=0, unit="run", dynamic_ncols=True, disable=not progress, desc="datagen") as bar:
            gen = Generator(h, writer, options, progress=bar)
            # one unit: a configuration's first measurement or one of its rounds
            bar.total = len(kernels) * gen.units_per_kernel() * (2 if options.args == "both" else 1)
            bar.refresh()
            try:
                summary = gen.run(kernels)
            except KeyboardInterrupt as stop:
                bar.close()
                raise DatagenInterrupted(writer.appended, isinstance(stop, Terminated)) from None
        writer.update_manifest(last_summary=summary.to_dict(), meter=h.meter_name)
    return DatagenRun(summary, len(writer), writer.appended)

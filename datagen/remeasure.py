"""Measure again the configurations of a dataset that were measured beside other work.

A kernel that uses every core for its window runs slower while another process takes a core, and
its CV can stay low (:data:`datagen.dataset.REMEASURE_OTHER_CPU`), so such a row is a wrong label
rather than a noisy one. Datagen measures a row once more when it sees other processes' CPU time
during the window (read for windows of 50 ms or more), but most windows are shorter, and a dataset
measured while something else ran (two datagens at once, tests beside a datagen) keeps those rows.
:func:`remeasure_busy` (``kernelcast dataset remeasure DS``) finds the configurations whose kept
measurement, or any of its rounds, was taken on a busy host (:func:`datagen.dataset.busy_rows`: the
other processes' share where read, else the 1-minute load average above the device's compute units
plus half, :func:`datagen.dataset.busy_load_limit`) and measures each again through the isolated
harness, from what its row stores (global and local size, argument bindings, the dataset's data seed and timing
policy), in as many rounds as it had (at most ``max_rounds``), a kernel's configurations
interleaved round by round. Each measurement is a row of its own (``<first key>~l<n>``,
``remeasure_of`` the first's key, ``remeasure_reason = "load"``), journaled like datagen's, so a
kill loses at most the configuration in flight and a rerun goes on; readers pool the re-measurements
taken on an idle host and keep them in place of the busy measurement
(:func:`datagen.dataset.resolve_remeasured`). A re-measurement taken on a busy host counts as busy
too: the configuration is taken again on the next run.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.datagen.counts import data_seed, dataset_kernels, open_checked_dataset, row_config
from kernelcast.datagen.dataset import DatasetWriter, busy_load_limit, busy_rows, machine_busy, resolve_remeasured
from kernelcast.datagen.frame import TRAIN_PASSES, DataError
from kernelcast.datagen.generate import flatten
from kernelcast.instrument.harness import Harness
from kernelcast.instrument.runner import TimingPolicy
from tqdm import tqdm

from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

#: rounds of one configuration at most (a tuning sweep's configurations have 4 by default)
MAX_ROUNDS = 8
#: a kernel whose re-measurements time out or crash this many times gets its other configurations
#: skipped for this run
MAX_FAULTS = 3

_LOAD_KEY = re.compile(r"~l(\d+)$")


@dataclass
class Planned:
    """One configuration to measure again: its first measurement's row, the rounds it takes and
    the index of its first new key (``<first key>~l<start>``)."""

    row: dict[str, Any]
    rounds: int
    start: int


@dataclass
class RemeasureSummary:
    configurations: int = 0           # ok configurations of the training passes
    busy: int = 0                     # of them measured beside other work
    planned: int = 0                  # configurations taken this run (--limit)
    measurements: int = 0             # measurements this run (rounds included)
    ok: int = 0
    still_busy: int = 0               # ok measurements of this run taken beside other work
    failed: Counter = field(default_factory=Counter)
    load_limit: float | None = None
    wall_s: float = 0.0
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (dict(getattr(self, f.name)) if f.name == "failed" else getattr(self, f.name))
                for f in fields(self)}

    def format(self) -> str:
        lim = "other processes' CPU share only" if self.load_limit is None else \
            f"load average above {self.load_limit:g} where that share was not read"
        lines = [f"configurations: {self.configurations}; measured beside other work: {self.busy} ({lim})"]
        if self.dry_run:
            lines.append(f"would measure {self.planned} configuration(s) again, {self.measurements} measurement(s)")
            return "\n".join(lines)
        lines.append(f"measured again: {self.planned} configuration(s), {self.measurements} measurement(s) in "
                     f"{self.wall_s:.0f} s; ok {self.ok}, of them beside other work again {self.still_busy}")
        if self.failed:
            lines.append("failed: " + ", ".join(f"{k}: {v}" for k, v in sorted(self.failed.items())))
        if self.still_busy:
            lines.append("the host was busy: run it again when it is idle (those configurations are taken again)")
        return "\n".join(lines)


def check_remeasure_dataset(root: Path) -> tuple[dict[str, Any], pd.DataFrame, dict[str, Kernel]]:
    """The manifest, every row (unresolved) and the kernels of a dataset; :class:`DataError` (one
    line, exit 2) for a directory that is not one or lacks its kernels."""
    manifest, raw = open_checked_dataset(root, resolve=False)
    if "row_key" not in raw.columns:
        raise DataError(f"{root}: the dataset has no measured rows")
    return manifest, raw, dataset_kernels(root)


def plan_remeasure(raw: pd.DataFrame, load_limit: float | None, max_rounds: int = MAX_ROUNDS
                   ) -> tuple[list[Planned], int, int]:
    """The configurations of an unresolved frame to measure again (see the module docstring), with
    the number of ok configurations of the training passes and of those measured beside other work."""
    first = raw[raw["remeasure_of"].isna()] if "remeasure_of" in raw.columns else raw
    first = first[(first["status"] == "ok") & first["pass"].isin(TRAIN_PASSES)]
    if first.empty:
        return [], 0, 0
    kept = resolve_remeasured(raw, load_limit).set_index("row_key")
    busy = busy_rows(raw, load_limit)
    of = raw["remeasure_of"] if "remeasure_of" in raw.columns else pd.Series(None, raw.index)
    group = of.where(of.notna(), raw["row_key"])
    reason = raw["remeasure_reason"] if "remeasure_reason" in raw.columns else pd.Series(None, raw.index)
    # the measurements a configuration's label comes from unless re-measured for load
    measured = reason.isna() | reason.isin(["round", "noise", "drift"])
    busy_groups = set(group[busy & measured & (raw["status"] == "ok")])
    loads = raw[reason == "load"]
    idle_load = set(group[(reason == "load") & (raw["status"] == "ok") & ~busy])
    last_load: dict[str, int] = {}
    for key, g in zip(loads["row_key"], group[reason == "load"]):
        m = _LOAD_KEY.search(str(key))
        if m:
            last_load[g] = max(last_load.get(g, 0), int(m.group(1)))
    plan: list[Planned] = []
    n_busy = 0
    for row in (_plain(r) for r in first.to_dict("records")):
        key = row["row_key"]
        if key not in busy_groups:
            continue
        n_busy += 1
        if key in idle_load:
            continue                   # measured again on an idle host already
        rounds = kept["time_rounds"].get(key) if "time_rounds" in kept.columns and key in kept.index else 1
        try:
            r = int(rounds) if pd.notna(rounds) else 1
        except (TypeError, ValueError):
            r = 1
        plan.append(Planned(row, max(1, min(r, max_rounds)), last_load.get(key, 0) + 1))
    return plan, len(first), n_busy


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """A frame's row as plain Python values (arrays as lists), as the journal stores rows."""
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v.item() if isinstance(v, np.generic) else v)
            for k, v in row.items()}


def timing_policy(manifest: dict[str, Any]) -> TimingPolicy:
    """The dataset's timing policy (``options.timing`` of the manifest; defaults where absent)."""
    stored = (manifest.get("options") or {}).get("timing") or {}
    names = {f.name for f in fields(TimingPolicy)}
    kw = {k: v for k, v in stored.items() if k in names}
    kw["seed"] = data_seed(manifest)
    return TimingPolicy(**kw)


def remeasure_busy(dataset: str | os.PathLike[str], *, device: Any = "auto", load_above: float | None = None,
                   max_rounds: int = MAX_ROUNDS, limit: int | None = None, timeout_s: float = 30.0,
                   dry_run: bool = False, progress: bool = False) -> RemeasureSummary:
    """Measure again the configurations of ``dataset`` measured beside other work (module
    docstring): ``load_above`` overrides the dataset's load limit, ``limit`` takes at most that many
    configurations this run, ``dry_run`` only plans."""
    root = Path(dataset)
    manifest, raw, kernels = check_remeasure_dataset(root)
    load_limit = load_above if load_above is not None else busy_load_limit(manifest)
    plan, n_conf, n_busy = plan_remeasure(raw, load_limit, max_rounds)
    if limit is not None:
        plan = plan[:limit]
    summary = RemeasureSummary(configurations=n_conf, busy=n_busy, planned=len(plan),
                               measurements=sum(p.rounds for p in plan), load_limit=load_limit, dry_run=dry_run)
    if dry_run or not plan:
        return summary
    policy = timing_policy(manifest)
    seed = int(manifest.get("seed", 0) or 0)
    by_kernel: dict[str, list[Planned]] = {}
    for p in plan:
        by_kernel.setdefault(str(p.row["kernel_id"]), []).append(p)
    bar = None
    if progress:
        bar = tqdm(total=summary.measurements, unit="run", desc="remeasure", dynamic_ncols=True)
    summary.measurements = 0
    t0 = time.perf_counter()
    try:
        with DatasetWriter(root, manifest) as w, Harness(device, meter="none", timeout_s=timeout_s) as h:
            for kid, items in by_kernel.items():
                k = kernels.get(kid)
                if k is None:
                    summary.failed["no_kernel"] += len(items)
                    continue
                faults = 0
                for n in range(max(p.rounds for p in items)):
                    for p in items:
                        if n >= p.rounds:
                            continue
                        if faults >= MAX_FAULTS:
                            summary.failed["skipped"] += 1
                            continue
                        key = f"{p.row['row_key']}~l{p.start + n}"
                        if key in w:
                            continue
                        try:
                            cfg = row_config(p.row)
                        except ValueError as e:
                            log.info("%s: %s not measured again (%s)", k.name, p.row["row_key"], e)
                            summary.failed["invalid_config"] += 1
                            continue
                        m = h.run(k, cfg, policy)
                        summary.measurements += 1
                        new = {**p.row, **flatten(m, k, key=key, selection=p.row.get("selection") or "",
                                                  pass_=p.row["pass"], regime=p.row.get("regime"),
                                                  n_wg=p.row.get("n_wg"), seed=seed,
                                                  problem=p.row.get("problem_id"), sweep=bool(p.row.get("sweep")))}
                        # the same arguments
                        for c in ("active_fraction", "all_args_fraction", "bytes_touched", "site_counts"):
                            new[c] = p.row.get(c)
                        new["remeasure_of"] = p.row["row_key"]
                        new["remeasure_reason"] = "load"
                        w.append(new)
                        if m.status == "ok":
                            summary.ok += 1
                            if machine_busy(m.machine, load_limit):
                                summary.still_busy += 1
                        else:
                            summary.failed[m.status] += 1
                            faults += m.status in ("timeout", "crash")
                        if bar is not None:
                            bar.update(1)
            summary.wall_s = time.perf_counter() - t0
            w.update_manifest(last_remeasure={"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                              **summary.to_dict()})
    finally:
        if bar is not None:
            bar.close()
    return summary

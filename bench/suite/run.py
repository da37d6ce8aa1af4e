"""Measuring a suite: every (kernel, size) instance through the isolated harness, one row each.

Rows are never dropped: an instance whose inputs cannot be generated, or whose kernel fails to
build or run, is a row with its status and reason and null times.

    python -m kernelcast.bench.suite.run suites/kernelcast/suite.json -o suite.csv
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from kernelcast.bench.suite.manifest import load_manifest
from kernelcast.bench.suite.model import BenchInstance, KernelSpec, ManifestError, Suite
from kernelcast.instrument.runner import TimingPolicy, pool_rounds

from kernelcast.errors import InputError
from kernelcast.schema import Measurement

log = logging.getLogger(__name__)

#: columns of :func:`measure_suite`'s table, in order
COLUMNS = (
    "suite", "kernel", "kernel_name", "kernel_hash", "file", "n", "label", "gsize", "lsize", "global_items",
    "local_items", "status", "reason", "median_us", "mean_us", "min_us", "cv", "repeats", "energy_j",
    "avg_power_w", "meter", "input_bytes", "args", "build_s", "wall_s", "site_counts",
)


@dataclass
class SuiteRow:
    """One row of a suite measurement (kept as a dataclass so callers can build rows themselves)."""

    suite: str
    kernel: str
    kernel_name: str
    kernel_hash: str
    file: str
    n: int
    label: str
    gsize: list[int]
    lsize: list[int] | None
    global_items: int
    local_items: int | None
    status: str
    reason: str = ""
    median_us: float | None = None
    mean_us: float | None = None
    min_us: float | None = None
    cv: float | None = None
    repeats: int | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    meter: str = "none"
    input_bytes: int | None = None
    args: str = "[]"
    build_s: float | None = None
    wall_s: float | None = None
    state_reset: str = "none"          # none / restore / single / unchecked (instrument.runner)
    site_counts: str = ""              # JSON: measured loop trips / branch outcomes (kernelcast.sites)

    def as_dict(self) -> dict[str, Any]:
        return {c: getattr(self, c) for c in COLUMNS}


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def args_json(inst: BenchInstance) -> str:
    """The argument bindings of an instance as compact JSON (what a predictor sees)."""
    return json.dumps([
        {"name": a.name, "kind": a.kind, "dtype": a.dtype, "count": a.count,
         "value": a.value if a.kind == "scalar" else None, "init": a.init}
        for a in inst.args
    ], separators=(",", ":"), default=str)


def row_from(inst: BenchInstance, m: Measurement, spec: KernelSpec | None = None) -> SuiteRow:
    t = m.time
    return SuiteRow(
        suite=inst.suite, kernel=inst.id, kernel_name=inst.kernel.name, kernel_hash=inst.kernel.id,
        file=str(spec.file if spec is not None else inst.kernel.origin), n=inst.n, label=inst.label,
        gsize=list(inst.gsize), lsize=list(inst.lsize) if inst.lsize else None,
        global_items=_prod(inst.gsize), local_items=_prod(inst.lsize) if inst.lsize else None,
        status=m.status, reason=m.reason,
        median_us=t.median_us if t else None, mean_us=t.mean_us if t else None, min_us=t.min_us if t else None,
        cv=t.cv if t else None, repeats=t.repeats if t else None,
        energy_j=m.energy_j, avg_power_w=m.avg_power_w, meter=m.meter,
        input_bytes=inst.input_bytes(), args=args_json(inst), build_s=m.build_s, wall_s=m.wall_s,
        state_reset=m.state_reset,
    )


def _failed_row(suite: Suite, spec: KernelSpec, n: int, status: str, reason: str, variant: int = 0) -> SuiteRow:
    k = spec.kernel_record()
    return SuiteRow(suite=suite.name, kernel=spec.id, kernel_name=spec.kernel, kernel_hash=k.id,
                    file=str(spec.file), n=n, label=spec.label(n, variant), gsize=[], lsize=None, global_items=0,
                    local_items=None, status=status, reason=reason)


#: a suite entry's local-size variants of one problem size are measured in this many interleaved
#: rounds and pooled (:func:`instrument.runner.pool_rounds`; why: :data:`datagen.generate.SWEEP_ROUNDS`)
SWEEP_ROUNDS = 4


def measure_suite(suite: Suite, harness: Any, policy: TimingPolicy | None = None, progress: bool = True, *,
                  ids: Iterable[str] | None = None, sizes: Iterable[int] | None = None,
                  max_sizes: int | None = None, on_row: Callable[[SuiteRow], None] | None = None,
                  counts: bool = True, rounds: int = SWEEP_ROUNDS) -> pd.DataFrame:
    """Measure every instance of ``suite`` with ``harness`` (an :class:`instrument.harness.Harness`).

    One row per (kernel, size), in manifest order, with the columns in :data:`COLUMNS`; ``gsize``
    and ``lsize`` are lists, ``args`` is JSON. ``ids``/``sizes`` restrict what runs,
    ``max_sizes`` keeps the first sizes of each kernel (a quick sweep); ``on_row`` sees each row as
    it is made (for streaming to disk). With ``counts`` every ok instance also gets one counting
    launch with the same inputs (:func:`instrument.counters.measure_counts`): its ``site_counts``.
    The variants (local sizes) of one kernel and size are measured in ``rounds`` interleaved rounds,
    one variant after the other in each, and each variant's rounds are pooled into its row
    (``repeats`` counts the samples of all); the inputs are generated again for every round."""
    policy = policy or TimingPolicy()
    chosen = suite.kernels if ids is None else [suite.kernel(k) for k in ids]
    only = set(sizes) if sizes is not None else None
    problems = [(spec, n) for spec in chosen for n in spec.sizes[:max_sizes] if only is None or n in only]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(spec.variants for spec, _ in problems), desc=suite.name, unit="run", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        for spec, n in problems:
            made: dict[int, SuiteRow] = {}
            runs: dict[int, list[Measurement]] = {v: [] for v in range(spec.variants)}
            for _ in range(rounds if spec.variants > 1 else 1):
                for v in range(spec.variants):
                    if v in made:
                        continue
                    if bar is not None:
                        bar.set_postfix_str(spec.label(n, v))
                    try:
                        inst = spec.instance(n, suite.name, v)
                    except ManifestError as e:
                        log.warning("%s: inputs not generated: %s", spec.label(n, v), e)
                        made[v] = _failed_row(suite, spec, n, "invalid_config",
                                              str(e.issues[0]) if e.issues else str(e), v)
                        continue
                    except MemoryError:
                        made[v] = _failed_row(suite, spec, n, "invalid_config", "out of host memory generating the "
                                              "inputs", v)
                        continue
                    m = harness.run(inst.kernel, inst.config, policy, arrays=inst.arrays)
                    runs[v].append(m)
                    last = len(runs[v]) == (rounds if spec.variants > 1 else 1)
                    if m.status != "ok" or last:      # a failed round ends the variant's rounds
                        if m.status != "ok" and len(runs[v]) > 1:
                            log.warning("%s: round %d %s (%s); the row keeps the rounds before it",
                                        spec.label(n, v), len(runs[v]), m.status, m.reason)
                        row = row_from(inst, pool_rounds(runs[v]), spec)
                        if counts and row.status == "ok":
                            row.site_counts = instance_counts(harness, inst, policy)
                        made[v] = row
                    del inst
            for v in range(spec.variants):
                row = made[v]
                if row.status != "ok":
                    log.info("%s: %s (%s)", row.label, row.status, row.reason)
                rows.append(row.as_dict())
                if on_row is not None:
                    on_row(row)
                if bar is not None:
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    log.info("measured %d instances of %s in %.1f s", len(rows), suite.name, time.perf_counter() - t0)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def instance_counts(harness: Any, inst: BenchInstance, policy: TimingPolicy | None = None) -> str:
    """The site counts of one suite instance with its generated inputs, as the ``site_counts``
    column holds them (JSON; "" when the kernel cannot be counted)."""
    from kernelcast.instrument.counters import measure_counts
    from kernelcast.instrument.rewrite import InstrumentedRunError, RewriteError

    try:
        sc = measure_counts(harness, inst.kernel, inst.config, arrays=inst.arrays, policy=policy)
    except (RewriteError, InstrumentedRunError) as e:
        log.info("%s: site counts not measured: %s", inst.label, str(e).splitlines()[0] if str(e) else e)
        return ""
    return json.dumps(sc.values())


def fill_counts(suite: Suite, rows: pd.DataFrame, harness: Any) -> int:
    """Measure the site counts of the ok rows of an earlier measurement that lack them (a reused
    ``results.csv`` from before counts were recorded); returns how many rows got counts."""
    if "site_counts" not in rows.columns:
        rows["site_counts"] = ""
    rows["site_counts"] = rows["site_counts"].fillna("").astype(str)
    done = 0
    for i in rows.index[(rows["status"] == "ok") & (rows["site_counts"] == "")]:
        spec = suite.kernel(str(rows.at[i, "kernel"]))
        n = int(str(rows.at[i, "n"]))
        variant = next((v for v in range(spec.variants) if spec.label(n, v) == rows.at[i, "label"]), 0)
        try:
            inst = spec.instance(n, suite.name, variant)
        except (ManifestError, MemoryError) as e:
            log.info("%s: inputs not generated for counting: %s", rows.at[i, "label"], e)
            continue
        cell = instance_counts(harness, inst)
        rows.at[i, "site_counts"] = cell
        done += cell != ""
        del inst
    return done


class MeasuredFileError(InputError):
    """A ``--measured`` file that cannot stand in for measuring the suite."""


#: columns a reused measurement must have
MEASURED_REQUIRED = ("suite", "kernel", "kernel_hash", "n", "label", "gsize", "lsize", "status", "reason",
                     "median_us", "args")


def _list_cell(v: Any) -> list[int] | None:
    if v is None or (isinstance(v, float) and v != v) or v == "":
        return None
    if isinstance(v, list):
        return [int(x) for x in v]
    out = json.loads(str(v))
    return None if out is None else [int(x) for x in out]


def measured_rows(suite: Suite, path: str | Path, *, ids: Iterable[str] | None = None,
                  max_sizes: int | None = None) -> pd.DataFrame:
    """The rows of an earlier measurement of ``suite`` (a bench ``results.csv``) for the instances that
    would be measured now, in the same order, instead of measuring again. Every instance must be
    in the file, measured from the same kernel source (``kernel_hash``) and with the same launch
    geometry; :class:`MeasuredFileError` otherwise, naming the first mismatch."""
    p = Path(path)
    if not p.is_file():
        raise MeasuredFileError(f"--measured {path}: no such file")
    try:
        df = pd.read_csv(p, dtype={"kernel": str, "label": str, "suite": str, "kernel_hash": str})
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MeasuredFileError(f"--measured {path}: not a bench results.csv ({why})") from None
    missing = [c for c in MEASURED_REQUIRED if c not in df.columns]
    if missing:
        raise MeasuredFileError(f"--measured {path}: not a bench results.csv (no column {', '.join(missing)})")
    names = set(df["suite"].dropna().astype(str))
    if names and names != {suite.name}:
        raise MeasuredFileError(f"--measured {path}: measured suite {', '.join(sorted(names))}, not {suite.name}")
    chosen = suite.kernels if ids is None else [suite.kernel(k) for k in ids]
    by_key = {(str(r["kernel"]), str(r["label"])): r for r in df.to_dict("records")}
    rows: list[dict[str, Any]] = []
    for spec in chosen:
        kid = spec.kernel_record().id
        for n, v in ((n, v) for n in spec.sizes[:max_sizes] for v in range(spec.variants)):
            r = by_key.get((spec.id, spec.label(n, v)))
            if r is None:
                raise MeasuredFileError(f"--measured {path}: {spec.label(n, v)} was not measured there")
            if str(r["kernel_hash"]) != kid:
                raise MeasuredFileError(f"--measured {path}: {spec.id} was measured from another source of the "
                                        f"kernel (hash {r['kernel_hash']}, now {kid}); measure again")
            row = {c: r.get(c) for c in COLUMNS}
            try:
                row["gsize"], row["lsize"] = _list_cell(r["gsize"]) or [], _list_cell(r["lsize"])
            except (ValueError, TypeError):
                raise MeasuredFileError(f"--measured {path}: {spec.label(n, v)}: unreadable gsize/lsize") from None
            if row["status"] == "ok":
                try:
                    g, loc = spec.geometry(spec.environment(int(n)), v)
                except Exception:  # noqa: BLE001 - a geometry error is reported when measuring, not here
                    g, loc = None, None
                if g is not None and (list(g) != row["gsize"] or (list(loc) if loc else None) != row["lsize"]):
                    raise MeasuredFileError(f"--measured {path}: {spec.label(n, v)} was measured at gsize "
                                            f"{row['gsize']} lsize {row['lsize']}, the manifest now says "
                                            f"{list(g)} / {list(loc) if loc else None}")
                try:
                    t = float(row["median_us"])  # type: ignore[arg-type]
                except (TypeError, ValueError):
                    t = float("nan")
                if not (t > 0):
                    raise MeasuredFileError(f"--measured {path}: {spec.label(n, v)}: status ok without a time")
            row["reason"] = "" if row["reason"] is None or row["reason"] != row["reason"] else str(row["reason"])
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per kernel: sizes, statuses, and the range of median times (µs)."""
    ok = df[df["status"] == "ok"]
    g = df.groupby("kernel", sort=False)
    out = pd.DataFrame({
        "sizes": g["n"].count(),
        "n_min": g["n"].min(),
        "n_max": g["n"].max(),
        "ok": g["status"].apply(lambda s: int((s == "ok").sum())),
    })
    og = ok.groupby("kernel", sort=False)["median_us"]
    out["median_us_min"] = og.min()
    out["median_us_max"] = og.max()
    out["wall_s"] = g["wall_s"].sum()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernelcast.bench.suite.run", description="Measure a benchmark suite.")
    ap.add_argument("manifest", help="suite manifest (JSON or YAML)")
    ap.add_argument("-o", "--output", help="write the table here (.csv or .parquet)")
    ap.add_argument("--device", default="auto", help="OpenCL device spec (default: auto)")
    ap.add_argument("--meter", default="auto", help="energy meter: auto, none, nvml, rapl")
    ap.add_argument("--kernel", action="append", dest="ids", help="only this kernel id (repeatable)")
    ap.add_argument("--max-sizes", type=int, help="only the first N sizes of each kernel")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-instance run timeout, seconds")
    ap.add_argument("--no-progress", action="store_true")
    ns = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        suite = load_manifest(ns.manifest)
    except ManifestError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from kernelcast.instrument.harness import Harness

    t0 = time.perf_counter()
    with Harness(ns.device, meter=ns.meter, timeout_s=ns.timeout) as h:
        df = measure_suite(suite, h, progress=not ns.no_progress, ids=ns.ids, max_sizes=ns.max_sizes)
    wall = time.perf_counter() - t0
    if ns.output:
        out = Path(ns.output)
        if out.suffix == ".parquet":
            df.assign(gsize=df["gsize"].map(json.dumps), lsize=df["lsize"].map(json.dumps)).to_parquet(out)
        else:
            df.to_csv(out, index=False)
    with pd.option_context("display.width", 160, "display.max_rows", 500):
        print(summarize(df).to_string())
    print(f"{len(df)} instances, {int((df['status'] == 'ok').sum())} ok, wall {wall:.1f} s")
    return 0 if (df["status"] == "ok").all() else 1


if __name__ == "__main__":
    raise SystemExit(main())

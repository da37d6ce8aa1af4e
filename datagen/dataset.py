"""The dataset on disk: append-only, resumable, Parquet.

Layout of a dataset directory::

    manifest.json          device, driver, versions, seed, schema, generation options
    journal.jsonl          rows not yet in a shard, one JSON object per line, fsync'd per row
    shards/part-00000.parquet ...

Every measured row is appended to the journal and fsync'd before the next configuration starts,
so a crash or kill loses at most the configuration in flight. Every ``shard_rows`` rows (and on
close) the journal is compacted into a new Parquet shard, written to a temporary name and renamed;
the journal is then replaced by an empty one. Rows carry a ``row_key`` (kernel, sizes, arguments):
readers and the resuming writer drop a key seen before, so a crash between the shard rename and
the journal reset duplicates nothing.

Schema versions (``schema_version`` in the manifest and in every row):

* 1: the rows as first written.
* 2 (:data:`DATASET_SCHEMA_VERSION`): adds ``problem_id`` (rows measuring one problem, i.e. one
  kernel, argument selection, global size and non-local arguments, share it; the local sizes of a
  tuning sweep form one group), ``sweep`` (True for the rows of a tuning sweep),
  ``active_fraction`` and ``bytes_touched`` (how much of its work the kernel did under the row's
  arguments, :mod:`instrument.activity`; null where not measured), and ``all_args_fraction`` (the
  share of work-items reaching the argument fewest of them touch; added within version 2, null
  in rows written before it).

Profile-guided counts: ok rows may carry ``site_counts``, the JSON text of
:meth:`instrument.counters.SiteCounts.values` (``{"trip_l12_c3": 7.5, "br_l9_c5": 0.25}``), ``""``
where not measured. Datagen writes it with each row; for rows stored before, ``kernelcast dataset
counts DS`` writes the :data:`SITE_COUNTS` sidecar, which :func:`read_dataset` merges into the
column (shards are never rewritten).

A writer refuses a directory of another schema version (:class:`DatasetMismatch`, an input error:
one line, exit status 2, nothing written); :func:`read_dataset` reads an older version with the
columns it lacks (:data:`V2_COLUMNS`) as nulls, so models train and evaluate on it unchanged.

Timing columns (harness version 2): ``time_group`` (launches per sample), ``state_reset``
(``none`` / ``restore`` / ``single`` / ``unchecked``) and ``reset_buffers``, the machine during the
window (``load_avg_1m``, ``other_cpu_frac``, ``cpu_mhz``), and on re-measured rows
``remeasure_of`` (the original's key) and ``remeasure_reason`` (``noise`` / ``load`` / ``drift``, or
``round``: a tuning sweep's configurations measured in interleaved rounds):
:func:`read_dataset` keeps one row per configuration (:func:`resolve_remeasured`; a configuration's
rounds pooled into one row with ``time_rounds``, :func:`pool_rounds`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import tempfile
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
import pyarrow as pa

from kernelcast.columns import decode_counts
from kernelcast.errors import InputError
from kernelcast.schema import TimeStats
from kernelcast.sites import PEAK_PREFIX, TRIP_PREFIX

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
SHARDS = "shards"
#: what a dataset directory may hold besides its manifest (kernel sources, memory-analysis cache,
#: quarantined damage, a preset's synthetic corpus, Ray actors' journals, the reference-kernel log,
#: the dataset card)
DATASET_ENTRIES = frozenset({MANIFEST, JOURNAL, SHARDS, "kernels", "memargs", "quarantine", "corpus-synth", "parts",
                             "reference.jsonl", "CARD.md", "card-time.png", "site_counts.jsonl"})
#: the sidecar of per-site loop-trip / branch counts computed for rows stored before
#: (``kernelcast dataset counts``), one JSON object per line keyed by ``row_key``
SITE_COUNTS = "site_counts.jsonl"
#: manifest fields that must match for a run to resume into an existing dataset
RESUME_KEYS: tuple[str, ...] = ("device_identity", "seed", "schema_version", "args_selection")
#: the dataset schema this code writes (see the module docstring)
DATASET_SCHEMA_VERSION = 2
#: the columns schema version 2 added, null when reading an older dataset
V2_COLUMNS: tuple[str, ...] = ("problem_id", "sweep", "active_fraction", "bytes_touched", "all_args_fraction")


class DatasetMismatch(InputError, ValueError):
    """The directory holds a dataset made with another device, seed or schema."""


class DatasetDamaged(InputError, ValueError):
    """A file of the dataset cannot be read; the message names it and points to ``dataset repair``."""

    def __init__(self, root: Path, what: str):
        super().__init__(f"{root}: damaged: {what}; 'kernelcast dataset check {root}' lists the damage, "
                         f"'kernelcast dataset repair {root}' quarantines it and keeps every good row "
                         f"(rerunning datagen re-measures what was lost)")
        self.root, self.what = root, what


def load_manifest(root: Path) -> dict[str, Any]:
    """``manifest.json`` of a dataset directory as a dict; :class:`DatasetDamaged` if it is not one."""
    path = root / MANIFEST
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise DatasetDamaged(root, f"{MANIFEST} is not JSON ({type(e).__name__})") from None
    except OSError as e:
        raise DatasetDamaged(root, f"{MANIFEST} cannot be read ({e.strerror})") from None
    if not isinstance(d, dict):
        raise DatasetDamaged(root, f"{MANIFEST} is not a JSON object")
    return d


def read_shard(root: Path, path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """One Parquet shard; :class:`DatasetDamaged` naming it if it cannot be read or has no row keys."""
    try:
        df = pd.read_parquet(path, columns=columns)
    except (OSError, ValueError, pa.ArrowException) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]
        first = first.split("': ", 1)[-1].split(". ")[0][:100]     # pyarrow: "Could not open ... 'PATH': WHY. ..."
        raise DatasetDamaged(root, f"{path.relative_to(root)} is not a readable Parquet file ({first})") from None
    if "row_key" not in df.columns:
        raise DatasetDamaged(root, f"{path.relative_to(root)} has no row_key column")
    return df


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def row_key(kernel_id: str, gsize: tuple[int, ...], lsize: tuple[int, ...] | None, args: list[dict[str, Any]],
            selection: str = "simple") -> str:
    """The row's identity: kernel, sizes, arguments and ``selection`` (an argument selection, or a
    pass-specific tag such as ``validity:simple``), hashed."""
    payload = json.dumps([kernel_id, list(gsize), list(lsize) if lsize else None,
                          [[a["name"], a["kind"], a["dtype"], a.get("count"), a.get("value")] for a in args],
                          selection], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Valid rows of a journal and the number of damaged lines (a kill mid-write leaves one)."""
    rows: list[dict[str, Any]] = []
    bad = 0
    if not path.is_file():
        return rows, 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                bad += 1
    return rows, bad


def _shard_paths(root: Path) -> list[Path]:
    d = root / SHARDS
    return sorted(d.glob("part-*.parquet")) if d.is_dir() else []


def existing_dataset(root: Path) -> tuple[dict[str, Any] | None, set[str]]:
    """The manifest (None for a new dataset) and the shards' row keys of an output directory,
    checked before anything is written: :class:`DatasetDamaged` for a damaged manifest or shard,
    :class:`DatasetMismatch` for a directory that holds something else."""
    if root.exists() and not root.is_dir():
        raise DatasetMismatch(f"{root}: exists and is not a directory")
    old: dict[str, Any] | None = load_manifest(root) if (root / MANIFEST).is_file() else None
    if old is None and root.is_dir():
        if _shard_paths(root) or ((root / JOURNAL).is_file() and (root / JOURNAL).stat().st_size):
            raise DatasetDamaged(root, f"rows but no {MANIFEST}")
        foreign = sorted(p.name for p in root.iterdir() if p.name not in DATASET_ENTRIES)
        if foreign:
            raise DatasetMismatch(f"{root}: not empty and not a dataset (no {MANIFEST}; holds {foreign[0]}"
                                  f"{' ...' if len(foreign) > 1 else ''}); use another --out")
    keys: set[str] = set()
    for p in _shard_paths(root):
        keys.update(read_shard(root, p, columns=["row_key"])["row_key"].tolist())
    return old, keys


#: a kill point for kill-and-resume checks: a writer whose process has this variable set to N
#: kills the process with SIGKILL right after appending its N-th row (a deterministic point to
#: resume from, unlike a timer)
KILL_AFTER_ENV = "KERNELCAST_DATAGEN_KILL_AFTER_ROWS"


def kill_point(appended: int) -> None:
    """Kill this process with SIGKILL when :data:`KILL_AFTER_ENV` is ``appended`` (the rows a
    journal writer of this process has appended and fsync'd so far)."""
    kill_after = os.environ.get(KILL_AFTER_ENV)
    if kill_after and kill_after.isdigit() and appended == int(kill_after):
        log.warning("%s=%s: killing this process (SIGKILL) after its row %d", KILL_AFTER_ENV, kill_after, appended)
        os.kill(os.getpid(), signal.SIGKILL)


class DatasetWriter:
    """Appends measurement rows to a dataset directory, resuming one that exists."""

    def __init__(self, root: str | os.PathLike[str], manifest: dict[str, Any], *, shard_rows: int = 1000) -> None:
        self.root = Path(root)
        self.shard_rows = shard_rows
        mpath = self.root / MANIFEST
        # read and check everything before writing anything
        old, keys = existing_dataset(self.root)
        if old is not None:
            old.setdefault("schema_version", 1)
            for k in RESUME_KEYS:
                if k in manifest and k in old and old[k] != manifest[k]:
                    raise DatasetMismatch(f"{self.root} was made with {k}={old[k]!r}, this run has {manifest[k]!r}; "
                                          f"use another --out")
            self.manifest: dict[str, Any] = {**old, **{k: v for k, v in manifest.items() if k not in old}}
            self.manifest["resumed"] = int(old.get("resumed", 0)) + 1
        else:
            self.manifest = dict(manifest)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / SHARDS).mkdir(exist_ok=True)
        _atomic_write_text(mpath, json.dumps(self.manifest, indent=2, sort_keys=True, default=str) + "\n")
        self._keys: set[str] = keys
        jpath = self.root / JOURNAL
        rows, bad = _read_journal(jpath)
        if bad:
            log.warning("%s: dropped %d damaged journal line(s) (a configuration in flight when killed)", jpath, bad)
        # rewrite the journal with its valid rows only, so appends never land after a torn line
        fresh = [r for r in rows if r.get("row_key") not in self._keys]
        _atomic_write_text(jpath, "".join(json.dumps(r, default=str) + "\n" for r in fresh))
        self._journal_rows = len(fresh)
        self._keys.update(r["row_key"] for r in fresh)
        self._journal: TextIO = open(jpath, "a", encoding="utf-8")  # noqa: SIM115 - held for the writer's life
        self.appended = 0

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def append(self, row: dict[str, Any]) -> bool:
        """Append one row (must have ``row_key``); False if the key is already stored."""
        key = row["row_key"]
        if key in self._keys:
            return False
        self._journal.write(json.dumps(row, default=str) + "\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())
        self._keys.add(key)
        self._journal_rows += 1
        self.appended += 1
        if self._journal_rows >= self.shard_rows:
            self.compact()
        kill_point(self.appended)
        return True

    def append_many(self, rows: list[dict[str, Any]]) -> int:
        """Append rows already in hand (an import), one fsync per batch of up to ``shard_rows``
        rows instead of one per row; rows whose key is stored are skipped. Returns the rows added.
        A batch cut short by a kill leaves whole lines and at most one torn line, which the next
        writer drops (as for :meth:`append`)."""
        added = 0
        for start in range(0, len(rows), self.shard_rows):
            batch = []
            for r in rows[start:start + self.shard_rows]:
                key = r["row_key"]
                if key in self._keys:
                    continue
                self._keys.add(key)
                batch.append(r)
            if not batch:
                continue
            self._journal.write("".join(json.dumps(r, default=str) + "\n" for r in batch))
            self._journal.flush()
            os.fsync(self._journal.fileno())
            self._journal_rows += len(batch)
            self.appended += len(batch)
            added += len(batch)
            if self._journal_rows >= self.shard_rows:
                self.compact()
        return added

    def compact(self) -> Path | None:
        """Move the journal's rows into a new Parquet shard."""
        jpath = self.root / JOURNAL
        self._journal.close()
        rows, _ = _read_journal(jpath)
        shard = None
        if rows:
            existing = _shard_paths(self.root)
            n = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
            shard = self.root / SHARDS / f"part-{n:05d}.parquet"
            tmp = shard.with_name(f".{shard.name}.tmp")
            frame_from_rows(rows).to_parquet(tmp, index=False)
            with open(tmp, "rb") as f:       # the shard must be durable before the journal is emptied
                os.fsync(f.fileno())
            os.replace(tmp, shard)
            fsync_dir(shard.parent)
        _atomic_write_text(jpath, "")
        self._journal = open(jpath, "a", encoding="utf-8")  # noqa: SIM115
        self._journal_rows = 0
        return shard

    def update_manifest(self, **fields: Any) -> None:
        self.manifest.update(fields)
        text = json.dumps(self.manifest, indent=2, sort_keys=True, default=str) + "\n"
        _atomic_write_text(self.root / MANIFEST, text)

    def close(self) -> None:
        if not self._journal.closed:
            self.compact()
            self._journal.close()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_JSON_COLUMNS: tuple[str, ...] = ("args", "outputs", "device_state", "extra")
#: columns the timing policy added to every measured row
TIMING_COLUMNS: tuple[str, ...] = ("time_group", "state_reset", "reset_buffers", "load_avg_1m", "other_cpu_frac",
                                   "cpu_mhz", "remeasure_of", "remeasure_reason")


def frame_from_rows(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A frame of journal rows, the nested columns (``_JSON_COLUMNS``) as JSON text as in the shards."""
    flat = [{k: (json.dumps(v, default=str) if k in _JSON_COLUMNS and not isinstance(v, str) else v)
             for k, v in r.items()} for r in rows]
    return pd.DataFrame.from_records(flat)


def read_dataset(root: str | os.PathLike[str], resolve: bool = True) -> pd.DataFrame:
    """Every row of a dataset (shards and journal), each row key once; with ``resolve``, one row
    per configuration (:func:`resolve_remeasured`), else re-measurements as rows of their own."""
    path = Path(root)
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"{path}: not a dataset (no {MANIFEST})")
    frames = [read_shard(path, p) for p in _shard_paths(path)]
    rows, _ = _read_journal(path / JOURNAL)
    if rows:
        frames.append(frame_from_rows(rows))
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    df = df.drop_duplicates("row_key", keep="first").reset_index(drop=True)
    for col in V2_COLUMNS:          # an older schema: the columns it lacks, as nulls
        if col not in df.columns:
            df[col] = None
    if resolve:
        try:
            limit = busy_load_limit(load_manifest(path))
        except (OSError, ValueError):
            limit = None
        df = resolve_remeasured(df, limit)
    return merge_site_counts(df, read_site_counts(path))


def read_site_counts(root: str | os.PathLike[str]) -> dict[str, str]:
    """``row_key`` -> ``site_counts`` (JSON text of ``SiteCounts.values()``) of the successful
    entries of a dataset's :data:`SITE_COUNTS` sidecar (empty when there is none; a damaged line,
    left by a kill mid-write, is skipped)."""
    rows, _ = _read_journal(Path(root) / SITE_COUNTS)
    return {str(r["row_key"]): str(r["site_counts"]) for r in rows
            if r.get("status") == "ok" and r.get("row_key") and isinstance(r.get("site_counts"), str)}


def merge_site_counts(df: pd.DataFrame, sidecar: dict[str, str]) -> pd.DataFrame:
    """The ``site_counts`` column: the sidecar's where it has the row (``dataset counts`` ran after
    the row was stored: it counted a row without counts, or recounted one whose counts lack what
    the counting launch measures now), else the row's own (written by datagen), else ``""``.
    Frames with neither keep no such column."""
    if df.empty or ("site_counts" not in df.columns and not sidecar):
        return df
    own = df["site_counts"] if "site_counts" in df.columns else pd.Series([None] * len(df), index=df.index)
    side = df["row_key"].map(sidecar)
    merged = [s if isinstance(s, str) and s else (o if isinstance(o, str) else "") for o, s in zip(own, side)]
    return df.assign(site_counts=merged)


def counts_current(text: Any) -> bool:
    """Whether a row's ``site_counts`` cell holds what the counting launch measures now: measured
    (not ``""``), and every loop with its busiest work-item (``tpeak_...``; counts of before that
    have only the means)."""
    if not isinstance(text, str) or not text:
        return False
    c = decode_counts(text)
    return all(PEAK_PREFIX + k[len(TRIP_PREFIX):] in c for k in c if k.startswith(TRIP_PREFIX))


#: datagen measures a row once more (reason ``load``) when other processes took at least this share
#: of all CPUs' time while it was measured, and readers prefer the measurement that was not
#: (:func:`loaded`, :func:`resolve_remeasured`).
#: Another process's load slows a kernel that uses every core for the whole window, so its CV can
#: stay low and the CV rule misses it: on the 2-core PoCL host, ds6 rows of 10 us or more measured
#: again beside a running datagen read 1.5-1.8x slower (median), and that datagen's own rows,
#: measured while other processes took 50-85 % of the CPUs, had a median CV of 0.05-0.19.
#: The share is read only for windows of at least 50 ms (:class:`instrument.machine.MachineProbe`).
REMEASURE_OTHER_CPU = 0.25


def loaded(other_cpu_frac: Any) -> bool:
    """Whether other processes took :data:`REMEASURE_OTHER_CPU` or more of the CPUs during a
    measurement (False where the share was not read)."""
    try:
        f = float(other_cpu_frac)
    except (TypeError, ValueError):
        return False
    return math.isfinite(f) and f >= REMEASURE_OTHER_CPU


#: a row measured on a CPU device at a 1-minute load average this far above the device's compute
#: units ran beside other work (:func:`busy_load_limit`)
LOAD_AVG_MARGIN = 0.5


def busy_load_limit(manifest: dict[str, Any]) -> float | None:
    """The 1-minute load average above which a row of a dataset measured on a CPU device ran beside
    other work: the device's compute units plus :data:`LOAD_AVG_MARGIN`. Measuring alone keeps it
    at up to the compute units (one worker thread per compute unit and the host's thread between
    launches: 1.54-2.02 over 2,060 back-to-back re-measurements of ds8m on the idle 2-core PoCL
    host, other processes' share 0 at the median where read). None for other devices (the host's
    load does not compete for a GPU) or a manifest without the device's compute units. On that
    host, ds9s's configurations measured at a load average above 2.5 (53 % of its rows; two
    datagens and other work ran at once) read differently when measured again on the idle host,
    mean |log2| 0.41 for launches of several work-groups against 0.17 for those measured below 2.0;
    the yardstick's three-shot MAPE over ds8m, ds8s and ds9s was 15.9 % with every row, 14.9 %
    without those measured above 2.5 (16.1 % without as many random rows)."""
    dev = manifest.get("device") or {}
    if "CPU" not in str(dev.get("type", "")).upper():
        return None
    try:
        cu = float(dev.get("compute_units") or 0)
    except (TypeError, ValueError):
        return None
    return cu + LOAD_AVG_MARGIN if cu > 0 else None


def device_load_limit(device_type: str, compute_units: int) -> float | None:
    """:func:`busy_load_limit` of a device by its type and compute units."""
    return busy_load_limit({"device": {"type": device_type, "compute_units": compute_units}})


def ran_busy(other_cpu_frac: Any, load_avg_1m: Any, load_limit: float | None) -> bool:
    """Whether one measurement ran beside other work: other processes' share of the CPUs
    (:func:`loaded`), or where that was not read, a 1-minute load average above ``load_limit``
    (:func:`busy_load_limit`; not used when None)."""
    try:
        share = float(other_cpu_frac)
    except (TypeError, ValueError):
        share = math.nan
    if math.isfinite(share):
        return loaded(share)
    try:
        la = float(load_avg_1m)
    except (TypeError, ValueError):
        return False
    return load_limit is not None and math.isfinite(la) and la > load_limit


def machine_busy(machine: dict[str, Any], load_limit: float | None) -> bool:
    """:func:`ran_busy` of one measurement's machine state (``Measurement.machine``)."""
    return ran_busy(machine.get("other_cpu_frac"), machine.get("load_avg_1m"), load_limit)


def busy_rows(df: pd.DataFrame, load_limit: float | None = None) -> pd.Series:
    """:func:`ran_busy` of every row of a frame."""
    other = df["other_cpu_frac"] if "other_cpu_frac" in df.columns else pd.Series(None, df.index, dtype=object)
    la = df["load_avg_1m"] if "load_avg_1m" in df.columns else pd.Series(None, df.index, dtype=object)
    return pd.Series([ran_busy(o, a, load_limit) for o, a in zip(other, la)], index=df.index, dtype=bool)


#: time columns recomputed from the pooled samples of a configuration's rounds
_POOLED_TIME = {"repeats": "repeats", "time_median_us": "median_us", "time_min_us": "min_us",
                "time_mean_us": "mean_us", "time_q1_us": "q1_us", "time_q3_us": "q3_us",
                "time_iqr_us": "iqr_us", "time_cv": "cv"}
#: energy columns a pooled row takes as the median over its rounds
_POOLED_ENERGY = ("energy_j", "dynamic_energy_j", "avg_power_w")


#: rounds whose window medians' middle half spans more than this (log2 units: 1.15x) disagree:
#: datagen measures such a configuration in further rounds (``datagen --max-rounds``), and its
#: pooled row says how far apart they were (``time_rounds_spread``)
ROUND_SPREAD = 0.2


def round_spread(medians: Any) -> float:
    """The spread of a configuration's rounds: the interquartile range of the log2 of their window
    medians (0 with fewer than two)."""
    w = np.asarray([m for m in medians if m is not None and math.isfinite(m) and m > 0], dtype=np.float64)
    if len(w) < 2:
        return 0.0
    q1, q3 = np.percentile(np.log2(w), [25, 75])
    return float(q3 - q1)


def _samples(v: Any) -> list[float]:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return []
    if isinstance(v, str):
        v = json.loads(v)
    return [float(x) for x in v]


def pool_rounds(df: pd.DataFrame) -> pd.DataFrame:
    """A tuning sweep's configurations measured in interleaved rounds (rows with
    ``remeasure_reason = "round"``, :data:`datagen.generate.SWEEP_ROUNDS`) as one row each: the
    first measurement's row, its time columns recomputed from the samples (``times_us``) of its ok
    rounds, each round weighing the same (:meth:`kernelcast.schema.TimeStats.from_windows`), the
    energy columns the median over them, ``time_rounds`` how many were pooled and
    ``time_rounds_spread`` how far apart their window medians were (:func:`round_spread`). The round
    rows are dropped; a round whose first is missing or not ok is dropped too.
    Where the first window was measured again after a drifted reference check (an ok row of
    ``remeasure_reason = "drift"``), that window takes the first's place in the pool."""
    if "remeasure_reason" not in df.columns:
        return df
    rounds = (df["remeasure_reason"] == "round").to_numpy()
    if not rounds.any() or "times_us" not in df.columns:
        return df
    out = df.loc[~rounds].copy()
    out["time_rounds"] = np.where(out["status"] == "ok", 1, np.nan) if "status" in out.columns else 1
    out["time_rounds_spread"] = np.where(out["time_rounds"] == 1, 0.0, np.nan)
    ok = df.loc[rounds & (df["status"] == "ok").to_numpy()]
    redo = df[(df["remeasure_reason"] == "drift").to_numpy() & (df["status"] == "ok").to_numpy()]
    drifted = dict(zip(redo["remeasure_of"], redo["times_us"]))    # first key -> its window measured again
    pos = {k: i for i, k in enumerate(out["row_key"])}
    cols = {c: out.columns.get_loc(c) for c in [*_POOLED_TIME, "times_us", "time_rounds", "time_rounds_spread",
                                                 *_POOLED_ENERGY]
            if c in out.columns}
    for first_key, extra in ok.groupby("remeasure_of", sort=False):
        i = pos.get(first_key)
        if i is None or out.iat[i, out.columns.get_loc("status")] != "ok":
            continue
        windows = [_samples(drifted.get(first_key, out.iat[i, cols["times_us"]]))]
        _pool_into(out, i, cols, windows + [_samples(v) for v in extra["times_us"]], extra)
    return out.reset_index(drop=True)


def _pool_into(out: pd.DataFrame, i: int, cols: dict[str, int], windows: list[list[float]],
               extra: pd.DataFrame) -> None:
    """Row ``i`` of ``out`` (positional; ``cols``: positions of the pooled columns) becomes the pool of
    ``windows`` (each a list of samples, each weighing the same: :meth:`TimeStats.from_windows`),
    its energy columns the median over it and the rows ``extra`` (the other pooled measurements)."""
    windows = [w for w in windows if w]
    if not windows:
        return
    t = TimeStats.from_windows(windows)
    for col, attr in _POOLED_TIME.items():
        if col in cols:
            out.iat[i, cols[col]] = getattr(t, attr)
    samples: Any = t.times_us                        # a list in one cell
    out.iat[i, cols["times_us"]] = samples
    out.iat[i, cols["time_rounds"]] = 1 + len(extra)
    out.iat[i, cols["time_rounds_spread"]] = round_spread([float(np.median(w)) for w in windows])
    for col in _POOLED_ENERGY:
        if col in cols:
            vals = pd.to_numeric(pd.concat([out.iloc[[i]][col], extra[col]]), errors="coerce").dropna()
            if len(vals):
                out.iat[i, cols[col]] = float(vals.median())


def pool_idle_remeasures(df: pd.DataFrame, busy: pd.Series) -> tuple[pd.DataFrame, pd.Series]:
    """The ok re-measurements for load (``remeasure_reason = "load"``, ``dataset remeasure`` or
    datagen's own) of a configuration measured where ``busy`` is false, pooled into one row (the
    first of them, ``time_rounds`` how many: ``dataset remeasure`` takes a configuration again in as
    many rounds as it had), and a flag per row of the result marking those rows."""
    need = {"remeasure_reason", "remeasure_of", "status", "times_us"}
    if not need <= set(df.columns):
        return df, pd.Series(False, df.index)
    idle = ((df["remeasure_reason"] == "load") & (df["status"] == "ok") & ~busy).to_numpy()
    if not idle.any():
        return df, pd.Series(idle, df.index)
    out = df.copy()
    if "time_rounds" not in out.columns:
        out["time_rounds"] = np.where(out["status"] == "ok", 1, np.nan)
    if "time_rounds_spread" not in out.columns:
        out["time_rounds_spread"] = np.where(out["time_rounds"] == 1, 0.0, np.nan)
    cols = {c: out.columns.get_loc(c) for c in [*_POOLED_TIME, "times_us", "time_rounds", "time_rounds_spread",
                                                 *_POOLED_ENERGY]
            if c in out.columns}
    drop: list[int] = []
    rows = out.loc[idle]
    for _, grp in rows.groupby("remeasure_of", sort=False):
        if len(grp) < 2:
            continue
        i = out.index.get_loc(grp.index[0])
        _pool_into(out, i, cols, [_samples(v) for v in grp["times_us"]], grp.iloc[1:])
        drop += list(grp.index[1:])
    flag = pd.Series(idle, out.index)
    return out.drop(index=drop), flag.drop(index=drop)


def resolve_remeasured(df: pd.DataFrame, load_limit: float | None = None) -> pd.DataFrame:
    """One row per configuration: a configuration's rounds pooled (:func:`pool_rounds`), then of
    a row and its re-measurements (``remeasure_of`` = its key) the pool of its re-measurements for
    load taken on a host other work left alone (:func:`pool_idle_remeasures`; ``dataset
    remeasure`` takes a configuration measured beside other work again), else the pooled row when
    more than one round was pooled (the rounds, measured at other times, outvote any one window,
    also one measured for noise, load or drift, whose pooled samples would have the larger CV; a
    drift re-measurement is in the pool already, in the drifted window's place), else a
    re-measurement for drift if there is one, else of those measured while other work left the
    CPUs alone (:func:`busy_rows` with ``load_limit``; all when none was) the one with the lowest
    ``time_cv``, under the original ``row_key``; an ok measurement before one that failed."""
    df = pool_rounds(df)
    if "remeasure_of" not in df.columns or not df["remeasure_of"].notna().any():
        return df
    df, idle = pool_idle_remeasures(df, busy_rows(df, load_limit))
    group = df["remeasure_of"].where(df["remeasure_of"].notna(), df["row_key"])
    pooled = (pd.to_numeric(df["time_rounds"], errors="coerce").fillna(1) > 1 if "time_rounds" in df.columns
              else pd.Series(False, df.index))
    cv = df["time_cv"].astype(float).fillna(float("inf")) if "time_cv" in df.columns else pd.Series(0.0, df.index)
    # a re-measurement after a drifted reference check replaces the suspect original outright
    drift = (df["remeasure_reason"] == "drift") if "remeasure_reason" in df.columns else pd.Series(False, df.index)
    busy = busy_rows(df, load_limit)
    failed = (df["status"] != "ok") if "status" in df.columns else pd.Series(False, df.index)
    order = pd.DataFrame({"g": group, "l": ~idle, "f": failed, "p": ~pooled, "d": ~drift, "busy": busy, "cv": cv,
                          "r": df["remeasure_of"].notna()}
                         ).sort_values(["g", "l", "f", "p", "d", "busy", "cv", "r"], kind="stable")
    keep = sorted(order.drop_duplicates("g", keep="first").index)
    out = df.loc[keep].copy()
    out["remeasured"] = out["remeasure_of"].notna() | out["row_key"].isin(df["remeasure_of"].dropna())
    out["row_key"] = group.loc[keep]
    return out.reset_index(drop=True)


def repeatability(df: pd.DataFrame) -> dict[str, Any]:
    """How well the dataset reproduces its own measurements: the configurations datagen measured
    twice (rows with ``remeasure_of``, both ok), of an unresolved frame (``read_dataset(resolve=False)``).
    Per reason and for all: pairs, median and p90 ``|log2|`` of one measurement over the other, and
    the mean and median APE of the measurement the readers drop against the one they keep (what a
    model that predicted the dropped one exactly would score). Reasons noise, load and drift are
    biased to the noisy end: a row is measured again because it was noisy, loaded or drifted. A
    sweep's rounds (reason ``round``, every ok sweep row) are not: each is compared with the first
    round (``|log2|``) and with the pool of all (APE)."""
    need = {"row_key", "remeasure_of", "status", "time_median_us"}
    if not need <= set(df.columns) or not df["remeasure_of"].notna().any():
        return {"pairs": 0}
    ok = df[(df["status"] == "ok") & df["time_median_us"].notna()]
    kept = resolve_remeasured(ok).set_index("row_key")["time_median_us"]
    first = ok[ok["remeasure_of"].isna()].set_index("row_key")["time_median_us"]
    again = ok[ok["remeasure_of"].notna() & ok["remeasure_of"].isin(first.index)]
    if again.empty:
        return {"pairs": 0}
    a = again["time_median_us"].to_numpy(dtype=float)
    b = first.loc[again["remeasure_of"]].to_numpy(dtype=float)
    k = kept.reindex(again["remeasure_of"]).to_numpy(dtype=float)
    dropped = np.where(np.isclose(k, a), b, a)
    reasons = again["remeasure_reason"].fillna("-").astype(str).to_numpy() if "remeasure_reason" in again else None

    def figs(sel: np.ndarray) -> dict[str, Any]:
        q = np.abs(np.log2(a[sel] / b[sel]))
        ape = np.abs(dropped[sel] / k[sel] - 1.0) * 100.0
        return {"pairs": int(sel.sum()), "median_abs_log2": float(np.median(q)),
                "p90_abs_log2": float(np.quantile(q, 0.9)), "mape": float(np.mean(ape)),
                "median_ape": float(np.median(ape))}

    good = np.isfinite(a) & np.isfinite(b) & np.isfinite(k) & (a > 0) & (b > 0) & (k > 0)
    if not good.any():
        return {"pairs": 0}
    out = figs(good)
    if reasons is not None:
        out["by_reason"] = {r: figs(good & (reasons == r)) for r in sorted(set(reasons[good]))}
    return out


def read_manifest(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The dataset's ``manifest.json``."""
    return load_manifest(Path(root))

"""Kernel Tuner cache files in (``kernelcast dataset import-kt``).

A Kernel Tuner cache is one JSON object: a header (``device_name``, ``kernel_name``,
``tune_params_keys``, ``tune_params``; from 1.0 on also ``problem_size`` and ``objective``; caches
written by the schema-versioned branch also ``schema_version`` "1.x.y") and ``cache``, a map from
the configuration's key (the tune parameter values joined by commas, in ``tune_params_keys`` order)
to one record: the tune parameter values, ``time`` (ms, the mean over the benchmark iterations),
``times`` (ms, each iteration, when Kernel Tuner kept them), Kernel Tuner's own bookkeeping
(``compile_time``, ``verification_time``, ``benchmark_time``, ``strategy_time``,
``framework_time`` in ms, ``timestamp``), and whatever its observers and metrics recorded:
``nvml_energy`` / ``ps_energy`` / ``pmt_energy`` (J per launch), ``nvml_power`` / ``ps_power`` (W),
``core_freq`` / ``mem_freq`` (MHz), ``temperature`` (C), user metrics (``GFLOP/s``...). A
configuration that failed holds an error name instead of a number (``InvalidConfig``,
``CompilationFailedConfig``, ``RuntimeFailedConfig``, ``ErrorConfig``; Kernel Tuner 0.4.x with error
classes and 1.x); earlier releases stored a failure as the sentinel ``time = 1e20``. A cache of an
interrupted run has no closing brackets (and maybe a trailing comma); it is read as Kernel Tuner
reads it.

The launch configuration of a record follows Kernel Tuner's rules: the work-group size is the
values of the block-size parameters (``block_size_x/y/z`` or the names given; a missing one is 1),
the number of work-groups per dimension is ``ceil(problem_size / grid_div)`` where ``grid_div``
defaults to the block-size parameter of the dimension, and the global size (OpenCL) is
work-groups x work-group size. :class:`GridRules` overrides the names, the divisors (expressions of
the tune parameters) and the problem size (for caches of a callable problem size). Every tune
parameter becomes a preprocessor macro of the kernel as Kernel Tuner defines them
(``-Dgrid_size_x=... -Dblock_size_x=... -D<param>=<value> -Dkernel_tuner=1``), so the static
analysis sees the same kernel Kernel Tuner built.

:func:`read_kt_cache` parses and checks a cache; :func:`kt_rows` maps it to dataset rows (nothing
is written: mapping every record first is what lets the command refuse bad input before writing);
:func:`import_kt` writes them with :class:`datagen.dataset.DatasetWriter`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.clang import KernelParam
from kernelcast.errors import InputError
from kernelcast.expr import ExprError, evaluate_int
from kernelcast.schema import SCHEMA_VERSION, ArgBinding, Kernel, kernel_id

log = logging.getLogger(__name__)

#: Kernel Tuner's error names and the kernelcast status each becomes
KT_ERRORS: dict[str, str] = {
    "InvalidConfig": "invalid_config",
    "CompilationFailedConfig": "compile_error",
    "RuntimeFailedConfig": "runtime_error",
    "ErrorConfig": "runtime_error",
}
#: early Kernel Tuner 0.4 releases stored a failed configuration as this time (ms)
KT_FAILURE_SENTINEL_MS = 1e20
DEFAULT_BLOCK_NAMES: tuple[str, str, str] = ("block_size_x", "block_size_y", "block_size_z")
#: Kernel Tuner's bookkeeping keys of a record (ms, or text): kept under ``kt_`` like any other column
BOOKKEEPING = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time",
               "timestamp")
#: energy observers, preferred first (an external meter before the on-board one)
ENERGY_KEYS: tuple[tuple[str, str], ...] = (("ps_energy", "powersensor"), ("pmt_energy", "pmt"),
                                            ("nvml_energy", "nvml"), ("energy", "kernel_tuner"))
POWER_KEYS: tuple[str, ...] = ("ps_power", "pmt_power", "nvml_power", "power")
#: the largest cache this reads (bytes) and the most records (a bound, not a limit of the format)
MAX_CACHE_BYTES = 1 << 30
MAX_RECORDS = 2_000_000
MAX_DIMS = 3
PASS = "kt"
SELECTION = "kt"


class KTCacheError(InputError, ValueError):
    """A file that is not a Kernel Tuner cache, or a cache kernelcast cannot map to launches."""


@dataclass
class KTCache:
    """A parsed Kernel Tuner cache."""

    path: str
    device_name: str
    kernel_name: str
    tune_params_keys: list[str]
    tune_params: dict[str, list[Any]]
    problem_size: Any                        # int, list of int/str, "callable" or None (0.4 caches)
    objective: Any
    records: list[tuple[str, dict[str, Any]]]
    format: str                              # "kt-0.4", "kt-1.x", "kt-schema-1.x.y"
    closed: bool = True
    schema_version: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "closed": self.closed, "device_name": self.device_name,
                "kernel_name": self.kernel_name, "tune_params_keys": self.tune_params_keys,
                "problem_size": self.problem_size, "objective": self.objective, "records": len(self.records)}


def _close_open_cache(text: str) -> tuple[str, bool]:
    """The cache text closed the way Kernel Tuner closes an interrupted cache, and whether it was closed."""
    s = text.strip()
    if not s or s[-3:] in ("}\n}", "}}}") or s.replace(" ", "").replace("\n", "").endswith("}}}"):
        return s, True
    if s.endswith(","):
        s = s[:-1]
    if s.rstrip().endswith('"cache": {') or s.rstrip().endswith('"cache":{'):
        return s + "}\n}", False
    return s + "}\n}", False


def read_kt_cache(path: str | os.PathLike[str]) -> KTCache:
    """Parse a Kernel Tuner cache (any format of 0.4-1.x, closed or left open by an interrupted run).
    :class:`KTCacheError` for a file that is not one."""
    p = Path(path)
    if not p.is_file():
        raise KTCacheError(f"no such cache file: {p}")
    size = p.stat().st_size
    if size > MAX_CACHE_BYTES:
        raise KTCacheError(f"{p}: {size} bytes; kernelcast reads caches of at most {MAX_CACHE_BYTES} bytes")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise KTCacheError(f"{p}: not a Kernel Tuner cache (not UTF-8 text)") from None
    except OSError as e:
        raise KTCacheError(f"cannot read {p}: {e.strerror}") from None
    closed = True
    try:
        data = json.loads(text)
    except ValueError:
        fixed, closed = _close_open_cache(text)
        try:
            data = json.loads(fixed)
        except ValueError as e:
            raise KTCacheError(f"{p}: not a Kernel Tuner cache (not JSON: {e})") from None
    if not isinstance(data, dict):
        raise KTCacheError(f"{p}: not a Kernel Tuner cache (a JSON {type(data).__name__}, not an object)")
    missing = [k for k in ("kernel_name", "tune_params_keys", "cache") if k not in data]
    if missing:
        raise KTCacheError(f"{p}: not a Kernel Tuner cache (no {', '.join(repr(m) for m in missing)})")
    keys = data["tune_params_keys"]
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise KTCacheError(f"{p}: 'tune_params_keys' must be a non-empty list of parameter names")
    if not isinstance(data["cache"], dict):
        raise KTCacheError(f"{p}: 'cache' must be an object of configurations")
    if len(data["cache"]) > MAX_RECORDS:
        raise KTCacheError(f"{p}: {len(data['cache'])} configurations; at most {MAX_RECORDS}")
    tune_params = data.get("tune_params") or {}
    if not isinstance(tune_params, dict):
        raise KTCacheError(f"{p}: 'tune_params' must be an object")
    records: list[tuple[str, dict[str, Any]]] = []
    for key, rec in data["cache"].items():
        if not isinstance(rec, dict):
            raise KTCacheError(f"{p}: configuration {key!r} is a {type(rec).__name__}, not an object")
        absent = [k for k in keys if k not in rec]
        if absent:
            raise KTCacheError(f"{p}: configuration {key!r} has no value for tune parameter {absent[0]!r}")
        records.append((str(key), rec))
    sv = data.get("schema_version")
    if sv is not None:
        if not (isinstance(sv, str) and re.fullmatch(r"1\.\d+\.\d+", sv)):
            raise KTCacheError(f"{p}: cache schema_version {sv!r}; kernelcast reads Kernel Tuner caches 1.x")
        fmt = f"kt-schema-{sv}"
    elif "problem_size" in data or "objective" in data:
        fmt = "kt-1.x"
    else:
        fmt = "kt-0.4"
    return KTCache(path=str(p), device_name=str(data.get("device_name") or "unknown"),
                   kernel_name=str(data["kernel_name"]), tune_params_keys=list(keys), tune_params=tune_params,
                   problem_size=data.get("problem_size"), objective=data.get("objective"), records=records,
                   format=fmt, closed=closed, schema_version=sv)


# ---------------------------------------------------------------------------------------------
# launch configuration


@dataclass
class GridRules:
    """How a record's parameters give a launch (Kernel Tuner's ``block_size_names``, ``grid_div_x/y/z``
    and ``problem_size``). ``None`` fields take Kernel Tuner's defaults."""

    block_size_names: list[str] | None = None
    grid_div: list[str | None] = field(default_factory=lambda: [None, None, None])
    problem_size: list[str] | None = None

    @classmethod
    def parse(cls, text: str | None) -> GridRules:
        """``block_size_names=bx,by;grid_div_x=bx*tile;problem_size=n,m`` (``;``-separated, each once)."""
        rules = cls()
        if not text:
            return rules
        seen: set[str] = set()
        for part in text.split(";"):
            part = part.strip()
            if not part:
                continue
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not value:
                raise KTCacheError(f"--grid {part!r}: expected NAME=VALUE (block_size_names, grid_div_x/y/z, "
                                   f"problem_size)")
            if name in seen:
                raise KTCacheError(f"--grid: {name} given twice")
            seen.add(name)
            if name == "block_size_names":
                names = [s.strip() for s in value.split(",")]
                if not 1 <= len(names) <= MAX_DIMS or not all(n.isidentifier() for n in names):
                    raise KTCacheError(f"--grid block_size_names={value!r}: expected 1-3 parameter names")
                rules.block_size_names = names
            elif name in ("grid_div_x", "grid_div_y", "grid_div_z"):
                _check_expr(value, f"--grid {name}")
                rules.grid_div["xyz".index(name[-1])] = value
            elif name == "problem_size":
                dims = [s.strip() for s in value.split(",")]
                if not 1 <= len(dims) <= MAX_DIMS:
                    raise KTCacheError(f"--grid problem_size={value!r}: expected 1-3 sizes")
                for d in dims:
                    _check_expr(d, "--grid problem_size")
                rules.problem_size = dims
            else:
                raise KTCacheError(f"--grid: unknown rule {name!r} (block_size_names, grid_div_x, grid_div_y, "
                                   f"grid_div_z, problem_size)")
        return rules


def _check_expr(text: str, what: str) -> None:
    from kernelcast.expr import parse_expr

    try:
        parse_expr(text)
    except ExprError as e:
        raise KTCacheError(f"{what}: {e}") from None


def _int_value(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _numeric_env(params: dict[str, Any]) -> dict[str, int | float]:
    env: dict[str, int | float] = {}
    for k, v in params.items():
        if isinstance(v, bool):
            env[k] = int(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            env[k] = v
    return env


@dataclass
class Launch:
    gsize: tuple[int, ...]
    lsize: tuple[int, ...]
    problem: tuple[int, ...]
    grid: tuple[int, ...]


def _eval_size(expr: Any, env: dict[str, int | float], what: str, cache: KTCache) -> int:
    if isinstance(expr, bool) or not isinstance(expr, (int, str)) and _int_value(expr) is None:
        raise KTCacheError(f"{cache.path}: {what} {expr!r} is not an integer or an expression")
    try:
        v = evaluate_int(expr if isinstance(expr, str) else int(expr), env)
    except ExprError as e:
        m = re.search(r"unknown name '([^']+)'", str(e))
        if m:
            raise KTCacheError(f"{cache.path}: {what} {expr!r} uses {m.group(1)!r}, which is not a tune parameter "
                               f"of the cache ({', '.join(cache.tune_params_keys)})") from None
        raise KTCacheError(f"{cache.path}: {what} {expr!r}: {e}") from None
    if v < 1:
        raise KTCacheError(f"{cache.path}: {what} {expr!r} = {v}, not a positive size")
    return v


def block_size_names(cache: KTCache, rules: GridRules) -> list[str]:
    """The block-size parameter of each dimension (Kernel Tuner's rule, case-insensitive defaults)."""
    if rules.block_size_names is not None:
        names = list(rules.block_size_names)
        absent = [n for n in names if n not in cache.tune_params_keys]
        if absent:
            raise KTCacheError(f"--grid block_size_names: {absent[0]!r} is not a tune parameter of the cache "
                               f"({', '.join(cache.tune_params_keys)})")
        return names + list(DEFAULT_BLOCK_NAMES[len(names):])
    lower = {k.lower(): k for k in cache.tune_params_keys}
    names = [lower.get(d, d) for d in DEFAULT_BLOCK_NAMES]
    if not any(n in cache.tune_params_keys for n in names):
        raise KTCacheError(f"{cache.path}: no block-size parameter (block_size_x/y/z) among the tune parameters "
                           f"{', '.join(cache.tune_params_keys)}: name the work-group dimensions with "
                           f"--grid 'block_size_names=NAME[,NAME[,NAME]]'")
    return names


def launch_of(cache: KTCache, params: dict[str, Any], names: list[str], rules: GridRules) -> Launch:
    """The launch Kernel Tuner made for one record (module docstring)."""
    env = _numeric_env(params)
    threads = []
    for n in names:
        if n not in params:
            threads.append(1)
            continue
        v = _int_value(params[n])
        if v is None or v < 1:
            raise KTCacheError(f"{cache.path}: block-size parameter {n!r} has the value {params[n]!r}, not a "
                               f"positive integer work-group size")
        threads.append(v)
    ps_raw: Any = rules.problem_size if rules.problem_size is not None else cache.problem_size
    if ps_raw is None:
        raise KTCacheError(f"{cache.path}: the cache records no problem_size (a Kernel Tuner 0.4 cache): give it "
                           f"with --grid 'problem_size=N[,M[,K]]'")
    if isinstance(ps_raw, str) and ps_raw == "callable":
        raise KTCacheError(f"{cache.path}: the problem size was a Python callable (not stored in the cache): give it "
                           f"with --grid 'problem_size=EXPR[,EXPR[,EXPR]]' in the tune parameters")
    seq = ps_raw if isinstance(ps_raw, list) else [ps_raw]
    if not 1 <= len(seq) <= MAX_DIMS:
        raise KTCacheError(f"{cache.path}: problem_size {ps_raw!r} has {len(seq)} dimensions (1-3)")
    problem = [_eval_size(s, env, f"problem_size[{i}]", cache) for i, s in enumerate(seq)]
    problem += [1] * (MAX_DIMS - len(problem))
    grid = []
    for i in range(MAX_DIMS):
        div = rules.grid_div[i]
        if div is None:
            d = threads[i] if names[i] in params else 1
        else:
            d = _eval_size(div, env, f"grid_div_{'xyz'[i]}", cache)
        grid.append(-(-problem[i] // d))
    dims = max(len(seq), max((i + 1 for i, n in enumerate(names) if n in params), default=1))
    gsize = tuple(grid[i] * threads[i] for i in range(dims))
    return Launch(gsize=gsize, lsize=tuple(threads[:dims]), problem=tuple(problem[:dims]), grid=tuple(grid[:dims]))


def kt_defines(params: dict[str, Any], keys: list[str], launch: Launch, names: list[str],
               used: set[str] | None = None) -> str:
    """The macros Kernel Tuner prepends to the kernel, as build options; with ``used`` (the
    identifiers of the kernel source) only those the source names: the others cannot change the
    kernel, and configurations that differ only in them share one static analysis."""
    d: dict[str, Any] = {}
    grid3 = list(launch.grid) + [1] * (MAX_DIMS - len(launch.grid))
    threads3 = list(launch.lsize) + [1] * (MAX_DIMS - len(launch.lsize))
    for i, g in enumerate(grid3):
        d[f"grid_size_{'xyz'[i]}"] = g
    for i, t in enumerate(threads3):
        d[names[i]] = t
    for k in keys:
        d[k] = params[k]
    d["kernel_tuner"] = 1
    out = []
    for k, v in d.items():
        if not k.isidentifier() or (used is not None and k not in used):
            continue
        if isinstance(v, bool):
            v = int(v)
        text = str(v)
        if re.search(r"\s", text):
            continue          # a value with spaces cannot be one -D option; the static analysis goes without it
        out.append(f"-D{k}={text}")
    return " ".join(out)


# ---------------------------------------------------------------------------------------------
# records -> rows


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def record_status(rec: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) of a record: an error name anywhere in it, the old failure sentinel, or ok."""
    for k, v in rec.items():
        if isinstance(v, str) and v in KT_ERRORS:
            return KT_ERRORS[v], f"Kernel Tuner: {v} ({k})"
    t = rec.get("time")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and t >= KT_FAILURE_SENTINEL_MS:
        return "runtime_error", f"old Kernel Tuner failure sentinel time={t:g} (compile or runtime failure)"
    if _number(t) is None:
        return "runtime_error", f"Kernel Tuner record without a numeric time ({t!r})"
    return "ok", ""


def _safe_column(name: str) -> str:
    return "kt_" + re.sub(r"[^0-9A-Za-z_]+", "_", name).strip("_")


@dataclass
class KTImport:
    """What :func:`kt_rows` made of a cache."""

    cache: KTCache
    kernel: Kernel | None
    rows: list[dict[str, Any]]
    statuses: dict[str, int]
    energy_columns: list[str]
    observer_columns: list[str]

    def summary(self) -> dict[str, Any]:
        return {**self.cache.summary(), "kernel_id": self.rows[0]["kernel_id"] if self.rows else None,
                "kernel_source": self.kernel.origin if self.kernel else None, "rows": len(self.rows),
                "rows_by_status": self.statuses, "energy_columns": self.energy_columns,
                "observer_columns": self.observer_columns,
                "rows_with_energy": sum(1 for r in self.rows if r.get("energy_j") is not None)}


def kt_rows(cache: KTCache, *, kernel: Kernel | None = None, params: list[KernelParam] | None = None,
            arg_specs: list[ArgBinding] | None = None, rules: GridRules | None = None,
            kernel_name: str | None = None) -> KTImport:
    """Dataset rows of every record of ``cache`` (nothing written). With ``kernel`` (and its
    ``params``) the rows carry its id and bound arguments (``arg_specs`` first, then LLMPerf's simple
    selection over the problem size); without it they are keyed by the cache's kernel name."""
    from kernelcast.datagen.args import UnsupportedArgument, complete_args
    from kernelcast.datagen.dataset import row_key

    rules = rules or GridRules()
    names = block_size_names(cache, rules)
    name = kernel.name if kernel is not None else (kernel_name or cache.kernel_name)
    kid = kernel.id if kernel is not None else kernel_id(f"// Kernel Tuner cache of {name}\n", name)
    device = f"kt:{cache.device_name}"
    keys = cache.tune_params_keys
    launches = [launch_of(cache, rec, names, rules) for _, rec in cache.records]   # every record maps, or error
    used = set(re.findall(r"[A-Za-z_]\w*", kernel.source)) if kernel is not None else None
    energy_cols: set[str] = set()
    observer_cols: set[str] = set()
    rows: list[dict[str, Any]] = []
    statuses: dict[str, int] = {}
    now = time.time()
    for (ckey, rec), ln in zip(cache.records, launches):
        status, reason = record_status(rec)
        statuses[status] = statuses.get(status, 0) + 1
        args: list[dict[str, Any]] = []
        if kernel is not None and params is not None:
            try:
                bound, _ = complete_args(params, list(arg_specs or []), ln.problem, ln.lsize)
            except UnsupportedArgument as e:
                raise KTCacheError(f"{e}; give it with --arg") from None
            args = [vars(b).copy() for b in bound]
        times_ms = rec.get("times")
        times_us: list[float] | None = None
        if isinstance(times_ms, list) and times_ms and all(_number(x) is not None for x in times_ms):
            times_us = [float(x) * 1e3 for x in times_ms]
        t_ms = _number(rec.get("time")) if status == "ok" else None
        stats: dict[str, Any] = dict.fromkeys(("repeats", "time_median_us", "time_min_us", "time_mean_us",
                                               "time_q1_us", "time_q3_us", "time_iqr_us", "time_cv"))
        if status == "ok" and t_ms is not None:
            stats["time_mean_us"] = t_ms * 1e3
            if times_us:
                t = np.asarray(times_us)
                q1, med, q3 = (float(x) for x in np.percentile(t, [25, 50, 75]))
                stats.update(repeats=len(t), time_median_us=med, time_min_us=float(t.min()), time_q1_us=q1,
                             time_q3_us=q3, time_iqr_us=q3 - q1,
                             time_cv=float(t.std(ddof=1) / t.mean()) if len(t) > 1 and t.mean() > 0 else 0.0)
            else:
                stats["time_median_us"] = t_ms * 1e3
        energy = power = None
        meter = "none"
        if status == "ok":
            for k, m in ENERGY_KEYS:
                v = _number(rec.get(k))
                if v is not None:
                    energy, meter = v, m
                    energy_cols.add(k)
                    break
            for k in POWER_KEYS:
                v = _number(rec.get(k))
                if v is not None:
                    power = v
                    break
            if power is None and energy is not None and t_ms:
                power = energy / (t_ms * 1e-3)
        state: dict[str, Any] = {}
        for k, dst in (("core_freq", "core_freq_mhz"), ("mem_freq", "mem_freq_mhz"), ("temperature", "temperature_c")):
            v = _number(rec.get(k))
            if v is not None:
                state[dst] = v
        cap = _number(rec.get("nvml_pwr_limit"))
        build_options = kt_defines(rec, keys, ln, names, used)
        row: dict[str, Any] = {
            # the record's identity (not the arguments kernelcast bound): a rerun with other --arg adds nothing
            "row_key": row_key(kid, ln.gsize, ln.lsize, [], selection=f"kt:{cache.device_name}:{ln.problem}:{ckey}"),
            "kernel_id": kid, "kernel_name": name, "kernel_origin": f"kt:{Path(cache.path).name}",
            "build_options": build_options, "dims": len(ln.gsize), "selection": SELECTION, "pass": PASS,
            "regime": None, "n_wg": int(np.prod(ln.grid)), "gsize": list(ln.gsize), "lsize": list(ln.lsize),
            "global_items": int(np.prod(ln.gsize)), "local_items": int(np.prod(ln.lsize)), "args": args,
            "status": status, "reason": reason, **stats, "times_us": times_us if status == "ok" else None,
            "energy_j": energy, "dynamic_energy_j": None, "avg_power_w": power, "idle_power_w": None,
            "meter": meter, "meter_method": "kernel_tuner" if energy is not None else "none", "meter_samples": 0,
            "meter_window_s": None, "device": device, "device_state": state, "outputs": {}, "compile_log": "",
            "build_s": (_number(rec.get("compile_time")) or 0.0) * 1e-3 if _number(rec.get("compile_time")) else None,
            "wall_s": None, "harness_version": f"kernel_tuner:{cache.format}", "schema_version": SCHEMA_VERSION,
            "seed": None, "measured_at": now, "power_cap_w": cap if cap is not None else float("nan"),
            "problem_id": "kt:" + "x".join(map(str, ln.problem)), "kt_key": ckey,
            "kt_device_name": cache.device_name,
        }
        for k in keys:
            v = rec[k]
            row[f"tp_{k}"] = v if isinstance(v, (int, float, str, bool)) or v is None else json.dumps(v)
        for k, v in rec.items():
            if k in keys or k in ("time", "times"):
                continue
            col = _safe_column(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[col] = float(v)
                if k not in BOOKKEEPING:
                    observer_cols.add(k)
            elif isinstance(v, str):
                row[col] = v
            elif isinstance(v, list) and all(_number(x) is not None for x in v):
                row[col] = json.dumps([float(x) for x in v])
                observer_cols.add(k)
        rows.append(row)
    return KTImport(cache, kernel, rows, statuses, sorted(energy_cols), sorted(observer_cols))


def kt_manifest(cache: KTCache, imp: KTImport) -> dict[str, Any]:
    """The manifest of a dataset of imported rows."""
    import kernelcast

    return {
        "kind": "kernelcast-dataset",
        "schema_version": SCHEMA_VERSION,
        "kernelcast_version": kernelcast.__version__,
        "device": {"name": cache.device_name, "source": "kernel_tuner"},
        "device_identity": f"kt:{cache.device_name}",
        "seed": None,
        "args_selection": SELECTION,
        "corpus": f"kernel_tuner:{cache.path}",
        "imported": [imp.summary()],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def import_kt(imp: KTImport, out: str | os.PathLike[str]) -> tuple[int, int]:
    """Write the rows of ``imp`` into the dataset ``out`` (created, or appended to: a row already
    there is skipped). Returns (rows appended, rows in the dataset)."""
    from kernelcast.datagen.dataset import DatasetWriter
    from kernelcast.datagen.generate import write_kernels

    manifest = kt_manifest(imp.cache, imp)
    with DatasetWriter(out, manifest) as w:
        for r in imp.rows:
            w.append(r)
        prev = [x for x in w.manifest.get("imported", []) if x.get("path") != imp.cache.path
                or x.get("kernel_id") != imp.summary()["kernel_id"]]
        w.update_manifest(imported=[*prev, imp.summary()] if w.manifest.get("resumed") else [imp.summary()])
        if imp.kernel is not None:
            write_kernels(Path(out), [imp.kernel])
        appended, total = w.appended, len(w)
    return appended, total


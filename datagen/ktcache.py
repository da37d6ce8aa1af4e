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

:func:`read_kt_cache` parses and checks a cache (plain or gzip, closed or cut short) or a T4 results
file; :func:`load_spec` reads a benchmark spec (kernel, include directories, build options, launch
rules, argument sizes, GPU names: docs/kernel-tuner.md); :func:`plan_import` resolves the kernel
through the front end once (:func:`frontend_kernel`, the one call into it) and maps every record
with :func:`kt_rows` (nothing is written: mapping every record first is what lets the command refuse
bad input before writing); :func:`import_kt` writes the rows with
:class:`datagen.dataset.DatasetWriter`; :func:`rows_equal_cache` checks a dataset against its cache.
Each row names the static analysis it needs (``analysis_key``/``analysis_options``); the analyses
themselves run in :mod:`models.static.batch`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.clang import KernelParam
from kernelcast.errors import InputError, UsageError
from kernelcast.expr import ExprError, evaluate_int
from kernelcast.schema import SCHEMA_VERSION, ArgBinding, Kernel, kernel_id

log = logging.getLogger(__name__)

#: Kernel Tuner's error names and the kernelcast status each becomes
KT_ERRORS: dict[str, str] = {
    "InvalidConfig": "invalid_config",
    "CompilationFailedConfig": "compile_error",
    "RuntimeFailedConfig": "runtime_error",
    "ErrorConfig": "runtime_error",
    "InvalidOutputConfig": "invalid_output",
}
#: early Kernel Tuner 0.4 releases stored a failed configuration as this time (ms)
KT_FAILURE_SENTINEL_MS = 1e20
DEFAULT_BLOCK_NAMES: tuple[str, str, str] = ("block_size_x", "block_size_y", "block_size_z")
#: Kernel Tuner's bookkeeping keys of a record (ms, or text): kept under ``kt_`` like any other column
BOOKKEEPING = ("compile_time", "verification_time", "benchmark_time", "strategy_time", "framework_time",
               "timestamp")
#: energy observers, preferred first (an external meter before the on-board one)
ENERGY_KEYS: tuple[tuple[str, str], ...] = (("ps_energy", "powersensor"), ("pmt_energy", "pmt"),
                                            ("nvml_energy", "nvml"), ("tegra_energy", "tegra"),
                                            ("GR_energy", "nvml_gr_model"), ("energy", "kernel_tuner"))
#: power observers, preferred first; where a record has a power but no energy, the energy is the
#: power times the record's mean time (``meter_method`` ``kernel_tuner:<power key>*time``)
POWER_KEYS: tuple[tuple[str, str], ...] = (("ps_power", "powersensor"), ("pmt_power", "pmt"),
                                           ("nvml_power", "nvml"), ("tegra_power", "tegra"), ("power", "kernel_tuner"))
#: Kernel Tuner's tune parameters that set the device, not the kernel: the graphics and memory
#: clocks (MHz) and the power limit (W) applied by its NVML observer before each configuration
DEVICE_TUNE_PARAMS: tuple[str, ...] = ("nvml_gr_clock", "nvml_mem_clock", "nvml_pwr_limit", "tegra_gr_clock")
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
    stated_device_name: str = ""             # the device name as the file states it ("" when it states none)
    kernel_tuner_version: str | None = None

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
    return s + "}\n}", False


def _drop_partial_record(text: str) -> str | None:
    """The text up to the last complete record line (Kernel Tuner writes one record per line), or
    None when there is none: a copy cut in the middle of a record keeps the records before it."""
    s = text.rstrip()
    cut = s.rfind("\n")
    while cut > 0:
        head = s[:cut].rstrip()
        if head.endswith(("},", "}")):
            return head
        cut = s.rfind("\n", 0, cut)
    return None


def _read_cache_text(p: Path) -> tuple[str, bool]:
    """The text of a cache file, gunzipped when it is gzip (by its magic bytes, whatever its name);
    a gzip stream cut short gives the text it holds. Returns (text, whether the gzip stream ended)."""
    size = p.stat().st_size
    if size > MAX_CACHE_BYTES:
        raise KTCacheError(f"{p}: {size} bytes; kernelcast reads caches of at most {MAX_CACHE_BYTES} bytes")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise KTCacheError(f"cannot read {p}: {e.strerror}") from None
    complete = True
    if raw[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(wbits=31)
        try:
            data = d.decompress(raw, MAX_CACHE_BYTES + 1)
        except zlib.error as e:
            raise KTCacheError(f"{p}: a damaged gzip file ({e})") from None
        if len(data) > MAX_CACHE_BYTES:
            raise KTCacheError(f"{p}: more than {MAX_CACHE_BYTES} bytes uncompressed")
        complete = d.eof
        raw = data
    try:
        return raw.decode("utf-8"), complete
    except UnicodeDecodeError:
        raise KTCacheError(f"{p}: not a Kernel Tuner cache (not UTF-8 text)") from None


def _load_json(p: Path, text: str) -> tuple[Any, bool]:
    """The JSON of a cache, closed as Kernel Tuner closes an interrupted one; (data, closed)."""
    try:
        return json.loads(text), True
    except ValueError as first:
        err = first
    fixed, _ = _close_open_cache(text)
    try:
        return json.loads(fixed), False
    except ValueError as e:
        err = e
    head = _drop_partial_record(text)
    if head is not None and '"cache"' in head:
        try:
            return json.loads(_close_open_cache(head)[0]), False
        except ValueError:
            pass
    raise KTCacheError(f"{p}: not a Kernel Tuner cache (not JSON: {err})")


def read_kt_cache(path: str | os.PathLike[str], *, device_name: str | None = None, kernel_name: str | None = None,
                  problem_size: Any = None) -> KTCache:
    """Parse a Kernel Tuner cache (any format of 0.4-1.x, closed or left open by an interrupted run,
    plain or gzip) or a T4 results file. :class:`KTCacheError` for a file that is neither.

    ``device_name``, ``kernel_name`` and ``problem_size`` fill what the file does not record (a T4
    file records none of them; an AMD cache may hold an empty ``device_name``)."""
    p = Path(path)
    if not p.is_file():
        raise KTCacheError(f"no such cache file: {p}")
    text, gz_complete = _read_cache_text(p)
    data, closed = _load_json(p, text)
    closed = closed and gz_complete
    if not isinstance(data, dict):
        raise KTCacheError(f"{p}: not a Kernel Tuner cache (a JSON {type(data).__name__}, not an object)")
    if "results" in data and "cache" not in data:
        return _t4_cache(p, data, device_name=device_name, kernel_name=kernel_name, problem_size=problem_size)
    missing = [k for k in ("kernel_name", "tune_params_keys", "cache") if k not in data]
    if missing:
        raise KTCacheError(f"{p}: not a Kernel Tuner cache or T4 file (no {', '.join(repr(m) for m in missing)})")
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
    stated = str(data.get("device_name") or "")
    ps = data.get("problem_size") if problem_size is None else problem_size
    return KTCache(path=str(p), device_name=stated or device_name or "unknown",
                   kernel_name=kernel_name or str(data["kernel_name"]), tune_params_keys=list(keys),
                   tune_params=tune_params, problem_size=ps, objective=data.get("objective"), records=records,
                   format=fmt, closed=closed, schema_version=sv, stated_device_name=stated,
                   kernel_tuner_version=_kt_version(data))


def _kt_version(data: dict[str, Any]) -> str | None:
    for k in ("kernel_tuner_version", "kernel_tuner"):
        v = data.get(k)
        if isinstance(v, str) and v:
            return v
    return None


#: T4 ``invalidity`` values and the Kernel Tuner error name each stands for (``correctness``: a
#: result that failed verification, which Kernel Tuner itself does not store)
T4_INVALIDITY: dict[str, str | None] = {"correct": None, "compile": "CompilationFailedConfig",
                                        "runtime": "RuntimeFailedConfig", "timeout": "RuntimeFailedConfig",
                                        "constraints": "InvalidConfig", "correctness": "InvalidOutputConfig"}
#: T4 ``times`` entries and the cache keys Kernel Tuner wrote them from (ms)
T4_TIMES = {"compilation": "compile_time", "compilation_time": "compile_time", "benchmark": "benchmark_time",
            "framework": "framework_time", "search_algorithm": "strategy_time", "validation": "verification_time"}


def _t4_cache(p: Path, data: dict[str, Any], *, device_name: str | None, kernel_name: str | None,
              problem_size: Any) -> KTCache:
    """A T4 results file (Kernel Tuner's ``store_output_file``; schema T4 1.0.0) as a cache: one
    record per result with the keys Kernel Tuner's cache would hold."""
    results = data["results"]
    if not isinstance(results, list):
        raise KTCacheError(f"{p}: T4 'results' must be a list")
    sv = data.get("schema_version")
    if sv is not None and not (isinstance(sv, str) and re.fullmatch(r"1\.\d+\.\d+", sv)):
        raise KTCacheError(f"{p}: T4 schema_version {sv!r}; kernelcast reads T4 1.x")
    if len(results) > MAX_RECORDS:
        raise KTCacheError(f"{p}: {len(results)} results; at most {MAX_RECORDS}")
    keys: list[str] | None = None
    records: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, res in enumerate(results):
        if not isinstance(res, dict):
            raise KTCacheError(f"{p}: T4 result {i} is a {type(res).__name__}, not an object")
        miss = [k for k in ("configuration", "times", "invalidity") if k not in res]
        if miss:
            raise KTCacheError(f"{p}: T4 result {i} has no {miss[0]!r}")
        conf, times = res["configuration"], res["times"]
        if not isinstance(conf, dict) or not conf or not isinstance(times, dict):
            raise KTCacheError(f"{p}: T4 result {i}: 'configuration' and 'times' must be objects")
        if keys is None:
            keys = list(conf)
        if list(conf) != keys:
            raise KTCacheError(f"{p}: T4 result {i} has parameters {list(conf)}, the first has {keys}")
        inv = res["invalidity"]
        if inv not in T4_INVALIDITY:
            raise KTCacheError(f"{p}: T4 result {i}: invalidity {inv!r} is not one of {', '.join(T4_INVALIDITY)}")
        rec: dict[str, Any] = dict(conf)
        meas = res.get("measurements") or []
        if not isinstance(meas, list):
            raise KTCacheError(f"{p}: T4 result {i}: 'measurements' must be a list")
        for m in meas:
            if isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"] not in conf:
                rec[m["name"]] = m.get("value")
        runtimes = times.get("runtimes")
        if isinstance(runtimes, list) and runtimes:
            rec["times"] = runtimes
        for k, dst in T4_TIMES.items():
            if k in times:
                rec[dst] = times[k]
        if "timestamp" in res:
            rec["timestamp"] = res["timestamp"]
        err = T4_INVALIDITY[inv]
        if err is not None:
            rec["time"] = err
        elif _number(rec.get("time")) is None and isinstance(runtimes, list) and runtimes \
                and all(_number(x) is not None for x in runtimes):
            rec["time"] = float(np.mean(runtimes))
        key = ",".join(str(conf[k]) for k in keys)
        if key in seen:
            continue                      # Kernel Tuner keeps one record per configuration
        seen.add(key)
        records.append((key, rec))
    if keys is None:
        raise KTCacheError(f"{p}: the T4 file holds no result")
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    return KTCache(path=str(p), device_name=device_name or "unknown", kernel_name=kernel_name or "unknown",
                   tune_params_keys=keys, tune_params={}, problem_size=problem_size,
                   objective=(results[0].get("objectives") or [None])[0] if results else None, records=records,
                   format=f"t4-{sv or '1.0.0'}", closed=True, schema_version=sv, stated_device_name="",
                   kernel_tuner_version=_kt_version(meta))


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
# benchmark specs

SPEC_VERSION = 1
LANGUAGES = ("cuda", "hip", "opencl")
_SPEC_KEYS = {"spec_version", "benchmark", "source", "kernel", "launch", "constants", "args", "gpus", "caches",
              "kernel_tuner_version", "notes", "where", "kept_aside"}
_KERNEL_KEYS = {"file", "name", "language", "include_dirs", "build_options", "defines"}
_LAUNCH_KEYS = {"problem_size", "block_size_names", "grid_div_x", "grid_div_y", "grid_div_z"}
_SOURCE_KEYS = {"repository", "commit", "url"}
_GPU_KEYS = {"device_name", "profile"}
_ARG_KEYS = {"count", "value", "dtype"}


@dataclass
class GpuEntry:
    """One GPU of a spec: the name to use where a cache states none, and the device profile."""

    device_name: str | None = None
    profile: str | None = None


@dataclass
class ArgRule:
    """One kernel argument of a spec: a buffer's element count or a scalar's value, as an
    expression of the problem size (``problem_size_x/y/z``), the spec's constants and the tune
    parameters; ``dtype`` overrides the element type the kernel's signature states."""

    name: str
    count: str | None = None
    value: str | None = None
    dtype: str | None = None


@dataclass
class KTSpec:
    """A per-benchmark import spec (docs/kernel-tuner.md): which kernel a benchmark's caches were
    measured on, how Kernel Tuner launched it, and how to name its GPUs."""

    path: str
    benchmark: str
    kernel_file: str
    kernel_name: str | None = None
    language: str = "cuda"
    include_dirs: list[str] = field(default_factory=list)
    build_options: str = ""
    defines: dict[str, str] = field(default_factory=dict)
    constants: dict[str, int | float] = field(default_factory=dict)
    rules: GridRules = field(default_factory=GridRules)
    args: list[ArgRule] = field(default_factory=list)
    gpus: dict[str, GpuEntry] = field(default_factory=dict)
    caches: list[str] = field(default_factory=list)
    repository: str | None = None
    commit: str | None = None
    url: str | None = None
    kernel_tuner_version: str | None = None
    #: Kernel Tuner restriction expressions: only the records that satisfy every one are imported
    where: list[str] = field(default_factory=list)
    #: why the benchmark's caches are check data (``bench.gpu_model`` fits and evaluates none of them)
    kept_aside: str | None = None

    def gpu_key(self, cache_path: str) -> str | None:
        """The ``gpus`` key a cache's file name names: its stem (``A100.json.gz``, ``A100_T4.json.gz``
        -> ``A100``), else the longest key the stem ends with after an underscore
        (``convolution_MI50.json`` -> ``MI50``)."""
        stem = cache_stem(cache_path)
        if stem in self.gpus:
            return stem
        ends = [k for k in self.gpus if stem.endswith("_" + k)]
        return max(ends, key=len) if ends else None

    def pair_name(self, cache_path: str) -> str:
        """The directory a cache's dataset is written to under ``<benchmark>/``: its GPU key, else
        its stem."""
        return self.gpu_key(cache_path) or cache_stem(cache_path)

    def gpu_of(self, cache_path: str, stated: str) -> tuple[str | None, GpuEntry]:
        """The spec's key and entry of a cache: by its file name (:meth:`gpu_key`), else by the
        device name the cache states."""
        key = self.gpu_key(cache_path)
        if key is None and stated and stated in self.gpus:
            key = stated
        return (key, self.gpus[key]) if key is not None else (None, GpuEntry())

    def resolve(self, rel: str, root: Path) -> Path:
        q = Path(rel)
        return q if q.is_absolute() else root / q


def cache_stem(path: str) -> str:
    """``dir/A100_T4.json.gz`` -> ``A100``."""
    name = Path(path).name
    for suf in (".gz", ".json"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    return name[:-3] if name.endswith("_T4") else name


def _spec_error(path: str, msg: str) -> KTCacheError:
    return KTCacheError(f"spec {path}: {msg}")


def _str_list(v: Any, path: str, what: str) -> list[str]:
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise _spec_error(path, f"{what} must be a string or a list of strings")
    return list(v)


def _expr_text(v: Any, path: str, what: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)) or (isinstance(v, str) and not v.strip()):
        raise _spec_error(path, f"{what} must be a number or an expression, not {v!r}")
    text = str(v)
    _check_expr(text, f"spec {path}: {what}")
    return text


def _only(d: dict[str, Any], allowed: set[str], path: str, what: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise _spec_error(path, f"unknown key {extra[0]!r} in {what} (allowed: {', '.join(sorted(allowed))})")


def _obj(v: Any, path: str, what: str) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _spec_error(path, f"{what} must be an object")
    return v


def load_spec(path: str | os.PathLike[str]) -> KTSpec:
    """Read and validate a spec (JSON, or YAML for ``.yaml``/``.yml``); :class:`KTCacheError` naming
    the first thing wrong."""
    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise KTCacheError(f"no such spec file: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _spec_error(where, f"cannot read it ({e})") from None
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as e:  # noqa: BLE001 - json and yaml raise their own error classes
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _spec_error(where, f"not valid {'YAML' if p.suffix.lower() in ('.yaml', '.yml') else 'JSON'} "
                                 f"({first})") from None
    if not isinstance(data, dict):
        raise _spec_error(where, "must be an object")
    _only(data, _SPEC_KEYS, where, "the spec")
    if data.get("spec_version", SPEC_VERSION) != SPEC_VERSION:
        raise _spec_error(where, f"spec_version {data.get('spec_version')!r}; this kernelcast reads {SPEC_VERSION}")
    bench = data.get("benchmark")
    if not isinstance(bench, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", bench):
        raise _spec_error(where, "'benchmark' must be a name of letters, digits, '_', '.', '-'")
    k = _obj(data.get("kernel"), where, "'kernel'")
    _only(k, _KERNEL_KEYS, where, "'kernel'")
    if not isinstance(k.get("file"), str) or not k["file"]:
        raise _spec_error(where, "'kernel.file' (the kernel's source file) is required")
    lang = k.get("language", "cuda")
    if lang not in LANGUAGES:
        raise _spec_error(where, f"'kernel.language' {lang!r} is not one of {', '.join(LANGUAGES)}")
    name = k.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise _spec_error(where, "'kernel.name' must be a kernel name")
    bo = k.get("build_options", "")
    if isinstance(bo, list):
        bo = " ".join(_str_list(bo, where, "'kernel.build_options'"))
    if not isinstance(bo, str):
        raise _spec_error(where, "'kernel.build_options' must be a string or a list of strings")
    defines = {}
    for dn, dv in _obj(k.get("defines"), where, "'kernel.defines'").items():
        if not dn.isidentifier():
            raise _spec_error(where, f"kernel.defines: {dn!r} is not a macro name")
        defines[dn] = _expr_text(dv, where, f"kernel.defines.{dn}")
    constants: dict[str, int | float] = {}
    for cn, cv in _obj(data.get("constants"), where, "'constants'").items():
        if not cn.isidentifier() or isinstance(cv, bool) or not isinstance(cv, (int, float)):
            raise _spec_error(where, f"constants: {cn!r} must be a name with a number")
        constants[cn] = cv
    lo = _obj(data.get("launch"), where, "'launch'")
    _only(lo, _LAUNCH_KEYS, where, "'launch'")
    rules = GridRules()
    if "block_size_names" in lo:
        names = _str_list(lo["block_size_names"], where, "launch.block_size_names")
        if not 1 <= len(names) <= MAX_DIMS or not all(n.isidentifier() for n in names):
            raise _spec_error(where, "launch.block_size_names: 1-3 parameter names")
        rules.block_size_names = names
    for i, axis in enumerate("xyz"):
        v = lo.get(f"grid_div_{axis}")
        if v is None:
            continue
        parts = [v] if isinstance(v, (int, float)) and not isinstance(v, bool) else _str_list(v, where,
                                                                                             f"launch.grid_div_{axis}")
        rules.grid_div[i] = "*".join(f"({_expr_text(x, where, f'launch.grid_div_{axis}')})" for x in parts)
    if "problem_size" in lo:
        ps = lo["problem_size"]
        seq = ps if isinstance(ps, list) else [ps]
        if not 1 <= len(seq) <= MAX_DIMS:
            raise _spec_error(where, "launch.problem_size: 1-3 sizes")
        rules.problem_size = [_expr_text(x, where, "launch.problem_size") for x in seq]
    args = []
    for an, av in _obj(data.get("args"), where, "'args'").items():
        if not an.isidentifier():
            raise _spec_error(where, f"args: {an!r} is not an argument name")
        if not isinstance(av, dict):
            av = {"count": av}
        _only(av, _ARG_KEYS, where, f"args.{an}")
        if ("count" in av) == ("value" in av):
            raise _spec_error(where, f"args.{an}: give a buffer's 'count' or a scalar's 'value'")
        dt = av.get("dtype")
        if dt is not None and (not isinstance(dt, str) or not dt):
            raise _spec_error(where, f"args.{an}.dtype must be a type name")
        args.append(ArgRule(an, count=_expr_text(av["count"], where, f"args.{an}.count") if "count" in av else None,
                            value=_expr_text(av["value"], where, f"args.{an}.value") if "value" in av else None,
                            dtype=dt))
    gpus = {}
    for gk, gv in _obj(data.get("gpus"), where, "'gpus'").items():
        gv = {"profile": gv} if isinstance(gv, str) else _obj(gv, where, f"gpus.{gk}")
        _only(gv, _GPU_KEYS, where, f"gpus.{gk}")
        for f_ in _GPU_KEYS:
            if f_ in gv and (not isinstance(gv[f_], str) or not gv[f_]):
                raise _spec_error(where, f"gpus.{gk}.{f_} must be a non-empty string")
        gpus[str(gk)] = GpuEntry(gv.get("device_name"), gv.get("profile"))
    src = _obj(data.get("source"), where, "'source'")
    _only(src, _SOURCE_KEYS, where, "'source'")
    for f_ in _SOURCE_KEYS:
        if f_ in src and (not isinstance(src[f_], str) or not src[f_]):
            raise _spec_error(where, f"source.{f_} must be a non-empty string")
    if "commit" in src and not re.fullmatch(r"[0-9a-f]{7,40}", src["commit"]):
        raise _spec_error(where, f"source.commit {src['commit']!r} is not a git commit hash")
    from kernelcast.restrictions import parse_restriction

    selection = _str_list(data.get("where", []), where, "'where'")
    for text in selection:
        try:
            parse_restriction(text)
        except UsageError as e:
            raise _spec_error(where, f"where: {e}") from None
    ktv = data.get("kernel_tuner_version")
    if ktv is not None and not isinstance(ktv, str):
        raise _spec_error(where, "'kernel_tuner_version' must be a string")
    aside = data.get("kept_aside")
    if aside is not None and (not isinstance(aside, str) or not aside.strip()):
        raise _spec_error(where, "'kept_aside' must be a non-empty string (why the caches are check data)")
    return KTSpec(path=where, benchmark=bench, kernel_file=k["file"], kernel_name=name, language=lang,
                  include_dirs=_str_list(k.get("include_dirs", []), where, "'kernel.include_dirs'"),
                  build_options=bo, defines=defines, constants=constants, rules=rules, args=args, gpus=gpus,
                  caches=_str_list(data.get("caches", []), where, "'caches'"), repository=src.get("repository"),
                  commit=src.get("commit"), url=src.get("url"), kernel_tuner_version=ktv, where=selection,
                  kept_aside=aside)


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
class Provenance:
    """Where imported rows come from, kept on every row (``src_*`` and ``gpu*`` columns)."""

    benchmark: str | None = None
    repository: str | None = None
    commit: str | None = None
    kernel_file: str | None = None
    cache_file: str | None = None
    gpu: str | None = None                    # the GPU's name: the cache's, else the spec's
    gpu_profile: str | None = None
    kernel_tuner_version: str | None = None


@dataclass
class KTImport:
    """What :func:`kt_rows` made of a cache."""

    cache: KTCache
    kernel: Kernel | None
    rows: list[dict[str, Any]]
    statuses: dict[str, int]
    energy_columns: list[str]
    observer_columns: list[str]
    unreferenced: list[str] = field(default_factory=list)
    analysis_groups: int = 0
    symbolic_launch: bool = False
    frontend_error: str | None = None
    where: list[str] = field(default_factory=list)    # the restrictions the records were selected by
    times_contradicted: int = 0                        # ok records whose iterations contradict their time
    excluded: int = 0                                  # records of the cache they left out

    def summary(self) -> dict[str, Any]:
        return {**self.cache.summary(), "kernel_id": self.rows[0]["kernel_id"] if self.rows else None,
                "kernel_source": self.kernel.origin if self.kernel else None, "rows": len(self.rows),
                "rows_by_status": self.statuses, "energy_columns": self.energy_columns,
                "observer_columns": self.observer_columns,
                "rows_with_energy": sum(1 for r in self.rows if r.get("energy_j") is not None),
                "unreferenced_tune_params": self.unreferenced, "analysis_groups": self.analysis_groups,
                "symbolic_launch": self.symbolic_launch, "frontend_error": self.frontend_error,
                "where": self.where, "records_excluded": self.excluded,
                "times_contradicted": self.times_contradicted,
                "gpu": self.rows[0].get("gpu") if self.rows else None,
                "benchmark": self.rows[0].get("benchmark") if self.rows else None}


def parse_timestamp(v: Any) -> float | None:
    """A record's ``timestamp`` (Kernel Tuner writes ``str(datetime.now(timezone.utc))``) as Unix seconds."""
    if not isinstance(v, str) or not v:
        return None
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


def _arg_env(ln: Launch, consts: dict[str, int | float], params: dict[str, Any]) -> dict[str, int | float]:
    env: dict[str, int | float] = dict(consts)
    env.update(_numeric_env(params))
    for i, axis in enumerate("xyz"):
        env[f"problem_size_{axis}"] = ln.problem[i] if i < len(ln.problem) else 1
    return env


def _spec_args(rules: list[ArgRule], params: list[KernelParam], env: dict[str, int | float],
               cache: KTCache) -> list[ArgBinding]:
    """The spec's argument rules evaluated for one record."""
    from kernelcast.expr import evaluate

    by_name = {p.name: p for p in params}
    out = []
    for r in rules:
        p = by_name[r.name]
        if r.count is not None:
            n = _eval_size(r.count, env, f"args.{r.name}.count", cache)
            kind = "local" if p.kind == "local" else "buffer"
            out.append(ArgBinding(name=r.name, kind=kind, dtype=r.dtype or p.dtype, count=n))
        else:
            try:
                v = evaluate(str(r.value), env)
            except ExprError as e:
                raise KTCacheError(f"{cache.path}: args.{r.name}.value: {e}") from None
            out.append(ArgBinding(name=r.name, kind="scalar", dtype=r.dtype or p.dtype,
                                  value=int(v) if float(v).is_integer() else float(v)))
    return out


def _define_values(defines: dict[str, str], env: dict[str, int | float], cache: KTCache) -> str:
    from kernelcast.expr import evaluate

    out = []
    for k, e in defines.items():
        try:
            v = evaluate(e, env)
        except ExprError as err:
            raise KTCacheError(f"{cache.path}: kernel.defines.{k}: {err}") from None
        out.append(f"-D{k}={int(v) if float(v).is_integer() else v}")
    return " ".join(out)


def analysis_key(source_digest: str, name: str, language: str, options: str) -> str:
    """The key of one static analysis: the text the preprocessor reads (the source and its local
    headers, as a digest), the kernel, the language and the macros/options, in a canonical order.
    Configurations whose macros give the same preprocessed text get the same key."""
    import hashlib

    opts = " ".join(sorted(t for t in options.split() if not t.startswith("-I")))
    return hashlib.sha256("\0".join((source_digest, name, language, opts)).encode()).hexdigest()[:32]


#: a record's ``time`` over the mean of its ``times`` within which the iterations are taken as its
#: measurement (Kernel Tuner's ``time`` is their mean; observers and reruns move it a little): outside,
#: the iterations are of something else, and the row's time statistics are the record's ``time``
TIMES_AGREE = (0.5, 2.0)


def select_records(cache: KTCache, where: Sequence[str], constants: Mapping[str, int | float] | None = None
                   ) -> tuple[KTCache, int]:
    """The cache with only the records that satisfy every ``where`` expression (Kernel Tuner's
    restriction syntax over the tune parameters and the spec's constants: ``"use_shmem == 1"``), and
    how many records it left out. :class:`KTCacheError` for an expression that is not one, names no
    parameter of the cache, or leaves nothing."""
    if not where:
        return cache, 0
    import pandas as pd

    from kernelcast.restrictions import restriction_mask

    params = pd.DataFrame([{**(constants or {}), **{k: rec.get(k) for k in cache.tune_params_keys}}
                           for _, rec in cache.records])
    try:
        mask = restriction_mask(params, list(where))
    except UsageError as e:
        raise KTCacheError(f"{cache.path}: {e}") from None
    if not mask.any():
        raise KTCacheError(f"{cache.path}: none of its {len(cache.records)} configurations satisfies "
                           f"{' and '.join(repr(w) for w in where)}")
    kept = [r for r, m in zip(cache.records, mask) if m]
    return replace(cache, records=kept), len(cache.records) - len(kept)


def kt_rows(cache: KTCache, *, kernel: Kernel | None = None, params: list[KernelParam] | None = None,
            arg_specs: list[ArgBinding] | None = None, rules: GridRules | None = None,
            kernel_name: str | None = None, spec: KTSpec | None = None, options: str = "",
            headers: dict[str, str] | None = None, provenance: Provenance | None = None,
            symbolic: Any = None, frontend_error: str | None = None) -> KTImport:
    """Dataset rows of every record of ``cache`` (nothing written). With ``kernel`` (and its
    ``params``) the rows carry its id and bound arguments (``arg_specs`` and the spec's argument
    rules first, then LLMPerf's simple selection over the problem size); without it they are keyed by
    the cache's kernel name.

    ``options`` (include directories, build options) go into every row's ``build_options`` after
    Kernel Tuner's macros; ``headers`` are the texts of the local headers the source includes (their
    identifiers count as the source's). ``symbolic(options) -> bool`` says whether the kernel still
    parses with the block and grid sizes as the launch's own (``blockDim.x``...): then configurations
    that differ only in the launch share one analysis (``analysis_options``/``analysis_key``)."""
    from kernelcast.datagen.args import UnsupportedArgument, complete_args
    from kernelcast.datagen.dataset import row_key

    spec_rules = spec.rules if spec is not None else None
    rules = rules or spec_rules or GridRules()
    consts = dict(spec.constants) if spec is not None else {}
    names = block_size_names(cache, rules)
    name = kernel.name if kernel is not None else (kernel_name or cache.kernel_name)
    kid = kernel.id if kernel is not None else kernel_id(f"// Kernel Tuner cache of {name}\n", name)
    device = f"kt:{cache.device_name}"
    keys = cache.tune_params_keys
    # every record maps, or error
    launches = [launch_of(cache, {**consts, **rec}, names, rules) for _, rec in cache.records]
    texts = [kernel.source, *(headers or {}).values()] if kernel is not None else []
    used = set(re.findall(r"[A-Za-z_]\w*", "\n".join(texts))) if kernel is not None else None
    unreferenced: list[str] = []
    if used is not None:
        for k in keys:
            vals = {json.dumps(rec.get(k), sort_keys=True) for _, rec in cache.records}
            if k not in used and k not in names and k not in DEVICE_TUNE_PARAMS and len(vals) > 1:
                unreferenced.append(k)
        if unreferenced:
            log.warning("%s: tune parameters %s vary in the cache but %s does not reference them: "
                        "configurations that differ only in them get the same kernel",
                        cache.path, ", ".join(unreferenced), kernel.origin or kernel.name)
    digest = ""
    if kernel is not None:
        import hashlib

        digest = hashlib.sha256("\0".join([kernel.source, json.dumps(sorted((headers or {}).items()))])
                                .encode()).hexdigest()
    if spec is not None and params is not None:
        pnames = {p.name for p in params}
        bad = [r.name for r in spec.args if r.name not in pnames]
        if bad:
            raise KTCacheError(f"spec {spec.path}: args.{bad[0]} is not an argument of {name} "
                               f"({', '.join(p.name for p in params)})")
    prov = provenance or Provenance()
    energy_cols: set[str] = set()
    contradicted = 0                  # records whose iterations contradict their time
    observer_cols: set[str] = set()
    rows: list[dict[str, Any]] = []
    statuses: dict[str, int] = {}
    sym_memo: dict[str, bool] = {}
    groups: set[str] = set()
    any_symbolic = False
    for (ckey, rec), ln in zip(cache.records, launches):
        status, reason = record_status(rec)
        statuses[status] = statuses.get(status, 0) + 1
        env = _arg_env(ln, consts, rec)
        args: list[dict[str, Any]] = []
        if kernel is not None and params is not None:
            given = list(arg_specs or [])
            have = {b.name for b in given}
            if spec is not None:
                given += [b for b in _spec_args(spec.args, params, env, cache) if b.name not in have]
            try:
                bound, _ = complete_args(params, given, ln.problem, ln.lsize)
            except UnsupportedArgument as e:
                raise KTCacheError(f"{e}; give it with --arg or in the spec's args") from None
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
            agree = bool(times_us) and \
                TIMES_AGREE[0] <= t_ms * 1e3 / max(float(np.mean(times_us)), 1e-30) <= TIMES_AGREE[1]
            if times_us and not agree:
                contradicted += 1         # the iterations stay in the row as written; the time decides
            if agree and times_us:
                t = np.asarray(times_us)
                q1, med, q3 = (float(x) for x in np.percentile(t, [25, 50, 75]))
                stats.update(repeats=len(t), time_median_us=med, time_min_us=float(t.min()), time_q1_us=q1,
                             time_q3_us=q3, time_iqr_us=q3 - q1,
                             time_cv=float(t.std(ddof=1) / t.mean()) if len(t) > 1 and t.mean() > 0 else 0.0)
            else:
                stats["time_median_us"] = t_ms * 1e3
        energy = power = None
        meter = "none"
        energy_key = None
        if status == "ok":
            for k, m in ENERGY_KEYS:
                v = _number(rec.get(k))
                if v is not None:
                    energy, meter, energy_key = v, m, k
                    energy_cols.add(k)
                    break
            power_key = None
            for k, m in POWER_KEYS:
                v = _number(rec.get(k))
                if v is not None:
                    power, power_key = v, (k, m)
                    break
            if power is None and energy is not None and t_ms:
                power = energy / (t_ms * 1e-3)
            if energy is None and power is not None and power_key is not None and t_ms:
                energy, meter, energy_key = power * t_ms * 1e-3, power_key[1], f"{power_key[0]}*time"
                energy_cols.add(power_key[0])
        state: dict[str, Any] = {}
        for k, dst in (("core_freq", "core_freq_mhz"), ("mem_freq", "mem_freq_mhz"), ("temperature", "temperature_c")):
            v = _number(rec.get(k))
            if v is not None:
                state[dst] = v
        cap = _number(rec.get("nvml_pwr_limit"))
        # the graphics clock the tuner set for the configuration (a clock axis); an observed clock
        # alone stays in device_state: the model's time is at the profile's clock unless one was set
        clock = _number(rec.get("nvml_gr_clock"))
        if clock is None:
            clock = _number(rec.get("tegra_gr_clock"))
        mem_clock = _number(rec.get("nvml_mem_clock"))
        kt_macros = kt_defines(rec, keys, ln, names, used)
        extra = _define_values(spec.defines, env, cache) if spec is not None and spec.defines else ""
        build_options = " ".join(x for x in (kt_macros, extra, options) if x)
        a_opts = build_options
        if kernel is not None and symbolic is not None:
            sym = symbolic_options(build_options, names, kernel.language)
            if sym not in sym_memo:
                sym_memo[sym] = bool(symbolic(sym))
            if sym_memo[sym]:
                a_opts = sym
                any_symbolic = True
        a_key = analysis_key(digest, name, kernel.language, a_opts) if kernel is not None else None
        if a_key:
            groups.add(a_key)
        ts = parse_timestamp(rec.get("timestamp"))
        row: dict[str, Any] = {
            # the record's identity (not the arguments kernelcast bound): a rerun with other --arg adds nothing
            "row_key": row_key(kid, ln.gsize, ln.lsize, [], selection=f"kt:{cache.device_name}:{ln.problem}:{ckey}"),
            "kernel_id": kid, "kernel_name": name, "kernel_origin": f"kt:{Path(cache.path).name}",
            "build_options": build_options, "dims": len(ln.gsize), "selection": SELECTION, "pass": PASS,
            "regime": None, "n_wg": int(np.prod(ln.grid)), "gsize": list(ln.gsize), "lsize": list(ln.lsize),
            "global_items": int(np.prod(ln.gsize)), "local_items": int(np.prod(ln.lsize)), "args": args,
            "status": status, "reason": reason, **stats, "times_us": times_us if status == "ok" else None,
            "energy_j": energy, "dynamic_energy_j": None, "avg_power_w": power, "idle_power_w": None,
            "meter": meter, "meter_method": f"kernel_tuner:{energy_key}" if energy_key else "none",
            "meter_samples": 0,
            "meter_window_s": None, "device": device, "device_state": state, "outputs": {}, "compile_log": "",
            "build_s": (_number(rec.get("compile_time")) or 0.0) * 1e-3 if _number(rec.get("compile_time")) else None,
            "wall_s": None, "harness_version": f"kernel_tuner:{cache.format}", "schema_version": SCHEMA_VERSION,
            "seed": None, "measured_at": ts, "power_cap_w": cap if cap is not None else float("nan"),
            "gr_clock_mhz": clock if clock is not None else float("nan"),
            "mem_clock_mhz": mem_clock if mem_clock is not None else float("nan"),
            "problem_id": "kt:" + "x".join(map(str, ln.problem)), "kt_key": ckey,
            "kt_device_name": cache.stated_device_name,
            # provenance and the grouping columns (GPU, benchmark)
            "gpu": prov.gpu or cache.device_name, "gpu_profile": prov.gpu_profile,
            "benchmark": prov.benchmark or name, "src_repository": prov.repository, "src_commit": prov.commit,
            "src_kernel_file": prov.kernel_file or (kernel.origin if kernel is not None else None),
            "src_cache_file": prov.cache_file or cache.path, "kt_format": cache.format,
            "kt_version": prov.kernel_tuner_version or cache.kernel_tuner_version,
            "analysis_options": a_opts, "analysis_key": a_key,
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
                if v in KT_ERRORS:
                    continue        # a failed record's error marker in an observer's place: the status says it
                row[col] = v
            elif isinstance(v, list) and all(_number(x) is not None for x in v):
                row[col] = json.dumps([float(x) for x in v])
                observer_cols.add(k)
        rows.append(row)
    if contradicted:
        log.warning("%s: %d configurations' iterations ('times') are not about their 'time' (their mean "
                    "differs by more than %gx): their time is taken as the measurement", cache.path,
                    contradicted, TIMES_AGREE[1])
    imp = KTImport(cache, kernel, rows, statuses, sorted(energy_cols), sorted(observer_cols), unreferenced,
                   len(groups), any_symbolic, frontend_error)
    imp.times_contradicted = contradicted
    return imp


#: what stands for a block-size / grid-size macro in a symbolic analysis, per language
_LAUNCH_SYMBOLS = {"cuda": ("blockDim.{a}", "gridDim.{a}"),
                   "opencl": ("get_local_size({i})", "get_num_groups({i})")}


def symbolic_options(build_options: str, names: list[str], language: str) -> str:
    """``build_options`` with the block-size and grid-size macros as the launch's own values
    (``-Dblock_size_x=blockDim.x``, ``-Dgrid_size_x=gridDim.x``; OpenCL: ``get_local_size(0)``...).
    Kernel Tuner defines them equal to the launch, so the kernel computes the same; its static
    analysis then depends on the launch only through the launch, which the model binds per row."""
    block, grid = _LAUNCH_SYMBOLS["opencl" if language == "opencl" else "cuda"]
    subst = {}
    for i, a in enumerate("xyz"):
        subst[names[i]] = block.format(a=a, i=i)
        subst[f"grid_size_{a}"] = grid.format(a=a, i=i)
    out = []
    for t in build_options.split():
        m = re.fullmatch(r"-D([A-Za-z_]\w*)=(\S+)", t)
        if m and m.group(1) in subst:
            out.append(f"-D{m.group(1)}={subst[m.group(1)]}")
        else:
            out.append(t)
    return " ".join(out)


# ---------------------------------------------------------------------------------------------
# the kernel: the front end, include directories and build options


_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
MAX_HEADERS = 64


def local_headers(source: str, kernel_dir: Path, include_dirs: list[Path]) -> dict[str, str]:
    """The texts of the ``#include "..."`` headers the source reads (recursively), found the way nvcc
    finds them: the including file's directory, then the ``-I`` directories; by resolved path."""
    out: dict[str, str] = {}
    todo = [(source, kernel_dir)]
    while todo and len(out) < MAX_HEADERS:
        text, here = todo.pop()
        for inc in _INCLUDE_RE.findall(text):
            for d in (here, *include_dirs):
                q = (d / inc).resolve()
                if q.is_file():
                    key = str(q)
                    if key not in out:
                        out[key] = q.read_text(encoding="utf-8", errors="replace")
                        todo.append((out[key], q.parent))
                    break
    return out


def build_option_string(include_dirs: list[Path], defines: list[str], build_options: str) -> str:
    """``-I`` directories, ``-D`` macros (``NAME`` or ``NAME=VALUE``) and free build options as one string."""
    parts = [f"-I{d}" for d in include_dirs]
    for d in defines:
        name = d.partition("=")[0]
        if not name.isidentifier():
            raise KTCacheError(f"-D {d!r}: {name!r} is not a macro name")
        parts.append(f"-D{d}")
    if build_options.strip():
        parts.append(build_options.strip())
    return " ".join(parts)


@dataclass
class KernelSource:
    """The kernel of an import: its record, signature (None where the front end refused it) and
    the options every row is built with."""

    kernel: Kernel
    params: list[KernelParam] | None
    options: str
    headers: dict[str, str]
    error: str | None = None


def frontend_kernel(path: Path, name: str, language: str, options: str, first_macros: str,
                    strict: bool = False) -> KernelSource:
    """The one call into the CUDA / OpenCL front end of an import: parse the kernel file with the
    first configuration's macros and the import's ``options`` (``-I``, ``-D``, build options, which
    the front end takes in its build-option string). A source the front end refuses still gives a
    kernel record (rows keep its id and source) with the front end's message as ``error``."""
    from kernelcast.console import load_kernel_source
    from kernelcast.errors import UsageError

    if not path.is_file():
        raise KTCacheError(f"no such kernel file: {path}")
    source = path.read_text(encoding="utf-8", errors="replace")
    lang = "opencl" if language == "opencl" else "cuda"
    include_dirs = [Path(t[2:]) for t in options.split() if t.startswith("-I") and len(t) > 2]
    headers = local_headers(source, path.parent, include_dirs)
    try:
        kernel, params = load_kernel_source(str(path), name, f"{first_macros} {options}".strip())
    except UsageError as e:
        if strict:
            raise
        return KernelSource(Kernel(source=source, name=name, language=lang, origin=str(path)), None, options,
                            headers, str(e))
    kernel.build_options = ""               # the macros and options are per row (build_options column)
    return KernelSource(kernel, params, options, headers)


def symbolic_check(kernel: Kernel) -> Any:
    """A function ``options -> bool``: whether the kernel parses with those options (libclang)."""
    from kernelcast.clang import ParseError

    def check(options: str) -> bool:
        try:
            if kernel.language == "cuda":
                from kernelcast.cuda import parse_cuda

                parse_cuda(kernel.source, "kernel.cu", options)
            else:
                from kernelcast.clang import parse

                parse(kernel.source, "kernel.cl", options)
        except (ParseError, ValueError):
            return False
        return True
    return check


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
        w.append_many(imp.rows)
        prev = [x for x in w.manifest.get("imported", []) if x.get("path") != imp.cache.path
                or x.get("kernel_id") != imp.summary()["kernel_id"]]
        w.update_manifest(imported=[*prev, imp.summary()] if w.manifest.get("resumed") else [imp.summary()])
        if imp.kernel is not None:
            write_kernels(Path(out), [imp.kernel])
        appended, total = w.appended, len(w)
    return appended, total



# ---------------------------------------------------------------------------------------------
# one import: caches + spec -> rows, checked before anything is written


@dataclass
class ImportPlan:
    """Everything an import needs, resolved and checked (nothing written yet)."""

    imports: list[KTImport]
    spec: KTSpec | None


def _git_commit(root: Path) -> str | None:
    import subprocess

    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    text = r.stdout.strip()
    return text if r.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", text) else None


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def plan_import(caches: list[str], *, spec: KTSpec | None = None, root: str | os.PathLike[str] = ".",
                kernel_path: str | None = None, name: str | None = None, include_dirs: list[str] | None = None,
                defines: list[str] | None = None, build_options: str = "", arg_specs: list[ArgBinding] | None = None,
                grid: GridRules | None = None, gpu: str | None = None, where: Sequence[str] = ()) -> ImportPlan:
    """Read every cache (the spec's own when none is given), resolve the kernel through the front
    end once, and map every record to a row; ``where`` (with the spec's own) selects the records.
    Raises :class:`KTCacheError` for anything wrong."""
    base = Path(root)
    if spec is not None and not base.is_dir():
        raise KTCacheError(f"--root {base}: no such directory (the clone the spec's paths are relative to)")
    paths = [Path(c) for c in caches] or ([spec.resolve(c, base) for c in spec.caches] if spec else [])
    if not paths:
        raise KTCacheError("no cache file given (and the spec lists none)")
    for c in paths:
        if not c.is_file():
            raise KTCacheError(f"no such cache file: {c}")
    rules = grid if grid is not None and (grid.block_size_names or grid.problem_size or any(grid.grid_div)) else None
    if spec is not None and rules is None:
        rules = spec.rules
    kfile = Path(kernel_path) if kernel_path else (spec.resolve(spec.kernel_file, base) if spec else None)
    language = spec.language if spec else "cuda"
    inc = [spec.resolve(d, base) for d in spec.include_dirs] if spec else []
    inc += [Path(d) for d in include_dirs or []]
    for d in inc:
        if not d.is_dir():
            raise KTCacheError(f"include directory {d}: no such directory")
    if kfile is not None:
        inc = [kfile.parent.resolve(), *[d.resolve() for d in inc]]
    options = build_option_string(inc, list(defines or []), " ".join(x for x in (spec.build_options if spec else "",
                                                                                 build_options) if x))
    commit = _git_commit(base) if spec else None
    if spec is not None and spec.commit and commit and not commit.startswith(spec.commit):
        log.warning("%s is at commit %s, the spec names %s", base, commit[:12], spec.commit[:12])
    from kernelcast.restrictions import parse_restriction

    selection = [*(spec.where if spec else []), *where]
    for text in where:                 # the spec's were checked when it was read
        try:
            parse_restriction(text)
        except UsageError as e:
            raise KTCacheError(f"--where: {e}") from None
    imports: list[KTImport] = []
    ks: KernelSource | None = None
    for cpath in paths:
        stated_gpu = None
        entry = GpuEntry()
        if spec is not None:
            _, entry = spec.gpu_of(str(cpath), "")
        cache = read_kt_cache(cpath, device_name=gpu or entry.device_name or cache_stem(str(cpath)),
                              kernel_name=name or (spec.kernel_name if spec else None))
        if spec is not None:
            _, entry = spec.gpu_of(str(cpath), cache.stated_device_name)
            stated_gpu = cache.stated_device_name or entry.device_name or gpu or cache_stem(str(cpath))
        if not cache.records:
            raise KTCacheError(f"{cpath}: the cache holds no configuration")
        cache, excluded = select_records(cache, selection, spec.constants if spec else None)
        if kfile is not None and ks is None:
            r = rules or GridRules()
            first = cache.records[0][1]
            consts = spec.constants if spec else {}
            names = block_size_names(cache, r)
            ln = launch_of(cache, {**consts, **first}, names, r)
            macros = kt_defines(first, cache.tune_params_keys, ln, names)
            if spec is not None and spec.defines:
                macros += " " + _define_values(spec.defines, _arg_env(ln, dict(consts), first), cache)
            # a kernel file named on the command line must parse; a spec's import keeps its rows
            ks = frontend_kernel(kfile, name or (spec.kernel_name if spec else None) or cache.kernel_name,
                                 language, options, macros, strict=spec is None)
            if ks.error:
                log.warning("%s: the front end refused the kernel (%s): rows are imported without arguments "
                            "or analysis", kfile, ks.error)
            elif ks.params is not None and arg_specs:
                from kernelcast.argspec import check_against_signature

                check_against_signature(list(arg_specs), ks.params, ks.kernel.name)
        prov = Provenance(benchmark=spec.benchmark if spec else None, repository=spec.repository if spec else None,
                          commit=commit or (spec.commit if spec else None),
                          kernel_file=_rel(kfile, base) if kfile is not None and spec else None,
                          cache_file=_rel(cpath, base) if spec else None,
                          gpu=stated_gpu or gpu, gpu_profile=entry.profile,
                          kernel_tuner_version=spec.kernel_tuner_version if spec else None)
        imp = kt_rows(cache, kernel=ks.kernel if ks else None, params=ks.params if ks else None,
                      arg_specs=arg_specs, rules=rules, kernel_name=name, spec=spec,
                      options=ks.options if ks else options, headers=ks.headers if ks else None, provenance=prov,
                      symbolic=symbolic_check(ks.kernel) if ks is not None and ks.error is None else None,
                      frontend_error=ks.error if ks else None)
        imp.where, imp.excluded = selection, excluded
        imports.append(imp)
    return ImportPlan(imports, spec)


def rows_equal_cache(cache: KTCache, df: Any) -> tuple[bool, str]:
    """Whether a dataset's rows of ``cache`` equal it: one row per record (by ``kt_key``), the
    record's status, its mean time (ms -> us, exactly) and every iteration. (ok, first difference)."""
    if "kt_key" not in df.columns:
        return False, "no kt_key column"
    sub = df[df["src_cache_file"].astype(str).str.endswith(Path(cache.path).name)] if "src_cache_file" in df else df
    by_key = {str(k): r for k, r in zip(sub["kt_key"], sub.to_dict("records"))}
    if len(by_key) != len(cache.records):
        return False, f"{len(by_key)} rows for {len(cache.records)} records"
    for key, rec in cache.records:
        row = by_key.get(key)
        if row is None:
            return False, f"no row for configuration {key}"
        status, _ = record_status(rec)
        if row["status"] != status:
            return False, f"{key}: status {row['status']} for {status}"
        if status != "ok":
            continue
        t = _number(rec.get("time"))
        if t is None or row["time_mean_us"] != t * 1e3:
            return False, f"{key}: time {row['time_mean_us']} us for {t} ms"
        times = rec.get("times")
        if isinstance(times, list) and times:
            got = row["times_us"]
            got = json.loads(got) if isinstance(got, str) else list(got)
            if [float(x) for x in got] != [float(x) * 1e3 for x in times]:
                return False, f"{key}: iterations differ"
        for k, _m in ENERGY_KEYS:
            v = _number(rec.get(k))
            if v is not None:
                if row["energy_j"] != v:
                    return False, f"{key}: energy {row['energy_j']} for {v}"
                break
    return True, ""


def records_equal(a: KTCache, b: KTCache) -> tuple[bool, str]:
    """Whether two files of one run hold the same configurations with the same status, mean time
    and iterations (a cache and the T4 file written from it). (ok, first difference)."""
    ra, rb = dict(a.records), dict(b.records)
    if ra.keys() != rb.keys():
        extra = sorted(set(ra) ^ set(rb))
        return False, f"{len(ra)} vs {len(rb)} configurations (e.g. {extra[0]})"
    for k, x in ra.items():
        y = rb[k]
        sx, sy = record_status(x)[0], record_status(y)[0]
        if sx != sy:
            return False, f"{k}: status {sx} vs {sy}"
        if sx == "ok" and (_number(x.get("time")) != _number(y.get("time")) or
                           (x.get("times") or None) != (y.get("times") or None)):
            return False, f"{k}: times differ"
    return True, ""

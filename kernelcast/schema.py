"""The record schemas every stage shares: kernels, launch configurations, measurements.

Each record is a dataclass with ``to_dict``/``from_dict``; ``SCHEMA_VERSION`` goes with every
dataset and changes whenever a field changes meaning.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

import numpy as np

SCHEMA_VERSION = 1

#: the status of a measurement (DESIGN.md, "Measurement")
Status = Literal[
    "ok",
    "compile_error",
    "runtime_error",
    "timeout",
    "crash",
    "out_of_bounds",
    "invalid_output",
    "invalid_config",
    "skipped",          # a planned datagen configuration not measured (pruned, or its kernel abandoned)
]
STATUSES: tuple[Status, ...] = get_args(Status)

#: how datagen chooses kernel arguments (``--args``): LLMPerf's simple rule, the memory analysis, both, or
#: ``auto`` (per kernel: simple, then memory, then index/predicate-aware inputs; docs/argument-selection.md)
ArgsSelection = Literal["simple", "memory", "both", "auto"]

#: the energy meters a measurement can name (``"auto"`` picks one of them before a measurement)
MeterName = Literal["nvml", "rapl", "none"]

#: how one kernel argument is bound: a __global/__constant pointer, a __local pointer, a value
ArgKind = Literal["buffer", "local", "scalar"]


def kernel_id(source: str, name: str, build_options: str = "") -> str:
    """Stable id of a kernel: hash of its (normalized) source, name and build options."""
    h = hashlib.sha256()
    for part in (source, name, build_options):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:20]


@dataclass
class Kernel:
    """One kernel: a function in a source text, with the options it is built with."""

    source: str
    name: str
    language: str = "opencl"          # "opencl" or "cuda"
    build_options: str = ""
    dims: int | None = None           # 1, 2 or 3 where known (LLMPerf Table I)
    origin: str = ""                  # file or generator it came from

    @property
    def id(self) -> str:
        return kernel_id(self.source, self.name, self.build_options)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["id"] = self.id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Kernel:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class ArgBinding:
    """How one kernel argument is bound for a launch.

    ``kind`` is ``buffer`` (a __global or __constant pointer), ``local`` (a __local pointer) or
    ``scalar``. For buffers and locals ``count`` is the number of elements of ``dtype`` (an
    OpenCL type name such as ``float`` or ``float4``); for scalars ``value`` holds the value.
    """

    name: str
    kind: ArgKind
    dtype: str
    count: int | None = None
    value: Any = None
    init: str = "random"              # buffers: random / zeros / ones / array
    reset_each_run: bool = False      # buffers: restore the initial contents before every launch

    def describe(self) -> str:
        if self.kind == "scalar":
            return f"{self.name}={self.value}"
        return f"{self.name}={self.kind}:{self.dtype}:{self.count}"


@dataclass
class LaunchConfig:
    """Global and local size (1-3 dimensions) and argument bindings."""

    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    args: list[ArgBinding] = field(default_factory=list)
    power_cap_w: float | None = None

    @property
    def dims(self) -> int:
        return len(self.gsize)

    @property
    def n_workgroups(self) -> int | None:
        if self.lsize is None:
            return None
        n = 1
        for g, loc in zip(self.gsize, self.lsize):
            n *= g // loc
        return n


@dataclass
class TimeStats:
    """Statistics of the repeat times of one configuration, in microseconds."""

    repeats: int
    median_us: float
    min_us: float
    mean_us: float
    q1_us: float
    q3_us: float
    iqr_us: float
    cv: float                        # standard deviation / mean
    times_us: list[float] = field(default_factory=list)
    group: int = 1                   # launches per sample (interquartile mean of a group of short launches)

    @classmethod
    def from_times(cls, times_us: list[float], group: int = 1) -> TimeStats:
        t = np.asarray(times_us, dtype=np.float64)
        q1, med, q3 = (float(x) for x in np.percentile(t, [25, 50, 75]))
        mean = float(t.mean())
        cv = float(t.std(ddof=1) / mean) if len(t) > 1 and mean > 0 else 0.0
        return cls(
            repeats=len(t), median_us=med, min_us=float(t.min()), mean_us=mean,
            q1_us=q1, q3_us=q3, iqr_us=q3 - q1, cv=cv, times_us=[float(x) for x in t], group=group,
        )

    @classmethod
    def from_windows(cls, windows: list[list[float]], group: int = 1) -> TimeStats:
        """The statistics of one configuration measured in several windows (rounds), each window
        weighing the same: every window gives ``m`` samples, ``m`` the fewest any window has (its
        quantiles at ``(i + 0.5) / m``), so a window of a fast phase, which fits more launches into
        its time budget, does not outvote the others (with one window of 900 launches at 115 us and
        three of 30 at 2,900 us, pooling the raw samples gave 115 us). ``min_us`` is the smallest
        sample of any window and ``repeats`` the launches of all; ``times_us`` the pooled samples."""
        ws = [np.asarray(w, dtype=np.float64) for w in windows if len(w)]
        if not ws:
            raise ValueError("no samples in any window")
        m = min(len(w) for w in ws)
        q = (np.arange(m) + 0.5) / m
        pooled = np.concatenate([np.quantile(w, q, method="inverted_cdf") for w in ws])
        t = cls.from_times([float(x) for x in pooled], group=group)
        t.repeats = sum(len(w) for w in ws)
        t.min_us = float(min(w.min() for w in ws))
        return t


@dataclass
class Measurement:
    """One row of a dataset: one (kernel, configuration, device) measurement.

    Energy columns are ``None`` where no meter exists; they are never estimated.
    """

    kernel_id: str
    kernel_name: str
    device: str
    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    args: list[dict[str, Any]]
    status: Status
    reason: str = ""
    time: TimeStats | None = None
    energy_j: float | None = None            # per launch, whole device
    dynamic_energy_j: float | None = None    # per launch, minus idle power x time
    avg_power_w: float | None = None
    idle_power_w: float | None = None
    meter: MeterName = "none"
    meter_method: str = "none"
    meter_samples: int = 0
    meter_window_s: float | None = None
    device_state: dict[str, Any] = field(default_factory=dict)
    compile_log: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)   # per buffer: digest after one launch, changed
    readback: dict[str, Any] = field(default_factory=dict)  # buffers asked for, after one launch (not stored)
    build_s: float | None = None
    wall_s: float | None = None
    harness_version: str = ""
    schema_version: int = SCHEMA_VERSION
    # state-consuming kernels: "none", "restore" (reset_buffers put back before every launch,
    # untimed) or "single" (only the first launch, on the initial state, is timed)
    state_reset: str = "none"
    reset_buffers: list[str] = field(default_factory=list)
    # the machine during the timed window (load average, other processes' CPU time, clock)
    machine: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("readback")
        d["gsize"] = list(self.gsize)
        d["lsize"] = list(self.lsize) if self.lsize is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        d = dict(d)
        if d.get("time") is not None:
            d["time"] = TimeStats(**d["time"])
        d["gsize"] = tuple(d["gsize"])
        d["lsize"] = tuple(d["lsize"]) if d.get("lsize") is not None else None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

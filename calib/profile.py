"""The device profile: what calibration measured, or what a published source states, about one
device, each value with its units and source.

A profile is a JSON document (``PROFILE_SCHEMA_VERSION``)::

    {
      "schema_version": 1,
      "kind": "measured" | "published",
      "device": {"name": ..., "vendor": ..., "platform": ..., "driver": ..., "compute_units": ...},
      "meter": "none",
      "created": "2025-01-01T12:00:00+00:00",
      "values": {"dram_bw_gbs": {"value": 10.1, "units": "GB/s", "source": "measured: calib
                 bandwidth on 2025-01-01", "r2": null, "notes": "..."}, ...},
      "curves": {"bandwidth_vs_working_set": {"x": [...], "y": [...], "x_units": "B", ...}},
      "notes": [...]
    }

Energy values are absent (not present in ``values``) where no meter exists; they are never
estimated. :data:`VALUE_NAMES` documents the names calibration writes, so that the models read
the same vocabulary from measured and published profiles.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.errors import InputError

log = logging.getLogger(__name__)

PROFILE_SCHEMA_VERSION = 1

#: the names a profile uses, with units and meaning (``{i}``: cache level index, 0 = fastest;
#: ``{cls}``: an operation class of :data:`calib.kernels.OP_CLASSES`)
VALUE_NAMES: dict[str, tuple[str, str]] = {
    # identity-like counts (published profiles; measured ones keep them in ``device``)
    "compute_units": ("count", "streaming multiprocessors / compute units"),
    "warp_size": ("threads", "warp / wavefront width"),
    "max_threads_per_cu": ("threads", "resident work-items per compute unit"),
    "max_warps_per_cu": ("warps", "resident warps per compute unit"),
    "max_wg_per_cu": ("work-groups", "resident work-groups per compute unit"),
    "max_wg_size": ("threads", "work-items per work-group"),
    "registers_per_cu": ("32-bit registers", "register file per compute unit"),
    "warp_issue_per_cu_clk": ("warp instructions", "instructions a compute unit's warp schedulers issue per clock "
                                                   "(GPUs: its pipes then run concurrently)"),
    "max_registers_per_thread": ("32-bit registers", "registers one work-item may use"),
    "l1_bytes_per_clk": ("B", "GPU: bytes one compute unit's L1 delivers per clock (default 128, NVIDIA's)"),
    "l1_line_bytes": ("B", "GPU: the line one compute unit's L1 looks up per clock (default 128, NVIDIA's)"),
    "lsu_lanes_per_clk": ("lanes", "GPU: lanes of load/store instructions one compute unit takes per clock "
                                   "(default 32, NVIDIA's)"),
    "local_mem_per_cu_bytes": ("B", "shared/local memory per compute unit"),
    "max_local_mem_per_wg_bytes": ("B", "shared/local memory one work-group may use"),
    "max_static_local_mem_per_wg_bytes": ("B", "shared/local memory one work-group may declare in fixed-size arrays, "
                                               "where less than it may use"),
    "boost_clock_mhz": ("MHz", "boost clock"),
    "dram_bytes": ("B", "device memory"),
    "l2_bytes": ("B", "L2 cache"),
    "tdp_w": ("W", "thermal design / board power"),
    # rates
    "peak_fp32_gflops": ("GFLOP/s", "fp32 FMA rate x 2"),
    "peak_fp64_gflops": ("GFLOP/s", "fp64 FMA rate x 2"),
    "peak_{cls}_gops": ("Gop/s", "operations per second of one class (an FMA is one op)"),
    "wi_{cls}_gops": ("Gop/s", "rate of one dependent chain per work-item vectorized across work-items (CPU devices; "
                               "a math routine the runtime leaves scalar: one call per work-item as it runs it)"),
    "chain_{cls}_ns": ("ns", "CPU: one operation of scalar code that waits for the one before (a loop-carried "
                              "recurrence), per compute unit"),
    "scalar_{cls}_gops": ("Gop/s", "rate of scalar code: one work-item per lane, not vectorized (CPU devices)"),
    # memory
    "dram_bw_gbs": ("GB/s", "main-memory (global) bandwidth: large-working-set plateau"),
    "bw_level{i}_gbs": ("GB/s", "read bandwidth of cache level i"),
    "cache_level{i}_bytes": ("B", "capacity of cache level i over all compute units (CPU devices: as the host "
                                  "reports it; otherwise the largest working set that still ran at level i's "
                                  "bandwidth)"),
    "cache_level{i}_cores": ("count", "compute units sharing one instance of cache level i (1: private); CPU devices"),
    "bw_local_gbs": ("GB/s", "local (shared) memory read bandwidth"),
    "latency_level{i}_ns": ("ns", "dependent-load latency of level i (pointer chasing)"),
    "latency_level{i}_bytes": ("B", "largest working set at level i's latency"),
    "dram_latency_ns": ("ns", "dependent-load latency of the largest working sets"),
    # overheads
    "launch_overhead_us": ("us", "device time of an empty 1-work-item kernel"),
    "host_launch_latency_us": ("us", "host wall time enqueue -> completion of an empty kernel"),
    "host_launch_throughput_us": ("us", "host wall time per launch of back-to-back empty kernels"),
    "wg_overhead_us": ("us", "device time per extra work-group (slope), whole device"),
    "wi_overhead_ns": ("ns", "device time per work-item of idle work-groups (fit with wg_overhead_us over local "
                             "sizes: launch + n_wg (a + b lsize)), whole device"),
    "cu_join_us": ("us", "CPU: how long a launch runs on one compute unit before the other worker threads join it"),
    "barrier_ns": ("ns", "device time per barrier of the smallest work-group measured (16 work-items)"),
    "barrier_wi_ns": ("ns", "device time per barrier per work-item of the group (slope over local sizes)"),
    "barrier_unrolled_items": ("work-items", "CPU: the largest work-group whose barriers the runtime unrolls away "
                                             "(regions of 8 local updates; 0: none)"),
    "wi_store_ns": ("ns", "CPU: device time per work-item of c[i] = a[i] * s + b[i] (slope), times the compute "
                          "units"),
    "wi_cond_store_ns": ("ns", "CPU: the same under if (i < n); far above wi_store_ns: the runtime does not "
                               "vectorize a work-item loop with a conditional store"),
    "wi_call_ns": ("ns", "CPU: the same body with one fmax call; far above wi_store_ns: the runtime calls its "
                         "builtins out of line and the work-item loop is scalar"),
    "wi_libcall_ns": ("ns", "CPU: wi_call_ns - wi_store_ns, what one builtin call adds per work-item"),
    "calib_host_load": ("1", "largest host 1-minute load average seen during calibration"),
    # energy (present only with a meter)
    "idle_power_w": ("W", "device power with nothing running"),
    "energy_per_op_{cls}_pj": ("pJ", "dynamic energy per operation (regression slope)"),
    "power_coeff_{cls}_pj": ("pJ", "FlipFlop beta_u = (P_saturated - P_idle) / max ops per s"),
    "energy_per_access_level{i}_pj": ("pJ", "dynamic energy per 32 B access of level i"),
    "energy_per_access_dram_pj": ("pJ", "dynamic energy per 32 B access of main memory"),
    "energy_per_access_local_pj": ("pJ", "dynamic energy per 32 B access of local memory"),
    "energy_per_sector_{level}_pj": ("pJ", "published energy per 32 B sector (Delestrac et al.)"),
    "power_cu_alpha_w": ("W", "alpha of P(n) = alpha n^beta + delta, n active compute units"),
    "power_cu_beta": ("1", "beta of P(n) = alpha n^beta + delta"),
    "power_cu_delta_w": ("W", "delta of P(n) = alpha n^beta + delta"),
    "transient_ratio": ("1", "FlipFlop r = P_short / P_sustained"),
    "idle_clock_share": ("1", "GPU: the share of idle_power_w that follows f V^2 (the clock tree; default: solved from "
                              "Delestrac et al.'s two A100 idle powers)"),
    "voltage_floor_ratio": ("1", "GPU core voltage at the lowest clocks over the boost clock's (dynamic energy per "
                                 "operation ~ V^2; kernelcast fit-energy fits it to a clock sweep)"),
    "power_short_w": ("W", "average power of a short kernel launched back to back"),
    "power_sustained_w": ("W", "average power of a long kernel"),
}


class ProfileError(InputError, ValueError):
    """A profile file that cannot be read: the message is one line naming what is wrong."""


class ProfileDeviceMismatch(ProfileError):
    """A profile of another device type than the device or dataset it is asked to predict."""


#: OpenCL device types a profile can describe, in the order a type string is searched for them
DEVICE_CLASSES = ("GPU", "CPU", "ACCELERATOR")


def device_class(device_type: str | None) -> str:
    """``GPU``, ``CPU`` or ``ACCELERATOR`` from an OpenCL device type string (``"CPU"``,
    ``"GPU"``, ``"ACCELERATOR | DEFAULT"``, ...); ``""`` when it names none of them."""
    t = (device_type or "").upper()
    for c in DEVICE_CLASSES:
        if c in t:
            return c
    return ""


@dataclass
class ProfileValue:
    """One value with its units and where it came from."""

    value: float
    units: str
    source: str                   # "measured: calib <bench> on <date>" or a citation
    r2: float | None = None       # of the fit that produced it, where one did
    notes: str = ""
    measured_on: str = ""         # published values: the GPU the source measured it on
    transferred: bool = False     # measured on another GPU than the profile's, used here as an approximation
    runs: int = 0                 # calib --rounds N: how many runs measured it (0: one run, no spread)
    spread: float | None = None   # calib --rounds N: (max - min) / |median| over the runs

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.measured_on:
            d.pop("measured_on")
        if not self.transferred:
            d.pop("transferred")
        if not self.runs:
            d.pop("runs")
        if self.spread is None:
            d.pop("spread")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str = "?") -> ProfileValue:
        if not isinstance(d, dict):
            raise ProfileError(f"value {name!r} is not an object")
        for req in ("value", "units", "source"):
            if req not in d:
                raise ProfileError(f"value {name!r} has no {req!r}")
        v = d["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ProfileError(f"value {name!r} is not a finite number: {v!r}")
        r2 = d.get("r2")
        if r2 is not None and (isinstance(r2, bool) or not isinstance(r2, (int, float))):
            raise ProfileError(f"value {name!r} has a non-numeric r2: {r2!r}")
        tr = d.get("transferred", False)
        if not isinstance(tr, bool):
            raise ProfileError(f"value {name!r} has a non-boolean 'transferred': {tr!r}")
        runs = d.get("runs", 0)
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 0:
            raise ProfileError(f"value {name!r} has a 'runs' that is not a count: {runs!r}")
        spread = d.get("spread")
        if spread is not None and (isinstance(spread, bool) or not isinstance(spread, (int, float))
                                   or not math.isfinite(spread) or spread < 0):
            raise ProfileError(f"value {name!r} has a 'spread' that is not a non-negative number: {spread!r}")
        return cls(value=v, units=str(d["units"]), source=str(d["source"]),
                   r2=None if r2 is None else float(r2), notes=str(d.get("notes", "")),
                   measured_on=str(d.get("measured_on", "")), transferred=tr, runs=runs,
                   spread=None if spread is None else float(spread))


@dataclass
class Curve:
    """A measured curve kept whole (e.g. bandwidth against working-set size)."""

    x: list[float]
    y: list[float]
    x_units: str
    y_units: str
    source: str
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], name: str = "?") -> Curve:
        try:
            c = cls(x=[float(v) for v in d["x"]], y=[float(v) for v in d["y"]], x_units=str(d["x_units"]),
                    y_units=str(d["y_units"]), source=str(d["source"]), notes=str(d.get("notes", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ProfileError(f"curve {name!r} is malformed ({type(e).__name__}: {e})") from None
        if len(c.x) != len(c.y):
            raise ProfileError(f"curve {name!r} has {len(c.x)} x values and {len(c.y)} y values")
        return c


@dataclass
class DeviceIdentity:
    """Which device (and driver) a profile describes."""

    name: str
    vendor: str = ""
    device_type: str = ""            # GPU / CPU / ...
    platform: str = ""               # OpenCL platform version string
    driver: str = ""
    device_version: str = ""
    compute_units: int | None = None
    wg_multiple: int | None = None   # warp / wavefront width or preferred work-group multiple
    max_work_group_size: int | None = None
    max_clock_mhz: int | None = None
    global_mem_bytes: int | None = None
    local_mem_bytes: int | None = None
    #: the compiler's name of the device (``gfx90a``, ``gfx1032``, ``sm_80``; empty: unknown)
    llvm_target: str = ""

    @classmethod
    def from_device_info(cls, info: Any) -> DeviceIdentity:
        """From an :class:`instrument.backends.opencl.DeviceInfo`."""
        return cls(
            name=info.name, vendor=info.vendor, device_type=info.type, platform=info.platform_version,
            driver=info.driver_version, device_version=info.device_version, compute_units=info.compute_units,
            wg_multiple=info.preferred_wg_multiple, max_work_group_size=info.max_work_group_size,
            max_clock_mhz=info.max_clock_mhz, global_mem_bytes=info.global_mem_bytes,
            local_mem_bytes=info.local_mem_bytes,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceIdentity:
        if not isinstance(d, dict) or not d.get("name"):
            raise ProfileError("the profile's 'device' has no 'name'")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


#: value names (by prefix or suffix) that must be above 0: counts, sizes, rates, clocks, power
_POSITIVE_SUFFIXES = ("_gbs", "_gflops", "_gops", "_mhz", "_bytes", "_size", "_per_cu", "_per_thread", "_w")
_POSITIVE_NAMES = ("compute_units", "warp_size")


def _check_range(name: str, value: float) -> None:
    """A profile value that cannot be what it says: a zero or negative count, size or rate; a
    negative time or energy."""
    positive = name in _POSITIVE_NAMES or name.startswith("max_") or name.endswith(_POSITIVE_SUFFIXES)
    if positive and not value > 0:
        raise ProfileError(f"value {name!r} is {value:g}; it must be above 0")
    if not value >= 0:
        raise ProfileError(f"value {name!r} is {value:g}; it must not be negative")


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


#: a value each ``calib`` benchmark that the analytical model's CPU class reads writes
#: (``calib --only BENCH``), so a profile without it was made before that benchmark existed
CPU_BENCH_MARKERS: dict[str, str] = {
    "scalar": "scalar_fp32_fma_gops",
    "chain": "chain_fp32_fma_ns",
    "wi": "wi_fp32_fma_gops",
    "wg": "wg_overhead_us",
    "join": "cu_join_us",
    "barrier": "barrier_ns",
    "atomic": "atomic_global_gops",
    "gather": "gather_gops",
    "stride": "strided_line_ns",
    "cond": "wi_cond_store_ns",
}


@dataclass
class DeviceProfile:
    """Everything calibration (or a datasheet) says about one device."""

    device: DeviceIdentity
    values: dict[str, ProfileValue] = field(default_factory=dict)
    curves: dict[str, Curve] = field(default_factory=dict)
    kind: str = "measured"            # "measured" or "published"
    meter: str = "none"               # energy meter used; "none": no energy values
    created: str = field(default_factory=_now)
    tool: str = "kernelcast calib"
    notes: list[str] = field(default_factory=list)
    schema_version: int = PROFILE_SCHEMA_VERSION
    origin: str = field(default="", compare=False)   # where it was read from (not saved)

    # -- access -------------------------------------------------------------------------------

    def age_days(self, now: datetime | None = None) -> float | None:
        """Days since ``created`` (None when the date does not parse)."""
        try:
            t = datetime.fromisoformat(self.created.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return ((now or datetime.now(timezone.utc)) - t).total_seconds() / 86400.0

    def describe(self) -> str:
        """One line: which profile, from where, and how old (for predict / tune output)."""
        age = self.age_days()
        when = f"created {self.created[:19]}" + (f", {age:.1f} days old" if age is not None else "")
        src = f" from {self.origin}" if self.origin else ""
        runs = max((v.runs for v in self.values.values()), default=0)
        if runs > 1:
            spreads = [v.spread for v in self.values.values() if v.spread is not None and v.runs > 1]
            when += f"; median of {runs} calibration runs" + (
                f", median spread {float(np.median(spreads)) * 100:.1f} %" if spreads else "")
        return f"profile {self.device.name or '?'} ({self.kind}{src}; {when})"

    @property
    def device_class(self) -> str:
        """The type of device this profile describes (:func:`device_class` of its device type;
        a profile without one that gives GPU occupancy limits is a GPU profile); ``""`` unknown."""
        c = device_class(self.device.device_type)
        if not c and "max_warps_per_cu" in self.values:
            return "GPU"
        return c

    def check_device_type(self, device_type: str | None, what: str) -> None:
        """Refuse (:class:`ProfileDeviceMismatch`, one line) to predict ``what`` (a device or a
        dataset, e.g. ``"device 'pthread-...'"``) of OpenCL type ``device_type`` with this
        profile when both types are known and differ: a GPU profile's occupancy, warps and
        bandwidths say nothing about a CPU device, and the other way round. Unknown types pass."""
        mine, theirs = self.device_class, device_class(device_type)
        if mine and theirs and mine != theirs:
            raise ProfileDeviceMismatch(
                f"profile {self.device.name or '?'} describes a {mine} device but {what} is a {theirs}: a profile "
                f"predicts only its own type of device (calibrate this one with 'kernelcast calib --out "
                f"PROFILE.json', or give a {theirs} profile)")

    def get(self, name: str, default: float | None = None) -> float | None:
        """The value called ``name``, or ``default`` when the profile does not have it."""
        v = self.values.get(name)
        return default if v is None else v.value

    def entry(self, name: str) -> ProfileValue | None:
        return self.values.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.values

    def set(self, name: str, value: float, units: str, source: str, r2: float | None = None,
            notes: str = "") -> ProfileValue:
        pv = ProfileValue(value=value, units=units, source=source, r2=r2, notes=notes)
        self.values[name] = pv
        return pv

    def missing_cpu_benches(self) -> list[str]:
        """The benchmarks of this version's ``calib`` whose values the analytical model's CPU class
        uses (:data:`CPU_BENCH_MARKERS`) and that a measured CPU profile has no value of (a
        profile calibrated by an older kernelcast, e.g. this device's cached calibration): the
        model falls back for those (atomics and gathers as bytes only, the peak rates for scalar
        code). Empty for other profiles."""
        if self.kind != "measured" or str(self.device.device_type or "").upper() != "CPU":
            return []
        return [b for b, key in CPU_BENCH_MARKERS.items() if key not in self.values]

    def transferred_values(self, prefixes: tuple[str, ...] = ("energy_", "power_", "idle_power")) -> list[str]:
        """Names of the values (energy ones by default) measured on another GPU than this one."""
        return [k for k, v in self.values.items() if v.transferred and k.startswith(prefixes)]

    @property
    def has_energy(self) -> bool:
        """Whether any energy or power value is present."""
        return any(k.startswith(("energy_", "power_", "idle_power")) or k == "transient_ratio"
                   for k in self.values)

    # -- (de)serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "tool": self.tool,
            "created": self.created,
            "meter": self.meter,
            "device": asdict(self.device),
            "values": {k: v.to_dict() for k, v in self.values.items()},
            "curves": {k: c.to_dict() for k, c in self.curves.items()},
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, d: Any) -> DeviceProfile:
        if not isinstance(d, dict):
            raise ProfileError("a profile must be a JSON object")
        ver = d.get("schema_version")
        if not isinstance(ver, int) or isinstance(ver, bool):
            raise ProfileError("the profile has no integer 'schema_version'")
        if ver > PROFILE_SCHEMA_VERSION:
            raise ProfileError(f"profile schema version {ver} is newer than this kernelcast reads "
                               f"({PROFILE_SCHEMA_VERSION})")
        if "device" not in d:
            raise ProfileError("the profile has no 'device'")
        values = d.get("values", {})
        curves = d.get("curves", {})
        if not isinstance(values, dict) or not isinstance(curves, dict):
            raise ProfileError("'values' and 'curves' must be JSON objects")
        notes = d.get("notes", [])
        if not isinstance(notes, list):
            raise ProfileError("'notes' must be a list")
        parsed = {str(k): ProfileValue.from_dict(v, k) for k, v in values.items()}
        for k, v in parsed.items():
            _check_range(k, v.value)
        dev = DeviceIdentity.from_dict(d["device"])
        for k in ("compute_units", "wg_multiple", "max_work_group_size"):
            dv = getattr(dev, k, None)
            if isinstance(dv, (int, float)) and dv <= 0:
                raise ProfileError(f"the profile's device {k} is {dv}; it must be above 0")
        return cls(
            device=dev,
            values=parsed,
            curves={str(k): Curve.from_dict(v, k) for k, v in curves.items()},
            kind=str(d.get("kind", "measured")), meter=str(d.get("meter", "none")),
            created=str(d.get("created", "")), tool=str(d.get("tool", "")),
            notes=[str(n) for n in notes], schema_version=ver,
        )

    @classmethod
    def from_json(cls, text: str) -> DeviceProfile:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProfileError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DeviceProfile:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ProfileError(f"{p}: not a JSON profile (not UTF-8 text)") from None
        except OSError as e:
            raise ProfileError(f"cannot read profile {p}: {e.strerror or e}") from None
        try:
            prof = cls.from_json(text)
        except ProfileError as e:
            raise ProfileError(f"{p}: {e}") from None
        prof.origin = str(p)
        return prof

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (a temporary file in the same directory, then rename)."""
        p = Path(path)
        text = self.to_json()
        tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        finally:
            if tmp.exists():
                tmp.unlink()
        log.debug("wrote profile %s (%d values)", p, len(self.values))
        return p


# ---------------------------------------------------------------------------------------------
# several calibration runs -> one profile


#: values combined by their largest run rather than the median (a load seen in any run counts)
_MAX_OF_RUNS = ("calib_host_load",)


def spread_of(values: list[float]) -> float:
    """``(max - min) / |median|`` of repeated measurements (0 for one value; ``inf`` when the
    median is 0 but the values differ)."""
    if len(values) < 2:
        return 0.0
    med = float(np.median(values))
    rng = float(max(values) - min(values))
    if rng == 0:
        return 0.0
    return rng / abs(med) if med != 0 else math.inf


def combine_runs(runs: list[DeviceProfile]) -> DeviceProfile:
    """One profile from several calibrations of the same device (``calib --rounds N``): every
    value is the median over the runs that measured it, with ``runs`` and ``spread`` (max - min
    over |median|) recorded on it; ``calib_host_load`` is the largest; curves are the pointwise
    median at the working sets every run measured; the notes say how the runs differed. A value
    that only some runs produced says so in its notes."""
    if not runs:
        raise ValueError("no calibration runs to combine")
    first = runs[0]
    out = DeviceProfile(device=first.device, kind=first.kind, meter=first.meter, tool=first.tool)
    n = len(runs)
    names = list(dict.fromkeys(k for p in runs for k in p.values))
    worst: list[tuple[float, str]] = []
    for name in names:
        have = [p.values[name] for p in runs if name in p.values]
        vals = [v.value for v in have]
        combined = max(vals) if name in _MAX_OF_RUNS else float(np.median(vals))
        r2s = [v.r2 for v in have if v.r2 is not None]
        sp = spread_of(vals)
        if sp > 0 and name not in _MAX_OF_RUNS:
            worst.append((sp, name))
        runs_txt = ", ".join(f"{v:.4g}" for v in vals)
        note = (f"{'largest' if name in _MAX_OF_RUNS else 'median'} of {len(have)} runs ({runs_txt})"
                + (f"; measured by {len(have)} of {n} runs" if len(have) < n else "")
                + (f"; run 1: {have[0].notes}" if have[0].notes else ""))
        out.values[name] = ProfileValue(value=combined, units=have[0].units, source=have[0].source,
                                        r2=min(r2s) if r2s else None, notes=note, runs=len(have),
                                        spread=None if not math.isfinite(sp) else sp)
    for cname in dict.fromkeys(c for p in runs for c in p.curves):
        cs = [p.curves[cname] for p in runs if cname in p.curves]
        common = sorted(set(cs[0].x).intersection(*[set(c.x) for c in cs[1:]]))
        if not common:
            continue
        ys = [float(np.median([c.y[c.x.index(x)] for c in cs])) for x in common]
        c0 = cs[0]
        out.curves[cname] = Curve(common, ys, c0.x_units, c0.y_units, c0.source,
                                  notes=f"pointwise median of {len(cs)} runs at the {len(common)} working sets all "
                                        f"measured; run 1: {c0.notes}")
    worst.sort(reverse=True)
    finite = [s for s, _ in worst if math.isfinite(s)]
    out.notes.append(
        f"calib --rounds {n}: each value is the median of the rounds (its 'spread' is (max - min) / median); "
        + (f"median spread {float(np.median(finite)) * 100:.1f} % over {len(finite)} values that differ, largest: "
           + ", ".join(f"{nm} {s * 100:.0f} %" for s, nm in worst[:5]) if worst else "every value was the same"))
    for i, p in enumerate(runs, 1):
        out.notes.extend(f"run {i}: {note}" for note in p.notes)
    return out


# ---------------------------------------------------------------------------------------------
# bundled profiles


def profiles_dir() -> Path:
    """The directory of the bundled profiles (``calib/profiles``)."""
    return Path(__file__).parent / "profiles"


def bundled_profiles() -> list[str]:
    """Names of the bundled profiles (file stems), e.g. ``["a100", "h100", ...]``."""
    return sorted(p.stem for p in profiles_dir().glob("*.json"))


def load_profile(name_or_path: str | os.PathLike[str]) -> DeviceProfile:
    """A bundled profile by name (``"a100"``) or any profile by path."""
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        return DeviceProfile.load(p)
    bundled = profiles_dir() / f"{name_or_path}.json"
    if bundled.is_file():
        return DeviceProfile.load(bundled)
    raise ProfileError(f"no profile file {name_or_path!r} and no bundled profile of that name "
                       f"(bundled: {', '.join(bundled_profiles()) or 'none'})")


def bundled_profile_for(info: Any) -> str | None:
    """The name of the bundled *measured* profile of the device and driver ``info`` (a
    :class:`~instrument.backends.base.DeviceInfo`) describes: the same device name, platform,
    driver and device version (PoCL's device version names the CPU it compiles for); None
    when no bundled profile was measured on it."""
    want = DeviceIdentity.from_device_info(info)
    key = (want.name, want.platform, want.driver, want.device_version)
    for name in bundled_profiles():
        try:
            d = json.loads((profiles_dir() / f"{name}.json").read_text())
            dev = DeviceIdentity.from_dict(d.get("device"))
        except (OSError, ValueError, ProfileError, TypeError):
            continue
        if d.get("kind") == "measured" and (dev.name, dev.platform, dev.driver, dev.device_version) == key:
            return name
    return None

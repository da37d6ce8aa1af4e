"""What every calibration benchmark shares: the options, the state later benchmarks reuse, and
:class:`BenchRunner`, which measures one kernel launch through a runner (a harness) and keeps the
profile being filled, the failures and the count of measurements.

The benchmarks themselves are :mod:`calib.compute_bench` (launch, rates, work-group and barrier
costs), :mod:`calib.memory_bench` (bandwidth, latency, local memory, gathers, strides) and
:mod:`calib.energy_bench`; :class:`calib.microbench.Calibrator` runs them in order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from kernelcast.calib.fits import (
    Plateau,
)
from kernelcast.calib.host_caches import CacheLevel
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.instrument.backends import DeviceInfo
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import Kernel, LaunchConfig, Measurement

log = logging.getLogger(__name__)

KiB = 1024
MiB = 1024 * KiB
MAX_ITERS = (1 << 31) - 1

BENCHES = ("launch", "peak", "scalar", "chain", "wi", "bandwidth", "local", "latency", "wg", "join", "barrier",
           "atomic", "gather", "stride", "cond", "host",
           "energy")


class Runner(Protocol):
    """What the benchmarks need of a harness (:class:`instrument.harness.Harness` is one)."""

    def run(self, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy | None = None) -> Measurement:
        ...


@dataclass
class CalibOptions:
    """What to run and how long to spend."""

    quick: bool = False
    benches: tuple[str, ...] = BENCHES
    op_classes: tuple[str, ...] | None = None     # default: all (quick: QUICK_CLASSES)
    min_bytes: int = 16 * KiB
    max_bytes: int | None = None                  # cap of working sets (default 512 MiB)
    target_s: float | None = None                 # device time of one launch (5 ms; quick 3 ms)
    sweep_budget_s: float | None = None           # wall budget of the bandwidth sweep (60 s; quick 15 s)
    latency_budget_s: float | None = None         # wall budget of the latency sweep (45 s; quick 15 s)
    host_overhead: bool = True
    max_load: float | None = None                 # CPU devices: refuse to measure above this load average
    statistic: str = "median"                     # launch time used: median (as the datasets) or min
    load_wait_s: float = 30.0                     # how long a benchmark waits for the load to drop
    host_caches: list[CacheLevel] | None = None   # CPU devices: cache levels (default: the OS's report; [] none)

    @property
    def launch_target_s(self) -> float:
        return self.target_s if self.target_s is not None else (0.003 if self.quick else 0.005)

    @property
    def bw_budget_s(self) -> float:
        return self.sweep_budget_s if self.sweep_budget_s is not None else (15.0 if self.quick else 60.0)

    @property
    def lat_budget_s(self) -> float:
        return self.latency_budget_s if self.latency_budget_s is not None else (15.0 if self.quick else 45.0)


@dataclass
class OpBest:
    """The best configuration found for one operation class."""

    cls: str
    width: int
    chains: int
    items: int
    lsize: int
    iters: int
    time_s: float
    rate: float                      # ops/s
    configs_tried: int = 0
    spread: float = 0.0              # IQR / median of the launches of the measurement kept


@dataclass
class StreamPoint:
    size: int                        # working set, bytes
    n: int                           # vectors
    items: int
    lsize: int
    passes: int
    time_s: float
    bw: float                        # bytes/s


@dataclass
class CalibState:
    """What later benchmarks reuse from earlier ones."""

    launch_s: float = 0.0
    op_best: dict[str, OpBest] = field(default_factory=dict)
    stream_width: int = 4
    stream_layout: str = "strided"
    stream_points: list[StreamPoint] = field(default_factory=list)
    bw_plateaus: list[Plateau] = field(default_factory=list)
    local: dict[str, Any] = field(default_factory=dict)


def _pow2_floor(x: int) -> int:
    return 1 << max(0, int(x).bit_length() - 1)


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def size_ladder(lo: int, hi: int, *, fine_until: int, fine: float, coarse: float, align: int = 4 * KiB) -> list[int]:
    """Working-set sizes from ``lo`` to ``hi``: ratio ``fine`` up to ``fine_until``, then ``coarse``."""
    out: list[int] = []
    x = float(lo)
    while x <= hi * 1.0001:
        s = max(align, int(round(x / align)) * align)
        if not out or s > out[-1]:
            out.append(s)
        x *= fine if x < fine_until * 0.999 else coarse
    return out


def _today() -> str:
    return datetime.now(timezone.utc).date().isoformat()



class BenchRunner:
    """Measures kernels for the benchmarks and holds what they fill (:class:`DeviceProfile`) and share
    (:class:`CalibState`).

    ``runner`` times kernels (a harness with meter ``none`` is best: no meter windows);
    ``energy_runner``, when given, is a harness with an energy meter and is used only by the
    ``energy`` benchmark. ``on_step`` is called with a label before every measurement.
    """

    def __init__(self, device: DeviceInfo, runner: Runner, energy_runner: Runner | None = None,
                 options: CalibOptions | None = None, on_step: Callable[[str], None] | None = None,
                 on_bench: Callable[[str], None] | None = None, meter: str = "none"):
        self.device = device
        self.runner = runner
        self.energy_runner = energy_runner
        self.opt = options or CalibOptions()
        self.on_step = on_step
        self.on_bench = on_bench
        self.date = _today()
        self.state = CalibState()
        self.failures: list[str] = []
        self.n_runs = 0
        self.last_wall_s = 0.0
        self.seconds: dict[str, float] = {}
        self.profile = DeviceProfile(device=DeviceIdentity.from_device_info(device), kind="measured",
                                     meter=meter if energy_runner is not None else "none")
        self.cu = max(1, int(device.compute_units))
        self.max_wg = max(1, int(device.max_work_group_size))
        self.mult = max(1, int(device.preferred_wg_multiple or 1))
        self.ls = min(256, _pow2_floor(self.max_wg))

    # -- plumbing --------------------------------------------------------------------------

    def source(self, bench: str) -> str:
        return f"measured: calib {bench} on {self.date}"

    def timing_policy(self, energy: bool = False, idle_s: float = 0.2) -> TimingPolicy:
        if energy:
            return TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.05, max_repeats=100000,
                                max_time_s=20.0, idle_s=idle_s)
        if self.opt.quick:
            return TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.012, max_repeats=2000,
                                max_time_s=3.0, idle_s=0.0)
        return TimingPolicy(warmup=1, min_repeats=10, min_time_s=0.05, max_repeats=5000,
                            max_time_s=4.0, idle_s=0.0)

    def measure(self, kernel: Kernel, config: LaunchConfig, label: str, *, energy: bool = False,
                 policy: TimingPolicy | None = None, quiet_compile_error: bool = False) -> Measurement | None:
        runner = self.energy_runner if energy else self.runner
        assert runner is not None
        if self.on_step is not None:
            self.on_step(label)
        t0 = time.perf_counter()
        m = runner.run(kernel, config, policy or self.timing_policy(energy))
        self.last_wall_s = time.perf_counter() - t0
        self.n_runs += 1
        if m.status != "ok" or m.time is None:
            msg = f"{label}: {m.status}: {m.reason}".rstrip(": ")
            if not (quiet_compile_error and m.status == "compile_error"):
                self.failures.append(msg)
                log.warning("calib %s", msg)
            else:
                log.info("calib %s", msg)
            return None
        return m

    def _stat(self, m: Measurement, statistic: str | None = None) -> float:
        """The launch time (us) a benchmark uses: the median of the timed launches, as in the
        datasets (``CalibOptions.statistic``; ``min`` for the fastest launch)."""
        assert m.time is not None
        return m.time.min_us if (statistic or self.opt.statistic) == "min" else m.time.median_us

    def _fit_lsize(self, items: int, want: int) -> int:
        ls = max(1, min(want, items))
        while items % ls:
            ls -= 1
        return ls

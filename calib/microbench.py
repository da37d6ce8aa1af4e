"""Calibration microbenchmarks: run the kernels of :mod:`calib.kernels` through the harness and
turn the measurements into :class:`~calib.profile.ProfileValue` entries of a device profile.

What each benchmark reports (names as in :data:`calib.profile.VALUE_NAMES`):

``launch``     ``launch_overhead_us``: median device (OpenCL event start -> end) time of an empty
               kernel of one work-item. It excludes the host side; see ``host``.
``peak``       ``peak_<class>_gops`` per operation class, and ``peak_fp32_gflops`` /
               ``peak_fp64_gflops`` (2 flops per FMA): long dependent chains, ``K x W``
               independent chains per work-item, ``2 x CUs x max work-group`` work-items; the best
               of a few vector shapes and work-group sizes. The loop count is scaled until one
               launch takes the target time (5 ms; 3 ms with ``quick``); the rate is that of the
               median launch (see below).
``scalar``     CPU devices: ``scalar_<class>_gops``, the rate of scalar code (one work-item of
               scalar accumulators, ``W = 1``, 8 chains): what a kernel runs at when the runtime
               does not vectorize its work-item loop (a loop inside the kernel, atomics), for the
               arithmetic classes and every builtin family (the analytical model's CPU class).
``chain``      CPU devices: ``chain_<class>_ns``, the time of one operation of scalar code whose
               every operation waits for the one before (one chain per work-item): what a
               loop-carried recurrence (``z = z * z + c``) costs per operation on it.
``wi``         CPU devices: ``wi_<class>_gops``, the rate of one dependent chain per work-item
               with no loop, which the runtime vectorizes across work-items: what ordinary
               vectorized kernel code runs at (the peak kernels' 8 chains per work-item give
               instruction-level parallelism kernels rarely have).
``bandwidth``  read bandwidth against working-set size (a curve), cache levels found as
               plateaus of that curve (``bw_level<i>_gbs``, ``cache_level<i>_bytes``) and
               ``dram_bw_gbs``, the plateau of the largest working sets.
``local``      ``bw_local_gbs``: local (shared) memory read bandwidth.
``latency``    pointer-chasing latency against working-set size (a curve), its plateaus
               (``latency_level<i>_ns``) and ``dram_latency_ns``. Latency is the slope of kernel
               time against the number of dependent loads (the kernel builds its chain first;
               the slope removes that cost).
``wg``         ``wg_overhead_us`` and ``wi_overhead_ns``: ``T = launch + n_wg (a + b lsize)``
               fit over local sizes 1 to 1024 at two totals, of the empty kernel (relative
               residuals).
``join``       CPU devices: ``cu_join_us``, how long a launch runs on one compute unit before the
               runtime's other worker threads join it (:func:`calib.fits.join_time`): the same
               work as one work-group and as several per compute unit, fitted over a ladder of
               work sizes.
``barrier``    ``barrier_ns`` (per work-group) and ``barrier_wi_ns`` (per work-item): for each of
               a few local sizes the slope of device time against the number of barriers in a
               loop whose regions update one local value per work-item (one work-group per
               compute unit), then a line of those slopes against the local sizes the runtime
               does not unroll; the whole curve (``barrier_vs_local_size``), and
               ``barrier_unrolled_items``: the largest group whose barriers a region of 8 updates
               still has unrolled away (where that kernel's cost stops being flat in the local size).
``host``       ``host_launch_latency_us`` (host wall time of enqueue + wait for an empty kernel)
               and ``host_launch_throughput_us`` (host wall time per launch of many back-to-back
               launches), measured in a separate process through the backend, because the
               harness reports device time only (:mod:`calib.host_bench`).
``energy``     with an energy meter only: ``idle_power_w``; ``energy_per_op_<class>_pj`` (slope
               of dynamic energy against operation count) and FlipFlop's
               ``power_coeff_<class>_pj`` = (P_saturated - P_idle) / max ops per s;
               ``energy_per_access_level<i>_pj`` and ``energy_per_access_local_pj`` per 32 B
               access (Delestrac et al. eq. 4: slope of dynamic energy against accesses);
               ``power_cu_{alpha_w,beta,delta_w}``: P(n) = alpha n^beta + delta over n busy
               work-groups (one per compute unit); ``transient_ratio`` r = P_short / P_sustained
               (:mod:`calib.energy_bench`).

Times are the median of each measurement's timed launches (``TimeStats.median_us``), the
statistic the datasets record, so that a profile predicts what a dataset measures
(``CalibOptions.statistic = "min"`` gives the fastest launch instead, as earlier profiles used);
peak and scalar rates write the spread of their launches (IQR / median) into their notes. On a CPU
device other processes share the cores: ``calib_host_load`` records the largest host load average
seen before a benchmark, and ``--max-load`` refuses to measure above a limit. Energy uses the
meter window.

Sweeps over working-set sizes stop at ``min(512 MiB, global memory / 4, max allocation)`` and
also when the next point would exceed a wall-time budget (the harness initialises and checks
every buffer on the host, which costs seconds for hundreds of MiB).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

import numpy as np
from kernelcast.calib import kernels as K
from kernelcast.calib.fits import (
    UNROLL_FLAT,
    Plateau,
    find_plateaus,
    flat_run,
    join_fit,
    linear_fit,
    relative_linear_fit,
    unrolled_group_size,
)
from kernelcast.calib.host_bench import measure_host_overhead
from kernelcast.calib.host_caches import DRAM_FACTOR, MARGIN, SYSFS_CACHE, CacheLevel, host_cache_levels, level_windows
from kernelcast.calib.profile import Curve, DeviceIdentity, DeviceProfile
from kernelcast.instrument.backends import DeviceInfo
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.errors import InputError
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

log = logging.getLogger(__name__)

KiB = 1024
MiB = 1024 * KiB
MAX_ITERS = (1 << 31) - 1

#: work-items per group the barrier benchmark measures (those up to the device's limit): from one
#: 256-bit vector of fp32 lanes, where a CPU runtime may unroll the group's work-item loop, to 1024
BARRIER_LOCAL_SIZES = (8, 16, 32, 64, 256, 1024)
#: work-groups per launch of the work-group benchmark (``Calibrator.bench_wg``), the counts of real
#: launches, from a few to thousands
WG_COUNTS = (16, 128, 1024, 4096)
#: the largest local size the heavier barrier kernel is measured at (it only looks for the unrolling step)
BARRIER_UNROLL_PROBE_MAX = 64
BENCHES = ("launch", "peak", "scalar", "chain", "wi", "bandwidth", "local", "latency", "wg", "join", "barrier",
           "atomic", "gather", "stride", "cond", "host",
           "energy")
#: one-unit work (us) of the join benchmark's launches: from well below the delay to well above it
JOIN_WORK_US = (2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0)
#: work-groups per compute unit of the join benchmark's shared launch
JOIN_WG_PER_CU = 4
#: classes of the scalar benchmark (quick: arithmetic and the three classic builtins)
SCALAR_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_fma", "int32_add", "int32_mul",
                  "int32_div", *K.BUILTIN_OP_CLASSES)
QUICK_SCALAR_CLASSES = ("fp32_add", "fp32_fma", "fp32_div", "int32_add", "sin", "exp", "sqrt")
#: classes of the dependent-chain benchmark (``chain``; quick: the first four): the arithmetic a
#: loop-carried recurrence is made of (``models.static.chains.CHAIN_CLASSES``; not the integer
#: classes, whose chains the compiler reassociates: 0.12 ns per multiply measured)
CHAIN_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_fma")
#: the math library routines of the dependent-chain benchmark (``chain_<routine>_ns``; quick: exp and
#: sin): a routine whose every call waits for the one before pays its latency, not its throughput
#: (PoCL 3.1 on Zen 5, a loop of 32 calls per work-item: a chain of sin calls ran 2.7x as long as
#: four chains of 8, of exp 3.5x, of log 1.6x). Not the builtins that are one instruction (sqrt,
#: rsqrt, division) nor rint (an ALU operation to the static analysis)
ROUTINE_CHAIN_CLASSES = tuple(c for c in K.BUILTIN_OP_CLASSES
                              if c not in ("sqrt", "rsqrt", "native_sqrt", "native_rsqrt", "native_divide",
                                           "half_sqrt", "rint"))
QUICK_ROUTINE_CHAIN_CLASSES = ("exp", "sin")
#: classes of the work-item-vectorized benchmark (``wi``; quick: the first four and the commonest
#: builtins, :data:`QUICK_WI_CLASSES`). Not int32_mul: a
#: straight-line chain ``a = a * s`` is folded into one multiply by ``s^64`` (measured 503 Gop/s);
#: the model scales its peak by the fp32 FMA ratio instead. The builtins a CPU runtime vectorizes
#: (``models.analytical.SCALAR_FAMILIES`` are not): one call per work-item ran 3.6x below their
#: explicit float16 peak on PoCL 3.1 (``out[i] = a * exp(-r * t[i])``: 4.0 G calls/s, peak 14.3;
#: measured with independent calls, :func:`calib.kernels.wi_call_kernel`); and tanh, which PoCL 3.1
#: vectorizes at one call per work-item (``models.analytical.SCALAR_FAMILY_VECTOR_CALLS``); and one
#: call per work-item of the routines a runtime may leave scalar (:data:`calib.kernels.SCALAR_ROUTINES`:
#: what such a call costs there, ``models.analytical.AnalyticalModel._item_seconds``)
WI_CLASSES = ("fp32_fma", "fp32_add", "fp32_mul", "int32_add", "fp32_div", "fp64_fma",
              "exp", "sqrt", "rsqrt", "native_exp", "native_sin", "native_sqrt", "native_log", "native_rsqrt",
              "native_divide", "half_exp", "half_sin", "half_sqrt", "tanh", *K.SCALAR_ROUTINES)
QUICK_WI_CLASSES = ("fp32_fma", "fp32_add", "fp32_mul", "int32_add", "exp", "sqrt")
DEFAULT_CLASSES = tuple(K.OP_CLASSES)
#: classes of the peak benchmark with ``--quick``: the common arithmetic and builtins, and the integer
#: divider (the rule in its place, int32 mul / 20, was 10x too fast on PoCL 3.1)
QUICK_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp64_fma", "int32_add", "int32_mul",
                 "fp32_div", "int32_div", "sin", "exp", "sqrt")


class HostBusyError(InputError):
    """The host is too busy to calibrate a CPU device (``--max-load``)."""


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


def _today() -> str:
    return datetime.now(timezone.utc).date().isoformat()


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


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


class Calibrator:
    """Runs the benchmarks and fills a :class:`DeviceProfile`.

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

    # -- driver ----------------------------------------------------------------------------

    def run(self) -> DeviceProfile:
        """Run the selected benchmarks in pipeline order; a failing benchmark is noted, not fatal."""
        t_all = time.perf_counter()
        load0 = _loadavg()
        self.check_load("before calibration", wait=False)
        loads: list[float] = [] if load0 is None else [load0]
        for bench in BENCHES:
            if bench not in self.opt.benches:
                continue
            if bench == "energy" and self.energy_runner is None:
                continue
            if bench == "host" and not self.opt.host_overhead:
                continue
            if self.on_bench is not None:
                self.on_bench(bench)
            lb = self.check_load(f"before benchmark {bench}", wait=True)
            if lb is not None:
                loads.append(lb)
            t0 = time.perf_counter()
            try:
                getattr(self, f"bench_{bench}")()
            except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others
                log.exception("calib benchmark %s failed", bench)
                self.failures.append(f"{bench}: {type(e).__name__}: {e}")
            self.seconds[bench] = time.perf_counter() - t0
        p = self.profile
        if self.energy_runner is None or not p.has_energy:
            p.meter = "none" if self.energy_runner is None else p.meter
            p.notes.append(f"energy values absent: no energy meter (meter {p.meter})"
                           if self.energy_runner is None else
                           f"energy values absent: meter {p.meter} returned no energy")
        p.notes.append(f"calibration: {self.n_runs} measurements in {time.perf_counter() - t_all:.1f} s"
                       + (" (quick)" if self.opt.quick else "")
                       + "; seconds per benchmark: "
                       + ", ".join(f"{k} {v:.1f}" for k, v in self.seconds.items()))
        if loads:
            self.profile.set("calib_host_load", max(loads), "1", self.source("load"), notes=(
                f"largest 1-minute host load average seen before a benchmark ({len(loads)} samples, "
                f"min {min(loads):.2f}); on a CPU device anything above ~0.5 means other processes shared "
                f"the cores the rates were measured on"))
        if load0 is not None:
            busy_cpu = "CPU" in (self.device.type or "") and load0 > 0.5
            p.notes.append(f"host 1-minute load average {load0:.2f} before calibration"
                           + (" (other processes were using the host CPUs: on a CPU device the measured rates "
                              "are then lower than on an idle host)" if busy_cpu else ""))
        for f in self.failures:
            p.notes.append(f"failed: {f}")
        return p

    def check_load(self, when: str, *, wait: bool) -> float | None:
        """The host load average now; on a CPU device with ``max_load`` set, wait up to
        ``load_wait_s`` for it to drop below, else raise :class:`HostBusyError` (nothing of a
        refused calibration is written)."""
        load = _loadavg()
        limit = self.opt.max_load
        if load is None or limit is None or "CPU" not in (self.device.type or "").upper():
            return load
        deadline = time.monotonic() + (self.opt.load_wait_s if wait else 0.0)
        while load is not None and load > limit and time.monotonic() < deadline:
            time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
            load = _loadavg()
        if load is not None and load > limit:
            raise HostBusyError(f"host load average {load:.2f} {when} is above --max-load {limit:g}: a CPU device "
                                f"shares its cores with the other processes, so its rates would be theirs too; "
                                f"calibrate on an idle host or raise --max-load")
        return load

    # -- launch ----------------------------------------------------------------------------

    def bench_launch(self) -> None:
        m = self.measure(K.empty_kernel(), LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "uint", 1)]),
                          "launch: empty kernel")
        if m is None:
            return
        t = m.time
        assert t is not None
        self.state.launch_s = t.median_us * 1e-6
        self.profile.set("launch_overhead_us", t.median_us, "us", self.source("launch"), notes=(
            f"median OpenCL event time (start to end) of an empty kernel with one work-item over "
            f"{t.repeats} launches (min {t.min_us:.3g} us, IQR {t.iqr_us:.3g} us); device side only: "
            f"excludes enqueue and queueing on the host (host_launch_latency_us)"))

    # -- peak rates ------------------------------------------------------------------------

    def op_config(self, cls: str, width: int, items: int, lsize: int, iters: int) -> LaunchConfig:
        c = K.OP_CLASSES[cls]
        vt = c.base if width == 1 else f"{c.base}{width}"
        return LaunchConfig((items,), (lsize,), [
            ArgBinding("out", "buffer", vt, items, init="zeros"),
            ArgBinding("s", "scalar", c.base, value=c.s),
            ArgBinding("t", "scalar", c.base, value=c.t),
            ArgBinding("iters", "scalar", "uint", value=int(iters)),
        ])

    def _timed_op(self, kernel: Kernel, cls: str, width: int, chains: int, items: int, lsize: int,
                  rate_est: float | None, statistic: str | None = None) -> OpBest | None:
        """Scale the loop count until a launch takes the target time; the resulting rate."""
        opi = K.ops_per_iter(cls, width, chains)
        target = self.opt.launch_target_s
        if rate_est:
            iters = int(min(MAX_ITERS, max(1, round(target * rate_est / (items * opi)))))
        else:
            iters = 4
        m: Measurement | None = None
        t = 0.0
        spread = 0.0
        for _ in range(5):
            m = self.measure(kernel, self.op_config(cls, width, items, lsize, iters),
                              f"peak {cls} w{width}k{chains} wg{lsize} x{iters}", quiet_compile_error=True)
            if m is None:
                return None
            assert m.time is not None
            t = self._stat(m, statistic) * 1e-6  # see the module docstring
            spread = m.time.iqr_us / max(m.time.median_us, 1e-12)
            if t >= 0.5 * target or iters >= MAX_ITERS:
                break
            busy = max(t - self.state.launch_s, 0.05 * t, 1e-7)
            iters = int(min(MAX_ITERS, max(2 * iters, math.ceil(iters * target / busy))))
        if m is None or t <= 0:
            return None
        return OpBest(cls, width, chains, items, lsize, iters, t, items * iters * opi / t, spread=spread)

    def _shapes(self, cls: str) -> list[tuple[int, int]]:
        if K.OP_CLASSES[cls].base == "double":
            return [(4, 8), (8, 8)]
        return [(4, 8), (16, 8)]

    def bench_peak(self) -> None:
        classes = self.opt.op_classes or (QUICK_CLASSES if self.opt.quick else DEFAULT_CLASSES)
        unknown = [c for c in classes if c not in K.OP_CLASSES]
        if unknown:
            raise ValueError(f"unknown operation classes {unknown}")
        items = self.cu * self.max_wg * 2
        lsizes = [self._fit_lsize(items, self.ls)]
        if not self.opt.quick:
            big = self._fit_lsize(items, self.max_wg)
            if big not in lsizes:
                lsizes.append(big)
        quick_shape: dict[int, tuple[int, int]] = {}     # element bytes -> winning shape (quick)
        for cls in classes:
            c = K.OP_CLASSES[cls]
            esize = 8 if c.base == "double" else 4
            shapes = self._shapes(cls)
            if self.opt.quick and esize in quick_shape:
                shapes = [quick_shape[esize]]
            best: OpBest | None = None
            tried = 0
            unsupported = False
            for w, k in shapes:
                r = self._timed_op(K.op_kernel(cls, w, k), cls, w, k, items, lsizes[0],
                                   best.rate if best else None)
                tried += 1
                if r is None:
                    unsupported = True
                    continue
                unsupported = False
                if best is None or r.rate > best.rate:
                    best = r
            if best is not None:
                for ls in lsizes[1:]:
                    r = self._timed_op(K.op_kernel(cls, best.width, best.chains), cls, best.width, best.chains,
                                       items, ls, best.rate)
                    tried += 1
                    if r is not None and r.rate > best.rate:
                        best = r
            if best is None:
                why = "does not build (no cl_khr_fp64?)" if unsupported and c.needs_fp64 else "failed"
                self.profile.notes.append(f"peak {cls}: {why}; no value")
                continue
            if self.opt.quick:
                quick_shape.setdefault(esize, (best.width, best.chains))
            best.configs_tried = tried
            self.state.op_best[cls] = best
            self.profile.set(f"peak_{cls}_gops", best.rate / 1e9, "Gop/s", self.source("peak"), notes=(
                f"{c.description}; {best.items} work-items in work-groups of {best.lsize}, "
                f"{best.chains} chains of {best.width}-wide vectors per work-item, {best.iters} iterations: "
                f"{best.time_s * 1e6:.0f} us per launch ({self.opt.statistic}; launch spread IQR/median "
                f"{best.spread:.3f}); best of {tried} configurations"))
        for cls, name in (("fp32_fma", "peak_fp32_gflops"), ("fp64_fma", "peak_fp64_gflops")):
            b = self.state.op_best.get(cls)
            if b is not None:
                self.profile.set(name, 2 * b.rate / 1e9, "GFLOP/s", self.source("peak"),
                                 notes=f"2 flops per FMA x peak_{cls}_gops")

    # -- scalar rates (CPU) ----------------------------------------------------------------

    def bench_scalar(self) -> None:
        if "CPU" not in (self.device.type or "").upper():
            self.profile.notes.append("scalar: not a CPU device; skipped (the GPU model has no scalar rates)")
            return
        classes = self.opt.op_classes or (QUICK_SCALAR_CLASSES if self.opt.quick else SCALAR_CLASSES)
        items = self.cu * self.max_wg * 2
        ls = self._fit_lsize(items, self.ls)
        for cls in classes:
            if cls not in K.OP_CLASSES:
                raise ValueError(f"unknown operation class {cls}")
            peak = self.state.op_best.get(cls)
            est = peak.rate / 16 if peak else None
            r = self._timed_op(K.op_kernel(cls, 1, 8), cls, 1, 8, items, ls, est)
            if r is None:
                self.profile.notes.append(f"scalar {cls}: failed; no value")
                continue
            ratio = f"; {peak.rate / r.rate:.1f}x below the vectorized peak" if peak else ""
            self.profile.set(f"scalar_{cls}_gops", r.rate / 1e9, "Gop/s", self.source("scalar"), notes=(
                f"{K.OP_CLASSES[cls].description}; scalar code: 8 independent scalar chains per work-item, "
                f"{r.items} work-items in work-groups of {r.lsize}, {r.iters} iterations: "
                f"{r.time_s * 1e6:.0f} us per launch ({self.opt.statistic}; launch spread IQR/median "
                f"{r.spread:.3f}){ratio}"))

    def bench_chain(self) -> None:
        """CPU devices: ``chain_<class>_ns``, the latency of one operation of scalar code: the peak
        kernel with one chain per work-item (:func:`calib.kernels.op_kernel`, width 1; the two
        coupled chains of a pair class are one recurrence), which the runtime leaves scalar, run
        work-item after work-item, so each operation waits for the one before. The time of one
        compute unit per operation is ``T x CU / (items x iterations x operations per
        iteration)``, the loop count scaled until a launch takes the target time. A loop whose
        iterations carry such a recurrence runs no faster, whatever its throughput. The same for
        the math library routines (:data:`ROUTINE_CHAIN_CLASSES`), whose calls on a chain wait
        for the call before."""
        if "CPU" not in (self.device.type or "").upper():
            return
        classes: tuple[str, ...] = (CHAIN_CLASSES[:4] + QUICK_ROUTINE_CHAIN_CLASSES if self.opt.quick
                                    else CHAIN_CLASSES + ROUTINE_CHAIN_CLASSES)
        if self.opt.op_classes:
            classes = tuple(c for c in classes if c in self.opt.op_classes)
        items = self.cu * 64
        ls = self._fit_lsize(items, 64)
        for cls in classes:
            chains = 2 if K.OP_CLASSES[cls].pairs else 1
            peak = self.state.op_best.get(cls)
            r = self._timed_op(K.op_kernel(cls, 1, chains), cls, 1, chains, items, ls,
                               peak.rate / 64 if peak else 2e9)
            if r is None:
                self.profile.notes.append(f"chain {cls}: failed; no value")
                continue
            ns = self.cu / r.rate * 1e9
            self.profile.set(f"chain_{cls}_ns", ns, "ns", self.source("chain"), notes=(
                f"{K.OP_CLASSES[cls].description}; one dependent chain per work-item, {r.items} work-items in "
                f"work-groups of {r.lsize}, {r.iters} iterations: {r.time_s * 1e6:.0f} us per launch "
                f"({self.opt.statistic}); ns of one compute unit per operation"))

    def bench_wi(self) -> None:
        """CPU devices: ``wi_<class>_gops``, the rate of one dependent chain per work-item that the
        runtime vectorizes across work-items (:func:`calib.kernels.wi_kernel`): what ordinary
        vectorized kernel code runs at. The work-item count is scaled until a launch takes the
        target time."""
        if "CPU" not in (self.device.type or "").upper():
            self.profile.notes.append("wi: not a CPU device; skipped")
            return
        classes: tuple[str, ...] = QUICK_WI_CLASSES if self.opt.quick else WI_CLASSES
        if self.opt.op_classes:
            classes = tuple(c for c in classes if c in self.opt.op_classes)
        ls = _pow2_floor(min(self.max_wg, 1024))      # large groups: few per-group overheads in the time
        target = self.opt.launch_target_s
        for cls in classes:
            c = K.OP_CLASSES[cls]
            builtin = cls in K.BUILTIN_OP_CLASSES
            n_calls = K.WI_CALLS_OF.get(cls, K.WI_CALLS)
            kern = K.wi_call_kernel(cls, n_calls) if builtin else K.wi_kernel(cls)
            ops_item = (n_calls if builtin else K.WI_UPDATES) * c.ops_per_update
            items = self.cu * ls * 4
            t = 0.0
            m = None
            for _ in range(6):
                cfg = LaunchConfig((items,), (ls,), [ArgBinding("out", "buffer", c.base, items, init="zeros"),
                                                     ArgBinding("s", "scalar", c.base, value=c.s),
                                                     ArgBinding("t", "scalar", c.base, value=c.t)])
                m = self.measure(kern, cfg, f"wi {cls} x{items}", quiet_compile_error=True)
                if m is None:
                    break
                t = self._stat(m) * 1e-6
                if t >= 0.5 * target or items >= 1 << 24:
                    break
                items = int(min(1 << 24, items * max(2, _pow2_floor(int(target / max(t, 1e-7))))))
            if m is None or t <= 0:
                self.profile.notes.append(f"wi {cls}: failed or unsupported; no value")
                continue
            rate = items * ops_item / t
            peak = self.state.op_best.get(cls)
            ratio = f"; {peak.rate / rate:.1f}x below the peak (8 chains per work-item)" if peak else ""
            self.profile.set(f"wi_{cls}_gops", rate / 1e9, "Gop/s", self.source("wi"), notes=(
                f"{c.description}; "
                f"{f'{n_calls} independent calls' if builtin else f'one chain of {K.WI_UPDATES} dependent updates'}"
                f" per work-item, no loop, "
                f"{items} work-items in work-groups of {ls}: {t * 1e6:.0f} us per launch "
                f"({self.opt.statistic}){ratio}"))

    # -- bandwidth -------------------------------------------------------------------------

    def _cap_bytes(self) -> int:
        cap = self.opt.max_bytes or 512 * MiB
        cap = min(cap, self.device.global_mem_bytes // 4, self.device.max_alloc_bytes - 64 * KiB)
        return max(cap, self.opt.min_bytes)

    def _stream_lsizes(self) -> list[int]:
        """Work-group sizes tried at every working set: large (GPUs) and the work-group multiple
        (CPU drivers, where a work-group is a loop over its work-items)."""
        big = min(1024, _pow2_floor(self.max_wg))
        small = min(big, max(1, self.mult))
        return [big] if small == big else [big, small]

    def _stream_geometry(self, n: int, ls_cap: int) -> tuple[int, int]:
        """(work-items, work-group size) for reading ``n`` vectors: one work-group per compute
        unit (all resident, see :func:`calib.kernels.stream_read_kernel`), at most ``ls_cap``
        work-items each, never more work-items than vectors."""
        ls = _pow2_floor(max(1, ls_cap))
        while ls > 1 and ls * self.cu > n:
            ls //= 2
        n_wg = max(1, min(self.cu, n // ls))
        return n_wg * ls, ls

    def stream_config(self, width: int, n: int, items: int, lsize: int, passes: int) -> LaunchConfig:
        vt = f"float{width}"
        return LaunchConfig((items,), (lsize,), [
            ArgBinding("a", "buffer", vt, n, init="zeros"),
            ArgBinding("out", "buffer", vt, items, init="zeros"),
            ArgBinding("n", "scalar", "uint", value=n),
            ArgBinding("passes", "scalar", "uint", value=passes),
        ])

    def _best_stream_point(self, width: int, size: int, bw_est: float | None, label: str,
                           layout: str | None = None) -> StreamPoint | None:
        """The fastest of the work-group sizes of :meth:`_stream_lsizes` at one working set."""
        best: StreamPoint | None = None
        for cap in self._stream_lsizes():
            pt = self._stream_point(width, size, best.bw if best else bw_est, f"{label} wg{cap}", layout, cap)
            if pt is not None and (best is None or pt.bw > best.bw):
                best = pt
        return best

    def _stream_point(self, width: int, size: int, bw_est: float | None, label: str,
                      layout: str | None = None, ls_cap: int = 1024) -> StreamPoint | None:
        vb = 4 * width
        n = max(1, size // vb)
        items, ls = self._stream_geometry(n, ls_cap)
        target = self.opt.launch_target_s
        passes = 1 if not bw_est else int(min(MAX_ITERS, max(1, math.ceil(target * bw_est / (n * vb)))))
        kern = K.stream_read_kernel(width, layout or self.state.stream_layout)
        for _ in range(4):
            m = self.measure(kern, self.stream_config(width, n, items, ls, passes), f"{label} x{passes}")
            if m is None:
                return None
            assert m.time is not None
            t = self._stat(m) * 1e-6
            if t >= 0.4 * target or passes >= MAX_ITERS:
                break
            busy = max(t - self.state.launch_s, 0.05 * t, 1e-7)
            passes = int(min(MAX_ITERS, max(2 * passes, math.ceil(passes * target / busy))))
        return StreamPoint(n * vb, n, items, ls, passes, t, passes * n * vb / t)

    def bench_bandwidth(self) -> None:
        cap = self._cap_bytes()
        # access shape: vector width 4 or 16 floats, grid-stride or blocked; the best geometric
        # mean over a cache-sized and a large working set
        probes = sorted({min(cap, 2 * MiB), min(cap, 64 * MiB)})
        best_w, best_layout, best_score, best_bw = 4, "strided", -1.0, -1.0
        for layout in K.STREAM_LAYOUTS:
            for w in (4, 16):
                bws = []
                for size in probes:
                    pt = self._best_stream_point(w, size, None,
                                                 f"bandwidth probe {layout} float{w} {fmt_bytes(size)}", layout)
                    if pt is not None:
                        bws.append(pt.bw)
                if len(bws) == len(probes):
                    score = float(np.exp(np.mean(np.log(bws))))
                    if score > best_score:
                        best_w, best_layout, best_score, best_bw = w, layout, score, bws[0]
        self.state.stream_layout = best_layout
        self.state.stream_width = best_w
        if self.opt.quick:
            sizes = size_ladder(self.opt.min_bytes, cap, fine_until=0, fine=2.0, coarse=2.0)
        else:
            sizes = size_ladder(self.opt.min_bytes, cap, fine_until=16 * MiB, fine=math.sqrt(2.0), coarse=2.0)
        budget = self.opt.bw_budget_s
        spent = 0.0
        bw_est: float | None = best_bw if best_bw > 0 else None
        points: list[StreamPoint] = []
        stopped = ""
        last_wall, last_size = 0.0, 1
        for size in sizes:
            est = last_wall * size / last_size
            if points and spent + est > budget:
                stopped = (f"sweep stopped before {fmt_bytes(size)} by its time budget ({budget:.0f} s; "
                           f"next point estimated {est:.1f} s)")
                break
            t_pt = time.perf_counter()
            pt = self._best_stream_point(best_w, size, bw_est, f"bandwidth {fmt_bytes(size)}")
            wall = time.perf_counter() - t_pt
            spent += wall
            last_wall, last_size = wall, size
            if pt is None:
                continue
            points.append(pt)
            bw_est = pt.bw
        self.state.stream_points = points
        if not points:
            return
        xs = [float(p.size) for p in points]
        ys = [p.bw / 1e9 for p in points]
        src = self.source("bandwidth")
        self.profile.curves["bandwidth_vs_working_set"] = Curve(
            xs, ys, "B", "GB/s", src,
            notes=f"{K.stream_read_kernel(best_w, best_layout).name}: {best_layout} read of float{best_w}, "
                  f"repeated passes in the kernel"
                  + (f"; {stopped}" if stopped else ""))
        if stopped:
            self.profile.notes.append(f"bandwidth: {stopped}")
        if self._bandwidth_levels_from_host(xs, ys, src):
            return
        plats = find_plateaus(xs, ys, min_step=1.35, decreasing=True)
        self.state.bw_plateaus = plats
        priv = (f"; the working set is spread over {self.cu} compute units (a private cache per unit "
                f"holds about 1/{self.cu} of it)") if self.cu > 1 else ""
        for i, p in enumerate(plats):
            last = i == len(plats) - 1
            rng = f"working sets {fmt_bytes(p.x_lo)} to {fmt_bytes(p.x_hi)} ({p.n_points} points)"
            self.profile.set(f"bw_level{i}_gbs", p.value, "GB/s", src,
                             notes=f"median read bandwidth over {rng}" + ("; main memory" if last else ""))
            if not last:
                nxt = plats[i + 1]
                self.profile.set(f"cache_level{i}_bytes", p.x_hi, "B", src, notes=(
                    f"largest working set at level {i}'s bandwidth; the next level's plateau starts at "
                    f"{fmt_bytes(nxt.x_lo)}, so the capacity lies between{priv}"))
        d = plats[-1]
        largest = max(xs)
        self.profile.set("dram_bw_gbs", d.value, "GB/s", src, notes=(
            f"plateau of the largest working sets ({fmt_bytes(d.x_lo)} to {fmt_bytes(d.x_hi)}, "
            f"{d.n_points} points); largest measured {fmt_bytes(largest)}: if that is not several times the "
            f"last-level cache, this is an upper bound of main-memory bandwidth"))

    # -- cache levels of a CPU device from the host's own report ----------------------------

    def host_levels(self) -> list[CacheLevel]:
        """The host's data cache levels when the device is the host CPU (a CPU device with no more
        compute units than the host has CPUs), else ``[]`` (levels then come from the curve)."""
        if "CPU" not in (self.device.type or "").upper():
            return []
        if self.opt.host_caches is not None:
            return self.opt.host_caches
        return host_cache_levels() if self.cu <= (os.cpu_count() or 0) else []

    def _bandwidth_levels_from_host(self, xs: list[float], ys: list[float], src: str) -> bool:
        """Level values of the bandwidth sweep with the host's cache capacities as boundaries:
        each level's bandwidth is the median of the sweep points well inside it
        (:func:`calib.host_caches.level_windows`); False when the host does not report its caches
        or no point lies inside any level."""
        levels = self.host_levels()
        if not levels:
            return False
        caps = [float(lv.total_bytes(self.cu)) for lv in levels]
        wins = level_windows(caps)
        x = np.asarray(xs)
        y = np.asarray(ys)
        i = 0
        plats: list[Plateau] = []

        def plateau(sel: np.ndarray) -> Plateau:
            idx = np.flatnonzero(sel)
            return Plateau(float(x[sel].min()), float(x[sel].max()), float(np.median(y[sel])), int(sel.sum()),
                           int(idx[0]), int(idx[-1]))

        for lv, cap, (lo, hi) in zip(levels, caps, wins):
            sel = (x > lo) & (x <= hi)
            if not sel.any():
                continue
            plats.append(plateau(sel))
            self.profile.set(f"bw_level{i}_gbs", float(np.median(y[sel])), "GB/s", src, notes=(
                f"L{lv.level}: median read bandwidth of the {int(sel.sum())} working sets from "
                f"{fmt_bytes(float(x[sel].min()))} to {fmt_bytes(float(x[sel].max()))} (inside the level: "
                f"above {MARGIN:g} x the level before, below capacity / {MARGIN:g}); "
                f"spread {float(np.ptp(y[sel]) / np.median(y[sel])) * 100:.0f} % (max - min) / median"))
            self.profile.set(f"cache_level{i}_bytes", cap, "B", "host: " + str(SYSFS_CACHE), notes=(
                f"L{lv.level} data cache as the operating system reports it: {fmt_bytes(lv.size_bytes)} per "
                f"instance, one instance per {lv.sharing} CPU(s), {fmt_bytes(cap)} over {self.cu} compute units"))
            self.profile.set(f"cache_level{i}_cores", float(lv.sharing), "count", "host: " + str(SYSFS_CACHE),
                             notes=f"CPUs sharing one instance of L{lv.level} (1: private to a core)")
            i += 1
        lo, _ = wins[-1]
        sel = x >= lo
        upper = ""
        if not sel.any():
            sel = x > caps[-1]
            upper = (f"; no working set reached {DRAM_FACTOR:g} x the last cache level ({fmt_bytes(lo)}), so this "
                     f"is the median above its capacity: an upper bound of main-memory bandwidth")
        if not sel.any():
            self.state.bw_plateaus = plats
            if not plats:
                return False
            top = plats[-1]
            self.profile.set("dram_bw_gbs", top.value, "GB/s", src, notes=(
                f"no working set above the last cache level ({fmt_bytes(caps[-1])}; largest measured "
                f"{fmt_bytes(max(xs))}): the bandwidth of the largest level reached, an upper bound of main-memory "
                f"bandwidth"))
            return True
        plats.append(plateau(sel))
        self.state.bw_plateaus = plats
        dram = float(np.median(y[sel]))
        note = (f"median of the {int(sel.sum())} working sets from {fmt_bytes(float(x[sel].min()))} to "
                f"{fmt_bytes(float(x[sel].max()))}{upper}")
        self.profile.set(f"bw_level{i}_gbs", dram, "GB/s", src, notes=note + "; main memory")
        self.profile.set("dram_bw_gbs", dram, "GB/s", src, notes=note)
        return True

    def _latency_levels_from_host(self, xs: list[float], ys: list[float], r2s: list[float | None],
                                  src: str) -> bool:
        """Latency per level with the host's cache sizes as boundaries (one work-item: one core
        alone, so one instance of each level); see :meth:`_bandwidth_levels_from_host`."""
        levels = self.host_levels()
        if not levels:
            return False
        caps = [float(lv.size_bytes) for lv in levels]
        wins = level_windows(caps)
        x = np.asarray(xs)
        y = np.asarray(ys)
        i = 0

        def worst_r2(sel: np.ndarray) -> float | None:
            r = [v for j in np.flatnonzero(sel) if (v := r2s[j]) is not None]
            return float(min(r)) if r else None

        for lv, cap, (lo, hi) in zip(levels, caps, wins):
            sel = (x > lo) & (x <= hi)
            if not sel.any():
                continue
            self.profile.set(f"latency_level{i}_ns", float(np.median(y[sel])), "ns", src, r2=worst_r2(sel), notes=(
                f"L{lv.level}: median over the {int(sel.sum())} working sets from {fmt_bytes(float(x[sel].min()))} "
                f"to {fmt_bytes(float(x[sel].max()))} (inside one instance of {fmt_bytes(cap)}); r2 is the worst "
                f"of the per-size time-vs-steps fits"))
            self.profile.set(f"latency_level{i}_bytes", cap, "B", "host: " + str(SYSFS_CACHE),
                             notes=f"L{lv.level}: one instance, as the operating system reports it")
            i += 1
        lo, _ = wins[-1]
        sel = x >= lo
        upper = ""
        if not sel.any():
            sel = x > caps[-1]
            upper = f"; no working set reached {DRAM_FACTOR:g} x the last cache level: a lower bound"
        if not sel.any():
            return i > 0
        self.profile.set("dram_latency_ns", float(np.median(y[sel])), "ns", src, r2=worst_r2(sel), notes=(
            f"median of the {int(sel.sum())} working sets from {fmt_bytes(float(x[sel].min()))} to "
            f"{fmt_bytes(float(x[sel].max()))}{upper}; random order over 4 KiB pages includes TLB misses"))
        return True

    # -- local memory ----------------------------------------------------------------------

    def local_config(self, width: int, n: int, n_wg: int, ls: int, passes: int) -> LaunchConfig:
        vt = f"float{width}"
        return LaunchConfig((n_wg * ls,), (ls,), [
            ArgBinding("out", "buffer", vt, n_wg * ls, init="zeros"),
            ArgBinding("buf", "local", vt, n),
            ArgBinding("n", "scalar", "uint", value=n),
            ArgBinding("passes", "scalar", "uint", value=passes),
        ])

    def bench_local(self) -> None:
        w = self.state.stream_width
        vb = 4 * w
        lbytes = min(self.device.local_mem_bytes // 2, 16 * KiB)
        n = max(1, lbytes // vb)
        n_wg = self.cu * 4
        target = self.opt.launch_target_s
        kern = K.local_read_kernel(w)
        best: dict[str, Any] = {}
        for ls in sorted({min(self.ls, n), min(max(1, self.mult), n)}, reverse=True):
            passes = int(best["passes"]) if best else 1
            t = 0.0
            ok = False
            for _ in range(5):
                m = self.measure(kern, self.local_config(w, n, n_wg, ls, passes), f"local memory wg{ls} x{passes}")
                if m is None:
                    break
                assert m.time is not None
                t = self._stat(m) * 1e-6
                ok = True
                if t >= 0.5 * target:
                    break
                busy = max(t - self.state.launch_s, 0.05 * t, 1e-7)
                passes = int(min(MAX_ITERS, max(2 * passes, math.ceil(passes * target / busy))))
            if not ok:
                continue
            bw = n_wg * passes * n * vb / t
            if not best or bw > best["bw"]:
                best = {"width": w, "n": n, "n_wg": n_wg, "ls": ls, "passes": passes, "time_s": t, "bw": bw}
        if not best:
            return
        self.state.local = best
        self.profile.set("bw_local_gbs", best["bw"] / 1e9, "GB/s", self.source("local"), notes=(
            f"{n_wg} work-groups of {best['ls']}, each reading its {fmt_bytes(n * vb)} of local memory "
            f"{best['passes']} times as float{w}; includes filling it once; best of the work-group sizes tried"))

    # -- latency ---------------------------------------------------------------------------

    def _chase_config(self, bits: int, steps: int, ls: int) -> LaunchConfig:
        return LaunchConfig((ls,), (ls,), [
            ArgBinding("buf", "buffer", "uint", K.chase_buffer_uints(bits), init="zeros"),
            ArgBinding("out", "buffer", "uint", 1, init="zeros"),
            ArgBinding("bits", "scalar", "uint", value=bits),
            ArgBinding("steps", "scalar", "uint", value=int(steps)),
        ])

    def bench_latency(self) -> None:
        cap = min(self._cap_bytes(), 256 * MiB)
        lo_bits = max(1, int(math.log2(max(self.opt.min_bytes, K.CHASE_NODE_BYTES * 2) / K.CHASE_NODE_BYTES)))
        hi_bits = min(28, int(math.log2(cap / K.CHASE_NODE_BYTES)))
        bits_list = list(range(lo_bits, hi_bits + 1))
        ls = self.ls
        kern = K.chase_kernel()
        target = self.opt.launch_target_s
        lat_est = 5e-9
        budget = self.opt.lat_budget_s
        spent = 0.0
        xs: list[float] = []
        ys: list[float] = []
        r2s: list[float | None] = []
        stopped = ""
        last_wall, last_size = 0.0, 1
        for bits in bits_list:
            size = K.chase_nodes(bits) * K.CHASE_NODE_BYTES
            est = last_wall * size / last_size
            if xs and spent + est > budget:
                stopped = f"sweep stopped before {fmt_bytes(size)} by its time budget ({budget:.0f} s)"
                break
            s_max = int(min(1 << 26, max(1 << 10, target / lat_est)))
            counts = [0, s_max] if self.opt.quick else [0, s_max // 2, s_max]
            pts_s: list[float] = []
            pts_t: list[float] = []
            wall = 0.0
            for s in counts:
                m = self.measure(kern, self._chase_config(bits, s, ls), f"latency {fmt_bytes(size)} x{s}")
                wall += self.last_wall_s
                if m is None:
                    break
                assert m.time is not None
                pts_s.append(float(s))
                pts_t.append(self._stat(m) * 1e-6)
            spent += wall
            last_wall, last_size = wall, size
            if len(pts_s) < 2:
                continue
            fit = linear_fit(pts_s, pts_t)
            if fit.slope <= 0 or (len(pts_s) > 2 and fit.r2 < 0.9):
                self.profile.notes.append(f"latency {fmt_bytes(size)}: time against steps is not a line "
                                          f"(slope {fit.slope * 1e9:.3g} ns, r2 {fit.r2:.2f}); point dropped")
                continue
            xs.append(float(size))
            ys.append(fit.slope * 1e9)
            r2s.append(fit.r2 if len(pts_s) > 2 else None)
            lat_est = fit.slope
        if not xs:
            return
        src = self.source("latency")
        self.profile.curves["latency_vs_working_set"] = Curve(
            xs, ys, "B", "ns", src,
            notes=f"kc_chase: {K.CHASE_NODE_BYTES} B nodes in a pseudo-random single cycle, one work-item; "
                  f"slope of time against {'2' if self.opt.quick else '3'} step counts"
                  + (f"; {stopped}" if stopped else ""))
        if stopped:
            self.profile.notes.append(f"latency: {stopped}")
        if self._latency_levels_from_host(xs, ys, r2s, src):
            return
        plats = find_plateaus(xs, ys, min_step=1.5, decreasing=False)
        for i, p in enumerate(plats):
            r2 = [r for r in r2s[p.first:p.last + 1] if r is not None]
            r2v = float(min(r2)) if r2 else None
            note = (f"median over working sets {fmt_bytes(p.x_lo)} to {fmt_bytes(p.x_hi)} ({p.n_points} points); "
                    f"r2 is the worst of the per-size time-vs-steps fits")
            self.profile.set(f"latency_level{i}_ns", p.value, "ns", src, r2=r2v, notes=note)
            if i < len(plats) - 1:
                self.profile.set(f"latency_level{i}_bytes", p.x_hi, "B", src,
                                 notes=f"largest working set at level {i}'s latency")
        d = plats[-1]
        r2 = [r for r in r2s[d.first:d.last + 1] if r is not None]
        self.profile.set("dram_latency_ns", d.value, "ns", src, r2=float(min(r2)) if r2 else None, notes=(
            f"latency plateau of the largest working sets ({fmt_bytes(d.x_lo)} to {fmt_bytes(d.x_hi)}); "
            f"largest measured {fmt_bytes(max(xs))}; random order over 4 KiB pages includes TLB misses"))

    # -- work-group overhead ---------------------------------------------------------------

    def bench_wg(self) -> None:
        """Per-work-group cost as a function of the local size: empty work-groups of every power of
        two from 1 to the largest (at most 1024) work-items, :data:`WG_COUNTS` work-groups of each
        (the counts real launches have: the yardstick's datasets launch 11 work-groups at the
        median, 160 at p90, 4,096 at p99), fit as ``T = launch + n_wg (a + b lsize)`` = ``launch +
        a n_wg + b G`` with relative residuals. Group counts and local sizes both vary, so ``b``
        separates from the launch and ``a``. The cost per work-group falls in launches of far more
        work-groups than that: PoCL 3.1 on Zen 5 6.2-6.5 ns per empty work-group at 512-2,048 of
        them, 4.3-6.1 at 8,192, and the fit over 32 to 262,144 work-groups this benchmark ran
        before gave 3.9 ns, which left the dataset's launches of tens to thousands of small
        work-groups a median 1.3-1.7x too fast (launch-dominated rows with 64 or more groups of up
        to 32 work-items, ``log2(measured / predicted)`` +0.4 to +0.7).

        The kernel is :func:`calib.kernels.empty_kernel`, so ``b`` is what the runtime spends per
        work-item that does nothing (PoCL removes the empty work-item loop: b ~ 0, a 6.6 ns on
        this 2-core device). The idle kernel (:func:`calib.kernels.nop_kernel`, a compare and a
        never-taken store) gives b = 0.23 ns per work-item here: its own body run as scalar code,
        which the model already charges from a kernel's operation counts (charged again, it
        moved ds1's streaming kernels such as ew_saxpy from 0.95x to 2.7x their measured time)."""
        kern = K.empty_kernel()
        top = _pow2_floor(min(self.max_wg, 1024))
        lsizes = [1 << i for i in range(top.bit_length())]
        if self.opt.quick:
            lsizes = [ls for ls in lsizes if ls.bit_length() % 2 == 1 or ls == top]
        rows: list[tuple[float, float]] = []
        ys: list[float] = []
        for n_wg in WG_COUNTS:
            for ls in lsizes:
                total = n_wg * ls
                cfg = LaunchConfig((total,), (ls,), [ArgBinding("a", "buffer", "uint", 1, init="zeros")])
                m = self.measure(kern, cfg, f"work-groups {n_wg} of {ls}")
                if m is None:
                    continue
                rows.append((float(n_wg), float(total)))
                ys.append(self._stat(m))
        if len(ys) < 4:
            return
        try:
            fit = relative_linear_fit(rows, ys)
        except ValueError as e:
            self.profile.notes.append(f"wg: no fit ({e})")
            return
        a_us, b_us = fit.coef
        src = self.source("wg")
        span = (f"{len(ys)} launches: local sizes {lsizes[0]} to {lsizes[-1]}, "
                f"{', '.join(str(n) for n in WG_COUNTS)} work-groups of each, whole device with "
                f"{self.cu} compute units; fit T = launch + n_wg (a + b lsize) with relative residuals, launch "
                f"{fit.intercept:.3g} us")
        clamp = " (the fit gave {:.3g}; a cost cannot be negative)"
        self.profile.set("wg_overhead_us", max(a_us, 0.0), "us", src, r2=fit.r2,
                         notes="a: " + span + (clamp.format(a_us) if a_us < 0 else ""))
        self.profile.set("wi_overhead_ns", max(b_us, 0.0) * 1e3, "ns", src, r2=fit.r2,
                         notes="b: " + span + (clamp.format(b_us * 1e3) if b_us < 0 else ""))

    # -- the other compute units joining a launch -------------------------------------------

    def bench_join(self) -> None:
        """CPU devices with two or more compute units: ``cu_join_us``. A CPU runtime runs a launch
        on worker threads that sleep between launches; the thread that picks the launch up starts
        at once and the others only after they wake, so a launch of a few microseconds of work
        runs on one core whatever its work-groups (measured here: the dataset's multi-work-group
        launches under 10 us ran 1.6x slower than the model's even split, the one-work-group ones
        as predicted). The fp32 FMA kernel (:func:`calib.kernels.op_kernel`, one chain) runs the
        same work-items as one work-group (one compute unit: the work ``W``) and as
        :data:`JOIN_WG_PER_CU` work-groups per compute unit (``T``), for loop counts that give
        ``W`` of :data:`JOIN_WORK_US`; both alternate per size so that a change of the host's load
        falls on both, and the launch and work-group costs (``wg``, where measured) are taken off.
        The delay is the one whose :func:`calib.fits.join_time` fits every ``(W, T)`` best
        (relative errors)."""
        if "CPU" not in (self.device.type or "").upper() or self.cu < 2:
            return
        kern = K.op_kernel("fp32_fma", 1, 1)
        items = _pow2_floor(min(self.max_wg, 1024))
        ls = self._fit_lsize(items, max(1, items // (self.cu * JOIN_WG_PER_CU)))
        groups = items // ls
        reps = 10 if self.opt.quick else 30
        pol = TimingPolicy(warmup=2, min_repeats=reps, min_time_s=0.02, max_repeats=100 * reps, max_time_s=5.0)
        launch_us = self.state.launch_s * 1e6
        wg_us = self.profile.get("wg_overhead_us") or 0.0

        def busy(lsize: int, iters: int) -> float | None:
            m = self.measure(kern, self.op_config("fp32_fma", 1, items, lsize, iters),
                             f"join: {items // lsize} work-group(s) of {lsize}, x{iters}", policy=pol)
            return None if m is None else max(self._stat(m) - launch_us - items // lsize * wg_us, 1e-3)

        one = busy(items, 64)
        if one is None:
            return
        per_iter = one / 64
        work: list[float] = []
        shared: list[float] = []
        for target in JOIN_WORK_US[::2] if self.opt.quick else JOIN_WORK_US:
            iters = int(min(MAX_ITERS, max(1, round(target / per_iter))))
            w, t = busy(items, iters), busy(ls, iters)
            if w is None or t is None:
                return
            work.append(w)
            shared.append(t)
        try:
            join_us, rms = join_fit(work, shared, self.cu, groups)
        except ValueError as e:
            self.profile.notes.append(f"join: no fit ({e})")
            return
        pts = ", ".join(f"{w:.3g}->{t:.3g}" for w, t in zip(work, shared))
        self.profile.set("cu_join_us", join_us, "us", self.source("join"), notes=(
            f"{items} work-items of the fp32 FMA loop as 1 work-group (one compute unit: W) and as {groups} of {ls} "
            f"on {self.cu} compute units (T), launch and work-group costs taken off; W->T in us "
            f"({self.opt.statistic}): {pts}; "
            f"fit T = min(W, max(J + (W - J) / {min(groups, self.cu)}, J + W / {groups})), rms log error {rms:.3f}"))

    # -- barriers --------------------------------------------------------------------------

    def _barrier_costs(self, kern: Kernel, lsizes: Sequence[int], label: str) -> tuple[list[float], list[float]]:
        """ns per barrier per work-group of ``kern`` (:func:`calib.kernels.barrier_kernel`) at each
        local size: the slope of time against the number of barriers, one work-group per compute
        unit (sizes whose launches failed are left out)."""
        n_wg = self.cu
        target = self.opt.launch_target_s

        def cfg(ls: int, nb: int) -> LaunchConfig:
            return LaunchConfig((n_wg * ls,), (ls,), [ArgBinding("out", "buffer", "float", n_wg * ls, init="zeros"),
                                                      ArgBinding("l", "local", "float", ls),
                                                      ArgBinding("nb", "scalar", "uint", value=int(nb))])

        xs: list[float] = []
        per: list[float] = []
        for ls in lsizes:
            m0 = self.measure(kern, cfg(ls, 0), f"{label} wg{ls} x0")
            probe = 256
            m1 = self.measure(kern, cfg(ls, probe), f"{label} wg{ls} x{probe}")
            if m0 is None or m1 is None:
                continue
            pts_n, pts_t = [0.0, float(probe)], [self._stat(m0), self._stat(m1)]
            est = max((pts_t[1] - pts_t[0]) * 1e-6 / probe, 1e-10)
            n_max = int(min(1 << 26, max(4 * probe, target / est)))
            for nb in ([n_max] if self.opt.quick else [n_max // 2, n_max]):
                m = self.measure(kern, cfg(ls, nb), f"{label} wg{ls} x{nb}")
                if m is not None:
                    pts_n.append(float(nb))
                    pts_t.append(self._stat(m))
            xs.append(float(ls))
            per.append(linear_fit(pts_n, pts_t).slope * 1e3)
        return xs, per

    def bench_barrier(self) -> None:
        """Cost of a barrier per work-group and per work-item: for each local size, the slope of
        time against the number of barriers of :func:`calib.kernels.barrier_kernel` (one
        work-group per compute unit), then a line of those slopes against the local size above the
        sizes the runtime unrolls (:func:`calib.fits.unrolled_group_size`). The whole curve is kept
        (``barrier_vs_local_size``), and the same measurement with regions of
        :data:`calib.kernels.HEAVY_REGION` updates says up to which group size a kernel's barriers
        are unrolled away (``barrier_unrolled_items``; a larger region is unrolled in smaller groups
        only)."""
        cap = min(self.max_wg, 1024, max(1, self.device.local_mem_bytes // 8))
        lsizes = sorted({ls for ls in BARRIER_LOCAL_SIZES if ls <= cap} or {_pow2_floor(cap)})
        xs, per = self._barrier_costs(K.barrier_kernel(), lsizes, "barrier")
        if not xs:
            return
        src = self.source("barrier")
        details = ", ".join(f"{int(x)}: {v:.3g} ns" for x, v in zip(xs, per))
        how = (f"slopes of device time against barriers in a loop whose regions update one local value per "
               f"work-item, {self.cu} work-groups (one per compute unit), per barrier per work-group by local "
               f"size: {details}")
        if len(xs) < 2:
            self.profile.set("barrier_ns", per[0], "ns", src, notes=how)
            return
        self.profile.curves["barrier_vs_local_size"] = Curve(
            xs, [max(v, 0.0) for v in per], "work-items", "ns", src,
            notes="device time per barrier per work-group by work-items per group; " + how)
        light = unrolled_group_size(xs, per)
        above = [i for i, x in enumerate(xs) if x > light]
        line = above if len(above) >= 2 else list(range(len(xs)))
        fit = linear_fit([xs[i] for i in line], [per[i] for i in line])
        # the per-group part is the time of a barrier in the smallest group, measured directly:
        # the intercept of the line is the small difference of large numbers (under load its
        # spread over 3 runs was 320 %), and a runtime may run a small group quite differently
        # (PoCL 3.1: 1 ns per barrier in groups of 8 to 32, 40-75 ns in groups of 64)
        self.profile.set("barrier_ns", per[0], "ns", src, notes=(
            f"per barrier of a group of {int(xs[0])} work-items (the smallest measured; the line's intercept "
            f"is {fit.intercept:.3g} ns); " + how))
        self.profile.set("barrier_wi_ns", max(fit.slope, 0.0), "ns", src, r2=fit.r2, notes=(
            f"slope of a line over the local sizes {', '.join(str(int(xs[i])) for i in line)}"
            + (f" (above {int(light)}, the largest group whose barriers the runtime unrolls away)" if light else "")
            + "; " + how))
        small = [ls for ls in lsizes if ls <= BARRIER_UNROLL_PROBE_MAX]
        hx, hper = self._barrier_costs(K.barrier_kernel(K.HEAVY_REGION), small, "barrier heavy")
        # a heavier region is unrolled in groups no larger than the light one is
        n = flat_run(hper)
        heavy = min(light, hx[n - 1]) if light and n >= 2 else 0.0
        if len(hx) >= 2:
            self.profile.set("barrier_unrolled_items", heavy, "work-items", src, notes=(
                f"the largest work-group whose barriers cost almost nothing (the runtime unrolls its work-item "
                f"loop), with regions of {K.HEAVY_REGION} local updates per work-item: the largest size, up to the "
                f"one-update kernel's, whose cost per barrier per work-group stays within {UNROLL_FLAT:g}x of the "
                f"smallest group's ("
                + ", ".join(f"{int(x)}: {v:.3g} ns" for x, v in zip(hx, hper))
                + f"); {int(light)} with one update per region" + ("" if heavy else "; 0: no flat cost measured")))

    # -- atomics ---------------------------------------------------------------------------

    def atomic_config(self, space: str, items: int, ls: int, bins: int | None, iters: int) -> LaunchConfig:
        """``bins`` None: every work-item on its own element; else a power of two."""
        mask = (bins - 1) if bins else ls - 1
        if space == "global":
            arr = [ArgBinding("bins", "buffer", "uint", max(items, bins or 1), init="zeros")]
        else:
            arr = [ArgBinding("out", "buffer", "uint", items, init="zeros"),
                   ArgBinding("l", "local", "uint", max(ls, bins or 1))]
        return LaunchConfig((items,), (ls,), arr + [
            ArgBinding("mask", "scalar", "uint", value=int(mask)),
            ArgBinding("own", "scalar", "uint", value=0 if bins else 1),
            ArgBinding("iters", "scalar", "uint", value=int(iters))])

    def bench_atomic(self) -> None:
        """Rate of ``atomic_add`` on ``uint`` (:func:`calib.kernels.atomic_kernel`), whole device:
        global and local, each work-item on its own element (``atomic_<space>_gops``) and all
        work-items of the launch on 1, 16, 256, 4096 bins (``atomic_<space>_b<bins>_gops``; local:
        the bins of one work-group). Four work-groups of 256 work-items per compute unit; the loop
        count is scaled until a launch takes the target time; rate = atomics / (time - launch).
        On a CPU an atomic is a locked read-modify-write of a cache line: the cores serialise on
        it and a line used by two cores moves between them on every update."""
        ls = self._fit_lsize(self.cu * 1024, min(256, self.max_wg))
        items = self.cu * 4 * ls
        target = self.opt.launch_target_s
        src = self.source("atomic")
        for space in ("global", "local"):
            kern = K.atomic_kernel(space)
            points: list[int | None] = [None, *K.ATOMIC_BINS]
            if space == "local":
                points = [b for b in points if b is None or b * 4 <= self.device.local_mem_bytes // 2]
            for bins in points:
                iters = 16
                m: Measurement | None = None
                t = 0.0
                for _ in range(6):
                    m = self.measure(kern, self.atomic_config(space, items, ls, bins, iters),
                                     f"atomic {space} {'own' if bins is None else f'{bins} bins'} x{iters}")
                    if m is None:
                        break
                    t = self._stat(m) * 1e-6
                    if t >= 0.5 * target or iters >= MAX_ITERS:
                        break
                    busy = max(t - self.state.launch_s, 0.05 * t, 1e-7)
                    iters = int(min(MAX_ITERS, max(2 * iters, math.ceil(iters * target / busy))))
                if m is None or t <= 0:
                    continue
                assert m.time is not None
                busy = max(t - self.state.launch_s, 1e-9)
                rate = items * iters / busy
                key = f"atomic_{space}_gops" if bins is None else f"atomic_{space}_b{bins}_gops"
                what = ("each work-item on its own element (no contention)" if bins is None else
                        f"all work-items{' of a work-group' if space == 'local' else ''} on {bins} bin(s) chosen "
                        f"pseudo-randomly per update")
                self.profile.set(key, rate / 1e9, "Gop/s", src, notes=(
                    f"atomic_add(uint) on {space} memory, {what}: {items} work-items in work-groups of {ls}, "
                    f"{iters} atomics each: {t * 1e6:.4g} us per launch (median; launch spread IQR/median "
                    f"{m.time.iqr_us / max(m.time.median_us, 1e-12):.3f}); {1e9 * self.cu / rate:.3g} ns per atomic "
                    f"per compute unit"))

    def bench_gather(self) -> None:
        """Rate of gathered loads (elements/s, whole device) in code the runtime vectorizes across
        work-items: :func:`calib.kernels.gather_kernel` (16 loads per work-item at computed
        pseudo-random indices of a 16 KiB table, ``gather_gops``) and
        :func:`calib.kernels.clamped_gather_kernel` (the same loads at clamped indices next to the
        work-item's own, consecutive across lanes: ``gather_clamped_gops``), each at two numbers of
        work-items; the rate is the slope, so the launch and fixed costs cancel."""
        ls = self._fit_lsize(1 << 16, min(256, self.max_wg))
        table = 4096
        small = 1 << 16
        for kern, key, what in ((K.gather_kernel(), "gather_gops", "at computed pseudo-random indices"),
                                (K.clamped_gather_kernel(), "gather_clamped_gops",
                                 "at clamped indices next to the work-item's own (t[min(j + k, mask)])")):
            label = "gather" if key == "gather_gops" else "clamped gather"
            pts: list[tuple[int, float]] = []
            for items in (small, small * 8):
                cfg = LaunchConfig((items,), (ls,), [ArgBinding("t", "buffer", "float", table, init="ones"),
                                                     ArgBinding("out", "buffer", "float", items, init="zeros"),
                                                     ArgBinding("mask", "scalar", "uint", value=table - 1)])
                m = self.measure(kern, cfg, f"{label} {items} work-items")
                if m is None:
                    return
                pts.append((items, self._stat(m) * 1e-6))
            (n1, t1), (n2, t2) = pts
            if t2 <= t1:
                self.profile.notes.append(f"{label}: no slope ({t1 * 1e6:.3g} us, {t2 * 1e6:.3g} us)")
                continue
            rate = (n2 - n1) * K.GATHER_LOADS / (t2 - t1)
            self.profile.set(key, rate / 1e9, "Gop/s", self.source("gather"), notes=(
                f"gathered float loads per second: {K.GATHER_LOADS} loads per work-item {what} of a "
                f"{table * 4 // 1024} KiB table, {n1} and {n2} work-items in work-groups of {ls}: "
                f"{t1 * 1e6:.4g} and {t2 * 1e6:.4g} us (slope; includes two integer operations per load); "
                f"{1e9 * self.cu / rate:.3g} ns per load per compute unit"))

    def bench_stride(self) -> None:
        """CPU devices: the cost of one cache line fetched by a work-item loop whose every trip
        lands on another page (:func:`calib.kernels.strided_kernel`, a grid-stride sum), in ns
        per 64-byte line per compute unit, over a buffer in the middle of each cache level but the
        first (``..._level{i}_ns``) and over 4x the last level (at least 64 MiB), each twice: long
        walks (:data:`~calib.kernels.STRIDE_ITEMS` work-items, hundreds of trips and pages each:
        ``strided_line...``) and short ones (as many work-items as make
        :data:`~calib.kernels.STRIDE_SHORT_TRIPS` trips each: ``strided_short...``), whose pages
        the first-level TLB holds, and tiny ones (:data:`~calib.kernels.STRIDE_TINY_TRIPS` trips:
        ``strided_tiny...``), whose few concurrent page streams the prefetchers follow (measured
        here from memory: 13 ns per line at 4 and 8 trips, 42 at 16, 148 at 1,024, against 7.3 at
        the streaming bandwidth). The launch overhead is taken off."""
        if "CPU" not in (self.device.type or "").upper():
            return
        levels = self.host_levels()
        caps = [float(lv.total_bytes(self.cu)) for lv in levels]
        windows = level_windows(caps) if caps else []
        llc = caps[-1] if caps else 32.0 * MiB
        points: list[tuple[str, int]] = []
        for i, (lo, hi) in enumerate(windows[:-1]):
            size = int(math.sqrt(max(lo, 1.0) * hi)) // 4096 * 4096
            if i > 0 and lo < hi and size >= 64 * KiB:
                points.append((f"_level{i}_ns", size))
        points.append(("_ns", int(max(64 * MiB, 4 * llc))))
        cap = self._cap_bytes()
        kern = K.strided_kernel()
        reps = 3 if self.opt.quick else 7
        for suffix, nbytes in points:
            if nbytes > cap:
                self.profile.notes.append(f"stride: needs a {fmt_bytes(nbytes)} buffer; the cap is {fmt_bytes(cap)}")
                continue
            n = nbytes // 4
            short_items = _pow2_floor(max(1, n // K.STRIDE_SHORT_TRIPS))
            tiny_items = _pow2_floor(max(1, n // K.STRIDE_TINY_TRIPS))
            for key, items in (("strided_line" + suffix, K.STRIDE_ITEMS), ("strided_short" + suffix, short_items),
                               ("strided_tiny" + suffix, tiny_items)):
                if items * 4 < 4096 or items > (1 << 26):
                    continue                      # trips of less than a page, or too many work-items
                ls = self._fit_lsize(items, min(256, self.max_wg))
                cfg = LaunchConfig((items,), (ls,), [ArgBinding("in", "buffer", "float", n, init="ones"),
                                                     ArgBinding("out", "buffer", "float", items, init="zeros"),
                                                     ArgBinding("n", "scalar", "uint", value=n)])
                pol = TimingPolicy(warmup=1, min_repeats=reps, min_time_s=0.02, max_repeats=50 * reps,
                                   max_time_s=10.0)
                m = self.measure(kern, cfg, f"stride {fmt_bytes(nbytes)} {items} work-items", policy=pol)
                if m is None:
                    continue
                t = self._stat(m) * 1e-6
                busy = max(t - self.state.launch_s, 0.05 * t)
                line_ns = busy * self.cu / (nbytes / 64) * 1e9
                where = ("past the last cache level" if suffix == "_ns"
                         else f"inside cache level {suffix[6:-3]}")
                bw = self.profile.get("dram_bw_gbs")
                self.profile.set(key, line_ns, "ns", self.source("stride"), notes=(
                    f"a grid-stride sum of floats by {items} work-items in work-groups of {ls} ({-(-n // items)} "
                    f"trips of {fmt_bytes(items * 4)} per work-item) over {fmt_bytes(nbytes)} ({where}): "
                    f"{t * 1e3:.4g} ms (median); ns per 64-byte line per compute unit"
                    + (f", against {64 / bw * self.cu:.3g} ns at the streaming DRAM bandwidth"
                       if bw and suffix == "_ns" else "")))

    def bench_cond(self) -> None:
        """CPU devices: ``wi_store_ns`` and ``wi_cond_store_ns``, the device time per work-item
        (times the compute units) of an elementwise store, plain and under ``if (i < n)``
        (:func:`calib.kernels.store_kernel`), and ``wi_call_ns``, the same body with a call of
        ``fmax`` (:func:`calib.kernels.call_kernel`): each the slope between
        :data:`~calib.kernels.COND_ITEMS` and 4x as many work-items, so the launch and work-group
        costs cancel. ``wi_libcall_ns`` = ``wi_call_ns - wi_store_ns``, what the call adds (the call,
        and the work-item loop left scalar where the runtime calls out of line). The ratios to the
        plain store tell the analytical model whether this runtime vectorizes a work-item loop with a
        conditional store (``models.analytical.COND_STORE_SCALAR_RATIO``) and whether it calls its
        builtins out of line (``models.analytical.LIBCALL_SCALAR_RATIO``). The three kernels are
        measured in turn, size by size, so that a change of the host's load falls on all three."""
        if "CPU" not in (self.device.type or "").upper():
            return
        reps = 10 if self.opt.quick else 30
        pol = TimingPolicy(warmup=2, min_repeats=reps, min_time_s=0.05, max_repeats=100 * reps, max_time_s=10.0)
        got: dict[str, float] = {}
        cases = {"wi_store_ns": K.store_kernel(False), "wi_cond_store_ns": K.store_kernel(True),
                 "wi_call_ns": K.call_kernel()}
        times: dict[str, list[tuple[int, float]]] = {k: [] for k in cases}
        for items in (K.COND_ITEMS, 4 * K.COND_ITEMS):
            for key, kern in cases.items():
                ls = self._fit_lsize(items, min(256, self.max_wg))
                cfg = LaunchConfig((items,), (ls,), [ArgBinding("a", "buffer", "float", items, init="ones"),
                                                     ArgBinding("b", "buffer", "float", items, init="ones"),
                                                     ArgBinding("c", "buffer", "float", items, init="zeros"),
                                                     ArgBinding("s", "scalar", "float", value=0.5),
                                                     ArgBinding("n", "scalar", "int", value=items)])
                m = self.measure(kern, cfg, f"cond {kern.name} {items} work-items", policy=pol)
                if m is None:
                    return
                times[key].append((items, self._stat(m) * 1e-6))
        for key, kern in cases.items():
            (n1, t1), (n2, t2) = times[key]
            if t2 <= t1:
                self.profile.notes.append(f"cond: no slope for {key} ({t1 * 1e6:.3g} us, {t2 * 1e6:.3g} us)")
                return
            got[key] = (t2 - t1) / (n2 - n1) * self.cu * 1e9
            self.profile.set(key, got[key], "ns", self.source("cond"), notes=(
                f"{kern.name}: {n1} and {n2} work-items, {t1 * 1e6:.4g} and {t2 * 1e6:.4g} us (median; slope); "
                f"ns per work-item per compute unit"))
        plain = got["wi_store_ns"]
        call = max(got["wi_call_ns"] - plain, 0.0)
        self.profile.set("wi_libcall_ns", call, "ns", self.source("cond"), notes=(
            "wi_call_ns - wi_store_ns: what a call of fmax adds per work-item per compute unit"))
        self.profile.notes.append(
            f"cond: per work-item, a guarded store costs {got['wi_cond_store_ns'] / plain:.2f}x the plain one, a "
            f"builtin call {got['wi_call_ns'] / plain:.2f}x")

    # -- host-side launch overhead ---------------------------------------------------------

    def bench_host(self) -> None:
        if self.on_step is not None:
            self.on_step("host launch overhead")
        res = measure_host_overhead(self.device)
        if "error" in res:
            self.profile.notes.append(f"host launch overhead not measured: {res['error']}")
            return
        src = self.source("host")
        self.profile.set("host_launch_latency_us", res["sync_us"], "us", src, notes=(
            f"median host wall time of enqueue + wait of an empty 1-work-item kernel over {res['n']} launches "
            f"(pyopencl, in a separate process; includes Python call overhead of about 1-3 us)"))
        self.profile.set("host_launch_throughput_us", res["batch_us"], "us", src, notes=(
            f"host wall time per launch of {res['n']} back-to-back launches of the same kernel, one wait at the end"))

    # -- energy ----------------------------------------------------------------------------

    def bench_energy(self) -> None:
        """See :func:`calib.energy_bench.bench_energy` (imported here: it builds on this module)."""
        from kernelcast.calib.energy_bench import bench_energy

        bench_energy(self)


def run_calibration(device: DeviceInfo, runner: Runner, energy_runner: Runner | None = None,
                    options: CalibOptions | None = None, meter: str = "none",
                    on_step: Callable[[str], None] | None = None,
                    on_bench: Callable[[str], None] | None = None) -> tuple[DeviceProfile, Calibrator]:
    """Convenience: build a :class:`Calibrator`, run it, return the profile and the calibrator."""
    cal = Calibrator(device, runner, energy_runner, options, on_step=on_step, on_bench=on_bench, meter=meter)
    return cal.run(), cal


def values_table(profile: DeviceProfile, names: Sequence[str] | None = None) -> list[list[Any]]:
    """Rows (name, value, units, r2, source) for printing."""
    rows = []
    for k in names or list(profile.values):
        v = profile.values[k]
        src = v.source if len(v.source) <= 48 else v.source[:45] + "..."
        rows.append([k, float(v.value), v.units, None if v.r2 is None else round(v.r2, 4), src])
    return rows

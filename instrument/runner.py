"""Running one (kernel, configuration) on an open device and timing it.

This is what the worker process executes; it knows nothing of processes or timeouts (see
:mod:`instrument.harness`) nor of the compute API: it talks to a
:class:`~instrument.backends.base.Backend`. Times are the device's own (OpenCL profiling
events); energy comes from whichever :class:`~instrument.meters.base.EnergyMeter` the harness
passes in.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from kernelcast.instrument.backends.base import (
    Backend,
    BackendError,
    BoundArgs,
    ConfigError,
    DeviceInfo,
    Driver,
    Restore,
)
from kernelcast.instrument.machine import MachineProbe
from kernelcast.instrument.meters.base import EnergyMeter, MeterReading
from kernelcast.instrument.state import changed, maybe_read_buffers

from kernelcast.clang import KernelParam, ParseError, kernel_signatures
from kernelcast.cuda import cuda_kernel_info
from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement, Status, TimeStats

log = logging.getLogger(__name__)

HARNESS_VERSION = "2"   # 2: state-consuming kernels restored before every launch; machine state

#: most bytes of buffers compared / copied for the state check of one configuration; above it
#: the kernel's launches are timed on the state they leave (and the row says "unchecked")
STATE_CHECK_BYTES = 512 << 20
#: kernels whose first launch took longer get no warm-up launches beyond it
WARMUP_BELOW_US = 1000.0


@dataclass
class TimingPolicy:
    """How many times to launch.

    After ``warmup`` launches, repeat until at least ``min_repeats`` samples *and*
    ``min_time_s`` of summed kernel time (so microsecond kernels get many repeats), but stop at
    ``max_repeats`` samples or ``max_time_s`` of wall time, whichever comes first. A meter's
    ``min_window_s`` extends the window (and may exceed ``max_repeats``).

    A sample is one launch's device time, except for kernels shorter than ``group_us``: then a
    sample is the interquartile mean of a group of back-to-back launches summing to about
    ``group_us`` (at most ``max_group``), so a preempted launch or the timer's granularity does
    not make the sample (``group_us=0``: one launch per sample)."""

    warmup: int = 2
    min_repeats: int = 10
    min_time_s: float = 0.1
    max_repeats: int = 1000
    max_time_s: float = 10.0
    idle_s: float = 0.5          # idle-power measurement before the window (meters that can)
    seed: int = 0                # buffer contents
    group_us: float = 1000.0     # target device time of one sample of a short kernel (0: no groups)
    max_group: int = 256
    guard_bytes: int = 4096


def pool_rounds(rounds: list[Measurement]) -> Measurement:
    """One configuration measured in several rounds (interleaved with other configurations, so that
    a host that slows down in phases slows them alike) as one measurement: the first round's record
    with the time statistics of its ok rounds, each round weighing the same
    (:meth:`TimeStats.from_windows`), and the median of their energy and power; the first round as
    it is when none is ok."""
    ok = [m for m in rounds if m.status == "ok" and m.time is not None]
    if not ok:
        return rounds[0]
    if len(ok) == 1:
        return ok[0]
    windows = [list(m.time.times_us) for m in ok]          # type: ignore[union-attr]

    def median_of(name: str) -> float | None:
        vals = [getattr(m, name) for m in ok if getattr(m, name) is not None]
        return float(np.median(vals)) if vals else None

    return replace(ok[0], time=TimeStats.from_windows(windows, group=ok[0].time.group),  # type: ignore[union-attr]
                   energy_j=median_of("energy_j"), dynamic_energy_j=median_of("dynamic_energy_j"),
                   avg_power_w=median_of("avg_power_w"),
                   wall_s=sum(m.wall_s or 0.0 for m in ok))


def validate_geometry(info: DeviceInfo, gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> None:
    """Raise :class:`ConfigError` for a launch the device cannot run."""
    if not 1 <= len(gsize) <= 3:
        raise ConfigError(f"global size must have 1-3 dimensions, got {len(gsize)}")
    if any(g <= 0 for g in gsize):
        raise ConfigError(f"global size {gsize} has a non-positive dimension")
    if lsize is None:
        return
    if len(lsize) != len(gsize):
        raise ConfigError(f"local size {lsize} and global size {gsize} differ in dimensions")
    if any(x <= 0 for x in lsize):
        raise ConfigError(f"local size {lsize} has a non-positive dimension")
    for d, (g, loc) in enumerate(zip(gsize, lsize)):
        if g % loc:
            raise ConfigError(f"local size {loc} does not divide global size {g} in dimension {d}")
        if loc > info.max_work_item_sizes[d]:
            raise ConfigError(f"local size {loc} exceeds the device's maximum {info.max_work_item_sizes[d]} "
                              f"in dimension {d}")
    n = int(np.prod(lsize))
    if n > info.max_work_group_size:
        raise ConfigError(f"work-group of {n} work-items exceeds the device's maximum {info.max_work_group_size}")


def run_config(backend: Backend, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy,
               meter: EnergyMeter, phase: Callable[[str], None] | None = None, want_outputs: bool = False,
               readback: list[str] | None = None, arrays: dict[str, np.ndarray] | None = None) -> Measurement:
    """Build, bind, check and time one configuration on ``backend``. Never raises for kernel
    faults that the driver reports as errors; those become statuses."""
    info = backend.device
    t_wall = time.perf_counter()
    m = Measurement(
        kernel_id=kernel.id, kernel_name=kernel.name, device=info.name,
        gsize=tuple(config.gsize), lsize=tuple(config.lsize) if config.lsize else None,
        args=[arg_dict(a) for a in config.args], status="ok", meter=meter.name,
        harness_version=HARNESS_VERSION,
    )

    def done(status: Status, reason: str = "") -> Measurement:
        m.status, m.reason = status, reason
        m.wall_s = time.perf_counter() - t_wall
        return m

    try:
        validate_geometry(info, m.gsize, m.lsize)
    except ConfigError as e:
        return done("invalid_config", str(e))

    br = backend.build(kernel)
    m.build_s = br.seconds
    if phase is not None:
        phase("built")
    if not br.ok:
        m.compile_log = br.log[-20000:]
        return done("compile_error", _first_error_line(br.log))
    if not backend.has_kernel(br.program, kernel.name):
        return done("invalid_config", f"no kernel named {kernel.name!r} in the program")
    try:
        params = _params(kernel)
    except ParseError as e:
        return done("compile_error", f"libclang: {e}")
    if params is None:
        return done("invalid_config", f"libclang found no kernel {kernel.name!r}")

    try:
        bound = backend.bind(params, config.args, policy.seed, policy.guard_bytes, arrays, digests=want_outputs)
    except ConfigError as e:
        return done("invalid_config", str(e))
    except BackendError as e:
        return done("runtime_error", f"allocating buffers: {e}")
    forced = {a.name for a in config.args if a.kind == "buffer" and a.reset_each_run}
    readable = _readable(kernel.source, kernel.name, tuple(p.name for p in params if p.kind == "buffer"))
    try:
        status, reason = _run_bound(backend, br.program, kernel.name, bound, m, policy, meter,
                                    want_outputs, readback, forced, readable)
    finally:
        backend.release(bound)
    return done(status, reason)


def _run_bound(backend: Backend, program: Driver, name: str, bound: BoundArgs, m: Measurement,
               policy: TimingPolicy, meter: EnergyMeter, want_outputs: bool,
               readback: list[str] | None, forced: set[str] | None = None,
               readable: frozenset[str] = frozenset()) -> tuple[Status, str]:
    """Launch a bound kernel: the first launch (bounds check, outputs, state check), warm-up,
    the timed window; fills ``m`` and returns (status, reason)."""
    try:
        knl = backend.prepare(program, name, bound)
    except BackendError as e:
        return "invalid_config", f"setting arguments: {e}"
    restores: list[Restore] = []
    try:
        return _launches(backend, knl, bound, m, policy, meter, want_outputs, readback, forced or set(),
                         readable, restores)
    finally:
        for r in restores:
            backend.free(r.pristine)


def _launches(backend: Backend, knl: Driver, bound: BoundArgs, m: Measurement, policy: TimingPolicy,
              meter: EnergyMeter, want_outputs: bool, readback: list[str] | None, forced: set[str],
              readable: frozenset[str], restores: list[Restore]) -> tuple[Status, str]:
    gsize, lsize = m.gsize, m.lsize

    # buffers the kernel may read and write (or the caller wants reset): snapshot before the first launch
    watch = [b for b in bound.buffers if b.name in forced or (b.is_output_candidate and b.name in readable)]
    before: dict[str, np.ndarray] = {}
    try:
        if sum(b.nbytes for b in watch) <= STATE_CHECK_BYTES:
            before = {b.name: backend.read_range(b, b.front, b.nbytes) for b in watch}
        else:
            m.state_reset = "unchecked"
    except BackendError as e:
        return "runtime_error", f"reading initial contents: {e}"

    # first launch from fresh inputs: bounds check and output digests
    try:
        first_us = backend.launch(knl, gsize, lsize)
        oob, digests = backend.check_guards(bound, digests=want_outputs)
    except ConfigError as e:     # a launch the device refuses (CUDA: too many resources for the block)
        return "invalid_config", f"first launch: {e}"
    except BackendError as e:
        return "runtime_error", f"first launch: {e}"
    if oob:
        return "out_of_bounds", oob
    for b in bound.buffers:
        if readback and b.name in readback:
            whole = backend.read_back(b)
            m.readback[b.name] = whole[b.front:b.front + b.nbytes].view(b.cltype.numpy).copy()
    if want_outputs:
        m.outputs = {
            b.name: {"sha256": digests[b.name][0].hex(), "sorted_sha256": digests[b.name][1].hex(),
                     "changed": digests[b.name][0] != b.host_digest, "output_candidate": b.is_output_candidate}
            for b in bound.buffers
        }

    # a launch that changed a buffer it may read leaves the next launch another problem
    try:
        consumed = [b for b in watch if b.name in before
                    and (b.name in forced or changed(before[b.name], backend.read_range(b, b.front, b.nbytes)))]
    except BackendError as e:
        return "runtime_error", f"state check: {e}"
    if consumed:
        m.reset_buffers = [b.name for b in consumed]
        try:
            for b in consumed:
                restores.append(Restore(b, backend.upload(before.pop(b.name))))
            m.state_reset = "restore"
        except BackendError as e:
            log.info("%s: no room for pristine copies (%s); timing the first launch only", m.kernel_name, e)
            m.state_reset = "single"
    before.clear()
    if m.state_reset == "single":
        m.time = TimeStats.from_times([first_us])
        m.machine = {"window_s": 0.0}
        return "ok", ""

    try:
        # the first launch warmed caches and the runtime: extra warm-up launches only for kernels
        # under 1 ms, where they cost little
        backend.enqueue(knl, gsize, lsize, policy.warmup if first_us < WARMUP_BELOW_US else 0, restore=restores)
        backend.synchronize()
        if meter.preheat_s > 0:
            t_end = time.perf_counter() + meter.preheat_s
            while time.perf_counter() < t_end:
                backend.enqueue(knl, gsize, lsize, restore=restores)
                backend.synchronize()
        idle_w = meter.measure_idle(policy.idle_s) if meter.name != "none" else None
        probe = MachineProbe()
        # a launch of 50 ms or more on the initial state is as good as the next ones (measured: first
        # / next within 0.6-1.1x under load, README): it counts as the first sample, when no meter
        # needs the device busy through its window
        initial = [first_us] if first_us >= 5e4 and meter.name == "none" else []
        times, group, reading = _timed_window(backend, knl, gsize, lsize, policy, meter, first_us, restores,
                                              initial)
        m.machine = probe.stop()
        oob, _ = backend.check_guards(bound)
    except BackendError as e:
        return "runtime_error", f"timed launches: {e}"
    if oob:
        return "out_of_bounds", f"during repeats: {oob}"

    m.time = TimeStats.from_times(times, group)
    n = len(times) * group
    m.meter, m.meter_method = reading.meter, reading.method
    m.meter_samples, m.meter_window_s = reading.samples, reading.duration_s
    m.idle_power_w = reading.idle_power_w if reading.idle_power_w is not None else idle_w
    if reading.energy_j is not None:
        m.energy_j = reading.energy_j / n
        m.avg_power_w = reading.avg_power_w
        if reading.dynamic_energy_j is not None:
            m.dynamic_energy_j = reading.dynamic_energy_j / n
    m.device_state.update(reading.device_state)
    return "ok", ""


def _iq_mean(x: np.ndarray) -> float:
    """Mean of the values between the quartiles (all of them for fewer than 4)."""
    if len(x) < 4:
        return float(x.mean())
    q1, q3 = np.percentile(x, [25, 75])
    mid = x[(x >= q1) & (x <= q3)]
    return float(mid.mean()) if len(mid) else float(np.median(x))


def group_size(policy: TimingPolicy, est_us: float) -> int:
    """Launches per sample for a kernel of ``est_us``."""
    if policy.group_us <= 0 or est_us >= policy.group_us / 2:
        return 1
    return int(min(policy.max_group, max(1, policy.group_us // max(est_us, 0.05))))


def _timed_window(backend: Backend, knl: Driver, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                  policy: TimingPolicy, meter: EnergyMeter, est_us: float,
                  restores: list[Restore] | None = None,
                  initial: list[float] | None = None) -> tuple[list[float], int, MeterReading]:
    """Launch in batches (so the device stays busy for the meter), collecting samples of device
    time (one launch each, or the interquartile mean of a group for short kernels); returns the
    samples, the launches per sample and the meter's reading."""
    restore = restores or ()
    group = 1
    if policy.group_us > 0 and est_us < policy.group_us / 2:
        # the first launch is cold: the group size comes from a short warm probe (not sampled)
        probe = backend.launch_batch(knl, gsize, lsize, 8, restore=restore)
        est_us = float(np.median(probe))
        group = group_size(policy, est_us)
    times: list[float] = list(initial or []) if group == 1 else []
    kernel_s = sum(times) * 1e-6
    est_s = max(est_us * group * 1e-6, 1e-6)       # per sample
    t0 = time.perf_counter()
    meter.start()
    try:
        while True:
            elapsed = time.perf_counter() - t0
            enough_timing = len(times) >= policy.min_repeats and kernel_s >= policy.min_time_s
            window_ok = elapsed >= meter.min_window_s
            if (enough_timing and window_ok) or (elapsed >= policy.max_time_s and len(times) >= 1):
                break
            if len(times) >= policy.max_repeats and window_ok:
                break
            # a batch of about 50 ms of device time, at least 1 sample
            batch = int(min(max(1, 0.05 / est_s), max(1, 1000 // group)))
            if not enough_timing:
                need = max(policy.min_repeats - len(times), 1)
                batch = min(batch, max(need, int((policy.min_time_s - kernel_s) / est_s) + 1))
            if window_ok:
                batch = min(batch, max(policy.max_repeats - len(times), 1))
            new = np.asarray(backend.launch_batch(knl, gsize, lsize, batch * group, restore=restore))
            kernel_s += float(new.sum()) * 1e-6
            if group == 1:
                samples = new.tolist()
            else:
                samples = [_iq_mean(c) for c in new.reshape(batch, group)]
            times.extend(samples)
            est_s = max(float(np.median(samples)) * group * 1e-6, 1e-6)
    finally:
        reading = meter.stop()
    return times, group, reading


@functools.lru_cache(maxsize=256)
def _readable(source: str, name: str, buffers: tuple[str, ...]) -> frozenset[str]:
    return frozenset(maybe_read_buffers(source, name, buffers))


@functools.lru_cache(maxsize=256)
def _signatures(source: str, build_options: str) -> dict[str, list[KernelParam]]:
    return kernel_signatures(source, build_options)


@functools.lru_cache(maxsize=256)
def _cuda_params(source: str, name: str, build_options: str) -> list[KernelParam] | None:
    try:
        return cuda_kernel_info(source, name, build_options).params
    except ParseError as e:
        if "no __global__ kernel named" in str(e):
            return None
        raise


def _params(kernel: Kernel) -> list[KernelParam] | None:
    """The parameters of ``kernel`` (OpenCL C or CUDA), None when the source lacks it."""
    if kernel.language == "cuda":
        return _cuda_params(kernel.source, kernel.name, kernel.build_options)
    return _signatures(kernel.source, kernel.build_options).get(kernel.name)


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    return (text.strip().splitlines() or ["build failed"])[0][:300]


def arg_dict(a: ArgBinding) -> dict[str, Any]:
    d = {"name": a.name, "kind": a.kind, "dtype": a.dtype, "count": a.count,
         "value": None if a.value is None else str(a.value), "init": a.init}
    if a.reset_each_run:     # only when set, so rows of other bindings keep their shape
        d["reset_each_run"] = True
    return d

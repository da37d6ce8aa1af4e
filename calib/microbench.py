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
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from kernelcast.calib.bench_runner import (
    BENCHES,
    MAX_ITERS,
    BenchRunner,
    CalibOptions,
    CalibState,
    KiB,
    MiB,
    OpBest,
    Runner,
    StreamPoint,
    fmt_bytes,
    size_ladder,
)
from kernelcast.calib.compute_bench import (
    BARRIER_LOCAL_SIZES,
    BARRIER_UNROLL_PROBE_MAX,
    CHAIN_CLASSES,
    DEFAULT_CLASSES,
    JOIN_WG_PER_CU,
    JOIN_WORK_US,
    QUICK_CLASSES,
    QUICK_ROUTINE_CHAIN_CLASSES,
    QUICK_SCALAR_CLASSES,
    QUICK_WI_CLASSES,
    ROUTINE_CHAIN_CLASSES,
    SCALAR_CLASSES,
    WG_COUNTS,
    WI_CLASSES,
)
from kernelcast.calib.energy_bench import EnergyBenches
from kernelcast.calib.profile import DeviceProfile
from kernelcast.instrument.backends import DeviceInfo

from kernelcast.errors import InputError

log = logging.getLogger(__name__)


class HostBusyError(InputError):
    """The host is too busy to calibrate a CPU device (``--max-load``)."""



def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None



class Calibrator(EnergyBenches):
    """Runs the benchmarks and fills a :class:`DeviceProfile`.

    ``runner`` times kernels (a harness with meter ``none`` is best: no meter windows);
    ``energy_runner``, when given, is a harness with an energy meter and is used only by the
    ``energy`` benchmark. ``on_step`` is called with a label before every measurement. The benchmarks
    are methods of its bases (:mod:`calib.compute_bench`, :mod:`calib.memory_bench`,
    :mod:`calib.energy_bench`); this class runs them in order and checks the host's load.
    """

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


#: the names other modules import from here (the benchmarks' options, records and class lists live in
#: :mod:`calib.bench_runner` and :mod:`calib.compute_bench`)
__all__ = ["BARRIER_LOCAL_SIZES", "BARRIER_UNROLL_PROBE_MAX", "BENCHES", "CHAIN_CLASSES", "DEFAULT_CLASSES",
           "JOIN_WG_PER_CU", "JOIN_WORK_US", "MAX_ITERS", "QUICK_CLASSES", "QUICK_ROUTINE_CHAIN_CLASSES",
           "QUICK_SCALAR_CLASSES", "QUICK_WI_CLASSES", "ROUTINE_CHAIN_CLASSES", "SCALAR_CLASSES", "WG_COUNTS",
           "WI_CLASSES", "BenchRunner", "CalibOptions", "CalibState", "Calibrator", "HostBusyError", "KiB", "MiB",
           "OpBest", "Runner", "StreamPoint", "fmt_bytes", "run_calibration", "size_ladder", "values_table"]

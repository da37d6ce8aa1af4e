"""The calibration benchmarks of compute and launch costs (see :mod:`calib.microbench` for what each
reports): ``launch``, ``peak``, ``scalar``, ``chain``, ``wi``, ``wg``, ``join``, ``barrier``,
``atomic``, ``cond`` and ``host``."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from kernelcast.calib import kernels as K
from kernelcast.calib.bench_runner import MAX_ITERS, BenchRunner, OpBest, _pow2_floor
from kernelcast.calib.fits import (
    UNROLL_FLAT,
    flat_run,
    join_fit,
    linear_fit,
    relative_linear_fit,
    unrolled_group_size,
)
from kernelcast.calib.host_bench import measure_host_overhead
from kernelcast.calib.profile import Curve
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

log = logging.getLogger(__name__)

#: work-items per group the barrier benchmark measures (those up to the device's limit): from one
#: 256-bit vector of fp32 lanes, where a CPU runtime may unroll the group's work-item loop, to 1024
BARRIER_LOCAL_SIZES = (8, 16, 32, 64, 256, 1024)
#: work-groups per launch of the work-group benchmark (``Calibrator.bench_wg``), the counts of real
#: launches, from a few to thousands
WG_COUNTS = (16, 128, 1024, 4096)
#: the largest local size the heavier barrier kernel is measured at (it only looks for the unrolling step)
BARRIER_UNROLL_PROBE_MAX = 64
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
#: (PoCL 3.1 on a 2-core x86-64 CPU, a loop of 32 calls per work-item: a chain of sin calls ran 2.7x as long as
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
#: what such a call costs there, ``models.analytical.cpu_runtime.CPURuntimeClass._item_seconds``)
WI_CLASSES = ("fp32_fma", "fp32_add", "fp32_mul", "int32_add", "fp32_div", "fp64_fma",
              "exp", "sqrt", "rsqrt", "native_exp", "native_sin", "native_sqrt", "native_log", "native_rsqrt",
              "native_divide", "half_exp", "half_sin", "half_sqrt", "tanh", *K.SCALAR_ROUTINES)
QUICK_WI_CLASSES = ("fp32_fma", "fp32_add", "fp32_mul", "int32_add", "exp", "sqrt")
DEFAULT_CLASSES = tuple(K.OP_CLASSES)
#: classes of the peak benchmark with ``--quick``: the common arithmetic and builtins, and the integer
#: divider (the rule in its place, int32 mul / 20, was 10x too fast on PoCL 3.1)
QUICK_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp64_fma", "int32_add", "int32_mul",
                 "fp32_div", "int32_div", "sin", "exp", "sqrt")


class ComputeBenches(BenchRunner):
    """The compute benchmarks; each ``bench_<name>`` method measures and writes its profile values."""

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


    # -- work-group overhead ---------------------------------------------------------------

    def bench_wg(self) -> None:
        """Per-work-group cost as a function of the local size: empty work-groups of every power of
        two from 1 to the largest (at most 1024) work-items, :data:`WG_COUNTS` work-groups of each
        (the counts real launches have: the yardstick's datasets launch 11 work-groups at the
        median, 160 at p90, 4,096 at p99), fit as ``T = launch + n_wg (a + b lsize)`` = ``launch +
        a n_wg + b G`` with relative residuals. Group counts and local sizes both vary, so ``b``
        separates from the launch and ``a``. The cost per work-group falls in launches of far more
        work-groups than that: PoCL 3.1 on a 2-core x86-64 CPU 6.2-6.5 ns per empty work-group at 512-2,048 of
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

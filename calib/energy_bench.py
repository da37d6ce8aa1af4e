"""The ``energy`` calibration benchmark: what an energy meter adds to a device profile.

Run by :class:`calib.microbench.Calibrator` (a subclass of :class:`EnergyBenches`) through its energy
runner (a harness with a meter), after the timing benchmarks whose best configurations it reuses (``cal.state``):

* ``idle_power_w``: the meter's idle power before the window of an empty kernel;
* ``energy_per_op_<class>_pj``: slope of dynamic energy against operation count (four loop
  counts of the fastest peak configuration), and FlipFlop's ``power_coeff_<class>_pj`` =
  (P_saturated - P_idle) / max ops per s (Alg. 3 line 3);
* ``energy_per_access_level<i>_pj`` (and ``_dram_pj``, ``_local_pj``) per 32 B access: slope
  of dynamic energy against accesses at one working set per bandwidth plateau (Delestrac et
  al. eq. 4);
* ``power_cu_{alpha_w,beta,delta_w}``: P(n) = alpha n^beta + delta over n busy work-groups, one
  per compute unit (FlipFlop Alg. 3 lines 9-11), and ``transient_ratio`` r = P_short /
  P_sustained (lines 14-16).
"""

from __future__ import annotations

import math

import numpy as np
from kernelcast.calib import kernels as K
from kernelcast.calib.bench_runner import MAX_ITERS, fmt_bytes
from kernelcast.calib.compute_bench import ComputeBenches
from kernelcast.calib.fits import linear_fit, power_law_fit
from kernelcast.calib.memory_bench import MemoryBenches
from kernelcast.calib.profile import Curve

from kernelcast.schema import ArgBinding, LaunchConfig, Measurement

#: bytes of one "access" in the per-access energies (an NVIDIA sector, as in Delestrac et al.)
ACCESS_BYTES = 32
#: operation classes measured with ``quick`` (the others: every class the peak benchmark measured)
QUICK_ENERGY_CLASSES = ("fp32_fma", "fp64_fma", "int32_add", "sin")


def dynamic_energy(m: Measurement, idle_w: float | None) -> float | None:
    """Energy of one launch above idle: the meter's dynamic energy, else the energy less idle
    power over the median launch time (the whole energy when no idle power is known)."""
    if m.dynamic_energy_j is not None:
        return m.dynamic_energy_j
    if m.energy_j is None:
        return None
    iw = m.idle_power_w if m.idle_power_w is not None else idle_w
    if iw is None or m.time is None:
        return m.energy_j
    return m.energy_j - iw * m.time.median_us * 1e-6


def bench_energy(cal: EnergyBenches) -> None:
    """The ``energy`` benchmark (see the module docstring); needs ``cal.energy_runner``."""
    src = cal.source("energy")
    fracs = (0.25, 0.5, 0.75, 1.0)
    # idle power
    m = cal.measure(K.empty_kernel(), LaunchConfig((1,), (1,), [ArgBinding("a", "buffer", "uint", 1)]),
                    "energy: idle", energy=True, policy=cal.timing_policy(True, idle_s=0.5 if cal.opt.quick else 1.0))
    if m is None:
        return
    if m.energy_j is None and m.idle_power_w is None:
        cal.profile.notes.append(f"energy: meter {m.meter} returned no energy or power; energy values absent")
        return
    cal.profile.meter = m.meter
    idle_w = m.idle_power_w
    if idle_w is not None:
        cal.profile.set("idle_power_w", idle_w, "W", src,
                        notes=f"meter {m.meter} ({m.meter_method}), device idle before the window")

    # energy per operation (and FlipFlop's beta_u)
    classes = [c for c in (QUICK_ENERGY_CLASSES if cal.opt.quick else tuple(cal.state.op_best))
               if c in cal.state.op_best]
    for cls in classes:
        ob = cal.state.op_best[cls]
        opi = K.ops_per_iter(cls, ob.width, ob.chains)
        kern = K.op_kernel(cls, ob.width, ob.chains)
        xs: list[float] = []
        ys: list[float] = []
        full: Measurement | None = None
        full_iters = ob.iters
        for f in fracs:
            iters = max(1, int(round(max(4, ob.iters) * f)))
            mm = cal.measure(kern, cal.op_config(cls, ob.width, ob.items, ob.lsize, iters),
                             f"energy {cls} x{iters}", energy=True)
            e = None if mm is None else dynamic_energy(mm, idle_w)
            if mm is None or e is None:
                continue
            xs.append(float(ob.items * iters * opi))
            ys.append(e)
            full, full_iters = mm, iters
        if len(set(xs)) >= 2:
            fit = linear_fit(xs, ys)
            cal.profile.set(f"energy_per_op_{cls}_pj", fit.slope * 1e12, "pJ", src, r2=fit.r2, notes=(
                f"slope of dynamic energy per launch against operations ({len(xs)} loop counts); "
                f"intercept {fit.intercept * 1e3:.3g} mJ"))
        if full is not None and full.avg_power_w is not None and idle_w is not None and full.time is not None:
            rate = ob.items * full_iters * opi / (full.time.median_us * 1e-6)
            beta = (full.avg_power_w - idle_w) / rate
            cal.profile.set(f"power_coeff_{cls}_pj", beta * 1e12, "pJ", src, notes=(
                f"FlipFlop Alg. 3 line 3: (P_saturated {full.avg_power_w:.1f} W - P_idle {idle_w:.1f} W) / "
                f"{rate / 1e9:.1f} Gop/s"))

    # energy per access, per memory level
    for i, p in enumerate(cal.state.bw_plateaus):
        last = i == len(cal.state.bw_plateaus) - 1
        cands = [pt for pt in cal.state.stream_points if p.x_lo <= pt.size <= p.x_hi]
        if not cands:
            continue
        pt = min(cands, key=lambda q: q.size) if last else \
            min(cands, key=lambda q: abs(math.log(q.size / p.x_mid)))
        w = cal.state.stream_width
        vb = 4 * w
        xs, ys = [], []
        for f in fracs:
            passes = max(1, int(round(max(4, pt.passes) * f)))
            mm = cal.measure(K.stream_read_kernel(w, cal.state.stream_layout),
                             cal.stream_config(w, pt.n, pt.items, pt.lsize, passes),
                             f"energy level {i} {fmt_bytes(pt.size)} x{passes}", energy=True)
            e = None if mm is None else dynamic_energy(mm, idle_w)
            if e is None:
                continue
            xs.append(passes * pt.n * vb / ACCESS_BYTES)
            ys.append(e)
        if len(set(xs)) >= 2:
            fit = linear_fit(xs, ys)
            note = (f"Delestrac et al. eq. 4: slope of dynamic energy against {ACCESS_BYTES} B accesses, "
                    f"working set {fmt_bytes(pt.size)} (level {i}"
                    + (", main memory" if last else "") + f"); offset {fit.intercept * 1e3:.3g} mJ")
            cal.profile.set(f"energy_per_access_level{i}_pj", fit.slope * 1e12, "pJ", src, r2=fit.r2, notes=note)
            if last:
                cal.profile.set("energy_per_access_dram_pj", fit.slope * 1e12, "pJ", src, r2=fit.r2, notes=note)
    loc = cal.state.local
    if loc:
        w, n, n_wg, ls = loc["width"], loc["n"], loc["n_wg"], loc["ls"]
        xs, ys = [], []
        for f in fracs:
            passes = max(1, int(round(max(4, loc["passes"]) * f)))
            mm = cal.measure(K.local_read_kernel(w), cal.local_config(w, n, n_wg, ls, passes),
                             f"energy local x{passes}", energy=True)
            e = None if mm is None else dynamic_energy(mm, idle_w)
            if e is None:
                continue
            xs.append(n_wg * passes * n * 4 * w / ACCESS_BYTES)
            ys.append(e)
        if len(set(xs)) >= 2:
            fit = linear_fit(xs, ys)
            cal.profile.set("energy_per_access_local_pj", fit.slope * 1e12, "pJ", src, r2=fit.r2, notes=(
                f"slope of dynamic energy against {ACCESS_BYTES} B local-memory accesses"))

    # power against active compute units, and the transient ratio
    b = cal.state.op_best.get("fp32_fma")
    if b is None:
        cal.profile.notes.append("energy: no fp32 FMA configuration; power scaling not measured")
        return
    kern = K.busy_kernel(b.width, b.chains)
    n_wg_full = max(1, b.items // b.lsize)
    per_wg_iters = int(min(MAX_ITERS, max(1, round(b.iters * n_wg_full / cal.cu))))
    if cal.cu <= 8:
        ns = list(range(1, cal.cu + 1))
    else:
        ns = sorted({int(round(v)) for v in np.geomspace(1, cal.cu, 8)} | {cal.cu})
    pn: list[float] = []
    pp: list[float] = []
    for n in ns:
        mm = cal.measure(kern, cal.op_config("fp32_fma", b.width, n * b.lsize, b.lsize, per_wg_iters),
                         f"power {n} busy work-groups", energy=True)
        if mm is None or mm.avg_power_w is None:
            continue
        pn.append(float(n))
        pp.append(mm.avg_power_w)
    if len(set(pn)) >= 3:
        pl = power_law_fit(pn, pp)
        note = (f"FlipFlop Alg. 3 lines 9-11: average power with n work-groups of {b.lsize} busy work-items "
                f"(one per compute unit), n = {', '.join(str(int(v)) for v in pn)}")
        cal.profile.set("power_cu_alpha_w", pl.alpha, "W", src, r2=pl.r2, notes=note)
        cal.profile.set("power_cu_beta", pl.beta, "1", src, r2=pl.r2, notes=note)
        cal.profile.set("power_cu_delta_w", pl.delta, "W", src, r2=pl.r2, notes=note)
        cal.profile.curves["power_vs_active_cus"] = Curve(pn, pp, "work-groups", "W", src)
    else:
        cal.profile.notes.append(f"energy: power scaling needs 3 or more compute-unit counts, have "
                                 f"{len(set(pn))}; alpha/beta/delta not fitted")
    short_iters = max(1, int(round(b.iters * 10e-6 / b.time_s)))
    long_iters = int(min(MAX_ITERS, max(1, round(b.iters * max(0.1, 10 * b.time_s) / b.time_s))))
    ms = cal.measure(kern, cal.op_config("fp32_fma", b.width, b.items, b.lsize, short_iters),
                     f"transient short x{short_iters}", energy=True)
    ml = cal.measure(kern, cal.op_config("fp32_fma", b.width, b.items, b.lsize, long_iters),
                     f"transient long x{long_iters}", energy=True)
    if ms is None or ml is None or ms.avg_power_w is None or ml.avg_power_w is None or ml.avg_power_w <= 0:
        return
    assert ms.time is not None and ml.time is not None
    cal.profile.set("power_short_w", ms.avg_power_w, "W", src,
                    notes=f"window average power, {ms.time.median_us:.1f} us kernels launched back to back")
    cal.profile.set("power_sustained_w", ml.avg_power_w, "W", src,
                    notes=f"window average power, {ml.time.median_us / 1e3:.1f} ms kernels")
    cal.profile.set("transient_ratio", ms.avg_power_w / ml.avg_power_w, "1", src, notes=(
        f"FlipFlop Alg. 3 lines 14-16: P_short / P_sustained; the short kernel ({ms.time.median_us:.1f} us) "
        f"is launched back to back by the harness, so its window includes launch gaps"))


class EnergyBenches(ComputeBenches, MemoryBenches):
    """The energy benchmark on top of the compute and memory ones, whose configurations it reuses."""

    def bench_energy(self) -> None:
        """See :func:`bench_energy`."""
        bench_energy(self)

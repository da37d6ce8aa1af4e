"""The calibration benchmarks of the memory system (see :mod:`calib.microbench` for what each
reports): ``bandwidth``, ``local``, ``latency``, ``gather`` and ``stride``."""

from __future__ import annotations

import logging
import math
import os
import time
from typing import Any

import numpy as np
from kernelcast.calib import kernels as K
from kernelcast.calib.bench_runner import (
    MAX_ITERS,
    BenchRunner,
    KiB,
    MiB,
    StreamPoint,
    _pow2_floor,
    fmt_bytes,
    size_ladder,
)
from kernelcast.calib.fits import (
    Plateau,
    find_plateaus,
    linear_fit,
)
from kernelcast.calib.host_caches import DRAM_FACTOR, MARGIN, SYSFS_CACHE, CacheLevel, host_cache_levels, level_windows
from kernelcast.calib.profile import Curve
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, LaunchConfig

log = logging.getLogger(__name__)


class MemoryBenches(BenchRunner):
    """The memory benchmarks; each ``bench_<name>`` method measures and writes its profile values."""

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

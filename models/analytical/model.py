"""The analytical time and energy model: static features + a device profile -> time, energy.

One pipeline for every device (:class:`AnalyticalModel`): the kernel's static features evaluated
at each configuration, one work-item's compute cost on one compute unit (the device class's
:meth:`~.registry.DeviceClass.item_costs`), the waves, and the energy (:mod:`.energy`). Time (all
arrays, one entry per configuration)::

    T = T_launch + body(waves) + sync

A *wave* is as many work-groups as the device holds at once: ``CU x resident work-groups per CU``
(:meth:`~.registry.DeviceClass.residency`). For a wave of ``w`` work-groups on ``a = min(w, CU)``
active compute units::

    compute  = ceil(w / CU) * L * t_item                               (per-class roofline)
    memory   = w * L * fetched_bytes / (BW(level) * a / CU)            (coalescing in fetched bytes)
    sync     = ceil(w / CU) * barriers * t_barrier(L)
    t(wave)  = compute, memory (+ local-memory time), sync

``BW(level)`` is the bandwidth of the smallest cache level that holds the working set (the sum of
the kernel's buffers; :meth:`~.registry.DeviceClass.level_fits`), from the calibrated bandwidth
curve, else main memory. The device class combines the waves' compute and memory parts into the
body (:meth:`~.registry.DeviceClass.body`: overlapped, MWP/CWP on a GPU, late-joining threads on
a CPU runtime) and charges the launch (:meth:`~.registry.DeviceClass.launch_seconds`). On a GPU the
configuration's clock (``gr_clock_mhz``) scales the compute-bound time and the energy
(:func:`~.energy.gpu_energy`), and a power limit lowers the clock; elsewhere, under a power cap the
clock follows ``f_adj = f_base (P_cap / P_TDP)^(1/3)`` and compute slows with it.

The device class is the registered one that matches the profile (:mod:`.registry`): the GPU class
(:mod:`.gpu`), the CPU-runtime class (:mod:`.cpu_runtime`) or the generic class (:mod:`.generic`).

Nothing here is fitted on benchmark kernels: every constant is a profile value (measured by
``kernelcast calib`` or published) or a documented architectural rule (:data:`~.params.GPU_RULES`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical.energy import (
    energy_balance,
    energy_joules,
    gpu_dynamic_terms,
    gpu_energy,
    gpu_energy_constants,
)
from kernelcast.models.analytical.params import SharedParams
from kernelcast.models.analytical.registry import DeviceClass, device_class_for
from kernelcast.models.base import Predictions, Predictor
from kernelcast.models.static import analyze_source
from kernelcast.models.static.amdgpu import compile_many
from kernelcast.models.static.batch import analyze_one, load_analyses

from kernelcast.cltypes import parse_type
from kernelcast.columns import decode_args, decode_counts, decode_sizes
from kernelcast.cuda import looks_like_cuda
from kernelcast.schema import Kernel
from kernelcast.sites import COUNT_PREFIXES


def config_env(gsize: list[int], lsize: list[int] | None, args: list[dict[str, Any]],
               counts: Mapping[str, float] | None = None) -> dict[str, float]:
    """The symbols of one configuration: sizes per dimension, scalar values, local lengths, and the
    site counts measured for it (``counts``: site symbol -> value, :class:`~models.static.features.SiteInfo`)."""
    env: dict[str, float] = {}
    lsize = lsize or [min(64, gsize[0])] + [1] * (len(gsize) - 1)
    for d in range(3):
        g = gsize[d] if d < len(gsize) else 1
        loc = lsize[d] if d < len(lsize) else 1
        env[f"gsize{d}"], env[f"lsize{d}"], env[f"ngroups{d}"] = float(g), float(loc), float(math.ceil(g / loc))
    env["work_dim"] = float(len(gsize))
    buf_bytes = 0.0
    for a in args:
        if a.get("kind") == "scalar":
            try:
                env[a["name"]] = float(str(a.get("value")).split(",")[0])
            except (TypeError, ValueError):
                pass
        elif a.get("kind") in ("buffer", "local"):
            try:
                nbytes = float(a.get("count") or 0) * parse_type(a["dtype"]).itemsize
            except ValueError:
                nbytes = float(a.get("count") or 0) * 4
            if a["kind"] == "local":
                env["len_" + a["name"]] = float(a.get("count") or 0)
            else:
                buf_bytes += nbytes
                env["__elems_" + a["name"]] = float(a.get("count") or 0)
                env["__bytes_" + a["name"]] = nbytes
    env["__working_set_bytes"] = buf_bytes
    for k, v in (counts or {}).items():
        if k.startswith(COUNT_PREFIXES):
            env[k] = float(v)
    return env


def stack_envs(envs: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Per-configuration environments of one kernel as arrays: a symbol missing in some of them is
    1 there (an unbound scalar), except a site count, which stays NaN (not measured: the site's
    default, :meth:`~models.static.features.SourceFeatures.complete`), and what a compiler reported
    (``__compiled_<name>``: NaN where it could not compile that configuration)."""
    keys_all = sorted({k for e in envs for k in e})
    env = {k: np.array([e.get(k, np.nan) for e in envs], dtype=np.float64) for k in keys_all}
    return {k: (v if k.startswith(COUNT_PREFIXES + ("__compiled_",)) or not np.isnan(v).any()
                else np.where(np.isnan(v), 1.0, v))
            for k, v in env.items()}


@dataclass
class AnalyticalResult:
    time_s: np.ndarray
    energy_j: np.ndarray
    parts: dict[str, np.ndarray]
    #: why the device cannot run a configuration ("" where it can; its time and energy are NaN)
    unrunnable: np.ndarray | None = None


class AnalyticalModel(Predictor):
    """Analytical time/energy predictor for one device profile: the shared pipeline over the
    profile's device class (:attr:`device_class`; its parameters are :attr:`dev`)."""

    name = "analytical"

    def __init__(self, profile: DeviceProfile, *, short_kernel_s: float = 1e-3, power_cap_w: float | None = None,
                 analysis_dirs: Sequence[str | os.PathLike[str]] = (), at_measured_time: bool = False):
        self.profile = profile
        self.device_class: DeviceClass = device_class_for(profile)(profile)
        self.dev: SharedParams = self.device_class.params
        self.short_kernel_s = short_kernel_s
        self.power_cap_w = power_cap_w
        self._features: dict[tuple[str, str, str], Any] = {}
        #: where the shared analyses of imported rows are cached (``kernelcast analyze``)
        self.analysis_dirs = [Path(d) for d in analysis_dirs]
        self._shared: dict[str, Any] = {}
        #: GPUs: take each row's measured time (``time_median_us``, else ``time_mean_us``) as the
        #: time of its energy (a tuner that times configurations but has no power meter)
        self.at_measured_time = at_measured_time
        #: where the device class keeps what its compiler reported per configuration: the first
        #: analysis directory (a compile per configuration is the slow part of a large dataset)
        self._compile_cache = str(self.analysis_dirs[0]) if self.analysis_dirs else None

    # -- features ---------------------------------------------------------------------------

    def features(self, source: str, name: str, build_options: str = "") -> Any:
        key = (source, name, build_options)
        if key not in self._features:
            self._features[key] = analyze_source(Kernel(source=source, name=name, build_options=build_options))
        return self._features[key]

    def shared_features(self, key: str, source: str, name: str, language: str, options: str) -> Any:
        """The analysis a row names by ``analysis_key`` (rows imported from a Kernel Tuner cache:
        configurations that differ only in the launch share one, :mod:`models.static.batch`): from
        the cache directories, else run once here."""
        if key not in self._shared:
            got: Any = None
            for d in self.analysis_dirs:
                got = load_analyses(d, [key]).get(key)
                if got is not None:
                    break
            self._shared[key] = got if got is not None else analyze_one(key, source, name, language, options)
        got = self._shared[key]
        if isinstance(got, str):
            raise ValueError(got)
        return got

    # -- core, vectorized -------------------------------------------------------------------

    def evaluate(self, feats: Any, env: dict[str, np.ndarray], power_cap_w: np.ndarray | float | None = None,
                 clock_mhz: np.ndarray | None = None, measured_time_s: np.ndarray | None = None) -> AnalyticalResult:
        """Time (s), energy (J) and the parts of the model for arrays of configurations of one kernel
        (``clock_mhz``: the core clock each configuration runs at, NaN for the profile's boost clock;
        ``measured_time_s``: the time of each configuration's energy where finite, in place of the
        model's; GPUs only)."""
        d = self.dev
        dc = self.device_class
        fixed = dc.feature_symbols()
        if fixed:
            env = {**env, **{k: np.full_like(env["gsize0"], v, dtype=np.float64) for k, v in fixed.items()}}
        f = dc.compiled_features(feats.evaluate_many({k: v for k, v in env.items() if not k.startswith("__")}))
        # what the device's compiler reported per configuration (registers, spills; NaN: unknown)
        f.update({k[2:]: v for k, v in env.items() if k.startswith("__compiled_")})
        # or, where no compiler reported them, the class's estimate from the static analysis
        f.update(dc.estimated_resources(feats, f))
        g = env["gsize0"] * env["gsize1"] * env["gsize2"]
        lsz = env["lsize0"] * env["lsize1"] * env["lsize2"]
        n_wg = env["ngroups0"] * env["ngroups1"] * env["ngroups2"]
        # the work-groups the waves count (the device class's: all, or those that do the kernel's
        # work), and how much more than the average work-item's a work-item of them does
        n_run = dc.working_groups(f, env, n_wg)
        spread = n_wg / np.maximum(n_run, 1.0)
        f["working_groups"] = n_run
        cu = float(d.compute_units)
        ws = np.asarray(env.get("__working_set_bytes", np.zeros_like(g)), dtype=np.float64)
        ws = np.broadcast_to(ws, g.shape)

        blocked = dc.unrunnable(feats, f, lsz)
        # occupancy: resident work-groups per compute unit
        per_cu, occupancy = dc.residency(f, g, lsz, n_wg)
        concurrent = cu * per_cu

        # per-work-item costs
        item = dc.item_costs(feats, f, env, g, n_wg)
        comp_s_item, flops, busiest_s = item.seconds, item.flops, item.busiest_s
        fetched = f["global_fetched_bytes"] + f["constant_load_bytes"] * 0.0
        requested = f["global_load_bytes"] + f["global_store_bytes"] + f["global_atomic_bytes"]

        # the memory level that holds the working set
        bw = np.full_like(g, d.dram_bw)
        level = np.full(g.shape, len(d.bw_levels), dtype=np.int64)
        active_cu = np.minimum(n_wg, cu)
        for i in reversed(range(len(d.bw_levels))):
            fits = dc.level_fits(i, ws, active_cu)
            bw = np.where(fits, d.bw_levels[i][1], bw)
            level = np.where(fits, i, level)
        local_s_item = (f["local_bytes"] / (d.local_bw / cu)) if d.local_bw else np.zeros_like(g)
        barriers = f["barrier"]
        strided_s_item, streamed = dc.strided(feats, env, level, fetched)
        barrier_s = dc.barrier_seconds(lsz)

        def wave(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            # w working work-groups, each work-item of them doing `spread` times the average's work
            active = np.minimum(w, cu)
            rounds = np.ceil(w / cu)
            comp = rounds * lsz * comp_s_item * spread
            mem = (w * lsz * streamed * spread / np.maximum(bw * active / cu, 1.0)
                   + rounds * lsz * strided_s_item * spread)
            sync = rounds * barriers * spread * barrier_s
            return comp, mem + rounds * lsz * local_s_item * spread, sync

        full = np.floor(n_run / concurrent)
        rem = n_run - full * concurrent
        c1, m1, s1 = wave(np.minimum(concurrent, n_run))
        c2, m2, s2 = wave(rem)
        if dc.full_tail_wave:
            c2 = np.where(full > 0, c1, c2)     # the last, partial wave computes as long as a full one
        c2, m2, s2 = (np.where(rem > 0, x, 0.0) for x in (c2, m2, s2))
        comp_t = np.where(full > 0, full * c1, 0.0) + c2
        mem_t = np.where(full > 0, full * m1, 0.0) + m2
        sync_t = np.where(full > 0, full * s1, 0.0) + s2

        mem_t, levels = dc.memory_levels(f, env, g, lsz, n_wg, per_cu, mem_t)
        body, comp_t, join_t = dc.body(f, lsz, per_cu, n_wg, comp_t, mem_t, busiest_s)
        latency_t = dc.latency_seconds(f, levels, lsz, per_cu, n_wg, comp_t, mem_t)
        if latency_t is not None:
            body = dc.with_latency(body, latency_t)
        launch = dc.launch_seconds(n_wg, lsz)

        cap = power_cap_w if power_cap_w is not None else self.power_cap_w
        freq_ratio = np.ones_like(g)
        energy_terms: dict[str, np.ndarray] = {}
        consts = gpu_energy_constants(d) if d.is_gpu else None
        if d.is_gpu and (consts is not None or clock_mhz is not None):
            # the clock axis: everything but the DRAM scales with the clock; the power limit (the
            # cap, else the TDP for clocks above the boost clock: the energy constants derived from
            # the TDP are upper bounds, so the boost clock itself is not held to it) lowers the
            # clock where the power would exceed it
            boost = d.clock_hz / 1e6 if d.clock_hz else None
            r0 = np.ones_like(g)
            if clock_mhz is not None and boost:
                ck = np.broadcast_to(np.asarray(clock_mhz, dtype=np.float64), g.shape)
                r0 = np.where(np.isfinite(ck) & (ck > 0), ck / boost, 1.0)
            limit = np.full_like(g, np.inf)
            if cap is not None:
                limit = np.broadcast_to(np.asarray(cap, dtype=np.float64), g.shape).copy()
            if d.tdp_w:
                limit = np.where(np.isfinite(limit), limit, np.where(r0 > 1.0, d.tdp_w, np.inf))
            base_body = body
            # the part of the body in the memory's own clock domain (the device class's DRAM level)
            fixed_t = levels.get("level_dram_s", mem_t)

            tm = None if measured_time_s is None else np.broadcast_to(np.asarray(measured_time_s, dtype=np.float64),
                                                                        g.shape)

            def time_at(r: np.ndarray) -> np.ndarray:
                t = launch + dc.capped_body(base_body, comp_t, fixed_t, r, n_wg) + sync_t
                return t if tm is None else np.where(np.isfinite(tm) & (tm > 0), tm, t)

            if consts is not None:
                dyn = gpu_dynamic_terms(consts, f, g, levels)
                energy, time_s, freq_ratio, energy_terms = gpu_energy(consts, dyn, time_at, r0, limit)
            else:
                freq_ratio = r0
                if cap is not None and d.tdp_w:
                    freq_ratio = np.minimum(r0, np.minimum(1.0, (limit / d.tdp_w) ** (1 / 3)))
                time_s = time_at(freq_ratio)
                energy = np.full_like(g, np.nan)
        else:
            # DVFS under a power cap: compute slows with the clock
            if cap is not None and d.tdp_w:
                freq_ratio = np.minimum(1.0, (np.asarray(cap, dtype=np.float64) / d.tdp_w) ** (1 / 3))
                body = dc.capped_body(body, comp_t, mem_t, freq_ratio, n_wg)
            time_s = launch + body + sync_t
            energy = energy_joules(d, f, g, fetched, level, time_s, n_wg, freq_ratio, self.short_kernel_s)
        intensity = np.where(requested > 0, flops / np.maximum(requested, 1e-12), np.inf)
        peak_flops = 2 * d.rates.get("fp32_fma", 1e10)
        parts = {
            "launch_s": launch * np.ones_like(g), "compute_s": comp_t, "memory_s": mem_t, "sync_s": sync_t,
            "occupancy": occupancy, "eta_coal": f["eta_coal"], "bandwidth_Bps": bw, "memory_level": level,
            "arithmetic_intensity": intensity, "time_balance": np.full_like(g, peak_flops / d.dram_bw),
            "waves": np.ceil(n_run / concurrent), "resident_wg_per_cu": per_cu, "global_items": g,
            "last_wave_fill": np.where(rem > 0, rem / concurrent, np.where(n_run > 0, 1.0, 0.0)),
            "flops": flops * g, "fetched_bytes": fetched * g, "strided_lines_s": strided_s_item * g / cu,
            "busiest_item_s": busiest_s if busiest_s is not None else np.zeros_like(g),
            "join_s": join_t,
        }
        if dc.waves_of_working_groups:
            parts["working_groups"] = n_run
            parts["launched_groups"] = n_wg
        if energy_terms:
            parts.update({f"energy_{k}_j": v for k, v in energy_terms.items()})
            parts["clock_ratio"] = freq_ratio * np.ones_like(g)
            parts["power_w"] = energy / np.maximum(time_s, 1e-15)
        if latency_t is not None:
            parts["latency_s"] = latency_t
        if item.parts:
            parts.update(item.parts)
        parts.update(levels)
        balance = energy_balance(d)
        if balance is not None:
            parts["energy_balance"] = np.full_like(g, balance)
        cannot = blocked != ""
        if cannot.any():
            time_s = np.where(cannot, np.nan, time_s)
            energy = np.where(cannot, np.nan, energy)
        return AnalyticalResult(time_s, energy, parts, blocked)

    # -- the predictor interface ----------------------------------------------------------------

    def compiled_envs(self, frame: pd.DataFrame) -> list[dict[str, float]]:
        """What the compiler for the profile's AMD target reports of each row's configuration, as
        configuration symbols (``__compiled_<name>``: registers and spills,
        ``GPUClass.compiled_resources``); every configuration is compiled first, in parallel, into
        the compile cache. Empty for every row where the device class compiles nothing (NVIDIA,
        CPUs). ``predict`` and the tabular model's table (``models.tabular.build_table``) both take
        their compiled resources from here, so their analytical times agree."""
        n = len(frame)
        target = self.device_class.compile_target()
        if not target:
            return [{} for _ in range(n)]
        opts = frame["build_options"].fillna("").astype(str) if "build_options" in frame \
            else pd.Series([""] * n, index=frame.index)
        rows = [(str(frame["source"].iloc[i]), str(frame["kernel_name"].iloc[i]), str(opts.iloc[i] or ""),
                 _language(frame, i)) for i in range(n)]
        compile_many(iter(rows), target, self._compile_cache)
        return [{"__" + k: v for k, v in self.device_class.compiled_resources(src, name, lang, bo,
                                                                             self._compile_cache).items()}
                for src, name, bo, lang in rows]

    def predict(self, frame: pd.DataFrame) -> Predictions:
        """One prediction per row; rows need ``source``, ``kernel_name``, ``gsize``, ``lsize``, ``args``."""
        n = len(frame)
        time_us = np.full(n, np.nan)
        energy = np.full(n, np.nan)
        expl: list[dict[str, Any]] = [{} for _ in range(n)]
        opts = frame["build_options"] if "build_options" in frame else pd.Series([""] * n, index=frame.index)
        keys = list(zip(frame["source"], frame["kernel_name"], opts.fillna("")))
        shared = _shared_keys(frame)
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(("@", str(shared[i]), "") if shared[i] else k, []).append(i)
        caps = frame["power_cap_w"].to_numpy(dtype=float) if "power_cap_w" in frame else None
        clocks = pd.to_numeric(frame["gr_clock_mhz"], errors="coerce").to_numpy(dtype=float) \
            if "gr_clock_mhz" in frame else None
        measured = None
        if self.at_measured_time:
            measured = np.full(n, np.nan)
            for col in ("time_median_us", "time_mean_us"):
                if col in frame:
                    v = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float) * 1e-6
                    measured = np.where(np.isfinite(measured), measured, v)
        compiled = self.compiled_envs(frame)
        for (src, name, bo), idx in groups.items():
            try:
                if src == "@":
                    r = frame.iloc[idx[0]]
                    lang = _language(frame, idx[0])
                    feats = self.shared_features(name, str(r["source"]), str(r["kernel_name"]), lang,
                                                 str(r.get("analysis_options") or ""))
                else:
                    feats = self.features(src, name, bo)
            except Exception as e:  # noqa: BLE001 - an unanalyzable kernel is a NaN row with a reason
                for i in idx:
                    expl[i] = {"error": f"static analysis failed: {e}"}
                continue
            counts = frame["site_counts"] if "site_counts" in frame else None
            envs = [config_env(list(decode_sizes(frame["gsize"].iloc[i]) or ()),
                               list(decode_sizes(frame["lsize"].iloc[i]) or ()) or None,
                               decode_args(frame["args"].iloc[i]),
                               decode_counts(counts.iloc[i]) if counts is not None else None) for i in idx]
            for env_i, i in zip(envs, idx):
                env_i.update(compiled[i])
            env = stack_envs(envs)
            cap = None if caps is None else np.where(np.isnan(caps[idx]), np.inf, caps[idx])
            res = self.evaluate(feats, env, cap, None if clocks is None else clocks[idx],
                                None if measured is None else measured[idx])
            time_us[idx] = res.time_s * 1e6
            energy[idx] = res.energy_j
            extra = self.device_class.kernel_assumptions(feats)
            for j, i in enumerate(idx):
                if res.unrunnable is not None and res.unrunnable[j]:
                    expl[i] = {"unrunnable": f"the device cannot run this configuration: {res.unrunnable[j]}"}
                    continue
                expl[i] = explain({k: v[j] for k, v in res.parts.items()}, res.time_s[j])
                expl[i].update(extra)
                expl[i].update(count_assumptions(feats, envs[j]))
                expl[i].update(self.device_class.atomic_assumptions(feats, envs[j]))
        return Predictions(time_us, energy, expl)


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _language(frame: pd.DataFrame, i: int) -> str:
    """Row ``i``'s source language: its ``language`` column, else what the source looks like."""
    lang = frame["language"].iloc[i] if "language" in frame else None
    if isinstance(lang, str) and lang:
        return lang
    return "cuda" if looks_like_cuda(str(frame["source"].iloc[i])) else "opencl"


def _shared_keys(frame: pd.DataFrame) -> list[str | None]:
    """Each row's shared analysis (``analysis_key``), None where it names none."""
    if "analysis_key" not in frame.columns:
        return [None] * len(frame)
    return [k if isinstance(k, str) and k else None for k in frame["analysis_key"]]


def count_assumptions(feats: Any, env: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Which counts a prediction at one configuration (``env``, :func:`config_env`) did not know
    exactly: trip counts that are not exact (dead loops removed, loops bounded by a ``break``,
    ``avg_trip`` guesses: ``assumed_trip_counts``), the data-dependent counts
    (:class:`~models.static.features.SiteInfo`) taken from a run on real inputs (``measured_counts``)
    and those assumed (``assumed_counts``)."""
    out: dict[str, Any] = {}
    env = env or {}
    sites = list(getattr(feats, "sites", None) or [])
    measured = [x for x in sites if x.symbol in env and math.isfinite(float(env[x.symbol]))]
    got = {x.symbol for x in measured}
    loops = [f"line {lp.line}: {lp.assumed}" for lp in getattr(feats, "loops", [])
             if getattr(lp, "assumed", "") and not got & set(_IDENT.findall(lp.trip))]
    if loops:
        out["assumed_trip_counts"] = loops
    if measured:
        out["measured_counts"] = [
            f"line {x.line}: {'trips per entry' if x.kind == 'loop' else 'then-side share'} "
            f"{float(env[x.symbol]):.4g} (measured)" for x in measured]
    assumed = [f"line {x.line}: {x.assumed}" for x in sites if x.symbol not in got]
    if assumed:
        out["assumed_counts"] = assumed
    return out


def explain(p: dict[str, Any], t: float) -> dict[str, Any]:
    """Which part bounds the time, and the numbers behind it."""
    parts = {"launch": float(p["launch_s"]), "compute": float(p["compute_s"]), "memory": float(p["memory_s"]),
             "sync": float(p["sync_s"])}
    if "latency_s" in p:
        # the time one warp's dependent accesses take when too few warps hide their latency
        parts["latency"] = float(p["latency_s"])
    bound = max(parts, key=lambda k: parts[k])
    if bound in ("compute", "memory") and p["occupancy"] < 0.5 and p["waves"] <= 1:
        bound = "latency"      # too little parallelism: idle compute units or too few warps
    out = {
        "bound": bound,
        "time_parts_us": {k: v * 1e6 for k, v in parts.items()},
        "occupancy": float(p["occupancy"]),
        "coalescing": float(p["eta_coal"]),
        "waves": float(p["waves"]),
        "memory_level": int(p["memory_level"]),
        "bandwidth_GBps": float(p["bandwidth_Bps"]) / 1e9,
        "arithmetic_intensity": float(p["arithmetic_intensity"]),
        "time_balance": float(p["time_balance"]),
        "fetched_bytes": float(p["fetched_bytes"]),
    }
    if "last_wave_fill" in p:
        # the share of a full wave the last one holds (1: the work-groups fill whole waves)
        out["last_wave_fill"] = float(p["last_wave_fill"])
    if "working_groups" in p:
        # the waves count the work-groups in which some work-item does the kernel's work; the others
        # exit at once and cost only their share of the launch
        out["work_groups"] = {"launched": float(p["launched_groups"]), "working": float(p["working_groups"])}
    if "energy_balance" in p:
        out["energy_balance"] = float(p["energy_balance"])
    terms = {k[len("energy_"):-2]: float(v) for k, v in p.items() if k.startswith("energy_") and k.endswith("_j")}
    if terms:
        # the GPU energy model's terms (J): static x time, operations, L2, shared, DRAM
        out["energy_parts_j"] = terms
        out["power_w"] = float(p["power_w"])
        out["clock_ratio"] = float(p["clock_ratio"])
    levels = {k[len("level_"):-2]: float(v) * 1e6 for k, v in p.items() if k.startswith("level_") and k.endswith("_s")}
    if levels:
        # the memory part is the slowest of the levels it passes through
        out["memory_levels_us"] = levels
        out["traffic_bytes"] = {k[len("traffic_"):]: float(v) for k, v in p.items() if k.startswith("traffic_")}
        out["hit_rates"] = {k[len("hit_"):]: float(v) for k, v in p.items() if k.startswith("hit_")}
        if "latency_cycles" in p:
            out["access_latency_cycles"] = float(p["latency_cycles"])
        if "warp_insts_global" in p:
            # the launch's load/store instructions per warp (the load/store path's part of the first
            # level), global with spills and local
            out["warp_insts"] = {"global": float(p["warp_insts_global"]), "local": float(p["warp_insts_local"])}
    pipes = {k[len("pipe_"):-2]: float(v) for k, v in p.items() if k.startswith("pipe_") and k.endswith("_s")}
    if pipes:
        # GPUs whose pipes run concurrently: each pipe's and the time per work-item as a
        # share of the compute part's (the largest of them is the compute part)
        top = max(max(pipes.values()), 1e-300)
        out["compute_pipes_share"] = {k: v / top for k, v in pipes.items()}
    if np.isfinite(float(p.get("compiled_vgprs", np.nan))):
        # what the device's compiler made of this configuration: registers per work-item and the
        # bytes its register spills move through the memory hierarchy (in the memory part)
        out["compiled"] = {"vgprs": int(p["compiled_vgprs"]), "spill_bytes": float(p.get("spill_bytes", 0.0))}
        if np.isfinite(float(p.get("compiled_vmem_insts", np.nan))):
            # its global vector memory instructions per warp, one per 32-bit value per lane (more
            # than the source's where it loads per lane what the source loads once per warp)
            out["compiled"]["vector_memory_insts"] = float(p["compiled_vmem_insts"])
    elif np.isfinite(float(p.get("registers", np.nan))):
        # the registers per work-item estimated from the static analysis (GPUs without a compiler
        # path), those beyond the per-thread limit spilled, the bytes the spills move, and whether
        # the time counts them (occupancy, spill traffic)
        out["registers"] = {"per_work_item": int(p["registers"]), "estimated": True,
                            "spilled": int(p.get("registers_spilled", 0)),
                            "spill_bytes": float(p.get("spill_bytes", 0.0)),
                            "in_time": bool(p.get("registers_in_time", 0.0))}
    if float(p.get("strided_lines_s", 0.0)) > 0:
        out["page_strided_us"] = float(p["strided_lines_s"]) * 1e6     # in the memory part
    join = float(p.get("join_s", 0.0))
    if join > 0:
        # CPU: what the other compute units joining the launch late adds (cu_join_us)
        out["late_join_us"] = join * 1e6
    busiest = float(p.get("busiest_item_s", 0.0))
    if busiest > 0:
        # a work-item that runs its loops far more than the others (uneven_ratio): its time on
        # one core, and whether it is what the time is (it then stands in the compute part)
        out["busiest_work_item_us"] = busiest * 1e6
        out["busiest_work_item_bounds"] = busiest >= max(parts["compute"], parts["memory"])
    return out

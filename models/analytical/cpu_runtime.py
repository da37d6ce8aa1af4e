"""The CPU-runtime device class: what an OpenCL CPU runtime (PoCL) makes of a kernel.

Each work-group is a task one core runs; the runtime turns the work-items of a group into a loop
around the kernel's body (the work-item loop) and vectorizes that loop across work-items where its
vectorizer can (:func:`~.cpu_vectorizer.cpu_vectorizable`). Vectorized code runs at the rates of
one dependent chain per work-item (``wi_<class>_gops``, else the peaks), or at the peaks where the
work-item loop runs inside a uniform loop the runtime gives an implicit barrier
(:func:`~.cpu_vectorizer.cpu_throughput_loops`; not in a group small enough for the runtime to
unroll, :meth:`CPURuntimeClass._grouped_seconds`); it pays each gathered access
(:func:`~.cpu_costs.gather_seconds`). Scalar code runs at the scalar rates (``scalar_<class>_gops``),
issues each load and store as an instruction of its own, runs operations on OpenCL vector values
and the innermost loops the loop vectorizer takes at their SIMD rates
(:func:`~.cpu_costs.vector_value_correction`, :func:`~.cpu_costs.inner_loop_correction`), and takes
at least the latency of its loops' carried chains (:func:`~.cpu_costs.chain_seconds`). Integer
division is a roofline of its own that the other operations overlap. Atomics are locked
read-modify-writes at the calibrated rate for their contention (:func:`~.cpu_costs.atomic_seconds`),
page-strided walks pay a line each (:func:`~.cpu_costs.strided_seconds`), a work-item with far more
trips than the others is a critical path (:func:`~.cpu_costs.uneven_ratio`), a work-group costs
``wg_overhead_us + wi_overhead_ns x lsize``, a barrier a pass over the group's work-items, and the
runtime's other worker threads join a launch ``cu_join_us`` late (:func:`calib.fits.join_time`). A
cache level holds the working set when each busy core's share fits each core's share of the level
(``cache_level<i>_cores``: private or shared).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from kernelcast.calib.fits import join_time
from kernelcast.models.analytical.cpu_costs import (
    CPU_DIVIDER_CLASSES,
    UNEVEN_PEAK,
    atomic_distinct,
    atomic_seconds,
    chain_seconds,
    gather_seconds,
    inner_loop_correction,
    strided_seconds,
    uneven_ratio,
    vector_value_correction,
)
from kernelcast.models.analytical.cpu_params import CPUParams
from kernelcast.models.analytical.cpu_vectorizer import (
    SCALAR_FAMILIES,
    _has_barrier,
    clamped_index,
    cpu_throughput_loops,
    shifted_int_index,
    unbarriered_loops,
)
from kernelcast.models.analytical.params import RATE_CLASSES
from kernelcast.models.analytical.registry import DeviceClass, DeviceKind, ItemCosts, register
from kernelcast.models.static.features import BUILTIN_CLASSES, LIBCALL


@register
class CPURuntimeClass(DeviceClass):
    """OpenCL on a CPU: a work-group per core, the runtime's work-item loop, vectorized or not."""

    name = "cpu-runtime"
    params_type = CPUParams
    priority = 10
    params: CPUParams

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        return "CPU" in kind.device_type

    def item_costs(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], g: np.ndarray,
                   n_wg: np.ndarray) -> ItemCosts:
        """How the runtime runs the work-item loop (vectorized or not, at the throughput rates or
        not), a critical-path work-item where one has far more trips than the mean, and atomics
        that contend with no other core where one core does all the work."""
        d = self.params
        cu = float(d.compute_units)
        vec, _why = d.vectorizable(feats)
        throughput = vec and bool(cpu_throughput_loops(feats))
        comp_s_item, flops = self._grouped_seconds(feats, f, env, vec, throughput)
        busiest_s = None
        ratio = uneven_ratio(env)
        if ratio is not None:
            uneven = ratio >= UNEVEN_PEAK
            # the busiest work-item on one core, as scalar code (one work-item fills no vector),
            # its atomics contending with nobody
            scalar_s, _ = self._item_seconds(feats, f, env, False, False, alone=True)
            busiest_s = np.where(uneven, ratio * scalar_s, 0.0)
            # fewer busy work-items than cores: their atomics do not contend either
            few = uneven & (g / np.maximum(ratio, 1.0) < cu)
            if np.any(few):
                alone_s, _ = self._grouped_seconds(feats, f, env, vec, throughput, alone=True)
                comp_s_item = np.where(few, alone_s, comp_s_item)
        if cu > 1 and any(a.kind == "atomic" for a in getattr(feats, "accesses", [])):
            # one work-group runs on one core, and so does a launch whose work one core finishes
            # before the others join it (cu_join_us): its atomics contend with no other core
            alone_s, _ = self._grouped_seconds(feats, f, env, vec, throughput, alone=True)
            single = (n_wg <= 1) | (g * alone_s <= d.join_s)
            comp_s_item = np.where(single, alone_s, comp_s_item)
        return ItemCosts(comp_s_item, flops, busiest_s)

    def _grouped_seconds(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], vec: bool,
                         throughput: bool, alone: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_item_seconds` by work-group size: the uniform loops that run at the throughput
        rates do so because the runtime puts the work-item loop inside them (their implicit
        barrier); in a group of at most ``barrier_unrolled_items`` it unrolls the group's work-items
        instead (calib barrier), so no work-item loop runs inside the loop and its trips run at the
        one-chain-per-work-item rates (the measurement behind it: docs/analytical-model.md)."""
        d = self.params
        comp, flops = self._item_seconds(feats, f, env, vec, throughput, alone=alone)
        if not (throughput and d.barrier_unrolled_items > 0):
            return comp, flops
        lsz = env["lsize0"] * env["lsize1"] * env["lsize2"]
        unrolled = lsz <= d.barrier_unrolled_items
        if not np.any(unrolled):
            return comp, flops
        chain, _ = self._item_seconds(feats, f, env, vec, False, alone=alone)
        return np.where(unrolled, chain, comp), flops

    def _item_seconds(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], vec: bool,
                      throughput: bool, alone: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of one compute unit per work-item in computation (operations by class at their
        rates, builtin families, the corrections, atomics and gathers), and the flops per
        work-item: ``vec`` and ``throughput`` say how the runtime runs the work-item loop,
        ``alone`` that the work-item's atomics contend with no other core."""
        d = self.params
        g = env["gsize0"] * env["gsize1"] * env["gsize2"]
        cu = float(d.compute_units)
        comp_s_item = np.zeros_like(g)
        flops = np.zeros_like(g)
        families = [b for b in BUILTIN_CLASSES if b in f and np.any(f[b] > 0)]
        divider = np.zeros_like(g)
        for op in RATE_CLASSES:
            cnt = f.get(op)
            if cnt is None:
                continue
            if op == "sfu" and families:
                continue        # every special function is charged in its family below
            rate = (d.vector_rate(op) if not throughput else d.rate(op)) if vec else d.scalar_rate(op)
            if op in CPU_DIVIDER_CLASSES:
                divider = divider + cnt / (rate / cu)
                continue
            comp_s_item = comp_s_item + cnt / (rate / cu)
            if op.startswith("fp"):
                flops = flops + f[op] * (2 if op.endswith("fma") else 1)
        for b in families:
            cnt = f[b]
            if not vec:
                rate = d.scalar_rate(b)
                if b in d.wi_rates:
                    # one call per work-item (calib wi, calib.kernels.SCALAR_ROUTINES): the core
                    # overlaps only a few neighbouring work-items' inlined routines, so a work-item's
                    # first call costs at least that, its further ones interleave at the scalar rate
                    comp_s_item = comp_s_item + np.maximum(cnt / (rate / cu),
                                                           np.minimum(cnt, 1.0) / (d.wi_rates[b] / cu))
                    continue
            elif not throughput and b in d.wi_rates:
                rate = d.wi_rates[b]          # one call per work-item, vectorized across work-items
            else:
                rate = d.builtin_rate(b)
            comp_s_item = comp_s_item + cnt / (rate / cu)
        if not vec:
            comp_s_item = comp_s_item + (vector_value_correction(f, d) + inner_loop_correction(f, d)) * cu
            # in a kernel with barriers a loop all work-items take alike gets the runtime's implicit
            # barrier (the work-item loop runs inside it: no work-item waits for its own trip
            # before); a loop whose trips differ between work-items keeps its chain there too, in
            # groups of every size, and the inner loop of a loop with barriers in the groups the
            # runtime does not unroll (chain_seconds); where a loop all work-items take alike gets
            # no implicit barrier (unbarriered_loops), its chain counts as without one
            barrier = _has_barrier(getattr(feats, "ops", {}))
            lsz = env["lsize0"] * env["lsize1"] * env["lsize2"]
            inner = lsz > d.barrier_unrolled_items if barrier else True
            chain = chain_seconds(f, d, uniform=not barrier or bool(unbarriered_loops(feats)), inner=inner)
            if chain is not None:
                comp_s_item = np.maximum(comp_s_item, chain)
        # the integer divider is a unit of its own that the other operations overlap
        comp_s_item = np.maximum(comp_s_item, divider)
        if d.libcall_scalar and d.libcall_s:
            # the out-of-line calls of the builtins that are not families (those have their own rates)
            comp_s_item = comp_s_item + f[LIBCALL] * d.libcall_s
        at_s = atomic_seconds(feats, env, d, alone=alone)
        if at_s is not None:
            comp_s_item = comp_s_item + at_s
        if vec:
            ga_s = gather_seconds(feats, env, d)
            if ga_s is not None:
                comp_s_item = comp_s_item + ga_s
        else:
            # scalar code issues every load and store as an instruction of its own
            mem_ins = (f["global_loads"] + f["global_stores"] + f["local_loads"] + f["local_stores"]
                       + f["constant_loads"])
            comp_s_item = comp_s_item + mem_ins / (d.scalar_rate("int_add") / cu)
        return comp_s_item, flops

    def level_fits(self, i: int, ws: np.ndarray, active_cu: np.ndarray) -> np.ndarray:
        """The working set is spread over the busy cores; one instance of the level holds size x
        sharing / CU and is shared by its busy cores: a private level gives each core size / CU (so
        one work-group sees 1/CU of an L2's total), the shared last level gives one busy core all of
        it. A level whose sharing the profile does not give holds the working set if it fits whole."""
        d = self.params
        size = d.bw_levels[i][0]
        if i < len(d.level_sharing) and d.level_sharing[i] > 0:
            sh = d.level_sharing[i]
            per_core = size * sh / (float(d.compute_units) * np.minimum(sh, active_cu))
            return ws / active_cu <= per_core
        return ws <= size

    def strided(self, feats: Any, env: Mapping[str, Any], level: np.ndarray, fetched: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """The page-strided walks (:func:`~.cpu_costs.strided_seconds`) and the bytes left to stream."""
        st = strided_seconds(feats, env, self.params, level)
        if st is None:
            return np.zeros_like(fetched), fetched
        return st[0], np.maximum(fetched - st[1], 0.0)

    def barrier_seconds(self, lsz: np.ndarray) -> np.ndarray:
        return self.params.barrier_seconds(lsz)

    def body(self, f: Mapping[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray, n_wg: np.ndarray,
             comp_t: np.ndarray, mem_t: np.ndarray, busiest_s: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Compute and memory overlap; the worker threads join late (:meth:`joined`); a work-item
        that runs its loops far more than the others is a critical path no other core can share."""
        even = np.maximum(comp_t, mem_t)
        body = self.joined(even, n_wg)
        join_t = body - even
        if busiest_s is not None:
            body = np.maximum(body, busiest_s)
            comp_t = np.maximum(comp_t, busiest_s)
        return body, comp_t, join_t

    def capped_body(self, body: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray, freq_ratio: np.ndarray,
                    n_wg: np.ndarray) -> np.ndarray:
        return self.joined(np.maximum(comp_t / freq_ratio, mem_t), n_wg)

    def joined(self, body: np.ndarray, n_wg: np.ndarray) -> np.ndarray:
        """The time ``body`` of a launch spread evenly over the busy compute units, with the units
        after the first joining ``cu_join_us`` late (:func:`calib.fits.join_time`; ``body`` itself
        without that value)."""
        d = self.params
        if d.join_s <= 0:
            return body
        active = np.minimum(n_wg, float(d.compute_units))
        return join_time(body * active, d.join_s, d.compute_units, n_wg)

    def launch_seconds(self, n_wg: np.ndarray, lsz: np.ndarray) -> np.ndarray:
        """The launch, and per work-group its task and its work-item loop (``wg_overhead_us``,
        ``wi_overhead_ns``)."""
        d = self.params
        return d.launch_s + n_wg * (d.wg_overhead_s + d.wi_overhead_s * lsz)

    def kernel_assumptions(self, feats: Any) -> dict[str, Any]:
        return kernel_assumptions(feats, self.params)

    def atomic_assumptions(self, feats: Any, env: Mapping[str, Any]) -> dict[str, Any]:
        return atomic_assumptions(feats, env, self.params)


def kernel_assumptions(feats: Any, dev: CPUParams) -> dict[str, Any]:
    """What the prediction of a kernel assumed whatever its configuration: whether the work-item
    loop is taken as vectorized and why, at which rates, which accesses are gathered, and the
    cheaper forms of slow routine calls (the counts: :func:`~.model.count_assumptions`)."""
    out: dict[str, Any] = {}
    vec, why = dev.vectorizable(feats)
    out["cpu_vectorized"] = vec
    out["cpu_vectorized_because"] = why
    if vec and dev.wi_rates:
        lines = cpu_throughput_loops(feats)
        unrolled = (f" in groups of more than {dev.barrier_unrolled_items:g} work-items (the runtime unrolls "
                    f"smaller groups: one dependent chain per work-item there)" if dev.barrier_unrolled_items else "")
        out["cpu_rates"] = (f"peak: the work-item loop runs inside the loop(s) at line(s) "
                            f"{', '.join(map(str, lines))}{unrolled}" if lines else
                            "one dependent chain per work-item (wi_<class>_gops)")
    if vec and dev.gather_rate:
        gathers = gather_sites(feats, dev)
        if gathers:
            out["cpu_gathers"] = gathers
    calls = cheaper_calls(feats, dev, vec, why)
    if calls:
        out["cpu_calls"] = calls
    return out


#: a scalar library routine and the vectorizable form of the same value a kernel author can write
#: instead. Measured on PoCL 3.1 (``o[i] = f(x[i])``, 2^18 work-items): exp2 908 us,
#: ``exp(x * M_LN2_F)`` 85; exp10 1,027, ``exp(x * M_LN10_F)`` 81; sin 1,955, native_sin 143; cos
#: 2,025, native_cos 80 (log and log2 against native_log and native_log2: the same)
CHEAPER_FORMS: dict[str, tuple[str, str, str]] = {
    "exp2": ("bi_exp", "exp(x * M_LN2_F)", ""),
    "exp10": ("bi_exp", "exp(x * M_LN10_F)", ""),
    "sin": ("bi_native_sin", "native_sin(x)", " where its precision suffices"),
    "cos": ("bi_native_cos", "native_cos(x)", " where its precision suffices"),
}


#: a cheaper form is named when its calibrated rate is at least this many times the routine's
CHEAPER_FACTOR = 2.0


def cheaper_calls(feats: Any, dev: CPUParams, vec: bool, why: str) -> list[str]:
    """On a CPU device, the scalar library routines a kernel calls for which a vectorizable form of
    the same value runs at least :data:`CHEAPER_FACTOR` times faster by this profile's rates
    (:data:`CHEAPER_FORMS`): one line each, with both rates and whether the routine is what keeps
    the work-item loop scalar. Nothing where the profile does not measure the forms' rates."""
    out: list[str] = []
    ops = getattr(feats, "ops", {})
    for name, (alt, form, caveat) in CHEAPER_FORMS.items():
        cls = f"bi_{name}"
        if cls not in ops or cls not in SCALAR_FAMILIES or alt in SCALAR_FAMILIES:
            continue
        slow = dev.scalar_rates.get(cls)
        fast = dev.wi_rates.get(alt) or dev.builtin_rates.get(alt)
        if not slow or not fast or fast < CHEAPER_FACTOR * slow:
            continue
        scalar = not vec and why.startswith("calls of ")
        src = dev.rate_sources.get("scalar " + cls, "profile")
        borrowed = ""
        if src.startswith("profile ("):
            borrowed = f" ({src[len('profile ('):-1]}: the profile has no rate of {name})"
        out.append(f"{name}: scalar library code on this runtime, {slow / 1e9:.3g} G calls/s{borrowed}"
                   + (" (it keeps the work-item loop scalar)" if scalar else "")
                   + f"; {form} runs vectorized at {fast / 1e9:.3g} G calls/s{caveat}")
    return out


def gather_sites(feats: Any, dev: CPUParams) -> list[str]:
    """The global accesses vectorized CPU code gathers whatever the configuration (a strided one
    depends on it and is left out), one line each with why, and for an ``int`` global id plus a
    constant the fix (:func:`shifted_int_index`): what :func:`gather_seconds` charges."""
    out: list[str] = []
    for a in getattr(feats, "accesses", []):
        if a.space not in ("global", "constant") or a.kind not in ("load", "store"):
            continue
        if a.indirect:
            why = "a data-dependent index"
        elif not a.affine:
            why = "an index not affine in the work-item ids"
        elif dev.gather_clamped_rate and clamped_index(a):
            why = "an index clamping the work-item id (consecutive addresses the vectorizer cannot prove)"
        elif dev.gather_clamped_rate and shifted_int_index(a):
            why = ("an int global id plus a constant (consecutive addresses the vectorizer cannot prove; "
                   "a size_t or uint index makes it a vector load)")
        else:
            continue
        line = f"line {a.line}: {a.kind} {a.index or a.arg}: {why}"
        if line not in out:
            out.append(line)
    return out


def atomic_assumptions(feats: Any, env: Mapping[str, Any], dev: CPUParams) -> dict[str, Any]:
    """How each atomic site was charged at one configuration: its estimated distinct addresses
    (:func:`~.cpu_costs.atomic_distinct`) and the rate used, or that the profile has no atomic rates,
    in which case atomics cost only their bytes."""
    atomics = [a for a in getattr(feats, "accesses", []) if a.kind == "atomic"]
    if not atomics:
        return {}
    if not dev.atomic_rates:
        return {"atomics": "charged as memory bytes only: the profile has no atomic rates (calib --only atomic)"}
    out = []
    for a in atomics:
        distinct, why = atomic_distinct(a, env)
        rate = dev.atomic_rate(a.space, distinct) if a.space in ("global", "local") else None
        d_txt = "own address per work-item" if distinct is None else f"~{float(np.max(distinct)):.4g} addresses"
        r_txt = (f"{dev.compute_units / float(np.max(rate)) * 1e9:.3g} ns per atomic per compute unit"
                 if rate is not None else "not charged (no rate)")
        out.append(f"line {a.line}: {a.space} {a.via or 'atomic'} on {a.arg}: {d_txt} ({why}); {r_txt}")
    return {"atomics": out}

"""The analytical time and energy model: static features + a device profile -> time, energy.

Time (all arrays, one entry per configuration)::

    T = T_launch + N_WG * t_wg + sum over waves of t(wave)

A *wave* is as many work-groups as the device holds at once: ``CU x resident work-groups per CU``
(GPU profiles: the occupancy limits of warps, work-groups and local memory per compute unit;
other devices, e.g. PoCL on a CPU, run one work-group per compute unit). For a wave of ``w``
work-groups on ``a = min(w, CU)`` active compute units::

    compute  = ceil(w / CU) * L * sum_c count_c / (peak_c / CU)       (per-class roofline)
    memory   = w * L * fetched_bytes / (BW(level) * a / CU)            (coalescing in fetched bytes)
    sync     = ceil(w / CU) * barriers * t_barrier
    t(wave)  = max(compute, memory) + local-memory time + sync

``BW(level)`` is the bandwidth of the smallest cache level that holds the working set (the sum of
the kernel's buffers), from the calibrated bandwidth curve, else main memory. On a CPU device
(the profile's device type) each work-group is a task run by one core; the compute rates are the
rates of one dependent chain per work-item vectorized across work-items (``wi_<class>_gops``,
else the peaks) when the runtime vectorizes the work-item loop and the scalar rates
(``scalar_<class>_gops``, else 1/8 of the peak) when it does not (:func:`cpu_vectorizable`: a loop
left after unrolling, unless its trip count is uniform in a kernel with barriers and its condition
is one bound on a counter from 0 by 1 (:func:`_implicit_barrier_blocker`); an atomic; a
call of a full-precision transcendental builtin; a conditional store to one address for all
work-items, in a kernel without barriers; and two facts calib ``cond`` measures of the runtime:
where it leaves a store under a condition that differs between work-items scalar, such a store in
a kernel without barriers, and where it calls its builtins out of line, any builtin call, each
call then costing ``wi_libcall_ns``); scalar code also issues each load and store as an
instruction of its own, charged at the scalar integer-add rate, but its operations on OpenCL
vector values run at the scalar rate times the target's SIMD gain (:func:`vector_value_correction`)
and the innermost reduction loops the loop vectorizer takes on its own at the peak rates
(:func:`inner_loop_correction`), and its arithmetic takes at least the latency of its loops'
carried recurrences (``chain_<class>_ns``, :func:`chain_seconds`); vectorized code pays each
data-dependent or non-affine global access as a gather (``gather_gops``, :func:`gather_seconds`;
an index clamping the work-item id or an ``int`` global id plus a constant at ``gather_clamped_gops``).
A vectorized builtin call is charged at ``wi_<family>_gops`` (one call per work-item) where
calibrated, and integer division (``int32_div``, which no SIMD unit does) is a roofline of its own
that the other operations overlap (:data:`CPU_DIVIDER_CLASSES`).
A CPU work-group costs ``a + b lsize``
(``wg_overhead_us``, ``wi_overhead_ns``), a barrier ``barrier_ns + barrier_wi_ns lsize`` per
group (each barrier is a pass over the group's work-items), a launch of several work-groups runs on
one core until the runtime's other worker threads join it ``cu_join_us`` later
(:func:`calib.fits.join_time`: a launch of a few microseconds of work never spreads), and a cache
level holds the
working set when each busy core's share fits each core's share of the level
(``cache_level<i>_cores``: private or shared). Special
functions are charged per builtin family (``bi_*`` counts, ``peak_<family>_gops``), not at one
mean rate. On a CPU device an atomic adds ``count / (atomic rate / CU)`` to the compute part
(:func:`atomic_seconds`: a locked read-modify-write the core serialises, at the calibrated
``atomic_<space>[_b<bins>]_gops`` for the site's estimated number of distinct addresses,
:func:`atomic_distinct`; one work-group runs on one core, so its atomics contend with no other
core: the own-element rate); profiles without those rates (GPU profiles) charge atomics as bytes
only. For GPU profiles
the per-wave cost follows Hong and Kim's MWP/CWP cases instead (memory warp parallelism limited
by latency / departure delay, computation warp parallelism, and the three cases N = MWP = CWP,
CWP >= MWP, CWP < MWP).

Energy follows the roofline of energy (Choi et al.), ``E = sum_c W_c eps_c + Q eps_mem(level) +
P_static T``, with FlipFlop's corrections: static/base power from the active-compute-unit power
law ``alpha n^beta + delta`` where calibrated, the transient ratio ``r`` for kernels shorter than
``short_kernel_s``, fetched (coalescing-penalised) bytes for memory energy, and DVFS under a power
cap ``f_adj = f_base (P_cap / P_TDP)^(1/3)``. A profile without energy calibration gives NaN energy:
nothing is guessed.

Nothing here is fitted on benchmark kernels: every constant is a profile value (measured by
``kernelcast calib`` or published) or a documented architectural rule (:data:`GPU_RULES`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.fits import join_time
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.base import Predictions, Predictor
from kernelcast.models.static.chains import CHAIN_CLASSES, FMA_CALL, INNER_PREFIX, UNIFORM_PREFIX
from kernelcast.models.static.clbuiltins import INSTRUCTION_FAMILIES
from kernelcast.models.static.features import (
    BUILTIN_CLASSES,
    CHAIN_PREFIX,
    LIBCALL,
    LOOPVEC_LOADS,
    LOOPVEC_PREFIX,
    VEC_PREFIX,
)
from kernelcast.models.static.loops import PRAGMA_UNROLL_MAX_TRIP, UNROLL_MAX_TRIP

from kernelcast.columns import decode_args, decode_counts, decode_sizes
from kernelcast.sites import COUNT_PREFIXES, PEAK_PREFIX, TRIP_PREFIX

log = logging.getLogger(__name__)

#: static op class -> profile rate classes, tried in order (``peak_<cls>_gops``)
RATE_CLASSES: dict[str, tuple[str, ...]] = {
    "fp32_add": ("fp32_add", "fp32_fma"),
    "fp32_mul": ("fp32_mul", "fp32_fma"),
    "fp32_fma": ("fp32_fma",),
    "fp32_div": ("fp32_div",),
    "fp64_add": ("fp64_add", "fp64_fma"),
    "fp64_mul": ("fp64_mul", "fp64_fma"),
    "fp64_fma": ("fp64_fma",),
    "fp64_div": ("fp64_div",),
    "int_add": ("int32_add",),
    "int_bit": ("int32_add",),
    "int_mul": ("int32_mul",),
    "int_div": ("int32_div",),
    "sfu": ("sfu", "exp", "sin", "sqrt"),
    "cmp": ("int32_add",),
    "conv": ("int32_add",),
    "branch": ("int32_add",),
}
#: relative throughputs per compute unit, used for GPU profiles that publish only fp32/fp64
#: peaks (CUDA programming guide, "arithmetic instructions" throughput table: per SM and clock,
#: fp32 add/mul/fma 64-128, int32 add 64, int32 mul 16-64, special functions 16, so sfu = 1/4
#: and int mul = 1/4 of fp32; division is a reciprocal (sfu) plus a multiply and a correction)
GPU_RULES: dict[str, float] = {
    "fp32_add": 1.0, "fp32_mul": 1.0, "fp32_fma": 1.0, "int32_add": 1.0, "int32_mul": 0.25,
    "int32_div": 1 / 20, "sfu": 0.25, "fp32_div": 1 / 8,
}
DEFAULT_SEGMENT_BYTES = 32
#: DRAM latency in cycles assumed by the MWP/CWP model when a GPU profile has none measured
#: (Hong and Kim 2009 use 400-600 cycles; we take the middle)
DEFAULT_MEM_LATENCY_CYCLES = 500.0


@dataclass
class DeviceParams:
    """What the model reads from a profile, resolved once."""

    name: str
    is_gpu: bool
    compute_units: int
    warp: int
    rates: dict[str, float]            # op class -> ops/s, whole device
    rate_sources: dict[str, str]
    bw_levels: list[tuple[float, float]]   # (largest working set B, bytes/s), fastest first
    dram_bw: float
    local_bw: float | None
    launch_s: float
    wg_overhead_s: float
    barrier_s: float
    max_warps_per_cu: float | None
    max_wg_per_cu: float | None
    local_mem_per_cu: float | None
    clock_hz: float | None
    mem_latency_s: float | None
    tdp_w: float | None
    energy: dict[str, float] | None
    is_cpu: bool = False
    builtin_rates: dict[str, float] = field(default_factory=dict)   # bi_* class -> calls/s, vectorized
    scalar_rates: dict[str, float] = field(default_factory=dict)    # op / bi_* class -> ops/s, not vectorized
    wi_rates: dict[str, float] = field(default_factory=dict)        # op class -> ops/s, one dependent chain
                                                                    # per work-item vectorized across work-items
    level_sharing: list[float] = field(default_factory=list)   # per bw level: compute units per instance (0: ?)
    wi_overhead_s: float = 0.0         # per work-item of a work-group's task, whole device (CPU: work-item loop)
    barrier_wi_s: float | None = None  # per barrier per work-item (CPU: a region of the split work-item loop)
    # CPU: the largest work-group whose barriers the runtime unrolls away (calib barrier), and the
    # measured cost per barrier per work-group by group size (items, seconds) used up to it; 0 / ()
    # where not measured
    barrier_unrolled_items: float = 0.0
    barrier_curve: tuple[tuple[float, ...], ...] = ()
    # CPU: time per work-item of an elementwise store under ``if (i < n)`` over the same store
    # unguarded (calib cond); None where not measured
    cond_store_ratio: float | None = None
    # CPU: time per work-item of the same store with one fmax call over the plain one (calib cond),
    # and the cost of one more call (seconds of a compute unit); None where not measured
    libcall_ratio: float | None = None
    libcall_s: float | None = None
    # CPU: how long a launch runs on one compute unit before the others join it (calib join); 0
    # where not measured
    join_s: float = 0.0
    # CPU: seconds of one compute unit per operation of a dependent chain of scalar code, by class
    # (calib chain); empty where not measured
    chain_s: dict[str, float] = field(default_factory=dict)
    gather_rate: float | None = None   # gathered elements/s in vectorized CPU code, whole device
    gather_clamped_rate: float | None = None   # the same at clamped consecutive indices (in[min(i + 1, n - 1)])
    strided_line_s: float | None = None  # CPU: one line fetched by a page-strided work-item loop, per core
    strided_source: str = ""
    strided_level_s: dict[int, float] = field(default_factory=dict)   # the same, from cache level i
    strided_short_s: float | None = None  # the same for a walk of a few pages (the TLB holds them)
    strided_short_level_s: dict[int, float] = field(default_factory=dict)
    strided_tiny_s: float | None = None  # the same for a walk of a few trips (the prefetchers follow it)
    strided_tiny_level_s: dict[int, float] = field(default_factory=dict)
    atomic_rates: dict[str, float] = field(default_factory=dict)   # "global" / "local" (own element) and
                                                                   # "<space>_b<bins>" -> atomics/s, whole device

    @classmethod
    def from_profile(cls, p: DeviceProfile, device_info: Any = None) -> DeviceParams:
        get = p.get
        dev = getattr(p, "device", None)
        cu = (get("compute_units") or getattr(dev, "compute_units", None)
              or getattr(device_info, "compute_units", 1) or 1)
        warp = get("warp_size") or getattr(dev, "wg_multiple", None) or 32
        kind = (getattr(dev, "device_type", "") or "").upper()
        is_gpu = get("max_warps_per_cu") is not None or "GPU" in kind
        rates: dict[str, float] = {}
        sources: dict[str, str] = {}
        fp32 = get("peak_fp32_fma_gops") or ((get("peak_fp32_gflops") or 0) / 2 or None)
        for cls_ in ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_fma", "int32_add", "int32_mul",
                     "int32_div", "sin", "exp", "sqrt", "sfu"):
            v = get(f"peak_{cls_}_gops")
            if v:
                rates[cls_], sources[cls_] = v * 1e9, "profile"
        if "fp64_fma" not in rates and get("peak_fp64_gflops"):
            rates["fp64_fma"], sources["fp64_fma"] = float(get("peak_fp64_gflops") or 0) / 2 * 1e9, \
                "profile (fp64 peak / 2)"
        if "sfu" not in rates:
            special = [rates[c] for c in ("exp", "sin", "sqrt") if c in rates]
            if special:
                rates["sfu"], sources["sfu"] = float(np.mean(special)), "profile (mean of exp, sin, sqrt)"
        if fp32:
            for c, frac in GPU_RULES.items():
                if c not in rates:
                    rates[c], sources[c] = fp32 * 1e9 * frac, f"rule: {frac:g} x fp32 FMA rate"
        if "int32_div" not in rates and "int32_mul" in rates:
            rates["int32_div"], sources["int32_div"] = rates["int32_mul"] / 20, "rule: int32 mul / 20"
        if "fp64_fma" not in rates and fp32:
            rates["fp64_fma"], sources["fp64_fma"] = fp32 * 1e9 / 32, "rule: 1/32 x fp32 (consumer GPUs)"
        levels = []
        sharing = []
        i = 0
        while (bw := get(f"bw_level{i}_gbs")) is not None:
            size = get(f"cache_level{i}_bytes") or 0
            levels.append((float(size), bw * 1e9))
            sharing.append(float(get(f"cache_level{i}_cores") or 0.0))
            i += 1
        dram = (get("dram_bw_gbs") or (levels[-1][1] / 1e9 if levels else 100.0)) * 1e9
        clock = get("boost_clock_mhz") or getattr(dev, "max_clock_mhz", None)
        lat = get("dram_latency_ns")
        energy = None
        if p.has_energy and get("idle_power_w") is not None:
            energy = {n: v.value for n, v in p.values.items()}
        builtin_rates, b_sources = _builtin_rates(p, rates)
        sources.update(b_sources)
        is_cpu = "CPU" in kind and not is_gpu
        scalar_rates: dict[str, float] = {}
        wi_rates: dict[str, float] = {}
        if is_cpu:
            scalar_rates, s_sources = _scalar_rates(p, {**rates, **builtin_rates})
            sources.update(s_sources)
            wi_rates, w_sources = _wi_rates(p, rates)
            sources.update(w_sources)
        atomic_rates = {k[len("atomic_"):-len("_gops")]: float(v.value) * 1e9 for k, v in p.values.items()
                        if _ATOMIC_KEY.match(k) and v.value and v.value > 0}
        for k in atomic_rates:
            sources["atomic " + k] = "profile"
        strided, strided_src = None, ""
        if is_cpu:
            if get("strided_line_ns"):
                strided, strided_src = float(get("strided_line_ns") or 0) * 1e-9, "profile (calib stride)"
            elif lat:
                strided, strided_src = float(lat) * 1e-9, "rule: the DRAM latency (no calib stride value)"
            if strided_src:
                sources["strided line"] = strided_src

        def per_level(stem: str) -> dict[int, float]:
            return {i: float(get(f"{stem}_level{i}_ns") or 0) * 1e-9 for i in range(len(levels))
                    if is_cpu and get(f"{stem}_level{i}_ns")}

        return cls(
            strided_line_s=strided, strided_source=strided_src, strided_level_s=per_level("strided_line"),
            strided_short_s=float(get("strided_short_ns") or 0) * 1e-9 if is_cpu and get("strided_short_ns") else None,
            strided_short_level_s=per_level("strided_short"),
            strided_tiny_s=float(get("strided_tiny_ns") or 0) * 1e-9 if is_cpu and get("strided_tiny_ns") else None,
            strided_tiny_level_s=per_level("strided_tiny"),
            atomic_rates=atomic_rates,
            gather_rate=(float(get("gather_gops") or 0.0) * 1e9 or None) if is_cpu else None,
            gather_clamped_rate=(float(get("gather_clamped_gops") or 0.0) * 1e9 or None) if is_cpu else None,
            is_cpu=is_cpu, builtin_rates=builtin_rates, scalar_rates=scalar_rates, wi_rates=wi_rates,
            name=getattr(dev, "name", "") or "device", is_gpu=bool(is_gpu), compute_units=int(cu), warp=int(warp),
            rates=rates, rate_sources=sources, bw_levels=[lv for lv in levels if lv[0] > 0], dram_bw=dram,
            level_sharing=[sh for lv, sh in zip(levels, sharing) if lv[0] > 0],
            local_bw=(get("bw_local_gbs") or 0) * 1e9 or None,
            launch_s=(get("launch_overhead_us") or 0.0) * 1e-6, wg_overhead_s=(get("wg_overhead_us") or 0.0) * 1e-6,
            barrier_s=(get("barrier_ns") or 0.0) * 1e-9, max_warps_per_cu=get("max_warps_per_cu"),
            max_wg_per_cu=get("max_wg_per_cu"), local_mem_per_cu=get("local_mem_per_cu_bytes"),
            clock_hz=clock * 1e6 if clock else None, mem_latency_s=lat * 1e-9 if lat else None,
            tdp_w=get("tdp_w"), energy=energy,
            wi_overhead_s=(get("wi_overhead_ns") or 0.0) * 1e-9 if is_cpu else 0.0,
            barrier_wi_s=(float(get("barrier_wi_ns") or 0.0) * 1e-9
                          if is_cpu and get("barrier_wi_ns") is not None else None),
            cond_store_ratio=_ratio_to_plain_store(p, "wi_cond_store_ns") if is_cpu else None,
            libcall_ratio=_ratio_to_plain_store(p, "wi_call_ns") if is_cpu else None,
            libcall_s=(float(get("wi_libcall_ns") or 0.0) * 1e-9 or None) if is_cpu else None,
            join_s=float(get("cu_join_us") or 0.0) * 1e-6 if is_cpu else 0.0,
            chain_s=_chain_latencies(p) if is_cpu else {},
            **_barrier_unrolling(p, is_cpu),
        )

    @property
    def libcall_scalar(self) -> bool:
        """Whether this CPU runtime calls its builtins out of line, leaving the work-item loop
        scalar (:data:`LIBCALL_SCALAR_RATIO`; False where calib did not measure it)."""
        return self.libcall_ratio is not None and self.libcall_ratio >= LIBCALL_SCALAR_RATIO

    @property
    def cond_store_scalar(self) -> bool:
        """Whether this CPU runtime leaves a work-item loop with a conditional store scalar
        (:data:`COND_STORE_SCALAR_RATIO`; False where calib did not measure it)."""
        return self.cond_store_ratio is not None and self.cond_store_ratio >= COND_STORE_SCALAR_RATIO

    def barrier_seconds(self, lsz: np.ndarray) -> np.ndarray:
        """Seconds per barrier per work-group of ``lsz`` work-items: ``barrier_s + barrier_wi_s x
        lsz``, a pass over the group's work-items (CPU) or the group's synchronisation (GPU); in a
        group of at most :attr:`barrier_unrolled_items` the measured cost of such a group instead
        (:attr:`barrier_curve`, interpolated; flat below its smallest size), where the runtime has
        unrolled the group's work-item loop and a barrier costs almost nothing (calib barrier; PoCL
        3.1 on Zen 5: 1.0 ns per barrier in groups of 8 and 16 against 1.0 + 0.61 x 16 = 10.7 ns
        on the line). A tree reduction over 2^18 work-items ran 163-195 us in groups of 16 and
        896-954 us in groups of 64; the line alone predicted 606 and 725 us, the curve 208 and 725
        (``tests/test_cpu_class.py::test_tree_reduction_in_small_groups_on_this_device``). The
        dataset's barrier kernels were predicted too slow in groups of up to 16 with the line alone
        (median log2(measured / predicted) -0.28 in groups of up to 8, -0.20 of 9-16, +0.09 above)."""
        line = self.barrier_s + (self.barrier_wi_s or 0.0) * lsz
        if not self.barrier_unrolled_items or not self.barrier_curve:
            return line
        xs, ys = self.barrier_curve
        return np.where(lsz <= self.barrier_unrolled_items, np.interp(lsz, xs, ys), line)

    def vectorizable(self, feats: Any) -> tuple[bool, str]:
        """:func:`cpu_vectorizable` of ``feats`` with this device's calibrated facts."""
        return cpu_vectorizable(feats, barrier_loops=self.barrier_wi_s is not None,
                                cond_store_scalar=self.cond_store_scalar, libcall_scalar=self.libcall_scalar)

    def rate(self, op: str) -> float:
        for c in RATE_CLASSES.get(op, ()):
            if c in self.rates:
                return self.rates[c]
        return self.rates.get("fp32_fma") or self.rates.get("fp32_add") or 1e10

    def builtin_rate(self, b: str) -> float:
        """Vectorized rate of builtin family class ``b``; a family without a calibrated rate gets
        the generic special-function rate divided by the ``sfu`` weight of its calls."""
        if b in self.builtin_rates:
            return self.builtin_rates[b]
        weight = 2.0 if b.endswith(("pow", "tanh", "tan", "sinh", "cosh")) else 1.0
        return self.rate("sfu") / weight

    def vector_rate(self, op: str) -> float:
        """Rate of an arithmetic class in code the runtime vectorizes across work-items (CPU
        devices): the one-chain-per-work-item rate where calibrated, else the peak."""
        for c in RATE_CLASSES.get(op, ()):
            if c in self.wi_rates:
                return self.wi_rates[c]
        return self.rate(op)

    def atomic_rate(self, space: str, distinct: np.ndarray | None) -> np.ndarray | None:
        """Whole-device rate (atomics/s) of ``atomic_add`` in ``space`` on ``distinct`` addresses
        (None: each work-item its own): the own-element rate, else log2-interpolated between the
        measured bin counts (clamped at the ends); None without any rate for that space."""
        own = self.atomic_rates.get(space)
        pts = sorted((int(k.rsplit("_b", 1)[1]), r) for k, r in self.atomic_rates.items()
                     if k.startswith(space + "_b"))
        if distinct is None or not pts:
            return None if own is None and not pts else np.asarray(own if own is not None else pts[-1][1])
        xs = np.log2([float(b) for b, _ in pts])
        return np.asarray(np.interp(np.log2(np.maximum(distinct, 1.0)), xs, [r for _, r in pts]))

    def scalar_rate(self, op: str) -> float:
        """Rate of code the runtime does not vectorize across work-items (CPU devices)."""
        if op in self.scalar_rates:
            return self.scalar_rates[op]
        for c in RATE_CLASSES.get(op, ()):
            if c in self.scalar_rates:
                return self.scalar_rates[c]
        return (self.builtin_rate(op) if op.startswith("bi_") else self.rate(op)) / DEFAULT_SIMD_LANES


def vector_value_correction(f: Mapping[str, np.ndarray], d: DeviceParams) -> np.ndarray | float:
    """Seconds per work-item (one core) to add to the scalar charge of a work-item loop the runtime
    does not vectorize, for its operations on OpenCL vector values (``vec:<class>@<width>``, the
    static ``vec_ops``): each is one SIMD instruction of the target, not ``width`` scalar ones, so
    its lanes run at the scalar rate times ``min(width, vector rate / scalar rate)`` (the target's
    measured SIMD gain). A builtin family's call on a vector value is one call of the vector math
    library, its components at the family's scalar rate times ``min(width, peak / scalar rate)``:
    on PoCL 3.0 (Zen 3, idle), per component, ``pow(float4)`` 4.4-4.5x and ``exp(float4)`` 4.3x
    cheaper than the scalar call, ``rint(float4)`` 2.3-2.4x (charged at 4x, 4x and 4x); a
    saturating ``convert_uchar4_sat_rte`` ran 0.5x (slower per component), which this does not know.
    Negative or zero: it replaces part of the scalar charge."""
    out: np.ndarray | float = 0.0
    for key, cnt in f.items():
        if not key.startswith(VEC_PREFIX):
            continue
        cls, _, w = key[len(VEC_PREFIX):].partition("@")
        if not w.isdigit():
            continue
        if cls in RATE_CLASSES:
            s, v = d.scalar_rate(cls), d.vector_rate(cls)
        elif cls in BUILTIN_CLASSES:
            s, v = d.scalar_rate(cls), d.builtin_rate(cls)
        else:
            continue
        gain = min(float(w), max(1.0, v / s))
        out = out + cnt / (s * gain) - cnt / s
    return out


def chain_seconds(f: Mapping[str, np.ndarray], d: DeviceParams, uniform: bool = True,
                  inner: np.ndarray | bool = True) -> np.ndarray | None:
    """CPU scalar code: seconds of one compute unit per work-item that its loop-carried recurrences
    take at least (``chain:<class>`` counts of :mod:`models.static.chains` times ``chain_<class>_ns``):
    a trip cannot start its operations on a carried value before the trip before is done, however
    many operations the core issues per cycle. A work-item's arithmetic takes at least this
    (``AnalyticalModel._item_seconds``); its calls, loads and atomics add to it, as they add to its
    arithmetic (on ds7, in sample: with the chain bounding the whole compute time 7 kernels moved,
    all of them little; bounding the arithmetic, 9 kernels moved, all of them closer). An
    ``fma``/``mad`` call on the chain (``fma_call``) counts at the FMA latency unless the runtime
    calls its builtins out of line (the call is charged already). ``uniform`` False leaves out
    the chains of loops all work-items take alike (``uniform_<class>``): in a kernel with barriers
    the runtime puts an implicit barrier into such a loop. A loop whose trips differ between
    work-items keeps its chain in a kernel with barriers, in groups of every size: PoCL 3.1 on Zen
    5 ran ``z = z * z * 0.5f + c`` for 512 or 513 trips in 4,096 work-items in 1,708-1,861 us with a
    barrier before the loop and 1,708-1,773 us without, in groups of 8 to 256 (it was charged
    without its chain there before: 38 us for the escape-time form of it, whose trips the model
    does not know, 598 us for this one; ds8m/ds8s/ds9s: 6 kernels moved, their 25 rows' median
    |log2(measured / predicted)| 0.87 -> 0.15). The inner loop of a loop with barriers (a tile
    loop's, ``inner_<class>``) gets no implicit barrier from PoCL 3.1 though its trips are alike:
    its chain counts where ``inner`` is true (one flag per configuration; the model passes the
    groups larger than :attr:`DeviceParams.barrier_unrolled_items`, whose work-items PoCL runs in
    turn: an fma chain over 4,096 values in 16 tiles of 256 ran at 0.75-0.82x the same chain in a
    plain loop; over 8,192 values, 0.19 ns a trip and core in groups of 8 against 0.74 in groups of
    256; ds8m/ds8s/ds9s: 6 kernels' large-group rows, median |log2| 0.86 -> 0.24). None without
    calibrated latencies or a chain."""
    latency = dict(d.chain_s)
    if not (d.libcall_scalar and d.libcall_s) and "fp32_fma" in latency:
        latency[FMA_CALL] = latency["fp32_fma"]      # else the call is charged as a call already
    total = None
    for cls, s in latency.items():
        for key in (cls, UNIFORM_PREFIX + cls, INNER_PREFIX + cls) if uniform else (cls, INNER_PREFIX + cls):
            n = f.get(CHAIN_PREFIX + key)
            if n is None or s <= 0:
                continue
            if key.startswith(INNER_PREFIX) and not uniform:
                n = np.where(inner, n, 0.0)
            total = n * s if total is None else total + n * s
    return total


def inner_loop_correction(f: Mapping[str, np.ndarray], d: DeviceParams) -> np.ndarray | float:
    """Seconds per work-item (one core) to add to the scalar charge of a work-item loop the runtime
    does not vectorize, for the operations and loads of its innermost loops that the compiler's
    loop vectorizer takes on its own (``loopvec:<class>``, the static ``loopvec_ops``): they run at
    the peak rate (independent trips, interleaved vectors), not the scalar one. Measured on PoCL
    (Zen 3, under load): ``rank += (in[j] < v)`` over 4,096 trips, 0.10 ns per trip per core; the
    same loop accumulating a float, 2.7."""
    out: np.ndarray | float = 0.0
    for key, cnt in f.items():
        if not key.startswith(LOOPVEC_PREFIX):
            continue
        cls = key[len(LOOPVEC_PREFIX):]
        cls = "int_add" if cls == LOOPVEC_LOADS else cls
        if cls not in RATE_CLASSES:
            continue
        out = out + cnt / d.rate(cls) - cnt / d.scalar_rate(cls)
    return np.minimum(out, 0.0) if isinstance(out, np.ndarray) else min(out, 0.0)


#: profile keys of the atomic benchmark (``calib --only atomic``)
_ATOMIC_KEY = re.compile(r"^atomic_(global|local)(_b\d+)?_gops$")


#: vectorized / scalar rate ratio assumed for a CPU profile without ``scalar_<class>_gops``
#: (8 fp32 lanes: AVX2; AVX-512 devices measure their own ratio with ``calib --only scalar``)
DEFAULT_SIMD_LANES = 8.0
#: a loop is uneven when its busiest work-item runs at least this many times its mean trips per
#: entry (``tpeak_...``): the busiest work-item's time on one core then bounds the kernel's
#: (:func:`uneven_ratio`); below it, the scalar charge of one work-item is no better a guess than
#: the shared charge
UNEVEN_PEAK = 4.0
#: profile classes tried for each builtin family class, in order (after ``peak_<variant><family>``)
_FAMILY_FALLBACK = {"half_": ("half_", "native_", ""), "native_": ("native_", ""), "": ("",)}


def _family_chain(fam: str) -> list[tuple[str, float]]:
    """A builtin family and the families its rates fall back to where a profile has none of its
    own (:data:`models.static.features.FAMILY_PARENT`), each with the calls of it one call counts as."""
    from kernelcast.models.static.features import FAMILY_PARENT

    out = [(fam, 1.0)]
    while fam in FAMILY_PARENT and len(out) < 8:
        fam, calls = FAMILY_PARENT[fam]
        out.append((fam, out[-1][1] * calls))
    return out


def _family_value(p: DeviceProfile, stem: str, variant: str, fam: str,
                  variants: tuple[str, ...] | None = None) -> tuple[float, str] | None:
    """The rate (ops/s) of family class ``bi_<variant><fam>`` from the profile's
    ``<stem>_<v><family>_gops`` values: the ``variants`` tried (default the variant's fallbacks,
    :data:`_FAMILY_FALLBACK`) of the family, then of its parents (:func:`_family_chain`: the
    parent's rate over the calls one call counts as); with where it came from. None when the
    profile has none of them."""
    got = _family_lookup(p, lambda v, f: f"{stem}_{v}{f}_gops", variant, fam, variants)
    if got is None:
        return None
    val, calls, key = got
    own = key == f"{stem}_{variant}{fam}_gops"
    return val * 1e9 / calls, "profile" if own else f"profile ({key}" + (f" / {calls:g})" if calls != 1 else ")")


def _family_lookup(p: DeviceProfile, key: Callable[[str, str], str], variant: str, fam: str,
                   variants: tuple[str, ...] | None = None) -> tuple[float, float, str] | None:
    """The first profile value ``key(v, f)`` of family class ``bi_<variant><fam>``: the ``variants``
    (default the variant's fallbacks, :data:`_FAMILY_FALLBACK`) of the family, then of its parents
    (:func:`_family_chain`); with the calls of the found family one call counts as and the key.
    None when the profile has none of them."""
    for f, calls in _family_chain(fam):
        for v in variants or _FAMILY_FALLBACK[variant]:
            val = p.get(key(v, f))
            if val:
                return float(val), calls, key(v, f)
    return None


def _barrier_unrolling(p: DeviceProfile, is_cpu: bool) -> dict[str, Any]:
    """:attr:`DeviceParams.barrier_unrolled_items` and :attr:`DeviceParams.barrier_curve` of a CPU
    profile that has both ``barrier_unrolled_items`` (> 0) and the ``barrier_vs_local_size``
    curve; nothing otherwise (the line alone)."""
    curve = p.curves.get("barrier_vs_local_size") if is_cpu else None
    items = float(p.get("barrier_unrolled_items") or 0.0) if curve is not None else 0.0
    if curve is None or not items > 0 or len(curve.x) < 1:
        return {}
    return {"barrier_unrolled_items": items,
            "barrier_curve": (tuple(float(x) for x in curve.x), tuple(float(y) * 1e-9 for y in curve.y))}


def _chain_latencies(p: DeviceProfile) -> dict[str, float]:
    """Seconds of one compute unit per operation of a loop-carried chain, by chain class (calib
    chain's ``chain_<class>_ns``, :data:`models.static.chains.CHAIN_CLASSES`, and the routines',
    :func:`_routine_latencies`). An fp64 add or multiply without a value of its own takes the fp32
    one's: the same units serve both precisions (PoCL 3.1 on Zen 5, idle, 4,096 work-items of
    4,096-4,097 trips on one chain: fp64 adds 0.48 ns per trip, fp32 adds 0.48, fp64 multiplies 0.72;
    calib chain: fp32 add 0.49, multiply 0.73, fp64 FMA 0.99)."""
    out = {c: float(p.get(f"chain_{c}_ns") or 0.0) * 1e-9 for c in CHAIN_CLASSES if p.get(f"chain_{c}_ns")}
    for c64, c32 in (("fp64_add", "fp32_add"), ("fp64_mul", "fp32_mul")):
        if c64 not in out and c32 in out:
            out[c64] = out[c32]
    return {**out, **_routine_latencies(p)}


def _routine_latencies(p: DeviceProfile) -> dict[str, float]:
    """Seconds of one compute unit per call of a library routine on a loop-carried chain, by family
    class (``bi_<variant><family>``, :func:`models.static.chains.routine_class`): the profile's
    ``chain_<variant><family>_ns`` (calib chain), else the same family's other variants', else its
    parent family's times the calls one call counts as (:func:`_family_chain`); families without
    any are left out (their calls then cost what their scalar rate says, chain or not)."""
    from kernelcast.models.static.features import BUILTIN_FAMILIES

    out: dict[str, float] = {}
    for fam in BUILTIN_FAMILIES:
        if fam in INSTRUCTION_FAMILIES:
            continue
        for variant in _FAMILY_FALLBACK:
            got = _family_lookup(p, lambda v, f: f"chain_{v}{f}_ns", variant, fam)
            if got is not None:
                out[f"bi_{variant}{fam}"] = got[0] * got[1] * 1e-9
    return out


def _builtin_rates(p: DeviceProfile, rates: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """Vectorized rate of each builtin family class (``bi_*``): ``peak_<variant><family>_gops``,
    else the same family's other variants, else its parent family's (:func:`_family_value`), else
    (``divide``) the fp32 division rate; families without any measured rate are left out (the model
    then charges them at the ``sfu`` rate)."""
    from kernelcast.models.static.features import BUILTIN_FAMILIES

    out: dict[str, float] = {}
    src: dict[str, str] = {}
    for fam in BUILTIN_FAMILIES:
        for variant in _FAMILY_FALLBACK:
            key = f"bi_{variant}{fam}"
            got = _family_value(p, "peak", variant, fam)
            if got is not None:
                out[key], src[key] = got
            elif fam == "divide" and "fp32_div" in rates:
                out[key], src[key] = rates["fp32_div"], "profile (fp32 division rate)"
    return out, src


def _wi_rates(p: DeviceProfile, peak: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """Rates of a CPU profile for code vectorized across work-items (``wi_<class>_gops``: one
    dependent chain per work-item, no loop, many work-items): measured, else the class's peak
    times the measured wi/peak ratio of fp32 FMA; none when the profile has no ``wi_`` values.
    The peak rates come from kernels with 8 independent chains per work-item, more instruction-level
    parallelism than kernel code has: a vectorized work-item loop runs one chain per work-item and
    only the interleaving of a few vectors hides the latency. Builtin families (``bi_*``) get
    ``wi_<variant><family>_gops`` (independent calls per work-item) where measured (or their
    parent family's, :func:`_family_value`)."""
    out: dict[str, float] = {}
    src: dict[str, str] = {}
    ratio = None
    if p.get("wi_fp32_fma_gops") and "fp32_fma" in peak:
        ratio = float(p.get("wi_fp32_fma_gops") or 0.0) * 1e9 / peak["fp32_fma"]
    for c, r in peak.items():
        val = p.get(f"wi_{c}_gops")
        if val:
            out[c], src["wi " + c] = val * 1e9, "profile"
        elif c in NO_SIMD_CLASSES:
            out[c], src["wi " + c] = r, "the peak (no SIMD instruction: the peak is scalar code)"
        elif ratio is not None:
            out[c], src["wi " + c] = r * min(ratio, 1.0), "profile (peak x wi/peak ratio of fp32 FMA)"
    # builtin families: independent calls per work-item (calib.kernels.wi_call_kernel), measured only
    # (the FMA ratio says nothing of a math library's vector code); else their peak stays
    from kernelcast.models.static.features import BUILTIN_FAMILIES

    for fam in BUILTIN_FAMILIES:
        for variant in _FAMILY_FALLBACK:
            got = _family_value(p, "wi", variant, fam)
            if got is not None:
                key = f"bi_{variant}{fam}"
                out[key], src["wi " + key] = got
    return out, src


#: classes CPUs have no SIMD instruction for (x86 and Arm vector units do not divide integers): their
#: peak rate is scalar code already, and scaling it by the FMA's scalar/vector ratio charged an
#: ``i % n`` in a scalar loop 3.8 ns where PoCL on Zen 3 spends about 1.3 (``s += a[(i + k) % n]``:
#: 2.0 ns per trip per core, 0.77 without the ``%``; ds6's pa_repeat_reads and cf_triangular_loop
#: had been 2.3x too slow; tests/test_int_division.py)
NO_SIMD_CLASSES = frozenset({"int32_div"})

#: operation classes a CPU core runs on its integer divider, a unit the other operations overlap
#: (out-of-order execution): their time is a roofline of its own, not added to the rest. Measured on
#: PoCL 3.1, Zen 5: a scalar loop of ``(x * k + 7) % n`` alone 1.48 ns per trip and core (calib
#: peak/scalar int32_div: 1.45 ns per division); ``data[(gid + i) % total]`` in a loop whose other
#: work the model charges 2.5 ns per trip ran 2.9 ns, not 3.9
CPU_DIVIDER_CLASSES = frozenset({"int_div"})


def _scalar_rates(p: DeviceProfile, vec: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """Scalar (not vectorized across work-items) rates of a CPU profile: ``scalar_<class>_gops``
    where measured, else the vectorized rate times the measured scalar/vector ratio of the
    closest class (fp32 FMA for arithmetic), else ``1 / DEFAULT_SIMD_LANES`` of it."""
    out: dict[str, float] = {}
    src: dict[str, str] = {}
    ratio_fma = None
    if p.get("scalar_fp32_fma_gops") and "fp32_fma" in vec:
        ratio_fma = p.get("scalar_fp32_fma_gops", 0.0) * 1e9 / vec["fp32_fma"]  # type: ignore[operator]
    for c, r in vec.items():
        name = c[3:] if c.startswith("bi_") else c
        val = p.get(f"scalar_{name}_gops")
        family = None
        if c.startswith("bi_") and not val:
            # a routine without its own scalar rate: its parent family's, same variant only
            variant = next((v for v in ("native_", "half_") if name.startswith(v)), "")
            family = _family_value(p, "scalar", variant, name[len(variant):], (variant,))
        if val:
            out[c], src["scalar " + c] = val * 1e9, "profile"
        elif family is not None:
            out[c], src["scalar " + c] = family
        elif c in NO_SIMD_CLASSES:
            out[c], src["scalar " + c] = r, "the vectorized rate (no SIMD instruction: the peak is scalar code)"
        elif ratio_fma is not None and not c.startswith("bi_"):
            out[c], src["scalar " + c] = r * ratio_fma, "profile (vector rate x scalar/vector ratio of fp32 FMA)"
        else:
            out[c], src["scalar " + c] = r / DEFAULT_SIMD_LANES, f"rule: vector rate / {DEFAULT_SIMD_LANES:g} lanes"
    return out, src


def _few_vector_calls(feats: Any, cls: str) -> bool:
    """Whether the kernel's calls of family ``cls`` are all of the builtin the runtime still
    vectorizes, at few enough call sites (:data:`SCALAR_FAMILY_VECTOR_CALLS`;
    :attr:`SourceFeatures.call_sites`: each inlined path counted, however often it runs)."""
    if cls not in SCALAR_FAMILY_VECTOR_CALLS:
        return False
    routine, limit = SCALAR_FAMILY_VECTOR_CALLS[cls]
    sites = {k.split(":", 1)[1]: n for k, n in (getattr(feats, "call_sites", None) or {}).items()
             if k.split(":", 1)[0] == cls}
    return set(sites) == {routine} and sites[routine] <= limit


def _unrolled(lp: Any, trips: float) -> bool:
    """Whether the compiler unrolls loop ``lp`` of ``trips`` constant trips fully, the rule the
    walker's code motion uses too (``walk_loop._unrolls_fully``): under a ``#pragma unroll``
    (:attr:`LoopInfo.unroll_pragma`) whose count covers the trips (any count up to
    :data:`~models.static.loops.PRAGMA_UNROLL_MAX_TRIP` without one), a routine called or not; never
    under ``#pragma nounroll`` nor with an exit (``break``, ``return``: :attr:`LoopInfo.has_break`);
    without a pragma, up to :data:`UNROLL_MAX_TRIP` trips and no library routine called
    (:func:`_unroll_blockers`)."""
    pragma = getattr(lp, "unroll_pragma", None)
    if pragma == 1 or getattr(lp, "has_break", False):
        return False
    if pragma is not None:
        return trips <= (pragma or PRAGMA_UNROLL_MAX_TRIP)
    return trips <= UNROLL_MAX_TRIP and not _unroll_blockers(lp)


def _unroll_blockers(lp: Any) -> list[str]:
    """The builtin calls in the body of loop ``lp`` (:attr:`LoopInfo.calls`) that keep the compiler
    from unrolling it fully, however few its trips: a math library routine, inlined, is too large
    for the full-unroll threshold."""
    out = []
    for c in getattr(lp, "calls", ()):
        fam = c[3:].removeprefix("native_").removeprefix("half_")
        if fam not in INSTRUCTION_FAMILIES:
            out.append(c[3:])
    return out


#: full-precision builtin families whose calls leave the work-item loop scalar: the runtime's math
#: library is inlined as scalar code with branches, which the loop vectorizer does not vectorize.
#: Measured on this device (PoCL 3.1, under load): a kernel of 8 dependent calls per work-item and no
#: loop ran this many times below the explicit float16 peak of the same builtin: log 421, atan 347,
#: erf 147, pow 139, sin 182, tanh 31, but exp 4.8, native_exp 13, native_sin 10.6, sqrt and rsqrt
#: 1.9, native_divide 0.6 (fp32 FMA 0.1): those stay vectorizable. hypot: a kernel of one
#: ``hypot(x[i], y[i])`` per work-item ran 28.2 ns per work-item, ``sqrt(a * a + b * b)`` 0.155
#: (PoCL 3.1, 2^18 work-items, load 3.5). rint (and the float -> integer conversions with a rounding
#: mode, ``convert_int_rte``): 0.67 ns per work-item against 0.085 for ``convert_int`` (load 3.7).
#: cbrt: ``cbrt(x[i])`` 33.6 ns per work-item against 0.18 for ``sqrt(x[i])`` (PoCL 3.1 on an AMD EPYC
#: Zen 4, 2^20 work-items, load ~2). fmod: ``fmod(x[i] * 40.0f, 0.37f)`` 4.9 ns per work-item against
#: 0.088 for the division (PoCL 3.1 on an AMD EPYC Zen 5, 2^16 work-items, idle), where calib's
#: float16 fmod ran 6x its scalar rate.
#: The routines with a family of their own since (``models.static.features.FAMILY_PARENT``) stay
#: with their parent's families, and exp2, exp10 and expm1 join them although exp does not: four
#: independent calls per work-item of 2^18 work-items (PoCL 3.1, Zen 5, idle) took 3,617, 4,093 and
#: 11,064 us against 296 for exp (12-37x; their explicit float16 variants run 2.8-13 G/s); charged at
#: exp's vectorized rate, the 16 kernels of the dataset with exp2 calls were 1.4x too fast at the
#: median and 6x at worst (synth_stencil_000100).
SCALAR_FAMILIES = ("bi_log", "bi_sin", "bi_atan", "bi_pow", "bi_tanh", "bi_erf", "bi_hypot", "bi_rint", "bi_cbrt",
                   "bi_fmod", "bi_exp2", "bi_exp10", "bi_expm1", "bi_log2", "bi_log10", "bi_log1p", "bi_cos",
                   "bi_tan", "bi_sinh", "bi_cosh", "bi_asin", "bi_acos", "bi_erfc")
#: families of :data:`SCALAR_FAMILIES` that leave the work-item loop scalar unless every call is of
#: this builtin, at no more call sites than this (asinh, acosh and atanh, in tanh's family, are
#: still scalar library code): PoCL 3.1 inlines tanh as vector code, until the inlined copies make the loop
#: too large for its vectorizer. Read off its compiled code and timed on this host (Zen 5, 2^20
#: work-items): ``out[i] = tanh(x)`` is vector code (594 ymm references, 540-1,085 us in the host's
#: fast and slow phases, 1.4 G calls/s at 2^19 work-items with the argument made from the id), as in
#: the dataset's ``tm_tanh_act`` and ``tm_gelu_approx`` (both 2.4x too slow charged as scalar code);
#: ``tanh(x) + tanh(x + 1) + ...`` is vector code with 2 and 3 calls, scalar with 4, 5 and 8 (no ymm;
#: 15,050-15,600, 19,660-19,970, 28,330-28,900 us, 0.27 G calls/s); but two calls on values made
#: apart (calib's ``kc_wi_tanh_n2``) ran scalar too (0.24 G calls/s), so only one call counts as
#: vectorizable. The 8 dependent calls behind tanh's place in the list ran scalar for the size and
#: for their chain (``chain_tanh_ns``).
SCALAR_FAMILY_VECTOR_CALLS = {"bi_tanh": ("tanh", 1)}


#: a guarded elementwise store this many times slower per work-item than the unguarded one (calib
#: ``cond``) means the runtime does not vectorize a work-item loop with a conditional store (calib
#: cond's ratio on the runtime below: 2.2-6.4 over six idle runs, the plain store the noisier). Measured
#: here: PoCL 3.0 (the wheel, LLVM 14, AMD EPYC Zen 3, AVX2) 0.80-1.1 ns per work-item for ``if (i <
#: n) c[i] = a[i] + b[i]`` and for ``if (i >= n) return;`` before the store, 0.25-0.27 ns without the
#: guard (2^18 work-items, a datagen on the other core); the same with the guard on data (``if (a[i]
#: > 0.5f) c[i] = ...``) 0.66-0.74 ns, while a select (``c[i] = i < n ? v : 0``) and a uniform
#: condition stay at 0.29-0.40 ns. A runtime whose loop vectorizer turns such a store into a masked
#: store runs both alike: the fact is the device's (its compiler and instruction set), measured.
COND_STORE_SCALAR_RATIO = 1.6


#: an elementwise store with one ``fmax`` call this many times slower per work-item than without
#: (calib ``cond``) means the runtime calls its builtins out of line: a kernel that calls any math,
#: common, integer or geometric builtin runs its work-item loop scalar and pays each call
#: (``wi_libcall_ns``). Measured here (PoCL 3.0 wheel, LLVM 14, AMD EPYC Zen 3; 2^16 work-items, a
#: datagen on the other core), ns per work-item over the whole device: ``a[i] + b[i]`` 0.40, ``fmax``
#: 2.0, ``clamp`` 2.1, ``fabs`` 3.1, ``floor`` 2.6, ``mix`` 2.7, ``fma`` 2.0, ``sqrt`` 2.7, ``exp`` 10.3,
#: integer ``min`` 1.7, ``abs`` 1.2, ``mad24`` 2.4, ``add_sat`` on uchar 3.4, while the same maximum
#: written as ``a[i] > b[i] ? a[i] : b[i]`` ran 0.30 and ``a[i] * b[i] + 1.0f`` 0.27.
LIBCALL_SCALAR_RATIO = 2.0


def _ratio_to_plain_store(p: DeviceProfile, key: str) -> float | None:
    plain, other = p.get("wi_store_ns"), p.get(key)
    if not plain or not other or plain <= 0:
        return None
    return float(other) / float(plain)


def builtin_calls(feats: Any) -> list[str]:
    """The op classes of builtin calls in a kernel: the families (``bi_*``) and the other math
    builtins (``libcall``)."""
    ops = getattr(feats, "ops", {})
    return [k for k in ops if k.startswith("bi_") or k == LIBCALL]


def conditional_stores(feats: Any) -> list[Any]:
    """The global and local stores (not atomics) that run under a condition differing between
    work-items (:attr:`models.static.features.Access.conditional`)."""
    return [a for a in getattr(feats, "accesses", []) if a.kind == "store" and a.space in ("global", "local")
            and getattr(a, "conditional", "")]


def cpu_vectorizable(feats: Any, *, barrier_loops: bool = False, cond_store_scalar: bool = False,
                     libcall_scalar: bool = False) -> tuple[bool, str]:
    """Static estimate of whether a CPU OpenCL runtime (PoCL, Intel) vectorizes the work-item
    loop of a kernel: LLVM's loop vectorizer only handles innermost loops, so a kernel with a loop
    it does not fully unroll runs one work-item per lane of scalar code; atomics and calls of the
    transcendental builtins (:data:`SCALAR_FAMILIES`) are not vectorized. Branches are
    if-converted (masked stores), gathers use gather instructions.

    Except in a kernel with a work-group barrier: there PoCL splits the work-item loop into
    parallel regions at the barriers, and it also puts an implicit barrier into every loop whose
    trip count is the same for all work-items (not ``divergent``), so the work-item loop runs
    *inside* that loop and is vectorized. Measured on this device (PoCL 3.1, 2 cores, host load
    1-2): a loop of 2,000 uniform trips of two dependent LCG steps per work-item ran 2.1 ns per
    trip and work-item per core without a barrier in the kernel and 0.17-0.18 ns with one
    barrier after the loop (the same 12x with a trip count read from a buffer), but 2.1 ns again
    when the trip count differs between work-items (``samples + (gid & 1)``) even with the
    barrier; a 256-trip dot-product loop ran 2.9x faster with a barrier. The same kernels are
    timed by ``tests/test_cpu_class.py::test_uniform_loop_in_a_barrier_kernel_runs_vectorized_on_this_device``.

    A loop that itself contains a barrier (a tree reduction, a tiled loop) runs one region of
    the work-item loop per trip; that cost is charged per barrier and work-item
    (``barrier_wi_ns``, calibrated with such a loop) rather than through the vectorizability of
    the whole kernel, when ``barrier_loops`` (the profile has that value); without it such a
    loop makes the kernel scalar, as before. A loop contains a barrier when its trip count is a
    factor of the kernel's barrier count.

    ``cond_store_scalar`` (the device's calibrated fact, :attr:`DeviceParams.cond_store_scalar`): a
    store under a condition that differs between work-items (``if (i < n) c[i] = ...``, the rest
    of a kernel after ``if (i >= n) return;``) leaves the work-item loop of a kernel without
    barriers scalar, and in a kernel with barriers an access under such a condition that steps with
    a uniform loop keeps that loop's work-item loop scalar. ``libcall_scalar``
    (:attr:`DeviceParams.libcall_scalar`): a call of any math builtin does."""
    for a in getattr(feats, "accesses", []):
        if a.kind == "atomic":
            return False, f"atomic on {a.arg} (line {a.line})"
    mixing = getattr(feats, "lane_mixing", [])
    if mixing:
        # measured on PoCL 3.1 (1 Mi work-items, load ~3): distance(r[i], q) of a float2 r 1.46 ns per
        # work-item, v = r[i] - q; sqrt(v.x * v.x + v.y * v.y) 1.44, v.x * v.x + v.y * v.y 0.57, against
        # 0.19 for sqrt of a float array and 0.15 for float4 and float2 arithmetic kept whole
        return False, (f"components of one work-item's vector value combined (line {mixing[0]}: a swizzle or "
                       f"dot/length/distance); the work-item loop stays scalar")
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        for a in getattr(feats, "accesses", []):
            if _uniform_conditional_store(a):
                return False, (f"store to one address for all work-items under a condition ({a.arg}, line {a.line}; "
                               f"the loop vectorizer leaves such a store scalar)")
    if libcall_scalar:
        calls = builtin_calls(feats)
        if calls:
            return False, (f"builtin calls ({', '.join(sorted(calls))}); this runtime calls its builtins out of line "
                           f"(calib cond)")
    if cond_store_scalar and not _has_barrier(ops):
        # a kernel with barriers is split into work-item loops at them: a guarded store (a tree
        # reduction's ``if (lid < s)``, the group's ``if (lid == 0)`` result) is one region's, not the
        # loop's around the kernel's own work (ap_monte_carlo_pi: 2^-3.6 of its measured time when
        # charged scalar for its reduction's stores, 2^-1.1 without)
        cond = conditional_stores(feats)
        if cond:
            a = cond[0]
            return False, (f"store to {a.arg} (line {a.line}) under a condition that differs between work-items "
                           f"({a.conditional}); this runtime leaves such a work-item loop scalar (calib cond)")
    calls = sorted(k[3:] for k in ops if k in SCALAR_FAMILIES and not _few_vector_calls(feats, k))
    if calls:
        return False, "calls of " + ", ".join(calls) + " (scalar math library code)"
    barrier = _has_barrier(ops)
    bcount = str(ops.get("barrier", "")) if barrier else ""
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    deepest = max((lp.depth for lp in live), default=0)
    uniform_loops = barrier_loops_n = 0
    for lp in live:
        try:
            t: float | None = float(lp.trip)
        except ValueError:
            t = None
        if barrier and t is None and lp.trip in bcount and not getattr(lp, "divergent", True):
            # a loop with barriers: its regions are work-item loops of scalar code (measured:
            # 1.3-2 ns per work-item and barrier for one local update); with no loop inside it
            # (a tree reduction, a scan) that is the barrier's per-work-item cost; a loop
            # nested in it (a tiled loop's inner loop) is scalar compute
            if barrier_loops and lp.depth >= deepest:
                barrier_loops_n += 1
                continue
            return False, (f"loop at line {lp.line} with barriers and trip count {lp.trip}"
                           + (" and a loop inside" if lp.depth < deepest else ""))
        if t is not None and _unrolled(lp, t):
            continue
        if barrier and not getattr(lp, "divergent", True):
            shape = _implicit_barrier_blocker(lp) or _blocked_inner_loop(live, lp)
            if not shape:
                uniform_loops += 1
                continue
            return False, (f"loop at line {lp.line} with the same trip count in every work-item but {shape}: the "
                           f"runtime puts no implicit barrier into it, so its work-item loop stays scalar")
        if t is None:
            return False, (f"loop at line {lp.line} with trip count {lp.trip}"
                           + (" that differs between work-items" if barrier else ""))
        if t <= UNROLL_MAX_TRIP and _unroll_blockers(lp) and getattr(lp, "unroll_pragma", None) is None:
            return False, (f"loop at line {lp.line} with {t:g} trips calling {', '.join(_unroll_blockers(lp))} "
                           f"(a library routine: the loop is too large to unroll)")
        return False, f"loop at line {lp.line} with {t:g} trips (not unrolled)"
    if uniform_loops and cond_store_scalar:
        # the work-item loop inside a uniform loop is vectorized only if the loop's body can be: a
        # runtime that leaves a guarded store scalar does the same with a guarded access that steps
        # with the loop (rd_sum_multi_elem's ``if (idx < n) acc += in[idx]``, idx = gid + k * gsz:
        # 1.4-2.5 ns per trip and work-item per core on PoCL 3.0, Zen 3; charged vectorized, 8.6x
        # too fast)
        for a in getattr(feats, "accesses", []):
            if a.conditional and a.trip_strides and a.space != "private":
                return False, (f"{a.kind} of {a.arg} (line {a.line}) in a loop under a condition that differs "
                               f"between work-items ({a.conditional}); this runtime leaves it scalar (calib cond)")
    why = []
    if uniform_loops:
        why.append(f"{uniform_loops} loop(s) with the same trip count in every work-item in a kernel with barriers "
                   f"(the runtime's implicit loop barriers put the work-item loop inside them)")
    if barrier_loops_n:
        why.append(f"{barrier_loops_n} loop(s) with barriers charged per barrier and work-item")
    return True, "; ".join(why) or "no loop left after unrolling and no atomics"


def _implicit_barrier_blocker(lp: Any) -> str:
    """Why PoCL puts no implicit barrier into a loop whose trip count is the same in every
    work-item ("" when it does): it takes only a loop with one exit whose induction variable it
    knows to be uniform, which is a variable counting from 0 by 1. Measured on this device (PoCL
    3.1, 2 cores; ``for`` loops of 2,000 trips of ``sum += (float)k + s`` in a kernel with one
    barrier after the loop, 1,024 work-items in one work-group): 0.14 ms for ``k = 0; k < n; k++``
    (also with ``k != n``, ``k <= n - 1``, ``++k``, an unsigned or 64-bit counter, as a ``while``
    loop, or nested in a loop of 4 trips), 1.4 ms, 10x, for ``k = n - 1; k >= 0; k--``, ``k = n;
    k > 0; k--``, ``k = 1; k <= n; k++``, ``k += 2`` up to ``2 n``, and for a ``break`` or a second
    bound (``k < n && k < m``) in a loop counting from 0."""
    if getattr(lp, "has_break", False):
        return "with a break"
    if getattr(lp, "early_exit", False):
        return "with a second exit condition"
    if not getattr(lp, "from_zero", False):
        return (f"its condition is not one bound on a counter{' (' + lp.var + ')' if getattr(lp, 'var', None) else ''} "
                f"counting from 0 by 1")
    return ""


def unbarriered_loops(feats: Any) -> list[int]:
    """Lines of the loops of a kernel with barriers whose trips are alike in every work-item but
    which get no implicit barrier from the runtime (:func:`_implicit_barrier_blocker`, or a loop
    nested in them that gets none: :func:`_blocked_inner_loop`): their work-item loop runs around
    them, so each work-item's chain through them runs in turn as in a kernel without barriers.
    Measured on this device (PoCL 3.1, Zen 5, idle; 8,192 work-items in groups of 16 to 256): a
    loop of 2,000 trips of ``s = s * 0.999f + 1.0f`` counting down ran 7.4-7.6 ms with a barrier
    before it and without; predicted 2.76 ms with the barrier while its chain was left out, 7.85
    now. (A chain through an inner loop the compiler unrolls is not counted: the uniform loop around
    ``d = -2; d <= 2`` ran 7.7-8.2 ms, predicted 3.6.) Empty without a barrier."""
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        return []
    bcount = str(ops.get("barrier", ""))
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    out = []
    for lp in live:
        if getattr(lp, "divergent", True):
            continue
        try:
            if _unrolled(lp, float(lp.trip)):
                continue
        except ValueError:
            if lp.trip in bcount:
                continue                        # a loop with barriers
        if _implicit_barrier_blocker(lp) or _blocked_inner_loop(live, lp):
            out.append(lp.line)
    return out


def _blocked_inner_loop(loops: Sequence[Any], loop: Any) -> str:
    """Why a loop nested in ``loop`` keeps ``loop`` from getting an implicit barrier ("" when none
    does): PoCL puts implicit barriers into innermost loops only (its ImplicitLoopBarriers pass), and
    before the compiler unrolls anything, so a loop of a few constant trips nested in ``loop`` that
    gets no implicit barrier itself (:func:`_implicit_barrier_blocker`) leaves ``loop``'s work-item
    loop scalar. ``loops``: the kernel's live loops in the walk's order, a loop's inner loops right
    before it and deeper. Measured on this device (PoCL 3.1, Zen 5, idle; 8,192 work-items, one
    barrier before a loop of 400 trips around ``for (int d = -2; d <= 2; ++d) s = s * 0.999f + d``):
    7.8 ms in groups of 16, 64 and 256, against 0.55-0.76 ms with ``d = 0; d < 5`` (14x; the
    analytical model took both as vectorized). Not modelled: an inner loop of 2 trips counting from
    0 (``k = 0; k < 2``) ran 3.7x slower than one of 3 or 4 trips in groups of 64 and 256, and as
    fast in groups of 16."""
    i = next((j for j, lp in enumerate(loops) if lp is loop), None)
    if i is None:
        return ""
    for inner in reversed(loops[:i]):
        if inner.depth <= loop.depth:
            break
        why = _implicit_barrier_blocker(inner)
        if why:
            return (f"a loop inside it (line {inner.line}) {why}; the runtime adds implicit barriers to innermost "
                    f"loops only")
    return ""


def _uniform_conditional_store(a: Any) -> bool:
    """A store whose address is the same for every work-item (a constant index: a flag such as
    ``*changed = 1``) and that not every work-item executes (its count is not 1). LLVM's loop
    vectorizer does not vectorize a conditional store to a loop-invariant address, so PoCL's
    work-item loop stays scalar. Measured on this device (PoCL 3.1, load 4.5, 2^19 work-items,
    ``/tmp`` probe of gr_bfs_update_mask): 0.73 ns per work-item with ``if (nf[v]) {...; *not_done
    = 1;}``, 0.050 without the flag store, 0.22 with the flag stored unconditionally or stored per
    work-item (``not_done[v] = 1``, 4 more bytes per item): the conditional uniform store made the
    kernel 15x slower. Kernels with barriers are left out (there the store is usually a group's
    ``if (lid == 0)`` result in its own region after the last barrier)."""
    if a.kind != "store" or a.space not in ("global", "local") or a.indirect or not a.affine:
        return False
    if getattr(a, "coeffs", None) or str(a.count).strip() == "1":
        return False
    try:
        float(str(getattr(a, "index_expr", "") or "x"))
    except ValueError:
        return False
    return True


def cpu_throughput_loops(feats: Any) -> list[int]:
    """Lines of the loops that make a vectorized CPU kernel run at the throughput (peak) rates
    rather than at the one-chain-per-work-item rates (``wi_<class>_gops``); empty unless every
    loop that is neither unrolled nor a loop with barriers is one. Such a loop, in a kernel with
    barriers, has the same trip count in every work-item, no memory access and no loop nested
    in it: PoCL gives it an implicit barrier, so the work-item loop runs inside it and each trip
    is a pass over independent work-items. Measured on this device (PoCL 3.1, load 5): two
    dependent LCG steps (13 operations) per trip ran 0.17-0.34 ns per trip and work-item on one
    core, an fmax chain 0.12-0.20 ns, whether the loop comes before or after the barrier, two
    such loops too; without a barrier in the kernel 2.1-2.3 ns. The operation counts are per
    kernel, not per loop, hence all loops or none: ds1 kernels with a loop that reads memory in
    every trip (synth_tile_000047, rd_sum_multi_elem, synth_tile2d_000112) ran 3-4x slower than
    the peak rates, and a uniform loop nested in another (synth_tile_000009) ran scalar, 2.8 ns
    per trip."""
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        return []
    bcount = str(ops.get("barrier", ""))
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    if max((lp.depth for lp in live), default=0) != 1:
        return []
    counts = [str(a.count) for a in getattr(feats, "accesses", [])]
    out = []
    for lp in live:
        try:
            if float(lp.trip) <= UNROLL_MAX_TRIP:
                continue
            constant = True
        except ValueError:
            constant = False
        if not constant and lp.trip in bcount and not getattr(lp, "divergent", True):
            continue                                  # a loop with barriers: charged per barrier
        if getattr(lp, "divergent", True) or any(lp.trip in c for c in counts):
            return []
        out.append(lp.line)
    return out


_MOD_RE = re.compile(r"%\s*(\(?[A-Za-z0-9_ +\-*/]+\)?)\s*$")
_MIN_RE = re.compile(r"^min\(\s*([A-Za-z0-9_]+)\s*-\s*1\s*,")
_ID_COEFF = ("gid", "grp")


def atomic_distinct(a: Any, env: Mapping[str, Any]) -> tuple[np.ndarray | None, str]:
    """Static estimate of the number of distinct addresses one atomic site (an
    :class:`~models.static.features.Access` of kind ``atomic``) hits over a launch, the
    contention it sees: ``None`` when each work-item has its own address (the index is affine with
    a non-zero coefficient of the global or group id: no contention), else an array over the
    configurations, and how it was found: a constant index (1), an index taken modulo ``K`` (``%``
    or ``& (K - 1)``) or clamped by ``min(K - 1, ...)``, else the number of elements of the buffer
    (global) or local array (local) it points into, i.e. the assumption that the data-dependent
    or lid-only index spreads over the whole buffer. Unknown (a pointer the analysis does not size):
    ``None``, charged as uncontended, and said so."""
    from kernelcast.expr import compile_expr

    coeffs = getattr(a, "coeffs", {}) or {}
    if a.affine and not a.indirect and any(k.startswith(_ID_COEFF) and str(v) not in ("0", "")
                                           for k, v in coeffs.items()):
        return None, "index affine in the global/group id: one address per work-item (uncontended)"
    idx = (getattr(a, "index_expr", "") or "").strip()

    def value(text: str) -> np.ndarray | None:
        try:
            fn, _ = compile_expr(text)
            with np.errstate(all="ignore"):
                v = np.asarray(fn(env), dtype=np.float64)
        except Exception:  # noqa: BLE001 - an expression with unbound symbols: not this rule
            return None
        return v if np.all(np.isfinite(v)) else None

    if a.affine and not a.indirect and not coeffs and value(idx or "x_unbound") is not None:
        return np.asarray(1.0), f"constant index {idx}: one address for all work-items"
    for rx, how in ((_MOD_RE, "index modulo {}"), (_MIN_RE, "index clamped below {}")):
        m = rx.search(idx)
        if m:
            k = value(m.group(1))
            if k is not None:
                return np.maximum(k, 1.0), how.format(m.group(1).strip())
    size = env.get(("__elems_" if a.space == "global" else "len_") + a.arg)
    if size is not None:
        return np.maximum(np.asarray(size, dtype=np.float64), 1.0), (
            f"assumed: the {'data-dependent ' if a.indirect else ''}index spreads over all elements of {a.arg}")
    return None, f"unknown size of {a.arg}: assumed uncontended"


def uneven_ratio(env: Mapping[str, Any]) -> np.ndarray | None:
    """Per configuration, the largest ratio of a loop's busiest work-item's trips per entry
    (``tpeak_...``, :mod:`kernelcast.sites`) to its mean (``trip_...``) over the loops a counting
    launch measured; None without a measured peak. At :data:`UNEVEN_PEAK` or more the busiest
    work-item's time on one core bounds the kernel's: a loop of ``chunk`` elements per work-item
    over ``n`` elements, ``n / chunk`` far below the work-items, has a handful of busy work-items
    whatever its mean (synth_chunked_*, 4-16x too fast as work shared by all cores)."""
    ratio = None
    for k, v in env.items():
        if not k.startswith(PEAK_PREFIX):
            continue
        mean = env.get(TRIP_PREFIX + k[len(PEAK_PREFIX):])
        if mean is None:
            continue
        v, mean = np.asarray(v, dtype=np.float64), np.asarray(mean, dtype=np.float64)
        with np.errstate(all="ignore"):
            r = np.where(np.isfinite(v) & np.isfinite(mean) & (mean > 0), v / np.where(mean > 0, mean, 1.0), 1.0)
        ratio = r if ratio is None else np.maximum(ratio, r)
    return ratio


def atomic_seconds(feats: Any, env: Mapping[str, Any], dev: DeviceParams, *, alone: bool = False
                   ) -> np.ndarray | None:
    """Seconds of one compute unit per work-item spent in atomics on a CPU device: every atomic
    site's executions per work-item (its count) over the calibrated rate of ``atomic_add`` per
    compute unit (``atomic_<space>[_b<bins>]_gops`` / CU) at the site's number of distinct
    addresses (:func:`atomic_distinct`; the rate is interpolated in log2(bins) between the
    measured bin counts and clamped at the ends; an uncontended site gets the own-element rate).
    An atomic is a locked read-modify-write that the core serialises (not vectorized, not
    overlapped with other memory operations), so its time adds to the compute part. ``alone``: one
    work-item running while the others are done contends with nobody (the own-element rate).
    None when the device is not a CPU or the profile has no atomic rates (atomics are then charged
    as bytes only, as before)."""
    from kernelcast.expr import CACHE_KEY, compile_expr

    atomics = [a for a in getattr(feats, "accesses", []) if a.kind == "atomic" and a.space in ("global", "local")]
    if not atomics or not dev.is_cpu or not dev.atomic_rates:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    total = np.zeros(np.broadcast_shapes(*[np.shape(v) for v in env.values()]))
    cu = float(dev.compute_units)
    for a in atomics:
        fn, _ = compile_expr(a.count)
        with np.errstate(all="ignore"):
            c = np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=0.0)
        distinct = None if alone else atomic_distinct(a, {**env, **fenv})[0]
        rate = dev.atomic_rate(a.space, distinct)
        if rate is None:
            continue
        total = total + c / (rate / cu)
    return total


def gather_seconds(feats: Any, env: Mapping[str, Any], dev: DeviceParams) -> np.ndarray | None:
    """Seconds of one compute unit per work-item spent in gathers and scatters of vectorized CPU
    code: the global and constant accesses whose index is data-dependent or not affine in the
    work-item ids (:class:`~models.static.features.Access` ``indirect`` / not ``affine``) or
    affine with a step between adjacent work-items other than 0 or 1 element (``stride0``: a
    strided or interleaved access; measured on PoCL, load ~3.5: writing two halves interleaved at
    stride 2 took 4.1x the time of writing them contiguously, the same bytes), one
    gathered address per execution whatever its width (a ``float4`` at a data-dependent index is
    one 16-byte piece per lane; counted as 4 elements, ds2s's ma_gather_float4 went from 2x
    under- to 2.2x over-predicted), over the calibrated gather rate per compute unit
    (``gather_gops``, ``calib --only gather``: loads at computed pseudo-random indices of a table in
    the first cache level; scatters are assumed to cost the same). None without that rate. The
    bytes are still charged by the memory part; this is the instruction cost (measured here: 0.46
    ns per gathered element per core, against ~0.01 for a contiguous vector load's element).
    An access one element from the next work-item's that the vectorizer still gathers
    (:func:`consecutive_gather`: an index clamping the work-item id, or an ``int`` global id plus a
    constant) is a gather too, at the rate of gathers of consecutive addresses
    (``gather_clamped_gops``; not charged on a profile without it)."""
    from kernelcast.expr import CACHE_KEY, compile_expr

    clamped_rate = dev.gather_clamped_rate
    acc = [a for a in getattr(feats, "accesses", []) if a.space in ("global", "constant")
           and a.kind in ("load", "store")
           and (a.indirect or not a.affine or a.stride0 not in ("0", "1") or (clamped_rate and consecutive_gather(a)))]
    if not acc or not dev.is_cpu or not dev.gather_rate:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    total = np.zeros(np.broadcast_shapes(*[np.shape(v) for v in env.values()]))
    clamped = np.zeros_like(total)
    for a in acc:
        fn, _ = compile_expr(a.count)
        with np.errstate(all="ignore"):
            c = np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=0.0)
        if not a.indirect and a.affine and a.stride0 is not None:
            fn_s, _ = compile_expr(a.stride0)
            with np.errstate(all="ignore"):
                st = np.abs(np.nan_to_num(np.asarray(fn_s(fenv), dtype=np.float64), nan=1.0))
            near = (st == 0) | (st == 1)
            if clamped_rate and consecutive_gather(a):
                clamped = clamped + np.where(near, c, 0.0)   # a gather of consecutive addresses
            c = np.where(near, 0.0, c)                       # contiguous or uniform: vector loads
        total = total + c
    cu = float(dev.compute_units)
    return total / (dev.gather_rate / cu) + (clamped / (clamped_rate / cu) if clamped_rate else 0.0)


_LANE_ID = re.compile(r"\b(?:gid0|lid0)\b")


def clamped_index(a: Any) -> bool:
    """Whether an access's index clamps a work-item id (``in[min(i + 1, n - 1)]``, ``clamp(x + dx,
    0, w - 1)``, ``max(gid - 1, 0)``): affine with one element between adjacent work-items almost
    everywhere, but the loop vectorizer cannot prove the lanes' addresses consecutive and issues a
    gather. Measured on this device (PoCL 3.1, 2 cores, 262,144 work-items in groups of 256, idle):
    ``out[i] = in[clamp(i - 1, 0, n - 1)] + in[clamp(i + 1, 0, n - 1)]`` 89 us against 19-20 us for
    ``out[i] = in[i] * 2``, the same under ``if (i < n)`` or after ``if (i >= n) return;`` 92-95 us:
    0.27 ns per clamped load and core, against 0.18 for calib's gathers of consecutive addresses."""
    text = str(getattr(a, "index_expr", "") or "")
    for m in re.finditer(r"\b(?:min|max|clamp)\(", text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if _LANE_ID.search(text[m.end():j]):
            return True
    return False


_SHIFTED_GID = re.compile(r"^(?:gid0 [+-] \d+|\d+ \+ gid0)$")


def shifted_int_index(a: Any) -> bool:
    """Whether an access's index is a signed 32-bit ``int`` global id plus a constant (``int i =
    get_global_id(0); ... in[i + 1]``): PoCL 3.1's loop vectorizer gathers it, though the lanes'
    addresses are consecutive. Measured on this device (2 cores, 2^20 work-items in groups of 256,
    ``out[i] = in[i + C] * 2``, two rounds each): 180-199 us for C = 1, 3 or 7 and for a store to
    ``out[i + 1]``, against 47-57 us for ``in[i]``, for the same index as ``uint`` or ``size_t``, for
    ``in[i + off]`` with ``off`` a kernel argument, for ``y * w + x + 1`` in 2D and for ``g + l + 1``
    from the group and local ids. Not where a guard around the access bounds that index so that the
    vectorizer proves the addresses consecutive (``Access.index_guarded``, :mod:`models.static.guards`:
    ``i >= 1 ? in[i - 1]``, ``if (i + 1 < n) ... in[i + 1]``): a masked vector load or store there."""
    return (bool(getattr(a, "index_int32", False)) and not getattr(a, "index_guarded", False)
            and bool(_SHIFTED_GID.match(str(getattr(a, "index_expr", "")))))


def consecutive_gather(a: Any) -> bool:
    """Whether vectorized CPU code gathers an access whose lanes' addresses are consecutive
    (:func:`clamped_index`, :func:`shifted_int_index`)."""
    return clamped_index(a) or shifted_int_index(a)


#: bytes of a page: a loop whose trips step this far apart leaves the hardware prefetchers behind
PAGE_BYTES = 4096
#: bytes of a cache line of a CPU (x86-64 and the common ARM server cores)
CPU_LINE_BYTES = 64
#: a walk of at most this many trips (pages) per work-item is short: a first-level data TLB (64-72
#: entries on current x86 cores) holds its pages, and it is charged the ``strided_short`` values
SHORT_WALK_TRIPS = 64
#: a walk of at most this many trips per work-item is tiny: the hardware prefetchers follow its few
#: concurrent page streams, and it is charged the ``strided_tiny`` values (calib measured 4-trip
#: walks, 13 ns per line from memory here, against 42 at 16 trips and 148 at 1,024)
TINY_WALK_TRIPS = 8


def strided_seconds(feats: Any, env: Mapping[str, Any], dev: DeviceParams, level: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """CPU devices: (seconds of one compute unit per work-item, bytes per work-item) of the global
    accesses in a loop whose trips step a page or more apart (``trip_strides`` of the access: the
    grid-stride loop ``for (i = gid; i < n; i += get_global_size(0))``, an ELLPACK column walk
    ``k * rows + row``). A GPU coalesces one trip of neighbouring work-items; a CPU runtime runs
    each work-item's loop in turn, so every trip lands on another page and each cache line is
    fetched once, by the first work-item that touches it (neighbours with ``stride0`` of one element
    share it), at the calibrated cost of such a line from the level that holds the working set
    (``level``, the index of :attr:`DeviceParams.bw_levels`, past them main memory; ``calib
    --only stride``: ``strided_line_level{i}_ns`` and ``strided_line_ns``, else the DRAM latency
    from memory and nothing from a cache level), and for a walk of at most
    :data:`SHORT_WALK_TRIPS` executions per work-item (a CSR or ELLPACK row) the short-walk values
    ``strided_short...`` where calibrated, and for at most :data:`TINY_WALK_TRIPS` the tiny-walk
    ones ``strided_tiny...`` (else the short ones). The caller removes these bytes from the streamed ones.
    Measured here (PoCL 3.1 on an AMD EPYC Zen 4, idle): a line from memory costs 116 ns per core
    in 2,048-trip walks, 11.7 ns in 16-trip ones, against 5.2 ns at the streaming bandwidth; the
    suite's ``kc_grid_sum`` over 16 Mi floats took 55 ms (predicted 5.2 ms before, 61 ms now) and
    its ELLPACK kernel (16 entries per row) over 131,072 rows 5.0 ms (2.7 ms before, 3.7 ms now)."""
    from kernelcast.expr import CACHE_KEY, compile_expr

    if not dev.is_cpu or not dev.strided_line_s:
        return None
    acc = [a for a in getattr(feats, "accesses", []) if a.space == "global" and a.kind in ("load", "store")
           and getattr(a, "trip_strides", None) and a.affine and not a.indirect and a.stride0 not in (None, "0")]
    if not acc:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    shape = np.broadcast_shapes(*[np.shape(v) for v in env.values()])
    lines, nbytes = np.zeros(shape), np.zeros(shape)

    def value(text: str, default: float) -> np.ndarray:
        fn, _ = compile_expr(text)
        with np.errstate(all="ignore"):
            return np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=default, posinf=default, neginf=default)

    lv = np.full(shape, len(dev.bw_levels)) if level is None else np.broadcast_to(level, shape)

    def costs(past: float | None, inside: dict[int, float]) -> np.ndarray:
        c = np.where(lv >= len(dev.bw_levels), past or 0.0, 0.0)
        for i, v in inside.items():
            c = np.where(lv == i, v, c)
        return c

    long_cost = costs(dev.strided_line_s, dev.strided_level_s)
    short_cost = (costs(dev.strided_short_s, dev.strided_short_level_s)
                  if dev.strided_short_s or dev.strided_short_level_s else long_cost)
    tiny_cost = (costs(dev.strided_tiny_s, dev.strided_tiny_level_s)
                 if dev.strided_tiny_s or dev.strided_tiny_level_s else short_cost)
    seconds = np.zeros(shape)
    for a in acc:
        step = innermost_step(a.trip_strides, value, shape) * a.unit_bytes
        far = step >= PAGE_BYTES
        if not np.any(far):
            continue
        count = value(a.count, 0.0)
        far = far & (count >= 2)      # one trip per work-item is no walk: neighbours stream through memory
        lane_bytes = np.abs(value(a.stride0, 1.0)) * a.unit_bytes
        per_exec = np.minimum(1.0, np.maximum(a.elem_bytes, lane_bytes) / CPU_LINE_BYTES)
        cost = np.where(count <= TINY_WALK_TRIPS, tiny_cost,
                        np.where(count <= SHORT_WALK_TRIPS, short_cost, long_cost))
        lines = lines + np.where(far, count * per_exec, 0.0)
        seconds = seconds + np.where(far, count * per_exec * cost, 0.0)
        nbytes = nbytes + np.where(far & (cost > 0), count * a.elem_bytes, 0.0)
    if not np.any(lines > 0):
        return None
    return seconds, nbytes


def innermost_step(trip_strides: Mapping[str, str], value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The elements an access moves per trip of the innermost loop around it that moves it at all
    (``trip_strides`` maps a loop's iteration symbol ``it<serial>`` to the access's stride per trip;
    a nested loop's serial is above its parent's; ``value`` evaluates an expression, 0 where it
    cannot). ``A[r * cols + base + k]`` walks on in ``k`` one element at a time, whatever the
    outer loop's stride in ``base``: it streams, and only each outer trip starts a new page. Taking
    the largest stride of any loop instead charged every element of ``la_matvec_local_x`` at a
    local size of 1,528 (outer stride 6 KiB) as a line of its own: 45x its measured time."""
    def serial(key: str) -> int:
        digits = "".join(ch for ch in key if ch.isdigit())
        return int(digits) if digits else -1

    step = np.zeros(shape)
    found = np.zeros(shape, dtype=bool)
    for key in sorted(trip_strides, key=serial, reverse=True):
        s = np.abs(np.broadcast_to(value(trip_strides[key], 0.0), shape))
        step = np.where(found, step, s)
        found = found | (s > 0)
    return step


def _has_barrier(ops: Any) -> bool:
    """Whether the kernel has a work-group barrier: a ``barrier`` count that is not constant 0."""
    c = ops.get("barrier") if hasattr(ops, "get") else None
    if c is None:
        return False
    try:
        return float(c) > 0
    except (TypeError, ValueError):
        return True           # a symbolic count (barriers inside loops)


# ---------------------------------------------------------------------------------------------
# configurations -> feature environments


def config_env(gsize: list[int], lsize: list[int] | None, args: list[dict[str, Any]],
               counts: Mapping[str, float] | None = None) -> dict[str, float]:
    """The symbols of one configuration: sizes per dimension, scalar values, local lengths, and the
    site counts measured for it (``counts``: site symbol -> value, :class:`~models.static.features.SiteInfo`)."""
    from kernelcast.cltypes import parse_type

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
    env["__working_set_bytes"] = buf_bytes
    for k, v in (counts or {}).items():
        if k.startswith(COUNT_PREFIXES):
            env[k] = float(v)
    return env


def stack_envs(envs: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Per-configuration environments of one kernel as arrays: a symbol missing in some of them is
    1 there (an unbound scalar), except a site count, which stays NaN (not measured: the site's
    default, :meth:`~models.static.features.SourceFeatures.complete`)."""
    keys_all = sorted({k for e in envs for k in e})
    env = {k: np.array([e.get(k, np.nan) for e in envs], dtype=np.float64) for k in keys_all}
    return {k: (v if k.startswith(COUNT_PREFIXES) or not np.isnan(v).any() else np.where(np.isnan(v), 1.0, v))
            for k, v in env.items()}


# ---------------------------------------------------------------------------------------------
# the model


@dataclass
class AnalyticalResult:
    time_s: np.ndarray
    energy_j: np.ndarray
    parts: dict[str, np.ndarray]


class AnalyticalModel(Predictor):
    """Analytical time/energy predictor for one device profile."""

    name = "analytical"

    def __init__(self, profile: DeviceProfile, *, short_kernel_s: float = 1e-3, power_cap_w: float | None = None):
        self.profile = profile
        self.dev = DeviceParams.from_profile(profile)
        self.short_kernel_s = short_kernel_s
        self.power_cap_w = power_cap_w
        self._features: dict[tuple[str, str, str], Any] = {}

    # -- features ---------------------------------------------------------------------------

    def features(self, source: str, name: str, build_options: str = "") -> Any:
        from kernelcast.models.static import analyze_source

        from kernelcast.schema import Kernel

        key = (source, name, build_options)
        if key not in self._features:
            self._features[key] = analyze_source(Kernel(source=source, name=name, build_options=build_options))
        return self._features[key]

    # -- core, vectorized -------------------------------------------------------------------

    def evaluate(self, feats: Any, env: dict[str, np.ndarray], power_cap_w: np.ndarray | float | None = None
                 ) -> AnalyticalResult:
        """Time (s), energy (J) and the parts of the model for arrays of configurations of one kernel."""
        d = self.dev
        f = feats.evaluate_many({k: v for k, v in env.items() if not k.startswith("__")})
        g = env["gsize0"] * env["gsize1"] * env["gsize2"]
        lsz = env["lsize0"] * env["lsize1"] * env["lsize2"]
        n_wg = env["ngroups0"] * env["ngroups1"] * env["ngroups2"]
        cu = float(d.compute_units)
        ws = np.asarray(env.get("__working_set_bytes", np.zeros_like(g)), dtype=np.float64)
        ws = np.broadcast_to(ws, g.shape)

        # occupancy: resident work-groups per compute unit
        if d.is_gpu:
            warps_per_wg = np.ceil(lsz / d.warp)
            per_cu = np.full_like(g, d.max_wg_per_cu or 32.0)
            if d.max_warps_per_cu:
                per_cu = np.minimum(per_cu, np.floor(d.max_warps_per_cu / np.maximum(warps_per_wg, 1)))
            lm = f["local_mem_bytes"]
            if d.local_mem_per_cu:
                per_cu = np.where(lm > 0, np.minimum(per_cu, np.floor(d.local_mem_per_cu / np.maximum(lm, 1))), per_cu)
            per_cu = np.maximum(per_cu, 1.0)
            occupancy = per_cu * warps_per_wg / (d.max_warps_per_cu or per_cu * warps_per_wg)
        else:
            per_cu = np.ones_like(g)
            occupancy = np.minimum(n_wg, cu) / cu
        concurrent = cu * per_cu

        # per-work-item costs
        vec = True
        throughput = False
        if d.is_cpu:
            vec, _why = d.vectorizable(feats)
            throughput = vec and bool(cpu_throughput_loops(feats))
        comp_s_item, flops = self._item_seconds(feats, f, env, vec, throughput)
        busiest_s = None
        ratio = uneven_ratio(env) if d.is_cpu else None
        if ratio is not None:
            uneven = ratio >= UNEVEN_PEAK
            # the busiest work-item on one core, as scalar code (one work-item fills no vector),
            # its atomics contending with nobody
            scalar_s, _ = self._item_seconds(feats, f, env, False, False, alone=True)
            busiest_s = np.where(uneven, ratio * scalar_s, 0.0)
            # fewer busy work-items than cores: their atomics do not contend either
            few = uneven & (g / np.maximum(ratio, 1.0) < cu)
            if np.any(few):
                alone_s, _ = self._item_seconds(feats, f, env, vec, throughput, alone=True)
                comp_s_item = np.where(few, alone_s, comp_s_item)
        if d.is_cpu and cu > 1 and any(a.kind == "atomic" for a in getattr(feats, "accesses", [])):
            # one work-group runs on one core, and so does a launch whose work one core finishes
            # before the others join it (cu_join_us): its atomics contend with no other core
            alone_s, _ = self._item_seconds(feats, f, env, vec, throughput, alone=True)
            single = (n_wg <= 1) | (g * alone_s <= d.join_s)
            comp_s_item = np.where(single, alone_s, comp_s_item)
        fetched = f["global_fetched_bytes"] + f["constant_load_bytes"] * 0.0
        requested = f["global_load_bytes"] + f["global_store_bytes"] + f["global_atomic_bytes"]
        bw = np.full_like(g, d.dram_bw)
        level = np.full(g.shape, len(d.bw_levels), dtype=np.int64)
        active_cu = np.minimum(n_wg, cu)
        for i in reversed(range(len(d.bw_levels))):
            size, lbw = d.bw_levels[i]
            fits = ws <= size
            if d.is_cpu and i < len(d.level_sharing) and d.level_sharing[i] > 0:
                # the working set is spread over the busy cores; one instance of the level holds
                # size x sharing / CU and is shared by its busy cores: a private level gives each
                # core size / CU (so one work-group sees 1/CU of an L2's total), the shared last
                # level gives one busy core all of it
                sh = d.level_sharing[i]
                per_core = size * sh / (cu * np.minimum(sh, active_cu))
                fits = ws / active_cu <= per_core
            bw = np.where(fits, lbw, bw)
            level = np.where(fits, i, level)
        local_s_item = (f["local_bytes"] / (d.local_bw / cu)) if d.local_bw else np.zeros_like(g)
        barriers = f["barrier"]
        strided_s_item = np.zeros_like(g)
        streamed = fetched
        if d.is_cpu:
            st = strided_seconds(feats, env, d, level)
            if st is not None:
                strided_s_item = st[0]
                streamed = np.maximum(fetched - st[1], 0.0)

        def wave(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            active = np.minimum(w, cu)
            rounds = np.ceil(w / cu)
            comp = rounds * lsz * comp_s_item
            mem = w * lsz * streamed / np.maximum(bw * active / cu, 1.0) + rounds * lsz * strided_s_item
            sync = rounds * barriers * d.barrier_seconds(lsz)
            return comp, mem + rounds * lsz * local_s_item, sync

        full = np.floor(n_wg / concurrent)
        rem = n_wg - full * concurrent
        c1, m1, s1 = wave(np.minimum(concurrent, n_wg))
        c2, m2, s2 = wave(rem)
        c2, m2, s2 = (np.where(rem > 0, x, 0.0) for x in (c2, m2, s2))
        comp_t = np.where(full > 0, full * c1, 0.0) + c2
        mem_t = np.where(full > 0, full * m1, 0.0) + m2
        sync_t = np.where(full > 0, full * s1, 0.0) + s2

        join_t = np.zeros_like(g)
        if d.is_gpu:
            body = self._mwp_cwp(f, lsz, per_cu, n_wg, cu, comp_t, mem_t)
        else:
            even = np.maximum(comp_t, mem_t)
            body = self._joined(even, n_wg)
            join_t = body - even
            if busiest_s is not None:
                # a work-item that runs its loops far more than the others is a critical path
                # no other core can share
                body = np.maximum(body, busiest_s)
                comp_t = np.maximum(comp_t, busiest_s)
        launch = d.launch_s + n_wg * (d.wg_overhead_s + d.wi_overhead_s * lsz)

        # DVFS under a power cap: compute slows with the clock
        cap = power_cap_w if power_cap_w is not None else self.power_cap_w
        freq_ratio = np.ones_like(g)
        if cap is not None and d.tdp_w:
            freq_ratio = np.minimum(1.0, (np.asarray(cap, dtype=np.float64) / d.tdp_w) ** (1 / 3))
            body = self._joined(np.maximum(comp_t / freq_ratio, mem_t), n_wg) if not d.is_gpu else body / np.where(
                comp_t >= mem_t, freq_ratio, 1.0)
        time_s = launch + body + sync_t

        energy = self._energy(f, g, fetched, level, time_s, n_wg, cu, freq_ratio)
        intensity = np.where(requested > 0, flops / np.maximum(requested, 1e-12), np.inf)
        peak_flops = 2 * d.rates.get("fp32_fma", 1e10)
        parts = {
            "launch_s": launch * np.ones_like(g), "compute_s": comp_t, "memory_s": mem_t, "sync_s": sync_t,
            "occupancy": occupancy, "eta_coal": f["eta_coal"], "bandwidth_Bps": bw, "memory_level": level,
            "arithmetic_intensity": intensity, "time_balance": np.full_like(g, peak_flops / d.dram_bw),
            "waves": np.ceil(n_wg / concurrent), "resident_wg_per_cu": per_cu, "global_items": g,
            "flops": flops * g, "fetched_bytes": fetched * g, "strided_lines_s": strided_s_item * g / cu,
            "busiest_item_s": busiest_s if busiest_s is not None else np.zeros_like(g),
            "join_s": join_t,
        }
        if d.energy:
            eps_flop = d.energy.get("energy_per_op_fp32_fma_pj")
            eps_mem = d.energy.get("energy_per_access_dram_pj")
            if eps_flop and eps_mem:
                parts["energy_balance"] = np.full_like(g, (eps_mem / 32) / (eps_flop / 2))
        return AnalyticalResult(time_s, energy, parts)

    def _joined(self, body: np.ndarray, n_wg: np.ndarray) -> np.ndarray:
        """CPU: the time ``body`` of a launch spread evenly over the busy compute units, with the
        units after the first joining ``cu_join_us`` late (:func:`calib.fits.join_time`; ``body``
        itself without that value)."""
        d = self.dev
        if not d.is_cpu or d.join_s <= 0:
            return body
        active = np.minimum(n_wg, float(d.compute_units))
        return join_time(body * active, d.join_s, d.compute_units, n_wg)

    def _item_seconds(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], vec: bool,
                      throughput: bool, alone: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Seconds of one compute unit per work-item in computation (operations by class at their
        rates, builtin families, and on a CPU the corrections, atomics and gathers), and the flops
        per work-item: ``vec`` and ``throughput`` say how the runtime runs the work-item loop,
        ``alone`` that the work-item's atomics contend with no other core."""
        d = self.dev
        g = env["gsize0"] * env["gsize1"] * env["gsize2"]
        cu = float(d.compute_units)
        prefix = "warp_" if d.is_gpu else ""
        comp_s_item = np.zeros_like(g)
        flops = np.zeros_like(g)
        families = [b for b in BUILTIN_CLASSES if b in f and np.any(f[b] > 0)]
        divider = np.zeros_like(g)
        for op in RATE_CLASSES:
            cnt = f.get(prefix + op, f.get(op))
            if cnt is None:
                continue
            if op == "sfu" and families:
                continue        # every special function is charged in its family below
            rate = (d.vector_rate(op) if d.is_cpu and not throughput else d.rate(op)) if vec else d.scalar_rate(op)
            if d.is_cpu and op in CPU_DIVIDER_CLASSES:
                divider = divider + cnt / (rate / cu)
                continue
            comp_s_item = comp_s_item + cnt / (rate / cu)
            if op.startswith("fp"):
                flops = flops + f[op] * (2 if op.endswith("fma") else 1)
        for b in families:
            cnt = f.get(prefix + b, f[b])
            if not vec:
                rate = d.scalar_rate(b)
                if d.is_cpu and b in d.wi_rates:
                    # one call per work-item (calib wi, calib.kernels.SCALAR_ROUTINES): the core
                    # overlaps only a few neighbouring work-items' inlined routines, so a work-item's
                    # first call costs at least that, its further ones interleave at the scalar rate
                    comp_s_item = comp_s_item + np.maximum(cnt / (rate / cu),
                                                           np.minimum(cnt, 1.0) / (d.wi_rates[b] / cu))
                    continue
            elif d.is_cpu and not throughput and b in d.wi_rates:
                rate = d.wi_rates[b]          # one call per work-item, vectorized across work-items
            else:
                rate = d.builtin_rate(b)
            comp_s_item = comp_s_item + cnt / (rate / cu)
        if d.is_cpu and not vec:
            comp_s_item = comp_s_item + (vector_value_correction(f, d) + inner_loop_correction(f, d)) * cu
            # in a kernel with barriers a loop all work-items take alike gets the runtime's implicit
            # barrier (the work-item loop runs inside it: no work-item waits for its own trip
            # before); a loop whose trips differ between work-items keeps its chain there too, in
            # groups of every size, and the inner loop of a loop with barriers in the groups the
            # runtime does not unroll (measured: chain_seconds); where a loop all work-items take
            # alike gets no implicit barrier (unbarriered_loops), its chain counts as without one
            barrier = _has_barrier(getattr(feats, "ops", {}))
            lsz = env["lsize0"] * env["lsize1"] * env["lsize2"]
            inner = lsz > d.barrier_unrolled_items if barrier else True
            chain = chain_seconds(f, d, uniform=not barrier or bool(unbarriered_loops(feats)), inner=inner)
            if chain is not None:
                comp_s_item = np.maximum(comp_s_item, chain)
        # the integer divider is a unit of its own that the other operations overlap
        comp_s_item = np.maximum(comp_s_item, divider)
        if d.is_cpu and d.libcall_scalar and d.libcall_s:
            # the out-of-line calls of the builtins that are not families (those have their own rates)
            comp_s_item = comp_s_item + f[LIBCALL] * d.libcall_s
        if d.is_cpu:
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

    def _mwp_cwp(self, f: dict[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray, n_wg: np.ndarray, cu: float,
                 comp_t: np.ndarray, mem_t: np.ndarray) -> np.ndarray:
        """Hong and Kim's MWP/CWP cases, per compute unit, scaled by the repetitions (waves)."""
        d = self.dev
        clock = d.clock_hz or 1.4e9
        mem_l = (d.mem_latency_s * clock) if d.mem_latency_s else DEFAULT_MEM_LATENCY_CYCLES
        warps_wg = np.ceil(lsz / d.warp)
        n_warps = np.maximum(np.minimum(per_cu, np.ceil(n_wg / cu)) * warps_wg, 1.0)   # active warps per SM
        mem_insts = np.maximum(f["warp_global_mem"], 1e-9)
        bytes_per_req = np.maximum(f["global_fetched_bytes"] / mem_insts, 1.0) * d.warp
        bw_per_cu_cycle = d.dram_bw / cu / clock
        departure = np.maximum(bytes_per_req / bw_per_cu_cycle, 1e-3)
        mwp = np.minimum(mem_l / departure, n_warps)
        comp_cycles = np.maximum(sum(f.get("warp_" + op, 0.0) for op in RATE_CLASSES) * 4.0, 1.0)
        mem_cycles = f["warp_global_mem"] * mem_l
        cwp = np.minimum((mem_cycles + comp_cycles) / comp_cycles, n_warps)
        reps = np.ceil(np.ceil(n_wg / cu) / np.maximum(per_cu, 1)) * np.maximum(per_cu, 1) * warps_wg / n_warps
        no_mem = f["warp_global_mem"] <= 0
        case1 = (mem_cycles + comp_cycles + comp_cycles / mem_insts * (mwp - 1))
        case2 = mem_cycles * n_warps / np.maximum(mwp, 1e-9) + comp_cycles / mem_insts * (mwp - 1)
        case3 = mem_l + comp_cycles * n_warps
        eq = (np.abs(mwp - n_warps) < 1e-9) & (np.abs(cwp - n_warps) < 1e-9)
        cycles = np.where(eq, case1, np.where(cwp >= mwp, case2, case3))
        cycles = np.where(no_mem, comp_cycles * n_warps, cycles)
        t = cycles * reps / clock
        # the bandwidth roofline still bounds the wave model from below
        return np.maximum(t, np.maximum(comp_t, mem_t))

    def _energy(self, f: dict[str, np.ndarray], g: np.ndarray, fetched: np.ndarray, level: np.ndarray,
                time_s: np.ndarray, n_wg: np.ndarray, cu: float, freq_ratio: np.ndarray) -> np.ndarray:
        e = self.dev.energy
        nan = np.full_like(g, np.nan)
        if not e:
            return nan
        dyn = np.zeros_like(g)
        for op in RATE_CLASSES:
            eps = None
            for c in RATE_CLASSES[op]:
                eps = e.get(f"energy_per_op_{c}_pj")
                if eps is not None:
                    break
            if eps is None:
                continue
            dyn = dyn + f[op] * g * eps * 1e-12
        eps_mem = np.full_like(g, e.get("energy_per_access_dram_pj", np.nan))
        for i in range(len(self.dev.bw_levels)):
            v = e.get(f"energy_per_access_level{i}_pj")
            if v is not None:
                eps_mem = np.where(level == i, v, eps_mem)
        if np.isnan(eps_mem).all():
            return nan
        dyn = dyn + fetched * g / 32.0 * np.nan_to_num(eps_mem) * 1e-12
        if "energy_per_access_local_pj" in e:
            dyn = dyn + f["local_bytes"] * g / 32.0 * e["energy_per_access_local_pj"] * 1e-12
        active = np.minimum(n_wg, cu)
        if all(k in e for k in ("power_cu_alpha_w", "power_cu_beta", "power_cu_delta_w")):
            p_static = e["power_cu_alpha_w"] * active ** e["power_cu_beta"] + e["power_cu_delta_w"]
        else:
            p_static = np.full_like(g, e["idle_power_w"])
        r = e.get("transient_ratio")
        if r is not None:
            dyn = np.where(time_s < self.short_kernel_s, dyn * r, dyn)
        dyn = dyn * freq_ratio ** 2      # dynamic energy per op ~ V^2, V ~ f under DVFS
        return dyn + p_static * time_s

    # -- the predictor interface ----------------------------------------------------------------

    def predict(self, frame: pd.DataFrame) -> Predictions:
        """One prediction per row; rows need ``source``, ``kernel_name``, ``gsize``, ``lsize``, ``args``."""
        n = len(frame)
        time_us = np.full(n, np.nan)
        energy = np.full(n, np.nan)
        expl: list[dict[str, Any]] = [{} for _ in range(n)]
        opts = frame["build_options"] if "build_options" in frame else pd.Series([""] * n, index=frame.index)
        keys = list(zip(frame["source"], frame["kernel_name"], opts.fillna("")))
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, k in enumerate(keys):
            groups.setdefault(k, []).append(i)
        caps = frame["power_cap_w"].to_numpy(dtype=float) if "power_cap_w" in frame else None
        for (src, name, bo), idx in groups.items():
            try:
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
            env = stack_envs(envs)
            cap = None if caps is None else np.where(np.isnan(caps[idx]), np.inf, caps[idx])
            res = self.evaluate(feats, env, cap)
            time_us[idx] = res.time_s * 1e6
            energy[idx] = res.energy_j
            extra = kernel_assumptions(feats, self.dev)
            for j, i in enumerate(idx):
                expl[i] = explain({k: v[j] for k, v in res.parts.items()}, res.time_s[j])
                expl[i].update(extra)
                expl[i].update(count_assumptions(feats, envs[j]))
                expl[i].update(atomic_assumptions(feats, envs[j], self.dev))
        return Predictions(time_us, energy, expl)


_IDENT = re.compile(r"[A-Za-z_]\w*")


def kernel_assumptions(feats: Any, dev: DeviceParams) -> dict[str, Any]:
    """What the prediction of a kernel assumed whatever its configuration: on a CPU device, whether
    the work-item loop is taken as vectorized and why (the counts: :func:`count_assumptions`)."""
    out: dict[str, Any] = {}
    if dev.is_cpu:
        vec, why = dev.vectorizable(feats)
        out["cpu_vectorized"] = vec
        out["cpu_vectorized_because"] = why
        if vec and dev.wi_rates:
            lines = cpu_throughput_loops(feats)
            out["cpu_rates"] = (f"peak: the work-item loop runs inside the loop(s) at line(s) "
                                f"{', '.join(map(str, lines))}" if lines else
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
#: instead. Measured on PoCL 3.1 (Zen 5, idle, ``o[i] = f(x[i])``, 2^18 work-items): exp2 908 us,
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


def cheaper_calls(feats: Any, dev: DeviceParams, vec: bool, why: str) -> list[str]:
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


def gather_sites(feats: Any, dev: DeviceParams) -> list[str]:
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


def atomic_assumptions(feats: Any, env: Mapping[str, Any], dev: DeviceParams) -> dict[str, Any]:
    """How each atomic site was charged at one configuration: its estimated distinct addresses
    (:func:`atomic_distinct`) and the rate used, or that the profile has no atomic rates (GPU
    profiles today), in which case atomics cost only their bytes."""
    atomics = [a for a in getattr(feats, "accesses", []) if a.kind == "atomic"]
    if not atomics:
        return {}
    if not dev.is_cpu or not dev.atomic_rates:
        return {"atomics": "charged as memory bytes only: " + (
            "the profile has no atomic rates (calib --only atomic)" if dev.is_cpu or not dev.atomic_rates
            else "atomic rates are charged on CPU devices only")}
    out = []
    for a in atomics:
        distinct, why = atomic_distinct(a, env)
        rate = dev.atomic_rate(a.space, distinct) if a.space in ("global", "local") else None
        d_txt = "own address per work-item" if distinct is None else f"~{float(np.max(distinct)):.4g} addresses"
        r_txt = (f"{dev.compute_units / float(np.max(rate)) * 1e9:.3g} ns per atomic per compute unit"
                 if rate is not None else "not charged (no rate)")
        out.append(f"line {a.line}: {a.space} {a.via or 'atomic'} on {a.arg}: {d_txt} ({why}); {r_txt}")
    return {"atomics": out}


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
    if "energy_balance" in p:
        out["energy_balance"] = float(p["energy_balance"])
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

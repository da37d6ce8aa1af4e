"""The parameters of the CPU-runtime class: what ``kernelcast calib`` measures of an OpenCL CPU
runtime beyond the shared peaks (scalar and one-chain-per-work-item rates, the cost of a work-item
and of a barrier per work-item, chain latencies, gathers, page-strided walks, atomics, the late join
of the worker threads, and the facts about its vectorizer: conditional stores and out-of-line
builtin calls), read from a profile into :class:`CPUParams`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical.cpu_vectorizer import cpu_vectorizable
from kernelcast.models.analytical.params import (
    _FAMILY_FALLBACK,
    RATE_CLASSES,
    SharedParams,
    _family_lookup,
    _family_value,
    profile_levels,
    read_shared,
)
from kernelcast.models.analytical.registry import ATOMIC_KEY
from kernelcast.models.static.chains import CHAIN_CLASSES
from kernelcast.models.static.clbuiltins import INSTRUCTION_FAMILIES
from kernelcast.models.static.features import BUILTIN_FAMILIES

#: vectorized / scalar rate ratio assumed for a CPU profile without ``scalar_<class>_gops``
#: (8 fp32 lanes: AVX2; AVX-512 devices measure their own ratio with ``calib --only scalar``)
DEFAULT_SIMD_LANES = 8.0


#: classes CPUs have no SIMD instruction for (x86 and Arm vector units do not divide integers): their
#: peak rate is scalar code already, and scaling it by the FMA's scalar/vector ratio charged an
#: ``i % n`` in a scalar loop 3.8 ns where PoCL 3.0 spends about 1.3 (``s += a[(i + k) % n]``:
#: 2.0 ns per trip per core, 0.77 without the ``%``; tests/test_int_division.py)
NO_SIMD_CLASSES = frozenset({"int32_div"})


#: a guarded elementwise store this many times slower per work-item than the unguarded one (calib
#: ``cond``) means the runtime does not vectorize a work-item loop with a conditional store (calib
#: cond's ratio on the runtime below: 2.2-6.4 over six idle runs, the plain store the noisier). Measured:
#: PoCL 3.0 (LLVM 14, AVX2) 0.80-1.1 ns per work-item for ``if (i <
#: n) c[i] = a[i] + b[i]`` and for ``if (i >= n) return;`` before the store, 0.25-0.27 ns without the
#: guard (2^18 work-items); the same with the guard on data (``if (a[i]
#: > 0.5f) c[i] = ...``) 0.66-0.74 ns, while a select (``c[i] = i < n ? v : 0``) and a uniform
#: condition stay at 0.29-0.40 ns. A runtime whose loop vectorizer turns such a store into a masked
#: store runs both alike: the fact is the device's (its compiler and instruction set), measured.
COND_STORE_SCALAR_RATIO = 1.6


#: an elementwise store with one ``fmax`` call this many times slower per work-item than without
#: (calib ``cond``) means the runtime calls its builtins out of line: a kernel that calls any math,
#: common, integer or geometric builtin runs its work-item loop scalar and pays each call
#: (``wi_libcall_ns``). Measured (PoCL 3.0, LLVM 14, AVX2;
#: 2^16 work-items), ns per work-item over the whole device: ``a[i] + b[i]`` 0.40, ``fmax``
#: 2.0, ``clamp`` 2.1, ``fabs`` 3.1, ``floor`` 2.6, ``mix`` 2.7, ``fma`` 2.0, ``sqrt`` 2.7, ``exp`` 10.3,
#: integer ``min`` 1.7, ``abs`` 1.2, ``mad24`` 2.4, ``add_sat`` on uchar 3.4, while the same maximum
#: written as ``a[i] > b[i] ? a[i] : b[i]`` ran 0.30 and ``a[i] * b[i] + 1.0f`` 0.27.
LIBCALL_SCALAR_RATIO = 2.0


@dataclass
class CPUParams(SharedParams):
    """The shared parameters and what calib measured of the CPU runtime."""

    is_cpu: ClassVar[bool] = True

    scalar_rates: dict[str, float] = field(default_factory=dict)    # op / bi_* class -> ops/s, not vectorized
    wi_rates: dict[str, float] = field(default_factory=dict)        # op class -> ops/s, one dependent chain
                                                                    # per work-item vectorized across work-items
    level_sharing: list[float] = field(default_factory=list)   # per bw level: compute units per instance (0: ?)
    wi_overhead_s: float = 0.0         # per work-item of a work-group's task, whole device (the work-item loop)
    barrier_wi_s: float | None = None  # per barrier per work-item (a region of the split work-item loop)
    # the largest work-group whose barriers the runtime unrolls away (calib barrier), and the
    # measured cost per barrier per work-group by group size (items, seconds) used up to it; 0 / ()
    # where not measured
    barrier_unrolled_items: float = 0.0
    barrier_curve: tuple[tuple[float, ...], ...] = ()
    # time per work-item of an elementwise store under ``if (i < n)`` over the same store
    # unguarded (calib cond); None where not measured
    cond_store_ratio: float | None = None
    # time per work-item of the same store with one fmax call over the plain one (calib cond),
    # and the cost of one more call (seconds of a compute unit); None where not measured
    libcall_ratio: float | None = None
    libcall_s: float | None = None
    # how long a launch runs on one compute unit before the others join it (calib join); 0
    # where not measured
    join_s: float = 0.0
    # seconds of one compute unit per operation of a dependent chain of scalar code, by class
    # (calib chain); empty where not measured
    chain_s: dict[str, float] = field(default_factory=dict)
    gather_rate: float | None = None   # gathered elements/s in vectorized code, whole device
    gather_clamped_rate: float | None = None   # the same at clamped consecutive indices (in[min(i + 1, n - 1)])
    strided_line_s: float | None = None  # one line fetched by a page-strided work-item loop, per core
    strided_source: str = ""
    strided_level_s: dict[int, float] = field(default_factory=dict)   # the same, from cache level i
    strided_short_s: float | None = None  # the same for a walk of a few pages (the TLB holds them)
    strided_short_level_s: dict[int, float] = field(default_factory=dict)
    strided_tiny_s: float | None = None  # the same for a walk of a few trips (the prefetchers follow it)
    strided_tiny_level_s: dict[int, float] = field(default_factory=dict)
    atomic_rates: dict[str, float] = field(default_factory=dict)   # "global" / "local" (own element) and
                                                                   # "<space>_b<bins>" -> atomics/s, whole device

    @classmethod
    def from_profile(cls, p: DeviceProfile, device_info: Any = None) -> CPUParams:
        get = p.get
        shared = read_shared(p, device_info)
        rates, builtin_rates, sources = shared["rates"], shared["builtin_rates"], shared["rate_sources"]
        scalar_rates, s_sources = _scalar_rates(p, {**rates, **builtin_rates})
        sources.update(s_sources)
        wi_rates, w_sources = _wi_rates(p, rates)
        sources.update(w_sources)
        atomic_rates = {k[len("atomic_"):-len("_gops")]: float(v.value) * 1e9 for k, v in p.values.items()
                        if ATOMIC_KEY.match(k) and v.value and v.value > 0}
        for k in atomic_rates:
            sources["atomic " + k] = "profile"
        lat = get("dram_latency_ns")
        strided, strided_src = None, ""
        if get("strided_line_ns"):
            strided, strided_src = float(get("strided_line_ns") or 0) * 1e-9, "profile (calib stride)"
        elif lat:
            strided, strided_src = float(lat) * 1e-9, "rule: the DRAM latency (no calib stride value)"
        if strided_src:
            sources["strided line"] = strided_src
        levels = profile_levels(p)

        def per_level(stem: str) -> dict[int, float]:
            return {i: float(get(f"{stem}_level{i}_ns") or 0) * 1e-9 for i in range(len(levels))
                    if get(f"{stem}_level{i}_ns")}

        return cls(
            **shared,
            strided_line_s=strided, strided_source=strided_src, strided_level_s=per_level("strided_line"),
            strided_short_s=float(get("strided_short_ns") or 0) * 1e-9 if get("strided_short_ns") else None,
            strided_short_level_s=per_level("strided_short"),
            strided_tiny_s=float(get("strided_tiny_ns") or 0) * 1e-9 if get("strided_tiny_ns") else None,
            strided_tiny_level_s=per_level("strided_tiny"),
            atomic_rates=atomic_rates,
            gather_rate=float(get("gather_gops") or 0.0) * 1e9 or None,
            gather_clamped_rate=float(get("gather_clamped_gops") or 0.0) * 1e9 or None,
            scalar_rates=scalar_rates, wi_rates=wi_rates,
            level_sharing=[sh for size, _, sh in levels if size > 0],
            wi_overhead_s=(get("wi_overhead_ns") or 0.0) * 1e-9,
            barrier_wi_s=(float(get("barrier_wi_ns") or 0.0) * 1e-9 if get("barrier_wi_ns") is not None else None),
            cond_store_ratio=_ratio_to_plain_store(p, "wi_cond_store_ns"),
            libcall_ratio=_ratio_to_plain_store(p, "wi_call_ns"),
            libcall_s=float(get("wi_libcall_ns") or 0.0) * 1e-9 or None,
            join_s=float(get("cu_join_us") or 0.0) * 1e-6,
            chain_s=_chain_latencies(p),
            **_barrier_unrolling(p),
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
        3.1: 1.0 ns per barrier in groups of 8 and 16 against 1.0 + 0.61 x 16 = 10.7 ns
        on the line). A tree reduction over 2^18 work-items ran 163-195 us in groups of 16 and
        896-954 us in groups of 64; the line alone predicted 606 and 725 us, the curve 208 and 725
        (``tests/test_cpu_class.py::test_tree_reduction_in_small_groups_on_this_device``)."""
        line = self.barrier_s + (self.barrier_wi_s or 0.0) * lsz
        if not self.barrier_unrolled_items or not self.barrier_curve:
            return line
        xs, ys = self.barrier_curve
        return np.where(lsz <= self.barrier_unrolled_items, np.interp(lsz, xs, ys), line)

    def vectorizable(self, feats: Any) -> tuple[bool, str]:
        """:func:`cpu_vectorizable` of ``feats`` with the profile's calibrated facts."""
        return cpu_vectorizable(feats, barrier_loops=self.barrier_wi_s is not None,
                                cond_store_scalar=self.cond_store_scalar, libcall_scalar=self.libcall_scalar)

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


def _barrier_unrolling(p: DeviceProfile) -> dict[str, Any]:
    """:attr:`DeviceParams.barrier_unrolled_items` and :attr:`DeviceParams.barrier_curve` of a CPU
    profile that has both ``barrier_unrolled_items`` (> 0) and the ``barrier_vs_local_size``
    curve; nothing otherwise (the line alone)."""
    curve = p.curves.get("barrier_vs_local_size")
    items = float(p.get("barrier_unrolled_items") or 0.0) if curve is not None else 0.0
    if curve is None or not items > 0 or len(curve.x) < 1:
        return {}
    return {"barrier_unrolled_items": items,
            "barrier_curve": (tuple(float(x) for x in curve.x), tuple(float(y) * 1e-9 for y in curve.y))}


def _chain_latencies(p: DeviceProfile) -> dict[str, float]:
    """Seconds of one compute unit per operation of a loop-carried chain, by chain class (calib
    chain's ``chain_<class>_ns``, :data:`models.static.chains.CHAIN_CLASSES`, and the routines',
    :func:`_routine_latencies`). An fp64 add or multiply without a value of its own takes the fp32
    one's: the same units serve both precisions (PoCL 3.1, 4,096 work-items of
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
    out: dict[str, float] = {}
    for fam in BUILTIN_FAMILIES:
        if fam in INSTRUCTION_FAMILIES:
            continue
        for variant in _FAMILY_FALLBACK:
            got = _family_lookup(p, lambda v, f: f"chain_{v}{f}_ns", variant, fam)
            if got is not None:
                out[f"bi_{variant}{fam}"] = got[0] * got[1] * 1e-9
    return out


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
    for fam in BUILTIN_FAMILIES:
        for variant in _FAMILY_FALLBACK:
            got = _family_value(p, "wi", variant, fam)
            if got is not None:
                key = f"bi_{variant}{fam}"
                out[key], src["wi " + key] = got
    return out, src


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


def _ratio_to_plain_store(p: DeviceProfile, key: str) -> float | None:
    plain, other = p.get("wi_store_ns"), p.get(key)
    if not plain or not other or plain <= 0:
        return None
    return float(other) / float(plain)

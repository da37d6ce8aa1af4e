"""The parameters every device class reads from a profile: peak rates by operation class, the
memory hierarchy's bandwidths, launch and work-group overheads, clock, latency, TDP and energy
constants (:class:`SharedParams`). A device class adds its own (:mod:`.gpu`'s
:class:`~.gpu.GPUParams`, :mod:`.cpu_params`' :class:`~.cpu_params.CPUParams`) by subclassing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import numpy as np
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.static.features import BUILTIN_FAMILIES, FAMILY_PARENT

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
    "conv": ("conv", "int32_add"),
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

#: profile classes tried for each builtin family class, in order (after ``peak_<variant><family>``)
_FAMILY_FALLBACK = {"half_": ("half_", "native_", ""), "native_": ("native_", ""), "": ("",)}

def _family_chain(fam: str) -> list[tuple[str, float]]:
    """A builtin family and the families its rates fall back to where a profile has none of its
    own (:data:`models.static.features.FAMILY_PARENT`), each with the calls of it one call counts as."""
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

def _builtin_rates(p: DeviceProfile, rates: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """Vectorized rate of each builtin family class (``bi_*``): ``peak_<variant><family>_gops``,
    else the same family's other variants, else its parent family's (:func:`_family_value`), else
    (``divide``) the fp32 division rate; families without any measured rate are left out (the model
    then charges them at the ``sfu`` rate)."""
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


@dataclass
class SharedParams:
    """What every device class reads from a profile, resolved once. ``is_gpu`` / ``is_cpu`` say
    which of the bundled classes the parameters belong to (for callers; the pipeline asks the
    device class, never these flags)."""

    is_gpu: ClassVar[bool] = False
    is_cpu: ClassVar[bool] = False

    name: str
    compute_units: int
    rates: dict[str, float]            # op class -> ops/s, whole device
    rate_sources: dict[str, str]
    bw_levels: list[tuple[float, float]]   # (largest working set B, bytes/s), fastest first
    dram_bw: float
    local_bw: float | None
    launch_s: float
    wg_overhead_s: float
    barrier_s: float
    clock_hz: float | None
    mem_latency_s: float | None
    tdp_w: float | None
    energy: dict[str, float] | None
    builtin_rates: dict[str, float]    # bi_* class -> calls/s, vectorized
    #: the largest work-group (work-items) and the local memory one work-group may use (bytes): a
    #: configuration beyond either does not run (None: not known)
    max_wg_size: float | None = None
    max_local_mem_per_wg: float | None = None
    #: the local memory a kernel may declare statically (fixed-size arrays; CUDA: 48 KiB, beyond that
    #: only dynamic shared memory), where smaller than ``max_local_mem_per_wg``
    max_static_local_mem_per_wg: float | None = None

    @classmethod
    def from_profile(cls, p: DeviceProfile, device_info: Any = None) -> SharedParams:
        """The parameters of ``p``, of this class's type."""
        return cls(**read_shared(p, device_info))

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


def shared_field_names() -> set[str]:
    return {f.name for f in fields(SharedParams)}


def profile_levels(p: DeviceProfile) -> list[tuple[float, float, float]]:
    """The profile's cache levels in order: (bytes, bytes/s, ``cache_level<i>_cores``), up to the
    first level without a bandwidth."""
    out = []
    i = 0
    while (bw := p.get(f"bw_level{i}_gbs")) is not None:
        out.append((float(p.get(f"cache_level{i}_bytes") or 0), bw * 1e9, float(p.get(f"cache_level{i}_cores") or 0.0)))
        i += 1
    return out


def read_shared(p: DeviceProfile, device_info: Any = None,
                fp32_fallback: tuple[float, str] | None = None) -> dict[str, Any]:
    """The :class:`SharedParams` fields of profile ``p`` as keyword arguments: the peak rates (the
    profile's, else :data:`GPU_RULES` fractions of the fp32 FMA peak), the bandwidth levels, the
    overheads and the energy constants (None without an energy calibration). ``fp32_fallback``
    (FMA operations per second and the rule that gave them) stands in for the fp32 FMA peak of a
    profile that has none; without one such a profile's operations run at 1e10 per second."""
    get = p.get
    dev = getattr(p, "device", None)
    cu = (get("compute_units") or getattr(dev, "compute_units", None)
          or getattr(device_info, "compute_units", 1) or 1)
    rates: dict[str, float] = {}
    sources: dict[str, str] = {}
    fp32 = get("peak_fp32_fma_gops") or ((get("peak_fp32_gflops") or 0) / 2 or None)
    fp32_source = "fp32 FMA rate"
    if fp32 is None and fp32_fallback is not None and get("peak_fp32_fma_gops") is None:
        fp32, fp32_source = fp32_fallback[0] / 1e9, f"fp32 FMA rate ({fp32_fallback[1]})"
    for cls_ in ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_fma", "int32_add", "int32_mul",
                 "int32_div", "sin", "exp", "sqrt", "sfu", "conv"):
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
                rates[c], sources[c] = fp32 * 1e9 * frac, f"rule: {frac:g} x {fp32_source}"
    if "int32_div" not in rates and "int32_mul" in rates:
        rates["int32_div"], sources["int32_div"] = rates["int32_mul"] / 20, "rule: int32 mul / 20"
    if "fp64_fma" not in rates and fp32:
        rates["fp64_fma"], sources["fp64_fma"] = fp32 * 1e9 / 32, f"rule: 1/32 x {fp32_source} (consumer GPUs)"
    levels = [(size, bw) for size, bw, _ in profile_levels(p)]
    dram = (get("dram_bw_gbs") or (levels[-1][1] / 1e9 if levels else 100.0)) * 1e9
    clock = get("boost_clock_mhz") or getattr(dev, "max_clock_mhz", None)
    lat = get("dram_latency_ns")
    energy = None
    if p.has_energy and get("idle_power_w") is not None:
        energy = {n: v.value for n, v in p.values.items()}
    builtin_rates, b_sources = _builtin_rates(p, rates)
    sources.update(b_sources)
    return dict(
        name=getattr(dev, "name", "") or "device", compute_units=int(cu), rates=rates, rate_sources=sources,
        bw_levels=[lv for lv in levels if lv[0] > 0], dram_bw=dram, local_bw=(get("bw_local_gbs") or 0) * 1e9 or None,
        launch_s=(get("launch_overhead_us") or 0.0) * 1e-6, wg_overhead_s=(get("wg_overhead_us") or 0.0) * 1e-6,
        barrier_s=(get("barrier_ns") or 0.0) * 1e-9, clock_hz=clock * 1e6 if clock else None,
        mem_latency_s=lat * 1e-9 if lat else None, tdp_w=get("tdp_w"), energy=energy, builtin_rates=builtin_rates,
        max_wg_size=get("max_wg_size") or getattr(dev, "max_work_group_size", None)
        or getattr(device_info, "max_work_group_size", None),
        max_local_mem_per_wg=get("max_local_mem_per_wg_bytes") or getattr(dev, "local_mem_bytes", None)
        or getattr(device_info, "local_mem_bytes", None),
        max_static_local_mem_per_wg=get("max_static_local_mem_per_wg_bytes"),
    )

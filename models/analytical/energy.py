"""Energy: the roofline of energy (Choi et al.) with FlipFlop's corrections, for every device class.

``E = sum_c W_c eps_c + Q eps_mem(level) + P_static T``: each operation class's count times its
energy per operation (``energy_per_op_<class>_pj``), the fetched (coalescing-penalised) bytes in
32-byte accesses times the energy per access of the level that serves them
(``energy_per_access_level<i>_pj``, else ``energy_per_access_dram_pj``), local-memory accesses
(``energy_per_access_local_pj``), and static power over the time: the active-compute-unit power law
``alpha n^beta + delta`` where calibrated (``power_cu_*``), else the idle power. Kernels shorter
than the model's ``short_kernel_s`` scale their dynamic energy by the transient ratio ``r``
(``transient_ratio``); under a power cap the dynamic energy scales with the square of the clock
ratio. A profile without energy calibration gives NaN: nothing is guessed. These are the CPU and
generic classes' energy (:func:`energy_joules`).

GPUs (:func:`gpu_energy`): static power x time, with an idle power whose clock-tree part follows
``f V^2``, + the dynamic energy of the operations and of the bytes at DRAM, L2 and shared memory, the
core-side part scaled by ``(V(f) / V_boost)^2``, under the power limit; constants from the profile,
else derived from its TDP and fp32 rate or transferred with their sources
(:func:`gpu_energy_constants`); :mod:`.energy_fit` fits them to a measured clock sweep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kernelcast.models.analytical.params import RATE_CLASSES, SharedParams


def energy_joules(d: SharedParams, f: Mapping[str, np.ndarray], g: np.ndarray, fetched: np.ndarray,
                  level: np.ndarray, time_s: np.ndarray, n_wg: np.ndarray, freq_ratio: np.ndarray,
                  short_kernel_s: float) -> np.ndarray:
    """Energy (J) per configuration of ``g`` work-items that fetch ``fetched`` bytes each from
    memory level ``level`` in ``time_s`` seconds; NaN without the profile's energy constants."""
    e = d.energy
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
    for i in range(len(d.bw_levels)):
        v = e.get(f"energy_per_access_level{i}_pj")
        if v is not None:
            eps_mem = np.where(level == i, v, eps_mem)
    if np.isnan(eps_mem).all():
        return nan
    dyn = dyn + fetched * g / 32.0 * np.nan_to_num(eps_mem) * 1e-12
    if "energy_per_access_local_pj" in e:
        dyn = dyn + f["local_bytes"] * g / 32.0 * e["energy_per_access_local_pj"] * 1e-12
    active = np.minimum(n_wg, float(d.compute_units))
    if all(k in e for k in ("power_cu_alpha_w", "power_cu_beta", "power_cu_delta_w")):
        p_static = e["power_cu_alpha_w"] * active ** e["power_cu_beta"] + e["power_cu_delta_w"]
    else:
        p_static = np.full_like(g, e["idle_power_w"])
    r = e.get("transient_ratio")
    if r is not None:
        dyn = np.where(time_s < short_kernel_s, dyn * r, dyn)
    dyn = dyn * freq_ratio ** 2      # dynamic energy per op ~ V^2, V ~ f under DVFS
    return dyn + p_static * time_s


def energy_balance(d: SharedParams) -> float | None:
    """The energy balance point (flops per byte at which compute and memory cost the same energy),
    or None without the fp32 FMA and DRAM access energies."""
    if not d.energy:
        return None
    eps_flop = d.energy.get("energy_per_op_fp32_fma_pj")
    eps_mem = d.energy.get("energy_per_access_dram_pj")
    if eps_flop and eps_mem:
        return (eps_mem / 32) / (eps_flop / 2)
    return None


# -- GPUs: energy from the model's own terms, with the clock and the power limit ------------------

#: energy of one operation of each static class relative to an fp32 FMA (rules, not measurements):
#: every instruction pays its issue, operand and register-file energy, which dominates the ALU
#: itself on a GPU (Keckler et al., IEEE Micro 2011); integer ALU work costs less than floating
#: point (Horowitz, ISSCC 2014: 32-bit int add 0.1 pJ vs fp32 add 0.9 pJ at 45 nm); fp64 FMA twice
#: fp32 (the A100 profile's derived 66.0 / 32.8 pJ); divisions and special functions are sequences
#: of several instructions
OP_ENERGY_FACTOR: dict[str, float] = {
    "fp32_add": 1.0, "fp32_mul": 1.0, "fp32_fma": 1.0, "fp32_div": 4.0,
    "fp64_add": 2.0, "fp64_mul": 2.0, "fp64_fma": 2.0, "fp64_div": 8.0,
    "int_add": 0.5, "int_bit": 0.5, "int_mul": 1.0, "int_div": 4.0, "sfu": 2.0,
    "cmp": 0.5, "conv": 0.5, "branch": 0.5,
}
#: an idle GPU's power at the boost clock as a share of its TDP: the A100's 80 W idle at boost clock
#: over its 400 W TDP (Delestrac et al., ASAP 2024), transferred; only its clock tree's part (the
#: part that follows ``f V^2``, :func:`idle_clock_share`) enters the derived idle power
IDLE_SHARE_OF_TDP = 0.2
#: where the profile has no idle power: the constant (clock-independent) part of a running board's
#: power as a share of the TDP, and the dynamic power of fp32 FMAs at the peak rate and the boost
#: clock as a share of the TDP; with :data:`VOLTAGE_FLOOR_RATIO`, the means of the fits of Kernel
#: Tuner's synthetic fp32 clock sweeps of an A100 PCIe (0.127, 0.360, floor 0.74) and an RTX A4000
#: (0.212, 0.408, floor 0.86) (``kernelcast fit-energy``; ``bench/gpu_energy.py`` scores each GPU with the
#: other's values)
RUNNING_CONSTANT_SHARE_OF_TDP = 0.17
FMA_POWER_SHARE_OF_TDP = 0.38
#: energy per byte (pJ) of each memory level where the profile has none: Delestrac et al.'s A100
#: per-sector figures (DRAM 2090, L2 368, shared memory 82.1 pJ per 32-byte sector), transferred
DEFAULT_BYTE_PJ: dict[str, float] = {"dram": 2090.0 / 32, "l2": 368.0 / 32, "shared": 82.1 / 32}
#: Delestrac et al.'s two idle powers of one A100 (80 W at the 1410 MHz boost clock, 55 W at the
#: 1065 MHz base clock): the idle power is a constant part plus a part that follows the clock like
#: dynamic power (clock tree, ``f V^2``); :func:`idle_clock_share` solves for that part's share
IDLE_AT_BOOST_W, IDLE_AT_BASE_W, IDLE_BASE_CLOCK_RATIO = 80.0, 55.0, 1065.0 / 1410.0
#: the core voltage at the lowest clocks relative to the voltage at the boost clock: GPUs lower the
#: voltage with the clock down to a floor, below which only the clock drops (dynamic energy per
#: operation ~ V^2); the mean of the two fits above
VOLTAGE_FLOOR_RATIO = 0.80
#: where the model reads its traffic terms (bytes per work-item), first name present wins: DRAM,
#: L2 (every global access passes it) and shared (local) memory
TRAFFIC_TERMS: dict[str, tuple[str, ...]] = {
    "dram": ("dram_bytes", "global_fetched_bytes"),
    "l2": ("l2_bytes", "global_requested_bytes"),
    "shared": ("shared_bytes", "local_bytes"),
}


@dataclass
class GPUEnergyConstants:
    """The constants of the GPU energy model, each with where it came from."""

    idle_w: float
    fma_pj: float
    op_pj: dict[str, float]
    byte_pj: dict[str, float]
    sources: dict[str, str] = field(default_factory=dict)
    voltage_floor: float = VOLTAGE_FLOOR_RATIO
    #: the share of ``idle_w`` that follows ``f V^2`` (None: :func:`idle_clock_share` of the floor)
    idle_share: float | None = None

    def clock_share(self) -> float:
        """The share of the idle power at the boost clock that follows ``f V^2``."""
        return idle_clock_share(self.voltage_floor) if self.idle_share is None else self.idle_share


def gpu_energy_constants(d: SharedParams) -> GPUEnergyConstants | None:
    """The profile's energy values where it has them, else derived from its TDP and fp32 FMA rate:
    the idle power a constant share of the TDP (:data:`RUNNING_CONSTANT_SHARE_OF_TDP`) plus an idle
    GPU's clock tree, the energy per FMA a share of the TDP (:data:`FMA_POWER_SHARE_OF_TDP`) over
    the peak rate; None without a TDP and without an energy calibration."""
    e = d.energy or {}
    src: dict[str, str] = {}
    floor = e.get("voltage_floor_ratio")
    if floor is not None:
        src["voltage_floor_ratio"] = "profile"
    else:
        floor = VOLTAGE_FLOOR_RATIO
        src["voltage_floor_ratio"] = f"rule: {VOLTAGE_FLOOR_RATIO:g}"
    share = e.get("idle_clock_share")
    idle = e.get("idle_power_w")
    if idle is not None:
        src["idle_power_w"] = "profile"
        if share is not None:
            src["idle_clock_share"] = "profile"
    elif d.tdp_w:
        # the constant part of a running board plus the clock tree of an idle GPU
        clock_w = clock_tree_w(d, floor)
        idle = RUNNING_CONSTANT_SHARE_OF_TDP * d.tdp_w + clock_w
        share = clock_w / idle
        src["idle_power_w"] = (f"derived: {RUNNING_CONSTANT_SHARE_OF_TDP:g} x TDP + the clock tree's "
                               f"{IDLE_SHARE_OF_TDP:g} x TDP x {idle_clock_share(floor):.3f}")
    else:
        return None
    fma = e.get("energy_per_op_fp32_fma_pj")
    if fma is not None:
        src["energy_per_op_fp32_fma_pj"] = "profile"
    else:
        rate = d.rates.get("fp32_fma")
        if not d.tdp_w or not rate:
            return None
        fma = FMA_POWER_SHARE_OF_TDP * d.tdp_w / rate * 1e12
        src["energy_per_op_fp32_fma_pj"] = f"derived: {FMA_POWER_SHARE_OF_TDP:g} x TDP / fp32 FMA rate"
    op_pj: dict[str, float] = {}
    for op, factor in OP_ENERGY_FACTOR.items():
        own = next((e[f"energy_per_op_{c}_pj"] for c in RATE_CLASSES.get(op, ()) if f"energy_per_op_{c}_pj" in e),
                   None)
        op_pj[op] = float(own) if own is not None else fma * factor
    byte_pj = dict(DEFAULT_BYTE_PJ)
    for level, keys in (("dram", ("energy_per_access_dram_pj", "energy_per_sector_dram_pj")),
                        ("l2", ("energy_per_sector_l2_pj",)),
                        ("shared", ("energy_per_access_local_pj", "energy_per_sector_shared_pj"))):
        got = next((e[k] for k in keys if k in e), None)
        if got is not None:
            byte_pj[level] = float(got) / 32.0
            src[f"{level}_pj_per_byte"] = "profile"
        else:
            src[f"{level}_pj_per_byte"] = "transferred: Delestrac et al. (A100)"
    return GPUEnergyConstants(float(idle), float(fma), op_pj, byte_pj, src, float(floor),
                              None if share is None else float(share))


def voltage_ratio(clock_ratio: np.ndarray, floor: float = VOLTAGE_FLOOR_RATIO) -> np.ndarray:
    """Core voltage relative to the boost clock's at a clock ``clock_ratio`` x boost (``floor``: the
    voltage at the lowest clocks over the boost clock's)."""
    return np.maximum(floor, np.asarray(clock_ratio, dtype=np.float64))


def idle_clock_share(floor: float = VOLTAGE_FLOOR_RATIO) -> float:
    """The share of the idle power (at the boost clock) that scales with ``f V^2``: from
    ``P(boost) = c + s`` and ``P(base) = c + s r V(r)^2`` (:data:`IDLE_AT_BOOST_W`, ...), with the
    voltage floor ``floor``; at most 1 (a floor near the boost voltage leaves the two idle powers
    more apart than the clock alone explains)."""
    r = IDLE_BASE_CLOCK_RATIO
    scale = r * float(voltage_ratio(np.array(r), floor)) ** 2
    return min(1.0, (IDLE_AT_BOOST_W - IDLE_AT_BASE_W) / (1.0 - scale) / IDLE_AT_BOOST_W)


def clock_tree_w(d: SharedParams, floor: float) -> float:
    """The watts of the idle power at the boost clock that follow ``f V^2`` (the clock tree) with
    the voltage floor ``floor``: the profile's idle power times its ``idle_clock_share`` (else the
    share :func:`idle_clock_share` solves), or without an idle power an idle GPU's share of the TDP
    (:data:`IDLE_SHARE_OF_TDP`) times that share; 0 with neither an idle power nor a TDP."""
    e = d.energy or {}
    idle = e.get("idle_power_w")
    if idle is not None:
        share = e.get("idle_clock_share")
        return float(idle) * (float(share) if share is not None else idle_clock_share(floor))
    return IDLE_SHARE_OF_TDP * float(d.tdp_w or 0.0) * idle_clock_share(floor)


def idle_power(c: GPUEnergyConstants, clock_ratio: np.ndarray) -> np.ndarray:
    """Idle power (W) at ``clock_ratio`` x the boost clock: the constant part and the ``f V^2`` part."""
    r = np.asarray(clock_ratio, dtype=np.float64)
    s = c.clock_share()
    return c.idle_w * ((1.0 - s) + s * r * voltage_ratio(r, c.voltage_floor) ** 2)


def _term(f: Mapping[str, np.ndarray], names: tuple[str, ...], like: np.ndarray) -> np.ndarray:
    for n in names:
        if n in f:
            return np.asarray(f[n], dtype=np.float64)
    if names[-1] == "global_requested_bytes":
        return sum((np.asarray(f[k], dtype=np.float64) for k in ("global_load_bytes", "global_store_bytes",
                                                                   "global_atomic_bytes") if k in f),
                   np.zeros_like(like))
    return np.zeros_like(like)


def gpu_dynamic_terms(c: GPUEnergyConstants, f: Mapping[str, np.ndarray], g: np.ndarray,
                      traffic: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Dynamic energy (J) of a launch of ``g`` work-items at the boost clock, by term: operations
    (``compute``: the per-item counts of every class ``f[<class>]`` times its energy) and bytes per
    memory level (``dram``, ``l2``, ``shared``). A level's bytes are the device class's traffic of the
    launch (``traffic[f"traffic_{level}"]``, the memory hierarchy's reuse counted) where it gives
    them, else the per-item features of :data:`TRAFFIC_TERMS`."""
    comp = np.zeros_like(g)
    for op, pj in c.op_pj.items():
        if op in f:
            comp = comp + np.asarray(f[op], dtype=np.float64) * pj
    out = {"compute": comp * g * 1e-12}
    for level, names in TRAFFIC_TERMS.items():
        launch = (traffic or {}).get(f"traffic_{level}")
        per_launch = np.asarray(launch, dtype=np.float64) if launch is not None else _term(f, names, g) * g
        out[level] = per_launch * c.byte_pj[level] * 1e-12
    return out


def gpu_energy(c: GPUEnergyConstants, dyn: Mapping[str, np.ndarray], time_at: Any, clock_ratio: np.ndarray,
               limit_w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Energy (J), time (s), the clock actually run (ratio to boost) and the energy by term of
    configurations run at ``clock_ratio`` x the boost clock (``time_at(r)``: the model's time at
    clock ratio ``r``)::

        E = P_idle(f) T(f) + (E_ops + E_L2 + E_shared) (V(f) / V_boost)^2 + E_DRAM

    The core-side dynamic energy scales with the square of the core voltage, which follows the
    clock down to :data:`VOLTAGE_FLOOR_RATIO`; DRAM energy is in the memory's own domain; the idle
    power has a part that follows ``f V^2`` (:func:`idle_power`). Where
    the power ``E / T`` at the requested clock exceeds ``limit_w`` (the power limit, else the TDP)
    the clock drops until it does not (bisection), as a GPU's power management does."""
    core = dyn["compute"] + dyn["l2"] + dyn["shared"]
    dram = dyn["dram"]

    def power(r: np.ndarray) -> np.ndarray:
        t = np.maximum(time_at(r), 1e-15)
        return idle_power(c, r) + (core * voltage_ratio(r, c.voltage_floor) ** 2 + dram) / t

    r = np.asarray(clock_ratio, dtype=np.float64).copy()
    if limit_w is not None:
        lim = np.asarray(limit_w, dtype=np.float64)
        over = np.isfinite(lim) & (power(r) > lim)
        if over.any():
            lo, hi = np.full_like(r, 0.05), r.copy()
            for _ in range(30):
                mid = 0.5 * (lo + hi)
                above = power(mid) > lim
                hi = np.where(above, mid, hi)
                lo = np.where(above, lo, mid)
            r = np.where(over, lo, r)
    t = time_at(r)
    v2 = voltage_ratio(r, c.voltage_floor) ** 2
    terms = {"static": idle_power(c, r) * t, "compute": dyn["compute"] * v2, "l2": dyn["l2"] * v2,
             "shared": dyn["shared"] * v2, "dram": dram}
    return sum(terms.values()), t, r, terms

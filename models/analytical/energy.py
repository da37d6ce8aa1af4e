"""Energy: the roofline of energy (Choi et al.) with FlipFlop's corrections, for every device class.

``E = sum_c W_c eps_c + Q eps_mem(level) + P_static T``: each operation class's count times its
energy per operation (``energy_per_op_<class>_pj``), the fetched (coalescing-penalised) bytes in
32-byte accesses times the energy per access of the level that serves them
(``energy_per_access_level<i>_pj``, else ``energy_per_access_dram_pj``), local-memory accesses
(``energy_per_access_local_pj``), and static power over the time: the active-compute-unit power law
``alpha n^beta + delta`` where calibrated (``power_cu_*``), else the idle power. Kernels shorter
than the model's ``short_kernel_s`` scale their dynamic energy by the transient ratio ``r``
(``transient_ratio``); under a power cap the dynamic energy scales with the square of the clock
ratio. A profile without energy calibration gives NaN: nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

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

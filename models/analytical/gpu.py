"""The GPU device class: occupancy, latency hiding (Hong and Kim's MWP/CWP) and the memory hierarchy.

A compute unit (SM, CU) holds as many work-groups at once as its limits allow: warps (wavefronts)
per unit, work-groups per unit and local memory per unit (:meth:`GPUClass.residency`). The warp or
wavefront width is the profile's (``warp_size``, else the device's preferred work-group multiple,
else :attr:`GPUParams.default_warp`): a class for a vendor with another width subclasses
:class:`GPUParams` and :class:`GPUClass` with its own default and registers itself.

A wave's time follows Hong and Kim's three cases (:func:`mwp_cwp`): memory warp parallelism
limited by the memory latency over the departure delay of one warp's request, computation warp
parallelism, and N = MWP = CWP, CWP >= MWP, CWP < MWP; the bandwidth roofline of the shared
pipeline stays a floor. Operation counts are per warp (``warp_<class>``, the lanes a warp's
divergent branches keep busy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical.params import RATE_CLASSES, SharedParams, read_shared
from kernelcast.models.analytical.registry import DeviceClass, DeviceKind, register

#: DRAM latency in cycles assumed by the MWP/CWP model when a GPU profile has none measured
#: (Hong and Kim 2009 use 400-600 cycles; we take the middle)
DEFAULT_MEM_LATENCY_CYCLES = 500.0
#: the clock assumed by the MWP/CWP model when a GPU profile has none (Hz)
DEFAULT_CLOCK_HZ = 1.4e9
#: resident work-groups per compute unit assumed when a profile has no ``max_wg_per_cu``
DEFAULT_MAX_WG_PER_CU = 32.0


@dataclass
class GPUParams(SharedParams):
    """The shared parameters and a GPU's occupancy limits."""

    is_gpu: ClassVar[bool] = True
    #: warp (wavefront) width assumed when the profile gives none
    default_warp: ClassVar[int] = 32

    warp: int = 32
    max_warps_per_cu: float | None = None
    max_wg_per_cu: float | None = None
    local_mem_per_cu: float | None = None

    @classmethod
    def from_profile(cls, p: DeviceProfile, device_info: Any = None) -> GPUParams:
        get = p.get
        dev = getattr(p, "device", None)
        warp = get("warp_size") or getattr(dev, "wg_multiple", None) or cls.default_warp
        return cls(**read_shared(p, device_info), warp=int(warp), max_warps_per_cu=get("max_warps_per_cu"),
                   max_wg_per_cu=get("max_wg_per_cu"), local_mem_per_cu=get("local_mem_per_cu_bytes"))


@register
class GPUClass(DeviceClass):
    """GPUs: resident work-groups by occupancy limits, MWP/CWP latency hiding."""

    name = "gpu"
    params_type = GPUParams
    priority = 20
    count_prefix = "warp_"
    params: GPUParams

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        """A GPU device type, or any profile with an occupancy limit in warps."""
        return "max_warps_per_cu" in kind.values or "GPU" in kind.device_type

    def feature_symbols(self) -> dict[str, float]:
        """The warp (wavefront) width: per-warp counts, branch divergence and coalescing are
        counted at the profile's width."""
        return {"warp": float(self.params.warp)}

    def residency(self, f: Mapping[str, np.ndarray], g: np.ndarray, lsz: np.ndarray, n_wg: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        d = self.params
        warps_per_wg = np.ceil(lsz / d.warp)
        per_cu = np.full_like(g, d.max_wg_per_cu or DEFAULT_MAX_WG_PER_CU)
        if d.max_warps_per_cu:
            per_cu = np.minimum(per_cu, np.floor(d.max_warps_per_cu / np.maximum(warps_per_wg, 1)))
        lm = f["local_mem_bytes"]
        if d.local_mem_per_cu:
            per_cu = np.where(lm > 0, np.minimum(per_cu, np.floor(d.local_mem_per_cu / np.maximum(lm, 1))), per_cu)
        per_cu = np.maximum(per_cu, 1.0)
        occupancy = per_cu * warps_per_wg / (d.max_warps_per_cu or per_cu * warps_per_wg)
        return per_cu, occupancy

    def body(self, f: Mapping[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray, n_wg: np.ndarray,
             comp_t: np.ndarray, mem_t: np.ndarray, busiest_s: np.ndarray | None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return mwp_cwp(self.params, f, lsz, per_cu, n_wg, comp_t, mem_t), comp_t, np.zeros_like(comp_t)

    def capped_body(self, body: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray, freq_ratio: np.ndarray,
                    n_wg: np.ndarray) -> np.ndarray:
        """A compute-bound body slows with the clock; a memory-bound one does not."""
        return body / np.where(comp_t >= mem_t, freq_ratio, 1.0)


def mwp_cwp(d: GPUParams, f: Mapping[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray, n_wg: np.ndarray,
            comp_t: np.ndarray, mem_t: np.ndarray) -> np.ndarray:
    """Hong and Kim's MWP/CWP cases, per compute unit, scaled by the repetitions (waves)."""
    cu = float(d.compute_units)
    clock = d.clock_hz or DEFAULT_CLOCK_HZ
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

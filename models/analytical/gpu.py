"""The GPU device class: occupancy, the memory hierarchy's levels and the latency of memory accesses.

A compute unit (SM, CU) holds as many work-groups at once as its limits allow: warps (wavefronts)
per unit, work-groups per unit and local memory per unit (:meth:`GPUClass.residency`). The warp or
wavefront width is the profile's (``warp_size``, else the device's preferred work-group multiple,
else :attr:`GPUParams.default_warp`): a class for a vendor with another width subclasses
:class:`GPUParams` and :class:`GPUClass` with its own default and registers itself.

Memory (:meth:`GPUClass.memory_levels`): the launch's global traffic is split over the levels of
the hierarchy (:mod:`.hierarchy`: the segments warps fetch, L1 hits of warps of one work-group
reading the same segments, each buffer past the last-level cache at most once), and each level
takes its bytes at its own rate: the first level (L1 and local memory, one unit per compute unit)
``l1_bytes_per_clk`` bytes, one ``l1_line_bytes`` line of a warp's global access and
``lsu_lanes_per_clk`` lanes of load/store instructions per clock (the profile's, else
:data:`L1_BYTES_PER_CLK`, :data:`models.static.features.L1_LINE_BYTES` and :data:`LSU_LANES_PER_CLK`,
NVIDIA's since Volta: 128-byte lines; GCN and CDNA look up 64-byte lines), local accesses times
their bank-conflict degree; L2 at ``l2_bw_gbs`` (else ``L2_BYTES_PER_CLK`` per compute unit and
clock); DRAM at ``dram_bw_gbs``. The levels pipeline: the memory part is the slowest of them.

Compute (:meth:`GPUClass.item_costs`): each operation class at its peak rate. Where the profile
gives the warp instructions a compute unit issues per clock (``warp_issue_per_cu_clk``: its warp
schedulers), the unit's pipes run concurrently (:data:`PIPES`: floating point, integer, special
functions, branches; NVIDIA SMs since Volta have separate FP32 and INT32 cores): the compute time
is the busiest pipe or the issue of all instructions, whichever is larger
(:func:`pipe_seconds`), not the sum over classes. Without it every class takes its turn (the sum).

Latency (:meth:`GPUClass.latency_seconds`, after Hong and Kim's MWP/CWP): one warp's compute
cycles plus its global accesses each waiting the average latency of the level that serves it
(:func:`.hierarchy.average_latency`), times the repetitions of the resident warps on a compute
unit. It bounds the body from below: with enough warps resident it hides under the compute or the
memory part, with few it is what the time is. Operation counts are per warp (``warp_<class>``, the
lanes a warp's divergent branches keep busy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from kernelcast.calib.profile import DeviceProfile
from kernelcast.models.analytical.hierarchy import Traffic, average_latency, launch_traffic
from kernelcast.models.analytical.params import RATE_CLASSES, SharedParams, read_shared
from kernelcast.models.analytical.registers import (
    MAX_REGISTERS_PER_THREAD,
    estimated_resources,
    loads_in_flight,
    spill_bytes_per_item,
    warps_by_registers,
)
from kernelcast.models.analytical.registry import DeviceClass, DeviceKind, ItemCosts, operation_seconds, register
from kernelcast.models.static.amdgpu import LANGUAGES as AMDGPU_LANGUAGES
from kernelcast.models.static.amdgpu import compile_cached
from kernelcast.models.static.features import (
    BUILTIN_CLASSES,
    L1_LINE_BYTES,
    PARTIAL_PREFIX,
    REPEATED_PREFIX,
    UNROLLED_PREFIX,
)

#: DRAM latency in cycles assumed by the MWP/CWP model when a GPU profile has none measured
#: (Hong and Kim 2009 use 400-600 cycles; we take the middle)
DEFAULT_MEM_LATENCY_CYCLES = 500.0
#: the clock assumed by the MWP/CWP model when a GPU profile has none (Hz)
DEFAULT_CLOCK_HZ = 1.4e9
#: fp32 FMA lanes per compute unit and clock, in warps, assumed when a profile has no fp32 peak:
#: two warps' lanes (64 lanes of 32-wide warps on Volta/Ampere data-centre parts and RDNA compute
#: units, 128 on Ampere/Ada consumer parts, 64 lanes of 64-wide wavefronts on CDNA)
FALLBACK_FP32_WARPS_PER_CLK = 2.0
#: resident work-groups per compute unit assumed when a profile has no ``max_wg_per_cu``
DEFAULT_MAX_WG_PER_CU = 32.0
#: L1 and L2 hit latencies in cycles when a profile has none (microbenchmarks of Volta and Turing,
#: Jia et al. 2018/2019: L1 about 28-32, L2 about 190-200 cycles)
DEFAULT_L1_LATENCY_CYCLES = 32.0
DEFAULT_L2_LATENCY_CYCLES = 200.0
#: bytes per clock one compute unit's L1 / local memory delivers (32 banks of 4 bytes), one
#: 128-byte line looked up per clock, when the profile has no ``l1_bytes_per_clk``
L1_BYTES_PER_CLK = 128.0
#: lanes of load/store instructions one compute unit issues per clock (32 load/store units per SM
#: from Volta on: one warp instruction per clock), when the profile has no ``lsu_lanes_per_clk``
LSU_LANES_PER_CLK = 32.0
#: L2 bytes per clock and compute unit when a profile has no ``l2_bw_gbs``: between the about 20
#: measured on Volta and Turing (Jia et al.) and the 5,120 bytes per clock of the A100 whitepaper
#: over its 108 SMs (47)
L2_BYTES_PER_CLK = 32.0
#: the pipe each operation class runs in when the pipes run concurrently (:func:`pipe_seconds`);
#: builtin special functions run in ``sfu``, a class not named here in ``int``. Conversions between
#: floating point and integers run in a pipe of their own (``conv``) where the profile gives their
#: rate (``peak_conv_gops``: 16 per clock and SM on the NVIDIA GPUs of compute capability 7.5, 8.0
#: and 8.6 the spec profiles describe, a quarter of their INT32 rate), else in the integer pipe
PIPES: dict[str, str] = {
    "fp32_add": "fp32", "fp32_mul": "fp32", "fp32_fma": "fp32", "fp32_div": "fp32",
    "fp64_add": "fp64", "fp64_mul": "fp64", "fp64_fma": "fp64", "fp64_div": "fp64",
    "int_add": "int", "int_bit": "int", "int_mul": "int", "cmp": "int", "conv": "int",
    "int_div": "sfu", "sfu": "sfu", "branch": "branch",
}


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
    l2_bw: float | None = None
    l1_latency_cycles: float = DEFAULT_L1_LATENCY_CYCLES
    l2_latency_cycles: float = DEFAULT_L2_LATENCY_CYCLES
    #: warp instructions a compute unit issues per clock (None: the classes' times add up)
    issue_per_clk: float | None = None
    #: 32-bit registers per compute unit (the register file all its warps share)
    registers_per_cu: float | None = None
    #: 32-bit registers one thread may use (the rest of what its code needs is spilled)
    max_registers_per_thread: float = float(MAX_REGISTERS_PER_THREAD)
    l2_bytes: float | None = None
    #: bytes one compute unit's L1 delivers and lanes of load/store instructions it takes per clock
    l1_bytes_per_clk: float = L1_BYTES_PER_CLK
    lsu_lanes_per_clk: float = LSU_LANES_PER_CLK
    #: the line the first level looks up per clock (``global_l1_lines``)
    l1_line_bytes: float = L1_LINE_BYTES
    #: the compiler's name of the device (``gfx90a``, ``gfx1032``: :mod:`models.static.amdgpu`)
    llvm_target: str = ""

    @classmethod
    def from_profile(cls, p: DeviceProfile, device_info: Any = None) -> GPUParams:
        get = p.get
        dev = getattr(p, "device", None)
        warp = get("warp_size") or getattr(dev, "wg_multiple", None) or cls.default_warp
        cu = (get("compute_units") or getattr(dev, "compute_units", None)
              or getattr(device_info, "compute_units", None) or 1)
        mhz = get("boost_clock_mhz") or getattr(dev, "max_clock_mhz", None)
        clock = mhz * 1e6 if mhz else DEFAULT_CLOCK_HZ
        fallback = (float(cu) * FALLBACK_FP32_WARPS_PER_CLK * float(warp) * clock,
                    f"rule: {int(cu)} compute units x {FALLBACK_FP32_WARPS_PER_CLK:g} warps of {int(warp)} lanes"
                    f" x {clock / 1e9:.3g} GHz{'' if mhz else ' (default clock)'}; the profile has no fp32 peak")
        return cls(**read_shared(p, device_info, fp32_fallback=fallback), warp=int(warp),
                   max_warps_per_cu=get("max_warps_per_cu"),
                   max_wg_per_cu=get("max_wg_per_cu"), local_mem_per_cu=get("local_mem_per_cu_bytes"),
                   l2_bw=(get("l2_bw_gbs") or 0) * 1e9 or None,
                   l1_latency_cycles=get("l1_latency_cycles") or DEFAULT_L1_LATENCY_CYCLES,
                   l2_latency_cycles=get("l2_latency_cycles") or DEFAULT_L2_LATENCY_CYCLES,
                   issue_per_clk=get("warp_issue_per_cu_clk"), registers_per_cu=get("registers_per_cu"),
                   max_registers_per_thread=get("max_registers_per_thread") or float(MAX_REGISTERS_PER_THREAD),
                   l2_bytes=get("l2_bytes"), l1_bytes_per_clk=get("l1_bytes_per_clk") or L1_BYTES_PER_CLK,
                   lsu_lanes_per_clk=get("lsu_lanes_per_clk") or LSU_LANES_PER_CLK,
                   l1_line_bytes=get("l1_line_bytes") or L1_LINE_BYTES,
                   llvm_target=str(getattr(dev, "llvm_target", "") or ""))

    @property
    def clock(self) -> float:
        """The clock (Hz) the cycle counts are converted at."""
        return self.clock_hz or DEFAULT_CLOCK_HZ

    @property
    def dram_latency_cycles(self) -> float:
        return (self.mem_latency_s * self.clock) if self.mem_latency_s else DEFAULT_MEM_LATENCY_CYCLES


@register
class GPUClass(DeviceClass):
    """GPUs: resident work-groups by occupancy limits, MWP/CWP latency hiding."""

    name = "gpu"
    params_type = GPUParams
    priority = 20
    count_prefix = "warp_"
    params: GPUParams
    #: whether registers estimated from the static analysis (:meth:`estimated_resources`) limit the
    #: resident work-groups and spill (off: they are only shown in the explanation); on the NVIDIA
    #: yardstick pairs counting them changes no score (docs/gpu-yardstick.md, "Registers per
    #: work-item, estimated, and ptxas"), while a kernel that needs many registers loses occupancy
    estimate_in_time: ClassVar[bool] = True
    #: the waves, the active compute units and the latency floor count the work-groups that do the
    #: kernel's work (:func:`.registry.working_groups`): a work-group whose work-items all fail the
    #: kernel's guards exits at once, and the block scheduler fills the slot it leaves with the next
    waves_of_working_groups: ClassVar[bool] = True
    full_tail_wave: ClassVar[bool] = True
    #: the innermost loops the compiler keeps lose the control a partial unrolling removes
    #: (:func:`compiled_counts`; off: their control is counted on every trip, as before analysis
    #: version 8): docs/gpu-yardstick.md, "Loops unrolled in part", has the figures of both
    partial_unrolling: ClassVar[bool] = True

    @classmethod
    def matches(cls, kind: DeviceKind) -> bool:
        """A GPU device type, or any profile with an occupancy limit in warps."""
        return "max_warps_per_cu" in kind.values or "GPU" in kind.device_type

    def feature_symbols(self) -> dict[str, float]:
        """The warp (wavefront) width and the first level's line: per-warp counts, branch divergence
        and coalescing are counted at the profile's width, the lines a warp's access touches at its
        line."""
        return {"warp": float(self.params.warp), "l1_line_bytes": float(self.params.l1_line_bytes)}

    def compiled_features(self, f: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Loads that repeat an address within fully unrolled loops with nothing stored in between
        (``repeated:<count>`` of the static features, ``Access.unrolled_distinct``) are kept in
        registers by a GPU compiler (common subexpressions of the unrolled body): each count less
        their share. A convolution's ``sh[ty + yi * 4 + i]`` over an unrolled 17-tap filter ``i``
        and tile rows ``yi`` < 4 loads 29 rows, not 68. The loops it unrolls fully lose their control
        and counter arithmetic (:func:`compiled_counts`): every later stage (the time, the energy, the
        explanation) counts the compiled code's operations."""
        out = dict(f)
        for key, v in f.items():
            if key.startswith(REPEATED_PREFIX):
                base = key[len(REPEATED_PREFIX):]
                if base in out:
                    out[base] = np.maximum(out[base] - v, 0.0)
        return compiled_counts(out, amd=self.params.llvm_target.startswith("gfx"), partial=self.partial_unrolling)

    def compiled_resources(self, source: str, name: str, language: str, options: str,
                           cache_dir: str | None = None) -> dict[str, float]:
        """Registers and scratch spills of the configuration's code as the compiler for the
        profile's AMD target makes it (:func:`models.static.amdgpu.compile_cached`; NaN where it
        could not compile it); nothing for other GPUs and for OpenCL sources."""
        target = self.compile_target()
        if not target or language.lower() not in AMDGPU_LANGUAGES:
            return {}
        r = compile_cached(source, name, target, options, language, cache_dir)
        if r is None:
            return dict.fromkeys(COMPILED_KEYS, float("nan"))
        return {"compiled_vgprs": float(r.vgprs + r.agprs), "compiled_private_bytes": float(r.scratch_bytes),
                "compiled_scratch_per_float": r.scratch_per_float, "compiled_scratch_per_valu": r.scratch_per_valu,
                "compiled_scratch_op_bytes": r.scratch_op_bytes / r.scratch_ops if r.scratch_ops else 4.0,
                "compiled_vmem_per_float": r.vmem_per_float, "compiled_vmem_per_valu": r.vmem_per_valu}

    def compile_target(self) -> str:
        """The profile's AMD target (``gfx...``); NVIDIA and unnamed targets are not compiled."""
        return self.params.llvm_target if self.params.llvm_target.startswith("gfx") else ""

    def estimated_resources(self, feats: Any, f: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Registers per work-item estimated from the static analysis
        (:func:`.registers.estimated_resources`: ``registers``, capped at the profile's
        ``max_registers_per_thread``, and ``registers_spilled``) for a profile with a register file
        and no compiler path (NVIDIA); nothing where the AMD compile path applies, whatever it
        reported (its values win where present). They limit occupancy and spill only with
        :attr:`estimate_in_time`."""
        d = self.params
        shape = np.shape(f["local_mem_bytes"])
        out: dict[str, np.ndarray] = {}
        if feats is not None and hasattr(feats, "accesses"):
            out["loads_in_flight"] = np.full(shape, float(loads_in_flight(feats)))
        if not d.registers_per_cu or self.compile_target() or "compiled_vgprs" in f:
            return out
        return {**out, **estimated_resources(feats, shape, d.max_registers_per_thread)}

    def residency(self, f: Mapping[str, np.ndarray], g: np.ndarray, lsz: np.ndarray, n_wg: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Work-groups per compute unit within its warp, work-group and local-memory limits and
        within the register file: where the compiler reported the kernel's registers, a warp holds
        ``vgprs x warp`` of them (allocation granularity is not modelled); where they are estimated
        (``registers``, :meth:`estimated_resources`), the CUDA occupancy calculator's rule
        (:func:`.registers.warps_by_registers`: per-warp allocation units, whole warps per
        sub-partition) when :attr:`estimate_in_time` is set."""
        d = self.params
        warps_per_wg = np.ceil(lsz / d.warp)
        per_cu = np.full_like(g, d.max_wg_per_cu or DEFAULT_MAX_WG_PER_CU)
        if d.max_warps_per_cu:
            per_cu = np.minimum(per_cu, np.floor(d.max_warps_per_cu / np.maximum(warps_per_wg, 1)))
        vgprs = f.get("compiled_vgprs")
        if vgprs is not None and d.registers_per_cu:
            by_regs = np.floor(d.registers_per_cu / (np.maximum(vgprs, 1.0) * d.warp) / np.maximum(warps_per_wg, 1))
            per_cu = np.where(np.isfinite(vgprs) & (vgprs > 0), np.minimum(per_cu, by_regs), per_cu)
        regs = f.get("registers")
        if vgprs is None and regs is not None and d.registers_per_cu and self.estimate_in_time:
            by_regs = np.floor(warps_by_registers(regs, d.registers_per_cu, d.warp) / np.maximum(warps_per_wg, 1))
            per_cu = np.minimum(per_cu, by_regs)
        lm = f["local_mem_bytes"]
        if d.local_mem_per_cu:
            per_cu = np.where(lm > 0, np.minimum(per_cu, np.floor(d.local_mem_per_cu / np.maximum(lm, 1))), per_cu)
        per_cu = np.maximum(per_cu, 1.0)
        occupancy = per_cu * warps_per_wg / (d.max_warps_per_cu or per_cu * warps_per_wg)
        return per_cu, occupancy

    def item_costs(self, feats: Any, f: Mapping[str, np.ndarray], env: Mapping[str, Any], g: np.ndarray,
                   n_wg: np.ndarray) -> ItemCosts:
        """The operations of the compiled code (:meth:`compiled_features`) at the peak rates:
        the busiest pipe or the issue where the profile gives the issue rate (:func:`pipe_seconds`;
        each pipe's and the issue's seconds per work-item are parts ``pipe_<name>_s``), else the sum
        over the classes."""
        pad = lane_padding(g, n_wg, self.params.warp)
        comp, flops = operation_seconds(self.params, f, g, self.count_prefix)
        if not self.params.issue_per_clk:
            return ItemCosts(comp * pad, flops)
        terms = pipe_seconds(self.params, f, g)
        comp = terms.pop("compute") * pad
        return ItemCosts(comp, flops, parts={f"pipe_{k}_s": v * pad for k, v in terms.items()})

    def memory_levels(self, f: Mapping[str, np.ndarray], env: Mapping[str, Any], g: np.ndarray, lsz: np.ndarray,
                      n_wg: np.ndarray, per_cu: np.ndarray, mem_t: np.ndarray
                      ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Each level's bytes at its rate; the memory part is the slowest level (module docstring).
        The parts: ``level_<l1|l2|dram>_s``, ``traffic_<requested|l1|l2|dram>`` (bytes of the
        launch, register spills included: ``spill_bytes``, :func:`scratch_traffic`), ``hit_<l1|l2>``
        and the instruction counts of the launch ``warp_insts_global`` / ``warp_insts_local`` (the
        names the energy model reads; ``warp_insts_global`` counts the compiled code's vector memory
        values, ``compiled_vmem_insts``, where the profile's AMD target compiled the configuration:
        :func:`compiled_vmem_insts`); ``compiled_vgprs`` where the compiler reported them,
        ``registers`` and ``registers_spilled`` where they are estimated."""
        d = self.params
        cu, clock = float(d.compute_units), d.clock
        t = launch_traffic(f, env, g)
        warps = g / d.warp * lane_padding(g, n_wg, d.warp)                 # a partial warp is a warp
        scratch, scratch_insts, scratch_dram = scratch_traffic(d, f, g, lsz, per_cu, estimated=self.estimate_in_time)
        t = Traffic(t.requested, t.l1 + scratch, t.l2 + scratch, t.dram + scratch_dram)
        vmem = compiled_vmem_insts(f, np.zeros_like(g, dtype=np.float64))
        global_insts = f["warp_global_mem"] if vmem is None else np.where(np.isfinite(vmem), vmem,
                                                                             f["warp_global_mem"])
        insts_global = (global_insts + scratch_insts) * warps
        insts_local = f["warp_local_mem"] * f["local_bank_conflict"] * warps
        active = np.minimum(f.get("working_groups", n_wg), cu)
        # the first level takes one line (l1_line_bytes) of a warp's global access per clock, and
        # the load/store units lsu_lanes_per_clk lanes per clock; local (shared) accesses are
        # instructions there
        line = d.l1_line_bytes
        lines = f.get("global_l1_lines", f["global_fetched_bytes"] / line) * g + scratch / line
        l1_s = np.maximum(np.maximum(t.l1 / d.l1_bytes_per_clk, lines) + insts_local,
                          (insts_global + insts_local) * d.warp / d.lsu_lanes_per_clk) / (active * clock)
        l2_s = t.l2 / (d.l2_bw or L2_BYTES_PER_CLK * cu * clock)
        dram_s = t.dram / d.dram_bw
        mem = np.maximum(np.maximum(l1_s, l2_s), dram_s)
        parts = {"level_l1_s": l1_s, "level_l2_s": l2_s, "level_dram_s": dram_s,
                 "traffic_requested": t.requested, "traffic_l1": t.l1, "traffic_l2": t.l2, "traffic_dram": t.dram,
                 "hit_l1": t.l1_hit, "hit_l2": t.l2_hit, "warp_insts_global": insts_global,
                 "warp_insts_local": insts_local, "spill_bytes": scratch,
                 "latency_cycles": average_latency(t, d.l1_latency_cycles, d.l2_latency_cycles,
                                                   d.dram_latency_cycles)}
        if vmem is not None:
            parts["compiled_vmem_insts"] = vmem * warps         # NaN where it did not compile
        if "compiled_vgprs" in f:
            parts["compiled_vgprs"] = f["compiled_vgprs"]
        elif "registers" in f:
            parts["registers"] = f["registers"]
            parts["registers_spilled"] = f["registers_spilled"]
            parts["registers_in_time"] = np.full(np.shape(f["registers"]), float(self.estimate_in_time))
        return mem, parts

    def latency_seconds(self, f: Mapping[str, np.ndarray], levels: Mapping[str, np.ndarray], lsz: np.ndarray,
                        per_cu: np.ndarray, n_wg: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray
                        ) -> np.ndarray | None:
        """One warp's compute and its global accesses at their average latency, times the
        repetitions of the resident warps (:func:`warp_latency_seconds`)."""
        lat = levels.get("latency_cycles")
        if lat is None:
            return None
        return warp_latency_seconds(self.params, f, lsz, per_cu, n_wg, comp_t, lat)

    def with_latency(self, body: np.ndarray, latency: np.ndarray) -> np.ndarray:
        """The throughput bound (busiest pipe or memory level) plus the latency floor: Brent's bound
        for a greedy scheduler, work over throughput plus the critical path. The warp schedulers
        issue whatever warp is ready, so the resident warps' dependent chains (one warp's compute
        and its accesses' latency per repetition of the resident set, :func:`warp_latency_seconds`)
        add what the other warps' work does not cover; with many warps and accesses in flight the
        floor is small next to the throughput part, with few it is most of the time."""
        return body + latency

    def capped_body(self, body: np.ndarray, comp_t: np.ndarray, mem_t: np.ndarray, freq_ratio: np.ndarray,
                    n_wg: np.ndarray) -> np.ndarray:
        """Everything but the DRAM slows with the core clock: compute, the L1 and shared memory, the
        L2 and the latency floor; ``mem_t`` is the part that does not (the DRAM level's seconds)."""
        return np.maximum(np.where(body > mem_t, body, comp_t) / freq_ratio, mem_t)


#: the compiler's reports :meth:`GPUClass.compiled_resources` passes on (the features' names)
COMPILED_KEYS = ("compiled_vgprs", "compiled_private_bytes", "compiled_scratch_per_float",
                 "compiled_scratch_per_valu", "compiled_scratch_op_bytes", "compiled_vmem_per_float",
                 "compiled_vmem_per_valu")
#: the operation classes that are the compiled code's floating-point add/multiply/FMA instructions
FLOAT_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp64_add", "fp64_mul", "fp64_fma")


def scratch_traffic(d: GPUParams, f: Mapping[str, np.ndarray], g: np.ndarray, lsz: np.ndarray, per_cu: np.ndarray,
                    estimated: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The spill traffic of a launch (bytes through the first level and L2), its load/store
    instructions per warp, and the bytes of it that reach DRAM.

    The compiler reports scratch bytes per lane per floating-point instruction of its code
    (``compiled_scratch_per_float``; per vector instruction where the code has no floating-point
    arithmetic); times the floating-point (else all) operations the source analysis counts per
    work-item, that is the spill traffic of a work-item as executed. Every spill passes the first
    level and L2 (the first level holds a few KiB per compute unit, far less than the spills of its
    resident lanes); the share of the resident lanes' scratch (``compiled_private_bytes`` per lane)
    that exceeds the L2 reaches DRAM.

    Where the registers are estimated (``registers_spilled``, :mod:`.registers`) and ``estimated``
    is set (:attr:`GPUClass.estimate_in_time`), each spilled
    register is stored and loaded once per work-item (:func:`.registers.spill_bytes_per_item`, two
    4-byte accesses), and its 4 bytes per lane are the private footprint."""
    zero = np.zeros_like(g, dtype=np.float64)
    per_float = f.get("compiled_scratch_per_float")
    if per_float is None:
        spilled = f.get("registers_spilled")
        if not estimated or spilled is None or not np.any(spilled > 0):
            return zero, zero, zero
        per_item = spill_bytes_per_item(spilled) + zero
        return _spill_levels(d, per_item, per_item / 4.0, spilled * 4.0, g, lsz, per_cu)
    per_item = per_item_from_code(f, per_float, f["compiled_scratch_per_valu"], zero)
    per_item = np.where(np.isfinite(per_item), per_item, 0.0)
    insts = per_item / np.maximum(f["compiled_scratch_op_bytes"], 1.0)
    insts = np.where(np.isfinite(insts), insts, 0.0)
    return _spill_levels(d, per_item, insts, np.nan_to_num(f["compiled_private_bytes"]), g, lsz, per_cu)


def per_item_from_code(f: Mapping[str, np.ndarray], per_float: np.ndarray, per_valu: np.ndarray,
                       zero: np.ndarray) -> np.ndarray:
    """A count the compiler's code has per floating-point instruction (``per_float``; per vector
    instruction, ``per_valu``, where the code has no floating-point arithmetic) as executed by a
    work-item: times the floating-point (else all) operations the source analysis counts per
    work-item; NaN where nothing was compiled."""
    floats = sum((f[c] for c in FLOAT_CLASSES if c in f), zero)
    ops = sum((f[c] for c in RATE_CLASSES if c in f and c != "branch"), zero)
    return np.where(floats > 0, per_float * floats, per_valu * ops)


def compiled_vmem_insts(f: Mapping[str, np.ndarray], zero: np.ndarray) -> np.ndarray | None:
    """The global vector memory instructions of a work-item as the compiler for the profile's AMD
    target makes them, each counted once per 32-bit value it moves per lane
    (:attr:`models.static.amdgpu.AmdgpuResources.vmem_per_float` scaled like the spills,
    :func:`per_item_from_code`); None for a profile without the compile path, NaN where a
    configuration did not compile. They replace the source's count of global accesses in the
    load/store path's part of the first level: a warp's instruction moving four values per lane
    takes the path four times as long as one moving one, a load of one address by every lane as
    long as any other, and a load the compiler makes through the scalar unit (a value the same for
    the whole wavefront) not at all. The source counts one warp instruction per access it
    executes, whether the compiler makes it a scalar load, a per-lane load, or one wide load for
    several accesses."""
    per_float = f.get("compiled_vmem_per_float")
    if per_float is None:
        return None
    return per_item_from_code(f, per_float, f["compiled_vmem_per_valu"], zero)


def _spill_levels(d: GPUParams, per_item: np.ndarray, insts: np.ndarray, private_bytes: np.ndarray, g: np.ndarray,
                  lsz: np.ndarray, per_cu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A launch's spill bytes (``per_item`` per work-item), the instructions per work-item, and the
    bytes that reach DRAM: the share of the resident lanes' private footprint
    (``private_bytes`` per lane) beyond the L2."""
    scratch = per_item * g
    resident = np.minimum(g, per_cu * lsz * float(d.compute_units))
    footprint = private_bytes * resident
    miss = np.clip(1.0 - (d.l2_bytes or 0.0) / np.maximum(footprint, 1.0), 0.0, 1.0)
    return scratch, insts, scratch * miss


def lane_padding(g: np.ndarray, n_wg: np.ndarray, warp: int) -> np.ndarray:
    """Issued lanes per work-item: a work-group of ``L`` work-items runs as ``ceil(L / W)`` warps of
    ``W`` lanes, so a partial warp takes a full warp's issue slots and pipe cycles (``W ceil(L / W) /
    L``: 1 for multiples of the warp width, 1.6 for 40 work-items in 32-wide warps)."""
    lsz = g / np.maximum(n_wg, 1.0)
    return np.ceil(lsz / warp) * warp / np.maximum(lsz, 1.0)


#: NVIDIA's compiler (``nvcc``, CUDA 13, ``sm_86``) unrolls a loop it keeps by the largest power of
#: two ``U`` with ``U * (size - 2)`` at most this, ``size`` the operations and accesses of one trip
#: as the static analysis counts them (``partial:<n>:size``; the condition and branch are not
#: copied), and that divides a constant trip count (:func:`partial_unroll_factor`)
NVIDIA_UNROLL_BUDGET = 128.0
#: NVIDIA's count for a trip count not known at compile time, or an odd constant one (with a
#: remainder loop), when the budget allows it
NVIDIA_RUNTIME_UNROLL = 4
#: clang's AMDGPU back-end (LLVM 16, ``gfx90a``) unrolls a loop it keeps by the largest divisor ``U``
#: of its constant trip count with ``U * (size + AMD_UNROLL_LOAD_WEIGHT * loads)`` at most this, a
#: power of two with a remainder loop where no divisor but 1 fits; never a loop whose trip count is
#: not known at compile time
AMD_UNROLL_BUDGET = 192.0
AMD_UNROLL_LOAD_WEIGHT = 3.0


def _pow2_floor(x: float) -> int:
    return 1 << max(int(np.floor(np.log2(x))), 0) if x >= 1.0 else 1


def partial_unroll_factor(trip: float | None, size: float, loads: float = 0.0, pragma: float | None = None,
                          amd: bool = False) -> int:
    """How many trips of a loop it keeps a GPU compiler puts in one pass of its code (the factor it
    unrolls the loop by in part): ``trip`` its constant trip count (None or NaN: not known at compile
    time), ``size`` the operations and accesses of one trip and ``loads`` the loads among them (as
    the static analysis counts them), ``pragma`` its ``#pragma unroll N`` (N > 1 unrolls by N;
    None, NaN or 0: the compiler's rule), ``amd`` clang's AMDGPU back-end, else NVIDIA's compiler.
    The rules and their budgets (:data:`NVIDIA_UNROLL_BUDGET`, :data:`AMD_UNROLL_BUDGET`) are what
    ``python -m kernelcast.bench.unroll_probe`` finds for loops of 1 to 64 operations and 0 to 4
    loads per trip (docs/analytical-model.md, "Loops unrolled in part")."""
    const = trip is not None and np.isfinite(trip) and trip >= 1
    if pragma is not None and np.isfinite(pragma) and pragma > 1:
        return int(min(pragma, trip)) if const and trip is not None else int(pragma)
    if amd:
        if not const or trip is None:
            return 1
        cap = int(AMD_UNROLL_BUDGET // max(size + AMD_UNROLL_LOAD_WEIGHT * loads, 1.0))
        t = int(trip)
        best = max((d for d in range(1, min(cap, t) + 1) if t % d == 0), default=1)
        return best if best > 1 or cap < 2 else min(_pow2_floor(cap), t)
    cap = _pow2_floor(NVIDIA_UNROLL_BUDGET / max(size - 2.0, 1.0))
    if not const or trip is None:
        return min(cap, NVIDIA_RUNTIME_UNROLL)
    t = int(trip)
    return min(cap, t & -t if t % 2 == 0 else min(NVIDIA_RUNTIME_UNROLL, t))


def control_kept(trips: np.ndarray, const: bool, size: float, loads: float = 0.0, pragma: float | None = None,
                 amd: bool = False) -> np.ndarray:
    """The share of a loop's control (condition, branch, counter arithmetic) left in the code of a
    loop unrolled in part by :func:`partial_unroll_factor`, per configuration (``trips``: its trips
    per entry; ``const``: a constant the compiler sees): ``T`` trips run ``floor(T / U)`` passes of the
    unrolled body and ``T mod U`` of the remainder loop, so a loop of fewer trips than ``U`` saves
    nothing."""
    t = np.nan_to_num(np.asarray(trips, dtype=np.float64), nan=0.0)
    out = np.ones_like(t)
    for v in np.unique(t):
        if v < 2.0:
            continue
        u = partial_unroll_factor(float(v) if const else None, size, loads, pragma, amd)
        if u > 1:
            out[t == v] = (np.floor(v / u) + np.mod(v, u)) / v
    return out


def _scalar(v: np.ndarray | None) -> float | None:
    """The value of a per-kernel constant column (NaN or missing: None)."""
    if v is None:
        return None
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    return float(a[0]) if a.size and np.isfinite(a[0]) else None


def compiled_counts(f: Mapping[str, np.ndarray], amd: bool = False, partial: bool = True) -> dict[str, np.ndarray]:
    """The operation counts of the code a GPU compiler makes: the loops it unrolls fully lose their
    control (condition, branch, counter increment) and the integer arithmetic on their counters,
    which becomes constant offsets (``unrolled:<class>`` of the static features); the innermost
    loops it keeps, unrolled in part by a factor ``U`` (:func:`partial_unroll_factor`, ``amd``:
    clang's AMDGPU rule, else NVIDIA's), keep one ``U``-th of them (``partial:<n>:<class>``); what is
    left of each class, per work-item and per warp (``partial`` False: the kept loops' control is
    left whole)."""
    out = dict(f)
    for key, v in f.items():
        if not key.startswith(UNROLLED_PREFIX):
            continue
        cls = key[len(UNROLLED_PREFIX):]
        for k in (cls, "warp_" + cls):
            if k in out:
                out[k] = np.maximum(out[k] - v, 0.0)
    loops = sorted({key[len(PARTIAL_PREFIX):].split(":", 1)[0] for key in f
                    if partial and key.startswith(PARTIAL_PREFIX)})
    for n in loops:
        pre = f"{PARTIAL_PREFIX}{n}:"
        size = _scalar(f.get(pre + "size"))
        trips = f.get(pre + "trip")
        if size is None or trips is None:
            continue
        kept = control_kept(np.asarray(trips, dtype=np.float64), bool(_scalar(f.get(pre + "const"))), size,
                            _scalar(f.get(pre + "loads")) or 0.0, _scalar(f.get(pre + "pragma")), amd)
        for key, v in f.items():
            cls = key[len(pre):] if key.startswith(pre) else ""
            if cls in ("", "trip", "const", "size", "loads", "pragma"):
                continue
            for k in (cls, "warp_" + cls):
                if k in out:
                    out[k] = np.maximum(out[k] - v * (1.0 - kept), 0.0)
    return out


def pipe_seconds(d: GPUParams, f: Mapping[str, np.ndarray], g: np.ndarray) -> dict[str, np.ndarray]:
    """Seconds of one compute unit per work-item of each pipe (:data:`PIPES`: its classes' per-warp
    counts at their peak rates, as :func:`~.registry.operation_seconds` charges them), of the issue
    (every class's per-warp count, in lanes, at ``issue_per_clk`` warp instructions of ``warp``
    lanes per clock) and ``compute``, the largest of them: the pipes run concurrently, fed by the
    warp schedulers."""
    cu = float(d.compute_units)
    zero = np.zeros_like(g, dtype=np.float64)
    pipes: dict[str, np.ndarray] = {}
    lanes = zero.copy()
    families = [b for b in BUILTIN_CLASSES if b in f and np.any(f[b] > 0)]
    for op in RATE_CLASSES:
        cnt = f.get("warp_" + op, f.get(op))
        if cnt is None or (op == "sfu" and families):
            continue
        pipe = PIPES.get(op, "int")
        if op == "conv" and "conv" in d.rates:
            pipe = "conv"          # a unit of its own where the profile gives its rate
        pipes[pipe] = pipes.get(pipe, zero) + cnt / (d.rate(op) / cu)
        lanes = lanes + cnt
    for b in families:
        cnt = f.get("warp_" + b, f[b])
        pipes["sfu"] = pipes.get("sfu", zero) + cnt / (d.builtin_rate(b) / cu)
        lanes = lanes + cnt
    out = dict(pipes)
    out["issue"] = lanes / (float(d.issue_per_clk or 1.0) * d.warp * d.clock)
    out["compute"] = np.maximum(np.maximum.reduce(list(out.values())), zero) if out else zero
    return out


def warp_latency_seconds(d: GPUParams, f: Mapping[str, np.ndarray], lsz: np.ndarray, per_cu: np.ndarray,
                         n_wg: np.ndarray, comp_t: np.ndarray, latency_cycles: np.ndarray) -> np.ndarray:
    """The latency floor of the body: each repetition of the resident warps on a compute unit takes
    at least one warp's compute cycles plus its global accesses, each waiting ``latency_cycles``
    (Hong and Kim's case of too few warps to hide the memory latency; with enough warps the compute
    or memory part is larger and this floor does not bind)."""
    cu = float(d.compute_units)
    clock = d.clock
    warps_wg = np.ceil(lsz / d.warp)
    # the work-groups that do the kernel's work (the others exit at once), their warps' accesses
    # all of the launch's
    n_run = f.get("working_groups", n_wg)
    spread = n_wg / np.maximum(n_run, 1.0)
    wg_per_cu = np.ceil(n_run / cu)                                  # work-groups the busiest unit runs
    resident = np.maximum(np.minimum(per_cu, wg_per_cu), 1.0)         # of them at once
    n_warps = np.maximum(resident * warps_wg, 1.0)                    # active warps per unit
    reps = np.ceil(wg_per_cu / resident)                              # repetitions of the resident set
    comp_cycles = comp_t * clock / np.maximum(reps * n_warps, 1e-30)                 # one warp's, per repetition
    overlap = np.maximum(f.get("loads_in_flight", 1.0), 1.0)                          # its accesses in flight at once
    return reps * (comp_cycles + f["warp_global_mem"] * spread * latency_cycles / overlap) / clock

"""Registers per work-item estimated from the static analysis, and what they do to occupancy.

A GPU compute unit divides one register file among its resident warps, so a kernel that needs
many registers per work-item runs fewer warps at once; one that needs more than the architecture
gives a thread spills the rest to local memory (per-thread memory behind the L1 and L2). Where a
compiler for the device is at hand the device class reads its report (the AMD path,
:mod:`models.static.amdgpu`); for the others the count is estimated here from what the compiled
code must keep live, each term a fact of the source analysis (:func:`estimate_registers`):

* **pointers**: 2 registers (a 64-bit address) per buffer argument the kernel reads or writes;
* **indices**: 2 per dimension of the launch (the work-item's index in its work-group and the
  global index the addresses are computed from);
* **loop counters**: 1 per loop the compiler keeps (one whose trip count is not a constant or
  that has no full-unroll pragma); a fully unrolled loop has none;
* **private arrays**: a fixed-size private array indexed only by constants once the loops around
  it are unrolled (a tile of accumulators ``float sum[ty][tx]``) lives in registers, one per
  4-byte word (:attr:`SourceFeatures.private_array_bytes`);
* **reused loads**: a load that repeats an address across fully unrolled copies
  (``Access.unrolled_distinct`` < 1) holds its value at least from the first copy to the next:
  one register per such load site;
* **temporaries**: :data:`TEMP_REGISTERS` for address arithmetic and the compare and predicate
  results of the body, and one per load in flight between its issue and its use: each load site
  once, four times where the kernel keeps a loop (the compiler unrolls a kept loop's body
  :data:`KEPT_LOOP_UNROLL` times and issues the copies' loads together), at most
  :data:`MAX_LOADS_IN_FLIGHT`.

What it does not see: how far ahead the compiler's scheduler hoists loads, and whether it keeps a
value that fully unrolled copies re-read many iterations apart (NVIDIA's compiler does so for
some block shapes of a tiled convolution and not for others; docs/gpu-yardstick.md has the
comparison with ``ptxas``).

The estimate is capped at the registers a thread may have (:data:`MAX_REGISTERS_PER_THREAD`, or
the profile's ``max_registers_per_thread``); the rest are spilled (:func:`spill_bytes_per_item`).

Occupancy (:func:`warps_by_registers`) follows the CUDA occupancy calculator's rule
(``cudaOccMaxBlocksPerSMRegsLimit`` in the CUDA toolkit's ``cuda_occupancy.h``): a warp's registers
are allocated in units of :data:`REGISTER_ALLOCATION_UNIT` (256 registers for compute capability
3.x to 12.x, ``cudaOccRegAllocationGranularity``), the register file is split evenly among
:data:`SUB_PARTITIONS` sub-partitions (4, ``cudaOccSubPartitionsPerMultiprocessor``), and each
sub-partition holds as many whole warps as fit in its share.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: registers for address arithmetic, compares and predicates of the body
TEMP_REGISTERS = 4
#: copies of a kept loop's body the compiler makes (NVVM's default runtime unrolling of small loops)
KEPT_LOOP_UNROLL = 4
#: loads whose values are in flight at once, at most (two 4-wide batches)
MAX_LOADS_IN_FLIGHT = 8
#: registers one thread may use when the profile has no ``max_registers_per_thread``: 255, the
#: limit of NVIDIA GPUs since compute capability 3.5 (CUDA C++ Programming Guide, technical
#: specifications per compute capability)
MAX_REGISTERS_PER_THREAD = 255
#: registers of one warp are allocated in units of 256 (cuda_occupancy.h,
#: cudaOccRegAllocationGranularity, compute capability 3.x-12.x)
REGISTER_ALLOCATION_UNIT = 256
#: a compute unit's register file is split among 4 sub-partitions, each holding whole warps
#: (cuda_occupancy.h, cudaOccSubPartitionsPerMultiprocessor, compute capability 3.x-12.x but 6.0)
SUB_PARTITIONS = 4
#: bytes a spilled 32-bit register moves per work-item: stored once and loaded once
SPILL_BYTES_PER_REGISTER = 8.0


def kept_loops(feats: Any) -> int:
    """Loops the compiler keeps (each with a counter): every loop the analysis found but the dead
    ones and those it unrolls fully (a full-unroll pragma, ``#pragma unroll``, over a constant trip
    count)."""
    n = 0
    for lp in getattr(feats, "loops", []):
        if lp.trip_kind == "dead":
            continue
        if lp.unroll_pragma == 0 and _is_constant(lp.trip):
            continue
        n += 1
    return n


def _is_constant(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _loads(feats: Any) -> list[Any]:
    return [a for a in getattr(feats, "accesses", [])
            if a.kind == "load" and a.space in ("global", "local", "constant", "image")]


def loads_in_flight(feats: Any) -> int:
    """Loads a work-item has issued and not yet used, at most: each load site once, four times
    where the kernel keeps a loop (the compiler unrolls a kept loop's body
    :data:`KEPT_LOOP_UNROLL` times and issues the copies' loads together), at most
    :data:`MAX_LOADS_IN_FLIGHT`; 1 where a load's address depends on loaded data the analysis
    does not follow (``Access.indirect``: a pointer chase ``p = a[p]`` waits for each load before
    it can issue the next). The registers that hold them are a term of :func:`register_terms`; the
    GPU class's latency floor overlaps that many accesses of a warp."""
    loads = _loads(feats)
    if any(a.indirect for a in loads):
        return 1
    n = len(loads) * (KEPT_LOOP_UNROLL if kept_loops(feats) else 1)
    return max(min(n, MAX_LOADS_IN_FLIGHT), 1)


def register_terms(feats: Any) -> dict[str, int]:
    """The terms of :func:`estimate_registers` for one analysed kernel (module docstring)."""
    accesses = list(getattr(feats, "accesses", []))
    buffers = {a.arg for a in accesses if a.space == "global"}
    dims = max(int(getattr(feats, "dims", 1) or 1), 1)
    private = int(getattr(feats, "private_array_bytes", 0) or 0)
    loads = _loads(feats)
    reused = sum(1 for a in loads if a.unrolled_distinct < 1.0)
    kept = kept_loops(feats)
    in_flight = min(len(loads) * (KEPT_LOOP_UNROLL if kept else 1), MAX_LOADS_IN_FLIGHT)
    return {"pointers": 2 * len(buffers), "indices": 2 * dims, "loop_counters": kept,
            "private_arrays": -(-private // 4), "reused_loads": reused, "temporaries": TEMP_REGISTERS + in_flight}


def estimate_registers(feats: Any) -> int:
    """Registers per work-item the compiled code of an analysed kernel needs, before any cap
    (:func:`register_terms` summed)."""
    return int(sum(register_terms(feats).values()))


def warps_by_registers(registers: np.ndarray, registers_per_cu: float, warp: int) -> np.ndarray:
    """Warps a compute unit holds at ``registers`` per work-item: each warp's
    ``registers x warp`` rounded up to :data:`REGISTER_ALLOCATION_UNIT`, whole warps per
    sub-partition of the register file (module docstring). Infinite where ``registers`` is not a
    positive number (no limit)."""
    regs = np.asarray(registers, dtype=np.float64)
    ok = np.isfinite(regs) & (regs > 0)
    per_warp = np.ceil(np.where(ok, regs, 1.0) * warp / REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    warps = np.floor(registers_per_cu / SUB_PARTITIONS / per_warp) * SUB_PARTITIONS
    return np.where(ok, warps, np.inf)


def spill_bytes_per_item(spilled: np.ndarray | float) -> np.ndarray:
    """Local-memory bytes per work-item of ``spilled`` registers (each stored and loaded once)."""
    return np.asarray(spilled, dtype=np.float64) * SPILL_BYTES_PER_REGISTER


def estimated_resources(feats: Any, shape: tuple[int, ...], cap: float) -> dict[str, np.ndarray]:
    """``registers`` (the estimate capped at ``cap``) and ``registers_spilled`` (the excess) over
    ``shape`` configurations of one analysed kernel; nothing for a kernel without source features."""
    if feats is None or not hasattr(feats, "accesses"):
        return {}
    need = float(estimate_registers(feats))
    return {"registers": np.full(shape, min(need, cap)), "registers_spilled": np.full(shape, max(need - cap, 0.0))}


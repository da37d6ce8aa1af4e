"""The host CPU's data caches, as the operating system reports them, for CPU OpenCL devices.

A CPU OpenCL device (PoCL's pthread device, Intel's CPU runtime) is the host processor, so the
sizes of its cache levels need not be guessed from the steps of a bandwidth curve: Linux lists
them under ``/sys/devices/system/cpu/cpu0/cache/index*/`` (level, type, size, the CPUs sharing
one instance). The steps of a measured curve move between runs (this device's calibrations put
the level-1 boundary at 2.9 MiB once and 16 MiB twice, on a host whose L2 is 2 x 1 MiB and L3
32 MiB); the reported sizes do not. Calibration still *measures* each level's bandwidth and
latency, as the median of the sweep points that lie well inside that level
(:func:`level_windows`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
#: a working set counts as inside a level when it is at most capacity / MARGIN and at least
#: MARGIN x the capacity of the level before (associativity, the other buffers and the code
#: share a cache; just past a capacity the hit rate falls gradually)
MARGIN = 1.5
#: main memory: working sets of at least this many times the last cache level's capacity
DRAM_FACTOR = 4.0


@dataclass(frozen=True)
class CacheLevel:
    """One data (or unified) cache level of the host."""

    level: int              # 1, 2, 3 ...
    size_bytes: int         # one instance
    sharing: int            # CPUs sharing one instance (1: private to a core)

    def total_bytes(self, cores: int) -> int:
        """Capacity seen by ``cores`` cores running together: one instance per ``sharing`` cores."""
        return self.size_bytes * max(1, math.ceil(cores / max(1, self.sharing)))

    def per_core_bytes(self, cores: int) -> float:
        """Capacity one of ``cores`` busy cores has to itself."""
        return self.total_bytes(cores) / max(1, cores)


def _parse_size(text: str) -> int | None:
    t = text.strip().upper()
    mult = 1
    for suffix, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if t.endswith(suffix):
            t, mult = t[:-1], m
            break
    try:
        return int(t) * mult
    except ValueError:
        return None


def _count_cpus(cpu_list: str) -> int:
    n = 0
    for part in cpu_list.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            n += (int(hi) - int(lo) + 1) if hi else 1
        except ValueError:
            return 1
    return max(1, n)


def host_cache_levels(root: Path = SYSFS_CACHE) -> list[CacheLevel]:
    """The data and unified cache levels of CPU 0, smallest level first; ``[]`` where the
    operating system does not say (not Linux, a container without ``/sys``)."""
    out: dict[int, CacheLevel] = {}
    try:
        dirs = sorted(root.glob("index*"))
    except OSError:
        return []
    for d in dirs[:16]:
        try:
            kind = (d / "type").read_text().strip()
            level = int((d / "level").read_text().strip())
            size = _parse_size((d / "size").read_text())
            shared = (d / "shared_cpu_list").read_text()
        except (OSError, ValueError):
            continue
        if kind not in ("Data", "Unified") or not size or size <= 0:
            continue
        out[level] = CacheLevel(level, size, _count_cpus(shared))
    return [out[k] for k in sorted(out)]


def level_windows(capacities: list[float], *, margin: float = MARGIN,
                  dram_factor: float = DRAM_FACTOR) -> list[tuple[float, float]]:
    """Working-set ranges ``(lo, hi]`` inside each cache level of the given capacities (smallest
    first), then the main-memory range ``[dram_factor x last, inf)``: the points of a sweep whose
    median is each level's value."""
    out: list[tuple[float, float]] = []
    prev = 0.0
    for c in capacities:
        out.append((prev * margin, c / margin))
        prev = c
    out.append((prev * dram_factor, math.inf))
    return out

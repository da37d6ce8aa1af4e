"""The machine's state around a measurement: load, other processes' CPU time, clock.

A timed window on a shared machine is only as good as the machine was quiet. :class:`MachineProbe`
reads ``/proc/stat`` (CPU time of every process) and this process's own CPU time (all its
threads, the OpenCL runtime's included) at the start and the end of a window; the difference is
what *other* processes ran meanwhile. Where a file is missing (not Linux) the fields are absent,
never guessed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _busy_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (user+nice+system+irq+softirq+steal)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu" or len(parts) < 8:
        return None
    v = [int(x) for x in parts[1:]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)
    return busy / _TICK


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def cpu_mhz() -> float | None:
    """The current clock (mean over CPUs): cpufreq where readable, else /proc/cpuinfo."""
    freqs = []
    for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            freqs.append(int(p.read_text()) / 1000)
        except (OSError, ValueError):
            pass
    if not freqs:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                freqs = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        except (OSError, ValueError, IndexError):
            return None
    return round(sum(freqs) / len(freqs), 1) if freqs else None


class MachineProbe:
    """Start before a window, :meth:`stop` after it: a dict of the machine's state meanwhile.

    ``other_cpu_frac``: CPU time of other processes over the window, as a share of all CPUs'
    time (0: nothing else ran; 1: every core was busy with something else)."""

    def __init__(self) -> None:
        self.ncpu = os.cpu_count() or 1
        self.t0 = time.perf_counter()
        self.busy0 = _busy_s()
        self.own0 = _own_cpu_s()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.t0
        busy1, own1 = _busy_s(), _own_cpu_s()
        out: dict[str, Any] = {"window_s": round(wall, 6), "ncpu": self.ncpu}
        try:
            out["load_avg_1m"] = round(os.getloadavg()[0], 2)
        except OSError:
            pass
        if self.busy0 is not None and busy1 is not None:
            other = max(0.0, (busy1 - self.busy0) - (own1 - self.own0))
            out["other_cpu_s"] = round(other, 4)
            # /proc/stat counts in ticks (10 ms): windows far shorter than a tick read as 0 or 1 tick
            out["other_cpu_frac"] = round(min(1.0, other / (wall * self.ncpu)), 4) if wall >= 0.05 else None
        mhz = cpu_mhz()
        if mhz is not None:
            out["cpu_mhz"] = mhz
        return out

"""CPU package energy through the Linux powercap RAPL interface (``/sys/class/powercap``).

Each package-level zone ``intel-rapl:<N>`` (AMD CPUs use the same naming under Linux) has a
cumulative micro-joule counter ``energy_uj`` that wraps to 0 after ``max_energy_range_uj``.
Subzones (``intel-rapl:<N>:<M>``: core, uncore, dram) are parts of their package and are not
added again; a top-level ``psys`` zone (whole platform, which overlaps the packages) is skipped.

Wraparound: a window whose end reading is below its start reading is taken to have wrapped
exactly once. A counter that wraps *twice or more* within one window cannot be detected from
two reads, so windows must stay well below the wrap period (``max_energy_range_uj`` is about
262 kJ on common Intel parts: roughly 40 minutes at 100 W -- far longer than any window).

Since Linux 5.10 (CVE-2020-8694) ``energy_uj`` is usually readable by root only; the meter
raises :class:`MeterError` when no package zone can be read.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcast.instrument.meters.base import EnergyMeter, MeterError, MeterReading

logger = logging.getLogger(__name__)

DEFAULT_POWERCAP_ROOT = "/sys/class/powercap"
_PACKAGE_ZONE = re.compile(r"intel-rapl:(\d+)")
#: top-level zones that overlap the packages and must not be summed with them
_OVERLAPPING_ZONE_NAMES = frozenset({"psys"})


@dataclass(frozen=True)
class RaplZone:
    """One package-level RAPL zone."""

    zone: str            # directory name, e.g. "intel-rapl:0"
    path: Path           # the zone directory
    name: str            # content of its ``name`` file, e.g. "package-0" ("" if unreadable)
    max_range_uj: int    # content of ``max_energy_range_uj``

    @property
    def energy_file(self) -> Path:
        return self.path / "energy_uj"

    def read_uj(self) -> int:
        return int(self.energy_file.read_text().strip())


def rapl_delta_uj(start_uj: int, end_uj: int, max_range_uj: int) -> int:
    """Energy between two counter reads, allowing for one wraparound.

    The counter takes the values ``0 .. max_range_uj`` and goes from ``max_range_uj`` to 0, so a
    wrapped window is ``(max_range_uj - start) + 1 + end`` (the ``+ 1`` is the step from the
    maximum to 0). More than one wrap is indistinguishable from one.
    """
    if end_uj >= start_uj:
        return end_uj - start_uj
    return end_uj + (max_range_uj - start_uj) + 1


def discover_zones(root: str | Path = DEFAULT_POWERCAP_ROOT) -> tuple[list[RaplZone], list[str]]:
    """Readable package zones under ``root`` and, for the rest, why they were not used."""
    base = Path(root)
    problems: list[str] = []
    if not base.is_dir():
        return [], [f"{base}: no such directory"]
    candidates: list[tuple[int, Path]] = []
    for entry in base.iterdir():
        m = _PACKAGE_ZONE.fullmatch(entry.name)
        if m:
            candidates.append((int(m.group(1)), entry))
    zones: list[RaplZone] = []
    for _, path in sorted(candidates):
        try:
            name = (path / "name").read_text().strip()
        except OSError:
            name = ""
        if name in _OVERLAPPING_ZONE_NAMES:
            logger.info("RAPL: skipping %s (%s overlaps the package zones)", path, name)
            continue
        try:
            max_range = int((path / "max_energy_range_uj").read_text().strip())
            int((path / "energy_uj").read_text().strip())
        except PermissionError as exc:
            problems.append(f"{path}: permission denied ({exc.filename}); energy_uj is root-only "
                            "on recent kernels")
            continue
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable: {exc}")
            continue
        zones.append(RaplZone(zone=path.name, path=path, name=name, max_range_uj=max_range))
    if not candidates:
        problems.append(f"{base}: no intel-rapl:<N> zones")
    return zones, problems


def rapl_readable(root: str | Path = DEFAULT_POWERCAP_ROOT) -> bool:
    """Whether at least one package zone's ``energy_uj`` can be read. Never raises."""
    try:
        zones, _ = discover_zones(root)
    except OSError:
        return False
    return bool(zones)


class RaplMeter(EnergyMeter):
    """Energy of all CPU packages, summed, from RAPL ``energy_uj`` counters.

    RAPL counts the whole package (every core, the OS and the harness itself), not just the
    kernel; use :meth:`measure_idle` and ``dynamic_energy_j`` to separate the load's share.
    """

    name = "rapl"

    def __init__(
        self,
        root: str = DEFAULT_POWERCAP_ROOT,
        *,
        min_window_s: float = 0.1,
        preheat_s: float = 0.0,
    ) -> None:
        self.root = root
        self.min_window_s = min_window_s
        self.preheat_s = preheat_s
        self.idle_power_w: float | None = None
        try:
            zones, problems = discover_zones(root)
        except OSError as exc:
            raise MeterError(f"RAPL meter: cannot list {root}: {exc}") from exc
        if not zones:
            raise MeterError("RAPL meter: no readable package zone: " + "; ".join(problems))
        for problem in problems:
            logger.warning("RAPL meter: zone left out: %s", problem)
        self.zones = zones
        self.source = ",".join(str(z.energy_file) for z in zones)
        self._t0: float | None = None
        self._start_uj: list[int] | None = None
        logger.info("RAPL meter on %s", ", ".join(f"{z.zone} ({z.name})" for z in zones))

    def _read_all(self) -> tuple[float, list[int]]:
        """All counters, stamped with the midpoint of the reads."""
        before = time.perf_counter()
        try:
            values = [z.read_uj() for z in self.zones]
        except (OSError, ValueError) as exc:
            raise MeterError(f"RAPL meter: reading energy_uj failed: {exc}") from exc
        after = time.perf_counter()
        return 0.5 * (before + after), values

    def _deltas_uj(self, start: list[int], end: list[int]) -> list[int]:
        return [rapl_delta_uj(s, e, z.max_range_uj) for z, s, e in zip(self.zones, start, end, strict=True)]

    def start(self) -> None:
        if self._t0 is not None:
            raise MeterError("RAPL meter: start() called while a window is already open")
        self._t0, self._start_uj = self._read_all()

    def stop(self) -> MeterReading:
        if self._t0 is None or self._start_uj is None:
            raise MeterError("RAPL meter: stop() called without start()")
        t1, end = self._read_all()
        t0, start = self._t0, self._start_uj
        self._t0, self._start_uj = None, None
        deltas = self._deltas_uj(start, end)
        duration = t1 - t0
        energy = sum(deltas) / 1e6
        state = self.device_state()
        state["rapl_zone_energy_j"] = {z.zone: d / 1e6 for z, d in zip(self.zones, deltas, strict=True)}
        idle = self.idle_power_w
        dynamic = energy - idle * duration if idle is not None else None
        return MeterReading(
            meter="rapl",
            method="rapl_energy_uj",
            duration_s=duration,
            energy_j=energy,
            avg_power_w=energy / duration if duration > 0 else None,
            idle_power_w=idle,
            dynamic_energy_j=dynamic,
            samples=2,
            source=self.source,
            device_state=state,
        )

    def measure_idle(self, seconds: float) -> float | None:
        """Average package power over ``seconds`` of sleep; also kept for later readings."""
        if self._t0 is not None:
            raise MeterError("RAPL meter: measure_idle() called while a window is open")
        t0, start = self._read_all()
        time.sleep(seconds)
        t1, end = self._read_all()
        duration = t1 - t0
        if duration <= 0:
            return None
        self.idle_power_w = sum(self._deltas_uj(start, end)) / 1e6 / duration
        logger.debug("RAPL idle power %.2f W over %.3f s", self.idle_power_w, duration)
        return self.idle_power_w

    def device_state(self) -> dict[str, Any]:
        """The zones summed, by directory name -> ``name`` file content."""
        return {"rapl_zones": {z.zone: z.name for z in self.zones}}

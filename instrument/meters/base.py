"""The energy-meter interface every meter implements.

A meter measures one *window*: the harness calls :meth:`EnergyMeter.start`, launches the
kernel repeatedly, then calls :meth:`EnergyMeter.stop`, which returns a :class:`MeterReading`.
The harness keeps launching until the window is at least ``min_window_s`` long, so meters with
a coarse counter (NVML updates its energy counter every few ms) still see enough energy.

Measured columns are never estimates: a meter that cannot read a quantity leaves it ``None``.
"""

from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from kernelcast.schema import MeterName


class MeterError(RuntimeError):
    """A meter could not be opened or read (library missing, no permission, no such device)."""


@dataclass
class MeterReading:
    """What one measurement window read.

    ``energy_j`` and ``avg_power_w`` cover the whole window (all launches in it); the harness
    divides by the number of launches for per-launch figures.
    """

    meter: MeterName
    # "nvml_total_energy", "nvml_power_sampling", "rapl_energy_uj" or "none"
    method: str
    duration_s: float               # wall time of the window
    energy_j: float | None = None   # total energy over the window
    avg_power_w: float | None = None
    idle_power_w: float | None = None        # measured before the window, where the meter can
    dynamic_energy_j: float | None = None    # energy_j - idle_power_w * duration_s
    samples: int = 0                # power samples or counter reads that went into the figure
    source: str = ""                # what was read (API call or sysfs path)
    device_state: dict[str, Any] = field(default_factory=dict)  # clocks, temperature, power limit

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EnergyMeter(abc.ABC):
    """One energy meter, bound to one device (a GPU or a CPU package set)."""

    name: ClassVar[MeterName]
    #: the harness keeps the window open (launching repeatedly) at least this long
    min_window_s: float = 0.0
    #: the harness runs the kernel this long before measuring, to settle temperature and clocks
    preheat_s: float = 0.0

    @abc.abstractmethod
    def start(self) -> None:
        """Open a measurement window."""

    @abc.abstractmethod
    def stop(self) -> MeterReading:
        """Close the window opened by :meth:`start` and return what it read."""

    def measure_idle(self, seconds: float) -> float | None:
        """Measure idle power over ``seconds`` (device doing nothing); ``None`` if not readable."""
        return None

    def device_state(self) -> dict[str, Any]:
        """Clocks, temperature, power limit where readable; empty otherwise."""
        return {}

    def close(self) -> None:  # noqa: B027 - optional hook, deliberately not abstract
        """Release the library or files the meter holds."""

    def __enter__(self) -> EnergyMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

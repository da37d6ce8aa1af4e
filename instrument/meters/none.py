"""The null meter: times the window, reads no energy."""

from __future__ import annotations

import logging
import time

from kernelcast.instrument.meters.base import EnergyMeter, MeterError, MeterReading

logger = logging.getLogger(__name__)


class NoMeter(EnergyMeter):
    """A meter that only measures wall time; energy and power stay ``None``.

    Used where no energy source is available (no NVIDIA GPU, no readable RAPL), so that the
    harness can run the same start/stop protocol everywhere.
    """

    name = "none"

    def __init__(self, *, min_window_s: float = 0.0, preheat_s: float = 0.0) -> None:
        self.min_window_s = min_window_s
        self.preheat_s = preheat_s
        self._t0: float | None = None

    def start(self) -> None:
        if self._t0 is not None:
            raise MeterError("NoMeter: start() called while a window is already open")
        self._t0 = time.perf_counter()

    def stop(self) -> MeterReading:
        t1 = time.perf_counter()
        if self._t0 is None:
            raise MeterError("NoMeter: stop() called without start()")
        duration = t1 - self._t0
        self._t0 = None
        return MeterReading(meter="none", method="none", duration_s=duration, samples=0, source="")

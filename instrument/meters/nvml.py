"""NVIDIA GPU energy through NVML (the ``pynvml`` module of the nvidia-ml-py package).

Two modes, chosen once when the meter opens:

* **counter** (Volta and newer): ``nvmlDeviceGetTotalEnergyConsumption`` is a monotonic
  millijoule counter; a window is the difference of two reads.
* **sampling** (older GPUs, or where the counter is not supported): a background thread reads
  instantaneous power every ``sample_interval_s`` -- the ``NVML_FI_DEV_POWER_INSTANT`` field when
  the driver supports it, else ``nvmlDeviceGetPowerUsage`` -- and the window energy is the
  trapezoid integral of the samples. One sample is taken synchronously at :meth:`start` and one
  at :meth:`stop`, so the integral spans exactly the reported ``duration_s``.

``pynvml`` is imported lazily, so this module imports fine on machines without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from kernelcast.instrument.meters.base import EnergyMeter, MeterError, MeterReading

logger = logging.getLogger(__name__)

SRC_TOTAL_ENERGY = "nvmlDeviceGetTotalEnergyConsumption"
SRC_POWER_INSTANT = "nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_INSTANT)"
SRC_POWER_USAGE = "nvmlDeviceGetPowerUsage"


def import_pynvml() -> ModuleType:
    """Import ``pynvml`` or raise :class:`MeterError`."""
    try:
        import pynvml  # deferred: loads the NVIDIA driver library (optional)
    except ImportError as exc:
        raise MeterError(f"NVML meter: cannot import pynvml (install nvidia-ml-py): {exc}") from exc
    return pynvml


def trapezoid_energy(samples: Sequence[tuple[float, float]]) -> float:
    """Integrate ``(time_s, power_w)`` samples with the trapezoid rule; joules."""
    total = 0.0
    for (t0, p0), (t1, p1) in zip(samples, samples[1:], strict=False):
        total += 0.5 * (p0 + p1) * (t1 - t0)
    return total


class _PowerSampler:
    """Background thread appending ``(perf_counter, watts)`` samples until stopped."""

    def __init__(self, read_power_w: Callable[[], float], interval_s: float) -> None:
        self._read = read_power_w
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[tuple[float, float]] = []
        self.error: BaseException | None = None

    def _sample(self) -> None:
        watts = self._read()
        self.samples.append((time.perf_counter(), watts))

    def start(self) -> None:
        """Take the first sample synchronously, then start the thread."""
        self._sample()
        self._thread = threading.Thread(target=self._run, name="nvml-power-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sample()
            except Exception as exc:  # reported by stop()
                self.error = exc
                return

    def cancel(self) -> None:
        """Stop the thread without a closing sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def stop(self) -> list[tuple[float, float]]:
        """Stop the thread, take the closing sample synchronously, return all samples."""
        self.cancel()
        if self.error is not None:
            logger.warning("NVML power sampler stopped early after %d samples: %s",
                           len(self.samples), self.error)
        # The closing sample makes the integral end at stop time (and guarantees >= 2 samples).
        self._sample()
        return self.samples


class NvmlMeter(EnergyMeter):
    """Energy of one NVIDIA GPU, by NVML energy counter or by power sampling.

    ``pci_bus_id`` (e.g. ``"00000000:01:00.0"``), when given, selects the device instead of
    ``index``; use it to match an OpenCL device by its PCI address.
    """

    name = "nvml"

    def __init__(
        self,
        index: int = 0,
        *,
        pci_bus_id: str | None = None,
        min_window_s: float = 1.0,
        preheat_s: float = 2.0,
        sample_interval_s: float = 0.005,
        idle_s: float = 0.5,
    ) -> None:
        if sample_interval_s <= 0:
            raise ValueError(f"sample_interval_s must be > 0, got {sample_interval_s}")
        self.index = index
        self.pci_bus_id = pci_bus_id
        self.min_window_s = min_window_s
        self.preheat_s = preheat_s
        self.sample_interval_s = sample_interval_s
        #: suggested idle-measurement length for the harness (``measure_idle(meter.idle_s)``)
        self.idle_s = idle_s
        self.idle_power_w: float | None = None
        self._t0: float | None = None
        self._counter0_mj: int | None = None
        self._sampler: _PowerSampler | None = None
        self._initialised = False

        self._nvml = import_pynvml()
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise MeterError(f"NVML meter: nvmlInit failed: {exc}") from exc
        self._initialised = True
        where = f"PCI bus id {pci_bus_id!r}" if pci_bus_id is not None else f"index {index}"
        try:
            if pci_bus_id is not None:
                self._handle = nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
            else:
                self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as exc:
            self.close()
            raise MeterError(f"NVML meter: no GPU at {where}: {exc}") from exc

        self.mode, self.source = self._detect_mode()
        logger.info("NVML meter on GPU %s: mode=%s source=%s", where, self.mode, self.source)

    # -- detection and raw reads ------------------------------------------------------------

    def _detect_mode(self) -> tuple[str, str]:
        nvml = self._nvml
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            return "counter", SRC_TOTAL_ENERGY
        except nvml.NVMLError as exc:
            logger.info("NVML total-energy counter not usable (%s); sampling power instead", exc)
        try:
            self._read_power_instant_w()
            return "sampling", SRC_POWER_INSTANT
        except nvml.NVMLError as exc:
            logger.info("NVML_FI_DEV_POWER_INSTANT not usable (%s); using nvmlDeviceGetPowerUsage", exc)
        try:
            self._read_power_usage_w()
            return "sampling", SRC_POWER_USAGE
        except nvml.NVMLError as exc:
            self.close()
            raise MeterError(f"NVML meter: GPU reports neither an energy counter nor power: {exc}") from exc

    def _read_counter_mj(self) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    def _read_power_instant_w(self) -> float:
        nvml = self._nvml
        values = nvml.nvmlDeviceGetFieldValues(self._handle, [nvml.NVML_FI_DEV_POWER_INSTANT])
        field = values[0]
        if field.nvmlReturn != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(field.nvmlReturn)
        return field.value.uiVal / 1000.0

    def _read_power_usage_w(self) -> float:
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    def _read_power_w(self) -> float:
        if self.source == SRC_POWER_INSTANT:
            return self._read_power_instant_w()
        return self._read_power_usage_w()

    def _timed_counter(self) -> tuple[float, int]:
        """Counter read stamped with the midpoint of the call."""
        before = time.perf_counter()
        mj = self._read_counter_mj()
        after = time.perf_counter()
        return 0.5 * (before + after), mj

    # -- the EnergyMeter protocol -----------------------------------------------------------

    def start(self) -> None:
        if self._t0 is not None:
            raise MeterError("NVML meter: start() called while a window is already open")
        try:
            if self.mode == "counter":
                self._t0, self._counter0_mj = self._timed_counter()
            else:
                sampler = _PowerSampler(self._read_power_w, self.sample_interval_s)
                sampler.start()
                self._sampler = sampler
                self._t0 = sampler.samples[0][0]
        except self._nvml.NVMLError as exc:
            raise MeterError(f"NVML meter: reading {self.source} at start failed: {exc}") from exc

    def stop(self) -> MeterReading:
        if self._t0 is None:
            raise MeterError("NVML meter: stop() called without start()")
        t0 = self._t0
        self._t0 = None
        try:
            if self.mode == "counter":
                assert self._counter0_mj is not None
                t1, mj1 = self._timed_counter()
                duration = t1 - t0
                energy = (mj1 - self._counter0_mj) / 1000.0
                samples = 2
                method = "nvml_total_energy"
            else:
                sampler, self._sampler = self._sampler, None
                assert sampler is not None
                points = sampler.stop()
                duration = points[-1][0] - points[0][0]
                energy = trapezoid_energy(points)
                samples = len(points)
                method = "nvml_power_sampling"
        except self._nvml.NVMLError as exc:
            raise MeterError(f"NVML meter: reading {self.source} at stop failed: {exc}") from exc
        idle = self.idle_power_w
        dynamic = energy - idle * duration if idle is not None else None
        return MeterReading(
            meter="nvml",
            method=method,
            duration_s=duration,
            energy_j=energy,
            avg_power_w=energy / duration if duration > 0 else None,
            idle_power_w=idle,
            dynamic_energy_j=dynamic,
            samples=samples,
            source=self.source,
            device_state=self.device_state(),
        )

    def measure_idle(self, seconds: float) -> float | None:
        """Average power over ``seconds`` with nothing launched; also kept for later readings."""
        if self._t0 is not None:
            raise MeterError("NVML meter: measure_idle() called while a window is open")
        try:
            if self.mode == "counter":
                t0, mj0 = self._timed_counter()
                time.sleep(seconds)
                t1, mj1 = self._timed_counter()
                duration = t1 - t0
                energy = (mj1 - mj0) / 1000.0
            else:
                sampler = _PowerSampler(self._read_power_w, self.sample_interval_s)
                sampler.start()
                time.sleep(seconds)
                points = sampler.stop()
                duration = points[-1][0] - points[0][0]
                energy = trapezoid_energy(points)
                if duration <= 0:  # degenerate (seconds == 0): plain mean of the samples
                    self.idle_power_w = sum(p for _, p in points) / len(points)
                    return self.idle_power_w
        except self._nvml.NVMLError as exc:
            raise MeterError(f"NVML meter: idle measurement failed: {exc}") from exc
        if duration <= 0:
            return None
        self.idle_power_w = energy / duration
        logger.debug("NVML idle power %.2f W over %.3f s", self.idle_power_w, duration)
        return self.idle_power_w

    def device_state(self) -> dict[str, Any]:
        """Name, graphics/memory clock (MHz), temperature (C), enforced power limit (W).

        Each value is read on its own; one the device does not support is simply left out.
        """
        nvml = self._nvml
        h = self._handle
        reads: dict[str, Any] = {
            "name": lambda: nvml.nvmlDeviceGetName(h),
            "graphics_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_GRAPHICS),
            "memory_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM),
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
            "power_limit_w": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
        }
        state: dict[str, Any] = {}
        for key, read in reads.items():
            try:
                value = read()
            except nvml.NVMLError as exc:
                logger.debug("NVML %s not readable: %s", key, exc)
                continue
            if isinstance(value, bytes):
                value = value.decode(errors="replace")
            state[key] = value
        return state

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        self._t0 = None
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                logger.warning("nvmlShutdown failed: %s", exc)

"""Energy meters: NVML (NVIDIA GPUs), RAPL (CPU packages) and a null meter.

Use :func:`make_meter` to open one by name (``"auto"`` picks from the OpenCL device's vendor and
type); see ``README.md`` in this directory for what each meter reads.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from kernelcast.instrument.meters.base import EnergyMeter, MeterError, MeterReading
from kernelcast.instrument.meters.none import NoMeter
from kernelcast.instrument.meters.nvml import NvmlMeter
from kernelcast.instrument.meters.rapl import DEFAULT_POWERCAP_ROOT, RaplMeter, rapl_readable

from kernelcast.errors import UsageError

__all__ = [
    "EnergyMeter",
    "MeterError",
    "MeterReading",
    "NoMeter",
    "NvmlMeter",
    "RaplMeter",
    "auto_meter_name",
    "available_meters",
    "check_meter_spec",
    "make_meter",
]

logger = logging.getLogger(__name__)

_METERS: dict[str, type[EnergyMeter]] = {"nvml": NvmlMeter, "rapl": RaplMeter, "none": NoMeter}


def available_meters() -> list[str]:
    """Names :func:`make_meter` accepts besides ``"auto"``."""
    return list(_METERS)


def check_meter_spec(spec: str) -> str:
    """``spec`` if it names a meter (or ``"auto"``); :class:`~kernelcast.errors.UsageError` otherwise."""
    if spec not in ("auto", *available_meters()):
        raise UsageError(f"unknown meter {spec!r} (auto, {', '.join(available_meters())})")
    return spec


def _nvml_usable() -> bool:
    try:
        import pynvml  # deferred: loads the NVIDIA driver library (optional)

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError, OSError from the library loader...
        logger.debug("NVML not usable: %s", exc)
        return False
    try:
        pynvml.nvmlShutdown()
    except Exception as exc:
        logger.debug("nvmlShutdown failed: %s", exc)
    return True


def auto_meter_name(vendor: str, device_type: str, *, rapl_root: str = DEFAULT_POWERCAP_ROOT) -> str:
    """The meter ``"auto"`` would pick for an OpenCL device. Never raises.

    ``"nvml"`` for an NVIDIA device when NVML initialises, ``"rapl"`` for a CPU device when a
    RAPL package counter is readable, else ``"none"``.
    """
    try:
        if "nvidia" in (vendor or "").lower() and _nvml_usable():
            return "nvml"
        if "cpu" in (device_type or "").lower() and rapl_readable(rapl_root):
            return "rapl"
    except Exception as exc:  # never raise from auto-detection
        logger.debug("meter auto-detection failed: %s", exc)
    return "none"


def _accepted_options(cls: type[EnergyMeter]) -> set[str]:
    params = inspect.signature(cls.__init__).parameters
    return {n for n, p in params.items() if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD}


def _build(name: str, nvml_index: int | None, pci_bus_id: str | None, options: dict[str, Any]) -> EnergyMeter:
    cls = _METERS[name]
    accepted = _accepted_options(cls)
    kwargs = {k: v for k, v in options.items() if k in accepted}
    dropped = sorted(set(options) - set(kwargs))
    if dropped:
        logger.debug("meter %s ignores options %s", name, dropped)
    if name == "nvml":
        return NvmlMeter(0 if nvml_index is None else nvml_index, pci_bus_id=pci_bus_id, **kwargs)
    return cls(**kwargs)


def make_meter(
    spec: str,
    *,
    vendor: str = "",
    device_type: str = "",
    nvml_index: int | None = None,
    pci_bus_id: str | None = None,
    **options: Any,
) -> EnergyMeter:
    """Open the meter named by ``spec`` (``"auto"``, ``"nvml"``, ``"rapl"`` or ``"none"``).

    ``options`` are constructor keywords (``min_window_s``, ``preheat_s``, ``sample_interval_s``,
    ``idle_s``, ``root``); ones the chosen meter does not take are ignored, so one option set
    can be passed whatever meter ``"auto"`` picks. An option no meter takes is a ``TypeError``.

    An explicit ``"nvml"``/``"rapl"`` that cannot be opened raises :class:`MeterError`;
    ``"auto"`` falls back to :class:`NoMeter` with a logged warning instead.
    """
    name = (spec or "").strip().lower()
    valid = ["auto", *_METERS]
    if name not in valid:
        raise ValueError(f"unknown meter {spec!r}; valid meters: {', '.join(valid)}")
    known = set().union(*(_accepted_options(c) for c in _METERS.values())) - {"index", "pci_bus_id"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown meter option(s) {unknown}; known: {sorted(known)}")
    if name != "auto":
        return _build(name, nvml_index, pci_bus_id, options)

    chosen = auto_meter_name(vendor, device_type, rapl_root=options.get("root", DEFAULT_POWERCAP_ROOT))
    if chosen == "none":
        logger.info("no energy meter for device (vendor=%r, type=%r); measuring time only",
                    vendor, device_type)
    else:
        try:
            return _build(chosen, nvml_index, pci_bus_id, options)
        except MeterError as exc:
            logger.warning("energy meter %s could not be opened (%s); falling back to no meter",
                           chosen, exc)
    return _build("none", nvml_index, pci_bus_id, options)

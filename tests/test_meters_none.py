"""NoMeter and the meter factory's name handling."""

from __future__ import annotations

import time

import pytest
from kernelcast.instrument.meters import MeterError, NoMeter, available_meters, make_meter


def test_no_meter_times_the_window() -> None:
    meter = NoMeter(min_window_s=0.1)
    assert meter.min_window_s == 0.1 and meter.preheat_s == 0.0
    meter.start()
    time.sleep(0.02)
    reading = meter.stop()
    assert reading.meter == "none" and reading.method == "none"
    assert 0.02 <= reading.duration_s < 5.0      # the upper bound only catches a unit error
    assert reading.energy_j is None and reading.avg_power_w is None
    assert reading.idle_power_w is None and reading.dynamic_energy_j is None
    assert reading.samples == 0 and reading.device_state == {}
    assert meter.measure_idle(0.0) is None
    assert reading.to_dict()["duration_s"] == reading.duration_s


def test_no_meter_protocol_errors() -> None:
    meter = NoMeter()
    with pytest.raises(MeterError):
        meter.stop()
    meter.start()
    with pytest.raises(MeterError):
        meter.start()
    meter.stop()


def test_available_meters() -> None:
    assert available_meters() == ["nvml", "rapl", "none"]


def test_make_meter_names() -> None:
    assert isinstance(make_meter("none"), NoMeter)
    assert isinstance(make_meter(" NONE ", sample_interval_s=0.01, preheat_s=1.5), NoMeter)
    assert make_meter("none", preheat_s=1.5).preheat_s == 1.5
    with pytest.raises(ValueError, match="valid meters: auto, nvml, rapl, none"):
        make_meter("joulescope")
    with pytest.raises(TypeError, match="sample_rate"):
        make_meter("none", sample_rate=5)


def test_auto_without_known_vendor_is_none() -> None:
    meter = make_meter("auto", vendor="Some Vendor", device_type="ACCELERATOR")
    assert isinstance(meter, NoMeter)

"""RaplMeter against a fake powercap tree (no RAPL on the development machines)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kernelcast.instrument.meters import MeterError, NoMeter, RaplMeter, auto_meter_name, make_meter
from kernelcast.instrument.meters import rapl as rapl_mod
from kernelcast.instrument.meters.rapl import discover_zones, rapl_delta_uj

MAX_RANGE = 262_143_328_850  # a real Intel package max_energy_range_uj


def write_zone(root: Path, zone: str, name: str, energy_uj: int, max_range: int = MAX_RANGE) -> Path:
    d = root / zone
    d.mkdir(parents=True, exist_ok=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def set_energy(root: Path, zone: str, energy_uj: int) -> None:
    (root / zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap(tmp_path: Path) -> Path:
    root = tmp_path / "powercap"
    (root / "intel-rapl").mkdir(parents=True)  # the control-type directory, not a zone
    write_zone(root, "intel-rapl:0", "package-0", 1_000_000)
    write_zone(root, "intel-rapl:0:0", "core", 400_000)  # subzone: part of package 0
    write_zone(root, "intel-rapl:1", "package-1", 2_000_000)
    write_zone(root, "intel-rapl-mmio:0", "package-0", 9_000_000)  # another interface, ignored
    return root


class FakeTime:
    """Stands in for the ``time`` module inside rapl.py: sleeping advances a fake clock and
    runs a callback (which rewrites the counters), so durations and energies are exact."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.on_sleep: list[object] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for cb in self.on_sleep:
            cb()  # type: ignore[operator]


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    ft = FakeTime()
    monkeypatch.setattr(rapl_mod, "time", ft)
    return ft


def test_delta_formula() -> None:
    assert rapl_delta_uj(5, 5, 1000) == 0
    assert rapl_delta_uj(0, 1000, 1000) == 1000
    assert rapl_delta_uj(1000, 0, 1000) == 1  # max -> 0 is one step
    assert rapl_delta_uj(990, 9, 1000) == 20  # 990..1000 (10 steps), ->0 (1), 0..9 (9)
    assert rapl_delta_uj(MAX_RANGE - 328_850, 500_000, MAX_RANGE) == 828_851


def test_discovers_package_zones_only(powercap: Path) -> None:
    zones, problems = discover_zones(powercap)
    assert [z.zone for z in zones] == ["intel-rapl:0", "intel-rapl:1"]
    assert [z.name for z in zones] == ["package-0", "package-1"]
    assert [z.max_range_uj for z in zones] == [MAX_RANGE, MAX_RANGE]
    assert problems == []


def test_numeric_zone_order_and_psys_skipped(tmp_path: Path) -> None:
    for n in (10, 2, 0):
        write_zone(tmp_path, f"intel-rapl:{n}", f"package-{n}", 0)
    write_zone(tmp_path, "intel-rapl:3", "psys", 0)
    meter = RaplMeter(str(tmp_path))
    assert [z.zone for z in meter.zones] == ["intel-rapl:0", "intel-rapl:2", "intel-rapl:10"]


def test_window_energy(powercap: Path, fake_time: FakeTime) -> None:
    meter = RaplMeter(str(powercap), min_window_s=0.2)
    assert (meter.min_window_s, meter.preheat_s) == (0.2, 0.0)

    def burn() -> None:
        set_energy(powercap, "intel-rapl:0", 1_000_000 + 5_000_000)
        set_energy(powercap, "intel-rapl:1", 2_000_000 + 3_000_000)
        set_energy(powercap, "intel-rapl:0:0", 400_000 + 99_000_000)  # must not be added

    fake_time.on_sleep.append(burn)
    meter.start()
    fake_time.sleep(2.0)
    reading = meter.stop()

    assert reading.meter == "rapl"
    assert reading.method == "rapl_energy_uj"
    assert reading.duration_s == 2.0
    assert reading.energy_j == pytest.approx(8.0, abs=1e-12)
    assert reading.avg_power_w == pytest.approx(4.0, abs=1e-12)
    assert reading.samples == 2
    assert reading.idle_power_w is None and reading.dynamic_energy_j is None
    assert reading.source == (f"{powercap}/intel-rapl:0/energy_uj,{powercap}/intel-rapl:1/energy_uj")
    assert reading.device_state["rapl_zones"] == {"intel-rapl:0": "package-0", "intel-rapl:1": "package-1"}
    assert reading.device_state["rapl_zone_energy_j"] == {"intel-rapl:0": 5.0, "intel-rapl:1": 3.0}


def test_wraparound_window(tmp_path: Path, fake_time: FakeTime) -> None:
    write_zone(tmp_path, "intel-rapl:0", "package-0", MAX_RANGE - 328_850)
    write_zone(tmp_path, "intel-rapl:1", "package-1", 7_000, max_range=65_535)
    meter = RaplMeter(str(tmp_path))
    meter.start()
    set_energy(tmp_path, "intel-rapl:0", 500_000)  # wrapped
    set_energy(tmp_path, "intel-rapl:1", 7_250)  # did not
    fake_time.sleep(0.5)
    reading = meter.stop()
    # 328_850 up to the max, 1 step to 0, 500_000 after; plus 250
    assert reading.device_state["rapl_zone_energy_j"] == {"intel-rapl:0": 0.828851, "intel-rapl:1": 0.00025}
    assert reading.energy_j == pytest.approx(0.829101, abs=1e-12)
    assert reading.avg_power_w == pytest.approx(0.829101 / 0.5, abs=1e-12)


def test_idle_and_dynamic_energy(powercap: Path, fake_time: FakeTime) -> None:
    meter = RaplMeter(str(powercap))
    energy = {"intel-rapl:0": 1_000_000, "intel-rapl:1": 2_000_000}
    per_second = {"intel-rapl:0": 10_000_000, "intel-rapl:1": 5_000_000}  # 15 W idle

    def tick() -> None:
        for z in energy:
            energy[z] += int(per_second[z] * step[0])
            set_energy(powercap, z, energy[z])

    step = [0.5]
    fake_time.on_sleep.append(tick)
    assert meter.measure_idle(0.5) == pytest.approx(15.0, abs=1e-9)

    per_second.update({"intel-rapl:0": 30_000_000, "intel-rapl:1": 10_000_000})  # 40 W loaded
    step[0] = 2.0
    meter.start()
    fake_time.sleep(2.0)
    reading = meter.stop()
    assert reading.energy_j == pytest.approx(80.0, abs=1e-9)
    assert reading.idle_power_w == pytest.approx(15.0, abs=1e-9)
    assert reading.dynamic_energy_j == pytest.approx(80.0 - 15.0 * 2.0, abs=1e-9)


def test_protocol_errors(powercap: Path) -> None:
    meter = RaplMeter(str(powercap))
    with pytest.raises(MeterError, match="without start"):
        meter.stop()
    meter.start()
    with pytest.raises(MeterError, match="already open"):
        meter.start()
    with pytest.raises(MeterError, match="window is open"):
        meter.measure_idle(0.0)


def test_missing_tree(tmp_path: Path) -> None:
    with pytest.raises(MeterError, match="no such directory"):
        RaplMeter(str(tmp_path / "nope"))
    with pytest.raises(MeterError, match="no intel-rapl"):
        RaplMeter(str(tmp_path))


def test_only_subzones_is_an_error(tmp_path: Path) -> None:
    write_zone(tmp_path, "intel-rapl:0:0", "core", 1)
    with pytest.raises(MeterError, match="no readable package zone"):
        RaplMeter(str(tmp_path))


def test_permission_denied(powercap: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # tests may run as root, where chmod does not deny reads: fake the kernel's EACCES instead
    real_read_text = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    with pytest.raises(MeterError, match="permission denied.*root-only"):
        RaplMeter(str(powercap))
    assert auto_meter_name("GenuineIntel", "CPU", rapl_root=str(powercap)) == "none"


def test_partly_unreadable_zone_left_out(powercap: Path, caplog: pytest.LogCaptureFixture) -> None:
    (powercap / "intel-rapl:1" / "energy_uj").unlink()
    with caplog.at_level(logging.WARNING, logger="kernelcast.instrument.meters.rapl"):
        meter = RaplMeter(str(powercap))
    assert [z.zone for z in meter.zones] == ["intel-rapl:0"]
    assert any("intel-rapl:1" in r.getMessage() for r in caplog.records)


def test_auto_and_make_meter(powercap: Path, tmp_path: Path) -> None:
    root = str(powercap)
    assert auto_meter_name("GenuineIntel", "CPU", rapl_root=root) == "rapl"
    assert auto_meter_name("AuthenticAMD", "cpu", rapl_root=root) == "rapl"
    assert auto_meter_name("GenuineIntel", "GPU", rapl_root=root) == "none"
    assert auto_meter_name("GenuineIntel", "CPU", rapl_root=str(tmp_path / "none")) == "none"

    meter = make_meter("auto", vendor="GenuineIntel", device_type="CPU", root=root,
                       sample_interval_s=0.01, min_window_s=0.3)
    assert isinstance(meter, RaplMeter)
    assert meter.min_window_s == 0.3
    assert isinstance(make_meter("rapl", root=root), RaplMeter)
    with pytest.raises(MeterError):
        make_meter("rapl", root=str(tmp_path / "none"))
    assert isinstance(make_meter("auto", vendor="x", device_type="CPU", root=str(tmp_path / "none")), NoMeter)

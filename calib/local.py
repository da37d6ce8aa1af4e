"""The profile a command uses: a published or saved one by name or path, the bundled profile measured
on the local device and driver, or the local device's own calibration, made once (``calib --quick``,
about 10 s) and cached per device and driver."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kernelcast.calib.microbench import CalibOptions, Calibrator, run_calibration
from kernelcast.calib.profile import DeviceProfile, ProfileError, bundled_profile_for, combine_runs, load_profile
from kernelcast.instrument.backends import DeviceInfo, select_device
from kernelcast.instrument.harness import Harness

from kernelcast.config import cache_dir, device_spec
from kernelcast.errors import UsageError

if TYPE_CHECKING:
    from kernelcast.instrument.runner import TimingPolicy

    from kernelcast.schema import Kernel, LaunchConfig, Measurement


def cached_profile_path(device: DeviceInfo) -> Path:
    """Where the quick calibration of ``device`` is cached."""
    h = hashlib.sha256(device.identity.encode()).hexdigest()[:16]
    d = cache_dir() / "profiles"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{h}.json"


def resolve_profile(spec: str | None, device: str | None = None, *,
                    on_calibrate: Callable[[str], None] | None = None) -> DeviceProfile:
    """The profile ``spec`` names (a bundled name or a JSON path), or without one the bundled
    profile measured on ``device`` and its driver (:func:`calib.profile.bundled_profile_for`: a
    full calibration, idle, beats a quick one), else the cached calibration of ``device`` (made
    with a quick calibration the first time; ``on_calibrate`` is told before it starts).
    :class:`UsageError` for a profile that cannot be read, or one of another device type (GPU /
    CPU) than ``device`` when both are given."""
    if spec:
        try:
            prof = load_profile(spec)
        except (ProfileError, OSError, ValueError) as e:
            raise UsageError(f"--profile {spec}: {e}") from None
        if device:
            # the user named both: the profile must describe that type of device
            info = select_device(device_spec(device))
            try:
                prof.check_device_type(info.type, f"--device {device} ({info.name})")
            except ProfileError as e:
                raise UsageError(f"--profile {spec}: {e}") from None
        return prof
    info = select_device(device_spec(device))
    bundled = bundled_profile_for(info)
    if bundled is not None:
        prof = load_profile(bundled)
        prof.origin = f"the bundled profile {bundled}, measured on this device and driver"
        return prof
    path = cached_profile_path(info)
    if path.is_file():
        prof = DeviceProfile.load(path)
        prof.origin = f"{path}, the cached calibration of this device"
        return prof

    if on_calibrate is not None:
        on_calibrate(f"no profile for {info.name} yet; running a quick calibration (kernelcast calib --quick "
                     f"--rounds {QUICK_RUNS}), cached in {path}")
    profile, _ = calibrate_runs(info, CalibOptions(quick=True), QUICK_RUNS, meter="none", timeout_s=None)
    profile.save(path)
    profile.origin = f"{path}, a quick calibration just run"
    return profile


#: runs of a quick calibration made for the user (the demo's, a first prediction's), the profile their
#: median: one quick run on a 2-core x86-64 host left 16 % of its 82 values 1.8x or more off another run's (the
#: rate halves in some runs: ``peak_int32_mul_gops`` 129 against 260, ``wi_exp_gops`` 1.75 against
#: 3.5; one demo's suite MAPE went 42 -> 60 % on such a profile); the median of 3 runs, 2.4 % (42 s
#: instead of 14)
QUICK_RUNS = 3


def calibrate(info: DeviceInfo, options: CalibOptions, *, meter: str = "none", timeout_s: float | None = 60.0,
              on_step: Callable[[str], None] | None = None,
              on_bench: Callable[[str], None] | None = None) -> tuple[DeviceProfile, Calibrator]:
    """Run the calibration microbenchmarks on ``info``: timing benchmarks with no meter, energy
    benchmarks (when ``meter`` is not ``none`` and ``options`` asks for them) with ``meter``."""
    want_energy = meter != "none" and "energy" in options.benches
    timeout = 60.0 if timeout_s is None else timeout_s
    with Harness(info, meter="none", timeout_s=timeout) as h_time:
        h_energy = Harness(info, meter=meter, timeout_s=timeout) if want_energy else None
        try:
            return run_calibration(info, h_time, h_energy, options, meter=meter, on_step=on_step, on_bench=on_bench)
        finally:
            if h_energy is not None:
                h_energy.close()


def calibrate_runs(info: DeviceInfo, options: CalibOptions, runs: int = 1, *, meter: str = "none",
                   timeout_s: float | None = 60.0, on_step: Callable[[str], None] | None = None,
                   on_bench: Callable[[str], None] | None = None) -> tuple[DeviceProfile, Calibrator]:
    """:func:`calibrate` ``runs`` times and :func:`calib.profile.combine_runs` of the results (one
    run: that run's profile as is). The calibrator returned is the last run's, with the failures
    and measurement counts of all runs."""
    profiles: list[DeviceProfile] = []
    failures: list[str] = []
    n_meas = 0
    cal = None
    for i in range(max(1, runs)):
        if i and options.max_load is not None:
            _settle(info, options, f"before run {i + 1}", on_step)
        step = on_step if runs == 1 or on_step is None else (lambda label, i=i: on_step(f"run {i + 1}: {label}"))
        prof, cal = calibrate(info, options, meter=meter, timeout_s=timeout_s, on_step=step, on_bench=on_bench)
        profiles.append(prof)
        failures += [f"run {i + 1}: {f}" if runs > 1 else f for f in cal.failures]
        n_meas += cal.n_runs
    assert cal is not None
    cal.failures, cal.n_runs = failures, n_meas
    if runs == 1:
        return profiles[0], cal
    measured = [p for p in profiles if p.values]
    return (combine_runs(measured) if measured else profiles[0]), cal


#: how long ``calib --rounds N --max-load L`` waits between runs for the load average to drop below L
RUN_SETTLE_S = 180.0


def _settle(info: DeviceInfo, options: CalibOptions, when: str, on_step: Callable[[str], None] | None) -> None:
    """Between runs: calibration keeps every core busy, so the 1-minute load average it leaves
    behind is its own (about the number of cores); wait up to :data:`RUN_SETTLE_S` for it to fall
    below ``--max-load`` (decaying by e in a minute), then let the next run's own checks apply."""
    if on_step is not None:
        on_step(f"waiting for the host load average to drop below {options.max_load:g} {when}")
    probe = Calibrator(info, _NoRunner(), None, dataclasses.replace(options, load_wait_s=RUN_SETTLE_S))
    probe.check_load(when, wait=True)


class _NoRunner:
    """A runner for a calibrator that only checks the load."""

    def run(self, kernel: Kernel, config: LaunchConfig, policy: TimingPolicy | None = None) -> Measurement:
        raise AssertionError("not for measuring")


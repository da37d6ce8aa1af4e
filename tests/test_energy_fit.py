"""Fitting a GPU profile's energy constants to measured energy (``calib --from-data``): the constants
that made a clock sweep's energies come back, and bad input refused before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.energy_fit import fit_energy_constants
from kernelcast.calib.profile import DeviceProfile, load_profile
from kernelcast.datagen.dataset import read_dataset
from kernelcast.datagen.frame import load_measured_frame
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.analytical.energy import clock_tree_w, gpu_energy_constants

from kernelcast.cli import main

FMA_KERNEL = """
__kernel void fma_loop(__global float *out) {
    float a = get_global_id(0);
    for (int i = 0; i < nr_inner; i++) a = a * 1.5f + 2.0f;
    out[get_global_id(0)] = a;
}
"""
CLOCKS = (405, 600, 800, 1000, 1200, 1400, 1560)


def _sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A clock sweep of the FMA loop on the RTX A4000 profile, imported from a Kernel Tuner cache
    (its powers are placeholders: the tests set the energies)."""
    recs = {f"1024,4096,{c}": {"block_size_x": 1024, "nr_inner": 4096, "nvml_gr_clock": c, "time": 400.0 / c,
                               "times": [400.0 / c] * 2, "nvml_power": 50.0} for c in CLOCKS}
    cache = tmp_path / "c.json"
    cache.write_text(json.dumps({"device_name": "NVIDIA RTX A4000", "kernel_name": "fma_loop",
                                 "problem_size": 4194304, "tune_params_keys": ["block_size_x", "nr_inner",
                                                                               "nvml_gr_clock"],
                                 "tune_params": {"block_size_x": [1024], "nr_inner": [4096],
                                                 "nvml_gr_clock": list(CLOCKS)}, "cache": recs}))
    src = tmp_path / "k.cl"
    src.write_text(FMA_KERNEL)
    out = tmp_path / "ds"
    assert main(["dataset", "import-kt", str(cache), "--kernel", str(src), "--out", str(out)]) == 0, \
        capsys.readouterr().err
    capsys.readouterr()
    return out


def _with(profile: DeviceProfile, constant_w: float, fma: float, floor: float) -> DeviceProfile:
    """``profile`` whose idle power is ``constant_w`` plus the clock tree's watts of ``profile``'s
    rule at ``floor`` (the part the fit keeps)."""
    clock_w = clock_tree_w(AnalyticalModel(profile).dev, floor)
    p = DeviceProfile.from_dict(profile.to_dict())
    p.set("idle_power_w", constant_w + clock_w, "W", "test")
    p.set("idle_clock_share", clock_w / (constant_w + clock_w), "1", "test")
    p.set("energy_per_op_fp32_fma_pj", fma, "pJ", "test")
    p.set("voltage_floor_ratio", floor, "1", "test")
    return p


def test_fit_recovers_the_constants_of_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Energies made by the model with known constants: the fit from the profile's own (derived)
    constants finds them again, and the profile it writes predicts those energies."""
    frame, _ = load_measured_frame(_sweep(tmp_path, capsys))
    base = load_profile("rtx-a4000")
    truth = _with(base, 40.0, 12.0, 0.72)
    want = gpu_energy_constants(AnalyticalModel(truth).dev)
    frame = frame.assign(energy_j=AnalyticalModel(truth, at_measured_time=True).predict(frame).energy_j)
    start = gpu_energy_constants(AnalyticalModel(base).dev)
    assert want is not None and start is not None and start.voltage_floor != 0.72 and start.fma_pj < 8.0
    assert want.voltage_floor == 0.72 and want.sources["voltage_floor_ratio"] == "profile"
    assert want.idle_w * want.clock_share() == pytest.approx(clock_tree_w(AnalyticalModel(base).dev, 0.72))
    fitted, fit = fit_energy_constants(base, frame)
    assert fit.floor_fitted and fit.floor == pytest.approx(0.72)
    assert fit.idle_w == pytest.approx(want.idle_w, rel=2e-3) and fit.fma_pj == pytest.approx(12.0, rel=2e-3)
    assert fit.idle_share == pytest.approx(want.clock_share(), rel=2e-3)
    assert fit.rms_log < 1e-3 < fit.rms_log_before
    assert fit.clocks == [float(c) for c in CLOCKS] and fit.rows == len(CLOCKS)
    again = AnalyticalModel(fitted, at_measured_time=True).predict(frame).energy_j
    np.testing.assert_allclose(again, frame["energy_j"], rtol=1e-3)
    assert fitted.entry("voltage_floor_ratio") is not None and fitted.get("voltage_floor_ratio") == pytest.approx(0.72)


def test_fit_without_a_clock_axis_keeps_the_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frame, _ = load_measured_frame(_sweep(tmp_path, capsys))
    frame = frame[frame["gr_clock_mhz"] == 1000].reset_index(drop=True)
    frame = pd.concat([frame, frame.assign(row_key=frame["row_key"] + "b")], ignore_index=True)
    base = load_profile("rtx-a4000")
    frame = frame.assign(energy_j=AnalyticalModel(_with(base, 40.0, 4.0, 0.72), at_measured_time=True)
                         .predict(frame).energy_j * 1.0)
    start = gpu_energy_constants(AnalyticalModel(base).dev)
    assert start is not None
    _, fit = fit_energy_constants(base, frame)
    assert not fit.floor_fitted and fit.floor == start.voltage_floor
    assert fit.rms_log < 0.01          # one clock: the level is fitted, the split is the prior's


def test_calib_from_data_writes_the_fitted_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = _sweep(tmp_path, capsys)
    out = tmp_path / "fitted.json"
    assert main(["calib", "--out", str(out), "--from-data", str(ds), "--profile", "rtx-a4000", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["rows"] == len(CLOCKS) and got["floor_fitted"]
    prof = load_profile(str(out))
    assert prof.get("idle_power_w") == pytest.approx(got["idle_power_w"])
    assert prof.get("voltage_floor_ratio") == pytest.approx(got["voltage_floor_ratio"])
    assert "calib --from-data" in prof.entry("idle_power_w").source  # type: ignore[union-attr]


@pytest.mark.parametrize("args, message", [
    (["--profile", "rtx-a4000"], "no such dataset directory"),
    (["--profile", "pocl-local", "DS"], "not a GPU profile"),
    (["DS"], "needs --profile"),
    (["--profile", "no-such-profile", "DS"], "no bundled profile of that name"),
    (["--profile", "rtx-a4000", "--analysis-cache", "MISSING", "DS"], "no such directory"),
])
def test_calib_from_data_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                   message: str) -> None:
    ds = _sweep(tmp_path, capsys)
    out = tmp_path / "p.json"
    data = str(ds) if "DS" in args else str(tmp_path / "missing")
    argv = ["calib", "--out", str(out)] + [a.replace("MISSING", str(tmp_path / "nope")) for a in args if a != "DS"]
    argv += ["--from-data", data]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_calib_from_data_needs_measured_energy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep imported without a power column has no energy to fit; --profile alone is refused too."""
    ds = _sweep(tmp_path, capsys)
    cache = json.loads((tmp_path / "c.json").read_text())
    for rec in cache["cache"].values():
        del rec["nvml_power"]
    (tmp_path / "c.json").write_text(json.dumps(cache))
    plain = tmp_path / "plain"
    assert main(["dataset", "import-kt", str(tmp_path / "c.json"), "--kernel", str(tmp_path / "k.cl"), "--out",
                 str(plain)]) == 0
    capsys.readouterr()
    assert "energy_j" not in read_dataset(plain).columns or read_dataset(plain)["energy_j"].isna().all()
    out = tmp_path / "p.json"
    assert main(["calib", "--out", str(out), "--from-data", str(plain), "--profile", "rtx-a4000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "0 row(s) with a measured energy" in err and not out.exists()
    assert main(["calib", "--out", str(out), "--profile", "rtx-a4000"]) == 2
    assert "go with --from-data" in capsys.readouterr().err and not out.exists()
    assert ds.is_dir()

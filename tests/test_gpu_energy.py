"""The GPU energy model (static power x time + dynamic energy per operation and per byte, with the
clock and the power limit), the import of power-only and clock-axis Kernel Tuner caches, and the
few-shot energy correction, against answers worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kernelcast.datagen.dataset import read_dataset
from kernelcast.models.analytical.energy import (
    DEFAULT_BYTE_PJ,
    FMA_POWER_SHARE_OF_TDP,
    IDLE_SHARE_OF_TDP,
    RUNNING_CONSTANT_SHARE_OF_TDP,
    VOLTAGE_FLOOR_RATIO,
    GPUEnergyConstants,
    gpu_dynamic_terms,
    gpu_energy,
    gpu_energy_constants,
    idle_clock_share,
    idle_power,
)
from kernelcast.models.analytical.gpu import GPUParams
from kernelcast.train.evaluate_energy import few_shot_energy

from kernelcast.cli import main

FMA_KERNEL = """
__kernel void fma_loop(__global float *out) {
    float a = get_global_id(0);
    for (int i = 0; i < nr_inner; i++) a = a * 1.5f + 2.0f;
    out[get_global_id(0)] = a;
}
"""


def _params(**kw: object) -> GPUParams:
    base: dict[str, object] = dict(name="hand-made GPU", compute_units=10, rates={"fp32_fma": 1e12},
                                   rate_sources={}, bw_levels=[], dram_bw=1e11, local_bw=None, launch_s=0.0,
                                   wg_overhead_s=0.0, barrier_s=0.0, clock_hz=1e9, mem_latency_s=None, tdp_w=100.0,
                                   energy=None, builtin_rates={})
    base.update(kw)
    return GPUParams(**base)  # type: ignore[arg-type]


def test_constants_derived_from_tdp_and_rate() -> None:
    c = gpu_energy_constants(_params())
    assert c is not None
    # the running board's constant 0.17 x 100 W, plus the clock tree of an idle GPU: 0.2 x 100 W x
    # the share that follows f V^2, (80 - 55) / (1 - (1065 / 1410) 0.8^2) / 80 = 0.60492 with the floor 0.8
    assert (RUNNING_CONSTANT_SHARE_OF_TDP, IDLE_SHARE_OF_TDP, VOLTAGE_FLOOR_RATIO) == (0.17, 0.2, 0.8)
    assert idle_clock_share() == pytest.approx(0.60492, abs=1e-5)
    assert idle_clock_share(1.0) == 1.0        # (80 - 55) / (1 - 1065 / 1410) / 80 = 1.28, capped
    assert c.idle_w == pytest.approx(17.0 + 20.0 * 0.60492, abs=1e-3)
    assert c.clock_share() == pytest.approx(20.0 * 0.60492 / c.idle_w, abs=1e-4)
    # 0.38 x 100 W / 1e12 FMA/s = 38 pJ per FMA
    assert FMA_POWER_SHARE_OF_TDP == 0.38 and c.fma_pj == pytest.approx(38.0)
    assert c.op_pj["fp64_fma"] == pytest.approx(76.0) and c.op_pj["int_add"] == pytest.approx(19.0)
    assert c.byte_pj["dram"] == pytest.approx(DEFAULT_BYTE_PJ["dram"])
    # profile values win over the derived ones
    c2 = gpu_energy_constants(_params(energy={"idle_power_w": 30.0, "energy_per_op_fp32_fma_pj": 10.0,
                                              "energy_per_access_dram_pj": 320.0}))
    assert c2 is not None and (c2.idle_w, c2.fma_pj, c2.byte_pj["dram"]) == (30.0, 10.0, 10.0)
    assert gpu_energy_constants(_params(tdp_w=None)) is None


def test_dynamic_terms_from_named_counts() -> None:
    c = GPUEnergyConstants(idle_w=10.0, fma_pj=50.0, op_pj={"fp32_fma": 50.0, "int_add": 25.0},
                           byte_pj={"dram": 2.0, "l2": 1.0, "shared": 0.5})
    g = np.array([1000.0])
    f = {"fp32_fma": np.array([4.0]), "int_add": np.array([2.0]), "global_fetched_bytes": np.array([8.0]),
         "global_load_bytes": np.array([8.0]), "global_store_bytes": np.array([4.0]), "local_bytes": np.array([16.0])}
    d = gpu_dynamic_terms(c, f, g)
    assert d["compute"][0] == pytest.approx(1000 * (4 * 50 + 2 * 25) * 1e-12)
    assert d["dram"][0] == pytest.approx(1000 * 8 * 2.0e-12)
    assert d["l2"][0] == pytest.approx(1000 * 12 * 1.0e-12)
    assert d["shared"][0] == pytest.approx(1000 * 16 * 0.5e-12)


def test_clock_voltage_and_power_limit() -> None:
    c = GPUEnergyConstants(idle_w=20.0, fma_pj=1.0, op_pj={}, byte_pj={})
    dyn = {"compute": np.array([8.0, 8.0, 8.0]), "l2": np.zeros(3), "shared": np.zeros(3), "dram": np.array([1.0] * 3)}

    def time_at(r: np.ndarray) -> np.ndarray:      # compute-bound: 0.1 s at the boost clock
        return 0.1 / np.asarray(r)

    e, t, r, terms = gpu_energy(c, dyn, time_at, np.array([1.0, 0.5, 0.8]), None)
    # at boost: 20 W x 0.1 s + 8 J + 1 J
    assert e[0] == pytest.approx(2.0 + 8.0 + 1.0)
    # half the clock: twice the time, the voltage at its floor, the idle power's f V^2 part lower
    s = idle_clock_share()
    idle_half = 20.0 * ((1 - s) + s * 0.5 * VOLTAGE_FLOOR_RATIO ** 2)
    assert idle_power(c, np.array([0.5]))[0] == pytest.approx(idle_half)
    assert t[1] == pytest.approx(0.2) and e[1] == pytest.approx(idle_half * 0.2 + 8.0 * VOLTAGE_FLOOR_RATIO ** 2 + 1.0)
    assert e[2] == pytest.approx(20.0 * ((1 - s) + s * 0.8 ** 3) * 0.125 + 8.0 * 0.64 + 1.0)
    assert terms["static"][0] == pytest.approx(2.0)
    # a limit of 60 W: at boost the power is 110 W, so the clock drops until P = 60 W
    e, t, r, _ = gpu_energy(c, dyn, time_at, np.array([1.0]), np.array([60.0]))
    assert e[0] / t[0] == pytest.approx(60.0, rel=1e-6) and r[0] < 1.0


def test_idle_share_reproduces_both_published_idle_powers() -> None:
    c = GPUEnergyConstants(idle_w=80.0, fma_pj=1.0, op_pj={}, byte_pj={})
    assert idle_power(c, np.array([1.0]))[0] == pytest.approx(80.0)
    assert idle_power(c, np.array([1065.0 / 1410.0]))[0] == pytest.approx(55.0)


def test_few_shot_energy_recovers_the_split() -> None:
    t = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    d = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 6.0])
    # the model's split (10 W static, d dynamic) is off by a factor 0.7 on static and 0.5 on dynamic
    y = 0.7 * 10.0 * t + 0.5 * d
    groups = np.zeros(6, dtype=int)
    shots = np.array([True, True, True, False, False, False])
    pred, lo, hi = few_shot_energy(t, np.full(6, 10.0), d, y, groups, shots)
    # three consistent shots: the prior (1 +- 100 % on each scale against 5 % shot noise) moves
    # the fit by well under 1 %
    assert pred[3:] == pytest.approx(y[3:], rel=0.01)
    assert np.all(lo[3:] <= pred[3:]) and np.all(hi[3:] >= pred[3:])
    # one shot: the model's own split scaled to the shot
    one = np.array([True, False, False, False, False, False])
    pred, lo, hi = few_shot_energy(t, np.full(6, 10.0), d, y, groups, one)
    k = y[0] / (10.0 * t[0] + d[0])
    assert pred[1:] == pytest.approx(k * (10.0 * t[1:] + d[1:]))
    assert np.all(lo[1:] < pred[1:]) and np.all(hi[1:] > pred[1:])
    assert pred[0] == y[0]


def test_import_power_only_clock_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cache of our own: power (no energy) at two set clocks, one failed record whose observer
    column holds Kernel Tuner's error name."""
    recs = {
        "256,64,1000": {"block_size_x": 256, "nr_inner": 64, "nvml_gr_clock": 1000, "time": 2.0, "times": [2.0, 2.0],
                        "nvml_power": 100.0, "core_freq": 1000.0, "GFLOPS/W": 1.5},
        "256,64,500": {"block_size_x": 256, "nr_inner": 64, "nvml_gr_clock": 500, "time": 4.0, "times": [4.0, 4.0],
                       "nvml_power": 40.0, "core_freq": 500.0, "GFLOPS/W": 2.0},
        "512,64,500": {"block_size_x": 512, "nr_inner": 64, "nvml_gr_clock": 500, "time": "RuntimeFailedConfig",
                       "GFLOPS/W": "RuntimeFailedConfig"},
    }
    cache = tmp_path / "c.json"
    cache.write_text(json.dumps({"device_name": "NVIDIA RTX A4000", "kernel_name": "fma_loop", "problem_size": 65536,
                                 "tune_params_keys": ["block_size_x", "nr_inner", "nvml_gr_clock"],
                                 "tune_params": {"block_size_x": [256, 512], "nr_inner": [64],
                                                 "nvml_gr_clock": [500, 1000]}, "cache": recs}))
    src = tmp_path / "k.cl"
    src.write_text(FMA_KERNEL)
    out = tmp_path / "ds"
    code = main(["dataset", "import-kt", str(cache), "--kernel", str(src), "--out", str(out), "--json"])
    text = capsys.readouterr()
    assert code == 0, text.err
    info = json.loads(text.out)
    assert info["rows"] == 3 and info["rows_with_energy"] == 2 and info["unreferenced_tune_params"] == []
    df = read_dataset(out).set_index("kt_key")
    # energy = power x time: 100 W x 2 ms, 40 W x 4 ms
    assert df.loc["256,64,1000", "energy_j"] == pytest.approx(0.2)
    assert df.loc["256,64,500", "energy_j"] == pytest.approx(0.16)
    assert df.loc["256,64,500", "meter_method"] == "kernel_tuner:nvml_power*time"
    assert df.loc["256,64,500", "gr_clock_mhz"] == 500.0
    assert df.loc["512,64,500", "status"] == "runtime_error"


def test_energy_at_measured_time_and_clock_of_imported_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Rows of a clock cache: the model's energy at each row's measured time and set clock."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.analytical import AnalyticalModel

    test_import_power_only_clock_cache(tmp_path, capsys)
    frame, _ = load_measured_frame(tmp_path / "ds")
    frame = frame.sort_values("gr_clock_mhz").reset_index(drop=True)
    prof = load_profile("rtx-a4000")
    model = AnalyticalModel(prof, at_measured_time=True)
    p = model.predict(frame)
    c = gpu_energy_constants(model.dev)
    assert c is not None and model.dev.clock_hz
    boost = model.dev.clock_hz / 1e6
    for i, (clock, t_us) in enumerate(zip(frame["gr_clock_mhz"], frame["time_median_us"])):
        terms = p.explanation[i]["energy_parts_j"]
        r = p.explanation[i]["clock_ratio"]
        assert r == pytest.approx(clock / boost)           # far below the TDP: no throttling
        assert p.time_us[i] == pytest.approx(t_us)
        assert terms["static"] == pytest.approx(float(idle_power(c, np.array([r]))[0]) * t_us * 1e-6)
        assert p.energy_j[i] == pytest.approx(sum(terms.values()))
    # the dynamic core energy follows V^2: the 500 MHz row (voltage at its floor) against the 1000 MHz one
    lo, hi = p.explanation[0]["energy_parts_j"], p.explanation[1]["energy_parts_j"]
    v_lo, v_hi = max(VOLTAGE_FLOOR_RATIO, 500 / boost), max(VOLTAGE_FLOOR_RATIO, 1000 / boost)
    assert lo["compute"] / hi["compute"] == pytest.approx((v_lo / v_hi) ** 2)


def test_predict_clock_needs_a_gpu_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    k = tmp_path / "k.cl"
    k.write_text(FMA_KERNEL)
    base = ["predict", "--kernel", str(k), "--gsize", "1048576", "--lsize", "256", "--build-options",
            "-Dnr_inner=4096", "--json"]
    assert main([*base, "--profile", "pocl-local", "--clock", "500"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--clock needs a GPU profile" in err
    got = {}
    for clock in ("500", "1000", "1410"):
        assert main([*base, "--profile", "a100-pcie", "--clock", clock]) == 0
        got[clock] = json.loads(capsys.readouterr().out)["predictions"][0]["analytical"]
    # compute-bound, no cap: the clock asked for is the clock run, up to the boost clock
    assert got["500"]["time_us"] == pytest.approx(2 * got["1000"]["time_us"], rel=1e-6)
    assert got["1000"]["time_us"] == pytest.approx(1.41 * got["1410"]["time_us"], rel=1e-6)


def test_tune_over_clocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tune --clocks: every (work-group size, clock) scored; the fastest is at the highest clock; each
    energy is what predict --clock gives for that configuration; the shortlist sets nvml_gr_clock."""
    k = tmp_path / "k.cl"
    k.write_text(FMA_KERNEL)
    base = ["tune", "--kernel", str(k), "--gsize", "1048576", "--build-options", "-Dnr_inner=4096",
            "--profile", "a100-pcie", "--model", "none", "--max-wg", "128", "--clocks", "400:1400:500", "--json"]
    assert main([*base, "--objective", "time", "--top", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["configurations"] == 4 * 3 and doc["chosen"][0]["gr_clock_mhz"] == 1400.0
    assert main([*base, "--objective", "energy", "--top", "12"]) == 0
    chosen = json.loads(capsys.readouterr().out)["chosen"]
    assert sorted({c["gr_clock_mhz"] for c in chosen}) == [400.0, 900.0, 1400.0]
    c = chosen[0]
    assert main(["predict", "--kernel", str(k), "--gsize", str(c["gsize"][0]), "--lsize", str(c["lsize"][0]),
                 "--build-options", "-Dnr_inner=4096", "--profile", "a100-pcie", "--model", "none", "--clock",
                 str(c["gr_clock_mhz"]), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["predictions"][0]["analytical"]
    assert p["energy_j"] == pytest.approx(c["pred_energy_j"]) and p["time_us"] == pytest.approx(c["pred_us"])
    assert main([*base[:-1], "--objective", "energy", "--top", "2", "--format", "kernel-tuner"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert "nvml_gr_clock" in short["tune_params"] and "nvml_gr_clock ==" in short["restrictions"][0]
    assert main(["tune", "--kernel", str(k), "--gsize", "1048576", "--build-options", "-Dnr_inner=4096",
                 "--profile", "pocl-local", "--clocks", "400:1400:500"]) == 2
    assert "--clocks needs a GPU profile" in capsys.readouterr().err

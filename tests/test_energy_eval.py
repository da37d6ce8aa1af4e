"""Energy learning on imported Kernel Tuner rows and the energy figures of ``kernelcast evaluate``.

No energy meter exists on the development machines: the energies here are WRITTEN values (Kernel
Tuner caches written by the test with ``ps_energy`` / ``nvml_energy`` of a known law), and the
analytical energy model runs on a profile whose energy constants the test writes. The metric tests
check hand-computed answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from kernelcast.bench.kt_roundtrip import MATMUL  # the kernels the round-trip benchmark tunes
from kernelcast.train.evaluate_energy import shot_mask

from kernelcast.cli import main
from kernelcast.metrics import ranking_scores, top_k_share

ROOT = Path(__file__).resolve().parents[1]

VADD = """__kernel void vector_add(__global float *c, __global const float *a, __global const float *b, int n) {
    int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
"""


# ---------------------------------------------------------------------------------------------
# the metrics, on hand-computed examples


def test_top_k_share_hand_computed() -> None:
    true = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert top_k_share(true * 7, true, 3) == 1.0                       # same order
    assert top_k_share(-true, true, 3) == 0.0                          # reversed: {0,1,2} vs {3,4,5}
    # predicted best three are rows 0, 3, 1 -> two of the measured best three {0, 1, 2}
    assert top_k_share(np.array([1.0, 3.0, 9.0, 2.0, 8.0, 7.0]), true, 3) == pytest.approx(2 / 3)
    assert math.isnan(top_k_share(true, true, 7))                      # fewer rows than k
    assert top_k_share(np.array([1.0, np.nan, 2.0, 3.0]), np.array([1.0, 0.5, 3.0, 2.0]), 1) == 1.0


def test_ranking_scores_hand_computed() -> None:
    # group a: one adjacent swap among 5 -> rho = 1 - 6*2/(5*24) = 0.9; k = min(20, 5 // 2) = 2: the
    # predicted best two {0, 1} are the measured best two -> 100 %
    # group b: reversed 4 rows -> rho = -1; k = 2: predicted {3, 2} vs measured {0, 1} -> 0 %
    pred = np.array([1, 2, 4, 3, 5, 4, 3, 2, 1], dtype=float)
    true = np.array([1, 2, 3, 4, 5, 1, 2, 3, 4], dtype=float)
    groups = np.array(["a"] * 5 + ["b"] * 4)
    s = ranking_scores(pred, true, groups, top_k=20)
    assert s["groups"] == 2 and s["spearman_groups"] == 2
    assert s["spearman_mean"] == pytest.approx((0.9 - 1.0) / 2)
    assert s["top_k_share_pct"] == pytest.approx(50.0)
    assert s["k_min"] == s["k_max"] == 2


def test_shot_mask_counts() -> None:
    groups = np.array(["a"] * 48 + ["b"] * 10 + ["c"] * 1)
    m = shot_mask(groups, 10, seed=0)
    # round(4.8) = 5 of a, round(1.0) = 1 of b, the single row of c
    assert (m[:48].sum(), m[48:58].sum(), m[58:].sum()) == (5, 1, 1)
    assert (shot_mask(groups, 10, seed=0) == m).all()                  # seeded
    assert shot_mask(groups, 99, seed=0)[:48].sum() == 47              # never every row of a group


# ---------------------------------------------------------------------------------------------
# written caches with energy -> dataset -> train (energy head) and evaluate


def _time_ms(bx: int, by: int, tile: int, n: int) -> float:
    """The written time law (ms): small work-groups and large tiles are slow."""
    return (n / 128) ** 2 * (1.0 + 8.0 / (bx * by) + 0.5 * tile)


def _write_matmul_cache(path: Path, n: int, meter: str) -> int:
    cache = {}
    for bx in (4, 8, 16, 32):
        for by in (1, 2, 4, 8):
            for tile in (1, 2, 4):
                t = _time_ms(bx, by, tile, n)
                rec = {"block_size_x": bx, "block_size_y": by, "tile_size_x": tile, "time": t, "times": [t, t],
                       meter: 0.1 * t, "core_freq": 1400.0}          # 100 W x t (ms) = 0.1 t J
                cache[f"{bx},{by},{tile}"] = rec
    cache["64,8,4"] = {"block_size_x": 64, "block_size_y": 8, "tile_size_x": 4, "time": "InvalidConfig"}
    path.write_text(json.dumps({"device_name": "NVIDIA A100-SXM4-40GB", "kernel_name": "matmul",
                                "problem_size": [n, n], "tune_params_keys": ["block_size_x", "block_size_y",
                                                                             "tile_size_x"],
                                "tune_params": {}, "objective": "time", "cache": cache}))
    return 48


def _write_vadd_cache(path: Path, n: int) -> int:
    cache = {}
    for bx in range(16, 257, 16):
        t = n / 1e6 * (1.0 + 64.0 / bx)
        cache[str(bx)] = {"block_size_x": bx, "time": t, "nvml_energy": 0.25 * t, "nvml_power": 250.0}
    path.write_text(json.dumps({"device_name": "NVIDIA A100-SXM4-40GB", "kernel_name": "vector_add",
                                "problem_size": n, "tune_params_keys": ["block_size_x"],
                                "tune_params": {}, "objective": "time", "cache": cache}))
    return 16


def _energy_profile(tmp_path: Path) -> Path:
    """The local profile with energy constants WRITTEN here (not measured: no meter exists)."""
    d = json.loads((ROOT / "calib" / "profiles" / "pocl-local.json").read_text())
    for name, value, units in (("idle_power_w", 50.0, "W"), ("tdp_w", 250.0, "W"),
                               ("energy_per_op_fp32_fma_pj", 20.0, "pJ"), ("energy_per_op_fp32_add_pj", 10.0, "pJ"),
                               ("energy_per_op_int32_pj", 10.0, "pJ"), ("energy_per_access_dram_pj", 2000.0, "pJ")):
        d["values"][name] = {"value": value, "units": units, "source": "written by tests/test_energy_eval.py",
                             "r2": None, "notes": "test value, not a measurement"}
    p = tmp_path / "energy-profile.json"
    p.write_text(json.dumps(d))
    return p


@pytest.fixture(scope="module")
def energy_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    tmp = tmp_path_factory.mktemp("energy")
    (tmp / "mm.cl").write_text(MATMUL)
    (tmp / "vadd.cl").write_text(VADD)
    ds = tmp / "ds"
    rows = 0
    for n, meter in ((128, "ps_energy"), (256, "nvml_energy")):
        rows += _write_matmul_cache(tmp / f"mm{n}.json", n, meter)
        assert main(["dataset", "import-kt", str(tmp / f"mm{n}.json"), "--kernel", str(tmp / "mm.cl"), "--out", str(ds),
                     "--grid", "grid_div_x=block_size_x*tile_size_x", "--arg", f"n={n}"]) == 0
    for n in (1 << 20, 1 << 22):
        rows += _write_vadd_cache(tmp / f"vadd{n}.json", n)
        assert main(["dataset", "import-kt", str(tmp / f"vadd{n}.json"), "--kernel", str(tmp / "vadd.cl"),
                     "--out", str(ds), "--arg", f"n={n}"]) == 0
    return ds, _energy_profile(tmp), rows


def test_energy_head_trains_on_imported_rows(energy_dataset: tuple[Path, Path, int], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    ds, profile, rows = energy_dataset
    capsys.readouterr()
    out = tmp_path / "model"
    assert main(["train", "--kind", "tabular", "--data", str(ds), "--out", str(out), "--target", "energy",
                 "--profile", str(profile), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    # every ok row carries energy
    assert info["targets"] == ["energy"] and info["heads"]["energy"]["rows"] == rows == 128
    assert info["heads"]["energy"]["rows_with_analytical"] == rows       # the written profile has energy
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.tabular import TabularPredictor

    frame, _ = load_measured_frame(ds)
    pred = TabularPredictor.load(out).predict(frame).energy_j
    true = frame["energy_j"].to_numpy(dtype=float)
    # in-sample, the energy head reproduces the written energies within 2x on most rows
    assert np.mean(np.abs(np.log2(pred / true)) <= 1.0) >= 0.8


def test_evaluate_reports_energy_ranking(energy_dataset: tuple[Path, Path, int], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    ds, profile, rows = energy_dataset
    capsys.readouterr()
    code = main(["evaluate", "--data", str(ds), "--models", "analytical,tabular", "--profile", str(profile),
                 "--out", str(tmp_path / "ev"), "--folds", "2", "--energy-pcts", "10,50", "--no-plots", "--quiet",
                 "--json"])
    assert code == 0
    m = json.loads(capsys.readouterr().out)["energy"]
    assert m["rows"] == rows and m["problems"] == 4
    assert m["meters"] == ["nvml", "powersensor"]
    an = m["zero_shot"]["analytical"]
    assert an["groups"] == 4 and -1.0 <= an["spearman_mean"] <= 1.0
    assert an["k_min"] == 8 and an["k_max"] == 20                       # vadd: 16 // 2; matmul: min(20, 48 // 2)
    assert "tabular" in m["zero_shot"]                                  # two kernels: two folds, kernel-disjoint
    few = m["few_shot"]["models"]["tabular"]
    # measured rows: round(4.8) = 5 of each matmul cache, round(1.6) = 2 of each vadd cache
    assert few["10"]["measured_rows"] == 2 * 5 + 2 * 2
    assert few["50"]["measured_rows"] == 2 * 24 + 2 * 8
    # with half of every cache measured, the energy head orders the rest of each cache well: the written
    # energies are a smooth law of the block sizes and the tile
    assert few["50"]["spearman_mean"] > 0.8, few["50"]
    from kernelcast.train.evaluate_energy import energy_lines

    text = "\n".join(energy_lines(m))
    assert "energy (128 rows with measured energy, 4 problem(s)" in text and "50 % measured, tabular: rho 0." in text

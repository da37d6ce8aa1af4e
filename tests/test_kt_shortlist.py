"""``kernelcast tune --format kernel-tuner``: the shortlist as Kernel Tuner input. Kernel Tuner's own
search space (``kernel_tuner.searchspace.Searchspace``) must admit exactly the chosen configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernelcast.models.tune import kernel_tuner_shortlist

from kernelcast.cli import main

PROFILE = str(Path(__file__).resolve().parents[1] / "calib" / "profiles" / "pocl-local.json")


def test_shortlist_2d_with_power_caps_is_exactly_kernel_tuners_search_space() -> None:
    searchspace = pytest.importorskip("kernel_tuner.searchspace", reason="kernel-tuner is not installed")
    lsizes = [(16, 4), (8, 8), (32, 2), (16, 4)]
    caps = [150.0, 150.0, 200.0, 200.0]
    doc = kernel_tuner_shortlist("k", (1000, 500), lsizes, caps, [1.0, 2.0, 3.0, 4.0], [0.1, 0.2, None, 0.4],
                                 objective="pareto", profile="A100")
    assert doc["tune_params"] == {"block_size_x": [8, 16, 32], "block_size_y": [2, 4, 8],
                                  "nvml_pwr_limit": [150, 200]}
    assert [c["rank"] for c in doc["configurations"]] == [1, 2, 3, 4]
    assert doc["configurations"][2]["pred_energy_j"] is None
    # the cross product has 3 x 3 x 2 = 18 points; the restriction keeps the 4 chosen ones
    ss = searchspace.Searchspace(doc["tune_params"], doc["restrictions"], 1024)
    got = sorted(tuple(c) for c in ss.list)
    assert got == sorted([(16, 4, 150), (8, 8, 150), (32, 2, 200), (16, 4, 200)])


def test_tune_format_kernel_tuner_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "vadd.cl"
    src.write_text("__kernel void vadd(__global float *c, __global const float *a, int n) {\n"
                   "    int i = get_global_id(0); if (i < n) c[i] = a[i] * 2.0f;\n}\n")
    out = tmp_path / "sl.json"
    assert main(["tune", "--kernel", str(src), "--gsize", "4096", "--arg", "n=4096", "--top", "3", "--max-wg", "64",
                 "--profile", PROFILE, "--format", "kernel-tuner", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kernel_name"] == "vadd" and doc["problem_size"] == [4096] and len(doc["configurations"]) == 3
    assert set(doc["tune_params"]) == {"block_size_x"}
    assert all(c["block_size_x"] % 8 == 0 and c["block_size_x"] <= 64 for c in doc["configurations"])
    preds = [c["pred_us"] for c in doc["configurations"]]
    assert preds == sorted(preds)                                        # best first
    capsys.readouterr()
    # bad combinations: one line, exit 2, nothing written
    for extra in (["--json"], ["--measure-top", "2"], ["--out", str(tmp_path)]):
        argv = ["tune", "--kernel", str(src), "--gsize", "4096", "--profile", PROFILE, "--format", "kernel-tuner",
                *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1
    assert main(["tune", "--kernel", str(src), "--gsize", "4096", "--profile", PROFILE, "--out",
                 str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()

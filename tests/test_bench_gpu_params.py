"""bench/gpu_params.py: the per-parameter medians on a hand-made frame, and bad input."""

from __future__ import annotations

import pandas as pd
import pytest
from kernelcast.bench.gpu_params import main, param_reports


def test_per_parameter_medians_and_relative_effects():
    f = pd.DataFrame({
        "tp_block": [16, 16, 32, 32], "tp_only": [1, 1, 1, 1],
        "measured_us": [200.0, 220.0, 100.0, 120.0], "predicted_us": [100.0, 110.0, 100.0, 120.0],
        "compute_us": [1.0, 1.0, 2.0, 2.0], "memory_us": [5.0, 5.0, 6.0, 6.0], "latency_us": [0.0] * 4,
        "occupancy": [0.5, 0.5, 1.0, 1.0]})
    (rep,) = param_reports(f)            # a parameter of a single value is left out
    assert rep.name == "block" and [v.value for v in rep.values] == ["16", "32"]
    v16, v32 = rep.values
    assert (v16.rows, v16.measured_us, v16.predicted_us) == (2, 210.0, 105.0)
    # measured: block 16 is 1.91x the fastest value; predicted it is the fastest (the model misses the effect)
    assert v16.measured_rel == pytest.approx(210 / 110) and v16.predicted_rel == pytest.approx(1.0)
    assert v32.measured_rel == pytest.approx(1.0) and v32.predicted_rel == pytest.approx(110 / 105)
    assert v16.log2_ratio == pytest.approx(-1.0)
    assert v16.occupancy == 0.5 and v16.spearman is None       # two rows: no rank correlation


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--data", str(tmp_path), "--profile", "a100-pcie"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --data") and err.count("\n") == 1
    (tmp_path / "manifest.json").write_text("{}")
    assert main(["--data", str(tmp_path), "--profile", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.startswith("error: --profile")

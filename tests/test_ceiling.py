"""bench/ceiling.py: a dataset's configurations measured again and scored as a model's predictions.

The sampling takes whole problem groups, the scoring is evaluate's (a perfect prediction scores
zero error and top-1 everywhere, a constant factor is all offset), bad input is one line and exit 2,
and on this device a tiny dataset's rows measured again agree with the stored ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernelcast.bench.ceiling import _oof_columns, main, run, sample_rows, score

from kernelcast.errors import InputError


def _frame() -> tuple[pd.DataFrame, np.ndarray]:
    # kernel a: 2 problems of 3 configurations; kernel b: 1 problem of 4; kernel c: 2 rows only
    kid = ["a"] * 6 + ["b"] * 4 + ["c"] * 2
    groups = np.array(["a1"] * 3 + ["a2"] * 3 + ["b1"] * 4 + ["c1"] * 2, dtype=object)
    return pd.DataFrame({"kernel_id": kid}), groups


def test_sampling_takes_whole_groups_of_kernels_with_four_rows() -> None:
    frame, groups = _frame()
    rows = sample_rows(frame, groups, kernels=5, max_rows=12, seed=0)
    assert sorted(rows.tolist()) == list(range(10))            # c has 2 rows: never drawn
    capped = sample_rows(frame, groups, kernels=5, max_rows=4, seed=0)
    taken = groups[capped]
    for g in set(taken):                                        # whole groups only
        assert (taken == g).sum() == (groups == g).sum()
    assert sum(1 for g in set(taken) if g.startswith("a")) == 1  # a's second group would pass 4 rows
    assert "b1" in set(taken)                                   # a first group is taken even past the cap
    assert sample_rows(frame, groups, 1, 12, seed=3).tolist() == sample_rows(frame, groups, 1, 12, seed=3).tolist()


def test_scores_are_evaluates() -> None:
    frame, groups = _frame()
    true = np.array([10, 12, 15, 20, 22, 30, 5, 6, 7, 8, 1, 2], dtype=float)
    kid = frame["kernel_id"].to_numpy()
    one = np.ones(len(true))
    s = score(true.copy(), true, kid, groups, one)
    assert s["median_ape"] == 0 and s["mape"] == 0 and s["offset_floor_mape"] == 0 and s["shot3_mape"] == 0
    assert s["top1_pct"] == 100.0 and s["regret_geomean"] == 1.0 and s["tuning_groups"] == 4
    doubled = score(2 * true, true, kid, groups, one)           # a constant factor: all offset
    assert doubled["median_ape"] == pytest.approx(100.0)
    assert doubled["offset_floor_mape"] == pytest.approx(0.0) and doubled["shot1_mape"] == pytest.approx(0.0)
    assert doubled["top1_pct"] == 100.0
    swapped = true.copy()
    swapped[[0, 2]] = swapped[[2, 0]]                           # group a1 now picks its slowest
    s = score(swapped, true, kid, groups, one)
    assert s["top1_pct"] == 75.0 and s["offset_floor_mape"] > 0


def test_oof_columns_match_keys_of_a_union_evaluation(tmp_path: Path) -> None:
    pd.DataFrame({"row_key": ["0:k1", "1:k2"], "measured_us": [1.0, 2.0], "analytical_us": [1.5, 2.5],
                  "analytical_lo_us": [1.0, 1.0], "analytical_hi_us": [3.0, 3.0], "tabular_us": [1.1, 2.1]}
                 ).to_parquet(tmp_path / "oof.parquet")
    cols = _oof_columns(tmp_path / "oof.parquet", np.array(["k2", "k3", "k1"], dtype=object))
    assert set(cols) == {"analytical", "tabular"}
    np.testing.assert_allclose(cols["analytical"], [2.5, np.nan, 1.5])


@pytest.mark.parametrize("argv", [
    ["--data", "{tmp}/nothing"],
    ["--data", "{tmp}/ds", "--passes", "3"],
    ["--data", "{tmp}/ds", "--kernels", "0"],
    ["--data", "{tmp}/ds", "--min-time", "-1"],
    ["--data", "{tmp}/ds", "--rounds", "0"],
    ["--data", "{tmp}/ds", "--oof", "{tmp}/missing.parquet"],
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path: Path, argv: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    out = tmp_path / "out"
    code = main([a.format(tmp=tmp_path) for a in argv] + ["--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert not out.exists()


def test_a_dataset_of_another_device_is_refused(tmp_path: Path, device: object,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text(json.dumps({"device_identity": "some other GPU",
                                                                "device": {"name": "other"}}))
    assert main(["--data", str(tmp_path / "ds"), "--out", str(tmp_path / "out")]) == 2
    assert "not on this device" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_tiny_dataset_measured_again_agrees_with_itself(tmp_path: Path, harness: object) -> None:
    from kernelcast.datagen.dataset import DatasetWriter
    from kernelcast.datagen.generate import DatagenOptions, Generator, write_kernels
    from kernelcast.instrument.runner import TimingPolicy

    from kernelcast.schema import Kernel

    k = Kernel("__kernel void tsq(__global const float* a, __global float* b) {\n"
               "  int i = get_global_id(0);\n  b[i] = a[i] * a[i] + 1.0f;\n}", "tsq", dims=1, origin="test")
    policy = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02, max_repeats=50)
    opts = DatagenOptions(configs_per_kernel=2, lsizes_per_kernel=1, rebalance=None, sweeps_per_kernel=1,
                          lsizes_per_sweep=4, validity=False, activity=False, reference_every_s=0,
                          max_total_items=1 << 16, timing=policy)
    root = tmp_path / "ds"
    m = {"device_identity": harness.device.identity, "seed": 0, "schema_version": 2,  # type: ignore[attr-defined]
         "args_selection": "simple", "options": {"timing": {"seed": 0, "min_time_s": 0.02, "min_repeats": 5}}}
    with DatasetWriter(root, m) as w:
        Generator(harness, w, opts).run([k])
    write_kernels(root, [k])
    r = run(root, kernels=1, max_rows=12, passes=2, rounds=2, out=tmp_path / "out",
            device=harness.device.name)  # type: ignore[attr-defined]
    assert r["rows"] >= 4 and r["rows_remeasured"] == r["rows"]
    s = r["scores"]["remeasured vs stored"]
    assert s["rows"] == r["rows"] and s["median_abs_log2"] < 1.0    # within 2x of the stored time
    assert r["scores"]["pass 2 vs pass 1"]["median_abs_log2"] < 1.0
    table = pd.read_csv(tmp_path / "out" / "remeasured.csv")
    assert len(table) == r["rows"] and table["pass2_us"].gt(0).all()
    saved = json.loads((tmp_path / "out" / "ceiling.json").read_text())
    assert saved["rows"] == r["rows"] and saved["rounds"] == 2


# --split-half: the stored samples of an imported tuning cache split in two, no device

def test_half_medians_by_hand() -> None:
    from kernelcast.bench.ceiling import half_medians

    np.testing.assert_allclose(half_medians([1, 2, 3, 4, 5, 6]), [4, 3, 2, 5])      # odd, even, first, second
    np.testing.assert_allclose(half_medians([1, 9, 2, 8, 3]), [8.5, 2, 5, 5.5])       # the middle sample left out
    assert np.isnan(half_medians([1.0, 2.0, np.nan, -1.0, 3.0])).all()                # 3 usable samples
    assert np.isnan(half_medians(None)).all()


CONFIGS = [(b, t) for b in (32, 64, 128, 256) for t in (1, 2)]


def _kt_dataset(tmp_path: Path, noisy: bool, times_ms: list[float] | None = None) -> Path:
    """A Kernel Tuner cache of 8 configurations imported; ``times_ms``: each one's time (every
    sample alike), in the order of :data:`CONFIGS`."""
    import kernelcast.cli as cli

    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "k.cl").write_text("__kernel void scale(__global float *out, __global const float *in) {\n"
                                   "  int i = get_global_id(0);\n  out[i] = in[i] * (float)tile;\n}\n")
    cache = {}
    for i, (bx, tile) in enumerate(CONFIGS):
        t_ms = 1.0 + 0.25 * i if times_ms is None else times_ms[i]
        # noisy: the odd-numbered samples of the slowest configuration are the fastest of all
        runs = [t_ms, 0.5 if noisy and i == 7 else t_ms] * 3
        cache[f"{bx},{tile}"] = {"block_size_x": bx, "tile": tile, "time": float(np.mean(runs)), "times": runs}
    (tmp_path / "c.json").write_text(json.dumps({
        "device_name": "GPU-A", "kernel_name": "scale", "problem_size": [65536],
        "tune_params_keys": ["block_size_x", "tile"],
        "tune_params": {"block_size_x": [32, 64, 128, 256], "tile": [1, 2]},
        "objective": "time", "cache": cache}))
    ds = tmp_path / "ds"
    assert cli.main(["dataset", "import-kt", str(tmp_path / "c.json"), "--kernel", str(tmp_path / "k.cl"),
                     "--out", str(ds)]) == 0
    return ds


def test_split_half_of_steady_samples_is_perfect_and_of_a_flipped_one_is_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelcast.bench.ceiling import split_half

    steady = split_half(_kt_dataset(tmp_path / "a", noisy=False))
    assert steady["rows"] == steady["rows_split"] == 8 and steady["samples_median"] == 6
    for name in ("odd vs even samples", "second vs first half"):
        s = steady["scores"][name]
        assert s["median_ape"] == 0 and s["top1_pct"] == 100.0 and s["spearman_mean"] == pytest.approx(1.0)
    noisy = split_half(_kt_dataset(tmp_path / "b", noisy=True), out=tmp_path / "out")
    s = noisy["scores"]["odd vs even samples"]                  # the odd halves put the slowest first
    assert s["top1_pct"] == 0.0 and s["regret_geomean"] == pytest.approx(2.75)   # 2.75 ms for 1 ms
    assert s["spearman_mean"] == pytest.approx(1 - 6 * (7 ** 2 + 7) / (8 * (64 - 1)))  # one rank off by 7
    halves = pd.read_csv(tmp_path / "out" / "halves.csv")
    assert len(halves) == 8 and sorted(halves["odd_us"])[0] == pytest.approx(500.0)
    assert main(["--data", str(tmp_path / "b" / "ds"), "--split-half"]) == 0
    assert "odd vs even samples" in capsys.readouterr().out


def test_split_half_scores_a_gpu_evaluations_rows_of_this_dataset(tmp_path: Path) -> None:
    from kernelcast.bench.ceiling import split_half
    from kernelcast.datagen.frame import load_measured_frame

    ds = _kt_dataset(tmp_path, noisy=False)
    keys = load_measured_frame(ds)[0]["row_key"].astype(str).tolist()
    tag = f"{ds.parent.name}/{ds.name}"
    # the same keys under another dataset's name must not be read
    pd.DataFrame({"row_key": [f"{tag}:{k}" for k in keys[:4]] + [f"other/GPU:{k}" for k in keys[4:]],
                  "measured_us": 1.0, "analytical_us": 1000.0}).to_parquet(tmp_path / "oof.parquet")
    r = split_half(ds, oof=tmp_path / "oof.parquet")
    assert r["scores"]["analytical (OOF) vs stored"]["rows"] == 4
    assert r["scores"]["odd vs even, OOF rows"]["rows"] == 4


@pytest.mark.parametrize("extra", [["--passes", "2"], ["--kernels", "3"], ["--device", "cpu"], ["--rounds", "2"]])
def test_split_half_refuses_measuring_options(tmp_path: Path, extra: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.json").write_text("{}")
    assert main(["--data", str(tmp_path / "ds"), "--split-half", "--out", str(tmp_path / "out")] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --split-half measures nothing") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


# --against: another dataset's measurements of the same configurations as the prediction

def test_against_scores_another_measurement_of_the_same_configurations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelcast.bench.ceiling import against

    mine = _kt_dataset(tmp_path / "a", noisy=False)                     # 1.00, 1.25, ... 2.75 ms
    # the other setup: everything twice as slow, and its slowest configuration the fastest
    theirs = _kt_dataset(tmp_path / "b", noisy=False, times_ms=[2 * (1.0 + 0.25 * i) for i in range(7)] + [0.5])
    r = against(mine, theirs, out=tmp_path / "out")
    assert r["rows_matched"] == 8 and r["matched_on"] == ["block_size_x", "tile"]
    assert r["log2_other_over_data"]["median"] == pytest.approx(1.0)
    s = r["scores"]["other dataset vs stored"]
    assert s["top1_pct"] == 0.0 and s["regret_geomean"] == pytest.approx(2.75)
    assert s["spearman_mean"] == pytest.approx(1 - 6 * (7 ** 2 + 7) / (8 * (64 - 1)))
    assert len(pd.read_csv(tmp_path / "out" / "against.csv")) == 8
    same = against(mine, mine)["scores"]["other dataset vs stored"]
    assert same["median_ape"] == 0 and same["top1_pct"] == 100.0 and same["spearman_mean"] == pytest.approx(1.0)
    assert main(["--data", str(mine), "--against", str(theirs)]) == 0
    assert "other dataset vs stored" in capsys.readouterr().out


def test_against_matches_on_shared_tune_parameters_only_when_unambiguous() -> None:
    from kernelcast.bench.ceiling import match_rows

    a = pd.DataFrame({"tp_x": [1, 2, 3], "tp_y": [0, 0, 0]})
    b = pd.DataFrame({"tp_x": [3, 1, 9], "tp_z": [5, 5, 5]})
    cols, ia, ib = match_rows(a, b)
    assert cols == ["tp_x"] and ia.tolist() == [0, 2] and ib.tolist() == [1, 0]
    with pytest.raises(InputError, match="several rows of configuration 1"):
        match_rows(pd.DataFrame({"tp_x": [1, 1]}), b)            # y varied in --data, and only x is shared
    with pytest.raises(InputError, match="share no tune parameter"):
        match_rows(a, pd.DataFrame({"tp_q": [1]}))


@pytest.mark.parametrize("extra,msg", [
    (["--against", "OTHER", "--split-half"], "give --split-half or --against"),
    (["--against", "OTHER", "--passes", "2"], "--against measures nothing"),
    (["--against", "NOPE"], "not a dataset"),
])
def test_against_bad_input_is_one_line_exit_2_and_nothing_written(
        tmp_path: Path, extra: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    for d in ("ds", "other"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "manifest.json").write_text("{}")
    extra = [str(tmp_path / "other") if x == "OTHER" else str(tmp_path / "nope") if x == "NOPE" else x for x in extra]
    assert main(["--data", str(tmp_path / "ds"), "--out", str(tmp_path / "out")] + extra) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1 and not (tmp_path / "out").exists()

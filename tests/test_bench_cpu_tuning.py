"""The CPU tuning benchmark (``bench/cpu_tuning.py``): the replay of each searcher on hand-made
measured tables, the statistics of a run, the real guided run through a lookup seam, the choice of
suite instances and sweeps, a small real run on the OpenCL device, and the command's bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from kernelcast.bench import cpu_tuning as ct

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement, TimeStats
from tests.profiles import cpu_profile

LSIZES = [1, 2, 4, 8, 16, 32, 64, 128]
# measured times (us): the best is local size 32, 64 within 5 % of it, 16 within 10 %
TABLE = [900.0, 700.0, 400.0, 200.0, 108.0, 100.0, 104.0, 150.0]


def test_trace_stats_known_answers() -> None:
    times = [4.0, 2.0, 1.0, 1.02]
    s = ct.trace_stats([0, 1, 3, 2], times)
    assert s["reach_5"] == 3 and s["reach_1"] == 4          # 1.02 is within 5 % of 1.0 but not within 1 %
    assert s["frac_1"] == pytest.approx(0.25) and s["frac_3"] == pytest.approx(1 / 1.02)
    assert s["frac_5"] == s["frac_10"] == pytest.approx(1.0)   # a trace shorter than the budget keeps its best
    failed = ct.trace_stats([0, 1], [math.nan, 5.0, 1.0])
    assert failed["frac_1"] == 0.0 and failed["reach_5"] is None and failed["frac_3"] == pytest.approx(0.2)


def test_a_model_that_ranks_the_best_first_needs_one_measurement() -> None:
    pred = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 1.0, 2.0, 3.0])     # local size 32 predicted fastest
    r = ct.replay(TABLE, pred, LSIZES, seeds=5, budget=10)
    assert r["budget"] == 8 and r["within5_configurations"] == 2 and r["best_lsize"] == 32
    assert r["predicted_best_lsize"] == 32
    k = r["searchers"]["kernelcast"]
    assert [t["reach_5"] for t in k["traces"]] == [1] * 5 and [t["reach_1"] for t in k["traces"]] == [1] * 5
    assert k["median_frac_1"] == 1.0 and k["within5_at_1_pct"] == 100.0
    assert len(r["searchers"]["random"]["traces"]) == len(r["searchers"]["none"]["traces"]) == 5
    assert r["random_expected_reach_5"] == pytest.approx(9 / 3)


def test_another_measurement_as_the_model() -> None:
    again = np.array(TABLE) * 1.3
    again[5], again[4] = 140.0, 120.0          # the other run's best is 16, within 10 % here, not 5 %
    r = ct.replay(TABLE, np.ones(8), LSIZES, seeds=4, budget=8, extra={"reference": again})
    assert list(r["searchers"]) == ["kernelcast", "none", "random", "reference"]
    ref = r["searchers"]["reference"]
    assert [t["sequence"][0] for t in ref["traces"]] == [4] * 4
    assert ref["within5_at_1_pct"] == 0.0 and ref["median_frac_1"] == pytest.approx(100.0 / 108.0)
    o = ct.overall([r, ct.replay(TABLE, np.ones(8), LSIZES, seeds=4, budget=8)])
    assert o["reference"]["instances"] == 1 and o["random"]["instances"] == 2


def test_a_model_that_ranks_the_best_last_starts_at_the_worst() -> None:
    pred = 1e5 / np.array(TABLE)                  # the model's order is the measured order reversed
    r = ct.replay(TABLE, pred, LSIZES, seeds=3, budget=1)
    k = r["searchers"]["kernelcast"]
    assert [t["sequence"] for t in k["traces"]] == [[0]] * 3          # local size 1, the slowest
    assert k["median_reach_5"] is None and k["within5_at_10_pct"] == 0.0
    assert k["median_frac_1"] == pytest.approx(100.0 / 900.0)


def test_random_sampling_without_replacement() -> None:
    n = 8
    seqs = [ct.random_trace(n, n, s) for s in range(1000)]
    assert all(sorted(q) == list(range(n)) for q in seqs)        # every configuration once
    assert ct.random_trace(n, 3, 7) == ct.random_trace(n, n, 7)[:3]
    times = [2.0] * n
    times[5] = 1.0                                              # one good configuration among 8
    reach = [ct.trace_stats(q, times)["reach_5"] for q in seqs]
    assert max(reach) <= n and np.mean(reach) == pytest.approx((n + 1) / 2, abs=0.3)
    short = [ct.trace_stats(q[:2], times) for q in seqs]        # budget 2: reached in about 2 of 8 runs
    share = ct.summarize(short)["within5_at_3_pct"]
    assert share == pytest.approx(25.0, abs=4.0)
    assert ct.summarize(short)["median_reach_5"] is None        # most runs never get there: > budget


def test_overall_counts_a_run_that_never_reaches_as_budget_plus_one() -> None:
    def inst(reach: int | None) -> dict[str, object]:
        tr = {"sequence": [0], "reach_5": reach, "reach_1": reach,
              **{f"frac_{b}": 1.0 if reach else 0.5 for b in ct.FRAC_BUDGETS}}
        return {"budget": 4, "searchers": {s: {**ct.summarize([tr]), "traces": [tr]} for s in ct.SEARCHERS}}

    o = ct.overall([inst(2), inst(None), inst(1)])
    assert o["random"]["sum_median_reach_5"] == 2 + 5 + 1
    assert o["kernelcast"]["instances_median_reach_5"] == 2.0
    assert o["none"]["pooled_within5_at_3_pct"] == pytest.approx(200 / 3)


def _lookup_instance() -> ct.Instance:
    k = Kernel(source="__kernel void k(__global float *a) { a[get_global_id(0)] += 1.0f; }", name="k")
    inst = ct.Instance("k:n=128", k, (128,), [ArgBinding("a", "buffer", "float", 128)], list(LSIZES))
    inst.times = list(TABLE)
    return inst


def test_a_real_run_through_a_lookup_seam_is_the_replay() -> None:
    inst = _lookup_instance()
    calls: list[tuple[int, ...]] = []

    def lookup(kernel: Kernel, config: LaunchConfig) -> Measurement:
        assert config.lsize is not None
        calls.append(config.lsize)
        t = TABLE[LSIZES.index(config.lsize[0])]
        return Measurement(kernel.id, kernel.name, "lookup", config.gsize, config.lsize, [], "ok",
                           time=TimeStats.from_times([t, t, t]))

    pred = np.array([9.0, 8.0, 7.0, 6.0, 1.0, 2.0, 3.0, 4.0])       # 16 first: within 10 %, not 5 %
    c = ct.live_check(inst, pred, lookup, 4)
    assert c["sequence"] == c["replay_sequence"] and c["same_prefix"] == 4 and len(calls) == 4
    assert calls[0] == (16,) and c["live_us"][0] == pytest.approx(108.0)
    assert c["within5"] == c["replay_within5"]
    assert c["choice_over_best"] == pytest.approx(min(TABLE[i] for i in c["sequence"]) / 100.0)


def test_sweep_respects_the_device_and_divisibility() -> None:
    assert ct.sweep(384, 4096, 4096) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert ct.sweep(1024, 64, 4096) == [1, 2, 4, 8, 16, 32, 64]
    assert ct.sweep(1024, 4096, 32, lo=4) == [4, 8, 16, 32]


def test_eligible_suite_kernels_have_a_free_local_size() -> None:
    _, specs = ct.select(ct.DEFAULT_SUITE, None)
    ids = {s.id for s in specs}
    assert {"triad", "spmv-csr-scalar", "kmeans-assign", "md-lj"} <= ids
    assert not ids & {"reduction", "scan-totals", "scan-chunks"}       # their local size is a build constant


def test_a_small_real_run_on_the_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert ct.main(["--kernels", "kmeans-assign", "--sizes", "1", "--skip-sizes", "0", "--max-lsize", "8",
                    "--seeds", "2", "--check-budget", "2", "--out", str(out), "--quiet", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    (r,) = res["instances"]
    assert r["instance"] == "kmeans-assign:n=512" and r["configurations"] == 4     # local sizes 1, 2, 4, 8
    assert r["check"]["budget"] == 2 and len(r["check"]["sequence"]) == 2
    doc = json.loads((out / ct.RESULT).read_text())
    row = doc["instances"][0]
    assert [x["lsize"] for x in row["table"]] == [1, 2, 4, 8] and all(x["status"] == "ok" for x in row["table"])
    assert all(len(row["searchers"][s]["traces"]) == 2 for s in ct.SEARCHERS)
    assert doc["run"]["measurements"] >= 4
    # the stored table replays without measuring, with the same random traces
    prof = tmp_path / "cpu.json"
    cpu_profile().save(prof)
    assert ct.main(["--from", str(out / ct.RESULT), "--profile", str(prof), "--seeds", "2", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["instances"][0]
    assert again["searchers"]["random"] == {k: v for k, v in row["searchers"]["random"].items() if k != "traces"}
    assert ct.main(["--from", str(out / ct.RESULT), "--profile", str(prof), "--seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "kmeans-assign:n=512" in text and "real guided runs (seed 0, budget 2)" in text


@pytest.mark.parametrize("argv", [["--kernels", "nope"], ["--kernels", "reduction"],
                                  ["--min-lsize", "64", "--max-lsize", "8"], ["--profile", "/nonexistent.json"],
                                  ["--profile", "a100-pcie"],
                                  ["--from", "/nonexistent.json"], ["--from", "bogus.json"],
                                  ["--suite", "/nonexistent.json"], ["--out", "afile"], ["--reference", "bogus.json"],
                                  ["--from", "bogus.json", "--kernels", "triad"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bogus.json").write_text('{"benchmark": "other"}')
    (tmp_path / "afile").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert ct.main(argv + ["--out", "x"] if "--out" not in argv else argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--budget", "x"], ["--sizes", "0"], ["--skip-sizes", "-1"]])
def test_malformed_options_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        ct.main(argv)
    assert e.value.code == 2 and capsys.readouterr().err.count("\n") == 1

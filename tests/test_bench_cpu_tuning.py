"""The CPU tuning benchmark (``bench/cpu_tuning.py``): searches replayed on hand-made tables of
measured times with known answers, stored measurements scored end to end with a hand-made
profile, and its input checks."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
from kernelcast.bench import cpu_tuning as ct

from tests.profiles import cpu_profile

# measured times (us) per local size: the best is 256, 128 is within 5 % of it, nothing else
TIMES = {16: 300.0, 32: 200.0, 64: 150.0, 128: 104.0, 256: 100.0, 512: 130.0, 1024: 180.0}


def test_reach_and_best_after_known_answers() -> None:
    times = np.array([5.0, 2.0, np.nan, 1.0])
    good = times <= 1.05
    assert ct.reach([0, 1, 3, 2], good) == 3 and ct.reach([0, 1, 2], good) == 4     # never: past the end
    assert ct.best_after([0, 1, 3, 2], times, 1) == pytest.approx(1 / 5)
    assert ct.best_after([2, 1], times, 2) == pytest.approx(1 / 2)                   # the failed one is skipped
    assert ct.best_after([2], times, 1) == 0.0


def test_a_model_that_ranks_the_best_first_needs_one_measurement() -> None:
    preds = {s: t * 3.0 for s, t in TIMES.items()}              # off by 3x, right order
    res = ct.replay(TIMES, preds, seeds=5)
    assert res is not None and res["best"] == 256 and res["pick"] == 256 and res["within5"] == 2
    for run in res["searchers"]["kernelcast"]:
        assert run["order"][0] == 256 and run["reach_5"] == 1 and run["reach_1"] == 1 and run["frac_1"] == 1.0
    for seed, run in enumerate(res["searchers"]["random"]):    # Kernel Tuner's random_sample: a seeded order
        order = [res["lsizes"][i] for i in np.random.default_rng(seed).permutation(len(TIMES))]
        assert run["order"] == order
        assert run["reach_5"] == 1 + min(order.index(256), order.index(128))
        assert run["reach_1"] == 1 + order.index(256)
    # every searcher measures each configuration once
    for runs in res["searchers"].values():
        assert all(sorted(r["order"]) == sorted(TIMES) for r in runs)


def test_a_model_that_ranks_the_best_last_starts_there_and_recovers() -> None:
    preds = {s: 1.0 / t for s, t in TIMES.items()}              # the reverse order
    res = ct.replay(TIMES, preds, seeds=3, searchers=("kernelcast",))
    assert res is not None and res["pick"] == 16
    for run in res["searchers"]["kernelcast"]:
        assert run["order"][0] == 16 and run["reach_5"] > 1 and run["frac_1"] == pytest.approx(100 / 300)


def test_summary_and_pooled_figures() -> None:
    table = {"a": TIMES, "b": {64: 10.0, 256: 20.0}, "c": {64: 5.0}}   # c: one size, not a search
    preds = {"a": dict(TIMES), "b": {64: 1.0, 256: 2.0}, "c": {64: 1.0}}
    res = ct.score(table, preds, seeds=4)
    assert sorted(res["problems"]) == ["a", "b"]
    k = res["overall"]["kernelcast"]
    assert k["runs"] == 8 and k["median_to_5"] == 1 and k["within5_at_1_pct"] == 100.0
    assert k["sum_median_to_5"] == 2.0 and k["median_frac_1"] == 1.0
    r = res["problems"]["b"]["summary"]["random"]
    assert r["within5_at_3_pct"] == 100.0 and 1 <= r["median_to_5"] <= 2


def _write(d: Path, rows: list[dict]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_stored_measurements_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    src = "__kernel void k(__global const float *a, __global float *b) { size_t i = get_global_id(0); b[i] = a[i]; }"
    kern = {"source": src, "name": "k", "language": "opencl", "build_options": "", "dims": 1}
    args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": 65536, "value": None, "init": "random"},
            {"name": "b", "kind": "buffer", "dtype": "float", "count": 65536, "value": None, "init": "random"}]
    rows = [{"problem": "bundled:k:g=65536", "origin": "bundled", "kernel": kern, "gsize": [65536], "lsize": s,
             "args": args, "status": "ok", "time_us": t, "device": "dev"} for s, t in ((64, 30.0), (256, 20.0),
                                                                                      (1024, 25.0))]
    _write(tmp_path / "m", rows)
    # a hand-made profile in which only the per-work-group cost differs between local sizes: 1024 first
    import kernelcast.calib.profile as prof_mod
    monkeypatch.setattr(prof_mod, "load_profile", lambda name: cpu_profile(wg_overhead_us=0.5))
    out = tmp_path / "trace.json"
    assert ct.main(["--from", str(tmp_path / "m"), "--seeds", "3", "--json", "--out", str(out)]) == 0
    res = json.loads(capsys.readouterr().out)
    p = res["problems"]["bundled:k:g=65536"]
    assert p["best"] == 256 and p["pick"] == 1024 and p["lsizes"] == [64, 256, 1024]
    assert res["overall"]["random"]["runs"] == 3 and res["device"] == "dev"
    trace = json.loads(out.read_text())
    assert all(r["order"][0] == 1024 for r in trace["problems"]["bundled:k:g=65536"]["searchers"]["kernelcast"])


@pytest.mark.parametrize("argv", [[], ["--from", "/nonexistent"], ["--from", "M", "--seeds", "0"],
                                  ["--from", "M", "--searchers", "bogus"], ["--from", "M", "--profile", "/nope.json"],
                                  ["--from", "M", "--out", "M"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "M", [{"problem": "p", "origin": "bundled", "kernel": {"name": "k"}, "lsize": 64,
                             "time_us": 1.0}])
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) if not argv else contextlib.nullcontext():   # [] fails in argparse itself
        assert ct.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kernelcast: error:") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


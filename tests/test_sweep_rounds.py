"""Tuning sweeps and regime samples measured in interleaved rounds (``datagen --sweep-rounds``,
``--sample-rounds``): every round is a row of its own, journaled as it is measured; readers pool a
configuration's rounds into one row; a rerun measures only the rounds not stored."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from kernelcast.datagen.dataset import ROUND_SPREAD, pool_rounds, read_dataset, resolve_remeasured
from kernelcast.datagen.generate import DatagenOptions, run_datagen
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import Kernel

TRIAD = """__kernel void triad(__global const float* a, __global const float* b, __global float* c, const float s) {
  int i = get_global_id(0);
  c[i] = a[i] + s * b[i];
}"""


def _row(key: str, times: object, status: str = "ok", of: str | None = None, reason: str | None = None,
         energy: float | None = None) -> dict:
    t = json.loads(times) if isinstance(times, str) else list(np.asarray(times, dtype=float))
    return {"row_key": key, "status": status, "times_us": times, "time_median_us": float(np.median(t)),
            "time_min_us": min(t), "time_cv": 0.01, "repeats": len(t), "remeasure_of": of, "remeasure_reason": reason,
            "energy_j": energy}


def test_rounds_pool_into_the_first_row() -> None:
    df = pd.DataFrame([
        _row("a", np.array([10.0, 11.0, 12.0]), energy=1.0),            # parquet: an array
        _row("a~r2", "[20.0, 21.0]", of="a", reason="round", energy=3.0),  # journal: JSON text
        _row("a~r3", [10.0, 10.0], of="a", reason="round", energy=2.0),
        _row("b", [5.0], status="crash"), _row("b~r2", [5.0], of="b", reason="round"),
        _row("c", [7.0, 7.0]),
        _row("d", [1.0, 1.0]), _row("d~r2", [9.0], status="timeout", of="d", reason="round"),
    ])
    out = pool_rounds(df).set_index("row_key")
    assert list(out.index) == ["a", "b", "c", "d"]                      # the round rows are gone
    assert out.loc["a", "time_median_us"] == 11.0 and out.loc["a", "repeats"] == 7
    assert out.loc["a", "time_min_us"] == 10.0 and out.loc["a", "time_rounds"] == 3
    assert out.loc["a", "energy_j"] == 2.0                              # the median over the rounds
    assert out.loc["a", "time_cv"] > 0.3                                # the samples of all rounds
    assert out.loc["c", "time_median_us"] == 7.0 and out.loc["c", "time_rounds"] == 1
    assert out.loc["d", "time_median_us"] == 1.0 and out.loc["d", "time_rounds"] == 1   # a failed round: not pooled
    assert np.isnan(out.loc["b", "time_rounds"])
    # the rules for noise, load and drift apply to the pooled row as to any other
    noisy = pd.concat([df, pd.DataFrame([_row("c~n1", [6.0, 6.0], of="c", reason="noise")])], ignore_index=True)
    noisy.loc[noisy["row_key"] == "c", "time_cv"] = 0.5
    res = resolve_remeasured(noisy).set_index("row_key")
    assert res.loc["c", "time_median_us"] == 6.0 and res.loc["a", "time_median_us"] == 11.0
    # but a configuration pooled from several rounds keeps its pool against one window measured
    # again for noise or drift, although pooling across phases gives the pool the larger CV; a
    # window measured again for drift replaces the drifted first window in the pool
    for reason, median in (("noise", 11.0), ("drift", 10.0)):
        again = pd.concat([df, pd.DataFrame([_row(f"a~{reason[0]}1", [3.0, 3.0], of="a", reason=reason)])],
                          ignore_index=True)
        res = resolve_remeasured(again).set_index("row_key")
        assert res.loc["a", "time_median_us"] == median and res.loc["a", "time_rounds"] == 3
        assert res.loc["a", "remeasured"]
    assert pool_rounds(again).set_index("row_key").loc["a", "repeats"] == 6    # [3, 3] + [20, 21] + [10, 10]


def test_a_fast_window_does_not_outvote_the_rounds() -> None:
    """ds8s's pa_blocked_scale at 1104/1104: a first window of 2,112 us, rounds at 2,885, 2,926 and
    9,084 us, and the first window measured again for drift at 115 us, with 30-90x the launches of
    any other in its 0.1-s budget. Pooled by raw samples it read 115 us; each window weighing the
    same, the pool's median lies among the rounds."""
    df = pd.DataFrame([
        _row("a", [2112.0] * 48),
        _row("a~r2", [2885.0] * 35, of="a", reason="round"),
        _row("a~r3", [2926.0] * 35, of="a", reason="round"),
        _row("a~r4", [9084.0] * 12, of="a", reason="round"),
        _row("a~d1", [114.5] * 874, of="a", reason="drift"),
    ])
    res = resolve_remeasured(df).set_index("row_key")
    assert res.loc["a", "time_median_us"] == pytest.approx((2885.0 + 2926.0) / 2)
    assert res.loc["a", "time_rounds"] == 4 and res.loc["a", "repeats"] == 874 + 35 + 35 + 12
    assert res.loc["a", "time_min_us"] == 114.5
    # how far apart the four windows were: the middle half of log2 [114.5, 2885, 2926, 9084]
    q1, q3 = np.percentile(np.log2([114.5, 2885.0, 2926.0, 9084.0]), [25, 75])
    assert res.loc["a", "time_rounds_spread"] == pytest.approx(q3 - q1) and q3 - q1 > ROUND_SPREAD


def _options(rounds: int, samples: int = 1, sample_rounds: int = 1, sweeps: int = 1,
             max_rounds: int = 1) -> DatagenOptions:
    """Datagen options of these tests: no further rounds for configurations whose rounds disagree
    unless ``max_rounds`` asks for them (the counts of rounds below are exact)."""
    return DatagenOptions(configs_per_kernel=samples, lsizes_per_kernel=1, rebalance=None, validity=False,
                          max_total_items=1 << 16, reference_every_s=0, sweeps_per_kernel=sweeps, lsizes_per_sweep=3,
                          sweep_rounds=rounds, sample_rounds=sample_rounds, activity=False, site_counts=False,
                          max_rounds=max_rounds,
                          timing=TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=10, max_time_s=2))


def test_rounds_disagree_by_the_middle_half_of_the_windows() -> None:
    from kernelcast.datagen.generate import ROUND_SPREAD, Generator

    g = Generator.__new__(Generator)                   # only its stored rows are used
    g.stored = {"a~r2": {"status": "ok", "time_median_us": 10.0}, "a~r3": {"status": "ok", "time_median_us": 10.5},
                "a~r4": {"status": "timeout", "time_median_us": None},
                "b~r2": {"status": "ok", "time_median_us": 20.0}, "b~r3": {"status": "ok", "time_median_us": 12.0}}
    a = {"row_key": "a", "status": "ok", "time_median_us": 10.2}
    assert g.round_windows(a, 4) == [10.2, 10.0, 10.5]                  # the failed round is no window
    assert not g.rounds_disagree(a, 4)
    b = {"row_key": "b", "status": "ok", "time_median_us": 10.0}
    # windows 10, 20, 12: quartiles of their log2 span log2(16 / 11) = 0.54 > 0.2
    assert g.rounds_disagree(b, 3) and ROUND_SPREAD == 0.2
    assert not g.rounds_disagree(b, 1)                                  # one window: nothing to compare
    # one slow window among five that agree: the middle half does not see it
    g.stored.update({f"c~r{i}": {"status": "ok", "time_median_us": v} for i, v in ((2, 10.1), (3, 30.0), (4, 9.9),
                                                                                 (5, 10.0))})
    assert not g.rounds_disagree({"row_key": "c", "status": "ok", "time_median_us": 10.05}, 5)


def test_configurations_whose_rounds_disagree_get_more_rounds(tmp_path, device, monkeypatch) -> None:
    """Every configuration's rounds made to disagree: the sweep's three local sizes get rounds 3
    and 4 after their two (--max-rounds 4), interleaved, and readers pool all four; a rerun with the
    same options measures nothing; without disagreement no round is added."""
    import kernelcast.datagen.generate as gen

    k = Kernel(TRIAD, "triad", dims=1)
    root = tmp_path / "ds"
    monkeypatch.setattr(gen, "ROUND_SPREAD", -1.0)
    first = run_datagen([k], root, device, _options(2, max_rounds=4), meter="none", timeout_s=30, corpus="test",
                        progress=False)
    raw = read_dataset(root, resolve=False)
    sweep = raw[(raw["pass"] == "sweep") & raw["remeasure_of"].isna() & (raw["status"] == "ok")]
    rounds = raw[raw["remeasure_reason"] == "round"]
    assert len(sweep) == 3 and first.summary.rounds == 3 * 3
    assert sorted(rounds["row_key"]) == sorted(f"{key}~r{n}" for key in sweep["row_key"] for n in (2, 3, 4))
    order = list(raw["row_key"])                       # round 3 of every size before any round 4
    assert max(order.index(f"{key}~r3") for key in sweep["row_key"]) < \
        min(order.index(f"{key}~r4") for key in sweep["row_key"])
    pooled = read_dataset(root)
    assert (pooled[pooled["pass"] == "sweep"]["time_rounds"] == 4).all()
    again = run_datagen([k], root, device, _options(2, max_rounds=4), meter="none", timeout_s=30, corpus="test",
                        progress=False)
    assert again.summary.rows_new == 0 and again.summary.rounds == 0
    monkeypatch.setattr(gen, "ROUND_SPREAD", 100.0)
    calm = run_datagen([k], tmp_path / "calm", device, _options(2, max_rounds=4), meter="none", timeout_s=30,
                       corpus="test", progress=False)
    assert calm.summary.rounds == 3


def test_datagen_measures_sweeps_in_rounds_and_a_rerun_adds_only_missing_ones(tmp_path, device) -> None:
    k = Kernel(TRIAD, "triad", dims=1)
    root = tmp_path / "ds"
    first = run_datagen([k], root, device, _options(2), meter="none", timeout_s=30, corpus="test", progress=False)
    raw = read_dataset(root, resolve=False)
    sweep = raw[(raw["pass"] == "sweep") & raw["remeasure_of"].isna() & (raw["status"] == "ok")]
    rounds = raw[raw["remeasure_reason"] == "round"]
    assert len(sweep) == 3 and first.summary.rounds == 3
    assert sorted(rounds["row_key"]) == sorted(f"{key}~r2" for key in sweep["row_key"])
    assert set(rounds["pass"]) == {"sweep"} and set(rounds["problem_id"]) == set(sweep["problem_id"])
    assert not raw["remeasure_reason"].isin(["noise", "load"]).any() or \
        not raw[raw["remeasure_reason"].isin(["noise", "load"])]["remeasure_of"].isin(sweep["row_key"]).any()

    # a third round asked for later: the stored rows and rounds are kept, only the new round is measured
    again = run_datagen([k], root, device, _options(3), meter="none", timeout_s=30, corpus="test", progress=False)
    assert again.summary.rows_new == 0 and again.summary.rounds == 3
    raw = read_dataset(root, resolve=False)
    assert (raw["remeasure_reason"] == "round").sum() == 6 and raw["row_key"].is_unique
    df = read_dataset(root)
    pooled = df[df["pass"] == "sweep"]
    assert len(pooled) == 3 and (pooled["time_rounds"] == 3).all()
    firsts = raw[raw["row_key"].isin(pooled["row_key"])].set_index("row_key")["repeats"]
    extra = raw[raw["remeasure_reason"] == "round"].groupby("remeasure_of")["repeats"].sum()
    assert (pooled.set_index("row_key")["repeats"] == firsts + extra.reindex(firsts.index)).all()
    assert len(df[df["pass"] != "sweep"]) == 1


def test_datagen_measures_a_kernels_samples_in_rounds(tmp_path, device) -> None:
    """--sample-rounds 3: the kernel's regime samples measured once each, then twice more one after
    the other; no sweep; every sample pooled from 3 rounds, none measured again for noise."""
    k = Kernel(TRIAD, "triad", dims=1)
    root = tmp_path / "ds"
    run = run_datagen([k], root, device, _options(4, samples=3, sample_rounds=3, sweeps=0), meter="none",
                      timeout_s=30, corpus="test", progress=False)
    raw = read_dataset(root, resolve=False)
    firsts = raw[(raw["pass"] == "sample") & raw["remeasure_of"].isna() & (raw["status"] == "ok")]
    rounds = raw[raw["remeasure_reason"] == "round"]
    assert len(firsts) == 3 and run.summary.rounds == 6
    assert sorted(rounds["row_key"]) == sorted(f"{key}~r{n}" for key in firsts["row_key"] for n in (2, 3))
    assert set(rounds["pass"]) == {"sample"} and not rounds["sweep"].any()
    assert not raw["remeasure_reason"].isin(["noise", "load"]).any()
    # the rounds of one configuration come after the kernel's other samples (interleaved)
    order = list(raw["row_key"])
    assert max(order.index(key) for key in firsts["row_key"]) < min(order.index(key) for key in rounds["row_key"])
    df = read_dataset(root)
    assert len(df) == 3 and (df["time_rounds"] == 3).all() and (df["pass"] == "sample").all()


@pytest.mark.parametrize("option", ["--sweep-rounds", "--sample-rounds", "--max-rounds"])
@pytest.mark.parametrize("value", ["0", "-1", "x", "33"])
def test_bad_rounds_is_exit_2(tmp_path, option, value, capsys) -> None:
    from kernelcast.cli import main

    assert main(["datagen", "--corpus", "bundled", "--out", str(tmp_path / "ds"), option, value]) == 2
    err = capsys.readouterr().err
    assert option in err and err.count("\n") == 1
    assert not (tmp_path / "ds").exists()


def test_progress_counts_rounds_and_what_a_kernel_skips(tmp_path, device, monkeypatch) -> None:
    """The bar's unit is one measurement (a first or a round): its total is planned with the
    rounds, a kernel that fails to build is counted as done, and the bar ends at its total, so a
    rerun that only adds rounds gets an honest rate and ETA."""

    import kernelcast.datagen.generate

    bars = []

    class Bar:
        def __init__(self, total=0, **kw):
            self.total, self.n, self.updates = total, 0, []
            bars.append(self)

        def update(self, n=1):
            self.n += n
            self.updates.append(n)

        def refresh(self):
            pass

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(kernelcast.datagen.generate, "tqdm", Bar)   # the name datagen imported
    broken = Kernel("__kernel void broken(__global float* a) { a[get_global_id(0)] = undeclared; }", "broken", dims=1)
    kernels = [Kernel(TRIAD, "triad", dims=1), broken]
    opts = _options(3, samples=2, sample_rounds=2)
    run = run_datagen(kernels, tmp_path / "ds", device, opts, meter="none", timeout_s=30, corpus="test")
    bar = bars[-1]
    assert bar.total == 2 * (2 * 2 + 3 * 3) and bar.n == bar.total
    assert run.summary.rounds == 2 + 3 * 2
    assert bar.updates.count(1) >= 2 + 3 + 2 + 6      # the triad's firsts and rounds, one at a time
    # a rerun measures nothing new, and still walks the bar to its end
    run_datagen(kernels, tmp_path / "ds", device, opts, meter="none", timeout_s=30, corpus="test")
    assert bars[-1].n == bars[-1].total == bar.total

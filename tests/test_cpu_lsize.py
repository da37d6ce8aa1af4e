"""The CPU local-size benchmark (``bench/cpu_lsize.py``): its scoring on a hand-made table of
measured times, its split, its input checks, and the analytical model's pick of a local size with
a hand-made CPU profile."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from kernelcast.bench import cpu_lsize as cl

from tests.profiles import cpu_profile

# three problems of two kernels: measured times (us) per local size
TABLE = {
    "p1": {16: 120.0, 64: 100.0, 256: 104.0, 1024: 150.0},
    "p2": {16: 90.0, 64: 80.0, 256: 60.0, 1024: 61.0},
    "p3": {16: 50.0, 64: 55.0, 256: math.nan, 1024: 40.0},     # 256 failed
}
KEYS = {"p1": "bundled:a", "p2": "bundled:a", "p3": "suite:b"}


def test_score_problem_known_answers() -> None:
    # the model thinks 1024 fastest on p1: regret 150 / 100
    s = cl.score_problem("p1", "k", TABLE["p1"], {16: 4.0, 64: 3.0, 256: 2.0, 1024: 1.0})
    assert s is not None
    assert (s.best, s.pick) == (64, 1024)
    assert s.regret == pytest.approx(1.5) and not s.within
    assert s.fixed[256] == pytest.approx(1.04) and s.fixed[64] == pytest.approx(1.0)
    assert s.fixed[128] != s.fixed[128]          # not measured: nan
    # a pick within 5 % of the best counts; the failed local size is never picked nor the best
    s3 = cl.score_problem("p3", "k", TABLE["p3"], {16: 3.0, 64: 3.0, 256: 0.5, 1024: 2.9})
    assert s3 is not None and s3.lsizes == [16, 64, 1024]
    assert (s3.best, s3.pick, s3.regret, s3.within) == (1024, 1024, 1.0, True)
    assert math.isnan(s3.fixed[256])
    # ties go to the smaller local size; fewer than two measured sizes: no score
    s2 = cl.score_problem("p2", "k", TABLE["p2"], {16: 1.0, 64: 2.0, 256: 1.0, 1024: 1.0})
    assert s2 is not None and s2.pick == 16 and s2.regret == pytest.approx(1.5)
    assert cl.score_problem("x", "k", {64: 1.0, 128: math.nan}, {64: 1.0, 128: 1.0}) is None


def test_score_table_totals_and_split() -> None:
    preds = {"p1": {16: 2.0, 64: 1.0, 256: 1.5, 1024: 3.0},        # picks 64: regret 1
             "p2": {16: 1.0, 64: 2.0, 256: 3.0, 1024: 4.0},        # picks 16: regret 1.5
             "p3": {16: 2.0, 64: 3.0, 256: 1.0, 1024: 1.0}}        # 256 not measured: picks 1024, regret 1
    res = cl.score_table(TABLE, preds, KEYS, seed=0)
    a = res["all"]
    assert a["problems"] == 3
    assert a["within_pct"] == pytest.approx(200 / 3)
    assert a["median_regret"] == pytest.approx(1.0)
    assert a["geomean_regret"] == pytest.approx(1.5 ** (1 / 3))
    # fixed 256 only where it was measured: p1 1.04, p2 1.0
    assert a["fixed256_problems"] == 2
    assert a["fixed256_median_regret"] == pytest.approx(1.02)
    assert a["fixed256_within_pct"] == pytest.approx(100.0)
    assert a["fixed64_median_regret"] == pytest.approx(80 / 60)      # 1.0, 80/60, 55/40
    assert a["picks"] == {"16": 1, "64": 1, "1024": 1}
    assert a["bests"] == {"64": 1, "256": 1, "1024": 1}
    # the split keeps a kernel's problems together, and the halves add up to all
    halves = {p["kernel"]: p["half"] for p in res["problems"]}
    assert set(halves.values()) == {"design", "check"}
    assert res["design"]["problems"] + res["check"]["problems"] == 3
    assert all(p["half"] == halves[p["kernel"]] for p in res["problems"])


def test_kernel_split_is_seeded_and_halves() -> None:
    keys = [f"k{i}" for i in range(9)]
    a, b = cl.kernel_split(keys, 1), cl.kernel_split(reversed(keys), 1)
    assert a == b
    assert sum(v == "design" for v in a.values()) == 5
    assert any(cl.kernel_split(keys, s) != a for s in range(2, 6))


def test_valid_lsizes_divide_and_respect_the_device() -> None:
    assert cl.valid_lsizes(96, 4096, 4096) == [1, 2, 4, 8, 16, 32]
    assert cl.valid_lsizes(65536, 256, 4096) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert cl.valid_lsizes(65536, 4096, 128, [16, 64, 256]) == [16, 64]


def _write(out: Path, rows: list[dict[str, object]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / cl.MEASUREMENTS).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"truncated')


def test_foreign_lines_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, [{"problem": "p", "lsize": 64}])
    assert cl.main(["--from", str(tmp_path)]) == 2
    assert "not this benchmark's measurements" in capsys.readouterr().err


def test_scores_stored_measurements_without_a_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = "__kernel void k(__global const float *a, __global float *b) { size_t i = get_global_id(0); b[i] = a[i]; }"
    kern = {"source": src, "name": "k", "language": "opencl", "build_options": "", "dims": 1}
    args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": 65536, "value": None, "init": "random"},
            {"name": "b", "kind": "buffer", "dtype": "float", "count": 65536, "value": None, "init": "random"}]
    rows = [{"problem": "bundled:k:g=65536", "origin": "bundled", "kernel": kern, "gsize": [65536], "lsize": s,
             "args": args, "status": "ok", "time_us": t, "load_avg_1m": 2.5}
            for s, t in ((64, 30.0), (256, 20.0), (1024, 25.0))]
    _write(tmp_path, rows)
    assert len(cl.read_measurements(tmp_path)) == 3          # the truncated last line is dropped
    assert cl.main(["--from", str(tmp_path), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    p = res["problems"][0]
    assert p["best"] == 256 and p["lsizes"] == [64, 256, 1024]
    assert p["regret"] == pytest.approx({64: 1.5, 256: 1.0, 1024: 1.25}[p["pick"]])
    assert res["load_avg_1m"] == {"problems": 1, "mean": 2.5, "min": 2.5, "max": 2.5}


def test_load_average_is_one_value_per_problem() -> None:
    rows = [{"problem": "a", "lsize": 16, "load_avg_1m": 1.0}, {"problem": "a", "lsize": 64, "load_avg_1m": 1.0},
            {"problem": "b", "lsize": 16, "load_avg_1m": 4.0}, {"problem": "c", "lsize": 16}]
    assert cl.load_summary(rows) == {"problems": 2, "mean": 2.5, "min": 1.0, "max": 4.0}
    assert cl.load_summary([{"problem": "c", "lsize": 16}]) is None       # lines written without it


@pytest.mark.parametrize("argv", [[], ["--out", "x", "--from", "y"], ["--from", "/nonexistent"],
                                  ["--out", "x", "--sizes", "a"], ["--out", "x", "--min-lsize", "3"],
                                  ["--out", "x", "--rounds", "0"], ["--from", "x", "--again", "/nonexistent"],
                                  ["--out", "x", "--suite", "/nonexistent.json"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert cl.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_stability_of_two_runs_and_their_combination() -> None:
    first = {"p1": {64: 100.0, 256: 110.0}, "p2": {64: 50.0, 256: 40.0}}
    second = {"p1": {64: 120.0, 256: 100.0}, "p2": {64: 52.0, 256: 40.0}}
    preds = {"p1": {64: 1.0, 256: 2.0}, "p2": {64: 2.0, 256: 1.0}}      # picks 64, then 256
    st = cl.stability(first, second, preds, {"p1": "a", "p2": "b"})
    assert st["problems"] == 2
    # p1: regret 1.0 then 1.2; p2: 1.0 both times
    assert st["regret_first_median"] == pytest.approx(1.0)
    assert st["regret_second_median"] == pytest.approx(1.1)
    assert st["within_second_pct"] == pytest.approx(50.0) and st["same_verdict_pct"] == pytest.approx(50.0)
    assert st["regret_abs_change_median"] == pytest.approx(0.1)
    assert st["same_best_pct"] == pytest.approx(50.0)
    # the second run's best as a pick on the first: p1 picks 256 (regret 1.1), p2 256 (1.0)
    assert st["second_run_as_pick_within_pct"] == pytest.approx(50.0)
    assert st["second_run_as_pick_median_regret"] == pytest.approx(1.05)
    comb = cl.combined_table([first, second])
    assert comb["p1"][64] == pytest.approx(math.sqrt(100.0 * 120.0))
    assert math.isnan(cl.combined_table([{"p": {64: math.nan}}, {"p": {64: math.nan}}])["p"][64])


ELEMENTWISE = ("__kernel void add(__global const float *a, __global const float *b, __global float *c) {\n"
               "  size_t i = get_global_id(0); c[i] = a[i] + b[i]; }\n")
TREE = ("__kernel void tree(__global const float *a, __global float *out, __local float *l) {\n"
        "  int lid = get_local_id(0); l[lid] = a[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);\n"
        "  for (int s = get_local_size(0) / 2; s > 0; s >>= 1) {\n"
        "    if (lid < s) l[lid] += l[lid + s];\n"
        "    barrier(CLK_LOCAL_MEM_FENCE); }\n"
        "  if (lid == 0) out[get_group_id(0)] = l[0]; }\n")


def _rows(src: str, name: str, local: bool) -> list[dict[str, object]]:
    g = 65536
    kern = {"source": src, "name": name, "language": "opencl", "build_options": "", "dims": 1}
    rows = []
    for s in (16, 64, 256, 1024):
        args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": g, "value": None, "init": "random"}]
        if local:
            args += [{"name": "out", "kind": "buffer", "dtype": "float", "count": g, "value": None, "init": "random"},
                     {"name": "l", "kind": "local", "dtype": "float", "count": s, "value": None, "init": "random"}]
        else:
            args += [{"name": n, "kind": "buffer", "dtype": "float", "count": g, "value": None, "init": "random"}
                     for n in ("b", "c")]
        rows.append({"problem": name, "origin": "bundled", "kernel": kern, "gsize": [g], "lsize": s, "args": args,
                     "status": "ok", "time_us": 1.0})
    return rows


def test_pick_with_a_hand_made_cpu_profile() -> None:
    # per-work-group cost only: fewer, larger groups are cheaper, the pick is the largest size
    prof = cpu_profile(wg_overhead_us=0.5, barrier_ns=2.0, barrier_wi_ns=2.0)
    p = cl.predictions(_rows(ELEMENTWISE, "add", False), prof)["add"]
    assert min(p, key=lambda s: p[s]) == 1024
    assert p[16] - p[1024] == pytest.approx((65536 / 16 - 65536 / 1024) * 0.5e-6 * 1e6, rel=0.05)
    # a tree reduction: log2(L) barriers, each a pass over the group's L work-items, so a barrier
    # costs each work-item more the larger the group, and the smallest group wins where the
    # per-group cost is small
    light = cpu_profile(wg_overhead_us=0.005, barrier_ns=2.0, barrier_wi_ns=2.0)
    t = cl.predictions(_rows(TREE, "tree", True), light)["tree"]
    assert min(t, key=lambda s: t[s]) == 16
    assert t[16] < t[64] < t[256] < t[1024]
    # ... and not the smallest where a work-group costs far more than its barriers (0.5 us x 4,096
    # groups of 16)
    heavy = cl.predictions(_rows(TREE, "tree", True), prof)["tree"]
    assert min(heavy, key=lambda s: heavy[s]) == 256 and heavy[16] > 2 * heavy[256]

"""The project's suite measured for real on the local OpenCL device, and checked against NumPy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kernelcast.bench.suite.manifest import load_manifest
from kernelcast.bench.suite.reference import REFERENCES, Expected, compare, expected_outputs, verify_instance
from kernelcast.bench.suite.run import COLUMNS, measure_suite, summarize
from kernelcast.instrument.runner import TimingPolicy

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "kernelcast" / "suite.json"
FAST = TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=20, max_time_s=2.0)


@pytest.fixture(scope="module")
def suite():
    return load_manifest(SUITE)


def test_measure_a_few_instances(suite, harness):
    ids = ["triad", "reduction", "spmv-csr-scalar"]
    df = measure_suite(suite, harness, FAST, progress=False, ids=ids, max_sizes=2)
    assert list(df.columns) == list(COLUMNS)
    # triad sweeps four local sizes at each problem size
    assert list(df["kernel"]) == ["triad"] * 8 + ["reduction", "reduction", "spmv-csr-scalar", "spmv-csr-scalar"]
    assert sorted(df.loc[df["kernel"] == "triad", "local_items"].unique()) == [32, 64, 128, 256]
    assert (df["status"] == "ok").all(), df[["label", "status", "reason"]]
    assert (df["median_us"] > 0).all() and (df["repeats"] >= 3).all()
    assert (df["min_us"] <= df["median_us"]).all() and df["energy_j"].isna().all()
    red = df[df["kernel"] == "reduction"]
    assert red["n"].nunique() == 2 and red["global_items"].nunique() == 1       # fixed global size
    tri = df[df["kernel"] == "triad"]
    assert list(tri["global_items"]) == list(tri["n"])                          # global size follows n
    args = json.loads(df.iloc[0]["args"])
    assert [a["name"] for a in args] == ["lhs", "rhs", "dst", "scale", "length"]
    assert args[3]["value"] == 1.75 and args[4]["value"] == int(df.iloc[0]["n"])
    s = summarize(df)
    assert list(s.index) == ids and list(s["ok"]) == [8, 2, 2]
    # every instance got a counting launch on its inputs: triad has no loop (its bounds check never
    # leaves early), the CSR row loop has its trips
    tri = [json.loads(c) for c in df.loc[df["kernel"] == "triad", "site_counts"]]
    assert all(not any(k.startswith("trip_l") for k in c) and set(c.values()) <= {0.0} for c in tri)
    csr = [json.loads(c) for c in df.loc[df["kernel"] == "spmv-csr-scalar", "site_counts"]]
    assert all(any(k.startswith("trip_l") and v > 0 for k, v in c.items()) for c in csr)


def test_failures_are_rows_not_dropped(harness, tmp_path):
    (tmp_path / "k.cl").write_text(
        "__kernel void kc_t_copy(__global const float *a, __global float *b, const int n) {"
        " int i = get_global_id(0); if (i < n) b[i] = a[i]; }\n")
    doc = {"name": "fails", "version": 1, "kernels": [
        {"id": "too-big-group", "file": "k.cl", "kernel": "kc_t_copy", "sizes": [8192],
         "gsize": "n", "lsize": "n",                                  # beyond the device's work-group limit
         "args": [{"name": "a", "buffer": "float", "count": "n"}, {"name": "b", "buffer": "float", "count": "n"},
                  {"name": "n", "scalar": "int", "value": "n"}]},
        {"id": "ok", "file": "k.cl", "kernel": "kc_t_copy", "sizes": [256], "gsize": "n", "lsize": 64,
         "args": [{"name": "a", "buffer": "float", "count": "n"}, {"name": "b", "buffer": "float", "count": "n"},
                  {"name": "n", "scalar": "int", "value": "n"}]},
    ]}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    s = load_manifest(tmp_path / "m.json")
    s.kernels[0].lsize = ["n * 1024"]                                  # > 4096 on every device we know
    s.kernels[0].gsize = ["n * 1024"]
    df = measure_suite(s, harness, FAST, progress=False)
    assert list(df["kernel"]) == ["too-big-group", "ok"]
    assert df.iloc[0]["status"] == "invalid_config" and df.iloc[0]["reason"]
    assert np.isnan(df.iloc[0]["median_us"])
    assert df.iloc[1]["status"] == "ok"


def test_generation_failure_is_a_row(harness, suite):
    spec = suite.kernel("spmv-csr-scalar")
    broken = load_manifest(SUITE).select(["spmv-csr-scalar"])
    broken.kernels[0].args[0].count = "7"                             # contradicts the generated matrix
    df = measure_suite(broken, harness, FAST, progress=False, sizes=spec.sizes[:1])
    assert len(df) == 1 and df.iloc[0]["status"] == "invalid_config"
    assert "args[0] (nz_values).count" in df.iloc[0]["reason"]


@pytest.mark.parametrize("kid", ["triad", "reduction", "spmv-csr-scalar"])
def test_numerical_check(suite, harness, kid):
    for n in suite.kernel(kid).sizes[:2]:
        check = verify_instance(suite.kernel(kid).instance(n, suite.name), harness)
        assert check.ok, str(check)


def test_every_suite_kernel_has_a_reference_and_passes_it(suite, harness):
    failures = []
    for spec in suite.kernels:
        assert spec.kernel in REFERENCES, spec.kernel
        check = verify_instance(spec.instance(spec.sizes[0], suite.name), harness)
        if not check.ok:
            failures.append(str(check))
    assert not failures, "\n".join(failures)


def test_compare_catches_wrong_results(suite):
    inst = suite.kernel("triad").instance(suite.kernel("triad").sizes[0])
    exp = expected_outputs(inst)["dst"]
    good = exp.values.copy()
    assert compare("dst", good, exp) is None
    bad = good.copy()
    bad[123] += 0.01
    assert "1/" in (compare("dst", bad, exp) or "")
    assert compare("dst", good[:-1], exp) == f"dst: {len(good) - 1} values, expected {len(good)}"
    labels = Expected(np.arange(1000), rtol=0, atol=0, mismatch_ok=1e-3)
    one_off = np.arange(1000)
    one_off[5] = 0
    assert compare("label", one_off, labels) is None
    one_off[6] = 0
    assert (compare("label", one_off, labels) or "").startswith("label: 2/1000 values differ")


_COPY = ("__kernel void kc_t_scale(__global const float *a, __global float *b, const int n) {"
         " int i = get_global_id(0); if (i < n) b[i] = 2.0f * a[i]; }\n")


def _sweep_manifest(tmp_path: Path) -> Path:
    (tmp_path / "k.cl").write_text(_COPY)
    doc = {"name": "sweep", "version": 1, "kernels": [
        {"id": "scale", "file": "k.cl", "kernel": "kc_t_scale", "sizes": [8192, 32768], "gsize": "n",
         "lsizes": [16, 64, 128],
         "args": [{"name": "a", "buffer": "float", "count": "n"}, {"name": "b", "buffer": "float", "count": "n"},
                  {"name": "n", "scalar": "int", "value": "n"}]}]}
    p = tmp_path / "m.json"
    p.write_text(json.dumps(doc))
    return p


def test_bench_sweep_tuning_figures_and_measured_reuse(device, tmp_path, capsys):
    """A local-size sweep gets per-size tuning figures; ``--measured`` reuses the first run's
    measurements exactly and refuses a file that does not match the suite."""
    import pandas as pd

    import kernelcast.cli as cli

    m = _sweep_manifest(tmp_path)
    common = ["bench", "--suite", str(m), "--profile", "pocl-local", "--device", device.spec, "--meter", "none"]
    assert cli.main([*common, "--out", str(tmp_path / "r1")]) == 0
    first = pd.read_csv(tmp_path / "r1" / "results.csv")
    assert len(first) == 6 and (first["status"] == "ok").all()
    assert sorted(first["local_items"].unique()) == [16, 64, 128]
    tab = pd.read_csv(tmp_path / "r1" / "table.csv")
    assert int(tab.loc[tab["kernel"] == "scale", "tuning_groups"].iloc[0]) == 2
    top1 = float(tab.loc[tab["kernel"] == "scale", "analytical_top1"].iloc[0])
    assert top1 in (0.0, 50.0, 100.0)
    assert "Local-size sweeps" in (tmp_path / "r1" / "REPORT.md").read_text()
    capsys.readouterr()

    # a file from before counts were recorded: the reuse measures them, and predicts as the first run did
    older = tmp_path / "older.csv"
    first.drop(columns=["site_counts"]).to_csv(older, index=False)
    assert cli.main([*common, "--out", str(tmp_path / "r2"), "--measured", str(older)]) == 0
    again = pd.read_csv(tmp_path / "r2" / "results.csv")
    pd.testing.assert_frame_equal(again[["label", "median_us", "analytical_us", "site_counts"]],
                                  first[["label", "median_us", "analytical_us", "site_counts"]])
    assert "reused from" in (tmp_path / "r2" / "REPORT.md").read_text()
    capsys.readouterr()

    def refused(out: str, measured: Path, text: str) -> None:
        assert cli.main([*common, "--out", str(tmp_path / out), "--measured", str(measured)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and text in err[0], err
        assert not (tmp_path / out).exists()

    partial = tmp_path / "partial.csv"
    first.iloc[:4].to_csv(partial, index=False)
    refused("r3", partial, "scale n=32768 lsize=64 was not measured there")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    refused("r4", binary, "not a bench results.csv")
    (tmp_path / "k.cl").write_text(_COPY.replace("2.0f", "3.0f"))      # the kernel changed since
    refused("r5", tmp_path / "r1" / "results.csv", "another source of the kernel")


def test_local_size_variants_are_measured_in_pooled_rounds(suite, harness):
    exact = TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=3, max_time_s=2.0)
    once = measure_suite(suite, harness, exact, progress=False, ids=["triad", "reduction"], max_sizes=1, rounds=1,
                         counts=False)
    thrice = measure_suite(suite, harness, exact, progress=False, ids=["triad", "reduction"], max_sizes=1, rounds=3,
                           counts=False)
    assert list(once["label"]) == list(thrice["label"]) and (thrice["status"] == "ok").all()
    tri = thrice["kernel"] == "triad"
    assert (once["repeats"] == 3).all()
    assert (thrice.loc[tri, "repeats"] == 9).all()              # the samples of three rounds, pooled
    assert (thrice.loc[~tri, "repeats"] == 3).all()             # one variant: nothing to interleave


def test_pooled_rounds_weigh_each_ok_round_the_same():
    from kernelcast.instrument.runner import pool_rounds

    from kernelcast.schema import Measurement, TimeStats

    def m(times, status="ok", energy=None):
        t = TimeStats.from_times(times) if times else None
        return Measurement("k", "k", "dev", (64,), (8,), [], status, time=t, energy_j=energy, wall_s=1.0)

    p = pool_rounds([m([1.0, 2.0], energy=1.0), m([3.0, 4.0, 5.0], energy=3.0), m(None, "crash")])
    # two samples of each: [1, 2] and the 25 % / 75 % quantiles of the second, [3, 5]
    assert p.status == "ok" and p.time.repeats == 5 and p.time.median_us == 2.5 and p.energy_j == 2.0
    assert p.time.times_us == [1.0, 2.0, 3.0, 5.0] and p.time.min_us == 1.0
    assert p.wall_s == 2.0
    # a fast phase fits 30x the launches into its window: one window of it against three slower ones
    fast = pool_rounds([m([115.0] * 900), m([2900.0] * 30), m([2950.0] * 30), m([9000.0] * 11)])
    assert fast.time.median_us == pytest.approx(2925.0) and fast.time.repeats == 971 and fast.time.min_us == 115.0
    assert pool_rounds([m(None, "timeout"), m(None, "crash")]).status == "timeout"   # none ok: the first
    assert pool_rounds([m([7.0, 9.0])]).time.median_us == 8.0

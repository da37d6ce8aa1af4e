"""Dataset store, prompt, validity and datagen end to end (real PoCL), including a kill and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from kernelcast.datagen.dataset import JOURNAL, KILL_AFTER_ENV, DatasetMismatch, DatasetWriter, read_dataset, row_key
from kernelcast.datagen.prompt import render_prompt


def _row(i: int) -> dict:
    return {"row_key": f"k{i}", "kernel_id": "x", "status": "ok", "time_median_us": float(i), "gsize": [i],
            "args": [{"name": "a"}], "times_us": [1.0, 2.0]}


def test_writer_journal_shards_and_dedup(tmp_path):
    m = {"device_identity": "dev", "seed": 0, "schema_version": 1, "args_selection": "simple"}
    with DatasetWriter(tmp_path, m, shard_rows=4) as w:
        for i in range(10):
            assert w.append(_row(i))
        assert not w.append(_row(3))                      # duplicate key refused
    shards = sorted((tmp_path / "shards").glob("*.parquet"))
    assert len(shards) == 3                               # 4 + 4 + 2 (on close)
    df = read_dataset(tmp_path)
    assert sorted(df["row_key"]) == sorted(f"k{i}" for i in range(10))
    assert json.loads(df.loc[df.row_key == "k1", "args"].iloc[0]) == [{"name": "a"}]
    # resume: keys are known, a torn last journal line (kill mid-write) is dropped
    with DatasetWriter(tmp_path, m, shard_rows=100) as w:
        assert len(w) == 10 and "k5" in w
        w.append(_row(10))
        w._journal.write('{"row_key": "k11", "stat')    # simulate a kill in the middle of a write
        w._journal.flush()
        w._journal.close()
    w2 = DatasetWriter(tmp_path, m)
    assert len(w2) == 11 and "k11" not in w2
    w2.append(_row(11))
    w2.close()
    assert len(read_dataset(tmp_path)) == 12
    assert json.loads((tmp_path / "manifest.json").read_text())["resumed"] == 2


def test_shard_written_but_journal_not_reset_duplicates_nothing(tmp_path):
    m = {"seed": 0}
    w = DatasetWriter(tmp_path, m, shard_rows=1000)
    for i in range(3):
        w.append(_row(i))
    journal = (tmp_path / JOURNAL).read_text()
    w.compact()
    w.close()
    (tmp_path / JOURNAL).write_text(journal)               # crash between shard rename and journal reset
    assert len(read_dataset(tmp_path)) == 3
    w = DatasetWriter(tmp_path, m)
    assert len(w) == 3 and (tmp_path / JOURNAL).read_text() == ""
    w.close()


def test_resume_refuses_another_device(tmp_path):
    DatasetWriter(tmp_path, {"device_identity": "A", "seed": 0}).close()
    with pytest.raises(DatasetMismatch, match="device_identity"):
        DatasetWriter(tmp_path, {"device_identity": "B", "seed": 0})


def test_row_key_depends_on_config():
    a = [{"name": "x", "kind": "buffer", "dtype": "float", "count": 64, "value": None}]
    k1 = row_key("k", (64,), (32,), a)
    assert k1 == row_key("k", (64,), (32,), a)
    assert k1 != row_key("k", (128,), (32,), a) != row_key("k", (64,), (64,), a)


def test_prompt_is_llmperf_template_word_for_word():
    args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": 1024, "value": None},
            {"name": "tmp", "kind": "local", "dtype": "float", "count": 64, "value": None},
            {"name": "n", "kind": "scalar", "dtype": "int", "count": None, "value": "1024"}]
    p = render_prompt("kernel void f() {}\n", args, [1024], [64], {"a": "global"})
    assert p == (
        "Predict time for the following OpenCL kernel:\n"
        "kernel void f() {}\n"
        "Given input:\n"
        "Argument at position 0 is a, which is global buffer of type float with size 1024\n"
        "Argument at position 1 is tmp, which is local buffer of type float with size 64\n"
        "Argument at position 2 is n, which is private scalar of type int with value 1024\n"
        "Given kernel are executed with global size equals cl::NDRange(1024), "
        "local work-group size equals cl::NDRange(64)"
    )
    assert "cl::NDRange(64, 8)" in render_prompt("k", [], [64, 8], [8, 8])


def test_validity_checks(harness):
    from kernelcast.datagen.validity import check_validity

    from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

    def cfg(*args):
        return LaunchConfig((64,), (32,), list(args))

    a_in = ArgBinding("a", "buffer", "float", 64)
    a_out = ArgBinding("b", "buffer", "float", 64)
    good = Kernel("__kernel void g(__global const float* a, __global float* b) { int i = get_global_id(0); "
                  "b[i] = a[i] * 2.0f; }", "g")
    assert check_validity(harness, good, cfg(a_in, a_out)).status == "ok"
    const = Kernel("__kernel void c(__global const float* a, __global float* b) { b[get_global_id(0)] = 3.0f; }", "c")
    v = check_validity(harness, const, cfg(a_in, a_out))
    assert v.status == "invalid_output" and "input-insensitive" in v.reason
    none = Kernel("__kernel void z(__global const float* a, __global float* b) { if (a[0] > 2.0f) b[0] = 1.0f; }",
                  "z")
    v = check_validity(harness, none, cfg(a_in, a_out))
    assert v.status == "invalid_output" and "no output" in v.reason
    racy = Kernel("__kernel void r(__global const float* a, __global float* b, __global int* c) {"
                  " int t = atomic_inc(c); b[get_global_id(0)] = a[get_global_id(0)] + (float)t; }", "r")
    v = check_validity(harness, racy, cfg(a_in, a_out, ArgBinding("c", "buffer", "int", 1, init="zeros")))
    # the order in which work-items take tickets is up to the device: nondeterministic or not
    assert v.status in ("ok", "invalid_output")
    if v.status == "invalid_output":
        assert "nondeterministic" in v.reason


CHEAP = """
__kernel void cheap_add(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
__kernel void cheap_scale(__global float* x, float s, int n) {
  int i = get_global_id(0);
  if (i < n) x[i] = x[i] * s + 1.0f;
}
__kernel void cheap_loop(__global const float* a, __global float* out, int k) {
  int i = get_global_id(0);
  float acc = 0.0f;
  for (int j = 0; j < 4; j++) acc += a[i] * (float)j;
  out[i] = acc;
}
"""


def _datagen(corpus, out, *extra):
    return [sys.executable, "-m", "kernelcast.cli", "datagen", "--corpus", str(corpus), "--out", str(out),
            "--configs-per-kernel", "8", "--lsizes-per-kernel", "2", "--min-time", "0", "--repeats", "2",
            "--max-items", "65536", "--meter", "none", "--quiet", *extra]


def test_datagen_end_to_end_with_kill_and_resume(tmp_path, device):
    src = tmp_path / "src"
    src.mkdir()
    (src / "cheap.cl").write_text(CHEAP)
    corpus = tmp_path / "corpus"
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "corpus", "ingest", str(src), "--out", str(corpus)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "ds"
    # first run: killed with SIGKILL right after its sixth row is in the journal (the writer's kill
    # point: deterministic, unlike a timer racing a fast run)
    p = subprocess.run(_datagen(corpus, out), env={**os.environ, KILL_AFTER_ENV: "6"}, capture_output=True,
                       text=True, timeout=300, start_new_session=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    before = read_dataset(out)
    assert len(before) == 6                               # every complete journal line survives the kill
    # second run: resumes, measures the rest, duplicates nothing
    r = subprocess.run(_datagen(corpus, out), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "already stored" in r.stdout
    df = read_dataset(out)
    assert df["row_key"].is_unique
    assert set(before["row_key"]) < set(df["row_key"])    # the killed run had not finished
    rows = df[df["pass"] != "validity"]
    validity = df[df["pass"] == "validity"]
    assert len(validity) == 3 and set(validity["status"]) <= {"ok", "invalid_output"}
    ok_kernels = set(validity.loc[validity.status == "ok", "kernel_name"])
    assert {"cheap_add", "cheap_scale"} <= ok_kernels
    assert set(rows["kernel_name"]) == ok_kernels
    assert (rows["status"] == "ok").all()
    assert rows.groupby("kernel_name").size().min() >= 8
    assert set(rows["regime"]) <= {"idle", "under", "full"}
    for _, row in rows.iterrows():
        assert row["global_items"] == row["n_wg"] * row["local_items"]
        assert row["repeats"] >= 2 and len(row["times_us"]) == row["repeats"]
        assert row["time_median_us"] == pytest.approx(float(np.median(row["times_us"])))
    # a third run has nothing left to do
    r = subprocess.run(_datagen(corpus, out), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " 0 new" in r.stdout.replace("rows: 0 new", " 0 new"), r.stdout
    assert len(read_dataset(out)) == len(df)
    s = subprocess.run([sys.executable, "-m", "kernelcast.cli", "dataset", str(out), "--plot-iqr", "auto",
                        "--plot-out", str(tmp_path / "iqr.png")], capture_output=True, text=True, timeout=120)
    assert "kernels: 3" in s.stdout
    if (df["pass"] == "iqr").any():        # IQR rebalancing ran (it depends on the measured times)
        assert s.returncode == 0 and (tmp_path / "iqr.png").stat().st_size > 0, s.stderr
    else:
        assert s.returncode == 2 and "no IQR rebalancing rows to plot" in s.stderr, s.stderr


def test_schema_1_dataset_reads_with_null_columns_and_refuses_resume(tmp_path):
    """A dataset written by schema 1 (no problem_id / sweep / active_fraction / bytes_touched):
    read_dataset gives the new columns as nulls; datagen into it stops with one line, exit 2,
    before touching anything."""
    from kernelcast.datagen.dataset import V2_COLUMNS

    old = tmp_path / "old"
    with DatasetWriter(old, {"device_identity": "A", "seed": 0, "schema_version": 1}) as w:
        for i in range(3):
            w.append(_row(i))
    df = read_dataset(old)
    assert len(df) == 3
    for col in V2_COLUMNS:
        assert col in df.columns and df[col].isna().all()
    before = {p.name: p.read_bytes() for p in old.rglob("*") if p.is_file()}
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "datagen", "--corpus", "bundled", "--out", str(old),
                        "--quiet"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema version 1" in lines[0] and "Traceback" not in r.stderr
    assert {p.name: p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    with pytest.raises(DatasetMismatch, match="schema_version"):
        DatasetWriter(old, {"device_identity": "A", "seed": 0, "schema_version": 2})


def test_datagen_sweeps_problem_groups_and_card(tmp_path, device):
    """Tuning sweeps on the real device: every sweep is one problem (one problem_id) measured with
    four local sizes; regime samples get their own problem ids; evaluate's tuning basis finds the
    groups; the card counts them."""
    from kernelcast.datagen.card import write_card
    from kernelcast.train.evaluate import tuning_basis

    src = tmp_path / "src"
    src.mkdir()
    (src / "cheap.cl").write_text(CHEAP)
    corpus = tmp_path / "corpus"
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "corpus", "ingest", str(src), "--out", str(corpus)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "ds"
    r = subprocess.run(_datagen(corpus, out, "--sweeps-per-kernel", "3", "--lsizes-per-sweep", "4",
                                "--rebalance", "none", "--configs-per-kernel", "4"),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    df = read_dataset(out)
    rows = df[(df["pass"] != "validity") & (df["status"] == "ok")]
    sweep = rows[rows["sweep"].astype(bool)]
    assert set(sweep["pass"]) == {"sweep"} and rows["problem_id"].notna().all()
    groups = sweep.groupby(["kernel_name", "problem_id"])
    assert groups.ngroups == 3 * sweep["kernel_name"].nunique()
    for _, g in groups:
        assert len(g) == 4 and g["lsize"].map(tuple).nunique() == 4
        assert g["global_items"].nunique() == 1
    assert rows["active_fraction"].notna().all() and (rows["bytes_touched"] > 0).all()
    basis = tuning_basis(rows)
    assert basis.basis == "problem" and basis.problem_groups == groups.ngroups
    from kernelcast.datagen.frame import load_measured_frame

    frame, _ = load_measured_frame(out)                      # what models train and evaluate on
    assert set(frame["row_key"]) == set(rows["row_key"])
    assert tuning_basis(frame).problem_groups == groups.ngroups
    card, facts = write_card(out)
    assert facts["sweeps"]["groups"] == groups.ngroups
    text = card.read_text()
    assert f"tuning groups (one problem, >= 2 local sizes): {groups.ngroups}" in text
    assert "## Noise" in text and (out / "card-time.png").stat().st_size > 0

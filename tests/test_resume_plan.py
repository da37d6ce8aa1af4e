"""A datagen killed with SIGKILL at fixed points and rerun ends with exactly the configurations of
an uninterrupted run with the same seed (none missing, none extra, none twice), leaves no process
behind, and every planned configuration ends as one row, measured or ``skipped`` (real PoCL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kernelcast.datagen.corpus_store import write_corpus
from kernelcast.datagen.dataset import KILL_AFTER_ENV, read_dataset
from kernelcast.datagen.generate import PLAN_FILE, DatagenOptions, run_datagen

from kernelcast.schema import Kernel

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "rp_saxpy": "__kernel void rp_saxpy(__global const float* x, __global float* y, float a, int n) {\n"
                "  int i = get_global_id(0);\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n",
    "rp_square": "__kernel void rp_square(__global const float* x, __global float* y, int n) {\n"
                 "  int i = get_global_id(0);\n  if (i < n) y[i] = x[i] * x[i];\n}\n",
    "rp_gather": "__kernel void rp_gather(__global const int* idx, __global const float* src, __global float* dst) {\n"
                 "  int i = get_global_id(0);\n  dst[i] = src[idx[i]];\n}\n",
}


def _corpus(tmp: Path) -> Path:
    recs = [Kernel(source=s, name=n, dims=1, origin=f"resume/{n}").to_dict() for n, s in SOURCES.items()]
    write_corpus(tmp / "corpus", recs, {"kind": "corpus"})
    return tmp / "corpus"


def configurations(ds: Path) -> Counter:
    """The dataset's planned configurations as measured or skipped: first rows (no re-measurements,
    rounds or IQR additions), by kernel, selection, pass, global and local size."""
    d = read_dataset(ds, resolve=False)
    if "remeasure_of" in d.columns:
        d = d[d["remeasure_of"].isna()]
    d = d[d["pass"].isin(["sample", "sweep", "validity"])]
    def size(v: object) -> str | None:
        return None if v is None or isinstance(v, float) else json.dumps([int(x) for x in v])  # type: ignore[union-attr]

    return Counter((r["kernel_id"], r["selection"], r["pass"], size(r["gsize"]), size(r["lsize"]))
                   for r in d.to_dict("records"))


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_kill_and_resume_measures_the_uninterrupted_configurations(tmp_path: Path, device) -> None:
    corpus = _corpus(tmp_path)

    def cmd(out: Path) -> list[str]:
        return [sys.executable, "-m", "kernelcast", "datagen", "--corpus", str(corpus), "--out", str(out),
                "--configs-per-kernel", "3", "--lsizes-per-kernel", "1", "--sweeps-per-kernel", "1",
                "--lsizes-per-sweep", "2", "--sweep-rounds", "1", "--rebalance", "none", "--no-activity",
                "--no-site-counts", "--repeats", "2", "--min-time", "0", "--max-items", "16384", "--meter", "none",
                "--device", device.spec, "--seed", "7", "--quiet"]

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(KILL_AFTER_ENV, None)
    ref = tmp_path / "ref"
    r = subprocess.run(cmd(ref), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    want = configurations(ref)
    assert want and max(want.values()) == 1
    # the gather kernel fails simple selection (random indices past src) and is kept by the index rule
    sel = {k[0]: k[1] for k in want if k[2] == "sample"}
    assert len(sel) == len(SOURCES)
    assert sorted(set(sel.values())) == ["index", "simple"]

    out = tmp_path / "killed"
    kills = 0
    for n in (2, 3, 4):           # rows appended by each run before it kills itself
        p = subprocess.Popen(cmd(out), env={**env, KILL_AFTER_ENV: str(n)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            p.communicate(timeout=900)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        assert p.returncode == -signal.SIGKILL
        kills += 1
        t0 = time.monotonic()
        while _alive(p.pid) and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert not _alive(p.pid), "a process datagen started outlived its SIGKILL"
    r = subprocess.run(cmd(out), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    got = configurations(out)
    assert kills == 3
    assert got == want            # 0 missing, 0 extra, 0 duplicated
    plans = [json.loads(x) for x in (out / PLAN_FILE).read_text().splitlines()]
    assert len({(p["kernel_id"], p["selection"]) for p in plans}) == len(plans) == len(SOURCES)


def test_a_run_killed_after_its_first_row_resumes(tmp_path: Path, device) -> None:
    """Killed right after its first row (a validity row: the dataset has none of a measured row's
    columns), the rerun resumes and measures every planned configuration once."""
    corpus = _corpus(tmp_path)
    out = tmp_path / "ds"
    cmd = [sys.executable, "-m", "kernelcast", "datagen", "--corpus", str(corpus), "--out", str(out),
           "--configs-per-kernel", "2", "--lsizes-per-kernel", "1", "--sweeps-per-kernel", "0", "--rebalance",
           "none", "--no-activity", "--no-site-counts", "--repeats", "2", "--min-time", "0", "--max-items", "16384",
           "--meter", "none", "--device", device.spec, "--seed", "7", "--quiet", "--limit", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(KILL_AFTER_ENV, None)
    r = subprocess.run(cmd, env={**env, KILL_AFTER_ENV: "1"}, capture_output=True, text=True, timeout=900)
    assert r.returncode == -signal.SIGKILL
    assert set(read_dataset(out, resolve=False)["pass"]) == {"validity"}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    got = configurations(out)
    assert max(got.values()) == 1 and sum(1 for k in got if k[2] == "sample") == 2


def test_pruned_configurations_are_rows(tmp_path: Path, device) -> None:
    """With no time allowed per launch every measured configuration is too slow: the first of a
    local size is measured, the others become ``skipped`` rows; a rerun adds nothing."""
    corpus = _corpus(tmp_path)
    from kernelcast.datagen.corpus_store import read_corpus

    kernels = [k for k in read_corpus(corpus) if k.name == "rp_square"]
    opts = DatagenOptions(configs_per_kernel=4, lsizes_per_kernel=1, sweeps_per_kernel=1, lsizes_per_sweep=3,
                          sweep_rounds=1, rebalance=None, activity=False, site_counts=False, args="simple",
                          max_total_items=16384, max_config_time_s=0.0, reference_every_s=0.0)
    opts.timing.min_time_s = 0.0
    opts.timing.min_repeats = 2
    run = run_datagen(kernels, tmp_path / "ds", device, opts, meter="none", timeout_s=30.0, corpus="t",
                      progress=False)
    d = read_dataset(tmp_path / "ds", resolve=False)
    first = d[d["remeasure_of"].isna()] if "remeasure_of" in d.columns else d
    samples = first[first["pass"] == "sample"]
    sweeps = first[first["pass"] == "sweep"]
    assert len(samples) == 4 and len(sweeps) == 3
    assert (samples["status"] == "ok").sum() == 1 and (samples["status"] == "skipped").sum() == 3
    assert (sweeps["status"] == "ok").sum() == 1 and (sweeps["status"] == "skipped").sum() == 2
    assert all(str(x).startswith("pruned: ") for x in first.loc[first["status"] == "skipped", "reason"])
    assert run.summary.status["skipped"] == 5
    again = run_datagen(kernels, tmp_path / "ds", device, opts, meter="none", timeout_s=30.0, corpus="t",
                        progress=False)
    assert again.appended == 0


def test_auto_moves_on_when_no_sampled_configuration_runs(tmp_path: Path, device) -> None:
    """A kernel valid at the small validity launch whose simple-selection arguments fail at every
    sampled (larger) one is measured under the next selection; the failed rows stay, labelled."""
    src = ("__kernel void fb_tail(__global const float* in, __global float* out, const int n) {\n"
           "  int i = get_global_id(0);\n  int j = n > 64 ? i + 1 : i;\n  out[j] = in[i];\n}\n")
    k = Kernel(source=src, name="fb_tail", dims=1, origin="resume/fb_tail")
    opts = DatagenOptions(configs_per_kernel=2, lsizes_per_kernel=1, sweeps_per_kernel=0, rebalance=None,
                          activity=False, site_counts=False, ratio=(0, 0, 1), max_total_items=1 << 16,
                          reference_every_s=0.0)
    opts.timing.min_time_s = 0.0
    opts.timing.min_repeats = 2
    run = run_datagen([k], tmp_path / "ds", device, opts, meter="none", timeout_s=30.0, corpus="t", progress=False)
    d = read_dataset(tmp_path / "ds", resolve=False)
    v = d[d["pass"] == "validity"].set_index("selection")["status"].to_dict()
    assert v["simple"] == "ok" and v["memory"] == "ok"
    rows = d[(d["pass"] == "sample") & (d["remeasure_of"].isna() if "remeasure_of" in d.columns else True)]
    simple = set(rows.loc[rows["selection"] == "simple", "status"])
    assert simple == {"out_of_bounds"}        # one element past out, in its guard
    assert (rows.loc[rows["selection"] == "memory", "status"] == "ok").sum() == 2
    assert run.summary.kernel_status["ok"] == 1

"""site_counts in datasets: datagen records them per ok row; ``dataset counts`` backfills older
datasets into a journaled sidecar (real PoCL). Expected values are worked out from the kernel and
the harness's numpy draw of its buffers (seed 0): ``a`` is the first buffer, so ``a < 0.5`` holds
for the share of ``default_rng(0).random(n, float32)`` below 0.5."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kernelcast.datagen.counts import backfill_counts, row_config
from kernelcast.datagen.dataset import KILL_AFTER_ENV, SITE_COUNTS, DatasetWriter, read_dataset
from kernelcast.datagen.generate import DatagenOptions, Generator
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import Kernel

SRC = """__kernel void tcount(__global const float* a, __global float* b, int n) {
  int i = get_global_id(0);
  float s = 0.0f;
  for (int j = 0; j < 5; ++j) s += a[i];
  if (a[i] < 0.5f) s = -s;
  b[i] = s;
}"""
KERNEL = Kernel(SRC, "tcount", dims=1, origin="test")


def _expected_share(total: int) -> float:
    a = np.random.default_rng(0).random(total, dtype=np.float32)
    return float(np.mean(a < np.float32(0.5)))


def _make(root: Path, harness, site_counts: bool, configs: int = 4) -> None:
    from kernelcast.datagen.generate import write_kernels

    opts = DatagenOptions(configs_per_kernel=configs, lsizes_per_kernel=1, rebalance=None, sweeps_per_kernel=0,
                          validity=False, activity=False, reference_every_s=0, site_counts=site_counts,
                          max_total_items=1 << 14,
                          timing=TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=2))
    m = {"device_identity": harness.device.identity, "seed": 0, "schema_version": 2, "args_selection": "simple",
         "options": {"timing": {"seed": 0}}}
    with DatasetWriter(root, m) as w:
        Generator(harness, w, opts).run([KERNEL])
    write_kernels(root, [KERNEL])


def _check_values(df) -> None:
    ok = df[df["status"] == "ok"]
    assert len(ok) >= 2
    for _, r in ok.iterrows():
        v = json.loads(r["site_counts"])
        assert v["trip_l4_c3"] == 5.0 and v["tpeak_l4_c3"] == 5.0
        assert v["br_l5_c3"] == pytest.approx(_expected_share(int(r["global_items"])), abs=1e-12)


def test_datagen_rows_carry_site_counts(tmp_path, harness):
    _make(tmp_path / "on", harness, True)
    _check_values(read_dataset(tmp_path / "on"))
    _make(tmp_path / "off", harness, False)
    df = read_dataset(tmp_path / "off")
    assert (df["site_counts"] == "").all()


def test_backfill_fills_the_sidecar_resumes_and_matches_datagen(tmp_path, harness):
    root = tmp_path / "ds"
    _make(root, harness, False, configs=6)
    shards = {p: p.read_bytes() for p in (root / "shards").glob("*.parquet")}
    ok = int((read_dataset(root)["status"] == "ok").sum())
    s1 = backfill_counts(root, limit=2)
    assert (s1.attempted, s1.counted, s1.rows_with_counts, s1.rows_ok) == (2, 2, 2, ok)
    df = read_dataset(root)
    assert (df["site_counts"] != "").sum() == 2
    s2 = backfill_counts(root)                       # resumes: only the rows without an entry
    assert (s2.had_counts, s2.attempted, s2.counted, s2.rows_with_counts) == (2, ok - 2, ok - 2, ok)
    assert backfill_counts(root).attempted == 0
    _check_values(read_dataset(root))                # the same counts datagen records (another run)
    lines = (root / SITE_COUNTS).read_text().splitlines()
    assert len(lines) == ok and len({json.loads(x)["row_key"] for x in lines}) == ok
    assert {p: p.read_bytes() for p in (root / "shards").glob("*.parquet")} == shards     # shards untouched


def test_counts_of_before_the_peaks_are_counted_again(tmp_path, harness, monkeypatch):
    """Rows datagen counted before the counting launch kept each loop's busiest work-item (their
    counts have ``trip_`` without ``tpeak_``) are counted again into the sidecar, whose counts
    readers then take; rows counted now are left alone."""
    from kernelcast.instrument.counters import SiteCounts

    values = SiteCounts.values
    monkeypatch.setattr(SiteCounts, "values",
                        lambda self: {k: v for k, v in values(self).items() if not k.startswith("tpeak_")})
    root = tmp_path / "old"
    _make(root, harness, True)
    monkeypatch.undo()
    df = read_dataset(root)
    ok = int((df["status"] == "ok").sum())
    assert not df.loc[df["status"] == "ok", "site_counts"].str.contains("tpeak_").any()
    s = backfill_counts(root)
    assert (s.had_counts, s.attempted, s.counted) == (0, ok, ok)
    _check_values(read_dataset(root))
    assert backfill_counts(root).attempted == 0
    _make(tmp_path / "new", harness, True)
    assert backfill_counts(tmp_path / "new").attempted == 0


def test_row_config_round_trips_the_stored_bindings():
    row = {"gsize": np.array([256]), "lsize": np.array([64]),
           "args": json.dumps([{"name": "a", "kind": "buffer", "dtype": "float", "count": 256, "value": None,
                                "init": "random"},
                               {"name": "n", "kind": "scalar", "dtype": "int", "count": None, "value": "256",
                                "init": "random"}])}
    cfg = row_config(row)
    assert cfg.gsize == (256,) and cfg.lsize == (64,)
    assert [(a.name, a.kind, a.count, a.value) for a in cfg.args] == [("a", "buffer", 256, None),
                                                                    ("n", "scalar", None, "256")]
    with pytest.raises(ValueError):
        row_config({"gsize": [4], "lsize": None, "args": "[{\"name\": \"x\", \"kind\": \"buffer\", "
                    "\"dtype\": \"float\", \"count\": 4, \"init\": \"array\"}]"})


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", "dataset", "counts", *args],
                          capture_output=True, text=True, timeout=300, **kw)


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    """Through the command's entry point in this process (an exception would fail the test as it is);
    the rerun below goes through a real ``python -m kernelcast.cli`` for the exit status."""
    from kernelcast.cli import main

    def run(*args: str) -> tuple[int, str]:
        rc = main(["dataset", "counts", *args])
        return rc, capsys.readouterr().err

    rc, err = run(str(tmp_path / "missing"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    rc, err = run(str(tmp_path / "empty"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "not a dataset" in err
    rc, err = run(str(tmp_path / "empty"), "--jobs", "0")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "empty" / SITE_COUNTS).exists()


def test_backfill_killed_and_rerun_resumes(tmp_path, harness):
    root = tmp_path / "ds"
    _make(root, harness, False, configs=24)
    ok = int((read_dataset(root)["status"] == "ok").sum())
    side = root / SITE_COUNTS
    # killed with SIGKILL right after its third line is on disk (the kill point of the journal
    # writers: deterministic, unlike a timer racing a fast backfill)
    p = subprocess.run([sys.executable, "-m", "kernelcast.cli", "dataset", "counts", str(root), "--quiet"],
                       env={**os.environ, KILL_AFTER_ENV: "3"}, capture_output=True, timeout=240,
                       start_new_session=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    done = side.read_text().count("\n")
    assert done == 3 < ok
    r = _cli(str(root), "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["attempted"] == ok - done and out["rows_with_counts"] == ok
    _check_values(read_dataset(root))

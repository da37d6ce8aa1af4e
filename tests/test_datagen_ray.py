"""Datagen on a local Ray cluster: the same configurations as a single-process run, none twice,
none lost, and a run that loses an actor resumes."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from kernelcast.datagen.dataset import JOURNAL, read_dataset
from kernelcast.datagen.distributed import ActorsLost, check_address, run_datagen_ray, shard_of
from kernelcast.datagen.generate import DatagenOptions, run_datagen
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import Kernel

from .kernels import poly

ROOT = Path(__file__).resolve().parent.parent


def test_unreachable_address_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "ds"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "kernelcast", "datagen", "--corpus", "bundled", "--out", str(out),
                        "--ray", "127.0.0.1:9"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    # without Ray installed (the dev extra does not pull it), the same command says how to get it
    expect = "127.0.0.1:9" if importlib.util.find_spec("ray") is not None else "pip install 'kernelcast[ray]'"
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 60
    assert not out.exists()           # nothing written
    with pytest.raises(Exception, match="HOST:PORT"):
        check_address("no-port-here")
    r = subprocess.run([sys.executable, "-m", "kernelcast", "datagen", "--corpus", "bundled", "--out", str(out),
                        "--ray-actors", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--ray-actors needs --ray" in r.stderr and not out.exists()


def test_sharding_is_stable_and_spread():
    ids = [f"k{i}" for i in range(200)]
    counts = [sum(shard_of(i, 3) == a for i in ids) for a in range(3)]
    assert all(c > 40 for c in counts)                 # every actor gets a share
    assert [shard_of(i, 3) for i in ids] == [shard_of(i, 3) for i in ids]


def _kernels() -> list[Kernel]:
    return [Kernel(poly(t).replace("poly(", f"poly{t}("), f"poly{t}", dims=1, origin="test")
            for t in (16, 32, 48, 64, 96, 128)]


def _options() -> DatagenOptions:
    # no pruning by time (max_config_time_s): under load it would make the set of configurations
    # depend on the measured times, and the runs could not be compared configuration by configuration
    return DatagenOptions(configs_per_kernel=6, lsizes_per_kernel=2, rebalance=None, validity=False,
                          max_total_items=1 << 18, max_config_time_s=1e9,
                          timing=TimingPolicy(warmup=1, min_repeats=3, min_time_s=0.0, max_repeats=20,
                                              max_time_s=2.0))


def _raw_keys(root: Path) -> list[str]:
    keys: list[str] = []
    for p in sorted((root / "shards").glob("part-*.parquet")):
        keys += pd.read_parquet(p, columns=["row_key"])["row_key"].tolist()
    jp = root / JOURNAL
    if jp.is_file():
        keys += pd.read_json(jp, lines=True)["row_key"].tolist() if jp.stat().st_size else []
    return keys


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=2,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_matches_single_process_and_resumes_after_a_killed_actor(tmp_path, device, ray_cluster):
    kernels = _kernels()
    single = tmp_path / "single"
    run_datagen(kernels, single, device, _options(), meter="none", timeout_s=30, corpus="test", progress=False)
    want = set(read_dataset(single)["row_key"])
    assert len(want) == 36

    out = tmp_path / "ray"
    killed: list[int] = []

    def kill_when_busy(i: int, info: dict, part: Path) -> None:
        if i != 0:
            return

        def watch() -> None:
            jp = part / JOURNAL
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if jp.is_file() and len(jp.read_text().splitlines()) >= 2:
                    os.kill(info["pid"], signal.SIGKILL)
                    killed.append(info["pid"])
                    return
                time.sleep(0.05)

        threading.Thread(target=watch, daemon=True).start()

    with pytest.raises(ActorsLost) as e:
        run_datagen_ray(kernels, out, "auto", _options(), meter="none", timeout_s=30, corpus="test",
                        address=None, actors=2, on_actor=kill_when_busy)
    assert killed and "actor 0" in str(e.value)
    after_kill = set(read_dataset(out)["row_key"])
    assert 2 <= len(after_kill) < 36              # the killed actor's rows up to its kill are kept
    assert not (out / "parts").exists()           # every part merged

    # the rerun measures what is missing and nothing twice
    run = run_datagen_ray(kernels, out, "auto", _options(), meter="none", timeout_s=30, corpus="test",
                          address=None, actors=2)
    got = read_dataset(out)
    assert set(got["row_key"]) == want            # none lost, none extra vs the single-process run
    raw = _raw_keys(out)
    assert len(raw) == len(set(raw))              # no row stored twice
    assert run.summary.rows_resumed == len(after_kill & want)
    print(f"single {len(want)} rows; ray: {len(after_kill)} rows before the kill, {len(got)} after the rerun, "
          f"{len(raw) - len(set(raw))} duplicates, {len(want - set(got['row_key']))} lost")


@pytest.mark.slow
def test_ray_one_actor_per_cpu_node(tmp_path, ray_cluster):
    # default placement: one actor per alive node on a CPU-only node (here: one)
    ks = _kernels()[:2]
    run = run_datagen_ray(ks, tmp_path / "d", "auto", replace(_options(), configs_per_kernel=2), meter="none",
                          timeout_s=30, corpus="test", address=None, actors=None)
    assert len(read_dataset(tmp_path / "d")) == 4 and run.summary.rows_new == 4
    assert not (tmp_path / "d" / "parts").exists()

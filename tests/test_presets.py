"""datagen --preset standard and kernelcast dataset card, through the command line (real PoCL)."""

from __future__ import annotations

import json
import subprocess

import pytest
from kernelcast.datagen.dataset import read_dataset, read_manifest
from kernelcast.datagen.presets import PRESETS, STANDARD_SYNTHETIC, get_preset, synthetic_corpus

from tests.cli_run import run_here


def _kc(*args: str) -> subprocess.CompletedProcess[str]:
    return run_here(*args)


@pytest.mark.parametrize(("argv", "message"), [
    (["datagen", "--preset", "huge", "--out", "{out}"], "--preset 'huge': unknown preset; available: standard"),
    (["datagen", "--preset", "standard", "--corpus", "bundled", "--out", "{out}"], "leave out --corpus"),
    (["datagen", "--out", "{out}"], "give --corpus"),
    (["dataset", "card", "{out}"], "not a dataset"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, argv, message):
    out = tmp_path / "ds"
    r = _kc(*[a.replace("{out}", str(out)) for a in argv])
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert not out.exists()


def test_standard_preset_definition():
    p = get_preset("standard")
    assert p.bundled and p.ingested and p.synthetic >= 1500 == STANDARD_SYNTHETIC
    assert p.options["args"] == "both" and p.options["sweeps_per_kernel"] >= 1
    assert p.options["lsizes_per_sweep"] >= 4 and p.options["rebalance"] == "iqr"
    assert list(PRESETS) == ["standard"]


def test_synthetic_corpus_is_deterministic(tmp_path):
    from dataclasses import replace

    small = replace(get_preset("standard"), synthetic=20)
    a = synthetic_corpus(tmp_path / "a", small)
    b = synthetic_corpus(tmp_path / "b", small)
    assert (a / "kernels.jsonl").read_bytes() == (b / "kernels.jsonl").read_bytes()
    assert len((a / "kernels.jsonl").read_text().splitlines()) == 20
    before = (a / "kernels.jsonl").stat().st_mtime_ns
    synthetic_corpus(tmp_path / "a", small)              # present with the same count and seed: kept
    assert (a / "kernels.jsonl").stat().st_mtime_ns == before


def test_standard_preset_runs_resumes_and_writes_its_card(tmp_path, device):
    """The preset with its measuring options made small: the synthetic corpus lands in the
    dataset, rows of regime samples and sweeps are stored, CARD.md says how to continue, and the
    same command again measures nothing new."""
    out = tmp_path / "std"
    cmd = ["datagen", "--preset", "standard", "--out", str(out), "--limit", "1", "--args", "simple",
           "--configs-per-kernel", "2", "--lsizes-per-kernel", "1", "--sweeps-per-kernel", "1", "--rebalance", "none",
           "--max-items", "4096", "--min-time", "0", "--repeats", "2", "--meter", "none", "--json"]
    r = _kc(*cmd)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["card"] == str(out / "CARD.md")
    synth = out / "corpus-synth" / "kernels.jsonl"
    assert len(synth.read_text().splitlines()) == STANDARD_SYNTHETIC
    m = read_manifest(out)
    assert m["preset"]["name"] == "standard" and m["args_selection"] == "simple"
    assert m["corpus"].startswith("bundled,") and m["corpus"].endswith("corpus-synth")
    assert m["command"].startswith(f"kernelcast datagen --preset standard --out {out}")
    assert "--configs-per-kernel 2" in m["command"] and "--k " not in m["command"]
    df = read_dataset(out)
    rows = df[df["pass"] != "validity"]
    assert set(rows["pass"]) == {"sample", "sweep"}
    card = (out / "CARD.md").read_text()
    assert "# Dataset card: standard" in card and m["command"] in card
    r2 = _kc(*cmd)
    assert r2.returncode == 0, r2.stderr
    assert json.loads(r2.stdout)["summary"]["rows_new"] == 0
    assert len(read_dataset(out)) == len(df)
    r3 = _kc("dataset", "card", str(out), "--json")
    assert r3.returncode == 0 and json.loads(r3.stdout)["rows"] == len(rows)
    r4 = _kc("dataset", str(out))                      # the summary still answers to the bare dataset
    assert r4.returncode == 0 and "kernels: 1" in r4.stdout

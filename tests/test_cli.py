"""The command line, for real on the local OpenCL device."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

SAXPY = """
// two kernels in one file
__kernel void saxpy(__global const float* x, __global float* y, const float a, const int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void fill(__global int* out, int v) { out[get_global_id(0)] = v; }
"""


def kc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernelcast.cli", *args], capture_output=True, text=True, timeout=300)


def kc_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """:func:`kc` in this process (the same parser and checks, without starting an interpreter): for
    output the command prints itself (not its log records, which pytest captures)."""
    from kernelcast import cli

    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["kernelcast", *args], rc, out, err)


@pytest.fixture()
def kfile(tmp_path):
    p = tmp_path / "k.cl"
    p.write_text(SAXPY)
    return p


def test_help_on_every_subcommand(capsys):
    from kernelcast.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert {"devices", "measure", "demo", "validate"} <= set(sub.choices)
    r = kc("--help")                    # the module runs as a program
    assert r.returncode == 0 and "usage:" in r.stdout and "validate" in r.stdout
    for name in sub.choices:
        r = kc_here(capsys, name, "--help")
        assert r.returncode == 0 and "usage:" in r.stdout, name


def test_devices_lists_the_device(device, capsys):
    r = kc_here(capsys, "devices", "--json")
    assert r.returncode == 0, r.stderr
    devs = json.loads(r.stdout)
    mine = next(d for d in devs if d["spec"] == device.spec)
    for key in ("compute_units", "max_work_group_size", "preferred_wg_multiple", "global_mem_bytes",
                "local_mem_bytes", "meter"):
        assert key in mine
    assert mine["compute_units"] == device.compute_units and mine["builds"] is True
    assert mine["name"] == device.name and mine["meter"] == device.meter
    table = kc_here(capsys, "devices")
    assert table.returncode == 0 and device.name in table.stdout and "meter" in table.stdout


def test_measure_json(kfile, device, capsys):
    r = kc_here(capsys, "measure", "--kernel", str(kfile), "--name", "saxpy", "--gsize", "4096", "--lsize", "64",
           "--arg", "x=buffer:float:4096", "--arg", "y=buffer:float:4096:ones", "--arg", "a=2.0",
           "--arg", "n=4096", "--repeats", "5", "--min-time", "0", "--meter", "none", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["status"] == "ok" and d["kernel_name"] == "saxpy"
    assert d["gsize"] == [4096] and d["lsize"] == [64]
    t = d["time"]
    assert t["repeats"] >= 5 and len(t["times_us"]) == t["repeats"]
    # the statistics are those of the printed repeat times
    q1, med, q3 = np.percentile(t["times_us"], [25, 50, 75])
    assert t["median_us"] == pytest.approx(med) and t["min_us"] == min(t["times_us"])
    assert t["iqr_us"] == pytest.approx(q3 - q1)
    assert t["cv"] == pytest.approx(np.std(t["times_us"], ddof=1) / np.mean(t["times_us"]))
    assert d["energy_j"] is None and d["meter"] == "none"
    assert {a["name"] for a in d["args"]} == {"x", "y", "a", "n"}


def test_measure_fills_missing_args_and_prints_table(kfile, device):
    r = kc("measure", "--kernel", str(kfile), "--name", "fill", "--gsize", "1024", "--lsize", "32",
           "--repeats", "3", "--min-time", "0", "--meter", "none")
    assert r.returncode == 0, r.stderr
    assert "simple argument selection for out, v" in r.stderr
    assert "status      ok" in r.stdout and "median" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--kernel", "/nonexistent.cl", "--gsize", "64"], "no such kernel file"),
    (["--gsize", "64"], "defines 2 kernels"),
    (["--name", "nope", "--gsize", "64"], "no kernel named 'nope'"),
    (["--name", "fill", "--gsize", "100", "--lsize", "64"], "does not divide"),
    (["--name", "fill", "--gsize", "1048576", "--lsize", "1048576"], "exceeds the device"),
    (["--name", "fill", "--gsize", "64", "--arg", "q=1"], "has no argument 'q'"),
    (["--name", "fill", "--gsize", "64", "--arg", "v=buffer:int:64"], "given as a buffer"),
    (["--name", "fill", "--gsize", "64", "--arg", "out=5"], "given as a scalar"),
    (["--name", "fill", "--gsize", "64", "--arg", "out:buffer"], "expected NAME="),
    (["--name", "fill", "--gsize", "64x0"], "positive"),
    (["--name", "fill", "--gsize", "64", "--meter", "joulemeter"], "unknown meter"),
])
def test_measure_bad_input_exits_2(kfile, device, args, message, capsys):
    if "--kernel" not in args:
        args = ["--kernel", str(kfile), *args]
    r = kc_here(capsys, "measure", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelcast: error:") and message in err[0], r.stderr
    assert r.stdout == ""


def test_measure_several_configurations_in_rounds_feeds_predict(kfile, tmp_path, device, capsys):
    """measure --configs --rounds 2 --json: a record per configuration, each the pool of its two
    rounds (their medians listed), argument columns bound per configuration; the list is what
    predict --measured reads."""
    c = tmp_path / "c.csv"
    c.write_text("gsize,lsize,a\n4096,64,2.0\n16384,64,2.0\n16384,256,3.0\n")
    r = kc_here(capsys, "measure", "--kernel", str(kfile), "--name", "saxpy", "--configs", str(c), "--rounds", "2",
           "--repeats", "3", "--min-time", "0", "--meter", "none", "--json")
    assert r.returncode == 0, r.stderr
    docs = json.loads(r.stdout)
    assert [d["gsize"] for d in docs] == [[4096], [16384], [16384]] and [d["lsize"][0] for d in docs] == [64, 64, 256]
    for d in docs:
        assert d["status"] == "ok" and d["rounds"] == 2 and len(d["round_medians_us"]) == 2
        assert d["time"]["median_us"] > 0
        assert next(a for a in d["args"] if a["name"] == "n")["value"] in (str(d["gsize"][0]), d["gsize"][0])
    assert [next(a for a in d["args"] if a["name"] == "a")["value"] for d in docs] in (["2.0", "2.0", "3.0"],
                                                                                       [2.0, 2.0, 3.0])
    m = tmp_path / "m.json"
    m.write_text(r.stdout)
    p = kc_here(capsys, "predict", "--kernel", str(kfile), "--name", "saxpy", "--gsize", "65536", "--lsize", "64",
           "--profile", "pocl-local", "--measured", str(m), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["correction"]["configurations"] == 3
    t = kc_here(capsys, "measure", "--kernel", str(kfile), "--name", "saxpy", "--configs", str(c), "--repeats", "3",
           "--min-time", "0", "--meter", "none")
    assert t.returncode == 0 and "max/min round" in t.stdout and len(t.stdout.strip().splitlines()) == 7


@pytest.mark.parametrize("extra,csv,message", [
    (["--gsize", "64"], "gsize\n64\n", "not both"),
    (["--counts"], "gsize\n64\n", "--counts counts one configuration"),
    (["--rounds", "33"], "gsize\n64\n", "at most 32"),
    (["--rounds", "0"], "gsize\n64\n", "must be at least 1"),
    ([], "gsize,lsize\n64,64\n100,64\n", "configuration 2: local size 64 does not divide"),
    ([], "lsize\n64\n", "needs a 'gsize' column"),
    ([], "gsize\n" + "64\n" * 65, "at most 64"),
    ([], "gsize,q\n64,1\n", None),            # a column that names no argument is ignored, as predict ignores it
])
def test_measure_configs_bad_input_exits_2(kfile, tmp_path, device, extra, csv, message, capsys):
    c = tmp_path / "c.csv"
    c.write_text(csv)
    r = kc_here(capsys, "measure", "--kernel", str(kfile), "--name", "fill", "--configs", str(c), "--repeats", "2",
                "--min-time", "0", "--meter", "none", *extra)
    if message is None:
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], r.stderr
    assert r.stdout == ""


def test_measure_unparsable_file_exits_2(tmp_path, device, capsys):
    p = tmp_path / "bad.cl"
    p.write_text("__kernel void f(__global float* a) { a[0] = ; }")
    r = kc_here(capsys, "measure", "--kernel", str(p), "--gsize", "64")
    assert r.returncode == 2 and "cannot parse" in r.stderr

"""kernelcast predict / tune / bench: output and bad input (published profiles, so no calibration)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.cli_run import run_here
from tests.kernels import CSR

SRC = """__kernel void axpy(__global const float* x, __global float* y, const float a, const int n) {
  int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }"""


kc = run_here


@pytest.fixture()
def kfile(tmp_path):
    p = tmp_path / "axpy.cl"
    p.write_text(SRC)
    return p


def test_predict_json_analytical_only(kfile):
    r = kc("predict", "--kernel", str(kfile), "--gsize", "1048576", "--lsize", "256", "--profile", "a100", "--json",
           "--model", "none")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    p = d["predictions"][0]
    # the A100 profile's energy constants (tests/test_profile_energy.py): static power x time + data movement
    assert p["analytical"]["energy_j"] > 0 and d["energy_transferred"] == []
    # 2^20 items x 12 B (load x, load y, store y) at the A100's 1555 GB/s: memory bound, at least that
    # long and (a large streaming kernel) within 2x of it plus 10 us
    floor_us = 12 * (1 << 20) / 1555e9 * 1e6
    assert p["explanation"]["bound"] == "memory"
    assert p["explanation"]["time_parts_us"]["memory"] == pytest.approx(floor_us)
    assert floor_us <= p["analytical"]["time_us"] <= 2 * floor_us + 10
    assert "learned" not in p and {a["name"] for a in p["args"]} == {"x", "y", "a", "n"}


def test_predict_batch_configs(kfile, tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("gsize,lsize,n\n65536,64,65536\n1048576,256,1048576\n16777216,1024,16777216\n")
    r = kc("predict", "--kernel", str(kfile), "--configs", str(csv), "--profile", "v100", "--json")
    assert r.returncode == 0, r.stderr
    t = [p["analytical"]["time_us"] for p in json.loads(r.stdout)["predictions"]]
    assert len(t) == 3 and t[0] < t[1] < t[2]


@pytest.mark.parametrize("args,msg", [
    (["--kernel", "/no/such.cl", "--gsize", "64"], "no such kernel file"),
    (["--gsize", "64", "--name", "nope"], "no kernel named"),
    (["--gsize", "sixty"], "gsize"),
    (["--gsize", "100", "--lsize", "64"], "does not divide"),
    (["--gsize", "64", "--model", "MODELDIR"], "not a model directory"),
    (["--gsize", "64", "--profile", "no-such-gpu"], "no-such-gpu"),
    (["--gsize", "64", "--arg", "q=1"], "no argument 'q'"),
    (["--gsize", "64", "--counts", "NOFILE"], "--counts"),
    (["--gsize", "64", "--counts", "COUNTS:[1, 2]"], "expected a JSON object of site counts"),
    (["--gsize", "64", "--counts", "COUNTS:{\"n\": 3}"], "'n' is not a site"),
    (["--gsize", "64", "--counts", "COUNTS:{\"trip_l1_c2\": -1}"], "non-negative number"),
    (["--gsize", "64", "--counts", "COUNTS:{\"br_l1_c2\": 1.5}"], "at most 1"),
    (["--gsize", "64", "--counts", "COUNTS:{}", "--measure-counts"], "not both"),
])
def test_predict_bad_input_exits_2(kfile, tmp_path, args, msg):
    args = [str(tmp_path) if a == "MODELDIR" else str(tmp_path / "none.json") if a == "NOFILE" else a for a in args]
    for i, a in enumerate(args):
        if a.startswith("COUNTS:"):
            (tmp_path / "c.json").write_text(a[len("COUNTS:"):])
            args[i] = str(tmp_path / "c.json")
    if "--kernel" not in args:
        args = ["--kernel", str(kfile), *args]
    if "--profile" not in args:
        args += ["--profile", "a100"]
    r = kc("predict", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_tune_pareto_over_power_caps(kfile):
    r = kc("tune", "--kernel", str(kfile), "--gsize", "4194304", "--profile", "a100", "--power-caps", "150:400:50",
           "--objective", "time", "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "configurations scored" in r.stdout and "power cap W" in r.stdout
    bad = kc("tune", "--kernel", str(kfile), "--gsize", "4096", "--profile", "a100", "--power-caps", "400:100:50")
    assert bad.returncode == 2 and "LO:HI:STEP" in bad.stderr


def test_tune_json_has_the_table_content(kfile):
    import json

    r = kc("tune", "--kernel", str(kfile), "--gsize", "4194304", "--profile", "a100", "--power-caps", "150:400:50",
           "--objective", "time", "--top", "3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["objective"] == "time" and d["configurations"] == 32 * 6   # 32..1024 step 32, 6 caps
    assert [c["rank"] for c in d["chosen"]] == [1, 2, 3]
    times = [c["pred_us"] for c in d["chosen"]]
    assert times == sorted(times) and all(t > 0 for t in times)
    assert {c["power_cap_w"] for c in d["chosen"]} <= {150.0, 200.0, 250.0, 300.0, 350.0, 400.0}


@pytest.mark.parametrize("caps", ["100:250:0.000001", "1:1e12:1", "100:nan:1"])
def test_tune_power_cap_enumeration_is_bounded(kfile, caps):
    r = kc("tune", "--kernel", str(kfile), "--gsize", "4096", "--profile", "a100", "--power-caps", caps)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "--power-caps" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_pareto_front():
    import numpy as np
    from kernelcast.models.tune import pareto

    t = np.array([1.0, 2.0, 3.0, 1.5, 4.0])
    e = np.array([5.0, 3.0, 1.0, 6.0, 0.5])
    assert sorted(pareto(t, e).tolist()) == [0, 1, 2, 4]


def test_bench_bad_suite_exits_2(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text('{"name": "x", "version": 1, "kernels": [{"id": "k"}]}')
    r = kc("bench", "--suite", str(bad), "--out", str(tmp_path / "r"), "--profile", "a100")
    assert r.returncode == 2 and "k" in r.stderr
    r = kc("bench", "--suite", str(tmp_path / "none.json"), "--out", str(tmp_path / "r"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_predict_without_a_learned_model_imports_no_torch(kfile):
    code = ("import sys; from kernelcast.cli import main; "
            f"rc = main(['predict', '--kernel', {str(kfile)!r}, '--gsize', '4096', '--profile', 'a100', '--json', "
            "'--model', 'none']); "
            "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'scipy', 'lightgbm') if m in sys.modules)); "
            "sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout


@pytest.mark.device
def test_predict_measures_the_row_loop_on_the_given_matrix(tmp_path):
    import numpy as np

    rows, k = 4096, 48                      # every row of the matrix holds 48 entries
    np.save(tmp_path / "rp.npy", np.arange(rows + 1, dtype=np.int32) * k)
    np.save(tmp_path / "col.npy", np.random.default_rng(0).integers(0, rows, rows * k).astype(np.int32))
    np.save(tmp_path / "val.npy", np.ones(rows * k, np.float32))
    (tmp_path / "csr.cl").write_text(CSR)
    base = ["predict", "--kernel", str(tmp_path / "csr.cl"), "--gsize", str(rows), "--lsize", "64",
            "--arg", f"rowptr=@{tmp_path / 'rp.npy'}", "--arg", f"col=@{tmp_path / 'col.npy'}",
            "--arg", f"val=@{tmp_path / 'val.npy'}", "--arg", f"x=buffer:float:{rows}",
            "--arg", f"y=buffer:float:{rows}", "--arg", f"rows={rows}", "--profile", "a100", "--json"]
    guess = json.loads(kc(*base).stdout)["predictions"][0]
    r = kc(*base, "--measure-counts")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["predictions"][0]
    assert got["explanation"]["measured_counts"] == ["line 6: trips per entry 48 (measured)"]
    assert "avg_trip assumed" in guess["explanation"]["assumed_counts"][0]
    # 48 trips per row instead of the assumed 8: the loop's 3 loads per trip (12 B) dominate the bytes
    ratio = got["analytical"]["time_us"] / guess["analytical"]["time_us"]
    assert 3.0 < ratio < 6.5
    # the same counts from a file give the same prediction
    (tmp_path / "counts.json").write_text(json.dumps({"site_counts": {"values": {"trip_l6_c3": 48.0}}}))
    again = json.loads(kc(*base, "--counts", str(tmp_path / "counts.json")).stdout)["predictions"][0]
    assert again["analytical"]["time_us"] == pytest.approx(got["analytical"]["time_us"])


def test_tune_takes_measured_counts_for_every_configuration(tmp_path):
    (tmp_path / "csr.cl").write_text(CSR)
    (tmp_path / "c.json").write_text(json.dumps({"trip_l6_c3": 48.0}))
    base = ["tune", "--kernel", str(tmp_path / "csr.cl"), "--gsize", "4096", "--arg", "rows=4096",
            "--arg", "rowptr=buffer:int:4097", "--arg", "col=buffer:int:196608", "--arg", "val=buffer:float:196608",
            "--profile", "a100", "--top", "3", "--json"]
    guess = json.loads(kc(*base).stdout)
    r = kc(*base, "--counts", str(tmp_path / "c.json"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["site_counts"]["measured_counts"] == ["line 6: trips per entry 48 (measured)"]
    assert guess["site_counts"]["assumed_counts"] and not guess["site_counts"]["measured_counts"]
    assert 3.0 < got["chosen"][0]["pred_us"] / guess["chosen"][0]["pred_us"] < 6.5
    both = kc(*base, "--counts", str(tmp_path / "c.json"), "--measure-counts")
    assert both.returncode == 2 and "not both" in both.stderr


NEIGHBOURS = """__kernel void nb(__global const float* x, __global float* y, const int n) {
  int i = get_global_id(0);
  y[i] = x[i + 1] + x[min(i + 2, n - 1)] + x[i];
}"""


def test_predict_names_the_gathers_and_the_fix(tmp_path):
    """On a CPU profile with the consecutive-gather rate, predict says which accesses it charges as
    gathers and why (``cpu_gathers`` in --json): the ``int`` id plus a constant with its fix, the
    clamped index; the own element is a vector load. A GPU profile has no such line."""
    k = tmp_path / "nb.cl"
    k.write_text(NEIGHBOURS)
    base = ["predict", "--kernel", str(k), "--gsize", "65536", "--lsize", "256"]
    r = kc(*base, "--profile", "pocl31-zen5")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("gather:")]
    assert len(lines) == 2, r.stdout
    assert "x[i + 1]" in lines[0] and "size_t" in lines[0]
    assert "x[min(i + 2, n - 1)]" in lines[1] and "clamping" in lines[1]
    d = json.loads(kc(*base, "--profile", "pocl31-zen5", "--json").stdout)
    assert len(d["predictions"][0]["explanation"]["cpu_gathers"]) == 2
    g = kc(*base, "--profile", "a100")
    assert g.returncode == 0 and "gather:" not in g.stdout


ROUTINES = """__kernel void rt(__global const float* x, __global float* y) {
  int i = get_global_id(0);
  y[i] = exp2(x[i]) + sin(x[i]) + log(x[i]);
}
__kernel void fast(__global const float* x, __global float* y) {
  int i = get_global_id(0);
  y[i] = exp(x[i] * M_LN2_F) + native_sin(x[i]);
}"""


def test_predict_names_a_cheaper_form_of_a_scalar_routine(tmp_path):
    """On the ``pocl31-zen5`` profile exp2 and sin are scalar library code (0.55 and 0.21 G calls/s) where
    exp(x * M_LN2_F) and native_sin run vectorized (3.4 and 3.3): predict names the cheaper forms
    (``cpu_calls``); log, whose native form is no faster there, gets no line, nor does the kernel
    already written the fast way, nor a GPU profile. A profile without exp2's own rates says whose
    rate it used."""
    k = tmp_path / "rt.cl"
    k.write_text(ROUTINES)
    base = ["predict", "--kernel", str(k), "--gsize", "65536", "--lsize", "256"]
    r = kc(*base, "--name", "rt", "--profile", "pocl31-zen5")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("call:")]
    assert len(lines) == 2, r.stdout
    assert lines[0].split()[1] == "exp2:" and "exp(x * M_LN2_F)" in lines[0] and "keeps the work-item loop" in lines[0]
    assert lines[1].split()[1] == "sin:" and "native_sin(x)" in lines[1]
    d = json.loads(kc(*base, "--name", "rt", "--profile", "pocl31-zen5", "--json").stdout)
    assert len(d["predictions"][0]["explanation"]["cpu_calls"]) == 2
    f = kc(*base, "--name", "fast", "--profile", "pocl31-zen5")
    assert f.returncode == 0 and "call:" not in f.stdout
    # a profile measured before exp2 had rates of its own: exp's, and the line says so
    o = kc(*base, "--name", "rt", "--profile", "pocl-local")
    assert o.returncode == 0 and "the profile has no rate of exp2" in o.stdout, o.stdout
    g = kc(*base, "--name", "rt", "--profile", "a100")
    assert g.returncode == 0 and "call:" not in g.stdout

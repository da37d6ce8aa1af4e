"""The device columns of the tabular model and the bundled GPU model (models/bundled.py): it loads,
matches its card, is the default of predict / tune with a GPU profile and not with a CPU one."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, load_profile
from kernelcast.models.bundled import BUNDLED_GPU_DIR, bundled_card, choose_model, default_model_for
from kernelcast.models.static.batch import ANALYSIS_VERSION
from kernelcast.models.tabular import DEVICE_COLUMNS, TabularPredictor, build_table, device_columns

from tests.cli_run import run_here

kc = run_here

SRC = """__kernel void axpy(__global const float* x, __global float* y, const float a, const int n) {
  int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }"""


def _profile(**values: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="hand GPU", vendor="NVIDIA Corporation", device_type="GPU",
                                     compute_units=10, wg_multiple=32))
    for k, v in values.items():
        p.set(k, v, "x", "test")
    return p


def test_device_columns_state_the_profile_and_leave_the_rest_missing():
    p = _profile(peak_fp32_gflops=1024.0, dram_bw_gbs=256.0, max_threads_per_cu=1024, max_wg_per_cu=16)
    d = device_columns(p)
    assert set(d) == set(DEVICE_COLUMNS)
    assert d["dev_class"] == 1.0 and d["dev_vendor"] == 0.0
    assert d["dev_compute_units"] == 10 and d["dev_warp_size"] == 32
    assert d["dev_log2_fp32_per_byte"] == pytest.approx(2.0)           # 1024 / 256
    for missing in ("dev_l2_bytes", "dev_clock_mhz", "dev_tdp_w", "dev_peak_fp64_gflops", "dev_registers_per_cu"):
        assert math.isnan(d[missing]), missing
    # a bundled AMD profile without a published FP32 rate: NaN, not a guess; its bandwidth as published
    w = device_columns(load_profile("w7800"))
    assert w["dev_vendor"] == 1.0 and math.isnan(w["dev_peak_fp32_gflops"]) and w["dev_dram_bw_gbs"] == 576.0
    assert device_columns(load_profile("pocl-local"))["dev_class"] == 0.0


def test_launch_relative_to_the_device():
    p = _profile(max_threads_per_cu=1024, max_wg_per_cu=16, l2_bytes=1 << 20, local_mem_per_cu_bytes=65536)
    frame = pd.DataFrame({"source": [SRC] * 2, "kernel_name": ["axpy"] * 2, "gsize": ["[9600]", "[4800]"],
                          "lsize": ["[96]", "[48]"],
                          "args": [json.dumps([{"name": "x", "kind": "buffer", "dtype": "float", "count": 9600},
                                               {"name": "y", "kind": "buffer", "dtype": "float", "count": 9600},
                                               {"name": "a", "kind": "scalar", "dtype": "float", "value": 2.0},
                                               {"name": "n", "kind": "scalar", "dtype": "int", "value": 9600}])] * 2})
    t = build_table(frame, p)
    assert t["warps_per_wg"].tolist() == [3.0, 2.0]
    assert t["lane_fill"].tolist() == pytest.approx([1.0, 0.75])
    assert t["wg_threads_per_cu_max"].tolist() == pytest.approx([96 / 1024, 48 / 1024])
    assert t["fill_threads"].tolist() == pytest.approx([9600 / 10240, 4800 / 10240])
    # 100 work-groups of 96 (10 resident per CU by threads, 10 CUs) fill one wave; 100 of 48 (16 resident) too
    assert t["waves_threads"].tolist() == [1.0, 1.0]
    assert t["n_wg_per_cu_max"].tolist() == pytest.approx([100 / 160, 100 / 160])
    assert t["log2_ws_over_l2"].iloc[0] == pytest.approx(np.log2(2 * 9600 * 4 / (1 << 20)))
    assert (t["dev_compute_units"] == 10).all() and t["dev_l2_bytes"].eq(1 << 20).all()
    # another device's profile changes the device columns of the same rows, nothing else of the launch
    t2 = build_table(frame, load_profile("rtx-3090"))
    assert (t2["dev_compute_units"] == 82).all() and t2["items"].tolist() == t["items"].tolist()


def test_bundled_model_loads_and_matches_its_card():
    assert (BUNDLED_GPU_DIR / "tabular.json").is_file()
    m = TabularPredictor.load(BUNDLED_GPU_DIR)
    card = bundled_card()
    assert card is not None
    head = m.heads["time"].summary
    assert card["rows"] == head["rows"] == sum(p["rows"] for p in card["pairs"])
    assert len(card["kernels"]) == head["kernels"]
    assert sorted(card["gpus"]) == m.summary["devices"]
    assert {p["gpu"] for p in card["pairs"]} == set(card["gpus"])
    assert all(c in m.features for c in DEVICE_COLUMNS)
    # its residual is on the analytical model of the current static analysis: a new analysis
    # version needs the model rebuilt (docs/gpu-model.md, "Rebuilding it")
    assert card["analysis_version"] == ANALYSIS_VERSION
    assert {s["benchmark"] for s in card["sources"]} == {p["benchmark"] for p in card["pairs"]}
    assert all(s["repository"] and len(s["commit"]) == 40 for s in card["sources"])
    size = sum(f.stat().st_size for f in BUNDLED_GPU_DIR.iterdir() if f.is_file())
    assert size < 2.5e6


def test_default_model_is_bundled_for_a_gpu_profile_only():
    assert default_model_for(load_profile("rtx-3090")) == BUNDLED_GPU_DIR
    assert default_model_for(load_profile("pocl-local")) is None
    assert choose_model("none", load_profile("a100")).path is None
    assert choose_model("/x", load_profile("pocl-local")).source == "given"


@pytest.fixture()
def kfile(tmp_path):
    p = tmp_path / "axpy.cl"
    p.write_text(SRC)
    return p


def test_predict_uses_the_bundled_model_with_a_gpu_profile(kfile):
    base = ("predict", "--kernel", str(kfile), "--gsize", "1048576", "--lsize", "256", "--json")
    r = kc(*base, "--profile", "rtx-3090")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["model"]["bundled"] is True and d["learned_model"] == str(BUNDLED_GPU_DIR)
    p = d["predictions"][0]
    assert p["learned"]["time_us"] > 0 and p["learned"]["time_us"] != p["analytical"]["time_us"]
    cpu = json.loads(kc(*base, "--profile", "pocl-local").stdout)
    assert cpu["model"]["path"] is None and "learned" not in cpu["predictions"][0]
    none = json.loads(kc(*base, "--profile", "rtx-3090", "--model", "none").stdout)
    assert none["model"]["source"] == "none" and "learned" not in none["predictions"][0]
    text = kc(*base[:-1], "--profile", "rtx-3090")
    assert text.returncode == 0 and "bundled GPU model" in text.stderr


def test_tune_names_the_bundled_model(kfile):
    r = kc("tune", "--kernel", str(kfile), "--gsize", "65536", "--profile", "rtx-a4000", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["model"]["bundled"] is True and d["model"]["kind"] == "tabular"
    t = kc("tune", "--kernel", str(kfile), "--gsize", "65536", "--profile", "rtx-a4000")
    assert "bundled GPU model" in t.stdout


@pytest.mark.parametrize("cmd", ["predict", "tune"])
def test_bad_model_path_is_one_line(kfile, tmp_path, cmd):
    extra = ("--lsize", "256") if cmd == "predict" else ()
    r = kc(cmd, "--kernel", str(kfile), "--gsize", "4096", *extra, "--profile", "a100",
           "--model", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "nope" in r.stderr


def test_gpu_model_build_refuses_a_missing_yardstick(tmp_path, capsys):
    from kernelcast.bench.gpu_model import main

    rc = main(["build", "--yardstick", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "none" in err
    assert not (tmp_path / "o").exists()

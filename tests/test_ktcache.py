"""Kernel Tuner caches in (``kernelcast dataset import-kt``), on cache files written here in each
format with known values: the launch, the times and the observer columns are checked against
hand-computed numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kernelcast.datagen.dataset import read_dataset
from kernelcast.datagen.ktcache import GridRules, KTCacheError, kt_rows, read_kt_cache

from kernelcast.cli import main

MATMUL = """
__kernel void matmul(__global float *C, __global const float *A, __global const float *B, int n) {
    int x = get_global_id(0) * tile_size_x;
    int y = get_global_id(1);
    for (int t = 0; t < tile_size_x; t++) {
        float s = 0.0f;
        for (int k = 0; k < n; k++) s += A[y * n + k] * B[k * n + x + t];
        C[y * n + x + t] = s;
    }
}
"""


def _header(**extra: object) -> dict[str, object]:
    return {"device_name": "NVIDIA RTX A4000", "kernel_name": "matmul",
            "tune_params_keys": ["block_size_x", "block_size_y", "tile_size_x"],
            "tune_params": {"block_size_x": [16, 32], "block_size_y": [4, 8], "tile_size_x": [1, 2]}, **extra}


def _rec(bx: int, by: int, tx: int, **vals: object) -> tuple[str, dict[str, object]]:
    return f"{bx},{by},{tx}", {"block_size_x": bx, "block_size_y": by, "tile_size_x": tx, **vals}


def _write(path: Path, header: dict[str, object], records: list[tuple[str, dict[str, object]]]) -> Path:
    path.write_text(json.dumps({**header, "cache": dict(records)}, indent=1))
    return path


def cache_1x(tmp_path: Path) -> Path:
    """Kernel Tuner 1.x: problem_size and objective, times, NVML/PowerSensor observers, error names."""
    recs = [
        _rec(16, 4, 2, time=1.5, times=[1.0, 2.0, 3.0, 1.5], ps_energy=0.25, ps_power=150.0, nvml_power=140.0,
             core_freq=1410.0, mem_freq=1215.0, temperature=51.5, compile_time=400.0, verification_time=0,
             benchmark_time=6.0, strategy_time=0, framework_time=1.0, timestamp="2024-01-01 10:00:00+00:00",
             **{"GFLOP/s": 123.0}),
        _rec(32, 8, 1, time=0.5, times=[0.5, 0.5], nvml_energy=0.04, nvml_power=80.0, temperature=50.0,
             compile_time=380.0, timestamp="2024-01-01 10:00:01+00:00"),
        _rec(32, 4, 2, time="CompilationFailedConfig", compile_time=10.0),
        _rec(16, 8, 1, time="InvalidConfig"),
        _rec(32, 8, 2, time="RuntimeFailedConfig", times=[]),
    ]
    return _write(tmp_path / "mm_1x.json", _header(problem_size=[1000, 500], objective="time"), recs)


def test_1x_cache_rows_launch_times_observers(tmp_path: Path) -> None:
    cache = read_kt_cache(cache_1x(tmp_path))
    assert cache.format == "kt-1.x" and cache.closed and len(cache.records) == 5
    imp = kt_rows(cache, rules=GridRules.parse("grid_div_x=block_size_x*tile_size_x"))
    rows = {r["kt_key"]: r for r in imp.rows}
    r = rows["16,4,2"]
    # x: ceil(1000 / (16*2)) = 32 groups of 16 -> 512; y: ceil(500 / 4) = 125 groups of 4 -> 500
    assert r["gsize"] == [512, 500] and r["lsize"] == [16, 4] and r["n_wg"] == 32 * 125
    assert r["status"] == "ok"
    assert r["time_mean_us"] == pytest.approx(1500.0)
    assert r["time_median_us"] == pytest.approx(1750.0)           # median of 1, 1.5, 2, 3 ms
    assert r["time_min_us"] == pytest.approx(1000.0) and r["repeats"] == 4
    assert r["times_us"] == pytest.approx([1000.0, 2000.0, 3000.0, 1500.0])
    assert r["energy_j"] == pytest.approx(0.25) and r["meter"] == "powersensor"   # ps before nvml
    assert r["avg_power_w"] == pytest.approx(150.0)
    assert r["device_state"] == {"core_freq_mhz": 1410.0, "mem_freq_mhz": 1215.0, "temperature_c": 51.5}
    assert r["kt_nvml_power"] == 140.0 and r["kt_GFLOP_s"] == 123.0 and r["kt_compile_time"] == 400.0
    assert r["tp_block_size_x"] == 16 and r["tp_tile_size_x"] == 2
    assert "-Dtile_size_x=2" in r["build_options"] and "-Dgrid_size_x=32" in r["build_options"]
    assert "-Dblock_size_y=4" in r["build_options"] and "-Dkernel_tuner=1" in r["build_options"]
    r = rows["32,8,1"]
    # x: ceil(1000 / 32) = 32 -> 1024; y: ceil(500 / 8) = 63 -> 504
    assert r["gsize"] == [1024, 504] and r["lsize"] == [32, 8]
    assert r["time_median_us"] == pytest.approx(500.0) and r["energy_j"] == pytest.approx(0.04)
    assert r["meter"] == "nvml" and r["avg_power_w"] == pytest.approx(80.0)
    assert {k: rows[k]["status"] for k in ("32,4,2", "16,8,1", "32,8,2")} == {
        "32,4,2": "compile_error", "16,8,1": "invalid_config", "32,8,2": "runtime_error"}
    assert rows["16,8,1"]["time_median_us"] is None and rows["16,8,1"]["energy_j"] is None
    assert "InvalidConfig" in rows["16,8,1"]["reason"]
    assert imp.statuses == {"ok": 2, "compile_error": 1, "invalid_config": 1, "runtime_error": 1}
    assert imp.energy_columns == ["nvml_energy", "ps_energy"]
    assert {"ps_power", "nvml_power", "core_freq", "mem_freq", "temperature", "GFLOP/s"} <= set(imp.observer_columns)


def test_iterations_that_contradict_the_time_leave_the_time_to_decide(tmp_path: Path) -> None:
    # a record whose iterations average 500x below its time (iterations of something else): the
    # row keeps them as written, its time statistics are the record's time; a record within 2x
    # (observers move Kernel Tuner's time a little) keeps the median of its iterations
    recs = [_rec(16, 4, 1, time=50.0, times=[0.1, 0.1, 0.1]), _rec(32, 4, 1, time=1.2, times=[1.0, 1.1, 1.3])]
    imp = kt_rows(read_kt_cache(_write(tmp_path / "c.json", _header(problem_size=[1000, 500]), recs)))
    rows = {r["kt_key"]: r for r in imp.rows}
    bad, good = rows["16,4,1"], rows["32,4,1"]
    assert bad["time_median_us"] == pytest.approx(50000.0) and bad["time_mean_us"] == pytest.approx(50000.0)
    assert bad["times_us"] == pytest.approx([100.0, 100.0, 100.0]) and bad["repeats"] is None
    assert good["time_median_us"] == pytest.approx(1100.0) and good["repeats"] == 3
    assert imp.times_contradicted == 1 and imp.summary()["times_contradicted"] == 1


def test_04_cache_sentinel_and_problem_size_rule(tmp_path: Path) -> None:
    """Kernel Tuner 0.4: no problem_size, no objective, a failure stored as time = 1e20."""
    hdr = {"device_name": "GeForce GTX TITAN X", "kernel_name": "vector_add", "tune_params_keys": ["block_size_x"],
           "tune_params": {"block_size_x": [128, 256, 384]}}
    recs = [("128", {"block_size_x": 128, "time": 0.25}), ("256", {"block_size_x": 256, "time": 0.2}),
            ("384", {"block_size_x": 384, "time": 1e20})]
    path = _write(tmp_path / "vadd_04.json", hdr, recs)
    cache = read_kt_cache(path)
    assert cache.format == "kt-0.4"
    with pytest.raises(KTCacheError, match="problem_size"):
        kt_rows(cache)
    imp = kt_rows(cache, rules=GridRules.parse("problem_size=1000"))
    rows = {r["kt_key"]: r for r in imp.rows}
    assert rows["128"]["gsize"] == [1024] and rows["256"]["gsize"] == [1024] and rows["384"]["gsize"] == [1152]
    assert rows["128"]["time_median_us"] == pytest.approx(250.0) and rows["128"]["repeats"] is None
    assert rows["384"]["status"] == "runtime_error" and "sentinel" in rows["384"]["reason"]


def test_schema_versioned_and_open_cache(tmp_path: Path) -> None:
    """A cache with schema_version 1.0.0, and one left open by an interrupted run (trailing comma)."""
    hdr = _header(schema_version="1.0.0", problem_size=[64, 64], objective="time")
    path = _write(tmp_path / "v100.json", hdr, [_rec(16, 4, 1, time=0.1, times=[0.1])])
    cache = read_kt_cache(path)
    assert cache.format == "kt-schema-1.0.0"
    assert kt_rows(cache).rows[0]["gsize"] == [64, 64]
    text = json.dumps({**_header(problem_size=[64, 64], objective="time"), "cache": {}}, indent="")[:-3]
    text += '\n"16,4,1": {"block_size_x": 16, "block_size_y": 4, "tile_size_x": 1, "time": 0.3},'
    text += '\n"32,4,1": {"block_size_x": 32, "block_size_y": 4, "tile_size_x": 1, "time": 0.2},'
    (tmp_path / "open.json").write_text(text)
    cache = read_kt_cache(tmp_path / "open.json")
    assert not cache.closed and [k for k, _ in cache.records] == ["16,4,1", "32,4,1"]
    assert [r["time_median_us"] for r in kt_rows(cache).rows] == pytest.approx([300.0, 200.0])


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_import_kt_command_writes_rows_with_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "mm.cl"
    src.write_text(MATMUL)
    out = tmp_path / "ds"
    code, text, err = _run(["dataset", "import-kt", str(cache_1x(tmp_path)), "--kernel", str(src), "--out", str(out),
                            "--grid", "grid_div_x=block_size_x*tile_size_x", "--arg", "n=1000", "--json"], capsys)
    assert code == 0, err
    info = json.loads(text)
    assert info["rows"] == 5 and info["rows_appended"] == 5 and info["rows_with_energy"] == 2
    df = read_dataset(out)
    assert len(df) == 5 and set(df["status"]) == {"ok", "compile_error", "invalid_config", "runtime_error"}
    ok = df[df["status"] == "ok"]
    assert sorted(ok["time_median_us"]) == pytest.approx([500.0, 1750.0])
    args = json.loads(ok.iloc[0]["args"])
    assert [a["name"] for a in args] == ["C", "A", "B", "n"]
    assert args[0]["count"] == 1000 * 500            # simple selection over the problem size
    assert (out / "kernels" / "kernels.jsonl").is_file()
    # a rerun adds nothing
    code, text, _ = _run(["dataset", "import-kt", str(cache_1x(tmp_path)), "--kernel", str(src), "--out", str(out),
                          "--grid", "grid_div_x=block_size_x*tile_size_x", "--json"], capsys)
    assert code == 0 and json.loads(text)["rows_appended"] == 0 and len(read_dataset(out)) == 5
    from kernelcast.datagen.frame import load_measured_frame

    frame, counts = load_measured_frame(out)
    assert counts["rows_ok"] == 2 and frame["source"].notna().all()
    assert np.isfinite(frame["energy_j"].astype(float)).all()


@pytest.mark.parametrize("content, grid, message", [
    ("not json at all {", None, "not a Kernel Tuner cache (not JSON"),
    ('{"results": []}', None, "the T4 file holds no result"),
    ('{"other": []}', None, "not a Kernel Tuner cache or T4 file (no 'kernel_name'"),
    ("[1, 2]", None, "not a Kernel Tuner cache (a JSON list"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["tile"], "problem_size": 64,
                 "cache": {"2": {"tile": 2, "time": 1.0}}}), None, "no block-size parameter"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["block_size_x"], "problem_size": 64,
                 "cache": {"a": {"block_size_x": "wide", "time": 1.0}}}), None, "'block_size_x' has the value 'wide'"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["block_size_x"], "problem_size": ["n_rows"],
                 "cache": {"8": {"block_size_x": 8, "time": 1.0}}}), None, "uses 'n_rows'"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["block_size_x"], "problem_size": "callable",
                 "cache": {"8": {"block_size_x": 8, "time": 1.0}}}), None, "callable"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["block_size_x"], "problem_size": 64,
                 "cache": {"8": {"block_size_x": 8, "time": 1.0}}}), "grid_div_x=block_size_x*unroll", "uses 'unroll'"),
    (json.dumps({"kernel_name": "k", "tune_params_keys": ["block_size_x"], "problem_size": 64,
                 "cache": {"8": {"block_size_x": 8, "time": 1.0}}}), "grid_size=4", "unknown rule 'grid_size'"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                                   grid: str | None, message: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(content)
    out = tmp_path / "ds"
    argv = ["dataset", "import-kt", str(path), "--out", str(out)] + (["--grid", grid] if grid else [])
    code, text, err = _run(argv, capsys)
    assert code == 2 and text == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_import_into_a_dataset_of_another_device_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ds"
    assert _run(["dataset", "import-kt", str(cache_1x(tmp_path)), "--out", str(out)], capsys)[0] == 0
    other = json.loads((tmp_path / "mm_1x.json").read_text())
    other["device_name"] = "NVIDIA A100-SXM4-40GB"
    (tmp_path / "other.json").write_text(json.dumps(other))
    code, text, err = _run(["dataset", "import-kt", str(tmp_path / "other.json"), "--out", str(out)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "device_identity" in err
    assert len(read_dataset(out)) == 5
    code, text, _ = _run(["dataset", str(out), "--json"], capsys)          # the summary still answers
    assert code == 0 and json.loads(text)["rows"] == 5

"""The Kernel Tuner round trip on this machine's OpenCL device, for real: kernelcast's shortlist
(``tune --format kernel-tuner``) is tuned by ``kernel_tuner.tune_kernel``, its cache is imported
(``dataset import-kt``) and the imported rows are predicted by kernelcast."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kernelcast.bench.kt_roundtrip import MATMUL, VADD  # the kernels the round-trip benchmark tunes
from kernelcast.instrument.backends.base import DeviceInfo

from kernelcast.cli import main

kernel_tuner = pytest.importorskip("kernel_tuner", reason="kernel-tuner is not installed (pip install kernelcast[kt])")

PROFILE = str(Path(__file__).resolve().parents[1] / "calib" / "profiles" / "pocl-local.json")


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _predict(dataset: Path) -> tuple[object, np.ndarray]:
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.analytical import AnalyticalModel

    frame, _ = load_measured_frame(dataset)
    pred = AnalyticalModel(load_profile(PROFILE)).predict(frame)
    return frame, np.asarray(pred.time_us, dtype=float)


def test_shortlist_tuned_by_kernel_tuner_imported_and_predicted(tmp_path: Path, device: DeviceInfo,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    n = 1 << 18
    src = tmp_path / "vadd.cl"
    src.write_text(VADD)
    shortlist = tmp_path / "shortlist.json"
    _main(["tune", "--kernel", str(src), "--gsize", str(n), "--arg", f"n={n}", "--top", "4", "--max-wg", "256",
           "--profile", PROFILE, "--format", "kernel-tuner", "--out", str(shortlist)], capsys)
    sl = json.loads(shortlist.read_text())
    chosen = [c["block_size_x"] for c in sl["configurations"]]
    assert len(chosen) == 4 and sl["problem_size"] == [n]

    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    c = np.zeros_like(a)
    cache = tmp_path / "vadd_cache.json"
    results, _env = kernel_tuner.tune_kernel(
        sl["kernel_name"], VADD, tuple(sl["problem_size"]), [c, a, b, np.int32(n)], sl["tune_params"],
        restrictions=sl["restrictions"] or None, lang="OpenCL", platform=device.platform_index,
        device=device.device_index, cache=str(cache), iterations=5, quiet=True, answer=[a + b, None, None, None])
    assert sorted(r["block_size_x"] for r in results) == sorted(chosen)   # exactly the shortlist was tuned

    out = tmp_path / "ds"
    info = json.loads(_main(["dataset", "import-kt", str(cache), "--kernel", str(src), "--out", str(out),
                             "--arg", f"n={n}", "--json"], capsys))
    assert info["format"] == "kt-1.x" and info["rows"] == 4 and info["rows_by_status"] == {"ok": 4}
    frame, pred = _predict(out)
    raw = json.loads(cache.read_text())["cache"]
    assert len(frame) == len(raw) == 4
    for _, row in frame.iterrows():
        rec = raw[row["kt_key"]]
        assert list(row["lsize"]) == [rec["block_size_x"]]
        assert list(row["gsize"]) == [-(-n // rec["block_size_x"]) * rec["block_size_x"]]
        assert row["time_mean_us"] == pytest.approx(rec["time"] * 1e3, rel=1e-12)
        assert row["time_median_us"] == pytest.approx(float(np.median(rec["times"])) * 1e3, rel=1e-12)
        assert list(row["times_us"]) == pytest.approx([t * 1e3 for t in rec["times"]], rel=1e-12)
    assert np.isfinite(pred).all() and (pred > 0).all()
    # kernelcast's prediction of a vector add of 2^18 floats (3 MiB moved) and the measured times agree within 20x
    ratio = pred / frame["time_median_us"].to_numpy(dtype=float)
    assert ((ratio > 1 / 20) & (ratio < 20)).all(), ratio


def test_matmul_2d_sweep_with_tile_parameter(tmp_path: Path, device: DeviceInfo,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A 2D sweep with a tile parameter and a grid divisor: the import reproduces Kernel Tuner's launch
    (rows, configurations) and its times, and the static analysis sees the tile macro per row."""
    n = 128
    src = tmp_path / "mm.cl"
    src.write_text(MATMUL)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.zeros_like(a)
    tune_params = {"block_size_x": [8, 16], "block_size_y": [2, 4], "tile_size_x": [1, 4]}
    cache = tmp_path / "mm_cache.json"
    results, _ = kernel_tuner.tune_kernel(
        "matmul", MATMUL, (n, n), [c, a, b, np.int32(n)], tune_params, grid_div_x=["block_size_x", "tile_size_x"],
        lang="OpenCL", platform=device.platform_index, device=device.device_index, cache=str(cache), iterations=3,
        quiet=True, answer=[a @ b, None, None, None], atol=1e-2)
    assert len(results) == 8
    out = tmp_path / "ds"
    info = json.loads(_main(["dataset", "import-kt", str(cache), "--kernel", str(src), "--out", str(out),
                             "--grid", "grid_div_x=block_size_x*tile_size_x", "--arg", f"n={n}", "--json"], capsys))
    assert info["rows"] == 8 and info["rows_by_status"] == {"ok": 8}
    frame, pred = _predict(out)
    raw = json.loads(cache.read_text())["cache"]
    for _, row in frame.iterrows():
        rec = raw[row["kt_key"]]
        bx, by, tx = rec["block_size_x"], rec["block_size_y"], rec["tile_size_x"]
        assert list(row["lsize"]) == [bx, by]
        assert list(row["gsize"]) == [-(-n // (bx * tx)) * bx, -(-n // by) * by]
        assert f"-Dtile_size_x={tx}" in row["build_options"]
        assert row["time_median_us"] == pytest.approx(float(np.median(rec["times"])) * 1e3, rel=1e-12)
    assert np.isfinite(pred).all()
    # the analytical model sees the tile loop: a tile of 4 does 4x the work per work-item on 1/4 of the items,
    # so its prediction for the same block stays within 4x of the tile-1 prediction
    key = {(r["tp_block_size_x"], r["tp_block_size_y"], r["tp_tile_size_x"]): p
           for (_, r), p in zip(frame.iterrows(), pred)}
    for bx in (8, 16):
        for by in (2, 4):
            assert 0.25 <= key[(bx, by, 4)] / key[(bx, by, 1)] <= 4.0

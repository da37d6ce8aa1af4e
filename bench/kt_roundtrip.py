"""The Kernel Tuner round trip on this machine's OpenCL device: figures.

    .venv/bin/python bench/kt_roundtrip.py [--work DIR] [--device SPEC] [--json]

1. ``kernelcast tune --format kernel-tuner`` shortlists the best 16 work-group sizes of a vector add
   of 2^20 floats; Kernel Tuner tunes exactly the shortlist (``tune_kernel`` with its tune_params and
   restrictions); ``kernelcast dataset import-kt`` imports the cache; the analytical model predicts the
   imported rows.
2. The same for a full block-size sweep of the vector add (8..1024) and for a 2D matmul sweep
   (256x256; block_size_x, block_size_y, tile_size_x; grid divisor ``block_size_x*tile_size_x``).

For each: configurations tuned, Kernel Tuner's wall time, rows imported, whether the imported times
equal the cache's, Spearman's rho of the predicted against the measured times, the measured time of
the predicted best relative to the measured best, and the median |log2(pred / measured)|.
Needs kernel-tuner (``pip install kernelcast[kt]``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.options import Parser

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VADD = """__kernel void vector_add(__global float *c, __global const float *a, __global const float *b, int n) {
    int i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
"""
MATMUL = """__kernel void matmul(__global float *C, __global const float *A, __global const float *B, int n) {
    int x = get_global_id(0) * tile_size_x;
    int y = get_global_id(1);
    for (int t = 0; t < tile_size_x; t++) {
        float s = 0.0f;
        for (int k = 0; k < n; k++) s += A[y * n + k] * B[k * n + x + t];
        if (y < n && x + t < n) C[y * n + x + t] = s;
    }
}
"""
PROFILE = str(Path(__file__).resolve().parent.parent / "calib" / "profiles" / "pocl-local.json")


def _run(argv: list[str]) -> None:
    """One kernelcast command, as a user runs it (a benchmark script drives the command line)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    code = subprocess.run([sys.executable, "-m", "kernelcast", *argv], env=env).returncode
    if code != 0:
        raise SystemExit(f"kernelcast {' '.join(argv)} failed with status {code}")


def figures(label: str, cache: Path, dataset: Path, tuned: int, seconds: float) -> dict[str, Any]:
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.analytical import AnalyticalModel

    from kernelcast.metrics import spearman

    frame, _ = load_measured_frame(dataset)
    raw = json.loads(cache.read_text())["cache"]
    same = all(abs(r["time_mean_us"] - raw[r["kt_key"]]["time"] * 1e3) <= 1e-9 * r["time_mean_us"]
               for _, r in frame.iterrows())
    pred = np.asarray(AnalyticalModel(load_profile(PROFILE)).predict(frame).time_us, dtype=float)
    y = frame["time_median_us"].to_numpy(dtype=float)
    return {"sweep": label, "configurations_tuned": tuned, "kernel_tuner_s": seconds, "rows_imported": len(frame),
            "times_equal_cache": same, "spearman": spearman(pred, y),
            "predicted_best_over_measured_best": float(y[int(np.argmin(pred))] / y.min()),
            "median_abs_log2": float(np.median(np.abs(np.log2(pred / y))))}


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.kt_roundtrip", description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", help="working directory (default: a temporary one)")
    ap.add_argument("--device", default="auto", help="OpenCL device (kernelcast spec)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import kernel_tuner
    from kernelcast.instrument.backends import select_device

    dev = select_device(a.device)
    work = Path(a.work or tempfile.mkdtemp(prefix="kernelcast-kt-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "vadd.cl").write_text(VADD)
    (work / "mm.cl").write_text(MATMUL)
    where = {"lang": "OpenCL", "platform": dev.platform_index, "device": dev.device_index, "quiet": True}
    out = []

    n = 1 << 20
    rng = np.random.default_rng(0)
    x, z = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    args = [np.zeros_like(x), x, z, np.int32(n)]
    _run(["tune", "--kernel", str(work / "vadd.cl"), "--gsize", str(n), "--arg", f"n={n}", "--top", "16",
          "--profile", PROFILE, "--format", "kernel-tuner", "--out", str(work / "shortlist.json")])
    sl = json.loads((work / "shortlist.json").read_text())
    t0 = time.perf_counter()
    res, _ = kernel_tuner.tune_kernel(sl["kernel_name"], VADD, tuple(sl["problem_size"]), args, sl["tune_params"],
                                      restrictions=sl["restrictions"] or None, cache=str(work / "vadd_sl.json"),
                                      iterations=7, **where)
    dt = time.perf_counter() - t0
    _run(["dataset", "import-kt", str(work / "vadd_sl.json"), "--kernel", str(work / "vadd.cl"), "--arg", f"n={n}",
          "--out", str(work / "ds_vadd_sl"), "--json"])
    out.append(figures("vadd 2^20, kernelcast shortlist of 16", work / "vadd_sl.json", work / "ds_vadd_sl", len(res),
                       dt))

    t0 = time.perf_counter()
    res, _ = kernel_tuner.tune_kernel("vector_add", VADD, n, args, {"block_size_x": [8 << i for i in range(8)]},
                                      cache=str(work / "vadd_sweep.json"), iterations=7, **where)
    dt = time.perf_counter() - t0
    _run(["dataset", "import-kt", str(work / "vadd_sweep.json"), "--kernel", str(work / "vadd.cl"), "--arg",
          f"n={n}", "--out", str(work / "ds_vadd_sweep"), "--json"])
    out.append(figures("vadd 2^20, block sizes 8..1024", work / "vadd_sweep.json", work / "ds_vadd_sweep", len(res),
                       dt))

    m = 256
    mats = [np.zeros((m, m), np.float32), rng.standard_normal((m, m)).astype(np.float32),
            rng.standard_normal((m, m)).astype(np.float32), np.int32(m)]
    tp = {"block_size_x": [4, 8, 16, 32], "block_size_y": [1, 2, 4, 8], "tile_size_x": [1, 2, 4]}
    t0 = time.perf_counter()
    res, _ = kernel_tuner.tune_kernel("matmul", MATMUL, (m, m), mats, tp, grid_div_x=["block_size_x", "tile_size_x"],
                                      cache=str(work / "mm.json"), iterations=5, **where)
    dt = time.perf_counter() - t0
    _run(["dataset", "import-kt", str(work / "mm.json"), "--kernel", str(work / "mm.cl"), "--grid",
          "grid_div_x=block_size_x*tile_size_x", "--arg", f"n={m}", "--out", str(work / "ds_mm"), "--json"])
    out.append(figures("matmul 256x256, 48 configurations", work / "mm.json", work / "ds_mm", len(res), dt))

    if a.json:
        print(json.dumps({"device": dev.name, "work": str(work), "sweeps": out}, indent=2))
        return 0
    print(f"device {dev.spec} {dev.name}; work directory {work}")
    for f in out:
        print(f"{f['sweep']}: {f['configurations_tuned']} tuned by Kernel Tuner in {f['kernel_tuner_s']:.1f} s, "
              f"{f['rows_imported']} rows imported (times equal to the cache: {f['times_equal_cache']}); "
              f"Spearman(pred, measured) {f['spearman']:.3f}; predicted best measured "
              f"{f['predicted_best_over_measured_best']:.2f}x the measured best; median |log2(pred/measured)| "
              f"{f['median_abs_log2']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

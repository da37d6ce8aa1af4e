"""Prompt mode (LLMPerf) vs efficient mode of the learned model, trained for the same budget on one dataset.

    .venv/bin/python bench/learned_modes.py --data DATASET [--epochs 3] [--out DIR]

Both modes train on the same rows (read once), the same kernel split and the same number of epochs,
from scratch, with their default batch sizes; the script prints validation accuracy (MAPE over rows
and per kernel, median APE, Spearman rho), training and inference samples/s, and the speed-up of
the efficient mode.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelcast.datagen.frame import load_measured_frame  # noqa: E402
from kernelcast.train.loop import TrainOptions, fit_frame  # noqa: E402

from kernelcast.console import fmt_table  # noqa: E402
from kernelcast.options import Parser


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.learned_modes", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="dataset directory")
    ap.add_argument("--out", help="work directory (default: a temporary one)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, help="stop each mode after this many optimizer steps (a speed check)")
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--modes", default="prompt,efficient")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    frame, counts = load_measured_frame(args.data)
    out = Path(args.out or tempfile.mkdtemp(prefix="kernelcast-bench-"))
    print(f"dataset {args.data}: {len(frame)} training rows of {frame['kernel_id'].nunique()} kernels; "
          f"{args.epochs} epoch(s) per mode; work dir {out}", flush=True)
    results = {}
    for mode in args.modes.split(","):
        opts = TrainOptions(mode=mode, epochs=args.epochs, seed=args.seed, resume=False, progress=args.progress,
                            max_steps=args.max_steps, threads=args.threads)
        t0 = time.perf_counter()
        res = fit_frame(frame, out_dir=out / mode, options=opts, counts=dict(counts), dataset=args.data)
        wall = time.perf_counter() - t0
        val = res.metrics["validation"]
        n_val = val["time"]["rows"] if val.get("time") else 0
        vf = frame[frame["kernel_id"].isin(res.metrics["split"]["val_kernels"])]
        t1 = time.perf_counter()
        res.predictor.predict(vf)
        infer = len(vf) / (time.perf_counter() - t1) if len(vf) else float("nan")
        results[mode] = {"metrics": res.metrics, "wall_s": wall, "infer_rows_per_s": infer, "val_rows": n_val}
        print(f"  {mode}: done in {wall:.0f} s", flush=True)

    rows = []
    for mode, r in results.items():
        m = r["metrics"]
        v = m["validation"].get("time") or {}
        rows.append([mode, m["model"]["parameters"], m["options"]["batch_size"], m["training"]["steps"],
                     v.get("mape"), v.get("mape_per_kernel"), v.get("median_ape"), v.get("spearman"),
                     m["training"]["samples_per_s"], r["infer_rows_per_s"], r["wall_s"]])
    print()
    print(fmt_table(rows, ["mode", "params", "batch", "steps", "MAPE %", "MAPE/kernel %", "median APE %",
                           "Spearman", "train samples/s", "predict rows/s", "wall s"]))
    if {"prompt", "efficient"} <= results.keys():
        sp = results["efficient"]["metrics"]["training"]["samples_per_s"] / \
            results["prompt"]["metrics"]["training"]["samples_per_s"]
        ip = results["efficient"]["infer_rows_per_s"] / results["prompt"]["infer_rows_per_s"]
        print(f"\nefficient mode: {sp:.1f}x the training samples/s of prompt mode, {ip:.1f}x its prediction rows/s")
    d = next(iter(results.values()))["metrics"]["data"]
    print(f"split: {d['train_rows']} training rows ({d['train_kernels']} kernels), {d['val_rows']} validation rows "
          f"({d['val_kernels']} kernels); prompts discarded over the context: "
          f"{d['discarded_over_length_train'] + d['discarded_over_length_val']}")
    (out / "bench.json").write_text(json.dumps({k: {**v, "metrics": {kk: vv for kk, vv in v["metrics"].items()
                                                                      if kk != "split"}}
                                                for k, v in results.items()}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

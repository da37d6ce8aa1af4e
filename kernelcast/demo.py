"""``kernelcast demo``: the README's main job, end to end on the embedded defaults.

1. corpus: a slice of the bundled corpus (every fourth kernel) plus synthetic kernels;
2. ``datagen``: measure them over sampled launch configurations on the local device (with IQR
   rebalancing) into a dataset;
3. ``calib --quick``: calibrate the device into a profile;
4. ``train``: the small learned model (efficient mode, from scratch) on the dataset;
5. ``blend``: fit the analytical+learned blend on the model's validation kernels;
6. ``bench``: the project's own suite (kernels not in the training corpus), measured and predicted
   by all three models, with the report and plots.

Everything printed is measured in this run: the output directory is emptied first (``--resume``
keeps it, and each stage then resumes instead).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="the main job: corpus -> dataset -> calibration -> training -> bench",
                       description=__doc__.split("\n\n")[0] + " " + " ".join(__doc__.split("\n\n")[1].split()))
    p.add_argument("--out", default="out/demo", help="working directory (default out/demo)")
    p.add_argument("--device", help="OpenCL device: auto, P:D, or part of its name")
    p.add_argument("--meter", default="auto", help="energy meter: auto, nvml, rapl, none")
    p.add_argument("--bundled-every", type=int, default=4, help="take every N-th bundled kernel (4)")
    p.add_argument("--synthetic", type=int, default=30, help="synthetic kernels (30)")
    p.add_argument("--configs-per-kernel", type=int, default=10)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-sizes", type=int, default=6, help="problem sizes per suite kernel (6)")
    p.add_argument("--resume", action="store_true", help="keep the working directory and resume each stage")
    p.set_defaults(func=run)


def _stage(n: int, title: str, t0: float) -> None:
    print(f"\n=== [{n}/6] {title}   (t = {time.perf_counter() - t0:.0f} s)", flush=True)


def _call(argv: list[str]) -> None:
    from kernelcast.cli import UsageError, build_parser

    args = build_parser().parse_args(argv)
    try:
        rc = int(args.func(args) or 0)
    except UsageError as e:
        raise UsageError(f"demo stage '{argv[0]}': {e}") from None
    if rc != 0:
        raise SystemExit(rc)


def run(args: argparse.Namespace) -> int:
    from datagen.cli import bundled_dir
    from datagen.corpus import ingest_to
    from datagen.corpus_store import read_records, write_corpus
    from datagen.synth import generate_kernels

    t0 = time.perf_counter()
    out = Path(args.out)
    if out.exists() and not args.resume:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    dev = ["--device", args.device] if args.device else []

    _stage(1, "corpus: bundled slice + synthetic kernels", t0)
    corpus = out / "corpus"
    if not (corpus / "kernels.jsonl").is_file():
        bundled = out / "bundled"
        ingest_to(bundled, [bundled_dir()], compile_fn=None)
        records = read_records(bundled)[:: max(1, args.bundled_every)]
        records += [k.to_dict() for k in generate_kernels(args.synthetic, seed=2026)]
        write_corpus(corpus, records, {"source": "demo: bundled slice + synthetic", "seed": 2026})
    print(f"{len(read_records(corpus))} kernels in {corpus}")

    _stage(2, "datagen: measure the corpus on the device", t0)
    dataset = out / "dataset"
    _call(["datagen", "--corpus", str(corpus), "--out", str(dataset), "--configs-per-kernel",
           str(args.configs_per_kernel), "--lsizes-per-kernel", "2", "--min-time", "0.01", "--repeats", "5",
           "--max-items", str(1 << 22), "--meter", args.meter, "--quiet", *dev])

    _stage(3, "calib: quick calibration of the device", t0)
    profile = out / "profile.json"
    _call(["calib", "--quick", "--out", str(profile), "--meter", "none", "--no-progress", *dev])

    _stage(4, "train: the learned model (efficient mode, small CodeGen from scratch)", t0)
    model = out / "model"
    _call(["train", "--data", str(dataset), "--out", str(model), "--mode", "efficient", "--epochs",
           str(args.epochs), "--no-progress"] + ([] if args.resume else ["--no-resume"]))

    _stage(5, "blend: fit analytical + learned on the validation kernels", t0)
    _call(["blend", "--data", str(dataset), "--model", str(model), "--profile", str(profile)])

    _stage(6, "bench: the project's own suite, measured and predicted by all three models", t0)
    report = out / "report"
    _call(["bench", "--out", str(report), "--model", str(model), "--profile", str(profile),
           "--max-sizes", str(args.max_sizes), "--meter", args.meter, *dev])
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s; report {report / 'REPORT.md'}, plots in "
          f"{report / 'plots'}, dataset {dataset}, model {model}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from kernelcast.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))

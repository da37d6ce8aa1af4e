"""``kernelcast demo``: the README's main job, end to end on the embedded defaults.

1. corpus: a slice of the bundled corpus (every twelfth kernel; ``--full``: every fourth) plus synthetic kernels;
2. ``datagen``: measure them over sampled launch configurations on the local device (with IQR
   rebalancing) into a dataset;
3. ``calib --quick``: calibrate the device into a profile (``--full``: the median of three runs);
4. ``train``: the two learned models on the dataset: the tabular model (gradient-boosted trees on
   the analytical model's residual) and the small CodeGen model (efficient mode, from scratch);
5. ``blend``: for each, the analytical+learned blend fitted on out-of-fold predictions (stacking);
6. ``bench``: the project's own suite (kernels not in the training corpus), measured once and
   predicted by the analytical model, each learned model and its blend, with the reports and plots.

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

from kernelcast.errors import UsageError
from kernelcast.options import SWEEP_ROUNDS_HELP, add_device, add_meter, add_quiet, positive_int

#: the file that marks a directory as the demo's own (the demo deletes only such a directory)
DEMO_MARKER = ".kernelcast-demo"


def _is_demo_dir(out: Path) -> bool:
    """The demo's own working directory: its marker, or (made before the marker existed) nothing but
    the entries the demo writes."""
    names = {p.name for p in out.iterdir()}
    return DEMO_MARKER in names or names <= {"corpus", "bundled", "dataset", "profile.json", "model", "report"}


#: the demo's two sizes: the default shows every stage in minutes; ``--full`` is the larger run
#: (four times the kernels, four interleaved rounds per sweep, twice the suite's problem sizes)
PRESETS: dict[str, dict[str, int]] = {
    "quick": {"bundled_every": 12, "synthetic": 12, "configs_per_kernel": 6, "epochs": 2, "max_sizes": 3,
              "sweep_rounds": 2, "calib_rounds": 1},
    "full": {"bundled_every": 4, "synthetic": 30, "configs_per_kernel": 8, "epochs": 3, "max_sizes": 6,
             "sweep_rounds": 4, "calib_rounds": 3},   # calib.local.QUICK_RUNS: the median of three quick runs
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="the main job: corpus -> dataset -> calibration -> training -> bench",
                       description=__doc__.split("\n\n")[0] + " " + " ".join(__doc__.split("\n\n")[1].split()))
    p.add_argument("--out", default="out/demo", help="working directory (default out/demo)")
    add_device(p)
    add_meter(p)
    q, f = PRESETS["quick"], PRESETS["full"]
    p.add_argument("--full", action="store_true",
                   help="the larger run: every option below takes its --full value (a few times longer)")
    p.add_argument("--bundled-every", type=positive_int, metavar="N",
                   help=f"take every N-th bundled kernel ({q['bundled_every']}; --full {f['bundled_every']})")
    p.add_argument("--synthetic", type=positive_int, metavar="N",
                   help=f"synthetic kernels ({q['synthetic']}; --full {f['synthetic']})")
    p.add_argument("--configs-per-kernel", type=positive_int, metavar="N",
                   help=f"regime samples per kernel ({q['configs_per_kernel']}; --full {f['configs_per_kernel']})")
    p.add_argument("--sweep-rounds", type=positive_int, metavar="N",
                   help=f"{SWEEP_ROUNDS_HELP} (datagen's and the suite's; {q['sweep_rounds']}; --full "
                        f"{f['sweep_rounds']})")
    p.add_argument("--epochs", type=positive_int, metavar="N",
                   help=f"CodeGen training epochs ({q['epochs']}; --full {f['epochs']})")
    p.add_argument("--max-sizes", type=positive_int, metavar="N",
                   help=f"problem sizes per suite kernel ({q['max_sizes']}; --full {f['max_sizes']})")
    p.add_argument("--resume", action="store_true", help="keep the working directory and resume each stage")
    add_quiet(p)
    p.set_defaults(func=run)


def demo_settings(args: argparse.Namespace) -> dict[str, int]:
    """The preset (quick, or ``--full``) with the options given on the command line over it."""
    out = dict(PRESETS["full" if args.full else "quick"])
    for name in out:
        if getattr(args, name, None) is not None:
            out[name] = getattr(args, name)
    return out


def _stage(n: int, title: str, t0: float) -> None:
    print(f"\n=== [{n}/6] {title}   (t = {time.perf_counter() - t0:.0f} s)", flush=True)


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)     # checked before the stages' modules (and torch) are imported
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not _is_demo_dir(out):
        # the demo replaces its working directory: never one it did not make
        raise UsageError(f"--out {args.out}: a directory the demo did not make (no {DEMO_MARKER}); "
                         f"give an empty or new directory")
    from kernelcast.bench.suite.compare import default_suite, print_table, run_bench
    from kernelcast.calib.local import calibrate_runs
    from kernelcast.calib.microbench import CalibOptions
    from kernelcast.calib.report import format_profile
    from kernelcast.config import device_spec
    from kernelcast.datagen.corpus import ingest_to
    from kernelcast.datagen.corpus_store import bundled_dir, read_corpus, read_records, write_corpus
    from kernelcast.datagen.generate import DatagenInterrupted, DatagenOptions, run_datagen
    from kernelcast.datagen.synth import generate_kernels
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.meters import check_meter_spec
    from kernelcast.train.blend import fit_blend_oof
    from kernelcast.train.loop import train_model
    from kernelcast.train.report import format_blend, format_metrics, format_tabular
    from kernelcast.train.tabular import train_tabular

    cfg = demo_settings(args)
    check_meter_spec(args.meter)
    device = select_device(device_spec(args.device))
    t0 = time.perf_counter()
    if out.exists() and not args.resume:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DEMO_MARKER).write_text("a kernelcast demo working directory: 'kernelcast demo' replaces it\n")

    _stage(1, "corpus: bundled slice + synthetic kernels", t0)
    corpus = out / "corpus"
    if not (corpus / "kernels.jsonl").is_file():
        bundled = out / "bundled"
        ingest_to(bundled, [bundled_dir()], compile_fn=None)
        records = read_records(bundled)[:: cfg["bundled_every"]]
        records += [k.to_dict() for k in generate_kernels(cfg["synthetic"], seed=2026)]
        write_corpus(corpus, records, {"source": "demo: bundled slice + synthetic", "seed": 2026})
    print(f"{len(read_records(corpus))} kernels in {corpus}")

    _stage(2, "datagen: measure the corpus on the device", t0)
    dataset = out / "dataset"
    # regime samples plus one tuning sweep per kernel (one problem, four local sizes); no activity
    # records (an instrumented run per row: the demo is about the models)
    opts = DatagenOptions(configs_per_kernel=cfg["configs_per_kernel"], lsizes_per_kernel=2, max_total_items=1 << 22,
                          sweeps_per_kernel=1, lsizes_per_sweep=4, sweep_rounds=cfg["sweep_rounds"], activity=False)
    opts.timing.min_time_s = 0.01
    opts.timing.min_repeats = 5
    try:
        run_ = run_datagen(read_corpus(corpus), dataset, device, opts, meter=args.meter, timeout_s=30.0,
                           corpus=str(corpus.resolve()), progress=False)
    except DatagenInterrupted as e:
        print(f"\n{e}", file=sys.stderr)
        return 130
    print(run_.summary.format())
    print(f"dataset: {dataset} ({run_.rows_total} rows in all)")

    _stage(3, "calib: quick calibration of the device", t0)
    profile_path = out / "profile.json"
    tc = time.perf_counter()
    profile, cal = calibrate_runs(device, CalibOptions(quick=True), cfg["calib_rounds"], meter="none", timeout_s=60.0)
    if not profile.values:
        raise SystemExit(f"kernelcast: error: calibration measured nothing ({'; '.join(cal.failures)})")
    profile.save(profile_path)
    print(format_profile(profile))
    print(f"\nprofile written to {profile_path} ({len(profile.values)} values, {cal.n_runs} measurements, "
          f"{time.perf_counter() - tc:.1f} s)")

    _stage(4, "train: the tabular model and the small CodeGen model (efficient mode, from scratch)", t0)
    tabular = out / "tabular"
    print(format_tabular(train_tabular(dataset, tabular, profile)))
    model = out / "model"
    result = train_model(dataset, model, mode="efficient", epochs=cfg["epochs"], progress=False,
                         resume=args.resume)
    print(format_metrics(result.metrics, str(result.out_dir)))

    _stage(5, "blend: analytical + each learned model, stacked on out-of-fold predictions", t0)
    for d in (tabular, model):
        print(format_blend(fit_blend_oof(dataset, d, profile, folds=3, codegen_epochs=cfg["epochs"]), str(d)))
        print()

    _stage(6, "bench: the project's own suite, measured once, predicted by every model", t0)
    reports: list[Path] = []
    for name, d in (("tabular", tabular), ("codegen", model)):
        report = out / f"report-{name}"
        first = reports[0] / "results.csv" if reports else None
        tab, report_md = run_bench(str(default_suite()), str(report), model=str(d), profile_spec=str(profile_path),
                                   device=device.spec, meter=args.meter, max_sizes=cfg["max_sizes"],
                                   progress=sys.stderr.isatty() and not args.quiet, rounds=cfg["sweep_rounds"],
                                   measured=str(first) if first else None)
        print(f"learned model: {name} ({d})" + (f"; measurements of {first}" if first else ""))
        print(print_table(tab))
        print(f"report: {report_md} (plots in {report_md.parent / 'plots'})\n")
        reports.append(report)
    print(f"demo finished in {time.perf_counter() - t0:.0f} s; reports {', '.join(str(r) for r in reports)}, "
          f"dataset {dataset}, models {tabular} and {model}")
    return 0


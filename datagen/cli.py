"""Subcommands of the dataset stage: ``corpus ingest``, ``corpus synth``, ``datagen``, ``dataset``."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelcast.console import to_json
from kernelcast.errors import UsageError
from kernelcast.options import bounded_int, check_out_dir, fraction, nonneg_float, positive_float, positive_int, seed

log = logging.getLogger(__name__)


#: most kernels one ``corpus synth`` makes (each is generated, formatted and written)
MAX_SYNTH = 100_000


def bundled_dir() -> Path:
    return Path(__file__).parent / "bundled"


# ---------------------------------------------------------------------------------------------
# corpus


def cmd_ingest(args: argparse.Namespace) -> int:
    from datagen.corpus import ingest_to, opencl_compile_fn
    from instrument.backends import select_device
    from kernelcast.config import device_spec

    check_out_dir(args.out)
    sources: list[str | Path] = [bundled_dir() if s == "bundled" else Path(s) for s in args.sources]
    for s in sources:
        if not Path(s).exists():
            raise UsageError(f"no such file or directory: {s}")
    defines = {}
    for d in args.define:
        name, _, value = d.partition("=")
        if not name:
            raise UsageError(f"-D {d!r}: expected NAME or NAME=VALUE")
        defines[name] = value
    compile_fn = None
    if not args.no_compile:
        compile_fn = opencl_compile_fn(select_device(device_spec(args.device)))
    report = ingest_to(args.out, sources, compile_fn=compile_fn, defines=defines or None,
                       near_dup_threshold=args.near_dup, progress=sys.stderr.isatty())
    if args.json:
        print(to_json({"report": report.to_dict(), "corpus": args.out}))
        return 0
    print(report.format_table())
    print(f"corpus written to {args.out}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from datagen.synth import write_synth_corpus

    check_out_dir(args.out)
    out = write_synth_corpus(args.out, args.count, args.seed)
    print(f"{args.count} synthetic kernels (seed {args.seed}) written to {out}")
    return 0


def load_corpus_kernels(spec: str, limit: int | None = None, device: str | None = None) -> tuple[list[Any], str]:
    """Kernels of a corpus directory; ``bundled`` ingests the bundled corpus on the fly."""
    from datagen.corpus_store import read_corpus

    if spec == "bundled":
        from datagen.corpus import ingest_to

        with tempfile.TemporaryDirectory(prefix="kernelcast-bundled-") as tmp:   # removed once read
            ingest_to(Path(tmp), [bundled_dir()], compile_fn=None)
            kernels = read_corpus(Path(tmp))
        desc = "bundled"
    else:
        p = Path(spec)
        if not (p / "kernels.jsonl").is_file():
            raise UsageError(f"{spec}: not a corpus directory (no kernels.jsonl); make one with "
                             f"'kernelcast corpus ingest' or 'kernelcast corpus synth'")
        kernels = read_corpus(p)
        desc = str(p.resolve())
    if limit is not None:
        kernels = kernels[:limit]
    return kernels, desc


def _not_compiled(spec: str) -> int:
    """Kernels of a corpus directory marked as failing its compile check (read_corpus leaves them out)."""
    from datagen.corpus_store import read_records

    if spec == "bundled":
        return 0      # ingested on the fly without a compile check
    return sum(r.get("compile_status", "ok") not in ("ok", "unchecked") for r in read_records(spec))


# ---------------------------------------------------------------------------------------------
# datagen


def datagen_options(args: argparse.Namespace) -> Any:
    """The :class:`~datagen.generate.DatagenOptions` of a ``datagen`` command line, validated."""
    from datagen.args import SELECTORS
    from datagen.generate import DatagenOptions
    from datagen.memargs import KERNEL_SELECTORS

    if args.args not in SELECTORS and args.args not in KERNEL_SELECTORS and args.args != "both":
        raise UsageError(f"--args {args.args!r}: available selections are {', '.join([*SELECTORS, *KERNEL_SELECTORS])}")
    if args.configs_per_kernel < 1 or args.lsizes_per_kernel < 1:
        raise UsageError("--configs-per-kernel and --lsizes-per-kernel must be positive")
    try:
        ratio = tuple(int(x) for x in args.ratio.split(":"))
        assert len(ratio) == 3 and all(r >= 0 for r in ratio) and sum(ratio) > 0
    except (ValueError, AssertionError):
        raise UsageError(f"--ratio {args.ratio!r}: expected three non-negative integers like 25:60:15") from None
    opts = DatagenOptions(
        configs_per_kernel=args.configs_per_kernel, lsizes_per_kernel=args.lsizes_per_kernel, args=args.args,
        rebalance=None if args.rebalance == "none" else args.rebalance, k=args.k, ratio=ratio,
        max_total_items=args.max_items, seed=args.seed, validity=not args.no_validity,
        keep_invalid=args.keep_invalid,
    )
    opts.timing.min_time_s = args.min_time
    opts.timing.min_repeats = args.repeats
    return opts


def cmd_datagen(args: argparse.Namespace) -> int:
    from datagen.dataset import existing_dataset
    from datagen.generate import DatagenInterrupted, run_datagen
    from instrument.backends import select_device
    from instrument.meters import check_meter_spec
    from kernelcast.config import device_spec

    opts = datagen_options(args)
    check_meter_spec(args.meter)
    check_out_dir(args.out)
    existing_dataset(Path(args.out))         # a damaged or foreign --out: one line, before any work
    corpora = [load_corpus_kernels(c, None) for c in args.corpus]
    kernels = [k for ks, _ in corpora for k in ks]
    if args.limit is not None:
        kernels = kernels[: args.limit]
    not_compiled = sum(_not_compiled(c) for c in args.corpus)
    if not kernels:
        raise UsageError("the corpus holds no kernels" + (f" that compiled ({not_compiled} failed the corpus's "
                                                          f"compile check)" if not_compiled else ""))
    if not_compiled and not args.json:
        print(f"note: {not_compiled} corpus kernel(s) failed the corpus's compile check and are not measured",
              file=sys.stderr)
    device = select_device(device_spec(args.device))
    try:
        run = run_datagen(kernels, args.out, device, opts, meter=args.meter, timeout_s=args.timeout,
                          corpus=",".join(d for _, d in corpora), progress=not args.quiet and not args.json)
    except DatagenInterrupted as e:
        print(f"\n{e}", file=sys.stderr)
        return 130
    if args.json:
        print(to_json({"summary": run.summary.to_dict(), "dataset": args.out, "rows_total": run.rows_total,
                       "corpus_not_compiled": not_compiled}))
        return 0
    print(run.summary.format())
    print(f"dataset: {args.out} ({run.rows_total} rows in all)")
    return 0


# ---------------------------------------------------------------------------------------------
# dataset summary / plots


def cmd_dataset(args: argparse.Namespace) -> int:
    from datagen.dataset import read_dataset, read_manifest
    from datagen.report import plot_rebalance, summarize
    from kernelcast.options import check_in_dir, check_out_file

    check_in_dir(args.dataset, "dataset", "dataset directory")
    if args.plot_iqr:
        check_out_file(args.plot_out, "--plot-out")
    try:
        df = read_dataset(args.dataset)
        manifest = read_manifest(args.dataset)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    info = summarize(df, manifest)
    if args.json:
        print(to_json(info))
    else:
        print(info["text"])
    if args.plot_iqr:
        try:
            path = plot_rebalance(df, args.plot_iqr, Path(args.plot_out))
        except ValueError as e:
            raise UsageError(str(e)) from None
        print(f"IQR before/after histogram: {path}")
    return 0


def cmd_dataset_check(args: argparse.Namespace) -> int:
    from datagen.integrity import check_dataset

    report = check_dataset(args.dataset)
    print(to_json(report.to_dict()) if args.json else report.format())
    return 0 if report.ok else 1


def cmd_dataset_repair(args: argparse.Namespace) -> int:
    from datagen.integrity import repair_dataset

    report = repair_dataset(args.dataset)
    print(to_json(report.to_dict()) if args.json else report.format())
    return 0


def add_dataset_parser(sub: Any) -> Any:
    """``dataset [summary] DS``, ``dataset check DS``, ``dataset repair DS``. Further actions register
    on the returned subparsers (``add_parser(name, ...)`` with ``set_defaults(func=...)``)."""
    p = sub.add_parser("dataset", help="summarize, check or repair a dataset",
                       description="dataset DS (= dataset summary DS): rows by status, kernels by validity, the "
                                   "time distribution by regime and pass, optionally an IQR histogram. dataset "
                                   "check DS: name damaged files. dataset repair DS: quarantine them, keep every "
                                   "good row.")
    p.default_action = "summary"     # ``dataset DS`` means ``dataset summary DS`` (kernelcast.cli)
    dsub = p.add_subparsers(dest="dataset_command", metavar="ACTION")
    dsub.required = True
    q = dsub.add_parser("summary", help="summarize a dataset; plot the IQR rebalancing of one kernel",
                        description="Rows by status, kernels by validity, the time distribution by regime and "
                                    "pass; optionally a before/after IQR histogram (LLMPerf Figure 1).")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true")
    q.add_argument("--plot-iqr", metavar="KERNEL", help="kernel name (or 'auto') to plot")
    q.add_argument("--plot-out", default="iqr_rebalance.png", help="PNG path")
    q.set_defaults(func=cmd_dataset)
    q = dsub.add_parser("check", help="read every file of a dataset and name the damaged ones",
                        description="Read the manifest, every shard, every journal line and the kernel sources; "
                                    "list what is damaged. Changes nothing. Exit status 1 when damage is found.")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_dataset_check)
    q = dsub.add_parser("repair", help="quarantine the damaged files of a dataset, keeping every good row",
                        description="Move damaged shards, kernel sources and leftover files to DS/quarantine/TIME/ "
                                    "(never deleting), drop damaged journal lines (kept in the quarantine), "
                                    "rebuild a lost manifest; rerunning datagen re-measures what was lost.")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_dataset_repair)
    return dsub


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("corpus", help="build kernel corpora (ingest real code, or generate synthetic kernels)",
                       description="Build a corpus directory (kernels.jsonl + manifest.json).")
    csub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    csub.required = True
    q = csub.add_parser("ingest", help="normalize, split, dedupe and compile-check .cl files",
                        description="Preprocess, strip comments and __ qualifiers, clang-format, split into one "
                                    "record per kernel with the helpers it needs, remove exact and near "
                                    "duplicates, compile on the device and classify dimensionality.")
    q.add_argument("sources", nargs="+", help=".cl files or directories ('bundled' = the bundled corpus)")
    q.add_argument("--out", required=True, help="corpus directory to write")
    q.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]", help="preprocessor macro")
    q.add_argument("--near-dup", type=fraction, default=0.92, help="near-duplicate Jaccard threshold (0.92)")
    q.add_argument("--no-compile", action="store_true", help="skip the compile check")
    q.add_argument("--device", help="OpenCL device for the compile check")
    q.add_argument("--json", action="store_true", help="print the ingest report as JSON")
    q.set_defaults(func=cmd_ingest)
    q = csub.add_parser("synth", help="generate synthetic OpenCL kernels",
                        description="Generate random but realistic OpenCL kernels (access patterns, arithmetic "
                                    "mixes, loops with scalar trip counts, local tiles, barriers, branches).")
    q.add_argument("--count", type=bounded_int(1, MAX_SYNTH), required=True,
                   help=f"kernels to generate (1 to {MAX_SYNTH:,})")
    q.add_argument("--seed", type=seed, default=0)
    q.add_argument("--out", required=True, help="corpus directory to write")
    q.set_defaults(func=cmd_synth)

    p = sub.add_parser("datagen", help="measure a corpus over sampled launch configurations into a dataset",
                       description="Measure every kernel of the corpus over sampled launch configurations "
                                   "(idle / under-utilized / fully-utilized work-group counts, 25:60:15), with "
                                   "IQR rebalancing, into an append-only Parquet dataset. Interrupt it at any "
                                   "time; rerunning the same command resumes.")
    p.add_argument("--corpus", action="append", required=True,
                   help="corpus directory, or 'bundled' (repeatable)")
    p.add_argument("--out", required=True, help="dataset directory (created, or resumed)")
    p.add_argument("--configs-per-kernel", type=positive_int, default=200)
    p.add_argument("--lsizes-per-kernel", type=positive_int, default=4)
    p.add_argument("--args", default="simple",
                   help="argument selection: simple (LLMPerf II-B1), memory (II-B2, memory analysis) or both")
    p.add_argument("--rebalance", default="iqr", choices=["iqr", "none"])
    p.add_argument("--k", type=positive_float, default=80.0, help="fully-utilized threshold k x compute units (80)")
    p.add_argument("--ratio", default="25:60:15", help="idle:under:full sampling ratio")
    p.add_argument("--max-items", type=positive_int, default=1 << 24, help="largest global size in work-items")
    p.add_argument("--min-time", type=nonneg_float, default=0.02, help="minimum summed kernel time per config (s)")
    p.add_argument("--repeats", type=positive_int, default=5, help="minimum timed repeats per config")
    p.add_argument("--timeout", type=positive_float, default=30.0, help="seconds before a running kernel is killed")
    p.add_argument("--limit", type=positive_int, help="only the first N kernels")
    p.add_argument("--no-validity", action="store_true", help="skip the validity checks")
    p.add_argument("--keep-invalid", action="store_true", help="measure kernels that fail a validity check")
    p.add_argument("--device", help="OpenCL device: auto, P:D, or part of its name")
    p.add_argument("--meter", default="auto", help="energy meter: auto, nvml, rapl, none")
    p.add_argument("--seed", type=seed, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON (no progress bar)")
    p.set_defaults(func=cmd_datagen)

    add_dataset_parser(sub)

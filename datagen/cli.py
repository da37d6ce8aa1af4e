"""Subcommands of the dataset stage: ``corpus ingest``, ``corpus synth``, ``datagen``, ``dataset``."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from kernelcast.datagen.args import SELECTORS
from kernelcast.datagen.card import write_card
from kernelcast.datagen.corpus import ingest_to, opencl_compile_fn
from kernelcast.datagen.corpus.load import load_corpus_kernels  # noqa: F401 - re-exported
from kernelcast.datagen.corpus_store import (
    bundled_dir,  # noqa: F401 - re-exported
    read_records,
)
from kernelcast.datagen.counts import backfill_counts, check_counts_dataset
from kernelcast.datagen.dataset import (
    DATASET_SCHEMA_VERSION,
    MANIFEST,
    DatasetMismatch,
    busy_load_limit,
    existing_dataset,
    read_dataset,
    read_manifest,
    resolve_remeasured,
)
from kernelcast.datagen.distributed import ActorsLost, check_address, ray_available, run_datagen_ray
from kernelcast.datagen.generate import MAX_ROUNDS as DATAGEN_MAX_ROUNDS
from kernelcast.datagen.generate import DatagenInterrupted, DatagenOptions, run_datagen
from kernelcast.datagen.integrity import check_dataset, repair_dataset
from kernelcast.datagen.ktcache import (
    GridRules,
    import_kt,
    load_spec,
    plan_import,
)
from kernelcast.datagen.memargs import KERNEL_SELECTORS
from kernelcast.datagen.presets import get_preset, ingested_corpora, synthetic_corpus
from kernelcast.datagen.remeasure import MAX_ROUNDS, check_remeasure_dataset, remeasure_busy
from kernelcast.datagen.report import plot_rebalance, summarize
from kernelcast.datagen.synth import write_synth_corpus
from kernelcast.instrument.backends import select_device
from kernelcast.instrument.meters import check_meter_spec

from kernelcast.argspec import parse_arg
from kernelcast.config import device_spec
from kernelcast.console import to_json
from kernelcast.errors import UsageError
from kernelcast.options import (
    MAX_ROUNDS_HELP,
    REPEATS_HELP,
    SWEEP_ROUNDS_HELP,
    add_alias,
    add_build_options,
    add_device,
    add_kernel_file,
    add_meter,
    add_quiet,
    add_timeout,
    bounded_int,
    check_in_dir,
    check_out_dir,
    check_out_file,
    fraction,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    seed,
)

log = logging.getLogger(__name__)


#: most kernels one ``corpus synth`` makes (each is generated, formatted and written)
MAX_SYNTH = 100_000


# ---------------------------------------------------------------------------------------------
# corpus


def cmd_ingest(args: argparse.Namespace) -> int:
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
                       near_dup_threshold=args.near_dup, progress=sys.stderr.isatty() and not args.quiet)
    if args.json:
        print(to_json({"report": report.to_dict(), "corpus": args.out}))
        return 0
    print(report.format_table())
    print(f"corpus written to {args.out}")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    check_out_dir(args.out)
    out = write_synth_corpus(args.out, args.count, args.seed)
    print(f"{args.count} synthetic kernels (seed {args.seed}) written to {out}")
    return 0


def _not_compiled(spec: str) -> int:
    """Kernels of a corpus directory marked as failing its compile check (read_corpus leaves them out)."""
    if spec == "bundled":
        return 0      # ingested on the fly without a compile check
    return sum(r.get("compile_status", "ok") not in ("ok", "unchecked") for r in read_records(spec))


# ---------------------------------------------------------------------------------------------
# datagen


#: the defaults of the datagen options a preset may set (argparse defaults are None so a preset can
#: tell given options from defaults)
DATAGEN_DEFAULTS: dict[str, Any] = {"configs_per_kernel": 200, "lsizes_per_kernel": 4, "sweeps_per_kernel": 4,
                                    "lsizes_per_sweep": 4, "args": "auto", "rebalance": "iqr"}


def resolve_datagen_defaults(args: argparse.Namespace) -> Any:
    """Fill the options left unset from ``--preset`` (when given) or the built-in defaults; the
    preset, or None. Raises for an unknown preset or a preset combined with ``--corpus``."""
    preset = get_preset(args.preset) if args.preset else None
    if preset is None and not args.corpus:
        raise UsageError("give --corpus CORPUS (or 'bundled'), or --preset standard")
    if preset is not None and args.corpus:
        raise UsageError(f"--preset {preset.name} chooses the corpora itself; leave out --corpus")
    for name, default in DATAGEN_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, (preset.options if preset else {}).get(name, default))
    return preset


def datagen_options(args: argparse.Namespace) -> Any:
    """The :class:`~datagen.generate.DatagenOptions` of a ``datagen`` command line, validated."""

    if any(getattr(args, n, None) is None for n in DATAGEN_DEFAULTS):
        resolve_datagen_defaults(args)

    if args.args not in SELECTORS and args.args not in KERNEL_SELECTORS and args.args not in ("both", "auto"):
        raise UsageError(f"--args {args.args!r}: available selections are "
                         f"{', '.join(['auto', *SELECTORS, *KERNEL_SELECTORS, 'both'])}")
    if args.configs_per_kernel < 1 or args.lsizes_per_kernel < 1:
        raise UsageError("--configs-per-kernel and --lsizes-per-kernel must be positive")
    if args.sweeps_per_kernel < 0 or args.lsizes_per_sweep < 2:
        raise UsageError("--sweeps-per-kernel must be >= 0 and --lsizes-per-sweep >= 2 (a sweep compares local "
                         "sizes)")
    try:
        ratio = tuple(int(x) for x in args.ratio.split(":"))
        assert len(ratio) == 3 and all(r >= 0 for r in ratio) and sum(ratio) > 0
    except (ValueError, AssertionError):
        raise UsageError(f"--ratio {args.ratio!r}: expected three non-negative integers like 25:60:15") from None
    opts = DatagenOptions(
        configs_per_kernel=args.configs_per_kernel, lsizes_per_kernel=args.lsizes_per_kernel, args=args.args,
        rebalance=None if args.rebalance == "none" else args.rebalance, k=args.k, ratio=ratio,
        max_total_items=args.max_items, seed=args.seed, validity=not args.no_validity,
        keep_invalid=args.keep_invalid, sweeps_per_kernel=args.sweeps_per_kernel,
        lsizes_per_sweep=args.lsizes_per_sweep, activity=not args.no_activity,
        site_counts=not getattr(args, "no_site_counts", False),
    )
    if getattr(args, "sweep_rounds", None) is not None:
        opts.sweep_rounds = args.sweep_rounds
    if getattr(args, "sample_rounds", None) is not None:
        opts.sample_rounds = args.sample_rounds
    if getattr(args, "max_rounds", None) is not None:
        opts.max_rounds = args.max_rounds
    for name, v in (("--sweep-rounds", opts.sweep_rounds), ("--sample-rounds", opts.sample_rounds),
                    ("--max-rounds", opts.max_rounds)):
        if v is not None and v > DATAGEN_MAX_ROUNDS:
            raise UsageError(f"{name} {v}: at most {DATAGEN_MAX_ROUNDS} rounds")
    opts.timing.min_time_s = args.min_time
    opts.timing.min_repeats = args.repeats
    return opts


def cmd_datagen(args: argparse.Namespace) -> int:
    preset = resolve_datagen_defaults(args)
    opts = datagen_options(args)
    check_meter_spec(args.meter)
    if args.ray_actors is not None and args.ray is None:
        raise UsageError("--ray-actors needs --ray")
    if args.ray_actors is not None and args.ray_actors < 1:
        raise UsageError("--ray-actors must be at least 1")
    if args.ray is not None:
        ray_available()
        check_address(None if args.ray == "local" else args.ray)
    check_out_dir(args.out)
    out = Path(args.out)
    existing_dataset(out)                    # a damaged or foreign --out: one line, before any work
    check_resumable(out)
    extra: dict[str, Any] = {}
    if preset is not None:
        specs = (["bundled"] if preset.bundled else []) + \
            ([str(p) for p in ingested_corpora()] if preset.ingested else [])
        if preset.synthetic:
            out.mkdir(parents=True, exist_ok=True)
            specs.append(str(synthetic_corpus(out, preset)))
        corpora = [load_corpus_kernels(c, None) for c in specs]
        extra = {"preset": preset.to_dict()}
    else:
        specs = list(args.corpus)
        corpora = [load_corpus_kernels(c, None) for c in specs]
    kernels = [k for ks, _ in corpora for k in ks]
    if args.limit is not None:
        kernels = kernels[: args.limit]
    not_compiled = sum(_not_compiled(c) for c in specs)
    if not kernels:
        raise UsageError("the corpus holds no kernels" + (f" that compiled ({not_compiled} failed the corpus's "
                                                          f"compile check)" if not_compiled else ""))
    if not_compiled and not args.json:
        print(f"note: {not_compiled} corpus kernel(s) failed the corpus's compile check and are not measured",
              file=sys.stderr)
    extra["command"] = command_line(args, preset)
    if args.ray is not None:
        try:
            run = run_datagen_ray(kernels, args.out, device_spec(args.device), opts, meter=args.meter,
                                  timeout_s=args.timeout, corpus=",".join(d for _, d in corpora),
                                  address=None if args.ray == "local" else args.ray, actors=args.ray_actors)
        except ActorsLost as e:
            print(str(e), file=sys.stderr)
            return 1
    else:
        device = select_device(device_spec(args.device))
        try:
            run = run_datagen(kernels, args.out, device, opts, meter=args.meter, timeout_s=args.timeout,
                              corpus=",".join(d for _, d in corpora), progress=not args.quiet and not args.json,
                              extra_manifest=extra)
        except DatagenInterrupted as e:
            if preset is not None:
                write_card(out)
            print(f"\n{e}", file=sys.stderr)
            return 143 if e.terminated else 130
    card = None
    if preset is not None:
        card, _ = write_card(out)
    if args.json:
        print(to_json({"summary": run.summary.to_dict(), "dataset": args.out, "rows_total": run.rows_total,
                       "card": str(card) if card else None, "corpus_not_compiled": not_compiled}))
        return 0
    print(run.summary.format())
    print(f"dataset: {args.out} ({run.rows_total} rows in all)" + (f"; card: {card}" if card else ""))
    return 0


def command_line(args: argparse.Namespace, preset: Any) -> str:
    """The ``kernelcast datagen`` command that continues this dataset (options spelled out)."""
    words = ["kernelcast", "datagen"]
    words += ["--preset", preset.name] if preset is not None else [w for c in args.corpus for w in ("--corpus", c)]
    words += ["--out", args.out]
    plain = {"seed": 0, "k": 80.0, "ratio": "25:60:15", "max_items": 1 << 24, "min_time": 0.02, "repeats": 5,
             "timeout": 30.0, "meter": "auto"}       # the parser's defaults: left out
    for name in (*DATAGEN_DEFAULTS, *plain, "limit", "device"):
        v = getattr(args, name, None)
        default = (preset.options if preset is not None else DATAGEN_DEFAULTS).get(name, plain.get(name))
        if v is None or v == default:
            continue
        words += [f"--{name.replace('_', '-')}", str(v)]
    for flag in ("no_validity", "keep_invalid", "no_activity", "no_site_counts"):
        if getattr(args, flag, False):
            words.append(f"--{flag.replace('_', '-')}")
    return " ".join(shlex.quote(w) for w in words)


def check_resumable(out: Path) -> None:
    """A dataset directory of another schema version cannot be resumed: say so before any work."""
    mpath = out / MANIFEST
    if not mpath.is_file():
        return

    try:
        old = json.loads(mpath.read_text())
    except ValueError:
        raise UsageError(f"{mpath}: not a readable dataset manifest") from None
    ver = old.get("schema_version", 1)
    if ver != DATASET_SCHEMA_VERSION:
        raise DatasetMismatch(f"{out} is a dataset of schema version {ver}; this kernelcast writes version "
                              f"{DATASET_SCHEMA_VERSION} and cannot resume it (it still reads it); use another --out")


# ---------------------------------------------------------------------------------------------
# dataset summary / plots


def cmd_dataset(args: argparse.Namespace) -> int:
    check_in_dir(args.dataset, "dataset", "dataset directory")
    if args.plot_iqr:
        check_out_file(args.plot_out, "--plot-out")
    try:
        raw = read_dataset(args.dataset, resolve=False)
        manifest = read_manifest(args.dataset)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    df = resolve_remeasured(raw, busy_load_limit(manifest))
    info = summarize(df, manifest, raw=raw)
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


def cmd_card(args: argparse.Namespace) -> int:
    if not (Path(args.dataset) / MANIFEST).is_file():
        raise UsageError(f"{args.dataset}: not a dataset (no {MANIFEST})")
    path, facts = write_card(args.dataset)
    if args.json:
        print(to_json({"card": str(path), **facts}))
        return 0
    print(path.read_text(encoding="utf-8"))
    print(f"card written to {path}")
    return 0


def cmd_dataset_check(args: argparse.Namespace) -> int:
    report = check_dataset(args.dataset)
    print(to_json(report.to_dict()) if args.json else report.format())
    return 0 if report.ok else 1


def cmd_dataset_repair(args: argparse.Namespace) -> int:
    report = repair_dataset(args.dataset)
    print(to_json(report.to_dict()) if args.json else report.format())
    return 0


def add_dataset_parser(sub: Any) -> Any:
    """``dataset [summary] DS``, ``dataset check DS``, ``dataset repair DS``. Further actions register
    on the returned subparsers (``add_parser(name, ...)`` with ``set_defaults(func=...)``)."""
    p = sub.add_parser("dataset", help="summarize, check or repair a dataset; import Kernel Tuner caches",
                       description="dataset DS (= dataset summary DS): rows by status, kernels by validity, the "
                                   "time distribution by regime and pass, optionally an IQR histogram. dataset "
                                   "check DS: name damaged files. dataset repair DS: quarantine them, keep every "
                                   "good row. dataset import-kt CACHE --out DS: a Kernel Tuner cache as rows.")
    p.default_action = "summary"     # ``dataset DS`` means ``dataset summary DS`` (kernelcast.cli)
    dsub = p.add_subparsers(dest="dataset_command", metavar="ACTION")
    dsub.required = True
    q = dsub.add_parser("summary", help="summarize a dataset; plot the IQR rebalancing of one kernel",
                        description="Rows by status, kernels by validity, the time distribution by regime and "
                                    "pass; optionally a before/after IQR histogram (LLMPerf Figure 1).")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true", help="print the result as JSON")
    q.add_argument("--plot-iqr", metavar="KERNEL", help="kernel name (or 'auto') to plot")
    q.add_argument("--plot-out", default="iqr_rebalance.png", help="PNG path")
    q.set_defaults(func=cmd_dataset)
    q = dsub.add_parser("check", help="read every file of a dataset and name the damaged ones",
                        description="Read the manifest, every shard, every journal line and the kernel sources; "
                                    "list what is damaged. Changes nothing. Exit status 1 when damage is found.")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true", help="print the result as JSON")
    q.set_defaults(func=cmd_dataset_check)
    q = dsub.add_parser("repair", help="quarantine the damaged files of a dataset, keeping every good row",
                        description="Move damaged shards, kernel sources and leftover files to DS/quarantine/TIME/ "
                                    "(never deleting), drop damaged journal lines (kept in the quarantine), "
                                    "rebuild a lost manifest; rerunning datagen re-measures what was lost.")
    q.add_argument("dataset", help="dataset directory")
    q.add_argument("--json", action="store_true", help="print the result as JSON")
    q.set_defaults(func=cmd_dataset_repair)
    return dsub


# ---------------------------------------------------------------------------------------------
# dataset counts


def cmd_dataset_counts(args: argparse.Namespace) -> int:
    root = Path(args.dataset)
    check_counts_dataset(root)                       # bad input: one line, before any work
    kernel_ids = set(args.kernel) if args.kernel else None
    device = select_device(device_spec(args.device))
    summary = backfill_counts(root, device=device, jobs=args.jobs, limit=args.limit, timeout_s=args.timeout,
                              max_tracked=args.max_tracked, retry_failed=args.retry_failed, kernel_ids=kernel_ids,
                              progress=not args.quiet and not args.json)
    print(to_json(summary.to_dict()) if args.json else summary.format())
    return 0


def add_counts_parser(dsub: Any) -> None:
    p = dsub.add_parser("counts", help="per-site loop trips and branch outcomes for the ok rows of a dataset",
                        description="Run each ok row's configuration once more with a counting kernel (loop trips "
                                    "and branch outcomes per site, instrument.counters) on the row's data, for "
                                    "rows that have no counts yet or whose counts lack a loop's busiest work-item "
                                    "(counted before that was measured); results go to DS/site_counts.jsonl "
                                    "(journaled, one line per row, failures with their reason), which readers merge "
                                    "as the site_counts column. Interrupt at any time; rerunning resumes.")
    p.add_argument("dataset", help="dataset directory")
    p.add_argument("--jobs", type=bounded_int(1, 64), default=1, help="harness worker processes (1)")
    p.add_argument("--limit", type=positive_int, help="at most N rows this run")
    p.add_argument("--kernel-id", dest="kernel", action="append", metavar="ID",
                   help="only rows of this kernel id (repeatable)")
    add_alias(p, "--kernel", "--kernel-id")
    add_timeout(p, 30.0)
    p.add_argument("--max-tracked", type=bounded_int(1, 1 << 24), default=1 << 16,
                   help="work-items whose counts are summed at most (odd-stride sample; 65536)")
    p.add_argument("--retry-failed", action="store_true", help="run the rows whose earlier attempt failed again")
    add_device(p)
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_dataset_counts)


# ---------------------------------------------------------------------------------------------
# dataset remeasure


def cmd_dataset_remeasure(args: argparse.Namespace) -> int:
    root = Path(args.dataset)
    check_remeasure_dataset(root)                    # bad input: one line, before any work
    device = "auto" if args.dry_run else select_device(device_spec(args.device))
    summary = remeasure_busy(root, device=device, load_above=args.load_above, max_rounds=args.max_rounds,
                             limit=args.limit, timeout_s=args.timeout, dry_run=args.dry_run,
                             progress=not args.quiet and not args.json)
    print(to_json(summary.to_dict()) if args.json else summary.format())
    return 0


def add_remeasure_parser(dsub: Any) -> None:

    p = dsub.add_parser("remeasure", help="measure again the configurations measured beside other work",
                        description="Find the ok configurations whose measurement (or one of its rounds) was "
                                    "taken while other work ran on the host (other processes' CPU share, where "
                                    "read; else the 1-minute load average above the CPU device's compute "
                                    "units plus 0.5) and measure each again through the isolated harness, with the "
                                    "dataset's data seed and timing policy, in as many rounds as it had. The "
                                    "new rows are appended (remeasure_reason = load); readers keep those taken "
                                    "on an idle host in place of the busy measurement. Run it on an idle host. "
                                    "Interrupt at any time; rerunning resumes.")
    p.add_argument("dataset", help="dataset directory")
    p.add_argument("--load-above", type=positive_float, metavar="L",
                   help="a row measured at a 1-minute load average above L ran beside other work (default: the "
                        "CPU device's compute units plus 0.5; GPU datasets: other processes' CPU share only)")
    p.add_argument("--max-rounds", type=bounded_int(1, MAX_ROUNDS), default=MAX_ROUNDS,
                   metavar="N", help=f"{MAX_ROUNDS_HELP} ({MAX_ROUNDS})")
    p.add_argument("--limit", type=positive_int, help="at most N configurations this run")
    add_timeout(p, 30.0)
    p.add_argument("--dry-run", action="store_true", help="say what would be measured; measure and write nothing")
    add_device(p)
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_dataset_remeasure)


# ---------------------------------------------------------------------------------------------
# dataset import-kt


def _spec_paths(items: list[str]) -> list[str]:
    out: list[str] = []
    for it in items:
        p = Path(it)
        if p.is_dir():
            found = sorted(str(q) for q in p.iterdir() if q.suffix.lower() in (".json", ".yaml", ".yml"))
            if not found:
                raise UsageError(f"--spec {it}: a directory without .json/.yaml specs")
            out += found
        else:
            out.append(it)
    return out


def _import_summary(imp: Any, out: Path, appended: int, total: int) -> dict[str, Any]:
    return {**imp.summary(), "dataset": str(out), "rows_appended": appended, "rows_in_dataset": total}


def cmd_import_kt(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if args.arg and not (args.kernel or args.spec):
        raise UsageError("--arg binds arguments of the kernel source: give --kernel or --spec too")
    specs = [load_spec(s) for s in _spec_paths(args.spec)]
    if len(specs) > 1 and args.cache:
        raise UsageError("cache files with several specs: give one --spec, or no cache files (collection mode)")
    if args.cache and not specs:
        existing_dataset(out)
    rules = GridRules.parse(args.grid)
    given = [parse_arg(a) for a in args.arg]
    common = dict(root=args.root, kernel_path=args.kernel, name=args.name, include_dirs=args.include,
                  defines=args.define, build_options=args.build_options or "", arg_specs=given, grid=rules,
                  gpu=args.gpu, where=args.where)
    jobs: list[tuple[Path, Any]] = []
    if args.cache or not specs:
        if not args.cache:
            raise UsageError("give cache files, or --spec SPEC (its caches: collection mode)")
        existing_dataset(out)
        plan = plan_import(list(args.cache), spec=specs[0] if specs else None, **common)
        jobs = [(out, imp) for imp in plan.imports]
    else:
        plans = [plan_import([], spec=sp, **common) for sp in specs]     # every spec checked before writing
        for sp, plan in zip(specs, plans):
            for imp in plan.imports:
                ds = out / sp.benchmark / sp.pair_name(imp.cache.path)
                existing_dataset(ds)
                jobs.append((ds, imp))
    infos = []
    for ds, imp in jobs:
        appended, total = import_kt(imp, ds)
        infos.append(_import_summary(imp, ds, appended, total))
    if args.json:
        print(to_json(infos[0] if len(infos) == 1 else infos))
        return 0
    for (ds, imp), info in zip(jobs, infos):
        cache = imp.cache
        st = ", ".join(f"{k} {v}" for k, v in sorted(imp.statuses.items()))
        print(f"{cache.path}: {'T4 file' if cache.format.startswith('t4') else 'Kernel Tuner cache'} ({cache.format}"
              f"{'' if cache.closed else ', left open'}), kernel {cache.kernel_name} on {info['gpu']}, "
              f"{len(cache.records)} configurations ({st})")
        if imp.excluded:
            print(f"left out {imp.excluded} configurations: imported only those where "
                  f"{' and '.join(imp.where)}")
        print(f"tune parameters: {', '.join(cache.tune_params_keys)}; observers: "
              f"{', '.join(imp.observer_columns) or 'none'}; energy: {', '.join(imp.energy_columns) or 'none'}")
        if imp.unreferenced:
            print(f"warning: tune parameters {', '.join(imp.unreferenced)} vary in the cache but the kernel source "
                  f"does not reference them (configurations differing only in them get the same kernel)")
        if imp.frontend_error:
            print(f"warning: the front end refused the kernel ({imp.frontend_error}): rows without arguments "
                  f"or analysis")
        elif imp.kernel is not None:
            print(f"static analyses needed: {imp.analysis_groups} for {len(cache.records)} configurations"
                  f"{' (block and grid sizes symbolic)' if imp.symbolic_launch else ''}")
        print(f"dataset: {ds} ({info['rows_appended']} rows added, {info['rows_in_dataset']} in all)"
              + ("" if imp.kernel else "; no --kernel: rows without source (not usable for training)"))
    return 0


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
    add_device(q)
    add_quiet(q)
    q.add_argument("--json", action="store_true", help="print the ingest report as JSON")
    q.set_defaults(func=cmd_ingest)
    q = csub.add_parser("synth", help="generate synthetic OpenCL kernels",
                        description="Generate random but realistic OpenCL kernels (access patterns, arithmetic "
                                    "mixes, loops with scalar trip counts, local tiles, barriers, branches).")
    q.add_argument("--count", type=bounded_int(1, MAX_SYNTH), required=True,
                   help=f"kernels to generate (1 to {MAX_SYNTH:,})")
    q.add_argument("--seed", type=seed, default=0, help="seed of the generated kernels (0)")
    q.add_argument("--out", required=True, help="corpus directory to write")
    q.set_defaults(func=cmd_synth)

    p = sub.add_parser("datagen", help="measure a corpus over sampled launch configurations into a dataset",
                       description="Measure every kernel of the corpus over sampled launch configurations "
                                   "(idle / under-utilized / fully-utilized work-group counts, 25:60:15), with "
                                   "IQR rebalancing, into an append-only Parquet dataset. Interrupt it at any "
                                   "time; rerunning the same command resumes.")
    p.add_argument("--corpus", action="append", default=[],
                   help="corpus directory, or 'bundled' (repeatable); not with --preset")
    p.add_argument("--preset", help="a named dataset recipe: 'standard' = bundled + ingested + 1,500 synthetic "
                                    "kernels, simple and memory selection, regime samples and sweeps; writes "
                                    "DATASET/CARD.md. Options given override the preset's")
    p.add_argument("--out", required=True, help="dataset directory (created, or resumed)")
    p.add_argument("--configs-per-kernel", type=positive_int, default=None, help="regime samples per kernel (200)")
    p.add_argument("--lsizes-per-kernel", type=positive_int, default=None, help="local sizes of the regime samples (4)")
    p.add_argument("--args", default=None,
                   help="argument selection: auto (default: simple, and for a kernel that fails validity with it "
                        "memory analysis, then index/predicate-aware inputs; rows say which), simple (LLMPerf "
                        "II-B1), memory (II-B2, memory analysis) or both")
    p.add_argument("--sweeps-per-kernel", type=nonneg_int, default=None,
                   help="tuning sweeps per kernel: problems measured with several local sizes each (4; 0: none)")
    p.add_argument("--lsizes-per-sweep", type=positive_int, default=None,
                   help="local sizes / block shapes per sweep (4, fewer only where the device allows fewer)")
    p.add_argument("--sweep-rounds", type=positive_int, default=None,
                   metavar="N", help=f"{SWEEP_ROUNDS_HELP} (4)")
    p.add_argument("--max-rounds", type=positive_int, default=None, metavar="N",
                   help=f"{MAX_ROUNDS_HELP} (default: twice its rounds; a configuration measured in rounds gets "
                        f"further rounds, interleaved, while its rounds disagree: the middle half of their windows "
                        f"more than 1.15x apart)")
    p.add_argument("--sample-rounds", type=positive_int, default=None, metavar="N",
                   help="measure each kernel's regime samples in N interleaved rounds, pooled by readers (1): "
                        "repeatable times across a kernel's configurations, for few-shot updating, at N times "
                        "the measuring")
    p.add_argument("--no-activity", action="store_true",
                   help="do not record active_fraction / bytes_touched (saves one instrumented run per simple row)")
    p.add_argument("--no-site-counts", action="store_true",
                   help="do not record site_counts (loop trips / branch outcomes; saves one counting launch per "
                        "ok row)")
    p.add_argument("--rebalance", default=None, choices=["iqr", "none"], help="IQR rebalancing (iqr)")
    p.add_argument("--k", type=positive_float, default=80.0, help="fully-utilized threshold k x compute units (80)")
    p.add_argument("--ratio", default="25:60:15", help="idle:under:full sampling ratio")
    p.add_argument("--max-items", type=positive_int, default=1 << 24, help="largest global size in work-items")
    p.add_argument("--min-time", type=nonneg_float, default=0.02, help="minimum summed kernel time per config (s)")
    p.add_argument("--repeats", type=positive_int, default=5, help=f"{REPEATS_HELP} (5)")
    add_timeout(p, 30.0)
    p.add_argument("--limit", type=positive_int, help="only the first N kernels")
    p.add_argument("--no-validity", action="store_true", help="skip the validity checks")
    p.add_argument("--keep-invalid", action="store_true", help="measure kernels that fail a validity check")
    add_device(p)
    add_meter(p)
    p.add_argument("--seed", type=seed, default=0, help="seed of the sampling and of the buffer contents (0)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="distribute over a Ray cluster (pip install 'kernelcast[ray]'): one actor per device, "
                        "kernels sharded by id; ADDRESS is HOST:PORT, ray://HOST:PORT or auto; "
                        "without it a local cluster is started")
    p.add_argument("--ray-actors", type=positive_int, metavar="N", help="with --ray: exactly N actors (testing)")
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the run's summary as JSON (no progress bar)")
    p.set_defaults(func=cmd_datagen)

    dsub = add_dataset_parser(sub)
    add_counts_parser(dsub)
    add_remeasure_parser(dsub)
    p = dsub.add_parser("card", help="write the dataset card (DATASET/CARD.md + time plot)",
                        description="Device and versions, kernels and rows by status, regime and sweep counts, "
                                    "time distribution plot, noise statistics (CV), active fractions; written "
                                    "to DATASET/CARD.md and printed.")
    p.add_argument("dataset", help="dataset directory")
    p.add_argument("--json", action="store_true", help="print the card's figures as JSON")
    p.set_defaults(func=cmd_card)

    p = dsub.add_parser("import-kt", help="Kernel Tuner caches / T4 files as dataset rows",
                           description="Turn Kernel Tuner caches (0.4-1.x, .json or .json.gz, closed or left "
                                       "open) and T4 results files into dataset rows: tune parameters as tp_* "
                                       "columns (and -D macros per row), the launch from the problem size and "
                                       "block-size parameters, time in us with every iteration, every observer "
                                       "column (kt_*: energy, power, clocks, temperature), failed configurations "
                                       "as rows with their status, provenance per row (src_*, gpu, measured_at "
                                       "from the record's timestamp). With --spec (docs/kernel-tuner.md) the "
                                       "kernel, launch rules, arguments and GPU names come from a benchmark "
                                       "spec; --spec without cache files imports every cache the spec lists, "
                                       "one dataset per (benchmark, GPU) under --out (collection mode).",
                           epilog="--grid rules (';'-separated): block_size_names=NAME[,NAME[,NAME]], "
                                  "grid_div_x=EXPR (also _y, _z; expressions of the tune parameters, default: "
                                  "the block-size parameter), problem_size=EXPR[,EXPR[,EXPR]] (for caches "
                                  "without one). As Kernel Tuner: work-groups = ceil(problem / grid_div), "
                                  "global size = work-groups x block size.")
    p.add_argument("cache", nargs="*", help="Kernel Tuner cache files or T4 files (JSON, optionally gzip)")
    p.add_argument("--out", required=True, help="dataset directory (created, or appended to); in collection mode "
                                                "the directory of the datasets OUT/BENCHMARK/GPU")
    p.add_argument("--spec", action="append", default=[], metavar="SPEC",
                   help="benchmark spec (JSON/YAML), or a directory of specs (repeatable)")
    p.add_argument("--root", default=".", help="with --spec: the directory (a clone) its paths are relative to (.)")
    add_kernel_file(p, required=False)
    p.add_argument("--name", help="kernel name (default: the spec's, else the cache's kernel_name)")
    p.add_argument("--gpu", help="GPU name for files that state none (T4 files; default: the spec's, else the "
                                 "file name)")
    p.add_argument("-I", "--include", action="append", default=[], metavar="DIR",
                   help="include directory of the kernel (repeatable)")
    p.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]",
                   help="preprocessor macro (of every configuration; repeatable)")
    add_build_options(p)
    p.add_argument("--grid", help="launch rules (see below; override the spec's)")
    p.add_argument("--where", action="append", default=[], metavar="EXPR",
                   help="import only the configurations that satisfy EXPR, a restriction as Kernel Tuner takes "
                        "them over the tune parameters (e.g. 'use_shmem == 1'; repeatable, with the spec's own "
                        "'where')")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC",
                   help="bind one kernel argument as in 'measure' (others: the spec's args, then simple selection "
                        "over the problem size)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_import_kt)

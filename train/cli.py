"""``kernelcast train``: train the learned model on a dataset (hooked into the CLI by ``add_parser``)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from kernelcast.errors import UsageError
from kernelcast.options import (
    PROFILE_DEVICE_HELP,
    add_alias,
    add_device,
    add_quiet,
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
    unit_fraction,
)

log = logging.getLogger(__name__)


def scoring_or_folds(text: str) -> int:
    """A number of folds (at least 2), or 0: no folds (scoring)."""
    import argparse

    v = nonneg_int(text)
    if v == 1:
        raise argparse.ArgumentTypeError("must be 0 (no folds: score) or at least 2, got 1")
    return v


def bounded_folds(text: str) -> int:
    """A number of folds: at least 2 (one to hold out, one to fit)."""
    import argparse

    v = nonneg_int(text)
    if v < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {text}")
    return v


def add_parser(subparsers: Any) -> None:
    """Register ``train`` and ``blend`` on the main command line's subparsers."""
    p = subparsers.add_parser(
        "train", help="train the learned (CodeGen regression) model on a dataset",
        description="Train LLMPerf's model (CodeGen + a regression head, MSE on log2 time) on a dataset made by "
                    "'kernelcast datagen': validation kernels held out by kernel group (a synthetic template family "
                    "or a source file is never on both sides), AdamW with linear warm-up, the learning rate halved "
                    "after each epoch without a better validation loss, early stopping after --patience such epochs, "
                    "a checkpoint every epoch (rerun the same command to resume), the best model saved with "
                    "save_pretrained and metrics.json in --out.",
        epilog="Modes: 'prompt' feeds LLMPerf's prompt of each row (source, arguments, NDRange sizes); 'efficient' "
               "encodes each kernel source once per batch and adds per configuration the numeric launch features "
               "and the feature table of the tabular model (static work at the configuration, the analytical "
               "model's parts), and learns the residual log2(measured/analytical) with --profile's analytical "
               "model (default: this device's calibration; --direct: log2 time, no table). Without --base a "
               "byte-level BPE tokenizer and a small CodeGen are trained from scratch; --base DIR fine-tunes a "
               "backbone saved by 'kernelcast pretrain' or any CodeGen checkpoint.")
    p.add_argument("--data", required=True, metavar="DATASET", help="dataset directory (kernelcast datagen --out)")
    p.add_argument("--out", required=True, metavar="MODEL", help="model directory to write (resumes if it holds a "
                                                                 "checkpoint)")
    p.add_argument("--kind", choices=("codegen", "tabular"), default="codegen",
                   help="codegen (default: the CodeGen regression model) or tabular (gradient-boosted trees on the "
                        "static features, the launch configuration and the analytical model's parts, predicting "
                        "log2(measured/analytical); fits in seconds; uses --data, --out, --profile, --device, "
                        "--target, --seed, --json)")
    p.add_argument("--profile", help="tabular, and codegen in efficient mode: device profile of the analytical base "
                                     "and columns (bundled name or JSON path); default: this device's calibration")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--direct", action="store_true",
                   help="codegen efficient mode: learn log2 time directly, without the analytical base and the "
                        "feature table")
    p.add_argument("--mode", choices=("prompt", "efficient"), default="prompt",
                   help="prompt (LLMPerf, default) or efficient (one encoder pass per kernel per batch)")
    p.add_argument("--base", help="pretrained CodeGen to fine-tune: a hub name (Salesforce/codegen-350M-multi) or "
                                  "a local directory; default: a small CodeGen from scratch")
    p.add_argument("--target", choices=("time", "energy", "both"), default="time",
                   help="what to predict (energy needs a dataset measured with an energy meter)")
    p.add_argument("--epochs", type=positive_int, default=30,
                   help="at most this many epochs (default 30; early stopping usually ends sooner)")
    p.add_argument("--batch-size", type=positive_int, help="rows per batch (default 8 prompt, 64 efficient)")
    p.add_argument("--lr", type=positive_float, help="peak learning rate (default 5e-4 from scratch, 1e-5 with --base)")
    p.add_argument("--weight-decay", type=nonneg_float, default=0.01, help="AdamW weight decay (0.01)")
    p.add_argument("--warmup-ratio", type=unit_fraction, default=0.1, help="fraction of steps of linear warm-up (0.1)")
    p.add_argument("--grad-accum", type=positive_int, default=1, help="batches per optimizer step (1)")
    p.add_argument("--patience", type=positive_int, default=3,
                   help="early stopping: epochs without a better validation loss (3)")
    p.add_argument("--lr-decay", type=fraction, default=0.5, help="learning-rate factor after an epoch without "
                                                               "improvement (0.5; floor 5%% of the peak)")
    p.add_argument("--max-steps", type=positive_int, help="stop after this many optimizer steps (rerun to continue)")
    p.add_argument("--max-minutes", type=positive_float,
                   help="stop after this many minutes of training (rerun to continue)")
    p.add_argument("--time-loss", choices=("mse", "huber"), default="mse",
                   help="loss on log2 time: mse (LLMPerf, default) or huber (delta 1, a factor of 2: less pull from "
                        "rows the analytical model misses by orders of magnitude)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the split, the data order and the weights")
    p.add_argument("--threads", type=positive_int,
                   help="torch CPU threads (default: one per core; 1 can be faster on a machine busy with other work)")
    p.add_argument("--no-resume", action="store_true", help="start over even if --out holds a checkpoint")
    add_quiet(p, dest="no_progress", old="--no-progress")
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the summary")
    p.set_defaults(func=run)

    p = subparsers.add_parser(
        "pretrain", help="self-supervised pretraining of the small CodeGen on unlabelled kernel corpora",
        description="Train a small CodeGen as a causal language model (next-token prediction) on the kernel texts "
                    "of the corpora (the project's byte-level BPE tokenizer trained on them), holding out whole "
                    "kernel groups for a validation loss, and save it with save_pretrained in --out; then "
                    "'kernelcast train --mode efficient --base OUT' fine-tunes the regression from it.",
        epilog="Bounded by --epochs, --max-steps and --max-minutes. The model is written to a temporary directory "
               "and renamed into place: Ctrl-C saves it as far as it got, a kill leaves no half-written model; a "
               "rerun starts over (an earlier pretraining in --out is replaced).")
    p.add_argument("--corpus", action="append", required=True, metavar="CORPUS",
                   help="corpus directory (kernelcast corpus ingest/synth --out), or 'bundled' (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write the pretrained backbone to")
    p.add_argument("--epochs", type=positive_int, default=3, help="passes over the corpus (3)")
    p.add_argument("--max-steps", type=positive_int, help="stop after this many optimizer steps")
    p.add_argument("--max-minutes", type=positive_float, help="stop after this many minutes")
    p.add_argument("--block-size", type=positive_int, default=256, help="tokens per training sequence (256)")
    p.add_argument("--batch-size", type=positive_int, default=8, help="sequences per optimizer step (8)")
    p.add_argument("--lr", type=positive_float, default=1e-3, help="peak learning rate (1e-3; cosine decay to 10%%)")
    p.add_argument("--n-layer", type=positive_int, default=2,
                   help="transformer layers (2, as train builds from scratch)")
    p.add_argument("--n-embd", type=positive_int, default=128, help="hidden size (128)")
    p.add_argument("--n-head", type=positive_int, default=4, help="attention heads (4)")
    p.add_argument("--vocab-size", type=positive_int, default=4096, help="BPE vocabulary size (4096)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the split, the data order and the weights (0)")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: one per core)")
    add_quiet(p, dest="no_progress", old="--no-progress")
    p.add_argument("--json", action="store_true", help="print pretrain.json instead of the summary")
    p.set_defaults(func=cmd_pretrain)

    p = subparsers.add_parser(
        "blend", help="fit the analytical+learned blend on out-of-fold predictions (stacking)",
        description="Refit the learned model of --model (same kind: tabular or CodeGen) on grouped folds of the "
                    "dataset, so that every row gets a prediction from a model that never saw its kernel; choose "
                    "the blend of the analytical and the learned model on those out-of-fold predictions by the "
                    "median |log2(predicted/measured)| (candidates: each model alone, with a constant offset, the "
                    "geometric mean, least squares in log space), write it with its figures to blend.json in the "
                    "model directory, and print the models and the blend side by side.")
    p.add_argument("--data", required=True, help="the dataset the model was trained on (or a larger one)")
    p.add_argument("--model", required=True, help="learned model directory (kernelcast train)")
    p.add_argument("--profile", help="device profile of the analytical model (default: this device's)")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--folds", type=bounded_folds, default=5, help="grouped folds of the out-of-fold predictions (5)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the folds and the models (0)")
    p.add_argument("--criterion", default="median_abs_log2", choices=["median_abs_log2", "mse_log2"])
    p.add_argument("--codegen-epochs", type=positive_int, default=5, help="CodeGen model: epochs per fold (5)")
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the figures and the chosen blend as JSON")
    p.set_defaults(func=cmd_blend)

    p = subparsers.add_parser(
        "evaluate", help="the accuracy yardstick: grouped K-fold out-of-fold figures of every model on a dataset",
        description="Grouped K-fold evaluation: a kernel, its near-duplicates and the synthetic kernels of its "
                    "template family are never on both sides. Every row gets an out-of-fold prediction of each "
                    "model; the figures (MAPE, median and p90 APE, log2 errors, per-kernel MAPE, tuning top-1 and "
                    "regret, few-shot, interval coverage) go to DIR/metrics.json, the predictions to "
                    "DIR/oof.parquet, and DIR/REPORT.md has the tables and plots.",
        epilog="Models: analytical (no fitting), tabular (gradient-boosted trees), codegen (the CodeGen model; "
               "slow), blend (stacking, fitted per fold on inner out-of-fold predictions of the training kernels). "
               "See bench/README.md.")
    p.add_argument("--data", required=True, action="append", metavar="DATASET",
                   help="dataset directory (kernelcast datagen --out); repeatable: datasets of one device (e.g. "
                        "one per argument selection) are evaluated as one, a kernel in several on one side")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (an earlier evaluation there is "
                                                               "replaced)")
    p.add_argument("--folds", type=scoring_or_folds, default=5,
                   help="number of grouped folds (5); 0: no folds, score the models that need no training "
                        "(analytical, --saved-model) on every row, e.g. one imported Kernel Tuner cache")
    p.add_argument("--group-by", choices=("kernel", "gpu", "both"), default="kernel",
                   help="what a fold holds out: kernel groups (kernel, default), devices (gpu: the rows of a "
                        "device are predicted by models fitted on other devices) or both at once")
    p.add_argument("--models", help="comma-separated: analytical, tabular, codegen, blend, saved "
                                    "(default analytical,tabular,blend)")
    p.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                   help="a cache of the shared static analyses of imported rows (kernelcast analyze --cache; "
                        "each dataset's own DATASET/analysis is read too); repeatable")
    p.add_argument("--saved-model", metavar="DIR",
                   help="a saved learned model (kernelcast train --out) scored as it is: adds the model 'saved' "
                        "(a model of several devices, such as the bundled GPU model, predicts each device's rows "
                        "with its --profile, as predict does)")
    p.add_argument("--profile", action="append", metavar="[DEVICE=]PROFILE",
                   help="device profile (bundled name or JSON path); default: this device's. Datasets of several "
                        "devices: one per device, DEVICE=PROFILE (DEVICE as the rows' device column names it, "
                        "e.g. A100 for a Kernel Tuner cache of device_name A100); repeatable")
    add_device(p, PROFILE_DEVICE_HELP)
    p.add_argument("--seed", type=seed, default=0, help="seed of the folds, the shots and the models (0)")
    p.add_argument("--shots", default="0,1,3", help="few-shot: measured configurations per held-out kernel (0,1,3)")
    p.add_argument("--interval-by", choices=("none", "regime", "bound"), default="none",
                   help="interval quantiles per datagen regime or per analytical bound (default: one for all rows)")
    p.add_argument("--inner-folds", type=bounded_folds, default=3, help="blend: folds of the inner CV (3)")
    p.add_argument("--codegen-epochs", type=positive_int, default=20,
                   help="codegen: at most this many epochs per fold (20; early stopping on held-out kernel groups "
                        "of the fold's training rows usually ends sooner)")
    p.add_argument("--codegen-base", metavar="DIR",
                   help="codegen: fine-tune from this pretrained backbone (kernelcast pretrain --out) instead of "
                        "from scratch")
    p.add_argument("--codegen-minutes", type=positive_float, help="codegen: training-time limit per fold, minutes")
    p.add_argument("--seeds", dest="repeats", type=bounded_int(1, 20), default=1, metavar="N",
                   help="repeat the whole evaluation with fold seeds SEED..SEED+N-1 and print each headline "
                        "figure's mean and sd over them: how much the choice of folds alone moves a figure (1)")
    add_alias(p, "--repeats", "--seeds")
    p.add_argument("--learning-curve", action="store_true",
                   help="also the tabular model's median APE vs training kernels (10, 20, 40, ..., all)")
    p.add_argument("--energy-pcts", default="10,25",
                   help="energy few-shot: %% of each problem's configurations measured (10,25); energy figures "
                        "are computed when rows carry measured energy")
    p.add_argument("--energy-top-k", type=positive_int, default=20, help="energy: the top-k of the ranking share (20)")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots")
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print metrics.json instead of the summary")
    p.set_defaults(func=cmd_evaluate)

    p = subparsers.add_parser(
        "fit-energy", help="fit a GPU profile's energy constants to measured energy (e.g. a clock sweep)",
        description="Fit the GPU energy constants of a profile (the idle power's constant part, the energy per fp32 "
                    "FMA and the voltage floor; the clock tree's watts are kept) to the measured energy of a dataset, "
                    "typically Kernel Tuner's synthetic fp32 kernel swept over clocks on that GPU and imported with "
                    "'dataset import-kt', and write the profile with them. No device is used.")
    p.add_argument("--data", required=True, metavar="DATASET", help="dataset with measured energy and time")
    p.add_argument("--profile", required=True, help="the GPU profile to fit (bundled name or JSON path)")
    p.add_argument("--out", required=True, metavar="PROFILE.json", help="where to write the fitted profile (JSON)")
    p.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                   help="a cache of the shared static analyses of imported rows (kernelcast analyze --cache; the "
                        "dataset's own DATASET/analysis is read too); repeatable")
    p.add_argument("--json", action="store_true", help="print the fit as JSON instead of the table")
    p.set_defaults(func=cmd_fit_energy)


def cmd_fit_energy(args: argparse.Namespace) -> int:
    """``kernelcast fit-energy``: the profile with its GPU energy constants fitted to the dataset."""
    import json

    from kernelcast.calib.profile import ProfileError, load_profile
    from kernelcast.datagen.frame import DataError, load_measured_frame
    from kernelcast.models.analytical.energy_fit import energy_rows, fit_energy_constants, fit_summary

    out = check_out_file(args.out)
    for d in args.analysis_cache:
        check_in_dir(d, "--analysis-cache")
    try:
        profile = load_profile(args.profile)
    except (ProfileError, OSError, ValueError) as e:
        raise UsageError(f"--profile {args.profile}: {e}") from None
    try:
        frame = load_measured_frame(args.data)[0]
    except DataError as e:
        raise UsageError(f"--data {args.data}: {e}") from None
    rows = energy_rows(frame)
    if len(rows) < 2:
        raise UsageError(f"--data {args.data}: {len(rows)} row(s) with a measured energy and time; the fit needs "
                         "at least 2")
    fitted, fit = fit_energy_constants(profile, rows, list(args.analysis_cache),
                                       source=f"fitted: kernelcast fit-energy --data {Path(args.data).name}")
    fitted.save(out)
    if args.json:
        print(json.dumps(fit_summary(fit), indent=1))
    else:
        print(fit.table())
        print(f"\nprofile written to {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    out = check_out_dir(args.out)
    check_in_dir(args.data, "--data", "dataset directory")
    if args.kind == "tabular":
        return run_tabular(args)
    if args.base and not Path(args.base).is_dir() and str(args.base).count("/") != 1:
        raise UsageError(f"--base {args.base}: no such directory, and not a hub name "
                         f"like Salesforce/codegen-350M-multi")
    if args.base and not Path(args.base).is_dir():
        from kernelcast.models.hub import hub_unavailable

        why = hub_unavailable(args.base)       # seconds, instead of the hub client's minute of retries
        if why:
            raise UsageError(f"--base {args.base}: {why}")

    if args.direct and args.mode != "efficient":
        raise UsageError("--direct applies to --mode efficient (prompt mode learns log2 time directly)")
    for name in ("epochs", "patience", "batch_size", "grad_accum", "max_minutes", "lr_decay", "lr"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if args.max_steps is not None and args.max_steps < 0:
        raise UsageError("--max-steps must not be negative")
    profile = None
    if args.mode == "efficient" and not args.direct:
        from kernelcast.calib.local import resolve_profile

        profile = resolve_profile(args.profile, args.device,
                                  on_calibrate=lambda msg: print(f"note: {msg}", file=sys.stderr))
    elif args.profile or args.device:
        raise UsageError("--profile/--device apply to --kind tabular and to --mode efficient without --direct")

    from kernelcast.train.loop import DataError, train_model
    from kernelcast.train.report import format_metrics

    try:
        result = train_model(
            args.data, out, mode=args.mode, base=args.base, target=args.target, epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
            grad_accum=args.grad_accum, patience=args.patience, max_steps=args.max_steps, seed=args.seed,
            resume=not args.no_resume, progress=not args.no_progress, threads=args.threads,
            max_minutes=args.max_minutes, lr_decay=args.lr_decay, profile=profile, time_loss=args.time_loss)
    except DataError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # bad option values
        raise UsageError(str(e)) from None
    except OSError as e:
        if args.base:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UsageError(f"cannot load --base {args.base}: {first}") from None
        raise
    if args.json:
        from kernelcast.console import to_json

        print(to_json(result.metrics))
        return 0
    print(format_metrics(result.metrics, str(result.out_dir)))
    return 0


def run_tabular(args: argparse.Namespace) -> int:
    """``train --kind tabular``: build the table, fit, save ``tabular.json`` in --out."""
    from kernelcast.calib.local import resolve_profile
    from kernelcast.train.report import format_tabular
    from kernelcast.train.tabular import train_tabular

    profile = resolve_profile(args.profile, args.device,
                              on_calibrate=lambda msg: print(f"note: {msg}", file=sys.stderr))
    try:
        res = train_tabular(args.data, args.out, profile, target=args.target, seed=args.seed)
    except ValueError as e:  # DataError (an InputError) and bad option values
        raise UsageError(str(e)) from None
    if args.json:
        from kernelcast.console import to_json

        print(to_json(res))
        return 0
    print(format_tabular(res))
    return 0


def cmd_pretrain(args: argparse.Namespace) -> int:
    from kernelcast.train.pretrain import PretrainOptions, check_corpus_specs, check_out_dir, pretrain
    from kernelcast.train.report import format_pretrain

    opts = PretrainOptions(epochs=args.epochs, max_steps=args.max_steps, max_minutes=args.max_minutes,
                           block_size=args.block_size, batch_size=args.batch_size, lr=args.lr, n_layer=args.n_layer,
                           n_embd=args.n_embd, n_head=args.n_head, vocab_size=args.vocab_size, seed=args.seed,
                           threads=args.threads, progress=not args.no_progress)
    check_corpus_specs(args.corpus)
    check_out_dir(args.out)
    res = pretrain(args.corpus, args.out, opts,
                   progress=None if args.json else (lambda msg: print(f"pretrain: {msg}", file=sys.stderr)))
    if args.json:
        from kernelcast.console import to_json

        print(to_json(res.summary))
        return 0
    print(format_pretrain(res.summary, str(res.out_dir)))
    return 0


def cmd_blend(args: argparse.Namespace) -> int:
    from kernelcast.calib.local import resolve_profile
    from kernelcast.models.predict import load_learned
    from kernelcast.train.blend import fit_blend_oof, learned_kind
    from kernelcast.train.report import format_blend

    from kernelcast.console import to_json

    check_in_dir(args.model, "--model", "model directory")
    learned_kind(args.model)
    check_in_dir(args.data, "--data", "dataset directory")
    load_learned(args.model)           # a damaged model: one line, before calibrating or reading data
    profile = resolve_profile(args.profile, args.device,
                              on_calibrate=lambda msg: print(f"note: {msg}", file=sys.stderr))
    say = None if args.json or args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    res = fit_blend_oof(args.data, args.model, profile, folds=args.folds, seed=args.seed, criterion=args.criterion,
                        codegen_epochs=args.codegen_epochs, progress=say)
    if args.json:
        print(to_json({**{k: v for k, v in res.items() if k != "blend"}, "blend": res["blend"].to_dict()}))
        return 0
    print(format_blend(res, args.model))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from kernelcast.calib.local import resolve_profile
    from kernelcast.datagen.frame import check_distinct, check_one_device
    from kernelcast.train.evaluate import (
        DEFAULT_MODELS,
        EvaluateOptions,
        evaluate_dataset,
        parse_models,
        parse_pcts,
        parse_shots,
    )
    from kernelcast.train.evaluate_report import check_out_dir, format_summary, metrics_json, write_evaluation
    from kernelcast.train.oof import DeviceProfiles

    from kernelcast.console import to_json

    check_out_dir(args.out)
    models = parse_models(args.models) if args.models is not None else \
        (("analytical",) if args.folds == 0 else DEFAULT_MODELS)
    if args.saved_model is not None:
        check_in_dir(args.saved_model, "--saved-model", "model directory")
        models = tuple(dict.fromkeys((*models, "saved")))
    opts = EvaluateOptions(folds=args.folds, models=models, seed=args.seed, shots=parse_shots(args.shots),
                           interval_by=args.interval_by, inner_folds=args.inner_folds,
                           codegen_epochs=args.codegen_epochs, codegen_base=args.codegen_base,
                           codegen_minutes=args.codegen_minutes, learning_curve=args.learning_curve,
                           energy_pcts=parse_pcts(args.energy_pcts), energy_top_k=args.energy_top_k,
                           repeats=args.repeats, group_by=args.group_by, saved_model=args.saved_model,
                           analysis_dirs=tuple(args.analysis_cache))
    for d in args.data:
        check_in_dir(d, "--data", "dataset directory")
    specs = list(args.profile or [])
    per_device = [s for s in specs if "=" in s]
    plain = [s for s in specs if "=" not in s]
    if len(plain) > 1:
        raise UsageError("--profile without DEVICE= is the profile of every device: give it once")
    if per_device or args.group_by != "kernel":
        check_distinct([Path(d) for d in args.data])
    else:
        check_one_device([Path(d) for d in args.data])

    def note(msg: str) -> None:
        print(f"note: {msg}", file=sys.stderr)

    default = resolve_profile(plain[0] if plain else None, args.device, on_calibrate=note) \
        if plain or not per_device else None
    by_device = {}
    for s in per_device:
        dev, _, spec = s.partition("=")
        if not dev or not spec:
            raise UsageError(f"--profile {s!r}: expected DEVICE=PROFILE")
        by_device[dev] = resolve_profile(spec, None, on_calibrate=note)
    profile = DeviceProfiles(default, by_device) if by_device else default

    def progress(msg: str) -> None:
        if not args.quiet:
            print(f"evaluate: {msg}", file=sys.stderr)

    spec = ", ".join(specs) if specs else (f"cached profile of {default.device.name}" if default else None)
    ev = evaluate_dataset(args.data, profile, opts, profile_spec=spec, progress=progress)
    out = write_evaluation(ev, args.out, plots=not args.no_plots)
    if args.json:
        print(to_json(metrics_json(ev)))
        return 0
    print(format_summary(metrics_json(ev)))
    print(f"\nwritten to {out}: metrics.json, oof.parquet, REPORT.md")
    return 0

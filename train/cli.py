"""``kernelcast train``: train the learned model on a dataset (hooked into the CLI by ``add_parser``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train", help="train the learned (CodeGen regression) model on a dataset",
        description="Train LLMPerf's model (CodeGen + a regression head on the last N tokens, MSE on log2 time) "
                    "on a dataset made by 'kernelcast datagen': 90/10 split by kernel, AdamW with linear warm-up, "
                    "early stopping, a checkpoint every epoch (rerun the same command to resume), the best model "
                    "saved with save_pretrained and metrics.json in --out.",
        epilog="Modes: 'prompt' feeds LLMPerf's prompt of each row (source, arguments, NDRange sizes); 'efficient' "
               "encodes each kernel source once per batch and adds numeric launch features per configuration. "
               "Without --base a byte-level BPE tokenizer and a small CodeGen are trained from scratch.")
    p.add_argument("--data", required=True, metavar="DATASET", help="dataset directory (kernelcast datagen --out)")
    p.add_argument("--out", required=True, metavar="MODEL", help="model directory to write (resumes if it holds a "
                                                                 "checkpoint)")
    p.add_argument("--mode", choices=("prompt", "efficient"), default="prompt",
                   help="prompt (LLMPerf, default) or efficient (one encoder pass per kernel per batch)")
    p.add_argument("--base", help="pretrained CodeGen to fine-tune: a hub name (Salesforce/codegen-350M-multi) or "
                                  "a local directory; default: a small CodeGen from scratch")
    p.add_argument("--target", choices=("time", "energy", "both"), default="time",
                   help="what to predict (energy needs a dataset measured with an energy meter)")
    p.add_argument("--epochs", type=int, default=10, help="epochs (default 10)")
    p.add_argument("--batch-size", type=int, help="rows per batch (default 8 prompt, 64 efficient)")
    p.add_argument("--lr", type=float, help="peak learning rate (default 5e-4 from scratch, 1e-5 with --base)")
    p.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (0.01)")
    p.add_argument("--warmup-ratio", type=float, default=0.1, help="fraction of steps of linear warm-up (0.1)")
    p.add_argument("--grad-accum", type=int, default=1, help="batches per optimizer step (1)")
    p.add_argument("--patience", type=int, default=15, help="early stopping: epochs without improvement (15)")
    p.add_argument("--max-steps", type=int, help="stop after this many optimizer steps (rerun to continue)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split, the data order and the weights")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: one per core; 1 can be faster on a "
                                               "machine busy with other work)")
    p.add_argument("--no-resume", action="store_true", help="start over even if --out holds a checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from kernelcast.cli import UsageError

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if not Path(args.data).is_dir():
        raise UsageError(f"no such dataset directory: {args.data}")
    if args.base and not Path(args.base).is_dir() and str(args.base).count("/") != 1:
        raise UsageError(f"--base {args.base}: no such directory, and not a hub name "
                         f"like Salesforce/codegen-350M-multi")

    from train.loop import DataError, train_model

    try:
        result = train_model(
            args.data, out, mode=args.mode, base=args.base, target=args.target, epochs=args.epochs,
            batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay, warmup_ratio=args.warmup_ratio,
            grad_accum=args.grad_accum, patience=args.patience, max_steps=args.max_steps, seed=args.seed,
            resume=not args.no_resume, progress=not args.no_progress, threads=args.threads)
    except DataError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # bad option values
        raise UsageError(str(e)) from None
    except OSError as e:
        if args.base:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UsageError(f"cannot load --base {args.base}: {first}") from None
        raise
    print(format_metrics(result.metrics, str(result.out_dir)))
    return 0


def format_metrics(m: dict[str, Any], out_dir: str) -> str:
    from kernelcast.cli import fmt_table

    rows = []
    for target, v in (m.get("validation") or {}).items():
        if not isinstance(v, dict):
            continue
        rows.append([target, v["rows"], v["kernels"], v["mape"], v["mape_per_kernel"], v["median_ape"], v["spearman"]])
    d, t = m["data"], m["training"]
    lines = [
        f"model       {out_dir}   ({m['mode']} mode, {m['model']['parameters']:,} parameters"
        + (f", base {m['model']['base']}" if m["model"].get("base") else ", from scratch") + ")",
        f"data        {d['train_rows']} training rows ({d['train_kernels']} kernels), {d['val_rows']} validation "
        f"rows ({d['val_kernels']} kernels); discarded over {m['model']['max_length']} tokens: "
        f"{d['discarded_over_length_train']} train, {d['discarded_over_length_val']} validation",
        f"training    {t['steps']} steps, {t['epochs_completed']} epoch(s), {t['seconds']:.0f} s, "
        + (f"{t['samples_per_s']:.1f} samples/s" if t["samples_per_s"] else "-")
        + f"; best epoch {t['best_epoch']}; stopped: {m['stopped']}",
    ]
    if m["stopped"] == "max_steps":
        lines.append("            (stopped by --max-steps: rerun the same command without it to continue)")
    if rows:
        lines += ["", "validation (held-out kernels)",
                  fmt_table(rows, ["target", "rows", "kernels", "MAPE %", "MAPE/kernel %", "median APE %",
                                   "Spearman"])]
    else:
        lines.append("validation  no held-out rows (too few kernels)")
    return "\n".join(lines)

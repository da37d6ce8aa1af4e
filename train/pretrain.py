"""Self-supervised pretraining of the small CodeGen on an unlabelled kernel corpus (``kernelcast pretrain``).

Pretrained CodeGen weights cannot be downloaded everywhere (not on the development machines), so
the learned model can start from a backbone pretrained here instead: a causal language model
(next-token prediction, :class:`transformers.CodeGenForCausalLM`) trained on the kernel texts of
one or more corpora (the bundled corpus, ``corpus ingest`` and ``corpus synth`` output), each text
in the efficient mode's input format (:func:`models.learned.data.kernel_text`, the name first).

* the tokenizer is the project's byte-level BPE (:func:`models.learned.tokenizer.train_tokenizer`),
  trained on the training texts;
* the texts, separated by the end-of-text token, are packed into blocks of ``block_size`` tokens;
  the validation blocks come from whole kernel groups (:func:`train.split.group_key`: a synthetic
  template family or a source file) held out from training, so the validation loss measures
  kernels unlike the training ones;
* AdamW, linear warm-up, cosine decay to ``min_lr_ratio`` of the peak over the planned steps;
  bounded by ``epochs``, ``max_steps`` and ``max_minutes``;
* the result is saved with ``save_pretrained`` (``config.json``, ``model.safetensors``, the
  tokenizer files) plus ``pretrain.json`` (data, losses before and after, steps, time), written to
  a temporary directory and renamed into place: an interrupted run (Ctrl-C) saves the model as far
  as it got, and a killed one leaves no half-written model. It is not resumable: a rerun starts over.

``kernelcast train --base DIR`` then fine-tunes the regression from it (the backbone's weights; the
regression head starts from scratch), exactly as with a hub checkpoint.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.errors import InputError

log = logging.getLogger(__name__)

#: the summary file that marks a directory written by :func:`pretrain`
PRETRAIN_FILE = "pretrain.json"
KIND = "kernelcast-pretrain"


class PretrainError(InputError, ValueError):
    """Bad input to ``kernelcast pretrain`` (an unreadable corpus, an unusable --out, bad options)."""


@dataclass
class PretrainOptions:
    epochs: int = 3
    max_steps: int | None = None
    max_minutes: float | None = None
    block_size: int = 256
    batch_size: int = 8                    # blocks per optimizer step
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0
    val_fraction: float = 0.05
    # the backbone (as ``kernelcast train`` builds one from scratch)
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 2048
    vocab_size: int = 4096
    seed: int = 0
    threads: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        for name in ("epochs", "block_size", "batch_size", "n_layer", "n_embd", "n_head", "n_positions"):
            if int(getattr(self, name)) < 1:
                raise PretrainError(f"--{name.replace('_', '-')} must be at least 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise PretrainError("--max-steps must be at least 1")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise PretrainError("--max-minutes must be positive")
        if not self.lr > 0:
            raise PretrainError("--lr must be positive")
        if self.vocab_size < 300:
            raise PretrainError("--vocab-size must be at least 300 (256 bytes + merges + special tokens)")
        if self.n_embd % self.n_head:
            raise PretrainError(f"--n-embd {self.n_embd} is not a multiple of --n-head {self.n_head}")
        if self.block_size > self.n_positions:
            raise PretrainError(f"--block-size {self.block_size} exceeds the context of {self.n_positions} positions")
        if not 0.0 <= self.val_fraction < 1.0:
            raise PretrainError("the validation fraction must be in [0, 1)")


@dataclass
class CorpusText:
    text: str
    group: str
    corpus: str


@dataclass
class PretrainResult:
    out_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# corpus


def check_corpus_specs(specs: Sequence[str]) -> None:
    """:class:`PretrainError` unless every spec is ``bundled`` or a corpus directory (``kernels.jsonl``)."""
    if not specs:
        raise PretrainError("no --corpus given (use 'bundled' and/or corpus directories)")
    for s in specs:
        if s != "bundled" and not (Path(s) / "kernels.jsonl").is_file():
            raise PretrainError(f"--corpus {s}: not a corpus directory (no kernels.jsonl); make one with "
                                f"'kernelcast corpus ingest' or 'kernelcast corpus synth'")


def check_out_dir(out: str | os.PathLike[str]) -> Path:
    """``--out`` may be new, an empty directory, or an earlier pretraining (which is replaced)."""
    p = Path(out)
    if p.exists():
        if not p.is_dir():
            raise PretrainError(f"--out {p} exists and is not a directory")
        if any(p.iterdir()) and not (p / PRETRAIN_FILE).is_file():
            raise PretrainError(f"--out {p} is a non-empty directory that holds no pretrained model; choose another")
    return p


def corpus_texts(specs: Sequence[str]) -> list[CorpusText]:
    """The distinct kernel texts of the corpora (every kernel, also those that failed the compile
    check: the language model learns the language), with their kernel group."""
    from kernelcast.datagen.corpus_store import read_records
    from kernelcast.models.learned.data import kernel_text
    from kernelcast.train.split import group_key

    check_corpus_specs(specs)
    out: list[CorpusText] = []
    seen: set[str] = set()
    for spec in specs:
        if spec == "bundled":
            import kernelcast.datagen as datagen
            from kernelcast.datagen.corpus import ingest

            records, _ = ingest([Path(datagen.__file__).parent / "bundled"], compile_fn=None)
        else:
            records = read_records(spec)
        for r in records:
            src, name = r.get("source"), r.get("name")
            if not isinstance(src, str) or not isinstance(name, str) or not src.strip():
                continue
            text = kernel_text(src, name, name_first=True)
            if text in seen:
                continue
            seen.add(text)
            out.append(CorpusText(text, group_key(name, r.get("origin"), name)[0], spec))
    if not out:
        raise PretrainError(f"the corpora {', '.join(specs)} hold no kernel text")
    return out


def split_texts(texts: Sequence[CorpusText], val_fraction: float, seed: int) -> tuple[list[str], list[str], int]:
    """(training texts, validation texts, validation groups): whole kernel groups held out."""
    from kernelcast.train.split import split_by_group

    ids = [str(i) for i in range(len(texts))]
    train_ids, val_ids, how = split_by_group(ids, [t.group for t in texts], val_fraction=val_fraction, seed=seed)
    vg = how["val_groups"]
    return ([texts[int(i)].text for i in train_ids], [texts[int(i)].text for i in val_ids],
            len(vg) if isinstance(vg, list) and how["by"] == "group" else 0)


def pack_blocks(texts: Sequence[str], tokenizer: Any, block_size: int) -> np.ndarray:
    """The texts' token ids, each followed by the end-of-text token, concatenated and cut into rows
    of ``block_size`` (the last partial block is padded by wrapping to the start)."""
    ids: list[int] = []
    eos = int(tokenizer.eos_token_id)
    if texts:
        for seq in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
            ids.extend(seq)
            ids.append(eos)
    if not ids:
        return np.zeros((0, block_size), dtype=np.int64)
    n = math.ceil(len(ids) / block_size)
    flat = np.resize(np.asarray(ids, dtype=np.int64), n * block_size)
    return flat.reshape(n, block_size)


# ---------------------------------------------------------------------------------------------
# training


def pretrain(corpora: Sequence[str], out_dir: str | os.PathLike[str], options: PretrainOptions | None = None,
             progress: Callable[[str], None] | None = None) -> PretrainResult:
    """Pretrain a small CodeGen as a causal LM on the corpora and save it in ``out_dir`` (module docstring)."""
    import torch
    from kernelcast.models.learned.config import scratch_backbone_config
    from kernelcast.models.learned.tokenizer import train_tokenizer
    from transformers import CodeGenConfig, CodeGenForCausalLM

    opts = options or PretrainOptions()
    out = check_out_dir(out_dir)
    say = progress or (lambda msg: log.info("%s", msg))
    if opts.threads:
        torch.set_num_threads(opts.threads)
    t_start = time.perf_counter()
    texts = corpus_texts(corpora)
    train_texts, val_texts, val_groups = split_texts(texts, opts.val_fraction, opts.seed)
    say(f"{len(texts)} distinct kernel texts from {', '.join(corpora)}: {len(train_texts)} for training, "
        f"{len(val_texts)} held out ({val_groups} kernel groups)")
    tokenizer = train_tokenizer(train_texts, vocab_size=opts.vocab_size)
    train_blocks = pack_blocks(train_texts, tokenizer, opts.block_size)
    val_blocks = pack_blocks(val_texts, tokenizer, opts.block_size)
    torch.manual_seed(opts.seed)
    cfg = scratch_backbone_config(len(tokenizer), n_layer=opts.n_layer, n_embd=opts.n_embd, n_head=opts.n_head,
                                  n_positions=opts.n_positions, bos_token_id=tokenizer.eos_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    model = CodeGenForCausalLM(CodeGenConfig.from_dict(cfg))
    steps_per_epoch = math.ceil(len(train_blocks) / opts.batch_size)
    planned = steps_per_epoch * opts.epochs
    if opts.max_steps is not None:
        planned = min(planned, opts.max_steps)
    warmup = max(1, math.ceil(opts.warmup_ratio * planned))

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        frac = min(1.0, (step - warmup) / max(1, planned - warmup))
        return opts.min_lr_ratio + (1.0 - opts.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * frac))

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": opts.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=opts.lr, betas=(0.9, 0.999),
                                  eps=1e-8)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    n_params = int(sum(p.numel() for p in model.parameters()))
    say(f"{len(train_blocks)} training blocks and {len(val_blocks)} validation blocks of {opts.block_size} tokens; "
        f"model {n_params:,} parameters; up to {planned} steps")

    val_before = _val_loss(model, val_blocks, opts.batch_size)
    deadline = t_start + 60.0 * opts.max_minutes if opts.max_minutes else None
    history: list[dict[str, Any]] = []
    step, stopped = 0, "completed"
    t_train = time.perf_counter()
    bar = _progress_bar(planned, opts.progress)
    running: list[float] = []
    try:
        for epoch in range(opts.epochs):
            order = np.random.default_rng([opts.seed, epoch]).permutation(len(train_blocks))
            model.train()
            for i in range(0, len(order), opts.batch_size):
                x = torch.from_numpy(train_blocks[order[i:i + opts.batch_size]])
                loss = model(input_ids=x, labels=x).loss
                loss.backward()
                if opts.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), opts.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                running = (running + [float(loss.item())])[-50:]
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(running):.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
                if opts.max_steps is not None and step >= opts.max_steps:
                    stopped = "max_steps"
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    stopped = "time_limit"
                    break
            vl = _val_loss(model, val_blocks, opts.batch_size)
            history.append({"epoch": epoch + 1, "step": step, "train_loss": float(np.mean(running)) if running
                            else None, "val_loss": vl, "lr": scheduler.get_last_lr()[0],
                            "seconds": time.perf_counter() - t_train})
            say(f"epoch {epoch + 1}: step {step}, training loss {history[-1]['train_loss']:.3f}, validation loss "
                f"{vl:.3f}" if math.isfinite(vl) else f"epoch {epoch + 1}: step {step}")
            if stopped != "completed":
                break
    except KeyboardInterrupt:
        stopped = "interrupted"
        log.warning("interrupted at step %d: saving the model as far as it got", step)
    finally:
        bar.close()
    train_seconds = time.perf_counter() - t_train
    val_after = history[-1]["val_loss"] if history and stopped != "interrupted" else _val_loss(
        model, val_blocks, opts.batch_size)
    summary = {
        "kind": KIND,
        "corpora": list(corpora),
        "texts": {"total": len(texts), "train": len(train_texts), "validation": len(val_texts),
                  "validation_groups": val_groups},
        "tokens": {"train": int(train_blocks.size), "validation": int(val_blocks.size),
                   "vocab": len(tokenizer), "block_size": opts.block_size},
        "model": {"parameters": n_params, "n_layer": opts.n_layer, "n_embd": opts.n_embd, "n_head": opts.n_head,
                  "n_positions": opts.n_positions},
        "stopped": stopped,
        "steps": step,
        "planned_steps": planned,
        "epochs_completed": sum(1 for h in history if h["step"] == steps_per_epoch * h["epoch"]),
        "validation_loss_before": val_before,
        "validation_loss_after": val_after,
        "history": history,
        "train_seconds": train_seconds,
        "seconds": time.perf_counter() - t_start,
        "options": {f.name: getattr(opts, f.name) for f in fields(opts) if f.name != "progress"},
    }
    _save_atomically(out, model, tokenizer, summary)
    if stopped == "interrupted":
        raise KeyboardInterrupt
    return PretrainResult(out, summary)


def _val_loss(model: Any, blocks: np.ndarray, batch_size: int) -> float:
    """Mean next-token cross-entropy (nats per token) over the validation blocks."""
    import torch

    if not len(blocks):
        return float("nan")
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(blocks), batch_size):
            x = torch.from_numpy(blocks[i:i + batch_size])
            total += float(model(input_ids=x, labels=x).loss) * len(x)
            n += len(x)
    model.train()
    return total / n


def _save_atomically(out: Path, model: Any, tokenizer: Any, summary: dict[str, Any]) -> None:
    from transformers.utils import logging as hf_logging

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(tmp))
    finally:
        hf_logging.enable_progress_bar()
    tokenizer.save_pretrained(str(tmp))
    (tmp / PRETRAIN_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        shutil.rmtree(old)


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="step", desc="pretrain", dynamic_ncols=True)


def is_pretrained_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a backbone written by :func:`pretrain`."""
    p = Path(path) / PRETRAIN_FILE
    if not p.is_file():
        return False
    try:
        return json.loads(p.read_text(encoding="utf-8")).get("kind") == KIND
    except (OSError, ValueError):
        return False

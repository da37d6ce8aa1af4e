"""The training loop of the learned model (LLMPerf IV-B1, with the efficient mode and energy head).

* a validation split by kernel group (:func:`train.split.split_by_group`: a synthetic template family
  or a source file is never on both sides, so the validation loss that selects the model and stops
  training measures kernels unlike the training ones), prompts over the context length discarded
  and counted;
* MSE on log2(time in us), or with a device profile (efficient mode, the default of the CLI) on the
  residual log2(measured / analytical) with the feature table of ``models.tabular.build_table`` in
  the input, so that far from its data the model falls back to the analytical model; the energy
  head uses Zhang et al.'s 1/E-weighted squared loss
  ``(E_p - E_m)^2 / E_m`` (energies divided by the training set's geometric mean, so the loss does
  not depend on the unit);
* AdamW (beta 0.9/0.999, eps 1e-8, weight decay on matrices only), linear warm-up (at most one
  epoch), then the learning rate is kept while the validation loss improves and multiplied by
  ``lr_decay`` after each epoch without improvement (never below ``min_lr_ratio`` of the peak);
  training stops after ``patience`` epochs without improvement (early stopping), after ``epochs``
  epochs, or at ``max_steps`` / ``max_minutes`` (a rerun continues); gradient accumulation and
  clipping;
* a checkpoint every epoch (and when stopped by ``max_steps`` or Ctrl-C) from which a rerun resumes
  at the same step with the same data order, optimizer, schedule and RNG state;
* the best model (lowest validation loss) saved with ``save_pretrained`` in ``out_dir`` and
  ``metrics.json`` beside it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from kernelcast.datagen.frame import DataError, load_measured_frame
from kernelcast.models.learned.config import LearnedConfig, LearnedMode, Targets, scratch_backbone_config
from kernelcast.models.learned.data import (
    EncodedRows,
    encode_rows,
    feature_table,
    inference_batches,
    kernel_grouped_batches,
    kernel_text,
    make_batch,
    prepare_frame,
    prompt_batches,
    row_prompt,
)
from kernelcast.models.learned.features import (
    DEFAULT_EXTRA_COLUMNS,
    compute_features,
    feature_names,
    normalisation,
    residual_base_log2,
    resolve_extra_columns,
    table_feature_columns,
)
from kernelcast.models.learned.model import KernelPerfModel
from kernelcast.models.learned.predictor import LearnedPredictor
from kernelcast.models.learned.tokenizer import load_tokenizer, train_tokenizer
from kernelcast.train.checkpoint import checkpoint_dir, read_state, restore_training, save_checkpoint
from kernelcast.train.split import group_key, split_by_group

from kernelcast.metrics import evaluate

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint"
METRICS = "metrics.json"
@dataclass
class TrainOptions:
    mode: LearnedMode = "prompt"
    base: str | None = None
    target: Targets = "time"
    epochs: int = 30                       # at most; early stopping usually ends training sooner
    batch_size: int | None = None          # default: 8 (prompt), 64 (efficient)
    lr: float | None = None                # default: 1e-5 with a pretrained base, 5e-4 from scratch
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    grad_accum: int = 1
    patience: int = 3                      # epochs without a better validation loss before stopping
    lr_decay: float = 0.5                  # learning-rate factor after an epoch without improvement
    min_lr_ratio: float = 0.05             # the learning rate never falls below this share of the peak
    max_steps: int | None = None           # stop (and checkpoint) after this many optimizer steps
    max_minutes: float | None = None       # stop (and checkpoint) after this much training time in this run
    seed: int = 0
    resume: bool = True
    progress: bool = True
    val_fraction: float = 0.15             # share of the kernels (whole kernel groups) held out for validation
    kernels_per_batch: int = 4             # efficient mode: distinct kernels per batch
    n_last_tokens: int = 4
    pooling: str | None = None             # default: "mean" in efficient mode, "last" (LLMPerf) in prompt mode
    head_hidden: list[int] = field(default_factory=lambda: [256])
    head_dropout: float = 0.1
    # backbone from scratch (no --base)
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    n_positions: int = 2048
    vocab_size: int = 4096
    max_length: int | None = None          # context; default the backbone's n_positions
    max_scalars: int = 4
    extra_columns: list[str] = field(default_factory=lambda: list(DEFAULT_EXTRA_COLUMNS))
    energy_loss: str = "zhang"             # "zhang" (1/E-weighted squared error) or "mse_log2"
    time_loss: str = "mse"                 # "mse" on log2 time (LLMPerf) or "huber" (delta 1 = a factor of 2)
    max_grad_norm: float = 1.0
    eval_batch_size: int = 32
    threads: int | None = None             # torch CPU threads (None: torch's default, one per core)
    #: device profile (``calib.profile.DeviceProfile``) of the analytical base and the feature table
    profile: Any = None
    residual: bool | None = None           # default: with a profile
    table_features: bool | None = None     # efficient mode; default: with a profile
    feature_clip: float = 10.0             # normalised table features are clipped to +-this

    def __post_init__(self) -> None:
        if self.mode not in ("prompt", "efficient"):
            raise ValueError(f"mode must be prompt or efficient, got {self.mode!r}")
        if self.target not in ("time", "energy", "both"):
            raise ValueError(f"target must be time, energy or both, got {self.target!r}")
        if self.time_loss not in ("mse", "huber"):
            raise ValueError(f"time_loss must be mse or huber, got {self.time_loss!r}")
        if self.energy_loss not in ("zhang", "mse_log2"):
            raise ValueError(f"energy_loss must be zhang or mse_log2, got {self.energy_loss!r}")
        if self.batch_size is None:
            self.batch_size = 8 if self.mode == "prompt" else 64
        if self.lr is None:
            # a hub-scale pretrained model is fine-tuned gently; a small backbone of 'kernelcast pretrain' is not
            # much further from its optimum than one trained from scratch
            from kernelcast.train.pretrain import is_pretrained_dir

            self.lr = 1e-5 if self.base and not is_pretrained_dir(self.base) else 5e-4
        for name in ("epochs", "batch_size", "grad_accum", "patience"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_steps is not None and self.max_steps < 0:
            raise ValueError("max_steps must not be negative")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError("max_minutes must be positive")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError("lr_decay must be in (0, 1]")
        if not 0.0 < self.min_lr_ratio <= 1.0:
            raise ValueError("min_lr_ratio must be in (0, 1]")
        if self.residual is None:
            self.residual = self.profile is not None
        if self.table_features is None:
            self.table_features = self.profile is not None and self.mode == "efficient"
        if (self.residual or self.table_features) and self.profile is None:
            raise ValueError("the residual target and the feature table need a device profile")
        if self.table_features and self.mode != "efficient":
            raise ValueError("the feature table is an input of the efficient mode")


@dataclass
class TrainResult:
    out_dir: Path
    metrics: dict[str, Any]
    predictor: LearnedPredictor
    stopped: str                           # "completed" | "early_stopping" | "max_steps" | "time_limit"

    @property
    def complete(self) -> bool:
        return self.stopped not in ("max_steps", "time_limit")


# ---------------------------------------------------------------------------------------------
# data


def _targets(df: pd.DataFrame, target: str) -> tuple[np.ndarray, np.ndarray]:
    t = pd.to_numeric(df["time_median_us"], errors="coerce").to_numpy(dtype=np.float64) \
        if "time_median_us" in df.columns else np.full(len(df), np.nan)
    e = pd.to_numeric(df["energy_j"], errors="coerce").to_numpy(dtype=np.float64) \
        if "energy_j" in df.columns else np.full(len(df), np.nan)
    t = np.where(np.isfinite(t) & (t > 0), t, np.nan)
    e = np.where(np.isfinite(e) & (e > 0), e, np.nan)
    return t, e


def _usable(t: np.ndarray, e: np.ndarray, target: str) -> np.ndarray:
    if target == "time":
        return np.isfinite(t)
    if target == "energy":
        return np.isfinite(e)
    return np.isfinite(t) | np.isfinite(e)


# ---------------------------------------------------------------------------------------------
# model construction


def _new_model(opts: TrainOptions, train_df: pd.DataFrame, t: np.ndarray, e: np.ndarray,
               train_table: pd.DataFrame | None = None) -> tuple[KernelPerfModel, Any]:
    table_cols = table_feature_columns(train_table) if opts.table_features and train_table is not None else []
    # the feature table supersedes the older extra columns (analytical_log2_time, static_*)
    extra = resolve_extra_columns(opts.extra_columns, train_df.columns) \
        if opts.mode == "efficient" and not table_cols else []
    pooling = opts.pooling or ("mean" if opts.mode == "efficient" else "last")
    cfg = LearnedConfig(n_last_tokens=opts.n_last_tokens, pooling=pooling,  # type: ignore[arg-type]
                        head_hidden=list(opts.head_hidden),
                        head_dropout=opts.head_dropout, mode=opts.mode, targets=opts.target,
                        max_scalars=opts.max_scalars, extra_columns=extra, residual=bool(opts.residual),
                        table_features=table_cols, feature_clip=opts.feature_clip if table_cols else None,
                        profile=opts.profile.to_dict() if opts.profile is not None else None)
    if opts.mode == "efficient":
        cfg.feature_names = feature_names(opts.max_scalars, extra, table_cols)
        cfg.feature_mean, cfg.feature_std = normalisation(
            compute_features(train_df, opts.max_scalars, extra, train_table, table_cols))
    lt = np.log2(t[np.isfinite(t)])
    if len(lt):
        cfg.time_log2_mean, cfg.time_log2_std = float(lt.mean()), float(max(lt.std(), 1e-3))
        cfg.base_fallback_log2 = float(lt.mean())
        if cfg.residual and train_table is not None:
            r = np.log2(t) - residual_base_log2(train_table, cfg.base_fallback_log2)
            r = r[np.isfinite(r)]
            cfg.time_log2_mean, cfg.time_log2_std = float(r.mean()), float(max(r.std(), 1e-3))
    le = np.log2(e[np.isfinite(e)])
    if len(le):
        cfg.energy_log2_mean, cfg.energy_log2_std = float(le.mean()), float(max(le.std(), 1e-3))
        cfg.energy_ref_j = float(2.0 ** le.mean())
    torch.manual_seed(opts.seed)
    if opts.base:
        tokenizer = load_tokenizer(opts.base)
        cfg.max_length = opts.max_length or 2048
        model = KernelPerfModel.from_base(opts.base, cfg)
        return model, tokenizer
    texts = _tokenizer_corpus(train_df, opts.mode, opts.seed)
    tokenizer = train_tokenizer(texts, vocab_size=opts.vocab_size)
    cfg.backbone = scratch_backbone_config(len(tokenizer), n_layer=opts.n_layer, n_embd=opts.n_embd,
                                           n_head=opts.n_head, n_positions=opts.n_positions,
                                           bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    cfg.max_length = min(opts.max_length or opts.n_positions, opts.n_positions)
    return KernelPerfModel(cfg), tokenizer


def _tokenizer_corpus(df: pd.DataFrame, mode: str, seed: int, n_prompts: int = 2000) -> list[str]:
    """Training kernels' texts (and a sample of their prompts, so sizes and argument lines tokenize well)."""
    first = df.drop_duplicates("kernel_key")
    texts = [kernel_text(s, n, name_first=True) for s, n in zip(first["source"], first["kernel_name"])]
    sample = df.sample(n=min(n_prompts, len(df)), random_state=seed)
    texts += [row_prompt(s, k, a, g, lz) for s, k, a, g, lz in
              zip(sample["source"], sample["kernel_name"], sample["args"], sample["gsize"], sample["lsize"])]
    return texts


def _optimizer(model: KernelPerfModel, opts: TrainOptions) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": opts.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=float(opts.lr or 0.0), betas=(0.9, 0.999), eps=1e-8)


# ---------------------------------------------------------------------------------------------
# losses


def batch_loss(pred: dict[str, torch.Tensor], t_log2: torch.Tensor, energy: torch.Tensor,
               config: LearnedConfig, energy_loss: str = "zhang", time_loss: str = "mse") -> torch.Tensor:
    """Mean loss of a batch: MSE (or Huber with delta 1, i.e. a factor of 2) on log2 time over rows
    with a time, plus the energy loss over rows with an energy. ``t_log2``/``energy`` hold NaN where
    a row has none."""
    total = pred[next(iter(pred))].new_zeros(())
    if "time" in pred:
        m = torch.isfinite(t_log2)
        if m.any():
            if time_loss == "huber":
                total = total + torch.nn.functional.huber_loss(pred["time"][m], t_log2[m], delta=1.0)
            else:
                total = total + torch.mean((pred["time"][m] - t_log2[m]) ** 2)
    if "energy" in pred:
        m = torch.isfinite(energy)
        if m.any():
            if energy_loss == "zhang":
                ref = config.energy_ref_j
                e_m = energy[m] / ref
                e_p = torch.exp2(torch.clamp(pred["energy"][m] - math.log2(ref), -60.0, 60.0))
                total = total + torch.mean((e_p - e_m) ** 2 / e_m)
            else:
                total = total + torch.mean((pred["energy"][m] - torch.log2(energy[m])) ** 2)
    return total


# ---------------------------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def predict_encoded(model: KernelPerfModel, enc: EncodedRows, rows: np.ndarray, pad_id: int,
                    batch_size: int, kernels_per_batch: int) -> dict[str, np.ndarray]:
    """log2 predictions of ``rows`` (a residual time plus its analytical base)."""
    model.eval()
    out: dict[str, np.ndarray] = {}
    pos = {int(r): i for i, r in enumerate(rows)}
    for b_rows in inference_batches(enc, rows, batch_size, kernels_per_batch):
        b = make_batch(enc, b_rows, pad_id, model.config.max_length)
        for k, v in model(**b.model_inputs()).items():
            arr = out.setdefault(k, np.full(len(rows), np.nan))
            arr[[pos[int(r)] for r in b_rows]] = v.float().numpy()
    if model.config.residual and "time" in out and enc.base_log2 is not None:
        out["time"] = out["time"] + enc.base_log2[np.asarray(rows, dtype=np.int64)]
    return out


def _val_loss(pred: dict[str, np.ndarray], t: np.ndarray, e: np.ndarray, config: LearnedConfig,
              energy_loss: str, time_loss: str = "mse") -> float:
    tp = {k: torch.tensor(v, dtype=torch.float32) for k, v in pred.items()}
    if not tp:
        return float("nan")
    return float(batch_loss(tp, torch.tensor(np.log2(t), dtype=torch.float32), torch.tensor(e, dtype=torch.float32),
                            config, energy_loss, time_loss))


def _metrics_block(pred: dict[str, np.ndarray], t: np.ndarray, e: np.ndarray, kernels: np.ndarray,
                   names: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, true in (("time", t), ("energy", e)):
        if key not in pred:
            continue
        m = np.isfinite(true)
        out[key] = evaluate(np.exp2(pred[key][m]), true[m], kernels[m], names[m]) if m.any() else None
    return out


# ---------------------------------------------------------------------------------------------
# the loop


def train_model(dataset_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *, mode: LearnedMode = "prompt",
                base: str | None = None, target: Targets = "time", epochs: int = 10, batch_size: int | None = None,
                lr: float | None = None, weight_decay: float = 0.01, warmup_ratio: float = 0.1,
                grad_accum: int = 1, patience: int = 15, max_steps: int | None = None, seed: int = 0,
                resume: bool = True, progress: bool = True, **extra: Any) -> TrainResult:
    """Train on a dataset directory made by ``kernelcast datagen``; see :func:`fit_frame`."""
    frame, counts = load_measured_frame(dataset_dir)
    opts = TrainOptions(mode=mode, base=base, target=target, epochs=epochs, batch_size=batch_size, lr=lr,
                        weight_decay=weight_decay, warmup_ratio=warmup_ratio, grad_accum=grad_accum,
                        patience=patience, max_steps=max_steps, seed=seed, resume=resume, progress=progress,
                        **extra)
    return fit_frame(frame, out_dir=out_dir, options=opts, counts=counts, dataset=str(dataset_dir))


def fit_frame(frame: pd.DataFrame, *, out_dir: str | os.PathLike[str], options: TrainOptions | None = None,
              predictor: LearnedPredictor | None = None, counts: dict[str, int] | None = None,
              dataset: str | None = None, table: pd.DataFrame | None = None, **kwargs: Any) -> TrainResult:
    """Train on the rows of ``frame`` (dataset columns + ``source``), checkpointing in ``out_dir``.

    ``predictor`` (optional) is fine-tuned instead of building a new model; ``kwargs`` are
    :class:`TrainOptions` fields when ``options`` is not given. ``table``: the feature table of
    ``frame``'s rows (``models.tabular.build_table`` with the options' profile, same order), when
    the caller has built it already; otherwise it is built when the model needs it."""
    opts = options or TrainOptions(**kwargs)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    out = Path(out_dir)
    ckpt_path = out / CHECKPOINT
    counts = dict(counts or {"rows_total": len(frame), "rows_ok": len(frame)})

    frame = frame.reset_index(drop=True)
    if table is not None and len(table) != len(frame):
        raise ValueError("the feature table does not have the frame's rows")
    df = prepare_frame(frame)
    t_all, e_all = _targets(df, opts.target)
    if opts.target in ("energy", "both") and not np.isfinite(e_all).any():
        raise DataError("the data has no energy measurements (energy_j is null in every row; it was made "
                        "without an energy meter); train with --target time")
    keep = _usable(t_all, e_all, opts.target)
    counts["rows_without_target"] = int((~keep).sum())
    df = df[keep].reset_index(drop=True)
    frame = frame[keep].reset_index(drop=True)
    if table is not None:
        table = table.reset_index(drop=True)[keep].reset_index(drop=True)
    t_all, e_all = t_all[keep], e_all[keep]
    if df.empty:
        raise DataError("no row has a usable target")

    resume_dir = checkpoint_dir(ckpt_path) if opts.resume else None
    state: dict[str, Any]
    if resume_dir is not None:
        state = read_state(resume_dir)
        if state.get("mode") != opts.mode or state.get("target") != opts.target:
            raise DataError(f"{ckpt_path} holds a {state.get('mode')}/{state.get('target')} run; this run is "
                            f"{opts.mode}/{opts.target} (use another --out, or no resume)")
        train_k, val_k = state["split"]["train_kernels"], state["split"]["val_kernels"]
        known = set(train_k) | set(val_k)
        new = sorted(set(df["kernel_key"]) - known)
        if new:
            log.warning("%d kernel(s) not in the checkpoint's split are left out of this resumed run", len(new))
        model = KernelPerfModel.from_pretrained(resume_dir)
        tokenizer = load_tokenizer(resume_dir)
        log.info("resuming from %s: epoch %d, step %d", resume_dir, state["epoch"], state["step"])
    else:
        origins = df["kernel_origin"].tolist() if "kernel_origin" in df.columns else [None] * len(df)
        groups = [group_key(str(n), o, str(k))[0] for n, o, k in zip(df["kernel_name"], origins, df["kernel_key"])]
        train_k, val_k, how = split_by_group(df["kernel_key"], groups, val_fraction=opts.val_fraction, seed=opts.seed)
        if how["note"]:
            log.warning("validation split: %s", how["note"])
        state = {"mode": opts.mode, "target": opts.target, "epoch": 0, "batch_in_epoch": 0, "step": 0,
                 "best_val_loss": None, "best_epoch": None, "best_step": None, "bad_epochs": 0, "lr_scale": 1.0,
                 "history": [], "finished": None, "train_rows_seen": 0, "train_seconds": 0.0,
                 "split": {"seed": opts.seed, "val_fraction": opts.val_fraction, "by": how["by"],
                           "groups": how["groups"], "val_groups": how["val_groups"], "train_kernels": train_k,
                           "val_kernels": val_k}}
        if predictor is not None:
            model, tokenizer = predictor.model, predictor.tokenizer
        else:
            tr = df["kernel_key"].isin(set(train_k)).to_numpy()
            if table is None and (opts.residual or opts.table_features):
                table = _build_table(frame, opts.profile)
            model, tokenizer = _new_model(opts, df[tr], t_all[tr], e_all[tr],
                                          table[tr].reset_index(drop=True) if table is not None else None)
    cfg = model.config
    if cfg.mode != opts.mode:
        raise DataError(f"the model is a {cfg.mode}-mode model; this run asks for {opts.mode}")
    if table is None and (cfg.table_features or cfg.residual):
        table = feature_table(frame, cfg)

    is_train = df["kernel_key"].isin(set(train_k)).to_numpy()
    is_val = df["kernel_key"].isin(set(val_k)).to_numpy()
    enc = encode_rows(df, tokenizer, cfg, table)
    counts["discarded_over_length_train"] = int((enc.too_long & is_train).sum())
    counts["discarded_over_length_val"] = int((enc.too_long & is_val).sum())
    if enc.too_long.any():
        log.warning("discarded %d row(s) whose %s exceeds the %d-token context",
                    int(enc.too_long.sum()), "prompt" if cfg.mode == "prompt" else "source", cfg.max_length)
    train_rows = np.flatnonzero(is_train & ~enc.too_long)
    val_rows = np.flatnonzero(is_val & ~enc.too_long)
    counts.update(train_rows=len(train_rows), val_rows=len(val_rows), train_kernels=len(train_k),
                  val_kernels=len(val_k))
    if not len(train_rows):
        raise DataError("no training rows fit the context length")
    out.mkdir(parents=True, exist_ok=True)
    # the time head's target: log2 time, or its residual over the analytical base
    t_target = np.log2(t_all) - (enc.base_log2 if cfg.residual and enc.base_log2 is not None else 0.0)
    t_log2 = torch.tensor(t_target, dtype=torch.float32)
    e_t = torch.tensor(e_all, dtype=torch.float32)
    kernels = enc.kernels
    names = df["kernel_name"].astype(str).to_numpy()

    rng0 = np.random.default_rng([opts.seed, 0])
    batches_per_epoch = len(_epoch_batches(opts, train_rows, kernels, rng0))
    steps_per_epoch = math.ceil(batches_per_epoch / opts.grad_accum)
    total_steps = steps_per_epoch * opts.epochs
    warmup = max(1, min(math.ceil(opts.warmup_ratio * total_steps), steps_per_epoch))
    state.setdefault("lr_scale", 1.0)

    def lr_factor(step: int) -> float:
        # linear warm-up, then the plateau factor (lowered after each epoch without improvement)
        return min(1.0, (step + 1) / warmup) * float(state["lr_scale"])

    optimizer = _optimizer(model, opts)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    if resume_dir is not None:
        restore_training(resume_dir, optimizer, scheduler)
    else:
        torch.manual_seed(opts.seed)
    pad_id = tokenizer.pad_token_id

    def checkpoint() -> None:
        save_checkpoint(ckpt_path, model, tokenizer, optimizer, scheduler, state)

    def save_best() -> None:
        model.save_pretrained(out, tokenizer=tokenizer)

    stopped = state["finished"]
    bar = _progress(total_steps, state["step"], opts.progress and stopped is None)
    run_t0 = time.perf_counter()
    deadline = run_t0 + 60.0 * opts.max_minutes if opts.max_minutes else None
    running: list[float] = []
    try:
        while stopped is None:
            if state["epoch"] >= opts.epochs:
                stopped = "completed"
                break
            if opts.max_steps is not None and state["step"] >= opts.max_steps:
                stopped = "max_steps"
                break
            epoch = state["epoch"]
            batches = _epoch_batches(opts, train_rows, kernels, np.random.default_rng([opts.seed, epoch]))
            model.train()
            optimizer.zero_grad(set_to_none=True)
            epoch_loss, epoch_rows = 0.0, 0
            i = state["batch_in_epoch"]
            while i < len(batches):
                t0 = time.perf_counter()
                group = batches[i:i + opts.grad_accum]
                n_group = sum(len(b) for b in group)
                loss_sum = 0.0
                for rows in group:
                    b = make_batch(enc, rows, pad_id, cfg.max_length)
                    pred = model(**b.model_inputs())
                    idx = torch.from_numpy(rows)
                    loss = batch_loss(pred, t_log2[idx], e_t[idx], cfg, opts.energy_loss, opts.time_loss)
                    (loss * (len(rows) / n_group)).backward()
                    loss_sum += loss.item() * len(rows)
                if opts.max_grad_norm:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), opts.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                i += len(group)
                state["step"] += 1
                state["batch_in_epoch"] = i
                state["train_seconds"] += time.perf_counter() - t0
                state["train_rows_seen"] += n_group
                epoch_loss += loss_sum
                epoch_rows += n_group
                running = (running + [loss_sum / n_group])[-50:]
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(running):.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
                if opts.max_steps is not None and state["step"] >= opts.max_steps and i < len(batches):
                    stopped = "max_steps"
                    break
                if deadline is not None and time.perf_counter() >= deadline and i < len(batches):
                    stopped = "time_limit"
                    log.info("time limit of %g min reached at step %d", opts.max_minutes, state["step"])
                    break
            if stopped in ("max_steps", "time_limit"):
                checkpoint()
                break
            # end of epoch: validate, keep the best, checkpoint
            vloss = _epoch_val_loss(model, enc, val_rows, pad_id, opts, t_all, e_all, cfg)
            tloss = epoch_loss / epoch_rows if epoch_rows else float("nan")
            state["history"].append({"epoch": epoch + 1, "step": state["step"], "train_loss": tloss,
                                     "val_loss": vloss, "lr": scheduler.get_last_lr()[0]})
            log.info("epoch %d/%d: train loss %.4f, validation loss %.4f, lr %.2e", epoch + 1, opts.epochs, tloss,
                     vloss, scheduler.get_last_lr()[0])
            best = state["best_val_loss"]
            if best is None or not math.isfinite(best) or (math.isfinite(vloss) and vloss < best):
                state["best_val_loss"], state["best_epoch"], state["bad_epochs"] = vloss, epoch + 1, 0
                state["best_step"] = state["step"]
                save_best()
            else:
                state["bad_epochs"] += 1
                state["lr_scale"] = max(opts.min_lr_ratio, float(state["lr_scale"]) * opts.lr_decay)
            state["epoch"] = epoch + 1
            state["batch_in_epoch"] = 0
            if state["bad_epochs"] >= opts.patience:
                stopped = "early_stopping"
                log.info("early stopping: no validation improvement for %d epoch(s)", opts.patience)
            elif state["epoch"] >= opts.epochs:
                stopped = "completed"
            elif opts.max_steps is not None and state["step"] >= opts.max_steps:
                stopped = "max_steps"
            elif deadline is not None and time.perf_counter() >= deadline:
                stopped = "time_limit"
            if stopped in ("early_stopping", "completed"):
                state["finished"] = stopped
            checkpoint()
    except KeyboardInterrupt:
        # batch_in_epoch advances only after an optimizer step: the checkpoint loses only unapplied gradients
        log.warning("interrupted: saving a checkpoint at step %d", state["step"])
        checkpoint()
        raise
    finally:
        bar.close()

    if state["best_epoch"] is None or not (out / "model.safetensors").is_file():
        # stopped before the first epoch ended: the current model is the best there is (a
        # model.safetensors already in --out is from another run, never this run's best)
        save_best()
    best_model = KernelPerfModel.from_pretrained(out)
    predictor_out = LearnedPredictor(best_model, load_tokenizer(out), batch_size=opts.eval_batch_size,
                                     kernels_per_batch=max(opts.kernels_per_batch, 8))
    metrics = _final_metrics(best_model, enc, val_rows, pad_id, opts, t_all, e_all, kernels, names, state,
                             counts, stopped, dataset)
    _write_json(out / METRICS, metrics)
    return TrainResult(out, metrics, predictor_out, stopped or "completed")


def _build_table(frame: pd.DataFrame, profile: Any) -> pd.DataFrame:
    from kernelcast.models.tabular import build_table

    t0 = time.perf_counter()
    table = build_table(frame, profile)
    log.info("feature table of %d rows built in %.1f s", len(frame), time.perf_counter() - t0)
    return table


def _epoch_batches(opts: TrainOptions, rows: np.ndarray, kernels: np.ndarray,
                   rng: np.random.Generator) -> list[np.ndarray]:
    assert opts.batch_size is not None
    if opts.mode == "prompt":
        return prompt_batches(rows, opts.batch_size, rng)
    return kernel_grouped_batches(rows, kernels, opts.batch_size, opts.kernels_per_batch, rng)


def _epoch_val_loss(model: KernelPerfModel, enc: EncodedRows, val_rows: np.ndarray, pad_id: int,
                    opts: TrainOptions, t: np.ndarray, e: np.ndarray, cfg: LearnedConfig) -> float:
    if not len(val_rows):
        return float("nan")
    p = predict_encoded(model, enc, val_rows, pad_id, opts.eval_batch_size, max(opts.kernels_per_batch, 8))
    return _val_loss(p, t[val_rows], e[val_rows], cfg, opts.energy_loss, opts.time_loss)


def _final_metrics(model: KernelPerfModel, enc: EncodedRows, val_rows: np.ndarray, pad_id: int,
                   opts: TrainOptions, t: np.ndarray, e: np.ndarray, kernels: np.ndarray, names: np.ndarray,
                   state: dict[str, Any], counts: dict[str, int], stopped: str | None,
                   dataset: str | None) -> dict[str, Any]:
    import transformers

    val: dict[str, Any] = {}
    if len(val_rows):
        p = predict_encoded(model, enc, val_rows, pad_id, opts.eval_batch_size, max(opts.kernels_per_batch, 8))
        val = _metrics_block(p, t[val_rows], e[val_rows], kernels[val_rows], names[val_rows])
        val["loss"] = _val_loss(p, t[val_rows], e[val_rows], model.config, opts.energy_loss, opts.time_loss)
    secs = float(state["train_seconds"])
    cfg = model.config
    return {
        "dataset": dataset,
        "mode": opts.mode,
        "target": opts.target,
        "stopped": stopped or "completed",
        "validation": val,
        "training": {
            "samples_per_s": state["train_rows_seen"] / secs if secs > 0 else None,
            "rows_seen": state["train_rows_seen"],
            "seconds": secs,
            "steps": state["step"],
            "epochs_completed": state["epoch"],
            "best_epoch": state["best_epoch"],
            "best_step": state.get("best_step"),
            "best_val_loss": state["best_val_loss"],
            "final_lr": state["history"][-1]["lr"] if state["history"] else None,
            "history": state["history"],
        },
        "data": counts,
        "split": state["split"],
        "model": {
            "parameters": int(sum(p.numel() for p in model.parameters())),
            "base": cfg.base,
            "n_layer": cfg.backbone.get("n_layer"),
            "n_embd": cfg.backbone.get("n_embd"),
            "vocab_size": cfg.backbone.get("vocab_size"),
            "max_length": cfg.max_length,
            "n_last_tokens": cfg.n_last_tokens,
            "pooling": cfg.pooling,
            "residual": cfg.residual,
            "table_features": len(cfg.table_features),
            "features": len(cfg.feature_names),
            "profile": (cfg.profile or {}).get("device", {}).get("name") if cfg.profile else None,
        },
        "options": {f.name: getattr(opts, f.name) for f in fields(opts)
                    if f.name not in ("progress", "resume", "profile")},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", desc="train", dynamic_ncols=True)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_json_default) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)

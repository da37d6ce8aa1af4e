"""From dataset rows to model inputs: prompts, kernel texts, tokenisation, batches.

A frame (the dataset's columns plus ``source``) is first normalised by :func:`prepare_frame`; then
:class:`EncodedRows` holds what the model needs per row, tokenised once:

* prompt mode: the token ids of each row's LLMPerf prompt;
* efficient mode: the token ids of each distinct kernel text, the kernel index of each row and
  the raw numeric feature matrix.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
import torch
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.prompt import render_prompt
from kernelcast.models.learned.config import LearnedConfig
from kernelcast.models.learned.features import compute_features, residual_base_log2
from kernelcast.models.tabular import build_table

from kernelcast.clang import kernel_signatures
from kernelcast.columns import decode_args, decode_sizes

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("source", "kernel_name", "gsize", "args")


def kernel_key(source: str, name: str) -> str:
    return hashlib.sha256(f"{name}\0{source}".encode()).hexdigest()[:20]


def prepare_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with ``gsize``/``lsize`` as int tuples (lsize None when the driver chose), ``args`` as
    lists of dicts, and ``kernel_key`` (``kernel_id`` where the frame has it)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"frame lacks column(s) {', '.join(missing)}")
    df = frame.copy()
    df["gsize"] = [decode_sizes(v) for v in df["gsize"]]
    df["lsize"] = [decode_sizes(v) for v in df["lsize"]] if "lsize" in df.columns else None
    df["args"] = [decode_args(v) for v in df["args"]]
    if "kernel_id" in df.columns and df["kernel_id"].notna().all():
        df["kernel_key"] = df["kernel_id"].astype(str)
    else:
        df["kernel_key"] = [kernel_key(s, n) for s, n in zip(df["source"], df["kernel_name"])]
    return df


@lru_cache(maxsize=4096)
def qualifiers(source: str, name: str) -> tuple[tuple[str, str], ...]:
    """Address-space qualifier of each parameter (from libclang); empty when the source does not parse."""
    try:
        params = kernel_signatures(source).get(name, [])
        return tuple((p.name, p.qualifier) for p in params)
    except Exception as e:  # noqa: BLE001 - any parse failure falls back to the prompt's defaults
        log.debug("no qualifiers for %s: %s", name, e)
        return ()


def row_prompt(source: str, name: str, args: list[dict[str, Any]], gsize: Sequence[int],
               lsize: Sequence[int] | None) -> str:
    """LLMPerf III-A prompt of one row."""
    return render_prompt(source, args, gsize, lsize, dict(qualifiers(source, name)))


def kernel_text(source: str, name: str, *, name_first: bool = False) -> str:
    """The efficient mode's encoder input: the source and the kernel's name (a source may hold
    helpers); the name comes last for last-token pooling (older models), first for mean pooling."""
    if name_first:
        return f"// kernel {name}\n{source.strip()}"
    return f"{source.strip()}\n// kernel {name}"


@dataclass
class EncodedRows:
    """Tokenised inputs of the rows of a prepared frame."""

    mode: str
    #: prompt mode: ids per row; efficient mode: ids per distinct kernel
    sequences: list[list[int]]
    #: efficient mode: index into ``sequences`` for each row (prompt mode: arange)
    seq_index: np.ndarray
    #: efficient mode: raw features (rows, F); prompt mode: None
    features: np.ndarray | None
    #: kernel key of each row
    kernels: np.ndarray
    #: rows whose prompt or source is longer than the context
    too_long: np.ndarray
    #: residual models: log2 of each row's analytical time (the base the time head's residual is added to)
    base_log2: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.seq_index)


def encode_rows(df: pd.DataFrame, tokenizer: Any, config: LearnedConfig,
                table: pd.DataFrame | None = None) -> EncodedRows:
    """Tokenise a prepared frame for ``config.mode`` (no truncation; over-length rows are flagged).

    A model with ``table_features`` or ``residual`` needs ``table``: ``models.tabular.build_table``
    of the same rows in the same order, with the model's profile (:func:`feature_table`)."""
    if (config.table_features or config.residual) and (table is None or len(table) != len(df)):
        raise ValueError("this model needs the feature table of the rows (models.tabular.build_table)")
    n = len(df)
    kernels = df["kernel_key"].to_numpy()
    if config.mode == "prompt":
        texts = [row_prompt(s, k, a, g, lz) for s, k, a, g, lz in
                 zip(df["source"], df["kernel_name"], df["args"], df["gsize"], df["lsize"])]
        seqs = _tokenize(tokenizer, texts)
        seq_index = np.arange(n)
        feats = None
    else:
        first = df.drop_duplicates("kernel_key")
        order = {k: i for i, k in enumerate(first["kernel_key"])}
        seqs = _tokenize(tokenizer, [kernel_text(s, k, name_first=config.pooling == "mean")
                                     for s, k in zip(first["source"], first["kernel_name"])])
        seq_index = np.array([order[k] for k in kernels], dtype=np.int64)
        feats = compute_features(df, config.max_scalars, config.extra_columns, table, config.table_features)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    too_long = lengths[seq_index] > config.max_length if n else np.zeros(0, dtype=bool)
    base = residual_base_log2(table, config.base_fallback_log2) if config.residual and table is not None else None
    return EncodedRows(config.mode, seqs, seq_index, feats, kernels, too_long, base)


def feature_table(frame: pd.DataFrame, config: LearnedConfig) -> pd.DataFrame | None:
    """``models.tabular.build_table`` of ``frame``'s rows with the model's profile (None for a model
    that uses no table)."""
    if not (config.table_features or config.residual):
        return None

    return build_table(frame.reset_index(drop=True), DeviceProfile.from_dict(config.profile))


def _tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def pad(seqs: Sequence[Sequence[int]], pad_id: int, max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and attention mask; sequences longer than ``max_length`` keep their tail
    (the end of a prompt holds the sizes, and pooling reads the last tokens)."""
    if max_length is not None:
        seqs = [s[-max_length:] for s in seqs]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


@dataclass
class Batch:
    rows: np.ndarray              # indices into the EncodedRows
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    features: torch.Tensor | None
    seq_index: torch.Tensor | None

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "features": self.features,
                "seq_index": self.seq_index}


def make_batch(enc: EncodedRows, rows: np.ndarray, pad_id: int, max_length: int | None = None) -> Batch:
    """The model inputs of ``rows``; in efficient mode each distinct kernel appears once."""
    rows = np.asarray(rows, dtype=np.int64)
    if enc.mode == "prompt":
        ids, mask = pad([enc.sequences[i] for i in enc.seq_index[rows]], pad_id, max_length)
        return Batch(rows, ids, mask, None, None)
    uniq, local = np.unique(enc.seq_index[rows], return_inverse=True)
    ids, mask = pad([enc.sequences[i] for i in uniq], pad_id, max_length)
    assert enc.features is not None
    feats = torch.tensor(enc.features[rows], dtype=torch.float32)
    return Batch(rows, ids, mask, feats, torch.tensor(local.reshape(-1), dtype=torch.long))


def prompt_batches(n_rows: int | np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of rows (prompt mode)."""
    rows = np.arange(n_rows) if isinstance(n_rows, int) else np.asarray(n_rows)
    rows = rows[rng.permutation(len(rows))]
    return [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]


def kernel_grouped_batches(rows: np.ndarray, kernels: np.ndarray, batch_size: int, kernels_per_batch: int,
                           rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of at most ``kernels_per_batch`` kernels (efficient mode): each kernel's rows are
    shuffled and cut into chunks of ``batch_size // kernels_per_batch``; the chunks are shuffled and
    packed, so every batch shares few encoder passes among many configurations."""
    rows = np.asarray(rows)
    chunk = max(1, batch_size // max(1, kernels_per_batch))
    by_kernel: dict[Any, list[int]] = {}
    for r in rows:
        by_kernel.setdefault(kernels[r], []).append(int(r))
    chunks: list[np.ndarray] = []
    for k in sorted(by_kernel, key=str):
        rs = np.array(by_kernel[k])[rng.permutation(len(by_kernel[k]))]
        chunks += [rs[i:i + chunk] for i in range(0, len(rs), chunk)]
    order = rng.permutation(len(chunks))
    batches: list[np.ndarray] = []
    cur: list[np.ndarray] = []
    size = 0
    for i in order:
        cur.append(chunks[i])
        size += len(chunks[i])
        if len(cur) >= kernels_per_batch or size >= batch_size:
            batches.append(np.concatenate(cur))
            cur, size = [], 0
    if cur:
        batches.append(np.concatenate(cur))
    return batches


def inference_batches(enc: EncodedRows, rows: np.ndarray, batch_size: int,
                      kernels_per_batch: int) -> Iterator[np.ndarray]:
    """Deterministic batches for prediction: prompt mode sorted by length (little padding); efficient
    mode all rows of up to ``kernels_per_batch`` kernels at a time (one encoder pass per kernel)."""
    rows = np.asarray(rows, dtype=np.int64)
    if enc.mode == "prompt":
        lengths = np.array([len(enc.sequences[enc.seq_index[r]]) for r in rows])
        rows = rows[np.argsort(lengths, kind="stable")]
        for i in range(0, len(rows), batch_size):
            yield rows[i:i + batch_size]
        return
    seqs = enc.seq_index[rows]
    uniq = np.unique(seqs)
    for i in range(0, len(uniq), kernels_per_batch):
        yield rows[np.isin(seqs, uniq[i:i + kernels_per_batch])]

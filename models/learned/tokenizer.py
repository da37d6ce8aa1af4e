"""Tokenizers for the learned model.

Offline default: a byte-level BPE (GPT-2/CodeGen style) trained on the corpus sources and prompts,
wrapped as a :class:`transformers.PreTrainedTokenizerFast` so it saves and loads like any Hugging
Face tokenizer. With ``--base`` the base model's own tokenizer is loaded instead.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<pad>"


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 4096, min_frequency: int = 2) -> Any:
    """Train a byte-level BPE tokenizer on ``texts``; returns a ``PreTrainedTokenizerFast``."""
    # deferred: tokenizers is a heavy import
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast  # deferred: transformers is a heavy import

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=[EOS_TOKEN, PAD_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN,
                                   unk_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    fast.padding_side = "right"
    log.info("trained a byte-level BPE tokenizer: %d tokens", len(fast))
    return fast


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Right padding, and a pad token where the base has none (CodeGen's has none: use EOS)."""
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def load_tokenizer(name_or_dir: str | os.PathLike[str]) -> Any:
    """A tokenizer saved with ``save_pretrained`` (ours or a base model's), by path or hub name."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast  # deferred: transformers is a heavy import

    if _is_kernelcast_dir(name_or_dir):
        # our config.json is not a transformers config: load the tokenizer files alone
        return prepare_tokenizer(PreTrainedTokenizerFast.from_pretrained(str(name_or_dir)))
    return prepare_tokenizer(AutoTokenizer.from_pretrained(str(name_or_dir)))


def _is_kernelcast_dir(name_or_dir: str | os.PathLike[str]) -> bool:
    from kernelcast.models.learned.config import CONFIG_NAME, MODEL_TYPE  # deferred: imports torch

    path = Path(name_or_dir) / CONFIG_NAME
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("model_type") == MODEL_TYPE
    except (OSError, ValueError):
        return False

"""The learned model: a CodeGen backbone (no LM head) and LLMPerf's regression head(s).

LLMPerf III-B: the hidden states of the last N tokens are concatenated into one N*d vector and an
MLP maps it to log2 of the execution time. Here the N positions are the last N *non-padding*
positions of each sequence, found from the attention mask, so padding never changes a prediction.

Two modes share the module:

* ``prompt`` - the input is the LLMPerf prompt of one row (source + arguments + NDRange sizes).
* ``efficient`` - each distinct kernel source of a batch is encoded once; its pooled vector is
  combined with a numeric feature vector per launch configuration (``seq_index`` maps rows to
  encoded sources), so all configurations of a kernel share one encoder pass.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from kernelcast.models.learned.config import WEIGHTS_NAME, LearnedConfig
from kernelcast.models.learned.features import feature_names
from torch import nn

log = logging.getLogger(__name__)


def last_token_positions(attention_mask: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the last ``n`` non-padding tokens of each sequence, in order, shape (B, n), and
    which of them exist (a sequence shorter than ``n`` is filled on the left with invalid slots).

    Works for right, left or any padding: positions are ranked by index among mask == 1."""
    b, length = attention_mask.shape
    pos = torch.arange(length, device=attention_mask.device).expand(b, length)
    score = torch.where(attention_mask.bool(), pos, torch.full_like(pos, -1))
    k = min(n, length)
    top = score.topk(k, dim=1).values.flip(1)  # ascending; -1 (no token) first
    if k < n:
        top = torch.cat([torch.full((b, n - k), -1, dtype=top.dtype, device=top.device), top], dim=1)
    valid = top >= 0
    return top.clamp(min=0), valid


def pool_last_tokens(hidden: torch.Tensor, attention_mask: torch.Tensor, n: int) -> torch.Tensor:
    """Concatenate the hidden states of the last ``n`` non-padding tokens: (B, L, d) -> (B, n*d)."""
    idx, valid = last_token_positions(attention_mask, n)
    d = hidden.shape[-1]
    g = hidden.gather(1, idx.unsqueeze(-1).expand(-1, -1, d))
    g = g * valid.unsqueeze(-1).to(g.dtype)
    return g.reshape(hidden.shape[0], n * d)


def pool_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean hidden state over the non-padding tokens: (B, L, d) -> (B, d)."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)


class RegressionHead(nn.Module):
    """MLP from the pooled (and feature) vector to one normalised target."""

    def __init__(self, in_dim: int, hidden: list[int], dropout: float):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.GELU(), nn.Dropout(dropout)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x).squeeze(-1)


class KernelPerfModel(nn.Module):
    """CodeGen backbone + time head (log2 us) and/or energy head (log2 J)."""

    def __init__(self, config: LearnedConfig, backbone: nn.Module | None = None):
        super().__init__()
        from transformers import CodeGenModel  # deferred: transformers is a heavy import

        self.config = config
        self.backbone = backbone if backbone is not None else CodeGenModel(config.backbone_config())
        n_feat = len(config.feature_names) if config.mode == "efficient" else 0
        if config.mode == "efficient" and n_feat != len(feature_names(config.max_scalars, config.extra_columns,
                                                                      config.table_features)):
            raise ValueError("config.feature_names does not match max_scalars/extra_columns/table_features")
        pooled = config.n_last_tokens if config.pooling == "last" else 1
        in_dim = pooled * config.hidden_size + n_feat
        self.time_head = RegressionHead(in_dim, config.head_hidden, config.head_dropout) \
            if config.predicts_time else None
        self.energy_head = RegressionHead(in_dim, config.head_hidden, config.head_dropout) \
            if config.predicts_energy else None
        mean = torch.tensor(config.feature_mean or [0.0] * n_feat, dtype=torch.float32)
        std = torch.tensor(config.feature_std or [1.0] * n_feat, dtype=torch.float32)
        self.register_buffer("feature_mean", mean, persistent=False)
        self.register_buffer("feature_std", std, persistent=False)

    # -- forward -------------------------------------------------------------------------------

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One backbone pass; returns the pooled (B, N*d) vectors."""
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        if self.config.pooling == "mean":
            return pool_mean(out.last_hidden_state, attention_mask)
        return pool_last_tokens(out.last_hidden_state, attention_mask, self.config.n_last_tokens)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, features: torch.Tensor | None = None,
                seq_index: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Predicted log2 targets per row: ``{"time": log2 us, "energy": log2 J}`` (what the config has);
        with ``config.residual`` "time" is the residual log2(time / analytical time), which
        :class:`~models.learned.predictor.LearnedPredictor` adds to the analytical base.

        Prompt mode: one sequence per row. Efficient mode: ``input_ids`` holds the distinct sources,
        ``features`` (rows, F) the raw numeric features and ``seq_index`` (rows,) the source of each row."""
        pooled = self.encode(input_ids, attention_mask)
        if self.config.mode == "efficient":
            if features is None or seq_index is None:
                raise ValueError("efficient mode needs features and seq_index")
            mean, std = self.get_buffer("feature_mean"), self.get_buffer("feature_std")
            feats = torch.nan_to_num((features.to(pooled.dtype) - mean) / std, nan=0.0)  # NaN: the training mean
            if self.config.feature_clip:
                feats = feats.clamp(-self.config.feature_clip, self.config.feature_clip)
            x = torch.cat([pooled[seq_index], feats], dim=-1)
        else:
            x = pooled
        c = self.config
        out: dict[str, torch.Tensor] = {}
        if self.time_head is not None:
            out["time"] = self.time_head(x) * c.time_log2_std + c.time_log2_mean
        if self.energy_head is not None:
            out["energy"] = self.energy_head(x) * c.energy_log2_std + c.energy_log2_mean
        return out

    # -- persistence -----------------------------------------------------------------------------

    def save_pretrained(self, directory: str | os.PathLike[str], tokenizer: Any = None) -> Path:
        """``config.json`` + ``model.safetensors`` (+ the tokenizer's files)."""
        from safetensors.torch import save_file  # deferred: safetensors is a heavy import

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.config.save(d)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        tmp = d / f".{WEIGHTS_NAME}.tmp"
        save_file(state, str(tmp), metadata={"format": "pt", "model_type": self.config.model_type})
        os.replace(tmp, d / WEIGHTS_NAME)
        if tokenizer is not None:
            tokenizer.save_pretrained(str(d))
        return d

    @classmethod
    def from_pretrained(cls, name_or_dir: str | os.PathLike[str]) -> KernelPerfModel:
        """Load a model saved with :meth:`save_pretrained` from a directory or a hub repository."""
        from safetensors.torch import load_file  # deferred: safetensors is a heavy import

        d = resolve_model_dir(name_or_dir)
        config = LearnedConfig.load(d)
        model = cls(config)
        state = load_file(str(d / WEIGHTS_NAME))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{d}: weights do not match the config (missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]})")
        model.eval()
        return model

    @classmethod
    def from_base(cls, base: str | os.PathLike[str], config: LearnedConfig) -> KernelPerfModel:
        """A new model whose backbone is a pretrained CodeGen (``Salesforce/codegen-350M-multi`` or a
        local directory saved with ``save_pretrained``); the heads start from scratch."""
        from transformers import CodeGenModel  # deferred: transformers is a heavy import
        from transformers.utils import logging as hf_logging  # deferred: transformers is a heavy import

        # a causal-LM checkpoint (e.g. of 'kernelcast pretrain') carries an lm_head the backbone does not use:
        # report only weights the backbone lacks, not transformers' table of the unused ones
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        try:
            loaded: Any = CodeGenModel.from_pretrained(str(base), dtype=torch.float32, output_loading_info=True)
            backbone, info = loaded
        finally:
            hf_logging.set_verbosity(verbosity)
            hf_logging.enable_progress_bar()
        if info.get("missing_keys"):
            log.warning("%s: %d backbone weight(s) not in the checkpoint start from scratch (e.g. %s)", base,
                        len(info["missing_keys"]), sorted(info["missing_keys"])[:3])
        config.backbone = backbone.config.to_dict()
        config.base = str(base)
        n_pos = int(config.backbone.get("n_positions") or config.max_length)
        config.max_length = min(config.max_length, n_pos)
        return cls(config, backbone=backbone)


def resolve_model_dir(name_or_dir: str | os.PathLike[str]) -> Path:
    """A local directory as is; otherwise download the repository's files from the hub."""
    p = Path(name_or_dir)
    if p.is_dir():
        return p
    if p.exists() or str(name_or_dir).count("/") != 1:
        raise FileNotFoundError(f"no such model directory: {name_or_dir}")
    from huggingface_hub import snapshot_download  # deferred: huggingface_hub is a heavy import

    return Path(snapshot_download(str(name_or_dir), allow_patterns=["*.json", "*.safetensors", "*.txt"]))

"""Configuration of the learned model: a CodeGen backbone plus LLMPerf's regression head(s).

The config is a dataclass saved as ``config.json`` next to ``model.safetensors``; the backbone's
own configuration (a :class:`transformers.CodeGenConfig`) is nested under ``backbone``, so a saved
model is loadable without the hub and without pickle.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_TYPE = "kernelcast-learned"
#: 2: the residual target and the feature table (``residual``, ``table_features``, ``profile``)
CONFIG_VERSION = 2

#: LLMPerf's two input encodings: the whole prompt as text, or the kernel text once plus numeric launch features
LearnedMode = Literal["prompt", "efficient"]
Pooling = Literal["last", "mean"]
MODES: tuple[LearnedMode, ...] = get_args(LearnedMode)
#: what the heads predict
Targets = Literal["time", "energy", "both"]
TARGETS: tuple[Targets, ...] = get_args(Targets)


def scratch_backbone_config(vocab_size: int, *, n_layer: int = 2, n_embd: int = 128, n_head: int = 4,
                            n_positions: int = 2048, bos_token_id: int | None = None,
                            eos_token_id: int | None = None, dropout: float = 0.0) -> dict[str, Any]:
    """A small CodeGen configuration to train from scratch on a CPU (rotary on half the head dim, as in
    CodeGen-350M: head dim 64, rotary_dim 32)."""
    from transformers import CodeGenConfig  # deferred: transformers is a heavy import

    if n_embd % n_head:
        raise ValueError(f"n_embd={n_embd} is not a multiple of n_head={n_head}")
    head_dim = n_embd // n_head
    rotary_dim = max(2, (head_dim // 2) // 2 * 2)
    cfg = CodeGenConfig(
        vocab_size=vocab_size, n_positions=n_positions, n_ctx=n_positions, n_embd=n_embd, n_layer=n_layer,
        n_head=n_head, rotary_dim=rotary_dim, n_inner=4 * n_embd, resid_pdrop=dropout, embd_pdrop=dropout,
        attn_pdrop=dropout, bos_token_id=bos_token_id, eos_token_id=eos_token_id, tie_word_embeddings=False,
    )
    return cfg.to_dict()


@dataclass
class LearnedConfig:
    """Everything needed to rebuild a :class:`~models.learned.model.KernelPerfModel` and its inputs."""

    backbone: dict[str, Any] = field(default_factory=dict)
    #: where the backbone came from: a hub name, a local directory, or None (trained from scratch)
    base: str | None = None
    #: LLMPerf III-B: the head concatenates the hidden states of the last N non-padding tokens
    n_last_tokens: int = 4
    #: "last": LLMPerf's last-N-token pooling; "mean": the mean over every non-padding token (the
    #: efficient mode's default: its input ends with the kernel's name, which last-N pooling encodes)
    pooling: Pooling = "last"
    head_hidden: list[int] = field(default_factory=lambda: [256])
    head_dropout: float = 0.1
    mode: LearnedMode = "prompt"
    targets: Targets = "time"
    #: context length in tokens; prompts longer than this are discarded in training (LLMPerf IV-B1)
    max_length: int = 2048
    # efficient mode: numeric launch features and their normalisation (mean/std over the training rows)
    max_scalars: int = 4
    extra_columns: list[str] = field(default_factory=list)
    feature_names: list[str] = field(default_factory=list)
    feature_mean: list[float] = field(default_factory=list)
    feature_std: list[float] = field(default_factory=list)
    # target normalisation: the heads predict (log2 y - mean) / std
    time_log2_mean: float = 0.0
    time_log2_std: float = 1.0
    energy_log2_mean: float = 0.0
    energy_log2_std: float = 1.0
    #: energy scale of Zhang's 1/E-weighted squared loss (geometric mean of the training energies, J)
    energy_ref_j: float = 1.0
    #: the time head predicts the residual log2(measured / analytical) (``time_log2_mean``/``_std``
    #: then normalise the residual); a row without an analytical prediction takes
    #: ``base_fallback_log2`` (the training rows' mean log2 time) as its base
    residual: bool = False
    base_fallback_log2: float = 0.0
    #: efficient mode: columns of ``models.tabular.build_table`` appended to the feature vector (signed
    #: log2 of counts and sizes, then normalised; a NaN becomes the mean), computed with ``profile``
    table_features: list[str] = field(default_factory=list)
    #: the device profile (``DeviceProfile.to_dict``) of the analytical base and the table's columns
    profile: dict[str, Any] | None = None
    #: normalised features are clipped to +-this (None: no clip), so a static count far outside the
    #: training range cannot drive the head arbitrarily far
    feature_clip: float | None = None
    model_type: str = MODEL_TYPE
    version: int = CONFIG_VERSION

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.targets not in TARGETS:
            raise ValueError(f"targets must be one of {TARGETS}, got {self.targets!r}")
        if self.n_last_tokens < 1:
            raise ValueError("n_last_tokens must be at least 1")
        if (self.residual or self.table_features) and self.profile is None:
            raise ValueError("a residual or feature-table model needs the device profile it was trained with")
        if self.pooling not in ("last", "mean"):
            raise ValueError(f"pooling must be last or mean, got {self.pooling!r}")

    @property
    def predicts_time(self) -> bool:
        return self.targets in ("time", "both")

    @property
    def predicts_energy(self) -> bool:
        return self.targets in ("energy", "both")

    @property
    def hidden_size(self) -> int:
        return int(self.backbone["n_embd"])

    def backbone_config(self) -> Any:
        from transformers import CodeGenConfig  # deferred: transformers is a heavy import

        return CodeGenConfig.from_dict(dict(self.backbone))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LearnedConfig:
        if d.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ValueError(f"not a kernelcast learned-model config (model_type={d.get('model_type')!r})")
        if int(d.get("version", 1)) > CONFIG_VERSION:
            raise ValueError(f"a learned-model config of version {d.get('version')} (this kernelcast reads up to "
                             f"{CONFIG_VERSION}): upgrade kernelcast")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def save(self, directory: str | os.PathLike[str]) -> Path:
        path = Path(directory) / CONFIG_NAME
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> LearnedConfig:
        return cls.from_dict(json.loads((Path(directory) / CONFIG_NAME).read_text(encoding="utf-8")))

"""The learned model: CodeGen + LLMPerf regression head(s), in prompt or efficient mode."""

from __future__ import annotations

from kernelcast.models.learned.config import LearnedConfig, scratch_backbone_config
from kernelcast.models.learned.model import KernelPerfModel, last_token_positions, pool_last_tokens
from kernelcast.models.learned.predictor import LearnedPredictor

__all__ = [
    "KernelPerfModel",
    "LearnedConfig",
    "LearnedPredictor",
    "last_token_positions",
    "pool_last_tokens",
    "scratch_backbone_config",
]

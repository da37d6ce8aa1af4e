"""The learned model behind the predictor interface shared with the analytical and blended models."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from kernelcast.models.base import Predictions, Predictor
from kernelcast.models.learned.data import encode_rows, feature_table, inference_batches, make_batch, prepare_frame
from kernelcast.models.learned.model import KernelPerfModel, resolve_model_dir
from kernelcast.models.learned.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


class LearnedPredictor(Predictor):
    """A trained :class:`KernelPerfModel` with its tokenizer: ``predict(frame)`` -> time (us), energy (J)."""

    name = "learned"

    def __init__(self, model: KernelPerfModel, tokenizer: Any, *, batch_size: int = 16, kernels_per_batch: int = 8):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.kernels_per_batch = kernels_per_batch

    @property
    def config(self) -> Any:
        return self.model.config

    @classmethod
    def from_pretrained(cls, name_or_dir: str | os.PathLike[str], **kwargs: Any) -> LearnedPredictor:
        d = resolve_model_dir(name_or_dir)
        return cls(KernelPerfModel.from_pretrained(d), load_tokenizer(d), **kwargs)

    def save_pretrained(self, directory: str | os.PathLike[str]) -> Path:
        return self.model.save_pretrained(directory, tokenizer=self.tokenizer)

    @torch.no_grad()
    def predict_log2(self, frame: pd.DataFrame, table: pd.DataFrame | None = None) -> dict[str, np.ndarray]:
        """log2 predictions per row: ``{"time": log2 us, "energy": log2 J}`` (what the model has).

        A model with a feature table or a residual target builds the table of the rows with its own
        profile (``table``: one built already, same rows and order); a residual time is added to the
        analytical base, so a row far from the training data stays near the analytical model."""
        if table is None:
            table = feature_table(frame, self.config)
        df = prepare_frame(frame)
        enc = encode_rows(df, self.tokenizer, self.config, table)
        n_long = int(enc.too_long.sum())
        if n_long:
            log.warning("%d row(s) exceed the %d-token context; their input keeps its last %d tokens",
                        n_long, self.config.max_length, self.config.max_length)
        out = {k: np.full(len(df), np.nan) for k in self._targets()}
        was_training = self.model.training
        self.model.eval()
        try:
            for rows in inference_batches(enc, np.arange(len(df)), self.batch_size, self.kernels_per_batch):
                b = make_batch(enc, rows, self.tokenizer.pad_token_id, self.config.max_length)
                pred = self.model(**b.model_inputs())
                for k, v in pred.items():
                    out[k][rows] = v.float().cpu().numpy()
        finally:
            self.model.train(was_training)
        if self.config.residual and "time" in out and enc.base_log2 is not None:
            out["time"] = out["time"] + enc.base_log2
        return out

    def predict(self, frame: pd.DataFrame, table: pd.DataFrame | None = None) -> Predictions:
        p = self.predict_log2(frame, table)
        n = len(frame)
        time_us = np.exp2(p["time"]) if "time" in p else np.full(n, np.nan)
        energy_j = np.exp2(p["energy"]) if "energy" in p else np.full(n, np.nan)
        return Predictions(time_us=time_us, energy_j=energy_j)

    def _targets(self) -> list[str]:
        c = self.config
        return [k for k, on in (("time", c.predicts_time), ("energy", c.predicts_energy)) if on]

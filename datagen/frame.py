"""A dataset's measured rows as one frame with their kernels' sources: what every model is fitted
and evaluated on."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd

from kernelcast.errors import InputError

log = logging.getLogger(__name__)

#: the passes whose rows train and evaluate models: datagen's regime samples, rebalancing and tuning
#: sweeps (not validity checks) and Kernel Tuner imports (``kt``)
TRAIN_PASSES = ("sample", "iqr", "sweep", "kt")


class DataError(InputError, ValueError):
    """A dataset that cannot be used (missing, no usable rows, no energy for an energy target)."""


def load_measured_frame(dataset_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, dict[str, int]]:
    """The ok rows of passes sample/iqr/sweep of a dataset, each with its kernel ``source``, and the
    row counts along the way (``rows_total``, ``rows_ok``, ``rows_without_source``)."""
    from datagen.corpus_store import read_corpus
    from datagen.dataset import read_dataset

    root = Path(dataset_dir)
    if not root.is_dir():
        raise DataError(f"no such dataset directory: {root}")
    try:
        df = read_dataset(root)
    except FileNotFoundError as e:
        raise DataError(str(e)) from None
    counts = {"rows_total": len(df)}
    if df.empty or "status" not in df.columns:
        raise DataError(f"{root}: the dataset has no rows")
    lacking = [c for c in ("pass", "kernel_id", "gsize") if c not in df.columns]
    if lacking:
        raise DataError(f"{root}: not a kernelcast dataset (its rows have no {', '.join(lacking)} column)")
    df = df[(df["status"] == "ok") & df["pass"].isin(TRAIN_PASSES)]
    counts["rows_ok"] = len(df)
    if df.empty:
        raise DataError(f"{root}: the dataset has no ok rows of pass sample/iqr/sweep to train on")
    if "source" not in df.columns:
        try:
            kernels = {k.id: k for k in read_corpus(root / "kernels", compiled_only=False)}
        except FileNotFoundError:
            raise DataError(f"{root}: no kernel sources (expected {root / 'kernels'}/kernels.jsonl)") from None
        df = df.assign(source=[kernels[k].source if k in kernels else None for k in df["kernel_id"]])
    missing = df["source"].isna()
    counts["rows_without_source"] = int(missing.sum())
    if missing.any():
        log.warning("%d row(s) have no kernel source in the corpus; skipped", int(missing.sum()))
    df = df[~missing].reset_index(drop=True)
    if df.empty:
        raise DataError(f"{root}: no training row has its kernel source")
    return df, counts

"""A dataset's measured rows as one frame with their kernels' sources: what every model is fitted
and evaluated on."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from kernelcast.datagen.corpus_store import read_corpus
from kernelcast.datagen.dataset import read_dataset, read_manifest

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


def _device_identity(root: Path) -> str | None:
    try:
        return read_manifest(root).get("device_identity")
    except (OSError, ValueError):
        return None


def prefix_keys(df: pd.DataFrame, tag: str) -> pd.DataFrame:
    """``row_key`` and ``remeasure_of`` prefixed with ``tag``: rows of several datasets stay apart
    (two datasets may hold the same configuration, each measured once)."""
    out = df.copy()
    for col in ("row_key", "remeasure_of"):
        if col in out.columns:
            out[col] = [f"{tag}{v}" if isinstance(v, str) else v for v in out[col]]
    return out


def check_distinct(roots: Sequence[Path]) -> None:
    """:class:`DataError` unless at least one dataset is given and no directory twice."""
    if not roots:
        raise DataError("no dataset given")
    seen: set[Path] = set()
    for r in roots:
        if r.resolve() in seen:
            raise DataError(f"dataset {r} is given twice")
        seen.add(r.resolve())


def device_identities(roots: Sequence[Path]) -> dict[Path, str | None]:
    """The ``device_identity`` of each dataset's manifest (None where it has none)."""
    return {r: _device_identity(r) for r in roots}


def check_one_device(roots: Sequence[Path]) -> None:
    """:class:`DataError` unless the datasets are distinct directories measured on one device (the
    ``device_identity`` of their manifests; a dataset without one passes)."""
    check_distinct(roots)
    idents = {r: _device_identity(r) for r in roots}
    if len({v for v in idents.values() if v}) > 1:
        a = next(r for r in roots if idents[r])
        b = next(r for r in roots if idents[r] and idents[r] != idents[a])
        raise DataError(f"datasets {a} and {b} were measured on different devices; evaluate them one at a time, "
                        f"or give each device its profile (--profile DEVICE=PROFILE)")


def load_measured_frames(dataset_dirs: Sequence[str | os.PathLike[str]], *,
                         several_devices: bool = False) -> tuple[pd.DataFrame, dict[str, int]]:
    """:func:`load_measured_frame` of one or more datasets of one device, as one frame: with more
    than one, each row's ``row_key`` is prefixed with its dataset's position (``0:``, ``1:``, ...)
    and the counts are summed. Datasets measured on different devices (their manifests'
    ``device_identity``; allowed with ``several_devices``, the rows keeping their ``device``) or the
    same directory twice are a :class:`DataError`."""
    roots = [Path(d) for d in dataset_dirs]
    if several_devices:
        check_distinct(roots)
    else:
        check_one_device(roots)
    if len(roots) == 1:
        return load_measured_frame(roots[0])
    frames: list[pd.DataFrame] = []
    counts: dict[str, int] = {}
    for i, r in enumerate(roots):
        df, c = load_measured_frame(r)
        frames.append(prefix_keys(df, f"{i}:"))
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
    return pd.concat(frames, ignore_index=True, sort=False), counts

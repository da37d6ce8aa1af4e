"""Train/validation split by kernel (LLMPerf IV-B1: 9:1, no kernel on both sides)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _rank_key(seed: int, kernel: str) -> str:
    return hashlib.sha256(f"{seed}:{kernel}".encode()).hexdigest()


def split_by_kernel(kernels: Iterable[str], *, val_fraction: float = 0.1,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """Sorted (train, validation) kernel ids. Kernels are ranked by a hash of (seed, id) and the first
    ``round(val_fraction * n)`` (at least one when there are two or more kernels) go to validation, so
    the split depends only on the set of kernels and the seed, never on row order."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    uniq = sorted({str(k) for k in kernels})
    n = len(uniq)
    n_val = round(val_fraction * n)
    if val_fraction > 0 and n >= 2:
        n_val = min(max(1, n_val), n - 1)
    ranked = sorted(uniq, key=lambda k: _rank_key(seed, k))
    val = sorted(ranked[:n_val])
    train = sorted(ranked[n_val:])
    return train, val

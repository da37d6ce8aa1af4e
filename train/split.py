"""Train/validation split by kernel (LLMPerf IV-B1: 9:1, no kernel on both sides)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

_SYNTH_NAME = re.compile(r"^synth(?:_\w+)?_\d+$")
_TRAILING_NUMBER = re.compile(r"_\d+$")


def synthetic_family(name: str) -> str | None:
    """The template family of a synthetic kernel's name (``synth_tile_000028`` -> ``synth_tile``),
    or None for a name the synthetic generator does not make. Kernels of one family share a
    template, so a kernel-disjoint split keeps a family on one side."""
    return _TRAILING_NUMBER.sub("", name) if _SYNTH_NAME.match(name) else None


def family_of(name: str) -> str:
    """The template family of a kernel known to be synthetic (its name without a trailing ``_<digits>``)."""
    return _TRAILING_NUMBER.sub("", name)


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

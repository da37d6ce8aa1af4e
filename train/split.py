"""Train/validation splits: by kernel (LLMPerf IV-B1: 9:1, no kernel on both sides) and by kernel group
(a synthetic template family or a source file never on both sides; :func:`group_key` is the rule)."""

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


SYNTH_ORIGIN = "synth:"


def group_key(name: str, origin: object = None, kernel_id: str = "") -> tuple[str, str]:
    """(key, kind) of the kernel group of one kernel, the rule every grouped split uses (evaluate's
    folds merge near-duplicate groups on top of it): a synthetic kernel (origin ``synth:...``, or
    without an origin a name ``synth[_<family>]_<number>``) belongs to its template family
    (``synth:synth_tile``), any other kernel to its source file (its corpus origin, ``file:...``), a
    kernel without an origin to itself."""
    o = origin if isinstance(origin, str) else ""
    if o.startswith(SYNTH_ORIGIN) or (not o and synthetic_family(name)):
        return "synth:" + family_of(name), "synthetic_family"
    if o:
        return "file:" + o, "source_file"
    return "kernel:" + str(kernel_id or name), "kernel"


def split_by_group(kernels: Iterable[str], groups: Iterable[str], *, val_fraction: float = 0.15,
                   seed: int = 0) -> tuple[list[str], list[str], dict[str, object]]:
    """Sorted (train, validation) kernel ids with no kernel group on both sides, and a summary.

    ``kernels`` and ``groups`` run in parallel (one entry per row or per kernel). Groups are ranked
    by a hash of (seed, group) and go to validation until it holds ``val_fraction`` of the kernels
    (at least one group; at least one group stays for training). With fewer than two groups the
    split falls back to :func:`split_by_kernel` (the summary says so)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    group_of: dict[str, str] = {}
    for k, g in zip(kernels, groups):
        group_of.setdefault(str(k), str(g))
    members: dict[str, list[str]] = {}
    for k, g in group_of.items():
        members.setdefault(g, []).append(k)
    if len(members) < 2 or val_fraction == 0.0:
        train, val = split_by_kernel(group_of, val_fraction=val_fraction, seed=seed)
        return train, val, {"by": "kernel", "groups": len(members), "val_groups": [],
                            "note": "fewer than two kernel groups: split by kernel" if val_fraction else ""}
    want = val_fraction * len(group_of)
    val_groups: list[str] = []
    n_val = 0
    for g in sorted(members, key=lambda g: _rank_key(seed, g)):
        if val_groups and n_val >= want:
            break
        if len(val_groups) == len(members) - 1:
            break
        val_groups.append(g)
        n_val += len(members[g])
    vg = set(val_groups)
    val = sorted(k for k, g in group_of.items() if g in vg)
    train = sorted(k for k, g in group_of.items() if g not in vg)
    return train, val, {"by": "group", "groups": len(members), "val_groups": sorted(val_groups), "note": ""}

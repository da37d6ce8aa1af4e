"""Decoding the list-valued columns of dataset and prediction rows (``gsize``, ``lsize``, ``args``)
the way they arrive: Python lists, numpy arrays from Parquet, JSON text from CSV, or missing
(``None``, NaN, empty)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip())


def decode_sizes(v: Any) -> tuple[int, ...] | None:
    """A size column as a tuple of ints; ``None`` when missing or empty (the driver chose)."""
    if _missing(v):
        return None
    if isinstance(v, str):
        v = json.loads(v)
    seq = list(np.asarray(v).reshape(-1))
    return tuple(int(x) for x in seq) if seq else None


def decode_counts(v: Any) -> dict[str, float]:
    """A ``site_counts`` column (JSON object: site symbol -> measured count) as a dict (``{}`` when
    missing, empty or not an object of numbers)."""
    if _missing(v) or v == "":
        return {}
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    if not isinstance(v, Mapping):
        return {}
    out: dict[str, float] = {}
    for k, x in v.items():
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0:
            out[str(k)] = float(x)
    return out


def decode_args(v: Any) -> list[dict[str, Any]]:
    """An ``args`` column as a list of argument dicts (``[]`` when missing)."""
    if _missing(v):
        return []
    if isinstance(v, str):
        v = json.loads(v)
    return [dict(a) if isinstance(a, Mapping) else a for a in v]


def problem_args(args: list[dict[str, Any]]) -> tuple[tuple[Any, Any], ...]:
    """The arguments that make a problem, of decoded ``args``: each buffer's name and element count,
    each scalar's name and value (local-memory arguments belong to the configuration, not the problem)."""
    return tuple((a.get("name"), a.get("count") if a.get("kind") == "buffer" else a.get("value"))
                 for a in args if a.get("kind") != "local")

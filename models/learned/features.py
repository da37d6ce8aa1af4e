"""Numeric launch features of the efficient mode: one vector per (kernel, configuration) row.

Sizes enter as log2 (sizes span many orders of magnitude), scalars as log2(1 + |v|), missing
dimensions as log2(1) = 0. Optional extra columns (``analytical_log2_time``, static features)
are used when the frame has them; a missing or NaN value becomes 0 with a ``has_<column>``
indicator of 0, so a model trained with an analytical estimate still predicts without one.

A model trained with a device profile (``LearnedConfig.table_features``) appends the columns of
``models.tabular.build_table``: the static work quantities evaluated at the configuration and the
analytical model's prediction and parts (:func:`table_feature_matrix`), the same vector the tabular
model sees; a training row and a prediction row of the same configuration give the same features.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.models.tabular import FEATURE_COLUMNS

from kernelcast.cltypes import parse_type
from kernelcast.columns import decode_args, decode_sizes

MAX_DIMS = 3
#: extra columns used by default when present (glob patterns are resolved against the training frame)
DEFAULT_EXTRA_COLUMNS = ("analytical_log2_time", "static_*")

_BASE = (
    ["dims"]
    + [f"log2_g{i}" for i in range(MAX_DIMS)]
    + [f"log2_l{i}" for i in range(MAX_DIMS)]
    + ["lsize_auto", "log2_global_items", "log2_local_items", "log2_n_wg",
       "n_buffers", "log2_buf_elems_sum", "log2_buf_elems_max", "log2_buf_bytes_sum", "log2_buf_bytes_max",
       "n_local", "log2_local_bytes_sum", "n_scalars"]
)


#: prefix of the feature-table columns in :func:`feature_names`
TABLE_PREFIX = "table:"


def feature_names(max_scalars: int = 4, extra_columns: Sequence[str] = (),
                  table_features: Sequence[str] = ()) -> list[str]:
    names = list(_BASE) + [f"log2_scalar{i}" for i in range(max_scalars)]
    for c in extra_columns:
        names += [c, f"has_{c}"]
    names += [TABLE_PREFIX + c for c in table_features]
    return names


def table_feature_columns(table: pd.DataFrame, columns: Sequence[str] | None = None) -> list[str]:
    """The feature-table columns a model uses: :data:`models.tabular.FEATURE_COLUMNS` (or ``columns``)
    that ``table`` has and that hold at least one finite value in it (a column without any value in
    the training table would get no gradient and is left out)."""
    out = []
    for c in (columns if columns is not None else FEATURE_COLUMNS):
        if c in table.columns and np.isfinite(pd.to_numeric(table[c], errors="coerce").to_numpy(np.float64)).any():
            out.append(c)
    return out


def table_feature_matrix(table: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """The raw (unnormalised) values of ``columns`` of a feature table, shape (rows, len(columns)):
    columns already in log2 (``*log2*``) as they are, every other one as ``sign(x) log2(1 + |x|)``
    (counts, bytes and sizes span many orders of magnitude); NaN where the table has no value (the
    model puts the training mean there). A column the table lacks is all NaN."""
    n = len(table)
    out = np.full((n, len(columns)), np.nan)
    for j, c in enumerate(columns):
        if c not in table.columns:
            continue
        v = pd.to_numeric(table[c], errors="coerce").to_numpy(dtype=np.float64)
        v = np.where(np.isfinite(v), v, np.nan)
        out[:, j] = v if "log2" in c else np.sign(v) * np.log2(1.0 + np.abs(v))
    return out


def residual_base_log2(table: pd.DataFrame, fallback: float) -> np.ndarray:
    """log2 of the analytical time of each row of a feature table (``analytical_us``), ``fallback``
    where the analytical model has no positive, finite prediction: what a residual model adds its
    prediction to."""
    a = pd.to_numeric(table["analytical_us"], errors="coerce").to_numpy(dtype=np.float64) \
        if "analytical_us" in table.columns else np.full(len(table), np.nan)
    ok = np.isfinite(a) & (a > 0)
    return np.where(ok, np.log2(np.where(ok, a, 1.0)), float(fallback))


def resolve_extra_columns(patterns: Iterable[str], columns: Iterable[str]) -> list[str]:
    """Concrete column names for ``patterns``: the columns of the (training) frame each plain name or
    glob (``static_*``) matches, sorted per glob. A name the training frame lacks is left out, so a
    model never carries a feature that had no value, and no gradient, during training while
    prediction fills it in (train/serve skew)."""
    cols = list(columns)
    out: list[str] = []
    for p in patterns:
        if any(ch in p for ch in "*?["):
            out += sorted(c for c in cols if fnmatch.fnmatchcase(c, p) and c not in out)
        elif p in cols and p not in out:
            out.append(p)
    return out


@lru_cache(maxsize=256)
def _itemsize(dtype: str) -> int:
    try:
        return parse_type(dtype).itemsize
    except (ValueError, KeyError):
        return 4


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0


def _scalar_value(v: Any) -> float:
    if isinstance(v, (list, tuple)):
        v = v[0] if v else 0
    if isinstance(v, str):
        v = v.split(",")[0].strip()
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) else 0.0


def row_features(gsize: Any, lsize: Any, args: Any, n_wg: Any = None, max_scalars: int = 4) -> list[float]:
    """The base features of one row, in :func:`feature_names` order (without extra columns)."""
    g = decode_sizes(gsize) or (1,)
    lz = decode_sizes(lsize)
    a = decode_args(args)
    out: list[float] = [float(len(g))]
    out += [_log2(g[i]) if i < len(g) else 0.0 for i in range(MAX_DIMS)]
    out += [_log2(lz[i]) if lz and i < len(lz) else 0.0 for i in range(MAX_DIMS)]
    gi = float(np.prod(g))
    li = float(np.prod(lz)) if lz else 0.0
    if n_wg is None or (isinstance(n_wg, float) and math.isnan(n_wg)):
        n_wg = gi / li if li else 0.0
    out += [0.0 if lz else 1.0, _log2(gi), _log2(li), _log2(float(n_wg))]
    bufs = [(int(x.get("count") or 0), _itemsize(str(x.get("dtype", "float")))) for x in a if x.get("kind") == "buffer"]
    elems = [c for c, _ in bufs] or [0]
    nbytes = [c * s for c, s in bufs] or [0]
    locs = [int(x.get("count") or 0) * _itemsize(str(x.get("dtype", "float"))) for x in a if x.get("kind") == "local"]
    scal = [_scalar_value(x.get("value")) for x in a if x.get("kind") == "scalar"]
    out += [float(len(bufs)), _log2(sum(elems)), _log2(max(elems)), _log2(sum(nbytes)), _log2(max(nbytes)),
            float(len(locs)), _log2(sum(locs)), float(len(scal))]
    sv = [math.log2(1.0 + abs(s)) for s in scal[:max_scalars]]
    out += sv + [0.0] * (max_scalars - len(sv))
    return out


def compute_features(frame: pd.DataFrame, max_scalars: int = 4, extra_columns: Sequence[str] = (),
                     table: pd.DataFrame | None = None, table_features: Sequence[str] = ()) -> np.ndarray:
    """The raw (unnormalised) feature matrix of a frame, shape (rows, len(feature_names(...))); the
    ``table_features`` come from ``table`` (``models.tabular.build_table`` of the same rows, same order)."""
    n = len(frame)
    nwg = frame["n_wg"] if "n_wg" in frame.columns else pd.Series([None] * n, index=frame.index)
    lsz = frame["lsize"] if "lsize" in frame.columns else pd.Series([None] * n, index=frame.index)
    rows = [row_features(g, lz, a, w, max_scalars)
            for g, lz, a, w in zip(frame["gsize"], lsz, frame["args"], nwg)]
    base = np.asarray(rows, dtype=np.float64).reshape(n, len(_BASE) + max_scalars)
    extras = []
    for c in extra_columns:
        if c in frame.columns:
            v = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64)
        else:
            v = np.full(n, np.nan)
        ok = np.isfinite(v)
        extras += [np.where(ok, v, 0.0), ok.astype(np.float64)]
    if extras:
        base = np.concatenate([base, np.stack(extras, axis=1)], axis=1)
    if table_features:
        if table is None or len(table) != n:
            raise ValueError("table features need the feature table of the same rows")
        base = np.concatenate([base, table_feature_matrix(table, table_features)], axis=1)
    return base


def normalisation(features: np.ndarray) -> tuple[list[float], list[float]]:
    """Mean and std per column over its finite values (std 1 for constant columns, mean 0 and std 1
    for a column without any value)."""
    finite = np.isfinite(features)
    cnt = finite.sum(axis=0)
    x = np.where(finite, features, 0.0)
    mean = np.where(cnt > 0, x.sum(axis=0) / np.maximum(cnt, 1), 0.0)
    var = np.where(cnt > 0, (np.where(finite, features - mean, 0.0) ** 2).sum(axis=0) / np.maximum(cnt, 1), 1.0)
    std = np.sqrt(var)
    std = np.where(std > 1e-8, std, 1.0)
    return [float(x) for x in mean], [float(x) for x in std]

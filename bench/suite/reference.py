"""NumPy references for the kernels of suites/kernelcast, to check them numerically.

Checking is a test, not part of a measurement: :func:`verify_instance` runs an instance once
through the harness, reads back the output buffers, and compares them with
:func:`expected_outputs`. References are keyed by the OpenCL kernel name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kernelcast.bench.suite.model import BenchInstance

from kernelcast.cltypes import parse_type

log = logging.getLogger(__name__)


@dataclass
class Expected:
    """Expected contents of one output buffer and how close the device must come.

    ``atol`` defaults to ``rtol`` times the largest magnitude of the expected values (float
    sums accumulate in a different order on the device). ``mismatch_ok`` lets a fraction of
    elements differ (near-ties in an argmin)."""

    values: np.ndarray
    rtol: float = 1e-5
    atol: float | None = None
    mismatch_ok: float = 0.0


@dataclass
class Check:
    label: str
    ok: bool
    status: str
    details: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.label}: {'ok' if self.ok else 'FAILED'} ({self.status}) " + \
            "; ".join(f"{k}: {v}" for k, v in self.details.items())


def _input(inst: BenchInstance, name: str) -> np.ndarray:
    """The initial contents of a buffer (flattened base dtype)."""
    a = inst.arg(name)
    if name in inst.arrays:
        return inst.arrays[name]
    t = parse_type(a.dtype)
    fill = 1 if a.init == "ones" else 0
    return np.full(int(a.count or 0) * t.storage_width, fill, dtype=t.numpy)


def _scalar(inst: BenchInstance, name: str) -> Any:
    return inst.arg(name).value


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _triad(inst: BenchInstance) -> dict[str, Expected]:
    s = np.float32(_scalar(inst, "scale"))
    lhs, rhs = _input(inst, "lhs"), _input(inst, "rhs")
    return {"dst": Expected((lhs + s * rhs).astype(np.float32), rtol=1e-6)}


def _group_of_items(inst: BenchInstance) -> tuple[int, int]:
    groups = inst.gsize[0] // inst.lsize[0]  # type: ignore[index]
    return groups, inst.lsize[0]  # type: ignore[index]


def _grid_sum(inst: BenchInstance) -> dict[str, Expected]:
    v = _f64(_input(inst, "values"))
    length = int(_scalar(inst, "length"))
    groups, wg = _group_of_items(inst)
    items = groups * wg
    padded = np.zeros(((length + items - 1) // items) * items)
    padded[:length] = v[:length]
    per_item = padded.reshape(-1, items).sum(axis=0)          # item g folds values[g::items]
    per_group = per_item.reshape(groups, wg).sum(axis=1)
    return {"group_sums": Expected(per_group.astype(np.float32), rtol=1e-4)}


def _chunks(length: int, groups: int, wg: int) -> list[tuple[int, int]]:
    tiles = (length + wg - 1) // wg
    per = (tiles + groups - 1) // groups
    out = []
    for g in range(groups):
        first = min(g * per * wg, length)
        out.append((first, min(first + per * wg, length)))
    return out


def _chunk_totals(inst: BenchInstance) -> dict[str, Expected]:
    v = _f64(_input(inst, "values"))
    groups, wg = _group_of_items(inst)
    tot = np.array([v[a:b].sum() for a, b in _chunks(int(_scalar(inst, "length")), groups, wg)])
    return {"chunk_totals": Expected(tot.astype(np.float32), rtol=1e-4)}


def _chunk_scan(inst: BenchInstance) -> dict[str, Expected]:
    v = _f64(_input(inst, "values"))
    carry = _f64(_input(inst, "carry_in"))
    out = _f64(_input(inst, "prefix")).copy()
    groups, wg = _group_of_items(inst)
    for g, (a, b) in enumerate(_chunks(int(_scalar(inst, "length")), groups, wg)):
        out[a:b] = carry[g] + np.cumsum(v[a:b])
    return {"prefix": Expected(out.astype(np.float32), rtol=1e-4)}


def _csr(inst: BenchInstance) -> dict[str, Expected]:
    vals, cols = _f64(_input(inst, "nz_values")), _input(inst, "nz_cols").astype(np.int64)
    starts, x = _input(inst, "row_start").astype(np.int64), _f64(_input(inst, "vec"))
    rows = int(_scalar(inst, "rows"))
    row_of = np.repeat(np.arange(rows), np.diff(starts[:rows + 1]))
    y = np.bincount(row_of, weights=vals * x[cols], minlength=rows)
    return {"out": Expected(y.astype(np.float32), rtol=1e-4)}


def _ellr(inst: BenchInstance) -> dict[str, Expected]:
    rows = int(_scalar(inst, "rows"))
    vals, cols = _f64(_input(inst, "ell_values")), _input(inst, "ell_cols").astype(np.int64)
    lens, x = _input(inst, "row_len").astype(np.int64), _f64(_input(inst, "vec"))
    width = len(vals) // rows
    v2, c2 = vals.reshape(width, rows), cols.reshape(width, rows)
    used = np.arange(width)[:, None] < lens[None, :]
    y = np.where(used, v2 * x[c2], 0.0).sum(axis=0)
    return {"out": Expected(y.astype(np.float32), rtol=1e-4)}


def _lj(inst: BenchInstance) -> dict[str, Expected]:
    atoms, k = int(_scalar(inst, "atoms")), int(_scalar(inst, "nbrs_per_atom"))
    pos = _f64(_input(inst, "where")).reshape(atoms, 4)[:, :3]
    nbr = _input(inst, "nbr_list").astype(np.int64).reshape(k, atoms)
    cut_sq, a, b = (float(_scalar(inst, x)) for x in ("cut_sq", "lj_a", "lj_b"))
    d = pos[None, :, :] - pos[nbr]                                  # [k][atom][3]
    rsq = (d ** 2).sum(axis=2)
    inside = rsq < cut_sq
    inv2 = np.where(inside, 1.0 / np.where(inside, rsq, 1.0), 0.0)
    inv6 = inv2 ** 3
    f = (inv2 * inv6 * (a * inv6 - b))[:, :, None] * d
    out = np.zeros((atoms, 4))
    out[:, :3] = f.sum(axis=0)
    return {"accel": Expected(out.reshape(-1).astype(np.float32), rtol=1e-3)}


def _bfs(inst: BenchInstance) -> dict[str, Expected]:
    starts, dst = _input(inst, "adj_start").astype(np.int64), _input(inst, "adj_dst").astype(np.int64)
    frontier, seen = _input(inst, "in_frontier").astype(bool), _input(inst, "seen").astype(bool)
    depth, to_visit = _input(inst, "depth").copy(), _input(inst, "to_visit").copy()
    level = int(_scalar(inst, "level"))
    vs = np.flatnonzero(frontier)
    counts = starts[vs + 1] - starts[vs]
    base = np.repeat(starts[vs] - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    reached = dst[base + np.arange(int(counts.sum()))]
    reached = reached[~seen[reached]]
    depth[reached] = level + 1
    to_visit[reached] = 1
    return {"depth": Expected(depth, rtol=0, atol=0), "to_visit": Expected(to_visit, rtol=0, atol=0)}


def _kmeans(inst: BenchInstance) -> dict[str, Expected]:
    points, dims = int(_scalar(inst, "points")), int(_scalar(inst, "dims"))
    feat = _f64(_input(inst, "feat")).reshape(dims, points).T
    cen = _f64(_input(inst, "centres")).reshape(-1, dims)
    d2 = ((feat[:, None, :] - cen[None, :, :]) ** 2).sum(axis=2)
    return {"label": Expected(d2.argmin(axis=1).astype(np.int32), rtol=0, atol=0, mismatch_ok=1e-3)}


def _nn(inst: BenchInstance) -> dict[str, Expected]:
    rec = _f64(_input(inst, "records")).reshape(-1, 2)
    q = np.asarray(_scalar(inst, "query"), dtype=np.float64)
    return {"dist": Expected(np.sqrt(((rec - q) ** 2).sum(axis=1)).astype(np.float32), rtol=1e-5)}


REFERENCES: dict[str, Callable[[BenchInstance], dict[str, Expected]]] = {
    "kc_stream_triad": _triad,
    "kc_grid_sum": _grid_sum,
    "kc_chunk_totals": _chunk_totals,
    "kc_chunk_scan": _chunk_scan,
    "kc_spmv_csr_rowwise": _csr,
    "kc_spmv_csr_lanes": _csr,
    "kc_spmv_ellr": _ellr,
    "kc_md_lj_forces": _lj,
    "kc_bfs_step_vertex": _bfs,
    "kc_bfs_step_team": _bfs,
    "kc_kmeans_label": _kmeans,
    "kc_nn_distance": _nn,
}


def expected_outputs(inst: BenchInstance) -> dict[str, Expected]:
    """What the output buffers of ``inst`` must hold after one launch."""
    try:
        ref = REFERENCES[inst.kernel.name]
    except KeyError:
        raise KeyError(f"no reference for kernel {inst.kernel.name!r}") from None
    return ref(inst)


def compare(name: str, got: np.ndarray, exp: Expected) -> str | None:
    """``None`` when ``got`` matches, else a one-line description of the worst difference."""
    want = np.asarray(exp.values).reshape(-1)
    got = np.asarray(got).reshape(-1)
    if got.shape != want.shape:
        return f"{name}: {got.size} values, expected {want.size}"
    g, w = got.astype(np.float64), want.astype(np.float64)
    atol = exp.atol if exp.atol is not None else exp.rtol * float(np.abs(w).max(initial=0.0))
    bad = ~np.isclose(g, w, rtol=exp.rtol, atol=atol, equal_nan=False)
    frac = float(bad.mean()) if bad.size else 0.0
    if frac <= exp.mismatch_ok:
        return None
    i = int(np.argmax(np.abs(g - w) * bad))
    return f"{name}: {int(bad.sum())}/{bad.size} values differ, e.g. [{i}] = {g[i]!r}, expected {w[i]!r}"


def verify_instance(inst: BenchInstance, harness: Any, policy: Any = None) -> Check:
    """Run ``inst`` once through ``harness`` and compare its outputs with the reference."""
    from kernelcast.instrument.runner import TimingPolicy

    expected = expected_outputs(inst)
    policy = policy or TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=1.0)
    m = harness.run(inst.kernel, inst.config, policy, arrays=inst.arrays, readback=list(expected))
    if m.status != "ok":
        return Check(inst.label, False, m.status, {"reason": m.reason})
    details: dict[str, str] = {}
    for name, exp in expected.items():
        problem = compare(name, m.readback[name], exp)
        if problem:
            details[name] = problem
    return Check(inst.label, not details, m.status, details)

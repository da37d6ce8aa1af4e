"""Input generators: structured data whose indices are valid by construction.

A manifest declares a generator once per kernel (``"generators": {"A": {"csr": {...}}}``) and
arguments take its parts (``{"from": "A.col_indices"}``). Each generator kind states its
parameters and parts here; :func:`generate` evaluates nothing itself: it receives parameter
values already evaluated from the manifest's expressions.

Kinds:

``csr``
    a sparse matrix in compressed sparse rows (row offsets, column indices, values).
``ell``
    the same kind of matrix in ELLPACK-R form: padded column-major (or row-major) slots plus
    the length of every row.
``graph``
    a random directed graph in CSR form with a BFS state (frontier mask, visited mask, depth)
    taken at one level of a breadth-first search from a source vertex; ``node_pairs`` holds
    (first edge, out-degree) per vertex for kernels that take an array of node structs.
``neighbors``
    atoms on a jittered cubic lattice and a fixed-width neighbour list (for pair potentials).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Number = int | float


class GeneratorError(ValueError):
    """Parameters a generator cannot produce valid data from."""


@dataclass(frozen=True)
class Param:
    """One generator parameter: ``kind`` is int, float (expressions) or choice/dtype (strings)."""

    name: str
    kind: str                      # "int" | "float" | "choice" | "dtype" | "int_or_choice"
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    doc: str = ""


@dataclass
class Generated:
    """What a generator produced: arrays (flattened by the caller) and scalar values."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    scalars: dict[str, Number] = field(default_factory=dict)


@dataclass(frozen=True)
class GeneratorKind:
    name: str
    params: tuple[Param, ...]
    array_parts: tuple[str, ...]
    scalar_parts: tuple[str, ...]
    fn: Callable[[Mapping[str, Any], np.random.Generator], Generated]
    doc: str = ""

    @property
    def parts(self) -> tuple[str, ...]:
        return self.array_parts + self.scalar_parts

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


# -- row lengths and column patterns shared by csr / ell / graph ----------------------------------

DISTRIBUTIONS = ("fixed", "uniform", "skewed")


def row_lengths(rows: int, mean: float, limit: int, distribution: str, rng: np.random.Generator) -> np.ndarray:
    """Entries per row with the given mean, each in [0, limit].

    ``fixed``: every row has round(mean); ``uniform``: uniform on [0, 2 mean]; ``skewed``:
    geometric (many short rows, a few long ones), the SpMV load-imbalance case."""
    if distribution == "fixed":
        lengths = np.full(rows, int(round(mean)), dtype=np.int64)
    elif distribution == "uniform":
        lengths = rng.integers(0, int(round(2 * mean)) + 1, size=rows, dtype=np.int64)
    elif distribution == "skewed":
        p = 1.0 / (1.0 + mean) if mean > 0 else 1.0
        lengths = rng.geometric(p, size=rows).astype(np.int64) - 1
    else:  # pragma: no cover - validated before
        raise GeneratorError(f"unknown distribution {distribution!r} (one of {', '.join(DISTRIBUTIONS)})")
    return np.clip(lengths, 0, limit)


def spread_columns(lengths: np.ndarray, cols: int, band: int | None, rng: np.random.Generator) -> np.ndarray:
    """Distinct, sorted column indices for every row, concatenated row after row.

    Row r with L entries draws one column from each of L slices of its window (all columns, or
    ``band`` columns centred on the diagonal); the slices have integer bounds and are disjoint,
    so columns are distinct and sorted without a per-row loop (L never exceeds the window)."""
    rows = len(lengths)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    starts = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    slot = np.arange(total, dtype=np.int64) - starts[row_of]
    length = lengths[row_of].astype(np.float64)
    if band is None or band >= cols:
        lo = np.zeros(total, dtype=np.float64)
        width = np.full(total, float(cols))
    else:
        centre = (row_of * cols) // max(rows, 1)
        lo_i = np.clip(centre - band // 2, 0, cols - band)
        lo = lo_i.astype(np.float64)
        width = np.full(total, float(band))
    # integer slice bounds: slice s of a row is [floor(s w / L), floor((s + 1) w / L)), never empty
    first = np.floor(slot * width / length)
    stop = np.floor((slot + 1) * width / length)
    col = lo + first + np.floor(rng.random(total) * (stop - first))
    return np.minimum(col, lo + width - 1).astype(np.int64)


def _csr_pattern(p: Mapping[str, Any], rng: np.random.Generator) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
    rows, cols = int(p["rows"]), int(p["cols"] if p.get("cols") is not None else p["rows"])
    band = p.get("band")
    band = int(band) if band is not None else None
    window = cols if band is None else min(band, cols)
    lengths = row_lengths(rows, float(p["nnz_per_row"]), window, p.get("distribution") or "fixed", rng)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise GeneratorError(f"{offsets[-1]} non-zeros do not fit 32-bit indices")
    columns = spread_columns(lengths, cols, band, rng)
    return rows, cols, lengths, offsets, columns


def _values(count: int, dtype: str | None, rng: np.random.Generator) -> np.ndarray:
    dt = np.float64 if dtype == "double" else np.float32
    return (rng.random(count) * 2.0 - 1.0).astype(dt)


def gen_csr(p: Mapping[str, Any], rng: np.random.Generator) -> Generated:
    rows, cols, lengths, offsets, columns = _csr_pattern(p, rng)
    values = _values(len(columns), p.get("values"), rng)
    return Generated(
        arrays={"row_offsets": offsets, "col_indices": columns, "values": values, "row_lengths": lengths},
        scalars={"rows": rows, "cols": cols, "nnz": int(offsets[-1]), "max_row": int(lengths.max(initial=0))},
    )


def gen_ell(p: Mapping[str, Any], rng: np.random.Generator) -> Generated:
    rows, cols, lengths, offsets, columns = _csr_pattern(p, rng)
    width = max(int(lengths.max(initial=0)), 1)
    values = _values(len(columns), p.get("values"), rng)
    row_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    slot = np.arange(len(columns), dtype=np.int64) - offsets[row_of]
    ell_cols = np.zeros((width, rows), dtype=np.int64)          # padding points at column 0
    ell_vals = np.zeros((width, rows), dtype=values.dtype)       # and contributes 0
    ell_cols[slot, row_of] = columns
    ell_vals[slot, row_of] = values
    if (p.get("layout") or "column_major") == "row_major":
        ell_cols, ell_vals = ell_cols.T, ell_vals.T
    return Generated(
        arrays={"col_indices": np.ascontiguousarray(ell_cols).reshape(-1),
                "values": np.ascontiguousarray(ell_vals).reshape(-1), "row_lengths": lengths},
        scalars={"rows": rows, "cols": cols, "width": width, "nnz": int(offsets[-1]), "slots": width * rows},
    )


def bfs_levels(offsets: np.ndarray, adjacency: np.ndarray, source: int) -> np.ndarray:
    """BFS depth of every vertex from ``source`` (-1 where unreachable), level-synchronous."""
    vertices = len(offsets) - 1
    depth = np.full(vertices, -1, dtype=np.int64)
    depth[source] = 0
    frontier = np.array([source], dtype=np.int64)
    level = 0
    while frontier.size:
        starts, stops = offsets[frontier], offsets[frontier + 1]
        counts = stops - starts
        if counts.sum() == 0:
            break
        base = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        reached = adjacency[base + np.arange(int(counts.sum()), dtype=np.int64)]
        reached = np.unique(reached[depth[reached] < 0])
        level += 1
        depth[reached] = level
        frontier = reached
    return depth


def gen_graph(p: Mapping[str, Any], rng: np.random.Generator) -> Generated:
    vertices = int(p["vertices"])
    source = int(p.get("source") or 0)
    if not 0 <= source < vertices:
        raise GeneratorError(f"source {source} is not a vertex of a graph with {vertices} vertices")
    lengths = row_lengths(vertices, float(p["avg_degree"]), vertices, p.get("distribution") or "uniform", rng)
    min_degree = p.get("min_degree")
    lengths = np.maximum(lengths, min(int(min_degree if min_degree is not None else 1), vertices))
    offsets = np.zeros(vertices + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise GeneratorError(f"{offsets[-1]} edges do not fit 32-bit indices")
    adjacency = rng.integers(0, vertices, size=int(offsets[-1]), dtype=np.int64)
    depth_all = bfs_levels(offsets, adjacency, source)
    deepest = int(depth_all.max())
    want = p.get("frontier")
    if want is None:
        want = "largest"
    if want == "source":
        level = 0
    elif want == "largest":
        sizes = np.bincount(depth_all[depth_all >= 0], minlength=deepest + 1)
        level = int(np.argmax(sizes))
    else:
        level = int(want)
        if not 0 <= level <= deepest:
            raise GeneratorError(f"frontier level {level} does not exist (BFS from {source} has levels 0..{deepest})")
    frontier = (depth_all == level).astype(np.uint8)
    visited = ((depth_all >= 0) & (depth_all <= level)).astype(np.uint8)
    depth = np.where(visited.astype(bool), depth_all, -1)
    return Generated(
        arrays={"row_offsets": offsets, "adjacency": adjacency, "frontier": frontier,
                "next_frontier": np.zeros(vertices, dtype=np.uint8), "visited": visited, "depth": depth,
                "degree": lengths, "node_pairs": np.stack([offsets[:-1], lengths], axis=1)},
        scalars={"vertices": vertices, "edges": int(offsets[-1]), "source": source, "level": level,
                 "frontier_size": int(frontier.sum()), "depth_max": deepest},
    )


def lattice_offsets(k: int) -> np.ndarray:
    """The ``k`` nearest non-zero integer offsets in 3-D, nearest first (ties in a fixed order)."""
    radius = 1
    while (2 * radius + 1) ** 3 - 1 < k:
        radius += 1
    r = np.arange(-radius, radius + 1)
    grid = np.stack(np.meshgrid(r, r, r, indexing="ij"), axis=-1).reshape(-1, 3)
    grid = grid[np.any(grid != 0, axis=1)]
    norm = (grid ** 2).sum(axis=1)
    order = np.lexsort((grid[:, 0], grid[:, 1], grid[:, 2], norm))
    return grid[order[:k]]


def gen_neighbors(p: Mapping[str, Any], rng: np.random.Generator) -> Generated:
    atoms, k = int(p["atoms"]), int(p["neighbors"])
    spacing = float(p.get("spacing") or 1.0)
    jitter_raw = p.get("jitter")
    jitter = float(jitter_raw if jitter_raw is not None else 0.1) * spacing
    side = max(int(math.ceil(atoms ** (1.0 / 3.0) - 1e-9)), 1)
    offs = lattice_offsets(k)
    linear = offs[:, 0] + offs[:, 1] * side + offs[:, 2] * side * side
    if np.any(linear % atoms == 0) or len(np.unique(linear % atoms)) != k:
        raise GeneratorError(f"{atoms} atoms are too few for {k} distinct neighbours per atom")
    idx = np.arange(atoms, dtype=np.int64)
    cell = np.stack([idx % side, (idx // side) % side, idx // (side * side)], axis=1).astype(np.float64)
    pos = np.zeros((atoms, 4), dtype=np.float32)
    pos[:, :3] = cell * spacing + rng.uniform(-jitter, jitter, size=(atoms, 3))
    # atom i's neighbour at lattice offset o is atom (i + linear(o)) mod atoms: the lattice is
    # periodic along the linear index, so every entry is a valid, distinct atom other than i
    table = (idx[:, None] + linear[None, :]) % atoms                     # [atom][slot]
    if (p.get("layout") or "neighbor_major") == "neighbor_major":
        table = np.ascontiguousarray(table.T)
    reach = float(np.sqrt((offs[-1] ** 2).sum())) * spacing + 2 * jitter
    return Generated(
        arrays={"positions": pos, "neighbor_list": table.reshape(-1),
                "neighbor_counts": np.full(atoms, k, dtype=np.int64)},
        scalars={"atoms": atoms, "neighbors": k, "side": side, "cutoff_sq": reach * reach},
    )


_SIZE = Param("distribution", "choice", default=None, choices=DISTRIBUTIONS,
              doc="row-length distribution: fixed, uniform on [0, 2 mean], or skewed (geometric)")

KINDS: dict[str, GeneratorKind] = {
    "csr": GeneratorKind(
        "csr",
        (Param("rows", "int", required=True, minimum=1), Param("cols", "int", minimum=1, doc="default: rows"),
         Param("nnz_per_row", "float", required=True, minimum=0, doc="mean entries per row"),
         _SIZE, Param("band", "int", minimum=1, doc="columns within a band of this width around the diagonal"),
         Param("values", "dtype", default="float", choices=("float", "double")),
         Param("seed", "int", minimum=0)),
        ("row_offsets", "col_indices", "values", "row_lengths"), ("rows", "cols", "nnz", "max_row"), gen_csr,
        "sparse matrix in CSR form"),
    "ell": GeneratorKind(
        "ell",
        (Param("rows", "int", required=True, minimum=1), Param("cols", "int", minimum=1),
         Param("nnz_per_row", "float", required=True, minimum=0), _SIZE, Param("band", "int", minimum=1),
         Param("values", "dtype", default="float", choices=("float", "double")),
         Param("layout", "choice", default="column_major", choices=("column_major", "row_major")),
         Param("seed", "int", minimum=0)),
        ("col_indices", "values", "row_lengths"), ("rows", "cols", "width", "nnz", "slots"), gen_ell,
        "sparse matrix in ELLPACK-R form"),
    "graph": GeneratorKind(
        "graph",
        (Param("vertices", "int", required=True, minimum=1), Param("avg_degree", "float", required=True, minimum=0),
         Param("distribution", "choice", default="uniform", choices=DISTRIBUTIONS),
         Param("min_degree", "int", default=1, minimum=0, doc="out-degree floor (1: no dead ends)"),
         Param("source", "int", default=0, minimum=0),
         Param("frontier", "int_or_choice", default="largest", choices=("source", "largest"),
               doc="BFS level whose frontier is active: source, largest, or a level number"),
         Param("seed", "int", minimum=0)),
        ("row_offsets", "adjacency", "frontier", "next_frontier", "visited", "depth", "degree", "node_pairs"),
        ("vertices", "edges", "source", "level", "frontier_size", "depth_max"), gen_graph,
        "random directed graph (CSR) with a BFS frontier"),
    "neighbors": GeneratorKind(
        "neighbors",
        (Param("atoms", "int", required=True, minimum=2), Param("neighbors", "int", required=True, minimum=1),
         Param("spacing", "float", default=1.0, minimum=0), Param("jitter", "float", default=0.1, minimum=0),
         Param("layout", "choice", default="neighbor_major", choices=("neighbor_major", "atom_major")),
         Param("seed", "int", minimum=0)),
        ("positions", "neighbor_list", "neighbor_counts"), ("atoms", "neighbors", "side", "cutoff_sq"),
        gen_neighbors, "atoms on a jittered lattice with a fixed-width neighbour list"),
}


def generate(kind: str, params: Mapping[str, Any], seed: int) -> Generated:
    """Run generator ``kind`` with evaluated ``params`` and a seed (``params['seed']`` wins)."""
    spec = KINDS[kind]
    full = {p.name: p.default for p in spec.params}
    full.update({k: v for k, v in params.items() if v is not None})
    rng = np.random.default_rng(int(full["seed"]) if full.get("seed") is not None else seed)
    out = spec.fn(full, rng)
    log.debug("generator %s: %s", kind, {k: v.shape for k, v in out.arrays.items()})
    return out

"""Coalescing efficiency and local-memory bank conflicts of one access, vectorized over configs.

Model (documented here once, used by :meth:`SourceFeatures.evaluate_many`):

A warp is ``W`` (default 32) consecutive work-items of one work-group in linear order (dimension
0 fastest); a work-group smaller than ``W`` leaves lanes idle, so ``Weff = min(W, lsize0*lsize1*
lsize2)`` lanes are active. They form ``r = ceil(Weff / n)`` rows of ``n = min(Weff, lsize0)``
lanes. Adjacent lanes of a row are ``a0 = |stride0| * unit`` bytes apart, adjacent rows
``a1 = |stride1| * unit`` bytes (``stride0``/``stride1`` come from the affine analysis of the index,
``unit`` is the byte size of one index step). Each lane reads ``e`` (element) bytes. Memory is
fetched in aligned segments of ``S`` bytes (default 32, a DRAM sector; pass 128 for L1 lines).

* one row touches ``seg_row = min(n * ceil(e/S), ceil(((n-1)*a0 + e) / S))`` segments: either
  every lane its own segment(s), or the contiguous span, whichever is smaller;
* the warp touches ``seg = min(r * seg_row, ceil(((r-1)*a1 + (n-1)*a0 + e) / S))`` segments;
* ``eta = min(1, Weff * e / (seg * S))``: the fraction of fetched bytes a lane asked for.

Stride 0 (all lanes read one address) gives one segment and ``eta = 1``. An access whose stride
is unknown (index loaded from memory: a gather, or not affine in the work-item id) gets the worst
case, one segment per lane: ``eta = e / (ceil(e/S) * S)``. Base addresses are assumed aligned.
The kernel-level ``eta_coal`` of FlipFlop (one value per kernel) is the access-count-weighted mean
of the per-access values; ``eta_bytes`` is the byte-weighted harmonic mean (requested bytes over
fetched bytes), the quantity that scales effective DRAM bandwidth.

Local memory: 32 banks of 4 bytes; lanes ``a0`` bytes apart hit ``gcd(a0/4, 32)``-way conflicts
(1 for a broadcast, 32 for a stride of 32 words), and a warp spanning rows of the work-group also
meets the row stride ``a1``; see :func:`bank_conflict_degree`.
"""

from __future__ import annotations

import numpy as np

DEFAULT_WARP = 32
DEFAULT_SEGMENT_BYTES = 32
LOCAL_BANKS = 32
LOCAL_BANK_BYTES = 4


def coalescing_efficiency(stride0: np.ndarray | float | None, stride1: np.ndarray | float | None,
                          elem_bytes: float, unit_bytes: float,
                          lsize0: np.ndarray | float, lsize1: np.ndarray | float = 1.0,
                          lsize2: np.ndarray | float = 1.0, *, warp: np.ndarray | float = DEFAULT_WARP,
                          segment: np.ndarray | float = DEFAULT_SEGMENT_BYTES, shared: bool = False) -> np.ndarray:
    """Coalescing efficiency in (0, 1] of one access for every configuration (see module doc).

    ``stride0 is None`` means unknown stride (gather): the worst case is returned. ``shared``: not
    capped at 1, so that lanes sharing a segment (a broadcast, a stride below the element size)
    count their share of it: ``element bytes / efficiency`` is then the bytes the warp fetches per
    active lane (1 for a 4-byte broadcast to 32 lanes from a 32-byte segment).
    """
    e = float(elem_bytes)
    seg_per_lane = np.ceil(e / np.asarray(segment, dtype=np.float64))
    if stride0 is None:
        out = e / (seg_per_lane * segment)
        return np.minimum(1.0, np.broadcast_to(out, np.broadcast(lsize0, lsize1, lsize2).shape)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        l0 = np.maximum(np.asarray(lsize0, dtype=np.float64), 1.0)
        l1 = np.maximum(np.asarray(lsize1, dtype=np.float64), 1.0)
        l2 = np.maximum(np.asarray(lsize2, dtype=np.float64), 1.0)
        weff = np.minimum(warp, l0 * l1 * l2)
        n = np.minimum(weff, l0)
        r = np.ceil(weff / n)
        a0 = np.abs(np.asarray(stride0, dtype=np.float64)) * unit_bytes
        s1 = 0.0 if stride1 is None else stride1
        a1 = np.abs(np.asarray(s1, dtype=np.float64)) * unit_bytes
        row_span = (n - 1.0) * a0 + e
        seg_row = np.minimum(n * seg_per_lane, np.ceil(row_span / segment))
        seg = np.minimum(r * seg_row, np.ceil(((r - 1.0) * a1 + row_span) / segment))
        seg = np.maximum(seg, 1.0)
        eta = weff * e / (seg * segment)
        if not shared:
            eta = np.minimum(1.0, eta)
    eta = np.where(np.isfinite(eta), eta, e / (seg_per_lane * segment))
    return np.asarray(eta, dtype=np.float64)


def bank_conflict_degree(stride0: np.ndarray | float | None, elem_bytes: float, unit_bytes: float,
                         lsize0: np.ndarray | float = 32.0, *, warp: np.ndarray | float = DEFAULT_WARP,
                         stride1: np.ndarray | float | None = None, lsize1: np.ndarray | float = 1.0,
                         lsize2: np.ndarray | float = 1.0) -> np.ndarray:
    """Serialization factor (>= 1) of a local-memory access, averaged over the warps of a work-group.

    The work-items of a work-group are numbered in linear order (dimension 0 fastest) and cut into
    warps of ``warp`` lanes; lane ``(x, y)`` reads ``e`` bytes at ``x * |stride0| * unit + y *
    |stride1| * unit`` (rows of ``lsize0`` lanes; the rows of further planes continue the rows at
    the same row stride; with ``stride1`` unknown the work-group is taken as its first row). Local
    memory has ``LOCAL_BANKS`` banks of ``LOCAL_BANK_BYTES`` bytes; word ``w`` sits in bank ``w mod
    LOCAL_BANKS``. A pass serves ``LOCAL_BANKS / (e/4)`` lanes (a wider warp, such as a 64-wide
    wavefront, takes several passes); within a pass, lanes reading the same word share it (a
    broadcast) and distinct words of one bank serialize. The factor of a pass is the most distinct
    words any bank holds; of a warp, the mean over its passes; of the access, the mean over the
    work-group's warps (:func:`_block_bank_degree`). A warp that straddles two rows of a work-group
    whose ``lsize0`` is not a multiple of the bank count meets the row stride: a row of 30 words
    puts lanes 0 and 18 of a 16-wide row pair in one bank, a row padded to 48 words does not.
    Unknown ``stride0``: 1 (no information).
    """
    shape = np.broadcast(np.asarray(lsize0, dtype=np.float64), np.asarray(lsize1, dtype=np.float64),
                         np.asarray(lsize2, dtype=np.float64)).shape
    if stride0 is None:
        return np.ones(shape, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        a0 = np.abs(np.asarray(stride0, dtype=np.float64)) * unit_bytes
        a1 = np.abs(np.asarray(0.0 if stride1 is None else stride1, dtype=np.float64)) * unit_bytes
    if stride1 is None:
        lsize1 = lsize2 = 1.0
    a0, a1, l0, l1, l2, wp = np.broadcast_arrays(a0, a1, np.asarray(lsize0, dtype=np.float64),
                                                 np.asarray(lsize1, dtype=np.float64),
                                                 np.asarray(lsize2, dtype=np.float64),
                                                 np.asarray(warp, dtype=np.float64))
    out = np.ones(a0.shape, dtype=np.float64)
    memo: dict[tuple[float, float, int, int, int, int], float] = {}
    for idx in np.ndindex(a0.shape):
        if not (np.isfinite(a0[idx]) and np.isfinite(a1[idx])):
            continue
        key = (float(a0[idx]), float(a1[idx]), int(max(l0[idx], 1)), int(max(l1[idx], 1)), int(max(l2[idx], 1)),
               int(max(wp[idx], 1)))
        got = memo.get(key)
        if got is None:
            got = memo[key] = _block_bank_degree(*key[:5], elem_bytes=float(elem_bytes), warp=key[5])
        out[idx] = got
    return out.reshape(shape) if out.shape != shape else out


#: work-items of one work-group enumerated for the bank-conflict degree (the largest work-group
#: of current GPUs)
MAX_BANK_ITEMS = 1024


def _block_bank_degree(a0: float, a1: float, l0: int, l1: int, l2: int, *, elem_bytes: float, warp: int) -> float:
    """Mean bank-conflict factor over the warps of one work-group (:func:`bank_conflict_degree`)
    for lanes ``a0`` bytes apart along dimension 0 and rows ``a1`` bytes apart."""
    items = min(l0 * l1 * l2, MAX_BANK_ITEMS)
    t = np.arange(items, dtype=np.int64)
    addr = (t % l0) * a0 + (t // l0) * a1
    wide = max(1, int(np.ceil(elem_bytes / LOCAL_BANK_BYTES)))
    first = np.floor(addr / LOCAL_BANK_BYTES).astype(np.int64)
    per_pass = max(1, LOCAL_BANKS // wide)
    degrees = []
    for w0 in range(0, items, warp):
        passes = []
        for p0 in range(w0, min(w0 + warp, items), per_pass):
            words = np.unique((first[p0:min(p0 + per_pass, w0 + warp, items), None]
                               + np.arange(wide, dtype=np.int64)[None, :]).reshape(-1))
            passes.append(float(np.bincount(words % LOCAL_BANKS, minlength=LOCAL_BANKS).max()))
        degrees.append(float(np.mean(passes)))
    return max(1.0, float(np.mean(degrees)))

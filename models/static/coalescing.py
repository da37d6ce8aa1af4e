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
(1 for a broadcast, 32 for a stride of 32 words); see :func:`bank_conflict_degree`.
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
                         lsize0: np.ndarray | float = 32.0, *, warp: float = DEFAULT_WARP) -> np.ndarray:
    """Serialization factor (>= 1) of a local-memory access across a warp.

    Lanes ``stride0 * unit_bytes`` bytes apart, i.e. ``s`` 4-byte words, map to bank
    ``word mod 32``: ``gcd(s, 32)`` lanes share a bank. Elements of ``e > 4`` bytes are served
    ``e/4`` lanes fewer per pass, so the factor is ``max(1, gcd(s, 32) / (e/4))``. Stride 0 is a
    broadcast (1), sub-word strides never conflict (1); the factor is capped by the lanes of a
    row, ``min(W, lsize0)``. Unknown stride: 1 (no information).
    """
    shape = np.broadcast(np.asarray(lsize0, dtype=np.float64)).shape
    if stride0 is None:
        return np.ones(shape, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        words = np.abs(np.asarray(stride0, dtype=np.float64)) * unit_bytes / LOCAL_BANK_BYTES
        words = np.where(np.isfinite(words), words, 0.0)
        w_int = np.rint(words).astype(np.int64)
        g = np.gcd(w_int, LOCAL_BANKS).astype(np.float64)
        g = np.where((w_int == 0) | (words < 1.0), 1.0, g)
        wide = max(1.0, elem_bytes / LOCAL_BANK_BYTES)
        lanes = np.minimum(np.maximum(np.asarray(lsize0, dtype=np.float64), 1.0), warp)
        deg = np.minimum(np.maximum(g / wide, 1.0), lanes)
    return np.asarray(np.maximum(deg, 1.0), dtype=np.float64)

"""The search space of ``tune``: work-group sizes and block shapes (FlipFlop Algorithm 2), power
caps, and the time/energy Pareto set. Every enumeration is bounded."""

from __future__ import annotations

import math

import numpy as np

from kernelcast.errors import UsageError

#: the most power caps one search takes
MAX_POWER_CAPS = 1000
#: the most (configuration x power cap) points one search scores
MAX_POINTS = 200_000


def power_caps(text: str | None) -> list[float | None]:
    """``LO:HI:STEP`` in watts as a list of caps (``[None]``: no cap)."""
    if not text:
        return [None]
    try:
        parts = [float(x) for x in text.split(":")]
    except ValueError:
        raise UsageError(f"--power-caps {text!r}: expected LO:HI:STEP in watts") from None
    if len(parts) != 3 or not all(math.isfinite(x) for x in parts) or parts[2] <= 0 or parts[0] > parts[1] \
            or parts[0] <= 0:
        raise UsageError(f"--power-caps {text!r}: expected LO:HI:STEP with 0 < LO <= HI and STEP > 0")
    n = math.floor((parts[1] - parts[0]) / parts[2] + 1e-9) + 1
    if n > MAX_POWER_CAPS:
        raise UsageError(f"--power-caps {text!r}: {n} caps; at most {MAX_POWER_CAPS} (use a larger STEP)")
    return list(np.arange(parts[0], parts[1] + 1e-9, parts[2]))


def enumerate_shapes(n: tuple[int, ...], warp: int, max_wg: int, max_items: list[int] | None,
                     shapes: bool) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(gsize, lsize) pairs: work-group sizes that are multiples of the warp up to the device
    maximum (FlipFlop Algorithm 2), the global size padded up to a multiple of each."""
    out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    dims = len(n)
    totals = [w for w in range(warp, max_wg + 1, warp)]
    for t in totals:
        cand: list[tuple[int, ...]]
        if dims == 1:
            cand = [(t,)]
        elif shapes:
            cand = [(x, t // x) + (1,) * (dims - 2) for x in range(1, t + 1) if t % x == 0]
        else:
            x = min(t, 2 ** int(math.log2(max(1, int(math.sqrt(t))))) * 2)
            cand = [(x, t // x) + (1,) * (dims - 2)] if t % x == 0 else []
        for ls in cand:
            if max_items and any(a > b for a, b in zip(ls, max_items)):
                continue
            g = tuple(int(math.ceil(a / b) * b) for a, b in zip(n, ls))
            out.append((g, ls))
    return out


def pareto(time_: np.ndarray, energy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats in both time and energy."""
    order = np.lexsort((energy, time_))
    best_e = np.inf
    keep = []
    for i in order:
        if energy[i] < best_e:
            keep.append(i)
            best_e = energy[i]
    return np.array(keep, dtype=int)

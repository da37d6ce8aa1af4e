"""The fits calibration needs, on plain numpy arrays (no scipy).

* :func:`linear_fit`: ordinary least squares ``y = slope * x + intercept`` with r^2 (time vs
  work, energy vs accesses: Delestrac et al. eq. 4, ``E = #accesses * eps + dE``).
* :func:`relative_linear_fit`: several regressors, relative residuals (work-group cost
  ``launch + n_wg (a + b lsize)``).
* :func:`power_law_fit`: ``P(n) = alpha * n**beta + delta`` (FlipFlop Algorithm 3, line 11) by
  variable projection: for a fixed ``beta`` the model is linear in ``alpha`` and ``delta``, so the
  residual is a function of ``beta`` alone, minimised by a grid search refined by golden section.
* :func:`find_plateaus`: piecewise-constant segmentation of a curve such as bandwidth (or
  latency) against working-set size, to find cache levels as plateaus separated by steps.
* :func:`join_fit`: the delay before a CPU runtime's other worker threads join a launch
  (:func:`join_time`).
* :func:`unrolled_group_size`: the largest work-group whose barriers a CPU runtime still compiles
  away (where a barrier stops costing the same in every group size).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def r_squared(y: Sequence[float] | np.ndarray, yhat: Sequence[float] | np.ndarray) -> float:
    """Coefficient of determination; 1.0 for a perfect fit of constant data."""
    y = np.asarray(y, dtype=np.float64)
    yhat = np.asarray(yhat, dtype=np.float64)
    ss_res = float(np.sum((y - yhat) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot <= 0.0:
        return 1.0 if ss_res <= 1e-24 * max(1.0, float(np.sum(y**2))) else 0.0
    return 1.0 - ss_res / ss_tot


@dataclass(frozen=True)
class LinearFit:
    slope: float
    intercept: float
    r2: float
    n: int

    def __call__(self, x: float) -> float:
        return self.slope * x + self.intercept


def linear_fit(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> LinearFit:
    """Least-squares line through ``(x, y)``; needs at least two distinct ``x``."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    if len(xa) < 2 or np.ptp(xa) == 0:
        raise ValueError("a line needs at least two distinct x values")
    xm, ym = xa.mean(), ya.mean()
    slope = float(np.sum((xa - xm) * (ya - ym)) / np.sum((xa - xm) ** 2))
    intercept = float(ym - slope * xm)
    return LinearFit(slope, intercept, r_squared(ya, slope * xa + intercept), len(xa))


@dataclass(frozen=True)
class MultiFit:
    """``y = coef . x + intercept`` over several regressors."""

    coef: tuple[float, ...]
    intercept: float
    r2: float
    n: int


def relative_linear_fit(x: Sequence[Sequence[float]] | np.ndarray, y: Sequence[float] | np.ndarray) -> MultiFit:
    """Least squares ``y = intercept + sum_j coef_j x_j`` minimising the *relative* residuals
    ``(y - yhat) / y`` (weights ``1 / y``), so that points of microseconds and of milliseconds
    count alike (timings whose noise is a share of the time); ``r2`` is that of the
    unweighted residuals. ``x`` has one row per point."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.ndim != 2 or ya.ndim != 1 or len(xa) != len(ya):
        raise ValueError("x must be points x regressors and y one value per point")
    if np.any(ya <= 0) or np.any(~np.isfinite(ya)):
        raise ValueError("a relative fit needs positive finite y")
    a = np.column_stack([np.ones(len(ya)), xa])
    if len(ya) < a.shape[1] or np.linalg.matrix_rank(a) < a.shape[1]:
        raise ValueError("the regressors do not determine the fit (too few or collinear points)")
    w = 1.0 / ya
    sol, *_ = np.linalg.lstsq(a * w[:, None], ya * w, rcond=None)
    return MultiFit(tuple(float(c) for c in sol[1:]), float(sol[0]), r_squared(ya, a @ sol), len(ya))


@dataclass(frozen=True)
class PowerLawFit:
    """``alpha * n**beta + delta``."""

    alpha: float
    beta: float
    delta: float
    r2: float
    n: int

    def __call__(self, n: float | np.ndarray) -> float | np.ndarray:
        return self.alpha * np.power(n, self.beta) + self.delta


def _solve_alpha_delta(xa: np.ndarray, ya: np.ndarray, beta: float) -> tuple[float, float, float]:
    """Best (alpha, delta) for a fixed beta, and the residual sum of squares."""
    f = np.power(xa, beta)
    fm, ym = f.mean(), ya.mean()
    var = float(np.sum((f - fm) ** 2))
    if var <= 0:
        return 0.0, float(ym), float(np.sum((ya - ym) ** 2))
    alpha = float(np.sum((f - fm) * (ya - ym)) / var)
    delta = float(ym - alpha * fm)
    res = float(np.sum((ya - alpha * f - delta) ** 2))
    return alpha, delta, res


def power_law_fit(n: Sequence[float] | np.ndarray, p: Sequence[float] | np.ndarray, *,
                  beta_range: tuple[float, float] = (0.02, 4.0), grid: int = 400) -> PowerLawFit:
    """Fit ``p = alpha * n**beta + delta`` (``n > 0``) by variable projection over ``beta``."""
    xa = np.asarray(n, dtype=np.float64)
    ya = np.asarray(p, dtype=np.float64)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError("n and p must be 1-D arrays of the same length")
    if np.any(xa <= 0):
        raise ValueError("a power law needs n > 0")
    if len(np.unique(xa)) < 3:
        raise ValueError("a power law with an offset needs at least three distinct n")
    lo, hi = beta_range
    betas = np.linspace(lo, hi, grid)
    res = np.array([_solve_alpha_delta(xa, ya, b)[2] for b in betas])
    i = int(np.argmin(res))
    a, b = betas[max(i - 1, 0)], betas[min(i + 1, grid - 1)]
    # golden-section refinement inside the bracket around the best grid point
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = _solve_alpha_delta(xa, ya, c)[2], _solve_alpha_delta(xa, ya, d)[2]
    for _ in range(80):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = _solve_alpha_delta(xa, ya, c)[2]
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = _solve_alpha_delta(xa, ya, d)[2]
    beta = (a + b) / 2.0
    if _solve_alpha_delta(xa, ya, beta)[2] > res[i]:
        beta = float(betas[i])
    alpha, delta, _ = _solve_alpha_delta(xa, ya, beta)
    return PowerLawFit(alpha, float(beta), delta, r_squared(ya, alpha * np.power(xa, beta) + delta), len(xa))


# ---------------------------------------------------------------------------------------------
# plateaus


@dataclass(frozen=True)
class Plateau:
    """A run of consecutive points at about the same level."""

    x_lo: float          # smallest x in the plateau
    x_hi: float          # largest x in the plateau
    value: float         # median y
    n_points: int
    first: int           # index of the first point
    last: int            # index of the last point (inclusive)

    @property
    def x_mid(self) -> float:
        """Geometric middle of the plateau's x range."""
        return math.sqrt(self.x_lo * self.x_hi)


def _segment_dp(v: np.ndarray, penalty: float) -> list[tuple[int, int]]:
    """Optimal partition of ``v`` into contiguous segments minimising SSE + penalty per segment."""
    n = len(v)
    c1 = np.concatenate([[0.0], np.cumsum(v)])
    c2 = np.concatenate([[0.0], np.cumsum(v * v)])

    def sse(i: int, j: int) -> float:  # points i..j-1
        s, s2, m = c1[j] - c1[i], c2[j] - c2[i], j - i
        return float(s2 - s * s / m)

    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    prev = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + sse(i, j) + penalty
            if c < best[j]:
                best[j], prev[j] = c, i
    segs: list[tuple[int, int]] = []
    j = n
    while j > 0:
        segs.append((int(prev[j]), j))
        j = int(prev[j])
    return segs[::-1]


def find_plateaus(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, *,
                  min_step: float = 1.25, min_points: int = 2, decreasing: bool = True,
                  keep_last: bool = True, smooth: bool = True) -> list[Plateau]:
    """Plateaus of ``y`` (positive) against increasing ``x``, for cache-level detection.

    The curve (with ``smooth``, its 3-point running median) is segmented in log space (a jump
    of ``min_step`` between two single points is worth a new segment); adjacent segments whose
    medians differ by less than ``min_step`` are merged; segments of fewer than ``min_points``
    points are transitions between levels and are dropped (except the last one when
    ``keep_last``: the largest working sets are the main memory level even if only one point got
    there). Finally the levels must be monotone (``decreasing`` for bandwidth, increasing for
    latency): a segment that breaks the order of the level after it is merged into that level
    (noise around it, or small working sets whose bandwidth is limited by too few work-items
    rather than by a cache). Plateau values are medians of the raw points.
    """
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    if xa.shape != ya.shape or xa.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    if len(xa) == 0:
        return []
    if np.any(ya <= 0) or np.any(~np.isfinite(ya)):
        raise ValueError("plateau detection needs positive finite values")
    order = np.argsort(xa, kind="stable")
    xa, ya = xa[order], ya[order]
    v = np.log(ya)
    # segment a 3-point running median (isolated outliers vanish, steps stay sharp); the levels
    # reported are medians of the raw points
    vs = v.copy()
    if smooth and len(v) >= 3:
        vs[1:-1] = np.median(np.stack([v[:-2], v[1:-1], v[2:]]), axis=0)
    step = math.log(min_step)
    segs = _segment_dp(vs, penalty=step * step / 2.0)

    def med(seg: tuple[int, int]) -> float:
        return float(np.median(v[seg[0]:seg[1]]))

    def merge_close(ss: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Merge neighbours closer than min_step, closest pair first (spanning any points between)."""
        ss = list(ss)
        while len(ss) > 1:
            gaps = [abs(med(ss[i]) - med(ss[i + 1])) for i in range(len(ss) - 1)]
            i = int(np.argmin(gaps))
            if gaps[i] >= step:
                break
            ss[i:i + 2] = [(ss[i][0], ss[i + 1][1])]
        return ss

    segs = merge_close(segs)
    kept = merge_close([s for k, s in enumerate(segs)
                        if s[1] - s[0] >= min_points or (keep_last and k == len(segs) - 1)])
    # monotone levels, scanning from the largest working sets down: a segment out of order
    # with the level after it is noise around that level and is merged into it
    mono: list[tuple[int, int]] = []
    for s in reversed(kept):
        if mono:
            ok = med(s) > med(mono[-1]) if decreasing else med(s) < med(mono[-1])
            if not ok:
                mono[-1] = (s[0], mono[-1][1])
                continue
        mono.append(s)
    mono = merge_close(mono[::-1])
    return [Plateau(float(xa[i]), float(xa[j - 1]), float(np.exp(med((i, j)))), j - i, int(i), int(j - 1))
            for i, j in mono]


def join_time(work: Any, join: float, units: float, groups: Any) -> np.ndarray:
    """Time of a launch of ``work`` (seconds of one compute unit, launch cost excluded) split into
    ``groups`` equal work-groups on ``units`` compute units when the others join the first one only
    after ``join``: the first unit runs alone until then, and a work-group a late unit takes still
    runs whole, so ``min(work, max(join + (work - join) / active, join + work / groups))`` with
    ``active = min(groups, units)``; ``work`` where one unit finishes everything before anyone joins,
    or where there is one work-group."""
    w = np.asarray(work, dtype=np.float64)
    g = np.maximum(np.asarray(groups, dtype=np.float64), 1.0)
    active = np.minimum(g, float(units))
    shared = np.maximum(join + (w - join) / active, join + w / g)
    return np.where(active > 1, np.minimum(w, shared), w)


def join_fit(work: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray, units: float,
             groups: float, steps: int = 2000) -> tuple[float, float]:
    """The join delay (:func:`join_time`) that fits launches of one-unit ``work`` measured at
    ``measured`` (both launch cost excluded; ``groups`` work-groups on ``units`` compute units)
    best in relative terms: a grid search over ``[0, max(work)]`` minimising the sum of squared
    ``log(predicted / measured)``. Returns the delay and the root-mean-square log error."""
    w = np.asarray(work, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    ok = np.isfinite(w) & np.isfinite(m) & (w > 0) & (m > 0)
    if ok.sum() < 2:
        raise ValueError(f"{int(ok.sum())} usable point(s); the join delay needs at least 2")
    w, m = w[ok], m[ok]
    grid = np.linspace(0.0, float(w.max()), steps + 1)
    err = [float(np.mean(np.log(join_time(w, j, units, groups) / m) ** 2)) for j in grid]
    best = int(np.argmin(err))
    return float(grid[best]), float(math.sqrt(err[best]))


#: a barrier whose cost per work-group stays within this factor of its cost in the smallest group
#: costs the same in those groups (flat): the group's work-items run its region side by side
UNROLL_FLAT = 1.5
#: ... and is unrolled away only when it is at least this many times below the line through the
#: larger groups' costs (a barrier with a large per-group cost is flat in small groups too)
UNROLL_BELOW = 2.0


def flat_run(cost: Sequence[float] | np.ndarray, flat: float = UNROLL_FLAT) -> int:
    """How many of the leading ``cost`` values (by ascending group size) stay within ``flat`` times
    the first (at least 1; 0 for an empty or non-positive first cost)."""
    y = np.asarray(cost, dtype=np.float64)
    if not len(y) or not y[0] > 0:
        return 0
    n = 1
    while n < len(y) and y[n] <= flat * y[0]:
        n += 1
    return n


def unrolled_group_size(sizes: Sequence[float] | np.ndarray, cost: Sequence[float] | np.ndarray,
                        flat: float = UNROLL_FLAT, below: float = UNROLL_BELOW) -> float:
    """The largest work-group size (of ``sizes``, ascending) whose barriers a CPU runtime unrolls
    away, from the ``cost`` per barrier per work-group at each size: the last of the leading sizes
    whose cost is flat (:func:`flat_run`), when it is at least ``below`` times under the line
    through the costs of the larger sizes. A runtime that unrolls the work-item loop of a small
    group into straight-line code runs the group's work-items side by side, so a barrier there
    costs the region's latency whatever the group's size; above it each barrier is a pass over the
    group's work-items (PoCL 3.1 on a 2-core x86-64 CPU, one update per region: 1.0, 1.0, 1.1 ns in groups of 8,
    16, 32, then 40-75 ns in 64, on a line of 0.6-0.9 ns per work-item). 0 unless at least the two
    smallest sizes are flat and two larger ones give the line."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(cost, dtype=np.float64)
    if len(x) != len(y):
        raise ValueError(f"{len(x)} sizes and {len(y)} costs")
    if not np.all(np.diff(x) > 0):
        return 0.0
    n = flat_run(y, flat)
    if n < 2 or len(x) - n < 2:
        return 0.0
    fit = linear_fit(x[n:], y[n:])
    return float(x[n - 1]) if y[n - 1] * below <= fit.slope * x[n - 1] + fit.intercept else 0.0

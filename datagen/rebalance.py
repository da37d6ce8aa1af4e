"""IQR rebalancing of the execution-time distribution (LLMPerf II-B3, "Handling data imbalance").

After the first sampling pass, the times of one (kernel, local size) are usually bunched at the
small end with a few long ones (LLMPerf Figure 1a). LLMPerf fits a linear regression of time on
``N_WG``, estimates with the interquartile range which time ranges the sample is missing, and
samples the ``N_WG`` values the regression maps into them. The paper gives no formula; this is
the one implemented here:

1. Fit ``t = a * N_WG + b`` by least squares over the ok rows (at least 4, slope > 0).
2. Histogram the times with the Freedman-Diaconis bin width ``2 * IQR / n^(1/3)`` (the IQR sets
   the resolution; the bin count is clipped to [4, 30]) over ``[t_min, t_max]``.
3. A uniform spread of ``n + E`` points would put ``u = (n + E) / B`` in each bin; bins holding
   fewer than ``u`` are the missing ranges. The budget ``E = ceil(extra * n)`` (``extra`` defaults
   to 0.75: LLMPerf grew 230K rows to 400K) is shared between them in proportion to their deficit.
4. Target times are drawn uniformly inside each missing bin, mapped to ``N_WG = (t - b) / a``,
   rounded, clipped to ``[1, max_nwg]``, and values already measured are dropped.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np


@dataclass
class RebalancePlan:
    slope: float
    intercept: float
    r2: float
    bins: list[float]
    counts: list[int]
    deficits: list[float]
    new_nwg: list[int]
    reason: str = ""


def plan_rebalance(n_wg: list[int], times_us: list[float], rng: random.Random, *, extra: float = 0.75,
                   max_nwg: int = 1 << 20) -> RebalancePlan:
    """The new work-group counts to measure for one (kernel, local size)."""
    x = np.asarray(n_wg, dtype=np.float64)
    t = np.asarray(times_us, dtype=np.float64)
    empty = RebalancePlan(0.0, 0.0, 0.0, [], [], [], [])
    if len(t) < 4:
        empty.reason = f"only {len(t)} measured points"
        return empty
    A = np.vstack([x, np.ones_like(x)]).T
    (a, b), *_ = np.linalg.lstsq(A, t, rcond=None)
    pred = a * x + b
    ss_res = float(((t - pred) ** 2).sum())
    ss_tot = float(((t - t.mean()) ** 2).sum())
    r2 = 1 - ss_res / ss_tot if ss_tot > 0 else 0.0
    if not a > 0:
        empty.slope, empty.intercept, empty.r2 = float(a), float(b), r2
        empty.reason = "time does not grow with N_WG"
        return empty
    q1, q3 = np.percentile(t, [25, 75])
    iqr = q3 - q1
    lo, hi = float(t.min()), float(t.max())
    if hi <= lo:
        empty.reason = "all times equal"
        return empty
    width = 2 * iqr / len(t) ** (1 / 3) if iqr > 0 else (hi - lo) / 4
    n_bins = int(min(30, max(4, math.ceil((hi - lo) / width))))
    edges = np.linspace(lo, hi, n_bins + 1)
    counts, _ = np.histogram(t, bins=edges)
    budget = math.ceil(extra * len(t))
    u = (len(t) + budget) / n_bins
    deficits = np.maximum(0.0, u - counts)
    plan = RebalancePlan(float(a), float(b), r2, edges.tolist(), counts.tolist(), deficits.tolist(), [])
    if deficits.sum() <= 0:
        plan.reason = "already balanced"
        return plan
    alloc = np.floor(budget * deficits / deficits.sum()).astype(int)
    rest = budget - int(alloc.sum())
    order = np.argsort(-(budget * deficits / deficits.sum() - alloc))
    for i in order[:rest]:
        alloc[i] += 1
    have = {int(v) for v in x}
    new: list[int] = []
    for i, k in enumerate(alloc):
        for _ in range(int(k)):
            target = rng.uniform(edges[i], edges[i + 1])
            v = int(round((target - b) / a))
            v = min(max(v, 1), max_nwg)
            if v not in have:
                have.add(v)
                new.append(v)
    plan.new_nwg = sorted(new)
    if not new:
        plan.reason = "the regression maps the missing ranges onto measured N_WG"
    return plan

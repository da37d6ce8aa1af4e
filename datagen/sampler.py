"""Launch-configuration sampling (LLMPerf II-B3).

For each kernel, local sizes are random multiples of the device's preferred work-group multiple
(the warp/wavefront width) in ``[warp, max work-group size]``. For each local size, the number of
work-groups ``N_WG`` is drawn from three regimes relative to the device's compute units ``N_CU``:

* idle: ``1 <= N_WG < N_CU`` (not every compute unit has work),
* under-utilized: ``N_CU <= N_WG <= k * N_CU``,
* fully utilized: ``k * N_CU < N_WG <= max_nwg``,

in the ratio 25:60:15, and ``gsize = N_WG * lsize``. ``k`` defaults to 80, the value LLMPerf used
for its datasets (section IV-A; its section II-B3 argues for "e.g. 40"). ``max_nwg`` is bounded by
``max_total_items`` (default 2^24 work-items) so one configuration cannot run for minutes.

Where a regime is empty (a device with one compute unit has no idle regime) its share goes to the
under-utilized regime. 2D/3D kernels get block shapes whose product follows the same rules, and
a work-group grid whose product is the sampled ``N_WG``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

REGIMES = ("idle", "under", "full")
DEFAULT_RATIO = (25, 60, 15)
DEFAULT_K = 80
DEFAULT_MAX_TOTAL_ITEMS = 1 << 24


@dataclass(frozen=True)
class DeviceLimits:
    """The device facts sampling needs (all queried from the device)."""

    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    warp: int

    @classmethod
    def from_device(cls, info: object) -> DeviceLimits:
        return cls(
            compute_units=int(info.compute_units),  # type: ignore[attr-defined]
            max_work_group_size=int(info.max_work_group_size),  # type: ignore[attr-defined]
            max_work_item_sizes=tuple(int(x) for x in info.max_work_item_sizes),  # type: ignore[attr-defined]
            warp=int(info.preferred_wg_multiple or 1),  # type: ignore[attr-defined]
        )


@dataclass(frozen=True)
class SampledConfig:
    gsize: tuple[int, ...]
    lsize: tuple[int, ...]
    n_wg: int
    regime: str


def regime_of(n_wg: int, n_cu: int, k: float) -> str:
    if n_wg < n_cu:
        return "idle"
    if n_wg <= k * n_cu:
        return "under"
    return "full"


def sample_lsizes(rng: random.Random, limits: DeviceLimits, count: int, dims: int = 1,
                  max_wg: int | None = None) -> list[tuple[int, ...]]:
    """``count`` distinct local sizes (as many as exist if fewer); products are multiples of the
    warp in ``[warp, max work-group size]``."""
    top = min(limits.max_work_group_size, max_wg or limits.max_work_group_size)
    warp = max(1, limits.warp)
    multiples = list(range(warp, top + 1, warp)) or [top]
    out: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    attempts = 0
    while len(out) < count and attempts < 50 * count:
        attempts += 1
        total = rng.choice(multiples)
        shape = _shape_for(rng, total, dims, limits.max_work_item_sizes)
        if shape is None or shape in seen:
            continue
        seen.add(shape)
        out.append(shape)
    return out


def _shape_for(rng: random.Random, total: int, dims: int, max_items: tuple[int, ...]) -> tuple[int, ...] | None:
    """A block shape of ``dims`` dimensions whose product is ``total`` (power-of-two splits of
    the x dimension so realistic shapes such as 16x16 or 32x8 come out)."""
    if dims == 1:
        return (total,) if total <= max_items[0] else None
    dims_left = [total] + [1] * (dims - 1)
    # move factors of two from x to y (and z) at random
    for d in range(1, dims):
        twos = 0
        x = dims_left[0]
        while x % 2 == 0 and x > 1:
            x //= 2
            twos += 1
        take = rng.randint(0, twos)
        dims_left[0] //= 2 ** take
        dims_left[d] *= 2 ** take
    shape = tuple(dims_left)
    if any(s > m for s, m in zip(shape, max_items)):
        return None
    return shape


def regime_bounds(limits: DeviceLimits, k: float, max_nwg: int) -> dict[str, tuple[int, int]]:
    n_cu = limits.compute_units
    bounds = {
        "idle": (1, n_cu - 1),
        "under": (n_cu, min(int(k * n_cu), max_nwg)),
        "full": (int(k * n_cu) + 1, max_nwg),
    }
    return {r: b for r, b in bounds.items() if b[0] <= b[1]}


def sample_nwg(rng: random.Random, limits: DeviceLimits, count: int, k: float = DEFAULT_K,
               ratio: tuple[int, int, int] = DEFAULT_RATIO, max_nwg: int = 1 << 20) -> list[tuple[int, str]]:
    """``count`` work-group counts with their regimes, in the given ratio (largest remainders).

    Within a regime values are log-uniform (so small counts, where behaviour changes fastest, are
    not starved), and distinct where the regime has enough values."""
    bounds = regime_bounds(limits, k, max_nwg)
    shares = {r: w for r, w in zip(REGIMES, ratio) if r in bounds}
    missing = sum(w for r, w in zip(REGIMES, ratio) if r not in bounds)
    if missing and "under" in shares:
        shares["under"] += missing
    elif missing and shares:
        first = next(iter(shares))
        shares[first] += missing
    if not shares:
        return []
    total_w = sum(shares.values())
    raw = {r: count * w / total_w for r, w in shares.items()}
    alloc = {r: int(math.floor(v)) for r, v in raw.items()}
    for r in sorted(raw, key=lambda r: raw[r] - alloc[r], reverse=True)[: count - sum(alloc.values())]:
        alloc[r] += 1
    out: list[tuple[int, str]] = []
    for r, n in alloc.items():
        lo, hi = bounds[r]
        values = _distinct_log_uniform(rng, lo, hi, n)
        out += [(v, r) for v in values]
    rng.shuffle(out)
    return out


def _distinct_log_uniform(rng: random.Random, lo: int, hi: int, n: int) -> list[int]:
    span = hi - lo + 1
    if n >= span:
        vals = list(range(lo, hi + 1))
        return [vals[i % span] for i in range(n)] if span else []
    seen: set[int] = set()
    out: list[int] = []
    tries = 0
    while len(out) < n and tries < 100 * n:
        tries += 1
        v = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))
        v = min(max(v, lo), hi)
        if v not in seen:
            seen.add(v)
            out.append(v)
    while len(out) < n:  # dense fallback
        v = rng.randint(lo, hi)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def grid_for(rng: random.Random, n_wg: int, dims: int) -> tuple[int, ...]:
    """A work-group grid of ``dims`` dimensions whose product is exactly ``n_wg``."""
    if dims == 1:
        return (n_wg,)
    factors = _prime_factors(n_wg)
    grid = [1] * dims
    for f in factors:
        grid[rng.randrange(dims)] *= f
    return tuple(grid)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def sample_configs(rng: random.Random, limits: DeviceLimits, dims: int, n_lsizes: int, per_lsize: int,
                   k: float = DEFAULT_K, ratio: tuple[int, int, int] = DEFAULT_RATIO,
                   max_total_items: int = DEFAULT_MAX_TOTAL_ITEMS, max_wg: int | None = None,
                   extra: int = 0) -> list[SampledConfig]:
    """``n_lsizes`` local sizes x ``per_lsize`` work-group counts (LLMPerf: 4 x 50 = 200), then
    ``extra`` more, one for each of the first ``extra`` local sizes (the remainder when the
    configurations asked for are not a multiple of the local sizes). The extras are drawn after
    the others, so the first ``n_lsizes x per_lsize`` do not depend on them (a dataset made
    without them resumes unchanged)."""
    out: list[SampledConfig] = []
    lsizes = sample_lsizes(rng, limits, n_lsizes, dims, max_wg)

    def add(lsize: tuple[int, ...], count: int) -> None:
        max_nwg = max(1, max_total_items // math.prod(lsize))
        for n_wg, regime in sample_nwg(rng, limits, count, k, ratio, max_nwg):
            grid = grid_for(rng, n_wg, dims)
            out.append(SampledConfig(tuple(g * loc for g, loc in zip(grid, lsize)), lsize, n_wg, regime))

    for lsize in lsizes:
        add(lsize, per_lsize)
    for lsize in lsizes[:max(0, extra)]:
        add(lsize, 1)
    return out


# ---------------------------------------------------------------------------------------------
# tuning sweeps


@dataclass(frozen=True)
class SweepConfig:
    """One configuration of a tuning sweep: sweep ``sweep`` of a kernel measures one problem
    (global size ``gsize``) with several local sizes / block shapes."""

    gsize: tuple[int, ...]
    lsize: tuple[int, ...]
    n_wg: int
    regime: str
    sweep: int


def _power_shapes(limits: DeviceLimits, dims: int, max_wg: int | None = None) -> list[tuple[int, ...]]:
    """Every block shape of power-of-two sides whose product is a multiple of the warp in
    ``[warp, max work-group size]`` and whose sides fit the device (bounded: at most 13 sides
    per dimension are tried)."""
    top = min(limits.max_work_group_size, max_wg or limits.max_work_group_size)
    warp = max(1, limits.warp)
    sides = [[1 << i for i in range(13) if (1 << i) <= min(top, m)] for m in limits.max_work_item_sizes[:dims]]
    shapes: list[tuple[int, ...]] = [()]
    for d in range(dims):
        shapes = [(*s, v) for s in shapes for v in sides[d]]
    return [s for s in shapes if warp <= math.prod(s) <= top and math.prod(s) % warp == 0]


def sample_sweeps(rng: random.Random, limits: DeviceLimits, dims: int, n_sweeps: int, lsizes_per_sweep: int,
                  k: float = DEFAULT_K, ratio: tuple[int, int, int] = DEFAULT_RATIO,
                  max_total_items: int = DEFAULT_MAX_TOTAL_ITEMS, max_wg: int | None = None) -> list[SweepConfig]:
    """``n_sweeps`` problems, each measured with ``lsizes_per_sweep`` local sizes (fewer only when
    fewer block shapes divide the problem on this device).

    Per sweep: a reference block shape of power-of-two sides (product a multiple of the warp) is
    drawn, its number of work-groups is drawn by the regime sampler (the sweeps of a kernel cycle
    through idle / under-utilized / fully-utilized in ``ratio``), and the global size is that grid
    times the shape; the other shapes are drawn among those that divide the global size in every
    dimension. A draw that leaves fewer than ``lsizes_per_sweep`` dividing shapes is retried (up to
    20 times) and the best one kept. The regime recorded per row is that of the row's own
    work-group count."""
    if n_sweeps < 1 or lsizes_per_sweep < 1:
        return []
    shapes = _power_shapes(limits, dims, max_wg)
    if not shapes:
        return []
    out: list[SweepConfig] = []
    for s in range(n_sweeps):
        regime_ratio = _regime_for_sweep(s, ratio)
        best: tuple[tuple[int, ...], list[tuple[int, ...]]] | None = None
        for _ in range(20):
            ref = rng.choice(shapes)
            max_nwg = max(1, max_total_items // math.prod(ref))
            drawn = sample_nwg(rng, limits, 1, k, regime_ratio, max_nwg)
            n_wg = drawn[0][0] if drawn else 1
            gsize = tuple(g * r for g, r in zip(grid_for(rng, n_wg, dims), ref))
            fits = [sh for sh in shapes if sh != ref and all(g % v == 0 for g, v in zip(gsize, sh))]
            pick = [ref, *rng.sample(fits, min(lsizes_per_sweep - 1, len(fits)))]
            if best is None or len(pick) > len(best[1]):
                best = (gsize, pick)
            if len(pick) >= lsizes_per_sweep:
                break
        assert best is not None
        gsize, pick = best
        total = math.prod(gsize)
        for lsize in sorted(pick, key=lambda sh: (math.prod(sh), sh)):
            nwg = total // math.prod(lsize)
            out.append(SweepConfig(gsize, lsize, nwg, regime_of(nwg, limits.compute_units, k), s))
    return out


def _regime_for_sweep(index: int, ratio: tuple[int, int, int]) -> tuple[int, int, int]:
    """A one-hot ratio naming the regime of sweep ``index``: the sweeps of a kernel cycle through
    the regimes in proportion to ``ratio`` (largest-remainder order over a cycle of 20)."""
    total = sum(ratio) or 1
    cycle: list[int] = []
    for r, w in enumerate(ratio):
        cycle += [r] * round(20 * w / total)
    cycle = cycle or [1]
    # interleave so the first few sweeps already cover the regimes: under, idle, full, under, ...
    order = sorted(range(len(cycle)), key=lambda i: (cycle[:i + 1].count(cycle[i]) / max(1, cycle.count(cycle[i])),
                                                     -ratio[cycle[i]]))
    r = cycle[order[index % len(cycle)]]
    return tuple(1 if i == r else 0 for i in range(3))  # type: ignore[return-value]

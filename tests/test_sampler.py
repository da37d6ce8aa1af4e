from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from kernelcast.datagen.rebalance import plan_rebalance
from kernelcast.datagen.sampler import DeviceLimits, regime_of, sample_configs, sample_lsizes, sample_nwg

GPU = DeviceLimits(compute_units=80, max_work_group_size=1024, max_work_item_sizes=(1024, 1024, 64), warp=32)
CPU = DeviceLimits(compute_units=2, max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096), warp=8)


@pytest.mark.parametrize("limits", [GPU, CPU])
def test_lsizes_are_warp_multiples_within_limits(limits):
    for dims in (1, 2, 3):
        shapes = sample_lsizes(random.Random(1), limits, 20, dims)
        assert len(shapes) == 20 and len(set(shapes)) == 20
        for s in shapes:
            assert len(s) == dims
            total = math.prod(s)
            assert total % limits.warp == 0 and limits.warp <= total <= limits.max_work_group_size
            assert all(x <= m for x, m in zip(s, limits.max_work_item_sizes))


def test_regime_ratio_25_60_15():
    out = sample_nwg(random.Random(0), GPU, 200, k=40, max_nwg=1 << 16)
    c = Counter(r for _, r in out)
    assert c == {"idle": 50, "under": 120, "full": 30}
    for n, r in out:
        assert regime_of(n, GPU.compute_units, 40) == r
    assert all(1 <= n < 80 for n, r in out if r == "idle")
    assert all(80 <= n <= 3200 for n, r in out if r == "under")
    assert all(3200 < n <= 1 << 16 for n, r in out if r == "full")


def test_empty_idle_regime_goes_to_under():
    one = DeviceLimits(1, 256, (256, 256, 256), 32)
    c = Counter(r for _, r in sample_nwg(random.Random(0), one, 100, k=10, max_nwg=10000))
    assert c == {"under": 85, "full": 15}


def test_configs_gsize_is_nwg_times_lsize_in_every_dimension():
    cfgs = sample_configs(random.Random(3), GPU, 2, n_lsizes=4, per_lsize=50, k=40)
    assert len(cfgs) == 200 and len({c.lsize for c in cfgs}) == 4
    for c in cfgs:
        assert all(g % loc == 0 for g, loc in zip(c.gsize, c.lsize))
        assert math.prod(g // loc for g, loc in zip(c.gsize, c.lsize)) == c.n_wg
        assert math.prod(c.gsize) <= 1 << 24


def test_sampling_is_deterministic():
    a = sample_configs(random.Random(9), CPU, 1, 4, 50)
    b = sample_configs(random.Random(9), CPU, 1, 4, 50)
    assert a == b


def test_iqr_rebalance_fills_the_missing_time_ranges():
    rng = random.Random(0)
    # most samples at small N_WG (short times), few long ones: LLMPerf Figure 1a
    nwg = sorted({rng.randint(1, 60) for _ in range(40)} | {400, 800, 1000})
    times = [5.0 + 2.0 * n for n in nwg]
    plan = plan_rebalance(nwg, times, random.Random(1), extra=0.75, max_nwg=1000)
    assert plan.slope == pytest.approx(2.0) and plan.intercept == pytest.approx(5.0)
    assert plan.r2 == pytest.approx(1.0)
    # the budget is ceil(0.75 n) new points; a draw that lands on an N_WG already taken is dropped
    assert 0.5 * len(nwg) < len(plan.new_nwg) <= math.ceil(0.75 * len(nwg))
    assert not set(plan.new_nwg) & set(nwg)
    assert all(1 <= n <= 1000 for n in plan.new_nwg)
    # the new points land where the sample had none: mostly between 60 and 1000 work-groups
    assert sum(60 < n for n in plan.new_nwg) >= 0.8 * len(plan.new_nwg)
    after = times + [5.0 + 2.0 * n for n in plan.new_nwg]
    import numpy as np

    def spread(t):  # share of points above the midpoint of the time range
        t = np.asarray(t)
        return float((t > (t.min() + t.max()) / 2).mean())

    assert spread(after) > 2 * spread(times)


def test_iqr_rebalance_declines_without_signal():
    assert plan_rebalance([1, 2], [1.0, 2.0], random.Random(0)).reason
    flat = plan_rebalance([1, 2, 3, 4, 5], [9.0, 7.0, 5.0, 3.0, 1.0], random.Random(0))
    assert flat.reason == "time does not grow with N_WG" and not flat.new_nwg


@pytest.mark.parametrize("limits", [GPU, CPU])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_sweeps_share_a_problem_and_vary_the_block_shape(limits, dims):
    from kernelcast.datagen.sampler import sample_sweeps

    sweeps = sample_sweeps(random.Random(3), limits, dims, 10, 4)
    assert sweeps == sample_sweeps(random.Random(3), limits, dims, 10, 4)       # seeded
    by = {}
    for c in sweeps:
        by.setdefault(c.sweep, []).append(c)
    assert sorted(by) == list(range(10))
    for group in by.values():
        assert len(group) == 4                                   # >= 4 shapes divide every problem here
        assert len({c.gsize for c in group}) == 1 and len({c.lsize for c in group}) == 4
        for c in group:
            total = math.prod(c.lsize)
            assert all(g % loc == 0 for g, loc in zip(c.gsize, c.lsize))
            assert total % limits.warp == 0 and total <= limits.max_work_group_size
            assert all(x <= m for x, m in zip(c.lsize, limits.max_work_item_sizes))
            assert math.prod(c.gsize) == c.n_wg * total <= 1 << 24
            assert c.regime == regime_of(c.n_wg, limits.compute_units, 80)
    # the problems spread over the regimes of their reference work-group count: not all in one
    assert len({c.gsize for c in sweeps}) == 10


def test_sweeps_on_a_device_with_few_shapes():
    tiny = DeviceLimits(compute_units=1, max_work_group_size=16, max_work_item_sizes=(16,), warp=8)
    from kernelcast.datagen.sampler import sample_sweeps

    sweeps = sample_sweeps(random.Random(0), tiny, 1, 3, 4)
    assert {c.lsize for c in sweeps} <= {(8,), (16,)}            # only two shapes exist: as many as allowed
    assert all(len([c for c in sweeps if c.sweep == s]) <= 2 for s in range(3))


def test_as_many_configurations_as_asked_and_the_first_ones_unchanged():
    # 8 over 3 local sizes: 2 each, and the remainder 2 to the first two local sizes
    base = sample_configs(random.Random(5), CPU, 1, 3, 2)
    more = sample_configs(random.Random(5), CPU, 1, 3, 2, extra=2)
    assert len(base) == 6 and len(more) == 8
    assert more[:6] == base                         # a dataset sampled without the extras resumes unchanged
    assert [c.lsize for c in more[6:]] == [more[0].lsize, more[2].lsize]
    # fewer configurations than local sizes: exactly that many
    assert len(sample_configs(random.Random(5), CPU, 1, 4, 0, extra=2)) == 2

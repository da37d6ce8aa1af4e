"""Kernel split and accuracy metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernelcast.train.split import split_by_kernel

from kernelcast.metrics import evaluate, mape, median_ape, spearman


def test_split_never_shares_a_kernel_and_is_deterministic():
    kernels = [f"k{i:03d}" for i in range(50)]
    rows = kernels * 7  # many rows per kernel, in any order
    train, val = split_by_kernel(rows, val_fraction=0.1, seed=4)
    assert not set(train) & set(val)
    assert set(train) | set(val) == set(kernels)
    assert len(val) == 5
    shuffled = list(np.random.default_rng(0).permutation(rows))
    assert split_by_kernel(shuffled, val_fraction=0.1, seed=4) == (train, val)
    assert split_by_kernel(rows, val_fraction=0.1, seed=5) != (train, val)


def test_split_small_sets():
    assert split_by_kernel(["a"], seed=0) == (["a"], [])
    train, val = split_by_kernel(["a", "b", "c"], seed=0)
    assert len(val) == 1 and len(train) == 2
    with pytest.raises(ValueError):
        split_by_kernel(["a"], val_fraction=1.0)


def test_mape_and_median_ape():
    pred = np.array([110.0, 90.0, 200.0])
    true = np.array([100.0, 100.0, 100.0])
    assert mape(pred, true) == pytest.approx(40.0)
    assert median_ape(pred, true) == pytest.approx(10.0)


def test_spearman_ties_and_degenerate_inputs():
    # by hand: ranks a = [1, 2.5, 2.5, 4], b = [1, 3, 2, 4]; rho = 4.5 / sqrt(4.5 * 5)
    assert spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman(np.array([1.0, 2, 3]), np.array([10.0, 200, 3000])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0)
    assert math.isnan(spearman(np.array([1.0, 1, 1]), np.array([1.0, 2, 3])))
    # non-finite pairs are left out; too few pairs left is NaN
    assert spearman(np.array([1.0, np.nan, 2, 3]), np.array([1.0, 5, 2, 3])) == pytest.approx(1.0)
    assert math.isnan(spearman(np.array([1.0, 2]), np.array([1.0, 2]), min_points=3))


def test_mape_leaves_out_rows_without_an_error():
    pred = np.array([110.0, np.nan, 50.0, 1.0])
    true = np.array([100.0, 100.0, 100.0, 0.0])
    assert mape(pred, true) == pytest.approx(30.0)
    assert median_ape(pred, true) == pytest.approx(30.0)
    assert math.isnan(mape(np.array([np.inf]), np.array([1.0])))


def test_evaluate_per_kernel():
    pred = np.array([110.0, 90.0, 200.0])
    true = np.array([100.0, 100.0, 100.0])
    m = evaluate(pred, true, ["a", "a", "b"], ["ka", "ka", "kb"])
    assert m["rows"] == 3 and m["kernels"] == 2
    assert m["mape"] == pytest.approx(40.0)
    assert m["mape_per_kernel"] == pytest.approx((10.0 + 100.0) / 2)
    assert m["per_kernel"]["a"] == {"rows": 2, "mape": pytest.approx(10.0), "name": "ka"}
    assert m["median_ape"] == pytest.approx(10.0)

"""The log-space blend: combination, fallback, save/load, and the choice among candidates."""

from __future__ import annotations

import numpy as np
import pytest

from models.blend import BlendWeights
from train.blend import fit_blend


def test_combine_is_a_weighted_geometric_mean_with_fallback():
    w = BlendWeights(0.5, 0.5, 0.0)
    out = w.combine(np.array([4.0, np.nan, 8.0]), np.array([16.0, 3.0, np.nan]))
    np.testing.assert_allclose(out, [8.0, 3.0, 8.0])       # sqrt(4 * 16); one model missing: the other
    np.testing.assert_allclose(BlendWeights(1, 0, 1).combine(np.array([5.0]), np.array([7.0])), [10.0])


def test_save_and_load_round_trip(tmp_path):
    w = BlendWeights(0.8, 0.3, -0.2, "least_squares", {"rows": 12})
    w.save(tmp_path)
    assert BlendWeights.load(tmp_path) == w
    assert BlendWeights.load(tmp_path / "none") is None


def test_fit_picks_the_exact_candidate():
    rng = np.random.default_rng(0)
    y = 2.0 ** rng.uniform(0, 10, 40)
    # the learned model is exact, the analytical one is off by 4x with noise: learned alone wins
    an = y * 4 * 2.0 ** rng.normal(0, 0.5, 40)
    w = fit_blend(an, y, y)
    assert w.kind in ("learned", "least_squares")
    np.testing.assert_allclose(w.combine(an, y), y, rtol=1e-6)
    assert w.validation["rows"] == 40


def test_least_squares_recovers_a_known_mix():
    rng = np.random.default_rng(1)
    an, le = 2.0 ** rng.uniform(0, 8, 50), 2.0 ** rng.uniform(0, 8, 50)
    y = 2.0 ** (0.25 * np.log2(an) + 0.75 * np.log2(le) + 1.0)
    w = fit_blend(an, le, y)
    assert w.kind == "least_squares"
    assert (w.a, w.b, w.c) == pytest.approx((0.25, 0.75, 1.0), abs=1e-9)

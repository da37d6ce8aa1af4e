"""The log-space blend: combination, fallback, save/load (and the version-1 file), the choice among
candidates on out-of-fold predictions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kernelcast.models.blend import BlendFileError, StackedBlend, single
from kernelcast.train.blend import LSQ_ROWS_PER_COEF, fit_stacked_blend, nonneg_least_squares

from kernelcast.metrics import median_abs_log2


def test_combine_is_a_weighted_geometric_mean_with_fallback():
    w = StackedBlend({"analytical": 0.5, "learned": 0.5}, 0.0, "geometric_mean", ["learned", "analytical"])
    out = w.combine({"analytical": np.array([4.0, np.nan, 8.0]), "learned": np.array([16.0, 3.0, np.nan])})
    np.testing.assert_allclose(out, [8.0, 3.0, 8.0])       # sqrt(4 * 16); one model missing: the other
    one = StackedBlend({"analytical": 1.0}, 1.0, "analytical+offset")
    np.testing.assert_allclose(one.combine({"analytical": np.array([5.0]), "learned": np.array([7.0])}), [10.0])
    assert single("learned", "analytical").combine({"analytical": np.array([2.0]),
                                                    "learned": np.array([np.nan])})[0] == 2.0


def test_save_and_load_round_trip(tmp_path):
    w = StackedBlend({"analytical": 0.8, "learned": 0.3}, -0.2, "least_squares", ["learned", "analytical"],
                     {"analytical": 1.0, "least_squares": 0.5}, rows=12, fitted={"folds": 5})
    w.save(tmp_path)
    assert StackedBlend.load(tmp_path) == w
    assert StackedBlend.load(tmp_path / "none") is None
    assert json.loads((tmp_path / "blend.json").read_text())["version"] == 2


def test_a_version_1_blend_is_read_as_the_same_formula(tmp_path):
    (tmp_path / "blend.json").write_text(json.dumps({"a": 1.0, "b": 0.5, "c": 1.0, "kind": "least_squares",
                                                     "validation": {"rows": 62}}))
    w = StackedBlend.load(tmp_path)
    assert w is not None and w.weights == {"analytical": 1.0, "learned": 0.5} and w.intercept == 1.0
    # log2 t = log2 4 + 0.5 log2 16 + 1 = 5
    assert w.combine({"analytical": np.array([4.0]), "learned": np.array([16.0])})[0] == pytest.approx(32.0)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", json.dumps({"kind_of_file": "kernelcast-blend",
                                                                      "version": 9})])
def test_a_damaged_blend_file_is_an_input_error_naming_it(tmp_path, text):
    (tmp_path / "blend.json").write_text(text)
    with pytest.raises(BlendFileError, match="blend.json"):
        StackedBlend.load(tmp_path)


def test_fit_picks_the_exact_model():
    rng = np.random.default_rng(0)
    y = 2.0 ** rng.uniform(0, 10, 40)
    # the learned model is exact, the analytical one is off by 4x with noise: learned alone wins
    an = y * 4 * 2.0 ** rng.normal(0, 0.5, 40)
    w = fit_stacked_blend({"analytical": an, "learned": y}, y)
    assert w.kind == "learned" and w.rows == 40
    np.testing.assert_allclose(w.combine({"analytical": an, "learned": y}), y)


def test_least_squares_recovers_a_known_mix_only_with_enough_rows():
    rng = np.random.default_rng(1)
    n = LSQ_ROWS_PER_COEF * 3
    an, le = 2.0 ** rng.uniform(0, 8, n), 2.0 ** rng.uniform(0, 8, n)
    y = 2.0 ** (0.25 * np.log2(an) + 0.75 * np.log2(le) + 1.0)
    w = fit_stacked_blend({"analytical": an, "learned": le}, y)
    assert w.kind == "least_squares"
    assert (w.weights["analytical"], w.weights["learned"], w.intercept) == pytest.approx((0.25, 0.75, 1.0), abs=1e-9)
    # too few rows per coefficient: no least-squares candidate (it would win by over-fitting)
    few = fit_stacked_blend({"analytical": an[:10], "learned": le[:10]}, y[:10])
    assert "least_squares" not in few.scores
    # whatever is chosen is never worse than the best single model on these rows
    best_single = min(few.scores["analytical"], few.scores["learned"])
    assert median_abs_log2(few.combine({"analytical": an[:10], "learned": le[:10]}), y[:10]) <= best_single


def test_least_squares_weights_are_never_negative():
    """Measured = 2 x learned / analytical^0.5: the unconstrained fit would weigh analytical -0.5.
    The blend's weights stay non-negative (analytical 0) with the intercept refitted, and a mix
    with positive weights is still recovered exactly."""
    rng = np.random.default_rng(3)
    la, ll = rng.uniform(0, 8, 200), rng.uniform(0, 8, 200)
    w, b = nonneg_least_squares(np.column_stack([la, ll]), ll - 0.5 * la + 1.0)
    assert w[0] == 0.0 and w[1] == pytest.approx(1.0, abs=0.05)
    assert b == pytest.approx(float(np.mean(ll - 0.5 * la + 1.0 - w[1] * ll)))
    w2, b2 = nonneg_least_squares(np.column_stack([la, ll]), 0.3 * la + 0.6 * ll + 2.0)
    assert (w2[0], w2[1], b2) == pytest.approx((0.3, 0.6, 2.0), abs=1e-9)


def test_models_the_groups_cannot_tell_apart_are_hedged():
    """Two models with errors of the same size but independent signs, group by group: neither beats
    the other beyond the standard errors, so the geometric mean replaces the better-scoring one.
    Where one model is better in every group it is kept."""
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(10), 12)
    y = 2.0 ** rng.uniform(0, 10, len(groups))
    ea, eb = rng.normal(0.0, 0.6, size=(2, len(groups)))
    a, b = y * 2.0 ** ea, y * 2.0 ** eb
    hedged = fit_stacked_blend({"a": a, "b": b}, y, groups=groups)
    assert hedged.kind == "geometric_mean" and hedged.anchor == "geometric_mean", hedged.scores
    assert fit_stacked_blend({"a": a, "b": b}, y).kind not in ("a", "b")      # without groups: by score
    clear = fit_stacked_blend({"a": a, "b": y * 2.0 ** (3 * eb)}, y, groups=groups)
    assert clear.kind == "a" and clear.anchor == "a"


def test_a_weighted_geometric_mean_is_a_candidate():
    """Measured = analytical**0.25 x learned**0.75 exactly, with too few rows for least squares:
    the weighted geometric-mean candidate reproduces it (score 0) and is chosen."""
    rng = np.random.default_rng(2)
    an, le = 2.0 ** rng.uniform(0, 8, 10), 2.0 ** rng.uniform(0, 8, 10)
    y = 2.0 ** (0.25 * np.log2(an) + 0.75 * np.log2(le))
    w = fit_stacked_blend({"analytical": an, "learned": le}, y)
    assert "least_squares" not in w.scores
    assert w.kind == "geometric_analytical_0.25" and w.weights == {"analytical": 0.25, "learned": 0.75}
    assert w.scores[w.kind] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(w.combine({"analytical": an, "learned": le}), y)
    assert "geometric_analytical_0.75" in w.scores


def test_with_groups_a_blend_must_beat_the_best_single_model_group_by_group():
    """Two models alike but in one kernel group, where their errors cancel: their blends are better
    overall because that group carries them, and worse in every other group. Without groups a blend
    is chosen; with groups the best single model is kept (the blend's gain is not beyond one
    standard error of the per-group differences). Where the errors cancel in every group, the
    geometric mean wins group by group and is chosen either way."""
    groups = np.repeat(np.arange(8), 10)
    y = 2.0 ** np.linspace(0, 8, 80)
    e = np.where(np.arange(80) % 2 == 0, 0.5, -0.5)
    a = y * 2.0 ** e
    b = np.where(groups == 0, y * 2.0 ** -e, y * 2.0 ** (1.1 * e))
    plain = fit_stacked_blend({"a": a, "b": b}, y, "mse_log2")
    assert plain.kind not in ("a", "b")
    grouped = fit_stacked_blend({"a": a, "b": b}, y, "mse_log2", groups=groups)
    assert grouped.kind == "a"
    b2 = y * 2.0 ** -e
    assert fit_stacked_blend({"a": a, "b": b2}, y, "mse_log2", groups=groups).kind == "geometric_mean"


def test_the_blend_command_says_why_a_lower_scoring_candidate_was_not_chosen():
    """The demo's CodeGen blend: the geometric mean scored 0.715 median |log2| against the learned
    model's 0.794 on 705 rows of 23 groups, and the learned model was chosen (the geometric mean did
    not beat it by BLEND_SE standard errors of the per-group difference). The output says so; when
    the chosen blend is the lowest-scoring candidate it says nothing more."""
    from kernelcast.train.report import format_blend

    fig = {"rows": 705, "median_ape": 50.0, "p90_ape": 200.0, "mape": 120.0, "within_2x_pct": 60.0,
           "median_abs_log2": 0.79}
    b = StackedBlend({"learned": 1.0}, 0.0, "learned")
    b.scores, b.criterion, b.rows, b.anchor = {"learned": 0.7944, "analytical": 0.7991, "geometric_mean": 0.7153}, \
        "median_abs_log2", 705, "learned"
    res = {"figures": {m: fig for m in ("analytical", "learned", "blend")}, "blend": b, "rows": 705, "kernels": 47,
           "groups": 23, "folds": 3, "learned_kind": "codegen", "path": "out/blend.json"}
    text = format_blend(res, "out")
    assert "blend chosen: learned" in text
    assert "(geometric_mean scored lower on these rows but did not beat learned by 2 standard errors" in text
    assert "over 23 kernel groups" in text
    b.scores["learned"] = 0.70
    assert "scored lower" not in format_blend(res, "out")

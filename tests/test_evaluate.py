"""``kernelcast evaluate``: the grouped fold split (no kernel group on both sides), the metrics against
hand-computed values, few-shot offsets, conformal coverage, the stacked blend, and an end-to-end run
on a tiny dataset measured for real."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from kernelcast.datagen.frame import DataError
from kernelcast.train.evaluate import (
    EvaluateOptions,
    assign_folds,
    base_group,
    build_groups,
    conformal_intervals,
    few_shot,
    fit_stacked_blend,
    offset_floor,
    parse_models,
    parse_shots,
    row_folds,
    tuning_basis,
)

import kernelcast.cli as cli
from kernelcast.errors import InputError, UsageError
from kernelcast.metrics import (
    conformal_quantile,
    interval_coverage,
    log2_bias,
    log2_ratio,
    mean_sq_log2,
    measured_top_scores,
    median_abs_log2,
    p90_ape,
    per_kernel_mape,
    tuning_scores,
    within_factor,
)
from kernelcast.schema import Kernel
from tests.kernels import TRIAD

# ---------------------------------------------------------------------------------------------
# groups and folds

_MAP = ("kernel void {name}(global const float *{a}, global float *{b}, const int n) {{\n"
        "  int i = get_global_id(0);\n  if (i < n)\n    {b}[i] = {a}[i] * 2.0f + 1.0f;\n}}\n")
_SYN = {"synth_tile": "kernel void {name}(local float *t, global float *x) {{\n  int l = get_local_id(0);\n"
                      "  t[l] = x[get_global_id(0)];\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
                      "  x[get_global_id(0)] = t[({c} + l) % get_local_size(0)];\n}}\n",
        "synth_map": "kernel void {name}(global float4 *v, const float k) {{\n  size_t g = get_global_id(0);\n"
                     "  v[g] = v[g] * k + (float4)({c}.0f);\n}}\n"}
_FILE = ["kernel void {name}(global const int *h, global int *o, const int n) {{\n  int s = 0;\n"
         "  for (int j = 0; j < n; ++j)\n    s += h[j] ^ j;\n  o[get_global_id(0)] = s;\n}}\n",
         "kernel void {name}(global uint *x) {{ atomic_inc(&x[get_global_id(0) & 15]); }}\n",
         "kernel void {name}(global double *d, const double s) {{\n  int i = get_global_id(0);\n"
         "  d[i] = sqrt(d[i]) / s - exp(d[i]);\n}}\n",
         "kernel void {name}(global short *p, int w) {{\n  int y = get_global_id(1), x = get_global_id(0);\n"
         "  p[y * w + x] = (short)(x - y);\n}}\n"]


def _kernels() -> pd.DataFrame:
    """Per-kernel rows: two synthetic families, three source files, a kernel without origin, and a
    near-duplicate of file a's kernel (the same code under other names) in file d."""
    recs = []
    for fam, n in (("synth_tile", 4), ("synth_map", 3)):
        for i in range(n):
            name = f"{fam}_{i:06d}"
            recs.append((f"{fam}-{i}", name, f"synth:seed=1:i={len(recs)}", _SYN[fam].format(name=name, c=i)))
    recs.append(("ka", "scale_a", "lib/a.cl", _MAP.format(name="scale_a", a="a", b="b")))
    recs.append(("kb", "other_b", "lib/b.cl", _FILE[0].format(name="other_b")))
    recs.append(("kb2", "other_b2", "lib/b.cl", _FILE[1].format(name="other_b2")))
    recs.append(("kc", "other_c", "lib/c.cl", _FILE[2].format(name="other_c")))
    recs.append(("kd", "mul_add", "lib/d.cl", _MAP.format(name="mul_add", a="src", b="dst")))
    recs.append(("ke", "lonely", "", _FILE[3].format(name="lonely")))
    df = pd.DataFrame(recs, columns=["kernel_id", "kernel_name", "kernel_origin", "source"])
    df["rows"] = [3 + (i * 5) % 7 for i in range(len(df))]
    return df


def test_base_group_keys():
    assert base_group("synth_tile_000028", "synth:seed=11:i=28", "x") == ("synth:synth_tile", "synthetic_family")
    assert base_group("synth_stencil2d_000003", None, "x") == ("synth:synth_stencil2d", "synthetic_family")
    assert base_group("ew_saxpy", "bundled/elementwise.cl", "x") == ("file:bundled/elementwise.cl", "source_file")
    assert base_group("foo", "", "abc") == ("kernel:abc", "kernel")
    assert base_group("foo", float("nan"), "abc") == ("kernel:abc", "kernel")


def test_groups_merge_families_files_and_near_duplicates():
    g = build_groups(_kernels(), threshold=0.8)
    of = g.group_of
    assert len({of[f"synth_tile-{i}"] for i in range(4)}) == 1
    assert len({of[f"synth_map-{i}"] for i in range(3)}) == 1
    assert of["synth_tile-0"] != of["synth_map-0"]
    assert of["kb"] == of["kb2"]                        # same source file
    assert of["ka"] == of["kd"]                          # near-duplicates in two files
    assert g.groups[of["ka"]].kind == "merged"
    assert [(a, b) for a, b, _ in g.near_duplicates] == [("ka", "kd")]
    assert of["kc"] not in (of["ka"], of["kb"]) and of["ke"] == "kernel:ke"
    assert len(g.groups) == 6                           # tile, map, a+d, b, c, lonely
    assert sum(x.rows for x in g.groups.values()) == int(_kernels()["rows"].sum())


def test_fold_split_never_puts_a_group_on_both_sides():
    kern = _kernels()
    g = build_groups(kern)
    rows = np.repeat(kern["kernel_id"].to_numpy(), kern["rows"].to_numpy())
    for seed in range(5):
        for k in (2, 3, 4):
            folds = row_folds(rows, g, k, seed)
            assert set(folds) == set(range(k))         # no fold is empty
            for grp in g.groups.values():
                assert len(set(folds[np.isin(rows, grp.kernels)])) == 1, grp.key
            # a kernel's rows never straddle folds either, and near-duplicates share one
            assert len(set(folds[np.isin(rows, ["ka", "kd"])])) == 1


def test_folds_are_deterministic_balanced_and_seeded():
    sizes = {f"g{i}": int(s) for i, s in enumerate(np.random.default_rng(3).integers(1, 40, size=60))}
    a, b = assign_folds(sizes, 5, seed=7), assign_folds(dict(reversed(list(sizes.items()))), 5, seed=7)
    assert a == b                                       # the seed and the groups decide, not their order
    assert assign_folds(sizes, 5, seed=8) != a
    load = np.bincount([a[k] for k in sizes], weights=[sizes[k] for k in sizes], minlength=5)
    assert load.max() - load.min() <= max(sizes.values())


def test_too_few_groups_is_an_input_error():
    with pytest.raises(DataError, match="too few kernel groups for 5 folds: the dataset has 4"):
        assign_folds({"a": 3, "b": 4, "c": 1, "d": 2}, 5)
    assert issubclass(DataError, InputError)
    with pytest.raises(UsageError):
        assign_folds({"a": 1, "b": 1}, 1)


def test_option_parsing():
    assert parse_models("blend, analytical") == ("analytical", "blend")
    with pytest.raises(UsageError, match="unknown model 'gbdt'"):
        parse_models("analytical,gbdt")
    assert parse_shots("3,0,1,1") == (0, 1, 3)
    for bad in ("a", "-1", ""):
        with pytest.raises(UsageError):
            parse_shots(bad)
    with pytest.raises(UsageError, match="blend needs"):
        EvaluateOptions(models=("blend",))
    with pytest.raises(UsageError, match="folds"):
        EvaluateOptions(folds=1)


# ---------------------------------------------------------------------------------------------
# metrics against hand-computed values


def test_log_space_metrics_by_hand():
    true = np.array([1.0, 2.0, 4.0, 8.0, 10.0])
    pred = np.array([2.0, 1.0, 4.0, 32.0, np.nan])       # ratios 2, 1/2, 1, 4, (none)
    np.testing.assert_allclose(log2_ratio(pred, true)[:4], [1, -1, 0, 2])
    assert np.isnan(log2_ratio(pred, true)[4])
    assert median_abs_log2(pred, true) == pytest.approx(1.0)      # |r| = 1, 1, 0, 2
    assert log2_bias(pred, true) == pytest.approx(0.5)            # median of -1, 0, 1, 2
    assert mean_sq_log2(pred, true) == pytest.approx((1 + 1 + 0 + 4) / 4)
    assert within_factor(pred, true, 2.0) == pytest.approx(3 / 4)  # 2x and 1/2x are inside, 4x is not
    assert within_factor(np.array([0.0, 1.0]), np.array([1.0, 1.0])) == pytest.approx(0.5)


def test_p90_ape_and_per_kernel_mape_by_hand():
    true = np.full(11, 100.0)
    pred = 100.0 + np.arange(11) * 10.0                  # APE 0, 10, ..., 100
    assert p90_ape(pred, true) == pytest.approx(90.0)
    kern = np.array(["a", "a", "b", "b", "b", "c"])
    y = np.array([1.0, 1.0, 10.0, 10.0, 10.0, 4.0])
    p = np.array([1.5, 0.5, 10.0, 12.0, 14.0, 1.0])      # kernel MAPE: a 50, b 20, c 75
    mean, median = per_kernel_mape(p, y, kern)
    assert mean == pytest.approx((50 + 20 + 75) / 3) and median == pytest.approx(50.0)


def test_tuning_scores_by_hand():
    groups = np.array(["p", "p", "p", "q", "q", "r"])
    true = np.array([10.0, 12.0, 20.0, 5.0, 5.2, 1.0])
    pred = np.array([3.0, 2.0, 4.0, 9.0, 8.0, 1.0])      # p picks 12 (regret 1.2), q picks 5.2 (1.04), r: 1 row
    s = tuning_scores(pred, true, groups, tol=0.05)
    assert s["groups"] == 2
    assert s["top1_within"] == pytest.approx(0.5)
    assert s["regret_median"] == pytest.approx((1.2 + 1.04) / 2)
    assert s["regret_max"] == pytest.approx(1.2)
    assert s["regret_geomean"] == pytest.approx((1.2 * 1.04) ** 0.5)
    assert s["spearman_groups"] == 1 and s["spearman_mean"] == pytest.approx(0.5)   # p: ranks (2,1,3) vs (1,2,3)


def test_measured_top_scores_by_hand():
    groups = np.array(["p", "p", "p", "p", "q", "q", "r"])
    true = np.array([10.0, 12.0, 20.0, 30.0, 5.0, 5.2, 1.0])
    pred = np.array([3.0, 2.0, 1.0, 4.0, 9.0, 8.0, 1.0])
    # k = 1: p picks 20 (regret 2), q picks 5.2 (1.04); r has one row and no question
    s1 = measured_top_scores(pred, true, groups, 1, tol=0.05)
    assert s1["groups"] == 2 and s1["top1_within"] == pytest.approx(0.5)
    assert s1["regret_max"] == pytest.approx(2.0)
    # k = 2: p measures 20 and 12 and keeps 12 (1.2); q has only 2 rows, which measuring 2 always answers
    s2 = measured_top_scores(pred, true, groups, 2, tol=0.05)
    assert s2["groups"] == 1 and s2["top1_within"] == 0.0 and s2["regret_median"] == pytest.approx(1.2)
    # k = 3: p finds its best, 10
    s3 = measured_top_scores(pred, true, groups, 3, tol=0.05)
    assert s3["groups"] == 1 and s3["top1_within"] == 1.0 and s3["regret_max"] == pytest.approx(1.0)


def test_conformal_quantile_and_coverage_by_hand():
    scores = np.arange(1.0, 10.0)                         # 1..9, n = 9: ceil(10 * 0.9) = 9th smallest
    assert conformal_quantile(scores, 0.9) == 9.0
    assert conformal_quantile(scores, 0.5) == 5.0         # ceil(10 * 0.5) = 5th
    assert conformal_quantile(scores, 0.95) == np.inf     # ceil(9.5) = 10 > n
    assert interval_coverage(np.array([0, 2, 0]), np.array([1, 3, np.inf]), np.array([0.5, 4, 7])) == \
        pytest.approx(2 / 3)


def test_tuning_basis_falls_back_to_per_work_item():
    args = json.dumps([{"name": "a", "kind": "buffer", "count": 64}])
    rows = [("k1", [64], [8], args, 64), ("k1", [128], [8], args, 128), ("k2", [64], [16], args, 64)]
    f = pd.DataFrame(rows, columns=["kernel_id", "gsize", "lsize", "args", "global_items"])
    b = tuning_basis(f)
    assert b.basis == "per_work_item" and b.problem_groups == 0
    np.testing.assert_allclose(b.scale, [64, 128, 64])
    f2 = pd.concat([f, f.assign(lsize=[[16], [16], [32]])], ignore_index=True)   # same problems, other local sizes
    b2 = tuning_basis(f2)
    assert b2.basis == "problem" and b2.problem_groups == 3
    # the same configuration measured twice (e.g. under two argument selections) is no tuning group
    b3 = tuning_basis(pd.concat([f, f], ignore_index=True))
    assert b3.basis == "per_work_item" and b3.problem_groups == 0
    # on two devices a kernel's configurations are compared per device
    b4 = tuning_basis(pd.concat([f.assign(device="A"), f.assign(device="B")], ignore_index=True))
    assert b4.basis == "per_work_item" and len(set(b4.groups)) == 4
    assert b4.groups[0] == b4.groups[1] != b4.groups[3]


# ---------------------------------------------------------------------------------------------
# few-shot, intervals, blend


def test_one_shot_makes_a_model_off_by_2x_exact():
    kern = np.array(["a"] * 5 + ["b"] * 4 + ["c"])
    true = np.arange(1.0, 11.0)
    pred = true * np.where(kern == "a", 0.5, 2.0)         # off by exactly 2x, per kernel
    p0, s0 = few_shot(pred, true, kern, 0)
    np.testing.assert_array_equal(p0, pred)
    assert s0.all()
    p1, s1 = few_shot(pred, true, kern, 1, seed=4)
    assert s1.sum() == 10 - 3                             # one shot per kernel; kernel c has no row left
    np.testing.assert_allclose(p1[s1], true[s1])
    _, s3 = few_shot(pred, true, kern, 3, seed=4)
    assert not (s3 & ~s1).any()                           # the shots of k=1 are among those of k=3
    assert s3.sum() == 2 + 1


def test_few_shot_offset_is_the_mean_log_ratio():
    kern = np.array(["a"] * 3)
    true = np.array([1.0, 1.0, 1.0])
    pred = np.array([2.0, 8.0, 4.0])                       # log2 ratios (true/pred): -1, -3, -2
    p2, scored = few_shot(pred, true, kern, 2, seed=0)
    i = int(np.flatnonzero(scored)[0])
    shots = [j for j in range(3) if j != i]
    expect = pred[i] * 2.0 ** np.mean(np.log2(true[shots] / pred[shots]))
    assert p2[i] == pytest.approx(expect)


def test_offset_floor_removes_each_kernels_constant_factor_and_nothing_else():
    kern = np.array(["a"] * 3 + ["b"] * 2)
    true = np.array([1.0, 2.0, 4.0, 10.0, 10.0])
    pred = np.array([2.0, 4.0, 8.0, 5.0, 20.0])          # a: 2x high throughout; b: 0.5x and 2x
    fl = offset_floor(pred, true, kern)
    np.testing.assert_allclose(fl[:3], true[:3])          # a constant factor: the floor is exact
    np.testing.assert_allclose(fl[3:], [5.0, 20.0])       # b's mean log ratio is 0: its shape error stays
    assert np.isnan(offset_floor(np.array([np.nan, 1.0]), np.array([1.0, 1.0]), np.array(["a", "a"]))[0])
    # no number of shots beats it on a kernel whose rows all share one factor but for one
    rng = np.random.default_rng(0)
    kern = np.repeat(np.arange(40).astype(str), 6)
    true = rng.uniform(1, 100, len(kern))
    pred = true * 2.0 ** (rng.normal(0, 1, 40).repeat(6) + rng.normal(0, 0.3, len(kern)))
    fl = offset_floor(pred, true, kern)
    p3, scored = few_shot(pred, true, kern, 3, seed=1)
    assert np.mean(np.abs(np.log2(fl / true))) < np.mean(np.abs(np.log2(p3[scored] / true[scored])))


def test_repeatability_pairs_the_configurations_measured_twice():
    from kernelcast.datagen.dataset import repeatability

    raw = pd.DataFrame({
        "row_key": ["a", "a~n1", "b", "b~l1", "c"],
        "status": ["ok"] * 5,
        "time_median_us": [100.0, 200.0, 50.0, 50.0, 10.0],
        "time_cv": [0.30, 0.02, 0.01, 0.01, 0.01],
        "remeasure_of": [None, "a", None, "b", None],
        "remeasure_reason": [None, "noise", None, "load", None],
        "other_cpu_frac": [None, None, 0.6, 0.0, None],
    })
    r = repeatability(raw)
    assert r["pairs"] == 2 and r["by_reason"]["noise"]["pairs"] == 1 and r["by_reason"]["load"]["pairs"] == 1
    # a: the re-measurement (lower CV) is kept, the dropped 100 against it is 50 % off; b: equal
    assert r["mape"] == pytest.approx(25.0) and r["median_abs_log2"] == pytest.approx(0.5)
    assert repeatability(raw[raw["remeasure_of"].isna()]) == {"pairs": 0}


def test_few_shot_with_folds_shrinks_with_the_other_folds_residuals():
    """Kernel a (fold 0) is off by 8x on each row. Fold 1 holds kernels b [0, 2] and c [2, 4]
    (log2 residuals): within-kernel variance 4 / (4 - 2) = 2, kernel means 1, 3 have variance 2,
    less 2 / 2: 1; prior 2 / 1 = 2. One shot of a: offset 1 / (1 + 2) x 3 = 1, so a's other rows
    are corrected by 2x (not 8x as the plain mean would)."""
    kern = np.array(["a"] * 3 + ["b"] * 2 + ["c"] * 2)
    folds = np.array([0] * 3 + [1] * 4)
    pred = np.ones(7)
    true = np.array([8.0, 8.0, 8.0, 1.0, 4.0, 4.0, 16.0])
    p1, s1 = few_shot(pred, true, kern, 1, seed=0, folds=folds)
    a = s1 & (kern == "a")
    assert a.sum() == 2
    np.testing.assert_allclose(p1[a], 2.0)
    p1_plain, _ = few_shot(pred, true, kern, 1, seed=0)
    np.testing.assert_allclose(p1_plain[a], 8.0)


def test_cross_conformal_coverage():
    rng = np.random.default_rng(0)
    n = 4000
    true = 2.0 ** rng.uniform(0, 10, n)
    pred = true * 2.0 ** rng.normal(0, 1, n)              # |log2 ratio| ~ |N(0, 1)|
    folds = rng.integers(0, 5, n)
    lo, hi = conformal_intervals(pred, true, folds, 0.9)
    assert 0.88 <= interval_coverage(lo, hi, true) <= 0.92
    np.testing.assert_allclose(np.log2(hi / pred), 1.645, atol=0.1)   # the 90 % two-sided normal quantile
    # per bin: a bin with larger errors gets wider intervals
    bins = np.where(np.arange(n) % 2 == 0, "x", "y")
    pred2 = true * 2.0 ** (rng.normal(0, 1, n) * np.where(bins == "x", 0.5, 2.0))
    lo2, hi2 = conformal_intervals(pred2, true, folds, 0.9, bins=bins)
    for b in ("x", "y"):
        sel = bins == b
        assert 0.87 <= interval_coverage(lo2[sel], hi2[sel], true[sel]) <= 0.93
    assert np.median(hi2[bins == "y"] / pred2[bins == "y"]) > 4 * np.median(hi2[bins == "x"] / pred2[bins == "x"])


def test_stacked_blend_never_worse_than_the_best_single_model():
    rng = np.random.default_rng(1)
    true = 2.0 ** rng.uniform(0, 12, 300)
    preds = {"low": true / 8 * 2.0 ** rng.normal(0, 0.3, 300),     # right shape, 8x low
             "noisy": true * 2.0 ** rng.normal(0, 1.5, 300)}
    w = fit_stacked_blend(preds, true)
    assert w.scores[w.kind] <= min(w.scores["low"], w.scores["noisy"])
    assert w.kind in ("low+offset", "least_squares")
    assert median_abs_log2(w.combine(preds), true) < 0.5
    assert w.fallback == ["noisy", "low"]                  # alone, the noisy model is closer (median)
    # identical models: a tie keeps the first single model
    same = fit_stacked_blend({"a": true, "b": true.copy()}, true)
    assert same.kind == "a" and same.weights == {"a": 1.0}
    # a row one model cannot predict takes the best model that can
    p = w.combine({"low": np.array([np.nan, 1.0]), "noisy": np.array([3.0, np.nan])})
    assert p[0] == 3.0 and p[1] == 1.0


# ---------------------------------------------------------------------------------------------
# end to end, on a tiny dataset measured for real

_TINY = {
    "a.cl": ("scale", "kernel void scale(global const float *x, global float *y, const int n) {\n"
                      "  int i = get_global_id(0);\n  if (i < n)\n    y[i] = 2.0f * x[i];\n}\n"),
    "b.cl": ("triad", "kernel void triad(global const float *a, global const float *b, global float *c, "
                      "const int n) {\n  int i = get_global_id(0);\n  if (i < n)\n    c[i] = a[i] + 3.0f * b[i];\n}\n"),
    "c.cl": ("loop64", "kernel void loop64(global const float *a, global float *b, const int n) {\n"
                       "  int i = get_global_id(0);\n  if (i >= n)\n    return;\n  float x = a[i];\n"
                       "  for (int j = 0; j < 64; ++j)\n    x = x * 1.0001f + 0.5f;\n  b[i] = x;\n}\n"),
    "d.cl": ("sqrt_map", "kernel void sqrt_map(global const float *a, global float *b, const int n) {\n"
                         "  int i = get_global_id(0);\n  if (i < n)\n    b[i] = sqrt(fabs(a[i])) + exp(a[i]);\n}\n"),
}


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory, device):
    from kernelcast.datagen.corpus_store import write_corpus

    root = tmp_path_factory.mktemp("evaluate")
    recs = [Kernel(source=s, name=n, dims=1, origin=f"tiny/{f}").to_dict() for f, (n, s) in _TINY.items()]
    write_corpus(root / "corpus", recs, {"kind": "corpus"})
    rc = cli.main(["datagen", "--corpus", str(root / "corpus"), "--out", str(root / "ds"), "--configs-per-kernel", "4",
                   "--lsizes-per-kernel", "2", "--args", "simple", "--rebalance", "none", "--no-validity",
                   "--repeats", "3", "--min-time", "0", "--max-items", "65536", "--device", device.spec, "--quiet"])
    assert rc == 0
    return root / "ds"


PROFILE = "pocl-local"


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelcast: error: "), err
    return err[0]


def test_evaluate_end_to_end(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "eval"
    rc = cli.main(["evaluate", "--data", str(tiny_dataset), "--models", "analytical,blend", "--folds", "2",
                   "--inner-folds", "2", "--profile", PROFILE, "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "median APE %" in printed and "analytical" in printed
    # datagen's tuning sweeps (default 4 per kernel) give every kernel groups of one problem
    assert "groups of configurations of one problem" in printed and "in 4 kernels" in printed
    m = json.loads((out / "metrics.json").read_text())
    assert m["tuning"]["basis"] == "problem" and m["tuning"]["problem_kernels"] == 4
    assert m["tuning"]["problem_groups"] >= 8
    assert m["kind"] == "kernelcast-evaluation" and m["seed"] == 0 and m["models"] == ["analytical", "blend"]
    assert m["groups"]["count"] == 4 and m["rows"] == m["dataset"]["rows_used"] > 0
    assert m["profile"]["spec"] == PROFILE
    a = m["metrics"]["analytical"]
    assert a["rows"] == m["rows"] and a["median_ape"] is not None and 0 <= a["within_2x_pct"] <= 100
    assert set(m["few_shot"]["models"]["analytical"]) == {"0", "1", "3"}
    floor = m["few_shot"]["offset_floor"]["analytical"]
    assert floor["rows"] == m["rows"] and floor["median_ape"] is not None
    assert "offset floor" in printed and "pairs" in m["dataset"]["repeatability"]
    assert m["intervals"]["models"]["blend"]["coverage_pct"] is not None
    oof = pd.read_parquet(out / "oof.parquet")
    assert len(oof) == m["rows"] and {"analytical_us", "blend_lo_us", "blend_hi_us", "fold"} <= set(oof.columns)
    # no kernel on both sides
    assert (oof.groupby("kernel_id")["fold"].nunique() == 1).all()
    report = (out / "REPORT.md").read_text()
    assert "## Accuracy" in report and "pred_vs_measured.png" in report
    assert (out / "pred_vs_measured.png").stat().st_size > 0 and (out / "calibration.png").is_file()

    # the same seed gives the same figures; --json prints metrics.json; the old evaluation is replaced
    rc = cli.main(["evaluate", "--data", str(tiny_dataset), "--models", "analytical,blend", "--folds", "2",
                   "--inner-folds", "2", "--profile", PROFILE, "--out", str(out), "--quiet", "--json", "--no-plots"])
    again = json.loads(capsys.readouterr().out)

    def figures(x: dict) -> dict:
        return {k: {f: v for f, v in d.items() if f != "seconds"} for k, d in x["metrics"].items()}

    assert rc == 0 and figures(again) == figures(m) and again["folds"] == m["folds"]
    assert not (out / "pred_vs_measured.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]      # no temporary directory left


def test_repeats_report_the_spread_over_fold_seeds(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "eval"
    rc = cli.main(["evaluate", "--data", str(tiny_dataset), "--models", "analytical,blend", "--folds", "2",
                   "--inner-folds", "2", "--profile", PROFILE, "--out", str(out), "--quiet", "--no-plots",
                   "--seeds", "2", "--seed", "4"])
    printed = capsys.readouterr().out
    assert rc == 0 and "over 2 fold seeds (4..5)" in printed
    m = json.loads((out / "metrics.json").read_text())
    rep = m["repeats"]
    assert rep["seeds"] == [4, 5] and m["seed"] == 4
    an = rep["models"]["analytical"]["median_ape"]
    # the analytical model is fitted on nothing: the folds cannot move its zero-shot figures
    assert an["sd"] == 0.0 and an["values"] == [m["metrics"]["analytical"]["median_ape"]] * 2
    bl = rep["models"]["blend"]["median_ape"]
    assert bl["values"][0] == m["metrics"]["blend"]["median_ape"] and bl["min"] <= bl["mean"] <= bl["max"]
    assert "## Spread over fold seeds" in (out / "REPORT.md").read_text()


def test_two_datasets_are_evaluated_as_one(tiny_dataset, tmp_path, capsys):
    # the same measurements stored twice: twice the rows, every kernel's rows (of both) on one side
    twin = tmp_path / "twin"
    shutil.copytree(tiny_dataset, twin)
    out = tmp_path / "eval"
    rc = cli.main(["evaluate", "--data", str(tiny_dataset), "--data", str(twin), "--models", "analytical",
                   "--folds", "2", "--profile", PROFILE, "--out", str(out), "--quiet", "--no-plots", "--json"])
    both = json.loads(capsys.readouterr().out)
    assert rc == 0
    rc = cli.main(["evaluate", "--data", str(tiny_dataset), "--models", "analytical", "--folds", "2",
                   "--profile", PROFILE, "--out", str(tmp_path / "one"), "--quiet", "--no-plots", "--json"])
    one = json.loads(capsys.readouterr().out)
    assert rc == 0 and both["rows"] == 2 * one["rows"] and both["kernels"] == one["kernels"]
    d = both["dataset"]
    assert len(d["parts"]) == 2 and " + " in d["path"] and d["rows_used"] == both["rows"]
    # the analytical model fits nothing: the same rows twice give the same zero-shot figures
    assert both["metrics"]["analytical"]["median_ape"] == pytest.approx(one["metrics"]["analytical"]["median_ape"])
    oof = pd.read_parquet(out / "oof.parquet")
    assert (oof.groupby("kernel_id")["fold"].nunique() == 1).all()


@pytest.mark.parametrize("case", ["missing dataset", "too few kernels", "unknown model", "out is a file",
                                  "out is another directory", "dataset twice", "another device"])
def test_evaluate_bad_input_exits_2_and_writes_nothing(case, tiny_dataset, tmp_path, capsys):
    out = tmp_path / "eval"
    args = ["evaluate", "--data", str(tiny_dataset), "--models", "analytical", "--profile", PROFILE, "--out", str(out),
            "--quiet"]
    expect = {"missing dataset": "no such dataset", "too few kernels": "too few kernel groups for 5 folds",
              "unknown model": "unknown model 'magic'", "out is a file": "not a directory",
              "out is another directory": "holds no evaluation", "dataset twice": "is given twice",
              "another device": "measured on different devices"}[case]
    if case == "dataset twice":
        args += ["--data", str(tiny_dataset) + "/"]
    elif case == "another device":
        other = tmp_path / "other"
        shutil.copytree(tiny_dataset, other)
        manifest = json.loads((other / "manifest.json").read_text())
        manifest["device_identity"] = "another|device"
        (other / "manifest.json").write_text(json.dumps(manifest))
        args += ["--data", str(other)]
    if case == "missing dataset":
        args[2] = str(tmp_path / "nope")
    elif case == "unknown model":
        args[4] = "analytical,magic"
    elif case == "out is a file":
        out.write_text("x")
    elif case == "out is another directory":
        out.mkdir()
        (out / "keep.txt").write_text("x")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert cli.main(args) == 2
    assert expect in _error(capsys)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_blend_command_stacks_on_out_of_fold_predictions(tiny_dataset, tmp_path, capsys):
    """``kernelcast blend`` on a tabular model: the blend is chosen on OOF predictions (the tabular
    model refitted per grouped fold), stored with its figures, never worse than the better single
    model there, and predict uses it."""
    model = tmp_path / "tab"
    assert cli.main(["train", "--kind", "tabular", "--data", str(tiny_dataset), "--out", str(model),
                     "--profile", PROFILE]) == 0
    capsys.readouterr()
    assert cli.main(["blend", "--data", str(tiny_dataset), "--model", str(model), "--profile", PROFILE,
                     "--folds", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    saved = json.loads((model / "blend.json").read_text())
    assert saved["kind"] == res["blend"]["kind"] and saved["fitted"]["method"].startswith("stacking")
    assert saved["fitted"]["folds"] == 2 and saved["fitted"]["rows"] == res["rows"] > 0
    figs = res["figures"]
    # never worse than the best single model on these rows, except the hedge: the geometric mean
    # of models the kernel groups cannot tell apart (train.blend.HEDGE_SE), kept because picking
    # one of them is a coin flip on held-out kernels (sw8, evaluate --repeats 3: median |log2|
    # 0.389 with the hedge, 0.401 with it only where it also scores no worse on these rows)
    best_single = min(figs["analytical"]["median_abs_log2"], figs["learned"]["median_abs_log2"])
    assert figs["blend"]["median_abs_log2"] <= best_single + 1e-12 or saved["anchor"] == "geometric_mean", figs
    assert saved["anchor"] in ("analytical", "learned", "geometric_mean")
    # the OOF analytical figure is the analytical model's own (nothing fitted)
    assert figs["analytical"]["rows"] == res["rows"]
    # a damaged blend.json is one line and exit 2 in predict
    (model / "blend.json").write_text("{oops")
    k = tmp_path / "k.cl"
    k.write_text(TRIAD)
    assert cli.main(["predict", "--kernel", str(k), "--gsize", "4096", "--lsize", "64", "--model", str(model),
                     "--profile", PROFILE]) == 2
    assert "blend.json" in _error(capsys)


@pytest.mark.parametrize("case", ["not a model", "folds 1"])
def test_blend_bad_input_exits_2_and_writes_nothing(case, tiny_dataset, tmp_path, capsys):
    model = tmp_path / "m"
    model.mkdir()
    args = ["blend", "--data", str(tiny_dataset), "--model", str(model), "--profile", PROFILE]
    if case == "folds 1":
        args += ["--folds", "1"]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        rc = cli.main(args)
    except SystemExit as e:          # an option's type check (argparse)
        rc = e.code
    assert rc == 2
    assert {"not a model": "not a model directory", "folds 1": "--folds: must be at least 2"}[case] in _error(capsys)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before

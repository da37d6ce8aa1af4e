"""Model-guided search (models.search) and the tuning benchmark's bookkeeping (bench.tuning), with
known answers on spaces written here."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from kernelcast.bench.tuning import Space, run_guided, run_strategy, summarize, trace_stats
from kernelcast.models.search import encode_params, guided_search


def _space(n_bx: int = 6, n_t: int = 4) -> tuple[pd.DataFrame, np.ndarray]:
    """A grid of block sizes x tiles whose time is a smooth bowl with its minimum at (64, 2)."""
    rows, t = [], []
    for bx in [16 << i for i in range(n_bx)]:
        for tile in range(1, n_t + 1):
            rows.append({"block_size_x": bx, "tile": tile})
            t.append(100.0 * (1.0 + (math.log2(bx) - 6) ** 2 + 0.5 * (tile - 2) ** 2))
    return pd.DataFrame(rows), np.asarray(t)


def test_encode_params_scales_to_unit_range_on_log2_where_values_span():
    p = pd.DataFrame({"bx": [16, 64, 256], "flag": [0, 1, 0], "const": [7, 7, 7], "name": ["b", "a", "c"]})
    x = encode_params(p)
    assert x.shape == (3, 3)                                        # the constant column is dropped
    assert x[:, 0] == pytest.approx([0.0, 0.5, 1.0])                # log2: 4, 6, 8
    assert x[:, 1] == pytest.approx([0.0, 1.0, 0.0])
    assert x[:, 2] == pytest.approx([0.5, 0.0, 1.0])                # sorted distinct values a, b, c


def test_a_perfect_model_finds_the_optimum_first():
    params, t = _space()
    res = guided_search(t * 3.0, params, lambda i: t[i], 10, settle=False)   # off by a constant factor
    assert res.steps[0].index == int(np.argmin(t)) and res.best_us == t.min()
    assert len(res.steps) == 10 and res.stopped == "budget"


def test_the_search_settles_when_nothing_can_beat_the_best():
    params, t = _space()
    res = guided_search(t, params, lambda i: t[i], len(t), settle=True)
    assert res.stopped == "settled" and res.best_us == t.min()
    assert len(res.steps) < len(t)


def test_a_model_that_is_wrong_everywhere_is_overruled_by_measurements():
    params, t = _space()
    res = guided_search(1.0 / t, params, lambda i: t[i], 12, settle=False)   # predicts the order reversed
    assert res.steps[0].index == int(np.argmax(t))                 # it starts where the model says
    assert res.best_us == t.min()                                  # and finds the optimum within 12 of 24


def test_failed_configurations_are_measured_once():
    params, t = _space()
    failed = {int(np.argmin(t))}                                    # the model's favourite fails
    calls: list[int] = []

    def measure(i: int) -> float:
        calls.append(i)
        return float("nan") if i in failed else float(t[i])

    res = guided_search(t, params, measure, len(t), settle=False)
    assert len(calls) == len(set(calls)) == len(t) and res.stopped == "exhausted"
    assert math.isnan(res.steps[0].measured_us)
    assert res.best_us == np.sort(t)[1]


def test_no_prediction_falls_back_to_the_measurements():
    params, t = _space()
    res = guided_search(np.full(len(t), np.nan), params, lambda i: t[i], len(t), settle=False)
    assert res.best_us == t.min() and res.stopped == "exhausted"


def test_bad_arguments():
    params, t = _space()
    with pytest.raises(ValueError, match="budget"):
        guided_search(t, params, lambda i: t[i], 0)
    with pytest.raises(ValueError, match="configurations"):
        guided_search(t[:-1], params, lambda i: t[i], 3)


def test_trace_stats_by_hand():
    s = trace_stats([300.0, float("nan"), 105.0, 100.0], 100.0)
    assert s["reach_5"] == 3 and s["reach_1"] == 4 and s["measurements"] == 4
    assert s["frac_5"] == 1.0 and s["best_so_far"] == [300.0, 300.0, 105.0, 100.0]
    none = trace_stats([200.0], 100.0)
    assert none["reach_5"] is None and none["frac_10"] == 0.5
    agg = summarize([s, none], 50)
    assert agg["median_reach_5"] is None                            # one of two never got there: median = inf
    assert agg["within5_in_20_pct"] == 50.0 and agg["median_frac_5"] == pytest.approx(0.75)


@pytest.fixture
def cache_file(tmp_path):
    params, t = _space()
    cache = {}
    for (bx, tile), ti in zip(params.itertuples(index=False), t):
        cache[f"{bx},{tile}"] = {"block_size_x": int(bx), "tile": int(tile), "time": float(ti) / 1e3,
                                 "times": [float(ti) / 1e3] * 3}
    cache["512,1"]["time"] = "RuntimeFailedConfig"
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"device_name": "GPU", "kernel_name": "k", "problem_size": [4096],
                                "tune_params_keys": ["block_size_x", "tile"],
                                "tune_params": {"block_size_x": sorted({int(b) for b in params.block_size_x}),
                                                "tile": [1, 2, 3, 4]},
                                "objective": "time", "cache": cache}))
    return path, t


def test_space_of_a_cache(cache_file):
    path, t = cache_file
    sp = Space(str(path))
    assert len(sp.keys) == len(t) and sp.optimum == pytest.approx(t.min())
    assert math.isnan(sp.time_us[sp.index["512,1"]])
    assert sp.key_of({"block_size_x": 64, "tile": 2}) == "64,2"


def test_guided_search_over_a_cache(cache_file):
    path, t = cache_file
    sp = Space(str(path))
    times = run_guided(sp, sp.time_us.copy(), 5, 0)
    assert times[0] == pytest.approx(t.min())


def test_kernel_tuner_strategy_replays_the_cache(cache_file):
    path, _ = cache_file
    sp = Space(str(path))
    times = run_strategy(sp, "random_sample", 8, 3, None)
    assert len(times) == 8
    assert all(math.isnan(x) or any(np.isclose(x, sp.time_us[np.isfinite(sp.time_us)])) for x in times)
    assert times == run_strategy(sp, "random_sample", 8, 3, None)     # seeded


def test_oof_predictions_of_an_evaluation_over_several_devices(tmp_path):
    from kernelcast.bench.tuning import _oof_by_key

    path = tmp_path / "oof.parquet"
    pd.DataFrame({"row_key": ["0:a", "0:b", "1:a", "1:b"], "device": ["kt:X", "kt:X", "kt:Y", "kt:Y"],
                  "tabular_us": [1.0, 2.0, 3.0, 4.0]}).to_parquet(path)
    assert _oof_by_key(str(path), "tabular_us", "kt:Y") == {"a": 3.0, "b": 4.0}      # the prefix dropped
    with pytest.raises(Exception, match="no column"):
        _oof_by_key(str(path), "blend_us", "kt:Y")


def test_merged_runs_keep_each_pair_and_searcher(tmp_path):
    from kernelcast.bench.tuning import merge_results

    def run(d, name, searcher, times):
        r = [trace_stats(times, 100.0)]
        pair = {"name": name, "optimum_us": 100.0, "searchers": {searcher: {**summarize(r, 50), "traces": r}},
                "failed": {}}
        (tmp_path / d).mkdir()
        (tmp_path / d / "tuning.json").write_text(json.dumps({"kernel_tuner": "1.5.0", "budget": 50, "seeds": 1,
                                                               "strategies": [], "searchers": [],
                                                               "pairs": [pair]}))
        return str(tmp_path / d)

    a = run("a", "p", "kernelcast:none", [200.0, 104.0])
    b = run("b", "p", "kt:random_sample", [200.0, 150.0, 101.0])
    m = merge_results([a, b])
    assert [p["name"] for p in m["pairs"]] == ["p"]
    assert set(m["pairs"][0]["searchers"]) == {"kernelcast:none", "kt:random_sample"}
    assert m["overall"]["kernelcast:none"]["median_reach_5"] == 2
    assert m["overall"]["kt:random_sample"]["pooled_reach_5"] == 3
    assert m["overall"]["best_kernel_tuner_strategy"]["name"] == "kt:random_sample"
    # a merge merges again (its seeds are a list)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "tuning.json").write_text(json.dumps(m))
    again = merge_results([str(tmp_path / "m"), run("c", "q", "kernelcast:none", [300.0, 100.0])])
    assert [p["name"] for p in again["pairs"]] == ["p", "q"] and again["seeds"] == [1]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "tuning.json").write_text(json.dumps({"pairs": 3}))
    with pytest.raises(Exception, match="not a result of this benchmark"):
        merge_results([a, str(tmp_path / "bad")])


def _write_cache(path, times: dict[str, float | str]) -> str:
    cache = {}
    for key, ti in times.items():
        bx, tile = (int(v) for v in key.split(","))
        cache[key] = {"block_size_x": bx, "tile": tile, "time": ti if isinstance(ti, str) else ti / 1e3}
    path.write_text(json.dumps({"device_name": path.stem, "kernel_name": "k", "problem_size": [4096],
                                "tune_params_keys": ["block_size_x", "tile"],
                                "tune_params": {"block_size_x": [32, 64], "tile": [1, 2]},
                                "objective": "time", "cache": cache}))
    return str(path)


def test_the_kernels_other_devices_as_the_model(tmp_path):
    from kernelcast.bench.tuning import combined_prior, predictions, read_spec

    # device B is twice as fast as A on every configuration but "64,2", which failed on B
    a = _write_cache(tmp_path / "A.json", {"32,1": 400.0, "32,2": 100.0, "64,1": 200.0, "64,2": 800.0})
    b = _write_cache(tmp_path / "B.json", {"32,1": 200.0, "32,2": 50.0, "64,1": 100.0,
                                           "64,2": "RuntimeFailedConfig"})
    c = _write_cache(tmp_path / "C.json", {"32,1": 1.0, "32,2": 2.0, "64,1": 3.0, "64,2": 4.0})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pairs": [{"name": "k A", "cache": a}, {"name": "k B", "cache": b},
                                          {"name": "other C", "cache": c}]}))
    pairs = read_spec(str(spec))
    assert [o["name"] for o in pairs[0]["others"]] == ["k B"]          # same kernel, never itself
    assert pairs[2]["others"] == []
    sp = Space(a)
    pred = predictions(pairs[0], sp, "others")
    # one row per other device: B's times, its failure as its slowest
    assert pred.shape == (1, 4) and pred[0] == pytest.approx([200.0, 50.0, 100.0, 200.0])
    # the prior before any measurement: B's log2 times less B's median (log2 of 100), plus that median
    assert combined_prior(pred) == pytest.approx([200.0, 50.0, 100.0, 200.0])
    assert predictions(pairs[0], sp, "others:mean") == pytest.approx(combined_prior(pred))
    with pytest.raises(Exception, match="other pairs"):
        predictions(pairs[2], Space(c), "others")


def test_per_input_length_scales_smooth_out_an_input_that_does_not_matter():
    from kernelcast.models.search import _posterior

    rng = np.random.default_rng(0)
    x = rng.random((40, 2))
    z = np.sin(6.0 * x[:, 0])                          # the time moves with input 0 alone
    idx = np.arange(30)
    post = _posterior(x, np.zeros(40), idx, z[idx], min_var=0.01, noise=1e-4, ard=True)
    shared = _posterior(x, np.zeros(40), idx, z[idx], min_var=0.01, noise=1e-4, ard=False)
    held = np.arange(30, 40)
    err = float(np.abs(post.mean[held] - z[held]).mean())
    assert err < float(np.abs(shared.mean[held] - z[held]).mean())
    assert err < 0.05


def test_a_model_confirmed_by_the_measurements_is_followed():
    params, t = _space()
    order = np.argsort(t)
    # the model has the order right but a wrong scale: after its best, the corrected prediction's
    # best unmeasured (the "mean" step) is the second fastest
    res = guided_search(t ** 2, params, lambda i: t[i], 3, settle=False)
    assert res.steps[0].index == int(order[0])
    assert res.steps[2].pick == "mean" and res.steps[2].index == int(order[1])


def test_the_bundled_gpu_model_as_the_model(tmp_path):
    """``bundled``: the bundled GPU model with the pair's profile scores the imported rows, matched
    to the cache's configurations by their keys."""
    from kernelcast.bench.tuning import predictions, read_spec
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.bundled import BUNDLED_GPU_DIR, with_profile
    from kernelcast.models.predict import score_configurations
    from kernelcast.models.tabular import TabularPredictor

    from kernelcast.cli import main

    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float *a, int n) { int i = blockIdx.x * block_size_x + threadIdx.x;\n"
                   "  if (i < n) { float x = a[i]; for (int j = 0; j < tile; j++) x = x * 1.5f + 1.0f; a[i] = x; } }\n")
    cache = _write_cache(tmp_path / "A100.json", {"32,1": 10.0, "32,2": 12.0, "64,1": 9.0, "64,2": 11.0})
    ds = tmp_path / "ds"
    assert main(["dataset", "import-kt", cache, "--kernel", str(src), "--out", str(ds), "--arg", "n=4096"]) == 0
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pairs": [{"name": "k A100", "cache": cache, "dataset": str(ds),
                                           "profile": "a100-pcie"}]}))
    pair = read_spec(str(spec))[0]
    sp = Space(cache)
    pred = predictions(pair, sp, "bundled")
    profile = load_profile("a100-pcie")
    frame, _ = load_measured_frame(str(ds))
    want = score_configurations(frame, profile, with_profile(TabularPredictor.load(BUNDLED_GPU_DIR), profile)).time_us
    by_key = dict(zip(frame["kt_key"].astype(str), want))
    assert pred == pytest.approx([by_key[k] for k in sp.keys]) and np.all(np.isfinite(pred)) and np.all(pred > 0)
    # not the analytical model's predictions
    assert not np.allclose(pred, predictions(pair, sp, "analytical"))


def test_the_unweighted_prior_of_several_devices():
    from kernelcast.bench.tuning import combined_prior

    # medians 100 and 20; the last configuration is missing on the second device: the first alone predicts it
    pred = np.array([[50.0, 100.0, 400.0, 100.0], [20.0, 10.0, 40.0, np.nan]])
    level = math.sqrt(100.0 * 20.0)                                  # the median of the two medians
    # log2 less the median: -1, 0, 2, 0 and 0, -1, 1; their means -0.5, -0.5, 1.5, 0
    assert combined_prior(pred) == pytest.approx([level * 2.0 ** w for w in (-0.5, -0.5, 1.5, 0.0)])
    assert combined_prior(pred[0]) is not None and combined_prior(pred[0]) == pytest.approx(pred[0])


def test_source_matrix_centres_each_source_and_fills_from_the_others():
    from kernelcast.models.search import source_matrix

    m = source_matrix(np.array([[2.0, 4.0, 8.0, np.nan], [1.0, 4.0, -1.0, np.nan]]))
    # log2 less each row's median (2 and 1): the second's missing third takes the first's value there
    assert m == pytest.approx(np.array([[-1.0, 0.0, 1.0, 0.0], [-1.0, 1.0, 1.0, 0.0]]))


def test_source_weights_follow_the_source_that_explains_the_measurements():
    from kernelcast.models.search import source_weights

    _, t = _space()
    lt = np.log2(t)
    sources = np.vstack([lt + 3.0, -lt])        # the first orders the space like the device, the second reversed
    idx = np.array([0, 5, 11])
    w = source_weights(sources, idx, lt[idx], np.ones(2))
    # the first's residuals are one offset (RSS 0, floored at the noise); the second's are 2 * log2 t
    r = 2.0 * lt[idx]
    ratio = ((float(((r - r.mean()) ** 2).sum()) / 3 + 0.003) / 0.003) ** ((3 - 1) / 2)
    assert w == pytest.approx([ratio / (1 + ratio), 1 / (1 + ratio)]) and w[0] > 0.99
    # one measurement says nothing about shape: the prior weights
    assert source_weights(sources, idx[:1], lt[idx[:1]], np.array([1.0, 3.0])) == pytest.approx([0.25, 0.75])
    # two sources that both explain the measurements to within their noise keep their prior weights
    w = source_weights(np.vstack([lt, lt + 0.001 * np.arange(len(lt))]), idx, lt[idx], np.ones(2))
    assert w == pytest.approx([0.5, 0.5], abs=0.02)


def test_source_weights_fall_back_to_the_prior_when_every_source_misfits():
    from kernelcast.models.search import source_weights

    _, t = _space()
    lt = np.log2(t)
    idx = np.array([0, 5, 11, 17])
    z = lt[idx]
    # residuals about their offset: the first source 0, +-1, 0 (RSS / m = 0.5), the second +-2 (RSS / m = 4)
    s1, s2 = lt.copy(), lt.copy()
    s1[idx] += np.array([0.0, 1.0, -1.0, 0.0])
    s2[idx] += np.array([2.0, -2.0, 2.0, -2.0])
    sources = np.vstack([s1, s2])
    plain = source_weights(sources, idx, z, np.ones(2))
    ratio = ((4.0 + 0.003) / (0.5 + 0.003)) ** ((4 - 1) / 2)
    assert plain == pytest.approx([ratio / (1 + ratio), 1 / (1 + ratio)])
    # the best source's RSS / m (0.5) above misfit_var: the measurements say nothing, the prior weights
    assert source_weights(sources, idx, z, np.array([1.0, 3.0]), misfit_var=0.25) == pytest.approx([0.25, 0.75])
    # at or below it: the Bayesian weights as without
    assert source_weights(sources, idx, z, np.ones(2), misfit_var=0.5) == pytest.approx(plain)
    assert source_weights(sources, idx, z, np.ones(2), misfit_var=1.0) == pytest.approx(plain)


def _bowl(n_bx: int = 8, n_t: int = 6) -> tuple[pd.DataFrame, np.ndarray]:
    """A bigger grid than :func:`_space`: a bowl with its minimum at (256, 3) and a tilt in the tile."""
    rows, t = [], []
    for bx in [16 << i for i in range(n_bx)]:
        for tile in range(1, n_t + 1):
            rows.append({"block_size_x": bx, "tile": tile})
            t.append(100.0 * (1.0 + (math.log2(bx) - 8) ** 2 + 0.5 * (tile - 3) ** 2 + 0.1 * tile))
    return pd.DataFrame(rows), np.asarray(t)


def test_the_search_reweights_its_sources_and_follows_the_one_that_agrees():
    params, t = _bowl()
    lt = np.log2(t)
    best = int(np.argmin(t))
    # two other devices: one ranks the space as this one does (another scale and level), one reversed;
    # with equal weights their mean ranks nothing
    sources = np.vstack([2.0 ** (0.5 * lt + 4.0), 2.0 ** (-lt)])
    res = guided_search(sources, params, lambda i: t[i], 12, settle=False, seed=0)
    found = [s.index for s in res.steps].index(best) + 1
    assert res.steps[0].weights == pytest.approx([0.5, 0.5])
    assert res.steps[3].weights[0] > 0.9 and res.steps[6].weights[0] > 0.99     # the agreeing one leads
    assert found <= 4
    # the same search from a flat prior (no sources) needs more measurements
    flat = guided_search(np.ones(len(t)), params, lambda i: t[i], 12, settle=False, seed=0)
    flat_found = [s.index for s in flat.steps].index(best) + 1 if best in [s.index for s in flat.steps] else 13
    assert found < flat_found
    # the reversed source given the prior weight: it leads until the measurements overrule it
    res2 = guided_search(sources, params, lambda i: t[i], 12, settle=False, seed=0, source_prior=[1.0, 99.0])
    assert res2.steps[0].index == int(np.argmax(t)) and res2.steps[0].weights == pytest.approx([0.01, 0.99])
    assert res2.steps[-1].weights[0] > 0.99 and res2.best_us == t.min()


def test_the_fallback_keeps_the_prior_weights_while_every_source_misfits():
    """Two sources that each get every configuration wrong by up to a factor of 4 (a different
    pattern each): once the measurements show both misfitting (the best one's residual variance above
    the GP's least, ``min_var``) the fallback search keeps the prior weights where the plain one
    swings; before that, and where a source agrees with the device, it is the plain search."""
    from kernelcast.models.search import MIN_VAR, source_matrix, source_weights

    params, t = _bowl()
    lt = np.log2(t)
    k = np.arange(len(t))
    pred = np.vstack([t * 2.0 ** (2.0 * np.sin(k)), t * 2.0 ** (2.0 * np.cos(1.7 * k))])
    plain = guided_search(pred, params, lambda i: t[i], 12, settle=False, seed=1)
    fb = guided_search(pred, params, lambda i: t[i], 12, settle=False, seed=1, fallback=True)
    sources = source_matrix(pred)
    falls = 0
    for j, step in enumerate(fb.steps):
        idx = np.array([s.index for s in fb.steps[:j]])
        if j < 2:
            assert step.weights == pytest.approx([0.5, 0.5])
            continue
        r = lt[idx][None, :] - sources[:, idx]
        misfit = float((((r - r.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) / len(idx)).min())
        want = [0.5, 0.5] if misfit > MIN_VAR else source_weights(sources, idx, lt[idx], np.ones(2))
        assert step.weights == pytest.approx(want)
        falls += misfit > MIN_VAR
    assert falls >= 5                                     # both misfit from some measurement on
    assert [s.index for s in plain.steps[:3]] == [s.index for s in fb.steps[:3]]
    assert sum(abs(s.weights[0] - 0.5) > 0.1 for s in plain.steps[7:]) >= 3    # the plain weights swing there
    # one source is right: its residual variance is the noise floor, never above min_var: the same search
    good = np.vstack([2.0 ** (lt + 3.0), 2.0 ** (-lt)])
    one = guided_search(good, params, lambda i: t[i], 10, settle=False, seed=0)
    two = guided_search(good, params, lambda i: t[i], 10, settle=False, seed=0, fallback=True)
    assert [s.index for s in one.steps] == [s.index for s in two.steps]
    assert [s.weights for s in one.steps] == [s.weights for s in two.steps]


def test_one_source_is_the_single_prediction():
    params, t = _bowl()
    pred = t * (1.0 + 0.3 * np.sin(np.arange(len(t))))     # a model with the shape a little wrong
    one = guided_search(pred, params, lambda i: t[i], 15, settle=False, seed=2)
    rows = guided_search(pred[None, :], params, lambda i: t[i], 15, settle=False, seed=2)
    assert [s.index for s in rows.steps] == [s.index for s in one.steps]
    assert one.steps[0].weights is None and rows.steps[0].weights == [1.0]


def test_bad_source_arguments():
    params, t = _space()
    with pytest.raises(ValueError, match="source_prior"):
        guided_search(np.vstack([t, t]), params, lambda i: t[i], 3, source_prior=[1.0])
    with pytest.raises(ValueError, match="source_prior"):
        guided_search(np.vstack([t, t]), params, lambda i: t[i], 3, source_prior=[1.0, 0.0])
    with pytest.raises(ValueError, match="configurations"):
        guided_search(np.vstack([t, t])[:, :-1], params, lambda i: t[i], 3)


def _write_grid_cache(tmp_path, name: str, params, times: np.ndarray) -> str:
    """A Kernel Tuner cache of kernel ``k`` on device ``name``: ``times`` in microseconds (the cache's milliseconds)."""
    cache = {f"{bx},{tile}": {"block_size_x": int(bx), "tile": int(tile), "time": float(ti) / 1e3}
             for (bx, tile), ti in zip(params.itertuples(index=False), times)}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"device_name": name, "kernel_name": "k", "problem_size": [4096],
                                "tune_params_keys": ["block_size_x", "tile"],
                                "tune_params": {"block_size_x": sorted({int(b) for b in params.block_size_x}),
                                                "tile": sorted({int(x) for x in params.tile})},
                                "objective": "time", "cache": cache}))
    return str(path)


def test_the_benchmark_weights_the_other_device_that_agrees(tmp_path):
    """``others`` on a pair whose kernel has two other devices: one with this device's order (half
    as fast), one reversed; every run records the weights, the agreeing device's near 1."""
    from kernelcast.bench.tuning import read_spec, run_pair

    params, t = _bowl()

    def write(name: str, times: np.ndarray) -> str:
        return _write_grid_cache(tmp_path, name, params, times)

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pairs": [{"name": "k A", "cache": write("A", t)},
                                          {"name": "k B", "cache": write("B", 2.0 * t)},
                                          {"name": "k C", "cache": write("C", 1e6 / t)}]}))
    pair = read_spec(str(spec))[0]
    out = run_pair(pair, [], ["others", "others:mean"], 3, 12, lambda msg: None)
    got = out["searchers"]["kernelcast:others"]
    assert set(got["sources"]) == {"k B", "k C"} and got["sources"]["k B"] > 0.99
    assert all(r["weights_end"][0] > 0.99 for r in got["traces"])
    assert got["median_reach_1"] is not None and got["median_reach_1"] <= 4
    # one prior, the unweighted mean of an agreeing and a reversed device: no weights, and slower here
    mean = out["searchers"]["kernelcast:others:mean"]
    assert "sources" not in mean and "weights_end" not in mean["traces"][0]
    assert mean["median_reach_1"] is None or mean["median_reach_1"] > got["median_reach_1"]


def test_the_model_as_one_more_source_where_the_other_devices_disagree(tmp_path):
    """``others+model``: the kernel's only other device orders the space in reverse, this device's
    model (an ``evaluate`` run's out-of-fold analytical predictions of the imported rows) right up
    to a factor, the GPU-disjoint tabular column flat: the weight goes to the model, the search
    finds the optimum in a few measurements where the other device alone does not."""
    from kernelcast.bench.tuning import model_sources, read_spec, run_pair, source_names, valid_searcher
    from kernelcast.datagen.dataset import read_dataset

    from kernelcast.cli import main

    params, t = _bowl()

    def write(name: str, times: np.ndarray) -> str:
        return _write_grid_cache(tmp_path, name, params, times)

    a, b = write("A", t), write("B", 1e6 / t)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float *a, int n) { int i = blockIdx.x * block_size_x + threadIdx.x;\n"
                   "  if (i < n) { float x = a[i]; for (int j = 0; j < tile; j++) x = x * 1.5f + 1.0f; a[i] = x; } }\n")
    ds = tmp_path / "ds"
    assert main(["dataset", "import-kt", a, "--kernel", str(src), "--out", str(ds), "--arg", "n=4096"]) == 0
    frame = read_dataset(ds)
    truth = dict(zip([f"{bx},{tile}" for bx, tile in params.itertuples(index=False)], t))
    right = [3.0 * truth[str(k)] for k in frame["kt_key"]]
    pd.DataFrame({"row_key": frame["row_key"], "analytical_us": right}).to_parquet(tmp_path / "an.parquet")
    pd.DataFrame({"row_key": frame["row_key"], "tabular_us": 50.0}).to_parquet(tmp_path / "tab.parquet")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pairs": [
        {"name": "k A", "cache": a, "dataset": str(ds), "analytical_oof": str(tmp_path / "an.parquet"),
         "oof": str(tmp_path / "tab.parquet")},
        {"name": "k B", "cache": b}]}))
    pair = read_spec(str(spec))[0]
    assert model_sources(pair, "others+model") == ["analytical", "oof:tabular_us"]
    assert model_sources({"dataset": "d"}, "others+model") == ["analytical"]    # no oof: the analytical model
    assert model_sources({}, "others+model") == []                     # no model: the other devices alone
    assert source_names(pair, "others+model") == ["k B", "analytical", "oof:tabular_us"]
    assert source_names(pair, "others") == ["k B"]
    assert valid_searcher("others+model") and valid_searcher("others+analytical+oof:tabular_us")
    assert not valid_searcher("others+") and not valid_searcher("others+random") and not valid_searcher("model")
    out = run_pair(pair, [], ["others", "others+model"], 3, 12, lambda msg: None)
    got = out["searchers"]["kernelcast:others+model"]
    assert list(got["sources"]) == ["k B", "analytical", "oof:tabular_us"]
    assert got["sources"]["analytical"] > 0.99
    assert all(len(r["weights_end"]) == 3 and r["weights_end"][1] > 0.99 for r in got["traces"])
    assert got["median_reach_1"] is not None and got["median_reach_1"] <= 4
    alone = out["searchers"]["kernelcast:others"]
    assert alone["median_reach_1"] is None or alone["median_reach_1"] > got["median_reach_1"]
    # the fallback variants: the same sources, their names and the same figures where a source agrees
    assert valid_searcher("others:fallback") and valid_searcher("others+model:fallback")
    assert valid_searcher("others+analytical+oof:tabular_us:fallback")
    assert not valid_searcher("analytical:fallback") and not valid_searcher("others:mean:fallback")
    assert not valid_searcher("none:fallback") and not valid_searcher(":fallback")
    assert source_names(pair, "others+model:fallback") == ["k B", "analytical", "oof:tabular_us"]
    fb = run_pair(pair, [], ["others+model:fallback"], 3, 12, lambda msg: None)["searchers"]
    assert list(fb["kernelcast:others+model:fallback"]["sources"]) == ["k B", "analytical", "oof:tabular_us"]
    assert [r["best_so_far"] for r in fb["kernelcast:others+model:fallback"]["traces"]] == \
        [r["best_so_far"] for r in got["traces"]]

"""Simulated tuning (models.simulate, ``kernelcast tune --simulate``) on caches written here, with
known optima, and Kernel Tuner-style restrictions with known answers."""

from __future__ import annotations

import gzip
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from kernelcast.bench.tuning import Space
from kernelcast.models.simulate import load_space, simulate

from kernelcast.errors import InputError, UsageError
from kernelcast.restrictions import restriction_mask

from .cli_run import run_here

BX = [16, 32, 64, 128, 256, 512]
BY = [1, 2, 4, 8]
TILE = [1, 2, 3, 4]


def _time(bx: int, by: int, tile: int) -> float:
    """A bowl in log2 block sizes and the tile, its minimum (50 us) at (128, 2, 3)."""
    return 50.0 * (1.0 + 0.6 * (math.log2(bx) - 7) ** 2 + 0.8 * (math.log2(by) - 1) ** 2 + 0.5 * (tile - 3) ** 2)


@pytest.fixture
def cache(tmp_path):
    """A Kernel Tuner cache (gzip) of 96 configurations; two failed."""
    recs = {}
    for bx, by, tile in itertools.product(BX, BY, TILE):
        t = _time(bx, by, tile)
        recs[f"{bx},{by},{tile}"] = {"block_size_x": bx, "block_size_y": by, "tile": tile, "time": t / 1e3,
                                     "times": [t / 1e3] * 3}
    recs["512,8,4"]["time"] = "RuntimeFailedConfig"
    recs["16,1,1"]["time"] = "CompilationFailedConfig"
    doc = {"device_name": "GPU", "kernel_name": "k", "problem_size": [4096],
           "tune_params_keys": ["block_size_x", "block_size_y", "tile"],
           "tune_params": {"block_size_x": BX, "block_size_y": BY, "tile": TILE}, "objective": "time", "cache": recs}
    path = tmp_path / "cache.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_load_space_reads_the_cache(cache):
    sp = load_space(str(cache))
    assert len(sp.keys) == 96 and sp.names == ["block_size_x", "block_size_y", "tile"]
    assert sp.optimum == pytest.approx(50.0)
    assert int(np.isnan(sp.time_us).sum()) == 2
    assert sp.key_of({"block_size_x": 128, "block_size_y": 2, "tile": 3}) in sp.keys


def test_restrictions_as_kernel_tuner_states_them():
    p = pd.DataFrame({"block_size_x": [16, 32, 64, 256], "block_size_y": [1, 8, 16, 8], "tile": [1, 2, 1, 3]})
    assert restriction_mask(p, ["32 <= block_size_x * block_size_y <= 1024"]).tolist() == [False, True, True, False]
    assert restriction_mask(p, ["tile > 1 or block_size_x % 32 != 0"]).tolist() == [True, True, False, True]
    assert restriction_mask(p, ["not (tile == 1)", "block_size_y in (8, 16)"]).tolist() == [False, True, False, True]
    assert restriction_mask(p, ["max(block_size_x, 100) // 100 == 1"]).tolist() == [True, True, True, False]
    assert restriction_mask(p, []).all()


@pytest.mark.parametrize("expr, msg", [("bogus < 3", "unknown parameter 'bogus'"), ("tile >", "not an expression"),
                                       ("__import__('os').system('true')", "not allowed"),
                                       ("tile.real > 0", "not allowed"), ("2 ** 4096 > tile", "exponent")])
def test_bad_restrictions(expr, msg):
    p = pd.DataFrame({"tile": [1, 2]})
    with pytest.raises(UsageError, match=msg):
        restriction_mask(p, [expr])


def test_the_search_finds_the_optimum_of_a_known_function(cache):
    sp = load_space(str(cache))
    for seed in range(3):
        sim = simulate(sp, np.ones(len(sp.keys)), 30, seed=seed)      # no model: the measurements alone
        assert sim.fraction_of_optimum == 1.0
        assert sim.choice["config"] == {"block_size_x": 128, "block_size_y": 2, "tile": 3}
        assert sim.measurements_to(0.0) <= 30
    # a model right up to a factor finds it at once
    good = np.array([_time(*map(int, k.split(","))) * 7.0 for k in sp.keys])
    sim = simulate(sp, good, 5)
    assert sim.trace[0].config == {"block_size_x": 128, "block_size_y": 2, "tile": 3}
    assert sim.measurements_to(0.01) == 1 and sim.trace[0].error_pct == pytest.approx(600.0)


def test_a_restricted_space_keeps_its_own_optimum(cache):
    sp = load_space(str(cache))
    sub = sp.subset(restriction_mask(sp.params, ["tile != 3"]))
    assert len(sub.keys) == 72 and sub.optimum == pytest.approx(_time(128, 2, 2))
    bench = Space(str(cache), ["tile != 3"], work=cache.parent / "kt")
    assert bench.optimum == pytest.approx(_time(128, 2, 2)) and bench.path.endswith("cache.json")
    with pytest.raises(InputError, match="no measured"):
        Space(str(cache), ["block_size_x > 4096"])


def test_tune_simulate_prints_the_trace_and_writes_it(cache, tmp_path):
    trace, plot = tmp_path / "t.json", tmp_path / "t.png"
    r = run_here("tune", "--simulate", str(cache), "--budget", "30", "--seed", "2", "--no-settle",
                 "--restrictions", "block_size_x * block_size_y <= 1024", "--trace", str(trace), "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    assert "84 configurations (96 before the restrictions)" in r.stdout   # 256x8, 512x4, 512x8 dropped
    assert "choice: block_size_x=128,block_size_y=2,tile=3: 50 us" in r.stdout
    assert "fraction of the optimum: 1.000" in r.stdout
    doc = json.loads(trace.read_text())
    assert doc["measurements"] == 30 and doc["fraction_of_optimum"] == 1.0 and doc["stopped"] == "budget"
    assert doc["optimum"]["config"] == {"block_size_x": 128, "block_size_y": 2, "tile": 3}
    bests = [s["best_us"] for s in doc["trace"] if s["best_us"] is not None]
    assert bests == sorted(bests, reverse=True) and len({s["step"] for s in doc["trace"]}) == 30
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_tune_simulate_restrictions_from_a_spec(cache, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"pairs": [{"name": "k", "cache": cache.name, "restrictions": ["tile == 1"]}]}))
    r = run_here("tune", "--simulate", str(cache), "--budget", "5", "--restrictions", str(spec), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["restrictions"] == ["tile == 1"] and doc["configurations"] == 24
    assert all(s["config"]["tile"] == 1 for s in doc["trace"])


@pytest.mark.parametrize("args, msg", [
    (["--simulate", "{tmp}/missing.json"], "no such cache file"),
    (["--simulate", "{cache}", "--budget", "0"], "--budget"),
    (["--simulate", "{cache}", "--restrictions", "block_size_x > 100000"], "leave 0 of 96"),
    (["--simulate", "{cache}", "--restrictions", "blocksize < 3"], "unknown parameter 'blocksize'"),
    (["--simulate", "{cache}", "--profile", "a100-pcie"], "--dataset"),
    (["--simulate", "{cache}", "--plot", "{tmp}/no/dir/p.png"], "no such directory"),
    (["--budget", "5"], "goes with --simulate"),
    (["--fallback"], "goes with --simulate"),
    (["--simulate", "{cache}", "--fallback"], "--fallback weighs several sources: give --prior"),
])
def test_tune_simulate_bad_input_exits_2_and_writes_nothing(cache, tmp_path, args, msg):
    trace = tmp_path / "t.json"
    argv = [a.format(tmp=tmp_path, cache=cache) for a in args]
    r = run_here("tune", *argv, "--trace", str(trace)) if args[0] not in ("--budget", "--fallback") else \
        run_here("tune", *argv)
    assert r.returncode == 2
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not trace.exists() and r.stdout == ""


def _cache_of(path, times: dict[str, float | str], names=("block_size_x", "block_size_y", "tile"), kernel="k",
              device=None):
    """A Kernel Tuner cache of the given times (us) by key, the parameters the key's values."""
    recs = {k: {**{n: int(v) for n, v in zip(names, k.split(","))}, "time": t if isinstance(t, str) else t / 1e3}
            for k, t in times.items()}
    doc = {"device_name": device or path.stem, "kernel_name": kernel, "problem_size": [4096],
           "tune_params_keys": list(names), "tune_params": {}, "objective": "time", "cache": recs}
    path.write_text(json.dumps(doc))
    return path


def _grid_times(f) -> dict[str, float]:
    return {f"{bx},{by},{tile}": f(_time(bx, by, tile)) for bx, by, tile in itertools.product(BX, BY, TILE)}


def test_tune_simulate_weights_several_priors_and_follows_the_one_that_agrees(cache, tmp_path):
    """Two other devices as priors: B orders the configurations as the searched device does (twice as
    slow), C in reverse. Their weights start equal and move to B; the optimum is found in a few
    measurements."""
    b = _cache_of(tmp_path / "B.json", _grid_times(lambda t: 2.0 * t))
    c = _cache_of(tmp_path / "C.json", _grid_times(lambda t: 1e6 / t))
    trace = tmp_path / "t.json"
    r = run_here("tune", "--simulate", str(cache), "--prior", str(b), "--prior", str(c), "--budget", "8",
                 "--no-settle", "--trace", str(trace))
    assert r.returncode == 0, r.stderr
    assert "2 sources weighted by the measurements: 1 B, 2 C" in r.stdout
    assert "(0.50 0.50)" in r.stdout                     # equal weights before two measurements
    assert "final weights: B 1.00, C 0.00" in r.stdout
    doc = json.loads(trace.read_text())
    assert doc["sources"] == ["B", "C"] and doc["model"] == ""
    assert doc["trace"][0]["weights"] == [0.5, 0.5] and math.isnan(doc["trace"][0]["predicted_us"])
    assert doc["trace"][-1]["weights"][0] > 0.99
    assert doc["measurements_to_1pct"] is not None and doc["measurements_to_1pct"] <= 4
    assert doc["choice"]["config"] == {"block_size_x": 128, "block_size_y": 2, "tile": 3}
    # one prior, no model: one source, its weight 1
    r = run_here("tune", "--simulate", str(cache), "--prior", str(b), "--budget", "3", "--json")
    doc = json.loads(r.stdout)
    assert doc["sources"] == ["B"] and doc["trace"][0]["weights"] == [1.0]
    assert doc["trace"][0]["config"] == {"block_size_x": 128, "block_size_y": 2, "tile": 3}


def test_tune_simulate_fallback_keeps_equal_weights_while_both_priors_misfit(cache, tmp_path):
    """Two priors that each misplace the configurations by up to a factor of 4, in different
    patterns: with --fallback the weights stay 0.50 0.50 from the step on which the best prior's
    residual variance exceeds the search's least shape variance; the trace is the library's search
    with ``fallback`` step for step (the benchmark's ``others:fallback``), and it records the mode."""
    from kernelcast.models.search import guided_search

    keys = list(_grid_times(lambda t: t))
    wiggle = {k: j for j, k in enumerate(keys)}
    b = _cache_of(tmp_path / "B.json", {k: t * 2.0 ** (2.0 * math.sin(wiggle[k])) for k, t in
                                        _grid_times(lambda t: t).items()})
    c = _cache_of(tmp_path / "C.json", {k: t * 2.0 ** (2.0 * math.cos(1.7 * wiggle[k])) for k, t in
                                        _grid_times(lambda t: t).items()})
    args = ("tune", "--simulate", str(cache), "--prior", str(b), "--prior", str(c), "--budget", "12", "--no-settle",
            "--json")
    text = run_here(*args[:-1], "--fallback")
    assert text.returncode == 0, text.stderr
    assert "2 sources weighted by the measurements: 1 B, 2 C (equal while none explains them)" in text.stdout
    r, plain = run_here(*args, "--fallback"), run_here(*args)
    assert r.returncode == 0 and plain.returncode == 0, r.stderr + plain.stderr
    doc, pdoc = json.loads(r.stdout), json.loads(plain.stdout)
    assert doc["fallback"] is True and pdoc["fallback"] is False
    w = [s["weights"] for s in doc["trace"]]
    assert w[0] == [0.5, 0.5] and w[1] == [0.5, 0.5]
    assert sum(x == [0.5, 0.5] for x in w[2:]) >= 5                         # held equal once both misfit
    assert [s["weights"] for s in pdoc["trace"]] != w
    sp = load_space(str(cache))
    from kernelcast.models.simulate import prior_times

    pred = np.vstack([prior_times(sp, load_space(str(b))), prior_times(sp, load_space(str(c)))])
    lib = guided_search(pred, sp.params, lambda i: float(sp.time_us[i]), 12, settle=False, fallback=True)
    assert [s["config"] for s in doc["trace"]] == [
        {n: int(sp.params.iat[s.index, j]) for j, n in enumerate(sp.names)} for s in lib.steps]
    assert w == [pytest.approx(s.weights) for s in lib.steps]


def _imported(cache, tmp_path):
    """The cache imported with a CUDA kernel of its tune parameters (the rows a model predicts)."""
    from kernelcast.cli import main

    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float *a, int n) { int i = (blockIdx.x * block_size_y + threadIdx.y) * "
                   "block_size_x + threadIdx.x;\n  if (i < n) { float x = a[i]; for (int j = 0; j < tile; j++) "
                   "x = x * 1.5f + 1.0f; a[i] = x; } }\n")
    ds = tmp_path / "ds"
    assert main(["dataset", "import-kt", str(cache), "--kernel", str(src), "--out", str(ds), "--arg", "n=4096"]) == 0
    return ds


def test_tune_simulate_the_models_prediction_is_one_more_source(cache, tmp_path):
    """With --profile (and the imported rows) the analytical model of the searched device is the last
    source, weighted with the priors."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.models.simulate import dataset_rows, load_space, prior_times, space_predictions

    ds = _imported(cache, tmp_path)
    b = _cache_of(tmp_path / "B.json", _grid_times(lambda t: 2.0 * t))
    r = run_here("tune", "--simulate", str(cache), "--dataset", str(ds), "--profile", "a100-pcie", "--prior", str(b),
                 "--budget", "4", "--no-settle", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["sources"][0] == "B" and doc["sources"][1].startswith("analytical (") and len(doc["sources"]) == 2
    assert all(len(s["weights"]) == 2 for s in doc["trace"]) and doc["trace"][0]["weights"] == [0.5, 0.5]
    # the model's row is its prediction of every configuration
    sp = load_space(str(cache))
    pred = space_predictions(sp, load_profile("a100-pcie"), frame=dataset_rows(str(ds)))
    # blocks over the A100's 1,024 work-items cannot run: no prediction
    runnable = np.array([int(k.split(",")[0]) * int(k.split(",")[1]) <= 1024 for k in sp.keys])
    assert runnable.sum() == 84 and not np.isfinite(pred[~runnable]).any()
    assert np.isfinite(pred[runnable]).sum() >= 82 and np.ptp(pred[np.isfinite(pred)]) > 0
    assert prior_times(sp, load_space(str(b)))[sp.keys.index("128,2,3")] == pytest.approx(100.0)


@pytest.mark.parametrize("which, msg", [
    ("missing", "no such cache file"),
    ("other_kernel", "not a prior of this kernel: its tune parameters"),
    ("other_name", "not a prior of this kernel: kernel 'q'"),
    ("disjoint", "no configuration in common"),
    ("itself", "the searched cache itself"),
])
def test_tune_simulate_bad_priors_exit_2_and_write_nothing(cache, tmp_path, which, msg):
    paths = {
        "missing": tmp_path / "missing.json",
        "other_kernel": _cache_of(tmp_path / "D.json", {"1,2": 5.0, "2,2": 6.0}, names=("x", "y")),
        "other_name": _cache_of(tmp_path / "E.json", _grid_times(lambda t: t), kernel="q"),
        "disjoint": _cache_of(tmp_path / "F.json", {"1000,1,1": 5.0, "2000,1,1": 6.0}),
        "itself": cache,
    }
    trace = tmp_path / "t.json"
    r = run_here("tune", "--simulate", str(cache), "--prior", str(paths[which]), "--budget", "3", "--trace", str(trace))
    assert r.returncode == 2
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not trace.exists() and r.stdout == ""


def test_tune_simulate_a_model_of_several_gpus_predicts_with_the_profile_given(cache, tmp_path):
    """The bundled GPU model (trained on several GPUs) ranks the cache's configurations with
    ``--profile``'s device, as ``predict`` does, and needs one."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.models.bundled import BUNDLED_GPU_DIR, with_profile
    from kernelcast.models.simulate import dataset_rows, load_space, space_predictions
    from kernelcast.models.tabular import TabularPredictor

    ds = _imported(cache, tmp_path)
    sp = load_space(str(cache))
    first = {}
    for prof in ("rtx-a4000", "a100-pcie"):
        r = run_here("tune", "--simulate", str(cache), "--dataset", str(ds), "--model", str(BUNDLED_GPU_DIR),
                     "--profile", prof, "--budget", "1", "--no-settle", "--json")
        assert r.returncode == 0, r.stderr
        step = json.loads(r.stdout)["trace"][0]
        p = load_profile(prof)
        want = space_predictions(sp, p, with_profile(TabularPredictor.load(BUNDLED_GPU_DIR), p),
                                 frame=dataset_rows(str(ds)))
        key = ",".join(str(step["config"][k]) for k in ("block_size_x", "block_size_y", "tile"))
        assert step["predicted_us"] == pytest.approx(want[sp.keys.index(key)], rel=1e-9)
        first[prof] = step["predicted_us"]
    assert first["rtx-a4000"] != pytest.approx(first["a100-pcie"], rel=1e-3)
    r = run_here("tune", "--simulate", str(cache), "--dataset", str(ds), "--model", str(BUNDLED_GPU_DIR), "--json")
    assert r.returncode == 2 and "trained on several devices: give --profile" in r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""

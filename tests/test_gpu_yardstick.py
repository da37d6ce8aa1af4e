"""The yardstick over devices: splits that hold out devices or kernels and devices at once, scoring
without folds, the per (kernel, device) figures against hand-computed values, and ``kernelcast
evaluate`` end to end on Kernel Tuner caches of two devices written here and imported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import kernelcast.bench.gpu_model as gpu_model
import numpy as np
import pandas as pd
import pytest
from kernelcast.datagen.frame import DataError
from kernelcast.train.evaluate import EvaluateOptions
from kernelcast.train.oof import build_groups, kernel_table, make_splits, problem_keys
from kernelcast.train.pairs import model_pair_figures, pair_figures

import kernelcast.cli as cli
from kernelcast.errors import UsageError

_SRC = "kernel void {name}(global float *x) {{ x[get_global_id(0)] *= {c}.0f; }}\n"


def _frame(kernels: int = 4, devices: tuple[str, ...] = ("kt:A", "kt:B", "kt:C"), configs: int = 3) -> pd.DataFrame:
    rows = []
    for k in range(kernels):
        for d in devices:
            for c in range(configs):
                rows.append({"kernel_id": f"k{k}", "kernel_name": f"kern{k}", "kernel_origin": f"lib/f{k}.cl",
                             "source": _SRC.format(name=f"kern{k}", c=k), "device": d, "gsize": [1024],
                             "lsize": [32 << c], "args": [], "problem_id": "p"})
    return pd.DataFrame(rows)


def test_gpu_split_holds_out_whole_devices():
    f = _frame()
    s = make_splits(f, build_groups(kernel_table(f)), 5, 0, "gpu")
    assert s.n == 3                                  # min(folds, devices)
    for i in range(s.n):
        test_dev = set(f["device"][s.test(i)])
        assert len(test_dev) == 1
        assert not test_dev & set(f["device"][s.train(i)])
        assert len(s.train(i)) + len(s.test(i)) == len(f)
    assert sorted(np.concatenate([s.test(i) for i in range(s.n)]).tolist()) == list(range(len(f)))


def test_both_split_trains_on_neither_the_kernels_nor_the_devices_of_the_fold():
    f = _frame()
    s = make_splits(f, build_groups(kernel_table(f)), 2, 0, "both")
    assert s.n == 2 * 2
    tested = np.concatenate([s.test(i) for i in range(s.n)])
    assert sorted(tested.tolist()) == list(range(len(f)))        # every row tested exactly once
    for i in range(s.n):
        te, tr = s.test(i), s.train(i)
        if not len(te):
            continue
        assert not set(f["kernel_id"][te]) & set(f["kernel_id"][tr])
        assert not set(f["device"][te]) & set(f["device"][tr])
        # everything that shares neither is used for training
        other = (~f["kernel_id"].isin(set(f["kernel_id"][te]))) & (~f["device"].isin(set(f["device"][te])))
        assert set(np.flatnonzero(other)) == set(tr)


def test_kernel_split_is_the_grouped_fold_split():
    f = _frame()
    g = build_groups(kernel_table(f))
    s = make_splits(f, g, 2, 3, "kernel")
    for i in range(s.n):
        assert not set(f["kernel_id"][s.test(i)]) & set(f["kernel_id"][s.train(i)])
        assert set(f["device"][s.train(i)]) == {"kt:A", "kt:B", "kt:C"}


def test_holding_out_devices_needs_two():
    f = _frame(devices=("kt:A",))
    with pytest.raises(DataError, match="one"):
        make_splits(f, build_groups(kernel_table(f)), 2, 0, "gpu")


def test_problems_are_per_device_only_when_there_are_several():
    one, two = _frame(devices=("kt:A",)), _frame(devices=("kt:A", "kt:B"))
    assert problem_keys(one)[0] == "k0|p"
    keys = problem_keys(two)
    assert keys[0] == "kt:A|k0|p" and len(set(keys)) == 2 * 4


def test_scoring_options():
    EvaluateOptions(folds=0, models=("analytical",))
    with pytest.raises(UsageError, match="fitted per fold"):
        EvaluateOptions(folds=0, models=("analytical", "tabular"))
    with pytest.raises(UsageError, match="at least 2"):
        EvaluateOptions(folds=1)
    with pytest.raises(UsageError, match="group-by"):
        EvaluateOptions(group_by="device")
    with pytest.raises(UsageError, match="saved"):
        EvaluateOptions(models=("analytical", "saved"))


def test_pair_figures_by_hand():
    true = np.array([10.0, 20.0, 40.0, 80.0])
    pred = np.array([20.0, 10.0, 40.0, 160.0])      # APE 100, 50, 0, 100; log2 +1, -1, 0, +1
    fig = model_pair_figures(pred, true, np.array(["p"] * 4), 0.05)
    assert fig["mape"] == pytest.approx(62.5) and fig["median_ape"] == pytest.approx(75.0)
    assert fig["within_2x_pct"] == pytest.approx(100.0) and fig["median_log2"] == pytest.approx(0.5)
    # predicted best: row 1 (10), measured 20 against the best 10: regret 2, not top-1
    assert fig["regret_median"] == pytest.approx(2.0) and fig["top1_within"] == 0.0
    assert fig["spearman"] == pytest.approx(0.8)


def test_pairs_and_their_median():
    f = _frame(kernels=1, devices=("kt:A", "kt:B"), configs=4)
    y = np.tile([10.0, 20.0, 40.0, 80.0], 2)
    p = np.concatenate([[10.0, 20.0, 40.0, 80.0], [20.0, 40.0, 80.0, 160.0]])   # exact, then 2x high
    g = build_groups(kernel_table(f))
    out = pair_figures(f, {"m": p}, ["m"], y, g, f["device"].to_numpy(), None)
    assert out["count"] == 2
    a, b = out["list"]
    assert a["pair"] == "kern0 @ A" and b["pair"] == "kern0 @ B"
    assert a["models"]["m"]["mape"] == 0.0 and b["models"]["m"]["mape"] == pytest.approx(100.0)
    assert b["models"]["m"]["median_log2"] == pytest.approx(1.0) and b["models"]["m"]["top1_within"] == 1.0
    assert out["overall"]["m"]["mape"] == pytest.approx(50.0)
    assert out["overall"]["m"]["pairs_top1_pct"] == 100.0


# ---------------------------------------------------------------------------------------------
# end to end: two devices' caches of one kernel, imported and evaluated

_KERNEL = ("__kernel void scale(__global float *out, __global const float *in, const int n) {\n"
           "  int i = get_global_id(0);\n"
           "  if (i < n)\n    out[i] = in[i] * (float)tile;\n}\n")


def _cache(path: Path, device: str, slow: float) -> None:
    cache = {}
    for i, (bx, tile) in enumerate((bx, t) for bx in (32, 64, 128, 256) for t in (1, 2)):
        t_ms = slow * (1.0 + 0.25 * i)
        cache[f"{bx},{tile}"] = {"block_size_x": bx, "tile": tile, "time": t_ms, "times": [t_ms] * 3,
                                 "energy": 0.05 * t_ms if device == "GPU-A" else None}
        if cache[f"{bx},{tile}"]["energy"] is None:
            del cache[f"{bx},{tile}"]["energy"]
    path.write_text(json.dumps({"device_name": device, "kernel_name": "scale", "problem_size": [65536],
                                "tune_params_keys": ["block_size_x", "tile"],
                                "tune_params": {"block_size_x": [32, 64, 128, 256], "tile": [1, 2]},
                                "objective": "time", "cache": cache}))


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("kt")
    (d / "scale.cl").write_text(_KERNEL)
    out = []
    for name, slow in (("GPU-A", 1.0), ("GPU-B", 3.0)):
        _cache(d / f"{name}.json", name, slow)
        ds = d / f"ds-{name}"
        assert cli.main(["dataset", "import-kt", str(d / f"{name}.json"), "--kernel", str(d / "scale.cl"),
                         "--out", str(ds)]) == 0
        out.append(ds)
    return out


def test_score_one_cache_without_folds(two_devices, tmp_path, capsys):
    out = tmp_path / "ev"
    assert cli.main(["evaluate", "--data", str(two_devices[0]), "--folds", "0", "--profile", "a100",
                     "--out", str(out), "--no-plots", "--quiet", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["splits"]["by"].startswith("none") and m["models"] == ["analytical"]
    assert m["rows"] == 8 and m["pairs"]["count"] == 1
    pair = m["pairs"]["list"][0]
    assert pair["pair"] == "scale @ GPU-A" and pair["models"]["analytical"]["rows"] == 8
    assert set(pair["analytical_parts"]["parts"]) >= {"compute", "memory", "latency"}
    oof = pd.read_parquet(out / "oof.parquet")
    assert sorted(oof["measured_us"].round(6)) == sorted(round(1e3 * (1.0 + 0.25 * i), 6) for i in range(8))
    assert np.isfinite(oof["analytical_us"]).all()
    assert "energy" in pair and pair["energy"]["rows"] == 8


def test_devices_held_out_with_a_profile_each(two_devices, tmp_path, capsys):
    out = tmp_path / "ev"
    assert cli.main(["evaluate", "--data", str(two_devices[0]), "--data", str(two_devices[1]),
                     "--group-by", "gpu", "--models", "analytical,tabular", "--profile", "GPU-A=a100",
                     "--profile", "GPU-B=rtx4090", "--shots", "0,1", "--out", str(out), "--no-plots", "--quiet",
                     "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["splits"]["by"] == "gpu" and m["splits"]["folds"] == 2
    assert sorted(m["splits"]["devices"]) == ["kt:GPU-A", "kt:GPU-B"]
    assert sorted(p["pair"] for p in m["pairs"]["list"]) == ["scale @ GPU-A", "scale @ GPU-B"]
    assert set(m["profile"]) == {"GPU-A", "GPU-B"}
    oof = pd.read_parquet(out / "oof.parquet")
    assert np.isfinite(oof["tabular_us"]).all()       # each device predicted from the other
    for f in m["folds"]:
        assert f["training_rows"] == 8


def test_shots_correct_a_kernel_on_its_own_device(two_devices, tmp_path, capsys):
    """One kernel on two devices, GPU-B 3x slower than GPU-A on every configuration: a shot is
    measured on one device and corrects that device's rows only, so each pair's 1-shot median APE
    is one a shot of its own device gives (a shot of the other device would carry its 3x along)."""
    out = tmp_path / "ev"
    assert cli.main(["evaluate", "--data", str(two_devices[0]), "--data", str(two_devices[1]), "--folds", "0",
                     "--profile", "GPU-A=a100", "--profile", "GPU-B=rtx4090", "--shots", "0,1", "--out", str(out),
                     "--no-plots", "--quiet", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    oof = pd.read_parquet(out / "oof.parquet")
    for pair in m["pairs"]["list"]:
        rows = oof[oof["device"] == pair["device"]]
        assert len(rows) == 8
        pred, true = rows["analytical_us"].to_numpy(), rows["measured_us"].to_numpy()
        own = [float(np.median(np.abs(np.delete(pred * true[j] / pred[j], j) / np.delete(true, j) - 1)) * 100)
               for j in range(len(rows))]
        got = pair["models"]["analytical"]["shot1_median_ape"]
        assert min(abs(got - x) for x in own) < 1e-6, (pair["pair"], got, own)


@pytest.mark.parametrize("argv, message", [
    (["--folds", "0", "--models", "tabular"], "fitted per fold"),
    (["--folds", "1"], "at least 2"),
    (["--group-by", "gpu", "--profile", "a100"], "one"),                  # one device cannot be held out
    (["--profile", "a100", "--profile", "h100"], "give it once"),
    (["--profile", "=a100"], "DEVICE=PROFILE"),
])
def test_bad_input_exits_2_and_writes_nothing(two_devices, tmp_path, capsys, argv, message):
    out = tmp_path / "ev"
    code = cli.main(["evaluate", "--data", str(two_devices[0]), "--out", str(out), "--quiet", "--no-plots",
                     *([] if any(a.startswith("--profile") for a in argv) else ["--profile", "a100"]), *argv])
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_several_devices_without_their_profiles_is_refused(two_devices, tmp_path, capsys):
    out = tmp_path / "ev"
    code = cli.main(["evaluate", "--data", str(two_devices[0]), "--data", str(two_devices[1]), "--profile",
                     "GPU-A=a100", "--out", str(out), "--quiet"])
    assert code == 2 and "no profile for device" in capsys.readouterr().err
    assert not out.exists()


def test_gpu_model_evaluate_writes_every_scored_row(two_devices, tmp_path):
    ys = tmp_path / "ys"
    for ds, gpu in zip(two_devices, ("A100", "A4000")):
        shutil.copytree(ds, ys / "scale" / gpu)
    out = tmp_path / "ev"
    m = gpu_model.evaluate_model(ys, out, [], "gpu", 2, rows_per_pair=0, models="analytical")
    assert m["sampling"]["pairs"] == [{"benchmark": "scale", "gpu": g, "ok_rows": 8, "rows": 8}
                                      for g in ("A100", "A4000")]
    assert sorted(p.name for p in out.iterdir()) == ["REPORT.md", "metrics.json", "oof.parquet"]
    oof = pd.read_parquet(out / "oof.parquet")
    assert sorted(oof["device"]) == ["A100"] * 8 + ["A4000"] * 8
    assert oof["row_key"].str.startswith(("scale/A100:", "scale/A4000:")).all()
    slow = oof.groupby("device")["measured_us"].median()
    assert slow["A4000"] == pytest.approx(3 * slow["A100"])
    assert np.isfinite(oof["analytical_us"]).all()


def test_sample_summary_by_hand():
    def metrics(seed, rho, tops):
        return {"sampling": {"seed": seed},
                "pairs": {"overall": {"tabular": {"spearman": rho, "median_ape": 10.0 + seed,
                                                  "pairs_top1_pct": 100.0 * sum(tops) / len(tops)}},
                          "list": [{"models": {"tabular": {"top1_within": float(t)}}} for t in tops]}}
    doc = gpu_model.sample_summary([metrics(0, 0.8, [1, 0, 0]), metrics(1, 0.9, [1, 1, 0]),
                                    metrics(2, 0.85, [0, 0, float("nan")])])
    t = doc["models"]["tabular"]
    assert doc["seeds"] == [0, 1, 2] and [p["spearman"] for p in t["per_sample"]] == [0.8, 0.9, 0.85]
    assert t["mean"]["spearman"] == pytest.approx(0.85) and t["sd"]["spearman"] == pytest.approx(0.05)
    assert t["mean"]["median_ape"] == pytest.approx(11.0)
    assert t["mean"]["within_2x_pct"] is None                   # no sample has it
    assert (t["top1_pairs"], t["pairs_scored"]) == (3, 8)      # a pair without a first pick is not scored
    assert "first pick within 5 % in 3 of 8 pairs" in gpu_model.format_samples(doc)


def test_gpu_model_evaluate_over_samples(two_devices, tmp_path, capsys):
    ys = tmp_path / "ys"
    for ds, gpu in zip(two_devices, ("A100", "A4000")):
        shutil.copytree(ds, ys / "scale" / gpu)
    out = tmp_path / "ev"
    assert gpu_model.main(["evaluate", "--yardstick", str(ys), "--out", str(out), "--models", "analytical",
                           "--folds", "2", "--rows-per-pair", "6", "--samples", "2", "--seed", "3"]) == 0
    assert "2 samples (seeds 3, 4)" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["sample-3", "sample-4", "samples.json"]
    doc = json.loads((out / "samples.json").read_text())
    each = [json.loads((out / f"sample-{s}" / "metrics.json").read_text()) for s in (3, 4)]
    assert [m["sampling"]["seed"] for m in each] == [3, 4]
    rho = [m["pairs"]["overall"]["analytical"]["spearman"] for m in each]
    assert doc["models"]["analytical"]["mean"]["spearman"] == pytest.approx(np.mean(rho))
    assert doc["models"]["analytical"]["pairs_scored"] == 4


@pytest.mark.parametrize("argv, message", [
    (["--samples", "0"], "--samples must be in 1-"),
    (["--samples", "2", "--rows-per-pair", "0"], "would score every row each time"),
])
def test_bad_samples_exit_2_and_write_nothing(two_devices, tmp_path, capsys, argv, message):
    ys = tmp_path / "ys"
    shutil.copytree(two_devices[0], ys / "scale" / "A100")
    out = tmp_path / "ev"
    assert gpu_model.main(["evaluate", "--yardstick", str(ys), "--out", str(out)] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()


def test_benchmarks_a_spec_keeps_aside_are_not_fitted_or_evaluated(tmp_path):
    from kernelcast.bench.gpu_yardstick import kept_aside

    aside = kept_aside()
    assert "convolution_milo_2023" in aside and "check data" in aside["convolution_milo_2023"]
    assert "convolution_milo" not in aside and "dedispersion_milo" not in aside
    for bench in ("convolution_milo", "convolution_milo_2023"):
        (tmp_path / bench / "A100").mkdir(parents=True)
        (tmp_path / bench / "A100" / "manifest.json").write_text("{}")
    assert [(p.benchmark, p.gpu) for p in gpu_model.find_pairs(tmp_path)] == [("convolution_milo", "A100")]
    assert gpu_model.GPU_PROFILES["MI50"] == "mi50"


def test_a_saved_multi_device_model_predicts_each_device_with_its_profile(two_devices, tmp_path, capsys):
    """``evaluate --saved-model`` gives a model of several devices (the bundled GPU model's kind)
    each device's profile, as ``predict --profile`` does: its predictions equal the model loaded with
    that profile, and they differ from what the profile saved with the model (the first device's)
    would give."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.tabular import TabularPredictor, build_table

    ys = tmp_path / "ys"
    for ds, gpu in zip(two_devices, ("A100", "A4000")):
        shutil.copytree(ds, ys / "scale" / gpu)
    model = tmp_path / "model"
    gpu_model.build_model(ys, model, [], rows_per_pair=0, seed=0, transfer=False, seeds=1)
    out = tmp_path / "ev"
    assert cli.main(["evaluate", "--data", str(two_devices[1]), "--folds", "0", "--models", "saved",
                     "--saved-model", str(model), "--profile", "rtx-a4000", "--out", str(out), "--no-plots",
                     "--quiet", "--json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    oof = pd.read_parquet(out / "oof.parquet")
    rows, _ = load_measured_frame(two_devices[1])
    by_key = dict(zip(rows["row_key"].astype(str), range(len(rows))))
    order = [by_key[str(k)] for k in oof["row_key"]]
    for prof, same in (("rtx-a4000", True), ("a100-pcie", False)):
        p = load_profile(prof)
        want = TabularPredictor.load(model, p).predict_table(build_table(rows, p)).time_us[order]
        assert np.allclose(oof["saved_us"].to_numpy(), want, rtol=1e-9) == same, prof


def test_check_scores_a_saved_model_on_the_pairs_kept_aside(two_devices, tmp_path, capsys):
    """``bench.gpu_model check``: the saved model and the analytical model on the kept-aside pairs
    only, each GPU's rows with its profile (the model's predictions equal the model loaded with it)."""
    from kernelcast.calib.profile import load_profile
    from kernelcast.datagen.frame import load_measured_frame
    from kernelcast.models.tabular import TabularPredictor, build_table

    ys = tmp_path / "ys"
    for ds, gpu in zip(two_devices, ("A100", "A4000")):
        shutil.copytree(ds, ys / "scale" / gpu)
        shutil.copytree(ds, ys / "convolution_milo_2023" / gpu)         # the name of a spec kept aside
    model = tmp_path / "model"
    gpu_model.build_model(ys, model, [], rows_per_pair=0, seed=0, transfer=False, seeds=1)
    card = json.loads((model / "card.json").read_text())
    assert {p["benchmark"] for p in card["pairs"]} == {"scale"}             # the kept-aside pairs not fitted
    out = tmp_path / "check"
    assert gpu_model.main(["check", "--yardstick", str(ys), "--model", str(model), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "median over pairs" in text and "saved" in text and "analytical" in text
    m = json.loads((out / "metrics.json").read_text())
    assert [(p["benchmark"], p["gpu"]) for p in m["sampling"]["pairs"]] == [("convolution_milo_2023", "A100"),
                                                                         ("convolution_milo_2023", "A4000")]
    oof = pd.read_parquet(out / "oof.parquet")
    rows, _ = load_measured_frame(two_devices[1])
    sub = oof[oof["device"] == "A4000"]
    by_key = dict(zip("convolution_milo_2023/A4000:" + rows["row_key"].astype(str), range(len(rows))))
    p = load_profile("rtx-a4000")
    want = TabularPredictor.load(model, p).predict_table(build_table(rows, p)).time_us
    assert np.allclose(sub["saved_us"].to_numpy(), want[[by_key[k] for k in sub["row_key"]]], rtol=1e-9)


@pytest.mark.parametrize("argv, message", [
    (["--model", "NOPE"], "not a directory"),
    ([], "no dataset of a benchmark kept aside"),
])
def test_check_bad_input_exits_2_and_writes_nothing(two_devices, tmp_path, capsys, argv, message):
    ys = tmp_path / "ys"
    shutil.copytree(two_devices[0], ys / "scale" / "A100")
    out = tmp_path / "check"
    argv = [str(tmp_path / "nope") if x == "NOPE" else x for x in argv]
    assert gpu_model.main(["check", "--yardstick", str(ys), "--out", str(out)] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not out.exists()

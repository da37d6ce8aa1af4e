"""The CodeGen model trained to convergence: the grouped validation split, early stopping and the
plateau learning rate, the residual target with the feature table (training and prediction build
identical feature rows), and self-supervised pretraining (``kernelcast pretrain``) as a base."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import load_profile
from kernelcast.datagen.frame import load_measured_frame
from kernelcast.models.learned.data import encode_rows, feature_table, prepare_frame
from kernelcast.models.predict import configuration_row
from kernelcast.models.tabular import build_table
from kernelcast.train.loop import TrainOptions, fit_frame
from kernelcast.train.pretrain import PRETRAIN_FILE, PretrainOptions, is_pretrained_dir, pretrain
from kernelcast.train.split import group_key, split_by_group
from kernelcast.train.synthetic import synthetic_rows, write_synthetic_dataset

import kernelcast.cli as cli
from kernelcast.columns import decode_args, decode_sizes
from kernelcast.schema import Kernel


def tiny(**kw) -> TrainOptions:
    opts = dict(n_layer=1, n_embd=32, n_head=4, n_positions=512, vocab_size=1000, head_hidden=[32],
                batch_size=8, epochs=2, progress=False, seed=0, lr=3e-3, kernels_per_batch=2, threads=1)
    opts.update(kw)
    return TrainOptions(**opts)


@pytest.fixture(scope="module")
def profile():
    return load_profile("pocl-local")


# ---------------------------------------------------------------------------------------------
# the validation split


def test_group_key_rule():
    assert group_key("synth_tile_000028", "synth:tile", "k1") == ("synth:synth_tile", "synthetic_family")
    assert group_key("synth_tile_000028", None, "k1") == ("synth:synth_tile", "synthetic_family")
    assert group_key("saxpy", "bundled/linalg.cl", "k2") == ("file:bundled/linalg.cl", "source_file")
    assert group_key("saxpy", "", "k2") == ("kernel:k2", "kernel")


def test_split_by_group_never_splits_a_group():
    kernels = [f"tile{i}" for i in range(10)] + [f"sten{i}" for i in range(6)] + ["a", "b", "c", "d"]
    groups = ["synth:tile"] * 10 + ["synth:sten"] * 6 + ["file:x.cl", "file:x.cl", "file:y.cl", "kernel:d"]
    for seed in range(6):
        train, val, how = split_by_group(kernels, groups, val_fraction=0.15, seed=seed)
        assert how["by"] == "group" and how["groups"] == 5
        assert sorted(train + val) == sorted(kernels) and not set(train) & set(val)
        g = dict(zip(kernels, groups))
        assert not {g[k] for k in train} & {g[k] for k in val}
        assert val and train
        # groups are added until 15 % of the 20 kernels (3) are held out: one group of >= 3 or several small ones
        assert len(val) >= 3 or len(how["val_groups"]) >= 2
    assert split_by_group(kernels, groups, seed=3) == split_by_group(list(reversed(kernels)),
                                                                     list(reversed(groups)), seed=3)
    # one group only: by kernel, and it says so
    train, val, how = split_by_group(["a", "b", "c"], ["g", "g", "g"], val_fraction=0.3)
    assert how["by"] == "kernel" and "fewer than two" in how["note"] and len(val) == 1 and len(train) == 2


# ---------------------------------------------------------------------------------------------
# convergence: early stopping and the learning rate


def test_early_stopping_fires_and_the_learning_rate_decays_to_a_floor(tmp_path):
    frame, _ = synthetic_rows(n_kernels=6, configs_per_kernel=8, seed=4)
    # times that no input explains: the validation loss cannot keep improving
    frame["time_median_us"] = 2.0 ** np.random.default_rng(0).uniform(0, 12, len(frame))
    res = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="efficient", epochs=40, patience=3,
                                                                 lr_decay=0.5, min_lr_ratio=0.2))
    t = res.metrics["training"]
    hist = t["history"]
    assert res.stopped == "early_stopping" and len(hist) < 40
    assert t["best_epoch"] == len(hist) - 3 and t["epochs_completed"] == len(hist)
    assert t["best_step"] == hist[t["best_epoch"] - 1]["step"]
    best = float("inf")
    for prev, cur in zip(hist, hist[1:]):
        improved = prev["val_loss"] < best
        best = min(best, prev["val_loss"])
        # the learning rate stays while the validation loss improves, halves after an epoch without improvement,
        # and never falls below 20 % of the peak (3e-3)
        expected = prev["lr"] if improved else max(0.2 * 3e-3, 0.5 * prev["lr"])
        assert cur["lr"] == pytest.approx(expected, rel=1e-6)
    assert min(h["lr"] for h in hist) >= 0.2 * 3e-3 * (1 - 1e-9)


def test_time_limit_stops_and_a_rerun_continues(tmp_path):
    frame, _ = synthetic_rows(n_kernels=4, configs_per_kernel=8, seed=1)
    first = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="efficient", epochs=3, max_minutes=1e-6,
                                                                   batch_size=4))
    assert first.stopped == "time_limit" and not first.complete
    assert first.metrics["training"]["steps"] == 1
    again = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="efficient", epochs=3, batch_size=4,
                                                                   patience=10))
    assert again.stopped == "completed" and again.metrics["training"]["epochs_completed"] == 3


# ---------------------------------------------------------------------------------------------
# the residual model with the feature table


def _prediction_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, r in frame.iterrows():
        k = Kernel(source=r["source"], name=r["kernel_name"])
        rows.append(configuration_row(k, decode_sizes(r["gsize"]), decode_sizes(r["lsize"]), decode_args(r["args"])))
    return pd.DataFrame(rows)


def test_residual_model_builds_identical_feature_rows_for_training_and_prediction(tmp_path, profile):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=4, configs_per_kernel=6)
    frame, _ = load_measured_frame(ds)            # as training reads it (Parquet arrays, JSON args)
    res = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="efficient", profile=profile, max_steps=2))
    cfg = res.predictor.config
    assert cfg.residual and cfg.profile is not None and len(cfg.table_features) > 100
    assert cfg.feature_names[-len(cfg.table_features):] == ["table:" + c for c in cfg.table_features]
    tok = res.predictor.tokenizer
    # training: the table of the options' profile; prediction: the table of the profile saved in the model
    train_enc = encode_rows(prepare_frame(frame), tok, cfg, build_table(frame, profile))
    pred_rows = _prediction_rows(frame)
    pred_enc = encode_rows(prepare_frame(pred_rows), tok, cfg, feature_table(pred_rows, cfg))
    np.testing.assert_array_equal(train_enc.features, pred_enc.features)
    np.testing.assert_array_equal(train_enc.base_log2, pred_enc.base_log2)
    assert train_enc.features.shape[1] == len(cfg.feature_names)
    # the base is the analytical model's prediction: the same rows predicted through predict's path
    p_train = res.predictor.predict(frame).time_us
    p_pred = res.predictor.predict(pred_rows).time_us
    np.testing.assert_array_equal(p_train, p_pred)
    # reloaded from disk, the same predictions
    from kernelcast.models.learned import LearnedPredictor

    np.testing.assert_allclose(LearnedPredictor.from_pretrained(tmp_path / "m").predict(pred_rows).time_us, p_pred,
                               rtol=1e-6)


def test_residual_model_learns_the_correction_of_the_analytical_model(tmp_path, profile):
    """Times are the analytical model's prediction times 8 (a constant residual of 3 in log2) with a
    little noise: the trained residual model predicts held-out kernels within 1.5x, where the
    analytical model alone is off by 8x."""
    frame, _ = synthetic_rows(n_kernels=8, configs_per_kernel=8, seed=5)
    an = build_table(frame, profile)["analytical_us"].to_numpy()
    frame["time_median_us"] = an * 8.0 * 2.0 ** np.random.default_rng(1).normal(0, 0.05, len(frame))
    res = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="efficient", profile=profile, epochs=8,
                                                                 patience=8))
    val = frame["kernel_id"].isin(set(res.metrics["split"]["val_kernels"])).to_numpy()
    assert val.any()
    ratio = res.predictor.predict(frame[val]).time_us / frame["time_median_us"].to_numpy()[val]
    assert np.all((ratio > 1 / 1.5) & (ratio < 1.5)), ratio


# ---------------------------------------------------------------------------------------------
# pretraining


@pytest.fixture(scope="module")
def synth_corpus(tmp_path_factory):
    from kernelcast.datagen.synth import write_synth_corpus

    return write_synth_corpus(tmp_path_factory.mktemp("corpus") / "c", 24, seed=3)


def test_pretrain_lowers_the_held_out_loss_and_train_starts_from_it(tmp_path, synth_corpus):
    out = tmp_path / "pt"
    opts = PretrainOptions(epochs=4, n_layer=1, n_embd=32, n_head=4, n_positions=256, block_size=64, batch_size=4,
                           vocab_size=400, lr=3e-3, val_fraction=0.2, threads=1, progress=False)
    res = pretrain([str(synth_corpus)], out, opts)
    s = res.summary
    assert is_pretrained_dir(out) and json.loads((out / PRETRAIN_FILE).read_text())["steps"] == s["steps"]
    assert s["texts"]["validation"] > 0 and s["texts"]["validation_groups"] >= 1
    # an untrained LM predicts near-uniformly (loss ~ ln(vocab)); pretraining must do much better on held-out families
    assert s["validation_loss_before"] > 0.8 * np.log(s["tokens"]["vocab"])
    assert s["validation_loss_after"] < s["validation_loss_before"] - 1.0, s
    assert s["stopped"] == "completed" and s["epochs_completed"] == 4
    assert not list(tmp_path.glob(".pt.*"))          # no temporary directory left behind

    # fine-tuning starts from the pretrained backbone: before any step its weights are the pretrained ones
    from safetensors.torch import load_file

    frame, _ = synthetic_rows(n_kernels=3, configs_per_kernel=4, seed=0)
    ft = fit_frame(frame, out_dir=tmp_path / "ft", options=tiny(mode="efficient", base=str(out), max_steps=0,
                                                                 lr=None))
    assert ft.metrics["model"]["base"] == str(out) and ft.metrics["options"]["lr"] == 5e-4
    pre = load_file(str(out / "model.safetensors"))
    got = load_file(str(tmp_path / "ft" / "model.safetensors"))
    for k, v in pre.items():
        if k.startswith("transformer."):
            np.testing.assert_array_equal(got["backbone." + k[len("transformer."):]].numpy(), v.numpy())


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kernelcast: error: "), err
    return err[0]


def test_pretrain_cli_bad_input_writes_nothing(tmp_path, capsys, synth_corpus):
    assert cli.main(["pretrain", "--corpus", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "not a corpus directory" in _error(capsys)
    assert cli.main(["pretrain", "--corpus", str(synth_corpus), "--out", str(tmp_path / "o"), "--max-steps", "0"]) == 2
    assert "--max-steps" in _error(capsys)
    assert cli.main(["pretrain", "--corpus", str(synth_corpus), "--out", str(tmp_path / "o"), "--n-embd", "30"]) == 2
    assert "n-head" in _error(capsys)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x.txt").write_text("keep")
    assert cli.main(["pretrain", "--corpus", str(synth_corpus), "--out", str(busy)]) == 2
    assert "non-empty" in _error(capsys)
    assert not (tmp_path / "o").exists() and [p.name for p in busy.iterdir()] == ["x.txt"]


def test_pretrain_cli_prints_the_losses(tmp_path, capsys, synth_corpus):
    rc = cli.main(["pretrain", "--corpus", str(synth_corpus), "--out", str(tmp_path / "o"), "--max-steps", "2",
                   "--n-layer", "1", "--n-embd", "32", "--block-size", "64", "--vocab-size", "400", "--quiet",
                   "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "perplexity" in out and "stopped: max_steps" in out
    assert (tmp_path / "o" / "model.safetensors").is_file() and (tmp_path / "o" / "tokenizer.json").is_file()


def test_train_cli_direct_needs_efficient_mode(tmp_path, capsys):
    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=2, configs_per_kernel=3)
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--direct"]) == 2
    assert "--direct" in _error(capsys)
    assert cli.main(["train", "--data", str(ds), "--out", str(tmp_path / "m"), "--max-minutes", "0"]) == 2
    assert "--max-minutes" in _error(capsys)
    assert not (tmp_path / "m").exists()

"""The training loop: learning, resume from a checkpoint, metrics.json, energy loss, base models."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch
from kernelcast.models.learned import LearnedConfig, LearnedPredictor
from kernelcast.train.loop import DataError, TrainOptions, batch_loss, fit_frame, train_model
from kernelcast.train.synthetic import synthetic_rows, write_synthetic_dataset


def tiny(**kw) -> TrainOptions:
    opts = dict(n_layer=1, n_embd=32, n_head=4, n_positions=512, vocab_size=1000, head_hidden=[32],
                batch_size=8, epochs=2, progress=False, seed=0, lr=3e-3, kernels_per_batch=2, patience=20)
    opts.update(kw)
    return TrainOptions(**opts)


@pytest.fixture(scope="module")
def frame():
    df, _ = synthetic_rows(n_kernels=6, configs_per_kernel=16, seed=0)
    return df


def _log2_mse(pred: LearnedPredictor, df) -> float:
    p = pred.predict(df).time_us
    return float(np.mean((np.log2(p) - np.log2(df["time_median_us"].to_numpy())) ** 2))


def test_training_reduces_loss_on_learnable_target(tmp_path, frame):
    init = fit_frame(frame, out_dir=tmp_path / "init", options=tiny(mode="efficient", max_steps=0))
    assert init.stopped == "max_steps"
    trained = fit_frame(frame, out_dir=tmp_path / "trained", options=tiny(mode="efficient", epochs=6,
                                                                           batch_size=16))
    assert trained.stopped == "completed"
    train_k = set(trained.metrics["split"]["train_kernels"])
    rows = frame[frame["kernel_id"].isin(train_k)]
    before, after = _log2_mse(init.predictor, rows), _log2_mse(trained.predictor, rows)
    assert after < 0.5 * before, (before, after)
    hist = trained.metrics["training"]["history"]
    assert len(hist) == 6 and hist[-1]["train_loss"] < hist[0]["train_loss"]


def test_prompt_mode_trains_and_writes_metrics(tmp_path):
    frame, _ = synthetic_rows(n_kernels=5, configs_per_kernel=6, seed=0)
    t0 = time.perf_counter()
    res = fit_frame(frame, out_dir=tmp_path / "m", options=tiny(mode="prompt", epochs=1))
    wall_s = time.perf_counter() - t0
    m = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert m["mode"] == "prompt" and m["stopped"] == "completed"
    train_k, val_k = m["split"]["train_kernels"], m["split"]["val_kernels"]
    assert len(val_k) == 1 and not set(train_k) & set(val_k)
    v = m["validation"]["time"]
    assert v["rows"] == 6 and v["kernels"] == 1
    for k in ("mape", "mape_per_kernel", "median_ape", "spearman"):
        assert k in v
    # one epoch over the 24 training rows, in no more time than the call took
    tr = m["training"]
    assert tr["rows_seen"] == 24 and 0 < tr["seconds"] <= wall_s
    assert tr["samples_per_s"] == pytest.approx(24 / tr["seconds"]) and tr["samples_per_s"] >= 24 / wall_s
    assert m["data"]["discarded_over_length_train"] == 0 and m["data"]["train_rows"] == 24
    assert (tmp_path / "m" / "model.safetensors").is_file() and (tmp_path / "m" / "checkpoint").is_dir()
    assert res.predictor.predict(frame.head(3)).time_us.shape == (3,)


def test_over_length_prompts_are_discarded_and_counted(tmp_path, frame):
    df = frame.copy()
    first = df["kernel_name"] == "synth_0"
    df.loc[first, "source"] = df.loc[first, "source"] + "// " + "long comment words " * 300 + "\n"
    res = fit_frame(df, out_dir=tmp_path / "m", options=tiny(mode="prompt", max_steps=1))
    d = res.metrics["data"]
    assert d["discarded_over_length_train"] + d["discarded_over_length_val"] == int(first.sum())
    assert d["train_rows"] + d["val_rows"] == len(df) - int(first.sum())


def _weights(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


@pytest.mark.parametrize("mode", ["efficient", "prompt"])
def test_resume_continues_from_checkpoint(tmp_path, mode):
    frame, _ = synthetic_rows(n_kernels=4, configs_per_kernel=8, seed=2)
    opts = dict(mode=mode, epochs=2, head_dropout=0.2, batch_size=4)
    first = fit_frame(frame, out_dir=tmp_path / "a", options=tiny(max_steps=3, **opts))
    assert first.stopped == "max_steps"
    state = json.loads((tmp_path / "a" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["epoch"] == 0 and state["batch_in_epoch"] == 3
    resumed = fit_frame(frame, out_dir=tmp_path / "a", options=tiny(**opts))
    assert resumed.stopped == "completed"
    whole = fit_frame(frame, out_dir=tmp_path / "b", options=tiny(**opts))
    assert resumed.metrics["training"]["steps"] == whole.metrics["training"]["steps"]
    wa, wb = _weights(tmp_path / "a" / "checkpoint"), _weights(tmp_path / "b" / "checkpoint")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)
    # a finished run is not trained again
    again = fit_frame(frame, out_dir=tmp_path / "a", options=tiny(**opts))
    assert again.metrics["training"]["steps"] == whole.metrics["training"]["steps"]


def test_energy_head_and_zhang_loss(tmp_path):
    cfg = LearnedConfig(targets="energy", energy_ref_j=1.0)
    pred = {"energy": torch.tensor([1.0, 0.0])}  # log2: predicts 2 J and 1 J
    loss = batch_loss(pred, torch.tensor([float("nan")] * 2), torch.tensor([1.0, 4.0]), cfg, "zhang")
    assert float(loss) == pytest.approx(((2 - 1) ** 2 / 1 + (1 - 4) ** 2 / 4) / 2)
    df, _ = synthetic_rows(n_kernels=4, configs_per_kernel=6, seed=1, energy=True)
    res = fit_frame(df, out_dir=tmp_path / "e", options=tiny(mode="efficient", target="both", epochs=1))
    assert set(res.metrics["validation"]) >= {"time", "energy", "loss"}
    p = res.predictor.predict(df)
    assert np.all(np.isfinite(p.energy_j)) and np.all(np.isfinite(p.time_us))


def test_energy_target_without_energy_is_an_error(tmp_path, frame):
    with pytest.raises(DataError, match="no energy"):
        fit_frame(frame, out_dir=tmp_path / "x", options=tiny(target="energy"))


def test_train_model_on_dataset_dir_and_local_base(tmp_path):
    from transformers import CodeGenConfig, CodeGenModel

    ds = write_synthetic_dataset(tmp_path / "ds", n_kernels=4, configs_per_kernel=6)
    first = train_model(ds, tmp_path / "scratch", mode="efficient", epochs=1, progress=False, n_layer=1, n_embd=32,
                        n_positions=512, vocab_size=320, head_hidden=[16])
    assert first.metrics["data"]["rows_ok"] == 24
    tok = first.predictor.tokenizer
    base = CodeGenModel(CodeGenConfig(vocab_size=len(tok), n_positions=512, n_ctx=512, n_embd=32, n_layer=1,
                                      n_head=4, rotary_dim=4, bos_token_id=tok.eos_token_id,
                                      eos_token_id=tok.eos_token_id))
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    res = train_model(ds, tmp_path / "ft", mode="prompt", base=str(tmp_path / "base"), epochs=1, max_steps=2,
                      progress=False, head_hidden=[16])
    assert res.metrics["model"]["base"] == str(tmp_path / "base")
    loaded = LearnedPredictor.from_pretrained(tmp_path / "ft")
    assert loaded.config.base == str(tmp_path / "base")


def test_fit_frame_continues_a_given_predictor(tmp_path, frame):
    res = fit_frame(frame, out_dir=tmp_path / "a", options=tiny(mode="efficient", max_steps=1))
    pred = res.predictor
    before = pred.predict(frame).time_us
    again = fit_frame(frame, out_dir=tmp_path / "b", options=tiny(mode="efficient", max_steps=2), predictor=pred)
    assert not np.allclose(again.predictor.predict(frame).time_us, before)

"""The learned model: pooling, padding invariance, save/load, local base, efficient-mode encoding."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from kernelcast.models.learned import KernelPerfModel, LearnedConfig, LearnedPredictor, scratch_backbone_config
from kernelcast.models.learned.data import encode_rows, make_batch, prepare_frame
from kernelcast.models.learned.features import compute_features, feature_names, normalisation
from kernelcast.models.learned.model import last_token_positions, pool_last_tokens
from kernelcast.models.learned.tokenizer import train_tokenizer
from kernelcast.train.synthetic import synthetic_rows


@pytest.fixture(scope="module")
def frame():
    df, _ = synthetic_rows(n_kernels=3, configs_per_kernel=5, seed=3)
    return df


@pytest.fixture(scope="module")
def tokenizer(frame):
    return train_tokenizer(list(frame["source"].unique()) + ["Predict time for the following OpenCL kernel:"],
                           vocab_size=1000)


def tiny_model(tokenizer, mode: str, frame=None, targets: str = "time", n_last: int = 3) -> KernelPerfModel:
    torch.manual_seed(0)
    cfg = LearnedConfig(mode=mode, targets=targets, n_last_tokens=n_last, head_hidden=[16], head_dropout=0.0,
                        max_length=512, time_log2_mean=8.0, time_log2_std=3.0)
    cfg.backbone = scratch_backbone_config(len(tokenizer), n_layer=1, n_embd=32, n_head=4, n_positions=512,
                                           eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    if mode == "efficient":
        cfg.feature_names = feature_names(cfg.max_scalars, [])
        cfg.feature_mean, cfg.feature_std = normalisation(compute_features(frame, cfg.max_scalars, []))
    return KernelPerfModel(cfg).eval()


def test_last_token_positions_skip_padding():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    idx, valid = last_token_positions(mask, 2)
    assert idx.tolist() == [[1, 2], [3, 4], [0, 0]]
    assert valid.tolist() == [[True, True], [True, True], [False, True]]
    # left padding works as well
    idx, valid = last_token_positions(torch.tensor([[0, 0, 1, 1, 1]]), 2)
    assert idx.tolist() == [[3, 4]] and valid.all()


def test_pool_concatenates_last_n_hidden_states():
    hidden = torch.arange(2 * 4 * 2, dtype=torch.float32).reshape(2, 4, 2)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = pool_last_tokens(hidden, mask, 2)
    assert pooled.tolist() == [hidden[0, 0].tolist() + hidden[0, 1].tolist(),
                               hidden[1, 2].tolist() + hidden[1, 3].tolist()]
    # a sequence shorter than N gets zeros in front
    assert pool_last_tokens(hidden, torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]]), 2)[0].tolist() == \
        [0.0, 0.0] + hidden[0, 0].tolist()


def test_padding_does_not_change_prompt_prediction(tokenizer):
    model = tiny_model(tokenizer, "prompt")
    short = tokenizer("kernel void f(global float *a) { a[0] = 1; }")["input_ids"]
    long = tokenizer("kernel void g(global float *a, int n) { for (int i = 0; i < n; ++i) a[i] += 2; }")["input_ids"]
    assert len(long) > len(short) + 5
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        single = model(torch.tensor([short]), torch.ones(1, len(short), dtype=torch.long))["time"]
        width = len(long) + 7  # extra padding beyond the longest sequence
        ids = torch.full((2, width), pad, dtype=torch.long)
        mask = torch.zeros((2, width), dtype=torch.long)
        ids[0, :len(short)] = torch.tensor(short)
        mask[0, :len(short)] = 1
        ids[1, :len(long)] = torch.tensor(long)
        mask[1, :len(long)] = 1
        batched = model(ids, mask)["time"]
        alone_long = model(torch.tensor([long]), torch.ones(1, len(long), dtype=torch.long))["time"]
    torch.testing.assert_close(batched[0], single[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(batched[1], alone_long[0], rtol=0, atol=1e-5)


def test_padding_does_not_change_efficient_prediction(tokenizer, frame):
    model = tiny_model(tokenizer, "efficient", frame)
    df = prepare_frame(frame)
    enc = encode_rows(df, tokenizer, model.config)
    rows_k0 = np.flatnonzero(enc.seq_index == 0)
    all_rows = np.arange(len(df))
    with torch.no_grad():
        alone = model(**make_batch(enc, rows_k0, tokenizer.pad_token_id).model_inputs())["time"]
        together = model(**make_batch(enc, all_rows, tokenizer.pad_token_id).model_inputs())["time"]
    torch.testing.assert_close(together[: len(rows_k0)], alone, rtol=0, atol=1e-5)


def test_save_pretrained_round_trip(tmp_path, tokenizer, frame):
    for mode in ("prompt", "efficient"):
        model = tiny_model(tokenizer, mode, frame, targets="both")
        pred = LearnedPredictor(model, tokenizer, batch_size=4)
        before = pred.predict(frame)
        d = pred.save_pretrained(tmp_path / mode)
        assert {p.name for p in d.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
        assert not list(d.glob("*.bin")) and not list(d.glob("*.pt")) and not list(d.glob("*.pkl"))
        assert json.loads((d / "config.json").read_text())["mode"] == mode
        loaded = LearnedPredictor.from_pretrained(d, batch_size=7)
        after = loaded.predict(frame)
        np.testing.assert_allclose(after.time_us, before.time_us, rtol=1e-6)
        np.testing.assert_allclose(after.energy_j, before.energy_j, rtol=1e-6)
        assert np.all(np.isfinite(after.time_us))     # assert_allclose would let NaN == NaN through


def test_predict_row_order_and_time_only(tokenizer, frame):
    model = tiny_model(tokenizer, "efficient", frame)
    pred = LearnedPredictor(model, tokenizer, kernels_per_batch=1)
    p = pred.predict(frame)
    shuffled = frame.sample(frac=1.0, random_state=1)
    q = pred.predict(shuffled)
    np.testing.assert_allclose(q.time_us, p.time_us[shuffled.index.to_numpy()], rtol=1e-5)
    assert np.isnan(p.energy_j).all()


def test_load_backbone_and_tokenizer_from_local_base(tmp_path, tokenizer):
    from transformers import CodeGenConfig, CodeGenModel

    torch.manual_seed(1)
    base_cfg = CodeGenConfig(vocab_size=len(tokenizer), n_positions=256, n_ctx=256, n_embd=32, n_layer=1, n_head=4,
                             rotary_dim=4, bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    base = CodeGenModel(base_cfg)
    base.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    model = KernelPerfModel.from_base(str(tmp_path / "base"), LearnedConfig(mode="prompt", head_hidden=[8]))
    assert model.config.base == str(tmp_path / "base")
    assert model.config.max_length == 256
    assert model.config.hidden_size == 32
    for (name, p), (name2, q) in zip(model.backbone.state_dict().items(), base.state_dict().items()):
        assert name == name2 and torch.equal(p, q)
    from kernelcast.models.learned.tokenizer import load_tokenizer

    tok = load_tokenizer(tmp_path / "base")
    assert tok("kernel void")["input_ids"] == tokenizer("kernel void")["input_ids"]
    assert tok.padding_side == "right" and tokenizer.pad_token_id is not None
    assert tok.pad_token_id == tokenizer.pad_token_id


def test_efficient_mode_encodes_each_kernel_once_per_batch(tokenizer, frame):
    model = tiny_model(tokenizer, "efficient", frame)
    calls: list[int] = []
    handle = model.backbone.register_forward_hook(lambda m, args, kwargs_out: calls.append(0), with_kwargs=False)
    sizes: list[int] = []
    pre = model.backbone.register_forward_pre_hook(
        lambda m, args, kwargs: sizes.append(int(kwargs["input_ids"].shape[0])), with_kwargs=True)
    try:
        pred = LearnedPredictor(model, tokenizer, kernels_per_batch=8)
        pred.predict(frame)  # 3 kernels x 5 configurations
        assert len(calls) == 1 and sizes == [3]
        calls.clear()
        sizes.clear()
        LearnedPredictor(model, tokenizer, kernels_per_batch=2).predict(frame)
        assert len(calls) == 2 and sizes == [2, 1]
    finally:
        handle.remove()
        pre.remove()


def test_features_fill_missing_extra_columns(frame):
    df = prepare_frame(frame)
    names = feature_names(2, ["analytical_log2_time"])
    f = compute_features(df, 2, ["analytical_log2_time"])
    assert f.shape == (len(df), len(names))
    assert (f[:, names.index("has_analytical_log2_time")] == 0).all()
    df2 = df.assign(analytical_log2_time=[5.0] + [np.nan] * (len(df) - 1))
    f2 = compute_features(df2, 2, ["analytical_log2_time"])
    assert f2[0, names.index("analytical_log2_time")] == 5.0 and f2[0, names.index("has_analytical_log2_time")] == 1
    assert f2[1, names.index("has_analytical_log2_time")] == 0
    g = np.array([r[0] for r in df["gsize"]], dtype=float)
    np.testing.assert_allclose(f[:, names.index("log2_g0")], np.log2(g))
    np.testing.assert_allclose(f[:, names.index("log2_scalar0")], np.log2(1 + g))
    np.testing.assert_allclose(f[:, names.index("log2_buf_bytes_sum")], np.log2(2 * 4 * g))


def test_training_and_prediction_build_identical_feature_rows(frame):
    """A training frame has no analytical estimate; predict_frame adds one. The resolved feature
    list must leave it out, so the rows a model sees at prediction equal the rows it trained on."""
    from kernelcast.models.learned.features import DEFAULT_EXTRA_COLUMNS, resolve_extra_columns

    train_df = prepare_frame(frame)
    extra = resolve_extra_columns(DEFAULT_EXTRA_COLUMNS, train_df.columns)
    assert "analytical_log2_time" not in extra
    served = prepare_frame(frame.assign(analytical_log2_time=np.log2(frame["time_median_us"].to_numpy() * 3)))
    np.testing.assert_array_equal(compute_features(train_df, 4, extra), compute_features(served, 4, extra))
    # a training frame that has the column keeps it
    assert "analytical_log2_time" in resolve_extra_columns(DEFAULT_EXTRA_COLUMNS, served.columns)


def test_mean_pooling_ignores_padding_and_sees_the_whole_source(tokenizer, frame):
    from kernelcast.models.learned.model import pool_mean

    h = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    m = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    np.testing.assert_allclose(pool_mean(h, m).numpy(), [h[0, :2].mean(0).numpy(), h[1].mean(0).numpy()])
    model = tiny_model(tokenizer, "efficient", frame)
    model.config.pooling = "mean"
    mean_model = KernelPerfModel(model.config).eval()
    assert mean_model.time_head is not None
    out = LearnedPredictor(mean_model, tokenizer).predict(frame).time_us
    assert out.shape == (len(frame),) and np.isfinite(out).all()

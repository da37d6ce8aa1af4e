"""The tabular model's residual split into a level per (kernel, device) and a shape within it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceProfile, load_profile
from kernelcast.models.tabular import (
    KERNEL_KEY_COLUMN,
    LEVEL_COLUMNS,
    MODEL_FILE,
    ModelFormatError,
    TabularHead,
    TabularPredictor,
    build_table,
    kernel_keys,
)
from kernelcast.models.xfer import FAMILY_WEIGHT
from kernelcast.train.synthetic import synthetic_rows
from kernelcast.train.tabular import (
    FAST_SHARE,
    FAST_WEIGHT,
    choose_split_scales,
    fast_weights,
    fit_tabular,
    merge_groups,
    pair_keys,
    pair_levels,
    split_residual,
)


def test_level_and_shape_of_known_residuals():
    r = np.array([1.0, 2.0, 6.0, -1.0, 0.0])
    pairs = np.array(["a", "a", "a", "b", "b"], dtype=object)
    lvl, shp = split_residual(r, pairs)
    np.testing.assert_array_equal(lvl, [2.0, 2.0, 2.0, -0.5, -0.5])
    np.testing.assert_array_equal(shp, [-1.0, 0.0, 4.0, -0.5, 0.5])
    levels = pair_levels(r, np.array(["k1", "k1", "k1", "k2", "k2"], dtype=object),
                         np.array(["d", "d", "d", "d", "e"], dtype=object))
    assert levels == {"k1": {"d": 2.0}, "k2": {"d": -1.0, "e": 0.0}}


def test_fast_weights_of_known_times():
    # two pairs of five rows: the fastest fifth of each (one row) weighs 4, the others 1, mean 1
    t = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 50.0, 40.0, 10.0, 30.0, 20.0])
    pairs = np.array(["a"] * 5 + ["b"] * 5, dtype=object)
    assert (FAST_WEIGHT, FAST_SHARE) == (4.0, 0.2)
    w = fast_weights(t, pairs)
    assert w is not None
    np.testing.assert_allclose(w, np.where(np.isin(np.arange(10), [1, 7]), 4.0, 1.0) / 1.6)
    # any offset per pair ranks the same; a weight of 1 is no weighting
    np.testing.assert_allclose(fast_weights(t + np.where(pairs == "a", 100.0, -7.0), pairs), w)
    assert fast_weights(t, pairs, 1.0) is None
    np.testing.assert_allclose(fast_weights(t, pairs, 9.0, 0.4)[[1, 2, 7, 9]], 9.0 / 4.2)


def test_groups_sharing_a_kernel_are_merged():
    # one group per device cache of the same kernel ("x" on two files) and one of another kernel
    groups = np.array(["f1", "f1", "f2", "f3", "f4"], dtype=object)
    keys = np.array(["x", "x", "x", "y", ""], dtype=object)
    out = merge_groups(groups, keys)
    assert out[0] == out[1] == out[2] and len({out[2], out[3], out[4]}) == 3


def test_known_levels_on_own_similar_and_other_devices():
    nv = {"dev_class": 1.0, "dev_vendor": 0.0, "dev_warp_size": 32.0}
    amd = {"dev_class": 1.0, "dev_vendor": 1.0, "dev_warp_size": 64.0}
    head = TabularHead("time", "analytical_us", kernel_levels={"k": {"n1": 1.0, "a1": 6.0}},
                       level_devices={"n1": nv, "a1": amd})
    lv, own = head.known_levels(["k", "k", "k", "other"], ["n1", "n2", "a2", "n1"], [nv, nv, amd, nv])
    # its own device: its own level; another GPU: FAMILY_WEIGHT for the same family, 1 for the other
    F = FAMILY_WEIGHT
    np.testing.assert_allclose(lv[:3], [1.0, (F * 1.0 + 6.0) / (F + 1), (1.0 + F * 6.0) / (F + 1)])
    assert np.isnan(lv[3]) and list(own) == [True, False, False, False]


def test_scales_are_zero_with_one_kernel_group_and_large_when_both_carry_over():
    x = np.zeros((0, 2))
    s, u, why = choose_split_scales(x, np.zeros(0), np.zeros(0, dtype=object), np.zeros(0, dtype=object),
                                    ["k_loops", "log2_items"], {}, 10)
    assert (s, u) == (0.0, 0.0) and "kernel group" in why["why"]
    # eight kernels; the level follows a kernel column, the shape a launch column, the same law on each
    rng = np.random.default_rng(0)
    k = np.repeat(np.arange(8), 60)
    items = rng.uniform(5, 15, len(k))
    x = np.column_stack([k.astype(float), items])
    r = 0.5 * k - 2.0 + 0.3 * (items - 10.0)
    groups = np.array([f"g{i}" for i in k], dtype=object)
    params = {"objective": "regression_l1", "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1,
              "num_threads": 1, "deterministic": True, "seed": 0}
    s, u, detail = choose_split_scales(x, r, groups, groups, ["k_loops", "log2_items"], params, 50, folds=4)
    assert "k_loops" in LEVEL_COLUMNS and "log2_items" not in LEVEL_COLUMNS
    assert s >= 0.8 and u >= 0.7
    assert detail["inner_median_abs_log2"] < detail["inner_median_abs_log2_analytical"]


def _device(profile: DeviceProfile, name: str) -> DeviceProfile:
    d = profile.to_dict()
    d["device"] = {**d["device"], "name": name}
    return DeviceProfile.from_dict(d)


LEVELS = {"dev-a": [1.0, -1.0, 2.0], "dev-b": [2.0, 0.0, 3.0], "dev-c": [1.5, -0.5, 2.5]}


@pytest.fixture(scope="module")
def split_tables():
    """Three devices (copies of one profile) measuring three kernels of one synthetic family: each
    row's time is analytical x 2**(level of its kernel on its device + 0.5 where its work-group has
    at least 64 work-items, else -0.5)."""
    base = load_profile("pocl-local")
    frame, _ = synthetic_rows(n_kernels=3, configs_per_kernel=40, seed=5, noise=0.0)
    tables = {}
    for name, levels in LEVELS.items():
        t = build_table(frame, _device(base, name))
        k = t["kernel_name"].map({f"synth_{i}": v for i, v in enumerate(levels)}).to_numpy(dtype=float)
        shape = np.where(t["wg_items"].to_numpy() >= 64, 0.5, -0.5)
        t["time_median_us"] = t["analytical_us"].to_numpy() * np.exp2(k + shape)
        tables[name] = t
    return base, tables


def test_split_is_the_default_and_can_be_turned_off(split_tables):
    base, tables = split_tables
    train = pd.concat([tables["dev-a"], tables["dev-b"]], ignore_index=True)
    assert fit_tabular(train, base, seed=0, transfer=False).heads["time"].split
    one = fit_tabular(train, base, seed=0, transfer=False, split=False)
    assert not one.heads["time"].split and one.heads["time"].residual is not None
    assert one.heads["time"].level is None and one.heads["time"].shape is None
    # trained on several devices, the shape booster weighs each pair's fastest rows more; a weight of
    # 1 fits it unweighted, and only the shape moves (the levels and the level booster are the same)
    weighted = fit_tabular(train, base, seed=0, transfer=False)
    plain = fit_tabular(train, base, seed=0, transfer=False, fast_weight=1.0)
    hw, hp = weighted.heads["time"], plain.heads["time"]
    assert hw.summary["split"]["fast_weight"] == {"weight": FAST_WEIGHT, "share": FAST_SHARE}
    assert hp.summary["split"]["fast_weight"]["weight"] == 1.0
    # one device: unweighted unless asked
    one_dev = fit_tabular(tables["dev-a"], base, seed=0, transfer=False).heads["time"]
    assert one_dev.summary["split"]["fast_weight"]["weight"] == 1.0
    assert fit_tabular(tables["dev-a"], base, seed=0, transfer=False,
                       fast_weight=4.0).heads["time"].summary["split"]["fast_weight"]["weight"] == 4.0
    assert hw.kernel_levels == hp.kernel_levels
    x = weighted.matrix(train)
    np.testing.assert_array_equal(hw.level.predict(x[:, list(hw.level_index)]),
                                  hp.level.predict(x[:, list(hp.level_index)]))
    assert not np.allclose(hw.shape.predict(x), hp.shape.predict(x))


def test_levels_shape_and_an_unseen_kernel(split_tables, tmp_path):
    base, tables = split_tables
    train = pd.concat([tables["dev-a"], tables["dev-b"]], ignore_index=True)
    seen = train["kernel_name"] != "synth_2"
    model = fit_tabular(train[seen].reset_index(drop=True), base, seed=0, transfer=False)
    head = model.heads["time"]
    assert head.split and head.residual is None
    # the pair levels are the medians of the residuals: the kernel's level plus the median shape
    r = np.log2(train["time_median_us"] / train["analytical_us"]).to_numpy()[seen.to_numpy()]
    keys = pair_keys(train[seen])
    lvl, _ = split_residual(r, keys)
    key_of = dict(zip(train["kernel_name"], train[KERNEL_KEY_COLUMN]))
    for i, name in enumerate(("synth_0", "synth_1")):
        for d in ("dev-a", "dev-b"):
            sel = (train[seen]["kernel_name"] == name).to_numpy() & (train[seen]["xfer_device"] == d).to_numpy()
            assert head.kernel_levels[key_of[name]][d] == pytest.approx(float(np.median(lvl[sel])))
            assert abs(head.kernel_levels[key_of[name]][d] - LEVELS[d][i]) <= 0.5 + 1e-9
    # one kernel group (one synthetic family): nothing carries to a kernel it has not seen
    assert head.unseen_shape_scale == 0.0 and head.unseen_level_scale == 0.0
    unseen = tables["dev-a"][tables["dev-a"]["kernel_name"] == "synth_2"].reset_index(drop=True)
    np.testing.assert_array_equal(model.predict_table(unseen).time_us, unseen["analytical_us"].to_numpy())
    # a seen kernel on a training device: its level and the learned shape (the centred shape of a
    # pair is +-0.5 less its median, which differs between pairs: the booster fits their mean)
    own = tables["dev-a"][tables["dev-a"]["kernel_name"] != "synth_2"].reset_index(drop=True)
    err = np.abs(np.log2(model.predict_table(own).time_us / own["time_median_us"].to_numpy()))
    assert np.median(err) < 0.15
    # a seen kernel on a device it was not trained on: the mean of its two devices' levels (equal
    # weights: the same device columns) averaged with the level booster's
    new = tables["dev-c"][tables["dev-c"]["kernel_name"] != "synth_2"].reset_index(drop=True)
    kn, is_own = head.known_levels(new[KERNEL_KEY_COLUMN].tolist(), new["xfer_device"].tolist(),
                                   [dict(r) for _, r in new.iterrows()])
    assert not is_own.any()
    for name in ("synth_0", "synth_1"):
        sel = (new["kernel_name"] == name).to_numpy()
        k = key_of[name]
        assert kn[sel] == pytest.approx((head.kernel_levels[k]["dev-a"] + head.kernel_levels[k]["dev-b"]) / 2)
    x = model.matrix(new)
    lv = head.level.predict(x[:, list(head.level_index)])
    sh = head.shape.predict(x[:, :model.n_base])
    expected = new["analytical_us"].to_numpy() * np.exp2(head.shape_scale * sh + 0.5 * (kn + lv))
    np.testing.assert_allclose(model.predict_table(new).time_us, expected, rtol=1e-12)
    # dev-c's true level is the mean of the other two: closer than the analytical model (which
    # misses the level and the shape)
    err_new = np.abs(np.log2(model.predict_table(new).time_us / new["time_median_us"].to_numpy()))
    err_an = np.abs(np.log2(new["analytical_us"].to_numpy() / new["time_median_us"].to_numpy()))
    assert np.median(err_new) < 0.75 * np.median(err_an)
    # saved and loaded: the same predictions; a damaged split head is refused in one line
    model.save(tmp_path / "m")
    loaded = TabularPredictor.load(tmp_path / "m")
    for t in (own, new, unseen):
        np.testing.assert_array_equal(loaded.predict_table(t).time_us, model.predict_table(t).time_us)
    data = json.loads((tmp_path / "m" / MODEL_FILE).read_text())
    assert set(data["heads"]["time"]) >= {"level", "shape", "kernel_levels", "level_devices", "unseen_level_scale"}
    # format 5 (2 added the split head, 3 its transfer shape booster, 4 that booster's offset, 5
    # boosters saved as lists of texts): a reader of format 1 would predict the split head with its
    # direct booster alone
    assert data["version"] == 5 and data["heads"]["time"]["transfer_shape"] is None
    assert data["heads"]["time"]["transfer_shape_offset"] is False
    one = fit_tabular(train, base, seed=0, transfer=False, split=False)
    one.save(tmp_path / "v1")
    v1 = json.loads((tmp_path / "v1" / MODEL_FILE).read_text())
    (tmp_path / "v1" / MODEL_FILE).write_text(json.dumps({**v1, "version": 1}))
    np.testing.assert_array_equal(TabularPredictor.load(tmp_path / "v1").predict_table(own).time_us,
                                  one.predict_table(own).time_us)
    bad = json.loads(json.dumps(data))
    bad["heads"]["time"]["unseen_level_scale"] = 2.0
    (tmp_path / "m" / MODEL_FILE).write_text(json.dumps(bad))
    with pytest.raises(ModelFormatError, match="unseen_level_scale"):
        TabularPredictor.load(tmp_path / "m")
    bad = json.loads(json.dumps(data))
    bad["heads"]["time"]["shape"] = None
    (tmp_path / "m" / MODEL_FILE).write_text(json.dumps(bad))
    with pytest.raises(ModelFormatError, match="level booster"):
        TabularPredictor.load(tmp_path / "m")


def test_kernel_key_is_name_and_source():
    frame = pd.DataFrame({"source": ["a", "a", "b", None], "kernel_name": ["k", "k2", "k", "k"]})
    keys = kernel_keys(frame)
    assert keys[0] != keys[1] and keys[0] != keys[2] and keys[3] == ""
    assert kernel_keys(frame.assign(build_options="-DX=1"))[0] == keys[0]


def test_kernel_tuner_imports_are_grouped_by_kernel():
    from kernelcast.train.tabular import kernel_groups

    # one Kernel Tuner cache per GPU, each holding both kernels: the groups are the kernels
    g = kernel_groups(["conv", "dd", "conv"], ["ic", "id", "ic"], ["kt:A100.json.gz", "kt:A100.json.gz",
                                                                   "kt:W6600.json.gz"])
    assert list(g) == ["kernel:ic", "kernel:id", "kernel:ic"]
    assert list(kernel_groups(["k"], ["i"], ["corpus/a.cl"])) == ["file:corpus/a.cl"]

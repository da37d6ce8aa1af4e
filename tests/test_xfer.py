"""Configuration transfer (models/xfer.py): known answers of the table and its features (leave
own device out, the device weights, the spec shift, NaN without another device), and the tabular
model fitted with it (a configuration effect no static feature explains, learned from the other
devices), saved and loaded."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceProfile, load_profile
from kernelcast.models.tabular import (
    FEATURE_COLUMNS,
    MODEL_FILE,
    ModelFormatError,
    TabularPredictor,
    build_table,
    fill_transfer,
    transfer_rows,
)
from kernelcast.models.xfer import (
    FAMILY_WEIGHT,
    OTHER_CLASS_WEIGHT,
    VENDOR_WEIGHT,
    XFER_COLUMNS,
    XFER_COLUMNS_V1,
    XFER_FILE,
    XferFormatError,
    XferTable,
    defines,
    device_weight,
    xfer_keys,
)
from kernelcast.train.synthetic import synthetic_rows
from kernelcast.train.tabular import fit_tabular

from kernelcast.metrics import tuning_scores

NV = {"dev_class": 1.0, "dev_vendor": 0.0, "dev_warp_size": 32.0, "dev_dram_bw_gbs": 1000.0,
      "dev_peak_fp32_gflops": math.nan}
NV2 = {**NV, "dev_dram_bw_gbs": 500.0}
AMD = {"dev_class": 1.0, "dev_vendor": 1.0, "dev_warp_size": 64.0, "dev_dram_bw_gbs": 2000.0,
       "dev_peak_fp32_gflops": math.nan}
CPU = {"dev_class": 0.0, "dev_vendor": 1.0, "dev_warp_size": 8.0, "dev_dram_bw_gbs": math.nan,
       "dev_peak_fp32_gflops": math.nan}


def _rows(times: dict[str, dict[str, float]]) -> pd.DataFrame:
    """Transfer rows of one problem ``p``: device -> configuration -> time (us)."""
    out = [{"xfer_problem": "p", "xfer_config": c, "xfer_device": d, "time_median_us": t}
           for d, cs in times.items() for c, t in cs.items()]
    return pd.DataFrame(out)


def _target(dev: dict[str, float], n: int) -> dict[str, np.ndarray]:
    return {c: np.full(n, v) for c, v in dev.items()}


# times chosen so that each device's level (median log2 time over the problem) is known:
# A: 1, 2, 4 us -> level 1, relative -1, 0, 1; B: 2, 2, 8 -> level 1, relative 0, 0, 2;
# C: 8, 16, 32 -> level 4, relative -1, 0, 1; config c4 measured on A only
TIMES = {"A": {"c1": 1.0, "c2": 2.0, "c3": 4.0, "c4": 3.0}, "B": {"c1": 2.0, "c2": 2.0, "c3": 8.0},
         "C": {"c1": 8.0, "c2": 16.0, "c3": 32.0}}


def _table() -> XferTable:
    return XferTable.from_rows(_rows(TIMES), {"A": NV, "B": NV2, "C": AMD})


def test_levels_and_relative_times_are_known():
    t = _table()
    assert t.devices == ["A", "B", "C"]
    # A's level: median of log2(1, 2, 4, 3) = (1 + log2 3) / 2
    # (stored rounded to 1e-3 in log2)
    np.testing.assert_allclose(t.levels["p"], [(1 + math.log2(3)) / 2, 1.0, 4.0], atol=1e-3)
    np.testing.assert_allclose(t.configs["c3"][1], [2 - (1 + math.log2(3)) / 2, 2.0, 1.0], atol=2e-3)
    assert np.isnan(t.configs["c4"][1][1:]).all()


def test_weights_from_device_columns():
    assert device_weight(NV, NV2) == FAMILY_WEIGHT           # same class, vendor and warp width
    assert device_weight(AMD, {**AMD, "dev_warp_size": 32.0}) == VENDOR_WEIGHT   # CDNA and RDNA
    assert device_weight(NV, AMD) == 1.0                     # another vendor
    assert device_weight(NV, CPU) == OTHER_CLASS_WEIGHT
    assert FAMILY_WEIGHT > VENDOR_WEIGHT > 1.0 > OTHER_CLASS_WEIGHT
    # a column a profile does not state is no match
    assert device_weight(NV, {**NV2, "dev_warp_size": math.nan}) == VENDOR_WEIGHT
    assert device_weight(NV, {**NV2, "dev_vendor": math.nan}) == 1.0


def test_a_row_never_sees_its_own_device():
    t = _table()
    f = t.features(["c3", "c3", "c3"], ["A", "B", "C"], _target(NV, 3), np.zeros(3))
    ra, rb, rc = t.configs["c3"][1]
    # every row has NVIDIA's device columns: the other NVIDIA device weighs F (same family), C 1
    F = FAMILY_WEIGHT
    np.testing.assert_allclose(f["xfer_rel"], [(F * rb + rc) / (F + 1), (F * ra + rc) / (F + 1), (ra + rb) / 2])
    np.testing.assert_array_equal(f["xfer_devices"], [2, 2, 2])
    # changing A's own time moves nothing in A's features
    times = {**TIMES, "A": {**TIMES["A"], "c3": 400.0}}
    t2 = XferTable.from_rows(_rows(times), {"A": NV, "B": NV2, "C": AMD})
    f2 = t2.features(["c3"], ["A"], _target(NV, 1), np.zeros(1))
    for c in XFER_COLUMNS:
        np.testing.assert_array_equal(f2[c][:1], f[c][:1])


def test_the_weights_follow_the_row_device_columns():
    t = _table()
    # a row of an unseen AMD device: every device of the table counts, C (same family) F times
    f = t.features(["c3"], ["new"], _target(AMD, 1), np.zeros(1))
    ra, rb, rc = t.configs["c3"][1]
    F = FAMILY_WEIGHT
    np.testing.assert_allclose(f["xfer_rel"], [(ra + rb + F * rc) / (F + 2)])
    # an AMD device of another wavefront width: C weighs VENDOR_WEIGHT
    g = t.features(["c3"], ["new"], _target({**AMD, "dev_warp_size": 32.0}, 1), np.zeros(1))
    V = VENDOR_WEIGHT
    np.testing.assert_allclose(g["xfer_rel"], [(ra + rb + V * rc) / (V + 2)])
    assert f["xfer_devices"][0] == 3


def test_absolute_estimate_is_shifted_by_the_bandwidth_ratio():
    t = XferTable.from_rows(_rows({"A": TIMES["A"], "B": TIMES["B"]}), {"A": NV, "B": NV2})
    # a row on A of c3: B measured 8 us at half A's bandwidth -> 4 us on A: log2 = 2; analytical 1 us
    f = t.features(["c3"], ["A"], _target(NV, 1), np.array([0.0]))
    np.testing.assert_allclose(f["xfer_abs_log2"], [2.0])
    np.testing.assert_allclose(f["xfer_resid"], [2.0])
    # the relative one less the analytical log2 time (here 0.5: 1.41 us): B's relative 2 - 0.5
    h = t.features(["c3"], ["A"], _target(NV, 1), np.array([0.5]))
    np.testing.assert_allclose(h["xfer_rel_an"], [1.5])
    np.testing.assert_allclose(h["xfer_resid"], [1.5])
    # a device without a stated bandwidth has no absolute estimate, its relative one stays
    g = t.features(["c3"], ["A"], _target({**NV, "dev_dram_bw_gbs": math.nan}, 1), np.array([0.0]))
    assert np.isnan(g["xfer_abs_log2"][0]) and np.isnan(g["xfer_resid"][0]) and np.isfinite(g["xfer_rel"][0])


def test_nan_where_no_other_device_has_the_configuration():
    t = _table()
    f = t.features(["c4", "unknown", ""], ["A", "B", "B"], _target(NV, 3), np.zeros(3))
    for c in ("xfer_rel", "xfer_abs_log2", "xfer_resid", "xfer_rel_an"):
        assert np.isnan(f[c]).all()
    np.testing.assert_array_equal(f["xfer_devices"], [0, 0, 0])
    # c4 on another device than A: A's value
    g = t.features(["c4"], ["B"], _target(NV, 1), np.zeros(1))
    np.testing.assert_allclose(g["xfer_rel"], [math.log2(3) - (1 + math.log2(3)) / 2], atol=2e-3)


# analytical log2 times of TIMES' rows: A the same for every configuration (relative 0 each), B
# 0, 1, 2 (median 1: relative -1, 0, 1), C none
ANALYTICAL = {"A": {"c1": 0.0, "c2": 0.0, "c3": 0.0, "c4": 0.0}, "B": {"c1": 0.0, "c2": 1.0, "c3": 2.0}}


def _table_with_analytical() -> XferTable:
    rows = _rows(TIMES)
    rows["log2_analytical_us"] = [ANALYTICAL.get(d, {}).get(c, math.nan)
                                  for d, c in zip(rows["xfer_device"], rows["xfer_config"])]
    return XferTable.from_rows(rows, {"A": NV, "B": NV2, "C": AMD})


def test_residual_shape_of_known_analytical_times():
    t = _table_with_analytical()
    la = (1 + math.log2(3)) / 2                       # A's level
    # the relative analytical times: A 0 everywhere, B -1, 0, 1, C none
    np.testing.assert_allclose(t.analytical["c1"][:2], [0.0, -1.0])
    np.testing.assert_allclose(t.analytical["c3"][:2], [0.0, 1.0])
    assert np.isnan(t.analytical["c1"][2])
    # residual shapes (relative time - relative analytical): A c1 -la, c3 2 - la; B c1 0 - (-1) = 1,
    # c3 2 - 1 = 1; C has no analytical time and gives none
    f = t.features(["c3", "c1", "c1", "c4"], ["A", "new", "C", "B"], _target(AMD, 4), np.zeros(4))
    # c3 on A: B only (C has none); c1 on an AMD device: A and B weigh 1 each (C would weigh 4)
    np.testing.assert_allclose(f["xfer_shape"][:3], [1.0, (-la + 1.0) / 2, (-la + 1.0) / 2], atol=2e-3)
    # c4 (measured on A alone) on B: A's shape, log2 3 - la
    np.testing.assert_allclose(f["xfer_shape"][3], math.log2(3) - la, atol=2e-3)
    # the ranking columns are those of the table without analytical times
    g = _table().features(["c3", "c1", "c1", "c4"], ["A", "new", "C", "B"], _target(AMD, 4), np.zeros(4))
    for c in XFER_COLUMNS_V1:
        np.testing.assert_array_equal(f[c], g[c])
    # without analytical times there is no residual shape
    assert not _table().analytical and np.isnan(g["xfer_shape"]).all()
    # saved and loaded (version 2), the same; a version 1 file (no analytical times) still loads
    with_a = t.to_dict()
    assert with_a["version"] == 2 and "analytical" in with_a["problems"]["p"]
    u = XferTable.from_dict(json.loads(json.dumps(with_a)))
    h = u.features(["c3", "c1", "c1", "c4"], ["A", "new", "C", "B"], _target(AMD, 4), np.zeros(4))
    np.testing.assert_array_equal(h["xfer_shape"], f["xfer_shape"])
    v1 = _table().to_dict()
    v1["version"] = 1
    assert not XferTable.from_dict(v1).analytical
    bad = json.loads(json.dumps(with_a))
    bad["problems"]["p"]["analytical"]["zz"] = [0.0, 0.0, 0.0]
    with pytest.raises(XferFormatError, match="zz"):
        XferTable.from_dict(bad)


def test_table_round_trip_and_bad_files(tmp_path):
    t = _table()
    t.save(tmp_path)
    u = XferTable.load(tmp_path)
    assert u is not None and u.devices == t.devices
    f = t.features(["c1", "c3"], ["A", "new"], _target(NV, 2), np.zeros(2))
    g = u.features(["c1", "c3"], ["A", "new"], _target(NV, 2), np.zeros(2))
    for c in XFER_COLUMNS:
        np.testing.assert_array_equal(g[c], f[c])
    assert XferTable.load(tmp_path / "none") is None
    data = json.loads((tmp_path / XFER_FILE).read_text())
    for change, match in (({"version": 9}, "version 9"), ({"format": "x"}, "not a"),
                          ({"problems": {"p": {"levels": [1.0], "configs": {}}}}, "cannot read")):
        (tmp_path / "bad").mkdir(exist_ok=True)
        (tmp_path / "bad" / XFER_FILE).write_text(json.dumps({**data, **change}))
        with pytest.raises(XferFormatError, match=match):
            XferTable.load(tmp_path / "bad")


def test_keys_match_between_dataset_and_prediction_rows():
    frame, _ = synthetic_rows(n_kernels=2, configs_per_kernel=6, seed=1)
    p, c = xfer_keys(frame)
    assert len(set(c)) == len(frame)                      # every configuration has its own key
    pred = frame[["source", "kernel_name", "gsize", "lsize", "args"]].copy()
    pred["build_options"] = ""
    pred["args"] = [json.loads(a) if isinstance(a, str) else a for a in frame["args"]]
    p2, c2 = xfer_keys(pred)
    assert list(c2) == list(c) and list(p2) == list(p)
    assert defines("-Db=2 -I/x -Da=1 -cl-fast") == "a=1 b=2"
    # the tunable parameters are part of the configuration
    other = frame.assign(build_options="-Dblock=2")
    assert not set(xfer_keys(other)[1]) & set(c)


def _device(profile: DeviceProfile, name: str) -> DeviceProfile:
    d = profile.to_dict()
    d["device"] = {**d["device"], "name": name}
    return DeviceProfile.from_dict(d)


@pytest.fixture(scope="module")
def devices_tables():
    """Four devices (hand-made copies of one profile, so equally fast) measuring the same
    configurations; each configuration's time carries a factor 2**z of its own (z ~ N(0, 1), the
    same on every device) that no feature of the table explains."""
    base = load_profile("pocl-local")
    frame, _ = synthetic_rows(n_kernels=4, configs_per_kernel=40, seed=3, noise=0.0)
    z = np.random.default_rng(0).normal(0.0, 1.0, len(frame))
    tables, refs = [], []
    for name in ("dev-a", "dev-b", "dev-c", "dev-d"):
        prof = _device(base, name)
        f = frame.assign(time_median_us=frame["time_median_us"] * np.exp2(z))
        tables.append(build_table(f, prof))
        refs.append(transfer_rows(f, prof))
    return base, tables, refs


def test_model_learns_the_configuration_effect_from_other_devices(devices_tables, tmp_path):
    base, tables, _ = devices_tables
    train = pd.concat(tables[:3], ignore_index=True)
    test = tables[3]
    with_x = fit_tabular(train, base, seed=0)
    without = fit_tabular(train, base, seed=0, transfer=False)
    assert with_x.xfer is not None and with_x.xfer.devices == ["dev-a", "dev-b", "dev-c"]
    assert all(c in with_x.features for c in XFER_COLUMNS)
    assert not any(c in without.features for c in XFER_COLUMNS) and without.xfer is None
    y = test["time_median_us"].to_numpy()
    p_x, p_0 = with_x.predict_table(test).time_us, without.predict_table(test).time_us
    filled = fill_transfer(test, with_x.xfer)
    head, head0 = with_x.heads["time"], without.heads["time"]
    # a split head: the transfer columns feed the shape only (the transfer shape booster); the level
    # path is the one of the model without them, so the two models differ by the shapes alone
    assert head.split and head.transfer is None and head.transfer_shape is not None
    x = with_x.matrix(filled)
    # the table has the training rows' analytical times (xfer_shape, among the booster's features);
    # by default the transfer shape is not offset by them
    assert not head.transfer_shape_offset and with_x.xfer.analytical
    tsh = head.transfer_shape.predict(x)
    sh = head0.shape.predict(without.matrix(test))
    assert np.isfinite(filled["xfer_rel"]).all() and np.isfinite(filled["xfer_shape"]).all()
    np.testing.assert_allclose(np.log2(p_x / p_0), head.shape_scale * (tsh - sh), atol=1e-9)
    # the other devices measured the factor: the transfer shape recovers most of it on the held-out
    # device (it learns it relative to the analytical model, up to one constant per kernel);
    # without it the model cannot know the factor (|z| has a median of 0.67)
    err_x, err_0 = (np.median(np.abs(np.log2(p / y))) for p in (p_x, p_0))
    assert err_0 > 0.45 and err_x < 0.8 * err_0                   # 0.39 against 0.55
    # a row measured on no other device gets the model without transfer
    lone = test.assign(xfer_config="none")
    np.testing.assert_array_equal(with_x.predict_table(lone).time_us, p_0)
    # save / load: the table is beside the model, the predictions are the same
    with_x.save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [MODEL_FILE, XFER_FILE]
    loaded = TabularPredictor.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict_table(test).time_us, with_x.predict_table(test).time_us)
    # a transfer shape booster beside a transfer booster (two ways of one transfer) is refused
    data = json.loads((tmp_path / "m" / MODEL_FILE).read_text())
    bad = json.loads(json.dumps(data))
    bad["heads"]["time"]["transfer"] = bad["heads"]["time"]["transfer_shape"]
    (tmp_path / "m" / MODEL_FILE).write_text(json.dumps(bad))
    with pytest.raises(ModelFormatError, match="transfer shape"):
        TabularPredictor.load(tmp_path / "m")
    (tmp_path / "m" / MODEL_FILE).write_text(json.dumps(data))
    # a model of the transfer columns without its table fails cleanly
    (tmp_path / "m" / XFER_FILE).unlink()
    with pytest.raises(ModelFormatError, match=XFER_FILE):
        TabularPredictor.load(tmp_path / "m")
    # saving a model without the table over it removes the stale table
    with_x.save(tmp_path / "m")
    without.save(tmp_path / "m")
    assert not (tmp_path / "m" / XFER_FILE).exists()


@pytest.fixture(scope="module")
def shaped_tables():
    """Four devices (copies of one profile) measuring the same 24 configurations of one problem of
    each of three kernels (one global size, build options ``-DV=i`` and local sizes that the kernels
    do not read), each configuration's time 100 us x 2**z with z ~ N(0, 1) of its own, the same on
    every device: each device's residual shape is every other device's."""
    base = load_profile("pocl-local")
    frame, _ = synthetic_rows(n_kernels=3, configs_per_kernel=24, seed=5, noise=0.0)
    first = frame.groupby("kernel_id").head(1).set_index("kernel_id")
    frame["gsize"] = frame["kernel_id"].map(first["gsize"])
    frame["args"] = frame["kernel_id"].map(first["args"])
    frame["global_items"] = [g[0] for g in frame["gsize"]]
    frame["n_wg"] = [g[0] // ls[0] if isinstance(ls, list) else None for g, ls in zip(frame["gsize"], frame["lsize"])]
    frame["build_options"] = [f"-DV={i}" for i in range(len(frame))]
    frame["time_median_us"] = 100.0 * np.exp2(np.random.default_rng(1).normal(0.0, 1.0, len(frame)))
    return base, [build_table(frame, _device(base, n)) for n in ("dev-a", "dev-b", "dev-c", "dev-d")]


def test_a_device_shaped_as_the_others_is_ranked_exactly(shaped_tables, tmp_path):
    """The held-out device's times have the training devices' residual shape exactly: with the
    transfer shape offset by ``xfer_shape`` its configurations are ranked as measured; the booster
    alone, with the same columns among its features, ranks them less well."""
    base, tables = shaped_tables
    train = pd.concat(tables[:3], ignore_index=True)
    test = tables[3]
    y = test["time_median_us"].to_numpy()
    problems = test["xfer_problem"].to_numpy()
    offset = fit_tabular(train, base, seed=0, transfer_offset=True)
    plain = fit_tabular(train, base, seed=0)                             # the default: no offset
    assert offset.heads["time"].transfer_shape_offset and not plain.heads["time"].transfer_shape_offset
    assert offset.features == plain.features and "xfer_shape" in offset.features
    got = tuning_scores(offset.predict_table(test).time_us, y, problems)
    ref = tuning_scores(plain.predict_table(test).time_us, y, problems)
    assert got["groups"] == 3 and got["top1_within"] == 1.0 and got["spearman_mean"] == pytest.approx(1.0)
    assert ref["spearman_mean"] < 0.999                                  # 0.992
    # saved (format 5) and loaded with its offset: the same predictions
    offset.save(tmp_path / "m")
    data = json.loads((tmp_path / "m" / MODEL_FILE).read_text())
    assert data["version"] == 5 and data["heads"]["time"]["transfer_shape_offset"] is True
    np.testing.assert_array_equal(TabularPredictor.load(tmp_path / "m").predict_table(test).time_us,
                                  offset.predict_table(test).time_us)
    # a model of format 3 (no offset) still loads, as the model fitted without the offset
    plain.save(tmp_path / "p")
    old = json.loads((tmp_path / "p" / MODEL_FILE).read_text())
    assert old["heads"]["time"].pop("transfer_shape_offset") is False
    (tmp_path / "p" / MODEL_FILE).write_text(json.dumps({**old, "version": 3}))
    np.testing.assert_array_equal(TabularPredictor.load(tmp_path / "p").predict_table(test).time_us,
                                  plain.predict_table(test).time_us)
    # an offset that is not true or false, or without a transfer shape booster, is refused
    for change in ({"transfer_shape_offset": "yes"}, {"transfer_shape": None}):
        bad = json.loads(json.dumps(data))
        bad["heads"]["time"].update(change)
        (tmp_path / "m" / MODEL_FILE).write_text(json.dumps(bad))
        with pytest.raises(ModelFormatError, match="transfer_shape_offset|transfer shape offset"):
            TabularPredictor.load(tmp_path / "m")


def test_training_rows_use_only_the_other_devices(devices_tables):
    base, tables, _ = devices_tables
    train = pd.concat(tables[:3], ignore_index=True)
    model = fit_tabular(train, base, seed=0)
    filled = fill_transfer(train, model.xfer)
    assert (filled["xfer_devices"] == 2).all()             # of three devices, never the row's own
    # the same rows with their own device's time changed tenfold: their features do not move
    t2 = train.copy()
    own = (t2["xfer_device"] == "dev-a").to_numpy()
    t2.loc[own, "time_median_us"] *= 10.0
    again = fill_transfer(train, fit_tabular(t2, base, seed=0).xfer)
    np.testing.assert_allclose(again.loc[own, "xfer_rel"], filled.loc[own, "xfer_rel"], atol=1e-12)


def test_one_device_gives_no_transfer_columns(devices_tables):
    base, tables, _ = devices_tables
    model = fit_tabular(tables[0], base, seed=0)
    assert model.xfer is None and model.features == [c for c in FEATURE_COLUMNS if c not in XFER_COLUMNS]


def test_a_model_of_table_version_2_still_loads(devices_tables, tmp_path):
    base, tables, _ = devices_tables
    model = fit_tabular(tables[0], base, seed=0)
    model.save(tmp_path / "old")
    data = json.loads((tmp_path / "old" / MODEL_FILE).read_text())
    (tmp_path / "old" / MODEL_FILE).write_text(json.dumps({**data, "table_version": 2}))
    loaded = TabularPredictor.load(tmp_path / "old")
    np.testing.assert_array_equal(loaded.predict_table(tables[1]).time_us, model.predict_table(tables[1]).time_us)
    (tmp_path / "old" / MODEL_FILE).write_text(json.dumps({**data, "table_version": 1}))
    with pytest.raises(ModelFormatError, match="table 1"):
        TabularPredictor.load(tmp_path / "old")


def test_extra_transfer_rows_reach_the_table(devices_tables):
    base, tables, refs = devices_tables
    # training rows of two devices; a third device known only from its transfer rows
    train = pd.concat(tables[:2], ignore_index=True)
    model = fit_tabular(train, base, seed=0, transfer_rows=refs[2])
    assert model.xfer is not None and model.xfer.devices == ["dev-a", "dev-b", "dev-c"]
    assert (fill_transfer(train, model.xfer)["xfer_devices"] == 2).all()


def test_evaluate_fitter_never_lets_a_held_out_device_into_the_table(devices_tables):
    from kernelcast.train.oof import TabularFitter

    base, tables, refs = devices_tables
    table = pd.concat(tables, ignore_index=True)
    train = np.flatnonzero(table["xfer_device"] != "dev-d")
    test = np.flatnonzero(table["xfer_device"] == "dev-d")

    def predict(rows: pd.DataFrame | None, transfer: bool = True) -> np.ndarray:
        f = TabularFitter(base, seed=0, transfer=transfer, transfer_rows=rows)
        f.table = table
        return f.fit_predict(train, test)

    # the held-out device's own measured rows among the transfer rows change nothing
    np.testing.assert_array_equal(predict(pd.concat(refs, ignore_index=True)),
                                  predict(pd.concat(refs[:3], ignore_index=True)))
    assert not np.array_equal(predict(None), predict(None, transfer=False))

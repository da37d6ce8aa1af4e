"""Few-shot updating and intervals: the offset and its shrinkage, the conformal quantiles against a
hand-computed example, the interval calibration a tabular model is saved with, bad measured files
on the command line, and real measurements on this device (``predict --measured`` with the output
of ``kernelcast measure --json``, ``tune --model --measure-top``)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import load_profile
from kernelcast.models.fewshot import (
    DEFAULT_SHRINK_PRIOR,
    MAX_PRIOR,
    MIN_PRIOR,
    POOL_DOF,
    MeasuredFileError,
    estimate_prior,
    fit_offset,
    read_measured,
    shrinkage,
)
from kernelcast.models.predict import configuration_row
from kernelcast.models.tabular import (
    MODEL_FILE,
    IntervalCalibration,
    ResidualCalibration,
    ResidualQuantiles,
    TabularPredictor,
    build_table,
)
from kernelcast.train.synthetic import synthetic_rows
from kernelcast.train.tabular import calibrate_intervals, fit_tabular, grouped_folds, kernel_groups

import kernelcast.cli as cli
from kernelcast.schema import Kernel
from tests.kernels import TRIAD, poly

ROOT = Path(__file__).resolve().parents[1]
PROFILE = str(ROOT / "calib" / "profiles" / "pocl-local.json")

SAXPY = """__kernel void saxpy(__global const float *x, __global float *y, const float a, const int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture(scope="module")
def profile():
    return load_profile("pocl-local")


# ---------------------------------------------------------------------------------------------
# the offset


def test_a_model_off_by_two_is_exact_with_one_shot_before_shrinkage():
    off = fit_offset([20.0], [10.0], prior=0.0)           # no shrinkage
    assert off.k == 1 and off.mean_log2 == 1.0 and off.shrink == 1.0
    assert off.factor == 2.0
    np.testing.assert_array_equal(off.apply([10.0, 3.0]), [20.0, 6.0])


def test_shrinkage_formula():
    assert DEFAULT_SHRINK_PRIOR == 1.0
    assert shrinkage(0) == 0.0 and shrinkage(1) == 0.5 and shrinkage(3) == 0.75
    assert shrinkage(2, prior=0.5) == 0.8
    off = fit_offset([20.0], [10.0])                      # k / (k + 1): half-way in log space
    assert off.log2 == 0.5 and math.isclose(off.factor, math.sqrt(2.0))
    off = fit_offset([20.0, 40.0, 10.0], [10.0, 40.0, 10.0 * 2 ** 0.5])   # residuals 1, 0, -0.5
    assert off.k == 3
    assert math.isclose(off.mean_log2, 1.0 / 6.0)
    assert math.isclose(off.log2, 0.75 / 6.0)
    assert math.isclose(off.spread, 1.0 - 1.0 / 6.0)     # the shot farthest from the mean
    assert "corrected by x1.09 from 3 measured configurations" in off.describe()
    # pairs without a positive finite value are left out; none left: no correction
    assert fit_offset([20.0, np.nan, 5.0], [10.0, 1.0, 0.0], prior=0).k == 1
    assert fit_offset([], []).factor == 1.0


def test_prior_by_hand():
    """Kernels A [0, 2], B [-2, 0], C [3, 5]: within-kernel variance (1+1+1+1+1+1) / (6 - 3) = 2;
    kernel means 1, -1, 4 have variance 19/3, less 2/2 for their own noise: 16/3; 2 / (16/3) = 3/8."""
    prior, d = estimate_prior([0, 2, -2, 0, 3, 5], ["A", "A", "B", "B", "C", "C"])
    assert math.isclose(d["within_var"], 2.0) and math.isclose(d["between_var"], 16.0 / 3.0)
    assert math.isclose(prior, 0.375)
    # identical kernels: their offsets cannot be told apart from noise, so shrink hard
    assert estimate_prior([0, 2, 0, 2], ["A", "A", "B", "B"])[0] == MAX_PRIOR
    # no scatter within kernels: trust one shot (clipped)
    assert estimate_prior([1, 1, 3, 3], ["A", "A", "B", "B"])[0] == MIN_PRIOR
    assert estimate_prior([1, 2], ["A", "B"])[0] == DEFAULT_SHRINK_PRIOR   # no kernel with two residuals


def test_shots_that_disagree_shrink_more_by_hand():
    """With the pooled within-kernel variance known, a kernel's own shots pool with it (POOL_DOF = 1):
    shots 1, 1, 1 (no scatter), prior 1, s_w**2 1: s_k**2 = (1 + 2 * 0) / 3 = 1/3, shrink
    3 / (3 + 1/3) = 0.9; shots 0, 4 (variance 8), prior 0.5, s_w**2 1: s_k**2 = (1 + 8) / 2 = 4.5,
    prior 0.5 * 4.5 = 2.25, shrink 2 / 4.25."""
    assert POOL_DOF == 1.0
    off = fit_offset([2.0, 4.0, 8.0], [1.0, 2.0, 4.0], prior=1.0, within_var=1.0)
    assert math.isclose(off.kernel_prior, 1.0 / 3.0) and math.isclose(off.log2, 0.9)
    off = fit_offset([1.0, 16.0], [1.0, 1.0], prior=0.5, within_var=1.0)
    assert math.isclose(off.kernel_prior, 2.25) and math.isclose(off.shrink, 2.0 / 4.25)
    assert math.isclose(off.log2, 2.0 * 2.0 / 4.25)
    assert off.to_dict()["prior"] == off.kernel_prior and off.to_dict()["pooled_prior"] == 0.5
    assert "shrunk by 2/(2+2.25)" in off.describe()
    # one shot, or no pooled variance: the pooled prior as before
    assert fit_offset([4.0], [1.0], prior=0.5, within_var=1.0).shrink == 1.0 / 1.5
    assert fit_offset([1.0, 16.0], [1.0, 1.0], prior=0.5).shrink == 0.8


# ---------------------------------------------------------------------------------------------
# conformal quantiles


def test_conformal_quantiles_by_hand():
    """r = -0.9, -0.8, ..., 1.0 (n = 20). |r| sorted: 0, .1, .1, ..., .9, .9, 1.0; the
    ceil(21 x 0.9) = 19th smallest is 0.9. Signed: ceil(21 x 0.95) = 20th smallest (1.0) on top,
    21 - 20 = 1st smallest (-0.9) below."""
    r = np.round(np.arange(-9, 11) * 0.1, 10)
    q = ResidualQuantiles.of(r, 0.9)
    assert q.n == 20 and q.abs_q == pytest.approx(0.9) and q.hi_q == pytest.approx(1.0) and q.lo_q == -0.9
    assert q.log2_bounds("symmetric") == (-q.abs_q, q.abs_q)
    assert q.log2_bounds("signed") == (q.lo_q, q.hi_q)
    # n = 10: ceil(11 x 0.9) = 10th (the largest |r|); ceil(11 x 0.95) = 11 > 10: unbounded
    q10 = ResidualQuantiles.of(np.arange(1, 11) * 0.1, 0.9)
    assert q10.abs_q == pytest.approx(1.0) and q10.hi_q == math.inf and q10.lo_q == -math.inf
    assert ResidualQuantiles.of([0.5] * 5, 0.9).abs_q == math.inf        # too few for 90 %
    # NaN residuals do not count
    assert ResidualQuantiles.of(np.append(r, [np.nan, np.nan]), 0.9) == q
    # the JSON form keeps infinities as null and reads them back
    d = json.loads(json.dumps(q10.to_dict()))
    assert d["hi_q"] is None and ResidualQuantiles.from_dict(d) == q10


def test_interval_per_bound_and_after_shots():
    overall = ResidualQuantiles(100, 1.0, -1.0, 2.0)
    memory = ResidualQuantiles(60, 0.5, -0.5, 0.5)
    one_shot = ResidualQuantiles(80, 0.25, -0.25, 0.25)
    cal = ResidualCalibration(overall, {"memory": memory}, {1: one_shot}, kind="symmetric")
    lo, hi = cal.interval([10.0, 10.0, 10.0], ["memory", "compute", None])
    np.testing.assert_allclose(lo, [10 / 2 ** 0.5, 5.0, 5.0])
    np.testing.assert_allclose(hi, [10 * 2 ** 0.5, 20.0, 20.0])
    cal.kind = "signed"
    lo, hi = cal.interval(10.0, "compute")
    np.testing.assert_allclose([lo[0], hi[0]], [5.0, 40.0])
    # after 3 shots: the largest stored k not above 3 (k = 1), widened to the shots' own scatter
    lo, hi = cal.interval(10.0, "memory", shots=3)
    np.testing.assert_allclose([lo[0], hi[0]], [10 * 2 ** -0.25, 10 * 2 ** 0.25])
    lo, hi = cal.interval(10.0, shots=3, spread=1.0)
    np.testing.assert_allclose([lo[0], hi[0]], [5.0, 20.0])
    assert np.isnan(cal.interval([np.nan, 0.0])[0]).all()
    assert ResidualCalibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


# ---------------------------------------------------------------------------------------------
# the calibration of a tabular model


def test_groups_and_folds():
    g = kernel_groups(["synth_tile_000028", "synth_tile_000029", "synth_tile2d_000001", "ew_add", "ew_mul", "x_1"],
                      ["a", "b", "c", "d", "e", "f"],
                      [None, "synth:seed=11:i=29", None, "bundled/elementwise.cl", "bundled/elementwise.cl", None])
    # the rule of evaluate's outer folds: a template family, a source file, else the kernel itself
    assert list(g) == ["synth:synth_tile", "synth:synth_tile", "synth:synth_tile2d", "file:bundled/elementwise.cl",
                       "file:bundled/elementwise.cl", "kernel:f"]
    assert kernel_groups(["x_3"], origins=["synth:seed=1:i=3"])[0] == "synth:x"
    groups = np.array(["a"] * 5 + ["b"] * 3 + ["c"] * 3 + ["d"] * 2 + ["e"])
    folds = grouped_folds(groups, 3, seed=0)
    for k in set(groups):
        assert len(set(folds[groups == k])) == 1                       # a group in one fold
    assert sorted(np.bincount(folds).tolist()) == [4, 5, 5]            # balanced by rows
    np.testing.assert_array_equal(folds, grouped_folds(groups, 3, seed=0))


def _offset_table(profile, offsets=(0.0, 1.0, 2.0, 3.0), per_kernel=10) -> pd.DataFrame:
    """Real features of synthetic kernels; time = analytical x 2**offset of the kernel."""
    frame, _ = synthetic_rows(n_kernels=len(offsets), configs_per_kernel=per_kernel, seed=3)
    table = build_table(frame, profile)
    off = dict(zip(sorted(table["kernel_name"].unique()), offsets))
    table["time_median_us"] = table["analytical_us"] * np.exp2(table["kernel_name"].map(off))
    return table


def test_calibration_on_a_known_answer(profile, tmp_path):
    """Analytical residuals are the kernel offsets 0, 1, 2, 3 (10 rows each): n = 40, the
    ceil(41 x 0.9) = 37th smallest |r| is 3, the ceil(41 x 0.95) = 39th smallest r is 3 and the
    2nd smallest 0. No scatter within a kernel: the prior is the smallest, and one shot leaves
    3 x (1 - 1/1.01) of the largest offset."""
    table = _offset_table(profile)
    cal, why = calibrate_intervals(table, profile)
    assert cal is None and "1 kernel group" in why                     # one synthetic template family
    groups = table["kernel_name"].to_numpy()
    cal, why = calibrate_intervals(table, profile, groups, folds=4, params={"min_data_in_leaf": 5})
    assert why == "" and cal is not None
    assert (cal.folds, cal.groups, cal.rows, cal.level) == (4, 4, 40, 0.9)
    an = cal.models["analytical"]
    assert (an.overall.n, an.overall.abs_q, an.overall.hi_q, an.overall.lo_q) == (40, 3.0, 3.0, 0.0)
    assert an.by_bound == {}                                            # no bound with 50 rows
    assert an.prior == MIN_PRIOR
    assert an.within_var == 0.0          # no scatter within a kernel: stored, and no per-kernel rescaling
    assert an.shots[1].abs_q == pytest.approx(3 * (1 - 1 / (1 + MIN_PRIOR)))
    assert an.figures["interval_cv"]["rows"] == 40
    tab = cal.models["tabular"]
    assert tab.overall.n == 40 and tab.figures["oof"]["rows"] == 40
    # saved with the model, read back, and used by TabularPredictor.interval
    model = fit_tabular(table, profile, params={"min_data_in_leaf": 5})
    model.calibration = cal
    model.save(tmp_path / "m")
    assert "intervals" in json.loads((tmp_path / "m" / MODEL_FILE).read_text())
    loaded = TabularPredictor.load(tmp_path / "m")
    assert isinstance(loaded.calibration, IntervalCalibration)
    assert loaded.calibration.to_dict() == json.loads(json.dumps(cal.to_dict()))
    assert loaded.calibration.models["analytical"].within_var == 0.0
    lo, hi = loaded.interval([100.0], None)
    a, z = tab.overall.log2_bounds(tab.kind)
    np.testing.assert_allclose([lo[0], hi[0]], [100 * 2 ** a, 100 * 2 ** z])
    # a model saved without a calibration has no interval
    model.calibration = None
    assert np.isnan(model.interval([100.0])[0]).all()


# ---------------------------------------------------------------------------------------------
# measured files


def test_read_measured_forms(tmp_path):
    k = Kernel(SAXPY, "saxpy")
    p = tmp_path / "m.csv"
    p.write_text("gsize,lsize,time_us,n\n4096,64,12.5,4096\n1024x2,,3\n")
    ms = read_measured(str(p), k, ["x", "y", "a", "n"])
    assert [(c.gsize, c.lsize, c.time_us) for c in ms.configs] == [((4096,), (64,), 12.5), ((1024, 2), None, 3.0)]
    assert ms.configs[0].arg_values == {"n": "4096"}
    rec = {"kernel_name": "saxpy", "kernel_id": k.id, "gsize": [4096], "lsize": [64], "status": "ok",
           "time": {"median_us": 7.0}, "args": [{"name": "n", "kind": "scalar", "dtype": "int", "value": "4096"}]}
    p = tmp_path / "m.json"
    p.write_text(json.dumps([rec, {**rec, "status": "timeout", "time": None}]))
    ms = read_measured(str(p), k)
    assert len(ms.configs) == 1 and ms.skipped == 1 and ms.configs[0].time_us == 7.0 and ms.configs[0].args
    p.write_text(json.dumps({**rec, "kernel_id": "other"}))            # one object, another source version
    assert read_measured(str(p), k).notes


BAD_FILES = [
    ("gsize.csv", "gsize,lsize,time_us\nabc,64,10\n", "gsize 'abc' is not a size"),
    ("divide.csv", "gsize,lsize,time_us\n1000,64,10\n", "local size 64 does not divide global size 1000"),
    ("time.csv", "gsize,lsize,time_us\n1024,64,-3\n", "time '-3' is not positive"),
    ("other.csv", "gsize,lsize,time_us,kernel_name\n1024,64,3,triad\n", "kernel 'triad', not 'saxpy'"),
    ("columns.csv", "gsize,lsize\n1024,64\n", "needs columns 'gsize' and 'time_us'"),
    ("none.json", json.dumps({"kernel_name": "saxpy", "gsize": [1024], "status": "timeout"}),
     "no usable measured configuration"),
    ("other.json", json.dumps([{"kernel_name": "triad", "gsize": [1024], "time": {"median_us": 2}}]),
     "kernel 'triad', not 'saxpy'"),
    ("broken.json", '{"kernel_name": ', "not valid JSON"),
]


@pytest.mark.parametrize("name,text,message", BAD_FILES)
def test_bad_measured_file_is_one_line_exit_2(tmp_path, capsys, name, text, message):
    kfile = tmp_path / "saxpy.cl"
    kfile.write_text(SAXPY)
    bad = tmp_path / name
    bad.write_text(text)
    with pytest.raises(MeasuredFileError, match=message):
        read_measured(str(bad), Kernel(SAXPY, "saxpy"), ["x", "y", "a", "n"])
    for cmd in (["predict", "--kernel", str(kfile), "--gsize", "4096", "--lsize", "64"],
                ["tune", "--kernel", str(kfile), "--gsize", "4096", "--top", "2"]):
        assert cli.main(cmd + ["--profile", PROFILE, "--measured", str(bad)]) == 2
        out, err = capsys.readouterr()
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and lines[0].startswith("kernelcast: error: --measured")


def test_tune_model_refuses_a_codegen_model(tmp_path, capsys):
    kfile = tmp_path / "saxpy.cl"
    kfile.write_text(SAXPY)
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "config.json").write_text("{}")
    assert cli.main(["tune", "--kernel", str(kfile), "--gsize", "4096", "--profile", PROFILE,
                     "--model", str(tmp_path / "cg")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "tabular model only" in err


def test_analytical_alone_has_no_interval_and_says_why(tmp_path, capsys):
    kfile = tmp_path / "saxpy.cl"
    kfile.write_text(SAXPY)
    meas = tmp_path / "m.csv"
    meas.write_text("gsize,lsize,time_us\n4096,64,20\n")
    assert cli.main(["predict", "--kernel", str(kfile), "--gsize", "8192", "--lsize", "64", "--profile", PROFILE,
                     "--measured", str(meas), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    p = d["predictions"][0]["analytical"]
    assert p["interval_90_us"] is None and "no measured residuals" in d["intervals"]["none_because"]["analytical"]
    c = d["correction"]["models"]["analytical"]
    assert c["k"] == 1 and c["shrink"] == 0.5
    assert p["time_us"] == pytest.approx(p["uncorrected_time_us"] * 2 ** (0.5 * c["mean_log2"]))
    assert cli.main(["predict", "--kernel", str(kfile), "--gsize", "8192", "--lsize", "64", "--profile", PROFILE,
                     "--measured", str(meas)]) == 0
    out, err = capsys.readouterr()
    assert "90% interval" in out and "corrected by x" in out and "no measured residuals" in err


# ---------------------------------------------------------------------------------------------
# real measurements on this device


def _measure_json(kfile: Path, gsize: int, lsize: int) -> dict:
    r = subprocess.run([sys.executable, "-m", "kernelcast.cli", "measure", "--kernel", str(kfile), "--gsize",
                        str(gsize), "--lsize", str(lsize), "--repeats", "20", "--min-time", "0.05", "--meter", "none",
                        "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.device
def test_predict_measured_with_a_real_measurement(tmp_path, capsys, device):
    """``kernelcast measure --json`` of saxpy at 2^16 work-items corrects the analytical model:
    the same configuration comes back within 10 % of its measurement (it is the measurement), and
    2^18 work-items come back as the model's prediction times the shrunk offset of the shot."""
    profile = "pocl-local"
    kfile = tmp_path / "saxpy.cl"
    kfile.write_text(SAXPY)
    m16 = _measure_json(kfile, 1 << 16, 64)
    (tmp_path / "m.json").write_text(json.dumps(m16))
    configs = tmp_path / "c.csv"
    configs.write_text(f"gsize,lsize\n{1 << 16},64\n{1 << 18},64\n")
    assert cli.main(["predict", "--kernel", str(kfile), "--configs", str(configs), "--profile", profile,
                     "--measured", str(tmp_path / "m.json"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    same, other = d["predictions"]
    t16 = m16["time"]["median_us"]
    assert abs(same["analytical"]["time_us"] / t16 - 1) <= 0.10
    assert same["measured_us"] == pytest.approx(t16)
    # the other configuration is the model's prediction times the shrunk offset of the shot
    c = d["correction"]["models"]["analytical"]
    assert c["residuals_log2"] == [pytest.approx(math.log2(t16 / same["analytical"]["uncorrected_time_us"]))]
    assert c["factor"] == pytest.approx(2 ** (0.5 * c["residuals_log2"][0]))
    assert other["analytical"]["time_us"] == pytest.approx(other["analytical"]["uncorrected_time_us"] * c["factor"])


POLY = poly(32)
SCALE = """__kernel void scale(__global float *a, const float s, const int n) {
  int i = get_global_id(0);
  if (i < n) a[i] = a[i] * s;
}"""


def _tiny_model(harness, profile) -> TabularPredictor:
    """A tabular model fitted on 12 rows measured here (three kernels at four sizes), with its
    interval calibration from a grouped 3-fold over them."""
    from kernelcast.instrument.runner import TimingPolicy
    from kernelcast.models.predict import bind_arguments

    from kernelcast.clang import kernel_signatures
    from kernelcast.schema import ArgBinding, LaunchConfig

    policy = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.01, max_repeats=200, max_time_s=2)
    rows = []
    for src in (TRIAD, POLY, SCALE):
        name, params = next(iter(kernel_signatures(src, "").items()))
        k = Kernel(src, name)
        for e in (13, 14, 15, 16):
            n = 1 << e
            args, _ = bind_arguments(params, [], (n,), (64,), name)
            binds = [ArgBinding(a["name"], a["kind"], a["dtype"], a["count"], a["value"]) for a in args]
            m = harness.run(k, LaunchConfig((n,), (64,), binds), policy)
            assert m.status == "ok", m.reason
            rows.append({**configuration_row(k, (n,), (64,), args), "kernel_id": k.id,
                         "time_median_us": m.time.median_us})
    table = build_table(pd.DataFrame(rows), profile)
    params = {"min_data_in_leaf": 2}
    model = fit_tabular(table, profile, params=params)
    model.calibration, why = calibrate_intervals(table, profile, folds=3, params=params)
    assert model.calibration is not None, why
    return model


def test_tune_with_a_tabular_model_measures_and_reranks(harness, profile, tmp_path, capsys):
    model = _tiny_model(harness, profile)
    model.save(tmp_path / "tab")
    kfile = tmp_path / "saxpy.cl"
    kfile.write_text(SAXPY)
    assert cli.main(["tune", "--kernel", str(kfile), "--gsize", "16384", "--max-wg", "256", "--top", "3",
                     "--profile", PROFILE, "--model", str(tmp_path / "tab"), "--measure-top", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"]["kind"] == "tabular" and d["configurations"] == 256 // 8
    for c in d["chosen"]:
        lo, hi = c["interval_90_us"]
        assert 0 < lo < hi
    m = d["measured"]
    assert len(m["rows"]) == 2 and all(r["measured_us"] > 0 for r in m["rows"])
    assert all(r["rounds"] == 4 for r in m["rows"])                     # then pooled over 4 rounds
    assert m["correction"]["k"] == 2                                   # both measurements fed back
    measured = {tuple(r["lsize"]): r["measured_us"] for r in m["rows"]}
    best = min(measured, key=measured.get)
    assert tuple(m["final"]["lsize"]) == best and m["final"]["measured_us"] == measured[best]
    in_order = {tuple(o["lsize"]): o for o in m["order"] if o["measured_us"] is not None}
    assert set(in_order) == set(measured)
    # an unmeasured configuration's prediction is the model's times the final offset
    raw = {tuple(c["lsize"]): c["pred_us"] for c in d["chosen"]}
    for o in m["order"]:
        if o["measured_us"] is None and tuple(o["lsize"]) in raw:
            assert o["pred_us"] == pytest.approx(raw[tuple(o["lsize"])] * m["correction"]["factor"])
    # the text output prints the re-ranked order, the correction and the final choice
    assert cli.main(["tune", "--kernel", str(kfile), "--gsize", "16384", "--max-wg", "256", "--top", "3",
                     "--profile", PROFILE, "--model", str(tmp_path / "tab"), "--measure-top", "2",
                     "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "then in 2 interleaved rounds (pooled)" in out
    assert "90% interval" in out and "re-ranked" in out and "final choice: gsize" in out
    assert "corrected by x" in out

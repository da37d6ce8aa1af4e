"""models.tune.tune as a library: ranking with the analytical model of a published profile, and the
measure-and-feedback loop driven through its measure seam (a function that answers from a table of
known times, as a simulation mode would)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import load_profile
from kernelcast.models.measure import HarnessMeasure
from kernelcast.models.tune import Shots, TuneResult, TuneSpace, enumerate_shapes, tune, tune_space

from kernelcast.console import load_kernel_source
from kernelcast.errors import UsageError
from kernelcast.schema import Kernel, LaunchConfig, Measurement, TimeStats

SRC = """__kernel void axpy(__global const float* x, __global float* y, const float a, const int n) {
  int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }"""
N = 1048576


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "axpy.cl"
    path.write_text(SRC)
    kernel, params = load_kernel_source(str(path), None, "")
    space = tune_space(kernel, params, [f"n={N}"], (N,), enumerate_shapes((N,), 32, 1024, None, None))
    return kernel, space, load_profile("a100"), params


class TableMeasure:
    """Measures by looking the local size up in a table of times (us); a local size in ``fail``
    returns a runtime error. Records every call."""

    def __init__(self, times: dict[int, float], default: float, fail: tuple[int, ...] = ()) -> None:
        self.times, self.default, self.fail = times, default, fail
        self.calls: list[int] = []

    def __call__(self, kernel: Kernel, config: LaunchConfig) -> Measurement:
        assert config.lsize is not None
        ls = int(config.lsize[0])
        self.calls.append(ls)
        base = dict(kernel_id=kernel.id, kernel_name=kernel.name, device="table", gsize=config.gsize,
                    lsize=config.lsize, args=[])
        if ls in self.fail:
            return Measurement(**base, status="runtime_error", reason="no such launch")
        t = self.times.get(ls, self.default)
        return Measurement(**base, status="ok", time=TimeStats.from_times([t] * 5))


def _lsizes(res: TuneResult, idx) -> list[int]:
    return [int(res.rows[int(i)]["lsize"][0]) for i in idx]


def test_ranks_by_predicted_time_without_measuring(problem):
    kernel, space, profile, _ = problem
    res = tune(kernel, space, profile, top=3)
    assert len(res.rows) == 32 and res.measured is None and res.offset is None
    assert res.label == "best 3 by predicted time"
    t = res.time_us[res.order]
    assert np.all(np.diff(t) >= 0)                       # ascending predicted time
    assert list(res.chosen) == list(res.order[:3])
    assert res.choice == {"gsize": res.rows[int(res.order[0])]["gsize"],
                          "lsize": res.rows[int(res.order[0])]["lsize"], "pred_us": float(t[0])}


def test_feedback_measures_the_predicted_best_and_picks_the_fastest_measured(problem):
    kernel, space, profile, _ = problem
    top3 = _lsizes(tune(kernel, space, profile), tune(kernel, space, profile).order[:3])
    fast = top3[2]                                        # the third by prediction is the fastest measured
    measure = TableMeasure({fast: 5.0}, default=10.0)
    res = tune(kernel, space, profile, measure=measure, top=3, measure_top=3, measure_rounds=2)
    m = res.measured
    assert m is not None
    # without a shape prior the correction is one factor: the picks follow the predicted order
    assert _lsizes(res, m["sequence"]) == top3
    assert measure.calls == top3 + top3                   # 3 picks, then one more round of the 3
    assert [r["measured_us"] for r in m["rows"]] == [10.0, 10.0, 5.0]
    assert [r["rounds"] for r in m["rows"]] == [2, 2, 2]
    assert m["final"]["lsize"] == [fast] and m["final"]["measured_us"] == 5.0
    assert res.choice["lsize"] == [fast]
    assert m["compared"] and m["gap_pct"] == pytest.approx(100.0)
    assert m["order"][0]["lsize"] == [fast]               # re-ranked: the measured 5 us first
    # every candidate is corrected by the same factor: 3 shots, shrunk by 3 / (3 + 1)
    assert m["correction"]["k"] == 3


def test_a_failed_launch_is_measured_once_and_not_chosen(problem):
    kernel, space, profile, _ = problem
    top3 = _lsizes(tune(kernel, space, profile), tune(kernel, space, profile).order[:3])
    measure = TableMeasure({top3[1]: 7.0}, default=9.0, fail=(top3[0],))
    res = tune(kernel, space, profile, measure=measure, measure_top=3, measure_rounds=3)
    m = res.measured
    assert m is not None
    assert measure.calls == top3 + top3[1:] + top3[1:]    # the failed one is not measured again
    assert m["rows"][0]["measured_us"] is None and m["rows"][0]["measured_rank"] is None
    assert m["final"]["lsize"] == [top3[1]]
    assert m["correction"]["k"] == 2


def test_measure_top_beyond_the_space_measures_every_candidate_once(problem):
    kernel, _, profile, _ = problem
    small = TuneSpace(problem[1].problem, problem[1].rows[:2])
    measure = TableMeasure({}, default=4.0)
    res = tune(kernel, small, profile, measure=measure, measure_top=10, measure_rounds=1)
    assert sorted(measure.calls) == sorted(int(r["lsize"][0]) for r in small.rows)
    assert res.measured is not None and len(res.measured["rows"]) == 2


def test_shots_correct_every_prediction(problem):
    """Measured configurations given up front scale the predictions (one factor without a shape
    prior): shots measured at half the prediction halve every candidate's time, shrunk by k/(k+1)."""
    kernel, space, profile, _ = problem
    plain = tune(kernel, space, profile)
    frame = pd.DataFrame(space.rows[:4])
    shots = Shots(frame, plain.raw_time_us[:4] * 0.5)
    res = tune(kernel, space, profile, shots=shots)
    assert res.offset is not None and res.offset.k == 4
    ratio = res.time_us / res.raw_time_us
    assert np.allclose(ratio, ratio[0]) and 0.5 < ratio[0] < 1.0
    assert list(res.order) == list(plain.order)          # one factor keeps the order


def test_bad_objective_is_a_usage_error(problem):
    kernel, space, profile, _ = problem
    with pytest.raises(UsageError, match="--objective"):
        tune(kernel, space, profile, objective="speed")


def test_real_launches_through_the_harness_measure(problem, device):
    """The real-launch seam: nothing opens until the first measurement, then each pick is launched on
    the device (here the problem is small enough for any device; the analytical profile need not be the
    device's for the loop to run)."""
    kernel, _, profile, params = problem
    n = 4096
    space = tune_space(kernel, params, [f"n={n}"], (n,),
                       enumerate_shapes((n,), 32, min(256, device.max_work_group_size), None, None))
    with HarnessMeasure(device.spec) as measure:
        assert measure.device is None                     # not opened yet
        res = tune(kernel, space, profile, measure=measure, measure_top=2, measure_rounds=1)
        assert measure.device_name == device.name
    m = res.measured
    assert m is not None and len(m["rows"]) == 2
    assert all(r["measured_us"] is not None and r["measured_us"] > 0 for r in m["rows"])
    assert res.choice is not None and res.choice["lsize"] in [r["lsize"] for r in m["rows"]]

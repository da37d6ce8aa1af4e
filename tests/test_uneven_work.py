"""Work spread unevenly over work-items: a loop whose trip count differs between work-items is a
site a counting launch measures (its mean and its busiest work-item), and the analytical model
charges the busiest work-item's time on one core where it bounds the kernel's. A loop with an exit
the analysis cannot bound is a site too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import load_profile
from kernelcast.instrument.counters import measure_counts
from kernelcast.instrument.runner import TimingPolicy
from kernelcast.models.analytical import UNEVEN_PEAK, AnalyticalModel, uneven_ratio
from kernelcast.models.static.source import analyze_source_text

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig

ROOT = Path(__file__).resolve().parents[1]

#: each work-item sums a function of ``chunk`` consecutive elements of ``n`` and keeps their
#: maximum in one shared word (synth_chunked_000011, seed 23, has this shape): with ``chunk = n``
#: work-item 0 runs all n trips and the others none; with ``chunk = 1`` every work-item runs one
CHUNKED = """__kernel void chunked(__global const float* a, __global float* out, __global int* top, int n,
                      int chunk) {
  size_t first = get_global_id(0) * (size_t)chunk;
  float acc = 0.0f;
  for (size_t j = first; j < first + chunk && j < n; j++) {
    float v = fabs(a[j]);
    for (int r = 0; r < 8; r++)
      v = sqrt(v + 1.0f);
    acc += v;
    atomic_max(&top[0], convert_int_sat(v * 100.0f));
  }
  out[get_global_id(0)] = acc;
}"""
SITE = "trip_l5_c3"


def _row(gsize: int, n: int, chunk: int, counts: dict[str, float] | None) -> dict:
    return {"source": CHUNKED, "kernel_name": "chunked", "gsize": [gsize], "lsize": [64],
            "args": [{"name": "a", "kind": "buffer", "dtype": "float", "count": n},
                     {"name": "out", "kind": "buffer", "dtype": "float", "count": gsize},
                     {"name": "top", "kind": "buffer", "dtype": "int", "count": 1},
                     {"name": "n", "kind": "scalar", "value": str(n)},
                     {"name": "chunk", "kind": "scalar", "value": str(chunk)}],
            "site_counts": json.dumps(counts) if counts else ""}


def test_a_loop_whose_trips_differ_between_work_items_is_a_measurable_site():
    f = analyze_source_text(CHUNKED, "chunked")
    assert [lp.trip for lp in f.loops if lp.var == "j"] == [SITE]
    (site,) = [s for s in f.sites if s.symbol == SITE]
    assert site.default_expr and "chunk" in site.default_expr
    env = {"gsize0": 4096, "lsize0": 64, "n": 4096, "chunk": 4096}
    # unmeasured: the static mean at the mean bounds (0 trips here, where each work-item has 1 in fact)
    assert f.evaluate(env)["global_loads"] == pytest.approx(0.0)
    # measured: one trip per work-item, one load each
    assert f.evaluate({**env, SITE: 1.0})["global_loads"] == pytest.approx(1.0)
    # an even split (chunk 1 of n = gsize): the static mean is right already
    assert f.evaluate({**env, "chunk": 1})["global_loads"] == pytest.approx(1.0)


#: a bisection: the loop ends at max_iter or when the interval is below tol, a condition on values
#: the loop computes (not loaded data), which the analysis cannot bound
BISECT = """__kernel void bisect(__global const float* p, __global float* root, const float tol, const int max_iter) {
  int i = get_global_id(0);
  float pp = p[i], lo = -10.0f, hi = 10.0f;
  for (int it = 0; it < max_iter && (hi - lo) > tol; ++it) {
    float mid = 0.5f * (lo + hi);
    if (mid * mid * mid + pp * mid > 0.0f) hi = mid; else lo = mid;
  }
  root[i] = 0.5f * (lo + hi);
}"""


def test_a_loop_exit_the_analysis_cannot_bound_is_a_measurable_site():
    """cf_bisection_cubic under memory selection (max_iter = 357,632) was charged every one of its
    max_iter trips, 12,000x its time: the counting launch's 5 trips now take their place, and
    unmeasured the static bound stays."""
    f = analyze_source_text(BISECT, "bisect")
    (lp,) = f.loops
    site = next(s for s in f.sites if s.symbol == lp.trip)
    assert site.kind == "loop" and "max_iter" in site.default_expr
    env = {"gsize0": 4096, "max_iter": 100000}
    unmeasured, measured = f.evaluate(env), f.evaluate({**env, lp.trip: 5.0})
    # three multiplications a trip and one after the loop
    assert (unmeasured["fp32_mul"], measured["fp32_mul"]) == pytest.approx((3 * 100000 + 1, 3 * 5 + 1))


def test_uneven_ratio_is_the_busiest_over_the_mean():
    env = {"trip_l4_c3": np.array([1.0, 2.0, 0.0]), "tpeak_l4_c3": np.array([4096.0, 2.0, 3.0]),
           "trip_l9_c5": np.array([8.0, 8.0, 8.0]), "tpeak_l9_c5": np.array([8.0, np.nan, 64.0])}
    np.testing.assert_allclose(uneven_ratio(env), [4096.0, 1.0, 8.0])
    assert uneven_ratio({"trip_l4_c3": np.array([1.0])}) is None


def test_the_busiest_work_item_bounds_the_prediction():
    prof = load_profile(ROOT / "calib" / "profiles" / "pocl-local.json")
    model = AnalyticalModel(prof)
    g = 1 << 16
    peak = "tpeak" + SITE[4:]
    base = {SITE: 1.0}
    rows = [_row(g, g, g, base), _row(g, g, g, {**base, peak: 1.0}), _row(g, g, g, {**base, peak: UNEVEN_PEAK / 2}),
            _row(g, g, g, {**base, peak: 0.6 * g}), _row(g, g, g, {**base, peak: float(g)})]
    pred = model.predict(pd.DataFrame(rows))
    t = pred.time_us
    # no peak, an even peak and a mild one: the work is shared by the cores
    assert t[0] == t[1] == t[2]
    assert "busiest_work_item_us" not in pred.explanation[0]
    # the explanation says what bounds the time, and the compute part holds it (as a power cap sees it)
    assert pred.explanation[4]["busiest_work_item_bounds"] is True
    assert pred.explanation[4]["time_parts_us"]["compute"] == pytest.approx(pred.explanation[4]["busiest_work_item_us"])
    # one work-item runs (nearly) every trip on one core: its time is the kernel's, in proportion
    # to its trips (1 / 0.6), where spread over the two cores of the bundled profile it would be
    # half of that at g trips
    assert t[4] / t[3] == pytest.approx(1 / 0.6, rel=0.1)


@pytest.mark.slow
def test_device_one_busy_work_item_is_predicted_within_3x(device, harness):
    """n trips run by one work-item (chunk = n) or one each by all (chunk = 1): given the counting
    launch's counts (the mean and the busiest work-item), the model's time is within 3x of the
    measured one for both. Without the busiest work-item, the one busy work-item's launch would be
    charged as work shared by every core, its atomics contending."""
    prof = load_profile(ROOT / "calib" / "profiles" / "pocl-local.json")
    model = AnalyticalModel(prof)
    g = n = 8192
    pol = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.02, max_repeats=50, max_time_s=2.0)
    k = Kernel(CHUNKED, "chunked")
    t, pred, flat = {}, {}, {}
    for chunk in (1, n):
        cfg = LaunchConfig((g,), (64,), [ArgBinding("a", "buffer", "float", count=n, init="random"),
                                         ArgBinding("out", "buffer", "float", count=g, init="zeros"),
                                         ArgBinding("top", "buffer", "int", count=1, init="zeros"),
                                         ArgBinding("n", "scalar", "int", value=n),
                                         ArgBinding("chunk", "scalar", "int", value=chunk)])
        m = harness.run(k, cfg, pol)
        assert m.status == "ok", m.reason
        t[chunk] = m.time.median_us
        counts = measure_counts(harness, k, cfg).values()
        pred[chunk] = float(model.predict(pd.DataFrame([_row(g, n, chunk, counts)])).time_us[0])
        flat[chunk] = float(model.predict(pd.DataFrame([_row(g, n, chunk, {SITE: counts[SITE]})])).time_us[0])
    for chunk in (1, n):
        assert t[chunk] / 3 < pred[chunk] < t[chunk] * 3, (chunk, t, pred, flat)

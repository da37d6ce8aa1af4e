"""The validation benchmark (``kernelcast validate``, :mod:`bench.validate`): its verdicts on known
figures, the predictions behind its checks under hand-made profiles, its command line, and one
real run of a check on the device (its figures are printed, never asserted: they move with the
host's load)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from kernelcast.bench.validate import CHECKS, Check, judge, select_checks
from kernelcast.models.analytical import AnalyticalModel

from kernelcast import cli
from kernelcast.errors import UsageError
from tests.profiles import cpu_profile


def test_judge_takes_the_bound_both_ways_and_the_floor():
    assert judge(4.0, 2.0, None, 2.5) == (True, "")
    assert judge(4.0, 9.0, None, 2.5)[0] is True
    ok, why = judge(4.0, 1.5, None, 2.5)
    assert not ok and "not within 2.5x" in why
    assert not judge(4.0, 10.0, None, 2.5)[0]                   # exactly 2.5x is outside
    ok, why = judge(1.1, 1.1, 1.2, 2.5)
    assert not ok and "not above 1.2" in why
    assert judge(3.0, 100.0, 2.5, None) == (True, "")           # a fact without a bound
    assert not judge(math.nan, 1.0, None, 2.0)[0] and not judge(1.0, 0.0, None, 2.0)[0]


def test_checks_are_selected_by_substring_or_wildcard():
    assert [c.name for c in select_checks("int_division.by")] == ["int_division.by_argument",
                                                                  "int_division.by_constant"]
    assert {c.name.split(".")[0] for c in select_checks("chains.*")} == {"chains"}
    assert len(select_checks("join_delay,chains.fmax*")) == 3
    assert len(select_checks(None)) == len(CHECKS)
    with pytest.raises(UsageError, match="no check matches"):
        select_checks("no_such_check")


def test_every_check_has_a_unique_name_a_limit_and_its_kernels_in_its_source():
    assert len({c.name for c in CHECKS}) == len(CHECKS) >= 41
    for c in CHECKS:
        assert c.bound is not None or c.floor is not None, c.name
        src = c.text()
        for run in (c.num, c.den):
            if run is not None:
                assert f"void {run.kernel}(" in src, (c.name, run.kernel)


def _ratio(check: Check, model: AnalyticalModel) -> float:
    runs = [check.num] + ([check.den] if check.den is not None else [])
    t = model.predict(pd.DataFrame([r.row(check.text()) for r in runs])).time_us
    return float(t[0] / t[1]) if len(t) == 2 else float(t[0])


def test_every_check_predicts_a_finite_ratio_under_a_hand_made_profile():
    model = AnalyticalModel(cpu_profile(peak_int32_add_gops=100.0, peak_int32_mul_gops=50.0, launch_overhead_us=1.0))
    for c in CHECKS:
        r = _ratio(c, model)
        assert math.isfinite(r) and r > 0, c.name


def test_the_divider_check_predicts_the_ratio_of_its_roofline():
    """``x % n`` against ``x & 127`` on 2^20 work-items: with a 1 G/s divider on 2 units the
    division takes 1.05 ms of computation, the masked kernel's memory the same 8 MiB at 20 GB/s
    (0.42 ms); the ratio is the divider's time over the masked kernel's, as computed by hand."""
    (chk,) = select_checks("int_division.by_argument")
    model = AnalyticalModel(cpu_profile(peak_int32_div_gops=1.0, peak_int32_add_gops=100.0,
                                        peak_int32_mul_gops=100.0))
    rows = pd.DataFrame([chk.num.row(chk.text()), chk.den.row(chk.text())])
    p = model.predict(rows)
    div, masked = p.time_us
    assert p.explanation[0]["time_parts_us"]["compute"] == pytest.approx((1 << 20) / 2 / 0.5e9 * 1e6, rel=1e-6)
    assert p.explanation[0]["bound"] == "compute" and p.explanation[1]["bound"] == "memory"
    assert _ratio(chk, model) == pytest.approx(div / masked)
    assert div / masked > 2


def test_the_join_check_predicts_one_core_for_a_short_launch():
    """With a 50 us join delay the short launch of eight work-groups takes as long as one work-group
    (a ratio of 1); with an even split (no delay) it is predicted faster."""
    (chk,) = select_checks("join_delay.short")
    assert _ratio(chk, AnalyticalModel(cpu_profile(cu_join_us=50.0))) == pytest.approx(1.0, rel=0.05)
    assert _ratio(chk, AnalyticalModel(cpu_profile())) < 0.7


def test_the_chain_checks_predict_nothing_apart_without_latencies():
    """The fmax and add chains have the same operation counts: only the chain latencies (fmax: two
    adds') set them apart, so without them the predicted ratio is 1 and with them above 1."""
    (chk,) = select_checks("chains.fmax_vs_add")
    assert _ratio(chk, AnalyticalModel(cpu_profile())) == pytest.approx(1.0, rel=0.05)
    assert _ratio(chk, AnalyticalModel(cpu_profile(chain_fp32_add_ns=4.0, chain_fp32_mul_ns=4.0,
                                                    chain_fp32_fma_ns=4.0))) > 1.5


@pytest.mark.parametrize("argv,words", [
    (["--only", "no_such_check"], "no check matches"),
    (["--rounds", "0"], "--rounds"),
    (["--profile", "/nonexistent/p.json"], "--profile"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    assert cli.main(["validate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_list_prints_every_check_with_its_bound(capsys):
    assert cli.main(["validate", "--list", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [g["name"] for g in got] == [c.name for c in CHECKS]
    assert next(g for g in got if g["name"] == "chains.fmax_vs_add")["bound"] == 1.3


def test_a_check_runs_on_the_device(tmp_path, capsys, device):
    """One check end to end with a hand-made profile of the device's type: both kernels build and
    run, the report has the measured and predicted ratio, its bound and a verdict, and the summary
    counts it. (Whether it is within is the device's business, not this test's.)"""
    prof = cpu_profile(launch_overhead_us=1.0)
    prof.device.device_type = device.type
    path = tmp_path / "p.json"
    prof.save(path)
    assert cli.main(["validate", "--profile", str(path), "--only", "int_division.modulo_loop", "--rounds", "1",
                     "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (row,) = d["checks"]
    assert row["name"] == "int_division.modulo_loop" and row["bound"] == 2.5 and row["floor"] == 1.2
    assert row["measured"] > 0 and row["predicted"] > 0 and isinstance(row["within"], bool)
    assert set(row["times_us"]) == {"with_mod", "without"}
    assert d["total"] == d["decided"] == 1 and d["summary"].endswith("of 1 checks within bound")


@pytest.mark.parametrize("name,values", [
    # the gather rates set the gathered loads apart from vector loads of the same bytes
    ("cpu_costs.clamped_gathers", {"gather_gops": 2.0, "gather_clamped_gops": 3.0}),
    ("cpu_costs.guarded_shifted_loads", {"gather_gops": 2.0, "gather_clamped_gops": 3.0}),
    # a guarded store 3.6x the plain one: the runtime leaves the guarded kernel's loop scalar
    ("cpu_runtime_facts.guarded_store", {"wi_store_ns": 0.25, "wi_cond_store_ns": 0.9}),
    # builtins called out of line (a call 8x the store): fmax is a call per work-item, the select is not
    ("cpu_runtime_facts.builtin_call", {"wi_store_ns": 0.5, "wi_cond_store_ns": 0.5, "wi_call_ns": 4.0,
                                        "wi_libcall_ns": 4.0}),
    # one exp per work-item at its single-call rate, not at the float16 peak
    ("builtin_families.exp_vs_arithmetic", {"peak_exp_gops": 20.0, "wi_exp_gops": 1.0, "wi_fp32_fma_gops": 100.0}),
])
def test_a_check_tells_its_kernels_apart_with_the_profile_values_it_rests_on(name, values):
    """With the values of the rule the check validates (hand-made), the predicted ratio is well above
    the one without them (what the model said before the rule), on a device fast enough in memory
    that the computation shows."""
    (chk,) = select_checks(name)
    base = {"peak_int32_add_gops": 100.0, "peak_int32_mul_gops": 50.0, "launch_overhead_us": 1.0,
            "dram_bw_gbs": 500.0}
    without = _ratio(chk, AnalyticalModel(cpu_profile(**base)))
    assert _ratio(chk, AnalyticalModel(cpu_profile(**{**base, **values}))) > 1.5 * without


def test_a_profile_of_another_device_type_is_refused(capsys, device):
    other = "pocl-local" if device.type.upper().startswith("GPU") else "a100"
    assert cli.main(["validate", "--profile", other, "--only", "int_division.modulo_loop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "predicts only its own type of device" in err[0], err

"""A CPU runtime's other worker threads join a launch late (``cu_join_us``, calib join): a launch of
a few microseconds of work runs on one core whatever its work-groups, and the analytical model
charges it so (:func:`calib.fits.join_time`). Checked by hand and against real launches here."""

from __future__ import annotations

import numpy as np
import pytest
from kernelcast.models.analytical import AnalyticalModel, config_env, explain
from kernelcast.models.static.source import analyze_source_text

from kernelcast.schema import ArgBinding
from tests.profiles import cpu_profile

#: the same loop of dependent FMAs under two names, so that one launch of each can be measured and
#: predicted at its own local size
FMA = """
__kernel void one_group(__global float *out, float s, float t, int iters)
{ float a = get_global_id(0) * 0.001f; for (int i = 0; i < iters; ++i) a = a * s + t; out[get_global_id(0)] = a; }
__kernel void many_groups(__global float *out, float s, float t, int iters)
{ float a = get_global_id(0) * 0.001f; for (int i = 0; i < iters; ++i) a = a * s + t; out[get_global_id(0)] = a; }
"""
ITEMS = 1024



def _binds(iters: int) -> list[ArgBinding]:
    return [ArgBinding("out", "buffer", "float", ITEMS), ArgBinding("s", "scalar", "float", value=0.999),
            ArgBinding("t", "scalar", "float", value=0.5), ArgBinding("iters", "scalar", "int", value=iters)]


def _predict(model: AnalyticalModel, name: str, lsize: int, iters: int):
    f = analyze_source_text(FMA, name)
    args = [{"name": b.name, "kind": b.kind, "dtype": b.dtype, "count": b.count,
             "value": None if b.kind != "scalar" else str(b.value)} for b in _binds(iters)]
    env = {k: np.asarray([v]) for k, v in config_env([ITEMS], [lsize], args).items()}
    return model.evaluate(f, env)


def test_a_short_launch_runs_on_one_unit_and_a_long_one_is_shared():
    """With a 50 us join delay, eight work-groups of a launch of about 17 us of work (the loop is
    scalar code) take as long as one work-group of all of it; of about 17 ms, close to half. Without
    the value both split evenly."""
    late = AnalyticalModel(cpu_profile(cu_join_us=50.0))
    even = AnalyticalModel(cpu_profile())
    for iters, shared in ((4, False), (4000, True)):
        one = float(_predict(late, "one_group", ITEMS, iters).time_s[0])
        r = _predict(late, "many_groups", 128, iters)
        many = float(r.time_s[0])
        split = float(_predict(even, "many_groups", 128, iters).time_s[0])
        if shared:
            assert 0.45 * one < many < 0.6 * one and many > split
        else:
            assert many == pytest.approx(one, rel=0.05) and many > 1.8 * split
            assert float(r.parts["join_s"][0]) > 0.4 * many
            assert explain({k: v[0] for k, v in r.parts.items()}, many)["late_join_us"] > 0
    assert float(_predict(even, "many_groups", 128, 4).parts["join_s"][0]) == 0.0



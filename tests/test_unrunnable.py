"""Configurations a device cannot run: more local memory per work-group than the device has, more
in fixed-size arrays than a kernel may declare, or a work-group larger than the device's largest.
The analytical model gives them no time (NaN) and says why; tuning never picks them."""

from __future__ import annotations

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel

# a shared tile whose size is the work-group's: TILE floats of 4 bytes
TILED = """#ifndef TILE
#define TILE 256
#endif
__kernel void tiled(__global const float* a, __global float* b) {
  __local float t[TILE];
  int l = get_local_id(0);
  t[l] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  b[get_global_id(0)] = t[TILE - 1 - l]; }"""
# the same through a __local argument sized per launch
LOCAL_ARG = """__kernel void by_arg(__global const float* a, __global float* b, __local float* t) {
  int l = get_local_id(0);
  t[l] = a[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  b[get_global_id(0)] = t[get_local_size(0) - 1 - l]; }"""


def profile(**limits: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-gpu", device_type="GPU", compute_units=4, wg_multiple=32))
    for k, v, u in [("warp_size", 32, "threads"), ("max_warps_per_cu", 64, "warps"), ("max_wg_per_cu", 16, "wg"),
                    ("boost_clock_mhz", 1000.0, "MHz"), ("peak_fp32_gflops", 1000.0, "GFLOP/s"),
                    ("dram_bw_gbs", 100.0, "GB/s"), ("local_mem_per_cu_bytes", 1 << 17, "B")]:
        p.set(k, v, u, "test")
    for k, v in limits.items():
        p.set(k, v, "B" if "mem" in k else "threads", "test")
    return p


def rows(src: str, name: str, configs: list[tuple[int, int, str]], local: int | None = None) -> pd.DataFrame:
    out = []
    for g, ls, opts in configs:
        args = [{"name": "a", "kind": "buffer", "dtype": "float", "count": g},
                {"name": "b", "kind": "buffer", "dtype": "float", "count": g}]
        if local is not None:
            args.append({"name": "t", "kind": "local", "dtype": "float", "count": local})
        out.append({"source": src, "kernel_name": name, "gsize": [g], "lsize": [ls], "args": args,
                    "build_options": opts})
    return pd.DataFrame(out)


def test_a_tile_over_the_devices_local_memory_has_no_time_and_says_why():
    m = AnalyticalModel(profile(max_local_mem_per_wg_bytes=65536))
    # 16,384 floats are 65,536 B (fits); 16,385 do not
    p = m.predict(rows(TILED, "tiled", [(1 << 20, 256, "-DTILE=16384"), (1 << 20, 256, "-DTILE=16385")]))
    assert np.isfinite(p.time_us[0]) and p.time_us[0] > 0
    assert np.isnan(p.time_us[1]) and np.isnan(p.energy_j[1])
    assert "unrunnable" not in p.explanation[0]
    assert p.explanation[1]["unrunnable"] == ("the device cannot run this configuration: 65,540 B of local memory "
                                              "per work-group, more than the device's 65,536 B")


def test_fixed_size_arrays_have_their_own_limit_where_the_profile_gives_one():
    src = TILED
    big = [(1 << 20, 256, "-DTILE=13000")]            # 52,000 B: over 48 KiB, under 163 KiB
    assert np.isfinite(AnalyticalModel(profile(max_local_mem_per_wg_bytes=166912)).predict(
        rows(src, "tiled", big)).time_us[0])
    p = AnalyticalModel(profile(max_local_mem_per_wg_bytes=166912, max_static_local_mem_per_wg_bytes=49152)).predict(
        rows(src, "tiled", big))
    assert np.isnan(p.time_us[0])
    assert "52,000 B of fixed-size local arrays, more than the 49,152 B" in p.explanation[0]["unrunnable"]
    # a __local argument of the same size is dynamic: only the device's total applies
    q = AnalyticalModel(profile(max_local_mem_per_wg_bytes=166912, max_static_local_mem_per_wg_bytes=49152)).predict(
        rows(LOCAL_ARG, "by_arg", [(1 << 20, 256, "")], local=13000))
    assert np.isfinite(q.time_us[0])


def test_a_local_argument_over_the_limit_and_a_work_group_over_the_largest():
    m = AnalyticalModel(profile(max_local_mem_per_wg_bytes=32768, max_wg_size=1024))
    p = m.predict(pd.concat([rows(LOCAL_ARG, "by_arg", [(1 << 20, 256, "")], local=8192),
                             rows(LOCAL_ARG, "by_arg", [(1 << 20, 256, "")], local=8193),
                             rows(LOCAL_ARG, "by_arg", [(1 << 20, 2048, "")], local=64)], ignore_index=True))
    assert np.isfinite(p.time_us[0])
    assert "32,772 B of local memory per work-group" in p.explanation[1]["unrunnable"]
    assert "a work-group of 2,048 work-items, more than the device's 1,024" in p.explanation[2]["unrunnable"]


def test_without_limits_in_the_profile_nothing_is_refused():
    p = AnalyticalModel(profile()).predict(rows(TILED, "tiled", [(1 << 20, 256, "-DTILE=100000")]))
    assert np.isfinite(p.time_us[0])


def test_tuning_never_chooses_or_measures_a_configuration_the_device_cannot_run(tmp_path):
    from kernelcast.models.tune import enumerate_shapes, tune, tune_space

    from kernelcast.console import load_kernel_source
    from kernelcast.schema import Measurement, TimeStats

    # 64 floats of tile per work-item: 256 work-items need 65,536 B, over the 49,152 B allowed
    src = """__kernel void wide(__global const float* a, __global float* b) {
  __local float t[block_size_x * 64];
  int l = get_local_id(0);
  for (int k = 0; k < 64; k++) t[l * 64 + k] = a[get_global_id(0)] + k;
  barrier(CLK_LOCAL_MEM_FENCE);
  b[get_global_id(0)] = t[(block_size_x - 1 - l) * 64]; }"""
    path = tmp_path / "wide.cl"
    path.write_text(src)
    kernel, params = load_kernel_source(str(path), None, "-Dblock_size_x=32")
    n = 1 << 20
    space = tune_space(kernel, params, [], (n,), enumerate_shapes((n,), 32, 1024, None, None),
                       launch_options=lambda g, ls: f"-Dblock_size_x={ls[0]}")
    prof = profile(max_local_mem_per_wg_bytes=49152, max_wg_size=1024)
    calls: list[int] = []

    def measure(k, config):
        calls.append(int(config.lsize[0]))
        return Measurement(kernel_id=k.id, kernel_name=k.name, device="table", gsize=config.gsize,
                           lsize=config.lsize, args=[], status="ok", time=TimeStats.from_times([10.0] * 5))

    res = tune(kernel, space, prof, top=40, measure=measure, measure_top=40)
    sizes = [int(r["lsize"][0]) for r in res.rows]
    runnable = [s for s in sizes if s * 64 * 4 <= 49152]
    assert 0 < len(runnable) < len(sizes)
    assert all(np.isnan(res.time_us[i]) == (sizes[i] * 256 > 49152) for i in range(len(sizes)))
    assert sorted(sizes[int(i)] for i in res.chosen) == sorted(runnable)
    assert sorted(set(calls)) == sorted(runnable)          # each measured (in rounds), none beyond

"""The GPU device class on hand-made GPU profiles and kernels of our own: the memory hierarchy's
traffic per level, the latency floor, and the operations full unrolling removes. Known answers
worked out from the class's equations (docs/analytical-model.md, "The GPU class")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.analytical.gpu import (
    DEFAULT_L1_LATENCY_CYCLES,
    DEFAULT_L2_LATENCY_CYCLES,
    DEFAULT_MEM_LATENCY_CYCLES,
    GPUClass,
    compiled_counts,
)
from kernelcast.models.analytical.hierarchy import average_latency, launch_traffic
from kernelcast.models.cli import _count_lines
from kernelcast.models.static.source import analyze_source_text

CU, CLOCK, DRAM, L2 = 10, 1e9, 100e9, 400e9

COPY = """__kernel void copy(__global const float* a, __global float* b, int n) {
  int i = get_global_id(0); if (i < n) b[i] = a[i]; }"""
# every work-item reads the same 16 table entries: one segment per warp and one fetch per work-group
TABLE = """__kernel void table(__global const float* t, __global float* o) {
  int i = get_global_id(0); float s = 0.0f;
  for (int k = 0; k < 16; k++) s += t[k];
  o[i] = s; }"""
# each work-item reads a float 64 bytes past its neighbour's
STRIDED = """__kernel void strided(__global const float* a, __global float* o) {
  int i = get_global_id(0); o[i] = a[16 * i]; }"""
# a dependent chain of loads: one warp, nothing to hide the latency behind
CHASE = """__kernel void chase(__global const int* a, __global int* o, int steps) {
  int p = get_global_id(0);
  for (int k = 0; k < steps; k++) p = a[p];
  o[get_global_id(0)] = p; }"""
UNROLLED = """__kernel void unrolled(__global const float* a, __global float* o) {
  int i = get_global_id(0); float x = a[i];
  #pragma unroll
  for (int k = 0; k < 16; k++) x = fma(x, 1.0001f, (float)k);
  o[i] = x; }"""
ROLLED = UNROLLED.replace("#pragma unroll", "#pragma unroll 1").replace("unrolled(", "rolled(")


def gpu_profile() -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-gpu", device_type="GPU", compute_units=CU, wg_multiple=32))
    for k, v, u in [("warp_size", 32, "threads"), ("max_warps_per_cu", 64, "warps"), ("max_wg_per_cu", 16, "wg"),
                    ("boost_clock_mhz", CLOCK / 1e6, "MHz"), ("peak_fp32_gflops", 1000.0, "GFLOP/s"),
                    ("dram_bw_gbs", DRAM / 1e9, "GB/s"), ("l2_bw_gbs", L2 / 1e9, "GB/s"),
                    ("l2_bytes", 1 << 20, "B")]:
        p.set(k, v, u, "test")
    return p


def frame(src: str, name: str, rows: list) -> pd.DataFrame:
    return pd.DataFrame([{"source": src, "kernel_name": name, "gsize": [g], "lsize": [ls], "args": args}
                         for g, ls, args in rows])


def buf(name: str, n: int, dtype: str = "float") -> dict:
    return {"name": name, "kind": "buffer", "dtype": dtype, "count": n}


def scal(name: str, v: int) -> dict:
    return {"name": name, "kind": "scalar", "dtype": "int", "value": str(v)}


def test_a_streaming_copy_is_dram_bound_with_its_traffic_at_every_level():
    m = AnalyticalModel(gpu_profile())
    assert isinstance(m.device_class, GPUClass)
    n = 1 << 22
    ex = m.predict(frame(COPY, "copy", [(n, 256, [buf("a", n), buf("b", n), scal("n", n)])])).explanation[0]
    assert ex["traffic_bytes"] == {"requested": 8 * n, "l1": 8 * n, "l2": 8 * n, "dram": 8 * n}
    assert ex["hit_rates"] == {"l1": 0.0, "l2": 0.0}
    assert ex["memory_levels_us"]["dram"] == pytest.approx(8 * n / DRAM * 1e6)
    assert ex["memory_levels_us"]["l2"] == pytest.approx(8 * n / L2 * 1e6)
    assert ex["bound"] == "memory"
    assert ex["time_parts_us"]["memory"] == pytest.approx(8 * n / DRAM * 1e6)
    # 64 resident warps of one load and one store each at the DRAM latency: 16,384 work-groups of 8
    # warps in ceil(1,639 / 8) = 205 repetitions per compute unit, each at least 2 x 500 cycles
    # (Little's law: 64 x 128 bytes x 10 units in flight per 500 ns is 164 GB/s, above DRAM's 100)
    lat = ex["time_parts_us"]["latency"]
    assert 205 * 2 * 500 / CLOCK * 1e6 <= lat <= 205 * 2 * 500 / CLOCK * 1e6 + ex["time_parts_us"]["compute"]


def test_reuse_across_lanes_warps_and_work_groups_is_not_charged_per_use():
    m = AnalyticalModel(gpu_profile())
    n = 1 << 20
    ex = m.predict(frame(TABLE, "table", [(n, 256, [buf("t", 16), buf("o", n)])])).explanation[0]
    t = ex["traffic_bytes"]
    assert t["requested"] == pytest.approx(n * (16 * 4 + 4))
    # a warp fetches one 32-byte segment per entry (1 byte per lane), the 8 warps of a work-group
    # once between them, the table comes from DRAM once per launch
    assert t["l1"] == pytest.approx(n * (16 * 1 + 4))
    assert t["l2"] == pytest.approx(n * (16 / 8 + 4))
    assert t["dram"] == pytest.approx(16 * 4 + 4 * n)
    assert ex["hit_rates"]["l1"] == pytest.approx(1 - (2 + 4) / (16 + 4))


def test_one_warp_of_dependent_loads_is_latency_bound():
    m = AnalyticalModel(gpu_profile())
    steps = 1000
    ex = m.predict(frame(CHASE, "chase", [(32, 32, [buf("a", 32, "int"), buf("o", 32, "int"),
                                                     scal("steps", steps)])])).explanation[0]
    assert ex["bound"] == "latency"
    # the chain's traffic: gathers, each lane its own segment; the buffer is 128 bytes
    lat = ex["access_latency_cycles"]
    h1, h2 = ex["hit_rates"]["l1"], ex["hit_rates"]["l2"]
    assert lat == pytest.approx(h1 * DEFAULT_L1_LATENCY_CYCLES + (1 - h1) * (
        h2 * DEFAULT_L2_LATENCY_CYCLES + (1 - h2) * DEFAULT_MEM_LATENCY_CYCLES))
    # one warp: its compute plus about steps + 1 global accesses at that latency
    lat_us = ex["time_parts_us"]["latency"]
    assert (steps + 1) * lat / CLOCK * 1e6 <= lat_us <= (steps + 1) * lat / CLOCK * 1e6 + ex["time_parts_us"][
        "compute"] + 1e-9
    assert lat_us > 5 * max(ex["time_parts_us"]["compute"], ex["time_parts_us"]["memory"])


def test_average_latency_weighs_each_level_by_what_it_serves():
    f = {"global_load_bytes": np.array([4.0]), "global_store_bytes": np.array([0.0]),
         "global_atomic_bytes": np.array([0.0]), "global_fetched_bytes": np.array([4.0]),
         "global_sector_bytes": np.array([4.0]), "global_block_bytes": np.array([1.0]),
         "arg_bytes:a": np.array([1.0])}
    t = launch_traffic(f, {"__bytes_a": np.array([100.0])}, np.array([1000.0]))
    assert (t.l1[0], t.l2[0], t.dram[0]) == (4000.0, 1000.0, 100.0)
    assert t.l1_hit[0] == pytest.approx(0.75) and t.l2_hit[0] == pytest.approx(0.9)
    assert average_latency(t, 30.0, 200.0, 500.0)[0] == pytest.approx(0.75 * 30 + 0.25 * (0.9 * 200 + 0.1 * 500))


def test_full_unrolling_removes_loop_control_and_counter_arithmetic():
    env = {"gsize0": 1024.0, "lsize0": 64.0, "ngroups0": 16.0, "warp": 32.0}
    rolled = compiled_counts(analyze_source_text(ROLLED, "rolled").evaluate_many(
        {k: np.array([v]) for k, v in env.items()}))
    unrolled = compiled_counts(analyze_source_text(UNROLLED, "unrolled").evaluate_many(
        {k: np.array([v]) for k, v in env.items()}))
    assert unrolled["warp_fp32_fma"][0] == rolled["warp_fp32_fma"][0] == 16
    # rolled: 17 checks and branches, 16 increments; unrolled: none of them
    assert rolled["warp_cmp"][0] == 17 and rolled["warp_branch"][0] >= 17
    assert unrolled["warp_cmp"][0] == 0 and unrolled["warp_branch"][0] == 0
    assert unrolled["warp_int_add"][0] == 0 and rolled["warp_int_add"][0] >= 16


def test_concurrent_pipes_take_the_busiest_pipe_or_the_issue():
    """With the warp schedulers' issue rate in the profile, the FP32 and INT32 pipes run side by side:
    the compute time is the busier pipe (or the issue of all instructions), not their sum."""
    from kernelcast.models.analytical.gpu import GPUParams, pipe_seconds
    from kernelcast.models.analytical.registry import operation_seconds

    p = gpu_profile()
    p.set("peak_int32_add_gops", 250.0, "Gop/s", "test")
    g = np.array([1.0])
    f = {"warp_fp32_fma": np.array([100.0]), "fp32_fma": np.array([100.0]),
         "warp_int_add": np.array([60.0]), "int_add": np.array([60.0])}
    summed, _ = operation_seconds(GPUParams.from_profile(p), f, g, "warp_")
    # fp32: 100 FMAs at 500 G/s over 10 units; int: 60 adds at 250 G/s over 10 units
    assert summed[0] == pytest.approx(100 / 50e9 + 60 / 25e9)
    p.set("warp_issue_per_cu_clk", 4, "warp instructions", "test")
    d = GPUParams.from_profile(p)
    t = pipe_seconds(d, f, g)
    assert t["fp32"][0] == pytest.approx(100 / 50e9) and t["int"][0] == pytest.approx(60 / 25e9)
    # 160 lanes of instructions at 4 warp instructions of 32 lanes per clock (1 GHz)
    assert t["issue"][0] == pytest.approx(160 / (4 * 32 * 1e9))
    assert t["compute"][0] == pytest.approx(60 / 25e9)
    # one scheduler: the issue binds
    p.set("warp_issue_per_cu_clk", 1, "warp instructions", "test")
    t1 = pipe_seconds(GPUParams.from_profile(p), f, g)
    assert t1["compute"][0] == pytest.approx(160 / (32 * 1e9)) == pytest.approx(t1["issue"][0])


def test_the_explanation_shows_each_pipes_share_of_the_compute_part():
    p = gpu_profile()
    p.set("warp_issue_per_cu_clk", 4, "warp instructions", "test")
    m = AnalyticalModel(p)
    n = 1 << 16
    pred = m.predict(frame(UNROLLED, "unrolled", [(n, 128, [buf("a", n), buf("o", n)])]))
    e = pred.explanation[0]
    shares = e["compute_pipes_share"]
    assert {"fp32", "int", "issue"} <= set(shares) and max(shares.values()) == pytest.approx(1.0)
    # the compute part is the busiest pipe's time per work-item over the launch's work-items
    plain = AnalyticalModel(gpu_profile()).predict(frame(UNROLLED, "unrolled", [(n, 128, [buf("a", n), buf("o", n)])]))
    assert "compute_pipes_share" not in plain.explanation[0]
    assert e["time_parts_us"]["compute"] <= plain.explanation[0]["time_parts_us"]["compute"] + 1e-12


# a work-group's tile read by unrolled loops: the copies over y and i read rows l + 4y + i, 9 distinct
# offsets of 10 copies; the weights w[i] are the same 5 addresses for both y
TILE = """__kernel void tile(__global const float* in, __global const float* w, __global float* out) {
  __local float t[80];
  int l = get_local_id(0);
  t[l] = in[get_global_id(0)];
  barrier(CLK_LOCAL_MEM_FENCE);
  float s = 0.0f;
  #pragma unroll
  for (int y = 0; y < 2; y++) {
    #pragma unroll
    for (int i = 0; i < 5; i++) s += t[l + y * 4 + i] * w[i];
  }
  out[get_global_id(0)] = s; }"""
# the same reads with a store to the tile between them: a copy may read what another wrote
TILE_STORED = TILE.replace("s += t[l + y * 4 + i] * w[i];", "{ s += t[l + y * 4 + i] * w[i]; t[l] = s; }").replace(
    "tile(", "tile_stored(")
# the same reads in a loop that is not unrolled: one load per trip
TILE_ROLLED = TILE.replace("for (int i = 0; i < 5; i++)", "for (int i = 0; i < n; i++)").replace(
    "__global float* out)", "__global float* out, int n)").replace("tile(", "tile_rolled(")


def _loads(src: str, name: str) -> dict[str, float]:
    return {a.arg: a.unrolled_distinct for a in analyze_source_text(src, name).accesses if a.kind == "load"}


def test_unrolled_copies_that_repeat_an_address_are_recorded():
    assert _loads(TILE, "tile") == {"in": 1.0, "t": pytest.approx(0.9), "w": pytest.approx(0.5)}
    # the local store in the unrolled loops: the tile's loads stay; the global weights do not alias it
    assert _loads(TILE_STORED, "tile_stored") == {"in": 1.0, "t": 1.0, "w": pytest.approx(0.5)}
    assert _loads(TILE_ROLLED, "tile_rolled") == {"in": 1.0, "t": 1.0, "w": 1.0}


def test_gpu_compiler_keeps_repeated_loads_in_registers():
    env = {k: np.array([v]) for k, v in {"gsize0": 1024.0, "lsize0": 64.0, "ngroups0": 16.0, "warp": 32.0}.items()}
    f = analyze_source_text(TILE, "tile").evaluate_many(env)
    assert f["local_loads"][0] == 10 and f["global_loads"][0] == 11          # 10 copies; in[] once and w[] 10 times
    assert f["repeated:local_loads"][0] == pytest.approx(1.0) and f["repeated:global_loads"][0] == pytest.approx(5.0)
    got = GPUClass(gpu_profile()).compiled_features(f)
    assert got["local_loads"][0] == pytest.approx(9.0) and got["global_loads"][0] == pytest.approx(6.0)
    assert got["local_bytes"][0] == pytest.approx(f["local_bytes"][0] - 4.0)
    assert got["warp_global_mem"][0] == pytest.approx(f["warp_global_mem"][0] - 5.0)
    # the CPU runtime class counts every copy (its vectorizer's code keeps no such registers here)
    from kernelcast.models.analytical.cpu_runtime import CPURuntimeClass

    from tests.profiles import cpu_profile
    assert CPURuntimeClass(cpu_profile()).compiled_features(f)["local_loads"][0] == 10


def test_a_gpu_profile_without_an_fp32_peak_runs_at_its_lanes_and_clock():
    """No fp32 peak in the profile: two warps' lanes per compute unit and clock (the profile's clock,
    else the default), named as a rule; the other classes follow as fractions of it."""
    from kernelcast.models.analytical.gpu import DEFAULT_CLOCK_HZ, GPUParams

    p = DeviceProfile(DeviceIdentity(name="no-peak", device_type="GPU", compute_units=CU, wg_multiple=32))
    p.set("warp_size", 32, "threads", "test")
    d = GPUParams.from_profile(p)
    assert d.rate("fp32_fma") == pytest.approx(CU * 2 * 32 * DEFAULT_CLOCK_HZ)
    assert "default clock" in d.rate_sources["fp32_fma"] and "no fp32 peak" in d.rate_sources["fp32_fma"]
    assert d.rates["int32_mul"] == pytest.approx(0.25 * d.rates["fp32_fma"])
    p.set("boost_clock_mhz", 2000.0, "MHz", "test")
    assert GPUParams.from_profile(p).rate("fp32_fma") == pytest.approx(CU * 2 * 32 * 2e9)
    full = GPUParams.from_profile(gpu_profile())            # a profile's own peak wins
    assert full.rate("fp32_fma") == pytest.approx(500e9) and full.rate_sources["fp32_fma"] == "rule: 1 x fp32 FMA rate"


def test_energy_counts_the_operations_of_the_compiled_code():
    """The operation energy is taken from the same counts as the time: a fully unrolled loop's
    control and counter arithmetic cost neither time nor energy."""
    p = gpu_profile()
    p.set("tdp_w", 100.0, "W", "test")
    rows = [(1 << 16, 64, [buf("a", 1 << 16), buf("o", 1 << 16)])]
    model = AnalyticalModel(p)
    rolled = model.predict(frame(ROLLED, "rolled", rows)).explanation[0]["energy_parts_j"]["compute"]
    unrolled = model.predict(frame(UNROLLED, "unrolled", rows)).explanation[0]["energy_parts_j"]["compute"]
    # 16 FMAs and the store's address either way; the rolled loop adds 17 compares, 17 branches and
    # 16 increments at half an FMA's energy each
    assert unrolled < rolled * 0.6


def test_the_core_clock_slows_everything_but_the_dram():
    gc = GPUClass(gpu_profile())
    body, comp = np.array([10.0, 10.0, 10.0]), np.array([2.0, 2.0, 10.0])
    dram = np.array([10.0, 4.0, 1.0])           # DRAM-bound; L1/L2-bound; compute-bound
    got = gc.capped_body(body, comp, dram, np.array([0.5, 0.5, 0.5]), np.ones(3))
    assert got.tolist() == [10.0, 20.0, 20.0]
    assert gc.capped_body(body, comp, dram, np.ones(3), np.ones(3)).tolist() == body.tolist()


def test_a_partial_warp_takes_a_full_warps_issue_slots():
    """40 work-items per work-group run as two 32-wide warps: their compute costs 64/40 of the
    same work in work-groups of 64, per work-item; multiples of the warp width pay nothing extra."""
    from kernelcast.models.analytical.gpu import lane_padding

    assert lane_padding(np.array([640.0, 1280.0, 4096.0]), np.array([16.0, 20.0, 128.0]), 32).tolist() == \
        [64 / 40, 1.0, 1.0]
    assert lane_padding(np.array([640.0]), np.array([16.0]), 64)[0] == pytest.approx(64 / 40)
    gc = GPUClass(gpu_profile())
    f = analyze_source_text(UNROLLED, "unrolled").evaluate_many(
        {"gsize0": np.array([640.0, 1280.0]), "lsize0": np.array([40.0, 64.0]), "ngroups0": np.array([16.0, 20.0]),
         "warp": np.array([32.0, 32.0])})
    f = gc.compiled_features(f)
    costs = gc.item_costs(None, f, {}, np.array([640.0, 1280.0]), np.array([16.0, 20.0]))
    assert costs.seconds[0] == pytest.approx(costs.seconds[1] * 64 / 40)


def test_conversions_run_in_a_pipe_of_their_own_where_the_profile_gives_their_rate():
    """Float <-> integer conversions: in the integer pipe at the INT32 rate without a profile rate;
    with ``peak_conv_gops`` (NVIDIA: 16 per clock and SM) in a pipe of their own at that rate, beside
    the integer arithmetic."""
    from kernelcast.models.analytical.gpu import GPUParams, pipe_seconds

    p = gpu_profile()
    p.set("peak_int32_add_gops", 640.0, "Gop/s", "test")         # 64 per clock on each of 10 units at 1 GHz
    p.set("warp_issue_per_cu_clk", 4, "warp instructions", "test")
    g = np.array([1.0])
    f = {"warp_int_add": np.array([64.0]), "int_add": np.array([64.0]),
         "warp_conv": np.array([32.0]), "conv": np.array([32.0])}
    t = pipe_seconds(GPUParams.from_profile(p), f, g)
    assert "conv" not in t
    assert t["int"][0] == pytest.approx((64 + 32) / 64e9)
    p.set("peak_conv_gops", 160.0, "Gop/s", "test")              # 16 per clock on each of 10 units
    t = pipe_seconds(GPUParams.from_profile(p), f, g)
    assert t["int"][0] == pytest.approx(64 / 64e9)
    assert t["conv"][0] == pytest.approx(32 / 16e9)
    assert t["compute"][0] == pytest.approx(32 / 16e9)


# every trip loads two independent values: nothing in one trip waits for a load of another
STREAM2 = """__kernel void stream2(__global const float* a, __global const float* b, __global float* o, int n) {
  int i = get_global_id(0); float s = 0.0f;
  for (int k = 0; k < n; k++) s += a[k * 4096 + i] * b[k * 4096 + i];
  o[i] = s; }"""


def test_loads_in_flight_overlap_a_warps_latency_unless_an_address_waits_for_a_load():
    """Two load sites in a kept loop: the compiler's four copies of the body issue 8 loads before
    their first use, and the latency floor charges each warp's accesses at 1/8 of their latency; a
    pointer chase (an address loaded by the trip before) keeps them one at a time."""
    from kernelcast.models.analytical.registers import loads_in_flight

    assert loads_in_flight(analyze_source_text(STREAM2, "stream2")) == 8
    assert loads_in_flight(analyze_source_text(CHASE, "chase")) == 1
    assert loads_in_flight(analyze_source_text(COPY, "copy")) == 1
    m = AnalyticalModel(gpu_profile())
    n, steps = 4096, 256
    ex = m.predict(frame(STREAM2, "stream2", [(n, 256, [buf("a", n * steps), buf("b", n * steps), buf("o", n),
                                                        scal("n", steps)])])).explanation[0]
    # 16 work-groups of 8 warps on 10 units: at most 2 on a unit, all resident at once (one
    # repetition of 16 warps); each warp waits for its 2 x 256 + 1 accesses at 1/8 of the average
    # latency, plus its share of the compute
    lat_cycles = ex["access_latency_cycles"]
    one_warp = ex["time_parts_us"]["compute"] * 1e-6 * CLOCK / 16
    assert ex["time_parts_us"]["latency"] == pytest.approx((one_warp + (2 * steps + 1) * lat_cycles / 8) / CLOCK * 1e6)


def test_the_latency_floor_adds_to_the_throughput_bound():
    """Brent's bound of a greedy scheduler: the time is the busiest pipe or memory level plus the
    warps' latency floor, not the larger of the two."""
    m = AnalyticalModel(gpu_profile())
    n = 1 << 22
    ex = m.predict(frame(COPY, "copy", [(n, 256, [buf("a", n), buf("b", n), scal("n", n)])])).explanation[0]
    parts = ex["time_parts_us"]
    assert m.predict(frame(COPY, "copy", [(n, 256, [buf("a", n), buf("b", n), scal("n", n)])])).time_us[0] == \
        pytest.approx(parts["launch"] + max(parts["compute"], parts["memory"]) + parts["latency"] + parts["sync"])
    gc = GPUClass(gpu_profile())
    assert gc.with_latency(np.array([3.0]), np.array([2.0]))[0] == 5.0



# four elements per work-item: a grid sized for one element per work-item leaves 3 in 4 groups empty
TILED = """__kernel void tiled(__global const float* a, __global float* b, int n) {
  int x = get_group_id(0) * get_local_size(0) * 4 + get_local_id(0);
  for (int t = 0; t < 4; t++) {
    int i = x + t * get_local_size(0);
    if (i < n) b[i] = 2.0f * a[i];
  } }"""


def test_the_waves_count_the_work_groups_that_do_the_kernels_work(monkeypatch: pytest.MonkeyPatch):
    m = AnalyticalModel(gpu_profile())
    n = 64 * 4 * 200                    # 200 tiles of 4 x 64 elements
    args = [buf("a", n), buf("b", n), scal("n", n)]
    rows = frame(TILED, "tiled", [(n, 64, args), (n // 4, 64, args)])
    p = m.predict(rows)
    over, exact = p.explanation
    # 800 work-groups of 2 warps launched, 200 of them working; 16 resident per compute unit
    # (the work-group limit) on 10 units: waves of 160, the second holding 40
    assert over["work_groups"] == {"launched": 800.0, "working": 200.0}
    assert over["waves"] == 2.0 and over["last_wave_fill"] == pytest.approx(40 / 160)
    assert exact["work_groups"] == {"launched": 200.0, "working": 200.0}
    assert exact["waves"] == 2.0 and exact["last_wave_fill"] == pytest.approx(40 / 160)
    # the empty work-groups exit at once and the profile gives a work-group no cost of its own: the
    # memory part and the latency floor (2 repetitions of the resident set on the busiest unit) are
    # those of the grid of the 200 working groups alone (the compute part keeps the empty
    # work-items' loop over their guards)
    assert over["time_parts_us"]["memory"] == pytest.approx(exact["time_parts_us"]["memory"], rel=1e-3)
    assert over["time_parts_us"]["latency"] == pytest.approx(exact["time_parts_us"]["latency"], rel=0.05)
    # the last wave (40 groups: 4 per unit) computes as long as the first (16 per unit): 32 rounds of
    # a work-group per unit, not 16 + 4
    monkeypatch.setattr(GPUClass, "full_tail_wave", False)
    prorated = AnalyticalModel(gpu_profile()).predict(rows).explanation[1]
    assert exact["time_parts_us"]["compute"] == pytest.approx(prorated["time_parts_us"]["compute"] * 32 / 20)
    monkeypatch.setattr(GPUClass, "full_tail_wave", True)
    # counting every launched group instead: 5 waves, and 5 repetitions of the resident set whose
    # warps each wait for a quarter of a working warp's accesses (the average over all warps): 5/8
    # of the floor of 2 repetitions of working warps
    monkeypatch.setattr(GPUClass, "waves_of_working_groups", False)
    every = AnalyticalModel(gpu_profile()).predict(rows).explanation[0]
    assert every["waves"] == 5.0 and "work_groups" not in every
    assert every["time_parts_us"]["latency"] == pytest.approx(5 / 8 * over["time_parts_us"]["latency"], rel=0.03)
    # and the predict command says so under its table
    lines = _count_lines(pd.DataFrame({"explanation": [over, exact]}))
    assert lines == ["work-groups: 200 of 800 launched do the kernel's work (the others fail its guards and exit); "
                     "2 waves of them, the last 25 % full"]
    assert _count_lines(pd.DataFrame({"explanation": [exact]})) == []


def test_the_first_levels_rates_are_the_profiles_where_it_states_them():
    """A GCN/CDNA compute unit takes 16 lanes of load/store instructions and 64 bytes per clock and
    looks up 64-byte lines (NVIDIA's 32, 128 and 128 are the defaults): the table kernel's 17
    load/store instructions per warp (16 loads of the table, one store) take twice the clocks, the
    copy's 8 bytes per work-item too, and a strided load's lines twice as many."""
    n = 1 << 20
    warps = n / 32

    def l1_us(src: str, name: str, args: list, **rates: float) -> float:
        p = gpu_profile()
        for k, v in rates.items():
            p.set(k, v, "test", "test")
        return AnalyticalModel(p).predict(frame(src, name, [(n, 256, args)])).explanation[0]["memory_levels_us"]["l1"]

    table = [buf("t", 16), buf("o", n)]
    us = 1e6 / (CU * CLOCK)
    assert l1_us(TABLE, "table", table) == pytest.approx(17 * warps * 32 / 32 * us)
    assert l1_us(TABLE, "table", table, lsu_lanes_per_clk=16) == pytest.approx(17 * warps * 32 / 16 * us)
    copy = [buf("a", n), buf("b", n), scal("n", n)]
    assert l1_us(COPY, "copy", copy) == pytest.approx(8 * n / 128 * us)
    assert l1_us(COPY, "copy", copy, l1_bytes_per_clk=64) == pytest.approx(8 * n / 64 * us)

    # lanes 64 bytes apart: a warp's load touches 16 lines of 128 bytes (two lanes each) or 32 of 64,
    # its store one or two; the first level looks up one line per clock, which binds over the two
    # instructions' 2 clocks and the 1,152 bytes' 9
    strided = [buf("a", 16 * n), buf("o", n)]
    assert l1_us(STRIDED, "strided", strided) == pytest.approx(17 * warps * us)
    assert l1_us(STRIDED, "strided", strided, l1_line_bytes=64) == pytest.approx(34 * warps * us)
    # a 64-byte line per clock is 64 bytes per clock: the copy's lines bind as its bytes do at 64
    assert l1_us(COPY, "copy", copy, l1_line_bytes=64) == pytest.approx(8 * n / 64 * us)


def test_full_unrolling_folds_counter_arithmetic_but_not_arithmetic_on_loaded_data():
    """In a fully unrolled loop ``i + c`` is an immediate offset in each copy; ``i + shifts[c]``
    reads a load and is computed in every copy."""
    src = """__kernel void k(__global const float* in, __global const int* shifts, __global float* o) {
      int i = get_global_id(0); float acc = 0.0f;
      #pragma unroll
      for (int c = 0; c < 8; c++) acc += in[i + IDX];
      o[i] = acc; }"""
    env = {k: np.array([v]) for k, v in {"gsize0": 1024.0, "lsize0": 64.0, "ngroups0": 16.0, "warp": 32.0}.items()}
    counter = compiled_counts(analyze_source_text(src.replace("IDX", "c"), "k").evaluate_many(env))
    loaded = compiled_counts(analyze_source_text(src.replace("IDX", "shifts[c]"), "k").evaluate_many(env))
    assert counter["warp_int_add"][0] == 0 and counter["warp_global_mem"][0] == 9
    assert loaded["warp_int_add"][0] == 8 and loaded["warp_global_mem"][0] == 17

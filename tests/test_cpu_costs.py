"""Per-work-item costs on a CPU device: atomics (calib benchmark, static contention estimate, charge),
conditional uniform stores, gathers and strided accesses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib import kernels as K
from kernelcast.calib.microbench import CalibOptions, Calibrator
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel, atomic_distinct, atomic_seconds, config_env
from kernelcast.models.static import analyze_source

from kernelcast.schema import Kernel

ROOT = Path(__file__).resolve().parents[1]
HIST = (ROOT / "datagen" / "bundled" / "histogram.cl").read_text()

SRC = """
__kernel void own(__global uint* c) { atomic_add(&c[get_global_id(0)], 1u); }
__kernel void one(__global uint* c) { atomic_inc(c); }
__kernel void two_local(__global uint* out) {
  __local uint l[64];
  l[get_local_id(0) & 63] = 0u;
  barrier(CLK_LOCAL_MEM_FENCE);
  atomic_add(&l[get_local_id(0) & 63], 1u);
  atomic_add(&l[get_local_id(0) & 63], 2u);
  barrier(CLK_LOCAL_MEM_FENCE);
  out[get_global_id(0)] = l[get_local_id(0) & 63];
}
"""


def _profile(device_type: str = "CPU", **extra: float) -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test", device_type=device_type, compute_units=2, wg_multiple=8))
    vals = {"peak_fp32_fma_gops": 100.0, "peak_int32_add_gops": 100.0, "dram_bw_gbs": 20.0,
            "launch_overhead_us": 1.0, **extra}
    for k, v in vals.items():
        p.set(k, v, "Gop/s" if k.endswith("_gops") else "?", "test")
    return p


ATOMIC = {"atomic_global_gops": 0.4, "atomic_global_b1_gops": 0.05, "atomic_global_b16_gops": 0.1,
          "atomic_global_b256_gops": 0.2, "atomic_local_gops": 0.5}


def _feats(src: str, name: str):
    return analyze_source(Kernel(source=src, name=name))


def _env(g: int, ls: int, args: list[dict]) -> dict[str, np.ndarray]:
    return {k: np.asarray([v]) for k, v in config_env([g], [ls], args).items()}


def test_distinct_addresses_of_the_histogram_kernels():
    args = [{"name": "data", "kind": "buffer", "dtype": "uchar", "count": 4096},
            {"name": "hist", "kind": "buffer", "dtype": "uint", "count": 300},
            {"name": "keys", "kind": "buffer", "dtype": "int", "count": 4096},
            {"name": "values", "kind": "buffer", "dtype": "float", "count": 4096},
            {"name": "counter", "kind": "buffer", "dtype": "int", "count": 1},
            {"name": "nbins", "kind": "scalar", "dtype": "int", "value": "40"},
            {"name": "n", "kind": "scalar", "dtype": "int", "value": "4096"},
            {"name": "k", "kind": "scalar", "dtype": "int", "value": "1"}]
    env = config_env([4096], [256], args)
    got = {}
    for name in ("hg_global_inc_u8", "hg_local_k_per_item", "hg_count_above", "hg_float_range"):
        for a in _feats(HIST, name).accesses:
            if a.kind == "atomic":
                d, why = atomic_distinct(a, env)
                got[(name, a.arg)] = (None if d is None else float(d), why)
    assert got[("hg_global_inc_u8", "hist")][0] == 300            # data-dependent: the buffer's 300 elements
    assert got[("hg_local_k_per_item", "lhist")][0] == 256         # keys[idx] & (HG_BINS - 1)
    assert got[("hg_local_k_per_item", "hist")][0] == 300          # hist[b], b from the local id only
    assert got[("hg_count_above", "counter")][0] == 1              # atomic_inc(counter)
    assert got[("hg_float_range", "hist")][0] == 40                # min(b, nbins - 1)
    own = [a for a in _feats(SRC, "own").accesses if a.kind == "atomic"][0]
    assert atomic_distinct(own, env)[0] is None                    # c[gid]: no contention


def test_atomic_charge_hand_computed():
    """2 compute units: a rate of R atomics/s per device is 2/R s per atomic on one unit."""
    model = AnalyticalModel(_profile(**ATOMIC))
    d = model.dev
    args = [{"name": "c", "kind": "buffer", "dtype": "uint", "count": 1024}]
    # own element: 0.4 Gop/s -> 5 ns per atomic per compute unit
    s = atomic_seconds(_feats(SRC, "own"), _env(1024, 64, args), d)
    assert s is not None and s[0] == pytest.approx(5e-9)
    # one address: the 1-bin rate 0.05 Gop/s -> 40 ns
    s = atomic_seconds(_feats(SRC, "one"), _env(1024, 64, args), d)
    assert s[0] == pytest.approx(40e-9)
    # 64 bins lie halfway (in log2) between the 16- and 256-bin points: 0.15 Gop/s -> 13.33 ns
    assert float(d.atomic_rate("global", np.asarray(64.0))) == pytest.approx(0.15e9)
    assert float(d.atomic_rate("global", np.asarray(4096.0))) == pytest.approx(0.2e9)   # clamped at 256
    # two local atomics per work-item at 0.5 Gop/s (no bin rates for local): 2 x 4 ns
    s = atomic_seconds(_feats(SRC, "two_local"), _env(1024, 64, args), d)
    assert s[0] == pytest.approx(8e-9)
    # the whole prediction: 4096 work-items in groups of 64 on one address, 4096 x 40 ns / 2 units
    # = 81.92 us of atomics added to the compute part (the kernel's few scalar ops)
    fr = pd.DataFrame([{"source": SRC, "kernel_name": "one", "gsize": [4096], "lsize": [64], "args": args}])
    p = model.predict(fr)
    base = AnalyticalModel(_profile()).predict(fr)
    comp = p.explanation[0]["time_parts_us"]["compute"] - base.explanation[0]["time_parts_us"]["compute"]
    assert comp == pytest.approx(4096 * 40e-9 / 2 * 1e6, rel=1e-6)
    assert p.explanation[0]["bound"] == "compute"
    assert "one address" in p.explanation[0]["atomics"][0]


def test_one_work_group_runs_its_atomics_uncontended():
    """One work-group runs on one core, so its atomics on one address contend with no other core:
    each costs the own-element rate (5 ns per atomic per unit), not the one-bin rate (40 ns), which
    two work-groups pay; and so does a launch one core finishes before the other joins it. On ds7,
    synth_chunked_000116 (an atomic_add on one word per trip) at one work-group of 2,656 work-items:
    17 us measured, 113 us predicted before, 18 us now."""
    model, base = AnalyticalModel(_profile(**ATOMIC)), AnalyticalModel(_profile())
    args = [{"name": "c", "kind": "buffer", "dtype": "uint", "count": 1024}]
    added = {}
    for ls in (64, 32):
        fr = pd.DataFrame([{"source": SRC, "kernel_name": "one", "gsize": [64], "lsize": [ls], "args": args}])
        comp = [m.predict(fr).explanation[0]["time_parts_us"]["compute"] for m in (model, base)]
        added[ls] = comp[0] - comp[1]
    assert added[64] == pytest.approx(64 * 5e-9 * 1e6, rel=1e-6)          # one core, one group of 64
    assert added[32] == pytest.approx(32 * 40e-9 * 1e6, rel=1e-6)         # two cores, 32 each, contended
    # the second core joins 50 us late (cu_join_us): the first finishes the 64 atomics alone
    late = AnalyticalModel(_profile(**ATOMIC, cu_join_us=50.0))
    fr = pd.DataFrame([{"source": SRC, "kernel_name": "one", "gsize": [64], "lsize": [32], "args": args}])
    comp = late.predict(fr).explanation[0]["time_parts_us"]["compute"]
    assert comp - base.predict(fr).explanation[0]["time_parts_us"]["compute"] == pytest.approx(32 * 5e-9 * 1e6)


def test_gpu_profile_keeps_charging_atomics_as_bytes():
    args = [{"name": "c", "kind": "buffer", "dtype": "uint", "count": 1024}]
    fr = pd.DataFrame([{"source": SRC, "kernel_name": "one", "gsize": [4096], "lsize": [64], "args": args}])
    gpu = AnalyticalModel(_profile("GPU", max_warps_per_cu=64.0, **ATOMIC)).predict(fr)
    gpu0 = AnalyticalModel(_profile("GPU", max_warps_per_cu=64.0)).predict(fr)
    assert np.isfinite(gpu.time_us[0]) and gpu.time_us[0] == gpu0.time_us[0]
    assert "memory bytes only" in gpu.explanation[0]["atomics"]
    cpu0 = AnalyticalModel(_profile()).predict(fr)
    assert "no atomic rates" in cpu0.explanation[0]["atomics"]


def test_atomic_kernels_count_on_this_device(harness, device):
    """Both benchmark kernels build and do what they say: after one launch of 4 groups of 64
    work-items, 3 updates each, the bins hold the number of atomics."""
    from kernelcast.instrument.runner import TimingPolicy

    cal = Calibrator(device, harness, options=CalibOptions())
    pol = TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=1.0)
    for space in ("global", "local"):
        for bins in (None, 1, 16):
            m = harness.run(K.atomic_kernel(space), cal.atomic_config(space, 256, 64, bins, 3), pol)
            assert m.status == "ok", m.reason


FLAG = """
__kernel void with_flag(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; *not_done = 1; } }
__kernel void no_flag(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; } }
__kernel void flag_always(__global char *f, __global char *nf, __global int *not_done, const int n)
{ int v = get_global_id(0);
  if (v < n && nf[v]) { f[v] = 1; nf[v] = 0; }
  *not_done = 1; }
"""


def test_conditional_store_to_one_address_is_scalar():
    from kernelcast.models.analytical import cpu_vectorizable

    ok, why = cpu_vectorizable(_feats(FLAG, "with_flag"))
    assert ok is False and "not_done" in why
    assert cpu_vectorizable(_feats(FLAG, "no_flag"))[0] is True
    assert cpu_vectorizable(_feats(FLAG, "flag_always"))[0] is True     # every work-item stores: hoisted


GATHER = """
__kernel void gather(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[idx[i]]; }
__kernel void copy(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[i]; }
__kernel void hashed(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); if (i < n) dst[i] = src[(i * 7919) & (n - 1)]; }
__kernel void pairs(__global const float *src, __global const int *idx, __global float *dst, const int h)
{ int i = get_global_id(0); if (i < h) { dst[2 * i] = src[i]; dst[2 * i + 1] = src[i + h]; } }
__kernel void halves(__global const float *src, __global const int *idx, __global float *dst, const int h)
{ int i = get_global_id(0); if (i < h) { dst[i] = src[i]; dst[i + h] = src[i + h]; } }
__kernel void clamped(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  dst[i] = src[max(i - 1, 0)] + src[clamp(i + 1, 0, n - 1)] + src[min(i + 2, n - 1)] + src[i]; }
__kernel void shifted(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0); dst[i] = src[i + 1] + src[i + 2] + src[i + 3] + src[i]; }
__kernel void shifted_wide(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ size_t i = get_global_id(0); dst[i] = src[i + 1] + src[i + 2] + src[i + 3] + src[i]; }
__kernel void shifted_guarded(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  dst[i] = (i + 1 < n ? src[i + 1] : 0.0f) + (i + 2 < n ? src[i + 2] : 0.0f) + (i >= 3 ? src[i - 3] : 0.0f) + src[i]; }
__kernel void shifted_exit(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  if (i < 3 || !(i + 1 < n)) return;
  dst[i] = src[i - 3] + src[i + 1]; }
__kernel void shifted_loose(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int i = get_global_id(0);
  if (i >= n - 2) return;
  dst[i] = (i < n - 1 ? src[i + 1] : 0.0f) + (i + 3 <= n ? src[i + 2] : 0.0f) + (i >= 2 ? src[i - 3] : 0.0f) + src[i]; }
__kernel void rows(__global const float *src, __global const int *idx, __global float *dst, const int n)
{ int x = get_global_id(0), y = get_global_id(1), w = get_global_size(0);
  dst[y * w + x] = src[min(y + 1, n - 1) * w + x]; }
"""


#: the arguments of the GATHER kernels at 4,096 elements
GATHER_ARGS = [{"name": "src", "kind": "buffer", "dtype": "float", "count": 4096},
               {"name": "idx", "kind": "buffer", "dtype": "int", "count": 4096},
               {"name": "dst", "kind": "buffer", "dtype": "float", "count": 4096},
               {"name": "n", "kind": "scalar", "dtype": "int", "value": "4096"}]


def test_gather_charge_hand_computed():
    """One data-dependent load per work-item at 2 Gop/s on 2 compute units: 1 ns per work-item on
    one unit; the contiguous copy has none; a profile without gather_gops charges nothing."""
    from kernelcast.models.analytical import gather_seconds

    d = AnalyticalModel(_profile(gather_gops=2.0)).dev
    env = _env(4096, 64, GATHER_ARGS)
    assert gather_seconds(_feats(GATHER, "gather"), env, d)[0] == pytest.approx(1e-9)
    assert gather_seconds(_feats(GATHER, "copy"), env, d) is None
    assert gather_seconds(_feats(GATHER, "gather"), env, AnalyticalModel(_profile()).dev) is None


def test_clamped_index_is_a_gather_of_consecutive_addresses():
    """Three loads per work-item at an index clamping the work-item id (max, clamp, min) at 3 Gop/s
    of consecutive gathers on 2 compute units: 2 ns per work-item on one unit; so are three loads at
    an ``int`` global id plus a constant; its own element, and the same shifted loads with a
    ``size_t`` id, are vector loads; a clamped row index (dimension 1) keeps the lanes contiguous; a
    profile without gather_clamped_gops charges none of them."""
    from kernelcast.models.analytical import clamped_index, gather_seconds, shifted_int_index

    f = _feats(GATHER, "clamped")
    assert [clamped_index(a) for a in f.accesses if a.kind == "load"] == [True, True, True, False]
    shifted = _feats(GATHER, "shifted")
    assert [shifted_int_index(a) for a in shifted.accesses if a.kind == "load"] == [True, True, True, False]
    env = _env(4096, 64, GATHER_ARGS)
    d = AnalyticalModel(_profile(gather_gops=2.0, gather_clamped_gops=3.0)).dev
    assert gather_seconds(f, env, d)[0] == pytest.approx(3 / 1.5e9)
    assert gather_seconds(shifted, env, d)[0] == pytest.approx(3 / 1.5e9)
    assert gather_seconds(_feats(GATHER, "shifted_wide"), env, d) is None
    assert not any(clamped_index(a) for a in _feats(GATHER, "rows").accesses)
    assert gather_seconds(f, env, AnalyticalModel(_profile(gather_gops=2.0)).dev) is None


def test_guard_bounding_the_shifted_index_makes_a_vector_load():
    """An ``int`` global id plus a constant under a guard that bounds that very index (``i + 1 < n
    ? src[i + 1]``, ``i >= 3 ? src[i - 3]``, and after ``if (i < 3 || !(i + 1 < n)) return;``) is a
    masked vector load, not a gather (PoCL 3.1's code: no gather instruction in 'shifted_guarded', 24
    in 'shifted'); a guard that does not (``i < n - 1``, ``i + 3 <= n``, ``i >= 2`` for ``i - 3``,
    an early return on ``i >= n - 2``) leaves it gathered."""
    from kernelcast.models.analytical import gather_seconds, shifted_int_index

    guarded = _feats(GATHER, "shifted_guarded")
    assert [shifted_int_index(a) for a in guarded.accesses if a.kind == "load"] == [False, False, False, False]
    assert [a.index_guarded for a in guarded.accesses if a.kind == "load"] == [True, True, True, False]
    assert [a.index_guarded for a in _feats(GATHER, "shifted_exit").accesses if a.kind == "load"] == [True, True]
    loose = _feats(GATHER, "shifted_loose")
    assert [shifted_int_index(a) for a in loose.accesses if a.kind == "load"] == [True, True, True, False]
    d = AnalyticalModel(_profile(gather_gops=2.0, gather_clamped_gops=3.0)).dev
    assert gather_seconds(guarded, _env(4096, 64, GATHER_ARGS), d) is None


STRIDED = """
__kernel void grid(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), g = get_global_size(0); float s = 0.0f;
  for (uint at = gid; at < n; at += g) s += in[at];
  out[gid] = s; }
__kernel void chunk(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), per = n / get_global_size(0); float s = 0.0f;
  for (uint k = 0; k < per; k++) s += in[gid * per + k];
  out[gid] = s; }
__kernel void tiles(__global const float* in, __global float* out, const uint n)
{ uint gid = get_global_id(0), per = n / get_global_size(0), l = get_local_size(0); float s = 0.0f;
  for (uint base = 0; base < per; base += l)
    for (uint k = 0; k < min(l, per - base); k++) s += in[gid * per + base + k];
  out[gid] = s; }
"""


def _strided_args(n: int, g: int) -> list[dict]:
    return [{"name": "in", "kind": "buffer", "dtype": "float", "count": n},
            {"name": "out", "kind": "buffer", "dtype": "float", "count": g},
            {"name": "n", "kind": "scalar", "dtype": "uint", "value": str(n)}]


def test_page_strided_loop_charge_hand_computed():
    """A grid-stride sum of 2^24 floats by 16,384 work-items: 1,024 trips of 64 KiB each per
    work-item; 16 neighbouring work-items share a 64-byte line, so each work-item fetches 64 lines,
    at 100 ns each: 6.4 us of one compute unit per work-item, for 4 KiB of its bytes. The same loop
    stepping 2 KiB (512 work-items) stays within a page, the contiguous chunks step 4 bytes, and
    with n equal to the global size each work-item makes one trip: none of them is charged.
    Without the calibrated value the DRAM latency stands in; a GPU has none."""
    from kernelcast.models.analytical import strided_seconds

    n = 1 << 24
    d = AnalyticalModel(_profile(strided_line_ns=100.0)).dev
    s, b = strided_seconds(_feats(STRIDED, "grid"), _env(16384, 256, _strided_args(n, 16384)), d)
    assert s[0] == pytest.approx(64 * 100e-9) and b[0] == pytest.approx(4096)
    assert strided_seconds(_feats(STRIDED, "grid"), _env(512, 256, _strided_args(n, 512)), d) is None
    # one trip per work-item (n = global size) is no walk: neighbouring work-items stream
    assert strided_seconds(_feats(STRIDED, "grid"), _env(16384, 256, _strided_args(16384, 16384)), d) is None
    assert strided_seconds(_feats(STRIDED, "chunk"), _env(16384, 256, _strided_args(n, 16384)), d) is None
    # a walk of 4 trips (n = 4 x the global size) is tiny: its own cost where calibrated, else the short one
    tiny = AnalyticalModel(_profile(strided_line_ns=100.0, strided_short_ns=30.0, strided_tiny_ns=10.0)).dev
    short = AnalyticalModel(_profile(strided_line_ns=100.0, strided_short_ns=30.0)).dev
    env4 = _env(16384, 256, _strided_args(4 * 16384, 16384))
    assert strided_seconds(_feats(STRIDED, "grid"), env4, tiny)[0][0] == pytest.approx(4 / 16 * 10e-9)
    assert strided_seconds(_feats(STRIDED, "grid"), env4, short)[0][0] == pytest.approx(4 / 16 * 30e-9)
    # an outer loop stepping 2,048 floats (8 KiB) around an inner one stepping one: the inner walk
    # streams (la_matvec_local_x at a local size of 1,528 was charged 45x its measured time)
    assert strided_seconds(_feats(STRIDED, "tiles"), _env(4096, 2048, _strided_args(n, 4096)), d) is None
    d_lat = AnalyticalModel(_profile(dram_latency_ns=150.0)).dev
    assert d_lat.strided_line_s == pytest.approx(150e-9) and "latency" in d_lat.strided_source
    gpu = AnalyticalModel(_profile("GPU", strided_line_ns=100.0))
    assert not gpu.dev.is_cpu and getattr(gpu.dev, "strided_line_s", None) is None


def test_page_strided_loop_only_beyond_the_last_cache_level():
    """The line cost replaces the streamed bytes only where the working set is beyond the last
    cache level: 2^24 floats (64 MiB) past a 32 MiB level, 2^20 (4 MiB) inside it."""
    prof = _profile(strided_line_ns=100.0, cache_level0_bytes=32 * 2**20, bw_level0_gbs=200.0)
    m = AnalyticalModel(prof)
    f = _feats(STRIDED, "grid")
    for n, charged in ((1 << 24, True), (1 << 20, False)):
        env = _env(16384, 256, _strided_args(n, 16384))
        env["__working_set_bytes"] = np.asarray([4.0 * n])
        r = m.evaluate(f, env)
        assert bool(r.parts["strided_lines_s"][0] > 0) is charged
        if charged:
            assert r.parts["memory_s"][0] == pytest.approx(16384 * 64 * 100e-9 / 2, rel=0.05)


LANES = """
__kernel void aos_dist(__global const float2 *r, __global float *d, const float2 q, const int n)
{ int i = get_global_id(0); if (i < n) d[i] = distance(r[i], q); }
__kernel void aos_norm(__global const float2 *r, __global float *d, const float2 q, const int n)
{ int i = get_global_id(0); if (i < n) { float2 v = r[i] - q; d[i] = sqrt(v.x * v.x + v.y * v.y); } }
__kernel void soa_norm(__global const float *x, __global const float *y, __global float *d, const float2 q,
                       const int n)
{ int i = get_global_id(0); if (i < n) { float a = x[i] - q.x, b = y[i] - q.y; d[i] = sqrt(a * a + b * b); } }
__kernel void f4_whole(__global const float4 *a, __global float4 *c, const int n)
{ int i = get_global_id(0); if (i < n) c[i] = a[i] * 1.5f; }
"""


def test_combining_vector_components_is_scalar():
    """A swizzle of a work-item's own vector value, or dot/length/distance of one, keeps the
    work-item loop scalar; components of a kernel argument (q.x) and whole-vector arithmetic do not."""
    from kernelcast.models.analytical import cpu_vectorizable

    for name, mixed in (("aos_dist", True), ("aos_norm", True), ("soa_norm", False), ("f4_whole", False)):
        f = analyze_source(Kernel(source=LANES, name=name))
        assert bool(f.lane_mixing) is mixed, name
        vec, why = cpu_vectorizable(f)
        assert vec is not mixed, (name, why)
        if mixed:
            assert "components" in why and str(f.lane_mixing[0]) in why



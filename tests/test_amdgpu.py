"""What an AMD GPU compiler makes of a kernel (models/static/amdgpu.py) and what the GPU class
charges for it: registers limit the resident work-groups, spills move bytes through the memory
hierarchy. Real compiles with clang's AMDGPU back-end (installed with the PTX toolchain); the cost
terms on hand-made profiles with known answers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from kernelcast.calib.profile import DeviceIdentity, DeviceProfile
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.analytical.gpu import GPUClass, GPUParams, scratch_traffic
from kernelcast.models.static import amdgpu
from kernelcast.models.static.amdgpu import compile_cached, compile_resources, parse_assembly, used_defines

needs_clang = pytest.mark.skipif(amdgpu.find_amdgpu_clang() is None,
                                 reason="no clang with the AMDGPU back-end (make installs Debian's clang-16)")

# T accumulators per work-item, each the sum of N products of values read from shared memory: the
# unrolled body keeps T x N values live, far over 128 registers for T = 16
ACC = """
#ifndef TILE
#define TILE 1
#endif
__global__ void acc(float* out, const float* in) {
    __shared__ float sh[2048];
    int t = threadIdx.x;
    sh[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    float s[TILE];
    #pragma unroll
    for (int k = 0; k < TILE; k++) s[k] = 0.0f;
    #pragma unroll
    for (int i = 0; i < 64; i++) {
        #pragma unroll
        for (int k = 0; k < TILE; k++) s[k] += sh[(t + i * 7 + k * 13) & 2047] * sh[(t * 3 + i + k) & 2047];
    }
    #pragma unroll
    for (int k = 0; k < TILE; k++) out[(blockIdx.x * blockDim.x + t) * TILE + k] = s[k];
}
"""

ASM = """\t.text
_Z3accPfPKf:                            ; @_Z3accPfPKf
; %bb.0:
\tv_fmac_f32_e32 v1, v2, v3
\tv_add_nc_u32_e32 v4, 1, v4
\tv_mul_f32_e32 v5, v6, v7
\tbuffer_store_dword v1, off, s[0:3], 0 offset:4
\tbuffer_load_dword v1, off, s[0:3], 0 offset:4
\tscratch_store_dwordx4 off, v[8:11], off offset:16
\tscratch_load_b64 v[2:3], off, off offset:32
\tglobal_load_dwordx4 v[8:11], v0, s[4:5]
\tglobal_load_ubyte v12, v0, s[4:5] offset:3
\tglobal_store_b64 v0, v[2:3], s[6:7]
\ts_endpgm
.Lfunc_end0:
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .args:
      - .address_space:  global
        .name:           out
    .group_segment_fixed_size: 8192
    .name:           _Z3accPfPKf
    .private_segment_fixed_size: 48
    .sgpr_count:     20
    .sgpr_spill_count: 0
    .vgpr_count:     128
    .vgpr_spill_count: 7
    .wavefront_size: 32
amdhsa.target:   amdgcn-amd-amdhsa--gfx1032
...
\t.end_amdgpu_metadata
"""


def test_the_assembly_gives_registers_spills_and_the_scratch_bytes_per_lane():
    r = parse_assembly(ASM, "acc", "gfx1032")
    assert r is not None
    assert (r.vgprs, r.sgprs, r.vgpr_spills, r.scratch_bytes, r.lds_bytes, r.wavefront) == (128, 20, 7, 48, 8192, 32)
    # a dword each way, 16 bytes stored and 8 loaded: 4 scratch instructions, 32 bytes per lane
    assert (r.scratch_ops, r.scratch_op_bytes) == (4, 32)
    assert (r.valu_ops, r.float_ops, r.instructions) == (3, 2, 11)
    assert r.scratch_per_float == 16.0
    # global vector memory: 4 + 1 + 2 values per lane in three instructions, 3.5 per fp instruction
    assert (r.vmem_ops, r.vmem_dwords, r.vmem_per_float) == (3, 7, 3.5)
    # the argument named "out" inside the entry is not the kernel
    assert parse_assembly(ASM, "out", "gfx1032") is None


@pytest.mark.parametrize("op, values", [
    ("global_load_dwordx4", 4), ("global_load_b128", 4), ("global_load_dwordx3", 3), ("global_load_b96", 3),
    ("flat_load_dwordx2", 2), ("global_store_b64", 2), ("global_atomic_add_x2", 2), ("global_atomic_add_u64", 2),
    ("global_atomic_cmpswap_b64", 2), ("global_load_dword", 1), ("global_load_b32", 1), ("global_load_ubyte", 1),
    ("global_load_u8", 1), ("global_load_short_d16_hi", 1), ("global_load_d16_b16", 1),
    ("global_atomic_add_f32", 1), ("global_store_byte", 1),
    ("v_add_f32_e32", 0), ("s_load_dwordx8", 0), ("buffer_load_dwordx4", 0), ("scratch_load_b64", 0)])
def test_each_vector_memory_instruction_moves_its_values_per_lane(op, values):
    assert amdgpu.vmem_dwords(op) == values


# a work-item sums TILE rows, each over 512 channels read at a per-channel delay: the same work and
# the same loads per row for every TILE
ROWS = """
__global__ void sweep(float* out, const unsigned char* in, const float* delay, int n, int m) {
    int x = (blockIdx.x * blockDim.x + threadIdx.x) * TILE;
    for (int t = 0; t < TILE; t++) {
        int i = x + t;
        if (i < n) {
            float acc = 0.0f;
            for (int c = 0; c < 512; c++) acc += in[c * m + i + (unsigned int)(i * 0.5f * delay[c])];
            out[i] = acc;
        }
    }
}
"""


@needs_clang
def test_the_compiler_loads_a_table_per_lane_in_the_copies_of_a_tile_loop_it_unrolls():
    one, four = (compile_resources(ROWS, "sweep", "gfx90a", f"-DTILE={t}") for t in (1, 4))
    assert one is not None and four is not None
    # the first copy reads delay[c] through the scalar unit, the others with per-lane vector loads:
    # more vector values per floating-point instruction for four rows than for one
    assert four.float_ops >= 4 * one.float_ops * 0.9
    assert four.vmem_per_float > 1.4 * one.vmem_per_float


def test_only_the_macros_the_source_names_reach_the_compiler():
    assert used_defines(ACC, "-DTILE=4 -Duse_shmem=1 -I/x") == ["-DTILE=4"]


def test_opencl_sources_and_targets_other_than_amd_are_not_compiled():
    assert compile_resources("__kernel void k() {}", "k", "gfx1032", language="opencl") is None
    assert compile_cached(ACC, "acc", "", "-DTILE=1") is None


@needs_clang
def test_a_large_tile_spills_under_the_default_work_group_bound_and_a_small_one_does_not():
    small = compile_resources(ACC, "acc", "gfx1032", "-DTILE=1")
    big = compile_resources(ACC, "acc", "gfx1032", "-DTILE=16")
    assert small is not None and big is not None
    assert small.vgpr_spills == 0 and small.scratch_ops == 0 and small.vgprs < 64
    # up to 1,024 work-items per work-group: at most 128 registers per lane, the rest spills
    assert big.vgprs <= 128 and big.vgpr_spills > 0 and big.scratch_ops > 0 and big.scratch_bytes > 0
    assert big.float_ops >= 16 * 64
    # the kernel's own bound of 64 work-items lets the compiler give it more registers
    bounded = compile_resources(ACC.replace("__global__ void", "__global__ __launch_bounds__(64) void"),
                                "acc", "gfx1032", "-DTILE=16")
    assert bounded is not None and bounded.vgprs > 128 and bounded.vgpr_spills < big.vgpr_spills


@needs_clang
def test_compiles_are_cached_on_disk_and_macros_the_source_never_names_share_one(tmp_path, monkeypatch):
    first = compile_cached(ACC, "acc", "gfx1032", "-DTILE=2 -Dunused=1", "cuda", tmp_path)
    files = list((tmp_path / "amdgpu").glob("*.json"))
    assert first is not None and len(files) == 1 and json.loads(files[0].read_text())["vgprs"] == first.vgprs
    amdgpu._MEMO.clear()

    def no_compile(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(amdgpu, "compile_resources", no_compile)
    assert compile_cached(ACC, "acc", "gfx1032", "-DTILE=2 -Dunused=7", "cuda", tmp_path) == first


def test_writers_of_one_cache_entry_at_once_each_write_their_own_temporary_file(tmp_path, monkeypatch):
    """Two compiles of the same configuration finishing together (threads of one process, or
    processes sharing the cache) must not move each other's temporary file away."""
    import os
    import threading

    got = amdgpu.AmdgpuResources(target="gfx1032", vgprs=9, agprs=0, sgprs=8, vgpr_spills=0, sgpr_spills=0,
                                 scratch_bytes=0, lds_bytes=0, wavefront=32)
    both = threading.Barrier(2, timeout=30)
    monkeypatch.setattr(amdgpu, "find_amdgpu_clang", lambda: "/fake/clang")
    def compile_resources(*a, **k):
        both.wait()                     # both compiled before either writes
        return got

    monkeypatch.setattr(amdgpu, "compile_resources", compile_resources)
    moved: list[str] = []
    real_replace = os.replace

    def replace(src, dst):
        moved.append(str(src))
        both_written.wait()
        real_replace(src, dst)

    both_written = threading.Barrier(2, timeout=30)
    monkeypatch.setattr(amdgpu.os, "replace", replace)
    amdgpu._MEMO.clear()
    errors: list[BaseException] = []

    def one():
        try:
            assert compile_cached(ACC, "acc", "gfx1032", "-DTILE=3", "cuda", tmp_path) == got
        except BaseException as e:      # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    amdgpu._MEMO.clear()
    assert not errors and len(set(moved)) == 2
    files = list((tmp_path / "amdgpu").iterdir())
    assert len(files) == 1 and json.loads(files[0].read_text())["vgprs"] == 9


@needs_clang
def test_a_kernel_whose_first_compiles_fail_is_not_compiled_again(monkeypatch):
    bad = "__global__ void k(float* o) { o[0] = undeclared + X; }"
    calls = []
    real = amdgpu.compile_resources
    monkeypatch.setattr(amdgpu, "compile_resources", lambda *a, **k: calls.append(a) or real(*a, **k))
    for i in range(amdgpu.FAIL_FAST + 3):
        assert compile_cached(bad, "k", "gfx1032", f"-DX={i}") is None
    assert len(calls) == amdgpu.FAIL_FAST


# ----------------------------------------------------------------------------------------------
# what the GPU class charges
# ----------------------------------------------------------------------------------------------

CU = 4


def amd_profile(target: str = "gfx1032") -> DeviceProfile:
    p = DeviceProfile(DeviceIdentity(name="test-amd", device_type="GPU", compute_units=CU, wg_multiple=32,
                                     llvm_target=target))
    for k, v, u in [("warp_size", 32, "threads"), ("boost_clock_mhz", 1000.0, "MHz"),
                    ("peak_fp32_gflops", 1000.0, "GFLOP/s"), ("dram_bw_gbs", 100.0, "GB/s"),
                    ("registers_per_cu", 65536, "32-bit registers"), ("l2_bytes", 1 << 20, "B")]:
        p.set(k, v, u, "test")
    return p


def test_registers_limit_the_resident_work_groups():
    dc = GPUClass(amd_profile())
    g, lsz, n_wg = np.array([1 << 20] * 3, float), np.array([256.0] * 3), np.array([4096.0] * 3)
    f = {"local_mem_bytes": np.zeros(3), "compiled_vgprs": np.array([128.0, 32.0, np.nan])}
    per_cu, _ = dc.residency(f, g, lsz, n_wg)
    # 65,536 registers / (128 x 32 lanes) = 16 warps: two work-groups of 8 warps; 32 registers: 8
    # work-groups, within the default of 32; unknown registers: the default alone
    assert list(per_cu) == [2.0, 8.0, 32.0]


def test_spills_move_their_bytes_through_l2_and_what_exceeds_it_to_dram():
    d = GPUParams.from_profile(amd_profile())
    g, lsz, per_cu = np.array([1e6, 1e6]), np.array([256.0, 256.0]), np.array([2.0, 2.0])
    f = {"fp32_fma": np.array([100.0, 100.0]), "int_add": np.array([50.0, 50.0]),
         "compiled_scratch_per_float": np.array([2.0, 2.0]), "compiled_scratch_per_valu": np.array([1.0, 1.0]),
         "compiled_scratch_op_bytes": np.array([4.0, 4.0]), "compiled_private_bytes": np.array([64.0, 4096.0])}
    scratch, insts, dram = scratch_traffic(d, f, g, lsz, per_cu)
    # 2 bytes per fp instruction x 100 FMAs per work-item = 200 bytes, 50 dword instructions
    assert list(scratch) == [200e6, 200e6] and list(insts) == [50.0, 50.0]
    # resident lanes: 2 x 256 x 4 units = 2,048; 64 B each is 128 KiB, within the 1 MiB L2; 4 KiB
    # each is 8 MiB, of which 7/8 miss it
    assert dram[0] == 0.0 and dram[1] == pytest.approx(200e6 * 7 / 8)


@needs_clang
def test_a_spilling_configuration_is_predicted_slower_and_says_why():
    rows = [{"source": ACC, "kernel_name": "acc", "language": "cuda", "build_options": f"-DTILE={t}",
             "gsize": [1 << 20], "lsize": [256],
             "args": [{"name": "out", "kind": "buffer", "dtype": "float", "count": (1 << 20) * t},
                      {"name": "in", "kind": "buffer", "dtype": "float", "count": 1 << 20}]} for t in (1, 16)]
    frame = pd.DataFrame(rows)
    with_compiler = AnalyticalModel(amd_profile()).predict(frame)
    without = AnalyticalModel(amd_profile(target="")).predict(frame)
    small, big = with_compiler.explanation
    assert small["compiled"]["spill_bytes"] == 0.0 and big["compiled"]["spill_bytes"] > 0
    assert big["compiled"]["vgprs"] <= 128
    assert "compiled" not in without.explanation[1]
    # the spills make the big tile slower than the source alone says, far more than the small one
    # (whose registers only lower its occupancy)
    assert with_compiler.time_us[1] > 1.3 * without.time_us[1]
    assert with_compiler.time_us[1] / without.time_us[1] > with_compiler.time_us[0] / without.time_us[0]


@needs_clang
def test_many_configurations_compile_in_parallel_once_each(tmp_path):
    items = [(ACC, "acc", f"-DTILE={t} -Dunused={u}", "cuda") for t in (1, 2, 3) for u in (0, 1)]
    # six rows, three distinct compiles (the unnamed macro does not count)
    assert amdgpu.compile_many(items, "gfx90a", tmp_path, workers=2) == 3
    assert len(list((tmp_path / "amdgpu").glob("*.json"))) == 3
    assert amdgpu.compile_many(items, "gfx90a", tmp_path, workers=2) == 0
    assert compile_cached(ACC, "acc", "gfx90a", "-DTILE=3", "cuda", tmp_path).vgprs > 0


def test_an_unroll_count_of_zero_leaves_the_loop_to_the_compiler_as_kernel_tuner_does():
    src = "a\n  #pragma unroll loop_unroll_factor_c\nb\n#pragma unroll 4\n#pragma unroll 0\n#pragma unroll k\n"
    out = amdgpu.drop_zero_unrolls(src, "-Dloop_unroll_factor_c=0 -Dk=2")
    assert out == "a\n\nb\n#pragma unroll 4\n\n#pragma unroll k\n"     # line numbers kept


@needs_clang
def test_predict_with_an_amd_profile_says_what_the_compiler_made_of_the_kernel(tmp_path):
    from tests.cli_run import run_here

    k = tmp_path / "acc.cu"
    k.write_text(ACC)
    common = ["predict", "--kernel", str(k), "--gsize", "65536", "--lsize", "256", "--profile", "w6600",
              "--model", "none", "--arg", "out=buffer:float:1048576", "--arg", "in=buffer:float:65536"]
    small = run_here(*common, "--build-options", "-DTILE=1")
    big = run_here(*common, "--build-options", "-DTILE=16")
    assert small.returncode == 0 and big.returncode == 0, small.stderr + big.stderr
    assert "no register spills" in small.stdout
    line = next(ln for ln in big.stdout.splitlines() if ln.startswith("compiled:"))
    assert "128 vector registers" in line and "MB of register spills" in line
    assert "warp instructions of global vector memory" in line


def test_both_spellings_of_a_define_reach_the_compiler():
    assert used_defines(ACC, "-D TILE=4 -DTILE2") == ["-DTILE=4"]
    assert amdgpu.drop_zero_unrolls("#pragma unroll u\n", "-D u=0") == "\n"


@needs_clang
def test_the_tabular_table_charges_the_compiled_registers_and_spills_as_predict_does(tmp_path):
    from kernelcast.models.tabular import build_table

    rows = [{"source": ACC, "kernel_name": "acc", "language": "cuda", "build_options": f"-DTILE={t}",
             "gsize": [1 << 20], "lsize": [256],
             "args": [{"name": "out", "kind": "buffer", "dtype": "float", "count": (1 << 20) * t},
                      {"name": "in", "kind": "buffer", "dtype": "float", "count": 1 << 20}]} for t in (1, 16)]
    frame = pd.DataFrame(rows)
    pred = AnalyticalModel(amd_profile()).predict(frame).time_us
    table = build_table(frame, amd_profile())
    without = build_table(frame, amd_profile(target=""))
    assert table["analytical_us"].to_numpy() == pytest.approx(pred, rel=1e-9)
    # the spilling tile is slower than the source alone says: the table saw the compiler's report
    assert table["analytical_us"].iloc[1] > 1.3 * without["analytical_us"].iloc[1]


@needs_clang
def test_the_per_lane_table_loads_of_an_unrolled_tile_loop_are_charged_to_the_load_store_path():
    n = 1 << 16
    rows = [{"source": ROWS, "kernel_name": "sweep", "language": "cuda", "build_options": f"-DTILE={t}",
             "gsize": [n // t], "lsize": [64],
             "args": [{"name": "out", "kind": "buffer", "dtype": "float", "count": n},
                      {"name": "in", "kind": "buffer", "dtype": "uchar", "count": 512 * n * 2},
                      {"name": "delay", "kind": "buffer", "dtype": "float", "count": 512},
                      {"name": "n", "kind": "scalar", "dtype": "int", "value": n},
                      {"name": "m", "kind": "scalar", "dtype": "int", "value": n}]} for t in (1, 4)]
    frame = pd.DataFrame(rows)
    with_compiler = AnalyticalModel(amd_profile(target="gfx90a")).predict(frame)
    without = AnalyticalModel(amd_profile(target="")).predict(frame)
    insts = [[e["warp_insts"]["global"] for e in p.explanation] for p in (with_compiler, without)]
    # the same rows and channels either way: the source counts as many load/store instructions for
    # one row per work-item as for four (a gather and a delay per channel and row); the compiled
    # code loads the delays of one row through the scalar unit, fewer instructions than the source's,
    # and those of the other rows per lane, more for four rows than for one
    assert insts[1][1] == pytest.approx(insts[1][0], rel=0.05)
    assert insts[0][0] < 0.75 * insts[1][0]
    assert insts[0][1] > 1.4 * insts[0][0]
    four = with_compiler.explanation[1]["compiled"]["vector_memory_insts"]
    assert four == pytest.approx(insts[0][1])

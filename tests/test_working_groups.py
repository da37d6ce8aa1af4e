"""The share of the work-groups in which some work-item does a kernel's work
(``models.static.groups``), on kernels of our own with known answers: an exact grid, 1-D and 2-D
tiles under an oversized grid, lower bounds, early exits, and work outside any guard."""

from __future__ import annotations

import math

import pytest
from kernelcast.models.static.source import analyze_source_text

PLAIN = """__kernel void plain(__global const float* a, __global float* b, int n) {
    int i = get_global_id(0);
    if (i < n) b[i] = 2.0f * a[i];
}"""
# four elements per work-item, a tile of 4 * lsize0 elements per work-group
TILED1 = """__kernel void tiled1(__global const float* a, __global float* b, int n) {
    int x = get_group_id(0) * get_local_size(0) * 4 + get_local_id(0);
    for (int t = 0; t < 4; t++) {
        int i = x + t * get_local_size(0);
        if (i < n) b[i] = 2.0f * a[i];
    }
}"""
# 8 x 4 work-items, each 2 x 3 elements: 16 columns and 12 rows per work-group
TILED2 = """__kernel void tiled2(__global const float* a, __global float* b, int w, int h) {
    int x = get_group_id(0) * 8 * 2 + get_local_id(0) * 2;
    int y = get_group_id(1) * 4 * 3 + get_local_id(1);
    for (int ty = 0; ty < 3; ty++) {
        for (int tx = 0; tx < 2; tx++) {
            int c = x + tx, r = y + ty * 4;
            if (c < w && r < h) b[r * w + c] = a[r * w + c] + 1.0f;
        }
    }
}"""
BAND = """__kernel void band(__global const float* a, __global float* b, int lo, int hi) {
    int i = get_global_id(0);
    if (i >= lo && i < hi) b[i] = a[i];
}"""
EXIT = """__kernel void early(__global const float* a, __global float* b, int n) {
    int i = get_global_id(0) * 4;
    if (i >= n) return;
    b[i] = a[i];
}"""
# every work-item runs the loop; only the store is guarded
LOOP_FIRST = """__kernel void loop_first(__global float* b, int n, int m) {
    int i = get_global_id(0);
    float s = 0.0f;
    for (int k = 0; k < m; k++) s += sin((float)k);
    if (i < n) b[i] = s;
}"""
# a guard on data tells nothing about the group ids
DATA = """__kernel void on_data(__global const float* a, __global float* b) {
    int i = get_global_id(0);
    if (a[i] > 0.0f) b[i] = a[i];
}"""


def shares(src: str, name: str, env: dict[str, float]) -> tuple[float, float, float]:
    f = analyze_source_text(src, name)
    v = f.evaluate(env)
    return v["group_share0"], v["group_share1"], v["group_share2"]


@pytest.mark.parametrize("n", [1024, 1000])
def test_a_guard_over_an_exact_grid_passes_in_every_work_group(n: int) -> None:
    gsize = math.ceil(n / 64) * 64
    assert shares(PLAIN, "plain", {"gsize0": gsize, "lsize0": 64, "n": n}) == (1.0, 1.0, 1.0)


def test_an_oversized_grid_of_a_1d_tiled_kernel() -> None:
    # 1,000 elements, 4 per work-item: ceil(1000 / 256) = 4 of the 16 work-groups of 64
    s0, s1, s2 = shares(TILED1, "tiled1", {"gsize0": 1024, "lsize0": 64, "n": 1000})
    assert s0 == pytest.approx(4 / 16) and s1 == s2 == 1.0


def test_an_oversized_grid_of_a_2d_tiled_kernel() -> None:
    # 80 x 40 elements over a grid of 80 x 40 work-items in 8 x 4 groups (10 x 10 groups):
    # ceil(80 / 16) = 5 columns and ceil(40 / 12) = 4 rows of groups work
    s = shares(TILED2, "tiled2", {"gsize0": 80, "lsize0": 8, "gsize1": 40, "lsize1": 4, "w": 80, "h": 40})
    assert s == pytest.approx((5 / 10, 4 / 10, 1.0))


def test_a_lower_and_an_upper_bound_leave_the_groups_between() -> None:
    # i in [100, 300) over 8 groups of 64: groups 1 (64..127) to 4 (256..319)
    s = shares(BAND, "band", {"gsize0": 512, "lsize0": 64, "lo": 100, "hi": 300})
    assert s[0] == pytest.approx(4 / 8)


def test_an_early_return_guards_the_rest_of_the_kernel() -> None:
    # i = 4 * gid < 1000: gid < 250, the first ceil(250 / 64) = 4 of 16 groups
    s = shares(EXIT, "early", {"gsize0": 1024, "lsize0": 64, "n": 1000})
    assert s[0] == pytest.approx(4 / 16)


def test_work_outside_any_guard_runs_in_every_work_group() -> None:
    assert shares(LOOP_FIRST, "loop_first", {"gsize0": 1024, "lsize0": 64, "n": 100, "m": 8})[0] == 1.0


def test_a_guard_on_loaded_data_tells_nothing() -> None:
    f = analyze_source_text(DATA, "on_data")
    assert f.group_share == ["1", "1", "1"]


# a CUDA kernel whose block sizes are the launch's own (a tuner's -Dblock_size_x=blockDim.x) and
# whose tiles are macros, launched over a grid of one thread per element
CUDA_TILED = """extern "C" __global__ void tiles(const float* in, float* out, int w, int h) {
    int x = blockIdx.x * block_size_x * tile_x + threadIdx.x;
    int y = blockIdx.y * block_size_y * tile_y + threadIdx.y * tile_y;
    for (int i = 0; i < tile_x; i++) {
        if (x + i * block_size_x < w) {
            for (int j = 0; j < tile_y; j++) {
                if (y + j < h) out[(y + j) * w + x + i * block_size_x] = in[(y + j) * w + x + i * block_size_x];
            }
        }
    }
}"""


def test_a_cuda_kernel_with_the_launchs_block_sizes() -> None:
    from kernelcast.models.static.batch import analyze_one

    opts = "-Dblock_size_x=blockDim.x -Dblock_size_y=blockDim.y -Dtile_x=2 -Dtile_y=4"
    f = analyze_one("test", CUDA_TILED, "tiles", "cuda", opts)
    assert not isinstance(f, str), f
    # 1000 x 500 elements, blocks of 32 x 8, a grid of ceil(1000 / 32) x ceil(500 / 8) = 32 x 63
    # blocks: ceil(1000 / 64) = 16 columns and ceil(500 / 32) = 16 rows of blocks work
    v = f.evaluate({"gsize0": 1024, "lsize0": 32, "gsize1": 504, "lsize1": 8, "w": 1000, "h": 500})
    assert (v["group_share0"], v["group_share1"], v["group_share2"]) == pytest.approx((16 / 32, 16 / 63, 1.0))

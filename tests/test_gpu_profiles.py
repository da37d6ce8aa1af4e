"""The spec-sheet GPU profiles: each loads through the profile loader, and its key figures equal
the published figures of the documents it cites (a table here, typed from the documents, so a
typo in a profile fails), each value labelled ``spec:`` or ``derived:`` (with its formula)."""

from __future__ import annotations

import re

import pytest
from kernelcast.calib.profile import DeviceProfile, bundled_profiles, load_profile, profiles_dir

GiB = 1 << 30
MiB = 1 << 20

#: profile -> value name -> (published or derived figure, a phrase its source must contain)
PUBLISHED: dict[str, dict[str, tuple[float, str]]] = {
    "a100-pcie": {"compute_units": (108, "A100 Tensor Core GPU Architecture whitepaper"),
                  "boost_clock_mhz": (1410, "whitepaper"),
                  "peak_fp32_gflops": (19500, "A100 Tensor Core GPU datasheet"),
                  "peak_fp64_gflops": (9700, "datasheet"), "dram_bw_gbs": (1555, "datasheet"),
                  "dram_bytes": (40 * GiB, "datasheet"), "l2_bytes": (40 * MiB, "whitepaper"),
                  "tdp_w": (250, "PB-10137-001"), "warp_size": (32, "compute capability 8.0"),
                  "max_warps_per_cu": (64, "Programming Guide"), "max_wg_per_cu": (32, "cuda_occupancy.h")},
    "rtx-a4000": {"compute_units": (48, "6144 CUDA cores"), "peak_fp32_gflops": (19200, "RTX A4000 datasheet"),
                  "dram_bw_gbs": (448, "RTX A4000 datasheet"), "dram_bytes": (16 * GiB, "datasheet"),
                  "tdp_w": (140, "RTX A4000 datasheet"), "boost_clock_mhz": (1560, "third-party"),
                  "max_warps_per_cu": (48, "compute capability 8.6"), "max_wg_per_cu": (16, "cuda_occupancy.h"),
                  "local_mem_per_cu_bytes": (102400, "Programming Guide")},
    "rtx-a6000": {"compute_units": (84, "10752 CUDA cores"), "peak_fp32_gflops": (38710, "third-party"),
                  "dram_bw_gbs": (768, "RTX A6000 specification"), "dram_bytes": (48 * GiB, "RTX A6000"),
                  "tdp_w": (300, "RTX A6000"), "l2_bytes": (6 * MiB, "third-party"),
                  "boost_clock_mhz": (1800, "third-party")},
    "rtx-2080ti": {"compute_units": (68, "Turing"), "boost_clock_mhz": (1545, "Turing"),
                   "peak_fp32_gflops": (13447.7, "4352 CUDA cores x 2 FLOP per FMA x 1545 MHz"),
                   "dram_bw_gbs": (616, "Turing"), "dram_bytes": (11 * GiB, "Turing"),
                   "max_warps_per_cu": (32, "compute capability 7.5"), "max_wg_per_cu": (16, "cuda_occupancy.h"),
                   "local_mem_per_cu_bytes": (65536, "compute capability 7.5")},
    "rtx-3090": {"compute_units": (82, "RTX 3090"), "boost_clock_mhz": (1695, "RTX 3090"),
                 "peak_fp32_gflops": (35600, "RTX 3090"), "dram_bw_gbs": (936, "RTX 3090"),
                 "dram_bytes": (24 * GiB, "RTX 3090"), "l2_bytes": (6 * MiB, "RTX 3090"), "tdp_w": (350, "RTX 3090")},
    "rtx4000-ada": {"compute_units": (48, "third-party"), "boost_clock_mhz": (2175, "third-party"),
                    "peak_fp32_gflops": (26726.4, "6144 CUDA cores x 2 FLOP per FMA x 2175 MHz"),
                    "dram_bytes": (20 * GiB, "RTX 4000 Ada Generation datasheet"),
                    "max_warps_per_cu": (48, "compute capability 8.9"), "max_wg_per_cu": (24, "cuda_occupancy.h")},
    "jetson-nano": {"compute_units": (1, "128 CUDA cores"), "boost_clock_mhz": (921, "Jetson Nano"),
                    "peak_fp32_gflops": (235.776, "128 CUDA cores x 2 FLOP per FMA x 921 MHz"),
                    "dram_bw_gbs": (25.6, "Jetson Nano"), "dram_bytes": (4 * GiB, "Jetson Nano"),
                    "tdp_w": (10, "Jetson Nano"), "max_warps_per_cu": (64, "compute capability 5.3"),
                    "max_wg_per_cu": (32, "cuda_occupancy.h"), "max_local_mem_per_wg_bytes": (49152, "5.3")},
    "jetson-tx1": {"compute_units": (2, "Jetson TX1"), "boost_clock_mhz": (1000, "Jetson TX1"),
                   "peak_fp32_gflops": (512, "Jetson TX1"), "peak_fp64_gflops": (16, "Jetson TX1"),
                   "dram_bw_gbs": (25.6, "Tegra X1"), "l2_bytes": (256 * 1024, "Jetson TX1"), "tdp_w": (15, "TX1")},
    "mi250x-gcd": {"compute_units": (110, "ROCm"), "warp_size": (64, "D92628"),
                   "local_mem_per_cu_bytes": (65536, "ROCm"), "l2_bytes": (8 * MiB, "ROCm"),
                   "boost_clock_mhz": (1700, "MI250X"), "peak_fp32_gflops": (23950, "47.9 TFLOPS FP32 vector"),
                   "peak_fp64_gflops": (23950, "47.9 TFLOPS FP64"), "dram_bw_gbs": (1600, "3.2 TB/s per module / 2"),
                   "dram_bytes": (64 * GiB, "128 GiB per module"), "tdp_w": (280, "560 W per module"),
                   "registers_per_cu": (131072, "512 KiB VGPR file")},
    "mi50": {"compute_units": (60, "ROCm"), "warp_size": (64, "ROCm"), "local_mem_per_cu_bytes": (65536, "ROCm"),
             "l2_bytes": (4 * MiB, "ROCm"), "boost_clock_mhz": (1746, "third-party"),
             "peak_fp32_gflops": (13409.3, "60 CUs x 64 lanes x 2 FLOP per FMA x 1746 MHz"),
             "peak_fp64_gflops": (6704.6, "1:2"), "dram_bw_gbs": (1024, "third-party"),
             "dram_bytes": (16 * GiB, "ROCm"), "tdp_w": (300, "third-party")},
    "w6600": {"compute_units": (28, "ROCm"), "warp_size": (32, "wave32"),
              "local_mem_per_cu_bytes": (65536, "128 KiB LDS per workgroup processor"),
              "l2_bytes": (2 * MiB, "ROCm"), "dram_bw_gbs": (224, "W6600"), "dram_bytes": (8 * GiB, "ROCm"),
              "tdp_w": (100, "W6600")},
    "w7800": {"compute_units": (70, "ROCm"), "warp_size": (32, "wave32"), "l2_bytes": (6 * MiB, "ROCm"),
              "local_mem_per_cu_bytes": (65536, "128 KiB LDS per workgroup processor"),
              "dram_bytes": (32 * GiB, "ROCm"), "tdp_w": (260, "W7800")},
}

#: formulas of derived figures, checked by computing them here
DERIVED = {
    ("rtx-2080ti", "peak_fp32_gflops"): 4352 * 2 * 1545 / 1000,
    ("rtx4000-ada", "peak_fp32_gflops"): 6144 * 2 * 2175 / 1000,
    ("jetson-nano", "peak_fp32_gflops"): 128 * 2 * 921 / 1000,
    ("mi50", "peak_fp32_gflops"): 60 * 64 * 2 * 1746 / 1000,
    ("mi50", "peak_fp64_gflops"): 60 * 64 * 2 * 1746 / 1000 / 2,
    ("mi250x-gcd", "peak_fp32_gflops"): 47900 / 2,
    ("mi250x-gcd", "dram_bw_gbs"): 3200 / 2,
    ("rtx-a4000", "compute_units"): 6144 / 128,
    ("rtx-a6000", "compute_units"): 10752 / 128,
    # 16 float <-> integer conversions per clock and SM (CUDA C++ Programming Guide throughput table)
    ("a100-pcie", "peak_conv_gops"): 16 * 108 * 1410 / 1000,
    ("rtx-a4000", "peak_conv_gops"): 16 * 48 * 1560 / 1000,
    ("rtx-a6000", "peak_conv_gops"): 16 * 84 * 1800 / 1000,
    ("rtx-2080ti", "peak_conv_gops"): 16 * 68 * 1545 / 1000,
    ("rtx-3090", "peak_conv_gops"): 16 * 82 * 1695 / 1000,
}


def test_every_spec_profile_is_bundled_and_checked():
    assert set(PUBLISHED) <= set(bundled_profiles())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_profile_matches_its_published_figures(name):
    prof = load_profile(name)
    assert isinstance(prof, DeviceProfile) and prof.kind == "published"
    assert prof.device.device_type == "GPU"
    for key, (want, phrase) in PUBLISHED[name].items():
        v = prof.values[key]
        assert v.value == pytest.approx(want, rel=1e-4), (name, key)
        assert phrase in v.source, (name, key, v.source)
    for key, v in prof.values.items():
        label = v.source.split(":", 1)[0]
        assert label in ("spec", "derived"), (name, key, v.source)
        if label == "spec":
            assert re.search(r"https?://", v.source) or "cuda_occupancy.h" in v.source, (name, key)
        else:
            assert re.search(r"[x/]", v.source), (name, key)     # a formula
    assert prof.device.compute_units == prof.values["compute_units"].value
    assert prof.device.wg_multiple == prof.values["warp_size"].value


@pytest.mark.parametrize("name,key", sorted(DERIVED))
def test_derived_figures_follow_their_formulas(name, key):
    assert load_profile(name).values[key].value == pytest.approx(DERIVED[(name, key)], rel=1e-4)


def test_amd_wavefronts_64_on_cdna_gcn_and_32_on_rdna():
    assert {n: load_profile(n).values["warp_size"].value for n in ("mi250x-gcd", "mi50", "w6600", "w7800")} == \
        {"mi250x-gcd": 64, "mi50": 64, "w6600": 32, "w7800": 32}


def test_profiles_are_files_of_the_bundle():
    for name in PUBLISHED:
        assert (profiles_dir() / f"{name}.json").is_file()

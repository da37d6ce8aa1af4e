"""Energy constants of the bundled GPU profiles: every value cited with the GPU it was measured on,
transferred ones marked, and the energy predict/tune give with them (bounds computed by hand)."""

from __future__ import annotations

import json

import pytest
from kernelcast.calib.profile import DeviceProfile, ProfileError, ProfileValue, load_profile

from tests.cli_run import run_here as kc

ENERGY = ("idle_power_w", "energy_per_access_dram_pj", "energy_per_access_local_pj", "energy_per_op_fp32_fma_pj",
          "energy_per_op_fp64_fma_pj")


def test_a100_constants_are_delestrac_measurements_on_an_a100():
    p = load_profile("a100")
    assert p.get("idle_power_w") == 80 and p.get("energy_per_access_dram_pj") == 2090
    assert p.get("energy_per_access_local_pj") == 82.1          # = the shared-memory sector energy
    for k in ("idle_power_w", "energy_per_access_dram_pj", "energy_per_access_local_pj"):
        e = p.entry(k)
        assert e is not None and "Delestrac" in e.source and "A100" in e.measured_on and not e.transferred
    assert p.transferred_values() == []


@pytest.mark.parametrize("name,tdp,fp32,fp64,idle_transferred", [
    ("a100", 400, 19500, 9700, False), ("v100", 300, 15700, 7800, True), ("h100", 700, 67000, 34000, True)])
def test_derived_fma_energy_is_the_tdp_bound(name, tdp, fp32, fp64, idle_transferred):
    p = load_profile(name)
    # (TDP - idle) / FMA rate, computed here by hand from the datasheet numbers: e.g. A100 320 W / 9.75e12 = 32.8 pJ
    assert p.get("energy_per_op_fp32_fma_pj") == pytest.approx((tdp - 80) / (fp32 / 2 * 1e9) * 1e12, abs=0.05)
    assert p.get("energy_per_op_fp64_fma_pj") == pytest.approx((tdp - 80) / (fp64 / 2 * 1e9) * 1e12, abs=0.05)
    e = p.entry("energy_per_op_fp32_fma_pj")
    assert e is not None and e.source.startswith("derived, not measured") and e.transferred is idle_transferred


@pytest.mark.parametrize("name", ["v100", "h100"])
def test_transferred_constants_are_marked(name):
    p = load_profile(name)
    assert set(p.transferred_values()) == set(ENERGY)
    for k in ("idle_power_w", "energy_per_access_dram_pj"):
        e = p.entry(k)
        assert e is not None and "A100" in e.measured_on and e.transferred


def test_rtx4090_has_no_energy():
    p = load_profile("rtx4090")
    assert not p.has_energy and any(n.startswith("energy: none") for n in p.notes)


def test_every_energy_value_names_its_source_and_gpu():
    for name in ("v100", "a100", "h100"):
        p = load_profile(name)
        for k, v in p.values.items():
            if k.startswith(("energy_", "idle_power")):
                assert v.source and (v.measured_on or v.source.startswith("derived")), (name, k)


def test_value_provenance_round_trip_and_validation():
    v = ProfileValue(2090, "pJ", "x", measured_on="NVIDIA A100", transferred=True)
    assert ProfileValue.from_dict(v.to_dict()) == v
    assert "transferred" not in ProfileValue(1, "W", "y").to_dict()        # measured profiles are unchanged
    with pytest.raises(ProfileError, match="non-boolean 'transferred'"):
        ProfileValue.from_dict({"value": 1, "units": "W", "source": "s", "transferred": "yes"}, "idle_power_w")
    p = load_profile("v100")
    assert DeviceProfile.from_dict(json.loads(p.to_json())).transferred_values() == p.transferred_values()


SRC = """__kernel void axpy(__global const float* x, __global float* y, const float a, const int n) {
  int i = get_global_id(0); if (i < n) y[i] = a * x[i] + y[i]; }"""



def test_predict_energy_on_a100_is_within_physical_bounds(tmp_path):
    k = tmp_path / "axpy.cl"
    k.write_text(SRC)
    r = kc("predict", "--kernel", str(k), "--gsize", "1048576", "--lsize", "256", "--profile", "a100", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)["predictions"][0]
    t_s, e = p["analytical"]["time_us"] * 1e-6, p["analytical"]["energy_j"]
    # at least the idle power over the run plus 12 B x 2^20 items in 32 B DRAM sectors at 2090 pJ each,
    # at most the TDP over the run plus the same data movement
    dram_j = 12 * (1 << 20) / 32 * 2090e-12
    assert 80 * t_s + dram_j <= e * (1 + 1e-9)
    assert e <= 400 * t_s + dram_j
    r = kc("predict", "--kernel", str(k), "--gsize", "1048576", "--lsize", "256", "--profile", "h100")
    assert r.returncode == 0 and "transferred: idle_power_w" in r.stdout
    # a GPU profile with a TDP but no energy values: constants derived from the TDP, said so
    r = kc("predict", "--kernel", str(k), "--gsize", "1048576", "--lsize", "256", "--profile", "rtx4090")
    assert r.returncode == 0 and "derived from the profile's TDP" in r.stdout


def test_tune_pareto_uses_energy_on_a100(tmp_path):
    k = tmp_path / "axpy.cl"
    k.write_text(SRC)
    r = kc("tune", "--kernel", str(k), "--gsize", "4194304", "--profile", "a100", "--power-caps", "100:250:25",
           "--objective", "pareto", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    chosen = d["chosen"]
    assert chosen and all(c["pred_energy_j"] is not None and c["pred_energy_j"] > 0 for c in chosen)
    # a Pareto set: ordered by time, energy strictly falls
    t = [c["pred_us"] for c in chosen]
    en = [c["pred_energy_j"] for c in chosen]
    assert t == sorted(t) and all(a > b for a, b in zip(en, en[1:]))

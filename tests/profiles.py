"""Hand-made device profiles for tests that predict known answers."""

from __future__ import annotations

from kernelcast.calib.profile import DeviceIdentity, DeviceProfile, ProfileValue


def cpu_profile(**values: float) -> DeviceProfile:
    """A hand-made profile of a 2-compute-unit CPU device: a 100 Gop/s fp32 FMA peak, 20 GB/s, and
    ``values`` (profile value name -> value)."""
    dev = DeviceIdentity(name="cpu", vendor="x", device_type="CPU", platform="PoCL", compute_units=2)
    p = DeviceProfile(device=dev)
    for k, v in {"peak_fp32_fma_gops": 100.0, "dram_bw_gbs": 20.0, **values}.items():
        p.values[k] = ProfileValue(v, "x", "test")
    return p

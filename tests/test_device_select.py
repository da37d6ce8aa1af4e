"""Which device ``auto`` picks: a GPU before a CPU, a device that builds before one that does not,
and one whose compiler also runs the vector math builtins before one whose compiler aborts on them
(PoCL 3.0's LLVM 14 on an AVX-512 host), with the second probe run for real on every device here."""

from __future__ import annotations

import dataclasses

import pytest
from kernelcast.instrument.backends import DeviceNotFound, list_devices
from kernelcast.instrument.backends.base import DeviceInfo, choose_device
from kernelcast.instrument.backends.opencl import _vector_probe


def _dev(i: int, kind: str, builds: bool | None = True, vector: bool | None = True) -> DeviceInfo:
    return DeviceInfo(
        platform_index=i, device_index=0, platform_name=f"P{i}", platform_version="OpenCL 3.0", name=f"D{i}",
        vendor="V", type=kind, driver_version="1", device_version="OpenCL 3.0", compute_units=2,
        max_work_group_size=1024, max_work_item_sizes=[1024, 1024, 1024], preferred_wg_multiple=8,
        global_mem_bytes=1 << 30, max_alloc_bytes=1 << 28, local_mem_bytes=1 << 16, max_constant_bytes=1 << 16,
        max_clock_mhz=1000, mem_base_align_bytes=128, builds=builds, vector_builtins=vector,
        vector_error="" if vector is not False else "the compiler crashed (SIGABRT)",
    )


@pytest.mark.parametrize("devices,picked", [
    ([_dev(0, "CPU", vector=False), _dev(1, "CPU")], "1:0"),            # the one whose compiler runs them all
    ([_dev(0, "CPU", vector=False)], "0:0"),                             # else the one that builds
    ([_dev(0, "CPU", vector=None), _dev(1, "CPU")], "0:0"),              # not probed yet: not held against it
    ([_dev(0, "CPU"), _dev(1, "GPU", vector=False)], "1:0"),             # a GPU first, whatever its builtins
    ([_dev(0, "GPU", builds=False), _dev(1, "CPU", vector=False), _dev(2, "CPU", builds=False)], "1:0"),
])
def test_auto_prefers_a_device_whose_compiler_runs_every_builtin(devices, picked):
    assert choose_device(devices, "auto").spec == picked


def test_a_named_device_is_taken_even_without_vector_builtins():
    devs = [_dev(0, "CPU"), _dev(1, "CPU", vector=False)]
    assert choose_device(devs, "1:0").spec == "1:0"
    assert choose_device(devs, "D1").spec == "1:0"
    with pytest.raises(DeviceNotFound, match="can build a kernel"):
        choose_device([dataclasses.replace(d, builds=False) for d in devs], "auto")


def test_vector_probe_on_every_device_here():
    """The second probe runs in a child process on each OpenCL device of this machine: it answers
    for every device (a compiler that aborts is a 'no' with the signal, not a crash of the caller),
    and what ``list_devices`` caches is what it answers."""
    devs = [d for d in list_devices() if d.backend == "opencl" and d.builds]
    assert devs, "no OpenCL device builds a kernel"
    for d in devs:
        ok, why = _vector_probe(d.platform_index, d.device_index)
        assert ok is d.vector_builtins, (d.name, why)
        assert ok == (why == ""), why
        if not ok:
            assert "float16/double8" in why and "\n" not in why


def test_vector_probe_of_a_device_that_is_not_there():
    ok, why = _vector_probe(99, 0)
    assert ok is False and "do not build" in why

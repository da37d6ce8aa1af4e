"""Will the buffers of a launch fit, counting every copy the host holds?

The OpenCL driver's limits (``CL_DEVICE_MAX_MEM_ALLOC_SIZE``, ``CL_DEVICE_GLOBAL_MEM_SIZE``) are
not enough: on a CPU device they follow free RAM and ignore that the host holds the initial
contents, the guarded image handed to the driver and (on a CPU device) the buffer itself, so three
4 GB buffers pass the driver's checks on a 24 GB machine and then exhaust it. This check runs
before anything is allocated: each buffer against the device's maximum allocation, the total
against the device's global memory, and the total times the host copies against the memory the
host has available now (``MemAvailable`` of ``/proc/meminfo``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kernelcast.instrument.device import ConfigError, DeviceInfo

from kernelcast.cltypes import parse_type
from kernelcast.schema import ArgBinding

#: copies of each buffer the host holds while it is bound: initial contents and guarded image,
#: plus the buffer itself when the device's memory is the host's (CPU devices)
HOST_COPIES_CPU = 3
HOST_COPIES_GPU = 2
#: guard region bytes per side (as :meth:`Backend.bind` uses, rounded up)
GUARD_BYTES = 4096
#: share of the available host memory a launch may take
HOST_SHARE = 0.8
#: in the reason of a configuration refused for the host's memory *now* (it may fit later)
HOST_MEMORY_REASON = "the host's available memory"


def host_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where there is no such file)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def check_buffer_memory(info: DeviceInfo, bindings: Sequence[ArgBinding], host_available: int | None = None) -> int:
    """Raise :class:`ConfigError` when the buffers of ``bindings`` cannot be allocated safely;
    returns their total bytes (guards included). ``host_available``: bytes, default read now."""
    total = 0
    for b in bindings:
        if b.kind != "buffer":
            continue
        try:
            itemsize = parse_type(b.dtype).itemsize
        except ValueError:
            continue
        nbytes = int(b.count or 0) * itemsize
        if nbytes > info.max_alloc_bytes:
            raise ConfigError(f"argument {b.name!r}: {_human(nbytes)} exceeds the device's maximum allocation "
                              f"{_human(info.max_alloc_bytes)}")
        total += nbytes + 2 * GUARD_BYTES
    if total == 0:
        return 0
    if total > info.global_mem_bytes:
        raise ConfigError(f"buffers need {_human(total)}, the device has {_human(info.global_mem_bytes)} of "
                          f"global memory")
    avail = host_available_bytes() if host_available is None else host_available
    copies = HOST_COPIES_CPU if str(info.type).upper() == "CPU" else HOST_COPIES_GPU
    if avail is not None and total * copies > avail * HOST_SHARE:
        raise ConfigError(f"buffers need {_human(total)}, {copies} host copies of which ({_human(total * copies)}) "
                          f"exceed {HOST_SHARE:.0%} of {HOST_MEMORY_REASON} ({_human(avail)})")
    return total

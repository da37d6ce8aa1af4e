"""The device record every backend fills (:class:`DeviceInfo`), device selection by spec
(:func:`choose_device`) and the errors a backend raises. Independent of any compute API and of
the backends, which import it (:mod:`instrument.backends.base` re-exports these names)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kernelcast.errors import InputError, KernelcastError


class DeviceNotFound(InputError, LookupError):
    """No device matches the given spec."""


class ConfigError(InputError, ValueError):
    """A launch configuration that cannot run on this device (status ``invalid_config``)."""


class BackendError(KernelcastError, RuntimeError):
    """The driver reported an error (allocation, argument, launch, copy); ``str()`` is the
    driver's message."""


@dataclass
class DeviceInfo:
    """What the harness and the models need to know about one compute device, in the words of
    no particular API: a work-group is a CUDA thread block, local memory is CUDA shared memory,
    a compute unit is a streaming multiprocessor. ``backend`` names the API that reaches it
    (``opencl``, ``cuda``); for an API without platforms (CUDA) ``platform_index`` is 0 and
    ``platform_name``/``platform_version`` name the API and its driver."""

    platform_index: int
    device_index: int
    platform_name: str
    platform_version: str
    name: str
    vendor: str
    type: str                       # "GPU", "CPU", "ACCELERATOR", ...
    driver_version: str
    device_version: str             # OpenCL version string; CUDA: compute capability "sm_80"
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: list[int]
    preferred_wg_multiple: int | None   # warp / wavefront width; from a probe build or the API
    global_mem_bytes: int
    max_alloc_bytes: int
    local_mem_bytes: int            # per work-group (block)
    max_constant_bytes: int
    max_clock_mhz: int
    mem_base_align_bytes: int
    pci_bus_id: str | None = None
    builds: bool | None = None          # did a trivial kernel build on it
    build_error: str = ""
    vector_builtins: bool | None = None  # did math builtins on float16 / double8 build (a second probe)
    vector_error: str = ""
    meter: str = "none"                 # energy meter --meter auto would pick
    backend: str = "opencl"             # the API that runs kernels on it

    @property
    def spec(self) -> str:
        """``P:D`` for OpenCL (platform, device), ``NAME:D`` for other APIs (``cuda:0``)."""
        if self.backend != "opencl":
            return f"{self.backend}:{self.device_index}"
        return f"{self.platform_index}:{self.device_index}"

    @property
    def identity(self) -> str:
        """A string identifying device + driver, for cache keys and dataset manifests."""
        return f"{self.platform_version}|{self.name}|{self.driver_version}|{self.device_version}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DeviceInfo:
        """Inverse of :meth:`to_dict` (the derived ``spec`` is dropped)."""
        return cls(**{k: v for k, v in d.items() if k != "spec"})


def choose_device(devices: Sequence[DeviceInfo], spec: str = "auto", *, what: str = "compute",
                  hint: str = "") -> DeviceInfo:
    """Pick a device of ``devices`` by spec; :class:`DeviceNotFound` when none fits.

    ``auto``: the first GPU that builds, else the first device that builds; among those, one
    whose compiler also builds the vector math builtins is preferred. ``P:D``: platform P,
    device D. Anything else: the first device whose name or platform name contains it
    (case-insensitive). ``what`` names the kind of device in messages ("OpenCL"), ``hint`` is
    appended when there is no device at all."""
    if not devices:
        raise DeviceNotFound(f"no {what} device found{f' ({hint})' if hint else ''}")
    api, _, num = spec.partition(":")
    if num.isdigit() and not api.isdigit():     # "cuda:0"
        for d in devices:
            if d.backend == api.lower() and d.device_index == int(num):
                return d
        have = ", ".join(d.spec for d in devices)
        raise DeviceNotFound(f"no {api} device {num} (have {have}{f'; {hint}' if hint else ''})")
    if spec in ("", "auto"):
        for want_gpu in (True, False):
            for need_vector in (True, False):
                for d in devices:
                    if (("GPU" in d.type) == want_gpu and d.builds is not False
                            and (d.vector_builtins is not False or not need_vector)):
                        return d
        errs = "; ".join(f"{d.spec} {d.name}: {d.build_error}" for d in devices)
        raise DeviceNotFound(f"no {what} device can build a kernel ({errs})")
    if ":" in spec and all(p.isdigit() for p in spec.split(":", 1)):
        pi, di = (int(p) for p in spec.split(":", 1))
        for d in devices:
            if d.platform_index == pi and d.device_index == di:
                return d
        raise DeviceNotFound(f"no {what} device {spec} (have {', '.join(d.spec for d in devices)})")
    s = spec.lower()
    for d in devices:
        if s in d.name.lower() or s in d.platform_name.lower() or s in d.platform_version.lower():
            return d
    raise DeviceNotFound(f"no {what} device matches {spec!r} (have {', '.join(d.name for d in devices)})")

"""Compute backends the harness runs kernels on, behind one interface (:class:`base.Backend`).

OpenCL (:mod:`instrument.backends.opencl`, pyopencl) and CUDA (:mod:`instrument.backends.cuda`,
pycuda, the optional extra ``kernelcast[cuda]``). Another API is one more module with a
:class:`~instrument.backends.base.Backend` subclass, added to :data:`BACKENDS`; each owns the
devices it listed (``DeviceInfo.backend``) and builds the kernel languages it names.

Device discovery and selection go through this package, not through a backend module:
:func:`list_devices`, :func:`select_device`; :func:`backend_for` gives the backend class of a
device, :func:`get_backend` the one of a name.
"""

from __future__ import annotations

from kernelcast.instrument.backends.base import (
    Backend,
    BackendError,
    ConfigError,
    DeviceInfo,
    DeviceNotFound,
    choose_device,
)
from kernelcast.instrument.backends.cuda import CudaBackend
from kernelcast.instrument.backends.opencl import OpenCLBackend

from kernelcast.errors import InputError

__all__ = [
    "BACKENDS",
    "Backend",
    "BackendError",
    "ConfigError",
    "DeviceInfo",
    "DeviceNotFound",
    "backend_for",
    "get_backend",
    "list_devices",
    "select_device",
]

#: every backend by name, in the order they claim devices
BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (CudaBackend, OpenCLBackend)}


def get_backend(name: str) -> type[Backend]:
    """The backend class called ``name`` (``"opencl"``, ``"cuda"``)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise InputError(f"unknown backend {name!r} ({', '.join(BACKENDS)})") from None


def backend_for(device: DeviceInfo) -> type[Backend]:
    """The backend class that runs kernels on ``device``; open it with ``backend_for(d)(d)``."""
    for b in BACKENDS.values():
        if b.owns(device):
            return b
    raise DeviceNotFound(f"no backend runs {device.name} ({device.spec})")


def list_devices(probe: bool = True) -> list[DeviceInfo]:
    """Every device of every backend (see :meth:`Backend.list_devices`)."""
    return [d for b in BACKENDS.values() for d in b.list_devices(probe)]


def select_device(spec: str = "auto", devices: list[DeviceInfo] | None = None, *,
                  language: str = "opencl") -> DeviceInfo:
    """Pick a device that runs ``language`` kernels by spec (of ``devices``, default every
    device; see :func:`~instrument.backends.base.choose_device`): ``auto`` is the first GPU that
    builds, else the first device that builds; ``P:D`` OpenCL platform P, device D; ``cuda:N``
    CUDA device N; anything else a part of the device's or platform's name.
    :class:`DeviceNotFound` when none fits."""
    backends = [b for b in BACKENDS.values() if language in b.languages]
    if not backends:
        raise InputError(f"no backend runs {language} kernels ({', '.join(BACKENDS)})")
    api = spec.partition(":")[0].lower()
    if api in BACKENDS and BACKENDS[api] not in backends:
        raise DeviceNotFound(f"device {spec} runs {', '.join(BACKENDS[api].languages)} kernels, not {language} "
                             f"(--device must name one of: {', '.join(b.label for b in backends)})")
    if devices is not None:
        devs = devices
    else:
        devs = [d for b in backends for d in b.list_devices()]
    devs = [d for d in devs if any(b.owns(d) for b in backends)]
    what = " or ".join(b.label for b in backends)
    hint = "; ".join(b.install_hint for b in backends if b.install_hint)
    return choose_device(devs, spec, what=what, hint=hint)

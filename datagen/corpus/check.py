"""Stage 7 of corpus ingest on an OpenCL device: a compile function building each kernel alone.

The builds go through :func:`instrument.backends.opencl.trial_build`, the project's one compile
check; nothing here touches pyopencl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernelcast.instrument.backends import DeviceNotFound, select_device
from kernelcast.instrument.backends.opencl import trial_build

from kernelcast.schema import Kernel

if TYPE_CHECKING:
    from kernelcast.instrument.backends import DeviceInfo

#: a compile check: ``(ok, build log)`` of one kernel
CompileFn = Callable[[Kernel], tuple[bool, str]]

CL_STD_OPTION = "-cl-std=CL1.2"


def opencl_compile_fn(device: DeviceInfo | None = None) -> CompileFn:
    """A compile check building each kernel with ``-cl-std=CL1.2`` plus its build options on an
    OpenCL device (default: the one :func:`instrument.backends.select_device` picks, the
    first GPU that builds a trivial kernel, else the first device that does). Returns
    ``(ok, build log)``; a program without the kernel of that name does not pass.

    Raise :class:`RuntimeError` when no device is given and none builds.
    """
    if device is None:
        try:
            device = select_device("auto")
        except DeviceNotFound as e:
            raise RuntimeError(str(e)) from None
    dev: DeviceInfo = device

    def compile_kernel(kernel: Kernel) -> tuple[bool, str]:
        if kernel.language != "opencl":
            return False, f"not an OpenCL kernel (language={kernel.language})"
        options = " ".join(o for o in (CL_STD_OPTION, kernel.build_options) if o)
        tb = trial_build(dev, kernel.source, options, kernel_name=kernel.name)
        return tb.ok, tb.log

    return compile_kernel

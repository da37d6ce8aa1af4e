"""Static features of CUDA kernels: source features through the C++ for OpenCL translation of
:mod:`kernelcast.cuda`, PTX from ``nvcc -ptx`` (template kernels instantiated), ptxas resources.

The source walker of :mod:`models.static.source` counts the translation, so a CUDA kernel and its
OpenCL C twin get the same vocabulary: ``threadIdx.x + blockIdx.x * blockDim.x`` has the lane
stride of ``get_global_id(0)``, ``__shared__`` arrays are local memory, ``__syncthreads()`` is a
barrier, ``atomicAdd`` a global or local atomic. Line numbers (branches, loops, accesses) are
those of the CUDA file. Warp shuffles are calls the walker notes as not classified (as it does
for ``sub_group_shuffle*`` in OpenCL C); the PTX features count them (``shfl`` instructions).

For PTX, a template kernel is instantiated by appending a host-side reference to
``name<args>`` to the source (``nvcc`` emits only instantiated templates), and the entry is
found by :func:`kernelcast.cuda.ptx_entry_name`.
"""

from __future__ import annotations

import logging

from kernelcast.models.static import ptx as ptxmod
from kernelcast.models.static.features import SourceFeatures

from kernelcast.cuda import instantiation, ptx_entry_name, translate
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)


def analyze_cuda_source(kernel: Kernel, filename: str = "kernel.cu") -> SourceFeatures:
    """Per-thread source features of a CUDA kernel (``kernel.name`` may carry template arguments).

    Raises :class:`kernelcast.clang.ParseError` when the source does not parse and
    ``ValueError`` when the kernel is not in it.
    """
    from kernelcast.models.static.source import analyze_source

    tr = translate(kernel.source, kernel.name, kernel.build_options, filename)
    feats = analyze_source(Kernel(source=tr.source, name=tr.kernel_name, language="opencl",
                                  build_options=tr.build_options), filename="kernel_cuda.clcpp")
    shift = tr.prelude_lines
    for seq in (feats.accesses, feats.loops, feats.branches):
        for x in seq:
            if getattr(x, "line", 0) > shift:
                x.line = x.line - shift
    feats.kernel_name = kernel.name
    feats.notes = [*tr.notes, *feats.notes]
    return feats


def nvcc_options(build_options: str) -> list[str]:
    """The ``-D``/``-I`` options of a build-option string, for nvcc."""
    from kernelcast.clang import build_option_defines

    return build_option_defines(build_options)


def kernel_ptx(kernel: Kernel, arch: str | None = None) -> str | None:
    """PTX of a CUDA kernel's source with its defines (and its template instantiated), or None."""
    return ptxmod.cuda_to_ptx(kernel.source + instantiation(kernel.name), arch, nvcc_options(kernel.build_options))


entry_name = ptx_entry_name


__all__ = ["analyze_cuda_source", "entry_name", "kernel_ptx", "nvcc_options"]

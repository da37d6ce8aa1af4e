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
from kernelcast.models.static.source import analyze_cuda_source

from kernelcast.clang import ParseError
from kernelcast.cuda import instantiation, preprocess_cuda, ptx_entry_name
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)


def nvcc_options(build_options: str) -> list[str]:
    """The ``-D``/``-I`` options of a build-option string, for nvcc."""
    from kernelcast.clang import build_option_defines

    return build_option_defines(build_options)


def kernel_ptx(kernel: Kernel, arch: str | None = None) -> str | None:
    """PTX of a CUDA kernel's source with its defines (and its template instantiated), or None.

    nvcc compiles the preprocessed source (:func:`kernelcast.cuda.preprocess_cuda`: includes
    resolved through the ``-I`` options, HIP spellings mapped, ``#pragma unroll 0`` dropped)."""
    try:
        text = preprocess_cuda(kernel.source, kernel.build_options)
    except ParseError:
        return None
    return ptxmod.cuda_to_ptx(text + instantiation(kernel.name), arch, nvcc_options(kernel.build_options))


entry_name = ptx_entry_name


__all__ = ["analyze_cuda_source", "entry_name", "kernel_ptx", "nvcc_options"]

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
found by demangling the ``.entry`` names (``c++filt``; with one instantiation of the name the
mangled prefix suffices).
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import subprocess

from kernelcast.cuda import split_name, translate
from kernelcast.schema import Kernel
from models.static import ptx as ptxmod
from models.static.features import SourceFeatures

log = logging.getLogger(__name__)


def analyze_cuda_source(kernel: Kernel, filename: str = "kernel.cu") -> SourceFeatures:
    """Per-thread source features of a CUDA kernel (``kernel.name`` may carry template arguments).

    Raises :class:`kernelcast.clang.ParseError` when the source does not parse and
    ``ValueError`` when the kernel is not in it.
    """
    from models.static.source import analyze_source

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


def _instantiation(kernel: Kernel) -> str:
    base, targs = split_name(kernel.name)
    if not targs:
        return ""
    return f"\nstatic void* __kernelcast_instance_ = (void*)&{base}<{', '.join(targs)}>;\n"


def nvcc_options(build_options: str) -> list[str]:
    """The ``-D``/``-I`` options of a build-option string, for nvcc."""
    from kernelcast.clang import build_option_defines

    return build_option_defines(build_options)


def kernel_ptx(kernel: Kernel, arch: str | None = None) -> str | None:
    """PTX of a CUDA kernel's source with its defines (and its template instantiated), or None."""
    return ptxmod.cuda_to_ptx(kernel.source + _instantiation(kernel), arch, nvcc_options(kernel.build_options))


def nvcc_error(kernel: Kernel, arch: str | None = None) -> str | None:
    """The first error line of ``nvcc -ptx`` on the kernel's source, or None when it compiles (or
    no nvcc is installed)."""
    nvcc = ptxmod.find_nvcc()
    if nvcc is None or kernel_ptx(kernel, arch) is not None:
        return None
    import os
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kc_nvcc_") as td:
        src = os.path.join(td, "kernel.cu")
        with open(src, "w") as f:
            f.write(kernel.source + _instantiation(kernel))
        r = subprocess.run([nvcc, "-ptx", f"-arch={ptxmod.resolve_arch(arch)}", *nvcc_options(kernel.build_options),
                            src, "-o", os.path.join(td, "k.ptx")], capture_output=True, text=True,
                           timeout=ptxmod.TOOL_TIMEOUT_S, check=False, cwd=td)
    lines = [x.strip() for x in (r.stderr + r.stdout).splitlines() if "error" in x]
    return (lines[0] if lines else "nvcc failed").replace(src, "kernel.cu")


@functools.lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt") or shutil.which("cu++filt")


def _demangle(names: list[str]) -> list[str]:
    tool = _cxxfilt()
    if tool is None or not names:
        return names
    try:
        r = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return names
    out = r.stdout.splitlines()
    return out if len(out) == len(names) else names


def entry_name(ptx: str, name: str) -> str | None:
    """The ``.entry`` of ``ptx`` that is kernel ``name`` (``reduce<float, 256>`` or ``vadd``)."""
    base, targs = split_name(name)
    entries = ptxmod.ptx_entries(ptx)
    if base in entries:
        return base
    cands = [e for e in entries if ptxmod.demangle_builtin(e) == base]
    if len(cands) <= 1:
        return cands[0] if cands else None
    want = re.sub(r"\s+", "", f"{base}<{', '.join(targs)}>" if targs else base)
    for e, d in zip(cands, _demangle(cands)):
        dd = re.sub(r"\s+", "", d)
        if dd.startswith(("void" + want + "(", want + "(")) or re.sub(r"^void", "", dd).split("(")[0] == want:
            return e
    return None


__all__ = ["analyze_cuda_source", "entry_name", "kernel_ptx", "nvcc_error", "nvcc_options"]

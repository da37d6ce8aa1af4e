"""One call for all static features of a kernel: :func:`extract`."""

from __future__ import annotations

import logging
import time

from kernelcast.models.static import cuda as cudamod
from kernelcast.models.static import ptx as ptxmod
from kernelcast.models.static.features import StaticFeatures
from kernelcast.models.static.source import analyze_source

from kernelcast.clang import ParseError
from kernelcast.schema import Kernel

log = logging.getLogger(__name__)


def extract(kernel: Kernel, *, ptx: bool = True, arch: str | None = None,
            resources: bool = True) -> StaticFeatures:
    """Source features (OpenCL C; CUDA through its translation) plus, where a toolchain exists, PTX
    features and ptxas resources.

    Never raises for a bad kernel: failures go to ``StaticFeatures.errors``. ``arch`` is the PTX
    target (``sm_75``...; default: clang's default for OpenCL, nvcc's lowest for CUDA);
    ``resources`` runs ``ptxas -v`` once per source (cached per PTX text).
    """
    out = StaticFeatures(kernel_id=kernel.id, kernel_name=kernel.name, language=kernel.language)
    t0 = time.perf_counter()
    is_cl = kernel.language in ("opencl", "cl", "opencl-c")
    if is_cl or kernel.language == "cuda":
        try:
            out.source = analyze_source(kernel)
        except (ParseError, ValueError) as e:
            out.errors.append(f"source: {e}")
        except Exception as e:  # noqa: BLE001 - one odd kernel must not stop a corpus run
            log.warning("source analysis of %s failed: %r", kernel.name, e)
            out.errors.append(f"source: internal error {type(e).__name__}: {e}")
    else:
        out.errors.append(f"source: analysis handles OpenCL C only (language {kernel.language!r})")
    t1 = time.perf_counter()
    out.seconds["source"] = t1 - t0
    if not ptx:
        return out
    text = None
    if is_cl:
        text = ptxmod.opencl_to_ptx(kernel, arch)
        if ptxmod.find_clang() is None:
            out.errors.append("ptx: no clang with the NVPTX back-end")
        elif text is None:
            out.errors.append("ptx: clang could not compile the source to PTX")
        else:
            out.toolchain["ptx"] = ptxmod.tool_versions().get("clang", ptxmod.find_clang() or "")
    elif kernel.language == "cuda":
        text = cudamod.kernel_ptx(kernel, arch)
        if ptxmod.find_nvcc() is None:
            out.errors.append("ptx: nvcc not found")
        elif text is None:
            out.errors.append("ptx: nvcc could not compile the source")
        else:
            out.toolchain["ptx"] = ptxmod.tool_versions().get("nvcc", ptxmod.find_nvcc() or "")
            out.toolchain["arch"] = ptxmod.resolve_arch(arch)
    t2 = time.perf_counter()
    out.seconds["compile"] = t2 - t1
    if text is not None:
        try:
            entry = cudamod.entry_name(text, kernel.name) if kernel.language == "cuda" else kernel.name
            out.ptx = ptxmod.parse_ptx(text, entry or kernel.name)
        except ValueError as e:
            out.errors.append(f"ptx: {e}")
        if resources and out.ptx is not None:
            res = ptxmod.ptxas_resources(text, arch)
            r = res.get(out.ptx.kernel_name)
            if r is not None:
                out.resources = r
                out.toolchain["ptxas"] = ptxmod.tool_versions().get("ptxas", ptxmod.find_ptxas() or "")
    out.seconds["ptx"] = time.perf_counter() - t2
    return out

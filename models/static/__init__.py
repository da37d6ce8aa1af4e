"""Static features of kernels: symbolic per-work-item counts from the source (libclang) and
instruction mix / control flow from PTX where a toolchain exists."""

from __future__ import annotations

from kernelcast.models.static.extract import extract
from kernelcast.models.static.features import (
    Access,
    BranchInfo,
    LoopInfo,
    PtxBlock,
    PtxFeatures,
    PtxLoop,
    SourceFeatures,
    StaticFeatures,
)
from kernelcast.models.static.ptx import cuda_to_ptx, opencl_to_ptx, parse_ptx, ptxas_resources
from kernelcast.models.static.source import analyze_source

__all__ = [
    "Access",
    "BranchInfo",
    "LoopInfo",
    "PtxBlock",
    "PtxFeatures",
    "PtxLoop",
    "SourceFeatures",
    "StaticFeatures",
    "analyze_source",
    "cuda_to_ptx",
    "extract",
    "opencl_to_ptx",
    "parse_ptx",
    "ptxas_resources",
]

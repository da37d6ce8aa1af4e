"""Argument selection for a launch.

*Simple* selection is LLMPerf II-B1: every array gets ``gsize`` elements of its element type
(a ``float4*`` gets ``gsize`` float4 values), every scalar equals ``gsize``; ``__local`` arrays
get one element per work-item of the work-group. The memory-analysis selection (LLMPerf II-B2)
is another function with the same signature, chosen by name through :data:`SELECTORS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from kernelcast.clang import KernelParam
from kernelcast.cltypes import is_known_type, parse_type
from kernelcast.schema import ArgBinding


class UnsupportedArgument(ValueError):
    """A parameter type this selection cannot bind (struct by value, image, pointer to struct)."""


def simple_args(params: list[KernelParam], gsize: tuple[int, ...],
                lsize: tuple[int, ...] | None) -> list[ArgBinding]:
    total = math.prod(gsize)
    wg = math.prod(lsize) if lsize else 1
    out = []
    for p in params:
        if not is_known_type(p.dtype):
            raise UnsupportedArgument(f"argument {p.name!r} has type {p.dtype!r}, which simple selection "
                                      f"cannot bind")
        if p.kind == "buffer":
            out.append(ArgBinding(p.name, "buffer", p.dtype, count=total, init="random"))
        elif p.kind == "local":
            out.append(ArgBinding(p.name, "local", p.dtype, count=wg))
        else:
            t = parse_type(p.dtype)
            value: int | float = total
            if t.numpy.kind in "iu":
                top = int(np.iinfo(t.numpy).max)
                if total > top:
                    raise UnsupportedArgument(f"argument {p.name!r} ({p.dtype}) would be the global size {total}, "
                                              f"above the {p.dtype} maximum {top}")
            out.append(ArgBinding(p.name, "scalar", p.dtype, value=value))
    return out


def complete_args(params: list[KernelParam], given: list[ArgBinding], gsize: tuple[int, ...],
                  lsize: tuple[int, ...] | None) -> tuple[list[ArgBinding], list[str]]:
    """``given`` plus simple selection for every parameter not given; returns the names filled in."""
    have = {b.name for b in given}
    missing = [p for p in params if p.name not in have]
    filled = simple_args(missing, gsize, lsize) if missing else []
    by_name = {b.name: b for b in [*given, *filled]}
    return [by_name[p.name] for p in params], [p.name for p in missing]


Selector = Callable[[list[KernelParam], tuple[int, ...], "tuple[int, ...] | None"], list[ArgBinding]]
SELECTORS: dict[str, Selector] = {"simple": simple_args}

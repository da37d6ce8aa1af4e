"""Synthetic OpenCL C 1.2 kernel generator.

Builds random but realistic kernels so a dataset can reach LLMPerf's scale without crawling
GitHub. Every kernel is a random composition of

* access patterns: contiguous ``a[gid]``, offset ``a[(gid + off) % n]``, strided
  ``a[((uint)gid * stride) % n]``, gathers through an index buffer, 2D/3D row/column access
  (``a[y * width + x]``, transposed ``a[x * height + y]``), clamped neighbour/stencil reads,
  ``float2``/``float4`` loads and stores (vector pointers or ``vloadN``/``vstoreN``), and
  partitioning loops (each work-item handles ``k`` elements, consecutive or strided by
  ``get_global_size(0)``);
* arithmetic: int/float/double add/mul/fma/div, transcendental builtins, comparisons,
  min/max/clamp/select, bit operations, random expression trees of bounded depth;
* loop nests of depth 0-2 with trip counts from a scalar argument or small constants,
  stencil loops, row/column sweeps, escape-time iterations, accumulation into privates;
* local memory: tiles with ``barrier(CLK_LOCAL_MEM_FENCE)`` (neighbours within the tile,
  tile sweeps, n-body style tiled loops), work-group reductions, local histograms;
* branches: bound checks, divergent branches on the index, data-dependent branches,
  ``switch``, early returns, ``break``/``continue`` in loops;
* occasional global atomics on ``int`` buffers.

Safety conventions (so that *simple argument selection* -- every buffer ``gsize`` elements of
its declared type (``gsize * vector width`` for buffers read with ``vloadN``), every int scalar
``= gsize``, float scalars ``= 1.0``, local buffers ``= lsize`` elements -- stays in bounds):
computed indices are reduced with ``% n``, ``min``/``max``/``clamp``; 2D/3D extents come from
``get_global_size``; gathers clamp or reduce the index; a kernel has at most one loop whose trip
count scales with an argument (or the problem size), so work is ``O(gsize * k)``; kernels with
barriers never return early and keep barriers in uniform control flow; fixed-size ``__local``
arrays hold 1024 elements (any legal work-group of a 1024-item device). Integer division only
by nonzero constants; float maths guards its domains (``log1p(fabs(x))``, ``x / (1 + fabs(y))``,
``exp(-fabs(x))``) so that outputs are rarely NaN.

Determinism and uniqueness: :func:`generate_kernels` draws everything from one
``random.Random(seed)``; the same ``(count, seed)`` gives byte-identical sources (and a longer
run extends a shorter one). Kernels are deduplicated inside :func:`generate_kernels` on
:func:`normalize_source` with the kernel name replaced by a fixed one (comments stripped,
whitespace collapsed); a kernel colliding with an earlier one is regenerated from the same
stream, so the returned kernels are distinct even ignoring their names.

Helper functions are named ``<kernel name>_<verb>`` so many kernels can be concatenated into
one program (see :func:`compile_check`).

Modules: :mod:`~datagen.synth.core` (options, records, the builder's base),
:mod:`~datagen.synth.expressions`, :mod:`~datagen.synth.memory` (access patterns, stores, atomics),
:mod:`~datagen.synth.loops`, :mod:`~datagen.synth.local` (local memory), :mod:`~datagen.synth.assembly`
(the whole kernel), :mod:`~datagen.synth.generator` (the entry points below) and
:mod:`~datagen.synth.check` (compile checking).
"""

from __future__ import annotations

from kernelcast.datagen.synth.check import compile_check, default_device
from kernelcast.datagen.synth.core import SynthOptions
from kernelcast.datagen.synth.generator import (
    dedup_key,
    generate_kernel,
    generate_kernel_with_features,
    generate_kernels,
    generate_kernels_with_features,
    normalize_source,
    write_synth_corpus,
)

__all__ = [
    "SynthOptions",
    "generate_kernel",
    "generate_kernel_with_features",
    "generate_kernels",
    "generate_kernels_with_features",
    "normalize_source",
    "dedup_key",
    "write_synth_corpus",
    "compile_check",
    "default_device",
]

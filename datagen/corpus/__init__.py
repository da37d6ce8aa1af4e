"""Corpus ingest: turn a messy crawl of OpenCL ``.cl`` files into self-contained kernel records.

The stages follow the LLMPerf/BenchPress corpus pipelines, each counted in an :class:`IngestReport`:

1. **read** every ``.cl`` file (directories recursively); bytes that are not UTF-8 are decoded as
   Latin-1 rather than failing the file;
2. **preprocess** with ``pcpp`` (a pure-Python C preprocessor): macros and ``#include``\\ s of local
   headers are expanded, ``#pragma`` lines are kept, OpenCL builtins are left alone, and the macros
   an OpenCL C 1.2 compiler predefines (:data:`OPENCL_PREDEFINES`) plus ``defines`` (the ``-D``
   options) are defined. A missing include fails that file only, with its reason;
3. **normalize**: strip comments and the double-underscore OpenCL qualifier keywords
   (``__kernel`` -> ``kernel``, ``__global`` -> ``global``...), and nothing else;
4. **split** with libclang: one record per kernel holding the kernel plus exactly the top-level
   functions, structs, typedefs, enums, program-scope constants and pragmas it needs
   (transitively), in source order;
5. **format** with ``clang-format`` (a fixed built-in style), or a whitespace normalization where
   clang-format is missing;
6. **deduplicate**: exact duplicates (sha256 of the normalized text), then near duplicates (MinHash
   over 5-token shingles with identifiers mapped to a placeholder, LSH banding for candidates);
7. **compile check** with an optional ``compile_fn`` (failures are kept, marked ``compile_error``);
8. **dimensionality**: 1D/2D/3D from the highest constant index given to the work-item functions
   (LLMPerf Table I), looking into the helpers a kernel calls.

Modules by stage: :mod:`~datagen.corpus.preprocess` (1-3), :mod:`~datagen.corpus.split` (4 and 8),
:mod:`~datagen.corpus.formatting` (5), :mod:`~datagen.corpus.dedup` (6), :mod:`~datagen.corpus.check`
(7, on an OpenCL device); :mod:`~datagen.corpus.driver` runs them in order and
:mod:`~datagen.corpus.report` counts them; :mod:`~datagen.corpus.load` reads a corpus by name (or ingests the
bundled one).
"""

from __future__ import annotations

from kernelcast.datagen.corpus.check import CL_STD_OPTION, CompileFn, opencl_compile_fn
from kernelcast.datagen.corpus.dedup import (
    SHINGLE_SIZE,
    MinHasher,
    NearDuplicateIndex,
    dedup_tokens,
    lsh_params,
    shingle_hashes,
)
from kernelcast.datagen.corpus.driver import DEFAULT_EXTENSIONS, DEFAULT_MAX_FILE_BYTES, ingest, ingest_to
from kernelcast.datagen.corpus.formatting import CLANG_FORMAT_STYLE, Formatter, find_clang_format, normalize_whitespace
from kernelcast.datagen.corpus.preprocess import (
    OPENCL_PREDEFINES,
    QUALIFIERS,
    PreprocessError,
    decode_source,
    defines_to_build_options,
    normalize_source,
    preprocess,
    strip_comments,
    strip_qualifiers,
)
from kernelcast.datagen.corpus.report import FileFailure, IngestReport
from kernelcast.datagen.corpus.split import WORK_ITEM_FUNCTIONS, ExtractedKernel, split_kernels

__all__ = [
    "CL_STD_OPTION",
    "CLANG_FORMAT_STYLE",
    "CompileFn",
    "DEFAULT_EXTENSIONS",
    "DEFAULT_MAX_FILE_BYTES",
    "ExtractedKernel",
    "FileFailure",
    "Formatter",
    "IngestReport",
    "MinHasher",
    "NearDuplicateIndex",
    "OPENCL_PREDEFINES",
    "PreprocessError",
    "QUALIFIERS",
    "SHINGLE_SIZE",
    "WORK_ITEM_FUNCTIONS",
    "decode_source",
    "dedup_tokens",
    "defines_to_build_options",
    "find_clang_format",
    "ingest",
    "ingest_to",
    "lsh_params",
    "normalize_source",
    "normalize_whitespace",
    "opencl_compile_fn",
    "preprocess",
    "shingle_hashes",
    "split_kernels",
    "strip_comments",
    "strip_qualifiers",
]

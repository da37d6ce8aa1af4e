"""The public entry points of the synthetic kernel generator: one kernel, many distinct kernels
(deduplicated on :func:`dedup_key`), a corpus written to disk."""

from __future__ import annotations

import logging
import random
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kernelcast.datagen.corpus_store import write_corpus
from kernelcast.datagen.synth.assembly import KernelBuilder
from kernelcast.datagen.synth.core import SynthOptions

from kernelcast.schema import Kernel

log = logging.getLogger(__name__)

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WS_RE = re.compile(r"\s+")


def normalize_source(source: str, name: str | None = None, replacement: str = "KERNEL") -> str:
    """Source with comments stripped and whitespace collapsed; ``name`` (if given) replaced.

    Helper functions are named after their kernel, so replacing the kernel name renames them too.
    """
    s = _COMMENT_RE.sub(" ", source)
    if name:
        s = re.sub(re.escape(name), replacement, s)
    return _WS_RE.sub(" ", s).strip()


def dedup_key(kernel: Kernel) -> str:
    """The key kernels are deduplicated on: normalized source with the kernel name fixed."""
    return normalize_source(kernel.source, kernel.name)


def generate_kernel_with_features(rng: random.Random, index: int, options: SynthOptions,
                                  seed: int | None = None) -> tuple[Kernel, dict[str, Any]]:
    """One random kernel and the pattern choices it was built from."""
    src, name, dims, feat = KernelBuilder(rng, index, options).build()
    origin = f"synth:seed={seed}:i={index}" if seed is not None else f"synth:i={index}"
    return Kernel(source=src, name=name, language="opencl", dims=dims, origin=origin), feat


def generate_kernel(rng: random.Random, index: int, options: SynthOptions,
                    seed: int | None = None) -> Kernel:
    """One random kernel named ``synth_<tag>_<index:06d>`` drawn from ``rng``."""
    return generate_kernel_with_features(rng, index, options, seed)[0]


def generate_kernels_with_features(count: int, seed: int, options: SynthOptions | None = None
                                   ) -> list[tuple[Kernel, dict[str, Any]]]:
    """``count`` distinct kernels (see the module docstring on determinism and deduplication)."""
    opts = options or SynthOptions()
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[tuple[Kernel, dict[str, Any]]] = []
    regenerated = 0
    for i in range(count):
        for attempt in range(opts.max_attempts):
            k, feat = generate_kernel_with_features(rng, i, opts, seed)
            key = dedup_key(k)
            if key not in seen:
                seen.add(key)
                if attempt:
                    feat["regenerated"] = attempt
                out.append((k, feat))
                break
            regenerated += 1
        else:
            raise RuntimeError(f"synth: could not generate a distinct kernel for index {i} "
                               f"after {opts.max_attempts} attempts")
    if regenerated:
        log.info("synth: regenerated %d duplicate kernels (seed=%d, count=%d)", regenerated, seed, count)
    return out


def generate_kernels(count: int, seed: int, options: SynthOptions | None = None) -> list[Kernel]:
    """``count`` distinct kernels from ``random.Random(seed)``; byte-identical for the same arguments.

    Duplicates (after :func:`dedup_key` normalization) are regenerated, so the result holds no two
    kernels that differ only in name, comments or whitespace.
    """
    return [k for k, _ in generate_kernels_with_features(count, seed, options)]


def write_synth_corpus(out_dir: str | Path, count: int, seed: int,
                       options: SynthOptions | None = None) -> Path:
    """Generate ``count`` kernels and write them as a corpus (``kernels.jsonl`` + ``manifest.json``).

    Each record is ``Kernel.to_dict()`` plus ``synth_features`` (the generator's pattern choices,
    including an argument list with roles and size hints).
    """
    opts = options or SynthOptions()
    pairs = generate_kernels_with_features(count, seed, opts)
    records = []
    for k, feat in pairs:
        d = k.to_dict()
        d["synth_features"] = feat
        records.append(d)
    manifest = {"source": "synth", "seed": seed, "count": count, "options": asdict(opts)}
    return write_corpus(out_dir, records, manifest)

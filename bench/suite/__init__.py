"""Benchmark suites: manifests of real kernels swept over problem sizes, and their measurement.

``load_manifest`` reads and validates a manifest (``manifest.schema.json``, README.md);
``Suite.instances()`` yields one :class:`BenchInstance` per (kernel, size) with generated inputs;
``measure_suite`` runs them through :class:`instrument.harness.Harness` into a table.
"""

from __future__ import annotations

from typing import Any

from kernelcast.bench.suite.manifest import load_manifest, parse_manifest
from kernelcast.bench.suite.model import BenchInstance, Issue, KernelSpec, ManifestError, Suite

__all__ = ["BenchInstance", "Issue", "KernelSpec", "ManifestError", "Suite", "load_manifest", "measure_suite",
           "parse_manifest"]


def __getattr__(name: str) -> Any:  # measure_suite pulls in pandas; import it on first use
    if name == "measure_suite":
        from kernelcast.bench.suite.run import measure_suite

        return measure_suite
    raise AttributeError(name)

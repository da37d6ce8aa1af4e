"""Profile-guided counts of suite entries: loop trips and branch outcomes per site
(:mod:`instrument.counters`) of one launch with the suite's generated inputs at a problem size.

>>> from kernelcast.bench.suite import load_manifest                              # doctest: +SKIP
>>> suite = load_manifest("suites/kernelcast/suite.json")
>>> with Harness("auto", meter="none") as h:
...     sc = suite_counts(suite.kernel("md-lj"), 4096, harness=h)
>>> sc.values()       # {"trip_l..._c...": mean neighbours per atom, "br_l..._c...": share inside the cutoff...}

``python -m kernelcast.bench.suite.counts [SUITE] [--kernel ID] [--max-sizes N] [--json]`` prints the counts
of every entry and size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from kernelcast.bench.suite.model import KernelSpec, Suite
from kernelcast.instrument.counters import MAX_TRACKED, CountRewrite, SiteCounts, count_rewrite, measure_counts
from kernelcast.instrument.runner import TimingPolicy


@contextlib.contextmanager
def _harness(harness: Any, device: Any) -> Iterator[Any]:
    if harness is not None:
        yield harness
        return
    from kernelcast.instrument.harness import Harness

    with Harness(device, meter="none") as h:
        yield h


def suite_counts(entry: KernelSpec, size: int, harness: Any = None, *, variant: int = 0, device: Any = "auto",
                 max_tracked: int = MAX_TRACKED, rewrite: CountRewrite | None = None) -> SiteCounts:
    """The :class:`SiteCounts` of one launch of ``entry`` at problem size ``size`` (its ``variant``-th
    local size) with the suite's generated arrays, through ``harness`` (a fresh isolated harness
    on ``device`` when None). Raises :class:`~instrument.rewrite.RewriteError` when the kernel
    cannot be instrumented, :class:`~instrument.rewrite.InstrumentedRunError` when the launch
    fails, :class:`~bench.suite.model.ManifestError` when the inputs cannot be generated."""
    inst = entry.instance(size, "", variant)
    with _harness(harness, device) as h:
        return measure_counts(h, inst.kernel, inst.config, arrays=inst.arrays, policy=TimingPolicy(),
                              max_tracked=max_tracked, rewrite=rewrite)


def measure_suite_counts(suite: Suite, harness: Any, *, ids: list[str] | None = None,
                         max_sizes: int | None = None) -> list[dict[str, Any]]:
    """Counts of every (entry, size) of ``suite`` (first local size of a sweep): one dict per
    instance with ``id``, ``n``, ``items``, ``values`` (``SiteCounts.values()``) or ``error``."""
    from kernelcast.instrument.rewrite import InstrumentedRunError, RewriteError, device_supports_int64_atomics

    int64 = device_supports_int64_atomics(harness.device)
    out: list[dict[str, Any]] = []
    for spec in (suite.kernels if ids is None else [suite.kernel(k) for k in ids]):
        try:
            cr: CountRewrite | None = count_rewrite(spec.kernel_record(), int64_atomics=int64)
        except RewriteError as e:
            cr, why = None, str(e)
        for n in spec.sizes[:max_sizes]:
            row: dict[str, Any] = {"id": spec.id, "n": n}
            if cr is None:
                row["error"] = why
            else:
                try:
                    sc = suite_counts(spec, n, harness, rewrite=cr)
                    row.update(items=sc.items, values=sc.values(), sites=len(cr.sites),
                               unsupported=len(cr.unsupported))
                except (InstrumentedRunError, RewriteError) as e:
                    row["error"] = str(e)
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    from kernelcast.bench.suite import load_manifest
    from kernelcast.bench.suite.compare import default_suite
    from kernelcast.instrument.harness import Harness

    p = argparse.ArgumentParser(prog="python -m kernelcast.bench.suite.counts", description=__doc__.splitlines()[0])
    p.add_argument("suite", nargs="?", default=None, help="suite manifest (default: suites/kernelcast/suite.json)")
    p.add_argument("--kernel", action="append", help="entry id (repeatable)")
    p.add_argument("--max-sizes", type=int, default=None, help="first N sizes of each entry")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    suite = load_manifest(args.suite or default_suite())
    with Harness("auto", meter="none") as h:
        rows = measure_suite_counts(suite, h, ids=args.kernel, max_sizes=args.max_sizes)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        vals = r.get("values")
        text = r["error"] if vals is None else ", ".join(f"{k}={v:.4g}" for k, v in sorted(vals.items()))
        print(f"{r['id']:>16} n={r['n']:<9} {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

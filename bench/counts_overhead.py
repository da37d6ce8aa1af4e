"""What a counting launch (:mod:`instrument.counters`) costs next to a plain one.

For suite entries at one problem size each, the plain kernel and its counting variant are timed
with the same policy on the same inputs (interleaved: plain, counting, plain, counting), and one
:func:`instrument.counters.measure_counts` call (what datagen adds per row: one launch, the build
cached) is timed on the wall clock. Prints per entry the median device times, their ratio and the
wall time of the count call.

    PYTHONPATH=. python -m kernelcast.bench.counts_overhead [--kernel ID ...] [--size-index I] [--json]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

from kernelcast.options import Parser

DEFAULT_IDS = ("triad", "reduction", "spmv-csr-scalar", "spmv-csr-vector", "md-lj", "bfs-vertex", "kmeans-assign")


def overhead(suite: Any, harness: Any, ids: list[str], size_index: int = 2, rounds: int = 2) -> list[dict[str, Any]]:
    from kernelcast.instrument.counters import count_config, count_rewrite, measure_counts
    from kernelcast.instrument.runner import TimingPolicy

    pol = TimingPolicy(warmup=1, min_repeats=5, min_time_s=0.05, max_repeats=200, max_time_s=5.0)
    out: list[dict[str, Any]] = []
    for kid in ids:
        spec = suite.kernel(kid)
        n = spec.sizes[min(size_index, len(spec.sizes) - 1)]
        inst = spec.instance(n)
        cr = count_rewrite(inst.kernel)
        ccfg, carrays, _ = count_config(cr, inst.config, inst.arrays)
        plain, counting = [], []
        for _ in range(rounds):
            m = harness.run(inst.kernel, inst.config, pol, arrays=inst.arrays)
            c = harness.run(cr.kernel, ccfg, pol, arrays=carrays)
            if m.time is None or c.time is None:
                break
            plain.append(m.time.median_us)
            counting.append(c.time.median_us)
        row: dict[str, Any] = {"id": kid, "n": n, "sites": len(cr.sites)}
        if not plain:
            row["error"] = "a launch failed"
            out.append(row)
            continue
        measure_counts(harness, inst.kernel, inst.config, arrays=inst.arrays, rewrite=cr)   # build cached
        t = time.perf_counter()
        measure_counts(harness, inst.kernel, inst.config, arrays=inst.arrays, rewrite=cr)
        wall = time.perf_counter() - t
        p, c = statistics.median(plain), statistics.median(counting)
        row.update(plain_us=p, counting_us=c, ratio=c / p, count_call_s=wall)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    from kernelcast.bench.suite import load_manifest
    from kernelcast.bench.suite.compare import default_suite
    from kernelcast.instrument.harness import Harness

    p = Parser(prog="python -m kernelcast.bench.counts_overhead", description=__doc__.splitlines()[0])
    p.add_argument("--kernel", action="append", help="suite entry id (repeatable)")
    p.add_argument("--size-index", type=int, default=2, help="which of each entry's sizes (2: the third)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    suite = load_manifest(default_suite())
    with Harness("auto", meter="none") as h:
        rows = overhead(suite, h, args.kernel or list(DEFAULT_IDS), args.size_index)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'entry':>16} {'n':>8} {'sites':>5} {'plain us':>10} {'count us':>10} {'ratio':>6} {'call s':>7}")
    for r in rows:
        if "error" in r:
            print(f"{r['id']:>16} {r['n']:>8} {r['error']}")
            continue
        print(f"{r['id']:>16} {r['n']:>8} {r['sites']:>5} {r['plain_us']:>10.1f} {r['counting_us']:>10.1f} "
              f"{r['ratio']:>6.2f} {r['count_call_s']:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

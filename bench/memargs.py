"""Memory-analysis argument selection (LLMPerf II-B2) over the bundled corpus: figures.

    .venv/bin/python bench/memargs.py [--kernels N] [--max-combos 16] [--configs 3] [--json out.json]

Per kernel (all of the corpus, or a deterministic sample of ``--kernels``):

1. Algorithm 1 (:func:`datagen.memargs.infer_arguments`) with at most ``--max-combos`` scalar
   combinations: does it find at least one valid setting?
2. ``--configs`` launch configurations from the datagen sampler (one local size, small grids):
   the plain kernel runs once with simple selection (LLMPerf II-B1) and once with memory
   selection; counted: out-of-bounds / crashing configurations of each, and memory-selection rows
   whose arrays differ in size from gsize.
3. Instrumentation overhead: the instrumented kernel against the plain one, same arguments, same
   timing policy (median of a few launches), ratio of median times.

Prints the figures (and what was sampled); ``--json`` also writes every per-kernel record.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelcast.datagen.args import UnsupportedArgument, simple_args  # noqa: E402
from kernelcast.datagen.memargs import MemoryAnalysis, infer_arguments, memory_args, memory_selector  # noqa: E402
from kernelcast.datagen.sampler import DeviceLimits, sample_configs  # noqa: E402
from kernelcast.instrument.rewrite import InstrumentedRunError, instrument_kernel, measure_instrumented  # noqa: E402
from kernelcast.instrument.runner import TimingPolicy  # noqa: E402

from kernelcast.clang import kernel_signatures  # noqa: E402
from kernelcast.options import Parser
from kernelcast.schema import Kernel, LaunchConfig  # noqa: E402

log = logging.getLogger(__name__)
ONCE = TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=2.0)
TIMED = TimingPolicy(warmup=2, min_repeats=10, min_time_s=0.0, max_repeats=10, max_time_s=2.0)
BAD = ("out_of_bounds", "crash")


def _reason_class(an: MemoryAnalysis) -> str:
    if an.unsupported:
        return "unsupported: " + an.unsupported[0].split(": ", 1)[-1].split(":")[0][:60]
    reasons = Counter(_rejection_class(r.reason) for r in an.rejected)
    return "all rejected: " + (reasons.most_common(1)[0][0] if reasons else "none tried")


def _rejection_class(reason: str) -> str:
    for key in ("not linear", "before the start", "shrinks", "timeout", "crash", "MiB", "__constant",
                "invalid_config", "runtime_error", "not tried"):
        if key in reason:
            return key
    return reason[:40]


def bench_kernel(h: Any, k: Kernel, limits: DeviceLimits, args: argparse.Namespace) -> dict[str, Any]:
    rec: dict[str, Any] = {"kernel": k.name, "origin": k.origin, "dims": k.dims or 1}
    params = kernel_signatures(k.source, k.build_options)[k.name]
    t0 = time.perf_counter()
    an = infer_arguments(h, k, device_limits=limits, max_combos=args.max_combos, seed=args.seed)
    rec.update(analysis_s=time.perf_counter() - t0, valid=len(an.settings), tried=an.combos_tried,
               possible=an.combos_total, runs=an.runs, unsupported=an.unsupported[:3],
               rejections=dict(Counter(_rejection_class(r.reason) for r in an.rejected)))
    if not an.settings:
        rec["why_none"] = _reason_class(an)
    rng = random.Random(f"{args.seed}:{k.id}")
    configs = sample_configs(rng, limits, k.dims or 1, 1, args.configs, max_total_items=args.max_items)
    select = memory_selector(an, seed=args.seed)
    rr = instrument_kernel(k, int64_atomics=an.int64_atomics) if an.settings else None
    rows = []
    for c in configs:
        row: dict[str, Any] = {"gsize": c.gsize, "lsize": c.lsize}
        try:
            sargs = simple_args(params, c.gsize, c.lsize)
        except UnsupportedArgument:
            row["simple"] = "unsupported"
        else:
            _record(row, "simple", _run_plain(h, k, LaunchConfig(c.gsize, c.lsize, sargs)))
        if an.settings:
            try:
                margs = select(params, c.gsize, c.lsize)
            except UnsupportedArgument:
                row["memory"] = "no setting fits"
            else:
                total = math.prod(c.gsize)
                row["sizes_differ"] = any(a.count != total for a in margs if a.kind == "buffer")
                _record(row, "memory", _run_plain(h, k, LaunchConfig(c.gsize, c.lsize, margs)))
                if row["memory"] in BAD:
                    # would the bounds check of a verifying selector have caught it?
                    vsel = memory_selector(an, seed=args.seed, harness=h, rewrite=rr)
                    try:
                        vargs = vsel(params, c.gsize, c.lsize)
                    except UnsupportedArgument:
                        row["verified"] = "rejected"
                    else:
                        _record(row, "verified", _run_plain(h, k, LaunchConfig(c.gsize, c.lsize, vargs)))
        rows.append(row)
    rec["configs"] = rows
    # overhead: at the validating setting of the analysis, with the first valid setting's arguments
    if an.settings and an.exe_settings:
        gsize, lsize = an.exe_settings[-1]
        margs = memory_args(an, params, gsize, lsize, 0)
        plain = h.run(k, LaunchConfig(gsize, lsize, margs), TIMED)
        sizes = {a.name: int(a.count or 0) for a in margs if a.kind == "buffer"}
        scalars = {a.name: a.value for a in margs if a.kind == "scalar"}
        try:
            rr = instrument_kernel(k, int64_atomics=an.int64_atomics)
            inst = measure_instrumented(h, rr, gsize, lsize, scalars, sizes, policy=TIMED).measurement
        except InstrumentedRunError as e:
            inst = e.measurement
        if plain.status == "ok" and inst is not None and inst.status == "ok" and plain.time and inst.time:
            rec["plain_us"] = plain.time.median_us
            rec["instrumented_us"] = inst.time.median_us
            rec["overhead"] = inst.time.median_us / max(plain.time.median_us, 1e-3)
    return rec


def _run_plain(h: Any, k: Kernel, cfg: LaunchConfig) -> Any:
    m = h.run(k, cfg, ONCE)
    if m.status == "out_of_bounds":
        # a stray write on a CPU device may have corrupted the worker's heap: start a fresh one
        # (seen here: "malloc(): unaligned tcache chunk detected", then every run failing)
        h.close()
    return m


def _record(row: dict[str, Any], key: str, m: Any) -> None:
    row[key] = m.status
    if m.status != "ok":
        row[f"{key}_reason"] = (m.reason or "")[:200]


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def report(records: list[dict[str, Any]], sampled: str, wall: float) -> str:
    n = len(records)
    ok = [r for r in records if r["valid"]]
    lines = [f"sampled: {sampled}", f"wall time: {wall:.0f} s", "",
             f"kernels with >= 1 valid memory-analysis setting: {_pct(len(ok), n)}"]
    why = Counter(r["why_none"] for r in records if not r["valid"])
    for w, c in why.most_common(8):
        lines.append(f"  no setting, {c:3d} kernels: {w}")
    tried = sum(r["tried"] for r in records)
    valid = sum(r["valid"] for r in records)
    lines.append(f"scalar combinations: {tried} tried, {valid} valid ({100 * valid / max(tried, 1):.1f}%), "
                 f"{sum(r['runs'] for r in records)} instrumented runs, median "
                 f"{statistics.median(r['analysis_s'] for r in records):.2f} s per kernel")
    rej = Counter()
    for r in records:
        rej.update(r["rejections"])
    lines.append("rejections by reason: " + ", ".join(f"{k}: {v}" for k, v in rej.most_common()))
    rows = [c for r in records for c in r["configs"]]
    mem_rows = [c for c in rows if "sizes_differ" in c]
    lines += ["", f"launch configurations sampled: {len(rows)} ({len(rows) // max(n, 1)} per kernel)",
              f"memory-selection rows where some array size differs from gsize: "
              f"{_pct(sum(c['sizes_differ'] for c in mem_rows), len(mem_rows))}"]
    for c in rows:  # the verifying selector's outcome: the plain choice when it passed its check
        if "memory" in c:
            c["checked"] = c.get("verified", "refused") if c["memory"] in BAD else c["memory"]
            c["checked"] = "refused" if c["checked"] == "rejected" else c["checked"]
    simple_bad = [c for c in rows if c.get("simple") in BAD]
    lines.append(f"simple selection, out-of-bounds or crashing configurations: {_pct(len(simple_bad), len(rows))} "
                 f"({', '.join(f'{k}: {v}' for k, v in Counter(c['simple'] for c in simple_bad).items())})")
    for key, name in (("memory", "memory selection (fit only)"),
                      ("checked", "memory selection + instrumented bounds check (verify=True)")):
        have = [c for c in rows if key in c]
        bad = [c for c in have if c[key] in BAD]
        avoided = [c for c in simple_bad if c.get(key) == "ok"]
        lines.append(f"{name}: out-of-bounds or crashing {_pct(len(bad), len(have))}; ran in bounds on "
                     f"{_pct(len(avoided), len(simple_bad))} of simple selection's bad configurations")
        lines.append("  status counts: " + ", ".join(f"{k}: {v}" for k, v in Counter(
            c.get(key, "no valid setting") for c in rows).most_common()))
    lines.append("status counts, simple: " + ", ".join(f"{k}: {v}" for k, v in Counter(
        c.get("simple") for c in rows).most_common()))
    ov = sorted(r["overhead"] for r in records if "overhead" in r)
    if ov:
        q = statistics.quantiles(ov, n=10) if len(ov) >= 10 else [ov[0]] * 9
        lines += ["", f"instrumentation overhead (instrumented / plain median kernel time, {len(ov)} kernels): "
                      f"median {statistics.median(ov):.1f}x, p10 {q[0]:.1f}x, p90 {q[-1]:.1f}x"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.memargs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=None, help="sample this many kernels (default: all)")
    ap.add_argument("--max-combos", type=int, default=16)
    ap.add_argument("--configs", type=int, default=3, help="launch configurations per kernel")
    ap.add_argument("--max-items", type=int, default=1 << 16, help="largest sampled global size (work-items)")
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")

    from kernelcast.datagen.corpus.load import load_corpus_kernels
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.harness import Harness

    kernels, _ = load_corpus_kernels("bundled")
    total = len(kernels)
    if args.kernels is not None and args.kernels < total:
        kernels = sorted(random.Random(args.seed).sample(kernels, args.kernels), key=lambda k: (k.origin, k.name))
        sampled = f"{len(kernels)} of {total} bundled kernels (seed {args.seed})"
    else:
        sampled = f"all {total} bundled kernels"
    sampled += (f"; <= {args.max_combos} scalar combinations each; {args.configs} configurations per kernel "
                f"(datagen sampler, one local size, <= {args.max_items} work-items); run timeout {args.timeout:g} s")
    device = select_device(args.device)
    limits = DeviceLimits.from_device(device)
    records = []
    t0 = time.perf_counter()
    with Harness(device, meter="none", timeout_s=args.timeout) as h:
        for i, k in enumerate(kernels):
            t = time.perf_counter()
            try:
                records.append(bench_kernel(h, k, limits, args))
            except Exception as e:  # noqa: BLE001 - one bad kernel must not end the bench
                log.warning("%s: %s: %s", k.name, type(e).__name__, e)
                continue
            r = records[-1]
            print(f"[{i + 1:3d}/{len(kernels)}] {k.name:32s} valid {r['valid']:3d}/{r['tried']:3d}  "
                  f"{time.perf_counter() - t:5.1f} s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    print(f"device: {device.name} ({device.platform_version})")
    print(report(records, sampled, wall))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

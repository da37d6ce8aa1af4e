"""Generate synthetic OpenCL kernels, check their distinctness and compile them all.

Usage: ``python bench/synth_compile.py --count 10000 --seed 0 [--batch 64] [--out DIR]``
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelcast.datagen.synth import (  # noqa: E402
    SynthOptions,
    compile_check,
    default_device,
    generate_kernels_with_features,
    normalize_source,
    write_synth_corpus,
)

from kernelcast.options import Parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.synth_compile", description=__doc__)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None, help="also write the corpus here")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    opts = SynthOptions()
    t0 = time.perf_counter()
    pairs = generate_kernels_with_features(args.count, args.seed, opts)
    t_gen = time.perf_counter() - t0
    kernels = [k for k, _ in pairs]
    n = len(kernels)
    distinct = len({normalize_source(k.source) for k in kernels})
    distinct_renamed = len({normalize_source(k.source, k.name) for k in kernels})
    regenerated = sum(f.get("regenerated", 0) for _, f in pairs)
    print(f"count: {n}  (generated in {t_gen:.1f} s, {regenerated} duplicate draws regenerated)")
    print(f"distinct (normalized): {distinct} ({distinct / n:.2%})")
    print(f"distinct (normalized, kernel renamed): {distinct_renamed} ({distinct_renamed / n:.2%})")

    feats = [f for _, f in pairs]

    def share(pred: object) -> str:
        c = sum(1 for f in feats if pred(f))  # type: ignore[operator]
        return f"{c:6d} ({c / n:6.1%})"

    print("feature use:")
    rows = [
        ("loops (any)", lambda f: bool(f["loops"])),
        ("loop nest depth >= 2", lambda f: f["loop_depth"] >= 2),
        ("loop trip from argument / size", lambda f: f["scalar_trip_loop"]),
        ("local memory", lambda f: f["local"] != "none"),
        ("barriers", lambda f: f["barriers"] > 0),
        ("branches (beyond bound checks)", lambda f: bool(f["branches"])),
        ("bound checks", lambda f: f["bound_check"] != "none"),
        ("vectors", lambda f: f["vector_width"] > 1),
        ("2D", lambda f: f["dims"] == 2),
        ("3D", lambda f: f["dims"] == 3),
        ("atomics", lambda f: f["atomic"] is not None),
        ("double", lambda f: f["double"]),
        ("int element type", lambda f: f["base_type"] == "int"),
        ("helper function", lambda f: f["helper"]),
        ("gather (index buffer)", lambda f: any("gather" in a for a in f["access"])),
        ("neighbour reads", lambda f: any("neighbors" in a for a in f["access"])),
        ("partitioning loops", lambda f: f["shape"] == "chunked"),
    ]
    for label, pred in rows:
        print(f"  {label:34s} {share(pred)}")
    tags = Counter(k.name.split("_")[1] for k in kernels)
    print("name tags:", ", ".join(f"{t}={c}" for t, c in tags.most_common()))

    if args.out is not None:
        path = write_synth_corpus(args.out, args.count, args.seed, opts)
        print(f"corpus written to {path}")

    if args.no_compile:
        return 0
    dev = default_device()
    if dev is None:
        print("no working OpenCL device; skipping compile check")
        return 1
    print(f"device: {dev.name} ({dev.platform_version})")
    t0 = time.perf_counter()
    res = compile_check(kernels, dev, batch=args.batch)
    secs = time.perf_counter() - t0
    ok = sum(1 for k in kernels if res.get(k.name) == "")
    print(f"compiled: {ok}/{n} ({ok / n:.2%}) in {secs:.1f} s")
    failures = [k for k in kernels if res.get(k.name)]
    for k in failures[:3]:
        print(f"--- compile failure: {k.name}")
        print(res[k.name][:2000])
    return 0 if ok >= 0.95 * n else 2


if __name__ == "__main__":
    raise SystemExit(main())

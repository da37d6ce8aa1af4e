"""``kernelcast demo``: the README's main job on the embedded defaults.

Until the end-to-end pipeline lands, it measures one kernel of the bundled corpus (a
stream-triad-like fused multiply-add) across a grid of launch configurations on the default
device, in the isolated harness, and prints what it measured.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

DEMO_FILE = "elementwise.cl"
DEMO_KERNEL = "ew_fma_triad"


def bundled_dir() -> Path:
    import datagen

    return Path(datagen.__file__).parent / "bundled"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="measure a bundled kernel across launch configurations (main job)",
                       description="Measure the bundled kernel ew_fma_triad (d = a*b + c) over several global "
                                   "and local sizes on the default OpenCL device, in the isolated harness, and "
                                   "print time, spread and effective bandwidth.")
    p.add_argument("--device", help="OpenCL device: auto, P:D, or part of its name")
    p.add_argument("--meter", default="auto", help="energy meter: auto, nvml, rapl, none")
    p.add_argument("--sizes", default="65536,262144,1048576,4194304", help="comma-separated element counts")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from instrument.harness import Harness
    from instrument.runner import TimingPolicy
    from kernelcast.cli import UsageError, _device, fmt_table, load_kernel_source
    from kernelcast.schema import ArgBinding, LaunchConfig

    kernel, _ = load_kernel_source(str(bundled_dir() / DEMO_FILE), DEMO_KERNEL)
    from kernelcast.cli import _check_meter

    _check_meter(args.meter)
    dev = _device(args.device)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--sizes {args.sizes!r}: expected comma-separated integers") from None
    mult = dev.preferred_wg_multiple or 1
    lsizes = sorted({ls for ls in (mult, 4 * mult, 16 * mult) if ls <= dev.max_work_group_size})
    print(f"device: {dev.spec} {dev.name} ({dev.platform_version.split(' Linux')[0]}), "
          f"{dev.compute_units} compute units, max work-group {dev.max_work_group_size}, "
          f"work-group multiple {mult}", flush=True)
    rows = []
    t0 = time.perf_counter()
    with Harness(dev, meter=args.meter) as h:
        print(f"kernel: {DEMO_KERNEL} from the bundled corpus ({DEMO_FILE}); meter: ", end="", flush=True)
        for n in sizes:
            for ls in lsizes:
                g = math.ceil(n / ls) * ls
                cfg = LaunchConfig((g,), (ls,), [
                    ArgBinding("a", "buffer", "float", n), ArgBinding("b", "buffer", "float", n),
                    ArgBinding("c", "buffer", "float", n), ArgBinding("d", "buffer", "float", n, init="zeros"),
                    ArgBinding("n", "scalar", "int", value=n),
                ])
                m = h.run(kernel, cfg, TimingPolicy())
                if not rows:
                    print(h.meter_name, flush=True)
                t = m.time
                gbs = 16 * n / (t.median_us * 1e-6) / 1e9 if t else None
                rows.append([n, g, ls, m.status, t.median_us if t else None, t.min_us if t else None,
                             100 * t.cv if t else None, t.repeats if t else None, gbs,
                             m.energy_j * 1e3 if m.energy_j is not None else None])
                print(fmt_table(rows[-1:], _HEADER).splitlines()[-1] if len(rows) > 1 else fmt_table(rows, _HEADER),
                      flush=True)
    print(f"\n{len(rows)} configurations in {time.perf_counter() - t0:.1f} s "
          f"(energy '-' means no meter on this device: nothing is estimated)")
    return 0 if all(r[3] == "ok" for r in rows) else 1


_HEADER = ["elements", "gsize", "lsize", "status", "median us", "min us", "CV %", "repeats", "GB/s", "mJ"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(argparse.Namespace(device=None, meter="auto", sizes="65536,262144,1048576,4194304")))

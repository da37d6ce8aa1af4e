"""``kernelcast bench``: learned vs analytical vs blend on a benchmark suite (see
:mod:`bench.suite.compare`). Only the command line: the suite modules are imported when it runs."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from kernelcast.console import to_json
from kernelcast.options import SWEEP_ROUNDS_HELP, add_device, add_meter, add_quiet, check_out_dir, positive_int


def cmd_bench(args: argparse.Namespace) -> int:
    from kernelcast.bench.suite.compare import default_suite, print_table, run_bench
    from kernelcast.instrument.meters import check_meter_spec

    ids = [s for s in args.kernels.split(",") if s] if args.kernels else None
    check_out_dir(args.out)
    check_meter_spec(args.meter)
    tab, report = run_bench(args.suite or str(default_suite()), args.out, model=args.model,
                            profile_spec=args.profile, device=args.device, meter=args.meter,
                            max_sizes=args.max_sizes, ids=ids,
                            progress=sys.stderr.isatty() and not args.json and not args.quiet,
                            measured=args.measured, counts=not args.no_counts, rounds=args.sweep_rounds)
    if args.json:
        print(to_json({"table": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                  for k, v in r.items()} for r in tab.to_dict("records")],
                       "report": str(report)}))
        return 0
    print(print_table(tab))
    print(f"report: {report} (plots in {report.parent / 'plots'})")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark learned vs analytical vs blend on a suite (LLMPerf Table IV)",
                       description="Measure every kernel and problem size of a suite manifest on the device, "
                                   "predict each with the analytical model, the learned model and the blend, and "
                                   "write a report: per-kernel MAPE and Spearman rho, Figure-2 plots, Markdown.")
    p.add_argument("--suite", help="suite manifest (default: the project's own suite, suites/kernelcast/suite.json)")
    p.add_argument("--out", required=True, help="report directory")
    p.add_argument("--model", help="learned model directory (without: analytical only)")
    p.add_argument("--profile", help="device profile (default: this device's calibration)")
    add_device(p)
    add_meter(p)
    p.add_argument("--kernels", help="comma-separated kernel ids to run")
    p.add_argument("--max-sizes", type=positive_int, help="only the first N sizes of each kernel")
    p.add_argument("--measured", metavar="CSV",
                   help="reuse the measurements of an earlier run (its REPORT_DIR/results.csv) instead of measuring "
                        "again; every instance must be in it, from the same kernel source")
    p.add_argument("--sweep-rounds", type=positive_int, default=4, metavar="N", help=f"{SWEEP_ROUNDS_HELP} (4)")
    p.add_argument("--no-counts", action="store_true",
                   help="predict without measuring each instance's data-dependent loop trips and branch outcomes "
                        "(by default one counting launch per instance, on its inputs)")
    add_quiet(p)
    p.add_argument("--json", action="store_true", help="print the per-kernel table as JSON")
    p.set_defaults(func=cmd_bench)

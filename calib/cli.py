"""``kernelcast calib``: run the calibration microbenchmarks and write a device profile.

Registered by the main command line through :func:`add_parser`; also runnable on its own::

    python -m kernelcast.calib.cli --out calib/profiles/pocl-local.json [--quick] [--device auto] [--meter auto]

With ``--from-data DATASET --profile P`` no device is used: the GPU energy constants of ``P`` are
fitted to the dataset's measured energy (:mod:`calib.energy_fit`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from kernelcast.calib.local import calibrate_runs
from kernelcast.calib.microbench import BENCHES, CalibOptions
from kernelcast.calib.report import format_profile
from kernelcast.instrument.backends import select_device
from kernelcast.instrument.harness import HarnessError
from kernelcast.instrument.meters import check_meter_spec
from tqdm import tqdm

from kernelcast.config import device_spec
from kernelcast.errors import InputError, UsageError
from kernelcast.log import setup_logging
from kernelcast.options import ROUNDS_HELP, add_alias, add_device, add_meter, add_quiet, add_timeout, positive_float

log = logging.getLogger(__name__)


def _parse_bytes(text: str) -> int:
    t = text.strip().lower().replace(" ", "")
    mult = 1
    for suffix, m in (("gib", 1 << 30), ("mib", 1 << 20), ("kib", 1 << 10), ("g", 1 << 30), ("m", 1 << 20),
                      ("k", 1 << 10), ("b", 1)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    try:
        v = float(t) * mult
    except ValueError:
        raise UsageError(f"--max-bytes {text!r}: expected a size such as 64MiB") from None
    if not math.isfinite(v):
        raise UsageError(f"--max-bytes {text!r}: expected a size such as 64MiB")
    if v < 64 * 1024:
        raise UsageError(f"--max-bytes {text!r}: must be at least 64KiB")
    return int(v)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="PROFILE.json", help="where to write the device profile (JSON)")
    add_device(p)
    add_meter(p)
    p.add_argument("--quick", action="store_true",
                   help="fewer points, fewer configurations and shorter launches (under a minute)")
    p.add_argument("--only", metavar="LIST",
                   help=f"comma-separated benchmarks to run (default all: {','.join(BENCHES)})")
    p.add_argument("--max-bytes", metavar="SIZE", help="largest working set of the memory sweeps (default 512MiB)")
    add_timeout(p)
    p.add_argument("--max-load", type=positive_float, metavar="LOAD",
                   help="CPU devices: refuse to calibrate while the host 1-minute load average is above LOAD "
                        "(checked before every benchmark, waiting up to 30 s for it to drop); the largest load "
                        "seen is written into the profile either way (calib_host_load)")
    p.add_argument("--rounds", dest="runs", type=int, default=1, metavar="N",
                   help=ROUNDS_HELP + " (the whole calibration N times; each value the median of the rounds, with its "
                                      "spread, (max - min) / median, in the profile and the table; 1; at most 20)")
    add_alias(p, "--runs", "--rounds")
    p.add_argument("--json", action="store_true", help="print the profile JSON instead of the table")
    add_quiet(p, dest="no_progress", old="--no-progress")
    g = p.add_argument_group("fitting a GPU profile's energy constants to measured energy (no device is used)")
    g.add_argument("--from-data", metavar="DATASET",
                   help="fit the GPU energy constants of --profile (idle power, energy per fp32 FMA, voltage floor) "
                        "to the measured energy of DATASET, e.g. a clock sweep of Kernel Tuner's synthetic fp32 "
                        "kernel imported with 'dataset import-kt', and write the profile with them to --out")
    g.add_argument("--profile", metavar="PROFILE",
                   help="with --from-data: the GPU profile to fit (bundled name or JSON path)")
    g.add_argument("--analysis-cache", action="append", default=[], metavar="DIR",
                   help="with --from-data: a cache of the shared static analyses of imported rows "
                        "(kernelcast analyze --cache); repeatable")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``calib`` on the main command line's subparsers."""
    p = subparsers.add_parser(
        "calib", help="measure the device with microbenchmarks and write a device profile",
        description="Run calibration microbenchmarks on an OpenCL device (peak operation rates, bandwidth "
                    "and latency per memory level, launch / work-group / barrier overheads, and with an "
                    "energy meter idle power, energy per operation and per access, power against busy "
                    "compute units and the transient ratio) and write them as a device profile (JSON).",
        epilog="Values are printed with units and the r^2 of the fit that produced them. Energy values are "
               "absent when no meter exists (meter none). With --from-data no device is used: a GPU profile's "
               "energy constants are fitted to measured energy.")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _benches(only: str | None) -> tuple[str, ...]:
    if not only:
        return BENCHES
    chosen = tuple(b.strip() for b in only.split(",") if b.strip())
    bad = [b for b in chosen if b not in BENCHES]
    if bad or not chosen:
        raise UsageError(f"--only {only!r}: unknown benchmark(s) {', '.join(bad) or '(none given)'}; "
                     f"choose from {', '.join(BENCHES)}")
    return chosen


def run_from_data(args: argparse.Namespace, out: Path) -> int:
    """``calib --from-data DATASET --profile P``: P with its GPU energy constants fitted to DATASET."""
    from kernelcast.calib.energy_fit import energy_rows, fit_energy_constants, fit_summary
    from kernelcast.calib.profile import ProfileError, load_profile
    from kernelcast.datagen.frame import DataError, load_measured_frame

    if not args.profile:
        raise UsageError("--from-data needs --profile: the GPU profile whose energy constants are fitted")
    for d in args.analysis_cache:
        if not Path(d).is_dir():
            raise UsageError(f"--analysis-cache {d}: no such directory")
    try:
        profile = load_profile(args.profile)
    except (ProfileError, OSError, ValueError) as e:
        raise UsageError(f"--profile {args.profile}: {e}") from None
    try:
        frame = load_measured_frame(args.from_data)[0]
    except DataError as e:
        raise UsageError(f"--from-data {args.from_data}: {e}") from None
    rows = energy_rows(frame)
    if len(rows) < 2:
        raise UsageError(f"--from-data {args.from_data}: {len(rows)} row(s) with a measured energy and time; "
                         "the fit needs at least 2")
    fitted, fit = fit_energy_constants(profile, rows, list(args.analysis_cache),
                                       source=f"fitted: kernelcast calib --from-data {Path(args.from_data).name}")
    fitted.save(out)
    if args.json:
        print(json.dumps(fit_summary(fit), indent=1))
    else:
        print(fit.table())
        print(f"\nprofile written to {out}")
    return 0


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {args.out}: is a directory; give a file name such as profile.json")
    if not out.parent.is_dir():
        raise UsageError(f"--out {args.out}: directory {out.parent} does not exist")
    if args.from_data is not None:
        return run_from_data(args, out)
    if args.profile or args.analysis_cache:
        raise UsageError("--profile and --analysis-cache go with --from-data")
    benches = _benches(args.only)
    max_bytes = _parse_bytes(args.max_bytes) if args.max_bytes else None
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.max_load is not None and not args.max_load > 0:
        raise UsageError("--max-load must be positive")
    if not 1 <= args.runs <= 20:
        raise UsageError(f"--rounds {args.runs}: give 1 to 20 rounds")
    check_meter_spec(args.meter)
    device = select_device(device_spec(args.device))
    meter = device.meter if args.meter == "auto" else args.meter
    want_energy = meter != "none" and "energy" in benches
    opts = CalibOptions(quick=args.quick, benches=benches, max_bytes=max_bytes, max_load=args.max_load)

    bar: Any = None
    if not args.no_progress and sys.stderr.isatty():
        bar = tqdm(total=args.runs * len([b for b in benches if b != "energy" or want_energy]), unit="bench",
                   dynamic_ncols=True, desc="calib", file=sys.stderr)
    started: list[str] = []

    def on_bench(name: str) -> None:
        if bar is not None:
            if started:
                bar.update(1)
            bar.set_description(f"calib {name}")
        started.append(name)

    def on_step(label: str) -> None:
        if bar is not None:
            bar.set_postfix_str(label[:40], refresh=True)
        log.info("calib: %s", label)

    t0 = time.perf_counter()
    try:
        profile, cal = calibrate_runs(device, opts, args.runs, meter=meter, timeout_s=args.timeout, on_step=on_step,
                                      on_bench=on_bench)
    except HarnessError as e:
        if bar is not None:
            bar.close()
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print("kernelcast: calib interrupted; no profile written", file=sys.stderr)
        return 130
    if bar is not None:
        if started:
            bar.update(1)
        bar.close()
    wall = time.perf_counter() - t0
    if not profile.values:
        print(f"kernelcast: error: calibration measured nothing ({'; '.join(cal.failures) or 'no benchmark ran'}); "
              f"no profile written", file=sys.stderr)
        return 1
    profile.save(out)
    if args.json:
        print(profile.to_json(), end="")
    else:
        print(format_profile(profile))
        runs = f", {args.runs} runs" if args.runs > 1 else ""
        print(f"\nprofile written to {out} ({len(profile.values)} values, {cal.n_runs} measurements{runs}, "
              f"{wall:.1f} s)")
    if cal.failures:
        print(f"kernelcast: warning: {len(cal.failures)} measurement(s) failed (see the notes)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelcast.calib.cli",
                                     description="Calibrate an OpenCL device and write a device profile.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v, -vv)")
    add_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    try:
        return run(args)
    except InputError as e:
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

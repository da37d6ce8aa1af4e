"""The ``kernelcast`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from kernelcast.console import fmt_table, human_bytes, load_kernel_source, to_json
from kernelcast.errors import InputError, Terminated, UsageError
from kernelcast.log import setup_logging
from kernelcast.options import Parser, default_action, nonneg_float, nonneg_int, positive_float, positive_int, seed

log = logging.getLogger("kernelcast")


# ---------------------------------------------------------------------------------------------
# devices


def cmd_devices(args: argparse.Namespace) -> int:
    from instrument.backends import list_devices

    devs = list_devices(probe=not args.no_probe)
    if args.json:
        print(json.dumps([d.to_dict() for d in devs], indent=2))
        return 0
    if not devs:
        print("no OpenCL or CUDA devices found")
        return 1
    rows = []
    for d in devs:
        rows.append([
            d.spec, d.name, d.type, d.platform_version.split(" Linux")[0][:32], d.compute_units,
            d.max_work_group_size, d.preferred_wg_multiple, human_bytes(d.global_mem_bytes),
            human_bytes(d.local_mem_bytes),
            {True: "yes", False: "NO", None: "?"}[d.builds]
            + (" (not vector math)" if d.vector_builtins is False else ""),
            d.meter,
        ])
    print(fmt_table(rows, ["device", "name", "type", "platform", "CUs", "max WG", "WG multiple",
                           "global mem", "local mem", "builds", "meter"]))
    for d in devs:
        if d.builds is False:
            print(f"\n{d.spec} cannot build kernels: {d.build_error}")
        elif d.vector_builtins is False:
            print(f"\n{d.spec} builds kernels, but not every builtin ({d.vector_error}); 'auto' prefers "
                  f"another device")
    return 0


# ---------------------------------------------------------------------------------------------
# measure


def _policy(args: argparse.Namespace) -> Any:
    from instrument.runner import TimingPolicy

    p = TimingPolicy()      # ranges are checked by the parser (kernelcast.options)
    if args.repeats is not None:
        p.min_repeats = args.repeats
        p.max_repeats = max(p.max_repeats, args.repeats)
    if args.min_time is not None:
        p.min_time_s = args.min_time
    if args.warmup is not None:
        p.warmup = args.warmup
    p.seed = args.seed
    return p


def cmd_measure(args: argparse.Namespace) -> int:
    from datagen.args import UnsupportedArgument, complete_args
    from instrument.backends import select_device
    from instrument.harness import Harness, HarnessError
    from instrument.memcheck import check_buffer_memory
    from instrument.meters import check_meter_spec
    from instrument.runner import validate_geometry
    from kernelcast.argspec import arg_arrays, check_against_signature, parse_arg, parse_size
    from kernelcast.config import device_spec
    from kernelcast.schema import LaunchConfig

    t0 = time.perf_counter()
    kernel, params = load_kernel_source(args.kernel, args.name, args.build_options or "")
    gsize = parse_size(args.gsize, "--gsize")
    lsize = parse_size(args.lsize, "--lsize") if args.lsize else None
    given = [parse_arg(a) for a in args.arg]
    check_against_signature(given, params, kernel.name)
    policy = _policy(args)
    check_meter_spec(args.meter)
    device = select_device(device_spec(args.device), language=kernel.language)
    validate_geometry(device, gsize, lsize)
    try:
        bindings, filled = complete_args(params, given, gsize, lsize)
    except UnsupportedArgument as e:
        raise UsageError(f"{e}; give it with --arg") from None
    check_buffer_memory(device, bindings)
    if filled and not args.json:
        print(f"note: simple argument selection for {', '.join(filled)} (LLMPerf II-B1: arrays of gsize "
              f"elements, scalars = gsize)", file=sys.stderr)
    config = LaunchConfig(gsize=gsize, lsize=lsize, args=bindings)
    arrays = arg_arrays(bindings)
    counts: dict[str, Any] | None = None
    try:
        with Harness(device, meter=args.meter, timeout_s=args.timeout) as h:
            m = h.run(kernel, config, policy, arrays=arrays)
            if args.counts and m.status == "ok":
                counts = _site_counts(h, kernel, config, arrays, policy)
    except HarnessError as e:
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - t0
    if args.json:
        d = m.to_dict()
        d["device_spec"] = device.spec
        d["command_wall_s"] = wall
        if counts is not None:
            d["site_counts"] = counts
        print(to_json(d))
    else:
        print(_measurement_text(m, device, wall))
        if counts is not None:
            print(_counts_text(counts))
    return 0 if m.status == "ok" else 1


def _site_counts(h: Any, kernel: Any, config: Any, arrays: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``measure --counts``: one counting launch (instrument.counters) with the same arguments and data."""
    from instrument.counters import measure_counts
    from instrument.rewrite import InstrumentedRunError, RewriteError

    try:
        sc = measure_counts(h, kernel, config, arrays=arrays, policy=policy)
    except (RewriteError, InstrumentedRunError) as e:
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return {"values": sc.values(), **sc.to_dict()}


def _counts_text(c: dict[str, Any]) -> str:
    if "error" in c:
        return f"site counts not measured: {c['error']}"
    lines = [f"site counts over {c['items']} sampled work-items" + ("" if c["values"] else ": no loop or if sites")]
    for sym, (entries, trips) in sorted(c["loops"].items()):
        lines.append(f"  {sym:<18} loop   {c['values'][sym]:12.4g} trips/entry  ({trips} trips, {entries} entries)")
    for sym, (evals, taken) in sorted(c["branches"].items()):
        lines.append(f"  {sym:<18} if     {c['values'][sym]:12.4g} taken        ({taken} of {evals})")
    return "\n".join(lines)


def _arg_text(a: dict[str, Any]) -> str:
    if a["kind"] == "scalar":
        return f"{a['name']}={a['value']}"
    return f"{a['name']}={a['kind']}:{a['dtype']}:{a['count']}"


def _measurement_text(m: Any, device: Any, wall: float) -> str:
    lines = [
        f"kernel      {m.kernel_name}   ({m.kernel_id})",
        f"device      {device.spec} {device.name}",
        f"launch      gsize={'x'.join(map(str, m.gsize))} lsize={'x'.join(map(str, m.lsize)) if m.lsize else 'auto'}",
        "arguments   " + " ".join(_arg_text(a) for a in m.args),
        f"status      {m.status}" + (f": {m.reason}" if m.reason else ""),
    ]
    if m.time is not None:
        t = m.time
        lines += [
            f"time        median {t.median_us:.3f} us   min {t.min_us:.3f} us   mean {t.mean_us:.3f} us",
            f"spread      IQR {t.iqr_us:.3f} us   CV {100 * t.cv:.2f} %   over {t.repeats} repeats",
        ]
    if m.energy_j is not None:
        lines.append(f"energy      {m.energy_j * 1e3:.4f} mJ/launch   avg power {m.avg_power_w:.1f} W"
                     + (f"   dynamic {m.dynamic_energy_j * 1e3:.4f} mJ" if m.dynamic_energy_j is not None else ""))
    else:
        lines.append(f"energy      not measured (meter: {m.meter})")
    if m.compile_log:
        lines.append("compile log:\n" + m.compile_log[:4000])
    overhead = wall / (sum(m.time.times_us) * 1e-6) if m.time and sum(m.time.times_us) > 0 else None
    lines.append(f"wall        {wall:.2f} s" + (f"   (harness overhead {overhead:.1f}x the summed kernel time)"
                                                 if overhead else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# parser


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="device: auto (default; KERNELCAST_DEVICE), OpenCL P:D, cuda:N, or part of its "
                                    "name")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kernelcast",
        description="GPU kernel performance/energy datasets, time and energy prediction, and benchmarks.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v, -vv)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("devices", help="list OpenCL and CUDA devices and the energy meter for each",
                       description="List every OpenCL platform/device (and CUDA device, with pycuda) with compute "
                                   "units, work-group limits, "
                                   "memory sizes, whether it builds kernels, and the energy meter --meter auto "
                                   "would use.")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-probe", action="store_true", help="skip the trial build per device")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("measure", help="measure one kernel launch configuration",
                       description="Build a kernel, bind its arguments, and time (and meter) one launch "
                                   "configuration in an isolated worker process.",
                       epilog="Arguments: NAME=buffer:DTYPE:COUNT[:random|zeros|ones], NAME=local:DTYPE:COUNT, "
                              "NAME=VALUE, NAME=@FILE.npy (a buffer holding the file's values). Arguments not given "
                              "get simple selection (arrays of gsize elements, scalars = gsize).")
    p.add_argument("--kernel", required=True, help="OpenCL C (.cl) or CUDA (.cu) source file")
    p.add_argument("--name", help="kernel name (needed when the file has several)")
    p.add_argument("--gsize", required=True, help="global size: N, NxM or NxMxK")
    p.add_argument("--lsize", help="local size (default: chosen by the driver)")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC", help="bind one argument (repeatable)")
    p.add_argument("--build-options", default="", help="OpenCL build options, e.g. '-DTILE=16'")
    _add_device(p)
    p.add_argument("--meter", default="auto", help="energy meter: auto, nvml, rapl, none (default auto)")
    p.add_argument("--repeats", type=positive_int, help="minimum timed repeats (default 10)")
    p.add_argument("--min-time", type=nonneg_float, help="minimum summed kernel time in seconds (default 0.1)")
    p.add_argument("--warmup", type=nonneg_int, help="warm-up launches (default 2)")
    p.add_argument("--timeout", type=positive_float, default=60.0, help="seconds before a running kernel is killed")
    p.add_argument("--seed", type=seed, default=0, help="seed of random buffer contents")
    p.add_argument("--counts", action="store_true",
                   help="also count loop trips and branch outcomes per site (one instrumented launch, same data)")
    p.add_argument("--json", action="store_true", help="print the whole measurement record as JSON")
    p.set_defaults(func=cmd_measure)

    from kernelcast import demo

    demo.add_parser(sub)
    for register in _extra_commands():
        register(sub)
    return parser


def _extra_commands() -> list[Callable[[Any], object]]:
    """Subcommands of later pipeline stages register here."""
    from bench.cli import add_parser as bench_parser
    from calib.cli import add_parser as calib_parser
    from datagen.cli import add_parsers as datagen_parsers
    from models.cli import add_parsers as model_parsers
    from train.cli import add_parser as train_parser

    return [datagen_parsers, calib_parser, model_parsers, bench_parser, train_parser]


def _default_actions(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Commands with actions and a default one (``dataset DS`` = ``dataset summary DS``)."""
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for name, sub in getattr(action, "choices", {}).items():
            default = getattr(sub, "default_action", None)
            if default and sub._subparsers is not None:
                names = {n for a in sub._subparsers._group_actions for n in getattr(a, "choices", {})}
                argv = default_action(argv, name, default, names)
    return argv


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = _default_actions(parser, list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:     # a malformed command line (one line printed by Parser.error), or --help
        return e.code if isinstance(e.code, int) else 2
    setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except InputError as e:     # every bad-input exception of the project: one line, exit 2
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("kernelcast: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("kernelcast: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:     # output piped into a reader that stopped (| head): not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

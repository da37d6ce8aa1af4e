"""The ``kernelcast`` command line."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kernelcast import __version__
from kernelcast.console import (
    fmt_table,
    human_bytes,
    launch_macros_used,
    load_kernel_source,
    options_for_launch,
    to_json,
)
from kernelcast.errors import InputError, Terminated, UsageError
from kernelcast.log import setup_logging
from kernelcast.options import (
    GSIZE_HELP,
    LSIZE_HELP,
    NAME_HELP,
    REPEATS_HELP,
    ROUNDS_HELP,
    Parser,
    add_build_options,
    add_device,
    add_kernel_file,
    add_meter,
    add_timeout,
    default_action,
    nonneg_float,
    nonneg_int,
    positive_int,
    seed,
)

log = logging.getLogger("kernelcast")


# ---------------------------------------------------------------------------------------------
# devices


def cmd_devices(args: argparse.Namespace) -> int:
    from kernelcast.instrument.backends import list_devices

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
    from kernelcast.instrument.runner import TimingPolicy

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


#: configurations ``measure --configs`` takes and rounds ``--rounds`` takes: bounded work
MEASURE_MAX_CONFIGS = 64
MEASURE_MAX_ROUNDS = 32


def _measure_specs(args: argparse.Namespace) -> list[dict[str, str]]:
    from kernelcast.console import read_configs_csv

    if args.configs and (args.gsize or args.lsize):
        raise UsageError("give --gsize (and --lsize) or --configs FILE.csv, not both")
    if args.configs and args.counts:
        raise UsageError("--counts counts one configuration: give --gsize, not --configs")
    if args.rounds is not None and args.rounds > MEASURE_MAX_ROUNDS:
        raise UsageError(f"--rounds {args.rounds}: at most {MEASURE_MAX_ROUNDS}")
    if args.configs:
        specs = read_configs_csv(args.configs)
        if len(specs) > MEASURE_MAX_CONFIGS:
            raise UsageError(f"--configs {args.configs}: {len(specs)} configurations, at most {MEASURE_MAX_CONFIGS} "
                             f"(split the file)")
        return specs
    if not args.gsize:
        raise UsageError("give --gsize (and --lsize), or --configs FILE.csv")
    return [{"gsize": args.gsize, "lsize": args.lsize or ""}]


def cmd_measure(args: argparse.Namespace) -> int:
    """``kernelcast measure``: one configuration (``--gsize``/``--lsize``) or the configurations of a
    CSV file (``--configs``), each measured in ``--rounds`` rounds (interleaved across the
    configurations, each round a full timing window) and its rounds pooled, each round weighing the
    same (:func:`instrument.runner.pool_rounds`, as datagen pools a sweep's rounds)."""
    from kernelcast.argspec import arg_arrays, check_against_signature, parse_arg, parse_size
    from kernelcast.config import device_spec
    from kernelcast.datagen.args import UnsupportedArgument, complete_args
    from kernelcast.instrument.backends import select_device
    from kernelcast.instrument.harness import Harness, HarnessError
    from kernelcast.instrument.memcheck import check_buffer_memory
    from kernelcast.instrument.meters import check_meter_spec
    from kernelcast.instrument.runner import pool_rounds, validate_geometry
    from kernelcast.schema import LaunchConfig

    t0 = time.perf_counter()
    specs = _measure_specs(args)
    opts = args.build_options or ""
    used = launch_macros_used(args.kernel, opts)
    launch_opts = [opts] * len(specs)
    if used:                    # Kernel Tuner's block_size_x, ... : defined per configuration
        for i, spec in enumerate(specs):
            where = f"--configs {args.configs}: configuration {i + 1}: " if args.configs else ""
            try:
                g = parse_size(spec["gsize"], "--gsize")
                ls = parse_size(spec["lsize"], "--lsize") if spec.get("lsize") else None
            except InputError as e:
                raise UsageError(f"{where}{e}") from None
            launch_opts[i] = options_for_launch(opts, used, g, ls, where)
    kernel, params = load_kernel_source(args.kernel, args.name, launch_opts[0])
    given = [parse_arg(a) for a in args.arg]
    check_against_signature(given, params, kernel.name)
    policy = _policy(args)
    check_meter_spec(args.meter)
    device = select_device(device_spec(args.device), language=kernel.language)
    pnames = {p.name for p in params}
    configs: list[LaunchConfig] = []
    filled_all: set[str] = set()
    for i, spec in enumerate(specs):
        where = f"--configs {args.configs}: configuration {i + 1}: " if args.configs else ""
        try:
            gsize = parse_size(spec["gsize"], "--gsize")
            lsize = parse_size(spec["lsize"], "--lsize") if spec.get("lsize") else None
            mine = given + [parse_arg(f"{k}={v}") for k, v in spec.items() if k in pnames and v not in (None, "")]
            check_against_signature(mine, params, kernel.name)
            validate_geometry(device, gsize, lsize)
            bindings, filled = complete_args(params, mine, gsize, lsize)
            check_buffer_memory(device, bindings)
        except UnsupportedArgument as e:
            raise UsageError(f"{where}{e}; give it with --arg") from None
        except InputError as e:
            if not where:
                raise
            raise UsageError(f"{where}{e}") from None
        filled_all.update(filled)
        configs.append(LaunchConfig(gsize=gsize, lsize=lsize, args=bindings))
    if filled_all and not args.json:
        print(f"note: simple argument selection for {', '.join(sorted(filled_all))} (LLMPerf II-B1: arrays of gsize "
              f"elements, scalars = gsize)", file=sys.stderr)
    rounds = args.rounds or 1
    runs: list[list[Any]] = [[] for _ in configs]
    counts: dict[str, Any] | None = None
    try:
        with Harness(device, meter=args.meter, timeout_s=args.timeout) as h:
            for r in range(rounds):
                for i, config in enumerate(configs):
                    if r and not any(m.status == "ok" for m in runs[i]):
                        continue                    # a configuration that failed is not run again
                    k_i = kernel if launch_opts[i] == kernel.build_options else \
                        replace(kernel, build_options=launch_opts[i])
                    runs[i].append(h.run(k_i, config, policy, arrays=arg_arrays(config.args)))
            first = runs[0][0]
            if args.counts and first.status == "ok":
                counts = _site_counts(h, kernel, configs[0], arg_arrays(configs[0].args), policy)
    except HarnessError as e:
        print(f"kernelcast: error: {e}", file=sys.stderr)
        return 1
    pooled = [pool_rounds(rs) for rs in runs]
    wall = time.perf_counter() - t0
    if args.json:
        docs = []
        for m, rs in zip(pooled, runs):
            d = m.to_dict()
            d["device_spec"] = device.spec
            ok = [x for x in rs if x.status == "ok" and x.time is not None]
            if rounds > 1:
                d["rounds"] = len(ok)
                d["round_medians_us"] = [x.time.median_us for x in ok]
            docs.append(d)
        if counts is not None:
            docs[0]["site_counts"] = counts
        if args.configs:
            print(to_json(docs))
        else:
            docs[0]["command_wall_s"] = wall
            print(to_json(docs[0]))
    elif args.configs:
        print(_measurements_table(pooled, runs, device, wall))
    else:
        print(_measurement_text(pooled[0], device, wall, len(runs[0]) if rounds > 1 else 0))
        if counts is not None:
            print(_counts_text(counts))
    return 0 if all(m.status == "ok" for m in pooled) else 1


def _site_counts(h: Any, kernel: Any, config: Any, arrays: dict[str, Any], policy: Any) -> dict[str, Any]:
    """``measure --counts``: one counting launch (instrument.counters) with the same arguments and data."""
    from kernelcast.instrument.counters import measure_counts
    from kernelcast.instrument.rewrite import InstrumentedRunError, RewriteError

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


def _measurements_table(pooled: list[Any], runs: list[list[Any]], device: Any, wall: float) -> str:
    """``measure --configs``: a row per configuration (its rounds pooled)."""
    rows = []
    for m, rs in zip(pooled, runs):
        t = m.time if m.status == "ok" else None
        meds = [x.time.median_us for x in rs if x.status == "ok" and x.time is not None]
        rows.append(["x".join(map(str, m.gsize)), "x".join(map(str, m.lsize)) if m.lsize else "auto",
                     m.status + (f": {m.reason}" if m.reason else ""), t.median_us if t else None,
                     t.min_us if t else None, 100 * t.cv if t else None, len(meds),
                     max(meds) / min(meds) if len(meds) > 1 and min(meds) > 0 else None])
    head = f"kernel {pooled[0].kernel_name}; device {device.spec} {device.name}"
    return "\n".join([head, fmt_table(rows, ["gsize", "lsize", "status", "median us", "min us", "CV %", "rounds",
                                              "max/min round"]), f"wall {wall:.2f} s"])


def _measurement_text(m: Any, device: Any, wall: float, rounds: int = 0) -> str:
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
            f"spread      IQR {t.iqr_us:.3f} us   CV {100 * t.cv:.2f} %   over {t.repeats} repeats"
            + (f" in {rounds} rounds (pooled, each weighing the same)" if rounds > 1 else ""),
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. With ``command`` (the command word of a command line), only the
    stage module that defines that command is imported; the other stages' commands are placeholders
    with their one-line help (enough for ``kernelcast --help`` and for argparse's list of choices).
    Without it, every command's full parser."""
    parser = Parser(
        prog="kernelcast",
        description="GPU kernel performance/energy datasets, time and energy prediction, and benchmarks.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v, -vv)")
    parser.add_argument("--version", action="version", version=f"kernelcast {__version__}")
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

    p = sub.add_parser("measure", help="measure kernel launch configurations",
                       description="Build a kernel, bind its arguments, and time (and meter) one launch "
                                   "configuration (or those of --configs) in an isolated worker process.",
                       epilog="Arguments: NAME=buffer:DTYPE:COUNT[:random|zeros|ones], NAME=local:DTYPE:COUNT, "
                              "NAME=VALUE, NAME=@FILE.npy (a buffer holding the file's values). Arguments not given "
                              "get simple selection (arrays of gsize elements, scalars = gsize).")
    add_kernel_file(p)
    p.add_argument("--name", help=NAME_HELP)
    p.add_argument("--gsize", help=GSIZE_HELP)
    p.add_argument("--lsize", help=LSIZE_HELP + " (default: chosen by the driver)")
    p.add_argument("--configs", metavar="CSV",
                   help=f"measure several configurations instead: columns gsize, lsize (optional) and any argument "
                        f"names (values, as predict --configs); at most {MEASURE_MAX_CONFIGS}; --json prints a list "
                        f"that predict --measured reads")
    p.add_argument("--rounds", type=positive_int, metavar="N",
                   help=f"{ROUNDS_HELP} (interleaved across the configurations, each round weighing the same: a host "
                        f"that slows down in phases then moves every configuration alike; 1; at most "
                        f"{MEASURE_MAX_ROUNDS})")
    p.add_argument("--arg", action="append", default=[], metavar="SPEC", help="bind one argument (repeatable)")
    add_build_options(p)
    add_device(p)
    add_meter(p)
    p.add_argument("--repeats", type=positive_int, help=f"{REPEATS_HELP} (10)")
    p.add_argument("--min-time", type=nonneg_float, help="minimum summed kernel time in seconds (default 0.1)")
    p.add_argument("--warmup", type=nonneg_int, help="warm-up launches (default 2)")
    add_timeout(p)
    p.add_argument("--seed", type=seed, default=0, help="seed of random buffer contents")
    p.add_argument("--counts", action="store_true",
                   help="also count loop trips and branch outcomes per site (one instrumented launch, same data)")
    p.add_argument("--json", action="store_true", help="print the whole measurement record as JSON")
    p.set_defaults(func=cmd_measure)

    from kernelcast import demo

    demo.add_parser(sub)
    for module, register, names in _stage_modules():
        if command is None or command in names:
            register_fn: Callable[[Any], object] = getattr(importlib.import_module(module), register)
            register_fn(sub)
        else:
            for name in names:
                sub.add_parser(name, help=STAGE_COMMANDS[name][2])
    return parser


#: the commands of later pipeline stages, in the order of ``--help``: name -> (module, the module's
#: function that registers its commands, one-line help). A command line imports only its own
#: command's module (a stage's ``cli`` imports the stage: pandas, the static analyses, the models);
#: tests/test_cli_consistency.py checks this table against the parsers the modules register.
STAGE_COMMANDS: dict[str, tuple[str, str, str]] = {
    "corpus": ("kernelcast.datagen.cli", "add_parsers",
               "build kernel corpora (ingest real code, or generate synthetic kernels)"),
    "datagen": ("kernelcast.datagen.cli", "add_parsers",
                "measure a corpus over sampled launch configurations into a dataset"),
    "dataset": ("kernelcast.datagen.cli", "add_parsers",
                "summarize, check or repair a dataset; import Kernel Tuner caches"),
    "calib": ("kernelcast.calib.cli", "add_parser",
              "measure the device with microbenchmarks and write a device profile"),
    "predict": ("kernelcast.models.cli", "add_parsers",
                "predict time (and energy) of a kernel for launch configurations"),
    "tune": ("kernelcast.models.cli", "add_parsers",
             "search launch configurations (and power caps) with the analytical model"),
    "analyze": ("kernelcast.models.cli", "add_parsers",
                "run the static analyses of imported datasets (one per distinct key, cached)"),
    "bench": ("kernelcast.bench.cli", "add_parser",
              "benchmark learned vs analytical vs blend on a suite (LLMPerf Table IV)"),
    "validate": ("kernelcast.bench.validate", "add_parser",
                 "validate the analytical model on this device: measured against predicted time ratios of "
                 "kernel pairs"),
    "train": ("kernelcast.train.cli", "add_parser", "train the learned (CodeGen regression) model on a dataset"),
    "pretrain": ("kernelcast.train.cli", "add_parser",
                 "self-supervised pretraining of the small CodeGen on unlabelled kernel corpora"),
    "blend": ("kernelcast.train.cli", "add_parser",
              "fit the analytical+learned blend on out-of-fold predictions (stacking)"),
    "evaluate": ("kernelcast.train.cli", "add_parser",
                 "the accuracy yardstick: grouped K-fold out-of-fold figures of every model on a dataset"),
    "fit-energy": ("kernelcast.train.cli", "add_parser",
                   "fit a GPU profile's energy constants to measured energy (e.g. a clock sweep)"),
}


def _stage_modules() -> list[tuple[str, str, list[str]]]:
    """(module, registering function, its commands) of :data:`STAGE_COMMANDS`, in order."""
    out: list[tuple[str, str, list[str]]] = []
    for name, (module, register, _help) in STAGE_COMMANDS.items():
        if out and out[-1][0] == module:
            out[-1][2].append(name)
        else:
            out.append((module, register, [name]))
    return out


def command_word(argv: list[str]) -> str:
    """The command of a command line: its first word that is not an option ("" when there is none)."""
    return next((a for a in argv if not a.startswith("-")), "")


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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_word(argv))
    argv = _default_actions(parser, argv)
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

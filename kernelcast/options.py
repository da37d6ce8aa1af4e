"""Option parsing and validation shared by every command.

* :class:`Parser`: the ``argparse`` parser of the command line. A malformed command line (unknown
  option, missing argument, a value of the wrong type or range) ends with one line on stderr and
  exit status 2, like every other bad input (argparse's default prints the usage as well).
* value types for ``add_argument(type=...)``: counts (:func:`positive_int`, :func:`nonneg_int`),
  finite numbers (:func:`positive_float`, :func:`nonneg_float`), fractions, seeds. A value out of
  range is refused while parsing, before the command does anything.
* the options several commands share, defined once so that a flag name has one meaning and one help
  text everywhere (:func:`add_quiet`, :func:`add_device`, :func:`add_meter`, :func:`add_kernel_file`,
  :func:`add_build_options`, :func:`add_timeout`), and hidden aliases of renamed options that still
  work and warn (:func:`add_alias`);
* path checks a command runs before any work: :func:`check_out_dir`, :func:`check_out_file`,
  :func:`check_in_dir`, :func:`check_in_file`.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kernelcast.errors import UsageError

#: largest seed accepted (numpy's generators take seeds in [0, 2**32) for the legacy API)
MAX_SEED = 2**32 - 1


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``kernelcast: error: COMMAND: message``).

    Options whose value is a compiler flag (:func:`add_build_options`) take the next word as their
    value even when it starts with a dash: ``--build-options -DBLOCK=256`` is read as
    ``--build-options=-DBLOCK=256`` (argparse alone reads the dash-leading word as an option)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        args = join_dash_values(list(sys.argv[1:] if args is None else args), self._dash_value_options())
        return super().parse_known_args(args, namespace)

    def _dash_value_options(self) -> set[str]:
        return {o for a in self._actions if getattr(a, "dash_value", False) for o in a.option_strings}

    def error(self, message: str) -> NoReturn:
        # ``kernelcast COMMAND``: the command; ``python -m kernelcast.bench.NAME``: the module
        prog = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        if prog.startswith("-m "):
            prog = prog[3:].removeprefix("kernelcast.")
        where = f"{prog}: " if prog else ""
        hint = f" (see '{self.prog} --help')"
        self.exit(2, f"kernelcast: error: {where}{message}{hint}\n")


def join_dash_values(argv: list[str], options: set[str]) -> list[str]:
    """``OPTION VALUE`` -> ``OPTION=VALUE`` for the ``options`` whose value may start with a dash (up to
    a ``--``, after which every word is positional)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out.extend(argv[i:])
            break
        if a in options and i + 1 < len(argv) and argv[i + 1].startswith("-") and argv[i + 1] != "--":
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


class RenamedOption(argparse.Action):
    """A hidden, renamed option: stores into the new option's destination and warns on stderr."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", append: bool = False,
                 **kw: object) -> None:
        self.new, self.append = new, append
        super().__init__(option_strings, dest, **kw)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        print(f"kernelcast: warning: {option_string} is now {self.new}", file=sys.stderr)
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def add_alias(p: argparse.ArgumentParser, old: str, new: str) -> None:
    """``old`` as a hidden alias of the option ``new`` already defined on ``p`` (same destination,
    type and value): it still works, warns that it is now ``new``, and is left out of ``--help``."""
    target = next(a for a in p._actions if new in a.option_strings)
    flag = target.nargs == 0
    extra: dict[str, Any] = {} if flag or target.type is None else {"type": target.type}
    p.add_argument(old, action=RenamedOption, new=new, append=isinstance(target, argparse._AppendAction),
                   dest=target.dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS,
                   nargs=0 if flag else None, const=target.const if flag else None,
                   metavar=target.metavar, choices=target.choices, **extra)


#: the help of the options that several commands share (one meaning per flag name)
QUIET_HELP = "no progress output on stderr"
DEVICE_HELP = "device: auto (default; KERNELCAST_DEVICE), OpenCL P:D, cuda:N, or part of its name"
PROFILE_DEVICE_HELP = DEVICE_HELP + " (its cached calibration is the profile when --profile is not given)"
METER_HELP = "energy meter: auto (default), nvml, rapl, none"
KERNEL_FILE_HELP = "kernel source file: OpenCL C (.cl) or CUDA (.cu)"
BUILD_OPTIONS_HELP = ("the kernel's build options (OpenCL C compiler, or nvcc for .cu), e.g. "
                      "--build-options '-DTILE=16 -DBLOCK=256'; a value starting with '-' is taken as it is")
NAME_HELP = "kernel name (needed when the file has several)"
GSIZE_HELP = "global size: N, NxM or NxMxK"
LSIZE_HELP = "local size: N, NxM or NxMxK"
TIMEOUT_HELP = "seconds before a running kernel is killed"
SWEEP_ROUNDS_HELP = ("measure each local-size sweep in N interleaved rounds, pooled (1: once): a host that slows "
                     "down in phases makes one window per configuration pick the fastest local size by chance")
MAX_ROUNDS_HELP = "rounds of one configuration at most"
REPEATS_HELP = "minimum timed launches of each configuration"
ROUNDS_HELP = "measure in N rounds, pooled"


def add_quiet(p: argparse.ArgumentParser, dest: str = "quiet", old: str | None = None) -> None:
    """``--quiet``: no progress bar or progress lines (``dest`` the command's own name for it;
    ``old`` a former spelling kept as a hidden alias)."""
    p.add_argument("--quiet", dest=dest, action="store_true", help=QUIET_HELP)
    if old:
        add_alias(p, old, "--quiet")


def add_device(p: argparse.ArgumentParser, help: str = DEVICE_HELP) -> None:
    p.add_argument("--device", help=help)


def add_meter(p: argparse.ArgumentParser) -> None:
    p.add_argument("--meter", default="auto", help=METER_HELP)


def add_kernel_file(p: argparse.ArgumentParser, required: bool = True) -> None:
    p.add_argument("--kernel", required=required, metavar="FILE", help=KERNEL_FILE_HELP)


def add_build_options(p: argparse.ArgumentParser) -> None:
    a = p.add_argument("--build-options", default="", metavar="OPTIONS", help=BUILD_OPTIONS_HELP)
    a.dash_value = True  # type: ignore[attr-defined]


def add_timeout(p: argparse.ArgumentParser, default: float = 60.0) -> None:
    p.add_argument("--timeout", type=positive_float, default=default, help=f"{TIMEOUT_HELP} ({default:g})")


def _number(text: str, kind: type) -> float:
    try:
        v = int(text, 0) if kind is int else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return v


def positive_int(text: str) -> int:
    """A count that must be at least 1."""
    v = int(_number(text, int))
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return v


def nonneg_int(text: str) -> int:
    """A count that may be 0."""
    v = int(_number(text, int))
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return v


def positive_float(text: str) -> float:
    """A finite number above 0 (a timeout, a rate, a power)."""
    v = _number(text, float)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return v


def nonneg_float(text: str) -> float:
    """A finite number that may be 0 (a minimum time, a weight decay)."""
    v = _number(text, float)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return v


def fraction(text: str) -> float:
    """A number in (0, 1]."""
    v = _number(text, float)
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def unit_fraction(text: str) -> float:
    """A number in [0, 1)."""
    v = _number(text, float)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return v


def seed(text: str) -> int:
    """A random seed: an integer in [0, 2**32)."""
    v = int(_number(text, int))
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in [0, {MAX_SEED}], got {text}")
    return v


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """An integer type in [lo, hi] (for counts whose work grows with the value)."""

    def check(text: str) -> int:
        v = int(_number(text, int))
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {text}")
        return v

    check.__name__ = f"integer in [{lo}, {hi}]"
    return check


def check_out_dir(path: str | Path, option: str = "--out") -> Path:
    """An output directory: may exist (as a directory) or be created; never an existing file."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a directory")
    parent = _first_existing(p.parent)
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: {parent} is not a directory")
    return p


def check_out_file(path: str | Path, option: str = "--out") -> Path:
    """An output file: its directory must exist; it must not be a directory."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    if not p.parent.is_dir():
        raise UsageError(f"{option} {path}: directory {p.parent} does not exist")
    return p


def check_in_dir(path: str | Path, option: str, what: str = "directory") -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{option} {path}: no such {what}")
    if not p.is_dir():
        raise UsageError(f"{option} {path}: not a {what} (a file)")
    return p


def check_in_file(path: str | Path, option: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{option} {path}: no such file")
    if not p.is_file():
        raise UsageError(f"{option} {path}: not a file")
    return p


def read_text_file(path: str | Path, option: str) -> str:
    """The text of a UTF-8 input file; :class:`UsageError` for a missing, binary or unreadable one."""
    p = check_in_file(path, option)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{option} {path}: not a UTF-8 text file (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot read: {e.strerror}") from None


def _first_existing(p: Path) -> Path:
    p = p.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def default_action(argv: list[str], command: str, action: str, actions: set[str]) -> list[str]:
    """``COMMAND X ...`` with X not one of ``actions`` (nor an option) becomes ``COMMAND ACTION X ...``:
    a command whose actions are subcommands (``dataset check DS``) keeps its plain form
    (``dataset DS``)."""
    try:
        i = argv.index(command)
    except ValueError:
        return argv
    # only the command word itself (options before it are global, e.g. -v)
    if any(not a.startswith("-") for a in argv[:i]):
        return argv
    rest = argv[i + 1:]
    if rest and (rest[0] in actions or rest[0] in ("-h", "--help")):
        return argv
    return [*argv[: i + 1], action, *rest]

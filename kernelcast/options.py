"""Option parsing and validation shared by every command.

* :class:`Parser`: the ``argparse`` parser of the command line. A malformed command line (unknown
  option, missing argument, a value of the wrong type or range) ends with one line on stderr and
  exit status 2, like every other bad input (argparse's default prints the usage as well).
* value types for ``add_argument(type=...)``: counts (:func:`positive_int`, :func:`nonneg_int`),
  finite numbers (:func:`positive_float`, :func:`nonneg_float`), fractions, seeds. A value out of
  range is refused while parsing, before the command does anything.
* path checks a command runs before any work: :func:`check_out_dir`, :func:`check_out_file`,
  :func:`check_in_dir`, :func:`check_in_file`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from kernelcast.errors import UsageError

#: largest seed accepted (numpy's generators take seeds in [0, 2**32) for the legacy API)
MAX_SEED = 2**32 - 1


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (``kernelcast: error: COMMAND: message``)."""

    def error(self, message: str) -> NoReturn:
        prog = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        where = f"{prog}: " if prog else ""
        hint = f" (see '{self.prog} --help')"
        self.exit(2, f"kernelcast: error: {where}{message}{hint}\n")


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

"""What every command-line module shares: tables and JSON for the terminal, and reading the kernel
file a command is given. Imports no pipeline stage."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

from kernelcast.clang import ParseError, kernel_signatures
from kernelcast.cuda import (
    LAUNCH_MACROS,
    UnsupportedKernel,
    cuda_kernel_info,
    cuda_kernel_signatures,
    defined_macros,
    flatten_includes,
    include_dirs_of,
    is_cuda_path,
    launch_defines,
    looks_like_cuda,
)
from kernelcast.errors import UsageError
from kernelcast.schema import Kernel


def fmt_table(rows: list[list[Any]], header: list[str]) -> str:
    """A plain-text table: numbers right-aligned, ``None`` shown as ``-``."""
    cells = [[str(c) for c in header]] + [[_fmt_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, r in enumerate(cells):
        lines.append("  ".join(c.rjust(w) if j and _numeric(c) else c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt_cell(c: Any) -> str:
    if c is None:
        return "-"
    if isinstance(c, float):
        if c == 0:
            return "0"
        if abs(c) >= 1e5 or abs(c) < 1e-3:
            return f"{c:.3g}"
        return f"{c:.4g}" if abs(c) < 100 else f"{c:.1f}"
    return str(c)


def _numeric(s: str) -> bool:
    try:
        float(s.replace("%", ""))
    except ValueError:
        return False
    return True


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def json_number(x: Any) -> float | None:
    """A float for JSON output: None for anything missing, NaN or infinite."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def to_json(obj: Any) -> str:
    """The JSON a ``--json`` option prints (indented; anything unknown as its string)."""
    return json.dumps(obj, indent=2, default=str)


def load_kernel_source(path: str, name: str | None, build_options: str = "") -> tuple[Kernel, list[Any]]:
    """Read a kernel file and pick one kernel; :class:`UsageError` for anything wrong with the input."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no such kernel file: {path}")
    try:
        source = p.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None

    if is_cuda_path(p.name) or (not p.name.lower().endswith(".cl") and looks_like_cuda(source)):
        return _load_cuda(source, p, name, build_options)
    try:
        sigs = kernel_signatures(source, build_options, filename=p.name)
    except ParseError as e:
        raise UsageError(f"cannot parse {path}: {e}") from None
    if not sigs:
        raise UsageError(f"{path} defines no __kernel function")
    if name is None:
        if len(sigs) > 1:
            raise UsageError(f"{path} defines {len(sigs)} kernels ({', '.join(sigs)}); choose one with --name")
        name = next(iter(sigs))
    if name not in sigs:
        raise UsageError(f"{path} has no kernel named {name!r} (it has: {', '.join(sigs)})")
    return Kernel(source=source, name=name, build_options=build_options, origin=str(p)), sigs[name]


def _load_cuda(source: str, p: Path, name: str | None, build_options: str) -> tuple[Kernel, list[Any]]:
    """A CUDA (or HIP) kernel file (``--name`` carries template arguments: ``reduce<float, 256>``).
    Its ``#include "..."`` files found next to it or in the ``-I`` directories of
    ``build_options`` are inlined: the kernel's source is self-contained."""
    source = flatten_includes(source, include_dirs_of(build_options), base_dir=str(p.resolve().parent))
    try:
        sigs = cuda_kernel_signatures(source, build_options, filename=p.name)
        if not sigs:
            raise UsageError(f"{p} defines no __global__ kernel")
        if name is None:
            if len(sigs) > 1:
                raise UsageError(f"{p} defines {len(sigs)} kernels ({', '.join(sigs)}); choose one with --name")
            name = next(iter(sigs))
        info = cuda_kernel_info(source, name, build_options, filename=p.name)
    except UnsupportedKernel as e:
        raise UsageError(f"{p}: {e}") from None
    except ParseError as e:
        raise UsageError(f"cannot parse {p} as CUDA: {e}") from None
    return Kernel(source=source, name=info.name, language="cuda", build_options=build_options,
                  origin=str(p)), info.params


def launch_macros_used(path: str, build_options: str = "") -> list[str]:
    """The macros Kernel Tuner defines from a launch (``block_size_x/y/z``, ``grid_size_x/y/z``,
    ``kernel_tuner``) that the kernel file (with its ``#include "..."`` files) refers to and
    ``build_options`` does not define; empty for a file that cannot be read."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    text = flatten_includes(text, include_dirs_of(build_options), base_dir=str(p.resolve().parent))
    have = defined_macros(build_options)
    return [m for m in (*LAUNCH_MACROS, "kernel_tuner") if m not in have and re.search(rf"\b{m}\b", text)]


def options_for_launch(build_options: str, used: list[str], gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                       where: str = "") -> str:
    """``build_options`` with Kernel Tuner's launch macros for one launch when the kernel uses
    them (``used``: :func:`launch_macros_used`), as Kernel Tuner defines them
    (:func:`kernelcast.cuda.launch_defines`); :class:`UsageError` when the kernel uses
    ``block_size_*``/``grid_size_*`` and no local size is given."""
    if not used:
        return build_options
    sized = [m for m in used if m != "kernel_tuner"]
    if sized and not lsize:
        raise UsageError(f"{where}the kernel uses {', '.join(sized)} (Kernel Tuner's launch macros, defined from the "
                         f"local size): give --lsize, or define them in --build-options")
    return launch_defines(build_options, gsize, lsize)


def read_configs_csv(path: str) -> list[dict[str, str]]:
    """The rows of a ``--configs`` CSV file (a ``gsize`` column, optionally ``lsize`` and one per
    argument), or a :class:`UsageError` naming what is wrong with it."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--configs {path}: no such file")
    try:
        with open(p, newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"--configs {path}: not a CSV file ({e})") from None
    except OSError as e:
        raise UsageError(f"--configs {path}: cannot read: {e.strerror}") from None
    if not rows:
        raise UsageError(f"--configs {path}: no rows")
    if "gsize" not in rows[0]:
        raise UsageError(f"--configs {path}: needs a 'gsize' column (and optionally 'lsize' and one per argument)")
    return rows

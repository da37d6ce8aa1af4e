"""The command-line syntax for kernel arguments and sizes.

``NAME=buffer:DTYPE:COUNT[:random|zeros|ones]``, ``NAME=local:DTYPE:COUNT``, ``NAME=VALUE``;
sizes as ``1048576``, ``1024x1024`` or ``1024,1024``.
"""

from __future__ import annotations

import re

from kernelcast.clang import KernelParam
from kernelcast.cltypes import parse_type
from kernelcast.errors import InputError
from kernelcast.schema import ArgBinding

_INITS = ("random", "zeros", "ones")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(InputError, ValueError):
    """Malformed command-line input (the CLI exits with status 2)."""


def parse_size(text: str, what: str = "size") -> tuple[int, ...]:
    parts = [p for p in re.split(r"[x,*]", text.strip().lower()) if p != ""]
    if not 1 <= len(parts) <= 3:
        raise SpecError(f"{what} {text!r}: expected 1-3 positive integers such as 1048576 or 1024x1024")
    out = []
    for p in parts:
        try:
            v = int(p, 0)
        except ValueError:
            raise SpecError(f"{what} {text!r}: {p!r} is not an integer") from None
        if v <= 0:
            raise SpecError(f"{what} {text!r}: dimensions must be positive")
        out.append(v)
    return tuple(out)


def _count(text: str, spec: str) -> int:
    try:
        v = int(text.replace("_", ""), 0)
    except ValueError:
        raise SpecError(f"--arg {spec!r}: element count {text!r} is not an integer") from None
    if v < 0:
        raise SpecError(f"--arg {spec!r}: element count must not be negative")
    return v


def parse_arg(spec: str) -> ArgBinding:
    """Parse one ``--arg`` value."""
    if "=" not in spec:
        raise SpecError(f"--arg {spec!r}: expected NAME=buffer:DTYPE:COUNT, NAME=local:DTYPE:COUNT or NAME=VALUE")
    name, _, value = spec.partition("=")
    name = name.strip()
    if not _NAME_RE.match(name):
        raise SpecError(f"--arg {spec!r}: {name!r} is not an argument name")
    parts = value.split(":")
    kind = parts[0].strip().lower()
    if kind in ("buffer", "local"):
        if len(parts) not in (3, 4) or (kind == "local" and len(parts) != 3):
            form = "buffer:DTYPE:COUNT[:random|zeros|ones]" if kind == "buffer" else "local:DTYPE:COUNT"
            raise SpecError(f"--arg {spec!r}: expected {name}={form}")
        try:
            t = parse_type(parts[1])
        except ValueError as e:
            raise SpecError(f"--arg {spec!r}: {e}") from None
        init = parts[3].strip().lower() if len(parts) == 4 else "random"
        if init not in _INITS:
            raise SpecError(f"--arg {spec!r}: buffer contents {init!r} must be one of {', '.join(_INITS)}")
        return ArgBinding(name=name, kind="buffer" if kind == "buffer" else "local", dtype=t.name,
                          count=_count(parts[2], spec), init=init)
    if value.strip() == "":
        raise SpecError(f"--arg {spec!r}: no value")
    return ArgBinding(name=name, kind="scalar", dtype="", value=value.strip())


def check_against_signature(bindings: list[ArgBinding], params: list[KernelParam], kernel: str) -> None:
    """Every binding must name a parameter of the kernel, with the right kind."""
    by_name = {p.name: p for p in params}
    seen: set[str] = set()
    for b in bindings:
        if b.name in seen:
            raise SpecError(f"argument {b.name!r} given twice")
        seen.add(b.name)
        p = by_name.get(b.name)
        if p is None:
            names = ", ".join(p.name for p in params) or "none"
            raise SpecError(f"kernel {kernel!r} has no argument {b.name!r} (it has: {names})")
        if p.kind != b.kind:
            want = {"buffer": f"{p.name}=buffer:{p.dtype}:COUNT", "local": f"{p.name}=local:{p.dtype}:COUNT",
                    "scalar": f"{p.name}=VALUE"}[p.kind]
            raise SpecError(f"argument {b.name!r} is a {p.qualifier} {p.kind} of {p.dtype} in {kernel!r}, "
                            f"given as a {b.kind}; use {want}")
        if b.kind == "scalar":
            try:
                from kernelcast.cltypes import scalar_value

                scalar_value(parse_type(p.dtype), b.value)
            except ValueError as e:
                raise SpecError(f"argument {b.name!r}: {e}") from None
            b.dtype = p.dtype
        elif _known(p.dtype) and parse_type(b.dtype) != parse_type(p.dtype):
            raise SpecError(f"argument {b.name!r} is a {p.dtype} buffer in {kernel!r}, given as {b.dtype}; "
                            f"use {b.name}={b.kind}:{p.dtype}:COUNT")


def _known(t: str) -> bool:
    try:
        parse_type(t)
    except ValueError:
        return False
    return True

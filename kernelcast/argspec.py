"""The command-line syntax for kernel arguments and sizes.

``NAME=buffer:DTYPE:COUNT[:random|zeros|ones]``, ``NAME=local:DTYPE:COUNT``, ``NAME=VALUE``,
``NAME=@FILE.npy`` (a buffer holding the file's values: real inputs, e.g. a CSR matrix, whose
data-dependent loop trips :mod:`instrument.counters` can count); sizes as ``1048576``,
``1024x1024`` or ``1024,1024``.

A file binding is ``ArgBinding(kind="buffer", init="array", value="@FILE")``; its element type
comes from the file's dtype (``float32`` -> ``float``...), and :func:`check_against_signature`
regroups it into the parameter's vector type (a ``float4*`` takes a ``float32`` file of 4k
values). :func:`arg_arrays` loads the arrays to pass as ``arrays=`` to a harness run.
"""

from __future__ import annotations

import os
import re

import numpy as np

from kernelcast.clang import KernelParam
from kernelcast.cltypes import parse_type, scalar_value
from kernelcast.errors import InputError
from kernelcast.schema import ArgBinding

_INITS = ("random", "zeros", "ones")
#: numpy dtype of a .npy file -> the OpenCL element type of its buffer
_NPY_TYPES = {"float32": "float", "float64": "double", "float16": "half", "int8": "char", "uint8": "uchar",
              "int16": "short", "uint16": "ushort", "int32": "int", "uint32": "uint", "int64": "long",
              "uint64": "ulong"}
#: largest .npy file one --arg may bind
MAX_FILE_BYTES = 4 << 30
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
    if value.strip().startswith("@"):
        return _file_arg(name, value.strip()[1:], spec)
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


def _npy_header(path: str, spec: str) -> tuple[str, int]:
    """The OpenCL element type and the number of values of a .npy file (header only)."""
    if not path:
        raise SpecError(f"--arg {spec!r}: expected NAME=@FILE.npy")
    if not os.path.isfile(path):
        raise SpecError(f"--arg {spec!r}: no such file {path!r}")
    if os.path.getsize(path) > MAX_FILE_BYTES:
        raise SpecError(f"--arg {spec!r}: {path} is larger than {MAX_FILE_BYTES >> 30} GiB")
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise SpecError(f"--arg {spec!r}: {path} is not a .npy array file ({first})") from None
    if not isinstance(a, np.ndarray):
        raise SpecError(f"--arg {spec!r}: {path} holds several arrays; give one .npy array")
    dt = _NPY_TYPES.get(a.dtype.newbyteorder("=").name)
    if dt is None:
        raise SpecError(f"--arg {spec!r}: {path} holds {a.dtype} values; expected one of {', '.join(_NPY_TYPES)}")
    return dt, int(a.size)


def _file_arg(name: str, path: str, spec: str) -> ArgBinding:
    dtype, n = _npy_header(path, spec)
    return ArgBinding(name=name, kind="buffer", dtype=dtype, count=n, value="@" + path, init="array")


def is_file_arg(b: ArgBinding) -> bool:
    """Whether a binding holds a file's values (``NAME=@FILE.npy``)."""
    return b.kind == "buffer" and b.init == "array" and isinstance(b.value, str) and b.value.startswith("@")


def arg_arrays(bindings: list[ArgBinding]) -> dict[str, np.ndarray]:
    """The initial contents of the file bindings (``NAME=@FILE.npy``), by argument name, in each
    binding's element type (for ``arrays=`` of a harness run)."""
    out: dict[str, np.ndarray] = {}
    for b in bindings:
        if not is_file_arg(b):
            continue
        path = str(b.value)[1:]
        try:
            a = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise SpecError(f"argument {b.name!r}: {path} cannot be read ({type(e).__name__})") from None
        t = parse_type(b.dtype)
        flat = np.ascontiguousarray(a).reshape(-1)
        if flat.dtype.newbyteorder("=") != t.numpy or flat.size != int(b.count or 0) * t.storage_width:
            raise SpecError(f"argument {b.name!r}: {path} changed since it was read (now {flat.size} {flat.dtype})")
        out[b.name] = flat.astype(t.numpy, copy=False)
    return out


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
                scalar_value(parse_type(p.dtype), b.value)
            except ValueError as e:
                raise SpecError(f"argument {b.name!r}: {e}") from None
            b.dtype = p.dtype
        elif is_file_arg(b) and _known(p.dtype):
            _fit_file(b, p.dtype, kernel)
        elif _known(p.dtype) and parse_type(b.dtype) != parse_type(p.dtype):
            raise SpecError(f"argument {b.name!r} is a {p.dtype} buffer in {kernel!r}, given as {b.dtype}; "
                            f"use {b.name}={b.kind}:{p.dtype}:COUNT")


def _fit_file(b: ArgBinding, dtype: str, kernel: str) -> None:
    """A file binding of scalar values regrouped into the parameter's (vector) type."""
    want, have = parse_type(dtype), parse_type(b.dtype)
    n = int(b.count or 0) * have.storage_width
    if want.numpy != have.numpy:
        raise SpecError(f"argument {b.name!r} is a {dtype} buffer in {kernel!r}; {str(b.value)[1:]} holds "
                        f"{have.numpy} values, expected {want.numpy}")
    if n % want.storage_width:
        raise SpecError(f"argument {b.name!r} is a {dtype} buffer in {kernel!r}; {str(b.value)[1:]} holds {n} "
                        f"values, not a whole number of {dtype} ({want.storage_width} each)")
    b.dtype, b.count = want.name, n // want.storage_width


def _known(t: str) -> bool:
    try:
        parse_type(t)
    except ValueError:
        return False
    return True

"""OpenCL C type names and their host (numpy) representation."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: OpenCL scalar types -> numpy dtypes (OpenCL C 1.2 section 6.1.1; long is 64-bit, bool is
#: not a valid kernel argument type)
SCALAR_TYPES: dict[str, np.dtype] = {
    "char": np.dtype(np.int8),
    "uchar": np.dtype(np.uint8),
    "short": np.dtype(np.int16),
    "ushort": np.dtype(np.uint16),
    "int": np.dtype(np.int32),
    "uint": np.dtype(np.uint32),
    "long": np.dtype(np.int64),
    "ulong": np.dtype(np.uint64),
    "half": np.dtype(np.float16),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "size_t": np.dtype(np.uint64),
    "ptrdiff_t": np.dtype(np.int64),
    "intptr_t": np.dtype(np.int64),
    "uintptr_t": np.dtype(np.uint64),
}
_ALIASES = {
    "unsigned char": "uchar", "unsigned short": "ushort", "unsigned int": "uint",
    "unsigned long": "ulong", "unsigned": "uint", "signed char": "char",
}
VECTOR_WIDTHS = (2, 3, 4, 8, 16)
_TYPE_RE = re.compile(r"^([a-z_]+?)(2|3|4|8|16)?$")


@dataclass(frozen=True)
class CLType:
    """An OpenCL scalar or vector type: ``float4`` is base ``float``, width 4.

    A 3-component vector occupies the storage of 4 components (OpenCL C 1.2 section 6.1.5).
    """

    name: str
    base: str
    width: int

    @property
    def numpy(self) -> np.dtype:
        return SCALAR_TYPES[self.base]

    @property
    def storage_width(self) -> int:
        return 4 if self.width == 3 else self.width

    @property
    def itemsize(self) -> int:
        """Bytes of one element of this type in a buffer."""
        return self.numpy.itemsize * self.storage_width

    @property
    def is_float(self) -> bool:
        return self.numpy.kind == "f"


def parse_type(name: str) -> CLType:
    """Parse an OpenCL type name; raise ``ValueError`` for anything else."""
    n = " ".join(name.split())
    n = _ALIASES.get(n, n)
    m = _TYPE_RE.match(n)
    if not m or m.group(1) not in SCALAR_TYPES:
        raise ValueError(f"unknown OpenCL type {name!r} (expected e.g. float, int, uchar, float4, int2)")
    width = int(m.group(2) or 1)
    if width > 1 and m.group(1) in ("size_t", "ptrdiff_t", "intptr_t", "uintptr_t"):
        raise ValueError(f"{name!r}: {m.group(1)} has no vector form")
    return CLType(n, m.group(1), width)


def is_known_type(name: str) -> bool:
    try:
        parse_type(name)
    except ValueError:
        return False
    return True


def scalar_value(t: CLType, value: object) -> np.ndarray | np.generic:
    """A host value of type ``t`` for a scalar kernel argument.

    Vector scalars take a single value (broadcast) or a sequence/comma list of ``width`` values.
    Integer overflow is an error, not a silent wrap.
    """
    dt = t.numpy
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if "," in value else [value.strip()]
        vals: list[float | int] = []
        for p in parts:
            try:
                vals.append(float(p) if (dt.kind == "f" or any(c in p for c in ".eE")
                                         and not p.lower().startswith("0x")) else int(p, 0))
            except ValueError:
                raise ValueError(f"{value!r} is not a valid {t.name} value") from None
    elif isinstance(value, (list, tuple, np.ndarray)):
        vals = list(value)
    else:
        vals = [value]  # type: ignore[list-item]
    if dt.kind in "iu":
        info = np.iinfo(dt)
        for v in vals:
            if float(v) != int(v):
                raise ValueError(f"{value!r} is not an integer, but the argument is {t.name}")
            if not info.min <= int(v) <= info.max:
                raise ValueError(f"{value!r} is out of range for {t.name} [{info.min}, {info.max}]")
        vals = [int(v) for v in vals]
    if t.width == 1:
        if len(vals) != 1:
            raise ValueError(f"{value!r}: {t.name} takes one value")
        return dt.type(vals[0])
    if len(vals) == 1:
        vals = vals * t.width
    if len(vals) != t.width:
        raise ValueError(f"{value!r}: {t.name} takes 1 or {t.width} values")
    arr = np.zeros(t.storage_width, dtype=dt)
    arr[: t.width] = vals
    return arr

"""``python -m kernelcast.opencl_check [--strict]``: exit 0 if some OpenCL device can build a
kernel; with ``--strict``, only if the device ``auto`` picks also builds the vector math builtins
(a driver whose compiler aborts on them measures most kernels but not all).

Used by ``make`` before running anything (strict first: on failure it installs another driver
where it can, then checks again without ``--strict``), and prints what it found.
"""

from __future__ import annotations

import sys

from kernelcast.instrument.backends import DeviceNotFound, select_device


def main(argv: list[str] | None = None) -> int:
    strict = "--strict" in (sys.argv[1:] if argv is None else argv)
    try:
        d = select_device("auto")
    except DeviceNotFound as e:
        print(f"OpenCL: {e}", file=sys.stderr)
        return 1
    what = f"OpenCL device {d.spec}: {d.name} ({d.platform_version.split(' Linux')[0].strip()})"
    if d.vector_builtins is False:
        print(f"{what} builds kernels, but not every builtin: {d.vector_error}", file=sys.stderr)
        return 1 if strict else 0
    print(what)
    return 0


if __name__ == "__main__":
    sys.exit(main())

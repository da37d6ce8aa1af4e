"""``python -m kernelcast.opencl_check``: exit 0 if some OpenCL device can build a kernel.

Used by ``make`` before running anything, and prints what it found.
"""

from __future__ import annotations

import sys


def main() -> int:
    from instrument.backends import DeviceNotFound, select_device

    try:
        d = select_device("auto")
    except DeviceNotFound as e:
        print(f"OpenCL: {e}", file=sys.stderr)
        return 1
    print(f"OpenCL device {d.spec}: {d.name} ({d.platform_version.split(' Linux')[0].strip()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

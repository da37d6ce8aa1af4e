"""Compile checking of synthetic kernels on an OpenCL device, many kernels per build.

The builds go through :func:`instrument.backends.opencl.trial_build`, the project's one compile
check; nothing here touches pyopencl.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kernelcast.instrument.backends import DeviceNotFound, select_device
from kernelcast.instrument.backends.opencl import trial_build

from kernelcast.schema import Kernel

if TYPE_CHECKING:
    from kernelcast.instrument.backends import DeviceInfo

log = logging.getLogger(__name__)

#: the language version every kernel is built as (its own ``build_options`` are appended)
CL_STD_OPTION = "-cl-std=CL1.2"


def default_device() -> DeviceInfo | None:
    """The device the shared selection picks (first GPU that builds, else first device that
    builds); ``None`` when there is none."""
    try:
        return select_device("auto")
    except DeviceNotFound as exc:
        log.debug("no OpenCL device: %s", exc)
        return None


def compile_check(kernels: Sequence[Kernel], device: DeviceInfo | None = None, batch: int = 64) -> dict[str, str]:
    """Build ``kernels`` on an OpenCL device (default: :func:`default_device`); map kernel name ->
    ``""`` (ok) or the build log.

    Kernels are concatenated ``batch`` at a time into one program (their names, and their helper
    functions' names, are unique); a failing batch is bisected down to the failing kernels. Each
    kernel is built with ``-cl-std=CL1.2`` plus its own ``build_options``.
    """
    found = device if device is not None else default_device()
    if found is None:
        raise RuntimeError("compile_check: no working OpenCL device")
    dev: DeviceInfo = found
    results: dict[str, str] = {}
    # group by build options, keep order; a name already in the current batch starts a new one
    by_opts: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_opts.setdefault(k.build_options, []).append(k)
    t0 = time.perf_counter()
    n_builds = 0

    def check(group: list[Kernel], options: str) -> None:
        nonlocal n_builds
        n_builds += 1
        tb = trial_build(dev, "\n".join(k.source for k in group), options)
        if tb.ok:
            for k in group:
                results[k.name] = ""
        elif len(group) == 1:
            results[group[0].name] = tb.log
        else:
            mid = len(group) // 2
            check(group[:mid], options)
            check(group[mid:], options)

    for opts_str, ks in by_opts.items():
        options = (CL_STD_OPTION + " " + opts_str).strip()
        cur: list[Kernel] = []
        names: set[str] = set()
        for k in ks:
            if len(cur) >= max(1, batch) or k.name in names:
                check(cur, options)
                cur, names = [], set()
            cur.append(k)
            names.add(k.name)
        if cur:
            check(cur, options)
    log.info("compile_check: %d kernels, %d builds, %.1f s", len(kernels), n_builds, time.perf_counter() - t0)
    return results

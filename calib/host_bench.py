"""The ``host`` calibration benchmark: launch overhead as the host sees it.

The harness reports device time only (profiling events); this measures what a program pays on
the host for an empty one-work-item kernel, in a separate (spawned) process, through the
backend on a queue without profiling, as a plain application launches:

* ``sync_us``: median host wall time of one launch and the wait for it (latency);
* ``batch_us``: host wall time per launch of ``n`` back-to-back launches with one wait at the
  end (throughput).

Both include the Python call overhead of the bindings (about 1-3 us).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from typing import Any

import numpy as np
from kernelcast.calib import kernels as K
from kernelcast.instrument.backends import BackendError, DeviceInfo, backend_for

from kernelcast.clang import kernel_signatures
from kernelcast.schema import ArgBinding, Kernel


def _host_overhead_worker(device: DeviceInfo, n: int) -> dict[str, float]:
    src, name = K.host_overhead_source()
    params = kernel_signatures(src)[name]
    gsize, lsize = (1,), (1,)
    with backend_for(device)(device, profiling=False) as be:
        br = be.build(Kernel(src, name))
        if not br.ok:
            raise BackendError(f"{name} does not build: {br.log.strip()[:300]}")
        bound = be.bind(params, [ArgBinding(params[0].name, "buffer", "uint", 16, init="zeros")], seed=0)
        knl = be.prepare(br.program, name, bound)
        for _ in range(20):
            be.enqueue(knl, gsize, lsize)
            be.synchronize()
        sync: list[float] = []
        for _ in range(n):
            t0 = time.perf_counter()
            be.enqueue(knl, gsize, lsize)
            be.synchronize()
            sync.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        be.enqueue(knl, gsize, lsize, count=n)
        be.synchronize()
        batch = (time.perf_counter() - t0) / n
        be.release(bound)
    return {"sync_us": float(np.median(sync)) * 1e6, "batch_us": batch * 1e6, "n": float(n)}


def measure_host_overhead(device: DeviceInfo, n: int = 300, timeout_s: float = 120.0) -> dict[str, Any]:
    """Host wall time per launch of an empty kernel, in a spawned process: ``sync_us``,
    ``batch_us`` and ``n`` (``{"error": ...}`` on failure)."""
    try:
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn")) as ex:
            fut = ex.submit(_host_overhead_worker, device, n)
            res: dict[str, Any] = fut.result(timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - any failure means "not measured", with the reason
        return {"error": f"{type(e).__name__}: {e}"}
    res["n"] = int(res["n"])
    return res

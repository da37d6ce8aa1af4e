"""The reference kernel: measured every few minutes during datagen to notice a machine that drifts.

A fixed compute-bound kernel (``REF_SOURCE``, a few milliseconds on a CPU device) is measured
with a fixed policy. Contention, a lower clock or a thermal limit can only make it slower, so
the check compares each measurement with the fastest one of the run: a check more than
``tolerance`` slower marks the rows measured since the last good check as suspect; at the next
good check they are measured again (rows with ``remeasure_reason = "drift"``, which readers
prefer to the suspect originals). Every check is logged in ``DATASET/reference.jsonl``, not
among the rows.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel, LaunchConfig, Measurement

REF_SOURCE = """__kernel void kernelcast_reference(__global const float *a, __global float *c, const int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  float x = a[i], y = 0.0f;
  for (int k = 0; k < 512; ++k) y = y * x + 1.0f;
  c[i] = y;
}"""
REF_KERNEL = Kernel(REF_SOURCE, "kernelcast_reference", dims=1, origin="kernelcast reference")
REF_N = 1 << 15
REF_CONFIG = LaunchConfig((REF_N,), (64,), [ArgBinding("a", "buffer", "float", REF_N),
                                            ArgBinding("c", "buffer", "float", REF_N),
                                            ArgBinding("n", "scalar", "int", value=REF_N)])
REF_POLICY = TimingPolicy(warmup=2, min_repeats=10, min_time_s=0.05, max_repeats=200, max_time_s=5.0)


@dataclass
class ReferenceCheck:
    """The drift state of one run."""

    every_s: float = 300.0
    tolerance: float = 0.10
    best_us: float | None = None
    last_t: float | None = None
    checks: int = 0
    drifted: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    def due(self, now: float | None = None) -> bool:
        if self.every_s <= 0:
            return False
        now = time.monotonic() if now is None else now
        return self.last_t is None or now - self.last_t >= self.every_s

    def record(self, m: Measurement, now: float | None = None) -> tuple[bool, float | None]:
        """Take one reference measurement: (good, its time over the fastest of the run)."""
        self.last_t = time.monotonic() if now is None else now
        self.checks += 1
        if m.status != "ok" or m.time is None:
            self.history.append({"status": m.status, "ratio": None})
            return False, None
        med = m.time.median_us
        self.best_us = med if self.best_us is None else min(self.best_us, med)
        ratio = med / self.best_us
        good = ratio <= 1 + self.tolerance
        self.drifted += not good
        self.history.append({"status": "ok", "median_us": med, "ratio": ratio})
        return good, ratio


REFERENCE_LOG = "reference.jsonl"


def log_check(root: Path, m: Measurement, ratio: float | None, good: bool) -> None:
    """Append one check to ``DATASET/reference.jsonl`` (fsync'd; not a dataset row)."""
    t = m.time
    rec = {"measured_at": time.time(), "status": m.status, "median_us": t.median_us if t else None,
           "cv": t.cv if t else None, "ratio": ratio, "good": good, "machine": m.machine}
    with open(root / REFERENCE_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())

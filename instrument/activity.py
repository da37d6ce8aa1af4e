"""How much of its work a kernel does under given arguments: per work-item memory activity.

The memory-analysis rewrite (:mod:`instrument.rewrite`) records, per pointer argument, the range
of elements a launch touched. That cannot tell a launch in which every work-item does its work
from one in which a scalar bound (``if (id * k + i < N)``) lets only a handful of work-items read
their input: both touch a range. This module derives a second instrumented kernel from the same
rewrite whose guard also records, for a sample of the work-items, *which* arguments each touched
(a bit mask of argument slots) and *how many bytes* it accessed (every access counted, repeats
included). From one run of it:

* ``active_fraction``: the smallest, over the arguments the launch touched at all, of the share
  of sampled work-items that touched that argument. 1.0 means every work-item reached every
  array; LLMPerf's Listing 1 (``summation(in, out, N, k)`` reading ``in[id*k+i]`` while
  ``id*k+i < N``) with ``N = 1`` gives ``1/gsize`` (only work-item 0 reads ``in``), with
  ``N = k * gsize`` it gives 1.0. Kernels in which by design one work-item per group writes a
  result get ``1/wg`` under every setting: compare the figure between settings of one kernel.
* ``per_arg``: that share per argument, which :mod:`datagen.memargs` ranks settings by.
* ``bytes_per_item``: bytes accessed per work-item, averaged over all sampled work-items.

Work-items are sampled with an odd stride (``lin % stride == 0``, ``stride`` the smallest odd
number keeping at most ``max_tracked`` work-items), so a pattern of period a power of two (e.g.
``get_local_id(0) == 0``) is sampled without bias. The guard text is replaced in the rewritten
source; nothing in :mod:`instrument.rewrite` changes, so the same crash-free bounds semantics hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from kernelcast.instrument.rewrite import (
    _GUARD_32,
    _GUARD_64,
    _SINK_ALIGN,
    REC_NAME,
    AccessExtent,
    InstrumentedRun,
    InstrumentedRunError,
    KernelRunner,
    RewriteResult,
    instrumented_config,
)
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.schema import ArgBinding, Kernel

#: work-items whose activity is recorded at most (2 words each in the record buffer)
MAX_TRACKED = 1 << 16
#: slots the bit mask can hold (63 in 64-bit mode, 31 in 32-bit mode)
_MASK_BITS = {True: 62, False: 30}

_TRACK = """\
  if (s <= MASKBITS) {
    ulong lin = get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2));
    ulong stride = (ulong)r[WIBASE];
    if (stride > 0 && lin % stride == 0) {
      __global RT* w = r + WIBASE + 1 + 2 * (lin / stride);
      w[0] |= ((RT)1 << s);
      w[1] = ADD(w[1], (RT)(n * sz));
    }
  }
"""


class ActivityError(ValueError):
    """The rewritten source does not hold the guard this module extends."""


@dataclass
class ActivityRewrite:
    """An activity-recording variant of a :class:`RewriteResult` (same slots, same parameters)."""

    base: RewriteResult
    kernel: Kernel
    wi_base: int            # index in the record buffer where the stride word sits

    def record_count(self, tracked: int) -> int:
        return self.wi_base + 1 + 2 * tracked


@dataclass
class Activity:
    """What one activity run found (see the module docstring)."""

    active_fraction: float | None      # None: the launch touched no argument
    per_arg: dict[str, float]          # share of sampled work-items that touched each touched argument
    bytes_per_item: float
    sampled: int                       # work-items tracked
    stride: int

    def to_dict(self) -> dict[str, Any]:
        return {"active_fraction": self.active_fraction, "per_arg": dict(self.per_arg),
                "bytes_per_item": self.bytes_per_item, "sampled": self.sampled, "stride": self.stride}


def activity_rewrite(rr: RewriteResult) -> ActivityRewrite:
    """The activity-recording variant of an instrumented kernel."""
    guard = (_GUARD_64 if rr.int64_atomics else _GUARD_32).replace("SINK_ALIGN", str(_SINK_ALIGN))
    src = rr.kernel.source
    if src.count(guard) != 1:
        raise ActivityError(f"{rr.kernel.name}: the instrumented source does not hold the guard once")
    rt = "long" if rr.int64_atomics else "int"
    add = "" if rr.int64_atomics else "add_sat"
    track = (_TRACK.replace("MASKBITS", str(_MASK_BITS[rr.int64_atomics])).replace("WIBASE", str(rr.rec_count))
             .replace("RT", rt).replace("ADD(w[1], ", f"{add}(w[1], " if add else "(w[1] + "))
    lines = guard.splitlines(keepends=True)
    at = next((i for i, ln in enumerate(lines) if "inc(e + 2)" in ln), None)   # after the access count
    if at is None:
        raise ActivityError(f"{rr.kernel.name}: the guard has no access counter")
    new_guard = "".join(lines[:at + 1]) + track + "".join(lines[at + 1:])
    kernel = Kernel(source=src.replace(guard, new_guard), name=rr.kernel.name, language=rr.kernel.language,
                    build_options=rr.kernel.build_options, dims=rr.kernel.dims,
                    origin=f"{rr.original.origin} [activity]".strip())
    return ActivityRewrite(rr, kernel, rr.rec_count)


def _stride(total: int, max_tracked: int) -> int:
    s = max(1, -(-total // max_tracked))
    return s if s == 1 or s % 2 else s + 1


def measure_activity(harness: KernelRunner, ar: ActivityRewrite, gsize: tuple[int, ...],
                     lsize: tuple[int, ...] | None, scalars: dict[str, Any], buffer_sizes: dict[str, int], *,
                     local_sizes: dict[str, int] | None = None, policy: TimingPolicy | None = None,
                     max_tracked: int = MAX_TRACKED, inits: dict[str, str] | None = None
                     ) -> tuple[InstrumentedRun, Activity]:
    """One run of the activity kernel: the extents (as :func:`instrument.rewrite.measure_instrumented`
    gives them, a crash-free bounds check) and the :class:`Activity`; ``inits``: buffer name ->
    init (:func:`instrument.backends.base.init_contents`), ``"random"`` when not given. Raise
    :class:`InstrumentedRunError` when the run is not ``ok``."""
    rr = ar.base
    total = math.prod(gsize)
    stride = _stride(total, max_tracked)
    tracked = len(range(0, total, stride))
    pol = policy or TimingPolicy(warmup=0, min_repeats=1, min_time_s=0.0, max_repeats=1, max_time_s=5.0)
    cfg, arrays = instrumented_config(rr, gsize, lsize, scalars, buffer_sizes, local_sizes, seed=pol.seed,
                                      inits=inits)
    rec = np.zeros(ar.record_count(tracked), dtype=np.int64 if rr.int64_atomics else np.int32)
    rec[:rr.rec_count] = arrays[REC_NAME]
    rec[ar.wi_base] = stride
    arrays[REC_NAME] = rec
    args = [ArgBinding(REC_NAME, "buffer", rr.rec_dtype, count=len(rec), init="array") if a.name == REC_NAME else a
            for a in cfg.args]
    cfg = type(cfg)(cfg.gsize, cfg.lsize, args)
    m = harness.run(ar.kernel, cfg, pol, readback=[REC_NAME], arrays=arrays)
    if m.status == "out_of_bounds" and hasattr(harness, "close"):
        harness.close()
    if m.status != "ok":
        raise InstrumentedRunError(m.status, m.reason or m.compile_log[:300], m)
    back = m.readback.get(REC_NAME)
    if back is None:
        raise InstrumentedRunError("runtime_error", "the record buffer was not read back", m)
    back = np.asarray(back)
    extents = rr.decode(back[:rr.rec_count], {k: int(v) for k, v in buffer_sizes.items()})
    return InstrumentedRun(m, extents), decode_activity(rr, back, ar.wi_base, tracked, stride)


def decode_activity(rr: RewriteResult, rec: np.ndarray, wi_base: int, tracked: int, stride: int) -> Activity:
    """The :class:`Activity` held in a record buffer read back after an activity run."""
    words = np.asarray(rec[wi_base + 1: wi_base + 1 + 2 * tracked], dtype=np.int64).reshape(-1, 2)
    masks, nbytes = words[:, 0], words[:, 1]
    bits = _MASK_BITS[rr.int64_atomics]
    per_arg: dict[str, float] = {}
    for sl in rr.slots.values():
        if sl.slot > bits:
            continue
        share = float(np.mean((masks >> sl.slot) & 1)) if tracked else 0.0
        if share > 0:
            per_arg[sl.name] = share
    af = min(per_arg.values()) if per_arg else None
    return Activity(af, per_arg, float(nbytes.mean()) if tracked else 0.0, tracked, stride)


def activity_of_args(harness: KernelRunner, ar: ActivityRewrite, gsize: tuple[int, ...],
                     lsize: tuple[int, ...] | None, args: list[ArgBinding]) -> tuple[list[str], Activity]:
    """Run the activity kernel with a launch's concrete arguments: the arguments it would access
    out of bounds (empty: none) and its :class:`Activity`."""
    problems, act, _ = activity_and_extents(harness, ar, gsize, lsize, args)
    return problems, act


def activity_and_extents(harness: KernelRunner, ar: ActivityRewrite, gsize: tuple[int, ...],
                         lsize: tuple[int, ...] | None, args: list[ArgBinding]
                         ) -> tuple[list[str], Activity, dict[str, AccessExtent]]:
    """:func:`activity_of_args` with the run's extents: where each argument was touched."""
    scalars = {a.name: a.value for a in args if a.kind == "scalar"}
    sizes = {a.name: int(a.count or 0) for a in args if a.kind == "buffer"}
    locs = {a.name: int(a.count or 0) for a in args if a.kind == "local"}
    inits = {a.name: a.init for a in args if a.kind == "buffer" and a.init not in ("random", "array")}
    run, act = measure_activity(harness, ar, gsize, lsize, scalars, sizes, local_sizes=locs, inits=inits or None)
    problems = [f"{n}: touches [{e.min_index}, {e.max_index}] of {e.allocated} elements"
                for n, e in run.extents.items() if e.out_of_bounds]
    problems += [f"not instrumented: {u}" for u in ar.base.unsupported]
    return problems, act, run.extents

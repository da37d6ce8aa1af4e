"""How much of its work a kernel does under given arguments: per work-item memory activity.

The memory-analysis rewrite (:mod:`instrument.rewrite`) records, per pointer argument, the range
of elements a launch touched. That cannot tell a launch in which every work-item does its work
from one in which a scalar bound (``if (id * k + i < N)``) lets only a handful of work-items read
their input: both touch a range. This module derives a second instrumented kernel from the same
rewrite whose guard also records, for a sample of the work-items, *which* arguments each touched
(a bit mask of argument slots) and *how many bytes* it accessed (every access counted, repeats
included). From one run of it:

* ``active_fraction``: the share of sampled work-items that did the kernel's work: that accessed
  every one of its *main inputs*, the work inputs (below) whose touched span in bytes is at least
  half the largest one's (a matrix product's ``A`` and ``B``, a stencil's image, not the small
  filter beside it). A work-item that helps copy the filter into local memory and then stops at
  the guard is not active. The work inputs are the pointer arguments the kernel only reads
  (declared ``const``, or never the target of a store, an atomic, a ``vstore`` or a call to a
  function of the source: see :func:`read_only_buffers`) that the launch touched over more than
  one element or from one work-item only; a buffer read at one element by several work-items
  (``int n = len[0]`` before the guard) does not make a work-item active. A kernel with no such
  input (an in-place update, a generator) counts an access to any argument that is not such a
  broadcast, and failing that any access. A
  work-item that returns at a guard before its loads is not active; one that loads, combines
  and leaves the write to another work-item (a reduction, a scan, local-memory tiling) is. A
  kernel that reads one input only in some work-items by design (``if (gid == 0) out[0] =
  init[1]``, a CSR row without entries reading no column index) counts the others as idle.
  LLMPerf's Listing 1 (``summation(in, out, N, k)`` reading ``in[id*k+i]`` while ``id*k+i < N``)
  with ``N = 1`` gives ``1/gsize`` (only work-item 0 reads ``in``), with ``N = k * gsize`` 1.0.
* ``all_args_fraction``: the smallest, over the arguments the launch touched at all, of the share
  of sampled work-items that touched that argument: 1.0 means every work-item reached every
  array. Kernels in which by design one work-item per group writes a result get ``1/wg`` here
  under every setting, so it is compared between settings of one kernel, not between kernels.
* ``per_arg``: that share per argument, which :mod:`datagen.memargs` ranks settings by.
* ``bytes_per_item``: bytes accessed per work-item, averaged over all sampled work-items.

Work-items are sampled with an odd stride (``lin % stride == 0``, ``stride`` the smallest odd
number keeping at most ``max_tracked`` work-items), so a pattern of period a power of two (e.g.
``get_local_id(0) == 0``) is sampled without bias. The guard text is replaced in the rewritten
source; nothing in :mod:`instrument.rewrite` changes, so the same crash-free bounds semantics hold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
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
from kernelcast.instrument.state import kernel_body

from kernelcast.clang import ParseError, kernel_signatures
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
    inputs: frozenset[str] = field(default_factory=frozenset)   # read-only pointer arguments

    def record_count(self, tracked: int) -> int:
        return self.wi_base + 1 + 2 * tracked


@dataclass
class Activity:
    """What one activity run found (see the module docstring)."""

    active_fraction: float | None      # share doing the kernel's work; None: the launch touched no argument
    per_arg: dict[str, float]          # share of sampled work-items that touched each touched argument
    bytes_per_item: float
    sampled: int                       # work-items tracked
    stride: int
    all_args_fraction: float | None = None   # min of per_arg: the share reaching the least-reached argument

    def to_dict(self) -> dict[str, Any]:
        return {"active_fraction": self.active_fraction, "per_arg": dict(self.per_arg),
                "bytes_per_item": self.bytes_per_item, "sampled": self.sampled, "stride": self.stride,
                "all_args_fraction": self.all_args_fraction}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Activity:
        """An :class:`Activity` from :meth:`to_dict`; a record written before ``all_args_fraction``
        existed held that figure under ``active_fraction`` (the work-input share is then unknown)."""
        d = dict(d)
        if "all_args_fraction" not in d:
            d["all_args_fraction"], d["active_fraction"] = d.get("active_fraction"), None
        return cls(**d)


_STORE_AFTER = re.compile(r"\s*(?:\[|(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)")
_WRITING_CALL = re.compile(r"^(atomic_|atom_|vstore|async_work_group)")


def _top_level_commas(text: str) -> int:
    depth, n = 0, 0
    for c in text:
        depth += c in "([{"
        depth -= c in ")]}"
        n += c == "," and depth == 0
    return n


def _call_name(before: str) -> tuple[str, int] | None:
    """The function whose argument list is open at the end of ``before`` and the position of the
    argument there (None: none is, or the end of ``before`` is inside a subscript, which only reads)."""
    depth = 0
    for i in range(len(before) - 1, -1, -1):
        c = before[i]
        if c in ")]":
            depth += 1
        elif c == "[":
            if depth == 0:
                return None
            depth -= 1
        elif c == "(":
            if depth == 0:
                m = re.search(r"(\w+)\s*$", before[:i])
                return (m.group(1), _top_level_commas(before[i + 1:])) if m else None
            depth -= 1
        elif c in ";{}" and depth == 0:
            return None
    return None


def read_only_buffers(source: str, kernel_name: str, names: Iterable[str]) -> set[str]:
    """The pointer parameters of ``names`` the kernel only reads, by a lexical look at its body:
    none of its uses is a store target (``p[i] = ``, ``p[i] += ``, ``p[i]++``, ``*p = ``), the
    pointer an atomic or async copy (first argument) or a ``vstore`` (third) writes, an argument
    of a function defined in the
    source, or the start of another pointer (``q = p + k``); names the body never uses are left
    out. Empty when the body is not found."""
    body = kernel_body(source, kernel_name)
    if body is None:
        return set()
    defined = set(re.findall(r"\b(\w+)\s*\([^;{}]*\)\s*\{", source))
    out = set()
    for n in names:
        written, uses = False, 0
        for m in re.finditer(rf"(?<![\w.]){re.escape(n)}\b", body):
            uses += 1
            before, after = body[:m.start()], body[m.end():]
            j = 0
            if after.lstrip().startswith("["):                      # skip the subscript
                depth, j = 0, after.index("[")
                while j < len(after):
                    depth += after[j] == "["
                    depth -= after[j] == "]"
                    j += 1
                    if depth == 0:
                        break
            if (_STORE_AFTER.match(after[j:]) and not after[j:].lstrip().startswith("[")) \
                    or re.search(r"(\+\+|--)\s*\*?\s*$", before) \
                    or (re.search(r"\*\s*$", before) and re.match(r"\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", after)):
                written = True
            call = _call_name(before)
            if call is not None:
                fn, pos = call
                if fn in defined or (fn.startswith("vstore") and pos == 2) \
                        or (_WRITING_CALL.match(fn) and not fn.startswith("vstore") and pos == 0):
                    written = True
            if re.search(r"(?<![=!<>])=\s*(?:\(\s*[\w\s*]+\)\s*)?$", before) and re.match(r"\s*(?:[;+\-,)])", after):
                written = True                                      # another pointer starts here
            if written:
                break
        if uses and not written:
            out.add(n)
    return out


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
    names = [sl.name for sl in rr.slots.values()]
    inputs = read_only_buffers(rr.original.source, rr.original.name, names)
    try:
        params = kernel_signatures(rr.original.source, rr.original.build_options).get(rr.original.name) or []
    except ParseError:
        params = []
    inputs |= {p.name for p in params if p.kind == "buffer" and p.is_const and p.name in names}
    return ActivityRewrite(rr, kernel, rr.rec_count, frozenset(inputs))


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
    return InstrumentedRun(m, extents), decode_activity(rr, back, ar.wi_base, tracked, stride, extents=extents,
                                                        inputs=ar.inputs)


def decode_activity(rr: RewriteResult, rec: np.ndarray, wi_base: int, tracked: int, stride: int, *,
                    extents: dict[str, AccessExtent] | None = None, inputs: Iterable[str] = ()) -> Activity:
    """The :class:`Activity` held in a record buffer read back after an activity run (``extents``:
    where each argument was touched, which tells a one-element broadcast read; ``inputs``: the
    read-only arguments, see the module docstring)."""
    words = np.asarray(rec[wi_base + 1: wi_base + 1 + 2 * tracked], dtype=np.int64).reshape(-1, 2)
    masks, nbytes = words[:, 0], words[:, 1]
    bits = _MASK_BITS[rr.int64_atomics]
    per_arg: dict[str, float] = {}
    slot_of: dict[str, int] = {}
    for sl in rr.slots.values():
        if sl.slot > bits:
            continue
        share = float(np.mean((masks >> sl.slot) & 1)) if tracked else 0.0
        if share > 0:
            per_arg[sl.name] = share
            slot_of[sl.name] = sl.slot
    all_args = min(per_arg.values()) if per_arg else None
    ext = extents or {}
    spread = [a for a in per_arg if a not in ext or ext[a].max_index > ext[a].min_index
              or per_arg[a] * tracked < 2]          # one element read by several work-items: a broadcast
    work = [a for a in spread if a in set(inputs)]
    span = {sl.name: (ext[sl.name].max_index - ext[sl.name].min_index + 1) * (sl.elem_bytes or 1)
            for sl in rr.slots.values() if sl.name in work and sl.name in ext}
    if span:                 # the main inputs: a filter copied beside a large image is not the work
        work = [a for a in work if a not in span or 2 * span[a] >= max(span.values())]
    wmask = 0
    for a in work or spread or list(per_arg):
        wmask |= 1 << slot_of[a]
    if not tracked or not per_arg:
        af = None
    elif work:               # every work input reached: past the guards, not only a cooperative load
        af = float(np.mean((masks & wmask) == wmask))
    else:                    # an in-place update or a generator: any access that is not a broadcast
        af = float(np.mean((masks & wmask) != 0))
    return Activity(af, per_arg, float(nbytes.mean()) if tracked else 0.0, tracked, stride, all_args)


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

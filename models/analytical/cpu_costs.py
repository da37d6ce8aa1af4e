"""The costs the CPU-runtime class adds to the shared roofline: the scalar code's corrections
(OpenCL vector values, loops the loop vectorizer takes, loop-carried chains), atomics, gathers,
page-strided walks and uneven work-items. Each function takes :class:`~.cpu_params.CPUParams`
and returns seconds of one compute unit per work-item (None where the profile lacks the value)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from kernelcast.models.analytical.cpu_params import CPUParams
from kernelcast.models.analytical.cpu_vectorizer import consecutive_gather
from kernelcast.models.analytical.params import RATE_CLASSES
from kernelcast.models.static.chains import FMA_CALL, INNER_PREFIX, UNIFORM_PREFIX
from kernelcast.models.static.features import BUILTIN_CLASSES, CHAIN_PREFIX, LOOPVEC_LOADS, LOOPVEC_PREFIX, VEC_PREFIX

from kernelcast.expr import CACHE_KEY, compile_expr
from kernelcast.sites import PEAK_PREFIX, TRIP_PREFIX

#: a loop is uneven when its busiest work-item runs at least this many times its mean trips per
#: entry (``tpeak_...``): the busiest work-item's time on one core then bounds the kernel's
#: (:func:`uneven_ratio`); below it, the scalar charge of one work-item is no better a guess than
#: the shared charge
UNEVEN_PEAK = 4.0


#: operation classes a CPU core runs on its integer divider, a unit the other operations overlap
#: (out-of-order execution): their time is a roofline of its own, not added to the rest. Measured on
#: PoCL 3.1: a scalar loop of ``(x * k + 7) % n`` alone 1.48 ns per trip and core (calib
#: peak/scalar int32_div: 1.45 ns per division); ``data[(gid + i) % total]`` in a loop whose other
#: work the model charges 2.5 ns per trip ran 2.9 ns, not 3.9
CPU_DIVIDER_CLASSES = frozenset({"int_div"})


#: bytes of a page: a loop whose trips step this far apart leaves the hardware prefetchers behind
PAGE_BYTES = 4096


#: bytes of a cache line of a CPU (x86-64 and the common ARM server cores)
CPU_LINE_BYTES = 64


#: a walk of at most this many trips (pages) per work-item is short: a first-level data TLB (64-72
#: entries on current x86 cores) holds its pages, and it is charged the ``strided_short`` values
SHORT_WALK_TRIPS = 64


#: a walk of at most this many trips per work-item is tiny: the hardware prefetchers follow its few
#: concurrent page streams, and it is charged the ``strided_tiny`` values (calib measured 4-trip
#: walks, 13 ns per line from memory here, against 42 at 16 trips and 148 at 1,024)
TINY_WALK_TRIPS = 8


def vector_value_correction(f: Mapping[str, np.ndarray], d: CPUParams) -> np.ndarray | float:
    """Seconds per work-item (one core) to add to the scalar charge of a work-item loop the runtime
    does not vectorize, for its operations on OpenCL vector values (``vec:<class>@<width>``, the
    static ``vec_ops``): each is one SIMD instruction of the target, not ``width`` scalar ones, so
    its lanes run at the scalar rate times ``min(width, vector rate / scalar rate)`` (the target's
    measured SIMD gain). A builtin family's call on a vector value is one call of the vector math
    library, its components at the family's scalar rate times ``min(width, peak / scalar rate)``:
    on PoCL 3.0, per component, ``pow(float4)`` 4.4-4.5x and ``exp(float4)`` 4.3x
    cheaper than the scalar call, ``rint(float4)`` 2.3-2.4x (charged at 4x, 4x and 4x); a
    saturating ``convert_uchar4_sat_rte`` ran 0.5x (slower per component), which this does not know.
    Negative or zero: it replaces part of the scalar charge."""
    out: np.ndarray | float = 0.0
    for key, cnt in f.items():
        if not key.startswith(VEC_PREFIX):
            continue
        cls, _, w = key[len(VEC_PREFIX):].partition("@")
        if not w.isdigit():
            continue
        if cls in RATE_CLASSES:
            s, v = d.scalar_rate(cls), d.vector_rate(cls)
        elif cls in BUILTIN_CLASSES:
            s, v = d.scalar_rate(cls), d.builtin_rate(cls)
        else:
            continue
        gain = min(float(w), max(1.0, v / s))
        out = out + cnt / (s * gain) - cnt / s
    return out


def chain_seconds(f: Mapping[str, np.ndarray], d: CPUParams, uniform: bool = True,
                  inner: np.ndarray | bool = True) -> np.ndarray | None:
    """CPU scalar code: seconds of one compute unit per work-item that its loop-carried recurrences
    take at least (``chain:<class>`` counts of :mod:`models.static.chains` times ``chain_<class>_ns``):
    a trip cannot start its operations on a carried value before the trip before is done, however
    many operations the core issues per cycle. A work-item's arithmetic takes at least this
    (``CPURuntimeClass._item_seconds``); its calls, loads and atomics add to it, as they add to its
    arithmetic. An ``fma``/``mad`` call on the chain (``fma_call``) counts at the FMA latency
    unless the runtime calls its builtins out of line (the call is charged already). ``uniform``
    False leaves out the chains of loops all work-items take alike (``uniform_<class>``): in a
    kernel with barriers the runtime puts an implicit barrier into such a loop. A loop whose trips
    differ between work-items keeps its chain in a kernel with barriers, in groups of every size.
    The inner loop of a loop with barriers (a tile loop's, ``inner_<class>``) gets no implicit
    barrier from PoCL 3.1 though its trips are alike: its chain counts where ``inner`` is true (one
    flag per configuration; the model passes the groups larger than
    :attr:`CPUParams.barrier_unrolled_items`, whose work-items PoCL runs in turn).
    ``docs/analytical-model.md`` (chains) has the probes. None without calibrated latencies or a
    chain."""
    latency = dict(d.chain_s)
    if not (d.libcall_scalar and d.libcall_s) and "fp32_fma" in latency:
        latency[FMA_CALL] = latency["fp32_fma"]      # else the call is charged as a call already
    total = None
    for cls, s in latency.items():
        for key in (cls, UNIFORM_PREFIX + cls, INNER_PREFIX + cls) if uniform else (cls, INNER_PREFIX + cls):
            n = f.get(CHAIN_PREFIX + key)
            if n is None or s <= 0:
                continue
            if key.startswith(INNER_PREFIX) and not uniform:
                n = np.where(inner, n, 0.0)
            total = n * s if total is None else total + n * s
    return total


def inner_loop_correction(f: Mapping[str, np.ndarray], d: CPUParams) -> np.ndarray | float:
    """Seconds per work-item (one core) to add to the scalar charge of a work-item loop the runtime
    does not vectorize, for the operations and loads of its innermost loops that the compiler's
    loop vectorizer takes on its own (``loopvec:<class>``, the static ``loopvec_ops``): they run at
    the peak rate (independent trips, interleaved vectors), not the scalar one. Measured on PoCL
    3.0: ``rank += (in[j] < v)`` over 4,096 trips, 0.10 ns per trip per core; the same loop
    accumulating a float, 2.7."""
    out: np.ndarray | float = 0.0
    for key, cnt in f.items():
        if not key.startswith(LOOPVEC_PREFIX):
            continue
        cls = key[len(LOOPVEC_PREFIX):]
        cls = "int_add" if cls == LOOPVEC_LOADS else cls
        if cls not in RATE_CLASSES:
            continue
        out = out + cnt / d.rate(cls) - cnt / d.scalar_rate(cls)
    return np.minimum(out, 0.0) if isinstance(out, np.ndarray) else min(out, 0.0)


_MOD_RE = re.compile(r"%\s*(\(?[A-Za-z0-9_ +\-*/]+\)?)\s*$")


_MIN_RE = re.compile(r"^min\(\s*([A-Za-z0-9_]+)\s*-\s*1\s*,")


_ID_COEFF = ("gid", "grp")


def atomic_distinct(a: Any, env: Mapping[str, Any]) -> tuple[np.ndarray | None, str]:
    """Static estimate of the number of distinct addresses one atomic site (an
    :class:`~models.static.features.Access` of kind ``atomic``) hits over a launch, the
    contention it sees: ``None`` when each work-item has its own address (the index is affine with
    a non-zero coefficient of the global or group id: no contention), else an array over the
    configurations, and how it was found: a constant index (1), an index taken modulo ``K`` (``%``
    or ``& (K - 1)``) or clamped by ``min(K - 1, ...)``, else the number of elements of the buffer
    (global) or local array (local) it points into, i.e. the assumption that the data-dependent
    or lid-only index spreads over the whole buffer. Unknown (a pointer the analysis does not size):
    ``None``, charged as uncontended, and said so."""
    coeffs = getattr(a, "coeffs", {}) or {}
    if a.affine and not a.indirect and any(k.startswith(_ID_COEFF) and str(v) not in ("0", "")
                                           for k, v in coeffs.items()):
        return None, "index affine in the global/group id: one address per work-item (uncontended)"
    idx = (getattr(a, "index_expr", "") or "").strip()

    def value(text: str) -> np.ndarray | None:
        try:
            fn, _ = compile_expr(text)
            with np.errstate(all="ignore"):
                v = np.asarray(fn(env), dtype=np.float64)
        except Exception:  # noqa: BLE001 - an expression with unbound symbols: not this rule
            return None
        return v if np.all(np.isfinite(v)) else None

    if a.affine and not a.indirect and not coeffs and value(idx or "x_unbound") is not None:
        return np.asarray(1.0), f"constant index {idx}: one address for all work-items"
    for rx, how in ((_MOD_RE, "index modulo {}"), (_MIN_RE, "index clamped below {}")):
        m = rx.search(idx)
        if m:
            k = value(m.group(1))
            if k is not None:
                return np.maximum(k, 1.0), how.format(m.group(1).strip())
    size = env.get(("__elems_" if a.space == "global" else "len_") + a.arg)
    if size is not None:
        return np.maximum(np.asarray(size, dtype=np.float64), 1.0), (
            f"assumed: the {'data-dependent ' if a.indirect else ''}index spreads over all elements of {a.arg}")
    return None, f"unknown size of {a.arg}: assumed uncontended"


def uneven_ratio(env: Mapping[str, Any]) -> np.ndarray | None:
    """Per configuration, the largest ratio of a loop's busiest work-item's trips per entry
    (``tpeak_...``, :mod:`kernelcast.sites`) to its mean (``trip_...``) over the loops a counting
    launch measured; None without a measured peak. At :data:`UNEVEN_PEAK` or more the busiest
    work-item's time on one core bounds the kernel's: a loop of ``chunk`` elements per work-item
    over ``n`` elements, ``n / chunk`` far below the work-items, has a handful of busy work-items
    whatever its mean (synth_chunked_*, 4-16x too fast as work shared by all cores)."""
    ratio = None
    for k, v in env.items():
        if not k.startswith(PEAK_PREFIX):
            continue
        mean = env.get(TRIP_PREFIX + k[len(PEAK_PREFIX):])
        if mean is None:
            continue
        v, mean = np.asarray(v, dtype=np.float64), np.asarray(mean, dtype=np.float64)
        with np.errstate(all="ignore"):
            r = np.where(np.isfinite(v) & np.isfinite(mean) & (mean > 0), v / np.where(mean > 0, mean, 1.0), 1.0)
        ratio = r if ratio is None else np.maximum(ratio, r)
    return ratio


def atomic_seconds(feats: Any, env: Mapping[str, Any], dev: CPUParams, *, alone: bool = False
                   ) -> np.ndarray | None:
    """Seconds of one compute unit per work-item spent in atomics on a CPU device: every atomic
    site's executions per work-item (its count) over the calibrated rate of ``atomic_add`` per
    compute unit (``atomic_<space>[_b<bins>]_gops`` / CU) at the site's number of distinct
    addresses (:func:`atomic_distinct`; the rate is interpolated in log2(bins) between the
    measured bin counts and clamped at the ends; an uncontended site gets the own-element rate).
    An atomic is a locked read-modify-write that the core serialises (not vectorized, not
    overlapped with other memory operations), so its time adds to the compute part. ``alone``: one
    work-item running while the others are done contends with nobody (the own-element rate).
    None when the device is not a CPU or the profile has no atomic rates (atomics are then charged
    as bytes only)."""
    atomics = [a for a in getattr(feats, "accesses", []) if a.kind == "atomic" and a.space in ("global", "local")]
    if not atomics or not dev.is_cpu or not dev.atomic_rates:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    total = np.zeros(np.broadcast_shapes(*[np.shape(v) for v in env.values()]))
    cu = float(dev.compute_units)
    for a in atomics:
        fn, _ = compile_expr(a.count)
        with np.errstate(all="ignore"):
            c = np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=0.0)
        distinct = None if alone else atomic_distinct(a, {**env, **fenv})[0]
        rate = dev.atomic_rate(a.space, distinct)
        if rate is None:
            continue
        total = total + c / (rate / cu)
    return total


def gather_seconds(feats: Any, env: Mapping[str, Any], dev: CPUParams) -> np.ndarray | None:
    """Seconds of one compute unit per work-item spent in gathers and scatters of vectorized CPU
    code: the global and constant accesses whose index is data-dependent or not affine in the
    work-item ids (:class:`~models.static.features.Access` ``indirect`` / not ``affine``) or
    affine with a step between adjacent work-items other than 0 or 1 element (``stride0``: a
    strided or interleaved access; measured on PoCL: writing two halves interleaved at
    stride 2 took 4.1x the time of writing them contiguously, the same bytes), one
    gathered address per execution whatever its width (a ``float4`` at a data-dependent index is
    one 16-byte piece per lane), over the calibrated gather rate per compute unit
    (``gather_gops``, ``calib --only gather``: loads at computed pseudo-random indices of a table in
    the first cache level; scatters are assumed to cost the same). None without that rate. The
    bytes are still charged by the memory part; this is the instruction cost (measured: 0.46
    ns per gathered element per core, against ~0.01 for a contiguous vector load's element).
    An access one element from the next work-item's that the vectorizer still gathers
    (:func:`consecutive_gather`: an index clamping the work-item id, or an ``int`` global id plus a
    constant) is a gather too, at the rate of gathers of consecutive addresses
    (``gather_clamped_gops``; not charged on a profile without it)."""
    clamped_rate = dev.gather_clamped_rate
    acc = [a for a in getattr(feats, "accesses", []) if a.space in ("global", "constant")
           and a.kind in ("load", "store")
           and (a.indirect or not a.affine or a.stride0 not in ("0", "1") or (clamped_rate and consecutive_gather(a)))]
    if not acc or not dev.is_cpu or not dev.gather_rate:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    total = np.zeros(np.broadcast_shapes(*[np.shape(v) for v in env.values()]))
    clamped = np.zeros_like(total)
    for a in acc:
        fn, _ = compile_expr(a.count)
        with np.errstate(all="ignore"):
            c = np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=0.0)
        if not a.indirect and a.affine and a.stride0 is not None:
            fn_s, _ = compile_expr(a.stride0)
            with np.errstate(all="ignore"):
                st = np.abs(np.nan_to_num(np.asarray(fn_s(fenv), dtype=np.float64), nan=1.0))
            near = (st == 0) | (st == 1)
            if clamped_rate and consecutive_gather(a):
                clamped = clamped + np.where(near, c, 0.0)   # a gather of consecutive addresses
            c = np.where(near, 0.0, c)                       # contiguous or uniform: vector loads
        total = total + c
    cu = float(dev.compute_units)
    return total / (dev.gather_rate / cu) + (clamped / (clamped_rate / cu) if clamped_rate else 0.0)


def strided_seconds(feats: Any, env: Mapping[str, Any], dev: CPUParams, level: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """CPU devices: (seconds of one compute unit per work-item, bytes per work-item) of the global
    accesses in a loop whose trips step a page or more apart (``trip_strides`` of the access: the
    grid-stride loop ``for (i = gid; i < n; i += get_global_size(0))``, an ELLPACK column walk
    ``k * rows + row``). A GPU coalesces one trip of neighbouring work-items; a CPU runtime runs
    each work-item's loop in turn, so every trip lands on another page and each cache line is
    fetched once, by the first work-item that touches it (neighbours with ``stride0`` of one element
    share it), at the calibrated cost of such a line from the level that holds the working set
    (``level``, the index of :attr:`CPUParams.bw_levels`, past them main memory; ``calib
    --only stride``: ``strided_line_level{i}_ns`` and ``strided_line_ns``, else the DRAM latency
    from memory and nothing from a cache level), and for a walk of at most
    :data:`SHORT_WALK_TRIPS` executions per work-item (a CSR or ELLPACK row) the short-walk values
    ``strided_short...`` where calibrated, and for at most :data:`TINY_WALK_TRIPS` the tiny-walk
    ones ``strided_tiny...`` (else the short ones). The caller removes these bytes from the streamed ones.
    Measured (PoCL 3.1): a line from memory costs 116 ns per core
    in 2,048-trip walks, 11.7 ns in 16-trip ones, against 5.2 ns at the streaming bandwidth; the
    suite's ``kc_grid_sum`` over 16 Mi floats took 55 ms (predicted 61 ms) and its ELLPACK kernel
    (16 entries per row) over 131,072 rows 5.0 ms (predicted 3.7 ms)."""
    if not dev.is_cpu or not dev.strided_line_s:
        return None
    acc = [a for a in getattr(feats, "accesses", []) if a.space == "global" and a.kind in ("load", "store")
           and getattr(a, "trip_strides", None) and a.affine and not a.indirect and a.stride0 not in (None, "0")]
    if not acc:
        return None
    fenv = dict(feats.complete({k: v for k, v in env.items() if not k.startswith("__")}))
    fenv[CACHE_KEY] = {}
    shape = np.broadcast_shapes(*[np.shape(v) for v in env.values()])
    lines, nbytes = np.zeros(shape), np.zeros(shape)

    def value(text: str, default: float) -> np.ndarray:
        fn, _ = compile_expr(text)
        with np.errstate(all="ignore"):
            return np.nan_to_num(np.asarray(fn(fenv), dtype=np.float64), nan=default, posinf=default, neginf=default)

    lv = np.full(shape, len(dev.bw_levels)) if level is None else np.broadcast_to(level, shape)

    def costs(past: float | None, inside: dict[int, float]) -> np.ndarray:
        c = np.where(lv >= len(dev.bw_levels), past or 0.0, 0.0)
        for i, v in inside.items():
            c = np.where(lv == i, v, c)
        return c

    long_cost = costs(dev.strided_line_s, dev.strided_level_s)
    short_cost = (costs(dev.strided_short_s, dev.strided_short_level_s)
                  if dev.strided_short_s or dev.strided_short_level_s else long_cost)
    tiny_cost = (costs(dev.strided_tiny_s, dev.strided_tiny_level_s)
                 if dev.strided_tiny_s or dev.strided_tiny_level_s else short_cost)
    seconds = np.zeros(shape)
    for a in acc:
        step = innermost_step(a.trip_strides, value, shape) * a.unit_bytes
        far = step >= PAGE_BYTES
        if not np.any(far):
            continue
        count = value(a.count, 0.0)
        far = far & (count >= 2)      # one trip per work-item is no walk: neighbours stream through memory
        lane_bytes = np.abs(value(a.stride0, 1.0)) * a.unit_bytes
        per_exec = np.minimum(1.0, np.maximum(a.elem_bytes, lane_bytes) / CPU_LINE_BYTES)
        cost = np.where(count <= TINY_WALK_TRIPS, tiny_cost,
                        np.where(count <= SHORT_WALK_TRIPS, short_cost, long_cost))
        lines = lines + np.where(far, count * per_exec, 0.0)
        seconds = seconds + np.where(far, count * per_exec * cost, 0.0)
        nbytes = nbytes + np.where(far & (cost > 0), count * a.elem_bytes, 0.0)
    if not np.any(lines > 0):
        return None
    return seconds, nbytes


def innermost_step(trip_strides: Mapping[str, str], value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The elements an access moves per trip of the innermost loop around it that moves it at all
    (``trip_strides`` maps a loop's iteration symbol ``it<serial>`` to the access's stride per trip;
    a nested loop's serial is above its parent's; ``value`` evaluates an expression, 0 where it
    cannot). ``A[r * cols + base + k]`` walks on in ``k`` one element at a time, whatever the
    outer loop's stride in ``base``: it streams, and only each outer trip starts a new page. Taking
    the largest stride of any loop instead charged every element of ``la_matvec_local_x`` at a
    local size of 1,528 (outer stride 6 KiB) as a line of its own: 45x its measured time."""
    def serial(key: str) -> int:
        digits = "".join(ch for ch in key if ch.isdigit())
        return int(digits) if digits else -1

    step = np.zeros(shape)
    found = np.zeros(shape, dtype=bool)
    for key in sorted(trip_strides, key=serial, reverse=True):
        s = np.abs(np.broadcast_to(value(trip_strides[key], 0.0), shape))
        step = np.where(found, step, s)
        found = found | (s > 0)
    return step

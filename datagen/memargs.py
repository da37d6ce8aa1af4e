"""Memory-analysis based argument selection (LLMPerf II-B2, Algorithm 1).

For every combination of candidate scalar values, the kernel instrumented by
:mod:`instrument.rewrite` runs at two launch settings; each array's size (``max index + 1`` of
what the run touched) is fitted as ``size = c * gsize + d`` and a configuration at any target
``gsize`` gets ``ceil(c * gsize + d)`` elements (at least 1: an array never touched still needs
one element). Scalars bound to ``gsize`` scale with the target.

Choices made here, beyond the paper:

* **gsize of an nD launch** is the total number of work-items (product of the global sizes): the
  fit is ``size = c * prod(gsize) + d``. The two fitting settings scale every dimension by 2
  ((32, 32) -> (64, 64) for 2D), and scalar candidates bound to the global size are per dimension
  (``gsize0``, ``gsize1``...), since a 2D kernel's ``width`` follows one dimension.
* **A third, validating run** (more work-items, and in nD a different aspect ratio) is made with
  the arrays sized by the fit. The instrumented run records accesses beyond the allocated sizes
  without performing them, so this is a crash-free bounds check: a combination whose sizes grow
  faster than linearly (``n * n`` with ``n = gsize``) or depend on the aspect ratio is rejected
  rather than producing out-of-bounds rows.
* Combinations are rejected (with a reason) when a run fails (timeout, crash...), an index is
  negative (reads before the start), a size shrinks as gsize grows (``c < 0``), or the arrays
  exceed ``mem_cap_bytes`` at ``ref_total_items`` work-items (when given; by default the cap is
  applied only per target: the selector skips, for each target gsize, the settings whose arrays
  exceed the cap there, so a setting with ``c = 256`` still serves small launches).
* **Bounds check per configuration** (``kernel_selector(verify=True)``, the default for
  datagen): before a configuration's arguments are handed out, the instrumented kernel runs at
  that very configuration with those sizes and the buffer contents the plain run will get; a
  setting that would touch memory out of bounds there (a fit extrapolated past a breakpoint, an
  nD aspect ratio the total-work-items fit does not cover, data-dependent indices) is replaced by
  the next eligible one. Kernels whose state carries over between repeated launches (an atomic
  counter used as an index) can still overrun during the timed repeats: only the first launch is
  checked.
* **Representative settings.** The validating run uses the activity-recording kernel
  (:mod:`instrument.activity`): per argument, the share of work-items that touched it. A setting
  under which a scalar bound cuts the kernel's work (LLMPerf's Listing 1 with ``N = 1``: one
  work-item reads ``in``) scores low against the kernel's best setting (:func:`setting_scores`);
  the selector samples among the settings within :data:`GOOD_SCORE` of the best
  (:func:`ranked_settings`), so the dataset measures kernels doing their full work, and records
  each configuration's active fraction and bytes per work-item from its bounds-check run.
* Candidates: integer scalars take ``(1, 4, "gsize", "4*gsize", 16, 32, 256)`` (values outside the type's
  range dropped; ``"gsize"`` markers only for int-sized or wider types; ``"k*gsize"`` markers are
  accepted too); float scalars take ``float_values`` (1.0). Over ``max_combos`` combinations, the
  all-``gsize`` combination (what simple selection does) plus a deterministic sample (seeded by
  ``seed`` and the kernel id) are tried.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.datagen.args import Selector, UnsupportedArgument
from kernelcast.instrument.activity import (
    Activity,
    ActivityError,
    ActivityRewrite,
    activity_and_extents,
    activity_rewrite,
    measure_activity,
)
from kernelcast.instrument.rewrite import (
    AccessExtent,
    InstrumentedRunError,
    RewriteError,
    RewriteResult,
    device_supports_int64_atomics,
    instrument_kernel,
    measure_instrumented,
)
from kernelcast.instrument.state import kernel_body

from kernelcast.clang import KernelParam, ParseError, kernel_signatures
from kernelcast.cltypes import is_known_type, parse_type
from kernelcast.schema import ArgBinding, Kernel

log = logging.getLogger(__name__)

ANALYSIS_VERSION = 3
#: the format of the file of verified settings kept beside an analysis (part of its name)
VERIFIED_FORMAT = 1
#: the version of the checks behind a stored outcome: a configuration no setting passed under an
#: older version is checked again (2: buffers grown to what the check touched); a setting that
#: passed stays valid
CHECK_VERSION = 2
DEFAULT_CANDIDATES: tuple[int | str, ...] = (1, 4, "gsize", "4*gsize", 16, 32, 256)
#: a setting is *good* when, for every argument, the share of work-items touching it is at least
#: this fraction of the best share any setting of the kernel reaches (see :func:`setting_scores`)
GOOD_SCORE = 0.9
DEFAULT_FLOAT_VALUES: tuple[float, ...] = (1.0,)
DEFAULT_MAX_COMBOS = 64
#: in nD the validating run doubles the last dimension of the second (square) fitting launch: an
#: array sized by one dimension (``u[r]``, ``r < rows = gsize1``) or by its square
#: (``A[r * n + k]`` with ``n = gsize1``) then overruns the total-work-items fit by up to 2x or
#: 4x; such a setting is kept, sized per configuration by its bounds check
#: (:attr:`Setting.sized_by_check`), when the run touched at most this many times the fit and at
#: most this many times a cube of the launch's largest side; a larger overrun (``n = gsize`` of
#: all work-items, squared) rejects it
SHAPE_SLACK = 4
DEFAULT_MEM_CAP_BYTES = 256 << 20
#: elements each buffer gets in a fitting run: max(MIN, FACTOR * work-items), at most MAX_BYTES
ANALYSIS_ALLOC_MIN = 4096
ANALYSIS_ALLOC_FACTOR = 4
ANALYSIS_ALLOC_MAX_BYTES = 16 << 20
_FAULTS = ("timeout", "crash")
_LABEL = re.compile(r"^(?:(\d+(?:\.\d+)?)\*)?([gl])size(\d)?$")
#: the candidate a kernel that strides by its work-group's size (``get_local_size``) also gets
LSIZE_CANDIDATE = "lsize"


# ---------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class ScalarChoice:
    """A scalar's value: a constant, or a multiple of the global size (total or one dimension)."""

    kind: str = "const"           # "const", "gsize" or "lsize"
    value: float = 1.0            # the constant, or the factor of the global (local) size
    dim: int | None = None        # gsize/lsize: None = total work-items, else that dimension

    @property
    def label(self) -> str:
        if self.kind == "const":
            v = self.value
            return str(int(v)) if float(v).is_integer() else repr(float(v))
        factor = "" if self.value == 1 else (f"{int(self.value)}*" if float(self.value).is_integer()
                                              else f"{self.value}*")
        return f"{factor}{self.kind}{'' if self.dim is None else self.dim}"

    @classmethod
    def from_label(cls, label: str | int | float) -> ScalarChoice:
        if isinstance(label, (int, float)):
            return cls("const", float(label))
        m = _LABEL.match(label.strip())
        if m:
            return cls(f"{m.group(2)}size", float(m.group(1) or 1), None if m.group(3) is None else int(m.group(3)))
        return cls("const", float(label))

    def resolve(self, gsize: Sequence[int], lsize: Sequence[int] | None = None) -> float:
        """The value at one launch (an ``lsize`` choice without a local size takes the global size)."""
        if self.kind == "const":
            return self.value
        size = gsize if self.kind == "gsize" or not lsize else lsize
        base = math.prod(size) if self.dim is None else (size[self.dim] if self.dim < len(size) else 1)
        return self.value * base


@dataclass
class ArrayFit:
    """``size = c * gsize + d`` for one array, from two (work-items, size) samples."""

    name: str
    elem_bytes: int
    g1: int
    s1: int
    g2: int
    s2: int
    touched: bool = True
    validated: int | None = None      # elements the validating run touched (None: not validated)

    @property
    def c(self) -> float:
        return (self.s2 - self.s1) / (self.g2 - self.g1)

    @property
    def d(self) -> float:
        return self.s1 - self.c * self.g1

    def size(self, total_items: int) -> int:
        """``ceil(c * total_items + d)``, exactly, and at least 1."""
        span = self.g2 - self.g1
        num = self.s1 * span + (self.s2 - self.s1) * (total_items - self.g1)
        return max(1, -(-num // span))


@dataclass
class Setting:
    """One valid combination: scalar values, the fitted size of every array and, when the
    validating run recorded it (:mod:`instrument.activity`), how much of its work the kernel did
    there: per argument the share of work-items that touched it, the smallest of those shares,
    and the bytes accessed per work-item."""

    scalars: dict[str, ScalarChoice]
    arrays: dict[str, ArrayFit]
    per_arg: dict[str, float] = field(default_factory=dict)
    active_fraction: float | None = None     # the validating run's Activity.all_args_fraction
    bytes_per_item: float | None = None
    #: the validating run touched some arrays past their fitted sizes, within
    #: :data:`SHAPE_SLACK` x those sizes (a size following one dimension of the launch, or its
    #: square): usable only with a bounds check per configuration, which sizes them
    sized_by_check: bool = False

    def sizes(self, gsize: Sequence[int]) -> dict[str, int]:
        total = math.prod(gsize)
        return {n: f.size(total) for n, f in self.arrays.items()}

    def total_bytes(self, gsize: Sequence[int]) -> int:
        total = math.prod(gsize)
        return sum(f.size(total) * f.elem_bytes for f in self.arrays.values())

    def describe(self) -> str:
        sc = ", ".join(f"{k}={v.label}" for k, v in self.scalars.items())
        ar = ", ".join(f"{n}: {f.c:g}*g{f.d:+g}" for n, f in self.arrays.items())
        return f"[{sc}] -> {ar}"


@dataclass
class Rejected:
    scalars: dict[str, ScalarChoice]
    reason: str


@dataclass
class MemoryAnalysis:
    """The outcome of Algorithm 1 for one kernel."""

    kernel_id: str
    kernel_name: str
    dims: int
    settings: list[Setting] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    exe_settings: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)  # fit x2 + validation
    combos_total: int = 0
    combos_tried: int = 0
    runs: int = 0
    wall_s: float = 0.0
    int64_atomics: bool = True
    version: int = ANALYSIS_VERSION

    @property
    def ok(self) -> bool:
        return bool(self.settings)

    @property
    def reason(self) -> str:
        """Why there is no valid setting ("" when there is one)."""
        if self.settings:
            return ""
        if self.unsupported:
            return "unsupported: " + "; ".join(self.unsupported[:3])
        if self.rejected:
            return "every combination rejected, e.g. " + self.rejected[0].reason
        return "no combination tried"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for group in ("settings", "rejected"):
            for s in d[group]:
                s["scalars"] = {k: ScalarChoice(**v).label for k, v in s["scalars"].items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryAnalysis:
        def scal(m: dict[str, Any]) -> dict[str, ScalarChoice]:
            return {k: ScalarChoice.from_label(v) for k, v in m.items()}

        return cls(
            kernel_id=d["kernel_id"], kernel_name=d["kernel_name"], dims=d["dims"],
            settings=[Setting(scal(s["scalars"]), {n: ArrayFit(**f) for n, f in s["arrays"].items()},
                              dict(s.get("per_arg") or {}), s.get("active_fraction"), s.get("bytes_per_item"),
                              bool(s.get("sized_by_check", False)))
                      for s in d["settings"]],
            rejected=[Rejected(scal(r["scalars"]), r["reason"]) for r in d["rejected"]],
            unsupported=list(d["unsupported"]),
            exe_settings=[(tuple(g), tuple(loc)) for g, loc in d["exe_settings"]],
            combos_total=d["combos_total"], combos_tried=d["combos_tried"], runs=d["runs"],
            wall_s=d["wall_s"], int64_atomics=d["int64_atomics"], version=d.get("version", 0),
        )

    def summary(self) -> str:
        lines = [f"{self.kernel_name}: {len(self.settings)} valid of {self.combos_tried} combinations tried "
                 f"({self.combos_total} possible), {self.runs} instrumented runs, {self.wall_s:.1f} s"]
        lines += [f"  unsupported: {u}" for u in self.unsupported]
        lines += [f"  ok {s.describe()}" for s in self.settings]
        lines += [f"  rejected [{', '.join(f'{k}={v.label}' for k, v in r.scalars.items())}]: {r.reason}"
                  for r in self.rejected]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# candidates and launch settings


def scalar_candidates(p: KernelParam, dims: int, candidates: Sequence[int | str] = DEFAULT_CANDIDATES,
                      float_values: Sequence[float] = DEFAULT_FLOAT_VALUES) -> list[ScalarChoice]:
    """The candidate values of one scalar parameter."""
    t = parse_type(p.dtype)
    if t.is_float:
        return [ScalarChoice("const", float(v)) for v in float_values]
    info = np.iinfo(t.numpy)
    out: list[ScalarChoice] = []
    for cand in candidates:
        ch = ScalarChoice.from_label(cand)
        if ch.kind == "const":
            if info.min <= ch.value <= info.max:
                out.append(ch)
            continue
        if info.max < (1 << 31) - 1:
            continue                          # char/short: a global size does not fit
        if ch.dim is not None or dims == 1:
            out.append(ch)
        else:
            out += [ScalarChoice(ch.kind, ch.value, d) for d in range(dims)]
    seen: dict[str, ScalarChoice] = {}
    for ch in out:
        seen.setdefault(ch.label, ch)
    return list(seen.values()) or [ScalarChoice("const", 1.0)]


def typed_value(p: KernelParam, value: float) -> int | float:
    """``value`` as the host value of scalar parameter ``p`` (integers rounded up and clamped)."""
    t = parse_type(p.dtype)
    if t.is_float:
        return float(value)
    info = np.iinfo(t.numpy)
    return int(min(max(math.ceil(value - 1e-9), int(info.min)), int(info.max)))


def launch_settings(dims: int, warp: int, max_wg: int, max_items: Sequence[int]) -> list[tuple[tuple[int, ...],
                                                                                           tuple[int, ...]]]:
    """Two fitting settings and one validating setting, (gsize, lsize) each."""
    if dims == 1:
        w = max(1, warp)
        loc = min(max(w, (64 // w) * w), max_wg, max_items[0])
        ls: tuple[int, ...] = (loc,)
        return [((4 * loc,), ls), ((8 * loc,), ls), ((16 * loc,), ls)]
    side = 8 if dims == 2 else 4
    while side > 1 and (side ** dims > max_wg or any(side > m for m in max_items[:dims])):
        side //= 2
    ls = (side,) * dims
    g1 = tuple(4 * side if dims == 2 else 2 * side for _ in range(dims))
    g2 = tuple(2 * g for g in g1)
    g3 = (*g2[:-1], 2 * g2[-1])
    return [(g1, ls), (g2, ls), (g3, ls)]


def _combo_indices(total: int, cap: int, preferred: int | Sequence[int], rng: random.Random) -> list[int]:
    """The combinations to try: all of them up to ``cap``, else the first ``preferred`` one, a
    seeded sample of ``cap - 1`` others, then the other ``preferred`` ones the sample missed."""
    if total <= cap:
        return list(range(total))
    prefs = list(dict.fromkeys([preferred] if isinstance(preferred, int) else preferred))
    p0 = prefs[0]
    rest = rng.sample([i for i in range(total) if i != p0], cap - 1) if total <= 1 << 20 else \
        list({rng.randrange(total) for _ in range(cap * 2)} - {p0})[:cap - 1]
    taken = {p0, *rest}
    return [p0, *sorted(rest), *(i for i in prefs[1:] if i not in taken)]


#: at most this many combinations binding every sized scalar to one global dimension each are
#: tried besides the seeded sample (see :func:`infer_arguments`)
MAX_DIM_COMBOS = 16


def _decode(index: int, radices: list[int]) -> list[int]:
    out = []
    for r in reversed(radices):
        out.append(index % r)
        index //= r
    return out[::-1]


# ---------------------------------------------------------------------------------------------
# Algorithm 1


def infer_arguments(harness: Any, kernel: Kernel, *, device_limits: Any = None, warp: int | None = None,
                    candidates: Sequence[int | str] = DEFAULT_CANDIDATES,
                    float_values: Sequence[float] = DEFAULT_FLOAT_VALUES, max_combos: int = DEFAULT_MAX_COMBOS,
                    seed: int = 0, mem_cap_bytes: int = DEFAULT_MEM_CAP_BYTES,
                    ref_total_items: int | None = None, validate: bool = True,
                    int64_atomics: bool | None = None, max_faults: int = 3,
                    settings: list[tuple[tuple[int, ...], tuple[int, ...]]] | None = None) -> MemoryAnalysis:
    """Algorithm 1 of LLMPerf for one kernel: valid (scalar values, array size fits) settings.

    ``device_limits`` (:class:`datagen.sampler.DeviceLimits`) or ``warp`` choose the local size
    of the instrumented runs; ``settings`` overrides the (gsize, lsize) pairs (two to fit, an
    optional third to validate)."""
    t0 = time.perf_counter()
    dev = harness.device
    dims = kernel.dims or 1
    an = MemoryAnalysis(kernel.id, kernel.name, dims)
    if int64_atomics is None:
        int64_atomics = device_supports_int64_atomics(dev)
    an.int64_atomics = int64_atomics
    try:
        params = kernel_signatures(kernel.source, kernel.build_options).get(kernel.name)
    except ParseError as e:
        an.unsupported.append(f"libclang: {e}")
        return an
    if params is None:
        an.unsupported.append(f"no kernel {kernel.name!r} in its source")
        return an
    bad = [p for p in params if not is_known_type(p.dtype)]
    if bad:
        an.unsupported += [f"argument {p.name!r} has type {p.dtype!r}, which cannot be bound" for p in bad]
        return an
    try:
        rr = instrument_kernel(kernel, int64_atomics=int64_atomics)
    except RewriteError as e:
        an.unsupported.append(f"rewrite: {e}")
        return an
    if rr.unsupported:
        an.unsupported += rr.unsupported
        return an
    ar = _activity_variant(rr)

    if settings is None:
        if device_limits is not None:
            w, max_wg, max_items = device_limits.warp, device_limits.max_work_group_size, \
                list(device_limits.max_work_item_sizes)
        else:
            w = warp or int(getattr(dev, "preferred_wg_multiple", None) or 1)
            max_wg, max_items = int(dev.max_work_group_size), list(dev.max_work_item_sizes)
        settings = launch_settings(dims, warp or w, max_wg, max_items)
    if len(settings) < 2:
        raise ValueError("memory analysis needs two launch settings to fit")
    an.exe_settings = [(tuple(g), tuple(loc)) for g, loc in settings]
    if math.prod(settings[0][0]) == math.prod(settings[1][0]):
        raise ValueError("the two fitting settings must differ in total work-items")

    scalars = [p for p in params if p.kind == "scalar"]
    body = kernel_body(kernel.source, kernel.name) or ""
    if re.search(r"\bget_local_size\s*\(", body) and LSIZE_CANDIDATE not in candidates:
        # a per-group problem (``for (c = lid; c < cols; c += get_local_size(0))``, one row per
        # group): with ``cols`` = the group's size every work-item has its element and the arrays
        # (rows x cols = groups x local size) stay linear in the work-items
        candidates = (*candidates, LSIZE_CANDIDATE)
    lists = [scalar_candidates(p, dims, candidates, float_values) for p in scalars]
    radices = [len(cl) for cl in lists]
    an.combos_total = math.prod(radices)
    preferred_digits = [next((i for i, ch in enumerate(cl) if ch.kind == "gsize"), 0) for cl in lists]
    preferred = 0
    for digit, r in zip(preferred_digits, radices):
        preferred = preferred * r + digit
    # in nD, every assignment of the sized scalars to the global dimensions (``rows = gsize1``,
    # ``cols = gsize0`` as well as the reverse) is tried besides the sample: a problem that covers
    # the launch in every dimension is among them
    per_dim = [[i for i, ch in enumerate(cl) if ch.kind == "gsize" and ch.value == 1 and ch.dim is not None]
               or [d] for cl, d in zip(lists, preferred_digits)]
    firsts = [preferred]
    if dims > 1 and math.prod(len(x) for x in per_dim) <= MAX_DIM_COMBOS:
        for digits in itertools.product(*per_dim):
            idx = 0
            for digit, r in zip(digits, radices):
                idx = idx * r + digit
            firsts.append(idx)
    rng = random.Random(int.from_bytes(hashlib.sha256(f"{seed}:{kernel.id}".encode()).digest()[:8], "little"))
    order = _combo_indices(an.combos_total, max(1, max_combos), firsts, rng)

    max_const = int(getattr(dev, "max_constant_bytes", 1 << 16))
    faults = 0
    for n, idx in enumerate(order):
        combo = {p.name: lists[i][d] for i, (p, d) in enumerate(zip(scalars, _decode(idx, radices)))}
        an.combos_tried += 1
        outcome = _try_combo(harness, rr, params, combo, settings, validate, max_const, mem_cap_bytes,
                             ref_total_items, an, ar)
        if isinstance(outcome, Setting):
            an.settings.append(outcome)
            continue
        reason, status = outcome
        an.rejected.append(Rejected(combo, reason))
        if status == "compile_error":
            an.unsupported.append(f"the instrumented kernel does not build: {reason}")
            break
        if status in _FAULTS:
            faults += 1
            if faults >= max_faults:
                for idx2 in order[n + 1:]:
                    c2 = {p.name: lists[i][d] for i, (p, d) in enumerate(zip(scalars, _decode(idx2, radices)))}
                    an.rejected.append(Rejected(c2, f"not tried after {faults} timeouts/crashes"))
                break
    an.wall_s = time.perf_counter() - t0
    log.info("%s: %d valid settings of %d combinations (%d runs, %.1f s)", kernel.name, len(an.settings),
             an.combos_tried, an.runs, an.wall_s)
    return an


def _analysis_alloc(total_items: int, elem_bytes: int, qualifier: str, max_const: int) -> int:
    n = max(ANALYSIS_ALLOC_MIN, ANALYSIS_ALLOC_FACTOR * total_items)
    n = min(n, ANALYSIS_ALLOC_MAX_BYTES // elem_bytes)
    if qualifier == "constant":
        n = min(n, max(1, (max_const - 1024) // elem_bytes))
    return n


def _try_combo(harness: Any, rr: RewriteResult, params: list[KernelParam], combo: dict[str, ScalarChoice],
               settings: list[tuple[tuple[int, ...], tuple[int, ...]]], validate: bool, max_const: int,
               mem_cap_bytes: int, ref_total_items: int | None, an: MemoryAnalysis,
               ar: ActivityRewrite | None = None) -> Setting | tuple[str, str]:
    """Fit one combination: a :class:`Setting`, or (reason, run status) when rejected."""
    by_name = {p.name: p for p in params}
    samples: list[tuple[int, dict[str, int]]] = []
    for gsize, lsize in settings[:2]:
        total = math.prod(gsize)
        values = {k: typed_value(by_name[k], ch.resolve(gsize, lsize)) for k, ch in combo.items()}
        alloc = {s.name: _analysis_alloc(total, s.elem_bytes or 1, s.qualifier, max_const) for s in rr.slots.values()}
        an.runs += 1
        try:
            run = measure_instrumented(harness, rr, gsize, lsize, values, alloc)
        except InstrumentedRunError as e:
            return f"at gsize {gsize}: {e.status}: {e.reason}", e.status
        if run.measurement.status != "ok":  # pragma: no cover - measure_instrumented raises
            return f"at gsize {gsize}: {run.measurement.status}", run.measurement.status
        for name, ext in run.extents.items():
            if ext.count and ext.min_index < 0:
                return f"{name}: index {ext.min_index} before the start at gsize {gsize}", "ok"
        samples.append((total, {n: e.needed for n, e in run.extents.items()}))
    (g1, s1), (g2, s2) = samples
    fits: dict[str, ArrayFit] = {}
    for s in rr.slots.values():
        a, b = s1[s.name], s2[s.name]
        if a == 0 and b == 0:
            fits[s.name] = ArrayFit(s.name, s.elem_bytes or 1, g1, 1, g2, 1, touched=False)
            continue
        f = ArrayFit(s.name, s.elem_bytes or 1, g1, a, g2, b)
        if f.c < 0:
            return f"{s.name}: size shrinks as gsize grows ({a} at {g1} work-items, {b} at {g2})", "ok"
        fits[s.name] = f
    setting = Setting(dict(combo), fits)
    if validate and len(settings) > 2:
        gsize, lsize = settings[2]
        total = math.prod(gsize)
        values = {k: typed_value(by_name[k], ch.resolve(gsize, lsize)) for k, ch in combo.items()}
        sizes = setting.sizes(gsize)
        need = setting.total_bytes(gsize)
        if need > mem_cap_bytes:
            return (f"arrays need {need / 2**20:.0f} MiB at the validating gsize {gsize} "
                    f"(cap {mem_cap_bytes / 2**20:.0f} MiB)"), "ok"
        for s in rr.slots.values():
            if s.qualifier == "constant" and sizes[s.name] * (s.elem_bytes or 1) > max_const:
                return f"{s.name}: {sizes[s.name]} elements exceed the device's __constant limit", "ok"
        an.runs += 1
        try:
            if ar is not None:       # the validating run also records how much work the kernel did
                run, act = measure_activity(harness, ar, gsize, lsize, values, sizes)
                setting.per_arg, setting.active_fraction = act.per_arg, act.all_args_fraction
                setting.bytes_per_item = act.bytes_per_item
            else:
                run = measure_instrumented(harness, rr, gsize, lsize, values, sizes)
        except InstrumentedRunError as e:
            return f"validating at gsize {gsize}: {e.status}: {e.reason}", e.status
        for name, ext in run.extents.items():
            fits[name].validated = ext.needed
            if ext.out_of_bounds:
                if len(gsize) > 1 and ext.min_index >= 0 and ext.needed <= SHAPE_SLACK * max(1, sizes[name]) \
                        and ext.needed <= SHAPE_SLACK * max(gsize) ** len(gsize):
                    setting.sized_by_check = True
                    continue
                what = (f"index {ext.min_index} before the start" if ext.min_index < 0 else
                        f"touches index {ext.max_index} but the fit gives {sizes[name]} elements")
                return f"{name}: at gsize {gsize} {what} (not linear in gsize)", "ok"
    need = setting.total_bytes((ref_total_items or 0,))
    if ref_total_items and need > mem_cap_bytes:
        return (f"arrays need {need / 2**20:.0f} MiB at {ref_total_items} work-items "
                f"(cap {mem_cap_bytes / 2**20:.0f} MiB)"), "ok"
    return setting


# ---------------------------------------------------------------------------------------------
# selection


def memory_args(analysis: MemoryAnalysis, params: list[KernelParam], gsize: tuple[int, ...],
                lsize: tuple[int, ...] | None, choice: int = 0) -> list[ArgBinding]:
    """Arguments for one launch from valid setting ``choice`` (same shape as ``simple_args``)."""
    if not analysis.settings:
        raise UnsupportedArgument(f"{analysis.kernel_name}: memory analysis found no valid setting "
                                  f"({analysis.reason})")
    if not 0 <= choice < len(analysis.settings):
        raise IndexError(f"choice {choice} out of range: {len(analysis.settings)} valid settings")
    setting = analysis.settings[choice]
    total = math.prod(gsize)
    wg = math.prod(lsize) if lsize else 1
    out: list[ArgBinding] = []
    for p in params:
        if not is_known_type(p.dtype):
            raise UnsupportedArgument(f"argument {p.name!r} has type {p.dtype!r}, which cannot be bound")
        if p.kind == "buffer":
            fit = setting.arrays.get(p.name)
            if fit is None:
                raise UnsupportedArgument(f"argument {p.name!r}: not in the memory analysis")
            out.append(ArgBinding(p.name, "buffer", p.dtype, count=fit.size(total), init="random"))
        elif p.kind == "local":
            out.append(ArgBinding(p.name, "local", p.dtype, count=wg))
        else:
            ch = setting.scalars.get(p.name)
            if ch is None:
                raise UnsupportedArgument(f"argument {p.name!r}: not in the memory analysis")
            out.append(ArgBinding(p.name, "scalar", p.dtype, value=typed_value(p, ch.resolve(gsize, lsize))))
    return out


def eligible_settings(analysis: MemoryAnalysis, gsize: tuple[int, ...],
                      mem_cap_bytes: int = DEFAULT_MEM_CAP_BYTES) -> list[int]:
    """Indices of the settings whose arrays fit ``mem_cap_bytes`` at ``gsize``."""
    return [i for i, s in enumerate(analysis.settings) if s.total_bytes(gsize) <= mem_cap_bytes]


def _activity_variant(rr: RewriteResult) -> ActivityRewrite | None:
    try:
        return activity_rewrite(rr)
    except ActivityError as e:   # pragma: no cover - the rewrite always emits its guard
        log.warning("%s", e)
        return None


def _fraction(act: Activity | None) -> float:
    return -1.0 if act is None or act.all_args_fraction is None else act.all_args_fraction


def _work(act: Activity | None) -> tuple[float, float]:
    """How fully a configuration's check run worked: its active fraction (the work-items that
    reached every main input), then its all-arguments fraction."""
    if act is None:
        return -1.0, -1.0
    return (-1.0 if act.active_fraction is None else act.active_fraction), _fraction(act)


def setting_scores(analysis: MemoryAnalysis) -> list[float | None]:
    """How fully each setting lets the kernel work, relative to the kernel's best setting.

    For every argument ``a``, ``best[a]`` is the largest share of work-items touching ``a`` that
    any setting reached in its validating run; a setting's score is the smallest, over those
    arguments, of its share / ``best[a]``. 1.0: every argument is reached by as many work-items as
    under the best setting (the kernel does its full work); LLMPerf's Listing 1 with ``N = 1``
    scores ``1/gsize``. None for a setting without an activity record (an analysis without the
    validating run)."""
    best: dict[str, float] = {}
    for st in analysis.settings:
        for a, v in st.per_arg.items():
            best[a] = max(best.get(a, 0.0), v)
    out: list[float | None] = []
    for st in analysis.settings:
        if st.active_fraction is None and not st.per_arg:
            out.append(None)
            continue
        out.append(min((st.per_arg.get(a, 0.0) / b for a, b in best.items() if b > 0), default=1.0))
    return out


def ranked_settings(analysis: MemoryAnalysis, gsize: tuple[int, ...], seed: int = 0,
                    mem_cap_bytes: int = DEFAULT_MEM_CAP_BYTES, rank: bool = True) -> list[int]:
    """The settings to try at ``gsize``, best first: those that fit the memory cap there; with
    ``rank``, the *good* ones (score >= :data:`GOOD_SCORE`, see :func:`setting_scores`) first,
    rotated by a hash of (seed, kernel, gsize) so a kernel's problems spread over its good
    settings, then the others by decreasing score (ties: more bytes accessed per work-item
    first). Without ``rank`` (the selection before
    activity ranking): every eligible setting, rotated by the same hash. The order does not
    depend on the local size, so every local size of a tuning sweep gets the same arguments."""
    ok = eligible_settings(analysis, gsize, mem_cap_bytes)
    if not ok:
        return []
    h = int.from_bytes(hashlib.sha256(f"{seed}:{analysis.kernel_id}:{tuple(gsize)}".encode()).digest()[:8], "little")
    if not rank:
        first = h % len(ok)
        return ok[first:] + ok[:first]
    scores = setting_scores(analysis)
    known = [v for v in (scores[i] for i in ok) if v is not None]
    top = max(known) if known else None

    def is_good(i: int) -> bool:
        v = scores[i]
        return top is None or (v is not None and v >= GOOD_SCORE * top)

    good = [i for i in ok if is_good(i)]
    rest = sorted((i for i in ok if i not in good),
                  key=lambda i: (-(scores[i] or 0.0), -(analysis.settings[i].bytes_per_item or 0.0)))
    first = h % len(good)
    return good[first:] + good[:first] + rest


def memory_selector(analysis: MemoryAnalysis, *, seed: int = 0, mem_cap_bytes: int = DEFAULT_MEM_CAP_BYTES,
                    choice: int | None = None, harness: Any = None, rewrite: RewriteResult | None = None,
                    max_attempts: int = 6, rank: bool = True, store: Path | None = None) -> Selector:
    """A selector (``(params, gsize, lsize) -> list[ArgBinding]``) over one kernel's analysis.

    Without ``choice``, each global size gets the first setting of :func:`ranked_settings`: one of
    the settings under which the kernel does its full work (``rank``), reproducible, varied across
    a kernel's problems, the same for every local size of one problem.

    With ``harness`` and ``rewrite`` (the instrumented kernel), the arguments of each
    configuration are first checked by an instrumented run at that very configuration (crash-free:
    out-of-range accesses are recorded, not performed); a setting whose accesses exceed its
    sizes there (a fit extrapolated past a breakpoint) is replaced by the next one, up to
    ``max_attempts`` instrumented runs; then :class:`UnsupportedArgument`. A setting whose check
    fails only by buffers touched past their end (sizes that follow one dimension of a 2D launch,
    fitted against all work-items) is first checked once more with those buffers sized by what the
    run touched (``select.last_grown``: name -> elements), within the same runs and memory cap.
    That run records the configuration's :class:`~instrument.activity.Activity` too
    (``select.last_activity``); with ``rank``, a setting whose active fraction there falls below
    :data:`GOOD_SCORE` x the one of its validating run (a scalar tied to one dimension of a 2D
    launch of another aspect ratio) is followed by the next ones, within the same
    ``max_attempts``, and the most active kept.

    ``store`` (a JSON-lines file): each configuration's verified setting, or why none passed, is
    appended there as it is decided and read back by the next selector over the same file, so a
    resumed datagen (or its rounds) does not run the instrumented checks of stored configurations
    again. The file must belong to this analysis and these options (:func:`kernel_selector` names
    it after both)."""
    verified: dict[tuple[Any, ...], Verified | str] = _read_verified(store) if store else {}
    ar = _activity_variant(rewrite) if rewrite is not None else None

    def remember(key: tuple[Any, ...], outcome: Verified | str) -> None:
        verified[key] = outcome
        if store is not None:
            _append_verified(store, key, outcome)

    def chosen(params: list[KernelParam], gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
               v: Verified) -> list[ArgBinding]:
        select.last_setting = analysis.settings[v.setting]  # type: ignore[attr-defined]
        select.last_activity = v.activity  # type: ignore[attr-defined]
        select.last_grown = dict(v.grown)  # type: ignore[attr-defined]
        return _grow(memory_args(analysis, params, gsize, lsize, v.setting), v.grown)

    def check(gsize: tuple[int, ...], lsize: tuple[int, ...] | None, args: list[ArgBinding]
              ) -> tuple[list[str], Activity | None, dict[str, AccessExtent]]:
        assert rewrite is not None
        try:
            if ar is not None:
                return activity_and_extents(harness, ar, gsize, lsize, args)
            return check_bounds(harness, rewrite, gsize, lsize, args), None, {}
        except InstrumentedRunError as e:
            return [f"bounds check: {e.status}: {e.reason}"], None, {}

    def select(params: list[KernelParam], gsize: tuple[int, ...], lsize: tuple[int, ...] | None) -> list[ArgBinding]:
        select.last_activity = None  # type: ignore[attr-defined]
        select.last_grown = {}  # type: ignore[attr-defined]
        if not analysis.settings:
            raise UnsupportedArgument(f"{analysis.kernel_name}: memory analysis found no valid setting "
                                      f"({analysis.reason})")
        ok = eligible_settings(analysis, gsize, mem_cap_bytes)
        if not ok:
            raise UnsupportedArgument(f"{analysis.kernel_name}: every valid setting needs more than "
                                      f"{mem_cap_bytes >> 20} MiB at gsize {tuple(gsize)}")
        if choice is not None:
            if choice not in ok:
                raise UnsupportedArgument(f"{analysis.kernel_name}: setting {choice} is not usable at gsize "
                                          f"{tuple(gsize)}")
            order = [choice]
        else:
            order = ranked_settings(analysis, gsize, seed, mem_cap_bytes, rank)
        if harness is None or rewrite is None:
            unchecked = [i for i in order if not analysis.settings[i].sized_by_check]
            if not unchecked:
                raise UnsupportedArgument(f"{analysis.kernel_name}: every valid setting needs a bounds check per "
                                          f"configuration to size its arrays")
            select.last_setting = analysis.settings[unchecked[0]]  # type: ignore[attr-defined]
            return memory_args(analysis, params, gsize, lsize, unchecked[0])
        key = (tuple(gsize), tuple(lsize) if lsize else None)
        known = verified.get(key)
        if isinstance(known, str):
            raise UnsupportedArgument(known)
        if known is not None and known.setting < len(analysis.settings):
            return chosen(params, gsize, lsize, known)
        problems: list[str] = []
        best: Verified | None = None
        runs = max(1, max_attempts)       # instrumented runs this configuration may take
        for pick in order:
            if runs <= 0:
                break
            args = memory_args(analysis, params, gsize, lsize, pick)
            grown: dict[str, int] = {}
            while True:
                runs -= 1
                bad, act, extents = check(gsize, lsize, args)
                need = _needed(args, extents, rewrite) if bad and not grown and runs > 0 else {}
                if not need or _bytes(analysis.settings[pick], gsize, need) > mem_cap_bytes:
                    break
                # the fit under-sizes arrays at this configuration (sizes that follow one dimension
                # of a 2D launch, fitted against all work-items): size them by what the run
                # touched, and check again
                log.info("%s gsize %s: setting %d sized by the check's extents: %s", analysis.kernel_name, gsize,
                         pick, need)
                grown, args = need, _grow(args, need)
            if bad:
                problems.append(f"setting {pick}: {bad[0]}")
                log.info("%s gsize %s: setting %d fails the bounds check: %s", analysis.kernel_name, gsize, pick,
                         bad[0])
                continue
            if best is None or _work(act) > _work(best.activity):
                best = Verified(pick, act, grown)
            ref = analysis.settings[pick].active_fraction
            if not rank or act is None or ref is None or (
                    _fraction(act) >= GOOD_SCORE * ref
                    and (act.active_fraction is None or act.active_fraction >= GOOD_SCORE)):
                break
            # the work done here fell well below the validating run's (a scalar tied to one
            # dimension met another aspect ratio), or most work-items stayed idle (a constant
            # problem size smaller than this launch, ``cols = 256`` at 1,024 work-items per
            # group): try the next setting, keep the one with the most active work-items
        if best is not None:
            remember(key, best)
            return chosen(params, gsize, lsize, best)
        why = (f"{analysis.kernel_name}: no setting passes the bounds check at gsize {tuple(gsize)} "
               f"({'; '.join(problems)})")
        remember(key, why)
        raise UnsupportedArgument(why)

    return select


@dataclass
class Verified:
    """A configuration's verified setting: its index, the activity of the checking run, and the
    arrays sized by what a check touched instead of by the setting's fit (name -> elements)."""

    setting: int
    activity: Activity | None
    grown: dict[str, int] = field(default_factory=dict)


def _needed(args: list[ArgBinding], extents: dict[str, AccessExtent], rewrite: RewriteResult | None
            ) -> dict[str, int]:
    """The element counts under which a failed check's out-of-bounds buffers hold what the run
    touched (each sized ``max_index + 1``); empty when sizes cannot help: an index below 0, a local
    array, code left uninstrumented."""
    if rewrite is None or rewrite.unsupported:
        return {}
    kinds = {a.name: a.kind for a in args}
    need: dict[str, int] = {}
    for name, e in extents.items():
        if not e.out_of_bounds:
            continue
        if e.min_index < 0 or kinds.get(name) != "buffer":
            return {}
        need[name] = e.needed
    return need


def _grow(args: list[ArgBinding], sizes: dict[str, int]) -> list[ArgBinding]:
    return [replace(a, count=max(int(a.count or 0), sizes[a.name])) if a.name in sizes else a for a in args]


def _bytes(setting: Setting, gsize: tuple[int, ...], sizes: dict[str, int]) -> int:
    total = math.prod(gsize)
    return sum(max(f.size(total), sizes.get(n, 0)) * f.elem_bytes for n, f in setting.arrays.items())


def _append_verified(path: Path, key: tuple[Any, ...], outcome: Verified | str) -> None:
    rec: dict[str, Any] = {"gsize": list(key[0]), "lsize": list(key[1]) if key[1] is not None else None,
                           "v": CHECK_VERSION}
    if isinstance(outcome, str):
        rec["unsupported"] = outcome
    else:
        rec["setting"] = outcome.setting
        rec["activity"] = outcome.activity.to_dict() if outcome.activity is not None else None
        if outcome.grown:
            rec["grown"] = outcome.grown
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:     # one line a configuration: a kill loses at most the line in flight
        f.write(json.dumps(rec) + "\n")


def _read_verified(path: Path) -> dict[tuple[Any, ...], Verified | str]:
    """The verified settings of :func:`_append_verified`'s file (a torn or foreign line is skipped,
    and so is a failure found by older checks than :data:`CHECK_VERSION`: that configuration is
    checked again; a later line of a configuration replaces an earlier one)."""
    out: dict[tuple[Any, ...], Verified | str] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
            key = (tuple(int(g) for g in rec["gsize"]),
                   tuple(int(v) for v in rec["lsize"]) if rec["lsize"] is not None else None)
            if "unsupported" in rec:
                if int(rec.get("v", 1)) >= CHECK_VERSION:
                    out[key] = str(rec["unsupported"])
            else:
                act = rec.get("activity")
                out[key] = Verified(int(rec["setting"]), Activity.from_dict(act) if act is not None else None,
                                    {str(k): int(v) for k, v in (rec.get("grown") or {}).items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            log.debug("%s: skipped an unreadable line", path)
    return out


def _cache_key(kernel: Kernel, harness: Any, options: dict[str, Any]) -> str:
    ident = getattr(harness.device, "identity", str(harness.device))
    blob = json.dumps({"k": kernel.id, "d": ident, "o": options, "v": ANALYSIS_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def analyse_cached(harness: Any, kernel: Kernel, cache_dir: Path | None = None, **options: Any) -> MemoryAnalysis:
    """:func:`infer_arguments`, its result kept as JSON in ``cache_dir`` (resumable datagen)."""
    if cache_dir is None:
        return infer_arguments(harness, kernel, **options)
    cache_dir = Path(cache_dir)
    key_opts = {k: v for k, v in options.items() if k != "device_limits"}
    path = cache_dir / f"{kernel.name}-{_cache_key(kernel, harness, key_opts)}.json"
    if path.is_file():
        try:
            return MemoryAnalysis.from_dict(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("%s: unreadable memory analysis cache (%s); redoing it", path, e)
    an = infer_arguments(harness, kernel, **options)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(an.to_dict(), indent=1))
    tmp.replace(path)
    return an


def kernel_selector(harness: Any, kernel: Kernel, params: list[KernelParam] | None = None, *, seed: int = 0,
                    cache_dir: Path | None = None, mem_cap_bytes: int = DEFAULT_MEM_CAP_BYTES,
                    verify: bool = True, rank: bool = True, **options: Any) -> Selector:
    """Run (or load) the memory analysis of ``kernel`` and return its selector.

    ``verify`` (default): bounds-check every configuration with one instrumented run before
    handing out its arguments (see :func:`memory_selector`); a fit extrapolated past a breakpoint
    or to another aspect ratio then costs a replaced setting, not a crashed or out-of-bounds row.
    ``params`` is accepted for symmetry with the datagen loop (the selector receives them per
    call); ``options`` go to :func:`infer_arguments` (e.g. ``device_limits``, ``max_combos``)."""
    del params
    an = analyse_cached(harness, kernel, cache_dir, seed=seed, mem_cap_bytes=mem_cap_bytes, **options)
    rewrite = None
    store = None
    if verify and an.settings:
        rewrite = instrument_kernel(kernel, int64_atomics=an.int64_atomics)
        if cache_dir is not None:     # the verified settings, beside the analysis they belong to
            key_opts = {k: v for k, v in options.items() if k != "device_limits"}
            key = _cache_key(kernel, harness, {**key_opts, "seed": seed, "mem_cap_bytes": mem_cap_bytes,
                                               "rank": rank, "verified": VERIFIED_FORMAT})
            store = Path(cache_dir) / f"{kernel.name}-{key}.verified.jsonl"
    return memory_selector(an, seed=seed, mem_cap_bytes=mem_cap_bytes, harness=harness if verify else None,
                           rewrite=rewrite, rank=rank, store=store)


#: selections that need the kernel (and a device) before they can choose arguments, by name
KernelSelectorFactory = Callable[..., Selector]
KERNEL_SELECTORS: dict[str, KernelSelectorFactory] = {"memory": kernel_selector}


# ---------------------------------------------------------------------------------------------
# bounds check


def check_bounds(harness: Any, kernel: Kernel | RewriteResult, gsize: tuple[int, ...], lsize: tuple[int, ...] | None,
                 args: list[ArgBinding]) -> list[str]:
    """Run the instrumented kernel with concrete arguments; the arrays it would access out of
    bounds (empty list: none). Nothing is accessed out of bounds while checking."""
    rr = kernel if isinstance(kernel, RewriteResult) else instrument_kernel(kernel)
    scalars = {a.name: a.value for a in args if a.kind == "scalar"}
    sizes = {a.name: int(a.count or 0) for a in args if a.kind == "buffer"}
    locs = {a.name: int(a.count or 0) for a in args if a.kind == "local"}
    ext = measure_instrumented(harness, rr, gsize, lsize, scalars, sizes, local_sizes=locs).extents
    problems = [f"{n}: touches [{e.min_index}, {e.max_index}] of {e.allocated} elements"
                for n, e in ext.items() if e.out_of_bounds]
    if rr.unsupported:
        problems += [f"not instrumented: {u}" for u in rr.unsupported]
    return problems


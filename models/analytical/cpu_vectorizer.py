"""What an OpenCL CPU runtime makes of a kernel's source: whether its work-item loop is vectorized
(:func:`cpu_vectorizable`), where it puts implicit loop barriers (:func:`unbarriered_loops`,
:func:`cpu_throughput_loops`), which loops its compiler unrolls, and which accesses its vectorizer
gathers (:func:`consecutive_gather`). The static analysis reports the facts (loops, their trip
counts and uniformity across work-items, guards, calls); these rules are the runtime's reading of
them, written for PoCL (``docs/analytical-model.md`` has the measurements behind each)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kernelcast.models.static.clbuiltins import INSTRUCTION_FAMILIES
from kernelcast.models.static.features import LIBCALL
from kernelcast.models.static.loops import PRAGMA_UNROLL_MAX_TRIP, UNROLL_MAX_TRIP

#: full-precision builtin families whose calls leave the work-item loop scalar: the runtime's math
#: library is inlined as scalar code with branches, which the loop vectorizer does not vectorize.
#: Measured on PoCL 3.1: a kernel of 8 dependent calls per work-item and no
#: loop ran this many times below the explicit float16 peak of the same builtin: log 421, atan 347,
#: erf 147, pow 139, sin 182, tanh 31, but exp 4.8, native_exp 13, native_sin 10.6, sqrt and rsqrt
#: 1.9, native_divide 0.6 (fp32 FMA 0.1): those stay vectorizable. hypot: a kernel of one
#: ``hypot(x[i], y[i])`` per work-item ran 28.2 ns per work-item, ``sqrt(a * a + b * b)`` 0.155
#: (PoCL 3.1, 2^18 work-items). rint (and the float -> integer conversions with a rounding
#: mode, ``convert_int_rte``): 0.67 ns per work-item against 0.085 for ``convert_int``.
#: cbrt: ``cbrt(x[i])`` 33.6 ns per work-item against 0.18 for ``sqrt(x[i])`` (PoCL 3.1,
#: 2^20 work-items). fmod: ``fmod(x[i] * 40.0f, 0.37f)`` 4.9 ns per work-item against
#: 0.088 for the division (PoCL 3.1, 2^16 work-items), where calib's
#: float16 fmod ran 6x its scalar rate.
#: The routines with a family of their own since (``models.static.features.FAMILY_PARENT``) stay
#: with their parent's families, and exp2, exp10 and expm1 join them although exp does not: four
#: independent calls per work-item of 2^18 work-items (PoCL 3.1) took 3,617, 4,093 and
#: 11,064 us against 296 for exp (12-37x; their explicit float16 variants run 2.8-13 G/s); charged at
#: exp's vectorized rate, the 16 kernels of the dataset with exp2 calls were 1.4x too fast at the
#: median and 6x at worst (synth_stencil_000100).
SCALAR_FAMILIES = ("bi_log", "bi_sin", "bi_atan", "bi_pow", "bi_tanh", "bi_erf", "bi_hypot", "bi_rint", "bi_cbrt",
                   "bi_fmod", "bi_exp2", "bi_exp10", "bi_expm1", "bi_log2", "bi_log10", "bi_log1p", "bi_cos",
                   "bi_tan", "bi_sinh", "bi_cosh", "bi_asin", "bi_acos", "bi_erfc")


#: families of :data:`SCALAR_FAMILIES` that leave the work-item loop scalar unless every call is of
#: this builtin, at no more call sites than this (asinh, acosh and atanh, in tanh's family, are
#: still scalar library code): PoCL 3.1 inlines tanh as vector code, until the inlined copies make the loop
#: too large for its vectorizer. Read off its compiled code and timed  (2^20
#: work-items): ``out[i] = tanh(x)`` is vector code (594 ymm references, 540-1,085 us in the host's
#: fast and slow phases, 1.4 G calls/s at 2^19 work-items with the argument made from the id), as in
#: the dataset's ``tm_tanh_act`` and ``tm_gelu_approx`` (both 2.4x too slow charged as scalar code);
#: ``tanh(x) + tanh(x + 1) + ...`` is vector code with 2 and 3 calls, scalar with 4, 5 and 8 (no ymm;
#: 15,050-15,600, 19,660-19,970, 28,330-28,900 us, 0.27 G calls/s); but two calls on values made
#: apart (calib's ``kc_wi_tanh_n2``) ran scalar too (0.24 G calls/s), so only one call counts as
#: vectorizable. The 8 dependent calls behind tanh's place in the list ran scalar for the size and
#: for their chain (``chain_tanh_ns``).
SCALAR_FAMILY_VECTOR_CALLS = {"bi_tanh": ("tanh", 1)}


def _few_vector_calls(feats: Any, cls: str) -> bool:
    """Whether the kernel's calls of family ``cls`` are all of the builtin the runtime still
    vectorizes, at few enough call sites (:data:`SCALAR_FAMILY_VECTOR_CALLS`;
    :attr:`SourceFeatures.call_sites`: each inlined path counted, however often it runs)."""
    if cls not in SCALAR_FAMILY_VECTOR_CALLS:
        return False
    routine, limit = SCALAR_FAMILY_VECTOR_CALLS[cls]
    sites = {k.split(":", 1)[1]: n for k, n in (getattr(feats, "call_sites", None) or {}).items()
             if k.split(":", 1)[0] == cls}
    return set(sites) == {routine} and sites[routine] <= limit


def _unrolled(lp: Any, trips: float) -> bool:
    """Whether the compiler unrolls loop ``lp`` of ``trips`` constant trips fully, the rule the
    walker's code motion uses too (``walk_loop._unrolls_fully``): under a ``#pragma unroll``
    (:attr:`LoopInfo.unroll_pragma`) whose count covers the trips (any count up to
    :data:`~models.static.loops.PRAGMA_UNROLL_MAX_TRIP` without one), a routine called or not; never
    under ``#pragma nounroll`` nor with an exit (``break``, ``return``: :attr:`LoopInfo.has_break`);
    without a pragma, up to :data:`UNROLL_MAX_TRIP` trips and no library routine called
    (:func:`_unroll_blockers`)."""
    pragma = getattr(lp, "unroll_pragma", None)
    if pragma == 1 or getattr(lp, "has_break", False):
        return False
    if pragma is not None:
        return trips <= (pragma or PRAGMA_UNROLL_MAX_TRIP)
    return trips <= UNROLL_MAX_TRIP and not _unroll_blockers(lp)


def _unroll_blockers(lp: Any) -> list[str]:
    """The builtin calls in the body of loop ``lp`` (:attr:`LoopInfo.calls`) that keep the compiler
    from unrolling it fully, however few its trips: a math library routine, inlined, is too large
    for the full-unroll threshold."""
    out = []
    for c in getattr(lp, "calls", ()):
        fam = c[3:].removeprefix("native_").removeprefix("half_")
        if fam not in INSTRUCTION_FAMILIES:
            out.append(c[3:])
    return out


def builtin_calls(feats: Any) -> list[str]:
    """The op classes of builtin calls in a kernel: the families (``bi_*``) and the other math
    builtins (``libcall``)."""
    ops = getattr(feats, "ops", {})
    return [k for k in ops if k.startswith("bi_") or k == LIBCALL]


def conditional_stores(feats: Any) -> list[Any]:
    """The global and local stores (not atomics) that run under a condition differing between
    work-items (:attr:`models.static.features.Access.conditional`)."""
    return [a for a in getattr(feats, "accesses", []) if a.kind == "store" and a.space in ("global", "local")
            and getattr(a, "conditional", "")]


def cpu_vectorizable(feats: Any, *, barrier_loops: bool = False, cond_store_scalar: bool = False,
                     libcall_scalar: bool = False) -> tuple[bool, str]:
    """Static estimate of whether a CPU OpenCL runtime (PoCL, Intel) vectorizes the work-item
    loop of a kernel: LLVM's loop vectorizer only handles innermost loops, so a kernel with a loop
    it does not fully unroll runs one work-item per lane of scalar code; atomics and calls of the
    transcendental builtins (:data:`SCALAR_FAMILIES`) are not vectorized. Branches are
    if-converted (masked stores), gathers use gather instructions.

    Except in a kernel with a work-group barrier: there PoCL splits the work-item loop into
    parallel regions at the barriers, and it also puts an implicit barrier into every loop whose
    trip count is the same for all work-items (not ``divergent``), so the work-item loop runs
    *inside* that loop and is vectorized. Measured on PoCL 3.1 (a 2-core
    x86-64 CPU): a loop of 2,000 uniform trips of two dependent LCG steps per work-item ran 2.1 ns per
    trip and work-item per core without a barrier in the kernel and 0.17-0.18 ns with one
    barrier after the loop (the same 12x with a trip count read from a buffer), but 2.1 ns again
    when the trip count differs between work-items (``samples + (gid & 1)``) even with the
    barrier; a 256-trip dot-product loop ran 2.9x faster with a barrier. The same kernels are
    timed by ``tests/test_cpu_class.py::test_uniform_loop_in_a_barrier_kernel_runs_vectorized_on_this_device``.

    A loop that itself contains a barrier (a tree reduction, a tiled loop) runs one region of
    the work-item loop per trip; that cost is charged per barrier and work-item
    (``barrier_wi_ns``, calibrated with such a loop) rather than through the vectorizability of
    the whole kernel, when ``barrier_loops`` (the profile has that value); without it such a
    loop makes the kernel scalar. A loop contains a barrier when its trip count is a
    factor of the kernel's barrier count.

    ``cond_store_scalar`` (the device's calibrated fact, :attr:`DeviceParams.cond_store_scalar`): a
    store under a condition that differs between work-items (``if (i < n) c[i] = ...``, the rest
    of a kernel after ``if (i >= n) return;``) leaves the work-item loop of a kernel without
    barriers scalar, and in a kernel with barriers an access under such a condition that steps with
    a uniform loop keeps that loop's work-item loop scalar. ``libcall_scalar``
    (:attr:`DeviceParams.libcall_scalar`): a call of any math builtin does."""
    for a in getattr(feats, "accesses", []):
        if a.kind == "atomic":
            return False, f"atomic on {a.arg} (line {a.line})"
    mixing = getattr(feats, "lane_mixing", [])
    if mixing:
        # measured on PoCL 3.1 (1 Mi work-items): distance(r[i], q) of a float2 r 1.46 ns per
        # work-item, v = r[i] - q; sqrt(v.x * v.x + v.y * v.y) 1.44, v.x * v.x + v.y * v.y 0.57, against
        # 0.19 for sqrt of a float array and 0.15 for float4 and float2 arithmetic kept whole
        return False, (f"components of one work-item's vector value combined (line {mixing[0]}: a swizzle or "
                       f"dot/length/distance); the work-item loop stays scalar")
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        for a in getattr(feats, "accesses", []):
            if _uniform_conditional_store(a):
                return False, (f"store to one address for all work-items under a condition ({a.arg}, line {a.line}; "
                               f"the loop vectorizer leaves such a store scalar)")
    if libcall_scalar:
        calls = builtin_calls(feats)
        if calls:
            return False, (f"builtin calls ({', '.join(sorted(calls))}); this runtime calls its builtins out of line "
                           f"(calib cond)")
    if cond_store_scalar and not _has_barrier(ops):
        # a kernel with barriers is split into work-item loops at them: a guarded store (a tree
        # reduction's ``if (lid < s)``, the group's ``if (lid == 0)`` result) is one region's, not the
        # loop's around the kernel's own work (ap_monte_carlo_pi: 2^-3.6 of its measured time when
        # charged scalar for its reduction's stores, 2^-1.1 without)
        cond = conditional_stores(feats)
        if cond:
            a = cond[0]
            return False, (f"store to {a.arg} (line {a.line}) under a condition that differs between work-items "
                           f"({a.conditional}); this runtime leaves such a work-item loop scalar (calib cond)")
    calls = sorted(k[3:] for k in ops if k in SCALAR_FAMILIES and not _few_vector_calls(feats, k))
    if calls:
        return False, "calls of " + ", ".join(calls) + " (scalar math library code)"
    barrier = _has_barrier(ops)
    bcount = str(ops.get("barrier", "")) if barrier else ""
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    deepest = max((lp.depth for lp in live), default=0)
    uniform_loops = barrier_loops_n = 0
    for lp in live:
        try:
            t: float | None = float(lp.trip)
        except ValueError:
            t = None
        if barrier and t is None and lp.trip in bcount and not getattr(lp, "divergent", True):
            # a loop with barriers: its regions are work-item loops of scalar code (measured:
            # 1.3-2 ns per work-item and barrier for one local update); with no loop inside it
            # (a tree reduction, a scan) that is the barrier's per-work-item cost; a loop
            # nested in it (a tiled loop's inner loop) is scalar compute
            if barrier_loops and lp.depth >= deepest:
                barrier_loops_n += 1
                continue
            return False, (f"loop at line {lp.line} with barriers and trip count {lp.trip}"
                           + (" and a loop inside" if lp.depth < deepest else ""))
        if t is not None and _unrolled(lp, t):
            continue
        if barrier and not getattr(lp, "divergent", True):
            shape = _implicit_barrier_blocker(lp) or _blocked_inner_loop(live, lp)
            if not shape:
                uniform_loops += 1
                continue
            return False, (f"loop at line {lp.line} with the same trip count in every work-item but {shape}: the "
                           f"runtime puts no implicit barrier into it, so its work-item loop stays scalar")
        if t is None:
            return False, (f"loop at line {lp.line} with trip count {lp.trip}"
                           + (" that differs between work-items" if barrier else ""))
        if t <= UNROLL_MAX_TRIP and _unroll_blockers(lp) and getattr(lp, "unroll_pragma", None) is None:
            return False, (f"loop at line {lp.line} with {t:g} trips calling {', '.join(_unroll_blockers(lp))} "
                           f"(a library routine: the loop is too large to unroll)")
        return False, f"loop at line {lp.line} with {t:g} trips (not unrolled)"
    if uniform_loops and cond_store_scalar:
        # the work-item loop inside a uniform loop is vectorized only if the loop's body can be: a
        # runtime that leaves a guarded store scalar does the same with a guarded access that steps
        # with the loop (rd_sum_multi_elem's ``if (idx < n) acc += in[idx]``, idx = gid + k * gsz:
        # 1.4-2.5 ns per trip and work-item per core on PoCL 3.0; charged vectorized, 8.6x
        # too fast)
        for a in getattr(feats, "accesses", []):
            if a.conditional and a.trip_strides and a.space != "private":
                return False, (f"{a.kind} of {a.arg} (line {a.line}) in a loop under a condition that differs "
                               f"between work-items ({a.conditional}); this runtime leaves it scalar (calib cond)")
    why = []
    if uniform_loops:
        why.append(f"{uniform_loops} loop(s) with the same trip count in every work-item in a kernel with barriers "
                   f"(the runtime's implicit loop barriers put the work-item loop inside them)")
    if barrier_loops_n:
        why.append(f"{barrier_loops_n} loop(s) with barriers charged per barrier and work-item")
    return True, "; ".join(why) or "no loop left after unrolling and no atomics"


def _implicit_barrier_blocker(lp: Any) -> str:
    """Why PoCL puts no implicit barrier into a loop whose trip count is the same in every
    work-item ("" when it does): it takes only a loop with one exit whose induction variable it
    knows to be uniform, which is a variable counting from 0 by 1. Measured on PoCL
    3.1 (a 2-core x86-64 CPU; ``for`` loops of 2,000 trips of ``sum += (float)k + s`` in a kernel with one
    barrier after the loop, 1,024 work-items in one work-group): 0.14 ms for ``k = 0; k < n; k++``
    (also with ``k != n``, ``k <= n - 1``, ``++k``, an unsigned or 64-bit counter, as a ``while``
    loop, or nested in a loop of 4 trips), 1.4 ms, 10x, for ``k = n - 1; k >= 0; k--``, ``k = n;
    k > 0; k--``, ``k = 1; k <= n; k++``, ``k += 2`` up to ``2 n``, and for a ``break`` or a second
    bound (``k < n && k < m``) in a loop counting from 0."""
    if getattr(lp, "has_break", False):
        return "with a break"
    if getattr(lp, "early_exit", False):
        return "with a second exit condition"
    if not getattr(lp, "from_zero", False):
        return (f"its condition is not one bound on a counter{' (' + lp.var + ')' if getattr(lp, 'var', None) else ''} "
                f"counting from 0 by 1")
    return ""


def unbarriered_loops(feats: Any) -> list[int]:
    """Lines of the loops of a kernel with barriers whose trips are alike in every work-item but
    which get no implicit barrier from the runtime (:func:`_implicit_barrier_blocker`, or a loop
    nested in them that gets none: :func:`_blocked_inner_loop`): their work-item loop runs around
    them, so each work-item's chain through them runs in turn as in a kernel without barriers.
    Measured on PoCL 3.1 (8,192 work-items in groups of 16 to 256): a
    loop of 2,000 trips of ``s = s * 0.999f + 1.0f`` counting down ran 7.4-7.6 ms with a barrier
    before it and without; predicted 7.85 ms with its chain (2.76 ms without). (A chain through
    an inner loop the compiler unrolls is not counted: the uniform loop around
    ``d = -2; d <= 2`` ran 7.7-8.2 ms, predicted 3.6.) Empty without a barrier."""
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        return []
    bcount = str(ops.get("barrier", ""))
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    out = []
    for lp in live:
        if getattr(lp, "divergent", True):
            continue
        try:
            if _unrolled(lp, float(lp.trip)):
                continue
        except ValueError:
            if lp.trip in bcount:
                continue                        # a loop with barriers
        if _implicit_barrier_blocker(lp) or _blocked_inner_loop(live, lp):
            out.append(lp.line)
    return out


def _blocked_inner_loop(loops: Sequence[Any], loop: Any) -> str:
    """Why a loop nested in ``loop`` keeps ``loop`` from getting an implicit barrier ("" when none
    does): PoCL puts implicit barriers into innermost loops only (its ImplicitLoopBarriers pass), and
    before the compiler unrolls anything, so a loop of a few constant trips nested in ``loop`` that
    gets no implicit barrier itself (:func:`_implicit_barrier_blocker`) leaves ``loop``'s work-item
    loop scalar. ``loops``: the kernel's live loops in the walk's order, a loop's inner loops right
    before it and deeper. Measured on PoCL 3.1 (8,192 work-items, one
    barrier before a loop of 400 trips around ``for (int d = -2; d <= 2; ++d) s = s * 0.999f + d``):
    7.8 ms in groups of 16, 64 and 256, against 0.55-0.76 ms with ``d = 0; d < 5`` (14x; the
    analytical model took both as vectorized). Not modelled: an inner loop of 2 trips counting from
    0 (``k = 0; k < 2``) ran 3.7x slower than one of 3 or 4 trips in groups of 64 and 256, and as
    fast in groups of 16."""
    i = next((j for j, lp in enumerate(loops) if lp is loop), None)
    if i is None:
        return ""
    for inner in reversed(loops[:i]):
        if inner.depth <= loop.depth:
            break
        why = _implicit_barrier_blocker(inner)
        if why:
            return (f"a loop inside it (line {inner.line}) {why}; the runtime adds implicit barriers to innermost "
                    f"loops only")
    return ""


def _uniform_conditional_store(a: Any) -> bool:
    """A store whose address is the same for every work-item (a constant index: a flag such as
    ``*changed = 1``) and that not every work-item executes (its count is not 1). LLVM's loop
    vectorizer does not vectorize a conditional store to a loop-invariant address, so PoCL's
    work-item loop stays scalar. Measured on PoCL 3.1 (a 2-core x86-64 CPU, 2^19 work-items,
    ``/tmp`` probe of gr_bfs_update_mask): 0.73 ns per work-item with ``if (nf[v]) {...; *not_done
    = 1;}``, 0.050 without the flag store, 0.22 with the flag stored unconditionally or stored per
    work-item (``not_done[v] = 1``, 4 more bytes per item): the conditional uniform store made the
    kernel 15x slower. Kernels with barriers are left out (there the store is usually a group's
    ``if (lid == 0)`` result in its own region after the last barrier)."""
    if a.kind != "store" or a.space not in ("global", "local") or a.indirect or not a.affine:
        return False
    if getattr(a, "coeffs", None) or str(a.count).strip() == "1":
        return False
    try:
        float(str(getattr(a, "index_expr", "") or "x"))
    except ValueError:
        return False
    return True


def cpu_throughput_loops(feats: Any) -> list[int]:
    """Lines of the loops that make a vectorized CPU kernel run at the throughput (peak) rates
    rather than at the one-chain-per-work-item rates (``wi_<class>_gops``); empty unless every
    loop that is neither unrolled nor a loop with barriers is one. Such a loop, in a kernel with
    barriers, has the same trip count in every work-item, no memory access and no loop nested
    in it: PoCL gives it an implicit barrier, so the work-item loop runs inside it and each trip
    is a pass over independent work-items. Measured on PoCL 3.1 (a 2-core x86-64 CPU): two
    dependent LCG steps (13 operations) per trip ran 0.17-0.34 ns per trip and work-item on one
    core, an fmax chain 0.12-0.20 ns, whether the loop comes before or after the barrier, two
    such loops too; without a barrier in the kernel 2.1-2.3 ns. The operation counts are per
    kernel, not per loop, hence all loops or none: kernels with a loop that reads memory in
    every trip ran 3-4x slower than the peak rates, and a uniform loop nested in another ran
    scalar, 2.8 ns per trip."""
    ops = getattr(feats, "ops", {})
    if not _has_barrier(ops):
        return []
    bcount = str(ops.get("barrier", ""))
    live = [lp for lp in getattr(feats, "loops", []) if lp.trip_kind != "dead"]
    if max((lp.depth for lp in live), default=0) != 1:
        return []
    counts = [str(a.count) for a in getattr(feats, "accesses", [])]
    out = []
    for lp in live:
        try:
            if float(lp.trip) <= UNROLL_MAX_TRIP:
                continue
            constant = True
        except ValueError:
            constant = False
        if not constant and lp.trip in bcount and not getattr(lp, "divergent", True):
            continue                                  # a loop with barriers: charged per barrier
        if getattr(lp, "divergent", True) or any(lp.trip in c for c in counts):
            return []
        out.append(lp.line)
    return out


def _has_barrier(ops: Any) -> bool:
    """Whether the kernel has a work-group barrier: a ``barrier`` count that is not constant 0."""
    c = ops.get("barrier") if hasattr(ops, "get") else None
    if c is None:
        return False
    try:
        return float(c) > 0
    except (TypeError, ValueError):
        return True           # a symbolic count (barriers inside loops)


_LANE_ID = re.compile(r"\b(?:gid0|lid0)\b")


def clamped_index(a: Any) -> bool:
    """Whether an access's index clamps a work-item id (``in[min(i + 1, n - 1)]``, ``clamp(x + dx,
    0, w - 1)``, ``max(gid - 1, 0)``): affine with one element between adjacent work-items almost
    everywhere, but the loop vectorizer cannot prove the lanes' addresses consecutive and issues a
    gather. Measured on PoCL 3.1 (a 2-core x86-64 CPU, 262,144 work-items in groups of 256):
    ``out[i] = in[clamp(i - 1, 0, n - 1)] + in[clamp(i + 1, 0, n - 1)]`` 89 us against 19-20 us for
    ``out[i] = in[i] * 2``, the same under ``if (i < n)`` or after ``if (i >= n) return;`` 92-95 us:
    0.27 ns per clamped load and core, against 0.18 for calib's gathers of consecutive addresses."""
    text = str(getattr(a, "index_expr", "") or "")
    for m in re.finditer(r"\b(?:min|max|clamp)\(", text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if _LANE_ID.search(text[m.end():j]):
            return True
    return False


_SHIFTED_GID = re.compile(r"^(?:gid0 [+-] \d+|\d+ \+ gid0)$")


def shifted_int_index(a: Any) -> bool:
    """Whether an access's index is a signed 32-bit ``int`` global id plus a constant (``int i =
    get_global_id(0); ... in[i + 1]``): PoCL 3.1's loop vectorizer gathers it, though the lanes'
    addresses are consecutive. Measured on PoCL 3.1 (a 2-core x86-64 CPU, 2^20 work-items in groups of 256,
    ``out[i] = in[i + C] * 2``, two rounds each): 180-199 us for C = 1, 3 or 7 and for a store to
    ``out[i + 1]``, against 47-57 us for ``in[i]``, for the same index as ``uint`` or ``size_t``, for
    ``in[i + off]`` with ``off`` a kernel argument, for ``y * w + x + 1`` in 2D and for ``g + l + 1``
    from the group and local ids. Not where a guard around the access bounds that index so that the
    vectorizer proves the addresses consecutive (``Access.index_guarded``, :mod:`models.static.guards`:
    ``i >= 1 ? in[i - 1]``, ``if (i + 1 < n) ... in[i + 1]``): a masked vector load or store there."""
    return (bool(getattr(a, "index_int32", False)) and not getattr(a, "index_guarded", False)
            and bool(_SHIFTED_GID.match(str(getattr(a, "index_expr", "")))))


def consecutive_gather(a: Any) -> bool:
    """Whether vectorized CPU code gathers an access whose lanes' addresses are consecutive
    (:func:`clamped_index`, :func:`shifted_int_index`)."""
    return clamped_index(a) or shifted_int_index(a)

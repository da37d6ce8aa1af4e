"""OpenCL C sources of the calibration microbenchmarks, and the work each one does.

Every kernel is generated here from a few parameters (vector width, number of independent
chains, ...) and named after them, so a measurement can be turned back into a rate from the
kernel name and launch configuration alone (:func:`op_kernel_work` and friends); the tests'
fake harness uses the same accounting to synthesise measurements.

Design notes
------------
* **Peak rates** (``kc_op_<class>_w<W>k<K>``): each work-item keeps ``K`` independent
  accumulators of an OpenCL vector type of width ``W`` and updates each of them once per loop
  iteration with a dependent operation (``a = a * s + t``, ``a = sin(a)``, ...). ``K x W``
  independent chains give the instruction-level parallelism the units need; the loop count is a
  run-time argument so one build serves every duration, and only one value per work-item is
  written at the end, so memory traffic is negligible. The update forms are chosen so that a
  compiler may not fold the loop away (no ``-cl-fast-relaxed-math``, so no reassociation; the
  integer add is a two-variable recurrence that scalar evolution cannot close) and so that the
  values stay normal (no denormal slow paths): multiplications alternate ``s`` and ``1/s``,
  ``a * 0.999 + 0.001`` converges to 1, ``s / a`` oscillates, ``exp(-a)`` converges.
  PoCL on a CPU vectorises explicit vector types but, for these loops, not the implicit
  work-item loop, hence the vector width parameter; on a GPU a vector is ``W`` independent
  scalar instructions.
* **Streaming read** (``kc_stream_read[_blk]_v<W>``): a read of a buffer of ``n`` vectors,
  ``passes`` times inside the kernel, two accumulators per work-item, either grid-stride
  (coalesced on a GPU) or one contiguous chunk per work-item (PoCL on a CPU runs a work-item's
  whole loop before the next one's, so grid-stride becomes a 1 MiB-stride walk there, 4x slower
  from DRAM); calibration probes both and keeps the faster. A barrier ends every pass and the
  kernel is launched with one work-group per compute unit: without it, a CPU driver runs one
  work-item's passes back to back and re-reads a few hundred bytes from L1 instead of the
  working set; with it, every work-group re-reads its whole share (working set / compute units)
  between passes, on a GPU as on a CPU. A working set that fits a cache level stays there; the
  warm-up launches of the harness fill it.
* **Pointer chasing** (``kc_chase``): the harness can only bind buffers initialised to
  random / zeros / ones, so the chain is built *by the kernel itself*: one work-group writes
  ``next[sigma(k)] = sigma(k + 1)`` for a pseudo-random bijection ``sigma`` of ``[0, m)``
  (multiply by an odd constant and xor-shift, both invertible modulo ``2^b``), so the chain is a
  single cycle through all ``m`` nodes in an order no stride prefetcher follows; after a barrier,
  work-item 0 follows ``steps`` dependent loads. The build pass is also the warm-up of the
  working set (as in Delestrac et al., section V-B, where a warm-up loop precedes the
  measurement loop). The build cost is removed by measuring the same kernel with several step
  counts (one of them 0) and taking the slope of time against steps.
* **Launch / work-group / barrier overheads**: an empty kernel, a kernel whose work-items do
  nothing (a never-true branch), and a loop of ``nb`` barriers (``nb`` a run-time argument),
  each ending a region that updates one local value per work-item.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kernelcast.schema import Kernel

#: nodes of the pointer chase are this many bytes apart (a CPU cache line; two 32 B GPU sectors)
CHASE_NODE_BYTES = 64
_CHASE_NODE_UINTS = CHASE_NODE_BYTES // 4


@dataclass(frozen=True)
class OpClass:
    """One operation class of the peak-rate benchmark."""

    name: str
    base: str                 # OpenCL scalar type of the accumulators: float / double / uint
    update: str               # one update of accumulator {a} (and, for pairs, its partner {b})
    ops_per_update: int       # operations one update performs
    init: str                 # scalar initial value; {k} is the chain index
    s: float | int            # value of scalar argument s
    t: float | int            # value of scalar argument t
    pairs: bool = False       # updates couple accumulators k and k+1 (K must be even)
    description: str = ""

    @property
    def needs_fp64(self) -> bool:
        return self.base == "double"


OP_CLASSES: dict[str, OpClass] = {c.name: c for c in (
    OpClass("fp32_add", "float", "{a} = {a} + s;", 1, "1.0f + 0.01f * {k}", 1e-7, 0.0,
            description="fp32 add"),
    OpClass("fp32_mul", "float", "{a} = {a} * s; {a} = {a} * t;", 2, "1.0f + 0.01f * {k}", 0.999, 1 / 0.999,
            description="fp32 multiply"),
    # a * s + t, which OpenCL C contracts (FP_CONTRACT is on by default) into the target's fused
    # multiply-add, as kernels write it; not the fma() builtin, which a runtime may call out of
    # line (PoCL 3.0's wheel: 3.8 Gop/s against 54 for add, calib cond's wi_libcall_ns prices that)
    OpClass("fp32_fma", "float", "{a} = {a} * s + t;", 1, "1.0f + 0.01f * {k}", 0.999, 0.001,
            description="fp32 multiply-add, contracted into a fused multiply-add (2 flops)"),
    OpClass("fp64_fma", "double", "{a} = {a} * s + t;", 1, "1.0 + 0.01 * {k}", 0.999, 0.001,
            description="fp64 multiply-add, contracted into a fused multiply-add (2 flops)"),
    OpClass("int32_add", "uint", "{a} = {a} + {b}; {b} = {b} + {a};", 2, "(uint)({k} + 1)", 0, 0, pairs=True,
            description="32-bit integer add"),
    OpClass("int32_mul", "uint", "{a} = {a} * s;", 1, "(uint)(2 * {k} + 1)", 0x9E3779B1, 0,
            description="32-bit integer multiply"),
    OpClass("fp32_div", "float", "{a} = s / {a};", 1, "1.0f + 0.01f * {k}", 1.7, 0.0,
            description="fp32 division (full precision)"),
    # the quotient alternates between large and small (t / 3, then t / that), so both the long and
    # the short divisions of a CPU whose divider's latency depends on the quotient are in the rate
    OpClass("int32_div", "uint", "{a} = t / ({a} | 1u);", 1, "(uint)(2 * {k} + 3)", 0, 1000000007,
            description="32-bit unsigned integer division (a CPU has no SIMD divide: its peak is scalar code)"),
    OpClass("sin", "float", "{a} = sin({a});", 1, "1.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 sin (full precision builtin)"),
    OpClass("exp", "float", "{a} = exp(-{a});", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 exp (full precision builtin)"),
    OpClass("sqrt", "float", "{a} = sqrt({a});", 1, "2.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 sqrt (full precision builtin)"),
    OpClass("native_sin", "float", "{a} = native_sin({a});", 1, "1.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 native_sin (special-function unit where one exists)"),
    OpClass("native_exp", "float", "{a} = native_exp(-{a});", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 native_exp (special-function unit where one exists)"),
    OpClass("native_sqrt", "float", "{a} = native_sqrt({a});", 1, "2.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 native_sqrt (special-function unit where one exists)"),
    # one class per builtin family the static analysis charges on its own (BUILTIN_FAMILIES in
    # models/static/clbuiltins.py); each update is the builtin plus at most one add, values
    # converge to a normal fixed point
    OpClass("log", "float", "{a} = log({a} + s);", 1, "1.0f + 0.01f * {k}", 3.0, 0.0,
            description="fp32 log (full precision; one add per update)"),
    OpClass("pow", "float", "{a} = pow({a} + t, s);", 1, "1.0f + 0.01f * {k}", 0.9, 0.5,
            description="fp32 pow (full precision; one add per update)"),
    OpClass("tanh", "float", "{a} = tanh({a} + s);", 1, "0.5f + 0.01f * {k}", 0.5, 0.0,
            description="fp32 tanh (full precision; one add per update)"),
    OpClass("erf", "float", "{a} = erf({a} + s);", 1, "0.5f + 0.01f * {k}", 0.3, 0.0,
            description="fp32 erf (full precision; one add per update)"),
    OpClass("atan", "float", "{a} = atan({a}) + s;", 1, "0.5f + 0.01f * {k}", 0.7, 0.0,
            description="fp32 atan (full precision; one add per update)"),
    OpClass("rsqrt", "float", "{a} = rsqrt({a} + s);", 1, "1.0f + 0.01f * {k}", 1.0, 0.0,
            description="fp32 rsqrt (one add per update)"),
    OpClass("native_log", "float", "{a} = native_log({a} + s);", 1, "1.0f + 0.01f * {k}", 3.0, 0.0,
            description="fp32 native_log (one add per update)"),
    OpClass("native_rsqrt", "float", "{a} = native_rsqrt({a} + s);", 1, "1.0f + 0.01f * {k}", 1.0, 0.0,
            description="fp32 native_rsqrt (one add per update)"),
    OpClass("native_divide", "float", "{a} = native_divide(s, {a});", 1, "1.0f + 0.01f * {k}", 1.7, 0.0,
            description="fp32 native_divide"),
    OpClass("native_powr", "float", "{a} = native_powr({a} + t, s);", 1, "1.0f + 0.01f * {k}", 0.9, 0.5,
            description="fp32 native_powr (one add per update)"),
    OpClass("half_exp", "float", "{a} = half_exp(-{a});", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 half_exp"),
    OpClass("half_sin", "float", "{a} = half_sin({a});", 1, "1.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 half_sin"),
    OpClass("half_sqrt", "float", "{a} = half_sqrt({a});", 1, "2.0f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 half_sqrt"),
    OpClass("hypot", "float", "{a} = hypot({a}, s) * t;", 1, "1.0f + 0.01f * {k}", 0.5, 0.5,
            description="fp32 hypot (one multiply per update)"),
    OpClass("cbrt", "float", "{a} = cbrt({a} + s);", 1, "1.0f + 0.01f * {k}", 0.5, 0.0,
            description="fp32 cbrt (one add per update)"),
    OpClass("fmod", "float", "{a} = fmod({a} + s, t);", 1, "1.0f + 0.01f * {k}", 0.7, 2.5,
            description="fp32 fmod, also remainder and remquo (one add per update)"),
    # the routines of a builtin family with their own cost (models.static.features.FAMILY_PARENT);
    # each update converges to a normal fixed point inside the routine's ordinary range
    OpClass("exp2", "float", "{a} = exp2(-{a});", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 exp2 (full precision builtin)"),
    OpClass("exp10", "float", "{a} = exp10(-{a});", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 exp10 (full precision builtin)"),
    OpClass("expm1", "float", "{a} = expm1(-{a}) + s;", 1, "0.5f + 0.01f * {k}", 1.0, 0.0,
            description="fp32 expm1 (full precision; one add per update)"),
    # the arguments of log2 and asin converge to 0.7 and 0.75, inside [0, 1) where data usually is
    # (asin of 0.3, where the chain converged before, ran 3.6x faster per call than asin in an
    # elementwise kernel on data in [0, 0.8] on PoCL 3.1, asin of 0.75 as fast; log2 ran the same
    # at 5.4 and at 0.7)
    OpClass("log2", "float", "{a} = log2({a} * s + t);", 1, "-0.5f + 0.001f * {k}", 0.25, 0.829,
            description="fp32 log2 (full precision; one multiply and one add per update)"),
    OpClass("log10", "float", "{a} = log10({a} + s);", 1, "1.0f + 0.01f * {k}", 3.0, 0.0,
            description="fp32 log10 (full precision; one add per update)"),
    OpClass("log1p", "float", "{a} = log1p({a} + s);", 1, "1.0f + 0.01f * {k}", 1.0, 0.0,
            description="fp32 log1p (full precision; one add per update)"),
    OpClass("cos", "float", "{a} = cos({a});", 1, "0.7f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 cos (full precision builtin)"),
    OpClass("tan", "float", "{a} = tan({a} * s) + t;", 1, "0.2f + 0.01f * {k}", 0.5, 0.1,
            description="fp32 tan (full precision; one multiply and one add per update)"),
    OpClass("sinh", "float", "{a} = sinh({a} * s) + t;", 1, "0.6f + 0.01f * {k}", 0.5, 0.3,
            description="fp32 sinh (full precision; one multiply and one add per update)"),
    OpClass("cosh", "float", "{a} = cosh({a} * s) - t;", 1, "0.5f + 0.01f * {k}", 0.5, 0.5,
            description="fp32 cosh (full precision; one multiply and one add per update)"),
    OpClass("asin", "float", "{a} = asin({a} * s + t);", 1, "0.85f + 0.001f * {k}", 0.5, 0.326,
            description="fp32 asin (full precision; one multiply and one add per update)"),
    OpClass("acos", "float", "{a} = acos({a} * s);", 1, "1.0f + 0.01f * {k}", 0.5, 0.0,
            description="fp32 acos (full precision; one multiply per update)"),
    OpClass("erfc", "float", "{a} = erfc({a} + s);", 1, "0.5f + 0.01f * {k}", 0.0, 0.0,
            description="fp32 erfc (full precision; one add per update)"),
    OpClass("rint", "float", "{a} = rint({a} * s) * t;", 1, "1.0f + {k}", 3.0, 1 / 3.0,
            description="fp32 rint, the rounding of convert_<int type>_rte/_rtn/_rtp (two multiplies per update)"),
)}
#: the builtin-family classes (``peak_<class>_gops`` and ``scalar_<class>_gops``)
BUILTIN_OP_CLASSES = ("sin", "exp", "sqrt", "log", "pow", "tanh", "erf", "atan", "rsqrt", "native_sin",
                      "native_exp", "native_sqrt", "native_log", "native_rsqrt", "native_divide", "native_powr",
                      "half_exp", "half_sin", "half_sqrt", "hypot", "cbrt", "rint", "fmod", "exp2", "exp10",
                      "expm1", "log2", "log10", "log1p", "cos", "tan", "sinh", "cosh", "asin", "acos", "erfc")

_FP64_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
_OP_NAME_RE = re.compile(r"^kc_(?:op_(?P<cls>[a-z0-9_]+?)|busy)_w(?P<w>\d+)k(?P<k>\d+)$")


def op_kernel_name(cls: str, width: int, chains: int) -> str:
    return f"kc_op_{cls}_w{width}k{chains}"


def op_kernel(cls: str, width: int, chains: int, *, name: str | None = None) -> Kernel:
    """The peak-rate kernel of one operation class.

    Signature: ``(__global T<W>* out, T s, T t, uint iters)``; ``out`` has one element per
    work-item. ``name`` overrides the kernel name (the power-scaling kernel ``kc_busy_*`` is the
    fp32 FMA kernel under another name).
    """
    c = OP_CLASSES[cls]
    if width not in (1, 2, 4, 8, 16):
        raise ValueError(f"vector width {width} is not an OpenCL vector width")
    if chains < 1 or (c.pairs and chains % 2):
        raise ValueError(f"{cls} needs {'an even number' if c.pairs else 'at least one'} of chains, got {chains}")
    vt = c.base if width == 1 else f"{c.base}{width}"
    kname = name or op_kernel_name(cls, width, chains)
    decl = "\n".join(f"  {vt} a{k} = ({vt})({c.init.format(k=k)});" for k in range(chains))
    if c.pairs:
        body = "\n".join("    " + c.update.format(a=f"a{k}", b=f"a{k + 1}") for k in range(0, chains, 2))
    else:
        body = "\n".join("    " + c.update.format(a=f"a{k}") for k in range(chains))
    total = " + ".join(f"a{k}" for k in range(chains))
    src = (
        (_FP64_PRAGMA if c.needs_fp64 else "")
        + f"__kernel void {kname}(__global {vt}* out, {c.base} s, {c.base} t, uint iters) {{\n"
        + f"{decl}\n"
        + "  for (uint i = 0; i < iters; ++i) {\n"
        + f"{body}\n"
        + "  }\n"
        + f"  out[get_global_id(0)] = {total};\n"
        + "}\n"
    )
    return Kernel(src, kname, origin=f"calib:{kname}")


#: dependent updates per work-item of the work-item-vectorized kernels (:func:`wi_kernel`)
WI_UPDATES = 64
_WI_NAME_RE = re.compile(r"^kc_wi_(?P<cls>[a-z0-9_]+?)_n(?P<n>\d+)$")


def wi_kernel(cls: str, updates: int = WI_UPDATES) -> Kernel:
    """One dependent chain of ``updates`` updates per work-item, written out (no loop), for the
    rate a CPU runtime reaches when it vectorizes the work-item loop of ordinary kernel code:
    the lanes are work-items, and each lane's operations depend on each other as a kernel's do
    (the peak kernels keep 8 independent chains per work-item instead). Classes whose update
    couples two accumulators (``int32_add``) keep that pair. The start value differs between
    neighbouring work-items, so no uniformity analysis can compute it once for all.

    Signature: ``(__global T* out, T s, T t)``; ``out`` has one element per work-item."""
    c = OP_CLASSES[cls]
    name = f"kc_wi_{cls}_n{updates}"
    one = {"float": "0.001f", "double": "0.001", "uint": "1u"}[c.base]
    n_acc = 2 if c.pairs else 1
    decl = "\n".join(f"  {c.base} a{k} = ({c.base})({c.init.format(k=k)}) + ({c.base})(get_global_id(0) & 1u) * {one};"
                     for k in range(n_acc))
    step = c.update.format(a="a0", b="a1") if c.pairs else c.update.format(a="a0")
    body = "\n".join("  " + step for _ in range(updates))
    total = " + ".join(f"a{k}" for k in range(n_acc))
    src = ((_FP64_PRAGMA if c.needs_fp64 else "")
           + f"__kernel void {name}(__global {c.base}* out, {c.base} s, {c.base} t) {{\n{decl}\n{body}\n"
           + f"  out[get_global_id(0)] = {total};\n}}\n")
    return Kernel(src, name, origin=f"calib:{name}")


#: independent calls per work-item of the ``wi`` benchmark of a builtin class (:func:`wi_call_kernel`)
WI_CALLS = 4
#: the math library routines a CPU runtime may leave as scalar code (PoCL 3.1:
#: ``models.analytical.SCALAR_FAMILIES``), timed at one call per work-item: what an elementwise
#: kernel's ``out[i] = sin(x[i])`` pays per call where the work-item loop stays scalar. The out-of-order
#: core overlaps only a few neighbouring work-items' inlined routines, so a routine whose latency is
#: several times its cost in independent chains runs at neither (PoCL 3.1 on a 2-core x86-64 CPU, 2^20 work-items:
#: sin 17.5 ns per call and core against 9.4 at the scalar rate of 8 chains and a 34 ns latency;
#: cos 16.9 / 9.5 / 35, exp2 7.4 / 3.6 / 22; pow, hypot, atan, log1p at their scalar rates)
SCALAR_ROUTINES = ("sin", "cos", "tan", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "atan",
                   "asin", "acos", "sinh", "cosh", "erf", "erfc", "hypot", "cbrt", "fmod", "rint")
#: fewer calls for the classes whose inlined code leaves the work-item loop scalar at WI_CALLS
#: (``models.analytical.SCALAR_FAMILY_VECTOR_CALLS``: PoCL 3.1 vectorizes one tanh call), and one
#: call of each :data:`SCALAR_ROUTINES`
WI_CALLS_OF = {"tanh": 1, **{c: 1 for c in SCALAR_ROUTINES}}


def wi_call_kernel(cls: str, calls: int = WI_CALLS) -> Kernel:
    """``calls`` independent calls of the builtin class ``cls`` per work-item, each on its own value
    that differs between neighbouring work-items, summed into ``out``: the rate a CPU runtime reaches
    on an elementwise kernel's ``out[i] = a * exp(-r * t[i])``, where the work-item loop is the only
    parallelism. A dependent chain of calls (:func:`wi_kernel`) is not that: PoCL 3.1 left a chain
    of 64 ``exp`` calls scalar (0.90 G calls/s, the scalar rate) where one call per work-item ran at
    4.0. Same signature as :func:`wi_kernel`; the name is ``kc_wi_<cls>_n<calls>``."""
    c = OP_CLASSES[cls]
    name = f"kc_wi_{cls}_n{calls}"
    own = f"({c.base})(get_global_id(0) & 255u) * 0.001f"     # differs between neighbouring work-items
    decl = "\n".join(f"  {c.base} a{k} = ({c.base})({c.init.format(k=k)}) + {own};" for k in range(calls))
    body = "\n".join("  " + c.update.format(a=f"a{k}") for k in range(calls))
    total = " + ".join(f"a{k}" for k in range(calls))
    src = (f"__kernel void {name}(__global {c.base}* out, {c.base} s, {c.base} t) {{\n{decl}\n{body}\n"
           f"  out[get_global_id(0)] = {total};\n}}\n")
    return Kernel(src, name, origin=f"calib:{name}")


def parse_wi_kernel_name(name: str) -> tuple[str, int] | None:
    """``(class, updates)`` of a ``kc_wi_*`` kernel name, else ``None``."""
    m = _WI_NAME_RE.match(name)
    return None if not m else (m.group("cls"), int(m.group("n")))


def busy_kernel(width: int, chains: int) -> Kernel:
    """The fp32 FMA kernel under the name ``kc_busy_w<W>k<K>``, used for the power benchmarks."""
    return op_kernel("fp32_fma", width, chains, name=f"kc_busy_w{width}k{chains}")


def ops_per_iter(cls: str, width: int, chains: int) -> int:
    """Operations one work-item performs per loop iteration."""
    c = OP_CLASSES[cls]
    updates = chains // 2 if c.pairs else chains
    return updates * c.ops_per_update * width


def parse_op_kernel_name(name: str) -> tuple[str, int, int] | None:
    """``(class, width, chains)`` of a ``kc_op_*`` or ``kc_busy_*`` kernel name, else ``None``."""
    m = _OP_NAME_RE.match(name)
    if not m:
        return None
    return (m.group("cls") or "fp32_fma", int(m.group("w")), int(m.group("k")))


# ---------------------------------------------------------------------------------------------
# memory


STREAM_LAYOUTS = ("strided", "blocked")


def stream_read_kernel(width: int, layout: str = "strided") -> Kernel:
    """Read ``n`` ``float<W>`` elements ``passes`` times.

    ``strided``: grid-stride loop (work-item ``g`` reads ``g, g + G, ...``), coalesced on GPUs.
    ``blocked``: work-item ``g`` reads the contiguous chunk ``[g * c, (g + 1) * c)``, which suits a
    CPU driver that runs a work-item's whole loop before the next work-item's.

    Signature: ``(__global const float<W>* a, __global float<W>* out, uint n, uint passes)``;
    ``out`` has one element per work-item. Bytes read per launch: ``passes * n * 4 * W``.
    Launch at most as many work-groups as can be resident at once (one per compute unit), so
    that every pass reads the whole working set before the next begins."""
    if layout not in STREAM_LAYOUTS:
        raise ValueError(f"unknown stream layout {layout!r} ({', '.join(STREAM_LAYOUTS)})")
    vt = f"float{width}"
    if layout == "strided":
        name = f"kc_stream_read_v{width}"
        bounds = "  uint lo = g, hi = n, st = G;\n"
    else:
        name = f"kc_stream_read_blk_v{width}"
        bounds = ("  const uint chunk = (n + G - 1u) / G;\n"
                  "  uint lo = min(g * chunk, n), hi = min(lo + chunk, n), st = 1u;\n")
    src = f"""__kernel void {name}(__global const {vt}* a, __global {vt}* out, uint n, uint passes) {{
  const uint g = get_global_id(0);
  const uint G = get_global_size(0);
{bounds}  {vt} s0 = ({vt})(0.0f);
  {vt} s1 = ({vt})(0.0f);
  for (uint p = 0; p < passes; ++p) {{
    uint i = lo;
    for (; i + st < hi; i += 2u * st) {{
      s0 += a[i];
      s1 += a[i + st];
    }}
    if (i < hi) s0 += a[i];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  out[g] = s0 + s1;
}}
"""
    return Kernel(src, name, origin=f"calib:{name}")


def parse_stream_kernel_name(name: str) -> tuple[str, int] | None:
    """``(layout, width)`` of a streaming-read kernel name, else ``None``."""
    m = re.match(r"^kc_stream_read_(blk_)?v(\d+)$", name)
    if not m:
        return None
    return ("blocked" if m.group(1) else "strided", int(m.group(2)))


def local_read_kernel(width: int) -> Kernel:
    """Each work-group fills ``n`` ``float<W>`` of local memory, then reads them ``passes`` times.

    Signature: ``(__global float<W>* out, __local float<W>* buf, uint n, uint passes)``. Bytes
    read from local memory per launch: ``n_workgroups * passes * n * 4 * W``."""
    vt = f"float{width}"
    name = f"kc_local_read_v{width}"
    src = f"""__kernel void {name}(__global {vt}* out, __local {vt}* buf, uint n, uint passes) {{
  const uint l = get_local_id(0);
  const uint L = get_local_size(0);
  for (uint i = l; i < n; i += L) buf[i] = ({vt})((float)i);
  barrier(CLK_LOCAL_MEM_FENCE);
  {vt} s0 = ({vt})(0.0f);
  {vt} s1 = ({vt})(0.0f);
  for (uint p = 0; p < passes; ++p) {{
    uint i = l;
    for (; i + L < n; i += 2 * L) {{
      s0 += buf[i];
      s1 += buf[i + L];
    }}
    if (i < n) s0 += buf[i];
  }}
  out[get_global_id(0)] = s0 + s1;
}}
"""
    return Kernel(src, name, origin=f"calib:{name}")


def chase_kernel() -> Kernel:
    """Pointer chase over ``m = 2^bits`` nodes of ``CHASE_NODE_BYTES`` each (one work-group).

    Signature: ``(__global uint* buf, __global uint* out, uint bits, uint steps)``; ``buf`` holds
    ``m * CHASE_NODE_BYTES / 4`` uints, ``out`` one. Launch exactly one work-group."""
    name = "kc_chase"
    node = _CHASE_NODE_UINTS
    src = f"""uint kc_sigma(uint x, uint bits, uint mask) {{
  const uint sh = (bits + 1u) >> 1;
  x = (x * 0x9E3779B1u) & mask;
  x ^= x >> sh;
  x = (x * 0x85EBCA6Bu) & mask;
  x ^= x >> sh;
  x = (x * 0xC2B2AE35u) & mask;
  return x;
}}

__kernel void {name}(__global uint* buf, __global uint* out, uint bits, uint steps) {{
  const uint mask = (bits >= 32u) ? 0xFFFFFFFFu : ((1u << bits) - 1u);
  const uint l = get_local_id(0);
  const uint L = get_local_size(0);
  for (uint k = l; k <= mask; k += L) {{
    buf[kc_sigma(k, bits, mask) * {node}u] = kc_sigma((k + 1u) & mask, bits, mask) * {node}u;
  }}
  barrier(CLK_GLOBAL_MEM_FENCE);
  if (l == 0u) {{
    uint p = kc_sigma(0u, bits, mask) * {node}u;
    for (uint s = 0; s < steps; ++s) p = buf[p];
    out[0] = p;
  }}
}}
"""
    return Kernel(src, name, origin=f"calib:{name}")


def chase_nodes(bits: int) -> int:
    return 1 << bits


def chase_buffer_uints(bits: int) -> int:
    return chase_nodes(bits) * _CHASE_NODE_UINTS


# ---------------------------------------------------------------------------------------------
# overheads


def empty_kernel() -> Kernel:
    name = "kc_empty"
    return Kernel(f"__kernel void {name}(__global uint* a) {{ }}\n", name, origin=f"calib:{name}")


def nop_kernel() -> Kernel:
    """Work-items that do nothing: a store behind a branch that is never taken (``flag`` is
    0xFFFFFFFF), so the compiler must keep the kernel but no work-item touches memory."""
    name = "kc_nop"
    src = f"__kernel void {name}(__global uint* a, uint flag) {{ if (get_global_id(0) == flag) a[0] = 1u; }}\n"
    return Kernel(src, name, origin=f"calib:{name}")


#: local updates per work-item in each region of the heavier barrier kernel (``barrier_kernel(HEAVY_REGION)``)
HEAVY_REGION = 8


def barrier_kernel(updates: int = 1) -> Kernel:
    """``nb`` work-group barriers in a loop, each ending a region in which every work-item updates
    its own element of a local array ``updates`` times (``nb = 0`` is the same kernel without the
    loop): the cost of a barrier as kernels pay it, per work-group and per work-item. A CPU runtime
    (PoCL) splits the work-item loop at every barrier, so each barrier costs a pass over all
    work-items of the group, whose live values and local updates are reloaded; an empty barrier
    loop is compiled away there (measured: 0 ns per barrier for work-groups of up to 64). In a
    small group the runtime unrolls the passes into straight-line code and the barrier costs
    almost nothing; how small depends on the region's size, which ``updates`` varies."""
    if updates < 1:
        raise ValueError(f"a barrier region needs at least one update, not {updates}")
    name = "kc_barrier_local" if updates == 1 else f"kc_barrier_local_u{updates}"
    # alternating steps, so that the updates do not fold into one
    steps = "\n".join(f"    l[lid] = l[lid] * {0.999 if j % 2 == 0 else 1.001:.3f}f + {0.001 * (j + 1):.3f}f;"
                       for j in range(updates))
    src = f"""__kernel void {name}(__global float* out, __local float* l, uint nb) {{
  uint lid = get_local_id(0);
  l[lid] = (float)lid;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint i = 0; i < nb; ++i) {{
{steps}
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  out[get_global_id(0)] = l[lid];
}}
"""
    return Kernel(src, name, origin=f"calib:{name}")


def host_overhead_source() -> tuple[str, str]:
    """Source and name of the empty kernel the host-side overhead probe launches."""
    return "__kernel void kc_host_empty(__global uint* a) { }\n", "kc_host_empty"


#: bin counts of the contended atomic benchmark (``atomic_<space>_b<bins>_gops``); 16 ``uint`` bins
#: share one 64-byte cache line, 256 bins are 16 lines, 4096 bins 256 lines
ATOMIC_BINS = (1, 16, 256, 4096)


def atomic_kernel(space: str) -> Kernel:
    """``iters`` ``atomic_add`` of 1 per work-item on ``uint`` bins in ``global`` or ``local``
    memory: with ``own`` set each work-item adds to its own element (global: ``bins[gid]``, local:
    ``l[lid]``: distinct addresses, no contention), else to a pseudo-random bin of ``mask + 1``
    (a power of two) that changes every iteration, as a histogram does, so all work-items of the
    launch contend for ``mask + 1`` addresses. The local kernel zeroes its bins before a barrier
    and writes one of them out after another, so the atomics cannot be dropped."""
    name = f"kc_atomic_{space}"
    body = """  uint h = (gid + 1u) * 0x9E3779B1u;
  for (uint i = 0; i < iters; ++i) {{
    uint b = own ? {own} : ((h >> 11) & mask);
    atomic_add(&{arr}[b], 1u);
    h = h * 1664525u + 1013904223u;
  }}
"""
    if space == "global":
        src = (f"__kernel void {name}(__global uint* bins, uint mask, uint own, uint iters) {{\n"
               f"  uint gid = get_global_id(0);\n"
               + body.format(own="gid", arr="bins") + "}\n")
    elif space == "local":
        src = (f"__kernel void {name}(__global uint* out, __local uint* l, uint mask, uint own, uint iters) {{\n"
               f"  uint gid = get_global_id(0);\n  uint lid = get_local_id(0);\n  uint lsz = get_local_size(0);\n"
               f"  for (uint k = lid; k <= mask || k < lsz; k += lsz) l[k] = 0u;\n"
               f"  barrier(CLK_LOCAL_MEM_FENCE);\n"
               + body.format(own="lid", arr="l")
               + "  barrier(CLK_LOCAL_MEM_FENCE);\n  out[gid] = l[lid & mask];\n}\n")
    else:
        raise ValueError(f"atomic kernel: unknown address space {space!r}")
    return Kernel(src, name, origin=f"calib:{name}")


#: loads per work-item of the gather benchmark (straight-line code: no loop, so a CPU runtime
#: vectorizes the work-item loop and each load becomes a gather instruction)
GATHER_LOADS = 16


def gather_kernel() -> Kernel:
    """Each work-item sums :data:`GATHER_LOADS` floats of a table ``t`` of ``mask + 1`` (a power of
    two) elements at pseudo-random indices computed from its global id (a multiplicative hash, then
    a constant step): indices no compiler can prove contiguous, so vectorized work-item code loads
    them with gather instructions. The table is small enough to stay in the first cache level, so
    the time is the gathers' (plus two integer operations per load)."""
    return _gather_loads("kc_gather", "uint h = (gid * 0x9E3779B1u) >> 7;", lambda k: f"(h + {977 * k}u) & mask")


def clamped_gather_kernel() -> Kernel:
    """The loads of :func:`gather_kernel`, but each at a clamped index next to the work-item's own
    (``t[min((gid & mask) + k, mask)]``): the lanes' addresses are consecutive, yet the compiler
    cannot prove it past the ``min``, so vectorized work-item code still gathers them; the cost of
    a stencil's ``in[min(i + 1, n - 1)]`` (:func:`models.analytical.clamped_index`)."""
    return _gather_loads("kc_gather_clamped", "uint j = gid & mask;", lambda k: f"min(j + {k}u, mask)")


def _gather_loads(name: str, setup: str, index: Callable[[int], str]) -> Kernel:
    """``(t, out, mask)``: each work-item sums :data:`GATHER_LOADS` floats of ``t`` at ``index(k)``
    (after the statement ``setup``, which may use ``gid``) into ``out[gid]``."""
    lines = "".join(f"  s += t[{index(k)}];\n" for k in range(GATHER_LOADS))
    src = (f"__kernel void {name}(__global const float* t, __global float* out, uint mask) {{\n"
           f"  uint gid = get_global_id(0);\n  {setup}\n  float s = 0.0f;\n"
           f"{lines}  out[gid] = s;\n}}\n")
    return Kernel(src, name, origin=f"calib:{name}")


def store_kernel(guarded: bool) -> Kernel:
    """An elementwise kernel, ``c[i] = a[i] * s + b[i]``, plain or under ``if (i < n)`` (every
    work-item passes it): the pair whose time per work-item says whether the runtime vectorizes a
    work-item loop with a store under a condition that differs between work-items (a CPU
    runtime's loop vectorizer needs a masked store for it)."""
    name = "kc_store_guarded" if guarded else "kc_store_plain"
    body = "  if (i < n) c[i] = a[i] * s + b[i];\n" if guarded else "  c[i] = a[i] * s + b[i];\n"
    src = (f"__kernel void {name}(__global const float* a, __global const float* b, __global float* c, float s, "
           f"int n) {{\n  int i = get_global_id(0);\n{body}}}\n")
    return Kernel(src, name, origin=f"calib:{name}")


def call_kernel() -> Kernel:
    """The body of :func:`store_kernel` with a call of the ``fmax`` builtin: against the plain store
    it tells whether the runtime inlines its builtins (the same time) or calls them out of line
    (much slower, the work-item loop scalar)."""
    name = "kc_call"
    src = (f"__kernel void {name}(__global const float* a, __global const float* b, __global float* c, float s, "
           f"int n) {{\n  int i = get_global_id(0);\n  c[i] = fmax(a[i] * s, b[i]);\n}}\n")
    return Kernel(src, name, origin=f"calib:{name}")


#: work-items of the conditional-store benchmark at the smaller of its two sizes, the larger is 4x
#: (three float arrays of 2^16 and 2^18 elements: 768 KiB and 3 MiB, inside a CPU's caches)
COND_ITEMS = 1 << 16


#: the work-items of the strided benchmark: 64 work-groups of 256 (a stride of 64 KiB between the
#: trips of one work-item's loop, past the 4 KiB page every hardware prefetcher stays within)
STRIDE_ITEMS = 64 * 256
#: trips per work-item of the short walks of the strided benchmark (a CSR/ELLPACK row's entries):
#: so few pages per walk that the first-level TLB holds them
STRIDE_SHORT_TRIPS = 16
#: trips per work-item of the tiny walks (a grid-stride loop over a few times the global size):
#: so few concurrent page streams that the hardware prefetchers follow them
STRIDE_TINY_TRIPS = 4


def strided_kernel() -> Kernel:
    """Each work-item sums the floats ``gid, gid + G, gid + 2G, ...`` of ``in`` (``G`` the global
    size): the grid-stride loop of a reduction. A GPU coalesces one trip of all work-items; a CPU
    runtime runs each work-item's loop in turn, so every trip lands on another page and each cache
    line is fetched by the first work-item that touches it, without the prefetcher's help."""
    name = "kc_strided"
    src = (f"__kernel void {name}(__global const float* in, __global float* out, uint n) {{\n"
           "  uint gid = get_global_id(0), g = get_global_size(0);\n  float s = 0.0f;\n"
           "  for (uint at = gid; at < n; at += g)\n    s += in[at];\n  out[gid] = s;\n}\n")
    return Kernel(src, name, origin=f"calib:{name}")

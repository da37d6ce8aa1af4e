"""OpenCL C builtin functions: the tables and the operation classes a math/integer call counts.

Classes: ``fp32_add`` (add/sub/neg/min/max/abs...), ``fp32_mul``, ``fp32_fma``
(``fma``/``mad``/``mix``/``dot``), ``fp32_div``, the same for ``fp64``, ``int_add``, ``int_mul``,
``int_div``, ``int_bit``, ``sfu`` (transcendental and ``sqrt``/``rsqrt``/native reciprocal;
``pow``/``tan``/``sincos``/hyperbolic count 2), ``cmp``, ``conv`` (``convert_*``). Vectors count
once per component. Work-item functions, barriers, fences, atomics, ``vloadN``/``vstoreN`` and
images are handled by the walker (they touch its state); :func:`math_builtin` classifies the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelcast.models.static.expr import Poly, p_max, p_min, p_unary
from kernelcast.models.static.values import HALF, Val

_SFU: dict[str, int] = {
    **dict.fromkeys(["sin", "cos", "asin", "acos", "atan", "sinpi", "cospi", "asinpi", "acospi", "atanpi",
                     "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "logb", "sqrt",
                     "rsqrt", "cbrt", "erf", "erfc", "recip", "ilogb"], 1),
    **dict.fromkeys(["tan", "tanpi", "atan2", "atan2pi", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                     "pow", "pown", "powr", "rootn", "sincos", "lgamma", "lgamma_r", "tgamma", "hypot"], 2),
}
#: builtin families charged at their own calibrated rate (``bi_<variant><family>`` op classes,
#: counted once per call and vector component, next to the ``sfu`` count above)
FAMILY: dict[str, str] = {
    "exp": "exp", "exp2": "exp2", "exp10": "exp10", "expm1": "expm1",
    **dict.fromkeys(["log", "logb", "ilogb"], "log"), "log2": "log2", "log10": "log10", "log1p": "log1p",
    **dict.fromkeys(["sin", "sinpi", "sincos"], "sin"), **dict.fromkeys(["cos", "cospi"], "cos"),
    **dict.fromkeys(["tan", "tanpi"], "tan"),
    **dict.fromkeys(["atan", "atan2", "atanpi", "atan2pi"], "atan"), **dict.fromkeys(["asin", "asinpi"], "asin"),
    **dict.fromkeys(["acos", "acospi"], "acos"),
    **dict.fromkeys(["pow", "pown", "powr", "rootn"], "pow"),
    **dict.fromkeys(["tanh", "asinh", "acosh", "atanh"], "tanh"), "sinh": "sinh", "cosh": "cosh",
    "sqrt": "sqrt",
    "cbrt": "cbrt",         # a library routine, not a square root (PoCL 3.1: 184x sqrt)
    "hypot": "hypot",       # a library routine with overflow-safe scaling, not a square root (PoCL: 180x sqrt)
    "rsqrt": "rsqrt",
    **dict.fromkeys(["erf", "lgamma", "lgamma_r", "tgamma"], "erf"), "erfc": "erfc",
    **dict.fromkeys(["divide", "recip"], "divide"),
    # a library routine (exact remainder: a loop of scaled subtractions), not a division (PoCL 3.0:
    # 25-49 ns per call against about 1 for a divide)
    **dict.fromkeys(["fmod", "remainder", "remquo"], "fmod"),
}
#: builtin families whose calls are one instruction (or a few) on a CPU, not a math library routine:
#: a loop calling only these is as small as its arithmetic, and on a loop-carried chain they count
#: as arithmetic (:mod:`models.static.chains`)
INSTRUCTION_FAMILIES = frozenset({"sqrt", "rsqrt", "divide"})
#: calls per family per builtin (``sincos`` is a sine and a cosine; a tangent has a family of its
#: own, :data:`models.static.features.FAMILY_PARENT`)
FAMILY_CALLS = {"sincos": 2}
_ALU = {"fabs", "fmin", "fmax", "min", "max", "floor", "ceil", "round", "trunc", "rint", "sign", "step",
        "copysign", "select", "abs", "abs_diff", "add_sat", "sub_sat", "hadd", "rhadd", "fdim", "maxmag",
        "minmag", "nextafter", "degrees", "radians", "fract", "modf", "frexp", "ldexp", "nan"}
_ALU2 = {"clamp": 2, "smoothstep": 4}
_INT_MUL = {"mul24", "mad24", "mul_hi", "mad_hi", "mad_sat"}
_INT_BIT = {"rotate", "popcount", "clz", "ctz", "bitselect", "shuffle", "shuffle2", "upsample", "any", "all"}
_CMP = {"isnan", "isinf", "isfinite", "isnormal", "signbit", "isequal", "isnotequal", "isgreater",
        "isgreaterequal", "isless", "islessequal", "islessgreater", "isordered", "isunordered"}
_DIV = {"divide"}
BARRIER = {"barrier", "work_group_barrier", "sub_group_barrier"}
FENCE = {"mem_fence", "read_mem_fence", "write_mem_fence", "atomic_work_item_fence"}
IGNORE = {"printf", "get_image_width", "get_image_height", "get_image_depth", "get_image_dim",
          "get_image_channel_order", "get_image_channel_data_type", "prefetch", "get_work_dim",
          "get_global_offset", "atomic_init", "vec_step",
          "__builtin_inff", "__builtin_inf", "__builtin_nanf", "__builtin_huge_valf"}
WORKITEM = {"get_global_id": "gid", "get_local_id": "lid", "get_group_id": "grp"}
SIZES = {"get_global_size": "gsize", "get_local_size": "lsize", "get_enqueued_local_size": "lsize",
         "get_num_groups": "ngroups"}
#: a conversion with an explicit rounding mode other than towards zero (``convert_int_rte``)
_ROUNDING = re.compile(r"_rt[enp]$")
VLOAD = re.compile(r"^vload(a)?(_half)?(\d+)?(_rt[enpz])?$")
VSTORE = re.compile(r"^vstore(a)?(_half)?(\d+)?(_rt[enpz])?$")

#: geometric builtins that combine the components of a vector argument with each other
HORIZONTAL = frozenset({"dot", "length", "distance", "normalize", "cross"})


def family_class(name: str) -> str:
    """The op class of a builtin family call: ``bi_<variant><family>``, variant ``native_`` /
    ``half_`` / none (``fast_length`` and friends count as ``native_``)."""
    variant = ""
    base = name
    for pre in ("native_", "half_", "fast_"):
        if base.startswith(pre):
            variant = "half_" if pre == "half_" else "native_"
            base = base[len(pre):]
    return f"bi_{variant}{FAMILY.get(base, 'sqrt')}"


@dataclass
class BuiltinCall:
    """What a call of a math/integer/relational builtin counts and evaluates to."""

    value: Val
    ops: list[tuple[str, int]] = field(default_factory=list)
    note: str | None = None


def math_builtin(name: str, vals: list[Val], result: tuple[str, int], first_arg: tuple[str, int]) -> BuiltinCall:
    """Classify a call of ``name`` with argument values ``vals``; ``result`` and ``first_arg`` are
    the :func:`~models.static.cursors.type_class` of the call and of its first argument."""
    deps: set[str] = set()
    for v in vals:
        deps |= v.deps
    fdeps = frozenset(deps)
    out = BuiltinCall(Val(None, fdeps))
    if name in IGNORE:
        return out
    ops = out.ops
    base = name
    for pre in ("native_", "half_", "fast_"):
        if base.startswith(pre):
            base = base[len(pre):]
    tcls, width = result
    atc, awidth = first_arg
    fp = tcls if tcls in ("fp32", "fp64") else atc if atc in ("fp32", "fp64") else "fp32"
    if name.startswith("convert_"):
        ops.append(("conv", width))
        if _ROUNDING.search(name) and atc in ("fp32", "fp64") and tcls not in ("fp32", "fp64"):
            ops.append(("bi_rint", width))      # float -> integer with an explicit rounding mode: rint
        out.value = Val(vals[0].poly if vals and width == 1 else None, fdeps)
    elif name.startswith("as_"):
        pass
    elif base in _SFU:
        ops.append(("sfu", _SFU[base] * width))
        ops.append((family_class(name), FAMILY_CALLS.get(base, 1) * width))
        if base == "hypot":
            ops.append((f"{fp}_fma", 2 * width))
    elif base in ("fma", "mad"):
        ops.append((f"{fp}_fma", width))
    elif base == "mix":
        ops += [(f"{fp}_fma", width), (f"{fp}_add", width)]
    elif base == "divide" and name.startswith(("native_", "half_")):
        ops += [("sfu", width), (f"{fp}_mul", width), (family_class(name), width)]
    elif base in ("fmod", "remainder", "remquo"):
        ops.append((family_class(name), width))
    elif base in _DIV:
        ops.append((f"{fp}_div", width))
    elif base == "dot":
        ops.append((f"{fp}_fma", awidth))
    elif base == "cross":
        ops += [(f"{fp}_mul", 3), (f"{fp}_fma", 3)]
    elif base in ("length", "distance", "normalize"):
        if base == "distance":
            ops.append((f"{fp}_add", awidth))
        ops += [(f"{fp}_fma", awidth), ("sfu", 1), (family_class(name[:-len(base)] + "sqrt"), 1)]
        if base == "normalize":
            ops.append((f"{fp}_mul", awidth))
    elif base in ("floor", "ceil", "trunc", "round", "rint") and width == 1 and vals and vals[0].poly is not None:
        ops.append((f"{tcls}_add" if tcls in ("fp32", "fp64") else "int_add", 1))
        arg = vals[0].poly
        if base == "round":
            arg = arg + HALF
        out.value = Val.of(p_unary("ceil" if base == "ceil" else "floor", arg), fdeps)
    elif base in _ALU or base in _ALU2:
        ops.append((f"{tcls}_add" if tcls in ("fp32", "fp64") else "int_add", _ALU2.get(base, 1) * width))
        polys = [v.poly for v in vals if v.poly is not None]
        if tcls == "int" and base in ("min", "max") and len(vals) == 2 and len(polys) == 2:
            f = p_min if base == "min" else p_max
            out.value = Val.of(f(polys[0], polys[1]), fdeps)
        elif tcls == "int" and base == "clamp" and len(vals) == 3 and len(polys) == 3:
            out.value = Val.of(p_min(p_max(polys[0], polys[1]), polys[2]), fdeps)
    elif base in _INT_MUL:
        ops.append(("int_mul", width))
        polys = [v.poly for v in vals if v.poly is not None]
        if base in ("mul24", "mad24") and len(polys) == len(vals):
            p: Poly = polys[0] * polys[1]
            if base == "mad24" and len(polys) > 2:
                p = p + polys[2]
            out.value = Val.of(p, fdeps)
    elif base in _INT_BIT:
        ops.append(("int_bit", width))
    elif base in _CMP:
        ops.append(("cmp", awidth))
    elif name.startswith(("async_work_group", "wait_group_events")):
        out.note = f"{name} not modelled"
    else:
        out.note = f"builtin {name} not classified"
    if base == "rint":
        ops.append(("bi_rint", width))
    # a call of the runtime's library (features.LIBCALL), except conversions, the families (their
    # own calibrated rates hold the call) and integer min / max / clamp (one instruction on every
    # target: an integer max reduction over a tile ran vectorized on PoCL 3.1)
    inline = tcls == "int" and base in ("min", "max", "clamp")
    if ops and out.note is None and not inline and not name.startswith(("convert_", "as_")) \
            and not any(c.startswith("bi_") for c, _ in ops):
        ops.append(("libcall", width))
    return out

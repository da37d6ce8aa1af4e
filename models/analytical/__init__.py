"""The analytical time and energy model as a package: one shared pipeline (:mod:`.model`) over
device classes (:mod:`.registry`; :mod:`.gpu`, :mod:`.cpu_runtime`, :mod:`.generic`), energy in
:mod:`.energy`. ``docs/analytical-model.md`` describes the model, its classes and how to add one.

Importing the package registers the bundled device classes; the names below are the package's
interface (``from kernelcast.models.analytical import AnalyticalModel``)."""

from __future__ import annotations

from kernelcast.models.analytical.cpu_costs import (
    CPU_DIVIDER_CLASSES,
    CPU_LINE_BYTES,
    PAGE_BYTES,
    SHORT_WALK_TRIPS,
    TINY_WALK_TRIPS,
    UNEVEN_PEAK,
    atomic_distinct,
    atomic_seconds,
    chain_seconds,
    gather_seconds,
    inner_loop_correction,
    innermost_step,
    strided_seconds,
    uneven_ratio,
    vector_value_correction,
)
from kernelcast.models.analytical.cpu_params import (
    COND_STORE_SCALAR_RATIO,
    DEFAULT_SIMD_LANES,
    LIBCALL_SCALAR_RATIO,
    NO_SIMD_CLASSES,
    CPUParams,
)
from kernelcast.models.analytical.cpu_runtime import (
    CHEAPER_FACTOR,
    CHEAPER_FORMS,
    CPURuntimeClass,
    atomic_assumptions,
    cheaper_calls,
    gather_sites,
    kernel_assumptions,
)
from kernelcast.models.analytical.cpu_vectorizer import (
    SCALAR_FAMILIES,
    SCALAR_FAMILY_VECTOR_CALLS,
    builtin_calls,
    clamped_index,
    conditional_stores,
    consecutive_gather,
    cpu_throughput_loops,
    cpu_vectorizable,
    shifted_int_index,
    unbarriered_loops,
)
from kernelcast.models.analytical.energy import (
    energy_balance,
    energy_joules,
)
from kernelcast.models.analytical.generic import (
    GenericClass,
)
from kernelcast.models.analytical.gpu import (
    DEFAULT_MEM_LATENCY_CYCLES,
    GPUClass,
    GPUParams,
    mwp_cwp,
)
from kernelcast.models.analytical.model import (
    AnalyticalModel,
    AnalyticalResult,
    config_env,
    count_assumptions,
    explain,
    stack_envs,
)
from kernelcast.models.analytical.params import (
    DEFAULT_SEGMENT_BYTES,
    GPU_RULES,
    RATE_CLASSES,
    SharedParams,
)
from kernelcast.models.analytical.registry import (
    ATOMIC_KEY,
    DeviceClass,
    DeviceKind,
    DeviceParams,
    ItemCosts,
    device_class_for,
    operation_seconds,
    params_from_profile,
    register,
    registered_classes,
    unregister,
)

__all__ = [
    "ATOMIC_KEY",
    "AnalyticalModel",
    "AnalyticalResult",
    "CHEAPER_FACTOR",
    "CHEAPER_FORMS",
    "COND_STORE_SCALAR_RATIO",
    "CPUParams",
    "CPURuntimeClass",
    "CPU_DIVIDER_CLASSES",
    "CPU_LINE_BYTES",
    "DEFAULT_MEM_LATENCY_CYCLES",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_SIMD_LANES",
    "DeviceClass",
    "DeviceKind",
    "DeviceParams",
    "GPUClass",
    "GPUParams",
    "GPU_RULES",
    "GenericClass",
    "ItemCosts",
    "LIBCALL_SCALAR_RATIO",
    "NO_SIMD_CLASSES",
    "PAGE_BYTES",
    "RATE_CLASSES",
    "SCALAR_FAMILIES",
    "SCALAR_FAMILY_VECTOR_CALLS",
    "SHORT_WALK_TRIPS",
    "SharedParams",
    "TINY_WALK_TRIPS",
    "UNEVEN_PEAK",
    "atomic_assumptions",
    "atomic_distinct",
    "atomic_seconds",
    "builtin_calls",
    "chain_seconds",
    "cheaper_calls",
    "clamped_index",
    "conditional_stores",
    "config_env",
    "consecutive_gather",
    "count_assumptions",
    "cpu_throughput_loops",
    "cpu_vectorizable",
    "device_class_for",
    "energy_balance",
    "energy_joules",
    "explain",
    "gather_seconds",
    "gather_sites",
    "inner_loop_correction",
    "innermost_step",
    "kernel_assumptions",
    "mwp_cwp",
    "operation_seconds",
    "params_from_profile",
    "register",
    "registered_classes",
    "shifted_int_index",
    "stack_envs",
    "strided_seconds",
    "unbarriered_loops",
    "uneven_ratio",
    "unregister",
    "vector_value_correction",
]

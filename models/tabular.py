"""The tabular learned model: one feature table per (kernel, configuration) and gradient-boosted trees on it.

:func:`build_table` is the public way to turn rows into features. It takes the rows of a dataset
(its columns plus ``source``, as :func:`datagen.frame.load_measured_frame` returns them) or
prediction rows (as :func:`models.predict.configuration_row` builds them) and returns one table with
the same index and row order, whose feature columns are the same for both (a training row and a
prediction row of the same configuration give the same features). Anyone can fit their own model on
it; :class:`TabularPredictor` holds the LightGBM boosters that ``train/tabular.py`` fits.

Column families (:data:`FEATURE_COLUMNS` lists them in order; every feature is a float, NaN where a
value cannot be computed, e.g. every static and analytical column of a kernel the static analysis
cannot read):

* **launch** - ``gsize0..2``, ``lsize0..2``, ``ngroups0..2`` (work-groups per dimension),
  ``work_dim``, ``items`` (global work-items), ``wg_items`` (work-items per group), ``n_wg``
  (work-groups), ``n_wg_per_cu`` (work-groups per compute unit of the profile), ``lsize_auto`` (1 when
  the driver chose the local size; the models assume ``min(64, gsize0)`` as the analytical model
  does), ``working_set_bytes`` (sum of the buffer arguments), ``n_buffer_args`` / ``n_scalar_args`` /
  ``n_local_args``, ``power_cap_w``; and ``log2_<x>`` of the sizes, counts and working set.
* **per work-item work** (``wi_``), the static features of ``models.static`` evaluated at the
  configuration (:meth:`~models.static.features.SourceFeatures.evaluate_many`): one column per
  operation class (``wi_fp32_add`` ... ``wi_branch``, ``wi_barrier``, ``wi_fence``), ``wi_n_comp``,
  ``wi_n_mem``; memory by space and kind (``wi_global_loads`` ... ``wi_global_fetched_bytes``,
  ``wi_constant_*``, ``wi_local_*``, ``wi_private_accesses``, ``wi_image_*``); coalescing:
  ``wi_global_bytes`` (requested), ``wi_wasted_bytes`` (fetched - requested), ``wi_eta_coal``,
  ``wi_eta_bytes``, ``wi_indirect_bytes`` (gather/scatter sites), ``wi_unknown_stride_bytes``;
  ``wi_local_bank_conflict``, ``wg_local_mem_bytes``; SIMT issue counts ``wi_warp_ops``,
  ``wi_warp_global_mem``, ``wi_warp_local_mem`` and ``simt_ratio`` (warp issues / work-item ops: the
  cost of divergence); mix fractions ``frac_sfu``, ``frac_fp64``, ``frac_div``, ``frac_int``,
  ``frac_branch`` and ``ops_per_byte``.
* **totals** (``tot_``): each operation class, ``n_comp``, ``n_mem``, global requested / fetched
  bytes, local bytes and atomics times ``items``; ``tot_barriers_wg`` (barriers per work-item times
  work-groups); ``log2_tot_*`` of the main ones.
* **loop trips** evaluated at the configuration: ``trip_max`` (largest loop), ``trip_outer_sum``
  (sum over outermost loops), ``trip_nest_max`` (largest product of trips along a nest).
* **kernel** (``k_``, one value per kernel): ``k_dims``, branch sites by category
  (``k_branches_divergent`` / ``_data`` / ``_uniform``) and their fractions
  (``k_frac_branch_divergent``, ``k_frac_branch_data``), ``k_early_returns``, loops
  (``k_loops``, ``k_loops_data_dependent``, ``k_loops_divergent``, ``k_loops_bounded``,
  ``k_loop_depth_max``), ``k_private_array_bytes``, access sites (``k_access_sites``,
  ``_indirect``, ``_nonaffine``), ``k_helpers``, ``k_notes`` (constructs the analysis approximated)
  and ``k_static_ok``.
* **builtins** (``bi_``), call sites in the kernel's source text (comments removed): one column per
  costly math builtin (:data:`MATH_BUILTINS`: ``bi_pow``, ``bi_exp``, ``bi_tanh``, ...) and groups
  ``bi_native`` (``native_*``), ``bi_half`` (``half_*``), ``bi_minmax``, ``bi_fma``, ``bi_round``,
  ``bi_atomic``, ``bi_vload``, ``bi_vstore``, ``bi_convert``, ``bi_async_copy``,
  ``bi_transcendental`` (all of :data:`MATH_BUILTINS` and ``native_*``/``half_*``); ``src_double``
  and ``src_vector`` (the source uses ``double`` / vector types). The source is the kernel as the
  corpus stores it (the kernel with the helpers it calls), so a helper defined but never called
  still counts.
* **analytical** - the analytical model of the profile at the configuration
  (:class:`models.analytical.AnalyticalModel`, identical to its ``predict`` from the source alone:
  without what a device class's compiler reports per configuration, the registers and spills of
  AMD profiles with an ``llvm_target``, which the tables of the bundled GPU model were built
  without; :meth:`~models.analytical.registry.DeviceClass.compiled_resources`): ``analytical_us``,
  ``log2_analytical_us``, its parts ``an_launch_us`` / ``an_compute_us`` / ``an_memory_us`` /
  ``an_sync_us`` with their fractions ``an_frac_*`` and ``an_log2_compute_over_memory``,
  ``an_bound`` (categorical code, :data:`BOUND_CODES`), ``an_occupancy``, ``an_waves``,
  ``an_resident_wg_per_cu``, ``an_bandwidth_gbs``, ``an_memory_level``, ``an_arithmetic_intensity``
  (capped at 1e9 for kernels without memory traffic), ``an_flops``, ``an_fetched_bytes``, ``an_ok``,
  ``analytical_energy_j`` and ``log2_analytical_energy_j`` (NaN for a profile without energy
  calibration).

* **device** (``dev_``, one value per profile; NaN where the profile does not state it, never a
  guess): ``dev_class`` (CPU / GPU code), ``dev_vendor`` (categorical, :data:`VENDOR_CODES`),
  ``dev_compute_units``, ``dev_warp_size``, ``dev_clock_mhz``, ``dev_peak_fp32_gflops``,
  ``dev_peak_fp64_gflops``, ``dev_dram_bw_gbs``, ``dev_l2_bytes``, ``dev_local_mem_per_cu_bytes``,
  ``dev_max_threads_per_cu``, ``dev_max_wg_per_cu``, ``dev_registers_per_cu``, ``dev_tdp_w``,
  ``dev_log2_fp32_per_byte`` and ``dev_cache_level0_bytes``; and the launch relative to the device
  (:func:`device_ratio_columns`): ``warps_per_wg``, ``lane_fill``, ``wg_threads_per_cu_max``,
  ``fill_threads``, ``waves_threads``, ``log2_ws_over_l2``, ``local_mem_over_cu``,
  ``n_wg_per_cu_max``. With them one model trained on the rows of several devices (each table built
  with its device's profile) predicts a device it has not seen from its profile.
* **configuration transfer** (``xfer_``, :mod:`models.xfer`): the same configuration's measured
  time on the *other* devices of the training data (``xfer_rel``: relative to each device's median
  over the problem; ``xfer_devices``: how many; ``xfer_abs_log2``: scaled by the spec ratio;
  ``xfer_resid``: that minus ``log2_analytical_us``; ``xfer_rel_an``: ``xfer_rel`` minus
  ``log2_analytical_us``; ``xfer_shape``: the other devices' *residual shape* of the
  configuration, its relative log2 time there minus its relative analytical log2 time there),
  weighted by device similarity, each row's own
  device left out. :func:`build_table` leaves them NaN and passes the keys through (``xfer_problem``,
  ``xfer_config``, ``xfer_device`` = the profile's device name); the model fills them from the table
  of measured times it was fitted with (:func:`fill_transfer`), so they exist only for
  configurations measured on another device, and a model fitted on one device has none of them.

Besides the features, the table passes through the keys ``kernel_id`` and ``kernel_name`` and the
targets ``time_median_us`` and ``energy_j`` of the rows that have them.

The model: each head (``time``, and ``energy`` when the training data had energy) predicts the
residual ``log2(measured / analytical)`` with one booster, so a prediction is ``analytical x 2**(s x
residual)`` and, far from its data, stays within the residuals it has seen around the analytical
model. The scale ``s`` (0..1, ``residual_scale`` of the head; 1 in files saved before it existed)
shrinks the booster toward the analytical model: the time head's is chosen on inner out-of-fold
predictions of its training rows (``train/tabular.py``), because the booster's differences between
the configurations of one kernel are partly noise, and scaling them down keeps more of the
analytical model's ordering of a kernel's configurations. Rows where the analytical model has no
value (the static analysis failed, or no energy calibration for the energy head) are predicted by a
second, *direct* booster of the head on ``log2(measured)`` fitted on every row; a head whose
training rows had no analytical value at all (energy with a profile without energy calibration) has
only the direct booster.

The time head splits the residual (``train/tabular.py``, the default; ``split=False`` fits the one
residual booster above): the *level* of a (kernel, device) pair is the median residual of its
training rows, the *shape* a row's residual minus its pair's level. A *shape* booster learns the
shape (what ranks a kernel's configurations on a device, free of the levels between kernels and
devices that dominate the raw residual), a *level* booster learns each row's pair level from the
columns with one value per pair (:data:`LEVEL_COLUMNS`: kernel, builtin and device columns), and
the head keeps every training pair's level. A row of a kernel the head was fitted on
(:data:`KERNEL_KEY_COLUMN`) gets the shape plus the kernel's level on its device, or on a device
the kernel was not measured on the mean of the level booster's and of the kernel's levels weighted
by device similarity; a row of any other kernel gets the shape and the level booster's level each
scaled by what inner folds over held-out kernels bore out, both 0 when the training rows hold one
kernel group (the analytical model's prediction: nothing showed that either carries to another
kernel). A split head fitted with the configuration-transfer columns reads them in the shape alone:
its *transfer shape* booster (the shape booster on every feature, the transfer columns included)
gives the shape of a row that has a transfer value, on the same level as any row; it has no
transfer booster. A head fitted with ``transfer_offset`` (``train.tabular.fit_tabular``; not the
default) whose transfer table has the analytical times of its rows (so that ``xfer_shape``
exists) has its transfer shape *offset* by it (``transfer_shape_offset``): the booster learns the
shape minus the row's ``xfer_shape`` (0 where the row has none) and adds it back, so a row's shape
is the other devices' residual shape of the configuration plus what the features say the held-out
device does differently.

Intervals: every time prediction carries a 90 % interval from split-conformal quantiles of
out-of-fold (OOF) residuals ``r = log2(measured / predicted)`` (:class:`IntervalCalibration`,
computed by ``train/tabular.py`` with a grouped K-fold over the training rows): for the tabular
model and for the analytical model (with the model's profile), over all rows and per analytical
bound with at least :data:`MIN_BOUND_ROWS` rows, and after k measured configurations of the kernel
corrected it (:mod:`models.fewshot`). :meth:`TabularPredictor.interval` gives them; a model saved
without a calibration (older files, or too few kernel groups to cross-validate) has none (NaN).
Energy predictions have no interval.

Saved as ``tabular.json`` (:meth:`TabularPredictor.save`): format name and version, the feature
names, the targets, the training summary, the device profile the analytical columns were computed
with, each booster as LightGBM's own text model (``model_to_string``; a :class:`BoosterMean` as the
list of its boosters' texts) and, when calibrated, the
interval calibration (``intervals``: quantiles and OOF figures; infinite quantiles as null). No
pickle; loading it imports LightGBM and neither torch nor transformers. A model fitted with the
configuration-transfer columns has its table of measured times beside it (``xfer.json``,
:meth:`models.xfer.XferTable.save`). Models of table version 2 (before those columns) still load
and predict without them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile, ProfileError
from kernelcast.models.analytical import AnalyticalModel, config_env, stack_envs
from kernelcast.models.base import Predictions, Predictor
from kernelcast.models.fewshot import DEFAULT_SHRINK_PRIOR, ShapePrior
from kernelcast.models.static import analyze_source
from kernelcast.models.xfer import (
    XFER_COLUMNS,
    XFER_COLUMNS_V1,
    XFER_FILE,
    XFER_KEY_COLUMNS,
    XferTable,
    device_weight,
    xfer_keys,
)

from kernelcast.columns import decode_args, decode_counts, decode_sizes
from kernelcast.cuda import looks_like_cuda
from kernelcast.errors import InputError
from kernelcast.expr import evaluate_expr
from kernelcast.schema import Kernel

if TYPE_CHECKING:
    import lightgbm as lgb
    from kernelcast.models.static.features import SourceFeatures

log = logging.getLogger(__name__)

#: name and version of the saved format (``tabular.json``)
FORMAT = "kernelcast-tabular"
FORMAT_VERSION = 5
#: saved format versions this code reads (version 2 added the level/shape heads: a reader of version
#: 1 would predict such a model with its direct booster alone, so it refuses it by the version;
#: version 3 added the transfer shape booster of a split head, which a reader of version 2 would
#: leave out; version 4 its offset by the other devices' residual shape, ``transfer_shape_offset``,
#: which a reader of version 3 would not add back; version 5 boosters saved as a list of model
#: texts, :class:`BoosterMean`)
READABLE_FORMAT_VERSIONS = (1, 2, 3, 4, 5)
MODEL_FILE = "tabular.json"
#: most boosters one saved booster may be the mean of (:class:`BoosterMean`)
MAX_SAVED_SEEDS = 64
#: version of the feature table (a change of columns or of their meaning bumps it)
TABLE_VERSION = 4
#: older table versions a saved model may have been fitted on: their columns are a subset of this
#: version's, with the same meaning (version 3 added the configuration-transfer columns, version 4
#: ``xfer_shape``)
READABLE_TABLE_VERSIONS = (2, 3, 4)

#: the columns that name a row's kernel (``kernel_origin``: its corpus origin, e.g. the source file,
#: which decides its cross-validation group) and are carried into the table when the frame has them
KEY_COLUMNS = ("kernel_id", "kernel_name", "kernel_origin")
#: the key of a row's kernel in a table (its name and source; :func:`kernel_keys`): a model split
#: into level and shape (:class:`TabularHead`) gives the learned level only to a kernel it was fitted on
KERNEL_KEY_COLUMN = "kernel_key"
#: target column of each head, and the analytical column its residual is taken against
TARGETS: dict[str, str] = {"time": "time_median_us", "energy": "energy_j"}
BASES: dict[str, str] = {"time": "analytical_us", "energy": "analytical_energy_j"}

#: the analytical model's bound (``models.analytical.explain``) as a categorical code
BOUND_CODES: dict[str, int] = {"launch": 0, "compute": 1, "memory": 2, "sync": 3, "latency": 4}

#: operation classes of the static features (``models.static.features.OP_CLASSES``, in that order)
OP_CLASSES = ("fp32_add", "fp32_mul", "fp32_fma", "fp32_div", "fp64_add", "fp64_mul", "fp64_fma", "fp64_div",
              "int_add", "int_mul", "int_div", "int_bit", "sfu", "cmp", "conv", "branch", "barrier", "fence")
MEM_KEYS = ("global_loads", "global_stores", "global_atomics", "global_load_bytes", "global_store_bytes",
            "global_atomic_bytes", "global_fetched_bytes", "constant_loads", "constant_load_bytes",
            "local_loads", "local_stores", "local_atomics", "local_bytes", "private_accesses",
            "image_reads", "image_writes")
#: math builtins with a column each (costly, and with very different costs between implementations)
MATH_BUILTINS = ("pow", "pown", "powr", "rootn", "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p",
                 "sqrt", "rsqrt", "cbrt", "hypot", "sin", "cos", "tan", "sincos", "asin", "acos", "atan", "atan2",
                 "sinh", "cosh", "tanh", "erf", "erfc", "lgamma", "tgamma", "fmod", "remainder")
#: builtin groups: column -> regular expression of the called name
BUILTIN_GROUPS: dict[str, str] = {
    "native": r"native_\w+",
    "half": r"half_\w+",
    "minmax": r"(?:f?min|f?max|clamp)",
    "fma": r"(?:fma|mad|mad24|mad_hi|mad_sat|mix|dot)",
    "round": r"(?:floor|ceil|round|trunc|rint)",
    "atomic": r"(?:atomic|atom)_\w+",
    "vload": r"vload\w*",
    "vstore": r"vstore\w*",
    "convert": r"convert_\w+",
    "async_copy": r"async_work_group_(?:strided_)?copy",
}

_LOG2_LAUNCH = ("gsize0", "gsize1", "gsize2", "lsize0", "lsize1", "lsize2", "ngroups0", "ngroups1", "ngroups2",
                "items", "wg_items", "n_wg", "n_wg_per_cu", "working_set_bytes")
LAUNCH_COLUMNS = (("gsize0", "gsize1", "gsize2", "lsize0", "lsize1", "lsize2", "ngroups0", "ngroups1", "ngroups2",
                   "work_dim", "items", "wg_items", "n_wg", "n_wg_per_cu", "lsize_auto", "working_set_bytes",
                   "n_buffer_args", "n_scalar_args", "n_local_args", "power_cap_w")
                  + tuple("log2_" + c for c in _LOG2_LAUNCH))
_TOTALS = OP_CLASSES + ("n_comp", "n_mem", "global_bytes", "global_fetched_bytes", "local_bytes", "global_atomics",
                        "local_atomics")
_LOG2_TOTALS = ("n_comp", "n_mem", "global_bytes", "global_fetched_bytes")
WORK_COLUMNS = (tuple("wi_" + c for c in OP_CLASSES + ("n_comp", "n_mem") + MEM_KEYS)
                + ("wi_global_bytes", "wi_wasted_bytes", "wi_eta_coal", "wi_eta_bytes", "wi_indirect_bytes",
                   "wi_unknown_stride_bytes", "wi_local_bank_conflict", "wg_local_mem_bytes", "wi_warp_ops",
                   "wi_warp_global_mem", "wi_warp_local_mem", "simt_ratio", "frac_sfu", "frac_fp64", "frac_div",
                   "frac_int", "frac_branch", "ops_per_byte")
                + tuple("tot_" + c for c in _TOTALS) + ("tot_barriers_wg",)
                + tuple("log2_tot_" + c for c in _LOG2_TOTALS)
                + ("trip_max", "trip_outer_sum", "trip_nest_max", "sites_measured"))
KERNEL_COLUMNS = ("k_dims", "k_branches_divergent", "k_branches_data", "k_branches_uniform",
                  "k_frac_branch_divergent", "k_frac_branch_data", "k_early_returns", "k_loops",
                  "k_loops_data_dependent", "k_loops_divergent", "k_loops_bounded", "k_loop_depth_max",
                  "k_private_array_bytes", "k_access_sites", "k_access_sites_indirect", "k_access_sites_nonaffine",
                  "k_helpers", "k_notes", "k_static_ok", "k_sites")
BUILTIN_COLUMNS = (tuple("bi_" + b for b in MATH_BUILTINS) + tuple("bi_" + g for g in BUILTIN_GROUPS)
                   + ("bi_transcendental", "src_double", "src_vector"))
ANALYTICAL_COLUMNS = ("analytical_us", "log2_analytical_us", "an_launch_us", "an_compute_us", "an_memory_us",
                      "an_sync_us", "an_frac_launch", "an_frac_compute", "an_frac_memory", "an_frac_sync",
                      "an_log2_compute_over_memory", "an_bound", "an_occupancy", "an_waves", "an_resident_wg_per_cu",
                      "an_bandwidth_gbs", "an_memory_level", "an_arithmetic_intensity", "an_flops",
                      "an_fetched_bytes", "an_ok", "analytical_energy_j", "log2_analytical_energy_j")
#: the columns whose log2 is a column too (``log2_<name>``)
_LOG2_COLUMNS = (_LOG2_LAUNCH + tuple("tot_" + c for c in _LOG2_TOTALS)
                 + ("analytical_us", "analytical_energy_j"))
#: what the profile states about the device (:func:`device_columns`; NaN where the profile does not state it)
DEVICE_COLUMNS = ("dev_class", "dev_vendor", "dev_compute_units", "dev_warp_size", "dev_clock_mhz",
                  "dev_peak_fp32_gflops", "dev_peak_fp64_gflops", "dev_dram_bw_gbs", "dev_l2_bytes",
                  "dev_local_mem_per_cu_bytes", "dev_max_threads_per_cu", "dev_max_wg_per_cu", "dev_registers_per_cu",
                  "dev_tdp_w", "dev_log2_fp32_per_byte", "dev_cache_level0_bytes")
#: the columns with one value per (kernel, device) pair, which the level booster of a split head reads
LEVEL_COLUMNS = KERNEL_COLUMNS + BUILTIN_COLUMNS + DEVICE_COLUMNS
#: the launch relative to the device (:func:`device_ratio_columns`)
DEVICE_RATIO_COLUMNS = ("warps_per_wg", "lane_fill", "wg_threads_per_cu_max", "fill_threads", "waves_threads",
                        "log2_ws_over_l2", "local_mem_over_cu", "n_wg_per_cu_max")
#: every feature column of :func:`build_table`, in order
FEATURE_COLUMNS: tuple[str, ...] = (LAUNCH_COLUMNS + WORK_COLUMNS + KERNEL_COLUMNS + BUILTIN_COLUMNS
                                    + ANALYTICAL_COLUMNS + DEVICE_COLUMNS + DEVICE_RATIO_COLUMNS + XFER_COLUMNS)
#: 1 where the analytical model found the device cannot run the configuration (not a feature: such a
#: row gets no prediction from any model, :meth:`TabularPredictor.predict_table`)
UNRUNNABLE_COLUMN = "an_unrunnable"
#: features LightGBM treats as categorical
CATEGORICAL_COLUMNS = ("an_bound", "dev_vendor")
BOUND_NAMES: dict[int, str] = {v: k for k, v in BOUND_CODES.items()}
#: nominal coverage of the intervals a model is saved with
INTERVAL_LEVEL = 0.9
#: fewest out-of-fold residuals of one analytical bound for quantiles of its own (fewer: the overall ones)
MIN_BOUND_ROWS = 50
#: the intervals :meth:`ResidualQuantiles.log2_bounds` can span: ``symmetric`` (the conformal quantile
#: of |r| on both sides) or ``signed`` (the 5 % and 95 % signed quantiles: asymmetric, following a
#: biased model); training keeps, per model, the one with the narrower held-out intervals
INTERVAL_KINDS = ("symmetric", "signed")
#: most kernels whose static analysis :func:`build_table` keeps in memory
STATIC_CACHE_SIZE = 4096


class ModelFormatError(InputError, ValueError):
    """A model directory that is not a tabular model of a version this kernelcast reads."""


# ---------------------------------------------------------------------------------------------
# per-kernel static analysis (cached)


@dataclass
class KernelStatic:
    """What :func:`build_table` knows about one kernel before any configuration: its static
    features (``None`` with ``error`` when the analysis failed), the builtins it calls and the
    per-kernel columns."""

    features: SourceFeatures | None
    error: str | None
    builtins: dict[str, float]
    kernel: dict[str, float]


_STATIC_CACHE: OrderedDict[tuple[str, str, str], KernelStatic] = OrderedDict()

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_VECTOR = re.compile(r"\b(?:u?char|u?short|u?int|u?long|half|float|double)(?:2|3|4|8|16)\b")
_DOUBLE = re.compile(r"\bdouble(?:2|3|4|8|16)?\b")


def _call_sites(pattern: str, text: str) -> int:
    return len(re.findall(rf"\b{pattern}\s*\(", text))


def builtin_counts(source: str) -> dict[str, float]:
    """The ``bi_*`` and ``src_*`` columns of a kernel source (module docstring)."""
    text = _COMMENTS.sub(" ", source)
    out = {f"bi_{b}": float(_call_sites(b, text)) for b in MATH_BUILTINS}
    out.update({f"bi_{g}": float(_call_sites(p, text)) for g, p in BUILTIN_GROUPS.items()})
    out["bi_transcendental"] = sum(out[f"bi_{b}"] for b in MATH_BUILTINS) + out["bi_native"] + out["bi_half"]
    out["src_double"] = float(bool(_DOUBLE.search(text)))
    out["src_vector"] = float(bool(_VECTOR.search(text)))
    return out


def _kernel_columns(sf: SourceFeatures | None) -> dict[str, float]:
    if sf is None:
        return {c: (0.0 if c == "k_static_ok" else math.nan) for c in KERNEL_COLUMNS}
    bc = sf.branch_counts()
    n_br = max(1, sum(bc.values()))
    out = {
        "k_dims": float(sf.dims),
        "k_branches_divergent": float(bc.get("divergent", 0)),
        "k_branches_data": float(bc.get("data", 0)),
        "k_branches_uniform": float(bc.get("uniform", 0)),
        "k_frac_branch_divergent": bc.get("divergent", 0) / n_br,
        "k_frac_branch_data": bc.get("data", 0) / n_br,
        "k_early_returns": float(sf.early_returns),
        "k_loops": float(len(sf.loops)),
        "k_loops_data_dependent": float(sum(lp.data_dependent for lp in sf.loops)),
        "k_loops_divergent": float(sum(lp.divergent for lp in sf.loops)),
        "k_loops_bounded": float(sum(lp.has_break or lp.early_exit for lp in sf.loops)),
        "k_loop_depth_max": float(max((lp.depth for lp in sf.loops), default=0)),
        "k_private_array_bytes": float(sf.private_array_bytes),
        "k_access_sites": float(len(sf.accesses)),
        "k_access_sites_indirect": float(sum(a.indirect for a in sf.accesses)),
        "k_access_sites_nonaffine": float(sum(not a.affine for a in sf.accesses)),
        "k_helpers": float(len(sf.helpers)),
        "k_notes": float(len(sf.notes)),
        "k_static_ok": 1.0,
        "k_sites": float(len(sf.sites)),
    }
    return out


def _cached_static(key: tuple[str, str, str], analyze: Callable[[], SourceFeatures], source: str,
                   name: str) -> KernelStatic:
    """``analyze()``'s static analysis under ``key`` in the bounded cache; an analysis that fails
    gives NaN features and its reason."""
    hit = _STATIC_CACHE.get(key)
    if hit is not None:
        _STATIC_CACHE.move_to_end(key)
        return hit
    feats: SourceFeatures | None = None
    error = None
    try:
        feats = analyze()
    except Exception as e:  # noqa: BLE001 - an unanalyzable kernel gets NaN features and a reason
        error = f"static analysis failed: {e}"
        log.debug("%s: %s", name, error)
    hit = KernelStatic(feats, error, builtin_counts(source), _kernel_columns(feats))
    _STATIC_CACHE[key] = hit
    if len(_STATIC_CACHE) > STATIC_CACHE_SIZE:
        _STATIC_CACHE.popitem(last=False)
    return hit


def kernel_static(source: str, name: str, build_options: str = "") -> KernelStatic:
    """The static analysis of one kernel, computed once per (source, name, options) and cached."""
    return _cached_static((source, name, build_options),
                          lambda: analyze_source(Kernel(source=source, name=name, build_options=build_options)),
                          source, name)


def shared_static(model: AnalyticalModel, key: str, source: str, name: str, language: str,
                  options: str) -> KernelStatic:
    """The static analysis a row names by ``analysis_key`` (rows imported from a Kernel Tuner cache),
    read from the model's analysis cache directories (or run once), cached like :func:`kernel_static`."""
    return _cached_static(("@", key, str(tuple(str(d) for d in model.analysis_dirs))),
                          lambda: model.shared_features(key, source, name, language, options), source, name)


def clear_static_cache() -> None:
    """Forget every cached static analysis (:func:`kernel_static`)."""
    _STATIC_CACHE.clear()


# ---------------------------------------------------------------------------------------------
# the table


def _log2(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x > 0, np.log2(np.where(x > 0, x, 1.0)), np.nan)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)


def _group_env(gsizes: list[tuple[int, ...] | None], lsizes: list[tuple[int, ...] | None],
               args: list[list[dict[str, Any]]], counts: list[dict[str, float]] | None = None,
               compiled: list[dict[str, float]] | None = None) -> dict[str, np.ndarray]:
    """The configuration symbols of a kernel's rows, exactly as ``AnalyticalModel.predict`` builds
    them (``compiled``: the rows' ``AnalyticalModel.compiled_envs``)."""
    cs = counts if counts is not None else [None] * len(gsizes)
    envs = [config_env(list(g or ()), list(ls or ()) or None, a, c) for g, ls, a, c in zip(gsizes, lsizes, args, cs)]
    for e, c in zip(envs, compiled or ()):
        e.update(c)
    return stack_envs(envs)


class _Evaluated:
    """Static features with their values at the configurations already computed: hands them to
    ``AnalyticalModel.evaluate`` instead of evaluating every expression a second time."""

    def __init__(self, features: SourceFeatures, values: dict[str, np.ndarray]):
        self._features, self._values = features, values

    def evaluate_many(self, envs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self._values

    def __getattr__(self, name: str) -> Any:
        return getattr(self._features, name)


def _trips(sf: SourceFeatures, env: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    zeros = np.zeros(shape)
    if not sf.loops:
        return {"trip_max": zeros, "trip_outer_sum": zeros, "trip_nest_max": zeros}
    cenv = sf.complete(env)
    tmax, outer, nest = zeros.copy(), zeros.copy(), zeros.copy()
    stack: list[np.ndarray] = []
    for lp in sf.loops:            # in source order: a loop of depth d sits inside the last loop of depth d-1
        t = np.nan_to_num(np.broadcast_to(evaluate_expr(lp.trip, cenv), shape), nan=0.0, posinf=0.0)
        t = np.maximum(t, 0.0)
        tmax = np.maximum(tmax, t)
        if lp.depth <= 1:
            outer = outer + t
        stack = stack[:max(0, lp.depth - 1)] + [t]
        nest = np.maximum(nest, np.prod(np.stack(stack), axis=0))
    return {"trip_max": tmax, "trip_outer_sum": outer, "trip_nest_max": nest}


def _access_split(sf: SourceFeatures, env: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    ind, unk = np.zeros(shape), np.zeros(shape)
    glob = [a for a in sf.accesses if a.space == "global" and (a.indirect or a.stride0 is None)]
    if glob:
        cenv = sf.complete(env)
        for a in glob:
            b = np.nan_to_num(np.broadcast_to(evaluate_expr(a.count, cenv), shape), nan=0.0) * a.elem_bytes
            if a.indirect:
                ind = ind + b
            if a.stride0 is None:
                unk = unk + b
    return {"wi_indirect_bytes": ind, "wi_unknown_stride_bytes": unk}


def _work_columns(sf: SourceFeatures, f: dict[str, np.ndarray], env: dict[str, np.ndarray], items: np.ndarray,
                  n_wg: np.ndarray) -> dict[str, np.ndarray]:
    shape = items.shape
    out: dict[str, np.ndarray] = {}
    for k in OP_CLASSES + ("n_comp", "n_mem") + MEM_KEYS:
        out["wi_" + k] = np.broadcast_to(np.asarray(f[k], dtype=np.float64), shape)
    gbytes = f["global_load_bytes"] + f["global_store_bytes"] + f["global_atomic_bytes"]
    out["wi_global_bytes"] = gbytes
    out["wi_wasted_bytes"] = np.maximum(f["global_fetched_bytes"] - gbytes, 0.0)
    out["wi_eta_coal"] = f["eta_coal"]
    out["wi_eta_bytes"] = f["eta_bytes"]
    out.update(_access_split(sf, env, shape))
    out["wi_local_bank_conflict"] = f["local_bank_conflict"]
    out["wg_local_mem_bytes"] = f["local_mem_bytes"]
    warp_ops = sum((f["warp_" + k] for k in OP_CLASSES), np.zeros(shape))
    all_ops = sum((f[k] for k in OP_CLASSES), np.zeros(shape))
    out["wi_warp_ops"] = warp_ops
    out["wi_warp_global_mem"] = f["warp_global_mem"]
    out["wi_warp_local_mem"] = f["warp_local_mem"]
    out["simt_ratio"] = np.where(all_ops > 0, _ratio(warp_ops, all_ops), 1.0)
    comp = f["n_comp"]
    out["frac_sfu"] = _ratio(f["sfu"], comp)
    out["frac_fp64"] = _ratio(f["fp64_add"] + f["fp64_mul"] + f["fp64_fma"] + f["fp64_div"], comp)
    out["frac_div"] = _ratio(f["fp32_div"] + f["fp64_div"] + f["int_div"], comp)
    out["frac_int"] = _ratio(f["int_add"] + f["int_mul"] + f["int_div"] + f["int_bit"], comp)
    out["frac_branch"] = _ratio(f["branch"], comp + f["branch"])
    out["ops_per_byte"] = _ratio(comp, gbytes + f["local_bytes"] + f["constant_load_bytes"])
    per_item = {**{k: out["wi_" + k] for k in OP_CLASSES + ("n_comp", "n_mem", "global_atomics", "local_atomics",
                                                             "global_fetched_bytes", "local_bytes")},
                "global_bytes": gbytes}
    for k in _TOTALS:
        out["tot_" + k] = per_item[k] * items
    out["tot_barriers_wg"] = out["wi_barrier"] * n_wg
    out.update(_trips(sf, env, shape))
    if sf.sites:
        got = sum((np.isfinite(np.broadcast_to(np.asarray(env[x.symbol], dtype=np.float64), shape))
                   for x in sf.sites if x.symbol in env), np.zeros(shape))
        out["sites_measured"] = got / len(sf.sites)
    else:
        out["sites_measured"] = np.ones(shape)    # nothing to measure: the counts are all known
    return out


def bound_codes(parts: Mapping[str, np.ndarray]) -> np.ndarray:
    """:data:`BOUND_CODES` of the analytical model's bound, vectorized: the largest of the launch,
    compute, memory and sync times (the first on a tie), ``latency`` when compute or memory bound
    with occupancy below 0.5 in at most one wave (the rule of ``models.analytical.explain``)."""
    stack = np.stack([np.asarray(parts[f"{k}_s"], dtype=np.float64) for k in ("launch", "compute", "memory", "sync")])
    code = np.argmax(stack, axis=0).astype(np.float64)
    occ = np.asarray(parts["occupancy"], dtype=np.float64)
    waves = np.asarray(parts["waves"], dtype=np.float64)
    latency = ((code == BOUND_CODES["compute"]) | (code == BOUND_CODES["memory"])) & (occ < 0.5) & (waves <= 1)
    return np.where(latency, float(BOUND_CODES["latency"]), code)


def _analytical_columns(an: Any, sf: Any, env: dict[str, np.ndarray],
                        cap: np.ndarray | None) -> dict[str, np.ndarray]:
    res = an.evaluate(sf, env, cap)
    p = res.parts
    t_us = res.time_s * 1e6
    parts_us = {k: np.asarray(p[f"{k}_s"], dtype=np.float64) * 1e6 for k in ("launch", "compute", "memory", "sync")}
    total: np.ndarray = sum(parts_us.values(), np.zeros(np.shape(t_us)))
    out = {"analytical_us": t_us}
    for k, v in parts_us.items():
        out[f"an_{k}_us"] = v
        out[f"an_frac_{k}"] = _ratio(v, total)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["an_log2_compute_over_memory"] = np.log2(np.maximum(parts_us["compute"], 1e-9)
                                                     / np.maximum(parts_us["memory"], 1e-9))
    n = len(t_us)
    out["an_bound"] = bound_codes(p)
    out["an_occupancy"] = p["occupancy"]
    out["an_waves"] = p["waves"]
    out["an_resident_wg_per_cu"] = p["resident_wg_per_cu"]
    out["an_bandwidth_gbs"] = np.asarray(p["bandwidth_Bps"], dtype=np.float64) / 1e9
    out["an_memory_level"] = np.asarray(p["memory_level"], dtype=np.float64)
    out["an_arithmetic_intensity"] = np.minimum(np.asarray(p["arithmetic_intensity"], dtype=np.float64), 1e9)
    out["an_flops"] = p["flops"]
    out["an_fetched_bytes"] = p["fetched_bytes"]
    out["an_ok"] = np.where(np.isfinite(t_us) & (t_us > 0), 1.0, 0.0)
    if res.unrunnable is not None:
        out[UNRUNNABLE_COLUMN] = np.where(res.unrunnable != "", 1.0, 0.0)
    e = np.asarray(res.energy_j, dtype=np.float64)
    out["analytical_energy_j"] = e
    return {k: np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for k, v in out.items()}


#: vendor codes of ``dev_vendor`` (a categorical column), matched in the profile's vendor string
VENDOR_CODES: dict[str, int] = {"nvidia": 0, "advanced micro devices": 1, "amd": 1, "intel": 2, "apple": 3, "arm": 4,
                                "qualcomm": 5, "portable computing language": 6, "pocl": 6}
#: device class codes of ``dev_class``
CLASS_CODES: dict[str, int] = {"CPU": 0, "GPU": 1, "ACCELERATOR": 2}


def _profile_value(profile: DeviceProfile, *names: str) -> float:
    """The first of ``names`` the profile states (a value, else the device identity's field of that
    name), NaN when it states none: a missing specification stays missing."""
    for n in names:
        v = profile.get(n)
        if v is None:
            v = getattr(profile.device, n, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
            return float(v)
    return float("nan")


def vendor_code(vendor: str) -> float:
    """:data:`VENDOR_CODES` of a vendor string (NaN for a vendor not listed, or none)."""
    v = (vendor or "").lower()
    for key, code in VENDOR_CODES.items():
        if key in v:
            return float(code)
    return float("nan")


def device_columns(profile: DeviceProfile) -> dict[str, float]:
    """The :data:`DEVICE_COLUMNS` of a profile: its class and vendor (codes), compute units, warp /
    wavefront width, clock, peak FP32 / FP64 rates, DRAM bandwidth, L2, local memory and resident
    limits per compute unit, board power, ``log2`` of FP32 rate over bandwidth (the ridge point) and
    the fastest cache level's capacity. Each is NaN when the profile does not state it."""
    fp32 = _profile_value(profile, "peak_fp32_gflops")
    bw = _profile_value(profile, "dram_bw_gbs")
    cls = profile.device_class
    return {
        "dev_class": float(CLASS_CODES[cls]) if cls in CLASS_CODES else float("nan"),
        "dev_vendor": vendor_code(profile.device.vendor),
        "dev_compute_units": _profile_value(profile, "compute_units"),
        "dev_warp_size": _profile_value(profile, "warp_size", "wg_multiple"),
        "dev_clock_mhz": _profile_value(profile, "boost_clock_mhz", "max_clock_mhz"),
        "dev_peak_fp32_gflops": fp32,
        "dev_peak_fp64_gflops": _profile_value(profile, "peak_fp64_gflops"),
        "dev_dram_bw_gbs": bw,
        "dev_l2_bytes": _profile_value(profile, "l2_bytes"),
        "dev_local_mem_per_cu_bytes": _profile_value(profile, "local_mem_per_cu_bytes", "local_mem_bytes"),
        "dev_max_threads_per_cu": _profile_value(profile, "max_threads_per_cu"),
        "dev_max_wg_per_cu": _profile_value(profile, "max_wg_per_cu"),
        "dev_registers_per_cu": _profile_value(profile, "registers_per_cu"),
        "dev_tdp_w": _profile_value(profile, "tdp_w"),
        "dev_log2_fp32_per_byte": float(np.log2(fp32 / bw)) if np.isfinite(fp32) and np.isfinite(bw) else float("nan"),
        "dev_cache_level0_bytes": _profile_value(profile, "cache_level0_bytes"),
    }


def device_ratio_columns(cols: Mapping[str, np.ndarray], dev: Mapping[str, float]) -> dict[str, np.ndarray]:
    """The launch relative to the device (:data:`DEVICE_RATIO_COLUMNS`), from the launch and work
    columns of a table and :func:`device_columns`: warps per work-group and the fraction of their
    lanes in use, a work-group's share of a compute unit's resident threads, global work-items
    over the device's resident threads (``fill_threads``), waves of work-groups when threads and the
    work-group limit alone bound residency, ``log2`` of the working set over L2, a work-group's local
    memory over a compute unit's, and work-groups over the device's resident work-group slots.
    NaN wherever a device value is missing."""
    wg = np.asarray(cols["wg_items"], dtype=np.float64)
    items = np.asarray(cols["items"], dtype=np.float64)
    n_wg = np.asarray(cols["n_wg"], dtype=np.float64)
    cu, warp = dev["dev_compute_units"], dev["dev_warp_size"]
    thr, wg_max = dev["dev_max_threads_per_cu"], dev["dev_max_wg_per_cu"]
    with np.errstate(divide="ignore", invalid="ignore"):
        warps = np.ceil(wg / warp)
        resident = np.floor(thr / wg)
        if np.isfinite(wg_max):
            resident = np.minimum(resident, wg_max)
        resident = np.where(resident >= 1, resident, np.nan)
        out = {
            "warps_per_wg": warps,
            "lane_fill": wg / (warps * warp),
            "wg_threads_per_cu_max": wg / thr,
            "fill_threads": items / (cu * thr),
            "waves_threads": np.ceil(n_wg / (cu * resident)),
            "log2_ws_over_l2": _log2(np.asarray(cols["working_set_bytes"], dtype=np.float64) / dev["dev_l2_bytes"]),
            "local_mem_over_cu": np.asarray(cols["wg_local_mem_bytes"], dtype=np.float64)
            / dev["dev_local_mem_per_cu_bytes"],
            "n_wg_per_cu_max": n_wg / (cu * wg_max),
        }
    return {k: np.where(np.isfinite(v), v, np.nan) for k, v in out.items()}


def build_table(frame: pd.DataFrame, profile: DeviceProfile,
                analysis_dirs: Sequence[str | os.PathLike[str]] = ()) -> pd.DataFrame:
    """The feature table of ``frame``'s rows (module docstring): :data:`FEATURE_COLUMNS`, then the
    keys and targets ``frame`` has. Same index and row order as ``frame``. The static analysis of
    each kernel runs once (cached across calls); rows are evaluated per kernel, vectorized. Rows
    that name a shared analysis (``analysis_key``, imported from a Kernel Tuner cache) read it from
    ``analysis_dirs`` (``kernelcast analyze --cache``) as the analytical model does, else run it once."""
    n = len(frame)
    for c in ("source", "kernel_name", "gsize"):
        if c not in frame.columns:
            raise InputError(f"build_table: the rows have no {c!r} column")
    cols: dict[str, np.ndarray] = {c: np.full(n, np.nan) for c in FEATURE_COLUMNS}
    cols[UNRUNNABLE_COLUMN] = np.zeros(n)
    an = AnalyticalModel(profile, analysis_dirs=analysis_dirs)
    cu = float(max(1, an.dev.compute_units))
    shared = (frame["analysis_key"].tolist() if "analysis_key" in frame.columns else [None] * n)
    shared = [k if isinstance(k, str) and k else None for k in shared]
    opts = (frame["build_options"].fillna("").astype(str).tolist() if "build_options" in frame.columns
            else [""] * n)
    gsizes = [decode_sizes(v) for v in frame["gsize"].tolist()]
    lsizes = [decode_sizes(v) for v in frame["lsize"].tolist()] if "lsize" in frame.columns else [None] * n
    args = [decode_args(v) for v in frame["args"].tolist()] if "args" in frame.columns else [[] for _ in range(n)]
    counts = ([decode_counts(v) for v in frame["site_counts"].tolist()] if "site_counts" in frame.columns
              else [{} for _ in range(n)])
    has_caps = "power_cap_w" in frame.columns
    caps = pd.to_numeric(frame["power_cap_w"], errors="coerce").to_numpy(dtype=float) if has_caps \
        else np.full(n, np.nan)
    groups: dict[tuple[str, str, str], list[int]] = {}
    share: dict[tuple[str, str, str], str] = {}
    for i, k in enumerate(zip(frame["source"].tolist(), frame["kernel_name"].tolist(), opts)):
        key = shared[i]
        if key is not None:
            k = (k[0], k[1], "\0" + key)
            share[k] = key
        groups.setdefault(k, []).append(i)

    def put(idx: np.ndarray, values: Mapping[str, np.ndarray | float]) -> None:
        for k, v in values.items():
            cols[k][idx] = v

    compiled = an.compiled_envs(frame)
    for (src, name, bo), rows in groups.items():
        idx = np.asarray(rows, dtype=np.intp)
        env = _group_env([gsizes[i] for i in rows], [lsizes[i] for i in rows], [args[i] for i in rows],
                         [counts[i] for i in rows], [compiled[i] for i in rows])
        items = env["gsize0"] * env["gsize1"] * env["gsize2"]
        wg_items = env["lsize0"] * env["lsize1"] * env["lsize2"]
        n_wg = env["ngroups0"] * env["ngroups1"] * env["ngroups2"]
        launch: dict[str, np.ndarray | float] = {k: env[k] for k in ("gsize0", "gsize1", "gsize2", "lsize0", "lsize1",
                                                                     "lsize2", "ngroups0", "ngroups1", "ngroups2",
                                                                     "work_dim")}
        launch.update(items=items, wg_items=wg_items, n_wg=n_wg, n_wg_per_cu=n_wg / cu,
                      working_set_bytes=env["__working_set_bytes"])
        launch["lsize_auto"] = np.array([0.0 if lsizes[i] else 1.0 for i in rows])
        for kind, col in (("buffer", "n_buffer_args"), ("scalar", "n_scalar_args"), ("local", "n_local_args")):
            launch[col] = np.array([float(sum(a.get("kind") == kind for a in args[i])) for i in rows])
        launch["power_cap_w"] = caps[idx]
        put(idx, launch)
        if not isinstance(src, str) or not isinstance(name, str):
            put(idx, _kernel_columns(None))
            cols["an_ok"][idx] = 0.0
            continue
        if (src, name, bo) in share:
            r = frame.iloc[rows[0]]
            lang = r.get("language")
            lang = str(lang) if isinstance(lang, str) and lang else ("cuda" if looks_like_cuda(src) else "opencl")
            ks = shared_static(an, share[(src, name, bo)], src, name, lang, str(r.get("analysis_options") or ""))
        else:
            ks = kernel_static(src, name, bo)
        put(idx, ks.builtins)
        put(idx, ks.kernel)
        if ks.features is None:
            cols["an_ok"][idx] = 0.0
            continue
        sym_env = {k: v for k, v in env.items() if not k.startswith("__")}
        try:
            f = ks.features.evaluate_many(sym_env)
            put(idx, _work_columns(ks.features, f, sym_env, items, n_wg))
            cap = np.where(np.isnan(caps[idx]), np.inf, caps[idx]) if has_caps else None
            put(idx, _analytical_columns(an, _Evaluated(ks.features, f), env, cap))
        except Exception as e:  # noqa: BLE001 - one odd kernel gets NaN work/analytical columns, not a crash
            log.warning("%s: features not evaluated: %s", name, e)
            for c in WORK_COLUMNS + ANALYTICAL_COLUMNS:
                cols[c][idx] = np.nan
            cols["an_ok"][idx] = 0.0
    for c in _LOG2_COLUMNS:
        cols["log2_" + c] = _log2(cols[c])
    dev = device_columns(profile)
    for c, v in dev.items():
        cols[c] = np.full(n, v)
    cols.update(device_ratio_columns(cols, dev))
    table = pd.DataFrame(cols, index=frame.index)
    extra = {c: frame[c].to_numpy() for c in KEY_COLUMNS + tuple(TARGETS.values()) if c in frame.columns}
    extra["xfer_problem"], extra["xfer_config"] = xfer_keys(frame)
    extra[KERNEL_KEY_COLUMN] = kernel_keys(frame)
    extra["xfer_device"] = np.full(n, profile.device.name, dtype=object)
    for c in TARGETS.values():
        if c in extra:
            extra[c] = pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=np.float64)
    if extra:
        table = pd.concat([table, pd.DataFrame(extra, index=frame.index)], axis=1)
    return table


def kernel_keys(frame: pd.DataFrame) -> np.ndarray:
    """The key of every row's kernel: a hash of its name and source (``""`` without either), the same
    for a dataset row and a prediction row of the same kernel, whatever its build options."""
    n = len(frame)
    src = frame["source"].tolist() if "source" in frame.columns else [None] * n
    names = frame["kernel_name"].tolist() if "kernel_name" in frame.columns else [None] * n
    memo: dict[tuple[str, str], str] = {}
    out = []
    for s, name in zip(src, names):
        if not isinstance(s, str) or not isinstance(name, str) or not s or not name:
            out.append("")
            continue
        k = memo.get((s, name))
        if k is None:
            k = memo[(s, name)] = hashlib.sha1(f"{name}\0{s}".encode("utf-8", "replace")).hexdigest()[:20]
        out.append(k)
    return np.asarray(out, dtype=object)


def transfer_rows(frame: pd.DataFrame, profile: DeviceProfile) -> pd.DataFrame:
    """The measured rows of ``frame`` (one device's, measured with ``profile``'s device) as rows of a
    configuration-transfer table (:meth:`models.xfer.XferTable.from_rows`): their keys, the
    profile's device name, the measured time and the profile's device columns; no feature table is
    built, so every measured row of a dataset can inform the table cheaply."""
    problems, configs = xfer_keys(frame)
    t = pd.to_numeric(frame["time_median_us"], errors="coerce").to_numpy(dtype=np.float64) \
        if "time_median_us" in frame.columns else np.full(len(frame), np.nan)
    out = pd.DataFrame({"xfer_problem": problems, "xfer_config": configs,
                        "xfer_device": np.full(len(frame), profile.device.name, dtype=object), "time_median_us": t})
    for c, v in device_columns(profile).items():
        out[c] = v
    return out


def table_transfer_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`build_table` table as configuration-transfer rows *with* their
    analytical log2 time (:func:`transfer_rows` has none): what gives the table's configurations
    their residual shape on each device (``xfer_shape``, :mod:`models.xfer`). The table costs the
    static analyses of its rows; :func:`transfer_rows` costs none."""
    cols = list(XFER_KEY_COLUMNS) + ["time_median_us", "log2_analytical_us"] + list(DEVICE_COLUMNS)
    missing = [c for c in cols if c not in table.columns]
    if missing:
        raise ValueError(f"not a build_table table: no column(s) {missing[:3]}")
    return table[cols].reset_index(drop=True)


def transfer_table(table: pd.DataFrame, extra_rows: pd.DataFrame | None = None) -> XferTable | None:
    """The configuration-transfer table of the measured rows of a :func:`build_table` table and
    ``extra_rows`` (:func:`transfer_rows` or :func:`table_transfer_rows`), or ``None`` when they come
    from fewer than two devices (nothing to transfer). The table's rows and any extra rows with
    ``log2_analytical_us`` bring their analytical times."""
    cols = list(XFER_KEY_COLUMNS) + ["time_median_us"] + list(DEVICE_COLUMNS)
    if "time_median_us" not in table.columns or any(c not in table.columns for c in XFER_KEY_COLUMNS):
        return None

    def part(rows: pd.DataFrame) -> pd.DataFrame:
        out = rows[cols]
        return out.assign(log2_analytical_us=rows["log2_analytical_us"].to_numpy(dtype=np.float64)
                          if "log2_analytical_us" in rows.columns else np.nan)

    parts = [part(table)]
    if extra_rows is not None and len(extra_rows):
        parts.append(part(extra_rows))
    rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)
    if rows["xfer_device"].astype(str).nunique() < 2:
        return None
    dcols = {str(d): {c: float(g[c].iloc[0]) for c in DEVICE_COLUMNS} for d, g in rows.groupby("xfer_device")}
    return XferTable.from_rows(rows, dcols)


def fill_transfer(table: pd.DataFrame, xfer: XferTable | None) -> pd.DataFrame:
    """``table`` with its :data:`~models.xfer.XFER_COLUMNS` from ``xfer`` (each row's own device
    left out; NaN without a table or without the key columns). A new frame; ``table`` is unchanged."""
    out = table.copy()
    if xfer is None or any(c not in table.columns for c in XFER_KEY_COLUMNS):
        for c in XFER_COLUMNS:
            out[c] = np.nan
        return out
    target = {c: table[c].to_numpy(dtype=np.float64) for c in DEVICE_COLUMNS if c in table.columns}
    for c in DEVICE_COLUMNS:
        target.setdefault(c, np.full(len(table), np.nan))
    la = table["log2_analytical_us"].to_numpy(dtype=np.float64) if "log2_analytical_us" in table.columns \
        else np.full(len(table), np.nan)
    feats = xfer.features(table["xfer_config"].tolist(), table["xfer_device"].tolist(), target, la)
    for c in XFER_COLUMNS:
        out[c] = feats[c]
    return out


# ---------------------------------------------------------------------------------------------
# intervals: split-conformal quantiles of out-of-fold residuals


def bound_names(codes: Any) -> list[str | None]:
    """:data:`BOUND_CODES` back to names (``None`` for NaN or an unknown code)."""
    out: list[str | None] = []
    for c in np.atleast_1d(np.asarray(codes, dtype=np.float64)):
        out.append(BOUND_NAMES.get(int(c)) if np.isfinite(c) else None)
    return out


def _kth_smallest(x: np.ndarray, k: int) -> float:
    """The ``k``-th smallest of ``x`` (1-based): ``-inf`` below 1, ``inf`` beyond ``len(x)``."""
    if k < 1:
        return -math.inf
    if k > len(x):
        return math.inf
    return float(np.sort(x)[k - 1])


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _unnum(x: Any, default: float) -> float:
    return default if x is None else float(x)


@dataclass
class ResidualQuantiles:
    """Conformal quantiles of residuals ``r = log2(measured / predicted)`` at a coverage ``level``
    (n residuals):

    * ``abs_q``: the ``ceil((n + 1) level)``-th smallest ``|r|`` (infinite when that rank exceeds
      n): the split-conformal half-width, in log2 units, of a symmetric interval
      ``[pred / 2**abs_q, pred * 2**abs_q]``;
    * ``lo_q`` / ``hi_q``: the signed quantiles at ``(1 - level) / 2`` and ``(1 + level) / 2`` with
      the same finite-sample rule on each side (``hi_q`` the ``ceil((n + 1)(1 + level) / 2)``-th
      smallest r, ``lo_q`` as many places from the top): an interval ``[pred * 2**lo_q,
      pred * 2**hi_q]`` that follows the model's bias.
    """

    n: int
    abs_q: float
    lo_q: float
    hi_q: float

    @classmethod
    def of(cls, residuals: np.ndarray, level: float = INTERVAL_LEVEL) -> ResidualQuantiles:
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level}")
        r = np.asarray(residuals, dtype=np.float64)
        r = r[np.isfinite(r)]
        n = len(r)
        k_abs = math.ceil((n + 1) * level)
        k_hi = math.ceil((n + 1) * (1.0 + level) / 2.0)
        return cls(n, _kth_smallest(np.abs(r), k_abs), _kth_smallest(r, n + 1 - k_hi), _kth_smallest(r, k_hi))

    def log2_bounds(self, kind: str = "symmetric") -> tuple[float, float]:
        """(lower, upper) of ``log2(measured / predicted)`` that an interval of ``kind``
        (:data:`INTERVAL_KINDS`) spans."""
        if kind == "signed":
            return self.lo_q, self.hi_q
        if kind != "symmetric":
            raise ValueError(f"interval kind must be one of {INTERVAL_KINDS}, not {kind!r}")
        return -self.abs_q, self.abs_q

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "abs_q": _num(self.abs_q), "lo_q": _num(self.lo_q), "hi_q": _num(self.hi_q)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ResidualQuantiles:
        return cls(int(d["n"]), _unnum(d.get("abs_q"), math.inf), _unnum(d.get("lo_q"), -math.inf),
                   _unnum(d.get("hi_q"), math.inf))


@dataclass
class ResidualCalibration:
    """What the out-of-fold (OOF) residuals of one model (``tabular`` or ``analytical``) say:
    quantiles over every row (``overall``), per analytical bound with at least
    :data:`MIN_BOUND_ROWS` rows (``by_bound``), after a k-shot correction (``shots``: k ->
    quantiles of the residuals of a kernel's other rows once k of its rows corrected it, see
    :mod:`models.fewshot`), the interval ``kind`` (:data:`INTERVAL_KINDS`), the shrinkage prior
    strength of the few-shot offset (``prior``) and the OOF figures (``figures``: median APE, MAPE,
    within 2x, coverage and width of the interval)."""

    overall: ResidualQuantiles
    by_bound: dict[str, ResidualQuantiles] = field(default_factory=dict)
    shots: dict[int, ResidualQuantiles] = field(default_factory=dict)
    kind: str = "symmetric"
    prior: float = DEFAULT_SHRINK_PRIOR
    figures: dict[str, Any] = field(default_factory=dict)
    #: pooled within-kernel variance of the OOF residuals (log2**2), for the per-kernel shrinkage
    #: of :class:`models.fewshot.Offset`; None in files saved before it was stored
    within_var: float | None = None
    #: the prior of the shape correction fitted on the OOF residuals (:class:`models.fewshot.ShapePrior`);
    #: None in files saved before it was stored, or when too few kernels had two rows
    shape: ShapePrior | None = None

    def quantiles(self, bound: str | None = None, shots: int = 0) -> tuple[ResidualQuantiles, int]:
        """The quantiles for a row of ``bound`` corrected by ``shots`` measured configurations,
        and the number of shots they were computed for: with shots, the quantiles of the largest
        stored k not above ``shots`` (0: the zero-shot ones, per bound where stored)."""
        if shots > 0:
            ks = [k for k in self.shots if k <= shots]
            if ks:
                k = max(ks)
                return self.shots[k], k
        if bound is not None and bound in self.by_bound:
            return self.by_bound[bound], 0
        return self.overall, 0

    def interval(self, pred_us: Any, bound: Any = None, *, shots: int = 0,
                 spread: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) of the interval around each prediction (us). ``bound``: one bound name
        for every row, or one per row (``None``: the overall quantiles). With ``shots`` (the
        prediction already corrected by that many measured configurations) the k-shot quantiles
        apply, widened to at least ``spread`` (log2 units: the measured configurations' own
        scatter around their mean residual) on each side."""
        p = np.atleast_1d(np.asarray(pred_us, dtype=np.float64))
        bounds = [bound] * len(p) if bound is None or isinstance(bound, str) else list(bound)
        if len(bounds) != len(p):
            raise ValueError(f"{len(bounds)} bounds for {len(p)} predictions")
        lo, hi = np.full(len(p), np.nan), np.full(len(p), np.nan)
        for b in set(bounds):
            sel = np.array([x == b for x in bounds])
            q, k = self.quantiles(b, shots)
            a, z = q.log2_bounds(self.kind)
            if k > 0 and spread > 0:
                a, z = min(a, -spread), max(z, spread)
            lo[sel], hi[sel] = p[sel] * np.exp2(a), p[sel] * np.exp2(z)
        ok = np.isfinite(p) & (p > 0)
        lo[~ok], hi[~ok] = np.nan, np.nan
        return lo, hi

    def to_dict(self) -> dict[str, Any]:
        return {"overall": self.overall.to_dict(), "by_bound": {b: q.to_dict() for b, q in self.by_bound.items()},
                "shots": {str(k): q.to_dict() for k, q in sorted(self.shots.items())}, "kind": self.kind,
                "prior": self.prior, "within_var": self.within_var, "figures": self.figures,
                "shape": self.shape.to_dict() if self.shape is not None else None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ResidualCalibration:
        return cls(ResidualQuantiles.from_dict(d["overall"]),
                   {str(b): ResidualQuantiles.from_dict(q) for b, q in (d.get("by_bound") or {}).items()},
                   {int(k): ResidualQuantiles.from_dict(q) for k, q in (d.get("shots") or {}).items()},
                   str(d.get("kind", "symmetric")), float(d.get("prior", DEFAULT_SHRINK_PRIOR)),
                   dict(d.get("figures") or {}), _optional_float(d.get("within_var")),
                   ShapePrior.from_dict(d["shape"]) if isinstance(d.get("shape"), Mapping) else None)


def _optional_float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass
class IntervalCalibration:
    """The interval calibration a tabular model is saved with (``intervals`` in ``tabular.json``):
    the residual calibration of the tabular model and of the analytical model (whose residuals
    were taken with the model's profile), from an internal grouped K-fold over the training rows
    (``train/tabular.py``)."""

    level: float
    folds: int
    groups: int
    rows: int
    models: dict[str, ResidualCalibration]
    method: str = "split-conformal: quantiles of grouped K-fold out-of-fold residuals log2(measured/predicted)"
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "folds": self.folds, "groups": self.groups, "rows": self.rows,
                "method": self.method, "seed": self.seed, "models": {m: c.to_dict() for m, c in self.models.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> IntervalCalibration:
        return cls(float(d["level"]), int(d["folds"]), int(d["groups"]), int(d["rows"]),
                   {str(m): ResidualCalibration.from_dict(c) for m, c in d["models"].items()},
                   str(d.get("method", "")), int(d.get("seed", 0)))


# ---------------------------------------------------------------------------------------------
# the predictor


@dataclass
class TabularHead:
    """One target's boosters: ``residual`` on log2(measured / ``base`` column) for rows with a
    positive finite base, ``direct`` on log2(measured) for the others (either may be absent)."""

    target: str
    base: str
    residual: lgb.Booster | BoosterMean | None = None
    direct: lgb.Booster | BoosterMean | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: the residual booster's output is multiplied by this (0..1) before it is applied: the shrinkage
    #: toward the analytical model chosen on inner out-of-fold predictions (``train/tabular.py``)
    residual_scale: float = 1.0
    #: the *transfer* booster of an unsplit head, on ``log2(measured) - xfer_rel`` of the rows that have a
    #: configuration-transfer value: it predicts the device's level on the problem (and what the
    #: other devices' ordering gets wrong), the other devices' ordering is kept as it is. It reads
    #: every feature; the residual and direct boosters read all but the transfer columns (the
    #: model's features but its last ones, the transfer columns, when it has them)
    transfer: lgb.Booster | BoosterMean | None = None
    #: the residual split into a *level* and a *shape* (``train/tabular.py``): the level of a
    #: (kernel, device) pair is the median residual of its training rows, the shape the residual
    #: minus it (what ranks a kernel's configurations on a device). A split head has the ``shape``
    #: booster (on the shape), the ``level`` booster (on each row's pair level: a pooled level from
    #: the features), and the levels of its training pairs (``kernel_levels``: kernel key ->
    #: device -> level; ``level_devices``: the device columns of each device). A row of a kernel it
    #: was fitted on gets ``shape_scale x shape`` plus the kernel's level on the row's device, or,
    #: on another device, the mean (in log2) of the level booster's and of the kernel's levels on
    #: the training devices weighted by device similarity (:func:`models.xfer.device_weight`); a
    #: row of any other kernel gets
    #: ``unseen_shape_scale x shape + unseen_level_scale x level``: both scales chosen on inner
    #: folds over held-out kernels, 0 when the training rows hold one kernel group (nothing showed
    #: that either carries to another kernel), so such a kernel gets the analytical model's
    #: prediction
    level: lgb.Booster | BoosterMean | None = None
    shape: lgb.Booster | BoosterMean | None = None
    #: a split head's *transfer shape* booster: the shape booster fitted on every feature, the
    #: transfer columns included, on the rows that have a configuration-transfer value. Such a row
    #: gets its shape from it (the other devices' ordering of the configuration) and its level from
    #: the level path as any other row: the transfer columns never set a level. A split head has no
    #: ``transfer`` booster
    transfer_shape: lgb.Booster | BoosterMean | None = None
    #: whether the :attr:`transfer_shape` booster is offset by the row's ``xfer_shape`` (the other
    #: devices' residual shape of the configuration, :mod:`models.xfer`): it was fitted on the shape
    #: minus ``xfer_shape`` (0 where a row has none), which is added back to its prediction
    transfer_shape_offset: bool = False
    shape_scale: float = 1.0
    unseen_shape_scale: float = 0.0
    unseen_level_scale: float = 0.0
    kernel_levels: dict[str, dict[str, float]] = field(default_factory=dict)
    level_devices: dict[str, dict[str, float]] = field(default_factory=dict)
    #: which of the residual boosters' features the ``level`` booster reads (:data:`LEVEL_COLUMNS`
    #: among them, in order): columns with one value per kernel and device, so that its prediction
    #: is one level per pair, as its target is
    level_index: tuple[int, ...] = ()

    @property
    def split(self) -> bool:
        """Whether the residual is predicted as a level and a shape."""
        return self.level is not None and self.shape is not None

    def known_levels(self, kernels: Sequence[str], devices: Sequence[str],
                     device_cols: Sequence[Mapping[str, float]]) -> tuple[np.ndarray, np.ndarray]:
        """The level of each row's kernel on its device (NaN for a kernel the head was not fitted
        on): its own level where the device is among the kernel's training devices, else the mean of
        its levels weighted by :func:`models.xfer.device_weight` between the row's device columns
        and each training device's; and which rows had their own device's level."""
        out = np.full(len(kernels), np.nan)
        own = np.zeros(len(kernels), dtype=bool)
        memo: dict[tuple[str, str], float] = {}
        for i, (k, d) in enumerate(zip(kernels, devices)):
            levels = self.kernel_levels.get(str(k))
            if not levels:
                continue
            key = (str(k), str(d))
            if key not in memo:
                if str(d) in levels:
                    memo[key] = levels[str(d)]
                else:
                    w = np.array([device_weight(device_cols[i], self.level_devices.get(e, {})) for e in levels])
                    v = np.array(list(levels.values()))
                    memo[key] = float(np.sum(w * v) / np.sum(w))
            out[i] = memo[key]
            own[i] = str(d) in levels
        return out, own

    def residual_log2(self, xb: np.ndarray, known: np.ndarray | None = None,
                      own: np.ndarray | None = None, x: np.ndarray | None = None,
                      has_transfer: np.ndarray | None = None, offset: np.ndarray | None = None) -> np.ndarray:
        """The predicted ``log2(measured / base)`` of the rows of ``xb`` (the features the
        residual boosters read), as :meth:`predict` applies it. A split head: ``known`` are the
        rows' :meth:`known_levels` (NaN or absent: a kernel it was not fitted on), ``own`` which of
        them are the kernel's level on the row's own device (absent: all). A known level on another
        device is averaged with the level booster's (the kernel's levels on similar devices and the
        level the device columns give, in log2). ``x``: the same rows with every feature of the
        model (the transfer columns last) and ``has_transfer`` which of them have a transfer value:
        those take their shape from the :attr:`transfer_shape` booster, plus the rows' ``offset``
        (their ``xfer_shape``; NaN counts as 0) when it is :attr:`transfer_shape_offset`."""
        if self.split:
            assert self.level is not None and self.shape is not None
            sh = np.asarray(self.shape.predict(xb), dtype=np.float64)
            if self.transfer_shape is not None and x is not None and has_transfer is not None:
                hx = np.asarray(has_transfer, dtype=bool)
                if hx.any():
                    sh[hx] = np.asarray(self.transfer_shape.predict(x[hx]), dtype=np.float64)
                    if self.transfer_shape_offset:
                        if offset is None:
                            raise ValueError("a transfer shape with an offset needs the rows' xfer_shape")
                        sh[hx] += np.nan_to_num(np.asarray(offset, dtype=np.float64)[hx], nan=0.0)
            kn = np.full(len(xb), np.nan) if known is None else np.asarray(known, dtype=np.float64)
            seen = np.isfinite(kn)
            lv = np.asarray(self.level.predict(xb[:, list(self.level_index)]), dtype=np.float64)
            out = self.unseen_shape_scale * sh + self.unseen_level_scale * lv
            out[seen] = self.shape_scale * sh[seen] + kn[seen]
            if own is not None:
                other = seen & ~np.asarray(own, dtype=bool)
                out[other] = self.shape_scale * sh[other] + 0.5 * (kn[other] + lv[other])
            return out
        assert self.residual is not None
        return self.residual_scale * np.asarray(self.residual.predict(xb), dtype=np.float64)

    def predict(self, x: np.ndarray, base: np.ndarray, rel: np.ndarray | None = None,
                n_base: int | None = None, known: np.ndarray | None = None,
                own: np.ndarray | None = None, offset: np.ndarray | None = None) -> np.ndarray:
        """Predictions in the target's unit (us or J), NaN where no booster applies. ``x``: the
        matrix of the model's features, of which the residual and direct boosters read the first
        ``n_base`` (default all); ``rel``: the rows' ``xfer_rel``. A row with a transfer
        value gets the geometric mean of the transfer path (``2**(xfer_rel + transfer)``) and the
        residual path (the direct booster's where the analytical model has no value); any other
        row the residual (or direct) path alone. ``known``, ``own``: a split head's
        :meth:`known_levels` of the rows. A split head with a :attr:`transfer_shape` booster has
        no transfer path: a row with a transfer value gets that booster's shape on its level
        (:meth:`residual_log2`; ``offset``: the rows' ``xfer_shape``, for a
        :attr:`transfer_shape_offset` booster)."""
        out = np.full(len(base), np.nan)
        xb = x if n_base is None else x[:, :n_base]
        xf = np.zeros(len(base), dtype=bool)
        if self.transfer is not None and rel is not None:
            xf = np.isfinite(rel)
            if xf.any():
                out[xf] = np.exp2(rel[xf] + np.asarray(self.transfer.predict(x[xf]), dtype=np.float64))
        ok = np.isfinite(base) & (base > 0)
        has_residual = self.residual is not None or self.split
        if has_residual and ok.any():
            hx = np.isfinite(rel[ok]) if self.transfer_shape is not None and rel is not None else None
            r = self.residual_log2(xb[ok], None if known is None else np.asarray(known, dtype=np.float64)[ok],
                                   None if own is None else np.asarray(own, dtype=bool)[ok],
                                   x[ok] if hx is not None else None, hx,
                                   None if offset is None else np.asarray(offset, dtype=np.float64)[ok])
            res = base[ok] * np.exp2(r)
            both = xf[ok]
            out[ok] = np.where(both, np.sqrt(np.where(both, out[ok], 1.0) * res), res)
        rest = ~ok if has_residual else np.ones(len(base), dtype=bool)
        if self.direct is not None and rest.any():
            d = np.exp2(np.asarray(self.direct.predict(xb[rest]), dtype=np.float64))
            both = xf[rest]
            out[rest] = np.where(both, np.sqrt(np.where(both, out[rest], 1.0) * d), d)
        return out


class BoosterMean:
    """Several LightGBM boosters fitted alike but for their seed (``train/tabular.py``,
    ``HEAD_SEEDS``), read as one: :meth:`predict` is the mean of theirs, so the variance that one
    booster's randomness (random thresholds, row bagging, feature fractions) adds to its predictions
    is averaged out. Saved as the list of its boosters' model texts (:meth:`texts`)."""

    def __init__(self, boosters: Sequence[Any]) -> None:
        if not boosters:
            raise ValueError("a booster mean needs at least one booster")
        self.boosters = list(boosters)

    def predict(self, x: Any) -> np.ndarray:
        return np.mean([np.asarray(b.predict(x), dtype=np.float64) for b in self.boosters], axis=0)

    def num_feature(self) -> int:
        return int(self.boosters[0].num_feature())

    def feature_name(self) -> list[str]:
        return list(self.boosters[0].feature_name())

    def texts(self) -> list[str]:
        return [b.model_to_string() for b in self.boosters]


def _booster_text(b: Any) -> str | list[str] | None:
    """How a booster (a LightGBM one, a :class:`BoosterMean` or none) is saved."""
    if b is None:
        return None
    return b.texts() if isinstance(b, BoosterMean) else str(b.model_to_string())


def _booster_from_string(text: Any, what: str) -> Any:
    """The booster saved as ``text`` (:func:`_booster_text`): LightGBM's model text, or a list of them
    (a :class:`BoosterMean`)."""
    if isinstance(text, list):
        if not text or len(text) > MAX_SAVED_SEEDS:
            raise ModelFormatError(f"{what}: {len(text)} boosters (1-{MAX_SAVED_SEEDS})")
        if not all(isinstance(t, str) for t in text):
            raise ModelFormatError(f"{what}: a list of boosters holds something other than model texts")
        return BoosterMean([_booster_from_string(t, what) for t in text]) if len(text) > 1 \
            else _booster_from_string(text[0], what)
    import lightgbm as lgb  # deferred: lightgbm is a heavy import

    if not isinstance(text, str) or not text.strip():
        raise ModelFormatError(f"{what}: no model text")
    try:
        return lgb.Booster(model_str=text)
    except Exception as e:  # noqa: BLE001 - LightGBM raises its own error class for a bad model text
        raise ModelFormatError(f"{what}: not a LightGBM model ({str(e).splitlines()[0] if str(e) else e})") from None


class TabularPredictor(Predictor):
    """LightGBM heads on the :func:`build_table` features: ``predict(frame)`` -> time (us), energy (J).

    ``profile`` is the device profile the analytical columns are computed with: the one the model
    was trained with (saved in ``tabular.json``) unless :meth:`load` is given another one."""

    name = "tabular"

    def __init__(self, heads: Mapping[str, TabularHead], features: list[str], profile: DeviceProfile,
                 summary: dict[str, Any] | None = None, calibration: IntervalCalibration | None = None,
                 xfer: XferTable | None = None):
        if "time" not in heads and "energy" not in heads:
            raise ValueError("a tabular model needs a time or an energy head")
        self.heads = dict(heads)
        self.features = list(features)
        self.profile = profile
        self.summary = summary or {}
        self.calibration = calibration
        #: the configuration-transfer table the model was fitted with (``xfer.json``; None: none)
        self.xfer = xfer
        #: how many of the features the residual and direct boosters read (all but the transfer columns)
        self.n_base = len([f for f in self.features if f not in XFER_COLUMNS])

    def residual_calibration(self, model: str = "tabular") -> ResidualCalibration | None:
        """The time residual calibration of ``model`` (``tabular`` or ``analytical``, the latter
        with the model's profile), or ``None`` when the model was saved without one."""
        return None if self.calibration is None else self.calibration.models.get(model)

    def interval(self, pred_us: Any, bound: Any = None, *, shots: int = 0,
                 spread: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The 90 % interval (lower, upper; us) of time predictions of this model:
        :meth:`ResidualCalibration.interval` of its out-of-fold residuals (per analytical bound
        where it has enough rows; NaN when the model was saved without a calibration)."""
        cal = self.residual_calibration("tabular")
        if cal is None:
            n = len(np.atleast_1d(np.asarray(pred_us, dtype=np.float64)))
            return np.full(n, np.nan), np.full(n, np.nan)
        return cal.interval(pred_us, bound, shots=shots, spread=spread)

    @property
    def targets(self) -> list[str]:
        return [t for t in TARGETS if t in self.heads]

    def predict(self, frame: pd.DataFrame) -> Predictions:
        """One prediction per row of ``frame`` (dataset or prediction rows): ``build_table`` then
        :meth:`predict_table`."""
        return self.predict_table(build_table(frame, self.profile))

    def matrix(self, table: pd.DataFrame) -> np.ndarray:
        """The feature matrix of a :func:`build_table` table, in the model's feature order."""
        missing = [c for c in self.features if c not in table.columns]
        if missing:
            raise InputError(f"the table lacks {len(missing)} feature column(s) of the model, e.g. {missing[0]!r} "
                             f"(a table of another version? build it with models.tabular.build_table)")
        return table[self.features].to_numpy(dtype=np.float64)

    def predict_table(self, table: pd.DataFrame) -> Predictions:
        """Predictions from a table :func:`build_table` made (the fast path). The
        configuration-transfer columns are filled from the model's table (:func:`fill_transfer`). A
        row the device cannot run (:data:`UNRUNNABLE_COLUMN`) gets NaN, as the analytical model
        gives it."""
        if any(c in self.features for c in XFER_COLUMNS):
            table = fill_transfer(table, self.xfer)
        x = self.matrix(table)
        out = {}
        for t in TARGETS:
            head = self.heads.get(t)
            if head is None:
                out[t] = np.full(len(table), np.nan)
                continue
            base = table[head.base].to_numpy(dtype=np.float64) if head.base in table.columns \
                else np.full(len(table), np.nan)
            rel = table["xfer_rel"].to_numpy(dtype=np.float64) \
                if head.transfer is not None or head.transfer_shape is not None else None
            known = own = None
            if head.split and KERNEL_KEY_COLUMN in table.columns and "xfer_device" in table.columns \
                    and table[KERNEL_KEY_COLUMN].astype(str).isin(list(head.kernel_levels)).any():
                devcols = table[list(DEVICE_COLUMNS)].to_dict("records")
                known, own = head.known_levels(table[KERNEL_KEY_COLUMN].astype(str).tolist(),
                                               table["xfer_device"].astype(str).tolist(), devcols)
            off = table["xfer_shape"].to_numpy(dtype=np.float64) \
                if head.transfer_shape_offset and "xfer_shape" in table.columns else None
            out[t] = head.predict(x, base, rel, self.n_base, known, own, off)
            if UNRUNNABLE_COLUMN in table.columns:
                out[t] = np.where(table[UNRUNNABLE_COLUMN].to_numpy(dtype=np.float64) > 0, np.nan, out[t])
        return Predictions(out["time"], out["energy"])

    # -- saving and loading -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        heads = {}
        for t, h in self.heads.items():
            heads[t] = {"target_column": TARGETS[t], "base_column": h.base, "summary": h.summary,
                        "residual_scale": h.residual_scale,
                        "residual": _booster_text(h.residual), "direct": _booster_text(h.direct),
                        "transfer": _booster_text(h.transfer)}
            if h.split:
                assert h.level is not None and h.shape is not None
                heads[t].update(level=_booster_text(h.level), shape=_booster_text(h.shape),
                                transfer_shape=_booster_text(h.transfer_shape),
                                transfer_shape_offset=h.transfer_shape_offset,
                                shape_scale=h.shape_scale, unseen_shape_scale=h.unseen_shape_scale,
                                unseen_level_scale=h.unseen_level_scale, kernel_levels=h.kernel_levels,
                                level_devices={d: {c: _num(v) for c, v in cols.items()}
                                               for d, cols in h.level_devices.items()})
        out = {"format": FORMAT, "version": FORMAT_VERSION, "table_version": TABLE_VERSION,
               "features": self.features, "categorical": [c for c in CATEGORICAL_COLUMNS if c in self.features],
               "targets": self.targets, "summary": self.summary, "profile": self.profile.to_dict(), "heads": heads}
        if self.calibration is not None:
            out["intervals"] = self.calibration.to_dict()
        return out

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``tabular.json`` in ``directory`` (created), atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        p = d / MODEL_FILE
        tmp = d / (MODEL_FILE + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        if self.xfer is not None:
            self.xfer.save(d)
        elif (d / XFER_FILE).is_file():
            (d / XFER_FILE).unlink()            # a table left by an earlier model is not this model's
        os.replace(tmp, p)
        return p

    @classmethod
    def load(cls, directory: str | os.PathLike[str], profile: DeviceProfile | None = None) -> TabularPredictor:
        """The model saved in ``directory``. With ``profile``, the analytical columns use it instead
        of the profile saved with the model (logged when the devices differ).
        :class:`ModelFormatError` (an :class:`InputError`) for a directory of another kind or version."""
        d = Path(directory)
        p = d / MODEL_FILE
        if not p.is_file():
            other = " (it holds a CodeGen model: config.json)" if (d / "config.json").is_file() else ""
            raise ModelFormatError(f"{d}: not a tabular model directory (no {MODEL_FILE}){other}")
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ModelFormatError(f"{p}: cannot read: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            fmt = data.get("format") if isinstance(data, dict) else None
            raise ModelFormatError(f"{p}: not a {FORMAT} model (format {fmt!r})")
        ver = data.get("version")
        if ver not in READABLE_FORMAT_VERSIONS or data.get("table_version") not in READABLE_TABLE_VERSIONS:
            raise ModelFormatError(f"{p}: {FORMAT} version {ver} (table {data.get('table_version')}); this "
                                   f"kernelcast reads versions {READABLE_FORMAT_VERSIONS[0]}-{FORMAT_VERSION} "
                                   f"(table {TABLE_VERSION}): retrain it "
                                   f"with 'kernelcast train --kind tabular'")
        features = data.get("features")
        heads_d = data.get("heads")
        if not isinstance(features, list) or not isinstance(heads_d, dict) or not heads_d:
            raise ModelFormatError(f"{p}: no features or no heads")
        unknown = [f for f in features if f not in FEATURE_COLUMNS]
        if unknown:
            raise ModelFormatError(f"{p}: unknown feature column(s) {unknown[:3]}")
        heads: dict[str, TabularHead] = {}
        for t, h in heads_d.items():
            if t not in TARGETS or not isinstance(h, dict):
                raise ModelFormatError(f"{p}: unknown head {t!r}")
            res = None if h.get("residual") is None else _booster_from_string(h["residual"], f"{p}: {t} residual")
            dire = None if h.get("direct") is None else _booster_from_string(h["direct"], f"{p}: {t} direct")
            tra = None if h.get("transfer") is None else _booster_from_string(h["transfer"], f"{p}: {t} transfer")
            lvl = None if h.get("level") is None else _booster_from_string(h["level"], f"{p}: {t} level")
            shp = None if h.get("shape") is None else _booster_from_string(h["shape"], f"{p}: {t} shape")
            tsh = None if h.get("transfer_shape") is None \
                else _booster_from_string(h["transfer_shape"], f"{p}: {t} transfer shape")
            if (lvl is None) != (shp is None):
                raise ModelFormatError(f"{p}: head {t!r} has a level booster without a shape booster or the reverse")
            if tsh is not None and (shp is None or tra is not None or "xfer_rel" not in features):
                raise ModelFormatError(f"{p}: head {t!r} has a transfer shape booster without a level and a shape "
                                       f"booster, beside a transfer booster, or without the xfer_rel feature")
            if res is None and dire is None and lvl is None:
                raise ModelFormatError(f"{p}: head {t!r} has no booster")
            if tra is not None and "xfer_rel" not in features:
                raise ModelFormatError(f"{p}: head {t!r} has a transfer booster and the model no xfer_rel feature")
            n_base = len([f for f in features if f not in XFER_COLUMNS])
            if features[n_base:] and features[n_base:] not in (list(XFER_COLUMNS), list(XFER_COLUMNS_V1)):
                raise ModelFormatError(f"{p}: the transfer columns are not the model's last features")
            t_off = h.get("transfer_shape_offset", False)
            if not isinstance(t_off, bool):
                raise ModelFormatError(f"{p}: head {t!r}: transfer_shape_offset {t_off!r} is not true or false")
            if t_off and (tsh is None or "xfer_shape" not in features):
                raise ModelFormatError(f"{p}: head {t!r} has a transfer shape offset without a transfer shape "
                                       f"booster or without the xfer_shape feature")
            level_index: tuple[int, ...] = ()
            if lvl is not None:
                names = list(lvl.feature_name())
                if any(c not in features[:n_base] for c in names):
                    raise ModelFormatError(f"{p}: head {t!r}: the level booster reads features the model does not list")
                level_index = tuple(features.index(c) for c in names)
            for b, n in ((res, n_base), (dire, n_base), (lvl, len(level_index)), (shp, n_base),
                         (tra, len(features)), (tsh, len(features))):
                if b is not None and b.num_feature() != n:
                    raise ModelFormatError(f"{p}: head {t!r} has a booster of {b.num_feature()} features, the model "
                                           f"lists {n}")
            scale = h.get("residual_scale", 1.0)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0.0 <= scale <= 1.0:
                raise ModelFormatError(f"{p}: head {t!r}: residual_scale {scale!r} is not a number in [0, 1]")
            split_scales = []
            for key, default in (("shape_scale", 1.0), ("unseen_shape_scale", 0.0), ("unseen_level_scale", 0.0)):
                v = h.get(key, default)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                    raise ModelFormatError(f"{p}: head {t!r}: {key} {v!r} is not a number in [0, 1]")
                split_scales.append(float(v))
            try:
                k_levels = {str(k): {str(d): float(v) for d, v in dv.items()}
                            for k, dv in (h.get("kernel_levels") or {}).items()}
                l_devs = {str(d): {str(c): _unnum(v, math.nan) for c, v in cols.items()}
                          for d, cols in (h.get("level_devices") or {}).items()}
            except (AttributeError, TypeError, ValueError):
                raise ModelFormatError(f"{p}: head {t!r}: kernel_levels or level_devices cannot be read") from None
            heads[t] = TabularHead(t, str(h.get("base_column", BASES[t])), res, dire, dict(h.get("summary") or {}),
                                   float(scale), tra, level=lvl, shape=shp, transfer_shape=tsh,
                                   transfer_shape_offset=t_off,
                                   shape_scale=split_scales[0],
                                   unseen_shape_scale=split_scales[1], unseen_level_scale=split_scales[2],
                                   kernel_levels=k_levels, level_devices=l_devs, level_index=level_index)
        saved_profile = None
        try:
            saved_profile = DeviceProfile.from_dict(data.get("profile"))
        except ProfileError as e:
            if profile is None:
                raise ModelFormatError(f"{p}: the saved device profile cannot be read: {e}") from None
        several = len((data.get("summary") or {}).get("devices") or ()) > 1   # device columns from any profile
        if profile is not None and saved_profile is not None and profile.device.name != saved_profile.device.name \
                and not several:
            log.warning("tabular model %s was trained with the profile of %r; computing its analytical columns with "
                        "the profile of %r", d, saved_profile.device.name, profile.device.name)
        prof = profile if profile is not None else saved_profile
        assert prof is not None
        calibration = None
        if data.get("intervals") is not None:
            try:
                calibration = IntervalCalibration.from_dict(data["intervals"])
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                raise ModelFormatError(f"{p}: the interval calibration cannot be read: {e!r}") from None
        xfer = XferTable.load(d)
        if xfer is None and any(c in features for c in XFER_COLUMNS):
            raise ModelFormatError(f"{p}: the model uses configuration-transfer features and {d} has no {XFER_FILE}")
        return cls(heads, features, prof, dict(data.get("summary") or {}), calibration, xfer)


def is_tabular_dir(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a saved tabular model (``tabular.json``)."""
    return (Path(directory) / MODEL_FILE).is_file()

"""Few-shot updating (Zhang et al.'s online updating): measured configurations of a kernel correct
every prediction of that kernel.

Most of a model's error on a kernel it has not seen is one constant factor per kernel (the issue's
experiments: 84-97 % of the squared log error), so a few measurements of the kernel pin it down.
The correction is a per-kernel offset in log2 space::

    r_i    = log2(measured_i / predicted_i)          over the k measured configurations
    offset = k / (k + prior) * mean(r_i)
    corrected prediction = prediction * 2 ** offset  for every configuration of the kernel

The factor ``k / (k + prior)`` shrinks the offset toward 0 (no correction) so that one noisy
measurement does not dominate: it is the posterior mean of a kernel offset with a normal prior of
variance ``s_b**2`` around 0 when each residual scatters around the offset with variance
``s_w**2`` and ``prior = s_w**2 / s_b**2``. Without an estimate ``prior`` is
:data:`DEFAULT_SHRINK_PRIOR` = 1 (``k / (k + 1)``: one shot moves the prediction half-way in log
space, three shots three quarters); a tabular model stores the ratio of its own out-of-fold
residuals (:func:`estimate_prior`, ``train/tabular.py``) and ``predict`` / ``tune`` use that.

The prior strength ``s_w**2 / s_b**2`` is the same for every kernel, but kernels differ in how
far their configurations scatter around the kernel's offset (e.g. a kernel measured on two very
different problems). With two or more shots and the pooled within-kernel variance ``s_w**2`` known
(``within_var``; a tabular model stores it), the kernel's own scatter ``v`` of its shots is pooled
with it, ``s_k**2 = (POOL_DOF s_w**2 + (k - 1) v) / (POOL_DOF + k - 1)``, and the kernel's prior
strength is ``s_k**2 / s_b**2``: shots that disagree with each other move the prediction less
(the posterior mean of the offset with the within-kernel variance itself estimated, the pooled one
counting as :data:`POOL_DOF` degree of freedom). With one shot, or without ``within_var``, the
kernel's prior strength is the pooled one. Measured with ``kernelcast evaluate --data DS --models
analytical,tabular,blend --profile calib/profiles/pocl-local.json --repeats 3`` (grouped 5-fold,
fold seeds 0-2, mean +- sd; ``train.evaluate.few_shot`` estimates the prior and ``s_w**2`` on the
other folds' residuals), against the unshrunk mean offset evaluate used before: the tabular model's
3-shot MAPE on ds1c 139 +- 106 -> 73 +- 20 % (3-shot median APE 32.5 -> 32.3 %), on ds2s 44 +- 4 ->
41 +- 3 % (median 23.4 -> 23.5 %); the analytical model's on ds1c 178 +- 100 -> 99 +- 24 %. The
MAPE tail was a few kernels (``pa_blocked_scale``: 13-72 % of the whole 3-shot APE sum, per fold
seed), measured on problems whose residuals differ widely: its three shots disagreed, and their
plain mean scaled the kernel's other rows by up to x279.

A configuration that was itself measured is predicted by its measurement (the geometric mean of
its measured times), not by the corrected model: with the kernel offset and the configuration's
own deviation from it both observed, only the measurement noise is left, which is small next to
either (the same posterior, taken one level down). The offset corrects the other configurations.

The measured configurations come from a file (:func:`read_measured`): a CSV with columns
``gsize``, ``lsize`` (optional), ``time_us`` and optionally one column per kernel argument (as
``predict --configs``) and ``kernel_name``; or the JSON that ``kernelcast measure --json`` prints
(one object or a list of them). A file that does not match the kernel raises
:class:`MeasuredFileError` (an :class:`InputError`: one line, exit 2).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.errors import InputError

#: shrinkage prior strength without an estimate: offset = k / (k + 1) * mean residual
DEFAULT_SHRINK_PRIOR = 1.0
#: degrees of freedom the pooled within-kernel variance counts for next to a kernel's own shots
POOL_DOF = 1.0
#: range an estimated prior strength is clipped to
MIN_PRIOR, MAX_PRIOR = 0.01, 10.0
#: time columns a measured CSV may use (the first present wins)
TIME_COLUMNS = ("time_us", "time_median_us")
KERNEL_COLUMNS = ("kernel_name", "kernel")


class MeasuredFileError(InputError, ValueError):
    """A measured-configurations file that cannot be read or does not match the kernel."""


def shrinkage(k: int, prior: float = DEFAULT_SHRINK_PRIOR) -> float:
    """The weight ``k / (k + prior)`` of the mean residual of ``k`` measured configurations."""
    if k < 0 or prior < 0:
        raise ValueError(f"k and prior must not be negative (k={k}, prior={prior})")
    return 0.0 if k == 0 else k / (k + prior)


@dataclass
class Offset:
    """A per-kernel correction: ``k`` residuals ``log2(measured / predicted)``, their mean and the
    shrinkage applied to it (module docstring)."""

    residuals: list[float]
    prior: float = DEFAULT_SHRINK_PRIOR
    within_var: float | None = None       # pooled within-kernel variance s_w**2 (log2**2), if known

    @property
    def k(self) -> int:
        return len(self.residuals)

    @property
    def mean_log2(self) -> float:
        return float(np.mean(self.residuals)) if self.residuals else 0.0

    @property
    def kernel_prior(self) -> float:
        """The prior strength for this kernel: ``prior`` scaled by the kernel's pooled scatter over
        the pooled within-kernel variance (module docstring); ``prior`` itself with fewer than two
        shots or without ``within_var``."""
        w = self.within_var
        if self.k < 2 or w is None or not math.isfinite(w) or w <= 0:
            return self.prior
        v = float(np.var(self.residuals, ddof=1))
        pooled = (POOL_DOF * w + (self.k - 1) * v) / (POOL_DOF + self.k - 1)
        return self.prior * pooled / w

    @property
    def shrink(self) -> float:
        return shrinkage(self.k, self.kernel_prior)

    @property
    def log2(self) -> float:
        """The offset applied, in log2 units."""
        return self.shrink * self.mean_log2

    @property
    def factor(self) -> float:
        """The factor every prediction of the kernel is multiplied by."""
        return float(2.0 ** self.log2)

    @property
    def spread(self) -> float:
        """Largest ``|r_i - mean|`` of the measured configurations (log2 units; 0 for fewer than 2)."""
        if self.k < 2:
            return 0.0
        r = np.asarray(self.residuals)
        return float(np.max(np.abs(r - r.mean())))

    def apply(self, predicted_us: Any) -> np.ndarray:
        return np.asarray(predicted_us, dtype=np.float64) * self.factor

    def describe(self) -> str:
        """``corrected by x1.83 from 3 measured configurations (...)``."""
        n = f"{self.k} measured configuration{'s' if self.k != 1 else ''}"
        return (f"corrected by x{self.factor:.3g} from {n} (mean log2(measured/predicted) {self.mean_log2:+.3f}, "
                f"shrunk by {self.k}/({self.k}+{self.kernel_prior:.3g}) = {self.shrink:.3f})")

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "factor": self.factor, "offset_log2": self.log2, "mean_log2": self.mean_log2,
                "shrink": self.shrink, "prior": self.kernel_prior, "pooled_prior": self.prior,
                "within_var": self.within_var, "spread_log2": self.spread, "residuals_log2": list(self.residuals)}


def fit_offset(measured_us: Any, predicted_us: Any, prior: float = DEFAULT_SHRINK_PRIOR,
               within_var: float | None = None) -> Offset:
    """The :class:`Offset` of measured times against the model's predictions of the same
    configurations (pairs where either is not a positive finite number are left out); ``prior`` and
    ``within_var`` as in :class:`Offset`."""
    m = np.atleast_1d(np.asarray(measured_us, dtype=np.float64))
    p = np.atleast_1d(np.asarray(predicted_us, dtype=np.float64))
    if m.shape != p.shape:
        raise ValueError(f"{len(m)} measurements for {len(p)} predictions")
    ok = np.isfinite(m) & np.isfinite(p) & (m > 0) & (p > 0)
    return Offset([float(x) for x in np.log2(m[ok] / p[ok])], prior, within_var)


def estimate_prior(residuals: Any, groups: Any) -> tuple[float, dict[str, float]]:
    """The shrinkage prior strength ``s_w**2 / s_b**2`` of residuals grouped by kernel (method of
    moments: ``s_w**2`` the pooled within-kernel variance, ``s_b**2`` the variance of the kernel
    means less its within-kernel share), clipped to [:data:`MIN_PRIOR`, :data:`MAX_PRIOR`]; and
    the variances. :data:`DEFAULT_SHRINK_PRIOR` when fewer than two kernels have two residuals."""
    r = np.asarray(residuals, dtype=np.float64)
    g = np.asarray(groups)
    ok = np.isfinite(r)
    r, g = r[ok], g[ok]
    keys, inv, counts = np.unique(g, return_inverse=True, return_counts=True)
    multi = counts >= 2
    if multi.sum() < 2:
        return DEFAULT_SHRINK_PRIOR, {}
    means = np.bincount(inv, weights=r) / counts
    dev = r - means[inv]
    within = float(np.sum(dev[multi[inv]] ** 2) / max(1, int(counts[multi].sum() - multi.sum())))
    between = float(np.var(means, ddof=1) - np.mean(within / counts)) if len(keys) >= 2 else 0.0
    detail = {"within_var": within, "between_var": between, "kernels": float(len(keys))}
    if between <= 0:
        return MAX_PRIOR, detail
    return float(np.clip(within / between, MIN_PRIOR, MAX_PRIOR)), detail


# ---------------------------------------------------------------------------------------------
# measured-configuration files


@dataclass
class MeasuredConfig:
    """One measured configuration of the kernel: sizes, time, and either the argument bindings the
    measurement used (``args``, from ``measure --json``) or argument values from CSV columns
    (``arg_values``, bound like ``predict --configs``)."""

    gsize: tuple[int, ...]
    lsize: tuple[int, ...] | None
    time_us: float
    args: list[dict[str, Any]] | None = None
    arg_values: dict[str, str] = field(default_factory=dict)
    where: str = ""


@dataclass
class MeasuredSet:
    path: str
    configs: list[MeasuredConfig]
    skipped: int = 0                       # records whose status was not ok
    notes: list[str] = field(default_factory=list)


def _sizes(v: Any, what: str, where: str, path: str) -> tuple[int, ...] | None:
    from kernelcast.argspec import parse_size

    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    try:
        if isinstance(v, (list, tuple)):
            if not 1 <= len(v) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
                raise ValueError
            return tuple(int(x) for x in v)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return (v,)
        return parse_size(str(v), what)
    except (InputError, ValueError):
        raise MeasuredFileError(f"--measured {path}: {where}: {what} {v!r} is not a size like 4096 or "
                                f"1024x1024") from None


def _time(v: Any, where: str, path: str) -> float:
    try:
        t = float(v)
    except (TypeError, ValueError):
        raise MeasuredFileError(f"--measured {path}: {where}: time {v!r} is not a number") from None
    if not math.isfinite(t) or t <= 0:
        raise MeasuredFileError(f"--measured {path}: {where}: time {v!r} is not positive")
    return t


def _config(gsize: Any, lsize: Any, time_us: Any, where: str, path: str) -> MeasuredConfig:
    g = _sizes(gsize, "gsize", where, path)
    if g is None:
        raise MeasuredFileError(f"--measured {path}: {where}: no gsize")
    ls = _sizes(lsize, "lsize", where, path)
    if ls is not None and len(ls) != len(g):
        raise MeasuredFileError(f"--measured {path}: {where}: local size {'x'.join(map(str, ls))} and global size "
                                f"{'x'.join(map(str, g))} have different dimensions")
    if ls is not None and any(a % b for a, b in zip(g, ls)):
        raise MeasuredFileError(f"--measured {path}: {where}: local size {'x'.join(map(str, ls))} does not divide "
                                f"global size {'x'.join(map(str, g))}")
    return MeasuredConfig(g, ls, _time(time_us, where, path), where=where)


def _check_kernel(name: Any, kernel_name: str, where: str, path: str) -> None:
    if name not in (None, "") and str(name) != kernel_name:
        raise MeasuredFileError(f"--measured {path}: {where} is a measurement of kernel {name!r}, not "
                                f"{kernel_name!r}")


def _read_json(text: str, path: str, kernel: Any) -> MeasuredSet:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise MeasuredFileError(f"--measured {path}: not valid JSON ({e.msg} at line {e.lineno})") from None
    records = data if isinstance(data, list) else [data]
    out = MeasuredSet(path, [])
    for i, rec in enumerate(records):
        where = f"record {i + 1}"
        if not isinstance(rec, dict):
            raise MeasuredFileError(f"--measured {path}: {where} is not an object (expected what 'kernelcast "
                                    f"measure --json' prints)")
        _check_kernel(rec.get("kernel_name"), kernel.name, where, path)
        if rec.get("status", "ok") != "ok":
            out.skipped += 1
            continue
        t = rec.get("time_us")
        if t is None and isinstance(rec.get("time"), dict):
            t = rec["time"].get("median_us")
        if t is None:
            raise MeasuredFileError(f"--measured {path}: {where} has no time (time.median_us)")
        c = _config(rec.get("gsize"), rec.get("lsize"), t, where, path)
        args = rec.get("args")
        if args is not None:
            if not isinstance(args, list) or not all(isinstance(a, dict) and "name" in a and "kind" in a
                                                     for a in args):
                raise MeasuredFileError(f"--measured {path}: {where}: 'args' is not a list of argument bindings")
            c.args = args
        out.configs.append(c)
        kid = rec.get("kernel_id")
        if kid and kid != kernel.id and not out.notes:
            out.notes.append(f"--measured {path}: measured with another version of {kernel.name} (kernel id {kid}, "
                             f"this source {kernel.id})")
    return out


def _read_csv(text: str, path: str, kernel: Any, param_names: Sequence[str]) -> MeasuredSet:
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as e:
        raise MeasuredFileError(f"--measured {path}: not a CSV file ({e})") from None
    if not rows:
        raise MeasuredFileError(f"--measured {path}: no rows")
    cols = set(rows[0])
    tcol = next((c for c in TIME_COLUMNS if c in cols), None)
    if "gsize" not in cols or tcol is None:
        raise MeasuredFileError(f"--measured {path}: needs columns 'gsize' and 'time_us' (and optionally 'lsize' and "
                                f"one per argument), or the JSON of 'kernelcast measure --json'")
    kcol = next((c for c in KERNEL_COLUMNS if c in cols), None)
    out = MeasuredSet(path, [])
    for i, r in enumerate(rows):
        where = f"row {i + 2}"        # the header is line 1
        if kcol:
            _check_kernel(r.get(kcol), kernel.name, where, path)
        c = _config(r.get("gsize"), r.get("lsize"), r.get(tcol), where, path)
        c.arg_values = {k: v for k, v in r.items() if k in param_names and v not in (None, "")}
        out.configs.append(c)
    return out


def read_measured(path: str, kernel: Any, param_names: Sequence[str] = ()) -> MeasuredSet:
    """The measured configurations of ``kernel`` (a :class:`kernelcast.schema.Kernel`) in ``path``
    (module docstring; ``param_names``: the kernel's argument names, the CSV columns that bind
    arguments). :class:`MeasuredFileError` for a file that cannot be read, a row that does not
    parse (gsize, a local size that does not divide it, a time that is not positive), a kernel name
    naming another kernel, or no usable row."""
    p = Path(path)
    if not p.is_file():
        raise MeasuredFileError(f"--measured {path}: no such file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MeasuredFileError(f"--measured {path}: not a text file") from None
    except OSError as e:
        raise MeasuredFileError(f"--measured {path}: cannot read: {e.strerror}") from None
    head = text.lstrip()[:1]
    out = _read_json(text, path, kernel) if head in ("{", "[") else _read_csv(text, path, kernel, param_names)
    if not out.configs:
        why = f" ({out.skipped} record(s) with a status other than ok)" if out.skipped else ""
        raise MeasuredFileError(f"--measured {path}: no usable measured configuration{why}")
    return out

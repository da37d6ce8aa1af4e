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
other folds' residuals), against the unshrunk mean offset, on two datasets measured with PoCL on a
2-core x86-64 CPU: the tabular model's 3-shot MAPE 139 +- 106 -> 73 +- 20 % (3-shot median APE
32.5 -> 32.3 %) on one, 44 +- 4 -> 41 +- 3 % (median 23.4 -> 23.5 %) on the other; the analytical
model's 178 +- 100 -> 99 +- 24 % on the first. The MAPE tail was a few kernels (one: 13-72 % of the
whole 3-shot APE sum, per fold seed), measured on problems whose residuals differ widely: its three
shots disagreed, and their plain mean scaled the kernel's other rows by up to x279.

**Shape.** A per-kernel offset cannot fix a model's error in the *shape* of a kernel's times
across its configurations (on the dataset below the best single factor per kernel still leaves a
MAPE of 18 %, against 21-22 % for three shots). With a :class:`ShapePrior` the correction is a
Gaussian process in log2 space over the configuration, ``r(x) = b + g(x) + e``: ``b`` the kernel's
offset (variance ``offset_sd**2``), ``g`` a smooth function of ``x`` = (log2 global work-items,
log2 work-items per group, the analytical model's log2 compute / memory time at the configuration,
log2 of the model's own prediction: :data:`SHAPE_INPUTS`) with squared-exponential
covariance (``shape_sd**2``, one length scale per input), ``e`` measurement noise
(``noise_sd**2``). The corrected log residual of a configuration is the posterior mean given the
shots, so a configuration near a measured one takes most of that measurement's residual, one far
from every shot takes their shrunk mean (the offset above). Kernels whose shots scatter more than
the prior expects have their shape and noise variances scaled up by the pooled ratio (as
``kernel_prior`` does for the offset), so disagreeing shots move the prediction less. The prior's
variances and length scales are fitted by maximising the marginal likelihood of the residuals of
training kernels (:func:`fit_shape_prior`; each kernel an independent draw); a tabular model
stores the fit of its own out-of-fold residuals, ``evaluate`` fits it on the other folds.
Measured with ``kernelcast evaluate --data DS1 --data DS2 --models analytical,tabular,blend
--repeats 3`` (2,426 rows of 269 kernels, PoCL 3.1 on a 2-core x86-64 CPU; same shots for both; mean +-
sd over fold seeds 0-2): the tabular model's 3-shot MAPE 21.9 +- 0.4 % with the offset alone, 19.8
+- 1.6 % with the shape correction, its 3-shot median APE 12.3 -> 9.6 %, and tuning top-1 after 3
shots 86.5 % (zero-shot 81.4 %). The analytical model's 3-shot MAPE 22.3 -> 19.9 %. With the
analytical balance as an input (the same datasets with more rows, 2,464 rows of 274
kernels): the tabular model's 3-shot MAPE 17.5 +- 0.5 -> 17.0 +- 0.4 %, the analytical model's
17.6 -> 17.1 %; the offset alone 20.3 %.

**Which configurations to measure** (:func:`choose_shots`, ``predict --suggest-shots K``): random
shots often fall together (two sizes next to each other, one work-group size) and leave the rest of
the kernel's configurations to the prior. Under the shape prior the posterior variance of the
correction at every configuration depends only on which configurations were measured, not on what
they read, so the shots can be chosen before measuring: greedily, each the configuration whose
measurement leaves the least total variance over the others. ``kernelcast evaluate --data DS1
--data DS2 --data DS3 --repeats 3`` (4,215 rows of 507 kernels; the prior fitted on the other
folds; mean +- sd over fold seeds 0-2): the tabular model's 3-shot MAPE 16.8 +- 0.3 % with random
shots, 14.6 +- 0.1 % with the chosen ones (median APE 8.8 -> 7.4 %); the analytical model's 17.0 ->
14.8 %.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernelcast.argspec import parse_size
from kernelcast.columns import decode_sizes
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
#: inputs of the shape correction, one column each of :func:`shape_inputs`: the launch (log2
#: global work-items, log2 work-items per group), the analytical model's balance at the
#: configuration (log2 of its compute over its memory time, :func:`analytical_balance`) and the
#: model's own prediction
SHAPE_INPUTS = ("log2_items", "log2_wg_items", "an_log2_compute_over_memory", "log2_predicted_us")
#: the balance is clipped to this (log2 units): a kernel without memory traffic has none to balance
BALANCE_CLIP = 20.0
#: rows per kernel (a seeded sample of larger kernels) and kernels a shape prior is fitted on: the fit
#: is one small Cholesky factorisation per kernel per step, bounded by these
SHAPE_FIT_ROWS, SHAPE_FIT_KERNELS = 24, 600
#: kernels with two residuals or more a shape prior needs
SHAPE_MIN_KERNELS = 8
#: configurations :func:`choose_shots` chooses among (a seeded sample of more): it keeps their n x n
#: posterior covariance
DESIGN_MAX_CANDIDATES = 2000


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
    shape: ShapePrior | None = None        # the shape correction's prior (module docstring), if known
    x: np.ndarray | None = None            # the shots' inputs (rows of shape_inputs), with ``shape``

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

    @property
    def shaped(self) -> bool:
        """Whether the correction depends on the configuration (a shape prior and the shots' inputs)."""
        return self.shape is not None and self.x is not None and self.k > 0

    def log2_at(self, x: Any) -> np.ndarray:
        """The correction (log2 units) at configurations with inputs ``x`` (rows of
        :func:`shape_inputs`): the shape posterior mean when :attr:`shaped`, else :attr:`log2`."""
        xa = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if not self.shaped:
            return np.full(len(xa), self.log2)
        assert self.shape is not None and self.x is not None
        return self.shape.posterior_mean(self.x, np.asarray(self.residuals), xa)

    def apply(self, predicted_us: Any, x: Any = None) -> np.ndarray:
        """The predictions corrected: by the configuration-dependent correction at inputs ``x`` when
        :attr:`shaped` and ``x`` is given, else by :attr:`factor`."""
        p = np.asarray(predicted_us, dtype=np.float64)
        if x is None or not self.shaped:
            return p * self.factor
        return p * np.exp2(self.log2_at(x))

    def describe(self, factors: Any = None) -> str:
        """``corrected by x1.83 from 3 measured configurations (...)``; with a shape correction and
        the ``factors`` it applied, their range."""
        n = f"{self.k} measured configuration{'s' if self.k != 1 else ''}"
        f = np.asarray(factors if factors is not None else [], dtype=np.float64)
        f = f[np.isfinite(f)]
        if self.shaped and len(f):
            return (f"corrected by configuration from {n}: x{f.min():.3g} to x{f.max():.3g} (shape correction over "
                    f"size, work-group size, analytical balance and prediction; mean log2(measured/predicted) "
                    f"{self.mean_log2:+.3f})")
        return (f"corrected by x{self.factor:.3g} from {n} (mean log2(measured/predicted) {self.mean_log2:+.3f}, "
                f"shrunk by {self.k}/({self.k}+{self.kernel_prior:.3g}) = {self.shrink:.3f})")

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "factor": self.factor, "offset_log2": self.log2, "mean_log2": self.mean_log2,
                "shrink": self.shrink, "prior": self.kernel_prior, "pooled_prior": self.prior,
                "within_var": self.within_var, "spread_log2": self.spread, "residuals_log2": list(self.residuals),
                "shape": self.shape.to_dict() if self.shaped and self.shape is not None else None}


def fit_offset(measured_us: Any, predicted_us: Any, prior: float = DEFAULT_SHRINK_PRIOR,
               within_var: float | None = None, shape: ShapePrior | None = None, x: Any = None) -> Offset:
    """The :class:`Offset` of measured times against the model's predictions of the same
    configurations (pairs where either is not a positive finite number are left out); ``prior`` and
    ``within_var`` as in :class:`Offset`; with ``shape`` and the shots' inputs ``x`` (rows of
    :func:`shape_inputs`, one per measurement) the correction depends on the configuration."""
    m = np.atleast_1d(np.asarray(measured_us, dtype=np.float64))
    p = np.atleast_1d(np.asarray(predicted_us, dtype=np.float64))
    if m.shape != p.shape:
        raise ValueError(f"{len(m)} measurements for {len(p)} predictions")
    ok = np.isfinite(m) & np.isfinite(p) & (m > 0) & (p > 0)
    xs = None
    if shape is not None and x is not None:
        xa = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if len(xa) != len(m):
            raise ValueError(f"{len(xa)} shape inputs for {len(m)} measurements")
        ok &= np.isfinite(xa).all(axis=1)
        xs = xa[ok]
    return Offset([float(v) for v in np.log2(m[ok] / p[ok])], prior, within_var,
                  shape if xs is not None else None, xs)


def shape_inputs(launch: Any, predicted_us: Any) -> np.ndarray:
    """The inputs of the shape correction (:data:`SHAPE_INPUTS`), one row per configuration:
    ``launch`` (rows of :func:`launch_inputs`) and log2 of the model's prediction (NaN where it is
    not a positive number)."""
    p = np.atleast_1d(np.asarray(predicted_us, dtype=np.float64))
    la = np.asarray(launch, dtype=np.float64).reshape(len(p), 3) if len(p) else np.zeros((0, 3))
    with np.errstate(divide="ignore", invalid="ignore"):
        lp = np.where(np.isfinite(p) & (p > 0), np.log2(np.where(p > 0, p, 1.0)), np.nan)
    return np.column_stack([la, lp])


def analytical_balance(explanations: Sequence[Any]) -> np.ndarray:
    """log2 of the analytical model's compute time over its memory time, per explanation (the
    ``time_parts_us`` of :func:`models.analytical.explain`; the table's ``an_log2_compute_over_memory``),
    clipped to :data:`BALANCE_CLIP`; NaN where an explanation has no parts."""
    out = []
    for e in explanations:
        parts = e.get("time_parts_us") if isinstance(e, Mapping) else None
        if not isinstance(parts, Mapping):
            out.append(np.nan)
            continue
        c, m = float(parts.get("compute", np.nan)), float(parts.get("memory", np.nan))
        out.append(math.log2(max(c, 1e-9) / max(m, 1e-9)) if math.isfinite(c) and math.isfinite(m) else np.nan)
    return np.clip(np.asarray(out, dtype=np.float64), -BALANCE_CLIP, BALANCE_CLIP)


def launch_inputs(gsizes: Sequence[Any], lsizes: Sequence[Any], balance: Any) -> np.ndarray:
    """The launch part of the shape correction's inputs, one row per configuration: log2 global
    work-items, log2 work-items per group (a configuration without a local size takes the one the
    models assume, ``min(64, gsize0)`` along dimension 0) and the analytical ``balance`` (one per
    configuration: :func:`analytical_balance`, or the table's ``an_log2_compute_over_memory``)."""
    gi, li = [], []
    for g, ls in zip(gsizes, lsizes):
        gs = decode_sizes(g) or (1,)
        lz = decode_sizes(ls) or ((min(64, gs[0]),) + (1,) * (len(gs) - 1))
        gi.append(math.log2(max(1, math.prod(gs))))
        li.append(math.log2(max(1, math.prod(lz))))
    b = np.clip(np.asarray(balance, dtype=np.float64), -BALANCE_CLIP, BALANCE_CLIP)
    if b.shape != (len(gi),):
        raise ValueError(f"{b.size} balances for {len(gi)} configurations")
    return np.column_stack([np.asarray(gi), np.asarray(li), b]) if gi else np.zeros((0, 3))


def frame_launch_inputs(frame: Any, balance: Any) -> np.ndarray:
    """:func:`launch_inputs` of the rows of a frame with ``gsize`` and (optionally) ``lsize``
    columns: configuration rows, a dataset's rows."""
    lsizes = frame["lsize"].tolist() if "lsize" in frame.columns else [None] * len(frame)
    return launch_inputs(frame["gsize"].tolist(), lsizes, balance)


@dataclass
class ShapePrior:
    """The prior of the shape correction (module docstring): standard deviations in log2 units and
    one length scale per input of :data:`SHAPE_INPUTS`, with the figures of its fit."""

    offset_sd: float
    shape_sd: float
    lengths: tuple[float, ...]
    noise_sd: float
    kernels: int = 0
    rows: int = 0
    inputs: tuple[str, ...] = SHAPE_INPUTS

    def covariance(self, a: np.ndarray, b: np.ndarray, offset: bool = True) -> np.ndarray:
        """Prior covariance of ``r`` between the rows of ``a`` and of ``b`` (without noise; without
        the offset's share when ``offset`` is false)."""
        z = (a[:, None, :] - b[None, :, :]) / np.asarray(self.lengths)
        c = self.shape_sd ** 2 * np.exp(-0.5 * np.sum(z * z, axis=-1))
        return c + self.offset_sd ** 2 if offset else c

    def kernel_scale(self, xs: np.ndarray, r: np.ndarray) -> float:
        """How much more (or less) the shots ``r`` at ``xs`` scatter around their mean than the
        prior's shape and noise variances expect, pooled with the prior (:data:`POOL_DOF`): the
        factor those variances are scaled by for this kernel (1 with fewer than two shots)."""
        k = len(r)
        if k < 2:
            return 1.0
        s = self.covariance(xs, xs, offset=False) + self.noise_sd ** 2 * np.eye(k)
        expected = (np.trace(s) - s.sum() / k) / (k - 1)
        if not expected > 0:
            return 1.0
        v = float(np.var(r, ddof=1))
        return (POOL_DOF + (k - 1) * v / expected) / (POOL_DOF + k - 1)

    def posterior_mean(self, xs: np.ndarray, r: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The posterior mean of ``r`` at ``x`` given the shots' residuals ``r`` at ``xs``."""
        if len(r) == 0:
            return np.zeros(len(x))
        rho = self.kernel_scale(xs, r)
        b2 = self.offset_sd ** 2
        c = b2 + rho * (self.covariance(xs, xs, offset=False) + self.noise_sd ** 2 * np.eye(len(r)))
        cx = b2 + rho * self.covariance(x, xs, offset=False)
        return cx @ np.linalg.solve(c, r)

    def to_dict(self) -> dict[str, Any]:
        return {"offset_sd": self.offset_sd, "shape_sd": self.shape_sd, "lengths": list(self.lengths),
                "noise_sd": self.noise_sd, "inputs": list(self.inputs), "kernels": self.kernels, "rows": self.rows}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ShapePrior:
        lengths = tuple(float(v) for v in d["lengths"])
        inputs = tuple(str(v) for v in d.get("inputs") or SHAPE_INPUTS)
        if len(lengths) != len(inputs) or inputs != SHAPE_INPUTS:
            raise ValueError(f"shape prior over {inputs}, expected {SHAPE_INPUTS}")
        vals = [float(d["offset_sd"]), float(d["shape_sd"]), float(d["noise_sd"]), *lengths]
        if not all(math.isfinite(v) and v > 0 for v in vals):
            raise ValueError("shape prior: standard deviations and length scales must be positive")
        return cls(vals[0], vals[1], lengths, vals[2], int(d.get("kernels", 0)), int(d.get("rows", 0)), inputs)


def _shape_nll(theta: np.ndarray, blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> float:
    """Negative log marginal likelihood (up to a constant) of padded blocks of kernels under the
    prior with parameters ``theta`` = log(offset_sd, shape_sd, lengths..., noise_sd)."""
    b, g, *ls = np.exp(theta[:-1])
    n2 = float(np.exp(2 * theta[-1]))
    lengths = np.asarray(ls)
    total = 0.0
    for x, r, mask in blocks:                  # x: (K, m, d), r: (K, m), mask: (K, m)
        z = (x[:, :, None, :] - x[:, None, :, :]) / lengths
        c = b * b + g * g * np.exp(-0.5 * np.sum(z * z, axis=-1))
        both = mask[:, :, None] & mask[:, None, :]
        eye = np.eye(x.shape[1], dtype=bool)[None]
        c = np.where(both, c, 0.0) + np.where(eye, np.where(mask[:, :, None], n2, 1.0), 0.0)
        chol = np.linalg.cholesky(c)
        a = np.linalg.solve(chol, r[..., None])[..., 0]
        total += 0.5 * float(np.sum(a * a)) + float(np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2))))
    return total


def fit_shape_prior(residuals: Any, groups: Any, x: Any, seed: int = 0) -> ShapePrior | None:
    """The :class:`ShapePrior` of residuals ``log2(measured / predicted)`` grouped by kernel at
    inputs ``x`` (rows of :func:`shape_inputs`), by maximum marginal likelihood (L-BFGS-B over the
    log parameters, bounded). At most :data:`SHAPE_FIT_ROWS` rows of a kernel (a seeded sample) and
    :data:`SHAPE_FIT_KERNELS` kernels take part. ``None`` with fewer than
    :data:`SHAPE_MIN_KERNELS` kernels of two rows or more, or when the fit does not converge to a
    finite likelihood."""
    from scipy.optimize import minimize  # deferred: scipy is a heavy import

    r = np.asarray(residuals, dtype=np.float64)
    g = np.asarray(groups)
    xa = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if len(xa) != len(r) or len(g) != len(r):
        raise ValueError(f"{len(r)} residuals, {len(g)} groups, {len(xa)} input rows")
    ok = np.isfinite(r) & np.isfinite(xa).all(axis=1)
    rng = np.random.default_rng(seed)
    kernels = []
    for key in sorted(set(g[ok].tolist()), key=str):
        idx = np.flatnonzero(ok & (g == key))
        if len(idx) >= 2:
            kernels.append(np.sort(rng.choice(idx, SHAPE_FIT_ROWS, replace=False)) if len(idx) > SHAPE_FIT_ROWS
                           else idx)
    if len(kernels) < SHAPE_MIN_KERNELS:
        return None
    if len(kernels) > SHAPE_FIT_KERNELS:
        kernels = [kernels[i] for i in np.sort(rng.choice(len(kernels), SHAPE_FIT_KERNELS, replace=False))]
    d = xa.shape[1]
    blocks = []
    sizes = np.array([len(k) for k in kernels])
    for lo, hi in ((2, 4), (5, 8), (9, 16), (17, SHAPE_FIT_ROWS)):       # pad each kernel to its bucket's size
        sel = [k for k, n in zip(kernels, sizes) if lo <= n <= hi]
        if not sel:
            continue
        bx = np.zeros((len(sel), hi, d))
        br = np.zeros((len(sel), hi))
        bm = np.zeros((len(sel), hi), dtype=bool)
        for i, idx in enumerate(sel):
            bx[i, :len(idx)], br[i, :len(idx)], bm[i, :len(idx)] = xa[idx], r[idx], True
        blocks.append((bx, br, bm))
    spread = np.std(np.concatenate([r[k] for k in kernels]))
    theta0 = np.log(np.r_[max(spread, 0.1), 0.5 * max(spread, 0.1), np.full(d, 2.0), 0.2])
    bounds = [(-6.0, 4.0), (-6.0, 4.0)] + [(-3.0, 6.0)] * d + [(-6.0, 3.0)]
    try:
        res = minimize(_shape_nll, theta0, args=(blocks,), method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": 200})
    except np.linalg.LinAlgError:
        return None
    if not np.isfinite(res.fun):
        return None
    p = np.exp(res.x)
    return ShapePrior(float(p[0]), float(p[1]), tuple(float(v) for v in p[2:2 + d]), float(p[-1]),
                      len(kernels), int(sum(len(k) for k in kernels)))


def choose_shots(shape: ShapePrior, x: Any, k: int, measured: Any = None, seed: int = 0) -> list[int]:
    """The ``k`` configurations to measure so that the shape correction knows the most about the
    others: row indices of ``x`` (rows of :func:`shape_inputs`, one per candidate configuration),
    chosen greedily, each the one whose measurement leaves the least total posterior variance of
    the correction ``r`` over the candidates not measured, given those chosen before it and the
    ``measured`` configurations (their inputs; already measured, never chosen again). The variance
    depends on the configurations alone, not on what the measurements will read, so the choice can
    be made before measuring anything (module docstring: the kernel's own scale is left at 1).
    Candidates with a non-finite input are never chosen; of more than
    :data:`DESIGN_MAX_CANDIDATES`, a sample seeded by ``seed`` is considered. Fewer than ``k``
    indices when there are fewer candidates."""
    xa = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if k < 0:
        raise ValueError(f"k must not be negative, not {k}")
    ok = np.flatnonzero(np.isfinite(xa).all(axis=1)) if len(xa) else np.zeros(0, dtype=int)
    if len(ok) > DESIGN_MAX_CANDIDATES:
        ok = np.sort(np.random.default_rng(seed).choice(ok, DESIGN_MAX_CANDIDATES, replace=False))
    if k == 0 or len(ok) == 0:
        return []
    c = xa[ok]
    n2 = shape.noise_sd ** 2
    post = shape.covariance(c, c)
    if measured is not None and len(np.atleast_2d(np.asarray(measured, dtype=np.float64))):
        xm = np.atleast_2d(np.asarray(measured, dtype=np.float64))
        xm = xm[np.isfinite(xm).all(axis=1)]
        if len(xm):
            cm = shape.covariance(c, xm)
            post = post - cm @ np.linalg.solve(shape.covariance(xm, xm) + n2 * np.eye(len(xm)), cm.T)
    free = np.ones(len(c), dtype=bool)
    chosen: list[int] = []
    for _ in range(min(k, len(c))):
        d = np.diag(post)
        rest = float(d[free].sum())
        # total variance left over the other free candidates if candidate j were measured
        reduce = (post[free] ** 2).sum(axis=0) - d ** 2
        left = rest - d - reduce / (d + n2)
        left[~free] = np.inf
        j = int(np.argmin(left))
        chosen.append(j)
        free[j] = False
        post = post - np.outer(post[:, j], post[j, :]) / (post[j, j] + n2)
    return [int(ok[j]) for j in chosen]


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

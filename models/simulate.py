"""Simulated tuning: the model-guided search (:func:`models.search.guided_search`) replayed on a
cache of measured configurations, where a measurement is a lookup.

A space is read from a Kernel Tuner cache (``.json`` or ``.json.gz``), a T4 results file or a
kernelcast dataset imported from one (:func:`load_space`); Kernel Tuner-style restrictions (Python
expressions over the tune parameters, e.g. ``"block_size_x*block_size_y<=1024"``) keep part of it
(:func:`kernelcast.restrictions.restriction_mask`); the model ranks
it (:func:`space_predictions`: the analytical model of a profile or a saved tabular model, on the
rows of the imported dataset); :func:`prior_times` makes the kernel's measurements on another device
one more source of predictions (several sources are weighted after each measurement by how well
each explains the measurements, :func:`models.search.source_weights`); :func:`simulate` runs the
search and returns the trace against the space's best.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.dataset import read_dataset
from kernelcast.datagen.frame import load_measured_frame
from kernelcast.datagen.ktcache import KTCacheError, read_kt_cache, record_status
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.base import Predictor
from kernelcast.models.predict import score_configurations
from kernelcast.models.search import SearchStep, frame_space, guided_search

from kernelcast.errors import InputError


@dataclass
class SimSpace:
    """The configurations of one cache: tune parameters, measured time (us; NaN: failed) and each
    one's key (Kernel Tuner's: the parameter values joined by commas)."""

    source: str
    kind: str                       # cache | dataset
    device: str
    params: pd.DataFrame
    time_us: np.ndarray
    keys: list[str]
    frame: pd.DataFrame | None = None   # a dataset's rows, one per configuration
    kernel: str = ""                    # the kernel's name where the cache or dataset records one

    @property
    def names(self) -> list[str]:
        return [str(c) for c in self.params.columns]

    @property
    def optimum(self) -> float:
        return float(np.nanmin(self.time_us))

    def key_of(self, values: dict[str, Any]) -> str:
        """Kernel Tuner's cache key of a configuration given as parameter values."""
        return ",".join(str(values[p]) for p in self.names)

    def subset(self, mask: np.ndarray) -> SimSpace:
        keep = np.flatnonzero(mask)
        return SimSpace(self.source, self.kind, self.device, self.params.iloc[keep].reset_index(drop=True),
                        self.time_us[keep], [self.keys[i] for i in keep],
                        None if self.frame is None else self.frame.iloc[keep].reset_index(drop=True), self.kernel)


def load_space(source: str) -> SimSpace:
    """A space from a Kernel Tuner cache or T4 file, or from a dataset imported from one (a directory).
    :class:`InputError` for a path that is neither, or a space with no measured configuration."""
    p = Path(source)
    if p.is_dir():
        try:
            frame = read_dataset(p)
        except (FileNotFoundError, ValueError, OSError) as e:
            raise InputError(f"{source}: not a kernelcast dataset ({e})") from None
        if frame.empty or not any(c.startswith("tp_") for c in frame.columns):
            raise InputError(f"{source}: not a dataset imported from a Kernel Tuner cache (no tp_* columns)")
        frame = frame.reset_index(drop=True)
        params, t = frame_space(frame)
        keys = [str(k) for k in frame["kt_key"]] if "kt_key" in frame.columns else \
            [",".join(str(v) for v in row) for row in params.itertuples(index=False)]
        dev = str(frame["device"].iloc[0]) if "device" in frame.columns else ""
        kernel = str(frame["kernel_name"].iloc[0]) if "kernel_name" in frame.columns else ""
        space = SimSpace(source, "dataset", dev, params, t, keys, frame, kernel)
    elif p.is_file():
        try:
            cache = read_kt_cache(p)
        except KTCacheError as e:
            raise InputError(str(e)) from None
        names = list(cache.tune_params_keys)
        keys, rows, times = [], [], []
        for key, rec in cache.records:
            keys.append(str(key))
            rows.append({k: rec.get(k) for k in names})
            status, _ = record_status(rec)
            t = rec.get("time")
            times.append(float(t) * 1e3 if status == "ok" and isinstance(t, (int, float)) else float("nan"))
        space = SimSpace(source, "cache", cache.device_name, pd.DataFrame(rows, columns=names),
                         np.asarray(times, dtype=np.float64), keys, kernel=cache.kernel_name or "")
    else:
        raise InputError(f"{source}: no such cache file or dataset directory")
    if not np.isfinite(space.time_us).any():
        raise InputError(f"{source}: no configuration was measured")
    return space


def prior_times(space: SimSpace, prior: SimSpace, *, strict: bool = True) -> np.ndarray:
    """Another device's measurements of the same kernel as a source of predictions for ``space``:
    each configuration's measured time in ``prior`` (us; that device's slowest where it failed
    there, since it likely fails here too; NaN where ``prior`` lacks it), matched by Kernel Tuner's
    key (the parameter values in the space's order). ``strict``: :class:`InputError` for a prior of
    another kernel (other tune parameters, or another kernel name where both record one) or one
    that has none of the space's configurations."""
    if strict:
        if sorted(prior.names) != sorted(space.names):
            raise InputError(f"{prior.source}: not a prior of this kernel: its tune parameters "
                             f"({', '.join(prior.names)}) are not those of {space.source} ({', '.join(space.names)})")
        if prior.kernel and space.kernel and prior.kernel != space.kernel:
            raise InputError(f"{prior.source}: not a prior of this kernel: kernel {prior.kernel!r}, not "
                             f"{space.kernel!r}")
    ok = np.isfinite(prior.time_us) & (prior.time_us > 0)
    vals = np.where(ok, prior.time_us, float(np.max(prior.time_us[ok])) if ok.any() else np.nan)
    keys = prior.keys
    if prior.names != space.names and sorted(prior.names) == sorted(space.names):
        keys = [space.key_of({c: _plain(prior.params.iat[i, j]) for j, c in enumerate(prior.names)})
                for i in range(len(prior.keys))]
    by_key = dict(zip(keys, vals))
    out = np.array([by_key.get(k, np.nan) for k in space.keys], dtype=np.float64)
    if strict and not np.isfinite(out).any():
        raise InputError(f"{prior.source}: no configuration in common with {space.source}")
    return out


def source_label(space: SimSpace) -> str:
    """A short name of a prior: its device, else its file or directory name."""
    dev = space.device if space.device and space.device != "unknown" else ""
    return dev or Path(space.source).name


# ---------------------------------------------------------------------------------------------
# the model's predictions

def space_predictions(space: SimSpace, profile: DeviceProfile | None, model: Predictor | None = None, *,
                      frame: pd.DataFrame | None = None, analysis_dirs: Sequence[str] = ()) -> np.ndarray:
    """The predicted time (us) of every configuration of the space, NaN where there is none: the
    tabular ``model`` when given, else the analytical model of ``profile``, on ``frame`` (the rows
    of the dataset imported from the cache, with their kernel source: ``load_measured_frame``),
    matched to the configurations by ``kt_key``. All ones (a flat prior: the search runs on
    measurements alone) without a profile or without rows."""
    out = np.full(len(space.keys), np.nan)
    if profile is None or frame is None or frame.empty:
        return np.ones(len(space.keys))
    if "kt_key" not in frame.columns:
        raise InputError("the dataset's rows carry no kt_key: not imported from a Kernel Tuner cache")
    if model is not None:
        pred = np.asarray(score_configurations(frame, profile, model, analysis_dirs).time_us, dtype=np.float64)
    else:
        pred = np.asarray(AnalyticalModel(profile, analysis_dirs=tuple(analysis_dirs)).predict(frame).time_us,
                          dtype=np.float64)
    pos = {k: i for i, k in enumerate(space.keys)}
    for k, p in zip(frame["kt_key"].astype(str), pred):
        i = pos.get(k)
        if i is not None:
            out[i] = p
    return out


def dataset_rows(dataset: str) -> pd.DataFrame:
    """The measured rows of an imported dataset with their kernel source (what the models take)."""
    frame, _ = load_measured_frame(dataset)
    return frame


# ---------------------------------------------------------------------------------------------
# the simulated search

@dataclass
class TraceRow:
    """One measurement of a simulated search."""

    step: int
    config: dict[str, Any]
    measured_us: float | None       # None: the configuration failed
    predicted_us: float             # the corrected prediction when it was chosen (NaN: none yet)
    best_us: float | None
    error_pct: float | None         # (predicted - measured) / measured * 100
    pick: str
    weights: list[float] | None = None  # the sources' weights when it was chosen (several sources only)


@dataclass
class Simulation:
    """A simulated search: its trace, the choice (the fastest measured) and the space's optimum."""

    source: str
    device: str
    configurations: int
    budget: int
    seed: int
    restrictions: list[str]
    model: str
    trace: list[TraceRow]
    stopped: str
    optimum_us: float
    optimum_config: dict[str, Any]
    sources: list[str] = field(default_factory=list)    # the sources of predictions (several: weighted)
    fallback: bool = False      # the sources' prior weights while none explains the measurements

    @property
    def best_us(self) -> float | None:
        return self.trace[-1].best_us if self.trace else None

    @property
    def fraction_of_optimum(self) -> float:
        """optimum / best found (1: the optimum was found)."""
        b = self.best_us
        return self.optimum_us / b if b else 0.0

    def measurements_to(self, tol: float) -> int | None:
        for r in self.trace:
            if r.best_us is not None and r.best_us <= self.optimum_us * (1.0 + tol):
                return r.step
        return None

    @property
    def choice(self) -> dict[str, Any] | None:
        ok = [r for r in self.trace if r.measured_us is not None]
        if not ok:
            return None
        b = min(ok, key=lambda r: r.measured_us or math.inf)
        return {"config": b.config, "measured_us": b.measured_us, "step": b.step}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "device": self.device, "configurations": self.configurations,
                "budget": self.budget, "seed": self.seed, "restrictions": self.restrictions, "model": self.model,
                "sources": self.sources, "fallback": self.fallback, "measurements": len(self.trace),
                "stopped": self.stopped,
                "choice": self.choice,
                "optimum": {"config": self.optimum_config, "measured_us": self.optimum_us},
                "fraction_of_optimum": self.fraction_of_optimum,
                "measurements_to_5pct": self.measurements_to(0.05), "measurements_to_1pct": self.measurements_to(0.01),
                "trace": [asdict(r) for r in self.trace]}


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def simulate(space: SimSpace, pred: np.ndarray, budget: int, *, seed: int = 0, settle: bool = False,
             restrictions: Sequence[str] = (), model: str = "", sources: Sequence[str] = (),
             fallback: bool = False, on_row: Callable[[TraceRow], None] | None = None) -> Simulation:
    """Run the guided search on the space with at most ``budget`` lookups (``settle``: stop early
    when no unmeasured configuration is likely to beat the best). ``pred`` one prediction per
    configuration, or one row per source (named by ``sources``: e.g. other devices' measurements,
    :func:`prior_times`, and the model's predictions), weighted after each measurement by how well
    each explains the measurements (:func:`models.search.source_weights`; ``fallback``: their prior
    weights while none explains them, as :func:`models.search.guided_search` says); each trace row
    records the weights."""
    pred = np.asarray(pred, dtype=np.float64)
    multi = pred.ndim == 2
    if multi and sources and len(sources) != len(pred):
        raise ValueError(f"{len(sources)} source names for {len(pred)} sources")
    names = (list(sources) or [f"source {j + 1}" for j in range(len(pred))]) if multi else []
    cols = space.names

    def config(i: int) -> dict[str, Any]:
        return {c: _plain(space.params.iat[i, j]) for j, c in enumerate(cols)}

    rows: list[TraceRow] = []
    fin = np.asarray(pred, dtype=np.float64)
    fin = fin[np.isfinite(fin) & (fin > 0)]
    flat = not len(fin) or float(np.ptp(fin)) == 0.0

    def step(s: SearchStep) -> None:
        m = s.measured_us if math.isfinite(s.measured_us) else None
        if (flat or multi) and not rows:
            # a flat prior predicts nothing before the first measurement; several sources, each centred
            # on its median, predict an order but no time
            s = replace(s, predicted_us=float("nan"))
        err = (s.predicted_us - m) / m * 100.0 if m and math.isfinite(s.predicted_us) else None
        r = TraceRow(len(rows) + 1, config(s.index), m, s.predicted_us,
                     s.best_us if math.isfinite(s.best_us) else None, err, s.pick, s.weights)
        rows.append(r)
        if on_row is not None:
            on_row(r)

    res = guided_search(pred, space.params, lambda i: float(space.time_us[i]), budget, seed=seed, settle=settle,
                        fallback=fallback, on_step=step)
    opt_i = int(np.nanargmin(space.time_us))
    return Simulation(space.source, space.device, len(space.keys), budget, seed, list(restrictions), model, rows,
                      res.stopped, space.optimum, config(opt_i),
                      names, fallback and multi)


def plot_simulation(sim: Simulation, path: str | Path) -> None:
    """Best found so far (as a fraction of the optimum) against measurements, as a PNG."""
    import matplotlib  # deferred: only for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # deferred with matplotlib: only for the plot

    x = [r.step for r in sim.trace]
    y = [sim.optimum_us / r.best_us if r.best_us else 0.0 for r in sim.trace]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.step(x, y, where="post", lw=2.0, label="kernelcast guided search")
    ax.axhline(1 / 1.05, color="grey", ls=":", lw=1.0, label="within 5 % of the optimum")
    ax.set_xlabel("measurements")
    ax.set_ylabel("best found / optimum")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{Path(sim.source).name}: {sim.model or 'no model'}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

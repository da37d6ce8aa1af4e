"""Model-guided tuning against Kernel Tuner's own strategies, replayed on caches of measured
configurations (Kernel Tuner's simulation mode).

    python -m kernelcast.bench.tuning SPEC.json --out DIR [--seeds 20] [--budget 50]
        [--strategies random_sample,genetic_algorithm,...]
        [--searchers analytical,bundled,none,others,others:mean,others+model,others:fallback,oof:COLUMN] [--json]
    python -m kernelcast.bench.tuning --merge DIR [DIR ...] --out DIR

SPEC lists the (kernel, device) pairs: ``{"pairs": [{"name": ..., "cache": CACHE.json[.gz],
"dataset": DIR, "profile": NAME, "restrictions": [EXPR, ...], "analytical_oof": PARQUET, "oof":
PARQUET, "analysis_cache": [DIR]}]}``, where ``dataset`` is the cache imported with ``kernelcast
dataset import-kt`` (its rows carry the cache's configuration keys, ``kt_key``, and the kernel
source the models analyse), ``profile`` the device profile of the pair and ``restrictions`` the
search space's restrictions as the original Kernel Tuner script states them (both sides search the
configurations of the cache that satisfy them).

Searchers: every Kernel Tuner strategy named, through ``kernel_tuner.interface.tune_cache`` (the
real strategies, each run seeded through numpy's and Python's global generators; a strategy that
cannot run in simulation is reported, not fatal), and kernelcast's model-guided search
(:func:`kernelcast.models.search.guided_search`) with the predictions of ``analytical`` (the
analytical model with the pair's profile, or the ``analytical_us`` column of ``analytical_oof``, an
``evaluate --folds 0`` run of the same model), ``none`` (no model: the same search from a flat
prior, i.e. Bayesian optimisation over the tune parameters), ``others`` (the kernel's other devices
as the model: the measured times of the spec's other pairs of the same kernel, one source each,
whose weights the search re-estimates from the measurements so far by Bayesian model averaging, equal
before them; nothing of the device being tuned; ``others:mean``: one prior, their unweighted mean,
each device's times centred on its median; ``others+model``: the other devices and the models of the
device being tuned, the analytical model and, where the pair gives an ``oof``, its ``tabular_us``
column (a model trained on the kernel's other devices), all sources of the same weighting, equal
before the measurements; ``others+A[+B]``: the other devices and the models A, B, ...; any of these
several-source searchers with ``:fallback`` appended, e.g. ``others:fallback``: the same sources, their
weights the equal prior ones while no source explains the measurements to better than the search's
least shape variance, :func:`kernelcast.models.search.source_weights`' ``misfit_var``), ``bundled``
(the bundled GPU model with the pair's profile, on the dataset's rows: trained on the public
yardstick's caches, so on those an in-sample figure) or ``oof:COLUMN`` (a column of
``kernelcast evaluate``'s ``oof.parquet`` given as ``"oof"``, e.g. ``tabular_us`` of an evaluation
with ``--group-by gpu``: a model trained on the kernel's other devices). A measurement is a lookup in
the cache; a failed configuration counts as one.

Per pair and searcher, over the seeds: the median number of measurements to come within 5 % and
1 % of the cache's best (runs that never do count as more than the budget), the share of runs that
come within 5 % in 20 measurements, and the median best found as a fraction of the optimum
(``optimum / best``, 1 is the optimum) after 5, 10, 20 and 50 measurements; overall, the median
over pairs and the figures pooled over every run of every pair. DIR/tuning.json holds every run's
trace (rewritten after every searcher, so a run cut short still reports), DIR/table.txt the table,
DIR/best_so_far_<pair>.png the median best-so-far curves. ``--merge`` joins runs made apart.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import load_profile
from kernelcast.datagen.dataset import read_dataset
from kernelcast.models.search import SearchResult, guided_search, source_matrix
from kernelcast.models.simulate import dataset_rows, load_space, prior_times, space_predictions

from kernelcast.errors import InputError, UsageError
from kernelcast.options import Parser
from kernelcast.restrictions import restriction_mask

log = logging.getLogger(__name__)

BUDGETS = (5, 10, 20, 50)
DEFAULT_STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "pso", "diff_evo",
                      "firefly_algorithm", "greedy_ils", "mls", "basinhopping", "dual_annealing", "bayes_opt",
                      "greedy_mls", "ordered_greedy_mls", "minimize", "brute_force")
DEFAULT_SEARCHERS = ("analytical", "none")
TOLERANCES = (0.05, 0.01)


class Space:
    """The configurations of one cache that the pair's restrictions keep (:class:`models.simulate.SimSpace`),
    and the cache as Kernel Tuner reads it (uncompressed: a ``.json.gz`` is unpacked into ``work``)."""

    def __init__(self, cache_path: str, restrictions: Sequence[str] = (), work: Path | None = None) -> None:
        full = load_space(cache_path)
        self.full = len(full.keys)
        sim = full.subset(restriction_mask(full.params, restrictions)) if restrictions else full
        if not np.isfinite(sim.time_us).any():
            raise InputError(f"{cache_path}: the restrictions leave no measured configuration")
        self.sim = sim
        self.path = cache_path
        if cache_path.endswith(".gz"):
            work = work or Path(cache_path).parent
            work.mkdir(parents=True, exist_ok=True)
            plain = work / Path(cache_path).name[:-3]
            if not plain.is_file():
                plain.write_bytes(gzip.decompress(Path(cache_path).read_bytes()))
            self.path = str(plain)
        self.device = sim.device
        self.keys_order = sim.names
        self.keys = sim.keys
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.params = sim.params
        self.time_us = sim.time_us
        self.optimum = sim.optimum

    def key_of(self, params: dict[str, Any]) -> str | None:
        """The cache key of a configuration given as tune parameter values (Kernel Tuner's key)."""
        k = ",".join(str(params[p]) for p in self.keys_order)
        return k if k in self.index else None


def _oof_by_key(path: str, col: str, device: str | None) -> dict[str, float]:
    """``row_key -> prediction`` of an ``evaluate`` run's oof.parquet; an evaluation of several
    datasets prefixes each row's key with its dataset's position (``3:``): its rows of ``device``
    are taken, the prefix dropped."""
    oof = pd.read_parquet(path)
    if col not in oof.columns:
        raise InputError(f"{path}: no column {col!r}")
    keys = oof["row_key"].astype(str)
    if device is not None and "device" in oof.columns and oof["device"].nunique() > 1:
        sel = oof["device"].astype(str) == device
        if not sel.any():
            raise InputError(f"{path}: no row of device {device!r}")
        oof, keys = oof[sel], keys[sel].str.replace(r"^\d+:", "", regex=True)
    return dict(zip(keys, oof[col].astype(float)))


def kernel_of(pair: dict[str, Any]) -> str:
    """The kernel of a pair: its ``kernel`` entry, else the first word of its name (``"convolution A100"``)."""
    return str(pair.get("kernel") or pair["name"].split()[0])


def transfer_predictions(pair: dict[str, Any], space: Space) -> np.ndarray:
    """The kernel's other devices as the model: one row per other pair of the same kernel
    (``pair["others"]``, filled by :func:`read_spec`), each configuration's measured time there (us;
    that device's slowest where it failed there: it likely fails here too; NaN where that device's
    cache lacks it). :func:`kernelcast.models.search.guided_search` takes the rows as sources whose
    weights it re-estimates from the measurements on the device being tuned, which contributes
    nothing here."""
    others = pair.get("others") or []
    if not others:
        raise InputError(f"pair {pair['name']}: searcher others needs other pairs of kernel {kernel_of(pair)!r}")
    out = np.vstack([prior_times(space.sim, load_space(other["cache"]), strict=False) for other in others])
    if not np.isfinite(out).any():
        raise InputError(f"pair {pair['name']}: no other pair of kernel {kernel_of(pair)!r} has a configuration "
                         "of this one measured")
    return out


def combined_prior(pred: np.ndarray) -> np.ndarray:
    """One predicted time per configuration: ``pred`` itself, or of several sources (one row each)
    their unweighted mean in ``log2`` (each centred on its median; NaN where no source predicts it)
    plus the median of their medians: the search's prior before any measurement."""
    if pred.ndim == 1:
        return pred
    ok = np.isfinite(pred) & (pred > 0)
    levels = [float(np.median(np.log2(r[m]))) for r, m in zip(pred, ok) if m.any()]
    has = ok.any(axis=0)
    out = np.full(pred.shape[1], np.nan)
    if levels:
        # the centred sources, each missing value filled with the others' mean: their mean is the
        # mean over the sources that predict a configuration
        out[has] = 2.0 ** (source_matrix(pred).mean(axis=0)[has] + float(np.median(levels)))
    return out


#: the single-model searchers a pair's spec can give (``oof:COLUMN`` besides)
MODEL_SEARCHERS = ("analytical", "bundled", "none")


def model_sources(pair: dict[str, Any], searcher: str) -> list[str]:
    """The models an ``others+...`` searcher adds to the other devices as sources: ``others+model``
    the models the pair has, the analytical model where it gives a ``dataset`` or an
    ``analytical_oof`` and the ``tabular_us`` column of its ``oof`` (a model trained on the kernel's
    other devices) where it gives one (none: the searcher is ``others``); ``others+A+B`` the
    searchers A and B (``analytical``, ``bundled``, ``oof:COLUMN``), which the pair must support."""
    parts = searcher.split("+")[1:]
    if parts == ["model"]:
        return (["analytical"] if pair.get("dataset") or pair.get("analytical_oof") else []) + \
            (["oof:tabular_us"] if pair.get("oof") else [])
    return parts


#: appended to a several-source searcher's name (``others:fallback``, ``others+model:fallback``): its
#: weights fall back to the prior ones while every source misfits the measurements
FALLBACK = ":fallback"


def split_fallback(name: str) -> tuple[str, bool]:
    """A searcher's name without :data:`FALLBACK`, and whether it had it."""
    return (name[:-len(FALLBACK)], True) if name.endswith(FALLBACK) else (name, False)


def valid_searcher(name: str) -> bool:
    """Whether ``name`` is a searcher :func:`predictions` knows."""
    name, fallback = split_fallback(name)
    if fallback:
        return name == "others" or (name.startswith("others+") and valid_searcher(name))
    if name in MODEL_SEARCHERS or name in ("others", "others:mean") or (name.startswith("oof:") and len(name) > 4):
        return True
    parts = name.split("+")
    if parts[0] != "others" or len(parts) < 2:
        return False
    return parts[1:] == ["model"] or all(p in ("analytical", "bundled") or (p.startswith("oof:") and len(p) > 4)
                                         for p in parts[1:])


def source_names(pair: dict[str, Any], searcher: str) -> list[str]:
    """The names of a several-source searcher's sources, in the order of :func:`predictions`' rows."""
    searcher = split_fallback(searcher)[0]
    names = [str(o["name"]) for o in pair.get("others") or []]
    return names + model_sources(pair, searcher) if "+" in searcher else names


def predictions(pair: dict[str, Any], space: Space, searcher: str) -> np.ndarray:
    """The predicted time (us) of every configuration of the space (NaN where there is none; for
    ``others`` one row per other device, :func:`transfer_predictions`): ``others:mean`` their
    unweighted mean (:func:`combined_prior`, one prior the search keeps); ``analytical`` from the
    pair's ``analytical_oof`` (an ``evaluate --folds 0`` run's oof.parquet, column ``analytical_us``)
    where given, else the analytical model of the pair's profile on the dataset's rows;
    ``oof:COLUMN`` from the pair's ``oof``; ``none``: a flat prior; ``NAME:fallback``: those of ``NAME``."""
    searcher = split_fallback(searcher)[0]
    if searcher == "none":
        return np.ones(len(space.keys))
    if searcher == "others":
        return transfer_predictions(pair, space)
    if searcher == "others:mean":
        return combined_prior(transfer_predictions(pair, space))
    if searcher.startswith("others+"):
        # the other devices and the models of this device, each one more source of the same weighting
        rows = [transfer_predictions(pair, space)]
        for m in model_sources(pair, searcher):
            p = predictions(pair, space, m)
            if not np.isfinite(p).any():
                raise InputError(f"pair {pair['name']}: the model {m} predicted none of the configurations")
            rows.append(p[None, :])
        return np.vstack(rows)
    if not pair.get("dataset"):
        raise InputError(f"pair {pair['name']}: searcher {searcher} needs the pair's dataset")
    frame = read_dataset(pair["dataset"])
    if "kt_key" not in frame.columns:
        raise InputError(f"{pair['dataset']}: not a dataset imported from a Kernel Tuner cache (no kt_key column)")
    device = str(frame["device"].iloc[0]) if "device" in frame.columns and len(frame) else None
    if searcher == "bundled":
        from kernelcast.models.bundled import BUNDLED_GPU_DIR, with_profile
        from kernelcast.models.tabular import TabularPredictor

        profile = load_profile(pair["profile"])
        model = with_profile(TabularPredictor.load(BUNDLED_GPU_DIR), profile)
        return space_predictions(space.sim, profile, model, frame=dataset_rows(pair["dataset"]),
                                 analysis_dirs=tuple(pair.get("analysis_cache") or ()))
    if searcher == "analytical" and not pair.get("analytical_oof"):
        rows = dataset_rows(pair["dataset"])
        return space_predictions(space.sim, load_profile(pair["profile"]), frame=rows,
                                 analysis_dirs=tuple(pair.get("analysis_cache") or ()))
    if searcher == "analytical":
        by_key = _oof_by_key(pair["analytical_oof"], "analytical_us", device)
    elif searcher.startswith("oof:"):
        if not pair.get("oof"):
            raise InputError(f"pair {pair['name']}: searcher {searcher} needs the pair's oof")
        by_key = _oof_by_key(pair["oof"], searcher[4:], device)
    else:
        raise UsageError(f"unknown searcher {searcher!r} (analytical, bundled, none, others, others:mean or "
                         "oof:COLUMN)")
    pred = np.array([by_key.get(str(k), np.nan) for k in frame["row_key"]], dtype=np.float64)
    out = np.full(len(space.keys), np.nan)
    for k, v in zip(frame["kt_key"].astype(str), pred):
        i = space.index.get(k)
        if i is not None:
            out[i] = v
    return out


def trace_stats(times: Sequence[float], optimum: float, budgets: Sequence[int] = BUDGETS) -> dict[str, Any]:
    """Measurements to reach each tolerance (None: never) and the fraction of the optimum found after
    each of ``budgets``, of one run's measured times in order (NaN: failed)."""
    best = np.minimum.accumulate(np.where(np.isfinite(times), times, np.inf)) if len(times) else np.array([])
    out: dict[str, Any] = {"measurements": len(times)}
    for tol in TOLERANCES:
        hit = np.flatnonzero(best <= optimum * (1.0 + tol))
        out[f"reach_{round(tol * 100)}"] = int(hit[0]) + 1 if len(hit) else None
    for b in budgets:
        v = best[min(b, len(best)) - 1] if len(best) else np.inf
        out[f"frac_{b}"] = float(optimum / v) if np.isfinite(v) else 0.0
    out["best_so_far"] = [float(x) if np.isfinite(x) else None for x in best]
    return out


def run_strategy(space: Space, strategy: str, budget: int, seed: int,
                 restrictions: Sequence[str] | None) -> list[float]:
    """One Kernel Tuner strategy in simulation mode on the cache: the measured times (us) of the
    distinct configurations in the order the strategy evaluated them."""
    from kernel_tuner.interface import tune_cache  # deferred: imports Kernel Tuner

    np.random.seed(seed)
    random.seed(seed)
    results, _ = tune_cache(space.path, restrictions=list(restrictions) if restrictions else None,
                            strategy=strategy, strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
    seen: set[str] = set()
    out: list[float] = []
    for r in results:
        key = space.key_of(r)
        if key is None or key in seen:
            continue
        seen.add(key)
        out.append(float(space.time_us[space.index[key]]))
    return out[:budget]


def guided_run(space: Space, pred: np.ndarray, budget: int, seed: int, fallback: bool = False) -> SearchResult:
    """kernelcast's search on the cache (``pred``: one prediction per configuration, or one row per
    source; ``fallback``: the sources' weights fall back to the prior ones while all misfit)."""
    return guided_search(pred, space.params, lambda i: float(space.time_us[i]), budget, seed=seed, settle=False,
                         fallback=fallback)


def run_guided(space: Space, pred: np.ndarray, budget: int, seed: int, fallback: bool = False) -> list[float]:
    """The measured times (us; NaN: failed) of :func:`guided_run` in order."""
    return [s.measured_us for s in guided_run(space, pred, budget, seed, fallback).steps]


def _guided_stats(space: Space, pred: np.ndarray, budget: int, seed: int, fallback: bool = False) -> dict[str, Any]:
    """:func:`trace_stats` of one guided run, with the sources' weights after 20 measurements and at
    its end where ``pred`` has several sources."""
    res = guided_run(space, pred, budget, seed, fallback)
    out = trace_stats([s.measured_us for s in res.steps], space.optimum)
    if res.steps and res.steps[-1].weights is not None:
        out["weights_20"] = res.steps[min(20, len(res.steps)) - 1].weights
        out["weights_end"] = res.steps[-1].weights
    return out


def summarize(runs: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Medians over the seeds of one searcher on one pair."""
    out: dict[str, Any] = {"runs": len(runs)}
    for tol in TOLERANCES:
        key = f"reach_{round(tol * 100)}"
        vals = [r[key] if r[key] is not None else math.inf for r in runs]
        med = float(np.median(vals))
        out[f"median_{key}"] = med if math.isfinite(med) else None       # None: more than the budget
    out["within5_in_20_pct"] = 100.0 * float(np.mean([r["reach_5"] is not None and r["reach_5"] <= 20
                                                      for r in runs]))
    for b in BUDGETS:
        if b <= budget:
            out[f"median_frac_{b}"] = float(np.median([r[f"frac_{b}"] for r in runs]))
    return out


def run_pair(pair: dict[str, Any], strategies: Sequence[str], searchers: Sequence[str], seeds: int,
             budget: int, say: Any, work: Path | None = None,
             checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every searcher and strategy on one pair; ``checkpoint(partial)`` after each (the figures so far)."""
    space = Space(pair["cache"], pair.get("restrictions") or (), work)
    out: dict[str, Any] = {"name": pair["name"], "cache": pair["cache"], "device": space.device,
                           "configurations": space.full, "searched": len(space.keys),
                           "measured": int(np.isfinite(space.time_us).sum()), "optimum_us": space.optimum,
                           "restrictions": list(pair.get("restrictions") or ()), "searchers": {}, "failed": {}}
    for s in searchers:
        t0 = time.perf_counter()
        try:
            pred = predictions(pair, space, s)
        except (InputError, OSError, KeyError, ValueError) as e:
            out["failed"][f"kernelcast:{s}"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            say(f"{pair['name']}: kernelcast:{s} could not run: {out['failed'][f'kernelcast:{s}']}")
            continue
        flat = combined_prior(pred)
        ok = np.isfinite(flat) & np.isfinite(space.time_us)
        rho = float(pd.Series(flat[ok]).rank().corr(pd.Series(space.time_us[ok]).rank())) if ok.sum() > 2 else None
        fallback = split_fallback(s)[1]
        runs = [_guided_stats(space, pred, budget, seed, fallback) for seed in range(seeds)]
        out["searchers"][f"kernelcast:{s}"] = {**summarize(runs, budget), "spearman": rho,
                                               "predicted": int(np.isfinite(flat).sum()), "traces": runs,
                                               "seconds": time.perf_counter() - t0}
        if pred.ndim == 2:
            # the sources (the other devices) and their median weights over the seeds after 20 measurements
            out["searchers"][f"kernelcast:{s}"]["sources"] = {
                name: float(np.median([r["weights_20"][j] for r in runs]))
                for j, name in enumerate(source_names(pair, s))}
        say(f"{pair['name']}: kernelcast:{s} done in {time.perf_counter() - t0:.1f} s")
        if checkpoint is not None:
            checkpoint(out)
    for st in strategies:
        t0 = time.perf_counter()
        try:
            runs = [trace_stats(run_strategy(space, st, budget, seed, pair.get("restrictions")), space.optimum)
                    for seed in range(seeds)]
        except Exception as e:  # noqa: BLE001 - a strategy Kernel Tuner cannot run in simulation is reported
            out["failed"][f"kt:{st}"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            say(f"{pair['name']}: kt:{st} could not run: {out['failed'][f'kt:{st}']}")
            continue
        out["searchers"][f"kt:{st}"] = {**summarize(runs, budget), "traces": runs,
                                        "seconds": time.perf_counter() - t0}
        say(f"{pair['name']}: kt:{st} done in {time.perf_counter() - t0:.1f} s")
        if checkpoint is not None:
            checkpoint(out)
    return out


def overall(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({s for p in pairs for s in p["searchers"]})
    out: dict[str, Any] = {}
    for s in names:
        figs: dict[str, Any] = {}
        entries = [p["searchers"][s] for p in pairs if s in p["searchers"]]
        for key in entries[0]:
            if key.startswith(("median_", "within5")):
                vals = [e[key] if e[key] is not None else math.inf for e in entries]
                med = float(np.median(vals))
                figs[key] = med if math.isfinite(med) else None
        # pooled over every run of every pair (the pairs x seeds): the targets' figures
        runs = [r for e in entries for r in e.get("traces", [])]
        if runs:
            for tol in TOLERANCES:
                key = f"reach_{round(tol * 100)}"
                med = float(np.median([r[key] if r[key] is not None else math.inf for r in runs]))
                figs[f"pooled_{key}"] = med if math.isfinite(med) else None
            figs["pooled_within5_in_20_pct"] = 100.0 * float(np.mean([r["reach_5"] is not None and r["reach_5"] <= 20
                                                                      for r in runs]))
        figs["pairs"] = len(entries)
        out[s] = figs
    kt = {s: v for s, v in out.items() if s.startswith("kt:") and v.get("median_reach_5") is not None}
    if kt:
        best = min(kt, key=lambda s: kt[s]["median_reach_5"])
        out["best_kernel_tuner_strategy"] = {"name": best, "median_reach_5": kt[best]["median_reach_5"]}
    return out


def format_table(result: dict[str, Any]) -> str:
    def f(x: Any, spec: str = ".0f") -> str:
        return ">B" if x is None else format(x, spec)

    lines = [f"{'pair':<28} {'searcher':<30} {'to 5%':>6} {'to 1%':>6} {'5% in 20':>8} "
             + " ".join(f"{'@' + str(b):>6}" for b in BUDGETS)]
    for p in result["pairs"] + [{"name": "median over pairs", "searchers": result["overall"]}]:
        for s, v in sorted(p["searchers"].items()):
            if not isinstance(v, dict) or "median_reach_1" not in v:
                continue
            lines.append(f"{p['name'][:28]:<28} {s[:30]:<30} {f(v['median_reach_5']):>6} {f(v['median_reach_1']):>6} "
                         f"{f(v.get('within5_in_20_pct')):>7}% "
                         + " ".join(f"{f(v.get(f'median_frac_{b}'), '.3f'):>6}" for b in BUDGETS))
    pooled = {s: v for s, v in result["overall"].items() if isinstance(v, dict) and "pooled_reach_5" in v}
    if pooled:
        lines.append(f"\n{'pooled over pairs x seeds':<28} {'searcher':<30} {'to 5%':>6} {'to 1%':>6} "
                     f"{'5% in 20':>8} pairs")
        for s, v in sorted(pooled.items()):
            lines.append(f"{'':<29} {s[:30]:<30} {f(v['pooled_reach_5']):>6} {f(v['pooled_reach_1']):>6} "
                         f"{f(v['pooled_within5_in_20_pct']):>7}% {v['pairs']:>5}")
    for p in result["pairs"]:
        for s, why in sorted(p.get("failed", {}).items()):
            lines.append(f"{p['name']}: {s} did not run: {why}")
    return "\n".join(lines)


def plot(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib  # deferred: only for the plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    for p in result["pairs"]:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for s, v in sorted(p["searchers"].items()):
            curves = [r["best_so_far"] for r in v["traces"] if r["best_so_far"]]
            n = max(len(c) for c in curves) if curves else 0
            if not n:
                continue
            arr = np.array([[p["optimum_us"] / (c[min(i, len(c) - 1)] or np.inf) for i in range(n)] for c in curves])
            ax.plot(np.arange(1, n + 1), np.median(arr, axis=0), label=s,
                    lw=2.0 if s.startswith("kernelcast") else 1.0)
        ax.set_xlabel("measurements")
        ax.set_ylabel("best found / optimum (median over seeds)")
        ax.set_title(p["name"])
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6, ncol=2)
        name = "best_so_far_" + "".join(c if c.isalnum() else "_" for c in p["name"]) + ".png"
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def read_spec(path: str) -> list[dict[str, Any]]:
    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the benchmark spec: {e}") from None
    pairs = spec.get("pairs") if isinstance(spec, dict) else None
    if not isinstance(pairs, list) or not pairs:
        raise InputError(f"{path}: expected {{\"pairs\": [...]}} with at least one pair")
    base = Path(path).parent
    for i, p in enumerate(pairs):
        for key in ("name", "cache"):
            if not isinstance(p.get(key), str):
                raise InputError(f"{path}: pair {i} has no {key!r}")
        for key in ("cache", "dataset", "oof"):
            if isinstance(p.get(key), str) and not Path(p[key]).is_absolute():
                p[key] = str(base / p[key])
        if not Path(p["cache"]).is_file():
            raise InputError(f"{path}: pair {p['name']}: no such cache {p['cache']}")
    for p in pairs:
        p["others"] = [{"name": q["name"], "cache": q["cache"]} for q in pairs
                       if q is not p and kernel_of(q) == kernel_of(p)]
    return pairs


def merge_results(dirs: Sequence[str]) -> dict[str, Any]:
    """The results of several runs (each DIR/tuning.json, a run's or a merge's) as one: the pairs by
    name, each pair's searchers from the first run that has them. :class:`InputError` for a run that
    cannot be read, is not a result of this benchmark, or runs with different budgets."""
    runs = []
    for d in dirs:
        try:
            r = json.loads((Path(d) / "tuning.json").read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"{d}: cannot read tuning.json: {e}") from None
        ok = isinstance(r, dict) and all(k in r for k in ("budget", "seeds", "pairs", "kernel_tuner")) and \
            isinstance(r["pairs"], list) and all(isinstance(p, dict) and "name" in p and isinstance(
                p.get("searchers"), dict) for p in r["pairs"])
        if not ok:
            raise InputError(f"{d}: tuning.json is not a result of this benchmark")
        runs.append(r)
    if len({r["budget"] for r in runs}) > 1:
        raise InputError(f"the runs have different budgets: {sorted({r['budget'] for r in runs})}")
    pairs: dict[str, dict[str, Any]] = {}
    for r in runs:
        for p in r["pairs"]:
            q = pairs.setdefault(p["name"], {**p, "searchers": {}, "failed": {}})
            for k, v in p["searchers"].items():
                q["searchers"].setdefault(k, v)
            for k, v in p.get("failed", {}).items():
                q["failed"].setdefault(k, v)
    out = {"kernel_tuner": runs[0]["kernel_tuner"], "budget": runs[0]["budget"], "merged_from": list(dirs),
           # a merge's seeds are already a list
           "seeds": sorted({n for r in runs for n in (r["seeds"] if isinstance(r["seeds"], list) else [r["seeds"]])}),
           "strategies": sorted({s for r in runs for s in r.get("strategies") or ()}),
           "searchers": sorted({s for r in runs for s in r.get("searchers") or ()}), "pairs": list(pairs.values()),
           "complete": all(r.get("complete", True) for r in runs)}
    out["overall"] = overall(out["pairs"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.tuning", description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", help="benchmark spec (JSON): the pairs")
    ap.add_argument("--merge", nargs="+", metavar="DIR",
                    help="instead of running: merge the results of earlier runs (their --out) into --out")
    ap.add_argument("--out", required=True, help="directory for tuning.json and the plots")
    ap.add_argument("--seeds", type=int, default=20, help="runs per searcher and pair (20)")
    ap.add_argument("--budget", type=int, default=50, help="measurements per run (50)")
    ap.add_argument("--strategies", default=",".join(DEFAULT_STRATEGIES), help="Kernel Tuner strategies")
    ap.add_argument("--searchers", default=",".join(DEFAULT_SEARCHERS),
                    help="kernelcast searchers: analytical, bundled (the bundled GPU model), none, others (the "
                         "kernel's other devices, weighted by how well each explains the measurements), "
                         "others:mean (their unweighted mean), others+model (the other devices and the models of "
                         "this device as sources of the same weighting: the analytical model and the spec's oof "
                         "tabular_us), others+MODEL[+MODEL] (those models), any of the others searchers with "
                         ":fallback appended (others:fallback: the weights stay equal while no source explains the "
                         "measurements), oof:COLUMN (analytical,none)")
    ap.add_argument("--only", help="run the pairs whose name contains this")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args(argv)
    if args.merge:
        try:
            if args.spec:
                raise UsageError("give a spec or --merge, not both")
            merged = merge_results(args.merge)
        except InputError as e:
            print(f"bench.tuning: {e}", file=sys.stderr)
            return 2
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        merged["plots"] = plot(merged, out)
        (out / "tuning.json").write_text(json.dumps(merged, indent=1))
        (out / "table.txt").write_text(format_table(merged) + "\n")
        print(json.dumps(merged["overall"], indent=1) if args.json else format_table(merged))
        return 0
    try:
        if not args.spec:
            raise UsageError("give a spec (or --merge DIR ...)")
        if args.seeds < 1 or args.budget < 1:
            raise UsageError("--seeds and --budget must be at least 1")
        pairs = [p for p in read_spec(args.spec) if not args.only or args.only in p["name"]]
        if not pairs:
            raise UsageError(f"no pair's name contains {args.only!r}")
        strategies = [s for s in args.strategies.split(",") if s]
        searchers = [s for s in args.searchers.split(",") if s]
        for s in searchers:
            if not valid_searcher(s):
                raise UsageError(f"unknown searcher {s!r} (analytical, bundled, none, others, others:mean, "
                                 "others+model, others+MODEL[+MODEL], others:fallback, others+...:fallback "
                                 "or oof:COLUMN)")
    except InputError as e:
        print(f"bench.tuning: {e}", file=sys.stderr)
        return 2

    def say(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr)

    import kernel_tuner  # deferred: imports Kernel Tuner

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result: dict[str, Any] = {"kernel_tuner": kernel_tuner.__version__, "strategies": strategies,
                              "searchers": searchers, "seeds": args.seeds, "budget": args.budget, "pairs": []}

    def write(done: list[dict[str, Any]], complete: bool) -> None:
        result["pairs"] = done
        result["complete"] = complete
        result["overall"] = overall([p for p in done if p["searchers"]]) if any(p["searchers"] for p in done) else {}
        result["seconds"] = time.perf_counter() - t0
        tmp = out / "tuning.json.part"
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(out / "tuning.json")
        (out / "table.txt").write_text(format_table(result) + "\n")

    done: list[dict[str, Any]] = []
    for p in pairs:
        done.append(run_pair(p, strategies, searchers, args.seeds, args.budget, say, out / "kt-caches",
                             checkpoint=lambda partial: write(done + [partial], False)))
        write(done, False)
    result["plots"] = plot(result, out)
    write(done, True)
    summary = {k: v for k, v in result.items() if k != "pairs"}
    summary["pairs"] = [{k: (v if k != "searchers" else {s: {kk: vv for kk, vv in x.items() if kk != "traces"}
                                                         for s, x in v.items()})
                         for k, v in p.items()} for p in result["pairs"]]
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"Kernel Tuner {result['kernel_tuner']}, {args.seeds} seeds, budget {args.budget}; "
              f"to 5%/1%: median measurements to come within 5 %/1 % of the optimum (>B: not within the budget); "
              f"@N: median best found / optimum after N measurements")
        print(format_table(result))
        print(f"\nwritten to {out}: tuning.json, {len(result['plots'])} plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The out-of-fold machinery that ``kernelcast evaluate`` and the blend's fitting share: kernel
groups and their folds, the models as fitters (prepared once on a frame, fitted per fold), the
loop that gives every row an out-of-fold prediction, and the figures of one set of predictions.

Groups: a synthetic kernel belongs to its template family (``synth_tile_000028`` -> ``synth_tile``),
any other kernel to its source file (the corpus record's ``origin``; rows imported from a Kernel
Tuner cache, whose origin is the cache, to their kernel); groups holding near-duplicate sources
(token-shingle Jaccard >= 0.8) are merged. Splits (:func:`make_splits`) hold out kernel groups
(``kernel``), devices (``gpu``: every row of one device on one side) or both at once (``both``: a
test fold is one block of kernel groups on one block of devices, trained on the rows of neither).
"""

from __future__ import annotations

import abc
import itertools
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from kernelcast.calib.profile import DeviceProfile
from kernelcast.datagen.corpus.dedup import MinHasher, dedup_tokens, lsh_params, shingle_hashes
from kernelcast.datagen.frame import DataError
from kernelcast.models.analytical import AnalyticalModel
from kernelcast.models.bundled import is_multi_device, with_profile
from kernelcast.models.fewshot import analytical_balance
from kernelcast.models.predict import load_learned
from kernelcast.models.tabular import TabularPredictor, build_table
from kernelcast.train.split import group_key
from kernelcast.train.tabular import fit_tabular

from kernelcast.columns import decode_args, decode_sizes, problem_args
from kernelcast.errors import UsageError
from kernelcast.metrics import (
    log2_bias,
    mape,
    mean_sq_log2,
    median_abs_log2,
    median_ape,
    p90_ape,
    per_kernel_mape,
    within_factor,
)

log = logging.getLogger(__name__)

TARGET = "time_median_us"
GROUP_BY = ("kernel", "gpu", "both")

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------------
# kernel groups and folds


@dataclass
class KernelGroup:
    key: str
    kind: str                               # synthetic_family | source_file | kernel | merged
    kernels: list[str]                      # kernel ids
    names: list[str]                        # kernel names, same order
    rows: int = 0
    fold: int = -1


@dataclass
class Grouping:
    group_of: dict[str, str]                # kernel id -> group key
    groups: dict[str, KernelGroup]
    near_duplicates: list[tuple[str, str, float]]   # (kernel id, kernel id, Jaccard) that merged groups


def base_group(name: str, origin: Any, kernel_id: str) -> tuple[str, str]:
    """(key, kind) of a kernel before near-duplicate merging: its synthetic template family, its
    source file, or (with no origin, or the origin of a Kernel Tuner cache, ``kt:FILE``: caches of
    several kernels share file names such as ``A100.json``) the kernel alone
    (:func:`train.split.group_key`)."""
    if isinstance(origin, str) and origin.startswith("kt:"):
        origin = None
    return group_key(name, origin, kernel_id)


def _shingles(source: str) -> np.ndarray:
    return np.unique(shingle_hashes(dedup_tokens(source)))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted arrays of distinct values."""
    if not len(a) and not len(b):
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def near_duplicate_pairs(sources: Mapping[str, str], threshold: float = 0.8, *, num_perm: int = 128,
                         max_bucket: int = 64) -> list[tuple[str, str, float]]:
    """Pairs of kernels whose normalised sources are near-duplicates (exact Jaccard of token
    shingles >= ``threshold``), found among MinHash-LSH candidates so the cost stays near-linear:
    a bucket with more than ``max_bucket`` members is compared along a chain (each member with the
    first and with its neighbour), enough for the transitive merge the groups make."""
    ids = sorted(sources)
    sh = {i: _shingles(sources[i]) for i in ids}
    hasher = MinHasher(num_perm=num_perm, seed=1)
    bands, rows = lsh_params(num_perm, threshold)
    buckets: dict[tuple[int, bytes], list[str]] = {}
    for i in ids:
        sig = hasher.signature(sh[i])
        for b in range(bands):
            buckets.setdefault((b, sig[b * rows:(b + 1) * rows].tobytes()), []).append(i)
    cands: set[tuple[str, str]] = set()
    for members in buckets.values():
        if len(members) < 2:
            continue
        if len(members) <= max_bucket:
            cands.update(itertools.combinations(members, 2))
        else:
            cands.update((members[0], m) for m in members[1:])
            cands.update(zip(members[1:], members[2:]))
    out: list[tuple[str, str, float]] = []
    for x, y in sorted(cands):
        j = jaccard(sh[x], sh[y])
        if j >= threshold:
            out.append((x, y, j))
    return out


def build_groups(kernels: pd.DataFrame, threshold: float = 0.8) -> Grouping:
    """Kernel groups of a frame with one row per kernel (``kernel_id``, ``kernel_name``,
    ``kernel_origin``, ``source``, ``rows``)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    base: dict[str, tuple[str, str]] = {}
    for r in kernels.itertuples(index=False):
        base[str(r.kernel_id)] = base_group(str(r.kernel_name), getattr(r, "kernel_origin", None), str(r.kernel_id))
    for kid, (key, _) in base.items():
        parent.setdefault(kid, kid)
        parent.setdefault(key, key)
        union(kid, key)
    merges = []
    if threshold <= 1.0:
        for a, b, j in near_duplicate_pairs(dict(zip(kernels["kernel_id"], kernels["source"])), threshold):
            if find(a) != find(b):
                merges.append((a, b, j))
            union(a, b)
    names = dict(zip(kernels["kernel_id"], kernels["kernel_name"].astype(str)))
    rows = dict(zip(kernels["kernel_id"], kernels["rows"].astype(int)))
    comps: dict[str, list[str]] = {}
    for kid in sorted(base):
        comps.setdefault(find(kid), []).append(kid)
    group_of: dict[str, str] = {}
    groups: dict[str, KernelGroup] = {}
    for members in comps.values():
        keys = sorted({base[k][0] for k in members})
        kinds = {base[k][1] for k in members}
        key = keys[0] if len(keys) == 1 else f"{keys[0]} +{len(keys) - 1}"
        kind = kinds.pop() if len(keys) == 1 else "merged"
        members = sorted(members, key=lambda k: (names[k], k))
        groups[key] = KernelGroup(key, kind, members, [names[k] for k in members], sum(rows[k] for k in members))
        for k in members:
            group_of[k] = key
    return Grouping(group_of, groups, merges)


def assign_folds(group_rows: Mapping[str, int], n_folds: int, seed: int = 0) -> dict[str, int]:
    """Group -> fold, balanced by rows: groups larger than half a fold's share go first (largest
    first), then the others in a seeded random order, each to the fold with the fewest rows so far
    (ties: fewest groups, then a seeded order of the folds). Raises :class:`DataError` when there
    are fewer groups than folds."""
    if n_folds < 2:
        raise UsageError(f"--folds must be at least 2, got {n_folds}")
    if len(group_rows) < n_folds:
        raise DataError(f"too few kernel groups for {n_folds} folds: the dataset has {len(group_rows)} (a kernel, "
                        f"its near-duplicates and the synthetic kernels of its template family form one group); "
                        f"use fewer --folds or a dataset with more kernels")
    rng = np.random.default_rng([seed, n_folds])
    keys = sorted(group_rows)
    order = [keys[i] for i in rng.permutation(len(keys))]
    cut = sum(group_rows.values()) / (2 * n_folds)
    big = sorted((k for k in keys if group_rows[k] > cut), key=lambda k: (-group_rows[k], k))
    small = [k for k in order if group_rows[k] <= cut]
    prio = rng.permutation(n_folds)
    load = [0] * n_folds
    count = [0] * n_folds
    out: dict[str, int] = {}
    for k in big + small:
        f = min(range(n_folds), key=lambda i: (load[i], count[i], prio[i]))
        out[k] = f
        load[f] += group_rows[k]
        count[f] += 1
    return out


def row_folds(kernel_ids: np.ndarray, grouping: Grouping, n_folds: int, seed: int) -> np.ndarray:
    """The fold of every row (and each group's fold recorded in ``grouping``)."""
    fold_of = assign_folds({k: g.rows for k, g in grouping.groups.items()}, n_folds, seed)
    for k, g in grouping.groups.items():
        g.fold = fold_of[k]
    return np.array([fold_of[grouping.group_of[k]] for k in kernel_ids], dtype=int)


def inner_folds(train: np.ndarray, kernel_ids: np.ndarray, grouping: Grouping, n_folds: int,
                 seed: int) -> np.ndarray | None:
    """Inner grouped folds of the training rows ``train`` (None when they hold fewer than 2 groups)."""
    groups = [grouping.group_of[k] for k in kernel_ids[train]]
    rows: dict[str, int] = {}
    for g in groups:
        rows[g] = rows.get(g, 0) + 1
    if len(rows) < 2:
        return None
    fold_of = assign_folds(rows, min(n_folds, len(rows)), seed)
    return np.array([fold_of[g] for g in groups], dtype=int)


# ---------------------------------------------------------------------------------------------
# the models, fitted per fold


class Fitter(abc.ABC):
    """One model of the evaluation: prepared once on the whole frame, then fitted on the rows
    ``train`` and predicting the rows ``test`` (row positions) for each fold."""

    name = "model"
    #: whether fit_predict uses its training rows (a model that does not can be scored without folds)
    trains = True

    def prepare(self, frame: pd.DataFrame) -> None:
        self.frame = frame

    @abc.abstractmethod
    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        """Predicted time (us) of the rows ``test`` by the model fitted on the rows ``train``."""


@dataclass
class DeviceProfiles:
    """The profile of each device a frame's rows were measured on (the ``device`` column): one
    profile for every row (``default``), or one per device name (``by_device``, with or without a
    ``kt:`` prefix), the default for the rest."""

    default: DeviceProfile | None = None
    by_device: dict[str, DeviceProfile] = field(default_factory=dict)

    @classmethod
    def of(cls, profile: DeviceProfile | DeviceProfiles) -> DeviceProfiles:
        return profile if isinstance(profile, DeviceProfiles) else cls(default=profile)

    def single(self) -> DeviceProfile | None:
        """The one profile when every device has it (None when devices have their own)."""
        return self.default if not self.by_device else None

    def for_device(self, device: str) -> DeviceProfile:
        d = str(device)
        for key in (d, d[3:] if d.startswith("kt:") else f"kt:{d}"):
            if key in self.by_device:
                return self.by_device[key]
        if self.default is None:
            raise KeyError(device)
        return self.default

    def row_blocks(self, frame: pd.DataFrame) -> list[tuple[DeviceProfile, np.ndarray]]:
        """(profile, row positions) blocks covering the frame, in the order of first appearance."""
        single = self.single()
        if single is not None or "device" not in frame.columns:
            assert self.default is not None
            return [(single or self.default, np.arange(len(frame)))]
        devices = frame["device"].astype(str).to_numpy()
        out: dict[int, tuple[DeviceProfile, list[np.ndarray]]] = {}
        for d in pd.unique(devices):
            prof = self.for_device(d)
            out.setdefault(id(prof), (prof, []))[1].append(np.flatnonzero(devices == d))
        return [(prof, np.sort(np.concatenate(idx))) for prof, idx in out.values()]

    def describe(self) -> str:
        if not self.by_device:
            return f"{self.default.device.name}" if self.default else "none"
        return ", ".join(f"{d}: {p.device.name}" for d, p in sorted(self.by_device.items()))


class AnalyticalFitter(Fitter):
    """The analytical model: nothing fitted, every row predicted once (with its device's profile)."""

    name = "analytical"
    trains = False

    def __init__(self, profile: DeviceProfile | DeviceProfiles, analysis_dirs: Sequence[str] = ()) -> None:
        self.profiles = DeviceProfiles.of(profile)
        self.analysis_dirs = tuple(analysis_dirs)
        single = self.profiles.single()
        self.model = AnalyticalModel(single, analysis_dirs=self.analysis_dirs) if single is not None else None

    def prepare(self, frame: pd.DataFrame) -> None:
        n = len(frame)
        self.pred = np.full(n, np.nan)
        self.bound = np.full(n, "none", dtype=object)
        self.parts: dict[str, np.ndarray] = {}
        self.energy = np.full(n, np.nan)
        explanation: list[dict[str, Any]] = [{} for _ in range(n)]
        for prof, idx in self.profiles.row_blocks(frame):
            model = self.model if self.model is not None else AnalyticalModel(prof, analysis_dirs=self.analysis_dirs)
            sub = frame if len(idx) == n else frame.iloc[idx].reset_index(drop=True)
            p = model.predict(sub)
            self.pred[idx] = p.time_us
            if getattr(p, "energy_j", None) is not None:
                self.energy[idx] = np.asarray(p.energy_j, dtype=np.float64)
            for i, e in zip(idx, p.explanation):
                explanation[int(i)] = e
        self.bound = np.array([str(e.get("bound", "none")) for e in explanation], dtype=object)
        for i, e in enumerate(explanation):
            for k, v in (e.get("time_parts_us") or {}).items():
                self.parts.setdefault(k, np.full(n, np.nan))[i] = float(v)
        self.balance = analytical_balance(explanation)
        self.frame_rows = n
        failed = int(np.isnan(self.pred).sum())
        if failed:
            log.warning("the analytical model has no prediction for %d row(s) (the static analysis failed, or the "
                        "device cannot run them: see their explanations)", failed)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        return np.asarray(self.pred[test], dtype=np.float64)


def analytical_of(fitters: Mapping[str, Fitter], profile: DeviceProfile | DeviceProfiles,
                  frame: pd.DataFrame, analysis_dirs: Sequence[str] = ()) -> AnalyticalFitter:
    """The evaluation's analytical fitter, prepared on ``frame``; one made for the purpose when the
    analytical model is not among the models evaluated (its bounds and balances are inputs of the
    interval bins and the few-shot shape correction of every model)."""
    an = fitters.get("analytical")
    if isinstance(an, AnalyticalFitter) and getattr(an, "frame_rows", None) == len(frame):
        return an
    an = AnalyticalFitter(profile, analysis_dirs)
    an.prepare(frame)
    return an


def device_tables(frame: pd.DataFrame, profiles: DeviceProfiles,
                  analysis_dirs: Sequence[str] = ()) -> pd.DataFrame:
    """The tabular model's table of every row, each device's rows built with its own profile (so the
    device columns of each row are its device's)."""
    blocks = profiles.row_blocks(frame)
    if len(blocks) == 1:
        return build_table(frame, blocks[0][0], analysis_dirs)
    parts = []
    for prof, idx in blocks:
        t = build_table(frame.iloc[idx].reset_index(drop=True), prof, analysis_dirs)
        parts.append(t.set_axis(idx, axis=0))
    return pd.concat(parts).sort_index().reset_index(drop=True)


class TabularFitter(Fitter):
    """The tabular model: its table is built once for the whole dataset and sliced per fold.

    ``transfer_rows`` (:func:`models.tabular.transfer_rows`): more measured rows for the
    configuration-transfer table, e.g. the rows of the datasets that were not sampled; each fold
    uses only those of its training rows' devices and problems, so a held-out device's or kernel's
    measurements never reach the fold's model."""

    name = "tabular"

    def __init__(self, profile: DeviceProfile | DeviceProfiles, seed: int = 0, analysis_dirs: Sequence[str] = (),
                 features: Sequence[str] | None = None, residual: bool = True, transfer: bool = True,
                 transfer_rows: pd.DataFrame | None = None, split: bool = True, seeds: int | None = None) -> None:
        self.profiles = DeviceProfiles.of(profile)
        self.profile = self.profiles.default or next(iter(self.profiles.by_device.values()))
        self.seed = seed
        #: boosters per booster of the time head (``train.tabular.fit_tabular``; None: its default)
        self.seeds = seeds
        self.analysis_dirs = tuple(analysis_dirs)
        self.features = None if features is None else list(features)
        self.residual = residual
        self.transfer = transfer
        self.transfer_rows = transfer_rows
        #: split the residual into a level and a shape (``train.tabular.fit_tabular``)
        self.split = split

    def prepare(self, frame: pd.DataFrame) -> None:
        self.table = device_tables(frame, self.profiles, self.analysis_dirs)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        tr = self.table.iloc[train].reset_index(drop=True)
        extra = None
        if self.transfer and self.transfer_rows is not None and "xfer_device" in tr.columns:
            ref = self.transfer_rows
            keep = ref["xfer_device"].isin(set(tr["xfer_device"])) & ref["xfer_problem"].isin(set(tr["xfer_problem"]))
            extra = ref.loc[keep.to_numpy()]
        model = fit_tabular(tr, self.profile, target="time", seed=self.seed, features=self.features,
                            residual=self.residual, transfer=self.transfer, transfer_rows=extra, split=self.split,
                            seeds=self.seeds)
        return np.asarray(model.predict_table(self.table.iloc[test].reset_index(drop=True)).time_us,
                          dtype=np.float64)


class SavedFitter(Fitter):
    """A saved learned model (``kernelcast train --out DIR``, tabular or CodeGen), as it is: nothing
    fitted, every row predicted once, with what ``kernelcast predict`` gives it: a model trained on
    several devices (the bundled GPU model) predicts each device's rows with that device's profile,
    any other model with the profile saved with it; a tabular model reads the static analyses from
    ``analysis_dirs`` as the analytical model does."""

    name = "saved"
    trains = False

    def __init__(self, model_dir: str, profile: DeviceProfile | DeviceProfiles | None = None,
                 analysis_dirs: Sequence[str] = ()) -> None:
        self.model_dir = model_dir
        self.model, _ = load_learned(model_dir)        # a damaged model fails here, before any work
        self.profiles = DeviceProfiles.of(profile) if profile is not None else None
        self.analysis_dirs = tuple(analysis_dirs)

    def prepare(self, frame: pd.DataFrame) -> None:
        n = len(frame)
        self.pred = np.full(n, np.nan)
        multi = self.profiles is not None and is_multi_device(self.model)
        blocks = self.profiles.row_blocks(frame) if multi and self.profiles is not None else [(None, np.arange(n))]
        for prof, idx in blocks:
            model = with_profile(self.model, prof) if prof is not None else self.model
            sub = frame if len(idx) == n else frame.iloc[idx].reset_index(drop=True)
            if isinstance(model, TabularPredictor):
                p = model.predict_table(build_table(sub, model.profile, self.analysis_dirs))
            else:
                p = model.predict(sub)
            self.pred[idx] = np.asarray(p.time_us, dtype=np.float64)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        return np.asarray(self.pred[test], dtype=np.float64)


class CodegenFitter(Fitter):
    """The CodeGen regression model (efficient mode: the residual over the analytical model of the
    profile, with the feature table in the input), trained on each fold's rows from scratch or from
    a pretrained backbone (``base``). Each fit holds out kernel groups of its training rows for
    early stopping and model selection (``train.loop``); the test fold is never seen."""

    name = "codegen"

    def __init__(self, profile: DeviceProfile, seed: int = 0, epochs: int = 20, base: str | None = None,
                 max_minutes: float | None = None, threads: int | None = 1) -> None:
        self.profile, self.seed, self.epochs, self.base = profile, seed, epochs, base
        self.max_minutes, self.threads = max_minutes, threads
        self.runs: list[dict[str, Any]] = []

    def prepare(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self.table = build_table(frame, self.profile)

    def fit_predict(self, train: np.ndarray, test: np.ndarray) -> np.ndarray:
        from kernelcast.train.loop import TrainOptions, fit_frame  # deferred: imports torch

        opts = TrainOptions(mode="efficient", epochs=self.epochs, seed=self.seed, resume=False, progress=False,
                            profile=self.profile, base=self.base, max_minutes=self.max_minutes,
                            threads=self.threads)
        with tempfile.TemporaryDirectory(prefix="kernelcast-evaluate-codegen-") as d:
            res = fit_frame(self.frame.iloc[train].reset_index(drop=True), out_dir=d, options=opts,
                            table=self.table.iloc[train].reset_index(drop=True))
            pred = res.predictor.predict(self.frame.iloc[test].reset_index(drop=True),
                                         table=self.table.iloc[test].reset_index(drop=True))
        t = res.metrics["training"]
        self.runs.append({"train_rows": len(train), "test_rows": len(test), "stopped": res.stopped,
                          "epochs": t["epochs_completed"], "steps": t["steps"], "best_epoch": t["best_epoch"],
                          "best_step": t["best_step"], "final_lr": t["final_lr"], "seconds": t["seconds"],
                          "validation_kernels": res.metrics["data"]["val_kernels"],
                          "validation_split": res.metrics["split"].get("by")})
        return np.asarray(pred.time_us, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# splits and the out-of-fold loop


def kernel_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel of ``frame`` (``kernel_id``, ``kernel_name``, ``kernel_origin``,
    ``source``, ``rows``), the input of :func:`build_groups`."""
    kf = frame.assign(kernel_id=frame["kernel_id"].astype(str).to_numpy())
    if "kernel_origin" not in kf.columns:
        kf["kernel_origin"] = None
    return (kf.groupby("kernel_id", sort=True)
            .agg(kernel_name=("kernel_name", "first"), kernel_origin=("kernel_origin", "first"),
                 source=("source", "first"), rows=("kernel_name", "size")).reset_index())


def devices_of(frame: pd.DataFrame) -> np.ndarray:
    """The device of every row (``device``; one unnamed device when the frame has no such column)."""
    if "device" not in frame.columns:
        return np.full(len(frame), "device", dtype=object)
    return frame["device"].fillna("unknown").astype(str).to_numpy()


@dataclass
class Splits:
    """The test fold of every row and, per fold, the rows a model is fitted on. ``kernel`` and
    ``gpu`` splits train on every other fold; a ``both`` split also leaves out the rows that share
    the test fold's kernel groups or its devices."""

    by: str
    folds: np.ndarray                    # test fold of every row
    n: int
    kernel_fold: np.ndarray              # fold of the row's kernel group (by kernel / both)
    device_fold: np.ndarray              # fold of the row's device (by gpu / both)
    labels: list[str]

    def train(self, f: int) -> np.ndarray:
        if self.by == "both":
            kf, df = divmod(f, int(self.device_fold.max()) + 1)
            return np.flatnonzero((self.kernel_fold != kf) & (self.device_fold != df))
        return np.flatnonzero(self.folds != f)

    def test(self, f: int) -> np.ndarray:
        return np.flatnonzero(self.folds == f)


def make_splits(frame: pd.DataFrame, grouping: Grouping, n_folds: int, seed: int, by: str = "kernel") -> Splits:
    """Folds that hold out kernel groups (``kernel``: ``n_folds`` folds balanced by rows), devices
    (``gpu``: ``min(n_folds, devices)`` folds of whole devices) or both (``both``: every pair of a
    kernel-group fold and a device fold is a test fold, fitted on the rows of neither)."""
    if by not in GROUP_BY:
        raise ValueError(f"group by {by!r}")
    kernel_ids = frame["kernel_id"].astype(str).to_numpy()
    devices = devices_of(frame)
    n_dev = len(pd.unique(devices))
    zeros = np.zeros(len(frame), dtype=int)
    if by == "kernel":
        folds = row_folds(kernel_ids, grouping, n_folds, seed)
        return Splits(by, folds, n_folds, folds, zeros, [f"kernel fold {f}" for f in range(n_folds)])
    if n_dev < 2:
        raise DataError(f"--group-by {by} holds out devices, and the data has one ({devices[0]}): give datasets of "
                        f"several devices, or --group-by kernel")
    rows_of = {d: int((devices == d).sum()) for d in pd.unique(devices)}
    dev_fold_of = assign_folds(rows_of, min(n_folds, n_dev), seed)
    dfold = np.array([dev_fold_of[d] for d in devices], dtype=int)
    nd = int(dfold.max()) + 1
    if by == "gpu":
        labels = [", ".join(sorted(d for d, f in dev_fold_of.items() if f == i)) for i in range(nd)]
        return Splits(by, dfold, nd, zeros, dfold, labels)
    kfold = row_folds(kernel_ids, grouping, n_folds, seed)
    nk = int(kfold.max()) + 1
    folds = kfold * nd + dfold
    labels = [f"kernel fold {k} on {', '.join(sorted(d for d, f in dev_fold_of.items() if f == j))}"
              for k in range(nk) for j in range(nd)]
    return Splits(by, folds, nk * nd, kfold, dfold, labels)


def oof_predictions(fitters: Mapping[str, Fitter], splits: Splits, say: Progress,
                    seconds: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """Every row's out-of-fold prediction of each (prepared) fitter; a fitter that does not train
    predicts every row once. A fold with no training row leaves its rows without a prediction of
    the models that train."""
    n = len(splits.folds)
    oof = {name: np.full(n, np.nan) for name in fitters}
    for f in range(splits.n):
        test, train = splits.test(f), splits.train(f)
        if not len(test):
            continue
        for name, ft in fitters.items():
            if ft.trains and not len(train):
                say(f"fold {f + 1}/{splits.n}: {name}: no training row ({splits.labels[f]}); left unpredicted")
                continue
            t0 = time.perf_counter()
            say(f"fold {f + 1}/{splits.n}: {name} ({len(train)} training rows, {len(test)} test rows)")
            oof[name][test] = ft.fit_predict(train, test)
            if seconds is not None:
                seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
    return oof


# ---------------------------------------------------------------------------------------------
# figures


def row_metrics(pred: np.ndarray, true: np.ndarray, kernels: np.ndarray) -> dict[str, Any]:
    """The zero-shot figures of one model's predictions."""
    valid = np.isfinite(pred) & np.isfinite(true) & (true > 0)
    km_mean, km_median = per_kernel_mape(pred[valid], true[valid], kernels[valid])
    return {
        "rows": int(valid.sum()),
        "rows_without_prediction": int((~np.isfinite(pred)).sum()),
        "kernels": int(len(np.unique(kernels[valid]))),
        "mape": mape(pred, true),
        "median_ape": median_ape(pred, true),
        "p90_ape": p90_ape(pred, true),
        "median_abs_log2": median_abs_log2(pred, true),
        "bias_log2": log2_bias(pred, true),
        "mse_log2": mean_sq_log2(pred, true),
        "within_2x_pct": 100.0 * within_factor(pred, true, 2.0),
        "kernel_mape_mean": km_mean,
        "kernel_mape_median": km_median,
    }


def on_device(keys: Any, devices: np.ndarray, fmt: str = "{d}|{k}") -> np.ndarray:
    """``keys`` made per device (``fmt`` of the device ``d`` and the key ``k``) when ``devices``
    holds several; as they are on one device. A problem, a tuning group or a few-shot kernel is
    measured on one device."""
    if len(pd.unique(devices)) <= 1:
        return np.asarray(keys, dtype=object)
    return np.array([fmt.format(d=d, k=k) for d, k in zip(devices, keys)], dtype=object)


def problem_keys(frame: pd.DataFrame) -> np.ndarray:
    """One key per row naming its problem: the kernel plus ``problem_id`` where the row has one
    (dataset schema 2), else the kernel, the global size and the argument sizes (buffer element counts and scalar
    values; local-memory arguments belong to the configuration, not the problem); in a frame of
    several devices, on the row's device."""
    pids = frame["problem_id"] if "problem_id" in frame.columns else pd.Series([None] * len(frame), index=frame.index)
    out = []
    for k, g, a, pid in zip(frame["kernel_id"], frame["gsize"], frame["args"], pids):
        if isinstance(pid, str) and pid:        # schema 2: the row's own problem id
            out.append(f"{k}|{pid}")
            continue
        args = problem_args(decode_args(a))
        out.append(f"{k}|{decode_sizes(g)}|{args}")
    return on_device(out, devices_of(frame))


def global_items(frame: pd.DataFrame) -> np.ndarray:
    if "global_items" in frame.columns and frame["global_items"].notna().all():
        return frame["global_items"].to_numpy(dtype=np.float64)
    return np.array([float(np.prod(decode_sizes(g) or (1,))) for g in frame["gsize"]])


@dataclass
class TuningBasis:
    basis: str                  # "problem" or "per_work_item"
    groups: np.ndarray          # group label per row
    scale: np.ndarray           # times are divided by this before comparing (1, or global work-items)
    problem_groups: int         # groups of >= 2 configurations of one problem
    problem_kernels: int        # kernels with such a group
    kernels: int
    problems: np.ndarray        # the problem key of every row (whichever basis is used)


def tuning_basis(frame: pd.DataFrame) -> TuningBasis:
    """Groups of configurations of one problem when at least a quarter of the kernels have one with
    two or more distinct launch configurations (local sizes); else each kernel's configurations
    compared per work-item (on each device apart, in a frame of several). A problem measured twice
    with the same configuration (e.g. under two argument selections that gave the same sizes) is
    no tuning question: its rows are left out of the problem groups."""
    raw = problem_keys(frame)
    kern = frame["kernel_id"].to_numpy()
    lsizes = [str(decode_sizes(v)) for v in frame["lsize"]] if "lsize" in frame.columns else [""] * len(frame)
    configs = pd.DataFrame({"key": raw, "lsize": lsizes}).groupby("key")["lsize"].nunique()
    multi = set(configs[configs >= 2].index)
    keys = np.array([k if k in multi else f"{k}#{i}" for i, k in enumerate(raw)], dtype=object)
    n_kernels = int(len(np.unique(kern)))
    p_kernels = int(len({k for k, key in zip(kern, keys) if key in multi}))
    if multi and p_kernels * 4 >= n_kernels:
        return TuningBasis("problem", keys, np.ones(len(frame)), len(multi), p_kernels, n_kernels, keys)
    return TuningBasis("per_work_item", on_device(kern, devices_of(frame)), global_items(frame), len(multi),
                       p_kernels, n_kernels, keys)

"""Configuration transfer: the same configuration's measured time on other devices, as features.

A tuning space is measured configuration by configuration, and the public tuning caches measure the
*same* configurations of a kernel on several GPUs. How a configuration ranks among its kernel's
configurations carries over between devices far better than any static feature predicts it, so the
tabular model keeps, per configuration, the measured times of its training devices
(:class:`XferTable`) and gives every row the times of that configuration on the *other* devices.

Identities (:func:`xfer_keys`, computed from the columns both dataset rows and prediction rows have,
so a prediction row of a measured configuration finds it):

* the **kernel**: its name and the SHA-1 of its source text;
* the **problem**: the kernel plus its non-local arguments (each buffer's name and element count,
  each scalar's name and value: ``kernelcast.columns.problem_args``), as ``train.oof.problem_keys``
  names a problem without a problem id;
* the **configuration**: the problem plus the ``-D`` definitions of the build options (sorted; a
  Kernel Tuner import's tunable parameters, so this is its ``kt_key`` in other words), the global
  and the local size, and the local-memory arguments.

The **device** is the profile's device name (``xfer_device``, set by ``build_table``).

Per device and problem the table stores the *level* (median log2 time over that device's rows of the
problem) and, per configuration, its *relative* log2 time (log2 time minus that level; duplicates of
one configuration on one device: their median). A row of device ``d`` gets (:meth:`XferTable.features`):

* ``xfer_rel``: the weighted mean of the configuration's relative log2 times over the devices
  ``e != d`` that have it (leave-own-device-out: a training row never sees its own device, which
  would leak its target; at prediction time a device of the table is left out the same way);
* ``xfer_devices``: how many devices it came from (0 where none: the other columns are NaN);
* ``xfer_abs_log2``: the weighted mean of the absolute estimates ``relative_e + level_e +
  log2(spec_e / spec_d)``, where ``log2(spec_e / spec_d)`` is the mean of the log2 ratios of DRAM
  bandwidth and of peak FP32 rate that both profiles state (devices without either are left out;
  NaN when none is left): a time scales inversely with the rate that bounds it;
* ``xfer_resid``: ``xfer_abs_log2 - log2_analytical_us``, the other devices' estimate of exactly
  the residual the model learns;
* ``xfer_rel_an``: ``xfer_rel - log2_analytical_us``: the same residual up to one constant per
  device and problem (its level), without any spec ratio, so that a tree ranks a problem's
  configurations by it on a device whose profile states neither rate; the constant is left to the
  level features (device columns, analytical terms);
* ``xfer_shape``: the weighted mean over the same devices of the configuration's *residual shape*
  there: its relative log2 time minus its relative log2 *analytical* time on that device (the
  analytical model's log2 time of the configuration with that device's profile, minus its median
  over that device's configurations of the problem). It is the other devices' estimate of exactly
  the shape the tabular model learns (``log2(measured / analytical)`` minus its median over the
  problem), with no constant left per device or problem. It needs the analytical times of the
  table's rows (``log2_analytical_us`` among the rows :meth:`XferTable.from_rows` is given); NaN
  where none of the other devices has one for the configuration.

Weights (:func:`device_weight`) come from the profiles' device columns alone, fixed before any data:
:data:`FAMILY_WEIGHT` for a device of the same class, vendor and warp width (an architecture family:
NVIDIA warps of 32, AMD CDNA wavefronts of 64, AMD RDNA wavefronts of 32), :data:`VENDOR_WEIGHT`
for a device of the same class and vendor with another warp width (CDNA for RDNA), 1 for another
device of the same class, :data:`OTHER_CLASS_WEIGHT` for a device of another class (a CPU for a
GPU). Nothing is fitted on the device predicted. A configuration measured on no other device, or a
kernel seen on no other device, has NaN features (LightGBM routes NaN down its own branch).

Saved as ``xfer.json`` next to ``tabular.json`` (:meth:`XferTable.save`): the devices with their
device columns and, per problem (keyed by a 16-hex-digit hash), its level on each device, its
configurations (keyed the same way) with one relative value per device (null where not measured)
and, for the configurations with an analytical time, their relative analytical log2 times per
device (``analytical``), all in log2 rounded to :data:`DECIMALS` decimals (0.07 % of a time; the
table is rounded when it is built, so a model predicts the same before and after saving). Version 1
files (before the analytical times) still load; their ``xfer_shape`` is NaN.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernelcast.columns import decode_args, decode_sizes, problem_args
from kernelcast.errors import InputError

#: the saved table (next to ``tabular.json``), its format name and version
XFER_FILE = "xfer.json"
XFER_FORMAT = "kernelcast-config-transfer"
XFER_VERSION = 2
#: the table versions this kernelcast reads (1: without the analytical times)
READABLE_XFER_VERSIONS = (1, 2)
#: feature columns (appended to ``models.tabular.FEATURE_COLUMNS``)
XFER_COLUMNS = ("xfer_rel", "xfer_devices", "xfer_abs_log2", "xfer_resid", "xfer_rel_an", "xfer_shape")
#: the feature columns of models saved before ``xfer_shape`` (they still load)
XFER_COLUMNS_V1 = XFER_COLUMNS[:5]
#: the optional column of :meth:`XferTable.from_rows`' rows with the analytical log2 time
ANALYTICAL_COLUMN = "log2_analytical_us"
#: key columns ``build_table`` passes through (not features)
XFER_KEY_COLUMNS = ("xfer_config", "xfer_problem", "xfer_device")
#: weight of a device of the same class, vendor and warp width as the device predicted
FAMILY_WEIGHT = 16.0
#: weight of a device of the same class and vendor, another warp width (AMD CDNA for RDNA)
VENDOR_WEIGHT = 4.0
#: weight of a device of another class (a CPU's times for a GPU)
OTHER_CLASS_WEIGHT = 0.25
#: the device columns a weight or a spec ratio reads
WEIGHT_COLUMNS = ("dev_class", "dev_vendor", "dev_warp_size")
SPEC_COLUMNS = ("dev_dram_bw_gbs", "dev_peak_fp32_gflops")
#: decimals of the saved log2 values
DECIMALS = 3
_DEFINE = re.compile(r"-D\s*([A-Za-z_]\w*)(?:=(\S*))?")


class XferFormatError(InputError, ValueError):
    """A saved configuration-transfer table this kernelcast cannot read."""


def _hash(*parts: Any) -> str:
    return hashlib.sha1("\x1f".join(str(p) for p in parts).encode("utf-8", "replace")).hexdigest()[:16]


def defines(build_options: Any) -> str:
    """The ``-D`` definitions of a build-options string, sorted (other flags such as ``-I`` dropped)."""
    if not isinstance(build_options, str):
        return ""
    return " ".join(sorted(f"{m.group(1)}={m.group(2) or ''}" for m in _DEFINE.finditer(build_options)))


def xfer_keys(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The problem and configuration key of every row of a dataset or prediction frame (module
    docstring); rows without a source or a kernel name get ``""`` (no transfer)."""
    n = len(frame)
    src = frame["source"].tolist() if "source" in frame.columns else [None] * n
    names = frame["kernel_name"].tolist() if "kernel_name" in frame.columns else [None] * n
    opts = frame["build_options"].tolist() if "build_options" in frame.columns else [""] * n
    gs = frame["gsize"].tolist() if "gsize" in frame.columns else [None] * n
    ls = frame["lsize"].tolist() if "lsize" in frame.columns else [None] * n
    args = frame["args"].tolist() if "args" in frame.columns else [None] * n
    src_hash: dict[str, str] = {}
    problems, configs = [], []
    for s, name, o, g, lsz, a in zip(src, names, opts, gs, ls, args):
        if not isinstance(s, str) or not isinstance(name, str) or not s or not name:
            problems.append("")
            configs.append("")
            continue
        h = src_hash.get(s)
        if h is None:
            h = src_hash[s] = hashlib.sha1(s.encode("utf-8", "replace")).hexdigest()
        decoded = decode_args(a)
        prob = problem_args(decoded)
        local = tuple((x.get("name"), x.get("count")) for x in decoded if x.get("kind") == "local")
        p = _hash(name, h, prob)
        problems.append(p)
        configs.append(_hash(p, defines(o), decode_sizes(g), decode_sizes(lsz), local))
    return np.array(problems, dtype=object), np.array(configs, dtype=object)


def device_weight(target: Mapping[str, float], source: Mapping[str, float]) -> float:
    """The weight of ``source``'s times in the features of a row of ``target`` (device columns of
    both; module docstring). A column either device does not state counts as different."""
    def same(c: str) -> bool:
        a, b = target.get(c, math.nan), source.get(c, math.nan)
        return bool(np.isfinite(a) and np.isfinite(b) and a == b)

    if not same("dev_class"):
        return OTHER_CLASS_WEIGHT
    if not same("dev_vendor"):
        return 1.0
    return FAMILY_WEIGHT if same("dev_warp_size") else VENDOR_WEIGHT


def spec_log2_ratio(target: Mapping[str, float], source: Mapping[str, float]) -> float:
    """Mean over :data:`SPEC_COLUMNS` both devices state of ``log2(source / target)``: what a time
    measured on ``source`` is shifted by to estimate it on ``target``; NaN when none is shared."""
    r = []
    for c in SPEC_COLUMNS:
        a, b = target.get(c, math.nan), source.get(c, math.nan)
        if np.isfinite(a) and np.isfinite(b) and a > 0 and b > 0:
            r.append(math.log2(b / a))
    return float(np.mean(r)) if r else math.nan


@dataclass
class XferTable:
    """Per configuration, the relative log2 times of the devices that measured it (module docstring)."""

    devices: list[str]
    device_columns: dict[str, dict[str, float]]
    #: problem key -> level (median log2 time, us) per device (NaN: not measured there)
    levels: dict[str, np.ndarray] = field(default_factory=dict)
    #: configuration key -> (problem key, relative log2 time per device)
    configs: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    #: configuration key -> relative log2 analytical time per device (the analytical log2 time with
    #: that device's profile minus its median over the device's configurations of the problem; NaN
    #: where the device has no analytical time for it); configurations without any are absent
    analytical: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, rows: pd.DataFrame, device_columns: Mapping[str, Mapping[str, float]]) -> XferTable:
        """The table of measured rows: ``xfer_problem``, ``xfer_config``, ``xfer_device`` and
        ``time_median_us`` (rows without a positive time or a key are skipped), optionally
        :data:`ANALYTICAL_COLUMN` (the row's analytical log2 time with its device's profile; NaN
        where none); ``device_columns`` has the device columns of every device of the rows."""
        t = pd.to_numeric(rows["time_median_us"], errors="coerce").to_numpy(dtype=np.float64) if len(rows) \
            else np.zeros(0)
        ok = np.isfinite(t) & (t > 0) & (rows["xfer_config"].astype(str) != "").to_numpy() if len(rows) \
            else np.zeros(0, dtype=bool)
        a = pd.to_numeric(rows[ANALYTICAL_COLUMN], errors="coerce").to_numpy(dtype=np.float64) \
            if len(rows) and ANALYTICAL_COLUMN in rows.columns else np.full(len(t), np.nan)
        df = pd.DataFrame({"p": rows["xfer_problem"].astype(str).to_numpy()[ok] if len(rows) else [],
                           "c": rows["xfer_config"].astype(str).to_numpy()[ok] if len(rows) else [],
                           "d": rows["xfer_device"].astype(str).to_numpy()[ok] if len(rows) else [],
                           "y": np.log2(t[ok]), "a": a[ok]})
        devices = sorted(pd.unique(df["d"]).tolist())
        missing = [d for d in devices if d not in device_columns]
        if missing:
            raise ValueError(f"no device columns for device(s) {missing}")
        dcols = {d: {c: float(v) for c, v in device_columns[d].items()} for d in devices}
        table = cls(devices, dcols)
        if df.empty:
            return table
        di = {d: i for i, d in enumerate(devices)}
        per = df.groupby(["p", "c", "d"], sort=True)[["y", "a"]].median().reset_index()
        lev = per.groupby(["p", "d"], sort=True)["y"].median()
        # the analytical level: the median over the configurations with an analytical time
        per["la"] = per.groupby(["p", "d"], sort=True)["a"].transform("median")
        # rounded as saved: a model predicts the same before and after saving
        for (p, d), v in lev.items():
            table.levels.setdefault(str(p), np.full(len(devices), np.nan))[di[str(d)]] = round(float(v), DECIMALS)
        for (p, c), g in per.groupby(["p", "c"], sort=True):
            v = np.full(len(devices), np.nan)
            an = np.full(len(devices), np.nan)
            for d, y, ya, la in zip(g["d"], g["y"], g["a"], g["la"]):
                v[di[str(d)]] = round(float(y) - table.levels[str(p)][di[str(d)]], DECIMALS)
                if np.isfinite(ya) and np.isfinite(la):
                    an[di[str(d)]] = round(float(ya) - float(la), DECIMALS)
            table.configs[str(c)] = (str(p), v)
            if np.isfinite(an).any():
                table.analytical[str(c)] = an
        return table

    def features(self, configs: Sequence[Any], devices: Sequence[Any],
                 target_columns: Mapping[str, np.ndarray], log2_analytical: np.ndarray) -> dict[str, np.ndarray]:
        """:data:`XFER_COLUMNS` of rows with configuration keys ``configs`` on ``devices`` (the own
        device is left out), whose device columns are ``target_columns`` (per row arrays of
        :data:`WEIGHT_COLUMNS` and :data:`SPEC_COLUMNS`)."""
        n = len(configs)
        nd = len(self.devices)
        vals = np.full((n, nd), np.nan)
        lev = np.full((n, nd), np.nan)
        anv = np.full((n, nd), np.nan)
        for i, c in enumerate(configs):
            hit = self.configs.get(str(c)) if isinstance(c, str) and c else None
            if hit is not None:
                vals[i] = hit[1]
                lev[i] = self.levels[hit[0]]
                a = self.analytical.get(str(c))
                if a is not None:
                    anv[i] = a
        own = np.array([[str(d) == e for e in self.devices] for d in devices], dtype=bool).reshape(n, nd)
        w = np.zeros((n, nd))
        shift = np.full((n, nd), np.nan)
        # the weights and spec ratios depend on the row's device columns only: once per distinct device
        keys = np.stack([np.asarray(target_columns[c], dtype=np.float64) for c in WEIGHT_COLUMNS + SPEC_COLUMNS],
                        axis=1) if n else np.zeros((0, len(WEIGHT_COLUMNS + SPEC_COLUMNS)))
        uniq, inv = np.unique(np.nan_to_num(keys, nan=-1.0), axis=0, return_inverse=True) if n else (keys, [])
        inv = np.asarray(inv).reshape(-1)
        for u in range(len(uniq)):
            rows = inv == u
            tgt = {c: float(keys[np.flatnonzero(rows)[0], j]) for j, c in enumerate(WEIGHT_COLUMNS + SPEC_COLUMNS)}
            for k, e in enumerate(self.devices):
                w[rows, k] = device_weight(tgt, self.device_columns[e])
                shift[rows, k] = spec_log2_ratio(tgt, self.device_columns[e])
        have = np.isfinite(vals) & ~own
        wh = np.where(have, w, 0.0)
        sw = wh.sum(axis=1)
        rel = np.where(sw > 0, (np.where(have, vals, 0.0) * wh).sum(axis=1) / np.where(sw > 0, sw, 1.0), np.nan)
        absv = vals + lev + shift
        ha = have & np.isfinite(absv)
        wa = np.where(ha, w, 0.0)
        swa = wa.sum(axis=1)
        ab = np.where(swa > 0, (np.where(ha, absv, 0.0) * wa).sum(axis=1) / np.where(swa > 0, swa, 1.0), np.nan)
        hs = have & np.isfinite(anv)
        ws = np.where(hs, w, 0.0)
        sws = ws.sum(axis=1)
        shape = np.where(sws > 0, (np.where(hs, vals - anv, 0.0) * ws).sum(axis=1) / np.where(sws > 0, sws, 1.0),
                         np.nan)
        la = np.asarray(log2_analytical, dtype=np.float64)
        return {"xfer_rel": rel, "xfer_devices": have.sum(axis=1).astype(np.float64), "xfer_abs_log2": ab,
                "xfer_resid": np.where(np.isfinite(ab) & np.isfinite(la), ab - la, np.nan),
                "xfer_rel_an": np.where(np.isfinite(rel) & np.isfinite(la), rel - la, np.nan),
                "xfer_shape": shape}

    # -- saving and loading -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        def vec(v: np.ndarray) -> list[float | None]:
            return [None if not np.isfinite(x) else round(float(x), DECIMALS) for x in v]

        problems: dict[str, dict[str, Any]] = {p: {"levels": vec(v), "configs": {}} for p, v in self.levels.items()}
        for c, (p, v) in self.configs.items():
            problems[p]["configs"][c] = vec(v)
            a = self.analytical.get(c)
            if a is not None:
                problems[p].setdefault("analytical", {})[c] = vec(a)
        return {"format": XFER_FORMAT, "version": XFER_VERSION, "devices": self.devices,
                "device_columns": {d: {c: (v if np.isfinite(v) else None) for c, v in cols.items()}
                                   for d, cols in self.device_columns.items()},
                "problems": problems}

    def save(self, directory: str | os.PathLike[str]) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        p = d / XFER_FILE
        tmp = d / (XFER_FILE + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), separators=(",", ":")) + "\n", encoding="utf-8")
        os.replace(tmp, p)
        return p

    @classmethod
    def from_dict(cls, data: Any, where: str = XFER_FILE) -> XferTable:
        if not isinstance(data, dict) or data.get("format") != XFER_FORMAT:
            raise XferFormatError(f"{where}: not a {XFER_FORMAT} table")
        if data.get("version") not in READABLE_XFER_VERSIONS:
            raise XferFormatError(f"{where}: {XFER_FORMAT} version {data.get('version')}; this kernelcast reads "
                                  f"versions {READABLE_XFER_VERSIONS[0]}-{XFER_VERSION}")
        try:
            devices = [str(d) for d in data["devices"]]
            nd = len(devices)

            def arr(v: Any) -> np.ndarray:
                a = np.array([np.nan if x is None else float(x) for x in v], dtype=np.float64)
                if len(a) != nd:
                    raise ValueError(f"{len(a)} values for {nd} devices")
                return a

            dcols = {str(d): {str(c): (math.nan if v is None else float(v)) for c, v in cols.items()}
                     for d, cols in data["device_columns"].items()}
            if set(dcols) != set(devices):
                raise ValueError("device columns do not match the devices")
            levels: dict[str, np.ndarray] = {}
            configs: dict[str, tuple[str, np.ndarray]] = {}
            analytical: dict[str, np.ndarray] = {}
            for p, prob in data["problems"].items():
                levels[str(p)] = arr(prob["levels"])
                for c, v in prob["configs"].items():
                    configs[str(c)] = (str(p), arr(v))
                for c, v in (prob.get("analytical") or {}).items():
                    if str(c) not in configs or configs[str(c)][0] != str(p):
                        raise ValueError(f"analytical times of configuration {c} not in problem {p}")
                    analytical[str(c)] = arr(v)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise XferFormatError(f"{where}: cannot read: {e!r}") from None
        return cls(devices, dcols, levels, configs, analytical)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> XferTable | None:
        """The table saved in ``directory`` (``None`` when it has none)."""
        p = Path(directory) / XFER_FILE
        if not p.is_file():
            return None
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise XferFormatError(f"{p}: cannot read: {e}") from None
        return cls.from_dict(data, str(p))

"""Accuracy and speed of the analytical model on a dataset measured on this machine.

    python bench/analytical.py --data DATASET [--profile PROFILE.json]

Prints, over the ok rows of the dataset (every kernel measured across local and global sizes):
MAPE and median APE of the predicted time, the mean Spearman rho of predicted vs measured time
across each kernel's configurations, the share of kernels whose predicted best configuration
(fastest per work-item, since sizes differ) is within 5 % of the measured best, and predictions
per second of the vectorized model, and whether the rows that are memory-bound by measurement
(their bytes at >= 1/2 of the calibrated bandwidth) are called memory-bound. The profile defaults
to this device's cached calibration.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from kernelcast.metrics import spearman
from kernelcast.options import Parser


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.analytical", description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--profile")
    args = ap.parse_args(argv)
    from kernelcast.calib.local import resolve_profile
    from kernelcast.datagen.corpus_store import read_corpus
    from kernelcast.datagen.dataset import read_dataset
    from kernelcast.models.analytical import AnalyticalModel, config_env

    df = read_dataset(args.data)
    df = df[(df["pass"] != "validity") & (df["status"] == "ok")].copy()
    kernels = {k.id: k for k in read_corpus(f"{args.data}/kernels")}
    df = df[df["kernel_id"].isin(kernels)]
    df["source"] = df["kernel_id"].map(lambda i: kernels[i].source)
    df["build_options"] = df["kernel_id"].map(lambda i: kernels[i].build_options)
    profile = resolve_profile(args.profile)
    model = AnalyticalModel(profile)
    t0 = time.perf_counter()
    pred = model.predict(df)
    t_all = time.perf_counter() - t0
    y, p = df["time_median_us"].to_numpy(float), pred.time_us
    ok = np.isfinite(p) & (y > 0)
    ape = np.abs(p[ok] - y[ok]) / y[ok]
    df["pred"] = p
    rhos, within = [], []
    for _, g in df[ok].groupby("kernel_id"):
        if len(g) < 3:
            continue
        rhos.append(spearman(g["pred"].to_numpy(), g["time_median_us"].to_numpy(), min_points=3))
        per_item_m = g["time_median_us"] / g["global_items"]
        per_item_p = g["pred"] / g["global_items"]
        best = per_item_m.min()
        within.append(per_item_m.loc[per_item_p.idxmin()] <= 1.05 * best)
    # explanations that hold: a row whose measured time is what its bytes take at the calibrated
    # bandwidth (achieved >= half of it, time well above the launch) is memory-bound by measurement;
    # the model should say "memory" there
    ex = pred.explanation
    fetched = np.array([e.get("fetched_bytes", np.nan) for e in ex], dtype=float)
    bw = np.array([e.get("bandwidth_GBps", np.nan) for e in ex], dtype=float) * 1e9
    bound = np.array([e.get("bound", "") for e in ex])
    achieved = fetched / np.maximum(y * 1e-6, 1e-12)
    mem_meas = ok & (achieved >= 0.5 * bw) & (y >= 20.0)
    said_mem = bound == "memory"
    # throughput of the vectorized core on one kernel, 200k configurations
    k0 = df["kernel_id"].value_counts().index[0]
    feats = model.features(kernels[k0].source, kernels[k0].name, kernels[k0].build_options)
    row = df[df["kernel_id"] == k0].iloc[0]
    base = config_env(list(row["gsize"]), list(row["lsize"]), __import__("json").loads(row["args"]))
    n = 200_000
    rng = np.random.default_rng(0)
    env = {k: np.full(n, v) for k, v in base.items()}
    env["lsize0"] = rng.integers(1, 33, n).astype(float) * 32
    env["ngroups0"] = rng.integers(1, 4096, n).astype(float)
    env["gsize0"] = env["lsize0"] * env["ngroups0"]
    t1 = time.perf_counter()
    model.evaluate(feats, env)
    t_vec = time.perf_counter() - t1
    print(f"dataset {args.data}: {ok.sum()} ok rows of {df['kernel_id'].nunique()} kernels; "
          f"profile {profile.device.name} ({profile.kind})")
    print(f"time MAPE            {ape.mean() * 100:8.1f} %")
    print(f"time median APE      {np.median(ape) * 100:8.1f} %")
    r = np.log2(p[ok] / y[ok])
    print(f"log2(pred/measured)  p10 {np.percentile(r, 10):+.2f}  median {np.median(r):+.2f}  p90 "
          f"{np.percentile(r, 90):+.2f}")
    print(f"mean Spearman rho    {np.nanmean(rhos):8.3f}   over {len(rhos)} kernels (>= 3 configurations)")
    print(f"best config within 5% of measured best (per work-item): {np.mean(within) * 100:.1f} % of "
          f"{len(within)} kernels")
    print(f"memory-bound check   {int((mem_meas & said_mem).sum())} of {int(mem_meas.sum())} rows whose measured time "
          f"moves their bytes at >= 1/2 of the calibrated bandwidth (and >= 20 us) are called memory-bound; "
          f"{int((said_mem & ok & (achieved < 0.25 * bw) & (y >= 20.0)).sum())} of "
          f"{int((said_mem & ok & (y >= 20.0)).sum())} rows called memory-bound achieve < 1/4 of it")
    print(f"predict() end to end {len(df) / t_all:10.0f} rows/s (static analysis per kernel included)")
    print(f"vectorized core      {n / t_vec:10.0f} configurations/s (one kernel, {n} configurations)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

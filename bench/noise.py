"""Noise benchmark: how trustworthy are datagen's times on this machine?

Measures the same configurations (bundled kernels, datagen's sampler, simple arguments) in two
passes, under each timing policy interleaved configuration by configuration (so both see the same
machine), and prints per policy:

- the CV distribution: share of rows with CV <= 5 %, CV quartiles;
- second-run reproduction: share of configurations whose median in pass 2 is within 3 % of pass 1;
- the machine during the windows (mean load average, other processes' share of the CPUs);
- agreement with one-launch samples: the median over configurations of this policy's median time
  over the ``legacy`` policy's (a grouped sample is a per-launch time, so ~1.0).

Policies: ``legacy`` (one launch per sample, no re-measurement: datagen's former policy),
``grouped`` (short kernels sampled as groups of launches, :class:`instrument.runner.TimingPolicy`
``group_us``), ``grouped+remeasure`` (and a configuration with CV > 5 % is measured again at the
end of the pass, interleaved with the others, keeping the measurement with the lower CV, as
datagen does).

    PYTHONPATH=. python -m kernelcast.bench.noise --kernels 12 --configs 6 [--json]
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from kernelcast.datagen.generate import DatagenOptions, kernel_rng, needs_remeasure
from kernelcast.datagen.sampler import DeviceLimits, sample_configs
from kernelcast.instrument.runner import TimingPolicy

from kernelcast.options import Parser
from kernelcast.schema import Kernel, LaunchConfig, Measurement

POLICIES = ("legacy", "grouped", "grouped+remeasure")


@dataclass
class Cell:
    """One configuration under one policy: the measurement of each pass."""

    passes: dict[int, Measurement] = field(default_factory=dict)


def _policy(name: str) -> TimingPolicy:
    base = DatagenOptions().timing
    return replace(base, group_us=0.0) if name == "legacy" else base


def _better(a: Measurement, b: Measurement) -> Measurement:
    if b.status != "ok" or b.time is None:
        return a
    if a.status != "ok" or a.time is None:
        return b
    return b if b.time.cv < a.time.cv else a


def bundled_kernels(limit: int) -> list[Kernel]:
    from kernelcast.datagen.corpus import ingest_to
    from kernelcast.datagen.corpus_store import read_corpus

    tmp = Path(tempfile.mkdtemp(prefix="kernelcast-noise-"))
    ingest_to(tmp, [Path(__file__).resolve().parent.parent / "datagen" / "bundled"], compile_fn=None)
    ks = sorted(read_corpus(tmp), key=lambda k: k.id)
    return ks[:limit]


def run(kernels: int, configs: int, policies: tuple[str, ...], seed: int = 0) -> dict[str, Any]:
    from kernelcast.datagen.args import SELECTORS, UnsupportedArgument
    from kernelcast.instrument.harness import Harness

    from kernelcast.clang import kernel_signatures

    cells: dict[tuple[int, str], Cell] = {}
    jobs: list[tuple[Kernel, LaunchConfig]] = []
    t0 = time.time()
    with Harness("auto", meter="none", timeout_s=30) as h:
        limits = DeviceLimits.from_device(h.device)
        for k in bundled_kernels(kernels):
            params = kernel_signatures(k.source, k.build_options).get(k.name)
            if params is None:
                continue
            cfgs = sample_configs(kernel_rng(seed, k.id), limits, k.dims or 1, 2, max(1, configs // 2))
            for c in cfgs:
                try:
                    args = SELECTORS["simple"](params, c.gsize, c.lsize)
                except UnsupportedArgument:
                    continue
                jobs.append((k, LaunchConfig(c.gsize, c.lsize, args)))
        for pass_ in (1, 2):
            noisy: list[tuple[int, str]] = []
            for i, (k, cfg) in enumerate(jobs):
                for pol in policies:
                    m = h.run(k, cfg, _policy(pol))
                    cells.setdefault((i, pol), Cell()).passes[pass_] = m
                    if pol.endswith("+remeasure") and m.time is not None and needs_remeasure(
                            m.status, m.time.cv, sum(m.time.times_us) * m.time.group * 1e-6):
                        noisy.append((i, pol))
            for i, pol in noisy:      # later, interleaved with the other noisy ones
                k, cfg = jobs[i]
                c = cells[(i, pol)]
                c.passes[pass_] = _better(c.passes[pass_], h.run(k, cfg, _policy(pol)))
    out: dict[str, Any] = {"configurations": len(jobs), "kernels": kernels, "wall_s": round(time.time() - t0, 1),
                           "policies": {}}
    for pol in policies:
        cvs, same, diffs, load, other, groups, vs_legacy = [], [], [], [], [], [], []
        for i in range(len(jobs)):
            c = cells.get((i, pol))
            if c is None or any(c.passes.get(p) is None or c.passes[p].status != "ok" for p in (1, 2)):
                continue
            a, b = c.passes[1], c.passes[2]
            assert a.time is not None and b.time is not None
            cvs += [a.time.cv, b.time.cv]
            d = abs(b.time.median_us / a.time.median_us - 1) if a.time.median_us > 0 else math.inf
            diffs.append(d)
            same.append(d <= 0.03)
            groups += [a.time.group, b.time.group]
            ref = cells.get((i, "legacy"))
            for p_ in (1, 2):
                r = ref.passes.get(p_) if ref is not None else None
                if r is not None and r.status == "ok" and r.time is not None and r.time.median_us > 0:
                    vs_legacy.append(c.passes[p_].time.median_us / r.time.median_us)
            for m in (a, b):
                load.append(m.machine.get("load_avg_1m", math.nan))
                f = m.machine.get("other_cpu_frac")
                other.append(math.nan if f is None else f)
        cv = np.asarray(cvs)
        out["policies"][pol] = {
            "rows": len(cvs), "configs_ok": len(same),
            "share_cv_le_5pct": float((cv <= 0.05).mean()) if len(cv) else None,
            "cv_p25": float(np.percentile(cv, 25)) if len(cv) else None,
            "cv_median": float(np.median(cv)) if len(cv) else None,
            "cv_p75": float(np.percentile(cv, 75)) if len(cv) else None,
            "share_reproduced_3pct": float(np.mean(same)) if same else None,
            "median_abs_diff": float(np.median(diffs)) if diffs else None,
            "mean_load_avg": float(np.nanmean(load)) if load else None,
            "mean_other_cpu_frac": float(np.nanmean(other)) if other and not np.all(np.isnan(other)) else None,
            "median_group": float(np.median(groups)) if groups else None,
            "median_vs_legacy": float(np.median(vs_legacy)) if vs_legacy else None,
        }
    return out


def format_report(r: dict[str, Any]) -> str:
    lines = [f"{r['configurations']} configurations of {r['kernels']} bundled kernels, 2 passes, "
             f"{r['wall_s']:.0f} s (machine shared: see load and other-CPU share)",
             f"{'policy':<20} {'rows':>5} {'CV<=5%':>7} {'CV p25':>7} {'CV med':>7} {'CV p75':>7} "
             f"{'repro3%':>8} {'med|d|':>7} {'load':>5} {'other':>6} {'group':>6} {'vs legacy':>9}"]
    for pol, p in r["policies"].items():
        if not p["rows"]:
            lines.append(f"{pol:<20} no rows")
            continue
        other = p["mean_other_cpu_frac"]
        vs = p["median_vs_legacy"]
        lines.append(f"{pol:<20} {p['rows']:5d} {p['share_cv_le_5pct']:7.1%} {p['cv_p25']:7.3f} {p['cv_median']:7.3f} "
                     f"{p['cv_p75']:7.3f} {p['share_reproduced_3pct']:8.1%} {p['median_abs_diff']:7.3f} "
                     f"{p['mean_load_avg']:5.2f} {'' if other is None else f'{other:6.2f}'} {p['median_group']:6.0f} "
                     f"{'' if vs is None else f'{vs:9.2f}'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m kernelcast.bench.noise", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=12, help="bundled kernels (first by id)")
    ap.add_argument("--configs", type=int, default=6, help="configurations per kernel")
    ap.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated of {', '.join(POLICIES)}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    pols = tuple(p for p in a.policies.split(",") if p)
    bad = [p for p in pols if p not in POLICIES]
    if bad or not pols or a.kernels < 1 or a.configs < 1:
        print(f"error: bad --policies {bad} (have {', '.join(POLICIES)}) or --kernels/--configs < 1", file=sys.stderr)
        return 2
    r = run(a.kernels, a.configs, pols, a.seed)
    print(json.dumps(r, indent=2) if a.json else format_report(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
